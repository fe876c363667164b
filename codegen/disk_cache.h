#pragma once
/// \file disk_cache.h
/// The on-disk cache of compiled kernels (LLVM object code, CUDA CUBIN/PTX). An entry is
///   "KILNOBJ1" | u64 key length | key | u64 object length | u64 FNV-1a of the object | object
/// in a file named by the key's hash. The key holds everything the object depends on
/// (kernel text, target, compiler versions). Entries are written to a temporary file and
/// renamed, so readers never see half an entry; anything that does not parse, or that the
/// caller's validator rejects, is counted as a reject and recompiled by the caller.
/// Not thread-safe: callers serialize access.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace kiln::codegen {

/// One directory of cache entries with a fixed file extension.
class DiskCache {
public:
  /// A cache whose files end in `extension` (".o", ".cubin"); disabled until open().
  explicit DiskCache(std::string extension) : extension_(std::move(extension)) {}
  /// True when open() found a directory to read from (written to as well where it can).
  bool enabled() const { return !dir_.empty(); }
  size_t hits = 0;    ///< entries read back whole and valid
  size_t rejects = 0; ///< entries found corrupt, truncated or invalid

  /// Uses `dir` (created if missing). "" disables the cache silently; a directory that
  /// cannot be created or read disables it with one warning line; a readable directory
  /// that cannot be written (a read-only warm cache) is only read, with one warning.
  void open(const std::string& dir);
  /// The object stored under `key`, if its entry is whole and valid(object) holds.
  std::optional<std::string> read(const std::string& key, const std::function<bool(const std::string&)>& valid);
  /// Stores `object` under `key` (atomically). A failed write leaves that entry out, with
  /// one warning per cache; reads and other writes go on.
  void write(const std::string& key, const std::string& object);
  /// Recounts the last hit as a reject: its object passed valid() but the caller could not use it.
  void reject_hit() {
    --hits;
    ++rejects;
  }
  /// Prints the one-line "kernel disk cache disabled" warning, saying why.
  static void warn_disabled(const std::string& why);

private:
  std::string extension_;
  std::string dir_;
  bool writable_ = false;
  bool warned_write_ = false;
  std::string path(const std::string& key) const;
};

} // namespace kiln::codegen

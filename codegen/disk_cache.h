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
  /// True when open() found a writable directory.
  bool enabled() const { return !dir_.empty(); }
  size_t hits = 0;    ///< entries read back whole and valid
  size_t rejects = 0; ///< entries found corrupt, truncated or invalid

  /// Uses `dir` (created if missing); "" or an unwritable directory disables the cache
  /// (the latter with one warning line).
  void open(const std::string& dir);
  /// The object stored under `key`, if its entry is whole and valid(object) holds.
  std::optional<std::string> read(const std::string& key, const std::function<bool(const std::string&)>& valid);
  /// Stores `object` under `key` (atomically); a failed write disables the cache with a warning.
  void write(const std::string& key, const std::string& object);

private:
  std::string extension_;
  std::string dir_;
  std::string path(const std::string& key) const;
};

} // namespace kiln::codegen

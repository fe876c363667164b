#pragma once
/// \file llvm_jit.h
/// CPU kernels: kernel IR -> LLVM IR (host-tuned O3) -> native code through ORC LLJIT.
/// This header pulls in no LLVM header.
///
/// Calling contract of a compiled kernel: `buffers[b]` points at element 0 of
/// buffer b (at least 64 bytes allocated, naturally aligned for its dtype);
/// `params[k]` is i64 parameter k. An output buffer must not overlap any other
/// buffer of the same call (outputs are marked noalias); inputs may overlap each other.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// CPU kernel ABI: process the flattened domain points [begin, end).
using CpuKernelFn = void (*)(int64_t begin, int64_t end, void* const* buffers, const int64_t* params);

/// The process-wide LLVM JIT for CPU kernels.
class LlvmJit {
public:
  /// The process-wide instance (created on first use; thread-safe).
  static LlvmJit& instance();
  /// Native code for `k` (which must be finalize()d). Cached in memory by k.name:
  /// the same name returns the same pointer. Thread-safe. Throws kiln::Error when
  /// LLVM fails to compile or link the module.
  CpuKernelFn compile(const Kernel& k);
  /// Where compile() found the kernel.
  enum class Source { Memory, Disk, Compiled };
  /// compile(), also saying where the code came from.
  CpuKernelFn compile(const Kernel& k, Source& source);
  /// Enables the on-disk cache of object code under `dir` (created if missing); "" disables it.
  /// An unusable directory disables it with one warning on stderr.
  void set_disk_cache(const std::string& dir);
  /// Kernels loaded from the disk cache so far.
  size_t disk_hits() const;
  /// Disk cache entries found corrupt or truncated (and recompiled) so far.
  size_t disk_rejects() const;
  /// Textual LLVM IR of the kernel's module, after the O3 pipeline when `optimized` (KILN_DEBUG=4).
  std::string llvm_ir(const Kernel& k, bool optimized = true);
  /// Host assembly of the kernel's optimized module (KILN_DEBUG=5).
  std::string assembly(const Kernel& k);
  /// Wall time of the last compile() that missed the cache, in milliseconds.
  double last_compile_ms() const;
  /// Number of kernels and GEMM support modules compiled (cache misses) so far.
  size_t compiled_count() const;
  /// The host CPU name and features, for cache keys (e.g. "sapphirerapids +avx2,...").
  std::string target_description() const;

  ~LlvmJit();
  LlvmJit(const LlvmJit&) = delete;
  LlvmJit& operator=(const LlvmJit&) = delete;

private:
  LlvmJit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace kiln::codegen

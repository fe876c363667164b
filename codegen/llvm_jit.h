#pragma once
/// \file llvm_jit.h
/// CPU kernels: kernel IR -> LLVM IR (host-tuned O3) -> native code through ORC LLJIT.
/// This header pulls in no LLVM header.
///
/// Tiers: a kernel missing from both caches is first compiled by the quick tier (the
/// always-inliner and SROA, then LLVM's fast instruction selection at codegen level
/// None: a few ms) and returned at once; the optimized tier (O3, O2 for GEMM kernels,
/// codegen level Aggressive) compiles it again in the background on oneTBB and swaps its
/// code into the kernel's slot, so later launches run it. Both tiers compute the same
/// bits (the IR has no fast-math flags; multiply-adds are explicit: see lower_fmuladd in
/// llvm_jit.cpp); test_tiers checks it. Only optimized code goes to the disk cache.
///
/// Calling contract of a compiled kernel: `buffers[b]` points at element 0 of
/// buffer b (at least 64 bytes allocated, naturally aligned for its dtype);
/// `params[k]` is i64 parameter k. An output buffer must not overlap any other
/// buffer of the same call (outputs are marked noalias); inputs may overlap each other.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "codegen/kernel_ir.h"
#include "codegen/target.h"

namespace kiln::codegen {

/// CPU kernel ABI: process the flattened domain points [begin, end).
using CpuKernelFn = void (*)(int64_t begin, int64_t end, void* const* buffers, const int64_t* params);

/// A compiled kernel's entry point, owned by the JIT (alive as long as the process):
/// the quick tier's code until the optimized code replaces it. A caller that keeps the
/// slot and calls get() at each launch runs the best code compiled so far.
struct CpuKernelSlot {
  std::atomic<CpuKernelFn> fn{nullptr}; ///< the code launches run now
  CpuKernelFn quick = nullptr;          ///< the quick tier's code (null when there was none)
  /// The code to run now (one atomic load).
  CpuKernelFn get() const { return fn.load(std::memory_order_acquire); }
  /// True once the optimized code is in (or was the only code: disk cache, tiers off).
  bool optimized() const { return get() != quick; }
};

/// What the JIT has done so far (for tests, benchmarks and KILN_DEBUG).
struct JitStats {
  size_t quick = 0;          ///< kernels compiled by the quick tier (then optimized in the background)
  size_t optimized = 0;      ///< kernels compiled by the optimized tier (in the background or, tiers off, at once)
  size_t pending = 0;        ///< background compiles queued or running
  double first_use_ms = 0;   ///< total wall time of the compiles callers waited for (quick, or optimized with tiers off)
  double background_ms = 0;  ///< total wall time of the background compiles
  // Where the quick tier's time goes (totals, GEMM support routines not included):
  double quick_ir_ms = 0;      ///< emitting, targeting and verifying the LLVM IR
  double quick_passes_ms = 0;  ///< its IR pipeline (quick_passes in llvm_jit.cpp)
  double quick_codegen_ms = 0; ///< instruction selection to object code
  double link_ms = 0;          ///< linking objects into the JIT, both tiers and the disk cache's
};

/// This host's CPU as a scheduling target (ScheduleOptions::target): its widest vectors
/// (AVX-512, AVX or SSE), FMA, and vector registers (32 with AVX-512, else 16), from
/// LLVM's view of the host, computed once.
Target host_cpu_target();

/// The process-wide LLVM JIT for CPU kernels.
class LlvmJit {
public:
  /// The process-wide instance (created on first use; thread-safe).
  static LlvmJit& instance();
  /// Where compile() found the kernel.
  enum class Source { Memory, Disk, Compiled };
  /// The slot of `k`'s code (k must be finalize()d): from memory, else the disk cache,
  /// else compiled (by the quick tier when tiers are on). Cached in memory by k.name: the
  /// same name returns the same slot. Thread-safe. Throws kiln::Error when LLVM fails to
  /// compile or link the module.
  const CpuKernelSlot& kernel(const Kernel& k, Source& source);
  /// The code `k`'s slot holds now (see kernel()).
  CpuKernelFn compile(const Kernel& k);
  /// compile(), also saying where the code came from.
  CpuKernelFn compile(const Kernel& k, Source& source);
  /// The modules of routines `k`'s code calls, which the JIT links once per process (a CPU
  /// GEMM kernel's support parts), space-separated; "" for a kernel that calls none.
  static std::string support_name(const Kernel& k);
  /// Links the routines `k`'s code calls (see support_name) for the tier kernel() compiles
  /// `k` by, compiling them now where neither cache has them; nothing for other kernels, nor for
  /// one already in memory.
  /// kernel() does it too, but one compiling several kernels at once can start it first
  /// rather than have every GEMM kernel wait for it. Thread-safe.
  void prepare_support(const Kernel& k);
  /// Tiered compilation on (the default) or off (KILN_JIT_TIER=0: every miss is compiled
  /// by the optimized tier before it is returned).
  void set_tiered(bool on);
  /// When on, the background tier prints one line on stderr per kernel it swaps in (KILN_DEBUG>=1).
  void set_log(bool on);
  /// When on, every function linked from then on (either tier, the disk cache, GEMM support
  /// routines) gets a line in /tmp/perf-PID.map, so that Linux perf names kernels (KILN_PERF_MAP=1).
  void set_perf_map(bool on);
  /// Waits until every background compile queued so far has been swapped in.
  void wait_background();
  /// Counters of the tiers.
  JitStats stats() const;
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
  /// Wall time of the last compile() that missed the cache (its quick tier when tiered), in milliseconds.
  double last_compile_ms() const;
  /// Number of kernels and GEMM support modules compiled (cache misses, counted once whatever the tiers) so far.
  size_t compiled_count() const;
  /// The host CPU name and features, for cache keys (e.g. "sapphirerapids +avx2,...").
  std::string target_description() const;

  /// Finishes the background compiles (so that the disk cache gets them), then tears down.
  ~LlvmJit();
  LlvmJit(const LlvmJit&) = delete;
  LlvmJit& operator=(const LlvmJit&) = delete;

private:
  LlvmJit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace kiln::codegen

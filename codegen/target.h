#pragma once
/// \file target.h
/// What a kernel is planned for: the CPU of this host (its vector width, FMA and vector
/// registers) or a CUDA GPU (compute capability, SMs, resident threads, shared memory).
/// Scheduling receives it (ScheduleOptions::target) and the form planner (form.h) reads
/// it; no pass asks the hardware itself. The LLVM backend computes the host's CPU target
/// (host_cpu_target() in llvm_jit.h), the GPU runtime a GPU's (runtime::Gpu::target()).

#include <cstdint>
#include <string>

namespace kiln::codegen {

/// A CPU or CUDA target. Only the fields of its kind are set (the others stay 0).
struct Target {
  /// The kind of processor.
  enum class Kind : uint8_t { CPU, CUDA };
  Kind kind = Kind::CPU;             ///< what the kernels run on
  // CPU
  int vector_bits = 0;               ///< widest SIMD vector (128 SSE, 256 AVX, 512 AVX-512)
  bool fma = false;                  ///< fused multiply-add instructions
  int vector_registers = 0;          ///< architectural vector registers (16, or 32 with AVX-512)
  /// Threads the kernels may run on (the task arena's parallelism when the schedule is made);
  /// 0: unknown, planned as for several. A GEMM is split into tasks only for more than one.
  int threads = 0;
  // CUDA
  int cc_major = 0;                  ///< compute capability, major (9 for sm_90)
  int cc_minor = 0;                  ///< compute capability, minor
  int sm_count = 0;                  ///< streaming multiprocessors (0: unknown)
  int max_threads_per_sm = 0;        ///< resident threads per SM (0: unknown)
  int64_t shared_bytes_per_block = 0; ///< static shared memory a block may use (0: unknown)

  /// A CPU target (`threads` 0: unknown).
  static Target cpu(int vector_bits, bool fma, int vector_registers, int threads = 0);
  /// A CUDA target; the sizes may be 0 where unknown (compile checks without a GPU).
  static Target cuda(int cc_major, int cc_minor, int sm_count = 0, int max_threads_per_sm = 0,
                     int64_t shared_bytes_per_block = 0);
  /// The baseline x86-64 CPU (SSE2: 128-bit vectors, no FMA, 16 registers): what
  /// ScheduleOptions assumes when no target is given.
  static Target baseline_cpu() { return cpu(128, false, 16); }

  /// A short text form naming every field (KILN_DEBUG=2 prints it; fit for a cache key),
  /// e.g. "cpu v512 fma r32" (" t2" follows where the threads are known),
  /// "cuda sm_90 sms 132 tpsm 2048 smem 49152".
  std::string str() const;
  /// Equal when every field is (same kind and the same numbers).
  bool operator==(const Target&) const = default;
};

} // namespace kiln::codegen

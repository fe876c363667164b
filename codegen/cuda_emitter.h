#pragma once
/// \file cuda_emitter.h
/// Kernel IR -> CUDA C++ source (the GPU counterpart of the LLVM emitter; it reads
/// the same kernel IR and gives the same op semantics, see kernel_ir.h).
///
/// Launch ABI of an emitted kernel `NAME`:
///   extern "C" __global__ void NAME(const T0* __restrict__ b0, ..., Tn* __restrict__ bn,
///                                   long long p0, ..., long long p{num_params-1})
/// - one pointer per kernel buffer, in the IR's order (inputs `const`, outputs not);
///   element types: float, double, int, long long, and `unsigned char` for bool (0/1);
///   an output must not overlap any other buffer of the launch (they are __restrict__);
/// - then every i64 parameter by value (so cuLaunchKernel's kernelParams is
///   {&b0, ..., &bn, &p0, ...} and no device allocation is needed for parameters);
/// - any grid and block shape: the kernel runs a grid-stride loop over the flattened
///   domain (x dimension only); the domain size is computed from the parameters.
/// Each domain point runs its reductions sequentially in the IR's order (one thread
/// per point; no shared memory, no __syncthreads), so the source also runs on the CPU
/// behind codegen/cuda_shim.h.
///
/// Numerics: compile with NVRTC's --fmad=false (nvrtc_compile does), never with
/// --use_fast_math. The kernel's own arithmetic then rounds like the LLVM path's, op by
/// op; exp/log/sin/cos/tanh/sigmoid are kiln's own polynomials ported from
/// llvm_math.cpp (same constants, fma where LLVM contracts), not CUDA's expf/logf.
/// Float pow is CUDA's double pow (<= 2 ulp in f64; f32 rounded once from it), where the
/// CPU uses libm's pow. Float sums follow the order of codegen::sum_lanes, as on the CPU,
/// so they agree bitwise too.

#include <string>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// A self-contained CUDA C++ translation unit defining the kernel `k.name` (k must be
/// finalize()d). It starts with kiln's prelude (guarded, so several kernels can be
/// concatenated into one translation unit).
std::string emit_cuda(const Kernel& k);

/// For the CPU shim only (codegen/cuda_shim.h): the text of a host function
///   extern "C" void NAME_shim(unsigned grid, unsigned block, void* const* buffers,
///                             const long long* params)
/// that "launches" the kernel on the CPU (buffers and params as for the CPU ABI).
/// Append it to emit_cuda(k)'s text and compile with the shim header included first.
std::string emit_cuda_shim_entry(const Kernel& k);

} // namespace kiln::codegen

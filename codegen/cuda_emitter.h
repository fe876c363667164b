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
/// - a 1-d launch (x only); cuda_launch_config() gives the grid and block for a launch's
///   parameter values. Every kernel is correct for any grid (it loops over its work with
///   a grid-stride loop); the block is free except where the config says `fixed_block`.
///
/// The layout follows the kernel's form (Kernel::form, decided by plan_form() in form.h for
/// a CUDA target; the emitter and cuda_launch_config read it, they do not infer it).
/// Elementwise and Reduction forms (plain kernels): a grid-stride loop over the flattened
/// domain (the domain size is computed from the parameters); each domain point runs its
/// reductions sequentially in the IR's order (one thread per point, no shared memory).
/// Vector form: an Elementwise-form kernel with an f32 load or store whose
/// offset steps by exactly one element along the innermost loop var also gets a second
/// loop, taken when the innermost extent divides by 4: 4 consecutive points a thread,
/// each such access one kiln_load4 / kiln_store4 (a 128-bit access where the address is
/// 16-byte aligned, else 4 scalar ones), every lane computing the scalar form's
/// expression for its point (same bits). cuda_launch_config counts threads accordingly.
///
/// Row form (a map after the reductions: softmax, layernorm; or reductions alone, with
/// a float sum among them: sum, mean, a norm's statistics): exactly 256 threads a block,
/// 16 per row (domain point), a grid-stride loop over blocks of 16 rows. A float
/// sum in sum_lanes order is split across the row's threads: thread g computes lane g
/// (16 f32 / 8 f64 lanes), the lanes are combined pairwise by __shfl_down_sync in
/// sum_lanes' order and broadcast by __shfl_sync (runs shorter than the lanes are summed
/// sequentially by every thread); a max or min over one dim is split the same way and
/// combined by a __shfl_xor_sync butterfly (exact, so any order gives the same bits);
/// other reductions are computed by each thread of the row alike; the map's points are split across the row's threads (without a map, the
/// row's first thread stores the results). A sum's parallelism is thus at most its lanes:
/// the price of results bitwise equal to the CPU's (a sum of a whole large tensor into one
/// value runs on 16 threads).
///
/// The tiled GEMM: a Gemm-form kernel (Kernel::gemm, without a CPU tiling) is emitted as a
/// shared-memory tiled GEMM. A block of exactly 256 threads (16 x 16; the kernel traps
/// otherwise) computes a TM x TN tile of one batch point's output (f32: 64 x 64 instead
/// for products of few large tiles, see set_cuda_small_gemm_below), each thread a
/// MR x NR register tile (f32: rows 64 q + 4 ty + 0..3, columns 64 q + 4 tx + 0..3, each
/// run of 4 one 16-byte shared read; f64: rows ty + 16 i, columns tx + 16 j); the operands' k tiles of BK are staged through __shared__
/// memory, double-buffered with one __syncthreads per k tile (the next tile's loads are
/// in flight while the current one is multiplied). f32: 128 x 128 tiles, 8 x 8 per
/// thread (64 FMAs per 4 16-byte shared loads, enough to keep sm_90's FMA units ahead of its
/// shared-memory bandwidth), BK 8, 16.5 KiB of shared memory; f64: 64 x 64, 4 x 4,
/// BK 16, 32.5 KiB (half the accumulator registers of f32's tile). The operands are
/// read through the kernel's own index expressions (views need no copy), staged by
/// threads running along the dim they are contiguous in; the grid loops over the tiles
/// t = (batch * mtiles + mt) * ntiles + nt. Each output element accumulates
/// fma(a, b, acc) over k = 0, 1, ..., K-1 in order, exactly the LLVM path's order, and
/// the kernel's stores (the fused epilogue) then run for it.
/// Attention form (Kernel::attention): exactly 256 threads a block, one block per task (a batch
/// point's 64 query rows; the backward's key blocks and query chunks), the scores and products over
/// __shared__ tiles; layout and order in codegen/src/cuda_attention.cpp. At most 48 KiB of static
/// shared memory (f64's forward: 47 KiB).
/// The CPU shim (tests/cuda_emu/cuda_shim.h) runs plain kernels as a loop over threads, the
/// tiled GEMM, row and attention kernels with one fiber per CUDA thread.
///
/// Numerics: compile with NVRTC's --fmad=false (nvrtc_compile does), never with
/// --use_fast_math. The kernel's own arithmetic then rounds like the LLVM path's, op by
/// op; exp/log/sin/cos/tanh/sigmoid are kiln's own polynomials, instantiated from the
/// same templates as the LLVM path's (codegen/src/math_body.h), not CUDA's expf/logf.
/// Float pow is CUDA's double pow (<= 2 ulp in f64; f32 rounded once from it), where the
/// CPU uses libm's pow. Float sums follow the order of codegen::sum_lanes, as on the CPU,
/// so they agree bitwise too.

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// A self-contained CUDA C++ translation unit defining the kernel `k.name` (k must be
/// finalize()d). It starts with kiln's prelude (guarded, so several kernels can be
/// concatenated into one translation unit).
std::string emit_cuda(const Kernel& k);

/// How to launch an emitted kernel (a 1-d grid of 1-d blocks, static shared memory only).
struct CudaLaunchConfig {
  unsigned grid = 0;          ///< blocks; 0 when there is nothing to compute (do not launch)
  unsigned block = 0;         ///< threads per block
  bool fixed_block = false;   ///< the kernel needs exactly `block` threads (tiled GEMM, row kernels); else any block works
  unsigned shared_bytes = 0;  ///< static __shared__ memory per block (part of the kernel; nothing to pass)
};

/// What the launch configuration reads of the device (0: unknown).
struct CudaDeviceLimits {
  int sm_count = 0;           ///< streaming multiprocessors
  int max_threads_per_sm = 0; ///< resident threads per SM (2048 on sm_90)
};

/// Grid-stride kernels get at most this many full waves of resident blocks.
constexpr int64_t kMaxWaves = 8;

/// f32 GEMMs of fewer 128 x 128 tiles than `tiles` (default 64, half an H200's SMs) run
/// 64 x 64 tiles (4 x 4 a thread, k tiles of 16: four times the blocks); the kernel holds
/// both bodies and picks by its sizes, as cuda_launch_config does. Changes the emitted
/// source (tests force either body: 0 never takes the small one).
void set_cuda_small_gemm_below(int tiles);

/// The launch configuration of kernel k for the parameter values of one launch: 256
/// threads a block; one block per output tile (tiled GEMM), per 16 rows (row kernels) or
/// per 256 domain points. With the device's limits, the grid of plain and row kernels is
/// capped at kMaxWaves waves of resident blocks (sm_count * max_threads_per_sm / 256 per
/// wave): every kernel loops over its work, so each thread then takes several points
/// instead of the GPU scheduling millions of short blocks.
CudaLaunchConfig cuda_launch_config(const Kernel& k, const std::vector<int64_t>& params,
                                    const CudaDeviceLimits& limits = {});

/// For the CPU shim only (tests/cuda_emu/cuda_shim.h): the text of a host function
///   extern "C" void NAME_shim(unsigned grid, unsigned block, void* const* buffers,
///                             const long long* params)
/// that "launches" the kernel on the CPU (buffers and params as for the CPU ABI); block
/// must be cuda_launch_config's where it is fixed.
/// It also defines `extern "C" const int NAME_shim_arity[2]`: the number of buffers and
/// of i64 parameters (what the CPU emulator of the driver needs to unpack cuLaunchKernel's
/// kernelParams, which the real driver reads from the CUBIN).
/// Append it to emit_cuda(k)'s text and compile with the shim header included first.
std::string emit_cuda_shim_entry(const Kernel& k);

} // namespace kiln::codegen

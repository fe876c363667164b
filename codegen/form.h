#pragma once
/// \file form.h
/// Form planning: how each kernel is emitted on a target (its KernelForm, kernel_ir.h),
/// decided once per kernel after lowering and recorded in the kernel. The emitters and
/// the CUDA launch configuration read the form; none infers it from the IR. The CPU
/// GEMM's tiling is computed here from the Target's vector width and registers
/// (backend-neutral code: no LLVM header, no question to the hardware).

#include <cstdint>
#include <optional>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/target.h"

namespace kiln::codegen {

/// Threads per row of a CUDA Row-form kernel (16 rows of 16 threads a block; see cuda_emitter.h).
constexpr int kCudaRowThreads = 16;

/// What plan_form() decides for one kernel.
struct FormPlan {
  KernelForm form = KernelForm::Elementwise; ///< the form
  std::optional<GemmTiling> gemm;            ///< the GEMM form's layout (form Gemm only; CPU tiling on a CPU target)
  int64_t gemm_tasks = 0;                    ///< CPU GEMM or attention form: its tasks (KernelLaunch::gemm_tasks)
  int64_t attention_rows = 0;                ///< attention form: AttentionSpec::rows
  /// The values of the parameters the form adds to the kernel's (numbered from its num_params
  /// on): a CPU GEMM's rows and columns per task (GemmTiling::mc_param, nc_param).
  std::vector<int64_t> added_params{};
};

/// The form of the lowered kernel `k` on target `t`; `params` are the values of k's
/// parameters (only a CPU target's GEMM reads them: it sizes its blocks from them).
/// Per form:
///   * Scan: a kernel with a ScanLoop (Kernel::scan), on every target;
///   * Gemm: a matmul kernel lowering marked (Kernel::matmul). On the CPU always, with the
///     tiling of cpu_gemm_tiling() and, where the target has more than one thread (or an
///     unknown number), smaller blocks for small products (so that they still split among
///     threads); on CUDA where the tiled GEMM applies (one fma Sum of
///     a float product over one k extent, no map, `a` reading no column var and `b` no row
///     var), without a CPU tiling; otherwise Reduction;
///   * Attention: an attention kernel (Kernel::attention), on every target; on the CPU with one
///     task per batch point and block of kAttentionQueryBlock query rows (the backward: per batch point, since
///     its dk and dv sum over every query row), and as many query rows in registers
///     (AttentionSpec::rows) as half the target's vector registers hold scores of a key block; on
///     CUDA rows 1 (unused: the tiles are cuda_attention.cpp's, its tasks cuda_launch_config's);
///   * Row: reductions and a map; on CUDA also reductions with a float sum in sum_lanes
///     order (see Reduction), when every sum's lanes fit a row's kCudaRowThreads threads;
///   * Reduction: other kernels with reductions;
///   * Elementwise: kernels without reductions.
/// The form never changes a result (see KernelForm).
FormPlan plan_form(const Kernel& k, const std::vector<int64_t>& params, const Target& t);

/// Records `plan` in `k` (its form, GEMM layout and attention rows, and the parameters it adds:
/// the caller appends plan.added_params to the launch's); call before finalize(), since the GEMM
/// layout is part of the kernel's text.
void set_form(Kernel& k, const FormPlan& plan);

/// The CPU GEMM's tile sizes for dtype `dtype` (Float32 or Float64) on CPU target `t`,
/// before plan_form() shrinks the blocks of small products: an mr x nr register tile of
/// two vectors of columns using 3/4 of the vector registers as accumulators (12 x 32 f32
/// with AVX-512's 32 registers, 6 x 16 with AVX2's 16), rows in blocks of mc = 384,
/// 2 KiB of columns per block, k in blocks of kc = 256. m_var and n_var are -1.
GemmTiling cpu_gemm_tiling(const Target& t, DType dtype);

/// Tests only: cpu_gemm_tiling() returns `tiling` (any mr, nr, mc, kc with mc % mr == 0
/// and nc % nr == 0; its m_var and n_var are ignored) until called again with nullopt.
/// Thread-safe.
void set_gemm_tiling_override(std::optional<GemmTiling> tiling);

} // namespace kiln::codegen

#pragma once
/// \file cuda_check.h
/// KILN_CUDA_CHECK=1 (Options::cuda_check): every kernel the executor compiles for the
/// CPU is also emitted as CUDA C++ and compiled by NVRTC for sm_90 (CUBIN, and the
/// compute_90 PTX behind it), proving the GPU path without a GPU.

#include <cstddef>

#include "codegen/kernel_ir.h"

namespace kiln::runtime {

/// When options().cuda_check is on: plans `k`'s IR for a CUDA sm_90 target (its form
/// there, see form.h), emits it as CUDA and compiles it with NVRTC for
/// sm_90, keeping both the CUBIN and the compute_90 PTX it was assembled from, once per
/// kernel name per process; a source that compiled
/// before with the same NVRTC is skipped (a marker in kiln-cuda-checked/ beside
/// $KILN_CACHE_DIR, e.g. ~/.cache/kiln-cuda-checked).
/// Compiles are batched (NVRTC's cost is mostly per program): a kernel waits until 64 are queued,
/// cuda_checked_count() is read or the process exits. So a compile failure is a kiln::Error (the
/// NVRTC log and the failing kernel's source, found by compiling the batch's kernels alone) thrown
/// by whichever check filled the batch, or, at exit, printed with exit status 1.
/// Where NVRTC is absent, prints one line saying the checks are skipped and why (once), and returns.
void cuda_check_kernel(const codegen::Kernel& k);

/// Kernels checked by cuda_check_kernel so far (compiled now or marked as compiled
/// earlier; each counts once), after compiling those still waiting.
size_t cuda_checked_count();

} // namespace kiln::runtime

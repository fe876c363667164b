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
/// Throws kiln::Error with the NVRTC log and the source on a compile failure. Where NVRTC is absent, prints one line saying the
/// checks are skipped and why (once), and returns.
void cuda_check_kernel(const codegen::Kernel& k);

/// Kernels checked by cuda_check_kernel so far (compiled now or marked as compiled
/// earlier; each counts once).
size_t cuda_checked_count();

} // namespace kiln::runtime

#pragma once
/// \file gemm.h
/// The host's GEMM tiling (register tile and cache blocks), chosen from the CPU's
/// vector width and register count. Lowering puts it into a matmul kernel's IR
/// (Kernel::gemm); the LLVM emitter generates the GEMM from it (llvm_gemm.cpp).
/// This header pulls in no LLVM header.

#include <optional>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// Tile sizes for a matmul of dtype `dtype` (Float32 or Float64) on this host; the
/// m_var and n_var fields are left at -1 for the caller.
GemmTiling host_gemm_tiling(DType dtype);

/// Tests only: host_gemm_tiling() returns `tiling` (any mr, nr, mc, kc with mc % mr == 0
/// and nc % nr == 0) until called again with nullopt. Thread-safe.
void set_gemm_tiling_override(std::optional<GemmTiling> tiling);

} // namespace kiln::codegen

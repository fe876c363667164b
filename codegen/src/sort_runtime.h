#pragma once
/// \file sort_runtime.h
/// Internal: the CPU argsort's one routine per key dtype, which the kernels the LLVM emitter makes of an
/// argsort's ScanLoop (kernel_ir.h) call once per column. The JIT defines each as an absolute symbol
/// (llvm_jit.cpp), so kernels find them in a static binary and in the shared library alike, whatever
/// the dynamic symbol table exports.
///
/// ABI (extern "C"): void NAME(void* keys, int64_t* idx, int64_t n, int64_t descending, void* keys_tmp,
/// int64_t* idx_tmp). keys holds the column's n keys in the dtype's memory type (bool as one byte, 0 or
/// 1), keys_tmp room for n more, idx_tmp for n positions; the routine writes to idx the positions
/// 0..n-1 of the keys in stable sorted order (ascending, or descending where `descending` != 0), NaN
/// above every number, -0.0 equal to +0.0, and leaves keys and keys_tmp overwritten. Work: a stable
/// merge sort, O(n log n) (insertion-sorted runs of 16, then merges between the two arrays).

#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/dtype.h"

namespace kiln::codegen {

/// The routine's symbol for keys of `key`'s dtype: "kiln_argsort_f32", "_f64", "_i32", "_i64", "_bool".
const char* argsort_routine(DType key);

/// Every routine's symbol and address (what the JIT defines).
std::vector<std::pair<const char*, void*>> sort_routines();

} // namespace kiln::codegen

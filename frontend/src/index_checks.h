#pragma once
// The index checks shared by the indexing ops (indexops.cpp: gather, scatter_add, ...; scatter.cpp:
// scatter, scatter_reduce, index_put, ...).

#include <string>

#include "kiln/tensor.h"

namespace kiln::detail {

/// Throws op's kiln::Error unless x and index are defined and index is an integer tensor.
void require_index(const std::string& op, const Tensor& index, const Tensor& x, const Loc& loc);
/// The index with its values checked against [0, bound): on the host when they are computed already
/// (naming the first bad value's position), otherwise in the kernel that reads them
/// (graph/index_check.h; reported when the result is realized). `range` says what is indexed.
Tensor checked_index(const std::string& op, const Tensor& index, int64_t bound, const std::string& range,
                     const Loc& loc);
/// "dim 1 of the input [3, 5] (index [4, 3])": what an index value is checked against (`of`: "input", "self").
std::string range_text(const char* of, int64_t dim, const Tensor& x, const Tensor& index);
/// The shared checks of gather and the scatters: the index's rank and extents against `x` (the input,
/// or self) off `dim`, and against `src` everywhere when given.
void check_extents(const std::string& op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src,
                   const Loc& loc);

} // namespace kiln::detail

#pragma once
/// \file arrange.h
/// Tensors built from others or from sizes, as in PyTorch: meshgrid, cartesian_prod, tril_indices,
/// triu_indices, rot90, block_diag. Compositions of movement ops (reshape, expand, flip, transpose, pad,
/// concat), so their gradients, fusion and compile() come with them.

#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// torch.meshgrid: for k 0-d or 1-d tensors of sizes n0, n1, ..., k tensors of shape [n0, n1, ...]
/// ("ij") where output i varies along dim i; "xy" swaps the first two dims of every output ([n1, n0, ...]).
std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing = "ij",
                             Loc loc = Loc::current());
/// torch.cartesian_prod: the Cartesian product of k 1-d tensors (of one dtype) as rows, [n0 * n1 * ..., k]
/// (row-major: the last tensor varies fastest); one tensor gives itself.
Tensor cartesian_prod(const std::vector<Tensor>& tensors, Loc loc = Loc::current());
/// torch.tril_indices: the [2, N] i64 (row; col) coordinates of the lower triangle of a row x col matrix
/// (col <= row + offset), row by row.
Tensor tril_indices(int64_t row, int64_t col, int64_t offset = 0, Device device = kCPU, Loc loc = Loc::current());
/// torch.triu_indices: the same for the upper triangle (col >= row + offset).
Tensor triu_indices(int64_t row, int64_t col, int64_t offset = 0, Device device = kCPU, Loc loc = Loc::current());
/// torch.rot90: x rotated k times by 90 degrees in the plane of dims (from dims[0] toward dims[1]; k
/// negative: the other way), a flip and a transpose.
Tensor rot90(const Tensor& x, int64_t k = 1, IntList dims = {0, 1}, Loc loc = Loc::current());
/// torch.block_diag: the 0-d, 1-d (one row) or 2-d tensors on the diagonal of one matrix, zeros elsewhere,
/// in their promoted dtype.
Tensor block_diag(const std::vector<Tensor>& tensors, Loc loc = Loc::current());

} // namespace kiln

#pragma once
/// \file indexops.h
/// Indexing along a dim, as in PyTorch: gather / index_select read rows chosen by an integer
/// index; scatter_add / index_add add rows into chosen places (the gradients of the first two);
/// cumsum, cumprod. Indices are checked: a value outside [0, size) is a kiln::Error naming the op, the
/// index's shape and your line (checked on the host for an index already computed, with its
/// position; inside the kernel for a lazy one, reported when the result is realized). Kernels
/// never read or write out of range, and scatter_add sums in a fixed order, so results are
/// bitwise reproducible across thread counts, fused and unfused runs and the CUDA source.

#include "kiln/tensor.h"

namespace kiln {

/// torch.gather: out[i][j][k] = input[index[i][j][k]][j][k] for dim 0 (likewise for other dims).
/// index: i32 or i64, the input's rank, no larger than the input off `dim`; the result has the
/// index's shape and the input's dtype. Its gradient scatters back (scatter_add).
Tensor gather(const Tensor& input, int64_t dim, const Tensor& index, Loc loc = Loc::current());
/// torch.index_select: the input with `dim` replaced by the 1-d (or 0-d) index's entries.
Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index, Loc loc = Loc::current());
/// torch.scatter_add: a copy of self with src[i][j][k] added at [index[i][j][k]][j][k] (dim 0).
/// index no larger than src, and than self off `dim`; src has self's dtype. Each result element
/// sums the values that hit it in index order, from 0, then adds self (a scan kernel: work
/// index.numel() + self.numel(); an inf or NaN in src reaches only the element it is added to).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current());
/// torch.index_add: a copy of self with alpha * source's slice i added at slice index[i] along
/// `dim` (index 1-d, source shaped like self with index.numel() along `dim`).
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1,
                 Loc loc = Loc::current());
/// torch.cumsum: inclusive prefix sums along `dim` (bool and integers give i64, as PyTorch),
/// summed sequentially from 0 by a scan kernel (work: O(size(dim)) per row), an f32 input in
/// f64 as PyTorch's CPU cumsum (each output rounded once); the gradient is the cumulative sum
/// of the adjoint from the end.
Tensor cumsum(const Tensor& input, int64_t dim, Loc loc = Loc::current());
/// torch.cumprod: inclusive prefix products along `dim` (bool and integers give i64, as
/// PyTorch), multiplied sequentially from 1 by a scan kernel (an f32 input in f64, as cumsum).
/// The gradient is exact where the
/// input has zeros (no division by the input, unlike the usual cumsum(g * y) / x), at a cost
/// of O(size(dim)^2) work and memory per row.
Tensor cumprod(const Tensor& input, int64_t dim, Loc loc = Loc::current());

} // namespace kiln

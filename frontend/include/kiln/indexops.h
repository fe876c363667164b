#pragma once
/// \file indexops.h
/// Indexing along a dim, as in PyTorch: gather / index_select read rows chosen by an integer
/// index; scatter_add / index_add add rows into chosen places (the gradients of the first two);
/// cumsum. Indices are checked: a value outside [0, size) is a kiln::Error naming the op, the
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
/// sums the values that hit it in a fixed order (work: self's elements x index.size(dim); a
/// one-hot matrix product when the index is the same along the other dims, as index_add's).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current());
/// torch.index_add: a copy of self with alpha * source's slice i added at slice index[i] along
/// `dim` (index 1-d, source shaped like self with index.numel() along `dim`).
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1,
                 Loc loc = Loc::current());
/// torch.cumsum: inclusive prefix sums along `dim` (bool and integers give i64, as PyTorch).
/// Computed as a masked sum per element in a fixed order (work: size(dim)^2 per row); the
/// gradient is the reversed cumulative sum.
Tensor cumsum(const Tensor& input, int64_t dim, Loc loc = Loc::current());

} // namespace kiln

#pragma once
/// \file indexops.h
/// Indexing along a dim, as in PyTorch: gather / index_select read rows chosen by an integer
/// index; scatter_add / index_add add rows into chosen places (the gradients of the first two);
/// cumsum, cumprod; sort, argsort, topk, msort. Indices are checked: a value outside [0, size)
/// is a kiln::Error naming the op, the index's shape and your line (checked on the host for an
/// index already computed, with its position; inside the kernel for a lazy one, reported when the
/// result is realized). Kernels never read or write out of range, scatter_add sums in a fixed order
/// and sorts are stable, so results are bitwise reproducible across thread counts, fused and
/// unfused runs and the CUDA source.

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

/// torch.sort: (values, indices) of the input sorted along `dim`, ascending (or `descending`).
/// kiln's sort is always stable - equal elements keep their input order, as torch.sort(stable=True)
/// and torch's CPU sort - so `stable` is accepted and changes nothing. NaN sorts above every number
/// (last ascending, first descending, as PyTorch), -0.0 and +0.0 are equal (kept in input order), and
/// bool (false < true) and integer inputs sort too. `auto [values, indices] = sort(x, 1);`. indices
/// are i64 of the input's shape; values = gather(input, dim, indices), so the gradient scatters the
/// adjoint back to where each value came from (and forward mode gathers the tangent). A 0-d input gives
/// itself and index 0. One argsort kernel per call (the input read from a buffer), O(n log n) a row on
/// the CPU (a merge sort), O(n^2) work a row on CUDA (README, "Sorting"); what uses the values fuses
/// with the gather as usual.
std::pair<Tensor, Tensor> sort(const Tensor& input, int64_t dim = -1, bool descending = false, bool stable = false,
                               Loc loc = Loc::current());
/// torch.argsort: sort(input, dim, descending).second (stable, whatever `stable` says).
Tensor argsort(const Tensor& input, int64_t dim = -1, bool descending = false, bool stable = false,
               Loc loc = Loc::current());
/// torch.topk: (values, indices) of the k largest elements along `dim` (`largest` false: the k
/// smallest), in sorted order: the first k of a stable descending (ascending) sort. So ties come in
/// input order - torch leaves the order of ties unspecified, kiln's is this one - and NaN counts as
/// the largest value, as PyTorch's. `sorted` false is accepted: the order is the sorted one anyway
/// (PyTorch's is then unspecified). 0 <= k <= size(dim), else a kiln::Error naming topk, the input's
/// shape, k and your line; not defined for bool (as PyTorch). A 0-d input takes k 0 or 1 and gives
/// itself and index 0 (as PyTorch). The gradient of the values scatters back, as sort's.
std::pair<Tensor, Tensor> topk(const Tensor& input, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true,
                               Loc loc = Loc::current());
/// torch.msort: sort(input, 0).first, the values sorted along dim 0.
Tensor msort(const Tensor& input, Loc loc = Loc::current());

} // namespace kiln

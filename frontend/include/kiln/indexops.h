#pragma once
/// \file indexops.h
/// Indexing along a dim, as in PyTorch: gather / index_select read rows chosen by an integer
/// index; scatter_add / index_add add rows into chosen places (the gradients of the first two);
/// scatter, scatter_reduce, index_fill, index_copy, index_put write or reduce into chosen places;
/// take, take_along_dim read them; searchsorted, bucketize, histc, bincount; cumsum, cumprod; sort,
/// argsort, topk, msort. Indices are checked: a value outside [0, size)
/// is a kiln::Error naming the op, the index's shape and your line (checked on the host for an
/// index already computed, with its position; inside the kernel for a lazy one, reported when the
/// result is realized). Kernels never read or write out of range, scatter_add sums in a fixed order
/// and sorts are stable, so results are bitwise reproducible across thread counts, fused and
/// unfused runs and the CUDA source.

#include <string>
#include <vector>

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
/// torch.scatter (reduce=None): a copy of self with src[i][j][k] written at [index[i][j][k]][j][k] (dim 0),
/// index and src as scatter_add's (any dtype, bool too). Where several src values hit one place (PyTorch
/// leaves which one wins unspecified) kiln's rule is: the last in index order along `dim` wins. The gradient
/// reaches self where nothing was written, and each src value that was written (an overwritten one gets 0;
/// PyTorch gives every src value the adjoint gathered at its place). One scatter-max kernel of the positions
/// along `dim` finds the winners.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current());
/// torch.scatter with a value: a copy of self with `value` (in self's dtype) at every place the index names.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, Scalar value, Loc loc = Loc::current());
/// torch.scatter_reduce (PyTorch 1.13): where the index hits, the reduction ("sum", "prod", "mean", "amax",
/// "amin") of the src values that hit there, with self's own value when include_self; elsewhere self. Index
/// and src as scatter_add's; not defined for bool. Values and gradients are torch 1.13's: "mean" divides by
/// the count of values (self counted when include_self; integers round down); "amax"/"amin" propagate NaN
/// and split each adjoint evenly among the values equal to the result (self's counted even when
/// include_self is false, as torch: its share is dropped); "prod"'s gradient is torch's with zeros (a lone
/// zero's is the product of the others, two or more zeros give 0; otherwise adjoint * result / x). Sums,
/// products, max and min combine the src values in index order from the identity, then self (a scan
/// kernel: work index.numel() + self.numel()), so results are deterministic, fused, unfused and compiled.
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self = true, Loc loc = Loc::current());
/// torch.index_fill: a copy of self with `value` in the slices along `dim` that the 0-d or 1-d index names
/// (negative values count from the end, as PyTorch's).
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, Scalar value, Loc loc = Loc::current());
/// torch.index_fill with a 0-d tensor value of self's dtype (its gradient sums the filled places' adjoints).
Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value, Loc loc = Loc::current());
/// torch.index_copy: a copy of self with source's slice i written at slice index[i] along `dim` (index 0-d or
/// 1-d; source self's shape with index.numel() along `dim`). A slice named twice takes the last one (kiln's
/// rule; PyTorch's is unspecified), and the overwritten source slice gets no gradient.
Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, Loc loc = Loc::current());
/// torch.index_put (self[indices] = values, or += with accumulate): k integer index tensors (1 <= k <=
/// self.dim(), i32 or i64; negative values count from the end) broadcast together to a shape B and name
/// the places of self's first k dims; values broadcast to B followed by self's remaining dims. accumulate
/// sums repeated places in index order (row-major over B); without it the last in that order wins (kiln's
/// rule; PyTorch's is unspecified). A bool mask among the indices stands for its nonzero() positions over the
/// dims it covers (its shape is self's there), as PyTorch's. kiln's shapes are static, so: a mask alone whose
/// values broadcast to [1, self's dims after the mask's...] (one value for every masked place) is a where(),
/// lazy or not; otherwise the masks must be computed already (not lazy, not traced by compile()), and their
/// positions are read on the host; a lazy one is a kiln::Error that says so.
Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false,
                 Loc loc = Loc::current());
/// torch.take: the input's elements (row-major, as if flattened) at `index`, shaped as the index; negative
/// values count from the end.
Tensor take(const Tensor& input, const Tensor& index, Loc loc = Loc::current());
/// torch.take_along_dim without a dim: gather from the flattened input at the flattened indices.
Tensor take_along_dim(const Tensor& input, const Tensor& indices, Loc loc = Loc::current());
/// torch.take_along_dim: gather(input, dim, indices) after broadcasting input and indices (same rank) off `dim`.
Tensor take_along_dim(const Tensor& input, const Tensor& indices, int64_t dim, Loc loc = Loc::current());
/// torch.searchsorted: for each value, the number of elements of the sorted sequence (along its last dim)
/// before which it goes: those < it (right false, or side "left"), or those <= it (right true, or side
/// "right"; side and right must not contradict). A 1-d sequence takes values of any shape; an N-d one,
/// values with its leading dims. `sorter` (integers, the sequence's shape) sorts an unsorted sequence: its
/// entries must lie in [0, n) (checked on the host where already computed, else in the kernels, every entry).
/// i64 of the values' shape (out_int32: i32); a NaN value goes after every element, as PyTorch's. A binary
/// search with PyTorch's probes (floor(log2 n) + 1 reads of the sequence per value, one elementwise kernel
/// over the values), so an unsorted sequence or one with NaN gives PyTorch's answer too.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32 = false, bool right = false,
                    const std::string& side = "", const Tensor& sorter = Tensor(), Loc loc = Loc::current());
/// torch.bucketize: searchsorted(boundaries, input, out_int32, right) with 1-d boundaries.
Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32 = false, bool right = false,
                 Loc loc = Loc::current());
/// torch.histc: counts of the input's elements in `bins` equal bins over [min, max] (the input's dtype,
/// f32 or f64; no gradient). min == max takes the data's min and max (widened by 1 each way when they are
/// equal too); elements outside the range and NaN are not counted; max falls in the last bin. An element's
/// bin is PyTorch's, (x - min) * bins / (max - min) in the input's dtype, truncated. A non-finite range is
/// an error (for a lazy input, whose range is not known yet, the counts are NaN instead).
Tensor histc(const Tensor& input, int64_t bins = 100, double min = 0, double max = 0, Loc loc = Loc::current());
/// torch.bincount: the count (or the sum of `weights`, the input's shape) of each value of a 1-d
/// non-negative integer input, in index order. The output's length depends on the data: for an input
/// already computed it is PyTorch's, max(input) + 1 or minlength if larger (a negative value is an
/// error); for a lazy one (and inside compile()) it is minlength, which must then be > 0, and every value
/// must lie in [0, minlength) (checked in the kernel). i64 without weights; with f32 weights f32, else f64,
/// as PyTorch. Differentiable in the weights.
Tensor bincount(const Tensor& input, const Tensor& weights = Tensor(), int64_t minlength = 0, Loc loc = Loc::current());
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

// ---------------------------------------------------------------- selections of data-dependent size (nonzero.cpp)
// Their result's shape depends on the values: the mask is computed and read on the host (so they cannot be
// traced by compile(): an error says so), and the positions become an i64 tensor on the input's device.
/// torch.nonzero: the [n, rank] i64 coordinates of the n nonzero elements (NaN is nonzero, false is zero), in
/// row-major order.
Tensor nonzero(const Tensor& input, Loc loc = Loc::current());
/// torch.argwhere: nonzero.
Tensor argwhere(const Tensor& input, Loc loc = Loc::current());
/// torch.masked_select: the 1-d elements of input where the bool mask is true (the two broadcast), in row-major
/// order; differentiable in input (the gradient scatters back).
Tensor masked_select(const Tensor& input, const Tensor& mask, Loc loc = Loc::current());

} // namespace kiln

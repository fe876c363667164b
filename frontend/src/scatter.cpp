// scatter, scatter_reduce, index_fill, index_copy, index_put, take, take_along_dim: the user-facing checks,
// then compositions of the graph's Gather and scatter (ScatterAdd, ScatterMul, ScatterMax, ScatterMin)
// nodes (and elementwise ops), so their gradients, fusion and compile() come with them and every result is
// deterministic. Where several values hit one place, scatter_reduce combines them in index order (a
// scatter node's kernel), and a scatter's last value in index order wins (a ScatterMax of the positions).

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>

#include "frontend/src/index_checks.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/shape.h"
#include "kiln/autograd.h"
#include "kiln/indexops.h"

namespace kiln {

namespace b = graph::build;
using detail::fail;
using detail::result;
using detail::wrap_dim_or_fail;

namespace {

enum class Reduce { Sum, Prod, Mean, Amax, Amin };

// A shape of `rank` ones but n along d.
IntList along_dim(int64_t rank, int64_t d, int64_t n) {
  IntList s(static_cast<size_t>(rank), 1);
  s[static_cast<size_t>(d)] = n;
  return s;
}

// base + src added at index along d (a ScatterAdd node; the index checked already).
Tensor add_at(const Tensor& base, int64_t d, const Tensor& index, const Tensor& src) {
  return result(b::scatter_add(base.node(), d, index.node(), src.node()), {&base, &src});
}

// x at index along d (a Gather node; the index in range by construction or checked already).
Tensor take_at(const Tensor& x, int64_t d, const Tensor& index) {
  return result(b::gather(x.node(), d, index.node()), {&x});
}

// Whether each element of a tensor of `shape` is hit by the index along d.
Tensor hits(const IntList& shape, int64_t d, const Tensor& index) {
  const Tensor count =
      add_at(zeros(shape, kInt64, index.device()), d, index, ones(index.shape(), kInt64, index.device()));
  return count > 0;
}

// x's leading block of `shape` (x no smaller than it in any dim).
Tensor leading(const Tensor& x, const IntList& shape) {
  Tensor y = x;
  for (size_t e = 0; e < shape.size(); ++e)
    if (y.size(static_cast<int64_t>(e)) != shape[e]) y = y.slice(static_cast<int64_t>(e), 0, shape[e]);
  return y;
}

// x padded at the end of each dim with `value` up to `shape` (no smaller than x in any dim).
Tensor pad_to(const Tensor& x, const IntList& shape, Scalar value) {
  if (x.shape() == shape) return x;
  IntList pads;
  for (size_t e = shape.size(); e-- > 0;) pads.insert(pads.end(), {0, shape[e] - x.size(static_cast<int64_t>(e))});
  return pad(x, pads, value);
}

// Where each place of the region (the index's shape but `extent` along d) takes its value from: `at` (i64), the
// position along d of the last index element, in index order, that hits it (0 where none does), and `hit`
// (bool), whether one does. One ScatterMax of the positions, counted from 1, so that the i64 identity where
// nothing hits is below every position.
struct LastWriter {
  Tensor at, hit;
};

LastWriter last_writer(const Tensor& index, int64_t d, int64_t extent) {
  const int64_t n = index.size(d);
  const Tensor step = arange(1, static_cast<double>(n) + 1, 1, kInt64, index.device())
                          .reshape(along_dim(index.dim(), d, n))
                          .expand(index.shape());
  const Tensor plus1(b::scatter_into(graph::OpKind::ScatterMax, index.node(), step.node(), d, extent));
  const Tensor hit = plus1 > 0;
  return {where(hit, plus1 - 1, 0), hit};
}

// The src values hitting each place of self combined (prod, amax, amin) in index order by a scatter
// node (graph/ops.def: ScatterMul, ScatterMax, ScatterMin), in self's shape: the combine's identity (1,
// the lowest value, the highest) where nothing hits, so that self * it, maximum(self, it) and
// minimum(self, it) are self there.
Tensor combined_at(const Tensor& self, int64_t d, const Tensor& idx, const Tensor& src, Reduce r) {
  const Tensor s = leading(src, idx.shape());
  const bool max = r == Reduce::Amax, floating = is_floating(self.dtype()), i32 = self.dtype() == DType::Int32;
  using graph::OpKind;
  const OpKind op = r == Reduce::Prod ? OpKind::ScatterMul : max ? OpKind::ScatterMax : OpKind::ScatterMin;
  const double inf = max ? -INFINITY : INFINITY;
  const int64_t lowest = i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  const int64_t highest = i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  const Scalar identity = r == Reduce::Prod ? Scalar(1) : floating ? Scalar(inf) : Scalar(max ? lowest : highest);
  return pad_to(result(b::scatter_into(op, idx.node(), s.node(), d, self.size(d)), {&s}), self.shape(), identity);
}

// Integer a / n rounded down (n > 0), as torch's div(rounding_mode="floor"), exactly for every a: the f64
// quotient (within 2^10 of it), corrected by the f64 quotient of the small remainder, then by one step.
Tensor floor_divide_int(const Tensor& a, const Tensor& n) {
  const auto quotient = [&](const Tensor& x) { return floor(x.to(kFloat64) / n.to(kFloat64)).to(a.dtype()); };
  const Tensor q0 = quotient(a);
  const Tensor q = q0 + quotient(a - q0 * n); // a - q0 * n: exact in wrapping arithmetic, and small
  const Tensor rem = a - q * n;
  return q - (rem < 0).to(a.dtype()) + (rem >= n).to(a.dtype());
}

// scatter_reduce's values (no custom gradient): where the index hits, the reduction of src's values
// (with self's when include_self: self * the product, as ScatterAdd adds self last); elsewhere self.
// prod's gradient is the ScatterMul node's (torch 1.13's, zeros included: graph::build::
// scatter_mul_partials), so second-order gradients come with it.
Tensor reduce_values(const Tensor& self, int64_t d, const Tensor& idx, const Tensor& src, Reduce r, bool include) {
  const Tensor base = include ? self : zeros_like(self);
  if (r == Reduce::Sum) return where(hits(self.shape(), d, idx), add_at(base, d, idx, src), self);
  if (r == Reduce::Mean) {
    const Tensor hit = hits(self.shape(), d, idx);
    Tensor count = add_at(full(self.shape(), include ? 1 : 0, self.dtype(), self.device()), d, idx,
                          ones(idx.shape(), self.dtype(), self.device()));
    count = masked_fill(count, count == 0, 1); // no 0 / 0 where nothing hits (its gradient too)
    const Tensor total = add_at(base, d, idx, src);
    return where(hit, is_floating(self.dtype()) ? total / count : floor_divide_int(total, count), self);
  }
  const Tensor red = combined_at(self, d, idx, src, r);
  if (!include) return where(hits(self.shape(), d, idx), red, self);
  return r == Reduce::Prod ? self * red : r == Reduce::Amax ? maximum(self, red) : minimum(self, red);
}

// torch 1.13's gradient of amax / amin: the adjoint of each result element split evenly among the
// elements equal to it (self's counted even when include_self is false, as torch; its share then goes
// nowhere).
std::vector<Tensor> extreme_backward(const std::vector<Tensor>& in, const Tensor& out, const Tensor& g, int64_t d,
                                     const Tensor& idx, bool include) {
  const Tensor& self = in[0];
  const Tensor src = leading(in[1], idx.shape());
  const Tensor self_is = (self == out).to(self.dtype());
  const Tensor src_is = (src == take_at(out, d, idx)).to(self.dtype());
  const Tensor share = g / add_at(self_is, d, idx, src_is);
  Tensor grad_self = self_is * share;
  if (!include) grad_self = masked_fill(grad_self, hits(self.shape(), d, idx), 0);
  return {grad_self, pad_to(src_is * take_at(share, d, idx), in[1].shape(), 0)};
}

Reduce reduce_of(const std::string& reduce, const Tensor& self, const Tensor& src, const Loc& loc) {
  if (reduce == "sum") return Reduce::Sum;
  if (reduce == "prod") return Reduce::Prod;
  if (reduce == "mean") return Reduce::Mean;
  if (reduce == "amax") return Reduce::Amax;
  if (reduce == "amin") return Reduce::Amin;
  fail("scatter_reduce", "reduce \"" + reduce + "\" is not one of \"sum\", \"prod\", \"mean\", \"amax\", \"amin\"",
       {&self, &src}, loc);
}

// The checks shared by scatter and scatter_reduce (src null: scatter's value form); returns the dim.
int64_t check_scatter(const char* op, const Tensor& self, int64_t dim, const Tensor& index, const Tensor* src,
                      const Loc& loc) {
  detail::require_index(op, index, self, loc);
  if (src && !src->defined()) throw Error(op, "src is undefined", loc);
  const int64_t d = wrap_dim_or_fail(op, dim, self, loc);
  if (src && src->dtype() != self.dtype()) fail(op, "src must have self's dtype", {&self, &index, src}, loc);
  if (src && src->dim() != self.dim()) fail(op, "src must have self's rank", {&self, &index, src}, loc);
  detail::check_extents(op, self, d, index, src, loc);
  if (src) (void)detail::common_device(op, {&self, &index, src}, loc);
  else (void)detail::common_device(op, {&self, &index}, loc);
  return d;
}

Tensor checked(const char* op, const Tensor& self, int64_t d, const Tensor& index, const Loc& loc) {
  return detail::checked_index(op, index, self.size(d), detail::range_text("self", d, self, index), loc);
}

// A new tensor with self's values (bits included).
Tensor copy_of(const Tensor& self) { return where(zeros({}, kBool, self.device()), self, self); }

// scatter with src once the index is checked: the last value of each run wins.
Tensor scatter_checked(const Tensor& self, int64_t d, const Tensor& idx, const Tensor& src) {
  const LastWriter last = last_writer(idx, d, self.size(d));
  const Tensor value = take_at(leading(src, idx.shape()), d, last.at);
  return where(pad_to(last.hit, self.shape(), false), pad_to(value, self.shape(), 0), self);
}

} // namespace

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Loc loc) {
  const graph::SourceScope at(loc, "scatter"); // nodes made here record the caller's line
  const int64_t d = check_scatter("scatter", self, dim, index, &src, loc);
  if (self.dim() == 0)
    return scatter(self.reshape({1}, loc), 0, index.reshape({1}, loc), src.reshape({1}, loc), loc).reshape({}, loc);
  if (index.numel() == 0) return copy_of(self);
  return scatter_checked(self, d, checked("scatter", self, d, index, loc), src);
}

Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, Scalar value, Loc loc) {
  const graph::SourceScope at(loc, "scatter"); // nodes made here record the caller's line
  const int64_t d = check_scatter("scatter", self, dim, index, nullptr, loc);
  if (self.dim() == 0) return scatter(self.reshape({1}, loc), 0, index.reshape({1}, loc), value, loc).reshape({}, loc);
  if (index.numel() == 0) return copy_of(self);
  return masked_fill(self, hits(self.shape(), d, checked("scatter", self, d, index, loc)), value, loc);
}

Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                      const std::string& reduce, bool include_self, Loc loc) {
  const graph::SourceScope at(loc, "scatter_reduce"); // nodes made here record the caller's line
  const int64_t d = check_scatter("scatter_reduce", self, dim, index, &src, loc);
  const Reduce r = reduce_of(reduce, self, src, loc);
  if (self.dtype() == DType::Bool) fail("scatter_reduce", "not defined for bool tensors", {&self, &src}, loc);
  if (self.dim() == 0)
    return scatter_reduce(self.reshape({1}, loc), 0, index.reshape({1}, loc), src.reshape({1}, loc), reduce,
                          include_self, loc)
        .reshape({}, loc);
  if (index.numel() == 0) return copy_of(self);
  const Tensor idx = checked("scatter_reduce", self, d, index, loc);
  if ((r != Reduce::Amax && r != Reduce::Amin) || !is_floating(self.dtype()))
    return reduce_values(self, d, idx, src, r, include_self);
  const CustomFunction extreme{
      "scatter_reduce",
      [=](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{reduce_values(in[0], d, idx, in[1], r, include_self)};
      },
      [=](const std::vector<Tensor>& in, const std::vector<Tensor>& out, const std::vector<Tensor>& g) {
        return extreme_backward(in, out[0], g[0], d, idx, include_self);
      }};
  return extreme({self, src}, loc)[0];
}

// ---------------------------------------------------------------- index_fill, index_copy

namespace {

// An index into an extent `bound` whose negative values count from the end (as PyTorch's advanced
// indexing and take): values in [-bound, bound), checked on the host when computed already (naming the
// first bad value), else wrapped and then checked in the kernel against [0, bound).
Tensor wrapped_index(const char* op, const Tensor& index, int64_t bound, const std::string& range, const Loc& loc) {
  if (bound == 0 && index.numel() > 0) fail(op, "no index is valid for " + range + ": it is empty", {&index}, loc);
  if (index.node()->realized() && !detail::active_capture()) {
    const std::vector<int64_t> v = index.to(kInt64, loc).to_vector<int64_t>(loc);
    for (size_t k = 0; k < v.size(); ++k)
      if (v[k] < -bound || v[k] >= bound)
        fail(op,
             "index " + std::to_string(v[k]) + " (element " + std::to_string(k) + ") is out of range for " + range +
                 ": valid values are [" + std::to_string(-bound) + ", " + std::to_string(bound) + ")",
             {&index}, loc);
    return where(index < 0, index + bound, index);
  }
  return detail::checked_index(op, where(index < 0, index + bound, index), bound, range + " (negative values wrapped)",
                               loc);
}

} // namespace

namespace {

// The 0-d or 1-d index of index_fill / index_copy checked against self's dim d, as a 1-d index (index_fill's
// negative values count from the end, as PyTorch's; index_copy's are errors, as PyTorch's).
Tensor checked_1d(const char* op, const Tensor& self, int64_t d, const Tensor& index, const Loc& loc) {
  if (index.dim() > 1) fail(op, "the index must be 0-d or 1-d", {&self, &index}, loc);
  const Tensor flat = index.reshape({index.numel()}, loc);
  const std::string range = detail::range_text("self", d, self, index);
  if (std::string(op) == "index_fill") return wrapped_index(op, flat, self.size(d), range, loc);
  return detail::checked_index(op, flat, self.size(d), range, loc);
}

// Whether each slice along d of self is named by the (checked, 1-d) index: bool, broadcasting against self.
Tensor slices_hit(const Tensor& self, int64_t d, const Tensor& idx) {
  return hits({self.size(d)}, 0, idx).reshape(along_dim(self.dim(), d, self.size(d)));
}

} // namespace

Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, Scalar value, Loc loc) {
  const graph::SourceScope at(loc, "index_fill"); // nodes made here record the caller's line
  detail::require_index("index_fill", index, self, loc);
  const int64_t d = wrap_dim_or_fail("index_fill", dim, self, loc);
  (void)detail::common_device("index_fill", {&self, &index}, loc);
  if (self.dim() == 0) return index_fill(self.reshape({1}, loc), 0, index, value, loc).reshape({}, loc);
  if (index.numel() == 0) return copy_of(self);
  return masked_fill(self, slices_hit(self, d, checked_1d("index_fill", self, d, index, loc)), value, loc);
}

Tensor index_fill(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& value, Loc loc) {
  const graph::SourceScope at(loc, "index_fill"); // nodes made here record the caller's line
  detail::require_index("index_fill", index, self, loc);
  if (!value.defined() || value.dim() != 0)
    fail("index_fill", "the value must be a 0-d tensor (or a number)", {&self, &index}, loc);
  if (value.dtype() != self.dtype()) fail("index_fill", "the value must have self's dtype", {&self, &value}, loc);
  const int64_t d = wrap_dim_or_fail("index_fill", dim, self, loc);
  (void)detail::common_device("index_fill", {&self, &index, &value}, loc);
  if (self.dim() == 0) return index_fill(self.reshape({1}, loc), 0, index, value, loc).reshape({}, loc);
  if (index.numel() == 0) return copy_of(self);
  return where(slices_hit(self, d, checked_1d("index_fill", self, d, index, loc)), value, self, loc);
}

Tensor index_copy(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, Loc loc) {
  const graph::SourceScope at(loc, "index_copy"); // nodes made here record the caller's line
  detail::require_index("index_copy", index, self, loc);
  if (!source.defined()) throw Error("index_copy", "source is undefined", loc);
  const int64_t d = wrap_dim_or_fail("index_copy", dim, self, loc);
  if (index.dim() > 1) fail("index_copy", "the index must be 0-d or 1-d", {&self, &index, &source}, loc);
  if (source.dtype() != self.dtype())
    fail("index_copy", "source must have self's dtype", {&self, &index, &source}, loc);
  (void)detail::common_device("index_copy", {&self, &index, &source}, loc);
  if (self.dim() == 0) {
    if (source.numel() != index.numel() || index.numel() > 1)
      fail("index_copy", "a 0-d self takes one index and one source value", {&self, &index, &source}, loc);
    return scatter(self, 0, index.reshape({}, loc), source.reshape({}, loc), loc);
  }
  IntList want = self.shape();
  want[static_cast<size_t>(d)] = index.numel();
  if (source.shape() != want)
    fail("index_copy",
         "source must be " + detail::list_str(want) + " (self's shape with index.numel() along dim " +
             std::to_string(d) + ")",
         {&self, &index, &source}, loc);
  if (index.numel() == 0) return copy_of(self);
  const Tensor idx = checked_1d("index_copy", self, d, index, loc);
  return scatter_checked(self, d, idx.reshape(along_dim(self.dim(), d, index.numel()), loc).expand(want, loc), source);
}

// ---------------------------------------------------------------- take, take_along_dim, index_put

Tensor take(const Tensor& input, const Tensor& index, Loc loc) {
  const graph::SourceScope at(loc, "take"); // nodes made here record the caller's line
  detail::require_index("take", index, input, loc);
  (void)detail::common_device("take", {&input, &index}, loc);
  if (index.numel() == 0) return zeros(index.shape(), input.dtype(), input.device()); // as PyTorch: the index's shape
  const Tensor idx = wrapped_index(
      "take", index, input.numel(),
      "the " + std::to_string(input.numel()) + " elements of the input " + detail::list_str(input.shape()), loc);
  return take_at(input.reshape({input.numel()}, loc), 0, idx.reshape({index.numel()}, loc)).reshape(index.shape(), loc);
}

Tensor take_along_dim(const Tensor& input, const Tensor& indices, Loc loc) {
  const graph::SourceScope at(loc, "take_along_dim"); // nodes made here record the caller's line
  detail::require_index("take_along_dim", indices, input, loc);
  const detail::UserCall call("take_along_dim", loc); // gather's errors are take_along_dim's
  return gather(input.reshape({input.numel()}, loc), 0, indices.reshape({indices.numel()}, loc), loc);
}

Tensor take_along_dim(const Tensor& input, const Tensor& indices, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "take_along_dim"); // nodes made here record the caller's line
  detail::require_index("take_along_dim", indices, input, loc);
  const int64_t d = wrap_dim_or_fail("take_along_dim", dim, input, loc);
  if (indices.dim() != input.dim())
    fail("take_along_dim", "input and indices must have the same number of dims", {&input, &indices}, loc);
  IntList in_shape = input.shape(), ix_shape = indices.shape();
  in_shape[static_cast<size_t>(d)] = ix_shape[static_cast<size_t>(d)] = 1;
  const std::optional<IntList> common = graph::broadcast_shapes(in_shape, ix_shape);
  if (!common)
    fail("take_along_dim", "input and indices do not broadcast (off dim " + std::to_string(d) + ")", {&input, &indices},
         loc);
  IntList in_want = *common, ix_want = *common;
  in_want[static_cast<size_t>(d)] = input.size(d);
  ix_want[static_cast<size_t>(d)] = indices.size(d);
  (void)detail::common_device("take_along_dim", {&input, &indices}, loc);
  if (graph::numel(ix_want) == 0) return zeros(ix_want, input.dtype(), input.device());
  // checked before the broadcast (so computed indices are checked on the host)
  const Tensor idx = detail::checked_index("take_along_dim", indices, input.size(d),
                                           detail::range_text("input", d, input, indices), loc);
  return take_at(input.expand(in_want, loc), d, idx.expand(ix_want, loc));
}

namespace {

bool is_mask(const Tensor& index) { return index.defined() && index.dtype() == DType::Bool; }

// index_put's checks of its bool masks, as torch's: a k-d mask covers k dims of self from where it stands (an
// integer index covers one), and its shape is self's there.
void check_masks(const Tensor& self, const std::vector<Tensor>& indices, const Loc& loc) {
  int64_t d = 0; // the dim of self that the next index covers
  for (const Tensor& i : indices) {
    if (!i.defined()) throw Error("index_put", "an index tensor is undefined", loc);
    if (!is_mask(i)) {
      ++d;
      continue;
    }
    if (i.dim() == 0) fail("index_put", "a 0-d bool mask is not taken (give a mask of self's dims)", {&self, &i}, loc);
    if (d + i.dim() > self.dim())
      fail("index_put", "too many indices for a tensor of dimension " + std::to_string(self.dim()), {&self, &i}, loc);
    for (int64_t e = 0; e < i.dim(); ++e)
      if (i.size(e) != self.size(d + e))
        fail("index_put",
             "the shape of the mask " + detail::list_str(i.shape()) + " at index " + std::to_string(e) +
                 " does not match the shape of the indexed tensor " + detail::list_str(self.shape()) + " at index " +
                 std::to_string(d + e),
             {&self, &i}, loc);
    d += i.dim();
  }
}

// self's dims after those the mask `indices[0]` covers, after a 1: the shape that values broadcast to when they
// need no count of the mask's true elements (one value for every masked place).
IntList countless_values_shape(const Tensor& self, const Tensor& mask) {
  IntList shape(self.shape().begin() + mask.dim(), self.shape().end());
  shape.insert(shape.begin(), 1);
  return shape;
}

// index_put of the mask alone with values that need no count: where(mask, values, self), or self plus
// where(mask, values, 0) with accumulate (the mask spread over self's dims after it).
Tensor put_where(const Tensor& self, const Tensor& mask, const Tensor& values, bool accumulate, const Loc& loc) {
  (void)detail::common_device("index_put", {&self, &mask, &values}, loc);
  IntList spread = mask.shape();
  spread.insert(spread.end(), static_cast<size_t>(self.dim() - mask.dim()), 1);
  const Tensor m = mask.reshape(spread, loc);
  if (!accumulate) return where(m, values, self, loc);
  return self + where(m, values, zeros({}, self.dtype(), self.device()), loc);
}

// The integer index tensors (i64) that `indices` stand for: each k-d mask replaced by the k tensors of its
// nonzero() positions (row-major), read on the host: the masks are computed already.
std::vector<Tensor> mask_positions(const Tensor& self, const std::vector<Tensor>& indices, const Loc& loc) {
  std::vector<Tensor> out;
  for (const Tensor& i : indices) {
    if (!is_mask(i)) {
      out.push_back(i);
      continue;
    }
    const std::vector<bool> mask = i.to_vector<bool>(loc);
    std::vector<std::vector<int64_t>> at(static_cast<size_t>(i.dim()));
    for (size_t f = 0; f < mask.size(); ++f) {
      if (!mask[f]) continue;
      auto rest = static_cast<int64_t>(f); // the row-major offset, split into the mask's dims from the last
      for (int64_t e = i.dim() - 1; e >= 0; rest /= i.size(e), --e)
        at[static_cast<size_t>(e)].push_back(rest % i.size(e));
    }
    for (const std::vector<int64_t>& a : at)
      out.push_back(from_vector(a, {static_cast<int64_t>(a.size())}, loc).to(self.device(), loc));
  }
  return out;
}

// index_put with bool masks among the indices (torch: a mask stands for its nonzero() positions). kiln's
// shapes are static, so a mask not computed yet (lazy, or an input of compile()) is taken only alone and with
// values that need no count of its true elements; a computed one becomes the index tensors of its positions.
Tensor put_masked(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate,
                  const Loc& loc) {
  check_masks(self, indices, loc);
  if (values.dtype() != self.dtype()) fail("index_put", "values must have self's dtype", {&self, &values}, loc);
  if (accumulate && self.dtype() == DType::Bool)
    fail("index_put", "accumulate is not defined for bool tensors", {&self, &values}, loc);
  if (indices.size() == 1) {
    const IntList want = countless_values_shape(self, indices[0]);
    if (graph::broadcast_shapes(values.shape(), want) == want)
      return put_where(self, indices[0], values, accumulate, loc);
  }
  const bool computed = std::ranges::all_of(
      indices, [](const Tensor& i) { return !is_mask(i) || (i.node()->realized() && !detail::active_capture()); });
  if (computed) return index_put(self, mask_positions(self, indices, loc), values, accumulate, loc);
  const Tensor& mask = *std::ranges::find_if(indices, is_mask);
  fail("index_put",
       "the number of true elements of a bool mask that is not computed yet (lazy, or traced by compile()) is "
       "data-dependent, and kiln's shapes are static: give the mask alone with values that broadcast to " +
           detail::list_str(countless_values_shape(self, mask)) +
           " (one value for every masked place), or realize() the mask first",
       {&self, &mask, &values}, loc);
}

} // namespace

Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate,
                 Loc loc) {
  const graph::SourceScope at(loc, "index_put"); // nodes made here record the caller's line
  if (!self.defined() || !values.defined()) throw Error("index_put", "self or values is undefined", loc);
  if (std::ranges::any_of(indices, is_mask)) return put_masked(self, indices, values, accumulate, loc);
  const auto k = static_cast<int64_t>(indices.size());
  if (k == 0 || k > self.dim())
    fail("index_put",
         "takes 1 to " + std::to_string(self.dim()) + " index tensors (one per leading dim of self), got " +
             std::to_string(k),
         {&self, &values}, loc);
  IntList common;
  for (const Tensor& i : indices) {
    detail::require_index("index_put", i, self, loc);
    const std::optional<IntList> c = graph::broadcast_shapes(common, i.shape());
    if (!c) fail("index_put", "the index tensors do not broadcast together", {&self, &i}, loc);
    common = *c;
  }
  if (values.dtype() != self.dtype()) fail("index_put", "values must have self's dtype", {&self, &values}, loc);
  if (accumulate && self.dtype() == DType::Bool)
    fail("index_put", "accumulate is not defined for bool tensors", {&self, &values}, loc);
  IntList rest(self.shape().begin() + k, self.shape().end()), target = common;
  target.insert(target.end(), rest.begin(), rest.end());
  if (!graph::broadcast_shapes(values.shape(), target) || graph::broadcast_shapes(values.shape(), target) != target)
    fail("index_put",
         "values must broadcast to " + detail::list_str(target) + " (the indices' shape, then self's dims after them)",
         {&self, &values}, loc);
  // the flat position in self's leading k dims: sum of index j times the stride of dim j
  const int64_t m = graph::numel(common);
  int64_t places = 1;
  for (int64_t j = 0; j < k; ++j) places *= self.size(j);
  Tensor flat = zeros(common, kInt64, self.device());
  for (int64_t j = 0, stride = places; j < k; ++j) {
    stride /= self.size(j);
    const std::string range = "dim " + std::to_string(j) + " of self " + detail::list_str(self.shape()) + " (index " +
                              std::to_string(j) + ", " + detail::list_str(indices[j].shape()) + ")";
    if (m > 0) flat = flat + wrapped_index("index_put", indices[j].to(kInt64, loc), self.size(j), range, loc) * stride;
  }
  if (m == 0) return copy_of(self);
  IntList rows = {m}, along = {m}, view = {places};
  view.insert(view.end(), rest.begin(), rest.end());
  rows.insert(rows.end(), rest.begin(), rest.end());
  along.insert(along.end(), rest.size(), 1);
  const Tensor at_rows = flat.reshape(along, loc).expand(rows, loc);
  const Tensor src = values.expand(target, loc).reshape(rows, loc);
  const Tensor base = self.reshape(view, loc);
  const Tensor out = accumulate ? add_at(base, 0, at_rows, src) : scatter_checked(base, 0, at_rows, src);
  return out.reshape(self.shape(), loc);
}

Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src, Loc loc) const {
  return kiln::scatter(*this, dim, index, src, loc);
}
Tensor Tensor::scatter(int64_t dim, const Tensor& index, Scalar value, Loc loc) const {
  return kiln::scatter(*this, dim, index, value, loc);
}
Tensor Tensor::scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                              bool include_self, Loc loc) const {
  return kiln::scatter_reduce(*this, dim, index, src, reduce, include_self, loc);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, Scalar value, Loc loc) const {
  return kiln::index_fill(*this, dim, index, value, loc);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, const Tensor& value, Loc loc) const {
  return kiln::index_fill(*this, dim, index, value, loc);
}
Tensor Tensor::index_copy(int64_t dim, const Tensor& index, const Tensor& source, Loc loc) const {
  return kiln::index_copy(*this, dim, index, source, loc);
}
Tensor Tensor::index_put(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate, Loc loc) const {
  return kiln::index_put(*this, indices, values, accumulate, loc);
}
Tensor Tensor::take(const Tensor& index, Loc loc) const { return kiln::take(*this, index, loc); }
Tensor Tensor::take_along_dim(const Tensor& indices, std::optional<int64_t> dim, Loc loc) const {
  return dim ? kiln::take_along_dim(*this, indices, *dim, loc) : kiln::take_along_dim(*this, indices, loc);
}

} // namespace kiln

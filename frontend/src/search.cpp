// searchsorted, bucketize, histc, bincount: the user-facing checks, then a binary search along the sorted
// dim (the searches), a bin position per element (histc) and ScatterAdd's counts in index order.

#include <cmath>
#include <optional>

#include "frontend/src/index_checks.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "kiln/indexops.h"

namespace kiln {

namespace b = graph::build;
using detail::fail;
using detail::result;

namespace {

// counts (i64 [n]) of `src` (a float dtype's ones, or weights) added at `bin` (i64 [n]); a bin outside
// [0, length) adds nothing. Sums run in index order, from 0.
Tensor counts(const Tensor& bin, const Tensor& src, int64_t length) {
  const Tensor base = zeros({length}, src.dtype(), src.device());
  return result(b::scatter_add(base.node(), 0, bin.node(), src.node()), {&base, &src});
}

// The position of each value along the sorted (last) dim: PyTorch's binary search (cus_lower_bound /
// cus_upper_bound), with its probes, so an unsorted sequence or one with NaN gives its answer too. That
// search keeps [start, end) and probes mid = start + (end - start) / 2; the value lies beyond mid (start
// = mid + 1) where !(s[mid] >= v) (right: !(s[mid] > v)), so a NaN value lies beyond every element; else
// end = mid. The interval's length after k probes is a - c, a = floor(n / 2^k) (the same for every
// value), c = 0 or 1 (`shorter`): so the search is floor(log2 n) + 1 steps of elementwise ops and a
// gather of one element per value (one kernel over the values), with c updated from a's parity:
//   a even: mid = start + a/2 - c; beyond: c = 1, else c stays;   a odd: mid = start + (a-1)/2;
//   beyond: c stays, else c = 0;   a = 1 with c = 1: the interval is empty, nothing moves.
Tensor search(const Tensor& seq, const Tensor& v, bool right, bool batched, const Loc& loc) {
  const Tensor s = seq.detach();
  const Tensor values = batched ? v : v.reshape({v.numel()}, loc); // a 1-d sequence: values in a row
  Tensor start = zeros(values.shape(), kInt64, values.device(), loc);
  Tensor shorter; // c == 1 (bool); undefined while false everywhere
  for (int64_t a = seq.size(-1); a >= 1; a /= 2) {
    const bool even = a % 2 == 0;
    Tensor mid = a / 2 > 0 ? start + a / 2 : start;
    if (even && shorter.defined()) mid = mid - shorter.to(kInt64, loc);
    const Tensor probe = result(b::gather(s.node(), s.dim() - 1, mid.node()), {&s});
    Tensor beyond = logical_not(right ? probe > values : probe >= values, loc);
    if (a == 1 && shorter.defined()) beyond = logical_and(beyond, logical_not(shorter, loc), loc);
    start = where(beyond, mid + 1, start, loc);
    if (even) shorter = shorter.defined() ? logical_or(shorter, beyond, loc) : beyond;
    else if (shorter.defined()) shorter = logical_and(shorter, beyond, loc);
  }
  return start.reshape(v.shape(), loc);
}

// 0 (i64, 0-d) computed from every entry of a sorter not computed yet, each checked in [0, n) there: the search
// reads only the entries it probes, so its result adds this, and a bad entry it never probes is reported too,
// fused or not. Undefined for a sorter checked on the host already (by gather), or empty.
Tensor whole_sorter_check(const Tensor& sorter, const Loc& loc) {
  if ((sorter.node()->realized() && !detail::active_capture()) || sorter.numel() == 0) return Tensor();
  const int64_t n = sorter.size(-1);
  const std::string range = "the sorted sequence's last dim (size " + std::to_string(n) + ")";
  return amin(detail::checked_index("searchsorted", sorter, n, range, loc), {}, false, loc).to(kInt64, loc) * 0;
}

} // namespace

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32, bool right,
                    const std::string& side, const Tensor& sorter, Loc loc) {
  const graph::SourceScope at(loc, "searchsorted"); // nodes made here record the caller's line
  const char* op = "searchsorted";
  if (!sorted_sequence.defined() || !values.defined())
    throw Error(op, "the sorted sequence or the values are undefined", loc);
  if (!side.empty() && side != "left" && side != "right")
    fail(op, "side must be \"left\" or \"right\", got \"" + side + "\"", {&sorted_sequence, &values}, loc);
  if (side == "left" && right)
    fail(op, "side and right can't be set to opposites (side \"left\", right true)", {&sorted_sequence, &values}, loc);
  const bool upper = right || side == "right";
  if (sorted_sequence.dim() == 0) fail(op, "the sorted sequence must have at least one dim", {&sorted_sequence}, loc);
  if (sorted_sequence.dtype() == DType::Bool || values.dtype() == DType::Bool)
    fail(op, "not defined for bool tensors", {&sorted_sequence, &values}, loc);
  const bool batched = sorted_sequence.dim() > 1;
  if (batched) {
    const IntList lead(sorted_sequence.shape().begin(), sorted_sequence.shape().end() - 1);
    if (values.dim() != sorted_sequence.dim() || IntList(values.shape().begin(), values.shape().end() - 1) != lead)
      fail(op, "an N-d sorted sequence takes values with the same leading dims (all but the last)",
           {&sorted_sequence, &values}, loc);
  }
  (void)detail::common_device(op, {&sorted_sequence, &values}, loc);
  Tensor seq = sorted_sequence, check;
  if (sorter.defined()) {
    if (sorter.shape() != sorted_sequence.shape() || !is_integral(sorter.dtype()))
      fail(op, "the sorter must be an integer tensor of the sorted sequence's shape", {&sorted_sequence, &sorter}, loc);
    const detail::UserCall call(op, loc); // gather's range errors are searchsorted's
    seq = gather(sorted_sequence, -1, sorter, loc);
    check = whole_sorter_check(sorter, loc);
  }
  const Tensor pos = search(seq, values, upper, batched, loc);
  return (check.defined() ? pos + check : pos).to(out_int32 ? kInt32 : kInt64, loc);
}

Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32, bool right, Loc loc) {
  const graph::SourceScope at(loc, "bucketize"); // nodes made here record the caller's line
  if (!input.defined() || !boundaries.defined())
    throw Error("bucketize", "the input or the boundaries are undefined", loc);
  if (boundaries.dim() != 1) fail("bucketize", "the boundaries must be 1-d", {&input, &boundaries}, loc);
  if (input.dtype() == DType::Bool || boundaries.dtype() == DType::Bool)
    fail("bucketize", "not defined for bool tensors", {&input, &boundaries}, loc);
  (void)detail::common_device("bucketize", {&input, &boundaries}, loc);
  return search(boundaries, input, right, false, loc).to(out_int32 ? kInt32 : kInt64, loc);
}

namespace {

// histc's range: [min, max] as given, or the data's when they are equal (then widened by 1 each way where
// the data's are equal too), as 0-d tensors of the input's dtype. A `known` (realized) input's non-finite range is
// an error, as PyTorch's; a lazy input's gives NaN counts.
std::pair<Tensor, Tensor> histc_range(const Tensor& x, bool known, double min, double max, const Loc& loc) {
  if (min > max)
    fail("histc", "max must be larger than min (min " + std::to_string(min) + ", max " + std::to_string(max) + ")",
         {&x}, loc);
  if (!std::isfinite(min) || !std::isfinite(max))
    fail("histc", "range of [" + std::to_string(min) + ", " + std::to_string(max) + "] is not finite", {&x}, loc);
  const Device dev = x.device();
  if (min != max || x.numel() == 0) {
    const double lo = min == max ? min - 1 : min, hi = min == max ? max + 1 : max;
    return {full({}, lo, x.dtype(), dev), full({}, hi, x.dtype(), dev)};
  }
  Tensor lo = amin(x, {}, false, loc), hi = amax(x, {}, false, loc);
  if (known) {
    const double l = lo.item<double>(loc), h = hi.item<double>(loc);
    if (!std::isfinite(l) || !std::isfinite(h))
      fail("histc", "range of [" + std::to_string(l) + ", " + std::to_string(h) + "] is not finite", {&x}, loc);
  }
  const Tensor same = lo == hi;
  return {where(same, lo - 1, lo), where(same, hi + 1, hi)};
}

} // namespace

Tensor histc(const Tensor& input, int64_t bins, double min, double max, Loc loc) {
  const graph::SourceScope at(loc, "histc"); // nodes made here record the caller's line
  if (!input.defined()) throw Error("histc", "the input is undefined", loc);
  if (!is_floating(input.dtype())) fail("histc", "takes a floating input (f32 or f64), as PyTorch's", {&input}, loc);
  if (bins <= 0) fail("histc", "bins must be > 0, got " + std::to_string(bins), {&input}, loc);
  const Tensor x = input.detach().reshape({input.numel()}, loc); // counts carry no gradient (as PyTorch's)
  const bool known = input.node()->realized() && !detail::active_capture(); // its range is checked now
  const auto [lo, hi] = histc_range(x, known, min, max, loc);
  const Tensor inside = logical_and(x >= lo, x <= hi, loc); // NaN is outside
  // PyTorch's position: (x - min) * bins / (max - min) in the input's dtype, truncated; max in the last bin
  const Tensor pos = ((where(inside, x, lo) - lo) * static_cast<double>(bins) / (hi - lo)).to(kInt64, loc);
  const Tensor bin = where(inside, minimum(pos, full({}, bins - 1, kInt64, x.device())), bins);
  const Tensor c = counts(bin, ones({x.numel()}, x.dtype(), x.device()), bins);
  if (min != max || known) return c;
  return where(logical_and(isfinite(lo), isfinite(hi)), c, std::nan("")); // a lazy input's non-finite range: NaN counts
}

Tensor bincount(const Tensor& input, const Tensor& weights, int64_t minlength, Loc loc) {
  const graph::SourceScope at(loc, "bincount"); // nodes made here record the caller's line
  if (!input.defined()) throw Error("bincount", "the input is undefined", loc);
  if (input.dim() != 1 || !is_integral(input.dtype()))
    fail("bincount", "takes a 1-d integer input (i32 or i64)", {&input}, loc);
  if (minlength < 0) fail("bincount", "minlength must be >= 0, got " + std::to_string(minlength), {&input}, loc);
  if (weights.defined() && weights.shape() != input.shape())
    fail("bincount", "the weights must have the input's shape", {&input, &weights}, loc);
  if (weights.defined()) (void)detail::common_device("bincount", {&input, &weights}, loc);
  const DType out = !weights.defined() ? kInt64 : weights.dtype() == kFloat32 ? kFloat32 : kFloat64;
  const Tensor src = weights.defined() ? weights.to(out, loc) : ones({input.numel()}, kInt64, input.device());
  int64_t length = minlength;
  Tensor idx = input;
  if (input.node()->realized() && !detail::active_capture()) { // PyTorch's length: max(max + 1, minlength)
    if (input.numel() > 0) { // its least and largest value, by reductions where it is (not a copy to the host)
      const Tensor lo = amin(input, {}, false, loc).to(kInt64, loc), hi = amax(input, {}, false, loc).to(kInt64, loc);
      realize({lo, hi}, loc);
      if (const int64_t v = lo.item<int64_t>(loc); v < 0)
        fail("bincount", "the input must be non-negative, got " + std::to_string(v), {&input}, loc);
      length = std::max(length, hi.item<int64_t>(loc) + 1);
    }
  } else {
    if (minlength == 0)
      fail("bincount",
           "the output's length depends on the input's values: realize the input first, or give minlength (then the "
           "output's length, and every value must lie in [0, minlength))",
           {&input}, loc);
    if (input.numel() > 0)
      idx = detail::checked_index("bincount", input, minlength,
                                  "the output of length minlength = " + std::to_string(minlength), loc);
  }
  if (input.numel() == 0) return zeros({length}, out, input.device());
  return counts(idx, src, length);
}

} // namespace kiln

// Indexing along a dim (gather, index_select, scatter_add, index_add), cumsum, cumprod and the sorts:
// the user-facing checks, then graph::build's Gather node and its scans (ScatterAdd, Cumsum, Cumprod,
// Argsort).

#include "kiln/indexops.h"

#include <cmath>

#include "frontend/src/index_checks.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/index_check.h"
#include "graph/shape.h"

namespace kiln {

namespace b = graph::build;
using detail::fail;
using detail::result;
using detail::wrap_dim_or_fail;

namespace detail {

void require_index(const std::string& op, const Tensor& index, const Tensor& x, const Loc& loc) {
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (!index.defined()) throw Error(op, "the index is undefined", loc);
  if (!is_integral(index.dtype())) fail(op, "the index must be an integer tensor (i32 or i64)", {&x, &index}, loc);
}

} // namespace detail

namespace {

// The index's position of flat element k, as "[i, j]".
std::string position(const IntList& shape, int64_t k) {
  IntList at(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    at[d] = shape[d] == 0 ? 0 : k % shape[d];
    k = shape[d] == 0 ? 0 : k / shape[d];
  }
  return detail::list_str(at);
}

// The first of n values outside [0, bound), or n.
template <class T> int64_t first_outside(const T* v, int64_t n, int64_t bound) {
  for (int64_t k = 0; k < n; ++k)
    if (v[k] < 0 || v[k] >= bound) return k;
  return n;
}

} // namespace

namespace detail {

Tensor checked_index(const std::string& op, const Tensor& index, int64_t bound, const std::string& range,
                     const Loc& loc) {
  if (bound == 0) fail(op, "no index is valid for " + range + ": the dim is empty", {&index}, loc);
  if (index.node()->realized() && !detail::active_capture()) {
    const auto storage = detail::host_storage(index, op.c_str(), loc); // read in place (no copy on the host)
    const int64_t k = index.dtype() == DType::Int32 ? first_outside(static_cast<const int32_t*>(storage->data()), index.numel(), bound)
                                                    : first_outside(static_cast<const int64_t*>(storage->data()), index.numel(), bound);
    if (k < index.numel()) {
      const int64_t v = index.dtype() == DType::Int32 ? static_cast<const int32_t*>(storage->data())[k]
                                                      : static_cast<const int64_t*>(storage->data())[k];
      fail(op, "index " + std::to_string(v) + " at position " + position(index.shape(), k) + " is out of range for " +
                   range + ": valid values are [0, " + std::to_string(bound) + ")",
           {&index}, loc);
    }
    return index;
  }
  const auto [reported_op, where] = detail::reported_call(op, loc);
  const int64_t site = graph::index_site({reported_op, "index", bound, where, range});
  return Tensor(b::check_index(index.node(), bound, site));
}

std::string range_text(const char* of, int64_t dim, const Tensor& x, const Tensor& index) {
  return "dim " + std::to_string(dim) + " of the " + of + " " + detail::list_str(x.shape()) + " (index " +
         detail::list_str(index.shape()) + ")";
}

void check_extents(const std::string& op, const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src,
                   const Loc& loc) {
  if (index.dim() != x.dim())
    fail(op, "the index must have the input's rank (" + std::to_string(x.dim()) + ")", {&x, &index}, loc);
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != dim && index.size(d) > x.size(d))
      fail(op, "the index is larger than the input along dim " + std::to_string(d), {&x, &index}, loc);
    if (src && index.size(d) > src->size(d))
      fail(op, "the index is larger than src along dim " + std::to_string(d), {&x, &index, src}, loc);
  }
}

} // namespace detail

using detail::check_extents;
using detail::checked_index;
using detail::range_text;
using detail::require_index;

Tensor gather(const Tensor& input, int64_t dim, const Tensor& index, Loc loc) {
  const graph::SourceScope at(loc, "gather"); // nodes made here record the caller's line
  require_index("gather", index, input, loc);
  const int64_t d = wrap_dim_or_fail("gather", dim, input, loc);
  if (input.dim() == 0 && index.dim() == 0) // a scalar: gather from its one element
    return gather(input.reshape({1}, loc), 0, index.reshape({1}, loc), loc).reshape({}, loc);
  check_extents("gather", input, d, index, nullptr, loc);
  (void)detail::common_device("gather", {&input, &index}, loc);
  if (index.numel() == 0) return result(b::gather(input.node(), d, index.node()), {&input});
  const Tensor idx = checked_index("gather", index, input.size(d), range_text("input", d, input, index), loc);
  return result(b::gather(input.node(), d, idx.node()), {&input});
}

Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index, Loc loc) {
  const graph::SourceScope at(loc, "index_select"); // nodes made here record the caller's line
  require_index("index_select", index, input, loc);
  const int64_t d = wrap_dim_or_fail("index_select", dim, input, loc);
  if (index.dim() > 1) fail("index_select", "the index must be 0-d or 1-d", {&input, &index}, loc);
  if (input.dim() == 0) return gather(input, 0, index.reshape({}, loc), loc);
  (void)detail::common_device("index_select", {&input, &index}, loc);
  IntList out = input.shape(), along(static_cast<size_t>(input.dim()), 1);
  out[d] = along[d] = index.numel();
  // checked before it is spread over the other dims (so a computed index is checked on the host)
  const Tensor idx = index.numel() == 0 ? index
                                         : checked_index("index_select", index, input.size(d),
                                                         range_text("input", d, input, index), loc);
  return result(b::gather(input.node(), d, idx.reshape(along, loc).expand(out, loc).node()), {&input});
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, Loc loc) {
  const graph::SourceScope at(loc, "scatter_add"); // nodes made here record the caller's line
  require_index("scatter_add", index, self, loc);
  if (!src.defined()) throw Error("scatter_add", "src is undefined", loc);
  const int64_t d = wrap_dim_or_fail("scatter_add", dim, self, loc);
  if (src.dtype() != self.dtype()) fail("scatter_add", "src must have self's dtype", {&self, &index, &src}, loc);
  if (self.dtype() == DType::Bool) fail("scatter_add", "not defined for bool tensors", {&self, &src}, loc);
  if (src.dim() != self.dim()) fail("scatter_add", "src must have self's rank", {&self, &index, &src}, loc);
  if (self.dim() == 0) // a scalar: one element, added to where the index points
    return scatter_add(self.reshape({1}, loc), 0, index.reshape({1}, loc), src.reshape({1}, loc), loc).reshape({}, loc);
  check_extents("scatter_add", self, d, index, &src, loc);
  (void)detail::common_device("scatter_add", {&self, &index, &src}, loc);
  if (index.numel() == 0) return self + zeros_like(self); // nothing added; a new tensor, as PyTorch's
  const Tensor idx = checked_index("scatter_add", index, self.size(d), range_text("self", d, self, index), loc);
  return result(b::scatter_add(self.node(), d, idx.node(), src.node()), {&self, &src});
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source, double alpha, Loc loc) {
  const graph::SourceScope at(loc, "index_add"); // nodes made here record the caller's line
  require_index("index_add", index, self, loc);
  if (!source.defined()) throw Error("index_add", "source is undefined", loc);
  const int64_t d = wrap_dim_or_fail("index_add", dim, self, loc);
  if (index.dim() > 1) fail("index_add", "the index must be 0-d or 1-d", {&self, &index, &source}, loc);
  // An integer self scales by an integer alpha, in its own dtype (a double alpha would promote
  // source to f32 and round large values); a fractional one is refused, as PyTorch 2's index_add.
  const bool integral = is_integral(self.dtype());
  if (integral && !(std::trunc(alpha) == alpha && std::abs(alpha) < 0x1p63))
    fail("index_add", "alpha " + std::to_string(alpha) + " is not an integer: an integer self takes an integer alpha",
         {&self, &index, &source}, loc);
  const Scalar factor = integral ? Scalar(static_cast<int64_t>(alpha)) : Scalar(alpha);
  if (self.dim() == 0) return scatter_add(self, 0, index.reshape({}, loc), source.reshape({}, loc) * factor, loc);
  IntList want = self.shape(), along(static_cast<size_t>(self.dim()), 1);
  want[d] = along[d] = index.numel();
  if (source.shape() != want)
    fail("index_add", "source must be " + detail::list_str(want) + " (self's shape with index.numel() along dim " +
                          std::to_string(d) + ")",
         {&self, &index, &source}, loc);
  if (source.dtype() != self.dtype()) fail("index_add", "source must have self's dtype", {&self, &index, &source}, loc);
  if (self.dtype() == DType::Bool) fail("index_add", "not defined for bool tensors", {&self, &source}, loc);
  (void)detail::common_device("index_add", {&self, &index, &source}, loc);
  const Tensor scaled = alpha == 1 ? source : (source * factor).to(self.dtype(), loc);
  if (index.numel() == 0) return self + zeros_like(self);
  const Tensor idx = checked_index("index_add", index, self.size(d), range_text("self", d, self, index), loc);
  return result(b::scatter_add(self.node(), d, idx.reshape(along, loc).expand(want, loc).node(), scaled.node()),
                {&self, &scaled});
}

namespace {

// cumsum and cumprod: the checks, then the scan along the dim (a 0-d input is a copy of itself).
Tensor scan(const char* op, bool product, const Tensor& input, int64_t dim, const Loc& loc) {
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  if (!input.defined()) throw Error(op, "the input is undefined", loc);
  const int64_t d = wrap_dim_or_fail(op, dim, input, loc);
  const Tensor x = is_floating(input.dtype()) ? input : input.to(kInt64, loc); // as PyTorch: integers in i64
  if (x.dim() == 0) return x + zeros_like(x);
  return result(product ? b::cumprod(x.node(), d) : b::cumsum(x.node(), d), {&x});
}

} // namespace

Tensor cumsum(const Tensor& input, int64_t dim, Loc loc) { return scan("cumsum", false, input, dim, loc); }

Tensor cumprod(const Tensor& input, int64_t dim, Loc loc) { return scan("cumprod", true, input, dim, loc); }

namespace {

// sort (and msort, as `op`): the stable argsort along the dim, then the values gathered by it. A 0-d
// input is sorted as one element.
std::pair<Tensor, Tensor> sorted(const char* op, const Tensor& input, int64_t dim, bool descending, const Loc& loc) {
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  if (!input.defined()) throw Error(op, "the input is undefined", loc);
  const int64_t d = wrap_dim_or_fail(op, dim, input, loc);
  if (input.dim() == 0) {
    const auto [values, indices] = sorted(op, input.reshape({1}, loc), 0, descending, loc);
    return {values.reshape({}, loc), indices.reshape({}, loc)};
  }
  const graph::NodeRef order = b::argsort(input.node(), d, descending); // positions in range: no index check
  return {result(b::gather(input.node(), d, order), {&input}), Tensor(order)};
}

} // namespace

std::pair<Tensor, Tensor> sort(const Tensor& input, int64_t dim, bool descending, bool /*stable: always*/, Loc loc) {
  return sorted("sort", input, dim, descending, loc);
}

Tensor argsort(const Tensor& input, int64_t dim, bool descending, bool /*stable: always*/, Loc loc) {
  const graph::SourceScope at(loc, "argsort"); // nodes made here record the caller's line
  if (!input.defined()) throw Error("argsort", "the input is undefined", loc);
  const int64_t d = wrap_dim_or_fail("argsort", dim, input, loc);
  if (input.dim() == 0) return argsort(input.reshape({1}, loc), 0, descending, true, loc).reshape({}, loc);
  return Tensor(b::argsort(input.node(), d, descending));
}

std::pair<Tensor, Tensor> topk(const Tensor& input, int64_t k, int64_t dim, bool largest, bool /*sorted: always*/, Loc loc) {
  const graph::SourceScope at(loc, "topk"); // nodes made here record the caller's line
  if (!input.defined()) throw Error("topk", "the input is undefined", loc);
  if (input.dtype() == DType::Bool) fail("topk", "not defined for bool tensors (as PyTorch's)", {&input}, loc);
  const int64_t d = wrap_dim_or_fail("topk", dim, input, loc);
  const int64_t n = input.dim() == 0 ? 1 : input.size(d);
  if (k < 0 || k > n)
    fail("topk", "k = " + std::to_string(k) + " is out of range for dim " + std::to_string(d) + " of extent " +
                     std::to_string(n) + ": valid values are [0, " + std::to_string(n) + "]",
         {&input}, loc);
  if (input.dim() == 0) return sorted("topk", input, 0, largest, loc); // itself, for k 0 or 1, as PyTorch
  const graph::NodeRef order = b::argsort(input.node(), d, largest);
  graph::Shape first = input.shape();
  first[static_cast<size_t>(d)] = k;
  const size_t rank = first.size();
  const graph::NodeRef top = b::slice(order, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), first);
  return {result(b::gather(input.node(), d, top), {&input}), Tensor(top)};
}

Tensor msort(const Tensor& input, Loc loc) { return sorted("msort", input, 0, false, loc).first; }

std::pair<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending, bool stable, Loc loc) const {
  return kiln::sort(*this, dim, descending, stable, loc);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable, Loc loc) const {
  return kiln::argsort(*this, dim, descending, stable, loc);
}
std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted, Loc loc) const {
  return kiln::topk(*this, k, dim, largest, sorted, loc);
}
Tensor Tensor::msort(Loc loc) const { return kiln::msort(*this, loc); }
Tensor Tensor::gather(int64_t dim, const Tensor& index, Loc loc) const { return kiln::gather(*this, dim, index, loc); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index, Loc loc) const {
  return kiln::index_select(*this, dim, index, loc);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src, Loc loc) const {
  return kiln::scatter_add(*this, dim, index, src, loc);
}
Tensor Tensor::index_add(int64_t dim, const Tensor& index, const Tensor& source, double alpha, Loc loc) const {
  return kiln::index_add(*this, dim, index, source, alpha, loc);
}

} // namespace kiln

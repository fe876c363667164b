// torch's other names for kiln's functions, torch.Tensor's conveniences (clone, expand_as, new_zeros, ...) and
// small composites (movedim, select, inner, linspace, isclose, ...), as PyTorch 1.13's (kiln/tensor.h). Each is a
// composition of kiln's ops (gradients, fusion, compile() and CUDA come with them) that checks its arguments under
// its own name; a detail::UserCall reports an error of an op it uses as its own, at the caller's line.

#include <algorithm>
#include <cmath>

#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/shape.h"
#include "kiln/linalg.h"

namespace kiln {

using detail::fail;

namespace {

using Scope = detail::OpScope;

void require_defined(const char* op, const Tensor& x, const Loc& loc) {
  if (!x.defined()) throw Error(op, "an input is undefined", loc);
}

// The dims of `dims` wrapped for x, each once.
IntList distinct_dims(const char* op, const IntList& dims, const Tensor& x, const Loc& loc) {
  IntList out;
  for (int64_t d : dims) {
    const int64_t w = detail::wrap_dim_or_fail(op, d, x, loc);
    if (std::find(out.begin(), out.end(), w) != out.end())
      fail(op, "dim " + std::to_string(d) + " is given more than once", {&x}, loc);
    out.push_back(w);
  }
  return out;
}

// torch's linspace points in f64: the first half counted from start, the second from end.
Tensor linspace_f64(const char* op, double start, double end, int64_t steps, Device device, const Loc& loc) {
  if (steps < 0) throw Error(op, "the number of steps must be non-negative, got " + std::to_string(steps), loc);
  if (steps <= 1) return full({steps}, start, kFloat64, device, loc);
  const double step = (end - start) / static_cast<double>(steps - 1);
  const Tensor i = arange(0, static_cast<double>(steps), 1, kFloat64, device, loc);
  const Tensor from_start = i * step + start, from_end = (static_cast<double>(steps - 1) - i) * (-step) + end;
  return where(lt(i, wrap_scalar(static_cast<double>(steps / 2), i), loc), from_start, from_end, loc);
}

void require_floating_dtype(const char* op, DType dtype, const Loc& loc) {
  if (!is_floating(dtype)) throw Error(op, "needs a floating dtype, got " + std::string(dtype_name(dtype)), loc);
}

} // namespace

// ---------------------------------------------------------------- torch's other names

#define KILN_UNARY_ALIAS(name, target)                                                                                 \
  Tensor name(const Tensor& x, Loc loc) {                                                                              \
    const Scope scope(#name, loc);                                                                                     \
    require_defined(#name, x, loc);                                                                                    \
    return target(x, loc);                                                                                             \
  }
#define KILN_BINARY_ALIAS(name, target)                                                                                \
  Tensor name(const Tensor& a, const Tensor& b, Loc loc) {                                                             \
    const Scope scope(#name, loc);                                                                                     \
    require_defined(#name, a, loc);                                                                                    \
    require_defined(#name, b, loc);                                                                                    \
    return target(a, b, loc);                                                                                          \
  }
KILN_UNARY_ALIAS(absolute, abs)
KILN_UNARY_ALIAS(negative, neg)
KILN_UNARY_ALIAS(fix, trunc)
KILN_UNARY_ALIAS(sgn, sign)
KILN_UNARY_ALIAS(arccos, acos)
KILN_UNARY_ALIAS(arcsin, asin)
KILN_UNARY_ALIAS(arctan, atan)
KILN_UNARY_ALIAS(arccosh, acosh)
KILN_UNARY_ALIAS(arcsinh, asinh)
KILN_UNARY_ALIAS(arctanh, atanh)
KILN_BINARY_ALIAS(arctan2, atan2)
KILN_BINARY_ALIAS(multiply, mul)
KILN_BINARY_ALIAS(divide, div)
KILN_BINARY_ALIAS(true_divide, div)
KILN_BINARY_ALIAS(subtract, sub)
KILN_BINARY_ALIAS(greater, gt)
KILN_BINARY_ALIAS(greater_equal, ge)
KILN_BINARY_ALIAS(less, lt)
KILN_BINARY_ALIAS(less_equal, le)
KILN_BINARY_ALIAS(not_equal, ne)
#undef KILN_UNARY_ALIAS
#undef KILN_BINARY_ALIAS

Tensor cat(const std::vector<Tensor>& xs, int64_t dim, Loc loc) {
  const Scope scope("cat", loc);
  return concat(xs, dim, loc);
}

Tensor concatenate(const std::vector<Tensor>& xs, int64_t dim, Loc loc) {
  const Scope scope("concatenate", loc);
  return concat(xs, dim, loc);
}

Tensor positive(const Tensor& x, Loc loc) {
  require_defined("positive", x, loc);
  if (x.dtype() == kBool) fail("positive", "does not take a bool tensor", {&x}, loc);
  return x;
}

Tensor clip(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max, Loc loc) {
  const Scope scope("clip", loc);
  require_defined("clip", x, loc);
  return clamp(x, min, max, loc);
}

Tensor swapaxes(const Tensor& x, int64_t d0, int64_t d1, Loc loc) {
  const Scope scope("swapaxes", loc);
  require_defined("swapaxes", x, loc);
  return transpose(x, d0, d1, loc);
}

Tensor swapdims(const Tensor& x, int64_t d0, int64_t d1, Loc loc) {
  const Scope scope("swapdims", loc);
  require_defined("swapdims", x, loc);
  return transpose(x, d0, d1, loc);
}

Tensor broadcast_to(const Tensor& x, IntList shape, Loc loc) {
  const Scope scope("broadcast_to", loc);
  require_defined("broadcast_to", x, loc);
  return expand(x, std::move(shape), loc);
}

// ---------------------------------------------------------------- small composites

Tensor rsub(const Tensor& input, const Tensor& other, Scalar alpha, Loc loc) {
  const Scope scope("rsub", loc);
  require_defined("rsub", input, loc);
  require_defined("rsub", other, loc);
  return sub(other, alpha.to_double() == 1 ? input : input * alpha, loc);
}

std::vector<Tensor> split_with_sizes(const Tensor& x, const IntList& split_sizes, int64_t dim, Loc loc) {
  const Scope scope("split_with_sizes", loc);
  require_defined("split_with_sizes", x, loc);
  return split(x, split_sizes, dim, loc);
}

IntList broadcast_shapes(const std::vector<IntList>& shapes, Loc loc) {
  graph::Shape shape;
  for (const IntList& s : shapes) {
    const std::optional<graph::Shape> b = graph::broadcast_shapes(shape, s);
    if (!b)
      throw Error("broadcast_shapes",
                  "shape " + detail::list_str(s) + " does not broadcast with " + detail::list_str(shape), loc);
    shape = *b;
  }
  return shape;
}

Tensor ravel(const Tensor& x, Loc loc) {
  const Scope scope("ravel", loc);
  require_defined("ravel", x, loc);
  return reshape(x, {-1}, loc);
}

Tensor movedim(const Tensor& x, IntList source, IntList destination, Loc loc) {
  const Scope scope("movedim", loc);
  require_defined("movedim", x, loc);
  if (source.size() != destination.size())
    fail("movedim",
         "source " + detail::list_str(source) + " and destination " + detail::list_str(destination) +
             " must have one length",
         {&x}, loc);
  const IntList from = distinct_dims("movedim", source, x, loc), to = distinct_dims("movedim", destination, x, loc);
  IntList perm(static_cast<size_t>(x.dim()), -1);
  for (size_t k = 0; k < from.size(); ++k) perm[static_cast<size_t>(to[k])] = from[k];
  int64_t next = 0;
  for (int64_t& p : perm) {
    if (p >= 0) continue;
    while (std::find(from.begin(), from.end(), next) != from.end()) ++next;
    p = next++;
  }
  return permute(x, perm, loc);
}

Tensor movedim(const Tensor& x, int64_t source, int64_t destination, Loc loc) {
  return movedim(x, IntList{source}, IntList{destination}, loc);
}

Tensor moveaxis(const Tensor& x, IntList source, IntList destination, Loc loc) {
  const Scope scope("moveaxis", loc);
  return movedim(x, std::move(source), std::move(destination), loc);
}

Tensor moveaxis(const Tensor& x, int64_t source, int64_t destination, Loc loc) {
  const Scope scope("moveaxis", loc);
  return movedim(x, IntList{source}, IntList{destination}, loc);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index, Loc loc) {
  const Scope scope("select", loc);
  require_defined("select", x, loc);
  if (x.dim() == 0) fail("select", "needs a tensor with at least 1 dim", {&x}, loc);
  const int64_t d = detail::wrap_dim_or_fail("select", dim, x, loc), n = x.size(d);
  if (index < -n || index >= n)
    fail("select",
         "index " + std::to_string(index) + " is out of range for dim " + std::to_string(dim) + " of extent " +
             std::to_string(n),
         {&x}, loc);
  const int64_t i = index < 0 ? index + n : index;
  return squeeze(slice(x, d, i, i + 1, 1, loc), d, loc);
}

std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& xs, Loc loc) {
  const Scope scope("broadcast_tensors", loc);
  graph::Shape shape;
  for (const Tensor& x : xs) {
    require_defined("broadcast_tensors", x, loc);
    const std::optional<graph::Shape> s = graph::broadcast_shapes(shape, x.shape());
    if (!s)
      fail("broadcast_tensors",
           "shape " + detail::list_str(x.shape()) + " does not broadcast with " + detail::list_str(shape), {&x}, loc);
    shape = *s;
  }
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(expand(x, shape, loc));
  return out;
}

Tensor atleast_1d(const Tensor& x, Loc loc) {
  const Scope scope("atleast_1d", loc);
  require_defined("atleast_1d", x, loc);
  return x.dim() >= 1 ? x : reshape(x, {1}, loc);
}

Tensor atleast_2d(const Tensor& x, Loc loc) {
  const Scope scope("atleast_2d", loc);
  require_defined("atleast_2d", x, loc);
  if (x.dim() >= 2) return x;
  return reshape(x, {1, x.dim() == 1 ? x.size(0) : 1}, loc);
}

Tensor atleast_3d(const Tensor& x, Loc loc) {
  const Scope scope("atleast_3d", loc);
  require_defined("atleast_3d", x, loc);
  if (x.dim() >= 3) return x;
  if (x.dim() == 2) return unsqueeze(x, 2, loc);
  return reshape(x, {1, x.dim() == 1 ? x.size(0) : 1, 1}, loc);
}

Tensor diagflat(const Tensor& x, int64_t offset, Loc loc) {
  const Scope scope("diagflat", loc);
  require_defined("diagflat", x, loc);
  return diag(reshape(x, {-1}, loc), offset, loc);
}

Tensor inner(const Tensor& a, const Tensor& b, Loc loc) {
  const Scope scope("inner", loc);
  require_defined("inner", a, loc);
  require_defined("inner", b, loc);
  if (a.dim() == 0 || b.dim() == 0) return mul(a, b, loc);
  if (a.size(-1) != b.size(-1))
    fail("inner",
         "the last dims must have one extent, got " + std::to_string(a.size(-1)) + " and " + std::to_string(b.size(-1)),
         {&a, &b}, loc);
  return tensordot(a, b, IntList{a.dim() - 1}, IntList{b.dim() - 1}, loc);
}

Tensor full_like(const Tensor& like, Scalar value, Loc loc) {
  require_defined("full_like", like, loc);
  return full(like.shape(), value, like.dtype(), like.device(), loc);
}

Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype, Device device, Loc loc) {
  const Scope scope("eye", loc);
  const int64_t cols = m.value_or(n);
  if (n < 0 || cols < 0)
    throw Error("eye", "the sizes must be non-negative, got " + std::to_string(n) + " and " + std::to_string(cols),
                loc);
  const Tensor rows = arange(0, static_cast<double>(n), 1, kInt64, device, loc).reshape({n, 1}, loc);
  const Tensor columns = arange(0, static_cast<double>(cols), 1, kInt64, device, loc).reshape({1, cols}, loc);
  return eq(rows, columns, loc).to(dtype, loc);
}

Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device, Loc loc) {
  const Scope scope("linspace", loc);
  require_floating_dtype("linspace", dtype, loc);
  return linspace_f64("linspace", start, end, steps, device, loc).to(dtype, loc);
}

Tensor logspace(double start, double end, int64_t steps, double base, DType dtype, Device device, Loc loc) {
  const Scope scope("logspace", loc);
  require_floating_dtype("logspace", dtype, loc);
  const Tensor e = linspace_f64("logspace", start, end, steps, device, loc);
  return pow(full({}, base, kFloat64, device, loc), e, loc).to(dtype, loc);
}

Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan, Loc loc) {
  const Scope scope("isclose", loc);
  require_defined("isclose", a, loc);
  require_defined("isclose", b, loc);
  if (a.dtype() != b.dtype()) fail("isclose", "the tensors must have one dtype", {&a, &b}, loc);
  if (!(rtol >= 0) || !(atol >= 0))
    fail("isclose", "rtol and atol must be non-negative, got " + std::to_string(rtol) + " and " + std::to_string(atol),
         {&a, &b}, loc);
  const Tensor x = is_floating(a.dtype()) ? a.detach() : a.detach().to(kFloat64, loc);
  const Tensor y = is_floating(b.dtype()) ? b.detach() : b.detach().to(kFloat64, loc);
  Tensor close = eq(x, y, loc);
  if (equal_nan) close = logical_or(close, logical_and(isnan(x, loc), isnan(y, loc), loc), loc);
  const Tensor actual = abs(x - y, loc), allowed = abs(y * rtol, loc) + atol;
  return logical_or(close, logical_and(isfinite(actual, loc), le(actual, allowed, loc), loc), loc);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan, Loc loc) {
  const Scope scope("allclose", loc);
  return all(isclose(a, b, rtol, atol, equal_nan, loc), loc).item<bool>(loc);
}

bool equal(const Tensor& a, const Tensor& b, Loc loc) {
  const Scope scope("equal", loc);
  require_defined("equal", a, loc);
  require_defined("equal", b, loc);
  if (a.shape() != b.shape()) return false;
  return all(eq(a.detach(), b.detach(), loc), loc).item<bool>(loc);
}

Tensor isin(const Tensor& elements, const Tensor& test_elements, bool invert, Loc loc) {
  const Scope scope("isin", loc);
  require_defined("isin", elements, loc);
  require_defined("isin", test_elements, loc);
  const DType dt = promote_types(elements.dtype(), test_elements.dtype());
  const Tensor tests = test_elements.detach().to(dt, loc).reshape({1, -1}, loc);
  const Tensor found = any(eq(elements.detach().to(dt, loc).reshape({-1, 1}, loc), tests, loc), 1, false, loc);
  const Tensor in = found.reshape(elements.shape(), loc);
  return invert ? logical_not(in, loc) : in;
}

Tensor fliplr(const Tensor& x, Loc loc) {
  const Scope scope("fliplr", loc);
  require_defined("fliplr", x, loc);
  if (x.dim() < 2) fail("fliplr", "needs a tensor of at least 2 dims", {&x}, loc);
  return flip(x, {1}, loc);
}

Tensor flipud(const Tensor& x, Loc loc) {
  const Scope scope("flipud", loc);
  require_defined("flipud", x, loc);
  if (x.dim() < 1) fail("flipud", "needs a tensor of at least 1 dim", {&x}, loc);
  return flip(x, {0}, loc);
}

// ---------------------------------------------------------------- Tensor methods

Tensor Tensor::clone(Loc loc) const {
  require_defined("clone", *this, loc);
  // A value that needs no gradient gets a node of its own, so that marking the clone a leaf cannot make it
  // the leaf of this tensor's uses too; one that does is a new handle on the same node (the gradient flows).
  if (!requires_grad()) return detach();
  const graph::SourceScope at(loc, "clone");
  return detail::result(node(), {this});
}

Tensor Tensor::contiguous(Loc loc) const {
  require_defined("contiguous", *this, loc);
  return *this;
}

Tensor Tensor::expand_as(const Tensor& other, Loc loc) const {
  const Scope scope("expand_as", loc);
  require_defined("expand_as", other, loc);
  return expand(other.shape(), loc);
}

Tensor Tensor::reshape_as(const Tensor& other, Loc loc) const {
  const Scope scope("reshape_as", loc);
  require_defined("reshape_as", other, loc);
  return reshape(other.shape(), loc);
}

Tensor Tensor::view_as(const Tensor& other, Loc loc) const {
  const Scope scope("view_as", loc);
  require_defined("view_as", other, loc);
  return reshape(other.shape(), loc);
}

Tensor Tensor::type_as(const Tensor& other, Loc loc) const {
  const Scope scope("type_as", loc);
  require_defined("type_as", other, loc);
  return to(other.dtype(), loc);
}

Tensor Tensor::new_zeros(IntList shape, Loc loc) const {
  require_defined("new_zeros", *this, loc);
  return zeros(std::move(shape), dtype(), device(), loc);
}

Tensor Tensor::new_ones(IntList shape, Loc loc) const {
  require_defined("new_ones", *this, loc);
  return ones(std::move(shape), dtype(), device(), loc);
}

Tensor Tensor::new_full(IntList shape, Scalar value, Loc loc) const {
  require_defined("new_full", *this, loc);
  return full(std::move(shape), value, dtype(), device(), loc);
}

Tensor Tensor::select(int64_t dim, int64_t index, Loc loc) const { return kiln::select(*this, dim, index, loc); }
Tensor Tensor::movedim(IntList source, IntList destination, Loc loc) const {
  return kiln::movedim(*this, std::move(source), std::move(destination), loc);
}
Tensor Tensor::movedim(int64_t source, int64_t destination, Loc loc) const {
  return kiln::movedim(*this, source, destination, loc);
}
Tensor Tensor::moveaxis(IntList source, IntList destination, Loc loc) const {
  return kiln::moveaxis(*this, std::move(source), std::move(destination), loc);
}
Tensor Tensor::moveaxis(int64_t source, int64_t destination, Loc loc) const {
  return kiln::moveaxis(*this, source, destination, loc);
}
Tensor Tensor::swapaxes(int64_t d0, int64_t d1, Loc loc) const { return kiln::swapaxes(*this, d0, d1, loc); }
Tensor Tensor::swapdims(int64_t d0, int64_t d1, Loc loc) const { return kiln::swapdims(*this, d0, d1, loc); }
Tensor Tensor::ravel(Loc loc) const { return kiln::ravel(*this, loc); }
Tensor Tensor::broadcast_to(IntList shape, Loc loc) const { return kiln::broadcast_to(*this, std::move(shape), loc); }
Tensor Tensor::clip(std::optional<Scalar> min, std::optional<Scalar> max, Loc loc) const {
  return kiln::clip(*this, min, max, loc);
}
Tensor Tensor::isclose(const Tensor& other, double rtol, double atol, bool equal_nan, Loc loc) const {
  return kiln::isclose(*this, other, rtol, atol, equal_nan, loc);
}
bool Tensor::allclose(const Tensor& other, double rtol, double atol, bool equal_nan, Loc loc) const {
  return kiln::allclose(*this, other, rtol, atol, equal_nan, loc);
}
bool Tensor::equal(const Tensor& other, Loc loc) const { return kiln::equal(*this, other, loc); }

} // namespace kiln

// Vector p-norms (torch.linalg.vector_norm, torch.norm) and the functions built on them:
// nn::functional::normalize, cosine_similarity and pairwise_distance. Each norm is written so that
// autograd's gradient is PyTorch 1.13's norm_backward, also where the norm or an element is 0.

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "frontend/src/tensor_impl.h"
#include "kiln/functional.h"

namespace kiln {

using detail::fail;
using detail::wrap_dim_or_fail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// x^p of a non-negative a, where a = 0 gives 0 (p > 0) or inf (p < 0) and has gradient 0: pow's
// derivative p a^(p-1) there is inf (p < 1), and PyTorch's norm backward masks it out.
Tensor pow_or_limit_at_zero(const Tensor& a, double p, const Loc& loc) {
  const Tensor nonzero = ne(a, wrap_scalar(0, a, loc), loc);
  return where(nonzero, pow(where(nonzero, a, 1, loc), p, loc), p > 0 ? 0.0 : kInf, loc);
}

// r^(1/p) of a non-negative sum r (p > 0), with gradient 0 where r is 0 (PyTorch's masked norm == 0).
Tensor root_or_zero(const Tensor& r, double p, const Loc& loc) {
  const Tensor nonzero = ne(r, wrap_scalar(0, r, loc), loc);
  const Tensor safe = where(nonzero, r, 1, loc);
  return where(nonzero, p == 2 ? sqrt(safe, loc) : pow(safe, 1.0 / p, loc), 0, loc);
}

// An order as PyTorch writes it: "inf", "-1", "0.5".
std::string order_str(double ord) {
  std::ostringstream os;
  if (std::isinf(ord)) os << (ord > 0 ? "inf" : "-inf");
  else os << ord;
  return os.str();
}

// The checks of a p-norm of x over dims: floating x, dims in range and distinct, and a max- or min-like
// order (inf, -inf, p < 0) only over dims with elements (such a reduction has no identity).
void check_norm(const char* op, const Tensor& x, double ord, const IntList& dims, const Loc& loc) {
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (!is_floating(x.dtype())) fail(op, "needs a floating tensor (cast the input first)", {&x}, loc);
  if (std::isnan(ord)) fail(op, "the order is NaN", {&x}, loc);
  std::vector<int64_t> seen;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim_or_fail(op, d, x, loc);
    if (std::find(seen.begin(), seen.end(), w) != seen.end())
      fail(op, "dim " + std::to_string(d) + " appears more than once", {&x}, loc);
    seen.push_back(w);
  }
  const bool has_identity = ord >= 0 && ord != kInf;
  const bool empty = dims.empty() || x.dim() == 0
                         ? x.numel() == 0
                         : std::any_of(seen.begin(), seen.end(), [&](int64_t d) { return x.size(d) == 0; });
  if (!has_identity && empty)
    fail(op, "cannot compute the " + order_str(ord) + " norm over an empty dim: the reduction has no identity", {&x},
         loc);
}

Tensor vector_norm(const char* op, const Tensor& x, double ord, const IntList& dims, bool keepdim, const Loc& loc) {
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  check_norm(op, x, ord, dims, loc);
  const Tensor a = abs(x, loc);
  if (ord == kInf) return a.max(dims, keepdim, loc); // gradient split among ties, as PyTorch
  if (ord == -kInf) return a.min(dims, keepdim, loc);
  if (ord == 0) return ne(x, wrap_scalar(0, x, loc), loc).to(x.dtype(), loc).sum(dims, keepdim, loc); // no gradient
  if (ord == 1) return a.sum(dims, keepdim, loc);
  if (ord == 2) return root_or_zero((x * x).sum(dims, keepdim, loc), 2, loc);
  const Tensor r = pow_or_limit_at_zero(a, ord, loc).sum(dims, keepdim, loc);
  return ord > 0 ? root_or_zero(r, ord, loc) : pow(r, 1.0 / ord, loc); // p < 0: a sum of inf gives 0
}

} // namespace

Tensor linalg_vector_norm(const Tensor& x, double ord, IntList dims, bool keepdim, Loc loc) {
  return vector_norm("linalg_vector_norm", x, ord, dims, keepdim, loc);
}

Tensor norm(const Tensor& x, double p, IntList dims, bool keepdim, Loc loc) {
  return vector_norm("norm", x, p, dims, keepdim, loc);
}

Tensor Tensor::norm(double p, IntList dims, bool keepdim, Loc loc) const {
  return kiln::norm(*this, p, std::move(dims), keepdim, loc);
}

} // namespace kiln

namespace kiln::nn::functional {

namespace {

// The 2-norm of t along dim (kept) clamped at eps as PyTorch 1.13's cosine_similarity does it, in place under
// no_grad: the value is max(norm, eps), and the gradient the norm's backward with that value, t / max(norm, eps)
// (t / eps where clamped: a branch of value eps whose derivative is that of sum(t^2) / (2 eps)).
Tensor clamped_norm(const char* op, const Tensor& t, int64_t dim, double eps, const Loc& loc) {
  const Tensor n = vector_norm(op, t, 2, {dim}, true, loc);
  if (!(eps > 0)) return n; // never clamped
  const Tensor squares = (t * t).sum({dim}, true, loc);
  const Tensor below = lt(n, wrap_scalar(eps, n, loc), loc);
  return where(below, (squares - squares.detach()) / (2 * eps) + eps, n, loc);
}

// The broadcast shape of two operands of `op`, or a kiln::Error naming them.
graph::Shape broadcast_or_fail(const char* op, const Tensor& x1, const Tensor& x2, const Loc& loc) {
  if (!x1.defined() || !x2.defined()) throw Error(op, "an input is undefined", loc);
  const std::optional<graph::Shape> shape = graph::broadcast_shapes(x1.shape(), x2.shape());
  if (!shape) fail(op, "the shapes do not broadcast", {&x1, &x2}, loc);
  return *shape;
}

} // namespace

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps, Loc loc) {
  const graph::SourceScope at(loc, "normalize"); // nodes made here record the caller's line
  const Tensor n = vector_norm("normalize", x, p, {dim}, true, loc);
  return x / clamp(n, eps, std::nullopt, loc); // a norm below eps passes no gradient, as clamp_min
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps, Loc loc) {
  const char* op = "cosine_similarity";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  const graph::Shape shape = broadcast_or_fail(op, x1, x2, loc);
  const DType dt = promote_types(x1.dtype(), x2.dtype());
  if (!is_floating(dt)) fail(op, "needs a floating input (their common dtype is not)", {&x1, &x2}, loc);
  const Tensor a = x1.to(dt, loc).expand(shape, loc), b = x2.to(dt, loc).expand(shape, loc);
  // Each input divided by its norm first (PyTorch 1.13's order: the result stays in [-1, 1]).
  const Tensor na = clamped_norm(op, a, dim, eps, loc), nb = clamped_norm(op, b, dim, eps, loc);
  return ((a / na) * (b / nb)).sum({dim}, false, loc);
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim, Loc loc) {
  const char* op = "pairwise_distance";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  (void)broadcast_or_fail(op, x1, x2, loc);
  // the last dim of the broadcast result (-1 of a 0-d result)
  const int64_t last = std::max(x1.dim(), x2.dim()) - 1;
  return vector_norm(op, x1 - x2 + eps, p, {last}, keepdim, loc);
}

} // namespace kiln::nn::functional

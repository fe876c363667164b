// More random tensors (kiln/tensor.h), as PyTorch 1.13's rand_like, randn_like, randint, randperm, bernoulli and
// normal: compositions of kiln's counter-based rand and randn, so one seed gives the same values on every device
// and in compile(), and normal's gradient flows to its mean and std.

#include <cmath>

#include "frontend/src/tensor_impl.h"
#include "kiln/indexops.h"

namespace kiln {

using detail::fail;

namespace {

void require_floating(const char* op, const Tensor& x, const Loc& loc) {
  if (!x.defined()) throw Error(op, "an input is undefined", loc);
  if (!is_floating(x.dtype())) fail(op, "needs a floating tensor", {&x}, loc);
}

// Whether an element of x lies outside [lo, hi] (x already computed; a lazy x is not forced: false).
bool computed_outside(const Tensor& x, double lo, double hi, const Loc& loc) {
  if (!x.node()->realized()) return false;
  const Tensor inside = logical_and(ge(x, wrap_scalar(lo, x), loc), le(x, wrap_scalar(hi, x), loc), loc);
  return !all(inside, loc).item<bool>(loc);
}

} // namespace

Tensor rand_like(const Tensor& like, uint64_t seed, Loc loc) {
  require_floating("rand_like", like, loc);
  return rand(like.shape(), seed, like.dtype(), like.device(), loc);
}

Tensor randn_like(const Tensor& like, uint64_t seed, Loc loc) {
  require_floating("randn_like", like, loc);
  return randn(like.shape(), seed, like.dtype(), like.device(), loc);
}

Tensor randint(int64_t low, int64_t high, IntList shape, uint64_t seed, DType dtype, Device device, Loc loc) {
  const graph::SourceScope at(loc, "randint");
  const detail::UserCall call("randint", loc);
  if (!(high > low))
    throw Error("randint", "high (" + std::to_string(high) + ") must exceed low (" + std::to_string(low) + ")", loc);
  const double span = static_cast<double>(high - low);
  const Tensor u = rand(std::move(shape), seed, kFloat64, device, loc); // [0, 1): floor(u span) < span
  return (floor(u * span, loc) + static_cast<double>(low)).to(dtype, loc);
}

Tensor randperm(int64_t n, uint64_t seed, Device device, Loc loc) {
  const graph::SourceScope at(loc, "randperm");
  const detail::UserCall call("randperm", loc);
  if (n < 0) throw Error("randperm", "n must be non-negative, got " + std::to_string(n), loc);
  return argsort(rand({n}, seed, kFloat64, device, loc), 0, false, true, loc);
}

Tensor bernoulli(const Tensor& p, uint64_t seed, Loc loc) {
  const graph::SourceScope at(loc, "bernoulli");
  const detail::UserCall call("bernoulli", loc);
  require_floating("bernoulli", p, loc);
  if (computed_outside(p, 0, 1, loc)) fail("bernoulli", "p must be in [0, 1]", {&p}, loc);
  return lt(rand(p.shape(), seed, kFloat64, p.device(), loc), p.detach().to(kFloat64, loc), loc).to(p.dtype(), loc);
}

Tensor normal(const Tensor& mean, const Tensor& std, uint64_t seed, Loc loc) {
  const graph::SourceScope at(loc, "normal");
  const detail::UserCall call("normal", loc);
  require_floating("normal", mean, loc);
  require_floating("normal", std, loc);
  if (mean.dtype() != std.dtype()) fail("normal", "mean and std must have one dtype", {&mean, &std}, loc);
  if (computed_outside(std, 0, INFINITY, loc)) fail("normal", "std must be >= 0", {&std}, loc);
  const Tensor shape_of = mean.detach() + std.detach(); // the broadcast shape (fails as normal)
  return mean + std * randn(shape_of.shape(), seed, mean.dtype(), mean.device(), loc);
}

} // namespace kiln

// More pointwise math (kiln/tensor.h) and torch.special (kiln/special.h), as PyTorch 1.13's functions of the same
// names: compositions of kiln's ops (where, log1p, sqrt, ...), with a custom gradient where PyTorch's differs from
// the composition's (hypot, logit, xlog1py), so gradients, fusion, compile() and CUDA come with them. Each function
// checks its arguments under its own name, and a detail::UserCall reports an error of an op it uses as its own, at
// the caller's line.

#include <cmath>
#include <limits>
#include <numbers>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"
#include "kiln/special.h"

namespace kiln {

using detail::fail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Scope = detail::OpScope;

void require_defined(const char* op, const Tensor& x, const Loc& loc) {
  if (!x.defined()) throw Error(op, "an input is undefined", loc);
}

void require_floating(const char* op, const Tensor& x, const Loc& loc) {
  require_defined(op, x, loc);
  if (!is_floating(x.dtype())) fail(op, "needs floating tensors", {&x}, loc);
}

// x as a floating tensor: integers and bool become f32, as PyTorch's unary float ops.
Tensor floating(const char* op, const Tensor& x, const Loc& loc) {
  require_defined(op, x, loc);
  return is_floating(x.dtype()) ? x : x.to(kFloat32, loc);
}

// a and b expanded to their broadcast shape (a mismatch fails under the caller's name) in `dt`.
std::pair<Tensor, Tensor> broadcast_pair(const Tensor& a, const Tensor& b, DType dt, const Loc& loc) {
  const IntList shape = (a.detach().to(kFloat64, loc) + b.detach().to(kFloat64, loc)).shape();
  return {a.to(dt, loc).expand(shape, loc), b.to(dt, loc).expand(shape, loc)};
}

// A custom-gradient function of two inputs (value and gradients built from kiln ops: differentiable again).
Tensor
binary_custom(const char* op, const Tensor& a, const Tensor& b,
              std::function<Tensor(const Tensor&, const Tensor&)> value,
              std::function<std::vector<Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&)> grads,
              const Loc& loc) {
  const CustomFunction f{
      op, [value](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {value(in[0], in[1])}; },
      [grads](const std::vector<Tensor>& in, const std::vector<Tensor>& out,
              const std::vector<Tensor>& g) -> std::vector<Tensor> { return grads(in[0], in[1], out[0], g[0]); }};
  return f({a, b}, loc)[0];
}

// sqrt(a^2 + b^2) scaled by the larger magnitude (no overflow or underflow), 0 where both are 0, +inf where either
// is infinite.
Tensor hypot_value(const Tensor& a, const Tensor& b, const Loc& loc) {
  const Tensor big = maximum(abs(a, loc), abs(b, loc), loc), small = minimum(abs(a, loc), abs(b, loc), loc);
  const Tensor zero = eq(big, wrap_scalar(0, big), loc);
  const Tensor safe = where(zero, wrap_scalar(1, big), big, loc);
  const Tensor r = small / safe;
  const Tensor h = where(zero, wrap_scalar(0, big), big * sqrt(r * r + 1.0, loc), loc);
  return where(logical_or(isinf(a, loc), isinf(b, loc), loc), wrap_scalar(kInf, big), h, loc);
}

// x * log1p(y), 0 where x is 0 and y is not NaN.
Tensor xlog1py_value(const Tensor& x, const Tensor& y, const Loc& loc) {
  const Tensor zero_x = logical_and(eq(x, wrap_scalar(0, x), loc), logical_not(isnan(y, loc), loc), loc);
  return where(logical_not(zero_x, loc), x * log1p(y, loc), 0, loc);
}

// log(x / (1 - x)) of x clamped to [eps, 1 - eps] (unclamped without eps).
Tensor logit_value(const Tensor& x, std::optional<double> eps, const Loc& loc) {
  const Tensor z = eps ? clamp(x, *eps, 1.0 - *eps, loc) : x;
  return log(z / (1.0 - z), loc);
}

// PyTorch's logit gradient: g / (x (1 - x)), 0 outside [eps, 1 - eps] with eps, NaN outside [0, 1] without.
Tensor logit_grad(const Tensor& x, const Tensor& g, std::optional<double> eps, const Loc& loc) {
  const Tensor d = g / (x * (1.0 - x));
  const double lo = eps ? *eps : 0.0, hi = eps ? 1.0 - *eps : 1.0;
  const Tensor outside = logical_or(lt(x, wrap_scalar(lo, x), loc), gt(x, wrap_scalar(hi, x), loc), loc);
  return where(outside, wrap_scalar(eps ? 0.0 : kNaN, d), d, loc);
}

// -x log(x), 0 at 0, -inf below 0, NaN at NaN.
Tensor entr_value(const Tensor& x, const Loc& loc) {
  const Tensor positive_x = gt(x, wrap_scalar(0, x), loc);
  const Tensor inside = where(positive_x, -x * log(x, loc), wrap_scalar(0, x), loc);
  const Tensor below = where(lt(x, wrap_scalar(0, x), loc), wrap_scalar(-kInf, x), inside, loc);
  return where(isnan(x, loc), x, below, loc);
}

// ---------------------------------------------------------------- gamma functions (f64 tensors)

constexpr double kPi = std::numbers::pi;

// x - round(x): sin(pi x) = +-sin(pi r) with an exact argument reduction.
Tensor near_integer_offset(const Tensor& x, const Loc& loc) { return x - round(x, loc); }

// True at 0 and the negative integers (the poles of Gamma).
Tensor at_pole(const Tensor& x, const Loc& loc) {
  return logical_and(le(x, wrap_scalar(0, x), loc), eq(x, floor(x, loc), loc), loc);
}

// lgamma for x >= 1/2 by the Lanczos sum (g = 7, n = 9), (z + 1/2)(log t - 1) - g written so that it does not
// overflow before the result does.
Tensor lanczos_lgamma(const Tensor& x, const Loc& loc) {
  static constexpr double kP[] = {0.99999999999980993,  676.5203681218851,     -1259.1392167224028,
                                  771.32342877765313,   -176.61502916214059,   12.507343278686905,
                                  -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7};
  const Tensor z = x - 1.0;
  Tensor a = full_like(z, kP[0], loc);
  for (int i = 1; i < 9; ++i) a = a + kP[i] / (z + static_cast<double>(i));
  const Tensor t = z + 7.5;
  return (z + 0.5) * (log(t, loc) - 1.0) - 7.0 + 0.5 * std::log(2 * kPi) + log(a, loc);
}

Tensor lgamma_value(const Tensor& x, const Loc& loc) {
  const Tensor small = lt(x, wrap_scalar(0.5, x), loc);
  const Tensor up = where(small, 1.0 - x, x, loc); // the reflection's 1 - x below 1/2
  const Tensor big = lanczos_lgamma(up, loc);
  const Tensor s = abs(sin(near_integer_offset(x, loc) * kPi, loc), loc);
  const Tensor safe_s = where(eq(s, wrap_scalar(0, s), loc), wrap_scalar(1, s), s, loc);
  const Tensor reflected = log(kPi / safe_s, loc) - big;
  const Tensor value = where(small, reflected, big, loc);
  return where(logical_or(at_pole(x, loc), isinf(x, loc), loc), wrap_scalar(kInf, x), value, loc);
}

// PyTorch's calc_digamma for x >= 0 (not 0): recurrence to x >= 10 (ten steps at most), then the asymptotic
// series (its Cephes coefficients), PSI_10 at exactly 10.
Tensor digamma_nonnegative(const Tensor& x0, const Loc& loc) {
  static constexpr double kA[] = {8.33333333333333333333E-2,  -2.10927960927960927961E-2, 7.57575757575757575758E-3,
                                  -4.16666666666666666667E-3, 3.96825396825396825397E-3,  -8.33333333333333333333E-3,
                                  8.33333333333333333333E-2};
  Tensor x = x0, result = zeros_like(x0);
  for (int i = 0; i < 10; ++i) {
    const Tensor below = lt(x, wrap_scalar(10, x), loc);
    result = where(below, result - 1.0 / x, result, loc);
    x = where(below, x + 1.0, x, loc);
  }
  const Tensor z = 1.0 / (x * x);
  Tensor poly = full_like(z, kA[0], loc);
  for (int i = 1; i < 7; ++i) poly = poly * z + kA[i];
  const Tensor y = where(lt(x, wrap_scalar(1e17, x), loc), z * poly, wrap_scalar(0, z), loc);
  const Tensor series = result + log(x, loc) - 0.5 / x - y;
  return where(eq(x, wrap_scalar(10, x), loc), result + 2.25175258906672110764, series, loc);
}

Tensor digamma_value(const Tensor& x, const Loc& loc) {
  const Tensor negative = lt(x, wrap_scalar(0, x), loc);
  const Tensor up = where(negative, 1.0 - x, x, loc);
  const Tensor safe_up = where(eq(up, wrap_scalar(0, up), loc), wrap_scalar(1, up), up, loc);
  const Tensor base = digamma_nonnegative(safe_up, loc);
  const Tensor r = x - trunc(x, loc); // modf's fraction
  const Tensor reflected = base - kPi / tan(r * kPi, loc);
  Tensor value = where(negative, reflected, base, loc);
  value = where(logical_and(negative, eq(x, trunc(x, loc), loc), loc), wrap_scalar(kNaN, x), value, loc);
  const Tensor signed_inf =
      where(gt(1.0 / x, wrap_scalar(0, x), loc), wrap_scalar(-kInf, x), wrap_scalar(kInf, x), loc);
  return where(eq(x, wrap_scalar(0, x), loc), signed_inf, value, loc);
}

// PyTorch's calc_trigamma: reflection below 1/2, six recurrence steps, then a short series.
Tensor trigamma_value(const Tensor& x0, const Loc& loc) {
  const Tensor small = lt(x0, wrap_scalar(0.5, x0), loc);
  const Tensor sin_pi_x = sin(x0 * kPi, loc);
  Tensor result = where(small, -(kPi * kPi) / (sin_pi_x * sin_pi_x), zeros_like(x0), loc);
  Tensor x = where(small, 1.0 - x0, x0, loc);
  for (int i = 0; i < 6; ++i) {
    result = result + 1.0 / (x * x);
    x = x + 1.0;
  }
  const Tensor ixx = 1.0 / (x * x);
  result = result + (1.0 + 1.0 / (2.0 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / x;
  return where(small, -result, result, loc);
}

// A unary function of x computed in f64 (integers and f32 cast there; the result cast back to x's floating
// dtype), its gradient g * grad(x).
Tensor unary_f64(const char* op, const Tensor& x, Tensor (*value)(const Tensor&, const Loc&),
                 Tensor (*grad)(const Tensor&, const Loc&), const Loc& loc) {
  const Tensor xf = floating(op, x, loc);
  const CustomFunction f{
      op, [value, loc](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {value(in[0], loc)}; },
      [grad, loc](const std::vector<Tensor>& in, const std::vector<Tensor>&,
                  const std::vector<Tensor>& g) -> std::vector<Tensor> { return {g[0] * grad(in[0], loc)}; }};
  return f({xf.to(kFloat64, loc)}, loc)[0].to(xf.dtype(), loc);
}

Tensor digamma_of(const Tensor& x, const Loc& loc);

Tensor lgamma_of(const Tensor& x, const Loc& loc) { return unary_f64("lgamma", x, lgamma_value, digamma_of, loc); }
Tensor digamma_of(const Tensor& x, const Loc& loc) {
  return unary_f64("digamma", x, digamma_value, trigamma_value, loc);
}

} // namespace

// ---------------------------------------------------------------- kiln/tensor.h

Tensor hypot(const Tensor& a, const Tensor& b, Loc loc) {
  const Scope scope("hypot", loc);
  require_floating("hypot", a, loc);
  require_floating("hypot", b, loc);
  const auto [x, y] = broadcast_pair(a, b, promote_types(a.dtype(), b.dtype()), loc);
  return binary_custom(
      "hypot", x, y, [loc](const Tensor& p, const Tensor& q) { return hypot_value(p, q, loc); },
      [](const Tensor& p, const Tensor& q, const Tensor& h, const Tensor& g) {
        return std::vector<Tensor>{g * p / h, g * q / h};
      },
      loc);
}

Tensor logaddexp2(const Tensor& a, const Tensor& b, Loc loc) {
  const Scope scope("logaddexp2", loc);
  require_floating("logaddexp2", a, loc);
  require_floating("logaddexp2", b, loc);
  return logaddexp(a * std::numbers::ln2, b * std::numbers::ln2, loc) * (1.0 / std::numbers::ln2);
}

Tensor logit(const Tensor& x, std::optional<double> eps, Loc loc) {
  const Scope scope("logit", loc);
  const Tensor xf = floating("logit", x, loc);
  const CustomFunction f{
      "logit",
      [eps, loc](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {logit_value(in[0], eps, loc)}; },
      [eps, loc](const std::vector<Tensor>& in, const std::vector<Tensor>&,
                 const std::vector<Tensor>& g) -> std::vector<Tensor> { return {logit_grad(in[0], g[0], eps, loc)}; }};
  return f({xf}, loc)[0];
}

Tensor sinc(const Tensor& x, Loc loc) {
  const Scope scope("sinc", loc);
  const Tensor xf = floating("sinc", x, loc);
  const Tensor zero = eq(xf, wrap_scalar(0, xf), loc);
  const Tensor px = where(zero, wrap_scalar(1, xf), xf, loc) * std::numbers::pi; // no 0 / 0 in the gradient
  return where(zero, wrap_scalar(1, xf), sin(px, loc) / px, loc);
}

Tensor deg2rad(const Tensor& x, Loc loc) {
  const Scope scope("deg2rad", loc);
  return floating("deg2rad", x, loc) * (std::numbers::pi / 180.0);
}

Tensor rad2deg(const Tensor& x, Loc loc) {
  const Scope scope("rad2deg", loc);
  return floating("rad2deg", x, loc) * (180.0 / std::numbers::pi);
}

Tensor float_power(const Tensor& a, const Tensor& b, Loc loc) {
  const Scope scope("float_power", loc);
  require_defined("float_power", a, loc);
  require_defined("float_power", b, loc);
  return pow(a.to(kFloat64, loc), b.to(kFloat64, loc), loc);
}

Tensor float_power(const Tensor& a, Scalar b, Loc loc) {
  const Scope scope("float_power", loc);
  require_defined("float_power", a, loc);
  return pow(a.to(kFloat64, loc), b, loc);
}

namespace {
// fmax (max) or fmin: a where it is no less (no greater) than b or b is NaN, else b: a NaN loses to a number.
Tensor nan_losing_extreme(const char* op, const Tensor& a, const Tensor& b, bool max, const Loc& loc) {
  const Scope scope(op, loc);
  require_defined(op, a, loc);
  require_defined(op, b, loc);
  const auto [x, y] = broadcast_pair(a, b, promote_types(a.dtype(), b.dtype()), loc);
  const Tensor keep_x = max ? ge(x, y, loc) : le(x, y, loc);
  return where(logical_or(keep_x, isnan(y, loc), loc), x, y, loc);
}
} // namespace

Tensor fmax(const Tensor& a, const Tensor& b, Loc loc) { return nan_losing_extreme("fmax", a, b, true, loc); }

Tensor fmin(const Tensor& a, const Tensor& b, Loc loc) { return nan_losing_extreme("fmin", a, b, false, loc); }

Tensor heaviside(const Tensor& x, const Tensor& values, Loc loc) {
  const Scope scope("heaviside", loc);
  require_defined("heaviside", x, loc);
  require_defined("heaviside", values, loc);
  if (x.dtype() != values.dtype()) fail("heaviside", "the input and values must have one dtype", {&x, &values}, loc);
  const auto [p, v] = broadcast_pair(x, values, x.dtype(), loc);
  return where(eq(p, wrap_scalar(0, p), loc), v, gt(p, wrap_scalar(0, p), loc).to(p.dtype(), loc), loc);
}

Tensor logical_xor(const Tensor& a, const Tensor& b, Loc loc) {
  const Scope scope("logical_xor", loc);
  require_defined("logical_xor", a, loc);
  require_defined("logical_xor", b, loc);
  return ne(a.to(kBool, loc), b.to(kBool, loc), loc);
}

Tensor lgamma(const Tensor& x, Loc loc) {
  const Scope scope("lgamma", loc);
  return lgamma_of(x, loc);
}

Tensor digamma(const Tensor& x, Loc loc) {
  const Scope scope("digamma", loc);
  return digamma_of(x, loc);
}

Tensor mvlgamma(const Tensor& x, int64_t p, Loc loc) {
  const Scope scope("mvlgamma", loc);
  require_floating("mvlgamma", x, loc);
  if (p < 1) fail("mvlgamma", "p must be at least 1, got " + std::to_string(p), {&x}, loc);
  const double bound = static_cast<double>(p - 1) / 2;
  if (x.node()->realized() && !all(gt(x, wrap_scalar(bound, x), loc), loc).item<bool>(loc)) // a lazy x: unchecked
    fail("mvlgamma", "all elements must be greater than (p - 1) / 2 = " + std::to_string(bound), {&x}, loc);
  Tensor sum = lgamma_of(x, loc);
  for (int64_t i = 1; i < p; ++i) sum = sum + lgamma_of(x - static_cast<double>(i) / 2, loc);
  return sum + static_cast<double>(p * (p - 1)) / 4 * std::log(kPi);
}

Tensor Tensor::lgamma(Loc loc) const { return kiln::lgamma(*this, loc); }
Tensor Tensor::digamma(Loc loc) const { return kiln::digamma(*this, loc); }
Tensor Tensor::hypot(const Tensor& other, Loc loc) const { return kiln::hypot(*this, other, loc); }
Tensor Tensor::logit(std::optional<double> eps, Loc loc) const { return kiln::logit(*this, eps, loc); }
Tensor Tensor::sinc(Loc loc) const { return kiln::sinc(*this, loc); }
Tensor Tensor::fmax(const Tensor& other, Loc loc) const { return kiln::fmax(*this, other, loc); }
Tensor Tensor::fmin(const Tensor& other, Loc loc) const { return kiln::fmin(*this, other, loc); }
Tensor Tensor::float_power(const Tensor& exponent, Loc loc) const { return kiln::float_power(*this, exponent, loc); }
Tensor Tensor::float_power(Scalar exponent, Loc loc) const { return kiln::float_power(*this, exponent, loc); }

// ---------------------------------------------------------------- kiln/special.h

Tensor special::xlog1py(const Tensor& x, const Tensor& y, Loc loc) {
  const Scope scope("xlog1py", loc);
  require_defined("xlog1py", x, loc);
  require_defined("xlog1py", y, loc);
  const DType dt = is_floating(x.dtype()) || is_floating(y.dtype()) ? promote_types(x.dtype(), y.dtype()) : kFloat32;
  const auto [p, q] = broadcast_pair(x, y, dt, loc);
  return binary_custom(
      "xlog1py", p, q, [loc](const Tensor& u, const Tensor& v) { return xlog1py_value(u, v, loc); },
      [loc](const Tensor& u, const Tensor& v, const Tensor&, const Tensor& g) {
        const Tensor flat = logical_and(eq(u, wrap_scalar(0, u), loc), le(v, wrap_scalar(-1, v), loc), loc);
        return std::vector<Tensor>{where(logical_not(flat, loc), g * kiln::log1p(v, loc), 0, loc), g * u / (v + 1.0)};
      },
      loc);
}

Tensor special::entr(const Tensor& x, Loc loc) {
  const Scope scope("entr", loc);
  const CustomFunction f{
      "entr", [loc](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {entr_value(in[0], loc)}; },
      [loc](const std::vector<Tensor>& in, const std::vector<Tensor>&,
            const std::vector<Tensor>& g) -> std::vector<Tensor> { return {-g[0] * (log(in[0], loc) + 1.0)}; }};
  return f({floating("entr", x, loc)}, loc)[0];
}

Tensor special::expit(const Tensor& x, Loc loc) { return sigmoid(x, loc); }
Tensor special::logit(const Tensor& x, std::optional<double> eps, Loc loc) { return kiln::logit(x, eps, loc); }
Tensor special::sinc(const Tensor& x, Loc loc) { return kiln::sinc(x, loc); }
Tensor special::xlogy(const Tensor& x, const Tensor& y, Loc loc) { return kiln::xlogy(x, y, loc); }
Tensor special::exp2(const Tensor& x, Loc loc) { return kiln::exp2(x, loc); }
Tensor special::expm1(const Tensor& x, Loc loc) { return kiln::expm1(x, loc); }
Tensor special::log1p(const Tensor& x, Loc loc) { return kiln::log1p(x, loc); }
Tensor special::erf(const Tensor& x, Loc loc) { return kiln::erf(x, loc); }
Tensor special::round(const Tensor& x, Loc loc) { return kiln::round(x, loc); }
Tensor special::gammaln(const Tensor& x, Loc loc) { return kiln::lgamma(x, loc); }
Tensor special::digamma(const Tensor& x, Loc loc) { return kiln::digamma(x, loc); }
Tensor special::psi(const Tensor& x, Loc loc) { return kiln::digamma(x, loc); }
Tensor special::multigammaln(const Tensor& x, int64_t p, Loc loc) { return kiln::mvlgamma(x, p, loc); }
Tensor special::logsumexp(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  return kiln::logsumexp(x, std::move(dims), keepdim, loc);
}

} // namespace kiln

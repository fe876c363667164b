#pragma once
/// \file math_body.h
/// Internal: kiln's own math functions and random numbers, written once as templates over
/// an arithmetic backend (the MathOps concept) that both code generators instantiate:
/// llvm_math.cpp with values that are llvm::Value* built by an IRBuilder (one internal
/// alwaysinline function per function and type and module), cuda_math.cpp with values
/// that are C++ source expressions (one __device__ function per function and type, in
/// the prelude). The CPU and the GPU therefore compute the same IEEE operations, in the
/// same order, bit for bit, by construction.
///
/// Each function is branch-free (polynomials, selects and bit manipulation), so the loop
/// vectorizer sees straight-line code and vector and scalar lanes compute bit-identical
/// results (libm calls would be neither vectorized nor identical across lanes or devices).
/// Fused multiply-adds are explicit (MathOps::fma: llvm.fma, CUDA's fma()); every other
/// operation rounds on its own: the LLVM bodies carry no fast-math flag (no `contract`),
/// NVRTC runs with --fmad=false and the CPU shim with -ffp-contract=off.
///
/// Accuracy: max ulp error against long double over ~1e6 points each, measured by
/// test_llvm (MathAccuracy*), whole ranges incl. subnormal inputs/outputs:
///            exp    log    sin*   cos*   tanh   sigmoid  erf    expm1  log1p
///   f32      0.96   0.81   1.43   1.47   1.49   2.29     0.50   1.40   0.50
///   f64      0.96   0.80   2.10   2.14   2.48   2.28     0.73   1.80   0.79
///            tan*   atan   atan2  asin   acos   sinh     cosh   asinh  acosh  atanh  log2   log10  exp2
///   f32      0.50   0.50   0.50   0.50   0.50   0.50     0.50   0.50   0.50   0.50   0.50   0.50   0.50
///   f64      3.23   0.82   1.34   0.83   1.19   1.41     1.34   1.54   2.04   1.54   0.90   0.76   1.10
/// (test_llvm MathAccuracyMore*; f32 computes these in f64 and rounds once.)
/// (*) for |x| <= 1e5; sin_cos_body() gives the limits of its argument reduction
/// (accurate to |x| ~ 1.6e6, bounded but meaningless beyond).
///
/// Method, for both f32 and f64 (f64 uses higher-degree polynomials):
///   exp:   n = round(x / ln2), r = x - n ln2 (Cody-Waite: ln2 = hi + lo, hi with
///          trailing zero bits so n*hi is exact), e^r by its Taylor polynomial on
///          |r| <= ln2/2, times 2^n built from bits in two halves 2^(n/2) * 2^(n - n/2)
///          so that overflow gives inf and the subnormal range is rounded once.
///   expm1: the same reduction; 2^n * expm1(r) + (2^n - 1), one FMA, relative accuracy near 0
///          (exp's 2^n (1 + expm1(r)) where 2^n > 2^32 / 2^64, so that 2^n cannot overflow first).
///   log1p: u = 1 + x and its exact rounding error c (Fast2Sum), log(u) + c/u with c/u added in
///          log's low part (fdlibm's); f32 in f64, rounded once.
///   log:   x = 2^k m with m in [sqrt(1/2), sqrt(2)); log(m) = log1p(f) with f = m - 1,
///          s = f / (2 + f), log1p(f) = f - (f^2/2 - s (f^2/2 + R(s^2))) (the fdlibm
///          arrangement, with R from the atanh series); subnormals are scaled by 2^24 / 2^54.
///   sin/cos: n = round(x * 2/pi), r = x - n pi/2 with pi/2 in three (f64) parts, done
///          in f64 for f32 too; sin and cos polynomials on |r| <= pi/4, quadrant by n mod 4.
///   tanh:  sign(x) e / (e + 2) with e = expm1(2|x|) (expm1's core: 2|x| is too small for its
///          large-x and -0 handling), |x| clamped where tanh rounds to 1.
///   sigmoid: 1 / (1 + e) or e / (1 + e) with e = exp(-|x|).
///   atan:  fdlibm's s_atan.c, branch-free: one of five intervals of |x| picks a reduced t (one division)
///          and atan(c) as hi + lo; atan(t) = t - t z P(z), z = t^2 (fdlibm's coefficients).
///   atan2: atan(|y| / |x|), pi - that (pi as hi + lo) where x's sign bit is set, y's sign; C's
///          values at the zeros and infinities by selects.
///   asin/acos: atan(|x| / s) and atan2(s, x), s = sqrt(1 - x^2) as a double-length s + s_lo (the
///          residual of fma(-x, x, 1)), the quotient's low part added to atan's low part.
///   sinh/cosh: fdlibm's pieces (sinh's Taylor series below 1; expm1(|x|) up to 22; beyond, e^|x| / 2
///          as 2^(n-1) e^r, so that only a result beyond the range overflows).
///   asinh/acosh/atanh: fdlibm's formulas over log1p and log (log(x) + ln2 for huge x, no x^2 overflow).
///   tan:   sin/cos's reduction; r + r z (S - C) / cos r (the correction rounds, not the leading r),
///          -1 / tan(r) for odd quadrants.
///   log2/log10: log's reduction x = 2^k (1 + f); k (times log10(2) as hi + lo) + log(1 + f) times
///          1/ln2 (1/ln10) as hi + lo, log(1 + f)'s and the products' rounding errors kept apart and
///          added last (exact at powers of two).
///   exp2:  2^n e^(r ln2), n = rint(x), r = x - n exact, r ln2 as t + t_lo; exact at integers.
///   erf:   in f64 for f32 too (rounded once), on |x| clamped to where erf rounds to +-1.
///          f32: x P(t), t = 2 x^2 / 3.93^2 - 1, P a Chebyshev fit of erf(x)/x (kErfF32,
///          2.2e-12 relative, enough for f32; by Estrin's scheme) on |x| <= 3.93. f64, on |x| <= 6:
///          |x| < 0.75: x + x P(x^2), P the Taylor series of erf(x)/x - 1;
///          0.75 <= |x| < 2: erf(a) + s Q_a(s), s = |x| - a, Taylor series about the
///          centre a of one of five intervals of width 1/4, erf(a) as hi + lo;
///          2 <= |x|: 1 - e^(-x^2) g(x), g(x) = e^(x^2) erfc(x) a Chebyshev fit on [2, 6]
///          (where erfc < 0.005, so g's and exp's relative errors shrink by 200 in erf).
/// The polynomials are Taylor series truncated where the next term is below 1/8 ulp
/// (erf's: below 2^-60 relative); erf's coefficients come from mpmath at 50 digits
/// (tests/tools/erf_coefficients.py prints them).

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "graph/random.h"

namespace kiln::codegen {

/// The functions of this file that the code generators emit as functions (one per type),
/// in an order where each one's callees come before it (the CUDA prelude's order):
/// X(MathFn enumerator, name in emitted code, body template in namespace math).
#define KILN_MATH_FNS(X) \
  X(Exp, "exp", exp_body) \
  X(Expm1, "expm1", expm1_body) \
  X(Log, "log", log_body) \
  X(Log1p, "log1p", log1p_body) \
  X(Sin, "sin", sin_body) \
  X(Cos, "cos", cos_body) \
  X(Tanh, "tanh", tanh_body) \
  X(Sigmoid, "sigmoid", sigmoid_body) \
  X(Erf, "erf", erf_body) \
  X(Atan, "atan", atan_body) \
  X(Asin, "asin", asin_body) \
  X(Acos, "acos", acos_body) \
  X(Sinh, "sinh", sinh_body) \
  X(Cosh, "cosh", cosh_body) \
  X(Asinh, "asinh", asinh_body) \
  X(Acosh, "acosh", acosh_body) \
  X(Atanh, "atanh", atanh_body) \
  X(Tan, "tan", tan_body) \
  X(Log2, "log2", log2_body) \
  X(Log10, "log10", log10_body) \
  X(Exp2, "exp2", exp2_body)

/// One enumerator per KILN_MATH_FNS row.
enum class MathFn : uint8_t {
#define KILN_MATH_ENUM(e, name, body) e,
  KILN_MATH_FNS(KILN_MATH_ENUM)
#undef KILN_MATH_ENUM
};

/// Every MathFn, in KILN_MATH_FNS's order.
inline constexpr MathFn kMathFns[] = {
#define KILN_MATH_ENTRY(e, name, body) MathFn::e,
    KILN_MATH_FNS(KILN_MATH_ENTRY)
#undef KILN_MATH_ENTRY
};

/// The function's name in emitted code ("exp": LLVM's kiln.exp.f32, CUDA's kiln_exp_f32).
constexpr const char* math_fn_name(MathFn fn) {
  switch (fn) {
#define KILN_MATH_NAME(e, name, body) \
  case MathFn::e: return name;
    KILN_MATH_FNS(KILN_MATH_NAME)
#undef KILN_MATH_NAME
  }
  return "?";
}

/// The two-operand functions, emitted after the one-operand ones (whose functions they may call):
/// X(MathFn2 enumerator, name in emitted code, body template in namespace math, taking (m, a, b)).
#define KILN_MATH_FNS2(X) X(Atan2, "atan2", atan2_body)

/// One enumerator per KILN_MATH_FNS2 row.
enum class MathFn2 : uint8_t {
#define KILN_MATH_ENUM(e, name, body) e,
  KILN_MATH_FNS2(KILN_MATH_ENUM)
#undef KILN_MATH_ENUM
};

/// Every MathFn2, in KILN_MATH_FNS2's order.
inline constexpr MathFn2 kMathFns2[] = {
#define KILN_MATH_ENTRY(e, name, body) MathFn2::e,
    KILN_MATH_FNS2(KILN_MATH_ENTRY)
#undef KILN_MATH_ENTRY
};

/// The function's name in emitted code ("atan2": LLVM's kiln.atan2.f32, CUDA's kiln_atan2_f32).
constexpr const char* math_fn_name(MathFn2 fn) {
  switch (fn) {
#define KILN_MATH_NAME(e, name, body) \
  case MathFn2::e: return name;
    KILN_MATH_FNS2(KILN_MATH_NAME)
#undef KILN_MATH_NAME
  }
  return "?";
}

/// The arithmetic a backend provides to the bodies. An M computes in one float type
/// (M::f64 false: float, true: double) and the signed integer type of the same width
/// ("int"); all values, float, int and bool, have the type M::V. Float operations are
/// IEEE, each rounding once (fma: once for the product and the sum); integer operations
/// wrap; comparisons are ordered (false on NaN); fmin/fmax return the other operand
/// where one is NaN (C's fmin/fmax, LLVM's minnum/maxnum).
template <class M>
concept MathOps = std::copy_constructible<M> &&
    requires(M m, const typename M::V v, double d, int64_t i, int k, MathFn fn) {
  { m.f64 } -> std::convertible_to<bool>;
  { m.wide() } -> std::same_as<M>; ///< the same backend computing in double (and 64-bit ints)
  // float constants (rounded to the type: inf and NaN allowed) and int constants
  { m.c(d) } -> std::same_as<typename M::V>;
  { m.ci(i) } -> std::same_as<typename M::V>;  ///< an int of the type's width
  { m.ci32(i) } -> std::same_as<typename M::V>; ///< a 32-bit int
  // float arithmetic
  { m.add(v, v) } -> std::same_as<typename M::V>;
  { m.sub(v, v) } -> std::same_as<typename M::V>;
  { m.mul(v, v) } -> std::same_as<typename M::V>;
  { m.div(v, v) } -> std::same_as<typename M::V>;
  { m.fma(v, v, v) } -> std::same_as<typename M::V>; ///< x*y + z, rounded once
  { m.neg(v) } -> std::same_as<typename M::V>;
  { m.fabs(v) } -> std::same_as<typename M::V>;
  { m.sqrt(v) } -> std::same_as<typename M::V>;
  { m.copysign(v, v) } -> std::same_as<typename M::V>;
  { m.rint(v) } -> std::same_as<typename M::V>; ///< to the nearest integer, ties to even
  { m.floor(v) } -> std::same_as<typename M::V>;
  { m.fmin(v, v) } -> std::same_as<typename M::V>;
  { m.fmax(v, v) } -> std::same_as<typename M::V>;
  // comparisons (bool results) and select
  { m.lt(v, v) } -> std::same_as<typename M::V>;
  { m.gt(v, v) } -> std::same_as<typename M::V>;
  { m.eq(v, v) } -> std::same_as<typename M::V>;
  { m.is_nan(v) } -> std::same_as<typename M::V>;
  { m.nge(v, v) } -> std::same_as<typename M::V>; // !(x >= y): x < y, or either is NaN
  { m.sel(v, v, v) } -> std::same_as<typename M::V>; ///< cond ? x : y
  // x * 2^n for an integral float n within twice the exponent range, the exact product rounded
  // once (C's ldexp): math::scale_by_halves(), or one instruction where the target has one
  { m.scale(v, v) } -> std::same_as<typename M::V>;
  // conversions and bitcasts
  { m.to_int(v) } -> std::same_as<typename M::V>;     ///< truncating, to the same-width int (in range)
  { m.to_i32(v) } -> std::same_as<typename M::V>;     ///< truncating, to a 32-bit int (in range)
  { m.to_float(v) } -> std::same_as<typename M::V>;   ///< signed int to this float type
  { m.u64_to_float(v) } -> std::same_as<typename M::V>; ///< a 64-bit int read as unsigned, to this float type
  { m.to_f64(v) } -> std::same_as<typename M::V>;     ///< this float type to double (exact)
  { m.from_f64(v) } -> std::same_as<typename M::V>;   ///< double to this float type (rounded)
  { m.bits(v) } -> std::same_as<typename M::V>;       ///< float -> same-width int, same bits
  { m.from_bits(v) } -> std::same_as<typename M::V>;  ///< same-width int -> float, same bits
  // integer arithmetic (either width; both operands of one width)
  { m.iadd(v, v) } -> std::same_as<typename M::V>;
  { m.isub(v, v) } -> std::same_as<typename M::V>;
  { m.imul(v, v) } -> std::same_as<typename M::V>;
  { m.iand(v, v) } -> std::same_as<typename M::V>;
  { m.ior(v, v) } -> std::same_as<typename M::V>;
  { m.ixor(v, v) } -> std::same_as<typename M::V>;
  { m.ine(v, v) } -> std::same_as<typename M::V>;
  { m.shl(v, k) } -> std::same_as<typename M::V>;
  { m.lshr(v, k) } -> std::same_as<typename M::V>; ///< logical (zero-filling)
  { m.ashr(v, k) } -> std::same_as<typename M::V>; ///< arithmetic (sign-filling)
  // another function of this file, on this type
  { m.call(fn, v) } -> std::same_as<typename M::V>;
};

namespace math {

// ---- helpers ------------------------------------------------------------------

inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Taylor coefficients first * sign^k / (start + step*k)! for k = 0..count-1.
inline std::vector<double> factorial_series(int start, int step, int count, double first, double sign) {
  std::vector<double> out;
  for (int k = 0; k < count; ++k) {
    const int n = start + step * k;
    double f = 1;
    for (int i = 2; i <= n; ++i) f *= i;
    out.push_back(first * std::pow(sign, k) / f);
  }
  return out;
}

/// ln 2 = hi + lo; hi has trailing zero bits, so n*hi is exact for the |n| < 2^11 that occur.
inline double ln2_hi(bool f64) { return f64 ? 6.93147180369123816490e-01 : 0.693145751953125; }
inline double ln2_lo(bool f64) { return f64 ? 1.90821492927058770002e-10 : 1.428606765330187045e-06; }

/// z - x*y with one rounding: fma(-x, y, z).
template <MathOps M> typename M::V fnma(M& m, typename M::V x, typename M::V y, typename M::V z) {
  return m.fma(m.neg(x), y, z);
}

/// Polynomial sum_i coef[i] x^i by Horner's rule, each step one fma.
template <MathOps M> typename M::V horner(M& m, typename M::V x, const std::vector<double>& coef) {
  typename M::V p = m.c(coef.back());
  for (size_t i = coef.size() - 1; i-- > 0;) p = m.fma(p, x, m.c(coef[i]));
  return p;
}

/// Polynomial sum_i coef[i] x^i by Estrin's scheme: coef[2k] + coef[2k+1] x, then those paired
/// with x^2, the results with x^4, and so on. A few more operations than Horner's rule, but a chain
/// of about log2(n) dependent fmas instead of n: for a long polynomial whose chain would otherwise
/// bound a loop (erf's in f32).
template <MathOps M> typename M::V estrin(M& m, typename M::V x, const std::vector<double>& coef) {
  std::vector<typename M::V> level;
  for (size_t i = 0; i < coef.size(); i += 2)
    level.push_back(i + 1 < coef.size() ? m.fma(m.c(coef[i + 1]), x, m.c(coef[i])) : m.c(coef[i]));
  typename M::V power = m.mul(x, x);
  while (level.size() > 1) {
    std::vector<typename M::V> next;
    for (size_t i = 0; i < level.size(); i += 2)
      next.push_back(i + 1 < level.size() ? m.fma(level[i + 1], power, level[i]) : level[i]);
    level = std::move(next);
    if (level.size() > 1) power = m.mul(power, power);
  }
  return level.front();
}

/// Clamps x to [lo, hi]; NaN becomes lo (callers restore NaN at the end).
template <MathOps M> typename M::V clamp(M& m, typename M::V x, double lo, double hi) {
  return m.fmin(m.fmax(x, m.c(lo)), m.c(hi));
}

/// 2^n for an int n in the normal exponent range, from bits.
template <MathOps M> typename M::V pow2(M& m, typename M::V n) {
  return m.from_bits(m.shl(m.iadd(n, m.ci(m.f64 ? 1023 : 127)), m.f64 ? 52 : 23));
}

/// x * 2^nf (nf integral, |nf| within twice the exponent range) by two exact powers of two:
/// x * 2^(n/2) is exact (x near 1), and its product with 2^(n - n/2) rounds once, to ldexp's
/// result, subnormal or infinite ones included.
template <MathOps M> typename M::V scale_by_halves(M& m, typename M::V x, typename M::V nf) {
  auto n = m.to_int(nf);
  auto n1 = m.ashr(n, 1);
  auto n2 = m.isub(n, n1);
  return m.mul(m.mul(x, pow2(m, n1)), pow2(m, n2));
}

/// Cody-Waite reduction by ln2: n (as a float) and r = x - n ln2, |r| <= ln2/2,
/// as fma(-n, lo, fma(-n, hi, x)).
template <MathOps M> std::pair<typename M::V, typename M::V> reduce_ln2(M& m, typename M::V x) {
  auto nf = m.rint(m.mul(x, m.c(1.4426950408889634)));
  auto r = fnma(m, nf, m.c(ln2_lo(m.f64)), fnma(m, nf, m.c(ln2_hi(m.f64)), x));
  return {nf, r};
}

/// expm1(r) for |r| <= ln2/2: r + r^2 (1/2! + r/3! + ...), as fma(r*r, q, r).
template <MathOps M> typename M::V expm1_poly(M& m, typename M::V r) {
  auto q = horner(m, r, factorial_series(2, 1, m.f64 ? 13 : 7, 1.0, 1.0));
  return m.fma(m.mul(r, r), q, r);
}

// ---- the functions --------------------------------------------------------------

template <MathOps M> typename M::V exp_body(M& m, typename M::V x) {
  // Beyond these bounds e^x is inf or rounds to 0; clamping keeps n in range.
  const double lo = m.f64 ? -746.0 : -104.0;
  // Below lo the result is +0 (as it is at lo). Those lanes compute e^0 instead and are
  // replaced at the end: a multiply whose result underflows costs a microcode assist of ~150
  // cycles on x86, and masked softmax rows (-inf scores) hit it in every vector. NaN lanes do
  // the same, and both take (0 > x ? 0 : x) at the end: +0 below lo, x itself for NaN (one
  // x86 max). The other lanes are >= lo, so only the upper bound needs a clamp. Two vector
  // ops fewer per exp than a clamp and separate selects (of ~50 in bench Elementwise8's loop).
  auto off = m.nge(x, m.c(lo));
  auto xc = m.fmin(m.sel(off, m.c(0), x), m.c(m.f64 ? 710.0 : 89.0));
  auto [nf, r] = reduce_ln2(m, xc);
  auto p = m.add(m.c(1), expm1_poly(m, r));
  auto y = m.scale(p, nf);
  return m.sel(off, m.sel(m.gt(m.c(0), x), m.c(0), x), y);
}

/// expm1's core, 2^n expm1(r) + (2^n - 1) as one fma, for x <= 88 (f32) / 709 (f64), where 2^n cannot
/// overflow; NaN stays NaN, x = -0 gives +0. tanh calls it directly: its 2|x| <= 44 never needs the
/// large-x handling of expm1_body.
template <MathOps M> typename M::V expm1_core(M& m, typename M::V x) {
  auto xc = clamp(m, x, m.f64 ? -40.0 : -20.0, m.f64 ? 709.0 : 88.0); // below: expm1 rounds to -1
  auto [nf, r] = reduce_ln2(m, xc);
  auto er = expm1_poly(m, r);
  auto t = pow2(m, m.to_int(nf));
  return m.sel(m.is_nan(x), x, m.fma(t, er, m.sub(t, m.c(1))));
}

/// expm1 (e^x - 1, the user's op): 2^n expm1(r) + (2^n - 1) as one fma; where
/// 2^n > 2^32 (f32) / 2^64 (f64) the -1 is far below half an ulp and exp's 2^n (1 + expm1(r))
/// takes over (2^n alone would overflow at n = 128 / 1024 before the result does). Beyond
/// 89 / 710 it is +inf (as exp), below -20 / -40 it rounds to -1; expm1(-0) = -0.
template <MathOps M> typename M::V expm1_body(M& m, typename M::V x) {
  const double hi = m.f64 ? 710.0 : 89.0;
  auto xc = clamp(m, x, m.f64 ? -40.0 : -20.0, hi); // below: expm1 rounds to -1
  auto [nf, r] = reduce_ln2(m, xc);
  auto er = expm1_poly(m, r);
  auto t = pow2(m, m.to_int(nf));
  auto y = m.fma(t, er, m.sub(t, m.c(1)));
  y = m.sel(m.gt(nf, m.c(m.f64 ? 64.0 : 32.0)), m.scale(m.add(m.c(1), er), nf), y);
  y = m.sel(m.gt(x, m.c(hi)), m.c(kInf), y);
  y = m.sel(m.eq(x, m.c(0)), x, y); // keeps -0 (the reduction gives +0)
  return m.sel(m.is_nan(x), x, y);
}

/// log's reduction of x: x = 2^k (1 + f), 1 + f in [sqrt(1/2), sqrt(2)), and log(1 + f) = f - (hfsq - s w)
/// with hfsq = f^2/2, s = f / (2 + f), w = hfsq + s^2 R(s^2) (fdlibm's terms; the caller adds k ln2).
template <MathOps M> struct LogParts {
  typename M::V kf, f, hfsq, s, w;
};

/// The LogParts of x > 0 (subnormals scaled first); garbage elsewhere (callers select log's specials).
template <MathOps M> LogParts<M> log_parts(M& m, typename M::V x) {
  const int mant = m.f64 ? 52 : 23, bias = m.f64 ? 1023 : 127, scale = m.f64 ? 54 : 24;
  // Subnormals: scale into the normal range first.
  auto tiny = m.lt(x, m.c(m.f64 ? 0x1p-1022 : 0x1p-126));
  auto xs = m.sel(tiny, m.mul(x, m.c(std::ldexp(1.0, scale))), x);
  auto kadj = m.sel(tiny, m.ci(-scale), m.ci(0));
  // Bits of 1.0 and of sqrt(1/2) (f64: its high word, shifted): shifting the exponent
  // split point to sqrt(1/2) gives m in [sqrt(1/2), sqrt(2)).
  const int64_t one = m.f64 ? 0x3ff0000000000000LL : 0x3f800000LL;
  const int64_t sqrt_half = m.f64 ? 0x3fe6a09e00000000LL : 0x3f3504f3LL;
  auto bits = m.iadd(m.bits(xs), m.ci(one - sqrt_half));
  auto k = m.iadd(m.isub(m.lshr(bits, mant), m.ci(bias)), kadj);
  auto mbits = m.iadd(m.iand(bits, m.ci((int64_t{1} << mant) - 1)), m.ci(sqrt_half));
  auto f = m.sub(m.from_bits(mbits), m.c(1));
  auto s = m.div(f, m.add(m.c(2), f));
  auto z = m.mul(s, s);
  // R = sum_{j>=1} 2 z^j / (2j + 1), the atanh series beyond its first term.
  std::vector<double> coef;
  for (int j = 1; j <= (m.f64 ? 11 : 5); ++j) coef.push_back(2.0 / (2 * j + 1));
  auto h = horner(m, z, coef);
  auto hfsq = m.mul(m.mul(m.c(0.5), f), f);
  return {m.to_float(k), f, hfsq, s, m.fma(z, h, hfsq)};
}

/// y where x is a positive finite number; log's values elsewhere: -inf at 0, NaN below, inf at inf, NaN.
template <MathOps M> typename M::V log_specials(M& m, typename M::V x, typename M::V y) {
  y = m.sel(m.eq(x, m.c(0)), m.c(-kInf), y);
  y = m.sel(m.lt(x, m.c(0)), m.c(kNaN), y);
  y = m.sel(m.eq(x, m.c(kInf)), m.c(kInf), y);
  return m.sel(m.is_nan(x), x, y);
}

/// log(x), plus `correction` (a term far below log(x)'s ulp, log1p's) added to the low part before the final
/// sums, so that it costs no rounding of its own; none for log itself (the same IR as before log1p).
template <MathOps M>
typename M::V log_with_correction(M& m, typename M::V x, const std::optional<typename M::V>& correction) {
  auto [kf, f, hfsq, s, w] = log_parts(m, x);
  // tail = s (hfsq + z h) + k ln2_lo: the products z h and s (...) fused, k ln2_lo rounded;
  // y = k ln2_hi + (f - (hfsq - tail)), k ln2_hi fused (exact anyway: ln2_hi's zero bits).
  auto klo = m.mul(kf, m.c(ln2_lo(m.f64)));
  if (correction) klo = m.add(klo, *correction);
  auto tail = m.fma(s, w, klo);
  auto y = m.fma(kf, m.c(ln2_hi(m.f64)), m.sub(f, m.sub(hfsq, tail)));
  return log_specials(m, x, y);
}

template <MathOps M> typename M::V log_body(M& m, typename M::V x) { return log_with_correction(m, x, std::nullopt); }

/// log1p(x) = log(1 + x) as fdlibm's: u = 1 + x rounded, and its rounding error c = x - (u - 1) (or
/// 1 - (u - x) where |x| > 1: Fast2Sum, exact), log(u) + c / u with c / u added in log's low part (c / u is
/// below log(u)'s ulp). Where u == 1, x itself (-0, subnormals and NaN included). f32 computes it in f64 and
/// rounds once. log1p(-1) = -inf, below -1 NaN, log1p(inf) = inf.
template <MathOps M> typename M::V log1p_body(M& m, typename M::V x) {
  if (!m.f64) {
    M w = m.wide();
    return m.from_f64(log1p_body(w, m.to_f64(x)));
  }
  auto u = m.add(m.c(1), x);
  auto big = m.gt(m.fabs(x), m.c(1));
  auto c = m.sel(big, m.sub(m.c(1), m.sub(u, x)), m.sub(x, m.sub(u, m.c(1))));
  auto y = log_with_correction(m, u, std::optional(m.div(c, u)));
  // log's own selects give u = 0 (x = -1) -inf and u = inf inf, where c / u is NaN
  return m.sel(m.eq(u, m.c(1)), x, y);
}

/// sin_cos_body's argument reduction: r = x - n pi/2 (|r| <= pi/4, in x's type), n mod 4 (a 32-bit int),
/// and whether x is finite (where it is not, x is replaced by 0 and the caller returns NaN).
template <MathOps M> struct PiO2Reduced {
  typename M::V r, q, finite;
};

/// x's PiO2Reduced (n = round(x 2/pi) and r in f64, pi/2 in three parts (f32: two), as documented below).
template <MathOps M> PiO2Reduced<M> reduce_pio2(M& m, typename M::V x) {
  M d = m.wide();
  auto finite = m.lt(m.fabs(x), m.c(kInf));
  auto xs = m.sel(finite, x, m.c(0));
  auto xd = m.to_f64(xs);
  auto nf = d.rint(d.mul(xd, d.c(0.63661977236758134308)));
  auto rd = fnma(d, nf, d.c(1.57079632673412561417e+00), xd);
  if (m.f64) {
    rd = fnma(d, nf, d.c(6.07710050630396597660e-11), rd);
    rd = fnma(d, nf, d.c(2.02226624879595063154e-21), rd);
  } else {
    rd = fnma(d, nf, d.c(6.07710050650619224932e-11), rd);
  }
  // |r| <= pi/4 within the range; beyond it the clamp keeps the result bounded.
  rd = clamp(d, rd, -0.7854, 0.7854);
  auto r = m.from_f64(rd);
  // n mod 4, exactly, for any float n (multiples of 4 beyond 2^54 give 0; 4 floor(n/4)
  // is exact, so the mul and the sub round nothing).
  auto nmod = d.sub(nf, d.mul(d.c(4), d.floor(d.mul(nf, d.c(0.25)))));
  return {r, m.to_i32(nmod), finite};
}

/// sin(r) and cos(r) for |r| <= pi/4 by their Taylor polynomials.
template <MathOps M> std::pair<typename M::V, typename M::V> sin_cos_poly(M& m, typename M::V r) {
  auto z = m.mul(r, r);
  auto ps = horner(m, z, factorial_series(3, 2, m.f64 ? 9 : 5, -1.0, -1.0));  // -1/3! + z/5! - ...
  auto pc = horner(m, z, factorial_series(2, 2, m.f64 ? 10 : 5, -1.0, -1.0)); // -1/2! + z/4! - ...
  return {m.fma(m.mul(r, z), ps, r), m.fma(z, pc, m.c(1))};
}

/// sin (is_cos false) or cos of x.
/// Argument reduction runs in f64 for both dtypes: n = round(x 2/pi) and
/// r = x - n pi/2 with pi/2 split as pio2_1 (33 bits, so n*pio2_1 is exact for
/// |n| < 2^20) + the rest (f32: one more part, ~86 bits in all; f64: two more, ~119 bits).
/// Accuracy therefore holds for |x| < 2^20 pi/2 ~ 1.6e6 (f32) and, for f64, also
/// there except for arguments within ~2^-46 of a multiple of pi/2 at large |x|.
/// Beyond 1.6e6 the reduction loses bits and the result degrades (it stays finite,
/// in [-1, 1], and no longer tracks sin x); inf and NaN give NaN.
template <MathOps M> typename M::V sin_cos_body(M& m, typename M::V x, bool is_cos) {
  auto [r, q, finite] = reduce_pio2(m, x);
  if (is_cos) q = m.iadd(q, m.ci32(1));
  auto [s, c] = sin_cos_poly(m, r);
  auto use_cos = m.ine(m.iand(q, m.ci32(1)), m.ci32(0));
  auto negate = m.ine(m.iand(q, m.ci32(2)), m.ci32(0));
  auto v = m.sel(use_cos, c, s);
  v = m.sel(negate, m.neg(v), v);
  if (!is_cos) v = m.sel(m.eq(x, m.c(0)), x, v); // sin(-0) = -0 (the reduction gives +0)
  return m.sel(finite, v, m.c(kNaN));
}

/// tanh(x) = sign(x) e / (e + 2), e = expm1(2|x|). Beyond |x| = 10 (f32) / 22 (f64)
/// tanh rounds to +-1; clamping there keeps e finite (inf/inf would be NaN).
/// f32 uses its Taylor series x + x z P(z), z = x^2, for |x| < 0.55, where the
/// three roundings of e / (e + 2) would cost up to ~2.3 ulp.
template <MathOps M> typename M::V tanh_body(M& m, typename M::V x) {
  auto ax = m.fabs(x);
  const double big = m.f64 ? 22.0 : 10.0;
  auto axc = m.sel(m.gt(ax, m.c(big)), m.c(big), ax);
  auto e = expm1_core(m, m.add(axc, axc));
  auto t = m.div(e, m.add(e, m.c(2)));
  if (m.f64) return m.copysign(t, x);
  // tanh's Taylor coefficients of x^3, x^5, ..., x^21.
  static const std::vector<double> series = {
      -0.3333333333333333,   0.13333333333333333,   -0.05396825396825397,   0.021869488536155203,
      -0.008863235529902197, 0.003592128036572481,  -0.0014558343870513183, 0.000590027440945586,
      -0.00023912911424355248, 9.691537956929451e-05};
  auto z = m.mul(ax, ax);
  auto small = m.fma(m.mul(ax, z), horner(m, z, series), ax);
  return m.copysign(m.sel(m.lt(ax, m.c(0.55)), small, t), x);
}

/// 1 / (1 + e) for x >= 0 and e / (1 + e) for x < 0, with e = exp(-|x|): one exp,
/// and no overflow of exp(-x) where sigmoid(x) is still a (subnormal) number.
/// Computed in the element type (f32 stays in f32, at full vector width): exp's
/// error plus two roundings stay under 3 ulp, like PyTorch's f32 sigmoid.
template <MathOps M> typename M::V sigmoid_body(M& m, typename M::V x) {
  auto e = m.call(MathFn::Exp, m.neg(m.fabs(x)));
  auto d = m.add(m.c(1), e);
  auto num = m.sel(m.lt(x, m.c(0)), e, m.c(1));
  return m.div(num, d);
}

// erf's coefficients (see the method above).
/// |x| < 0.75: erf(x)/x - 1 = sum_n kErfSmall[n] x^(2n) (2/sqrt(pi) (-1)^n / (n! (2n + 1)), less 1 for n = 0).
inline const std::vector<double> kErfSmall = {
    0.1283791670955126, -0.37612638903183754, 0.11283791670955126, -0.026866170645131252,
    0.005223977625442188, -0.0008548327023450853, 0.00012055332981789664, -1.492565035840625e-05,
    1.6462114365889248e-06, -1.6365844691234924e-07, 1.4807192815879218e-08, -1.2290555301717928e-09,
    9.422759064650411e-11, -6.7113668551641105e-12, 4.4632242632864775e-13, -2.7835162072109215e-14,
    1.6342614095367152e-15};

/// One interval of 0.75 <= |x| < 2: erf(centre + s) = hi + lo + sum_{n>=1} coef[n-1] s^n.
struct ErfInterval {
  double centre, hi, lo;
  double coef[15];
};
inline constexpr ErfInterval kErfMid[] = {
    {0.875, 0.7840750610598597, -3.204544978890348e-17,
     {0.5247450452901482, -0.45915191462887966, 0.09292360177013041, 0.11239656243519451, -0.0672158773833572,
      -0.010367785745906018, 0.018595726765847267, -0.0018461468559063715, -0.0032568627602662854,
      0.000898154868541066, 0.0003900529044120407, -0.00019296678621782653, -2.903116273391371e-05,
      2.9075064952881173e-05, 2.0224352255317938e-07}},
    {1.125, 0.8883882317017078, -1.158643993739769e-17,
     {0.3182739585007693, -0.35805820331336546, 0.16245233298476766, 0.027973297133856677, -0.061323683605665806,
      0.015536835449762896, 0.009606894225829976, -0.006031260883106729, -0.0003601919898013683,
      0.0011532673547020597, -0.0001769550878579247, -0.0001415583990117997, 4.9455696834570095e-05,
      1.0718804636659436e-05, -7.730906970255213e-06}},
    {1.375, 0.9481700727820903, 1.071691533519912e-17,
     {0.1703597736875156, -0.23424468882033395, 0.15793770685613426, -0.03050061052348098, -0.030605976268925736,
      0.022161235262852557, -0.001419062360662139, -0.004261033441276509, 0.001577911232741016,
      0.00032359146722315554, -0.0003391015230725006, 2.8681755518788118e-05, 4.175471522740388e-05,
      -1.1984028581486832e-05, -2.9725595025012275e-06}},
    {1.625, 0.9784437332399837, -1.7028513178925588e-17,
     {0.08047225902251116, -0.13076742091158064, 0.11484061964670864, -0.049718863159090555,
      -0.0021349248406037306, 0.014414781131084502, -0.006184261515478821, -0.000576525430283408,
      0.0014106850333898903, -0.00035597922602355293, -0.00012566368868411414, 8.79701620524859e-05,
      -4.270738262797687e-06, -1.0609039547562964e-05, 2.8273833059374034e-06}},
    {1.875, 0.9919900576701199, 3.0126779045582727e-17,
     {0.03354582842421607, -0.06289842829540514, 0.0674410925611844, -0.04225988151097533, 0.011462583364876176,
      0.004105187133212477, -0.004928393908239107, 0.001430501687370122, 0.00036225644575338666,
      -0.0003901575782455417, 7.37299378240623e-05, 3.607417901263836e-05, -2.0803824921141647e-05,
      8.154185088040366e-07, 2.3718570297022424e-06}},
};

/// 2 <= |x| <= 6: e^(x^2) erfc(x) = sum_n kErfcScaled[n] t^n, t = (|x| - 4) / 2 (max error 5e-18).
inline const std::vector<double> kErfcScaled = {
    0.13699945762506138, -0.06476701219004291, 0.029861732979903317, -0.013449456613969249,
    0.00592563950387976, -0.002557084169761886, 0.0010819615534120512, -0.00044932693147525614,
    0.00018330768136819641, -7.352137574378967e-05, 2.901199590644152e-05, -1.1270914791676502e-05,
    4.313255826876284e-06, -1.6270404669103896e-06, 6.0569179582904e-07, -2.222888157304624e-07,
    7.984355503810327e-08, -2.8586397069465238e-08, 1.0824531561065031e-08, -3.764154007466546e-09,
    8.205403979036021e-10, -2.8716509123715205e-10, 2.7974119179024155e-10, -9.220011805148006e-11};

/// f32's erf, computed in f64: erf(x) = x P(t) for |x| < 3.93, t = 2 x^2 / 3.93^2 - 1 in [-1, 1],
/// P a Chebyshev fit of erf(x)/x as monomials of t (mpmath.chebyfit, 22 terms, 2.2e-12 relative:
/// rounded to f32 the result is within 0.5 + 2^-14 ulp); |x| is clamped to 3.93, where erf rounds
/// to 1 in f32 (from 3.9193 on, erfc(x) < 2^-25). One polynomial and no exp: the series below 2 and
/// the e^(-x^2) tail above it that this replaced cost three times as many operations.
inline constexpr double kErfF32Edge = 3.93;
inline const std::vector<double> kErfF32 = {
    0.3598202113957124, -0.17966029695029137, 0.13378065483526758, -0.10900093692690534, 0.09058222452500253,
    -0.07412033381541124, 0.05841450508957733, -0.04372953598439686, 0.03084911051794272, -0.02042762741856884,
    0.012679706816437996, -0.007384126298455355, 0.004045508091180329, -0.0020811173549767138,
    0.0009978551118745946, -0.00045981120848334703, 0.00021512571656922188, -8.73892981080649e-05,
    2.3031634148903616e-05, -9.2973931793394e-06, 8.109443333808256e-06, -2.6512691200796238e-06};

/// erf for 2 <= ax <= 6 (z = ax^2): 1 - e^(-z) g(ax), g = e^(x^2) erfc(x) by its Chebyshev fit.
template <MathOps M> typename M::V erf_tail(M& m, typename M::V ax, typename M::V z) {
  auto t = m.mul(m.sub(ax, m.c(4)), m.c(0.5));
  return m.sub(m.c(1), m.mul(m.call(MathFn::Exp, m.neg(z)), horner(m, t, kErfcScaled)));
}

/// The error function, branch-free: all pieces are computed and one is selected.
template <MathOps M> typename M::V erf_body(M& m, typename M::V x) {
  if (!m.f64) { // f32: in f64, one polynomial (kErfF32), rounded once
    M w = m.wide();
    auto xd = m.to_f64(x);
    auto ax = w.fmin(w.fabs(xd), w.c(kErfF32Edge)); // NaN becomes the edge here; restored at the end
    auto t = w.fma(w.mul(ax, ax), w.c(2 / (kErfF32Edge * kErfF32Edge)), w.c(-1));
    auto y = w.mul(ax, estrin(w, t, kErfF32));
    return m.from_f64(w.sel(w.is_nan(xd), xd, w.copysign(y, xd)));
  }
  auto ax = m.fmin(m.fabs(x), m.c(6)); // NaN becomes 6 here; restored at the end
  auto z = m.mul(ax, ax);
  auto small = m.fma(ax, horner(m, z, kErfSmall), ax);
  // The interval of 0.75 <= |x| < 2 by a chain of selects over its upper bounds.
  typename M::V below[4] = {m.lt(ax, m.c(1.0)), m.lt(ax, m.c(1.25)), m.lt(ax, m.c(1.5)), m.lt(ax, m.c(1.75))};
  auto pick = [&](auto field) {
    auto v = m.c(field(kErfMid[4]));
    for (int i = 3; i >= 0; --i) v = m.sel(below[i], m.c(field(kErfMid[i])), v);
    return v;
  };
  auto s = m.sub(ax, pick([](const ErfInterval& e) { return e.centre; }));
  auto q = pick([](const ErfInterval& e) { return e.coef[14]; });
  for (int n = 13; n >= 0; --n) q = m.fma(q, s, pick([n](const ErfInterval& e) { return e.coef[n]; }));
  auto mid = m.add(pick([](const ErfInterval& e) { return e.hi; }),
                   m.fma(s, q, pick([](const ErfInterval& e) { return e.lo; })));
  auto y = m.sel(m.lt(ax, m.c(0.75)), small, m.sel(m.lt(ax, m.c(2)), mid, erf_tail(m, ax, z)));
  return m.sel(m.is_nan(x), x, m.copysign(y, x));
}

// ---- inverse trigonometric, hyperbolic, tan, log2/log10/exp2 -----------------------------------------
// f32 computes each in f64 (the f64 body) and rounds once.

/// fdlibm's s_atan.c constants: atan(t) = t - t z P(z), z = t^2, P's coefficients kAtanP, on |t| <= 7/16;
/// kAtanHi[i] + kAtanLo[i] = atan(0.5), atan(1), atan(1.5), atan(inf).
inline const std::vector<double> kAtanP = {
    3.33333333333329318027e-01, -1.99999999998764832476e-01, 1.42857142725034663711e-01, -1.11111104054623557880e-01,
    9.09088713343650656196e-02, -7.69187620504482999495e-02, 6.66107313738753120669e-02, -5.83357013379057348645e-02,
    4.97687799461593236017e-02, -3.65315727442169155270e-02, 1.62858201153657823623e-02};
inline constexpr double kAtanHi[4] = {4.63647609000806093515e-01, 7.85398163397448278999e-01,
                                      9.82793723247329054082e-01, 1.57079632679489655800e+00};
inline constexpr double kAtanLo[4] = {2.26987774529616870924e-17, 3.06161699786838301793e-17,
                                      1.39033110312309984516e-17, 6.12323399573676603587e-17};
/// pi = kPiHi + kPiLo.
inline constexpr double kPiHi = 3.14159265358979311600e+00, kPiLo = 1.22464679914735320717e-16;

/// The f64 body of a function whose f32 version is the f64 one rounded once.
#define KILN_F32_IN_F64(fn, m, x) \
  if (!(m).f64) { \
    auto w = (m).wide(); \
    return (m).from_f64(fn(w, (m).to_f64(x))); \
  }

/// a && b on comparison results.
template <MathOps M> typename M::V both(M& m, typename M::V a, typename M::V b) { return m.sel(a, b, a); }

/// atan(a) for a = |x| (or NaN) in f64, branch-free fdlibm: the interval [0, 7/16), [7/16, 11/16),
/// [11/16, 19/16), [19/16, 39/16) or beyond picks t = a, (2a - 1) / (2 + a), (a - 1) / (a + 1),
/// (a - 1.5) / (1 + 1.5 a) or -1 / a (numerators exact), and atan = hi - ((t z P(z) - lo) - t).
/// With `a_lo`, atan(a + a_lo) for a low-order part a_lo (far below a's ulp): a_lo / (1 + a^2) joins lo.
template <MathOps M>
typename M::V atan_abs(M& m, typename M::V a, const std::optional<typename M::V>& a_lo = std::nullopt) {
  typename M::V below[4] = {m.lt(a, m.c(0.4375)), m.lt(a, m.c(0.6875)), m.lt(a, m.c(1.1875)), m.lt(a, m.c(2.4375))};
  typename M::V num[4] = {a, m.fma(a, m.c(2), m.c(-1)), m.sub(a, m.c(1)), m.sub(a, m.c(1.5))};
  typename M::V den[4] = {m.c(1), m.add(m.c(2), a), m.add(a, m.c(1)), m.fma(a, m.c(1.5), m.c(1))};
  auto n = m.c(-1), d = a, hi = m.c(kAtanHi[3]), lo = m.c(kAtanLo[3]);
  for (int i = 3; i >= 0; --i) {
    n = m.sel(below[i], num[i], n);
    d = m.sel(below[i], den[i], d);
    hi = m.sel(below[i], m.c(i ? kAtanHi[i - 1] : 0.0), hi);
    lo = m.sel(below[i], m.c(i ? kAtanLo[i - 1] : 0.0), lo);
  }
  if (a_lo) lo = m.add(lo, m.div(*a_lo, m.fma(a, a, m.c(1))));
  auto t = m.div(n, d);
  auto z = m.mul(t, t);
  auto tp = m.mul(m.mul(t, z), horner(m, z, kAtanP));
  return m.sub(hi, m.sub(m.sub(tp, lo), t));
}

/// atan(x): atan_abs(|x|) with x's sign (-0 stays -0).
template <MathOps M> typename M::V atan_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(atan_body, m, x);
  return m.copysign(atan_abs(m, m.fabs(x)), x);
}

/// atan2(y, x) >= 0 for y >= 0 (y may be +0): atan(y / |x|), or pi - that where x's sign bit is set
/// (pi as hi + lo); inf/inf counts as 1, 0/0 as 0 (C's atan2 at the infinities and zeros). With y_lo
/// (y's low-order part, acos's), the quotient's low part joins atan's.
template <MathOps M>
typename M::V atan2_upper(M& m, typename M::V y, typename M::V x,
                          const std::optional<typename M::V>& y_lo = std::nullopt) {
  auto ax = m.fabs(x);
  auto q = m.div(y, ax);
  q = m.sel(both(m, m.eq(y, m.c(kInf)), m.eq(ax, m.c(kInf))), m.c(1), q);
  q = m.sel(both(m, m.eq(y, m.c(0)), m.eq(ax, m.c(0))), m.c(0), q);
  std::optional<typename M::V> q_lo;
  if (y_lo) { // (y + y_lo) / ax = q + (fma(-q, ax, y) + y_lo) / ax; none where q = inf
    q_lo = m.div(m.add(fnma(m, q, ax, y), *y_lo), ax);
    q_lo = m.sel(m.lt(q, m.c(kInf)), *q_lo, m.c(0));
  }
  auto a = atan_abs(m, q, q_lo);
  auto x_neg = m.lt(m.copysign(m.c(1), x), m.c(0));
  return m.sel(x_neg, m.sub(m.c(kPiHi), m.sub(a, m.c(kPiLo))), a);
}

/// atan2(y, x), the angle of (x, y) in [-pi, pi] with C's (and PyTorch's) signed zeros, infinities
/// and NaN: atan2_upper(|y|, x) with y's sign.
template <MathOps M> typename M::V atan2_body(M& m, typename M::V y, typename M::V x) {
  if (!m.f64) {
    auto w = m.wide();
    return m.from_f64(atan2_body(w, m.to_f64(y), m.to_f64(x)));
  }
  auto r = m.copysign(atan2_upper(m, m.fabs(y), x), y);
  return m.sel(m.is_nan(x), x, m.sel(m.is_nan(y), y, r));
}

/// sqrt(1 - x^2) as s + s_lo: w = fma(-x, x, 1) and its residual w_lo: fma(-x, x, 1 - w) where w >= 1/2
/// (1 - w exact), else (h - w) - p_lo with x^2 = p + p_lo (fma) and h = 1 - p (exact: p >= 1/2);
/// s = sqrt(w), s_lo = (fma(-s, s, w) + w_lo) / 2s (zero where s = 0); NaN outside [-1, 1].
template <MathOps M> std::pair<typename M::V, typename M::V> sqrt_one_minus_square(M& m, typename M::V x) {
  auto w = fnma(m, x, x, m.c(1));
  auto p = m.mul(x, x);
  auto p_lo = m.fma(x, x, m.neg(p));
  auto h = m.sub(m.c(1), p);
  auto w_lo = m.sel(m.lt(w, m.c(0.5)), m.sub(m.sub(h, w), p_lo), fnma(m, x, x, m.sub(m.c(1), w)));
  auto s = m.sqrt(w);
  auto s_lo = m.div(m.add(fnma(m, s, s, w), w_lo), m.add(s, s));
  return {s, m.sel(m.eq(s, m.c(0)), m.c(0), s_lo)};
}

/// asin(x) = atan(|x| / sqrt(1 - x^2)) with x's sign, the quotient as q + q_lo: pi/2 at +-1, NaN outside
/// [-1, 1], -0 kept.
template <MathOps M> typename M::V asin_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(asin_body, m, x);
  auto ax = m.fabs(x);
  auto [s, s_lo] = sqrt_one_minus_square(m, x);
  auto q = m.div(ax, s);
  auto q_lo = m.div(m.sub(fnma(m, q, s, ax), m.mul(q, s_lo)), s); // (ax - q (s + s_lo)) / s
  q_lo = m.sel(m.lt(q, m.c(kInf)), q_lo, m.c(0));
  return m.copysign(atan_abs(m, q, std::optional(q_lo)), x);
}

/// acos(x) = atan2(sqrt(1 - x^2), x), sqrt(1 - x^2) as s + s_lo: 0 at 1, pi at -1, pi/2 at +-0, NaN
/// outside [-1, 1].
template <MathOps M> typename M::V acos_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(acos_body, m, x);
  auto [s, s_lo] = sqrt_one_minus_square(m, x);
  auto y = atan2_upper(m, s, x, std::optional(s_lo));
  return m.sel(m.is_nan(x), x, y);
}

/// e^a / 2 for 22 <= a (f64): 2^(n-1) e^r by exp's reduction, so that it overflows only where the
/// result does (a > 710.48); a is clamped at 711 (inf beyond).
template <MathOps M> typename M::V half_exp_large(M& m, typename M::V a) {
  auto [nf, r] = reduce_ln2(m, m.fmin(a, m.c(711)));
  return m.scale(m.add(m.c(1), expm1_poly(m, r)), m.sub(nf, m.c(1)));
}

/// sinh(x): its Taylor series x + x z P(z) (z = x^2, to x^21) below |x| = 1, (e + e / (e + 1)) / 2 with
/// e = expm1(|x|) (fdlibm's) up to 22, e^|x| / 2 beyond; x's sign.
template <MathOps M> typename M::V sinh_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(sinh_body, m, x);
  auto a = m.fabs(x);
  auto z = m.mul(a, a);
  auto small = m.fma(m.mul(a, z), horner(m, z, factorial_series(3, 2, 10, 1.0, 1.0)), a);
  auto e = m.call(MathFn::Expm1, m.fmin(a, m.c(22)));
  auto mid = m.mul(m.c(0.5), m.add(e, m.div(e, m.add(e, m.c(1)))));
  auto y = m.sel(m.lt(a, m.c(1)), small, mid);
  y = m.sel(m.gt(a, m.c(22)), half_exp_large(m, a), y);
  return m.sel(m.is_nan(x), x, m.copysign(y, x));
}

/// cosh(x) = 1 + e^2 / (2 (1 + e)) with e = expm1(|x|) below ln2 / 2 (no cancellation near 0),
/// E / 2 + (1/2) / E with E = e^|x| below 22, e^|x| / 2 beyond (fdlibm's pieces).
template <MathOps M> typename M::V cosh_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(cosh_body, m, x);
  auto a = m.fabs(x);
  auto e = m.call(MathFn::Expm1, m.fmin(a, m.c(22)));
  auto big_e = m.add(e, m.c(1));
  auto small = m.add(m.c(1), m.div(m.mul(e, e), m.add(big_e, big_e)));
  auto mid = m.add(m.mul(m.c(0.5), big_e), m.div(m.c(0.5), big_e));
  auto y = m.sel(m.lt(a, m.c(0.34657359027997264)), small, mid);
  y = m.sel(m.gt(a, m.c(22)), half_exp_large(m, a), y);
  return m.sel(m.is_nan(x), x, y);
}

/// asinh(x) with x's sign, on a = |x|: log1p(a + a^2 / (1 + sqrt(1 + a^2))) up to 2,
/// log(2a + 1 / (a + sqrt(a^2 + 1))) up to 2^28, log(a) + ln2 beyond (fdlibm's).
template <MathOps M> typename M::V asinh_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(asinh_body, m, x);
  auto a = m.fabs(x);
  auto a2 = m.mul(a, a);
  auto root = m.sqrt(m.add(m.c(1), a2));
  auto small = m.call(MathFn::Log1p, m.add(a, m.div(a2, m.add(m.c(1), root))));
  auto huge = m.gt(a, m.c(0x1p28));
  auto arg = m.sel(huge, a, m.add(m.add(a, a), m.div(m.c(1), m.add(a, root))));
  auto large = m.add(m.call(MathFn::Log, arg), m.sel(huge, m.c(0.6931471805599453), m.c(0)));
  return m.sel(m.is_nan(x), x, m.copysign(m.sel(m.gt(a, m.c(2)), large, small), x));
}

/// acosh(x): log1p(t + sqrt(2t + t^2)) with t = x - 1 (exact) up to 2, log(2x - 1 / (x + sqrt(x^2 - 1)))
/// up to 2^28, log(x) + ln2 beyond (fdlibm's); NaN below 1.
template <MathOps M> typename M::V acosh_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(acosh_body, m, x);
  auto t = m.sub(x, m.c(1));
  auto small = m.call(MathFn::Log1p, m.add(t, m.sqrt(m.fma(t, t, m.add(t, t)))));
  auto huge = m.gt(x, m.c(0x1p28));
  auto root = m.sqrt(m.fma(x, x, m.c(-1)));
  auto arg = m.sel(huge, x, m.sub(m.add(x, x), m.div(m.c(1), m.add(x, root))));
  auto large = m.add(m.call(MathFn::Log, arg), m.sel(huge, m.c(0.6931471805599453), m.c(0)));
  auto y = m.sel(m.gt(x, m.c(2)), large, small);
  y = m.sel(m.lt(x, m.c(1)), m.c(kNaN), y);
  return m.sel(m.is_nan(x), x, y);
}

/// atanh(x) = log1p(2a + 2a a / (1 - a)) / 2 below a = |x| = 1/2, log1p(2a / (1 - a)) / 2 above
/// (fdlibm's; 1 - a exact there), x's sign: +-inf at +-1, NaN beyond.
template <MathOps M> typename M::V atanh_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(atanh_body, m, x);
  auto a = m.fabs(x);
  auto two_a = m.add(a, a);
  auto one_minus = m.sub(m.c(1), a);
  auto small = m.add(two_a, m.div(m.mul(two_a, a), one_minus));
  auto arg = m.sel(m.lt(a, m.c(0.5)), small, m.div(two_a, one_minus));
  auto y = m.mul(m.c(0.5), m.call(MathFn::Log1p, arg));
  return m.sel(m.is_nan(x), x, m.copysign(y, x));
}

/// tan(x): with sin/cos's reduction and polynomials (the same limits: accurate to |x| ~ 1.6e6), tan(r) =
/// r + r z (S(z) - C(z)) / cos(r) (sin(r) = r + r z S, cos(r) = 1 + z C, z = r^2: the quotient is a
/// correction below r^2 / 3 relative, so its rounding costs little), -1 / tan(r) for odd n; -0 kept, NaN
/// at the infinities.
template <MathOps M> typename M::V tan_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(tan_body, m, x);
  auto [r, q, finite] = reduce_pio2(m, x);
  auto z = m.mul(r, r);
  auto ps = horner(m, z, factorial_series(3, 2, 9, -1.0, -1.0));
  auto pc = horner(m, z, factorial_series(2, 2, 10, -1.0, -1.0));
  auto c = m.fma(z, pc, m.c(1));
  auto t = m.add(r, m.div(m.mul(m.mul(r, z), m.sub(ps, pc)), c));
  auto odd = m.ine(m.iand(q, m.ci32(1)), m.ci32(0));
  auto v = m.sel(odd, m.div(m.c(-1), t), t);
  v = m.sel(m.eq(x, m.c(0)), x, v);
  return m.sel(finite, v, m.c(kNaN));
}

/// k + log(1 + f) * (ihi + ilo) (f64, the log_parts of x), its low-order terms summed apart: log(1 + f)
/// = L + L_err (Fast2Sum of f - (hfsq - s w)), the product as p + p_err (fma), k + p as h + h_err.
/// log2 (khi = 1, klo = 0: exact k at powers of two) and log10 (k log10(2) = k khi, exact, + k klo).
template <MathOps M> typename M::V log_scaled(M& m, typename M::V x, double ihi, double ilo, double khi, double klo) {
  auto [kf, f, hfsq, s, w] = log_parts(m, x);
  auto d = m.sub(hfsq, m.mul(s, w));
  auto l = m.sub(f, d);
  auto l_err = m.sub(m.sub(f, l), d);
  auto p = m.mul(l, m.c(ihi));
  auto p_err = m.fma(l, m.c(ilo), m.fma(l, m.c(ihi), m.neg(p)));
  auto k = m.mul(kf, m.c(khi));
  auto h = m.add(k, p);
  auto h_err = m.add(m.sub(k, h), p); // Fast2Sum: |k| >= |p| unless k = 0 (then h = p exactly)
  auto lo = m.fma(l_err, m.c(ihi), m.fma(kf, m.c(klo), p_err));
  return log_specials(m, x, m.add(h, m.add(h_err, lo)));
}

/// log2(x): k + log(1 + f) / ln2 (exact at powers of two).
template <MathOps M> typename M::V log2_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(log2_body, m, x);
  return log_scaled(m, x, 1.4426950408889634, 2.0355273740931033e-17, 1.0, 0.0);
}

/// log10(x): k log10(2) + log(1 + f) / ln10, log10(2) as fdlibm's hi (k hi exact) + lo.
template <MathOps M> typename M::V log10_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(log10_body, m, x);
  return log_scaled(m, x, 0.4342944819032518, 1.098319650216765e-17, 3.01029995663611771306e-01,
                    3.69423907715893078616e-13);
}

/// exp2(x) = 2^n e^(r ln2), n = rint(x), r = x - n exact, r ln2 as t + t_lo (fma), e^(t + t_lo) =
/// 1 + (expm1(t) + t_lo); exact at integers (r = 0); x clamped to [-1080, 1030] (0 / inf beyond).
template <MathOps M> typename M::V exp2_body(M& m, typename M::V x) {
  KILN_F32_IN_F64(exp2_body, m, x);
  auto xc = clamp(m, x, -1080, 1030);
  auto nf = m.rint(xc);
  auto r = m.sub(xc, nf);
  auto t = m.mul(r, m.c(0.6931471805599453));
  auto t_lo = m.fma(r, m.c(2.3190468138462996e-17), m.fma(r, m.c(0.6931471805599453), m.neg(t)));
  auto p = m.add(m.c(1), m.add(expm1_poly(m, t), t_lo));
  return m.sel(m.is_nan(x), x, m.scale(p, nf));
}

#undef KILN_F32_IN_F64

template <MathOps M> typename M::V sin_body(M& m, typename M::V x) { return sin_cos_body(m, x, false); }
template <MathOps M> typename M::V cos_body(M& m, typename M::V x) { return sin_cos_body(m, x, true); }

/// The body of fn.
template <MathOps M> typename M::V body(M& m, MathFn fn, typename M::V x) {
  switch (fn) {
#define KILN_MATH_BODY(e, name, body_fn) \
  case MathFn::e: return body_fn(m, x);
    KILN_MATH_FNS(KILN_MATH_BODY)
#undef KILN_MATH_BODY
  }
  return x; // unreachable: the switch covers every MathFn
}

/// The body of the two-operand fn on (a, b).
template <MathOps M> typename M::V body(M& m, MathFn2 fn, typename M::V a, typename M::V b) {
  switch (fn) {
#define KILN_MATH_BODY(e, name, body_fn) \
  case MathFn2::e: return body_fn(m, a, b);
    KILN_MATH_FNS2(KILN_MATH_BODY)
#undef KILN_MATH_BODY
  }
  return a; // unreachable: the switch covers every MathFn2
}

// ---- random numbers (graph/random.h's generator, bit-exact) ----------------------

/// graph::random_bits(seed, counter) on 64-bit ints (w computes in double: its int is 64-bit).
template <MathOps M> typename M::V random_bits(M& w, typename M::V seed, typename M::V counter) {
  namespace rng = graph::rng;
  auto z = w.iadd(w.imul(seed, w.ci(static_cast<int64_t>(rng::kSeedMul))),
                  w.imul(counter, w.ci(static_cast<int64_t>(rng::kCounterMul))));
  z = w.iadd(z, w.ci(static_cast<int64_t>(rng::kOffset)));
  z = w.imul(w.ixor(z, w.lshr(z, rng::kShift1)), w.ci(static_cast<int64_t>(rng::kMul1)));
  z = w.imul(w.ixor(z, w.lshr(z, rng::kShift2)), w.ci(static_cast<int64_t>(rng::kMul2)));
  return w.ixor(z, w.lshr(z, rng::kShift3));
}

/// graph::random_uniform in this float type: the top bits times 2^-bits, both exact.
template <MathOps M> typename M::V random_uniform(M& m, typename M::V seed, typename M::V counter) {
  M w = m.wide();
  const int nbits = m.f64 ? graph::rng::kUniformBitsF64 : graph::rng::kUniformBitsF32;
  auto top = w.lshr(random_bits(w, seed, counter), 64 - nbits);
  return m.mul(m.u64_to_float(top), m.c(std::ldexp(1.0, -nbits)));
}

/// graph::random_normal in this float type (Box-Muller from the uniforms at 2c and 2c + 1),
/// with this file's log and cos.
template <MathOps M> typename M::V random_normal(M& m, typename M::V seed, typename M::V counter) {
  M w = m.wide();
  auto c2 = w.shl(counter, 1);
  auto u1 = random_uniform(m, seed, c2);
  auto u2 = random_uniform(m, seed, w.ior(c2, w.ci(1)));
  auto lg = m.call(MathFn::Log, m.sub(m.c(1), u1));
  auto radius = m.sqrt(m.mul(m.c(-2), lg));
  auto angle = m.call(MathFn::Cos, m.mul(m.c(graph::rng::kTwoPi), u2));
  return m.mul(radius, angle);
}

} // namespace math

} // namespace kiln::codegen

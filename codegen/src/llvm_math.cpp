// kiln's own exp, expm1, log, sin, cos and tanh as branch-free LLVM IR (see llvm_math.h).
//
// Method, for both f32 and f64 (f64 uses higher-degree polynomials):
//   exp:   n = round(x / ln2), r = x - n ln2 (Cody-Waite: ln2 = hi + lo, hi with
//          trailing zero bits so n*hi is exact), e^r by its Taylor polynomial on
//          |r| <= ln2/2, times 2^n built from bits in two halves 2^(n/2) * 2^(n - n/2)
//          so that overflow gives inf and the subnormal range is rounded once.
//   expm1: the same reduction; 2^n * expm1(r) + (2^n - 1), one FMA, relative accuracy near 0.
//   log:   x = 2^k m with m in [sqrt(1/2), sqrt(2)); log(m) = log1p(f) with f = m - 1,
//          s = f / (2 + f), log1p(f) = f - (f^2/2 - s (f^2/2 + R(s^2))) (the fdlibm
//          arrangement, with R from the atanh series); subnormals are scaled by 2^24 / 2^54.
//   sin/cos: n = round(x * 2/pi), r = x - n pi/2 with pi/2 in three (f64) parts, done
//          in f64 for f32 too; sin and cos polynomials on |r| <= pi/4, quadrant by n mod 4.
//   tanh:  sign(x) e / (e + 2) with e = expm1(2|x|), |x| clamped where tanh rounds to 1.
// The polynomials are Taylor series truncated where the next term is below 1/8 ulp.
//
// Fusion is explicit: every fused multiply-add is an llvm.fma call (always fused, one
// rounding), every other mul/add/sub rounds on its own, and no float op carries
// `contract`, so the backend fuses nothing else. The CUDA port (cuda_math.cpp) writes
// fma() at exactly the same places, so both compute the same IEEE operations, bit for
// bit, whatever LLVM's DAG combiner would have chosen to contract (it fuses the first
// single-use fmul of an fadd, which depends on operand order after InstCombine).
// On a target without FMA instructions llvm.fma is a libm fma call: correct, slow.
#include "codegen/src/llvm_math.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <llvm/IR/Intrinsics.h>

#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {

/// Small IR helpers for one scalar float type (float or double).
class FloatOps {
public:
  FloatOps(IRBuilder<>& b, Type* ft)
      : b(b), ft(ft), f64(ft->isDoubleTy()), it(b.getIntNTy(f64 ? 64 : 32)) {}

  IRBuilder<>& b;
  Type* ft;          ///< float or double
  bool f64;          ///< ft is double
  IntegerType* it;   ///< the integer type of the same width

  Value* c(double v) { return ConstantFP::get(ft, v); }
  Value* ci(int64_t v) { return ConstantInt::get(it, v, true); }
  Value* add(Value* x, Value* y) { return b.CreateFAdd(x, y); }
  Value* sub(Value* x, Value* y) { return b.CreateFSub(x, y); }
  Value* mul(Value* x, Value* y) { return b.CreateFMul(x, y); }
  Value* div(Value* x, Value* y) { return b.CreateFDiv(x, y); }
  /// x*y + z with one rounding (llvm.fma; CUDA's fma()).
  Value* fma(Value* x, Value* y, Value* z) { return b.CreateIntrinsic(Intrinsic::fma, {ft}, {x, y, z}); }
  /// z - x*y with one rounding: fma(-x, y, z).
  Value* fnma(Value* x, Value* y, Value* z) { return fma(b.CreateFNeg(x), y, z); }
  Value* sel(Value* c, Value* x, Value* y) { return b.CreateSelect(c, x, y); }
  Value* unary(Intrinsic::ID id, Value* x) { return b.CreateUnaryIntrinsic(id, x); }
  Value* is_nan(Value* x) { return b.CreateFCmpUNO(x, x); }
  Value* inf() { return c(std::numeric_limits<double>::infinity()); }
  Value* nan() { return c(std::numeric_limits<double>::quiet_NaN()); }
  /// Clamps x to [lo, hi]; NaN becomes lo (callers restore NaN at the end).
  Value* clamp(Value* x, double lo, double hi) { return b.CreateMinNum(b.CreateMaxNum(x, c(lo)), c(hi)); }

  /// Polynomial sum_i coef[i] x^i by Horner's rule, each step one fma.
  Value* horner(Value* x, const std::vector<double>& coef) {
    Value* p = c(coef.back());
    for (size_t i = coef.size() - 1; i-- > 0;) p = fma(p, x, c(coef[i]));
    return p;
  }
  /// 2^n for an integer n in the normal exponent range, from bits.
  Value* pow2(Value* n) {
    const int mant = f64 ? 52 : 23, bias = f64 ? 1023 : 127;
    return b.CreateBitCast(b.CreateShl(b.CreateAdd(n, ci(bias)), ci(mant)), ft);
  }
};

/// Taylor coefficients first * sign^k / (start + step*k)! for k = 0..count-1.
std::vector<double> factorial_series(int start, int step, int count, double first, double sign) {
  std::vector<double> out;
  for (int k = 0; k < count; ++k) {
    const int n = start + step * k;
    double f = 1;
    for (int i = 2; i <= n; ++i) f *= i;
    out.push_back(first * std::pow(sign, k) / f);
  }
  return out;
}

/// Cody-Waite reduction by ln2: returns n (as a float) and r = x - n ln2, |r| <= ln2/2,
/// as fma(-n, lo, fma(-n, hi, x)).
std::pair<Value*, Value*> reduce_ln2(FloatOps& m, Value* x) {
  // hi has trailing zero bits, so n*hi is exact for the |n| < 2^11 that occur here.
  const double hi = m.f64 ? 6.93147180369123816490e-01 : 0.693145751953125;
  const double lo = m.f64 ? 1.90821492927058770002e-10 : 1.428606765330187045e-06;
  Value* nf = m.unary(Intrinsic::roundeven, m.mul(x, m.c(1.4426950408889634)));
  Value* r = m.fnma(nf, m.c(lo), m.fnma(nf, m.c(hi), x));
  return {nf, r};
}

/// expm1(r) for |r| <= ln2/2: r + r^2 (1/2! + r/3! + ...), as fma(r*r, q, r).
Value* expm1_poly(FloatOps& m, Value* r) {
  Value* q = m.horner(r, factorial_series(2, 1, m.f64 ? 13 : 7, 1.0, 1.0));
  return m.fma(m.mul(r, r), q, r);
}

Value* exp_body(FloatOps& m, Value* x) {
  // Beyond these bounds e^x is inf or rounds to 0; clamping keeps n in range.
  Value* xc = m.clamp(x, m.f64 ? -746.0 : -104.0, m.f64 ? 710.0 : 89.0);
  auto [nf, r] = reduce_ln2(m, xc);
  Value* p = m.add(m.c(1), expm1_poly(m, r));
  Value* n = m.b.CreateFPToSI(nf, m.it);
  Value* n1 = m.b.CreateAShr(n, m.ci(1));
  Value* n2 = m.b.CreateSub(n, n1);
  Value* y = m.mul(m.mul(p, m.pow2(n1)), m.pow2(n2));
  return m.sel(m.is_nan(x), x, y);
}

/// expm1, internal to tanh: exact domain x <= 88 (f32) / 709 (f64); above that it
/// returns +inf (true overflow starts at 88.72 / 709.78).
Value* expm1_body(FloatOps& m, Value* x) {
  const double hi = m.f64 ? 709.0 : 88.0;
  Value* xc = m.clamp(x, m.f64 ? -40.0 : -20.0, hi); // below: expm1 rounds to -1
  auto [nf, r] = reduce_ln2(m, xc);
  Value* er = expm1_poly(m, r);
  Value* t = m.pow2(m.b.CreateFPToSI(nf, m.it));
  Value* y = m.fma(t, er, m.sub(t, m.c(1)));
  y = m.sel(m.b.CreateFCmpOGT(x, m.c(hi)), m.inf(), y);
  return m.sel(m.is_nan(x), x, y);
}

Value* log_body(FloatOps& m, Value* x) {
  IRBuilder<>& b = m.b;
  const int mant = m.f64 ? 52 : 23, bias = m.f64 ? 1023 : 127, scale = m.f64 ? 54 : 24;
  const double min_normal = m.f64 ? 0x1p-1022 : 0x1p-126;
  // Subnormals: scale into the normal range first.
  Value* tiny = b.CreateFCmpOLT(x, m.c(min_normal));
  Value* xs = m.sel(tiny, m.mul(x, m.c(std::ldexp(1.0, scale))), x);
  Value* kadj = m.sel(tiny, m.ci(-scale), m.ci(0));
  // Bits of 1.0 and of sqrt(1/2) (f64: its high word, shifted): shifting the exponent
  // split point to sqrt(1/2) gives m in [sqrt(1/2), sqrt(2)).
  const int64_t one = m.f64 ? 0x3ff0000000000000LL : 0x3f800000LL;
  const int64_t sqrt_half = m.f64 ? 0x3fe6a09e00000000LL : 0x3f3504f3LL;
  Value* bits = b.CreateAdd(b.CreateBitCast(xs, m.it), m.ci(one - sqrt_half));
  Value* k = b.CreateAdd(b.CreateSub(b.CreateLShr(bits, m.ci(mant)), m.ci(bias)), kadj);
  Value* mbits = b.CreateAdd(b.CreateAnd(bits, m.ci((int64_t{1} << mant) - 1)), m.ci(sqrt_half));
  Value* f = m.sub(b.CreateBitCast(mbits, m.ft), m.c(1));
  Value* s = m.div(f, m.add(m.c(2), f));
  Value* z = m.mul(s, s);
  // R = sum_{j>=1} 2 z^j / (2j + 1), the atanh series beyond its first term.
  std::vector<double> coef;
  for (int j = 1; j <= (m.f64 ? 11 : 5); ++j) coef.push_back(2.0 / (2 * j + 1));
  Value* h = m.horner(z, coef);
  Value* hfsq = m.mul(m.mul(m.c(0.5), f), f);
  Value* kf = b.CreateSIToFP(k, m.ft);
  const double ln2_hi = m.f64 ? 6.93147180369123816490e-01 : 0.693145751953125;
  const double ln2_lo = m.f64 ? 1.90821492927058770002e-10 : 1.428606765330187045e-06;
  // tail = s (hfsq + z h) + k ln2_lo: the products z h and s (...) fused, k ln2_lo rounded;
  // y = k ln2_hi + (f - (hfsq - tail)), k ln2_hi fused (exact anyway: ln2_hi's zero bits).
  Value* tail = m.fma(s, m.fma(z, h, hfsq), m.mul(kf, m.c(ln2_lo)));
  Value* y = m.fma(kf, m.c(ln2_hi), m.sub(f, m.sub(hfsq, tail)));
  y = m.sel(b.CreateFCmpOEQ(x, m.c(0)), m.c(-std::numeric_limits<double>::infinity()), y);
  y = m.sel(b.CreateFCmpOLT(x, m.c(0)), m.nan(), y);
  y = m.sel(b.CreateFCmpOEQ(x, m.inf()), m.inf(), y);
  return m.sel(m.is_nan(x), x, y);
}

/// sin (is_cos false) or cos of x.
/// Argument reduction runs in f64 for both dtypes: n = round(x 2/pi) and
/// r = x - n pi/2 with pi/2 split as pio2_1 (33 bits, so n*pio2_1 is exact for
/// |n| < 2^20) + the rest (f32: one more part, ~86 bits in all; f64: two more, ~119 bits).
/// Accuracy therefore holds for |x| < 2^20 pi/2 ~ 1.6e6 (f32) and, for f64, also
/// there except for arguments within ~2^-46 of a multiple of pi/2 at large |x|.
/// Beyond 1.6e6 the reduction loses bits and the result degrades (it stays finite,
/// in [-1, 1], and no longer tracks sin x); inf and NaN give NaN.
Value* sin_cos_body(FloatOps& m, Value* x, bool is_cos) {
  IRBuilder<>& b = m.b;
  FloatOps d(b, b.getDoubleTy());
  Value* finite = b.CreateFCmpOLT(m.unary(Intrinsic::fabs, x), m.inf());
  Value* xs = m.sel(finite, x, m.c(0));
  Value* xd = m.f64 ? xs : b.CreateFPExt(xs, d.ft);
  Value* nf = d.unary(Intrinsic::roundeven, d.mul(xd, d.c(0.63661977236758134308)));
  Value* rd = d.fnma(nf, d.c(1.57079632673412561417e+00), xd);
  if (m.f64) {
    rd = d.fnma(nf, d.c(6.07710050630396597660e-11), rd);
    rd = d.fnma(nf, d.c(2.02226624879595063154e-21), rd);
  } else {
    rd = d.fnma(nf, d.c(6.07710050650619224932e-11), rd);
  }
  // |r| <= pi/4 within the range; beyond it the clamp keeps the result bounded.
  rd = d.clamp(rd, -0.7854, 0.7854);
  Value* r = m.f64 ? rd : b.CreateFPTrunc(rd, m.ft);
  // n mod 4, exactly, for any float n (multiples of 4 beyond 2^54 give 0; 4 floor(n/4)
  // is exact, so the mul and the sub round nothing).
  Value* nmod = d.sub(nf, d.mul(d.c(4), d.unary(Intrinsic::floor, d.mul(nf, d.c(0.25)))));
  Value* q = b.CreateFPToSI(nmod, b.getInt32Ty());
  if (is_cos) q = b.CreateAdd(q, b.getInt32(1));
  Value* z = m.mul(r, r);
  Value* ps = m.horner(z, factorial_series(3, 2, m.f64 ? 9 : 5, -1.0, -1.0)); // -1/3! + z/5! - ...
  Value* pc = m.horner(z, factorial_series(2, 2, m.f64 ? 10 : 5, -1.0, -1.0)); // -1/2! + z/4! - ...
  Value* s = m.fma(m.mul(r, z), ps, r);
  Value* c = m.fma(z, pc, m.c(1));
  Value* use_cos = b.CreateICmpNE(b.CreateAnd(q, b.getInt32(1)), b.getInt32(0));
  Value* negate = b.CreateICmpNE(b.CreateAnd(q, b.getInt32(2)), b.getInt32(0));
  Value* v = m.sel(use_cos, c, s);
  v = m.sel(negate, b.CreateFNeg(v), v);
  if (!is_cos) v = m.sel(b.CreateFCmpOEQ(x, m.c(0)), x, v); // sin(-0) = -0 (the reduction gives +0)
  return m.sel(finite, v, m.nan());
}

const char* math_name(MathFn fn) {
  switch (fn) {
  case MathFn::Exp: return "exp";
  case MathFn::Expm1: return "expm1";
  case MathFn::Log: return "log";
  case MathFn::Sin: return "sin";
  case MathFn::Cos: return "cos";
  case MathFn::Tanh: return "tanh";
  }
  return "?";
}

/// tanh(x) = sign(x) e / (e + 2), e = expm1(2|x|). Beyond |x| = 10 (f32) / 22 (f64)
/// tanh rounds to +-1; clamping there keeps e finite (inf/inf would be NaN).
/// f32 uses its Taylor series x + x z P(z), z = x^2, for |x| < 0.55, where the
/// three roundings of e / (e + 2) would cost up to ~2.3 ulp.
Value* tanh_body(FloatOps& m, Value* x) {
  Value* ax = m.unary(Intrinsic::fabs, x);
  const double big = m.f64 ? 22.0 : 10.0;
  Value* axc = m.sel(m.b.CreateFCmpOGT(ax, m.c(big)), m.c(big), ax);
  Value* e = emit_math(m.b, MathFn::Expm1, m.add(axc, axc));
  Value* t = m.div(e, m.add(e, m.c(2)));
  if (m.f64) return m.b.CreateBinaryIntrinsic(Intrinsic::copysign, t, x);
  // tanh's Taylor coefficients of x^3, x^5, ..., x^21.
  static const std::vector<double> series = {
      -0.3333333333333333,   0.13333333333333333,   -0.05396825396825397,   0.021869488536155203,
      -0.008863235529902197, 0.003592128036572481,  -0.0014558343870513183, 0.000590027440945586,
      -0.00023912911424355248, 9.691537956929451e-05};
  Value* z = m.mul(ax, ax);
  Value* small = m.fma(m.mul(ax, z), m.horner(z, series), ax);
  return m.b.CreateBinaryIntrinsic(Intrinsic::copysign, m.sel(m.b.CreateFCmpOLT(ax, m.c(0.55)), small, t), x);
}

Value* math_body(FloatOps& m, MathFn fn, Value* x) {
  switch (fn) {
  case MathFn::Exp: return exp_body(m, x);
  case MathFn::Expm1: return expm1_body(m, x);
  case MathFn::Log: return log_body(m, x);
  case MathFn::Sin: return sin_cos_body(m, x, false);
  case MathFn::Cos: return sin_cos_body(m, x, true);
  case MathFn::Tanh: return tanh_body(m, x);
  }
  KILN_ASSERT(false, "bad MathFn");
  return nullptr;
}

/// Defines the internal function `name` computing fn on scalar type ty.
Function* define_math(Module& mod, MathFn fn, Type* ty, const std::string& name) {
  auto* f = Function::Create(FunctionType::get(ty, {ty}, false), GlobalValue::InternalLinkage, name, mod);
  f->addFnAttr(Attribute::AlwaysInline);
  f->addFnAttr(Attribute::NoUnwind);
  f->addFnAttr(Attribute::WillReturn);
  f->setDoesNotAccessMemory();
  IRBuilder<> b(BasicBlock::Create(mod.getContext(), "entry", f)); // no fast-math flags: nothing contracts
  FloatOps m(b, ty);
  b.CreateRet(math_body(m, fn, f->getArg(0)));
  return f;
}

} // namespace

Value* emit_math(IRBuilder<>& b, MathFn fn, Value* x) {
  Type* ty = x->getType();
  KILN_ASSERT(ty->isFloatTy() || ty->isDoubleTy(), "math on a non-float type");
  Module& mod = *b.GetInsertBlock()->getModule();
  const std::string name = std::string("kiln.") + math_name(fn) + (ty->isDoubleTy() ? ".f64" : ".f32");
  Function* f = mod.getFunction(name);
  if (!f) f = define_math(mod, fn, ty, name);
  return b.CreateCall(f, {x});
}

} // namespace kiln::codegen

// The CUDA prelude (see cuda_math.h). The math functions are generated here for
// float and double from the same constants and formulas as llvm_math.cpp, operation
// for operation: each fma() here is an explicit llvm.fma there (FloatOps::fma/fnma,
// horner), and every other operation rounds separately on both sides (the LLVM math
// bodies carry no `contract`; NVRTC is run with --fmad=false and the shim with
// -ffp-contract=off), so the GPU and the CPU agree bitwise. A change to either file
// needs the same change in the other; test_cuda's CudaShimMath checks thousands of
// inputs per function.
#include "codegen/src/cuda_math.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace kiln::codegen {

namespace {

/// Taylor coefficients first * sign^k / (start + step*k)! (as in llvm_math.cpp).
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

/// Writes the C++ text of one function for float (f64 false) or double.
struct Writer {
  bool f64;
  std::string out;

  std::string T() const { return f64 ? "double" : "float"; }
  std::string I() const { return f64 ? "long long" : "int"; }
  std::string U() const { return f64 ? "unsigned long long" : "unsigned int"; }
  std::string sfx() const { return f64 ? "_f64" : "_f32"; }
  /// A libm name for this type: fma -> fmaf for float.
  std::string fn(const char* base) const { return std::string(base) + (f64 ? "" : "f"); }
  /// An exact literal of v rounded to this type (hex float).
  std::string c(double v) const {
    char buf[64];
    if (f64) std::snprintf(buf, sizeof buf, "%a", v);
    else std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(v)));
    return v < 0 ? "(" + std::string(buf) + ")" : std::string(buf);
  }
  std::string inf() const { return f64 ? "__longlong_as_double(0x7ff0000000000000LL)" : "__int_as_float(0x7f800000)"; }
  std::string nan() const { return f64 ? "__longlong_as_double(0x7ff8000000000000LL)" : "__int_as_float(0x7fc00000)"; }
  void line(const std::string& s) { out += "  " + s + "\n"; }
  void let(const std::string& name, const std::string& value) { line("const " + T() + " " + name + " = " + value + ";"); }
  /// p = sum_i coef[i] x^i by Horner's rule, each step one fma.
  void horner(const std::string& p, const std::string& x, const std::vector<double>& coef) {
    line(T() + " " + p + " = " + c(coef.back()) + ";");
    for (size_t i = coef.size() - 1; i-- > 0;) line(p + " = " + fn("fma") + "(" + p + ", " + x + ", " + c(coef[i]) + ");");
  }
  void begin(const std::string& name, const std::string& args) {
    out += "__device__ __forceinline__ " + T() + " " + name + sfx() + "(" + args + ") {\n";
  }
  void end() { out += "}\n"; }
};

/// 2^n from bits, for n in the normal exponent range.
void write_pow2(Writer& w) {
  const char* mant = w.f64 ? "52" : "23";
  const char* bias = w.f64 ? "1023" : "127";
  w.begin("kiln_pow2", w.I() + " n");
  const std::string bits = "(" + w.U() + ")(n + " + bias + ") << " + mant;
  w.line(w.f64 ? "return __longlong_as_double((long long)(" + bits + "));"
               : "return __int_as_float((int)(" + bits + "));");
  w.end();
}

/// nf = round(x / ln2), r = x - nf ln2 (Cody-Waite; nf*hi is exact).
void write_reduce_ln2(Writer& w, const std::string& x) {
  const double hi = w.f64 ? 6.93147180369123816490e-01 : 0.693145751953125;
  const double lo = w.f64 ? 1.90821492927058770002e-10 : 1.428606765330187045e-06;
  w.let("nf", w.fn("rint") + "(" + x + " * " + w.c(1.4426950408889634) + ")");
  w.let("r", w.fn("fma") + "(-nf, " + w.c(lo) + ", " + w.fn("fma") + "(-nf, " + w.c(hi) + ", " + x + "))");
}

/// er = expm1(r) on |r| <= ln2/2: r + r^2 (1/2! + r/3! + ...).
void write_expm1_poly(Writer& w) {
  w.horner("q", "r", factorial_series(2, 1, w.f64 ? 13 : 7, 1.0, 1.0));
  w.let("er", w.fn("fma") + "(r * r, q, r)");
}

std::string clamp(const Writer& w, const std::string& x, double lo, double hi) {
  return w.fn("fmin") + "(" + w.fn("fmax") + "(" + x + ", " + w.c(lo) + "), " + w.c(hi) + ")";
}

void write_exp(Writer& w) {
  w.begin("kiln_exp", w.T() + " x");
  w.let("xc", clamp(w, "x", w.f64 ? -746.0 : -104.0, w.f64 ? 710.0 : 89.0));
  write_reduce_ln2(w, "xc");
  write_expm1_poly(w);
  w.let("p", w.c(1) + " + er");
  w.line("const " + w.I() + " n = (" + w.I() + ")nf;");
  w.line("const " + w.I() + " n1 = n >> 1;");
  w.let("y", "(p * kiln_pow2" + w.sfx() + "(n1)) * kiln_pow2" + w.sfx() + "(n - n1)");
  w.line("return x != x ? x : y;");
  w.end();
}

void write_expm1(Writer& w) {
  const double hi = w.f64 ? 709.0 : 88.0;
  w.begin("kiln_expm1", w.T() + " x");
  w.let("xc", clamp(w, "x", w.f64 ? -40.0 : -20.0, hi));
  write_reduce_ln2(w, "xc");
  write_expm1_poly(w);
  w.let("t", "kiln_pow2" + w.sfx() + "((" + w.I() + ")nf)");
  w.let("y", w.fn("fma") + "(t, er, t - " + w.c(1) + ")");
  w.line("return x != x ? x : (x > " + w.c(hi) + " ? " + w.inf() + " : y);");
  w.end();
}

void write_log(Writer& w) {
  const int mant = w.f64 ? 52 : 23, bias = w.f64 ? 1023 : 127, scale = w.f64 ? 54 : 24;
  const unsigned long long one = w.f64 ? 0x3ff0000000000000ULL : 0x3f800000ULL;
  const unsigned long long sqrt_half = w.f64 ? 0x3fe6a09e00000000ULL : 0x3f3504f3ULL;
  const unsigned long long mask = (1ULL << mant) - 1;
  const std::string u = w.f64 ? "ULL" : "u";
  auto hex = [&](unsigned long long v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", v);
    return std::string(buf) + u;
  };
  const std::string as_bits = w.f64 ? "(unsigned long long)__double_as_longlong" : "(unsigned int)__float_as_int";
  const std::string from_bits = w.f64 ? "__longlong_as_double((long long)" : "__int_as_float((int)";
  w.begin("kiln_log", w.T() + " x");
  w.line("const bool tiny = x < " + w.c(w.f64 ? 0x1p-1022 : 0x1p-126) + ";");
  w.let("xs", "tiny ? x * " + w.c(std::ldexp(1.0, scale)) + " : x");
  w.line("const " + w.U() + " bits = " + as_bits + "(xs) + " + hex(one - sqrt_half) + ";");
  w.line("const " + w.I() + " k = (" + w.I() + ")(bits >> " + std::to_string(mant) + ") - " + std::to_string(bias) +
         " + (tiny ? -" + std::to_string(scale) + " : 0);");
  w.let("f", from_bits + "((bits & " + hex(mask) + ") + " + hex(sqrt_half) + ")) - " + w.c(1));
  w.let("s", "f / (" + w.c(2) + " + f)");
  w.let("z", "s * s");
  std::vector<double> coef;
  for (int j = 1; j <= (w.f64 ? 11 : 5); ++j) coef.push_back(2.0 / (2 * j + 1));
  w.horner("h", "z", coef);
  w.let("hfsq", "(" + w.c(0.5) + " * f) * f");
  w.let("kf", "(" + w.T() + ")k");
  const double ln2_hi = w.f64 ? 6.93147180369123816490e-01 : 0.693145751953125;
  const double ln2_lo = w.f64 ? 1.90821492927058770002e-10 : 1.428606765330187045e-06;
  // tail = s (hfsq + z h) + kf ln2_lo, with z h and s (...) fused and kf ln2_lo rounded.
  w.let("tail", w.fn("fma") + "(s, " + w.fn("fma") + "(z, h, hfsq), kf * " + w.c(ln2_lo) + ")");
  w.let("y", w.fn("fma") + "(kf, " + w.c(ln2_hi) + ", f - (hfsq - tail))");
  w.line("if (x != x) return x;");
  w.line("if (x == " + w.inf() + ") return x;");
  w.line("if (x < " + w.c(0) + ") return " + w.nan() + ";");
  w.line("return x == " + w.c(0) + " ? -" + w.inf() + " : y;");
  w.end();
}

/// sin and cos share the body: both polynomials, picked by the quadrant.
void write_sin_or_cos(Writer& w, bool is_cos) {
  w.begin(is_cos ? "kiln_cos" : "kiln_sin", w.T() + " x");
  w.line("const bool finite = " + w.fn("fabs") + "(x) < " + w.inf() + ";");
  w.line("const double xd = (double)(finite ? x : " + w.c(0) + ");");
  w.line("const double nf = rint(xd * " + Writer{true, {}}.c(0.63661977236758134308) + ");");
  w.line("double rd = fma(-nf, " + Writer{true, {}}.c(1.57079632673412561417e+00) + ", xd);");
  if (w.f64) {
    w.line("rd = fma(-nf, " + Writer{true, {}}.c(6.07710050630396597660e-11) + ", rd);");
    w.line("rd = fma(-nf, " + Writer{true, {}}.c(2.02226624879595063154e-21) + ", rd);");
  } else {
    w.line("rd = fma(-nf, " + Writer{true, {}}.c(6.07710050650619224932e-11) + ", rd);");
  }
  w.line("rd = " + clamp(Writer{true, {}}, "rd", -0.7854, 0.7854) + ";");
  w.let("r", "(" + w.T() + ")rd");
  w.line(std::string("const int q = (int)(nf - 4.0 * floor(nf * 0.25))") + (is_cos ? " + 1;" : ";"));
  w.let("z", "r * r");
  w.horner("ps", "z", factorial_series(3, 2, w.f64 ? 9 : 5, -1.0, -1.0));
  w.horner("pc", "z", factorial_series(2, 2, w.f64 ? 10 : 5, -1.0, -1.0));
  w.let("s", w.fn("fma") + "(r * z, ps, r)");
  w.let("c", w.fn("fma") + "(z, pc, " + w.c(1) + ")");
  w.line(w.T() + " v = (q & 1) ? c : s;");
  w.line("v = (q & 2) ? -v : v;");
  if (!is_cos) w.line("v = x == " + w.c(0) + " ? x : v;");
  w.line("return finite ? v : " + w.nan() + ";");
  w.end();
}

void write_tanh(Writer& w) {
  const double big = w.f64 ? 22.0 : 10.0;
  w.begin("kiln_tanh", w.T() + " x");
  w.let("ax", w.fn("fabs") + "(x)");
  w.let("axc", "ax > " + w.c(big) + " ? " + w.c(big) + " : ax");
  w.let("e", "kiln_expm1" + w.sfx() + "(axc + axc)");
  w.let("t", "e / (e + " + w.c(2) + ")");
  if (w.f64) {
    w.line("return copysign(t, x);");
    w.end();
    return;
  }
  static const std::vector<double> series = {
      -0.3333333333333333,   0.13333333333333333,   -0.05396825396825397,   0.021869488536155203,
      -0.008863235529902197, 0.003592128036572481,  -0.0014558343870513183, 0.000590027440945586,
      -0.00023912911424355248, 9.691537956929451e-05};
  w.let("z", "ax * ax");
  w.horner("p", "z", series);
  w.let("small", "fmaf(ax * z, p, ax)");
  w.line("return copysignf(ax < " + w.c(0.55) + " ? small : t, x);");
  w.end();
}

std::string math_functions(bool f64) {
  Writer w{f64, {}};
  write_pow2(w);
  write_exp(w);
  write_expm1(w);
  write_log(w);
  write_sin_or_cos(w, false);
  write_sin_or_cos(w, true);
  write_tanh(w);
  return w.out;
}

// Integer ops wrap (two's complement through unsigned arithmetic); casts from
// floats saturate with NaN -> 0; maximum/minimum propagate NaN and order -0 < +0;
// the RNG is graph/random.h's.
const char* kFixedPart = R"(#define KILN_DF __device__ __forceinline__
KILN_DF int kiln_add(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
KILN_DF long long kiln_add(long long a, long long b) { return (long long)((unsigned long long)a + (unsigned long long)b); }
KILN_DF int kiln_sub(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
KILN_DF long long kiln_sub(long long a, long long b) { return (long long)((unsigned long long)a - (unsigned long long)b); }
KILN_DF int kiln_mul(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
KILN_DF long long kiln_mul(long long a, long long b) { return (long long)((unsigned long long)a * (unsigned long long)b); }
KILN_DF int kiln_neg(int a) { return (int)(0u - (unsigned)a); }
KILN_DF long long kiln_neg(long long a) { return (long long)(0ull - (unsigned long long)a); }
KILN_DF int kiln_abs(int a) { return a < 0 ? kiln_neg(a) : a; }
KILN_DF long long kiln_abs(long long a) { return a < 0 ? kiln_neg(a) : a; }
KILN_DF int kiln_max(int a, int b) { return a > b ? a : b; }
KILN_DF long long kiln_max(long long a, long long b) { return a > b ? a : b; }
KILN_DF int kiln_min(int a, int b) { return a < b ? a : b; }
KILN_DF long long kiln_min(long long a, long long b) { return a < b ? a : b; }
KILN_DF long long kiln_udiv(long long a, long long b) { return (long long)((unsigned long long)a / (unsigned long long)b); }
KILN_DF long long kiln_umod(long long a, long long b) { return (long long)((unsigned long long)a % (unsigned long long)b); }
// Four consecutive floats; one 128-bit access where the address is 16-byte aligned.
struct alignas(16) kiln_f4 { float x, y, z, w; };
KILN_DF kiln_f4 kiln_load4(const float* p) {
  if (((unsigned long long)p & 15) == 0) return *reinterpret_cast<const kiln_f4*>(p);
  return kiln_f4{p[0], p[1], p[2], p[3]};
}
KILN_DF void kiln_store4(float* p, kiln_f4 v) {
  if (((unsigned long long)p & 15) == 0) *reinterpret_cast<kiln_f4*>(p) = v;
  else { p[0] = v.x; p[1] = v.y; p[2] = v.z; p[3] = v.w; }
}
KILN_DF float kiln_max(float a, float b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __float_as_int(a) < 0 ? b : a;
  return a > b ? a : b;
}
KILN_DF double kiln_max(double a, double b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __double_as_longlong(a) < 0 ? b : a;
  return a > b ? a : b;
}
KILN_DF float kiln_min(float a, float b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __float_as_int(a) < 0 ? a : b;
  return a < b ? a : b;
}
KILN_DF double kiln_min(double a, double b) {
  if (a != a || b != b) return a + b;
  if (a == b) return __double_as_longlong(a) < 0 ? a : b;
  return a < b ? a : b;
}
KILN_DF int kiln_to_i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483648.0) return 2147483647;
  if (x <= -2147483649.0) return -2147483647 - 1;
  return (int)x;
}
KILN_DF long long kiln_to_i64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775808.0) return 9223372036854775807LL;
  if (x < -9223372036854775808.0) return -9223372036854775807LL - 1;
  return (long long)x;
}
template <class T> KILN_DF T kiln_ipow(T x, T e) {
  typedef unsigned long long U;
  const int w = (int)sizeof(T) * 8;
  U r = 1, base = (U)x;
  for (int bit = 0; bit + 1 < w; ++bit) {
    if ((e >> bit) & 1) r = r * base;
    base = base * base;
  }
  if (e >= 0) return (T)r;
  if (x == 1) return 1;
  if (x == -1) return (e & 1) ? -1 : 1;
  return 0;
}
KILN_DF unsigned long long kiln_random_bits(unsigned long long seed, long long counter) {
  unsigned long long z = seed * 0x9e3779b97f4a7c15ull + (unsigned long long)counter * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
KILN_DF float kiln_uniform_f32(unsigned long long seed, long long c) { return (float)(kiln_random_bits(seed, c) >> 40) * 0x1p-24f; }
KILN_DF double kiln_uniform_f64(unsigned long long seed, long long c) { return (double)(kiln_random_bits(seed, c) >> 11) * 0x1p-53; }
)";

/// Parts that use the math functions: sigmoid (in the element type, as the LLVM path:
/// one exp of -|x|, no overflow) and randn.
const char* kAfterMath = R"(KILN_DF float kiln_sigmoid_f32(float x) {
  const float e = kiln_exp_f32(-fabsf(x));
  const float num = x < 0.0f ? e : 1.0f;
  return num / (1.0f + e);
}
KILN_DF double kiln_sigmoid_f64(double x) {
  const double e = kiln_exp_f64(-fabs(x));
  const double num = x < 0.0 ? e : 1.0;
  return num / (1.0 + e);
}
KILN_DF float kiln_randn_f32(unsigned long long seed, long long c) {
  const float u1 = kiln_uniform_f32(seed, 2 * c), u2 = kiln_uniform_f32(seed, 2 * c + 1);
  const float radius = sqrtf(-2.0f * kiln_log_f32(1.0f - u1));
  return radius * kiln_cos_f32(0x1.921fb6p+2f * u2);
}
KILN_DF double kiln_randn_f64(unsigned long long seed, long long c) {
  const double u1 = kiln_uniform_f64(seed, 2 * c), u2 = kiln_uniform_f64(seed, 2 * c + 1);
  const double radius = sqrt(-2.0 * kiln_log_f64(1.0 - u1));
  return radius * kiln_cos_f64(0x1.921fb54442d18p+2 * u2);
}
)";

std::string build_prelude() {
  std::string s = "#ifndef KILN_CUDA_PRELUDE\n#define KILN_CUDA_PRELUDE\n";
  s += "// ---- kiln prelude: op semantics shared by every kernel (codegen/src/cuda_math.cpp) ----\n";
  s += kFixedPart;
  s += math_functions(false);
  s += math_functions(true);
  s += kAfterMath;
  s += "#endif // KILN_CUDA_PRELUDE\n";
  return s;
}

} // namespace

const std::string& cuda_prelude() {
  static const std::string text = build_prelude();
  return text;
}

} // namespace kiln::codegen

// The CUDA prelude (see cuda_math.h): the op semantics of llvm_emitter.cpp in fixed
// text, then kiln's math functions and random numbers, instantiated from math_body.h with
// CudaOps, whose values are C++ expressions: every operation of a body becomes one
// `const T tN = ...;` statement of a __device__ function, so each rounds on its own
// (NVRTC runs with --fmad=false, the CPU shim with -ffp-contract=off) and fma() is
// written exactly where the LLVM instantiation calls llvm.fma: the GPU and the CPU agree
// bitwise. test_cuda's CudaShimMath checks thousands of inputs per function.
#include "codegen/src/cuda_math.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/src/math_body.h"
#include "kiln/error.h"

namespace kiln::codegen {

namespace {

/// "(" s ")", built by appends: GCC 12 misreports -Wrestrict on `"(" + s + ")"`.
std::string parenthesized(const std::string& s) {
  std::string out("(");
  return out.append(s).append(")");
}

/// "(type)x", built by appends (as parenthesized()).
std::string cast_text(const char* type, const std::string& x) {
  std::string out("(");
  return out.append(type).append(")").append(x);
}

/// The C++ types of CudaOps's values.
enum class CType : uint8_t { F32, F64, I32, I64, Bool };

const char* c_type(CType t) {
  switch (t) {
  case CType::F32: return "float";
  case CType::F64: return "double";
  case CType::I32: return "int";
  case CType::I64: return "long long";
  case CType::Bool: return "bool";
  }
  return "?";
}

/// A C++ expression and its type: a literal, a parameter or a named temporary.
struct CExpr {
  std::string text;
  CType type;
};

/// The body being written: its statements and the next temporary's number.
struct CBody {
  std::string out;
  int next = 0;
};

/// MathOps over C++ expressions: each operation appends `const T tN = <op>;` to the
/// body and returns tN. Integers wrap (two's complement through unsigned arithmetic).
class CudaOps {
public:
  using V = CExpr;

  CudaOps(CBody& body, bool is_f64) : body_(&body), f64(is_f64) {}

private:
  CBody* body_;

  CType ft() const { return f64 ? CType::F64 : CType::F32; }
  CType it() const { return f64 ? CType::I64 : CType::I32; }
  /// The float function `base` of this type: fma -> fmaf for float.
  std::string fn(const char* base) const { return std::string(base) + (f64 ? "" : "f"); }
  V let(CType t, const std::string& value) {
    std::string name = "t";
    name += std::to_string(body_->next++);
    body_->out += std::string("  const ") + c_type(t) + " " + name + " = " + value + ";\n";
    return {name, t};
  }
  V call1(const char* base, const V& x) { return let(ft(), fn(base) + "(" + x.text + ")"); }
  V call2(const char* base, const V& x, const V& y) { return let(ft(), fn(base) + "(" + x.text + ", " + y.text + ")"); }
  V binary(CType t, const V& x, const char* op, const V& y) { return let(t, x.text + " " + op + " " + y.text); }
  static const char* unsigned_of(CType t) { return t == CType::I64 ? "unsigned long long" : "unsigned"; }
  /// x op y done in the unsigned type of x's width (wrapping), cast back; y is an
  /// operand of x's type, cast too, or a shift count, not.
  V wrapping(const V& x, const char* op, const std::string& y, bool shift = false) {
    const char* u = unsigned_of(x.type);
    const std::string rhs = shift ? y : cast_text(u, y);
    return let(x.type, cast_text(c_type(x.type), parenthesized(cast_text(u, x.text) + " " + op + " " + rhs)));
  }

public:
  bool f64; ///< computes in double (else float)

  CudaOps wide() const { return CudaOps(*body_, true); }
  V c(double v) const {
    if (std::isnan(v)) return {f64 ? "__longlong_as_double(0x7ff8000000000000LL)" : "__int_as_float(0x7fc00000)", ft()};
    if (std::isinf(v)) {
      const std::string inf = f64 ? "__longlong_as_double(0x7ff0000000000000LL)" : "__int_as_float(0x7f800000)";
      return {v < 0 ? parenthesized("-" + inf) : inf, ft()};
    }
    char buf[64]; // an exact hex literal of v rounded to the type
    if (f64) std::snprintf(buf, sizeof buf, "%a", v);
    else std::snprintf(buf, sizeof buf, "%af", static_cast<double>(static_cast<float>(v)));
    return {v < 0 ? parenthesized(buf) : std::string(buf), ft()};
  }
  V ci(int64_t v) const {
    if (!f64) return ci32(v);
    if (v >= INT32_MIN && v <= INT32_MAX) return {decimal(v, "LL"), CType::I64};
    return {"(long long)" + hex(static_cast<uint64_t>(v)) + "ULL", CType::I64};
  }
  V ci32(int64_t v) const { return {decimal(static_cast<int32_t>(v)), CType::I32}; }
  V add(V x, V y) { return binary(ft(), x, "+", y); }
  V sub(V x, V y) { return binary(ft(), x, "-", y); }
  V mul(V x, V y) { return binary(ft(), x, "*", y); }
  V div(V x, V y) { return binary(ft(), x, "/", y); }
  V fma(V x, V y, V z) { return let(ft(), fn("fma") + "(" + x.text + ", " + y.text + ", " + z.text + ")"); }
  V neg(V x) { return let(x.type, "-" + x.text); }
  V fabs(V x) { return call1("fabs", x); }
  V sqrt(V x) { return call1("sqrt", x); }
  V copysign(V x, V y) { return call2("copysign", x, y); }
  V rint(V x) { return call1("rint", x); }
  V floor(V x) { return call1("floor", x); }
  V fmin(V x, V y) { return call2("fmin", x, y); }
  V fmax(V x, V y) { return call2("fmax", x, y); }
  V lt(V x, V y) { return binary(CType::Bool, x, "<", y); }
  V gt(V x, V y) { return binary(CType::Bool, x, ">", y); }
  V eq(V x, V y) { return binary(CType::Bool, x, "==", y); }
  V is_nan(V x) { return binary(CType::Bool, x, "!=", x); }
  V nge(V x, V y) { return let(CType::Bool, "!(" + x.text + " >= " + y.text + ")"); }
  V sel(V c, V x, V y) { return let(x.type, c.text + " ? " + x.text + " : " + y.text); }
  V to_int(V x) { return let(it(), cast_text(c_type(it()), x.text)); }
  V to_i32(V x) { return let(CType::I32, cast_text("int", x.text)); }
  V to_float(V i) { return let(ft(), cast_text(c_type(ft()), i.text)); }
  V u64_to_float(V i) { return let(ft(), cast_text(c_type(ft()), cast_text("unsigned long long", i.text))); }
  V to_f64(V x) { return f64 ? x : let(CType::F64, cast_text("double", x.text)); }
  V from_f64(V x) { return f64 ? x : let(CType::F32, cast_text("float", x.text)); }
  V bits(V x) { return let(it(), (f64 ? "__double_as_longlong(" : "__float_as_int(") + x.text + ")"); }
  V from_bits(V i) { return let(ft(), (f64 ? "__longlong_as_double(" : "__int_as_float(") + i.text + ")"); }
  V iadd(V x, V y) { return wrapping(x, "+", y.text); }
  V isub(V x, V y) { return wrapping(x, "-", y.text); }
  V imul(V x, V y) { return wrapping(x, "*", y.text); }
  V iand(V x, V y) { return binary(x.type, x, "&", y); }
  V ior(V x, V y) { return binary(x.type, x, "|", y); }
  V ixor(V x, V y) { return binary(x.type, x, "^", y); }
  V ine(V x, V y) { return binary(CType::Bool, x, "!=", y); }
  V shl(V x, int k) { return wrapping(x, "<<", std::to_string(k), true); }
  V lshr(V x, int k) { return wrapping(x, ">>", std::to_string(k), true); }
  V ashr(V x, int k) { return binary(x.type, x, ">>", {std::to_string(k), x.type}); }
  V scale(V x, V n) { return math::scale_by_halves(*this, x, n); }
  V call(MathFn f, V x) { return let(ft(), std::string("kiln_") + math_fn_name(f) + suffix() + "(" + x.text + ")"); }

  std::string suffix() const { return f64 ? "_f64" : "_f32"; }
  /// v in decimal with `suffix`, in parentheses if negative.
  static std::string decimal(int64_t v, const char* suffix = "") {
    const std::string s = std::to_string(v).append(suffix);
    return v < 0 ? parenthesized(s) : s;
  }
  static std::string hex(uint64_t v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
    return buf;
  }
};
static_assert(MathOps<CudaOps>);

/// One __device__ function `kiln_<name>_<f32|f64>(params)` returning body(ops, params...).
template <class Body>
std::string device_function(bool f64, const std::string& name, const std::vector<CExpr>& params, Body body) {
  CBody b;
  CudaOps m(b, f64);
  const CExpr result = body(m);
  std::string sig;
  for (const CExpr& p : params) sig += (sig.empty() ? "" : ", ") + std::string(c_type(p.type)) + " " + p.text;
  return "KILN_DF " + std::string(c_type(f64 ? CType::F64 : CType::F32)) + " kiln_" + name + m.suffix() + "(" + sig +
         ") {\n" + b.out + "  return " + result.text + ";\n}\n";
}

/// One function of the prelude's second part: its name (kiln_exp_f32) and its text, inside an
/// include guard of its own, so that kernels sharing a translation unit (the CPU shim) may each
/// bring a different selection.
struct PreludeFunction {
  std::string name;
  std::string text;
  std::vector<size_t> callees = {}; ///< the prelude functions it calls, by index (all before it)
};

PreludeFunction guarded(std::string name, const std::string& text) {
  std::string guard = "KILN_CUDA_FN_" + name;
  std::string out = "#ifndef " + guard + "\n#define " + guard + "\n" + text + "#endif\n";
  return {std::move(name), std::move(out)};
}

/// The math functions of math_body.h, each for double and float (f32 erf calls f64 erf,
/// which calls f64 exp: so the functions come in kMathFns's order, double first), then the
/// two-operand ones (kMathFns2), then
/// rand/randn. Every function calls only functions before it (checked in functions_of()).
std::vector<PreludeFunction> math_functions() {
  std::vector<PreludeFunction> out;
  const char* suffix[2] = {"_f32", "_f64"};
  for (MathFn fn : kMathFns)
    for (bool f64 : {true, false}) {
      const CExpr x{"x", f64 ? CType::F64 : CType::F32};
      const std::string text = device_function(f64, math_fn_name(fn), {x}, [&](CudaOps& m) { return math::body(m, fn, x); });
      out.push_back(guarded(std::string("kiln_") + math_fn_name(fn) + suffix[f64], text));
    }
  for (MathFn2 fn : kMathFns2)
    for (bool f64 : {true, false}) {
      const CExpr a{"a", f64 ? CType::F64 : CType::F32}, b{"b", f64 ? CType::F64 : CType::F32};
      const std::string text =
          device_function(f64, math_fn_name(fn), {a, b}, [&](CudaOps& m) { return math::body(m, fn, a, b); });
      out.push_back(guarded(std::string("kiln_") + math_fn_name(fn) + suffix[f64], text));
    }
  const CExpr seed{"seed", CType::I64}, counter{"c", CType::I64};
  for (bool f64 : {false, true}) {
    out.push_back(guarded(std::string("kiln_uniform") + suffix[f64],
                          device_function(f64, "uniform", {seed, counter},
                                          [&](CudaOps& m) { return math::random_uniform(m, seed, counter); })));
    out.push_back(guarded(std::string("kiln_randn") + suffix[f64],
                          device_function(f64, "randn", {seed, counter},
                                          [&](CudaOps& m) { return math::random_normal(m, seed, counter); })));
  }
  return out;
}

/// The identifiers starting with "kiln_" that `code` mentions.
std::set<std::string, std::less<>> kiln_names_in(std::string_view code) {
  std::set<std::string, std::less<>> names;
  const auto is_ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = code.find("kiln_"); at != std::string_view::npos; at = code.find("kiln_", at + 1)) {
    if (at > 0 && is_ident(code[at - 1])) continue;
    size_t end = at;
    while (end < code.size() && is_ident(code[end])) ++end;
    names.emplace(code.substr(at, end - at));
  }
  return names;
}

/// math_functions() with their callees, built once, after checking that each calls only earlier
/// ones (so that a selection in this order compiles, and one backward pass finds everything a
/// selection calls).
const std::vector<PreludeFunction>& functions_of_prelude() {
  static const std::vector<PreludeFunction> fns = [] {
    std::vector<PreludeFunction> all = math_functions();
    std::map<std::string, size_t, std::less<>> index;
    for (size_t i = 0; i < all.size(); ++i) index.emplace(all[i].name, i);
    for (size_t i = 0; i < all.size(); ++i)
      for (const std::string& name : kiln_names_in(all[i].text)) {
        const auto callee = index.find(name);
        if (callee == index.end() || callee->second == i) continue; // not a prelude function, or itself
        KILN_ASSERT(callee->second < i,
                    "prelude function " + all[i].name + " calls " + name + ", which comes after it");
        all[i].callees.push_back(callee->second);
      }
    return all;
  }();
  return fns;
}

// Integer ops wrap (two's complement through unsigned arithmetic); casts from
// floats saturate with NaN -> 0; maximum/minimum propagate NaN and order -0 < +0.
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
// PyTorch's remainder: fmod, plus b where it is non-zero and its sign differs from b's.
KILN_DF float kiln_remainder(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
KILN_DF double kiln_remainder(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
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
)";

constexpr const char* kPreludeEnd = "// ---- end of kiln prelude ----\n";

/// The prelude with the math functions i of functions_of_prelude() for which used[i] (all of them
/// if `used` is empty).
std::string prelude_with(const std::vector<bool>& used) {
  std::string s = "#ifndef KILN_CUDA_PRELUDE\n#define KILN_CUDA_PRELUDE\n";
  s += "// ---- kiln prelude: op semantics shared by every kernel (codegen/src/cuda_math.cpp) ----\n";
  s += kFixedPart;
  s += "#endif // KILN_CUDA_PRELUDE\n";
  s += "// ---- kiln's math functions and random numbers (codegen/src/math_body.h) ----\n";
  const std::vector<PreludeFunction>& fns = functions_of_prelude();
  for (size_t i = 0; i < fns.size(); ++i)
    if (used.empty() || used[i]) s += fns[i].text;
  return s + kPreludeEnd;
}

} // namespace

const std::string& cuda_prelude() {
  static const std::string text = prelude_with({});
  return text;
}

std::string cuda_prelude_for(std::string_view code) {
  // Backwards: a function's callees come before it, so they are marked in time.
  const std::set<std::string, std::less<>> names = kiln_names_in(code);
  const std::vector<PreludeFunction>& fns = functions_of_prelude();
  std::vector<bool> used(fns.size());
  for (size_t i = fns.size(); i-- > 0;) {
    if (names.count(fns[i].name)) used[i] = true;
    if (used[i])
      for (size_t callee : fns[i].callees) used[callee] = true;
  }
  return prelude_with(used);
}

std::string_view cuda_prelude_end_marker() { return kPreludeEnd; }

} // namespace kiln::codegen

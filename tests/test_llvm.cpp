// The LLVM emitter and JIT: kernels built by hand with the kernel-IR builders,
// compiled, run over [0, N) in uneven chunks, compared with plain C++.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/llvm_jit.h"
#include "graph/random.h"

using namespace kiln;
using namespace kiln::codegen;
using graph::random_normal;
using graph::random_uniform;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

CpuKernelFn compile(Kernel& k) {
  finalize(k);
  return LlvmJit::instance().compile(k);
}

/// Runs f over [0, n) in uneven chunks 1, 2, 3, 5, 8, ... (chunking must not matter).
void run_chunked(CpuKernelFn f, int64_t n, const std::vector<void*>& bufs, const std::vector<int64_t>& params) {
  int64_t begin = 0, a = 1, b = 2;
  while (begin < n) {
    const int64_t end = std::min(n, begin + a);
    f(begin, end, bufs.data(), params.data());
    begin = end;
    std::swap(a, b);
    b += a;
  }
}

/// One input column of an elementwise kernel.
struct Col {
  DType dtype;
  const void* data;
};

/// out[i] = o(ins[0][i], ...) for i < n (Cast when o is Cast), run in chunks.
template <class Out> std::vector<Out> elementwise(ScalarOp o, DType out, const std::vector<Col>& ins, int64_t n) {
  Kernel k;
  std::vector<ExprRef> args;
  std::vector<void*> bufs;
  for (size_t i = 0; i < ins.size(); ++i) {
    k.buffers.push_back({ins[i].dtype});
    args.push_back(load(static_cast<int>(i), ins[i].dtype, loop_var(0)));
    bufs.push_back(const_cast<void*>(ins[i].data));
  }
  k.buffers.push_back({out, true});
  k.num_params = 1;
  k.domain = {param(0)};
  ExprRef v = o == ScalarOp::Cast ? cast(args[0], out) : op(o, out, args);
  k.stores.push_back({static_cast<int>(ins.size()), loop_var(0), v});
  std::vector<Out> res(std::max<int64_t>(n, 64));
  bufs.push_back(res.data());
  run_chunked(compile(k), n, bufs, {n});
  res.resize(n);
  return res;
}

template <class T> bool same(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return a == b && std::signbit(a) == std::signbit(b);
  } else {
    return a == b;
  }
}

template <class T> std::vector<T> specials() {
  using L = std::numeric_limits<T>;
  return {0,       -T(0),       1,         -1,         T(0.5),     T(-2.5),  100,      -100,  T(1e30), T(-1e30),
          L::infinity(), -L::infinity(), L::quiet_NaN(), L::denorm_min(), -L::denorm_min(), L::min(), L::max(),
          L::lowest(), T(3.75), T(-0.125)};
}

// ---------------------------------------------------------------------------------
// ulp error against a long double reference

template <class T> long double ulp_at(long double ref) {
  using L = std::numeric_limits<T>;
  int e = ref == 0 ? L::min_exponent - 1 : std::ilogb(std::fabs(ref));
  e = std::max(e, L::min_exponent - 1);
  return std::ldexp(1.0L, e - (L::digits - 1));
}

/// |got - ref| in ulps of T at ref; NaN/inf must match exactly (else +inf); zeros keep the sign.
template <class T> double ulp_error(T got, long double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : kInf;
  if (std::isnan(got)) return kInf;
  const T r = static_cast<T>(ref);
  if (std::isinf(r) || std::isinf(got)) return got == r ? 0 : kInf;
  if (ref == 0 && got == 0 && std::signbit(got) != std::signbit(ref)) return kInf;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - ref) / ulp_at<T>(ref));
}

struct Range {
  double lo, hi;
  int count;
  bool log_scale = false; // |x| log-uniform in [lo, hi] with a random sign
};

template <class T> std::vector<T> sample(const std::vector<Range>& ranges, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> xs = specials<T>();
  for (const Range& r : ranges) {
    for (int i = 0; i < r.count; ++i) {
      if (!r.log_scale) {
        xs.push_back(static_cast<T>(std::uniform_real_distribution<double>(r.lo, r.hi)(rng)));
      } else {
        const double m = std::exp(std::uniform_real_distribution<double>(std::log(r.lo), std::log(r.hi))(rng));
        xs.push_back(static_cast<T>(rng() & 1 ? m : -m));
      }
    }
  }
  return xs;
}

/// Positive floats with uniformly random bit patterns (every binade, subnormals included).
template <class T> std::vector<T> positive_bit_patterns(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> xs;
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const U max_bits = sizeof(T) == 4 ? U(0x7f7fffff) : U(0x7fefffffffffffffULL);
  for (int i = 0; i < count; ++i) {
    U u = static_cast<U>(rng() % max_bits) + 1;
    T x;
    std::memcpy(&x, &u, sizeof x);
    xs.push_back(x);
  }
  return xs;
}

template <class T> constexpr DType fdt() { return sizeof(T) == 4 ? DType::Float32 : DType::Float64; }

/// Max ulp error of the kernel op o over xs against ref; prints the worst point.
/// (Points with finite |x| > max_abs are outside the documented range and skipped.)
template <class T> double max_ulp(ScalarOp o, const std::vector<T>& xs, long double (*ref)(long double),
                                  const char* name, double max_abs = kInf) {
  const std::vector<T> got = elementwise<T>(o, fdt<T>(), {{fdt<T>(), xs.data()}}, xs.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isfinite(xs[i]) && std::fabs(xs[i]) > max_abs) continue;
    const double e = ulp_error<T>(got[i], ref(xs[i]));
    if (e > worst) worst = e, at = i;
  }
  std::printf("[ ulp      ] %-8s %s: max %.3f ulp at x=%.9Lg (got %.17Lg, want %.17Lg) over %zu points\n", name,
              sizeof(T) == 4 ? "f32" : "f64", worst, (long double)xs[at], (long double)got[at], ref(xs[at]),
              xs.size());
  return worst;
}

long double ref_exp(long double x) { return std::exp(x); }
long double ref_log(long double x) { return std::log(x); }
long double ref_expm1(long double x) { return std::expm1(x); }
long double ref_log1p(long double x) { return std::log1p(x); }
long double ref_sin(long double x) { return std::sin(x); }
long double ref_cos(long double x) { return std::cos(x); }
long double ref_tanh(long double x) { return std::tanh(x); }
long double ref_sigmoid(long double x) { return 1.0L / (1.0L + std::exp(-x)); }
long double ref_erf(long double x) { return std::erf(x); }
long double ref_tan(long double x) { return std::tan(x); }
long double ref_atan(long double x) { return std::atan(x); }
long double ref_asin(long double x) { return std::asin(x); }
long double ref_acos(long double x) { return std::acos(x); }
long double ref_sinh(long double x) { return std::sinh(x); }
long double ref_cosh(long double x) { return std::cosh(x); }
long double ref_asinh(long double x) { return std::asinh(x); }
long double ref_acosh(long double x) { return std::acosh(x); }
long double ref_atanh(long double x) { return std::atanh(x); }
long double ref_log2(long double x) { return std::log2(x); }
long double ref_log10(long double x) { return std::log10(x); }
long double ref_exp2(long double x) { return std::exp2(x); }

/// The unary math functions added with atan (ScalarOp, long double reference).
struct UnaryRef {
  ScalarOp op;
  long double (*ref)(long double);
};
const UnaryRef kMoreMath[] = {{ScalarOp::Tan, ref_tan},     {ScalarOp::Atan, ref_atan},   {ScalarOp::Asin, ref_asin},
                              {ScalarOp::Acos, ref_acos},   {ScalarOp::Sinh, ref_sinh},   {ScalarOp::Cosh, ref_cosh},
                              {ScalarOp::Asinh, ref_asinh}, {ScalarOp::Acosh, ref_acosh}, {ScalarOp::Atanh, ref_atanh},
                              {ScalarOp::Log2, ref_log2},   {ScalarOp::Log10, ref_log10}, {ScalarOp::Exp2, ref_exp2}};

/// Max ulp error of atan2 over the pairs (ys[i], xs[i]) against long double; prints the worst point.
template <class T> double max_ulp_atan2(const std::vector<T>& ys, const std::vector<T>& xs) {
  const std::vector<T> got =
      elementwise<T>(ScalarOp::Atan2, fdt<T>(), {{fdt<T>(), ys.data()}, {fdt<T>(), xs.data()}}, xs.size());
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = ulp_error<T>(got[i], std::atan2(static_cast<long double>(ys[i]), static_cast<long double>(xs[i])));
    if (e > worst) worst = e, at = i;
  }
  std::printf("[ ulp      ] atan2    %s: max %.3f ulp at (%.9Lg, %.9Lg) over %zu points\n",
              sizeof(T) == 4 ? "f32" : "f64", worst, (long double)ys[at], (long double)xs[at], xs.size());
  return worst;
}

} // namespace

// ---------------------------------------------------------------------------------
// elementwise basics

TEST(LLVM, AddF32SizesAndChunks) {
  for (int64_t n : {0, 1, 7, 16, 1000, 1027}) {
    std::vector<float> a(std::max<int64_t>(n, 16)), b(a.size());
    for (int64_t i = 0; i < n; ++i) a[i] = 0.5f * i - 3, b[i] = 1.0f / (i + 1);
    const std::vector<float> got = elementwise<float>(ScalarOp::Add, kFloat32, {{kFloat32, a.data()}, {kFloat32, b.data()}}, n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << "n=" << n << " i=" << i;
  }
}

TEST(LLVM, Broadcast2DWithStrideParams) {
  // out[i, j] = a[i*sa0 + j*sa1] * b[i*sb0 + j*sb1] - a[...]: a is [R, 1], b is [1, C].
  Kernel k;
  k.buffers = {{kFloat32}, {kFloat32}, {kFloat32, true}};
  k.num_params = 6;
  k.domain = {param(0), param(1)};
  auto off = [](int s0, int s1) { return iadd(imul(loop_var(0), param(s0)), imul(loop_var(1), param(s1))); };
  ExprRef a = load(0, kFloat32, off(2, 3)), b = load(1, kFloat32, off(4, 5));
  ExprRef v = op(ScalarOp::Sub, kFloat32, {op(ScalarOp::Mul, kFloat32, {a, b}), a});
  k.stores = {{2, iadd(imul(loop_var(0), param(1)), loop_var(1)), v}};
  CpuKernelFn f = compile(k);
  const int64_t R = 13, C = 37, N = R * C;
  std::vector<float> av(R), bv(C), whole(N), chunked(N);
  for (int i = 0; i < R; ++i) av[i] = 1.5f * i - 4;
  for (int j = 0; j < C; ++j) bv[j] = 0.25f * j + 1;
  const std::vector<int64_t> params{R, C, 1, 0, 0, 1};
  std::vector<void*> bufs{av.data(), bv.data(), whole.data()};
  f(0, N, bufs.data(), params.data());
  bufs[2] = chunked.data();
  for (int64_t begin = 0, step = 5; begin < N; begin += step, step = step * 3 % 41 + 1)
    f(begin, std::min(N, begin + step), bufs.data(), params.data());
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) ASSERT_EQ(whole[i * C + j], av[i] * bv[j] - av[i]) << i << "," << j;
  EXPECT_EQ(0, std::memcmp(whole.data(), chunked.data(), N * sizeof(float)));
}

TEST(LLVM, Rank3DomainDecomposition) {
  // out[i0, i1, i2] = i0 * 100 + i1 * 10 + i2 (cast from i64), chunks crossing rows and planes.
  Kernel k;
  k.buffers = {{kInt64, true}};
  k.num_params = 3;
  k.domain = {param(0), param(1), param(2)};
  ExprRef v = iadd(iadd(imul(loop_var(0), index_const(100)), imul(loop_var(1), index_const(10))), loop_var(2));
  ExprRef flat = iadd(imul(iadd(imul(loop_var(0), param(1)), loop_var(1)), param(2)), loop_var(2));
  k.stores = {{0, flat, v}};
  CpuKernelFn f = compile(k);
  const int64_t D0 = 3, D1 = 4, D2 = 7;
  std::vector<int64_t> out(D0 * D1 * D2, -1);
  std::vector<void*> bufs{out.data()};
  run_chunked(f, D0 * D1 * D2, bufs, {D0, D1, D2});
  for (int a = 0; a < D0; ++a)
    for (int b = 0; b < D1; ++b)
      for (int c = 0; c < D2; ++c) ASSERT_EQ(out[(a * D1 + b) * D2 + c], a * 100 + b * 10 + c);
}

TEST(LLVM, RankZeroDomain) {
  Kernel k;
  k.buffers = {{kFloat64}, {kFloat64, true}};
  k.reductions = {{ReduceOp::Sum, kFloat64, {index_const(5)}, load(0, kFloat64, reduce_var(0))}};
  k.stores = {{1, index_const(0), reduce_result(0, kFloat64)}};
  CpuKernelFn f = compile(k);
  std::vector<double> x{1, 2, 3, 4, 5, 0, 0, 0}, out(8);
  std::vector<void*> bufs{x.data(), out.data()};
  f(0, 1, bufs.data(), nullptr);
  EXPECT_EQ(out[0], 15);
}

// ---------------------------------------------------------------------------------
// unary and binary ops on floats

template <class T> void check_float_unary() {
  const DType t = fdt<T>();
  const std::vector<T> xs = specials<T>();
  const int64_t n = xs.size();
  auto run = [&](ScalarOp o) { return elementwise<T>(o, t, {{t, xs.data()}}, n); };
  struct Exact {
    ScalarOp op;
    T (*ref)(T);
  };
  const Exact exact[] = {
      {ScalarOp::Neg, [](T x) { return -x; }},
      {ScalarOp::Abs, [](T x) { return std::fabs(x); }},
      {ScalarOp::Sqrt, [](T x) { return std::sqrt(x); }},
      {ScalarOp::Rsqrt, [](T x) { return T(1) / std::sqrt(x); }},
      {ScalarOp::Reciprocal, [](T x) { return T(1) / x; }},
      {ScalarOp::Relu, [](T x) { return x < 0 ? T(0) : x; }},
      {ScalarOp::Trunc, [](T x) { return std::trunc(x); }},
  };
  for (const Exact& e : exact) {
    const std::vector<T> got = run(e.op);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(same(got[i], e.ref(xs[i]))) << op_name(e.op) << "(" << xs[i] << ") = " << got[i];
  }
  struct Approx {
    ScalarOp op;
    long double (*ref)(long double);
  };
  const Approx approx[] = {{ScalarOp::Exp, ref_exp},     {ScalarOp::Log, ref_log},     {ScalarOp::Sin, ref_sin},
                           {ScalarOp::Cos, ref_cos},     {ScalarOp::Tanh, ref_tanh},   {ScalarOp::Sigmoid, ref_sigmoid},
                           {ScalarOp::Erf, ref_erf},     {ScalarOp::Expm1, ref_expm1}, {ScalarOp::Log1p, ref_log1p}};
  std::vector<Approx> all(std::begin(approx), std::end(approx));
  for (const UnaryRef& u : kMoreMath) all.push_back({u.op, u.ref});
  for (const Approx& a : all) {
    const std::vector<T> got = run(a.op);
    for (int64_t i = 0; i < n; ++i) {
      // sin/cos of the huge specials are outside the documented range: only check the class.
      const bool trig = a.op == ScalarOp::Sin || a.op == ScalarOp::Cos || a.op == ScalarOp::Tan;
      if (trig && std::isfinite(xs[i]) && std::fabs(xs[i]) > 1e5) {
        EXPECT_TRUE(std::isfinite(got[i])) << op_name(a.op) << "(" << xs[i] << ")";
        continue;
      }
      EXPECT_LE(ulp_error<T>(got[i], a.ref(xs[i])), 4)
          << op_name(a.op) << "(" << xs[i] << ") = " << got[i] << " want " << (double)a.ref(xs[i]);
    }
  }
}

TEST(LLVM, FloatUnaryF32) { check_float_unary<float>(); }
TEST(LLVM, FloatUnaryF64) { check_float_unary<double>(); }

TEST(LLVM, MathSpecialValues) {
  auto one = [](ScalarOp o, double x) {
    double xs[1] = {x};
    return elementwise<double>(o, kFloat64, {{kFloat64, xs}}, 1)[0];
  };
  auto onef = [](ScalarOp o, float x) {
    float xs[1] = {x};
    return elementwise<float>(o, kFloat32, {{kFloat32, xs}}, 1)[0];
  };
  EXPECT_EQ(one(ScalarOp::Log, 0.0), -kInf);
  EXPECT_EQ(one(ScalarOp::Log, -0.0), -kInf);
  EXPECT_TRUE(std::isnan(one(ScalarOp::Log, -1e-300)));
  EXPECT_TRUE(std::isnan(one(ScalarOp::Log, -kInf)));
  EXPECT_EQ(one(ScalarOp::Log, kInf), kInf);
  EXPECT_EQ(one(ScalarOp::Exp, 709.78), std::exp(709.78));
  EXPECT_EQ(one(ScalarOp::Exp, 709.8), kInf);
  EXPECT_EQ(one(ScalarOp::Exp, -746.0), 0.0);
  EXPECT_EQ(one(ScalarOp::Exp, -744.0), std::exp(-744.0)); // deep subnormal
  EXPECT_EQ(one(ScalarOp::Exp, -kInf), 0.0);
  EXPECT_EQ(onef(ScalarOp::Exp, 89.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(onef(ScalarOp::Exp, -104.0f), 0.0f);
  EXPECT_EQ(onef(ScalarOp::Exp, -103.0f), std::exp(-103.0f));
  EXPECT_EQ(onef(ScalarOp::Log, std::numeric_limits<float>::denorm_min()), std::log(std::numeric_limits<float>::denorm_min()));
  EXPECT_EQ(one(ScalarOp::Tanh, 1e300), 1.0);
  EXPECT_EQ(one(ScalarOp::Tanh, -kInf), -1.0);
  EXPECT_TRUE(std::signbit(one(ScalarOp::Tanh, -0.0)));
  EXPECT_TRUE(std::signbit(one(ScalarOp::Sin, -0.0)));
  EXPECT_TRUE(std::isnan(one(ScalarOp::Sin, kInf)));
  EXPECT_TRUE(std::isnan(one(ScalarOp::Cos, -kInf)));
  EXPECT_EQ(one(ScalarOp::Sigmoid, -kInf), 0.0);
  EXPECT_EQ(one(ScalarOp::Sigmoid, kInf), 1.0);
  EXPECT_EQ(onef(ScalarOp::Sigmoid, -200.0f), 0.0f);
  EXPECT_EQ(one(ScalarOp::Erf, kInf), 1.0);
  EXPECT_EQ(one(ScalarOp::Erf, -kInf), -1.0);
  EXPECT_EQ(one(ScalarOp::Erf, 6.5), 1.0);
  EXPECT_EQ(onef(ScalarOp::Erf, -4.0f), -1.0f);
  EXPECT_TRUE(std::signbit(one(ScalarOp::Erf, -0.0)));
  EXPECT_EQ(one(ScalarOp::Erf, 1e-310), std::erf(1e-310)); // subnormal: erf(x) = 2x/sqrt(pi), rounded once
  EXPECT_EQ(one(ScalarOp::Expm1, 709.78), std::expm1(709.78));
  EXPECT_EQ(one(ScalarOp::Expm1, 709.8), kInf);
  EXPECT_EQ(one(ScalarOp::Expm1, kInf), kInf);
  EXPECT_EQ(one(ScalarOp::Expm1, -kInf), -1.0);
  EXPECT_EQ(one(ScalarOp::Expm1, -50.0), -1.0);
  EXPECT_TRUE(std::signbit(one(ScalarOp::Expm1, -0.0)));
  EXPECT_EQ(one(ScalarOp::Expm1, 1e-310), 1e-310); // subnormal: expm1(x) = x
  EXPECT_EQ(onef(ScalarOp::Expm1, 88.7f), std::expm1(88.7f)); // beyond 2^127: the exp path
  EXPECT_EQ(onef(ScalarOp::Expm1, 88.8f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(onef(ScalarOp::Expm1, -0.0f)));
  EXPECT_EQ(one(ScalarOp::Log1p, -1.0), -kInf);
  EXPECT_TRUE(std::isnan(one(ScalarOp::Log1p, -1.5)));
  EXPECT_TRUE(std::isnan(one(ScalarOp::Log1p, -kInf)));
  EXPECT_EQ(one(ScalarOp::Log1p, kInf), kInf);
  EXPECT_EQ(one(ScalarOp::Log1p, 1e-310), 1e-310);
  EXPECT_EQ(one(ScalarOp::Log1p, std::numeric_limits<double>::max()), std::log1p(std::numeric_limits<double>::max()));
  EXPECT_TRUE(std::signbit(one(ScalarOp::Log1p, -0.0)));
  EXPECT_EQ(onef(ScalarOp::Log1p, -1.0f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(onef(ScalarOp::Log1p, std::numeric_limits<float>::max()), std::log1p(std::numeric_limits<float>::max()));
  EXPECT_TRUE(std::signbit(onef(ScalarOp::Log1p, -0.0f)));
  for (ScalarOp o : {ScalarOp::Exp, ScalarOp::Log, ScalarOp::Sin, ScalarOp::Cos, ScalarOp::Tanh, ScalarOp::Sigmoid, ScalarOp::Erf,
                   ScalarOp::Relu, ScalarOp::Expm1, ScalarOp::Log1p}) {
    EXPECT_TRUE(std::isnan(one(o, kNaN))) << op_name(o);
    EXPECT_TRUE(std::isnan(onef(o, NAN))) << op_name(o);
  }
}

template <class T> void check_float_binary() {
  const DType t = fdt<T>();
  const std::vector<T> s = specials<T>();
  std::vector<T> xs, ys;
  for (T x : s)
    for (T y : s) xs.push_back(x), ys.push_back(y);
  const int64_t n = xs.size();
  const std::vector<Col> in{{t, xs.data()}, {t, ys.data()}};
  struct Arith {
    ScalarOp op;
    T (*ref)(T, T);
  };
  const Arith arith[] = {
      {ScalarOp::Add, [](T x, T y) { return x + y; }},
      {ScalarOp::Sub, [](T x, T y) { return x - y; }},
      {ScalarOp::Mul, [](T x, T y) { return x * y; }},
      {ScalarOp::Div, [](T x, T y) { return x / y; }},
      {ScalarOp::Maximum, [](T x, T y) { return x != x || y != y ? T(NAN) : x > y ? x : y == x && !std::signbit(x) ? x : y; }},
      {ScalarOp::Minimum, [](T x, T y) { return x != x || y != y ? T(NAN) : x < y ? x : y == x && std::signbit(x) ? x : y; }},
  };
  for (const Arith& a : arith) {
    const std::vector<T> got = elementwise<T>(a.op, t, in, n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(same(got[i], a.ref(xs[i], ys[i])))
          << op_name(a.op) << "(" << xs[i] << ", " << ys[i] << ") = " << got[i];
  }
  struct Cmp {
    ScalarOp op;
    bool (*ref)(T, T);
  };
  const Cmp cmps[] = {
      {ScalarOp::Eq, [](T x, T y) { return x == y; }}, {ScalarOp::Ne, [](T x, T y) { return x != y; }},
      {ScalarOp::Lt, [](T x, T y) { return x < y; }},  {ScalarOp::Le, [](T x, T y) { return x <= y; }},
      {ScalarOp::Gt, [](T x, T y) { return x > y; }},  {ScalarOp::Ge, [](T x, T y) { return x >= y; }},
      {ScalarOp::LogicalAnd, [](T x, T y) { return x != 0 && y != 0; }},
      {ScalarOp::LogicalOr, [](T x, T y) { return x != 0 || y != 0; }},
  };
  for (const Cmp& c : cmps) {
    const std::vector<uint8_t> got = elementwise<uint8_t>(c.op, kBool, in, n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(got[i], c.ref(xs[i], ys[i])) << op_name(c.op) << "(" << xs[i] << ", " << ys[i] << ")";
  }
}

TEST(LLVM, FloatBinaryF32) { check_float_binary<float>(); }
TEST(LLVM, FloatBinaryF64) { check_float_binary<double>(); }

template <class T> void check_pow() {
  const DType t = fdt<T>();
  const T vals[] = {0, -T(0), 1, -1, 2, -2, T(0.5), T(-0.5), 3, -3, T(2.5), T(-2.5), INFINITY, -INFINITY, NAN, T(1e-3), 40};
  std::vector<T> xs, ys;
  for (T x : vals)
    for (T y : vals) xs.push_back(x), ys.push_back(y);
  const std::vector<T> got = elementwise<T>(ScalarOp::Pow, t, {{t, xs.data()}, {t, ys.data()}}, xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const T want = std::pow(xs[i], ys[i]);
    if (std::isfinite(want) && want != 0)
      EXPECT_LE(ulp_error<T>(got[i], std::pow((long double)xs[i], (long double)ys[i])), 1) << xs[i] << "^" << ys[i];
    else
      EXPECT_TRUE(same(got[i], want)) << xs[i] << "^" << ys[i] << " = " << got[i] << " want " << want;
  }
  // the PyTorch/C cases named in the spec
  EXPECT_EQ(std::pow(T(0), T(0)), 1);
}

TEST(LLVM, PowFloat) {
  check_pow<float>();
  check_pow<double>();
}

// ---------------------------------------------------------------------------------
// integers and bools

template <class T> void check_int_ops() {
  using U = std::make_unsigned_t<T>;
  const DType t = sizeof(T) == 4 ? kInt32 : kInt64;
  using L = std::numeric_limits<T>;
  const T vals[] = {0, 1, -1, 2, -2, 3, 7, -7, 31, 62, 12345, -999, L::max(), L::min(), L::max() - 1, L::min() + 1};
  std::vector<T> xs, ys;
  for (T x : vals)
    for (T y : vals) xs.push_back(x), ys.push_back(y);
  const int64_t n = xs.size();
  const std::vector<Col> in{{t, xs.data()}, {t, ys.data()}};
  auto ipow = [](T x, T e) -> T {
    if (e < 0) return x == 1 ? 1 : x == -1 ? (e & 1 ? -1 : 1) : 0;
    U r = 1, b = static_cast<U>(x);
    for (U k = static_cast<U>(e); k; k >>= 1, b *= b)
      if (k & 1) r *= b;
    return static_cast<T>(r);
  };
  struct Bin {
    ScalarOp op;
    std::function<T(T, T)> ref;
  };
  const Bin bins[] = {
      {ScalarOp::Add, [](T x, T y) { return T(U(x) + U(y)); }},
      {ScalarOp::Sub, [](T x, T y) { return T(U(x) - U(y)); }},
      {ScalarOp::Mul, [](T x, T y) { return T(U(x) * U(y)); }},
      {ScalarOp::Maximum, [](T x, T y) { return std::max(x, y); }},
      {ScalarOp::Minimum, [](T x, T y) { return std::min(x, y); }},
      {ScalarOp::Pow, ipow},
  };
  for (const Bin& b : bins) {
    const std::vector<T> got = elementwise<T>(b.op, t, in, n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(got[i], b.ref(xs[i], ys[i])) << op_name(b.op) << "(" << xs[i] << ", " << ys[i] << ")";
  }
  const std::vector<uint8_t> lt = elementwise<uint8_t>(ScalarOp::Lt, kBool, in, n);
  const std::vector<uint8_t> ne = elementwise<uint8_t>(ScalarOp::Ne, kBool, in, n);
  const std::vector<uint8_t> land = elementwise<uint8_t>(ScalarOp::LogicalAnd, kBool, in, n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(lt[i], xs[i] < ys[i]);
    EXPECT_EQ(ne[i], xs[i] != ys[i]);
    EXPECT_EQ(land[i], xs[i] != 0 && ys[i] != 0);
  }
  const std::vector<T> neg = elementwise<T>(ScalarOp::Neg, t, {in[0]}, n);
  const std::vector<T> abs = elementwise<T>(ScalarOp::Abs, t, {in[0]}, n);
  const std::vector<T> relu = elementwise<T>(ScalarOp::Relu, t, {in[0]}, n);
  const std::vector<uint8_t> lnot = elementwise<uint8_t>(ScalarOp::LogicalNot, kBool, {in[0]}, n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(neg[i], T(U(0) - U(xs[i])));
    EXPECT_EQ(abs[i], xs[i] < 0 ? T(U(0) - U(xs[i])) : xs[i]); // abs(INT_MIN) == INT_MIN
    EXPECT_EQ(relu[i], std::max<T>(xs[i], 0));
    EXPECT_EQ(lnot[i], xs[i] == 0);
  }
}

TEST(LLVM, IntOpsI32) { check_int_ops<int32_t>(); }
TEST(LLVM, IntOpsI64) { check_int_ops<int64_t>(); }

TEST(LLVM, BoolOpsAndWhere) {
  std::vector<uint8_t> a{0, 0, 1, 1}, b{0, 1, 0, 1};
  const std::vector<Col> in{{kBool, a.data()}, {kBool, b.data()}};
  auto run = [&](ScalarOp o) { return elementwise<uint8_t>(o, kBool, in, 4); };
  EXPECT_EQ(run(ScalarOp::LogicalAnd), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(run(ScalarOp::LogicalOr), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(run(ScalarOp::Add), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(run(ScalarOp::Mul), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(run(ScalarOp::Maximum), (std::vector<uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(run(ScalarOp::Minimum), (std::vector<uint8_t>{0, 0, 0, 1}));
  EXPECT_EQ(run(ScalarOp::Lt), (std::vector<uint8_t>{0, 1, 0, 0}));
  EXPECT_EQ(run(ScalarOp::Ge), (std::vector<uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(run(ScalarOp::Eq), (std::vector<uint8_t>{1, 0, 0, 1}));
  EXPECT_EQ(elementwise<uint8_t>(ScalarOp::LogicalNot, kBool, {in[0]}, 4), (std::vector<uint8_t>{1, 1, 0, 0}));
  // where(cond, x, y) with f32 branches, and logical_not of floats (NaN is true)
  std::vector<float> x{1, 2, 3, 4}, y{-1, -2, -3, -4};
  EXPECT_EQ(elementwise<float>(ScalarOp::Where, kFloat32, {in[1], {kFloat32, x.data()}, {kFloat32, y.data()}}, 4),
            (std::vector<float>{-1, 2, -3, 4}));
  std::vector<float> f{0.f, -0.f, NAN, 2.f};
  EXPECT_EQ(elementwise<uint8_t>(ScalarOp::LogicalNot, kBool, {{kFloat32, f.data()}}, 4), (std::vector<uint8_t>{1, 1, 0, 0}));
}

// ---------------------------------------------------------------------------------
// casts

TEST(LLVM, Casts) {
  const float big = 1e10f;
  std::vector<float> f{2.9f, -2.9f, big, -big, NAN, INFINITY, -INFINITY, -0.0f, 0.5f, 2147483520.0f};
  const int64_t nf = f.size();
  EXPECT_EQ(elementwise<int32_t>(ScalarOp::Cast, kInt32, {{kFloat32, f.data()}}, nf),
            (std::vector<int32_t>{2, -2, INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MIN, 0, 0, 2147483520}));
  EXPECT_EQ(elementwise<int64_t>(ScalarOp::Cast, kInt64, {{kFloat32, f.data()}}, nf),
            (std::vector<int64_t>{2, -2, 10000000000LL, -10000000000LL, 0, INT64_MAX, INT64_MIN, 0, 0, 2147483520}));
  EXPECT_EQ(elementwise<uint8_t>(ScalarOp::Cast, kBool, {{kFloat32, f.data()}}, nf),
            (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 0, 1, 1}));
  std::vector<double> d{1e300, -1e300, 0.1, 3.4028235677973366e38, 1e-50, -7.5};
  const std::vector<float> df = elementwise<float>(ScalarOp::Cast, kFloat32, {{kFloat64, d.data()}}, d.size());
  for (size_t i = 0; i < d.size(); ++i) EXPECT_TRUE(same(df[i], static_cast<float>(d[i]))) << d[i];
  EXPECT_EQ(elementwise<int64_t>(ScalarOp::Cast, kInt64, {{kFloat64, d.data()}}, d.size()),
            (std::vector<int64_t>{INT64_MAX, INT64_MIN, 0, INT64_MAX, 0, -7}));
  std::vector<int64_t> i64{(1LL << 24) + 1, -((1LL << 24) + 1), INT64_MAX, (1LL << 32) + 5, -1, 0};
  const std::vector<float> i64f = elementwise<float>(ScalarOp::Cast, kFloat32, {{kInt64, i64.data()}}, i64.size());
  for (size_t i = 0; i < i64.size(); ++i) EXPECT_EQ(i64f[i], static_cast<float>(i64[i])) << i64[i];
  EXPECT_EQ(elementwise<int32_t>(ScalarOp::Cast, kInt32, {{kInt64, i64.data()}}, i64.size()),
            (std::vector<int32_t>{(1 << 24) + 1, -((1 << 24) + 1), -1, 5, -1, 0}));
  EXPECT_EQ(elementwise<uint8_t>(ScalarOp::Cast, kBool, {{kInt64, i64.data()}}, i64.size()),
            (std::vector<uint8_t>{1, 1, 1, 1, 1, 0}));
  std::vector<int32_t> i32{-5, INT32_MIN, 7};
  EXPECT_EQ(elementwise<int64_t>(ScalarOp::Cast, kInt64, {{kInt32, i32.data()}}, 3), (std::vector<int64_t>{-5, INT32_MIN, 7}));
  EXPECT_EQ(elementwise<double>(ScalarOp::Cast, kFloat64, {{kInt32, i32.data()}}, 3), (std::vector<double>{-5, INT32_MIN, 7}));
  std::vector<uint8_t> bools{0, 1, 1};
  EXPECT_EQ(elementwise<float>(ScalarOp::Cast, kFloat32, {{kBool, bools.data()}}, 3), (std::vector<float>{0, 1, 1}));
  EXPECT_EQ(elementwise<int64_t>(ScalarOp::Cast, kInt64, {{kBool, bools.data()}}, 3), (std::vector<int64_t>{0, 1, 1}));
  std::vector<float> small{1.5f, -0.f};
  const std::vector<double> fd = elementwise<double>(ScalarOp::Cast, kFloat64, {{kFloat32, small.data()}}, 2);
  EXPECT_TRUE(same(fd[0], 1.5) && same(fd[1], -0.0));
}

// ---------------------------------------------------------------------------------
// reductions and maps

namespace {

/// out[i] = op over r < C of x[i*C + r] (domain [R], extent param 1), run in chunks.
template <class T, class Out = T>
std::vector<Out> reduce_rows(ReduceOp o, DType t, const std::vector<T>& x, int64_t R, int64_t C) {
  Kernel k;
  const bool arg = o == ReduceOp::Argmax || o == ReduceOp::Argmin;
  const DType out = arg ? kInt64 : t;
  k.buffers = {{t}, {out, true}};
  k.num_params = 2;
  k.domain = {param(0)};
  k.reductions = {{o, t, {param(1)}, load(0, t, iadd(imul(loop_var(0), param(1)), reduce_var(0)))}};
  k.stores = {{1, loop_var(0), reduce_result(0, out)}};
  std::vector<T> in = x;
  in.resize(std::max<size_t>(in.size(), 64));
  std::vector<Out> res(std::max<int64_t>(R, 64));
  run_chunked(compile(k), R, {in.data(), res.data()}, {R, C});
  res.resize(R);
  return res;
}

} // namespace

TEST(LLVM, ReductionsF32WithNaNAndTies) {
  const int64_t C = 12;
  // rows: plain, ties of the max/min, NaN twice, all equal, -inf only, mixed +-0
  std::vector<std::vector<float>> rows = {
      {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8},
      {1, 9, -4, 9, 0, -4, 9, 2, 2, -4, 1, 0},
      {1, 2, NAN, 7, -1, NAN, 3, 3, 3, 3, 3, 3},
      {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2},
      {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
       -INFINITY, -INFINITY},
      {NAN, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},
  };
  std::vector<float> x;
  for (auto& r : rows) x.insert(x.end(), r.begin(), r.end());
  const int64_t R = rows.size();
  auto sum = reduce_rows<float>(ReduceOp::Sum, kFloat32, x, R, C);
  auto mx = reduce_rows<float>(ReduceOp::Max, kFloat32, x, R, C);
  auto mn = reduce_rows<float>(ReduceOp::Min, kFloat32, x, R, C);
  auto amx = reduce_rows<float, int64_t>(ReduceOp::Argmax, kFloat32, x, R, C);
  auto amn = reduce_rows<float, int64_t>(ReduceOp::Argmin, kFloat32, x, R, C);
  const std::vector<int64_t> want_amx{5, 1, 2, 0, 0, 0}, want_amn{1, 2, 2, 0, 0, 0};
  for (int64_t i = 0; i < R; ++i) {
    double s = 0;
    float m = -INFINITY, n = INFINITY;
    bool nan = false;
    for (float v : rows[i]) s += v, m = std::max(m, v), n = std::min(n, v), nan |= std::isnan(v);
    if (nan) {
      EXPECT_TRUE(std::isnan(sum[i]) && std::isnan(mx[i]) && std::isnan(mn[i])) << "row " << i;
    } else {
      EXPECT_TRUE(same(sum[i], static_cast<float>(s))) << "row " << i << ": " << sum[i] << " vs " << s;
      EXPECT_EQ(mx[i], m) << "row " << i;
      EXPECT_EQ(mn[i], n) << "row " << i;
    }
    EXPECT_EQ(amx[i], want_amx[i]) << "argmax row " << i;
    EXPECT_EQ(amn[i], want_amn[i]) << "argmin row " << i;
  }
}

TEST(LLVM, ReductionLongSumVectorizedIsAccurate) {
  const int64_t R = 3, C = 100003;
  std::vector<float> x(R * C);
  std::mt19937 rng(7);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  auto sum = reduce_rows<float>(ReduceOp::Sum, kFloat32, x, R, C);
  for (int64_t i = 0; i < R; ++i) {
    double s = 0;
    for (int64_t j = 0; j < C; ++j) s += x[i * C + j];
    EXPECT_NEAR(sum[i], s, 1e-5 * C * 0.05);
  }
}

TEST(LLVM, EmptyReductions) {
  std::vector<float> x(64, 1);
  EXPECT_EQ(reduce_rows<float>(ReduceOp::Sum, kFloat32, x, 3, 0), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(reduce_rows<float>(ReduceOp::Max, kFloat32, x, 3, 0)[0], -INFINITY);
  EXPECT_EQ(reduce_rows<float>(ReduceOp::Min, kFloat32, x, 3, 0)[0], INFINITY);
  EXPECT_EQ((reduce_rows<float, int64_t>(ReduceOp::Argmax, kFloat32, x, 3, 0)[0]), 0);
}

TEST(LLVM, IntReductions) {
  const int64_t C = 5;
  std::vector<int32_t> x{INT32_MAX, 1, 0, 0, 0, /**/ -3, 7, 7, -9, -9, /**/ INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
  EXPECT_EQ(reduce_rows<int32_t>(ReduceOp::Sum, kInt32, x, 3, C), (std::vector<int32_t>{INT32_MIN, -7, INT32_MIN}));
  EXPECT_EQ(reduce_rows<int32_t>(ReduceOp::Max, kInt32, x, 3, C), (std::vector<int32_t>{INT32_MAX, 7, INT32_MIN}));
  EXPECT_EQ(reduce_rows<int32_t>(ReduceOp::Min, kInt32, x, 3, C), (std::vector<int32_t>{0, -9, INT32_MIN}));
  EXPECT_EQ((reduce_rows<int32_t, int64_t>(ReduceOp::Argmax, kInt32, x, 3, C)), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ((reduce_rows<int32_t, int64_t>(ReduceOp::Argmin, kInt32, x, 3, C)), (std::vector<int64_t>{2, 3, 0}));
}

TEST(LLVM, TwoExtentReductionArgmaxIsFlat) {
  // domain [2], reduce over [3, 4] of x[i*12 + r0*4 + r1]; max at flat index 7 (first of two).
  Kernel k;
  k.buffers = {{kFloat64}, {kInt64, true}, {kFloat64, true}};
  k.domain = {index_const(2)};
  ExprRef v = load(0, kFloat64, iadd(iadd(imul(loop_var(0), index_const(12)), imul(reduce_var(0), index_const(4))), reduce_var(1)));
  k.reductions = {{ReduceOp::Argmax, kFloat64, {index_const(3), index_const(4)}, v},
                  {ReduceOp::Sum, kFloat64, {index_const(3), index_const(4)}, v}};
  k.stores = {{1, loop_var(0), reduce_result(0, kInt64)}, {2, loop_var(0), reduce_result(1, kFloat64)}};
  std::vector<double> x(24, 0);
  x[7] = 5, x[9] = 5, x[12 + 11] = 1;
  std::vector<int64_t> idx(8);
  std::vector<double> sum(8);
  run_chunked(compile(k), 2, {x.data(), idx.data(), sum.data()}, {0});
  EXPECT_EQ(idx[0], 7);
  EXPECT_EQ(idx[1], 11);
  EXPECT_EQ(sum[0], 10);
  EXPECT_EQ(sum[1], 1);
}

TEST(LLVM, SoftmaxRowMap) {
  // red0 = max_r x[i,r]; red1 = sum_r exp(x[i,r] - red0); map m: out[i,m] = exp(x[i,m] - red0) / red1
  Kernel k;
  k.buffers = {{kFloat32}, {kFloat32, true}};
  k.num_params = 2;
  k.domain = {param(0)};
  auto x_at = [](ExprRef col) { return load(0, kFloat32, iadd(imul(loop_var(0), param(1)), col)); };
  auto shifted_exp = [](ExprRef x) {
    return op(ScalarOp::Exp, kFloat32, {op(ScalarOp::Sub, kFloat32, {x, reduce_result(0, kFloat32)})});
  };
  k.reductions = {{ReduceOp::Max, kFloat32, {param(1)}, x_at(reduce_var(0))},
                  {ReduceOp::Sum, kFloat32, {param(1)}, shifted_exp(x_at(reduce_var(0)))}};
  k.map = {param(1)};
  k.stores = {{1, iadd(imul(loop_var(0), param(1)), map_var(0)),
               op(ScalarOp::Div, kFloat32, {shifted_exp(x_at(map_var(0))), reduce_result(1, kFloat32)})}};
  const int64_t R = 7, C = 45;
  std::vector<float> x(R * C), out(R * C);
  std::mt19937 rng(3);
  for (float& v : x) v = std::uniform_real_distribution<float>(-20, 20)(rng);
  run_chunked(compile(k), R, {x.data(), out.data()}, {R, C});
  for (int64_t i = 0; i < R; ++i) {
    double m = -kInf, s = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max<double>(m, x[i * C + j]);
    // x - max is rounded to f32 in the kernel: do the same here
    auto shifted = [&](int64_t j) { return std::exp(static_cast<double>(x[i * C + j] - static_cast<float>(m))); };
    for (int64_t j = 0; j < C; ++j) s += shifted(j);
    for (int64_t j = 0; j < C; ++j) {
      const double want = shifted(j) / s;
      EXPECT_NEAR(out[i * C + j], want, 2e-6 * want + 1e-30) << i << "," << j;
    }
  }
}

// The map's exp(x - max) is the sum's term again: the sum keeps each term in the output and the
// map reads it back (llvm_emitter.cpp, find_kept_terms), where the extents and strides agree at
// run time. Both paths against a kernel whose map computes the term anew (x * 1 - max: the same
// bits, another expression, so nothing is kept): bitwise equal.
TEST(LLVM, ARowMapReadsBackTheTermsItsSumKept) {
  // params: rows, the sum's row stride and extent, the map's row stride and extent
  auto softmax = [](bool anew) {
    Kernel k;
    k.buffers = {{kFloat32}, {kFloat32, true}};
    k.num_params = 5;
    k.domain = {param(0)};
    auto x_at = [](ExprRef stride, ExprRef col) { return load(0, kFloat32, iadd(imul(loop_var(0), stride), col)); };
    auto shifted_exp = [](ExprRef x) {
      return op(ScalarOp::Exp, kFloat32, {op(ScalarOp::Sub, kFloat32, {x, reduce_result(0, kFloat32)})});
    };
    ExprRef mapped = x_at(param(3), map_var(0));
    if (anew) mapped = op(ScalarOp::Mul, kFloat32, {mapped, constant(kFloat32, 1.0)});
    k.reductions = {{ReduceOp::Max, kFloat32, {param(2)}, x_at(param(1), reduce_var(0))},
                    {ReduceOp::Sum, kFloat32, {param(2)}, shifted_exp(x_at(param(1), reduce_var(0)))}};
    k.map = {param(4)};
    k.stores = {{1, iadd(imul(loop_var(0), param(4)), map_var(0)),
                 op(ScalarOp::Div, kFloat32, {shifted_exp(mapped), reduce_result(1, kFloat32)})}};
    k.form = KernelForm::Row; // as plan_form() makes it on the CPU
    return compile(k);
  };
  const auto kept = softmax(false), anew = softmax(true);
  const int64_t R = 9, C = 77;
  std::vector<float> x(R * C);
  std::mt19937 rng(5);
  for (float& v : x) v = std::uniform_real_distribution<float>(-30, 30)(rng);
  x[3] = -INFINITY; // a masked score: its exp is kept as 0
  // agreeing extents and strides (the kept path); a shorter map; another map stride (both: anew)
  for (const std::vector<int64_t>& p :
       {std::vector<int64_t>{R, C, C, C, C}, {R, C, C, C, C - 5}, {R, C, C, C - 1, C}, {R, C, C, C - 3, C - 3}}) {
    std::vector<float> got(R * C, -1), want(R * C, -2);
    run_chunked(kept, R, {x.data(), got.data()}, p);
    run_chunked(anew, R, {x.data(), want.data()}, p);
    const size_t n = static_cast<size_t>(R * p[4]);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << "map extent " << p[4] << ", stride " << p[3];
  }
}

TEST(LLVM, GuardedLoadsPad) {
  // out[j] = x[j - p] where p <= j < n + p, else 0: offsets outside x are never read.
  Kernel k;
  k.buffers = {{kFloat64}, {kFloat64, true}};
  k.num_params = 3; // n, p, out length
  k.domain = {param(2)};
  ExprRef j = loop_var(0);
  ExprRef guard = op(ScalarOp::LogicalAnd, kBool,
                     {op(ScalarOp::Ge, kBool, {j, param(1)}), op(ScalarOp::Lt, kBool, {j, iadd(param(0), param(1))})});
  k.stores = {{1, j, op(ScalarOp::Add, kFloat64, {load(0, kFloat64, isub(j, param(1)), guard), constant(kFloat64, 0.5)})}};
  const int64_t n = 10, p = 1000000; // unguarded, j - p would be far outside x
  std::vector<double> x(std::max<int64_t>(n, 8));
  for (int64_t i = 0; i < n; ++i) x[i] = i + 1;
  std::vector<double> out(n + 2 * p);
  run_chunked(compile(k), n + 2 * p, {x.data(), out.data()}, {n, p, n + 2 * p});
  for (int64_t i = 0; i < n + 2 * p; ++i) {
    const double want = (i >= p && i < n + p ? x[i - p] : 0) + 0.5;
    ASSERT_EQ(out[i], want) << i;
  }
}

// ---------------------------------------------------------------------------------
// random numbers

template <class T> void check_random() {
  const DType t = fdt<T>();
  const bool f64 = sizeof(T) == 8;
  const int64_t n = 4099, seed = -1234567;
  Kernel k;
  k.buffers = {{t, true}, {t, true}};
  k.num_params = 2; // the size, the seed (a parameter: one kernel serves every seed)
  k.domain = {param(0)};
  ExprRef c = iadd(loop_var(0), index_const(1000));
  k.stores = {{0, loop_var(0), random(RandomDist::Uniform, t, param(1), c)},
              {1, loop_var(0), random(RandomDist::Normal, t, param(1), c)}};
  std::vector<T> u(n), z(n);
  run_chunked(compile(k), n, {u.data(), z.data()}, {n, seed});
  for (int64_t i = 0; i < n; ++i) {
    const T want = static_cast<T>(random_uniform(seed, i + 1000, f64));
    ASSERT_EQ(u[i], want) << i; // bit-exact
    const double zn = random_normal(seed, i + 1000, f64);
    ASSERT_NEAR(z[i], zn, (f64 ? 1e-12 : 2e-5) * (1 + std::fabs(zn))) << i;
  }
}

TEST(LLVM, RandomMatchesReference) {
  check_random<float>();
  check_random<double>();
}

// ---------------------------------------------------------------------------------
// math accuracy: max ulp error over ~1e6 points per function and dtype

template <class T> void check_accuracy() {
  const bool f64 = sizeof(T) == 8;
  const double limit = f64 ? 4 : 2;
  const double e_lo = f64 ? -746 : -104, e_hi = f64 ? 710 : 89;
  auto xs_exp = sample<T>({{e_lo, e_hi, 600000}, {-1, 1, 200000}, {1e-30, 1, 200000, true}}, 1);
  EXPECT_LE(max_ulp<T>(ScalarOp::Exp, xs_exp, ref_exp, "exp"), limit);
  auto xs_log = positive_bit_patterns<T>(600000, 2);
  for (T x : sample<T>({{0.5, 2, 400000}}, 3)) xs_log.push_back(x);
  EXPECT_LE(max_ulp<T>(ScalarOp::Log, xs_log, ref_log, "log"), limit);
  auto xs_trig = sample<T>({{-10, 10, 400000}, {-1e4, 1e4, 300000}, {-1e5, 1e5, 200000}, {1e-30, 1, 100000, true}}, 4);
  EXPECT_LE(max_ulp<T>(ScalarOp::Sin, xs_trig, ref_sin, "sin", 1e5), limit);
  EXPECT_LE(max_ulp<T>(ScalarOp::Cos, xs_trig, ref_cos, "cos", 1e5), limit);
  auto xs_tanh = sample<T>({{-10, 10, 400000}, {-1, 1, 300000}, {-40, 40, 100000}, {1e-30, 1, 200000, true}}, 5);
  EXPECT_LE(max_ulp<T>(ScalarOp::Tanh, xs_tanh, ref_tanh, "tanh"), limit);
  auto xs_sig = sample<T>({{f64 ? -750.0 : -110.0, 40, 600000}, {-5, 5, 300000}, {1e-30, 1, 100000, true}}, 6);
  // sigmoid: one exp and two roundings in the element type; in f32 that reaches ~2.5 ulp
  EXPECT_LE(max_ulp<T>(ScalarOp::Sigmoid, xs_sig, ref_sigmoid, "sigmoid"), f64 ? limit : 3.0);
  // erf: within 1 ulp everywhere; dense where its pieces meet (0.75, 1, ..., 2) and into the tails
  auto xs_erf = sample<T>({{-7, 7, 300000}, {0.6, 2.2, 300000}, {-2.2, -0.6, 100000}, {2, 6.5, 100000},
                           {1e-300, 1, 200000, true}}, 7);
  // f32 (in f64, one series below 2 truncated at 2^-35 relative): within 0.5 + 2^-11 ulp
  EXPECT_LE(max_ulp<T>(ScalarOp::Erf, xs_erf, ref_erf, "erf"), f64 ? 1.0 : 0.5005);
  // expm1: the whole range, dense near 0 (where exp(x) - 1 would cancel) and where the exp path takes over
  auto xs_expm1 = sample<T>({{e_lo, e_hi, 400000}, {-1, 1, 200000}, {1e-300, 1, 200000, true},
                             {f64 ? 40.0 : 20.0, f64 ? 50.0 : 26.0, 100000}, {-45, 0, 100000}}, 8);
  // 2^n expm1(r) + (2^n - 1): expm1(r)'s rounding doubles where n = 1 (x near 0.4)
  EXPECT_LE(max_ulp<T>(ScalarOp::Expm1, xs_expm1, ref_expm1, "expm1"), f64 ? 2.0 : 1.5);
  // log1p: every positive binade, (-1, 1), tiny of both signs and the approach to -1
  auto xs_log1p = positive_bit_patterns<T>(400000, 9);
  for (T x : sample<T>({{-1, 1, 300000}, {1e-300, 1, 200000, true}, {-1, -0.999, 100000}}, 10)) xs_log1p.push_back(x);
  EXPECT_LE(max_ulp<T>(ScalarOp::Log1p, xs_log1p, ref_log1p, "log1p"), f64 ? 1.0 : 0.5005); // f32: in f64, rounded once
}

TEST(LLVM, MathAccuracyF32) { check_accuracy<float>(); }
TEST(LLVM, MathAccuracyF64) { check_accuracy<double>(); }

/// The functions added with atan, over their whole domains (subnormal inputs included), dense where
/// their pieces meet; f32 computes each in f64 and rounds once (within 0.5 + 2^-20 ulp).
template <class T> void check_accuracy_more() {
  const bool f64 = sizeof(T) == 8;
  auto lim = [&](double l64) { return f64 ? l64 : 0.5005; };
  const double big = f64 ? 711 : 90;
  auto xs_atan = sample<T>({{-3, 3, 300000}, {1e-300, 1e300, 400000, true}, {0.4, 2.5, 200000}}, 11);
  EXPECT_LE(max_ulp<T>(ScalarOp::Atan, xs_atan, ref_atan, "atan"), lim(1.0));
  auto xs_unit = sample<T>({{-1, 1, 400000}, {0.99, 1, 200000}, {-1, -0.99, 100000}, {1e-300, 1, 200000, true}}, 12);
  EXPECT_LE(max_ulp<T>(ScalarOp::Asin, xs_unit, ref_asin, "asin"), lim(1.0));
  EXPECT_LE(max_ulp<T>(ScalarOp::Acos, xs_unit, ref_acos, "acos"), lim(1.5));
  EXPECT_LE(max_ulp<T>(ScalarOp::Atanh, xs_unit, ref_atanh, "atanh"), lim(2.0));
  auto xs_hyp = sample<T>({{-big, big, 400000}, {-2, 2, 200000}, {20, 24, 100000}, {1e-300, 1, 200000, true}}, 13);
  EXPECT_LE(max_ulp<T>(ScalarOp::Sinh, xs_hyp, ref_sinh, "sinh"), lim(1.5));
  EXPECT_LE(max_ulp<T>(ScalarOp::Cosh, xs_hyp, ref_cosh, "cosh"), lim(1.5));
  auto xs_all = sample<T>({{-4, 4, 300000}, {1e-300, 1e300, 400000, true}}, 14);
  EXPECT_LE(max_ulp<T>(ScalarOp::Asinh, xs_all, ref_asinh, "asinh"), lim(2.0));
  auto xs_acosh = sample<T>({{1, 3, 400000}, {1, 1.01, 100000}, {1, 1e300, 300000, true}}, 15);
  EXPECT_LE(max_ulp<T>(ScalarOp::Acosh, xs_acosh, ref_acosh, "acosh"), lim(2.1)); // near 1: log1p's argument rounds

  auto xs_trig = sample<T>({{-10, 10, 400000}, {-1e4, 1e4, 300000}, {-1e5, 1e5, 200000}, {1e-30, 1, 100000, true}}, 16);
  EXPECT_LE(max_ulp<T>(ScalarOp::Tan, xs_trig, ref_tan, "tan", 1e5), lim(3.5)); // reduced r rounds twice
  auto xs_log = positive_bit_patterns<T>(600000, 17);
  for (T x : sample<T>({{0.5, 2, 400000}}, 18)) xs_log.push_back(x);
  EXPECT_LE(max_ulp<T>(ScalarOp::Log2, xs_log, ref_log2, "log2"), lim(1.0));
  EXPECT_LE(max_ulp<T>(ScalarOp::Log10, xs_log, ref_log10, "log10"), lim(1.0));
  auto xs_exp2 = sample<T>(
      {{f64 ? -1080.0 : -152.0, f64 ? 1025.0 : 129.0, 600000}, {-1, 1, 200000}, {1e-300, 1, 200000, true}}, 19);
  EXPECT_LE(max_ulp<T>(ScalarOp::Exp2, xs_exp2, ref_exp2, "exp2"), lim(1.5));
  auto ys = sample<T>({{-2, 2, 400000}, {1e-300, 1e300, 400000, true}, {-1e-3, 1e-3, 200000}}, 20);
  auto xs = sample<T>({{-2, 2, 400000}, {1e-300, 1e300, 400000, true}, {-1, 1, 200000}}, 21);
  std::reverse(xs.begin(), xs.end()); // the specials meet the other operand's random points
  EXPECT_LE(max_ulp_atan2<T>(ys, xs), lim(1.5));
}

TEST(LLVM, MathAccuracyMoreF32) { check_accuracy_more<float>(); }
TEST(LLVM, MathAccuracyMoreF64) { check_accuracy_more<double>(); }

/// a (op) b on two same-size vectors, one kernel.
template <class T> std::vector<T> binary(ScalarOp o, const std::vector<T>& a, const std::vector<T>& b) {
  return elementwise<T>(o, fdt<T>(), {{fdt<T>(), a.data()}, {fdt<T>(), b.data()}}, a.size());
}

/// atan2 on every pair of specials: C's (PyTorch's) exact values at the zeros, infinities and NaN, and
/// within 1 ulp (with C's sign) elsewhere.
template <class T> void check_atan2_specials() {
  using L = std::numeric_limits<T>;
  const std::vector<T> sp = {0,
                             -T(0),
                             1,
                             -1,
                             L::infinity(),
                             -L::infinity(),
                             L::quiet_NaN(),
                             L::denorm_min(),
                             -L::denorm_min(),
                             L::max(),
                             -L::max(),
                             T(2.5),
                             T(-1e-20)};
  std::vector<T> ys, xs;
  for (T y : sp)
    for (T x : sp) ys.push_back(y), xs.push_back(x);
  const std::vector<T> got = binary<T>(ScalarOp::Atan2, ys, xs);
  for (size_t i = 0; i < xs.size(); ++i) {
    const T want = std::atan2(ys[i], xs[i]); // C's: PyTorch's atan2
    if (std::isnan(want) || want == 0) {
      EXPECT_TRUE(same(got[i], want)) << "atan2(" << ys[i] << ", " << xs[i] << ") = " << got[i] << " want " << want;
      continue;
    }
    const long double ref = std::atan2(static_cast<long double>(ys[i]), static_cast<long double>(xs[i]));
    EXPECT_LE(ulp_error<T>(got[i], ref), 1) << "atan2(" << ys[i] << ", " << xs[i] << ") = " << got[i];
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << "atan2(" << ys[i] << ", " << xs[i] << ")";
  }
  EXPECT_EQ(got[2 * sp.size() + 4], T(0)); // atan2(1, inf) = +0
  EXPECT_EQ(got[1 * sp.size() + 1], -static_cast<T>(M_PI)); // atan2(-0, -0) = -pi
  EXPECT_EQ(got[4 * sp.size() + 5], static_cast<T>(0.75 * M_PI)); // atan2(inf, -inf) = 3pi/4
}

TEST(LLVM, Atan2SpecialValues) {
  check_atan2_specials<float>();
  check_atan2_specials<double>();
}

/// fmod bit for bit C's (exact, also for quotients far beyond 2^53), remainder PyTorch's rule on top.
template <class T> void check_fmod_remainder() {
  using L = std::numeric_limits<T>;
  std::vector<T> a = {5.5,     -5.5,          5.5,  -5.5,           0, -T(0),    3,
                      -3,      L::infinity(), 1,    L::quiet_NaN(), 1, L::max(), L::denorm_min(),
                      T(1e30), T(-7.25),      T(6), T(-6)};
  std::vector<T> b = {2,      2,
                      -2,     -2,
                      3,      3,
                      0,      L::infinity(),
                      2,      -L::infinity(),
                      1,      L::quiet_NaN(),
                      T(3.1), T(0.7),
                      T(3),   L::denorm_min(),
                      T(-3),  T(3)};
  std::mt19937_64 rng(22);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < 20000; ++i) {
    a.push_back(static_cast<T>(std::ldexp(u(rng), static_cast<int>(rng() % 200) - 100)));
    b.push_back(static_cast<T>(std::ldexp(u(rng), static_cast<int>(rng() % 200) - 100)));
  }
  const std::vector<T> f = binary<T>(ScalarOp::Fmod, a, b), r = binary<T>(ScalarOp::Remainder, a, b);
  for (size_t i = 0; i < a.size(); ++i) {
    const T m = std::fmod(a[i], b[i]);
    const T want_r = m != 0 && ((b[i] < 0) != (m < 0)) ? static_cast<T>(m + b[i]) : m;
    ASSERT_TRUE(same(f[i], m)) << "fmod(" << a[i] << ", " << b[i] << ") = " << f[i] << " want " << m;
    ASSERT_TRUE(same(r[i], want_r)) << "remainder(" << a[i] << ", " << b[i] << ") = " << r[i] << " want " << want_r;
  }
  EXPECT_EQ(r[1], T(0.5)); // remainder(-5.5, 2) = 0.5: the divisor's sign
  EXPECT_EQ(r[2], T(-0.5));
  EXPECT_TRUE(std::signbit(r[5])); // remainder(-0, 3) = -0, as PyTorch's
}

TEST(LLVM, FmodAndRemainderExact) {
  check_fmod_remainder<float>();
  check_fmod_remainder<double>();
}

/// Special values of the functions added with atan (PyTorch's and C's): signed zeros kept, the domain
/// edges, overflow only where the result overflows, exact powers of two.
TEST(LLVM, MoreMathSpecialValues) {
  auto one = [](ScalarOp o, double x) { return elementwise<double>(o, kFloat64, {{kFloat64, &x}}, 1)[0]; };
  auto onef = [](ScalarOp o, float x) { return elementwise<float>(o, kFloat32, {{kFloat32, &x}}, 1)[0]; };
  for (ScalarOp o : {ScalarOp::Tan, ScalarOp::Atan, ScalarOp::Asin, ScalarOp::Sinh, ScalarOp::Asinh, ScalarOp::Atanh,
                     ScalarOp::Trunc}) {
    EXPECT_TRUE(std::signbit(one(o, -0.0))) << op_name(o);
    EXPECT_TRUE(std::signbit(onef(o, -0.0f))) << op_name(o);
    EXPECT_EQ(one(o, 1e-310), o == ScalarOp::Trunc ? 0.0 : 1e-310) << op_name(o); // subnormal: f(x) = x
  }
  for (const UnaryRef& u : kMoreMath) {
    EXPECT_TRUE(std::isnan(one(u.op, kNaN))) << op_name(u.op);
    EXPECT_TRUE(std::isnan(onef(u.op, NAN))) << op_name(u.op);
  }
  EXPECT_EQ(one(ScalarOp::Atan, kInf), M_PI_2);
  EXPECT_EQ(onef(ScalarOp::Atan, -INFINITY), -static_cast<float>(M_PI_2));
  EXPECT_EQ(one(ScalarOp::Asin, 1.0), M_PI_2);
  EXPECT_EQ(one(ScalarOp::Acos, -1.0), M_PI);
  EXPECT_EQ(one(ScalarOp::Acos, 1.0), 0.0);
  for (ScalarOp o : {ScalarOp::Asin, ScalarOp::Acos, ScalarOp::Atanh}) {
    EXPECT_TRUE(std::isnan(one(o, 1.0000000000000002))) << op_name(o);
    EXPECT_TRUE(std::isnan(onef(o, -1.0000001f))) << op_name(o);
  }
  EXPECT_EQ(one(ScalarOp::Atanh, 1.0), kInf);
  EXPECT_EQ(onef(ScalarOp::Atanh, -1.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(one(ScalarOp::Acosh, 0.9999999999999999)));
  EXPECT_EQ(one(ScalarOp::Acosh, 1.0), 0.0);
  EXPECT_EQ(one(ScalarOp::Acosh, kInf), kInf);
  EXPECT_EQ(one(ScalarOp::Asinh, -kInf), -kInf);
  const double max = std::numeric_limits<double>::max();
  EXPECT_LE(ulp_error<double>(one(ScalarOp::Asinh, max), std::asinh(static_cast<long double>(max))), 1.5);
  EXPECT_LE(ulp_error<double>(one(ScalarOp::Sinh, 710.4), std::sinh(static_cast<long double>(710.4))),
            1.5); // e^710.4 overflows, sinh not
  EXPECT_EQ(one(ScalarOp::Sinh, -710.5), -kInf);
  EXPECT_LE(ulp_error<double>(one(ScalarOp::Cosh, -710.4), std::cosh(static_cast<long double>(710.4))), 1.5);
  EXPECT_EQ(one(ScalarOp::Cosh, -kInf), kInf);
  EXPECT_EQ(onef(ScalarOp::Sinh, 89.4f), static_cast<float>(std::sinh(static_cast<long double>(89.4f))));
  EXPECT_EQ(onef(ScalarOp::Cosh, 89.5f), INFINITY);
  EXPECT_EQ(one(ScalarOp::Cosh, 0.0), 1.0);
  EXPECT_TRUE(std::isnan(one(ScalarOp::Tan, kInf)));
  for (int k = -1074; k <= 1023; k += 7) { // exact at powers of two and at integers
    EXPECT_EQ(one(ScalarOp::Log2, std::ldexp(1.0, k)), k);
    EXPECT_EQ(one(ScalarOp::Exp2, k), std::ldexp(1.0, k));
  }
  for (int k = -149; k <= 127; ++k) {
    EXPECT_EQ(onef(ScalarOp::Log2, std::ldexp(1.0f, k)), k);
    EXPECT_EQ(onef(ScalarOp::Exp2, static_cast<float>(k)), std::ldexp(1.0f, k));
  }
  EXPECT_EQ(one(ScalarOp::Exp2, 1024.0), kInf);
  EXPECT_EQ(one(ScalarOp::Exp2, -1075.0), 0.0);
  EXPECT_EQ(one(ScalarOp::Exp2, -kInf), 0.0);
  EXPECT_EQ(onef(ScalarOp::Exp2, 128.0f), INFINITY);
  for (ScalarOp o : {ScalarOp::Log2, ScalarOp::Log10}) {
    EXPECT_EQ(one(o, 0.0), -kInf) << op_name(o);
    EXPECT_EQ(onef(o, -0.0f), -INFINITY) << op_name(o);
    EXPECT_TRUE(std::isnan(one(o, -1e-300))) << op_name(o);
    EXPECT_EQ(one(o, kInf), kInf) << op_name(o);
  }
  for (int k = 0; k <= 22; ++k) EXPECT_EQ(one(ScalarOp::Log10, std::pow(10.0, k)), k); // 10^k exact to 10^22
  EXPECT_EQ(one(ScalarOp::Trunc, -2.5), -2.0);
  EXPECT_EQ(onef(ScalarOp::Trunc, 1e30f), 1e30f);
  EXPECT_EQ(onef(ScalarOp::Trunc, -INFINITY), -INFINITY);
}

TEST(LLVM, MathVectorAndScalarLanesAgree) {
  // one call runs mostly vector code; chunks of 1, 2, 3, ... run mostly the scalar remainder
  std::vector<ScalarOp> ops = {ScalarOp::Exp,     ScalarOp::Log, ScalarOp::Sin,   ScalarOp::Cos,  ScalarOp::Tanh,
                               ScalarOp::Sigmoid, ScalarOp::Erf, ScalarOp::Expm1, ScalarOp::Log1p};
  for (const UnaryRef& u : kMoreMath) ops.push_back(u.op);
  for (ScalarOp o : ops) {
    Kernel k;
    k.buffers = {{kFloat32}, {kFloat32, true}};
    k.num_params = 1;
    k.domain = {param(0)};
    k.stores = {{1, loop_var(0), op(o, kFloat32, {load(0, kFloat32, loop_var(0))})}};
    CpuKernelFn f = compile(k);
    const std::vector<float> xs = sample<float>({{-50, 50, 3000}}, 9);
    const int64_t n = xs.size();
    std::vector<float> whole(n), chunked(n);
    std::vector<void*> bufs{const_cast<float*>(xs.data()), whole.data()};
    const int64_t params[1] = {n};
    f(0, n, bufs.data(), params);
    bufs[1] = chunked.data();
    run_chunked(f, n, bufs, {n});
    EXPECT_EQ(0, std::memcmp(whole.data(), chunked.data(), n * sizeof(float))) << op_name(o);
  }
}

TEST(LLVM, UlpMeasureCanFail) {
  // the measuring stick itself: one ulp off is 1, a NaN for a number is infinite
  EXPECT_EQ(ulp_error<float>(std::nextafter(1.0f, 2.0f), 1.0L), 1.0);
  EXPECT_EQ(ulp_error<double>(NAN, 1.0L), kInf);
  EXPECT_EQ(ulp_error<float>(-0.0f, 0.0L), kInf);
}

// ---------------------------------------------------------------------------------
// the JIT: vectorization, cache, threads, text dumps

namespace {

Kernel unary_f32_kernel(ScalarOp o) {
  Kernel k;
  k.buffers = {{kFloat32}, {kFloat32}, {kFloat32, true}};
  k.num_params = 1;
  k.domain = {param(0)};
  ExprRef a = load(0, kFloat32, loop_var(0)), b = load(1, kFloat32, loop_var(0));
  k.stores = {{2, loop_var(0), o == ScalarOp::Add ? op(o, kFloat32, {a, b}) : op(o, kFloat32, {a})}};
  finalize(k);
  return k;
}

bool has_wide_float_vectors(const std::string& ir) {
  return ir.find("<8 x float>") != std::string::npos || ir.find("<16 x float>") != std::string::npos;
}

} // namespace

TEST(LLVM, InnerLoopIsVectorized) {
  for (ScalarOp o : {ScalarOp::Add, ScalarOp::Exp, ScalarOp::Tanh, ScalarOp::Sin, ScalarOp::Log}) {
    const std::string ir = LlvmJit::instance().llvm_ir(unary_f32_kernel(o));
    EXPECT_TRUE(has_wide_float_vectors(ir)) << op_name(o) << ":\n" << ir.substr(0, 4000);
  }
  const std::string raw = LlvmJit::instance().llvm_ir(unary_f32_kernel(ScalarOp::Add), false);
  EXPECT_FALSE(has_wide_float_vectors(raw)); // the vectors come from the pipeline, not the emitter
}

// exp's final x * 2^n (MathOps::scale) is kiln.scalef, which the vectorizer widens and
// lower_scalef() then defines: nothing of it is left to link, and on an AVX-512 host the
// widened calls are vscalefps (bitwise ldexp's result, as scale_by_halves': the MathSpecialValues,
// accuracy and CUDA-shim tests compare the bits).
TEST(LLVM, ExpScalesByOneInstructionWhereTheTargetHasIt) {
  const std::string ir = LlvmJit::instance().llvm_ir(unary_f32_kernel(ScalarOp::Exp));
  EXPECT_EQ(ir.find("kiln.scalef"), std::string::npos) << ir.substr(0, 4000);
  if (host_cpu_target().vector_bits == 512)
    EXPECT_NE(ir.find("llvm.x86.avx512.mask.scalef.ps.512"), std::string::npos) << ir.substr(0, 4000);
  const std::string raw = LlvmJit::instance().llvm_ir(unary_f32_kernel(ScalarOp::Exp), false);
  EXPECT_NE(raw.find("kiln.scalef.f32"), std::string::npos); // before the pipeline: the declared call
}

// Rows shorter than a few vectors (a 14-point pooling or im2col row) run as masked vector
// iterations; rank-1 domains (long rows) keep the plain loop. Same values either way.
TEST(LLVM, ShortRowsRunAsMaskedVectors) {
  auto kernel = [](size_t rank) {
    Kernel k;
    k.buffers = {{kFloat32}, {kFloat32, true}};
    k.num_params = 2;
    ExprRef flat = rank == 1 ? loop_var(0) : iadd(imul(loop_var(0), param(1)), loop_var(1));
    k.domain = rank == 1 ? std::vector<ExprRef>{param(0)} : std::vector<ExprRef>{param(0), param(1)};
    ExprRef v = op(ScalarOp::Add, kFloat32, {op(ScalarOp::Mul, kFloat32, {load(0, kFloat32, flat), constant(kFloat32, 2)}), constant(kFloat32, 1)});
    k.stores = {{1, flat, v}};
    finalize(k);
    return k;
  };
  auto masked = [](const std::string& ir) { return ir.find("llvm.masked.store") != std::string::npos; };
  EXPECT_TRUE(masked(LlvmJit::instance().llvm_ir(kernel(2))));
  EXPECT_FALSE(masked(LlvmJit::instance().llvm_ir(kernel(1))));
  Kernel k2 = kernel(2);
  CpuKernelFn f = compile(k2);
  for (int64_t c : {1, 5, 14, 16, 17, 63, 64, 100}) {
    const int64_t r = 7, n = r * c;
    std::vector<float> a(n), out(n, -1);
    for (int64_t i = 0; i < n; ++i) a[i] = 0.25f * static_cast<float>(i) - 3;
    std::vector<void*> bufs{a.data(), out.data()};
    run_chunked(f, n, bufs, {r, c});
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] * 2 + 1) << "c=" << c << " i=" << i;
  }
}

TEST(LLVM, CacheAndThreads) {
  Kernel k = unary_f32_kernel(ScalarOp::Sqrt);
  LlvmJit& jit = LlvmJit::instance();
  const size_t before = jit.compiled_count();
  const CpuKernelSlot* slots[4] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      LlvmJit::Source source;
      slots[t] = &jit.kernel(k, source);
    });
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(slots[t], slots[0]);
  EXPECT_EQ(jit.compiled_count(), before + 1);
  EXPECT_GT(jit.last_compile_ms(), 0);
  LlvmJit::Source source;
  EXPECT_EQ(&jit.kernel(k, source), slots[0]); // the same slot (its code may have been swapped meanwhile)
  EXPECT_EQ(source, LlvmJit::Source::Memory);
  jit.wait_background(); // the optimized code is in once the background compile is done
  EXPECT_TRUE(slots[0]->optimized());
  EXPECT_EQ(jit.compile(k), slots[0]->get());
  std::printf("[ jit      ] %s; last compile %.2f ms\n", jit.target_description().substr(0, 60).c_str(),
              jit.last_compile_ms());
}

// KILN_PERF_MAP (LlvmJit::set_perf_map): a kernel linked while it is on, by either tier or from the
// disk cache, has a line "START SIZE NAME" in /tmp/perf-PID.map whose range holds the code that runs.
TEST(LLVM, PerfMapNamesTheKernelsItLinks) {
  // out = x * 0.123456789: a kernel no other test links, so this process links it here.
  Kernel k;
  k.buffers = {{DType::Float32}, {DType::Float32, true}};
  k.num_params = 1;
  k.domain = {param(0)};
  k.stores.push_back({1, loop_var(0), op(ScalarOp::Mul, DType::Float32,
                                          {load(0, DType::Float32, loop_var(0)), constant(DType::Float32, 0.123456789)})});
  finalize(k);
  LlvmJit& jit = LlvmJit::instance();
  jit.set_perf_map(true);
  LlvmJit::Source source;
  const CpuKernelSlot& slot = jit.kernel(k, source);
  const CpuKernelFn first = slot.get();
  jit.wait_background(); // the optimized code, where the quick tier ran first
  const CpuKernelFn last = slot.get();
  jit.set_perf_map(false);
  ASSERT_NE(source, LlvmJit::Source::Memory) << "the kernel was linked before this test";
  std::FILE* f = std::fopen(("/tmp/perf-" + std::to_string(::getpid()) + ".map").c_str(), "r");
  ASSERT_NE(f, nullptr) << "no perf map was written";
  auto covered = [&](CpuKernelFn fn) {
    const auto at = reinterpret_cast<uint64_t>(fn);
    std::rewind(f);
    unsigned long long start = 0, size = 0;
    char name[512];
    while (std::fscanf(f, "%llx %llx %511s", &start, &size, name) == 3)
      if (std::string(name).rfind(k.name, 0) == 0 && at >= start && at < start + size) return true;
    return false;
  };
  EXPECT_TRUE(covered(first)) << k.name << " at " << reinterpret_cast<void*>(first);
  EXPECT_TRUE(covered(last)) << k.name << " at " << reinterpret_cast<void*>(last);
  std::fclose(f);
  std::remove(("/tmp/perf-" + std::to_string(::getpid()) + ".map").c_str()); // a test leaves no file behind
  // the kernel still computes
  std::vector<float> x(64, 2.0f), out(64, 0.0f);
  std::vector<void*> bufs{x.data(), out.data()};
  run_chunked(last, 64, bufs, {64});
  EXPECT_EQ(out[63], 2.0f * 0.123456789f);
}

TEST(LLVM, AssemblyDump) {
  Kernel k = unary_f32_kernel(ScalarOp::Add);
  const std::string s = LlvmJit::instance().assembly(k);
  EXPECT_NE(s.find(k.name), std::string::npos);
  EXPECT_NE(s.find("vaddps"), std::string::npos);
}

namespace {

/// Sizes of a hand-built batched matmul: C[b, i, j] = sum_k A[b, i, k] * B[k, j].
struct MmSize {
  int64_t batch, m, k, n;
};

/// The matmul kernel as lowering builds it (B row-major: block_inner), stored as
/// relu(C) + j so that the store expression uses ReduceResult and a loop var.
/// Params: p0 batch, p1 m, p2 n, p3 k.
Kernel blocked_matmul_kernel(DType dt, bool block_inner) {
  Kernel k;
  k.buffers = {{dt}, {dt}, {dt, true}};
  k.num_params = 4;
  k.domain = {param(0), param(1), param(2)};
  ExprRef row = iadd(imul(loop_var(0), param(1)), loop_var(1));
  ExprRef a = load(0, dt, iadd(imul(row, param(3)), reduce_var(0)));
  ExprRef b = load(1, dt, iadd(imul(reduce_var(0), param(2)), loop_var(2)));
  Reduction red{ReduceOp::Sum, dt, {param(3)}, op(ScalarOp::Mul, dt, {a, b}), /*fma=*/true};
  red.block_inner = block_inner;
  k.reductions.push_back(red);
  ExprRef c = op(ScalarOp::Relu, dt, {reduce_result(0, dt)});
  k.stores.push_back({2, iadd(imul(row, param(2)), loop_var(2)), op(ScalarOp::Add, dt, {c, cast(loop_var(2), dt)})});
  return k;
}

/// The same, in plain C++: each point accumulates over k in order, one fma per step.
template <class T> std::vector<T> matmul_reference(const std::vector<T>& a, const std::vector<T>& b, MmSize s) {
  std::vector<T> c(s.batch * s.m * s.n);
  for (int64_t r = 0; r < s.batch * s.m; ++r)
    for (int64_t j = 0; j < s.n; ++j) {
      T acc = 0;
      for (int64_t q = 0; q < s.k; ++q) {
        if constexpr (std::is_floating_point_v<T>) acc = std::fma(a[r * s.k + q], b[q * s.n + j], acc);
        else acc = static_cast<T>(acc + a[r * s.k + q] * b[q * s.n + j]);
      }
      const T relu = acc < 0 ? T(0) : acc;
      c[r * s.n + j] = static_cast<T>(relu + static_cast<T>(j));
    }
  return c;
}

/// Runs the blocked kernel whole, in uneven chunks and in chunks that split rows
/// mid-block, and checks every result bitwise against the in-order reference.
template <class T> void check_blocked_matmul(DType dt) {
  Kernel kernel = blocked_matmul_kernel(dt, true);
  CpuKernelFn f = compile(kernel);
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0, 1);
  for (MmSize s : {MmSize{1, 1, 1, 1}, MmSize{1, 3, 7, 65}, MmSize{2, 5, 300, 127}, MmSize{3, 2, 0, 9},
                   MmSize{1, 4, 33, 1}, MmSize{2, 3, 17, 200}, MmSize{1, 2, 64, 63}}) {
    std::vector<T> a(s.batch * s.m * s.k), b(s.k * s.n);
    for (T& x : a) x = static_cast<T>(std::is_floating_point_v<T> ? normal(rng) : std::round(4 * normal(rng)));
    for (T& x : b) x = static_cast<T>(std::is_floating_point_v<T> ? normal(rng) : std::round(4 * normal(rng)));
    const std::vector<T> want = matmul_reference(a, b, s);
    const int64_t n = s.batch * s.m * s.n;
    const std::vector<int64_t> params{s.batch, s.m, s.n, s.k};
    for (int64_t chunk : {int64_t{0}, int64_t{-1}, int64_t{37}, int64_t{100}}) {
      std::vector<T> got(std::max<int64_t>(n, 1), T(-7));
      std::vector<void*> bufs{a.data(), b.data(), got.data()};
      if (chunk == 0) f(0, n, bufs.data(), params.data());
      else if (chunk < 0) run_chunked(f, n, bufs, params);
      else for (int64_t lo = 0; lo < n; lo += chunk) f(lo, std::min(n, lo + chunk), bufs.data(), params.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_TRUE(same(got[i], want[i])) << dtype_name(dt) << " " << s.batch << "x" << s.m << "x" << s.k << "x"
                                           << s.n << " chunk " << chunk << " at " << i << ": " << got[i]
                                           << " != " << want[i];
    }
  }
}

} // namespace

TEST(LLVM, BlockedMatmulBitwiseInOrderF32) { check_blocked_matmul<float>(DType::Float32); }
TEST(LLVM, BlockedMatmulBitwiseInOrderF64) { check_blocked_matmul<double>(DType::Float64); }
TEST(LLVM, BlockedMatmulInt32) { check_blocked_matmul<int32_t>(DType::Int32); }
TEST(LLVM, BlockedMatmulInt64) { check_blocked_matmul<int64_t>(DType::Int64); }

TEST(LLVM, BlockedMatmulIsVectorized) {
  Kernel k = blocked_matmul_kernel(DType::Float32, true);
  finalize(k);
  const std::string ir = LlvmJit::instance().llvm_ir(k);
  EXPECT_TRUE(has_wide_float_vectors(ir)) << ir.substr(0, 4000);
}

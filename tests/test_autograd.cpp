// Autograd: VJP rules checked against finite differences (gradcheck, f64) for
// every differentiable op, higher-order gradients, forward mode against reverse
// mode, custom functions, errors, backward() bookkeeping and graph size.

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <limits>
#include <random>
#include <unordered_set>
#include <utility>

#include "autograd/custom.h"
#include "graph/interpret.h"
#include "graph/node.h"
#include "graph/text.h"
#include "runtime/executor.h"

using namespace kiln;

namespace {

using Fn1 = std::function<Tensor(const Tensor&)>;
using Fn2 = std::function<Tensor(const Tensor&, const Tensor&)>;
using Vec = std::vector<Tensor>;

std::vector<double> uniform(int64_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(rng);
  return v;
}

int64_t count(const IntList& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/// f64 values uniform in [lo, hi).
Tensor U(IntList shape, uint64_t seed, double lo = -1, double hi = 1) {
  return from_vector<double>(uniform(count(shape), seed, lo, hi), shape);
}

/// f64 values with magnitude in [0.2, 1.5) and a random sign: away from kinks at 0.
Tensor away_from_zero(IntList shape, uint64_t seed) {
  std::vector<double> v = uniform(count(shape), seed, 0.2, 1.5), s = uniform(count(shape), seed + 1, -1, 1);
  for (size_t i = 0; i < v.size(); ++i) v[i] *= s[i] < 0 ? -1 : 1;
  return from_vector<double>(v, shape);
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

#define EXPECT_GRADCHECK(...)                                                                                     \
  do {                                                                                                            \
    const GradcheckResult r_ = gradcheck(__VA_ARGS__);                                                            \
    EXPECT_TRUE(r_.ok) << r_.report;                                                                              \
  } while (0)

// The message of the kiln::Error that `f` throws ("" when none).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

Tensor unary_of(const Fn1& f, const Vec& in) { return f(in[0]); }

} // namespace

// ================================================================ gradcheck of every op

TEST(GradcheckOps, Unary) {
  struct Case {
    const char* name;
    Fn1 f;
    bool positive; // domain (0.3, 2) instead of away from zero
  };
  const std::vector<Case> cases = {
      {"neg", [](const Tensor& x) { return -x; }, false},
      {"abs", [](const Tensor& x) { return abs(x); }, false},
      {"exp", [](const Tensor& x) { return exp(x); }, false},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"expm1", [](const Tensor& x) { return expm1(x); }, false},
      {"log1p", [](const Tensor& x) { return log1p(x); }, true},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, true},
      {"sin", [](const Tensor& x) { return sin(x); }, false},
      {"cos", [](const Tensor& x) { return cos(x); }, false},
      {"tanh", [](const Tensor& x) { return tanh(x); }, false},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, false},
      {"erf", [](const Tensor& x) { return erf(x); }, false},
      {"relu", [](const Tensor& x) { return relu(x); }, false},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, false},
      {"square", [](const Tensor& x) { return square(x); }, false},
      {"floor", [](const Tensor& x) { return floor(x * 3.0) * x; }, false}, // piecewise constant: gradient 0
      {"ceil", [](const Tensor& x) { return ceil(x * 3.0) * x; }, false},
      {"round", [](const Tensor& x) { return round(x * 3.0) * x; }, false},
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor x = c.positive ? U({2, 3}, seed++, 0.3, 2) : away_from_zero({2, 3}, seed++);
    EXPECT_GRADCHECK([&](const Vec& in) { return unary_of(c.f, in); }, {x});
  }
}

/// The functions added with atan, each on its domain: first order, then the gradient of a weighted
/// gradient (second order: their rules are graph too). x is in +-[0.2, 1.5].
const std::vector<std::pair<const char*, Fn1>> kMoreMath = {
    {"tan", [](const Tensor& x) { return tan(x); }},
    {"atan", [](const Tensor& x) { return atan(x * 2.0); }},
    {"asin", [](const Tensor& x) { return asin(x * 0.6); }},
    {"acos", [](const Tensor& x) { return acos(x * 0.6); }},
    {"sinh", [](const Tensor& x) { return sinh(x * 2.0); }},
    {"cosh", [](const Tensor& x) { return cosh(x * 2.0); }},
    {"asinh", [](const Tensor& x) { return asinh(x * 3.0); }},
    {"acosh", [](const Tensor& x) { return acosh(x * x + 1.1); }},
    {"atanh", [](const Tensor& x) { return atanh(x * 0.6); }},
    {"log2", [](const Tensor& x) { return log2(x * x); }},
    {"log10", [](const Tensor& x) { return log10(x * x); }},
    {"exp2", [](const Tensor& x) { return exp2(x * 3.0); }},
    {"trunc", [](const Tensor& x) { return trunc(x * 3.0) * x; }}, // piecewise constant: gradient 0
    {"frac", [](const Tensor& x) { return frac(x * 3.0) * x; }}, // gradient 1, as PyTorch's
};

TEST(GradcheckOps, MoreMathUnary) {
  uint64_t seed = 40;
  for (const auto& [name, f] : kMoreMath) {
    SCOPED_TRACE(name);
    EXPECT_GRADCHECK([&](const Vec& in) { return unary_of(f, in); }, {away_from_zero({2, 3}, seed++)});
    EXPECT_GRADCHECK(
        [&](const Vec& in) {
          const Tensor g = grad({(f(in[0]) * in[1]).sum()}, {in[0]}, {}, false, true)[0];
          return (g * g).sum();
        },
        {away_from_zero({5}, seed++), U({5}, seed++)});
  }
}

TEST(GradcheckOps, Atan2FmodRemainder) {
  const std::vector<std::pair<const char*, Fn2>> cases = {
      {"atan2", [](const Tensor& a, const Tensor& b) { return atan2(a, b); }},
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a * 3.0, b); }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a * 3.0, b); }}};
  uint64_t seed = 80;
  for (const auto& [name, f] : cases)
    for (const auto& [sa, sb] : std::vector<std::pair<IntList, IntList>>{{{2, 3}, {2, 3}}, {{2, 1}, {1, 3}}}) {
      SCOPED_TRACE(name);
      // all four quadrants for atan2; fmod and remainder away from their jumps (a * 3 / b near an integer)
      Tensor a = away_from_zero(sa, seed++), b = away_from_zero(sb, seed++);
      if (std::string(name) != "atan2") b = from_vector<double>(std::vector<double>(count(sb), -1.3), sb);
      if (std::string(name) != "atan2") a = U(sa, seed++, 0.05, 0.2) + 1.0;
      EXPECT_GRADCHECK([&](const Vec& in) { return f(in[0], in[1]); }, {a, b});
      if (std::string(name) == "atan2")
        EXPECT_GRADCHECK(
            [&](const Vec& in) {
              const Vec g = grad({f(in[0], in[1]).sum()}, {in[0], in[1]}, {}, false, true);
              return (g[0] * g[1]).sum();
            },
            {a, b});
    }
}

TEST(GradcheckOps, EdgeGradientsAsTorch) {
  // PyTorch 1.13: atan2's gradient at (0, 0) is NaN (0 * inf), (1, 0) gives (0, -1); asin' at 1 is inf,
  // acosh' at 1 inf; fmod's divisor gradient -trunc(a / b), remainder's -floor(a / b)
  Tensor y = from_vector<double>({0, 0, 1}).requires_grad_(), x = from_vector<double>({0, -0.0, 0}).requires_grad_();
  atan2(y, x).sum().backward();
  const std::vector<double> gy = values(y.grad()), gx = values(x.grad());
  EXPECT_TRUE(std::isnan(gy[0]) && std::isnan(gy[1]) && std::isnan(gx[0]));
  EXPECT_EQ(gy[2], 0);
  EXPECT_EQ(gx[2], -1);
  Tensor u = from_vector<double>({1, -1}).requires_grad_();
  asin(u).sum().backward();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(values(u.grad()), (std::vector<double>{inf, inf}));
  Tensor a = from_vector<double>({5.5, -5.5, 5.5}).requires_grad_();
  Tensor b = from_vector<double>({2, 2, -2}).requires_grad_();
  (fmod(a, b) + remainder(a, b) * 10.0).sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{11, 11, 11}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{-2 - 20, 2 + 30, 2 + 30}));
}

TEST(GradcheckOps, BinaryBroadcasting) {
  struct Case {
    const char* name;
    Fn2 f;
    double lo_a, hi_a, lo_b, hi_b;
  };
  const std::vector<Case> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, -1, 1, -1, 1},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, -1, 1, -1, 1},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, -1, 1, -1, 1},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, -1, 1, 0.5, 2},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, 0.5, 2, -1.5, 1.5},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -1, 1, -1, 1},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -1, 1, -1, 1},
  };
  const std::vector<std::pair<IntList, IntList>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1}, {1, 3}}, {{}, {2, 3}}, {{4, 1, 3}, {2, 1}}};
  uint64_t seed = 100;
  for (const Case& c : cases)
    for (const auto& [sa, sb] : shapes) {
      SCOPED_TRACE(std::string(c.name) + " " + Tensor(zeros(sa)).type_str() + " " + Tensor(zeros(sb)).type_str());
      Tensor a = U(sa, seed++, c.lo_a, c.hi_a), b = U(sb, seed++, c.lo_b, c.hi_b);
      EXPECT_GRADCHECK([&](const Vec& in) { return c.f(in[0], in[1]); }, {a, b});
    }
}

TEST(GradcheckOps, ScalarOperands) {
  Tensor x = U({3, 2}, 7, 0.5, 2);
  EXPECT_GRADCHECK([](const Vec& in) { return 2.5 * in[0] - in[0] / 3 + pow(in[0], 2.5) + 1.0 / in[0]; }, {x});
}

TEST(GradcheckOps, MaximumMinimumTiesSplitEvenly) {
  Tensor a = from_vector<double>({1, 2, 3}), b = from_vector<double>({1, 0, 5});
  EXPECT_GRADCHECK([](const Vec& in) { return maximum(in[0], in[1]); }, {a, b});
  EXPECT_GRADCHECK([](const Vec& in) { return minimum(in[0], in[1]); }, {a, b});
  a.requires_grad_();
  b.requires_grad_();
  auto g = grad({maximum(a, b).sum()}, {a, b});
  expect_near(values(g[0]), {0.5, 1, 0});
  expect_near(values(g[1]), {0.5, 0, 1});
}

TEST(GradcheckOps, PowAtZeroBase) {
  // d/da a^b = b a^(b-1) (0 where b == 0); d/db a^b = a^b log a, masked to 0 where a == 0 and b >= 0.
  Tensor a = from_vector<double>({0, 0, 1, 2}), b = from_vector<double>({2, 0, 3, 0.5});
  a.requires_grad_();
  b.requires_grad_();
  auto g = grad({pow(a, b).sum()}, {a, b});
  expect_near(values(g[0]), {0, 0, 3, 0.5 / std::sqrt(2.0)});
  expect_near(values(g[1]), {0, 0, 0, std::sqrt(2.0) * std::log(2.0)});
  // a constant exponent of 0: the base gets 0, not 0 * 0^-1 = nan
  auto g0 = grad({pow(a, 0.0).sum()}, {a});
  expect_near(values(g0[0]), {0, 0, 0, 0});
}

TEST(GradcheckOps, Where) {
  Tensor cond = from_vector<bool>({true, false}, {2, 1});
  Tensor a = U({2, 3}, 11), b = U({3}, 12);
  EXPECT_GRADCHECK([&](const Vec& in) { return where(cond, in[0], in[1]); }, {a, b});
  EXPECT_GRADCHECK([&](const Vec& in) { return where(in[0] > 0.0, in[0] * in[0], in[0] * 3); }, {away_from_zero({5}, 3)});
  // no gradient flows into the condition: x enters only through a comparison
  Tensor x = U({3}, 13);
  x.requires_grad_();
  EXPECT_NE(error_of([&] { grad({where(x > 0.0, a.sum({0}), b).sum()}, {x}); }), "");
}

TEST(GradcheckOps, Casts) {
  // f64 -> f32 -> f64 loses precision: a larger eps and tolerances that still catch a factor error
  Tensor x = U({2, 3}, 21);
  EXPECT_GRADCHECK([](const Vec& in) { return (in[0].to(kFloat32) * 3).to(kFloat64) * in[0]; }, {x}, 1e-3, 1e-3, 1e-3);
  // the gradient of a cast goes back to the source dtype
  Tensor y = from_vector<float>({1, 2, 3});
  y.requires_grad_();
  Tensor gy = grad({(y.to(kFloat64) * y.to(kFloat64)).sum()}, {y})[0];
  EXPECT_EQ(gy.dtype(), kFloat32);
  expect_near(values(gy), {2, 4, 6});
  // none through integer casts: only the direct factor contributes
  Tensor z = from_vector<double>({1.5, 2.5, -0.5});
  z.requires_grad_();
  Tensor gz = grad({(z.to(kInt64).to(kFloat64) * z).sum()}, {z})[0];
  expect_near(values(gz), {1, 2, 0});
}

TEST(GradcheckOps, Reductions) {
  Tensor x = U({2, 3, 4}, 31);
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].sum(); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].sum({1}); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].sum({0, 2}, true); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].mean({-1}); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].max({1}); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].min({0, 2}, true); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].max() * in[0].min(); }, {x});
}

TEST(GradcheckOps, MaxWithTies) {
  // a two-way tie gets half each: the mean of the one-sided derivatives, so finite differences agree
  Tensor x = from_vector<double>({1, 3, 3, 2, 0, -1}, {2, 3});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].max({1}); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return (-in[0]).min({1}); }, {x});
  x.requires_grad_();
  expect_near(values(grad({x.max({1}).sum()}, {x})[0]), {0, 0.5, 0.5, 1, 0, 0});
  // a three-way tie: a third each (deterministic even split)
  Tensor y = from_vector<double>({2, 2, 1, 2});
  y.requires_grad_();
  expect_near(values(grad({y.max()}, {y})[0]), {1.0 / 3, 1.0 / 3, 0, 1.0 / 3});
}

TEST(GradcheckOps, Movement) {
  Tensor x = U({2, 3, 4}, 41);
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].reshape({4, 6}) * U({4, 6}, 1); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].permute({2, 0, 1}) * U({4, 2, 3}, 2); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].transpose(0, 2) * U({4, 3, 2}, 3); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].unsqueeze(1).squeeze(1).flatten() * U({24}, 4); }, {x});
  Tensor e = U({2, 1, 3}, 42);
  EXPECT_GRADCHECK([](const Vec& in) { return in[0].expand({4, 2, 5, 3}) * U({4, 2, 5, 3}, 5); }, {e});
}

TEST(GradcheckOps, SlicesWithSteps) {
  Tensor x = U({7, 5}, 51);
  const std::vector<Fn1> slices = {
      [](const Tensor& t) { return t.slice(0, 1, 7, 2); },                  // rows 1,3,5: ends exactly
      [](const Tensor& t) { return t.slice(0, 0, 7, 3); },                  // rows 0,3,6: the tail is cut
      [](const Tensor& t) { return t.slice(1, 1, 4); },                     // plain range
      [](const Tensor& t) { return t.slice(0, 1, 6, 2).slice(1, 0, 5, 2); }, // strided in both dims
      [](const Tensor& t) { return t.slice(1, 2, 5, 4); },                  // one element
      [](const Tensor& t) { return t.slice(0, -3, 7, 2).slice(1, 4, 5); },  // negative start
  };
  uint64_t seed = 500;
  for (size_t i = 0; i < slices.size(); ++i) {
    SCOPED_TRACE("slice case " + std::to_string(i));
    Tensor w = U(slices[i](x).shape(), seed++);
    EXPECT_GRADCHECK([&](const Vec& in) { return slices[i](in[0]) * w; }, {x});
  }
  // the placement is exact: the gradient of sum(x[0::3]) is 1 at rows 0, 3, 6 only
  Tensor y = U({7}, 52);
  y.requires_grad_();
  expect_near(values(grad({y.slice(0, 0, 7, 3).sum()}, {y})[0]), {1, 0, 0, 1, 0, 0, 1});
  expect_near(values(grad({y.slice(0, 1, 7, 2).sum()}, {y})[0]), {0, 1, 0, 1, 0, 1, 0});
}

TEST(GradcheckOps, PadAndConcat) {
  Tensor x = U({2, 3}, 61);
  EXPECT_GRADCHECK([](const Vec& in) { return pad(in[0], {1, 2, 0, 1}) * U({3, 6}, 6); }, {x});
  EXPECT_GRADCHECK([](const Vec& in) { return pad(in[0], {2, 0}, 3.5) * U({2, 5}, 7); }, {x});
  Tensor a = U({2, 1}, 62), b = U({2, 3}, 63), c = U({2, 2}, 64);
  EXPECT_GRADCHECK([](const Vec& in) { return concat({in[0], in[1], in[2]}, 1) * U({2, 6}, 8); }, {a, b, c});
  EXPECT_GRADCHECK([](const Vec& in) { return concat({in[0], in[0] * 2}, 0) * U({4, 3}, 9); }, {b});
}

TEST(GradcheckOps, Matmul) {
  struct Case {
    IntList a, b;
  };
  const std::vector<Case> cases = {{{3, 4}, {4, 2}}, {{2, 3, 4}, {2, 4, 5}}, {{2, 1, 3, 4}, {5, 4, 2}},
                                   {{4}, {4, 3}},     {{3, 4}, {4}},          {{4}, {4}},
                                   {{2, 3, 4}, {4, 2}}};
  uint64_t seed = 700;
  for (const Case& c : cases) {
    SCOPED_TRACE(Tensor(zeros(c.a)).type_str() + " @ " + Tensor(zeros(c.b)).type_str());
    Tensor a = U(c.a, seed++), b = U(c.b, seed++);
    EXPECT_GRADCHECK([](const Vec& in) { return matmul(in[0], in[1]); }, {a, b});
  }
}

TEST(GradcheckOps, Composites) {
  Tensor x = U({3, 5}, 81, -3, 3);
  auto softmax = [](const Tensor& t) {
    Tensor e = exp(t - t.max({1}, true));
    return e / e.sum({1}, true);
  };
  EXPECT_GRADCHECK([&](const Vec& in) { return softmax(in[0]); }, {x});
  auto layernorm = [](const Tensor& t) {
    Tensor c = t - t.mean({1}, true);
    return c * rsqrt((c * c).mean({1}, true) + 1e-5);
  };
  EXPECT_GRADCHECK([&](const Vec& in) { return layernorm(in[0]); }, {x});
  // several paths into one node are summed
  EXPECT_GRADCHECK([](const Vec& in) { return in[0] * in[0] + sin(in[0]) * in[0] - exp(in[0]).sum({0}); }, {x});
}

TEST(Gradcheck, FailsAndReportsTheWorstElement) {
  // a custom op whose backward is wrong by a factor 2 on one element
  CustomFunction bad{"bad_square",
                     [](const Vec& in) -> Vec { return {in[0] * in[0]}; },
                     [](const Vec& in, const Vec&, const Vec& g) -> Vec {
                       Tensor scale = from_vector<double>({1, 1, 2, 1});
                       return {g[0] * 2 * in[0] * scale};
                     }};
  Tensor x = from_vector<double>({0.5, -1, 1.5, 2});
  const GradcheckResult r = gradcheck([&](const Vec& in) { return bad(in)[0]; }, {x});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.worst_input, 0u);
  EXPECT_EQ(r.worst_index, (IntList{2}));
  EXPECT_NEAR(r.analytic, 6, 1e-9);
  EXPECT_NEAR(r.numeric, 3, 1e-6);
  EXPECT_NE(r.report.find("FAILED"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("input 0 at [2]"), std::string::npos) << r.report;
  EXPECT_NE(r.report.find("analytic 6"), std::string::npos) << r.report;
  // and a correct op passes with the same inputs
  EXPECT_TRUE(gradcheck([](const Vec& in) { return in[0] * in[0]; }, {x}).ok);
}

TEST(Gradcheck, LargeOutputsUseRandomDirections) {
  Tensor a = U({6, 5}, 91), b = U({5, 4}, 92);
  const GradcheckResult r = gradcheck([](const Vec& in) { return tanh(matmul(in[0], in[1])); }, {a, b});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_NE(r.report.find("3 directions"), std::string::npos) << r.report;
}

// ================================================================ higher order

TEST(HigherOrder, DerivativesOfACubic) {
  Tensor x = from_vector<double>({-1, 0.5, 2});
  x.requires_grad_();
  Tensor g1 = grad({pow(x, 3.0).sum()}, {x}, {}, false, /*create_graph=*/true)[0];
  EXPECT_TRUE(g1.requires_grad());
  Tensor g2 = grad({g1.sum()}, {x}, {}, false, /*create_graph=*/true)[0];
  Tensor g3 = grad({g2.sum()}, {x})[0];
  EXPECT_FALSE(g3.requires_grad()); // create_graph = false: a plain value, as PyTorch
  expect_near(values(g1), {3, 0.75, 12});
  expect_near(values(g2), {-6, 3, 12});
  expect_near(values(g3), {6, 6, 6});
}

namespace {

// f(x) = sum(w3 * tanh(tanh(x W1 + b1) W2 + b2)) for a batch x [4, 3].
struct TanhMlp {
  Tensor w1 = U({3, 5}, 201), b1 = U({5}, 202), w2 = U({5, 2}, 203), b2 = U({2}, 204), w3 = U({4, 2}, 205);
  Tensor operator()(const Tensor& x) const { return (w3 * tanh(matmul(tanh(matmul(x, w1) + b1), w2) + b2)).sum(); }
};

} // namespace

TEST(HigherOrder, HessianVectorProductOfTanhMlp) {
  TanhMlp f;
  Tensor x0 = U({4, 3}, 206), v = U({4, 3}, 207);
  auto gradient_at = [&](const std::vector<double>& xs) {
    Tensor x = from_vector<double>(xs, {4, 3});
    x.requires_grad_();
    return values(grad({f(x)}, {x})[0]);
  };
  Tensor x = from_vector<double>(values(x0), {4, 3});
  x.requires_grad_();
  Tensor g = grad({f(x)}, {x}, {}, false, /*create_graph=*/true)[0];
  Tensor hv = grad({(g * v).sum()}, {x})[0];
  // central differences of the gradient along v
  const double h = 1e-5;
  std::vector<double> xp = values(x0), xm = values(x0), vv = values(v);
  for (size_t i = 0; i < xp.size(); ++i) {
    xp[i] += h * vv[i];
    xm[i] -= h * vv[i];
  }
  const std::vector<double> gp = gradient_at(xp), gm = gradient_at(xm), got = values(hv);
  double scale = 0;
  for (double e : got) scale = std::max(scale, std::abs(e));
  ASSERT_GT(scale, 1e-3); // a real, non-trivial curvature
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], (gp[i] - gm[i]) / (2 * h), 1e-7 * (1 + scale)) << i;
}

TEST(HigherOrder, GradOfGradPassesGradcheck) {
  // gradcheck of x -> d/dx sum(w * f(x)): second derivatives of every kind of op
  const std::vector<Fn1> fs = {
      [](const Tensor& x) { return tanh(x) * sigmoid(x) + exp(x) / (x * x + 1.0) + erf(x) * x; },
      [](const Tensor& x) { return sin(x) * cos(x * 2) + sqrt(x * x + 1.0) + rsqrt(x * x + 2.0); },
      [](const Tensor& x) { return pow(x * x + 0.5, x) + log(x * x + 1.0) + reciprocal(x + 3.0); },
      [](const Tensor& x) { return maximum(x, x * 0.5) * x + abs(x) * x + relu(x) * x; },
      [](const Tensor& x) { return matmul(x.reshape({2, 3}), x.reshape({3, 2})).reshape({4}).expand({2, 4}).flatten(); },
      [](const Tensor& x) { return concat({x.slice(0, 0, 6, 2) * x.slice(0, 1, 6, 2), pad(x, {1, 1}) * 0.5}, 0); },
      [](const Tensor& x) { return (x.reshape({2, 3}).max({1}) * x.reshape({2, 3}).sum({1})).sum() + x.permute({0}) * x; },
      [](const Tensor& x) { return where(x > 0.0, x * x * x, -x * x) + (x.to(kFloat32) * 2).to(kFloat64); },
  };
  Tensor x = away_from_zero({6}, 301);
  for (size_t i = 0; i < fs.size(); ++i) {
    SCOPED_TRACE("function " + std::to_string(i));
    Tensor w = U(fs[i](x).shape(), 400 + i);
    const double eps = i == 7 ? 1e-3 : 1e-6, tol = i == 7 ? 1e-3 : 1e-5;
    EXPECT_GRADCHECK([&](const Vec& in) { return grad({(fs[i](in[0]) * w).sum()}, {in[0]}, {}, false, true)[0]; }, {x}, eps, tol,
                     1e-3);
  }
}

// ================================================================ forward mode

namespace {

// <u, J v> by jvp and <J^T u, v> by grad, for fn at `xs` along `vs`.
std::pair<double, double> both_ways(const TensorFn& fn, const Vec& xs, const Vec& vs, uint64_t seed) {
  auto [ys, ts] = jvp(fn, xs, vs);
  Vec us;
  double ujv = 0;
  for (size_t j = 0; j < ys.size(); ++j) {
    us.push_back(U(ys[j].shape(), seed + j));
    ujv += dot(values(us[j]), values(ts[j]));
  }
  Vec leaves;
  for (const Tensor& x : xs) leaves.push_back(from_vector<double>(values(x), x.shape()).requires_grad_());
  const Vec gs = grad(fn(leaves), leaves, us, /*allow_unused=*/true);
  double jtuv = 0;
  for (size_t i = 0; i < xs.size(); ++i) jtuv += dot(values(gs[i]), values(vs[i]));
  return {ujv, jtuv};
}

} // namespace

TEST(ForwardMode, AgreesWithReverseModeForEveryOp) {
  struct Case {
    const char* name;
    TensorFn fn;
    Vec inputs;
  };
  const std::vector<Case> cases = {
      {"unary",
       [](const Vec& in) -> Vec {
         const Tensor& x = in[0];
         return {-abs(x) + exp(x) * sin(x) - cos(x) / (x * x + 1.0),
                 tanh(x) + sigmoid(x) * relu(x) + reciprocal(x) + erf(x) + (floor(x) + ceil(x) + round(x)) * x};
       },
       {away_from_zero({2, 3}, 501)}},
      {"positive domain",
       [](const Vec& in) -> Vec {
         const Tensor& x = in[0];
         return {log(x) + sqrt(x) + rsqrt(x) + pow(x, x) + pow(x, 1.5) + square(x) + log1p(x) * expm1(x),
                 log2(x) * log10(x) + acosh(x + 1.0) + exp2(x)};
       },
       {U({5}, 502, 0.3, 2)}},
      {"more math",
       [](const Vec& in) -> Vec {
         const Tensor& x = in[0];
         return {tan(x) + atan(x) * asin(x * 0.5) - acos(x * 0.5) + sinh(x) * cosh(x) + asinh(x) + atanh(x * 0.5),
                 atan2(x, in[1]) + fmod(x, in[1] + 3.0) * remainder(x, in[1] - 3.0) + frac(x * 5.0) + trunc(x * 5.0)};
       },
       {away_from_zero({2, 3}, 512), U({3}, 513)}},
      {"binary broadcasting",
       [](const Vec& in) -> Vec {
         const Tensor &a = in[0], &b = in[1];
         return {maximum(a, b) * minimum(a, b * 0.5) + a / (b * b + 1.0) - pow(a * a + 1.0, b) + (a - b)};
       },
       {U({2, 3}, 503), U({3}, 504)}},
      {"where",
       [](const Vec& in) -> Vec { return {where(in[0] > 0.0, in[0] * in[1], in[1])}; },
       {away_from_zero({2, 3}, 505), U({2, 1}, 506)}},
      {"reductions",
       [](const Vec& in) -> Vec {
         const Tensor& a = in[0];
         return {a.sum({1}), a.max({0}), a.min({0, 2}, true), a.mean()};
       },
       {U({2, 3, 4}, 507)}},
      {"movement",
       [](const Vec& in) -> Vec {
         const Tensor& a = in[0];
         return {a.reshape({4, 6}), a.permute({2, 0, 1}), a.slice(2, 0, 4, 3).expand({5, 2, 3, 2}),
                 pad(a, {1, 2}, 7.0), concat({a, a.slice(1, 1, 3) * 2}, 1), a.slice(1, 0, 3, 2)};
       },
       {U({2, 3, 4}, 508)}},
      {"ties (even split in both modes)",
       [](const Vec& in) -> Vec { return {in[0].max({1}), (-in[0]).min(), maximum(in[0], in[1])}; },
       {from_vector<double>({1, 3, 3, 2, 0, 2}, {2, 3}), from_vector<double>({1, 0, 3, 2, 1, 0}, {2, 3})}},
      {"matmul",
       [](const Vec& in) -> Vec { return {matmul(in[0], in[1]), matmul(in[1].sum({0}), in[2])}; },
       {U({2, 1, 3, 4}, 509), U({5, 4, 2}, 510), U({2, 3}, 511)}},
  };
  uint64_t seed = 600;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Vec vs;
    for (const Tensor& x : c.inputs) vs.push_back(U(x.shape(), seed++));
    auto [ujv, jtuv] = both_ways(c.fn, c.inputs, vs, seed++);
    EXPECT_NEAR(ujv, jtuv, 1e-10 * (1 + std::abs(ujv)));
    EXPECT_GT(std::abs(ujv), 1e-3);
  }
  // casts through f32: agreement to f32 precision
  auto [ujv, jtuv] = both_ways([](const Vec& in) -> Vec { return {(in[0].to(kFloat32) * 3).to(kFloat64) * in[0]}; },
                               {U({4}, 512)}, {U({4}, 513)}, 514);
  EXPECT_NEAR(ujv, jtuv, 1e-5 * (1 + std::abs(ujv)));
}

TEST(ForwardMode, AgreesWithFiniteDifferences) {
  TanhMlp f;
  Tensor x = U({4, 3}, 520), v = U({4, 3}, 521);
  auto [y, t] = jvp([&](const Tensor& in) { return f(in); }, x, v);
  const double h = 1e-6;
  std::vector<double> xp = values(x), xm = values(x), vv = values(v);
  for (size_t i = 0; i < xp.size(); ++i) {
    xp[i] += h * vv[i];
    xm[i] -= h * vv[i];
  }
  const double fd = (f(from_vector<double>(xp, {4, 3})).item<double>() - f(from_vector<double>(xm, {4, 3})).item<double>()) / (2 * h);
  EXPECT_NEAR(t.item<double>(), fd, 1e-7);
  EXPECT_NEAR(y.item<double>(), f(x).item<double>(), 1e-12);
}

TEST(ForwardMode, PrimalsHaveTheirOwnIdentity) {
  // the primal equals a constant used inside fn: only the primal moves
  Tensor one = ones({3}, kFloat64), v = from_vector<double>({1, 2, 3});
  auto [y, t] = jvp([](const Tensor& x) { return x * ones({3}, kFloat64) + ones({3}, kFloat64); }, one, v);
  expect_near(values(y), {2, 2, 2});
  expect_near(values(t), {1, 2, 3});
}

TEST(ForwardMode, TangentsAreDifferentiable) {
  Tensor x = from_vector<double>({1, -2, 0.5});
  x.requires_grad_();
  Tensor v = from_vector<double>({1, 1, 2});
  auto [y, t] = jvp([](const Tensor& a) { return pow(a, 3.0); }, x, v); // t = 3 x^2 v
  expect_near(values(t), {3, 12, 1.5});
  EXPECT_TRUE(t.requires_grad());
  expect_near(values(grad({t.sum()}, {x})[0]), {6, -12, 6}); // 6 x v
}

// Realizing inside the function (a value read, an eager realize() hint) must not cut the graph the
// tangents follow: a realized tensor that required no grad used to drop its history (become an input
// holding its data), and the tangent through it was lost, silently.
TEST(ForwardMode, RealizingInsideTheFunctionKeepsTheTangent) {
  const Tensor x = U({4}, 81), dx = U({4}, 82);
  auto f = [](const Tensor& v) {
    const Tensor s = (v * v).sum();
    realize({s});
    EXPECT_GT(s.item<double>(), 0.0); // a value read as well
    return v * s;
  };
  const auto [y, t] = jvp(f, x, dx);
  const auto xv = x.to_vector<double>(), dv = dx.to_vector<double>(), got = t.to_vector<double>();
  double s = 0, ds = 0;
  for (size_t i = 0; i < 4; ++i) s += xv[i] * xv[i], ds += 2 * xv[i] * dv[i];
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], dv[i] * s + xv[i] * ds, 1e-12) << i;
}

// The same for a custom rule differentiated again: its backward realizes its adjoint (as an eager hint
// does), and the second derivative through create_graph still sees how that adjoint depends on x.
TEST(Custom, ARuleThatRealizesIsDifferentiableAgain) {
  auto square = [](bool realizes) {
    return CustomFunction{"square", [](const Vec& in) { return Vec{in[0] * in[0]}; },
                          [realizes](const Vec& in, const Vec&, const Vec& g) {
                            if (realizes) realize({g[0]});
                            return Vec{g[0] * in[0] * 2.0};
                          }};
  };
  auto second = [&](bool realizes) {
    Tensor x = U({5}, 83);
    x.requires_grad_();
    const Tensor y = square(realizes)({x})[0];
    const Tensor g = grad({sin(y).sum()}, {x}, {}, false, /*create_graph=*/true)[0]; // cos(x^2) 2x
    return grad({g.sum()}, {x})[0].to_vector<double>();
  };
  const std::vector<double> want = second(false), got = second(true);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
}

TEST(ForwardMode, IntegerOutputsAndZeroTangents) {
  Tensor x = U({4}, 530), v = U({4}, 531);
  auto [ys, ts] = jvp([](const Vec& in) -> Vec { return {in[0].argmax(0), in[0] * 2, ones({2}, kFloat64)}; }, {x}, {v});
  EXPECT_FALSE(ts[0].defined());
  expect_near(values(ts[1]), {2 * values(v)[0], 2 * values(v)[1], 2 * values(v)[2], 2 * values(v)[3]});
  expect_near(values(ts[2]), {0, 0});
}

// ================================================================ custom functions

namespace {

// log(sum(exp(x))) over the last dim, computed stably; backward: g * softmax(x) = g * exp(x - y).
CustomFunction logsumexp_fn() {
  return {"logsumexp",
          [](const Vec& in) -> Vec {
            Tensor m = in[0].max({-1}, true);
            return {(m + log(exp(in[0] - m).sum({-1}, true))).squeeze(-1)};
          },
          [](const Vec& in, const Vec& out, const Vec& g) -> Vec {
            return {g[0].unsqueeze(-1) * exp(in[0] - out[0].unsqueeze(-1))};
          }};
}

// sign(x) forward; clipped straight-through backward: g where |x| <= 1, else 0.
CustomFunction sign_ste_fn() {
  return {"sign_ste",
          [](const Vec& in) -> Vec { return {where(in[0] >= 0.0, ones_like(in[0]), -ones_like(in[0]))}; },
          [](const Vec& in, const Vec&, const Vec& g) -> Vec { return {where(abs(in[0]) <= 1.0, g[0], zeros_like(g[0]))}; }};
}

} // namespace

TEST(Custom, LogsumexpIsStableAndExact) {
  const CustomFunction lse = logsumexp_fn();
  Tensor big = from_vector<double>({1000, 1000, 999}, {1, 3});
  EXPECT_NEAR(lse({big})[0].item<double>(), 1000 + std::log(2 + std::exp(-1.0)), 1e-9);
  Tensor x = U({3, 4}, 601, -2, 2);
  x.requires_grad_();
  Tensor g = grad({lse({x})[0].sum()}, {x})[0];
  Tensor softmax = exp(x) / exp(x).sum({1}, true);
  expect_near(values(g), values(softmax));
  EXPECT_GRADCHECK([&](const Vec& in) { return lse(in)[0]; }, {x});
}

TEST(Custom, LogsumexpSecondOrder) {
  // the backward is built from kiln ops (and uses the custom output), so it differentiates again
  const CustomFunction lse = logsumexp_fn();
  Tensor x = U({2, 4}, 602, -2, 2);
  EXPECT_GRADCHECK([&](const Vec& in) { return grad({(lse(in)[0] * U({2}, 603)).sum()}, {in[0]}, {}, false, true)[0]; }, {x});
  // and forward mode transposes the backward
  auto [ujv, jtuv] = both_ways([&](const Vec& in) { return lse(in); }, {x}, {U({2, 4}, 604)}, 605);
  EXPECT_NEAR(ujv, jtuv, 1e-12);
}

TEST(Custom, StraightThroughEstimator) {
  const CustomFunction ste = sign_ste_fn();
  Tensor x = from_vector<double>({-2, -0.5, 0.3, 1.5});
  x.requires_grad_();
  Tensor y = ste({x * 2})[0];
  expect_near(values(y), {-1, -1, 1, 1});
  Tensor w = from_vector<double>({1, 2, 3, 4});
  // d/dx sum(w * ste(2x)) = 2 w where |2x| <= 1
  expect_near(values(grad({(y * w).sum()}, {x})[0]), {0, 4, 6, 0});
  // forward mode follows the custom rule too (not the forward's zero derivative)
  auto [ys, ts] = jvp([&](const Tensor& a) { return ste({a})[0]; }, x, w);
  expect_near(values(ts), {0, 2, 3, 0});
  // backward() uses it as well
  (y * w).sum().backward();
  expect_near(values(x.grad()), {0, 4, 6, 0});
}

TEST(Custom, ForwardRuleIsUsedWhenGiven) {
  CustomFunction ste = sign_ste_fn();
  ste.jvp = [](const Vec&, const Vec&, const Vec& t) -> Vec { return {t[0] * 10}; };
  Tensor x = from_vector<double>({-2, 0.5});
  auto [y, t] = jvp([&](const Tensor& a) { return ste({a})[0]; }, x, from_vector<double>({1, 1}));
  expect_near(values(t), {10, 10});
}

TEST(Custom, SeveralOutputs) {
  const CustomFunction sincos{"sincos",
                              [](const Vec& in) -> Vec { return {sin(in[0]), cos(in[0])}; },
                              [](const Vec& in, const Vec&, const Vec& g) -> Vec {
                                return {g[0] * cos(in[0]) - g[1] * sin(in[0])};
                              }};
  Tensor x = U({5}, 610);
  EXPECT_GRADCHECK([&](const Vec& in) { return sincos(in); }, {x});
  EXPECT_GRADCHECK([&](const Vec& in) { Vec o = sincos(in); return o[0] * o[1] * in[0]; }, {x});
  EXPECT_GRADCHECK([&](const Vec& in) { return sincos(in)[1]; }, {x}); // one output unused: zeros for the other
  auto [ujv, jtuv] = both_ways([&](const Vec& in) { return sincos(in); }, {x}, {U({5}, 611)}, 612);
  EXPECT_NEAR(ujv, jtuv, 1e-12);
}

TEST(Custom, CallsAreNeverMergedAndTheTableDoesNotLeak) {
  const CustomFunction ste = sign_ste_fn();
  Tensor x = U({3}, 620);
  EXPECT_NE(ste({x})[0].node(), ste({x})[0].node());
  const size_t before = autograd::custom_table_size();
  for (int i = 0; i < 200; ++i) {
    Tensor y = ste({x * static_cast<double>(i)})[0];
  }
  EXPECT_LE(autograd::custom_table_size(), before + 1);
}

TEST(Custom, AHeldOutputKeepsItsCallWhileOthersArePruned) {
  const CustomFunction ste = sign_ste_fn();
  Tensor x = from_vector<double>({-2, -0.5, 0.3});
  x.requires_grad_();
  Tensor held = ste({x})[0];
  for (int i = 0; i < 300; ++i) Tensor dropped = ste({x * static_cast<double>(i)})[0]; // prunes the table
  EXPECT_GE(autograd::custom_table_size(), 1u);
  expect_near(values(grad({held.sum()}, {x})[0]), {0, 1, 1}); // still by the call's rule
}

namespace {

// The line of `text` (graph text) that defines %id.
std::string line_of(const std::string& text, const std::string& id) {
  const size_t at = text.find(id + " = ");
  return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
}

// The operand names of a graph text line ("%3 = add f64[3] (%1, %2)" -> {"%1", "%2"}).
std::vector<std::string> operands_of(const std::string& line) {
  std::vector<std::string> out;
  const size_t open = line.find('('), close = line.find(')');
  if (open == std::string::npos || close == std::string::npos) return out;
  std::string inside = line.substr(open + 1, close - open - 1) + ",";
  for (size_t b = 0, e; (e = inside.find(',', b)) != std::string::npos; b = e + 1)
    out.push_back(inside.substr(inside.find('%', b), e - inside.find('%', b)));
  return out;
}

} // namespace

TEST(Custom, TheGraphTextShowsTheCallWithItsInputs) {
  const CustomFunction ste = sign_ste_fn();
  Tensor x = U({3}, 640);
  Tensor in = x * 2;
  Tensor y = ste({in})[0];
  ASSERT_EQ(y.node()->op, graph::OpKind::CustomOutput);
  ASSERT_EQ(y.node()->inputs.size(), 2u);
  EXPECT_EQ(y.node()->inputs[1], in.node()); // the dependency the gradient takes is in the graph
  const std::string text = graph::print_graph({y.node()});
  const std::string root = text.substr(text.rfind("return ") + 7, text.size() - text.rfind("return ") - 8);
  const std::string line = line_of(text, root);
  EXPECT_NE(line.find(" = custom f64[3] (%"), std::string::npos) << text;
  EXPECT_NE(line.find(" i0=" + std::to_string(y.node()->attrs.i0)), std::string::npos) << text;
  const std::vector<std::string> ops = operands_of(line);
  ASSERT_EQ(ops.size(), 2u) << text;
  EXPECT_NE(line_of(text, ops[0]).find(" = where f64[3]"), std::string::npos) << text; // the value
  EXPECT_NE(line_of(text, ops[1]).find(" = mul f64[3]"), std::string::npos) << text;   // the call's input
  // in this process the text reads back as the same node: its call's rules still apply
  EXPECT_EQ(graph::parse_graph(text)[0], y.node());
}

TEST(Custom, ANodeReadFromTextWithoutItsRulesIsAnIdentityThatGradientsRefuse) {
  // The call's input is a placeholder without data (realizing or interpreting it is an error):
  // computing the custom output's value must not read it.
  const std::vector<graph::NodeRef> roots = graph::parse_graph(
      "%0 = const f64[3] f0=2\n"
      "%1 = input f64[3] i0=900003\n"
      "%2 = custom f64[3] (%0, %1) i0=987654321\n"
      "%3 = mul f64[3] (%2, %2)\n"
      "return %3\n");
  EXPECT_EQ(values(Tensor(roots[0])), (std::vector<double>{4, 4, 4}));             // compiled kernels
  EXPECT_EQ(graph::interpret_one(roots[0]).values, (std::vector<double>{4, 4, 4})); // the reference interpreter
  // Differentiating through it needs rules that text does not carry.
  Tensor x = U({3}, 641);
  x.requires_grad_();
  const std::string text = "%0 = input f64[3] i0=" + std::to_string(x.node()->attrs.i0) +
                           "\n%1 = neg f64[3] (%0)\n%2 = custom f64[3] (%1, %0) i0=987654322\nreturn %2\n";
  const graph::NodeRef parsed = graph::parse_graph(text)[0];
  ASSERT_EQ(parsed->inputs[1], x.node()); // the same leaf (hash-consing)
  const int line = __LINE__ + 1; // the error names the grad() call's line
  const std::string msg = error_of([&] { grad({Tensor(parsed).sum()}, {x}); });
  EXPECT_NE(msg.find("no gradient rules"), std::string::npos) << msg;
  EXPECT_NE(msg.find("call 987654322"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_autograd.cpp:" + std::to_string(line)), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("grad", 0), 0u) << msg; // named by the walk that refused
  // forward mode refuses too, and says so
  const int jvp_line = __LINE__ + 1;
  const std::string fwd = error_of([&] { jvp([&](const Tensor& p) { return Tensor(parsed).sum() + p.sum(); }, x, ones_like(x)); });
  EXPECT_EQ(fwd.rfind("jvp", 0), 0u) << fwd;
  EXPECT_NE(fwd.find("no gradient rules"), std::string::npos) << fwd;
  EXPECT_NE(fwd.find("test_autograd.cpp:" + std::to_string(jvp_line)), std::string::npos) << fwd;
}

TEST(Custom, RealizingAnOutputRunsOneKernelAsForAnyIdentity) {
  const CustomFunction ste = sign_ste_fn();
  Tensor x = U({3}, 642);
  x.realize();
  Tensor y = ste({exp(x) * 3})[0];
  const bool fusion = std::exchange(options().fusion, true); // as KILN_FUSION=0 may say otherwise
  const auto before = runtime::executor_stats().launches;
  y.realize();
  EXPECT_EQ(runtime::executor_stats().launches - before, 1u); // the value, fused; the call's input is not stored
  options().fusion = fusion;
  expect_near(values(y), {1, 1, 1});
}

TEST(Custom, StructurallyEqualCallsShareOnePlan) {
  const CustomFunction ste = sign_ste_fn();
  Tensor x = U({3}, 643);
  x.realize();
  auto run = [&](double k) {
    Tensor y = ste({x * k})[0];
    y.realize();
    return values(y);
  };
  run(2);
  const auto before = runtime::executor_stats().plan_reuses;
  EXPECT_EQ(run(-3), values(where(x * -3 >= 0.0, ones_like(x), -ones_like(x))));
  EXPECT_EQ(runtime::executor_stats().plan_reuses - before, 1u); // another call, the same plan
}

namespace {

// A step through custom calls: a loss, a parameter's gradient by backward(), a gradient made
// differentiable and its gradient (second order), and a tangent (forward mode).
Vec custom_step(const Tensor& arg, const Tensor& w) {
  const CustomFunction lse = logsumexp_fn();
  const Tensor loss = lse({arg * w})[0].sum();
  loss.backward();
  const Tensor g = grad({lse({arg * w})[0].sum()}, {w}, {}, false, true)[0];
  const Tensor gg = grad({(g * g).sum()}, {w})[0];
  const Tensor t = jvp([&](const Tensor& a) { return lse({a * w})[0]; }, arg, ones_like(arg)).second;
  return {loss, w.grad(), g, gg, t};
}

} // namespace

TEST(Custom, CompiledAndEagerGiveTheSameBits) {
  auto make_w = [] {
    Tensor w = from_vector<float>({0.5f, -1.5f, 2});
    w.requires_grad_();
    return w;
  };
  Tensor w_eager = make_w(), w_compiled = make_w();
  auto step = compile([&](const Vec& a) { return custom_step(a[0], w_compiled); });
  for (uint64_t seed : {1, 2, 3}) {
    const Tensor x = U({2, 3}, 650 + seed).to(kFloat32);
    const Vec want = custom_step(Tensor(x.node()), w_eager);
    const Vec got = step({x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].to_vector<float>(), want[i].to_vector<float>()) << i;
  }
}

TEST(Custom, BadBackwardIsAnError) {
  const CustomFunction bad{"bad_op", [](const Vec& in) -> Vec { return {in[0] * 2}; },
                           [](const Vec&, const Vec&, const Vec& g) -> Vec { return {g[0].sum()}; }};
  Tensor x = U({3}, 630);
  x.requires_grad_();
  const std::string msg = error_of([&] { grad({bad({x})[0].sum()}, {x}); });
  EXPECT_NE(msg.find("bad_op"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape [3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_autograd.cpp"), std::string::npos) << msg;
}

// ================================================================ errors

TEST(Errors, NonScalarOutputWithoutGradOutputs) {
  Tensor x = U({2, 3}, 701);
  x.requires_grad_();
  const std::string msg = error_of([&] { grad({x * 2}, {x}); });
  EXPECT_NE(msg.find("grad:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f64[2,3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("grad_outputs"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_autograd.cpp"), std::string::npos) << msg;
}

TEST(Errors, UnusedInput) {
  Tensor x = U({3}, 702), z = U({2}, 703);
  x.requires_grad_();
  z.requires_grad_();
  const std::string msg = error_of([&] { grad({(x * 2).sum()}, {x, z}); });
  EXPECT_NE(msg.find("inputs[1]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f64[2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not used"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allow_unused"), std::string::npos) << msg;
  const Vec gs = grad({(x * 2).sum()}, {x, z}, {}, /*allow_unused=*/true);
  expect_near(values(gs[0]), {2, 2, 2});
  expect_near(values(gs[1]), {0, 0});
}

TEST(Errors, TensorsOfOneMergedComputationAreRefusedNotMixed) {
  // Identical computations merge into one node and gradients are found by node, so two tensors
  // computed alike would get one gradient (the sum over both tensors' uses; PyTorch gives each its
  // own): grad refuses them. An op that returns an alias of its operand (a no-op reshape, a fold
  // back to an operand) is not a second computation, and its gradient stays as before.
  Tensor x = U({3}, 706);
  x.requires_grad_();
  {
    Tensor y1 = x * 2.0, y2 = x * 2.0;
    Tensor loss = (y1 * y1).sum() + (y2 * 3.0).sum();
    std::string msg = error_of([&] { grad({loss}, {y1, y2}); });
    EXPECT_NE(msg.find("inputs[0] (f64[3]) was computed by the same ops on the same operands as another live tensor"),
              std::string::npos) << msg;
    EXPECT_NE(msg.find("test_autograd.cpp"), std::string::npos) << msg;
    msg = error_of([&] { grad({loss}, {y2}); }); // y1's uses would count too
    EXPECT_NE(msg.find("inputs[0]"), std::string::npos) << msg;
  }
  {
    Tensor y = x * 2.0; // the other one is gone: y is the only tensor of its value again
    const Tensor alias = y.reshape({3}), folded = y.reshape({1, 3}).reshape({3});
    expect_near(values(grad({(alias * alias).sum() + (folded * 3.0).sum()}, {y})[0]), {4 * values(x)[0] + 3,
                                                                                   4 * values(x)[1] + 3,
                                                                                   4 * values(x)[2] + 3});
    const std::string msg = error_of([&] { grad({(alias * 3.0).sum()}, {y, alias}); });
    EXPECT_NE(msg.find("inputs[1] and inputs[0] are two tensors holding the same value"), std::string::npos) << msg;
    expect_near(values(grad({(y * 3.0).sum()}, {y, y})[1]), {3, 3, 3}); // one tensor twice is fine
  }
  const Tensor w = zeros({3}, kFloat64), b = zeros({3}, kFloat64); // equal constants are one value too
  const std::string msg = error_of([&] { grad({(x * w + b).sum()}, {w, b}); });
  EXPECT_NE(msg.find("are two tensors holding the same value"), std::string::npos) << msg;
}

TEST(Errors, IntegerOutputAndInput) {
  Tensor x = U({3}, 704);
  x.requires_grad_();
  std::string msg = error_of([&] { grad({x.argmax(0)}, {x}); });
  EXPECT_NE(msg.find("i64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("floating"), std::string::npos) << msg;
  Tensor i = from_vector<int64_t>({1, 2, 3});
  msg = error_of([&] { grad({(x * i).sum()}, {i}); });
  EXPECT_NE(msg.find("inputs[0] has dtype i64"), std::string::npos) << msg;
}

TEST(Errors, GradOutputsMismatch) {
  Tensor x = U({2, 3}, 705);
  x.requires_grad_();
  Tensor y = x * 2;
  std::string msg = error_of([&] { grad({y}, {x}, {ones({3}, kFloat64)}); });
  EXPECT_NE(msg.find("grad_outputs[0] is f64[3] but outputs[0] is f64[2,3]"), std::string::npos) << msg;
  msg = error_of([&] { grad({y}, {x}, {ones({2, 3}, kFloat32)}); });
  EXPECT_NE(msg.find("f32[2,3]"), std::string::npos) << msg;
  msg = error_of([&] { grad({y, y}, {x}, {ones({2, 3}, kFloat64)}); });
  EXPECT_NE(msg.find("2 outputs but 1 grad_outputs"), std::string::npos) << msg;
  msg = error_of([&] { jvp([](const Tensor& a) { return a; }, x, ones({3}, kFloat64)); });
  EXPECT_NE(msg.find("jvp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tangents[0] is f64[3]"), std::string::npos) << msg;
}

// ================================================================ grad, backward, no_grad, detach

TEST(Grad, WithRespectToIntermediatesAndSeveralOutputs) {
  Tensor x = from_vector<double>({1, 2});
  x.requires_grad_();
  Tensor y = x * 2;
  Tensor z = (y * y).sum();
  expect_near(values(grad({z}, {y})[0]), {4, 8});
  const Vec both = grad({z}, {x, y});
  expect_near(values(both[0]), {8, 16});
  expect_near(values(both[1]), {4, 8});
  const Vec seeded = grad({y, x * x}, {x}, {from_vector<double>({1, 10}), from_vector<double>({2, 3})});
  expect_near(values(seeded[0]), {2 + 4, 20 + 12});
}

TEST(Backward, AccumulatesIntoLeavesAndZeroGrad) {
  Tensor x = from_vector<double>({1, 2, 3});
  Tensor w = from_vector<double>({0.5});
  x.requires_grad_();
  w.requires_grad_();
  (x * x * w).sum().backward();
  expect_near(values(x.grad()), {1, 2, 3});   // 2 x w
  expect_near(values(w.grad()), {14});        // sum(x^2)
  (x * x * w).sum().backward();
  expect_near(values(x.grad()), {2, 4, 6});
  expect_near(values(w.grad()), {28});
  EXPECT_FALSE(x.grad().requires_grad());
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  (x * 3).sum().backward();
  expect_near(values(x.grad()), {3, 3, 3});
  expect_near(values(w.grad()), {28}); // w was not involved
  (x * x).backward(from_vector<double>({1, 0, 2}));
  expect_near(values(x.grad()), {5, 3, 15});
}

TEST(NoGrad, RecordsNoHistory) {
  Tensor x = from_vector<double>({1, 2});
  x.requires_grad_();
  Tensor y, loss = (x * x).sum();
  {
    NoGradGuard guard;
    EXPECT_FALSE(grad_mode_enabled());
    y = x * 2;
    const Tensor g = grad({loss}, {x})[0]; // a graph recorded before: computable, but detached
    EXPECT_FALSE(g.requires_grad());
    expect_near(values(g), {2, 4});
  }
  EXPECT_TRUE(grad_mode_enabled());
  EXPECT_FALSE(y.requires_grad());
  expect_near(values(grad({(y * x).sum()}, {x})[0]), {2, 4}); // y is a constant
  EXPECT_NE(error_of([&] { grad({y.sum()}, {x}); }), "");
}

TEST(Detach, BlocksGradients) {
  Tensor x = from_vector<double>({1, 2});
  x.requires_grad_();
  expect_near(values(grad({(x.detach() * x).sum()}, {x})[0]), {1, 2});
  EXPECT_NE(error_of([&] { grad({x.detach().sum()}, {x}); }).find("not used"), std::string::npos);
}

// ================================================================ graph size

namespace {

size_t count_nodes(const Vec& ts) {
  std::vector<const graph::Node*> roots;
  for (const Tensor& t : ts) roots.push_back(t.node().get());
  return graph::topo_order(roots).size();
}

struct DeepNet {
  Vec ws;
  Tensor loss;
  explicit DeepNet(int layers) {
    Tensor h = U({2, 4}, 800);
    for (int i = 0; i < layers; ++i) {
      ws.push_back(U({4, 4}, 801 + i).requires_grad_());
      h = tanh(matmul(h, ws.back()) + 0.1);
    }
    loss = h.sum();
  }
};

} // namespace

TEST(GraphSize, LinearInDepth) {
  auto measure = [](int layers) {
    DeepNet net(layers);
    Vec all = grad({net.loss}, net.ws);
    const size_t forward = count_nodes({net.loss});
    all.push_back(net.loss);
    const size_t total = count_nodes(all);
    // only nodes on a path from an input to the output get adjoints: the last layer's
    // gradient adds a constant number of nodes to the forward graph
    const size_t last = count_nodes({net.loss, grad({net.loss}, {net.ws.back()})[0]});
    return std::tuple{forward, total, last};
  };
  const auto [f100, t100, l100] = measure(100);
  const auto [f200, t200, l200] = measure(200);
  EXPECT_LT(t200, 4 * f200) << "forward " << f200 << ", forward + backward " << t200;
  EXPECT_LT(static_cast<double>(t200) / static_cast<double>(t100), 2.05) << t100 << " vs " << t200;
  EXPECT_LT(l200 - f200, 20u);
  EXPECT_EQ(l200 - f200, l100 - f100);
}

TEST(GraphSize, DeepGradientRealizes) {
  DeepNet net(200);
  const Vec gs = grad({net.loss}, {net.ws.front(), net.ws.back()});
  for (const Tensor& g : gs)
    for (double v : values(g)) EXPECT_TRUE(std::isfinite(v));
  // the top layer's gradient against finite differences of the whole network is
  // covered by gradcheck elsewhere; here: depth does not break the walk or the stack
  EXPECT_GT(std::abs(values(gs[1])[0]), 0.0);
}

// ================================================================ retain_graph

TEST(Backward, ASecondBackwardOverTheSameGraphNeedsRetainGraph) {
  Tensor x = from_vector<double>({1, 2, 3});
  x.requires_grad_();
  Tensor loss = (x * x).sum();
  loss.backward();
  const int line = __LINE__ + 1;
  const std::string msg = error_of([&] { loss.backward(); });
  EXPECT_NE(msg.find("backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("retain_graph"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_autograd.cpp:" + std::to_string(line)), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { grad({loss}, {x}); }).find("retain_graph"), std::string::npos);
  expect_near(values(x.grad()), {2, 4, 6}); // not doubled
  // With retain_graph the graph can be differentiated again (and grad() of it too).
  Tensor kept = (x * x).sum(); // the same graph node as loss, but a tensor of its own
  kept.backward(/*retain_graph=*/true);
  expect_near(values(grad({kept}, {x})[0]), {2, 4, 6});
  kept.backward(from_vector<double>(std::vector<double>{1}, {}), /*retain_graph=*/true);
  kept.backward();
  expect_near(values(x.grad()), {8, 16, 24});
  EXPECT_THROW(kept.backward(true), Error);
}

// ================================================================ requires_grad_ inside compile()

namespace {

// A gradient penalty and an adversarial input: grad-requiring arguments and intermediates.
Vec penalty_step(const Tensor& arg, const Tensor& w) {
  Tensor xi = arg; // the argument itself becomes a leaf
  xi.requires_grad_();
  (xi * xi * w).sum().backward(); // into xi.grad() and w.grad()
  Tensor d = arg.detach();
  d.requires_grad_();
  const Tensor gd = grad({(d * d * d).sum()}, {d})[0];
  Tensor h = arg.detach() * 2; // an intermediate made a leaf
  h.requires_grad_();
  (h * h).sum().backward();
  return {xi.grad(), gd, h.grad(), (gd * w).sum()};
}

} // namespace

TEST(CompiledGrad, RequiresGradOnTracedArgumentsAndIntermediatesGivesTheEagerResults) {
  auto make_w = [] {
    Tensor w = from_vector<float>({0.5f, -1.5f, 2});
    w.requires_grad_();
    return w;
  };
  Tensor w_eager = make_w(), w_compiled = make_w();
  auto step = compile([&](const Vec& a) { return penalty_step(a[0], w_compiled); });
  for (uint64_t seed : {1, 2, 3}) {
    const Tensor x = U({3}, seed).to(kFloat32);
    const Vec want = penalty_step(Tensor(x.node()), w_eager);
    const Vec got = step({x});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].to_vector<float>(), want[i].to_vector<float>()) << i;
    EXPECT_EQ(w_compiled.grad().to_vector<float>(), w_eager.grad().to_vector<float>());
  }
}

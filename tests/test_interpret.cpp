// The reference interpreter against hand-computed values: every op, integer
// wrap-around, f32 rounding, NaN rules, reductions, movement and matmul.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "graph/random.h"
#include "graph/build.h"
#include "graph/interpret.h"
#include "kiln/error.h"

namespace kiln::graph {
namespace {

namespace b = build;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Host memory owned by a vector (the test does not link the runtime).
class VectorStorage : public Storage {
public:
  explicit VectorStorage(size_t bytes) : bytes_(bytes) {}
  void* data() const override { return const_cast<char*>(bytes_.data()); }
  size_t bytes() const override { return bytes_.size(); }
  Device device() const override { return kCPU; }

private:
  std::vector<char> bytes_;
};

/// An Input node holding `vals` converted to T (T = uint8_t for bool).
template <class T> NodeRef input(DType dt, const std::vector<double>& vals, Shape shape) {
  auto s = std::make_shared<VectorStorage>(std::max<size_t>(1, vals.size() * sizeof(T)));
  for (size_t k = 0; k < vals.size(); ++k) static_cast<T*>(s->data())[k] = static_cast<T>(vals[k]);
  return make_input(dt, std::move(shape), s);
}
NodeRef f32(const std::vector<double>& v, Shape s) { return input<float>(kFloat32, v, std::move(s)); }
NodeRef f64(const std::vector<double>& v, Shape s) { return input<double>(kFloat64, v, std::move(s)); }
NodeRef i32(const std::vector<double>& v, Shape s) { return input<int32_t>(kInt32, v, std::move(s)); }
NodeRef i64v(const std::vector<int64_t>& v, Shape s) {
  auto st = std::make_shared<VectorStorage>(std::max<size_t>(1, v.size() * 8));
  std::memcpy(st->data(), v.data(), v.size() * 8);
  return make_input(kInt64, std::move(s), st);
}
NodeRef boolean(const std::vector<double>& v, Shape s) { return input<uint8_t>(kBool, v, std::move(s)); }

std::vector<double> eval(const NodeRef& n, InterpretOptions o = {}) { return interpret_one(n, o).values; }
std::vector<int64_t> eval_ints(const NodeRef& n) { return interpret_one(n).ints; }

/// Element-wise equality that treats NaN as equal to NaN and tells -0.0 from 0.0;
/// `ulps` > 0 allows that many units in the last place (f64).
void expect_same(const std::vector<double>& got, const std::vector<double>& want, int ulps = 0) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (std::isnan(want[k])) {
      EXPECT_TRUE(std::isnan(got[k])) << "element " << k << ": " << got[k];
      continue;
    }
    EXPECT_EQ(std::signbit(got[k]), std::signbit(want[k])) << "sign of element " << k;
    if (ulps == 0 || std::isinf(want[k]) || want[k] == 0) {
      EXPECT_EQ(got[k], want[k]) << "element " << k;
      continue;
    }
    EXPECT_LE(std::fabs(got[k] - want[k]), ulps * (std::nextafter(std::fabs(want[k]), kInf) - std::fabs(want[k])))
        << "element " << k << ": " << got[k] << " vs " << want[k];
  }
}

NodeRef un(OpKind op, const NodeRef& x) { return b::unary(op, x); }
NodeRef bin(OpKind op, const NodeRef& x, const NodeRef& y) { return b::binary(op, x, y); }

// ---------------------------------------------------------------- elementwise

TEST(Interpret, FloatArithmeticRoundsToF32) {
  NodeRef x = f32({0.1, 1e8}, {2}), y = f32({0.2, 1}, {2});
  const std::vector<double> got = eval(b::add(x, y));
  EXPECT_EQ(got[0], static_cast<double>(0.1f + 0.2f));
  EXPECT_EQ(got[1], 1e8); // 1e8 + 1 is not representable in f32
  EXPECT_EQ(eval(b::add(x, y), {.exact_f32_rounding = false})[1], 1e8 + 1);
  EXPECT_EQ(eval(b::add(f64({0.1}, {1}), f64({0.2}, {1})))[0], 0.1 + 0.2);
}

TEST(Interpret, FloatUnaryOps) {
  NodeRef x = f64({-2, -0.0, 0.5, 4}, {4});
  expect_same(eval(un(OpKind::Neg, x)), {2, 0.0, -0.5, -4});
  expect_same(eval(un(OpKind::Abs, x)), {2, 0.0, 0.5, 4});
  expect_same(eval(un(OpKind::Relu, x)), {0, 0, 0.5, 4});
  expect_same(eval(un(OpKind::Reciprocal, x)), {-0.5, -kInf, 2, 0.25});
  expect_same(eval(un(OpKind::Sqrt, x)), {kNaN, -0.0, std::sqrt(0.5), 2});
  expect_same(eval(un(OpKind::Rsqrt, x)), {kNaN, -kInf, 1 / std::sqrt(0.5), 0.5});
  expect_same(eval(un(OpKind::Exp, x)), {std::exp(-2.0), 1, std::exp(0.5), std::exp(4.0)}, 1);
  expect_same(eval(un(OpKind::Log, x)), {kNaN, -kInf, std::log(0.5), std::log(4.0)}, 1);
  expect_same(eval(un(OpKind::Sin, x)), {std::sin(-2.0), -0.0, std::sin(0.5), std::sin(4.0)}, 1);
  expect_same(eval(un(OpKind::Cos, x)), {std::cos(-2.0), 1, std::cos(0.5), std::cos(4.0)}, 1);
  expect_same(eval(un(OpKind::Tanh, x)), {std::tanh(-2.0), -0.0, std::tanh(0.5), std::tanh(4.0)}, 1);
  expect_same(eval(un(OpKind::Erf, x)), {std::erf(-2.0), -0.0, std::erf(0.5), std::erf(4.0)}, 1);
  expect_same(eval(un(OpKind::Sigmoid, x)), {1 / (1 + std::exp(2.0)), 0.5, 1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-4.0))}, 1);
  expect_same(eval(un(OpKind::LogicalNot, x)), {0, 1, 0, 0});
}

TEST(Interpret, SigmoidIsStableAndAccurate) {
  const std::vector<double> got = eval(un(OpKind::Sigmoid, f64({-740, 740, -30, 1e-300}, {4})));
  EXPECT_GT(got[0], 0.0) << "sigmoid(-740) is a subnormal, not 0";
  EXPECT_NEAR(got[0] / std::exp(-740.0L), 1.0, 2e-2); // e^-740 is a subnormal of 7 bits
  EXPECT_EQ(got[1], 1.0);
  const long double e30 = std::exp(-30.0L);
  EXPECT_EQ(got[2], static_cast<double>(e30 / (1 + e30)));
  EXPECT_EQ(got[3], 0.5);
  const std::vector<double> f = eval(un(OpKind::Sigmoid, f32({-100}, {1})));
  EXPECT_EQ(f[0], static_cast<double>(static_cast<float>(std::exp(-100.0))));
}

TEST(Interpret, NaNRules) {
  NodeRef x = f32({kNaN, 1, kNaN, -kInf}, {4}), y = f32({1, kNaN, kNaN, 2}, {4});
  expect_same(eval(bin(OpKind::Maximum, x, y)), {kNaN, kNaN, kNaN, 2});
  expect_same(eval(bin(OpKind::Minimum, x, y)), {kNaN, kNaN, kNaN, -kInf});
  expect_same(eval(bin(OpKind::Eq, x, y)), {0, 0, 0, 0});
  expect_same(eval(bin(OpKind::Ne, x, y)), {1, 1, 1, 1});
  expect_same(eval(bin(OpKind::Lt, x, y)), {0, 0, 0, 1});
  expect_same(eval(bin(OpKind::Ge, x, y)), {0, 0, 0, 0});
  expect_same(eval(bin(OpKind::LogicalAnd, x, y)), {1, 1, 1, 1}); // NaN != 0
  expect_same(eval(un(OpKind::Relu, x)), {kNaN, 1, kNaN, 0});
  expect_same(eval(un(OpKind::LogicalNot, x)), {0, 0, 0, 0});
}

TEST(Interpret, ComparisonsAndLogic) {
  NodeRef x = i32({1, 2, 3, 0}, {4}), y = i32({2, 2, 2, 0}, {4});
  expect_same(eval(bin(OpKind::Lt, x, y)), {1, 0, 0, 0});
  expect_same(eval(bin(OpKind::Le, x, y)), {1, 1, 0, 1});
  expect_same(eval(bin(OpKind::Gt, x, y)), {0, 0, 1, 0});
  expect_same(eval(bin(OpKind::LogicalOr, x, y)), {1, 1, 1, 0});
  expect_same(eval(bin(OpKind::LogicalAnd, x, y)), {1, 1, 1, 0});
  NodeRef p = boolean({1, 0, 1, 0}, {4}), q = boolean({1, 1, 0, 0}, {4});
  expect_same(eval(bin(OpKind::LogicalAnd, p, q)), {1, 0, 0, 0});
  expect_same(eval(bin(OpKind::Eq, p, q)), {1, 0, 0, 1});
}

TEST(Interpret, IntegerArithmeticWraps) {
  NodeRef x = i32({2147483647, -2147483648.0, 7, -7}, {4}), y = i32({1, 1, 2, 2}, {4});
  EXPECT_EQ(eval_ints(b::add(x, y)), (std::vector<int64_t>{-2147483648LL, -2147483647, 9, -5}));
  EXPECT_EQ(eval_ints(b::sub(x, y)), (std::vector<int64_t>{2147483646, 2147483647, 5, -9}));
  EXPECT_EQ(eval_ints(b::mul(x, y)), (std::vector<int64_t>{2147483647, -2147483648LL, 14, -14}));
  EXPECT_EQ(eval_ints(un(OpKind::Neg, x)), (std::vector<int64_t>{-2147483647, -2147483648LL, -7, 7}));
  EXPECT_EQ(eval_ints(un(OpKind::Abs, x)), (std::vector<int64_t>{2147483647, -2147483648LL, 7, 7}));
  EXPECT_EQ(eval_ints(un(OpKind::Relu, x)), (std::vector<int64_t>{2147483647, 0, 7, 0}));
  const int64_t big = std::numeric_limits<int64_t>::max();
  NodeRef z = i64v({big, big - 1, 3}, {3});
  EXPECT_EQ(eval_ints(b::add(z, i64v({1, 0, 1}, {3}))), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), big - 1, 4}));
  EXPECT_EQ(eval_ints(b::mul(z, i64v({2, 1, 3}, {3}))), (std::vector<int64_t>{-2, big - 1, 9}));
}

TEST(Interpret, IntegerPower) {
  NodeRef x = i32({2, 3, -1, -1, 1, 0, 2, 5, -2}, {9});
  NodeRef e = i32({10, -1, -3, -2, -5, 0, 31, 0, 3}, {9});
  EXPECT_EQ(eval_ints(bin(OpKind::Pow, x, e)), (std::vector<int64_t>{1024, 0, -1, 1, 1, 1, -2147483648LL, 1, -8}));
  NodeRef z = i64v({3, 2}, {2});
  EXPECT_EQ(eval_ints(bin(OpKind::Pow, z, i64v({40, 64}, {2}))), (std::vector<int64_t>{static_cast<int64_t>(12157665459056928801ULL), 0}));
}

TEST(Interpret, FloatPowerFollowsStdPow) {
  NodeRef x = f64({2, -8, kNaN, 1, -2, 0}, {6}), e = f64({0.5, 1.0 / 3, 0, kNaN, 3, -1}, {6});
  expect_same(eval(bin(OpKind::Pow, x, e)), {std::sqrt(2.0), kNaN, 1, 1, -8, kInf}, 1);
}

TEST(Interpret, DivisionIsIEEE) {
  NodeRef x = f32({1, -1, 0, 1}, {4}), y = f32({0, 0, 0, 3}, {4});
  expect_same(eval(b::div(x, y)), {kInf, -kInf, kNaN, static_cast<double>(1.0f / 3.0f)});
}

TEST(Interpret, CastsSaturateAndRound) {
  NodeRef x = f32({1e10, -1e10, kNaN, -2.7, 2.7, -0.0, kInf}, {7});
  EXPECT_EQ(eval_ints(b::cast(x, kInt32)), (std::vector<int64_t>{2147483647, -2147483648LL, 0, -2, 2, 0, 2147483647}));
  EXPECT_EQ(eval_ints(b::cast(x, kInt64)),
            (std::vector<int64_t>{10000000000LL, -10000000000LL, 0, -2, 2, 0, std::numeric_limits<int64_t>::max()}));
  EXPECT_EQ(eval_ints(b::cast(x, kBool)), (std::vector<int64_t>{1, 1, 1, 1, 1, 0, 1}));
  NodeRef z = i64v({(int64_t{1} << 32) + 5, 16777217, -1, (int64_t{1} << 53) + 1}, {4});
  EXPECT_EQ(eval_ints(b::cast(z, kInt32)), (std::vector<int64_t>{5, 16777217, -1, 1}));
  expect_same(eval(b::cast(z, kFloat32)), {4294967296.0, 16777216, -1, 9007199254740992.0});
  expect_same(eval(b::cast(z, kFloat64)), {4294967301.0, 16777217, -1, 9007199254740992.0});
  expect_same(eval(b::cast(f64({0.1, 1e300}, {2}), kFloat32)), {static_cast<double>(0.1f), kInf});
  expect_same(eval(b::cast(boolean({1, 0}, {2}), kFloat32)), {1, 0});
  EXPECT_EQ(eval_ints(b::cast(i32({-3, 0}, {2}), kBool)), (std::vector<int64_t>{1, 0}));
}

TEST(Interpret, WhereSelects) {
  NodeRef c = boolean({1, 0, 1}, {3});
  expect_same(eval(b::where(c, f32({1, 2, 3}, {3}), f32({-1, -2, -3}, {3}))), {1, -2, 3});
  EXPECT_EQ(eval_ints(b::where(c, i32({1, 2, 3}, {3}), i32({7, 8, 9}, {3}))), (std::vector<int64_t>{1, 8, 3}));
}

// ---------------------------------------------------------------- leaves

TEST(Interpret, Leaves) {
  expect_same(eval(b::constant(0.1, kFloat32, {2})), {static_cast<double>(0.1f), static_cast<double>(0.1f)});
  EXPECT_EQ(eval_ints(b::constant(-3, kInt32, {2})), (std::vector<int64_t>{-3, -3}));
  EXPECT_EQ(eval_ints(b::constant(5, kBool, {1})), (std::vector<int64_t>{1}));
  Attrs fa;
  fa.f0 = 1;
  fa.f1 = 0.5;
  expect_same(eval(make_node(OpKind::Arange, kFloat64, {4}, {}, fa)), {1, 1.5, 2, 2.5});
  Attrs ia;
  ia.i0 = 10;
  ia.i1 = -3;
  EXPECT_EQ(eval_ints(make_node(OpKind::Arange, kInt32, {4}, {}, ia)), (std::vector<int64_t>{10, 7, 4, 1}));
}

TEST(Interpret, RandomLeavesFollowRandomH) {
  Attrs a;
  a.i0 = 42;
  const std::vector<double> u32 = eval(make_node(OpKind::Rand, kFloat32, {3, 5}, {}, a));
  const std::vector<double> u64 = eval(make_node(OpKind::Rand, kFloat64, {3, 5}, {}, a));
  const std::vector<double> n64 = eval(make_node(OpKind::Randn, kFloat64, {3, 5}, {}, a));
  for (uint64_t k = 0; k < 15; ++k) {
    EXPECT_EQ(u32[k], graph::random_uniform(42, k, false));
    EXPECT_EQ(u64[k], graph::random_uniform(42, k, true));
    EXPECT_EQ(n64[k], graph::random_normal(42, k, true));
  }
}

TEST(Interpret, InputWithoutDataThrows) {
  NodeRef x = make_input(kFloat32, {2}, nullptr);
  EXPECT_THROW(eval(b::neg(x)), Error);
}

TEST(Interpret, UseRealizedReadsStorage) {
  NodeRef x = f32({1, 2}, {2});
  NodeRef y = b::neg(x);
  y->set_realized(f32({7, 8}, {2})->realized()); // a (deliberately wrong) cached value
  expect_same(eval(y), {-1, -2});
  expect_same(eval(y, {.use_realized = true}), {7, 8});
}

TEST(Interpret, SeveralRootsShareWork) {
  NodeRef x = f64({1, 2, 3}, {3});
  NodeRef y = b::mul(x, x);
  auto r = interpret({y, b::add(y, x), y});
  ASSERT_EQ(r.size(), 3u);
  expect_same(r[0].values, {1, 4, 9});
  expect_same(r[1].values, {2, 6, 12});
  expect_same(r[2].values, {1, 4, 9});
  EXPECT_EQ(r[1].shape, (Shape{3}));
  EXPECT_EQ(r[1].dtype, kFloat64);
  EXPECT_TRUE(r[1].ints.empty());
}

// ---------------------------------------------------------------- reductions

TEST(Interpret, SumOverAnyDims) {
  NodeRef x = f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
  expect_same(eval(b::reduce(OpKind::Sum, x, {1})), {6, 9, 24, 27});
  EXPECT_EQ(interpret_one(b::reduce(OpKind::Sum, x, {1})).shape, (Shape{2, 1, 2}));
  expect_same(eval(b::reduce(OpKind::Sum, x, {0, 2})), {14, 22, 30});
  expect_same(eval(b::reduce(OpKind::Sum, x, {0, 1, 2})), {66});
  expect_same(eval(b::reduce(OpKind::Sum, f32({}, {2, 0}), {1})), {0, 0});
  EXPECT_EQ(eval_ints(b::reduce(OpKind::Sum, i32({2147483647, 1}, {2}), {0})), (std::vector<int64_t>{-2147483648LL}));
}

TEST(Interpret, MaxMinPropagateNaN) {
  NodeRef x = f32({1, kNaN, 3, -1, 5, 2}, {2, 3});
  expect_same(eval(b::reduce(OpKind::Max, x, {1})), {kNaN, 5});
  expect_same(eval(b::reduce(OpKind::Min, x, {1})), {kNaN, -1});
  expect_same(eval(b::reduce(OpKind::Max, x, {0})), {1, kNaN, 3});
  EXPECT_EQ(eval_ints(b::reduce(OpKind::Min, i32({4, -9, 2}, {3}), {0})), (std::vector<int64_t>{-9}));
}

TEST(Interpret, ArgReductionsTakeFirstIndexAndNaN) {
  NodeRef x = f32({1, 3, 3, 0, kNaN, 2, kNaN, -1, 0, 0, 0, 0}, {3, 4});
  EXPECT_EQ(eval_ints(b::reduce(OpKind::Argmax, x, {1})), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(eval_ints(b::reduce(OpKind::Argmin, x, {1})), (std::vector<int64_t>{3, 0, 0}));
  EXPECT_EQ(eval_ints(b::reduce(OpKind::Argmax, x, {0})), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(eval_ints(b::reduce(OpKind::Argmin, i32({5, 1, 1, 7}, {4}), {0})), (std::vector<int64_t>{1}));
}

// ---------------------------------------------------------------- movement

TEST(Interpret, Movement) {
  NodeRef x = f64({0, 1, 2, 3, 4, 5}, {2, 3});
  expect_same(eval(b::permute(x, {1, 0})), {0, 3, 1, 4, 2, 5});
  expect_same(eval(b::reshape(b::permute(x, {1, 0}), {6})), {0, 3, 1, 4, 2, 5});
  expect_same(eval(b::broadcast_to(f64({1, 2}, {2, 1}), {2, 3})), {1, 1, 1, 2, 2, 2});
  expect_same(eval(b::slice(x, {0, 1}, {1, 2}, {2, 1})), {1, 4});
  expect_same(eval(b::slice(x, {1, 0}, {1, 2}, {1, 2})), {3, 5});
  expect_same(eval(b::pad(x, {1, 0}, {0, 1}, -1)), {-1, -1, -1, -1, 0, 1, 2, -1, 3, 4, 5, -1});
  EXPECT_EQ(eval_ints(b::pad(i32({4}, {1}), {2}, {1}, 9)), (std::vector<int64_t>{9, 9, 4, 9}));
  NodeRef y = f64({9, 8}, {2, 1});
  expect_same(eval(b::concat({x, f64({}, {2, 0}), y}, 1)), {0, 1, 2, 9, 3, 4, 5, 8});
  expect_same(eval(b::concat({x, f64({6, 7, 8}, {1, 3})}, 0)), {0, 1, 2, 3, 4, 5, 6, 7, 8});
}

// ---------------------------------------------------------------- matmul

TEST(Interpret, Matmul) {
  NodeRef a = f64({1, 2, 3, 4, 5, 6}, {2, 3}), c = f64({1, 0, 0, 1, 2, 2}, {3, 2});
  expect_same(eval(b::matmul(a, c)), {7, 8, 16, 17});
  NodeRef ba = f32({1, 2, 3, 4, 1, 0, 0, 1}, {2, 2, 2}), bb = f32({1, 1, 1, 1, 5, 6, 7, 8}, {2, 2, 2});
  expect_same(eval(b::matmul(ba, bb)), {3, 3, 7, 7, 5, 6, 7, 8});
  expect_same(eval(b::matmul(f32({}, {2, 0}), f32({}, {0, 3}))), {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(eval_ints(b::matmul(i32({65536, 1}, {1, 2}), i32({65536, 5}, {2, 1}))), (std::vector<int64_t>{5}));
}

} // namespace
} // namespace kiln::graph

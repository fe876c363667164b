// Shape arithmetic at the limits (issue 16): every extent, element count, stride and offset is
// checked where shapes are made, and the element-count cap (graph::kMaxNumel, 2^48) holds for
// every op. The cases of the issue, then a property test over random extreme shapes through every
// op family: each call throws kiln::Error or gives the result an exact (128-bit) reference
// computes, never a crash, a hang, an internal abort or a wrong shape.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "error_of.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using i128 = __int128;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr i128 kCap = i128{1} << 48;

/// Runs `f`, which must throw kiln::Error for `op` naming this file's `line`.
void expect_error(const std::function<void()>& f, int line, const std::string& op) {
  test::expect_error_at(f, "test_shape_limits.cpp", line, op);
}

// ---------------------------------------------------------------- the cases of the issue

TEST(ShapeLimits, BroadcastBeyondTheCapIsAnError) {
  const int64_t e = int64_t{1} << 32;
  expect_error([&] { (void)(ones({e, 1}) + ones({1, e})); }, __LINE__, "add");
  expect_error([&] { (void)where(ones({e, 1}) > 0.0, ones({1, e}), 0.0); }, __LINE__, "where");
}

TEST(ShapeLimits, MatmulBeyondTheCapIsAnError) {
  const int64_t e = int64_t{1} << 40;
  expect_error([&] { (void)matmul(ones({e, 1}), ones({1, e})); }, __LINE__, "matmul");
  expect_error([&] { (void)matmul(ones({e, 1, 1}), ones({1, 1, e})); }, __LINE__, "matmul"); // batch x N
}

TEST(ShapeLimits, ReshapeToAnOverflowingShapeIsAnError) {
  const int64_t e = int64_t{1} << 62;
  expect_error([&] { (void)zeros({0}).reshape({e, e, 0}); }, __LINE__, "reshape");
  expect_error([&] { (void)zeros({0}).reshape({e, e, -1}); }, __LINE__, "reshape");
  expect_error([&] { (void)zeros({4}).reshape({e, e, e, -1}); }, __LINE__, "reshape");
}

TEST(ShapeLimits, ArangeBeyondTheCapIsAnError) {
  expect_error([&] { (void)arange(0, 1e300, 1, kFloat32); }, __LINE__, "arange");
  expect_error([&] { (void)arange(kMax); }, __LINE__, "arange");
  expect_error([&] { (void)arange(0, 9.3e18, 1, kInt64); }, __LINE__, "arange");
  expect_error([&] { (void)arange(0, 1e15, 1, kFloat32); }, __LINE__, "arange"); // was: minutes of work for its sum
  expect_error([&] { (void)arange(1e300, 1e300 + 1e285, 1e280, kInt64); }, __LINE__, "arange"); // not an int64
  expect_error([&] { (void)arange(0, 4e9, 1e9, kInt32); }, __LINE__, "arange"); // 3e9 is not an int32
  expect_error([&] { (void)arange(-9e18, 9e18, 6e18, kInt64); }, __LINE__, "arange"); // 2 * 6e18 overflows
  EXPECT_EQ(arange(0, 3e9, 1e9, kInt32).to_vector<int32_t>(), (std::vector<int32_t>{0, 1000000000, 2000000000}));
  EXPECT_EQ(arange(-4e18, 8e18, 4e18, kInt64).to_vector<int64_t>(),
            (std::vector<int64_t>{-4000000000000000000, 0, 4000000000000000000}));
  EXPECT_EQ(arange(5, 6, 1e300, kInt64).to_vector<int64_t>(), std::vector<int64_t>{5}); // one value: no step
}

TEST(ShapeLimits, SliceWithAHugeStepIsOneElement) {
  Tensor x = arange(0, 10, 1, kFloat32);
  EXPECT_EQ(x.slice(0, 0, 10, kMax - 5).to_vector<float>(), std::vector<float>{0});
  EXPECT_EQ(x.slice(0, 3, kMax, kMax).to_vector<float>(), std::vector<float>{3});
  EXPECT_EQ(x.slice(0, std::numeric_limits<int64_t>::min(), kMax, 4).to_vector<float>(), (std::vector<float>{0, 4, 8}));
}

TEST(ShapeLimits, PadBeyondTheCapIsAnError) {
  expect_error([&] { (void)pad(ones({3}), {kMax, 1}); }, __LINE__, "pad");
  expect_error([&] { (void)pad(ones({3}), {int64_t{1} << 48, 0}); }, __LINE__, "pad");
}

TEST(ShapeLimits, ConcatBeyondTheCapIsAnError) {
  const int64_t e = (int64_t{1} << 47) + (int64_t{1} << 46);
  expect_error([&] { (void)concat({ones({e}), ones({e})}, 0); }, __LINE__, "concat");
}

TEST(ShapeLimits, OneHotBeyondTheCapIsAnError) {
  Tensor t = from_vector<int64_t>({0, 1});
  expect_error([&] { (void)F::one_hot(t, int64_t{1} << 48); }, __LINE__, "one_hot");
}

TEST(ShapeLimits, WindowArithmeticThatOverflowsIsAnError) {
  Tensor x = ones({1, 1, 4, 4}), w = ones({1, 1, 2, 2});
  expect_error([&] { (void)F::conv2d(x, w, {}, 1, 0, kMax, 1); }, __LINE__, "conv2d");
  expect_error([&] { (void)F::conv2d(x, w, {}, 1, kMax / 2 + 1, 1, 1); }, __LINE__, "conv2d");
  expect_error([&] { (void)F::max_pool2d(x, kMax, 1, kMax / 2, 1); }, __LINE__, "max_pool2d");
  expect_error([&] { (void)F::avg_pool2d(x, {1, kMax}, 1, {0, kMax / 2}); }, __LINE__, "avg_pool2d");
}

// ---------------------------------------------------------------- the property test

// Extents and parameters near the limits: around 2^31, 2^32, 2^48, 2^62, 0, negative.
int64_t extreme(std::mt19937_64& rng) {
  static const int64_t pool[] = {0, 1, 2, 3, 5, (int64_t{1} << 31) - 1, int64_t{1} << 31, (int64_t{1} << 31) + 1,
                                 int64_t{1} << 32, (int64_t{1} << 32) + 1, int64_t{1} << 24, int64_t{1} << 47,
                                 int64_t{1} << 48, (int64_t{1} << 48) + 1, int64_t{1} << 62, kMax - 1, kMax, -1, -2,
                                 -(int64_t{1} << 31), std::numeric_limits<int64_t>::min()};
  return pool[rng() % std::size(pool)];
}
int64_t small_or_extreme(std::mt19937_64& rng) { return rng() % 2 ? static_cast<int64_t>(rng() % 5) : extreme(rng); }

IntList random_shape(std::mt19937_64& rng, bool allow_negative) {
  IntList s(rng() % 4);
  for (int64_t& d : s) {
    d = small_or_extreme(rng);
    if (!allow_negative && d < 0) d = 1;
  }
  return s;
}

bool valid(const IntList& s) {
  i128 n = 1;
  for (int64_t d : s) {
    if (d < 0) return false;
    if (d > 0) n *= d;
    if (n > kCap) return false;
  }
  return true;
}

i128 count(const IntList& s) {
  i128 n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Either `make` throws kiln::Error and `expected` is nullopt, or it returns a tensor of shape
// *expected; `check` then looks at the values of a small result.
void expect_result(const std::string& what, const std::function<Tensor()>& make, const std::optional<IntList>& expected,
                   const std::function<void(const Tensor&)>& check = {}) {
  std::optional<Tensor> t;
  try {
    t = make();
  } catch (const Error& e) {
    EXPECT_FALSE(expected) << what << ": threw for a valid result: " << e.what();
    return;
  }
  ASSERT_TRUE(expected) << what << ": accepted, giving " << t->type_str();
  ASSERT_EQ(t->shape(), *expected) << what;
  if (check && t->numel() <= 64) check(*t);
}

std::optional<IntList> ref_broadcast(IntList a, IntList b) {
  if (a.size() < b.size()) std::swap(a, b);
  b.insert(b.begin(), a.size() - b.size(), 1);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && a[i] != 1 && b[i] != 1) return std::nullopt;
    if (a[i] == 1) a[i] = b[i];
  }
  return valid(a) ? std::optional(a) : std::nullopt;
}

void all_equal(const Tensor& t, double v) {
  for (double x : t.to_vector<double>()) ASSERT_EQ(x, v);
}

void broadcast_case(std::mt19937_64& rng) {
  const IntList a = random_shape(rng, false), b = random_shape(rng, false);
  if (!valid(a) || !valid(b)) return;
  expect_result("add " + std::to_string(a.size()), [&] { return ones(a) + ones(b); }, ref_broadcast(a, b),
                [](const Tensor& t) { all_equal(t, 2); });
}

void creation_case(std::mt19937_64& rng) {
  const IntList s = random_shape(rng, true);
  const std::optional<IntList> want = valid(s) ? std::optional(s) : std::nullopt;
  expect_result("full", [&] { return full(s, 3.0); }, want, [](const Tensor& t) { all_equal(t, 3); });
  expect_result("randn", [&] { return randn(s, 1); }, want);
  const IntList e = random_shape(rng, false);
  expect_result("expand", [&] { return ones({1}).expand(e); }, e.empty() || !valid(e) ? std::nullopt : std::optional(e),
                [](const Tensor& t) { all_equal(t, 1); });
}

void matmul_case(std::mt19937_64& rng) {
  const int64_t m = small_or_extreme(rng), k = small_or_extreme(rng), n = small_or_extreme(rng);
  if (!valid({m, k}) || !valid({k, n})) return;
  const bool small = count({m, k, n}) <= 4096;
  expect_result("matmul", [&] { return matmul(ones({m, k}), ones({k, n})); },
                valid({m, n}) ? std::optional(IntList{m, n}) : std::nullopt,
                [&](const Tensor& t) { if (small) all_equal(t, static_cast<double>(k)); });
}

void reshape_case(std::mt19937_64& rng) {
  IntList s = random_shape(rng, false), t = random_shape(rng, true);
  if (!valid(s)) return;
  if (!t.empty() && rng() % 2) t[rng() % t.size()] = -1;
  std::optional<IntList> want = t;
  i128 known = 1;
  int infer = -1;
  for (size_t d = 0; d < t.size(); ++d) {
    if (t[d] == -1 && infer < 0) infer = static_cast<int>(d);
    else if (t[d] < 0) want = std::nullopt;
    else known *= t[d];
    known = std::min(known, i128{1} << 60); // still more than any count, and no overflow of i128
  }
  if (want && infer >= 0) {
    if (known == 0 || count(s) % known != 0) want = std::nullopt;
    else (*want)[infer] = static_cast<int64_t>(count(s) / known);
  }
  if (want && (!valid(*want) || count(*want) != count(s))) want = std::nullopt;
  expect_result("reshape", [&] { return zeros(s).reshape(t); }, want);
}

void slice_case(std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(rng() % 8), start = small_or_extreme(rng), end = small_or_extreme(rng),
                step = small_or_extreme(rng);
  std::vector<float> want;
  auto clamp = [n](i128 i) { return static_cast<int64_t>(std::clamp<i128>(i < 0 ? i + n : i, 0, n)); };
  for (int64_t i = clamp(start); step > 0 && i < clamp(end); i = static_cast<int64_t>(std::min<i128>(i128{i} + step, n)))
    want.push_back(static_cast<float>(i));
  expect_result("slice", [&] { return arange(0, static_cast<double>(n), 1, kFloat32).slice(0, start, end, step); },
                step > 0 ? std::optional(IntList{static_cast<int64_t>(want.size())}) : std::nullopt,
                [&](const Tensor& t) { ASSERT_EQ(t.to_vector<float>(), want); });
}

void pad_case(std::mt19937_64& rng) {
  const int64_t n = static_cast<int64_t>(rng() % 4), before = small_or_extreme(rng), after = small_or_extreme(rng);
  const i128 e = i128{n} + before + after;
  // negative amounts crop (as torch.nn.functional.pad), at most the extent between them
  const i128 cut_before = before < 0 ? -i128{before} : 0, cut_after = after < 0 ? -i128{after} : 0;
  const bool ok = cut_before + cut_after <= n && e <= kCap;
  const i128 first = std::max<int64_t>(before, 0), kept = n - cut_before - cut_after; // where the ones are
  expect_result("pad", [&] { return pad(ones({n}), {before, after}, 7.0); },
                ok ? std::optional(IntList{static_cast<int64_t>(e)}) : std::nullopt, [&](const Tensor& t) {
                  const std::vector<float> v = t.to_vector<float>();
                  for (size_t i = 0; i < v.size(); ++i)
                    ASSERT_EQ(v[i], i128(i) >= first && i128(i) < first + kept ? 1 : 7);
                });
}

void concat_case(std::mt19937_64& rng) {
  const int64_t a = small_or_extreme(rng), b = small_or_extreme(rng);
  if (!valid({a, 2}) || !valid({b, 2})) return;
  const i128 e = i128{a} + b;
  expect_result("concat", [&] { return concat({ones({a, 2}), full({b, 2}, 2.0)}, 0); },
                e * 2 <= kCap ? std::optional(IntList{static_cast<int64_t>(e), 2}) : std::nullopt);
}

void arange_case(std::mt19937_64& rng) {
  static const double pool[] = {0, 1, -1, 3, 0.5, -2.5, 1e15, -1e15, 9.3e18, 0x1p48, 0x1p63, 1e300, -1e300, 7};
  const double start = pool[rng() % std::size(pool)], end = pool[rng() % std::size(pool)],
               step = pool[rng() % std::size(pool)];
  const double n = std::ceil((end - start) / step); // in double, as PyTorch computes it
  const bool ok = step != 0 && (end - start) * step >= 0 && n <= static_cast<double>(kCap);
  expect_result("arange", [&] { return arange(start, end, step, kFloat64); },
                ok ? std::optional(IntList{static_cast<int64_t>(n)}) : std::nullopt, [&](const Tensor& t) {
                  const std::vector<double> v = t.to_vector<double>();
                  for (size_t i = 0; i < v.size(); ++i) {
                    const double r = start + static_cast<double>(i) * step;
                    ASSERT_NEAR(v[i], r, 1e-15 * std::fabs(r));
                  }
                });
}

void one_hot_case(std::mt19937_64& rng) {
  const int64_t c = small_or_extreme(rng);
  const bool ok = c > 1 && i128{c} * 2 <= kCap; // the realized targets hold class 1
  expect_result("one_hot", [&] { return F::one_hot(from_vector<int64_t>({1, 0}), c); },
                ok ? std::optional(IntList{2, c}) : std::nullopt, [&](const Tensor& t) {
                  const std::vector<int64_t> v = t.to_vector<int64_t>();
                  for (int64_t i = 0; i < 2 * c; ++i) ASSERT_EQ(v[i], i == 1 || i == c ? 1 : 0);
                });
}

// Max-pool windows over a [1, 1, 4, 5] input: the output extent from exact arithmetic.
void pool_case(std::mt19937_64& rng) {
  const int64_t k = small_or_extreme(rng), s = small_or_extreme(rng), p = small_or_extreme(rng),
                d = small_or_extreme(rng);
  auto out = [&](int64_t n) { // floor division
    const i128 num = i128{n} + 2 * i128{p} - i128{d} * (k - 1) - 1, q = num / (s > 0 ? s : 1);
    return q - (q * (s > 0 ? s : 1) > num) + 1;
  };
  const bool ok = k > 0 && s > 0 && d > 0 && p >= 0 && p <= k / 2 && out(4) > 0 && out(5) > 0 &&
                  i128{k} * k * out(4) * out(5) <= kCap;
  expect_result("max_pool2d", [&] { return F::max_pool2d(ones({1, 1, 4, 5}), k, s, p, d); },
                ok ? std::optional(IntList{1, 1, static_cast<int64_t>(out(4)), static_cast<int64_t>(out(5))})
                   : std::nullopt,
                [&](const Tensor& t) { if (p == 0 && k * k <= 64) all_equal(t, 1); }); // p > 0: a window may hold only padding
}

TEST(ShapeLimits, RandomExtremeShapesThroughEveryOpFamily) {
  std::mt19937_64 rng(16);
  const std::function<void(std::mt19937_64&)> families[] = {broadcast_case, creation_case, matmul_case,
                                                            reshape_case,   slice_case,    pad_case,
                                                            concat_case,    arange_case,   one_hot_case,
                                                            pool_case};
  for (int trial = 0; trial < 3000 && !HasFatalFailure(); ++trial) families[trial % std::size(families)](rng);
}

} // namespace
} // namespace kiln

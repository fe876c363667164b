// Reductions, NaN handling and scans (kiln/tensor.h, reductions.cpp) against PyTorch 1.13
// (tests/pytorch_reductions_table.inc, from tests/tools/pytorch_reductions_table.py): values, indices and the
// gradients of sum(out * u) of every f64 input, with ties, NaN and infinities, zero-size and 0-d inputs, negative
// dims and keepdim; gradchecks of a few, fused / unfused / compile() agreement, and the errors.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "graph/interpret.h"
#include "kiln/kiln.h"
#include "tests/call_table.h"
#include "tests/error_of.h"
#include "tests/table_checks.h"

namespace kiln {
namespace {

using test::Call;
using test::Case;
using test::expect_close;
using test::expect_error_at;
using test::values;

using test::kInf;
using test::kNaN;

const std::vector<Case> kCases = {
#include "tests/pytorch_reductions_table.inc"
};

std::vector<Tensor> two(const std::pair<Tensor, Tensor>& p) { return {p.first, p.second}; }

// The kiln call of each call id of the table (the same arguments as the PyTorch call of that id).
const std::map<std::string, Call>& calls() {
  using V = const std::vector<Tensor>&;
  static const std::map<std::string, Call> m = {
      {"prod", [](V x) { return std::vector{prod(x[0])}; }},
      {"prod_d1", [](V x) { return std::vector{prod(x[0], 1)}; }},
      {"prod_dm1_keep", [](V x) { return std::vector{prod(x[0], -1, true)}; }},
      {"prod_d0", [](V x) { return std::vector{prod(x[0], 0)}; }},
      {"amax_d1", [](V x) { return std::vector{amax(x[0], {1})}; }},
      {"amax_d02_keep",
       [](V x) {
         return std::vector{amax(x[0], {0, -1}, true)};
       }},
      {"amin_all", [](V x) { return std::vector{amin(x[0])}; }},
      {"amin_dm1", [](V x) { return std::vector{amin(x[0], {-1})}; }},
      {"aminmax", [](V x) { return two(aminmax(x[0])); }},
      {"aminmax_d0_keep", [](V x) { return two(aminmax(x[0], 0, true)); }},
      {"any", [](V x) { return std::vector{any(x[0])}; }},
      {"any_d1", [](V x) { return std::vector{any(x[0], 1)}; }},
      {"all", [](V x) { return std::vector{all(x[0])}; }},
      {"all_dm1_keep", [](V x) { return std::vector{all(x[0], -1, true)}; }},
      {"count_nonzero", [](V x) { return std::vector{count_nonzero(x[0])}; }},
      {"count_nonzero_d0", [](V x) { return std::vector{count_nonzero(x[0], {0})}; }},
      {"count_nonzero_d01",
       [](V x) {
         return std::vector{count_nonzero(x[0], {0, 1})};
       }},
      {"nansum", [](V x) { return std::vector{nansum(x[0])}; }},
      {"nansum_d1_keep", [](V x) { return std::vector{nansum(x[0], {1}, true)}; }},
      {"nanmean", [](V x) { return std::vector{nanmean(x[0])}; }},
      {"nanmean_dm1", [](V x) { return std::vector{nanmean(x[0], {-1})}; }},
      {"isnan", [](V x) { return std::vector{isnan(x[0])}; }},
      {"isinf", [](V x) { return std::vector{isinf(x[0])}; }},
      {"isfinite", [](V x) { return std::vector{isfinite(x[0])}; }},
      {"isposinf", [](V x) { return std::vector{isposinf(x[0])}; }},
      {"isneginf", [](V x) { return std::vector{isneginf(x[0])}; }},
      {"nan_to_num", [](V x) { return std::vector{nan_to_num(x[0])}; }},
      {"nan_to_num_args", [](V x) { return std::vector{nan_to_num(x[0], 1.5, 100.0, -7.0)}; }},
      {"median", [](V x) { return std::vector{median(x[0])}; }},
      {"median_d1", [](V x) { return two(median(x[0], 1)); }},
      {"median_dm2_keep", [](V x) { return two(median(x[0], -2, true)); }},
      {"nanmedian", [](V x) { return std::vector{nanmedian(x[0])}; }},
      {"nanmedian_d1", [](V x) { return two(nanmedian(x[0], 1)); }},
      {"nanmedian_d1_values", [](V x) { return std::vector{nanmedian(x[0], 1).first}; }},
      {"kthvalue_k2_d1", [](V x) { return two(kthvalue(x[0], 2, 1)); }},
      {"kthvalue_k4_dm1_keep", [](V x) { return two(kthvalue(x[0], 4, -1, true)); }},
      {"kthvalue_k1_d0", [](V x) { return two(kthvalue(x[0], 1, 0)); }},
      {"quantile_q03", [](V x) { return std::vector{quantile(x[0], 0.3)}; }},
      {"quantile_q_d1",
       [](V x) {
         return std::vector{quantile(x[0], from_vector<double>({0, 0.25, 0.5, 0.9, 1}), 1)};
       }},
      {"quantile_q_d0_keep",
       [](V x) {
         return std::vector{quantile(x[0], from_vector<double>({0.1, 0.75}), 0, true)};
       }},
      {"quantile_q07_dm1_lower", [](V x) { return std::vector{quantile(x[0], 0.7, -1, false, "lower")}; }},
      {"quantile_q_d1_higher",
       [](V x) {
         return std::vector{quantile(x[0], from_vector<double>({0.2, 0.5, 0.61}), 1, false, "higher")};
       }},
      {"quantile_q_d1_nearest",
       [](V x) {
         return std::vector{quantile(x[0], from_vector<double>({0.125, 0.375, 0.5, 0.875}), 1, false, "nearest")};
       }},
      {"quantile_q_d1_midpoint",
       [](V x) {
         return std::vector{quantile(x[0], from_vector<double>({0.2, 0.5, 1}), 1, false, "midpoint")};
       }},
      {"quantile_keep_all", [](V x) { return std::vector{quantile(x[0], 0.4, std::nullopt, true)}; }},
      {"nanquantile_q_d1",
       [](V x) {
         return std::vector{nanquantile(x[0], from_vector<double>({0, 0.3, 0.5, 1}), 1)};
       }},
      {"nanquantile_q06", [](V x) { return std::vector{nanquantile(x[0], 0.6)}; }},
      {"cummax_d0", [](V x) { return two(cummax(x[0], 0)); }},
      {"cummax_d1", [](V x) { return two(cummax(x[0], 1)); }},
      {"cummin_dm1", [](V x) { return two(cummin(x[0], -1)); }},
      {"cummin_d0", [](V x) { return two(cummin(x[0], 0)); }},
      {"logcumsumexp_d1", [](V x) { return std::vector{logcumsumexp(x[0], 1)}; }},
      {"logcumsumexp_dm2", [](V x) { return std::vector{logcumsumexp(x[0], -2)}; }},
      {"diff", [](V x) { return std::vector{diff(x[0])}; }},
      {"diff_n2_d0", [](V x) { return std::vector{diff(x[0], 2, 0)}; }},
      {"diff_n3_dm1", [](V x) { return std::vector{diff(x[0], 3, -1)}; }},
      {"diff_prepend_append", [](V x) { return std::vector{diff(x[0], 1, 1, x[1], x[2])}; }},
      {"diff_n2_append", [](V x) { return std::vector{diff(x[0], 2, 0, Tensor(), x[1])}; }},
      {"lerp_w03", [](V x) { return std::vector{lerp(x[0], x[1], 0.3)}; }},
      {"lerp_w08", [](V x) { return std::vector{lerp(x[0], x[1], 0.8)}; }},
      {"lerp_wt", [](V x) { return std::vector{lerp(x[0], x[1], x[2])}; }},
      {"addcmul", [](V x) { return std::vector{addcmul(x[0], x[1], x[2])}; }},
      {"addcmul_v", [](V x) { return std::vector{addcmul(x[0], x[1], x[2], -0.5)}; }},
      {"addcdiv_v", [](V x) { return std::vector{addcdiv(x[0], x[1], x[2], 2.5)}; }},
      {"xlogy", [](V x) { return std::vector{xlogy(x[0], x[1])}; }},
      {"xlogy_s", [](V x) { return std::vector{xlogy(x[0], 3.0)}; }},
      {"clamp_min", [](V x) { return std::vector{clamp_min(x[0], -0.5)}; }},
      {"clamp_max", [](V x) { return std::vector{clamp_max(x[0], 0.25)}; }},
      {"var_mean_d1", [](V x) { return two(var_mean(x[0], {1})); }},
      {"var_mean_biased_d0_keep", [](V x) { return two(var_mean(x[0], {0}, false, true)); }},
      {"var_mean_c2_dm1", [](V x) { return two(var_mean(x[0], {-1}, 2)); }},
      {"std_mean", [](V x) { return two(std_mean(x[0])); }},
      {"std_mean_d1_biased", [](V x) { return two(std_mean(x[0], {1}, false)); }},
      {"logaddexp", [](V x) { return std::vector{logaddexp(x[0], x[1])}; }},
  };
  return m;
}

TEST(Reductions, MatchPyTorch) { test::expect_call_table(kCases, calls()); }

TEST(Reductions, EveryCallIsInTheTable) { test::expect_every_call_used(kCases, calls()); }

// Distinct values (no ties, no zeros unless asked): finite differences see one smooth branch.
Tensor spread(IntList shape, uint64_t seed) { return test::rnd(std::move(shape), seed) * 3 + 0.1; }

TEST(Reductions, Gradcheck) {
  using V = const std::vector<Tensor>&;
  const Tensor zeros_in = from_vector<double>({0.5, 0, -1.5, 2, 0, 0.25, 3, -0.7, 1.1, 0, 0.8, 1.3}, {3, 4});
  test::expect_gradcheck([](V x) { return prod(x[0], 1); }, {zeros_in});
  test::expect_gradcheck([](V x) { return prod(x[0]); }, {spread({2, 3}, 1)});
  test::expect_gradcheck([](V x) { return median(x[0], 0).first; }, {spread({5, 3}, 2)});
  test::expect_gradcheck([](V x) { return nanmedian(x[0]); }, {spread({7}, 3)});
  test::expect_gradcheck([](V x) { return quantile(x[0], from_vector<double>({0.3, 0.8}), 1); }, {spread({2, 6}, 4)});
  test::expect_gradcheck([](V x) { return cummax(x[0], 1).first; }, {spread({2, 5}, 5)});
  test::expect_gradcheck([](V x) { return logcumsumexp(x[0], 0); }, {spread({4, 2}, 6)});
  test::expect_gradcheck([](V x) { return lerp(x[0], x[1], x[2]); }, {spread({3}, 7), spread({3}, 8), spread({3}, 9)});
  test::expect_gradcheck([](V x) { return xlogy(x[0], x[1]); }, {spread({4}, 10), abs(spread({4}, 11)) + 0.5});
  test::expect_gradcheck([](V x) { return logaddexp(x[0], x[1]); }, {spread({2, 3}, 12), spread({3}, 13)});
  test::expect_gradcheck([](V x) { return addcdiv(x[0], x[1], x[2], 0.5); },
                         {spread({3}, 14), spread({3}, 15), abs(spread({3}, 16)) + 1});
}

TEST(Reductions, ProdGradientIsDifferentiable) {
  // The custom rule is built from kiln ops: the second derivative (of the gradient with one zero in a row) checks.
  const Tensor x = from_vector<double>({0.5, 0, -1.5, 2, 1.5, 0.25, 3, -0.7}, {2, 4});
  test::expect_gradcheck(
      [](const std::vector<Tensor>& in) {
        const Tensor g = grad({prod(in[0], 1).sum()}, {in[0]}, {}, false, /*create_graph=*/true)[0];
        return (g * g).sum();
      },
      {x});
}

TEST(Reductions, FusedUnfusedAndCompiledAgree) {
  test::expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& in) {
        const Tensor x = in[0];
        const Tensor q = quantile(x, from_vector<double>({0.25, 0.5}), 1);
        const auto [v, i] = cummin(x, -1);
        const Tensor y = (prod(x, 1) + median(x, 0, true).first.sum() + logcumsumexp(x, 1).sum(1)).sum() + q.sum() +
                         v.sum() + nansum(xlogy(abs(x), x * x));
        return std::vector<Tensor>{y, i, grad({y}, {x})[0]};
      },
      [](uint64_t seed) {
        return std::vector<Tensor>{test::rnd({3, 5}, seed).requires_grad_()};
      });
}

// ---------------------------------------------------------------- O(n) scans

// The running max (is_max) or min of each row of [rows, n] in torch's order (a NaN sticks, a tie takes the
// later element), and the positions of the values: a plain loop.
template <class T>
std::pair<std::vector<T>, std::vector<int64_t>> running_extreme(const std::vector<T>& x, int64_t n, bool is_max) {
  std::vector<T> v(x.size());
  std::vector<int64_t> at(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(n); ++r) {
    T acc{};
    int64_t where = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = r * static_cast<size_t>(n) + static_cast<size_t>(i);
      if (i == 0 || std::isnan(x[k]) || (is_max ? x[k] >= acc : x[k] <= acc)) acc = x[k], where = i;
      v[k] = acc;
      at[k] = where;
    }
  }
  return {v, at};
}

// logcumsumexp of each row of [rows, n] in double: m + log1p(exp(-|acc - x|)), rounded to T.
template <class T> std::vector<T> running_lse(const std::vector<T>& x, int64_t n) {
  std::vector<T> out(x.size());
  for (size_t r = 0; r < x.size() / static_cast<size_t>(n); ++r) {
    double acc = -kInf;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = r * static_cast<size_t>(n) + static_cast<size_t>(i);
      const double xi = x[k], m = std::max(acc, xi);
      acc = std::isinf(m) ? m : m + std::log1p(std::exp(-std::fabs(acc - xi)));
      out[k] = static_cast<T>(acc);
    }
  }
  return out;
}

// Both values are NaN, or they are equal with one sign (a running max keeps -0.0 as torch does).
template <class T> bool same_value(T a, T b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

// Rows of 200,000 (the O(n^2) composite of before would have needed 320 GB a row in f64): values with
// ties, NaNs and infinities late in the row, in f32 and f64, along the last dim and through a transpose.
template <class T> void expect_long_rows(DType dt) {
  constexpr int64_t n = 200000;
  SCOPED_TRACE(std::string(dtype_name(dt)));
  std::vector<T> xv = (floor(test::rnd({2, n}, 70) * 40.0) * 0.125).to(dt).template to_vector<T>();
  xv[150000] = T(NAN), xv[180000] = T(NAN), xv[n + 1000] = T(INFINITY), xv[n + 199999] = T(-INFINITY);
  xv[0] = 9, xv[1] = T(-0.0), xv[2] = 0, xv[n] = -9, xv[n + 1] = 0, xv[n + 2] = T(-0.0); // a tie takes the later zero
  const Tensor x = from_vector<T>(xv, {2, n});
  for (bool is_max : {true, false}) {
    const auto [want_v, want_i] = running_extreme(xv, n, is_max);
    const auto [v, i] = is_max ? cummax(x, 1) : cummin(x.transpose(0, 1), 0);
    const std::vector<T> got = (is_max ? v : v.transpose(0, 1)).template to_vector<T>();
    const std::vector<int64_t> got_i = (is_max ? i : i.transpose(0, 1)).template to_vector<int64_t>();
    size_t bad = 0;
    for (size_t k = 0; k < got.size(); ++k) bad += !same_value(got[k], want_v[k]) || got_i[k] != want_i[k];
    EXPECT_EQ(bad, 0u) << (is_max ? "cummax" : "cummin");
  }
  const std::vector<T> smooth = (test::rnd({2, n}, 71) * 4.0).to(dt).template to_vector<T>();
  const std::vector<T> want = running_lse(smooth, n),
                       got = logcumsumexp(from_vector<T>(smooth, {2, n}), -1).template to_vector<T>();
  double worst = 0;
  for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::fabs(double(got[k]) - double(want[k])));
  EXPECT_LE(worst, dt == kFloat32 ? 4e-6 : 1e-11) << "logcumsumexp"; // f32: an ulp at ~13; f64: rounding over 2e5 steps
}

TEST(Scans, LongRowsAreLinearAndMatchALoop) {
  expect_long_rows<float>(kFloat32);
  expect_long_rows<double>(kFloat64);
}

// cummax, cummin and logcumsumexp (values and indices) of x along d, with NaN, infinities and ties.
std::vector<Tensor> scans_of(const Tensor& x, int64_t d) {
  return {cummax(x * 2.0, d).first, cummax(x * 2.0, d).second, cummin(x - 1.0, d).first, cummin(x - 1.0, d).second,
          logcumsumexp(x * 5.0, d)};
}

TEST(Scans, MatchTheInterpreterAndUnfused) {
  std::vector<double> v = values(test::rnd({5, 33}, 72) * 3.0);
  v[4] = kNaN, v[40] = kInf, v[41] = -kInf, v[70] = -kInf, v[100] = kNaN, v[101] = kInf;
  for (int64_t k = 132; k < 165; ++k) v[static_cast<size_t>(k)] = -kInf; // a row of -inf: logcumsumexp -inf
  for (DType dt : {kFloat64, kFloat32}) {
    const Tensor x = from_vector<double>(v, {5, 33}).to(dt);
    for (int64_t d : {0, 1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(d));
      const std::vector<Tensor> outs = scans_of(x, d);
      const bool fusion = options().fusion;
      options().fusion = !fusion;
      const std::vector<Tensor> other_mode = scans_of(x, d);
      realize(other_mode);
      options().fusion = fusion;
      for (size_t o = 0; o < outs.size(); ++o) {
        const Tensor& t = outs[o];
        const graph::InterpretResult want = graph::interpret_one(t.node());
        const std::vector<double> got = values(t);
        ASSERT_EQ(got.size(), want.values.size());
        for (size_t k = 0; k < got.size(); ++k) {
          const double w = want.values[k], tol = std::isfinite(w) ? 1e-13 * std::max(1.0, std::fabs(w)) : 0;
          EXPECT_TRUE(same_value(got[k], w) || std::fabs(got[k] - w) <= tol) << k << ": " << got[k] << " vs " << w;
        }
        const std::vector<double> other = values(other_mode[o]);
        for (size_t k = 0; k < got.size(); ++k)
          EXPECT_TRUE(same_value(got[k], other[k])) << "fusion mode " << o << " " << k;
      }
    }
  }
  EXPECT_EQ(cummax(from_vector<int32_t>({3, -1, 7, 7, 2}), 0).first.to_vector<int32_t>(),
            (std::vector<int32_t>{3, 3, 7, 7, 7}));
  EXPECT_EQ(cummin(from_vector<bool>({true, false, true}), 0).second.to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 1}));
}

TEST(Scans, Gradcheck) {
  using V = const std::vector<Tensor>&;
  test::expect_gradcheck([](V x) { return cummin(x[0], 0).first; }, {spread({6, 3}, 20)});
  test::expect_gradcheck([](V x) { return logcumsumexp(x[0] * 4.0, 1); }, {spread({3, 9}, 21)});
  test::expect_gradcheck([](V x) { return logcumsumexp(x[0] - 100.0, -1) * x[0]; }, {spread({2, 7}, 22)});
  // second order: the VJP of logcumsumexp is itself logcumsumexp scans (adjoint signs mixed)
  test::expect_gradcheck(
      [](V x) {
        const Tensor w = from_vector<double>({1, -2, 0.5, 0, -1, 3}, {1, 6});
        const Tensor g = grad({(logcumsumexp(x[0], 1) * w).sum()}, {x[0]}, {}, false, /*create_graph=*/true)[0];
        return (g * g).sum();
      },
      {spread({2, 6}, 23)});
  // the forward mode (jvp of cummax gathers the tangent; of logcumsumexp, its scans) against central differences
  const Tensor x = spread({3, 8}, 24), t = spread({3, 8}, 25);
  for (int64_t d : {0, 1}) {
    const auto f = [d](const Tensor& in) { return cummax(in, d).first * 0.5 + logcumsumexp(in * 2.0, d); };
    const Tensor tangent = jvp(f, x, t).second;
    const double h = 1e-6;
    expect_close(values(tangent), values((f(x + t * h) - f(x - t * h)) / (2 * h)), 1e-7,
                 "jvp dim " + std::to_string(d));
  }
}

TEST(Scans, FusedUnfusedAndCompiledAgree) {
  test::expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& in) {
        const Tensor x = in[0];
        const auto [v, i] = cummax(x * 2.0 + 1.0, 1);
        const auto [w, j] = cummin(x, 0);
        const Tensor l = logcumsumexp(x * 3.0, 1), l32 = logcumsumexp(x.to(kFloat32), 0);
        const Tensor y = (v * l).sum() + w.sum() + (l32.to(kFloat64) * 0.5).sum();
        return std::vector<Tensor>{y, i, j, exp(l) + 1.0, grad({y}, {x})[0]};
      },
      [](uint64_t seed) {
        return std::vector<Tensor>{test::rnd({4, 300}, seed).requires_grad_()};
      });
}

TEST(Reductions, Errors) {
  const Tensor x = test::rnd({2, 3}, 1);
  const Tensor e = zeros({2, 0}, kFloat64);
  const std::string file = __FILE__;
  expect_error_at([&] { prod(x, 2); }, file, __LINE__, "prod", {"dim 2", "f64[2,3]"});
  expect_error_at([&] { amax(x, {0, -2}); }, file, __LINE__, "amax", {"more than once", "f64[2,3]"});
  expect_error_at([&] { amin(e, {1}); }, file, __LINE__, "amin", {"empty", "f64[2,0]"});
  expect_error_at([&] { any(x, -3); }, file, __LINE__, "any", {"dim -3", "f64[2,3]"});
  expect_error_at([&] { nanmean(arange(4)); }, file, __LINE__, "nanmean", {"floating", "i64[4]"});
  expect_error_at([&] { median(e, 1); }, file, __LINE__, "median", {"empty", "f64[2,0]"});
  expect_error_at([&] { kthvalue(x, 4, 1); }, file, __LINE__, "kthvalue", {"k 4", "extent 3", "f64[2,3]"});
  expect_error_at([&] { kthvalue(x, 0, -1); }, file, __LINE__, "kthvalue", {"k 0", "f64[2,3]"});
  expect_error_at([&] { quantile(x, 1.5, 1); }, file, __LINE__, "quantile", {"[0, 1]", "f64[2,3]"});
  const Tensor q = from_vector<double>({0.5, -0.1});
  expect_error_at([&] { nanquantile(x, q, 0); }, file, __LINE__, "nanquantile", {"[0, 1]", "f64[2]"});
  expect_error_at([&] { quantile(x, 0.5, 0, false, "cubic"); }, file, __LINE__, "quantile", {"'cubic'", "f64[2,3]"});
  expect_error_at([&] { quantile(x, from_vector<float>({0.5f}), 0); }, file, __LINE__, "quantile", {"dtype", "f32[1]"});
  expect_error_at([&] { quantile(e, 0.5); }, file, __LINE__, "quantile", {"empty", "f64[2,0]"});
  expect_error_at([&] { cummax(x, 2); }, file, __LINE__, "cummax", {"dim 2", "f64[2,3]"});
  expect_error_at([&] { logcumsumexp(arange(3), 0); }, file, __LINE__, "logcumsumexp", {"floating", "i64[3]"});
  expect_error_at([&] { diff(x, 1, 1, zeros({3, 1}, kFloat64)); }, file, __LINE__, "diff", {"prepend", "f64[3,1]"});
  expect_error_at([&] { diff(x, -1); }, file, __LINE__, "diff", {"non-negative", "f64[2,3]"});
  expect_error_at([&] { diff(zeros({}, kFloat64)); }, file, __LINE__, "diff", {"1 dim", "f64[]"});
  expect_error_at([&] { lerp(x, x.to(kFloat32), 0.5); }, file, __LINE__, "lerp", {"dtype", "f32[2,3]"});
  expect_error_at([&] { lerp(x, zeros({4}, kFloat64), 0.5); }, file, __LINE__, "lerp", {"broadcast", "f64[4]"});
  expect_error_at([&] { addcdiv(x, arange(3), arange(3)); }, file, __LINE__, "addcdiv", {"integer", "i64[3]"});
  expect_error_at([&] { xlogy(x, zeros({2}, kFloat64)); }, file, __LINE__, "xlogy", {"broadcast", "f64[2]"});
  expect_error_at([&] { logaddexp(x, arange(3)); }, file, __LINE__, "logaddexp", {"floating", "i64[3]"});
  expect_error_at([&] { var_mean(x, {5}); }, file, __LINE__, "var_mean", {"dim 5", "f64[2,3]"});
  expect_error_at([&] { std_mean(arange(3), {0}, 2); }, file, __LINE__, "std_mean", {"floating", "i64[3]"});
}

} // namespace
} // namespace kiln

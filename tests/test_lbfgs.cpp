// optim::LBFGS against torch.optim.LBFGS 1.13 (tests/pytorch_lbfgs_table.inc): the iterates, the returned
// losses and the closure-call and iteration counts over several step() calls, with and without the
// strong Wolfe line search; its errors.

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim.h"
#include "tests/error_of.h"

using namespace kiln;

namespace {

struct LbfgsOpts {
  double lr;
  int64_t max_iter, max_eval;
  double tolerance_grad, tolerance_change;
  int64_t history_size;
  const char* line_search_fn;
};

struct LbfgsCase {
  const char* name;
  std::string problem;
  LbfgsOpts o;
  std::vector<double> losses;
  std::vector<std::vector<double>> params; ///< [step] all parameters, flat
  std::vector<int64_t> func_evals, n_iter;
};

#include "pytorch_lbfgs_table.inc"

Tensor rosenbrock(const Tensor& a, const Tensor& b) {
  const Tensor x = concat({a, b});
  const int64_t n = x.numel();
  const Tensor head = x.slice(0, 0, n - 1), tail = x.slice(0, 1, n);
  const Tensor r = tail - head * head;
  return (r * r * 100.0 + (1.0 - head) * (1.0 - head)).sum();
}

Tensor least_squares(const Tensor& w, const Tensor& bias) {
  const Tensor a = from_vector(kLsqA, {6, 3}), y = from_vector(kLsqY, {6});
  const Tensor r = matmul(a, w) + bias - y;
  return (r * r).sum() / 2.0;
}

// The case's two parameters (in `dtype`) and its loss of them.
struct Problem {
  std::vector<Tensor> ps;
  Tensor (*f)(const Tensor&, const Tensor&);
  Problem(const std::string& name, DType dtype) {
    const bool rosen = name == "rosenbrock";
    for (const auto* v : rosen ? std::vector{&kA0, &kB0} : std::vector{&kW0, &kBias0})
      ps.push_back(from_vector(*v).to(dtype).detach().requires_grad_());
    f = rosen ? rosenbrock : least_squares;
  }
  Tensor loss() const { return f(ps[0], ps[1]); }
  std::vector<double> flat() const {
    std::vector<double> out;
    for (const Tensor& p : ps) {
      const std::vector<double> v = p.to_vector<double>();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

optim::LBFGSOptions options_of(const LbfgsOpts& o) {
  return {.lr = o.lr, .max_iter = o.max_iter, .max_eval = o.max_eval, .tolerance_grad = o.tolerance_grad,
          .tolerance_change = o.tolerance_change, .history_size = o.history_size, .line_search_fn = o.line_search_fn};
}

} // namespace

// f64: the iterates within 1e-10 (torch's dot products and its fused adds round differently from the host's
// loops; the largest difference measured is 1.1e-11 relative, after 38 iterations), the counts exactly.
TEST(LBFGS, EveryCaseMatchesPyTorchInF64) {
  for (const LbfgsCase& c : kLbfgsCases) {
    Problem pr(c.problem, kFloat64);
    optim::LBFGS opt(pr.ps, options_of(c.o));
    auto closure = [&] {
      opt.zero_grad();
      Tensor loss = pr.loss();
      loss.backward();
      return loss;
    };
    for (size_t s = 0; s < c.losses.size(); ++s) {
      const double loss = opt.step(closure).item<double>();
      EXPECT_NEAR(loss, c.losses[s], 1e-10 * std::max(1.0, std::fabs(c.losses[s]))) << c.name << " step " << s;
      const std::vector<double> got = pr.flat();
      ASSERT_EQ(got.size(), c.params[s].size()) << c.name;
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_NEAR(got[k], c.params[s][k], 1e-10 * std::max(1.0, std::fabs(c.params[s][k])))
            << c.name << " step " << s << " element " << k;
      EXPECT_EQ(opt.func_evals(), c.func_evals[s]) << c.name << " step " << s;
      EXPECT_EQ(opt.n_iter(), c.n_iter[s]) << c.name << " step " << s;
    }
  }
}

TEST(LBFGS, TableCoversBothProblemsWithAndWithoutLineSearch) {
  std::set<std::string> seen;
  for (const LbfgsCase& c : kLbfgsCases)
    seen.insert(c.problem + (std::string(c.o.line_search_fn).empty() ? "" : " wolfe"));
  for (const char* want : {"rosenbrock", "rosenbrock wolfe", "least_squares", "least_squares wolfe"})
    EXPECT_TRUE(seen.count(want)) << want;
}

TEST(LBFGS, F32ParametersReachTheLeastSquaresOptimum) {
  // The host arithmetic is double; f32 parameters are written rounded. The optimum's loss is 1.70825773.
  Problem pr("least_squares", kFloat32);
  optim::LBFGS opt(pr.ps, {.line_search_fn = "strong_wolfe"});
  auto closure = [&] {
    opt.zero_grad();
    Tensor loss = pr.loss();
    loss.backward();
    return loss;
  };
  opt.step(closure);
  EXPECT_EQ(pr.ps[0].dtype(), kFloat32);
  EXPECT_NEAR(pr.loss().item<double>(), 1.7082577298, 1e-5);
}

TEST(LBFGS, AParameterWithoutGradientIsLeftAlone) {
  // As torch: its gradient counts as zeros, so its part of every direction is zero.
  Tensor w = from_vector(kW0).requires_grad_(), bias = from_vector(kBias0).requires_grad_();
  Tensor unused = from_vector<double>({3.0, 4.0}).requires_grad_();
  optim::LBFGS opt({w, unused, bias}, {.line_search_fn = "strong_wolfe"});
  opt.step([&] {
    opt.zero_grad();
    Tensor loss = least_squares(w, bias);
    loss.backward();
    return loss;
  });
  EXPECT_EQ(unused.to_vector<double>(), (std::vector<double>{3.0, 4.0}));
  EXPECT_NEAR(least_squares(w, bias).item<double>(), 1.7082577298, 1e-9);
}

TEST(LBFGS, IsEagerOnlyAndChecksItsOptionsAndClosure) {
  Tensor w = from_vector(kW0).requires_grad_(), bias = from_vector(kBias0).requires_grad_();
  optim::LBFGS opt({w, bias});
  auto closure = [&] {
    opt.zero_grad();
    Tensor loss = least_squares(w, bias);
    loss.backward();
    return loss;
  };
  const std::string file = "test_lbfgs.cpp";
  const int line = __LINE__ + 1;
  auto traced = compile([&](const std::vector<Tensor>& a) { opt.step(closure); return a; });
  test::expect_error_at([&] { traced({w.detach()}); }, file, line, "LBFGS::step", {"cannot run inside a compile() trace"});
  test::expect_error_at([&] { opt.step([&] { return w * 2.0; }); }, file, __LINE__, "LBFGS::step", {"one-element tensor, got f64[3]"});
  test::expect_error_at([&] { opt.step(nullptr); }, file, __LINE__, "LBFGS::step", {"needs a closure"});
  using optim::LBFGS;
  test::expect_error_at([&] { LBFGS({w}, {.max_iter = 0}); }, file, __LINE__, "LBFGS", {"invalid max_iter: 0"});
  test::expect_error_at([&] { LBFGS({w}, {.max_eval = -1}); }, file, __LINE__, "LBFGS", {"invalid max_eval: -1"});
  test::expect_error_at([&] { LBFGS({w}, {.history_size = 0}); }, file, __LINE__, "LBFGS", {"invalid history_size: 0"});
  test::expect_error_at([&] { LBFGS({w}, {.lr = -1}); }, file, __LINE__, "LBFGS", {"invalid learning rate"});
  test::expect_error_at([&] { LBFGS({w}, {.line_search_fn = "backtracking"}); }, file, __LINE__, "LBFGS", {"only 'strong_wolfe' is supported", "'backtracking'"});
  test::expect_error_at([&] { LBFGS({w.detach()}); }, file, __LINE__, "LBFGS", {"parameter 0 does not require grad"});
  // max_eval defaults to max_iter * 5 / 4, as torch.
  EXPECT_EQ(*LBFGS({w}, {.max_iter = 9}).options.max_eval, 11);
}

TEST(LBFGS, AZeroSizeParameterTakesPartInNothing) {
  Tensor w = from_vector(kW0).requires_grad_(), bias = from_vector(kBias0).requires_grad_();
  Tensor empty = zeros({0}, kFloat64).requires_grad_();
  optim::LBFGS opt({empty, w, bias}, {.line_search_fn = "strong_wolfe"});
  opt.step([&] {
    opt.zero_grad();
    Tensor loss = least_squares(w, bias) + empty.sum();
    loss.backward();
    return loss;
  });
  EXPECT_EQ(empty.shape(), (IntList{0}));
  EXPECT_NEAR(least_squares(w, bias).item<double>(), 1.7082577298, 1e-9);
}

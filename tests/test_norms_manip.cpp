// Tensor rearrangement (flip, roll, repeat, tile, repeat_interleave), vector norms (linalg_vector_norm, norm),
// normalize, cosine_similarity, pairwise_distance, group_norm and instance_norm (and their modules): values and
// gradients against PyTorch 1.13 (a generated table, zero-size dims, negative dims, zeros where a norm's
// derivative is singular), gradchecks in f64, fused against unfused and compile(), and error messages naming
// the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "error_of.h"
#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/options.h"
#include "table_checks.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using namespace test; // values, rnd, expect_gradcheck, expect_close, expect_same, weights_for

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kNoDim = -1000;

void expect_error(const std::function<void()>& f, int line, const std::string& op,
                  const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_norms_manip.cpp", line, op, parts);
}

// ---------------------------------------------------------------- against PyTorch

/// A case of the rearrangement and norm table (see tests/tools/pytorch_norms_manip_table.py).
struct ManipCase {
  const char* op;
  IntList shape;
  std::vector<double> input;
  IntList shape2;
  std::vector<double> input2; ///< the second input of cosine_similarity and pairwise_distance ({}: none)
  IntList a, b; ///< dims, shifts, sizes or repeats; roll's dims
  double p, eps;
  int64_t dim; ///< kNoDim: none
  bool keepdim;
  IntList out_shape;
  std::vector<double> out, grad, grad2; ///< PyTorch's output and d(sum(out * u)) of each input
};

/// A case of the group_norm / instance_norm table.
struct NormCase {
  const char* op;
  IntList shape;
  std::vector<double> input;
  int64_t groups;
  std::vector<double> weight, bias, running_mean, running_var; ///< {}: none
  bool use_input_stats;
  double momentum, eps;
  std::vector<double> out, grad, weight_grad, bias_grad, running_mean_after, running_var_after;
};

/// One pass of nn.InstanceNorm1d in the table.
struct InstanceNormPass {
  IntList shape;
  std::vector<double> input, out, stats; ///< stats: the running mean and var after the pass
};

#include "pytorch_norms_manip_table.inc"

std::optional<int64_t> dim_of(const ManipCase& c) { return c.dim == kNoDim ? std::nullopt : std::optional(c.dim); }

/// The kiln call of a table case.
Tensor run_case(const ManipCase& c, const Tensor& x, const Tensor& x2) {
  const std::string op = c.op;
  if (op == "flip") return flip(x, c.a);
  if (op == "roll") return roll(x, c.a, c.b);
  if (op == "repeat") return x.repeat(c.a);
  if (op == "tile") return tile(x, c.a);
  if (op == "repeat_interleave") return repeat_interleave(x, c.a[0], dim_of(c));
  if (op == "repeat_interleave_tensor")
    return repeat_interleave(x, from_vector(c.a, {static_cast<int64_t>(c.a.size())}), dim_of(c));
  if (op == "norm") return linalg_vector_norm(x, c.p, c.a, c.keepdim);
  if (op == "normalize") return F::normalize(x, c.p, c.dim, c.eps);
  if (op == "cosine_similarity") return F::cosine_similarity(x, x2, c.dim, c.eps);
  if (op == "pairwise_distance") return F::pairwise_distance(x, x2, c.p, c.eps, c.keepdim);
  ADD_FAILURE() << "unknown op " << op;
  return x;
}

TEST(NormsManip, MatchesPyTorch) {
  int i = 0;
  for (const ManipCase& c : kManipCases) {
    const std::string what = std::string(c.op) + " case " + std::to_string(i++);
    SCOPED_TRACE(what);
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    Tensor x2 = c.shape2.empty() && c.input2.empty() ? Tensor() : from_vector(c.input2, c.shape2).requires_grad_();
    const Tensor y = run_case(c, x, x2);
    ASSERT_EQ(y.shape(), c.out_shape);
    expect_close(values(y), c.out, 1e-12, "values");
    std::vector<Tensor> inputs{x};
    if (x2.defined()) inputs.push_back(x2);
    const std::vector<Tensor> g = grad({(y * weights_for(y)).sum()}, inputs, {}, /*allow_unused=*/true);
    expect_close(values(g[0]), c.grad, 1e-9, "grad");
    if (x2.defined()) expect_close(values(g[1]), c.grad2, 1e-9, "grad2");
  }
}

Tensor optional_tensor(const std::vector<double>& v) { return v.empty() ? Tensor() : from_vector(v); }

TEST(NormsManip, GroupAndInstanceNormMatchPyTorch) {
  int i = 0;
  for (const NormCase& c : kNormCases) {
    SCOPED_TRACE(std::string(c.op) + " case " + std::to_string(i++));
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    Tensor w = optional_tensor(c.weight), bias = optional_tensor(c.bias);
    if (w.defined()) w.requires_grad_();
    if (bias.defined()) bias.requires_grad_();
    Tensor rm = optional_tensor(c.running_mean), rv = optional_tensor(c.running_var);
    const Tensor y = std::string(c.op) == "group_norm"
                         ? F::group_norm(x, c.groups, w, bias, c.eps)
                         : F::instance_norm(x, rm, rv, w, bias, c.use_input_stats, c.momentum, c.eps);
    ASSERT_EQ(y.shape(), c.shape);
    expect_close(values(y), c.out, 1e-10, "values");
    if (y.numel() == 0) continue;
    (y * weights_for(y)).sum().backward();
    expect_close(values(x.grad()), c.grad, 1e-9, "grad");
    if (w.defined()) expect_close(values(w.grad()), c.weight_grad, 1e-9, "weight grad");
    if (bias.defined()) expect_close(values(bias.grad()), c.bias_grad, 1e-9, "bias grad");
    if (rm.defined()) expect_close(values(rm), c.running_mean_after, 1e-12, "running mean");
    if (rv.defined()) expect_close(values(rv), c.running_var_after, 1e-12, "running var");
  }
}

TEST(NormsManip, InstanceNorm1dRunningStatisticsMatchPyTorch) {
  nn::InstanceNorm1d m(3, 1e-5, 0.3, /*affine=*/true, /*track_running_stats=*/true);
  m.to(kFloat64);
  EXPECT_EQ(m.str(), "InstanceNorm1d(3, eps=1e-05, momentum=0.3, affine=true, track_running_stats=true)");
  int k = 0;
  for (const InstanceNormPass& p : kInstanceNormPasses) {
    m.train(k++ < 2);
    const Tensor y = m(from_vector(p.input, p.shape));
    expect_close(values(y), p.out, 1e-10, "pass " + std::to_string(k) + " output");
    expect_close(values(concat({m.running_mean, m.running_var})), p.stats, 1e-12,
                 "pass " + std::to_string(k) + " stats");
  }
  EXPECT_EQ(m.num_batches_tracked.item<int64_t>(), 0); // PyTorch's instance norm never counts
}

// ---------------------------------------------------------------- gradients, modules, agreement

TEST(NormsManip, Gradcheck) {
  const Tensor u = rnd({3, 4}, 2);
  auto check = [&](std::function<Tensor(const Tensor&)> f, IntList shape, uint64_t seed) {
    expect_gradcheck([&](const std::vector<Tensor>& v) { return (f(v[0]) * weights_for(f(v[0]))).sum(); },
                     {rnd(std::move(shape), seed)});
  };
  check([](const Tensor& x) { return flip(x, {0, -1}); }, {3, 4}, 1);
  check([](const Tensor& x) { return roll(x, {2, -5}, {1, 0}); }, {3, 4}, 2);
  check([](const Tensor& x) { return x.repeat({2, 1, 3}); }, {3, 4}, 3);
  check([](const Tensor& x) { return repeat_interleave(x, 2, 1); }, {3, 4}, 4);
  check([](const Tensor& x) { return x.repeat_interleave(from_vector<int64_t>({0, 3, 1}), 0); }, {3, 4}, 5);
  for (double p : {2.0, 1.0, kInf, -kInf, 3.0, 0.5, -1.5, 1.5})
    check([p](const Tensor& x) { return linalg_vector_norm(x, p, {1}); }, {3, 4}, 6);
  check([](const Tensor& x) { return F::normalize(x, 3, 0); }, {3, 4}, 7);
  check([&](const Tensor& x) { return F::cosine_similarity(x, u.slice(0, 0, 1), 1); }, {3, 4}, 8);
  check([&](const Tensor& x) { return F::pairwise_distance(x, u, 1.5); }, {3, 4}, 9);
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::group_norm(v[0], 2, v[1], v[2]) * v[3]).sum(); },
                   {rnd({2, 4, 3}, 10), rnd({4}, 11), rnd({4}, 12), rnd({2, 4, 3}, 13)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::instance_norm(v[0], Tensor(), Tensor(), v[1], v[2]) * v[3]).sum();
      },
      {rnd({2, 3, 2, 2}, 14), rnd({3}, 15), rnd({3}, 16), rnd({2, 3, 2, 2}, 17)});
}

// Where the 2-norm is 0 its gradient is 0 (PyTorch's subgradient), not sqrt's 0 * inf; norm is linalg_vector_norm.
TEST(NormsManip, NormAtZeroAndAliases) {
  Tensor x = zeros({2, 3}, kFloat64).requires_grad_();
  for (double p : {2.0, 1.0, 3.0, 0.5, kInf}) {
    x.zero_grad();
    linalg_vector_norm(x, p, {1}).sum().backward();
    for (double g : values(x.grad())) EXPECT_EQ(g, 0.0) << "p = " << p;
  }
  const Tensor y = rnd({3, 4}, 20);
  expect_same(values(norm(y, 3, {-1}, true)), values(linalg_vector_norm(y, 3, {1}, true)), "norm");
  expect_same(values(y.norm()), values(sqrt((y * y).sum())), "Tensor::norm");
  EXPECT_EQ(linalg_vector_norm(y.to(kFloat32), 0).dtype(), kFloat32);
  EXPECT_TRUE(std::isnan(linalg_vector_norm(from_vector<double>({kNaN, 1})).item<double>())); // as PyTorch
}

TEST(NormsManip, MethodsAreTheFreeFunctions) {
  const Tensor x = rnd({3, 4}, 21);
  expect_same(values(x.flip({1})), values(flip(x, {1})), "flip");
  expect_same(values(x.roll({1})), values(roll(x, {1})), "roll");
  expect_same(values(x.tile({2})), values(tile(x, {2})), "tile");
  expect_same(values(x.repeat_interleave(2)), values(repeat_interleave(x, 2)), "repeat_interleave");
  expect_same(values(x.repeat({1, 2})), values(tile(x, {2})), "repeat");
  EXPECT_EQ(flip(from_vector<int64_t>({1, 2, 3}), {0}).to_vector<int64_t>(), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_EQ(roll(from_vector<int64_t>({1, 2, 3}), {1}).to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 2}));
  const Tensor mask = from_vector<int64_t>({1, 0, 0}) == from_vector<int64_t>({1, 1, 1});
  EXPECT_EQ(flip(mask, {0}).repeat({2}).to_vector<bool>(), (std::vector<bool>{false, false, true, false, false, true}));
  // integer inputs: x1 - x2 + eps is floating, as PyTorch's (sqrt(3) * 1e-6 in f32)
  const Tensor d = F::pairwise_distance(from_vector<int64_t>({1, 1, 1}), from_vector<int64_t>({1, 1, 1}));
  EXPECT_EQ(d.dtype(), kFloat32);
  EXPECT_NEAR(d.item<double>(), std::sqrt(3.0) * 1e-6, 1e-12);
}

// Each expect_error keeps the failing call on the line its __LINE__ names:
// clang-format off
TEST(NormsManip, GroupNormModule) {
  nn::GroupNorm gn(3, 6);
  EXPECT_EQ(gn.str(), "GroupNorm(3, 6, eps=1e-05, affine=true)");
  EXPECT_EQ(gn.parameters().size(), 2u);
  EXPECT_FALSE(nn::GroupNorm(2, 4, 1e-5, false).weight.defined());
  const Tensor x = randn({2, 6, 5}, 22);
  expect_same(values(gn(x)), values(F::group_norm(x, 3, gn.weight, gn.bias)), "module");
  expect_error([] { nn::GroupNorm(4, 6); }, __LINE__, "GroupNorm", {"divisible by num_groups 4"});
  expect_error([&] { (void)gn(randn({2, 4, 5}, 23)); }, __LINE__, "GroupNorm", {"f32[2,4,5]", "[N, 6, ...]"});
}

TEST(NormsManip, InstanceNormModules) {
  nn::InstanceNorm2d m(4);
  EXPECT_EQ(m.str(), "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false)");
  EXPECT_TRUE(m.parameters().empty());
  EXPECT_TRUE(m.buffers().empty());
  const Tensor x = randn({2, 4, 3, 3}, 24);
  expect_same(values(m(x)), values(F::instance_norm(x)), "module");
  m.eval(); // without running statistics, eval mode uses the input's too
  expect_same(values(m(x)), values(F::instance_norm(x)), "eval");
  expect_same(values(m(x.slice(0, 0, 1).squeeze(0))), values(F::instance_norm(x.slice(0, 0, 1)).squeeze(0)),
              "unbatched");
  EXPECT_EQ(nn::InstanceNorm1d(3)(randn({5, 2, 7}, 25)).shape(), (IntList{5, 2, 7})); // any channels without state
  nn::InstanceNorm1d tracked(3, 1e-5, 0.1, false, true);
  EXPECT_EQ(tracked.buffers().size(), 3u);
  expect_error([&] { (void)tracked(randn({2, 4, 5}, 26)); }, __LINE__, "InstanceNorm1d", {"f32[2,4,5]", "3 channels"});
  expect_error([&] { (void)m(randn({2, 4, 3}, 27).unsqueeze(0).unsqueeze(0)); }, __LINE__, "InstanceNorm2d",
               {"[N, C, H, W]"});
  expect_error([] { nn::InstanceNorm1d(0); }, __LINE__, "InstanceNorm1d", {"positive"});
}

// clang-format on

// The functions in one program, and the gradients of its loss: the same bits fused, unfused and compiled.
std::vector<Tensor> norms_program(const Tensor& x, const Tensor& w, const Tensor& v) {
  const Tensor r = roll(flip(x, {1}), {2, -1}, {1, 2}).repeat({1, 1, 2}); // [2, 4, 6]
  const Tensor g = F::group_norm(r, 2, w, w * 0.5);
  const Tensor i = F::instance_norm(tile(g, {1, 1}) * 2.0);
  const Tensor n = F::normalize(repeat_interleave(i, 2, 2), 3, -1);
  const Tensor c = F::cosine_similarity(n.slice(2, 0, 6), v, 2);
  const Tensor d = F::pairwise_distance(g, i, 1.5) + linalg_vector_norm(x, kInf, {0, 2});
  const Tensor loss = (c * c).sum() + d.sum() + linalg_vector_norm(r, 0.5);
  std::vector<Tensor> out = {n, c, d, loss};
  for (const Tensor& t : grad({loss}, {x, w, v})) out.push_back(t);
  return out;
}

std::vector<Tensor> norms_inputs(uint64_t seed) {
  return {randn({2, 4, 3}, seed).requires_grad_(), randn({4}, seed + 1).requires_grad_(),
          randn({4, 6}, seed + 2).requires_grad_()};
}

TEST(NormsManip, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree([](const std::vector<Tensor>& a) { return norms_program(a[0], a[1], a[2]); },
                                          norms_inputs);
}

// ---------------------------------------------------------------- errors
// Each expect_error keeps the failing call on the line its __LINE__ names:
// clang-format off

TEST(NormsManip, ManipErrors) {
  const Tensor x = rnd({2, 3}, 30);
  expect_error([&] { (void)flip(x, {0, -2}); }, __LINE__, "flip", {"f64[2,3]", "dim -2 appears more than once"});
  expect_error([&] { (void)flip(x, {2}); }, __LINE__, "flip", {"dim 2 is out of range for rank 2"});
  expect_error([&] { (void)roll(x, {1, 2}); }, __LINE__, "roll", {"f64[2,3]", "2 shifts, 0 dims"});
  expect_error([&] { (void)roll(x, {1}, {0, 1}); }, __LINE__, "roll", {"1 shifts, 2 dims"});
  expect_error([&] { (void)roll(x, {1}, {2}); }, __LINE__, "roll", {"dim 2 is out of range"});
  expect_error([&] { (void)roll(rnd({}, 31), {1}, {0}); }, __LINE__, "roll", {"0-d"});
  expect_error([&] { (void)x.repeat({2}); }, __LINE__, "repeat", {"f64[2,3]", "at least as many repeats as dims"});
  expect_error([&] { (void)x.repeat({2, -1}); }, __LINE__, "repeat", {"negative", "[2,-1]"});
  expect_error([&] { (void)tile(x, {-1}); }, __LINE__, "repeat", {"negative"});
  expect_error([&] { (void)repeat_interleave(x, -1, 0); }, __LINE__, "repeat_interleave", {"can not be negative"});
  expect_error([&] { (void)repeat_interleave(x, 2, 2); }, __LINE__, "repeat_interleave", {"out of range"});
  expect_error([&] { (void)repeat_interleave(rnd({}, 32), 2, 0); }, __LINE__, "repeat_interleave", {"0-d"});
  const Tensor reps = from_vector<int64_t>({1, 2});
  expect_error([&] { (void)repeat_interleave(x, reps, 1); }, __LINE__, "repeat_interleave", {"i64[2]", "extent 3"});
  expect_error([&] { (void)repeat_interleave(x, from_vector<int64_t>({1, -1}), 0); }, __LINE__, "repeat_interleave",
               {"can not be negative"});
  expect_error([&] { (void)repeat_interleave(x, from_vector<double>({1, 1}), 0); }, __LINE__, "repeat_interleave",
               {"integer tensor", "f64[2]"});
  expect_error([&] { (void)repeat_interleave(x, reps.reshape({1, 2}), 0); }, __LINE__, "repeat_interleave",
               {"0-d or 1-d"});
  const int traced_line = __LINE__ + 2; // the error names the call inside the traced function
  CompiledFunction traced =
      compile([](const std::vector<Tensor>& a) { return std::vector<Tensor>{repeat_interleave(a[0], a[1], 0)}; });
  expect_error([&] { (void)traced({x, reps}); }, traced_line, "repeat_interleave", {"compile()", "pass an integer"});
}

TEST(NormsManip, NormErrors) {
  const Tensor x = rnd({2, 3}, 33);
  expect_error([&] { (void)linalg_vector_norm(from_vector<int64_t>({1, 2})); }, __LINE__, "linalg_vector_norm",
               {"i64[2]", "floating"});
  expect_error([&] { (void)norm(x, 2, {0, 0}); }, __LINE__, "norm", {"f64[2,3]", "dim 0 appears more than once"});
  expect_error([&] { (void)norm(x, 2, {2}); }, __LINE__, "norm", {"out of range"});
  expect_error([&] { (void)linalg_vector_norm(rnd({0, 3}, 34), kInf, {0}); }, __LINE__, "linalg_vector_norm",
               {"f64[0,3]", "inf norm", "empty"});
  expect_error([&] { (void)linalg_vector_norm(rnd({0, 3}, 35), -1); }, __LINE__, "linalg_vector_norm", {"-1 norm"});
  expect_error([&] { (void)linalg_vector_norm(x, kNaN); }, __LINE__, "linalg_vector_norm", {"NaN"});
  expect_error([&] { (void)F::normalize(x, 2, 2); }, __LINE__, "normalize", {"out of range"});
  expect_error([&] { (void)F::cosine_similarity(x, rnd({4, 3}, 36)); }, __LINE__, "cosine_similarity",
               {"f64[2,3]", "f64[4,3]", "broadcast"});
  expect_error([&] { (void)F::cosine_similarity(from_vector<int64_t>({1}), from_vector<int64_t>({1}), 0); }, __LINE__,
               "cosine_similarity", {"floating"});
  expect_error([&] { (void)F::cosine_similarity(x, x, 2); }, __LINE__, "cosine_similarity", {"out of range"});
  expect_error([&] { (void)F::pairwise_distance(x, rnd({4, 3}, 37)); }, __LINE__, "pairwise_distance",
               {"f64[2,3]", "f64[4,3]", "broadcast"});
}

TEST(NormsManip, NormalizationErrors) {
  const Tensor x = rnd({2, 6, 3}, 38);
  expect_error([&] { (void)F::group_norm(x, 4); }, __LINE__, "group_norm", {"f64[2,6,3]", "divisible by num_groups=4"});
  expect_error([&] { (void)F::group_norm(x, 0); }, __LINE__, "group_norm", {"num_groups=0"});
  expect_error([&] { (void)F::group_norm(rnd({6}, 39), 3); }, __LINE__, "group_norm", {"f64[6]", "[N, C, ...]"});
  expect_error([&] { (void)F::group_norm(x, 3, rnd({3}, 40)); }, __LINE__, "group_norm",
               {"f64[3]", "[C] tensors, C = 6"});
  expect_error([&] { (void)F::group_norm(from_vector<int64_t>({1, 2}).reshape({1, 2}), 1); }, __LINE__, "group_norm",
               {"floating"});
  expect_error([&] { (void)F::instance_norm(rnd({2, 6}, 41)); }, __LINE__, "instance_norm",
               {"f64[2,6]", "more than one spatial element"});
  expect_error([&] { (void)F::instance_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), false); }, __LINE__,
               "instance_norm", {"running statistics"});
  expect_error([&] { (void)F::instance_norm(x, rnd({5}, 42), rnd({6}, 43)); }, __LINE__, "instance_norm",
               {"f64[5]", "[C]"});
}

// clang-format on

} // namespace
} // namespace kiln

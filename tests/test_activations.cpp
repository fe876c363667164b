// The activation functions (nn::functional's leaky_relu ... softmin and their modules): values in f64 and f32 and
// f64 gradients against PyTorch 1.13 (generated tables) on extremes (+-1e4, +-100, around softplus's threshold,
// -0, +-inf, NaN) and at the kinks, f64 gradchecks, fused against unfused and compile(), module reprs and
// parameters, and error messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "error_of.h"
#include "table_checks.h"
#include "kiln/autograd.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using namespace test; // values, rnd, expect_gradcheck, expect_close, weights_for

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_activations.cpp", line, op, parts);
}

/// Within `rel` of want relative to max(1, |want|); NaN matches NaN and an infinity itself. Where want is NaN
/// and `skip_nan` is set, the point is not compared (the tables' gradients at non-finite inputs).
void expect_close_or_same(const std::vector<double>& got, const std::vector<double>& want, double rel,
                          const std::string& what, bool skip_nan = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      if (!skip_nan) EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "] = " << got[i] << ", want NaN";
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
    }
  }
}

/// An elementwise activation with its arguments (the table's), by name.
Tensor activation(const std::string& name, const std::vector<double>& a, const Tensor& x) {
  auto arg = [&](size_t i, double otherwise) { return i < a.size() ? a[i] : otherwise; };
  if (name == "leaky_relu") return F::leaky_relu(x, arg(0, 0.01));
  if (name == "elu") return F::elu(x, arg(0, 1.0));
  if (name == "selu") return F::selu(x);
  if (name == "celu") return F::celu(x, arg(0, 1.0));
  if (name == "softplus") return F::softplus(x, arg(0, 1.0), arg(1, 20.0));
  if (name == "mish") return F::mish(x);
  if (name == "hardswish") return F::hardswish(x);
  if (name == "hardsigmoid") return F::hardsigmoid(x);
  if (name == "hardtanh") return F::hardtanh(x, arg(0, -1.0), arg(1, 1.0));
  if (name == "relu6") return F::relu6(x);
  if (name == "logsigmoid") return F::logsigmoid(x);
  if (name == "softsign") return F::softsign(x);
  ADD_FAILURE() << "no activation " << name;
  return x;
}

// ---------------------------------------------------------------- against PyTorch

struct ElementwiseCase {
  const char* name;
  std::vector<double> args, x, y, grad, y32; ///< grad: NaN where x is not finite (not compared)
};

const ElementwiseCase kElementwise[] = {
#include "pytorch_activation_table.inc"
};

TEST(Activations, MatchPyTorchInF64) {
  for (const ElementwiseCase& c : kElementwise) {
    const std::string what = std::string(c.name) + (c.args.empty() ? "" : " with arguments");
    Tensor x = from_vector(c.x).requires_grad_();
    const Tensor y = activation(c.name, c.args, x);
    (y * weights_for(y)).sum().backward();
    expect_close_or_same(values(y), c.y, 1e-14, what + " values");
    // PyTorch's f64 hardsigmoid backward multiplies by float(1/6) (1.7e-8 off the f64 1/6 kiln uses)
    const double grad_rel = std::string(c.name) == "hardsigmoid" ? 1e-7 : 1e-13;
    expect_close_or_same(values(x.grad()), c.grad, grad_rel, what + " gradients", true);
  }
}

TEST(Activations, MatchPyTorchInF32) {
  for (const ElementwiseCase& c : kElementwise) {
    const Tensor y = activation(c.name, c.args, from_vector(c.x).to(kFloat32));
    EXPECT_EQ(y.dtype(), kFloat32) << c.name;
    expect_close_or_same(values(y), c.y32, 4e-7, std::string(c.name) + " f32 values");
  }
}

struct DimCase {
  const char* name;
  IntList shape;
  std::vector<double> x;
  IntList weight_shape; ///< prelu's; {} otherwise
  std::vector<double> weight;
  int64_t dim;
  IntList out_shape;
  std::vector<double> y, grad, weight_grad;
};

const DimCase kDim[] = {
#include "pytorch_activation_dim_table.inc"
};

TEST(Activations, GluPreluSoftminMatchPyTorch) {
  for (const DimCase& c : kDim) {
    const std::string name = c.name;
    Tensor x = from_vector(c.x, c.shape).requires_grad_();
    Tensor w = c.weight.empty() ? Tensor() : from_vector(c.weight, c.weight_shape).requires_grad_();
    const Tensor y = name == "glu" ? F::glu(x, c.dim) : name == "prelu" ? F::prelu(x, w) : F::softmin(x, c.dim);
    ASSERT_EQ(y.shape(), c.out_shape) << name;
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.y, 1e-14, name + " values");
    expect_close(values(x.grad()), c.grad, 1e-13, name + " input grad");
    if (w.defined()) expect_close(values(w.grad()), c.weight_grad, 1e-13, name + " weight grad");
  }
}

// ---------------------------------------------------------------- gradients

/// Normal values kept 0.05 away from the kinks at 0 and +-3 (where the finite differences straddle a corner).
Tensor away_from_kinks(IntList shape, uint64_t seed) {
  const Tensor x = rnd(std::move(shape), seed) * 2.5;
  const Tensor near = logical_or(logical_or(abs(x) < 0.05, abs(x - 3.0) < 0.05), abs(x + 3.0) < 0.05);
  return where(near, x + 0.2, x);
}

TEST(Activations, Gradcheck) {
  const std::vector<std::pair<std::string, std::vector<double>>> cases = {
      {"leaky_relu", {0.2}}, {"elu", {0.5}}, {"selu", {}}, {"celu", {2.0}}, {"softplus", {2.0, 3.0}}, {"mish", {}},
      {"hardswish", {}}, {"hardsigmoid", {}}, {"hardtanh", {-2.0, 1.5}}, {"relu6", {}}, {"logsigmoid", {}},
      {"softsign", {}}};
  uint64_t seed = 1;
  for (const auto& [name, args] : cases) {
    SCOPED_TRACE(name);
    const Tensor x = away_from_kinks({3, 5}, seed++) * (name == "relu6" ? 3.0 : 1.0);
    expect_gradcheck([&](const std::vector<Tensor>& v) { return (activation(name, args, v[0]) * v[1]).sum(); },
                     {x, rnd({3, 5}, seed++)});
  }
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::glu(v[0], 1) * v[1]).sum(); },
                   {rnd({2, 6, 3}, 40), rnd({2, 3, 3}, 41)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::prelu(v[0], v[1]) * v[2]).sum(); },
                   {away_from_kinks({2, 3, 4}, 42), rnd({3}, 43), rnd({2, 3, 4}, 44)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::softmin(v[0], 0) * v[1]).sum(); },
                   {rnd({4, 3}, 45), rnd({4, 3}, 46)});
}

TEST(Activations, SecondOrderGradcheck) {
  // the smooth ones: gradients of gradients (expm1's and log1p's rules are graph too)
  for (const std::string name : {"elu", "selu", "celu", "softplus", "mish", "logsigmoid", "softsign"}) {
    SCOPED_TRACE(name);
    expect_gradcheck(
        [&](const std::vector<Tensor>& v) {
          const Tensor y = activation(name, {}, v[0]);
          const Tensor g = grad({(y * v[1]).sum()}, {v[0]}, {}, false, true)[0];
          return (g * g).sum();
        },
        {away_from_kinks({7}, 50), rnd({7}, 51)});
  }
}

TEST(Activations, LargeArgumentsKeepFiniteGradients) {
  // the discarded branches (exp of 1e4) must not turn the gradient into 0 * inf = NaN
  for (DType dt : {kFloat32, kFloat64}) {
    for (const std::string name : {"elu", "selu", "celu", "softplus", "mish", "logsigmoid"}) {
      Tensor x = from_vector<double>({-1e4, -100, 100, 1e4}).to(dt).requires_grad_();
      activation(name, {}, x).sum().backward();
      for (double g : values(x.grad())) EXPECT_TRUE(std::isfinite(g)) << name << " " << dtype_name(dt);
    }
  }
}

// ---------------------------------------------------------------- fusion and compile()

TEST(Activations, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& in) {
        Tensor x = in[0];
        std::vector<Tensor> out = {F::leaky_relu(x), F::elu(x), F::selu(x), F::celu(x, 2.0), F::softplus(x),
                                   F::mish(x), F::hardswish(x), F::hardsigmoid(x), F::hardtanh(x), F::relu6(x),
                                   F::logsigmoid(x), F::softsign(x), F::glu(x, 1), F::prelu(x, in[1]),
                                   F::softmin(x, 1), expm1(x), log1p(abs(x))};
        Tensor total = zeros({}, kFloat64);
        for (const Tensor& y : out) total = total + (y * y).sum();
        const auto g = grad({total}, {x, in[1]});
        out.insert(out.end(), g.begin(), g.end());
        return out;
      },
      [](uint64_t seed) { return std::vector<Tensor>{rnd({3, 4, 5}, seed) * 4.0, rnd({4}, seed + 1)}; });
}

// ---------------------------------------------------------------- modules

TEST(Activations, ModulesAreTheirFunctions) {
  const Tensor x = rnd({2, 4, 3}, 60) * 4.0;
  expect_same(values(nn::LeakyReLU(0.1)(x)), values(F::leaky_relu(x, 0.1)), "LeakyReLU");
  expect_same(values(nn::ELU(0.7)(x)), values(F::elu(x, 0.7)), "ELU");
  expect_same(values(nn::SELU()(x)), values(F::selu(x)), "SELU");
  expect_same(values(nn::CELU(1.5)(x)), values(F::celu(x, 1.5)), "CELU");
  expect_same(values(nn::Softplus(2.0, 5.0)(x)), values(F::softplus(x, 2.0, 5.0)), "Softplus");
  expect_same(values(nn::Mish()(x)), values(F::mish(x)), "Mish");
  expect_same(values(nn::Hardswish()(x)), values(F::hardswish(x)), "Hardswish");
  expect_same(values(nn::Hardsigmoid()(x)), values(F::hardsigmoid(x)), "Hardsigmoid");
  expect_same(values(nn::Hardtanh(-2.0, 2.5)(x)), values(F::hardtanh(x, -2.0, 2.5)), "Hardtanh");
  expect_same(values(nn::ReLU6()(x)), values(F::relu6(x)), "ReLU6");
  expect_same(values(nn::LogSigmoid()(x)), values(F::logsigmoid(x)), "LogSigmoid");
  expect_same(values(nn::Softsign()(x)), values(F::softsign(x)), "Softsign");
  expect_same(values(nn::GLU(1)(x)), values(F::glu(x, 1)), "GLU");
  expect_same(values(nn::Softmin(2)(x)), values(F::softmin(x, 2)), "Softmin");
  expect_same(values(nn::Softmax(0)(x)), values(F::softmax(x, 0)), "Softmax");
  expect_same(values(nn::LogSoftmax(-1)(x)), values(F::log_softmax(x, -1)), "LogSoftmax");
  expect_same(values(nn::Identity()(x)), values(x), "Identity");
  nn::Sequential seq(nn::Linear(3, 3), nn::Mish(), nn::Identity(), nn::Hardtanh());
  EXPECT_EQ(seq(x).shape(), (IntList{2, 4, 3}));
}

TEST(Activations, ModuleReprsAsPyTorch) {
  // PyTorch 1.13's reprs of the same modules
  EXPECT_EQ(nn::LeakyReLU().str(), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(nn::ELU().str(), "ELU(alpha=1.0)");
  EXPECT_EQ(nn::SELU().str(), "SELU()");
  EXPECT_EQ(nn::CELU(2.5).str(), "CELU(alpha=2.5)");
  EXPECT_EQ(nn::Softplus().str(), "Softplus(beta=1, threshold=20)");
  EXPECT_EQ(nn::Mish().str(), "Mish()");
  EXPECT_EQ(nn::Hardswish().str(), "Hardswish()");
  EXPECT_EQ(nn::Hardsigmoid().str(), "Hardsigmoid()");
  EXPECT_EQ(nn::Hardtanh().str(), "Hardtanh(min_val=-1.0, max_val=1.0)");
  EXPECT_EQ(nn::ReLU6().str(), "ReLU6()");
  EXPECT_EQ(nn::LogSigmoid().str(), "LogSigmoid()");
  EXPECT_EQ(nn::Softsign().str(), "Softsign()");
  EXPECT_EQ(nn::GLU().str(), "GLU(dim=-1)");
  EXPECT_EQ(nn::PReLU(3).str(), "PReLU(num_parameters=3)");
  EXPECT_EQ(nn::Softmin(1).str(), "Softmin(dim=1)");
  EXPECT_EQ(nn::Softmax(1).str(), "Softmax(dim=1)");
  EXPECT_EQ(nn::LogSoftmax(0).str(), "LogSoftmax(dim=0)");
  EXPECT_EQ(nn::Identity().str(), "Identity()");
}

TEST(Activations, PReLUHasOneTrainedWeight) {
  nn::PReLU one;
  ASSERT_EQ(one.named_parameters().size(), 1u);
  EXPECT_EQ(one.named_parameters()[0].first, "weight");
  EXPECT_EQ(one.weight.shape(), (IntList{1}));
  EXPECT_EQ(one.weight.dtype(), kFloat32);
  EXPECT_EQ(values(one.weight), std::vector<double>{0.25});
  nn::PReLU per_channel(3, 0.1);
  EXPECT_EQ(values(per_channel.weight), (std::vector<double>{0.1f, 0.1f, 0.1f}));
  const Tensor x = from_vector<float>({-1, 2, -3, 4, -5, 6}, {2, 3});
  const Tensor y = per_channel(x);
  expect_close(values(y), {-0.1, 2, -0.3, 4, -0.5, 6}, 1e-7, "values");
  y.sum().backward();
  ASSERT_TRUE(per_channel.weight.grad().defined());
  expect_close(values(per_channel.weight.grad()), {-1, -5, -3}, 1e-7, "weight grad"); // the sum of negative x per channel
}

// ---------------------------------------------------------------- errors

TEST(Activations, Errors) {
  const Tensor i = from_vector<int64_t>({1, -2}), x = rnd({3, 5}, 70);
  expect_error([&] { (void)F::leaky_relu(i); }, __LINE__, "leaky_relu", {"needs a floating tensor", "i64[2]"});
  expect_error([&] { (void)F::elu(i); }, __LINE__, "elu", {"needs a floating tensor"});
  expect_error([&] { (void)F::softplus(i); }, __LINE__, "softplus", {"needs a floating tensor"});
  expect_error([&] { (void)F::hardtanh(i); }, __LINE__, "hardtanh", {"needs a floating tensor"});
  expect_error([&] { (void)F::mish(Tensor()); }, __LINE__, "mish", {"undefined"});
  expect_error([&] { (void)F::celu(x, 0.0); }, __LINE__, "celu", {"alpha cannot be 0", "f64[3,5]"});
  expect_error([&] { (void)F::glu(x); }, __LINE__, "glu",
               {"Halving dimension must be even, but dimension 1 is size 5", "f64[3,5]"});
  expect_error([&] { (void)F::glu(rnd({}, 71)); }, __LINE__, "glu", {"does not support scalars"});
  expect_error([&] { (void)F::glu(x, 2); }, __LINE__, "glu", {"f64[3,5]"});
  expect_error([&] { (void)F::softmin(x, -3); }, __LINE__, "softmin", {"f64[3,5]"});
  expect_error([&] { (void)F::prelu(x, rnd({3}, 72)); }, __LINE__, "prelu",
               {"Found parameter numbers = 3 and channel size = 5.", "f64[3,5]", "f64[3]"});
  expect_error([&] { (void)F::prelu(rnd({4}, 73), rnd({4}, 74)); }, __LINE__, "prelu",
               {"parameter numbers = 4 and channel size = 1."});
  expect_error([&] { (void)F::prelu(x, rnd({1, 5}, 75)); }, __LINE__, "prelu",
               {"Expected `weight` to be a scalar or 1D tensor, but got ndim = 2"});
  expect_error([&] { (void)nn::PReLU(4)(x); }, __LINE__, "PReLU", {"parameter numbers = 4 and channel size = 5"});
  expect_error([&] { (void)nn::Hardtanh(1.0, 1.0); }, __LINE__, "Hardtanh", {"max_val (1.0) must be greater than min_val (1.0)"});
  expect_error([&] { (void)nn::CELU(0.0); }, __LINE__, "CELU", {"alpha cannot be 0"});
  expect_error([&] { (void)nn::PReLU(0); }, __LINE__, "PReLU", {"num_parameters must be positive"});
  expect_error([&] { (void)nn::GLU(0)(x); }, __LINE__, "GLU", {"Halving dimension must be even"});
}

} // namespace
} // namespace kiln

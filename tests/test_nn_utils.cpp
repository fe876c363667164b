// torch.nn.utils in kiln: weight_norm / remove_weight_norm against torch 1.13 (tests/pytorch_nn_utils_table.inc:
// the initial g, the forward and the gradients of g, v, the bias and the input, in f64), training through it
// eagerly and compiled, clip_grad_value_, parameters_to_vector and vector_to_parameters; their errors.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/nn_utils.h"
#include "kiln/optim.h"
#include "tests/error_of.h"

using namespace kiln;
namespace U = kiln::nn::utils;

namespace {

struct WeightNormCase {
  const char* name;
  std::string module;
  bool whole;
  int64_t dim;
  IntList weight_shape;
  std::vector<double> weight, bias;
  IntList x_shape;
  std::vector<double> x, r;
  IntList out_shape;
  std::vector<double> out;
  IntList g_shape;
  std::vector<double> g, grad_g, grad_v, grad_bias, grad_x;
};

struct SpectralNormCase {
  const char* name;
  std::string module;
  int64_t n_power_iterations;
  double eps;
  bool training;
  IntList weight_shape;
  std::vector<double> weight, bias;
  IntList x_shape;
  std::vector<double> x, u0, v0, r;
  IntList out_shape;
  std::vector<double> out1, out2, u, v, grad_orig, grad_bias, grad_x;
};

#include "pytorch_nn_utils_table.inc"

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::fabs(want[i]))) << what << " element " << i;
}

Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  ADD_FAILURE() << "no parameter " << name;
  return Tensor();
}

std::vector<std::string> param_names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

Tensor buffer(const nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_buffers())
    if (n == name) return t;
  ADD_FAILURE() << "no buffer " << name;
  return Tensor();
}

/// Step s's input of the eager-against-compiled training tests: [2, 3] f64.
Tensor train_batch(int64_t s) { return from_vector<double>({1.0 * s, 2, -1, 0.5, 0.25 * s, 3}, {2, 3}); }

/// Trains two copies of one module 4 steps on the squared sum of their output, `eager` step by step with
/// `opt_e`, `compiled` as one compiled step with `opt_c`; after each step the losses and the whole
/// state_dicts (parameters and buffers) must be equal. Returns the compiled step's trace count.
size_t expect_eager_equals_compiled(nn::Module& eager, nn::Module& compiled, optim::Optimizer& opt_e,
                                    optim::Optimizer& opt_c) {
  auto step = compile([&](const std::vector<Tensor>& a) {
    opt_c.zero_grad();
    Tensor loss = compiled(a[0]).square().sum();
    loss.backward();
    opt_c.step();
    return std::vector<Tensor>{loss.detach()};
  });
  for (int64_t s = 0; s < 4; ++s) {
    opt_e.zero_grad();
    Tensor loss = eager(train_batch(s)).square().sum();
    loss.backward();
    opt_e.step();
    EXPECT_EQ(loss.item<double>(), step({train_batch(s)})[0].item<double>()) << "step " << s;
    const nn::NamedTensors e = eager.state_dict(), c = compiled.state_dict();
    EXPECT_EQ(e.size(), c.size());
    for (size_t i = 0; i < std::min(e.size(), c.size()); ++i) {
      EXPECT_EQ(e[i].first, c[i].first);
      EXPECT_EQ(e[i].second.to_vector<double>(), c[i].second.to_vector<double>()) << e[i].first << " step " << s;
    }
  }
  return step.num_traces();
}

// A table case's module (linear, conv, conv_transpose) in f64 with the table's weight and bias.
template <class Case> std::shared_ptr<nn::Module> make_module(const Case& c) {
  std::shared_ptr<nn::Module> m;
  Tensor *w = nullptr, *b = nullptr;
  if (c.module == "linear") {
    auto l = std::make_shared<nn::Linear>(3, 4);
    w = &l->weight, b = &l->bias, m = l;
  } else if (c.module == "conv") {
    auto conv = std::make_shared<nn::Conv2d>(2, 3, 2);
    w = &conv->weight, b = &conv->bias, m = conv;
  } else {
    auto conv = std::make_shared<nn::ConvTranspose2d>(2, 3, 2);
    w = &conv->weight, b = &conv->bias, m = conv;
  }
  m->to(kFloat64);
  w->assign(from_vector(c.weight, c.weight_shape));
  b->assign(from_vector(c.bias, {static_cast<int64_t>(c.bias.size())}));
  return m;
}

} // namespace

TEST(WeightNorm, EveryCaseMatchesPyTorchInF64) {
  for (const WeightNormCase& c : kWeightNormCases) {
    std::shared_ptr<nn::Module> m = make_module(c);
    U::weight_norm(*m, "weight", c.whole ? std::nullopt : std::optional<int64_t>(c.dim));
    const Tensor g = param(*m, "weight_g"), v = param(*m, "weight_v"), bias = param(*m, "bias");
    EXPECT_EQ(g.shape(), c.g_shape) << c.name;
    expect_near_all(g.to_vector<double>(), c.g, std::string(c.name) + " g");
    expect_near_all(v.to_vector<double>(), c.weight, std::string(c.name) + " v");
    Tensor x = from_vector(c.x, c.x_shape).requires_grad_();
    Tensor out = (*m)(x);
    EXPECT_EQ(out.shape(), c.out_shape) << c.name;
    (out * from_vector(c.r, c.out_shape)).sum().backward();
    expect_near_all(out.to_vector<double>(), c.out, std::string(c.name) + " out");
    expect_near_all(g.grad().to_vector<double>(), c.grad_g, std::string(c.name) + " grad g");
    expect_near_all(v.grad().to_vector<double>(), c.grad_v, std::string(c.name) + " grad v");
    expect_near_all(bias.grad().to_vector<double>(), c.grad_bias, std::string(c.name) + " grad bias");
    expect_near_all(x.grad().to_vector<double>(), c.grad_x, std::string(c.name) + " grad x");
  }
}

TEST(WeightNorm, ReplacesTheParameterAsTorchAndRemoveRestoresIt) {
  nn::Linear m(3, 4);
  m.to(kFloat64);
  const Tensor original = m.weight;
  const std::vector<double> w0 = m.weight.to_vector<double>();
  U::weight_norm(m);
  EXPECT_EQ(param_names(m), (std::vector<std::string>{"bias", "weight_g", "weight_v"}));
  EXPECT_EQ(m.parameters().size(), 3u);
  // The member is the recomputed weight, the same tensor as before, equal to the original weight.
  EXPECT_EQ(m.weight.impl(), original.impl());
  expect_near_all(m.weight.to_vector<double>(), w0, "the weight after weight_norm");
  // Train g and v a step: the weight follows at the next forward.
  optim::SGD opt(m.parameters(), {.lr = 0.5});
  const Tensor x = from_vector<double>({1, 2, 3, -1, 0.5, 2}, {2, 3});
  opt.zero_grad();
  m(x).square().sum().backward();
  opt.step();
  m(x);
  const Tensor g = param(m, "weight_g"), v = param(m, "weight_v");
  const Tensor expected = v * (g / sqrt(v.square().sum({1}, true)));
  expect_near_all(m.weight.to_vector<double>(), expected.to_vector<double>(), "the weight after a step");
  U::remove_weight_norm(m);
  EXPECT_EQ(param_names(m), (std::vector<std::string>{"bias", "weight"}));
  EXPECT_EQ(m.weight.impl(), original.impl());
  EXPECT_TRUE(m.weight.requires_grad());
  expect_near_all(m.weight.to_vector<double>(), expected.to_vector<double>(), "the weight after remove");
  // A parameter again: a leaf that takes gradients and steps.
  m.zero_grad();
  m(x).sum().backward();
  ASSERT_TRUE(m.weight.grad().defined());
  EXPECT_EQ(m.weight.grad().shape(), (IntList{4, 3}));
  // and weight_norm applies again
  U::weight_norm(m, "weight", 1);
  EXPECT_EQ(param(m, "weight_g").shape(), (IntList{1, 3}));
}

TEST(WeightNorm, TrainsTheSameEagerlyAndCompiled) {
  // fused = unfused = compile(): SGD with momentum over g, v and the bias, the loop eager and as one compiled step.
  auto make = [] {
    nn::manual_seed(5);
    auto m = std::make_shared<nn::Linear>(3, 4);
    m->to(kFloat64);
    U::weight_norm(*m);
    return m;
  };
  auto eager = make(), compiled = make();
  optim::SGD opt_e(eager->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_c(compiled->parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_LE(expect_eager_equals_compiled(*eager, *compiled, opt_e, opt_c), 2u);
  // The compiled module's weight is the last forward's (written back by the replays), as the eager one's.
  EXPECT_EQ(eager->weight.to_vector<double>(), compiled->weight.to_vector<double>());
  const Tensor x = train_batch(0);
  EXPECT_EQ((*eager)(x).to_vector<double>(), (*compiled)(x).to_vector<double>());
}

TEST(WeightNorm, ErrorsNameTheCallersLine) {
  const std::string file = "test_nn_utils.cpp";
  nn::Linear m(3, 4);
  test::expect_error_at([&] { U::weight_norm(m, "weight", 2); }, file, __LINE__, "weight_norm", {"dim 2 is out of range for weight f32[4,3]"});
  test::expect_error_at([&] { U::weight_norm(m, "scale"); }, file, __LINE__, "weight_norm", {"Linear has no parameter \"scale\""});
  test::expect_error_at([&] { U::remove_weight_norm(m); }, file, __LINE__, "remove_weight_norm", {"weight_norm of 'weight' not found in Linear"});
  U::weight_norm(m);
  test::expect_error_at([&] { U::weight_norm(m); }, file, __LINE__, "weight_norm", {"cannot register two weight_norm hooks on the same parameter weight"});
  test::expect_error_at([&] { m.unregister_parameter("weight"); }, file, __LINE__, "Linear::unregister_parameter", {"\"weight\" is not a parameter"});
}

TEST(ClipGradValue, ClampsEachGradientLazily) {
  Tensor a = from_vector<double>({1, 2, 3}).requires_grad_(), b = from_vector<double>({4}).requires_grad_();
  Tensor unused = from_vector<double>({5}).requires_grad_();
  (a * from_vector<double>({-3, 0.5, 2})).sum().backward();
  (b * -0.25).sum().backward();
  U::clip_grad_value_({a, b, unused}, 1.0);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{-1, 0.5, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{-0.25}));
  EXPECT_FALSE(unused.grad().defined());
  U::clip_grad_value_({a}, 0);
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
  // inside a compiled step: the clamp follows each replay's gradient
  Tensor w = from_vector<double>({0, 0}).requires_grad_();
  auto step = compile([&](const std::vector<Tensor>& in) {
    w.zero_grad();
    (w * in[0]).sum().backward();
    U::clip_grad_value_({w}, 0.5);
    return std::vector<Tensor>{w.grad()};
  });
  EXPECT_EQ(step({from_vector<double>({2, -0.1})})[0].to_vector<double>(), (std::vector<double>{0.5, -0.1}));
  EXPECT_EQ(step({from_vector<double>({-7, 0.3})})[0].to_vector<double>(), (std::vector<double>{-0.5, 0.3}));
  const std::string file = "test_nn_utils.cpp";
  test::expect_error_at([&] { U::clip_grad_value_({a}, -1); }, file, __LINE__, "clip_grad_value_", {"clip_value must be >= 0"});
}

TEST(ParametersToVector, FlattensConcatenatesAndCarriesGradients) {
  Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2}).requires_grad_(), b = from_vector<double>({5}).requires_grad_();
  const Tensor vec = U::parameters_to_vector({a, b});
  EXPECT_EQ(vec.shape(), (IntList{5}));
  EXPECT_EQ(vec.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5}));
  (vec * from_vector<double>({1, 2, 3, 4, 5})).sum().backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{5}));
  // and back: each parameter takes its slice, keeping its shape, dtype and identity
  Tensor c = from_vector<float>({0, 0}).requires_grad_();
  U::vector_to_parameters(from_vector<double>({9, 8, 7, 6, 5, 4, 3}), {a, b, c});
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{9, 8, 7, 6}));
  EXPECT_EQ(a.shape(), (IntList{2, 2}));
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{5}));
  EXPECT_EQ(c.dtype(), kFloat32);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{4, 3}));
  EXPECT_TRUE(a.requires_grad());
  const std::string file = "test_nn_utils.cpp";
  test::expect_error_at([&] { U::parameters_to_vector({}); }, file, __LINE__, "parameters_to_vector", {"expected at least one parameter"});
  test::expect_error_at([&] { U::vector_to_parameters(from_vector<double>({1, 2}), {a}); }, file, __LINE__, "vector_to_parameters", {"vec must be 1-d with the parameters' 4 elements, got f64[2]"});
  test::expect_error_at([&] { U::vector_to_parameters(from_vector<double>({1, 2, 3, 4}, {2, 2}), {a}); }, file, __LINE__, "vector_to_parameters", {"got f64[2,2]"});
}

// ---------------------------------------------------------------- spectral_norm

TEST(SpectralNorm, EveryCaseMatchesPyTorchInF64) {
  // Two forwards (u and v advance at each in training mode, stay in eval), then the gradients of the second.
  for (const SpectralNormCase& c : kSpectralNormCases) {
    std::shared_ptr<nn::Module> m = make_module(c);
    U::spectral_norm(*m, "weight", c.n_power_iterations, c.eps);
    Tensor u = buffer(*m, "weight_u"), v = buffer(*m, "weight_v");
    u.assign(from_vector(c.u0, u.shape()));
    v.assign(from_vector(c.v0, v.shape()));
    m->train(c.training);
    Tensor x = from_vector(c.x, c.x_shape);
    expect_near_all((*m)(x).to_vector<double>(), c.out1, std::string(c.name) + " out 1");
    x.requires_grad_();
    Tensor out = (*m)(x);
    EXPECT_EQ(out.shape(), c.out_shape) << c.name;
    (out * from_vector(c.r, c.out_shape)).sum().backward();
    expect_near_all(out.to_vector<double>(), c.out2, std::string(c.name) + " out 2");
    expect_near_all(u.to_vector<double>(), c.u, std::string(c.name) + " u");
    expect_near_all(v.to_vector<double>(), c.v, std::string(c.name) + " v");
    expect_near_all(param(*m, "weight_orig").grad().to_vector<double>(), c.grad_orig,
                    std::string(c.name) + " grad orig");
    expect_near_all(param(*m, "bias").grad().to_vector<double>(), c.grad_bias, std::string(c.name) + " grad bias");
    expect_near_all(x.grad().to_vector<double>(), c.grad_x, std::string(c.name) + " grad x");
  }
}

TEST(SpectralNorm, RegistersAsTorchAndRemoveRestoresTheWeight) {
  nn::manual_seed(2);
  nn::Linear m(3, 4);
  m.to(kFloat64);
  const std::vector<double> w0 = m.weight.to_vector<double>();
  U::spectral_norm(m);
  EXPECT_EQ(param_names(m), (std::vector<std::string>{"bias", "weight_orig"}));
  std::vector<std::string> buffers;
  for (const auto& [n, t] : m.named_buffers()) buffers.push_back(n);
  EXPECT_EQ(buffers, (std::vector<std::string>{"weight_u", "weight_v"}));
  EXPECT_EQ(buffer(m, "weight_u").shape(), (IntList{4}));
  EXPECT_EQ(buffer(m, "weight_v").shape(), (IntList{3}));
  EXPECT_NEAR(buffer(m, "weight_u").square().sum().item<double>(), 1.0, 1e-12); // a unit vector
  EXPECT_EQ(m.weight.to_vector<double>(), w0); // torch's weight.data until the first forward
  // Many power iterations: sigma is the largest singular value, so the normalized weight's is 1.
  U::remove_spectral_norm(m);
  U::spectral_norm(m, "weight", 50);
  m(from_vector<double>({1, 2, 3}, {1, 3}));
  const Tensor w = m.weight;
  Tensor x = from_vector<double>({1, 0, 0});
  for (int i = 0; i < 200; ++i) x = matmul(w.transpose(0, 1), matmul(w, x)), x = x / sqrt(x.square().sum());
  EXPECT_NEAR(sqrt(matmul(w, x).square().sum()).item<double>(), 1.0, 1e-9);
  // remove: a parameter again, orig / sigma without another power iteration
  m.eval();
  const std::vector<double> before = m(from_vector<double>({1, 2, 3}, {1, 3})).to_vector<double>();
  U::remove_spectral_norm(m);
  EXPECT_EQ(param_names(m), (std::vector<std::string>{"bias", "weight"}));
  EXPECT_TRUE(m.named_buffers().empty());
  EXPECT_EQ(m(from_vector<double>({1, 2, 3}, {1, 3})).to_vector<double>(), before);
  EXPECT_TRUE(m.weight.requires_grad());
}

TEST(SpectralNorm, TrainsTheSameEagerlyAndCompiled) {
  // u and v are assign()ed in training forwards, so the compiled step carries them; eval leaves them.
  auto make = [] {
    nn::manual_seed(8);
    auto m = std::make_shared<nn::Linear>(3, 4);
    m->to(kFloat64);
    U::spectral_norm(*m, "weight", 2);
    return m;
  };
  auto eager = make(), compiled = make();
  optim::Adam opt_e(eager->parameters(), {.lr = 0.05}), opt_c(compiled->parameters(), {.lr = 0.05});
  EXPECT_LE(expect_eager_equals_compiled(*eager, *compiled, opt_e, opt_c), 2u);
  const std::vector<double> u = buffer(*eager, "weight_u").to_vector<double>();
  eager->eval();
  (*eager)(train_batch(1));
  EXPECT_EQ(buffer(*eager, "weight_u").to_vector<double>(), u); // eval: no power iteration
}

TEST(SpectralNorm, ErrorsNameTheCallersLine) {
  const std::string file = "test_nn_utils.cpp";
  nn::Linear m(3, 4);
  test::expect_error_at([&] { U::spectral_norm(m, "weight", 0); }, file, __LINE__, "spectral_norm", {"expected n_power_iterations to be positive, got 0"});
  test::expect_error_at([&] { U::spectral_norm(m, "weight", 1, 0); }, file, __LINE__, "spectral_norm", {"eps must be positive"});
  test::expect_error_at([&] { U::spectral_norm(m, "weight", 1, 1e-12, 2); }, file, __LINE__, "spectral_norm", {"dim 2 is out of range"});
  test::expect_error_at([&] { U::remove_spectral_norm(m); }, file, __LINE__, "remove_spectral_norm", {"spectral_norm of 'weight' not found in Linear"});
  U::spectral_norm(m);
  test::expect_error_at([&] { U::spectral_norm(m); }, file, __LINE__, "spectral_norm", {"cannot register two spectral_norm hooks on the same parameter weight"});
  test::expect_error_at([&] { m.unregister_buffer("weight"); }, file, __LINE__, "Linear::unregister_buffer", {"\"weight\" is not a buffer"});
}

// ---------------------------------------------------------------- forward pre-hooks

namespace {
struct Doubled : nn::Linear {
  Doubled() : nn::Linear(2, 2) {}
  Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) * 2.0; }
};
} // namespace

TEST(ForwardPreHook, RunsOncePerCallInRegistrationOrderAndIsRemovable) {
  Doubled m;
  std::vector<int> calls;
  const int64_t first = m.register_forward_pre_hook([&](nn::Module&) { calls.push_back(1); }, "one");
  m.register_forward_pre_hook([&](nn::Module& self) { calls.push_back(self.name() == "Linear" ? 2 : -2); });
  const Tensor x = ones({1, 2});
  m(x); // operator() then the override's Linear::forward: the hooks run once
  EXPECT_EQ(calls, (std::vector<int>{1, 2}));
  m.forward(x); // the override called directly runs Linear::forward, whose forward runs them
  EXPECT_EQ(calls, (std::vector<int>{1, 2, 1, 2}));
  nn::Sequential seq(std::make_shared<Doubled>(m));
  seq(x); // inside a container too (the copy shares the hooks, as it shares the parameters)
  EXPECT_EQ(calls.size(), 6u);
  ASSERT_TRUE(m.find_forward_pre_hook("one"));
  EXPECT_EQ(m.find_forward_pre_hook("one")->first, first);
  EXPECT_TRUE(m.remove_forward_pre_hook(first));
  EXPECT_FALSE(m.remove_forward_pre_hook(first));
  EXPECT_FALSE(m.find_forward_pre_hook("one"));
  m(x);
  EXPECT_EQ(calls.back(), 2);
  EXPECT_EQ(calls.size(), 7u);
  // A hook that throws: the error reaches the caller and later calls run the hooks again.
  m.register_forward_pre_hook([](nn::Module&) { throw Error("hook", "refused", Loc::current()); });
  EXPECT_THROW(m(x), Error);
  EXPECT_THROW(m(x), Error);
}

// nn modules next to Linear and the activations: Bilinear (F::bilinear), Threshold (F::threshold), Softmax2d,
// Unflatten (Tensor::unflatten), ParameterList and ParameterDict. Forward values and gradients against PyTorch
// 1.13 (a generated table), gradients by gradcheck in f64, fused against unfused and compile(), PyTorch's
// state_dict names, and error messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "error_of.h"
#include "table_checks.h"
#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using namespace test; // values, rnd, expect_gradcheck, expect_close, expect_same, weights_for

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_nn_more.cpp", line, op, parts);
}

struct BilinearCase {
  const char* name;
  IntList s1;
  std::vector<double> x1;
  IntList s2;
  std::vector<double> x2;
  IntList ws;
  std::vector<double> w, b; ///< b {}: none
  IntList out_shape;
  std::vector<double> out, g1, g2, gw, gb;
};

const BilinearCase kBilinear[] = {
#define KILN_BILINEAR_CASES
#include "pytorch_nn_more_table.inc"
#undef KILN_BILINEAR_CASES
};

struct ElementwiseCase {
  const char* name;
  const char* op;
  IntList shape;
  std::vector<double> input;
  double threshold, value;
  std::vector<double> out, grad;
};

const ElementwiseCase kElementwise[] = {
#include "pytorch_nn_more_table.inc"
};

// ---------------------------------------------------------------- Bilinear

TEST(Bilinear, MatchesPyTorch) {
  for (const BilinearCase& c : kBilinear) {
    Tensor x1 = from_vector(c.x1, c.s1).requires_grad_(), x2 = from_vector(c.x2, c.s2).requires_grad_();
    Tensor w = from_vector(c.w, c.ws).requires_grad_();
    Tensor b = c.b.empty() ? Tensor() : from_vector(c.b).requires_grad_();
    const Tensor y = F::bilinear(x1, x2, w, b);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
    expect_close(values(x1.grad()), c.g1, 1e-12, std::string(c.name) + " x1 grad");
    expect_close(values(x2.grad()), c.g2, 1e-12, std::string(c.name) + " x2 grad");
    expect_close(values(w.grad()), c.gw, 1e-12, std::string(c.name) + " weight grad");
    if (b.defined()) expect_close(values(b.grad()), c.gb, 1e-12, std::string(c.name) + " bias grad");
  }
}

TEST(Bilinear, ModuleGradcheckAndErrors) {
  nn::manual_seed(3);
  nn::Bilinear m(3, 2, 4);
  EXPECT_EQ(m.weight.shape(), (IntList{4, 3, 2}));
  EXPECT_EQ(m.bias.shape(), (IntList{4}));
  const double bound = 1 / std::sqrt(3.0); // PyTorch's init: uniform in +-1/sqrt(in1)
  for (double v : values(m.weight)) EXPECT_LE(std::fabs(v), bound);
  EXPECT_EQ(m.str(), "Bilinear(in1_features=3, in2_features=2, out_features=4, bias=true)");
  m.to(kFloat64);
  expect_gradcheck([&](const std::vector<Tensor>& v) { return (m.forward(v[0], v[1]) * v[2]).sum(); },
                   {rnd({2, 5, 3}, 1), rnd({2, 5, 2}, 2), rnd({2, 5, 4}, 3)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return F::bilinear(v[0], v[1], v[2], v[3]).sum(); },
                   {rnd({3, 2}, 4), rnd({3, 3}, 5), rnd({2, 2, 3}, 6), rnd({2}, 7)});
  const Tensor a = rnd({4, 3}, 8), c = rnd({4, 2}, 9), w = rnd({5, 3, 2}, 10);
  expect_error([&] { (void)F::bilinear(a, c, w.flatten(1)); }, __LINE__, "bilinear", {"f64[5,6]", "[out, in1, in2]"});
  expect_error([&] { (void)F::bilinear(a, c.unsqueeze(0), w); }, __LINE__, "bilinear", {"the same rank"});
  expect_error([&] { (void)F::bilinear(a, rnd({3, 2}, 11), w); }, __LINE__, "bilinear", {"f64[3,2]", "batch dims differ"});
  expect_error([&] { (void)F::bilinear(c, a, w); }, __LINE__, "bilinear", {"in1 = 3 and in2 = 2"});
  expect_error([&] { (void)F::bilinear(a, c, w, rnd({4}, 12)); }, __LINE__, "bilinear", {"the bias must be [out] = [5]"});
  expect_error([&] { (void)m.forward(a, c.flatten()); }, __LINE__, "Bilinear", {"the same rank"});
  expect_error([&] { nn::Bilinear bad(3, 0, 2); }, __LINE__, "Bilinear", {"in2=0"});
}

// ---------------------------------------------------------------- Threshold, Softmax2d, Unflatten

TEST(ThresholdAndSoftmax2d, MatchPyTorch) {
  for (const ElementwiseCase& c : kElementwise) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = std::string(c.op) == "threshold" ? nn::Threshold(c.threshold, c.value)(x) : nn::Softmax2d()(x);
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.out, 1e-14, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, 1e-12, std::string(c.name) + " grad");
  }
  const Tensor nan = from_vector(std::vector<double>{kNaN, -kInf, kInf, 0.5});
  const std::vector<double> got = values(F::threshold(nan, 0.5, -1));
  EXPECT_TRUE(std::isnan(got[0])); // NaN <= threshold is false: kept, as PyTorch's
  EXPECT_EQ(got[1], -1);
  EXPECT_EQ(got[2], kInf);
  EXPECT_EQ(got[3], -1);
  EXPECT_EQ(nn::Threshold(0.1, 20).str(), "Threshold(threshold=0.1, value=20.0)");
  expect_gradcheck([](const std::vector<Tensor>& v) { return (nn::Softmax2d()(v[0]) * v[1]).sum(); },
                   {rnd({2, 3, 2, 2}, 13), rnd({2, 3, 2, 2}, 14)});
  nn::Softmax2d s;
  expect_error([&] { (void)s(rnd({3, 4}, 15)); }, __LINE__, "Softmax2d", {"f64[3,4]", "3-d or 4-d"});
}

TEST(Unflatten, SplitsADim) {
  const Tensor x = rnd({2, 12, 3}, 16);
  EXPECT_EQ(x.unflatten(1, {3, 4}).shape(), (IntList{2, 3, 4, 3}));
  EXPECT_EQ(x.unflatten(-2, {2, -1, 3}).shape(), (IntList{2, 2, 2, 3, 3}));
  EXPECT_EQ(x.unflatten(2, {3}).shape(), x.shape());
  EXPECT_EQ(rnd({0, 6}, 17).unflatten(1, {2, 3}).shape(), (IntList{0, 2, 3}));
  expect_same(values(nn::Unflatten(1, {4, 3})(x)), values(x), "Unflatten keeps the order");
  EXPECT_EQ(nn::Unflatten(1, {4, 3}).str(), "Unflatten(dim=1, unflattened_size=(4, 3))");
  EXPECT_EQ(nn::Unflatten(-1, {5}).str(), "Unflatten(dim=-1, unflattened_size=(5,))");
  Tensor g = rnd({2, 6}, 18).requires_grad_();
  (g.unflatten(1, {2, 3}) * weights_for(g.unflatten(1, {2, 3}))).sum().backward();
  expect_same(values(g.grad()), values(weights_for(g)), "gradient");
  expect_error([&] { (void)x.unflatten(1, {5, 2}); }, __LINE__, "unflatten", {"f64[2,12,3]", "[5,2] don't multiply up to the size of dim 1 (12)"});
  expect_error([&] { (void)x.unflatten(1, {-1, -1}); }, __LINE__, "unflatten", {"only one size can be -1"});
  expect_error([&] { (void)x.unflatten(1, {-1, 5}); }, __LINE__, "unflatten", {"don't multiply up"});
  expect_error([&] { (void)x.unflatten(1, {}); }, __LINE__, "unflatten", {"non-empty"});
  expect_error([&] { (void)x.unflatten(3, {1}); }, __LINE__, "unflatten", {"dim"});
  expect_error([&] { (void)x.unflatten(1, {-2, -6}); }, __LINE__, "unflatten", {"negative"});
  nn::Unflatten u(0, {3, 3});
  expect_error([&] { (void)u(x); }, __LINE__, "Unflatten", {"don't multiply up"});
}

// ---------------------------------------------------------------- ParameterList, ParameterDict

TEST(ParameterContainers, NameAsPyTorchsStateDict) {
  nn::ParameterList list({ones({2}), zeros({3})});
  EXPECT_EQ(list.append(full({1}, 2.0)).shape(), (IntList{1}));
  ASSERT_EQ(list.size(), 3u);
  EXPECT_TRUE(list[0].requires_grad());
  EXPECT_EQ(list[-1].to_vector<float>(), std::vector<float>{2});
  std::vector<std::string> names;
  for (const auto& [n, t] : list.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0", "1", "2"}));

  nn::ParameterDict dict;
  dict.insert("scale", ones({2}));
  dict.insert("shift", zeros({2}));
  dict.insert("scale", full({3}, 4.0)); // replaced in place
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"scale", "shift"}));
  EXPECT_EQ(dict["scale"].shape(), (IntList{3}));
  EXPECT_TRUE(dict.contains("shift"));
  EXPECT_EQ(dict.pop("shift").shape(), (IntList{2}));
  EXPECT_EQ(dict.size(), 1u);

  struct Net : nn::Module { // nested: the dotted names torch's state_dict gives
    std::shared_ptr<nn::ParameterList> ps = register_module("ps", nn::ParameterList({ones({2})}));
    std::shared_ptr<nn::ParameterDict> pd = register_module("pd", nn::ParameterDict());
  } net;
  net.pd->insert("a", ones({1}));
  names.clear();
  for (const auto& [n, t] : net.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"ps.0", "pd.a"}));
  // parameters train: the gradient reaches them
  (list[0] * list[0]).sum().backward();
  EXPECT_EQ(list[0].grad().to_vector<float>(), (std::vector<float>{2, 2}));
  net.to(kFloat64);
  EXPECT_EQ((*net.ps)[0].dtype(), kFloat64);

  expect_error([&] { (void)list[3]; }, __LINE__, "ParameterList", {"index 3 is out of range for 3 parameters"});
  expect_error([&] { (void)list.append(Tensor()); }, __LINE__, "ParameterList::append", {"undefined"});
  expect_error([&] { (void)dict["nope"]; }, __LINE__, "ParameterDict", {"no parameter named \"nope\""});
  expect_error([&] { (void)dict.insert("a.b", ones({1})); }, __LINE__, "ParameterDict", {"no '.'"});
  expect_error([&] { (void)dict.pop("nope"); }, __LINE__, "ParameterDict", {"no parameter named"});
}

// ---------------------------------------------------------------- fused, unfused and compiled

std::vector<Tensor> more_program(const Tensor& a, const Tensor& c, const Tensor& w, const Tensor& img) {
  const Tensor y = F::bilinear(a, c, w) + F::threshold(a.sum({1}, true), 0.2, -1.0);
  const Tensor s = nn::Softmax2d()(img.flatten(2).unflatten(2, {2, 2}));
  const Tensor loss = (y * y).sum() + (s * img).sum();
  std::vector<Tensor> out = {y, s, loss};
  for (const Tensor& g : grad({loss}, {a, c, w, img})) out.push_back(g);
  return out;
}

TEST(NnMore, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& v) { return more_program(v[0], v[1], v[2], v[3]); },
      [](uint64_t seed) {
        return std::vector<Tensor>{randn({4, 3}, seed).requires_grad_(), randn({4, 2}, seed + 1).requires_grad_(),
                                   randn({5, 3, 2}, seed + 2).requires_grad_(),
                                   randn({2, 6, 2, 2}, seed + 3).requires_grad_()};
      });
}

} // namespace
} // namespace kiln

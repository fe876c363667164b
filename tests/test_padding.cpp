// pad's modes (reflect, replicate, circular, and constant by name), the padding modules (ZeroPad, ConstantPad,
// ReflectionPad, ReplicationPad 1d/2d/3d) and the convolution modules' padding_mode. Forward values and
// gradients against PyTorch 1.13 (generated tables), gradients by gradcheck in f64, fused against unfused and
// compile(), zero-size inputs, and error messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <functional>
#include <limits>
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

void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_padding.cpp", line, op, parts);
}

// ---------------------------------------------------------------- pad's modes

struct PadModeCase {
  const char* name;
  const char* mode;
  IntList shape;
  std::vector<double> input;
  IntList pads;
  double value;
  IntList out_shape;
  std::vector<double> out, grad; ///< PyTorch's values and d(sum(out * u))
};

const PadModeCase kPadModes[] = {
#include "pytorch_padding_table.inc"
};

TEST(PadModes, MatchPyTorch) {
  for (const PadModeCase& c : kPadModes) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = pad(x, c.pads, c.mode, c.value);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_same(values(y), c.out, std::string(c.name) + " values"); // copies: exact
    expect_close(values(x.grad()), c.grad, 1e-14, std::string(c.name) + " grad"); // sums of the weights u
  }
}

TEST(PadModes, Gradcheck) {
  for (const char* mode : {"reflect", "replicate", "circular"}) { // a C string converts to PadMode
    expect_gradcheck([&](const std::vector<Tensor>& v) { return (pad(v[0], {2, -1}, mode) * v[1]).sum(); },
                     {rnd({2, 2, 4}, 1), rnd({2, 2, 5}, 2)});
    expect_gradcheck([&](const std::vector<Tensor>& v) { return (pad(v[0], {1, 2, 2, 1}, mode) * v[1]).sum(); },
                     {rnd({1, 2, 3, 3}, 3), rnd({1, 2, 6, 6}, 4)});
    expect_gradcheck([&](const std::vector<Tensor>& v) { return (pad(v[0], {1, 1, 0, 2, 1, 0}, mode) * v[1]).sum(); },
                     {rnd({1, 1, 2, 3, 3}, 5), rnd({1, 1, 3, 5, 5}, 6)});
  }
  // the gradient of a gradient (the pad of a product's gradient)
  expect_gradcheck([](const std::vector<Tensor>& v) {
    const Tensor y = pad(v[0] * v[0], {2, 1}, "reflect");
    return (grad({(y * v[1]).sum()}, {v[0]}, {}, false, true)[0] * v[0]).sum();
  }, {rnd({1, 2, 4}, 7).requires_grad_(), rnd({1, 2, 7}, 8)});
}

TEST(PadModes, EdgesAndDtypes) {
  const Tensor i = arange(0, 4, 1, kInt64).reshape({1, 1, 4});
  EXPECT_EQ(pad(i, {2, 1}, "reflect").to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 0, 1, 2, 3, 2}));
  EXPECT_EQ(pad(i, {2, 1}, "replicate").to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1, 2, 3, 3}));
  EXPECT_EQ(pad(i, {2, 1}, "circular").to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 0, 1, 2, 3, 0}));
  EXPECT_EQ(pad(rnd({0, 2, 3}, 9), {1, 1}, "reflect").shape(), (IntList{0, 2, 5})); // an empty batch
  EXPECT_EQ(pad(rnd({0, 2, 3}, 9), {2, 2}, "replicate").shape(), (IntList{0, 2, 7}));
  EXPECT_EQ(pad(rnd({2, 0, 3, 2}, 9), {1, 1, 1, 1}, "circular").shape(), (IntList{2, 0, 5, 4}));
  EXPECT_EQ(pad(rnd({2, 1, 0}, 9), {0, 0}, "circular").shape(), (IntList{2, 1, 0}));
  EXPECT_EQ(pad(rnd({1, 1, 1}, 9), {3, 2}, "replicate").shape(), (IntList{1, 1, 6}));
  const Tensor x = rnd({2, 3}, 10);
  expect_same(values(pad(x, {1, 2}, "constant", 1.5)), values(pad(x, {1, 2}, 1.5)), "constant by name");
  expect_same(values(pad(x, {0, 0}, "reflect")), values(x), "no padding");
}

TEST(PadModes, Errors) {
  const Tensor x = rnd({1, 2, 4}, 11);
  expect_error([&] { (void)pad(x, {1, 1}, "mirror"); }, __LINE__, "pad", {"f64[1,2,4]", "unknown mode \"mirror\""});
  expect_error([&] { (void)pad(x, {1, 1}, "reflect", 1.0); }, __LINE__, "pad", {"mode reflect takes no value"});
  expect_error([&] { (void)pad(x, {1}, "replicate"); }, __LINE__, "pad", {"(before, after) pairs", "[1]"});
  expect_error([&] { (void)pad(x, {1, 1, 1, 1, 1, 1, 1, 1}, "replicate"); }, __LINE__, "pad", {"last 1, 2 or 3 dims"});
  expect_error([&] { (void)pad(rnd({4}, 12), {1, 1}, "reflect"); }, __LINE__, "pad", {"f64[4]", "2-d or 3-d", "got a 1-d"});
  expect_error([&] { (void)pad(x, {1, 1, 1, 1, 1, 1}, "replicate"); }, __LINE__, "pad", {"4-d or 5-d", "got a 3-d"});
  expect_error([&] { (void)pad(rnd({2, 4}, 13), {1, 1}, "circular"); }, __LINE__, "pad", {"f64[2,4]", "a 3-d input", "got a 2-d"});
  expect_error([&] { (void)pad(x, {4, 0}, "reflect"); }, __LINE__, "pad", {"(4, 0) of dim 2", "less than its extent 4"});
  expect_error([&] { (void)pad(x, {-5, 4}, "reflect"); }, __LINE__, "pad", {"less than its extent 4"});
  expect_error([&] { (void)pad(x, {-3, -1}, "reflect"); }, __LINE__, "pad", {"leaves no element of its extent 4"});
  expect_error([&] { (void)pad(x, {-3, -1}, "replicate"); }, __LINE__, "pad", {"leaves no element"});
  expect_error([&] { (void)pad(rnd({1, 2, 0}, 14), {0, 0}, "replicate"); }, __LINE__, "pad", {"leaves no element of its extent 0"});
  expect_error([&] { (void)pad(rnd({1, 2, 0}, 14), {1, 1}, "reflect"); }, __LINE__, "pad", {"less than its extent 0"});
  expect_error([&] { (void)pad(x, {5, 5}, "circular"); }, __LINE__, "pad", {"wraps around more than once", "extent 4"});
  expect_error([&] { (void)pad(x, {-2, 3}, "circular"); }, __LINE__, "pad", {"exceeds the 2 elements left"});
  expect_error([&] { (void)pad(x, {-3, -2}, "circular"); }, __LINE__, "pad", {"crops more than its extent 4"});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  expect_error([&] { (void)pad(x, {kMin, 1}, "replicate"); }, __LINE__, "pad", {"overflows"});
  expect_error([&] { (void)pad(x, {kMax, 1}, "replicate"); }, __LINE__, "pad", {"overflows"});
  expect_error([&] { (void)pad(Tensor(), {1, 1}, "reflect"); }, __LINE__, "pad", {"undefined"});
}

// ---------------------------------------------------------------- padding modules

TEST(PadModules, ComputeTheirModeAndPrintAsPyTorch) {
  const Tensor x = rnd({1, 2, 3, 4, 5}, 20);
  const Tensor x4 = x.squeeze(0), x3 = rnd({2, 3, 4}, 22);
  expect_same(values(nn::ZeroPad2d(2)(x4)), values(pad(x4, {2, 2, 2, 2})), "ZeroPad2d");
  expect_same(values(nn::ZeroPad1d({1, 2})(x3)), values(pad(x3, {1, 2})), "ZeroPad1d");
  expect_same(values(nn::ZeroPad3d(1)(x)), values(pad(x, {1, 1, 1, 1, 1, 1})), "ZeroPad3d");
  expect_same(values(nn::ConstantPad1d(2, 3.5)(x3)), values(pad(x3, {2, 2}, 3.5)), "ConstantPad1d");
  expect_same(values(nn::ConstantPad2d({1, 0, 2, 1}, -1)(x3)), values(pad(x3, {1, 0, 2, 1}, -1)), "ConstantPad2d");
  expect_same(values(nn::ConstantPad3d(1, 2)(x4)), values(pad(x4, {1, 1, 1, 1, 1, 1}, 2)), "ConstantPad3d");
  expect_same(values(nn::ReflectionPad1d({2, 1})(x3)), values(pad(x3, {2, 1}, "reflect")), "ReflectionPad1d");
  expect_same(values(nn::ReflectionPad2d(1)(x4)), values(pad(x4, {1, 1, 1, 1}, "reflect")), "ReflectionPad2d");
  expect_same(values(nn::ReflectionPad3d({1, 0, 2, 1, 0, 2})(x)), values(pad(x, {1, 0, 2, 1, 0, 2}, "reflect")),
              "ReflectionPad3d");
  expect_same(values(nn::ReplicationPad1d(3)(x3)), values(pad(x3, {3, 3}, "replicate")), "ReplicationPad1d");
  expect_same(values(nn::ReplicationPad2d({0, 1, 2, 3})(x4)), values(pad(x4, {0, 1, 2, 3}, "replicate")),
              "ReplicationPad2d");
  expect_same(values(nn::ReplicationPad3d(2)(x4)), values(pad(x4, {2, 2, 2, 2, 2, 2}, "replicate")), "ReplicationPad3d");
  EXPECT_EQ(nn::ZeroPad2d(2).str(), "ZeroPad2d((2, 2, 2, 2))");
  EXPECT_EQ(nn::ReflectionPad2d({1, 2, 0, 1}).str(), "ReflectionPad2d((1, 2, 0, 1))");
  EXPECT_EQ(nn::ReflectionPad1d(2).str(), "ReflectionPad1d((2, 2))");
  EXPECT_EQ(nn::ReplicationPad3d(1).str(), "ReplicationPad3d((1, 1, 1, 1, 1, 1))");
  EXPECT_EQ(nn::ConstantPad1d(2, 3.5).str(), "ConstantPad1d(padding=(2, 2), value=3.5)");
  EXPECT_EQ(nn::ConstantPad3d({1, 2, 3, 4, 5, 6}, 1).str(), "ConstantPad3d(padding=(1, 2, 3, 4, 5, 6), value=1.0)");
  EXPECT_TRUE(nn::ReflectionPad2d(1).parameters().empty());
}

TEST(PadModules, Errors) {
  expect_error([&] { nn::ReflectionPad2d m({1, 2}); }, __LINE__, "ReflectionPad2d", {"needs one padding or 4", "got 2"});
  expect_error([&] { nn::ConstantPad1d m({1, 2, 3}, 0); }, __LINE__, "ConstantPad1d", {"needs one padding or 2"});
  nn::ReflectionPad1d m(3);
  const Tensor x = rnd({1, 2, 3}, 21);
  expect_error([&] { (void)m(x); }, __LINE__, "ReflectionPad1d", {"less than its extent 3"});
  expect_error([&] { (void)m.forward(x); }, __LINE__, "ReflectionPad1d", {"f64[1,2,3]"});
}

// ---------------------------------------------------------------- convolutions' padding_mode

struct ConvPadModeCase {
  const char* name;
  int dims;
  IntList shape;
  std::vector<double> input;
  int64_t out_channels;
  IntList kernel, stride, padding, dilation; ///< padding {}: "same", {-1}: "valid"
  int64_t groups;
  const char* padding_mode;
  IntList weight_shape;
  std::vector<double> weight, bias; ///< bias {}: none
  IntList out_shape;
  std::vector<double> out, grad, weight_grad, bias_grad;
};

const ConvPadModeCase kConvPadModes[] = {
#include "pytorch_conv_pad_mode_table.inc"
};

// The module of case c (its parameters in f64, set to PyTorch's).
std::shared_ptr<nn::Module> conv_module(const ConvPadModeCase& c) {
  const int64_t in = c.weight_shape[1] * c.groups;
  const bool bias = !c.bias.empty();
  const nn::PaddingMode pm = c.padding.empty() ? nn::PaddingMode::Same : nn::PaddingMode::Valid;
  const bool expl = !c.padding.empty() && c.padding[0] >= 0;
  std::shared_ptr<nn::Module> m;
  if (c.dims == 1) {
    const nn::Padding1 p = expl ? nn::Padding1(c.padding[0]) : nn::Padding1(pm);
    m = std::make_shared<nn::Conv1d>(in, c.out_channels, c.kernel[0],
                                     nn::Conv1dOptions{c.stride[0], p, c.dilation[0], c.groups, bias, c.padding_mode});
  } else if (c.dims == 2) {
    const nn::Padding2 p = expl ? nn::Padding2(nn::Size2(c.padding[0], c.padding[1])) : nn::Padding2(pm);
    m = std::make_shared<nn::Conv2d>(in, c.out_channels, nn::Size2(c.kernel[0], c.kernel[1]),
                                     nn::Conv2dOptions{nn::Size2(c.stride[0], c.stride[1]), p,
                                                       nn::Size2(c.dilation[0], c.dilation[1]), c.groups, bias,
                                                       c.padding_mode});
  } else {
    auto s3 = [](const IntList& v) { return nn::Size3(v[0], v[1], v[2]); };
    m = std::make_shared<nn::Conv3d>(in, c.out_channels, s3(c.kernel),
                                     nn::Conv3dOptions{s3(c.stride), s3(c.padding), s3(c.dilation), c.groups, bias,
                                                       c.padding_mode});
  }
  m->to(kFloat64);
  std::vector<NamedValues> params = {{"weight", c.weight_shape, c.weight}};
  if (bias) params.push_back({"bias", {c.out_channels}, c.bias});
  load_params(*m, params);
  return m;
}

TEST(ConvPaddingMode, MatchesPyTorch) {
  for (const ConvPadModeCase& c : kConvPadModes) {
    const std::shared_ptr<nn::Module> m = conv_module(c);
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = (*m)(x);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    const nn::NamedTensors p = m->named_parameters();
    expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, 1e-12, std::string(c.name) + " input grad");
    expect_close(values(p[0].second.grad()), c.weight_grad, 1e-12, std::string(c.name) + " weight grad");
    if (!c.bias.empty()) expect_close(values(p[1].second.grad()), c.bias_grad, 1e-12, std::string(c.name) + " bias grad");
  }
}

TEST(ConvPaddingMode, GradcheckReprAndErrors) {
  nn::Conv2d conv(2, 2, 3, {.padding = 1, .padding_mode = "reflect"});
  conv.to(kFloat64);
  expect_gradcheck([&](const std::vector<Tensor>& v) { return (conv(v[0]) * v[1]).sum(); },
                   {rnd({1, 2, 4, 5}, 30), rnd({1, 2, 4, 5}, 31)});
  EXPECT_EQ(conv.str(), "Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1, "
                        "bias=true, padding_mode=reflect)");
  EXPECT_EQ(nn::Conv1d(2, 3, 3, {.padding = "same", .padding_mode = "circular"}).str(),
            "Conv1d(2, 3, kernel_size=(3,), stride=(1,), padding=same, dilation=(1,), groups=1, bias=true, "
            "padding_mode=circular)");
  expect_error([&] { nn::Conv1d m(2, 3, 3, {.padding_mode = "foo"}); }, __LINE__, "Conv1d", {"padding_mode must be one of", "'foo'"});
  expect_error([&] { nn::Conv2d m(2, 3, 3, {.padding_mode = "zero"}); }, __LINE__, "Conv2d", {"padding_mode='zero'"});
  expect_error([&] { nn::Conv3d m(2, 3, 3, {.padding_mode = "mirror"}); }, __LINE__, "Conv3d", {"padding_mode='mirror'"});
  nn::Conv1d c1(2, 3, 3, {.padding = 3, .padding_mode = "reflect"});
  expect_error([&] { (void)c1(rnd({1, 2, 3}, 32).to(kFloat32)); }, __LINE__, "Conv1d", {"less than its extent 3"});
  nn::Conv1d circ(2, 3, 3, {.padding = 1, .padding_mode = "circular"}); // PyTorch's F.pad: circular needs a batch
  expect_error([&] { (void)circ(rnd({2, 5}, 33).to(kFloat32)); }, __LINE__, "Conv1d", {"a 3-d input"});
}

// ---------------------------------------------------------------- fused, unfused and compiled

std::vector<Tensor> padding_program(const Tensor& x, const Tensor& img, const Tensor& vol) {
  const Tensor a = pad(x, {2, -1}, "reflect") * pad(x, {-1, 2}, "circular");
  const Tensor b = pad(img, {1, 2, 2, 1}, "replicate").sin() + pad(img, {1, 2, 2, 1}, "reflect");
  const Tensor c = pad(vol, {1, 0, 0, 1, 1, 1}, "circular");
  const Tensor loss = (a * a).sum() + (b * b).sum() + (c * c.exp()).sum();
  std::vector<Tensor> out = {a, b, c, loss};
  for (const Tensor& g : grad({loss}, {x, img, vol})) out.push_back(g);
  return out;
}

TEST(PadModes, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& a) { return padding_program(a[0], a[1], a[2]); },
      [](uint64_t seed) {
        return std::vector<Tensor>{randn({2, 3, 5}, seed).requires_grad_(), randn({1, 2, 3, 4}, seed + 1).requires_grad_(),
                                   randn({1, 1, 2, 3, 3}, seed + 2).requires_grad_()};
      });
}

} // namespace
} // namespace kiln

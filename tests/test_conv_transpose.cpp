// Transposed convolutions (conv_transpose1d, conv_transpose2d and their modules) and avg_pool2d's
// divisor_override: values and input, weight and bias gradients against PyTorch 1.13 (a generated table),
// gradchecks in f64 (first and second order), the forward-mode rule, the adjoint identity with conv2d,
// fused against unfused and compile(), and error messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <cmath>
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
#include "kiln/options.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using namespace test; // values, rnd, expect_gradcheck, expect_close, expect_same, weights_for

void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_conv_transpose.cpp", line, op, parts);
}

// ---------------------------------------------------------------- against PyTorch

struct ConvTransposeCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList weight_shape;
  std::vector<double> weight, bias; ///< bias {}: none
  IntList stride, padding, output_padding;
  int64_t groups;
  IntList dilation;
  IntList out_shape;
  std::vector<double> out, grad, weight_grad, bias_grad; ///< PyTorch's values and d(sum(out * u))
};

const ConvTransposeCase kConvTranspose[] = {
#include "pytorch_conv_transpose_table.inc"
};

// The case's op: conv_transpose1d for a [in, out/groups, k] weight, conv_transpose2d for [in, out/groups, kh, kw].
Tensor conv_transpose_of(const ConvTransposeCase& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  if (c.weight_shape.size() == 3)
    return F::conv_transpose1d(x, w, b, c.stride[0], c.padding[0], c.output_padding[0], c.groups, c.dilation[0]);
  if (c.weight_shape.size() == 5) {
    auto s3 = [](const IntList& v) { return nn::Size3(v[0], v[1], v[2]); };
    return F::conv_transpose3d(x, w, b, s3(c.stride), s3(c.padding), s3(c.output_padding), c.groups, s3(c.dilation));
  }
  return F::conv_transpose2d(x, w, b, {c.stride[0], c.stride[1]}, {c.padding[0], c.padding[1]},
                             {c.output_padding[0], c.output_padding[1]}, c.groups, {c.dilation[0], c.dilation[1]});
}

TEST(ConvTranspose, MatchesPyTorch) {
  for (const ConvTransposeCase& c : kConvTranspose) {
    expect_conv_case(c, [&](const Tensor& x, const Tensor& w, const Tensor& b) { return conv_transpose_of(c, x, w, b); });
  }
}

TEST(ConvTranspose, F32MatchesF64) {
  for (const ConvTransposeCase& c : kConvTranspose) {
    const Tensor x = from_vector(c.input, c.shape).to(kFloat32), w = from_vector(c.weight, c.weight_shape).to(kFloat32);
    const Tensor b = c.bias.empty() ? Tensor() : from_vector(c.bias).to(kFloat32);
    const Tensor y = conv_transpose_of(c, x, w, b);
    EXPECT_EQ(y.dtype(), kFloat32) << c.name;
    expect_close(values(y), c.out, 1e-5, std::string(c.name) + " f32 values");
  }
}

struct DivisorCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList kernel, stride, padding; ///< stride {}: the kernel
  bool ceil_mode, count_include_pad;
  int64_t divisor_override;
  IntList out_shape;
  std::vector<double> out, grad;
};

const DivisorCase kDivisor[] = {
#include "pytorch_avg_pool_divisor_table.inc"
};

TEST(AvgPoolDivisorOverride, MatchesPyTorch) {
  for (const DivisorCase& c : kDivisor) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const nn::Size2 k(c.kernel[0], c.kernel[1]), p(c.padding[0], c.padding[1]);
    const Tensor y = c.stride.empty()
                         ? F::avg_pool2d(x, k, std::nullopt, p, c.ceil_mode, c.count_include_pad, c.divisor_override)
                         : F::avg_pool2d(x, k, {c.stride[0], c.stride[1]}, p, c.ceil_mode, c.count_include_pad,
                                         c.divisor_override);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, 1e-12, std::string(c.name) + " input grad");
  }
}

TEST(AvgPoolDivisorOverride, ModuleGradcheckAndErrors) {
  const Tensor x = rnd({1, 2, 5, 6}, 1);
  nn::AvgPool2d pool(3, 2, 1, true, false, 7);
  EXPECT_EQ(pool.str(),
            "AvgPool2d(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=true, count_include_pad=false, "
            "divisor_override=7)");
  expect_same(values(pool(x)), values(F::avg_pool2d(x, 3, 2, 1, true, false, 7)), "module");
  // a window's sum over the override: the same as the mean of whole windows times kh * kw / divisor
  expect_close(values(F::avg_pool2d(x, 2, std::nullopt, 0, false, true, 2)), values(F::avg_pool2d(x, 2) * 2.0), 1e-15,
               "2x2 over 2");
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::avg_pool2d(v[0], 3, 2, 1, true, false, -3) * v[1]).sum(); },
                   {rnd({1, 2, 5, 6}, 2), rnd({1, 2, 3, 4}, 3)});
  expect_error([&] { (void)F::avg_pool2d(x, 2, std::nullopt, 0, false, true, 0); }, __LINE__, "avg_pool2d",
               {"divisor_override must not be zero", "f64[1,2,5,6]"});
  expect_error([&] { (void)nn::AvgPool2d(2, std::nullopt, 0, false, true, 0)(x); }, __LINE__, "AvgPool2d",
               {"divisor_override"});
}

// ---------------------------------------------------------------- gradients

TEST(ConvTranspose, Gradcheck) {
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv_transpose2d(v[0], v[1], v[2]) * v[3]).sum(); },
                   {rnd({2, 3, 3, 4}, 1), rnd({3, 2, 2, 3}, 2), rnd({2}, 3), rnd({2, 2, 4, 6}, 4)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::conv_transpose2d(v[0], v[1], v[2], {2, 3}, {1, 0}, {1, 2}, 2, {1, 2}) * v[3]).sum();
      },
      {rnd({1, 4, 3, 3}, 5), rnd({4, 3, 3, 2}, 6), rnd({6}, 7), rnd({1, 6, 6, 11}, 8)});
  expect_gradcheck( // padding past the kernel: the spread input is cropped
      [](const std::vector<Tensor>& v) { return (F::conv_transpose2d(v[0], v[1], Tensor(), 2, 2) * v[2]).sum(); },
      {rnd({2, 3, 3}, 9), rnd({2, 2, 2, 2}, 10), rnd({2, 2, 2}, 11)}); // unbatched
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::conv_transpose1d(v[0], v[1], v[2], 3, 2, 2, 2, 2) * v[3]).sum(); },
      {rnd({1, 4, 5}, 12), rnd({4, 3, 3}, 13), rnd({6}, 14), rnd({1, 6, 15}, 15)});
  expect_gradcheck( // 3-d: depth stride, padding, output_padding and dilation, two groups
      [](const std::vector<Tensor>& v) {
        return (F::conv_transpose3d(v[0], v[1], v[2], {2, 1, 2}, {1, 0, 1}, {1, 0, 0}, 2, {1, 1, 1}) * v[3]).sum();
      },
      {rnd({1, 4, 2, 2, 3}, 16), rnd({4, 1, 3, 2, 2}, 17), rnd({2}, 18), rnd({1, 2, 4, 3, 4}, 19)});
  expect_gradcheck( // second order
      [](const std::vector<Tensor>& v) {
        const Tensor y = F::conv_transpose3d(v[0] * v[0], v[1], Tensor(), 2, 1);
        return (grad({(y * y).sum()}, {v[0]}, {}, false, true)[0] * v[0]).sum();
      },
      {rnd({1, 2, 2, 2, 2}, 20), rnd({2, 1, 2, 2, 2}, 21)});
}

TEST(ConvTranspose, SecondOrderGradcheck) {
  // the backward is graph of differentiable ops: gradients of gradients (x and weight both)
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        const Tensor y = F::conv_transpose2d(v[0], v[1], Tensor(), 2, 1, 1);
        const auto g = grad({(y * y).sum()}, {v[0], v[1]}, {}, false, true);
        return (g[0] * g[0]).sum() + (g[1] * v[2]).sum();
      },
      {rnd({1, 2, 3, 3}, 16), rnd({2, 2, 3, 3}, 17), rnd({2, 2, 3, 3}, 18)});
}

TEST(ConvTranspose, ForwardModeMatchesReverseMode) {
  const Tensor x = rnd({2, 4, 3, 3}, 19), w = rnd({4, 3, 3, 2}, 20), tx = rnd({2, 4, 3, 3}, 21), tw = rnd({4, 3, 3, 2}, 22);
  auto f = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{F::conv_transpose2d(v[0], v[1], Tensor(), 2, 1, 1, 2)}; };
  const auto [y, t] = jvp(f, {x, w}, {tx, tw});
  // bilinear: the tangent is f(tx, w) + f(x, tw)
  const Tensor want = f({tx, w})[0] + f({x, tw})[0];
  expect_close(values(t[0]), values(want), 1e-12, "tangent");
  expect_same(values(y[0]), values(f({x, w})[0]), "primal");
}

// <conv_transpose2d(x, w), y> = <x, conv2d(y, w)>: the two are adjoint, strides, dilations and groups included.
TEST(ConvTranspose, IsTheAdjointOfConv2d) {
  const Tensor x = rnd({2, 4, 3, 4}, 23), w = rnd({4, 3, 3, 2}, 24);
  const Tensor z = F::conv_transpose2d(x, w, Tensor(), {2, 3}, {1, 0}, {1, 2}, 2, {1, 2});
  const Tensor y = rnd(z.shape(), 25);
  const double lhs = (z * y).sum().item<double>();
  const double rhs = (x * F::conv2d(y, w, Tensor(), {2, 3}, {1, 0}, {1, 2}, 2)).sum().item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::fabs(lhs)));
}

// ---------------------------------------------------------------- modules

TEST(ConvTranspose, ModulesInitializeAsPyTorch) {
  nn::manual_seed(3);
  nn::ConvTranspose2d up(4, 6, {3, 2}, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  EXPECT_EQ(up.weight.shape(), (IntList{4, 3, 3, 2}));
  EXPECT_EQ(up.bias.shape(), (IntList{6}));
  const double bound = 1.0 / std::sqrt(3.0 * 3.0 * 2.0); // fan_in = weight.size(1) * kernel = out/groups * kh * kw
  double largest = 0;
  for (double v : values(up.weight)) {
    EXPECT_LE(std::fabs(v), bound);
    largest = std::max(largest, std::fabs(v));
  }
  for (double v : values(up.bias)) EXPECT_LE(std::fabs(v), bound);
  EXPECT_GT(largest, bound / 2); // uniform over the whole range, not a smaller one
  EXPECT_EQ(up.str(), "ConvTranspose2d(4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), "
                      "dilation=(1, 1), groups=2, bias=true)");
  const Tensor x = randn({2, 4, 5, 5}, 26);
  EXPECT_EQ(up(x).shape(), (IntList{2, 6, 10, 9}));
  expect_same(values(up(x)), values(F::conv_transpose2d(x, up.weight, up.bias, 2, 1, 1, 2)), "2-d module");
  EXPECT_EQ(up(randn({4, 5, 5}, 27)).shape(), (IntList{6, 10, 9})); // unbatched

  nn::ConvTranspose1d up1(4, 6, 3, {.stride = 2, .output_padding = 1, .groups = 2, .bias = false, .dilation = 2});
  EXPECT_EQ(up1.weight.shape(), (IntList{4, 3, 3}));
  EXPECT_FALSE(up1.bias.defined());
  for (double v : values(up1.weight)) EXPECT_LE(std::fabs(v), 1.0 / 3.0); // fan_in = 3 * 3
  EXPECT_EQ(up1.parameters().size(), 1u);
  EXPECT_EQ(up1.str(), "ConvTranspose1d(4, 6, kernel_size=(3,), stride=(2,), padding=(0,), output_padding=(1,), "
                       "dilation=(2,), groups=2, bias=false)");
  const Tensor s = randn({2, 4, 7}, 28);
  EXPECT_EQ(up1(s).shape(), (IntList{2, 6, 18}));
  expect_same(values(up1(s)), values(F::conv_transpose1d(s, up1.weight, Tensor(), 2, 0, 1, 2, 2)), "1-d module");
  nn::ConvTranspose3d up3(4, 2, {2, 3, 1}, {.stride = {2, 1, 2}, .output_padding = {1, 0, 0}, .groups = 2});
  EXPECT_EQ(up3.weight.shape(), (IntList{4, 1, 2, 3, 1}));
  for (double v : values(up3.weight)) EXPECT_LE(std::fabs(v), 1.0 / std::sqrt(6.0)); // fan_in = 1 * 2 * 3 * 1
  EXPECT_EQ(up3.str(), "ConvTranspose3d(4, 2, kernel_size=(2, 3, 1), stride=(2, 1, 2), padding=(0, 0, 0), "
                       "output_padding=(1, 0, 0), dilation=(1, 1, 1), groups=2, bias=true)");
  const Tensor v3 = randn({2, 4, 3, 2, 2}, 29);
  EXPECT_EQ(up3(v3).shape(), (IntList{2, 2, 7, 4, 3}));
  expect_same(values(up3(v3)),
              values(F::conv_transpose3d(v3, up3.weight, up3.bias, {2, 1, 2}, 0, {1, 0, 0}, 2)), "3-d module");
  EXPECT_EQ(up3(randn({4, 3, 2, 2}, 30)).shape(), (IntList{2, 7, 4, 3})); // unbatched
  expect_error([] { nn::ConvTranspose2d(3, 4, 2, {.groups = 2}); }, __LINE__, "ConvTranspose2d", {"divisible by groups=2"});
  expect_error([] { nn::ConvTranspose1d(4, 4, 0); }, __LINE__, "ConvTranspose1d", {"kernel size"});
  expect_error([&] { (void)nn::ConvTranspose2d(4, 4, 3, {.output_padding = 1})(x); }, __LINE__, "ConvTranspose2d",
               {"output_padding"});
}

// ---------------------------------------------------------------- errors

TEST(ConvTranspose, Errors3d) {
  const Tensor x = rnd({1, 4, 3, 3, 3}, 31), w = rnd({4, 2, 2, 2, 2}, 32);
  expect_error([&] { (void)F::conv_transpose3d(x, w, Tensor(), 2, 0, {2, 0, 0}); }, __LINE__, "conv_transpose3d", {"output_padding [2,0,0] must be smaller than either the stride [2,2,2] or the dilation [1,1,1]"});
  expect_error([&] { (void)F::conv_transpose3d(x.flatten(2), w); }, __LINE__, "conv_transpose3d", {"f64[1,4,27]", "[N, C, D, H, W]"});
  expect_error([&] { (void)F::conv_transpose3d(x, w.flatten(3)); }, __LINE__, "conv_transpose3d", {"[in, out/groups, kd, kh, kw]"});
  expect_error([&] { (void)F::conv_transpose3d(x, w, Tensor(), 1, 0, 0, 3); }, __LINE__, "conv_transpose3d", {"groups=3"});
  expect_error([&] { (void)F::conv_transpose3d(x, rnd({2, 2, 2, 2, 2}, 33)); }, __LINE__, "conv_transpose3d", {"channels do not match"});
  expect_error([&] { (void)F::conv_transpose3d(x, w, rnd({3}, 34)); }, __LINE__, "conv_transpose3d", {"the bias must be [out] = [2]"});
  expect_error([&] { (void)F::conv_transpose3d(x, w, Tensor(), 1, {3, 0, 0}); }, __LINE__, "conv_transpose3d", {"output depth -2 is too small"});
  expect_error([&] { (void)F::conv_transpose3d(x, w, Tensor(), {0, 1, 1}); }, __LINE__, "conv_transpose3d", {"stride and dilation must be positive"});
  expect_error([&] { (void)F::conv_transpose3d(rnd({1, 4, 0, 3, 3}, 35), w); }, __LINE__, "conv_transpose3d", {"spatial extents must be positive"});
}

TEST(ConvTranspose, Errors) {
  const Tensor x = rnd({2, 4, 5, 5}, 29), w = rnd({4, 3, 3, 3}, 30);
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), 2, 0, 2); }, __LINE__, "conv_transpose2d",
               {"output_padding [2,2] must be smaller than either the stride [2,2] or the dilation [1,1]"});
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), 1, 0, 1); }, __LINE__, "conv_transpose2d",
               {"output_padding"});
  expect_error([&] { (void)F::conv_transpose2d(x, rnd({3, 3, 3, 3}, 31)); }, __LINE__, "conv_transpose2d",
               {"channels do not match", "f64[2,4,5,5]", "f64[3,3,3,3]"});
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), 1, 0, 0, 3); }, __LINE__, "conv_transpose2d",
               {"groups=3"});
  expect_error([&] { (void)F::conv_transpose2d(x, w, rnd({4}, 32)); }, __LINE__, "conv_transpose2d",
               {"the bias must be [out] = [3]"});
  EXPECT_EQ(F::conv_transpose2d(x, w, rnd({6}, 32), 1, 0, 0, 2).shape(), (IntList{2, 6, 7, 7})); // out = 3 x groups
  expect_error([&] { (void)F::conv_transpose2d(x.reshape({2, 4, 5, 5, 1}), w); }, __LINE__, "conv_transpose2d",
               {"[N, C, H, W]"});
  expect_error([&] { (void)F::conv_transpose2d(x, w.reshape({4, 3, 9})); }, __LINE__, "conv_transpose2d",
               {"the weight must be [in, out/groups, kh, kw]"});
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), 1, 4); }, __LINE__, "conv_transpose2d",
               {"the output size (-1 x -1) is too small"});
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), 0); }, __LINE__, "conv_transpose2d", {"positive"});
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), {1, big}); }, __LINE__, "conv_transpose2d", {"overflows"});
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), 1, 0, 0, 1, {1, big}); }, __LINE__, "conv_transpose2d",
               {"overflows"});
  expect_error([&] { (void)F::conv_transpose2d(x, w, Tensor(), {1, 1 << 30}, 0, 0, 1, {1, 1 << 30}); }, __LINE__,
               "conv_transpose2d"); // a valid extent, but too many elements
  expect_error([&] { (void)F::conv_transpose2d(rnd({1, 4, 0, 3}, 33), w); }, __LINE__, "conv_transpose2d",
               {"spatial extents must be positive"});
  const Tensor s = rnd({2, 4, 7}, 34), w1 = rnd({4, 3, 3}, 35);
  expect_error([&] { (void)F::conv_transpose1d(s, w1, Tensor(), 2, 0, 2); }, __LINE__, "conv_transpose1d",
               {"output_padding 2 must be smaller than either the stride 2 or the dilation 1"});
  expect_error([&] { (void)F::conv_transpose1d(s.reshape({56}), w1); }, __LINE__, "conv_transpose1d", {"[N, C, L]"});
  expect_error([&] { (void)F::conv_transpose1d(s, w); }, __LINE__, "conv_transpose1d", {"[in, out/groups, k]"});
  expect_error([&] { (void)F::conv_transpose1d(s, rnd({5, 3, 3}, 36)); }, __LINE__, "conv_transpose1d",
               {"channels do not match"});
}

// ---------------------------------------------------------------- fused, unfused and compiled

// A decoder's upsampling path in one program, and the gradients of its loss with respect to the inputs.
std::vector<Tensor> decoder_program(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& w1,
                                    const Tensor& w3) {
  const Tensor up = relu(F::conv_transpose2d(x, w, b, 2, 1, 1, 2));
  const Tensor pooled = F::avg_pool2d(up, 3, 2, 1, true, false, 5);
  const Tensor seq = F::conv_transpose1d(pooled.flatten(2), w1, Tensor(), 3, 1, 2, 1, 2);
  const Tensor vol = F::conv_transpose3d(up.unflatten(1, {3, 2}), w3, Tensor(), 2, {1, 0, 0}, {1, 0, 1});
  const Tensor loss = (up * up).sum() + (seq * seq).sum() + (vol * vol).sum();
  std::vector<Tensor> out = {up, seq, vol, loss};
  for (const Tensor& g : grad({loss}, {x, w, b, w1, w3})) out.push_back(g);
  return out;
}

std::vector<Tensor> decoder_inputs(uint64_t seed) {
  return {randn({2, 4, 3, 3}, seed).requires_grad_(), randn({4, 3, 3, 3}, seed + 1).requires_grad_(),
          randn({6}, seed + 2).requires_grad_(), randn({6, 2, 3}, seed + 3).requires_grad_(),
          randn({3, 2, 2, 2, 3}, seed + 4).requires_grad_()};
}

TEST(ConvTranspose, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& a) { return decoder_program(a[0], a[1], a[2], a[3], a[4]); }, decoder_inputs);
}

} // namespace
} // namespace kiln

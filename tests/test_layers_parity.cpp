// PyTorch-parity of the convolution, pooling and interpolation layers: conv1d/conv2d (and their modules)
// with padding "same" and "valid", ConvTranspose1d/2d/3d.forward(input, output_size), adaptive_avg_pool1d/2d
// (and their modules), and interpolate's "area" and "bicubic" modes (and Upsample): values and gradients
// against PyTorch 1.13 (a generated table), f64 gradchecks, fused against unfused and compile(), and error
// messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "error_of.h"
#include "kiln/autograd.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "table_checks.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using namespace test; // values, rnd, expect_gradcheck, expect_close, expect_same, weights_for

void expect_error(const std::function<void()>& f, int line, const std::string& op,
                  const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_layers_parity.cpp", line, op, parts);
}

// ---------------------------------------------------------------- padding "same" and "valid"

struct ConvCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList weight_shape;
  std::vector<double> weight, bias; ///< bias {}: none
  const char* padding;
  IntList dilation;
  int64_t groups;
  IntList out_shape;
  std::vector<double> out, grad, weight_grad, bias_grad; ///< PyTorch's values and d(sum(out * u))
};

const ConvCase kConv[] = {
#define KILN_CONV_PADDING_MODE
#include "pytorch_layers_parity_table.inc"
#undef KILN_CONV_PADDING_MODE
};

// The case's convolution, its padding the table's string as a runtime std::string (the literal form is
// checked against it below).
Tensor conv_of(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  if (c.weight_shape.size() == 3)
    return F::conv1d(x, w, b, 1, nn::Padding1(std::string(c.padding)), c.dilation[0], c.groups);
  return F::conv2d(x, w, b, 1, nn::Padding2(std::string(c.padding)), {c.dilation[0], c.dilation[1]}, c.groups);
}

TEST(ConvPaddingMode, MatchesPyTorch) {
  for (const ConvCase& c : kConv) {
    expect_conv_case(c, [&](const Tensor& x, const Tensor& w, const Tensor& b) { return conv_of(c, x, w, b); });
  }
}

TEST(ConvPaddingMode, SameKeepsTheExtentsAndValidIsZero) {
  const Tensor x = rnd({2, 3, 6, 7}, 1), w = rnd({4, 3, 4, 3}, 2), b = rnd({4}, 3);
  // "same" is explicit padding where the total is even: (3 - 1) * 2 = 4 columns, 2 on each side
  expect_same(values(F::conv2d(x, w.slice(2, 0, 3), b, 1, "same", {1, 2})),
              values(F::conv2d(x, w.slice(2, 0, 3), b, 1, {1, 2}, {1, 2})), "even totals");
  // an odd total: the extra zero at the end (bottom), as an explicit pad of the input
  expect_same(values(F::conv2d(x, w, b, 1, "same")), values(F::conv2d(pad(x, {0, 0, 0, 1}), w, b, 1, {1, 1})),
              "odd total");
  EXPECT_EQ(F::conv2d(x, w, b, 1, nn::PaddingMode::Same).shape(), (IntList{2, 4, 6, 7}));
  expect_same(values(F::conv2d(x, w, b, 1, "valid")), values(F::conv2d(x, w, b)), "valid");
  expect_same(values(F::conv2d(x, w, b, 2, nn::PaddingMode::Valid)), values(F::conv2d(x, w, b, 2)), "valid strided");
  const Tensor s = rnd({2, 3, 8}, 4), k = rnd({5, 3, 4}, 5);
  expect_same(values(F::conv1d(s, k, Tensor(), 1, "same", 3)), values(F::conv1d(pad(s, {0, 1}), k, Tensor(), 1, 4, 3)),
              "1-d odd total");
  expect_same(values(F::conv1d(s, k, Tensor(), 3, "valid")), values(F::conv1d(s, k, Tensor(), 3)), "1-d valid");
}

TEST(ConvPaddingMode, Gradcheck) {
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::conv2d(v[0], v[1], v[2], 1, "same", {2, 1}) * v[3]).sum();
      },
      {rnd({1, 2, 4, 5}, 6), rnd({3, 2, 2, 4}, 7), rnd({3}, 8), rnd({1, 3, 4, 5}, 9)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::conv1d(v[0], v[1], v[2], 1, "same", 1, 2) * v[3]).sum(); },
      {rnd({4, 5}, 10), rnd({2, 2, 4}, 11), rnd({2}, 12), rnd({2, 5}, 13)}); // unbatched, groups
}

TEST(ConvPaddingMode, Modules) {
  nn::Conv2d same(3, 4, {4, 3}, {.padding = "same", .dilation = {1, 2}});
  nn::Conv1d valid(3, 2, 3, {.padding = "valid"});
  nn::Conv1d same1(3, 2, 4, {.padding = nn::PaddingMode::Same});
  EXPECT_EQ(same.str(),
            "Conv2d(3, 4, kernel_size=(4, 3), stride=(1, 1), padding=same, dilation=(1, 2), groups=1, bias=true)");
  EXPECT_EQ(valid.str(),
            "Conv1d(3, 2, kernel_size=(3,), stride=(1,), padding=valid, dilation=(1,), groups=1, bias=true)");
  const Tensor x = rnd({2, 3, 5, 6}, 14), s = rnd({2, 3, 7}, 15);
  EXPECT_EQ(same(x).shape(), (IntList{2, 4, 5, 6}));
  expect_same(values(same(x)), values(F::conv2d(x, same.weight, same.bias, 1, "same", {1, 2})), "Conv2d same");
  expect_same(values(valid(s)), values(F::conv1d(s, valid.weight, valid.bias)), "Conv1d valid");
  EXPECT_EQ(same1(s).shape(), (IntList{2, 2, 7}));
  // an explicit padding prints as before
  EXPECT_EQ(nn::Conv1d(3, 2, 3, {.padding = 1}).str(),
            "Conv1d(3, 2, kernel_size=(3,), stride=(1,), padding=(1,), dilation=(1,), groups=1, bias=true)");
}

TEST(ConvPaddingMode, Errors) {
  const Tensor x = rnd({1, 2, 5, 6}, 16), w = rnd({3, 2, 3, 3}, 17), s = rnd({1, 2, 7}, 18), k = rnd({3, 2, 3}, 19);
  expect_error([&] { (void)F::conv2d(x, w, Tensor(), 2, "same"); }, __LINE__, "conv2d",
               {"padding='same' is not supported for strided convolutions", "f64[1,2,5,6]"});
  expect_error([&] { (void)F::conv2d(x, w, Tensor(), {1, 2}, nn::PaddingMode::Same); }, __LINE__, "conv2d",
               {"padding='same' is not supported for strided convolutions"});
  expect_error([&] { (void)F::conv2d(x, w, Tensor(), 1, "foo"); }, __LINE__, "conv2d",
               {"invalid padding string 'foo'", "f64[1,2,5,6]"});
  expect_error([&] { (void)F::conv1d(s, k, Tensor(), 3, "same"); }, __LINE__, "conv1d",
               {"padding='same' is not supported for strided convolutions", "f64[1,2,7]"});
  expect_error([&] { (void)F::conv1d(s, k, Tensor(), 1, nn::Padding1(std::string("Same"))); }, __LINE__, "conv1d",
               {"invalid padding string 'Same'"});
  // "valid" keeps the checks of no padding: a kernel larger than the input
  expect_error([&] { (void)F::conv2d(x, rnd({3, 2, 7, 7}, 20), Tensor(), 1, "valid"); }, __LINE__, "conv2d",
               {"larger than the padded input"});
  expect_error([&] { (void)F::conv1d(s, k, Tensor(), 1, "same", std::numeric_limits<int64_t>::max()); }, __LINE__,
               "conv1d", {"overflows int64"});
  expect_error([&] { (void)F::conv2d(x, rnd({3, 2, 3}, 21), Tensor(), 1, "same"); }, __LINE__, "conv2d",
               {"the weight must be [out, in/groups, kh, kw]"});
  // the modules refuse them where they are made, as PyTorch's constructors
  expect_error([] { (void)nn::Conv2d(2, 3, 3, {.stride = 2, .padding = "same"}); }, __LINE__, "Conv2d",
               {"padding='same' is not supported for strided convolutions"});
  expect_error([] { (void)nn::Conv1d(2, 3, 3, {.padding = nn::Padding1(std::string("full"))}); }, __LINE__, "Conv1d",
               {"invalid padding string 'full', should be one of {'valid', 'same'}"});
}

// ---------------------------------------------------------------- ConvTranspose forward(x, output_size)

struct ConvTCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  int64_t in, out;
  IntList kernel, stride, padding, dilation;
  int64_t groups;
  IntList output_size; ///< as the forward is given it (spatial only, or with the leading dims)
  std::vector<double> weight, bias;
  IntList out_shape;
  std::vector<double> output, grad, weight_grad, bias_grad;
};

const ConvTCase kConvT[] = {
#define KILN_CONV_T_OUTPUT_SIZE
#include "pytorch_layers_parity_table.inc"
#undef KILN_CONV_T_OUTPUT_SIZE
};

// The case's module with the table's weight and bias (leaves that collect their gradients).
template <class M> M module_of(const ConvTCase& c, M m, IntList weight_shape) {
  m.weight = from_vector(c.weight, std::move(weight_shape)).requires_grad_();
  m.bias = from_vector(c.bias).requires_grad_();
  return m;
}

// The case's forward(x, output_size); the module's parameters hold the gradients afterwards.
Tensor conv_t_of(const ConvTCase& c, const Tensor& x, Tensor& w, Tensor& b) {
  if (c.kernel.size() == 1) {
    auto m =
        module_of(c,
                  nn::ConvTranspose1d(
                      c.in, c.out, c.kernel[0],
                      {.stride = c.stride[0], .padding = c.padding[0], .groups = c.groups, .dilation = c.dilation[0]}),
                  {c.in, c.out / c.groups, c.kernel[0]});
    w = m.weight, b = m.bias;
    return m.forward(x, c.output_size);
  }
  if (c.kernel.size() == 3) {
    auto m = module_of(c,
                       nn::ConvTranspose3d(c.in, c.out, {c.kernel[0], c.kernel[1], c.kernel[2]},
                                           {.stride = {c.stride[0], c.stride[1], c.stride[2]},
                                            .padding = {c.padding[0], c.padding[1], c.padding[2]},
                                            .groups = c.groups,
                                            .dilation = {c.dilation[0], c.dilation[1], c.dilation[2]}}),
                       {c.in, c.out / c.groups, c.kernel[0], c.kernel[1], c.kernel[2]});
    w = m.weight, b = m.bias;
    return m.forward(x, c.output_size);
  }
  auto m = module_of(c,
                     nn::ConvTranspose2d(c.in, c.out, {c.kernel[0], c.kernel[1]},
                                         {.stride = {c.stride[0], c.stride[1]},
                                          .padding = {c.padding[0], c.padding[1]},
                                          .groups = c.groups,
                                          .dilation = {c.dilation[0], c.dilation[1]}}),
                     {c.in, c.out / c.groups, c.kernel[0], c.kernel[1]});
  w = m.weight, b = m.bias;
  return m.forward(x, c.output_size);
}

TEST(ConvTransposeOutputSize, MatchesPyTorch) {
  for (const ConvTCase& c : kConvT) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_(), w, b;
    const Tensor y = conv_t_of(c, x, w, b);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.output, 1e-12, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, 1e-12, std::string(c.name) + " input grad");
    expect_close(values(w.grad()), c.weight_grad, 1e-12, std::string(c.name) + " weight grad");
    expect_close(values(b.grad()), c.bias_grad, 1e-12, std::string(c.name) + " bias grad");
  }
}

TEST(ConvTransposeOutputSize, IsTheOutputPaddingThatGivesIt) {
  nn::ConvTranspose2d up(2, 3, 3, {.stride = {2, 3}, .padding = 1, .output_padding = 1});
  const Tensor x = rnd({2, 2, 4, 5}, 22);
  // the options' output_padding is replaced: (4 - 1) * 2 - 2 + 2 + 1 = 7 rows at least, 13 columns
  expect_same(values(up.forward(x, {7, 15})), values(F::conv_transpose2d(x, up.weight, up.bias, {2, 3}, 1, {0, 2})),
              "2-d");
  EXPECT_EQ(up.forward(x.slice(0, 0, 1).squeeze(0), {3, 8, 13}).shape(),
            (IntList{3, 8, 13})); // unbatched, with the channels
  nn::ConvTranspose1d up1(2, 2, 2, {.stride = 3});
  expect_same(values(up1.forward(rnd({1, 2, 4}, 23), {13})),
              values(F::conv_transpose1d(rnd({1, 2, 4}, 23), up1.weight, up1.bias, 3, 0, 2)), "1-d");
  nn::ConvTranspose3d up3(2, 2, {1, 2, 2}, {.stride = {2, 2, 3}, .output_padding = {1, 0, 0}});
  const Tensor v = rnd({1, 2, 2, 3, 2}, 31);
  expect_same(values(up3.forward(v, {1, 2, 3, 7, 6})),
              values(F::conv_transpose3d(v, up3.weight, up3.bias, {2, 2, 3}, 0, {0, 1, 1})), "3-d");
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        nn::ConvTranspose2d m(2, 2, {2, 3}, {.stride = 2, .bias = false});
        m.weight = v[1];
        return (m.forward(v[0], {6, 8}) * v[2]).sum();
      },
      {rnd({1, 2, 3, 3}, 24), rnd({2, 2, 2, 3}, 25), rnd({1, 2, 6, 8}, 26)});
}

TEST(ConvTransposeOutputSize, Errors) {
  nn::ConvTranspose2d up(2, 3, 3, {.stride = 2, .padding = 1});
  const Tensor x = rnd({1, 2, 5, 6}, 27);
  expect_error([&] { (void)up.forward(x, {12, 12}); }, __LINE__, "ConvTranspose2d",
               {"requested an output size of [12, 12], but valid sizes range from [9, 11] to [10, 12] "
               "(for an input of [5, 6])",
               "f64[1,2,5,6]"});
  expect_error([&] { (void)up.forward(x, {8, 11}); }, __LINE__, "ConvTranspose2d", {"from [9, 11] to [10, 12]"});
  expect_error([&] { (void)up.forward(x, {10}); }, __LINE__, "ConvTranspose2d",
               {"for 4-d input, output_size must have 2 or 4 elements (got 1)"});
  expect_error([&] { (void)up.forward(x.squeeze(0), {1, 2, 10, 12}); }, __LINE__, "ConvTranspose2d",
               {"for 3-d input, output_size must have 2 or 3 elements (got 4)"});
  nn::ConvTranspose1d up1(2, 3, 3, {.stride = 3, .padding = 1, .dilation = 2});
  expect_error([&] { (void)up1.forward(rnd({2, 6}, 28), {17}); }, __LINE__, "ConvTranspose1d",
               {"requested an output size of [17], but valid sizes range from [18] to [20] (for an input of [6])"});
  // the rank is the convolution's error
  expect_error([&] { (void)up1.forward(rnd({6}, 29), {17}); }, __LINE__, "ConvTranspose1d", {"[N, C, L]"});
  nn::ConvTranspose3d up3(2, 2, {2, 3, 3}, {.stride = {2, 1, 3}, .padding = {0, 1, 1}});
  const Tensor v = rnd({1, 2, 3, 4, 2}, 30);
  expect_error([&] { (void)up3.forward(v, {6, 4, 7}); }, __LINE__, "ConvTranspose3d",
               {"requested an output size of [6, 4, 7]", "from [6, 4, 4] to [7, 4, 6] (for an input of [3, 4, 2])",
                "f64[1,2,3,4,2]"});
  expect_error([&] { (void)up3.forward(v, {4, 6}); }, __LINE__, "ConvTranspose3d",
               {"for 5-d input, output_size must have 3 or 5 elements (got 2)"});
  expect_error([&] { (void)up3.forward(v.squeeze(0), {1, 2, 6, 4, 4}); }, __LINE__, "ConvTranspose3d",
               {"for 4-d input, output_size must have 3 or 4 elements (got 5)"});
}

// ---------------------------------------------------------------- adaptive_avg_pool1d/2d

struct AdaptiveCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList output_size;
  IntList out_shape;
  std::vector<double> out, grad;
};

const AdaptiveCase kAdaptive[] = {
#define KILN_ADAPTIVE_AVG_POOL
#include "pytorch_layers_parity_table.inc"
#undef KILN_ADAPTIVE_AVG_POOL
};

Tensor adaptive_of(const AdaptiveCase& c, const Tensor& x) {
  if (c.output_size.size() == 1) return F::adaptive_avg_pool1d(x, c.output_size[0]);
  return F::adaptive_avg_pool2d(x, {c.output_size[0], c.output_size[1]});
}

TEST(AdaptiveAvgPool, MatchesPyTorch) {
  for (const AdaptiveCase& c : kAdaptive) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = adaptive_of(c, x);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.out, 1e-14, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, 1e-14, std::string(c.name) + " input grad");
    const Tensor y32 = adaptive_of(c, from_vector(c.input, c.shape).to(kFloat32));
    EXPECT_EQ(y32.dtype(), kFloat32) << c.name;
    expect_close(values(y32), c.out, 1e-6, std::string(c.name) + " f32 values");
  }
}

TEST(AdaptiveAvgPool, EmptyOutputsAndBatches) {
  Tensor x = rnd({1, 2, 5, 6}, 30).requires_grad_();
  const Tensor y = F::adaptive_avg_pool2d(x, {0, 2});
  EXPECT_EQ(y.shape(), (IntList{1, 2, 0, 2}));
  y.sum().backward();
  expect_same(values(x.grad()), std::vector<double>(60, 0.0), "no output, no gradient");
  EXPECT_EQ(F::adaptive_avg_pool1d(rnd({2, 5}, 31), 0).shape(), (IntList{2, 0}));
  EXPECT_EQ(F::adaptive_avg_pool2d(rnd({0, 2, 5, 6}, 32), 3).shape(), (IntList{0, 2, 3, 3}));
  EXPECT_EQ(F::adaptive_avg_pool2d(rnd({1, 0, 5, 6}, 33), 3).shape(), (IntList{1, 0, 3, 3}));
}

TEST(AdaptiveAvgPool, GradcheckAndModules) {
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::adaptive_avg_pool2d(v[0], {3, 4}) * v[1]).sum();
      },
      {rnd({1, 2, 5, 7}, 34), rnd({1, 2, 3, 4}, 35)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::adaptive_avg_pool1d(v[0], 5) * v[1]).sum(); },
                   {rnd({2, 3}, 36), rnd({2, 5}, 37)}); // unbatched, upsampling
  nn::AdaptiveAvgPool2d pool({3, 4});
  nn::AdaptiveAvgPool1d pool1(3);
  EXPECT_EQ(pool.str(), "AdaptiveAvgPool2d(output_size=(3, 4))");
  EXPECT_EQ(pool1.str(), "AdaptiveAvgPool1d(output_size=3)");
  const Tensor x = rnd({2, 3, 7, 9}, 38), s = rnd({2, 3, 8}, 39);
  expect_same(values(pool(x)), values(F::adaptive_avg_pool2d(x, {3, 4})), "AdaptiveAvgPool2d");
  expect_same(values(pool1(s)), values(F::adaptive_avg_pool1d(s, 3)), "AdaptiveAvgPool1d");
  // a global average is the mean
  expect_close(values(F::adaptive_avg_pool2d(x, 1)), values(x.mean({2, 3}, true)), 1e-14, "global");
}

TEST(AdaptiveAvgPool, Errors) {
  const Tensor x = rnd({1, 2, 5, 6}, 40);
  expect_error([&] { (void)F::adaptive_avg_pool2d(x, {3, -1}); }, __LINE__, "adaptive_avg_pool2d",
               {"elements of output_size must be greater than or equal to 0 but received [3,-1]", "f64[1,2,5,6]"});
  expect_error([&] { (void)F::adaptive_avg_pool2d(rnd({5, 6}, 41), 3); }, __LINE__, "adaptive_avg_pool2d",
               {"expects a [N, C, H, W] (or unbatched [C, H, W]) input", "f64[5,6]"});
  expect_error([&] { (void)F::adaptive_avg_pool2d(rnd({1, 2, 0, 6}, 42), 3); }, __LINE__, "adaptive_avg_pool2d",
               {"dim 2 is empty"});
  expect_error([&] { (void)F::adaptive_avg_pool2d(zeros({1, 2, 5, 6}, kInt64), 3); }, __LINE__, "adaptive_avg_pool2d",
               {"needs a floating tensor"});
  expect_error([&] { (void)F::adaptive_avg_pool1d(rnd({5}, 43), 3); }, __LINE__, "adaptive_avg_pool1d",
               {"expects a [N, C, L] (or unbatched [C, L]) input"});
  expect_error([&] { (void)F::adaptive_avg_pool1d(rnd({2, 0}, 44), 2); }, __LINE__, "adaptive_avg_pool1d",
               {"dim 1 is empty"});
  expect_error([&] { (void)nn::AdaptiveAvgPool1d(-1)(rnd({2, 5}, 45)); }, __LINE__, "AdaptiveAvgPool1d",
               {"greater than or equal to 0"});
}

// ---------------------------------------------------------------- interpolate "area" and "bicubic"

struct InterpCase {
  const char* name;
  bool f32;
  IntList shape;
  std::vector<double> input;
  IntList size;
  std::vector<double> scale_factor;
  const char* mode;
  int align_corners, recompute_scale_factor; ///< -1: unset
  IntList out_shape;
  std::vector<double> out, grad;
};

const InterpCase kInterp[] = {
#define KILN_INTERP_AREA_CUBIC
#include "pytorch_layers_parity_table.inc"
#undef KILN_INTERP_AREA_CUBIC
};

std::optional<bool> flag(int v) { return v < 0 ? std::nullopt : std::optional<bool>(v == 1); }

F::InterpolateOptions options_of(const InterpCase& c) {
  return {.size = c.size,
          .scale_factor = c.scale_factor,
          .mode = c.mode,
          .align_corners = flag(c.align_corners),
          .recompute_scale_factor = flag(c.recompute_scale_factor)};
}

TEST(InterpolateAreaBicubic, MatchesPyTorch) {
  for (const InterpCase& c : kInterp) {
    Tensor x = from_vector(c.input, c.shape).to(c.f32 ? kFloat32 : kFloat64).detach().requires_grad_();
    const Tensor y = F::interpolate(x, options_of(c));
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    ASSERT_EQ(y.dtype(), x.dtype()) << c.name;
    (y * weights_for(y)).sum().backward();
    // f32 bicubic: the cubic's negative weights cancel, and PyTorch's kernel rounds its 16 products and weights
    // differently (both are within about 1e-6 of the f64 value; kiln's order is the separable one of f64)
    const double f32_rel = std::string(c.mode) == "bicubic" ? 4e-6 : 1e-6;
    expect_close(values(y), c.out, c.f32 ? f32_rel : 1e-13, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, c.f32 ? f32_rel : 1e-13, std::string(c.name) + " grad");
  }
}

TEST(InterpolateAreaBicubic, AreaIsAdaptiveAveragePooling) {
  const Tensor x = rnd({2, 3, 7, 9}, 46);
  expect_same(values(F::interpolate(x, {.size = {3, 4}, .mode = "area"})), values(F::adaptive_avg_pool2d(x, {3, 4})),
              "2-d");
  const Tensor s = rnd({2, 3, 9}, 55);
  expect_same(values(F::interpolate(s, {.scale_factor = {0.5}, .mode = "area"})), values(F::adaptive_avg_pool1d(s, 4)),
              "1-d");
  // bicubic of a constant is the constant, whatever the border (the weights sum to 1)
  expect_close(values(F::interpolate(full({1, 1, 3, 4}, 2.5, kFloat64), {.size = {7, 5}, .mode = "bicubic"})),
               std::vector<double>(35, 2.5), 1e-14, "constant");
}

TEST(InterpolateAreaBicubic, GradcheckAndUpsample) {
  for (bool align : {false, true})
    expect_gradcheck(
        [align](const std::vector<Tensor>& v) {
          return (F::interpolate(v[0], {.size = {5, 7}, .mode = "bicubic", .align_corners = align}) * v[1]).sum();
        },
        {rnd({1, 2, 3, 4}, 47), rnd({1, 2, 5, 7}, 48)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::interpolate(v[0], {.scale_factor = {0.6, 1.4}, .mode = "area"}) * v[1]).sum();
      },
      {rnd({1, 2, 5, 5}, 49), rnd({1, 2, 3, 7}, 50)});
  nn::Upsample up({.scale_factor = {2.0}, .mode = "bicubic", .align_corners = true});
  EXPECT_EQ(up.str(), "Upsample(scale_factor=2.0, mode='bicubic')");
  const Tensor x = rnd({1, 2, 3, 4}, 51);
  expect_same(values(up(x)),
              values(F::interpolate(x, {.scale_factor = {2.0}, .mode = "bicubic", .align_corners = true})), "Upsample");
  nn::Upsample area({.size = {2, 3}, .mode = "area"});
  expect_same(values(area(x)), values(F::adaptive_avg_pool2d(x, {2, 3})), "Upsample area");
}

TEST(InterpolateAreaBicubic, Errors) {
  const Tensor x = rnd({1, 2, 5, 6}, 52);
  const F::InterpolateOptions aligned_area{.size = {3, 4}, .mode = "area", .align_corners = false};
  expect_error([&] { (void)F::interpolate(x, aligned_area); }, __LINE__, "interpolate",
               {"align_corners is for the interpolating modes (linear, bilinear, bicubic, trilinear) only",
                "not \"area\""});
  const Tensor x3 = rnd({1, 2, 5}, 53), x5 = rnd({1, 1, 2, 3, 4}, 54);
  expect_error([&] { (void)F::interpolate(x3, {.size = {3}, .mode = "bicubic"}); }, __LINE__, "interpolate",
               {"mode \"bicubic\" needs a 4-d input (2 spatial dims), got 3-d", "f64[1,2,5]"});
  expect_error([&] { (void)F::interpolate(x, {.size = {3, 4}, .mode = "cubic"}); }, __LINE__, "interpolate",
               {"\"cubic\" is not one of nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area"});
  expect_error([&] { (void)F::interpolate(x, {.scale_factor = {0.1}, .mode = "area"}); }, __LINE__, "interpolate",
               {"input and output extents must be positive"});
  expect_error([&] { (void)nn::Upsample({.size = {3, 4}, .mode = "bicubic"})(x5); }, __LINE__, "Upsample",
               {"mode \"bicubic\" needs a 4-d input"});
}

// ---------------------------------------------------------------- fused, unfused and compiled

// The layers in one program, and the gradients of its loss with respect to the inputs.
std::vector<Tensor> parity_program(const std::vector<Tensor>& in) {
  const Tensor& x = in[0];
  const Tensor h = F::conv2d(x, in[1], Tensor(), 1, "same", {1, 2});                       // [2, 3, 5, 6]
  const Tensor s = F::conv1d(in[2], in[3], Tensor(), 1, "same");                           // [2, 3, 7]
  const Tensor cubic = F::interpolate(h, {.scale_factor = {1.5, 0.7}, .mode = "bicubic"}); // [2, 3, 7, 4]
  const Tensor area = F::interpolate(h, {.size = {3, 4}, .mode = "area"});
  const Tensor pooled = F::adaptive_avg_pool1d(s, 3);
  nn::ConvTranspose2d up(3, 2, 3, {.stride = 2, .padding = 1, .bias = false});
  up.weight = in[4];
  const Tensor t = up.forward(area, {6, 8});
  const Tensor loss = (cubic * cubic).sum() + (t * t).sum() + (pooled * pooled).sum();
  std::vector<Tensor> out = {cubic, t, pooled, loss};
  for (const Tensor& g : grad({loss}, {in[0], in[1], in[2], in[3], in[4]})) out.push_back(g);
  return out;
}

std::vector<Tensor> parity_inputs(uint64_t seed) {
  return {randn({2, 2, 5, 6}, seed).requires_grad_(), randn({3, 2, 2, 3}, seed + 1).requires_grad_(),
          randn({2, 2, 7}, seed + 2).requires_grad_(), randn({3, 2, 4}, seed + 3).requires_grad_(),
          randn({3, 2, 3, 3}, seed + 4).requires_grad_()};
}

TEST(LayersParity, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree(parity_program, parity_inputs);
}

} // namespace
} // namespace kiln

// Layers of sequence and image models: conv1d, max_pool1d and avg_pool1d (and their modules), interpolate
// (nearest, nearest-exact, linear, bilinear, trilinear; nn::Upsample) and pad's negative (cropping) amounts.
// Forward values and input (and weight) gradients against PyTorch 1.13 (generated tables), gradients by
// gradcheck in f64, zero-size inputs, fused against unfused and compile(), and error messages naming the op,
// the shapes and this file's line.

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
  test::expect_error_at(f, "test_layers1d.cpp", line, op, parts);
}

// ---------------------------------------------------------------- conv1d

struct Conv1dCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList weight_shape;
  std::vector<double> weight, bias; ///< bias {}: none
  int64_t stride, padding, dilation, groups;
  IntList out_shape;
  std::vector<double> out, grad, weight_grad, bias_grad; ///< PyTorch's values and d(sum(out * u))
};

const Conv1dCase kConv1d[] = {
#include "pytorch_conv1d_table.inc"
};

TEST(Conv1d, MatchesPyTorch) {
  for (const Conv1dCase& c : kConv1d) {
    expect_conv_case(c, [&](const Tensor& x, const Tensor& w, const Tensor& b) {
      return F::conv1d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    });
  }
}

TEST(Conv1d, GradcheckAndConv2dOverAUnitHeight) {
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv1d(v[0], v[1], v[2]) * v[3]).sum(); },
                   {rnd({2, 3, 6}, 1), rnd({4, 3, 3}, 2), rnd({4}, 3), rnd({2, 4, 4}, 4)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv1d(v[0], v[1], v[2], 2, 2, 2, 2) * v[3]).sum(); },
                   {rnd({1, 4, 9}, 5), rnd({6, 2, 3}, 6), rnd({6}, 7), rnd({1, 6, 5}, 8)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv1d(v[0], v[1], Tensor(), 1, 3) * v[2]).sum(); },
                   {rnd({3, 4}, 9), rnd({2, 3, 2}, 10), rnd({2, 9}, 11)}); // unbatched, padding past the kernel
  // the same numbers as conv2d of a unit height
  const Tensor x = rnd({2, 4, 9}, 12), w = rnd({6, 2, 3}, 13), b = rnd({6}, 14);
  expect_same(values(F::conv1d(x, w, b, 2, 1, 2, 2)),
              values(F::conv2d(x.unsqueeze(2), w.unsqueeze(2), b, {1, 2}, {0, 1}, {1, 2}, 2).squeeze(2)), "conv2d");
}

// A weight computed by a reshape (conv1d's is its weight unsqueezed) gets its gradient: conv2d's backward
// recomputes the product against a stand-in of the weight, where the reshapes would fold together.
TEST(Conv1d, AComputedWeightGetsItsGradient) {
  Tensor x = rnd({1, 2, 5, 5}, 51).requires_grad_(), flat = rnd({3 * 2 * 3 * 3}, 52).requires_grad_();
  const Tensor u = rnd({1, 3, 3, 3}, 53);
  (F::conv2d(x, flat.reshape({3, 2, 3, 3})) * u).sum().backward();
  Tensor w = flat.detach().reshape({3, 2, 3, 3}).requires_grad_();
  (F::conv2d(x.detach(), w) * u).sum().backward();
  expect_same(values(flat.grad()), values(w.grad()), "weight grad");
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1].reshape({3, 2, 3, 3})) * v[2]).sum(); },
                   {rnd({1, 2, 5, 5}, 54), rnd({54}, 55), rnd({1, 3, 3, 3}, 56)});
}

TEST(Conv1d, ModuleInitializesAsPyTorch) {
  nn::manual_seed(3);
  nn::Conv1d conv(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  EXPECT_EQ(conv.weight.shape(), (IntList{6, 2, 3}));
  EXPECT_EQ(conv.bias.shape(), (IntList{6}));
  const double bound = 1.0 / std::sqrt(2.0 * 3.0); // fan_in = in/groups * k
  for (double v : values(conv.weight)) EXPECT_LE(std::fabs(v), bound);
  for (double v : values(conv.bias)) EXPECT_LE(std::fabs(v), bound);
  double largest = 0;
  for (double v : values(conv.weight)) largest = std::max(largest, std::fabs(v));
  EXPECT_GT(largest, bound / 2); // uniform over the whole range, not a smaller one
  EXPECT_EQ(conv.parameters().size(), 2u);
  EXPECT_EQ(conv.str(), "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), dilation=(1,), groups=2, bias=true)");
  const Tensor x = randn({2, 4, 9}, 15);
  EXPECT_EQ(conv(x).shape(), (IntList{2, 6, 5}));
  expect_same(values(conv(x)), values(F::conv1d(x, conv.weight, conv.bias, 2, 1, 1, 2)), "module");
  EXPECT_EQ(conv(randn({4, 9}, 16)).shape(), (IntList{6, 5})); // unbatched
  EXPECT_FALSE(nn::Conv1d(2, 2, 1, {.bias = false}).bias.defined());
  expect_error([] { nn::Conv1d(3, 4, 2, {.groups = 2}); }, __LINE__, "Conv1d", {"divisible by groups=2"});
  expect_error([] { nn::Conv1d(3, 4, 0); }, __LINE__, "Conv1d", {"kernel size"});
}

TEST(Conv1d, Errors) {
  const Tensor x = rnd({2, 4, 7}, 17), w = rnd({3, 4, 3}, 18);
  expect_error([&] { (void)F::conv1d(x.unsqueeze(0), w); }, __LINE__, "conv1d", {"f64[1,2,4,7]", "[N, C, L]"});
  expect_error([&] { (void)F::conv1d(rnd({7}, 19), w); }, __LINE__, "conv1d", {"f64[7]", "[N, C, L]"});
  expect_error([&] { (void)F::conv1d(x, w.unsqueeze(2)); }, __LINE__, "conv1d", {"f64[3,4,1,3]", "[out, in/groups, k]"});
  expect_error([&] { (void)F::conv1d(x, rnd({3, 2, 3}, 20)); }, __LINE__, "conv1d", {"f64[2,4,7]", "f64[3,2,3]", "channels"});
  expect_error([&] { (void)F::conv1d(x, rnd({3, 2, 3}, 21), Tensor(), 1, 0, 1, 2); }, __LINE__, "conv1d", {"groups=2"});
  expect_error([&] { (void)F::conv1d(x, w, rnd({4}, 22)); }, __LINE__, "conv1d", {"bias", "f64[4]"});
  expect_error([&] { (void)F::conv1d(x, rnd({3, 4, 8}, 23)); }, __LINE__, "conv1d", {"f64[2,4,7]", "larger than the padded input"});
  expect_error([&] { (void)F::conv1d(x, w, Tensor(), 0); }, __LINE__, "conv1d", {"positive"});
  expect_error([&] { (void)F::conv1d(x, w, Tensor(), 1, -1); }, __LINE__, "conv1d", {"non-negative"});
  EXPECT_EQ(F::conv1d(x, rnd({3, 4, 8}, 24), Tensor(), 1, 1).shape(), (IntList{2, 3, 2})); // padding makes it fit
}

// ---------------------------------------------------------------- pooling

struct Pool1dCase {
  const char* name;
  bool max;
  IntList shape;
  std::vector<double> input;
  int64_t kernel, stride, padding, dilation; ///< stride 0: the default (the kernel)
  bool ceil_mode, count_include_pad;
  IntList out_shape;
  std::vector<double> out, grad;
};

const Pool1dCase kPool1d[] = {
#include "pytorch_pool1d_table.inc"
};

Tensor pool(const Pool1dCase& c, const Tensor& x) {
  const std::optional<int64_t> s = c.stride == 0 ? std::nullopt : std::optional<int64_t>(c.stride);
  if (c.max) return F::max_pool1d(x, c.kernel, s, c.padding, c.dilation, c.ceil_mode);
  return F::avg_pool1d(x, c.kernel, s, c.padding, c.ceil_mode, c.count_include_pad);
}

TEST(Pool1d, MatchesPyTorch) {
  for (const Pool1dCase& c : kPool1d) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = pool(c, x);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, 1e-12, std::string(c.name) + " grad");
  }
}

TEST(Pool1d, GradcheckModulesAndErrors) {
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::max_pool1d(v[0], 3, 2, 1, 2, true) * v[1]).sum(); },
                   {rnd({2, 2, 10}, 25), rnd({2, 2, 5}, 26)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::avg_pool1d(v[0], 3, 2, 1, true, false) * v[1]).sum(); },
                   {rnd({2, 8}, 27), rnd({2, 5}, 28)});
  const Tensor x = rnd({2, 3, 9}, 29);
  expect_same(values(nn::MaxPool1d(3, 2, 1)(x)), values(F::max_pool1d(x, 3, 2, 1)), "MaxPool1d");
  expect_same(values(nn::AvgPool1d(2)(x)), values(F::avg_pool1d(x, 2)), "AvgPool1d");
  EXPECT_EQ(nn::AvgPool1d(2)(x).shape(), (IntList{2, 3, 4})); // the stride defaults to the kernel
  EXPECT_EQ(nn::MaxPool1d(2).str(), "MaxPool1d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=false)");
  EXPECT_EQ(nn::AvgPool1d(3, 2, 1, true, false).str(),
            "AvgPool1d(kernel_size=3, stride=2, padding=1, ceil_mode=true, count_include_pad=false)");
  expect_error([&] { (void)F::max_pool1d(x.unsqueeze(0), 2); }, __LINE__, "max_pool1d", {"f64[1,2,3,9]", "[N, C, L]"});
  expect_error([&] { (void)F::avg_pool1d(rnd({9}, 30), 2); }, __LINE__, "avg_pool1d", {"f64[9]", "[N, C, L]"});
  expect_error([&] { (void)F::max_pool1d(x, 2, std::nullopt, 2); }, __LINE__, "max_pool1d", {"f64[2,3,9]", "half the kernel"});
  expect_error([&] { (void)F::avg_pool1d(x, 2, std::nullopt, 2); }, __LINE__, "avg_pool1d", {"half the kernel"});
  expect_error([&] { (void)F::max_pool1d(x, 0); }, __LINE__, "max_pool1d", {"positive"});
  expect_error([&] { (void)F::max_pool1d(x, 10); }, __LINE__, "max_pool1d", {"f64[2,3,9]", "larger"});
  expect_error([&] { (void)nn::AvgPool1d(3, 1, 0)(x.to(kInt64)); }, __LINE__, "AvgPool1d", {"i64[2,3,9]", "floating"});
  EXPECT_EQ(F::max_pool1d(x, 10, std::nullopt, 0, 1, true).shape(), (IntList{2, 3, 1})); // ceil mode: one partial window
}

// ---------------------------------------------------------------- interpolate

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
  std::vector<double> out;
  std::vector<double> grad; ///< the nearest modes': the gradient of the map PyTorch's forward computes
  bool torch_grad_differs;  ///< PyTorch's own backward disagrees with its forward (1-d legacy nearest)
};

const InterpCase kInterp[] = {
#include "pytorch_interpolate_table.inc"
};

std::optional<bool> flag(int v) { return v < 0 ? std::nullopt : std::optional<bool>(v == 1); }

F::InterpolateOptions options_of(const InterpCase& c) {
  return {.size = c.size, .scale_factor = c.scale_factor, .mode = c.mode, .align_corners = flag(c.align_corners),
          .recompute_scale_factor = flag(c.recompute_scale_factor)};
}

TEST(Interpolate, MatchesPyTorch) {
  for (const InterpCase& c : kInterp) {
    Tensor x = from_vector(c.input, c.shape).to(c.f32 ? kFloat32 : kFloat64).detach().requires_grad_();
    const Tensor y = F::interpolate(x, options_of(c));
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    ASSERT_EQ(y.dtype(), x.dtype()) << c.name;
    (y * weights_for(y)).sum().backward();
    const std::string mode = c.mode;
    if (mode.rfind("nearest", 0) == 0) expect_same(values(y), c.out, std::string(c.name) + " values"); // copies
    else expect_close(values(y), c.out, c.f32 ? 1e-6 : 1e-13, std::string(c.name) + " values"); // a rounding apart
    expect_close(values(x.grad()), c.grad, c.f32 ? 1e-6 : 1e-13, std::string(c.name) + " grad");
  }
}

// PyTorch 1.13's 1-d legacy nearest forward takes no shortcuts, but its backward copies a kept extent and
// halves a doubled one (nearest_idx): with a scale_factor whose output is the input's extent or twice it,
// its gradient is not that of its values. kiln's is (the table holds the gradient of PyTorch's forward map).
TEST(Interpolate, OnlyTheOneDimNearestShortcutsDifferFromPyTorchsBackward) {
  std::vector<std::string> differ;
  for (const InterpCase& c : kInterp)
    if (c.torch_grad_differs) differ.push_back(c.name);
  EXPECT_EQ(differ, (std::vector<std::string>{"nearest_1d_scale_2_1", "nearest_1d_scale_1_15_kept_extent"}));
}

TEST(Interpolate, Gradcheck) {
  for (const char* mode : {"nearest", "nearest-exact"})
    expect_gradcheck([mode](const std::vector<Tensor>& v) {
      return (F::interpolate(v[0], {.scale_factor = {1.7, 0.6}, .mode = mode}) * v[1]).sum();
    }, {rnd({1, 2, 3, 5}, 31), rnd({1, 2, 5, 3}, 32)});
  for (bool align : {false, true}) {
    expect_gradcheck([align](const std::vector<Tensor>& v) {
      return (F::interpolate(v[0], {.size = {7}, .mode = "linear", .align_corners = align}) * v[1]).sum();
    }, {rnd({2, 2, 4}, 33), rnd({2, 2, 7}, 34)});
    expect_gradcheck([align](const std::vector<Tensor>& v) {
      return (F::interpolate(v[0], {.scale_factor = {1.5, 0.7}, .mode = "bilinear", .align_corners = align}) * v[1]).sum();
    }, {rnd({1, 2, 4, 5}, 35), rnd({1, 2, 6, 3}, 36)});
    expect_gradcheck([align](const std::vector<Tensor>& v) {
      return (F::interpolate(v[0], {.size = {3, 4, 3}, .mode = "trilinear", .align_corners = align}) * v[1]).sum();
    }, {rnd({1, 1, 2, 3, 4}, 37), rnd({1, 1, 3, 4, 3}, 38)});
  }
}

// Integer factors of the nearest mode are views (repeat, every k-th), the others an index_select:
// all three give PyTorch's indices, and so the same values as the general path written out here.
TEST(Interpolate, NearestViewsAndGatherAgree) {
  const Tensor x = rnd({2, 3, 12}, 39);
  auto gathered = [&](std::vector<int64_t> idx) { return index_select(x, 2, from_vector(idx)); };
  expect_same(values(F::interpolate(x, {.scale_factor = {3}})),
              values(gathered({0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9, 9,
                               10, 10, 10, 11, 11, 11})),
              "repeat");
  expect_same(values(F::interpolate(x, {.size = {4}})), values(gathered({0, 3, 6, 9})), "every third");
  expect_same(values(F::interpolate(x, {.size = {5}})), values(gathered({0, 2, 4, 7, 9})), "gather");
  expect_same(values(F::interpolate(x, {.size = {12}})), values(x), "kept");
}

TEST(Interpolate, UpsampleModule) {
  const Tensor x = rnd({1, 2, 3, 4}, 40);
  nn::Upsample up({.scale_factor = {2}, .mode = "bilinear", .align_corners = true});
  expect_same(values(up(x)), values(F::interpolate(x, {.scale_factor = {2}, .mode = "bilinear", .align_corners = true})),
              "Upsample");
  EXPECT_EQ(up(x).shape(), (IntList{1, 2, 6, 8}));
  EXPECT_EQ(up.str(), "Upsample(scale_factor=2.0, mode='bilinear')");
  EXPECT_EQ(nn::Upsample({.size = {5, 7}}).str(), "Upsample(size=(5, 7), mode='nearest')");
  EXPECT_EQ(nn::Upsample({.scale_factor = {1.5, 2}}).str(), "Upsample(scale_factor=(1.5, 2.0), mode='nearest')");
  EXPECT_EQ(nn::Upsample({.size = {5, 7}})(x).shape(), (IntList{1, 2, 5, 7}));
  // a module's errors are the module's, as every kiln module's
  expect_error([&] { (void)nn::Upsample({.mode = "nearest"})(x); }, __LINE__, "Upsample", {"size or scale_factor"});
}

TEST(Interpolate, Errors) {
  const Tensor x = rnd({1, 2, 5}, 41), x4 = rnd({1, 2, 3, 4}, 42);
  expect_error([&] { (void)F::interpolate(x, {.size = {3}, .mode = "bicubic"}); }, __LINE__, "interpolate",
               {"f64[1,2,5]", "\"bicubic\" needs a 4-d input"});
  expect_error([&] { (void)F::interpolate(x, {.size = {3}, .mode = "cubic"}); }, __LINE__, "interpolate",
               {"\"cubic\" is not one of nearest"});
  expect_error([&] { (void)F::interpolate(x, {.size = {3}, .mode = "bilinear"}); }, __LINE__, "interpolate",
               {"f64[1,2,5]", "\"bilinear\" needs a 4-d input"});
  expect_error([&] { (void)F::interpolate(x4, {.size = {3}, .mode = "linear"}); }, __LINE__, "interpolate",
               {"f64[1,2,3,4]", "\"linear\" needs a 3-d input"});
  expect_error([&] { (void)F::interpolate(x, {.size = {3}, .align_corners = false}); }, __LINE__, "interpolate",
               {"align_corners", "interpolating modes"});
  expect_error([&] { (void)F::interpolate(x, {.size = {3}, .scale_factor = {2}}); }, __LINE__, "interpolate",
               {"only one of size and scale_factor"});
  expect_error([&] { (void)F::interpolate(x, {}); }, __LINE__, "interpolate", {"give size or scale_factor"});
  expect_error([&] { (void)F::interpolate(x4, {.size = {3, 4, 5}}); }, __LINE__, "interpolate",
               {"size has 3 values for 2 spatial dims"});
  expect_error([&] { (void)F::interpolate(x, {.scale_factor = {2, 2}}); }, __LINE__, "interpolate", {"scale_factor has 2 values"});
  expect_error([&] { (void)F::interpolate(x, {.size = {3}, .recompute_scale_factor = true}); }, __LINE__, "interpolate",
               {"recompute_scale_factor"});
  expect_error([&] { (void)F::interpolate(x, {.scale_factor = {0.1}}); }, __LINE__, "interpolate", {"5 -> 0"});
  expect_error([&] { (void)F::interpolate(x, {.scale_factor = {-2}}); }, __LINE__, "interpolate", {"positive"});
  expect_error([&] { (void)F::interpolate(x, {.scale_factor = {std::nan("")}}); }, __LINE__, "interpolate", {"positive"});
  expect_error([&] { (void)F::interpolate(x, {.scale_factor = {1e300}}); }, __LINE__, "interpolate", {"overflow"});
  expect_error([&] { (void)F::interpolate(x, {.size = {0}}); }, __LINE__, "interpolate", {"5 -> 0"});
  expect_error([&] { (void)F::interpolate(rnd({1, 2, 0}, 43), {.size = {4}}); }, __LINE__, "interpolate", {"0 -> 4"});
  expect_error([&] { (void)F::interpolate(rnd({2, 0, 5}, 44), {.size = {4}}); }, __LINE__, "interpolate",
               {"f64[2,0,5]", "channel"});
  expect_error([&] { (void)F::interpolate(rnd({2, 5}, 45), {.size = {4}}); }, __LINE__, "interpolate", {"f64[2,5]", "[N, C, L]"});
  expect_error([&] { (void)F::interpolate(x.to(kInt64), {.size = {4}}); }, __LINE__, "interpolate", {"i64[1,2,5]", "floating"});
}

// ---------------------------------------------------------------- pad with negative amounts

struct PadCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList pads;
  double value;
  IntList out_shape;
  std::vector<double> out, grad;
};

const PadCase kPad[] = {
#include "pytorch_pad_table.inc"
};

TEST(PadNegative, CropsAsPyTorch) {
  for (const PadCase& c : kPad) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = pad(x, c.pads, c.value);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_same(values(y), c.out, std::string(c.name) + " values");
    expect_same(values(x.grad()), c.grad, std::string(c.name) + " grad");
  }
  expect_gradcheck([](const std::vector<Tensor>& v) { return (pad(v[0], {-1, 2, 1, -2}, 0.5) * v[1]).sum(); },
                   {rnd({4, 5}, 46), rnd({3, 6}, 47)});
  EXPECT_EQ(pad(rnd({0, 3}, 48), {-1, -1, 1, 0}).shape(), (IntList{1, 1})); // an empty dim padded, another cropped
}

TEST(PadNegative, CropsPastTheExtentAreErrors) {
  const Tensor x = rnd({2, 3}, 49);
  expect_error([&] { (void)pad(x, {-4, 2}); }, __LINE__, "pad", {"f64[2,3]", "(-4, 2)", "dim 1", "extent 3"});
  expect_error([&] { (void)pad(x, {-2, -2}); }, __LINE__, "pad", {"crops more than its extent 3"});
  expect_error([&] { (void)pad(x, {0, 0, -2, -1}); }, __LINE__, "pad", {"dim 0", "extent 2"});
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  expect_error([&] { (void)pad(x, {kMin, 0}); }, __LINE__, "pad", {"negative padding"});
  expect_error([&] { (void)pad(x, {-1, kMin}); }, __LINE__, "pad", {"negative padding"});
  expect_error([&] { (void)pad(x, {std::numeric_limits<int64_t>::max(), -1}); }, __LINE__, "pad", {"overflows"});
}

// ---------------------------------------------------------------- fused, unfused and compiled

// The layers in one program, and the gradients of its loss with respect to the inputs.
std::vector<Tensor> layers_program(const Tensor& x, const Tensor& w, const Tensor& img) {
  const Tensor h = F::max_pool1d(F::conv1d(x, w, Tensor(), 1, 1), 2, std::nullopt, 0, 1, true);
  const Tensor a = F::avg_pool1d(pad(h, {-1, 1}), 3, 1, 1, false, false);
  const Tensor up = F::interpolate(a, {.scale_factor = {1.7}, .mode = "linear"});
  const Tensor im = F::interpolate(img, {.size = {5, 7}, .mode = "bilinear", .align_corners = true});
  const Tensor near = F::interpolate(img, {.scale_factor = {1.5, 0.7}});
  const Tensor loss = (up * up).sum() + (im * im).sum() + (near * im.slice(2, 0, 4).slice(3, 0, 2)).sum();
  std::vector<Tensor> out = {up, im, loss};
  for (const Tensor& g : grad({loss}, {x, w, img})) out.push_back(g);
  return out;
}

std::vector<Tensor> layers_inputs(uint64_t seed) {
  return {randn({2, 3, 9}, seed).requires_grad_(), randn({4, 3, 3}, seed + 1).requires_grad_(),
          randn({2, 2, 3, 4}, seed + 2).requires_grad_()};
}

TEST(Layers1d, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree([](const std::vector<Tensor>& a) { return layers_program(a[0], a[1], a[2]); },
                                          layers_inputs);
}

} // namespace
} // namespace kiln

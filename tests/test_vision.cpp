// PyTorch-parity of the pooling variants, vision rearrangements and lookups: max_pool1d/2d_with_indices,
// max_unpool1d/2d, adaptive_max_pool1d/2d, lp_pool1d/2d, pixel_shuffle, pixel_unshuffle, channel_shuffle,
// unfold, fold, embedding, embedding_bag, conv3d, max_pool3d and avg_pool3d (and their modules): values, indices
// and gradients against PyTorch 1.13 in f64 (a generated table), f64 gradchecks, fused against unfused and
// compile(), and error messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
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
using nn::Size2;
using namespace test; // values, rnd, expect_gradcheck, expect_close, expect_same, weights_for

constexpr double kInf = std::numeric_limits<double>::infinity();

void expect_error(const std::function<void()>& f, int line, const std::string& op,
                  const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_vision.cpp", line, op, parts);
}

std::vector<int64_t> ints_of(const Tensor& t) { return t.to_vector<int64_t>(); }

// y's values and the gradient of sum(y * u) with respect to x (a leaf), each within 1e-12 of PyTorch's.
void expect_values_and_grad(const Tensor& x, const Tensor& y, const IntList& shape, const std::vector<double>& out,
                            const std::vector<double>& grad, const std::string& name) {
  ASSERT_EQ(y.shape(), shape) << name;
  expect_close(values(y), out, 1e-12, name + " values");
  if (grad.empty()) return;
  (y * weights_for(y)).sum().backward();
  expect_close(values(x.grad()), grad, 1e-12, name + " input grad");
}

std::optional<int64_t> opt(const IntList& v, size_t i = 0) {
  return v.empty() ? std::nullopt : std::optional<int64_t>(v[i]);
}

std::optional<Size2> opt2(const IntList& v) {
  return v.empty() ? std::nullopt : std::optional<Size2>(Size2(v[0], v[1]));
}

// ---------------------------------------------------------------- max_pool with indices

struct MaxPoolCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList kernel, stride, padding, dilation; ///< stride {}: the kernel
  bool ceil_mode;
  IntList out_shape;
  std::vector<double> out;
  std::vector<int64_t> indices;
  std::vector<double> grad;
};

const MaxPoolCase kMaxPool[] = {
#define KILN_MAX_POOL_INDICES
#include "pytorch_vision_table.inc"
#undef KILN_MAX_POOL_INDICES
};

std::pair<Tensor, Tensor> max_pool_of(const MaxPoolCase& c, const Tensor& x) {
  if (c.kernel.size() == 1)
    return F::max_pool1d_with_indices(x, c.kernel[0], opt(c.stride), c.padding[0], c.dilation[0], c.ceil_mode);
  return F::max_pool2d_with_indices(x, {c.kernel[0], c.kernel[1]}, opt2(c.stride), {c.padding[0], c.padding[1]},
                                    {c.dilation[0], c.dilation[1]}, c.ceil_mode);
}

TEST(MaxPoolWithIndices, MatchesPyTorch) {
  for (const MaxPoolCase& c : kMaxPool) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const auto [y, i] = max_pool_of(c, x);
    EXPECT_EQ(i.dtype(), kInt64) << c.name;
    EXPECT_EQ(i.shape(), c.out_shape) << c.name;
    EXPECT_EQ(ints_of(i), c.indices) << c.name;
    expect_values_and_grad(x, y, c.out_shape, c.out, c.grad, c.name);
    // the values are max_pool's
    const Tensor plain =
        c.kernel.size() == 1
            ? F::max_pool1d(x, c.kernel[0], opt(c.stride), c.padding[0], c.dilation[0], c.ceil_mode)
            : F::max_pool2d(x, {c.kernel[0], c.kernel[1]}, opt2(c.stride).value_or(Size2(c.kernel[0], c.kernel[1])),
                            {c.padding[0], c.padding[1]}, {c.dilation[0], c.dilation[1]}, c.ceil_mode);
    expect_same(values(y), values(plain), std::string(c.name) + " max_pool");
  }
}

TEST(MaxPoolWithIndices, InfinityOnlyWindowsAndEmptyBatch) {
  // a window of -infinity only names its first element inside the input, as PyTorch's scan (not the padding)
  const Tensor x = full({1, 1, 3, 3}, -kInf, kFloat64);
  EXPECT_EQ(ints_of(F::max_pool2d_with_indices(x, 3, 2, 1).second), (std::vector<int64_t>{0, 1, 3, 4}));
  const auto [v, i] = F::max_pool2d_with_indices(zeros({0, 2, 5, 4}, kFloat64), 2);
  EXPECT_EQ(v.shape(), (IntList{0, 2, 2, 2}));
  EXPECT_EQ(i.shape(), (IntList{0, 2, 2, 2}));
  EXPECT_EQ(F::max_pool1d_with_indices(zeros({0, 3, 7}), 3).second.shape(), (IntList{0, 3, 2}));
}

// ---------------------------------------------------------------- max_unpool

struct UnpoolCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  std::vector<int64_t> indices;
  IntList kernel, stride, padding, output_size; ///< stride {}: the kernel; output_size {}: the default
  IntList out_shape;
  std::vector<double> out, grad;
};

const UnpoolCase kUnpool[] = {
#define KILN_MAX_UNPOOL
#include "pytorch_vision_table.inc"
#undef KILN_MAX_UNPOOL
};

TEST(MaxUnpool, MatchesPyTorch) {
  for (const UnpoolCase& c : kUnpool) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor i = from_vector(c.indices, c.shape);
    const Tensor y = c.kernel.size() == 1
                         ? F::max_unpool1d(x, i, c.kernel[0], opt(c.stride), c.padding[0], c.output_size)
                         : F::max_unpool2d(x, i, {c.kernel[0], c.kernel[1]}, opt2(c.stride),
                                           {c.padding[0], c.padding[1]}, c.output_size);
    expect_values_and_grad(x, y, c.out_shape, c.out, c.grad, c.name);
  }
}

TEST(MaxUnpool, InvertsMaxPoolAndTakesI32Indices) {
  const Tensor x = rnd({2, 3, 6, 8}, 1);
  const auto [v, i] = F::max_pool2d_with_indices(x, 2);
  const Tensor back = F::max_unpool2d(v, i, 2);
  // every value lands where it came from: pooling the unpooled map gives the values back
  expect_same(values(F::max_pool2d(back + (back == 0.0).to(kFloat64) * -1e9, 2)), values(v), "round trip");
  expect_same(values(F::max_unpool2d(v, i.to(kInt32), 2)), values(back), "i32 indices");
  nn::MaxUnpool2d unpool(2);
  EXPECT_EQ(unpool.str(), "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  expect_same(values(unpool.forward(v, i, {6, 8})), values(back), "MaxUnpool2d");
  nn::MaxPool1d pool1(3, 2);
  const Tensor s = rnd({2, 7}, 2);
  const auto [v1, i1] = pool1.forward_with_indices(s);
  nn::MaxUnpool1d unpool1(3, 2);
  EXPECT_EQ(unpool1.str(), "MaxUnpool1d(kernel_size=3, stride=2, padding=0)");
  expect_same(values(unpool1.forward(v1, i1, {7})), values(F::max_unpool1d(v1, i1, 3, 2, 0, {7})), "MaxUnpool1d");
  EXPECT_EQ(unpool1.forward(v1, i1).shape(), (IntList{2, 7}));
  // an empty batch, as PyTorch
  EXPECT_EQ(F::max_unpool2d(zeros({0, 2, 2, 2}, kFloat64), zeros({0, 2, 2, 2}, kInt64), 2).shape(),
            (IntList{0, 2, 4, 4}));
}

// ---------------------------------------------------------------- adaptive_max_pool

struct AdaptiveCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList size, out_shape;
  std::vector<double> out;
  std::vector<int64_t> indices;
  std::vector<double> grad;
};

const AdaptiveCase kAdaptive[] = {
#define KILN_ADAPTIVE_MAX
#include "pytorch_vision_table.inc"
#undef KILN_ADAPTIVE_MAX
};

TEST(AdaptiveMaxPool, MatchesPyTorch) {
  for (const AdaptiveCase& c : kAdaptive) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const auto [y, i] = c.size.size() == 1 ? F::adaptive_max_pool1d_with_indices(x, c.size[0])
                                           : F::adaptive_max_pool2d_with_indices(x, {c.size[0], c.size[1]});
    EXPECT_EQ(ints_of(i), c.indices) << c.name;
    expect_values_and_grad(x, y, c.out_shape, c.out, c.grad, c.name);
  }
}

TEST(AdaptiveMaxPool, ModulesAndEmptyShapes) {
  const Tensor x = rnd({2, 3, 7, 5}, 3), s = rnd({2, 3, 9}, 4);
  nn::AdaptiveMaxPool2d pool({3, 2});
  nn::AdaptiveMaxPool1d pool1(4);
  EXPECT_EQ(pool.str(), "AdaptiveMaxPool2d(output_size=(3, 2))");
  EXPECT_EQ(pool1.str(), "AdaptiveMaxPool1d(output_size=4)");
  expect_same(values(pool(x)), values(F::adaptive_max_pool2d(x, {3, 2})), "AdaptiveMaxPool2d");
  expect_same(values(pool.forward_with_indices(x).second),
              values(F::adaptive_max_pool2d_with_indices(x, {3, 2}).second), "AdaptiveMaxPool2d indices");
  expect_same(values(pool1(s)), values(F::adaptive_max_pool1d(s, 4)), "AdaptiveMaxPool1d");
  EXPECT_EQ(pool1.forward_with_indices(s).second.shape(), (IntList{2, 3, 4}));
  // as PyTorch: an empty batch, and an output extent of 0
  EXPECT_EQ(F::adaptive_max_pool2d(zeros({0, 2, 4, 4}, kFloat64), 2).shape(), (IntList{0, 2, 2, 2}));
  EXPECT_EQ(F::adaptive_max_pool2d_with_indices(x, {0, 2}).second.shape(), (IntList{2, 3, 0, 2}));
}

// ---------------------------------------------------------------- lp_pool

struct LpCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  double norm_type;
  IntList kernel, stride; ///< stride {}: the kernel
  bool ceil_mode;
  IntList out_shape;
  std::vector<double> out, grad;
};

const LpCase kLp[] = {
#define KILN_LP_POOL
#include "pytorch_vision_table.inc"
#undef KILN_LP_POOL
};

TEST(LpPool, MatchesPyTorch) {
  for (const LpCase& c : kLp) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = c.kernel.size() == 1
                         ? F::lp_pool1d(x, c.norm_type, c.kernel[0], opt(c.stride), c.ceil_mode)
                         : F::lp_pool2d(x, c.norm_type, {c.kernel[0], c.kernel[1]}, opt2(c.stride), c.ceil_mode);
    expect_values_and_grad(x, y, c.out_shape, c.out, c.grad, c.name);
  }
}

TEST(LpPool, Modules) {
  nn::LPPool2d pool(2, {2, 3}, std::nullopt, true);
  nn::LPPool1d pool1(1.5, 3, 2);
  EXPECT_EQ(pool.str(), "LPPool2d(norm_type=2.0, kernel_size=(2, 3), stride=(2, 3), ceil_mode=true)");
  EXPECT_EQ(pool1.str(), "LPPool1d(norm_type=1.5, kernel_size=3, stride=2, ceil_mode=false)");
  const Tensor x = rnd({2, 2, 5, 7}, 5), s = abs(rnd({2, 3, 8}, 6));
  expect_same(values(pool(x)), values(F::lp_pool2d(x, 2, {2, 3}, std::nullopt, true)), "LPPool2d");
  expect_same(values(pool1(s)), values(F::lp_pool1d(s, 1.5, 3, 2)), "LPPool1d");
}

// ---------------------------------------------------------------- pixel and channel shuffles

struct ShuffleCase {
  const char* name;
  const char* op;
  IntList shape;
  std::vector<double> input;
  int64_t factor;
  IntList out_shape;
  std::vector<double> out, grad; ///< grad {}: PyTorch 1.13 has none (channel_shuffle)
};

const ShuffleCase kShuffle[] = {
#define KILN_SHUFFLE
#include "pytorch_vision_table.inc"
#undef KILN_SHUFFLE
};

Tensor shuffle_of(const ShuffleCase& c, const Tensor& x) {
  const std::string op = c.op;
  if (op == "pixel_shuffle") return F::pixel_shuffle(x, c.factor);
  if (op == "pixel_unshuffle") return F::pixel_unshuffle(x, c.factor);
  return F::channel_shuffle(x, c.factor);
}

TEST(Shuffles, MatchPyTorch) {
  for (const ShuffleCase& c : kShuffle) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = shuffle_of(c, x);
    expect_values_and_grad(x, y, c.out_shape, c.out, c.grad, c.name);
    // exact: they move values
    expect_same(values(y), c.out, std::string(c.name) + " exact");
  }
}

TEST(Shuffles, InversesAndModules) {
  const Tensor x = rnd({2, 8, 3, 5}, 7);
  expect_same(values(F::pixel_unshuffle(F::pixel_shuffle(x, 2), 2)), values(x), "unshuffle(shuffle)");
  expect_same(values(F::channel_shuffle(F::channel_shuffle(x, 2), 4)), values(x), "channel_shuffle 2 then 4");
  nn::PixelShuffle ps(2);
  nn::PixelUnshuffle pu(2);
  nn::ChannelShuffle cs(4);
  EXPECT_EQ(ps.str(), "PixelShuffle(upscale_factor=2)");
  EXPECT_EQ(pu.str(), "PixelUnshuffle(downscale_factor=2)");
  EXPECT_EQ(cs.str(), "ChannelShuffle(groups=4)");
  expect_same(values(pu(ps(x))), values(x), "modules");
  expect_same(values(cs(x)), values(F::channel_shuffle(x, 4)), "ChannelShuffle");
  EXPECT_EQ(F::pixel_shuffle(zeros({0, 4, 2, 2}), 2).shape(), (IntList{0, 1, 4, 4})); // an empty batch, as PyTorch
}

// ---------------------------------------------------------------- unfold and fold

struct FoldCase {
  const char* name;
  const char* op;
  IntList shape;
  std::vector<double> input;
  IntList output_size, kernel, dilation, padding, stride; ///< output_size {}: unfold
  IntList out_shape;
  std::vector<double> out, grad;
};

const FoldCase kFold[] = {
#define KILN_FOLD
#include "pytorch_vision_table.inc"
#undef KILN_FOLD
};

TEST(FoldUnfold, MatchPyTorch) {
  for (const FoldCase& c : kFold) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Size2 k(c.kernel[0], c.kernel[1]), d(c.dilation[0], c.dilation[1]), p(c.padding[0], c.padding[1]),
        s(c.stride[0], c.stride[1]);
    const Tensor y = std::string(c.op) == "unfold" ? F::unfold(x, k, d, p, s)
                                                   : F::fold(x, {c.output_size[0], c.output_size[1]}, k, d, p, s);
    expect_values_and_grad(x, y, c.out_shape, c.out, c.grad, c.name);
  }
}

TEST(FoldUnfold, ConvIsUnfoldAndMatmulAndModules) {
  const Tensor x = rnd({2, 3, 6, 7}, 8), w = rnd({4, 3, 3, 2}, 9);
  const Tensor cols = F::unfold(x, {3, 2}, 1, 1, 2); // [2, 18, 3 * 4]
  const Tensor conv = matmul(w.reshape({4, 18}), cols).reshape({2, 4, 3, 4});
  expect_close(values(conv), values(F::conv2d(x, w, Tensor(), 2, 1)), 1e-12, "conv2d as unfold and matmul");
  // fold(unfold(x)) counts each element's blocks: x times fold(unfold(ones))
  const Tensor once = F::fold(F::unfold(x, 2), {6, 7}, 2);
  const Tensor counts = F::fold(F::unfold(ones({1, 1, 6, 7}, kFloat64), 2), {6, 7}, 2);
  expect_close(values(once), values(x * counts), 1e-12, "fold(unfold)");
  nn::Unfold unfold({3, 2}, 1, 1, 2);
  nn::Fold fold({6, 7}, 2);
  EXPECT_EQ(unfold.str(), "Unfold(kernel_size=(3, 2), dilation=(1, 1), padding=(1, 1), stride=(2, 2))");
  EXPECT_EQ(fold.str(), "Fold(output_size=(6, 7), kernel_size=(2, 2), dilation=(1, 1), padding=(0, 0), stride=(1, 1))");
  expect_same(values(unfold(x)), values(cols), "Unfold");
  expect_same(values(fold(F::unfold(x, 2))), values(once), "Fold");
  // kiln::unfold (Tensor.unfold) is a different function, as in PyTorch
  EXPECT_EQ(kiln::unfold(x, 3, 2, 1).shape(), (IntList{2, 3, 6, 6, 2}));
}

// ---------------------------------------------------------------- embedding

struct EmbedCase {
  const char* name;
  IntList index_shape;
  std::vector<int64_t> indices;
  IntList weight_shape;
  std::vector<double> weight;
  bool has_padding;
  int64_t padding_idx;
  double max_norm; ///< < 0: none
  double norm_type;
  IntList out_shape;
  std::vector<double> out, weight_after, weight_grad;
};

const EmbedCase kEmbed[] = {
#define KILN_EMBEDDING
#include "pytorch_vision_table.inc"
#undef KILN_EMBEDDING
};

TEST(Embedding, FunctionalMatchesPyTorch) {
  for (const EmbedCase& c : kEmbed) {
    Tensor w = from_vector(c.weight, c.weight_shape).requires_grad_();
    const Tensor i = from_vector(c.indices, c.index_shape);
    const Tensor y = F::embedding(i, w, c.has_padding ? std::optional<int64_t>(c.padding_idx) : std::nullopt,
                                  c.max_norm < 0 ? std::nullopt : std::optional<double>(c.max_norm), c.norm_type);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
    (y * weights_for(y)).sum().backward();
    expect_close(values(w), c.weight_after, 1e-12, std::string(c.name) + " weight renormed in place");
    expect_close(values(w.grad()), c.weight_grad, 1e-12, std::string(c.name) + " weight grad");
  }
}

TEST(Embedding, ModuleCallsTheFunction) {
  nn::Embedding emb(6, 3, -2, 1.0);
  const Tensor i = from_vector<int64_t>({1, 4, 4, 0}, {2, 2});
  const Tensor w = emb.weight.detach() * 1.0;
  const Tensor want = F::embedding(i, w, 4, 1.0);
  expect_same(values(emb(i)), values(want), "Embedding");
  expect_same(values(emb.weight), values(w), "the same rows renormed");
}

// ---------------------------------------------------------------- embedding_bag

struct BagCase {
  const char* name;
  IntList index_shape;
  std::vector<int64_t> indices, offsets; ///< offsets {}: a 2-d input
  IntList weight_shape;
  std::vector<double> weight;
  const char* mode;
  std::vector<double> per_sample_weights; ///< {}: none
  bool include_last_offset, has_padding;
  int64_t padding_idx;
  double max_norm; ///< < 0: none
  IntList out_shape;
  std::vector<double> out, weight_grad, per_sample_weights_grad;
};

const BagCase kBag[] = {
#define KILN_EMBEDDING_BAG
#include "pytorch_vision_table.inc"
#undef KILN_EMBEDDING_BAG
};

TEST(EmbeddingBag, FunctionalMatchesPyTorch) {
  for (const BagCase& c : kBag) {
    Tensor w = from_vector(c.weight, c.weight_shape).requires_grad_();
    Tensor psw =
        c.per_sample_weights.empty() ? Tensor() : from_vector(c.per_sample_weights, c.index_shape).requires_grad_();
    const F::EmbeddingBagOptions o{.offsets = c.offsets.empty() ? Tensor() : from_vector(c.offsets),
                                   .max_norm = c.max_norm < 0 ? std::nullopt : std::optional<double>(c.max_norm),
                                   .mode = c.mode,
                                   .per_sample_weights = psw,
                                   .include_last_offset = c.include_last_offset,
                                   .padding_idx = c.has_padding ? std::optional<int64_t>(c.padding_idx) : std::nullopt};
    const Tensor y = F::embedding_bag(from_vector(c.indices, c.index_shape), w, o);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
    (y * weights_for(y)).sum().backward();
    expect_close(values(w.grad()), c.weight_grad, 1e-12, std::string(c.name) + " weight grad");
    if (psw.defined())
      expect_close(values(psw.grad()), c.per_sample_weights_grad, 1e-12, std::string(c.name) + " psw grad");
  }
}

TEST(EmbeddingBag, ModuleLazyOffsetsAndI32) {
  nn::EmbeddingBag bag(7, 3, std::nullopt, 2, "max", false, -1);
  EXPECT_EQ(bag.str(), "EmbeddingBag(7, 3, mode=max, padding_idx=6)");
  expect_same(values(bag.weight.slice(0, 6, 7)), {0, 0, 0}, "the padding row starts at zero");
  const Tensor i = from_vector<int64_t>({1, 6, 3, 3, 0, 2}), o = from_vector<int64_t>({0, 2, 2});
  const Tensor want = F::embedding_bag(i, bag.weight, {.offsets = o, .mode = "max", .padding_idx = 6});
  expect_same(values(bag.forward(i, o)), values(want), "EmbeddingBag");
  // offsets not computed yet (a lazy tensor) take the input's length as the longest bag: the same values
  expect_same(values(bag.forward(i, o + 0)), values(want), "lazy offsets");
  expect_same(values(bag.forward(i.to(kInt32), o.to(kInt32))), values(want), "i32");
  // a 2-d input through operator() (no offsets)
  const Tensor rows = from_vector<int64_t>({1, 2, 3, 4, 5, 0}, {2, 3});
  expect_same(values(bag(rows)), values(F::embedding_bag(rows, bag.weight, {.mode = "max", .padding_idx = 6})), "2-d");
}

// ---------------------------------------------------------------- conv3d, max_pool3d, avg_pool3d

struct Conv3dCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList weight_shape;
  std::vector<double> weight, bias; ///< bias {}: none
  IntList stride, padding, dilation;
  int64_t groups;
  IntList out_shape;
  std::vector<double> out, grad, weight_grad, bias_grad;
};

const Conv3dCase kConv3d[] = {
#define KILN_CONV3D
#include "pytorch_vision_table.inc"
#undef KILN_CONV3D
};

nn::Size3 size3(const IntList& v) { return {v[0], v[1], v[2]}; }

TEST(Conv3d, MatchesPyTorch) {
  for (const Conv3dCase& c : kConv3d) {
    expect_conv_case(c, [&](const Tensor& x, const Tensor& w, const Tensor& b) {
      return F::conv3d(x, w, b, size3(c.stride), size3(c.padding), size3(c.dilation), c.groups);
    });
  }
}

struct Pool3dCase {
  const char* name;
  const char* op;
  IntList shape;
  std::vector<double> input;
  IntList kernel, stride, padding, dilation; ///< stride {}: the kernel
  bool ceil_mode, count_include_pad;
  int64_t divisor_override; ///< 0: none
  IntList out_shape;
  std::vector<double> out, grad;
};

const Pool3dCase kPool3d[] = {
#define KILN_POOL3D
#include "pytorch_vision_table.inc"
#undef KILN_POOL3D
};

TEST(Pool3d, MatchesPyTorch) {
  for (const Pool3dCase& c : kPool3d) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const std::optional<nn::Size3> stride = c.stride.empty() ? std::nullopt : std::optional<nn::Size3>(size3(c.stride));
    const Tensor y =
        std::string(c.op) == "max"
            ? F::max_pool3d(x, size3(c.kernel), stride, size3(c.padding), size3(c.dilation), c.ceil_mode)
            : F::avg_pool3d(x, size3(c.kernel), stride, size3(c.padding), c.ceil_mode, c.count_include_pad,
                            c.divisor_override ? std::optional<int64_t>(c.divisor_override) : std::nullopt);
    expect_values_and_grad(x, y, c.out_shape, c.out, c.grad, c.name);
  }
}

TEST(Conv3d, ModulesAndEmptyBatch) {
  nn::Conv3d conv(2, 4, {2, 3, 1}, {.stride = {1, 2, 1}, .padding = 1, .groups = 2});
  EXPECT_EQ(conv.str(),
            "Conv3d(2, 4, kernel_size=(2, 3, 1), stride=(1, 2, 1), padding=(1, 1, 1), dilation=(1, 1, 1), groups=2, "
            "bias=true)");
  EXPECT_EQ(conv.weight.shape(), (IntList{4, 1, 2, 3, 1}));
  const Tensor x = rnd({2, 2, 3, 5, 4}, 41);
  expect_same(values(conv(x)), values(F::conv3d(x, conv.weight, conv.bias, {1, 2, 1}, 1, 1, 2)), "Conv3d");
  nn::MaxPool3d maxp(2, std::nullopt, 0, 1, true);
  nn::AvgPool3d avgp({3, 2, 2}, 2, 1, false, false);
  EXPECT_EQ(maxp.str(), "MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0), dilation=(1, 1, 1), "
                        "ceil_mode=true)");
  EXPECT_EQ(avgp.str(), "AvgPool3d(kernel_size=(3, 2, 2), stride=(2, 2, 2), padding=(1, 1, 1), ceil_mode=false, "
                        "count_include_pad=false)");
  expect_same(values(maxp(x)), values(F::max_pool3d(x, 2, std::nullopt, 0, 1, true)), "MaxPool3d");
  expect_same(values(avgp(x)), values(F::avg_pool3d(x, {3, 2, 2}, 2, 1, false, false)), "AvgPool3d");
  EXPECT_EQ(F::conv3d(zeros({0, 2, 3, 5, 4}, kFloat64), conv.weight, conv.bias, {1, 2, 1}, 1, 1, 2).shape(),
            (IntList{0, 4, 4, 3, 6}));
  EXPECT_EQ(F::max_pool3d(zeros({0, 2, 4, 4, 4}, kFloat64), 2).shape(), (IntList{0, 2, 2, 2, 2}));
}

// ---------------------------------------------------------------- gradchecks

TEST(Vision, Gradcheck) {
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::max_pool2d_with_indices(v[0], 3, 2, 1).first * v[1]).sum(); },
      {rnd({1, 2, 5, 6}, 10), rnd({1, 2, 3, 3}, 11)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::adaptive_max_pool2d(v[0], {3, 2}) * v[1]).sum();
      },
      {rnd({2, 5, 7}, 12), rnd({2, 3, 2}, 13)});
  const Tensor idx = F::max_pool1d_with_indices(rnd({2, 3, 8}, 14), 2).second;
  expect_gradcheck([idx](const std::vector<Tensor>& v) { return (F::max_unpool1d(v[0], idx, 2) * v[1]).sum(); },
                   {rnd({2, 3, 4}, 15), rnd({2, 3, 8}, 16)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::lp_pool2d(v[0], 3, 2, std::nullopt, true) * v[1]).sum(); },
      {abs(rnd({1, 2, 5, 5}, 17)) + 0.5, rnd({1, 2, 3, 3}, 18)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::fold(v[0], {5, 6}, {2, 3}, 1, 1, {2, 1}) * v[1]).sum();
      },
      {rnd({1, 12, 18}, 19), rnd({1, 2, 5, 6}, 20)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::unfold(v[0], {2, 3}, {2, 1}, 1, 2) * v[1]).sum();
      },
      {rnd({1, 2, 5, 6}, 21), rnd({1, 12, 9}, 22)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::channel_shuffle(F::pixel_shuffle(v[0], 2), 2) * v[1]).sum(); },
      {rnd({1, 8, 2, 3}, 23), rnd({1, 2, 4, 6}, 24)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::conv3d(v[0], v[1], v[2], {2, 1, 1}, 1) * v[3]).sum();
      },
      {rnd({1, 2, 3, 3, 4}, 42), rnd({2, 2, 2, 2, 3}, 43), rnd({2}, 44), rnd({1, 2, 2, 4, 4}, 45)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::max_pool3d(v[0], 2, 1, 1) * v[1]).sum(); },
                   {rnd({1, 1, 3, 3, 4}, 46), rnd({1, 1, 4, 4, 5}, 47)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::avg_pool3d(v[0], 3, 2, 1, true, false) * v[1]).sum(); },
      {rnd({1, 2, 4, 5, 4}, 48), rnd({1, 2, 3, 3, 3}, 49)});
  const Tensor bags = from_vector<int64_t>({1, 3, 3, 0, 2}), offsets = from_vector<int64_t>({0, 2, 2});
  expect_gradcheck(
      [=](const std::vector<Tensor>& v) {
        return (F::embedding_bag(bags, v[0], {.offsets = offsets, .mode = "sum", .per_sample_weights = v[1]}) * v[2])
            .sum();
      },
      {rnd({4, 3}, 25), rnd({5}, 26), rnd({3, 3}, 27)});
}

// ---------------------------------------------------------------- fused, unfused and compiled

std::vector<Tensor> vision_program(const std::vector<Tensor>& in) {
  const auto [pooled, idx] = F::max_pool2d_with_indices(in[0], 3, 2, 1, 1, true); // [2, 4, 4, 4]
  const Tensor up = F::max_unpool2d(pooled, idx, 3, 2, 1, {2, 4, 7, 7}); // [2, 4, 7, 7]
  const Tensor shuffled =
      F::pixel_unshuffle(F::channel_shuffle(F::pixel_shuffle(up.slice(2, 0, 6).slice(3, 0, 6), 2), 1), 3);
  const Tensor lp = F::lp_pool2d(shuffled, 2, 2, std::nullopt, true);
  const Tensor folded = F::fold(F::unfold(in[0], 2, 1, 1, 2), {7, 7}, 2, 1, 1, 2);
  const Tensor adaptive = F::adaptive_max_pool2d(folded, {3, 2});
  const Tensor bag = F::embedding_bag(from_vector<int64_t>({0, 3, 1, 2, 2}), in[1],
                                      {.offsets = from_vector<int64_t>({0, 2}), .mode = "max"});
  const Tensor conv = F::conv3d(in[2], in[3], Tensor(), {1, 2, 1}, 1); // [1, 2, 5, 3, 5]
  const Tensor pooled3 = F::max_pool3d(conv, 2, 1, 1, 1, true) + F::avg_pool3d(conv, 2, 1, 1, true, false);
  const Tensor loss = (lp * lp).sum() + (adaptive * adaptive).sum() + (bag * bag).sum() + (pooled3 * pooled3).sum();
  std::vector<Tensor> out = {idx.to(kFloat64), up, lp, adaptive, bag, pooled3, loss};
  for (const Tensor& g : grad({loss}, {in[0], in[1], in[2], in[3]})) out.push_back(g);
  return out;
}

std::vector<Tensor> vision_inputs(uint64_t seed) {
  return {randn({2, 4, 7, 7}, seed, kFloat64).requires_grad_(), randn({4, 3}, seed + 1, kFloat64).requires_grad_(),
          randn({1, 3, 4, 4, 4}, seed + 2, kFloat64).requires_grad_(),
          randn({2, 3, 2, 2, 2}, seed + 3, kFloat64).requires_grad_()};
}

TEST(Vision, FusedUnfusedAndCompiledAgree) { expect_fused_unfused_and_compiled_agree(vision_program, vision_inputs); }

// ---------------------------------------------------------------- errors

// One expect_error call a line: __LINE__ must be the line of the failing call.
// clang-format off
TEST(Vision, Errors) {
  const Tensor x = rnd({1, 4, 5, 6}, 30), s = rnd({1, 2, 7}, 31);
  expect_error([&] { (void)F::max_pool2d_with_indices(x, 0); }, __LINE__, "max_pool2d_with_indices", {"kernel, stride and dilation must be positive", "f64[1,4,5,6]"});
  expect_error([&] { (void)F::max_pool2d_with_indices(x, 2, 2, 2); }, __LINE__, "max_pool2d_with_indices", {"padding must be at most half the kernel size"});
  expect_error([&] { (void)F::max_pool1d_with_indices(s, 3, -1); }, __LINE__, "max_pool1d_with_indices", {"must be positive", "f64[1,2,7]"});
  const auto [v, i] = F::max_pool2d_with_indices(x, 2);
  expect_error([&] { (void)F::max_unpool2d(v, i, 2, std::nullopt, 0, {7, 6}); }, __LINE__, "max_unpool2d", {"output_size [7,6] is not valid", "between [4,6] minus and plus the stride [2,2]", "f64[1,4,2,3]"});
  expect_error([&] { (void)F::max_unpool2d(v, i, 2, std::nullopt, 0, {5}); }, __LINE__, "max_unpool2d", {"must have 2 or 4 elements"});
  expect_error([&] { (void)F::max_unpool2d(v, i.slice(3, 0, 2), 2); }, __LINE__, "max_unpool2d", {"the indices must have the input's shape", "f64[1,4,2,3]", "i64[1,4,2,2]"});
  Tensor bad = i + 100;
  realize({bad});
  expect_error([&] { (void)F::max_unpool2d(v, bad, 2); }, __LINE__, "max_unpool2d", {"invalid max index 10", "24 elements", "i64[1,4,2,3]"});
  expect_error([&] { (void)F::max_unpool2d(v, i + 100, 2).to_vector<double>(); }, __LINE__, "max_unpool2d", {"out of range", "[0, 24)"});
  expect_error([&] { (void)F::max_unpool1d(s, s, 2); }, __LINE__, "max_unpool1d", {"the indices must be integers"});
  expect_error([&] { (void)F::adaptive_max_pool2d(x, {-1, 2}); }, __LINE__, "adaptive_max_pool2d", {"greater than or equal to 0", "f64[1,4,5,6]"});
  expect_error([&] { (void)F::adaptive_max_pool1d(x, 2); }, __LINE__, "adaptive_max_pool1d", {"expects a [N, C, L]", "f64[1,4,5,6]"});
  expect_error([&] { (void)F::lp_pool2d(x, 2, {2, 0}); }, __LINE__, "lp_pool2d", {"kernel, stride and dilation must be positive"});
  expect_error([&] { (void)F::lp_pool1d(s, 2, 8); }, __LINE__, "lp_pool1d", {"larger than the padded input", "f64[1,2,7]"});
  expect_error([&] { (void)F::pixel_shuffle(x, 3); }, __LINE__, "pixel_shuffle", {"(dim -3, 4) must be divisible by upscale_factor^2 = 9", "f64[1,4,5,6]"});
  expect_error([&] { (void)F::pixel_shuffle(x, 0); }, __LINE__, "pixel_shuffle", {"upscale_factor must be positive"});
  expect_error([&] { (void)F::pixel_unshuffle(x, 2); }, __LINE__, "pixel_unshuffle", {"(5, 6) must be divisible by downscale_factor 2", "f64[1,4,5,6]"});
  expect_error([&] { (void)F::channel_shuffle(x, 3); }, __LINE__, "channel_shuffle", {"the channels (4) must be divisible by groups (3)", "f64[1,4,5,6]"});
  expect_error([&] { (void)F::channel_shuffle(rnd({6, 4}, 32), 2); }, __LINE__, "channel_shuffle", {"more than 2 dims", "f64[6,4]"});
  expect_error([&] { (void)F::unfold(rnd({2, 7}, 40), 2); }, __LINE__, "unfold", {"expects a [N, C, H, W]", "f64[2,7]"});
  expect_error([&] { (void)F::unfold(x, 7); }, __LINE__, "unfold", {"larger than the padded input", "f64[1,4,5,6]"});
  expect_error([&] { (void)F::fold(rnd({1, 10, 12}, 33), {4, 5}, 2); }, __LINE__, "fold", {"dim 1 (10) must be divisible by the kernel's size", "f64[1,10,12]"});
  expect_error([&] { (void)F::fold(rnd({1, 12, 11}, 34), {4, 5}, 2); }, __LINE__, "fold", {"give 3 x 4 blocks, but the input's dim 2 has 11", "f64[1,12,11]"});
  expect_error([&] { (void)F::fold(rnd({1, 12, 11}, 35), {4, 5}, 2, 1, 0, 0); }, __LINE__, "fold", {"must be positive"});
  const Tensor w = rnd({5, 3}, 36), idx = from_vector<int64_t>({0, 4, 2, 1});
  expect_error([&] { (void)F::embedding(idx, w, 5); }, __LINE__, "embedding", {"padding_idx 5 must be within [-5, 5)", "f64[5,3]"});
  expect_error([&] { (void)F::embedding(from_vector<int64_t>({0, 7}), w); }, __LINE__, "embedding", {"index 7", "[0, 5)"});
  expect_error([&] { (void)F::embedding(w, w); }, __LINE__, "embedding", {"needs integer (i32 or i64) indices", "f64[5,3]"});
  expect_error([&] { (void)F::embedding_bag(idx, w, {.offsets = from_vector<int64_t>({0, 3, 1})}); }, __LINE__, "embedding_bag", {"offsets must not decrease", "i64[4]", "i64[3]"});
  expect_error([&] { (void)F::embedding_bag(idx, w, {.offsets = from_vector<int64_t>({1, 3})}); }, __LINE__, "embedding_bag", {"offsets[0] must be 0", "got 1"});
  expect_error([&] { (void)F::embedding_bag(idx, w, {.offsets = from_vector<int64_t>({0, 5})}); }, __LINE__, "embedding_bag", {"offsets[-1] (5) must not be greater than the input's length 4"});
  expect_error([&] { (void)F::embedding_bag(idx, w); }, __LINE__, "embedding_bag", {"a 1-d input needs offsets", "i64[4]"});
  expect_error([&] { (void)F::embedding_bag(idx.reshape({2, 2}), w, {.offsets = from_vector<int64_t>({0})}); }, __LINE__, "embedding_bag", {"the offsets must be undefined", "i64[2,2]"});
  expect_error([&] { (void)F::embedding_bag(idx, w, {.offsets = from_vector<int64_t>({0}), .per_sample_weights = rnd({4}, 37)}); }, __LINE__, "embedding_bag", {"per_sample_weights is only supported for mode \"sum\" (got mode \"mean\")", "f64[4]"});
  expect_error([&] { (void)F::embedding_bag(idx, w, {.offsets = from_vector<int64_t>({0}), .mode = "sum", .per_sample_weights = rnd({3}, 38)}); }, __LINE__, "embedding_bag", {"per_sample_weights must have the input's shape", "f64[3]"});
  expect_error([&] { (void)F::embedding_bag(idx, w, {.offsets = from_vector<int64_t>({0}), .mode = "min"}); }, __LINE__, "embedding_bag", {"mode must be \"sum\", \"mean\" or \"max\", not \"min\""});
  expect_error([&] { (void)F::embedding_bag(from_vector<int64_t>({0, 9}), w, {.offsets = from_vector<int64_t>({0})}); }, __LINE__, "embedding_bag", {"index 9", "[0, 5)"});
  const Tensor v3 = rnd({1, 2, 3, 4, 5}, 50);
  expect_error([&] { (void)F::conv3d(v3, rnd({2, 2, 4, 2, 2}, 51)); }, __LINE__, "conv3d", {"larger than the padded input", "f64[1,2,3,4,5]"});
  expect_error([&] { (void)F::conv3d(v3, rnd({2, 3, 2, 2, 2}, 52)); }, __LINE__, "conv3d", {"channels do not match", "f64[2,3,2,2,2]"});
  expect_error([&] { (void)F::conv3d(v3, rnd({2, 2, 2, 2}, 53)); }, __LINE__, "conv3d", {"the weight must be [out, in/groups, kd, kh, kw]"});
  expect_error([&] { (void)F::max_pool3d(v3, 2, 2, {2, 0, 0}); }, __LINE__, "max_pool3d", {"padding must be at most half the kernel size", "f64[1,2,3,4,5]"});
  expect_error([&] { (void)F::max_pool3d(s, 2); }, __LINE__, "max_pool3d", {"expects a [N, C, D, H, W]", "f64[1,2,7]"});
  expect_error([&] { (void)F::avg_pool3d(v3, {2, 0, 1}); }, __LINE__, "avg_pool3d", {"kernel, stride and dilation must be positive"});
  expect_error([&] { (void)F::avg_pool3d(v3, 2, std::nullopt, 0, false, true, 0); }, __LINE__, "avg_pool3d", {"divisor_override must not be zero"});
  // the modules name themselves
  expect_error([&] { (void)nn::EmbeddingBag(5, 3, std::nullopt, 2, "median"); }, __LINE__, "EmbeddingBag", {"mode must be"});
  expect_error([&] { (void)nn::PixelShuffle(3)(x); }, __LINE__, "PixelShuffle", {"must be divisible by upscale_factor^2 = 9"});
  expect_error([&] { (void)nn::MaxUnpool2d(2).forward(v, i, {9, 9}); }, __LINE__, "MaxUnpool2d", {"output_size [9,9] is not valid"});
  expect_error([&] { (void)nn::Fold({4, 5}, 2)(rnd({1, 12, 11}, 39)); }, __LINE__, "Fold", {"but the input's dim 2 has 11"});
  expect_error([&] { (void)nn::Embedding(5, 3)(from_vector<int64_t>({5})); }, __LINE__, "Embedding", {"index 5", "[0, 5)"});
}
// clang-format on

// ---------------------------------------------------------------- affine_grid and grid_sample

struct AffineGridCase {
  const char* name;
  IntList size;
  bool align_corners;
  std::vector<double> theta, grid, theta_grad;
};

const AffineGridCase kAffineGrid[] = {
#define KILN_AFFINE_GRID_CASES
#include "pytorch_grid_sample_table.inc"
#undef KILN_AFFINE_GRID_CASES
};

struct GridSampleCase {
  const char* name;
  IntList shape;
  std::vector<double> input;
  IntList grid_shape;
  std::vector<double> grid;
  const char* mode;
  const char* padding_mode;
  bool align_corners;
  std::vector<double> out, grad, grid_grad;
};

const GridSampleCase kGridSample[] = {
#include "pytorch_grid_sample_table.inc"
};

TEST(AffineGrid, MatchesPyTorch) {
  for (const AffineGridCase& c : kAffineGrid) {
    const auto k = static_cast<int64_t>(c.size.size()) - 2;
    Tensor theta = from_vector(c.theta, {c.size[0], k, k + 1}).requires_grad_();
    const Tensor g = F::affine_grid(theta, c.size, c.align_corners);
    IntList shape(c.size.begin() + 2, c.size.end()); // [N, (D,) H, W, k]
    shape.insert(shape.begin(), c.size[0]);
    shape.push_back(k);
    ASSERT_EQ(g.shape(), shape) << c.name;
    (g * weights_for(g)).sum().backward();
    expect_close(values(g), c.grid, 1e-14, std::string(c.name) + " values");
    expect_close(values(theta.grad()), c.theta_grad, 1e-12, std::string(c.name) + " theta grad");
  }
}

TEST(GridSample, MatchesPyTorch) {
  for (const GridSampleCase& c : kGridSample) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_(), grid = from_vector(c.grid, c.grid_shape).requires_grad_();
    const Tensor y = F::grid_sample(x, grid, {.mode = c.mode, .padding_mode = c.padding_mode, .align_corners = c.align_corners});
    IntList shape(c.grid_shape.begin(), c.grid_shape.end() - 1); // [N, C, (Do,) Ho, Wo]
    shape.insert(shape.begin() + 1, c.shape[1]);
    ASSERT_EQ(y.shape(), shape) << c.name;
    (y * weights_for(y)).sum().backward();
    expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
    expect_close(values(x.grad()), c.grad, 1e-12, std::string(c.name) + " input grad");
    expect_close(values(grid.grad()), c.grid_grad, 1e-12, std::string(c.name) + " grid grad");
  }
}

TEST(GridSample, GradcheckNaNAndErrors) {
  for (const char* pad : {"zeros", "border", "reflection"}) {
    for (bool align : {false, true}) {
      const F::GridSampleOptions o{.padding_mode = pad, .align_corners = align};
      expect_gradcheck([&](const std::vector<Tensor>& v) { return (F::grid_sample(v[0], v[1], o) * v[2]).sum(); },
                       {rnd({1, 2, 3, 4}, 60), rand({1, 2, 3, 2}, 61, kFloat64) * 2.4 - 1.2, rnd({1, 2, 2, 3}, 62)});
    }
  }
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::affine_grid(v[0], {2, 1, 3, 2}) * v[1]).sum(); },
                   {rnd({2, 2, 3}, 63), rnd({2, 3, 2, 2}, 64)});
  // a NaN coordinate, as PyTorch's CPU kernel: NaN with zeros padding (nearest: 0), clipped to 0 by border
  const Tensor x = rnd({1, 1, 2, 2}, 65);
  const std::vector<double> xv = values(x);
  const Tensor grid = from_vector(std::vector<double>{std::nan(""), 0.0, 0.0, 0.0}, {1, 1, 2, 2});
  const std::vector<double> zeros_pad = values(F::grid_sample(x, grid, {.align_corners = true}));
  EXPECT_TRUE(std::isnan(zeros_pad[0]));
  EXPECT_NEAR(zeros_pad[1], values(x.mean())[0], 1e-15); // the others are unaffected
  EXPECT_EQ(values(F::grid_sample(x, grid, {.mode = "nearest", .align_corners = true}))[0], 0.0);
  EXPECT_NEAR(values(F::grid_sample(x, grid, {.padding_mode = "border", .align_corners = true}))[0], (xv[0] + xv[2]) / 2,
              1e-15);
  const Tensor g = rnd({1, 3, 3, 2}, 66);
  expect_error([&] { (void)F::grid_sample(x, g, {.mode = "bicubc"}); }, __LINE__, "grid_sample", {"expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: 'bicubc'"});
  expect_error([&] { (void)F::grid_sample(x, g, {.padding_mode = "circular"}); }, __LINE__, "grid_sample", {"expected padding_mode to be", "'circular'"});
  expect_error([&] { (void)F::grid_sample(x.flatten(2), g); }, __LINE__, "grid_sample", {"f64[1,1,4]", "4-d or 5-d input"});
  expect_error([&] { (void)F::grid_sample(x, g.flatten(2)); }, __LINE__, "grid_sample", {"f64[1,3,6]", "same number of dimensions"});
  expect_error([&] { (void)F::grid_sample(x, rnd({1, 3, 3, 3}, 71)); }, __LINE__, "grid_sample", {"size 2 in its last dimension", "f64[1,3,3,3]"});
  const Tensor v = rnd({1, 1, 2, 2, 2}, 72);
  expect_error([&] { (void)F::grid_sample(v, rnd({1, 2, 3, 3, 2}, 73)); }, __LINE__, "grid_sample", {"size 3 in its last dimension", "f64[1,1,2,2,2]"});
  expect_error([&] { (void)F::grid_sample(v, rnd({1, 2, 3, 3, 3}, 74), {.mode = "bicubic"}); }, __LINE__, "grid_sample", {"bicubic interpolation only supports 4-d input"});
  expect_error([&] { (void)F::grid_sample(v, rnd({1, 3, 3, 3}, 75)); }, __LINE__, "grid_sample", {"same number of dimensions"});
  expect_error([&] { (void)F::grid_sample(x, rnd({2, 3, 3, 2}, 67)); }, __LINE__, "grid_sample", {"the same batch size"});
  expect_error([&] { (void)F::grid_sample(x, g.to(kFloat32)); }, __LINE__, "grid_sample", {"of one dtype"});
  expect_error([&] { (void)F::affine_grid(rnd({2, 2, 3}, 68), {1, 1, 3, 3}); }, __LINE__, "affine_grid", {"N x 2 x 3", "f64[2,2,3]"});
  expect_error([&] { (void)F::affine_grid(rnd({1, 2, 3}, 69), {1, 1, 2, 3, 3}); }, __LINE__, "affine_grid", {"N x 3 x 4", "[1,1,2,3,3]"});
  expect_error([&] { (void)F::affine_grid(rnd({1, 3, 4}, 76), {1, 1, 3, 3}); }, __LINE__, "affine_grid", {"N x 2 x 3", "f64[1,3,4]"});
  expect_error([&] { (void)F::affine_grid(rnd({1, 3, 4}, 77), {1, 1, 2, 2, 3, 3}); }, __LINE__, "affine_grid", {"2-d or 3-d affine maps", "[1,1,2,2,3,3]"});
  expect_error([&] { (void)F::affine_grid(rnd({1, 2, 3}, 70), {1, 1, 0, 3}); }, __LINE__, "affine_grid", {"non-zero, positive"});
}

TEST(GridSample, Gradcheck3dAndBicubic) {
  for (const char* pad : {"zeros", "border", "reflection"}) {
    for (bool align : {false, true}) {
      const F::GridSampleOptions tri{.padding_mode = pad, .align_corners = align};
      expect_gradcheck([&](const std::vector<Tensor>& v) { return (F::grid_sample(v[0], v[1], tri) * v[2]).sum(); },
                       {rnd({1, 2, 2, 3, 2}, 80), rand({1, 2, 2, 1, 3}, 81, kFloat64) * 2.4 - 1.2, rnd({1, 2, 2, 2, 1}, 82)});
      const F::GridSampleOptions cub{.mode = "bicubic", .padding_mode = pad, .align_corners = align};
      expect_gradcheck([&](const std::vector<Tensor>& v) { return (F::grid_sample(v[0], v[1], cub) * v[2]).sum(); },
                       {rnd({1, 2, 3, 4}, 83), rand({1, 2, 3, 2}, 84, kFloat64) * 2.4 - 1.2, rnd({1, 2, 2, 3}, 85)});
    }
  }
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::affine_grid(v[0], {2, 1, 2, 3, 2}) * v[1]).sum(); },
                   {rnd({2, 3, 4}, 86), rnd({2, 2, 3, 2, 3}, 87)});
}

// NaN coordinates, with PyTorch 1.13's CPU values (printed by torch for these inputs): its 3-d kernel clips a NaN
// to the far border and samples 0 at one with zeros padding; bicubic gives NaN whatever the padding.
TEST(GridSample, NaN3dAndBicubicAsPyTorch) {
  const double nan = std::nan("");
  const Tensor v = arange(0, 8, 1, kFloat64).reshape({1, 1, 2, 2, 2});
  const Tensor g = from_vector(std::vector<double>{nan, 0, 0, 0, nan, 0, 0, 0, nan, 0, 0, 0}, {1, 1, 1, 4, 3});
  const std::map<std::string, std::vector<double>> want = {
      {"bilinear zeros", {0, 0, 0, 3.5}},     {"bilinear border", {4, 4.5, 5.5, 3.5}},
      {"bilinear reflection", {4, 4.5, 5.5, 3.5}}, {"nearest zeros", {0, 0, 0, 7}},
      {"nearest border", {7, 7, 7, 7}},       {"nearest reflection", {7, 7, 7, 7}}};
  for (const auto& [what, expected] : want) {
    const auto space = what.find(' ');
    const F::GridSampleOptions o{.mode = what.substr(0, space), .padding_mode = what.substr(space + 1), .align_corners = true};
    EXPECT_EQ(values(F::grid_sample(v, g, o)), expected) << what;
  }
  const Tensor x = arange(0, 16, 1, kFloat64).reshape({1, 1, 4, 4});
  const Tensor g2 = from_vector(std::vector<double>{nan, 0, 0, nan, 0, 0}, {1, 1, 3, 2});
  for (const char* pad : {"zeros", "border", "reflection"}) {
    const std::vector<double> y = values(F::grid_sample(x, g2, {.mode = "bicubic", .padding_mode = pad, .align_corners = true}));
    EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1])) << pad;
    EXPECT_NEAR(y[2], 7.5, 1e-13) << pad;
  }
}

TEST(GridSample, ZeroSizeGrid) {
  const Tensor x = rnd({2, 3, 4, 5}, 88).requires_grad_(), v = rnd({2, 3, 2, 4, 5}, 89).requires_grad_();
  const Tensor y = F::grid_sample(x, zeros({2, 0, 3, 2}, kFloat64), {.mode = "bicubic"});
  EXPECT_EQ(y.shape(), (IntList{2, 3, 0, 3}));
  const Tensor z = F::grid_sample(v, zeros({2, 1, 0, 3, 3}, kFloat64));
  EXPECT_EQ(z.shape(), (IntList{2, 3, 1, 0, 3}));
  (y.sum() + z.sum()).backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>(120, 0.0));
  EXPECT_EQ(values(v.grad()), std::vector<double>(240, 0.0));
}

// A spatial transformer's sampling in one program, and the gradients of its loss.
std::vector<Tensor> transformer_program(const Tensor& theta, const Tensor& img) {
  const Tensor grid = F::affine_grid(theta, {2, 2, 3, 4});
  const Tensor a = F::grid_sample(img, grid, {.padding_mode = "reflection"});
  const Tensor b = F::grid_sample(img, grid * 1.3, {.mode = "nearest", .padding_mode = "border", .align_corners = true});
  const Tensor c = F::grid_sample(img, grid * 1.2, {.mode = "bicubic", .padding_mode = "reflection", .align_corners = true});
  const Tensor loss = (a * a).sum() + (a * b).sum() + (c * a).sum();
  std::vector<Tensor> out = {a, b, c, loss};
  for (const Tensor& gr : grad({loss}, {theta, img})) out.push_back(gr);
  return out;
}

// A 3-d spatial transformer's sampling in one program, and the gradients of its loss.
std::vector<Tensor> transformer_3d_program(const Tensor& theta, const Tensor& vol) {
  const Tensor grid = F::affine_grid(theta, {2, 2, 2, 3, 4}, true);
  const Tensor a = F::grid_sample(vol, grid, {.padding_mode = "border"});
  const Tensor b = F::grid_sample(vol, grid * 1.3, {.mode = "nearest", .padding_mode = "reflection"});
  const Tensor loss = (a * a).sum() + (a * b).sum();
  std::vector<Tensor> out = {a, b, loss};
  for (const Tensor& gr : grad({loss}, {theta, vol})) out.push_back(gr);
  return out;
}

TEST(GridSample, FusedUnfusedAndCompiledAgree3d) {
  expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& v) { return transformer_3d_program(v[0], v[1]); },
      [](uint64_t seed) {
        return std::vector<Tensor>{randn({2, 3, 4}, seed).requires_grad_(), randn({2, 2, 3, 4, 3}, seed + 1).requires_grad_()};
      });
}

TEST(GridSample, FusedUnfusedAndCompiledAgree) {
  expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& v) { return transformer_program(v[0], v[1]); },
      [](uint64_t seed) {
        return std::vector<Tensor>{randn({2, 2, 3}, seed).requires_grad_(), randn({2, 2, 5, 4}, seed + 1).requires_grad_()};
      });
}

} // namespace
} // namespace kiln

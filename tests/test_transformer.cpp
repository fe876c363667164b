// Attention and transformer layers (issue 15): scaled_dot_product_attention, MultiheadAttention and
// TransformerEncoderLayer against compositions of primitives and against PyTorch's numbers
// (tests/pytorch_attention_table.inc), gradcheck in f64, error messages; clip_grad_norm_ and the
// warm-up cosine schedule by hand; the character-level GPT of examples/gpt.h trains.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "examples/gpt.h"
#include "kiln/kiln.h"
#include "error_of.h"
#include "table_checks.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Equal within 1e-10 relative to max(1, |want|): PyTorch's f64 arithmetic up to the order of sums.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                  double tol = 1e-10) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
}

// Bitwise equal.
void expect_same(const Tensor& got, const Tensor& want, const std::string& what = "") {
  const std::vector<double> g = values(got), w = values(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], w[i]) << what << " [" << i << "]";
}

// u[i] = 1 + i % 5 shaped like t (the table's weights of sum(out * u)).
Tensor weights_u(const Tensor& t) {
  std::vector<double> u(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < u.size(); ++i) u[i] = 1.0 + static_cast<double>(i % 5);
  return from_vector(u, t.shape());
}

// A mask of the table: 1 bool (from 0/1), 2 float.
Tensor table_mask(int kind, const IntList& shape, const std::vector<double>& v) {
  if (kind == 0) return Tensor();
  Tensor m = from_vector(v, shape);
  return kind == 1 ? m != 0.0 : m;
}

void expect_gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.ok) << r.report;
}

// Runs f, which must throw kiln::Error for `op` whose message holds each of `parts` and this file's `line`.
void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts) {
  test::expect_error_at(f, "test_transformer.cpp", line, op, parts);
}

// ---------------------------------------------------------------- the PyTorch table

struct SdpaCase {
  const char* name;
  IntList q_shape, k_shape, v_shape;
  std::vector<double> q, k, v;
  int mask_kind;
  IntList mask_shape;
  std::vector<double> mask;
  bool causal;
  double scale; // 0: the default
  std::vector<double> out, dq, dk, dv;
};

using test::NamedValues;

struct MhaCase {
  const char* name;
  int64_t E, H;
  bool bias, batch_first, self_attention, need_weights, average;
  IntList q_shape, k_shape;
  std::vector<NamedValues> params;
  std::vector<double> query, key, value;
  int kpm_kind;
  IntList kpm_shape;
  std::vector<double> kpm;
  int am_kind;
  IntList am_shape;
  std::vector<double> am;
  std::vector<double> out, weights, dquery, dkey, din_proj_weight;
};

struct LayerCase {
  const char* name;
  int64_t d_model, nhead, dim_feedforward;
  const char* activation;
  bool batch_first, norm_first, causal;
  IntList src_shape;
  std::vector<NamedValues> params;
  std::vector<double> src, out, dsrc;
};

#define KILN_SDPA_TABLE
const SdpaCase kSdpa[] = {
#include "pytorch_attention_table.inc"
};
#undef KILN_SDPA_TABLE
#define KILN_MHA_TABLE
const MhaCase kMha[] = {
#include "pytorch_attention_table.inc"
};
#undef KILN_MHA_TABLE
#define KILN_LAYER_TABLE
const LayerCase kLayers[] = {
#include "pytorch_attention_table.inc"
};
#undef KILN_LAYER_TABLE

using test::load_params;

// The causal keep-mask [L, S] (key j <= query i), built independently of kiln's attention.
Tensor causal_keep(int64_t L, int64_t S) { return tril(ones({L, S}, kFloat64)) != 0.0; }

} // namespace

// ---------------------------------------------------------------- scaled_dot_product_attention

TEST(Sdpa, MatchesPyTorchReference) {
  for (const SdpaCase& c : kSdpa) {
    SCOPED_TRACE(c.name);
    Tensor q = from_vector(c.q, c.q_shape).requires_grad_(), k = from_vector(c.k, c.k_shape).requires_grad_(),
           v = from_vector(c.v, c.v_shape).requires_grad_();
    const Tensor mask = table_mask(c.mask_kind, c.mask_shape, c.mask);
    const Tensor out = F::scaled_dot_product_attention(q, k, v, mask, 0, c.causal,
                                                       c.scale == 0 ? std::nullopt : std::optional<double>(c.scale));
    (out * weights_u(out)).sum().backward();
    expect_close(values(out), c.out, "out");
    expect_close(values(q.grad()), c.dq, "dq");
    expect_close(values(k.grad()), c.dk, "dk");
    expect_close(values(v.grad()), c.dv, "dv");
  }
}

// The composite (what KILN_FUSION=0 runs; tests/test_attention.cpp checks the fused kernel against it).
TEST(Sdpa, EqualsTheCompositionFromPrimitivesBitwise) {
  const bool fusion = options().fusion;
  options().fusion = false;
  const Tensor q = randn({2, 3, 7, 8}, 1), k = randn({2, 3, 9, 8}, 2), v = randn({2, 3, 9, 5}, 3);
  const Tensor s = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(8.0));
  expect_same(F::scaled_dot_product_attention(q, k, v), matmul(F::softmax(s, -1), v), "plain");
  // Causal: -inf above the diagonal; no row is empty, so the plain softmax.
  const Tensor qs = randn({2, 7, 8}, 4), ks = randn({2, 7, 8}, 5), vs = randn({2, 7, 4}, 6);
  const Tensor sc = masked_fill(matmul(qs, ks.transpose(-2, -1)) * 0.25, logical_not(causal_keep(7, 7)), -kInf);
  expect_same(F::scaled_dot_product_attention(qs, ks, vs, {}, 0, true, 0.25), matmul(F::softmax(sc, -1), vs), "causal");
  // A bool mask with no empty row gives softmax's values too (the safe softmax only changes empty rows).
  const Tensor keep = logical_or(rand({2, 7, 7}, 7) > 0.5, causal_keep(7, 7));
  const Tensor sm = masked_fill(matmul(qs, ks.transpose(-2, -1)) * 0.25, logical_not(keep), -kInf);
  expect_same(F::scaled_dot_product_attention(qs, ks, vs, keep, 0, false, 0.25), matmul(F::softmax(sm, -1), vs), "mask");
  options().fusion = fusion;
}

TEST(Sdpa, FullyMaskedRowsGiveZerosAndZeroGradients) {
  Tensor q = randn({1, 3, 4}, 8, kFloat64).requires_grad_(), k = randn({1, 5, 4}, 9, kFloat64).requires_grad_(),
         v = randn({1, 5, 2}, 10, kFloat64).requires_grad_();
  std::vector<bool> keep(15, true);
  for (int j = 0; j < 5; ++j) keep[5 + j] = false; // row 1 sees no key
  std::vector<int64_t> keep_i(keep.begin(), keep.end());
  const Tensor mask = from_vector(keep_i, {3, 5}) != 0;
  const Tensor float_mask = masked_fill(zeros({3, 5}, kFloat64), logical_not(mask), -kInf);
  for (const Tensor& m : {mask, float_mask}) {
    q.zero_grad();
    const Tensor out = F::scaled_dot_product_attention(q, k, v, m);
    out.sum().backward();
    const std::vector<double> o = values(out), g = values(q.grad());
    for (int i = 0; i < 6; ++i) EXPECT_FALSE(std::isnan(o[static_cast<size_t>(i)]));
    EXPECT_EQ(o[2], 0.0);
    EXPECT_EQ(o[3], 0.0);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(g[static_cast<size_t>(4 + j)], 0.0); // row 1's query gets no gradient
    for (double x : values(k.grad())) EXPECT_FALSE(std::isnan(x));
  }
}

TEST(Sdpa, GradcheckInF64WithMasks) {
  const Tensor q = randn({2, 3, 4}, 11, kFloat64), k = randn({2, 5, 4}, 12, kFloat64), v = randn({2, 5, 3}, 13, kFloat64);
  const Tensor keep = logical_or(rand({3, 5}, 14) > 0.5, arange(5) == 0);
  expect_gradcheck([&](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{F::scaled_dot_product_attention(x[0], x[1], x[2], keep)};
  }, {q, k, v});
  expect_gradcheck([&](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{F::scaled_dot_product_attention(x[0], x[1], x[2], {}, 0, true, 0.3)};
  }, {q, k, v});
  const Tensor additive = randn({2, 3, 5}, 15, kFloat64);
  expect_gradcheck([&](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{F::scaled_dot_product_attention(x[0], x[1], x[2], x[3])};
  }, {q, k, v, additive});
}

TEST(Sdpa, DropoutDropsAndRescalesWeights) {
  nn::manual_seed(3);
  // With v = ones, each output is the sum of a row's kept weights, scaled by 1 / (1 - p).
  const Tensor q = randn({64, 8, 4}, 16), k = randn({64, 8, 4}, 17), v = ones({64, 8, 1});
  const std::vector<double> o = values(F::scaled_dot_product_attention(q, k, v, {}, 0.5));
  double mean = 0;
  int ones_seen = 0;
  for (double x : o) mean += x, ones_seen += std::fabs(x - 1.0) < 1e-6;
  mean /= static_cast<double>(o.size());
  EXPECT_NEAR(mean, 1.0, 0.1);
  EXPECT_LT(ones_seen, 10); // almost every row lost some weight or gained by the rescaling
  // A fresh mask per call (the seed sequence advances).
  const std::vector<double> o2 = values(F::scaled_dot_product_attention(q, k, v, {}, 0.5));
  EXPECT_NE(o, o2);
}

TEST(Sdpa, NoKeysGiveZerosAsPyTorch) {
  // S = 0: softmax over no keys, times no values: zeros of [..., L, Ev] (PyTorch's math form; a
  // MultiheadAttention over an empty sequence did so already), with zero gradients for q.
  for (bool causal : {false, true}) {
    const Tensor q = from_vector(std::vector<double>(2 * 4 * 8, 0.5), {2, 4, 8}).requires_grad_();
    const Tensor k = zeros({2, 0, 8}, kFloat64).requires_grad_(), v = zeros({2, 0, 3}, kFloat64).requires_grad_();
    const Tensor out = F::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
    EXPECT_EQ(out.shape(), (IntList{2, 4, 3}));
    EXPECT_EQ(values(out), std::vector<double>(24, 0.0));
    const std::vector<Tensor> g = grad({(out * 2.0).sum()}, {q, k, v}, {}, /*allow_unused=*/true);
    EXPECT_EQ(values(g[0]), std::vector<double>(64, 0.0));
    EXPECT_EQ(g[1].shape(), (IntList{2, 0, 8}));
  }
}

TEST(Sdpa, ErrorsNameTheShapesAndTheLine) {
  const Tensor q = zeros({2, 4, 8}), k = zeros({2, 5, 8}), v = zeros({2, 5, 3});
  const std::string op = "scaled_dot_product_attention";
  expect_error([&] { F::scaled_dot_product_attention(q, zeros({2, 5, 7}), v); }, __LINE__, op, {"same last dim E", "f32[2,5,7]"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, zeros({2, 6, 3})); }, __LINE__, op, {"number S of rows"});
  expect_error([&] { F::scaled_dot_product_attention(zeros({8}), k, v); }, __LINE__, op, {"[..., L, E]"});
  expect_error([&] { F::scaled_dot_product_attention(zeros({3, 4, 8}), k, v); }, __LINE__, op, {"do not broadcast"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, zeros({4, 6}) > 0); }, __LINE__, op,
               {"attn_mask must broadcast", "[2, 4, 5]", "bool[4,6]"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, zeros({4, 5}, kInt64)); }, __LINE__, op, {"bool or of the query's dtype"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, zeros({4, 5}) > 0, 0, true); }, __LINE__, op, {"not both"});
  expect_error([&] { F::scaled_dot_product_attention(q, k, v, {}, 1.5); }, __LINE__, op, {"dropout_p", "[0, 1]"});
  expect_error([&] { F::scaled_dot_product_attention(zeros({2, 4, 8}, kInt64), k, v); }, __LINE__, op, {"one floating dtype"});
}

// dropout_p = 1 (PyTorch takes [0, 1]) drops every weight: the output is zeros, and so is each gradient.
// torch: F._scaled_dot_product_attention(q, k, v, None, 1.0, True, False) -> zeros; q.grad, k.grad, v.grad zeros.
TEST(Sdpa, DropoutOfOneGivesZeros) {
  for (bool causal : {false, true}) {
    std::vector<Tensor> in{randn({2, 3, 4}, 1).requires_grad_(), randn({2, 5, 4}, 2).requires_grad_(),
                           randn({2, 5, 2}, 3).requires_grad_()};
    const Tensor out = F::scaled_dot_product_attention(in[0], in[1], in[2], {}, 1.0, causal);
    EXPECT_EQ(out.to_vector<float>(), std::vector<float>(12, 0.0f)) << causal;
    (out * randn({2, 3, 2}, 4)).sum().backward();
    for (const Tensor& x : in) EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(x.numel(), 0.0f)) << causal;
  }
}

// ---------------------------------------------------------------- MultiheadAttention

TEST(MultiheadAttention, MatchesPyTorch) {
  for (const MhaCase& c : kMha) {
    SCOPED_TRACE(c.name);
    nn::MultiheadAttention mha(c.E, c.H, 0.0, c.bias, c.batch_first);
    mha.to(kFloat64);
    load_params(mha, c.params);
    Tensor query = from_vector(c.query, c.q_shape).requires_grad_();
    Tensor key = c.self_attention ? query : from_vector(c.key, c.k_shape).requires_grad_();
    Tensor value = c.self_attention ? query : from_vector(c.value, c.k_shape);
    const Tensor kpm = table_mask(c.kpm_kind, c.kpm_shape, c.kpm), am = table_mask(c.am_kind, c.am_shape, c.am);
    auto [out, w] = mha.forward(query, key, value, kpm, c.need_weights, am, c.average);
    (out * weights_u(out)).sum().backward();
    expect_close(values(out), c.out, "out");
    EXPECT_EQ(w.defined(), c.need_weights);
    if (c.need_weights) expect_close(values(w), c.weights, "weights");
    expect_close(values(query.grad()), c.dquery, "dquery");
    if (!c.self_attention) expect_close(values(key.grad()), c.dkey, "dkey");
    expect_close(values(mha.in_proj_weight.grad()), c.din_proj_weight, "din_proj_weight");
  }
}

TEST(MultiheadAttention, ShapesAndStateDictNames) {
  nn::manual_seed(0);
  nn::MultiheadAttention seq(16, 4), bf(16, 4, 0.0, true, true);
  std::vector<std::string> names;
  for (const auto& [n, t] : seq.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(seq.in_proj_weight.shape(), (IntList{48, 16}));
  const Tensor x = randn({7, 3, 16}, 1), y = randn({5, 3, 16}, 2); // [L, N, E], [S, N, E]
  auto [o, w] = seq.forward(x, y, y);
  EXPECT_EQ(o.shape(), (IntList{7, 3, 16}));
  EXPECT_EQ(w.shape(), (IntList{3, 7, 5}));
  auto [o2, w2] = bf.forward(x.transpose(0, 1), y.transpose(0, 1), y.transpose(0, 1), {}, true, {}, false);
  EXPECT_EQ(o2.shape(), (IntList{3, 7, 16}));
  EXPECT_EQ(w2.shape(), (IntList{3, 4, 7, 5}));
  auto [o3, w3] = seq.forward(x, x, x, {}, false);
  EXPECT_FALSE(w3.defined());
  // Unbatched [L, E].
  auto [o4, w4] = seq.forward(randn({7, 16}, 3), randn({5, 16}, 4), randn({5, 16}, 5));
  EXPECT_EQ(o4.shape(), (IntList{7, 16}));
  EXPECT_EQ(w4.shape(), (IntList{7, 5}));
  // Averaged weights are rows of a distribution.
  for (double s : values(w.sum({-1}))) EXPECT_NEAR(s, 1.0, 1e-5);
}

TEST(MultiheadAttention, BatchFirstEqualsSequenceFirst) {
  nn::manual_seed(1);
  nn::MultiheadAttention seq(8, 2), bf(8, 2, 0.0, true, true);
  for (const auto& [a, b] : std::vector<std::pair<Tensor, Tensor>>{{seq.in_proj_weight, bf.in_proj_weight},
                                                                     {seq.in_proj_bias, bf.in_proj_bias},
                                                                     {seq.out_proj->weight, bf.out_proj->weight},
                                                                     {seq.out_proj->bias, bf.out_proj->bias}})
    Tensor(b).assign(a);
  const Tensor x = randn({5, 3, 8}, 6);
  auto [o1, w1] = seq.forward(x, x, x, {}, true, {}, true, /*is_causal=*/true);
  auto [o2, w2] = bf.forward(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), {}, true, {}, true, true);
  expect_same(o2.transpose(0, 1), o1);
  expect_same(w2, w1);
  // is_causal alone is the causal bool mask (true above the diagonal: ignore).
  auto [o3, w3] = seq.forward(x, x, x, {}, true, logical_not(causal_keep(5, 5)));
  expect_same(o3, o1);
  expect_same(w3, w1);
}

// dropout = 1 (PyTorch takes [0, 1]) drops every attention weight in training: the output is out_proj's bias.
// torch: m = nn.MultiheadAttention(4, 2, dropout=1.0, batch_first=True); m.out_proj.bias = [0.5, -1, 2, 0.25];
//        m(x, x, x) for x [2, 3, 4] -> the bias in every row, weights [2, 3, 3] zeros.
TEST(MultiheadAttention, DropoutOfOneLeavesTheOutputBias) {
  nn::MultiheadAttention mha(4, 2, 1.0, true, true);
  Tensor(mha.out_proj->bias).assign(from_vector<float>({0.5, -1, 2, 0.25}));
  const Tensor x = randn({2, 3, 4}, 9);
  std::vector<float> bias_rows;
  for (int i = 0; i < 6; ++i) bias_rows.insert(bias_rows.end(), {0.5f, -1.0f, 2.0f, 0.25f});
  for (bool need_weights : {true, false}) {
    auto [out, w] = mha.forward(x, x, x, {}, need_weights);
    EXPECT_EQ(out.to_vector<float>(), bias_rows) << need_weights;
    if (need_weights) EXPECT_EQ(w.to_vector<float>(), std::vector<float>(18, 0.0f));
  }
  mha.eval();
  EXPECT_NE(mha.forward(x, x, x).first.to_vector<float>(), bias_rows);
  expect_error([] { nn::MultiheadAttention(4, 2, 1.5); }, __LINE__, "MultiheadAttention", {"dropout", "[0, 1]"});
}

TEST(MultiheadAttention, GradcheckInF64) {
  nn::manual_seed(2);
  nn::MultiheadAttention mha(6, 2, 0.0, true, true);
  mha.to(kFloat64);
  const Tensor q = randn({2, 3, 6}, 7, kFloat64), kv = randn({2, 4, 6}, 8, kFloat64);
  const Tensor padding = from_vector(std::vector<int64_t>{0, 0, 1, 0, 0, 1, 0, 1}, {2, 4}) != 0;
  expect_gradcheck([&](const std::vector<Tensor>& x) {
    auto [o, w] = mha.forward(x[0], x[1], x[2], padding);
    return std::vector<Tensor>{o, w};
  }, {q, kv, kv});
  // The parameters' gradients are checked against PyTorch's in MatchesPyTorch.
}

TEST(MultiheadAttention, Errors) {
  expect_error([] { nn::MultiheadAttention(10, 3); }, __LINE__, "MultiheadAttention", {"divisible by num_heads"});
  nn::MultiheadAttention mha(8, 2);
  const Tensor x = zeros({5, 2, 8});
  expect_error([&] { mha.forward(zeros({5, 2, 6}), x, x); }, __LINE__, "MultiheadAttention", {"E = embed_dim = 8", "f32[5,2,6]"});
  expect_error([&] { mha.forward(x, x, x, zeros({2, 4}) > 0); }, __LINE__, "MultiheadAttention",
               {"key_padding_mask must be [2, 5]", "bool[2,4]"});
  expect_error([&] { mha.forward(x, x, x, {}, true, zeros({5, 4}) > 0); }, __LINE__, "MultiheadAttention",
               {"attn_mask must be [5, 5] or [4, 5, 5]"});
  expect_error([&] { mha.forward(x, zeros({5, 3, 8}), zeros({5, 3, 8})); }, __LINE__, "MultiheadAttention", {"batch size"});
}

// ---------------------------------------------------------------- TransformerEncoderLayer

TEST(TransformerEncoderLayer, MatchesPyTorchPreAndPostNorm) {
  for (const LayerCase& c : kLayers) {
    SCOPED_TRACE(c.name);
    nn::TransformerEncoderLayer layer(c.d_model, c.nhead,
                                      {.dim_feedforward = c.dim_feedforward, .dropout = 0.0, .activation = c.activation,
                                       .batch_first = c.batch_first, .norm_first = c.norm_first});
    layer.to(kFloat64);
    load_params(layer, c.params);
    Tensor src = from_vector(c.src, c.src_shape).requires_grad_();
    const int64_t L = c.src_shape[c.batch_first ? 1 : 0];
    const Tensor mask = c.causal ? logical_not(causal_keep(L, L)) : Tensor();
    const Tensor out = layer.forward(src, mask);
    (out * weights_u(out)).sum().backward();
    expect_close(values(out), c.out, "out");
    expect_close(values(src.grad()), c.dsrc, "dsrc");
  }
}

TEST(TransformerEncoderLayer, EqualsItsCompositionBitwise) {
  for (bool norm_first : {false, true}) {
    nn::manual_seed(4);
    nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 12, .dropout = 0.0, .batch_first = true,
                                             .norm_first = norm_first});
    const Tensor x = randn({2, 5, 8}, 10);
    auto sa = [&](const Tensor& t) { return layer.self_attn->forward(t, t, t, {}, false, {}, true, true).first; };
    auto ff = [&](const Tensor& t) { return layer.linear2->forward(relu(layer.linear1->forward(t))); };
    Tensor want;
    if (norm_first) {
      const Tensor h = x + sa(layer.norm1->forward(x));
      want = h + ff(layer.norm2->forward(h));
    } else {
      const Tensor h = layer.norm1->forward(x + sa(x));
      want = layer.norm2->forward(h + ff(h));
    }
    expect_same(layer.forward(x, {}, {}, true), want, norm_first ? "pre-norm" : "post-norm");
  }
}

TEST(TransformerEncoderLayer, RunsInsideSequentialWithoutMasks) {
  nn::manual_seed(6);
  auto a = std::make_shared<nn::TransformerEncoderLayer>(8, 2, nn::TransformerEncoderLayer::Options{.dropout = 0.0});
  auto b = std::make_shared<nn::TransformerEncoderLayer>(8, 2, nn::TransformerEncoderLayer::Options{.dropout = 0.0});
  nn::Sequential seq(a, b);
  const Tensor x = randn({5, 2, 8}, 12);
  expect_same(seq.forward(x), b->forward(a->forward(x)));
  EXPECT_EQ(seq.named_parameters().front().first, "0.self_attn.in_proj_weight");
}

TEST(TransformerEncoderLayer, GradcheckInF64AndNames) {
  nn::manual_seed(5);
  nn::TransformerEncoderLayer layer(4, 2, {.dim_feedforward = 6, .dropout = 0.0, .activation = "gelu",
                                           .batch_first = true, .norm_first = true});
  layer.to(kFloat64);
  expect_gradcheck([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{layer.forward(x[0], {}, {}, true)}; },
                   {randn({2, 3, 4}, 11, kFloat64)});
  std::vector<std::string> names;
  for (const auto& [n, t] : layer.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                                             "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                                             "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"}));
  expect_error([] { nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}); }, __LINE__, "TransformerEncoderLayer",
               {"activation must be"});
}

// ---------------------------------------------------------------- clip_grad_norm_ and the schedule

TEST(ClipGradNorm, ScalesByTheTotalNormAsComputedByHand) {
  Tensor a = from_vector(std::vector<double>{3, 4}).requires_grad_();
  Tensor b = from_vector(std::vector<double>{12}, {1, 1}).requires_grad_();
  Tensor c = from_vector(std::vector<double>{1}).requires_grad_(); // no gradient: skipped
  (a * from_vector(std::vector<double>{3, 4})).sum().backward(); // grad a = [3, 4]
  (b * 12.0).sum().backward();                                   // grad b = [[12]]
  const double total = std::sqrt(9.0 + 16.0 + 144.0);            // 13
  const Tensor n = nn::utils::clip_grad_norm_({a, b, c}, 6.5);
  EXPECT_DOUBLE_EQ(n.item<double>(), total);
  const double coef = 6.5 / (13.0 + 1e-6);
  expect_close(values(a.grad()), {3 * coef, 4 * coef}, "a", 1e-15);
  expect_close(values(b.grad()), {12 * coef}, "b", 1e-15);
  EXPECT_FALSE(c.grad().defined());
  // Below the limit: unchanged. Infinity norm: the largest |g|; norm 1: the sum of |g|.
  const Tensor n2 = nn::utils::clip_grad_norm_({a, b}, 100.0);
  expect_close(values(a.grad()), {3 * coef, 4 * coef}, "a unchanged", 1e-15);
  EXPECT_NEAR(n2.item<double>(), 6.5, 1e-6);
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 100.0, kInf).item<double>(), 12 * coef, 1e-12);
  EXPECT_NEAR(nn::utils::clip_grad_norm_({a, b}, 100.0, 1.0).item<double>(), 19 * coef, 1e-12);
  expect_error([&] { nn::utils::clip_grad_norm_({a}, 1.0, 0.5); }, __LINE__, "clip_grad_norm_", {"norm_type"});
}

TEST(WarmupCosineLR, WarmsUpLinearlyThenDecays) {
  Tensor p = zeros({1}).requires_grad_();
  optim::AdamW opt({p}, {.lr = 1.0});
  optim::WarmupCosineLR s(opt, 4, 14, 0.1);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.25); // the first step already warms up
  for (int64_t e : {0, 1, 2, 3}) EXPECT_DOUBLE_EQ(s.lr_at(e), static_cast<double>(e + 1) / 4);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 1.0);
  EXPECT_NEAR(s.lr_at(9), 0.1 + 0.9 * 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(14), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(20), 0.1);
  s.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.5);
  EXPECT_THROW(optim::WarmupCosineLR(opt, 5, 5), Error);
}

// ---------------------------------------------------------------- the GPT

namespace {

bool have_fortunes() { return std::filesystem::exists(std::string(gpt::kFortunesDir) + "/fortunes"); }

// One training step of the GPT job (examples/gpt.cpp's): loss, backward, clipping, AdamW.
Tensor gpt_step(gpt::GPT& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = gpt::loss(model(x), y);
  loss.backward();
  nn::utils::clip_grad_norm_(model.parameters(), 1.0);
  opt.step();
  return loss.detach();
}

} // namespace

// Compiled and eager steps agree bitwise, with fusion on and off. Fused against unfused, the
// attention (its dropout too: the same mask) is the fused kernel against the composite, which differ
// within the README's bound (Attention.*, AttentionDropout.*): the losses agree to 1e-5.
TEST(Gpt, CompiledAndEagerStepsAgreeBitwiseAndUnfusedClosely) {
  const std::vector<int64_t> data = [] {
    std::vector<int64_t> d(500);
    for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<int64_t>((i * 7 + i / 3) % 11);
    return d;
  }();
  auto run = [&](bool compiled, bool fusion) {
    options().fusion = fusion;
    nn::manual_seed(0);
    gpt::GPT model({.vocab = 11, .layers = 2, .heads = 2, .dim = 16, .context = 8, .dropout = 0.1});
    optim::AdamW opt(model.parameters(), {.lr = 1e-2});
    CompiledFunction step = compile([&](const std::vector<Tensor>& xy) {
      return std::vector<Tensor>{gpt_step(model, opt, xy[0], xy[1])};
    });
    std::vector<float> losses;
    for (uint64_t i = 0; i < 4; ++i) {
      auto [x, y] = gpt::windows(data, 3, 8, 1, i);
      losses.push_back((compiled ? step({x, y})[0] : gpt_step(model, opt, x, y)).item<float>());
    }
    options().fusion = true;
    return losses;
  };
  const std::vector<float> eager = run(false, true), unfused = run(false, false);
  EXPECT_EQ(run(true, true), eager);
  EXPECT_EQ(run(true, false), unfused);
  ASSERT_EQ(unfused.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_NEAR(unfused[i], eager[i], 1e-5 * std::fabs(eager[i])) << "step " << i;
  EXPECT_LT(eager.back(), eager.front());
}

TEST(Gpt, TrainsOnASliceOfTheFortunes) {
  if (!have_fortunes()) GTEST_SKIP() << "Debian's fortunes package is not installed";
  const std::string text = gpt::read_corpus().substr(0, 200000);
  const gpt::Vocab vocab(text);
  const std::vector<int64_t> ids = vocab.encode(text);
  const std::vector<int64_t> train(ids.begin(), ids.begin() + 180000), val(ids.begin() + 180000, ids.end());
  nn::manual_seed(0);
  gpt::GPT model({.vocab = vocab.size(), .layers = 2, .heads = 2, .dim = 32, .context = 32, .dropout = 0.0});
  optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  optim::WarmupCosineLR schedule(opt, 20, 800, 3e-4);
  CompiledFunction step = compile([&](const std::vector<Tensor>& xy) {
    return std::vector<Tensor>{gpt_step(model, opt, xy[0], xy[1])};
  });
  const double before = gpt::evaluate(model, val, 16, 4, 99);
  for (uint64_t i = 0; i < 800; ++i) {
    auto [x, y] = gpt::windows(train, 16, 32, 0, i);
    step({x, y});
    schedule.step();
  }
  const double after = gpt::evaluate(model, val, 16, 4, 99);
  std::cout << "GPT val loss " << before << " -> " << after << " nats/char (vocab " << vocab.size() << ")\n";
  // Characters drawn by their frequencies alone cost about 2.9 nats each (English's ~4.1 bits):
  // below 2.55 the model uses the context.
  EXPECT_LT(after, 2.55);
}

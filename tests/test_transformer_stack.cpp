// The transformer stacks (issue 15's modules, completed): TransformerDecoderLayer,
// TransformerEncoder, TransformerDecoder and nn::Transformer against torch.nn's modules
// (tests/pytorch_transformer_stack_table.inc, from tests/tools/pytorch_transformer_stack_table.py),
// their compositions, the stacks' copies, gradcheck in f64, fused = unfused = compile(), errors, and a
// small sequence-to-sequence model that learns to copy.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "error_of.h"
#include "kiln/kiln.h"
#include "table_checks.h"

using namespace kiln;
using namespace kiln::test;
namespace F = kiln::nn::functional;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity(); // in the table's masks

struct NamedMask {
  const char* name;
  int kind; // 1 bool (true: ignore), 2 float (added)
  IntList shape;
  std::vector<double> values;
};

struct StackCase {
  const char* name;
  std::string kind; // decoder_layer, encoder, decoder, transformer
  int64_t d_model, nhead, dim_feedforward, encoder_layers, decoder_layers;
  const char* activation;
  bool batch_first, norm_first;
  IntList a_shape;
  std::vector<double> a;
  IntList b_shape;
  std::vector<double> b;
  std::vector<NamedMask> masks;
  std::vector<NamedValues> params;
  std::vector<double> out, da, db;
};

const StackCase kCases[] = {
#include "pytorch_transformer_stack_table.inc"
};

void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts) {
  test::expect_error_at(f, "test_transformer_stack.cpp", line, op, parts);
}

Tensor mask_of(const StackCase& c, const std::string& name) {
  for (const NamedMask& m : c.masks)
    if (name == m.name) {
      const Tensor t = from_vector(m.values, m.shape);
      return m.kind == 1 ? t != 0.0 : t;
    }
  return Tensor();
}

nn::TransformerLayerOptions layer_options(int64_t ff, const std::string& activation, bool batch_first,
                                          bool norm_first) {
  return {.dim_feedforward = ff, .dropout = 0.0, .activation = activation, .batch_first = batch_first,
          .norm_first = norm_first};
}

// The case's module (f64, the table's parameters) applied to a and b.
Tensor run_case(const StackCase& c, const Tensor& a, const Tensor& b) {
  const nn::TransformerLayerOptions o = layer_options(c.dim_feedforward, c.activation, c.batch_first, c.norm_first);
  auto m = [&](nn::Module& module) -> nn::Module& {
    module.to(kFloat64);
    load_params(module, c.params);
    return module;
  };
  if (c.kind == "decoder_layer") {
    nn::TransformerDecoderLayer layer(c.d_model, c.nhead, o);
    m(layer);
    return layer.forward(a, b, mask_of(c, "tgt_mask"), mask_of(c, "memory_mask"), mask_of(c, "tgt_key_padding_mask"),
                         mask_of(c, "memory_key_padding_mask"));
  }
  if (c.kind == "encoder") {
    nn::TransformerEncoder enc(nn::TransformerEncoderLayer(c.d_model, c.nhead, o), c.encoder_layers,
                               std::make_shared<nn::LayerNorm>(IntList{c.d_model}));
    m(enc);
    return enc.forward(a, mask_of(c, "mask"), mask_of(c, "src_key_padding_mask"));
  }
  if (c.kind == "decoder") {
    nn::TransformerDecoder dec(nn::TransformerDecoderLayer(c.d_model, c.nhead, o), c.decoder_layers,
                               std::make_shared<nn::LayerNorm>(IntList{c.d_model}));
    m(dec);
    return dec.forward(a, b, mask_of(c, "tgt_mask"), mask_of(c, "memory_mask"), mask_of(c, "tgt_key_padding_mask"),
                       mask_of(c, "memory_key_padding_mask"));
  }
  nn::Transformer t({.d_model = c.d_model, .nhead = c.nhead, .num_encoder_layers = c.encoder_layers,
                     .num_decoder_layers = c.decoder_layers, .layer = o});
  m(t);
  return t.forward(a, b, mask_of(c, "src_mask"), mask_of(c, "tgt_mask"), mask_of(c, "memory_mask"),
                   mask_of(c, "src_key_padding_mask"), mask_of(c, "tgt_key_padding_mask"),
                   mask_of(c, "memory_key_padding_mask"));
}

} // namespace

TEST(TransformerStack, MatchesPyTorch) {
  for (const StackCase& c : kCases) {
    SCOPED_TRACE(c.name);
    Tensor a = from_vector(c.a, c.a_shape).requires_grad_();
    Tensor b = c.b.empty() ? Tensor() : from_vector(c.b, c.b_shape).requires_grad_();
    const Tensor out = run_case(c, a, b);
    (out * weights_for(out)).sum().backward();
    expect_close(values(out), c.out, 1e-10, "out");
    expect_close(values(a.grad()), c.da, 1e-10, "da");
    if (b.defined()) expect_close(values(b.grad()), c.db, 1e-10, "db");
  }
}

TEST(TransformerDecoderLayer, EqualsItsCompositionBitwise) {
  for (bool norm_first : {false, true}) {
    nn::manual_seed(4);
    nn::TransformerDecoderLayer layer(8, 2, layer_options(12, "relu", true, norm_first));
    const Tensor x = randn({2, 5, 8}, 10), mem = randn({2, 3, 8}, 11);
    auto sa = [&](const Tensor& t) { return layer.self_attn->forward(t, t, t, {}, false, {}, true, true).first; };
    auto ca = [&](const Tensor& t) { return layer.multihead_attn->forward(t, mem, mem, {}, false).first; };
    auto ff = [&](const Tensor& t) { return layer.linear2->forward(relu(layer.linear1->forward(t))); };
    Tensor want;
    if (norm_first) {
      Tensor h = x + sa(layer.norm1->forward(x));
      h = h + ca(layer.norm2->forward(h));
      want = h + ff(layer.norm3->forward(h));
    } else {
      Tensor h = layer.norm1->forward(x + sa(x));
      h = layer.norm2->forward(h + ca(h));
      want = layer.norm3->forward(h + ff(h));
    }
    expect_same(values(layer.forward(x, mem, {}, {}, {}, {}, true)), values(want), norm_first ? "pre" : "post");
  }
}

TEST(TransformerStack, CopiesStartEqualAndAreIndependent) {
  nn::manual_seed(2);
  nn::TransformerEncoderLayer layer(8, 2, layer_options(12, "relu", false, false));
  layer.to(kFloat64);
  layer.eval();
  nn::TransformerEncoder enc(layer, 3);
  ASSERT_EQ(enc.layers->size(), 3u);
  EXPECT_FALSE(enc.is_training() && false);
  const nn::NamedTensors proto = layer.named_parameters();
  for (size_t i = 0; i < 3; ++i) {
    auto& copy = enc.layers->at<nn::TransformerEncoderLayer>(static_cast<int64_t>(i));
    EXPECT_FALSE(copy.is_training()) << "the copies take the layer's mode";
    const nn::NamedTensors got = copy.named_parameters();
    ASSERT_EQ(got.size(), proto.size());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].second.dtype(), kFloat64);
      EXPECT_NE(got[k].second.impl(), proto[k].second.impl()) << "a copy, not the layer's tensor";
      expect_same(values(got[k].second), values(proto[k].second), got[k].first);
    }
  }
  EXPECT_EQ(enc.named_parameters().front().first, "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(enc.parameters().size(), 3 * proto.size());
  // an update of one copy changes neither the layer nor the other copies
  Tensor w = enc.layers->at<nn::TransformerEncoderLayer>(0).linear1->weight;
  w.assign(w * 2.0);
  expect_same(values(enc.layers->at<nn::TransformerEncoderLayer>(1).linear1->weight), values(layer.linear1->weight),
              "copy 1");
  // with no norm the stack is the layers in order
  const Tensor x = randn({5, 2, 8}, 3, kFloat64);
  Tensor want = x;
  for (int64_t i = 0; i < 3; ++i) want = enc.layers->at<nn::TransformerEncoderLayer>(i).forward(want);
  expect_same(values(enc.forward(x)), values(want), "stack");
}

TEST(Transformer, InitializationAndSquareSubsequentMask) {
  nn::manual_seed(7);
  nn::Transformer t({.d_model = 8, .nhead = 2, .num_encoder_layers = 2, .num_decoder_layers = 2,
                     .layer = {.dim_feedforward = 12}});
  std::vector<std::vector<double>> matrices;
  for (const auto& [name, p] : t.named_parameters()) {
    const std::vector<double> v = values(p);
    if (p.dim() < 2) continue;
    const double bound = std::sqrt(6.0 / static_cast<double>(p.size(0) + p.size(1)));
    for (double x : v) ASSERT_LE(std::fabs(x), bound) << name;
    matrices.push_back(v);
  }
  // every matrix drawn afresh (the copies made equal by the stacks are re-drawn, as PyTorch's)
  for (size_t i = 0; i < matrices.size(); ++i)
    for (size_t j = i + 1; j < matrices.size(); ++j) EXPECT_NE(matrices[i], matrices[j]) << i << " " << j;
  EXPECT_EQ(t.named_parameters().back().first, "decoder.norm.bias");
  const Tensor m = nn::Transformer::generate_square_subsequent_mask(3);
  EXPECT_EQ(m.dtype(), kFloat32);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(values(m), (std::vector<double>{0, -inf, -inf, 0, 0, -inf, 0, 0, 0}));
}

TEST(Transformer, GradcheckInF64) {
  nn::manual_seed(5);
  nn::Transformer t({.d_model = 4, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                     .layer = layer_options(6, "gelu", true, true)});
  t.to(kFloat64);
  const Tensor mask = nn::Transformer::generate_square_subsequent_mask(3, kFloat64);
  expect_gradcheck([&](const std::vector<Tensor>& x) { return t.forward(x[0], x[1], {}, mask); },
                   {rnd({2, 4, 4}, 11), rnd({2, 3, 4}, 12)});
}

TEST(TransformerStack, FusedUnfusedAndCompiledAgree) {
  nn::manual_seed(9);
  nn::TransformerDecoder dec(nn::TransformerDecoderLayer(8, 2, layer_options(12, "gelu", false, false)), 2,
                             std::make_shared<nn::LayerNorm>(IntList{8}));
  const Tensor mask = nn::Transformer::generate_square_subsequent_mask(4);
  expect_fused_unfused_and_compiled_agree(
      [&](const std::vector<Tensor>& in) {
        Tensor tgt = in[0].detach().requires_grad_();
        const Tensor out = dec.forward(tgt, in[1], mask);
        return std::vector<Tensor>{out, grad({(out * out).sum()}, {tgt})[0]};
      },
      [](uint64_t seed) { return std::vector<Tensor>{randn({4, 2, 8}, seed), randn({6, 2, 8}, seed + 1)}; });
}

TEST(Transformer, Errors) {
  nn::manual_seed(1);
  nn::TransformerEncoderLayer enc_layer(8, 2);
  expect_error([&] { nn::TransformerEncoder(enc_layer, 0); }, __LINE__, "TransformerEncoder",
               {"num_layers must be positive, got 0"});
  expect_error([] { nn::TransformerDecoderLayer(8, 2, {.activation = "tanh"}); }, __LINE__, "TransformerDecoderLayer",
               {"activation must be"});
  nn::Transformer t({.d_model = 8, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                     .layer = {.dim_feedforward = 8, .dropout = 0.0}});
  expect_error([&] { t.forward(zeros({5, 2, 8}), zeros({4, 3, 8})); }, __LINE__, "Transformer",
               {"batch number of src and tgt must be equal", "f32[5,2,8]", "f32[4,3,8]"});
  expect_error([&] { t.forward(zeros({5, 2, 8}), zeros({4, 2, 6})); }, __LINE__, "Transformer",
               {"feature number of src and tgt must be equal to d_model = 8"});
  nn::TransformerDecoderLayer dec(8, 2);
  expect_error([&] { dec.forward(zeros({4, 2, 8}), Tensor()); }, __LINE__, "TransformerDecoderLayer",
               {"tgt and memory must be defined"});
  expect_error([&] { dec.forward(zeros({4, 2, 8}), zeros({3, 2, 8}), {}, zeros({4, 4}) > 0); }, __LINE__,
               "MultiheadAttention", {"attn_mask must be [4, 3]"});
}

// A sequence-to-sequence model learns to copy: tokens and positions embedded, nn::Transformer, a linear head;
// the decoder reads the target shifted right behind a start token, with the causal mask.
TEST(Transformer, LearnsToCopySequences) {
  constexpr int64_t kVocab = 6, kStart = kVocab, kLen = 5, kBatch = 32, kD = 16;
  nn::manual_seed(3);
  nn::Embedding embed(kVocab + 1, kD), position(kLen, kD); // learned positions: attention alone has no order
  nn::Transformer t({.d_model = kD, .nhead = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                     .layer = {.dim_feedforward = 32, .dropout = 0.0, .batch_first = true}});
  nn::Linear head(kD, kVocab);
  std::vector<Tensor> params;
  for (auto* m : std::initializer_list<nn::Module*>{&embed, &position, &t, &head})
    for (const Tensor& p : m->parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 3e-3});
  const Tensor causal = nn::Transformer::generate_square_subsequent_mask(kLen);
  const Tensor places = arange(0, kLen, 1, kInt64);
  auto tokens = [&](const Tensor& ids) { return embed(ids) + position(places); };
  auto logits = [&](const Tensor& src, const Tensor& tgt_in) {
    return head(t.forward(tokens(src), tokens(tgt_in), {}, causal));
  };
  auto batch = [&](uint64_t seed) {
    const Tensor src = (rand({kBatch, kLen}, seed) * static_cast<double>(kVocab)).floor().to(kInt64);
    const Tensor tgt_in = concat({full({kBatch, 1}, static_cast<double>(kStart), kInt64), src.narrow(1, 0, kLen - 1)}, 1);
    return std::pair{src, tgt_in};
  };
  CompiledFunction step([&](const std::vector<Tensor>& in) {
    opt.zero_grad();
    const Tensor loss = F::cross_entropy(logits(in[0], in[1]).reshape({kBatch * kLen, kVocab}), in[0].reshape({-1}));
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  double first = 0, last = 0;
  for (uint64_t s = 0; s < 250; ++s) {
    const auto [src, tgt_in] = batch(1000 + s);
    last = step({src, tgt_in})[0].item<double>();
    if (s == 0) first = last;
  }
  const auto [src, tgt_in] = batch(99);
  const double accuracy = (logits(src, tgt_in).argmax(-1) == src).to(kFloat64).mean().item<double>();
  EXPECT_GT(first, 1.5); // ln 6 = 1.79 at the start
  EXPECT_LT(last, 0.1);
  EXPECT_GT(accuracy, 0.98);
}

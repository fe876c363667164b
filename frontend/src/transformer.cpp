// Attention and transformer layers: scaled_dot_product_attention, MultiheadAttention and
// TransformerEncoderLayer, composed from kiln's primitive ops with PyTorch's semantics.

#include "kiln/transformer.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "kiln/autograd.h"
#include "kiln/options.h"

namespace kiln::nn {

namespace {

using detail::fail;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// The fewest attention weights per batch point ([L, S], 512 x 512) from which a differentiated
// attention without is_causal takes the fused kernels (fused_attention_applies).
constexpr int64_t kFusedBackwardMinWeights = int64_t{512} * 512;

// The broadcast of the batch dims (all but the last two) of q, k and v; empty when they do not broadcast.
std::optional<IntList> broadcast_batch(std::initializer_list<const Tensor*> ts) {
  IntList out;
  for (const Tensor* t : ts) {
    const IntList b(t->shape().begin(), t->shape().end() - 2);
    if (b.size() > out.size()) out.insert(out.begin(), b.size() - out.size(), 1);
    for (size_t i = 0; i < b.size(); ++i) {
      int64_t& o = out[out.size() - b.size() + i];
      if (b[i] != o && b[i] != 1 && o != 1) return std::nullopt;
      if (o == 1) o = b[i];
    }
  }
  return out;
}

// True when a tensor of shape `m` broadcasts to `target` without growing it.
bool broadcasts_to(const IntList& m, const IntList& target) {
  if (m.size() > target.size()) return false;
  for (size_t i = 0; i < m.size(); ++i)
    if (m[m.size() - 1 - i] != 1 && m[m.size() - 1 - i] != target[target.size() - 1 - i]) return false;
  return true;
}

// softmax over the last dim where a row of -inf scores gives zeros (and a zero gradient) instead of
// NaN, as PyTorch's _safe_softmax. Other rows are bitwise functional::softmax's.
Tensor safe_softmax(const Tensor& s) {
  Tensor m = s.max({-1}, true).detach();
  m = where(m != kNegInf, m, 0);
  Tensor e = exp(s - m);
  Tensor z = e.sum({-1}, true);
  return e / where(z != 0, z, 1);
}

// What attention computes: the output and the attention weights (after dropout).
struct Attention {
  Tensor out;     ///< [..., L, Ev]
  Tensor weights; ///< [..., L, S]
};

// softmax(q k^T scale + mask) v with an optional causal mask as well as `mask` (a bool keep-mask or
// an additive float mask; checked by the callers). Dropout with probability p on the weights.
Attention attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                 bool is_causal, double scale) {
  Tensor s = matmul(q, k.transpose(-2, -1)) * scale;
  const int64_t L = q.size(-2), S = k.size(-2);
  if (is_causal) { // key j > query i, built on q's device
    const Tensor keys = arange(0, static_cast<double>(S), 1, kInt64, q.device());
    const Tensor rows = arange(0, static_cast<double>(L), 1, kInt64, q.device());
    s = masked_fill(s, gt(keys, rows.unsqueeze(1)), kNegInf);
  }
  if (mask.defined()) s = mask.dtype() == kBool ? masked_fill(s, logical_not(mask), kNegInf) : s + mask;
  // Only a mask can empty a row (a causal row keeps at least key 0): the plain softmax otherwise.
  Tensor p = mask.defined() ? safe_softmax(s) : functional::softmax(s, -1);
  if (dropout_p > 0) p = functional::dropout(p, dropout_p, detail::host_seed([] { return next_seed(); }));
  return {matmul(p, v), p};
}

// Whether attend()'s output may come from one Attention node, the fused attention kernel: fusion on
// (KILN_FUSION=0 runs the composite), on the CPU or a GPU (the attention
// kernel form has both backends, bitwise equal). With a gradient to flow through it, only with
// is_causal or where each batch point's [L, S] weights have kFusedBackwardMinWeights elements or
// more: the node's backward is fused (AttentionGrad, reading the forward's row logsumexp). With
// is_causal the fused pair skips the masked half of the pairs, which the composite computes, and is
// faster at every size measured (1.1x at T = 64, head dim 32; 1.5x at T = 256); without it, it is
// slower at T = 256 and below, where the composite's GEMMs reuse the weights it stored, which fit in
// the cache, and the fused backward recomputes the scores, and faster from T = 512 on (the README's
// fusion section; measured on the CPU, the GPU applies the same rule, not measured there yet).
// Its result differs from the composite's within the bound the README states. With dropout, the kernel
// draws the composite's keep-mask (the same rand counters, build::AttentionDropout), which needs the
// weights' batch dims (q's and k's) to be all of them: a v of more batch points runs the composite.
bool fused_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                             bool is_causal) {
  if (!options().fusion || k.size(-2) == 0) return false; // no keys: the composite's zeros, as PyTorch's
  if (dropout_p > 0 && broadcast_batch({&q, &k}) != broadcast_batch({&q, &k, &v})) return false;
  bool grads = false;
  for (const Tensor* t : {&q, &k, &v, &mask}) grads = grads || (t->defined() && t->requires_grad() && grad_mode_enabled());
  if (grads && !is_causal && q.size(-2) * k.size(-2) < kFusedBackwardMinWeights) return false;
  return q.dtype() == kFloat32 || q.dtype() == kFloat64;
}

// attend()'s output as one Attention node: q, k and v broadcast to their common batch dims, the
// mask given their rank (checked by the callers).
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                       bool is_causal, double scale) {
  namespace b = graph::build;
  const IntList batch = *broadcast_batch({&q, &k, &v});
  auto full = [&](const Tensor& t) {
    graph::Shape s(batch.begin(), batch.end());
    s.push_back(t.size(-2));
    s.push_back(t.size(-1));
    return b::broadcast_to(t.node(), s);
  };
  std::vector<Tensor> inputs{q, k, v};
  graph::NodeRef m;
  if (mask.defined()) {
    graph::Shape s(batch.size() + 2 - static_cast<size_t>(mask.dim()), 1);
    s.insert(s.end(), mask.shape().begin(), mask.shape().end());
    m = b::reshape(mask.node(), s);
    inputs.push_back(mask);
  }
  graph::build::AttentionDropout dropout;
  if (dropout_p > 0) dropout = {dropout_p, detail::host_seed([] { return next_seed(); })};
  return detail::result_of(b::attention(full(q), full(k), full(v), m, scale, is_causal, dropout), inputs);
}

// attend()'s output: the fused attention kernel where it applies, else the composite.
Tensor attention_output(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double dropout_p,
                        bool is_causal, double scale) {
  if (fused_attention_applies(q, k, v, mask, dropout_p, is_causal)) return fused_attention(q, k, v, mask, dropout_p, is_causal, scale);
  return attend(q, k, v, mask, dropout_p, is_causal, scale).out;
}

void check_attention_operands(const std::string& op, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const Loc& loc) {
  if (!q.defined() || !k.defined() || !v.defined()) throw Error(op, "query, key and value must be defined", loc);
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    fail(op, "query, key and value must be [..., L, E], [..., S, E] and [..., S, Ev]", {&q, &k, &v}, loc);
  if (!is_floating(q.dtype()) || k.dtype() != q.dtype() || v.dtype() != q.dtype())
    fail(op, "query, key and value must have one floating dtype", {&q, &k, &v}, loc);
  if (q.size(-1) != k.size(-1)) fail(op, "query and key must have the same last dim E", {&q, &k, &v}, loc);
  if (k.size(-2) != v.size(-2)) fail(op, "key and value must have the same number S of rows", {&q, &k, &v}, loc);
  const std::optional<IntList> batch = broadcast_batch({&q, &k, &v});
  if (!batch) fail(op, "the batch dims of query, key and value do not broadcast", {&q, &k, &v}, loc);
  if (!mask.defined()) return;
  if (mask.dtype() != kBool && mask.dtype() != q.dtype())
    fail(op, "attn_mask must be bool or of the query's dtype", {&q, &k, &v, &mask}, loc);
  IntList scores = *batch;
  scores.push_back(q.size(-2));
  scores.push_back(k.size(-2));
  if (!broadcasts_to(mask.shape(), scores))
    fail(op, "attn_mask must broadcast to the scores' shape " + detail::list_str(scores), {&q, &k, &v, &mask}, loc);
}

} // namespace

// ---------------------------------------------------------------- scaled_dot_product_attention

Tensor functional::scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& attn_mask, double dropout_p, bool is_causal,
                                                std::optional<double> scale, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  const std::string op = "scaled_dot_product_attention";
  check_attention_operands(op, q, k, v, attn_mask, loc);
  if (is_causal && attn_mask.defined())
    fail(op, "takes attn_mask or is_causal, not both (as PyTorch)", {&q, &k, &v, &attn_mask}, loc);
  if (!(dropout_p >= 0 && dropout_p <= 1)) fail(op, "dropout_p must be in [0, 1], got " + std::to_string(dropout_p), {&q}, loc);
  if (scale && !std::isfinite(*scale)) fail(op, "scale must be finite", {&q}, loc);
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  return attention_output(q, k, v, attn_mask, dropout_p, is_causal, s);
}

// ---------------------------------------------------------------- MultiheadAttention

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                       bool batch_first, Loc loc)
    : embed_dim_(embed_dim), num_heads_(num_heads), dropout_(dropout), batch_first_(batch_first) {
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads)
    throw Error("MultiheadAttention", "embed_dim (" + std::to_string(embed_dim) + ") must be positive and divisible by num_heads (" +
                                          std::to_string(num_heads) + ")", loc);
  if (!(dropout >= 0 && dropout <= 1))
    throw Error("MultiheadAttention", "dropout must be in [0, 1], got " + std::to_string(dropout), loc);
  const detail::UserCall call("MultiheadAttention", loc);
  const graph::SourceScope at(loc);
  // Xavier-uniform over [3E, E]: bound sqrt(6 / (fan_in + fan_out)) = sqrt(6 / (4E)).
  const double bound = std::sqrt(6.0 / static_cast<double>(4 * embed_dim));
  in_proj_weight = register_parameter("in_proj_weight", (rand({3 * embed_dim, embed_dim}, next_seed()) * 2.0 - 1.0) * bound);
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  // out_proj's bias starts at zero (PyTorch's _reset_parameters): registered here as a fresh leaf.
  out_proj = register_module("out_proj", Linear(embed_dim, embed_dim, false, loc));
  if (bias) out_proj->bias = out_proj->register_parameter("bias", zeros({embed_dim}));
}

namespace {

// An attention mask of MultiheadAttention (bool: true = ignore) as an additive mask in `dtype`.
Tensor additive(const Tensor& m, DType dtype) {
  return m.dtype() == kBool ? where(m, full({}, kNegInf, dtype), full({}, 0.0, dtype)) : m;
}

// key_padding_mask and attn_mask as one mask for attend() over [N, H, L, S] scores: a bool keep-mask
// when both are bool (or absent), else an additive float mask. Undefined when both are.
Tensor merge_masks(const Tensor& padding, const Tensor& attn, int64_t n, int64_t h, DType dtype) {
  Tensor pm = padding.defined() ? padding.reshape({n, 1, 1, padding.size(-1)}) : Tensor();
  Tensor am = attn.defined() && attn.dim() == 3 ? attn.reshape({n, h, attn.size(1), attn.size(2)}) : attn;
  if (!pm.defined() && !am.defined()) return Tensor();
  const bool all_bool = (!pm.defined() || pm.dtype() == kBool) && (!am.defined() || am.dtype() == kBool);
  if (all_bool) {
    if (!pm.defined()) return logical_not(am);
    if (!am.defined()) return logical_not(pm);
    return logical_and(logical_not(pm), logical_not(am));
  }
  if (!pm.defined()) return additive(am, dtype);
  if (!am.defined()) return additive(pm, dtype);
  return additive(pm, dtype) + additive(am, dtype);
}

void check_mha_mask(const std::string& what, const Tensor& m, const IntList& want1, const IntList& want2,
                    DType dtype, const Tensor& query, const Loc& loc) {
  if (!m.defined()) return;
  if (m.dtype() != kBool && m.dtype() != dtype)
    fail("MultiheadAttention", what + " must be bool or of the query's dtype", {&query, &m}, loc);
  if (m.shape() != want1 && m.shape() != want2)
    fail("MultiheadAttention", what + " must be " + detail::list_str(want1) + (want2.empty() ? "" : " or " + detail::list_str(want2)),
         {&query, &m}, loc);
}

} // namespace

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                      const Tensor& key_padding_mask, bool need_weights,
                                                      const Tensor& attn_mask, bool average_attn_weights,
                                                      bool is_causal, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  const std::string op = "MultiheadAttention";
  if (!query.defined() || !key.defined() || !value.defined()) throw Error(op, "query, key and value must be defined", loc);
  const bool batched = query.dim() == 3;
  const int64_t E = embed_dim_, H = num_heads_;
  if ((query.dim() != 2 && query.dim() != 3) || key.dim() != query.dim() || value.dim() != query.dim() ||
      query.size(-1) != E || key.size(-1) != E || value.size(-1) != E)
    fail(op, std::string("query, key and value must be ") + (batch_first_ ? "[N, L, E]" : "[L, N, E]") +
                 " (or unbatched [L, E]) with E = embed_dim = " + std::to_string(E), {&query, &key, &value}, loc);
  // Batch-first and batched from here on: [N, L, E].
  auto canon = [&](const Tensor& x) { return !batched ? x.unsqueeze(0) : batch_first_ ? x : x.transpose(0, 1); };
  const Tensor q = canon(query), k = canon(key), v = canon(value);
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1), D = E / H;
  if (k.size(0) != N || v.size(0) != N || v.size(1) != S)
    fail(op, "query, key and value must share the batch size, key and value the length", {&query, &key, &value}, loc);
  if (!is_floating(query.dtype()) || key.dtype() != query.dtype() || value.dtype() != query.dtype())
    fail(op, "query, key and value must have one floating dtype", {&query, &key, &value}, loc);
  check_mha_mask("key_padding_mask", key_padding_mask, batched ? IntList{N, S} : IntList{S}, {}, query.dtype(), query, loc);
  check_mha_mask("attn_mask", attn_mask, {L, S}, {N * H, L, S}, query.dtype(), query, loc);
  const Tensor mask = merge_masks(key_padding_mask, attn_mask, N, H, query.dtype());

  // The projections: one [.., E] x [E, 3E] product for self-attention, else three.
  std::vector<Tensor> qkv;
  if (query.impl() == key.impl() && key.impl() == value.impl()) {
    qkv = functional::linear(q, in_proj_weight, in_proj_bias).chunk(3, -1);
  } else {
    const std::vector<Tensor> w = in_proj_weight.chunk(3, 0);
    const std::vector<Tensor> b = in_proj_bias.defined() ? in_proj_bias.chunk(3, 0) : std::vector<Tensor>(3);
    qkv = {functional::linear(q, w[0], b[0]), functional::linear(k, w[1], b[1]), functional::linear(v, w[2], b[2])};
  }
  auto heads = [&](const Tensor& x) { return x.reshape({N, x.size(1), H, D}).permute({0, 2, 1, 3}); };
  const double p = is_training() ? dropout_ : 0.0;
  const bool causal = is_causal && !attn_mask.defined();
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // the weights only when asked for: the fused kernel never forms them
  const Attention a = need_weights ? attend(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), mask, p, causal, scale)
                                   : Attention{attention_output(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), mask, p, causal, scale), {}};
  Tensor out = (*out_proj)(a.out.permute({0, 2, 1, 3}).reshape({N, L, E}));
  out = !batched ? out.squeeze(0) : batch_first_ ? out : out.transpose(0, 1);
  if (!need_weights) return {out, Tensor()};
  Tensor w = average_attn_weights ? a.weights.mean({1}) : a.weights;
  return {out, batched ? w : w.squeeze(0)};
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << embed_dim_ << ", num_heads=" << num_heads_ << ", dropout=" << dropout_
     << ", bias=" << (in_proj_bias.defined() ? "true" : "false") << ", batch_first=" << (batch_first_ ? "true" : "false");
  return os.str();
}

// ---------------------------------------------------------------- TransformerEncoderLayer

namespace {

// The checks both layer kinds make of their options.
void check_layer_options(const char* op, const TransformerLayerOptions& o, const Loc& loc) {
  if (o.activation != "relu" && o.activation != "gelu")
    throw Error(op, "activation must be \"relu\" or \"gelu\", not \"" + o.activation + "\"", loc);
  if (o.dim_feedforward <= 0)
    throw Error(op, "dim_feedforward must be positive, got " + std::to_string(o.dim_feedforward), loc);
}

// The feed-forward block of both layer kinds: linear2(dropout(activation(linear1(x)))), then `after`.
Tensor feed_forward(const Tensor& x, Linear& linear1, Dropout& dropout, Linear& linear2, Dropout& after,
                    const std::string& activation) {
  Tensor h = linear1(x);
  h = activation == "gelu" ? functional::gelu(h) : relu(h);
  return after(linear2(dropout(h)));
}

} // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead, Options opts, Loc loc)
    : options(std::move(opts)) {
  check_layer_options("TransformerEncoderLayer", options, loc);
  // Registered in PyTorch's order, so that parameters() and state dicts line up.
  self_attn = register_module("self_attn", MultiheadAttention(d_model, nhead, options.dropout, true, options.batch_first, loc));
  linear1 = register_module("linear1", Linear(d_model, options.dim_feedforward, true, loc));
  dropout = register_module("dropout", Dropout(options.dropout, std::nullopt, loc));
  linear2 = register_module("linear2", Linear(options.dim_feedforward, d_model, true, loc));
  norm1 = register_module("norm1", LayerNorm({d_model}, options.layer_norm_eps, true, loc));
  norm2 = register_module("norm2", LayerNorm({d_model}, options.layer_norm_eps, true, loc));
  dropout1 = register_module("dropout1", Dropout(options.dropout, std::nullopt, loc));
  dropout2 = register_module("dropout2", Dropout(options.dropout, std::nullopt, loc));
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding,
                                                     bool is_causal) {
  return (*dropout1)(self_attn->forward(x, x, x, padding, false, mask, true, is_causal).first);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  return feed_forward(x, *linear1, *dropout, *linear2, *dropout2, options.activation);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask,
                                        bool is_causal, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  Tensor x = src;
  if (options.norm_first) {
    x = x + self_attention_block((*norm1)(x), src_mask, src_key_padding_mask, is_causal);
    return x + feed_forward_block((*norm2)(x));
  }
  x = (*norm1)(x + self_attention_block(x, src_mask, src_key_padding_mask, is_causal));
  return (*norm2)(x + feed_forward_block(x));
}

Tensor TransformerEncoderLayer::forward_impl(const Tensor& x) { return forward(x); }

// ---------------------------------------------------------------- TransformerDecoderLayer

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead, Options opts, Loc loc)
    : options(std::move(opts)) {
  check_layer_options("TransformerDecoderLayer", options, loc);
  // Registered in PyTorch's order, so that parameters() and state dicts line up.
  const double p = options.dropout;
  self_attn = register_module("self_attn", MultiheadAttention(d_model, nhead, p, true, options.batch_first, loc));
  multihead_attn = register_module("multihead_attn", MultiheadAttention(d_model, nhead, p, true, options.batch_first, loc));
  linear1 = register_module("linear1", Linear(d_model, options.dim_feedforward, true, loc));
  dropout = register_module("dropout", Dropout(p, std::nullopt, loc));
  linear2 = register_module("linear2", Linear(options.dim_feedforward, d_model, true, loc));
  norm1 = register_module("norm1", LayerNorm({d_model}, options.layer_norm_eps, true, loc));
  norm2 = register_module("norm2", LayerNorm({d_model}, options.layer_norm_eps, true, loc));
  norm3 = register_module("norm3", LayerNorm({d_model}, options.layer_norm_eps, true, loc));
  dropout1 = register_module("dropout1", Dropout(p, std::nullopt, loc));
  dropout2 = register_module("dropout2", Dropout(p, std::nullopt, loc));
  dropout3 = register_module("dropout3", Dropout(p, std::nullopt, loc));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  if (!tgt.defined() || !memory.defined()) throw Error(name(), "tgt and memory must be defined", loc);
  auto self_block = [&](const Tensor& x) {
    return (*dropout1)(self_attn->forward(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal).first);
  };
  auto memory_block = [&](const Tensor& x) {
    return (*dropout2)(multihead_attn
                           ->forward(x, memory, memory, memory_key_padding_mask, false, memory_mask, true,
                                     memory_is_causal)
                           .first);
  };
  auto ff_block = [&](const Tensor& x) {
    return feed_forward(x, *linear1, *dropout, *linear2, *dropout3, options.activation);
  };
  Tensor x = tgt;
  if (options.norm_first) {
    x = x + self_block((*norm1)(x));
    x = x + memory_block((*norm2)(x));
    return x + ff_block((*norm3)(x));
  }
  x = (*norm1)(x + self_block(x));
  x = (*norm2)(x + memory_block(x));
  return (*norm3)(x + ff_block(x));
}

// ---------------------------------------------------------------- the stacks and Transformer

namespace {

// `to` takes the values of `from`'s parameters and buffers (the same module structure), without a
// gradient: PyTorch's deepcopy of a layer, for modules built alike.
void copy_values(const Module& from, Module& to, const Loc& loc) {
  NoGradGuard no_grad;
  for (auto [src, dst] : {std::pair{from.named_parameters(), to.named_parameters()},
                          std::pair{from.named_buffers(), to.named_buffers()}}) {
    KILN_ASSERT(src.size() == dst.size(), "copy_values: modules built differently");
    for (size_t i = 0; i < src.size(); ++i) dst[i].second.assign(src[i].second.detach(), loc);
  }
}

// num_layers copies of `layer` (its values, dtype, device and mode), as PyTorch's _get_clones.
template <class Layer>
std::shared_ptr<ModuleList> copies_of(const Layer& layer, int64_t num_layers, const char* op, const Loc& loc) {
  if (num_layers <= 0) throw Error(op, "num_layers must be positive, got " + std::to_string(num_layers), loc);
  const Tensor& like = layer.self_attn->in_proj_weight;
  auto list = std::make_shared<ModuleList>();
  for (int64_t i = 0; i < num_layers; ++i) {
    auto copy = std::make_shared<Layer>(layer.self_attn->embed_dim(), layer.self_attn->num_heads(), layer.options, loc);
    copy->to(like.dtype(), loc).to(like.device(), loc);
    copy_values(layer, *copy, loc);
    copy->train(layer.is_training());
    list->push_back(copy, loc);
  }
  return list;
}

} // namespace

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> norm_, Loc loc) {
  layers = register_module("layers", copies_of(encoder_layer, num_layers, "TransformerEncoder", loc), loc);
  if (norm_) norm = register_module("norm", std::move(norm_), loc);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask,
                                   bool is_causal, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  Tensor x = src;
  for (Module& layer : *layers)
    x = static_cast<TransformerEncoderLayer&>(layer).forward(x, mask, src_key_padding_mask, is_causal, loc);
  return norm ? (*norm)(x) : x;
}

Tensor TransformerEncoder::forward_impl(const Tensor& x) { return forward(x); }

TransformerDecoder::TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> norm_, Loc loc) {
  layers = register_module("layers", copies_of(decoder_layer, num_layers, "TransformerDecoder", loc), loc);
  if (norm_) norm = register_module("norm", std::move(norm_), loc);
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                   const Tensor& memory_mask, const Tensor& tgt_key_padding_mask,
                                   const Tensor& memory_key_padding_mask, bool tgt_is_causal, bool memory_is_causal,
                                   Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  Tensor x = tgt;
  for (Module& layer : *layers)
    x = static_cast<TransformerDecoderLayer&>(layer).forward(x, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
                                                             memory_key_padding_mask, tgt_is_causal, memory_is_causal,
                                                             loc);
  return norm ? (*norm)(x) : x;
}

Transformer::Transformer(Options opts, Loc loc) : options(std::move(opts)) {
  const int64_t d = options.d_model, h = options.nhead;
  const TransformerLayerOptions& lo = options.layer;
  encoder = register_module(
      "encoder", TransformerEncoder(TransformerEncoderLayer(d, h, lo, loc), options.num_encoder_layers,
                                    std::make_shared<LayerNorm>(IntList{d}, lo.layer_norm_eps, true, loc), loc),
      loc);
  decoder = register_module(
      "decoder", TransformerDecoder(TransformerDecoderLayer(d, h, lo, loc), options.num_decoder_layers,
                                    std::make_shared<LayerNorm>(IntList{d}, lo.layer_norm_eps, true, loc), loc),
      loc);
  // PyTorch's _reset_parameters: Xavier-uniform, bound sqrt(6 / (fan_in + fan_out)), on every matrix.
  NoGradGuard no_grad;
  for (auto& [n, p] : named_parameters()) {
    if (p.dim() < 2) continue;
    const double bound = std::sqrt(6.0 / static_cast<double>(p.size(0) + p.size(1)));
    p.assign((rand(p.shape(), next_seed()) * 2.0 - 1.0) * bound, loc);
  }
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask, const Tensor& tgt_mask,
                            const Tensor& memory_mask, const Tensor& src_key_padding_mask,
                            const Tensor& tgt_key_padding_mask, const Tensor& memory_key_padding_mask, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  if (!src.defined() || !tgt.defined()) throw Error(name(), "src and tgt must be defined", loc);
  const bool batched = src.dim() == 3;
  const int batch_dim = options.layer.batch_first ? 0 : 1;
  if (batched && (tgt.dim() != 3 || src.size(batch_dim) != tgt.size(batch_dim)))
    fail(name(), "the batch number of src and tgt must be equal", {&src, &tgt}, loc);
  if (src.size(-1) != options.d_model || tgt.size(-1) != options.d_model)
    fail(name(), "the feature number of src and tgt must be equal to d_model = " + std::to_string(options.d_model),
         {&src, &tgt}, loc);
  const Tensor memory = encoder->forward(src, src_mask, src_key_padding_mask, false, loc);
  return decoder->forward(tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask, false,
                          false, loc);
}

Tensor Transformer::generate_square_subsequent_mask(int64_t sz, DType dtype, Device device) {
  return triu(full({sz, sz}, -std::numeric_limits<double>::infinity(), dtype, device), 1);
}

} // namespace kiln::nn

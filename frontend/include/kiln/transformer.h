#pragma once
/// \file transformer.h
/// Attention and transformer layers with PyTorch's semantics, composed from kiln's primitive ops
/// (matmul, softmax, masking, dropout): nn::functional::scaled_dot_product_attention,
/// nn::MultiheadAttention and nn::TransformerEncoderLayer. Everything is lazy graph, so gradients
/// come from autograd and the pieces fuse with their neighbours.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln::nn::functional {

/// softmax(q k^T * scale + mask) v, as torch.nn.functional.scaled_dot_product_attention (its
/// documented math form): q [..., L, E], k [..., S, E], v [..., S, Ev] give [..., L, Ev]; the batch
/// dims broadcast. `attn_mask` broadcasts to [..., L, S]: a bool mask keeps the scores where it is
/// true, a float mask (q's dtype) is added to them. `is_causal` keeps key j for query i when j <= i
/// (top-left aligned, as PyTorch) and excludes attn_mask. `scale` defaults to 1/sqrt(E).
/// `dropout_p` drops attention weights (the mask's seed is drawn per call, a fresh one per replay of
/// a compiled step, from the sequence nn::manual_seed() restarts); pass 0 when not training. It is in
/// [0, 1]: 1 drops every weight (zeros, as PyTorch's), fused or not.
/// A query row whose every score is masked out (all false, or -inf) gives zeros and a zero
/// gradient, as PyTorch's math backend since 2.5 (its "safe softmax"), not NaN.
/// With fusion on (with or without dropout: the kernels draw the composite's mask) it runs as kiln's
/// fused attention kernels, on the CPU and on CUDA (one
/// Attention node, and a fused backward): always when no gradient flows, and with one with
/// is_causal (the kernels skip the masked pairs) or from 512 x 512 weights a batch point (below,
/// without is_causal, the composite's backward is faster); otherwise as the composite of primitives. The two agree within the bound the README's fusion section states.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, Loc loc = Loc::current());

} // namespace kiln::nn::functional

namespace kiln::nn {

/// Multi-head attention as torch.nn.MultiheadAttention (query, key and value of embed_dim):
/// packed input projections in_proj_weight [3E, E] and in_proj_bias [3E] (q, k, v in that order)
/// and out_proj (a Linear), so that a PyTorch state dict maps 1:1. Initialization as PyTorch's:
/// in_proj_weight Xavier-uniform, both biases zero, out_proj.weight as a Linear's.
class MultiheadAttention : public Module {
public:
  /// embed_dim must divide by num_heads; dropout (in [0, 1]) drops attention weights in training.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false, Loc loc = Loc::current());
  /// (output, weights) as PyTorch's forward: query [L, N, E] ([N, L, E] with batch_first, or
  /// unbatched [L, E]), key and value [S, N, E]. key_padding_mask [N, S] ([S] unbatched) and
  /// attn_mask [L, S] or [N * num_heads, L, S]: a bool mask marks positions to IGNORE (true), a
  /// float mask is added to the scores. is_causal without attn_mask applies the causal mask (in
  /// PyTorch it is only a hint that attn_mask is causal; with attn_mask, that mask is used).
  /// The weights (after dropout, as PyTorch) are [N, L, S] averaged over heads, or [N, H, L, S]
  /// without average_attn_weights, and undefined unless need_weights. Fully masked rows give zeros.
  std::pair<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                                    const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                                    bool is_causal = false, Loc loc = Loc::current());
  std::string name() const override { return "MultiheadAttention"; } ///< "MultiheadAttention"
  std::string extra_repr() const override; ///< sizes and flags
  Tensor in_proj_weight; ///< [3E, E]: the q, k and v projections stacked
  Tensor in_proj_bias;   ///< [3E], undefined without bias
  std::shared_ptr<Linear> out_proj; ///< E -> E
private:
  int64_t embed_dim_, num_heads_;
  double dropout_;
  bool batch_first_;
};

/// One transformer encoder layer as torch.nn.TransformerEncoderLayer: self-attention and a
/// feed-forward block (linear1, activation, dropout, linear2), each with dropout and a residual;
/// post-norm (x = norm(x + f(x))) by default, pre-norm (x = x + f(norm(x))) with norm_first.
/// Submodules and parameter names as PyTorch's (self_attn, linear1, linear2, norm1, norm2).
class TransformerEncoderLayer : public Module {
public:
  /// Options in PyTorch's order (designated initializers: `{.dropout = 0, .norm_first = true}`).
  struct Options {
    int64_t dim_feedforward = 2048; ///< hidden width of the feed-forward block
    double dropout = 0.1;           ///< after attention, inside and after the feed-forward block
    std::string activation = "relu"; ///< "relu" or "gelu"
    double layer_norm_eps = 1e-5;   ///< both LayerNorms' eps
    bool batch_first = false;       ///< inputs [N, L, E] instead of [L, N, E]
    bool norm_first = false;        ///< pre-norm instead of post-norm
  };
  /// A layer of width d_model with nhead attention heads.
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, Options options, Loc loc = Loc::current());
  /// A layer with the default options.
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, Loc loc = Loc::current())
      : TransformerEncoderLayer(d_model, nhead, Options{}, loc) {}
  /// The layer on src (shaped as MultiheadAttention's query); src_mask and src_key_padding_mask
  /// as MultiheadAttention's attn_mask and key_padding_mask; is_causal applies the causal mask
  /// when src_mask is undefined. Dropout only in training mode.
  Tensor forward(const Tensor& src, const Tensor& src_mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false, Loc loc = Loc::current());
  std::string name() const override { return "TransformerEncoderLayer"; } ///< "TransformerEncoderLayer"
  std::shared_ptr<MultiheadAttention> self_attn; ///< self-attention
  std::shared_ptr<Linear> linear1;               ///< d_model -> dim_feedforward
  std::shared_ptr<Dropout> dropout;              ///< inside the feed-forward block
  std::shared_ptr<Linear> linear2;               ///< dim_feedforward -> d_model
  std::shared_ptr<LayerNorm> norm1;              ///< around the attention block
  std::shared_ptr<LayerNorm> norm2;              ///< around the feed-forward block
  std::shared_ptr<Dropout> dropout1;             ///< after attention
  std::shared_ptr<Dropout> dropout2;             ///< after the feed-forward block
  Options options;                               ///< the configuration
protected:
  /// forward(x) with no masks (so that the layer works inside Sequential).
  Tensor forward_impl(const Tensor& x) override;
private:
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& padding, bool is_causal);
  Tensor feed_forward_block(const Tensor& x);
};

} // namespace kiln::nn

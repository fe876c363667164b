#pragma once
/// \file transformer.h
/// Attention and transformer layers with PyTorch's semantics, composed from kiln's primitive ops
/// (matmul, softmax, masking, dropout): nn::functional::scaled_dot_product_attention,
/// nn::MultiheadAttention, the encoder and decoder layers and stacks, and nn::Transformer. Everything is lazy graph, so gradients
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
  int64_t embed_dim() const { return embed_dim_; } ///< E
  int64_t num_heads() const { return num_heads_; } ///< the number of heads
  bool batch_first() const { return batch_first_; } ///< inputs [N, L, E]
  std::string extra_repr() const override; ///< sizes and flags
  Tensor in_proj_weight; ///< [3E, E]: the q, k and v projections stacked
  Tensor in_proj_bias;   ///< [3E], undefined without bias
  std::shared_ptr<Linear> out_proj; ///< E -> E
private:
  int64_t embed_dim_, num_heads_;
  double dropout_;
  bool batch_first_;
};

/// The options of the transformer layers after d_model and nhead, in PyTorch's order, with its
/// defaults (designated initializers: `{.dropout = 0, .norm_first = true}`).
struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048; ///< hidden width of the feed-forward block
  double dropout = 0.1;           ///< after attention, inside and after the feed-forward block
  std::string activation = "relu"; ///< "relu" or "gelu"
  double layer_norm_eps = 1e-5;   ///< the LayerNorms' eps
  bool batch_first = false;       ///< inputs [N, L, E] instead of [L, N, E]
  bool norm_first = false;        ///< pre-norm instead of post-norm
};

/// One transformer encoder layer as torch.nn.TransformerEncoderLayer: self-attention and a
/// feed-forward block (linear1, activation, dropout, linear2), each with dropout and a residual;
/// post-norm (x = norm(x + f(x))) by default, pre-norm (x = x + f(norm(x))) with norm_first.
/// Submodules and parameter names as PyTorch's (self_attn, linear1, linear2, norm1, norm2).
class TransformerEncoderLayer : public Module {
public:
  /// Options in PyTorch's order (designated initializers: `{.dropout = 0, .norm_first = true}`).
  using Options = TransformerLayerOptions;
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

/// One transformer decoder layer as torch.nn.TransformerDecoderLayer: self-attention on the target,
/// attention to the encoder's output (`memory`) and a feed-forward block, each with dropout and a
/// residual; post-norm by default (x = norm(x + f(x))), pre-norm with norm_first. Submodules and
/// parameter names as PyTorch's (self_attn, multihead_attn, linear1, linear2, norm1-3, dropout1-3).
class TransformerDecoderLayer : public Module {
public:
  /// The options (shared with TransformerEncoderLayer).
  using Options = TransformerLayerOptions;
  /// A layer of width d_model with nhead attention heads in both attentions.
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, Options options, Loc loc = Loc::current());
  /// A layer with the default options.
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, Loc loc = Loc::current())
      : TransformerDecoderLayer(d_model, nhead, Options{}, loc) {}
  /// The layer on tgt given memory (each shaped as MultiheadAttention's query; memory's length may
  /// differ). tgt_mask / tgt_key_padding_mask mask the self-attention, memory_mask /
  /// memory_key_padding_mask the attention to memory (as MultiheadAttention's attn_mask and
  /// key_padding_mask); tgt_is_causal and memory_is_causal apply the causal mask where the matching
  /// mask is undefined (PyTorch 2's arguments). Dropout only in training mode.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 bool memory_is_causal = false, Loc loc = Loc::current());
  std::string name() const override { return "TransformerDecoderLayer"; } ///< "TransformerDecoderLayer"
  std::shared_ptr<MultiheadAttention> self_attn;      ///< self-attention on the target
  std::shared_ptr<MultiheadAttention> multihead_attn; ///< attention to the memory
  std::shared_ptr<Linear> linear1;                    ///< d_model -> dim_feedforward
  std::shared_ptr<Dropout> dropout;                   ///< inside the feed-forward block
  std::shared_ptr<Linear> linear2;                    ///< dim_feedforward -> d_model
  std::shared_ptr<LayerNorm> norm1;                   ///< around the self-attention block
  std::shared_ptr<LayerNorm> norm2;                   ///< around the memory attention block
  std::shared_ptr<LayerNorm> norm3;                   ///< around the feed-forward block
  std::shared_ptr<Dropout> dropout1;                  ///< after self-attention
  std::shared_ptr<Dropout> dropout2;                  ///< after the memory attention
  std::shared_ptr<Dropout> dropout3;                  ///< after the feed-forward block
  Options options;                                    ///< the configuration
};

/// A stack of num_layers copies of an encoder layer, then an optional norm, as
/// torch.nn.TransformerEncoder: the copies start with the given layer's values (PyTorch deep-copies
/// it; the layer itself is not part of the stack), as "layers.0", "layers.1", ... and "norm".
class TransformerEncoder : public Module {
public:
  /// num_layers (> 0) copies of encoder_layer (its values, dtype, device and mode), then `norm`.
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr, Loc loc = Loc::current());
  /// The layers in order on src with the same masks (as TransformerEncoderLayer::forward), then norm.
  Tensor forward(const Tensor& src, const Tensor& mask = Tensor(), const Tensor& src_key_padding_mask = Tensor(),
                 bool is_causal = false, Loc loc = Loc::current());
  std::string name() const override { return "TransformerEncoder"; } ///< "TransformerEncoder"
  std::shared_ptr<ModuleList> layers; ///< the TransformerEncoderLayer copies
  std::shared_ptr<LayerNorm> norm;    ///< after the last layer; may be null
protected:
  /// forward(x) with no masks (so that the stack works inside Sequential).
  Tensor forward_impl(const Tensor& x) override;
};

/// A stack of num_layers copies of a decoder layer, then an optional norm, as
/// torch.nn.TransformerDecoder (copies as TransformerEncoder's).
class TransformerDecoder : public Module {
public:
  /// num_layers (> 0) copies of decoder_layer (its values, dtype, device and mode), then `norm`.
  TransformerDecoder(const TransformerDecoderLayer& decoder_layer, int64_t num_layers,
                     std::shared_ptr<LayerNorm> norm = nullptr, Loc loc = Loc::current());
  /// The layers in order on tgt, each given memory and the masks (as TransformerDecoderLayer::forward),
  /// then norm.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = Tensor(),
                 const Tensor& memory_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), bool tgt_is_causal = false,
                 bool memory_is_causal = false, Loc loc = Loc::current());
  std::string name() const override { return "TransformerDecoder"; } ///< "TransformerDecoder"
  std::shared_ptr<ModuleList> layers; ///< the TransformerDecoderLayer copies
  std::shared_ptr<LayerNorm> norm;    ///< after the last layer; may be null
};

/// The encoder-decoder transformer of "Attention Is All You Need", as torch.nn.Transformer: a
/// TransformerEncoder and a TransformerDecoder (each with a final LayerNorm), every parameter of more
/// than one dim re-initialized Xavier-uniform (PyTorch's _reset_parameters).
class Transformer : public Module {
public:
  /// Options after the layers' (PyTorch's order and defaults).
  struct Options {
    int64_t d_model = 512;          ///< the width
    int64_t nhead = 8;              ///< attention heads
    int64_t num_encoder_layers = 6; ///< encoder layers (> 0)
    int64_t num_decoder_layers = 6; ///< decoder layers (> 0)
    TransformerLayerOptions layer;  ///< every layer's options (dim_feedforward, dropout, ...)
  };
  /// A transformer with `options`.
  explicit Transformer(Options options, Loc loc = Loc::current());
  /// A transformer with PyTorch's defaults.
  explicit Transformer(Loc loc = Loc::current()) : Transformer(Options{}, loc) {}
  /// decoder(tgt, encoder(src)): src [S, N, E] and tgt [T, N, E] ([N, S, E] and [N, T, E] with
  /// batch_first, or unbatched [S, E] and [T, E]); the masks as TransformerEncoder's (src_*) and
  /// TransformerDecoder's (tgt_*, memory_*). Errors name `loc`: src and tgt must share the batch size,
  /// and their last dim must be d_model.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = Tensor(),
                 const Tensor& tgt_mask = Tensor(), const Tensor& memory_mask = Tensor(),
                 const Tensor& src_key_padding_mask = Tensor(), const Tensor& tgt_key_padding_mask = Tensor(),
                 const Tensor& memory_key_padding_mask = Tensor(), Loc loc = Loc::current());
  /// The float mask [sz, sz] hiding the future, as PyTorch's: -inf above the diagonal, 0 elsewhere.
  static Tensor generate_square_subsequent_mask(int64_t sz, DType dtype = kFloat32, Device device = kCPU);
  std::string name() const override { return "Transformer"; } ///< "Transformer"
  std::shared_ptr<TransformerEncoder> encoder; ///< the encoder stack, with its norm
  std::shared_ptr<TransformerDecoder> decoder; ///< the decoder stack, with its norm
  Options options;                             ///< the configuration
};

} // namespace kiln::nn

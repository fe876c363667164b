#pragma once
/// \file functional.h
/// Stateless neural-network functions (torch.nn.functional): activations,
/// normalizations, convolution and pooling built from kiln's primitive ops, and
/// the losses. Everything is lazy graph, so gradients come from autograd and
/// the functions fuse with their neighbours.

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/tensor.h"

namespace kiln::nn {

/// A pair of extents (height, width); one integer means both.
struct Size2 {
  int64_t h = 1; ///< height (rows)
  int64_t w = 1; ///< width (columns)
  /// Both extents equal.
  Size2(int64_t v) : h(v), w(v) {} // NOLINT: implicit, as PyTorch's int-or-tuple arguments
  /// Height and width.
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

} // namespace kiln::nn

namespace kiln::nn::functional {

/// How a loss combines the per-element losses.
enum class Reduction { Mean, Sum, None };

// ---------------------------------------------------------------- activations
/// exp(x - max) / sum(exp(x - max)) along dim.
Tensor softmax(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// x - max - log(sum(exp(x - max))) along dim: stable for large logits.
Tensor log_softmax(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// GELU; approximate "none": x Phi(x) through kiln::erf, "tanh": PyTorch's tanh form.
Tensor gelu(const Tensor& x, const std::string& approximate = "none", Loc loc = Loc::current());
/// x * sigmoid(x).
Tensor silu(const Tensor& x, Loc loc = Loc::current());

// ---------------------------------------------------------------- encodings
/// One-hot encoding of integer `indices` [...] as i64 [..., num_classes] (as torch.nn.functional.one_hot).
Tensor one_hot(const Tensor& indices, int64_t num_classes, Loc loc = Loc::current());

// ---------------------------------------------------------------- layers
/// x W^T + b for x [..., in], weight [out, in], optional bias [out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Loc loc = Loc::current());
/// 2-d cross-correlation of x [N, C, H, W] with weight [O, C/groups, kh, kw] (im2col + matmul).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size2& stride, const Size2& padding,
              const Size2& dilation, int64_t groups, Loc loc = Loc::current());
/// Max over windows of x [N, C, H, W]; padding counts as -infinity.
Tensor max_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding,
                  const Size2& dilation, Loc loc = Loc::current());
/// Mean over windows of x [N, C, H, W]; zero padding counts in the mean.
Tensor avg_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding,
                  Loc loc = Loc::current());
/// (x - mean) / sqrt(var + eps) * weight + bias over the trailing dims of `normalized_shape`.
Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5, Loc loc = Loc::current());
/// Batch normalization over all dims but dim 1 of x [N, C, ...]. With `training`, normalizes by the
/// batch mean and biased variance and, when the running statistics are defined, assign()s them
/// (1 - momentum) * running + momentum * batch (the variance unbiased), as torch.nn.functional.batch_norm;
/// without, normalizes by the running statistics. weight and bias [C] are optional.
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), bool training = true, double momentum = 0.1, double eps = 1e-5,
                  Loc loc = Loc::current());
/// Zeroes elements with probability p (mask from `seed`) and scales the rest by 1/(1-p); identity unless training.
Tensor dropout(const Tensor& x, double p, uint64_t seed, bool training = true, Loc loc = Loc::current());

// ---------------------------------------------------------------- losses
/// Options of cross_entropy.
struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean; ///< mean over the batch by default
  double label_smoothing = 0.0;          ///< in [0, 1]: mixes the target with the uniform distribution
};
/// Cross entropy from logits [N, C] and integer class targets [N] (i32 or i64), as PyTorch:
/// (1 - s) * nll + s * mean over classes of -log_softmax.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {},
                     Loc loc = Loc::current());
/// Negative log likelihood from log-probabilities [N, C] and integer targets [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction = Reduction::Mean,
                Loc loc = Loc::current());
/// (input - target)^2, reduced.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                Loc loc = Loc::current());
/// Binary cross entropy of sigmoid(logits) against targets in [0, 1], computed stably as
/// max(x, 0) - x * y + log(1 + exp(-|x|)).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets,
                                        Reduction reduction = Reduction::Mean, Loc loc = Loc::current());

} // namespace kiln::nn::functional

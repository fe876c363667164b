#pragma once
/// \file functional.h
/// Stateless neural-network functions (torch.nn.functional): activations,
/// normalizations, convolution and pooling built from kiln's primitive ops, and
/// the losses. Everything is lazy graph, so gradients come from autograd and
/// the functions fuse with their neighbours.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

/// Three extents (depth, height, width); one integer means all three.
struct Size3 {
  int64_t d = 1; ///< depth
  int64_t h = 1; ///< height
  int64_t w = 1; ///< width
  /// All three equal.
  Size3(int64_t v) : d(v), h(v), w(v) {} // NOLINT: implicit, as PyTorch's int-or-tuple arguments
  /// Depth, height and width.
  Size3(int64_t d_, int64_t h_, int64_t w_) : d(d_), h(h_), w(w_) {}
};

/// PyTorch's padding strings of a convolution: Valid is no padding, Same pads dilation * (kernel - 1) in
/// all per dim (the odd one at the end: right, bottom), so that a stride-1 output is as large as the input.
enum class PaddingMode { Explicit, Valid, Same };

/// The `padding` of a convolution as PyTorch's int, tuple or string: an integer (every spatial dim), {h, w}
/// (2-d only), "valid", "same" or a PaddingMode. A string that is neither is an error of the convolution
/// given it (which names the caller's line), as torch's "Invalid padding string".
template <class Extents> struct ConvPadding {
  PaddingMode mode = PaddingMode::Explicit; ///< Explicit: `size` on each side
  Extents size{0};                          ///< zeros added on each side (Explicit only)
  std::string unknown{};                    ///< a string given that is neither "valid" nor "same"
  /// The same padding on each side of every spatial dim.
  ConvPadding(int64_t v) : size(v) {} // NOLINT: implicit, as PyTorch's int argument
  /// Height and width (2-d).
  ConvPadding(int64_t h, int64_t w) requires std::same_as<Extents, Size2> : size(h, w) {}
  /// Explicit extents (2-d).
  ConvPadding(const Size2& v) // NOLINT: implicit, as PyTorch's tuple argument
      requires std::same_as<Extents, Size2> : size(v) {}
  /// Valid or Same (Explicit means no padding).
  ConvPadding(PaddingMode m) : mode(m) {} // NOLINT: implicit, as PyTorch's string argument
  /// "valid" or "same", as PyTorch's string argument.
  template <size_t N> ConvPadding(const char (&s)[N]) : ConvPadding(std::string_view(s, N - 1)) {} // NOLINT
  /// "valid" or "same" (a runtime string).
  explicit ConvPadding(std::string_view s)
      : mode(s == "valid"  ? PaddingMode::Valid
             : s == "same" ? PaddingMode::Same
                           : PaddingMode::Explicit),
        unknown(mode == PaddingMode::Explicit ? std::string(s) : std::string()) {}
};
/// The padding of conv1d and Conv1d: an integer, "valid", "same" or a PaddingMode.
using Padding1 = ConvPadding<int64_t>;
/// The padding of conv2d and Conv2d: an integer, {h, w}, a Size2, "valid", "same" or a PaddingMode.
using Padding2 = ConvPadding<Size2>;

} // namespace kiln::nn

namespace kiln::nn::functional {

/// How a loss combines the per-element losses, as PyTorch's `reduction` argument: "mean" (over the
/// elements, or the targets' weights for the class losses), "sum", "none" (the per-element losses),
/// and "batchmean", the sum divided by the batch size (kl_div's only; other losses refuse it, as PyTorch).
enum class Reduction { Mean, Sum, None, BatchMean };

// ---------------------------------------------------------------- activations
/// exp(x - max) / sum(exp(x - max)) along dim.
Tensor softmax(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// x - max - log(sum(exp(x - max))) along dim: stable for large logits.
Tensor log_softmax(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// GELU; approximate "none": x Phi(x) through kiln::erf, "tanh": PyTorch's tanh form.
Tensor gelu(const Tensor& x, const std::string& approximate = "none", Loc loc = Loc::current());
/// x * sigmoid(x).
Tensor silu(const Tensor& x, Loc loc = Loc::current());
/// x for x > 0, else negative_slope * x (the gradient at 0 is negative_slope, as PyTorch's).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01, Loc loc = Loc::current());
/// x for x > 0, else alpha (e^x - 1) through kiln::expm1 (the gradient at 0 is alpha, as PyTorch's).
Tensor elu(const Tensor& x, double alpha = 1.0, Loc loc = Loc::current());
/// scale * elu(x, alpha) with PyTorch's alpha = 1.6732632423543772 and scale = 1.0507009873554805.
Tensor selu(const Tensor& x, Loc loc = Loc::current());
/// x for x > 0, else alpha (e^(x / alpha) - 1); alpha 0 is an error (as PyTorch's).
Tensor celu(const Tensor& x, double alpha = 1.0, Loc loc = Loc::current());
/// log(1 + e^(beta x)) / beta through kiln::log1p (exact for very negative x), and x itself where
/// beta x > threshold (as PyTorch's, whose gradient there is 1).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0, Loc loc = Loc::current());
/// x tanh(softplus(x)). Values are PyTorch's log1p(e^x) form's (beyond softplus's threshold of 20 the tanh is 1
/// either way); the gradient stays finite for large x, where PyTorch's is too.
Tensor mish(const Tensor& x, Loc loc = Loc::current());
/// x min(max(x + 3, 0), 6) / 6 (so -inf gives NaN, as PyTorch's); the gradient is x / 3 + 1/2 on [-3, 3], the
/// kinks included (PyTorch's scalar kernel's: -1/2 at -3, 3/2 at 3; its vectorized f64 kernel gives 1 at 3), 0
/// below and 1 above.
Tensor hardswish(const Tensor& x, Loc loc = Loc::current());
/// min(max(x + 3, 0), 6) / 6; the gradient is 1/6 strictly inside (-3, 3) and 0 elsewhere, the kinks and NaN
/// included (PyTorch's f64 gradient is float(1/6), 1.7e-8 off; kiln's is the f64 1/6).
Tensor hardsigmoid(const Tensor& x, Loc loc = Loc::current());
/// clamp(x, min_val, max_val) (min_val > max_val gives max_val, NaN stays NaN); the gradient is 1 strictly between
/// the bounds (and at NaN) and 0 at and beyond them, as PyTorch's.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0, Loc loc = Loc::current());
/// hardtanh(x, 0, 6): the gradient is 0 at 0 and at 6, as PyTorch's.
Tensor relu6(const Tensor& x, Loc loc = Loc::current());
/// log(sigmoid(x)) as min(x, 0) - log1p(e^-|x|), stable for large |x| (PyTorch's formula; gradient 1/2 at 0).
Tensor logsigmoid(const Tensor& x, Loc loc = Loc::current());
/// x / (1 + |x|) (inf gives NaN, as PyTorch's).
Tensor softsign(const Tensor& x, Loc loc = Loc::current());
/// x where |x| > lambd, else 0 (NaN stays NaN), as torch.nn.functional.hardshrink; the gradient is 1 where
/// |x| > lambd and 0 elsewhere, the bounds and NaN included (PyTorch's).
Tensor hardshrink(const Tensor& x, double lambd = 0.5, Loc loc = Loc::current());
/// x - lambd where x > lambd, x + lambd where x < -lambd, else 0 (NaN too, as PyTorch 1.13's), as
/// torch.nn.functional.softshrink; lambd must be >= 0; the gradient is 0 on [-lambd, lambd] and at NaN.
Tensor softshrink(const Tensor& x, double lambd = 0.5, Loc loc = Loc::current());
/// x - tanh(x), as torch.nn.functional.tanhshrink.
Tensor tanhshrink(const Tensor& x, Loc loc = Loc::current());
/// Randomized leaky ReLU, as torch.nn.functional.rrelu: x where x > 0, else x times a slope drawn uniformly from
/// [lower, upper) per element (from `seed`) in training, or leaky_relu with slope (lower + upper) / 2 otherwise;
/// the gradient at 0 and below is the slope (PyTorch's). lower <= upper.
Tensor rrelu(const Tensor& x, double lower = 1.0 / 8, double upper = 1.0 / 3, bool training = false, uint64_t seed = 0,
             Loc loc = Loc::current());
/// Samples of the Gumbel-softmax distribution, as torch.nn.functional.gumbel_softmax: softmax((logits + g) / tau)
/// along dim with Gumbel noise g from `seed`; with `hard`, the one-hot of each row's argmax (its first maximum)
/// whose gradient is the soft sample's (y_hard - y_soft.detach() + y_soft). tau > 0.
Tensor gumbel_softmax(const Tensor& logits, uint64_t seed, double tau = 1, bool hard = false, int64_t dim = -1,
                      Loc loc = Loc::current());
/// a * sigmoid(b) for the two halves a, b of x along dim; an odd size there, or a 0-d x, is an error.
Tensor glu(const Tensor& x, int64_t dim = -1, Loc loc = Loc::current());
/// x for x > 0, else weight * x, with a weight of 1 element or of x.size(1) (the channels; a 1-d or 0-d x has
/// one channel) broadcast along dim 1; the gradient at 0 is the weight, as PyTorch's.
Tensor prelu(const Tensor& x, const Tensor& weight, Loc loc = Loc::current());
/// x where x > threshold, else `value` (a NaN stays NaN), as torch.nn.functional.threshold; the gradient is 1
/// where x > threshold, else 0.
Tensor threshold(const Tensor& x, double threshold, double value, Loc loc = Loc::current());
/// softmax(-x, dim).
Tensor softmin(const Tensor& x, int64_t dim, Loc loc = Loc::current());

// ---------------------------------------------------------------- encodings
/// One-hot encoding of integer `indices` [...] as i64 [..., num_classes] (as torch.nn.functional.one_hot).
Tensor one_hot(const Tensor& indices, int64_t num_classes, Loc loc = Loc::current());

/// The rows of weight [num_embeddings, dim] at integer `input` [...], as [..., dim], as
/// torch.nn.functional.embedding (index_select: the gradient adds each row's uses, scatter_add's fixed order;
/// an index outside [0, num_embeddings) is an error naming embedding). With padding_idx (negative counts from
/// the end), that row's uses read it but send it no gradient. With max_norm, the rows the input references whose
/// norm_type-norm exceeds max_norm are first scaled IN PLACE (weight.assign, without gradient, as torch's
/// embedding_renorm_) by max_norm / (norm + 1e-7); max_norm >= 0 and finite, norm_type > 0 or infinity.
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt,
                 std::optional<double> max_norm = std::nullopt, double norm_type = 2, Loc loc = Loc::current());
/// Options of embedding_bag, in PyTorch's argument order (designated initializers: `{.offsets = o, .mode = "sum"}`).
struct EmbeddingBagOptions {
  /// i32 or i64 [B] (or [B + 1] with include_last_offset): where each bag of a 1-d input starts; undefined for
  /// a 2-d input, whose rows are the bags. Offsets already computed are checked (offsets[0] == 0, not
  /// decreasing, at most the input's length).
  Tensor offsets{};
  std::optional<double> max_norm{}; ///< as embedding's: the referenced rows renormalized in place first
  double norm_type = 2; ///< the p of max_norm's norm
  std::string mode = "mean"; ///< "sum", "mean" or "max" over each bag's rows
  Tensor per_sample_weights{}; ///< mode "sum" only: a weight per index (the input's shape, the weight's dtype)
  bool include_last_offset = false; ///< the offsets end with the last bag's end (B + 1; what lies past is in no bag)
  std::optional<int64_t> padding_idx{}; ///< that row's uses count in no bag (nor in a mean's count)
};
/// Sums, means or maxima of bags of rows of weight [num_embeddings, dim], as torch.nn.functional.embedding_bag:
/// [B, dim] for B bags, an empty bag (or one of padding only) giving zeros. The input is 1-d with
/// options.offsets, or 2-d [B, N] (B bags of N). "max" sends each output element's gradient to the first
/// maximal row of its bag (PyTorch's max_indices); its slots take the longest bag's length, read from offsets
/// already computed (else the input's length, a bound). scale_grad_by_freq and sparse are not offered.
Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagOptions& options = {},
                     Loc loc = Loc::current());

// ---------------------------------------------------------------- layers
/// x W^T + b for x [..., in], weight [out, in], optional bias [out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Loc loc = Loc::current());
/// y[..., o] = x1[..., :] weight[o] x2[..., :] + bias[o] for x1 [..., in1], x2 [..., in2] (the same leading dims),
/// weight [out, in1, in2] and an optional bias [out], as torch.nn.functional.bilinear: one [B, in1] x [in1, out * in2]
/// product and one batched product with x2.
Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias = Tensor(),
                Loc loc = Loc::current());
/// 2-d cross-correlation of x [N, C, H, W] (or unbatched [C, H, W], as PyTorch) with weight [O, C/groups, kh, kw]
/// (im2col + matmul), with torch.nn.functional.conv2d's defaults (no bias, stride 1, padding 0, dilation 1, one group).
/// The padding may be "valid" (none) or "same" (stride 1 only: the output has the input's extents; see PaddingMode).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Size2& stride = 1,
              const Padding2& padding = 0, const Size2& dilation = 1, int64_t groups = 1, Loc loc = Loc::current());
/// 1-d cross-correlation of x [N, C, L] (or unbatched [C, L]) with weight [out, C/groups, k], as
/// torch.nn.functional.conv1d with its defaults (no bias, stride 1, padding 0, dilation 1, one group):
/// conv2d over a unit height, so its kernels and gradients are conv2d's. The padding may be "valid" or "same"
/// (stride 1 only), as conv2d's.
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              const Padding1& padding = 0, int64_t dilation = 1, int64_t groups = 1, Loc loc = Loc::current());
/// 3-d cross-correlation of x [N, C, D, H, W] (or unbatched [C, D, H, W]) with weight [O, C/groups, kd, kh, kw],
/// as torch.nn.functional.conv3d with its defaults: the depth windows moved into the channels ([N * Do, C * kd,
/// H, W]) and conv2d's im2col and GEMM, so its gradients are conv2d's. The padding is explicit zeros per dim
/// (no "same" or "valid" strings).
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Size3& stride = 1,
              const Size3& padding = 0, const Size3& dilation = 1, int64_t groups = 1, Loc loc = Loc::current());
/// 2-d transposed convolution ("deconvolution", conv2d's input gradient) of x [N, C, H, W] (or unbatched
/// [C, H, W]) with weight [C, out/groups, kh, kw], as torch.nn.functional.conv_transpose2d in its argument order
/// and defaults: output extents (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1, where
/// output_padding (added at the end only) must be smaller than the stride or the dilation. Its gradients are a
/// conv2d (input) and a product of conv2d's columns (weight); it has a forward-mode (jvp) rule.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Size2& stride = 1,
                        const Size2& padding = 0, const Size2& output_padding = 0, int64_t groups = 1,
                        const Size2& dilation = 1, Loc loc = Loc::current());
/// 3-d transposed convolution of x [N, C, D, H, W] (or unbatched [C, D, H, W]) with weight [C, out/groups, kd, kh,
/// kw], as torch.nn.functional.conv_transpose3d (its argument order, defaults, output extents and output_padding
/// rule): one conv_transpose2d of every depth slice with the depth taps as output channels, whose slabs are spread
/// by the depth stride, shifted by tap * dilation, summed and cropped by the padding.
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Size3& stride = 1,
                        const Size3& padding = 0, const Size3& output_padding = 0, int64_t groups = 1,
                        const Size3& dilation = 1, Loc loc = Loc::current());
/// 1-d transposed convolution of x [N, C, L] (or unbatched [C, L]) with weight [C, out/groups, k], as
/// torch.nn.functional.conv_transpose1d (its argument order and defaults): conv_transpose2d over a unit height.
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
                        int64_t padding = 0, int64_t output_padding = 0, int64_t groups = 1, int64_t dilation = 1,
                        Loc loc = Loc::current());
/// Max over windows of x [N, C, H, W] (or unbatched [C, H, W]); padding counts as -infinity. As torch.nn.functional.max_pool2d,
/// ceil_mode keeps a partial last window when it starts inside the input or the left padding. Its
/// gradient goes, as PyTorch's, to each window's first maximal element (row-major in the window),
/// none to the others tied with it (a window of -infinity only: possibly to its padding, so lost).
Tensor max_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding = 0,
                  const Size2& dilation = 1, bool ceil_mode = false, Loc loc = Loc::current());
/// max_pool2d with the stride omitted (or std::nullopt): PyTorch's default, the kernel size.
Tensor max_pool2d(const Tensor& x, const Size2& kernel, std::nullopt_t stride = std::nullopt, const Size2& padding = 0,
                  const Size2& dilation = 1, bool ceil_mode = false, Loc loc = Loc::current());
/// Mean over windows of x [N, C, H, W] (or unbatched [C, H, W]), as torch.nn.functional.avg_pool2d: each window divides by the
/// number of input elements it covers, plus its zero padding when count_include_pad (never
/// ceil_mode's overhang past the padding); with a divisor_override (non-zero), every window's sum divides by it.
Tensor avg_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt, Loc loc = Loc::current());
/// avg_pool2d with the stride omitted (or std::nullopt): PyTorch's default, the kernel size.
Tensor avg_pool2d(const Tensor& x, const Size2& kernel, std::nullopt_t stride = std::nullopt, const Size2& padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt, Loc loc = Loc::current());
/// Max over windows of x [N, C, D, H, W] (or unbatched [C, D, H, W]), as torch.nn.functional.max_pool3d:
/// max_pool2d of each depth tap's slice, then the max over the depth taps (ceil_mode, padding at most half the
/// kernel, and the gradient to each window's first maximum in (d, h, w) order, as max_pool2d's). The stride
/// defaults to the kernel size.
Tensor max_pool3d(const Tensor& x, const Size3& kernel, std::optional<Size3> stride = std::nullopt,
                  const Size3& padding = 0, const Size3& dilation = 1, bool ceil_mode = false,
                  Loc loc = Loc::current());
/// Mean over windows of x [N, C, D, H, W] (or unbatched [C, D, H, W]), as torch.nn.functional.avg_pool3d
/// (avg_pool2d's ceil_mode, count_include_pad and divisor_override): avg_pool2d of each depth slice, then the
/// mean over the depth windows (PyTorch sums the window at once: an ulp apart).
Tensor avg_pool3d(const Tensor& x, const Size3& kernel, std::optional<Size3> stride = std::nullopt,
                  const Size3& padding = 0, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt, Loc loc = Loc::current());
/// Max over windows of x [N, C, L] (or unbatched [C, L]), as torch.nn.functional.max_pool1d: max_pool2d over a
/// unit height (the same ceil_mode, padding at most half the kernel, gradient to each window's first maximum);
/// the stride defaults to the kernel size.
Tensor max_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  int64_t dilation = 1, bool ceil_mode = false, Loc loc = Loc::current());
/// Mean over windows of x [N, C, L] (or unbatched [C, L]), as torch.nn.functional.avg_pool1d: avg_pool2d over a
/// unit height (the same ceil_mode and count_include_pad); the stride defaults to the kernel size.
Tensor avg_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true, Loc loc = Loc::current());
/// max_pool2d and, as torch.nn.functional.max_pool2d(..., return_indices=True) (torch's
/// max_pool2d_with_indices), the i64 index h * W + w in its input plane of the element each window takes
/// (its first maximum in row-major order, or its last NaN: the one its gradient goes to). The stride defaults
/// to the kernel size. `auto [y, i] = max_pool2d_with_indices(x, 2);`
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Size2& kernel,
                                                  std::optional<Size2> stride = std::nullopt, const Size2& padding = 0,
                                                  const Size2& dilation = 1, bool ceil_mode = false,
                                                  Loc loc = Loc::current());
/// max_pool1d and the i64 position in its input row of the element each window takes, as
/// torch.nn.functional.max_pool1d(..., return_indices=True).
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel,
                                                  std::optional<int64_t> stride = std::nullopt, int64_t padding = 0,
                                                  int64_t dilation = 1, bool ceil_mode = false,
                                                  Loc loc = Loc::current());
/// The partial inverse of max_pool2d, as torch.nn.functional.max_unpool2d: zeros [N, C, Ho, Wo] (or unbatched
/// [C, Ho, Wo]) with each element of x [N, C, H, W] placed at its flat index h * Wo + w of `indices` (x's shape,
/// i32 or i64; max_pool2d_with_indices's), the last one winning where indices repeat. The output extents are
/// (H - 1) * stride - 2 * padding + kernel, or output_size's ({Ho, Wo} or the whole shape), which must lie
/// strictly within one stride of those. The gradient gathers the output's at the indices. The stride defaults
/// to the kernel size. An index outside the plane is an error (of max_unpool2d: on the host for indices
/// already computed, else in the kernel).
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Size2& kernel,
                    std::optional<Size2> stride = std::nullopt, const Size2& padding = 0,
                    const IntList& output_size = {}, Loc loc = Loc::current());
/// The partial inverse of max_pool1d on x [N, C, L] (or [C, L]), as torch.nn.functional.max_unpool1d (see
/// max_unpool2d; output_size is {Lo} or the whole shape).
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t kernel,
                    std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, const IntList& output_size = {},
                    Loc loc = Loc::current());
/// Power-average pooling of x [N, C, H, W] (or [C, H, W]), as torch.nn.functional.lp_pool2d of PyTorch 1.13:
/// with a = avg_pool2d(x^p, kernel, stride, 0, ceil_mode), (sign(a) relu(|a|) kh kw)^(1/p), so a ceil_mode
/// partial window's sum is scaled by kh kw over the count it covers, as PyTorch's. The stride defaults to the
/// kernel size.
Tensor lp_pool2d(const Tensor& x, double norm_type, const Size2& kernel, std::optional<Size2> stride = std::nullopt,
                 bool ceil_mode = false, Loc loc = Loc::current());
/// Power-average pooling of x [N, C, L] (or [C, L]), as torch.nn.functional.lp_pool1d (see lp_pool2d).
Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel, std::optional<int64_t> stride = std::nullopt,
                 bool ceil_mode = false, Loc loc = Loc::current());
/// im2col, as torch.nn.functional.unfold (its argument order): the sliding blocks of x [N, C, H, W] (or [C, H, W])
/// as columns [N, C * kh * kw, L] (L blocks, row-major), each column's rows (c, i, j) the tap (i, j) of
/// channel c, zero padding counted. The views conv2d's im2col reads, so its gradient is their sum. Not to be
/// confused with kiln::unfold (Tensor.unfold: the windows along one dim).
Tensor unfold(const Tensor& x, const Size2& kernel_size, const Size2& dilation = 1, const Size2& padding = 0,
              const Size2& stride = 1, Loc loc = Loc::current());
/// col2im, as torch.nn.functional.fold: the columns x [N, C * kh * kw, L] (or [C * kh * kw, L]) summed back
/// into [N, C, output_size] (or [C, ...]), each tap added in order where unfold read it (the same bits as
/// PyTorch's col2im); L must be the number of blocks that fit in the padded output_size. unfold's adjoint.
Tensor fold(const Tensor& x, const Size2& output_size, const Size2& kernel_size, const Size2& dilation = 1,
            const Size2& padding = 0, const Size2& stride = 1, Loc loc = Loc::current());
/// Mean over PyTorch's adaptive windows of x [N, C, H, W] (or unbatched [C, H, W]), as
/// torch.nn.functional.adaptive_avg_pool2d: output (i, j) averages rows [floor(i H / Ho), ceil((i + 1) H / Ho))
/// and the columns likewise, for output_size (Ho, Wo) (0 gives an empty output). Built from index_select,
/// reshape and sum, per dim (the columns' means, then the rows'), so its rounding differs from PyTorch's one
/// sum over the window by an ulp or so. Errors: the rank, a non-floating input, a negative output extent,
/// an empty H or W. Unlike PyTorch's, output_size has no "None" entry (keep that extent): give the extent.
Tensor adaptive_avg_pool2d(const Tensor& x, const Size2& output_size, Loc loc = Loc::current());
/// torch.nn.functional.adaptive_avg_pool3d: adaptive_avg_pool2d's windows along D, H and W of [N, C, D, H, W]
/// (or unbatched [C, D, H, W]).
Tensor adaptive_avg_pool3d(const Tensor& x, const Size3& output_size, Loc loc = Loc::current());
/// Mean over PyTorch's adaptive windows of x [N, C, L] (or unbatched [C, L]), as
/// torch.nn.functional.adaptive_avg_pool1d: output i averages [floor(i L / Lo), ceil((i + 1) L / Lo)).
Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size, Loc loc = Loc::current());
/// [*, C r^2, H, W] -> [*, C, H r, W r], as torch.nn.functional.pixel_shuffle (a reshape, a permute and a
/// reshape); the channels must be divisible by r^2.
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor, Loc loc = Loc::current());
/// [*, C, H r, W r] -> [*, C r^2, H, W], pixel_shuffle's inverse, as torch.nn.functional.pixel_unshuffle.
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor, Loc loc = Loc::current());
/// The channels of x [N, C, *] regrouped: [N, g, C / g, *] with the two group dims swapped, as
/// torch.nn.functional.channel_shuffle (ShuffleNet); C must be divisible by groups.
Tensor channel_shuffle(const Tensor& x, int64_t groups, Loc loc = Loc::current());
/// The sampling grid [N, H, W, 2] of the affine maps theta [N, 2, 3] (floating) for an output of `size`
/// {N, C, H, W}, or [N, D, H, W, 3] of theta [N, 3, 4] for {N, C, D, H, W}, as torch.nn.functional.affine_grid:
/// theta applied to the (x, y, (z,) 1) of each output point's normalized center (align_corners false:
/// (2i + 1) / W - 1) or corner (true: -1 ... 1); one matmul.
Tensor affine_grid(const Tensor& theta, const IntList& size, bool align_corners = false, Loc loc = Loc::current());
/// Options of grid_sample, in PyTorch's argument order (designated initializers: `{.mode = "nearest"}`).
struct GridSampleOptions {
  /// "bilinear" (trilinear for a 5-d input), "nearest" (halves rounded to even on 4-d input, away from zero on
  /// 5-d, as PyTorch's CPU kernels) or "bicubic" (4-d input only: PyTorch's cubic convolution, A = -0.75, over
  /// the 4 x 4 pixels around the point)
  std::string mode = "bilinear";
  /// "zeros", "border" (clipped) or "reflection" (mirrored, then clipped); "bicubic" clips or reflects each of its
  /// 16 taps' coordinates instead of the point's, as PyTorch's
  std::string padding_mode = "zeros";
  bool align_corners = false; ///< true: -1 and 1 are the corner pixels' centers; false: their outer edges
};
/// input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] ((x, y) in [-1, 1]), or input [N, C, D, H, W] at grid
/// [N, Do, Ho, Wo, 3] ((x, y, z)), as torch.nn.functional.grid_sample: [N, C, Ho, Wo] or [N, C, Do, Ho, Wo].
/// Built from gathers of the input and the taps' weights, so the gradient of the input (scatter-added) and of
/// the grid (through the weights; 0 for "nearest", and at border and reflection clips, as PyTorch's) come from
/// autograd. A NaN coordinate, as PyTorch's CPU kernels: on 4-d input it gives NaN with "zeros" padding
/// ("nearest": 0) and is clipped to 0 by "border" and "reflection"; on 5-d input it gives 0 with "zeros" padding
/// and is clipped to the far border by the others; "bicubic" gives NaN.
Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& options = {},
                   Loc loc = Loc::current());
/// Max over PyTorch's adaptive windows of x [N, C, H, W] (or unbatched [C, H, W]), as
/// torch.nn.functional.adaptive_max_pool2d (adaptive_avg_pool2d's windows and checks). Its gradient goes to the
/// element adaptive_max_pool2d_with_indices names.
Tensor adaptive_max_pool2d(const Tensor& x, const Size2& output_size, Loc loc = Loc::current());
/// adaptive_max_pool2d and, as its return_indices=True, the i64 index h * W + w in the input plane of each
/// window's first maximum (row-major), or of its last NaN.
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, const Size2& output_size,
                                                           Loc loc = Loc::current());
/// Max over PyTorch's adaptive windows of x [N, C, L] (or unbatched [C, L]), as
/// torch.nn.functional.adaptive_max_pool1d.
Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size, Loc loc = Loc::current());
/// adaptive_max_pool1d and the i64 position in the input row of each window's first maximum (or last NaN).
std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& x, int64_t output_size,
                                                           Loc loc = Loc::current());
/// Options of interpolate, in PyTorch's argument order (designated initializers:
/// `{.size = {8, 8}, .mode = "bilinear"}`, `{.scale_factor = {2}}`). Give exactly one of size and scale_factor;
/// either lists one value per spatial dim, or one value for every spatial dim (Python's int or float).
struct InterpolateOptions {
  IntList size{};                     ///< the output's spatial extents (empty: from scale_factor)
  std::vector<double> scale_factor{}; ///< the output's extents are floor(input extent * scale_factor)
  /// "nearest" (torch's legacy nearest: source floor(dst * scale)), "nearest-exact" (floor((dst + 0.5) * scale)),
  /// linear interpolation: "linear" of [N, C, L], "bilinear" of [N, C, H, W], "trilinear" of [N, C, D, H, W],
  /// "bicubic" of [N, C, H, W] (PyTorch's cubic convolution, A = -0.75, the border repeated), or "area"
  /// (adaptive average pooling to the output size, any rank).
  std::string mode = "nearest";
  /// The interpolating modes only (linear, bilinear, bicubic, trilinear; unset means false): true maps the corner
  /// samples of input and output onto each other (scale (in - 1) / (out - 1)), false their outer edges (source
  /// (dst + 0.5) * scale - 0.5).
  std::optional<bool> align_corners{};
  /// With scale_factor: unset or false (PyTorch 1.13's default), the source coordinates use 1 / scale_factor;
  /// true, in / out of the computed size, as if that size had been given.
  std::optional<bool> recompute_scale_factor{};
};
/// Resamples the spatial dims of x [N, C, L], [N, C, H, W] or [N, C, D, H, W] (floating), as
/// torch.nn.functional.interpolate of PyTorch 1.13: its CPU kernels' index arithmetic (in f32 for an f32 input)
/// and their shortcuts (the linear modes copy an extent kept; 2-d and 3-d "nearest" copy an extent kept and
/// take dst / 2 for one doubled, whatever the scale_factor; "bicubic" keeps no shortcut). Each dim is an
/// index_select (two, weighted, for the linear modes, four for "bicubic"; "area" is adaptive_avg_pool's), so the
/// gradient is theirs, and it fuses and compiles as any op. "bicubic" in f32 is within a few 1e-6 (relative to
/// max(1, |value|)) of PyTorch's, whose kernel rounds its weights and products differently; in f64, an ulp or
/// so. The gradient is that of the values, also where PyTorch's 1-d "nearest" backward takes shortcuts its
/// forward does not (a scale_factor giving the input's extent or twice it). Errors: a mode unknown or not for
/// this rank, size and scale_factor both or neither given, align_corners with a nearest mode or "area", an empty
/// input (but for the batch) or output, a non-floating input.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options, Loc loc = Loc::current());
/// torch.nn.functional.upsample: interpolate.
Tensor upsample(const Tensor& x, const InterpolateOptions& options, Loc loc = Loc::current());
/// torch.nn.functional.upsample_nearest: interpolate in mode "nearest" to `size`, or (size empty) by `scale_factor`.
Tensor upsample_nearest(const Tensor& x, IntList size, std::vector<double> scale_factor = {}, Loc loc = Loc::current());
/// torch.nn.functional.upsample_bilinear: interpolate in mode "bilinear" with align_corners (as PyTorch's).
Tensor upsample_bilinear(const Tensor& x, IntList size, std::vector<double> scale_factor = {},
                         Loc loc = Loc::current());
/// (x - mean) / sqrt(var + eps) * weight + bias over the trailing dims of `normalized_shape`.
Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5, Loc loc = Loc::current());
/// x / sqrt(mean(x^2) + eps) * weight over the trailing dims of `normalized_shape`, as
/// torch.nn.functional.rms_norm; eps defaults to the machine epsilon of x's dtype.
Tensor rms_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt, Loc loc = Loc::current());
/// Batch normalization over all dims but dim 1 of x [N, C, ...]. With `training`, normalizes by the
/// batch mean and biased variance and, when the running statistics are defined, assign()s them
/// (1 - momentum) * running + momentum * batch (the variance unbiased), as torch.nn.functional.batch_norm;
/// without, normalizes by the running statistics. weight and bias [C] are optional; all four must be floating.
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), bool training = true, double momentum = 0.1, double eps = 1e-5,
                  Loc loc = Loc::current());
/// Group normalization of x [N, C, ...] (C divisible by num_groups), as torch.nn.functional.group_norm: the
/// channels split into num_groups groups, each group of each sample normalized by its mean and biased
/// variance (layer_norm over the group's channels and spatial dims), then scaled by weight [C] and shifted
/// by bias [C] per channel (both optional).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5, Loc loc = Loc::current());
/// Instance normalization of x [N, C, ...], as torch.nn.functional.instance_norm: with use_input_stats,
/// each channel of each sample normalized by its own mean and biased variance over the spatial dims
/// (more than one spatial element needed), and, where defined, the running statistics [C] assign()ed
/// (1 - momentum) * running + momentum * (the statistic averaged over the batch; the variance unbiased);
/// without, normalized by the running statistics, as batch_norm's evaluation mode. Then weight [C] and
/// bias [C] per channel (both optional).
Tensor instance_norm(const Tensor& x, Tensor running_mean = Tensor(), Tensor running_var = Tensor(),
                     const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool use_input_stats = true,
                     double momentum = 0.1, double eps = 1e-5, Loc loc = Loc::current());
/// Zeroes elements with probability p in [0, 1] (mask from `seed`) and scales the rest by 1/(1-p); p = 1 gives
/// x * 0 (zeros, NaN for a non-finite x, as PyTorch); identity unless training.
Tensor dropout(const Tensor& x, double p, uint64_t seed, bool training = true, Loc loc = Loc::current());
/// Channel dropout, as torch.nn.functional.dropout1d: each channel (dim 1 of [N, C, L]; dim 0 of an unbatched
/// [C, L]) is zeroed whole with probability p (mask from `seed`) and the rest scaled by 1/(1-p); identity unless
/// training. Other ranks are an error.
Tensor dropout1d(const Tensor& x, double p, uint64_t seed, bool training = true, Loc loc = Loc::current());
/// Channel dropout of [N, C, H, W], or [N, C, L] (channel-wise 1-d, as PyTorch 1.13 takes a 3-d input), as
/// torch.nn.functional.dropout2d; other ranks are an error (PyTorch 1.13 warns and drops channels of dim 1).
Tensor dropout2d(const Tensor& x, double p, uint64_t seed, bool training = true, Loc loc = Loc::current());
/// Channel dropout of [N, C, D, H, W], or an unbatched [C, D, H, W], as torch.nn.functional.dropout3d.
Tensor dropout3d(const Tensor& x, double p, uint64_t seed, bool training = true, Loc loc = Loc::current());
/// Alpha dropout (for SELU networks), as torch.nn.functional.alpha_dropout: each element kept with probability
/// 1 - p (mask from `seed`) as a x + alpha a p, else alpha a p - alpha a, with alpha = 1.7580993408473766 and
/// a = 1 / sqrt((alpha^2 p + 1)(1 - p)), so that a zero-mean unit-variance input keeps its mean and variance;
/// p = 1 gives zeros; identity unless training.
Tensor alpha_dropout(const Tensor& x, double p, uint64_t seed, bool training = true, Loc loc = Loc::current());
/// alpha_dropout of whole channels (one draw per [N, C] of an input of 2 or more dims), as
/// torch.nn.functional.feature_alpha_dropout.
Tensor feature_alpha_dropout(const Tensor& x, double p, uint64_t seed, bool training = true, Loc loc = Loc::current());

// ---------------------------------------------------------------- norms and distances
/// x divided by its p-norm along dim (at least eps), as torch.nn.functional.normalize: x / max(norm, eps),
/// the norm kiln::norm's; where the norm is below eps, no gradient flows through it (clamp_min's).
Tensor normalize(const Tensor& x, double p = 2, int64_t dim = 1, double eps = 1e-12, Loc loc = Loc::current());
/// The cosine of the angle between x1 and x2 along dim, which broadcast (a floating common dtype), as
/// torch.nn.functional.cosine_similarity of PyTorch 1.13: sum((x1 / max(|x1|, eps)) * (x2 / max(|x2|, eps)))
/// over dim, the 2-norms taken along dim. The gradient is PyTorch's (whose clamp_min_ runs in place under
/// no_grad): through a norm below eps it is x / eps, the norm's gradient evaluated at the clamped value.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8,
                         Loc loc = Loc::current());
/// The p-norm of x1 - x2 + eps along the last dim of their broadcast shape, as
/// torch.nn.functional.pairwise_distance (kiln::norm's orders and gradients).
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2, double eps = 1e-6, bool keepdim = false,
                         Loc loc = Loc::current());
/// torch.nn.functional.pdist: kiln::pdist (kiln/linalg.h).
Tensor pdist(const Tensor& x, double p = 2, Loc loc = Loc::current());

/// Local response normalization across channels (dim 1) of x [N, C, ...] (rank >= 3), as
/// torch.nn.functional.local_response_norm: x / (k + alpha * mean of x^2 over the `size` channels around each
/// one, zero-padded: size / 2 before, (size - 1) / 2 after)^beta. A zero-size x gives itself.
Tensor local_response_norm(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0,
                           Loc loc = Loc::current());

// ---------------------------------------------------------------- losses
/// Options of cross_entropy, in PyTorch's argument order (designated initializers: `{.ignore_index = 0}`).
struct CrossEntropyOptions {
  Tensor weight{};                       ///< optional [C] class weights (a rescaling of each class's loss)
  int64_t ignore_index = -100;           ///< targets equal to it add nothing, to the sum or to the mean's count
  Reduction reduction = Reduction::Mean; ///< mean over the (weights of the) non-ignored targets by default
  double label_smoothing = 0.0;          ///< in [0, 1]: mixes the target with the uniform distribution
};
/// Cross entropy from logits [N, C, d1, ...] (or [C]) and integer class targets [N, d1, ...] (or [])
/// of i32 or i64, as torch.nn.functional.cross_entropy: per element (1 - s) * w[t] * nll +
/// s / C * sum over classes c of w[c] * -log_softmax (w = 1 without weights; 0 where ignored), and
/// the mean divides the sum by the sum of w[t] over the non-ignored targets (NaN when all are
/// ignored). A target outside [0, C) that is not ignore_index is an error (in the kernel when lazy).
/// Floating targets of the logits' shape are class probabilities (PyTorch's soft labels): per element
/// -sum over c of w[c] q[c] log_softmax[c] with q = (1 - s) p + s / C, and the mean divides by the
/// number of elements (not by weights); ignore_index is not supported there.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options = {},
                     Loc loc = Loc::current());
/// Options of nll_loss, in PyTorch's argument order.
struct NllLossOptions {
  Tensor weight{};                       ///< optional [C] class weights
  int64_t ignore_index = -100;           ///< targets equal to it add nothing
  Reduction reduction = Reduction::Mean; ///< mean over the (weights of the) non-ignored targets by default
};
/// Negative log likelihood from log-probabilities [N, C, d1, ...] (or [C]) and integer targets
/// [N, d1, ...] (or []), as torch.nn.functional.nll_loss: -w[t] * log_probs[t] per element (0 where
/// the target is ignore_index); the mean divides by the sum of w[t] over the non-ignored targets.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NllLossOptions options, Loc loc = Loc::current());
/// nll_loss with the default weight and ignore_index and the given reduction.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction = Reduction::Mean,
                Loc loc = Loc::current());
/// (input - target)^2, reduced. The shapes must be equal (PyTorch broadcasts them, with a warning).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                Loc loc = Loc::current());
/// |input - target|, reduced, as torch.nn.functional.l1_loss; its gradient is sign(input - target)
/// (0 where they are equal). The shapes must be equal (PyTorch broadcasts them, with a warning).
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
               Loc loc = Loc::current());
/// As torch.nn.functional.smooth_l1_loss: with d = |input - target|, 0.5 d^2 / beta where d < beta, else
/// d - 0.5 beta, reduced; beta must be >= 0, and beta = 0 is l1_loss, except that where input equals target
/// the input's gradient is -1, as PyTorch's smooth_l1 backward, not l1_loss's 0 (the target's is +1 there,
/// PyTorch's -1). The shapes must be equal.
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                      double beta = 1.0, Loc loc = Loc::current());
/// As torch.nn.functional.huber_loss: with d = |input - target|, 0.5 d^2 where d < delta, else
/// delta (d - 0.5 delta), reduced (smooth_l1_loss times delta, for beta = delta); delta must be > 0. The
/// shapes must be equal.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                  double delta = 1.0, Loc loc = Loc::current());
/// Kullback-Leibler divergence of `input`, log-probabilities, from `target`, as
/// torch.nn.functional.kl_div: per element target (log target - input), 0 where target is 0 (xlogy), or
/// exp(target) (target - input) with log_target (the target as log-probabilities). Input and target
/// broadcast; Mean averages over every element (PyTorch 1.13's "mean"), BatchMean divides the sum by
/// the input's first extent (the sum for a 0-d input), the KL divergence of a batch. The gradient with
/// respect to a target of 0 is -input (PyTorch's is NaN, 0 / 0 in xlogy's derivative).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
              bool log_target = false, Loc loc = Loc::current());
/// Binary cross entropy of probabilities `input` in [0, 1] against `target` of the same shape, as
/// torch.nn.functional.binary_cross_entropy: -weight (target log(input) + (1 - target) log(1 - input)) per
/// element, each log clamped at -100 (so input 0 or 1 gives at most 100); the optional weight broadcasts to
/// the input's shape. An input outside [0, 1] is an error when it is already computed (as PyTorch's check),
/// NaN when lazy. The gradients are those of this formula: where a log is clamped (input 0 or 1, or
/// below e^-100) it passes none, where PyTorch's divides by max(input (1 - input), 1e-12).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::Mean, Loc loc = Loc::current());
/// binary_cross_entropy without a weight and with the given reduction.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc = Loc::current());
/// Options of binary_cross_entropy_with_logits, in PyTorch's argument order (designated initializers:
/// `{.pos_weight = w}`).
struct BinaryCrossEntropyWithLogitsOptions {
  Tensor weight{};                       ///< optional rescaling of each element's loss, broadcast to the input's shape
  Reduction reduction = Reduction::Mean; ///< the mean over the elements by default
  Tensor pos_weight{}; ///< optional weight of the positive term, broadcast to the input's shape (a [C] for [N, C])
};
/// Binary cross entropy of sigmoid(logits) against targets in [0, 1] of the same shape, as
/// torch.nn.functional.binary_cross_entropy_with_logits: weight ((1 - y) softplus(x) + p y softplus(-x))
/// per element, p the pos_weight (1 without), computed stably as (1 - y) x + l log(1 + exp(-|x|)) for
/// x >= 0 and -p y x + l log(1 + exp(-|x|)) below, l = 1 + (p - 1) y.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets,
                                        BinaryCrossEntropyWithLogitsOptions options, Loc loc = Loc::current());
/// binary_cross_entropy_with_logits without weights and with the given reduction.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets,
                                        Reduction reduction = Reduction::Mean, Loc loc = Loc::current());

/// max(0, -target (input1 - input2) + margin), reduced, as torch.nn.functional.margin_ranking_loss: the three
/// must have one rank and broadcast; target holds 1 or -1. The gradient at the kink is 1 (PyTorch's clamp_min).
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0,
                           Reduction reduction = Reduction::Mean, Loc loc = Loc::current());
/// input where target is 1, max(0, margin - input) where it is -1 (both terms where it is neither), reduced, as
/// torch.nn.functional.hinge_embedding_loss (input and target broadcast).
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin = 1.0,
                            Reduction reduction = Reduction::Mean, Loc loc = Loc::current());
/// log(1 + exp(-target input)), reduced, as torch.nn.functional.soft_margin_loss (broadcast).
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                        Loc loc = Loc::current());
/// -(target logsigmoid(input) + (1 - target) logsigmoid(-input)), times the optional weight, averaged over the
/// last (class) dim, then reduced over the samples, as torch.nn.functional.multilabel_soft_margin_loss.
Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                   Reduction reduction = Reduction::Mean, Loc loc = Loc::current());
/// Options of multi_margin_loss, in PyTorch's argument order.
struct MultiMarginLossOptions {
  int64_t p = 1;                         ///< 1 or 2: the power of each hinge
  double margin = 1.0;                   ///< the margin
  Tensor weight{};                       ///< optional floating [C]: each sample's loss times weight[target]
  Reduction reduction = Reduction::Mean; ///< mean over the samples by default
};
/// The multi-class hinge loss of input [N, C] (or [C]) and integer targets [N] (or one), as
/// torch.nn.functional.multi_margin_loss: per sample sum over i != y of max(0, margin - x[y] + x[i])^p (times
/// weight[y]) / C. The gradient at a hinge of 0 is 0, as PyTorch's. A target outside [0, C) is an error (in the
/// kernel when lazy).
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, MultiMarginLossOptions options = {},
                         Loc loc = Loc::current());
/// The multi-label hinge loss of input [N, C] (or [C]) and integer targets of its shape, as
/// torch.nn.functional.multilabel_margin_loss: each row of targets lists class indices up to its first -1; per
/// sample the sum over listed classes j and unlisted classes i of max(0, 1 - (x[j] - x[i])), divided by C.
Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean,
                              Loc loc = Loc::current());
/// Options of triplet_margin_loss, in PyTorch's argument order.
struct TripletMarginLossOptions {
  double margin = 1.0;                   ///< the margin
  double p = 2;                          ///< the norm of the distances (pairwise_distance's)
  double eps = 1e-6;                     ///< added to the differences (pairwise_distance's)
  bool swap = false;                     ///< use min(d(a, n), d(p, n)) as the negative distance
  Reduction reduction = Reduction::Mean; ///< mean over the triplets by default
};
/// max(0, margin + d(anchor, positive) - d(anchor, negative)), reduced, as torch.nn.functional.triplet_margin_loss:
/// d is pairwise_distance (p, eps) along the last dim; the three have one rank, 1 or 2.
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           TripletMarginLossOptions options = {}, Loc loc = Loc::current());
/// 1 - cos(x1, x2) where target is 1, max(0, cos - margin) where it is -1, reduced, as
/// torch.nn.functional.cosine_embedding_loss: x1, x2 [N, D] with target [N], or [D] with a 0-d target; the cosine
/// is PyTorch's sum(x1 x2) / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)).
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0,
                             Reduction reduction = Reduction::Mean, Loc loc = Loc::current());
/// Options of poisson_nll_loss, in PyTorch's argument order.
struct PoissonNllLossOptions {
  bool log_input = true;                 ///< input is log(rate) (else the rate itself)
  bool full = false;                     ///< add Stirling's term target log(target) - target + log(2 pi target) / 2
  double eps = 1e-8;                     ///< added to the rate inside the log when !log_input
  Reduction reduction = Reduction::Mean; ///< mean over the elements by default
};
/// The Poisson negative log likelihood, as torch.nn.functional.poisson_nll_loss: exp(input) - target input with
/// log_input, else input - target log(input + eps); with `full`, Stirling's term where target > 1. Broadcast.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, PoissonNllLossOptions options = {},
                        Loc loc = Loc::current());
/// Options of gaussian_nll_loss, in PyTorch's argument order.
struct GaussianNllLossOptions {
  bool full = false;                     ///< add log(2 pi) / 2
  double eps = 1e-6;                     ///< var is clamped at eps (the gradient passes as if it were not)
  Reduction reduction = Reduction::Mean; ///< mean over the elements by default
};
/// The Gaussian negative log likelihood (log(var) + (input - target)^2 / var) / 2, as
/// torch.nn.functional.gaussian_nll_loss: var has input's shape, or input's without its last dim, or with a last
/// extent of 1 (one variance for the last dim); target broadcasts. A negative var is an error when var is already
/// computed (PyTorch's check); a lazy one is clamped at eps.
Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                         GaussianNllLossOptions options = {}, Loc loc = Loc::current());

} // namespace kiln::nn::functional

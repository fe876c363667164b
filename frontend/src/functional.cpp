// nn::functional: activations, normalizations, convolution, pooling and losses,
// written with kiln's primitive ops so that autograd differentiates them and
// the scheduler fuses them.

#include "kiln/functional.h"

#include <cmath>
#include <limits>
#include <numeric>

#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/index_check.h"
#include "kiln/autograd.h"

namespace kiln::nn::functional {

namespace {

[[noreturn]] void fail(const std::string& op, const std::string& what, std::initializer_list<const Tensor*> ts,
                       const Loc& loc) {
  detail::fail(op, what, ts, loc);
}

void require_floating(const std::string& op, const Tensor& x, const Loc& loc) {
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (!is_floating(x.dtype())) fail(op, "needs a floating tensor", {&x}, loc);
}

void require_integral(const std::string& op, const Tensor& t, const Loc& loc) {
  if (!t.defined()) throw Error(op, "the targets are undefined", loc);
  if (!is_integral(t.dtype())) fail(op, "needs integer (i32 or i64) class indices", {&t}, loc);
}

Tensor reduce(const Tensor& per_element, Reduction r) {
  switch (r) {
  case Reduction::Mean: return per_element.mean();
  case Reduction::Sum: return per_element.sum();
  case Reduction::None: return per_element;
  }
  return per_element;
}

// When the class indices are already computed (data from a loader), checks that
// they lie in [0, classes): a lazy index tensor is not forced just to check it.
void check_class_range(const std::string& op, const Tensor& targets, int64_t classes, const Loc& loc) {
  if (!targets.node()->realized()) return;
  for (int64_t v : targets.to_vector<int64_t>())
    if (v < 0 || v >= classes)
      fail(op, "target " + std::to_string(v) + " is out of range for " + std::to_string(classes) + " classes",
           {&targets}, loc);
}

// A lazy index tensor is checked by the kernel that reads it: a value outside [0, classes)
// is reported at the end of the realize, naming the op the user called and their line.
Tensor checked_in_kernel(const std::string& op, const Tensor& targets, int64_t classes, const Loc& loc) {
  if (targets.node()->realized()) return targets; // checked on the host already
  const auto [reported_op, where] = kiln::detail::reported_call(op, loc);
  const int64_t site = graph::index_site({reported_op, "target", classes, where});
  return Tensor(graph::build::check_index(targets.node(), classes, site));
}

// The output extents (Ho, Wo) of a sliding window over an [N, C, H, W] input, checked.
std::pair<int64_t, int64_t> check_window(const std::string& op, const Tensor& x, const Size2& k, const Size2& s,
                                         const Size2& p, const Size2& d, const Loc& loc) {
  if (x.dim() != 4) fail(op, "expects a [N, C, H, W] input", {&x}, loc);
  if (k.h <= 0 || k.w <= 0 || s.h <= 0 || s.w <= 0 || d.h <= 0 || d.w <= 0 || p.h < 0 || p.w < 0)
    fail(op, "kernel, stride and dilation must be positive and padding non-negative", {&x}, loc);
  const auto ho = graph::window_extent(x.size(2), k.h, s.h, p.h, d.h);
  const auto wo = graph::window_extent(x.size(3), k.w, s.w, p.w, d.w);
  if (!ho || !wo) fail(op, "the window arithmetic (padding, dilation x kernel) overflows int64", {&x}, loc);
  if (*ho <= 0 || *wo <= 0)
    fail(op, "the window (" + std::to_string(k.h) + "x" + std::to_string(k.w) + ", dilation " +
                 std::to_string(d.h) + "x" + std::to_string(d.w) + ") is larger than the padded input",
         {&x}, loc);
  // the stacked taps [N, C, kh*kw, Ho, Wo] must be a valid shape (tiled pooling makes fewer)
  const int64_t taps = graph::checked_mul(k.h, k.w).value_or(std::numeric_limits<int64_t>::max());
  detail::check_shape(op, {x.size(0), x.size(1), taps, *ho, *wo}, {&x}, loc);
  return {*ho, *wo};
}

// Every kernel tap of a sliding window over an already padded [N, C, H, W] input, stacked as
// [N, C, kh*kw, Ho, Wo] (tap index i*kw + j, matching a [.., kh, kw] weight flattened).
Tensor window_taps(const Tensor& xp, const Size2& k, const Size2& s, const Size2& d, int64_t ho, int64_t wo) {
  std::vector<Tensor> taps;
  taps.reserve(static_cast<size_t>(k.h * k.w));
  for (int64_t i = 0; i < k.h; ++i)
    for (int64_t j = 0; j < k.w; ++j) {
      Tensor t = xp.slice(2, i * d.h, i * d.h + (ho - 1) * s.h + 1, s.h);
      t = t.slice(3, j * d.w, j * d.w + (wo - 1) * s.w + 1, s.w);
      taps.push_back(t.unsqueeze(2));
    }
  return taps.size() == 1 ? taps[0] : concat(taps, 2);
}

Tensor pad_hw(const Tensor& x, const Size2& p, Scalar value) {
  if (p.h == 0 && p.w == 0) return x;
  return pad(x, {p.w, p.w, p.h, p.h}, value);
}

// True when windows tile the input without overlap or gaps, so pooling is a reshape and a reduction.
bool tiles(const Size2& k, const Size2& s, const Size2& p, const Size2& d) {
  return s.h == k.h && s.w == k.w && p.h == 0 && p.w == 0 && d.h == 1 && d.w == 1;
}

// [N, C, H, W] -> [N, C, Ho, kh, Wo, kw] for non-overlapping windows (floor mode drops the rest).
Tensor tile_view(const Tensor& x, const Size2& k, int64_t ho, int64_t wo) {
  Tensor t = x;
  if (ho * k.h != x.size(2)) t = t.slice(2, 0, ho * k.h);
  if (wo * k.w != x.size(3)) t = t.slice(3, 0, wo * k.w);
  return t.reshape({x.size(0), x.size(1), ho, k.h, wo, k.w});
}

} // namespace

// ---------------------------------------------------------------- activations

namespace {

// x less its max along dim. The shift does not change the value, so it needs no gradient. An
// empty tensor needs none (and the max of an empty dim has no identity): it stays empty, as in PyTorch.
Tensor shift_by_max(const Tensor& x, int64_t dim, const Loc& loc) {
  return x.numel() == 0 ? x : x - x.max({dim}, true, loc).detach();
}

} // namespace

Tensor softmax(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("softmax", x, loc);
  Tensor e = exp(shift_by_max(x, dim, loc));
  return e / e.sum({dim}, true, loc);
}

Tensor log_softmax(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("log_softmax", x, loc);
  Tensor z = shift_by_max(x, dim, loc);
  return z - log(exp(z).sum({dim}, true, loc));
}

Tensor gelu(const Tensor& x, const std::string& approximate, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("gelu", x, loc);
  if (approximate == "tanh") {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh((x + 0.044715 * x * x * x) * c));
  }
  if (approximate != "none") fail("gelu", "approximate must be \"none\" or \"tanh\", not \"" + approximate + "\"", {&x}, loc);
  return 0.5 * x * (1.0 + kiln::erf(x * M_SQRT1_2, loc));
}

Tensor silu(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("silu", x, loc);
  return x * sigmoid(x, loc);
}

// ---------------------------------------------------------------- encodings

namespace {

// indices[..., None] == arange(num_classes): bool [..., num_classes], true at each index's class.
Tensor class_mask(const std::string& op, const Tensor& indices, int64_t num_classes, const Loc& loc) {
  if (num_classes <= 0) fail(op, "num_classes must be positive, got " + std::to_string(num_classes), {&indices}, loc);
  check_class_range(op, indices, num_classes, loc);
  graph::Shape shape = indices.shape();
  shape.push_back(num_classes);
  detail::check_shape(op, shape, {&indices}, loc);
  const Tensor classes = arange(0, static_cast<double>(num_classes), 1, kInt64, indices.device(), loc);
  return eq(checked_in_kernel(op, indices, num_classes, loc).unsqueeze(-1, loc), classes, loc);
}

} // namespace

Tensor one_hot(const Tensor& indices, int64_t num_classes, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_integral("one_hot", indices, loc);
  return cast(class_mask("one_hot", indices, num_classes, loc), kInt64, loc);
}

// ---------------------------------------------------------------- layers

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  if (weight.dim() != 2) fail("linear", "the weight must be [out, in]", {&x, &weight}, loc);
  if (x.dim() == 0 || x.size(-1) != weight.size(1))
    fail("linear", "the input's last dim must equal in_features = " + std::to_string(weight.size(1)), {&x, &weight}, loc);
  Tensor y = matmul(x, weight.t(), loc);
  return bias.defined() ? y + bias : y;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size2& stride, const Size2& padding,
              const Size2& dilation, int64_t groups, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  if (weight.dim() != 4) fail("conv2d", "the weight must be [out, in/groups, kh, kw]", {&x, &weight}, loc);
  const Size2 k(weight.size(2), weight.size(3));
  const auto [ho, wo] = check_window("conv2d", x, k, stride, padding, dilation, loc);
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0), cg = weight.size(1);
  if (groups <= 0 || c % groups != 0 || o % groups != 0 || cg * groups != c)
    fail("conv2d", "channels do not match: input has " + std::to_string(c) + ", weight expects " +
                       std::to_string(cg) + " x groups=" + std::to_string(groups) + " (out " + std::to_string(o) + ")",
         {&x, &weight}, loc);
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != o)) fail("conv2d", "the bias must be [out]", {&weight, &bias}, loc);
  const int64_t taps = k.h * k.w, g = groups;
  // im2col per sample: cols [N, g, Cg*K, Ho*Wo] is a plain reshape of the stacked taps, and
  // W [g, O/g, Cg*K] @ cols, broadcast over N, is already [N, O, Ho, Wo]: no permutes, and the
  // gradients (dY @ cols^T summed over N, W^T @ dY) are batched matmuls with short reductions.
  Tensor cols = window_taps(pad_hw(x, padding, 0), k, stride, dilation, ho, wo); // [N, C, K, Ho, Wo]
  cols = cols.reshape({n, g, cg * taps, ho * wo}); // the scheduler computes matmul operands into a buffer
  Tensor y = matmul(weight.reshape({g, o / g, cg * taps}), cols, loc).reshape({n, o, ho, wo});
  return bias.defined() ? y + bias.reshape({1, o, 1, 1}) : y;
}

Tensor max_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding,
                  const Size2& dilation, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  const auto [ho, wo] = check_window("max_pool2d", x, kernel, stride, padding, dilation, loc);
  if (padding.h > kernel.h / 2 || padding.w > kernel.w / 2)
    fail("max_pool2d", "padding must be at most half the kernel size", {&x}, loc);
  if (tiles(kernel, stride, padding, dilation)) return tile_view(x, kernel, ho, wo).max({3, 5}, false, loc);
  const Tensor xp = pad_hw(x, padding, -std::numeric_limits<double>::infinity());
  return window_taps(xp, kernel, stride, dilation, ho, wo).max({2}, false, loc);
}

Tensor avg_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("avg_pool2d", x, loc);
  const auto [ho, wo] = check_window("avg_pool2d", x, kernel, stride, padding, Size2(1), loc);
  if (padding.h > kernel.h / 2 || padding.w > kernel.w / 2)
    fail("avg_pool2d", "padding must be at most half the kernel size", {&x}, loc);
  if (tiles(kernel, stride, padding, Size2(1))) return tile_view(x, kernel, ho, wo).mean({3, 5}, false, loc);
  return window_taps(pad_hw(x, padding, 0), kernel, stride, Size2(1), ho, wo).mean({2}, false, loc);
}

Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("layer_norm", x, loc);
  const auto k = static_cast<int64_t>(normalized_shape.size());
  const bool fits = k > 0 && k <= x.dim() && IntList(x.shape().end() - k, x.shape().end()) == normalized_shape;
  if (!fits) fail("layer_norm", "the trailing dims must equal normalized_shape " + graph::shape_str(normalized_shape), {&x}, loc);
  IntList dims(static_cast<size_t>(k));
  std::iota(dims.begin(), dims.end(), x.dim() - k);
  Tensor xc = x - x.mean(dims, true, loc);
  Tensor y = xc * rsqrt((xc * xc).mean(dims, true, loc) + eps);
  if (weight.defined()) y = y * weight;
  return bias.defined() ? y + bias : y;
}

namespace {

// running = (1 - m) running + m batch, recorded without gradient history.
void update_running(Tensor running, const Tensor& batch, double m) {
  NoGradGuard no_grad;
  running.assign(running * (1.0 - m) + batch.detach().to(running.dtype()) * m);
}

} // namespace

Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("batch_norm", x, loc);
  if (x.dim() < 2) fail("batch_norm", "expects [N, C, ...] inputs", {&x}, loc);
  const int64_t c = x.size(1);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&running_mean, &running_var, &weight, &bias})
    if (t->defined() && t->shape() != IntList{c}) fail("batch_norm", "statistics, weight and bias must be [C]", {&x, t}, loc);
  if (!training && (!running_mean.defined() || !running_var.defined()))
    fail("batch_norm", "evaluation mode needs the running statistics", {&x}, loc);
  IntList dims{0}, bshape(static_cast<size_t>(x.dim()), 1);
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  bshape[1] = c;
  Tensor y;
  if (training) {
    const int64_t n = c == 0 ? 0 : x.numel() / c; // no channel: no values (and no division by zero)
    if (n <= 1) fail("batch_norm", "needs more than one value per channel in training mode", {&x}, loc);
    Tensor mean = x.mean(dims, true, loc);
    Tensor xc = x - mean;
    Tensor var = (xc * xc).mean(dims, true, loc); // biased, for normalizing
    y = xc * rsqrt(var + eps);
    if (running_mean.defined()) update_running(running_mean, mean.reshape({c}), momentum);
    if (running_var.defined())
      update_running(running_var, var.reshape({c}) * (static_cast<double>(n) / static_cast<double>(n - 1)), momentum);
  } else {
    y = (x - running_mean.reshape(bshape).to(x.dtype())) * rsqrt(running_var.reshape(bshape).to(x.dtype()) + eps);
  }
  if (weight.defined()) y = y * weight.reshape(bshape);
  return bias.defined() ? y + bias.reshape(bshape) : y;
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, bool training, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("dropout", x, loc);
  if (!(p >= 0 && p <= 1)) fail("dropout", "p must be in [0, 1], got " + std::to_string(p), {&x}, loc);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  Tensor keep = cast(rand(x.shape(), seed, x.dtype(), x.device(), loc) >= p, x.dtype(), loc);
  return x * (keep * (1.0 / (1.0 - p)));
}

// ---------------------------------------------------------------- losses

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  detail::UserCall call("nll_loss", loc); // one_hot's errors are nll_loss's
  require_floating("nll_loss", log_probs, loc);
  require_integral("nll_loss", targets, loc);
  if (log_probs.dim() != 2 || targets.dim() != 1 || targets.size(0) != log_probs.size(0))
    fail("nll_loss", "expects [N, C] log-probabilities and [N] targets", {&log_probs, &targets}, loc);
  // A select, not a product with the one-hot: a -inf log-probability of another class adds 0, not NaN
  // (-inf * 0), and its gradient is exactly 0, as in PyTorch.
  Tensor picked = where(class_mask("nll_loss", targets, log_probs.size(1), loc), log_probs, 0, loc).sum({1});
  return reduce(-picked, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  detail::UserCall call("cross_entropy", loc); // nll_loss's and one_hot's errors are cross_entropy's
  require_floating("cross_entropy", logits, loc);
  require_integral("cross_entropy", targets, loc);
  if (logits.dim() != 2 || targets.dim() != 1 || targets.size(0) != logits.size(0))
    fail("cross_entropy", "expects [N, C] logits and [N] targets", {&logits, &targets}, loc);
  const double s = options.label_smoothing;
  if (!(s >= 0 && s <= 1)) fail("cross_entropy", "label_smoothing must be in [0, 1]", {&logits}, loc);
  Tensor logp = log_softmax(logits, 1, loc);
  Tensor nll = nll_loss(logp, targets, Reduction::None, loc);
  if (s == 0) return reduce(nll, options.reduction);
  Tensor smooth = -logp.mean({1});
  return reduce(nll * (1.0 - s) + smooth * s, options.reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("mse_loss", input, loc);
  if (input.shape() != target.shape()) fail("mse_loss", "input and target must have the same shape", {&input, &target}, loc);
  Tensor d = input - target;
  return reduce(d * d, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, Reduction reduction, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  require_floating("binary_cross_entropy_with_logits", logits, loc);
  if (logits.shape() != targets.shape())
    fail("binary_cross_entropy_with_logits", "logits and targets must have the same shape", {&logits, &targets}, loc);
  // max(x, 0) - x y + log(1 + e^-|x|): no overflow for any x.
  Tensor per = relu(logits) - logits * targets + log(1.0 + exp(-abs(logits)));
  return reduce(per, reduction);
}

} // namespace kiln::nn::functional

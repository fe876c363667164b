// nn::functional: activations, normalizations, convolution, pooling and losses,
// written with kiln's primitive ops so that autograd differentiates them and
// the scheduler fuses them.

#include "kiln/functional.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

#include "frontend/src/tensor_impl.h"
#include "frontend/src/windows.h"
#include "graph/build.h"
#include "graph/index_check.h"
#include "kiln/autograd.h"
#include "kiln/indexops.h"

namespace kiln::detail {

void update_running(Tensor running, const Tensor& batch, double m, const Tensor& factor) {
  NoGradGuard no_grad;
  const Tensor b = batch.detach().to(running.dtype());
  running.assign(factor.defined() ? running * (1.0 - factor) + b * factor : running * (1.0 - m) + b * m);
}

namespace {

/// x standardized over dims, and the mean and biased variance (kept dims) it used.
struct Standardized {
  Tensor y; ///< (x - mean) / sqrt(var + eps)
  Tensor mean; ///< over dims, keepdim
  Tensor var; ///< biased, over dims, keepdim
};

// The one normalization of layer_norm, batch_norm, group_norm and instance_norm: they differ in the dims.
Standardized standardize(const Tensor& x, const IntList& dims, double eps, const Loc& loc) {
  Tensor mean = x.mean(dims, true, loc);
  Tensor xc = x - mean;
  Tensor var = (xc * xc).mean(dims, true, loc);
  return {xc * rsqrt(var + eps), mean, var};
}

// x * weight + bias with weight and bias [C] (each optional) broadcast along dim 1 of x [N, C, ...].
Tensor per_channel_affine(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  IntList bshape(static_cast<size_t>(x.dim()), 1);
  bshape[1] = x.size(1);
  Tensor y = weight.defined() ? x * weight.reshape(bshape) : x;
  return bias.defined() ? y + bias.reshape(bshape) : y;
}

} // namespace

void check_batch_norm_tensors(const char* op, const Tensor& x, std::initializer_list<const Tensor*> ts, const Loc& loc) {
  const int64_t c = x.size(1, loc);
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->shape() != IntList{c}) detail::fail(op, "statistics, weight and bias must be [C]", {&x, t}, loc);
    if (!is_floating(t->dtype())) detail::fail(op, "statistics, weight and bias must be floating", {&x, t}, loc);
  }
}

} // namespace kiln::detail

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

// Reduces per-element losses; BatchMean is kl_div's alone (it divides by the batch size itself).
Tensor reduce(const std::string& op, const Tensor& per_element, Reduction r, const Loc& loc) {
  switch (r) {
  case Reduction::Mean: return per_element.mean();
  case Reduction::Sum: return per_element.sum();
  case Reduction::None: return per_element;
  case Reduction::BatchMean: break;
  }
  fail(op, "reduction BatchMean is kl_div's only (as PyTorch's 'batchmean'); use Mean, Sum or None", {}, loc);
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
  const int64_t site = graph::index_site({reported_op, "target", classes, where, ""});
  return Tensor(graph::build::check_index(targets.node(), classes, site));
}

// The output extent of a pooling window in ceil mode, as PyTorch's pooling_output_shape: a partial
// last window counts when it starts inside the input or the left padding. `floor_out` is the floor
// mode's extent (<= 0 where no whole window fits), whose arithmetic did not overflow.
int64_t ceil_extent(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, int64_t floor_out, bool ceil_mode) {
  if (!ceil_mode) return floor_out;
  const int64_t out = floor_out + ((n + 2 * p - d * (k - 1) - 1) % s != 0);
  return (out - 1) * s >= n + p ? out - 1 : out;
}

// The output extents (Ho, Wo) of a sliding window over an [N, C, H, W] input, checked.
std::pair<int64_t, int64_t> check_window(const std::string& op, const Tensor& x, const Size2& k, const Size2& s,
                                         const Size2& p, const Size2& d, const Loc& loc, bool ceil_mode = false) {
  if (x.dim() != 4) fail(op, "expects a [N, C, H, W] (or unbatched [C, H, W]) input", {&x}, loc);
  if (k.h <= 0 || k.w <= 0 || s.h <= 0 || s.w <= 0 || d.h <= 0 || d.w <= 0 || p.h < 0 || p.w < 0)
    fail(op, "kernel, stride and dilation must be positive and padding non-negative", {&x}, loc);
  const auto ho = graph::window_extent(x.size(2), k.h, s.h, p.h, d.h);
  const auto wo = graph::window_extent(x.size(3), k.w, s.w, p.w, d.w);
  if (!ho || !wo) fail(op, "the window arithmetic (padding, dilation x kernel) overflows int64", {&x}, loc);
  // Ceil mode first: its one partial window may be all there is (a 3-row window over 2 rows).
  const int64_t hc = ceil_extent(x.size(2), k.h, s.h, p.h, d.h, *ho, ceil_mode);
  const int64_t wc = ceil_extent(x.size(3), k.w, s.w, p.w, d.w, *wo, ceil_mode);
  if (hc <= 0 || wc <= 0)
    fail(op, "the window (" + std::to_string(k.h) + "x" + std::to_string(k.w) + ", dilation " +
                 std::to_string(d.h) + "x" + std::to_string(d.w) + ") is larger than the padded input",
         {&x}, loc);
  // the stacked taps [N, C, kh*kw, Ho, Wo] must be a valid shape (tiled pooling makes fewer)
  const int64_t taps = graph::checked_mul(k.h, k.w).value_or(std::numeric_limits<int64_t>::max());
  detail::check_shape(op, {x.size(0), x.size(1), taps, hc, wc}, {&x}, loc);
  return {hc, wc};
}

// How far the last of `out` windows reads past the padded extent n + 2p (ceil mode's partial window).
int64_t overhang(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out) {
  return std::max<int64_t>(0, (out - 1) * s + d * (k - 1) + 1 - (n + 2 * p));
}

// The windows of xp [N, C, Hp, Wp] as [N, C, kh, kw, Ho, Wo]: tap (i, j) of window (ho, wo) is
// xp[.., ho * s.h + i * d.h, wo * s.w + j * d.w]. Two unfolds, views whose every index is affine
// (a concat of kh * kw shifted slices selected among the taps at every point); a dilation takes
// every d-th element of a window d(k - 1) + 1 long.
Tensor window_taps(const Tensor& xp, const Size2& k, const Size2& s, const Size2& d, int64_t ho, int64_t wo) {
  const int64_t span_h = (k.h - 1) * d.h + 1, span_w = (k.w - 1) * d.w + 1;
  Tensor t = xp.slice(2, 0, (ho - 1) * s.h + span_h).slice(3, 0, (wo - 1) * s.w + span_w); // exactly ho x wo windows
  t = detail::unfold_at(t, 3, span_w, s.w, 2, Loc::current());                                  // [N, C, span_w, Hp, Wo]
  t = detail::unfold_at(t, 3, span_h, s.h, 2, Loc::current());                                  // [N, C, span_h, span_w, Ho, Wo]
  if (d.h > 1 || d.w > 1) t = t.slice(2, 0, span_h, d.h).slice(3, 0, span_w, d.w);
  return t;
}

// Pads H and W by p on both sides and by `extra` more at the end (ceil mode's partial windows).
Tensor pad_hw(const Tensor& x, const Size2& p, Scalar value, const Size2& extra = Size2(0)) {
  if (p.h == 0 && p.w == 0 && extra.h == 0 && extra.w == 0) return x;
  return pad(x, {p.w, p.w + extra.w, p.h, p.h + extra.h}, value);
}

// conv2d without its bias as im2col and a GEMM: W [g, O/g, Cg*K] @ cols [N, g, Cg*K, Ho*Wo], where the
// columns are a plain reshape of the stacked taps and the product, broadcast over N, is already
// [N, O, Ho, Wo]: no permutes. On the CPU the GEMM reads the columns in place from the padded input
// (an implicit GEMM); the weight's gradient (dY @ cols^T summed over N) reads them so too. The bias is
// added by the caller over the product's own shape, so that it is the GEMM's epilogue.
Tensor im2col_product(const Tensor& x, const Tensor& weight, const Size2& k, const Size2& stride, const Size2& padding,
                      const Size2& dilation, int64_t g, int64_t ho, int64_t wo, const Loc& loc) {
  const int64_t n = x.size(0), cg = x.size(1) / g, o = weight.size(0), taps = k.h * k.w;
  Tensor cols = window_taps(pad_hw(x, padding, 0), k, stride, dilation, ho, wo); // [N, C, kh, kw, Ho, Wo]
  cols = cols.reshape({n, g, cg * taps, ho * wo});
  return matmul(weight.reshape({g, o / g, cg * taps}), cols, loc);
}

// [N, C, H, W] -> [N, C, (H - 1) * s.h + 1, (W - 1) * s.w + 1] with s - 1 zeros between neighbours: a
// reshape to unit dims, a pad of them to s and a reshape back (views, no gather).
Tensor spread(const Tensor& x, const Size2& s) {
  if (s.h == 1 && s.w == 1) return x;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const Tensor t = pad(x.reshape({n, c, h, 1, w, 1}), {0, s.w - 1, 0, 0, 0, s.h - 1}, 0);
  return t.reshape({n, c, h * s.h, w * s.w}).slice(2, 0, (h - 1) * s.h + 1).slice(3, 0, (w - 1) * s.w + 1);
}

// The transposed convolution of x [N, O, H, W] with weight [O, Cg, kh, kw] (conv2d's, whose input
// gradient it is), without its bias: x spread by the stride, padded by dilation * (kernel - 1) - padding
// (cropped where that is negative) and by output_padding more at the end, then a stride-1 convolution
// with the weight's taps reversed and its in and out channels swapped (per group). Returns the product
// [N, g, Cg, Ho * Wo]. Another implicit GEMM, where autograd of the im2col product would write the
// columns' gradient (kernel size times the input) and sum it back over the taps.
Tensor conv_transpose_product(const Tensor& x, const Tensor& weight, const Size2& k, const Size2& stride,
                              const Size2& padding, const Size2& output_padding, const Size2& dilation, int64_t g,
                              const Loc& loc) {
  const int64_t og = weight.size(0) / g, cg = weight.size(1), taps = k.h * k.w;
  const Tensor reversed = arange(static_cast<double>(taps - 1), -1, -1, kInt64, weight.device());
  // Channels swapped before the taps are reversed: the gather's result, which the GEMM reads from a
  // buffer of its own, is then laid out [g, Cg, O/g, K] as the product's row-major left operand
  // (read in place; swapped after, its rows were a permuted view packed element by element).
  const Tensor flipped = index_select(weight.reshape({g, og, cg, taps}).permute({0, 2, 1, 3}), 3, reversed, loc)
                             .reshape({g * cg, og, k.h, k.w}); // [g * Cg, O/g, kh, kw]
  const Size2 q(dilation.h * (k.h - 1) - padding.h, dilation.w * (k.w - 1) - padding.w);
  const int64_t amounts[4] = {q.w, q.w + output_padding.w, q.h, q.h + output_padding.h};
  IntList grow, crop; // the padding first, then the cropping: a crop never passes the extent
  for (int64_t a : amounts) {
    grow.push_back(std::max<int64_t>(a, 0));
    crop.push_back(std::min<int64_t>(a, 0));
  }
  const Tensor xp = pad(pad(spread(x, stride), grow, 0), crop, 0);
  const int64_t h = xp.size(2) - dilation.h * (k.h - 1), w = xp.size(3) - dilation.w * (k.w - 1);
  return im2col_product(xp, flipped, k, Size2(1), Size2(0), dilation, g, h, w, loc);
}

// A convolution's forward and input-gradient products, f(x, w) and its adjoint in x, adjoint(gy, w);
// `weight_grad(x, gy, w)` is the weight's gradient (both are linear in the weight).
struct ConvProducts {
  std::function<Tensor(const Tensor&, const Tensor&)> forward, adjoint;
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> weight_grad;
};

// f(x, weight) with its gradients from the products rather than from autograd of f's im2col (conv2d's
// input gradient is a transposed convolution, conv_transpose2d's a convolution), and its tangent, as f
// is bilinear: f(tx, w) + f(x, tw).
Tensor conv_with_adjoint(const char* op, const Tensor& x, const Tensor& weight, const ConvProducts& p, const Loc& loc) {
  const CustomFunction conv{
      op, [p](const std::vector<Tensor>& in) { return std::vector<Tensor>{p.forward(in[0], in[1])}; },
      [p](const std::vector<Tensor>& in, const std::vector<Tensor>&, const std::vector<Tensor>& gy) {
        Tensor dx, dw;
        if (in[1].requires_grad()) dw = p.weight_grad(in[0], gy[0], in[1]);
        if (in[0].requires_grad()) dx = p.adjoint(gy[0], in[1]);
        return std::vector<Tensor>{dx, dw};
      },
      [p](const std::vector<Tensor>& in, const std::vector<Tensor>&, const std::vector<Tensor>& t) {
        Tensor ty; // undefined tangents are zero
        if (t[0].defined()) ty = p.forward(t[0], in[1]);
        if (t[1].defined()) ty = ty.defined() ? ty + p.forward(in[0], t[1]) : p.forward(in[0], t[1]);
        return std::vector<Tensor>{ty};
      }};
  return conv({x, weight}, loc)[0];
}

// The gradient of <prod(a, w), b> in w, for prod linear in w: a detached stand-in of the weight keeps
// its node in the recomputed graph (a weight that is itself a reshape, conv1d's unsqueezed one,
// would be folded into the product's reshape and be found unused).
template <class Prod> Tensor linear_weight_grad(const Prod& prod, const Tensor& a, const Tensor& b, const Tensor& weight,
                                                const Loc& loc) {
  const Tensor w = weight.detach().requires_grad_();
  return grad({prod(a, w)}, {w}, {b}, false, true, loc)[0];
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

// taps with its window dims `window` moved last and flattened: [kept..., K] (the kept dims in order), and
// the permutation `back` and shape `grid` that undo it.
struct FlatWindows {
  Tensor windows; ///< [kept..., K]
  IntList back; ///< undoes the permutation
  IntList grid; ///< [kept..., window extents...]
  IntList one; ///< taps' shape with the window dims 1
};

FlatWindows flatten_windows(const Tensor& taps, const IntList& window) {
  IntList perm, kept_shape, window_shape, back(static_cast<size_t>(taps.dim())), one_shape = taps.shape();
  int64_t points = 1;
  for (int64_t d = 0; d < taps.dim(); ++d) { // the kept dims first, then the window's
    if (std::find(window.begin(), window.end(), d) != window.end()) continue;
    perm.push_back(d);
    kept_shape.push_back(taps.size(d));
  }
  for (int64_t d : window) {
    perm.push_back(d);
    window_shape.push_back(taps.size(d));
    points *= taps.size(d);
    one_shape[d] = 1;
  }
  for (size_t i = 0; i < perm.size(); ++i) back[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  IntList flat = kept_shape, grid = kept_shape;
  flat.push_back(points);
  grid.insert(grid.end(), window_shape.begin(), window_shape.end());
  return {taps.permute(perm).reshape(flat), back, grid, one_shape};
}

// 0, 1, ..., K - 1 along the last dim of windows [kept..., K], broadcast over the others.
Tensor window_positions(const Tensor& windows) {
  const int64_t points = windows.size(-1);
  IntList pos_shape(static_cast<size_t>(windows.dim() - 1), 1);
  pos_shape.push_back(points);
  return arange(0, static_cast<double>(points), 1, kInt64, windows.device()).reshape(pos_shape);
}

// The position in [0, K) of each flattened window's first maximal element, or of its last NaN where it
// holds NaNs: [kept..., 1], what PyTorch's max pooling saves (its scan takes a NaN at once, and each later one).
Tensor first_max(const Tensor& windows) {
  const Tensor pos = window_positions(windows);
  const Tensor last_nan =
      where(ne(windows, windows), pos, full({}, -1, kInt64, windows.device())).max({-1}, true); // -1: no NaN
  return where(last_nan >= 0, last_nan, argmax(windows, -1, true));
}

// gy (the max's gradient, the window dims dropped) routed to each window's first_max element, rather
// than split among ties.
Tensor route_to_argmax(const Tensor& taps, const IntList& window, const Tensor& gy) {
  const FlatWindows f = flatten_windows(taps, window);
  const Tensor mask =
      eq(first_max(f.windows), window_positions(f.windows)).reshape(f.grid).permute(f.back); // taps' shape
  return where(mask, gy.reshape(f.one), 0.0);
}

} // namespace

namespace windows {

Tensor window_max(const char* op, const Tensor& taps, const IntList& window, Loc loc) {
  const CustomFunction pool{op,
                            [window](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].max(window, false)}; },
                            [window](const std::vector<Tensor>& in, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
                              return std::vector<Tensor>{route_to_argmax(in[0], window, g[0])};
                            }};
  return pool({taps}, loc)[0];
}

Tensor window_pick(const Tensor& taps, const IntList& window, const Tensor& where) {
  const FlatWindows f = flatten_windows(taps.detach(), window);
  const Tensor from = flatten_windows(where.expand(taps.shape()), window).windows;
  return gather(from, -1, first_max(f.windows)).squeeze(-1);
}

} // namespace windows

using windows::window_max;

// ---------------------------------------------------------------- activations

namespace {

// x less its max along dim. The shift does not change the value, so it needs no gradient. An
// empty tensor needs none (and the max of an empty dim has no identity): it stays empty, as in PyTorch.
Tensor shift_by_max(const Tensor& x, int64_t dim, const Loc& loc) {
  return x.numel() == 0 ? x : x - x.max({dim}, true, loc).detach();
}

} // namespace

Tensor softmax(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "softmax"); // nodes made here record the caller's line
  require_floating("softmax", x, loc);
  (void)detail::wrap_dim_or_fail("softmax", dim, x, loc); // its own error, not the max's it is built from
  Tensor e = exp(shift_by_max(x, dim, loc));
  return e / e.sum({dim}, true, loc);
}

Tensor log_softmax(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "log_softmax"); // nodes made here record the caller's line
  require_floating("log_softmax", x, loc);
  (void)detail::wrap_dim_or_fail("log_softmax", dim, x, loc);
  Tensor z = shift_by_max(x, dim, loc);
  return z - log(exp(z).sum({dim}, true, loc));
}

Tensor gelu(const Tensor& x, const std::string& approximate, Loc loc) {
  const graph::SourceScope at(loc, "gelu"); // nodes made here record the caller's line
  require_floating("gelu", x, loc);
  if (approximate == "tanh") {
    const double c = std::sqrt(2.0 / M_PI);
    return 0.5 * x * (1.0 + tanh((x + 0.044715 * x * x * x) * c));
  }
  if (approximate != "none") fail("gelu", "approximate must be \"none\" or \"tanh\", not \"" + approximate + "\"", {&x}, loc);
  return 0.5 * x * (1.0 + kiln::erf(x * M_SQRT1_2, loc));
}

Tensor silu(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "silu"); // nodes made here record the caller's line
  require_floating("silu", x, loc);
  return x * sigmoid(x, loc);
}

namespace {

// The value `outside` (with no gradient) where `cond` holds, else `inside`: PyTorch's piecewise activations
// whose backward is 0 at their kinks (hardtanh, hardsigmoid), where a clamp's gradient would be 1.
Tensor flat_where(const Tensor& cond, const Tensor& outside, const Tensor& inside) {
  return where(cond, outside.detach(), inside);
}

// x where keep holds, else 0: the argument of a branch that where() discards, so that its gradient
// (0 times the branch's derivative) stays 0 where that derivative would overflow (exp of a large x).
Tensor kept_or_zero(const Tensor& keep, const Tensor& x) { return where(keep, x, 0.0); }

// PyTorch's elu kernel: x <= 0 ? neg_scale * expm1(x * input_scale) : x * scale.
Tensor elu_form(const Tensor& x, double neg_scale, double scale, double input_scale) {
  const Tensor neg = x <= 0.0;
  return where(neg, expm1(kept_or_zero(neg, x) * input_scale) * neg_scale, x * scale);
}

} // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope, Loc loc) {
  const graph::SourceScope at(loc, "leaky_relu");
  require_floating("leaky_relu", x, loc);
  return where(x > 0.0, x, x * negative_slope);
}

Tensor elu(const Tensor& x, double alpha, Loc loc) {
  const graph::SourceScope at(loc, "elu");
  require_floating("elu", x, loc);
  return elu_form(x, alpha, 1.0, 1.0);
}

Tensor selu(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "selu");
  require_floating("selu", x, loc);
  const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
  return elu_form(x, alpha * scale, scale, 1.0);
}

Tensor celu(const Tensor& x, double alpha, Loc loc) {
  const graph::SourceScope at(loc, "celu");
  require_floating("celu", x, loc);
  if (alpha == 0) fail("celu", "alpha cannot be 0", {&x}, loc);
  return elu_form(x, alpha, 1.0, 1.0 / alpha);
}

Tensor softplus(const Tensor& x, double beta, double threshold, Loc loc) {
  const graph::SourceScope at(loc, "softplus");
  require_floating("softplus", x, loc);
  const Tensor bx = x * beta, linear = bx > threshold;
  return where(linear, x, log1p(exp(kept_or_zero(logical_not(linear), bx))) / beta);
}

Tensor mish(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "mish");
  require_floating("mish", x, loc);
  return x * tanh(softplus(x, 1.0, 20.0, loc));
}

Tensor hardswish(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "hardswish");
  require_floating("hardswish", x, loc);
  // PyTorch's x * min(max(x + 3, 0), 6) / 6 piece by piece, so that its backward's kinks come out
  return where(x < -3.0, x * 0.0, where(x <= 3.0, x * (x + 3.0) / 6.0, x * 6.0 / 6.0));
}

Tensor hardsigmoid(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "hardsigmoid");
  require_floating("hardsigmoid", x, loc);
  const Tensor y = clamp(x + 3.0, 0.0, 6.0) / 6.0;
  return flat_where(logical_not(logical_and(x > -3.0, x < 3.0)), y, y);
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val, Loc loc) {
  const graph::SourceScope at(loc, "hardtanh");
  require_floating("hardtanh", x, loc);
  return flat_where(logical_or(x <= min_val, x >= max_val), clamp(x, min_val, max_val), x);
}

Tensor threshold(const Tensor& x, double threshold, double value, Loc loc) {
  const graph::SourceScope at(loc, "threshold");
  if (!x.defined()) throw Error("threshold", "the input is undefined", loc);
  return where(le(x, wrap_scalar(threshold, x, loc), loc), wrap_scalar(value, x, loc), x, loc);
}

Tensor relu6(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "relu6");
  require_floating("relu6", x, loc);
  return hardtanh(x, 0.0, 6.0, loc);
}

Tensor logsigmoid(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "logsigmoid");
  require_floating("logsigmoid", x, loc);
  // at 0, minimum's tie gives 1/2 and abs's 0: PyTorch's 1/2
  return minimum(x, zeros_like(x)) - log1p(exp(-abs(x)));
}

Tensor softsign(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "softsign");
  require_floating("softsign", x, loc);
  return x / (abs(x) + 1.0);
}

Tensor hardshrink(const Tensor& x, double lambd, Loc loc) {
  const graph::SourceScope at(loc, "hardshrink");
  require_floating("hardshrink", x, loc);
  const Tensor inside = logical_and(ge(x, wrap_scalar(-lambd, x), loc), le(x, wrap_scalar(lambd, x), loc), loc);
  const Tensor nan_kept = where(isnan(x, loc), x.detach(), wrap_scalar(0, x), loc); // no gradient at NaN, as PyTorch's
  return where(inside, wrap_scalar(0, x), where(isnan(x, loc), nan_kept, x, loc), loc);
}

Tensor softshrink(const Tensor& x, double lambd, Loc loc) {
  const graph::SourceScope at(loc, "softshrink");
  require_floating("softshrink", x, loc);
  if (!(lambd >= 0)) fail("softshrink", "lambd must be >= 0, got " + std::to_string(lambd), {&x}, loc);
  const Tensor below = where(lt(x, wrap_scalar(-lambd, x), loc), x + lambd, wrap_scalar(0, x), loc);
  return where(gt(x, wrap_scalar(lambd, x), loc), x - lambd, below, loc);
}

Tensor rrelu(const Tensor& x, double lower, double upper, bool training, uint64_t seed, Loc loc) {
  const graph::SourceScope at(loc, "rrelu");
  const detail::UserCall call("rrelu", loc);
  require_floating("rrelu", x, loc);
  if (!(lower <= upper))
    fail("rrelu", "lower (" + std::to_string(lower) + ") must not exceed upper (" + std::to_string(upper) + ")", {&x},
         loc);
  if (!training) return leaky_relu(x, (lower + upper) / 2, loc);
  const Tensor slope = rand(x.shape(), seed, x.dtype(), x.device(), loc) * (upper - lower) + lower;
  return where(le(x, wrap_scalar(0, x), loc), x * slope, x, loc);
}

Tensor gumbel_softmax(const Tensor& logits, uint64_t seed, double tau, bool hard, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "gumbel_softmax");
  const detail::UserCall call("gumbel_softmax", loc);
  require_floating("gumbel_softmax", logits, loc);
  if (!(tau > 0)) fail("gumbel_softmax", "tau must be positive, got " + std::to_string(tau), {&logits}, loc);
  const int64_t d = detail::wrap_dim_or_fail("gumbel_softmax", dim, logits, loc);
  // g = -log(E), E = -log(1 - U) exponential (kept above 0 so that g stays finite), in f64.
  const Tensor u = rand(logits.shape(), seed, kFloat64, logits.device(), loc);
  const Tensor e = clamp(-log1p(-u, loc), 1e-300, std::nullopt, loc);
  const Tensor g = (-log(e, loc)).to(logits.dtype(), loc);
  const Tensor soft = softmax((logits + g) / tau, d, loc);
  if (!hard) return soft;
  IntList where_shape(static_cast<size_t>(logits.dim()), 1);
  where_shape[static_cast<size_t>(d)] = logits.size(d);
  const Tensor positions =
      arange(0, static_cast<double>(logits.size(d)), 1, kInt64, logits.device(), loc).reshape(where_shape, loc);
  const Tensor one_hot_rows = eq(positions, argmax(soft, d, true, loc), loc).to(logits.dtype(), loc);
  return one_hot_rows - soft.detach() + soft;
}

Tensor tanhshrink(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "tanhshrink");
  require_floating("tanhshrink", x, loc);
  return x - tanh(x, loc);
}

Tensor glu(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "glu");
  require_floating("glu", x, loc);
  if (x.dim() == 0) fail("glu", "glu does not support scalars because halving size must be even", {&x}, loc);
  const int64_t d = detail::wrap_dim_or_fail("glu", dim, x, loc), n = x.size(d);
  if (n % 2 != 0)
    fail("glu", "Halving dimension must be even, but dimension " + std::to_string(d) + " is size " + std::to_string(n),
         {&x}, loc);
  return x.narrow(d, 0, n / 2) * sigmoid(x.narrow(d, n / 2, n / 2));
}

Tensor prelu(const Tensor& x, const Tensor& weight, Loc loc) {
  const graph::SourceScope at(loc, "prelu");
  require_floating("prelu", x, loc);
  if (!weight.defined()) throw Error("prelu", "the weight is undefined", loc);
  if (weight.dim() > 1)
    fail("prelu", "Expected `weight` to be a scalar or 1D tensor, but got ndim = " + std::to_string(weight.dim()),
         {&x, &weight}, loc);
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1, n = weight.numel();
  if (n != 1 && n != channels)
    fail("prelu", "Mismatch of parameter numbers and input channel size. Found parameter numbers = " +
                      std::to_string(n) + " and channel size = " + std::to_string(channels) + ".", {&x, &weight}, loc);
  // [C] along dim 1: C then a 1 for each dim after it; one element broadcasts as it is
  IntList shape = {n};
  if (n != 1)
    for (int64_t i = 2; i < x.dim(); ++i) shape.push_back(1);
  const Tensor w = n == 1 ? weight.reshape({}) : weight.reshape(shape);
  return where(x > 0.0, x, w * x);
}

Tensor softmin(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "softmin");
  require_floating("softmin", x, loc);
  (void)detail::wrap_dim_or_fail("softmin", dim, x, loc);
  return softmax(-x, dim, loc);
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
  const graph::SourceScope at(loc, "one_hot"); // nodes made here record the caller's line
  require_integral("one_hot", indices, loc);
  return cast(class_mask("one_hot", indices, num_classes, loc), kInt64, loc);
}

// ---------------------------------------------------------------- layers

namespace {

// bilinear's operands checked as PyTorch's: the same rank and leading dims, last dims matching the weight.
void check_bilinear(const Tensor& x1, const Tensor& x2, const Tensor& w, const Tensor& b, const Loc& loc) {
  if (!x1.defined() || !x2.defined() || !w.defined())
    throw Error("bilinear", "an input or the weight is undefined", loc);
  if (w.dim() != 3) fail("bilinear", "the weight must be [out, in1, in2]", {&x1, &x2, &w}, loc);
  if (x1.dim() == 0 || x1.dim() != x2.dim())
    fail("bilinear", "the inputs need the same rank, at least 1", {&x1, &x2, &w}, loc);
  for (int64_t d = 0; d + 1 < x1.dim(); ++d)
    if (x1.size(d) != x2.size(d)) fail("bilinear", "the inputs' batch dims differ", {&x1, &x2, &w}, loc);
  if (x1.size(-1) != w.size(1) || x2.size(-1) != w.size(2))
    fail("bilinear",
         "the inputs' last dims must be the weight's in1 = " + std::to_string(w.size(1)) +
             " and in2 = " + std::to_string(w.size(2)),
         {&x1, &x2, &w}, loc);
  if (b.defined() && (b.dim() != 1 || b.size(0) != w.size(0)))
    fail("bilinear", "the bias must be [out] = [" + std::to_string(w.size(0)) + "]", {&w, &b}, loc);
}

} // namespace

Tensor bilinear(const Tensor& x1, const Tensor& x2, const Tensor& weight, const Tensor& bias, Loc loc) {
  const graph::SourceScope at(loc, "bilinear"); // nodes made here record the caller's line
  check_bilinear(x1, x2, weight, bias, loc);
  const int64_t out = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
  const int64_t rows = graph::numel(IntList(x1.shape().begin(), x1.shape().end() - 1));
  const Tensor wide = weight.permute({1, 0, 2}, loc).reshape({in1, out * in2}, loc); // [in1, out * in2]
  const Tensor t = matmul(x1.reshape({rows, in1}, loc), wide, loc).reshape({rows, out, in2}, loc);
  Tensor y = matmul(t, x2.reshape({rows, in2, 1}, loc), loc).reshape({rows, out}, loc);
  if (bias.defined()) y = y + bias;
  IntList shape = x1.shape();
  shape.back() = out;
  return y.reshape(shape, loc);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Loc loc) {
  const graph::SourceScope at(loc, "linear"); // nodes made here record the caller's line
  if (weight.dim() != 2) fail("linear", "the weight must be [out, in]", {&x, &weight}, loc);
  if (x.dim() == 0 || x.size(-1) != weight.size(1))
    fail("linear", "the input's last dim must equal in_features = " + std::to_string(weight.size(1)), {&x, &weight}, loc);
  if (bias.defined() && bias.dim() != 0 && (bias.dim() != 1 || bias.size(0) != weight.size(0))) // PyTorch's rule
    fail("linear", "the bias must be [out_features] = [" + std::to_string(weight.size(0)) + "] or a scalar",
         {&weight, &bias}, loc);
  // Rank > 2 runs as one [B*T, in] x [in, out] product (reshapes are free), so that the weight's
  // gradient is one [in, B*T] x [B*T, out] GEMM, not a batched product summed over the batch. The
  // bias is added to the product before the reshape, so that it is the GEMM's epilogue rather than
  // a pass of its own over the output (fusion does not see through the reshape).
  if (x.dim() <= 2) {
    const Tensor y = matmul(x, weight.t(), loc);
    return bias.defined() ? y + bias : y;
  }
  IntList out = x.shape();
  out.back() = weight.size(0);
  Tensor y = matmul(x.flatten(0, -2, loc), weight.t(), loc);
  if (bias.defined()) y = y + bias;
  return y.reshape(out, loc);
}

namespace {

// The channels of a convolution's input [N, C, ...], weight [O, C/groups, ...] and bias [O], checked.
void check_conv_channels(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t groups,
                         const Loc& loc) {
  const int64_t c = x.size(1), o = weight.size(0), cg = weight.size(1);
  if (groups <= 0 || c % groups != 0 || o % groups != 0 || cg * groups != c)
    fail(op, "channels do not match: input has " + std::to_string(c) + ", weight expects " + std::to_string(cg) +
                 " x groups=" + std::to_string(groups) + " (out " + std::to_string(o) + ")",
         {&x, &weight}, loc);
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != o)) fail(op, "the bias must be [out]", {&weight, &bias}, loc);
}

// conv2d of a batched x [N, C, H, W], its errors in the name of `op` (conv1d runs here over a unit height).
Tensor conv2d_impl(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, const Size2& stride,
                   const Size2& padding, const Size2& dilation, int64_t groups, const Loc& loc) {
  if (weight.dim() != 4) fail(op, "the weight must be [out, in/groups, kh, kw]", {&x, &weight}, loc);
  const Size2 k(weight.size(2), weight.size(3));
  const auto [ho, wo] = check_window(op, x, k, stride, padding, dilation, loc);
  check_conv_channels(op, x, weight, bias, groups, loc);
  const int64_t n = x.size(0), o = weight.size(0), g = groups;
  auto product = [=](const Tensor& in, const Tensor& w) { return im2col_product(in, w, k, stride, padding, dilation, g, ho, wo, loc); };
  Tensor y;
  if (stride.h == 1 && stride.w == 1 && dilation.h == 1 && dilation.w == 1 && padding.h < k.h && padding.w < k.w) {
    // The input's gradient as a transposed convolution of the output's rather than the columns'
    // gradient (W^T @ dY, kernel size times the input) summed back over the taps.
    const ConvProducts p{
        product,
        [=, xs = x.shape()](const Tensor& gy, const Tensor& w) {
          return conv_transpose_product(gy.reshape({n, o, ho, wo}), w, k, Size2(1), padding, Size2(0), Size2(1), g, loc)
              .reshape(xs);
        },
        [=](const Tensor& in, const Tensor& gy, const Tensor& w) { return linear_weight_grad(product, in, gy, w, loc); }};
    y = conv_with_adjoint(op, x, weight, p, loc);
  } else {
    y = product(x, weight);
  }
  if (bias.defined()) y = y + bias.reshape({g, o / g, 1});
  return y.reshape({n, o, ho, wo});
}

std::string size2_str(const Size2& v) { return graph::shape_str({v.h, v.w}); }

// The output extent (n - 1) * s - 2p + d(k - 1) + op + 1 of a transposed convolution, unset on overflow.
std::optional<int64_t> transposed_extent(int64_t n, int64_t k, int64_t s, int64_t p, int64_t op, int64_t d) {
  const auto spread = graph::checked_mul(n - 1, s), reach = graph::checked_mul(d, k - 1);
  if (!spread || !reach) return std::nullopt;
  const auto grown = graph::checked_add(*spread, *reach);
  if (!grown) return std::nullopt;
  return graph::checked_add(*grown - 2 * p, op + 1); // p and op are at most the int64 bounds / 2 here
}

// The argument checks of a transposed convolution of x [N, C, H, W] (1-d: over a unit height) with
// weight [C, O/g, kh, kw] and bias [O], as PyTorch's: returns the output's extents (Ho, Wo).
std::pair<int64_t, int64_t> check_conv_transpose(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                 const Size2& s, const Size2& p, const Size2& op_pad, int64_t groups,
                                                 const Size2& d, const Loc& loc) {
  if (s.h <= 0 || s.w <= 0 || d.h <= 0 || d.w <= 0 || p.h < 0 || p.w < 0 || op_pad.h < 0 || op_pad.w < 0)
    fail(op, "stride and dilation must be positive, padding and output_padding non-negative", {&x}, loc);
  if (p.h > std::numeric_limits<int64_t>::max() / 4 || p.w > std::numeric_limits<int64_t>::max() / 4)
    fail(op, "the padding overflows int64", {&x}, loc);
  if ((op_pad.h >= s.h && op_pad.h >= d.h) || (op_pad.w >= s.w && op_pad.w >= d.w))
    fail(op, "output_padding " + size2_str(op_pad) + " must be smaller than either the stride " + size2_str(s) +
                 " or the dilation " + size2_str(d), {&x}, loc);
  const int64_t c = x.size(1), in = weight.size(0);
  if (groups <= 0 || in % groups != 0)
    fail(op, "groups=" + std::to_string(groups) + " must be positive and divide the weight's in channels " +
                 std::to_string(in), {&x, &weight}, loc);
  if (c != in)
    fail(op, "channels do not match: input has " + std::to_string(c) + ", the weight [in, out/groups, ...] expects " +
                 std::to_string(in), {&x, &weight}, loc);
  const int64_t out = weight.size(1) * groups;
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != out))
    fail(op, "the bias must be [out] = [" + std::to_string(out) + "]", {&weight, &bias}, loc);
  if (x.size(2) <= 0 || x.size(3) <= 0) fail(op, "the input's spatial extents must be positive", {&x}, loc);
  const auto ho = transposed_extent(x.size(2), weight.size(2), s.h, p.h, op_pad.h, d.h);
  const auto wo = transposed_extent(x.size(3), weight.size(3), s.w, p.w, op_pad.w, d.w);
  if (!ho || !wo) fail(op, "the output size overflows int64", {&x, &weight}, loc);
  if (*ho <= 0 || *wo <= 0)
    fail(op, "the output size (" + std::to_string(*ho) + " x " + std::to_string(*wo) + ") is too small", {&x, &weight}, loc);
  // the spread, padded input and its taps [N, O, kh*kw, Ho, Wo] must be valid shapes
  const int64_t taps = graph::checked_mul(weight.size(2), weight.size(3)).value_or(std::numeric_limits<int64_t>::max());
  detail::check_shape(op, {x.size(0), out, taps, *ho, *wo}, {&x, &weight}, loc);
  static constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const auto spread_extent = [](int64_t n, int64_t st) { return graph::checked_mul(n, st).value_or(kMax); };
  detail::check_shape(op, {x.size(0), c, spread_extent(x.size(2), s.h), spread_extent(x.size(3), s.w)}, {&x}, loc);
  // and the windows' unfolds of the padded input, [N, C, span_w, Hp, Wo] and [N, C, span_h, span_w, Ho, Wo]
  // (a large dilation makes a long span from a small input)
  const auto span = [](int64_t k, int64_t dil) { return graph::checked_add(dil * (k - 1), 1).value_or(kMax); };
  const int64_t span_h = span(weight.size(2), d.h), span_w = span(weight.size(3), d.w);
  const int64_t hp = graph::checked_add(*ho, span_h - 1).value_or(kMax);
  detail::check_shape(op, {x.size(0), c, span_w, hp, *wo}, {&x, &weight}, loc);
  detail::check_shape(op, {x.size(0), c, span_h, span_w, *ho, *wo}, {&x, &weight}, loc);
  return {*ho, *wo};
}

// conv_transpose2d of a batched x [N, C, H, W], its errors in the name of `op` (conv_transpose1d runs here
// over a unit height): conv_transpose_product, whose input gradient is conv2d's product and whose weight
// gradient is that of conv2d(gy, w) against x (the two are adjoint in the input).
Tensor conv_transpose2d_impl(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, const Size2& s,
                             const Size2& p, const Size2& op_pad, int64_t groups, const Size2& d, const Loc& loc) {
  if (x.dim() != 4) fail(op, "expects a [N, C, H, W] (or unbatched [C, H, W]) input", {&x}, loc);
  if (weight.dim() != 4) fail(op, "the weight must be [in, out/groups, kh, kw]", {&x, &weight}, loc);
  const auto [ho, wo] = check_conv_transpose(op, x, weight, bias, s, p, op_pad, groups, d, loc);
  const Size2 k(weight.size(2), weight.size(3));
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), g = groups, out = weight.size(1) * g;
  auto conv = [=](const Tensor& gy, const Tensor& wt) { // conv2d of gy [N, O, Ho, Wo] back to [N, C, H, W]
    return im2col_product(gy.reshape({n, out, ho, wo}), wt, k, s, p, d, g, h, w, loc).reshape({n, c, h, w});
  };
  const ConvProducts products{
      [=](const Tensor& in, const Tensor& wt) { return conv_transpose_product(in, wt, k, s, p, op_pad, d, g, loc); },
      conv, [=](const Tensor& in, const Tensor& gy, const Tensor& wt) { return linear_weight_grad(conv, gy, in, wt, loc); }};
  Tensor y = conv_with_adjoint(op, x, weight, products, loc); // [N, g, O/g, Ho * Wo]
  if (bias.defined()) y = y + bias.reshape({g, out / g, 1});
  return y.reshape({n, out, ho, wo});
}

// max_pool2d of a batched x [N, C, H, W], its errors in the name of `op`.
Tensor max_pool_impl(const char* op, const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding,
                     const Size2& dilation, bool ceil_mode, const Loc& loc) {
  const auto [ho, wo] = check_window(op, x, kernel, stride, padding, dilation, loc, ceil_mode);
  if (padding.h > kernel.h / 2 || padding.w > kernel.w / 2) fail(op, "padding must be at most half the kernel size", {&x}, loc);
  const Size2 extra(overhang(x.size(2), kernel.h, stride.h, padding.h, dilation.h, ho),
                    overhang(x.size(3), kernel.w, stride.w, padding.w, dilation.w, wo));
  if (tiles(kernel, stride, padding, dilation) && extra.h == 0 && extra.w == 0)
    return window_max(op, tile_view(x, kernel, ho, wo), {3, 5}, loc);
  const Tensor xp = pad_hw(x, padding, -std::numeric_limits<double>::infinity(), extra); // ceil's overhang too
  return window_max(op, window_taps(xp, kernel, stride, dilation, ho, wo), {2, 3}, loc);
}

// max_pool_impl and the flat index h * W + w in x's plane of the element each window picks (window_pick), as
// PyTorch's max_pool2d_with_indices: i64 [N, C, Ho, Wo]. A window of -infinity only picks its first element
// inside the input, where PyTorch's scan starts, not its padding.
std::pair<Tensor, Tensor> max_pool_with_indices_impl(const char* op, const Tensor& x, const Size2& kernel,
                                                     const Size2& stride, const Size2& padding, const Size2& dilation,
                                                     bool ceil_mode, const Loc& loc) {
  const Tensor values = max_pool_impl(op, x, kernel, stride, padding, dilation, ceil_mode, loc);
  const int64_t h = x.size(2), w = x.size(3), ho = values.size(2), wo = values.size(3);
  const Size2 extra(overhang(h, kernel.h, stride.h, padding.h, dilation.h, ho),
                    overhang(w, kernel.w, stride.w, padding.w, dilation.w, wo));
  const Tensor taps = window_taps(pad_hw(x.detach(), padding, -std::numeric_limits<double>::infinity(), extra), kernel,
                                  stride, dilation, ho, wo);
  const Tensor plane = arange(0, static_cast<double>(h * w), 1, kInt64, x.device()).reshape({1, 1, h, w});
  const Tensor at = window_taps(pad_hw(plane, padding, -1, extra), kernel, stride, dilation, ho, wo);
  const Tensor picked = windows::window_pick(taps, {2, 3}, at);
  const Tensor first_inside = where(at >= 0, at, full({}, h * w, kInt64, x.device())).min({2, 3}, false, loc);
  return {values, where(picked < 0, first_inside, picked)};
}

// avg_pool2d of a batched x [N, C, H, W], its errors in the name of `op`.
Tensor avg_pool_impl(const char* op, const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding,
                     bool ceil_mode, bool count_include_pad, const Loc& loc,
                     std::optional<int64_t> divisor_override = std::nullopt) {
  require_floating(op, x, loc);
  const auto [ho, wo] = check_window(op, x, kernel, stride, padding, Size2(1), loc, ceil_mode);
  if (padding.h > kernel.h / 2 || padding.w > kernel.w / 2) fail(op, "padding must be at most half the kernel size", {&x}, loc);
  if (divisor_override == 0) fail(op, "divisor_override must not be zero", {&x}, loc);
  const Size2 extra(overhang(x.size(2), kernel.h, stride.h, padding.h, 1, ho),
                    overhang(x.size(3), kernel.w, stride.w, padding.w, 1, wo));
  if (divisor_override) { // every window's sum (padding and overhang add zeros) divides by it, as PyTorch
    const double divisor = static_cast<double>(*divisor_override);
    if (tiles(kernel, stride, padding, Size2(1)) && extra.h == 0 && extra.w == 0)
      return tile_view(x, kernel, ho, wo).sum({3, 5}, false, loc) / divisor;
    return window_taps(pad_hw(x, padding, 0, extra), kernel, stride, Size2(1), ho, wo).sum({2, 3}, false, loc) / divisor;
  }
  const bool whole = extra.h == 0 && extra.w == 0 && (count_include_pad || (padding.h == 0 && padding.w == 0));
  if (whole) { // every window divides by kh * kw
    if (tiles(kernel, stride, padding, Size2(1))) return tile_view(x, kernel, ho, wo).mean({3, 5}, false, loc);
    return window_taps(pad_hw(x, padding, 0), kernel, stride, Size2(1), ho, wo).mean({2, 3}, false, loc);
  }
  // Each window divides by the count of what it covers, as PyTorch: the input, plus the padding when
  // count_include_pad, never ceil mode's overhang. The counts are the same windows over a mask.
  const Tensor sums = window_taps(pad_hw(x, padding, 0, extra), kernel, stride, Size2(1), ho, wo).sum({2, 3}, false, loc);
  Tensor mask = pad_hw(ones({1, 1, x.size(2), x.size(3)}, x.dtype(), x.device(), loc), padding, count_include_pad ? 1 : 0);
  mask = pad_hw(mask, Size2(0), 0, extra);
  return sums / window_taps(mask, kernel, stride, Size2(1), ho, wo).sum({2, 3}, false, loc);
}

// The 1-d layers' checks on the user's x [N, C, L] (or [C, L]): rank, window arguments and that a
// window fits (as check_window, which then passes on the [N, C, 1, L] view the 2-d code is given).
void check_window_1d(const char* op, const Tensor& x, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode,
                     const Loc& loc) {
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (x.dim() != 2 && x.dim() != 3) fail(op, "expects a [N, C, L] (or unbatched [C, L]) input", {&x}, loc);
  if (k <= 0 || s <= 0 || d <= 0 || p < 0)
    fail(op, "kernel, stride and dilation must be positive and padding non-negative", {&x}, loc);
  const auto lo = graph::window_extent(x.size(-1), k, s, p, d);
  if (!lo) fail(op, "the window arithmetic (padding, dilation x kernel) overflows int64", {&x}, loc);
  if (ceil_extent(x.size(-1), k, s, p, d, *lo, ceil_mode) <= 0)
    fail(op, "the window (" + std::to_string(k) + ", dilation " + std::to_string(d) + ") is larger than the padded input",
         {&x}, loc);
}

// The zeros of "same" on each side of one dim, and the odd one more at its end: dilation * (kernel - 1) in
// all, as PyTorch's _convolution_same.
std::pair<int64_t, int64_t> same_padding(const char* op, int64_t k, int64_t d, const Tensor& x, const Loc& loc) {
  if (k <= 0 || d <= 0) return {0, 0}; // the convolution's own checks report the kernel or the dilation
  const auto total = graph::checked_mul(d, k - 1);
  if (!total) fail(op, "the window arithmetic (padding, dilation x kernel) overflows int64", {&x}, loc);
  return {*total / 2, *total % 2};
}

// A padding string known, and "same" only where the stride is 1, as PyTorch's conv.
template <class E>
void check_padding_mode(const char* op, const ConvPadding<E>& p, bool strided, const Tensor& x, const Loc& loc) {
  if (!p.unknown.empty())
    fail(op, "invalid padding string '" + p.unknown + "' (give \"valid\", \"same\" or the zeros per side)", {&x}, loc);
  if (p.mode == PaddingMode::Same && strided)
    fail(op, "padding='same' is not supported for strided convolutions", {&x}, loc);
}

// x [N, C, H, W] with a "same" padding's odd zeros at the end of H and W, and the zeros on each side that
// the convolution adds itself.
std::pair<Tensor, Size2> apply_padding(const char* op, const Tensor& x, const Tensor& weight, const Padding2& p,
                                       const Size2& stride, const Size2& dilation, const Loc& loc) {
  check_padding_mode(op, p, stride.h != 1 || stride.w != 1, x, loc);
  switch (p.mode) {
  case PaddingMode::Explicit: return {x, p.size};
  case PaddingMode::Valid: return {x, Size2(0)};
  case PaddingMode::Same: break;
  }
  if (weight.dim() != 4) fail(op, "the weight must be [out, in/groups, kh, kw]", {&x, &weight}, loc);
  const auto [h, end_h] = same_padding(op, weight.size(2), dilation.h, x, loc);
  const auto [w, end_w] = same_padding(op, weight.size(3), dilation.w, x, loc);
  return {pad_hw(x, Size2(0), 0, Size2(end_h, end_w)), Size2(h, w)};
}

// x [N, C, L] (or [C, L]) as [N, C, 1, L]; from_unit_height undoes it.
Tensor to_unit_height(const Tensor& x, const Loc& loc) {
  return (x.dim() == 2 ? x.unsqueeze(0, loc) : x).unsqueeze(2, loc);
}

// y [N, C, 1, Lo] as [N, C, Lo] (or [C, Lo] for an unbatched input).
Tensor from_unit_height(const Tensor& y, bool unbatched, const Loc& loc) {
  const Tensor y3 = y.squeeze(2, loc);
  return unbatched ? y3.squeeze(0, loc) : y3;
}

// A 1-d layer as its 2-d form over a unit height: f([N, C, 1, L]) for x [N, C, L] (or [C, L], a batch of one).
template <class F> Tensor over_unit_height(const Tensor& x, const Loc& loc, F f) {
  return from_unit_height(f(to_unit_height(x, loc)), x.dim() == 2, loc);
}

} // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size2& stride, const Padding2& padding,
              const Size2& dilation, int64_t groups, Loc loc) {
  const graph::SourceScope at(loc, "conv2d"); // nodes made here record the caller's line
  if (!x.defined() || !weight.defined()) throw Error("conv2d", "the input or the weight is undefined", loc);
  const bool unbatched = x.dim() == 3; // [C, H, W], as PyTorch: a batch of one
  const auto [xp, p] =
      apply_padding("conv2d", unbatched ? x.unsqueeze(0, loc) : x, weight, padding, stride, dilation, loc);
  const Tensor y = conv2d_impl("conv2d", xp, weight, bias, stride, p, dilation, groups, loc);
  return unbatched ? y.squeeze(0, loc) : y;
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, const Padding1& padding,
              int64_t dilation, int64_t groups, Loc loc) {
  const graph::SourceScope at(loc, "conv1d"); // nodes made here record the caller's line
  if (!x.defined() || !weight.defined()) throw Error("conv1d", "the input or the weight is undefined", loc);
  if (weight.dim() != 3) fail("conv1d", "the weight must be [out, in/groups, k]", {&x, &weight}, loc);
  check_padding_mode("conv1d", padding, stride != 1, x, loc);
  int64_t p = padding.mode == PaddingMode::Explicit ? padding.size : 0;
  Tensor xp = x;
  if (padding.mode == PaddingMode::Same) {
    const auto [each, end] = same_padding("conv1d", weight.size(2), dilation, x, loc);
    p = each;
    if (end != 0 && (x.dim() == 2 || x.dim() == 3)) xp = pad(x, {0, end}, 0); // other ranks: reported below
  }
  check_window_1d("conv1d", xp, weight.size(2), stride, p, dilation, false, loc);
  const Tensor xb = xp.dim() == 2 ? xp.unsqueeze(0, loc) : xp; // the channels are dim 1 of the batched form
  check_conv_channels("conv1d", xb, weight, bias, groups, loc);
  return over_unit_height(xp, loc, [&](const Tensor& x4) {
    return conv2d_impl("conv1d", x4, weight.unsqueeze(2, loc), bias, Size2(1, stride), Size2(0, p), Size2(1, dilation),
                       groups, loc);
  });
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size2& stride,
                        const Size2& padding, const Size2& output_padding, int64_t groups, const Size2& dilation, Loc loc) {
  const graph::SourceScope at(loc, "conv_transpose2d"); // nodes made here record the caller's line
  if (!x.defined() || !weight.defined()) throw Error("conv_transpose2d", "the input or the weight is undefined", loc);
  if (x.dim() == 3) // unbatched [C, H, W], as PyTorch: a batch of one
    return conv_transpose2d_impl("conv_transpose2d", x.unsqueeze(0, loc), weight, bias, stride, padding, output_padding,
                                 groups, dilation, loc)
        .squeeze(0, loc);
  return conv_transpose2d_impl("conv_transpose2d", x, weight, bias, stride, padding, output_padding, groups, dilation, loc);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
                        int64_t output_padding, int64_t groups, int64_t dilation, Loc loc) {
  const char* op = "conv_transpose1d";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  if (!x.defined() || !weight.defined()) throw Error(op, "the input or the weight is undefined", loc);
  if (x.dim() != 2 && x.dim() != 3) fail(op, "expects a [N, C, L] (or unbatched [C, L]) input", {&x}, loc);
  if (weight.dim() != 3) fail(op, "the weight must be [in, out/groups, k]", {&x, &weight}, loc);
  if (output_padding >= 0 && output_padding >= stride && output_padding >= dilation) // named in 1-d terms
    fail(op, "output_padding " + std::to_string(output_padding) + " must be smaller than either the stride " +
                 std::to_string(stride) + " or the dilation " + std::to_string(dilation), {&x}, loc);
  return over_unit_height(x, loc, [&](const Tensor& x4) {
    return conv_transpose2d_impl(op, x4, weight.unsqueeze(2, loc), bias, Size2(1, stride), Size2(0, padding),
                                 Size2(0, output_padding), groups, Size2(1, dilation), loc);
  });
}

Tensor max_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding,
                  const Size2& dilation, bool ceil_mode, Loc loc) {
  const graph::SourceScope at(loc, "max_pool2d"); // nodes made here record the caller's line
  if (x.dim() == 3) // unbatched [C, H, W], as PyTorch
    return max_pool_impl("max_pool2d", x.unsqueeze(0, loc), kernel, stride, padding, dilation, ceil_mode, loc).squeeze(0, loc);
  return max_pool_impl("max_pool2d", x, kernel, stride, padding, dilation, ceil_mode, loc);
}

Tensor max_pool2d(const Tensor& x, const Size2& kernel, std::nullopt_t, const Size2& padding, const Size2& dilation,
                  bool ceil_mode, Loc loc) {
  return max_pool2d(x, kernel, kernel, padding, dilation, ceil_mode, loc);
}

Tensor avg_pool2d(const Tensor& x, const Size2& kernel, const Size2& stride, const Size2& padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override, Loc loc) {
  const graph::SourceScope at(loc, "avg_pool2d"); // nodes made here record the caller's line
  if (x.dim() == 3) // unbatched [C, H, W], as PyTorch
    return avg_pool_impl("avg_pool2d", x.unsqueeze(0, loc), kernel, stride, padding, ceil_mode, count_include_pad, loc,
                         divisor_override)
        .squeeze(0, loc);
  return avg_pool_impl("avg_pool2d", x, kernel, stride, padding, ceil_mode, count_include_pad, loc, divisor_override);
}

Tensor avg_pool2d(const Tensor& x, const Size2& kernel, std::nullopt_t, const Size2& padding, bool ceil_mode,
                  bool count_include_pad, std::optional<int64_t> divisor_override, Loc loc) {
  return avg_pool2d(x, kernel, kernel, padding, ceil_mode, count_include_pad, divisor_override, loc);
}

Tensor max_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride, int64_t padding, int64_t dilation,
                  bool ceil_mode, Loc loc) {
  const graph::SourceScope at(loc, "max_pool1d"); // nodes made here record the caller's line
  const int64_t s = stride.value_or(kernel);
  check_window_1d("max_pool1d", x, kernel, s, padding, dilation, ceil_mode, loc);
  if (padding > kernel / 2) fail("max_pool1d", "padding must be at most half the kernel size", {&x}, loc);
  return over_unit_height(x, loc, [&](const Tensor& x4) {
    return max_pool_impl("max_pool1d", x4, Size2(1, kernel), Size2(1, s), Size2(0, padding), Size2(1, dilation), ceil_mode, loc);
  });
}

Tensor avg_pool1d(const Tensor& x, int64_t kernel, std::optional<int64_t> stride, int64_t padding, bool ceil_mode,
                  bool count_include_pad, Loc loc) {
  const graph::SourceScope at(loc, "avg_pool1d"); // nodes made here record the caller's line
  const int64_t s = stride.value_or(kernel);
  check_window_1d("avg_pool1d", x, kernel, s, padding, 1, ceil_mode, loc);
  require_floating("avg_pool1d", x, loc);
  if (padding > kernel / 2) fail("avg_pool1d", "padding must be at most half the kernel size", {&x}, loc);
  return over_unit_height(x, loc, [&](const Tensor& x4) {
    return avg_pool_impl("avg_pool1d", x4, Size2(1, kernel), Size2(1, s), Size2(0, padding), ceil_mode, count_include_pad, loc);
  });
}

namespace {

// The output extents (Do, Ho, Wo) of windows over x [N, C, D, H, W] (batched), checked in x's own terms as
// check_window does for 2-d (whose checks the 2-d code run on x's depth slices then passes).
std::array<int64_t, 3> check_window3(const char* op, const Tensor& x, const Size3& k, const Size3& s, const Size3& p,
                                     const Size3& d, bool ceil_mode, const Loc& loc) {
  if (x.dim() != 5) fail(op, "expects a [N, C, D, H, W] (or unbatched [C, D, H, W]) input", {&x}, loc);
  const int64_t ks[3] = {k.d, k.h, k.w}, ss[3] = {s.d, s.h, s.w}, ps[3] = {p.d, p.h, p.w}, ds[3] = {d.d, d.h, d.w};
  std::array<int64_t, 3> out{};
  for (int i = 0; i < 3; ++i) {
    if (ks[i] <= 0 || ss[i] <= 0 || ds[i] <= 0 || ps[i] < 0)
      fail(op, "kernel, stride and dilation must be positive and padding non-negative", {&x}, loc);
    const auto e = graph::window_extent(x.size(2 + i), ks[i], ss[i], ps[i], ds[i]);
    if (!e) fail(op, "the window arithmetic (padding, dilation x kernel) overflows int64", {&x}, loc);
    out[i] = ceil_extent(x.size(2 + i), ks[i], ss[i], ps[i], ds[i], *e, ceil_mode);
    if (out[i] <= 0)
      fail(op,
           "the window (" + graph::shape_str({k.d, k.h, k.w}) + ", dilation " + graph::shape_str({d.d, d.h, d.w}) +
               ") is larger than the padded input",
           {&x}, loc);
  }
  return out;
}

// The depth windows of x [N, C, D, ...] as [N, C, kd, Do, ...]: x padded along D by p (and by ceil mode's
// overhang at the end) with `value`, then one unfold, as window_taps does per dim.
Tensor depth_taps(const Tensor& x, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out, Scalar value,
                  const Loc& loc) {
  const int64_t extra = overhang(x.size(2), k, s, p, d, out), span = d * (k - 1) + 1;
  IntList pads(static_cast<size_t>(2 * (x.dim() - 3)), 0); // the dims after D untouched
  pads.push_back(p);
  pads.push_back(p + extra);
  Tensor t = pad(x, pads, value).slice(2, 0, (out - 1) * s + span);
  t = detail::unfold_at(t, 2, span, s, 2, loc); // [N, C, span, Do, ...]
  return d > 1 ? t.slice(2, 0, span, d) : t;
}

// A 3-d layer of a batched x: unbatched [C, D, H, W] is a batch of one, as PyTorch.
template <class F> Tensor batched3(const Tensor& x, const Loc& loc, F f) {
  if (x.dim() == 4) return f(x.unsqueeze(0, loc)).squeeze(0, loc);
  return f(x);
}

// conv3d of a batched x: the depth taps moved into the channels, [N * Do, C * kd, H, W], and a conv2d with the
// weight [O, C/g * kd, kh, kw] (its im2col, GEMM and gradients), whose [N * Do, O, Ho, Wo] is moved back.
Tensor conv3d_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size3& s, const Size3& p,
                   const Size3& d, int64_t groups, const Loc& loc) {
  const char* op = "conv3d";
  if (weight.dim() != 5) fail(op, "the weight must be [out, in/groups, kd, kh, kw]", {&x, &weight}, loc);
  const Size3 k(weight.size(2), weight.size(3), weight.size(4));
  const auto [dout, hout, wout] = check_window3(op, x, k, s, p, d, false, loc);
  check_conv_channels(op, x, weight, bias, groups, loc);
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0);
  const Tensor taps =
      depth_taps(x, k.d, s.d, p.d, d.d, dout, 0, loc).permute({0, 3, 1, 2, 4, 5}, loc); // [N, Do, C, kd, H, W]
  const Tensor x2 = taps.reshape({n * dout, c * k.d, x.size(3), x.size(4)}, loc);
  const Tensor w2 = weight.reshape({o, weight.size(1) * k.d, k.h, k.w}, loc);
  const Tensor y = conv2d_impl(op, x2, w2, bias, Size2(s.h, s.w), Size2(p.h, p.w), Size2(d.h, d.w), groups, loc);
  return y.reshape({n, dout, o, hout, wout}, loc).permute({0, 2, 1, 3, 4}, loc);
}

// conv_transpose3d's checks of what its conv_transpose2d does not see (the depth, the channels, the bias), as
// PyTorch's: returns the output depth.
int64_t check_conv_transpose3d(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Size3& s, const Size3& p, const Size3& op_pad, int64_t groups, const Size3& d,
                               const Loc& loc) {
  if (x.dim() != 5) fail(op, "expects a [N, C, D, H, W] (or unbatched [C, D, H, W]) input", {&x}, loc);
  if (weight.dim() != 5) fail(op, "the weight must be [in, out/groups, kd, kh, kw]", {&x, &weight}, loc);
  if (s.d <= 0 || d.d <= 0 || p.d < 0 || op_pad.d < 0)
    fail(op, "stride and dilation must be positive, padding and output_padding non-negative", {&x}, loc);
  if (p.d > std::numeric_limits<int64_t>::max() / 4) fail(op, "the padding overflows int64", {&x}, loc);
  if (op_pad.d >= s.d && op_pad.d >= d.d)
    fail(op,
         "output_padding " + graph::shape_str({op_pad.d, op_pad.h, op_pad.w}) +
             " must be smaller than either the stride " + graph::shape_str({s.d, s.h, s.w}) + " or the dilation " +
             graph::shape_str({d.d, d.h, d.w}),
         {&x}, loc);
  const int64_t in = weight.size(0);
  if (groups <= 0 || in % groups != 0)
    fail(op,
         "groups=" + std::to_string(groups) + " must be positive and divide the weight's in channels " +
             std::to_string(in),
         {&x, &weight}, loc);
  if (x.size(1) != in)
    fail(op,
         "channels do not match: input has " + std::to_string(x.size(1)) +
             ", the weight [in, out/groups, ...] expects " + std::to_string(in),
         {&x, &weight}, loc);
  const int64_t out = weight.size(1) * groups;
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != out))
    fail(op, "the bias must be [out] = [" + std::to_string(out) + "]", {&weight, &bias}, loc);
  if (x.size(2) <= 0 || x.size(3) <= 0 || x.size(4) <= 0)
    fail(op, "the input's spatial extents must be positive", {&x}, loc);
  const auto dout = transposed_extent(x.size(2), weight.size(2), s.d, p.d, op_pad.d, d.d);
  if (!dout) fail(op, "the output size overflows int64", {&x, &weight}, loc);
  if (*dout <= 0) fail(op, "the output depth " + std::to_string(*dout) + " is too small", {&x, &weight}, loc);
  return *dout;
}

// conv_transpose3d of a batched x: conv_transpose2d of [N * D, C, H, W] with the weight [C, O/g * kd, kh, kw]
// (each depth tap an output channel), then each tap's slab [N, D, O, Ho, Wo] spread along D by the stride
// (zeros between), shifted by tap * dilation, summed, and cropped by the padding: the depth's col2im, built from
// pads and a slice (exact gradients; conv_transpose2d's own for the rest).
Tensor conv_transpose3d_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size3& s, const Size3& p,
                             const Size3& op_pad, int64_t groups, const Size3& d, const Loc& loc) {
  const char* op = "conv_transpose3d";
  const int64_t dout = check_conv_transpose3d(op, x, weight, bias, s, p, op_pad, groups, d, loc);
  const int64_t n = x.size(0), c = x.size(1), depth = x.size(2), kd = weight.size(2), out = weight.size(1) * groups;
  const Tensor x2 = x.permute({0, 2, 1, 3, 4}, loc).reshape({n * depth, c, x.size(3), x.size(4)}, loc);
  const Tensor w2 = weight.reshape({c, weight.size(1) * kd, weight.size(3), weight.size(4)}, loc);
  const Tensor t = conv_transpose2d_impl(op, x2, w2, Tensor(), Size2(s.h, s.w), Size2(p.h, p.w),
                                         Size2(op_pad.h, op_pad.w), groups, Size2(d.h, d.w), loc);
  const int64_t ho = t.size(2), wo = t.size(3);
  const Tensor taps = t.reshape({n, depth, out, kd, ho, wo}, loc);
  const int64_t spread = (depth - 1) * s.d + 1, full = spread + d.d * (kd - 1) + op_pad.d;
  Tensor y;
  for (int64_t j = 0; j < kd; ++j) {
    Tensor slab = taps.slice(3, j, j + 1, 1, loc).squeeze(3, loc); // [N, D, O, Ho, Wo]
    if (s.d > 1) // zeros between the depth slices: [N, D, s, O, Ho, Wo] merged, cut after the last slice
      slab = pad(slab.unsqueeze(2, loc), {0, 0, 0, 0, 0, 0, 0, s.d - 1}, 0, loc)
                 .reshape({n, depth * s.d, out, ho, wo}, loc)
                 .slice(1, 0, spread, 1, loc);
    const Tensor placed = pad(slab, {0, 0, 0, 0, 0, 0, j * d.d, full - spread - j * d.d}, 0, loc);
    y = y.defined() ? y + placed : placed;
  }
  y = y.slice(1, p.d, p.d + dout, 1, loc).permute({0, 2, 1, 3, 4}, loc); // [N, O, Do, Ho, Wo]
  return bias.defined() ? y + bias.reshape({out, 1, 1, 1}, loc) : y;
}

// The padding of 3-d pooling: at most half the kernel in each dim, as PyTorch's.
void check_half_kernel(const char* op, const Tensor& x, const Size3& k, const Size3& p, const Loc& loc) {
  if (p.d > k.d / 2 || p.h > k.h / 2 || p.w > k.w / 2)
    fail(op, "padding must be at most half the kernel size", {&x}, loc);
}

// max_pool3d of a batched x: max_pool2d of every depth tap's slice, then the max over the depth taps. Both
// route the gradient to their first maximum, so it goes to the window's first in (d, h, w) order, as PyTorch's.
Tensor max_pool3d_impl(const Tensor& x, const Size3& k, const Size3& s, const Size3& p, const Size3& d, bool ceil_mode,
                       const Loc& loc) {
  const char* op = "max_pool3d";
  const auto [dout, hout, wout] = check_window3(op, x, k, s, p, d, ceil_mode, loc);
  check_half_kernel(op, x, k, p, loc);
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor taps = depth_taps(x, k.d, s.d, p.d, d.d, dout, -std::numeric_limits<double>::infinity(), loc);
  const Tensor planes = max_pool_impl(op, taps.reshape({n, c * k.d * dout, x.size(3), x.size(4)}, loc), Size2(k.h, k.w),
                                      Size2(s.h, s.w), Size2(p.h, p.w), Size2(d.h, d.w), ceil_mode, loc);
  return window_max(op, planes.reshape({n, c, k.d, dout, hout, wout}, loc), {2}, loc);
}

// avg_pool3d of a batched x: avg_pool2d of each depth slice, then the mean over the depth windows, each dividing
// by the depth it covers (PyTorch's divisor is the product of the three). With a divisor_override, the sums.
Tensor avg_pool3d_impl(const Tensor& x, const Size3& k, const Size3& s, const Size3& p, bool ceil_mode,
                       bool count_include_pad, std::optional<int64_t> divisor_override, const Loc& loc) {
  const char* op = "avg_pool3d";
  require_floating(op, x, loc);
  const auto [dout, hout, wout] = check_window3(op, x, k, s, p, Size3(1), ceil_mode, loc);
  check_half_kernel(op, x, k, p, loc);
  if (divisor_override == 0) fail(op, "divisor_override must not be zero", {&x}, loc);
  const int64_t n = x.size(0), c = x.size(1), depth = x.size(2);
  const Tensor planes = avg_pool_impl(op, x.reshape({n, c * depth, x.size(3), x.size(4)}, loc), Size2(k.h, k.w),
                                      Size2(s.h, s.w), Size2(p.h, p.w), ceil_mode, count_include_pad, loc,
                                      divisor_override ? std::optional<int64_t>(1) : std::nullopt);
  const Tensor sums =
      depth_taps(planes.reshape({n, c, depth, hout, wout}, loc), k.d, s.d, p.d, 1, dout, 0, loc).sum({2}, false, loc);
  if (divisor_override) return sums / static_cast<double>(*divisor_override);
  const Tensor covered = pad(ones({depth}, x.dtype(), x.device(), loc), {p.d, p.d}, count_include_pad ? 1 : 0);
  const Tensor counts = depth_taps(covered.reshape({1, 1, depth + 2 * p.d}, loc), k.d, s.d, 0, 1, dout, 0, loc);
  return sums / counts.sum({2}, false, loc).reshape({1, 1, dout, 1, 1}, loc);
}

} // namespace

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size3& stride, const Size3& padding,
              const Size3& dilation, int64_t groups, Loc loc) {
  const graph::SourceScope at(loc, "conv3d"); // nodes made here record the caller's line
  if (!x.defined() || !weight.defined()) throw Error("conv3d", "the input or the weight is undefined", loc);
  return batched3(
      x, loc, [&](const Tensor& xb) { return conv3d_impl(xb, weight, bias, stride, padding, dilation, groups, loc); });
}

Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Size3& stride,
                        const Size3& padding, const Size3& output_padding, int64_t groups, const Size3& dilation,
                        Loc loc) {
  const graph::SourceScope at(loc, "conv_transpose3d"); // nodes made here record the caller's line
  if (!x.defined() || !weight.defined()) throw Error("conv_transpose3d", "the input or the weight is undefined", loc);
  return batched3(x, loc, [&](const Tensor& xb) {
    return conv_transpose3d_impl(xb, weight, bias, stride, padding, output_padding, groups, dilation, loc);
  });
}

Tensor max_pool3d(const Tensor& x, const Size3& kernel, std::optional<Size3> stride, const Size3& padding,
                  const Size3& dilation, bool ceil_mode, Loc loc) {
  const graph::SourceScope at(loc, "max_pool3d"); // nodes made here record the caller's line
  if (!x.defined()) throw Error("max_pool3d", "the input is undefined", loc);
  return batched3(x, loc, [&](const Tensor& xb) {
    return max_pool3d_impl(xb, kernel, stride.value_or(kernel), padding, dilation, ceil_mode, loc);
  });
}

Tensor avg_pool3d(const Tensor& x, const Size3& kernel, std::optional<Size3> stride, const Size3& padding,
                  bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor_override, Loc loc) {
  const graph::SourceScope at(loc, "avg_pool3d"); // nodes made here record the caller's line
  if (!x.defined()) throw Error("avg_pool3d", "the input is undefined", loc);
  return batched3(x, loc, [&](const Tensor& xb) {
    return avg_pool3d_impl(xb, kernel, stride.value_or(kernel), padding, ceil_mode, count_include_pad, divisor_override,
                           loc);
  });
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Size2& kernel, std::optional<Size2> stride,
                                                  const Size2& padding, const Size2& dilation, bool ceil_mode,
                                                  Loc loc) {
  const char* op = "max_pool2d_with_indices";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  const bool unbatched = x.dim() == 3; // [C, H, W], as PyTorch
  auto [v, i] = max_pool_with_indices_impl(op, unbatched ? x.unsqueeze(0, loc) : x, kernel, stride.value_or(kernel),
                                           padding, dilation, ceil_mode, loc);
  if (unbatched) return {v.squeeze(0, loc), i.squeeze(0, loc)};
  return {v, i};
}

std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel, std::optional<int64_t> stride,
                                                  int64_t padding, int64_t dilation, bool ceil_mode, Loc loc) {
  const char* op = "max_pool1d_with_indices";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  const int64_t s = stride.value_or(kernel);
  check_window_1d(op, x, kernel, s, padding, dilation, ceil_mode, loc);
  if (padding > kernel / 2) fail(op, "padding must be at most half the kernel size", {&x}, loc);
  auto [v, i] = max_pool_with_indices_impl(op, to_unit_height(x, loc), Size2(1, kernel), Size2(1, s), Size2(0, padding),
                                           Size2(1, dilation), ceil_mode, loc);
  return {from_unit_height(v, x.dim() == 2, loc), from_unit_height(i, x.dim() == 2, loc)};
}

namespace {

// The output extents of max_unpool (op) over x's last k.size() dims, as PyTorch's _unpool_output_size:
// (n - 1) s - 2p + k each, or output_size's (its spatial extents, or the whole shape), each strictly within
// one stride of that.
IntList unpool_extents(const char* op, const Tensor& x, const IntList& k, const IntList& s, const IntList& p,
                       IntList output_size, const Loc& loc) {
  const size_t dims = k.size();
  IntList out;
  for (size_t d = 0; d < dims; ++d) {
    if (k[d] <= 0 || s[d] <= 0 || p[d] < 0)
      fail(op, "kernel and stride must be positive and padding non-negative", {&x}, loc);
    out.push_back((x.size(x.dim() - static_cast<int64_t>(dims) + static_cast<int64_t>(d)) - 1) * s[d] + k[d] -
                  2 * p[d]);
  }
  if (output_size.empty()) return out;
  if (output_size.size() == dims + 2) output_size.erase(output_size.begin(), output_size.begin() + 2);
  if (output_size.size() != dims)
    fail(op,
         "output_size " + graph::shape_str(output_size) + " must have " + std::to_string(dims) + " or " +
             std::to_string(dims + 2) + " elements",
         {&x}, loc);
  for (size_t d = 0; d < dims; ++d)
    if (output_size[d] <= out[d] - s[d] || output_size[d] >= out[d] + s[d])
      fail(op,
           "output_size " + graph::shape_str(output_size) + " is not valid: each extent must lie strictly between " +
               graph::shape_str(out) + " minus and plus the stride " + graph::shape_str(s),
           {&x}, loc);
  return output_size;
}

// x [N, C, L] scattered into zeros [N, C, size] at `index` (i64 [N, C, L]), where the last of equal indices wins
// (PyTorch's loop writes them in order): the stably sorted indices keep the last of each run. The gradient is gy
// gathered at every index, the overwritten ones' too (PyTorch's max_unpool backward).
Tensor unpool_flat(const Tensor& x, const Tensor& index, int64_t size) {
  const CustomFunction unpool{
      "max_unpool",
      [index, size](const std::vector<Tensor>& in) {
        const int64_t n = in[0].size(0), c = in[0].size(1), l = in[0].size(2);
        const Tensor out = zeros({n, c, size}, in[0].dtype(), in[0].device());
        if (l == 0) return std::vector<Tensor>{out};
        const auto [sorted, perm] = sort(index, -1);
        const Tensor last =
            concat({ne(sorted.slice(2, 0, l - 1), sorted.slice(2, 1, l)), ones({n, c, 1}, kBool, in[0].device())}, 2);
        return std::vector<Tensor>{scatter_add(out, 2, sorted, where(last, gather(in[0], 2, perm), 0.0))};
      },
      [index](const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{gather(g[0], 2, index)};
      }};
  return unpool({x})[0];
}

// Indices already computed must lie in [0, size), as PyTorch's max_unpool checks ("Found an invalid max index").
void check_unpool_indices(const char* op, const Tensor& x, const Tensor& indices, int64_t size, const Loc& loc) {
  if (!indices.node()->realized() || detail::active_capture())
    return; // a lazy index is checked by scatter_add's kernel
  for (int64_t v : indices.to_vector<int64_t>(loc))
    if (v < 0 || v >= size)
      fail(op,
           "found an invalid max index " + std::to_string(v) + " (the output plane has " + std::to_string(size) +
               " elements)",
           {&x, &indices}, loc);
}

// max_unpool1d/2d (op) of x [N, C, spatial...] (or unbatched) over its last k.size() dims.
Tensor max_unpool_impl(const char* op, const Tensor& x, const Tensor& indices, const IntList& k, const IntList& s,
                       const IntList& p, const IntList& output_size, const Loc& loc) {
  // scatter_add's range errors are op's (a module calling it keeps them its own: KilnLines)
  const detail::UserCall call(op, loc, detail::UserCall::Claim::KilnLines);
  if (!x.defined() || !indices.defined()) throw Error(op, "the input or the indices are undefined", loc);
  const auto spatial = static_cast<int64_t>(k.size());
  if (x.dim() != spatial + 1 && x.dim() != spatial + 2)
    fail(op,
         spatial == 1 ? "expects a [N, C, L] (or unbatched [C, L]) input"
                      : "expects a [N, C, H, W] (or unbatched [C, H, W]) input",
         {&x, &indices}, loc);
  if (!is_integral(indices.dtype())) fail(op, "the indices must be integers (i32 or i64)", {&x, &indices}, loc);
  if (indices.shape() != x.shape()) fail(op, "the indices must have the input's shape", {&x, &indices}, loc);
  const IntList extents = unpool_extents(op, x, k, s, p, output_size, loc);
  int64_t size = 1;
  for (int64_t e : extents) size *= e;
  check_unpool_indices(op, x, indices, size, loc);
  const bool unbatched = x.dim() == spatial + 1;
  const int64_t n = unbatched ? 1 : x.size(0), c = x.size(unbatched ? 0 : 1);
  int64_t l = 1; // the input plane
  for (int64_t d = x.dim() - spatial; d < x.dim(); ++d) l *= x.size(d);
  IntList out = {n, c};
  out.insert(out.end(), extents.begin(), extents.end());
  detail::check_shape(op, out, {&x}, loc);
  const Tensor y =
      unpool_flat(x.reshape({n, c, l}, loc), indices.to(kInt64).reshape({n, c, l}, loc), size).reshape(out, loc);
  return unbatched ? y.squeeze(0, loc) : y;
}

} // namespace

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const Size2& kernel, std::optional<Size2> stride,
                    const Size2& padding, const IntList& output_size, Loc loc) {
  const graph::SourceScope at(loc, "max_unpool2d"); // nodes made here record the caller's line
  const Size2 s = stride.value_or(kernel);
  return max_unpool_impl("max_unpool2d", x, indices, {kernel.h, kernel.w}, {s.h, s.w}, {padding.h, padding.w},
                         output_size, loc);
}

Tensor max_unpool1d(const Tensor& x, const Tensor& indices, int64_t kernel, std::optional<int64_t> stride,
                    int64_t padding, const IntList& output_size, Loc loc) {
  const graph::SourceScope at(loc, "max_unpool1d"); // nodes made here record the caller's line
  return max_unpool_impl("max_unpool1d", x, indices, {kernel}, {stride.value_or(kernel)}, {padding}, output_size, loc);
}

namespace {

// PyTorch's lp_pool from avg, the mean of x^p over windows of `taps` elements: (sign(avg) relu(|avg|) taps)^(1/p).
Tensor lp_from_average(const Tensor& avg, double p, int64_t taps) {
  return pow(sign(avg) * relu(abs(avg)) * static_cast<double>(taps), 1.0 / p);
}

} // namespace

Tensor lp_pool2d(const Tensor& x, double norm_type, const Size2& kernel, std::optional<Size2> stride, bool ceil_mode,
                 Loc loc) {
  const graph::SourceScope at(loc, "lp_pool2d"); // nodes made here record the caller's line
  require_floating("lp_pool2d", x, loc);
  const bool unbatched = x.dim() == 3; // [C, H, W], as PyTorch
  const Tensor xb = unbatched ? x.unsqueeze(0, loc) : x;
  const Tensor avg =
      avg_pool_impl("lp_pool2d", pow(xb, norm_type), kernel, stride.value_or(kernel), Size2(0), ceil_mode, true, loc);
  const Tensor y = lp_from_average(avg, norm_type, kernel.h * kernel.w);
  return unbatched ? y.squeeze(0, loc) : y;
}

Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel, std::optional<int64_t> stride, bool ceil_mode,
                 Loc loc) {
  const graph::SourceScope at(loc, "lp_pool1d"); // nodes made here record the caller's line
  const int64_t s = stride.value_or(kernel);
  check_window_1d("lp_pool1d", x, kernel, s, 0, 1, ceil_mode, loc);
  require_floating("lp_pool1d", x, loc);
  return over_unit_height(x, loc, [&](const Tensor& x4) {
    const Tensor avg =
        avg_pool_impl("lp_pool1d", pow(x4, norm_type), Size2(1, kernel), Size2(1, s), Size2(0), ceil_mode, true, loc);
    return lp_from_average(avg, norm_type, kernel);
  });
}

Tensor unfold(const Tensor& x, const Size2& kernel_size, const Size2& dilation, const Size2& padding,
              const Size2& stride, Loc loc) {
  const graph::SourceScope at(loc, "unfold"); // nodes made here record the caller's line
  if (!x.defined()) throw Error("unfold", "the input is undefined", loc);
  const bool unbatched = x.dim() == 3; // [C, H, W], as PyTorch
  const Tensor xb = unbatched ? x.unsqueeze(0, loc) : x;
  const auto [ho, wo] = check_window("unfold", xb, kernel_size, stride, padding, dilation, loc);
  const Tensor cols = window_taps(pad_hw(xb, padding, 0), kernel_size, stride, dilation, ho, wo)
                          .reshape({xb.size(0), xb.size(1) * kernel_size.h * kernel_size.w, ho * wo}, loc);
  return unbatched ? cols.squeeze(0, loc) : cols;
}

namespace {

// The checks of fold on cols [N, C * kh * kw, L] (batched): returns the number of blocks (Ho, Wo) along the
// output's padded extents, whose product must be L.
std::pair<int64_t, int64_t> check_fold(const Tensor& cols, const Size2& out, const Size2& k, const Size2& d,
                                       const Size2& p, const Size2& s, const Loc& loc) {
  if (k.h <= 0 || k.w <= 0 || s.h <= 0 || s.w <= 0 || d.h <= 0 || d.w <= 0 || p.h < 0 || p.w < 0 || out.h <= 0 ||
      out.w <= 0)
    fail("fold", "output_size, kernel, stride and dilation must be positive and padding non-negative", {&cols}, loc);
  const int64_t taps = graph::checked_mul(k.h, k.w).value_or(0);
  if (taps == 0 || cols.size(1) % taps != 0)
    fail("fold",
         "the input's dim 1 (" + std::to_string(cols.size(1)) + ") must be divisible by the kernel's size " +
             size2_str(k),
         {&cols}, loc);
  const auto ho = graph::window_extent(out.h, k.h, s.h, p.h, d.h), wo = graph::window_extent(out.w, k.w, s.w, p.w, d.w);
  if (!ho || !wo) fail("fold", "the window arithmetic (padding, dilation x kernel) overflows int64", {&cols}, loc);
  if (*ho <= 0 || *wo <= 0 || *ho * *wo != cols.size(2))
    fail("fold",
         "output_size " + size2_str(out) + ", kernel " + size2_str(k) + ", dilation " + size2_str(d) + ", padding " +
             size2_str(p) + " and stride " + size2_str(s) + " give " + std::to_string(*ho) + " x " +
             std::to_string(*wo) + " blocks, but the input's dim 2 has " + std::to_string(cols.size(2)),
         {&cols}, loc);
  return {*ho, *wo};
}

// col2im of cols [N, C * kh * kw, Ho * Wo]: each tap's [N, C, Ho, Wo] spread by the stride and placed at its
// offset in the padded output, added in tap order (PyTorch's col2im's order, so the same bits), then cropped.
Tensor col2im(const Tensor& cols, const Size2& out, const Size2& k, const Size2& d, const Size2& p, const Size2& s,
              int64_t ho, int64_t wo) {
  const int64_t n = cols.size(0), c = cols.size(1) / (k.h * k.w), hp = out.h + 2 * p.h, wp = out.w + 2 * p.w;
  const Tensor t = cols.reshape({n, c, k.h, k.w, ho, wo});
  Tensor sum;
  for (int64_t i = 0; i < k.h; ++i)
    for (int64_t j = 0; j < k.w; ++j) {
      const Tensor tap = spread(t.slice(2, i, i + 1).slice(3, j, j + 1).reshape({n, c, ho, wo}), s);
      const Tensor placed = pad(tap, {j * d.w, wp - j * d.w - tap.size(3), i * d.h, hp - i * d.h - tap.size(2)}, 0);
      sum = sum.defined() ? sum + placed : placed;
    }
  return sum.slice(2, p.h, p.h + out.h).slice(3, p.w, p.w + out.w);
}

} // namespace

Tensor fold(const Tensor& x, const Size2& output_size, const Size2& kernel_size, const Size2& dilation,
            const Size2& padding, const Size2& stride, Loc loc) {
  const graph::SourceScope at(loc, "fold"); // nodes made here record the caller's line
  if (!x.defined()) throw Error("fold", "the input is undefined", loc);
  if (x.dim() != 2 && x.dim() != 3)
    fail("fold", "expects a [N, C * kh * kw, L] (or unbatched [C * kh * kw, L]) input", {&x}, loc);
  const bool unbatched = x.dim() == 2;
  const Tensor xb = unbatched ? x.unsqueeze(0, loc) : x;
  const auto [ho, wo] = check_fold(xb, output_size, kernel_size, dilation, padding, stride, loc);
  const Tensor y = col2im(xb, output_size, kernel_size, dilation, padding, stride, ho, wo);
  return unbatched ? y.squeeze(0, loc) : y;
}

namespace {

// The trailing dims that a layer_norm or rms_norm over `normalized_shape` reduces, checked.
IntList normalized_dims(const std::string& op, const Tensor& x, const IntList& normalized_shape, const Loc& loc) {
  require_floating(op, x, loc);
  const auto k = static_cast<int64_t>(normalized_shape.size());
  const bool fits = k > 0 && k <= x.dim() && IntList(x.shape().end() - k, x.shape().end()) == normalized_shape;
  if (!fits) fail(op, "the trailing dims must equal normalized_shape " + graph::shape_str(normalized_shape), {&x}, loc);
  IntList dims(static_cast<size_t>(k));
  std::iota(dims.begin(), dims.end(), x.dim() - k);
  return dims;
}

} // namespace

Tensor layer_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps, Loc loc) {
  const graph::SourceScope at(loc, "layer_norm"); // nodes made here record the caller's line
  const IntList dims = normalized_dims("layer_norm", x, normalized_shape, loc);
  Tensor y = kiln::detail::standardize(x, dims, eps, loc).y;
  if (weight.defined()) y = y * weight;
  return bias.defined() ? y + bias : y;
}

Tensor rms_norm(const Tensor& x, const IntList& normalized_shape, const Tensor& weight, std::optional<double> eps,
                Loc loc) {
  const graph::SourceScope at(loc, "rms_norm"); // nodes made here record the caller's line
  const IntList dims = normalized_dims("rms_norm", x, normalized_shape, loc);
  if (weight.defined() && weight.shape() != normalized_shape)
    fail("rms_norm", "the weight must have the shape normalized_shape " + graph::shape_str(normalized_shape), {&x, &weight}, loc);
  const double e = eps.value_or(x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                      : std::numeric_limits<float>::epsilon());
  Tensor y = x * rsqrt((x * x).mean(dims, true, loc) + e, loc);
  return weight.defined() ? y * weight : y;
}


Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight, const Tensor& bias,
                  bool training, double momentum, double eps, Loc loc) {
  return kiln::detail::batch_norm_with(x, std::move(running_mean), std::move(running_var), weight, bias, training,
                                       momentum, Tensor(), eps, loc);
}

} // namespace kiln::nn::functional

namespace kiln::detail {

Tensor batch_norm_with(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, const Tensor& factor, double eps,
                       const Loc& loc) {
  using nn::functional::fail, nn::functional::require_floating;
  const graph::SourceScope at(loc, "batch_norm"); // nodes made here record the caller's line
  require_floating("batch_norm", x, loc);
  if (x.dim() < 2) fail("batch_norm", "expects [N, C, ...] inputs", {&x}, loc);
  const int64_t c = x.size(1);
  detail::check_batch_norm_tensors("batch_norm", x, {&running_mean, &running_var, &weight, &bias}, loc);
  if (!training && (!running_mean.defined() || !running_var.defined()))
    fail("batch_norm", "evaluation mode needs the running statistics", {&x}, loc);
  // The spatial dims as one ([N, C, H*W], a free reshape), so that the per-channel reductions
  // and the kernels around them run over whole feature maps, long contiguous runs, rather than
  // rows of W points.
  const Tensor xf = x.dim() > 3 ? x.reshape({x.size(0), c, -1}, loc) : x;
  const IntList dims = xf.dim() == 2 ? IntList{0} : IntList{0, 2}, bshape = xf.dim() == 2 ? IntList{1, c} : IntList{1, c, 1};
  Tensor y;
  if (training) {
    const int64_t n = c == 0 ? 0 : x.numel() / c; // no channel: no values (and no division by zero)
    if (n <= 1) fail("batch_norm", "needs more than one value per channel in training mode", {&x}, loc);
    const Standardized s = standardize(xf, dims, eps, loc); // the biased variance, for normalizing
    y = s.y;
    if (running_mean.defined()) update_running(running_mean, s.mean.reshape({c}), momentum, factor);
    if (running_var.defined())
      update_running(running_var, s.var.reshape({c}) * (static_cast<double>(n) / static_cast<double>(n - 1)), momentum,
                     factor);
  } else {
    y = (xf - running_mean.reshape(bshape).to(x.dtype())) * rsqrt(running_var.reshape(bshape).to(x.dtype()) + eps);
  }
  return per_channel_affine(y, weight, bias).reshape(x.shape(), loc);
}

} // namespace kiln::detail

namespace kiln::nn::functional {

// ---------------------------------------------------------------- group_norm, instance_norm

namespace {

// The product of x's dims from 2 on (1 for [N, C]): the elements of one channel of one sample.
int64_t spatial_size(const Tensor& x) {
  int64_t m = 1;
  for (int64_t d = 2; d < x.dim(); ++d) m *= x.size(d);
  return m;
}

// weight and bias [C] of x [N, C, ...], each optional, floating.
void check_channel_affine(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, const Loc& loc) {
  for (const Tensor* t : {&weight, &bias})
    if (t->defined() && (t->shape() != IntList{x.size(1)} || !is_floating(t->dtype())))
      fail(op, "the weight and bias must be floating [C] tensors, C = " + std::to_string(x.size(1)), {&x, t}, loc);
}

} // namespace

Tensor local_response_norm(const Tensor& x, int64_t size, double alpha, double beta, double k, Loc loc) {
  const graph::SourceScope at(loc, "local_response_norm");
  const detail::UserCall call("local_response_norm", loc);
  require_floating("local_response_norm", x, loc);
  if (x.dim() < 3) fail("local_response_norm", "needs an input of 3 or more dims [N, C, ...]", {&x}, loc);
  if (size < 1) fail("local_response_norm", "size must be positive, got " + std::to_string(size), {&x}, loc);
  if (x.numel() == 0) return x;
  IntList pads(2 * static_cast<size_t>(x.dim() - 1), 0); // (before, after) from the last dim: channels last
  pads[pads.size() - 2] = size / 2, pads.back() = (size - 1) / 2;
  const Tensor windows = pad(x * x, pads, 0, loc).unfold(1, size, 1, loc); // [N, C, ..., size]
  const Tensor div = pow(windows.sum({-1}, false, loc) * (alpha / static_cast<double>(size)) + k, beta, loc);
  return x / div;
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps, Loc loc) {
  const char* op = "group_norm";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  require_floating(op, x, loc);
  if (x.dim() < 2) fail(op, "expects [N, C, ...] inputs", {&x}, loc);
  const int64_t n = x.size(0), c = x.size(1);
  if (num_groups <= 0 || c % num_groups != 0)
    fail(op,
         "the number of channels " + std::to_string(c) +
             " must be divisible by num_groups=" + std::to_string(num_groups),
         {&x}, loc);
  check_channel_affine(op, x, weight, bias, loc);
  // each group of each sample as one row: layer_norm's standardization over it
  const Tensor rows = x.reshape({n, num_groups, c / num_groups * spatial_size(x)}, loc);
  const Tensor y = kiln::detail::standardize(rows, {2}, eps, loc).y.reshape(x.shape(), loc);
  return kiln::detail::per_channel_affine(y, weight, bias);
}

Tensor instance_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight, const Tensor& bias,
                     bool use_input_stats, double momentum, double eps, Loc loc) {
  const char* op = "instance_norm";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  require_floating(op, x, loc);
  if (x.dim() < 2) fail(op, "expects [N, C, ...] inputs", {&x}, loc);
  kiln::detail::check_batch_norm_tensors(op, x, {&running_mean, &running_var, &weight, &bias}, loc);
  if (!use_input_stats) {
    if (!running_mean.defined() || !running_var.defined())
      fail(op, "needs the running statistics when use_input_stats is false", {&x}, loc);
    return kiln::detail::batch_norm_with(x, running_mean, running_var, weight, bias, false, momentum, Tensor(), eps,
                                         loc);
  }
  const int64_t n = x.size(0), c = x.size(1), m = spatial_size(x);
  if (m <= 1) fail(op, "needs more than one spatial element per channel to use the input statistics", {&x}, loc);
  const kiln::detail::Standardized s = kiln::detail::standardize(x.reshape({n, c, m}, loc), {2}, eps, loc);
  // As PyTorch (batch_norm of [1, N*C, ...] with the statistics repeated N times, then averaged back): the
  // running statistics move toward the batch's average of the per-sample ones.
  if (running_mean.defined()) kiln::detail::update_running(running_mean, s.mean.reshape({n, c}).mean({0}), momentum);
  if (running_var.defined())
    kiln::detail::update_running(
        running_var, (s.var * (static_cast<double>(m) / static_cast<double>(m - 1))).reshape({n, c}).mean({0}),
        momentum);
  return kiln::detail::per_channel_affine(s.y.reshape(x.shape(), loc), weight, bias);
}

Tensor dropout(const Tensor& x, double p, uint64_t seed, bool training, Loc loc) {
  const graph::SourceScope at(loc, "dropout"); // nodes made here record the caller's line
  require_floating("dropout", x, loc);
  if (!(p >= 0 && p <= 1)) fail("dropout", "p must be in [0, 1], got " + std::to_string(p), {&x}, loc);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  Tensor keep = cast(rand(x.shape(), seed, x.dtype(), x.device(), loc) >= p, x.dtype(), loc);
  return x * (keep * (1.0 / (1.0 - p)));
}

namespace {

// Dropout of whole channels: x of rank `unbatched` (channels at dim 0) or unbatched + 1 (at dim 1, after the
// batch), `batched_only` when the lower rank is batched too (dropout2d's [N, C, L]).
Tensor feature_dropout(const char* op, const Tensor& x, double p, uint64_t seed, bool training, int64_t unbatched,
                       bool batched_only, const Loc& loc) {
  const graph::SourceScope at(loc, op);
  require_floating(op, x, loc);
  if (x.dim() != unbatched && x.dim() != unbatched + 1)
    fail(op, "expects an input of " + std::to_string(unbatched) + " or " + std::to_string(unbatched + 1) + " dims",
         {&x}, loc);
  if (!(p >= 0 && p <= 1)) fail(op, "p must be in [0, 1], got " + std::to_string(p), {&x}, loc);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  const int64_t kept = x.dim() == unbatched && !batched_only ? 1 : 2; // the dims that own a mask
  IntList mask_shape(x.shape().begin(), x.shape().begin() + kept);
  mask_shape.resize(static_cast<size_t>(x.dim()), 1);
  const Tensor keep = cast(rand(mask_shape, seed, x.dtype(), x.device(), loc) >= p, x.dtype(), loc);
  return x * (keep * (1.0 / (1.0 - p)));
}

// PyTorch's alpha dropout of x with `keep` (1 kept, 0 dropped; broadcast to x): x keep a + (keep - 1) alpha a +
// alpha a p.
Tensor alpha_dropout_with(const Tensor& x, const Tensor& keep, double p) {
  constexpr double kAlpha = 1.7580993408473766;
  const double a = 1.0 / std::sqrt((kAlpha * kAlpha * p + 1) * (1 - p));
  return x * (keep * a) + ((keep - 1.0) * (kAlpha * a) + kAlpha * a * p);
}

// alpha_dropout (feature: one draw per [N, C]) checked under `op`.
Tensor alpha_dropout_of(const char* op, const Tensor& x, double p, uint64_t seed, bool training, bool feature,
                        const Loc& loc) {
  const graph::SourceScope at(loc, op);
  require_floating(op, x, loc);
  if (feature && x.dim() < 2) fail(op, "needs an input of at least 2 dims [N, C, ...]", {&x}, loc);
  if (!(p >= 0 && p <= 1)) fail(op, "p must be in [0, 1], got " + std::to_string(p), {&x}, loc);
  if (!training || p == 0 || x.numel() == 0) return x;
  if (p == 1) return x * 0.0;
  IntList mask_shape = x.shape();
  if (feature)
    for (size_t d = 2; d < mask_shape.size(); ++d) mask_shape[d] = 1;
  const Tensor keep = cast(rand(mask_shape, seed, x.dtype(), x.device(), loc) >= p, x.dtype(), loc);
  return alpha_dropout_with(x, keep, p);
}

} // namespace

Tensor alpha_dropout(const Tensor& x, double p, uint64_t seed, bool training, Loc loc) {
  return alpha_dropout_of("alpha_dropout", x, p, seed, training, false, loc);
}

Tensor feature_alpha_dropout(const Tensor& x, double p, uint64_t seed, bool training, Loc loc) {
  return alpha_dropout_of("feature_alpha_dropout", x, p, seed, training, true, loc);
}

Tensor dropout1d(const Tensor& x, double p, uint64_t seed, bool training, Loc loc) {
  return feature_dropout("dropout1d", x, p, seed, training, 2, false, loc);
}

Tensor dropout2d(const Tensor& x, double p, uint64_t seed, bool training, Loc loc) {
  return feature_dropout("dropout2d", x, p, seed, training, 3, true, loc);
}

Tensor dropout3d(const Tensor& x, double p, uint64_t seed, bool training, Loc loc) {
  return feature_dropout("dropout3d", x, p, seed, training, 4, false, loc);
}

// ---------------------------------------------------------------- losses

namespace {

// The checks nll_loss and cross_entropy share: input [N, C, d1, ...] or [C], targets [N, d1, ...]
// or [], integer; weight undefined or [C].
void check_class_loss(const std::string& op, const Tensor& input, const Tensor& targets, const Tensor& weight,
                      const Loc& loc) {
  require_floating(op, input, loc);
  require_integral(op, targets, loc);
  graph::Shape want = input.shape();
  if (!want.empty()) want.erase(want.begin() + (want.size() > 1 ? 1 : 0));
  if (input.dim() == 0 || targets.shape() != want)
    fail(op, "expects [N, C, d1, ...] (or [C]) inputs and [N, d1, ...] (or []) targets", {&input, &targets}, loc);
  if (weight.defined() && (weight.shape() != IntList{input.size(input.dim() > 1 ? 1 : 0)} || !is_floating(weight.dtype())))
    fail(op, "the class weights must be a floating [C] tensor", {&input, &weight}, loc);
}

// [N, C, d1, ...] -> [N, d1, ..., C]: the class dim last, so that the targets' one-hot mask lines up.
Tensor classes_last(const Tensor& x) {
  if (x.dim() <= 2) return x;
  IntList perm{0};
  for (int64_t d = 2; d < x.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return x.permute(perm);
}

// The targets of a class loss, per element: the one-hot mask of the target's class (none where
// ignored), and the target's weight w[t] (1 without weights, 0 where ignored) in `dtype`.
struct ClassTargets {
  Tensor mask;   ///< bool [..., C]
  Tensor weight; ///< [...]
};

ClassTargets class_targets(const std::string& op, const Tensor& targets, int64_t classes, int64_t ignore_index,
                           const Tensor& weight, DType dtype, const Loc& loc) {
  if (targets.node()->realized()) // data from a loader: checked now, ignored targets excepted
    for (int64_t v : targets.to_vector<int64_t>())
      if (v != ignore_index && (v < 0 || v >= classes))
        fail(op, "target " + std::to_string(v) + " is out of range for " + std::to_string(classes) + " classes",
             {&targets}, loc);
  const Tensor valid = ne(targets, wrap_scalar(ignore_index, targets), loc);
  const Tensor safe = where(valid, targets, 0, loc); // an ignored target reads class 0, masked out below
  ClassTargets t;
  t.mask = logical_and(class_mask(op, safe, classes, loc), valid.unsqueeze(-1, loc), loc);
  t.weight = weight.defined() ? where(t.mask, weight.to(dtype, loc), 0, loc).sum(-1, false, loc) : valid.to(dtype, loc);
  return t;
}

// Reduces per-element losses; the mean divides by the total weight of the targets, as PyTorch.
Tensor reduce_class_loss(const std::string& op, const Tensor& per_element, const Tensor& target_weight, Reduction r,
                         const Loc& loc) {
  if (r == Reduction::Mean) return per_element.sum() / target_weight.sum();
  return reduce(op, per_element, r, loc);
}

// -w[t] * log_probs[t] per element of log-probabilities with the class dim last.
Tensor picked_nll(const Tensor& log_probs_last, const ClassTargets& t, bool weighted) {
  // A select, not a product with the one-hot: a -inf log-probability of another class adds 0, not NaN
  // (-inf * 0), and its gradient is exactly 0, as in PyTorch.
  Tensor picked = -where(t.mask, log_probs_last, 0).sum(-1);
  return weighted ? picked * t.weight : picked;
}

} // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, NllLossOptions options, Loc loc) {
  const graph::SourceScope at(loc, "nll_loss"); // nodes made here record the caller's line
  detail::UserCall call("nll_loss", loc); // one_hot's errors are nll_loss's
  check_class_loss("nll_loss", log_probs, targets, options.weight, loc);
  const Tensor lp = classes_last(log_probs);
  const ClassTargets t = class_targets("nll_loss", targets, lp.size(-1), options.ignore_index, options.weight,
                                       lp.dtype(), loc);
  return reduce_class_loss("nll_loss", picked_nll(lp, t, options.weight.defined()), t.weight, options.reduction, loc);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction, Loc loc) {
  return nll_loss(log_probs, targets, NllLossOptions{.reduction = reduction}, loc);
}

namespace {

// cross_entropy with class probabilities as targets (PyTorch's soft labels): per element
// -sum over c of w[c] * q[c] * log_softmax[c], q = (1 - s) p + s / C; the mean divides by the number
// of elements (N * d1 * ...), not by weights.
Tensor cross_entropy_of_probabilities(const Tensor& logits, const Tensor& probs, const CrossEntropyOptions& options,
                                      const Loc& loc) {
  if (options.ignore_index >= 0)
    fail("cross_entropy", "ignore_index is not supported for probability targets", {&logits, &probs}, loc);
  if (options.weight.defined() &&
      (options.weight.shape() != IntList{logits.size(logits.dim() > 1 ? 1 : 0)} || !is_floating(options.weight.dtype())))
    fail("cross_entropy", "the class weights must be a floating [C] tensor", {&logits, &options.weight}, loc);
  const Tensor logp = log_softmax(classes_last(logits), -1, loc);
  const double s = options.label_smoothing;
  Tensor q = classes_last(probs).to(logp.dtype(), loc);
  if (s > 0) q = q * (1.0 - s) + s / static_cast<double>(logp.size(-1));
  Tensor terms = q * logp;
  if (options.weight.defined()) terms = terms * options.weight.to(logp.dtype(), loc);
  return reduce("cross_entropy", -terms.sum(-1), options.reduction, loc);
}

} // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, CrossEntropyOptions options, Loc loc) {
  const graph::SourceScope at(loc, "cross_entropy"); // nodes made here record the caller's line
  detail::UserCall call("cross_entropy", loc); // nll_loss's and one_hot's errors are cross_entropy's
  const double s = options.label_smoothing;
  if (!(s >= 0 && s <= 1)) fail("cross_entropy", "label_smoothing must be in [0, 1]", {&logits}, loc);
  if (targets.defined() && is_floating(targets.dtype()) && is_floating(logits.dtype()) &&
      targets.shape() == logits.shape() && logits.dim() > 0)
    return cross_entropy_of_probabilities(logits, targets, options, loc);
  check_class_loss("cross_entropy", logits, targets, options.weight, loc);
  const Tensor logp = log_softmax(classes_last(logits), -1, loc);
  const ClassTargets t = class_targets("cross_entropy", targets, logp.size(-1), options.ignore_index, options.weight,
                                       logp.dtype(), loc);
  const bool weighted = options.weight.defined();
  Tensor nll = picked_nll(logp, t, weighted);
  if (s == 0) return reduce_class_loss("cross_entropy", nll, t.weight, options.reduction, loc);
  // PyTorch's smoothing term: the mean over classes of -w[c] * log p[c], 0 where the target is ignored.
  Tensor smooth = -(weighted ? logp * options.weight.to(logp.dtype(), loc) : logp).mean(-1);
  smooth = where(ne(targets, wrap_scalar(options.ignore_index, targets), loc), smooth, 0, loc);
  return reduce_class_loss("cross_entropy", nll * (1.0 - s) + smooth * s, t.weight, options.reduction, loc);
}

namespace {

// An elementwise loss's input and target: a floating input and a target of its shape. PyTorch
// broadcasts them with a warning that it "will likely lead to incorrect results"; kiln refuses.
void check_same_shape(const std::string& op, const Tensor& input, const Tensor& target, const Loc& loc) {
  require_floating(op, input, loc);
  if (!target.defined()) throw Error(op, "the target is undefined", loc);
  if (input.shape() != target.shape()) fail(op, "input and target must have the same shape", {&input, &target}, loc);
}

// An optional weight of a binary cross entropy: floating and broadcast to the input's shape.
void check_weight(const std::string& op, const char* what, const Tensor& weight, const Tensor& input, const Loc& loc) {
  if (!weight.defined()) return;
  if (!is_floating(weight.dtype())) fail(op, std::string(what) + " must be floating", {&input, &weight}, loc);
  const auto shape = graph::broadcast_shapes(input.shape(), weight.shape());
  if (!shape || *shape != input.shape())
    fail(op, std::string(what) + " must broadcast to the input's shape " + graph::shape_str(input.shape()),
         {&input, &weight}, loc);
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

} // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc) {
  const graph::SourceScope at(loc, "mse_loss"); // nodes made here record the caller's line
  detail::UserCall call("mse_loss", loc); // the errors of the ops it is made of are mse_loss's
  check_same_shape("mse_loss", input, target, loc);
  Tensor d = input - target;
  return reduce("mse_loss", d * d, reduction, loc);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc) {
  const graph::SourceScope at(loc, "l1_loss"); // nodes made here record the caller's line
  detail::UserCall call("l1_loss", loc); // the errors of the ops it is made of are l1_loss's
  check_same_shape("l1_loss", input, target, loc);
  return reduce("l1_loss", abs(input - target), reduction, loc);
}

namespace {

// PyTorch's smooth L1 (huber = false) or Huber loss of d = input - target per element, with the
// threshold t (beta or delta) > 0. The quadratic branch squares d only where it is taken, so that its
// derivative elsewhere is 0 * 0, not 0 * inf at an infinite d (PyTorch's gradient is +-1 or +-delta there).
Tensor smooth_or_huber(const Tensor& d, double t, bool huber) {
  const Tensor magnitude = abs(d);
  const Tensor small = magnitude < t;
  const Tensor q = where(small, d, 0);
  if (huber) return where(small, 0.5 * q * q, t * (magnitude - 0.5 * t));
  return where(small, 0.5 * q * q / t, magnitude - 0.5 * t);
}

} // namespace

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta, Loc loc) {
  const graph::SourceScope at(loc, "smooth_l1_loss"); // nodes made here record the caller's line
  detail::UserCall call("smooth_l1_loss", loc); // the errors of the ops it is made of are smooth_l1_loss's
  check_same_shape("smooth_l1_loss", input, target, loc);
  if (!(beta >= 0)) fail("smooth_l1_loss", "beta must be non-negative, got " + number(beta), {&input}, loc);
  const Tensor d = input - target;
  if (beta > 0) return reduce("smooth_l1_loss", smooth_or_huber(d, beta, false), reduction, loc);
  // beta = 0: |d|, whose gradient PyTorch's smooth_l1 backward makes -1 where d <= -beta, so at d = 0
  // too; 0 - d (not -d) keeps the value there +0, as |d|.
  return reduce("smooth_l1_loss", where(d > 0, d, 0.0 - d), reduction, loc);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta, Loc loc) {
  const graph::SourceScope at(loc, "huber_loss"); // nodes made here record the caller's line
  detail::UserCall call("huber_loss", loc); // the errors of the ops it is made of are huber_loss's
  check_same_shape("huber_loss", input, target, loc);
  if (!(delta > 0)) fail("huber_loss", "delta must be positive, got " + number(delta), {&input}, loc);
  return reduce("huber_loss", smooth_or_huber(input - target, delta, true), reduction, loc);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target, Loc loc) {
  const graph::SourceScope at(loc, "kl_div"); // nodes made here record the caller's line
  detail::UserCall call("kl_div", loc); // the errors of the ops it is made of are kl_div's
  require_floating("kl_div", input, loc);
  if (!target.defined()) throw Error("kl_div", "the target is undefined", loc);
  if (!graph::broadcast_shapes(input.shape(), target.shape()))
    fail("kl_div", "input and target shapes cannot be broadcast together", {&input, &target}, loc);
  Tensor per;
  if (log_target) {
    per = exp(target) * (target - input);
  } else {
    // xlogy(target, target): 0 where target is 0 (a NaN target stays NaN). The log reads 1 there, so
    // that its derivative (1 / 0) does not reach the gradient as 0 * inf.
    const Tensor nonzero = target != 0;
    per = where(nonzero, target * log(where(nonzero, target, 1)), 0) - target * input;
  }
  if (reduction != Reduction::BatchMean) return reduce("kl_div", per, reduction, loc);
  // PyTorch's "batchmean": the sum over the batch size, input's first extent (none for a 0-d input)
  const Tensor total = per.sum();
  return input.dim() == 0 ? total : total / static_cast<double>(input.size(0));
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                            Loc loc) {
  const graph::SourceScope at(loc, "binary_cross_entropy"); // nodes made here record the caller's line
  detail::UserCall call("binary_cross_entropy", loc); // the errors of the ops it is made of are its own
  check_same_shape("binary_cross_entropy", input, target, loc);
  check_weight("binary_cross_entropy", "the weight", weight, input, loc);
  if (input.node()->realized()) // computed already (data, a loaded tensor): checked as PyTorch's kernel
    for (double v : input.to_vector<double>())
      if (!(v >= 0 && v <= 1))
        fail("binary_cross_entropy", "input values must be between 0 and 1, got " + number(v), {&input}, loc);
  // log(v) clamped at -100 as PyTorch; where v is 0 the log reads 1, so that its derivative (1 / 0)
  // does not reach the gradient as 0 * inf.
  const auto clamped_log = [](const Tensor& v) {
    const Tensor nonzero = v != 0;
    return where(nonzero, clamp(log(where(nonzero, v, 1)), -100.0), -100.0);
  };
  Tensor per = (target - 1.0) * clamped_log(1.0 - input) - target * clamped_log(input); // PyTorch's order
  if (weight.defined()) per = per * weight;
  return reduce("binary_cross_entropy", per, reduction, loc);
}

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc) {
  return binary_cross_entropy(input, target, Tensor(), reduction, loc);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets,
                                        BinaryCrossEntropyWithLogitsOptions options, Loc loc) {
  const graph::SourceScope at(loc, "binary_cross_entropy_with_logits"); // nodes made here record the caller's line
  const std::string op = "binary_cross_entropy_with_logits";
  detail::UserCall call(op, loc); // the errors of the ops it is made of are its own
  require_floating(op, logits, loc);
  if (!targets.defined()) throw Error(op, "the targets are undefined", loc);
  if (logits.shape() != targets.shape()) fail(op, "logits and targets must have the same shape", {&logits, &targets}, loc);
  check_weight(op, "the weight", options.weight, logits, loc);
  check_weight(op, "pos_weight", options.pos_weight, logits, loc);
  // (1 - y) x + log(1 + e^-x) for x >= 0, -y x + log(1 + e^x) below: no overflow for any x. The
  // branches and |x| are selects on x >= 0, so that at x = 0 both take their right-hand
  // derivatives (1 - y - 1/2: sigmoid(0) - y); relu' and abs' would both give 0 there, and -y.
  // With a pos_weight p: (1 - y) x + l log(1 + e^-x) and -p y x + l log(1 + e^x), l = 1 + (p - 1) y.
  const Tensor right = logits >= 0;
  const Tensor magnitude = where(right, logits, -logits);
  const Tensor soft = log(1.0 + exp(-magnitude));
  Tensor per;
  if (options.pos_weight.defined()) {
    const Tensor& p = options.pos_weight;
    per = where(right, (1.0 - targets) * logits, -(p * targets) * logits) + ((p - 1.0) * targets + 1.0) * soft;
  } else {
    per = where(right, (1.0 - targets) * logits, -targets * logits) + soft;
  }
  if (options.weight.defined()) per = per * options.weight;
  return reduce(op, per, options.reduction, loc);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, Reduction reduction, Loc loc) {
  return binary_cross_entropy_with_logits(logits, targets, BinaryCrossEntropyWithLogitsOptions{.reduction = reduction},
                                          loc);
}

} // namespace kiln::nn::functional

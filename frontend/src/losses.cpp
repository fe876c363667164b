// More losses of torch.nn.functional (kiln/functional.h), as PyTorch 1.13's: margin ranking, hinge embedding,
// soft margin, multi-label soft margin, multi-class and multi-label margin, triplet margin, cosine embedding,
// Poisson and Gaussian negative log likelihood. Each is a composition of kiln's ops (so gradients, fusion and
// compile() come with it), checks its arguments under its own name, and reports an error of an op it uses as its
// own, at the caller's line (detail::UserCall).

#include <cmath>
#include <numbers>

#include "frontend/src/tensor_impl.h"
#include "kiln/functional.h"
#include "kiln/indexops.h"

namespace kiln::nn::functional {

using detail::fail;

namespace {

using Scope = detail::OpScope;

void require_floating(const char* op, const Tensor& x, const char* what, const Loc& loc) {
  if (!x.defined()) throw Error(op, std::string(what) + " is undefined", loc);
  if (!is_floating(x.dtype())) fail(op, std::string(what) + " must be floating", {&x}, loc);
}

void require_integral(const char* op, const Tensor& t, const Tensor& x, const Loc& loc) {
  if (!t.defined()) throw Error(op, "the target is undefined", loc);
  if (!is_integral(t.dtype())) fail(op, "needs integer (i32 or i64) class targets", {&x, &t}, loc);
}

// The per-element losses reduced (BatchMean is kl_div's alone).
Tensor reduced(const char* op, const Tensor& per, Reduction r, const Loc& loc) {
  switch (r) {
  case Reduction::Mean: return per.mean({}, false, loc);
  case Reduction::Sum: return per.sum({}, false, loc);
  case Reduction::None: return per;
  case Reduction::BatchMean: break;
  }
  fail(op, "reduction BatchMean is kl_div's only (as PyTorch's 'batchmean'); use Mean, Sum or None", {&per}, loc);
}

// z where z > 0, else 0 with gradient 0 (PyTorch's margin kernels test z > 0).
Tensor hinge(const Tensor& z, const Loc& loc) { return where(gt(z, wrap_scalar(0, z), loc), z, 0, loc); }

// When targets are already computed, checks them against [low, classes); lazy ones are checked by the gather.
void check_targets(const char* op, const Tensor& input, const Tensor& target, int64_t low, int64_t classes,
                   const Loc& loc) {
  if (!target.node()->realized() || detail::active_capture()) return; // a trace cannot read values
  for (int64_t v : target.to_vector<int64_t>(loc))
    if (v < low || v >= classes)
      fail(op,
           "target " + std::to_string(v) + " is out of range [" + std::to_string(low) + ", " + std::to_string(classes) +
               ")",
           {&input, &target}, loc);
}

// Input [N, C] or [C] as [N, C].
Tensor as_rows(const char* op, const Tensor& input, const Tensor& target, const Loc& loc) {
  require_floating(op, input, "the input", loc);
  if (input.dim() != 1 && input.dim() != 2) fail(op, "needs an input of 1 or 2 dims", {&input, &target}, loc);
  return input.dim() == 1 ? input.unsqueeze(0, loc) : input;
}

// Multi-margin hinges [N, C] of rows x [N, C] against the targets t [N] (each target's own class excluded).
Tensor multi_margin_hinges(const Tensor& x, const Tensor& t, const MultiMarginLossOptions& o, const Loc& loc) {
  const Tensor ty = t.to(kInt64, loc).unsqueeze(1, loc);
  Tensor h = hinge(gather(x, 1, ty, loc) * -1.0 + o.margin + x, loc);
  if (o.p == 2) h = h * h;
  const Tensor classes = arange(0, static_cast<double>(x.size(1)), 1, kInt64, x.device(), loc);
  h = where(ne(classes, ty, loc), h, 0, loc);
  if (o.weight.defined())
    h = h * index_select(o.weight.to(x.dtype(), loc), 0, ty.reshape({-1}, loc), loc).unsqueeze(1, loc);
  return h;
}

// multilabel_margin_loss per sample of rows x [N, C] and targets t [N, C]: listed (before the first -1) classes j
// against unlisted classes i.
Tensor multilabel_margin_rows(const Tensor& x, const Tensor& t, const Loc& loc) {
  const int64_t c = x.size(1);
  const Tensor listed = eq(cumsum(eq(t, wrap_scalar(-1, t), loc), 1, loc), wrap_scalar(0, t), loc); // [N, j]
  const Tensor tj = where(listed, t, 0, loc).to(kInt64, loc);
  const Tensor classes = arange(0, static_cast<double>(c), 1, kInt64, x.device(), loc);
  const Tensor hit = logical_and(eq(tj.unsqueeze(-1, loc), classes, loc), listed.unsqueeze(-1, loc), loc); // [N, j, i]
  const Tensor is_target = gt(hit.sum({1}, false, loc), wrap_scalar(0, t), loc); // [N, i]
  const Tensor z = 1.0 - (gather(x, 1, tj, loc).unsqueeze(-1, loc) - x.unsqueeze(1, loc)); // [N, j, i]
  const Tensor pairs = logical_and(listed.unsqueeze(-1, loc), logical_not(is_target, loc).unsqueeze(1, loc), loc);
  return where(pairs, hinge(z, loc), 0, loc).sum({1, 2}, false, loc) / static_cast<double>(c);
}

// var shaped for input (PyTorch's homoscedastic forms: input's shape without its last dim, or with a last 1).
Tensor shaped_var(const Tensor& input, const Tensor& var, const Loc& loc) {
  if (var.shape() == input.shape()) return var;
  const IntList lead(input.shape().begin(), input.shape().end() - (input.dim() > 0 ? 1 : 0));
  if (input.dim() > 0 && var.shape() == lead) return var.unsqueeze(-1, loc);
  if (input.dim() > 0 && var.dim() == input.dim() && var.size(-1) == 1 &&
      IntList(var.shape().begin(), var.shape().end() - 1) == lead)
    return var;
  fail("gaussian_nll_loss",
       "var must have the input's shape, or the input's without its last dim, or with a last "
       "extent of 1",
       {&input, &var}, loc);
}

} // namespace

Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                           Reduction reduction, Loc loc) {
  const char* op = "margin_ranking_loss";
  const Scope scope(op, loc);
  require_floating(op, input1, "input1", loc);
  require_floating(op, input2, "input2", loc);
  if (!target.defined()) throw Error(op, "the target is undefined", loc);
  if (input1.dim() != input2.dim() || input1.dim() != target.dim())
    fail(op, "input1, input2 and target must have one rank", {&input1, &input2, &target}, loc);
  const Tensor per = clamp(target * -1.0 * (input1 - input2) + margin, 0.0, std::nullopt, loc);
  return reduced(op, per, reduction, loc);
}

Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, double margin, Reduction reduction, Loc loc) {
  const char* op = "hinge_embedding_loss";
  const Scope scope(op, loc);
  require_floating(op, input, "the input", loc);
  if (!target.defined()) throw Error(op, "the target is undefined", loc);
  const Tensor zero = zeros({}, input.dtype(), input.device(), loc);
  const Tensor to_margin = clamp(margin - input, 0.0, std::nullopt, loc);
  const Tensor per = where(ne(target, wrap_scalar(1, target), loc), to_margin, zero, loc) +
                     where(ne(target, wrap_scalar(-1, target), loc), input, zero, loc);
  return reduced(op, per, reduction, loc);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc) {
  const char* op = "soft_margin_loss";
  const Scope scope(op, loc);
  require_floating(op, input, "the input", loc);
  if (!target.defined()) throw Error(op, "the target is undefined", loc);
  return reduced(op, log1p(exp(-input * target, loc), loc), reduction, loc);
}

Tensor multilabel_soft_margin_loss(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                                   Loc loc) {
  const char* op = "multilabel_soft_margin_loss";
  const Scope scope(op, loc);
  require_floating(op, input, "the input", loc);
  if (!target.defined()) throw Error(op, "the target is undefined", loc);
  if (input.dim() == 0) fail(op, "needs an input with a class dim", {&input, &target}, loc);
  Tensor per = -(target * logsigmoid(input, loc) + (1.0 - target) * logsigmoid(-input, loc));
  if (weight.defined()) per = per * weight;
  per = per.sum({-1}, false, loc) / static_cast<double>(input.size(-1));
  return reduced(op, per, reduction, loc);
}

Tensor multi_margin_loss(const Tensor& input, const Tensor& target, MultiMarginLossOptions options, Loc loc) {
  const char* op = "multi_margin_loss";
  const Scope scope(op, loc);
  const Tensor x = as_rows(op, input, target, loc);
  require_integral(op, target, input, loc);
  if (options.p != 1 && options.p != 2) fail(op, "p must be 1 or 2, got " + std::to_string(options.p), {&input}, loc);
  if (target.dim() > 1 || target.numel() != x.size(0))
    fail(op, "needs one target per sample (" + std::to_string(x.size(0)) + ")", {&input, &target}, loc);
  const Tensor& w = options.weight;
  if (w.defined() && (w.shape() != IntList{x.size(1)} || !is_floating(w.dtype())))
    fail(op, "the weight must be a floating [C] tensor", {&input, &w}, loc);
  check_targets(op, input, target, 0, x.size(1), loc);
  const Tensor per = multi_margin_hinges(x, target.reshape({-1}, loc), options, loc).sum({1}, false, loc) /
                     static_cast<double>(x.size(1));
  return reduced(op, per.reshape(input.dim() == 1 ? target.shape() : IntList{x.size(0)}, loc), options.reduction, loc);
}

Tensor multilabel_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc) {
  const char* op = "multilabel_margin_loss";
  const Scope scope(op, loc);
  const Tensor x = as_rows(op, input, target, loc);
  require_integral(op, target, input, loc);
  if (target.shape() != input.shape()) fail(op, "the target must have the input's shape", {&input, &target}, loc);
  check_targets(op, input, target, -1, x.size(1), loc);
  const Tensor per = multilabel_margin_rows(x, target.reshape(x.shape(), loc), loc);
  return reduced(op, input.dim() == 1 ? per.reshape({}, loc) : per, reduction, loc);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           TripletMarginLossOptions options, Loc loc) {
  const char* op = "triplet_margin_loss";
  const Scope scope(op, loc);
  require_floating(op, anchor, "the anchor", loc);
  require_floating(op, positive, "the positive", loc);
  require_floating(op, negative, "the negative", loc);
  if (anchor.dim() != positive.dim() || anchor.dim() != negative.dim() || anchor.dim() < 1 || anchor.dim() > 2)
    fail(op, "anchor, positive and negative must have one rank, 1 or 2", {&anchor, &positive, &negative}, loc);
  const double p = options.p, eps = options.eps;
  const Tensor d_pos = pairwise_distance(anchor, positive, p, eps, false, loc);
  Tensor d_neg = pairwise_distance(anchor, negative, p, eps, false, loc);
  if (options.swap) d_neg = minimum(d_neg, pairwise_distance(positive, negative, p, eps, false, loc), loc);
  const Tensor per = clamp(d_pos - d_neg + options.margin, 0.0, std::nullopt, loc);
  return reduced(op, per, options.reduction, loc);
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                             Reduction reduction, Loc loc) {
  const char* op = "cosine_embedding_loss";
  const Scope scope(op, loc);
  require_floating(op, input1, "input1", loc);
  require_floating(op, input2, "input2", loc);
  if (!target.defined()) throw Error(op, "the target is undefined", loc);
  const int64_t d = target.dim();
  if (d > 1 || input1.dim() != d + 1 || input2.dim() != d + 1)
    fail(op, "needs inputs [N, D] with a target [N], or [D] with a 0-d target", {&input1, &input2, &target}, loc);
  const Tensor dot = (input1 * input2).sum({d}, false, loc);
  const Tensor sq1 = (input1 * input1).sum({d}, false, loc) + 1e-12,
               sq2 = (input2 * input2).sum({d}, false, loc) + 1e-12;
  const Tensor cos = dot / sqrt(sq1 * sq2, loc);
  const Tensor zero = zeros({}, cos.dtype(), cos.device(), loc);
  const Tensor per =
      where(eq(target, wrap_scalar(1, target), loc), 1.0 - cos, zero, loc) +
      where(eq(target, wrap_scalar(-1, target), loc), clamp(cos - margin, 0.0, std::nullopt, loc), zero, loc);
  return reduced(op, per, reduction, loc);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, PoissonNllLossOptions options, Loc loc) {
  const char* op = "poisson_nll_loss";
  const Scope scope(op, loc);
  require_floating(op, input, "the input", loc);
  if (!target.defined()) throw Error(op, "the target is undefined", loc);
  Tensor per = options.log_input ? exp(input, loc) - target * input : input - target * log(input + options.eps, loc);
  if (options.full) {
    const Tensor stirling = target * log(target, loc) - target + 0.5 * log(target * (2 * std::numbers::pi), loc);
    per = per + where(gt(target, wrap_scalar(1, target), loc), stirling, 0, loc);
  }
  return reduced(op, per, options.reduction, loc);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, GaussianNllLossOptions options,
                         Loc loc) {
  const char* op = "gaussian_nll_loss";
  const Scope scope(op, loc);
  require_floating(op, input, "the input", loc);
  require_floating(op, target, "the target", loc);
  require_floating(op, var, "var", loc);
  const Tensor v = shaped_var(input, var, loc);
  if (v.node()->realized() && !detail::active_capture()) // a trace cannot read values
    for (double e : v.to_vector<double>(loc))
      if (e < 0) fail(op, "var has a negative entry", {&input, &var}, loc);
  // Clamped at eps as PyTorch's, in place under no_grad: the value clamped, the gradient as if it were not.
  const Tensor clamped = clamp(v.detach(), options.eps, std::nullopt, loc) + (v - v.detach());
  Tensor per = 0.5 * (log(clamped, loc) + square(input - target, loc) / clamped);
  if (options.full) per = per + 0.5 * std::log(2 * std::numbers::pi);
  return reduced(op, per, options.reduction, loc);
}

} // namespace kiln::nn::functional

// torch.nn's loss and distance classes (kiln/nn.h): each forward is its functional's call under the module's
// name and the caller's line, with the options the module was made with.

#include "frontend/src/tensor_impl.h"
#include "kiln/nn.h"

namespace kiln::nn {

namespace {

// The caller's line on the nodes a module's forward makes, and the module's name on the errors of what it calls.
struct Call {
  graph::SourceScope at;
  detail::UserCall call;
  Call(const std::string& module, const Loc& loc) : at(loc), call(module, loc) {}
};

// Registers a class weight as the module's buffer "weight" (when defined) and returns it.
Tensor weight_buffer(Module& m, const Tensor& weight, const Loc& loc) {
  return weight.defined() ? m.register_buffer("weight", weight, loc) : weight;
}

} // namespace

CrossEntropyLoss::CrossEntropyLoss(functional::CrossEntropyOptions options, Loc loc) : options_(std::move(options)) {
  options_.weight = weight_buffer(*this, options_.weight, loc);
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::cross_entropy(input, target, options_, loc);
}

NLLLoss::NLLLoss(functional::NllLossOptions options, Loc loc) : options_(std::move(options)) {
  options_.weight = weight_buffer(*this, options_.weight, loc);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::nll_loss(input, target, options_, loc);
}

BCELoss::BCELoss(Tensor weight, functional::Reduction reduction, Loc loc)
    : weight_(weight_buffer(*this, weight, loc)), reduction_(reduction) {}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::binary_cross_entropy(input, target, weight_, reduction_, loc);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(functional::BinaryCrossEntropyWithLogitsOptions options, Loc loc)
    : options_(std::move(options)) {
  options_.weight = weight_buffer(*this, options_.weight, loc);
  if (options_.pos_weight.defined()) options_.pos_weight = register_buffer("pos_weight", options_.pos_weight, loc);
}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::binary_cross_entropy_with_logits(input, target, options_, loc);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::mse_loss(input, target, reduction(), loc);
}

Tensor L1Loss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::l1_loss(input, target, reduction(), loc);
}

Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::smooth_l1_loss(input, target, reduction(), beta_, loc);
}

Tensor HuberLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::huber_loss(input, target, reduction(), delta_, loc);
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::kl_div(input, target, reduction(), log_target_, loc);
}

Tensor SoftMarginLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::soft_margin_loss(input, target, reduction(), loc);
}

MultiLabelSoftMarginLoss::MultiLabelSoftMarginLoss(Tensor weight, functional::Reduction reduction, Loc loc)
    : weight_(weight_buffer(*this, weight, loc)), reduction_(reduction) {}

Tensor MultiLabelSoftMarginLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::multilabel_soft_margin_loss(input, target, weight_, reduction_, loc);
}

MultiMarginLoss::MultiMarginLoss(functional::MultiMarginLossOptions options, Loc loc) : options_(std::move(options)) {
  options_.weight = weight_buffer(*this, options_.weight, loc);
}

Tensor MultiMarginLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::multi_margin_loss(input, target, options_, loc);
}

Tensor MultiLabelMarginLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::multilabel_margin_loss(input, target, reduction(), loc);
}

Tensor MarginRankingLoss::forward(const Tensor& input1, const Tensor& input2, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::margin_ranking_loss(input1, input2, target, margin(), reduction(), loc);
}

Tensor CosineEmbeddingLoss::forward(const Tensor& input1, const Tensor& input2, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::cosine_embedding_loss(input1, input2, target, margin(), reduction(), loc);
}

Tensor HingeEmbeddingLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::hinge_embedding_loss(input, target, margin(), reduction(), loc);
}

Tensor TripletMarginLoss::forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative, Loc loc) {
  const Call c(name(), loc);
  return functional::triplet_margin_loss(anchor, positive, negative, options_, loc);
}

Tensor PoissonNLLLoss::forward(const Tensor& input, const Tensor& target, Loc loc) {
  const Call c(name(), loc);
  return functional::poisson_nll_loss(input, target, options_, loc);
}

Tensor GaussianNLLLoss::forward(const Tensor& input, const Tensor& target, const Tensor& var, Loc loc) {
  const Call c(name(), loc);
  return functional::gaussian_nll_loss(input, target, var, options_, loc);
}

Tensor CosineSimilarity::forward(const Tensor& x1, const Tensor& x2, Loc loc) {
  const Call c(name(), loc);
  return functional::cosine_similarity(x1, x2, dim_, eps_, loc);
}

Tensor PairwiseDistance::forward(const Tensor& x1, const Tensor& x2, Loc loc) {
  const Call c(name(), loc);
  return functional::pairwise_distance(x1, x2, p_, eps_, keepdim_, loc);
}

} // namespace kiln::nn

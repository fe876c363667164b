// torch.nn.utils for kiln: clip_grad_norm_.

#include "kiln/nn_utils.h"

#include <cmath>
#include <string>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"

namespace kiln::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, Loc loc) {
  const graph::SourceScope at(loc, "clip_grad_norm_"); // nodes made here record the caller's line
  const detail::UserCall call("clip_grad_norm_", loc);
  const bool inf = std::isinf(norm_type) && norm_type > 0;
  if (!inf && !(norm_type >= 1))
    throw Error("clip_grad_norm_", "norm_type must be >= 1 or infinity, got " + std::to_string(norm_type), loc);
  if (!(max_norm >= 0)) throw Error("clip_grad_norm_", "max_norm must be >= 0, got " + std::to_string(max_norm), loc);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return zeros({});
  // The per-gradient norms, each in its gradient's dtype (as PyTorch), then their norm in the first one's.
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) {
    const Tensor a = abs(g);
    norms.push_back(inf ? a.max() : norm_type == 2 ? sqrt(square(a).sum()) : a.pow(norm_type).sum().pow(1.0 / norm_type));
  }
  const DType dt = norms[0].dtype();
  for (Tensor& n : norms) n = n.to(dt);
  const Tensor all = stack(norms);
  const Tensor total = inf ? all.max() : norm_type == 2 ? sqrt(square(all).sum()) : all.pow(norm_type).sum().pow(1.0 / norm_type);
  const Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (Tensor g : grads) g.assign(g * coef.to(g.dtype()));
  return total;
}

} // namespace kiln::nn::utils

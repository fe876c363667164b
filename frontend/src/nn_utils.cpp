// torch.nn.utils for kiln: gradient clipping, parameters as a vector, weight_norm, spectral_norm.

#include "kiln/nn_utils.h"

#include <cmath>
#include <string>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"
#include "kiln/nn.h"

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

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value, Loc loc) {
  const graph::SourceScope at(loc, "clip_grad_value_");
  const detail::UserCall call("clip_grad_value_", loc);
  if (!(clip_value >= 0))
    throw Error("clip_grad_value_", "clip_value must be >= 0, got " + std::to_string(clip_value), loc);
  NoGradGuard no_grad;
  for (const Tensor& p : params)
    if (Tensor g = p.grad(); g.defined()) g.assign(clamp(g, -clip_value, clip_value));
}

Tensor parameters_to_vector(const std::vector<Tensor>& params, Loc loc) {
  const detail::UserCall call("parameters_to_vector", loc);
  if (params.empty()) throw Error("parameters_to_vector", "expected at least one parameter", loc);
  std::vector<Tensor> flat;
  for (const Tensor& p : params) flat.push_back(p.reshape({-1}, loc));
  return concat(flat, 0, loc);
}

void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& params, Loc loc) {
  const detail::UserCall call("vector_to_parameters", loc);
  int64_t total = 0;
  for (const Tensor& p : params) total += p.numel();
  if (vec.dim() != 1 || vec.numel() != total)
    throw Error("vector_to_parameters",
                "vec must be 1-d with the parameters' " + std::to_string(total) + " elements, got " + vec.type_str(),
                loc);
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (Tensor p : params) {
    Tensor part = vec.slice(0, offset, offset + p.numel(), 1, loc).reshape(p.shape(), loc);
    if (part.dtype() != p.dtype()) part = part.to(p.dtype(), loc);
    p.assign(part, loc);
    offset += p.numel();
  }
}

// ---------------------------------------------------------------- weight_norm

namespace {

// torch's norm_except_dim(v, 2, dim): the 2-norm over every dim but `dim` (kept as size-1 dims); the whole
// tensor's (0-d) without a dim.
Tensor norm_except_dim(const Tensor& v, std::optional<int64_t> dim) {
  if (!dim) return sqrt(square(v).sum());
  IntList dims;
  for (int64_t d = 0; d < v.dim(); ++d)
    if (d != *dim) dims.push_back(d);
  if (dims.empty()) return abs(v); // a 1-d v normalized per element
  return sqrt(square(v).sum(dims, /*keepdim=*/true));
}

// Makes `slot` (the tensor a module's member and its registrations share) stand for `value`: value's node
// and autograd role (a result of g and v, not a leaf). Inside a compile() trace it is a state change, so
// that replays write the recomputed value back into it.
void rebind(const Tensor& slot, const Tensor& value) {
  const std::shared_ptr<TensorImpl>& impl = slot.impl();
  detail::note_state_change(impl);
  const graph::NodeRef node = value.impl()->load_node();
  if (auto made = impl->made.lock()) made->tensor_makers.fetch_sub(1, std::memory_order_relaxed);
  impl->made.reset();
  if (value.impl()->made.lock() == node) { // count it a maker of the node, as value does
    node->tensor_makers.fetch_add(1, std::memory_order_relaxed);
    impl->made = node;
  }
  impl->store_node(node);
  impl->requires_grad = value.requires_grad();
  impl->is_leaf = value.impl()->is_leaf;
  impl->grad = Tensor();
}

std::string hook_tag(const std::string& name) { return "weight_norm:" + name; }

// The weight_norm of parameter `name` of `module` (its g and v) with the norm over all dims but `dim`.
struct WeightNorm {
  Tensor weight, g, v;
  std::optional<int64_t> dim;
  Tensor compute() const { return v * (g / norm_except_dim(v, dim)); }
  void operator()(Module&) const { rebind(weight, compute()); }
};

} // namespace

Module& weight_norm(Module& module, const std::string& name, std::optional<int64_t> dim, Loc loc) {
  const std::string op = "weight_norm";
  if (module.find_forward_pre_hook(hook_tag(name)))
    throw Error(op, "cannot register two weight_norm hooks on the same parameter " + name, loc);
  Tensor weight;
  for (const auto& [n, t] : module.named_parameters())
    if (n == name) weight = t;
  if (!weight.defined()) throw Error(op, module.name() + " has no parameter \"" + name + "\"", loc);
  if (dim == -1) dim.reset(); // torch 1.13: None is -1, the whole tensor
  if (dim) {
    const auto wrapped = graph::wrap_dim(*dim, weight.dim());
    if (!wrapped)
      throw Error(op, "dim " + std::to_string(*dim) + " is out of range for " + name + " " + weight.type_str(), loc);
    dim = *wrapped;
  }
  WeightNorm fn;
  fn.dim = dim;
  fn.weight = module.unregister_parameter(name, loc);
  {
    NoGradGuard no_grad;
    fn.g = module.register_parameter(name + "_g", norm_except_dim(weight, dim).detach(), loc);
    fn.v = module.register_parameter(name + "_v", weight.detach(), loc);
  }
  fn(module);
  module.register_forward_pre_hook(fn, hook_tag(name));
  return module;
}

Module& remove_weight_norm(Module& module, const std::string& name, Loc loc) {
  const auto hook = module.find_forward_pre_hook(hook_tag(name));
  const WeightNorm* fn = hook ? hook->second.target<WeightNorm>() : nullptr;
  if (!fn) throw Error("remove_weight_norm", "weight_norm of '" + name + "' not found in " + module.name(), loc);
  {
    NoGradGuard no_grad;
    rebind(fn->weight, fn->compute()); // a detached value
  }
  Tensor weight = fn->weight;
  module.remove_forward_pre_hook(hook->first);
  module.unregister_parameter(name + "_g", loc);
  module.unregister_parameter(name + "_v", loc);
  module.register_parameter(name, weight, loc);
  return module;
}

// ---------------------------------------------------------------- spectral_norm

namespace {

std::string spectral_tag(const std::string& name) { return "spectral_norm:" + name; }

// torch's F.normalize(x, dim=0, eps): x / max(|x|_2, eps).
Tensor normalized(const Tensor& x, double eps) { return x / clamp_min(sqrt(square(x).sum()), eps); }

// The spectral_norm of a module's parameter: the member's tensor, weight_orig, the u and v buffers.
struct SpectralNorm {
  Tensor weight, orig, u, v;
  int64_t n_power_iterations = 1, dim = 0;
  double eps = 1e-12;

  // The weight as a matrix [size(dim), -1] (torch's reshape_weight_to_matrix).
  Tensor matrix(const Tensor& w) const {
    Tensor m = w;
    if (dim != 0) {
      IntList perm{dim};
      for (int64_t d = 0; d < w.dim(); ++d)
        if (d != dim) perm.push_back(d);
      m = m.permute(perm);
    }
    return m.reshape({m.size(0), -1});
  }
  // orig / sigma, after the power iteration when `power` (training mode).
  Tensor compute(bool power) const {
    if (power) {
      NoGradGuard no_grad;
      const Tensor w = matrix(orig);
      Tensor uu = u, vv = v;
      for (int64_t i = 0; i < n_power_iterations; ++i) {
        vv = normalized(matmul(w.transpose(0, 1), uu), eps);
        uu = normalized(matmul(w, vv), eps);
      }
      Tensor bu = u, bv = v; // the buffers' handles
      bu.assign(uu);
      bv.assign(vv);
    }
    const Tensor sigma = (u * matmul(matrix(orig), v)).sum();
    return orig / sigma;
  }
  void operator()(Module& m) const { rebind(weight, compute(m.is_training())); }
};

} // namespace

Module& spectral_norm(Module& module, const std::string& name, int64_t n_power_iterations, double eps,
                      std::optional<int64_t> dim, Loc loc) {
  const std::string op = "spectral_norm";
  if (module.find_forward_pre_hook(spectral_tag(name)))
    throw Error(op, "cannot register two spectral_norm hooks on the same parameter " + name, loc);
  if (n_power_iterations <= 0)
    throw Error(op, "expected n_power_iterations to be positive, got " + std::to_string(n_power_iterations), loc);
  if (!(eps > 0) || !std::isfinite(eps)) throw Error(op, "eps must be positive, got " + std::to_string(eps), loc);
  Tensor weight;
  for (const auto& [n, t] : module.named_parameters())
    if (n == name) weight = t;
  if (!weight.defined()) throw Error(op, module.name() + " has no parameter \"" + name + "\"", loc);
  const int64_t d = dim.value_or(module.name().starts_with("ConvTranspose") ? 1 : 0);
  const auto wrapped = graph::wrap_dim(d, weight.dim());
  if (!wrapped)
    throw Error(op, "dim " + std::to_string(d) + " is out of range for " + name + " " + weight.type_str(), loc);
  SpectralNorm fn;
  fn.n_power_iterations = n_power_iterations, fn.dim = *wrapped, fn.eps = eps;
  fn.weight = module.unregister_parameter(name, loc);
  {
    NoGradGuard no_grad;
    fn.orig = module.register_parameter(name + "_orig", weight.detach(), loc);
    const Tensor m = fn.matrix(weight);
    const auto unit = [&](int64_t n) {
      return normalized(randn({n}, nn::next_seed(), weight.dtype(), weight.device(), loc), eps);
    };
    fn.u = module.register_buffer(name + "_u", unit(m.size(0)), loc);
    fn.v = module.register_buffer(name + "_v", unit(m.size(1)), loc);
    rebind(fn.weight, fn.orig.detach()); // torch's weight.data until the first forward
  }
  module.register_forward_pre_hook(fn, spectral_tag(name));
  return module;
}

Module& remove_spectral_norm(Module& module, const std::string& name, Loc loc) {
  const auto hook = module.find_forward_pre_hook(spectral_tag(name));
  const SpectralNorm* fn = hook ? hook->second.target<SpectralNorm>() : nullptr;
  if (!fn) throw Error("remove_spectral_norm", "spectral_norm of '" + name + "' not found in " + module.name(), loc);
  {
    NoGradGuard no_grad;
    rebind(fn->weight, fn->compute(false));
  }
  Tensor weight = fn->weight;
  module.remove_forward_pre_hook(hook->first);
  module.unregister_parameter(name + "_orig", loc);
  module.unregister_buffer(name + "_u", loc);
  module.unregister_buffer(name + "_v", loc);
  module.register_parameter(name, weight, loc);
  return module;
}

} // namespace kiln::nn::utils

#pragma once
/// \file nn_utils.h
/// Helpers on parameters and their gradients (torch.nn.utils): gradient clipping, parameters as one
/// vector, and the weight_norm and spectral_norm reparametrizations.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn {
class Module;
}

namespace kiln::nn::utils {

/// Scales the gradients of `params` in place (Tensor::assign on each grad()) so that their total
/// norm is at most `max_norm`, as torch.nn.utils.clip_grad_norm_: the total is the norm_type-norm
/// of the per-gradient norms (norm_type 2 by default; any p >= 1, or infinity for the largest
/// |g|), and each gradient is multiplied by min(1, max_norm / (total + 1e-6)). Parameters without
/// a gradient are skipped. Returns the total norm (0-d, lazy: usable inside a compile() trace);
/// 0 when no parameter has a gradient. Call it between backward() and the optimizer's step().
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       Loc loc = Loc::current());

/// Clamps every gradient of `params` to [-clip_value, clip_value] in place (Tensor::assign on each
/// grad(); lazy, so usable inside a compile() trace), as torch.nn.utils.clip_grad_value_; parameters
/// without a gradient are skipped. A negative or NaN clip_value is a kiln::Error naming `loc` (torch
/// clamps with min > max there, setting every gradient to -|clip_value|).
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value, Loc loc = Loc::current());

/// The parameters flattened and concatenated into one 1-d tensor, as torch.nn.utils.parameters_to_vector
/// (differentiable: gradients flow back to each parameter). The parameters must share one dtype and
/// device (concat's rule); no parameters is a kiln::Error naming `loc`, as torch.cat's.
Tensor parameters_to_vector(const std::vector<Tensor>& params, Loc loc = Loc::current());

/// Writes consecutive slices of the 1-d `vec` into the parameters (Tensor::assign, so no gradient flows
/// and compile() captures it), as torch.nn.utils.vector_to_parameters. Each parameter keeps its dtype
/// (torch's `p.data = ...` takes vec's). A vec that is not 1-d or whose size is not the parameters' total
/// is a kiln::Error naming `loc` (torch ignores extra elements).
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& params, Loc loc = Loc::current());

/// Weight normalization, torch.nn.utils.weight_norm (1.13): replaces the parameter `name` of `module` by
/// `name`_g (the norm of the weight over every dim except `dim`, kept as size-1 dims) and `name`_v (the
/// weight), registered in that order after the module's other parameters, and recomputes
/// `name` = v * (g / norm_except_dim(v, dim)) before every forward (a forward pre-hook), so gradients flow
/// to g and v. The module's member (Linear::weight) is that recomputed tensor: it keeps its identity, not
/// a parameter any more. `dim` counts from the end when negative; -1 or nullopt normalizes over the whole
/// tensor (a 0-d g), as torch 1.13 (which cannot name the last dim as -1). Errors (no parameter `name`,
/// a second weight_norm of it, `dim` out of range) name `loc`. Returns `module`.
Module& weight_norm(Module& module, const std::string& name = "weight", std::optional<int64_t> dim = 0,
                    Loc loc = Loc::current());

/// Undoes weight_norm, torch.nn.utils.remove_weight_norm: `name` becomes a parameter again (registered
/// after the others) holding the current v * (g / norm), and `name`_g, `name`_v and the hook go. Without
/// a weight_norm of `name`, a kiln::Error naming `loc`. Returns `module`.
Module& remove_weight_norm(Module& module, const std::string& name = "weight", Loc loc = Loc::current());

/// Spectral normalization, torch.nn.utils.spectral_norm (1.13): the parameter `name` of `module` becomes
/// `name`_orig (a parameter, registered after the others) and the buffers `name`_u and `name`_v (random unit
/// vectors from kiln's seeded sequence, nn::next_seed()); before every forward, `name` = orig / sigma with
/// sigma = u . (W v), W the weight as a matrix with `dim` first (reshaped to [size(dim), -1]); in training
/// mode n_power_iterations steps v = normalize(W^T u), u = normalize(W v) (normalize(x) = x / max(|x|, eps))
/// update u and v first (assign()ed, so compile() captures them), in eval mode they stay. Gradients flow to
/// orig through W and sigma, not through u and v. `dim` defaults to 1 for ConvTranspose modules, else 0 (torch's);
/// until the first forward the member holds the weight's value. Errors (no parameter `name`, a second
/// spectral_norm of it, n_power_iterations <= 0, eps not positive, `dim` out of range) name `loc`. Returns `module`.
Module& spectral_norm(Module& module, const std::string& name = "weight", int64_t n_power_iterations = 1,
                      double eps = 1e-12, std::optional<int64_t> dim = std::nullopt, Loc loc = Loc::current());

/// Undoes spectral_norm, torch.nn.utils.remove_spectral_norm: `name` becomes a parameter again (registered
/// after the others) holding orig / sigma with the current u and v (no power iteration), and `name`_orig,
/// `name`_u, `name`_v and the hook go. Without a spectral_norm of `name`, a kiln::Error naming `loc`.
Module& remove_spectral_norm(Module& module, const std::string& name = "weight", Loc loc = Loc::current());

} // namespace kiln::nn::utils

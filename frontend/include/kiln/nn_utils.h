#pragma once
/// \file nn_utils.h
/// Helpers on parameters and their gradients (torch.nn.utils).

#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn::utils {

/// Scales the gradients of `params` in place (Tensor::assign on each grad()) so that their total
/// norm is at most `max_norm`, as torch.nn.utils.clip_grad_norm_: the total is the norm_type-norm
/// of the per-gradient norms (norm_type 2 by default; any p >= 1, or infinity for the largest
/// |g|), and each gradient is multiplied by min(1, max_norm / (total + 1e-6)). Parameters without
/// a gradient are skipped. Returns the total norm (0-d, lazy: usable inside a compile() trace);
/// 0 when no parameter has a gradient. Call it between backward() and the optimizer's step().
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       Loc loc = Loc::current());

} // namespace kiln::nn::utils

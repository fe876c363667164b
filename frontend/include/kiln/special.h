#pragma once
/// \file special.h
/// torch.special: kiln::special::xlog1py, entr and the other names PyTorch 1.13 gives there to functions kiln
/// declares in kiln/tensor.h (expit is sigmoid, gammaln is lgamma; kiln has no Bessel functions). Compositions of
/// kiln's ops (special.cpp): gradients, fusion, compile() and CUDA come with them.

#include "kiln/tensor.h"

namespace kiln::special {

/// x * log1p(y), 0 where x is 0 (unless y is NaN), as torch.special.xlog1py (x and y broadcast; integers give f32).
/// The gradients are PyTorch's: log1p(y) for x (0 where x is 0 and y <= -1) and x / (1 + y) for y.
Tensor xlog1py(const Tensor& x, const Tensor& y, Loc loc = Loc::current());
/// -x log(x), 0 at 0, -inf below 0 (NaN stays NaN), as torch.special.entr (integers give f32); the gradient is
/// -(log(x) + 1) (PyTorch's: +inf at 0, NaN below).
Tensor entr(const Tensor& x, Loc loc = Loc::current());
Tensor expit(const Tensor& x, Loc loc = Loc::current()); ///< sigmoid
/// kiln::logit
Tensor logit(const Tensor& x, std::optional<double> eps = std::nullopt, Loc loc = Loc::current());
Tensor sinc(const Tensor& x, Loc loc = Loc::current()); ///< kiln::sinc
Tensor xlogy(const Tensor& x, const Tensor& y, Loc loc = Loc::current()); ///< kiln::xlogy
Tensor exp2(const Tensor& x, Loc loc = Loc::current()); ///< kiln::exp2
Tensor expm1(const Tensor& x, Loc loc = Loc::current()); ///< kiln::expm1
Tensor log1p(const Tensor& x, Loc loc = Loc::current()); ///< kiln::log1p
Tensor erf(const Tensor& x, Loc loc = Loc::current()); ///< kiln::erf
Tensor round(const Tensor& x, Loc loc = Loc::current()); ///< kiln::round
Tensor gammaln(const Tensor& x, Loc loc = Loc::current()); ///< kiln::lgamma
Tensor digamma(const Tensor& x, Loc loc = Loc::current()); ///< kiln::digamma
Tensor psi(const Tensor& x, Loc loc = Loc::current()); ///< kiln::digamma
Tensor multigammaln(const Tensor& x, int64_t p, Loc loc = Loc::current()); ///< kiln::mvlgamma
/// kiln::logsumexp
Tensor logsumexp(const Tensor& x, IntList dims, bool keepdim = false, Loc loc = Loc::current());

} // namespace kiln::special

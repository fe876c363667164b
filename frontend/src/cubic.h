#pragma once
// Internal: PyTorch's cubic convolution kernel (Keys, A = -0.75), shared by interpolate's bicubic mode and
// grid_sample's (interpolate.cpp, grid_sample.cpp).

#include <array>

#include "kiln/tensor.h"

namespace kiln::nn::functional::cubic {

/// PyTorch's cubic convolution constant A.
constexpr double kA = -0.75;

/// The kernel at distance x of one of the two inner taps (|x| <= 1): PyTorch's cubic_convolution1, in its
/// operation order.
inline Tensor inner(const Tensor& x) { return ((kA + 2) * x - (kA + 3)) * x * x + 1.0; }

/// The kernel at distance x of one of the two outer taps (1 < |x| < 2): PyTorch's cubic_convolution2.
inline Tensor outer(const Tensor& x) { return ((kA * x - 5 * kA) * x + 8 * kA) * x - 4 * kA; }

/// The weights of the taps floor(s) - 1 ... floor(s) + 2 at t = s - floor(s), as PyTorch's
/// get_cubic_upsample_coefficients.
inline std::array<Tensor, 4> weights(const Tensor& t) {
  return {outer(t + 1.0), inner(t), inner(1.0 - t), outer(2.0 - t)};
}

} // namespace kiln::nn::functional::cubic

#pragma once
/// \file mlp.h
/// The benchmarks' 784-512-512-10 ReLU MLP with a softmax cross-entropy loss
/// (bench_fusion's MLPStep, bench_gpu's NVRTC compile of the same step).

#include <cmath>
#include <cstdint>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::bench {

/// Weights and biases of the three layers, on one device, requiring gradients.
struct Mlp {
  std::vector<Tensor> params; ///< w0, b0, w1, b1, w2, b2

  /// PyTorch-style uniform initialization from `seed`, on `device`.
  explicit Mlp(uint64_t seed, Device device = kCPU) : device_(device) {
    const int64_t sizes[] = {784, 512, 512, 10};
    for (int l = 0; l < 3; ++l) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(sizes[l]));
      params.push_back(((rand({sizes[l], sizes[l + 1]}, seed + 2 * l, kFloat32, device) * 2.0 - 1.0) * bound)
                           .requires_grad_());
      params.push_back(zeros({sizes[l + 1]}, kFloat32, device).requires_grad_());
    }
  }

  /// Mean cross-entropy of the logits of x [batch, 784] against i64 labels [batch].
  Tensor loss(const Tensor& x, const Tensor& labels) const {
    Tensor h = x;
    for (size_t l = 0; l < 3; ++l) {
      h = matmul(h, params[2 * l]) + params[2 * l + 1];
      if (l < 2) h = relu(h);
    }
    Tensor m = h.max({1}, true).detach();
    Tensor lse = log(exp(h - m).sum({1}, true)) + m;
    Tensor classes = arange(0, 10, 1, kInt64, device_).reshape({1, 10});
    Tensor onehot = eq(labels.reshape({-1, 1}), classes).to(kFloat32);
    return (lse - (onehot * h).sum({1}, true)).mean();
  }

private:
  Device device_;
};

} // namespace kiln::bench

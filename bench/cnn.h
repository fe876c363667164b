#pragma once
/// \file cnn.h
/// The benchmarks' CNN: examples/train's `--model cnn` (2 x (conv 3x3 pad 1, BatchNorm, ReLU,
/// 2x2 max-pool), 3136 -> 128 -> 10), for 28 x 28 single-channel images (bench_fusion's
/// CNNStep, bench_cold's Cold/CNNStep; bench_torch.cpp writes the same model in libtorch).

#include <memory>

#include "kiln/kiln.h"

namespace kiln::bench {

/// The CNN, its parameters drawn after nn::manual_seed(seed).
inline std::shared_ptr<nn::Sequential> train_cnn(uint64_t seed) {
  nn::manual_seed(seed);
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, 32, 3, {.padding = 1}), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(32, 64, 3, {.padding = 1}), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
}

} // namespace kiln::bench

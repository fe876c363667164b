#pragma once
/// \file rnn_step.h
/// The sizes of the LSTMStep benchmarks (bench_rnn.cpp for kiln, bench_torch.cpp for libtorch), in
/// one place so that both sides train the same model.

#include <cstdint>

namespace bench {

/// LSTMStep's model and batch: T steps of N sequences of `input` features, a 2-layer LSTM of
/// `hidden` features, a head onto `classes` classes.
struct RnnStepSizes {
  int64_t time, batch, input, hidden, classes;
};

/// LSTMStep/32x16x64x128's sizes.
inline constexpr RnnStepSizes kRnnSteps{32, 16, 64, 128, 64};

} // namespace bench

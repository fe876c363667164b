#pragma once
// Internal: the window helpers of max pooling (functional.cpp) that the other pooling files share
// (adaptive_max_pool in interpolate.cpp): the max over a window with PyTorch's gradient, and the
// element PyTorch's max pooling picks in each window (its saved index).

#include "kiln/tensor.h"

namespace kiln::nn::functional::windows {

/// The max of taps over its window dims `window` (dropped), its gradient routed as PyTorch's max pooling
/// to the window's first maximal element (row-major in the window), or to its last NaN.
Tensor window_max(const char* op, const Tensor& taps, const IntList& window, Loc loc);
/// The element of each window that window_max routes the gradient to, read from `where` (shaped like taps,
/// or broadcast to it): what PyTorch's max pooling returns as the window's index. Returns taps' shape without
/// the window dims (i64 where `where` is).
Tensor window_pick(const Tensor& taps, const IntList& window, const Tensor& where);

} // namespace kiln::nn::functional::windows

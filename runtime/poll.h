#pragma once
/// \file poll.h
/// Internal: the pause between two polls of work that another process completes (MPI transfers
/// in comm.cpp, NCCL collectives on a GPU stream in cuda_runtime.cpp).

#include <algorithm>
#include <chrono>
#include <thread>

namespace kiln::runtime {

/// Yields while less than `yield_for` has passed since `start` (so a quick answer is taken at
/// once), then sleeps a fiftieth of the time waited so far, at most 1 ms a poll.
inline void back_off(std::chrono::steady_clock::time_point start, std::chrono::steady_clock::duration yield_for) {
  const auto waited = std::chrono::steady_clock::now() - start;
  if (waited < yield_for) return std::this_thread::yield();
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(waited / 50, std::chrono::milliseconds(1)));
}

} // namespace kiln::runtime

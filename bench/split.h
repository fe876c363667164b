// The hand-written ceilings' threading: a range split evenly over N std::threads.
#pragma once

#include <cstdint>
#include <thread>
#include <vector>

namespace kiln::bench {

/// Runs f(lo, hi) on `threads` threads over equal parts of [0, n) (the caller's thread
/// takes the first part) and waits for all.
template <class F> void split(int threads, int64_t n, F f) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(f, n * t / threads, n * (t + 1) / threads);
  f(0, n / threads);
  for (auto& th : pool) th.join();
}

} // namespace kiln::bench

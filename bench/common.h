// Helpers shared by the benchmark files: throughput counters, and the hand-written
// ceilings' threading (a range split evenly over N std::threads).
#pragma once

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::bench {

/// Reports bytes_per_iter per iteration as a "GB/s" rate (1e9 bytes).
inline void report_bytes(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] = benchmark::Counter(bytes_per_iter * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

/// Reports flops_per_iter per iteration as a "GFLOP/s" rate (1e9 flops).
inline void gflops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

/// Times kiln's C = A @ B (f32, row-major, M x K times K x N; `batch` such products when
/// batch > 0, as [batch, M, K] @ [batch, K, N]) realized per iteration, on state.range(0)
/// threads, compiled before the timing; reports GFLOP/s.
inline void kiln_gemm(benchmark::State& state, int64_t m, int64_t k, int64_t n, bool trans_a = false, int64_t batch = 0) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  // trans_a: A is the transpose of a stored [k, m] matrix (a weight gradient's x^T g)
  auto shape = [&](int64_t rows, int64_t cols) { return batch > 0 ? IntList{batch, rows, cols} : IntList{rows, cols}; };
  Tensor a = trans_a ? randn(shape(k, m), 31) : randn(shape(m, k), 31), b = randn(shape(k, n), 32);
  realize({a, b});
  if (trans_a) a = a.transpose(-1, -2);
  matmul(a, b).realize(); // compiles
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    c.realize();
    benchmark::DoNotOptimize(c.node().get());
  }
  gflops(state, 2.0 * static_cast<double>(std::max<int64_t>(batch, 1)) * m * k * n);
}

/// Runs f(lo, hi) on `threads` threads over equal parts of [0, n) (the caller's thread
/// takes the first part) and waits for all.
template <class F> void split(int threads, int64_t n, F f) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(f, n * t / threads, n * (t + 1) / threads);
  f(0, n / threads);
  for (auto& th : pool) th.join();
}

} // namespace kiln::bench

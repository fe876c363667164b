// Elementwise throughput: one kiln `add` over 16M floats against a plain C++
// loop (-O3 -march=native), on one and two threads, in the same binary; and
// compute-bound math functions (Unary/1M/...) over 1M floats held in cache.

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace {

constexpr int64_t kN = int64_t{1} << 24; // 16M elements

void set_bytes(benchmark::State& state, int64_t bytes_per_iter) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iter);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes_per_iter) * state.iterations(),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void KilnAdd(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  kiln::Tensor x = kiln::rand({kN}, 1), y = kiln::rand({kN}, 2);
  kiln::realize({x, y});
  for (auto _ : state) {
    kiln::Tensor z = x + y; // a fresh node each iteration: the previous result died with `z`
    z.realize();
    benchmark::DoNotOptimize(z.node().get());
  }
  set_bytes(state, 3 * kN * sizeof(float));
}
BENCHMARK(KilnAdd)->Name("Add/16M/kiln")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void add_range(const float* a, const float* b, float* c, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i) c[i] = a[i] + b[i];
}

void CxxAdd(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  std::vector<float> a(kN, 1.0f), b(kN, 2.0f), c(kN);
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t)
      pool.emplace_back(add_range, a.data(), b.data(), c.data(), kN * t / threads, kN * (t + 1) / threads);
    add_range(a.data(), b.data(), c.data(), 0, kN / threads);
    for (auto& th : pool) th.join();
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 3 * kN * sizeof(float));
}
BENCHMARK(CxxAdd)->Name("Add/16M/cxx_loop")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

/// One kiln math function over 1M floats in [-4, 4] (4 MB in, 4 MB out: compute-bound, so
/// the time is the function's instruction count); `op` picks the function.
template <kiln::Tensor (*op)(const kiln::Tensor&, kiln::Loc)> void KilnUnary(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  constexpr int64_t n = int64_t{1} << 20;
  kiln::Tensor x = kiln::rand({n}, 3) * 8.0 - 4.0;
  x.realize();
  for (auto _ : state) {
    kiln::Tensor y = op(x, kiln::Loc::current());
    y.realize();
    benchmark::DoNotOptimize(y.node().get());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(KilnUnary<kiln::tanh>)->Name("Unary/1M/tanh/kiln")->Arg(1)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(KilnUnary<kiln::expm1>)->Name("Unary/1M/expm1/kiln")->Arg(1)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(KilnUnary<kiln::exp>)->Name("Unary/1M/exp/kiln")->Arg(1)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMicrosecond);

} // namespace

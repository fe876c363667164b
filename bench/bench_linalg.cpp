// einsum against the equivalent matmul code, in one run (f32, names give the equation and the sizes):
//   Einsum/bij,bjk->bik/16x128x128x128/{einsum,matmul}      batched matmul
//   Einsum/bhqd,bhkd->bhqk/4x8x128x128x64/{einsum,matmul}   attention scores: matmul(q, k^T)
// einsum lowers each contraction onto one (batched) matmul, so the pairs should take the same time
// (a ratio of about 1.0). The counter is GFLOP/s (2 per multiply-add of the contraction).

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <functional>

#include "kiln/kiln.h"

namespace {

/// Times realize() of f(a, b) (a fresh node each iteration; a and b realized once).
void time_product(benchmark::State& state, const kiln::Tensor& a, const kiln::Tensor& b, double flops,
                  const std::function<kiln::Tensor(const kiln::Tensor&, const kiln::Tensor&)>& f) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  kiln::realize({a, b});
  for (auto _ : state) {
    kiln::Tensor c = f(a, b);
    c.realize();
    benchmark::DoNotOptimize(c.node().get());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(1e-9 * flops * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

constexpr double kBmmFlops = 2.0 * 16 * 128 * 128 * 128;
constexpr double kScoresFlops = 2.0 * 4 * 8 * 128 * 128 * 64;

void EinsumBmm(benchmark::State& state) {
  time_product(state, kiln::randn({16, 128, 128}, 1), kiln::randn({16, 128, 128}, 2), kBmmFlops,
               [](const kiln::Tensor& a, const kiln::Tensor& b) {
                 return kiln::einsum("bij,bjk->bik", {a, b});
               });
}
void MatmulBmm(benchmark::State& state) {
  time_product(state, kiln::randn({16, 128, 128}, 1), kiln::randn({16, 128, 128}, 2), kBmmFlops,
               [](const kiln::Tensor& a, const kiln::Tensor& b) { return kiln::matmul(a, b); });
}
void EinsumScores(benchmark::State& state) {
  time_product(state, kiln::randn({4, 8, 128, 64}, 3), kiln::randn({4, 8, 128, 64}, 4), kScoresFlops,
               [](const kiln::Tensor& q, const kiln::Tensor& k) {
                 return kiln::einsum("bhqd,bhkd->bhqk", {q, k});
               });
}
void MatmulScores(benchmark::State& state) {
  time_product(state, kiln::randn({4, 8, 128, 64}, 3), kiln::randn({4, 8, 128, 64}, 4), kScoresFlops,
               [](const kiln::Tensor& q, const kiln::Tensor& k) { return kiln::matmul(q, k.transpose(-2, -1)); });
}

BENCHMARK(EinsumBmm)->Name("Einsum/bij,bjk->bik/16x128x128x128/einsum")->Arg(1)->ArgName("threads")->UseRealTime();
BENCHMARK(MatmulBmm)->Name("Einsum/bij,bjk->bik/16x128x128x128/matmul")->Arg(1)->ArgName("threads")->UseRealTime();
BENCHMARK(EinsumScores)
    ->Name("Einsum/bhqd,bhkd->bhqk/4x8x128x128x64/einsum")
    ->Arg(1)
    ->ArgName("threads")
    ->UseRealTime();
BENCHMARK(MatmulScores)
    ->Name("Einsum/bhqd,bhkd->bhqk/4x8x128x128x64/matmul")
    ->Arg(1)
    ->ArgName("threads")
    ->UseRealTime();

} // namespace

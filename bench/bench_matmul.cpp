// Matmul throughput (f32) in the shapes of an MLP layer's forward and backward:
//   Matmul/128x784x256     x[128x784] @ W[784x256]          (row-major right operand)
//   Matmul/AT_256x128x784  x[128x256]^T @ g[128x784]        (transposed left operand)
//   Matmul/128x256x784_BT  g[128x256] @ W[784x256]^T        (transposed right operand: dot products)
// Names give M x K x N; the counter is GFLOP/s (2 M K N per product).

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include "kiln/kiln.h"

namespace {

void set_flops(benchmark::State& state, int64_t m, int64_t k, int64_t n) {
  const double gflop = 2e-9 * static_cast<double>(m * k * n) * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(gflop, benchmark::Counter::kIsRate);
}

/// Times realize() of a @ b (a or b transposed views of x or y): a fresh node each
/// iteration; x and y are realized once, and the views stay views (index math).
void time_matmul(benchmark::State& state, const kiln::Tensor& x, bool ta, const kiln::Tensor& y, bool tb) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  kiln::realize({x, y});
  const kiln::Tensor a = ta ? x.t() : x;
  const kiln::Tensor b = tb ? y.t() : y;
  for (auto _ : state) {
    kiln::Tensor c = kiln::matmul(a, b);
    c.realize();
    benchmark::DoNotOptimize(c.node().get());
  }
  const auto& as = a.shape();
  const auto& bs = b.shape();
  set_flops(state, as[0], as[1], bs[1]);
}

void MatmulNN(benchmark::State& state) {
  time_matmul(state, kiln::randn({128, 784}, 1), false, kiln::randn({784, 256}, 2), false);
}
BENCHMARK(MatmulNN)->Name("Matmul/128x784x256")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();

void MatmulTN(benchmark::State& state) {
  time_matmul(state, kiln::randn({128, 256}, 1), true, kiln::randn({128, 784}, 2), false);
}
BENCHMARK(MatmulTN)->Name("Matmul/AT_256x128x784")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();

void MatmulNT(benchmark::State& state) {
  time_matmul(state, kiln::randn({128, 256}, 1), false, kiln::randn({784, 256}, 2), true);
}
BENCHMARK(MatmulNT)->Name("Matmul/128x256x784_BT")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime();

} // namespace

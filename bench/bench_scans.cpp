// The running scans beside cumsum on the same rows, in one run (ratios, not absolute times): f32 rows of
// 4096 ([256, 4096], 1M elements, along dim 1), each a scan-form kernel (kernel_ir.h, ScanLoop):
//   Scan/cumsum/rows:4096        cumsum (an f64 running sum per row): the reference
//   Scan/cummax/rows:4096        cummax's values and indices (a max scan, then an i64 max scan over
//                                the positions that hold the running max: two kernels)
//   Scan/cummin_values/rows:4096 cummin's values alone (one kernel, as cumsum)
//   Scan/logcumsumexp/rows:4096  logcumsumexp (an f64 running logaddexp per row: an exp and a log1p a step)
//   Scan/cummax_quadratic/rows:4096  the O(n^2) composite cummax had before the scan (each prefix
//                                compared with every position), on 4 rows only (its [4, 4096, 4096]
//                                intermediates are 268 MB each): per element, against cummax's
// All on 1 thread (a row is sequential; the rows split across threads the same way for every scan).

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include "kiln/kiln.h"

namespace {

constexpr int64_t kLen = 4096, kRowsOf = 256, kQuadraticRows = 4;

void set_elements(benchmark::State& state, int64_t elements) {
  state.SetItemsProcessed(state.iterations() * elements);
}

// x (realized) -> the scan's outputs, realized together.
template <class Scan> void run_scan(benchmark::State& state, int64_t rows, Scan scan) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
  const kiln::Tensor x = kiln::randn({rows, kLen}, 11);
  kiln::realize({x});
  for (auto _ : state) {
    std::vector<kiln::Tensor> out = scan(x);
    kiln::realize(out);
    benchmark::DoNotOptimize(out[0].node().get());
  }
  set_elements(state, rows * kLen);
}

void Cumsum(benchmark::State& state) {
  run_scan(state, kRowsOf, [](const kiln::Tensor& x) { return std::vector{kiln::cumsum(x, 1)}; });
}
BENCHMARK(Cumsum)->Name("Scan/cumsum/rows:4096")->UseRealTime()->Unit(benchmark::kMicrosecond);

void Cummax(benchmark::State& state) {
  run_scan(state, kRowsOf, [](const kiln::Tensor& x) {
    const auto [values, indices] = kiln::cummax(x, 1);
    return std::vector{values, indices};
  });
}
BENCHMARK(Cummax)->Name("Scan/cummax/rows:4096")->UseRealTime()->Unit(benchmark::kMicrosecond);

void CumminValues(benchmark::State& state) {
  run_scan(state, kRowsOf, [](const kiln::Tensor& x) { return std::vector{kiln::cummin(x, 1).first}; });
}
BENCHMARK(CumminValues)->Name("Scan/cummin_values/rows:4096")->UseRealTime()->Unit(benchmark::kMicrosecond);

void Logcumsumexp(benchmark::State& state) {
  run_scan(state, kRowsOf, [](const kiln::Tensor& x) { return std::vector{kiln::logcumsumexp(x, 1)}; });
}
BENCHMARK(Logcumsumexp)->Name("Scan/logcumsumexp/rows:4096")->UseRealTime()->Unit(benchmark::kMicrosecond);

// The composite cummax had before its scan (frontend/src/reductions.cpp until this benchmark came): over the
// n x n prefix windows of each row, the max and the last position holding it.
std::vector<kiln::Tensor> quadratic_cummax(const kiln::Tensor& x) {
  using namespace kiln;
  const Tensor j = arange(0, static_cast<double>(kLen), 1, kInt64);
  const Tensor prefix = le(j, j.reshape({kLen, 1}));
  const Tensor a = x.unsqueeze(-2).expand({x.size(0), kLen, kLen});
  const Tensor window = where(prefix, a, x.narrow(-1, 0, 1).unsqueeze(-1));
  const Tensor best = max(window, {-1}, true);
  const Tensor same = logical_or(eq(a, best), logical_and(isnan(a), isnan(best)));
  const Tensor last = max(where(logical_and(prefix, same), j, 0), {-1}, false);
  return {gather(x, 1, last), last};
}

void CummaxQuadratic(benchmark::State& state) { run_scan(state, kQuadraticRows, quadratic_cummax); }
BENCHMARK(CummaxQuadratic)->Name("Scan/cummax_quadratic/rows:4096")->UseRealTime()->Unit(benchmark::kMillisecond);

} // namespace

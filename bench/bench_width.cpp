// Realize time against graph width (issue 16, "graphs that scale in width"):
//   Width/Concat/N    concat of N realized f32[2] inputs
//   Width/SumTree/N   balanced pairwise sum of N realized f32[4] leaves
//   Width/Outputs/N   N outputs x_i * 2 + 1 of N realized f32[4] inputs, realized together
//   Width/OutputsDistinctConstants/N   the same with N distinct constants, x_i * 2 + c_i, new ones in
//                     every iteration: scalar constants are kernel parameters, so these N kernels are one
//                     compiled kernel (before, each compiled its own)
// for N from 1e2 to 1e5. Each iteration builds a fresh graph (not timed) and times
// realize(): scheduling, lowering, kernel hashing, the JIT's cache lookups (the kernels
// of one width compile in the first iteration), planning and the launches. Linear
// host work shows as a time per node that stays flat as N grows (the "per_node" counter).

#include <benchmark/benchmark.h>

#include <chrono>
#include <vector>

#include "kiln/kiln.h"

namespace {

using namespace kiln;

std::vector<Tensor> leaves(int64_t n, int64_t size) {
  std::vector<Tensor> xs;
  xs.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) xs.push_back(from_vector(std::vector<float>(static_cast<size_t>(size), float(i))));
  return xs;
}

Tensor sum_tree(std::vector<Tensor> xs) {
  while (xs.size() > 1) {
    std::vector<Tensor> next;
    for (size_t i = 0; i + 1 < xs.size(); i += 2) next.push_back(xs[i] + xs[i + 1]);
    if (xs.size() % 2) next.push_back(xs.back());
    xs = std::move(next);
  }
  return xs[0];
}

// Times realize() of the tensors `make` returns, with the graph built outside the timing.
template <class Make> void time_realize(benchmark::State& state, Make make) {
  for (auto _ : state) {
    std::vector<Tensor> outs = make(state.range(0));
    const auto t0 = std::chrono::steady_clock::now();
    realize(outs);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["per_node"] = benchmark::Counter(static_cast<double>(state.range(0)) * state.iterations(),
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
                                                 benchmark::Counter::kIs1000);
}

void Concat(benchmark::State& state) {
  time_realize(state, [](int64_t n) { return std::vector<Tensor>{concat(leaves(n, 2))}; });
}

void SumTree(benchmark::State& state) {
  time_realize(state, [](int64_t n) { return std::vector<Tensor>{sum_tree(leaves(n, 4))}; });
}

void Outputs(benchmark::State& state) {
  time_realize(state, [](int64_t n) {
    std::vector<Tensor> outs;
    for (const Tensor& x : leaves(n, 4)) outs.push_back(x * 2.0 + 1.0);
    return outs;
  });
}

void OutputsDistinctConstants(benchmark::State& state) {
  time_realize(state, [](int64_t n) {
    static int64_t next = 0; // constants never seen before in every iteration (an eager loop's new scalars)
    std::vector<Tensor> outs;
    for (const Tensor& x : leaves(n, 4)) outs.push_back(x * 2.0 + static_cast<double>(next++));
    return outs;
  });
}

} // namespace

BENCHMARK(Concat)->Name("Width/Concat")->RangeMultiplier(10)->Range(100, 100000)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(SumTree)->Name("Width/SumTree")->RangeMultiplier(10)->Range(100, 100000)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(Outputs)->Name("Width/Outputs")->RangeMultiplier(10)->Range(100, 100000)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(OutputsDistinctConstants)->Name("Width/OutputsDistinctConstants")->RangeMultiplier(10)->Range(100, 100000)->UseManualTime()->Unit(benchmark::kMillisecond);

// kiln's generated GEMM against Eigen, and the convolutions of the Fashion-MNIST CNN:
//   Gemm/1024/kiln, Gemm/2048/kiln     C = A @ B, f32 row-major, realize() per iteration
//   Gemm/1024/eigen, Gemm/2048/eigen   C.noalias() = A * B, row-major (Eigen 3, -O3 -march=native);
//                                      2 threads: two single-threaded Eigen products on the two
//                                      row halves of C, run by TBB (Eigen itself is built here
//                                      without OpenMP, so it has no thread pool of its own)
//   Conv2d/<layer>/fwd_bwd             the CNN's conv layers (examples/train.cpp) at batch 128:
//                                      y = conv2d(x, w, b) and the gradients of <y, g> w.r.t.
//                                      w, b (and x for the second layer), as one compiled step
// GFLOP/s counts 2 M K N per product (for conv, every matmul of the step: im2col's M K N).

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>
#include <tbb/parallel_invoke.h>

#include "bench/common.h"
#include "kiln/kiln.h"

#ifdef KILN_BENCH_EIGEN
#include <Eigen/Core>
#endif

namespace {

using namespace kiln;
using kiln::bench::gflops;

void KilnGemm(benchmark::State& state, int64_t n) { bench::kiln_gemm(state, n, n, n); }

#ifdef KILN_BENCH_EIGEN
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void EigenGemm(benchmark::State& state, Eigen::Index n) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  RowMajor a = RowMajor::Random(n, n), b = RowMajor::Random(n, n), c(n, n);
  const Eigen::Index half = n / 2;
  for (auto _ : state) {
    if (state.range(0) == 1) {
      c.noalias() = a * b;
    } else {
      tbb::parallel_invoke([&] { c.topRows(half).noalias() = a.topRows(half) * b; },
                           [&] { c.bottomRows(n - half).noalias() = a.bottomRows(n - half) * b; });
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  gflops(state, 2.0 * n * n * n);
}
#endif

/// One conv layer of the CNN: x [128, c, hw, hw], w [o, c, 3, 3], padding 1.
void KilnConvStep(benchmark::State& state, int64_t c, int64_t o, int64_t hw, bool input_grad) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const int64_t batch = 128;
  Tensor w = (randn({o, c, 3, 3}, 41) * 0.1).requires_grad_();
  Tensor b = zeros({o}).requires_grad_();
  Tensor x = randn({batch, c, hw, hw}, 42);
  Tensor g = randn({batch, o, hw, hw}, 43);
  realize({w, b, x, g});
  if (input_grad) x.requires_grad_();
  auto step = compile([&](const std::vector<Tensor>&) {
    Tensor y = nn::functional::conv2d(x, w, b, nn::Size2(1), nn::Size2(1), nn::Size2(1), 1);
    std::vector<Tensor> wrt{w, b};
    if (input_grad) wrt.push_back(x);
    std::vector<Tensor> grads = grad({y}, wrt, {g});
    return grads;
  });
  step({});
  for (auto _ : state) benchmark::DoNotOptimize(step({})[0].node().get());
  const double one = 2.0 * batch * o * hw * hw * c * 9; // one product of im2col's shape
  gflops(state, one * (input_grad ? 3 : 2));
}

void Conv1(benchmark::State& state) { KilnConvStep(state, 1, 32, 28, false); }
void Conv2(benchmark::State& state) { KilnConvStep(state, 32, 64, 14, true); }

void KilnGemm1024(benchmark::State& state) { KilnGemm(state, 1024); }
void KilnGemm2048(benchmark::State& state) { KilnGemm(state, 2048); }
BENCHMARK(KilnGemm1024)->Name("Gemm/1024/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KilnGemm2048)->Name("Gemm/2048/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
#ifdef KILN_BENCH_EIGEN
void EigenGemm1024(benchmark::State& state) { EigenGemm(state, 1024); }
void EigenGemm2048(benchmark::State& state) { EigenGemm(state, 2048); }
BENCHMARK(EigenGemm1024)->Name("Gemm/1024/eigen")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(EigenGemm2048)->Name("Gemm/2048/eigen")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(Conv1)->Name("Conv2d/1x28x28_to_32/fwd_bwd/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Conv2)->Name("Conv2d/32x14x14_to_64/fwd_bwd/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

// Fused against unfused kernels, and the ceilings they are judged by, in one binary:
//   Elementwise8/16M  y = sigmoid(relu((x*1.5 + 0.5)*x - 0.25)) * x + 1.0
//   Softmax/8192x1024, LayerNorm/8192x1024 (affine, eps 1e-5)
//   Softmax/48x64x64/kiln/.../causal:{0,1}  the GPT's attention weights (12 x 4 heads, 64 tokens):
//                     softmax of the scaled scores, and of the causally masked ones (-inf above
//                     the diagonal, whose exp underflows to 0): the two should take the same time
//   ColumnSum/768xN/kiln  a bias gradient, x.sum(0) of [768, N] (the Columns form): N = 384 and
//                     320 should move bytes as fast as N = 512 (chunks start at whole blocks)
//   HeadMerge/kiln/pieces:{1,3}  attention's [12, 4, 64, 32] heads merged into [12, 64, 128]
//                     (times 2), and three such merges concatenated into [12, 64, 384] (the q/k/v
//                     gradient assembly): rows whose index is divided by the head width
//   MLPStep/128, MLPStep/1024  784-512-512-10 ReLU MLP at batch 128 / 1024: forward,
//                     cross-entropy, backward, SGD (compiled step); GFLOP/s counts the
//                     matmuls only (3,209,216 x batch per step)
//   EagerMLPStep/128  the same MLP trained by optim::SGD in a PyTorch-style eager loop (no
//                     compile(), no realize()), and the same SGD step compiled (kiln_compiled);
//                     also at batch 1 and 1024 (libtorch's step: bench_torch.cpp)
//   MLPGemms/128      the step's eight matmuls alone, realized together (against libtorch's)
//   CNNStep/128/kiln  examples/train's CNN, Adam, batch 128: the compiled training step
//                     (libtorch's eager step of the same model: bench_torch.cpp)
//   Eager/launch_overhead  host time per kernel of eager realizes of 128 tiny kernels, with
//                     the schedule cache on and off
//   Replay/overhead   host time of replaying a compiled step of tiny kernels
//   CrossEntropy/4096x1000/lazy_targets  with (checked:1) and without (checked:0) the
//                     in-kernel check of the class indices
//   Triad/16M and plain fused C++ loops (-O3 -march=native, no -ffast-math: cxx_scalar_loop)
//                     on 1 and 2 threads; the ceilings proper are bench_ceilings.cpp's cxx_fast.
// GB/s counts the bytes a fused implementation must move (inputs read once, outputs
// written once), the same for every variant, so counters compare as ratios.

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "bench/cnn.h"
#include "bench/mlp.h"
#include "bench/common.h"
#include "codegen/llvm_jit.h"
#include "kiln/kiln.h"
#include "runtime/anomaly.h"
#include "runtime/executor.h"

namespace {

using namespace kiln;
using kiln::bench::report_bytes;

constexpr int64_t kElems = int64_t{1} << 24;
constexpr int64_t kRows = 8192, kCols = 1024;

// Runs `body` with fusion switched by the benchmark's second argument and TBB
// limited to the first.
template <class Body> void with_mode(benchmark::State& state, Body body) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const bool saved = options().fusion;
  options().fusion = state.range(1) != 0;
  body();
  options().fusion = saved;
}

Tensor elementwise8(const Tensor& x) { return sigmoid(relu((x * 1.5 + 0.5) * x - 0.25)) * x + 1.0; }

Tensor softmax_rows(const Tensor& x) {
  Tensor e = exp(x - x.max({1}, true));
  return e / e.sum({1}, true);
}

Tensor layernorm_rows(const Tensor& x, const Tensor& gamma, const Tensor& beta) {
  Tensor xc = x - x.mean({1}, true);
  return xc * rsqrt((xc * xc).mean({1}, true) + 1e-5) * gamma + beta;
}

void KilnElementwise8(benchmark::State& state) {
  with_mode(state, [&] {
    Tensor x = rand({kElems}, 1);
    x.realize();
    for (auto _ : state) elementwise8(x).realize();
  });
  report_bytes(state, 2.0 * kElems * sizeof(float));
}

void KilnSoftmax(benchmark::State& state) {
  with_mode(state, [&] {
    Tensor x = randn({kRows, kCols}, 2);
    x.realize();
    for (auto _ : state) softmax_rows(x).realize();
  });
  report_bytes(state, 2.0 * kRows * kCols * sizeof(float));
}

// The GPT's attention weights: softmax over rows of 64 scores, masked causally (range(2) = 1:
// masked_fill with -inf above the diagonal, as nn::MultiheadAttention's is_causal) or not.
void KilnAttentionSoftmax(benchmark::State& state) {
  constexpr int64_t kHeads = 48, kTokens = 64;
  with_mode(state, [&] {
    const Tensor s = randn({kHeads, kTokens, kTokens}, 6).realize();
    const Tensor causal = triu(ones({kTokens, kTokens}, kBool), 1).realize();
    for (auto _ : state) {
      const Tensor scores = state.range(2) ? s.masked_fill(causal, -INFINITY) : s;
      nn::functional::softmax(scores * 0.17, -1).realize();
    }
  });
  report_bytes(state, 2.0 * kHeads * kTokens * kTokens * sizeof(float));
}

// x.sum(0) over [768, range(0)] columns, one thread.
void KilnColumnSum(benchmark::State& state) {
  const int64_t cols = state.range(0);
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
  const Tensor x = randn({768, cols}, 7).realize();
  for (auto _ : state) x.sum({0}).realize();
  report_bytes(state, 768.0 * static_cast<double>(cols) * sizeof(float));
}

// Attention's heads [12, 4, 64, 32] merged into [12, 64, 128] (range(0) = 1, times 2 to make an
// elementwise kernel of it), or three merges concatenated along the last dim (range(0) = 3).
void KilnHeadMerge(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
  auto merge = [](const Tensor& h) { return h.permute({0, 2, 1, 3}).reshape({12, 64, 128}); };
  const Tensor q = randn({12, 4, 64, 32}, 8).realize(), k = randn({12, 4, 64, 32}, 9).realize();
  const Tensor v = randn({12, 4, 64, 32}, 10).realize();
  const bool three = state.range(0) == 3;
  for (auto _ : state) (three ? concat({merge(q), merge(k), merge(v)}, -1) : merge(q) * 2.0).realize();
  report_bytes(state, 2.0 * static_cast<double>(state.range(0)) * 12 * 4 * 64 * 32 * sizeof(float));
}

void KilnLayerNorm(benchmark::State& state) {
  with_mode(state, [&] {
    Tensor x = randn({kRows, kCols}, 3), gamma = randn({kCols}, 4), beta = randn({kCols}, 5);
    realize({x, gamma, beta});
    for (auto _ : state) layernorm_rows(x, gamma, beta).realize();
  });
  report_bytes(state, 2.0 * kRows * kCols * sizeof(float));
}

// relu(x @ w + b) at 1024^3: the bias and ReLU fused into the matmul kernel, or not.
void KilnGemmBiasRelu(benchmark::State& state) {
  const int64_t n = 1024;
  with_mode(state, [&] {
    Tensor x = randn({n, n}, 21), w = randn({n, n}, 22), b = randn({n}, 23);
    realize({x, w, b});
    for (auto _ : state) relu(matmul(x, w) + b).realize();
  });
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// bench/mlp.h's MLP trained by SGD, one compiled step per iteration.
using bench::Mlp;

CompiledFunction mlp_sgd_step(Mlp& mlp) {
  return compile([&](const std::vector<Tensor>& a) {
    Tensor loss = mlp.loss(a[0], a[1]);
    for (Tensor& p : mlp.params) p.zero_grad();
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : mlp.params) p.assign(p - p.grad() * 0.01);
    return std::vector<Tensor>{loss};
  });
}

// The same step written as a JAX user writes it (bench/mlp_jax.py, XLA's side of issue 17): the
// gradients are values of grad(), not state, so the step stores only the new parameters.
CompiledFunction mlp_functional_step(Mlp& mlp) {
  return compile([&](const std::vector<Tensor>& a) {
    Tensor loss = mlp.loss(a[0], a[1]);
    const std::vector<Tensor> grads = grad({loss}, mlp.params);
    NoGradGuard no_grad;
    for (size_t i = 0; i < grads.size(); ++i) mlp.params[i].assign(mlp.params[i] - grads[i] * 0.01);
    return std::vector<Tensor>{loss.detach()};
  });
}

std::vector<Tensor> mlp_batch(int64_t batch) {
  Tensor x = randn({batch, 784}, 11);
  Tensor y = (rand({batch}, 12) * 10.0).to(kInt64);
  realize({x, y});
  return {x, y};
}

void KilnMlpStep(benchmark::State& state, int64_t batch, bool functional = false) {
  with_mode(state, [&] {
    Mlp mlp(7);
    auto step = functional ? mlp_functional_step(mlp) : mlp_sgd_step(mlp);
    const std::vector<Tensor> xy = mlp_batch(batch);
    const Tensor& x = xy[0];
    const Tensor& y = xy[1];
    step({x, y});
    step({x, y}); // the second call retraces once: gradients exist from now on
    codegen::LlvmJit::instance().wait_background(); // with KILN_JIT_TIER=1: the optimized code is in
    for (auto _ : state) benchmark::DoNotOptimize(step({x, y})[0].node().get());
    state.counters["kernels"] = static_cast<double>(step.num_kernels());
  });
  // Matmul FLOPs only: forward 2 x 668,672 and backward 2 x 935,936 (no input gradient
  // for the first layer) per sample: 3,209,216.
  const double flops = 3209216.0 * static_cast<double>(batch);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// examples/train's CNN (2 x (conv 3x3 pad 1, BatchNorm, ReLU, 2x2 max-pool), 3136 -> 128 -> 10),
// cross-entropy, Adam (lr 1e-3), batch 128 of random Fashion-MNIST-shaped data: one compiled
// training step per iteration (libtorch's eager step of the same model, in the same run of
// kiln_vs_torch: CNNStep/128/torch in bench_torch.cpp).
void KilnCnnStep(benchmark::State& state) {
  constexpr int64_t kBatch = 128;
  with_mode(state, [&] {
    const auto model = bench::train_cnn(3);
    optim::Adam opt(model->parameters(), {.lr = 1e-3});
    CompiledFunction step = compile([&](const std::vector<Tensor>& a) {
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy((*model)(a[0]), a[1]);
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss.detach()};
    });
    const Tensor x = rand({kBatch, 1, 28, 28}, 41).realize();
    const Tensor y = (rand({kBatch}, 42) * 10.0).to(kInt64).realize();
    step({x, y});
    step({x, y}); // the second call retraces once: gradients and Adam's moments exist from now on
    codegen::LlvmJit::instance().wait_background(); // the optimized tier's code is in
    for (auto _ : state) benchmark::DoNotOptimize(step({x, y})[0].item<float>());
    state.counters["kernels"] = static_cast<double>(step.num_kernels());
    state.counters["peak_MB"] = static_cast<double>(step.peak_intermediate_bytes()) / 1e6; // the step's intermediates
  });
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(kBatch * state.iterations()), benchmark::Counter::kIsRate);
}

// The same MLP trained by optim::SGD (lr 0.01) in a PyTorch-style loop: zero_grad, loss,
// backward, step, item; no compile(), no realize() (opt.step() realizes the step), or
// the same step through compile() when `compiled`.
void KilnSgdMlpStep(benchmark::State& state, int64_t batch, bool compiled) {
  with_mode(state, [&] {
    Mlp mlp(7);
    optim::SGD opt(mlp.params, {.lr = 0.01});
    const std::vector<Tensor> xy = mlp_batch(batch);
    auto build = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = mlp.loss(x, y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto traced = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{build(a[0], a[1]).detach()}; });
    auto step = [&] { return (compiled ? traced(xy)[0] : build(xy[0], xy[1])).item<float>(); };
    step();
    step(); // gradients exist from now on: the steady state
    const size_t launches = runtime::executor_stats().launches;
    for (auto _ : state) benchmark::DoNotOptimize(step());
    state.counters["kernels"] = static_cast<double>(runtime::executor_stats().launches - launches) /
                                static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  });
  state.counters["GFLOP/s"] = benchmark::Counter(3209216.0 * static_cast<double>(batch * state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The eight matmuls of an MLPStep at `batch` alone (forward x@w0, h0@w1, h1@w2; backward
// h1^T@g2, g2@w2^T, h0^T@g1, g1@w1^T, x^T@g0), realized together each iteration: where the
// eager step's time goes against libtorch's (bench_torch.cpp's MLPGemms/<batch>/torch).
void KilnMlpGemms(benchmark::State& state, int64_t batch) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const Tensor x = randn({batch, 784}, 1), h0 = randn({batch, 512}, 2), h1 = randn({batch, 512}, 3);
  const Tensor g0 = randn({batch, 512}, 4), g1 = randn({batch, 512}, 5), g2 = randn({batch, 10}, 6);
  const Tensor w0 = randn({784, 512}, 7), w1 = randn({512, 512}, 8), w2 = randn({512, 10}, 9);
  realize({x, h0, h1, g0, g1, g2, w0, w1, w2});
  auto gemms = [&] {
    std::vector<Tensor> out{matmul(x, w0),     matmul(h0, w1),     matmul(h1, w2),     matmul(h1.t(), g2),
                            matmul(g2, w2.t()), matmul(h0.t(), g1), matmul(g1, w1.t()), matmul(x.t(), g0)};
    realize(out);
    return out[0].node().get();
  };
  gemms();
  for (auto _ : state) benchmark::DoNotOptimize(gemms());
  state.counters["GFLOP/s"] = benchmark::Counter(3209216.0 * static_cast<double>(batch * state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Host cost of eager realizes: each iteration builds a chain of 64 exp-and-scale steps
// on 16 elements in the unfused mode (128 tiny kernels) and realizes it, with the
// schedule cache on (the second argument 1) or off. us_per_launch is the iteration's
// time over its launches: graph building, the cache lookup and the launches.
void KilnEagerLaunchOverhead(benchmark::State& state) {
  const bool saved_fusion = options().fusion, saved_cache = options().schedule_cache;
  options().fusion = false;
  options().schedule_cache = state.range(0) != 0;
  const Tensor x = randn({16}, 31).realize();
  auto chain = [&] {
    Tensor y = x;
    for (int i = 0; i < 64; ++i) y = exp(y) * 0.5;
    return y.realize();
  };
  chain();
  const size_t launches = runtime::executor_stats().launches;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(chain().node().get());
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  const auto launched = static_cast<double>(runtime::executor_stats().launches - launches);
  state.counters["kernels"] = launched / static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  state.counters["us_per_launch"] = us / std::max(1.0, launched);
  options().fusion = saved_fusion;
  options().schedule_cache = saved_cache;
}

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Compile cost of the MLP step, measured in fresh processes (this binary run with
// --kiln_compile_child), so that no kernel is in memory: once with an empty disk
// cache (cold) and once with the cache the first run filled (warm). Compile time is
// the first call's time (trace, schedule, compile, run) minus a replay's.
void KilnCompileCost(benchmark::State& state) {
  const std::string dir = "/tmp/kiln_bench_compile_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string cmd = "KILN_CACHE_DIR=" + dir + " " + std::filesystem::read_symlink("/proc/self/exe").string() +
                          " --kiln_compile_child";
  auto child_ms = [&] {
    FILE* p = popen(cmd.c_str(), "r");
    double ms = -1;
    if (p && std::fscanf(p, "COMPILE_MS %lf", &ms) != 1) ms = -1;
    if (p) pclose(p);
    return ms;
  };
  double cold = 0, warm = 0;
  for (auto _ : state) {
    std::filesystem::remove_all(dir);
    cold = child_ms();
    warm = child_ms();
    state.SetIterationTime((cold + warm) / 1e3);
  }
  std::filesystem::remove_all(dir);
  state.counters["cold_ms"] = cold;
  state.counters["warm_disk_ms"] = warm;
}

void KilnReplayOverhead(benchmark::State& state) {
  Tensor w = from_vector<float>({1, 2, 3, 4});
  auto step = compile([&](const std::vector<Tensor>& a) {
    NoGradGuard no_grad;
    w.assign(w * 0.5f + a[0]);
    return std::vector<Tensor>{(w * a[0]).sum()};
  });
  Tensor x = from_vector<float>({1, 1, 1, 1});
  step({x});
  for (auto _ : state) benchmark::DoNotOptimize(step({x})[0].node().get());
}

// ---------------------------------------------------------------- ceilings

// Plain loops built with -O3 -march=native but without -ffast-math: scalar expf and
// serial (unvectorized) sums. Not the ceiling: bench_ceilings.cpp's cxx_fast loops are;
// these show what a plain loop gets ("cxx_scalar_loop").
using kiln::bench::split;

void CxxTriad(benchmark::State& state) {
  std::vector<float> a(kElems), b(kElems, 1.0f), c(kElems, 2.0f);
  for (auto _ : state) {
    split(static_cast<int>(state.range(0)), kElems, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
    });
    benchmark::ClobberMemory();
  }
  report_bytes(state, 3.0 * kElems * sizeof(float));
}

void CxxElementwise8(benchmark::State& state) {
  std::vector<float> x(kElems, 0.3f), y(kElems);
  for (auto _ : state) {
    split(static_cast<int>(state.range(0)), kElems, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float v = x[i], r = std::max((v * 1.5f + 0.5f) * v - 0.25f, 0.0f);
        y[i] = 1.0f / (1.0f + std::exp(-r)) * v + 1.0f;
      }
    });
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * kElems * sizeof(float));
}

void CxxSoftmax(benchmark::State& state) {
  std::vector<float> x(kRows * kCols, 0.1f), y(kRows * kCols);
  for (auto _ : state) {
    split(static_cast<int>(state.range(0)), kRows, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const float* in = &x[r * kCols];
        float* out = &y[r * kCols];
        float m = -INFINITY, s = 0;
        for (int64_t j = 0; j < kCols; ++j) m = std::max(m, in[j]);
        for (int64_t j = 0; j < kCols; ++j) s += out[j] = std::exp(in[j] - m);
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < kCols; ++j) out[j] *= inv;
      }
    });
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * kRows * kCols * sizeof(float));
}

void CxxLayerNorm(benchmark::State& state) {
  std::vector<float> x(kRows * kCols, 0.1f), y(kRows * kCols), g(kCols, 1.0f), b(kCols, 0.0f);
  for (auto _ : state) {
    split(static_cast<int>(state.range(0)), kRows, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const float* in = &x[r * kCols];
        float* out = &y[r * kCols];
        float mean = 0, var = 0;
        for (int64_t j = 0; j < kCols; ++j) mean += in[j];
        mean /= kCols;
        for (int64_t j = 0; j < kCols; ++j) var += (in[j] - mean) * (in[j] - mean);
        const float inv = 1.0f / std::sqrt(var / kCols + 1e-5f);
        for (int64_t j = 0; j < kCols; ++j) out[j] = (in[j] - mean) * inv * g[j] + b[j];
      }
    });
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * kRows * kCols * sizeof(float));
}

#define KILN_MODES(B, name)                                                                                    \
  BENCHMARK(B)->Name(name)->ArgNames({"threads", "fused"})->Args({1, 1})->Args({1, 0})->Args({2, 1})->Args({2, 0}) \
      ->UseRealTime()->Unit(benchmark::kMillisecond)
#define KILN_CEILING(B, name) \
  BENCHMARK(B)->Name(name)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)

// The cost of checking class indices in the kernel (graph/index_check.h): cross-entropy of
// 4096 x 1000 logits over lazy (computed) targets, checked by the kernel that reads them,
// against the same graph with no check. Eager: each iteration records, schedules and runs.
void KilnCrossEntropyLazyTargets(benchmark::State& state) {
  constexpr int64_t n = 4096, c = 1000;
  const bool checked = state.range(0) != 0;
  const Tensor logits = randn({n, c}, 1).realize();
  std::vector<int64_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 7) % c;
  const Tensor targets = from_vector<int64_t>(t);
  for (auto _ : state) {
    const Tensor lazy = targets + 1 - 1;
    Tensor loss;
    if (checked) {
      loss = nn::functional::cross_entropy(logits, lazy);
    } else { // cross_entropy's own graph, less the check
      const Tensor oh = cast(cast(eq(lazy.unsqueeze(-1), arange(0, c, 1, kInt64)), kInt64), kFloat32);
      loss = (-(nn::functional::log_softmax(logits, 1) * oh).sum({1})).mean();
    }
    benchmark::DoNotOptimize(loss.item<float>());
  }
}

KILN_MODES(KilnElementwise8, "Elementwise8/16M/kiln");
KILN_CEILING(CxxElementwise8, "Elementwise8/16M/cxx_scalar_loop");
KILN_MODES(KilnSoftmax, "Softmax/8192x1024/kiln");
KILN_CEILING(CxxSoftmax, "Softmax/8192x1024/cxx_scalar_loop");
BENCHMARK(KilnAttentionSoftmax)
    ->Name("Softmax/48x64x64/kiln")
    ->ArgNames({"threads", "fused", "causal"})
    ->Args({1, 1, 0})
    ->Args({1, 1, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(KilnColumnSum)->Name("ColumnSum/768xN/kiln")->ArgName("N")->Arg(320)->Arg(384)->Arg(512)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(KilnHeadMerge)->Name("HeadMerge/kiln")->ArgName("pieces")->Arg(1)->Arg(3)->UseRealTime()->Unit(benchmark::kMicrosecond);
KILN_MODES(KilnLayerNorm, "LayerNorm/8192x1024/kiln");
KILN_CEILING(CxxLayerNorm, "LayerNorm/8192x1024/cxx_scalar_loop");
KILN_CEILING(CxxTriad, "Triad/16M/cxx");
void KilnMlpStep128(benchmark::State& state) { KilnMlpStep(state, 128); }
void KilnMlpStep1024(benchmark::State& state) { KilnMlpStep(state, 1024); }
KILN_MODES(KilnMlpStep128, "MLPStep/128/kiln");
// The functional step (mlp_functional_step) at the batch sizes of issue 17's XLA comparison.
void KilnMlpFunctionalStep(benchmark::State& state) { KilnMlpStep(state, state.range(2), true); }
BENCHMARK(KilnMlpFunctionalStep)->Name("MLPStep/kiln_functional")->ArgNames({"threads", "fused", "batch"})
    ->ArgsProduct({{1, 2}, {1}, {1, 128, 1024}})->UseRealTime()->Unit(benchmark::kMillisecond);
// The same step with the profile collecting (KILN_PROFILE=1's cost; compare with MLPStep/128/kiln).
void KilnMlpStep128Profiled(benchmark::State& state) {
  profile::enable(true);
  KilnMlpStep(state, 128);
  profile::enable(false);
  profile::reset();
}
KILN_MODES(KilnMlpStep128Profiled, "MLPStep/128/kiln_profiled");
// The same steps in anomaly mode (KILN_DETECT_ANOMALY=1's cost, kiln/anomaly.h): compare with
// MLPStep/128/kiln and EagerMLPStep/128/kiln. Every kernel's output is scanned for NaN and inf;
// eager realizes also plan afresh (the mode bypasses the schedule cache).
void KilnMlpStep128Anomaly(benchmark::State& state) {
  options().detect_anomaly = true;
  KilnMlpStep(state, 128);
  options().detect_anomaly = false;
}
KILN_MODES(KilnMlpStep128Anomaly, "MLPStep/128/kiln_anomaly");
void KilnEagerMlpStep128Anomaly(benchmark::State& state) {
  options().detect_anomaly = true;
  KilnSgdMlpStep(state, 128, false);
  options().detect_anomaly = false;
}
BENCHMARK(KilnEagerMlpStep128Anomaly)->Name("EagerMLPStep/128/kiln_anomaly")->ArgNames({"threads", "fused"})
    ->Args({1, 1})->Args({2, 1})->UseRealTime()->Unit(benchmark::kMillisecond);
// A memory-bound kernel in anomaly mode: its 64 MB output is scanned once more (compare
// with Elementwise8/16M/kiln).
void KilnElementwise8Anomaly(benchmark::State& state) {
  options().detect_anomaly = true;
  KilnElementwise8(state);
  options().detect_anomaly = false;
}
KILN_MODES(KilnElementwise8Anomaly, "Elementwise8/16M/kiln_anomaly");
// What anomaly mode costs while off: the test each plan execution (and eager realize) makes.
void KilnAnomalyOffTest(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(runtime::anomaly_checks_on());
}
BENCHMARK(KilnAnomalyOffTest)->Name("Anomaly/off_test_per_execution")->Unit(benchmark::kNanosecond);
KILN_MODES(KilnMlpStep1024, "MLPStep/1024/kiln");
KILN_MODES(KilnGemmBiasRelu, "GemmBiasRelu/1024/kiln");
void KilnEagerMlpStep128(benchmark::State& state) { KilnSgdMlpStep(state, 128, false); }
void KilnSgdMlpStep128Compiled(benchmark::State& state) { KilnSgdMlpStep(state, 128, true); }
// Batches 1 and 1024 as well, to compare with libtorch's eager step (bench_torch.cpp).
void KilnEagerMlpStep1(benchmark::State& state) { KilnSgdMlpStep(state, 1, false); }
void KilnSgdMlpStep1Compiled(benchmark::State& state) { KilnSgdMlpStep(state, 1, true); }
void KilnEagerMlpStep1024(benchmark::State& state) { KilnSgdMlpStep(state, 1024, false); }
void KilnSgdMlpStep1024Compiled(benchmark::State& state) { KilnSgdMlpStep(state, 1024, true); }
#define KILN_EAGER(B, name) \
  BENCHMARK(B)->Name(name)->ArgNames({"threads", "fused"})->Args({1, 1})->Args({2, 1})->UseRealTime()->Unit(benchmark::kMillisecond)
KILN_EAGER(KilnEagerMlpStep128, "EagerMLPStep/128/kiln");
KILN_EAGER(KilnSgdMlpStep128Compiled, "EagerMLPStep/128/kiln_compiled");
KILN_EAGER(KilnEagerMlpStep1, "EagerMLPStep/1/kiln");
KILN_EAGER(KilnSgdMlpStep1Compiled, "EagerMLPStep/1/kiln_compiled");
KILN_EAGER(KilnEagerMlpStep1024, "EagerMLPStep/1024/kiln");
KILN_EAGER(KilnSgdMlpStep1024Compiled, "EagerMLPStep/1024/kiln_compiled");
KILN_EAGER(KilnCnnStep, "CNNStep/128/kiln");
BENCHMARK_CAPTURE(KilnMlpGemms, b128, 128)->Name("MLPGemms/128/kiln")->ArgName("threads")->Arg(1)->Arg(2)
    ->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(KilnEagerLaunchOverhead)->Name("Eager/launch_overhead")->ArgName("schedule_cache")->Arg(1)->Arg(0)
    ->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(KilnReplayOverhead)->Name("Replay/overhead")->Unit(benchmark::kMicrosecond);
BENCHMARK(KilnCrossEntropyLazyTargets)->Name("CrossEntropy/4096x1000/lazy_targets")->ArgName("checked")->Arg(1)->Arg(0)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(KilnCompileCost)->Name("Compile/MLPStep/128")->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

} // namespace

/// The child process of Compile/MLPStep: prints "COMPILE_MS <ms>".
int kiln_compile_cost_child() {
  Mlp mlp(7);
  auto step = mlp_sgd_step(mlp);
  const std::vector<Tensor> xy = mlp_batch(128);
  const auto t0 = std::chrono::steady_clock::now();
  step(xy);
  const auto t1 = std::chrono::steady_clock::now();
  step(xy); // the gradients exist from now on: a second trace, whose kernels are all cached
  const auto t2 = std::chrono::steady_clock::now();
  step(xy);
  const auto t3 = std::chrono::steady_clock::now();
  const double replay = ms_between(t2, t3);
  std::printf("COMPILE_MS %.3f\n", ms_between(t0, t1) - replay);
  (void)ms_between(t1, t2);
  return 0;
}

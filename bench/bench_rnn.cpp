// LSTMStep/...: one training step of a 2-layer LSTM sequence model, as kiln's compiled step (fused
// and unfused) here and as PyTorch's eager step in bench_torch.cpp (kiln_vs_torch holds both, so
// one run measures them side by side). The model: nn::LSTM(64 -> 128, 2 layers) over
// [T = 32, N = 16, 64] inputs, a Linear(128 -> 64) head on every step's output, mean cross-entropy
// against fixed random classes, Adam (lr 1e-3); the loss is read back each step.

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <cmath>
#include <vector>

#include "bench/rnn_step.h"
#include "codegen/llvm_jit.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;
using bench::kRnnSteps;

void LstmStep(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const bool saved = options().fusion;
  options().fusion = state.range(1) != 0;
  {
    nn::manual_seed(0);
    nn::LSTM lstm({.input_size = kRnnSteps.input, .hidden_size = kRnnSteps.hidden, .num_layers = 2});
    nn::Linear head(kRnnSteps.hidden, kRnnSteps.classes);
    std::vector<Tensor> params = lstm.parameters();
    for (const Tensor& p : head.parameters()) params.push_back(p);
    optim::Adam opt(params, {.lr = 1e-3});
    CompiledFunction step = compile([&](const std::vector<Tensor>& in) {
      opt.zero_grad();
      const Tensor out = std::get<0>(lstm.forward(in[0]));
      const Tensor logits = head.forward(out.reshape({kRnnSteps.time * kRnnSteps.batch, kRnnSteps.hidden}));
      Tensor loss = nn::functional::cross_entropy(logits, in[1]);
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss.detach()};
    });
    const Tensor x = randn({kRnnSteps.time, kRnnSteps.batch, kRnnSteps.input}, 1).realize();
    const Tensor y = cast(rand({kRnnSteps.time * kRnnSteps.batch}, 2) * double(kRnnSteps.classes), DType::Int64).realize();
    const float first = step({x, y})[0].item<float>();
    step({x, y}); // the second call retraces once: gradients and Adam's moments exist from now on
    codegen::LlvmJit::instance().wait_background(); // the optimized tier's code is in
    if (!std::isfinite(first)) state.SkipWithError("the loss is not finite");
    for (auto _ : state) benchmark::DoNotOptimize(step({x, y})[0].item<float>());
    state.counters["kernels"] = static_cast<double>(step.num_kernels());
    state.counters["sequences/s"] =
        benchmark::Counter(static_cast<double>(kRnnSteps.batch * state.iterations()), benchmark::Counter::kIsRate);
  }
  options().fusion = saved;
}

BENCHMARK(LstmStep)
    ->Name("LSTMStep/32x16x64x128/kiln")
    ->ArgNames({"threads", "fused"})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Args({2, 1})
    ->Args({2, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

// TransformerBlockStep/...: one compiled training step of a pre-LN transformer block
// (nn::TransformerEncoderLayer, norm_first, GELU, 4x feed-forward, causal self-attention, no
// dropout) with AdamW, at batch 16 x 64 tokens, d_model 128, 4 heads; the loss is the mean square
// of the output. Fused against unfused (KILN_FUSION=0's one kernel per op), on 1 and 2 threads:
// the ratio of the fused and unfused times of one run is the figure.

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include "codegen/llvm_jit.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;

constexpr int64_t kBatch = 16, kTokens = 64, kDim = 128, kHeads = 4;

void TransformerBlockStep(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const bool saved = options().fusion;
  options().fusion = state.range(1) != 0;
  {
    nn::manual_seed(0);
    nn::TransformerEncoderLayer block(kDim, kHeads, {.dim_feedforward = 4 * kDim, .dropout = 0.0,
                                                     .activation = "gelu", .batch_first = true, .norm_first = true});
    optim::AdamW opt(block.parameters(), {.lr = 1e-3});
    CompiledFunction step = compile([&](const std::vector<Tensor>& x) {
      opt.zero_grad();
      Tensor loss = square(block.forward(x[0], {}, {}, /*is_causal=*/true)).mean();
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss.detach()};
    });
    const Tensor x = randn({kBatch, kTokens, kDim}, 1).realize();
    step({x});
    step({x}); // the second call retraces once: gradients and AdamW's moments exist from now on
    codegen::LlvmJit::instance().wait_background(); // the optimized tier's code is in
    for (auto _ : state) benchmark::DoNotOptimize(step({x})[0].item<float>());
    state.counters["kernels"] = static_cast<double>(step.num_kernels());
    state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(kBatch * kTokens * state.iterations()),
                                                    benchmark::Counter::kIsRate);
  }
  options().fusion = saved;
}

BENCHMARK(TransformerBlockStep)
    ->Name("TransformerBlockStep/16x64x128")
    ->ArgNames({"threads", "fused"})
    ->Args({1, 1})
    ->Args({1, 0})
    ->Args({2, 1})
    ->Args({2, 0})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

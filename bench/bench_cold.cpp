// Cold start (issue 14): the first training step of a model in a fresh process with an
// empty kernel cache, with the JIT's tiers (KILN_JIT_TIER=1: a quick compile first, the
// optimized code compiled in the background and swapped in) and without (0: every kernel
// compiled by the optimized tier before its first launch), in the same run:
//   Cold/MLPStep/128/tiered:T      bench/mlp.h's 784-512-512-10 MLP, SGD, batch 128
//   Cold/CNNStep/32/tiered:T       examples/train's CNN (2 x conv3x3+BN+ReLU+maxpool, 2 FC), Adam, batch 32
//   Cold/TransformerStep/8/tiered:T a pre-norm transformer block (d 64, 4 heads, 32 tokens, MLP 256 with
//                                  GELU) over a plain input, layernorm + linear head, cross-entropy, Adam, batch 8
// Each iteration runs this binary as a child (--kiln_cold_child=NAME) with a fresh
// KILN_CACHE_DIR. Time = the first step's wall time (trace, schedule, compile, run).
// Counters: kernels = kernels compiled by the process up to the end of the first step
// (model initialization included); first_use_ms = their average first-use cost (the
// compile time the caller waited for: the quick tier when tiered); steady_ms = a replayed
// step's time (median of 15) once every background compile is done, so that the
// optimized code runs in both variants; quick_{ir,passes,codegen}_ms = the quick tier's
// time per kernel in emitting the IR, its IR passes and code generation (tiered only).

#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/cnn.h"
#include "bench/mlp.h"
#include "codegen/llvm_jit.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

/// A model's training step and its batch.
struct ColdCase {
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> step;
  std::vector<Tensor> batch;
  std::vector<std::shared_ptr<void>> keep; // the model and optimizer the step uses
};

ColdCase mlp_case() {
  auto mlp = std::make_shared<bench::Mlp>(7);
  ColdCase c;
  c.keep.push_back(mlp);
  c.step = [mlp](const std::vector<Tensor>& a) {
    Tensor loss = mlp->loss(a[0], a[1]);
    for (Tensor& p : mlp->params) p.zero_grad();
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : mlp->params) p.assign(p - p.grad() * 0.01);
    return std::vector<Tensor>{loss};
  };
  c.batch = {randn({128, 784}, 11), (rand({128}, 12) * 10.0).to(kInt64)};
  return c;
}

/// A step of `model` under Adam with cross-entropy against integer labels.
ColdCase module_case(std::shared_ptr<nn::Module> model, std::vector<Tensor> batch) {
  auto opt = std::make_shared<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  ColdCase c;
  c.keep = {model, opt};
  c.step = [model, opt](const std::vector<Tensor>& a) {
    opt->zero_grad();
    Tensor loss = F::cross_entropy((*model)(a[0]), a[1]);
    loss.backward();
    opt->step();
    return std::vector<Tensor>{loss.detach()};
  };
  c.batch = std::move(batch);
  return c;
}

ColdCase cnn_case() {
  return module_case(bench::train_cnn(3), {randn({32, 1, 28, 28}, 21), (rand({32}, 22) * 10.0).to(kInt64)});
}

/// A pre-norm transformer block with its attention written from matmul and softmax,
/// then a layernorm and a linear head over a vocabulary of 96, per token.
class Block : public nn::Module {
public:
  static constexpr int64_t kD = 64, kHeads = 4, kVocab = 96;
  Block()
      : ln1_(register_module("ln1", nn::LayerNorm({kD}))), ln2_(register_module("ln2", nn::LayerNorm({kD}))),
        ln3_(register_module("ln3", nn::LayerNorm({kD}))), qkv_(register_module("qkv", nn::Linear(kD, 3 * kD))),
        out_(register_module("out", nn::Linear(kD, kD))), up_(register_module("up", nn::Linear(kD, 4 * kD))),
        down_(register_module("down", nn::Linear(4 * kD, kD))), head_(register_module("head", nn::Linear(kD, kVocab))) {}
  Tensor forward(const Tensor& x) override { // x [B, T, D] -> logits [B * T, vocab]
    const int64_t b = x.size(0), t = x.size(1), dh = kD / kHeads;
    Tensor qkv = (*qkv_)((*ln1_)(x)).reshape({b, t, 3, kHeads, dh}).permute({2, 0, 3, 1, 4}); // [3, B, H, T, dh]
    Tensor q = qkv.slice(0, 0, 1).reshape({b, kHeads, t, dh});
    Tensor k = qkv.slice(0, 1, 2).reshape({b, kHeads, t, dh});
    Tensor v = qkv.slice(0, 2, 3).reshape({b, kHeads, t, dh});
    Tensor att = F::softmax(matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(dh))), 3);
    Tensor h = x + (*out_)(matmul(att, v).permute({0, 2, 1, 3}).reshape({b, t, kD}));
    h = h + (*down_)(F::gelu((*up_)((*ln2_)(h))));
    return (*head_)((*ln3_)(h)).reshape({b * t, kVocab});
  }

private:
  std::shared_ptr<nn::LayerNorm> ln1_, ln2_, ln3_;
  std::shared_ptr<nn::Linear> qkv_, out_, up_, down_, head_;
};

ColdCase transformer_case() {
  nn::manual_seed(5);
  return module_case(std::make_shared<Block>(),
                     {randn({8, 32, Block::kD}, 31), (rand({8 * 32}, 32) * Block::kVocab).to(kInt64)});
}

const std::map<std::string, ColdCase (*)()>& cases() {
  static const std::map<std::string, ColdCase (*)()> c{
      {"mlp", mlp_case}, {"cnn", cnn_case}, {"transformer", transformer_case}};
  return c;
}

/// Runs this binary as a child for `name` with tiers on or off and a fresh cache; returns
/// its figures (first step ms, kernels, first-use ms per kernel, steady ms), or empty.
std::vector<double> run_child(const std::string& name, bool tiered) {
  const std::string dir = "/tmp/kiln_bench_cold_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string cmd = "KILN_CACHE_DIR=" + dir + " KILN_JIT_TIER=" + (tiered ? "1" : "0") + " " +
                          std::filesystem::read_symlink("/proc/self/exe").string() + " --kiln_cold_child=" + name;
  std::vector<double> r(7);
  FILE* p = popen(cmd.c_str(), "r");
  const bool ok = p && std::fscanf(p, "COLD %lf %lf %lf %lf %lf %lf %lf", &r[0], &r[1], &r[2], &r[3], &r[4], &r[5],
                                   &r[6]) == 7;
  if (p) pclose(p);
  std::filesystem::remove_all(dir);
  return ok ? r : std::vector<double>{};
}

void KilnColdStep(benchmark::State& state, const std::string& name) {
  const bool tiered = state.range(1) != 0;
  std::vector<double> r;
  for (auto _ : state) {
    r = run_child(name, tiered);
    if (r.empty()) return state.SkipWithError("the child process failed");
    state.SetIterationTime(r[0] / 1e3);
  }
  state.counters["kernels"] = r[1];
  state.counters["first_use_ms"] = r[2];
  state.counters["steady_ms"] = r[3];
  if (!tiered) return;
  state.counters["quick_ir_ms"] = r[4]; // per kernel: where the quick tier's time goes
  state.counters["quick_passes_ms"] = r[5];
  state.counters["quick_codegen_ms"] = r[6];
}

BENCHMARK_CAPTURE(KilnColdStep, mlp, std::string("mlp"))
    ->Name("Cold/MLPStep")->ArgNames({"batch", "tiered"})->Args({128, 1})->Args({128, 0})
    ->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(KilnColdStep, cnn, std::string("cnn"))
    ->Name("Cold/CNNStep")->ArgNames({"batch", "tiered"})->Args({32, 1})->Args({32, 0})
    ->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(KilnColdStep, transformer, std::string("transformer"))
    ->Name("Cold/TransformerStep")->ArgNames({"batch", "tiered"})->Args({8, 1})->Args({8, 0})
    ->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);

} // namespace

/// The child process of Cold/*: prints "COLD <first step ms> <kernels> <first-use ms per kernel> <steady ms>
/// <quick IR ms> <quick passes ms> <quick codegen ms>" (the last three per quick kernel).
int kiln_cold_child(const std::string& name) {
  auto it = cases().find(name);
  if (it == cases().end()) return 2;
  ColdCase c = it->second();
  realize(c.batch);
  CompiledFunction step = compile(c.step);
  const auto t0 = Clock::now();
  step(c.batch);
  const double first = ms_since(t0);
  const size_t kernels = runtime::executor_stats().compiles;
  const codegen::JitStats js = codegen::LlvmJit::instance().stats();
  codegen::LlvmJit::instance().wait_background();
  step(c.batch); // gradients and optimizer slots exist from now on: the steady-state trace
  codegen::LlvmJit::instance().wait_background();
  std::vector<double> times;
  for (int i = 0; i < 15; ++i) {
    const auto t = Clock::now();
    step(c.batch);
    times.push_back(ms_since(t));
  }
  std::nth_element(times.begin(), times.begin() + 7, times.end());
  const double n = static_cast<double>(std::max<size_t>(kernels, 1)), q = static_cast<double>(std::max<size_t>(js.quick, 1));
  std::printf("COLD %.3f %zu %.3f %.3f %.3f %.3f %.3f\n", first, kernels, js.first_use_ms / n, times[7],
              js.quick_ir_ms / q, js.quick_passes_ms / q, js.quick_codegen_ms / q);
  return 0;
}

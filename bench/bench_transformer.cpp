// TransformerBlockStep/...: one compiled training step of a pre-LN transformer block
// (nn::TransformerEncoderLayer, norm_first, GELU, 4x feed-forward, causal self-attention, no
// dropout) with AdamW, at batch 16 x 64 tokens, d_model 128, 4 heads; the loss is the mean square
// of the output. Fused against unfused (KILN_FUSION=0's one kernel per op), on 1 and 2 threads:
// the ratio of the fused and unfused times of one run is the figure. Counters linear_ms and rest_ms:
// a step's kernel time in the linear layers' GEMMs (the same kernels in both modes) and in the
// rest, the part fusion changes (kernel_ms_per_step).
//
// Attention/<T>/{fused,unfused,hand_loop}/{forward,backward}: scaled_dot_product_attention at batch
// 4, 8 heads, head dim 64, T queries and keys, f32: the fused attention kernel (fusion on), the
// composite of primitives (KILN_FUSION=0's kernels, writing the [T, T] scores), and a plain C++
// loop of the fused kernel's math built with this file's flags (per row: scores, online softmax
// in blocks of 64 keys, the product with V; the backward recomputes the weights per row).
// "backward" times forward and backward (the gradients of q, k and v of sum(out * g)). With a
// gradient flowing, scaled_dot_product_attention takes the fused kernels (Attention and its fused
// backward, AttentionGrad) where is_causal is set or from 512 x 512 weights a batch point, and the
// composite with fusion on otherwise (the README's fusion section): so .../fused/backward is the
// composite at T = 256, and the attention kernels at T = 512 and 1024 and in the causal cases.
// Attention/<T>/node/{forward,backward}: the Attention node built directly (fusion on), so its
// backward is always the fused one (AttentionGrad), whatever scaled_dot_product_attention picks.
// Attention/64_causal/...: the same four at TransformerBlockStep's and the GPT's attention (batch
// 16, 4 heads, T = 64, head dim 32, causal); Attention/256_causal/...: T = 256's shape, causal. The
// hand loop skips the masked keys. Attention/64_causal_dropout/{fused,unfused}/...: the GPT's
// attention with its dropout (0.1): the fused kernels against the composite.

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "bench/common.h"
#include "codegen/llvm_jit.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;

constexpr int64_t kBatch = 16, kTokens = 64, kDim = 128, kHeads = 4;

/// The kernel time of one step (the mean of kProfiledSteps, run after the timed ones with the
/// profile on) in the linear layers' GEMMs and in the rest (attention, norms, GELU, AdamW). The
/// linear layers' GEMMs are the same kernels fused and unfused, so fusion acts on the rest alone:
/// its fused and unfused values are fusion's effect on what it can change. They are the profile's
/// contractions of at least 2 B T D^2 flops (the smallest, the output projection's); attention's
/// products (unfused: the composite's batched GEMMs) have 2 B T^2 D, half as many. Nothing under
/// KILN_PROFILE=1, whose table at exit would lose what reset() forgets.
std::optional<std::pair<double, double>> kernel_ms_per_step(CompiledFunction& step, const Tensor& x) {
  constexpr int kProfiledSteps = 10;
  constexpr double kLinearFlops = 2.0 * kBatch * kTokens * kDim * kDim;
  static_assert(kTokens < kDim, "attention's products would count as the linear layers'");
  if (profile::enabled()) return std::nullopt;
  profile::reset();
  profile::enable(true);
  for (int i = 0; i < kProfiledSteps; ++i) step({x})[0].item<float>();
  double linear = 0, rest = 0;
  for (const profile::KernelRow& row : profile::kernels()) (row.flops >= kLinearFlops ? linear : rest) += row.total_ms;
  profile::enable(false);
  profile::reset();
  return std::pair{linear / kProfiledSteps, rest / kProfiledSteps};
}

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
    if (const auto ms = kernel_ms_per_step(step, x)) {
      state.counters["linear_ms"] = ms->first;
      state.counters["rest_ms"] = ms->second;
    }
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

/// An Attention/... case's operands: [batch, heads, t, d] each; causal or no mask.
struct AttnShape {
  int64_t batch, heads, t, d;
  bool causal;
  double dropout = 0; ///< > 0: scaled_dot_product_attention's dropout_p (fused and unfused modes only)
};

// What an Attention/... case runs.
enum AttnMode : int64_t { kFused = 0, kUnfused = 1, kHandLoop = 2, kNode = 3 };

// The Attention node of q, k, v (fusion on), whatever scaled_dot_product_attention picks: its
// gradient is the fused backward (AttentionGrad), so .../node/backward times the attention kernels.
Tensor attention_node(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  return detail::result_of(graph::build::attention(q.node(), k.node(), v.node(), nullptr, scale, causal), {q, k, v});
}

// The hand loop's forward of one [T, d] head: out = softmax(q k^T * scale) v, per row with an
// online softmax over blocks of 64 keys (with causal, only keys j <= i); lse (per row) for the
// backward.
void hand_attention_head(const float* q, const float* k, const float* v, float* out, float* lse, int64_t T, int64_t d,
                         float scale, bool causal) {
  std::vector<float> s(64), o(static_cast<size_t>(d));
  for (int64_t i = 0; i < T; ++i) {
    float m = -std::numeric_limits<float>::infinity(), z = 0;
    std::fill(o.begin(), o.end(), 0.0f);
    const int64_t keys = causal ? i + 1 : T;
    for (int64_t j0 = 0; j0 < keys; j0 += 64) {
      const int64_t jn = std::min<int64_t>(64, keys - j0);
      float mb = m;
      for (int64_t jj = 0; jj < jn; ++jj) {
        float acc = 0;
        for (int64_t x = 0; x < d; ++x) acc += q[i * d + x] * k[(j0 + jj) * d + x];
        s[jj] = acc * scale;
        mb = std::max(mb, s[jj]);
      }
      const float a = std::exp(m - mb);
      float sum = 0;
      for (int64_t jj = 0; jj < jn; ++jj) sum += s[jj] = std::exp(s[jj] - mb);
      z = z * a + sum;
      m = mb;
      for (int64_t c = 0; c < d; ++c) o[c] *= a;
      for (int64_t jj = 0; jj < jn; ++jj)
        for (int64_t c = 0; c < d; ++c) o[c] += s[jj] * v[(j0 + jj) * d + c];
    }
    for (int64_t c = 0; c < d; ++c) out[i * d + c] = o[c] / z;
    lse[i] = m + std::log(z);
  }
}

// The hand loop's backward of one head (FlashAttention's, one row at a time): P recomputed from
// lse; dv += P^T g, dS = P (g v^T - rowsum(g * out)), dq = dS k scale, dk += dS^T q scale.
void hand_attention_head_backward(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                  const float* g, float* dq, float* dk, float* dv, int64_t T, int64_t d, float scale,
                                  bool causal) {
  std::fill(dk, dk + T * d, 0.0f);
  std::fill(dv, dv + T * d, 0.0f);
  for (int64_t i = 0; i < T; ++i) {
    float D = 0;
    for (int64_t c = 0; c < d; ++c) D += g[i * d + c] * out[i * d + c];
    for (int64_t c = 0; c < d; ++c) dq[i * d + c] = 0;
    for (int64_t j = 0; j < (causal ? i + 1 : T); ++j) {
      float acc = 0, dp = 0;
      for (int64_t x = 0; x < d; ++x) acc += q[i * d + x] * k[j * d + x];
      const float p = std::exp(acc * scale - lse[i]);
      for (int64_t c = 0; c < d; ++c) dp += g[i * d + c] * v[j * d + c];
      for (int64_t c = 0; c < d; ++c) dv[j * d + c] += p * g[i * d + c];
      const float ds = p * (dp - D) * scale;
      for (int64_t x = 0; x < d; ++x) dq[i * d + x] += ds * k[j * d + x];
      for (int64_t x = 0; x < d; ++x) dk[j * d + x] += ds * q[i * d + x];
    }
  }
}

void attention_case(benchmark::State& state, const AttnShape& a, AttnMode mode, bool backward) {
  const int threads = static_cast<int>(state.range(0));
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
  const int64_t T = a.t;
  const IntList shape{a.batch, a.heads, T, a.d};
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.d));
  if (mode == kHandLoop) {
    const int64_t heads = a.batch * a.heads, n = T * a.d;
    std::vector<float> q = randn(shape, 1).to_vector<float>(), k = randn(shape, 2).to_vector<float>(),
                       v = randn(shape, 3).to_vector<float>(), g = randn(shape, 4).to_vector<float>();
    std::vector<float> out(q.size()), lse(static_cast<size_t>(heads * T)), dq(q.size()), dk(q.size()), dv(q.size());
    for (auto _ : state) {
      bench::split(threads, heads, [&](int64_t lo, int64_t hi) {
        for (int64_t h = lo; h < hi; ++h) {
          hand_attention_head(&q[h * n], &k[h * n], &v[h * n], &out[h * n], &lse[h * T], T, a.d, scale, a.causal);
          if (backward)
            hand_attention_head_backward(&q[h * n], &k[h * n], &v[h * n], &out[h * n], &lse[h * T], &g[h * n], &dq[h * n],
                                         &dk[h * n], &dv[h * n], T, a.d, scale, a.causal);
        }
      });
      benchmark::DoNotOptimize(out.data());
      benchmark::DoNotOptimize(dq.data());
    }
  } else {
    const bool saved = options().fusion;
    options().fusion = mode == kFused || mode == kNode;
    {
      Tensor q = randn(shape, 1).realize(), k = randn(shape, 2).realize(), v = randn(shape, 3).realize(),
             g = randn(shape, 4).realize();
      CompiledFunction step = compile([&](const std::vector<Tensor>& x) {
        const Tensor out = mode == kNode ? attention_node(x[0], x[1], x[2], scale, a.causal)
                                         : nn::functional::scaled_dot_product_attention(x[0], x[1], x[2], {}, a.dropout, a.causal);
        if (!backward) return std::vector<Tensor>{out};
        return grad({(out * x[3]).sum()}, {x[0], x[1], x[2]});
      });
      const std::vector<Tensor> in{q.requires_grad_(backward), k.requires_grad_(backward), v.requires_grad_(backward), g};
      step(in);
      codegen::LlvmJit::instance().wait_background(); // the optimized tier's code is in
      for (auto _ : state) realize(step(in));
      state.counters["kernels"] = static_cast<double>(step.num_kernels());
    }
    options().fusion = saved;
  }
  // the forward's two products; the backward's four more (and the recomputed scores: 5 in all);
  // with causal, only the pairs j <= i count
  const double pairs = a.causal ? static_cast<double>(T * (T + 1) / 2) : static_cast<double>(T * T);
  const double flops = 4.0 * static_cast<double>(a.batch * a.heads) * pairs * static_cast<double>(a.d);
  bench::gflops(state, backward ? 3.5 * flops : flops);
}

// Attention/<T>/<fused|unfused|hand_loop|node>/<forward|backward>/threads:<1|2> (batch 4, 8 heads,
// head dim 64, no mask), Attention/64_causal/... (TransformerBlockStep's and the GPT's attention:
// batch 16, 4 heads, head dim 32, causal) and Attention/256_causal/... (T = 256's shape, causal).
const bool kAttentionRegistered = [] {
  const char* modes[] = {"fused", "unfused", "hand_loop", "node"};
  std::vector<std::pair<std::string, AttnShape>> shapes{{"64_causal", {16, 4, 64, 32, true}}, {"256_causal", {4, 8, 256, 64, true}}};
  for (int64_t T : {256, 512, 1024}) shapes.push_back({std::to_string(T), {4, 8, T, 64, false}});
  shapes.push_back({"64_causal_dropout", {16, 4, 64, 32, true, 0.1}}); // the GPT's, with its dropout
  for (const auto& [label, shape] : shapes)
    for (bool backward : {false, true})
      for (AttnMode mode : {kFused, kUnfused, kHandLoop, kNode}) {
        if (shape.dropout > 0 && (mode == kHandLoop || mode == kNode)) continue; // (they draw no mask)
        const std::string name = "Attention/" + label + "/" + modes[mode] + (backward ? "/backward" : "/forward");
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) { attention_case(s, shape, mode, backward); })
            ->ArgNames({"threads"})
            ->Arg(1)
            ->Arg(2)
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
  return true;
}();

} // namespace

// kiln's GPU runtime (runtime/cuda_runtime.h, Tensor::to, Module::to, the executor's CUDA
// plans) run end to end against kiln's CPU emulator of the CUDA driver API
// (tests/cuda_emu): device memory the host cannot dereference, a stream whose work
// completes after the calls return, kernels compiled from the emitted CUDA source behind
// tests/cuda_emu/cuda_shim.h. Results must equal the CPU path's bitwise (both emitters keep one
// arithmetic order, see codegen/cuda_emitter.h). No GPU is involved; what only a GPU can
// show (speed) is bench/gpu_check.sh's job. On a machine with a GPU the same tests run
// against the real driver with KILN_CUDA_DRIVER=libcuda.so.1 (the few that need the
// emulator's controls skip there).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <dlfcn.h>
#include <unistd.h>

#include <fstream>
#include <mutex>

#include "codegen/cuda_emitter.h"
#include "codegen/disk_cache.h"
#include "codegen/nvrtc.h"
#include "graph/node.h"
#include "error_of.h"
#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/devices.h"
#include "kiln/functional.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/options.h"
#include "runtime/cuda_runtime.h"
#include "runtime/executor.h"
#include "runtime/storage.h"

namespace kiln {
namespace {

namespace F = nn::functional;

// The emulator stands in for libcuda.so.1 before anything probes the driver, unless
// KILN_CUDA_DRIVER names a driver already.
const bool kUseEmulator = (setenv("KILN_CUDA_DRIVER", KILN_CUDA_EMU, 0), true);

bool on_emulator() { return runtime::Gpu::get(0).emulator(); }

const Device kGpu{Device::Kind::CUDA, 0};

template <class T> void expect_bitwise(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[i], &b[i], sizeof(T)), 0) << what << " element " << i << ": " << a[i] << " vs " << b[i];
}

/// Runs f on CPU inputs and on the same inputs moved to the GPU; the outputs must agree bitwise.
void expect_same_on_gpu(const std::vector<Tensor>& cpu_inputs,
                        const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::string& what) {
  std::vector<Tensor> gpu_inputs;
  for (const Tensor& t : cpu_inputs) gpu_inputs.push_back(t.to(kGpu));
  const Tensor on_cpu = f(cpu_inputs), on_gpu = f(gpu_inputs);
  EXPECT_EQ(on_gpu.device(), kGpu) << what;
  if (on_cpu.dtype() == kInt64) expect_bitwise(on_gpu.to_vector<int64_t>(), on_cpu.to_vector<int64_t>(), what);
  else expect_bitwise(on_gpu.to_vector<float>(), on_cpu.to_vector<float>(), what);
}

TEST(GpuRuntime, TheDeviceIsUsable) {
  ASSERT_EQ(cuda_unavailable_reason(), "");
  ASSERT_GE(cuda_devices().size(), 1u);
  EXPECT_EQ(resolve_device("cuda"), kGpu);
  EXPECT_EQ(resolve_device("auto"), kGpu);
  if (std::getenv("KILN_CUDA_DRIVER") == std::string(KILN_CUDA_EMU)) {
    EXPECT_EQ(cuda_devices()[0].name, "kiln CUDA emulator (CPU)");
    EXPECT_TRUE(on_emulator());
  }
}

// Scalar constants are kernel parameters on the GPU too: a graph that differs only in them reuses
// the plan and its loaded kernel, with the new values, and gives the CPU's bits.
TEST(GpuRuntime, NewScalarConstantsReuseThePlanWithTheirValues) {
  const Tensor x = randn({3, 50}, 17).realize(), xg = x.to(kGpu);
  auto f = [](const Tensor& t, double a, double b) { return sigmoid(t * a) + (t - b) * b; };
  (void)f(xg, 0.5, 3.0).to(kCPU).to_vector<float>();
  for (const auto& [a, b] : std::vector<std::pair<double, double>>{{-2.25, 1e-3}, {7.5, -1.5}}) {
    const auto before = runtime::executor_stats();
    const std::vector<float> got = f(xg, a, b).to(kCPU).to_vector<float>();
    const auto after = runtime::executor_stats();
    EXPECT_EQ(after.plan_reuses - before.plan_reuses, 1u);
    EXPECT_EQ(after.compiles, before.compiles);
    expect_bitwise(got, f(x, a, b).to_vector<float>(), "constants " + std::to_string(a) + ", " + std::to_string(b));
  }
}

TEST(GpuRuntime, LazyClassIndicesAreCheckedInTheGpuKernel) {
  const Tensor logits = randn({3, 7}, 5).to(kGpu);
  const Tensor good = (from_vector<int64_t>({1, 6, 0}).to(kGpu) + 1) - 1; // lazy: computed on the GPU
  expect_bitwise(F::cross_entropy(logits, good).to(kCPU).to_vector<float>(),
                 F::cross_entropy(logits.to(kCPU), from_vector<int64_t>({1, 6, 0})).to_vector<float>(), "in range");
  for (int64_t bad : {int64_t{7}, int64_t{-3}}) {
    const Tensor targets = (from_vector<int64_t>({1, bad, 0}).to(kGpu) + 1) - 1;
    const int line = __LINE__ + 1;
    const Tensor loss = F::cross_entropy(logits, targets);
    try {
      (void)loss.to(kCPU);
      ADD_FAILURE() << "target " << bad << " was not reported";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.op(), "cross_entropy") << msg;
      EXPECT_NE(msg.find("target " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("[0, 7)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("test_gpu_runtime.cpp:" + std::to_string(line)), std::string::npos) << msg;
    }
  }
}

TEST(GpuRuntime, CopiesRoundTrip) {
  const Tensor x = randn({3, 5}, 1).realize();
  const Tensor g = x.to(kGpu);
  EXPECT_EQ(g.device(), kGpu);
  EXPECT_EQ(g.node()->realized()->device(), kGpu);
  expect_bitwise(g.to_vector<float>(), x.to_vector<float>(), "to(cuda)");
  const Tensor back = g.to(kCPU);
  EXPECT_EQ(back.device(), kCPU);
  expect_bitwise(back.to_vector<float>(), x.to_vector<float>(), "to(cpu)");
  EXPECT_EQ(g.to(kGpu).node(), g.node()); // already there: the same tensor
  const std::vector<int64_t> ints = {1, -2, 3};
  EXPECT_EQ(from_vector(ints).to(kGpu).to_vector<int64_t>(), ints);
}

// KILN_TRACE on a GPU: kernels and copies get device-time spans (from CUDA events) on
// the GPU's own track, besides the host's launch spans.
TEST(GpuRuntime, TraceHasADeviceTimeTrack) {
  const std::string path = testing::TempDir() + "kiln_gpu_trace.json";
  const Tensor x = randn({64, 32}, 1).realize();
  profile::start_trace(path);
  const Tensor g = x.to(kGpu);
  const std::vector<float> out = (exp(g * 2.0) + 1.0).sum({1}).to_vector<float>();
  profile::stop_trace();
  EXPECT_EQ(out.size(), 64u);
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("\"cuda:0 (device time)\""), 1u) << text; // the track's name
  EXPECT_GE(count("\"cat\":\"gpu\""), 1u) << text;          // kernels in device time
  EXPECT_GE(count("\"cat\":\"launch\""), count("\"cat\":\"gpu\"")) << text;
  EXPECT_GE(count("\"name\":\"upload "), 1u) << text;        // the host -> device copy on the device track
}

TEST(GpuRuntime, ElementwiseAndReductionsMatchTheCpuBitwise) {
  const Tensor x = randn({33, 70}, 2), y = rand({33, 70}, 3); // generated on each device
  expect_same_on_gpu({x, y}, [](const std::vector<Tensor>& t) { return exp(t[0] * 2.0 + t[1]) * sigmoid(t[1]) - tanh(t[0]); },
                     "fused elementwise");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return t[0].sum({1}); }, "sum over rows");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return t[0].max({0}); }, "max over columns");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return t[0].argmax(1); }, "argmax");
}

TEST(GpuRuntime, RowKernelsAndMatmulMatchTheCpuBitwise) {
  const Tensor x = randn({40, 96}, 4), w = randn({96, 48}, 5), b = randn({48}, 6);
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return F::softmax(t[0], 1); }, "softmax");
  expect_same_on_gpu({x, w, b}, [](const std::vector<Tensor>& t) { return relu(matmul(t[0], t[1]) + t[2]); }, "matmul + bias + relu");
}

// Scaled dot-product attention on the GPU runs the fused attention kernels (the attention form's
// CUDA kernels), forward and backward (L * S = 512 * 512, so the backward is fused too:
// kFusedBackwardMinWeights in frontend/src/transformer.cpp), and gives the CPU's bits: causal, and
// with an additive float mask; e != ev, several batch points.
TEST(GpuRuntime, FusedAttentionAndItsGradientsMatchTheCpuBitwise) {
  const Tensor q = randn({2, 512, 16}, 40).realize(), k = randn({2, 512, 16}, 41).realize();
  const Tensor v = randn({2, 512, 24}, 42).realize(), mask = randn({512, 512}, 43).realize();
  for (bool causal : {true, false}) {
    auto run = [&](Device d) {
      std::vector<Tensor> in{q.to(d).detach(), k.to(d).detach(), v.to(d).detach()};
      for (Tensor& t : in) t.requires_grad_();
      const Tensor out = F::scaled_dot_product_attention(in[0], in[1], in[2], causal ? Tensor() : mask.to(d), 0, causal);
      EXPECT_EQ(out.node()->op, graph::OpKind::Attention) << d.str();
      std::vector<std::vector<float>> r{out.to(kCPU).to_vector<float>()};
      for (const Tensor& g : grad({(out * out).sum()}, in)) {
        EXPECT_EQ(g.device(), d);
        r.push_back(g.to(kCPU).to_vector<float>());
      }
      return r;
    };
    const auto cpu = run(kCPU), gpu = run(kGpu);
    for (size_t i = 0; i < cpu.size(); ++i)
      expect_bitwise(gpu[i], cpu[i], std::string(causal ? "causal " : "float mask ") + (i == 0 ? "out" : "gradient " + std::to_string(i - 1)));
  }
}

// With fusion off the composite runs (with it on, a causal attention that gradients flow through is
// the fused pair): its causal mask is built on q's device, and its results are the CPU's bitwise too.
TEST(GpuRuntime, CompositeCausalAttentionMatchesTheCpuBitwise) {
  const Tensor q = randn({2, 40, 8}, 44).realize(), k = randn({2, 50, 8}, 45).realize(), v = randn({2, 50, 8}, 46).realize();
  struct FusionOff {
    bool saved = options().fusion;
    FusionOff() { options().fusion = false; }
    ~FusionOff() { options().fusion = saved; }
  } off;
  auto run = [&](Device d) {
    std::vector<Tensor> in{q.to(d).detach(), k.to(d).detach(), v.to(d).detach()};
    for (Tensor& t : in) t.requires_grad_();
    const Tensor out = F::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0, true);
    EXPECT_NE(out.node()->op, graph::OpKind::Attention) << d.str();
    std::vector<std::vector<float>> r{out.to(kCPU).to_vector<float>()};
    for (const Tensor& g : grad({(out * out).sum()}, in)) r.push_back(g.to(kCPU).to_vector<float>());
    return r;
  };
  const auto cpu = run(kCPU), gpu = run(kGpu);
  for (size_t i = 0; i < cpu.size(); ++i) expect_bitwise(gpu[i], cpu[i], "composite causal " + std::to_string(i));
}

// The indexing ops (kiln/indexops.h) and floor/ceil/round: gather as an indexed load fused into
// elementwise work, scatter_add (a masked sum) and index_add (a one-hot GEMM), cumsum, and an
// Embedding's forward and weight gradient, bitwise the CPU's; a lazy bad index is reported.
TEST(GpuRuntime, IndexOpsMatchTheCpuBitwise) {
  const Tensor x = randn({33, 70}, 7), src = randn({40, 70}, 8);
  const Tensor i = from_vector<int64_t>(std::vector<int64_t>(33 * 20, 3), {33, 20}) + arange(20).reshape({1, 20}) * 3;
  const Tensor rows = from_vector<int64_t>({5, 0, 32, 5, 7});
  std::vector<int64_t> targets(40 * 70);
  for (size_t k = 0; k < targets.size(); ++k) targets[k] = static_cast<int64_t>(k * 7 % 33); // many repeats per row
  const Tensor hit = from_vector<int64_t>(targets, {40, 70});
  expect_same_on_gpu({x, i}, [](const std::vector<Tensor>& t) { return exp(gather(t[0] * 0.5, 1, t[1] + 1 - 1)) - 1.0; }, "gather");
  expect_same_on_gpu({x, rows}, [](const std::vector<Tensor>& t) { return index_select(t[0], 0, t[1]); }, "index_select");
  expect_same_on_gpu({x, hit, src}, [](const std::vector<Tensor>& t) { return scatter_add(t[0], 0, t[1], t[2]); }, "scatter_add");
  expect_same_on_gpu({x, rows, src}, [](const std::vector<Tensor>& t) { return index_add(t[0], 0, t[1], t[2].slice(0, 0, 5)); },
                     "index_add");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return cumsum(t[0], 1) + cumsum(t[0], 0); }, "cumsum");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return floor(t[0] * 3.0) + ceil(t[0]) + round(t[0] * 2.0); },
                     "floor, ceil, round");
  const Tensor bad = (from_vector<int64_t>({1, 70}, {1, 2}).to(kGpu) + 1) - 1;
  const Tensor y = gather(x.to(kGpu), 1, bad);
  try {
    (void)y.to(kCPU);
    ADD_FAILURE() << "index 70 was not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "gather") << e.what();
    EXPECT_NE(std::string(e.what()).find("index 70"), std::string::npos) << e.what();
  }
}

// sort, argsort and topk (the argsort kernel: a thread per key on the GPU, a merge sort on the CPU):
// values, indices and the values' gradient bitwise the CPU's, ties, NaN and -0.0 included, along the
// last dim and dim 0, rows longer than a block of threads.
TEST(GpuRuntime, SortMatchesTheCpuBitwise) {
  std::vector<float> v(37 * 300);
  for (size_t k = 0; k < v.size(); ++k) v[k] = k % 97 == 5 ? NAN : k % 89 == 3 ? -0.0f : static_cast<float>((k * 7919) % 41) - 20;
  const Tensor x = from_vector(v, {37, 300});
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return argsort(t[0], 1); }, "argsort");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return argsort(t[0] * 2.0, 0, true); }, "argsort of a computed value");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return exp(sort(t[0], 1, true).first * 0.1); }, "sorted values");
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return topk(t[0], 5, 0, false).second; }, "topk indices");
  auto grad_on = [&](Device d) {
    const Tensor leaf = x.to(d).detach().requires_grad_();
    const Tensor w = arange(0, 5 * 300, 1, kFloat32, d).reshape({5, 300});
    return grad({(topk(leaf, 5, 0).first * w).sum()}, {leaf})[0].to(kCPU).to_vector<float>();
  };
  expect_bitwise(grad_on(kGpu), grad_on(kCPU), "topk's gradient");
}

TEST(GpuRuntime, EmbeddingTrainingStepMatchesTheCpuBitwise) {
  auto run = [](Device d) {
    nn::manual_seed(9);
    nn::Embedding e(50, 16, 0);
    e.to(d);
    const Tensor ids = from_vector<int64_t>({3, 0, 49, 3, 7, 3, 12, 0}).to(d);
    const Tensor up = randn({8, 16}, 10).to(d);
    (e(ids) * up).sum().backward();
    return std::make_pair(e(ids).to(kCPU).to_vector<float>(), e.weight.grad().to(kCPU).to_vector<float>());
  };
  const auto cpu = run(kCPU), gpu = run(kGpu);
  expect_bitwise(gpu.first, cpu.first, "embedding rows");
  expect_bitwise(gpu.second, cpu.second, "embedding weight gradient");
}

TEST(GpuRuntime, GridsAreCappedByTheDeviceAndStillCoverTheWork) {
  const Tensor x = randn({1 << 20}, 12).realize();
  const Tensor y = x.to(kGpu) * 2.0 + 1.0;
  const runtime::Plan plan = runtime::make_plan({y.node()});
  ASSERT_EQ(plan.schedule.launches.size(), 1u);
  const codegen::KernelLaunch& l = plan.schedule.launches[0];
  EXPECT_EQ(codegen::cuda_launch_config(l.kernel, l.params).grid, 1024u); // vector form: 4 points a thread
  const DeviceInfo& d = runtime::Gpu::get(0).info(); // the emulator: 4 SMs of 2048 threads, 256 blocks
  const int64_t waves = codegen::kMaxWaves * d.sm_count * (d.max_threads_per_sm / 256);
  EXPECT_EQ(codegen::cuda_launch_config(l.kernel, l.params, {d.sm_count, d.max_threads_per_sm}).grid,
            static_cast<unsigned>(std::min<int64_t>(1024, waves)));
  expect_same_on_gpu({x}, [](const std::vector<Tensor>& t) { return t[0] * 2.0 + 1.0; }, "16 points a thread");
  expect_same_on_gpu({x.reshape({1 << 10, 1 << 10}).slice(1, 1, 1023)}, // rows of 1022: the scalar form
                     [](const std::vector<Tensor>& t) { return t[0] * 2.0 + 1.0; }, "scalar form, capped");
}

TEST(GpuRuntime, ConstantsFollowTheirOperandsAndMixingDevicesIsAnError) {
  const Tensor g = randn({4}, 7).to(kGpu).realize();
  EXPECT_EQ((g + ones({4})).device(), kGpu); // a constant has no data: it moves to the GPU
  EXPECT_EQ((3.0 * g).device(), kGpu);
  EXPECT_EQ((ones({4}) - g).device(), kGpu);
  const Tensor c = randn({4}, 8).realize();
  try {
    (void)(c + g);
    FAIL() << "adding tensors on two devices did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("add"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[4] on cpu"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32[4] on cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_gpu_runtime.cpp"), std::string::npos) << msg; // the user's line
  }
  EXPECT_THROW((void)matmul(c.reshape({1, 4}), g.reshape({4, 1})), Error);
  EXPECT_EQ(zeros({2}, kFloat32, kGpu).device(), kGpu);
  EXPECT_EQ(zeros_like(g).device(), kGpu);
}

TEST(GpuRuntime, EveryLayerRejectsMixedDevicesWithAKilnError) {
  const Tensor xg = randn({2, 3, 6, 6}, 30).realize().to(kGpu), wc = randn({4, 3, 3, 3}, 31).realize();
  const Tensor logits = randn({5, 4}, 32).realize().to(kGpu);
  const Tensor targets = from_vector(std::vector<int64_t>{0, 1, 2, 3, 0});
  const Tensor vc = randn({5, 4}, 33).realize(), bc = randn({4}, 34).realize();
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"conv2d", [&] { (void)F::conv2d(xg, wc, Tensor(), {1, 1}, {1, 1}, {1, 1}, 1); }},
      {"linear", [&] { (void)F::linear(logits, randn({3, 4}, 35).realize(), bc); }},
      {"cross_entropy", [&] { (void)F::cross_entropy(logits, targets); }},
      {"nll_loss", [&] { (void)F::nll_loss(F::log_softmax(logits, 1), targets); }},
      {"mse_loss", [&] { (void)F::mse_loss(logits, vc); }},
      {"bce", [&] { (void)F::binary_cross_entropy_with_logits(logits, vc); }},
      {"layer_norm", [&] { (void)F::layer_norm(logits, {4}, bc, bc); }},
      {"batch_norm", [&] { (void)F::batch_norm(logits, zeros({4}).realize(), ones({4}).realize(), bc, bc, false); }},
      {"where", [&] { (void)where(logits > 0.0, vc, logits); }},
      {"concat", [&] { (void)concat({logits, vc}, 0); }},
      {"assign", [&] { Tensor t = vc.detach(); t.assign(logits + 1.0); }}, // a copy, not an error
  };
  for (const auto& [name, call] : calls) {
    if (name == "assign") {
      EXPECT_NO_THROW(call()) << name;
      continue;
    }
    EXPECT_THROW(call(), Error) << name;
  }
}

TEST(GpuRuntime, NoDeviceSaysSo) {
  const auto to_missing = [] { (void)randn({2}, 1).to(Device{Device::Kind::CUDA, 3}); };
  test::expect_error_at(to_missing, "test_gpu_runtime.cpp", __LINE__ - 1, "to", {"no CUDA device cuda:3"});
  test::expect_no_kiln_line(test::error_of(to_missing));
  const auto zeros_missing = [] { (void)zeros({2}, kFloat32, Device{Device::Kind::CUDA, 1}); };
  test::expect_error_at(zeros_missing, "test_gpu_runtime.cpp", __LINE__ - 1, "zeros", {"no CUDA device cuda:1"});
  test::expect_no_kiln_line(test::error_of(zeros_missing));
}

TEST(GpuRuntime, TheCachingAllocatorReusesFreedBlocks) {
  runtime::Gpu& gpu = runtime::Gpu::get(0);
  const Tensor x = randn({1000}, 9).to(kGpu);
  { (void)((x * 2.0).realize()); } // its result is freed here
  const size_t fresh = gpu.memory_stats().fresh_allocations;
  EXPECT_GT(gpu.memory_stats().bytes_cached, 0u);
  for (int i = 0; i < 5; ++i) (void)((x * 3.0).to_vector<float>());
  EXPECT_EQ(gpu.memory_stats().fresh_allocations, fresh); // every result reused a cached block
  gpu.release_cached_memory();
  EXPECT_EQ(gpu.memory_stats().bytes_cached, 0u);
}

TEST(GpuRuntime, OutOfDeviceMemoryFreesTheCacheThenSaysSo) {
  if (!on_emulator()) GTEST_SKIP() << "needs the emulator's KILN_EMU_MEMORY";
  runtime::Gpu& gpu = runtime::Gpu::get(0);
  gpu.release_cached_memory();
  const size_t in_use = gpu.memory_stats().bytes_in_use;
  setenv("KILN_EMU_MEMORY", std::to_string(in_use + (64 << 20)).c_str(), 1); // 64 MiB beyond what is held
  { auto a = gpu.allocate(40 << 20); } // cached after this
  EXPECT_GT(gpu.memory_stats().bytes_cached, 0u);
  auto b = gpu.allocate(50 << 20); // fits only once the cached 40 MiB went back to the driver
  EXPECT_EQ(gpu.memory_stats().bytes_cached, 0u);
  try {
    auto c = gpu.allocate(100 << 20);
    FAIL() << "allocated beyond the device's memory";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory on cuda:0"), std::string::npos) << e.what();
  }
  unsetenv("KILN_EMU_MEMORY");
}

TEST(GpuRuntime, ReadsWaitForQueuedWork) {
  setenv("KILN_EMU_DELAY_US", "20000", 1); // every queued operation runs 20 ms late
  const Tensor x = arange(0, 256, 1, kFloat32).to(kGpu);
  const std::vector<float> y = (x * 2.0 + 1.0).to_vector<float>();
  unsetenv("KILN_EMU_DELAY_US");
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], 2.0f * static_cast<float>(i) + 1.0f) << i;
}

/// The emulator's count of synchronizations (stream, context and event waits, synchronous copies).
unsigned long long emulator_syncs() {
  void* h = dlopen(KILN_CUDA_EMU, RTLD_NOW | RTLD_NOLOAD);
  auto counters = h ? reinterpret_cast<void (*)(unsigned long long*)>(dlsym(h, "kilnEmuCounters")) : nullptr;
  unsigned long long c[6] = {};
  if (counters) counters(c);
  if (h) dlclose(h);
  return c[5];
}

TEST(GpuRuntime, OnlyReadsSynchronize) {
  if (!on_emulator()) GTEST_SKIP() << "counts the emulator's synchronizations";
  const Tensor x = randn({4096}, 14).realize();
  const unsigned long long before = emulator_syncs();
  const Tensor y = (x.to(kGpu) * 2.0).realize(); // an upload and a launch: both queued
  EXPECT_EQ(emulator_syncs(), before);
  (void)y.to_vector<float>(); // the read waits
  EXPECT_GT(emulator_syncs(), before);
}

TEST(GpuRuntime, LaunchBlockingWaitsForEachKernel) {
  options().launch_blocking = true;
  const Tensor x = randn({64}, 10).to(kGpu);
  const auto launches = runtime::executor_stats().launches;
  const std::vector<float> y = (abs(x) + 1.0).to_vector<float>();
  options().launch_blocking = false;
  EXPECT_GT(runtime::executor_stats().launches, launches);
  for (float v : y) EXPECT_GE(v, 1.0f);
}

TEST(GpuRuntime, GradientsFlowThroughTo) {
  const Tensor x = randn({5}, 11).requires_grad_();
  const Tensor loss = (x.to(kGpu) * x.to(kGpu) * 3.0).sum();
  EXPECT_EQ(loss.device(), kGpu);
  loss.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), kCPU);
  const std::vector<float> xv = x.to_vector<float>(), gv = x.grad().to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(gv[i], 6 * xv[i]);
}

/// A small MLP trained a few compiled Adam steps on `device`; returns the losses and the
/// final first-layer weight.
std::pair<std::vector<float>, std::vector<float>> train_mlp(Device device) {
  nn::manual_seed(21);
  nn::Sequential model(nn::Linear(20, 16), nn::ReLU(), nn::Linear(16, 4));
  model.to(device);
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  CompiledFunction step = compile([&](const std::vector<Tensor>& xy) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model(xy[0]), xy[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  std::vector<float> losses;
  const Tensor x = randn({8, 20}, 100).realize().to(device); // one batch, learned step by step
  const Tensor y = (rand({8}, 200) * 4.0).to(kInt64).realize().to(device);
  for (int s = 0; s < 4; ++s) losses.push_back(step({x, y})[0].item<float>());
  return {losses, model.parameters()[0].to_vector<float>()};
}

// Anomaly mode (kiln/anomaly.h) on a GPU: outputs are copied back after the kernel and the
// culprit's ops re-run on the GPU; the report equals the CPU's.
TEST(GpuRuntime, AnomalyModeNamesTheOpOnTheGpu) {
  const detect_anomaly on;
  const Tensor x = from_vector<float>({3, 4, 1, 5}).to(kGpu);
  const std::vector<float> fine = (log(x) * 2).to_vector<float>(); // finite: no report, CPU bits
  expect_bitwise(fine, (log(from_vector<float>({3, 4, 1, 5})) * 2).to_vector<float>(), "anomaly mode on the GPU");
  const int line = __LINE__ + 2;
  try {
    (log(x - 2) * 2 + 1).to_vector<float>();
    ADD_FAILURE() << "no AnomalyError";
  } catch (const AnomalyError& e) {
    EXPECT_EQ(e.anomaly().op, "log") << e.what();
    EXPECT_EQ(e.anomaly().index, (std::vector<int64_t>{2}));
    EXPECT_EQ(e.anomaly().line, "test_gpu_runtime.cpp:" + std::to_string(line));
  }
  Tensor w = from_vector<float>({0, 4}).to(kGpu);
  w.requires_grad_();
  const int forward = __LINE__ + 1;
  const Tensor loss = sqrt(w).sum();
  try {
    loss.backward();
    w.grad().realize();
    ADD_FAILURE() << "no AnomalyError";
  } catch (const AnomalyError& e) {
    EXPECT_EQ(e.anomaly().gradient_of, "sqrt") << e.what();
    EXPECT_EQ(e.anomaly().line, "test_gpu_runtime.cpp:" + std::to_string(forward));
  }
  const int traced = __LINE__ + 1;
  auto step = compile([](const std::vector<Tensor>& a) { return std::vector<Tensor>{sqrt(a[0]).sum()}; });
  EXPECT_EQ(step({x})[0].item<float>(), step({x})[0].item<float>()); // finite: replays pass
  try {
    step({x - 3});
    ADD_FAILURE() << "no AnomalyError";
  } catch (const AnomalyError& e) {
    EXPECT_EQ(e.anomaly().op, "sqrt") << e.what();
    EXPECT_EQ(e.anomaly().index, (std::vector<int64_t>{2})); // sqrt(1 - 3)
    EXPECT_EQ(e.anomaly().line, "test_gpu_runtime.cpp:" + std::to_string(traced));
  }
}

TEST(GpuRuntime, CompiledAdamTrainingMatchesTheCpuBitwise) {
  const auto [cpu_losses, cpu_w] = train_mlp(kCPU);
  const auto [gpu_losses, gpu_w] = train_mlp(kGpu);
  expect_bitwise(gpu_losses, cpu_losses, "losses");
  expect_bitwise(gpu_w, cpu_w, "trained weight");
  EXPECT_LT(cpu_losses.back(), cpu_losses.front());
}

/// Loss and every parameter's gradient of one step of a small CNN on `device`.
std::vector<std::vector<float>> cnn_step(Device device) {
  nn::manual_seed(41);
  nn::Sequential model(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2),
                       nn::Flatten(), nn::Linear(4 * 4 * 4, 3));
  model.to(device);
  const Tensor x = randn({2, 1, 8, 8}, 42).realize().to(device);
  const Tensor y = from_vector(std::vector<int64_t>{2, 0}).to(device);
  Tensor loss = F::cross_entropy(model(x), y);
  loss.backward();
  std::vector<std::vector<float>> out{loss.to_vector<float>()};
  for (const Tensor& p : model.parameters()) out.push_back(p.grad().to_vector<float>());
  for (const Tensor& b : model.buffers())
    if (is_floating(b.dtype())) out.push_back(b.to_vector<float>()); // batch norm's running statistics
  return out;
}

TEST(GpuRuntime, ConvolutionBatchNormAndPoolingGradientsMatchTheCpuBitwise) {
  const auto cpu = cnn_step(kCPU), gpu = cnn_step(kGpu);
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) expect_bitwise(gpu[i], cpu[i], "value " + std::to_string(i));
}

TEST(GpuRuntime, CubinsAreCachedOnDiskAndCorruptEntriesRecompiled) {
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC is unavailable: " << why;
  const Tensor y = randn({64}, 13).to(kGpu) * 2.0;
  const runtime::Plan plan = runtime::make_plan({y.node()});
  const codegen::Kernel& k = plan.schedule.launches.at(0).kernel;
  const std::string source = codegen::emit_cuda(k);
  const std::string dir = (std::filesystem::temp_directory_path() / ("kiln_cubin_" + std::to_string(getpid()))).string();
  std::mutex mu;
  codegen::DiskCache first(".cubin");
  first.open(dir);
  const runtime::CudaBinary compiled = runtime::cuda_binary(source, k.name + ".cu", "sm_90", first, mu);
  EXPECT_FALSE(compiled.from_disk);
  EXPECT_EQ(compiled.image.substr(0, 4), "\x7f" "ELF"); // a CUBIN is an ELF file
  codegen::DiskCache second(".cubin"); // as a later process would
  second.open(dir);
  const runtime::CudaBinary cached = runtime::cuda_binary(source, k.name + ".cu", "sm_90", second, mu);
  EXPECT_TRUE(cached.from_disk);
  EXPECT_EQ(cached.image, compiled.image);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) // flip one byte of every entry
    if (entry.path().extension() == ".cubin") {
      std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-1, std::ios::end);
      f.put('\x5a');
    }
  codegen::DiskCache third(".cubin");
  third.open(dir);
  const runtime::CudaBinary recompiled = runtime::cuda_binary(source, k.name + ".cu", "sm_90", third, mu);
  EXPECT_FALSE(recompiled.from_disk);
  EXPECT_EQ(third.rejects, 1u);
  EXPECT_EQ(recompiled.image, compiled.image);
  std::filesystem::remove_all(dir);
}

TEST(GpuRuntime, CheckpointsOfAGpuModelLoadIntoAGpuModel) {
  const std::string path = (std::filesystem::temp_directory_path() / "kiln_gpu_ckpt.safetensors").string();
  nn::manual_seed(5);
  nn::Linear a(6, 3);
  a.to(kGpu);
  checkpoint::save(path, a);
  nn::manual_seed(6);
  nn::Linear b(6, 3);
  b.to(kGpu);
  checkpoint::load(path, b);
  EXPECT_EQ(b.parameters()[0].device(), kGpu);
  expect_bitwise(b.parameters()[0].to_vector<float>(), a.parameters()[0].to_vector<float>(), "loaded weight");
  std::filesystem::remove(path);
}

} // namespace
} // namespace kiln

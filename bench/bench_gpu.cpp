// GPU benchmarks (kiln's CUDA runtime, runtime/cuda_runtime.h), run on cuda:0:
//   Gpu/Copy/N                 device-to-device copy of N floats (Gpu::copy): the bandwidth ceiling
//   Gpu/Elementwise8/N         bench_fusion's 8-op chain y = sigmoid(relu((x*1.5 + 0.5)*x - 0.25)) * x + 1.0
//   Gpu/Softmax/RxC            row softmax (bench_fusion's shape, and one four times the H200's L2)
//   Gpu/Sgemm/n                kiln matmul of two n x n f32 tensors
//   Gpu/CublasSgemm/n          cuBLAS cublasSgemm_v2 on the same sizes (the ceiling kiln's GEMM is judged by)
//   Gpu/NvrtcColdCompile/MLPStep/B  NVRTC compile time of every kernel of one MLP training step
//   Gpu/Attention/fused:F/T:T/BH:B  scaled_dot_product_attention forward and backward (dq, dk, dv for a
//                              given dout), B batch points x heads (32: batch 4, 8 heads), head dim 64,
//                              causal, f32: F 1 the fused kernels (the attention form), F 0 the composite
//                              (built with fusion off, run with it on); counter `fused` says which ran
// The kernels run from a Plan made once (runtime::make_plan) and executed per iteration;
// each iteration is timed with CUDA events on the Gpu's stream (Gpu::time_ms, manual time),
// so host-side launch cost only counts where it keeps the GPU idle. bytes_per_second
// counts the bytes a fused implementation must move (inputs read once, outputs written
// once; a copy reads and writes N floats), FLOP/s counts 2 n^3 per GEMM. Ratios between
// benchmarks of one run (bench/gpu_check.sh computes them) are what to read.
//
// Registered at static initialization, only where CUDA is usable
// (kiln::cuda_unavailable_reason() is ""); otherwise one Gpu/Unavailable benchmark says
// why. Under kiln's CPU emulator of the driver (KILN_CUDA_DRIVER=.../libkiln_cuda_emu.so)
// the same benchmarks are registered with tiny sizes: a smoke test that they run, whose
// numbers mean nothing.

#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/lower.h"
#include "codegen/nvrtc.h"
#include "bench/mlp.h"
#include "graph/node.h"
#include "kiln/kiln.h"
#include "kiln/options.h"
#include "runtime/cuda_runtime.h"
#include "runtime/executor.h"

namespace {

using namespace kiln;
using runtime::Gpu;

constexpr Device kGpu{Device::Kind::CUDA, 0};

void report_bytes(benchmark::State& state, double bytes_per_iter) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes_per_iter * static_cast<double>(state.iterations())));
}

void report_flops(benchmark::State& state, double flops_per_iter) {
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Runs `body(state)`; a kiln::Error (or any exception) skips the benchmark with its message.
template <class Body> void guarded(benchmark::State& state, Body body) {
  try {
    body(state);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// Executes `plan` once per iteration, each timed on the GPU's stream. One untimed
// execution first (module loading, allocator warm-up).
void replay(benchmark::State& state, Gpu& gpu, const runtime::Plan& plan) {
  std::vector<std::shared_ptr<graph::Storage>> out = runtime::execute(plan);
  gpu.synchronize();
  for (auto _ : state) {
    const double ms = gpu.time_ms([&] { out = runtime::execute(plan); });
    state.SetIterationTime(ms / 1e3);
  }
  gpu.synchronize();
}

Tensor elementwise8(const Tensor& x) { return sigmoid(relu((x * 1.5 + 0.5) * x - 0.25)) * x + 1.0; }

Tensor softmax_rows(const Tensor& x) {
  Tensor e = exp(x - x.max({1}, true));
  return e / e.sum({1}, true);
}

void GpuCopy(benchmark::State& state) {
  guarded(state, [](benchmark::State& state) {
    Gpu& gpu = Gpu::get(0);
    const size_t bytes = static_cast<size_t>(state.range(0)) * sizeof(float);
    const Tensor x = rand({state.range(0)}, 1, kFloat32, kGpu).realize(); // initialized source
    const void* src = x.node()->realized()->data();
    const std::shared_ptr<graph::Storage> dst = gpu.allocate(bytes);
    gpu.copy(dst->data(), src, bytes);
    gpu.synchronize();
    for (auto _ : state) {
      const double ms = gpu.time_ms([&] { gpu.copy(dst->data(), src, bytes); });
      state.SetIterationTime(ms / 1e3);
    }
    report_bytes(state, 2.0 * static_cast<double>(bytes));
  });
}

void GpuElementwise8(benchmark::State& state) {
  guarded(state, [](benchmark::State& state) {
    Gpu& gpu = Gpu::get(0);
    const int64_t n = state.range(0);
    const Tensor x = rand({n}, 1, kFloat32, kGpu).realize();
    const runtime::Plan plan = runtime::make_plan({elementwise8(x).node()});
    replay(state, gpu, plan);
    state.counters["kernels"] = static_cast<double>(plan.schedule.launches.size());
    report_bytes(state, 2.0 * static_cast<double>(n) * sizeof(float));
  });
}

void GpuSoftmax(benchmark::State& state) {
  guarded(state, [](benchmark::State& state) {
    Gpu& gpu = Gpu::get(0);
    const int64_t rows = state.range(0), cols = state.range(1);
    const Tensor x = randn({rows, cols}, 2, kFloat32, kGpu).realize();
    const runtime::Plan plan = runtime::make_plan({softmax_rows(x).node()});
    replay(state, gpu, plan);
    state.counters["kernels"] = static_cast<double>(plan.schedule.launches.size());
    report_bytes(state, 2.0 * static_cast<double>(rows * cols) * sizeof(float));
  });
}

void GpuSgemm(benchmark::State& state) {
  guarded(state, [](benchmark::State& state) {
    Gpu& gpu = Gpu::get(0);
    const int64_t n = state.range(0);
    const Tensor a = randn({n, n}, 21, kFloat32, kGpu), b = randn({n, n}, 22, kFloat32, kGpu);
    realize({a, b});
    const runtime::Plan plan = runtime::make_plan({matmul(a, b).node()});
    replay(state, gpu, plan);
    state.counters["kernels"] = static_cast<double>(plan.schedule.launches.size());
    report_flops(state, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n));
  });
}

// ---------------------------------------------------------------- cuBLAS

// The cuBLAS v2 C API, declared here (no CUDA header): handles are opaque pointers,
// cublasStatus_t is an int (0 = CUBLAS_STATUS_SUCCESS), cublasOperation_t an int (0 = N).
using cublasHandle_t = struct cublasContext*;
struct Cublas {
  int (*Create)(cublasHandle_t*) = nullptr;
  int (*Destroy)(cublasHandle_t) = nullptr;
  int (*SetStream)(cublasHandle_t, runtime::CUstream) = nullptr;
  int (*Sgemm)(cublasHandle_t, int, int, int, int, int, const float*, const float*, int, const float*, int,
               const float*, float*, int) = nullptr;
  std::string error; // why it is unusable; "" when loaded
};

// libcublas.so.13, then .so.12: from $KILN_CUDA_HOME/{lib64,lib}, /usr/local/cuda/lib64,
// then the default search path. libcublasLt (cuBLAS's dependency) is preloaded by full
// path with RTLD_GLOBAL where it lies next to it, so no LD_LIBRARY_PATH is needed.
// Loaded once, never unloaded.
const Cublas& cublas() {
  static const Cublas api = [] {
    Cublas c;
    std::vector<std::string> dirs;
    if (const char* home = std::getenv("KILN_CUDA_HOME"); home && *home) {
      dirs.push_back(std::string(home) + "/lib64");
      dirs.push_back(std::string(home) + "/lib");
    }
    dirs.push_back("/usr/local/cuda/lib64");
    void* h = nullptr;
    std::string tried;
    for (const char* major : {"13", "12"}) {
      for (const std::string& dir : dirs) {
        const std::string lib = dir + "/libcublas.so." + major, lt = dir + "/libcublasLt.so." + major;
        std::error_code ec;
        if (!std::filesystem::exists(lib, ec)) continue;
        if (std::filesystem::exists(lt, ec)) dlopen(lt.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if ((h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
        tried += " " + lib + " (" + dlerror() + ")";
      }
      if (h) break;
      const std::string name = std::string("libcublas.so.") + major;
      if ((h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
      tried += " " + name;
    }
    if (!h) {
      c.error = "cuBLAS not found (tried" + tried + ")";
      return c;
    }
    std::string missing;
    runtime::bind_symbol(h, c.Create, "cublasCreate_v2", missing);
    runtime::bind_symbol(h, c.Destroy, "cublasDestroy_v2", missing);
    runtime::bind_symbol(h, c.SetStream, "cublasSetStream_v2", missing);
    runtime::bind_symbol(h, c.Sgemm, "cublasSgemm_v2", missing);
    if (!missing.empty()) c.error = "cuBLAS lacks" + missing;
    return c;
  }();
  return api;
}

// cuBLAS is column-major. The row-major n x n buffers A and B read column-major are A^T and
// B^T, so C = A * B (row-major) is computed as C^T = B^T * A^T: cublasSgemm(N, N) with B
// passed first. The result is kiln's matmul(a, b) (not compared here: timing only).
// Default math mode: plain FP32, no TF32 tensor cores (unless NVIDIA_TF32_OVERRIDE says so).
void GpuCublasSgemm(benchmark::State& state) {
  guarded(state, [](benchmark::State& state) {
    const Cublas& cb = cublas();
    if (!cb.error.empty()) {
      state.SkipWithError(cb.error.c_str());
      return;
    }
    Gpu& gpu = Gpu::get(0);
    if (gpu.emulator()) {
      state.SkipWithError("cuBLAS cannot run on kiln's CPU emulator of the driver");
      return;
    }
    const int n = static_cast<int>(state.range(0));
    const Tensor a = randn({n, n}, 21, kFloat32, kGpu), b = randn({n, n}, 22, kFloat32, kGpu);
    realize({a, b});
    const std::shared_ptr<graph::Storage> c = gpu.allocate(static_cast<size_t>(n) * n * sizeof(float));
    const auto* A = static_cast<const float*>(a.node()->realized()->data());
    const auto* B = static_cast<const float*>(b.node()->realized()->data());
    auto* C = static_cast<float*>(c->data());
    gpu.synchronize(); // the Gpu's (primary) context is current on this thread: cuBLAS uses it
    cublasHandle_t handle = nullptr;
    if (int s = cb.Create(&handle); s != 0) {
      state.SkipWithError(("cublasCreate_v2 failed: status " + std::to_string(s)).c_str());
      return;
    }
    const float alpha = 1.0f, beta = 0.0f;
    int status = cb.SetStream(handle, gpu.stream());
    auto sgemm = [&] {
      if (status == 0) status = cb.Sgemm(handle, 0, 0, n, n, n, &alpha, B, n, A, n, &beta, C, n);
    };
    sgemm(); // warm-up (cuBLAS loads its kernels lazily)
    gpu.synchronize();
    for (auto _ : state) {
      const double ms = gpu.time_ms(sgemm);
      if (status != 0) break;
      state.SetIterationTime(ms / 1e3);
    }
    gpu.synchronize();
    cb.Destroy(handle);
    if (status != 0) {
      state.SkipWithError(("cuBLAS failed: status " + std::to_string(status)).c_str());
      return;
    }
    report_flops(state, 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n));
  });
}

// ---------------------------------------------------------------- NVRTC compile time

// The kernels of one SGD step of the MLP (forward, cross-entropy, backward, update), as
// make_plan schedules them; each distinct kernel compiled by NVRTC for the device's
// architecture, serially, from its emitted source (NVRTC has no cache: every compile is
// cold). Wall-clock time of the compiles only (emission and scheduling are not counted).
void GpuNvrtcColdCompile(benchmark::State& state) {
  guarded(state, [](benchmark::State& state) {
    if (std::string why; !codegen::nvrtc_available(&why)) {
      state.SkipWithError(("NVRTC unavailable: " + why).c_str());
      return;
    }
    Gpu& gpu = Gpu::get(0);
    const int64_t batch = state.range(0);
    bench::Mlp mlp(7, kGpu);
    realize(mlp.params); // the step reads them (as compile()'s replays do)
    const Tensor x = randn({batch, 784}, 11, kFloat32, kGpu);
    const Tensor y = (rand({batch}, 12, kFloat32, kGpu) * 10.0).to(kInt64);
    realize({x, y});
    const Tensor loss = mlp.loss(x, y);
    loss.backward();
    std::vector<graph::NodeRef> outputs{loss.node()};
    {
      NoGradGuard no_grad;
      for (const Tensor& p : mlp.params) outputs.push_back((p - p.grad() * 0.01).node());
    }
    std::vector<const graph::Node*> todo;
    for (const auto& o : outputs) todo.push_back(o.get());
    const codegen::Schedule sched = codegen::schedule(todo, {options().fusion, gpu.target()});
    std::vector<std::pair<std::string, std::string>> sources; // name, source; distinct kernels
    std::set<std::string> seen;
    for (const auto& l : sched.launches)
      if (seen.insert(l.kernel.name).second) sources.emplace_back(l.kernel.name, codegen::emit_cuda(l.kernel));
    const DeviceInfo& info = gpu.info();
    const std::string arch = "sm_" + std::to_string(info.cc_major) + std::to_string(info.cc_minor);
    double total_s = 0;
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      for (const auto& [name, source] : sources) {
        const codegen::CompileResult r = codegen::nvrtc_compile(source, name + ".cu", arch);
        benchmark::DoNotOptimize(r.binary.data());
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      total_s += s;
      state.SetIterationTime(s);
    }
    state.counters["kernels"] = static_cast<double>(sched.launches.size()); // launches of the step
    state.counters["compiled"] = static_cast<double>(sources.size());      // distinct kernels compiled
    if (state.iterations() > 0 && !sources.empty())
      state.counters["ms_per_kernel"] =
          total_s * 1e3 / static_cast<double>(state.iterations()) / static_cast<double>(sources.size());
  });
}

// ---------------------------------------------------------------- attention

/// Sets options().fusion for a scope.
struct FusionSetting {
  bool saved = options().fusion;
  explicit FusionSetting(bool on) { options().fusion = on; }
  ~FusionSetting() { options().fusion = saved; }
};

void GpuAttention(benchmark::State& state) {
  guarded(state, [](benchmark::State& state) {
    Gpu& gpu = Gpu::get(0);
    const bool fused = state.range(0) != 0;
    const int64_t t = state.range(1), bh = state.range(2);
    std::vector<Tensor> in;
    for (uint64_t s = 0; s < 3; ++s) {
      Tensor x = randn({bh, t, 64}, 30 + s, kFloat32, kGpu);
      x.realize();
      in.push_back(x.requires_grad_());
    }
    const Tensor dout = randn({bh, t, 64}, 33, kFloat32, kGpu).realize();
    std::vector<graph::NodeRef> outputs;
    {
      FusionSetting mode(fused); // what the graph is built as: the Attention node or the composite
      const Tensor out = nn::functional::scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), 0, true);
      state.counters["fused"] = out.node()->op == graph::OpKind::Attention ? 1 : 0;
      outputs.push_back(out.node());
      for (const Tensor& g : grad({out}, in, {dout})) outputs.push_back(g.node());
    }
    const runtime::Plan plan = runtime::make_plan(outputs, true);
    replay(state, gpu, plan);
    state.counters["kernels"] = static_cast<double>(plan.schedule.launches.size());
  });
}

// ---------------------------------------------------------------- registration

benchmark::internal::Benchmark* gpu_bench(const char* name, void (*fn)(benchmark::State&)) {
  return benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Unit(benchmark::kMillisecond);
}

const bool kRegistered = [] {
  std::string why = cuda_unavailable_reason();
  bool emulator = false;
  if (why.empty()) {
    try {
      emulator = Gpu::get(0).emulator();
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  if (!why.empty()) {
    benchmark::RegisterBenchmark("Gpu/Unavailable", [why](benchmark::State& state) {
      state.SkipWithError(why.c_str());
      for (auto _ : state) {
      }
    })->Iterations(1);
    return false;
  }
  // The emulator runs kernels on the CPU, one fiber per CUDA thread where blocks are fixed.
  const int64_t elems = emulator ? int64_t{1} << 16 : int64_t{1} << 26; // 64K / 64M floats (256 MiB)
  const int64_t gemm = emulator ? 256 : 4096;
  gpu_bench("Gpu/Copy", GpuCopy)->Arg(elems);
  gpu_bench("Gpu/Elementwise8", GpuElementwise8)->Arg(elems);
  auto* softmax = gpu_bench("Gpu/Softmax", GpuSoftmax)->ArgNames({"rows", "cols"});
  if (emulator) softmax->Args({256, 256});
  else softmax->Args({8192, 1024})->Args({65536, 1024}); // bench_fusion's 32 MiB (fits the L2), and 256 MiB
  gpu_bench("Gpu/Sgemm", GpuSgemm)->Arg(gemm);
  gpu_bench("Gpu/CublasSgemm", GpuCublasSgemm)->Arg(gemm);
  gpu_bench("Gpu/NvrtcColdCompile/MLPStep", GpuNvrtcColdCompile)->Arg(128)->Unit(benchmark::kSecond);
  // fused and composite alternating; from T 512 the backward is fused too (kFusedBackwardMinWeights)
  // (the emulator: one batch point at T 512, so that its backward is fused too)
  auto* attention = gpu_bench("Gpu/Attention", GpuAttention)->ArgNames({"fused", "T", "BH"});
  for (int64_t t : emulator ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 1024, 2048})
    attention->Args({1, t, emulator ? 1 : 32})->Args({0, t, emulator ? 1 : 32});
  return true;
}();

} // namespace

// Honest ceilings: what a competent engineer's hand-written code reaches, the bars kiln's
// kernels are judged by (bench/RESULTS.md takes every ratio against the strongest
// baseline in the binary), and the machine's own limits:
//   Peak/fma_f32, Peak/read/<KiB>, Peak/tile_12x32/lda:<n>   the cores' multiply-add rate
//       (registers only), the rate at which they read a buffer held in L2 or beyond it, and
//       kiln's GEMM loop written by hand (see PeakFma, PeakRead, PeakTile)
//   Elementwise8/16M/cxx_fast, Softmax/8192x1024/cxx_fast, LayerNorm/8192x1024/cxx_fast
//       the computations of bench_fusion.cpp's kiln cases as hand-fused loops, compiled
//       with -O3 -march=native -ffast-math: vectorized, glibc's libmvec for expf,
//       reassociated sums, one exp per softmax element and a multiply by 1 / sum.
//       (bench_fusion.cpp's cxx_scalar_loop cases are the same loops without
//       -ffast-math: scalar expf and serial sums; kept as what they are.)
//   Gemm/<n or MxKxN>/openblas and the same shapes' Gemm/.../kiln
//       cblas_sgemm, row-major, from the system's libopenblas.so.0 loaded with dlopen
//       (Debian's libopenblas0; the cases say so and skip where it is absent). Run it in
//       its best configuration for the host: OPENBLAS_CORETYPE=Cooperlake on this
//       project's machines (an AMD Zen 4, where Debian's build otherwise picks slow kernels; an Intel
//       Xeon with AVX-512 and AMX under KVM, where it picks SkylakeX, the same sgemm kernels), and
//       OMP_WAIT_POLICY=passive with 2 threads (the OpenMP variant spins otherwise).
//       Shapes: 1024 and 2048 cubed, the MLP step's 128 x 784 x 512 and 128 x 512 x 512,
//       and conv2's im2col product of the CNN at batch 128 (25088 x 288 x 64).
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "bench/common.h"

namespace {

using namespace kiln;
using kiln::bench::gflops;
using kiln::bench::report_bytes;

constexpr int64_t kElems = int64_t{1} << 24;
constexpr int64_t kRows = 8192, kCols = 1024;

// ---------------------------------------------------------------- the machine's own ceilings

/// Peak/fma_f32: the cores' multiply-add rate on f32, 24 independent 64-byte vectors
/// accumulated in registers (a GEMM microkernel's register tile without its loads): the
/// bound of every GEMM-bound ratio. GFLOP/s counts 2 per lane and multiply-add.
void PeakFma(benchmark::State& state) {
  typedef float v16 __attribute__((vector_size(64)));
  constexpr int kAcc = 24;
  constexpr int64_t kSteps = int64_t{1} << 20; // milliseconds: a thread's start is noise
  const int threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    kiln::bench::split(threads, threads, [&](int64_t, int64_t) {
      v16 acc[kAcc];
      for (int i = 0; i < kAcc; ++i) acc[i] = v16{} + static_cast<float>(i);
      const v16 x = v16{} + 0.999999f, y = v16{} + 1e-6f;
      for (int64_t s = 0; s < kSteps; ++s) {
#pragma GCC unroll 24 // the tile in registers
        for (int i = 0; i < kAcc; ++i) acc[i] = acc[i] * x + y; // contracted to one FMA (-ffast-math)
      }
      v16 sum{};
      for (int i = 0; i < kAcc; ++i) sum += acc[i];
      benchmark::DoNotOptimize(sum);
    });
  }
  gflops(state, 2.0 * 16 * kAcc * static_cast<double>(kSteps) * threads);
}

/// Peak/read/<KiB>: the rate at which the cores read a buffer of that size again and again
/// (vector loads, sums reassociated): what a kernel that reads data not in L1 can reach
/// from L2 (512 KiB) or from beyond it (16 MiB, 256 MiB). Each thread reads its own buffer.
void PeakRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t n = state.range(1) * 1024 / static_cast<int64_t>(sizeof(float));
  // 64 MiB read by each thread per iteration: milliseconds, so that starting a thread is noise
  const int64_t passes = std::max<int64_t>(1, (int64_t{64} << 20) / (n * static_cast<int64_t>(sizeof(float))));
  std::vector<std::vector<float>> bufs(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(n), 1.0f));
  for (auto _ : state) {
    kiln::bench::split(threads, threads, [&](int64_t lo, int64_t) {
      const float* b = bufs[static_cast<size_t>(lo)].data();
      for (int64_t pass = 0; pass < passes; ++pass) {
        float sum = 0.0f;
        for (int64_t i = 0; i < n; ++i) sum += b[i];
        benchmark::DoNotOptimize(sum);
      }
    });
  }
  report_bytes(state, static_cast<double>(n) * sizeof(float) * static_cast<double>(passes * threads));
}

/// One 12 x 32 register tile of f32 over kc steps, as kiln's GEMM microkernel computes it
/// (two 16-lane rows of b, a broadcast element of a per row, 24 multiply-adds a step): a
/// from mr = 12 row pointers (`rows`, a row-major a read in place) or from a packed panel.
template <bool kRows>
__attribute__((noinline)) void tile_12x32(const float* const* a_rows, const float* __restrict ap, const float* __restrict bp,
                                          int64_t kc, float* __restrict c) {
  typedef float v16 __attribute__((vector_size(64), aligned(64)));
  constexpr int kMr = 12;
  v16 acc[2 * kMr];
  const float* rows[kMr];
#pragma GCC unroll 24
  for (int p = 0; p < kMr; ++p) rows[p] = kRows ? a_rows[p] : nullptr;
#pragma GCC unroll 24
  for (int i = 0; i < 2 * kMr; ++i) acc[i] = *reinterpret_cast<const v16*>(c + 16 * i);
  for (int64_t k = 0; k < kc; ++k) {
    const v16 b0 = *reinterpret_cast<const v16*>(bp + 32 * k), b1 = *reinterpret_cast<const v16*>(bp + 32 * k + 16);
#pragma GCC unroll 24
    for (int p = 0; p < kMr; ++p) {
      const v16 a = v16{} + (kRows ? rows[p][k] : ap[kMr * k + p]);
      acc[2 * p] += a * b0;
      acc[2 * p + 1] += a * b1;
    }
  }
#pragma GCC unroll 24
  for (int i = 0; i < 2 * kMr; ++i) *reinterpret_cast<v16*>(c + 16 * i) = acc[i];
}

/// Peak/tile_12x32/lda:<n>: the GEMM loop kiln runs inside a task, hand-written, on data laid
/// out as kiln lays it out: for each of 16 packed b panels (256 x 32, in L1) the tiles of 384
/// rows of a (in L2), their sums in scratch. lda 0: a packed (12-row panels); otherwise a
/// row-major a with rows lda floats apart read in place. The ceiling of kiln's GEMM structure
/// on this machine, and what the layout of a costs it (rows a multiple of 4 KiB apart share
/// the L1's sets).
void PeakTile(benchmark::State& state) {
  constexpr int64_t kKc = 256, kMc = 384, kPanels = 16, kMr = 12;
  const int64_t lda = state.range(0);
  std::vector<float> a(static_cast<size_t>(kMc * std::max(lda, kKc)), 1e-3f), bp(static_cast<size_t>(32 * kKc * kPanels + 16), 1e-3f);
  std::vector<float> cs(static_cast<size_t>(kMc * 32 * kPanels + 16), 0.0f);
  // 64-byte aligned starts (the tile's vector loads and stores are aligned)
  auto aligned = [](std::vector<float>& v) { return v.data() + (16 - reinterpret_cast<uintptr_t>(v.data()) / 4 % 16) % 16; };
  float *b = aligned(bp), *c = aligned(cs);
  const float* rows[kMr];
  for (auto _ : state)
    for (int64_t j = 0; j < kPanels; ++j)
      for (int64_t i = 0; i < kMc / kMr; ++i) {
        float* tile = c + (j * (kMc / kMr) + i) * kMr * 32;
        if (lda == 0) {
          tile_12x32<false>(nullptr, a.data() + i * kMr * kKc, b + j * 32 * kKc, kKc, tile);
        } else {
          for (int64_t p = 0; p < kMr; ++p) rows[p] = a.data() + (i * kMr + p) * lda;
          tile_12x32<true>(rows, nullptr, b + j * 32 * kKc, kKc, tile);
        }
      }
  benchmark::DoNotOptimize(c[0]);
  gflops(state, 2.0 * kMc * 32 * kPanels * kKc);
}

BENCHMARK(PeakFma)->Name("Peak/fma_f32")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(PeakTile)->Name("Peak/tile_12x32")->ArgName("lda")->Arg(0)->Arg(784)->Arg(1024)->Arg(1040)->Arg(2048)->UseRealTime();
BENCHMARK(PeakRead)
    ->Name("Peak/read")
    ->ArgNames({"threads", "KiB"})
    ->ArgsProduct({{1, 2}, {512, 16384, 262144}})
    ->UseRealTime();

// ---------------------------------------------------------------- memory-bound loops

void FastElementwise8(benchmark::State& state) {
  std::vector<float> x(kElems, 0.3f), y(kElems);
  for (int64_t i = 0; i < kElems; ++i) x[i] = static_cast<float>(i % 1000) * 1e-3f - 0.5f;
  for (auto _ : state) {
    kiln::bench::split(static_cast<int>(state.range(0)), kElems, [&](int64_t lo, int64_t hi) {
      const float* in = x.data();
      float* out = y.data();
      for (int64_t i = lo; i < hi; ++i) {
        const float v = in[i], r = std::max((v * 1.5f + 0.5f) * v - 0.25f, 0.0f);
        out[i] = v / (1.0f + expf(-r)) + 1.0f;
      }
    });
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * kElems * sizeof(float));
}

void FastSoftmax(benchmark::State& state) {
  std::vector<float> x(kRows * kCols), y(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) x[i] = static_cast<float>(i % 997) * 1e-2f - 5.0f;
  for (auto _ : state) {
    kiln::bench::split(static_cast<int>(state.range(0)), kRows, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const float* in = &x[r * kCols];
        float* out = &y[r * kCols];
        float m = in[0], s = 0.0f; // no -INFINITY: -ffast-math assumes finite values
        for (int64_t j = 0; j < kCols; ++j) m = in[j] > m ? in[j] : m;
        for (int64_t j = 0; j < kCols; ++j) out[j] = expf(in[j] - m);
        for (int64_t j = 0; j < kCols; ++j) s += out[j];
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < kCols; ++j) out[j] *= inv;
      }
    });
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * kRows * kCols * sizeof(float));
}

void FastLayerNorm(benchmark::State& state) {
  std::vector<float> x(kRows * kCols), y(kRows * kCols), g(kCols, 1.0f), b(kCols, 0.0f);
  for (int64_t i = 0; i < kRows * kCols; ++i) x[i] = static_cast<float>(i % 991) * 1e-3f;
  for (auto _ : state) {
    kiln::bench::split(static_cast<int>(state.range(0)), kRows, [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const float* in = &x[r * kCols];
        float* out = &y[r * kCols];
        float sum = 0.0f, var = 0.0f;
        for (int64_t j = 0; j < kCols; ++j) sum += in[j];
        const float mean = sum / kCols;
        for (int64_t j = 0; j < kCols; ++j) var += (in[j] - mean) * (in[j] - mean);
        const float inv = 1.0f / std::sqrt(var / kCols + 1e-5f);
        for (int64_t j = 0; j < kCols; ++j) out[j] = (in[j] - mean) * inv * g[j] + b[j];
      }
    });
    benchmark::ClobberMemory();
  }
  report_bytes(state, 2.0 * kRows * kCols * sizeof(float));
}

#define KILN_CEILING(B, name) \
  BENCHMARK(B)->Name(name)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)
KILN_CEILING(FastElementwise8, "Elementwise8/16M/cxx_fast");
KILN_CEILING(FastSoftmax, "Softmax/8192x1024/cxx_fast");
KILN_CEILING(FastLayerNorm, "LayerNorm/8192x1024/cxx_fast");

// ---------------------------------------------------------------- GEMM: OpenBLAS

/// cblas_sgemm and openblas_set_num_threads from libopenblas.so.0, or why not.
struct OpenBlas {
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  Sgemm sgemm = nullptr;
  void (*set_threads)(int) = nullptr;
  std::string why;
};

const OpenBlas& openblas() {
  static const OpenBlas lib = [] {
    OpenBlas o;
    void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!h) return o.why = std::string("OpenBLAS not found (install Debian's libopenblas0): ") + dlerror(), o;
    o.sgemm = reinterpret_cast<OpenBlas::Sgemm>(dlsym(h, "cblas_sgemm"));
    o.set_threads = reinterpret_cast<void (*)(int)>(dlsym(h, "openblas_set_num_threads"));
    if (!o.sgemm || !o.set_threads) o.why = "libopenblas.so.0 lacks cblas_sgemm or openblas_set_num_threads";
    return o;
  }();
  return lib;
}

struct Shape {
  int64_t m, k, n;
  bool trans_a = false; ///< A is stored transposed ([k, m]): a weight gradient x^T g
  int64_t batch = 0;    ///< > 0: that many products of these sizes (OpenBLAS: one call each)
};

void OpenBlasGemm(benchmark::State& state, Shape s) {
  const OpenBlas& ob = openblas();
  if (!ob.why.empty()) return state.SkipWithError(ob.why.c_str());
  ob.set_threads(static_cast<int>(state.range(0)));
  const auto [m, k, n, trans_a, batch] = s;
  const int64_t products = std::max<int64_t>(batch, 1);
  std::vector<float> a(products * m * k), b(products * k * n), c(products * m * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 17) * 0.1f - 0.8f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
  for (auto _ : state) {
    for (int64_t p = 0; p < products; ++p)
      ob.sgemm(kRowMajor, trans_a ? kTrans : kNoTrans, kNoTrans, int(m), int(n), int(k), 1.0f, a.data() + p * m * k,
               int(trans_a ? m : k), b.data() + p * k * n, int(n), 0.0f, c.data() + p * m * n, int(n));
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  gflops(state, 2.0 * static_cast<double>(products) * m * k * n);
}

void KilnGemmShape(benchmark::State& state, Shape s) { kiln::bench::kiln_gemm(state, s.m, s.k, s.n, s.trans_a, s.batch); }

#define KILN_GEMM_PAIR(name, M, K, N)                                                                         \
  BENCHMARK_CAPTURE(OpenBlasGemm, name, Shape{M, K, N})                                                      \
      ->Name("Gemm/" #name "/openblas")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()                   \
      ->Unit(benchmark::kMillisecond)
KILN_GEMM_PAIR(1024, 1024, 1024, 1024);
KILN_GEMM_PAIR(2048, 2048, 2048, 2048);
KILN_GEMM_PAIR(128x784x512, 128, 784, 512);
KILN_GEMM_PAIR(128x512x512, 128, 512, 512);
KILN_GEMM_PAIR(25088x288x64, 25088, 288, 64);
// the GPT step's shapes (examples/gpt: 12 x 64 tokens, 128 dims, MLP 512): the MLP's two
// products and a weight gradient (its reduction over the tokens)
KILN_GEMM_PAIR(768x128x512, 768, 128, 512);
KILN_GEMM_PAIR(768x512x128, 768, 512, 128);
KILN_GEMM_PAIR(128x768x512, 128, 768, 512);
// weight gradients as the backward pass computes them: A = g^T or x^T, stored [k, m]
#define KILN_GEMM_PAIR_TA(name, M, K, N)                                                                      \
  BENCHMARK_CAPTURE(OpenBlasGemm, name, Shape{M, K, N, true})                                                \
      ->Name("Gemm/" #name "/openblas")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()                   \
      ->Unit(benchmark::kMillisecond)
KILN_GEMM_PAIR_TA(384x768x128_ta, 384, 768, 128);
KILN_GEMM_PAIR_TA(512x128x512_ta, 512, 128, 512);
KILN_GEMM_PAIR_TA(128x768x512_ta, 128, 768, 512);
KILN_GEMM_PAIR_TA(512x768x128_ta, 512, 768, 128);
// the weight gradients of TransformerBlockStep (16 x 64 tokens, 128 dims, MLP 512)
KILN_GEMM_PAIR_TA(128x1024x512_ta, 128, 1024, 512);
KILN_GEMM_PAIR_TA(512x1024x128_ta, 512, 1024, 128);
// the GPT's attention products where its dropout keeps them out of the fused kernel (12 x 4
// heads, 64 tokens, head dim 32): the scores q k^T, their product with v, and the two gradients
// whose a is transposed
#define KILN_GEMM_PAIR_BATCHED(name, B, M, K, N, TA)                                                          \
  BENCHMARK_CAPTURE(OpenBlasGemm, name, Shape{M, K, N, TA, B})                                               \
      ->Name("Gemm/" #name "/openblas")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()                   \
      ->Unit(benchmark::kMillisecond);                                                                        \
  BENCHMARK_CAPTURE(KilnGemmShape, name, Shape{M, K, N, TA, B})                                              \
      ->Name("Gemm/" #name "/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)
KILN_GEMM_PAIR_BATCHED(48x64x32x64, 48, 64, 32, 64, false);
KILN_GEMM_PAIR_BATCHED(48x64x64x32, 48, 64, 64, 32, false);
KILN_GEMM_PAIR_BATCHED(48x64x64x32_ta, 48, 64, 64, 32, true);
// kiln on the shapes Gemm/1024 and Gemm/2048 do not cover (bench_gemm.cpp has those).
#define KILN_GEMM_SHAPE(name, M, K, N)                                                                         \
  BENCHMARK_CAPTURE(KilnGemmShape, name, Shape{M, K, N})                                                      \
      ->Name("Gemm/" #name "/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)
KILN_GEMM_SHAPE(128x784x512, 128, 784, 512);
KILN_GEMM_SHAPE(128x512x512, 128, 512, 512);
KILN_GEMM_SHAPE(25088x288x64, 25088, 288, 64);
KILN_GEMM_SHAPE(768x128x512, 768, 128, 512);
KILN_GEMM_SHAPE(768x512x128, 768, 512, 128);
KILN_GEMM_SHAPE(128x768x512, 128, 768, 512);
#define KILN_GEMM_SHAPE_TA(name, M, K, N)                                                                      \
  BENCHMARK_CAPTURE(KilnGemmShape, name, Shape{M, K, N, true})                                                \
      ->Name("Gemm/" #name "/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond)
KILN_GEMM_SHAPE_TA(384x768x128_ta, 384, 768, 128);
KILN_GEMM_SHAPE_TA(512x128x512_ta, 512, 128, 512);
KILN_GEMM_SHAPE_TA(128x768x512_ta, 128, 768, 512);
KILN_GEMM_SHAPE_TA(512x768x128_ta, 512, 768, 128);
KILN_GEMM_SHAPE_TA(128x1024x512_ta, 128, 1024, 512);
KILN_GEMM_SHAPE_TA(512x1024x128_ta, 512, 1024, 128);
// TransformerBlockStep's output projection (16 x 64 tokens, 4 heads of 32 -> 128): its left operand
// as the block reads it, attention's [16, 4, 64, 32] output with its heads merged
// (permute(0, 2, 1, 3).reshape({1024, 128})), against the same product of a contiguous operand
// (Gemm/1024x128x128/kiln) and OpenBLAS's. The GEMM packs the merged heads by gathers (its rows and k
// split into a row term and a k term); the contiguous one reads its rows in place.
KILN_GEMM_PAIR(1024x128x128, 1024, 128, 128);
KILN_GEMM_SHAPE(1024x128x128, 1024, 128, 128);
void KilnGemmMergedHeads(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const Tensor heads = randn({16, 4, 64, 32}, 31), w = randn({128, 128}, 32);
  realize({heads, w});
  const Tensor a = heads.permute({0, 2, 1, 3}).reshape({1024, 128});
  matmul(a, w).realize(); // compiles
  for (auto _ : state) {
    Tensor c = matmul(a, w);
    c.realize();
    benchmark::DoNotOptimize(c.node().get());
  }
  gflops(state, 2.0 * 1024 * 128 * 128);
}
BENCHMARK(KilnGemmMergedHeads)->Name("Gemm/1024x128x128_heads/kiln")->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

} // namespace

// Indexing throughput against the copy ceiling, in one run (ratios, not absolute times):
//   Gather/Embedding/kiln        nn::Embedding's forward (index_select): 64K tokens x 256 f32 from
//                                an 8K-row table; bytes = rows read + rows written + indices
//   Gather/Embedding/cxx_gather  the same row gather as a hand-written loop (memcpy per row)
//   Gather/Copy/cxx_loop         a contiguous copy of the same bytes: the ceiling
//   Gather/Chain/{fused,unfused} exp(gather(x, 1, i)) * 2: the gather as an indexed load inside the
//                                elementwise kernel, against one kernel per op (KILN_FUSION=0)
//   Gather/EmbeddingBackward/{kiln,one_hot,cxx_loop}  the weight gradient: index_add (a scan-form
//                                scatter kernel, O(tokens x dim)), the one-hot matrix product it
//                                replaced (O(rows x tokens x dim), built explicitly), and a
//                                sequential scatter loop
//   Gather/ScatterReduce/{kiln,cxx_max_loop}  scatter_reduce sum / amax / prod with the same sizes, against a
//                                sequential max loop
//   Gather/Scatter/kiln          scatter (the last write wins) with the same sizes
//   Scan/Cumsum/{kiln,cxx_loop}/dim:{0,1}  cumsum of 16M f32 over a long axis (dim 1 of [16, 1M])
//                                or across rows (dim 0 of [1M, 16]) against a sequential loop, and
//   Scan/Copy/kiln_add           x + 1 over the same bytes: a kiln elementwise kernel, the ceiling
//                                of any kiln kernel that writes a fresh output of that size
//   Sort/Argsort/{kiln,std_stable_sort}/len:{1000,1000000}  argsort of 1M f32 with ties in rows of
//                                1000 or as one row, against std::stable_sort of each row's indices
//   Sort/Argsort/kiln_dim0/len:1000  the same keys as [1000, 1000] sorted along dim 0 (strided columns)
// All on 1 and 2 threads.

#include <benchmark/benchmark.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace {

constexpr int64_t kRows = 8192, kDim = 256, kTokens = 65536;
constexpr int64_t kSortElems = 1000000;

void set_bytes(benchmark::State& state, int64_t bytes_per_iter) {
  state.SetBytesProcessed(state.iterations() * bytes_per_iter);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes_per_iter) * state.iterations(),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

std::vector<int64_t> token_ids(int64_t n, int64_t bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t& x : v) x = static_cast<int64_t>(rng() % static_cast<uint64_t>(bound));
  return v;
}

constexpr int64_t kGatherBytes = 2 * kTokens * kDim * int64_t{sizeof(float)} + kTokens * int64_t{sizeof(int64_t)};

void KilnEmbedding(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  kiln::nn::manual_seed(0);
  kiln::nn::Embedding emb(kRows, kDim);
  const kiln::Tensor ids = kiln::from_vector<int64_t>(token_ids(kTokens, kRows, 1));
  kiln::realize({emb.weight});
  for (auto _ : state) {
    kiln::Tensor y = emb(ids);
    y.realize();
    benchmark::DoNotOptimize(y.node().get());
  }
  set_bytes(state, kGatherBytes);
}
BENCHMARK(KilnEmbedding)->Name("Gather/Embedding/kiln")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

// Runs f(lo, hi) over [0, n) split across `threads` std::threads.
template <class F> void split(int threads, int64_t n, F f) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(f, n * t / threads, n * (t + 1) / threads);
  f(0, n / threads);
  for (auto& th : pool) th.join();
}

void CxxGather(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  std::vector<float> table(kRows * kDim, 1.0f), out(kTokens * kDim);
  const std::vector<int64_t> ids = token_ids(kTokens, kRows, 1);
  for (auto _ : state) {
    split(threads, kTokens, [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t)
        std::memcpy(&out[static_cast<size_t>(t * kDim)], &table[static_cast<size_t>(ids[t] * kDim)], kDim * sizeof(float));
    });
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kGatherBytes);
}
BENCHMARK(CxxGather)->Name("Gather/Embedding/cxx_gather")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void CxxCopy(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  std::vector<float> a(kTokens * kDim, 1.0f), b(kTokens * kDim);
  for (auto _ : state) {
    split(threads, kTokens * kDim, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) b[static_cast<size_t>(i)] = a[static_cast<size_t>(i)];
    });
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kTokens * kDim * int64_t{sizeof(float)});
}
BENCHMARK(CxxCopy)->Name("Gather/Copy/cxx_loop")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

// exp(gather(x, 1, i)) * 2 over [4096, 1024] from a [4096, 2048] table: fused (one kernel, the
// gather an indexed load) or unfused (gather, exp and mul each a kernel).
void GatherChain(benchmark::State& state, bool fused) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const bool saved = kiln::options().fusion;
  kiln::options().fusion = fused;
  const kiln::Tensor x = kiln::rand({4096, 2048}, 1);
  const kiln::Tensor i = kiln::from_vector<int64_t>(token_ids(4096 * 1024, 2048, 2), {4096, 1024});
  kiln::realize({x});
  for (auto _ : state) {
    kiln::Tensor y = kiln::exp(kiln::gather(x, 1, i)) * 2.0;
    y.realize();
    benchmark::DoNotOptimize(y.node().get());
  }
  kiln::options().fusion = saved;
  set_bytes(state, 4096 * 1024 * int64_t{2 * sizeof(float) + sizeof(int64_t)});
}
BENCHMARK_CAPTURE(GatherChain, fused, true)->Name("Gather/Chain/fused")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(GatherChain, unfused, false)->Name("Gather/Chain/unfused")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

// The weight gradient of an Embedding of 1024 x 64 over 4096 tokens.
constexpr int64_t kBRows = 1024, kBDim = 64, kBTokens = 4096;
constexpr int64_t kBackwardBytes = 2 * kBTokens * kBDim * int64_t{sizeof(float)} + kBTokens * int64_t{sizeof(int64_t)};

void KilnEmbeddingBackward(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const kiln::Tensor g = kiln::rand({kBTokens, kBDim}, 3);
  const kiln::Tensor ids = kiln::from_vector<int64_t>(token_ids(kBTokens, kBRows, 4));
  kiln::realize({g});
  for (auto _ : state) {
    kiln::Tensor dw = kiln::index_add(kiln::zeros({kBRows, kBDim}), 0, ids, g);
    dw.realize();
    benchmark::DoNotOptimize(dw.node().get());
  }
  set_bytes(state, kBackwardBytes);
}
BENCHMARK(KilnEmbeddingBackward)->Name("Gather/EmbeddingBackward/kiln")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

// The one-hot product scatter_add was before the scan form: one_hot(ids)^T [rows, tokens] x g.
void OneHotEmbeddingBackward(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const kiln::Tensor g = kiln::rand({kBTokens, kBDim}, 3);
  const kiln::Tensor ids = kiln::from_vector<int64_t>(token_ids(kBTokens, kBRows, 4));
  kiln::realize({g});
  for (auto _ : state) {
    const kiln::Tensor hot = kiln::nn::functional::one_hot(ids, kBRows).to(kiln::kFloat32);
    kiln::Tensor dw = kiln::zeros({kBRows, kBDim}) + kiln::matmul(hot.t(), g);
    dw.realize();
    benchmark::DoNotOptimize(dw.node().get());
  }
  set_bytes(state, kBackwardBytes);
}
BENCHMARK(OneHotEmbeddingBackward)->Name("Gather/EmbeddingBackward/one_hot")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void CxxEmbeddingBackward(benchmark::State& state) {
  std::vector<float> g(kBTokens * kBDim, 1.0f), dw(kBRows * kBDim);
  const std::vector<int64_t> ids = token_ids(kBTokens, kBRows, 4);
  for (auto _ : state) {
    std::fill(dw.begin(), dw.end(), 0.0f);
    for (int64_t t = 0; t < kBTokens; ++t)
      for (int64_t j = 0; j < kBDim; ++j) dw[static_cast<size_t>(ids[t] * kBDim + j)] += g[static_cast<size_t>(t * kBDim + j)];
    benchmark::DoNotOptimize(dw.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kBackwardBytes);
}
BENCHMARK(CxxEmbeddingBackward)->Name("Gather/EmbeddingBackward/cxx_loop")->Arg(1)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

// The src g [4096, 64] (f32) and index (each row's one random place of 1024, along its 64 columns) of the
// scatter benchmarks, realized.
std::pair<kiln::Tensor, kiln::Tensor> scatter_operands() {
  const kiln::Tensor g = kiln::rand({kBTokens, kBDim}, 3);
  const std::vector<int64_t> ids = token_ids(kBTokens, kBRows, 4);
  std::vector<int64_t> wide(static_cast<size_t>(kBTokens * kBDim));
  for (int64_t t = 0; t < kBTokens; ++t)
    std::fill_n(wide.begin() + t * kBDim, kBDim, ids[static_cast<size_t>(t)]);
  const kiln::Tensor index = kiln::from_vector(wide, {kBTokens, kBDim});
  kiln::realize({g, index});
  return {g, index};
}

// scatter_reduce(zeros, 0, index, g, reduce) with the embedding backward's sizes: 4096 rows of 64 f32 into
// 1024 places. "sum" runs scatter_add's scan kernel (and one counting the hits); "amax" and "prod" the
// ScatterMax and ScatterMul scan kernels, then maximum / product with self. range(0): 0 sum, 1 amax, 2 prod.
// One thread.
void KilnScatterReduce(benchmark::State& state) {
  static const char* const kReduce[] = {"sum", "amax", "prod"};
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1); // as PyTorch's figure
  const auto [g, index] = scatter_operands();
  for (auto _ : state) {
    kiln::Tensor r = kiln::scatter_reduce(kiln::zeros({kBRows, kBDim}), 0, index, g, kReduce[state.range(0)]);
    r.realize();
    benchmark::DoNotOptimize(r.node().get());
  }
  set_bytes(state, kBackwardBytes);
}
BENCHMARK(KilnScatterReduce)->Name("Gather/ScatterReduce/kiln")->Arg(0)->Arg(1)->Arg(2)->ArgName("reduce")->UseRealTime()->Unit(benchmark::kMillisecond);

// scatter(zeros, 0, index, g) with the same sizes: where several rows hit one place the last one wins, found
// by one scatter-max kernel of the positions (a stable argsort of the index before stop 47). One thread.
void KilnScatter(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
  const auto [g, index] = scatter_operands();
  for (auto _ : state) {
    kiln::Tensor r = kiln::scatter(kiln::zeros({kBRows, kBDim}), 0, index, g);
    r.realize();
    benchmark::DoNotOptimize(r.node().get());
  }
  set_bytes(state, kBackwardBytes);
}
BENCHMARK(KilnScatter)->Name("Gather/Scatter/kiln")->UseRealTime()->Unit(benchmark::kMillisecond);

// The amax as a sequential loop over the rows (the ceiling of a scan-form scatter-max kernel).
void CxxScatterMax(benchmark::State& state) {
  std::vector<float> g(kBTokens * kBDim, 1.0f), out(kBRows * kBDim);
  const std::vector<int64_t> ids = token_ids(kBTokens, kBRows, 4);
  for (auto _ : state) {
    std::fill(out.begin(), out.end(), 0.0f);
    for (int64_t t = 0; t < kBTokens; ++t)
      for (int64_t j = 0; j < kBDim; ++j) {
        float& o = out[static_cast<size_t>(ids[static_cast<size_t>(t)] * kBDim + j)];
        o = std::max(o, g[static_cast<size_t>(t * kBDim + j)]);
      }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kBackwardBytes);
}
BENCHMARK(CxxScatterMax)->Name("Gather/ScatterReduce/cxx_max_loop")->UseRealTime()->Unit(benchmark::kMillisecond);

// cumsum of 16M f32: dim 1 of [16, 1M] (16 long scans) or dim 0 of [1M, 16] (16 columns, each scanning
// across rows); range(0) = dim, range(1) = threads.
constexpr int64_t kScanLong = int64_t{1} << 20, kScanCols = 16;

kiln::IntList scan_shape(int64_t dim) { return dim == 1 ? kiln::IntList{kScanCols, kScanLong} : kiln::IntList{kScanLong, kScanCols}; }

void KilnCumsum(benchmark::State& state) {
  const int64_t dim = state.range(0);
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(1));
  const kiln::Tensor x = kiln::rand(scan_shape(dim), 5);
  kiln::realize({x});
  for (auto _ : state) {
    kiln::Tensor y = kiln::cumsum(x, dim);
    y.realize();
    benchmark::DoNotOptimize(y.node().get());
  }
  set_bytes(state, 2 * kScanLong * kScanCols * int64_t{sizeof(float)});
}
BENCHMARK(KilnCumsum)->Name("Scan/Cumsum/kiln")->ArgsProduct({{0, 1}, {1, 2}})->ArgNames({"dim", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);

// The same bytes through a kiln elementwise kernel (x + 1): what any kiln kernel writing a fresh
// 64 MB output costs here, the scan's own ceiling.
void KilnScanCopy(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const kiln::Tensor x = kiln::rand(scan_shape(0), 5);
  kiln::realize({x});
  for (auto _ : state) {
    kiln::Tensor y = x + 1.0;
    y.realize();
    benchmark::DoNotOptimize(y.node().get());
  }
  set_bytes(state, 2 * kScanLong * kScanCols * int64_t{sizeof(float)});
}
BENCHMARK(KilnScanCopy)->Name("Scan/Copy/kiln_add")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void CxxCumsum(benchmark::State& state) {
  const int64_t dim = state.range(0);
  std::vector<float> x(kScanLong * kScanCols, 0.5f), y(x.size());
  for (auto _ : state) {
    if (dim == 1) {
      for (int64_t r = 0; r < kScanCols; ++r) {
        float acc = 0;
        for (int64_t i = 0; i < kScanLong; ++i) y[r * kScanLong + i] = acc += x[r * kScanLong + i];
      }
    } else {
      float acc[kScanCols] = {};
      for (int64_t i = 0; i < kScanLong; ++i)
        for (int64_t c = 0; c < kScanCols; ++c) y[i * kScanCols + c] = acc[c] += x[i * kScanCols + c];
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2 * kScanLong * kScanCols * int64_t{sizeof(float)});
}
BENCHMARK(CxxCumsum)->Name("Scan/Cumsum/cxx_loop")->ArgsProduct({{0, 1}, {1}})->ArgNames({"dim", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);

// 1M f32 with ties (1000 values) as rows of `len` (1000: short rows; 1M: one row).
std::vector<float> sort_keys() {
  std::vector<float> v(kSortElems);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 2654435761ull >> 7) % 1000) * 0.25f;
  return v;
}

void KilnSort(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(1));
  const int64_t len = state.range(0);
  const kiln::Tensor x = kiln::from_vector(sort_keys(), {kSortElems / len, len});
  for (auto _ : state) {
    kiln::Tensor i = kiln::argsort(x, 1);
    i.realize();
    benchmark::DoNotOptimize(i.node().get());
  }
  set_bytes(state, kSortElems * int64_t{sizeof(float) + sizeof(int64_t)});
}
BENCHMARK(KilnSort)->Name("Sort/Argsort/kiln")->ArgsProduct({{1000, kSortElems}, {1, 2}})->ArgNames({"len", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);

// The same 1M keys as [1000, 1000] sorted along dim 0: columns of 1000 strided by a row.
void KilnSortDim0(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const kiln::Tensor x = kiln::from_vector(sort_keys(), {1000, kSortElems / 1000});
  for (auto _ : state) {
    kiln::Tensor i = kiln::argsort(x, 0);
    i.realize();
    benchmark::DoNotOptimize(i.node().get());
  }
  set_bytes(state, kSortElems * int64_t{sizeof(float) + sizeof(int64_t)});
}
BENCHMARK(KilnSortDim0)->Name("Sort/Argsort/kiln_dim0/len:1000")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void CxxStableSort(benchmark::State& state) {
  const int64_t len = state.range(0);
  const std::vector<float> x = sort_keys();
  std::vector<int64_t> idx(x.size());
  for (auto _ : state) {
    for (int64_t r = 0; r < kSortElems / len; ++r) {
      int64_t* row = idx.data() + r * len;
      const float* key = x.data() + r * len;
      for (int64_t k = 0; k < len; ++k) row[k] = k;
      std::stable_sort(row, row + len, [&](int64_t a, int64_t b) { return key[a] < key[b]; });
    }
    benchmark::DoNotOptimize(idx.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kSortElems * int64_t{sizeof(float) + sizeof(int64_t)});
}
BENCHMARK(CxxStableSort)->Name("Sort/Argsort/std_stable_sort")->ArgsProduct({{1000, kSortElems}, {1}})->ArgNames({"len", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------- searches
//   Search/Bucketize/kiln             bucketize(values, boundaries, right = true) of 1M f32 values into 4096 sorted
//                                     f32 boundaries: a binary search, 13 probes a value, in one kernel
//   Search/Bucketize/cxx_upper_bound  the same as a loop of std::upper_bound (on 1 and 2 std::threads)
// bytes = the values read + the i64 positions written.

constexpr int64_t kSearchValues = 1 << 20, kBoundaries = 4096;

// Values spread over the boundaries' range and a little beyond ([-0.1, 1.1)); boundaries sorted in [0, 1).
std::vector<float> uniform_floats(int64_t n, float lo, float hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> boundaries() {
  std::vector<float> b = uniform_floats(kBoundaries, 0.0f, 1.0f, 8);
  std::sort(b.begin(), b.end());
  return b;
}

constexpr int64_t kSearchBytes = kSearchValues * int64_t{sizeof(float) + sizeof(int64_t)};

void KilnBucketize(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const kiln::Tensor x = kiln::from_vector(uniform_floats(kSearchValues, -0.1f, 1.1f, 7));
  const kiln::Tensor b = kiln::from_vector(boundaries());
  for (auto _ : state) {
    kiln::Tensor i = kiln::bucketize(x, b, false, true);
    i.realize();
    benchmark::DoNotOptimize(i.node().get());
  }
  set_bytes(state, kSearchBytes);
}
BENCHMARK(KilnBucketize)->Name("Search/Bucketize/kiln")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void CxxUpperBound(benchmark::State& state) {
  const std::vector<float> x = uniform_floats(kSearchValues, -0.1f, 1.1f, 7), b = boundaries();
  std::vector<int64_t> out(x.size());
  for (auto _ : state) {
    split(static_cast<int>(state.range(0)), kSearchValues, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k)
        out[static_cast<size_t>(k)] = std::upper_bound(b.begin(), b.end(), x[static_cast<size_t>(k)]) - b.begin();
    });
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kSearchBytes);
}
BENCHMARK(CxxUpperBound)->Name("Search/Bucketize/cxx_upper_bound")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

// ---------------------------------------------------------------- counts
//   Search/Histc/kiln      histc(values, 100 bins, 0, 1) of the same 1M f32 values: a bin per value, then ScatterAdd's
//                          scan-form kernel (one column: the counts in index order, on one thread)
//   Search/Bincount/kiln   bincount of 1M i64 in [0, 4096) (an input already computed: its length from its max)
//   Search/Bincount/cxx_loop  the same counts as a sequential loop
// bytes = the input read.

void KilnHistc(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const kiln::Tensor x = kiln::from_vector(uniform_floats(kSearchValues, -0.1f, 1.1f, 7));
  for (auto _ : state) {
    kiln::Tensor c = kiln::histc(x, 100, 0, 1);
    c.realize();
    benchmark::DoNotOptimize(c.node().get());
  }
  set_bytes(state, kSearchValues * int64_t{sizeof(float)});
}
BENCHMARK(KilnHistc)->Name("Search/Histc/kiln")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void KilnBincount(benchmark::State& state) {
  tbb::global_control threads(tbb::global_control::max_allowed_parallelism, state.range(0));
  const kiln::Tensor x = kiln::from_vector<int64_t>(token_ids(kSearchValues, kBoundaries, 9));
  for (auto _ : state) {
    kiln::Tensor c = kiln::bincount(x);
    c.realize();
    benchmark::DoNotOptimize(c.node().get());
  }
  set_bytes(state, kSearchValues * int64_t{sizeof(int64_t)});
}
BENCHMARK(KilnBincount)->Name("Search/Bincount/kiln")->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

void CxxBincount(benchmark::State& state) {
  const std::vector<int64_t> x = token_ids(kSearchValues, kBoundaries, 9);
  std::vector<int64_t> c;
  for (auto _ : state) {
    c.assign(static_cast<size_t>(*std::max_element(x.begin(), x.end()) + 1), 0);
    for (int64_t v : x) ++c[static_cast<size_t>(v)];
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_bytes(state, kSearchValues * int64_t{sizeof(int64_t)});
}
BENCHMARK(CxxBincount)->Name("Search/Bincount/cxx_loop")->Arg(1)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);

} // namespace

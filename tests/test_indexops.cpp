// Indexing along a dim (gather, index_select, scatter_add, index_add), cumsum, cumprod and
// Embedding by index_select (scatter_add, cumsum and cumprod run as scan-form kernels): forward against hand-written PyTorch-semantics loops and the
// reference interpreter (fused and unfused bitwise equal), gradients by gradcheck in f64,
// forward mode against reverse mode, bitwise equality across thread counts, errors for
// bad indices, dims, dtypes and shapes, and Embedding's padding_idx.

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "graph/build.h"
#include "graph/interpret.h"
#include "graph/text.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"
#include "tests/random_graph.h"

namespace kiln {
namespace {

using Vec = std::vector<Tensor>;

int64_t count(const IntList& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor values_of(const IntList& shape, uint64_t seed, DType dt = kFloat64) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<double> v(static_cast<size_t>(count(shape)));
  for (double& x : v) x = u(rng);
  return from_vector<double>(v, shape).to(dt);
}

/// Indices uniform in [0, bound) of `shape` (i64), realized.
Tensor indices_of(const IntList& shape, int64_t bound, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(count(shape)));
  for (int64_t& x : v) x = bound > 0 ? static_cast<int64_t>(rng() % static_cast<uint64_t>(bound)) : 0;
  return from_vector<int64_t>(v, shape);
}

/// The same values, computed by a kernel (checked in the kernel, not on the host).
Tensor lazy(const Tensor& index) { return index + 1 - 1; }

std::vector<int64_t> strides_of(const IntList& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

/// Calls f(multi-index, flat offset) for every element of `shape`, in row-major order.
void for_each(const IntList& shape, const std::function<void(const IntList&, int64_t)>& f) {
  const int64_t n = count(shape);
  IntList at(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(at, k);
    for (size_t d = shape.size(); d-- > 0;)
      if (++at[d] < shape[d]) break;
      else at[d] = 0;
  }
}

int64_t offset(const IntList& at, const std::vector<int64_t>& st) {
  int64_t o = 0;
  for (size_t d = 0; d < at.size(); ++d) o += at[d] * st[d];
  return o;
}

/// torch.gather by the definition.
std::vector<double> ref_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const auto xv = x.to_vector<double>();
  const auto iv = index.to_vector<int64_t>();
  const auto st = strides_of(x.shape());
  std::vector<double> out(iv.size());
  for_each(index.shape(), [&](const IntList& at, int64_t k) {
    IntList src = at;
    src[static_cast<size_t>(dim)] = iv[static_cast<size_t>(k)];
    out[static_cast<size_t>(k)] = xv[static_cast<size_t>(offset(src, st))];
  });
  return out;
}

/// torch.scatter_add by the definition (sequential adds in index order).
std::vector<double> ref_scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  auto out = self.to_vector<double>();
  const auto iv = index.to_vector<int64_t>();
  const auto sv = src.to_vector<double>();
  const auto st = strides_of(self.shape()), sst = strides_of(src.shape());
  for_each(index.shape(), [&](const IntList& at, int64_t k) {
    IntList dst = at;
    dst[static_cast<size_t>(dim)] = iv[static_cast<size_t>(k)];
    out[static_cast<size_t>(offset(dst, st))] += sv[static_cast<size_t>(offset(at, sst))];
  });
  return out;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto v = t.to_vector<double>(); // exact for f32 and f64
  std::vector<unsigned char> b(v.size() * sizeof(double));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// The bytes of each tensor run() makes, on one TBB thread and on two.
using Bytes = std::vector<std::vector<unsigned char>>;
std::pair<Bytes, Bytes> on_one_and_two_threads(const std::function<std::vector<Tensor>()>& run) {
  std::pair<Bytes, Bytes> out;
  for (int threads : {1, 2}) {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, threads);
    for (const Tensor& t : run()) (threads == 1 ? out.first : out.second).push_back(bytes_of(t));
  }
  return out;
}

std::vector<unsigned char> realized_bytes(const graph::NodeRef& n) {
  const auto* p = static_cast<const unsigned char*>(n->realized()->data());
  return {p, p + graph::numel(n->shape) * dtype_size(n->dtype)};
}

/// t realized by the JIT equals the reference interpreter on the same graph (within `tol`),
/// and the other fusion mode gives the same bits.
void expect_matches_interpreter(const Tensor& t, double tol, const std::string& what) {
  const graph::NodeRef node = t.node();
  const std::vector<graph::NodeRef> copy = testing::clone_graph({node});
  const graph::InterpretResult want = graph::interpret_one(node);
  ASSERT_EQ(want.shape, t.shape()) << what;
  expect_near(t.to_vector<double>(), want.values, tol, what + " (interpreter)");
  const bool fusion = options().fusion;
  options().fusion = !fusion;
  runtime::realize(copy);
  options().fusion = fusion;
  EXPECT_EQ(realized_bytes(copy[0]), realized_bytes(node)) << what << ": fused and unfused differ";
}

// ---------------------------------------------------------------- forward

struct GatherCase {
  IntList x, index;
  int64_t dim;
};

// Odd extents, an index smaller than the input off the dim, zero-size, rank 1 and 3.
const std::vector<GatherCase> kGatherCases = {
    {{7}, {5}, 0},       {{3, 5}, {3, 4}, 1},   {{3, 5}, {6, 2}, 0},   {{4, 3, 5}, {2, 3, 7}, -1},
    {{4, 3, 5}, {4, 9, 5}, 1}, {{3, 5}, {0, 5}, 0}, {{3, 5}, {3, 0}, 1}, {{33, 17}, {33, 40}, 1}};

TEST(Gather, MatchesTheDefinitionAndTheInterpreter) {
  uint64_t seed = 1;
  for (const GatherCase& c : kGatherCases)
    for (DType dt : {kFloat32, kFloat64}) {
      const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.x.size()) : c.dim;
      const Tensor x = values_of(c.x, ++seed, dt);
      for (bool computed : {false, true}) {
        const Tensor index = indices_of(c.index, c.x[static_cast<size_t>(dim)], ++seed);
        const Tensor y = gather(x, c.dim, computed ? lazy(index) : index);
        EXPECT_EQ(y.shape(), c.index);
        EXPECT_EQ(y.dtype(), dt);
        EXPECT_EQ(y.to_vector<double>(), ref_gather(x, dim, index));
        expect_matches_interpreter(gather(x * 2.0, c.dim, computed ? lazy(index) : index), 0, "gather");
      }
    }
}

TEST(Gather, IntegerInputsAndI32Indices) {
  const Tensor x = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor i = from_vector<int32_t>({2, 0, 1, 1}, {2, 2});
  EXPECT_EQ(gather(x, 1, i).to_vector<int32_t>(), (std::vector<int32_t>{3, 1, 5, 5}));
  EXPECT_EQ(gather(x, 0, from_vector<int64_t>({1, 0, 1}, {1, 3})).to_vector<int32_t>(), (std::vector<int32_t>{4, 2, 6}));
  // a scalar
  EXPECT_EQ(gather(full({}, 2.5, kFloat64), 0, full({}, 0, kInt64)).item<double>(), 2.5);
}

TEST(Gather, FusesIntoAnElementwiseConsumerAsAnIndexedLoad) {
  const Tensor x = values_of({16, 9}, 5), i = indices_of({16, 4}, 9, 6);
  const Tensor y = exp(gather(x * 3.0, 1, lazy(i))) + 1.0;
  EXPECT_EQ(y.to_vector<double>(), (exp(from_vector<double>(ref_gather(x * 3.0, 1, i), {16, 4})) + 1.0).to_vector<double>());
  expect_matches_interpreter(exp(gather(x * 3.0, 1, lazy(i))) + 1.0, 1e-15 * 60, "gather in a chain");
}

// A gather read by every kind of kernel: a reduction, a row kernel (softmax), a matmul operand and
// epilogue, of views (a transposed input, a broadcast index), and gathers of gathers.
TEST(Gather, InsideReductionsRowKernelsAndMatmuls) {
  const Tensor x = values_of({12, 9}, 21), w = values_of({7, 5}, 22);
  const Tensor i = lazy(indices_of({12, 7}, 9, 23)), j = indices_of({12, 7}, 7, 24);
  const std::vector<std::pair<std::string, std::function<Tensor()>>> cases = {
      {"sum", [&] { return gather(x * 2.0, 1, i).sum({1}); }},
      {"softmax", [&] { return nn::functional::softmax(gather(x, 1, i), 1); }},
      {"matmul operand", [&] { return matmul(gather(x, 1, i), w); }},
      {"matmul epilogue", [&] { return gather(matmul(x.t(), x), 0, lazy(indices_of({5, 9}, 9, 25))) + 1.0; }},
      {"transposed input", [&] { return gather(x.t(), 0, lazy(indices_of({9, 12}, 9, 26))); }},
      {"broadcast index", [&] { return gather(x, 1, lazy(indices_of({12, 1}, 9, 27)).expand({12, 5})); }},
      {"gather of gather", [&] { return gather(gather(x, 1, i), 1, j); }},
      {"gather of a reduction", [&] { return gather(x.sum({0}, true).expand({12, 9}), 1, i); }},
  };
  for (const auto& [name, f] : cases) expect_matches_interpreter(f(), 1e-12, name);
}

TEST(Gather, PrintsAndParsesBackToTheSameNodes) {
  const Tensor y = gather(values_of({3, 5}, 3), 1, lazy(indices_of({3, 2}, 5, 4))) +
                   scatter_add(zeros({3, 2}, kFloat64), 0, lazy(indices_of({2, 2}, 3, 5)), values_of({2, 2}, 6));
  const std::string text = graph::print_graph({y.node()});
  EXPECT_NE(text.find("gather"), std::string::npos) << text;
  const std::vector<graph::NodeRef> back = graph::parse_graph(text);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].get(), y.node().get());
}

TEST(IndexSelect, MatchesGatherOfTheSpreadIndex) {
  const Tensor x = values_of({4, 5, 3}, 7);
  const std::vector<std::vector<int64_t>> picks = {{3, 0, 3, 2, 1}, {4, 0, 4, 2, 1, 3, 3}, {2, 2, 0}};
  for (int64_t dim : {0, 1, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    const Tensor idx = from_vector<int64_t>(picks[static_cast<size_t>(d)]);
    const Tensor got = index_select(x, dim, idx);
    IntList along(3, 1), out = x.shape();
    along[d] = out[d] = idx.numel();
    EXPECT_EQ(got.shape(), out);
    EXPECT_EQ(got.to_vector<double>(), gather(x, d, idx.reshape(along).expand(out)).to_vector<double>());
    expect_matches_interpreter(index_select(x, dim, lazy(idx)), 0, "index_select");
  }
  EXPECT_EQ(index_select(x, 0, from_vector<int64_t>({}, {0})).shape(), (IntList{0, 5, 3}));
  EXPECT_EQ(index_select(x, 1, full({}, 3, kInt64)).shape(), (IntList{4, 1, 3})); // a 0-d index selects one
}

struct ScatterCase {
  IntList self, index, src;
  int64_t dim;
};

const std::vector<ScatterCase> kScatterCases = {
    {{7}, {5}, {5}, 0},           {{3, 5}, {3, 9}, {3, 9}, 1},      {{4, 5}, {7, 3}, {8, 4}, 0},
    {{4, 3, 5}, {2, 3, 40}, {2, 3, 40}, -1}, {{3, 5}, {0, 5}, {0, 5}, 0}, {{5, 17}, {5, 33}, {5, 33}, 1}};

TEST(ScatterAdd, MatchesTheDefinitionAndTheInterpreter) {
  uint64_t seed = 100;
  for (const ScatterCase& c : kScatterCases)
    for (DType dt : {kFloat32, kFloat64}) {
      const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.self.size()) : c.dim;
      const Tensor self = values_of(c.self, ++seed, dt), src = values_of(c.src, ++seed, dt);
      const Tensor index = indices_of(c.index, c.self[static_cast<size_t>(dim)], ++seed);
      const Tensor y = scatter_add(self, c.dim, index, src);
      EXPECT_EQ(y.shape(), c.self);
      expect_near(y.to_vector<double>(), ref_scatter_add(self, dim, index, src), dt == kFloat32 ? 1e-4 : 1e-12,
                  "scatter_add");
      expect_matches_interpreter(scatter_add(self, c.dim, lazy(index), src * 1.5), dt == kFloat32 ? 1e-4 : 1e-12,
                                 "scatter_add");
    }
  const Tensor ints = scatter_add(zeros({3}, kInt64), 0, from_vector<int64_t>({2, 2, 0, 2}),
                                  from_vector<int64_t>({1, 10, 100, 1000}));
  EXPECT_EQ(ints.to_vector<int64_t>(), (std::vector<int64_t>{100, 0, 1011}));
}

/// torch.scatter_reduce "prod", "amax" or "amin" by the definition: self's value first (include_self) or
/// the first hit's, then each hit in index order (max and min NaN-propagating).
std::vector<double> ref_scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                                       const std::string& reduce, bool include_self) {
  auto out = self.to_vector<double>();
  std::vector<bool> started(out.size(), include_self);
  const auto iv = index.to_vector<int64_t>();
  const auto sv = src.to_vector<double>();
  const auto st = strides_of(self.shape()), sst = strides_of(src.shape());
  for_each(index.shape(), [&](const IntList& at, int64_t k) {
    IntList dst = at;
    dst[static_cast<size_t>(dim)] = iv[static_cast<size_t>(k)];
    const auto o = static_cast<size_t>(offset(dst, st));
    const double v = sv[static_cast<size_t>(offset(at, sst))], a = out[o];
    const bool nan = std::isnan(a) || std::isnan(v);
    out[o] = !started[o]        ? v
             : reduce == "prod" ? a * v
             : nan              ? std::numeric_limits<double>::quiet_NaN()
             : reduce == "amax" ? std::max(a, v)
                                : std::min(a, v);
    started[o] = true;
  });
  return out;
}

TEST(ScatterReduceKernels, MatchTheDefinitionAndTheInterpreter) {
  // the ScatterMul, ScatterMax and ScatterMin kernels (through scatter_reduce) in every dtype, with a lazy
  // index too (checked in the kernel), against the definition and the interpreter (fused and unfused alike)
  uint64_t seed = 500;
  for (const ScatterCase& c : kScatterCases)
    for (DType dt : {kFloat32, kFloat64, kInt32, kInt64})
      for (const char* r : {"prod", "amax", "amin"})
        for (bool inc : {true, false}) {
          SCOPED_TRACE(std::string(r) + " " + std::string(dtype_name(dt)) + (inc ? "" : " without self"));
          const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.self.size()) : c.dim;
          const bool fl = is_floating(dt);
          // integers in [-2, 2]: products within 2^24
          const Tensor self = (values_of(c.self, ++seed) * (fl ? 1.0 : 1.4)).to(dt);
          const Tensor src = (values_of(c.src, ++seed) * (fl ? 1.0 : 1.4)).to(dt);
          const Tensor index = indices_of(c.index, c.self[static_cast<size_t>(dim)], ++seed);
          const Tensor y = scatter_reduce(self, c.dim, index, src, r, inc);
          EXPECT_EQ(y.shape(), c.self);
          EXPECT_EQ(y.dtype(), dt);
          const double tol = dt == kFloat32 ? 1e-5 : fl ? 1e-12 : 0;
          expect_near(y.to_vector<double>(), ref_scatter_reduce(self, dim, index, src, r, inc), tol, "scatter_reduce");
          expect_matches_interpreter(scatter_reduce(self, c.dim, lazy(index), src * 1, r, inc), tol, "interpreter");
        }
}

TEST(ScatterReduceKernels, BitwiseTheSameOnOneAndTwoThreads) {
  // many repeats of few targets: products whose rounding depends on the order
  const Tensor src = values_of({4096, 8}, 44, kFloat32) * 0.01 + 1.0;
  const Tensor index = indices_of({4096, 8}, 3, 45);
  const auto [one, two] = on_one_and_two_threads([&] {
    std::vector<Tensor> b;
    for (const char* r : {"prod", "amax", "amin"})
      b.push_back(scatter_reduce(ones({3, 8}, kFloat32), 0, lazy(index), src * 1.0, r, false));
    return b;
  });
  EXPECT_EQ(one, two);
}

TEST(IndexAdd, AddsScaledSlices) {
  const Tensor self = values_of({5, 3}, 31), src = values_of({4, 3}, 32);
  const Tensor i = from_vector<int64_t>({4, 0, 4, 2});
  const Tensor y = index_add(self, 0, i, src, 0.5);
  auto want = self.to_vector<double>();
  const auto s = src.to_vector<double>();
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j) want[static_cast<size_t>(i.to_vector<int64_t>()[k] * 3 + j)] += 0.5 * s[k * 3 + j];
  expect_near(y.to_vector<double>(), want, 1e-12, "index_add");
  const Tensor cols = index_add(self, 1, from_vector<int64_t>({2, 2}), values_of({5, 2}, 33));
  EXPECT_EQ(cols.shape(), (IntList{5, 3}));
  expect_matches_interpreter(index_add(self, -1, lazy(from_vector<int64_t>({1, 1, 0})), values_of({5, 3}, 34)), 1e-12,
                             "index_add");
}

TEST(IndexAdd, AnIntegerSelfTakesAnIntegerAlphaExactly) {
  // In self's dtype: values past f32's 24 bits stay exact (a double alpha would go through f32).
  const int64_t big = (int64_t{1} << 40) + 1;
  const Tensor y = index_add(zeros({3}, kInt64), 0, from_vector<int64_t>({1, 1}), from_vector<int64_t>({big, 5}), 3);
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{0, 3 * big + 15, 0}));
  EXPECT_EQ(index_add(zeros({}, kInt32), 0, from_vector<int64_t>({0}), from_vector<int32_t>({7}), -2).item<int32_t>(), -14);
}

TEST(ScatterAdd, BitwiseTheSameOnOneAndTwoThreads) {
  // Many repeats of few targets: a sum whose rounding depends on the order.
  const Tensor src = values_of({4096, 8}, 41, kFloat32) * 1000.0;
  const Tensor index = indices_of({4096, 8}, 3, 42);
  const Tensor rows = indices_of({4096}, 5, 43); // index_add's 1-d index: the one-hot GEMM
  const auto [one, two] = on_one_and_two_threads([&] {
    return std::vector<Tensor>{scatter_add(zeros({3, 8}, kFloat32), 0, lazy(index), src * 1.0),
                               index_add(zeros({5, 8}, kFloat32), 0, lazy(rows), src * 1.0)};
  });
  EXPECT_EQ(one, two);
}

TEST(Cumsum, MatchesRunningSums) {
  for (const IntList& shape : {IntList{7}, IntList{3, 33}, IntList{4, 0}, IntList{2, 5, 3}})
    for (int64_t dim = -static_cast<int64_t>(shape.size()); dim < static_cast<int64_t>(shape.size()); ++dim) {
      const int64_t d = dim < 0 ? dim + static_cast<int64_t>(shape.size()) : dim;
      const Tensor x = values_of(shape, 50 + static_cast<uint64_t>(d));
      const auto xv = x.to_vector<double>();
      const auto st = strides_of(shape);
      std::vector<double> want(xv.size());
      for_each(shape, [&](const IntList& at, int64_t k) {
        IntList from = at;
        double s = 0;
        for (from[d] = 0; from[d] <= at[d]; ++from[d]) s += xv[static_cast<size_t>(offset(from, st))];
        want[static_cast<size_t>(k)] = s;
      });
      expect_near(cumsum(x, dim).to_vector<double>(), want, 1e-12, "cumsum");
      expect_matches_interpreter(cumsum(x * 2.0, dim), 1e-12, "cumsum");
    }
  EXPECT_EQ(cumsum(from_vector<int32_t>({1, 2, 3}), 0).dtype(), kInt64); // as PyTorch
  EXPECT_EQ(cumsum(from_vector<int32_t>({1, 2, 3}), 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 6}));
  EXPECT_EQ(cumsum(from_vector<bool>({true, false, true}), 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2}));
}

// ---------------------------------------------------------------- scan kernels

/// Running sums (products) along `d` in T's own arithmetic, sequentially from 0 (1): the
/// order the scan form documents (kernel_ir.h, ScanLoop).
template <class T> std::vector<T> running(const std::vector<T>& x, const IntList& shape, int64_t d, bool product) {
  std::vector<T> out(x.size());
  const auto st = strides_of(shape);
  for_each(shape, [&](const IntList& at, int64_t k) {
    IntList from = at;
    T acc = product ? T(1) : T(0);
    for (from[d] = 0; from[d] <= at[d]; ++from[d]) {
      const T v = x[static_cast<size_t>(offset(from, st))];
      acc = product ? acc * v : acc + v;
    }
    out[static_cast<size_t>(k)] = acc;
  });
  return out;
}

/// `v` in f64 (f32 scans run in f64) and back, each element rounded once.
std::vector<double> widened(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> rounded(const std::vector<double>& v) { return {v.begin(), v.end()}; }

TEST(Scan, CumsumAndCumprodAreSequentialBitwiseAndF32RunsInF64) {
  // odd, zero-size, one-element and long axes; every dim
  for (const IntList& shape : {IntList{7}, IntList{3, 33}, IntList{4, 0}, IntList{0, 3}, IntList{1, 1},
                               IntList{2, 5, 3}, IntList{3, 1, 19}, IntList{2, 2049}})
    for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
      const Tensor x = values_of(shape, 200 + static_cast<uint64_t>(d), kFloat32);
      const Tensor near_one = x * 0.01 + 1.0; // products that neither vanish nor overflow
      const auto xv = x.to_vector<float>(), nv = near_one.to_vector<float>();
      EXPECT_EQ(cumsum(x, d).to_vector<float>(), rounded(running(widened(xv), shape, d, false))) << "cumsum dim " << d;
      EXPECT_EQ(cumprod(near_one, d).to_vector<float>(), rounded(running(widened(nv), shape, d, true)))
          << "cumprod dim " << d;
      const Tensor x64 = values_of(shape, 300 + static_cast<uint64_t>(d));
      EXPECT_EQ(cumsum(x64, d - static_cast<int64_t>(shape.size())).to_vector<double>(),
                running(x64.to_vector<double>(), shape, d, false));
      expect_matches_interpreter(cumprod(x64 * 0.5 + 1.0, d), 1e-12, "cumprod");
      expect_matches_interpreter(cumsum(x * 2.0, d), 0, "cumsum f32");
    }
  EXPECT_EQ(cumprod(from_vector<int32_t>({2, -3, 4}), 0).dtype(), kInt64); // as PyTorch
  EXPECT_EQ(cumprod(from_vector<int32_t>({2, -3, 4}), 0).to_vector<int64_t>(), (std::vector<int64_t>{2, -6, -24}));
  EXPECT_EQ(cumprod(from_vector<bool>({true, true, false, true}), 0).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(cumprod(full({}, 3.0, kFloat64), 0).to_vector<double>(), std::vector<double>{3.0}); // 0-d: itself
}

// An f32 running sum in f32 drifts: a million 0.1s ended at 100958.34 (1% off). PyTorch's CPU
// cumsum and cumprod accumulate in f64, and so does kiln's scan now, forward and backward.
TEST(Scan, LongF32ScansAccumulateInF64AsPyTorch) {
  const std::vector<float> sums = cumsum(full({1000000}, 0.1, kFloat32), 0).to_vector<float>();
  EXPECT_EQ(sums.back(), 100000.0f); // torch.cumsum(torch.full((1000000,), 0.1), 0)[-1]: 100000.
  EXPECT_EQ(sums[99999], 10000.0f);  // [99999]: 10000.
  const float product = cumprod(full({100000}, 1.00001, kFloat32), 0).to_vector<float>().back();
  EXPECT_NEAR(product, 2.721962f, 2e-6f); // torch.cumprod(torch.full((100000,), 1.00001), 0)[-1]: 2.721962
  Tensor x = full({1000000}, 1.0, kFloat32);
  x.requires_grad_();
  (cumsum(x, 0) * 0.1).sum().backward(); // d/dx_i = 0.1 (n - i), a reverse running sum
  const std::vector<float> g = x.grad().to_vector<float>();
  EXPECT_EQ(g[0], 100000.0f);
  EXPECT_EQ(g[500000], 50000.0f);
}

/// scatter_add in f32 as the scan form documents it: per element, the hits summed in index
/// order starting from 0, then self added.
std::vector<float> sequential_scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const auto sv = src.to_vector<float>(), base = self.to_vector<float>();
  const auto iv = index.to_vector<int64_t>();
  std::vector<float> hits(base.size(), 0.0f);
  const auto st = strides_of(self.shape()), sst = strides_of(src.shape());
  for_each(index.shape(), [&](const IntList& at, int64_t k) {
    IntList dst = at;
    dst[static_cast<size_t>(dim)] = iv[static_cast<size_t>(k)];
    hits[static_cast<size_t>(offset(dst, st))] += sv[static_cast<size_t>(offset(at, sst))];
  });
  for (size_t k = 0; k < hits.size(); ++k) hits[k] = base[k] + hits[k];
  return hits;
}

TEST(Scan, ScatterAddSumsInIndexOrderFromZeroThenAddsSelfBitwise) {
  // index_for_each order (row-major) is index order along the dim for each column
  uint64_t seed = 400;
  for (const ScatterCase& c : kScatterCases) {
    const int64_t dim = c.dim < 0 ? c.dim + static_cast<int64_t>(c.self.size()) : c.dim;
    const Tensor self = values_of(c.self, ++seed, kFloat32), src = values_of(c.src, ++seed, kFloat32) * 100.0;
    const Tensor index = indices_of(c.index, c.self[static_cast<size_t>(dim)], ++seed);
    EXPECT_EQ(scatter_add(self, c.dim, lazy(index), src).to_vector<float>(), sequential_scatter_add(self, dim, index, src));
  }
  // many repeats of few rows, through index_add's 1-d index (Embedding's gradient)
  const Tensor self = values_of({6, 33}, 410, kFloat32), src = values_of({3000, 33}, 411, kFloat32) * 1000.0;
  const Tensor rows = indices_of({3000}, 6, 412);
  EXPECT_EQ(index_add(self, 0, rows, src).to_vector<float>(),
            sequential_scatter_add(self, 0, rows.reshape({3000, 1}).expand({3000, 33}), src));
}

TEST(Scan, AnInfOrNaNInSrcReachesOnlyTheElementItIsAddedTo) {
  // as PyTorch; the one-hot product of before computed 0 * inf = NaN for every other row
  std::vector<double> v(9, 1.0);
  v[1] = INFINITY;     // src[0][1] -> row 1
  v[8] = NAN;          // src[2][2] -> row 3
  v[3] = -INFINITY;    // src[1][0] -> row 2
  const Tensor src = from_vector<double>(v, {3, 3}).to(kFloat32);
  const Tensor y = index_add(zeros({5, 3}, kFloat32), 0, from_vector<int64_t>({1, 2, 3}), src);
  const auto out = y.to_vector<float>();
  for (int64_t k = 0; k < 15; ++k) {
    const bool special = k == 4 || k == 6 || k == 11;
    EXPECT_EQ(std::isfinite(out[static_cast<size_t>(k)]), !special) << "element " << k << " = " << out[static_cast<size_t>(k)];
  }
  EXPECT_EQ(out[4], INFINITY);
  EXPECT_EQ(out[6], -INFINITY);
  EXPECT_TRUE(std::isnan(out[11]));
  // a general (2-d) index and Embedding's gradient too
  const Tensor z = scatter_add(zeros({4, 3}, kFloat32), 0, lazy(from_vector<int64_t>({3, 0, 1, 1, 2, 3}, {2, 3})),
                               src.slice(0, 0, 2));
  const auto zo = z.to_vector<float>();
  for (int64_t k = 0; k < 12; ++k) EXPECT_EQ(std::isfinite(zo[static_cast<size_t>(k)]), k != 1 && k != 3) << k;
  nn::manual_seed(9);
  nn::Embedding e(6, 3);
  (e(from_vector<int64_t>({4, 1, 4})) * src).sum().backward();
  const auto g = e.weight.grad().to_vector<float>();
  // row 1 gets src row 1 (-inf first), row 4 gets rows 0 and 2 (inf, then NaN); rows 0, 2, 3, 5 stay 0
  for (int64_t k = 0; k < 18; ++k) EXPECT_EQ(std::isfinite(g[static_cast<size_t>(k)]), k != 3 && k != 13 && k != 14) << k;
  for (int64_t row : {0, 2, 3, 5}) EXPECT_EQ(g[static_cast<size_t>(row * 3)], 0.0f);
}

TEST(Scan, BitwiseTheSameOnOneAndTwoThreadsAndFusedOrNot) {
  const Tensor x = values_of({4096, 24}, 420, kFloat32) * 1000.0;
  const auto [one, two] = on_one_and_two_threads([&] {
    return std::vector<Tensor>{cumsum(x * 1.0, 0), cumsum(x.t() * 1.0, 1), cumprod(x * 0.0001 + 1.0, 0)};
  });
  EXPECT_EQ(one, two);
  expect_matches_interpreter(cumsum(x * 1.0 + 1.0, 0), 1, "cumsum of a fused chain");
}

// ---------------------------------------------------------------- gradients

#define EXPECT_GRADCHECK(...)                                                                                   \
  do {                                                                                                          \
    const GradcheckResult r_ = gradcheck(__VA_ARGS__);                                                          \
    EXPECT_TRUE(r_.ok) << r_.report;                                                                            \
  } while (0)

TEST(IndexGradients, GradcheckInF64) {
  const Tensor i = from_vector<int64_t>({2, 0, 2, 1, 2, 0}, {2, 3}); // repeats: gradients accumulate
  EXPECT_GRADCHECK([&](const Vec& v) { return (gather(v[0], 1, i) * v[1]).sum(); }, {values_of({2, 4}, 60), values_of({2, 3}, 61)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (gather(v[0], 0, i.slice(1, 0, 2)) * v[1]).sum(); },
                   {values_of({3, 2}, 62), values_of({2, 2}, 63)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (scatter_add(v[0], 1, i, v[1]) * v[2]).sum(); },
                   {values_of({2, 3}, 64), values_of({2, 4}, 65), values_of({2, 3}, 66)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (index_select(v[0], 0, from_vector<int64_t>({1, 1, 0})) * v[1]).sum(); },
                   {values_of({2, 3}, 67), values_of({3, 3}, 68)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (index_add(v[0], 0, from_vector<int64_t>({1, 1, 0}), v[1], 2.0) * v[2]).sum(); },
                   {values_of({2, 3}, 69), values_of({3, 3}, 70), values_of({2, 3}, 71)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (cumsum(v[0], 1) * v[1]).sum(); }, {values_of({3, 5}, 72), values_of({3, 5}, 73)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (cumsum(v[0], 0) * v[1]).sum(); }, {values_of({4, 3}, 82), values_of({4, 3}, 83)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (cumprod(v[0], 1) * v[1]).sum(); }, {values_of({3, 5}, 84), values_of({3, 5}, 85)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (cumprod(v[0], 0) * v[1]).sum(); }, {values_of({4, 3}, 86), values_of({4, 3}, 87)});
  // zeros in cumprod's input (one, and two in a row): the gradient divides by nothing
  const Tensor zeros_in = from_vector<double>({0.5, 0, 1.5, -2, 0.75, 1.25, 0, 0, -1, 2}, {2, 5});
  EXPECT_GRADCHECK([&](const Vec& v) { return (cumprod(v[0], 1) * v[1]).sum(); }, {zeros_in, values_of({2, 5}, 88)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (cumprod(v[0], 0) * v[1]).sum(); }, {zeros_in.t(), values_of({5, 2}, 89)});
  // second order through cumprod's gradient (itself a cumprod) and cumsum's (a reversed cumsum)
  EXPECT_GRADCHECK([&](const Vec& v) {
    const Tensor g = grad({(cumprod(v[0], 1) * v[1]).sum()}, {v[0]}, {}, false, true)[0];
    return (g * g + cumsum(g, 1)).sum();
  }, {zeros_in, values_of({2, 5}, 95)});
  // an index broadcast along the dim too (one value everywhere), and one broadcast off it
  const Tensor one = from_vector<int64_t>({2}).reshape({1, 1});
  EXPECT_GRADCHECK([&](const Vec& v) { return (gather(v[0], 1, one.expand({2, 3})) * v[1]).sum(); },
                   {values_of({2, 4}, 76), values_of({2, 3}, 77)});
  EXPECT_GRADCHECK([&](const Vec& v) { return (gather(v[0], 1, from_vector<int64_t>({3, 0, 3}, {1, 3}).expand({2, 3})) * v[1]).sum(); },
                   {values_of({2, 4}, 78), values_of({2, 3}, 79)});
  // second order: the gradient of gather is scatter_add, whose gradient is differentiable again
  EXPECT_GRADCHECK([&](const Vec& v) {
    const Tensor g = grad({(square(gather(v[0], 1, i)) * v[1]).sum()}, {v[0]}, {}, false, true)[0];
    return (g * g).sum();
  }, {values_of({2, 4}, 74), values_of({2, 3}, 75)});
}

TEST(IndexGradients, GatherGradientIsTheDefinitionsScatter) {
  const Tensor x = values_of({3, 5}, 80).requires_grad_();
  const Tensor i = from_vector<int64_t>({4, 4, 0, 1, 2, 4, 3, 3, 3}, {3, 3});
  const Tensor w = values_of({3, 3}, 81);
  (gather(x, 1, i) * w).sum().backward();
  expect_near(x.grad().to_vector<double>(), ref_scatter_add(zeros({3, 5}, kFloat64), 1, i, w), 1e-15, "grad");
}

TEST(IndexGradients, ForwardModeAgreesWithReverseMode) {
  const Tensor i = from_vector<int64_t>({2, 0, 2, 1, 2, 0}, {2, 3});
  const TensorFn fn = [&](const Vec& v) -> Vec {
    return {gather(v[0], 1, i), scatter_add(v[1], 1, i, v[0].slice(1, 0, 3)), cumsum(v[0], 0),
            index_select(v[0], 1, from_vector<int64_t>({3, 3})), cumprod(v[0], 1), cumprod(v[1], 0),
            index_add(v[1], 0, from_vector<int64_t>({1, 1}), v[0].slice(1, 1, 4))};
  };
  const Vec xs = {values_of({2, 4}, 90), values_of({2, 3}, 91)}, vs = {values_of({2, 4}, 92), values_of({2, 3}, 93)};
  auto [ys, ts] = jvp(fn, xs, vs);
  Vec us, leaves;
  double ujv = 0, jtuv = 0;
  for (size_t j = 0; j < ys.size(); ++j) {
    us.push_back(values_of(ys[j].shape(), 94 + j));
    const auto a = us[j].to_vector<double>(), b = ts[j].to_vector<double>();
    for (size_t k = 0; k < a.size(); ++k) ujv += a[k] * b[k];
  }
  for (const Tensor& x : xs) leaves.push_back(from_vector<double>(x.to_vector<double>(), x.shape()).requires_grad_());
  const Vec gs = grad(fn(leaves), leaves, us, true);
  for (size_t j = 0; j < xs.size(); ++j) {
    const auto a = gs[j].to_vector<double>(), b = vs[j].to_vector<double>();
    for (size_t k = 0; k < a.size(); ++k) jtuv += a[k] * b[k];
  }
  EXPECT_NEAR(ujv, jtuv, 1e-12 * (1 + std::abs(ujv)));
}

/// The scatter node `op` (graph/ops.def) of src at the index along dim 1, 3 places, as a tensor (its own rules:
/// scatter_reduce's amax and amin take a custom gradient instead).
Tensor scatter_node(graph::OpKind op, const Tensor& index, const Tensor& src) {
  return Tensor(graph::build::scatter_into(op, index.node(), src.node(), 1, 3), src.requires_grad());
}

TEST(IndexGradients, ScatterNodesRules) {
  // ScatterMul's, ScatterMax's and ScatterMin's VJP (gradcheck, in f64, zeros in the product's factors: one and
  // two at a place) and JVP (against the reverse mode); every place is hit (no identity in the results)
  using graph::OpKind;
  const Tensor i = from_vector<int64_t>({2, 0, 2, 1, 2, 0, 1, 0, 1, 2, 2, 2}, {2, 6});
  const Tensor distinct = values_of({2, 6}, 95);
  const Tensor zeros_in = from_vector<double>({0.0, 1.5, 0.7, -0.4, -1.1, 2.0, 0.0, 0.0, 1.3, -0.6, 0.8, 0.0}, {2, 6});
  for (OpKind op : {OpKind::ScatterMul, OpKind::ScatterMax, OpKind::ScatterMin}) {
    SCOPED_TRACE(std::string(graph::op_name(op)));
    for (bool with_zeros : {false, true}) {
      if (op != OpKind::ScatterMul && with_zeros) continue; // ties: not differentiable
      const Tensor& x = with_zeros ? zeros_in : distinct;
      EXPECT_GRADCHECK([&](const Vec& v) { return (scatter_node(op, i, v[0]) * values_of({2, 3}, 96)).sum(); }, {x});
      const TensorFn fn = [&](const Vec& v) -> Vec { return {scatter_node(op, i, v[0])}; };
      const Tensor dir = values_of({2, 6}, 97), u = values_of({2, 3}, 98);
      const auto [ys, ts] = jvp(fn, {x}, {dir});
      const Tensor leaf = from_vector<double>(x.to_vector<double>(), x.shape()).requires_grad_();
      const Vec g = grad(fn({leaf}), {leaf}, {u});
      EXPECT_NEAR((ts[0] * u).sum().item<double>(), (g[0] * dir).sum().item<double>(), 1e-12);
    }
  }
  // ties share evenly: 5 twice at place 0 of row 0, -1 three times at place 1 of row 1
  const Tensor t = from_vector<double>({5, 5, 1, 2, 3, 4, -1, -1, 0, -1, 2, 3}, {2, 6}).requires_grad_();
  const Tensor j = from_vector<int64_t>({0, 0, 1, 1, 2, 2, 1, 1, 0, 1, 2, 2}, {2, 6});
  scatter_node(OpKind::ScatterMax, j, t).sum().backward();
  EXPECT_EQ(t.grad().to_vector<double>(),
            (std::vector<double>{0.5, 0.5, 0, 1, 0, 1, 1.0 / 3, 1.0 / 3, 1, 1.0 / 3, 0, 1}));
  const Tensor t2 = t.detach().requires_grad_();
  scatter_node(OpKind::ScatterMin, j, t2).sum().backward();
  EXPECT_EQ(t2.grad().to_vector<double>(),
            (std::vector<double>{0.5, 0.5, 1, 0, 1, 0, 1.0 / 3, 1.0 / 3, 1, 1.0 / 3, 1, 0}));
}

// ---------------------------------------------------------------- Embedding

TEST(EmbeddingByGather, RowsAreTheWeightsRowsExactly) {
  nn::manual_seed(3);
  nn::Embedding e(11, 4);
  const Tensor i = from_vector<int64_t>({10, 0, 3, 3, 7, 1}, {2, 3});
  const Tensor rows = e(i);
  EXPECT_EQ(rows.shape(), (IntList{2, 3, 4}));
  const auto w = e.weight.to_vector<float>();
  const auto r = rows.to_vector<float>();
  const auto iv = i.to_vector<int64_t>();
  for (size_t k = 0; k < iv.size(); ++k)
    for (size_t j = 0; j < 4; ++j) EXPECT_EQ(r[k * 4 + j], w[static_cast<size_t>(iv[k]) * 4 + j]);
  // an infinite weight no longer spoils other rows (the one-hot product made 0 * inf = NaN)
  e.weight.assign(where(arange(11).reshape({11, 1}) == 5, full({11, 4}, INFINITY, kFloat32), e.weight));
  for (float v : e(from_vector<int64_t>({0, 1})).to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
}

TEST(EmbeddingByGather, GradientAddsEachUseAndSkipsThePaddingRow) {
  nn::manual_seed(4);
  for (std::optional<int64_t> pad : {std::optional<int64_t>{}, std::optional<int64_t>{2}, std::optional<int64_t>{-1}}) {
    nn::Embedding e(5, 3, pad);
    const int64_t p = pad ? (*pad + 5) % 5 : -1;
    if (pad) {
      EXPECT_EQ(*e.padding_idx(), p);
      for (int j = 0; j < 3; ++j) EXPECT_EQ(e.weight.to_vector<float>()[static_cast<size_t>(p * 3 + j)], 0.0f);
    }
    const Tensor i = from_vector<int64_t>({2, 4, 2, 0, 4, 4});
    const Tensor up = values_of({6, 3}, 5, kFloat32);
    (e(i) * up).sum().backward();
    const auto g = e.weight.grad().to_vector<float>();
    const auto u = up.to_vector<float>();
    for (int64_t row = 0; row < 5; ++row)
      for (int j = 0; j < 3; ++j) {
        double want = 0;
        for (int k = 0; k < 6; ++k)
          if (i.to_vector<int64_t>()[k] == row && row != p) want += u[static_cast<size_t>(k * 3 + j)];
        EXPECT_NEAR(g[static_cast<size_t>(row * 3 + j)], want, 1e-5) << "row " << row;
      }
  }
}


TEST(EmbeddingByGather, GradientIsBitwiseTheOneHotProductsOfBefore) {
  nn::manual_seed(6);
  nn::Embedding e(37, 20);
  const Tensor i = indices_of({3, 50}, 37, 7);
  const Tensor up = values_of({3, 50, 20}, 8, kFloat32);
  (e(i) * up).sum().backward();
  // the weight gradient of the one-hot product Embedding computed before: one_hot^T @ upstream
  const Tensor oh = nn::functional::one_hot(i.reshape({150}), 37).to(kFloat32);
  const Tensor before = matmul(oh.t(), up.reshape({150, 20}));
  EXPECT_EQ(e.weight.grad().to_vector<float>(), before.to_vector<float>());
}

// ---------------------------------------------------------------- errors

/// The message of the kiln::Error that f throws ("" when none), with its op.
std::pair<std::string, std::string> error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.op(), e.what()};
  }
  return {"", ""};
}

void expect_error(const std::function<void()>& f, const std::string& op, const std::vector<std::string>& parts,
                  int line) {
  const auto [got_op, msg] = error_of(f);
  EXPECT_EQ(got_op, op) << msg;
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
  EXPECT_NE(msg.find("test_indexops.cpp:" + std::to_string(line)), std::string::npos) << msg;
}

TEST(IndexErrors, BadIndicesNameTheOpThePositionOrShapeAndTheLine) {
  const Tensor x = values_of({3, 5}, 1);
  const Tensor bad = from_vector<int64_t>({0, 1, 5, 2}, {2, 2});
  expect_error([&] { (void)gather(x, 1, bad); }, "gather", {"index 5 at position [1, 0]", "dim 1", "[0, 5)"}, __LINE__);
  const Tensor ints = zeros({3}, kInt64), one = from_vector<int64_t>({1});
  expect_error([&] { (void)index_add(ints, 0, one, one, 2.5); }, "index_add", {"alpha 2.500000 is not an integer"}, __LINE__);
  expect_error([&] { (void)gather(x, 1, from_vector<int64_t>({0, -6}, {1, 2})); }, "gather", {"index -6", "[0, 5)"}, __LINE__);
  // computed indices are checked in the kernel and reported when the result is read
  const int line = __LINE__ + 1;
  const Tensor y = gather(x, 1, lazy(bad));
  expect_error([&] { (void)y.to_vector<double>(); }, "gather", {"index 5", "(index [2, 2])", "[0, 5)"}, line);
  // also where the address does not depend on the index: one row, or a broadcast one
  const int line1 = __LINE__ + 1;
  const Tensor one_row = gather(values_of({1, 5}, 9), 0, lazy(from_vector<int64_t>({0, 1}, {1, 2})));
  expect_error([&] { (void)one_row.to_vector<double>(); }, "gather", {"index 1", "[0, 1)"}, line1);
  const int line3 = __LINE__ + 1;
  const Tensor spread = gather(values_of({1, 5}, 9).expand({4, 5}), 0, lazy(from_vector<int64_t>({3, 4}, {1, 2})));
  expect_error([&] { (void)spread.to_vector<double>(); }, "gather", {"index 4", "[0, 4)"}, line3);
  const int line2 = __LINE__ + 1;
  const Tensor z = scatter_add(zeros({3, 5}, kFloat64), 0, lazy(from_vector<int64_t>({3, 0}, {1, 2})), values_of({1, 2}, 2));
  expect_error([&] { (void)z.to_vector<double>(); }, "scatter_add", {"index 3", "[0, 3)"}, line2);
  expect_error([&] { (void)index_select(x, 0, from_vector<int64_t>({1, -1})); }, "index_select",
               {"index -1 at position [1]", "[0, 3)"}, __LINE__ - 1);
  expect_error([&] { (void)index_add(x, 1, from_vector<int64_t>({9}), values_of({3, 1}, 3)); }, "index_add",
               {"index 9", "[0, 5)"}, __LINE__ - 1);
  nn::Embedding e(4, 2);
  expect_error([&] { (void)e(from_vector<int64_t>({3, 4})); }, "Embedding", {"index 4 at position [1]", "[0, 4)"}, __LINE__);
}

TEST(IndexErrors, IndicesOfACompiledStepAreChecked) {
  nn::manual_seed(7);
  nn::Embedding e(6, 3, 0);
  optim::SGD opt(e.parameters(), {.lr = 0.1});
  int line = 0;
  auto step = compile([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    line = __LINE__ + 1;
    Tensor loss = (e(a[0]) * a[1]).sum();
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  });
  const Tensor up = values_of({2, 3}, 8, kFloat32);
  (void)step({from_vector<int64_t>({1, 0}), up});
  const std::vector<float> weight = e.weight.to_vector<float>();
  EXPECT_EQ(std::vector<float>(weight.begin(), weight.begin() + 3), std::vector<float>(3, 0.0f)) << "the padding row";
  for (int64_t bad : {int64_t{6}, int64_t{-1}}) {
    expect_error([&] { (void)step({from_vector<int64_t>({bad, 2}), up}); }, "Embedding",
                 {"index " + std::to_string(bad), "[0, 6)"}, line);
    EXPECT_EQ(e.weight.to_vector<float>(), weight) << "a failed step must not update the parameters";
  }
  (void)step({from_vector<int64_t>({0, 5}), up});
  const std::vector<float> after = e.weight.to_vector<float>();
  EXPECT_EQ(std::vector<float>(after.begin(), after.begin() + 3), std::vector<float>(3, 0.0f)) << "no update";
  EXPECT_NE(std::vector<float>(after.begin() + 15, after.end()), std::vector<float>(weight.begin() + 15, weight.end()));
}

TEST(IndexErrors, BadDimsDtypesAndShapes) {
  const Tensor x = values_of({3, 5}, 1), i = from_vector<int64_t>({0, 1}, {1, 2});
  expect_error([&] { (void)gather(x, 2, i); }, "gather", {"dim 2", "rank 2"}, __LINE__);
  expect_error([&] { (void)gather(x, -3, i); }, "gather", {"dim -3"}, __LINE__);
  expect_error([&] { (void)gather(x, 1, i.to(kFloat32)); }, "gather", {"integer", "f32[1,2]"}, __LINE__);
  expect_error([&] { (void)gather(x, 1, from_vector<int64_t>({0})); }, "gather", {"rank"}, __LINE__);
  expect_error([&] { (void)gather(x, 1, zeros({4, 1}, kInt64)); }, "gather", {"larger than the input along dim 0"}, __LINE__);
  expect_error([&] { (void)index_select(x, 0, zeros({1, 1}, kInt64)); }, "index_select", {"1-d"}, __LINE__);
  expect_error([&] { (void)scatter_add(x, 0, i, values_of({1, 2}, 2, kFloat32)); }, "scatter_add", {"dtype"}, __LINE__);
  expect_error([&] { (void)scatter_add(x, 0, i, values_of({1, 1}, 2)); }, "scatter_add", {"larger than src"}, __LINE__);
  expect_error([&] { (void)index_add(x, 0, from_vector<int64_t>({1}), values_of({2, 5}, 2)); }, "index_add",
               {"source must be [1, 5]"}, __LINE__ - 1);
  expect_error([&] { (void)cumsum(x, 2); }, "cumsum", {"dim 2"}, __LINE__);
  for (bool computed : {false, true}) { // an empty dim has no valid index, computed or not
    const Tensor idx = computed ? lazy(zeros({1, 2}, kInt64)) : zeros({1, 2}, kInt64);
    expect_error([&] { (void)gather(zeros({0, 5}), 0, idx); }, "gather", {"the dim is empty"}, __LINE__);
    expect_error([&] { (void)index_select(zeros({3, 0}), 1, idx.reshape({2})); }, "index_select", {"the dim is empty"}, __LINE__);
    expect_error([&] { (void)scatter_add(zeros({0, 5}), 0, idx, zeros({1, 2})); }, "scatter_add", {"the dim is empty"}, __LINE__);
  }
  expect_error([&] { (void)nn::Embedding(4, 2, 4); }, "Embedding", {"padding_idx 4"}, __LINE__);
  expect_error([&] { (void)nn::Embedding(4, 2)(values_of({2}, 1, kFloat32)); }, "Embedding", {"integer", "f32[2]"}, __LINE__);
}

} // namespace
} // namespace kiln

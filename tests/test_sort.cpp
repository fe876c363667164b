// sort, argsort, topk and msort (kiln/indexops.h): values and indices against PyTorch 1.13
// (tests/pytorch_sort_table.inc, from tests/tools/pytorch_sort_table.py: torch.sort(stable=True),
// since kiln's sort is always stable; rows of 1000 to 70000 elements by a hash of the indices), the
// f64 interpreter against the JIT (fused and unfused bitwise equal), gradcheck of the sorted and
// top-k values, forward mode against reverse mode, fused / unfused / compile() agreement, one and two
// threads, the fusion boundary (the keys read from a buffer, the values' consumers fused with the
// gather), zero-size, size-1 and 0-d inputs, and the errors. The CUDA source of the argsort kernel
// is proven in test_cuda.cpp (CudaShimSort: the shim against the LLVM path bitwise; CudaNvrtc), its
// kernel IR text in tests/codegen/argsort_*.graph (golden and parse round trip).

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/lower.h"
#include "graph/build.h"
#include "graph/interpret.h"
#include "kiln/kiln.h"
#include "kiln/options.h"
#include "runtime/executor.h"
#include "tests/error_of.h"
#include "tests/random_graph.h"
#include "tests/table_checks.h"

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct SortRow {
  const char* name;
  const char* dtype;
  IntList shape;
  int64_t dim;
  bool descending;
  std::vector<double> input, values;
  std::vector<int64_t> indices;
};

struct TopkRow {
  const char* name;
  const char* dtype;
  IntList shape;
  int64_t dim, k;
  bool largest;
  std::vector<double> input, values;
  std::vector<int64_t> indices;
};

struct LongRow {
  const char* name;
  const char* dtype;
  IntList shape;
  int64_t dim;
  bool descending;
  uint64_t seed, index_hash;
  std::vector<int64_t> first;
  uint64_t topk_hash;
};

#include "tests/pytorch_sort_table.inc"

using Vec = std::vector<Tensor>;

DType dtype_of(const std::string& s) {
  if (s == "f32") return kFloat32;
  if (s == "f64") return kFloat64;
  if (s == "i32") return kInt32;
  if (s == "i64") return kInt64;
  EXPECT_EQ(s, "bool");
  return kBool;
}

using test::tensor_of;
using test::numel_of;

/// tests/tools/pytorch_sort_table.py's gen(): many ties, and NaN, +-inf and -0.0 in floats.
std::vector<double> gen(const std::string& dtype, int64_t n, uint64_t seed) {
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t u = (static_cast<uint64_t>(i) * 2654435761ull + seed * 40503ull) & 0xffffffffull;
    const double v = static_cast<double>(static_cast<int64_t>((u >> 10) % 2001) - 1000);
    if (dtype == "bool") out.push_back(static_cast<double>((u >> 7) & 1));
    else if (dtype == "i32" || dtype == "i64") out.push_back(v * (dtype == "i64" ? 1000003 : 1));
    else if (u % 97 == 5) out.push_back(kNaN);
    else if (u % 89 == 3) out.push_back(kInf);
    else if (u % 83 == 2) out.push_back(-kInf);
    else if (u % 79 == 1) out.push_back(-0.0);
    else out.push_back(v / 4.0);
  }
  return out;
}

/// The script's fnv(): FNV-1a over 64-bit values.
uint64_t fnv(const std::vector<int64_t>& v) {
  uint64_t h = 14695981039346656037ull;
  for (int64_t x : v) h = (h ^ static_cast<uint64_t>(x)) * 1099511628211ull;
  return h;
}

/// The f64 bit patterns of values (every NaN as one), as the script's bits().
std::vector<int64_t> bits_of(const std::vector<double>& v) {
  std::vector<int64_t> out;
  for (double x : v) out.push_back(std::bit_cast<int64_t>(std::isnan(x) ? kNaN : x));
  return out;
}

/// Equal as torch's values are: NaN to NaN, and the same sign of zero (a sort moves -0.0 as it is) unless
/// `any_zero` (torch.topk's order of ties, so of -0.0 and +0.0, is not the stable sort's).
void expect_same_values(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                        bool any_zero = false) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "]: " << got[i];
    else EXPECT_TRUE(got[i] == want[i] && (any_zero || std::signbit(got[i]) == std::signbit(want[i])))
        << what << " [" << i << "]: " << got[i] << " vs " << want[i];
  }
}

std::vector<unsigned char> realized_bytes(const graph::NodeRef& n) {
  const auto* p = static_cast<const unsigned char*>(n->realized()->data());
  return {p, p + graph::numel(n->shape) * dtype_size(n->dtype)};
}

/// t realized by the JIT equals the f64 interpreter on the same graph exactly (indices), and the
/// other fusion mode gives the same bits.
void expect_matches_interpreter(const Tensor& t, const std::string& what) {
  const graph::NodeRef node = t.node();
  const std::vector<graph::NodeRef> copy = testing::clone_graph({node});
  const graph::InterpretResult want = graph::interpret_one(node);
  ASSERT_EQ(want.shape, t.shape()) << what;
  expect_same_values(t.to_vector<double>(), want.values, what + " (interpreter)");
  const bool fusion = options().fusion;
  options().fusion = !fusion;
  runtime::realize(copy);
  options().fusion = fusion;
  EXPECT_EQ(realized_bytes(copy[0]), realized_bytes(node)) << what << ": fused and unfused differ";
}

// ---------------------------------------------------------------- against PyTorch

TEST(SortTorch, ValuesAndIndicesAreTorchsStableSort) {
  for (const SortRow& r : kSortTable) {
    SCOPED_TRACE(r.name);
    const Tensor x = tensor_of(r.input, dtype_of(r.dtype), r.shape);
    const auto [values, indices] = sort(x, r.dim, r.descending);
    EXPECT_EQ(values.shape(), r.shape);
    EXPECT_EQ(values.dtype(), x.dtype());
    EXPECT_EQ(indices.dtype(), kInt64);
    EXPECT_EQ(indices.shape(), r.shape);
    expect_same_values(values.to_vector<double>(), r.values, "values");
    EXPECT_EQ(indices.to_vector<int64_t>(), r.indices);
    // the other spellings: argsort, stable = true, the Tensor methods
    EXPECT_EQ(argsort(x, r.dim, r.descending).to_vector<int64_t>(), r.indices);
    EXPECT_EQ(x.argsort(r.dim, r.descending, true).to_vector<int64_t>(), r.indices);
    const auto [v2, i2] = x.sort(r.dim, r.descending, /*stable=*/true);
    expect_same_values(v2.to_vector<double>(), r.values, "Tensor::sort values");
    EXPECT_EQ(i2.to_vector<int64_t>(), r.indices);
  }
}

TEST(SortTorch, TopkValuesAreTorchsAndIndicesTheStableSorts) {
  for (const TopkRow& r : kTopkTable) {
    SCOPED_TRACE(r.name);
    const Tensor x = tensor_of(r.input, dtype_of(r.dtype), r.shape);
    for (bool sorted : {true, false}) { // the order is the sorted one either way
      const auto [values, indices] = topk(x, r.k, r.dim, r.largest, sorted);
      IntList want = r.shape;
      if (!want.empty()) want[static_cast<size_t>(r.dim < 0 ? r.dim + static_cast<int64_t>(want.size()) : r.dim)] = r.k;
      EXPECT_EQ(values.shape(), want);
      EXPECT_EQ(indices.shape(), want);
      EXPECT_EQ(indices.dtype(), kInt64);
      expect_same_values(values.to_vector<double>(), r.values, "values", true);
      EXPECT_EQ(indices.to_vector<int64_t>(), r.indices);
      // the stable sort's first k exactly (its -0.0 and +0.0 in input order)
      if (x.dim() > 0)
        expect_same_values(values.to_vector<double>(), sort(x, r.dim, r.largest).first.narrow(r.dim, 0, r.k).to_vector<double>(),
                           "the sort's first k");
    }
    const auto [v2, i2] = x.topk(r.k, r.dim, r.largest);
    expect_same_values(v2.to_vector<double>(), r.values, "Tensor::topk values", true);
    EXPECT_EQ(i2.to_vector<int64_t>(), r.indices);
  }
}

// Rows longer than any merge run (1000, 1001, 70000 elements) and columns of 1000 (dim 0): the
// indices hash to the stable sort's, and topk's values to torch.topk's.
TEST(SortTorch, LongRowsMatchTorch) {
  for (const LongRow& r : kLongTable) {
    SCOPED_TRACE(r.name);
    const Tensor x = tensor_of(gen(r.dtype, numel_of(r.shape), r.seed), dtype_of(r.dtype), r.shape);
    const auto [values, indices] = sort(x, r.dim, r.descending);
    const std::vector<int64_t> got = indices.to_vector<int64_t>();
    EXPECT_EQ(std::vector<int64_t>(got.begin(), got.begin() + 8), r.first);
    EXPECT_EQ(fnv(got), r.index_hash);
    // the values are in order along the dim (NaN last ascending, first descending)
    const auto v = values.to_vector<double>();
    const int64_t d = r.dim < 0 ? r.dim + static_cast<int64_t>(r.shape.size()) : r.dim;
    int64_t inner = 1;
    for (size_t k = static_cast<size_t>(d) + 1; k < r.shape.size(); ++k) inner *= r.shape[k];
    const int64_t n = r.shape[static_cast<size_t>(d)];
    auto le = [](double a, double b) { return std::isnan(b) || (!std::isnan(a) && a <= b); }; // NaN largest
    for (size_t k = 0; k + static_cast<size_t>(inner) < v.size(); ++k) {
      if ((static_cast<int64_t>(k) / inner) % n == n - 1) continue; // the next along the dim is another column's
      const double a = v[k], b = v[k + static_cast<size_t>(inner)];
      ASSERT_TRUE(r.descending ? le(b, a) : le(a, b)) << "out of order at " << k << ": " << a << ", " << b;
    }
    if (r.dtype != std::string("bool")) {
      const auto [tv, ti] = topk(x, kLongK, r.dim, r.descending);
      EXPECT_EQ(fnv(bits_of(tv.to_vector<double>())), r.topk_hash);
      EXPECT_EQ(ti.to_vector<int64_t>(), indices.narrow(r.dim, 0, kLongK).to_vector<int64_t>());
    }
  }
}

TEST(SortTorch, MsortIsSortAlongDimZero) {
  const Tensor x = tensor_of(gen("f32", 35, 3), kFloat32, {7, 5});
  expect_same_values(msort(x).to_vector<double>(), sort(x, 0).first.to_vector<double>(), "msort");
  expect_same_values(x.msort().to_vector<double>(), sort(x, 0).first.to_vector<double>(), "Tensor::msort");
  EXPECT_EQ(msort(scalar_tensor(3.0)).item<float>(), 3.0f);
}

// ---------------------------------------------------------------- the interpreter, modes, threads

TEST(Sort, TheInterpreterAgreesWithTheJit) {
  for (const char* dt : {"f32", "f64", "i32", "i64", "bool"}) {
    SCOPED_TRACE(dt);
    const Tensor x = tensor_of(gen(dt, 6 * 41, 11), dtype_of(dt), {6, 41});
    for (bool desc : {false, true}) {
      expect_matches_interpreter(argsort(x, 1, desc), "argsort dim 1");
      expect_matches_interpreter(argsort(x, 0, desc), "argsort dim 0");
      expect_matches_interpreter(argsort(x.t(), -1, desc), "argsort of a transposed view");
      expect_matches_interpreter(sort(x, 1, desc).first, "values");
      if (std::string(dt) != "bool") expect_matches_interpreter(topk(x, 7, 1, desc).first, "topk values");
    }
  }
  // keys computed by a fused chain (exact in f32: the interpreter's f64 then sorts the same keys)
  const Tensor y = tensor_of(gen("f32", 5 * 33, 12), kFloat32, {5, 33});
  expect_matches_interpreter(argsort(y * 2.0 + 1.0, 1), "argsort of a computed value");
  expect_matches_interpreter(sort(abs(y) - 3.0, 0, true).first * 4.0, "values times a constant");
}

TEST(Sort, EdgeShapes) {
  // zero-size dims, along the dim and off it
  for (const IntList& s : {IntList{3, 0}, IntList{0, 4}, IntList{0}, IntList{2, 0, 3}}) {
    const Tensor x = zeros(s);
    const auto [v, i] = sort(x, -1);
    EXPECT_EQ(v.shape(), s);
    EXPECT_EQ(i.shape(), s);
    EXPECT_TRUE(v.to_vector<float>().empty());
    EXPECT_TRUE(i.to_vector<int64_t>().empty());
    EXPECT_EQ(topk(x, 0, 0).first.numel(), 0);
  }
  // a dim of size 1: index 0 everywhere, the values themselves
  const Tensor col = from_vector<double>({3, kNaN, -1}, {3, 1});
  EXPECT_EQ(argsort(col, 1).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  expect_same_values(sort(col, -1, true).first.to_vector<double>(), {3, kNaN, -1}, "size-1 dim");
  // 0-d: itself and index 0 (topk: k 0 or 1, as PyTorch)
  for (bool desc : {false, true}) {
    const auto [v, i] = sort(scalar_tensor(-2.5, kFloat64), 0, desc);
    EXPECT_EQ(v.dim(), 0);
    EXPECT_EQ(v.item<double>(), -2.5);
    EXPECT_EQ(i.dim(), 0);
    EXPECT_EQ(i.item<int64_t>(), 0);
  }
  EXPECT_EQ(argsort(scalar_tensor(7, kInt32), -1).item<int64_t>(), 0);
  EXPECT_EQ(topk(scalar_tensor(4.0), 0).first.item<float>(), 4.0f);
  // one element
  EXPECT_EQ(argsort(from_vector<float>({1.5f}), 0, true).to_vector<int64_t>(), (std::vector<int64_t>{0}));
  // many short rows (more columns than one chunk), every dtype
  const Tensor many = tensor_of(gen("i32", 4000 * 3, 13), kInt32, {4000, 3});
  expect_matches_interpreter(argsort(many, 1, true), "short rows");
}

TEST(Sort, BitwiseTheSameOnOneAndTwoThreads) {
  const Tensor x = tensor_of(gen("f32", 300 * 77, 14), kFloat32, {300, 77});
  auto run = [&] {
    const auto [v, i] = sort(x, 1);
    const auto [v0, i0] = sort(x, 0, true);
    return std::vector<std::vector<int64_t>>{i.to_vector<int64_t>(), i0.to_vector<int64_t>(), topk(x, 9, 0).second.to_vector<int64_t>()};
  };
  std::vector<std::vector<int64_t>> one, two;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    one = run();
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    two = run();
  }
  EXPECT_EQ(one, two);
}

TEST(Sort, FusedUnfusedAndCompiledAgree) {
  const test::Program program = [](const Vec& in) {
    const Tensor& x = in[0];
    const auto [v, i] = sort(x * 2.0 - 1.0, 1, true);
    const auto [tv, ti] = topk(x, 3, 0, false);
    const Tensor loss = (v * in[1]).sum() + exp(tv).sum();
    return Vec{v, i, exp(v) + 1.0, tv, ti, argsort(x, 0), grad({loss}, {x})[0]};
  };
  test::expect_fused_unfused_and_compiled_agree(program, [](uint64_t seed) {
    return Vec{randn({6, 13}, seed, kFloat32).requires_grad_(), randn({6, 13}, seed + 1, kFloat32)};
  });
}

// ---------------------------------------------------------------- gradients

TEST(SortGradients, GradcheckInF64) {
  using test::expect_gradcheck;
  using test::rnd;
  expect_gradcheck([](const Vec& v) { return (sort(v[0], 1).first * v[1]).sum(); }, {rnd({3, 6}, 1), rnd({3, 6}, 2)});
  expect_gradcheck([](const Vec& v) { return (sort(v[0], 0, true).first * v[1]).sum(); }, {rnd({5, 4}, 3), rnd({5, 4}, 4)});
  expect_gradcheck([](const Vec& v) { return (v[0].sort(-1, true).first.square() * v[1]).sum(); }, {rnd({2, 3, 5}, 5), rnd({2, 3, 5}, 6)});
  expect_gradcheck([](const Vec& v) { return (topk(v[0], 3, 1).first * v[1]).sum(); }, {rnd({4, 7}, 7), rnd({4, 3}, 8)});
  expect_gradcheck([](const Vec& v) { return (topk(v[0], 2, 0, false).first * v[1]).sum(); }, {rnd({6, 3}, 9), rnd({2, 3}, 10)});
  expect_gradcheck([](const Vec& v) { return (msort(v[0]) * v[1]).sum(); }, {rnd({4, 2}, 11), rnd({4, 2}, 12)});
  // second order: the gradient is a scatter_add at the sort's indices, differentiable again
  expect_gradcheck([](const Vec& v) {
    const Tensor g = grad({(square(sort(v[0], 1).first) * v[1]).sum()}, {v[0]}, {}, false, true)[0];
    return (g * g).sum();
  }, {rnd({3, 5}, 13), rnd({3, 5}, 14)});
}

TEST(SortGradients, TheGradientGoesWhereEachValueCameFrom) {
  const Tensor x = from_vector<double>({3, 1, 2, 1, kNaN}, {5}).requires_grad_();
  const Tensor w = from_vector<double>({10, 20, 30, 40, 50});
  (sort(x).first * w).sum().backward(); // order: 1 (1), 1 (3), 2 (2), 3 (0), NaN (4)
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{40, 10, 30, 20, 50}));
  const Tensor y = from_vector<double>({3, 1, 2, 5}).requires_grad_();
  (topk(y, 2).first * from_vector<double>({7, 9})).sum().backward(); // 5 (3), 3 (0)
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{9, 0, 0, 7}));
  EXPECT_FALSE(argsort(y).requires_grad());
  EXPECT_FALSE(sort(y).second.requires_grad());
  EXPECT_TRUE(sort(y).first.requires_grad());
}

TEST(SortGradients, ForwardModeAgreesWithReverseMode) {
  const TensorFn fn = [](const Vec& v) -> Vec { return {sort(v[0], 1).first, topk(v[0], 2, 0, true).first, msort(v[0])}; };
  const Vec xs = {test::rnd({3, 4}, 20)}, vs = {test::rnd({3, 4}, 21)};
  auto [ys, ts] = jvp(fn, xs, vs);
  Vec us;
  double ujv = 0, jtuv = 0;
  for (size_t j = 0; j < ys.size(); ++j) {
    us.push_back(test::rnd(ys[j].shape(), 22 + j));
    const auto a = us[j].to_vector<double>(), b = ts[j].to_vector<double>();
    for (size_t k = 0; k < a.size(); ++k) ujv += a[k] * b[k];
  }
  const Tensor leaf = from_vector<double>(xs[0].to_vector<double>(), xs[0].shape()).requires_grad_();
  const Vec gs = grad(fn({leaf}), {leaf}, us, true);
  const auto a = gs[0].to_vector<double>(), b = vs[0].to_vector<double>();
  for (size_t k = 0; k < a.size(); ++k) jtuv += a[k] * b[k];
  EXPECT_NEAR(ujv, jtuv, 1e-12 * (1 + std::abs(ujv)));
}

// ---------------------------------------------------------------- kernels

// One argsort kernel reading the keys from a buffer (a computed input gets one of its own); the
// values' gather and what uses them fuse into one kernel after it.
TEST(SortKernels, TheKeysHaveABufferAndTheValuesFuseWithTheirUsers) {
  const Tensor x = randn({8, 50}, 3);
  const auto [v, i] = sort(x * 2.0, 1);
  const Tensor y = exp(v) + 1.0;
  const codegen::Schedule s = codegen::schedule({y.node().get()}, {true, codegen::Target::baseline_cpu()});
  ASSERT_EQ(s.launches.size(), 3u); // x * 2, the argsort, exp(gather) + 1
  EXPECT_EQ(s.launches[1].kernel.form, codegen::KernelForm::Scan);
  ASSERT_TRUE(s.launches[1].kernel.scan && s.launches[1].kernel.scan->sort);
  EXPECT_NE(s.launches[1].kernel.name.find("argsort"), std::string::npos) << s.launches[1].kernel.name;
  EXPECT_EQ(s.launches[1].inputs.size(), 1u);
  EXPECT_EQ(codegen::sort_scratch_bytes(s.launches[1].kernel, s.launches[1].params),
            codegen::sort_scratch(kFloat32, 50).bytes + 64);
  bool why = false;
  for (const codegen::FusionDecision& d : s.decisions) why = why || d.text().find("an argsort's keys") != std::string::npos;
  EXPECT_TRUE(why) << "the keys' boundary names its reason";
  // a view of a realized tensor is read in place: the argsort alone, then the gather
  realize({x});
  const codegen::Schedule t = codegen::schedule({sort(x.t(), 0).first.node().get()}, {true, codegen::Target::baseline_cpu()});
  EXPECT_EQ(t.launches.size(), 2u);
}

TEST(SortKernels, TheKernelTextParsesBack) {
  for (bool desc : {false, true}) {
    const Tensor x = from_vector<float>(std::vector<float>(36, 1.0f), {4, 9}); // an input: no kernel of its own
    const codegen::Schedule s = codegen::schedule({argsort(x, 0, desc).node().get()}, {true, codegen::Target::baseline_cpu()});
    ASSERT_EQ(s.launches.size(), 1u);
    const std::string text = codegen::print_kernel(s.launches[0].kernel);
    EXPECT_NE(text.find(desc ? "argsort descending f32" : "argsort f32"), std::string::npos) << text;
    codegen::Kernel k = codegen::parse_kernel(text);
    EXPECT_EQ(codegen::print_kernel(k), text);
    ASSERT_TRUE(k.scan);
    EXPECT_TRUE(k.scan->sort);
    EXPECT_EQ(k.scan->descending, desc);
  }
}

// ---------------------------------------------------------------- errors

TEST(SortErrors, BadDimsAndKNameTheOpTheShapeAndTheLine) {
  const Tensor x = randn({3, 5}, 1);
  const std::string file = __FILE__;
  test::expect_error_at([&] { (void)sort(x, 2); }, file, __LINE__, "sort", {"dim 2", "rank 2"});
  test::expect_error_at([&] { (void)x.sort(-3); }, file, __LINE__, "sort", {"dim -3"});
  test::expect_error_at([&] { (void)argsort(x, 5, true); }, file, __LINE__, "argsort", {"dim 5"});
  test::expect_error_at([&] { (void)sort(scalar_tensor(1.0), 1); }, file, __LINE__, "sort", {"dim 1", "rank 0"});
  test::expect_error_at([&] { (void)msort(zeros({0})), (void)x.msort(), (void)msort(Tensor()); }, file, __LINE__, "msort",
                        {"undefined"});
  test::expect_error_at([&] { (void)topk(x, 6); }, file, __LINE__, "topk", {"k = 6", "dim 1 of extent 5", "[0, 5]", "f32[3,5]"});
  test::expect_error_at([&] { (void)x.topk(-1, 0); }, file, __LINE__, "topk", {"k = -1", "dim 0 of extent 3", "f32[3,5]"});
  test::expect_error_at([&] { (void)topk(x, 1, 2); }, file, __LINE__, "topk", {"dim 2"});
  test::expect_error_at([&] { (void)topk(scalar_tensor(1.0), 2); }, file, __LINE__, "topk", {"k = 2", "[0, 1]"});
  test::expect_error_at([&] { (void)topk(zeros({3}, kBool), 1); }, file, __LINE__, "topk", {"bool"});
  test::expect_error_at([&] { (void)sort(Tensor()); }, file, __LINE__, "sort", {"undefined"});
}

} // namespace
} // namespace kiln

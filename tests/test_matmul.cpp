// Matmul through the public API: against an f64 (or exact integer) reference over
// odd shapes, transposed operands and batches; and bitwise reproducible across
// thread counts (different chunkings of the domain) and with fusion on and off.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "graph/node.h"
#include "kiln/kiln.h"
#include "kiln/options.h"

using namespace kiln;

namespace {

const std::vector<int64_t> kSizes{1, 7, 63, 65, 127, 300};

/// Host data: standard normal for floats, small integers (exact sums) for ints.
template <class T> std::vector<T> host_data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(std::is_floating_point_v<T> ? normal(rng) : std::round(3 * normal(rng)));
  return v;
}

/// A logical [rows, cols] operand; stored transposed ([cols, rows], viewed with .t()) when `t`.
template <class T> struct Operand {
  int64_t rows, cols;
  bool t;
  std::vector<T> data;
  T at(int64_t r, int64_t c) const { return t ? data[c * rows + r] : data[r * cols + c]; }
  Tensor tensor() const { return t ? from_vector(data, {cols, rows}).t() : from_vector(data, {rows, cols}); }
};

template <class T> Operand<T> operand(int64_t rows, int64_t cols, bool t, uint32_t seed) {
  return {rows, cols, t, host_data<T>(rows * cols, seed)};
}

/// Checks a @ b against a reference in f64 (floats: within k eps sum|a b|) or exactly (ints).
template <class T> void check_product(const Operand<T>& a, const Operand<T>& b) {
  const std::vector<T> got = matmul(a.tensor(), b.tensor()).template to_vector<T>();
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  ASSERT_EQ(static_cast<int64_t>(got.size()), m * n);
  const double eps = std::numeric_limits<T>::epsilon();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int64_t q = 0; q < k; ++q) {
        ref += static_cast<double>(a.at(i, q)) * static_cast<double>(b.at(q, j));
        mag += std::abs(static_cast<double>(a.at(i, q)) * static_cast<double>(b.at(q, j)));
      }
      const double g = static_cast<double>(got[i * n + j]);
      const bool ok = std::is_floating_point_v<T> ? std::abs(g - ref) <= (k + 1) * eps * mag : g == ref;
      if (!ok)
        FAIL() << m << "x" << k << "x" << n << (a.t ? " At" : "") << (b.t ? " Bt" : "") << " at " << i << "," << j
               << ": " << g << " vs " << ref;
    }
}

/// Every (m, k, n) from `sizes`, each operand plain and transposed.
template <class T> void check_shapes(const std::vector<int64_t>& sizes) {
  uint32_t seed = 1;
  for (int64_t m : sizes)
    for (int64_t k : sizes)
      for (int64_t n : sizes)
        for (int tr = 0; tr < 4; ++tr, seed += 2)
          check_product(operand<T>(m, k, tr & 1, seed), operand<T>(k, n, tr & 2, seed + 1));
}

/// Bit patterns of the results of f(), for bitwise comparison.
template <class T> std::vector<T> run_f(const std::function<Tensor()>& f) { return f().template to_vector<T>(); }

template <class T> void expect_bitwise_equal(const std::vector<T>& x, const std::vector<T>& y, const std::string& what) {
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::memcmp(&x[i], &y[i], sizeof(T)), 0) << what << " at " << i << ": " << x[i] << " vs " << y[i];
}

/// Products whose bits must not depend on threads or fusion: plain and transposed
/// operands, odd sizes, a batch, and a bias + relu epilogue. Each call builds fresh
/// inputs, so every run computes anew.
template <class T> std::vector<std::function<Tensor()>> reproducibility_cases() {
  std::vector<std::function<Tensor()>> cases;
  for (auto [m, k, n] : {std::array<int64_t, 3>{65, 300, 127}, {300, 63, 7}, {7, 127, 300}, {128, 784, 256}})
    for (int tr = 0; tr < 4; ++tr)
      cases.push_back([=] {
        return matmul(operand<T>(m, k, tr & 1, 11).tensor(), operand<T>(k, n, tr & 2, 12).tensor());
      });
  cases.push_back([] {
    Tensor a = from_vector(host_data<T>(3 * 65 * 127, 13), {3, 65, 127});
    Tensor b = from_vector(host_data<T>(3 * 127 * 63, 14), {3, 127, 63});
    Tensor bias = from_vector(host_data<T>(63, 15), {63});
    return relu(matmul(a, b) + bias);
  });
  return cases;
}

template <class T> void check_threads_reproducible() {
  for (const auto& f : reproducibility_cases<T>()) {
    std::vector<T> one, two;
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 1);
      one = run_f<T>(f);
    }
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 2);
      two = run_f<T>(f);
    }
    expect_bitwise_equal(one, two, "1 vs 2 threads");
  }
}

template <class T> void check_fusion_reproducible() {
  const bool saved = options().fusion;
  for (const auto& f : reproducibility_cases<T>()) {
    options().fusion = true;
    const std::vector<T> fused = run_f<T>(f);
    options().fusion = false;
    const std::vector<T> unfused = run_f<T>(f);
    expect_bitwise_equal(fused, unfused, "fused vs unfused");
  }
  options().fusion = saved;
}

} // namespace

TEST(Matmul, ShapesF32) { check_shapes<float>(kSizes); }
TEST(Matmul, ShapesF64) { check_shapes<double>(kSizes); }
TEST(Matmul, ShapesI32) { check_shapes<int32_t>({1, 7, 65, 300}); }
TEST(Matmul, ShapesI64) { check_shapes<int64_t>({1, 7, 65, 300}); }

TEST(Matmul, BatchedAndBroadcast) {
  const auto a = host_data<float>(3 * 7 * 65, 1), b = host_data<float>(3 * 65 * 127, 2), w = host_data<float>(65 * 9, 3);
  const auto c = matmul(from_vector(a, {3, 7, 65}), from_vector(b, {3, 65, 127})).to_vector<float>();
  const auto d = matmul(from_vector(a, {3, 7, 65}), from_vector(w, {65, 9})).to_vector<float>();
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t i = 0; i < 7; ++i) {
      for (int64_t j = 0; j < 127; ++j) {
        double ref = 0;
        for (int64_t q = 0; q < 65; ++q) ref += double(a[(p * 7 + i) * 65 + q]) * b[(p * 65 + q) * 127 + j];
        ASSERT_NEAR(c[(p * 7 + i) * 127 + j], ref, 1e-4) << p << "," << i << "," << j;
      }
      for (int64_t j = 0; j < 9; ++j) {
        double ref = 0;
        for (int64_t q = 0; q < 65; ++q) ref += double(a[(p * 7 + i) * 65 + q]) * w[q * 9 + j];
        ASSERT_NEAR(d[(p * 7 + i) * 9 + j], ref, 1e-4) << p << "," << i << "," << j;
      }
    }
}

TEST(Matmul, ThreadsBitwiseF32) { check_threads_reproducible<float>(); }
TEST(Matmul, ThreadsBitwiseF64) { check_threads_reproducible<double>(); }
TEST(Matmul, FusionBitwiseF32) { check_fusion_reproducible<float>(); }
TEST(Matmul, FusionBitwiseF64) { check_fusion_reproducible<double>(); }

// A product over one term (K = 1) is the outer product: each element exactly a[i] * b[j] (no
// sum, no GEMM), and as an elementwise product it fuses with what follows, so a batch-1
// weight gradient and its SGD update (w - lr * x^T g) are one kernel.
TEST(Matmul, AProductOverOneTermIsTheOuterProductAndFusesWithItsUpdate) {
  const std::vector<float> xs = host_data<float>(5, 11), gs = host_data<float>(7, 12);
  const Tensor x = from_vector(xs, {1, 5}), g = from_vector(gs, {1, 7});
  const Tensor product = x.t().matmul(g);
  EXPECT_EQ(product.node()->op, graph::OpKind::Mul); // the graph has no matmul to plan as a GEMM
  const std::vector<float> outer = product.to_vector<float>();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) EXPECT_EQ(outer[i * 7 + j], xs[i] * gs[j]) << i << "," << j;
  Tensor w = from_vector(host_data<float>(35, 13), {5, 7});
  const std::vector<float> w0 = w.to_vector<float>();
  auto step = compile([&](const std::vector<Tensor>& a) {
    w.assign(w - 0.5 * a[0].t().matmul(a[1]));
    return std::vector<Tensor>{};
  });
  step({x, g});
  EXPECT_EQ(step.num_kernels(), 1u);
  const std::vector<float> w1 = w.to_vector<float>();
  for (int i = 0; i < 35; ++i) EXPECT_EQ(w1[i], w0[i] - 0.5f * outer[i]) << i;
}

// The gradient of a transposed operand (Linear's x W^T) is computed in the layout of the tensor
// underneath: one product, g^T x, no transposed view of x^T g for the optimizer to read with
// strides; each element is the same fma chain over the batch, so the bits are those of (x^T g)^T.
TEST(Matmul, ATransposedOperandsGradientIsOneProductInItsOwnLayout) {
  const Tensor x = from_vector(host_data<float>(300 * 70, 21), {300, 70});
  const Tensor w = from_vector(host_data<float>(40 * 70, 22), {40, 70}).requires_grad_();
  const Tensor g = from_vector(host_data<float>(300 * 40, 23), {300, 40});
  const Tensor gw = grad({x.matmul(w.t())}, {w}, {g})[0];
  const graph::Node* n = gw.node().get();
  if (n->op == graph::OpKind::Detach) n = n->inputs[0].get(); // grad() without create_graph
  EXPECT_EQ(n->op, graph::OpKind::Matmul);
  const std::vector<float> by_hand = x.t().matmul(g).t().to_vector<float>();
  EXPECT_EQ(gw.to_vector<float>(), by_hand);
}

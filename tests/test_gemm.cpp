// The CPU GEMM (codegen/src/llvm_gemm.cpp, Kernel::gemm): which matmuls take it; its
// results bit for bit against in-order fused multiply-adds (its contract: every output
// element accumulates fma(a, b, acc) over k in order from 0) across register-tile,
// k-block, row-block and column-block edges, transposed operands and batches; against
// an f64 reference; fused epilogues bitwise equal to the unfused kernels; 1 vs 2 threads;
// and convolutions (im2col + GEMM) against direct loops.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "codegen/form.h"
#include "codegen/lower.h"
#include "kiln/kiln.h"
#include "kiln/options.h"

using namespace kiln;

namespace {

template <class T> std::vector<T> normal_data(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = static_cast<T>(normal(rng));
  return v;
}

/// A logical [batch, rows, cols] operand (batch 0: a matrix); stored as [batch, cols, rows]
/// and viewed transposed when `t`.
template <class T> struct Operand {
  int64_t batch, rows, cols;
  bool t;
  std::vector<T> data;
  T at(int64_t p, int64_t r, int64_t c) const {
    const int64_t base = std::max<int64_t>(batch, 1) == 1 ? 0 : p * rows * cols;
    return t ? data[base + c * rows + r] : data[base + r * cols + c];
  }
  Tensor tensor() const {
    IntList shape = t ? IntList{cols, rows} : IntList{rows, cols};
    if (batch > 0) shape.insert(shape.begin(), batch);
    Tensor x = from_vector(data, shape);
    return t ? x.transpose(-1, -2) : x;
  }
};

template <class T> Operand<T> operand(int64_t batch, int64_t rows, int64_t cols, bool t, uint32_t seed) {
  return {batch, rows, cols, t, normal_data<T>(std::max<int64_t>(batch, 1) * rows * cols, seed)};
}

/// fma(a, b, acc) in T, as LLVM's fmuladd computes it on this host.
template <class T> T fma_step(T a, T b, T acc) {
#if defined(__FMA__) || defined(__x86_64__)
  return std::fma(a, b, acc);
#else
  return a * b + acc;
#endif
}

/// The matmul kernels of the schedule of `t`, and whether each has the GEMM form.
std::vector<bool> gemm_forms(const Tensor& t, bool fusion = true) {
  std::vector<bool> forms;
  for (const auto& l : codegen::schedule({t.node().get()}, {fusion}).launches)
    if (!l.kernel.reductions.empty()) forms.push_back(l.kernel.gemm.has_value());
  return forms;
}

/// Checks a @ b within k eps sum|ab| of an f64 sum and, where it takes the GEMM form,
/// bitwise against in-order fmas.
template <class T> void check_exact(const Operand<T>& a, const Operand<T>& b) {
  const Tensor c = matmul(a.tensor(), b.tensor());
  const bool gemm = gemm_forms(c) == std::vector<bool>{true};
  const std::vector<T> got = c.template to_vector<T>();
  const int64_t batch = std::max<int64_t>({a.batch, b.batch, 1}), m = a.rows, k = a.cols, n = b.cols;
  ASSERT_EQ(static_cast<int64_t>(got.size()), batch * m * n);
  const std::string what = std::to_string(batch) + "x" + std::to_string(m) + "x" + std::to_string(k) + "x" +
                           std::to_string(n) + (a.t ? " At" : "") + (b.t ? " Bt" : "");
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T acc = 0;
        double ref = 0, mag = 0;
        for (int64_t q = 0; q < k; ++q) {
          acc = fma_step(a.at(p, i, q), b.at(p, q, j), acc);
          ref += double(a.at(p, i, q)) * double(b.at(p, q, j));
          mag += std::abs(double(a.at(p, i, q)) * double(b.at(p, q, j)));
        }
        const T g = got[(p * m + i) * n + j];
        if (gemm)
          ASSERT_EQ(std::memcmp(&g, &acc, sizeof(T)), 0) << what << " at " << p << "," << i << "," << j << ": " << g
                                                        << " vs in-order fma " << acc;
        ASSERT_LE(std::abs(double(g) - ref), (k + 1) * std::numeric_limits<T>::epsilon() * mag) << what;
      }
}

template <class T> void check_sizes() {
  const std::vector<int64_t> sizes{1, 7, 63, 65, 127};
  uint32_t seed = 1;
  for (int64_t m : sizes)
    for (int64_t k : sizes)
      for (int64_t n : sizes)
        for (int tr = 0; tr < 4; ++tr, seed += 2)
          ASSERT_NO_FATAL_FAILURE(check_exact(operand<T>(0, m, k, tr & 1, seed), operand<T>(0, k, n, tr & 2, seed + 1)));
}

/// Shapes across every block edge of the tiling: several k blocks (kc 256), row blocks
/// (mc 384), column blocks (nc 512 f32, 256 f64), and ragged register tiles.
template <class T> void check_large() {
  const std::array<std::array<int64_t, 3>, 5> shapes{{{1000, 520, 1000}, {1000, 777, 129}, {513, 300, 1000},
                                                      {65, 1000, 7}, {389, 257, 523}}};
  uint32_t seed = 100;
  for (const auto& [m, k, n] : shapes)
    for (int tr = 0; tr < 4; ++tr, seed += 2) {
      if (m * k * n > 300'000'000 && tr != 0 && tr != 3) continue; // the largest: NN and TT only
      ASSERT_NO_FATAL_FAILURE(check_exact(operand<T>(0, m, k, tr & 1, seed), operand<T>(0, k, n, tr & 2, seed + 1)));
    }
}

template <class T> std::vector<T> bits(const Tensor& t) { return t.template to_vector<T>(); }

template <class T> void expect_bitwise(const std::vector<T>& x, const std::vector<T>& y, const std::string& what) {
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::memcmp(&x[i], &y[i], sizeof(T)), 0) << what << " at " << i << ": " << x[i] << " vs " << y[i];
}

/// Epilogues fused into the GEMM (bias, activation, residual, scaling) give the bits of
/// the unfused kernels, on 1 and 2 threads alike.
template <class T> void check_epilogues() {
  const int64_t m = 389, k = 300, n = 523;
  Tensor x = from_vector(normal_data<T>(m * k, 1), {m, k});
  Tensor w = from_vector(normal_data<T>(k * n, 2), {k, n});
  Tensor wt = from_vector(normal_data<T>(n * k, 3), {n, k}).t();
  Tensor bias = from_vector(normal_data<T>(n, 4), {n});
  Tensor res = from_vector(normal_data<T>(m * n, 5), {m, n});
  realize({x, w, wt, bias, res});
  const std::vector<std::pair<std::string, std::function<Tensor()>>> cases{
      {"bias+relu", [&] { return relu(matmul(x, w) + bias); }},
      {"scale+residual", [&] { return matmul(x, w) * 0.5 + res; }},
      {"sigmoid of transposed", [&] { return sigmoid(matmul(x, wt) - bias); }},
      {"batched bias+tanh", [&] { return tanh(matmul(x.reshape({1, m, k}).expand({3, m, k}), w) + bias); }},
  };
  const bool saved = options().fusion;
  for (const auto& [name, f] : cases) {
    options().fusion = true;
    EXPECT_EQ(gemm_forms(f()), std::vector<bool>{true}) << name << ": one GEMM kernel with the epilogue";
    std::vector<T> fused1, fused2, unfused;
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 1);
      fused1 = bits<T>(f());
    }
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 2);
      fused2 = bits<T>(f());
    }
    options().fusion = false;
    unfused = bits<T>(f());
    expect_bitwise(fused1, unfused, name + ": fused vs unfused");
    expect_bitwise(fused1, fused2, name + ": 1 vs 2 threads");
  }
  options().fusion = saved;
}

/// x [n, h, l, d] with its heads merged: x.permute(0, 2, 1, 3).reshape({n l, h d}), the input of
/// an attention block's output projection (a left operand whose rows and k split into a row term
/// and a k term: GemmEmitter::pack_a_gather).
template <class T> Tensor merged_heads(const std::vector<T>& x, int64_t n, int64_t h, int64_t l, int64_t d) {
  return from_vector(x, {n, h, l, d}).permute({0, 2, 1, 3}).reshape({n * l, h * d});
}

/// merged_heads's element (row, col) of x.
template <class T> T merged_at(const std::vector<T>& x, int64_t h, int64_t l, int64_t d, int64_t row, int64_t col) {
  return x[static_cast<size_t>(((row / l * h + col / d) * l + row % l) * d + col % d)];
}

template <class T> void check_merged_heads() {
  // (n, h, l, d, other): rows not filling a panel, k past a k block (kc 256), rows past a row
  // block (mc 384); d = 32 makes the right operand's panels runs of consecutive columns.
  const std::array<std::array<int64_t, 5>, 4> shapes{{{3, 3, 7, 5, 9}, {2, 4, 13, 32, 40}, {1, 9, 30, 33, 17},
                                                      {2, 2, 200, 32, 70}}};
  uint32_t seed = 300;
  for (const auto& [n, h, l, d, o] : shapes) {
    const int64_t rows = n * l, k = h * d;
    const std::vector<T> x = normal_data<T>(n * h * l * d, seed++), w = normal_data<T>(k * o, seed++),
                         y = normal_data<T>(rows * o, seed++);
    const std::string what = std::to_string(n) + "x" + std::to_string(h) + "x" + std::to_string(l) + "x" + std::to_string(d);
    // merged @ w: the merged heads as the left operand.
    const Tensor left = matmul(merged_heads(x, n, h, l, d), from_vector(w, {k, o}));
    ASSERT_EQ(gemm_forms(left), std::vector<bool>{true}) << what;
    const std::vector<T> got_left = left.template to_vector<T>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < o; ++j) {
        T acc = 0;
        for (int64_t q = 0; q < k; ++q) acc = fma_step(merged_at(x, h, l, d, i, q), w[q * o + j], acc);
        ASSERT_EQ(got_left[i * o + j], acc) << what << " left operand at " << i << "," << j;
      }
    // y^T @ merged: the merged heads as the right operand (a weight gradient's).
    const Tensor right = matmul(from_vector(y, {rows, o}).t(), merged_heads(x, n, h, l, d));
    ASSERT_EQ(gemm_forms(right), std::vector<bool>{true}) << what;
    const std::vector<T> got_right = right.template to_vector<T>();
    for (int64_t i = 0; i < o; ++i)
      for (int64_t j = 0; j < k; ++j) {
        T acc = 0;
        for (int64_t q = 0; q < rows; ++q) acc = fma_step(y[q * o + i], merged_at(x, h, l, d, q, j), acc);
        ASSERT_EQ(got_right[i * k + j], acc) << what << " right operand at " << i << "," << j;
      }
  }
}

} // namespace

TEST(Gemm, MatmulsTakeTheGemmForm) {
  Tensor a = zeros({64, 32}), b = zeros({32, 48});
  EXPECT_EQ(gemm_forms(matmul(a, b)), std::vector<bool>{true});
  EXPECT_EQ(gemm_forms(matmul(a.t(), a)), std::vector<bool>{true});
  EXPECT_EQ(gemm_forms(matmul(a, b.t().t()), false), std::vector<bool>{true});
  EXPECT_EQ(gemm_forms(matmul(a.to(kFloat64), b.to(kFloat64))), std::vector<bool>{true});
  // Matrix-vector products, integers, and tiny matrices keep the plain loops.
  EXPECT_EQ(gemm_forms(matmul(a, zeros({32, 1}))), std::vector<bool>{false});
  EXPECT_EQ(gemm_forms(matmul(zeros({1, 32}), b)), std::vector<bool>{false});
  EXPECT_EQ(gemm_forms(matmul(a.to(kInt32), b.to(kInt32))), std::vector<bool>{false});
}

TEST(Gemm, InOrderFmaF32) { check_sizes<float>(); }
TEST(Gemm, InOrderFmaF64) { check_sizes<double>(); }
TEST(Gemm, BlockEdgesF32) { check_large<float>(); }
TEST(Gemm, BlockEdgesF64) { check_large<double>(); }

TEST(Gemm, BatchedAndBroadcast) {
  for (int tr = 0; tr < 4; ++tr) {
    check_exact(operand<float>(3, 65, 127, tr & 1, 7), operand<float>(3, 127, 63, tr & 2, 8));   // batched
    check_exact(operand<float>(4, 129, 33, tr & 1, 9), operand<float>(0, 33, 70, tr & 2, 10));   // b broadcast
    check_exact(operand<double>(0, 40, 300, tr & 1, 11), operand<double>(2, 300, 9, tr & 2, 12)); // a broadcast
  }
}

TEST(Gemm, EmptyReductionStoresZerosThroughTheEpilogue) {
  Tensor y = relu(matmul(zeros({9, 0}), zeros({0, 17})) + 1.0);
  EXPECT_EQ(gemm_forms(y), std::vector<bool>{true});
  for (float v : y.to_vector<float>()) ASSERT_EQ(v, 1.0f);
}

TEST(Gemm, FusedEpiloguesBitwiseF32) { check_epilogues<float>(); }
TEST(Gemm, FusedEpiloguesBitwiseF64) { check_epilogues<double>(); }

TEST(Gemm, NonContiguousOperandsArePacked) {
  // Slices and a reshape of a transpose: the left operand is not a plain strided view,
  // so the GEMM packs it through its index expressions.
  Tensor base = from_vector(normal_data<float>(40 * 90, 21), {40, 90});
  Tensor a = base.t().reshape({30, 120}).slice(0, 1, 28, 1); // [27, 120], div/mod indexing
  Tensor b = from_vector(normal_data<float>(130 * 77, 22), {130, 77}).slice(0, 5, 125, 1).slice(1, 3, 74, 2);
  realize({a, b});
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const auto got = matmul(a, b).to_vector<float>();
  const int64_t m = 27, k = 120, n = b.size(1);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0;
      for (int64_t q = 0; q < k; ++q) acc = fma_step(av[i * k + q], bv[q * n + j], acc);
      ASSERT_EQ(got[i * n + j], acc) << i << "," << j;
    }
}

TEST(Gemm, MergedHeadsArePackedByRowAndKOffsetsWithTheSameBitsF32) { check_merged_heads<float>(); }
TEST(Gemm, MergedHeadsArePackedByRowAndKOffsetsWithTheSameBitsF64) { check_merged_heads<double>(); }

TEST(Gemm, Conv2dMatchesDirectLoops) {
  struct Case {
    int64_t n, c, o, g, h, w, kh, kw, s, p, d;
  };
  const Case cases[] = {
      {4, 8, 16, 1, 12, 11, 3, 3, 1, 1, 1}, // the CNN's: 3x3, same padding
      {3, 6, 12, 2, 13, 9, 3, 2, 2, 1, 1},  // groups, stride, asymmetric kernel
      {2, 4, 8, 1, 15, 15, 3, 3, 1, 2, 2},  // dilation
      {2, 16, 32, 4, 8, 8, 1, 1, 1, 0, 1},  // grouped 1x1
  };
  uint32_t seed = 30;
  for (const Case& t : cases) {
    const auto xv = normal_data<float>(t.n * t.c * t.h * t.w, seed++);
    const auto wv = normal_data<float>(t.o * (t.c / t.g) * t.kh * t.kw, seed++);
    const auto bv = normal_data<float>(t.o, seed++);
    Tensor x = from_vector(xv, {t.n, t.c, t.h, t.w}), w = from_vector(wv, {t.o, t.c / t.g, t.kh, t.kw});
    Tensor y = nn::functional::conv2d(x, w, from_vector(bv, {t.o}), nn::Size2(t.s), nn::Size2(t.p), nn::Size2(t.d), t.g);
    const int64_t ho = y.size(2), wo = y.size(3), cg = t.c / t.g, og = t.o / t.g;
    const auto got = y.to_vector<float>();
    for (int64_t ni = 0; ni < t.n; ++ni)
      for (int64_t oi = 0; oi < t.o; ++oi)
        for (int64_t yy = 0; yy < ho; ++yy)
          for (int64_t xx = 0; xx < wo; ++xx) {
            double acc = bv[oi], mag = std::abs(bv[oi]);
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t i = 0; i < t.kh; ++i)
                for (int64_t j = 0; j < t.kw; ++j) {
                  const int64_t iy = yy * t.s - t.p + i * t.d, ix = xx * t.s - t.p + j * t.d;
                  if (iy < 0 || iy >= t.h || ix < 0 || ix >= t.w) continue;
                  const double v = double(xv[((ni * t.c + oi / og * cg + ci) * t.h + iy) * t.w + ix]) *
                                   wv[((oi * cg + ci) * t.kh + i) * t.kw + j];
                  acc += v;
                  mag += std::abs(v);
                }
            const double g = got[((ni * t.o + oi) * ho + yy) * wo + xx];
            ASSERT_NEAR(g, acc, 1e-6 * (1 + mag)) << ni << "," << oi << "," << yy << "," << xx;
          }
  }
}

/// A convolution's forward and weight gradient against the same products of its column matrix
/// computed beforehand into a buffer of its own: bitwise equal (same fma chains in the same k order).
template <class T> void check_implicit_im2col(int64_t n, int64_t c, int64_t o, int64_t g, int64_t h, int64_t w, int64_t k,
                                              int64_t s, int64_t p, uint32_t seed) {
  const DType dt = std::is_same_v<T, double> ? kFloat64 : kFloat32;
  Tensor x = randn({n, c, h, w}, seed, dt), wt = randn({o, c / g, k, k}, seed + 1, dt);
  realize({x, wt});
  wt.requires_grad_();
  const Tensor y = nn::functional::conv2d(x, wt, Tensor(), nn::Size2(s), nn::Size2(p), nn::Size2(1), g);
  const Tensor gy = randn(y.shape(), seed + 2, dt);
  const Tensor dw = grad({(y * gy).sum()}, {wt})[0];
  // No kernel stores an unfold (the column matrix): the GEMMs read the padded input.
  for (const codegen::KernelLaunch& l : codegen::schedule({y.node().get(), dw.node().get()}, {}).launches)
    for (const graph::Node* out : l.outputs) EXPECT_NE(out->op, graph::OpKind::Unfold) << l.kernel.name;
  // The columns [N, g, Cg * k * k, Ho * Wo], realized: a plain buffer the GEMMs read as before.
  Tensor cols = pad(x, {p, p, p, p}).unfold(2, k, s).unfold(3, k, s).permute({0, 1, 4, 5, 2, 3});
  cols = cols.reshape({n, g, c / g * k * k, y.size(2) * y.size(3)});
  realize({cols});
  const Tensor y_ref = matmul(wt.reshape({g, o / g, c / g * k * k}), cols).reshape(y.shape());
  const Tensor dw_ref = grad({(y_ref * gy).sum()}, {wt})[0];
  for (const auto& [got, want] : {std::pair{y, y_ref}, std::pair{dw, dw_ref}}) {
    const std::vector<T> a = got.template to_vector<T>(), b = want.template to_vector<T>();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0)
        << "n" << n << " c" << c << " o" << o << " g" << g << " " << h << "x" << w << " k" << k << " s" << s << " p" << p;
  }
}

TEST(Gemm, Conv2dReadsItsColumnsInPlaceWithTheSameBits) {
  // The implicit GEMM (fusion.h implicit_im2col, llvm_gemm.cpp pack_b_gather): the forward's and
  // the weight gradient's right operand is the unfolded padded input, gathered by the GEMM's pack.
  // Columns not filling a panel (masked gathers), k past a k block (40 x 9 > kc), stride, groups.
  check_implicit_im2col<float>(2, 8, 16, 1, 12, 11, 3, 1, 1, 80);
  check_implicit_im2col<float>(3, 40, 24, 1, 9, 7, 3, 1, 1, 83);
  check_implicit_im2col<float>(2, 6, 12, 2, 13, 9, 3, 2, 1, 86);
  check_implicit_im2col<float>(2, 4, 8, 1, 10, 10, 5, 1, 0, 89);
  check_implicit_im2col<double>(2, 8, 16, 2, 11, 12, 3, 1, 1, 92);
}

TEST(Gemm, Conv2dInputGradientIsAnImplicitGemmToo) {
  // The input gradient of a stride-1 convolution is a convolution of the output's gradient
  // (functional.cpp conv_transpose_product): no kernel writes the columns' gradient (kernel size times
  // the input). Its values against autograd of the im2col product built from public ops (in f64:
  // the two sum the same terms in different orders).
  for (const int64_t g : {1, 2}) {
    Tensor x = randn({3, 8, 10, 9}, 60, kFloat64), w = randn({12, 8 / g, 3, 3}, 61, kFloat64);
    realize({x, w});
    x.requires_grad_();
    const Tensor y = nn::functional::conv2d(x, w, Tensor(), nn::Size2(1), nn::Size2(1), nn::Size2(1), g);
    const Tensor gy = randn(y.shape(), 62, kFloat64);
    const Tensor dx = grad({(y * gy).sum()}, {x})[0];
    const int64_t columns = 9 * x.numel(); // what W^T @ dY would store
    for (const codegen::KernelLaunch& l : codegen::schedule({dx.node().get()}, {}).launches)
      for (const graph::Node* out : l.outputs) EXPECT_LT(out->numel(), columns / 3) << l.kernel.name << " groups " << g;
    Tensor cols = pad(x, {1, 1, 1, 1}).unfold(2, 3, 1).unfold(3, 3, 1).permute({0, 1, 4, 5, 2, 3});
    cols = cols.reshape({3, g, 8 / g * 9, 90});
    const Tensor y_ref = matmul(w.reshape({g, 12 / g, 8 / g * 9}), cols).reshape(y.shape());
    const std::vector<double> got = dx.to_vector<double>(), want = grad({(y_ref * gy).sum()}, {x})[0].to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;
  }
}

TEST(Gemm, AnUnfoldReshapedAcrossItsProductsDimsIsStillExact) {
  // A right operand that unfolds but whose reshape mixes k and the columns (its offset does not
  // split into a row and a column term): packed element by element, still exact.
  Tensor x = from_vector(normal_data<float>(40, 40), {1, 40}), a = from_vector(normal_data<float>(5 * 8, 41), {5, 8});
  realize({x, a});
  const Tensor b = x.unfold(1, 8, 2).reshape({8, 17}); // b[k][j] = x[2 * ((17k + j) / 8) + (17k + j) % 8]
  const std::vector<float> xv = x.to_vector<float>(), av = a.to_vector<float>();
  const std::vector<float> got = matmul(a, b).to_vector<float>();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 17; ++j) {
      float acc = 0;
      for (int64_t q = 0; q < 8; ++q) {
        const int64_t flat = q * 17 + j;
        acc = fma_step(av[i * 8 + q], xv[2 * (flat / 8) + flat % 8], acc);
      }
      ASSERT_EQ(got[i * 17 + j], acc) << i << "," << j;
    }
}

TEST(Gemm, Conv2dTakesItsBiasAsTheGemmsEpilogue) {
  // The bias is added over the product's own shape [N, g, O/g, Ho*Wo], so that the GEMM's epilogue
  // adds it (when the output is read by several kernels, as a BatchNorm's) instead of a kernel
  // of its own re-reading and re-writing the output.
  for (const int64_t g : {1, 2}) {
    Tensor x = randn({3, 4, 9, 7}, 1), w = randn({12, 4 / g, 3, 3}, 2), b = randn({12}, 3);
    realize({x, w, b});
    Tensor y = nn::functional::conv2d(x, w, b, nn::Size2(1), nn::Size2(1), nn::Size2(1), g);
    const Tensor mean = y.mean({0, 2, 3}), act = relu(y);
    const codegen::Schedule s = codegen::schedule({mean.node().get(), act.node().get()}, {});
    std::vector<const codegen::KernelLaunch*> gemms;
    for (const codegen::KernelLaunch& l : s.launches)
      if (l.kernel.matmul) gemms.push_back(&l);
    ASSERT_EQ(gemms.size(), 1u) << "groups " << g;
    const graph::Node* out = gemms[0]->outputs.at(0);
    EXPECT_EQ(out->op, graph::OpKind::Add) << "groups " << g;
    EXPECT_EQ(out->shape, (graph::Shape{3, g, 12 / g, 9 * 7})) << "groups " << g;
    for (const codegen::KernelLaunch& l : s.launches)
      for (const graph::Node* o : l.outputs) EXPECT_FALSE(o->op == graph::OpKind::Add && o->shape == y.shape()) << "groups " << g;
  }
}

TEST(Gemm, AShortRowedWeightGradientIsComputedTransposedWithTheSameBits) {
  // A 3 x 3 convolution on one input channel: its weight gradient is [out, 9] a sample, rows too
  // short for the GEMM's vectors, so autograd computes it as the transpose of the swapped product
  // ([9, out]). A product and the transpose of its swapped product have the same bits (each
  // element the same fma chain over k), so the gradient is exactly the direct one's.
  Tensor x = randn({4, 1, 10, 10}, 71), w = randn({16, 1, 3, 3}, 72), b = randn({16}, 73), g = randn({4, 16, 10, 10}, 74);
  realize({x, w, b, g});
  w.requires_grad_();
  const Tensor y = nn::functional::conv2d(x, w, b, nn::Size2(1), nn::Size2(1), nn::Size2(1), 1);
  const Tensor dw = grad({(y * g).sum()}, {w})[0];
  const codegen::Schedule s = codegen::schedule({dw.node().get()}, {});
  bool transposed = false;
  for (const codegen::KernelLaunch& l : s.launches)
    for (const graph::Node* n : l.nodes) {
      EXPECT_FALSE(n->op == graph::OpKind::Matmul && n->shape == (graph::Shape{4, 1, 16, 9})) << "computed as [out, 9]";
      transposed = transposed || (n->op == graph::OpKind::Matmul && n->shape == (graph::Shape{4, 1, 9, 16}));
    }
  EXPECT_TRUE(transposed);
  for (const auto& [m, k, n] : {std::array<int64_t, 3>{32, 784, 9}, {9, 100, 32}, {64, 196, 288}, {5, 3, 7}}) {
    const Tensor a = randn({m, k}, 75), c = randn({k, n}, 76);
    const std::vector<float> direct = matmul(a, c).to_vector<float>();
    const std::vector<float> swapped = matmul(c.t(), a.t()).t().to_vector<float>();
    ASSERT_EQ(direct.size(), swapped.size());
    EXPECT_EQ(std::memcmp(direct.data(), swapped.data(), direct.size() * sizeof(float)), 0) << m << "x" << k << "x" << n;
  }
}

TEST(Gemm, OddTilingsStayExact) {
  // Register tiles and blocks of odd sizes: panels, k blocks and task blocks that end
  // anywhere, vectors narrower than the tile, unaligned region sizes in scratch.
  const codegen::GemmTiling tilings[] = {
      {-1, -1, 7, 32, 21, 64, 100}, {-1, -1, 5, 16, 5, 48, 3}, {-1, -1, 3, 24, 9, 24, 7}, {-1, -1, 1, 8, 1, 8, 1}};
  for (const auto& t : tilings) {
    codegen::set_gemm_tiling_override(t);
    uint32_t seed = 500;
    for (auto [m, k, n] : {std::array<int64_t, 3>{7, 7, 8}, {65, 63, 127}, {130, 17, 70}, {4, 300, 9}})
      for (int tr = 0; tr < 4; ++tr, seed += 2) {
        ASSERT_NO_FATAL_FAILURE(check_exact(operand<float>(0, m, k, tr & 1, seed), operand<float>(0, k, n, tr & 2, seed + 1)));
        ASSERT_NO_FATAL_FAILURE(check_exact(operand<double>(2, m, k, tr & 1, seed), operand<double>(0, k, n, tr & 2, seed + 1)));
      }
  }
  codegen::set_gemm_tiling_override(std::nullopt);
}

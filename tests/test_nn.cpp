// nn modules and nn::functional: shapes, parameter counts and names (against
// PyTorch's), forward values against hand-written f64 references, gradients
// against finite differences (gradcheck in f64), and error messages.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "codegen/lower.h"
#include "tests/error_of.h"
#include "kiln/autograd.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

using Fn1 = std::function<Tensor(const std::vector<Tensor>&)>;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

void expect_gradcheck(const Fn1& f, const std::vector<Tensor>& inputs, double atol = 1e-5, double rtol = 1e-3) {
  GradcheckResult r = gradcheck(f, inputs, 1e-6, atol, rtol);
  EXPECT_TRUE(r.ok) << r.report;
}

Tensor rnd(IntList shape, uint64_t seed) { return randn(std::move(shape), seed, kFloat64); }

// Plain 4-d indexing into row-major data.
struct Nchw {
  const std::vector<double>& v;
  int64_t c, h, w;
  double operator()(int64_t n, int64_t ci, int64_t y, int64_t x) const { return v[((n * c + ci) * h + y) * w + x]; }
};

// Direct-loop convolution, the reference for im2col.
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, nn::Size2 s, nn::Size2 p,
                                   nn::Size2 d, int64_t g, int64_t ho, int64_t wo) {
  const auto xv = values(x), wv = values(w), bv = values(b);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t o = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  Nchw X{xv, c, h, wd}, W{wv, cg, kh, kw};
  std::vector<double> out;
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t oi = 0; oi < o; ++oi)
      for (int64_t y = 0; y < ho; ++y)
        for (int64_t xx = 0; xx < wo; ++xx) {
          double acc = bv[oi];
          const int64_t group = oi / (o / g);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * s.h - p.h + i * d.h, ix = xx * s.w - p.w + j * d.w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                acc += X(ni, group * cg + ci, iy, ix) * W(oi, ci, i, j);
              }
          out.push_back(acc);
        }
  return out;
}

// Direct-loop pooling: max (padding = -inf) or average (padding counted as zeros).
std::vector<double> pool_reference(const Tensor& x, bool is_max, nn::Size2 k, nn::Size2 s, nn::Size2 p, nn::Size2 d) {
  const auto xv = values(x);
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = (h + 2 * p.h - d.h * (k.h - 1) - 1) / s.h + 1, wo = (w + 2 * p.w - d.w * (k.w - 1) - 1) / s.w + 1;
  Nchw X{xv, c, h, w};
  std::vector<double> out;
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t y = 0; y < ho; ++y)
        for (int64_t xx = 0; xx < wo; ++xx) {
          double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t i = 0; i < k.h; ++i)
            for (int64_t j = 0; j < k.w; ++j) {
              const int64_t iy = y * s.h - p.h + i * d.h, ix = xx * s.w - p.w + j * d.w;
              const bool inside = iy >= 0 && iy < h && ix >= 0 && ix < w;
              const double v = inside ? X(ni, ci, iy, ix) : (is_max ? -INFINITY : 0.0);
              acc = is_max ? std::max(acc, v) : acc + v;
            }
          out.push_back(is_max ? acc : acc / static_cast<double>(k.h * k.w));
        }
  return out;
}

} // namespace

// ---------------------------------------------------------------- registry, shapes, counts

TEST(Module, ParameterCountsMatchPyTorch) {
  EXPECT_EQ(nn::Linear(784, 256).num_parameters(), 200960);
  EXPECT_EQ(nn::Linear(10, 5, /*bias=*/false).num_parameters(), 50);
  EXPECT_EQ(nn::Conv2d(1, 32, 3).num_parameters(), 320);
  EXPECT_EQ(nn::Conv2d(32, 64, 3).num_parameters(), 18496);
  EXPECT_EQ(nn::Conv2d(4, 8, 3, {.groups = 2}).num_parameters(), 152);
  EXPECT_EQ(nn::BatchNorm2d(32).num_parameters(), 64);
  EXPECT_EQ(nn::LayerNorm({10}).num_parameters(), 20);
  EXPECT_EQ(nn::Embedding(100, 16).num_parameters(), 1600);
  nn::Sequential mlp(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(), nn::Linear(128, 10));
  EXPECT_EQ(mlp.num_parameters(), 235146);
}

TEST(Module, DottedNamesAndBuffers) {
  nn::Sequential m(nn::Conv2d(1, 2, 3), nn::BatchNorm2d(2), nn::ReLU(), nn::Flatten(), nn::Linear(8, 3));
  std::vector<std::string> names;
  for (auto& [n, t] : m.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias"}));
  names.clear();
  for (auto& [n, t] : m.named_buffers()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"}));
  EXPECT_EQ(m.state_dict().size(), 9u);
  for (const Tensor& p : m.parameters()) EXPECT_TRUE(p.requires_grad());
}

// A custom layer from primitives, as in the design sketch: its parameter is found and trained.
struct Swish : nn::Module {
  Tensor beta = register_parameter("beta", ones({1}));
  Tensor forward(const Tensor& x) override { return x * sigmoid(beta * x); }
  std::string name() const override { return "Swish"; }
};

TEST(Module, CustomModuleInSequential) {
  nn::Sequential m(nn::Linear(4, 3), Swish(), nn::Linear(3, 2));
  auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 5u);
  EXPECT_EQ(named[2].first, "1.beta");
  Tensor y = m(rand({5, 4}, 1)).sum();
  y.backward();
  EXPECT_TRUE(named[2].second.grad().defined());
  EXPECT_EQ(named[2].second.grad().shape(), IntList{1});
  EXPECT_NE(m.str().find("(1): Swish()"), std::string::npos) << m.str();
}

TEST(Module, TrainEvalPropagates) {
  nn::Sequential inner(nn::Dropout(0.5), nn::ReLU());
  nn::Sequential m(nn::Linear(2, 2), inner);
  auto& dropout = dynamic_cast<nn::Sequential&>(m[1])[0];
  EXPECT_TRUE(dropout.is_training());
  m.eval();
  EXPECT_FALSE(m.is_training());
  EXPECT_FALSE(dropout.is_training());
  m.train();
  EXPECT_TRUE(dropout.is_training());
}

TEST(Module, ForwardOfAContainerWithoutOneThrows) {
  struct TwoInputs : nn::Module {};
  TwoInputs m;
  EXPECT_THROW(m.forward(zeros({1})), Error);
}

TEST(Module, InitializationIsSeededAndBounded) {
  nn::manual_seed(3);
  nn::Linear a(100, 50);
  nn::manual_seed(3);
  nn::Linear b(100, 50);
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  nn::Linear c(100, 50);
  EXPECT_NE(a.weight.to_vector<float>(), c.weight.to_vector<float>());
  // Kaiming-uniform(a = sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)): bound 0.1, variance 0.01/3.
  auto w = a.weight.to_vector<double>();
  double mean = 0, sq = 0, mx = 0;
  for (double v : w) mean += v, sq += v * v, mx = std::max(mx, std::abs(v));
  mean /= w.size();
  EXPECT_LE(mx, 0.1);
  EXPECT_GT(mx, 0.099);
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(sq / w.size(), 0.01 / 3, 0.0005);
}

TEST(Shapes, ConvPoolFlatten) {
  nn::Conv2d conv(3, 4, {3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}});
  EXPECT_EQ(conv(zeros({2, 3, 9, 7})).shape(), (IntList{2, 4, 5, 5}));
  EXPECT_EQ(nn::MaxPool2d(2)(zeros({2, 3, 9, 7})).shape(), (IntList{2, 3, 4, 3}));
  EXPECT_EQ(nn::MaxPool2d(3, 2, 1)(zeros({1, 1, 8, 8})).shape(), (IntList{1, 1, 4, 4}));
  EXPECT_EQ(nn::AvgPool2d(2)(zeros({1, 2, 6, 6})).shape(), (IntList{1, 2, 3, 3}));
  EXPECT_EQ(nn::Flatten()(zeros({2, 3, 4, 5})).shape(), (IntList{2, 60}));
  EXPECT_EQ(nn::Embedding(10, 3)(from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3})).shape(), (IntList{2, 3, 3}));
}

// ---------------------------------------------------------------- forward against references

TEST(Forward, LinearMatchesReference) {
  Tensor x = rnd({3, 4}, 1), w = rnd({2, 4}, 2), b = rnd({2}, 3);
  auto xv = values(x), wv = values(w), bv = values(b);
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 2; ++o) {
      double acc = bv[o];
      for (int k = 0; k < 4; ++k) acc += xv[i * 4 + k] * wv[o * 4 + k];
      want.push_back(acc);
    }
  expect_near_all(values(F::linear(x, w, b)), want, 1e-12);
}

struct ConvCase {
  int64_t c, o, g, kh, kw;
  nn::Size2 s, p, d;
};

TEST(Forward, Conv2dMatchesDirectLoops) {
  const std::vector<ConvCase> cases = {
      {1, 2, 1, 3, 3, 1, 1, 1},                 // same padding
      {3, 4, 1, 3, 2, {2, 1}, {1, 0}, {1, 2}},  // stride, asymmetric kernel, dilation
      {4, 6, 2, 3, 3, 2, 1, 1},                 // groups
      {4, 4, 4, 1, 1, 1, 0, 1},                 // depthwise 1x1
  };
  uint64_t seed = 10;
  for (const ConvCase& k : cases) {
    Tensor x = rnd({2, k.c, 7, 6}, seed++), w = rnd({k.o, k.c / k.g, k.kh, k.kw}, seed++), b = rnd({k.o}, seed++);
    Tensor y = F::conv2d(x, w, b, k.s, k.p, k.d, k.g);
    expect_near_all(values(y), conv_reference(x, w, b, k.s, k.p, k.d, k.g, y.size(2), y.size(3)), 1e-10);
  }
}

TEST(Forward, PoolingMatchesDirectLoops) {
  Tensor x = rnd({2, 3, 7, 8}, 20);
  for (auto [k, s, p, d] : std::vector<std::tuple<nn::Size2, nn::Size2, nn::Size2, nn::Size2>>{
           {2, 2, 0, 1}, {3, 2, 1, 1}, {{2, 3}, {1, 2}, {1, 1}, 1}, {2, 1, 0, 2}}) {
    expect_near_all(values(F::max_pool2d(x, k, s, p, d)), pool_reference(x, true, k, s, p, d), 1e-12);
    if (d.h == 1 && d.w == 1) expect_near_all(values(F::avg_pool2d(x, k, s, p)), pool_reference(x, false, k, s, p, d), 1e-12);
  }
}

TEST(Forward, SoftmaxAndLogSoftmaxAreStable) {
  Tensor x = from_vector<double>({1000, 1001, 1002, -5, 0, 5}, {2, 3});
  auto lp = values(F::log_softmax(x, 1));
  auto sm = values(F::softmax(x, 1));
  const double lse0 = 1002 + std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  const double lse1 = 5 + std::log(std::exp(-10.0) + std::exp(-5.0) + 1.0);
  std::vector<double> want{1000 - lse0, 1001 - lse0, 1002 - lse0, -5 - lse1, 0 - lse1, 5 - lse1};
  expect_near_all(lp, want, 1e-12);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(sm[i], std::exp(want[i]), 1e-12);
}

TEST(Forward, Losses) {
  Tensor logits = from_vector<double>({2.0, -1.0, 0.5, 0.1, 0.2, 3.0}, {2, 3});
  Tensor y = from_vector<int64_t>({0, 2});
  auto lp = values(F::log_softmax(logits, 1));
  const double nll = -(lp[0] + lp[5]) / 2;
  EXPECT_NEAR(F::cross_entropy(logits, y).item<double>(), nll, 1e-12);
  EXPECT_NEAR(F::nll_loss(F::log_softmax(logits, 1), y).item<double>(), nll, 1e-12);
  EXPECT_NEAR(F::cross_entropy(logits, y, {.reduction = F::Reduction::Sum}).item<double>(), 2 * nll, 1e-12);
  // Label smoothing s: (1 - s) nll + s * mean over classes of -log p.
  const double s = 0.1, smooth = -(lp[0] + lp[1] + lp[2] + lp[3] + lp[4] + lp[5]) / 3 / 2;
  EXPECT_NEAR(F::cross_entropy(logits, y, {.label_smoothing = s}).item<double>(), (1 - s) * nll + s * smooth, 1e-12);
  EXPECT_EQ(F::cross_entropy(logits, y, {.reduction = F::Reduction::None}).shape(), IntList{2});

  Tensor a = from_vector<double>({1, 2, 3}), b = from_vector<double>({1.5, 2, 1});
  EXPECT_NEAR(F::mse_loss(a, b).item<double>(), (0.25 + 0 + 4) / 3, 1e-12);

  Tensor z = from_vector<double>({-800, -1, 0, 2, 800}), t = from_vector<double>({0, 1, 0.5, 0, 1});
  auto zv = values(z), tv = values(t);
  double want = 0;
  for (size_t i = 0; i < 5; ++i) // a reference that is stable at +-800 too: softplus(z) - z t
    want += std::max(zv[i], 0.0) + std::log1p(std::exp(-std::abs(zv[i]))) - zv[i] * tv[i];
  const double got = F::binary_cross_entropy_with_logits(z, t).item<double>();
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, want / 5, 1e-12);
  // The gradient is sigmoid(z) - t everywhere, at z = 0 too (a zero-initialized output layer's
  // first step): PyTorch's [0.5, 0, -0.5] for targets [0, 0.5, 1] at z = 0.
  const Tensor z0 = zeros({3}, kFloat64).requires_grad_();
  const Tensor t0 = from_vector<double>({0, 0.5, 1});
  const std::vector<Tensor> g = grad({F::binary_cross_entropy_with_logits(z0, t0, F::Reduction::Sum)}, {z0});
  EXPECT_EQ(values(g[0]), (std::vector<double>{0.5, 0, -0.5}));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(F::binary_cross_entropy_with_logits(from_vector<double>({inf}), from_vector<double>({0})).item<double>(), inf);
}

TEST(Forward, ActivationsAndErf) {
  std::vector<double> xs;
  for (double v = -5; v <= 5; v += 0.25) xs.push_back(v);
  Tensor x = from_vector(xs);
  auto erf_v = values(erf(x)), gelu = values(F::gelu(x)), gelu_t = values(F::gelu(x, "tanh")), silu = values(F::silu(x));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    EXPECT_NEAR(erf_v[i], std::erf(v), 4e-16); // the primitive: within 1 ulp (std::erf: within 1 too)
    EXPECT_NEAR(gelu[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-15 * (1 + std::abs(v)));
    EXPECT_NEAR(gelu_t[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-12);
    EXPECT_NEAR(silu[i], v / (1 + std::exp(-v)), 1e-12);
  }
  EXPECT_THROW(F::gelu(x, "fast"), Error);
}

TEST(Forward, OneHotAndEmbedding) {
  Tensor idx = from_vector<int64_t>({2, 0, 1});
  Tensor oh = F::one_hot(idx, 4);
  EXPECT_EQ(oh.dtype(), kInt64);
  EXPECT_EQ(oh.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0}));
  EXPECT_THROW(F::one_hot(from_vector<int64_t>({4}), 4), Error);
  nn::Embedding e(5, 3);
  auto w = e.weight.to_vector<float>();
  auto rows = e(from_vector<int64_t>({4, 1})).to_vector<float>();
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(rows[j], w[4 * 3 + j]);
    EXPECT_EQ(rows[3 + j], w[1 * 3 + j]);
  }
}

TEST(Forward, LayerNormMatchesReference) {
  Tensor x = rnd({2, 3, 4}, 30), w = rnd({3, 4}, 31), b = rnd({3, 4}, 32);
  auto xv = values(x), wv = values(w), bv = values(b), got = values(F::layer_norm(x, {3, 4}, w, b, 1e-5));
  for (int n = 0; n < 2; ++n) {
    double mean = 0, var = 0;
    for (int i = 0; i < 12; ++i) mean += xv[n * 12 + i] / 12;
    for (int i = 0; i < 12; ++i) var += (xv[n * 12 + i] - mean) * (xv[n * 12 + i] - mean) / 12;
    for (int i = 0; i < 12; ++i)
      EXPECT_NEAR(got[n * 12 + i], (xv[n * 12 + i] - mean) / std::sqrt(var + 1e-5) * wv[i] + bv[i], 1e-10);
  }
  EXPECT_THROW(F::layer_norm(x, {4, 3}), Error);
}

TEST(Forward, BatchNormTrainUpdatesRunningStatsThenEvalUsesThem) {
  nn::BatchNorm2d bn(2, {.momentum = 0.5});
  Tensor x = rand({4, 2, 3, 3}, 40) * 4.0 + 1.0;
  auto xv = x.to_vector<double>();
  std::vector<double> mean(2, 0), var(2, 0);
  const int per = 4 * 9;
  for (int c = 0; c < 2; ++c) {
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 9; ++i) mean[c] += xv[(n * 2 + c) * 9 + i] / per;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 9; ++i) var[c] += std::pow(xv[(n * 2 + c) * 9 + i] - mean[c], 2) / per;
  }
  auto y = bn(x).to_vector<double>();
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 9; ++i) EXPECT_NEAR(y[(1 * 2 + c) * 9 + i], (xv[(1 * 2 + c) * 9 + i] - mean[c]) / std::sqrt(var[c] + 1e-5), 1e-4);
  kiln::realize(bn.buffers());
  auto rm = bn.running_mean.to_vector<double>(), rv = bn.running_var.to_vector<double>();
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(rm[c], 0.5 * mean[c], 1e-5);
    EXPECT_NEAR(rv[c], 0.5 + 0.5 * var[c] * per / (per - 1), 1e-5);
  }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  bn.eval();
  auto ye = bn(x).to_vector<double>();
  EXPECT_NEAR(ye[0], (xv[0] - rm[0]) / std::sqrt(rv[0] + 1e-5), 1e-4);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1); // eval does not count
}

// momentum = std::nullopt is torch's momentum=None: the running statistics are the cumulative average
// (factor 1 / num_batches_tracked). PyTorch 1.13's running statistics after each of three batches of
// BatchNorm1d(2, momentum=None), its eval output, and its state_dict's names.
TEST(Forward, BatchNormWithoutMomentumIsTheCumulativeAverage) {
  nn::BatchNorm1d bn(2, {.momentum = std::nullopt});
  EXPECT_NE(bn.str().find("momentum=None"), std::string::npos) << bn.str();
  auto batch = [](int s) {
    std::vector<float> v;
    for (int i = 0; i < 4; ++i)
      for (int c = 0; c < 2; ++c) v.push_back(static_cast<float>(((i * 7 + c * 3 + s * 5) % 11) * 0.5 - 2));
    return from_vector<float>(v, {4, 2});
  };
  const std::vector<std::vector<double>> means = {{0.5, 0.625}, {0.375, 0.5}, {0.7083333134651184, 0.3749999701976776}};
  const std::vector<std::vector<double>> vars = {
      {4.833333492279053, 3.2291667461395264}, {3.4583334922790527, 3.2291667461395264}, {3.381944417953491, 3.2291665077209473}};
  for (int s = 0; s < 3; ++s) {
    (void)bn(batch(s));
    kiln::realize(bn.buffers());
    const auto rm = bn.running_mean.to_vector<double>(), rv = bn.running_var.to_vector<double>();
    for (int c = 0; c < 2; ++c) {
      EXPECT_NEAR(rm[c], means[s][c], 1e-6) << s;
      EXPECT_NEAR(rv[c], vars[s][c], 1e-6) << s;
    }
    EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), s + 1);
  }
  std::vector<std::string> names;
  for (const auto& [n, t] : bn.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.state_dict().back().second.dtype(), kInt64);
  bn.eval();
  const std::vector<double> want = {-1.4727133512496948, -0.48692506551742554, 0.43048545718193054, 1.460775375366211,
                                    -0.6570566892623901, 0.34780365228652954, 1.2461421489715576, -0.7651680111885071};
  const auto y = bn(batch(0)).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y[i], want[i], 1e-5) << i;
  // the count goes on from a loaded num_batches_tracked (torch: load_state_dict, then a 4th batch)
  bn.train();
  (void)bn(batch(5));
  kiln::realize(bn.buffers());
  EXPECT_NEAR(bn.running_mean.to_vector<double>()[0], 0.6875, 1e-6);
  EXPECT_NEAR(bn.running_var.to_vector<double>()[1], 2.9427082538604736, 1e-6);
  // a momentum keeps the exponential average (and prints as a number)
  EXPECT_NE(nn::BatchNorm1d(2).str().find("momentum=0.1"), std::string::npos);
}

// batch_norm reduces over the spatial dims as one run (a free reshape to [N, C, H*W]): with
// [N, C, H, W] as such, each reduction's innermost loop ran W points (28 in the CNN), most of
// them in the scalar remainder of its vector loop.
TEST(Forward, BatchNormReducesWholeFeatureMapsInLongRuns) {
  const Tensor x = rand({4, 3, 5, 6}, 42).requires_grad_(), w = rand({3}, 43), b = rand({3}, 44);
  const Tensor y = F::batch_norm(x, Tensor(), Tensor(), w, b, /*training=*/true);
  const Tensor dx = grad({(y * y).sum()}, {x}, {}, false, /*create_graph=*/true)[0]; // as graph, to schedule
  size_t reductions = 0;
  for (const Tensor* t : {&y, &dx})
    for (const auto& l : codegen::schedule({t->node().get()}, {}).launches)
      for (const auto& r : l.kernel.reductions) {
        ++reductions;
        EXPECT_EQ(r.extents.size(), 2u) << l.kernel.name; // N, then H*W
      }
  EXPECT_GE(reductions, 4u); // mean and variance; and the backward's two sums
  // the values: against the formula on the 4-d tensor
  const Tensor mean = x.mean({0, 2, 3}, true), var = ((x - mean) * (x - mean)).mean({0, 2, 3}, true);
  const Tensor ref = (x - mean) * rsqrt(var + 1e-5) * w.reshape({1, 3, 1, 1}) + b.reshape({1, 3, 1, 1});
  EXPECT_EQ(y.shape(), x.shape());
  const auto got = y.to_vector<double>(), want = ref.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(Forward, BatchNorm1dOnMatrices) {
  nn::BatchNorm1d bn(3);
  Tensor x = rand({8, 3}, 41);
  auto y = bn(x);
  auto m = y.mean({0}).to_vector<double>();
  for (double v : m) EXPECT_NEAR(v, 0.0, 1e-5);
  EXPECT_THROW(bn(rand({8, 4}, 1)), Error);
}

TEST(Forward, DropoutIsSeededScaledAndOffInEval) {
  nn::Dropout d(0.25, /*seed=*/7);
  Tensor x = ones({10000});
  auto a = d(x).to_vector<float>(), b = d(x).to_vector<float>();
  int kept = 0;
  for (float v : a) {
    EXPECT_TRUE(v == 0.0f || std::abs(v - 1.0f / 0.75f) < 1e-6f) << v;
    kept += v != 0;
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  EXPECT_NE(a, b); // each call draws a new mask
  nn::Dropout again(0.25, 7);
  EXPECT_EQ(again(x).to_vector<float>(), a); // and runs repeat
  d.eval();
  EXPECT_EQ(d(x).to_vector<float>(), std::vector<float>(10000, 1.0f));
}

// p = 1 drops everything, as PyTorch's (which takes p in [0, 1]): x * 0, so NaN where x is not finite,
// and a zero gradient; F::dropout and nn::Dropout, eagerly and in a compiled step.
// torch: x = torch.tensor([1., inf, nan, -2.], requires_grad=True); y = F.dropout(x, 1.0)
//        -> [0., nan, nan, -0.]; y.sum().backward(); x.grad -> [0., 0., 0., 0.]
TEST(Forward, DropoutOfOneGivesZerosAndAZeroGradient) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  nn::Dropout d(1.0);
  auto check = [&](const std::function<Tensor(const Tensor&)>& f, const char* what) {
    SCOPED_TRACE(what);
    Tensor x = from_vector<float>({1, inf, nan, -2}).requires_grad_();
    auto step = [&](const std::vector<Tensor>& a) {
      Tensor y = f(a[0]);
      y.sum().backward();
      return std::vector<Tensor>{y};
    };
    for (bool compiled : {false, true}) {
      x.zero_grad();
      CompiledFunction c = compile(step);
      const std::vector<float> y = (compiled ? c({x}) : step({x}))[0].to_vector<float>();
      ASSERT_EQ(y.size(), 4u);
      EXPECT_EQ(y[0], 0.0f);
      EXPECT_TRUE(std::isnan(y[1]) && std::isnan(y[2])) << y[1] << " " << y[2];
      EXPECT_TRUE(y[3] == 0.0f && std::signbit(y[3])) << y[3];
      EXPECT_EQ(x.grad().to_vector<float>(), std::vector<float>(4, 0.0f)) << (compiled ? "compiled" : "eager");
    }
  };
  check([](const Tensor& x) { return F::dropout(x, 1.0, 5); }, "F::dropout");
  check([&](const Tensor& x) { return d(x); }, "nn::Dropout");
  d.eval();
  EXPECT_EQ(d(ones({3})).to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_THROW(nn::Dropout(1.0001), Error);
  EXPECT_THROW(F::dropout(ones({3}), 1.0001, 5), Error);
}

// ---------------------------------------------------------------- gradients (f64 finite differences)

TEST(Gradients, LinearAndConv2d) {
  expect_gradcheck([](const std::vector<Tensor>& v) { return F::linear(v[0], v[1], v[2]).sum(); },
                   {rnd({3, 4}, 1), rnd({2, 4}, 2), rnd({2}, 3)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 2}, 1) * v[3]).sum(); },
      {rnd({2, 2, 6, 5}, 4), rnd({3, 2, 3, 2}, 5), rnd({3}, 6), rnd({2, 3, 3, 3}, 7)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1], Tensor(), 1, 1, 1, 2) * v[2]).sum(); },
                   {rnd({1, 4, 4, 4}, 8), rnd({4, 2, 3, 3}, 9), rnd({1, 4, 4, 4}, 10)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1], v[2], 2, 1, 1, 1) * v[3]).sum(); },
                   {rnd({2, 2, 7, 7}, 36), rnd({3, 2, 3, 3}, 37), rnd({3}, 38), rnd({2, 3, 4, 4}, 39)});
}

TEST(Gradients, Conv2dInputGradientAsATransposedConvolution) {
  // Stride 1, dilation 1: the input's gradient is a convolution of the output's (functional.cpp
  // conv_transpose_product): asymmetric kernels and paddings, no padding (gy padded by k - 1), padding
  // k - 1 (gy not padded), groups; and differentiable again (its weight's taps reversed by index_select).
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1], v[2], 1, {1, 0}, 1, 1) * v[3]).sum(); },
                   {rnd({2, 2, 6, 5}, 40), rnd({3, 2, 3, 2}, 41), rnd({3}, 42), rnd({2, 3, 6, 4}, 43)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1], Tensor(), 1, 0, 1, 1) * v[2]).sum(); },
                   {rnd({1, 2, 7, 6}, 44), rnd({2, 2, 5, 4}, 45), rnd({1, 2, 3, 3}, 46)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1], Tensor(), 1, 2, 1, 2) * v[2]).sum(); },
                   {rnd({1, 4, 4, 3}, 47), rnd({6, 2, 3, 3}, 48), rnd({1, 6, 6, 5}, 49)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        const Tensor dx = grad({(F::conv2d(v[0], v[1], Tensor(), 1, 1, 1, 1) * v[2]).sum()}, {v[0]}, {}, false, true)[0];
        return (dx * dx).sum();
      },
      {rnd({1, 2, 4, 5}, 50), rnd({3, 2, 3, 3}, 51), rnd({1, 3, 4, 5}, 52)});
}

TEST(Gradients, Conv2dForwardModeIsBilinear) {
  // conv2d is a custom function on its transposed-gradient path; forward mode goes through its
  // backward transposed. The tangent of a bilinear map: conv(tx, w) + conv(x, tw).
  // (Stride 2: the im2col product's own graph rules.)
  for (const auto& [groups, stride] : {std::pair<int64_t, int64_t>{1, 1}, {2, 1}, {1, 2}}) {
    Tensor x = rnd({2, 4, 5, 6}, 60), w = rnd({6, 4 / groups, 3, 3}, 61), tx = rnd({2, 4, 5, 6}, 62), tw = rnd({6, 4 / groups, 3, 3}, 63);
    auto conv = [groups, stride](const Tensor& a, const Tensor& b) { return F::conv2d(a, b, Tensor(), stride, 1, 1, groups); };
    const auto [out, tangent] = jvp([&](const std::vector<Tensor>& v) { return std::vector<Tensor>{conv(v[0], v[1])}; },
                                    {x, w}, {tx, tw});
    expect_near_all(values(out[0]), values(conv(x, w)), 1e-12);
    expect_near_all(values(tangent[0]), values(conv(tx, w) + conv(x, tw)), 1e-10);
  }
}

TEST(Gradients, Pooling) {
  // Random normal values have no ties, so max is differentiable at the test point.
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::max_pool2d(v[0], 2, 2, 0, 1) * v[1]).sum(); },
                   {rnd({2, 2, 5, 4}, 11), rnd({2, 2, 2, 2}, 12)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::max_pool2d(v[0], 3, 2, 1, 1) * v[1]).sum(); },
                   {rnd({1, 2, 5, 5}, 13), rnd({1, 2, 3, 3}, 14)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::avg_pool2d(v[0], 3, 2, 1) * v[1]).sum(); },
                   {rnd({1, 2, 5, 5}, 15), rnd({1, 2, 3, 3}, 16)});
}

TEST(Gradients, MaxPoolSendsATiedWindowsGradientToItsFirstMaximum) {
  // As PyTorch's max_pool2d (its saved indices): all of a window's gradient goes to the first
  // maximal element in row-major window order, none to the others tied with it.
  for (bool tiles : {true, false}) { // 2x2 stride 2 (a tile view) and 3x3 stride 1 pad 1 (window taps)
    SCOPED_TRACE(tiles ? "tiles" : "taps");
    const Tensor x = from_vector(std::vector<double>{1, 3, 0, 5, 3, 2, 5, 5, 7, 7, 1, 1, 7, 7, 1, 1}, {1, 1, 4, 4}).requires_grad_();
    const Tensor y = tiles ? F::max_pool2d(x, 2, 2) : F::max_pool2d(x, 3, 1, 1);
    const Tensor gx = grad({y.sum()}, {x})[0];
    const std::vector<double> want = tiles ? std::vector<double>{0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0}
                                           // the 16 3x3 windows' first maxima, counted where they fall
                                           : std::vector<double>{0, 1, 0, 3, 0, 0, 2, 0, 6, 3, 1, 0, 0, 0, 0, 0};
    EXPECT_EQ(gx.to_vector<double>(), want);
    // Second order: d/dx sum(x * d/dx sum(y^2)) = 4 x times the windows routed to x.
    const Tensor g1 = grad({(y * y).sum()}, {x}, {}, false, /*create_graph=*/true)[0];
    const Tensor gg = grad({(g1 * x).sum()}, {x})[0];
    const std::vector<double> xs = x.to_vector<double>();
    std::vector<double> want_gg(16);
    for (size_t i = 0; i < 16; ++i) want_gg[i] = 4 * want[i] * xs[i];
    EXPECT_EQ(gg.to_vector<double>(), want_gg);
  }
}

TEST(Gradients, MaxPoolSendsAWindowsGradientToItsLastNaN) {
  // PyTorch's max_pool2d scan takes a NaN at once and each later one: a window with NaNs sends its
  // gradient to its last NaN (PyTorch 1.13: [1, NaN; 5, NaN] -> [0, 0; 0, 1], and along a row
  // [NaN, 3, NaN, 9] -> [0, 0, 1, 0]); the value is NaN.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor x = from_vector(std::vector<double>{1, nan, 5, nan}, {1, 1, 2, 2}).requires_grad_();
  const Tensor y = F::max_pool2d(x, 2);
  EXPECT_TRUE(std::isnan(y.item<double>()));
  EXPECT_EQ(grad({y.sum()}, {x})[0].to_vector<double>(), (std::vector<double>{0, 0, 0, 1}));
  const Tensor row = from_vector(std::vector<double>{nan, 3, nan, 9}, {1, 1, 1, 4}).requires_grad_();
  EXPECT_EQ(grad({F::max_pool2d(row, nn::Size2{1, 4}).sum()}, {row})[0].to_vector<double>(), (std::vector<double>{0, 0, 1, 0}));
}

TEST(Gradients, Normalizations) {
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (F::layer_norm(v[0], {4}, v[1], v[2]) * v[3]).sum(); },
      {rnd({3, 4}, 17), rnd({4}, 18), rnd({4}, 19), rnd({3, 4}, 20)});
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        return (F::batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], /*training=*/true) * v[3]).sum();
      },
      {rnd({4, 2, 2, 3}, 21), rnd({2}, 22), rnd({2}, 23), rnd({4, 2, 2, 3}, 24)});
}

TEST(Gradients, LossesAndActivations) {
  Tensor y = from_vector<int64_t>({1, 0, 3});
  expect_gradcheck([y](const std::vector<Tensor>& v) { return F::cross_entropy(v[0], y, {.label_smoothing = 0.2}); },
                   {rnd({3, 4}, 25)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return F::binary_cross_entropy_with_logits(v[0], v[1]); },
                   {rnd({5}, 26), rand({5}, 27, kFloat64)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return F::mse_loss(v[0], v[1]); }, {rnd({2, 3}, 28), rnd({2, 3}, 29)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::softmax(v[0], 1) * v[1]).sum(); },
                   {rnd({2, 5}, 30), rnd({2, 5}, 31)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::gelu(v[0]) + F::gelu(v[0], "tanh") + F::silu(v[0])).sum(); },
                   {rnd({7}, 32)});
  // Embedding's gradient through the one-hot matmul: rows used twice accumulate.
  Tensor idx = from_vector<int64_t>({1, 3, 1});
  expect_gradcheck([idx](const std::vector<Tensor>& v) { return (matmul(F::one_hot(idx, 4).to(kFloat64), v[0]) * v[1]).sum(); },
                   {rnd({4, 2}, 33), rnd({3, 2}, 34)});
}

TEST(Gradients, DropoutMasksTheGradient) {
  Tensor x = rnd({50}, 35).requires_grad_();
  Tensor y = F::dropout(x, 0.5, 9);
  y.sum().backward();
  auto g = x.grad().to_vector<double>(), yv = y.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], yv[i] == 0 ? 0.0 : 2.0);
}

// ---------------------------------------------------------------- pointwise losses against PyTorch

using F::Reduction;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct PointwiseLossCase {
  const char* torch; ///< PyTorch's call
  const char* kind;  ///< l1, smooth_l1, huber, kl_div, bce, bce_logits
  double param;      ///< beta, delta, log_target
  Reduction reduction;
  std::vector<double> input, target, weight, pos_weight; ///< [2, 3], [2, 3], [3] or none, [3] or none
  std::vector<double> loss, input_grad, target_grad;     ///< PyTorch's, target_grad empty when not checked
};

const PointwiseLossCase kPointwiseLosses[] = {
#include "pytorch_pointwise_loss_table.inc"
};

Tensor pointwise_loss(const PointwiseLossCase& c, const Tensor& x, const Tensor& t) {
  const std::string kind = c.kind;
  const Tensor w = c.weight.empty() ? Tensor() : from_vector(c.weight);
  if (kind == "l1") return F::l1_loss(x, t, c.reduction);
  if (kind == "smooth_l1") return F::smooth_l1_loss(x, t, c.reduction, c.param);
  if (kind == "huber") return F::huber_loss(x, t, c.reduction, c.param);
  if (kind == "kl_div") return F::kl_div(x, t, c.reduction, c.param != 0);
  if (kind == "bce") return F::binary_cross_entropy(x, t, w, c.reduction);
  const Tensor p = c.pos_weight.empty() ? Tensor() : from_vector(c.pos_weight);
  return F::binary_cross_entropy_with_logits(x, t, {.weight = w, .reduction = c.reduction, .pos_weight = p});
}

// Runs f, which must throw kiln::Error for `op` whose message holds each of `parts` and this file's `line`.
void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts) {
  test::expect_error_at(f, "test_nn.cpp", line, op, parts);
}

// Equal as PyTorch's results go: the same non-finite values, finite ones to a relative 1e-12.
void expect_torch_close(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isinf(w))
      EXPECT_TRUE(std::isnan(w) ? std::isnan(g) : g == w) << what << " [" << i << "]: " << g << " vs PyTorch " << w;
    else
      EXPECT_NEAR(g, w, 1e-12 * std::max(1.0, std::fabs(w))) << what << " [" << i << "]";
  }
}

TEST(PointwiseLosses, MatchPyTorchValuesAndGradients) {
  std::vector<Tensor> all;
  for (const PointwiseLossCase& c : kPointwiseLosses) {
    const Tensor x = from_vector(c.input, {2, 3}).requires_grad_();
    const Tensor t = from_vector(c.target, {2, 3}).requires_grad_();
    const Tensor loss = pointwise_loss(c, x, t);
    const Tensor u = arange(1, static_cast<double>(loss.numel()) + 1, 1, kFloat64).reshape(loss.shape());
    const std::vector<Tensor> g = grad({(loss * u).sum()}, {x, t});
    all.insert(all.end(), {loss, g[0], g[1]});
  }
  realize(all); // one schedule: far fewer kernels to compile than case by case
  for (size_t i = 0; i < std::size(kPointwiseLosses); ++i) {
    const PointwiseLossCase& c = kPointwiseLosses[i];
    EXPECT_EQ(all[3 * i].shape(), c.reduction == Reduction::None ? (IntList{2, 3}) : IntList{}) << c.torch;
    expect_torch_close(values(all[3 * i]), c.loss, std::string(c.torch) + " value");
    expect_torch_close(values(all[3 * i + 1]), c.input_grad, std::string(c.torch) + " input gradient");
    if (!c.target_grad.empty()) expect_torch_close(values(all[3 * i + 2]), c.target_grad, std::string(c.torch) + " target gradient");
  }
}

TEST(PointwiseLosses, EdgesAsPyTorch) {
  // x - t = +-inf: the loss is inf, the gradient +-1 (+-delta for huber), not NaN (PyTorch's, of
  // F.smooth_l1_loss(x, t, reduction='none'), F.huber_loss(..., delta=0.5), F.l1_loss with x = [inf, -inf, 0.5], t = 0)
  const Tensor x = from_vector<double>({kInf, -kInf, 0.5}).requires_grad_();
  const Tensor t = zeros({3}, kFloat64);
  const std::vector<std::pair<Tensor, std::vector<double>>> infinite = {
      {F::smooth_l1_loss(x, t, Reduction::None), {1, -1, 0.5}},
      {F::huber_loss(x, t, Reduction::None, 0.5), {0.5, -0.5, 0.5}},
      {F::l1_loss(x, t, Reduction::None), {1, -1, 1}}};
  for (const auto& [loss, want] : infinite) {
    EXPECT_EQ(values(loss)[0], kInf);
    EXPECT_EQ(values(loss)[1], kInf);
    EXPECT_EQ(values(grad({loss.sum()}, {x})[0]), want);
  }
  // beta = 0 is l1: the value +0 where input equals target (F.smooth_l1_loss(a, b, reduction='none', beta=0.0)
  // is [0.0, 4.0] for a = [1, 2], b = [1, -2]); the input's gradient there is -1, as PyTorch's (in the table
  // above), the target's +1, where PyTorch's backward, swapping input and target, makes it -1 too
  const Tensor a = from_vector<double>({1, 2}).requires_grad_(), b = from_vector<double>({1, -2}).requires_grad_();
  const Tensor l1 = F::smooth_l1_loss(a, b, Reduction::None, 0.0);
  EXPECT_EQ(values(l1), (std::vector<double>{0, 4}));
  EXPECT_FALSE(std::signbit(values(l1)[0]));
  const std::vector<Tensor> gl1 = grad({l1.sum()}, {a, b});
  EXPECT_EQ(values(gl1[0]), (std::vector<double>{-1, 1}));
  EXPECT_EQ(values(gl1[1]), (std::vector<double>{1, -1}));

  // kl_div broadcasts a target [3] over input [2, 3]: F.kl_div(x, t, reduction='batchmean') is
  // 0.3053469859354264 and its gradients -t / 2 and (log t + 1) * 2 / 2 - x.sum(0) / 2
  const Tensor logp = from_vector<double>({-1.2, -0.7, -1.5, -0.3, -2.0, -1.9}, {2, 3}).requires_grad_();
  const Tensor p3 = from_vector<double>({0.2, 0.5, 0.3}).requires_grad_();
  const Tensor kl = F::kl_div(logp, p3, Reduction::BatchMean);
  EXPECT_NEAR(kl.item<double>(), 0.3053469859354264, 1e-15);
  expect_torch_close(values(F::kl_div(logp, p3, Reduction::None)),
                     {-0.0818875824868201, 0.0034264097200273347, 0.08880815870221914, -0.2618875824868201,
                      0.6534264097200273, 0.20880815870221914}, "kl_div broadcast");
  const std::vector<Tensor> gk = grad({kl}, {logp, p3});
  expect_torch_close(values(gk[0]), {-0.1, -0.25, -0.15, -0.1, -0.25, -0.15}, "kl_div broadcast input gradient");
  expect_torch_close(values(gk[1]), {0.14056208756589972, 1.6568528194400547, 1.4960271956740638}, "kl_div broadcast target gradient");
  // a 0-d input's batchmean is its sum: F.kl_div(torch.tensor(-0.5), torch.tensor(0.3), reduction='batchmean')
  EXPECT_NEAR(F::kl_div(scalar_tensor(-0.5, kFloat64), scalar_tensor(0.3, kFloat64), Reduction::BatchMean).item<double>(),
              -0.21119184129778082, 1e-15);
  // a zero target adds 0 (xlogy); its gradient is -input, where PyTorch's is NaN (0 / 0 in xlogy's backward)
  const Tensor zero_target = from_vector<double>({0.0, 0.5}).requires_grad_();
  const Tensor in2 = from_vector<double>({-0.3, -0.7});
  EXPECT_NEAR(F::kl_div(in2, zero_target, Reduction::Sum).item<double>(), 0.5 * (std::log(0.5) + 0.7), 1e-15);
  expect_torch_close(values(grad({F::kl_div(in2, zero_target, Reduction::Sum)}, {zero_target})[0]),
                     {0.3, std::log(0.5) + 1 + 0.7}, "kl_div zero target gradient");

  // binary_cross_entropy at input 0 and 1 and below e^-100: each log clamped at -100, as PyTorch
  // (F.binary_cross_entropy(p, y, reduction='none') is [100, -0, 0, 50, 100] for p = [0, 1, 0, 1, 1e-300],
  // y = [1, 1, 0, 0.5, 1]). The gradients are the formula's, finite: none through a clamped log, -1 / p or
  // 1 / (1 - p) through the other; PyTorch's are (p - y) / max(p (1 - p), 1e-12): [-1e12, 0, 0, 5e11, -1e12].
  const Tensor p = from_vector<double>({0, 1, 0, 1, 1e-300}).requires_grad_();
  const Tensor y = from_vector<double>({1, 1, 0, 0.5, 1});
  const Tensor bce = F::binary_cross_entropy(p, y, Reduction::None);
  EXPECT_EQ(values(bce), (std::vector<double>{100, 0, 0, 50, 100}));
  EXPECT_EQ(values(grad({bce.sum()}, {p})[0]), (std::vector<double>{0, -1, 1, -0.5, 0}));
  // an input outside [0, 1] already computed is an error, as PyTorch's; a lazy one gives NaN
  const Tensor outside = from_vector<double>({0.5, 1.5}), nan = from_vector<double>({kNaN}), zero2 = zeros({2}, kFloat64);
  expect_error([&] { (void)F::binary_cross_entropy(outside, zero2); }, __LINE__, "binary_cross_entropy",
               {"between 0 and 1", "1.5"});
  expect_error([&] { (void)F::binary_cross_entropy(nan, zeros({1}, kFloat64)); }, __LINE__, "binary_cross_entropy",
               {"between 0 and 1", "nan"});
  const Tensor lazy = from_vector<double>({0.5, 1.5}) * 1.0;
  EXPECT_TRUE(std::isnan(F::binary_cross_entropy(lazy, zeros({2}, kFloat64)).item<double>()));
  // a pos_weight of 1 is no pos_weight, bit for bit; the old overload is the options' default
  const Tensor z = randn({4, 3}, 61, kFloat64), zt = rand({4, 3}, 62, kFloat64);
  EXPECT_EQ(values(F::binary_cross_entropy_with_logits(z, zt, {.reduction = Reduction::None, .pos_weight = ones({3}, kFloat64)})),
            values(F::binary_cross_entropy_with_logits(z, zt, Reduction::None)));
  EXPECT_EQ(F::binary_cross_entropy_with_logits(z, zt, F::BinaryCrossEntropyWithLogitsOptions{}).item<double>(),
            F::binary_cross_entropy_with_logits(z, zt).item<double>());
}

TEST(PointwiseLosses, GradcheckInF64) {
  const Tensor w = rand({3}, 63, kFloat64) + 0.5, pw = rand({3}, 64, kFloat64) * 3.0;
  const std::vector<std::pair<Fn1, std::vector<Tensor>>> cases = {
      {[](const std::vector<Tensor>& v) { return F::l1_loss(v[0], v[1]); }, {rnd({2, 3}, 65), rnd({2, 3}, 66)}},
      {[](const std::vector<Tensor>& v) { return F::smooth_l1_loss(v[0], v[1], Reduction::Sum, 0.7); },
       {rnd({2, 3}, 67), rnd({2, 3}, 68)}},
      {[](const std::vector<Tensor>& v) { return F::huber_loss(v[0], v[1], Reduction::Mean, 0.6); },
       {rnd({2, 3}, 69), rnd({2, 3}, 70)}},
      {[](const std::vector<Tensor>& v) { return F::kl_div(F::log_softmax(v[0], 1), v[1], Reduction::BatchMean); },
       {rnd({2, 3}, 71), rand({2, 3}, 72, kFloat64) + 0.1}},
      {[](const std::vector<Tensor>& v) { return F::kl_div(v[0], v[1], Reduction::Mean, true); },
       {rnd({2, 3}, 73), rnd({3}, 74)}},
      {[w](const std::vector<Tensor>& v) { return F::binary_cross_entropy(sigmoid(v[0]), v[1], w, Reduction::Sum); },
       {rnd({2, 3}, 75), rand({2, 3}, 76, kFloat64)}},
      {[w, pw](const std::vector<Tensor>& v) {
         return F::binary_cross_entropy_with_logits(v[0], v[1], {.weight = w, .pos_weight = pw});
       },
       {rnd({2, 3}, 77), rand({2, 3}, 78, kFloat64)}},
  };
  for (const auto& [f, inputs] : cases) expect_gradcheck(f, inputs);
}

TEST(PointwiseLosses, ErrorsNameTheOpShapesAndLine) {
  const Tensor a = zeros({2, 3}), b = zeros({3});
  // different shapes (PyTorch broadcasts l1, smooth_l1, huber and mse with a warning; refuses the two BCEs)
  expect_error([&] { (void)F::l1_loss(a, b); }, __LINE__, "l1_loss", {"f32[2,3]", "f32[3]", "same shape"});
  expect_error([&] { (void)F::smooth_l1_loss(a, b); }, __LINE__, "smooth_l1_loss", {"f32[2,3]", "f32[3]", "same shape"});
  expect_error([&] { (void)F::huber_loss(a, b); }, __LINE__, "huber_loss", {"f32[2,3]", "f32[3]", "same shape"});
  expect_error([&] { (void)F::mse_loss(a, b); }, __LINE__, "mse_loss", {"f32[2,3]", "f32[3]", "same shape"});
  expect_error([&] { (void)F::binary_cross_entropy(a, b); }, __LINE__, "binary_cross_entropy", {"f32[2,3]", "f32[3]"});
  expect_error([&] { (void)F::binary_cross_entropy_with_logits(a, b, {.pos_weight = zeros({3})}); }, __LINE__,
               "binary_cross_entropy_with_logits",
               {"f32[2,3]", "f32[3]"});
  expect_error([&] { (void)F::kl_div(a, zeros({2})); }, __LINE__, "kl_div", {"f32[2,3]", "f32[2]", "broadcast"});
  // parameters and weights
  expect_error([&] { (void)F::smooth_l1_loss(a, a, Reduction::Mean, -0.5); }, __LINE__, "smooth_l1_loss", {"beta", "-0.5"});
  expect_error([&] { (void)F::huber_loss(a, a, Reduction::Mean, 0.0); }, __LINE__, "huber_loss", {"delta", "positive"});
  expect_error([&] { (void)F::binary_cross_entropy(a, a, zeros({4})); }, __LINE__, "binary_cross_entropy",
               {"f32[2,3]", "f32[4]", "broadcast to the input's shape [2,3]"});
  expect_error([&] { (void)F::binary_cross_entropy(zeros({3}), zeros({3}), zeros({2, 3})); }, __LINE__,
               "binary_cross_entropy", {"f32[3]", "f32[2,3]", "broadcast"});
  expect_error([&] { (void)F::binary_cross_entropy_with_logits(a, a, {.pos_weight = zeros({2})}); }, __LINE__,
               "binary_cross_entropy_with_logits", {"pos_weight", "f32[2]"});
  expect_error([&] { (void)F::binary_cross_entropy_with_logits(a, a, {.weight = zeros({3}, kInt64)}); }, __LINE__,
               "binary_cross_entropy_with_logits", {"weight", "i64[3]", "floating"});
  // BatchMean is kl_div's only, as PyTorch's 'batchmean'
  expect_error([&] { (void)F::l1_loss(a, a, Reduction::BatchMean); }, __LINE__, "l1_loss", {"BatchMean"});
  expect_error([&] { (void)F::cross_entropy(a, zeros({2}, kInt64), {.reduction = Reduction::BatchMean}); }, __LINE__,
               "cross_entropy", {"BatchMean"});
  // an integer input, an undefined target
  expect_error([&] { (void)F::l1_loss(zeros({2}, kInt64), zeros({2}, kInt64)); }, __LINE__, "l1_loss", {"i64[2]", "floating"});
  expect_error([&] { (void)F::kl_div(a, Tensor()); }, __LINE__, "kl_div", {"undefined"});
  // an error inside the ops a loss is made of is the loss's, at the user's line
  expect_error([&] { (void)F::l1_loss(zeros({2}), zeros({2}, kBool)); }, __LINE__, "l1_loss", {"bool"});
}

// ---------------------------------------------------------------- errors

TEST(Errors, ClearMessages) {
  try {
    F::conv2d(zeros({1, 3, 5, 5}), zeros({4, 2, 3, 3}), Tensor(), 1, 0, 1, 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("channels do not match"), std::string::npos) << e.what();
  }
  EXPECT_THROW(F::conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 3, 3}), Tensor(), 1, 0, 1, 1), Error);
  EXPECT_THROW(F::cross_entropy(zeros({2, 3}), from_vector<int64_t>({0, 3})), Error);
  EXPECT_THROW(F::cross_entropy(zeros({2, 3}), from_vector<float>({0, 1})), Error);
  EXPECT_THROW(F::mse_loss(zeros({2}), zeros({3})), Error);
  EXPECT_THROW(nn::Linear(0, 3), Error);
  EXPECT_THROW(nn::Conv2d(3, 4, 3, {.groups = 2}), Error);
  EXPECT_THROW(nn::Linear(3, 2)(zeros({2, 4})), Error);
  EXPECT_THROW(nn::Dropout(-0.1), Error);
}

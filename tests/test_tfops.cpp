// Transformer-era functions and modules built from kiln's primitives (issue 15): pieces and joins
// (narrow, chunk, split, unbind, stack, squeeze), masks (tril, triu, masked_fill), clamp, sign,
// logsumexp, the Tensor methods, and the one-dim sum/mean overloads. Forward values against
// PyTorch 1.13's semantics (written out by hand here, or generated tables), gradients by gradcheck
// in f64, zero-size and odd shapes, and error messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <filesystem>

#include "kiln/autograd.h"
#include "kiln/checkpoint.h"
#include "kiln/optim.h"
#include "kiln/options.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "error_of.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using Fn1 = std::function<Tensor(const std::vector<Tensor>&)>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

Tensor rnd(IntList shape, uint64_t seed) { return randn(std::move(shape), seed, kFloat64); }

// 0, 1, 2, ... as f64 of a shape (distinct values make misplaced elements visible).
Tensor iota(IntList shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return arange(0, static_cast<double>(n), 1, kFloat64).reshape(shape);
}

void expect_gradcheck(const Fn1& f, const std::vector<Tensor>& inputs) {
  GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.ok) << r.report;
}

// Bitwise equal, NaN equal to NaN.
void expect_same(const std::vector<double>& got, const std::vector<double>& want, const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "]: " << got[i];
    else EXPECT_EQ(got[i], want[i]) << what << " [" << i << "]";
  }
}

// Runs f, which must throw kiln::Error for `op` whose message holds each of `parts` and this file's `line`.
void expect_error(const std::function<void()>& f, int line, const std::string& op, const std::vector<std::string>& parts) {
  test::expect_error_at(f, "test_tfops.cpp", line, op, parts);
}

// ---------------------------------------------------------------- pieces and joins

TEST(Pieces, NarrowAsPyTorch) {
  Tensor x = iota({3, 5});
  expect_same(values(narrow(x, 1, 1, 3)), {1, 2, 3, 6, 7, 8, 11, 12, 13});
  expect_same(values(x.narrow(0, -2, 2)), {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}); // start counts from the end
  EXPECT_EQ(narrow(x, -1, 5, 0).shape(), (IntList{3, 0}));                     // empty at the end
  expect_gradcheck([](const std::vector<Tensor>& v) { return (narrow(v[0], 1, 2, 2) * v[1]).sum(); },
                   {rnd({3, 5}, 1), rnd({3, 2}, 2)});
}

TEST(Pieces, UnfoldAsPyTorch) {
  // torch.arange(14.).reshape(2, 7).unfold(1, 3, 2): windows at 0, 2, 4 of each row
  const Tensor x = iota({2, 7});
  const Tensor w = x.unfold(1, 3, 2);
  EXPECT_EQ(w.shape(), (IntList{2, 3, 3}));
  expect_same(values(w), {0, 1, 2, 2, 3, 4, 4, 5, 6, 7, 8, 9, 9, 10, 11, 11, 12, 13});
  // along dim 0, the window last: out[w, c, k] = x[w + k, c]
  expect_same(values(unfold(iota({3, 2}), 0, 2, 1)), {0, 2, 1, 3, 2, 4, 3, 5});
  expect_same(values(iota({10}).unfold(0, 2, 4)), {0, 1, 4, 5, 8, 9}); // gaps; the last window fits
  expect_same(values(iota({10}).unfold(0, 3, 4)), {0, 1, 2, 4, 5, 6});    // 9 starts no whole window
  EXPECT_EQ(x.unfold(-1, 0, 1).shape(), (IntList{2, 8, 0}));            // empty windows
  EXPECT_EQ(x.unfold(1, 7, 1).shape(), (IntList{2, 1, 7}));             // one window of the whole dim
  // overlapping windows: each element's gradient sums over the windows holding it
  expect_gradcheck([](const std::vector<Tensor>& v) { return (unfold(v[0], 1, 3, 2) * v[1]).sum(); },
                   {rnd({2, 7}, 3), rnd({2, 3, 3}, 4)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (v[0].unfold(0, 2, 3).unfold(1, 2, 1) * v[1]).sum(); },
                   {rnd({7, 4}, 5), rnd({2, 3, 2, 2}, 6)});
  const Tensor ones4 = ones({2, 7}, kFloat64).requires_grad_();
  const Tensor g = grad({ones4.unfold(1, 3, 2).sum()}, {ones4})[0];
  expect_same(values(g), {1, 1, 2, 1, 2, 1, 1, 1, 1, 2, 1, 2, 1, 1}); // windows count per element
}

TEST(Pieces, ChunkAsPyTorch) {
  Tensor x = iota({5, 2});
  auto c = chunk(x, 3); // ceil(5 / 3) = 2: sizes 2, 2, 1
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[2].shape(), (IntList{1, 2}));
  expect_same(values(c[1]), {4, 5, 6, 7});
  EXPECT_EQ(iota({6}).chunk(4).size(), 3u); // sizes 2, 2, 2: fewer pieces than asked, as PyTorch
  auto e = chunk(zeros({0, 2}), 3);         // an empty dim: `chunks` empty pieces
  ASSERT_EQ(e.size(), 3u);
  for (const Tensor& t : e) EXPECT_EQ(t.shape(), (IntList{0, 2}));
  auto d = x.chunk(2, -1);
  expect_same(values(d[1]), {1, 3, 5, 7, 9});
}

TEST(Pieces, SplitBySizeAndByList) {
  Tensor x = iota({7});
  auto s = split(x, 3);
  ASSERT_EQ(s.size(), 3u);
  expect_same(values(s[2]), {6});
  auto l = x.split({2, 0, 5});
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[1].shape(), (IntList{0}));
  expect_same(values(l[2]), {2, 3, 4, 5, 6});
  auto one = split(x, {7}); // a one-element list is a list, not a size
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(split(zeros({0}), 2).size(), 1u); // an empty dim: one empty piece
  EXPECT_EQ(split(zeros({0}), 0).size(), 1u);
  EXPECT_EQ(split(x, 7).size(), 1u);
  expect_gradcheck(
      [](const std::vector<Tensor>& v) {
        auto p = split(v[0], {1, 3}, 1);
        return (p[0] * 2.0).sum() + (p[1] * p[1]).sum();
      },
      {rnd({2, 4}, 3)});
}

TEST(Pieces, UnbindAndStackAreInverse) {
  Tensor x = iota({2, 3, 4});
  for (int64_t d : {0, 1, 2, -1}) {
    auto parts = unbind(x, d);
    ASSERT_EQ(static_cast<int64_t>(parts.size()), x.size(d));
    expect_same(values(stack(parts, d)), values(x), "dim " + std::to_string(d));
  }
  auto rows = x.unbind(1);
  EXPECT_EQ(rows[2].shape(), (IntList{2, 4}));
  expect_same(values(rows[2]), {8, 9, 10, 11, 20, 21, 22, 23});
  // stack at the new last dim interleaves
  expect_same(values(stack({iota({2}), iota({2}) + 10.0}, -1)), {0, 10, 1, 11});
  EXPECT_EQ(stack({zeros({0, 3}), zeros({0, 3})}, 1).shape(), (IntList{0, 2, 3}));
  EXPECT_TRUE(unbind(zeros({0, 3})).empty());
  expect_gradcheck(
      [](const std::vector<Tensor>& v) { return (stack({v[0], v[1] * v[0]}, 1) * v[2]).sum(); },
      {rnd({2, 3}, 4), rnd({2, 3}, 5), rnd({2, 2, 3}, 6)});
  expect_gradcheck([](const std::vector<Tensor>& v) { auto p = unbind(v[0], 1); return (p[0] * p[2]).sum(); },
                   {rnd({2, 3}, 7)});
}

TEST(Pieces, SqueezeAndUnsqueeze) {
  Tensor x = zeros({1, 3, 1});
  EXPECT_EQ(squeeze(x).shape(), (IntList{3}));
  EXPECT_EQ(x.squeeze().shape(), (IntList{3}));
  EXPECT_EQ(squeeze(x, -1).shape(), (IntList{1, 3}));
  EXPECT_EQ(squeeze(x, 1).shape(), (IntList{1, 3, 1})); // not of extent 1: unchanged
  EXPECT_EQ(zeros({2, 3}).squeeze().shape(), (IntList{2, 3}));
  EXPECT_EQ(unsqueeze(zeros({2, 3}), -1).shape(), (IntList{2, 3, 1}));
  EXPECT_EQ(unsqueeze(zeros({2, 3}), 0).shape(), (IntList{1, 2, 3}));
  EXPECT_EQ(unsqueeze(scalar_tensor(1), 0).shape(), (IntList{1}));
}

TEST(Pieces, ErrorsNameTheOpShapesAndLine) {
  Tensor x = zeros({3, 5});
  expect_error([&] { (void)narrow(x, 1, 3, 3); }, __LINE__, "narrow", {"f32[3,5]", "exceeds"});
  expect_error([&] { (void)narrow(x, 1, -6, 1); }, __LINE__, "narrow", {"f32[3,5]", "out of range"});
  expect_error([&] { (void)narrow(x, 2, 0, 1); }, __LINE__, "narrow", {"f32[3,5]", "dim 2"});
  expect_error([&] { (void)x.narrow(0, 0, -1); }, __LINE__, "narrow", {"f32[3,5]"});
  expect_error([&] { (void)x.unfold(1, 6, 1); }, __LINE__, "unfold", {"f32[3,5]", "window size 6"});
  expect_error([&] { (void)x.unfold(1, 2, 0); }, __LINE__, "unfold", {"f32[3,5]", "step must be positive"});
  expect_error([&] { (void)unfold(x, 2, 1, 1); }, __LINE__, "unfold", {"f32[3,5]", "dim 2"});
  expect_error([&] { (void)scalar_tensor(1).unfold(0, 1, 1); }, __LINE__, "unfold", {"0-d"});
  expect_error([&] { (void)chunk(x, 0); }, __LINE__, "chunk", {"f32[3,5]", "positive"});
  expect_error([&] { (void)chunk(scalar_tensor(1), 2); }, __LINE__, "chunk", {"0-d"});
  expect_error([&] { (void)split(x, 0); }, __LINE__, "split", {"f32[3,5]", "split_size 0"});
  expect_error([&] { (void)split(x, -1, 1); }, __LINE__, "split", {"f32[3,5]"});
  expect_error([&] { (void)split(x, {2, 2}, 1); }, __LINE__, "split", {"f32[3,5]", "[2,2]", "add up"});
  expect_error([&] { (void)x.split({4, -1}, 1); }, __LINE__, "split", {"non-negative"});
  expect_error([&] { (void)unbind(x, 2); }, __LINE__, "unbind", {"f32[3,5]"});
  expect_error([&] { (void)stack({x, zeros({5, 3})}); }, __LINE__, "stack", {"f32[3,5]", "f32[5,3]", "same shape"});
  expect_error([&] { (void)stack({x}, 3); }, __LINE__, "stack", {"f32[3,5]", "dim 3"});
  expect_error([&] { (void)stack({}); }, __LINE__, "stack", {"at least one"});
  expect_error([&] { (void)unsqueeze(x, 3); }, __LINE__, "unsqueeze", {"f32[3,5]", "dim 3"});
  expect_error([&] { (void)squeeze(x, -3); }, __LINE__, "squeeze", {"f32[3,5]", "dim -3"});
}

// ---------------------------------------------------------------- masks

// The reference: elements kept where keep(col - row), per the last two dims.
std::vector<double> triangle_reference(const Tensor& x, const std::function<bool(int64_t)>& keep) {
  auto v = values(x);
  const int64_t rows = x.size(-2), cols = x.size(-1);
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / cols % rows, c = static_cast<int64_t>(i) % cols;
    if (!keep(c - r)) v[i] = 0;
  }
  return v;
}

TEST(Masks, TrilAndTriuWithDiagonalOffsets) {
  for (const IntList& shape : {IntList{3, 4}, IntList{2, 4, 3}, IntList{1, 1}, IntList{0, 3}, IntList{2, 3, 0}}) {
    Tensor x = iota(shape) + 1.0;
    for (int64_t k : {-5, -1, 0, 1, 2, 7}) {
      expect_same(values(tril(x, k)), triangle_reference(x, [k](int64_t o) { return o <= k; }), "tril " + std::to_string(k));
      expect_same(values(x.triu(k)), triangle_reference(x, [k](int64_t o) { return o >= k; }), "triu " + std::to_string(k));
    }
  }
  EXPECT_EQ(tril(ones({2, 2}, kInt32)).dtype(), kInt32);
  EXPECT_EQ(triu(ones({2, 2}, kBool)).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 1}));
  expect_gradcheck([](const std::vector<Tensor>& v) { return (tril(v[0], -1) * v[1]).sum(); }, {rnd({2, 3, 4}, 8), rnd({2, 3, 4}, 9)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (triu(v[0], 1) * v[1]).sum(); }, {rnd({3, 4}, 10), rnd({3, 4}, 11)});
  expect_error([] { (void)tril(zeros({3})); }, __LINE__, "tril", {"f32[3]", "2 dims"});
  expect_error([] { (void)triu(zeros({})); }, __LINE__, "triu", {"f32[]"});
}

TEST(Masks, MaskedFillKeepsTheDtypeAndBroadcasts) {
  Tensor x = iota({2, 3});
  Tensor m = from_vector<bool>({true, false, true}, {3});
  expect_same(values(masked_fill(x, m, -kInf)), {-kInf, 1, -kInf, -kInf, 4, -kInf});
  EXPECT_EQ(masked_fill(x, m, 2).dtype(), kFloat64);
  Tensor xi = arange(3);
  EXPECT_EQ(xi.masked_fill(m, 1.7).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1})); // cast to x's dtype
  EXPECT_EQ(masked_fill(zeros({3}), zeros({2, 3}, kBool), 1).shape(), (IntList{2, 3}));  // both broadcast
  EXPECT_EQ(masked_fill(zeros({0, 3}), m, 1).shape(), (IntList{0, 3}));
  // a causal mask as attention builds it: -inf above the diagonal, then softmax
  Tensor causal = triu(ones({3, 3}, kBool), 1);
  expect_same(values(F::softmax(masked_fill(zeros({3, 3}, kFloat64), causal, -kInf), -1)),
              {1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  expect_gradcheck([m](const std::vector<Tensor>& v) { return (masked_fill(v[0], m, 3.0) * v[1]).sum(); },
                   {rnd({2, 3}, 12), rnd({2, 3}, 13)});
  expect_error([&] { (void)masked_fill(x, zeros({3}), 0); }, __LINE__, "masked_fill", {"f64[2,3]", "f32[3]", "bool"});
  expect_error([&] { (void)masked_fill(x, zeros({4}, kBool), 0); }, __LINE__, "masked_fill", {"f64[2,3]", "bool[4]", "broadcast"});
  // a value an integer x cannot hold is refused, as PyTorch's "cannot be converted without overflow"
  expect_error([&] { (void)xi.masked_fill(m, 1e20); }, __LINE__, "masked_fill", {"i64[3]", "cannot be converted to i64"});
  expect_error([&] { (void)xi.masked_fill(m, kNaN); }, __LINE__, "masked_fill", {"cannot be converted to i64"});
  expect_error([&] { (void)xi.to(kInt32).masked_fill(m, int64_t{1} << 40); }, __LINE__, "masked_fill",
               {"i32[3]", "1099511627776 cannot be converted to i32"});
  EXPECT_EQ(xi.to(kInt32).masked_fill(m, -2147483648.9).to_vector<int32_t>(), (std::vector<int32_t>{INT32_MIN, 1, INT32_MIN}));
  expect_error([&] { (void)full({2}, 3e9, kInt32); }, __LINE__, "full", {"cannot be converted to i32"});
  expect_error([&] { (void)pad(xi, {1, 1}, 1e19); }, __LINE__, "pad", {"i64[3]", "cannot be converted to i64"});
}

// ---------------------------------------------------------------- clamp and sign

TEST(Clamp, ValuesDtypesAndBoundsAsPyTorch) {
  Tensor x = from_vector<double>({-2, -1, 0, 0.5, 1, 3, kNaN, kInf});
  expect_same(values(clamp(x, -1, 1)), {-1, -1, 0, 0.5, 1, 1, kNaN, 1});
  expect_same(values(x.clamp(0.25)), {0.25, 0.25, 0.25, 0.5, 1, 3, kNaN, kInf});
  expect_same(values(clamp(x, std::nullopt, 0)), {-2, -1, 0, 0, 0, 0, kNaN, 0});
  expect_same(values(clamp(x, 2, 1)), {1, 1, 1, 1, 1, 1, kNaN, 1}); // min > max gives max
  Tensor xi = from_vector<int64_t>({1, 5, 9});
  EXPECT_EQ(clamp(xi, 2, 6).dtype(), kInt64);
  EXPECT_EQ(clamp(xi, 2.5, 6).dtype(), kFloat32); // promoted by the bound, as PyTorch 1.13
  EXPECT_EQ(clamp(xi, 2.5, 6).to_vector<float>(), (std::vector<float>{2.5f, 5, 6}));
  EXPECT_EQ(clamp(zeros({0, 2}), 0, 1).shape(), (IntList{0, 2}));
  // the gradient is 1 inside [min, max], bounds included, else 0
  Tensor g = from_vector<double>({-2, -1, 0, 1, 2}).requires_grad_();
  clamp(g, -1, 1).sum().backward();
  expect_same(values(g.grad()), {0, 1, 1, 1, 0});
  Tensor h = from_vector<double>({1, 2, 3}).requires_grad_();
  clamp(h, 3, 1).sum().backward();
  expect_same(values(h.grad()), {0, 0, 0});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (clamp(v[0], -0.5, 0.7) * v[1]).sum(); },
                   {rnd({3, 4}, 14), rnd({3, 4}, 15)});
  // NaN in x keeps its value with gradient 0; a NaN bound makes every element NaN (PyTorch's
  // clamp of two bounds), gradient 0
  Tensor n = from_vector<double>({-2, 0.5, kNaN}).requires_grad_();
  clamp(n, -1, 1).sum().backward();
  expect_same(values(n.grad()), {0, 1, 0});
  expect_same(values(clamp(n, kNaN, 1)), {kNaN, kNaN, kNaN});
  expect_same(values(clamp(n, std::nullopt, kNaN)), {kNaN, kNaN, kNaN});
  expect_same(values(grad({clamp(n, kNaN, 1).sum()}, {n})[0]), {0, 0, 0});
  // an integer bound an integer x cannot hold is refused (it would wrap)
  expect_error([&] { (void)clamp(xi.to(kInt32), int64_t{1} << 40); }, __LINE__, "clamp",
               {"i32[3]", "cannot be converted to i32"});
  expect_error([&] { (void)clamp(x, std::nullopt, std::nullopt); }, __LINE__, "clamp", {"f64[8]", "min and max"});
  expect_error([&] { (void)clamp(zeros({2}, kBool), true, true); }, __LINE__, "clamp", {"bool[2]"}); // integer bounds: see Parity
}

TEST(Sign, ValuesAndAZeroGradient) {
  Tensor x = from_vector<double>({kNaN, -0.0, 0.0, -2, 3, -kInf, kInf});
  const auto s = values(sign(x));
  expect_same(s, {0, 0, 0, -1, 1, -1, 1}); // NaN gives 0 in PyTorch 1.13
  EXPECT_FALSE(std::signbit(s[1]));      // and -0 gives +0
  EXPECT_EQ(from_vector<int64_t>({-5, 0, 7}).sign().to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(sign(from_vector<int32_t>({-5})).dtype(), kInt32);
  EXPECT_EQ(sign(zeros({2}, kBool)).dtype(), kBool);
  Tensor g = from_vector<double>({1, 0, -2}).requires_grad_();
  auto d = grad({(sign(g) * 3.0).sum()}, {g});
  expect_same(values(d[0]), {0, 0, 0});
}

// ---------------------------------------------------------------- logsumexp

TEST(Logsumexp, StableAndNonFiniteRowsAsPyTorch) {
  Tensor x = from_vector<double>({1, 2, 3, 1000, 1000, -1000, -kInf, -kInf, -kInf, kInf, 1, -kInf}, {4, 3});
  const double l123 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const auto r = values(logsumexp(x, {1}));
  ASSERT_EQ(r.size(), 4u);
  EXPECT_NEAR(r[0], l123, 1e-15);
  EXPECT_NEAR(r[1], 1000 + std::log(2.0), 1e-12); // no overflow
  EXPECT_EQ(r[2], -kInf);                         // a row of -inf: -inf, not NaN
  EXPECT_EQ(r[3], kInf);
  EXPECT_EQ(x.logsumexp({1}, true).shape(), (IntList{4, 1}));
  EXPECT_EQ(logsumexp(x, {0, 1}).shape(), IntList{});
  EXPECT_EQ(values(logsumexp(zeros({2, 0}), {1})), (std::vector<double>{-kInf, -kInf})); // empty: log(0)
  EXPECT_EQ(logsumexp(arange(3), {0}).dtype(), kFloat32);
  EXPECT_NEAR(logsumexp(from_vector<int64_t>({1, 2}), {0}).item<double>(), 2.3132617, 1e-6);
  expect_gradcheck([](const std::vector<Tensor>& v) { return (logsumexp(v[0], {1}) * v[1]).sum(); },
                   {rnd({3, 4}, 16), rnd({3}, 17)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return logsumexp(v[0] * 30.0, {0, 2}, true).sum(); },
                   {rnd({2, 3, 2}, 18)});
  expect_error([&] { (void)logsumexp(x, {2}); }, __LINE__, "logsumexp", {"f64[4,3]", "dim 2"});
}

// ---------------------------------------------------------------- methods and overloads

TEST(Methods, ElementwiseMethodsEqualTheFreeFunctions) {
  Tensor x = rand({2, 3}, 19, kFloat64) + 0.5;
  const std::vector<std::pair<Tensor, Tensor>> pairs = {
      {x.neg(), neg(x)},         {x.abs(), abs(x)},     {x.exp(), exp(x)},
      {x.log(), log(x)},         {x.sqrt(), sqrt(x)},   {x.rsqrt(), rsqrt(x)},
      {x.sin(), sin(x)},         {x.cos(), cos(x)},     {x.tanh(), tanh(x)},
      {x.sigmoid(), sigmoid(x)}, {x.relu(), relu(x)},   {x.reciprocal(), reciprocal(x)},
      {x.square(), square(x)},   {x.pow(3), pow(x, 3)}, {x.pow(x), pow(x, x)}};
  for (const auto& [m, f] : pairs) expect_same(values(m), values(f));
  // the rounding methods, on values with ties: torch.tensor([2.5, -2.5, 0.5, 1.5, -0.5]).round()
  // is [2, -2, 0, 2, -0]; floor and ceil as math's
  const Tensor h = from_vector<double>({2.5, -2.5, 0.5, 1.5, -0.5, -1.2, 3.7});
  expect_same(values(h.round()), {2, -2, 0, 2, -0.0, -1, 4});
  EXPECT_TRUE(std::signbit(values(h.round())[4]));
  expect_same(values(h.floor()), {2, -3, 0, 1, -1, -2, 3});
  expect_same(values(h.ceil()), {3, -2, 1, 2, -0.0, -1, 4});
  const Tensor y = rnd({2, 3}, 56) * 3.0;
  for (const auto& [m, f] : std::vector<std::pair<Tensor, Tensor>>{{y.floor(), floor(y)}, {y.ceil(), ceil(y)}, {y.round(), round(y)}})
    expect_same(values(m), values(f));
  EXPECT_EQ(from_vector<int32_t>({-3, 4}).round().dtype(), kInt32); // integers unchanged
  expect_error([] { (void)zeros({2}, kBool).floor(); }, __LINE__, "floor", {"bool[2]"});
}

// A bool is not a dim: x.sum(true) meant dim 1 (a user's keepdim read as a dim) and now does not compile.
template <class D> concept SumsOverOneDim = requires(const Tensor& x, D d) { x.sum(d); };
template <class D> concept MeansOverOneDim = requires(const Tensor& x, D d) { x.mean(d); mean(x, d); };
static_assert(SumsOverOneDim<int> && SumsOverOneDim<int64_t> && MeansOverOneDim<int>);
static_assert(!SumsOverOneDim<bool> && !MeansOverOneDim<bool>);

TEST(Methods, OneDimSumAndMeanOverloads) {
  Tensor x = iota({2, 3});
  expect_same(values(x.sum(1)), {3, 12});
  expect_same(values(x.sum(-2, true)), {3, 5, 7});
  EXPECT_EQ(x.sum(0, true).shape(), (IntList{1, 3}));
  expect_same(values(sum(x, 0)), {3, 5, 7});
  expect_same(values(x.mean(1)), {1, 4});
  expect_same(values(mean(x, 1, true)), {1, 4});
  // braces still mean a list: {} is every dim, {1} is dim 1
  EXPECT_EQ(x.sum({}).item<double>(), 15);
  EXPECT_EQ(sum(x, {}, true).shape(), (IntList{1, 1}));
  expect_same(values(x.sum({1})), {3, 12});
  expect_error([&] { (void)x.sum(2); }, __LINE__, "sum", {"f64[2,3]", "dim 2"});
}

// ---------------------------------------------------------------- RMSNorm

// PyTorch's formula in f64 on the host: x / sqrt(mean over the last `k` elements of x^2 + eps) * w.
std::vector<double> rms_reference(const std::vector<double>& x, const std::vector<double>& w, size_t k, double eps) {
  std::vector<double> out(x.size());
  for (size_t r = 0; r < x.size() / k; ++r) {
    double ss = 0;
    for (size_t i = 0; i < k; ++i) ss += x[r * k + i] * x[r * k + i];
    const double inv = 1 / std::sqrt(ss / static_cast<double>(k) + eps);
    for (size_t i = 0; i < k; ++i) out[r * k + i] = x[r * k + i] * inv * (w.empty() ? 1.0 : w[i]);
  }
  return out;
}

void expect_near_rel(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << i;
}

TEST(RMSNorm, ForwardAgainstPyTorchsFormula) {
  Tensor x = rnd({2, 3, 4}, 20);
  Tensor w = rnd({3, 4}, 21);
  const double eps64 = std::numeric_limits<double>::epsilon();
  expect_near_rel(values(F::rms_norm(x, {3, 4}, w)), rms_reference(values(x), values(w), 12, eps64), 1e-14);
  expect_near_rel(values(F::rms_norm(x, {4}, Tensor(), 0.5)), rms_reference(values(x), {}, 4, 0.5), 1e-14);
  // eps defaults to the dtype's epsilon: visible on small f32 values (mean of squares 1e-8 < 1.19e-7)
  Tensor small = full({1, 4}, 1e-4, kFloat32);
  const double eps32 = std::numeric_limits<float>::epsilon();
  expect_near_rel(values(F::rms_norm(small, {4})), rms_reference(values(small), {}, 4, eps32), 1e-6);
  nn::RMSNorm m({4});
  EXPECT_EQ(m.weight.shape(), (IntList{4}));
  EXPECT_EQ(m.named_parameters().at(0).first, "weight");
  expect_near_rel(values(m(small)), rms_reference(values(small), {}, 4, eps32), 1e-6);
  EXPECT_EQ(m.str(), "RMSNorm(normalized_shape=[4], eps=None, elementwise_affine=true)");
  EXPECT_TRUE(nn::RMSNorm({4}, 1e-5, false).parameters().empty());
  EXPECT_EQ(F::rms_norm(zeros({0, 4}), {4}).shape(), (IntList{0, 4}));
  expect_same(values(F::rms_norm(zeros({1, 3}, kFloat64), {3})), {0, 0, 0}); // eps keeps zeros finite
}

TEST(RMSNorm, GradcheckAndErrors) {
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::rms_norm(v[0], {3}, v[1], 1e-3) * v[2]).sum(); },
                   {rnd({2, 3}, 22), rnd({3}, 23), rnd({2, 3}, 24)});
  nn::RMSNorm m({2, 3});
  m.to(kFloat64);
  expect_gradcheck([&m](const std::vector<Tensor>& v) { return (m(v[0]) * v[1]).sum(); }, {rnd({4, 2, 3}, 25), rnd({4, 2, 3}, 26)});
  expect_error([] { (void)F::rms_norm(zeros({2, 3}), {2}); }, __LINE__, "rms_norm", {"f32[2,3]", "normalized_shape [2]"});
  expect_error([] { (void)F::rms_norm(zeros({2, 3}), {3}, zeros({2})); }, __LINE__, "rms_norm", {"f32[2,3]", "f32[2]"});
  expect_error([] { (void)F::rms_norm(zeros({2, 3}, kInt64), {3}); }, __LINE__, "rms_norm", {"i64[2,3]", "floating"});
}

// ---------------------------------------------------------------- var and std

// Rows: plain values, a constant row (variance 0) and values of mixed signs.
Tensor var_input() { return from_vector<double>({1.0, 2.5, -0.5, 4.0, 3, 3, 3, 3, -2.0, 0.0, 7.0, 1.5}, {3, 4}); }

TEST(VarStd, ValuesAsPyTorch) {
  const Tensor x = var_input();
  // torch.var(x), torch.var(x, unbiased=False), torch.std(x), torch.std(x, unbiased=False)
  EXPECT_NEAR(var(x).item<double>(), 5.505681818181818, 1e-14);
  EXPECT_NEAR(var(x, {}, false).item<double>(), 5.046875, 1e-14);
  EXPECT_NEAR(std(x).item<double>(), 2.346418934926544, 1e-14);
  EXPECT_NEAR(x.std({}, false).item<double>(), 2.2465250944514286, 1e-14);
  // torch.var(x, 1), torch.var(x, 1, unbiased=False), torch.std(x, 1), torch.std(x, 1, unbiased=False)
  expect_near_rel(values(var(x, 1)), {3.75, 0.0, 14.895833333333336}, 1e-14);
  expect_near_rel(values(x.var(1, false)), {2.8125, 0.0, 11.171875000000002}, 1e-14);
  expect_near_rel(values(std(x, 1)), {1.9364916731037085, 0.0, 3.859512058969804}, 1e-14);
  expect_near_rel(values(x.std({1}, false)), {1.6770509831248424, 0.0, 3.3424354892802346}, 1e-14);
  // torch.var(x, 0), torch.std(x, 0); torch.var(x, [0, 1], True, True) is [[5.505681818181818]]
  expect_near_rel(values(x.var(0)), {6.333333333333334, 2.5833333333333335, 14.083333333333332, 1.5833333333333335}, 1e-14);
  expect_near_rel(values(std(x, -2)), {2.5166114784235836, 1.6072751268321592, 3.7527767497325675, 1.2583057392117918}, 1e-14);
  const Tensor kept = var(x, {0, 1}, true, true);
  EXPECT_EQ(kept.shape(), (IntList{1, 1}));
  EXPECT_NEAR(kept.item<double>(), 5.505681818181818, 1e-14);
  EXPECT_EQ(x.std(1, true, true).shape(), (IntList{3, 1}));
  // one element: n - 1 = 0 gives NaN unbiased, 0 biased (torch.var(torch.tensor([2.]), 0)); none gives NaN
  // either way (torch.var(torch.zeros(2, 0), 1)); a NaN or an infinity makes NaN (inf - inf)
  const Tensor one = from_vector<double>({2.0});
  EXPECT_TRUE(std::isnan(var(one).item<double>()));
  EXPECT_TRUE(std::isnan(std(one, 0).item<double>()));
  EXPECT_EQ(var(one, {}, false).item<double>(), 0.0);
  EXPECT_EQ(std(one, {}, false).item<double>(), 0.0);
  expect_same(values(var(zeros({2, 0}, kFloat64), 1)), {kNaN, kNaN});
  expect_same(values(std(zeros({2, 0}, kFloat64), 1, false)), {kNaN, kNaN});
  EXPECT_TRUE(std::isnan(var(from_vector<double>({1, kNaN, 2})).item<double>()));
  EXPECT_TRUE(std::isnan(std(from_vector<double>({1, kInf})).item<double>()));
  // a 0-d tensor is one element; f32 stays f32
  EXPECT_TRUE(std::isnan(var(scalar_tensor(3.0)).item<double>()));
  const Tensor x32 = x.to(kFloat32);
  EXPECT_EQ(var(x32, 1).dtype(), kFloat32);
  expect_near_rel(values(x32.std(1)), {1.9364916731037085, 0.0, 3.859512058969804}, 1e-6);
}

TEST(VarStd, GradientsAsPyTorch) {
  const Tensor u = from_vector<double>({1.0, -2.0, 3.0});
  // torch.autograd.grad((torch.var(x, 1, unbiased=ub) * u).sum(), x), and the same for std
  const std::vector<std::pair<bool, std::vector<double>>> var_grads = {
      {true, {-0.5, 0.5, -1.5, 1.5, 0, 0, 0, 0, -7.25, -3.25, 10.75, -0.25}},
      {false, {-0.375, 0.375, -1.125, 1.125, 0, 0, 0, 0, -5.4375, -2.4375, 8.0625, -0.1875}}};
  const std::vector<std::pair<bool, std::vector<double>>> std_grads = {
      {true, {-0.12909944487358055, 0.12909944487358055, -0.38729833462074165, 0.38729833462074165, 0, 0, 0, 0,
              -0.9392378996653785, -0.4210376791603421, 1.3926630926072854, -0.03238751378156478}},
      {false, {-0.1118033988749895, 0.1118033988749895, -0.33541019662496846, 0.33541019662496846, 0, 0, 0, 0,
               -0.8134038813073576, -0.36462932610329823, 1.2060816171109097, -0.028048409700253712}}};
  for (const auto& [unbiased, want] : var_grads) {
    const Tensor x = var_input().requires_grad_();
    expect_near_rel(values(grad({(var(x, 1, unbiased) * u).sum()}, {x})[0]), want, 1e-14);
  }
  // the constant row's std is 0: its gradient is 0 there, as PyTorch's (not NaN)
  for (const auto& [unbiased, want] : std_grads) {
    const Tensor x = var_input().requires_grad_();
    expect_near_rel(values(grad({(std(x, 1, unbiased) * u).sum()}, {x})[0]), want, 1e-14);
  }
  // one element: NaN unbiased, 0 biased (PyTorch's of torch.var(t, 0) and torch.std(t, 0), t = [2.])
  const Tensor one = from_vector<double>({2.0}).requires_grad_();
  EXPECT_TRUE(std::isnan(values(grad({var(one, 0)}, {one})[0])[0]));
  EXPECT_TRUE(std::isnan(values(grad({std(one, 0)}, {one})[0])[0]));
  expect_same(values(grad({var(one, 0, false)}, {one})[0]), {0});
  expect_same(values(grad({std(one, 0, false)}, {one})[0]), {0});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (var(v[0], {0, 2}, true, true) * v[1]).sum(); },
                   {rnd({3, 2, 4}, 57), rnd({1, 2, 1}, 58)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (v[0].std(-1, false) * v[1]).sum() + std(v[0]); },
                   {rnd({3, 5}, 59), rnd({3}, 60)});
}

// Near (relative 1e-14) where finite; the same infinity or NaN where not.
void expect_near_or_same(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(want[i])) EXPECT_NEAR(got[i], want[i], 1e-14 * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
    else expect_same({got[i]}, {want[i]}, what + " [" + std::to_string(i) + "]");
  }
}

// torch.var(x, 1, correction=c), torch.var(x, None, correction=c), torch.std(x, 1, correction=c) and the
// gradients of (f(x, 1, correction=c) * u).sum() of PyTorch 1.13, for c = 0, 2, n (= 4), n + 1 and -1:
// c >= n divides by 0 (inf; NaN for the constant row), and the gradient then divides by n - c.
struct CorrectionCase {
  int64_t c;
  std::vector<double> var1;
  double full;
  std::vector<double> std1, var_grad, std_grad;
};
const std::vector<CorrectionCase> kCorrectionCases = {
    {0, {2.8125, 0.0, 11.171875000000002}, 5.046875, {1.6770509831248424, 0.0, 3.3424354892802346},
     {-0.375, 0.375, -1.125, 1.125, -0.0, -0.0, -0.0, -0.0, -5.4375, -2.4375, 8.0625, -0.1875},
     {-0.1118033988749895, 0.1118033988749895, -0.33541019662496846, 0.33541019662496846, 0.0, 0.0, 0.0, 0.0,
      -0.8134038813073576, -0.36462932610329823, 1.2060816171109097, -0.028048409700253712}},
    {2, {5.625, 0.0, 22.343750000000004}, 6.05625, {2.3717082451262845, 0.0, 4.726917600297259},
     {-0.75, 0.75, -2.25, 2.25, -0.0, -0.0, -0.0, -0.0, -10.875, -4.875, 16.125, -0.375},
     {-0.15811388300841897, 0.15811388300841897, -0.4743416490252569, 0.4743416490252569, 0.0, 0.0, 0.0, 0.0,
      -1.1503268006317806, -0.5156637382142465, 1.7056569802471229, -0.03966644140109588}},
    {4, {kInf, kNaN, kInf}, 7.5703125, {kInf, kNaN, kInf},
     {-kInf, kInf, -kInf, kInf, kNaN, kNaN, kNaN, kNaN, -kInf, -kInf, kInf, -kInf},
     {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}},
    {5, {kInf, kNaN, kInf}, 8.651785714285714, {kInf, kNaN, kInf},
     {1.5, -1.5, 4.5, -4.5, 0.0, 0.0, 0.0, 0.0, 21.75, 9.75, -32.25, 0.75},
     {0.0, -0.0, 0.0, -0.0, kNaN, kNaN, kNaN, kNaN, 0.0, 0.0, -0.0, 0.0}},
    {-1, {2.25, 0.0, 8.937500000000002}, 4.658653846153846, {1.5, 0.0, 2.98956518577535},
     {-0.30000000000000004, 0.30000000000000004, -0.9, 0.9, -0.0, -0.0, -0.0, -0.0, -4.3500000000000005,
      -1.9500000000000002, 6.450000000000001, -0.15000000000000002},
     {-0.1, 0.1, -0.3, 0.3, 0.0, 0.0, 0.0, 0.0, -0.727530548706169, -0.3261343839027654, 1.078752192909147,
      -0.025087260300212723}},
};

TEST(VarStd, CorrectionAsPyTorch) {
  const Tensor u = from_vector<double>({1.0, -2.0, 3.0});
  for (const CorrectionCase& k : kCorrectionCases) {
    const std::string c = "correction " + std::to_string(k.c);
    const Tensor x = var_input();
    expect_near_or_same(values(var(x, 1, k.c)), k.var1, "var " + c);
    expect_near_or_same(values(x.var({1}, k.c)), k.var1, "x.var " + c);
    expect_near_or_same(values(var(x, {}, k.c)), {k.full}, "var all " + c);
    expect_near_or_same(values(std(x, {1}, k.c)), k.std1, "std " + c);
    expect_near_or_same(values(x.std(1, k.c)), k.std1, "x.std " + c);
    const Tensor xg = var_input().requires_grad_();
    expect_near_or_same(values(grad({(var(xg, 1, k.c) * u).sum()}, {xg})[0]), k.var_grad, "var gradient " + c);
    expect_near_or_same(values(grad({(std(xg, 1, k.c) * u).sum()}, {xg})[0]), k.std_grad, "std gradient " + c);
  }
  // correction 1 and 0 are unbiased and biased, bit for bit; keepdim and the dtype as the bool forms
  const Tensor x = var_input();
  expect_same(values(var(x, 1, 1)), values(var(x, 1, true)));
  expect_same(values(x.std({0, 1}, 0)), values(x.std({0, 1}, false)));
  EXPECT_EQ(var(x, {1}, 2, true).shape(), (IntList{3, 1}));
  EXPECT_EQ(std(x.to(kFloat32), 0, int64_t{3}).dtype(), kFloat32);
  expect_gradcheck([](const std::vector<Tensor>& v) { return (var(v[0], {0, 2}, 2, true) * v[1]).sum(); },
                   {rnd({3, 2, 4}, 61), rnd({1, 2, 1}, 62)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (v[0].std(-1, 3) * v[1]).sum() + std(v[0], {}, -2); },
                   {rnd({3, 5}, 63), rnd({3}, 64)});
  expect_error([&] { (void)var(arange(3), {0}, 2); }, __LINE__, "var", {"i64[3]", "floating"});
  expect_error([&] { (void)Tensor().std({}, 2); }, __LINE__, "std", {"undefined"});
}

TEST(VarStd, ErrorsNameTheOpShapesAndLine) {
  const Tensor x = zeros({3, 4});
  expect_error([&] { (void)var(x, 2); }, __LINE__, "var", {"f32[3,4]", "dim 2"});
  expect_error([&] { (void)x.std({0, -2}); }, __LINE__, "std", {"f32[3,4]", "more than once"});
  expect_error([&] { (void)var(arange(3)); }, __LINE__, "var", {"i64[3]", "floating"});
  expect_error([&] { (void)std(zeros({2}, kBool), 0); }, __LINE__, "std", {"bool[2]", "floating"});
  expect_error([&] { (void)Tensor().var(); }, __LINE__, "var", {"undefined"});
}

// ---------------------------------------------------------------- ModuleList, ModuleDict, Module::to(dtype)

// A module holding its blocks in a ModuleList and its heads in a ModuleDict.
struct Tower : nn::Module {
  std::shared_ptr<nn::ModuleList> blocks = register_module("blocks", nn::ModuleList(nn::Linear(3, 4), nn::ReLU()));
  std::shared_ptr<nn::ModuleDict> heads = register_module("heads", nn::ModuleDict());
  Tower() {
    blocks->push_back(std::make_shared<nn::Linear>(4, 4, false));
    heads->insert("out", nn::Linear(4, 2));
    heads->insert("norm", nn::RMSNorm({2}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (nn::Module& b : *blocks) y = b(y);
    return (*heads)["norm"]((*heads)["out"](y));
  }
};

std::vector<std::string> names(const nn::NamedTensors& ts) {
  std::vector<std::string> out;
  for (const auto& [n, t] : ts) out.push_back(n);
  return out;
}

TEST(ModuleList, RegistersIndexesIteratesAndInserts) {
  Tower t;
  EXPECT_EQ(names(t.named_parameters()), (std::vector<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.2.weight",
                                                                     "heads.out.weight", "heads.out.bias", "heads.norm.weight"}));
  EXPECT_EQ(t.blocks->size(), 3u);
  EXPECT_EQ((*t.blocks)[-1].name(), "Linear");
  EXPECT_EQ(t.blocks->at<nn::Linear>(0).weight.shape(), (IntList{4, 3}));
  // errors name the caller's line (operator[]'s index carries it)
  expect_error([&] { (void)t.blocks->at<nn::Linear>(1); }, __LINE__, "ModuleList", {"module 1 is a ReLU"});
  expect_error([&] { (void)(*t.blocks)[3]; }, __LINE__, "ModuleList", {"index 3 is out of range for 3 modules"});
  expect_error([&] { (void)(*t.blocks)[-4]; }, __LINE__, "ModuleList", {"index -4"});
  int count = 0;
  for (nn::Module& m : *t.blocks) count += m.name() == "Linear";
  EXPECT_EQ(count, 2);
  t.blocks->insert(1, nn::Tanh());
  t.blocks->insert(-10, nn::Linear(3, 3)); // clamped to the front, as Python's list.insert
  std::vector<std::string> kinds;
  for (const auto& [n, m] : t.blocks->children()) kinds.push_back(n + ":" + m->name());
  EXPECT_EQ(kinds, (std::vector<std::string>{"0:Linear", "1:Linear", "2:Tanh", "3:ReLU", "4:Linear"}));
  EXPECT_EQ(t.named_parameters().at(2).first, "blocks.1.weight");
  EXPECT_THROW((void)t.blocks->forward(zeros({1, 3})), Error); // no forward of its own, as PyTorch
}

TEST(ModuleDict, KeysReplaceAndErrors) {
  nn::ModuleDict d;
  d.insert("a", nn::Linear(2, 2));
  d.insert("b", nn::ReLU());
  d.insert("a", nn::Linear(2, 3)); // replaces, keeping its place
  EXPECT_EQ(d.keys(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(d.at<nn::Linear>("a").weight.shape(), (IntList{3, 2}));
  EXPECT_TRUE(d.contains("b"));
  EXPECT_FALSE(d.contains("c"));
  EXPECT_EQ(names(d.named_parameters()), (std::vector<std::string>{"a.weight", "a.bias"}));
  std::vector<std::string> seen;
  for (const auto& [k, m] : d) seen.push_back(k + ":" + m->name());
  EXPECT_EQ(seen, (std::vector<std::string>{"a:Linear", "b:ReLU"}));
  EXPECT_EQ(d.pop("a")->name(), "Linear");
  EXPECT_EQ(d.size(), 1u);
  expect_error([&] { (void)d["a"]; }, __LINE__, "ModuleDict", {"no module named \"a\""});
  expect_error([&] { (void)d.at<nn::Linear>("b"); }, __LINE__, "ModuleDict", {"module \"b\" is a ReLU"});
  EXPECT_THROW(d.insert("x.y", nn::ReLU()), Error);
  EXPECT_THROW(d.insert("", nn::ReLU()), Error);
}

TEST(ModuleList, TrainsSavesAndLoadsThroughTheContainers) {
  nn::manual_seed(7);
  Tower t;
  optim::SGD opt(t.parameters(), {.lr = 0.1});
  Tensor x = randn({5, 3}, 27), y = randn({5, 2}, 28);
  F::mse_loss(t(x), y).backward();
  for (const Tensor& p : t.parameters()) EXPECT_TRUE(p.grad().defined());
  const auto before = values(t.blocks->at<nn::Linear>(0).weight);
  opt.step();
  EXPECT_NE(values(t.blocks->at<nn::Linear>(0).weight), before); // the optimizer sees the list's parameters
  t.zero_grad();
  for (const Tensor& p : t.parameters()) EXPECT_FALSE(p.grad().defined());
  const std::string path = (std::filesystem::temp_directory_path() / ("kiln_tfops_" + std::to_string(::getpid()) + ".safetensors")).string();
  checkpoint::save(path, t);
  nn::manual_seed(8);
  Tower u;
  checkpoint::load(path, u);
  std::filesystem::remove(path);
  expect_same(values(u(x)), values(t(x)));
}

TEST(ModuleTo, ConvertsParametersAndBuffersInPlace) {
  nn::manual_seed(9);
  nn::Sequential s(nn::Linear(3, 2), nn::BatchNorm1d(2));
  const Tensor w = s.parameters()[0];
  F::mse_loss(s(randn({4, 3}, 29)), zeros({4, 2})).backward();
  const auto w32 = values(w);
  s.to(kFloat64);
  EXPECT_EQ(w.dtype(), kFloat64);                        // the same tensor object, converted
  EXPECT_EQ(s.parameters()[0].impl(), w.impl());
  EXPECT_EQ(w.grad().dtype(), kFloat64);                 // with its gradient
  expect_same(values(w), w32);                           // f32 values are exact in f64
  for (const auto& [n, b] : s.named_buffers())           // integer buffers stay integer
    EXPECT_EQ(b.dtype(), n.find("num_batches") != std::string::npos ? kInt64 : kFloat64) << n;
  EXPECT_TRUE(w.requires_grad());
  s.zero_grad();
  F::mse_loss(s(randn({4, 3}, 30, kFloat64)), zeros({4, 2}, kFloat64)).backward();
  EXPECT_EQ(w.grad().dtype(), kFloat64);                 // backward still reaches the converted leaf
  optim::SGD opt(s.parameters(), {.lr = 0.5});
  opt.step();
  EXPECT_EQ(w.dtype(), kFloat64);
  s.to(kFloat32);
  EXPECT_EQ(w.dtype(), kFloat32);
  expect_error([&] { s.to(kInt64); }, __LINE__, "to", {"floating", "i64"});
}

// A model of containers, converted to f64, passes gradcheck (what Module::to(DType) is for).
TEST(ModuleTo, AConvertedModelPassesGradcheck) {
  nn::manual_seed(10);
  Tower t;
  t.to(kFloat64);
  for (const Tensor& p : t.parameters()) EXPECT_EQ(p.dtype(), kFloat64);
  expect_gradcheck([&t](const std::vector<Tensor>& v) { return (t(v[0]) * v[1]).sum(); },
                   {rnd({2, 3, 3}, 56), rnd({2, 3, 2}, 57)});
}

TEST(Conv2d, PyTorchDefaults) {
  const Tensor x = rnd({1, 2, 5, 5}, 58), w = rnd({3, 2, 3, 3}, 59);
  expect_same(values(F::conv2d(x, w)), values(F::conv2d(x, w, Tensor(), 1, 0, 1, 1)));
}

// ---------------------------------------------------------------- cross_entropy and nll_loss against PyTorch

using F::Reduction;

struct ClassLossCase {
  const char* name;
  bool nll; ///< nll_loss (the input taken as log-probabilities) instead of cross_entropy
  IntList shape;
  std::vector<double> input;
  std::vector<int64_t> targets;
  std::vector<double> weight; ///< empty: no class weights
  int64_t ignore_index;
  double label_smoothing;
  Reduction reduction;
  std::vector<double> loss; ///< PyTorch's values
  std::vector<double> grad; ///< PyTorch's d(sum(loss * u))/d(input), u = 1, 2, 3, ...
};

const ClassLossCase kClassLosses[] = {
#include "pytorch_class_loss_table.inc"
};

// Equal to 1e-12 relative (NaN to NaN): the same arithmetic up to the order of sums.
void expect_close_rel(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "]: " << got[i];
    else EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
  }
}

Tensor class_loss(const ClassLossCase& c, const Tensor& x, const Tensor& w) {
  const IntList tshape = c.shape.size() == 1 ? IntList{} : [&] {
    IntList s = c.shape;
    s.erase(s.begin() + 1);
    return s;
  }();
  const Tensor t = from_vector(c.targets, tshape);
  if (c.nll) return F::nll_loss(x, t, {.weight = w, .ignore_index = c.ignore_index, .reduction = c.reduction});
  return F::cross_entropy(x, t, {.weight = w, .ignore_index = c.ignore_index, .reduction = c.reduction,
                                 .label_smoothing = c.label_smoothing});
}

TEST(ClassLosses, MatchPyTorchWithIgnoreIndexWeightsAndSmoothing) {
  std::vector<Tensor> losses, grads;
  for (const ClassLossCase& c : kClassLosses) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor w = c.weight.empty() ? Tensor() : from_vector(c.weight);
    Tensor loss = class_loss(c, x, w);
    const Tensor u = arange(1, static_cast<double>(loss.numel()) + 1, 1, kFloat64).reshape(loss.shape());
    (loss * u).sum().backward();
    losses.push_back(loss);
    grads.push_back(x.grad());
  }
  std::vector<Tensor> all = losses;
  all.insert(all.end(), grads.begin(), grads.end());
  realize(all); // one schedule: far fewer kernels to compile than case by case
  for (size_t i = 0; i < std::size(kClassLosses); ++i) {
    const ClassLossCase& c = kClassLosses[i];
    expect_close_rel(values(losses[i]), c.loss, std::string(c.name) + " loss");
    expect_close_rel(values(grads[i]), c.grad, std::string(c.name) + " grad");
  }
}

TEST(ClassLosses, GradcheckOverSpatialDimsWithWeightsAndIgnoredTargets) {
  const Tensor t = from_vector<int64_t>({0, 2, -100, 1, 2, 2, 0, -100}, {2, 2, 2});
  const Tensor w = from_vector<double>({0.5, 2.0, 1.5});
  expect_gradcheck(
      [&](const std::vector<Tensor>& v) {
        return F::cross_entropy(v[0], t, {.weight = w, .label_smoothing = 0.2});
      },
      {rnd({2, 3, 2, 2}, 31)});
  expect_gradcheck([&](const std::vector<Tensor>& v) { return F::nll_loss(v[0], t, {.weight = w, .reduction = Reduction::Sum}); },
                   {rnd({2, 3, 2, 2}, 32)});
  // i32 targets and an f32 input: the same loss as i64 and f64 to f32 precision
  const Tensor x = rnd({2, 3, 2, 2}, 33);
  EXPECT_NEAR(F::cross_entropy(x.to(kFloat32), t.to(kInt32), {.weight = w.to(kFloat32)}).item<double>(),
              F::cross_entropy(x, t, {.weight = w}).item<double>(), 1e-6);
}

TEST(ClassLosses, OutOfRangeTargetsStillFailAndShapesAreChecked) {
  const Tensor x = zeros({2, 3, 4});
  // on the host for loaded data (ignore_index excepted), in the kernel for computed targets
  expect_error([&] { (void)F::cross_entropy(x, from_vector<int64_t>({0, 1, 3, -100, 0, 0, 0, 0}, {2, 4})); }, __LINE__,
               "cross_entropy", {"target 3", "3 classes"});
  EXPECT_NO_THROW((void)F::cross_entropy(x, full({2, 4}, -100, kInt64).realize()).item<double>());
  const Tensor lazy = from_vector<int64_t>({0, 1, 2, -100, 0, 0, 0, -1}, {2, 4}) * 1;
  const int line = __LINE__ + 1;
  const Tensor loss = F::nll_loss(x, lazy);
  expect_error([&] { (void)loss.item<double>(); }, line, "nll_loss", {"target -1", "[0, 3)"});
  expect_error([&] { (void)F::cross_entropy(x, zeros({2, 3}, kInt64)); }, __LINE__, "cross_entropy",
               {"f32[2,3,4]", "i64[2,3]", "[N, d1, ...]"});
  expect_error([&] { (void)F::nll_loss(x, zeros({2, 4}, kInt64), {.weight = ones({4})}); }, __LINE__, "nll_loss",
               {"f32[2,3,4]", "f32[4]", "weights"});
  expect_error([&] { (void)F::cross_entropy(zeros({}), zeros({}, kInt64)); }, __LINE__, "cross_entropy", {"f32[]"});
}

// Floating targets of the logits' shape are class probabilities (soft labels: distillation, mixup),
// as in PyTorch since 1.10. The expected values are torch 1.13's, from
// torch.nn.functional.cross_entropy(x, p, **kw) and torch.autograd.grad(loss.sum(), x).
TEST(ClassLosses, ProbabilityTargetsMatchPyTorch) {
  const Tensor p = from_vector<double>({0.2, 0.3, 0.5, 0.6, 0.1, 0.3}, {2, 3});
  const Tensor w = from_vector<double>({1.0, 2.0, 0.5});
  struct Case {
    F::CrossEntropyOptions options;
    std::vector<double> loss, grad;
  };
  const std::vector<Case> cases = {
      {{}, {1.2859919530321906},
       {-0.012354803929981659, -0.13044371336465627, 0.14279851729463794, 0.05922017057553247, 0.05291830199882577,
        -0.11213847257435824}},
      {{.reduction = Reduction::None}, {1.441311296657157, 1.1306726094072241},
       {-0.024709607859963317, -0.26088742672931253, 0.2855970345892759, 0.11844034115106494, 0.10583660399765155,
        -0.2242769451487165}},
      {{.weight = w}, {1.6275079202134388},
       {-0.007972544126480737, -0.2794658990328891, 0.28743844315936984, 0.04125916204675587, -0.0022276131011155116,
        -0.03903154894564032}},
      {{.label_smoothing = 0.2}, {1.352658619698857},
       {-0.025688137263314995, -0.1337770466979896, 0.1594651839613046, 0.08588683724219914, 0.029584968665492442,
        -0.11547180590769157}},
      {{.weight = w, .reduction = Reduction::Sum, .label_smoothing = 0.2}, {3.479142250423191},
       {-0.03852164576969398, -0.5713525046894621, 0.609874150459156, 0.16698407221005782, -0.0888689733623328,
        -0.07811509884772504}},
  };
  for (const Case& c : cases) {
    Tensor x = from_vector<double>({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, {2, 3}).requires_grad_();
    const Tensor loss = F::cross_entropy(x, p, c.options);
    loss.sum().backward();
    expect_close_rel(values(loss), c.loss, "probability targets: loss");
    expect_close_rel(values(x.grad()), c.grad, "probability targets: gradient");
  }
  // [N, C, d1, d2]: the class dim is dim 1 of both; the mean is over N * d1 * d2
  const Tensor a = arange(0, 24, 1, kFloat64).reshape({2, 3, 2, 2});
  const Tensor x4 = a / 7.0;
  const Tensor p4 = F::softmax(concat({a.narrow(0, 1, 1), a.narrow(0, 0, 1)}, 0) / 5.0, 1); // a.flip(0) / 5
  EXPECT_NEAR(F::cross_entropy(x4, p4).item<double>(), 0.9284321727319464, 1e-13);
  expect_gradcheck([&](const std::vector<Tensor>& v) { return F::cross_entropy(v[0], p4, {.weight = w, .label_smoothing = 0.1}); },
                   {rnd({2, 3, 2, 2}, 36)});
  expect_error([&] { (void)F::cross_entropy(x4, p4, {.ignore_index = 1}); }, __LINE__, "cross_entropy",
               {"ignore_index is not supported for probability targets"});
}

// Without weights or ignored targets, the losses are bit for bit what kiln computed before
// ignore_index and weights existed: the mean's count is exact, the masked terms are the same.
TEST(ClassLosses, PlainLossesKeepTheirBits) {
  const Tensor x = randn({64, 10}, 34);
  const Tensor t = (rand({64}, 35) * 10.0).to(kInt64);
  const Tensor logp = F::log_softmax(x, 1);
  const Tensor nll = -where(F::one_hot(t, 10) == 1, logp, 0).sum({1});
  EXPECT_EQ(F::cross_entropy(x, t).item<float>(), nll.mean().item<float>());
  EXPECT_EQ(F::nll_loss(logp, t).item<float>(), nll.mean().item<float>());
  EXPECT_EQ(F::cross_entropy(x, t, {.reduction = Reduction::Sum}).item<float>(), nll.sum().item<float>());
  EXPECT_EQ(F::cross_entropy(x, t, {.label_smoothing = 0.1}).item<float>(),
            (nll * 0.9 + (-logp.mean({1})) * 0.1).mean().item<float>());
}

// ---------------------------------------------------------------- grad(..., create_graph)

TEST(Grad, CreateGraphFalseGivesPlainValues) {
  Tensor x = from_vector<double>({-1, 0.5, 2}).requires_grad_();
  Tensor w = from_vector<double>({1, 2, 3}).requires_grad_();
  const Tensor y = (pow(x, 3.0) * w).sum();
  const auto plain = grad({y}, {x, w});
  const auto graph = grad({y}, {x, w}, {}, false, /*create_graph=*/true);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(plain[i].requires_grad()); // as torch.autograd.grad's default
    EXPECT_TRUE(graph[i].requires_grad());
    expect_same(values(plain[i]), values(graph[i]));
  }
  expect_same(values(plain[0]), {3, 1.5, 36});
  // differentiating a plain value again sees a constant; the created graph gives the second derivative
  EXPECT_THROW((void)grad({plain[0].sum()}, {x}), Error);
  expect_same(values(grad({plain[0].sum()}, {x}, {}, /*allow_unused=*/true)[0]), {0, 0, 0});
  expect_same(values(grad({graph[0].sum()}, {x})[0]), {-6, 6, 36}); // 6 x w
  // backward() is unchanged: it accumulates values
  y.backward();
  expect_same(values(x.grad()), values(plain[0]));
}

// ---------------------------------------------------------------- Linear on rank > 2

// The matmul nodes of the graph behind `t`, from its text form ("%5 = matmul f32[2,4,5] (...)").
std::vector<std::string> matmul_types(const Tensor& t) {
  std::vector<std::string> out;
  std::istringstream lines(graph_text({t}));
  for (std::string line; std::getline(lines, line);)
    if (auto at = line.find(" = matmul "); at != std::string::npos) out.push_back(line.substr(at + 10, line.find(' ', at + 10) - at - 10));
  return out;
}

TEST(LinearRank3, TheWeightGradientIsOneGemm) {
  const Tensor x = randn({2, 3, 4}, 36);
  Tensor w = randn({5, 4}, 37).requires_grad_(), b = randn({5}, 38).requires_grad_();
  const Tensor y = F::linear(x, w, b);
  EXPECT_EQ(y.shape(), (IntList{2, 3, 5}));
  const auto g = grad({(y * randn({2, 3, 5}, 39)).sum()}, {w});
  // one [out, B*T] x [B*T, in] product (g^T x, in w's own layout): no batched matmul, no sum over
  // the batch after it, and no transpose of an [in, out] one
  EXPECT_EQ(matmul_types(g[0]), (std::vector<std::string>{"f32[5,4]"})) << graph_text({g[0]});
  EXPECT_EQ(matmul_types(y), (std::vector<std::string>{"f32[6,5]"})) << graph_text({y});
}

TEST(LinearRank3, ForwardKeepsItsBitsAndGradientsCheck) {
  for (const IntList& shape : {IntList{2, 3, 4}, IntList{3, 17, 33}, IntList{2, 2, 5, 7}, IntList{4, 64, 96}}) {
    const int64_t in = shape.back(), out = in % 7 + 3;
    const Tensor x = randn(shape, 40 + in), w = randn({out, in}, 41), b = randn({out}, 42);
    // the batched product that linear computed before, against the flattened one now
    expect_same(values(F::linear(x, w, b)), values(matmul(x, w.t()) + b), "shape " + std::to_string(in));
  }
  EXPECT_EQ(F::linear(zeros({0, 3, 4}), zeros({5, 4})).shape(), (IntList{0, 3, 5}));
  EXPECT_EQ(F::linear(zeros({2, 0, 4}), zeros({5, 4})).shape(), (IntList{2, 0, 5}));
  EXPECT_EQ(values(F::linear(ones({2, 3, 0}), zeros({5, 0}))), std::vector<double>(30, 0.0));
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::linear(v[0], v[1], v[2]) * v[3]).sum(); },
                   {rnd({2, 3, 4}, 43), rnd({5, 4}, 44), rnd({5}, 45), rnd({2, 3, 5}, 46)});
}

// ---------------------------------------------------------------- pooling parity with PyTorch

struct PoolCase {
  const char* name;
  bool max;
  IntList shape;
  std::vector<double> input;
  std::pair<int64_t, int64_t> kernel, stride, padding, dilation; ///< stride {0, 0}: the default
  bool ceil_mode, count_include_pad;
  IntList out_shape;
  std::vector<double> out;  ///< PyTorch's values
  std::vector<double> grad; ///< PyTorch's d(sum(out * u))/d(input), u = 1, 2, 3, ...
};

const PoolCase kPools[] = {
#include "pytorch_pool_table.inc"
};

nn::Size2 size2(std::pair<int64_t, int64_t> p) { return {p.first, p.second}; }

Tensor pool(const PoolCase& c, const Tensor& x) {
  const nn::Size2 k = size2(c.kernel), p = size2(c.padding);
  if (c.stride.first == 0) // the default stride
    return c.max ? F::max_pool2d(x, k, std::nullopt, p, size2(c.dilation), c.ceil_mode)
                 : F::avg_pool2d(x, k, std::nullopt, p, c.ceil_mode, c.count_include_pad);
  if (c.max) return F::max_pool2d(x, k, size2(c.stride), p, size2(c.dilation), c.ceil_mode);
  return F::avg_pool2d(x, k, size2(c.stride), p, c.ceil_mode, c.count_include_pad);
}

TEST(Pooling, MatchesPyTorchWithCeilModeAndCountIncludePad) {
  for (const PoolCase& c : kPools) {
    Tensor x = from_vector(c.input, c.shape).requires_grad_();
    const Tensor y = pool(c, x);
    ASSERT_EQ(y.shape(), c.out_shape) << c.name;
    const Tensor u = arange(1, static_cast<double>(y.numel()) + 1, 1, kFloat64).reshape(y.shape());
    (y * u).sum().backward();
    expect_close_rel(values(y), c.out, std::string(c.name) + " values");
    expect_close_rel(values(x.grad()), c.grad, std::string(c.name) + " grad");
  }
}

// Unbatched [C, H, W] inputs, as PyTorch (torch.nn.functional.conv2d(c, w, padding=1) is [3, 5, 5]):
// the batched result of a batch of one.
TEST(Pooling, UnbatchedInputsAreABatchOfOne) {
  const Tensor c = rnd({2, 5, 5}, 57), w = rnd({3, 2, 3, 3}, 58);
  const Tensor y = F::conv2d(c, w, Tensor(), 1, 1);
  EXPECT_EQ(y.shape(), (IntList{3, 5, 5}));
  expect_same(values(y), values(F::conv2d(c.unsqueeze(0), w, Tensor(), 1, 1)));
  EXPECT_EQ(F::max_pool2d(c, 2).shape(), (IntList{2, 2, 2}));
  expect_same(values(F::max_pool2d(c, 3, 2, 1, 1, true)), values(F::max_pool2d(c.unsqueeze(0), 3, 2, 1, 1, true)));
  expect_same(values(nn::AvgPool2d(2, 1)(c)), values(F::avg_pool2d(c.unsqueeze(0), 2, 1)));
  expect_gradcheck([&](const std::vector<Tensor>& v) { return (F::conv2d(v[0], v[1]) * F::conv2d(v[0], v[1])).sum(); },
                   {rnd({2, 4, 4}, 59), rnd({1, 2, 2, 2}, 60)});
  expect_error([&] { (void)F::max_pool2d(rnd({5, 5}, 61), 2); }, __LINE__, "max_pool2d", {"[C, H, W]"});
}

TEST(Pooling, ModulesTakeTheFlagsAndDefaults) {
  const Tensor x = rnd({1, 2, 5, 7}, 47);
  expect_same(values(nn::MaxPool2d(2, std::nullopt, 0, 1, true)(x)), values(F::max_pool2d(x, 2, std::nullopt, 0, 1, true)));
  EXPECT_EQ(nn::MaxPool2d(2, std::nullopt, 0, 1, true)(x).shape(), (IntList{1, 2, 3, 4}));
  EXPECT_EQ(F::max_pool2d(x, 2).shape(), (IntList{1, 2, 2, 3})); // the stride defaults to the kernel
  expect_same(values(nn::AvgPool2d(3, 2, 1, true, false)(x)), values(F::avg_pool2d(x, 3, 2, 1, true, false)));
  EXPECT_EQ(nn::AvgPool2d(3, 2, 1, true, false).str(),
            "AvgPool2d(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=true, count_include_pad=false)");
  EXPECT_EQ(nn::MaxPool2d(2).str(), "MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=false)");
  // the PyTorch defaults give the same values as before they existed
  expect_same(values(F::avg_pool2d(x, 3, 2, 1)), values(F::avg_pool2d(x, 3, 2, 1, false, true)));
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::avg_pool2d(v[0], 3, 2, 1, true, false) * v[1]).sum(); },
                   {rnd({1, 2, 6, 5}, 48), rnd({1, 2, 4, 3}, 49)});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (F::max_pool2d(v[0], {3, 2}, {2, 3}, {1, 0}, 1, true) * v[1]).sum(); },
                   {rnd({1, 1, 7, 6}, 50), rnd({1, 1, 4, 2}, 51)});
  expect_error([&] { (void)F::max_pool2d(x, 2, 0); }, __LINE__, "max_pool2d", {"f64[1,2,5,7]", "positive"});
  expect_error([&] { (void)F::avg_pool2d(x, 8); }, __LINE__, "avg_pool2d", {"f64[1,2,5,7]", "larger"});
  // In ceil mode a window larger than the input is one partial window, as in PyTorch
  // (torch.nn.functional.avg_pool2d(x, 8, None, 0, True) is [1, 2, 1, 1]: each map's mean).
  const Tensor whole = F::avg_pool2d(x, 8, std::nullopt, 0, true);
  EXPECT_EQ(whole.shape(), (IntList{1, 2, 1, 1}));
  expect_close_rel(values(whole), values(x.mean({2, 3}, true)), "a window over the whole map");
  EXPECT_EQ(F::max_pool2d(x, 6, std::nullopt, 0, 1, true).shape(), (IntList{1, 2, 1, 2}));
}

// ---------------------------------------------------------------- fused vs unfused, forward vs reverse mode

// The new compositions in one program: every output and gradient, as f64 values.
std::vector<std::vector<double>> composite_program() {
  Tensor x = randn({2, 3, 4, 5}, 52).requires_grad_();
  const Tensor t = from_vector<int64_t>({0, 2, -100, 1, 2, 1, 0, 2, 1, -100, 0, 0, 2, 2, 1, 1, 0, 1, 2, 0,
                                         1, 1, 2, 0, -100, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0, 1, 2, 1, 0, 2},
                                        {2, 4, 5});
  auto parts = split(x, {1, 2}, 1);
  Tensor y = stack({parts[0].squeeze(1), chunk(parts[1], 2, 1)[1].squeeze(1)}, 1);       // [2, 2, 4, 5]
  y = masked_fill(tril(y, 1), triu(ones({4, 5}, kBool), 3), -1.5).clamp(-1.0, 1.2) + sign(y) * 0.1;
  const std::vector<Tensor> outs = {
      y, logsumexp(y, {-1}), F::cross_entropy(x, t, {.weight = from_vector<double>({1, 2, 0.5}), .label_smoothing = 0.1}),
      F::avg_pool2d(x, 3, 2, 1, true, false), F::max_pool2d(x, 2, std::nullopt, 0, 1, true), F::rms_norm(x, {5})};
  Tensor total = zeros({}, kFloat64);
  for (const Tensor& o : outs) total = total + (o * o).sum();
  std::vector<Tensor> all = outs;
  all.push_back(grad({total}, {x})[0]);
  realize(all);
  std::vector<std::vector<double>> v;
  for (const Tensor& a : all) v.push_back(values(a));
  return v;
}

TEST(Composites, FusedAndUnfusedAgreeBitwise) {
  const bool fusion = options().fusion;
  options().fusion = true;
  const auto fused = composite_program();
  options().fusion = false;
  const auto unfused = composite_program();
  options().fusion = fusion;
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) expect_same(unfused[i], fused[i], "output " + std::to_string(i));
}

TEST(Composites, ForwardModeAgreesWithReverseMode) {
  const Tensor t = from_vector<int64_t>({0, 1, -100, 1}, {2, 2});
  const std::vector<std::function<Tensor(const Tensor&)>> fs = {
      [](const Tensor& x) { return logsumexp(x * 3.0, {1, 2}); },
      [](const Tensor& x) { return clamp(x, -0.5, 0.5) * x; },
      [](const Tensor& x) { return stack(unbind(tril(x, -1), 2), 0).sum({0}) + masked_fill(x, x > 0.3, 2.0); },
      [](const Tensor& x) { return F::rms_norm(x, {2, 2}); },
      [&](const Tensor& x) { return F::cross_entropy(x.reshape({2, 2, 2}), t, {.label_smoothing = 0.2}); },
      [](const Tensor& x) { return x.unfold(2, 1, 1).unfold(0, 2, 1) * 2.0; },
      [](const Tensor& x) { return std(x, {1, 2}, true, true) * var(x, 0, false) + x.var(); },
      [](const Tensor& x) {
        return F::smooth_l1_loss(x, x * x, Reduction::None, 0.5) + F::huber_loss(x * 2.0, -x, Reduction::None, 0.3) +
               F::l1_loss(x, ones_like(x) * 0.3, Reduction::None);
      },
      [](const Tensor& x) {
        return F::kl_div(F::log_softmax(x, 2), F::softmax(x * 2.0, 2), Reduction::BatchMean) +
               F::kl_div(x, x * 0.5, Reduction::None, true);
      },
      [](const Tensor& x) {
        return F::binary_cross_entropy(sigmoid(x), sigmoid(x * 3.0), Reduction::None) +
               F::binary_cross_entropy_with_logits(x, sigmoid(-x), {.weight = from_vector<double>({0.5, 2.0}),
                                                                    .reduction = Reduction::None,
                                                                    .pos_weight = from_vector<double>({2.0, 0.5})});
      },
  };
  const Tensor x = rnd({2, 2, 2}, 53), v = rnd({2, 2, 2}, 54);
  for (size_t i = 0; i < fs.size(); ++i) {
    auto [y, tangent] = jvp(fs[i], x, v);
    const Tensor u = rnd(y.shape(), 55 + i);
    Tensor leaf = x.detach().requires_grad_();
    const Tensor g = grad({fs[i](leaf)}, {leaf}, {u})[0];
    const double ujv = (u * tangent).sum().item<double>(), jtuv = (g * v).sum().item<double>();
    EXPECT_NEAR(ujv, jtuv, 1e-10 * (1 + std::fabs(ujv))) << "function " << i;
  }
}

// ---------------------------------------------------------------- bool max/min/clamp, pow's special exponents, NaN gradients

// torch.max/min/amax of a bool tensor are bool (any, all); clamp of a bool tensor promotes it with the
// bounds (i64 for integers, f32 for floats), and bool bounds alone are refused: PyTorch 1.13's.
TEST(Parity, BoolMaxMinAndClamp) {
  const Tensor b = from_vector<bool>({true, false, false, false}, {2, 2});
  EXPECT_EQ(b.max().dtype(), kBool);
  EXPECT_TRUE(b.max().item<bool>());
  EXPECT_FALSE(min(b).item<bool>());
  EXPECT_EQ(b.max({1}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(b.min({0}).to_vector<bool>(), (std::vector<bool>{false, false}));
  EXPECT_EQ(b.max({1}, true).shape(), (IntList{2, 1}));
  EXPECT_TRUE(ones({2, 3}, kBool).min({0, 1}).item<bool>());
  EXPECT_TRUE(scalar_tensor(true, kBool).max().item<bool>());
  EXPECT_EQ(zeros({0, 2}, kBool).max({1}).shape(), (IntList{0}));
  expect_error([&] { (void)zeros({0}, kBool).max(); }, __LINE__, "max", {"bool[0]", "empty"});
  expect_error([&] { (void)b.argmax(0); }, __LINE__, "argmax", {"bool"}); // as PyTorch
  const Tensor c = clamp(b, 0, 1);
  EXPECT_EQ(c.dtype(), kInt64);
  expect_same(values(c), {1, 0, 0, 0});
  expect_same(values(b.clamp(-1)), {1, 0, 0, 0});
  expect_same(values(clamp(b, true, 2)), {1, 1, 1, 1});
  const Tensor f = clamp(b, false, 0.5);
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_same(values(f), {0.5, 0, 0, 0});
  expect_error([&] { (void)b.clamp(true); }, __LINE__, "clamp", {"bool[2,2]", "bool bounds"});
  expect_error([&] { (void)clamp(b, std::nullopt, false); }, __LINE__, "clamp", {"bool bounds"});
}

// PyTorch computes x^0.5 as sqrt and x^-0.5 as rsqrt for a number exponent (so -inf gives NaN and -0
// gives -0 and -inf); other exponents, and a tensor exponent, are C's pow. Values of PyTorch 1.13.
TEST(Parity, PowOfSpecialValues) {
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = from_vector<double>({-kInf, -0.0, 0.0, 4.0, -4.0, kInf, kNaN}).to(dt);
    const std::string t(dtype_name(dt));
    expect_same(values(pow(x, 0.5)), {kNaN, -0.0, 0.0, 2.0, kNaN, kInf, kNaN}, "x^0.5 " + t);
    expect_same(values(x.pow(-0.5)), {kNaN, -kInf, kInf, 0.5, kNaN, 0.0, kNaN}, "x^-0.5 " + t);
    expect_same(values(pow(x, 1.5)), {kInf, 0.0, 0.0, 8.0, kNaN, kInf, kNaN}, "x^1.5 " + t);
    expect_same(values(pow(x, full({7}, 0.5, dt))), {kInf, 0.0, 0.0, 2.0, kNaN, kInf, kNaN}, "x^tensor " + t);
    EXPECT_TRUE(std::signbit(values(pow(x, 0.5))[1])) << t; // -0, not 0
    EXPECT_EQ(pow(x, 0.5).dtype(), dt);
  }
  EXPECT_EQ(pow(arange(3), 0.5).dtype(), kFloat32); // integers promote, as PyTorch's
  expect_same(values(pow(from_vector<int64_t>({4, 0}), -0.5)), {0.5, kInf});
  // the gradient is sqrt's, as PyTorch's pow(x, 0.5) backward: -inf at -0, NaN at -inf
  const Tensor x = from_vector<double>({-0.0, -kInf, 4.0}).requires_grad_();
  expect_same(values(grad({pow(x, 0.5).sum()}, {x})[0]), {-kInf, kNaN, 0.25});
  expect_gradcheck([](const std::vector<Tensor>& v) { return (pow(v[0], 0.5) + pow(v[0], -0.5)).sum(); },
                   {rand({5}, 70, kFloat64) + 0.5});
}

// At a NaN input relu's gradient passes through (PyTorch's threshold_backward on the result), and
// maximum's and minimum's masks send the whole gradient to both operands: PyTorch 1.13's gradients.
TEST(Parity, GradientsAtNaNAsPyTorch) {
  const Tensor x = from_vector<double>({kNaN, 1.0, -1.0, 0.0}).requires_grad_();
  const Tensor z = zeros({4}, kFloat64);
  expect_same(values(grad({relu(x).sum()}, {x})[0]), {1, 1, 0, 0}, "relu");
  expect_same(values(grad({maximum(x, z).sum()}, {x})[0]), {1, 1, 0, 0.5}, "maximum");
  expect_same(values(grad({maximum(z, x).sum()}, {x})[0]), {1, 1, 0, 0.5}, "maximum, swapped");
  expect_same(values(grad({minimum(x, z).sum()}, {x})[0]), {1, 0, 1, 0.5}, "minimum");
  const Tensor a = from_vector<double>({kNaN, 1.0, kNaN, 2.0}).requires_grad_();
  const Tensor c = from_vector<double>({1.0, kNaN, kNaN, 2.0}).requires_grad_();
  for (const Tensor& y : {maximum(a, c), minimum(a, c)}) {
    const auto g = grad({y.sum()}, {a, c});
    expect_same(values(g[0]), {1, 1, 1, 0.5}, "first operand");
    expect_same(values(g[1]), {1, 1, 1, 0.5}, "second operand");
  }
  // away from NaN nothing changed: gradcheck, ties excluded
  expect_gradcheck([](const std::vector<Tensor>& v) { return (relu(v[0]) + maximum(v[0], v[1]) * minimum(v[1], v[0])).sum(); },
                   {rnd({6}, 71), rnd({6}, 72)});
}

} // namespace
} // namespace kiln

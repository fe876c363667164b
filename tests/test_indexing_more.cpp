// scatter, scatter_reduce, index_fill, index_copy, index_put, take and take_along_dim (kiln/indexops.h):
// values and gradients against PyTorch 1.13 (tests/pytorch_indexing_table.inc, from
// tests/tools/pytorch_indexing_table.py), kiln's rule where several values hit one place (the last in
// index order wins), f64 gradcheck, fused / unfused / compile() agreement, zero-size and 0-d operands,
// lazy indices checked in the kernel, and the errors. searchsorted and bucketize: PyTorch's answers (its
// binary search's, for unsorted sequences and NaN too), one kernel of floor(log2 n) + 1 probes a value.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "codegen/lower.h"
#include "kiln/arrange.h"
#include "kiln/kiln.h"
#include "tests/error_of.h"
#include "tests/table_checks.h"

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct IndexRow {
  const char* name;
  const char* op;
  const char* dtype;
  IntList self_shape;
  std::vector<double> self;
  int64_t dim;
  std::vector<IntList> index_shapes;
  std::vector<std::vector<int64_t>> indices;
  IntList src_shape;
  std::vector<double> src;
  const char* reduce;
  bool flag;
  std::vector<double> value;
  IntList out_shape;
  std::vector<double> out, grad_self, grad_src;
};

struct TensorLit {
  const char* dtype;
  IntList shape;
  std::vector<double> values;
};

struct CallRow {
  const char* name;
  const char* op;
  std::vector<TensorLit> inputs;
  std::vector<int64_t> ints;
  const char* str;
  bool flag;
  std::vector<double> reals;
  std::vector<TensorLit> outputs;
  std::vector<std::vector<double>> grads;
};

#include "tests/pytorch_indexing_table.inc"

using test::expect_error_at;
using test::tensor_of;
using test::values;
using Vec = std::vector<Tensor>;

DType dtype_of(const std::string& s) {
  if (s == "f32") return kFloat32;
  if (s == "f64") return kFloat64;
  if (s == "i32") return kInt32;
  if (s == "i64") return kInt64;
  EXPECT_EQ(s, "bool");
  return kBool;
}

/// The row's op applied to self, its index tensors and src (undefined where the row has none).
Tensor apply(const IndexRow& r, const Tensor& self, const Vec& ix, const Tensor& src) {
  const std::string op = r.op;
  const bool integral = is_integral(self.dtype()) || self.dtype() == kBool;
  const Scalar value = integral ? Scalar(static_cast<int64_t>(r.value[0])) : Scalar(r.value[0]);
  if (op == "scatter") return scatter(self, r.dim, ix[0], src);
  if (op == "scatter_value") return scatter(self, r.dim, ix[0], value);
  if (op == "scatter_reduce") return scatter_reduce(self, r.dim, ix[0], src, r.reduce, r.flag);
  if (op == "index_fill") return index_fill(self, r.dim, ix[0], value);
  if (op == "index_copy") return index_copy(self, r.dim, ix[0], src);
  if (op == "index_put") return index_put(self, ix, src, r.flag);
  if (op == "take") return take(self, ix[0]);
  if (op == "take_along_dim_flat") return take_along_dim(self, ix[0]);
  EXPECT_EQ(op, "take_along_dim");
  return take_along_dim(self, ix[0], r.dim);
}

/// Equal within `rel` of max(1, |want|), NaN where want is NaN (and infinities equal).
void expect_near(const std::vector<double>& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]) << what << " [" << i << "] " << got[i];
      continue;
    }
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
  }
}

/// The row's index tensors (i64).
Vec indices_of(const IndexRow& r) {
  Vec ix;
  for (size_t k = 0; k < r.indices.size(); ++k) ix.push_back(from_vector(r.indices[k], r.index_shapes[k]));
  return ix;
}

TEST(IndexingMoreTable, ValuesAndGradientsMatchPyTorch) {
  ASSERT_GE(kIndexTable.size(), 100u);
  for (const IndexRow& r : kIndexTable) {
    SCOPED_TRACE(r.name);
    const DType dt = dtype_of(r.dtype);
    const bool empty_src = std::find(r.src_shape.begin(), r.src_shape.end(), 0) != r.src_shape.end();
    const bool floating = is_floating(dt), has_src = !r.src.empty() || empty_src;
    Tensor self = tensor_of(r.self, dt, r.self_shape), src = has_src ? tensor_of(r.src, dt, r.src_shape) : Tensor();
    if (floating) {
      self.requires_grad_();
      if (has_src) src.requires_grad_();
    }
    for (bool i32 : {false, true}) { // i32 indices give the same result
      Vec ix = indices_of(r);
      if (i32)
        for (Tensor& t : ix) t = t.to(kInt32);
      const Tensor y = apply(r, self, ix, src);
      ASSERT_EQ(y.shape(), r.out_shape);
      ASSERT_EQ(y.dtype(), dt);
      expect_near(values(y), r.out, dt == kFloat32 ? 1e-6 : 1e-12, "values");
      if (!floating || i32) continue;
      (y * test::weights_for(y)).sum().backward();
      expect_near(values(self.grad()), r.grad_self, 1e-10, "self's gradient");
      if (has_src && !empty_src) expect_near(values(src.grad()), r.grad_src, 1e-10, "src's gradient");
    }
  }
}

/// The call row's op applied to its inputs.
Vec apply_call(const CallRow& r, const Vec& in) {
  const std::string op = r.op;
  const auto int_at = [&](size_t k, int64_t otherwise) { return r.ints.size() > k ? r.ints[k] : otherwise; };
  if (op == "searchsorted")
    return {searchsorted(in[0], in[1], int_at(0, 0) != 0, r.flag, r.str, in.size() > 2 ? in[2] : Tensor())};
  if (op == "bucketize") return {bucketize(in[0], in[1], int_at(0, 0) != 0, r.flag)};
  if (op == "histc")
    return {histc(in[0], r.ints[0], r.reals.empty() ? 0 : r.reals[0], r.reals.empty() ? 0 : r.reals[1])};
  if (op == "bincount") return {bincount(in[0], in.size() > 1 ? in[1] : Tensor(), int_at(0, 0))};
  if (op == "meshgrid") return meshgrid(in, r.str);
  if (op == "cartesian_prod") return {cartesian_prod(in)};
  if (op == "tril_indices") return {tril_indices(r.ints[0], r.ints[1], r.ints[2])};
  if (op == "triu_indices") return {triu_indices(r.ints[0], r.ints[1], r.ints[2])};
  if (op == "rot90") return {rot90(in[0], r.ints[0], {r.ints[1], r.ints[2]})};
  EXPECT_EQ(op, "block_diag");
  return {block_diag(in)};
}

TEST(IndexingMoreTable, SearchesCountsAndArrangementsMatchPyTorch) {
  ASSERT_GE(kCallTable.size(), 45u);
  for (const CallRow& r : kCallTable) {
    SCOPED_TRACE(r.name);
    Vec in;
    bool any_grad = false;
    for (const TensorLit& t : r.inputs) {
      in.push_back(tensor_of(t.values, dtype_of(t.dtype), t.shape));
      if (is_floating(in.back().dtype()) && r.grads[in.size() - 1].size() == t.values.size() && !t.values.empty())
        in.back().requires_grad_(), any_grad = true;
    }
    const Vec out = apply_call(r, in);
    ASSERT_EQ(out.size(), r.outputs.size());
    Tensor loss;
    for (size_t k = 0; k < out.size(); ++k) {
      ASSERT_EQ(out[k].shape(), r.outputs[k].shape) << "output " << k;
      ASSERT_EQ(out[k].dtype(), dtype_of(r.outputs[k].dtype)) << "output " << k;
      expect_near(values(out[k]), r.outputs[k].values, 1e-12, "output " + std::to_string(k));
      if (is_floating(out[k].dtype()) && any_grad) {
        const Tensor term = (out[k] * test::weights_for(out[k])).sum();
        loss = loss.defined() ? loss + term : term;
      }
    }
    if (!loss.defined()) continue;
    loss.backward();
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].requires_grad()) expect_near(values(in[i].grad()), r.grads[i], 1e-10, "gradient " + std::to_string(i));
  }
}

// ---------------------------------------------------------------- kiln's rules where PyTorch has none

TEST(IndexingMoreRules, ScatterTheLastInIndexOrderWins) {
  const Tensor self = zeros({2, 4}, kFloat64);
  const Tensor index = from_vector<int64_t>({1, 3, 1, 1, 0, 0, 2, 0}, {2, 4});
  const Tensor src = from_vector<double>({10, 11, 12, 13, 20, 21, 22, 23}, {2, 4});
  // dim 1: row 0 writes 10, 12, 13 at place 1 (13 wins); row 1 writes 20, 21, 23 at 0 (23 wins)
  EXPECT_EQ(values(scatter(self, 1, index, src)), (std::vector<double>{0, 13, 0, 11, 23, 0, 22, 0}));
  // dim 0: column j takes src[1][j] where both rows hit the same place
  const Tensor col = from_vector<int64_t>({1, 0, 1, 1, 1, 1, 1, 1}, {2, 4});
  EXPECT_EQ(values(scatter(self, 0, col, src)), (std::vector<double>{0, 11, 0, 0, 20, 21, 22, 23}));
  // -0.0 and NaN keep their bits; integers keep every bit
  const Tensor z =
      scatter(ones({2}, kFloat64), 0, from_vector<int64_t>({1, 1, 0}), from_vector<double>({kNaN, -0.0, kInf}));
  const std::vector<double> zv = values(z);
  EXPECT_TRUE(std::signbit(zv[1]) && zv[1] == 0) << zv[1];
  EXPECT_EQ(zv[0], kInf);
  const int64_t big = (int64_t{1} << 62) + 1;
  EXPECT_EQ(
      scatter(zeros({2}, kInt64), 0, from_vector<int64_t>({0, 0}), from_vector<int64_t>({5, big})).to_vector<int64_t>(),
      (std::vector<int64_t>{big, 0}));
}

TEST(IndexingMoreRules, OverwrittenValuesGetNoGradient) {
  const Tensor src = from_vector<double>({1, 2, 3, 4}).requires_grad_();
  const Tensor self = from_vector<double>({5, 6, 7}).requires_grad_();
  const Tensor y = scatter(self, 0, from_vector<int64_t>({2, 0, 2, 0}), src);
  EXPECT_EQ(values(y), (std::vector<double>{4, 6, 3}));
  (y * from_vector<double>({1, 2, 3})).sum().backward();
  EXPECT_EQ(values(src.grad()), (std::vector<double>{0, 0, 3, 1}));
  EXPECT_EQ(values(self.grad()), (std::vector<double>{0, 2, 0}));
}

TEST(IndexingMoreRules, IndexPutAndIndexCopyTakeTheLastRepeat) {
  const Tensor self = zeros({3, 2}, kFloat64);
  const Tensor rows = from_vector<int64_t>({2, 0, -1, 2});
  const Tensor v = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  EXPECT_EQ(values(index_put(self, {rows}, v)), (std::vector<double>{3, 4, 0, 0, 7, 8}));
  // accumulate sums the repeats (row 2 three times)
  EXPECT_EQ(values(index_put(self, {rows}, v, true)), (std::vector<double>{3, 4, 0, 0, 1 + 5 + 7, 2 + 6 + 8}));
  EXPECT_EQ(values(index_copy(self, 0, from_vector<int64_t>({1, 1, 0, 1}), v)),
            (std::vector<double>{5, 6, 7, 8, 0, 0}));
}

// ---------------------------------------------------------------- gradcheck and modes

TEST(IndexingMoreGrad, GradcheckInF64) {
  const Tensor self = test::rnd({3, 4}, 1), src = test::rnd({4, 4}, 2);
  const Tensor index = from_vector<int64_t>({0, 2, 2, 1, 0, 2, 0, 1, 2, 2, 0, 1, 1, 1, 1, 1}, {4, 4});
  for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
    for (bool inc : {true, false}) {
      SCOPED_TRACE(std::string(r) + (inc ? "" : " without self"));
      test::expect_gradcheck([&](const Vec& in) { return scatter_reduce(in[0], 0, index, in[1], r, inc); },
                             {self, src});
    }
  test::expect_gradcheck([&](const Vec& in) { return scatter(in[0], 0, index, in[1]); }, {self, src});
  test::expect_gradcheck(
      [&](const Vec& in) {
        return index_copy(in[0], 1, from_vector<int64_t>({3, 0, 3, 1}), in[1]);
      },
      {self, test::rnd({3, 4}, 3)});
  test::expect_gradcheck([&](const Vec& in) { return index_fill(in[0], 0, from_vector<int64_t>({2}), in[1]); },
                         {self, test::rnd({}, 4)});
  test::expect_gradcheck(
      [&](const Vec& in) {
        return index_put(in[0], {from_vector<int64_t>({1, 1, -3}), from_vector<int64_t>({2})}, in[1], true);
      },
      {self, test::rnd({3}, 5)});
  test::expect_gradcheck([&](const Vec& in) { return take(in[0], from_vector<int64_t>({5, -1, 5}, {3, 1})); }, {self});
  test::expect_gradcheck(
      [&](const Vec& in) {
        return take_along_dim(in[0], from_vector<int64_t>({3, 0, 3}, {1, 3}), 1);
      },
      {self});
  test::expect_gradcheck([&](const Vec& in) { return rot90(in[0], 3, {1, 0}); }, {self});
  test::expect_gradcheck(
      [&](const Vec& in) {
        return block_diag({in[0], in[1].narrow(0, 0, 1).reshape({4})});
      },
      {self, src});
  test::expect_gradcheck(
      [&](const Vec& in) {
        const Vec g = meshgrid({in[0].narrow(0, 0, 1).reshape({4}), in[1].narrow(0, 1, 1).reshape({4})}, "xy");
        return g[0] * g[1] +
               cartesian_prod({in[0].narrow(0, 2, 1).reshape({4}), in[1].narrow(0, 0, 1).reshape({4})}).sum(1).sum();
      },
      {self, src});
  test::expect_gradcheck(
      [&](const Vec& in) {
        return bincount(from_vector<int64_t>({3, 0, 3, 1}), in[0].narrow(0, 0, 1).reshape({4}));
      },
      {self});
}

TEST(IndexingMoreGrad, ForwardModeAgreesWithReverseMode) {
  // u . jvp(f)(v) == v . grad(u . f): forward mode (prod, mean through autograd's rules; amax / amin
  // through the transposed custom backward) against reverse mode
  const Tensor self = test::rnd({3, 4}, 8), src = test::rnd({4, 4}, 9);
  const Tensor index = from_vector<int64_t>({0, 2, 2, 1, 0, 2, 0, 1, 2, 2, 0, 1, 1, 1, 1, 1}, {4, 4});
  const Tensor u = test::rnd({3, 4}, 10), v0 = test::rnd({3, 4}, 11), v1 = test::rnd({4, 4}, 12);
  for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
    for (bool inc : {true, false}) {
      SCOPED_TRACE(std::string(r) + (inc ? "" : " without self"));
      const auto f = [&](const Vec& in) { return Vec{scatter_reduce(in[0], 0, index, in[1], r, inc)}; };
      const auto [y, t] = jvp(f, {self, src}, {v0, v1});
      const Tensor a = self.detach().requires_grad_(), b = src.detach().requires_grad_();
      const Vec g = grad({(f({a, b})[0] * u).sum()}, {a, b});
      const double forward = (t[0] * u).sum().item<double>(),
                   reverse = ((g[0] * v0).sum() + (g[1] * v1).sum()).item<double>();
      EXPECT_NEAR(forward, reverse, 1e-10 * std::max(1.0, std::fabs(reverse)));
    }
}

TEST(IndexingMoreGrad, ProdGradientWithZerosIsExact) {
  // one zero in a run: the zero's gradient is the product of the others; two zeros: all 0
  const Tensor self = from_vector<double>({2, 3}).requires_grad_();
  const Tensor src = from_vector<double>({0, 4, 5, 0, 0}).requires_grad_();
  const Tensor y = scatter_reduce(self, 0, from_vector<int64_t>({0, 0, 0, 1, 1}), src, "prod");
  EXPECT_EQ(values(y), (std::vector<double>{0, 0}));
  y.sum().backward();
  EXPECT_EQ(values(src.grad()), (std::vector<double>{40, 0, 0, 0, 0}));
  EXPECT_EQ(values(self.grad()), (std::vector<double>{0, 0}));
}

TEST(IndexingMoreGrad, SecondOrderGradientsWithZerosAndTies) {
  // the gradient of prod's gradient (ScatterMul's rule differentiated): places with one zero, two zeros (in
  // src, and self's with src's), three, none; a product is a polynomial, so finite differences hold at zeros
  const Tensor self = from_vector<double>({1.5, 0.0, -0.7, 2.0, 0.9}), w = test::rnd({5}, 21);
  const Tensor src = from_vector<double>({0.0, 1.2, 0.0, 0.0, -0.8, 0.0, 1.1, 0.0, 0.0, 0.5, 1.3, -1.4});
  const Tensor index = from_vector<int64_t>({0, 0, 1, 2, 2, 2, 3, 3, 3, 3, 4, 4});
  for (const char* r : {"prod", "amax", "amin"})
    for (bool inc : {true, false}) {
      SCOPED_TRACE(std::string(r) + (inc ? "" : " without self"));
      // amax / amin: distinct values (no ties; gradients are piecewise constant)
      const bool prod = std::string(r) == "prod";
      const Tensor a = prod ? self : test::rnd({5}, 22), b = prod ? src : test::rnd({12}, 23);
      test::expect_gradcheck(
          [&](const Vec& in) {
            const Tensor y = scatter_reduce(in[0] * in[0] * 0.5 + in[0], 0, index, in[1], r, inc);
            const Vec g = grad({(y * w).sum()}, {in[0], in[1]}, {}, false, true);
            return concat({g[0], g[1]}, 0);
          },
          {a, b});
    }
}

TEST(IndexingMoreModes, ScatterKernelsAgreeFusedUnfusedAndCompiled) {
  // prod / amax / amin in f32 with NaN, zeros and ties, with and without self, and their gradients: the
  // same bits fused, unfused and compiled
  const Tensor index = from_vector<int64_t>({0, 2, 2, 1, 0, 2, 0, 1, 2, 2, 0, 1, 1, 1, 1, 1, 0, 0, 2, 2}, {5, 4});
  test::expect_fused_unfused_and_compiled_agree(
      [&](const Vec& in) {
        Vec out;
        const Tensor self = in[0] * 3.0, src = masked_fill(in[1], in[1] > 0.8, 0.0); // zeros in src
        for (const char* r : {"prod", "amax", "amin"})
          for (bool inc : {true, false}) out.push_back(scatter_reduce(self, 0, index, src, r, inc));
        Tensor loss = out[0].sum();
        for (size_t k = 1; k < out.size(); ++k) loss = loss + (out[k] * (static_cast<double>(k) + 0.5)).sum();
        const Vec g = grad({loss}, {in[0], in[1]});
        out.insert(out.end(), g.begin(), g.end());
        for (Tensor& t : out) t = nan_to_num(t, 1e30); // where the NaNs are (expect_same: NaN != NaN)
        return out;
      },
      [](uint64_t seed) {
        Tensor self = test::rnd({3, 4}, seed).to(kFloat32), src = test::rnd({5, 4}, seed + 1).to(kFloat32);
        self = masked_fill(self, self > 1.5, kNaN); // NaN in self
        src = masked_fill(src, src < -1.5, kNaN); // and in src
        src = masked_fill(src, src.abs() < 0.3, 1.0); // ties
        return Vec{self.requires_grad_(), src.requires_grad_()};
      });
}

TEST(IndexingMoreModes, FusedUnfusedAndCompiledAgree) {
  const Tensor index = from_vector<int64_t>({0, 2, 2, 1, 0, 2, 0, 1, 2, 2, 0, 1, 1, 1, 1, 1}, {4, 4});
  const Tensor rows = from_vector<int64_t>({2, 0, 2});
  test::expect_fused_unfused_and_compiled_agree(
      [&](const Vec& in) {
        Vec out;
        for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
          out.push_back(scatter_reduce(in[0] * 2.0, 0, index, in[1], r, std::string(r) != "mean"));
        out.push_back(scatter(in[0], 0, index, in[1] + 1.0));
        out.push_back(index_put(in[0], {rows}, in[1].slice(0, 0, 3), true));
        out.push_back(index_put(in[0], {rows, rows}, in[1].slice(0, 0, 3).slice(1, 0, 1).reshape({3})));
        out.push_back(take(in[1], from_vector<int64_t>({3, -2})));
        Tensor loss = out[0].sum();
        for (size_t k = 1; k < out.size(); ++k) loss = loss + (out[k] * (static_cast<double>(k) + 0.5)).sum();
        const Vec g = grad({loss}, {in[0], in[1]});
        out.insert(out.end(), g.begin(), g.end());
        return out;
      },
      [](uint64_t seed) {
        return Vec{test::rnd({3, 4}, seed).requires_grad_(), test::rnd({4, 4}, seed + 1).requires_grad_()};
      });
}

TEST(IndexingMoreModes, IntegerReductionsAgreeFusedAndUnfused) {
  const Tensor index = from_vector<int64_t>({0, 2, 2, 1, 0, 2, 0, 1}, {2, 4});
  test::expect_fused_unfused_and_compiled_agree(
      [&](const Vec& in) {
        Vec out;
        for (const char* r : {"sum", "prod", "mean", "amax", "amin"})
          out.push_back(scatter_reduce(in[0], 0, index, in[1], r, false));
        return out;
      },
      [](uint64_t seed) {
        return Vec{(test::rnd({3, 4}, seed) * 50.0).to(kInt64), (test::rnd({2, 4}, seed + 1) * 50.0).to(kInt64)};
      });
}

// ---------------------------------------------------------------- edge cases

TEST(IndexingMoreEdges, EmptyIndicesAndZeroD) {
  const Tensor x = test::rnd({2, 3}, 7);
  const Tensor none = zeros({2, 0}, kInt64);
  EXPECT_EQ(values(scatter(x, 1, none, zeros({2, 0}, kFloat64))), values(x));
  EXPECT_EQ(values(scatter(x, 1, none, 3.0)), values(x));
  EXPECT_EQ(values(scatter_reduce(x, 1, none, zeros({2, 0}, kFloat64), "amax")), values(x));
  EXPECT_EQ(values(index_fill(x, 1, zeros({0}, kInt64), 1.0)), values(x));
  EXPECT_EQ(values(index_put(x, {zeros({0}, kInt64)}, zeros({0, 3}, kFloat64))), values(x));
  EXPECT_EQ(take(x, zeros({0, 2}, kInt64)).shape(), (IntList{0, 2}));
  EXPECT_EQ(scatter(zeros({0, 3}, kFloat64), 1, zeros({0, 3}, kInt64), zeros({0, 3}, kFloat64)).shape(),
            (IntList{0, 3}));
  const Tensor s = scatter_reduce(from_vector<double>({2.0}, {}), 0, from_vector<int64_t>({0}, {}),
                                  from_vector<double>({3.0}, {}), "sum");
  EXPECT_EQ(s.shape(), IntList{});
  EXPECT_EQ(values(s), std::vector<double>{5});
  EXPECT_EQ(values(index_fill(from_vector<double>({2.0}, {}), 0, from_vector<int64_t>({0}), -1.0)),
            std::vector<double>{-1});
}

TEST(IndexingMoreEdges, LongRunsScanInLogSteps) {
  // 1000 values into 3 places: the product / max of each run, against a host loop
  std::vector<int64_t> idx;
  std::vector<double> src;
  for (int k = 0; k < 1000; ++k) {
    idx.push_back((k * 7) % 3);
    src.push_back(1.0 + 0.001 * ((k * 37) % 11 - 5));
  }
  std::vector<double> prod = {1, 1, 1}, mx = {-kInf, -kInf, -kInf};
  for (size_t k = 0; k < idx.size(); ++k) {
    prod[static_cast<size_t>(idx[k])] *= src[k];
    mx[static_cast<size_t>(idx[k])] = std::max(mx[static_cast<size_t>(idx[k])], src[k]);
  }
  const Tensor i = from_vector(idx), s = from_vector(src), base = zeros({3}, kFloat64);
  test::expect_close(values(scatter_reduce(base, 0, i, s, "prod", false)), prod, 1e-12, "prod");
  EXPECT_EQ(values(scatter_reduce(base, 0, i, s, "amax", false)), mx);
}

TEST(IndexingMoreEdges, SearchesAndCounts) {
  // histc counts no NaN (PyTorch 1.13 puts it in bin 0: its position is a cast of NaN); a lazy input works too
  const Tensor x = from_vector<double>({0.5, kNaN, 1.5, 2.0});
  EXPECT_EQ(values(histc(x, 2, 0, 2)), (std::vector<double>{1, 2}));
  EXPECT_EQ(values(histc(x * 1.0, 2, 0, 2)), (std::vector<double>{1, 2}));
  EXPECT_EQ(values(histc(from_vector<double>({1, 3, 2}) * 1.0, 2)), (std::vector<double>{1, 2}));
  const std::vector<double> lazy_nan = values(histc(x * 1.0, 2)); // the data's range is NaN: not silent
  EXPECT_TRUE(std::isnan(lazy_nan[0]) && std::isnan(lazy_nan[1]));
  // bincount of a lazy input: minlength is the length
  EXPECT_EQ(bincount(from_vector<int64_t>({2, 0, 2}) + 0, Tensor(), 4).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 0, 2, 0}));
  // searchsorted over a 0-length sequence: every value goes at 0
  EXPECT_EQ(searchsorted(zeros({0}, kFloat64), from_vector<double>({1, 2})).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(values(block_diag({})), std::vector<double>{});
  EXPECT_EQ(block_diag({}).shape(), (IntList{1, 0}));
}

TEST(IndexingMoreModes, SearchesAndArrangementsAgree) {
  const Tensor seq = from_vector<double>({-1, 0, 0, 2, 5});
  test::expect_fused_unfused_and_compiled_agree(
      [&](const Vec& in) {
        Vec out = {searchsorted(seq, in[0]).to(kFloat64), bucketize(in[0], seq, false, true).to(kFloat64),
                   histc(in[0], 5, -2, 2), bincount((in[0].abs() * 2.0).to(kInt64), in[0], 12)};
        const Vec grid = meshgrid({in[0].slice(0, 0, 3), in[0].slice(0, 3, 5)}, "xy");
        out.insert(out.end(), grid.begin(), grid.end());
        out.push_back(rot90(in[1], 3, {0, 1}));
        out.push_back(block_diag({in[1], in[0].slice(0, 0, 2)}));
        out.push_back(cartesian_prod({in[0].slice(0, 0, 2), in[0].slice(0, 2, 5)}));
        Tensor loss = out[3].sum();
        for (size_t k = 4; k < out.size(); ++k) loss = loss + (out[k] * (static_cast<double>(k) + 0.5)).sum();
        const Vec g = grad({loss}, {in[0], in[1]});
        out.insert(out.end(), g.begin(), g.end());
        return out;
      },
      [](uint64_t seed) {
        return Vec{test::rnd({5}, seed).requires_grad_(), test::rnd({3, 2}, seed + 1).requires_grad_()};
      });
}

// ---------------------------------------------------------------- the binary search

/// The loads of `seq`'s buffer (distinct load expressions: the probes of one value) in the one kernel that
/// computes `out` from realized tensors (fusion on, the baseline CPU); -1 unless there is exactly one.
int64_t probes_per_value(const Tensor& out, const Tensor& seq) {
  const codegen::Schedule s = codegen::schedule({out.node().get()}, {});
  std::string lines;
  for (const std::string& line : s.debug_lines()) lines += line + "\n";
  if (s.launches.size() != 1) return ADD_FAILURE() << s.launches.size() << " kernels:\n" << lines, -1;
  const codegen::KernelLaunch& l = s.launches[0];
  int buffer = -1;
  for (size_t i = 0; i < l.inputs.size(); ++i)
    if (l.inputs[i] == seq.node().get()) buffer = static_cast<int>(i);
  std::unordered_set<const codegen::Expr*> seen;
  int64_t loads = 0;
  std::function<void(const codegen::ExprRef&)> walk = [&](const codegen::ExprRef& e) {
    if (!e || !seen.insert(e.get()).second) return;
    loads += e->kind == codegen::ExprKind::Load && e->index == buffer;
    for (const codegen::ExprRef& a : e->args) walk(a);
  };
  for (const codegen::Store& st : l.kernel.stores) walk(st.value);
  EXPECT_TRUE(l.kernel.reductions.empty()) << l.kernel.name;
  return loads;
}

TEST(IndexingMoreSearch, OneKernelOfFloorLog2NPlusOneProbesPerValue) {
  // torch's binary search probes floor(log2 n) + 1 elements a value: so does the kernel, for any n, side,
  // sorter, batch and output dtype (the count of comparisons it replaced read all n)
  const Tensor v = test::rnd({5, 7}, 3);
  for (int64_t n : {1, 2, 3, 7, 8, 9, 1000, 4096, 100000}) {
    SCOPED_TRACE(n);
    const Tensor seq = arange(0, n, 1, kFloat64) * 0.01 - 1.0;
    seq.realize();
    const int64_t probes = static_cast<int64_t>(std::floor(std::log2(static_cast<double>(n)))) + 1;
    EXPECT_EQ(probes_per_value(searchsorted(seq, v), seq), probes);
    EXPECT_EQ(probes_per_value(bucketize(v, seq, true, true), seq), probes);
    const Tensor batched = seq.reshape({1, n}).expand({5, n}) + 0.0;
    batched.realize();
    EXPECT_EQ(probes_per_value(searchsorted(batched, v, false, false, "right"), batched), probes);
    if (n == 1) continue; // a sorter of one element reads no buffer
    const Tensor sorter = arange(n - 1, -1, -1, kInt64); // the sequence's positions, read where probed
    sorter.realize();
    EXPECT_EQ(probes_per_value(searchsorted(-seq, v, false, false, "", sorter), sorter), probes);
  }
}

TEST(IndexingMoreSearch, FusedUnfusedAndCompiledAgree) {
  // long sequences, both sides, unsorted and NaN rows, computed values: one kernel fused, ~10 a probe unfused
  const Tensor sorted = arange(0, 1000, 1, kFloat64) * 0.004 - 2.0;
  test::expect_fused_unfused_and_compiled_agree(
      [&](const Vec& in) {
        const Tensor v = in[0] * 2.0, rows = in[1];
        const Tensor u = where(in[0] <= 1.5, v, std::nan("")); // NaN values
        return Vec{searchsorted(sorted, v).to(kFloat64), searchsorted(sorted, u, true).to(kFloat64),
                   bucketize(v.to(kFloat32), sorted.to(kFloat32), true, true).to(kFloat64),
                   searchsorted(rows, v.reshape({9, 8}).slice(0, 0, 3), false, false, "right").to(kFloat64),
                   searchsorted(rows.sort(1).first, u.reshape({9, 8}).slice(0, 3, 6)).to(kFloat64)};
      },
      [](uint64_t seed) {
        return Vec{test::rnd({72}, seed),
                   where(test::rnd({3, 9}, seed + 1) <= 1.0, test::rnd({3, 9}, seed + 2), std::nan(""))};
      });
}

TEST(IndexingMoreEdges, IntegerMeanRoundsDownExactly) {
  // sums near 2^62 (beyond f64's integers): floor(sum / count) in exact integer arithmetic, as torch's
  const int64_t p = int64_t{1} << 61;
  const std::vector<int64_t> self = {p + 5, -p - 7, 3, 1}, src = {p - 1, p / 2 + 3, -p / 2 - 1, -p, -3, 7};
  const std::vector<int64_t> index = {0, 0, 1, 1, 2, 3};
  std::vector<int64_t> sum = self, count(4, 1), want(4);
  for (size_t k = 0; k < src.size(); ++k)
    sum[static_cast<size_t>(index[k])] += src[k], ++count[static_cast<size_t>(index[k])];
  for (size_t j = 0; j < 4; ++j) want[j] = sum[j] / count[j] - ((sum[j] % count[j] != 0) && (sum[j] < 0) ? 1 : 0);
  const Tensor got = scatter_reduce(from_vector(self), 0, from_vector(index), from_vector(src), "mean");
  EXPECT_EQ(got.to_vector<int64_t>(), want);
}

TEST(IndexingMoreEdges, LargeInputs) {
  // 200000 values into 1000 places along dim 1 of [2, 1000]: scatter_reduce's scatter kernels and scatter's
  // sort, against host loops
  const int64_t n = 200000, places = 1000;
  std::vector<int64_t> idx;
  std::vector<double> src;
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t k = 0; k < n; ++k) {
      idx.push_back((k * 7919 + r * 13) % places);
      src.push_back(1.0 + 1e-6 * static_cast<double>((k * 37 + r) % 101 - 50));
    }
  std::vector<double> prod(2 * places, 1.0), last(2 * places, 0.0), mn(2 * places, kInf);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t k = 0; k < n; ++k) {
      const size_t at = static_cast<size_t>(r * places + idx[static_cast<size_t>(r * n + k)]);
      const double v = src[static_cast<size_t>(r * n + k)];
      prod[at] *= v, last[at] = v, mn[at] = std::min(mn[at], v);
    }
  const Tensor i = from_vector(idx, {2, n}), s = from_vector(src, {2, n}), base = zeros({2, places}, kFloat64);
  test::expect_close(values(scatter_reduce(base, 1, i, s, "prod", false)), prod, 1e-12, "prod");
  EXPECT_EQ(values(scatter_reduce(base, 1, i, s, "amin", false)), mn);
  EXPECT_EQ(values(scatter(base, 1, i, s)), last);
}

// ---------------------------------------------------------------- errors

// Each expect_error_at keeps the failing call on the line its __LINE__ names:
// clang-format off
TEST(IndexingMoreErrors, BadIndicesAndOperands) {
  const Tensor x = zeros({2, 3}, kFloat64), i = from_vector<int64_t>({0, 3}, {1, 2}), s = ones({1, 2}, kFloat64);
  expect_error_at([&] { (void)scatter(x, 1, i, s); }, __FILE__, __LINE__, "scatter", {"index 3 at position [0, 1]", "[0, 3)"});
  expect_error_at([&] { (void)scatter(x, 1, i.to(kFloat32), s); }, __FILE__, __LINE__, "scatter", {"integer"});
  expect_error_at([&] { (void)scatter(x, 1, i, s.to(kFloat32)); }, __FILE__, __LINE__, "scatter", {"self's dtype"});
  expect_error_at([&] { (void)scatter(x, 1, i.reshape({2}), 1.0); }, __FILE__, __LINE__, "scatter", {"rank"});
  expect_error_at([&] { (void)scatter(x, 2, i, s); }, __FILE__, __LINE__, "scatter", {"dim"});
  expect_error_at([&] { (void)scatter_reduce(x, 1, i, s, "max"); }, __FILE__, __LINE__, "scatter_reduce", {"reduce \"max\""});
  expect_error_at([&] { (void)scatter_reduce(x.to(kBool), 1, i, s.to(kBool), "sum"); }, __FILE__, __LINE__, "scatter_reduce", {"bool"});
  expect_error_at([&] { (void)scatter_reduce(x, 0, from_vector<int64_t>({-1, 0}, {1, 2}), s, "sum"); }, __FILE__, __LINE__, "scatter_reduce", {"index -1", "[0, 2)"});
  expect_error_at([&] { (void)index_fill(x, 1, from_vector<int64_t>({0, 3}), 1.0); }, __FILE__, __LINE__, "index_fill", {"index 3", "[-3, 3)"});
  expect_error_at([&] { (void)index_fill(x, 1, zeros({1, 1}, kInt64), 1.0); }, __FILE__, __LINE__, "index_fill", {"0-d or 1-d"});
  expect_error_at([&] { (void)index_copy(x, 0, from_vector<int64_t>({1}), ones({2, 3}, kFloat64)); }, __FILE__, __LINE__, "index_copy", {"source must be [1, 3]"});
  expect_error_at([&] { (void)index_put(x, {from_vector<int64_t>({-3})}, ones({3}, kFloat64)); }, __FILE__, __LINE__, "index_put", {"index -3", "[-2, 2)"});
  expect_error_at([&] { (void)index_put(x, {from_vector<int64_t>({0, 1}), from_vector<int64_t>({0, 1, 2})}, ones({1}, kFloat64)); }, __FILE__, __LINE__, "index_put", {"broadcast"});
  expect_error_at([&] { (void)index_put(x, {i, i, i}, s); }, __FILE__, __LINE__, "index_put", {"1 to 2 index tensors"});
  expect_error_at([&] { (void)index_put(x, {from_vector<int64_t>({0, 1})}, ones({3, 3}, kFloat64)); }, __FILE__, __LINE__, "index_put", {"values must broadcast to [2, 3]"});
  expect_error_at([&] { (void)index_put(x, {from_vector<int64_t>({0})}, ones({3}, kFloat32)); }, __FILE__, __LINE__, "index_put", {"self's dtype"});
  expect_error_at([&] { (void)take(x, from_vector<int64_t>({6})); }, __FILE__, __LINE__, "take", {"index 6", "[-6, 6)"});
  expect_error_at([&] { (void)take_along_dim(x, from_vector<int64_t>({0, 3}, {1, 2}), 1); }, __FILE__, __LINE__, "take_along_dim", {"index 3"});
  expect_error_at([&] { (void)take_along_dim(x, from_vector<int64_t>({0}), 1); }, __FILE__, __LINE__, "take_along_dim", {"same number of dims"});
}

TEST(IndexingMoreErrors, SearchesCountsAndArrangements) {
  const Tensor seq = from_vector<double>({1, 2, 3}), v = from_vector<double>({2.5});
  expect_error_at([&] { (void)searchsorted(seq, v, false, true, "left"); }, __FILE__, __LINE__, "searchsorted", {"opposites"});
  expect_error_at([&] { (void)searchsorted(seq, v, false, false, "middle"); }, __FILE__, __LINE__, "searchsorted", {"side must be"});
  expect_error_at([&] { (void)searchsorted(zeros({2, 3}, kFloat64), zeros({3, 1}, kFloat64)); }, __FILE__, __LINE__, "searchsorted", {"leading dims"});
  expect_error_at([&] { (void)searchsorted(seq, v, false, false, "", from_vector<int64_t>({0, 1})); }, __FILE__, __LINE__, "searchsorted", {"sorter"});
  expect_error_at([&] { (void)searchsorted(seq, v, false, false, "", from_vector<int64_t>({0, 1, 3})); }, __FILE__, __LINE__, "searchsorted", {"index 3"});
  expect_error_at([&] { (void)bucketize(v, zeros({2, 2}, kFloat64)); }, __FILE__, __LINE__, "bucketize", {"1-d"});
  expect_error_at([&] { (void)histc(seq, 0); }, __FILE__, __LINE__, "histc", {"bins must be > 0"});
  expect_error_at([&] { (void)histc(seq, 3, 2, 1); }, __FILE__, __LINE__, "histc", {"max must be larger than min"});
  expect_error_at([&] { (void)histc(from_vector<double>({1, kInf}), 3); }, __FILE__, __LINE__, "histc", {"not finite"});
  expect_error_at([&] { (void)histc(from_vector<int64_t>({1, 2}), 3); }, __FILE__, __LINE__, "histc", {"floating"});
  expect_error_at([&] { (void)bincount(from_vector<int64_t>({1, -2})); }, __FILE__, __LINE__, "bincount", {"non-negative", "-2"});
  expect_error_at([&] { (void)bincount(from_vector<int64_t>({1, 2}) + 0); }, __FILE__, __LINE__, "bincount", {"realize the input first", "minlength"});
  expect_error_at([&] { (void)bincount(seq); }, __FILE__, __LINE__, "bincount", {"1-d integer"});
  expect_error_at([&] { (void)bincount(from_vector<int64_t>({1, 2}), seq); }, __FILE__, __LINE__, "bincount", {"weights"});
  expect_error_at([&] { (void)meshgrid({seq, zeros({2, 2}, kFloat64)}); }, __FILE__, __LINE__, "meshgrid", {"0-d or 1-d"});
  expect_error_at([&] { (void)meshgrid({seq}, "ji"); }, __FILE__, __LINE__, "meshgrid", {"indexing"});
  expect_error_at([&] { (void)cartesian_prod({seq, from_vector<int64_t>({1})}); }, __FILE__, __LINE__, "cartesian_prod", {"one dtype"});
  expect_error_at([&] { (void)tril_indices(-1, 3); }, __FILE__, __LINE__, "tril_indices", {">= 0"});
  expect_error_at([&] { (void)rot90(seq); }, __FILE__, __LINE__, "rot90", {"at least 2 dims"});
  expect_error_at([&] { (void)rot90(zeros({2, 2}), 1, {1, -1}); }, __FILE__, __LINE__, "rot90", {"must differ"});
  expect_error_at([&] { (void)block_diag({zeros({1, 1, 1})}); }, __FILE__, __LINE__, "block_diag", {"0-d, 1-d or 2-d"});
}

TEST(IndexingMoreErrors, IndicesOfACompiledStepAreSortedAndChecked) {
  // the index is an input of the compiled step: each replay sorts its new values, and a bad one is reported
  int line = 0;
  auto step = compile([&](const Vec& a) {
    line = __LINE__ + 1;
    const Tensor y = scatter_reduce(a[0], 1, a[1], a[2], "amax", false);
    return Vec{y, index_put(a[0].t(), {a[1].slice(0, 0, 1).reshape({3})}, a[2].slice(0, 0, 1).reshape({3, 1}))};
  });
  const Tensor x = test::rnd({2, 4}, 20), src = test::rnd({2, 3}, 21);
  for (const std::vector<int64_t>& iv : {std::vector<int64_t>{0, 3, 0, 1, 1, 2}, std::vector<int64_t>{3, 3, 3, 0, 2, 0}}) {
    const Tensor index = from_vector(iv, {2, 3});
    const Vec got = step({x, index, src});
    EXPECT_EQ(values(got[0]), values(scatter_reduce(x, 1, index, src, "amax", false)));
    EXPECT_EQ(values(got[1]), values(index_put(x.t(), {index.slice(0, 0, 1).reshape({3})}, src.slice(0, 0, 1).reshape({3, 1}))));
  }
  expect_error_at([&] { (void)step({x, from_vector<int64_t>({0, 4, 0, 1, 1, 2}, {2, 3}), src})[0].to_vector<double>(); }, __FILE__, line, "scatter_reduce", {"index 4", "[0, 4)"});
  EXPECT_EQ(step.num_traces(), 1u);
}

TEST(IndexingMoreErrors, LazyBincountValuesAreCheckedInTheKernel) {
  const int line = __LINE__ + 1;
  const Tensor c = bincount(from_vector<int64_t>({1, 5}) + 0, Tensor(), 3);
  expect_error_at([&] { (void)c.to_vector<int64_t>(); }, __FILE__, line, "bincount", {"index 5", "minlength = 3"});
}

TEST(IndexingMoreErrors, ALazySorterIsCheckedWholeInTheKernels) {
  // 9 probes sorter[1], then sorter[2] = 3 (outside [0, 3)); 0 probes sorter[1] and sorter[0] only, and
  // the bad entry is reported all the same, fused or not (a reduction reads every entry)
  const Tensor seq = from_vector<double>({1, 2, 3}), sorter = from_vector<int64_t>({0, 1, 3}) + 0;
  const int line = __LINE__ + 1;
  const Tensor i = searchsorted(seq, from_vector<double>({9}), false, false, "", sorter), j = searchsorted(seq, from_vector<double>({0}), false, false, "", sorter);
  expect_error_at([&] { (void)i.to_vector<int64_t>(); }, __FILE__, line, "searchsorted", {"index 3"});
  expect_error_at([&] { (void)j.to_vector<int64_t>(); }, __FILE__, line, "searchsorted", {"index 3", "[0, 3)"});
  EXPECT_EQ(searchsorted(seq, from_vector<double>({0, 9}), false, false, "", from_vector<int64_t>({0, 1, 2}) + 0).to_vector<int64_t>(), (std::vector<int64_t>{0, 3}));
}
// clang-format on

TEST(IndexingMoreErrors, LazyIndicesOfScatterReduceAreCheckedInTheKernel) {
  // the scatter kernels (ScatterMul, ScatterMax, ScatterMin) report a computed index out of range
  const Tensor x = zeros({2, 3}, kFloat64), s = ones({1, 2}, kFloat64);
  const Tensor lazy = from_vector<int64_t>({0, 3}, {1, 2}) + 1 - 1;
  for (const char* r : {"prod", "amax", "amin"})
    for (bool inc : {true, false}) {
      SCOPED_TRACE(std::string(r) + (inc ? "" : " without self"));
      const int line = __LINE__ + 1;
      const Tensor y = scatter_reduce(x, 1, lazy, s, r, inc);
      expect_error_at([&] { (void)y.to_vector<double>(); }, __FILE__, line, "scatter_reduce", {"index 3", "[0, 3)"});
    }
}

TEST(IndexingMoreErrors, LazyIndicesAreCheckedInTheKernel) {
  const Tensor x = zeros({2, 3}, kFloat64), s = ones({1, 2}, kFloat64);
  const Tensor lazy = from_vector<int64_t>({0, 3}, {1, 2}) + 1 - 1;
  const int line = __LINE__ + 1;
  const Tensor y = scatter(x, 1, lazy, s);
  expect_error_at([&] { (void)y.to_vector<double>(); }, __FILE__, line, "scatter", {"index 3", "[0, 3)"});
  const int line2 = __LINE__ + 1;
  const Tensor t = take(x, from_vector<int64_t>({-7}) + 0);
  expect_error_at([&] { (void)t.to_vector<double>(); }, __FILE__, line2, "take",
                  {"index -1", "negative values wrapped"});
}

} // namespace
} // namespace kiln

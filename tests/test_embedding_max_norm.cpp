// nn::Embedding's max_norm and norm_type: the rows a forward references are renormalized in place before
// the lookup, as torch 1.13's embedding_renorm_. Outputs, the weight after each pass and its gradient
// against a generated table of PyTorch's (repeated indices, padding_idx with max_norm, norm_type 1, 1.5, 2,
// 3 and infinity, f64 and f32), eager fused and unfused and compile() giving the same bits, and errors.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "error_of.h"
#include "table_checks.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "kiln/options.h"

namespace kiln {
namespace {

using test::expect_close;
using test::expect_same;
using test::values;
using test::weights_for;

constexpr double kInf = std::numeric_limits<double>::infinity();

/// One forward pass of a table case: its indices and what PyTorch gives.
struct EmbeddingPass {
  std::vector<int64_t> shape, indices;  ///< the indices' shape and values
  std::vector<double> out, weight, grad; ///< the output, the weight after the pass, d(sum(out * u))/d weight
};

/// A table case (see tests/tools/pytorch_embedding_table.py).
struct EmbeddingCase {
  const char* name;
  int64_t num, dim, padding_idx; ///< padding_idx -1000: none
  double max_norm, norm_type;
  bool f64;
  std::vector<double> weight;    ///< the initial weight
  std::vector<EmbeddingPass> passes;
};

#include "pytorch_embedding_table.inc"

/// The case's module with the table's initial weight (the padding row as given: nonzero).
std::shared_ptr<nn::Embedding> module_of(const EmbeddingCase& c) {
  const std::optional<int64_t> pad = c.padding_idx == -1000 ? std::nullopt : std::optional<int64_t>(c.padding_idx);
  auto e = std::make_shared<nn::Embedding>(c.num, c.dim, pad, c.max_norm, c.norm_type);
  const DType dtype = c.f64 ? kFloat64 : kFloat32;
  e->to(dtype);
  e->weight.assign(from_vector(c.weight, {c.num, c.dim}).to(dtype));
  return e;
}

/// One pass: the output and the weight's gradient of sum(out * u), from a cleared gradient.
std::vector<Tensor> one_pass(nn::Embedding& e, const Tensor& indices) {
  e.weight.zero_grad();
  Tensor y = e(indices);
  (y * weights_for(y)).sum().backward();
  return {y, e.weight.grad()};
}

/// Every pass's output, weight after and gradient, run eagerly or through one compile()d pass.
std::vector<std::vector<double>> run_passes(const EmbeddingCase& c, bool compiled) {
  auto e = module_of(c);
  CompiledFunction step = compile([&](const std::vector<Tensor>& a) { return one_pass(*e, a[0]); });
  std::vector<std::vector<double>> got;
  for (const EmbeddingPass& p : c.passes) {
    const Tensor indices = from_vector(p.indices, IntList(p.shape.begin(), p.shape.end()));
    const std::vector<Tensor> out = compiled ? step({indices}) : one_pass(*e, indices);
    got.push_back(values(out[0]));
    got.push_back(values(e->weight));
    got.push_back(values(out[1]));
  }
  return got;
}

TEST(EmbeddingMaxNorm, MatchesPyTorchEagerAndCompiled) {
  for (const EmbeddingCase& c : kEmbeddingCases) {
    SCOPED_TRACE(c.name);
    const double tol = c.f64 ? 1e-12 : 2e-6;
    for (const bool compiled : {false, true}) {
      const auto got = run_passes(c, compiled);
      for (size_t k = 0; k < c.passes.size(); ++k) {
        const EmbeddingPass& p = c.passes[k];
        const std::string at = std::string(compiled ? "compiled" : "eager") + " pass " + std::to_string(k);
        expect_close(got[3 * k], p.out, tol, at + " output");
        expect_close(got[3 * k + 1], p.weight, tol, at + " weight");
        expect_close(got[3 * k + 2], p.grad, tol, at + " grad");
      }
    }
  }
}

// The renorm and the lookup give the same bits fused and unfused, and through compile().
TEST(EmbeddingMaxNorm, FusedUnfusedAndCompiledAgree) {
  for (const EmbeddingCase& c : kEmbeddingCases) {
    SCOPED_TRACE(c.name);
    const bool fusion = options().fusion;
    options().fusion = true;
    const auto fused = run_passes(c, false);
    options().fusion = false;
    const auto unfused = run_passes(c, false);
    options().fusion = fusion;
    const auto compiled = run_passes(c, true);
    for (size_t i = 0; i < fused.size(); ++i) {
      expect_same(unfused[i], fused[i], "unfused " + std::to_string(i));
      expect_same(compiled[i], fused[i], "compiled " + std::to_string(i));
    }
  }
}

// A compiled training step (lookup, backward, SGD) replays with new indices of the same shape without
// tracing again, renormalizing the rows each replay references as the eager step does, bit for bit.
TEST(EmbeddingMaxNorm, CompiledStepReplaysAsEager) {
  const std::vector<std::vector<int64_t>> batches{{0, 3, 3, 5}, {5, 1, 2, 2}, {4, 4, 4, 0}, {6, 6, 1, 3}, {2, 0, 5, 6}};
  std::vector<std::vector<double>> weights[2];
  size_t traces_after_two = 0, traces = 0;
  for (const bool compiled : {false, true}) {
    nn::Embedding e(7, 3, 2, 1.0, 2.0);
    e.weight.assign(test::rnd({7, 3}, 7).to(kFloat32) * 2.0);
    optim::SGD opt(e.parameters(), {.lr = 0.3});
    auto body = [&](const std::vector<Tensor>& a) {
      opt.zero_grad();
      const Tensor y = e(a[0]);
      Tensor loss = (y * weights_for(y)).sum();
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss.detach()};
    };
    CompiledFunction step = compile(body);
    for (size_t k = 0; k < batches.size(); ++k) {
      const Tensor indices = from_vector(batches[k], {2, 2});
      if (compiled) step({indices});
      else body({indices});
      weights[compiled].push_back(values(e.weight));
      if (k == 1) traces_after_two = step.num_traces();
    }
    traces = step.num_traces();
  }
  for (size_t k = 0; k < batches.size(); ++k) expect_same(weights[1][k], weights[0][k], "step " + std::to_string(k));
  EXPECT_EQ(traces, traces_after_two) << "no trace after the second step";
  EXPECT_NE(weights[0].front(), weights[0].back());
}

// Without max_norm the weight is left alone, and a row that no index references keeps its norm.
TEST(EmbeddingMaxNorm, OnlyReferencedRowsChange) {
  nn::Embedding e(4, 3, std::nullopt, 0.5);
  e.weight.assign(full({4, 3}, 2.0));
  (void)e(from_vector<int64_t>({1, 1, 3}, {3}));
  const std::vector<double> w = values(e.weight);
  for (int64_t row = 0; row < 4; ++row) {
    const double norm = std::sqrt(w[3 * row] * w[3 * row] * 3);
    if (row == 1 || row == 3) EXPECT_NEAR(norm, 0.5, 1e-6) << row;
    else EXPECT_EQ(w[3 * row], 2.0) << row;
  }
  nn::Embedding plain(4, 3);
  const std::vector<double> before = values(plain.weight);
  (void)plain(from_vector<int64_t>({0, 2}, {2}));
  EXPECT_EQ(values(plain.weight), before);
}

TEST(EmbeddingMaxNorm, ReprNamesTheOptions) {
  EXPECT_EQ(nn::Embedding(5, 3, 1, 2.5, 1).extra_repr(), "5, 3, padding_idx=1, max_norm=2.5, norm_type=1");
  EXPECT_EQ(nn::Embedding(5, 3, std::nullopt, 2.0).extra_repr(), "5, 3, max_norm=2");
}

TEST(EmbeddingMaxNorm, Errors) {
  using test::expect_error_at;
  const std::string file = __FILE__;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error_at([&] { (void)nn::Embedding(5, 3, std::nullopt, -1.0); }, file, __LINE__, "Embedding",
                  {"max_norm must be non-negative", "-1"});
  expect_error_at([&] { (void)nn::Embedding(5, 3, std::nullopt, nan); }, file, __LINE__, "Embedding",
                  {"max_norm", "nan"});
  expect_error_at([&] { (void)nn::Embedding(5, 3, std::nullopt, 1.0, 0.0); }, file, __LINE__, "Embedding",
                  {"norm_type must be positive", "got 0"});
  expect_error_at([&] { (void)nn::Embedding(5, 3, std::nullopt, 1.0, -2.0); }, file, __LINE__, "Embedding",
                  {"norm_type", "-2"});
  (void)nn::Embedding(5, 3, std::nullopt, 1.0, kInf); // the infinity norm is one
  nn::Embedding e(5, 3, std::nullopt, 1.0);
  expect_error_at([&] { (void)e(from_vector<int64_t>({1, 5}, {2})).to_vector<double>(); }, file, __LINE__,
                  "Embedding", {"index 5", "[0, 5)"});
}

} // namespace
} // namespace kiln

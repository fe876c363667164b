// Graphs that scale in width (issue 16): a concat of 2^17 inputs, a balanced sum of
// 1e5 leaves and 1e4 outputs realize in seconds, and every kernel reads a bounded
// number of buffers. Before, they took minutes (a kernel with one argument per input
// that LLVM took minutes to optimize) or overflowed the stack (a 2^17-deep chain of
// selects printed recursively).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/llvm_jit.h"
#include "codegen/lower.h"
#include "graph/build.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

// The sizes are scaled down under a sanitizer (CI runs these tests under ASan at -O1),
// where building and scheduling a node costs about ten times as much.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kScale = 8;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr int64_t kScale = 8;
#else
constexpr int64_t kScale = 1;
#endif
#else
constexpr int64_t kScale = 1;
#endif

// n realized inputs of `size` elements, input i filled with i % 7 (sums stay exact).
std::vector<Tensor> leaves(int64_t n, int64_t size) {
  std::vector<Tensor> xs;
  for (int64_t i = 0; i < n; ++i) xs.push_back(from_vector(std::vector<float>(static_cast<size_t>(size), float(i % 7))));
  return xs;
}

Tensor sum_tree(std::vector<Tensor> xs) {
  while (xs.size() > 1) {
    std::vector<Tensor> next;
    for (size_t i = 0; i + 1 < xs.size(); i += 2) next.push_back(xs[i] + xs[i + 1]);
    if (xs.size() % 2) next.push_back(xs.back());
    xs = std::move(next);
  }
  return xs[0];
}

// The most buffers any kernel of the schedule of `t` reads.
size_t widest_kernel(const Tensor& t) {
  size_t widest = 0;
  for (const auto& l : codegen::schedule({t.node().get()}, {true}).launches) widest = std::max(widest, l.inputs.size());
  return widest;
}

TEST(Width, ConcatOfManySmallInputs) {
  const int64_t n = (int64_t{1} << 17) / kScale;
  Tensor c = concat(leaves(n, 1));
  EXPECT_LE(widest_kernel(c), graph::build::kMaxConcatPieces);
  const std::vector<float> v = c.to_vector<float>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(v[static_cast<size_t>(i)], float(i % 7)) << i;
}

TEST(Width, ConcatTreeKeepsValuesAndGradients) {
  std::vector<Tensor> xs;
  for (int64_t i = 0; i < 300; ++i) xs.push_back(from_vector(std::vector<float>{float(i), float(-i)}, {1, 2}).requires_grad_());
  Tensor c = concat(xs, 0);
  ASSERT_EQ(c.shape(), (std::vector<int64_t>{300, 2}));
  const std::vector<float> v = c.to_vector<float>();
  for (int64_t i = 0; i < 300; ++i) ASSERT_EQ(v[static_cast<size_t>(2 * i + 1)], float(-i));
  std::vector<float> w(600);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(i);
  (c * from_vector(w, {300, 2})).sum().backward();
  EXPECT_EQ(xs[299].grad().to_vector<float>(), (std::vector<float>{598, 599}));
  EXPECT_EQ(xs[16].grad().to_vector<float>(), (std::vector<float>{32, 33}));
  EXPECT_EQ(xs[0].grad().to_vector<float>(), (std::vector<float>{0, 1}));
}

TEST(Width, BalancedSumOfManyLeaves) {
  const int64_t n = 100000 / kScale;
  Tensor s = sum_tree(leaves(n, 4));
  EXPECT_LE(widest_kernel(s), size_t{64});
  double expect = 0;
  for (int64_t i = 0; i < n; ++i) expect += double(i % 7);
  EXPECT_EQ(s.to_vector<float>(), std::vector<float>(4, float(expect)));
}

TEST(Width, ManyOutputs) {
  const int64_t n = 10000 / kScale;
  std::vector<Tensor> xs = leaves(n, 4), outs;
  for (const Tensor& x : xs) outs.push_back(x * 2.0 + 1.0);
  realize(outs);
  for (int64_t i = 0; i < n; i += 997) EXPECT_EQ(outs[static_cast<size_t>(i)].to_vector<float>(), std::vector<float>(4, float(2 * (i % 7) + 1)));
}

// Kernel IR expressions are DAGs: an offset whose every level reads the one below three
// times has 3^40 paths but 120 nodes. Printing, hashing and both emitters look at each
// shared subtree once (the CUDA emitter's affine-coefficient analysis walked every path).
TEST(Width, SharedSubtreesAreVisitedOnce) {
  using namespace codegen;
  Kernel k;
  k.buffers = {{DType::Float32, false}, {DType::Float32, true}};
  k.num_params = 1;
  k.domain = {param(0)};
  ExprRef off = loop_var(0);
  for (int i = 0; i < 40; ++i) off = iadd(off, isub(off, off)); // still i0
  k.stores.push_back({1, off, op(codegen::ScalarOp::Add, DType::Float32, {load(0, DType::Float32, off), constant(DType::Float32, 1)})});
  finalize(k);
  EXPECT_NE(print_kernel(k).find("store b1"), std::string::npos);
  EXPECT_NE(emit_cuda(k).find(k.name), std::string::npos);
  EXPECT_NE(LlvmJit::instance().llvm_ir(k, /*optimized=*/false).find(k.name), std::string::npos);
}

} // namespace
} // namespace kiln

// The fused attention kernel (graph op Attention, the attention kernel form; issue 15):
// what scaled_dot_product_attention runs on the CPU with fusion on, against the composite of
// primitives (what KILN_FUSION=0 runs) within the bound the README states, against the f64
// interpreter, bitwise across thread counts and between eager and compile(), gradients by
// gradcheck in f64, and the user's errors.

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <limits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/llvm_jit.h"
#include "codegen/lower.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/interpret.h"
#include "graph/node.h"
#include "kiln/kiln.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Sets options().fusion for a scope.
struct FusionSetting {
  bool saved = options().fusion;
  explicit FusionSetting(bool on) { options().fusion = on; }
  ~FusionSetting() { options().fusion = saved; }
};

// Whether the graph of x holds an op (the gradients come out of views and sums of broadcasts).
bool holds(const graph::NodeRef& x, graph::OpKind op) {
  std::vector<const graph::Node*> todo{x.get()};
  std::unordered_set<const graph::Node*> seen;
  while (!todo.empty()) {
    const graph::Node* n = todo.back();
    todo.pop_back();
    if (n->op == op) return true;
    if (!seen.insert(n).second) continue;
    for (const graph::NodeRef& in : n->inputs) todo.push_back(in.get());
  }
  return false;
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// The machine epsilon of a floating dtype (f32 or f64).
double epsilon_of(DType dtype) { return dtype == kFloat32 ? 0x1p-23 : 0x1p-52; }

// One attention problem: q [..., L, E], k [..., S, E], v [..., S, Ev] (equal batch dims), a mask
// (none, bool keep-mask or additive float) of `mask_shape`, causal or not.
struct Case {
  IntList batch;
  int64_t L, S, E, Ev;
  int mask = 0; // 0 none, 1 bool, 2 float
  IntList mask_shape;
  bool causal = false;
  std::string what;
};

IntList with(IntList batch, int64_t a, int64_t b) {
  batch.push_back(a);
  batch.push_back(b);
  return batch;
}

struct Operands {
  Tensor q, k, v, mask;
};

// Random operands of case c in `dtype`. Masks hide about a third of the keys, and every
// third query row entirely where the mask has that dim (a fully masked row).
Operands operands(const Case& c, DType dtype, uint64_t seed) {
  Operands o{randn(with(c.batch, c.L, c.E), seed, dtype), randn(with(c.batch, c.S, c.E), seed + 1, dtype),
             randn(with(c.batch, c.S, c.Ev), seed + 2, dtype), Tensor()};
  if (c.mask == 0) return o;
  Tensor keep = rand(c.mask_shape, seed + 3) > 0.33;
  const int64_t rank = static_cast<int64_t>(c.mask_shape.size());
  if (c.mask_shape[static_cast<size_t>(rank - 2)] == c.L) { // rows 0, 3, 6, ... see no key
    std::vector<double> r(static_cast<size_t>(c.L));
    for (size_t i = 0; i < r.size(); ++i) r[i] = i % 3 == 0 ? 0 : 1;
    Tensor row = from_vector(r, {c.L}) != 0.0;
    IntList s(c.mask_shape.size(), 1);
    s[static_cast<size_t>(rank - 2)] = c.L;
    keep = logical_and(keep, row.reshape(s));
  }
  o.mask = c.mask == 1 ? keep : where(keep, full({}, 0.0, dtype), full({}, -kInf, dtype)) + rand(c.mask_shape, seed + 4, dtype);
  return o;
}

Tensor attention(const Operands& o, bool causal, double scale) {
  return F::scaled_dot_product_attention(o.q, o.k, o.v, o.mask, 0, causal, scale);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {{2, 3}, 70, 130, 7, 5, 0, {}, false, "T not divisible by the blocks, Tq != Tk, d odd, batch and heads"},
      {{2}, 97, 97, 16, 16, 0, {}, true, "causal, one key block and a half"},
      {{3}, 40, 150, 8, 3, 0, {}, true, "causal with more keys than queries"},
      {{2, 2}, 33, 65, 5, 6, 1, {2, 2, 33, 65}, false, "bool mask of the scores' shape with fully masked rows"},
      {{2, 2}, 33, 65, 5, 6, 2, {33, 65}, false, "float mask broadcast over batch and heads, -inf rows"},
      {{2, 2}, 20, 70, 4, 4, 1, {2, 1, 1, 70}, false, "key-padding bool mask"},
      {{}, 1, 1, 1, 1, 0, {}, false, "one query, one key, no batch dims"},
  };
  return c;
}

// The Attention node of q, k, v (equal batch dims) and a mask of their rank, as a tensor that
// requires grad where they do: what scaled_dot_product_attention builds when no gradient flows
// (with gradients, only with is_causal or from 512 x 512 weights a batch point: otherwise the
// composite measured faster), for differentiating the node (its gradient is the fused backward,
// AttentionGrad).
Tensor attention_node(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, bool causal,
                      const graph::build::AttentionDropout& dropout = {}) {
  std::vector<Tensor> in{q, k, v};
  if (mask.defined()) in.push_back(mask);
  return detail::result_of(graph::build::attention(q.node(), k.node(), v.node(), mask.defined() ? mask.node() : nullptr,
                                                   scale, causal, dropout),
                           in);
}

// max_j sum_d |q_id k_jd| over the keys j of query row i of batch point b (q [.., L, E], k [.., S, E]).
double max_abs_dot(const Case& c, const std::vector<double>& q, const std::vector<double>& k, int64_t b, int64_t i) {
  double dot = 0;
  for (int64_t j = 0; j < c.S; ++j) {
    double d = 0;
    for (int64_t x = 0; x < c.E; ++x)
      d += std::fabs(q[static_cast<size_t>((b * c.L + i) * c.E + x)] * k[static_cast<size_t>((b * c.S + j) * c.E + x)]);
    dot = std::max(dot, d);
  }
  return dot;
}

// The bound of the README (fusion section) on |fused - composite| for each output element of
// query row i: (2S + 8 ceil(S / 64) + 16 + 4 E scale max_j sum_d |q_id k_jd|) eps max_j |v_j|.
void expect_within_bound(const Case& c, const Operands& o, double scale, const Tensor& fused, const Tensor& composite,
                         double eps, double& worst) {
  const std::vector<double> q = values(o.q), k = values(o.k), v = values(o.v), f = values(fused), u = values(composite);
  int64_t batch = 1;
  for (int64_t b : c.batch) batch *= b;
  for (int64_t b = 0; b < batch; ++b) {
    double vmax = 0;
    for (int64_t j = 0; j < c.S * c.Ev; ++j) vmax = std::max(vmax, std::fabs(v[static_cast<size_t>(b * c.S * c.Ev + j)]));
    for (int64_t i = 0; i < c.L; ++i) {
      const double dot = max_abs_dot(c, q, k, b, i);
      const double blocks = static_cast<double>((c.S + 63) / 64);
      const double bound =
          (2.0 * static_cast<double>(c.S) + 8 * blocks + 16 + 4 * static_cast<double>(c.E) * scale * dot) * eps * vmax;
      for (int64_t col = 0; col < c.Ev; ++col) {
        const size_t at = static_cast<size_t>((b * c.L + i) * c.Ev + col);
        ASSERT_FALSE(std::isnan(f[at])) << c.what << " [" << at << "]";
        EXPECT_LE(std::fabs(f[at] - u[at]), bound) << c.what << " [" << at << "]: " << f[at] << " vs " << u[at];
        if (vmax > 0) worst = std::max(worst, std::fabs(f[at] - u[at]) / (eps * vmax));
      }
    }
  }
}

} // namespace

TEST(Attention, FusedOnTheCpuIsOneAttentionNodeAndUnfusedModeTheComposite) {
  const Operands o = operands(cases()[0], kFloat32, 1);
  {
    FusionSetting on(true);
    EXPECT_EQ(attention(o, false, 0.3).node()->op, graph::OpKind::Attention);
    // dropout too: the kernel draws the composite's keep-mask (see AttentionDropout below)
    EXPECT_EQ(F::scaled_dot_product_attention(o.q, o.k, o.v, {}, 0.5).node()->op, graph::OpKind::Attention);
    // so do operands that require grad with fewer than 512 x 512 weights a batch point, without
    // is_causal (there the composite's backward measured faster than the fused one: see the README's
    // fusion section); with is_causal the fused pair skips the masked pairs and measured faster
    Tensor q = o.q.detach().requires_grad_();
    EXPECT_NE(F::scaled_dot_product_attention(q, o.k, o.v).node()->op, graph::OpKind::Attention);
    const Tensor causal_out = F::scaled_dot_product_attention(q, o.k, o.v, {}, 0, /*is_causal=*/true);
    EXPECT_EQ(causal_out.node()->op, graph::OpKind::Attention);
    EXPECT_EQ(grad({causal_out.sum()}, {q}, {}, false, /*create_graph=*/true)[0].node()->op, graph::OpKind::AttentionGrad);
    // from 512 x 512 on, the fused forward and backward
    const Tensor ql = randn({1, 512, 8}, 30).requires_grad_(), kl = randn({1, 512, 8}, 31), vl = randn({1, 512, 4}, 32);
    const Tensor long_out = F::scaled_dot_product_attention(ql, kl, vl);
    EXPECT_EQ(long_out.node()->op, graph::OpKind::Attention);
    const Tensor dq = grad({long_out.sum()}, {ql}, {}, false, /*create_graph=*/true)[0];
    EXPECT_EQ(dq.node()->op, graph::OpKind::AttentionGrad);
    EXPECT_NE(F::scaled_dot_product_attention(ql.narrow(1, 0, 511), kl, vl).node()->op, graph::OpKind::Attention);
    NoGradGuard no_grad; // under which a result of grad-requiring operands is detached
    const Tensor out = F::scaled_dot_product_attention(q, o.k, o.v);
    const graph::Node* n = out.node().get();
    ASSERT_EQ(n->op, graph::OpKind::Detach);
    EXPECT_EQ(n->inputs[0]->op, graph::OpKind::Attention);
  }
  FusionSetting off(false);
  EXPECT_NE(attention(o, false, 0.3).node()->op, graph::OpKind::Attention);
}

TEST(Attention, FusedMatchesTheCompositeWithinTheBound) {
  for (DType dtype : {kFloat32, kFloat64}) {
    const double eps = epsilon_of(dtype);
    double worst = 0;
    uint64_t seed = 10;
    for (const Case& c : cases()) {
      const Operands o = operands(c, dtype, seed += 10);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
      Tensor fused, composite;
      {
        FusionSetting on(true);
        fused = attention(o, c.causal, scale);
        ASSERT_EQ(fused.node()->op, graph::OpKind::Attention) << c.what;
        fused.realize();
      }
      {
        FusionSetting off(false);
        composite = attention(o, c.causal, scale);
        composite.realize();
      }
      expect_within_bound(c, o, scale, fused, composite, eps, worst);
      // fully masked rows are 0 in both
      if (c.mask != 0 && c.mask_shape[c.mask_shape.size() - 2] == c.L) {
        const std::vector<double> f = values(fused);
        for (int64_t col = 0; col < c.Ev; ++col) EXPECT_EQ(f[static_cast<size_t>(col)], 0.0) << c.what;
      }
    }
    std::printf("fused vs composite (%s): largest difference %.2f eps max|v|\n", dtype_name(dtype).data(), worst);
  }
}

TEST(Attention, FusedMatchesTheF64Interpreter) {
  uint64_t seed = 300;
  for (const Case& c : cases()) {
    const Operands o = operands(c, kFloat64, seed += 10);
    FusionSetting on(true);
    const Tensor out = attention(o, c.causal, 0.7);
    const graph::InterpretResult want = graph::interpret_one(out.node());
    const std::vector<double> got = values(out);
    ASSERT_EQ(got.size(), want.values.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want.values[i], 1e-12 * std::max(1.0, std::fabs(want.values[i]))) << c.what << " [" << i << "]";
  }
}

TEST(Attention, FusedIsBitwiseTheSameOnOneAndTwoThreadsAndCompiled) {
  FusionSetting on(true);
  for (const Case& c : {cases()[0], cases()[1], cases()[4]}) {
    const Operands o = operands(c, kFloat32, 500);
    std::vector<double> one, two;
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 1);
      one = values(attention(o, c.causal, 0.5));
    }
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 2);
      two = values(attention(o, c.causal, 0.5));
    }
    EXPECT_EQ(one, two) << c.what;
    CompiledFunction step = compile([&](const std::vector<Tensor>& x) {
      return std::vector<Tensor>{F::scaled_dot_product_attention(x[0], x[1], x[2], o.mask, 0, c.causal, 0.5)};
    });
    EXPECT_EQ(values(step({o.q, o.k, o.v})[0]), one) << c.what;
    EXPECT_EQ(values(step({o.q, o.k, o.v})[0]), one) << c.what << " (replayed)";
  }
}

// The rows whose scores accumulate together (AttentionSpec::rows, planned from the target's
// registers) never change a result: the kernel planned for AVX2 (1 row), AVX-512 f64 (2) and
// AVX-512 f32 (4), run by hand on this host, gives the same bits, in f32 and f64.
TEST(Attention, RegisterRowsNeverChangeAResult) {
  for (DType dtype : {kFloat32, kFloat64}) {
    const Case c{{2}, 45, 100, 9, 6, 1, {2, 45, 100}, false, "rows"};
    const Operands o = operands(c, dtype, 700);
    const graph::NodeRef out = graph::build::attention(o.q.node(), o.k.node(), o.v.node(), o.mask.node(), 0.4, false);
    const std::vector<double> q = values(o.q), k = values(o.k), v = values(o.v), m = values(o.mask);
    std::vector<std::vector<double>> results;
    for (const codegen::Target& t : {codegen::Target::cpu(256, true, 16), codegen::Target::cpu(512, true, 32)}) {
      codegen::ScheduleOptions opts;
      opts.target = t;
      const codegen::Schedule s = codegen::schedule({out.get()}, opts);
      ASSERT_EQ(s.launches.size(), 1u);
      const codegen::KernelLaunch& l = s.launches[0];
      ASSERT_TRUE(l.kernel.attention.has_value());
      const int64_t want_rows = t.vector_bits == 256 ? 1 : dtype == kFloat64 ? 2 : 4;
      EXPECT_EQ(l.kernel.attention->rows, want_rows);
      // the operands in the kernel's element types (the mask bool as bytes)
      auto as = [&](const std::vector<double>& x) {
        std::vector<char> bytes(x.size() * (dtype == kFloat64 ? 8 : 4));
        for (size_t i = 0; i < x.size(); ++i)
          if (dtype == kFloat64) reinterpret_cast<double*>(bytes.data())[i] = x[i];
          else reinterpret_cast<float*>(bytes.data())[i] = static_cast<float>(x[i]);
        return bytes;
      };
      std::vector<char> qb = as(q), kb = as(k), vb = as(v), ob(static_cast<size_t>(out->numel()) * (dtype == kFloat64 ? 8 : 4));
      std::vector<char> mb(m.begin(), m.end());
      const auto bytes = static_cast<size_t>(codegen::attention_scratch_bytes(l.kernel, l.params) + 63) / 64 * 64;
      std::unique_ptr<void, void (*)(void*)> scratch(std::aligned_alloc(64, bytes), std::free);
      const std::vector<void*> bufs{qb.data(), kb.data(), vb.data(), mb.data(), ob.data(), scratch.get()};
      codegen::LlvmJit::instance().compile(l.kernel)(0, l.gemm_tasks, bufs.data(), l.params.data());
      std::vector<double> r(static_cast<size_t>(out->numel()));
      for (size_t i = 0; i < r.size(); ++i)
        r[i] = dtype == kFloat64 ? reinterpret_cast<double*>(ob.data())[i] : reinterpret_cast<float*>(ob.data())[i];
      results.push_back(std::move(r));
    }
    EXPECT_EQ(results[0], results[1]) << dtype_name(dtype);
    FusionSetting on(true);
    EXPECT_EQ(values(attention(o, false, 0.4)), results[0]) << dtype_name(dtype) << ": the host's plan";
  }
}

TEST(Attention, GradcheckInF64OfTheAttentionNode) {
  const Tensor q = randn({2, 5, 3}, 41, kFloat64), k = randn({2, 7, 3}, 42, kFloat64), v = randn({2, 7, 2}, 43, kFloat64);
  const Tensor keep = logical_or(rand({1, 5, 7}, 44) > 0.5, arange(7) == 0);
  const Tensor add_mask = randn({1, 5, 7}, 45, kFloat64);
  auto check = [&](const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in, const char* what) {
    const GradcheckResult r = gradcheck([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{f(x)}; }, in);
    EXPECT_TRUE(r.ok) << what << ": " << r.report;
  };
  check([](const std::vector<Tensor>& x) { return attention_node(x[0], x[1], x[2], {}, 0.6, false); }, {q, k, v}, "plain");
  check([](const std::vector<Tensor>& x) { return attention_node(x[0], x[1], x[2], {}, 0.6, true); }, {q, k, v}, "causal");
  check([&](const std::vector<Tensor>& x) { return attention_node(x[0], x[1], x[2], keep, 0.6, false); }, {q, k, v},
        "bool mask");
  check([](const std::vector<Tensor>& x) { return attention_node(x[0], x[1], x[2], x[3], 0.6, false); }, {q, k, v, add_mask},
        "float mask (differentiated too)");
}

TEST(Attention, ForwardModeAndGradientsOfGradientsOfTheNodeGoThroughTheComposite) {
  const Tensor q = randn({4, 3}, 51, kFloat64), k = randn({6, 3}, 52, kFloat64), v = randn({6, 2}, 53, kFloat64);
  const GradcheckResult r = gradcheck(
      [](const std::vector<Tensor>& x) {
        const Tensor out = attention_node(x[0], x[1], x[2], {}, 0.5, true);
        return std::vector<Tensor>{grad({(out * out).sum()}, {x[0]}, {}, false, true)[0]};
      },
      {q, k, v});
  EXPECT_TRUE(r.ok) << r.report;
  // jvp against the composite's (functional::softmax's arithmetic; equal up to rounding)
  const Tensor tq = randn({4, 3}, 54, kFloat64), tk = randn({6, 3}, 55, kFloat64), tv = randn({6, 2}, 56, kFloat64);
  auto node = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{attention_node(x[0], x[1], x[2], {}, 0.5, false)}; };
  auto composite = [](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{matmul(F::softmax(matmul(x[0], x[1].transpose(0, 1)) * 0.5, -1), x[2])};
  };
  const std::vector<double> a = values(jvp(node, {q, k, v}, {tq, tk, tv}).second[0]);
  const std::vector<double> b = values(jvp(composite, {q, k, v}, {tq, tk, tv}).second[0]);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << i;
}

TEST(Attention, BadMasksAreTheUsersErrors) {
  FusionSetting on(true);
  const Tensor q = randn({2, 4, 3}, 61), k = randn({2, 5, 3}, 62), v = randn({2, 5, 2}, 63);
  const int line = __LINE__ + 2;
  try {
    F::scaled_dot_product_attention(q, k, v, ones({4, 4}) > 0.0);
    ADD_FAILURE() << "nothing was thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.op(), "scaled_dot_product_attention") << msg;
    EXPECT_NE(msg.find("[2, 4, 5]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test_attention.cpp:" + std::to_string(line)), std::string::npos) << msg;
  }
  EXPECT_THROW(F::scaled_dot_product_attention(q, k, v, ones({4, 5}, kInt64)), Error);
}

// ---------------------------------------------------------------- the fused backward (AttentionGrad)

namespace {

// scaled_dot_product_attention's result with fusion on as the Attention node, whose gradient is the
// fused backward (AttentionGrad; scaled_dot_product_attention keeps the composite when a gradient
// flows through a small attention without is_causal), k and v broadcast to q's batch dims; with fusion off, scaled_dot_product_attention (the
// composite, forward and backward). Positional arguments as scaled_dot_product_attention's.
// With fusion on, `node_dropout` is the node's dropout (`dropout` is the composite's).
Tensor sdpa(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = {}, double dropout = 0,
            bool causal = false, double scale = -1, const graph::build::AttentionDropout& node_dropout = {}) {
  if (scale < 0) scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  if (!options().fusion) return F::scaled_dot_product_attention(q, k, v, mask, dropout, causal, scale);
  auto full = [&](const Tensor& t) {
    IntList s = q.shape();
    s[s.size() - 2] = t.size(-2);
    s[s.size() - 1] = t.size(-1);
    return t.expand(s);
  };
  Tensor m = mask; // of q's rank (leading 1s)
  if (m.defined() && m.dim() < q.dim()) {
    IntList s(static_cast<size_t>(q.dim() - m.dim()), 1);
    for (int64_t d : m.shape()) s.push_back(d);
    m = m.reshape(s);
  }
  return attention_node(q, full(k), full(v), m, scale, causal, node_dropout);
}

} // namespace


namespace {

// The cases of the backward: those of the forward, and E != Ev with a float mask of the scores'
// shape (its gradient too), a causal one with a key-padding mask and batch dims broadcast.
std::vector<Case> backward_cases() {
  std::vector<Case> c = cases();
  c.push_back({{3, 2}, 50, 90, 12, 5, 2, {3, 2, 50, 90}, false, "float mask of the scores' shape, E != Ev"});
  c.push_back({{2, 3}, 66, 130, 8, 8, 1, {2, 1, 1, 130}, false, "a key-padding mask, 66 queries and 130 keys"});
  return c;
}

// The gradients of <attention(o), w> with respect to q, k, v (and a float mask) for a random adjoint w.
std::vector<Tensor> attention_grads(const Case& c, const Operands& o, double scale, const Tensor& w) {
  std::vector<Tensor> in{o.q.detach().requires_grad_(), o.k.detach().requires_grad_(), o.v.detach().requires_grad_()};
  Tensor mask = o.mask;
  if (c.mask == 2) in.push_back(mask = o.mask.detach().requires_grad_());
  const Tensor out = sdpa(in[0], in[1], in[2], mask, 0, c.causal, scale);
  return grad({(out * w).sum()}, in);
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::isfinite(v) ? std::max(m, std::fabs(v)) : m;
  return m;
}

// Each gradient G of `fused` (not NaN) within (2S + 64) eps max|G| of `composite`'s elementwise, the
// backward's bound the README states; `worst` keeps the largest difference in eps max|G|.
void expect_gradients_within_bound(const Case& c, const std::vector<Tensor>& fused, const std::vector<Tensor>& composite,
                                   double eps, double& worst) {
  ASSERT_EQ(fused.size(), composite.size());
  for (size_t g = 0; g < fused.size(); ++g) {
    const std::vector<double> f = values(fused[g]), u = values(composite[g]);
    const double m = max_abs(u), bound = (2.0 * static_cast<double>(c.S) + 64) * eps * m;
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_FALSE(std::isnan(f[i])) << c.what << " gradient " << g << " [" << i << "]";
      EXPECT_LE(std::fabs(f[i] - u[i]), bound) << c.what << " gradient " << g << " [" << i << "]: " << f[i] << " vs " << u[i];
      if (m > 0) worst = std::max(worst, std::fabs(f[i] - u[i]) / (eps * m));
    }
  }
}

} // namespace

// The fused backward against the composite's (KILN_FUSION=0): each gradient G (dq, dk, dv, a float
// mask's) within (2S + 64) eps max|G| elementwise, the bound the README states (f32 and f64); the
// gradients of a fully masked row are 0. The fused gradients are AttentionGrad nodes, and dq, dk
// and dv are one kernel.
TEST(AttentionBackward, FusedMatchesTheCompositeWithinTheBound) {
  for (DType dtype : {kFloat32, kFloat64}) {
    const double eps = epsilon_of(dtype);
    double worst = 0;
    uint64_t seed = 1000;
    for (const Case& c : backward_cases()) {
      const Operands o = operands(c, dtype, seed += 10);
      const Tensor w = randn(with(c.batch, c.L, c.Ev), seed + 7, dtype);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
      std::vector<Tensor> fused, composite;
      {
        FusionSetting on(true);
        fused = attention_grads(c, o, scale, w);
        for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(holds(fused[i].node(), graph::OpKind::AttentionGrad)) << c.what;
        const codegen::Schedule s = codegen::schedule({fused[0].node().get(), fused[1].node().get(), fused[2].node().get()}, {});
        int backward = 0;
        for (const codegen::KernelLaunch& l : s.launches)
          if (l.kernel.attention && l.kernel.attention->backward) {
            ++backward;
            EXPECT_EQ(l.outputs.size(), 3u) << c.what;
          }
        EXPECT_EQ(backward, 1) << c.what;
      }
      {
        FusionSetting off(false);
        composite = attention_grads(c, o, scale, w);
        ASSERT_FALSE(holds(composite[0].node(), graph::OpKind::AttentionGrad)) << c.what;
      }
      expect_gradients_within_bound(c, fused, composite, eps, worst);
      // a fully masked row (row 0 where the mask has the query dim) gets dq = 0
      if (c.mask != 0 && c.mask_shape[c.mask_shape.size() - 2] == c.L) {
        const std::vector<double> dq = values(fused[0]);
        for (int64_t col = 0; col < c.E; ++col) EXPECT_EQ(dq[static_cast<size_t>(col)], 0.0) << c.what;
      }
    }
    std::printf("fused vs composite backward (%s): largest difference %.2f eps max|G|\n", dtype_name(dtype).data(), worst);
  }
}

// With causal, a key a row does not see never enters the row (AttentionSpec, AttentionBackward: the
// pairs j > i are skipped, not multiplied by their 0 weight; g = 0 where the score is -inf): with an
// inf in v at key 40, the output and dq of rows 0..39 and all of dv (which v does not enter) have
// the bits a finite v there gives, and row 40's output is not finite. Before, 0 * inf made every
// row of key 40's block NaN.
TEST(AttentionBackward, WithCausalAKeyARowDoesNotSeeNeverEntersIt) {
  FusionSetting on(true);
  const int64_t T = 70, E = 8;
  const Tensor q = randn({2, T, E}, 71), k = randn({2, T, E}, 72), w = randn({2, T, E}, 73);
  std::vector<float> vv = randn({2, T, E}, 74).to_vector<float>();
  auto run = [&](float v40) { // out, dq, dv
    vv[40 * E] = v40;
    const Tensor qg = q.detach().requires_grad_(), vg = from_vector(vv, {2, T, E}).requires_grad_();
    const Tensor out = attention_node(qg, k, vg, {}, 0.35, true);
    const std::vector<Tensor> g = grad({(out * w).sum()}, {qg, vg});
    return std::vector<std::vector<double>>{values(out), values(g[0]), values(g[1])};
  };
  const auto finite = run(0.5f), inf = run(std::numeric_limits<float>::infinity());
  for (size_t x : {size_t{0}, size_t{1}})
    for (int64_t i = 0; i < 40 * E; ++i) ASSERT_EQ(inf[x][static_cast<size_t>(i)], finite[x][static_cast<size_t>(i)]) << x << " " << i;
  EXPECT_EQ(inf[2], finite[2]);
  EXPECT_FALSE(std::isfinite(inf[0][static_cast<size_t>(40 * E)]));
}

// Only the gradients asked for are written: dk alone is a backward kernel with one output.
TEST(AttentionBackward, OnlyTheGradientsAskedForAreComputed) {
  FusionSetting on(true);
  const Case& c = cases()[0];
  const Operands o = operands(c, kFloat32, 1200);
  const Tensor k = o.k.detach().requires_grad_();
  const Tensor dk = grad({sdpa(o.q, k, o.v).sum()}, {k})[0];
  const codegen::Schedule s = codegen::schedule({dk.node().get()}, {});
  const codegen::KernelLaunch* backward = nullptr;
  for (const codegen::KernelLaunch& l : s.launches)
    if (l.kernel.attention && l.kernel.attention->backward) backward = &l;
  ASSERT_NE(backward, nullptr);
  const codegen::KernelLaunch& l = *backward;
  EXPECT_EQ(l.outputs.size(), 1u);
  EXPECT_LT(l.kernel.attention->dq, 0);
  EXPECT_GE(l.kernel.attention->dk, 0);
  EXPECT_LT(l.kernel.attention->dv, 0);
  FusionSetting off(false);
  const Tensor want = grad({sdpa(o.q, k, o.v).sum()}, {k})[0];
  const std::vector<double> a = values(dk), b = values(want);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::max(1.0, max_abs(b))) << i;
}

// The kernel against the f64 interpreter's AttentionGrad (its exact math, rounded once).
TEST(AttentionBackward, FusedMatchesTheF64Interpreter) {
  uint64_t seed = 1300;
  FusionSetting on(true);
  for (const Case& c : backward_cases()) {
    const Operands o = operands(c, kFloat64, seed += 10);
    const Tensor w = randn(with(c.batch, c.L, c.Ev), seed + 5, kFloat64);
    const std::vector<Tensor> g = attention_grads(c, o, 0.7, w);
    for (size_t x = 0; x < 3; ++x) {
      ASSERT_TRUE(holds(g[x].node(), graph::OpKind::AttentionGrad));
      const graph::InterpretResult want = graph::interpret_one(g[x].node());
      const std::vector<double> got = values(g[x]);
      ASSERT_EQ(got.size(), want.values.size());
      const double m = max_abs(want.values);
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want.values[i], 1e-11 * std::max(1.0, m)) << c.what << " gradient " << x << " [" << i << "]";
    }
  }
}

// Bitwise the same on 1 and 2 threads, and compiled (replayed).
TEST(AttentionBackward, FusedIsBitwiseTheSameOnOneAndTwoThreadsAndCompiled) {
  FusionSetting on(true);
  for (const Case& c : {backward_cases()[0], backward_cases()[1], backward_cases()[4], backward_cases()[8]}) {
    const Operands o = operands(c, kFloat32, 1500);
    const Tensor w = randn(with(c.batch, c.L, c.Ev), 1501, kFloat32);
    auto all = [&] {
      std::vector<double> r;
      for (const Tensor& g : attention_grads(c, o, 0.5, w))
        for (double x : values(g)) r.push_back(x);
      return r;
    };
    std::vector<double> one, two;
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 1);
      one = all();
    }
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 2);
      two = all();
    }
    EXPECT_EQ(one, two) << c.what;
    CompiledFunction step = compile([&](const std::vector<Tensor>& x) {
      std::vector<Tensor> in{x[0].detach().requires_grad_(), x[1].detach().requires_grad_(), x[2].detach().requires_grad_()};
      const Tensor out = sdpa(in[0], in[1], in[2], c.mask == 2 ? Tensor() : o.mask, 0, c.causal, 0.5);
      return grad({(out * w).sum()}, in);
    });
    if (c.mask == 2) continue; // (the float mask's gradient is not in this compiled step)
    std::vector<double> compiled;
    for (const Tensor& g : step({o.q, o.k, o.v}))
      for (double x : values(g)) compiled.push_back(x);
    EXPECT_EQ(compiled, one) << c.what;
  }
}

// gradcheck in f64 of the backward (first order: the AttentionGrad kernel against finite differences
// of the forward; second order: its rules, the composite's differentiated), with dout depending on the
// output, a float mask, causal, and q, k, v one tensor (self-attention of x).
TEST(AttentionBackward, GradcheckInF64FirstAndSecondOrder) {
  FusionSetting on(true);
  const Tensor q = randn({2, 5, 3}, 71, kFloat64), k = randn({2, 7, 3}, 72, kFloat64), v = randn({2, 7, 2}, 73, kFloat64);
  const Tensor add_mask = randn({1, 5, 7}, 74, kFloat64);
  auto check = [](const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                  const char* what) {
    const GradcheckResult r = gradcheck(f, in);
    EXPECT_TRUE(r.ok) << what << ": " << r.report;
  };
  check([](const std::vector<Tensor>& x) {
    const Tensor out = sdpa(x[0], x[1], x[2], x[3], 0, false, 0.6);
    return grad({(out * out).sum()}, {x[0], x[1], x[2], x[3]}, {}, false, true);
  }, {q, k, v, add_mask}, "second order, float mask");
  check([](const std::vector<Tensor>& x) {
    const Tensor out = sdpa(x[0], x[1], x[2], {}, 0, true, 0.6);
    return grad({(out.sin()).sum()}, {x[0], x[1], x[2]}, {}, false, true);
  }, {q, k, v}, "second order, causal");
  const Tensor x = randn({6, 4}, 75, kFloat64);
  check([](const std::vector<Tensor>& t) {
    const Tensor out = sdpa(t[0], t[0], t[0], {}, 0, true, 0.5);
    return grad({(out * out).sum()}, {t[0]}, {}, false, true);
  }, {x}, "second order, q = k = v");
  // first order of the fused backward's own values: <grad, t> against jvp of the forward
  const Tensor tq = randn({2, 5, 3}, 76, kFloat64), tk = randn({2, 7, 3}, 77, kFloat64), tv = randn({2, 7, 2}, 78, kFloat64);
  const Tensor w = randn({2, 5, 2}, 79, kFloat64);
  std::vector<Tensor> in{q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()};
  const std::vector<Tensor> g = grad({(sdpa(in[0], in[1], in[2], {}, 0, true, 0.6) * w).sum()}, in);
  const auto f = [&](const std::vector<Tensor>& t) {
    return std::vector<Tensor>{(sdpa(t[0], t[1], t[2], {}, 0, true, 0.6) * w).sum()};
  };
  const double lhs = ((g[0] * tq).sum() + (g[1] * tk).sum() + (g[2] * tv).sum()).item<double>();
  const double rhs = jvp(f, {q, k, v}, {tq, tk, tv}).second[0].item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::fabs(rhs)));
}

// Forward mode through the backward node (its JVP rule) against the composite's.
TEST(AttentionBackward, ForwardModeThroughTheBackwardMatchesTheComposite) {
  const Tensor q = randn({4, 3}, 81, kFloat64), k = randn({6, 3}, 82, kFloat64), v = randn({6, 2}, 83, kFloat64);
  const Tensor tq = randn({4, 3}, 84, kFloat64), tk = randn({6, 3}, 85, kFloat64), tv = randn({6, 2}, 86, kFloat64);
  auto f = [](const std::vector<Tensor>& x) {
    const Tensor out = sdpa(x[0], x[1], x[2], {}, 0, false, 0.5);
    return grad({(out * out).sum()}, {x[0], x[1], x[2]}, {}, false, true);
  };
  std::vector<std::vector<double>> r;
  for (bool fusion : {true, false}) {
    FusionSetting s(fusion);
    for (const Tensor& t : jvp(f, {q, k, v}, {tq, tk, tv}).second) r.push_back(values(t));
  }
  ASSERT_EQ(r.size(), 6u);
  for (size_t g = 0; g < 3; ++g)
    for (size_t i = 0; i < r[g].size(); ++i) EXPECT_NEAR(r[g][i], r[g + 3][i], 1e-10) << g << " [" << i << "]";
}

// The rows that go through a key block together (AttentionSpec::rows) never change the backward's
// results: the backward kernel planned for AVX2 (1 row), AVX-512 f64 (2) and f32 (4), run by hand on
// this host, gives the same bits as the host's plan, in f32 and f64 (45 rows: full groups and rows left).
TEST(AttentionBackward, RegisterRowsNeverChangeAResult) {
  for (DType dtype : {kFloat32, kFloat64})
  for (bool masked : {true, false}) { // causal with a bool mask, and causal alone (masked by lane numbers)
    SCOPED_TRACE(masked ? "causal, bool mask" : "causal");
    const Case c{{2}, 45, 100, 9, 6, 1, {2, 45, 100}, false, "rows"};
    const Operands o = operands(c, dtype, 1700);
    const Tensor mask = masked ? o.mask.realize() : Tensor(), dout = randn({2, 45, 6}, 1701, dtype).realize();
    const graph::NodeRef mask_node = masked ? mask.node() : nullptr;
    const Tensor out = attention_node(o.q, o.k, o.v, mask, 0.4, true).realize();
    namespace b = graph::build;
    const Tensor lse = detail::result_of(b::attention_lse(o.q.node(), o.k.node(), o.v.node(), mask_node, 0.4, true), {}).realize();
    std::unordered_map<const graph::Node*, std::vector<double>> data; // the operands' values, realized
    for (const Tensor* t : {&o.q, &o.k, &o.v, &mask, &out, &dout, &lse})
      if (t->defined()) data[t->node().get()] = values(*t);
    std::vector<graph::NodeRef> grads;
    for (auto which : {b::AttentionGradOf::Q, b::AttentionGradOf::K, b::AttentionGradOf::V})
      grads.push_back(b::attention_grad(o.q.node(), o.k.node(), o.v.node(), out.node(), dout.node(), lse.node(), mask_node, 0.4,
                                        true, which));
    const size_t elem = dtype == kFloat64 ? 8 : 4;
    std::vector<std::vector<double>> results;
    for (const codegen::Target& t : {codegen::Target::cpu(256, true, 16), codegen::Target::cpu(512, true, 32)}) {
      codegen::ScheduleOptions opts;
      opts.target = t;
      const codegen::Schedule s = codegen::schedule({grads[0].get(), grads[1].get(), grads[2].get()}, opts);
      ASSERT_EQ(s.launches.size(), 1u);
      const codegen::KernelLaunch& l = s.launches[0];
      ASSERT_TRUE(l.kernel.attention && l.kernel.attention->backward);
      EXPECT_EQ(l.kernel.attention->rows, t.vector_bits == 256 ? 1 : dtype == kFloat64 ? 2 : 4);
      std::vector<std::vector<char>> bytes;
      for (const graph::Node* n : l.inputs) {
        ASSERT_TRUE(data.count(n)) << graph::op_name(n->op) << " " << n->shape.size();
        const std::vector<double>& x = data.at(n);
        std::vector<char> bb(x.size() * (n->dtype == kBool ? 1 : elem));
        for (size_t i = 0; i < x.size(); ++i)
          if (n->dtype == kBool) bb[i] = x[i] != 0;
          else if (dtype == kFloat64) reinterpret_cast<double*>(bb.data())[i] = x[i];
          else reinterpret_cast<float*>(bb.data())[i] = static_cast<float>(x[i]);
        bytes.push_back(std::move(bb));
      }
      for (const graph::Node* n : l.outputs) bytes.emplace_back(static_cast<size_t>(n->numel()) * elem);
      const auto scratch_bytes = static_cast<size_t>(codegen::attention_scratch_bytes(l.kernel, l.params) + 63) / 64 * 64;
      std::unique_ptr<void, void (*)(void*)> scratch(std::aligned_alloc(64, scratch_bytes), std::free);
      std::vector<void*> bufs;
      for (std::vector<char>& bb : bytes) bufs.push_back(bb.data());
      bufs.push_back(scratch.get());
      codegen::LlvmJit::instance().compile(l.kernel)(0, l.gemm_tasks, bufs.data(), l.params.data());
      std::vector<double> r; // dq, dk, dv in that order
      for (const graph::NodeRef& g : grads) {
        const size_t at = static_cast<size_t>(std::find(l.outputs.begin(), l.outputs.end(), g.get()) - l.outputs.begin());
        ASSERT_LT(at, l.outputs.size());
        const std::vector<char>& bb = bytes[l.inputs.size() + at];
        for (int64_t i = 0; i < g->numel(); ++i)
          r.push_back(dtype == kFloat64 ? reinterpret_cast<const double*>(bb.data())[i] : reinterpret_cast<const float*>(bb.data())[i]);
      }
      results.push_back(std::move(r));
    }
    EXPECT_EQ(results[0], results[1]) << dtype_name(dtype);
    std::vector<double> host;
    for (const graph::NodeRef& g : grads)
      for (double x : values(detail::result_of(g, {}))) host.push_back(x);
    EXPECT_EQ(host, results[0]) << dtype_name(dtype) << ": the host's plan";
  }
}

// Batch dims broadcast: k and v shared by the heads (q [2, 3, L, E], k and v [2, 1, S, E|Ev]) and a
// key-padding mask; their gradients are the fused backward's summed over the heads, as the composite's.
TEST(AttentionBackward, BroadcastBatchDimsMatchTheComposite) {
  const Tensor q = randn({2, 3, 37, 8}, 91), k = randn({2, 1, 70, 8}, 92), v = randn({2, 1, 70, 5}, 93);
  const Tensor keep = logical_or(rand({2, 1, 1, 70}, 94) > 0.3, arange(70) == 0), w = randn({2, 3, 37, 5}, 95);
  std::vector<std::vector<double>> r;
  for (bool fusion : {true, false}) {
    FusionSetting s(fusion);
    std::vector<Tensor> in{q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()};
    const Tensor out = sdpa(in[0], in[1], in[2], keep, 0, false, 0.35);
    const std::vector<Tensor> g = grad({(out * w).sum()}, in);
    EXPECT_EQ(holds(g[1].node(), graph::OpKind::AttentionGrad), fusion);
    for (const Tensor& x : g) r.push_back(values(x));
  }
  for (size_t g = 0; g < 3; ++g) {
    ASSERT_EQ(r[g].size(), r[g + 3].size());
    const double bound = (2.0 * 70 + 64) * 0x1p-23 * max_abs(r[g + 3]);
    for (size_t i = 0; i < r[g].size(); ++i) EXPECT_NEAR(r[g][i], r[g + 3][i], bound) << g << " [" << i << "]";
  }
}

// ---------------------------------------------------------------- the forward's row logsumexp (AttentionLse)

namespace {

// The AttentionLse node of q, k, v and a mask of their rank (equal batch dims): each query row's
// logsumexp, stored by the forward kernel with the Attention node of the same operands.
Tensor lse_node(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, bool causal) {
  std::vector<Tensor> in{q, k, v};
  if (mask.defined()) in.push_back(mask);
  return detail::result_of(graph::build::attention_lse(q.node(), k.node(), v.node(), mask.defined() ? mask.node() : nullptr,
                                                       scale, causal),
                           in);
}

// The attention-form launches of the schedule of `roots`.
std::vector<codegen::KernelLaunch> attention_launches(const std::vector<const graph::Node*>& roots) {
  std::vector<codegen::KernelLaunch> r;
  for (codegen::KernelLaunch& l : codegen::schedule(roots, {}).launches)
    if (l.kernel.attention) r.push_back(std::move(l));
  return r;
}

// The composite logsumexp (graph::build::attention_logsumexp) of the same operands.
Tensor lse_composite(const Tensor& q, const Tensor& k, const Tensor& mask, double scale, bool causal) {
  std::vector<Tensor> in{q, k};
  if (mask.defined()) in.push_back(mask);
  return detail::result_of(
      graph::build::attention_logsumexp(q.node(), k.node(), mask.defined() ? mask.node() : nullptr, scale, causal), in);
}

// The mask of case c at q's rank (leading 1s), as attention_node takes it.
Tensor full_rank_mask(const Case& c, const Operands& o) {
  if (!o.mask.defined() || o.mask.dim() == o.q.dim()) return o.mask;
  IntList s(static_cast<size_t>(o.q.dim() - o.mask.dim()), 1);
  for (int64_t d : o.mask.shape()) s.push_back(d);
  (void)c;
  return o.mask.reshape(s);
}

} // namespace

// The forward kernel stores each row's logsumexp with the output (one kernel, two outputs); it
// matches the composite logsumexp within (2S + 8 ceil(S/64) + 16 + 4 E scale max sum_d |q_d k_d| +
// |lse|) eps, the f64 interpreter within 1e-12, is -inf exactly on a fully masked row, and T need not
// divide the blocks (the cases' 70, 97, 130 keys).
TEST(AttentionBackward, TheForwardStoresTheRowLogsumexp) {
  FusionSetting on(true);
  for (DType dtype : {kFloat32, kFloat64}) {
    const double eps = epsilon_of(dtype);
    uint64_t seed = 1800;
    for (const Case& c : backward_cases()) {
      const Operands o = operands(c, dtype, seed += 10);
      const Tensor mask = full_rank_mask(c, o);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
      const Tensor out = attention_node(o.q, o.k, o.v, mask, scale, c.causal);
      const Tensor lse = lse_node(o.q, o.k, o.v, mask, scale, c.causal);
      const std::vector<codegen::KernelLaunch> kernels = attention_launches({out.node().get(), lse.node().get()});
      ASSERT_EQ(kernels.size(), 1u) << c.what;
      EXPECT_EQ(kernels[0].outputs.size(), 2u) << c.what;
      EXPECT_GE(kernels[0].kernel.attention->out, 0);
      EXPECT_GE(kernels[0].kernel.attention->lse, 0);
      realize({out, lse});
      const std::vector<double> got = values(lse), want = values(lse_composite(o.q, o.k, mask, scale, c.causal));
      const std::vector<double> q = values(o.q), k = values(o.k);
      double dot = 0; // the largest sum_d |q_id k_jd| of the case
      for (int64_t b = 0, batch = o.q.numel() / (c.L * c.E); b < batch; ++b)
        for (int64_t i = 0; i < c.L; ++i) dot = std::max(dot, max_abs_dot(c, q, k, b, i));
      const double blocks = static_cast<double>((c.S + 63) / 64);
      const graph::InterpretResult exact = graph::interpret_one(lse.node());
      ASSERT_EQ(got.size(), want.size());
      int masked_rows = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_FALSE(std::isnan(got[i])) << c.what << " [" << i << "]";
        if (std::isinf(want[i])) {
          EXPECT_EQ(got[i], -kInf) << c.what << " [" << i << "]";
          EXPECT_EQ(exact.values[i], -kInf) << c.what << " [" << i << "]";
          ++masked_rows;
          continue;
        }
        const double bound = (2.0 * static_cast<double>(c.S) + 8 * blocks + 16 + 4 * static_cast<double>(c.E) * scale * dot +
                              std::fabs(want[i])) * eps;
        EXPECT_NEAR(got[i], want[i], bound) << c.what << " [" << i << "]";
        if (dtype == kFloat64) {
          EXPECT_NEAR(got[i], exact.values[i], 1e-12 * std::max(1.0, std::fabs(exact.values[i]))) << c.what;
        }
      }
      // rows 0, 3, 6, ... of a mask with the query dim see no key (operands())
      if (c.mask != 0 && c.mask_shape[c.mask_shape.size() - 2] == c.L) EXPECT_GT(masked_rows, 0) << c.what;
    }
  }
}

// Without its Attention sibling the logsumexp is a forward kernel of its own that keeps no output
// rows (out -1), with the same bits as the one stored with the output, on 1 and 2 threads.
TEST(AttentionBackward, TheLogsumexpAloneHasTheSameBits) {
  FusionSetting on(true);
  for (const Case& c : {backward_cases()[0], backward_cases()[1], backward_cases()[3], backward_cases()[8]}) {
    const Operands o = operands(c, kFloat32, 1900);
    const Tensor mask = full_rank_mask(c, o);
    const Tensor alone = lse_node(o.q, o.k, o.v, mask, 0.3, c.causal);
    const std::vector<codegen::KernelLaunch> k = attention_launches({alone.node().get()});
    ASSERT_EQ(k.size(), 1u) << c.what;
    EXPECT_EQ(k[0].outputs.size(), 1u) << c.what;
    EXPECT_LT(k[0].kernel.attention->out, 0) << c.what;
    std::vector<double> one, two;
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 1);
      one = values(lse_node(o.q, o.k, o.v, mask, 0.3, c.causal));
    }
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 2);
      const Tensor out = attention_node(o.q, o.k, o.v, mask, 0.3, c.causal), lse = lse_node(o.q, o.k, o.v, mask, 0.3, c.causal);
      realize({out, lse});
      two = values(lse);
    }
    EXPECT_EQ(one, two) << c.what;
  }
}

// The AttentionLse node's rules (the composite logsumexp's, differentiated): gradcheck in f64, first
// and second order, with a float mask, causal, and q = k; forward mode against the reverse mode.
TEST(AttentionBackward, GradcheckInF64OfTheLogsumexp) {
  FusionSetting on(true);
  const Tensor q = randn({2, 5, 3}, 61, kFloat64), k = randn({2, 7, 3}, 62, kFloat64), v = randn({2, 7, 2}, 63, kFloat64);
  const Tensor add_mask = randn({1, 5, 7}, 64, kFloat64), w = randn({2, 5}, 65, kFloat64);
  auto check = [](const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                  const char* what) {
    const GradcheckResult r = gradcheck(f, in);
    EXPECT_TRUE(r.ok) << what << ": " << r.report;
  };
  check([&](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{lse_node(x[0], x[1], x[2], x[3].expand({2, 5, 7}), 0.6, false)};
  }, {q, k, v, add_mask}, "first order, float mask");
  check([&](const std::vector<Tensor>& x) {
    const Tensor l = lse_node(x[0], x[1], x[2], {}, 0.6, true);
    return grad({(l * l * w).sum()}, {x[0], x[1]}, {}, false, true);
  }, {q, k, v}, "second order, causal");
  const Tensor x = randn({6, 4}, 66, kFloat64);
  check([](const std::vector<Tensor>& t) {
    const Tensor l = lse_node(t[0], t[0], t[0], {}, 0.5, true);
    return grad({(l * l).sum()}, {t[0]}, {}, false, true);
  }, {x}, "second order, q = k = v");
  const Tensor tq = randn({2, 5, 3}, 67, kFloat64), tk = randn({2, 7, 3}, 68, kFloat64);
  std::vector<Tensor> in{q.detach().requires_grad_(), k.detach().requires_grad_()};
  const std::vector<Tensor> g = grad({(lse_node(in[0], in[1], v, {}, 0.6, true) * w).sum()}, in);
  const auto f = [&](const std::vector<Tensor>& t) { return std::vector<Tensor>{(lse_node(t[0], t[1], v, {}, 0.6, true) * w).sum()}; };
  const double lhs = ((g[0] * tq).sum() + (g[1] * tk).sum()).item<double>();
  const double rhs = jvp(f, {q, k}, {tq, tk}).second[0].item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::fabs(rhs)));
}

// An Attention node's gradient reads the forward's logsumexp: the backward kernel's lse operand is
// an AttentionLse node, which a compiled step computes in the forward's kernel (one forward kernel
// with two outputs, one backward kernel).
TEST(AttentionBackward, TheBackwardReadsTheForwardsLogsumexp) {
  FusionSetting on(true);
  const Case c = backward_cases()[1];
  const Operands o = operands(c, kFloat32, 2000);
  const Tensor w = randn(with(c.batch, c.L, c.Ev), 2001, kFloat32);
  std::vector<Tensor> in{o.q.detach().requires_grad_(), o.k.detach().requires_grad_(), o.v.detach().requires_grad_()};
  const std::vector<Tensor> g = grad({(sdpa(in[0], in[1], in[2], {}, 0, c.causal, 0.5) * w).sum()}, in);
  std::vector<const graph::Node*> roots;
  for (const Tensor& t : g) roots.push_back(t.node().get());
  const codegen::Schedule s = codegen::schedule(roots, {});
  int forward = 0, backward = 0;
  for (const codegen::KernelLaunch& l : s.launches) {
    if (!l.kernel.attention) continue;
    if (l.kernel.attention->backward) {
      ++backward;
      EXPECT_GE(l.kernel.attention->lse, 0);
      EXPECT_EQ(l.inputs[static_cast<size_t>(l.kernel.attention->lse)]->op, graph::OpKind::AttentionLse);
    } else {
      ++forward;
      EXPECT_EQ(l.outputs.size(), 2u);
    }
  }
  EXPECT_EQ(forward, 1);
  EXPECT_EQ(backward, 1);
}

// ---------------------------------------------------------------- dropout

namespace {

constexpr double kDropout = 0.3;

// scaled_dot_product_attention of case c with dropout kDropout, its seed the first of the sequence
// nn::manual_seed(seed) restarts: the fused kernel with fusion on, the composite with it off.
Tensor sdpa_dropout(const Operands& o, const Case& c, double scale, uint64_t seed, bool fused) {
  FusionSetting f(fused);
  nn::manual_seed(seed);
  return F::scaled_dot_product_attention(o.q, o.k, o.v, o.mask, kDropout, c.causal, scale);
}

// The seed sdpa_dropout(..., seed, ...) draws.
uint64_t dropout_seed(uint64_t seed) {
  nn::manual_seed(seed);
  return nn::next_seed();
}

} // namespace

// With dropout, the fused kernel draws the composite's keep-mask (rand of the weights' shape, the
// same counters) and multiplies the kept weights by 1 / (1 - p) as the composite does: the two agree
// within the bound of the forward scaled by 1 / (1 - p), where another mask would differ by O(max|v|);
// and dropout changes the result.
TEST(AttentionDropout, TheFusedKernelDrawsTheCompositesMask) {
  for (DType dtype : {kFloat32, kFloat64}) {
    const double eps = epsilon_of(dtype);
    double worst = 0;
    uint64_t seed = 3000;
    for (const Case& c : cases()) {
      const Operands o = operands(c, dtype, seed += 10);
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.E));
      const Tensor fused = sdpa_dropout(o, c, scale, seed, true);
      ASSERT_EQ(fused.node()->op, graph::OpKind::Attention) << c.what;
      const graph::build::AttentionDropout d = graph::build::attention_dropout(*fused.node());
      EXPECT_EQ(d.p, kDropout);
      EXPECT_EQ(d.seed, dropout_seed(seed));
      fused.realize();
      const Tensor composite = sdpa_dropout(o, c, scale, seed, false).realize();
      expect_within_bound(c, o, scale, fused, composite, eps / (1 - kDropout), worst);
      if (c.S > 1) EXPECT_NE(values(fused), values(attention(o, c.causal, scale))) << c.what;
    }
    std::printf("fused vs composite with dropout (%s): largest difference %.2f eps max|v|\n", dtype_name(dtype).data(), worst);
  }
}

// Forward and backward with dropout against the f64 interpreter (whose dropout factor is written
// separately, from graph/random.h).
TEST(AttentionDropout, ForwardAndBackwardMatchTheF64Interpreter) {
  FusionSetting on(true);
  uint64_t seed = 3300;
  for (const Case& c : backward_cases()) {
    const Operands o = operands(c, kFloat64, seed += 10);
    const graph::build::AttentionDropout d{kDropout, seed + 5};
    std::vector<Tensor> in{o.q.detach().requires_grad_(), o.k.detach().requires_grad_(), o.v.detach().requires_grad_()};
    const Tensor out = sdpa(in[0], in[1], in[2], o.mask, 0, c.causal, 0.7, d);
    const Tensor w = randn(with(c.batch, c.L, c.Ev), seed + 7, kFloat64);
    std::vector<Tensor> checked{out};
    for (const Tensor& g : grad({(out * w).sum()}, in)) checked.push_back(g);
    for (size_t t = 0; t < checked.size(); ++t) {
      const graph::InterpretResult want = graph::interpret_one(checked[t].node());
      const std::vector<double> got = values(checked[t]);
      ASSERT_EQ(got.size(), want.values.size());
      double m = 0;
      for (double x : want.values) m = std::isfinite(x) ? std::max(m, std::fabs(x)) : m;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want.values[i], 1e-12 * std::max(1.0, m)) << c.what << " output " << t << " [" << i << "]";
    }
  }
}

// The fused backward with dropout against the composite's (fusion off, the same seed): within the
// bound of the backward without dropout, scaled by 1 / (1 - p). With is_causal, which takes the fused
// pair at any size.
TEST(AttentionDropout, TheFusedBackwardMatchesTheComposite) {
  for (DType dtype : {kFloat32, kFloat64}) {
    const double eps = epsilon_of(dtype);
    double worst = 0;
    uint64_t seed = 3600;
    for (const Case& c : backward_cases()) {
      if (!c.causal) continue;
      const Operands o = operands(c, dtype, seed += 10);
      const Tensor w = randn(with(c.batch, c.L, c.Ev), seed + 7, dtype);
      auto grads = [&](bool fused) {
        std::vector<Tensor> in{o.q.detach().requires_grad_(), o.k.detach().requires_grad_(), o.v.detach().requires_grad_()};
        Operands x = o;
        x.q = in[0], x.k = in[1], x.v = in[2];
        const Tensor out = sdpa_dropout(x, c, 0.5, seed, fused);
        FusionSetting f(fused);
        std::vector<Tensor> g = grad({(out * w).sum()}, in);
        EXPECT_EQ(holds(g[0].node(), graph::OpKind::AttentionGrad), fused) << c.what;
        return g;
      };
      expect_gradients_within_bound(c, grads(true), grads(false), eps / (1 - kDropout), worst);
    }
    std::printf("fused vs composite backward with dropout (%s): largest difference %.2f eps max|G| / (1 - p)\n",
                dtype_name(dtype).data(), worst);
  }
}

// The node with dropout is a smooth function of q, k, v (the mask fixed by its seed): gradcheck of the
// fused forward and backward in f64, first and second order, a bool mask and a float one.
TEST(AttentionDropout, GradcheckInF64FirstAndSecondOrder) {
  FusionSetting on(true);
  const Tensor q = randn({2, 5, 3}, 81, kFloat64), k = randn({2, 7, 3}, 82, kFloat64), v = randn({2, 7, 2}, 83, kFloat64);
  const Tensor add_mask = randn({1, 5, 7}, 84, kFloat64);
  const graph::build::AttentionDropout d{kDropout, 85};
  auto check = [](const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& in,
                  const char* what) {
    const GradcheckResult r = gradcheck(f, in);
    EXPECT_TRUE(r.ok) << what << ": " << r.report;
  };
  check([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{attention_node(x[0], x[1], x[2], {}, 0.6, true, d)}; },
        {q, k, v}, "first order, causal");
  check([&](const std::vector<Tensor>& x) {
    const Tensor out = attention_node(x[0], x[1], x[2], x[3], 0.6, false, d);
    return grad({(out * out).sum()}, {x[0], x[1], x[2], x[3]}, {}, false, true);
  }, {q, k, v, add_mask}, "second order, float mask");
  // forward mode against reverse: <grad, t> = jvp
  const Tensor tq = randn({2, 5, 3}, 86, kFloat64), tk = randn({2, 7, 3}, 87, kFloat64), tv = randn({2, 7, 2}, 88, kFloat64);
  const Tensor w = randn({2, 5, 2}, 89, kFloat64);
  std::vector<Tensor> in{q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_()};
  const std::vector<Tensor> g = grad({(attention_node(in[0], in[1], in[2], {}, 0.6, true, d) * w).sum()}, in);
  const auto f = [&](const std::vector<Tensor>& t) {
    return std::vector<Tensor>{(attention_node(t[0], t[1], t[2], {}, 0.6, true, d) * w).sum()};
  };
  const double lhs = ((g[0] * tq).sum() + (g[1] * tk).sum() + (g[2] * tv).sum()).item<double>();
  const double rhs = jvp(f, {q, k, v}, {tq, tk, tv}).second[0].item<double>();
  EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::fabs(rhs)));
}

// p = 1 drops every weight, as PyTorch's dropout_p = 1 (it takes p in [0, 1]): the kernels' factor is
// 0, not 0 * 1 / (1 - p) = NaN, so the fused node, the composite and the f64 interpreter all give zeros,
// forward and backward (torch: F._scaled_dot_product_attention(q, k, v, None, 1.0, False, False)
// -> zeros, and q.grad, k.grad, v.grad zeros).
TEST(AttentionDropout, ProbabilityOneGivesZerosFusedOrNot) {
  auto expect_zeros = [](const Tensor& t, const std::string& what) {
    for (double x : values(t)) ASSERT_EQ(x, 0.0) << what;
    for (double x : graph::interpret_one(t.node()).values) ASSERT_EQ(x, 0.0) << what << " (interpreter)";
  };
  uint64_t seed = 4100;
  for (const Case& c : backward_cases()) {
    const Operands o = operands(c, kFloat64, seed += 10);
    for (bool fused : {true, false}) {
      FusionSetting f(fused);
      const Tensor out = F::scaled_dot_product_attention(o.q, o.k, o.v, o.mask, 1.0, c.causal, 0.5);
      ASSERT_EQ(out.node()->op == graph::OpKind::Attention, fused) << c.what;
      if (fused) { EXPECT_EQ(graph::build::attention_dropout(*out.node()).p, 1.0); }
      expect_zeros(out, c.what + (fused ? " fused" : " composite"));
    }
    std::vector<Tensor> in{o.q.detach().requires_grad_(), o.k.detach().requires_grad_(), o.v.detach().requires_grad_()};
    const Tensor w = randn(with(c.batch, c.L, c.Ev), seed + 7, kFloat64);
    const std::vector<Tensor> g = grad({(sdpa(in[0], in[1], in[2], o.mask, 0, c.causal, 0.5, {1.0, seed}) * w).sum()}, in);
    for (const Tensor& x : g) {
      ASSERT_TRUE(holds(x.node(), graph::OpKind::AttentionGrad)) << c.what;
      expect_zeros(x, c.what + " fused backward");
    }
  }
}

// The seed is a kernel parameter: a compiled step draws a fresh mask each call (one compile), and
// from the same point of the seed sequence the same mask as an eager call; one and two threads agree.
TEST(AttentionDropout, ACompiledStepDrawsAFreshMaskEachCall) {
  FusionSetting on(true);
  const Case c = cases()[1];
  const Operands o = operands(c, kFloat32, 3900);
  CompiledFunction step = compile([&](const std::vector<Tensor>& x) {
    return std::vector<Tensor>{F::scaled_dot_product_attention(x[0], x[1], x[2], {}, kDropout, c.causal, 0.5)};
  });
  nn::manual_seed(5);
  const std::vector<double> first = values(step({o.q, o.k, o.v})[0]), second = values(step({o.q, o.k, o.v})[0]);
  EXPECT_NE(first, second);
  nn::manual_seed(5);
  EXPECT_EQ(values(step({o.q, o.k, o.v})[0]), first);
  std::vector<double> eager_one, eager_two;
  {
    tbb::global_control g(tbb::global_control::max_allowed_parallelism, 1);
    nn::manual_seed(5);
    eager_one = values(F::scaled_dot_product_attention(o.q, o.k, o.v, {}, kDropout, c.causal, 0.5));
  }
  {
    tbb::global_control g(tbb::global_control::max_allowed_parallelism, 2);
    nn::manual_seed(5);
    eager_two = values(F::scaled_dot_product_attention(o.q, o.k, o.v, {}, kDropout, c.causal, 0.5));
  }
  EXPECT_EQ(eager_one, first);
  EXPECT_EQ(eager_two, first);
}

// A v with more batch points than q and k: the composite's weights (and its mask) have q's and k's
// batch dims only, so the composite runs.
TEST(AttentionDropout, AValueOfMoreBatchPointsRunsTheComposite) {
  FusionSetting on(true);
  const Tensor q = randn({1, 4, 3}, 91), k = randn({1, 6, 3}, 92), v = randn({2, 6, 2}, 93);
  EXPECT_NE(F::scaled_dot_product_attention(q, k, v, {}, kDropout).node()->op, graph::OpKind::Attention);
  EXPECT_EQ(F::scaled_dot_product_attention(q, k, v).node()->op, graph::OpKind::Attention);
}

// The kernel IR text of attention kernels with dropout (forward and backward) holds the factor (its
// own "dropout" line) and parses back to a kernel that prints the same text and gets the same name.
TEST(AttentionDropout, TheKernelTextParsesBack) {
  const graph::build::AttentionDropout d{kDropout, 17};
  std::vector<Tensor> in{randn({2, 70, 8}, 61).requires_grad_(), randn({2, 90, 8}, 62).requires_grad_(),
                         randn({2, 90, 5}, 63).requires_grad_()};
  const Tensor out = attention_node(in[0], in[1], in[2], {}, 0.5, true, d);
  const std::vector<Tensor> g = grad({(out * out).sum()}, in);
  const codegen::Schedule s = codegen::schedule({g[0].node().get(), g[1].node().get(), g[2].node().get()}, {});
  int kernels = 0;
  for (const codegen::KernelLaunch& l : s.launches) {
    if (!l.kernel.attention) continue;
    ++kernels;
    ASSERT_TRUE(l.kernel.attention->dropout);
    const std::string text = codegen::print_kernel(l.kernel);
    EXPECT_NE(text.find("\n  dropout "), std::string::npos) << text;
    codegen::Kernel k = codegen::parse_kernel(text);
    EXPECT_EQ(codegen::print_kernel(k), text);
    ASSERT_TRUE(k.attention && k.attention->dropout);
    codegen::finalize(k);
    EXPECT_EQ(k.name, l.kernel.name);
    EXPECT_EQ(l.seed_params.size(), 1u) << text; // the seed, which replays redraw
  }
  EXPECT_EQ(kernels, 2); // the forward (out and lse) and the backward (dq, dk, dv)
}

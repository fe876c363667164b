// Updates in place: a compiled step writes a parameter's or an optimizer slot's new value over its
// old one when nothing else can reach the old one (frontend/src/compile.cpp, donate();
// runtime::Donations; codegen/in_place.h). What is tested: the kernel-level rule on kernel IR text
// (which loads and stores allow it), that training steps do it (the storages stay put), that the
// results are bitwise those of the same steps without it, and every case where it must not happen:
// another tensor holds the old value, a later kernel reads it, an index check could fail after it.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codegen/in_place.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"

namespace {

using namespace kiln;

// ---------------------------------------------------------------- the rule, on kernel IR

// An SGD update p - lr * g over [p0, p1]: p (b0) read at i0 * p2 + i1, stored (b2) at i0 * p4 + i1.
constexpr const char* kUpdate = R"(kernel k_update(b0: f32, b1: f32, out b2: f32; params 5)
  domain [p0, p1]
    v0: i64 = mul(i0, p2)
    v1: i64 = add(v0, i1)
    v2: f32 = load b0(v1)
    v3: f32 = load b1(v1)
    v4: f32 = mul(v3, p3:f32)
    v5: f32 = sub(v2, v4)
    v6: i64 = mul(i0, p4)
    v7: i64 = add(v6, i1)
    store b2[v7] = v5
)";

std::vector<int64_t> params(int64_t rows, int64_t cols, int64_t in_stride, int64_t out_stride) {
  return {rows, cols, in_stride, 0, out_stride};
}

TEST(InPlaceRule, AnUpdateReadingAndWritingTheSameElement) {
  const codegen::Kernel k = codegen::parse_kernel(kUpdate);
  EXPECT_TRUE(codegen::may_write_in_place(k, 0, 2, params(4, 8, 8, 8)));
  // the gradient (b1) is read at the same offsets too: it could take the output as well
  EXPECT_TRUE(codegen::may_write_in_place(k, 1, 2, params(4, 8, 8, 8)));
}

TEST(InPlaceRule, NotWhereTheLayoutsDiffer) {
  const codegen::Kernel k = codegen::parse_kernel(kUpdate);
  // p read with row stride 16 (a slice of a wider buffer), the output packed with stride 8
  EXPECT_FALSE(codegen::may_write_in_place(k, 0, 2, params(4, 8, 16, 8)));
}

TEST(InPlaceRule, NotWhereTwoPointsWriteOneElement) {
  const codegen::Kernel k = codegen::parse_kernel(kUpdate);
  // output row stride 0: every row writes the same 8 elements, and a later row would read an
  // element an earlier one overwrote
  EXPECT_FALSE(codegen::may_write_in_place(k, 0, 2, params(4, 8, 0, 0)));
  // rows overlapping by half
  EXPECT_FALSE(codegen::may_write_in_place(k, 0, 2, params(4, 8, 4, 4)));
  // one row: the stride does not matter
  EXPECT_TRUE(codegen::may_write_in_place(k, 0, 2, params(1, 8, 0, 0)));
}

TEST(InPlaceRule, NotWhereTheInputIsReadTransposed) {
  const codegen::Kernel k = codegen::parse_kernel(R"(kernel k_t(b0: f32, out b1: f32; params 4)
  domain [p0, p1]
    v0: i64 = mul(i1, p2)
    v1: i64 = add(v0, i0)
    v2: f32 = load b0(v1)
    v3: f32 = mul(v2, 2:f32)
    v4: i64 = mul(i0, p3)
    v5: i64 = add(v4, i1)
    store b1[v5] = v3
)");
  EXPECT_FALSE(codegen::may_write_in_place(k, 0, 1, {8, 8, 8, 8}));
}

TEST(InPlaceRule, AnotherStoreMayShareTheLoadButNotReadElsewhere) {
  // an optimizer's slot and parameter stored by one kernel: both stores use the one load of b0
  const codegen::Kernel two = codegen::parse_kernel(R"(kernel k_two(b0: f32, out b1: f32, out b2: f32; params 1)
  domain [p0]
    v0: f32 = load b0(i0)
    v1: f32 = mul(v0, 2:f32)
    store b1[i0] = v1
    v2: f32 = add(v0, 1:f32)
    store b2[i0] = v2
)");
  EXPECT_TRUE(codegen::may_write_in_place(two, 0, 1, {16}));
  EXPECT_TRUE(codegen::may_write_in_place(two, 0, 2, {16}));
  // the store to b2 reads the next element of b0, which the next point overwrites in b1
  const codegen::Kernel next = codegen::parse_kernel(R"(kernel k_next(b0: f32, out b1: f32, out b2: f32; params 1)
  domain [p0]
    v0: f32 = load b0(i0)
    v1: f32 = mul(v0, 2:f32)
    store b1[i0] = v1
    v2: i64 = add(i0, 1:i64)
    v3: f32 = load b0(v2)
    v4: f32 = add(v3, v0)
    store b2[i0] = v4
)");
  EXPECT_FALSE(codegen::may_write_in_place(next, 0, 1, {16}));
  EXPECT_FALSE(codegen::may_write_in_place(next, 0, 2, {16})); // its own load of b0 is one element ahead
}

TEST(InPlaceRule, NotWhereAReductionReadsTheInput) {
  // x - max(x) along rows: the row's maximum reads elements other points overwrite
  const codegen::Kernel row = codegen::parse_kernel(R"(kernel k_row(b0: f32, out b1: f32; params 2)
  domain [p0]
  reduce red0 = max over [p1]:
    v0: i64 = mul(i0, p1)
    v1: i64 = add(v0, r0)
    v2: f32 = load b0(v1)
    yield v2
  map [p1]:
    v3: i64 = mul(i0, p1)
    v4: i64 = add(v3, m0)
    v5: f32 = load b0(v4)
    v6: f32 = sub(v5, red0)
    store b1[v4] = v6
)");
  EXPECT_FALSE(codegen::may_write_in_place(row, 0, 1, {4, 8}));
}

TEST(InPlaceRule, AMapOverRowsWithTheInputReadOnlyAtTheStore) {
  // x * rsqrt(sum(y^2)) along rows, x (b0) read only where the output is written
  const codegen::Kernel k = codegen::parse_kernel(R"(kernel k_scale(b0: f32, b1: f32, out b2: f32; params 2)
  domain [p0]
  reduce red0 = sum over [p1]:
    v0: i64 = mul(i0, p1)
    v1: i64 = add(v0, r0)
    v2: f32 = load b1(v1)
    v3: f32 = mul(v2, v2)
    yield v3
  map [p1]:
    v4: i64 = mul(i0, p1)
    v5: i64 = add(v4, m0)
    v6: f32 = load b0(v5)
    v7: f32 = rsqrt(red0)
    v8: f32 = mul(v6, v7)
    store b2[v5] = v8
)");
  EXPECT_TRUE(codegen::may_write_in_place(k, 0, 2, {4, 8}));
  EXPECT_FALSE(codegen::may_write_in_place(k, 1, 2, {4, 8})); // b1 feeds the reduction
}

// ---------------------------------------------------------------- training steps

// A 3-layer MLP's parameters (requires grad), from `seed`.
std::vector<Tensor> mlp_params(uint64_t seed) {
  std::vector<Tensor> ps;
  const int64_t sizes[] = {24, 32, 16, 5};
  for (int l = 0; l < 3; ++l) {
    Tensor w = (randn({sizes[l], sizes[l + 1]}, seed + 2 * static_cast<uint64_t>(l)) * 0.3).realize();
    ps.push_back(w.requires_grad_());
    Tensor b = zeros({sizes[l + 1]});
    ps.push_back(b.requires_grad_());
  }
  return ps;
}

Tensor mlp_loss(const std::vector<Tensor>& ps, const Tensor& x, const Tensor& y) {
  Tensor h = x;
  for (size_t l = 0; l < 3; ++l) {
    h = matmul(h, ps[2 * l]) + ps[2 * l + 1];
    if (l < 2) h = relu(h);
  }
  return nn::functional::cross_entropy(h, y);
}

std::vector<float> values(const Tensor& t) { return t.detach().to_vector<float>(); }

// Bitwise equality of two float vectors (EXPECT_EQ on floats would let -0 == 0 pass).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Training {
  std::vector<std::vector<float>> losses, params;
  std::vector<size_t> in_place; // per step: outputs computed in place
};

// `steps` compiled SGD steps (functional: gradients from grad(), as a JAX user writes the step;
// otherwise loss.backward() and optim::SGD with momentum); with `hold`, each step keeps its old
// parameter values alive (a detached copy), which rules out the update in place.
Training train(bool functional, bool hold, int steps, int64_t batch) {
  std::vector<Tensor> ps = mlp_params(3);
  optim::SGD opt(ps, {.lr = 0.05, .momentum = 0.9});
  CompiledFunction step = compile([&](const std::vector<Tensor>& a) {
    if (!functional) {
      opt.zero_grad();
      Tensor loss = mlp_loss(ps, a[0], a[1]);
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss.detach()};
    }
    Tensor loss = mlp_loss(ps, a[0], a[1]);
    const std::vector<Tensor> gs = grad({loss}, ps);
    NoGradGuard no_grad;
    for (size_t i = 0; i < ps.size(); ++i) ps[i].assign(ps[i] - gs[i] * 0.05);
    return std::vector<Tensor>{loss.detach()};
  });
  Training run;
  for (int s = 0; s < steps; ++s) {
    const Tensor x = randn({batch, 24}, 100 + static_cast<uint64_t>(s)).realize();
    const Tensor y = (rand({batch}, 200 + static_cast<uint64_t>(s)) * 5.0).to(kInt64).realize();
    std::vector<Tensor> held;
    std::vector<std::vector<float>> before;
    if (hold)
      for (const Tensor& p : ps) {
        held.push_back(p.detach());
        before.push_back(values(p));
      }
    const size_t in_place = runtime::executor_stats().in_place;
    run.losses.push_back(values(step({x, y})[0]));
    run.in_place.push_back(runtime::executor_stats().in_place - in_place);
    for (size_t i = 0; i < held.size(); ++i) EXPECT_TRUE(same_bits(values(held[i]), before[i])) << "step " << s << " wrote over a held value";
  }
  for (const Tensor& p : ps) run.params.push_back(values(p));
  return run;
}

void expect_same(const Training& a, const Training& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t s = 0; s < a.losses.size(); ++s) EXPECT_TRUE(same_bits(a.losses[s], b.losses[s])) << "loss of step " << s;
  for (size_t i = 0; i < a.params.size(); ++i) EXPECT_TRUE(same_bits(a.params[i], b.params[i])) << "parameter " << i;
}

TEST(InPlace, AFunctionalSgdStepUpdatesEveryParameterInPlaceWithTheSameBits) {
  for (const int64_t batch : {1, 64}) { // batch 1: elementwise updates; 64: in the weight gradients' GEMM epilogues
    const Training free = train(true, false, 4, batch), held = train(true, true, 4, batch);
    EXPECT_EQ(free.in_place.back(), 6u) << "batch " << batch; // the six parameters
    EXPECT_EQ(held.in_place.back(), 0u) << "batch " << batch;
    expect_same(free, held);
  }
}

TEST(InPlace, AnOptimizerStepUpdatesParametersAndMomentumInPlaceWithTheSameBits) {
  const Training free = train(false, false, 4, 16), held = train(false, true, 4, 16);
  EXPECT_EQ(free.in_place.back(), 18u); // six parameters, their momentum buffers and their gradients
  EXPECT_EQ(held.in_place.back(), 12u); // momentum and gradients: only the parameters are held
  expect_same(free, held);
}

// A gradient the user holds (g = p.grad()) keeps its values through the next step; the others
// are written in place.
TEST(InPlace, AHeldGradientKeepsItsValues) {
  Tensor w = randn({16, 8}, 4).realize(), v = randn({16, 8}, 5).realize();
  w.requires_grad_();
  v.requires_grad_();
  optim::SGD opt({w, v}, {.lr = 0.1});
  CompiledFunction step = compile([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    Tensor loss = (matmul(a[0], w) * matmul(a[0], v)).sum();
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  for (int s = 0; s < 3; ++s) step({randn({4, 16}, 10 + static_cast<uint64_t>(s)).realize()});
  const Tensor g = w.grad();
  const std::vector<float> before = values(g);
  const size_t in_place = runtime::executor_stats().in_place;
  step({randn({4, 16}, 20).realize()});
  EXPECT_EQ(runtime::executor_stats().in_place - in_place, 3u); // w, v and v's gradient
  EXPECT_TRUE(same_bits(values(g), before));
  EXPECT_FALSE(same_bits(values(w.grad()), before));
}

TEST(InPlace, TheStorageStaysPutAcrossSteps) {
  Tensor w = randn({64, 64}, 1).realize();
  w.requires_grad_();
  CompiledFunction step = compile([&](const std::vector<Tensor>& a) {
    Tensor loss = (matmul(a[0], w)).square().mean();
    const Tensor g = grad({loss}, {w})[0];
    NoGradGuard no_grad;
    w.assign(w - g * 0.1);
    return std::vector<Tensor>{loss.detach()};
  });
  const Tensor x = randn({8, 64}, 2).realize();
  step({x});
  step({x});
  const void* at = w.node()->realized()->data();
  for (int s = 0; s < 3; ++s) step({x});
  EXPECT_EQ(w.node()->realized()->data(), at);
}

// Gradients accumulated over micro-batches (no zero_grad between them): each step adds to the
// old gradient, which it reads at the element it writes, so the sum goes in place too; the
// results are those of the same steps run eagerly.
TEST(InPlace, AccumulatedGradientsGiveTheEagerBits) {
  auto make = [] {
    Tensor w = randn({12, 6}, 6).realize();
    w.requires_grad_();
    return w;
  };
  Tensor wc = make(), we = make();
  auto accumulate = [](Tensor& w, const Tensor& x) {
    Tensor loss = matmul(x, w).square().mean();
    loss.backward();
    return loss.detach();
  };
  CompiledFunction step = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{accumulate(wc, a[0])}; });
  size_t in_place = 0;
  for (int s = 0; s < 5; ++s) {
    const Tensor x = randn({3, 12}, 30 + static_cast<uint64_t>(s)).realize();
    const size_t before = runtime::executor_stats().in_place;
    const std::vector<float> got = values(step({x})[0]);
    in_place += runtime::executor_stats().in_place - before;
    const std::vector<float> want = values(accumulate(we, x));
    EXPECT_TRUE(same_bits(got, want)) << "step " << s;
    EXPECT_TRUE(same_bits(values(wc.grad()), values(we.grad()))) << "step " << s;
  }
  EXPECT_GE(in_place, 2u); // the gradient, once the step replays with one
}

// Steps that read a parameter's old value besides updating it: wherever the schedule puts that
// read, the results are those of the same step run eagerly (no compile()).
TEST(InPlace, OldValuesReadAfterTheUpdateAreTheOldValues) {
  using Body = std::function<Tensor(Tensor&)>;
  const std::vector<std::pair<std::string, Body>> bodies = {
      {"old value transposed in a product after the update",
       [](Tensor& p) {
         const Tensor old = p * 1.0;
         p.assign(p * 0.5 + 1.0);
         return matmul(old.t(), p).sum();
       }},
      {"old value summed along rows after the update",
       [](Tensor& p) {
         const Tensor old = p.detach();
         p.assign(p - 0.25);
         return (old.sum({1}) * p.sum({1})).sum();
       }},
      {"old value returned",
       [](Tensor& p) {
         const Tensor old = p * 1.0;
         p.assign(p.t() * 2.0);
         return old.sum() + p.sum();
       }},
  };
  for (const auto& [what, body] : bodies) {
    Tensor compiled = randn({6, 6}, 5).realize(), eager = randn({6, 6}, 5).realize();
    CompiledFunction f = compile([&](const std::vector<Tensor>&) { return std::vector<Tensor>{body(compiled)}; });
    for (int s = 0; s < 4; ++s) {
      const std::vector<float> got = values(f({})[0]), want = values(body(eager));
      EXPECT_TRUE(same_bits(got, want)) << what << ", step " << s;
      EXPECT_TRUE(same_bits(values(compiled), values(eager))) << what << ", step " << s;
    }
  }
}

// The plan's own rule, with the plan built directly: the updated value's kernel runs first and a
// later kernel (a product with the old value transposed) reads the old value, so the update
// must not go in place, whatever was donated.
TEST(InPlace, NotWhenALaterKernelReadsTheOldValue) {
  const Tensor start = randn({8, 8}, 9).realize();
  auto run = [&](bool donate) {
    const Tensor p(graph::make_input(kFloat32, {8, 8}, nullptr));
    const Tensor updated = p * 0.5, later = matmul(p.t(), updated);
    const runtime::Plan plan = runtime::make_plan({updated.node(), later.node()});
    std::vector<float> copy = values(start); // a storage of the caller's own, given up when `donate`
    const Tensor bound = from_vector(copy, {8, 8}).realize();
    runtime::Bindings b{{p.node().get(), bound.node()->realized()}};
    runtime::Donations d;
    if (donate) d.emplace_back(p.node().get(), 0); // `updated`, the plan's first output
    const size_t in_place = runtime::executor_stats().in_place;
    const auto out = runtime::execute(plan, b, {}, {}, d);
    EXPECT_EQ(runtime::executor_stats().in_place, in_place);
    const auto* v = static_cast<const float*>(out[1]->data());
    return std::vector<float>(v, v + 64);
  };
  EXPECT_TRUE(same_bits(run(true), run(false)));
}

// A step whose kernels check indices (an embedding lookup): the update in place runs after every
// checking kernel and after their verdict is read, so a bad index fails the step with the
// parameters as they were (without that read, the update would have run: this test fails).
TEST(InPlace, AFailedIndexCheckLeavesTheParametersAsTheyWere) {
  nn::manual_seed(1);
  nn::Embedding emb(10, 4);
  std::vector<Tensor> ps = emb.parameters();
  CompiledFunction step = compile([&](const std::vector<Tensor>& a) {
    Tensor loss = emb.forward(a[0]).square().mean();
    const std::vector<Tensor> gs = grad({loss}, ps);
    NoGradGuard no_grad;
    for (size_t i = 0; i < ps.size(); ++i) ps[i].assign(ps[i] - gs[i] * 0.1);
    return std::vector<Tensor>{loss.detach()};
  });
  const Tensor good = from_vector<int64_t>({1, 2, 3}), bad = from_vector<int64_t>({1, 12, 3});
  step({good});
  const size_t in_place = runtime::executor_stats().in_place;
  step({good});
  EXPECT_EQ(runtime::executor_stats().in_place - in_place, 1u); // after every check: the weight in place
  const std::vector<float> before = values(ps[0]);
  EXPECT_THROW(step({bad}), Error);
  EXPECT_TRUE(same_bits(values(ps[0]), before));
}

} // namespace

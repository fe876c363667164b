// In-place methods (frontend/src/inplace.cpp): values and gradients against torch 1.13 (the table
// tests/pytorch_inplace_table.inc from tests/tools/pytorch_inplace_table.py, and values printed by the same calls in
// /usr/bin/python3 with torch 1.13), gradients through a recorded in-place op, PyTorch's errors (a
// grad-requiring leaf, dtype, shape) and kiln's view rule, two handles on one tensor, and compile() replay of
// in-place updates. The error tests keep each expect_error_at call on one line (__LINE__ is the call's line).

#include <gtest/gtest.h>

#include <vector>

#include "kiln/kiln.h"
#include "tests/call_table.h"
#include "tests/error_of.h"

namespace {

using namespace kiln;
using kiln::test::expect_error_at;

Tensor vec(std::vector<float> v) { return from_vector(v); }

const std::vector<test::Case> kCases = {
#include "tests/pytorch_inplace_table.inc"
};

using V = const std::vector<Tensor>&;

// The kiln calls of the table (tests/tools/pytorch_inplace_table.py): each on the non-leaf x * 1.
std::map<std::string, test::Call> table_calls() {
  auto one = [](const Tensor& t) { return std::vector<Tensor>{t}; };
  auto self = [](const Tensor& x) { return x * 1; };
  std::map<std::string, test::Call> m;
  m["add_alpha"] = [=](V x) { return one(self(x[0]).add_(x[1], 2.5)); };
  m["sub_scalar"] = [=](V x) { return one(self(x[0]).sub_(1.5, 2)); };
  m["mul_"] = [=](V x) { return one(self(x[0]).mul_(x[1])); };
  m["div_"] = [=](V x) { return one(self(x[0]).div_(x[1])); };
  m["pow_"] = [=](V x) { return one(self(x[0]).pow_(3)); };
  m["sqrt_"] = [=](V x) { return one(self(x[0]).neg_().abs_().add_(0.5).sqrt_()); };
  m["log_"] = [=](V x) { return one(self(x[0]).abs_().add_(0.5).log_()); };
  m["exp_"] = [=](V x) { return one(self(x[0]).exp_()); };
  m["tanh_"] = [=](V x) { return one(self(x[0]).tanh_()); };
  m["sigmoid_"] = [=](V x) { return one(self(x[0]).sigmoid_()); };
  m["clamp_"] = [=](V x) { return one(self(x[0]).clamp_(-0.5, 0.7)); };
  m["relu_"] = [=](V x) { return one(self(x[0]).relu_()); };
  m["copy_"] = [=](V x) { return one(self(x[0]).copy_(x[1])); };
  m["masked_fill_"] = [=](V x) { return one(self(x[0]).masked_fill_(x[1], 2.5)); };
  m["index_add_"] = [=](V x) { return one(self(x[0]).index_add_(0, x[1], x[2], 0.5)); };
  m["index_copy_"] = [=](V x) { return one(self(x[0]).index_copy_(1, x[1], x[2])); };
  m["index_put_acc"] = [=](V x) { return one(self(x[0]).index_put_({x[1]}, x[2], true)); };
  m["scatter_"] = [=](V x) { return one(self(x[0]).scatter_(1, x[1], x[2])); };
  m["scatter_add_"] = [=](V x) { return one(self(x[0]).scatter_add_(0, x[1], x[2])); };
  m["index_fill_"] = [=](V x) { return one(self(x[0]).index_fill_(1, x[1], -1.0)); };
  m["zero_then_add_"] = [=](V x) { return one(self(x[0]).zero_().add_(x[1])); };
  return m;
}

TEST(InPlaceMethods, TableMatchesTorch) {
  test::expect_call_table(kCases, table_calls());
  test::expect_every_call_used(kCases, table_calls());
}

TEST(InPlaceMethods, ValuesMatchTorch) {
  Tensor x = vec({1, -2, 3, 4});
  // torch: x.add_(torch.tensor([1.,1,1,1]), alpha=2).mul_(0.5).sub_(1).clamp_(-1, 2)
  x.add_(vec({1, 1, 1, 1}), 2).mul_(0.5).sub_(1).clamp_(-1, 2);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0.5, -1, 1.5, 2}));
  x.neg_().abs_().pow_(2).div_(2);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0.125, 0.5, 1.125, 2}));
  Tensor m = from_vector(std::vector<bool>{true, false, false, true});
  x.masked_fill_(m, 7).clamp_min_(1).clamp_max_(5);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{5, 1, 1.125, 5}));
  x.index_fill_(0, from_vector(std::vector<int64_t>{1}), -3).relu_();
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{5, 0, 1.125, 5}));
  x.index_add_(0, from_vector(std::vector<int64_t>{0, 0}), vec({1, 2}), 2);
  x.scatter_add_(0, from_vector(std::vector<int64_t>{3}), vec({1}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{11, 0, 1.125, 6}));
  x.index_put_({from_vector(std::vector<int64_t>{1})}, vec({9}), true)
      .scatter_(0, from_vector(std::vector<int64_t>{2}), 4);
  x.index_copy_(0, from_vector(std::vector<int64_t>{0}), vec({1}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 9, 4, 6}));
  x.sqrt_().log_().exp_();
  const std::vector<float> torch_sqrt{1.0, 3.0, 2.0, 2.4494898319244385};
  for (size_t k = 0; k < 4; ++k) EXPECT_NEAR(x.to_vector<float>()[k], torch_sqrt[k], 1e-6) << k;
  x.fill_(0.25).sigmoid_().tanh_();
  EXPECT_NEAR(x.to_vector<float>()[2], 0.5095905661582947, 1e-6);
  x.zero_();
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
}

// clang-format off
TEST(InPlaceMethods, DtypeIsKeptAndCastsFollowTorch) {
  Tensor i = from_vector(std::vector<int64_t>{1, 2, 3});
  i.add_(2).mul_(3); // integers stay integers
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{9, 12, 15}));
  i.copy_(vec({1.5, 2.7, -3.9})); // copy_ converts (truncates), as torch
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, -3}));
  i.fill_(2.9); // fill_ converts too
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 2}));
  Tensor f = zeros({3}, DType::Float64);
  f.add_(vec({1, 2, 3})); // f32 into f64: kept f64
  EXPECT_EQ(f.dtype(), DType::Float64);
  // torch: "result type Float can't be cast to the desired output type Long"
  expect_error_at([&] { i.add_(0.5); }, __FILE__, __LINE__, "add_", {"result type Float can't be cast to the desired output type Long"});
  expect_error_at([&] { i.mul_(vec({1, 2, 3})); }, __FILE__, __LINE__, "mul_", {"can't be cast to the desired output type Long"});
  expect_error_at([&] { i.div_(2); }, __FILE__, __LINE__, "div_", {"result type Float can't be cast"});
}

TEST(InPlaceMethods, OtherMustBroadcastToSelf) {
  Tensor x = zeros({2, 3});
  x.add_(vec({1, 2, 3})).copy_(vec({4, 5, 6}));
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{4, 5, 6, 4, 5, 6}));
  Tensor y = zeros({3});
  // torch: "output with shape [3] doesn't match the broadcast shape [2, 3]"
  expect_error_at([&] { y.add_(ones({2, 3})); }, __FILE__, __LINE__, "add_", {"output with shape [3] doesn't match the broadcast shape [2, 3]"});
  expect_error_at([&] { y.fill_(ones({1})); }, __FILE__, __LINE__, "fill_", {"0-dimension value tensor"});
  EXPECT_EQ(y.shape(), (IntList{3}));
}

TEST(InPlaceMethods, RecordedOnNonLeavesGradientsFlow) {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = x * 2;
  y.add_(1);
  EXPECT_FALSE(y.is_leaf());
  y.mul_(x); // torch: d/dx (2x + 1) * x = 4x + 1 = [5, 9, 13]
  y.sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 9, 13}));
  // a tensor that did not require grad does after an in-place op with one that does
  Tensor z = zeros({3});
  z.add_(x);
  EXPECT_TRUE(z.requires_grad());
  x.zero_grad();
  z.sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(InPlaceMethods, LeafThatRequiresGradIsAnErrorUnlessNoGrad) {
  Tensor w = vec({1, 2, 3}).requires_grad_();
  expect_error_at([&] { w.mul_(0.5); }, __FILE__, __LINE__, "mul_", {"a leaf Variable that requires grad is being used in an in-place operation"});
  (w * w).sum().backward();
  {
    NoGradGuard no_grad;
    w.sub_(w.grad(), 0.5).clamp_(-1, 1); // an SGD-like update: [0, 0, 0] then clamped
  }
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  w.zero_grad();
  (w * 3).sum().backward(); // still a leaf that accumulates
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

TEST(InPlaceMethods, ViewsAreRefused) {
  Tensor x = zeros({2, 3});
  expect_error_at([&] { x.slice(1, 0, 2).add_(1); }, __FILE__, __LINE__, "add_", {"kiln has no views sharing memory"});
  expect_error_at([&] { x.reshape({3, 2}).zero_(); }, __FILE__, __LINE__, "zero_", {"view (reshape)"});
  expect_error_at([&] { x.t().fill_(1); }, __FILE__, __LINE__, "fill_", {"kiln has no views"});
  expect_error_at([&] { x.expand({4, 2, 3}).mul_(2); }, __FILE__, __LINE__, "mul_", {"kiln has no views"});
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>(6, 0)));
  Tensor y = x.reshape({3, 2}) + 0; // a computed value may be updated
  y.add_(1);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>(6, 1)));
}

// clang-format on

TEST(InPlaceMethods, EveryHandleSeesTheNewValue) {
  Tensor a = vec({1, 2});
  Tensor b = a; // a second handle on one tensor
  a.mul_(3);
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3, 6}));
  Tensor& r = b.add_(1);
  EXPECT_EQ(&r, &b);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{4, 7}));
}

TEST(InPlaceMethods, CompileReplaysInPlaceUpdatesOfState) {
  Tensor w = vec({1, 2, 3}).requires_grad_();
  Tensor running = zeros({3});
  Tensor w_ref = vec({1, 2, 3}).requires_grad_();
  Tensor running_ref = zeros({3});
  auto body = [](Tensor& p, Tensor& run, const Tensor& data) {
    Tensor loss = (p * data).sum();
    loss.backward();
    {
      NoGradGuard no_grad;
      p.sub_(p.grad(), 0.1);
      run.mul_(0.9).add_(data, 0.1);
    }
    p.zero_grad();
    return loss.detach();
  };
  auto step = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{body(w, running, a[0])}; });
  for (int i = 0; i < 3; ++i) {
    Tensor d = vec({1.f + i, 2, 3});
    step({d});
    body(w_ref, running_ref, d); // the same steps, not compiled
    EXPECT_EQ(w.to_vector<float>(), w_ref.to_vector<float>()) << i;
    EXPECT_EQ(running.to_vector<float>(), running_ref.to_vector<float>()) << i;
  }
  EXPECT_NEAR(w.to_vector<float>()[0], 1 - 0.1f * (1 + 2 + 3), 1e-5);
}

TEST(InPlaceMethods, CompileReplaysInPlaceUpdatesOfAnArgument) {
  auto step = compile([](const std::vector<Tensor>& a) {
    Tensor x = a[0];
    x.mul_(2).add_(1); // the caller's tensor, as assign() to an argument
    return std::vector<Tensor>{x * 1};
  });
  Tensor arg = vec({1, 2});
  for (int i = 0; i < 3; ++i) step({arg});
  EXPECT_EQ(arg.to_vector<float>(), (std::vector<float>{15, 23})); // 1 -> 3 -> 7 -> 15, 2 -> 5 -> 11 -> 23
  Tensor other = vec({0, 1});
  const std::vector<Tensor> r = step({other});
  EXPECT_EQ(other.to_vector<float>(), (std::vector<float>{1, 3}));
  EXPECT_EQ(r[0].to_vector<float>(), (std::vector<float>{1, 3}));
}

TEST(InPlaceMethods, UniformAndNormalFollowTheSeed) {
  Tensor x = zeros({1000});
  x.uniform_(-2, 2, 7);
  EXPECT_EQ(x.to_vector<float>(), (rand({1000}, 7) * 4 - 2).to_vector<float>());
  EXPECT_LE(x.max().item<float>(), 2);
  EXPECT_GE(x.min().item<float>(), -2);
  x.normal_(1, 3, 5);
  EXPECT_EQ(x.to_vector<float>(), (randn({1000}, 5) * 3 + 1).to_vector<float>());
}

TEST(RetainGrad, NonLeafGradIsFilledByBackward) {
  // torch 1.13: y = x * 2; y.retain_grad(); (y * y).sum().backward() gives y.grad [4, 8, 12], x.grad [8, 16, 24]
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = x * 2;
  y.retain_grad();
  (y * y).sum().backward();
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{4, 8, 12}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{8, 16, 24}));
  (y * y).sum().backward(); // accumulates, as a leaf's
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{8, 16, 24}));
}

TEST(RetainGrad, FollowsAnInPlaceOpAndTheRoot) {
  // torch 1.13: y.retain_grad(); y.add_(1); (y * y).sum().backward() gives y.grad [6, 10, 14], x.grad [12, 20, 28]
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = x * 2;
  y.retain_grad();
  y.add_(1);
  (y * y).sum().backward();
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{6, 10, 14}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{12, 20, 28}));
  Tensor s = (x * 2).sum(); // the root itself: grad 1
  s.retain_grad();
  s.backward();
  EXPECT_EQ(s.grad().item<float>(), 1.0f);
  EXPECT_FALSE(s.is_leaf());
  EXPECT_TRUE(x.is_leaf());
}

// clang-format off
TEST(RetainGrad, LeafIsANoOpAndNoGradIsAnError) {
  Tensor x = vec({1, 2, 3}).requires_grad_();
  x.retain_grad();
  (x * 2).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  Tensor z = zeros({2});
  expect_error_at([&] { z.retain_grad(); }, __FILE__, __LINE__, "retain_grad", {"can't retain_grad on Tensor that has requires_grad=False"});
}

// clang-format on

TEST(RegisterHook, LeafHookScalesWhatBackwardAccumulatesUntilRemoved) {
  // torch 1.13: x.register_hook(lambda g: g * 2); (x * 3).sum().backward() -> [6, 6, 6]; after remove(): +3
  Tensor x = vec({1, 2, 3}).requires_grad_();
  HookHandle h = x.register_hook([](const Tensor& g) { return g * 2; });
  (x * 3).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{6, 6, 6}));
  h.remove();
  (x * 3).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{9, 9, 9}));
  // torch 1.13's autograd.grad returns a leaf input's gradient unhooked
  x.register_hook([](const Tensor& g) { return g * 2; });
  EXPECT_EQ(kiln::grad({(x * 3).sum()}, {x})[0].to_vector<float>(), (std::vector<float>{3, 3, 3}));
  Tensor u = vec({1, 2}).requires_grad_();
  u.register_hook([](const Tensor&) { return Tensor(); }); // None: unchanged
  (u * 3).sum().backward();
  EXPECT_EQ(u.grad().to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST(RegisterHook, NonLeafHookSeesAndReplacesTheGradientFlowingOn) {
  // torch 1.13: y = x * 2; hook g -> g * 10 sees [4, 8, 12]; x.grad [80, 160, 240] (also by autograd.grad)
  Tensor x = vec({1, 2, 3}).requires_grad_();
  Tensor y = x * 2;
  std::vector<float> seen;
  HookHandle h = y.register_hook([&](const Tensor& g) {
    seen = g.to_vector<float>();
    return g * 10;
  });
  (y * y).sum().backward();
  EXPECT_EQ(seen, (std::vector<float>{4, 8, 12}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{80, 160, 240}));
  EXPECT_EQ(kiln::grad({(y * y).sum()}, {x})[0].to_vector<float>(), (std::vector<float>{80, 160, 240}));
  h.remove();
  EXPECT_EQ(kiln::grad({(y * y).sum()}, {x})[0].to_vector<float>(), (std::vector<float>{8, 16, 24}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 4, 6})); // the value is unchanged
}

TEST(RegisterHook, InsideCompileTheHooksAreReplayed) {
  Tensor w = vec({1, 2}).requires_grad_();
  w.register_hook([](const Tensor& g) { return g * 2; });
  auto step = compile([&](const std::vector<Tensor>& a) {
    w.zero_grad();
    Tensor y = w * a[0];
    y.register_hook([](const Tensor& g) { return g + 1; });
    (y * 3).sum().backward();
    return std::vector<Tensor>{w.grad()};
  });
  for (float s : {1.f, 3.f, 5.f}) { // w.grad = 2 * (3 + 1) * s
    const Tensor d = vec({s, s});
    EXPECT_EQ(step({d})[0].to_vector<float>(), (std::vector<float>{8 * s, 8 * s})) << s;
  }
}

// clang-format off
TEST(RegisterHook, Errors) {
  Tensor z = zeros({2});
  expect_error_at([&] { z.register_hook([](const Tensor& g) { return g; }); }, __FILE__, __LINE__, "register_hook", {"cannot register a hook on a tensor that doesn't require gradient"});
  Tensor x = vec({1, 2}).requires_grad_();
  x.register_hook([](const Tensor& g) { return g.sum(); });
  expect_error_at([&] { (x * 3).sum().backward(); }, __FILE__, __LINE__, "backward", {"the hook returned a gradient of shape [] for one of shape [2]"});
}
// clang-format on

} // namespace

// The runtime: lazy realization, memory planning, capture and replay, and the
// fused and unfused modes agreeing.

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "codegen/llvm_jit.h"
#include "graph/node.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"
#include "runtime/storage.h"
#include "tests/child_process.h"

namespace kiln {
namespace {

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

// Runs `make` with fusion on and off: the results must be bitwise equal, float sums
// included (their order is fixed by the kernel IR: codegen::sum_lanes).
void expect_modes_agree(const std::function<Tensor()>& make) {
  const bool saved = options().fusion;
  options().fusion = true;
  const std::vector<double> fused = make().to_vector<double>();
  options().fusion = false;
  const std::vector<double> unfused = make().to_vector<double>();
  options().fusion = saved;
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    if (std::isnan(fused[i]) && std::isnan(unfused[i])) continue;
    EXPECT_EQ(fused[i], unfused[i]) << "element " << i;
  }
}

TEST(Runtime, NothingRunsUntilAValueIsRead) {
  const auto before = runtime::executor_stats();
  Tensor x = rand({1000}, 3);
  Tensor y = exp(x) * 2.0 + 1.0;
  Tensor s = y.sum();
  EXPECT_EQ(runtime::executor_stats().launches, before.launches);
  const float v = s.item<float>();
  EXPECT_GT(runtime::executor_stats().launches, before.launches);
  EXPECT_GT(v, 2000.0f);
}

TEST(Runtime, RealizedValuesAreNotRecomputed) {
  Tensor x = rand({4096}, 11);
  Tensor y = sigmoid(x);
  y.realize();
  const auto before = runtime::executor_stats();
  y.realize();
  (void)y.to_vector<float>();
  EXPECT_EQ(runtime::executor_stats().launches, before.launches);
}

TEST(Runtime, FusedAndUnfusedAgree) {
  expect_modes_agree([] { return sigmoid(relu((rand({1027}, 1) * 1.5 + 0.5) * rand({1027}, 1) - 0.25)); });
  expect_modes_agree([] {
    Tensor x = randn({33, 47}, 2); // rows longer than the lanes, with a tail
    Tensor m = x.max({1}, true);
    Tensor e = exp(x - m);
    return e / e.sum({1}, true);
  });
  expect_modes_agree([] { // layernorm: two row reductions, the second reading the first
    Tensor x = randn({9, 31}, 7);
    Tensor xc = x - x.mean({1}, true);
    return xc * rsqrt((xc * xc).mean({1}, true) + 1e-5);
  });
  expect_modes_agree([] {
    Tensor a = randn({5, 7}, 3), b = randn({7, 3}, 4);
    return relu(matmul(a * 2.0, b) + randn({3}, 5)).transpose(0, 1).reshape({-1});
  });
  expect_modes_agree([] {
    Tensor x = randn({4, 6}, 6);
    return concat({pad(x, {1, 2}), x.slice(1, 0, 6, 2).expand({4, 3}).reshape({4, 3}).sum({1}, true)}, 1);
  });
}

// Row patterns become one kernel per row block when fused.
size_t kernels_for(const Tensor& t) { return runtime::make_plan({t.node()}).schedule.launches.size(); }

TEST(Runtime, RowPatternsFuseIntoOneKernel) {
  Tensor x = randn({64, 100}, 8);
  Tensor softmax = exp(x - x.max({1}, true)) / exp(x - x.max({1}, true)).sum({1}, true);
  Tensor xc = x - x.mean({1}, true);
  Tensor layernorm = xc * rsqrt((xc * xc).mean({1}, true) + 1e-5) * randn({100}, 9) + randn({100}, 10);
  EXPECT_EQ(kernels_for(softmax), 1u);
  EXPECT_EQ(kernels_for(layernorm), 1u);
  const bool saved = options().fusion;
  options().fusion = false;
  EXPECT_GE(kernels_for(softmax), 5u);
  options().fusion = saved;
  // Each row of the softmax sums to one.
  const std::vector<float> v = softmax.sum({1}).to_vector<float>();
  for (float s : v) EXPECT_NEAR(s, 1.0f, 1e-5f);
}

TEST(Runtime, MatmulEpiloguesFuseIntoTheMatmulKernel) {
  Tensor x = randn({33, 65}, 12), w = randn({65, 17}, 13), b = randn({17}, 14), r = randn({33, 17}, 15);
  Tensor y = relu(matmul(x, w) + b) + r; // bias, activation and residual
  EXPECT_EQ(kernels_for(y), 1u);
  expect_modes_agree([&] { return relu(matmul(x, w) + b) + r; });
  // A matmul whose result is also used elsewhere keeps its own kernel.
  Tensor m = matmul(x, w);
  EXPECT_EQ(kernels_for(concat({relu(m), m.sum({0}, true)}, 0)), 3u);
}

TEST(Runtime, MatmulOperandsThatAreNotViewsGetABuffer) {
  // An im2col-like operand (pad + concat of slices) would otherwise be recomputed
  // for every output column of the matmul.
  Tensor x = randn({6, 8}, 16), w = randn({5, 12}, 17);
  Tensor padded = pad(x, {1, 1});
  Tensor cols = concat({padded.slice(1, 0, 8), padded.slice(1, 1, 9), padded.slice(1, 2, 10)}, 0).reshape({12, 12});
  Tensor y = matmul(w, cols);
  runtime::Plan plan = runtime::make_plan({y.node()});
  // The pad gets a buffer too, so that each piece of the concat is a plain load.
  ASSERT_EQ(plan.schedule.launches.size(), 3u);
  EXPECT_EQ(plan.schedule.launches[0].outputs[0]->op, graph::OpKind::Pad);
  EXPECT_EQ(plan.schedule.launches[1].outputs[0]->op, graph::OpKind::Concat);
  bool explained = false;
  for (const std::string& d : plan.schedule.debug_lines()) explained = explained || d.find("a matmul operand") != std::string::npos;
  EXPECT_TRUE(explained);
  expect_modes_agree([&] { return matmul(w, cols); });
}

TEST(Runtime, LongChainsAreCutIntoKernelsOfBoundedDepth) {
  // An unrolled loop of 20,000 elementwise ops: one fused kernel would be an
  // expression 20,000 levels deep, which the code generators walk recursively.
  Tensor x0 = from_vector<float>({-1.5f, 0.25f, 2.0f, 7.0f});
  Tensor x = x0;
  for (int i = 0; i < 10000; ++i) x = tanh(x * 1.0001f + 0.001f);
  runtime::Plan plan = runtime::make_plan({x.node()});
  EXPECT_GE(plan.schedule.launches.size(), 20000u / 256);
  EXPECT_LE(plan.schedule.launches.size(), 2 * 20000u / 256);
  bool explained = false;
  for (const std::string& d : plan.schedule.debug_lines()) explained = explained || d.find("ops deep") != std::string::npos;
  EXPECT_TRUE(explained);
  const std::vector<float> got = x.to_vector<float>();
  const std::vector<float> x0v = x0.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    double r = x0v[i];
    for (int k = 0; k < 10000; ++k) r = std::tanh(r * 1.0001 + 0.001);
    EXPECT_NEAR(got[i], r, 1e-4) << i; // a contracting map: rounding does not accumulate
  }
}

TEST(Runtime, ANewRandomSeedReusesTheCompiledKernel) {
  // The seed is a kernel parameter: dropout's new mask every step compiles nothing.
  auto& jit = codegen::LlvmJit::instance();
  const std::vector<float> a = (rand({1000}, 11) * 2.0f - 1.0f).to_vector<float>();
  const size_t compiled = jit.compiled_count();
  const std::vector<float> b = (rand({1000}, 12) * 2.0f - 1.0f).to_vector<float>();
  EXPECT_EQ(jit.compiled_count(), compiled);
  EXPECT_NE(a, b);
  nn::Dropout drop(0.5, /*seed=*/3);
  Tensor x = ones({512});
  const std::vector<float> m1 = drop(x).to_vector<float>();
  const size_t after_first = jit.compiled_count();
  const std::vector<float> m2 = drop(x).to_vector<float>();
  EXPECT_EQ(jit.compiled_count(), after_first);
  EXPECT_NE(m1, m2);
}

TEST(Runtime, MemoryPlanReusesBuffersByLiveness) {
  // A chain of unfused ops: each intermediate dies after its consumer runs, so the
  // planned arena holds two buffers at a time, not all of them.
  const bool saved = options().fusion;
  options().fusion = false;
  Tensor x = rand({1 << 16}, 9);
  Tensor y = x;
  for (int i = 0; i < 10; ++i) y = y * 1.01 + 0.5;
  runtime::Plan plan = runtime::make_plan({y.node()});
  options().fusion = saved;
  const size_t one = (1 << 16) * sizeof(float);
  EXPECT_EQ(plan.schedule.launches.size(), 20u);
  EXPECT_LE(plan.arena_bytes, 2 * one);
  EXPECT_GE(plan.arena_bytes, one);
  const auto out = runtime::execute(plan);
  ASSERT_EQ(out.size(), 1u);
  float expect = x.to_vector<float>()[5];
  for (int i = 0; i < 10; ++i) expect = expect * 1.01f + 0.5f;
  EXPECT_NEAR(static_cast<const float*>(out[0]->data())[5], expect, 1e-5f * std::abs(expect));
}

TEST(Compile, ReplaysWithNewInputsWithoutRetracing) {
  int traced = 0;
  auto f = compile([&](const std::vector<Tensor>& a) {
    ++traced;
    return std::vector<Tensor>{(a[0] * a[1] + 1.0).sum(), exp(a[0])};
  });
  for (int step = 0; step < 3; ++step) {
    Tensor x = from_vector<float>({1, 2, 3, static_cast<float>(step)});
    Tensor y = from_vector<float>({4, 5, 6, 7});
    auto out = f({x, y});
    EXPECT_FLOAT_EQ(out[0].item<float>(), 4 + 10 + 18 + 7.0f * step + 4);
    EXPECT_FLOAT_EQ(out[1].to_vector<float>()[3], std::exp(static_cast<float>(step)));
  }
  EXPECT_EQ(traced, 1);
  EXPECT_EQ(f.num_traces(), 1u);
  auto out = f({from_vector<float>({1, 2}), from_vector<float>({3, 4})}); // a new signature traces again
  EXPECT_EQ(f.num_traces(), 2u);
  EXPECT_FLOAT_EQ(out[0].item<float>(), 3 + 8 + 2.0f);
}

TEST(Compile, CapturesParameterUpdates) {
  Tensor w = from_vector<float>({1, 2, 3});
  auto step = compile([&](const std::vector<Tensor>& a) {
    NoGradGuard no_grad;
    w.assign(w - a[0] * 0.5);
    return std::vector<Tensor>{w.sum()};
  });
  Tensor g = from_vector<float>({2, 2, 2});
  step({g});
  auto out = step({g});
  EXPECT_EQ(values(w), (std::vector<float>{-1, 0, 1}));
  EXPECT_FLOAT_EQ(out[0].item<float>(), 0.0f);
}

// A compiled function that only reads state (a parameter, a buffer, a gradient) reads it as it
// is at each call: eager assigns, another compiled function's updates and backward() between
// calls all show, without tracing again.
TEST(Compile, ReadsTheStateItDoesNotChangeAsItIsAtEachCall) {
  nn::Linear lin(2, 1);
  auto predict = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{lin(a[0])}; });
  const Tensor x = from_vector<float>({1, 2}, {1, 2});
  EXPECT_FLOAT_EQ(predict({x})[0].item<float>(), lin(x).item<float>());
  {
    NoGradGuard no_grad;
    lin.weight.assign(from_vector<float>({10, 20}, {1, 2})); // lazy until read
    lin.bias.assign(from_vector<float>({0.5f}));
  }
  EXPECT_FLOAT_EQ(predict({x})[0].item<float>(), 50.5f);
  auto step = compile([&](const std::vector<Tensor>& a) { // updates lin in each replay
    NoGradGuard no_grad;
    lin.weight.assign(lin.weight - a[0]);
    return std::vector<Tensor>{};
  });
  step({from_vector<float>({1, 1}, {1, 2})});
  step({from_vector<float>({1, 1}, {1, 2})});
  EXPECT_FLOAT_EQ(predict({x})[0].item<float>(), 8 + 2 * 18 + 0.5f);
  EXPECT_EQ(predict.num_traces(), 1u);

  auto grad_sum = compile([&](const std::vector<Tensor>&) { return std::vector<Tensor>{lin.weight.grad().sum()}; });
  lin(x).sum().backward();
  EXPECT_FLOAT_EQ(grad_sum({})[0].item<float>(), 3.0f);
  lin(x * 2).sum().backward(); // accumulates into a new gradient tensor
  EXPECT_FLOAT_EQ(grad_sum({})[0].item<float>(), 9.0f);
  EXPECT_EQ(grad_sum.num_traces(), 1u);
}

// State whose dtype changed since the trace (Module::to) makes the function trace again, with
// the eager result, instead of binding f64 values where the trace read f32 ones.
TEST(Compile, TracesAgainWhenTheStateItReadsChangesDtype) {
  nn::Linear lin(3, 2);
  auto f = compile([&](const std::vector<Tensor>&) { return std::vector<Tensor>{(lin.weight * 2).sum()}; });
  EXPECT_EQ(f({})[0].dtype(), kFloat32);
  lin.to(kFloat64);
  const Tensor out = f({})[0]; // the same (empty) argument signature
  EXPECT_EQ(out.dtype(), kFloat64);
  EXPECT_DOUBLE_EQ(out.item<double>(), (lin.weight * 2).sum().item<double>());
  EXPECT_EQ(f.num_traces(), 2u);
}

TEST(Compile, ReadingValuesWhileTracingIsAnError) {
  auto f = compile([](const std::vector<Tensor>& a) {
    (void)a[0].sum().item<float>();
    return std::vector<Tensor>{a[0]};
  });
  EXPECT_THROW(f({from_vector<float>({1, 2})}), Error);
}

TEST(Compile, AnErrorInsideTheTracedFunctionLeavesTheStateAsItWas) {
  // The trace swaps the state it touches for its own nodes (placeholders without data); an error
  // thrown inside the function must give the model and optimizer back their values and gradients.
  nn::manual_seed(1);
  nn::Linear lin(3, 2);
  optim::SGD opt(lin.parameters(), {.lr = 0.1});
  const Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}), y = zeros({2, 2});
  nn::functional::mse_loss(lin(x), y).backward(); // a gradient from before the call
  const std::vector<float> weight = lin.weight.to_vector<float>(), grad = lin.weight.grad().to_vector<float>();
  bool fail = true;
  auto step = compile([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    Tensor loss = nn::functional::mse_loss(lin(a[0]), a[1]);
    loss.backward();
    opt.step();
    if (fail) throw std::runtime_error("the user's own error, after backward() and step()");
    return std::vector<Tensor>{loss};
  });
  EXPECT_THROW(step({x, y}), std::runtime_error);
  EXPECT_EQ(lin.weight.to_vector<float>(), weight);
  EXPECT_EQ(lin.weight.grad().to_vector<float>(), grad);
  fail = false; // the same function traces and trains now
  (void)step({x, y})[0].item<float>();
  EXPECT_NE(lin.weight.to_vector<float>(), weight);
}

TEST(Compile, TrainAndEvalTraceAgain) {
  // A module's is_training() read while tracing is a guard of the trace: after eval() the
  // function is traced again and runs as the eager call does (no dropout, running statistics).
  nn::manual_seed(2);
  nn::Sequential net(nn::Linear(4, 4), nn::BatchNorm1d(4), nn::Dropout(0.5));
  const Tensor x = randn({8, 4}, 3);
  auto f = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{net(a[0])}; });
  (void)f({x})[0].sum().item<float>();
  net.eval();
  const std::vector<float> compiled = f({x})[0].to_vector<float>();
  EXPECT_EQ(f.num_traces(), 2u);
  EXPECT_EQ(compiled, net(x).to_vector<float>());
  net.train();
  (void)f({x});
  EXPECT_EQ(f.num_traces(), 3u); // a trace per mode change (the cache keeps the latest)
}

// An argument is a tensor that outlives the call: what the function assign()s to it, and the
// gradients backward() accumulates into it, are the caller's afterwards, as in an eager call.
// They were lost (the trace wraps arguments in placeholders of its own).
TEST(Compile, AssignToAnArgumentReachesTheCaller) {
  auto body = [](const std::vector<Tensor>& a) {
    Tensor x = a[0];
    x.assign(x * 2 + a[1]);
    return std::vector<Tensor>{x.sum()};
  };
  auto f = compile(body);
  Tensor x = from_vector<float>({1, 2}), y = from_vector<float>({10, 20});
  EXPECT_FLOAT_EQ(f({x, y})[0].item<float>(), 36.0f); // the sum of the new value
  EXPECT_EQ(values(x), (std::vector<float>{12, 24}));
  EXPECT_FLOAT_EQ(f({x, y})[0].item<float>(), 102.0f);
  EXPECT_EQ(values(x), (std::vector<float>{34, 68}));
  EXPECT_EQ(values(y), (std::vector<float>{10, 20})) << "an argument the function only reads is unchanged";
  EXPECT_EQ(f.num_traces(), 1u);
  Tensor z = from_vector<float>({1, 2}); // the eager call does the same
  body({z, y});
  body({z, y});
  EXPECT_EQ(values(z), values(x));
}

TEST(Compile, BackwardInsideAccumulatesIntoAnArgumentsGradient) {
  auto f = compile([](const std::vector<Tensor>& a) {
    (a[0] * a[0] * a[1]).sum().backward();
    return std::vector<Tensor>{};
  });
  Tensor w = from_vector<float>({1, 2, 3});
  w.requires_grad_();
  const Tensor k = from_vector<float>({1, 1, 2});
  f({w, k});
  EXPECT_EQ(values(w.grad()), (std::vector<float>{2, 4, 12}));
  f({w, k}); // w holds a gradient now: another signature, traced again, and accumulated into
  EXPECT_EQ(values(w.grad()), (std::vector<float>{4, 8, 24}));
  f({w, k});
  EXPECT_EQ(values(w.grad()), (std::vector<float>{6, 12, 36}));
  EXPECT_EQ(f.num_traces(), 2u);
  auto clear = compile([](const std::vector<Tensor>& a) {
    Tensor(a[0]).zero_grad();
    return std::vector<Tensor>{};
  });
  clear({w});
  EXPECT_FALSE(w.grad().defined());
  EXPECT_FALSE(k.grad().defined());
}

TEST(Compile, RequiresGradOnAnArgumentReachesTheCaller) {
  auto f = compile([](const std::vector<Tensor>& a) {
    Tensor x = a[0]; // an adversarial input: the argument itself becomes a leaf
    x.requires_grad_();
    (x * x).sum().backward();
    return std::vector<Tensor>{};
  });
  Tensor x = from_vector<float>({1, -2});
  f({x});
  EXPECT_TRUE(x.requires_grad());
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2, -4}));
}

// ---------------------------------------------------------------- environment variables

// Run as a child by the test below: prints the options its environment gave.
TEST(OptionsChild, DISABLED_Print) {
  std::printf("OPTIONS fusion=%d anomaly=%d jit_tier=%d fuel=%lld debug=%d timeout=%g\n", options().fusion,
              options().detect_anomaly, options().jit_tier, static_cast<long long>(options().fuel), options().debug,
              options().dist_timeout);
}

// The options a child process reads from `env`, with what it printed on stderr.
std::string child_options(const std::string& env) { return test::run_child_test(env, "OptionsChild.DISABLED_Print"); }

TEST(Options, EnvironmentValuesAreReadStrictly) {
  // atoi read "true" as 0: KILN_FUSION=true turned fusion off. Booleans take 1/0, true/false,
  // on/off, yes/no; anything else keeps the default and says so.
  std::string out = child_options("KILN_FUSION=true KILN_DETECT_ANOMALY=Yes KILN_JIT_TIER=off KILN_FUEL=12 KILN_DEBUG=0");
  EXPECT_NE(out.find("OPTIONS fusion=1 anomaly=1 jit_tier=0 fuel=12 debug=0"), std::string::npos) << out;
  out = child_options("KILN_FUSION=banana KILN_FUEL=abc KILN_DIST_TIMEOUT=abc KILN_DEBUG=0 KILN_DETECT_ANOMALY=0 KILN_JIT_TIER=1");
  EXPECT_NE(out.find("OPTIONS fusion=1 anomaly=0 jit_tier=1 fuel=-1 debug=0 timeout=300"), std::string::npos) << out;
  EXPECT_NE(out.find("KILN_FUSION=banana is not a boolean"), std::string::npos) << out;
  EXPECT_NE(out.find("KILN_FUEL=abc is not an integer"), std::string::npos) << out;
  EXPECT_NE(out.find("KILN_DIST_TIMEOUT=abc is not a positive number of seconds"), std::string::npos) << out;
  out = child_options("KILN_FUSION=0 KILN_DEBUG=0");
  EXPECT_NE(out.find("OPTIONS fusion=0"), std::string::npos) << out;
}

// ---------------------------------------------------------------- the schedule cache

// Bits of `make()`'s value and the plans realize() reused computing it.
std::pair<std::vector<double>, size_t> run_counting_reuses(const std::function<Tensor()>& make) {
  const size_t before = runtime::executor_stats().plan_reuses;
  const std::vector<double> v = make().to_vector<double>();
  return {v, runtime::executor_stats().plan_reuses - before};
}

// A small block with a matmul, a softmax row pattern, a reduction and broadcasts.
Tensor block(const Tensor& x, const Tensor& w) {
  Tensor h = matmul(x, w) + 0.5;
  Tensor e = exp(h - h.max({1}, true));
  return (e / e.sum({1}, true)) * relu(h) + x.sum({1}, true);
}

TEST(ScheduleCache, AStructurallyEqualGraphReusesThePlanWithTheSameBits) {
  const Tensor w = randn({16, 16}, 41).realize();
  const std::vector<Tensor> xs = {randn({8, 16}, 42).realize(), randn({8, 16}, 43).realize()};
  auto make = [&](uint64_t seed) { return [&w, &xs, seed] { return block(xs[seed - 42], w); }; };
  (void)run_counting_reuses(make(42));
  const size_t compiles = runtime::executor_stats().compiles;
  const auto [cached, reuses] = run_counting_reuses(make(43)); // other data, same structure
  EXPECT_EQ(reuses, 1u);
  EXPECT_EQ(runtime::executor_stats().compiles, compiles);
  options().schedule_cache = false;
  const auto [fresh, none] = run_counting_reuses(make(43));
  options().schedule_cache = true;
  EXPECT_EQ(none, 0u);
  EXPECT_EQ(cached, fresh); // bitwise
  const auto [other, _] = run_counting_reuses(make(42));
  EXPECT_NE(other, cached); // the new sources were read, not the first graph's
}

TEST(ScheduleCache, RealizedIntermediatesSharingConstantsAndSeedsAreStructure) {
  const Tensor x = randn({64}, 51).realize(), y = randn({64}, 52).realize();
  const Tensor e = exp(x).realize(); // a realized intermediate is a source
  auto uncached = [](const Tensor& t) {
    options().schedule_cache = false;
    const std::vector<double> v = t.to_vector<double>();
    options().schedule_cache = true;
    return v;
  };
  // Each case: first a graph into the cache, then one that differs only in the named way.
  const std::vector<std::pair<std::function<Tensor()>, std::function<Tensor()>>> cases = {
      {[&] { return exp(x) * y + 1.0; }, [&] { return e * y + 1.0; }},         // realized intermediate
      {[&] { return exp(x) * y; }, [&] { return exp(x) * x; }},                // x used twice, not x and y
      {[&] { return exp(x) * 3.0 + 2.0; }, [&] { return exp(x) * 2.0 + 2.0; }}, // one constant twice, not two
      {[&] { return pow(exp(x), 2.0) + 1.5; }, [&] { return pow(exp(x), 0.5) + 1.5; }}, // pow's exponent is baked
      {[&] { return exp(x) / 4.0 + 1.5; }, [&] { return exp(x) / 3.0 + 1.5; }},      // so is a divisor
      {[&] { return pow(exp(x), full({8, 8}, 2.0, kFloat64).to(kFloat32).reshape({64})); }, // through views and casts
       [&] { return pow(exp(x), full({8, 8}, 3.0, kFloat64).to(kFloat32).reshape({64})); }},
      {[&] { return rand({64}, 8) + rand({8, 8}, 9).reshape({64}); },   // two seeds, then one seed twice
       [&] { return rand({64}, 8) + rand({8, 8}, 8).reshape({64}); }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    (void)run_counting_reuses(cases[i].first);
    const std::vector<double> want = uncached(cases[i].second());
    const auto [got, reuses] = run_counting_reuses(cases[i].second);
    EXPECT_EQ(reuses, 0u) << "case " << i;
    EXPECT_EQ(got, want) << "case " << i;
  }
}

// Floating scalar constants are kernel parameters: a graph that differs only in them reuses the
// plan (and its compiled kernels) with its own values, bitwise those of a fresh plan.
TEST(ScheduleCache, NewConstantsReuseThePlanWithTheirOwnValues) {
  const Tensor x = randn({64}, 71).realize(), y = randn({64}, 72).realize();
  auto make = [&](double a, double b) { return [&x, &y, a, b] { return exp(x) * a + (y - b) * y; }; };
  (void)run_counting_reuses(make(3.0, 0.5));
  for (const auto& [a, b] : std::vector<std::pair<double, double>>{{2.0, 0.25}, {-1e30, 7.0}, {0.1, -3.5}, {3.0, 0.5}}) {
    options().schedule_cache = false;
    const std::vector<double> want = make(a, b)().to_vector<double>();
    options().schedule_cache = true;
    const size_t compiles = runtime::executor_stats().compiles;
    const auto [got, reuses] = run_counting_reuses(make(a, b));
    EXPECT_EQ(reuses, 1u) << a << ", " << b;
    EXPECT_EQ(got, want) << a << ", " << b; // the new values, not the first graph's
    EXPECT_EQ(runtime::executor_stats().compiles, compiles);
  }
}

TEST(ScheduleCache, ANewRandomSeedReusesThePlanAndDrawsItsOwnNumbers) {
  const Tensor x = randn({64}, 61).realize();
  auto make = [&](uint64_t seed) { return [&x, seed] { return exp(x) * rand({64}, seed) + randn({8, 8}, seed + 1).reshape({64}); }; };
  (void)run_counting_reuses(make(5));
  options().schedule_cache = false;
  const std::vector<double> want = make(7)().to_vector<double>();
  options().schedule_cache = true;
  const auto [got, reuses] = run_counting_reuses(make(7));
  EXPECT_EQ(reuses, 1u);
  EXPECT_EQ(got, want);
}

TEST(ScheduleCache, KeepsNoValueAlive) {
  // A graph of no sources (randn) is its own copy: the cache must not hold its value.
  const size_t in_use = runtime::allocator_stats().bytes_in_use;
  for (int i = 0; i < 2; ++i) {
    Tensor r = (randn({1 << 16}, 77) * 2.0).realize();
    Tensor s = (r + 1.0).realize(); // and one with a source
  }
  EXPECT_EQ(runtime::allocator_stats().bytes_in_use, in_use);
}

TEST(ScheduleCache, ASourceWithoutDataIsStillAnError) {
  const Tensor placeholder(graph::make_input(kFloat32, {4}, nullptr));
  EXPECT_THROW((placeholder + 1.0).realize(), Error);
  EXPECT_THROW((placeholder + 1.0).realize(), Error);
}

} // namespace
} // namespace kiln

namespace kiln {
namespace {

// Restores options().fuel at the end of a scope.
struct FuelSetting {
  int64_t saved = options().fuel;
  explicit FuelSetting(int64_t fuel) { options().fuel = fuel; }
  ~FuelSetting() { options().fuel = saved; }
};

size_t fusion_decisions(const codegen::Schedule& s) {
  return static_cast<size_t>(std::count_if(s.decisions.begin(), s.decisions.end(), [](const codegen::FusionDecision& d) {
    return d.kind != codegen::FusionDecision::Kind::Kernel;
  }));
}

TEST(Fuel, EachUnitAllowsOneMoreFusionDecisionAndNoneChangesABit) {
  auto make = [] {
    const Tensor x = randn({24, 40}, 50), w = randn({40, 16}, 51);
    const Tensor h = relu(matmul(x, w) + 0.5);
    const Tensor e = exp(h - h.max({1}, true));
    return std::vector<Tensor>{e / e.sum({1}, true), h * 2.0, h.sum({1})};
  };
  std::vector<graph::NodeRef> nodes;
  for (const Tensor& t : make()) nodes.push_back(t.node());
  size_t unlimited_decisions = 0, unlimited_kernels = 0;
  {
    const runtime::Plan p = runtime::make_plan(nodes);
    unlimited_decisions = fusion_decisions(p.schedule);
    unlimited_kernels = p.schedule.launches.size();
  }
  // the plans' values without realizing the (hash-consed, shared) nodes
  auto values_of = [&](const runtime::Plan& p) {
    const auto storages = runtime::execute(p);
    const auto* v = static_cast<const float*>(storages[0]->data());
    return std::vector<float>(v, v + nodes[0]->numel());
  };
  const bool saved = options().fusion;
  options().fusion = false;
  const runtime::Plan unfused = runtime::make_plan(nodes);
  const size_t unfused_kernels = unfused.schedule.launches.size();
  const std::vector<float> reference = values_of(unfused);
  options().fusion = saved;
  ASSERT_GT(unlimited_decisions, 3u);
  size_t previous = unfused_kernels + 1;
  for (int64_t fuel = 0; fuel <= static_cast<int64_t>(unlimited_decisions); ++fuel) {
    const FuelSetting f(fuel);
    const runtime::Plan p = runtime::make_plan(nodes);
    EXPECT_EQ(fusion_decisions(p.schedule), static_cast<size_t>(fuel)) << fuel;
    EXPECT_LE(p.schedule.launches.size(), previous) << fuel; // more fuel never means more kernels
    previous = p.schedule.launches.size();
    if (fuel == 0) {
      EXPECT_EQ(p.schedule.launches.size(), unfused_kernels);
    }
    bool out_of_fuel = false;
    for (const std::string& d : p.schedule.debug_lines()) out_of_fuel = out_of_fuel || d.find("out of fusion fuel") != std::string::npos;
    EXPECT_EQ(out_of_fuel, fuel < static_cast<int64_t>(unlimited_decisions)) << fuel;
    const std::vector<float> got = values_of(p);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], reference[i]) << "fuel " << fuel << ", element " << i;
  }
  EXPECT_EQ(previous, unlimited_kernels);
}

TEST(Fuel, DecisionsAreDataNamingTheNodeTheKernelAndTheKernelName) {
  const Tensor x = randn({16, 8}, 52);
  const Tensor y = exp(x * 2.0) + 1.0;
  const runtime::Plan p = runtime::make_plan({y.node()});
  ASSERT_EQ(p.schedule.launches.size(), 1u);
  const std::string& name = p.schedule.launches[0].kernel.name;
  bool fused_mul = false;
  for (const codegen::FusionDecision& d : p.schedule.decisions) {
    EXPECT_EQ(d.kernel_name, name) << d.text();
    EXPECT_EQ(d.kernel, y.node().get()) << d.text();
    if (d.kind == codegen::FusionDecision::Kind::Fuse && d.node->op == graph::OpKind::Mul) {
      fused_mul = true;
      EXPECT_NE(d.text().find("fusing mul f32[16,8]"), std::string::npos) << d.text();
      EXPECT_NE(d.text().find("-> " + name), std::string::npos) << d.text();
    }
  }
  EXPECT_TRUE(fused_mul);
}

TEST(Recompute, AGeluGradientReadsXInsteadOfTheCheapValuesItsForwardComputed) {
  // Exact GELU, 0.5 x (1 + erf(x / sqrt(2))), and its gradient: x / 2 and x / sqrt(2) are read by
  // the forward's kernel and the gradient's, and computed again in each (rematerialization)
  // rather than stored; 1 + erf(...) is stored once. Fusion on and off give the same bits, on 1
  // and 2 threads.
  auto make = [] {
    Tensor x = randn({64, 512}, 60).realize();
    x.requires_grad_();
    const Tensor g = randn({64, 512}, 61).realize();
    const Tensor y = nn::functional::gelu(x);
    const Tensor s = y.sum({1}, true); // a kernel between the forward and the gradient
    const Tensor dx = grad({(y * g * s.detach()).sum()}, {x})[0];
    return std::vector<Tensor>{y, dx};
  };
  const std::vector<Tensor> ts = make();
  const runtime::Plan p = runtime::make_plan({ts[0].node(), ts[1].node()});
  size_t recomputed = 0, stored_full_size = 0;
  for (const codegen::FusionDecision& d : p.schedule.decisions)
    if (d.kind == codegen::FusionDecision::Kind::Recompute) {
      ++recomputed;
      EXPECT_EQ(d.kernel, nullptr);
      EXPECT_NE(d.text().find("recomputing mul f32[64,512]"), std::string::npos) << d.text();
    }
  for (const codegen::KernelLaunch& l : p.schedule.launches)
    for (const graph::Node* o : l.outputs) stored_full_size += o->shape == graph::Shape{64, 512} ? 1 : 0;
  EXPECT_GE(recomputed, 2u);
  // y, 1 + erf(x / sqrt(2)), dx (and the product y * g, read at other points by the sum)
  EXPECT_LE(stored_full_size, 4u);
  for (const int threads : {1, 2}) {
    const tbb::global_control t(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
    expect_modes_agree([&] { return make()[1]; });
    expect_modes_agree([&] { return make()[0]; });
  }
}

} // namespace
} // namespace kiln

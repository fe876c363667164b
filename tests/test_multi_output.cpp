// Kernels with several outputs (codegen/lower.h, schedule()): values computed over the same
// domain are stored by one kernel - a matmul's result and the parameter updated from it, a
// forward value and what its backward keeps, sibling reductions over the same rows, small
// independent values - with the results bitwise those of one kernel per op.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "graph/node.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"

namespace kiln {
namespace {

namespace F = nn::functional;

std::vector<graph::NodeRef> nodes_of(const std::vector<Tensor>& ts) {
  std::vector<graph::NodeRef> n;
  for (const Tensor& t : ts) n.push_back(t.node());
  return n;
}

runtime::Plan plan_of(const std::vector<Tensor>& ts) { return runtime::make_plan(nodes_of(ts)); }

// The number of values each launch stores, in launch order.
std::vector<size_t> outputs_per_launch(const std::vector<Tensor>& ts) {
  std::vector<size_t> out;
  for (const auto& l : plan_of(ts).schedule.launches) out.push_back(l.outputs.size());
  return out;
}

// The bytes of every value `make` returns, with fusion on or off.
std::vector<std::vector<unsigned char>> bytes_of(const std::function<std::vector<Tensor>()>& make, bool fusion) {
  const bool saved = options().fusion;
  options().fusion = fusion;
  std::vector<Tensor> ts = make();
  std::vector<graph::NodeRef> ns = nodes_of(ts);
  const runtime::Plan plan = runtime::make_plan(ns);
  const auto storages = runtime::execute(plan);
  options().fusion = saved;
  std::vector<std::vector<unsigned char>> out;
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(storages[i]->data());
    out.emplace_back(p, p + ts[i].numel() * dtype_size(ts[i].dtype()));
  }
  return out;
}

// Fused (with multi-output kernels) and unfused (one kernel per op) give the same bits.
void expect_same_bits(const std::function<std::vector<Tensor>()>& make) {
  const auto fused = bytes_of(make, true), unfused = bytes_of(make, false);
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_EQ(fused[i], unfused[i]) << "value " << i;
}

TEST(MultiOutput, AMatmulStoresTheValuesComputedFromItAloneInItsEpilogue) {
  for (DType dt : {kFloat32, kFloat64}) {
    auto make = [dt] {
      const Tensor x = randn({64, 96}, 1, dt), dy = randn({64, 80}, 2, dt);
      const Tensor g = matmul(x.transpose(0, 1), dy); // a weight gradient
      return std::vector<Tensor>{g, g * g * 0.1, g > 0.0};
    };
    const runtime::Plan plan = plan_of(make());
    ASSERT_EQ(plan.schedule.launches.size(), 1u);
    EXPECT_EQ(plan.schedule.launches[0].outputs.size(), 3u);
    EXPECT_TRUE(plan.schedule.launches[0].kernel.gemm.has_value()); // stored by the GEMM's epilogue
    expect_same_bits(make);
  }
}

TEST(MultiOutput, AnUpdateStreamingAParameterJoinsTheGemmsEpilogue) {
  // SGD's w - lr * g reads all of w: the GEMM's epilogue stores g and the update, the rows of w
  // fetched ahead while the microkernel runs (llvm_gemm.cpp), so g is not read back.
  auto make = [] {
    const Tensor x = randn({64, 96}, 1), dy = randn({64, 80}, 2);
    Tensor w = randn({96, 80}, 3);
    w.realize();
    const Tensor g = matmul(x.transpose(0, 1), dy);
    return std::vector<Tensor>{g, w - g * 0.01};
  };
  EXPECT_EQ(outputs_per_launch(make()), (std::vector<size_t>{2}));
  expect_same_bits(make);
}

TEST(MultiOutput, AForwardValueAndWhatTheBackwardKeepsAreOneKernel) {
  auto make = [] {
    const Tensor x = randn({32, 48}, 4), w = randn({48, 40}, 5), b = randn({40}, 6);
    const Tensor h = matmul(x, w) + b;
    return std::vector<Tensor>{relu(h), h > 0.0}; // the activation and the ReLU's mask
  };
  // relu(h) and the mask; h itself needs no buffer (nothing else reads it)
  EXPECT_EQ(outputs_per_launch(make()), std::vector<size_t>{2});
  auto keep_h = [] {
    const Tensor x = randn({32, 48}, 4), w = randn({48, 40}, 5), b = randn({40}, 6);
    const Tensor h = matmul(x, w) + b;
    return std::vector<Tensor>{h, relu(h), h > 0.0};
  };
  EXPECT_EQ(outputs_per_launch(keep_h()), std::vector<size_t>{3});
  expect_same_bits(keep_h);
  expect_same_bits(make);
}

TEST(MultiOutput, SiblingReductionsOverTheSameRowsAreOneKernel) {
  for (DType dt : {kFloat32, kFloat64}) {
    auto make = [dt] {
      const Tensor x = randn({37, 50}, 7, dt), y = randn({37, 50}, 8, dt);
      return std::vector<Tensor>{x.sum({1}, true), (y * y).max({1}, true), (x * y).sum({1})};
    };
    const runtime::Plan plan = plan_of(make());
    ASSERT_EQ(plan.schedule.launches.size(), 1u);
    EXPECT_EQ(plan.schedule.launches[0].kernel.reductions.size(), 3u);
    expect_same_bits(make);
  }
}

TEST(MultiOutput, SmallIndependentValuesShareAKernelLargeOnesDoNot) {
  auto small = [] {
    const Tensor x = randn({4, 25}, 9), y = randn({4, 1, 25}, 10);
    return std::vector<Tensor>{exp(x), y * 2.0 - 1.0};
  };
  EXPECT_EQ(outputs_per_launch(small()), std::vector<size_t>{2});
  expect_same_bits(small);
  auto large = [] {
    const Tensor x = randn({1 << 16}, 9), y = randn({1 << 16}, 10);
    return std::vector<Tensor>{exp(x), y * 2.0 - 1.0};
  };
  EXPECT_EQ(outputs_per_launch(large()), (std::vector<size_t>{1, 1}));
  expect_same_bits(large);
}

TEST(MultiOutput, AdamsSlotAndParameterUpdatesAreOneKernel) {
  // m and v both read the gradient (large: they join because they read the same data), and the
  // parameter reads them at its own points: one pass over g, m, v and p.
  auto make = [] {
    const int64_t n = int64_t{1} << 17;
    Tensor g = randn({n}, 60), m = randn({n}, 61), v = rand({n}, 62), p = randn({n}, 63);
    for (Tensor* t : {&g, &m, &v, &p}) t->realize();
    const Tensor m2 = m * 0.9 + g * 0.1;
    const Tensor v2 = v * 0.999 + g * g * 0.001;
    return std::vector<Tensor>{m2, v2, p - m2 / (sqrt(v2) + 1e-8) * 0.001};
  };
  EXPECT_EQ(outputs_per_launch(make()), std::vector<size_t>{3});
  expect_same_bits(make);
}

TEST(MultiOutput, AValueReadAtOtherPointsKeepsItsOwnKernel) {
  auto make = [] {
    const Tensor x = randn({32, 32}, 11);
    const Tensor y = x + 1.0;
    return std::vector<Tensor>{y, y.transpose(0, 1) * 2.0, pad(y.slice(1, 1, 32), {0, 1}) - y};
  };
  const runtime::Plan plan = plan_of(make());
  // y's kernel stores y alone; the two values reading it at other points share one kernel
  // (independent and small: horizontal fusion)
  ASSERT_EQ(plan.schedule.launches.size(), 2u);
  EXPECT_EQ(plan.schedule.launches[0].outputs.size(), 1u);
  EXPECT_EQ(plan.schedule.launches[1].outputs.size(), 2u);
  expect_same_bits(make);
}

TEST(MultiOutput, AReductionDoesNotJoinAMatmulOrAnElementwiseKernel) {
  auto make = [] {
    const Tensor a = randn({16, 12}, 12), b = randn({12, 8}, 13), z = randn({16, 8, 5}, 14);
    return std::vector<Tensor>{matmul(a, b), z.sum({2}), exp(z.slice(2, 0, 1).reshape({16, 8}))};
  };
  const runtime::Plan plan = plan_of(make());
  ASSERT_EQ(plan.schedule.launches.size(), 2u); // the exp joins the matmul; the sum stays apart
  EXPECT_EQ(plan.schedule.launches[0].outputs.size() + plan.schedule.launches[1].outputs.size(), 3u);
  for (const auto& l : plan.schedule.launches)
    if (l.kernel.gemm) {
      EXPECT_EQ(l.kernel.reductions.size(), 1u);
    }
  expect_same_bits(make);
}

TEST(MultiOutput, AValueNeverRunsBeforeWhatItReads) {
  auto make = [] {
    const Tensor x = randn({64}, 15), y = randn({64}, 16);
    const Tensor s = x.sum();                    // its own kernel, after exp(x)'s
    return std::vector<Tensor>{exp(x), s, y + s}; // y + s has exp(x)'s domain but reads s
  };
  const runtime::Plan plan = plan_of(make());
  EXPECT_EQ(plan.schedule.launches.size(), 3u);
  expect_same_bits(make);
}

TEST(MultiOutput, UnfusedModeStoresOneValuePerKernel) {
  const bool saved = options().fusion;
  options().fusion = false;
  const Tensor x = randn({64, 96}, 1), dy = randn({64, 80}, 2), w = randn({96, 80}, 3);
  const Tensor g = matmul(x.transpose(0, 1), dy);
  const runtime::Plan plan = plan_of({g, w - g * 0.01, x.sum({1}), (x * x).sum({1})});
  options().fusion = saved;
  for (const auto& l : plan.schedule.launches) EXPECT_EQ(l.outputs.size(), 1u);
}

TEST(MultiOutput, TheDecisionsSayWhyAValueJoinedAKernel) {
  const Tensor x = randn({8, 9}, 17);
  const Tensor y = exp(x);
  const runtime::Plan plan = plan_of({y, y * 2.0, x.sum({1}), x.max({1})});
  std::string all;
  for (const std::string& d : plan.schedule.debug_lines()) all += d + "\n";
  EXPECT_NE(all.find("it reads that kernel's values at their own points"), std::string::npos) << all;
  EXPECT_NE(all.find("a sibling reduction over the same rows"), std::string::npos) << all;
  // the kernel's line of the schedule names every value it computes
  EXPECT_NE(all.find("computes exp f32[8,9]"), std::string::npos) << all;
  EXPECT_NE(all.find(", mul f32[8,9]"), std::string::npos) << all;
}

// The MLP training step of the benchmarks (784-512-512-10, SGD; bench_fusion's MLPStep): forward,
// backward and update.
std::vector<Tensor> mlp_step(int64_t batch) {
  const int64_t sizes[] = {784, 512, 512, 10};
  std::vector<Tensor> params;
  for (int l = 0; l < 3; ++l) {
    Tensor w = randn({sizes[l], sizes[l + 1]}, 20 + l) * 0.05;
    w.realize();
    params.push_back(w.requires_grad_());
    params.push_back(zeros({sizes[l + 1]}).requires_grad_());
  }
  // the batch is data, as in the benchmark (not computed by the step's plan)
  const Tensor x = randn({batch, 784}, 30).realize();
  const Tensor labels = (rand({batch}, 31) * 10.0).to(kInt64).realize();
  Tensor h = x;
  for (int l = 0; l < 3; ++l) {
    h = matmul(h, params[2 * l]) + params[2 * l + 1];
    if (l < 2) h = relu(h);
  }
  // the loss as bench/mlp.h writes it (the benchmark's MLPStep)
  const Tensor m = h.max({1}, true).detach();
  const Tensor lse = log(exp(h - m).sum({1}, true)) + m;
  const Tensor onehot = eq(labels.reshape({-1, 1}), arange(0, 10, 1, kInt64).reshape({1, 10})).to(kFloat32);
  const Tensor loss = (lse - (onehot * h).sum({1}, true)).mean();
  const std::vector<Tensor> grads = grad({loss}, params);
  std::vector<Tensor> out{loss};
  for (size_t i = 0; i < params.size(); ++i) {
    out.push_back(grads[i]);
    out.push_back((params[i] - grads[i] * 0.01).detach());
  }
  return out;
}

TEST(MultiOutput, TheMlpTrainingStepStoresSeveralValuesPerKernel) {
  // 30 kernels with one output each before multi-output kernels; 16 now (the weight updates in
  // their gradients' GEMM epilogues; the strided bias-gradient sums stay apart: joined, they
  // measured slower).
  const runtime::Plan plan = plan_of(mlp_step(128));
  EXPECT_LE(plan.schedule.launches.size(), 16u);
  size_t stored = 0;
  for (const auto& l : plan.schedule.launches) stored += l.outputs.size();
  EXPECT_GT(stored, plan.schedule.launches.size()); // several kernels store more than one value
  expect_same_bits([] { return mlp_step(128); });
  expect_same_bits([] { return mlp_step(1); });
}

TEST(MultiOutput, IntermediateOutputsShareTheArenaSafely) {
  // Values stored early (with an earlier kernel) live longer: the memory plan must not reuse
  // their bytes before their last reader.
  auto make = [] {
    std::vector<Tensor> out;
    Tensor x = randn({48, 48}, 40);
    for (int i = 0; i < 6; ++i) {
      const Tensor y = matmul(x, x) * 0.1;
      const Tensor keep = tanh(y);      // stored with the matmul, read only at the end
      x = (y + 1.0).sum({1}, true).expand({48, 48}) * 0.01 + x;
      out.push_back(keep);
    }
    Tensor total = x;
    for (const Tensor& k : out) total = total + k;
    return std::vector<Tensor>{total};
  };
  expect_same_bits(make);
}

} // namespace
} // namespace kiln

// Anomaly mode (kiln/anomaly.h, KILN_DETECT_ANOMALY=1): a NaN or inf in any kernel's output
// stops the computation with a kiln::AnomalyError naming the first graph op that made one
// from finite inputs, its element, its inputs' values there and the user's line; for a
// gradient, the forward op and its line. Fused kernels are searched op by op; eager
// realizes, backward, optimizer steps and compile()d steps are all checked; off, nothing
// changes.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "kiln/anomaly.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"
#include "tests/child_process.h"

namespace kiln {
namespace {

std::string here(int line) { return "test_anomaly.cpp:" + std::to_string(line); }

// The anomaly `f` raises (a failure when it raises none).
Anomaly anomaly_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const AnomalyError& e) {
    if (message) *message = e.what();
    return e.anomaly();
  }
  ADD_FAILURE() << "no AnomalyError";
  return {};
}

// Restores options().fusion at the end of a test.
struct FusionSetting {
  bool saved = options().fusion;
  explicit FusionSetting(bool on) { options().fusion = on; }
  ~FusionSetting() { options().fusion = saved; }
};

Tensor vec(std::vector<float> v) { return from_vector(v); }

// Each test starts with the mode off on every thread, whatever KILN_DETECT_ANOMALY says.
class AnomalyMode : public ::testing::Test {
protected:
  void SetUp() override { options().detect_anomaly = false; }
  void TearDown() override { options().detect_anomaly = saved_; }

private:
  bool saved_ = options().detect_anomaly;
};

TEST_F(AnomalyMode, LogOfMinusOneNamesTheOpTheElementAndTheLine) {
  const detect_anomaly on;
  const Tensor x = vec({3, 4, 1, 5});
  std::string msg;
  const int line = __LINE__ + 1;
  const Anomaly a = anomaly_of([&] { log(x - 2).to_vector<float>(); }, &msg);
  EXPECT_EQ(a.op, "log");
  EXPECT_EQ(a.value, "NaN");
  EXPECT_EQ(a.index, (std::vector<int64_t>{2}));
  EXPECT_EQ(a.type, "f32[4]");
  EXPECT_EQ(a.line, here(line));
  EXPECT_EQ(a.gradient_of, "");
  EXPECT_FALSE(a.from_input);
  EXPECT_NE(msg.find("anomaly: log produced NaN at element [2] of its f32[4] result from finite input -1"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find("at " + here(line)), std::string::npos) << msg;
}

TEST_F(AnomalyMode, SqrtOfANegativeAndZeroOverZero) {
  const detect_anomaly on;
  const Tensor x = vec({1, 2, 3});
  int line = __LINE__ + 1;
  Anomaly a = anomaly_of([&] { sqrt(x - 2.5).realize(); });
  EXPECT_EQ(a.op, "sqrt");
  EXPECT_EQ(a.index, (std::vector<int64_t>{0}));
  EXPECT_EQ(a.line, here(line));
  line = __LINE__ + 1;
  a = anomaly_of([&] { ((x - 2) / (x - 2)).realize(); });
  EXPECT_EQ(a.op, "div");
  EXPECT_EQ(a.value, "NaN");
  EXPECT_EQ(a.index, (std::vector<int64_t>{1}));
  EXPECT_EQ(a.line, here(line));
}

TEST_F(AnomalyMode, InfinitiesToo) {
  const detect_anomaly on;
  const Tensor x = vec({1, 2, 3});
  std::string msg;
  int line = __LINE__ + 1;
  Anomaly a = anomaly_of([&] { exp(x * 1000).sum().item<float>(); }, &msg);
  EXPECT_EQ(a.op, "exp");
  EXPECT_EQ(a.value, "inf");
  EXPECT_EQ(a.line, here(line));
  EXPECT_NE(msg.find("exp produced inf at element [0] of its f32[3] result from finite input 1000"),
            std::string::npos) << msg;
  line = __LINE__ + 1;
  a = anomaly_of([&] { (-1 / (x - 3)).realize(); });
  EXPECT_EQ(a.value, "-inf");
  EXPECT_EQ(a.index, (std::vector<int64_t>{2}));
  EXPECT_EQ(a.line, here(line));
}

TEST_F(AnomalyMode, Float64Too) {
  const detect_anomaly on;
  const Tensor x = from_vector<double>({2, 1e300});
  const int line = __LINE__ + 1;
  const Anomaly a = anomaly_of([&] { (x * x).realize(); });
  EXPECT_EQ(a.op, "mul");
  EXPECT_EQ(a.value, "inf");
  EXPECT_EQ(a.type, "f64[2]");
  EXPECT_EQ(a.index, (std::vector<int64_t>{1}));
  EXPECT_EQ(a.line, here(line));
}

// How many kernels computing `y` takes (anomaly mode off).
size_t kernels_for(const Tensor& y) {
  const size_t before = runtime::executor_stats().launches;
  y.realize();
  return runtime::executor_stats().launches - before;
}

TEST_F(AnomalyMode, FindsTheFirstOpOfAFusedChain) {
  const FusionSetting fused(true);
  const Tensor x = vec({1, -1, 2});
  ASSERT_EQ(kernels_for(log(x) * 2 + 1), 1u); // the chain is one kernel
  const detect_anomaly on;
  const int line = __LINE__ + 1;
  const Anomaly a = anomaly_of([&] { (log(x) * 2 + 1).realize(); });
  EXPECT_EQ(a.op, "log");
  EXPECT_EQ(a.index, (std::vector<int64_t>{1}));
  EXPECT_EQ(a.line, here(line));
  EXPECT_NE(a.kernel, "");
}

TEST_F(AnomalyMode, FindsALaterOpOfAFusedChainWhoseInputsWereFinite) {
  const FusionSetting fused(true);
  const Tensor x = vec({1, 2, 3});
  const Tensor a1 = x * 2 + 1;
  const int line = __LINE__ + 1;
  const Tensor b = sqrt(a1 - 6) * 3 + 1;
  ASSERT_EQ(kernels_for(a1 * 3 + (sqrt(a1 - 6) * 3 + 1)), 1u);
  const detect_anomaly on;
  const Anomaly a = anomaly_of([&] { (a1 * 3 + b).realize(); });
  EXPECT_EQ(a.op, "sqrt");
  EXPECT_EQ(a.index, (std::vector<int64_t>{0})); // sqrt(3 - 6)
  EXPECT_EQ(a.line, here(line));
}

TEST_F(AnomalyMode, AMaskedNaNIsNotBlamedInAFusedKernel) {
  const Tensor x = vec({-1, 4, 9});
  // log(-1) is NaN but where() drops it; the NaN that reaches the result is sqrt's.
  const int log_line = __LINE__ + 1;
  const Tensor masked = where(x > 0, log(x), zeros({3}));
  const int line = __LINE__ + 1;
  auto f = [&] { (masked + sqrt(x - 5)).realize(); };
  {
    const FusionSetting unfused(false); // every op's output is checked: log's own NaN is seen
    const detect_anomaly on;
    const Anomaly a = anomaly_of(f);
    EXPECT_EQ(a.op, "log");
    EXPECT_EQ(a.line, here(log_line));
  }
  const FusionSetting fused(true);
  const detect_anomaly on;
  const Anomaly a = anomaly_of(f);
  EXPECT_EQ(a.op, "sqrt");
  EXPECT_EQ(a.index, (std::vector<int64_t>{0}));
  EXPECT_EQ(a.line, here(line));
  EXPECT_NO_THROW(masked.realize()); // alone, nothing non-finite leaves the fused kernel
}

TEST_F(AnomalyMode, AnOpFedANonFiniteValueIsNotBlamedForIt) {
  const Tensor data = vec({INFINITY, 3, 8}), mixed = vec({INFINITY, -1, 2});
  for (const bool fusion : {true, false}) {
    const FusionSetting s(fusion);
    const detect_anomaly on;
    // sub passes the data's inf on: the data is reported, not sub nor log.
    int line = __LINE__ + 1;
    Anomaly a = anomaly_of([&] { log(data - 4).realize(); });
    EXPECT_TRUE(a.from_input) << a.op;
    EXPECT_EQ(a.index, (std::vector<int64_t>{0}));
    EXPECT_EQ(a.line, here(line));
    // log passes an inf on and makes a NaN of its own from -1: log is blamed, at the NaN.
    line = __LINE__ + 1;
    a = anomaly_of([&] { log(mixed).realize(); });
    EXPECT_FALSE(a.from_input);
    EXPECT_EQ(a.op, "log");
    EXPECT_EQ(a.value, "NaN");
    EXPECT_EQ(a.index, (std::vector<int64_t>{1}));
    EXPECT_EQ(a.line, here(line));
  }
}

TEST_F(AnomalyMode, ANonFiniteValueInTheDataIsReportedAsSuch) {
  const Tensor data = vec({1, NAN, 3});
  const detect_anomaly on;
  std::string msg;
  const int line = __LINE__ + 1;
  const Anomaly a = anomaly_of([&] { (data * 2).realize(); }, &msg);
  EXPECT_TRUE(a.from_input);
  EXPECT_EQ(a.op, "input");
  EXPECT_EQ(a.index, (std::vector<int64_t>{1}));
  EXPECT_EQ(a.line, here(line)); // the first op reading it
  EXPECT_NE(msg.find("already held NaN at element [1]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the first op reading it is mul"), std::string::npos) << msg;
  // Through views of it, the op named is the first that computes with it.
  const int view_line = __LINE__ + 1;
  const Anomaly b = anomaly_of([&] { (data.detach().reshape({3, 1}).expand({3, 2}) * 2).realize(); }, &msg);
  EXPECT_TRUE(b.from_input);
  EXPECT_EQ(b.line, here(view_line));
  EXPECT_NE(msg.find("the first op reading it is mul"), std::string::npos) << msg;
}

TEST_F(AnomalyMode, AFailedIndexCheckIsReportedRatherThanTheNaNItCauses) {
  const detect_anomaly on;
  const Tensor logits = vec({1, 2, 3, 4, 5, 6}).reshape({2, 3});
  const Tensor targets = from_vector<int64_t>({1, 7}) + 0; // lazy: checked in the kernel that reads it
  // The out-of-range class makes the loss meaningless; its index error, not a NaN, is the report.
  try {
    nn::functional::cross_entropy(log(logits - 1.5), targets).item<float>();
    ADD_FAILURE() << "no error";
  } catch (const AnomalyError& e) {
    ADD_FAILURE() << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST_F(AnomalyMode, AGradientThatBecomesInfiniteNamesTheForwardOp) {
  Tensor x = vec({0, 4});
  x.requires_grad_();
  const int line = __LINE__ + 1;
  const Tensor y = sqrt(x).sum();
  EXPECT_EQ(y.item<float>(), 2.0f); // the forward is finite
  const detect_anomaly on;
  std::string msg;
  const Anomaly a = anomaly_of([&] {
    y.backward();
    x.grad().realize();
  }, &msg);
  EXPECT_EQ(a.gradient_of, "sqrt");
  EXPECT_EQ(a.value, "inf");
  EXPECT_EQ(a.index, (std::vector<int64_t>{0}));
  EXPECT_EQ(a.line, here(line));
  EXPECT_NE(msg.find("in the gradient of sqrt (backward)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at " + here(line) + " (the line of that forward op)"), std::string::npos) << msg;
}

TEST_F(AnomalyMode, TheGradientOfLogAtZero) {
  Tensor x = vec({0, 1});
  x.requires_grad_();
  const int line = __LINE__ + 1;
  const Tensor y = (log(x) * 0).sum(); // log(0) = -inf, times 0: NaN; computed with the mode off
  EXPECT_TRUE(std::isnan(y.item<float>()));
  const detect_anomaly on;
  const Anomaly a = anomaly_of([&] {
    y.backward();
    x.grad().realize();
  });
  // d/dx log(x) * 0 = 0 / x: NaN at 0, made by the gradient of log (of mul, 0 is finite).
  EXPECT_EQ(a.gradient_of, "log");
  EXPECT_EQ(a.index, (std::vector<int64_t>{0}));
  EXPECT_EQ(a.line, here(line));
}

TEST_F(AnomalyMode, ATangentThatBecomesInfiniteNamesTheForwardOp) {
  const detect_anomaly on;
  const int line = __LINE__ + 1;
  auto f = [](const Tensor& x) { return sqrt(x) * 2; };
  std::string msg;
  const Anomaly a = anomaly_of([&] { jvp(f, vec({0, 4}), vec({1, 1})).second.realize(); }, &msg);
  EXPECT_EQ(a.tangent_of, "sqrt") << msg;
  EXPECT_EQ(a.gradient_of, "");
  EXPECT_EQ(a.index, (std::vector<int64_t>{0}));
  EXPECT_EQ(a.line, here(line));
  EXPECT_NE(msg.find("in the tangent of sqrt (forward-mode jvp)"), std::string::npos) << msg;
}

TEST_F(AnomalyMode, AnOptimizerStepOnAnInfiniteGradient) {
  Tensor w = vec({0, 1});
  w.requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  const detect_anomaly on;
  const int line = __LINE__ + 1;
  const Tensor loss = sqrt(w).sum();
  const Anomaly a = anomaly_of([&] {
    opt.zero_grad();
    loss.backward();
    opt.step();
    w.realize();
  });
  EXPECT_EQ(a.gradient_of, "sqrt");
  EXPECT_EQ(a.line, here(line));
}

TEST_F(AnomalyMode, ACompiledStep) {
  Tensor w = vec({1, 2});
  w.requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  const int line = __LINE__ + 3;
  auto step = compile([&](const std::vector<Tensor>& in) {
    opt.zero_grad();
    const Tensor loss = log(w * in[0]).sum();
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  });
  const detect_anomaly on;
  EXPECT_TRUE(std::isfinite(step({vec({1, 1})})[0].item<float>()));
  EXPECT_TRUE(std::isfinite(step({vec({1, 1})})[0].item<float>())); // traced again: w has a gradient now
  const size_t traces = step.num_traces();
  const std::vector<float> before = w.to_vector<float>();
  std::string msg;
  const Anomaly a = anomaly_of([&] { step({vec({1, -1})}); }, &msg);
  EXPECT_EQ(step.num_traces(), traces); // found in a replay
  EXPECT_EQ(a.op, "log");
  EXPECT_EQ(a.index, (std::vector<int64_t>{1}));
  EXPECT_EQ(a.line, here(line)) << msg;
  EXPECT_EQ(w.to_vector<float>(), before); // no update was made from it
}

TEST_F(AnomalyMode, NothingIsReportedWhenAllIsFiniteAndResultsAreUnchanged) {
  const Tensor x = randn({16, 8}, 1), w = randn({8, 4}, 2);
  auto f = [&] { return nn::functional::softmax(relu(matmul(x, w)) + 1, 1).sum({0}).to_vector<float>(); };
  const std::vector<float> off = f();
  const detect_anomaly on;
  const std::vector<float> checked = f();
  ASSERT_EQ(off.size(), checked.size());
  EXPECT_EQ(std::memcmp(off.data(), checked.data(), off.size() * sizeof(float)), 0);
}

TEST_F(AnomalyMode, OffTheNaNIsReturnedAsBefore) {
  ASSERT_FALSE(anomaly_mode_enabled());
  EXPECT_TRUE(std::isnan(log(vec({-1})).item<float>()));
  const detect_anomaly on;
  {
    const detect_anomaly off(false); // scopes nest
    EXPECT_TRUE(std::isnan(log(vec({-2})).item<float>()));
  }
  EXPECT_THROW(log(vec({-3})).item<float>(), AnomalyError);
}

TEST_F(AnomalyMode, TheScopeIsPerThread) {
  const detect_anomaly on;
  bool other = true;
  float value = 0;
  std::thread t([&] {
    other = anomaly_mode_enabled();
    value = log(vec({-4})).item<float>();
  });
  t.join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(std::isnan(value));
}

TEST_F(AnomalyMode, TheOptionTurnsItOnForEveryThread) {
  options().detect_anomaly = true; // what KILN_DETECT_ANOMALY=1 sets
  bool other = false;
  std::thread t([&] { other = anomaly_mode_enabled(); });
  t.join();
  const bool threw = [] {
    try {
      log(vec({-5})).item<float>();
    } catch (const AnomalyError&) {
      return true;
    }
    return false;
  }();
  options().detect_anomaly = false;
  EXPECT_TRUE(other);
  EXPECT_TRUE(threw);
}

// Run by TheEnvironmentVariable in a child process with KILN_DETECT_ANOMALY set.
TEST(AnomalyChild, DISABLED_Run) {
  const Tensor x = vec({2, 1});
  try {
    std::printf("VALUE %s\n", std::isnan(sqrt(x - 1.5).sum().item<float>()) ? "NaN" : "finite");
  } catch (const AnomalyError& e) {
    std::printf("ANOMALY %s at %s\n", e.anomaly().op.c_str(), e.anomaly().line.c_str());
  }
}

std::string run_child(const std::string& env) { return test::run_child_test(env, "AnomalyChild.DISABLED_Run"); }

TEST_F(AnomalyMode, TheEnvironmentVariable) {
  const std::string on = run_child("KILN_DETECT_ANOMALY=1");
  EXPECT_NE(on.find("ANOMALY sqrt at test_anomaly.cpp:"), std::string::npos) << on;
  const std::string off = run_child("KILN_DETECT_ANOMALY=0");
  EXPECT_NE(off.find("VALUE NaN"), std::string::npos) << off;
}

TEST_F(AnomalyMode, UnfusedGivesTheSameReport) {
  const Tensor x = vec({1, 2, 3});
  const int line = __LINE__ + 1;
  auto f = [&] { (exp(x) * 0 + log(x - 2) * 3).realize(); };
  Anomaly fused, unfused;
  {
    const FusionSetting s(true);
    const detect_anomaly on;
    fused = anomaly_of(f);
  }
  {
    const FusionSetting s(false);
    const detect_anomaly on;
    unfused = anomaly_of(f);
  }
  EXPECT_EQ(fused.op, "log");
  EXPECT_EQ(fused.index, (std::vector<int64_t>{0}));
  EXPECT_EQ(fused.line, here(line));
  EXPECT_EQ(unfused.op, fused.op);
  EXPECT_EQ(unfused.index, fused.index);
  EXPECT_EQ(unfused.value, fused.value);
  EXPECT_EQ(unfused.line, fused.line);
}

} // namespace
} // namespace kiln

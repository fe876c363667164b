// Learning-rate schedulers against a generated table of torch 1.13's (ExponentialLR, MultiStepLR,
// LinearLR, ConstantLR, LambdaLR, OneCycleLR, ReduceLROnPlateau, PolynomialLR, CosineAnnealingWarmRestarts,
// CyclicLR, SequentialLR), exact resume (set_epoch, and
// ReduceLROnPlateau's saved state, through a checkpoint), a compiled step following the schedules
// without recompiling, and their errors.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <set>
#include <unistd.h>

#include "kiln/checkpoint.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "runtime/executor.h"
#include "tests/error_of.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct SchedulerCase {
  const char* name;
  std::string kind;             ///< exponential, ..., plateau, polynomial, warmrestarts(_epochs), cyclic, sequential
  double lr;                    ///< the optimizer's lr at construction
  std::vector<double> reals;    ///< the kind's real arguments (see the generator)
  std::vector<int64_t> ints;    ///< the kind's integer arguments
  std::string mode;             ///< the lambda's name, OneCycleLR's anneal, ReduceLROnPlateau's modes, ...
  std::vector<double> metrics;  ///< ReduceLROnPlateau's metric (warmrestarts_epochs: the epoch) at each step
  std::vector<double> lrs;      ///< torch's lr at construction and after each step
};

#include "pytorch_scheduler_table.inc"

// The generator's LambdaLR lambdas, the same expressions.
std::function<double(int64_t)> lambda_named(const std::string& name) {
  if (name == "pow_0.95") return [](int64_t e) { return std::pow(0.95, static_cast<double>(e)); };
  if (name == "inverse") return [](int64_t e) { return 1.0 / (1.0 + 0.5 * static_cast<double>(e)); };
  if (name == "steps_of_3") return [](int64_t e) { return static_cast<double>(e / 3) + 0.25; };
  ADD_FAILURE() << "no lambda " << name;
  return {};
}

// The generator's CyclicLR scale functions (SCALE_FNS), the same expressions; empty for PyTorch's modes.
std::function<double(double)> scale_fn_named(const std::string& name) {
  if (name == "fn_cycle") return [](double x) { return 1.0 / (1.0 + x); };
  if (name == "fn_iterations") return [](double x) { return std::pow(0.99, x); };
  return {};
}

optim::CyclicMode cyclic_mode(const std::string& name) {
  if (name == "triangular2") return optim::CyclicMode::triangular2;
  if (name == "exp_range") return optim::CyclicMode::exp_range;
  return optim::CyclicMode::triangular;
}

// The generator's SEQUENCES, constructed in the same order.
std::vector<std::shared_ptr<optim::LRScheduler>> sequence_named(const std::string& name, optim::Optimizer& o) {
  using namespace optim;
  if (name == "constant_exponential")
    return {std::make_shared<ConstantLR>(o, 0.1, 2), std::make_shared<ExponentialLR>(o, 0.9)};
  if (name == "linear_cosine")
    return {std::make_shared<LinearLR>(o, 0.1, 1.0, 3), std::make_shared<CosineAnnealingLR>(o, 6, 0.001)};
  if (name == "linear_step_polynomial")
    return {std::make_shared<LinearLR>(o, 0.25, 1.0, 4), std::make_shared<StepLR>(o, 2, 0.5),
            std::make_shared<PolynomialLR>(o, 4, 2.0)};
  if (name == "linear_warm_restarts")
    return {std::make_shared<LinearLR>(o, 0.5, 1.0, 2), std::make_shared<CosineAnnealingWarmRestarts>(o, 3, 2)};
  if (name == "multistep_lambda")
    return {std::make_shared<MultiStepLR>(o, std::vector<int64_t>{1, 3}, 0.5),
            std::make_shared<LambdaLR>(o, lambda_named("pow_0.95"))};
  if (name == "cyclic_exponential")
    return {std::make_shared<CyclicLR>(o, 0.01, 0.1, CyclicLROptions{.step_size_up = 2}),
            std::make_shared<ExponentialLR>(o, 0.8)};
  if (name == "onecycle_constant")
    return {std::make_shared<OneCycleLR>(o, 0.5, 6), std::make_shared<ConstantLR>(o, 0.5, 2)};
  ADD_FAILURE() << "no sequence " << name;
  return {};
}

std::unique_ptr<optim::LRScheduler> make_schedule(const SchedulerCase& c, optim::Optimizer& opt) {
  const auto& r = c.reals;
  const auto& n = c.ints;
  if (c.kind == "exponential") return std::make_unique<optim::ExponentialLR>(opt, r[0]);
  if (c.kind == "multistep") return std::make_unique<optim::MultiStepLR>(opt, n, r[0]);
  if (c.kind == "linear") return std::make_unique<optim::LinearLR>(opt, r[0], r[1], n[0]);
  if (c.kind == "constant") return std::make_unique<optim::ConstantLR>(opt, r[0], n[0]);
  if (c.kind == "lambda") return std::make_unique<optim::LambdaLR>(opt, lambda_named(c.mode));
  if (c.kind == "onecycle") {
    const optim::OneCycleLROptions o{.pct_start = r[1],
                                     .anneal_strategy = c.mode == "cos" ? optim::Anneal::cos : optim::Anneal::linear,
                                     .div_factor = r[2], .final_div_factor = r[3], .three_phase = n[1] != 0};
    return std::make_unique<optim::OneCycleLR>(opt, r[0], n[0], o);
  }
  if (c.kind == "polynomial") return std::make_unique<optim::PolynomialLR>(opt, n[0], r[0]);
  if (c.kind.rfind("warmrestarts", 0) == 0)
    return std::make_unique<optim::CosineAnnealingWarmRestarts>(opt, n[0], n[1], r[0]);
  if (c.kind == "cyclic") {
    const std::function<double(double)> fn = scale_fn_named(c.mode);
    const optim::CyclicLROptions o{
        .step_size_up = r[2], .step_size_down = r[3] < 0 ? std::nullopt : std::optional<double>(r[3]),
        .mode = cyclic_mode(c.mode), .gamma = r[4], .scale_fn = fn,
        .scale_mode = c.mode == "fn_iterations" ? optim::ScaleMode::iterations : optim::ScaleMode::cycle};
    return std::make_unique<optim::CyclicLR>(opt, r[0], r[1], o);
  }
  if (c.kind == "sequential") return std::make_unique<optim::SequentialLR>(opt, sequence_named(c.mode, opt), n);
  ADD_FAILURE() << "no scheduler " << c.kind;
  return nullptr;
}

optim::ReduceLROnPlateauOptions plateau_options(const SchedulerCase& c) {
  return {.mode = c.mode.rfind("max", 0) == 0 ? optim::PlateauMode::max : optim::PlateauMode::min,
          .factor = c.reals[0], .patience = c.ints[0], .threshold = c.reals[1],
          .threshold_mode = c.mode.find("abs") != std::string::npos ? optim::ThresholdMode::abs
                                                                     : optim::ThresholdMode::rel,
          .cooldown = c.ints[1], .min_lr = c.reals[2], .eps = c.reals[3]};
}

Tensor param() { return from_vector(std::vector<double>{1.0, -2.0}).requires_grad_(); }

// The lrs a case gives in kiln: at construction, then after each step.
std::vector<double> run_case(const SchedulerCase& c) {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = c.lr});
  std::vector<double> out;
  if (c.kind == "plateau") {
    optim::ReduceLROnPlateau s(opt, plateau_options(c));
    out.push_back(opt.lr());
    for (double m : c.metrics) {
      s.step(m);
      out.push_back(opt.lr());
    }
    return out;
  }
  auto s = make_schedule(c, opt);
  out.push_back(opt.lr());
  for (size_t e = 1; e < c.lrs.size(); ++e) {
    if (c.kind == "warmrestarts_epochs") dynamic_cast<optim::CosineAnnealingWarmRestarts&>(*s).step(c.metrics[e - 1]);
    else s->step();
    out.push_back(opt.lr());
  }
  return out;
}

} // namespace

// Within 1e-12 relative (PyTorch's recursive forms differ from kiln's closed forms by a few ulps; the
// table's comments give each case's difference between torch's own two forms).
TEST(TorchTable, EverySchedulerMatchesPyTorch) {
  std::set<std::string> kinds;
  for (const SchedulerCase& c : kSchedulerCases) {
    const std::vector<double> got = run_case(c);
    ASSERT_EQ(got.size(), c.lrs.size()) << c.name;
    for (size_t e = 0; e < got.size(); ++e)
      EXPECT_NEAR(got[e], c.lrs[e], 1e-12 * std::fabs(c.lrs[e])) << c.name << ", epoch " << e;
    kinds.insert(c.kind);
  }
  EXPECT_EQ(kinds.size(), 12u);
}

// set_epoch(e) on a fresh schedule gives the uninterrupted run's lr at e, bit for bit.
TEST(Resume, SetEpochGivesTheUninterruptedRunsLrs) {
  for (const SchedulerCase& c : kSchedulerCases) {
    if (c.kind == "plateau" || c.kind == "warmrestarts_epochs") continue;
    const std::vector<double> run = run_case(c);
    for (size_t e = 0; e < run.size(); ++e) {
      Tensor p = param();
      optim::SGD opt({p}, {.lr = c.lr});
      auto s = make_schedule(c, opt);
      s->set_epoch(static_cast<int64_t>(e));
      EXPECT_EQ(opt.lr(), run[e]) << c.name << ", epoch " << e;
      EXPECT_EQ(s->epoch(), static_cast<int64_t>(e));
    }
  }
}

// ReduceLROnPlateau resumed from its state_dict() after k steps (into a fresh optimizer and scheduler)
// continues exactly as the uninterrupted run, for every k.
TEST(Resume, ReduceLROnPlateauStateContinuesExactly) {
  for (const SchedulerCase& c : kSchedulerCases) {
    if (c.kind != "plateau") continue;
    const std::vector<double> run = run_case(c);
    for (size_t k = 0; k <= c.metrics.size(); ++k) {
      Tensor p = param(), q = param();
      optim::SGD first({p}, {.lr = c.lr}), second({q}, {.lr = c.lr});
      optim::ReduceLROnPlateau a(first, plateau_options(c)), b(second, plateau_options(c));
      for (size_t s = 0; s < k; ++s) a.step(c.metrics[s]);
      b.load_state_dict(a.state_dict());
      EXPECT_EQ(b.best(), a.best());
      EXPECT_EQ(b.num_bad_epochs(), a.num_bad_epochs());
      EXPECT_EQ(b.cooldown_counter(), a.cooldown_counter());
      EXPECT_EQ(b.epoch(), static_cast<int64_t>(k));
      EXPECT_EQ(second.lr(), run[k]) << c.name << " after " << k;
      for (size_t s = k; s < c.metrics.size(); ++s) {
        b.step(c.metrics[s]);
        EXPECT_EQ(second.lr(), run[s + 1]) << c.name << ": resumed after " << k << ", step " << s + 1;
      }
    }
  }
}

// The state travels in a checkpoint's metadata, as examples/train stores its epoch.
TEST(Resume, ReduceLROnPlateauStateInACheckpoint) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_plateau_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "ckpt.safetensors").string();
  nn::Linear model(2, 1);
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  optim::ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 1, .cooldown = 1});
  for (double m : {1.0, 0.8, 0.8, 0.9, 0.95}) plateau.step(m);
  checkpoint::Metadata meta = plateau.state_dict();
  meta["epoch"] = "5";
  checkpoint::save(path, model, &opt, meta);

  nn::Linear model2(2, 1);
  optim::SGD opt2(model2.parameters(), {.lr = 0.1});
  optim::ReduceLROnPlateau plateau2(opt2, {.factor = 0.5, .patience = 1, .cooldown = 1});
  plateau2.load_state_dict(checkpoint::load(path, model2, &opt2));
  EXPECT_EQ(opt2.lr(), opt.lr());
  EXPECT_EQ(plateau2.best(), 0.8);
  EXPECT_EQ(plateau2.epoch(), 5);
  for (double m : {0.9, 0.9, 0.7, 0.9, 0.9, 0.9}) {
    plateau.step(m);
    plateau2.step(m);
    EXPECT_EQ(opt2.lr(), opt.lr());
  }
  EXPECT_LT(opt.lr(), 0.05) << "the metrics reduce the lr after the resume too";
  fs::remove_all(dir);
}

// The schedules drive SGD inside compile(): each replay reads the scheduled lr (the update matches
// p -= lr c p computed here), and the step neither traces nor compiles again.
TEST(CompiledStep, SchedulesDriveTheOptimizerWithoutRecompiling) {
  const std::vector<double> c{0.5, 1.5};
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::OneCycleLR one_cycle(opt, 0.4, 12, {.anneal_strategy = optim::Anneal::linear});
  optim::ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 0});
  auto step = compile([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    Tensor loss = (a[0] * p * p).sum() / 2.0;
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  std::vector<double> want = p.to_vector<double>();
  size_t compiles = 0, traces = 0;
  for (int64_t s = 0; s < 12; ++s) {
    const double lr = opt.lr();
    step({from_vector(c)});
    for (size_t k = 0; k < want.size(); ++k) want[k] -= lr * (c[k] * want[k]);
    EXPECT_EQ(p.to_vector<double>(), want) << "step " << s;
    if (s == 1) compiles = runtime::executor_stats().compiles, traces = step.num_traces();
    if (s < 8) one_cycle.step();
    else plateau.step(1.0); // no improvement after the first: halves the lr every step
  }
  EXPECT_EQ(runtime::executor_stats().compiles, compiles);
  EXPECT_EQ(step.num_traces(), traces);
  EXPECT_EQ(opt.lr(), one_cycle.lr_at(8) / 8) << "three halvings after the first metric";
}

// The same for the schedules sequenced by SequentialLR (a warm-up, then cyclic, then warm restarts): each
// replay reads the lr the running schedule sets.
TEST(CompiledStep, SequentialLRDrivesTheOptimizerWithoutRecompiling) {
  const std::vector<double> c{0.5, 1.5};
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.1});
  auto warmup = std::make_shared<optim::LinearLR>(opt, 0.2, 1.0, 3);
  auto cyclic = std::make_shared<optim::CyclicLR>(opt, 0.01, 0.1, optim::CyclicLROptions{.step_size_up = 2});
  auto restarts = std::make_shared<optim::CosineAnnealingWarmRestarts>(opt, 2, 2, 0.001);
  optim::SequentialLR schedule(opt, {warmup, cyclic, restarts}, {3, 7});
  auto step = compile([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    Tensor loss = (a[0] * p * p).sum() / 2.0;
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  std::vector<double> want = p.to_vector<double>();
  std::set<double> lrs;
  size_t compiles = 0, traces = 0;
  for (int64_t s = 0; s < 14; ++s) {
    const double lr = opt.lr();
    EXPECT_EQ(lr, schedule.lr_at(s));
    lrs.insert(lr);
    step({from_vector(c)});
    for (size_t k = 0; k < want.size(); ++k) want[k] -= lr * (c[k] * want[k]);
    EXPECT_EQ(p.to_vector<double>(), want) << "step " << s;
    if (s == 1) compiles = runtime::executor_stats().compiles, traces = step.num_traces();
    schedule.step();
  }
  EXPECT_EQ(runtime::executor_stats().compiles, compiles);
  EXPECT_EQ(step.num_traces(), traces);
  EXPECT_GE(lrs.size(), 8u) << "the lr changed along the way";
}

// A fractional step(epoch) leaves epoch() at its floor, and the next step() is set_epoch(floor + 1).
TEST(CosineAnnealingWarmRestarts, FractionalEpochsThenWholeOnes) {
  Tensor p = param();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::CosineAnnealingWarmRestarts s(opt, 3, 2);
  s.step(2.5);
  EXPECT_EQ(s.epoch(), 2);
  EXPECT_EQ(opt.lr(), s.fractional_lr_at(2.5));
  EXPECT_NEAR(opt.lr(), 0.05 * (1 + std::cos(M_PI * 2.5 / 3)), 1e-17);
  s.step();
  EXPECT_EQ(opt.lr(), 0.1) << "epoch 3 restarts";
  EXPECT_EQ(s.fractional_lr_at(3.0), s.lr_at(3)) << "lr_at(3) is not ambiguous";
}

// At epoch total_steps, after the last update, OneCycleLR gives the min lr (PyTorch extrapolates).
TEST(OneCycleLR, EndsAtTheMinLr) {
  for (const optim::Anneal a : {optim::Anneal::cos, optim::Anneal::linear}) {
    for (const bool three_phase : {false, true}) {
      Tensor p = param();
      optim::SGD opt({p}, {.lr = 1.0});
      optim::OneCycleLR s(opt, 0.5, 17, {.anneal_strategy = a, .div_factor = 5, .three_phase = three_phase});
      EXPECT_NEAR(opt.lr(), 0.1, 1e-16) << "max_lr / div_factor, to rounding";
      s.set_epoch(17);
      EXPECT_EQ(opt.lr(), 0.1 / 1e4);
      EXPECT_NEAR(s.lr_at(16), 0.1 / 1e4, 1e-15) << "the last update's lr is the min lr, to the rounding of max_lr";
    }
  }
}

TEST(Errors, SchedulersNameThemselvesTheValueAndTheCallersLine) {
  using test::expect_error_at;
  Tensor p = param();
  optim::SGD sgd({p}, {.lr = 1.0});
  const std::string file = __FILE__;
  expect_error_at([&] { (void)optim::ExponentialLR(sgd, -0.5); }, file, __LINE__, "ExponentialLR", {"gamma", "-0.5"});
  expect_error_at([&] { (void)optim::MultiStepLR(sgd, {3, -1}); }, file, __LINE__, "MultiStepLR",
                  {"milestones", "got -1"});
  expect_error_at([&] { (void)optim::MultiStepLR(sgd, {3}, kNaN); }, file, __LINE__, "MultiStepLR", {"gamma", "nan"});
  expect_error_at([&] { (void)optim::LinearLR(sgd, 1.5); }, file, __LINE__, "LinearLR", {"start_factor", "1.5"});
  expect_error_at([&] { (void)optim::LinearLR(sgd, 0.5, -0.25); }, file, __LINE__, "LinearLR", {"end_factor", "-0.25"});
  expect_error_at([&] { (void)optim::LinearLR(sgd, 0.5, 1.0, 0); }, file, __LINE__, "LinearLR", {"total_iters", "got 0"});
  expect_error_at([&] { (void)optim::ConstantLR(sgd, 1.01); }, file, __LINE__, "ConstantLR", {"factor", "1.01"});
  expect_error_at([&] { (void)optim::ConstantLR(sgd, 0.5, -2); }, file, __LINE__, "ConstantLR",
                  {"total_iters", "got -2"});
  expect_error_at([&] { (void)optim::LambdaLR(sgd, nullptr); }, file, __LINE__, "LambdaLR", {"lr_lambda"});
  optim::LambdaLR down(sgd, [](int64_t e) { return 1.0 - static_cast<double>(e); });
  down.step(); // lr 0
  expect_error_at([&] { down.step(); }, file, __LINE__, "LambdaLR", {"epoch 2 gives an invalid learning rate: -1"});
  expect_error_at([&] { (void)optim::OneCycleLR(sgd, 0.1, 0); }, file, __LINE__, "OneCycleLR", {"total_steps", "got 0"});
  expect_error_at([&] { (void)optim::OneCycleLR(sgd, 0.1, 10, {.pct_start = 1.2}); }, file, __LINE__, "OneCycleLR",
                  {"pct_start", "1.2"});
  expect_error_at([&] { (void)optim::OneCycleLR(sgd, 0.1, 10, {.div_factor = 0}); }, file, __LINE__, "OneCycleLR",
                  {"div_factor", "0"});
  expect_error_at([&] { (void)optim::OneCycleLR(sgd, 0.1, 10, {.cycle_momentum = true}); }, file, __LINE__,
                  "OneCycleLR", {"cycle_momentum is not supported"});
  optim::OneCycleLR one_cycle(sgd, 0.1, 3);
  one_cycle.set_epoch(3); // torch too allows total_steps + 1 lrs
  expect_error_at([&] { one_cycle.step(); }, file, __LINE__, "OneCycleLR", {"tried to step 5 times", "total_steps is 3"});
  EXPECT_EQ(one_cycle.epoch(), 3) << "a refused step leaves the epoch";
  expect_error_at([&] { one_cycle.set_epoch(-1); }, file, __LINE__, "OneCycleLR", {"non-negative, got -1"});
  expect_error_at([&] { (void)optim::ReduceLROnPlateau(sgd, {.factor = 1.0}); }, file, __LINE__, "ReduceLROnPlateau",
                  {"factor", "1"});
  expect_error_at([&] { (void)optim::ReduceLROnPlateau(sgd, {.patience = -1}); }, file, __LINE__, "ReduceLROnPlateau",
                  {"patience", "-1"});
  expect_error_at([&] { (void)optim::ReduceLROnPlateau(sgd, {.min_lr = -1e-10}); }, file, __LINE__,
                  "ReduceLROnPlateau", {"min_lr", "-1e-10"});
  expect_error_at([&] { (void)optim::PolynomialLR(sgd, 0); }, file, __LINE__, "PolynomialLR", {"total_iters", "got 0"});
  expect_error_at([&] { (void)optim::PolynomialLR(sgd, 5, kNaN); }, file, __LINE__, "PolynomialLR", {"power", "nan"});
  optim::PolynomialLR to_infinity(sgd, 2, -1.0);
  expect_error_at([&] { to_infinity.set_epoch(2); }, file, __LINE__, "PolynomialLR",
                  {"epoch 2 gives an invalid learning rate: inf"});
  const char* warm = "CosineAnnealingWarmRestarts";
  expect_error_at([&] { (void)optim::CosineAnnealingWarmRestarts(sgd, 0); }, file, __LINE__, warm, {"T_0", "got 0"});
  expect_error_at([&] { (void)optim::CosineAnnealingWarmRestarts(sgd, 3, 0); }, file, __LINE__, warm,
                  {"T_mult >= 1", "got 0"});
  optim::CosineAnnealingWarmRestarts restarts(sgd, 3);
  expect_error_at([&] { restarts.step(-0.5); }, file, __LINE__, warm, {"non-negative epoch, got -0.5"});
  expect_error_at([&] { (void)optim::CyclicLR(sgd, -0.1, 0.1); }, file, __LINE__, "CyclicLR", {"base_lr", "-0.1"});
  expect_error_at([&] { (void)optim::CyclicLR(sgd, 0.1, 0.2, {.step_size_up = 0}); }, file, __LINE__, "CyclicLR",
                  {"step_size_up", "0"});
  expect_error_at([&] { (void)optim::CyclicLR(sgd, 0.1, 0.2, {.step_size_down = -1}); }, file, __LINE__, "CyclicLR",
                  {"step_size_down", "-1"});
  expect_error_at([&] { (void)optim::CyclicLR(sgd, 0.1, 0.2, {.cycle_momentum = true}); }, file, __LINE__,
                  "CyclicLR", {"cycle_momentum is not supported"});
  auto first = std::make_shared<optim::ConstantLR>(sgd, 0.5, 2), second = std::make_shared<optim::ConstantLR>(sgd);
  expect_error_at([&] { (void)optim::SequentialLR(sgd, {first, second}, {}); }, file, __LINE__, "SequentialLR",
                  {"one more scheduler than milestones", "2 schedulers and 0 milestones"});
  expect_error_at([&] { (void)optim::SequentialLR(sgd, {first, second, second}, {3, 3}); }, file, __LINE__,
                  "SequentialLR", {"increasing positive milestones, got 3 at index 1"});
  expect_error_at([&] { (void)optim::SequentialLR(sgd, {first, second}, {0}); }, file, __LINE__, "SequentialLR",
                  {"increasing positive milestones, got 0 at index 0"});
  expect_error_at([&] { (void)optim::SequentialLR(sgd, {}, {}); }, file, __LINE__, "SequentialLR",
                  {"at least one scheduler"});
  Tensor q = param();
  optim::SGD other({q}, {.lr = 1.0});
  auto elsewhere = std::make_shared<optim::ConstantLR>(other);
  expect_error_at([&] { (void)optim::SequentialLR(sgd, {first, elsewhere}, {2}); }, file, __LINE__, "SequentialLR",
                  {"same optimizer", "scheduler 1"});
  auto short_cycle = std::make_shared<optim::OneCycleLR>(sgd, 0.1, 3);
  optim::SequentialLR ends(sgd, {short_cycle, second}, {5});
  expect_error_at([&] { ends.set_epoch(4); }, file, __LINE__, "OneCycleLR", {"tried to step 5 times"});
  optim::ReduceLROnPlateau plateau(sgd);
  optim::SchedulerState state = plateau.state_dict();
  state.erase("plateau.best");
  state["plateau.num_bad_epochs"] = "3x";
  const double lr = sgd.lr();
  expect_error_at([&] { plateau.load_state_dict(state); }, file, __LINE__, "ReduceLROnPlateau",
                  {"missing \"plateau.best\"", "\"plateau.num_bad_epochs\" is not a number: '3x'"});
  EXPECT_EQ(sgd.lr(), lr) << "nothing is restored";
}

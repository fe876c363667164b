// Optimizers against hand-computed updates, learning-rate schedules, bounded
// memory across training steps, safetensors checkpoints (round trip, corrupt
// files, mismatches) and exact resume.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sys/file.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "graph/node.h"
#include "tests/error_of.h"
#include "kiln/checkpoint.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "runtime/executor.h"
#include "runtime/storage.h"

using namespace kiln;
namespace F = kiln::nn::functional;
namespace fs = std::filesystem;

namespace {

// The test problem: loss = sum(c * p^2) / 2 + sum(d * p), so grad = c * p + d.
const std::vector<double> kP0{1.0, -2.0, 0.5}, kC{1.0, 0.5, 3.0}, kD{0.1, -0.2, 0.3};

Tensor make_param() { return from_vector(kP0).requires_grad_(); }

std::vector<double> grad_of(const std::vector<double>& p) {
  std::vector<double> g(p.size());
  for (size_t i = 0; i < p.size(); ++i) g[i] = kC[i] * p[i] + kD[i];
  return g;
}

// Runs `steps` optimizer steps on the test problem, realizing parameter and state each step.
std::vector<double> run_steps(optim::Optimizer& opt, Tensor& p, int steps) {
  const Tensor c = from_vector(kC), d = from_vector(kD);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = (c * p * p).sum() / 2.0 + (d * p).sum();
    loss.backward();
    opt.step();
    std::vector<Tensor> all = opt.state();
    all.push_back(p);
    kiln::realize(all);
  }
  return p.to_vector<double>();
}

void expect_all_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// torch.optim.SGD, written out on doubles.
std::vector<double> sgd_reference(optim::SGDOptions o, int steps) {
  std::vector<double> p = kP0, buf;
  for (int s = 0; s < steps; ++s) {
    std::vector<double> g = grad_of(p);
    for (size_t i = 0; i < p.size(); ++i) g[i] += o.weight_decay * p[i];
    if (o.momentum != 0) {
      if (buf.empty()) buf = g;
      else
        for (size_t i = 0; i < p.size(); ++i) buf[i] = o.momentum * buf[i] + (1 - o.dampening) * g[i];
      for (size_t i = 0; i < p.size(); ++i) g[i] = o.nesterov ? g[i] + o.momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= o.lr * g[i];
  }
  return p;
}

// torch.optim.Adam / AdamW, written out on doubles.
std::vector<double> adam_reference(double lr, double b1, double b2, double eps, double wd, bool decoupled, bool amsgrad,
                                   int steps) {
  std::vector<double> p = kP0, m(3, 0), v(3, 0), vmax(3, 0);
  for (int t = 1; t <= steps; ++t) {
    std::vector<double> g = grad_of(p);
    for (size_t i = 0; i < 3; ++i) {
      if (decoupled) p[i] *= 1 - lr * wd;
      else g[i] += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      vmax[i] = std::max(vmax[i], v[i]);
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      const double vv = amsgrad ? vmax[i] : v[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(vv) / std::sqrt(bc2) + eps);
    }
  }
  return p;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_test_optim_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

using kiln::test::error_of;

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

} // namespace

// ---------------------------------------------------------------- hand-computed updates

TEST(SGD, MomentumByHand) {
  // loss = p^2 / 2 from p = 1, lr 0.1, momentum 0.9: p = 0.9, 0.72, 0.486.
  Tensor p = from_vector<double>({1.0}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  std::vector<double> want{0.9, 0.72, 0.486};
  for (double w : want) {
    opt.zero_grad();
    (p * p / 2.0).sum().backward();
    opt.step();
    kiln::realize({p});
    EXPECT_NEAR(p.item<double>(), w, 1e-15);
  }
  EXPECT_EQ(opt.steps(0), 3);
}

TEST(SGD, NesterovByHand) {
  // Nesterov: p = 1 - 0.1 * (1 + 0.9 * 1) = 0.81, then 0.81 - 0.1 * (0.81 + 0.9 * 1.71) = 0.5751.
  Tensor p = from_vector<double>({1.0}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  for (double w : {0.81, 0.5751}) {
    opt.zero_grad();
    (p * p / 2.0).sum().backward();
    opt.step();
    kiln::realize(opt.state());
    EXPECT_NEAR(p.item<double>(), w, 1e-15);
  }
}

TEST(SGD, ThreeStepsMatchTorchFormulas) {
  for (optim::SGDOptions o : {optim::SGDOptions{.lr = 0.1}, optim::SGDOptions{.lr = 0.1, .weight_decay = 0.05},
                              optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01},
                              optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true}}) {
    Tensor p = make_param();
    optim::SGD opt({p}, o);
    expect_all_near(run_steps(opt, p, 3), sgd_reference(o, 3), 1e-14);
  }
}

TEST(Adam, ThreeStepsMatchTorchFormulas) {
  {
    Tensor p = make_param();
    optim::Adam opt({p}, {.lr = 0.1});
    expect_all_near(run_steps(opt, p, 3), adam_reference(0.1, 0.9, 0.999, 1e-8, 0, false, false, 3), 1e-14);
  }
  {
    Tensor p = make_param();
    optim::Adam opt({p}, {.lr = 0.05, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true});
    expect_all_near(run_steps(opt, p, 3), adam_reference(0.05, 0.8, 0.99, 1e-6, 0.1, false, true, 3), 1e-14);
  }
  {
    Tensor p = make_param();
    optim::AdamW opt({p}, {.lr = 0.1});
    EXPECT_EQ(opt.kind(), "adamw");
    expect_all_near(run_steps(opt, p, 3), adam_reference(0.1, 0.9, 0.999, 1e-8, 1e-2, true, false, 3), 1e-14);
  }
}

TEST(Adam, FirstStepByHand) {
  // At t = 1 the bias-corrected step is lr * g / (|g| + eps): p = 1 - 0.1 / (1 + 1e-8).
  Tensor p = from_vector<double>({1.0}).requires_grad_();
  optim::Adam opt({p}, {.lr = 0.1});
  (p * p / 2.0).sum().backward();
  opt.step();
  EXPECT_NEAR(p.item<double>(), 1 - 0.1 / (1 + 1e-8), 1e-15);
}

TEST(Optimizer, SkipsParametersWithoutGradientAndValidates) {
  Tensor a = from_vector<double>({1.0}).requires_grad_(), b = from_vector<double>({2.0}).requires_grad_();
  optim::Adam opt({a, b});
  (a * 3.0).sum().backward();
  opt.step();
  kiln::realize({a, b});
  EXPECT_NE(a.item<double>(), 1.0);
  EXPECT_EQ(b.item<double>(), 2.0);
  EXPECT_EQ(opt.steps(1), 0);
  EXPECT_EQ(opt.state_dict().size(), 4u); // 0.exp_avg, 0.exp_avg_sq, 0.step, 1.step (0: no update yet)
  EXPECT_THROW(optim::SGD({from_vector<double>({1.0})}), Error); // does not require grad
  EXPECT_THROW(optim::SGD({a}, {.lr = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(optim::Adam({a}, {.betas = {1.0, 0.9}}), Error);
}

TEST(Optimizer, LoadStateDictChecksEverything) {
  Tensor p = from_vector<double>({1.0, 2.0}).requires_grad_();
  optim::Adam opt({p});
  const std::string e = error_of([&] {
    opt.load_state_dict({{"0.exp_avg", zeros({3}, kFloat64)}, {"0.momentum_buffer", zeros({2}, kFloat64)},
                         {"5.exp_avg", zeros({2}, kFloat64)}, {"0.step", zeros({}, kFloat32)}});
  });
  EXPECT_NE(e.find("\"0.exp_avg\" is f64[3] but parameter 0 is f64[2]"), std::string::npos) << e;
  EXPECT_NE(e.find("has no state \"momentum_buffer\""), std::string::npos) << e;
  EXPECT_NE(e.find("unexpected entry \"5.exp_avg\""), std::string::npos) << e;
  EXPECT_NE(e.find("\"0.step\" must be i64[]"), std::string::npos) << e;
}

// ---------------------------------------------------------------- PyTorch 1.13's updates (generated table)

namespace {

// Every option of every optimizer, in the order the table's designated initializers name them.
struct OptimOptions {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  std::pair<double, double> betas{0.9, 0.999};
  bool amsgrad = false;
  double alpha = 0.99;
  bool centered = false;
  double lr_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 0;
  double weight_decay = 0;
  bool maximize = false;
  double momentum_decay = 0;
  double rho = 0;
  std::pair<double, double> etas{0.5, 1.2};
  std::pair<double, double> step_sizes{1e-6, 50};
  double lambd = 0;
  double t0 = 0;
};

struct OptimParam {
  IntList shape;
  std::vector<double> p0, c;          ///< the start and the curvature
  std::vector<std::vector<double>> d; ///< the linear term of each step
};

using Trajectory = std::vector<std::vector<std::vector<double>>>; ///< [step][parameter] values

struct OptimCase {
  const char* name;
  std::string kind;
  OptimOptions o;
  int skip;         ///< the step at which the last parameter has no gradient (-1: none)
  double gamma;     ///< StepLR(opt, 1, gamma) after every step (0: none)
  Trajectory f64;   ///< PyTorch's parameters after each step, in f64
  Trajectory f32;   ///< the same run in f32
};

#include "pytorch_optim_table.inc"

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, const OptimOptions& o,
                                                 std::vector<Tensor> ps) {
  if (kind == "sgd")
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening,
                                                              .weight_decay = o.weight_decay, .nesterov = o.nesterov,
                                                              .maximize = o.maximize});
  if (kind == "adam")
    return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = o.lr, .betas = o.betas, .eps = o.eps,
                                                                .weight_decay = o.weight_decay, .amsgrad = o.amsgrad,
                                                                .maximize = o.maximize});
  if (kind == "adamw")
    return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = o.lr, .betas = o.betas, .eps = o.eps,
                                                                  .weight_decay = o.weight_decay, .amsgrad = o.amsgrad,
                                                                  .maximize = o.maximize});
  if (kind == "rmsprop")
    return std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions{.lr = o.lr, .alpha = o.alpha, .eps = o.eps,
                                                                      .weight_decay = o.weight_decay,
                                                                      .momentum = o.momentum, .centered = o.centered,
                                                                      .maximize = o.maximize});
  if (kind == "adagrad")
    return std::make_unique<optim::Adagrad>(ps, optim::AdagradOptions{.lr = o.lr, .lr_decay = o.lr_decay,
                                                                      .weight_decay = o.weight_decay,
                                                                      .initial_accumulator_value = o.initial_accumulator_value,
                                                                      .eps = o.eps, .maximize = o.maximize});
  if (kind == "nadam")
    return std::make_unique<optim::NAdam>(ps, optim::NAdamOptions{.lr = o.lr, .betas = o.betas, .eps = o.eps,
                                                                  .weight_decay = o.weight_decay,
                                                                  .momentum_decay = o.momentum_decay});
  if (kind == "radam")
    return std::make_unique<optim::RAdam>(
        ps, optim::RAdamOptions{.lr = o.lr, .betas = o.betas, .eps = o.eps, .weight_decay = o.weight_decay});
  if (kind == "adamax")
    return std::make_unique<optim::Adamax>(ps, optim::AdamaxOptions{.lr = o.lr, .betas = o.betas, .eps = o.eps,
                                                                    .weight_decay = o.weight_decay,
                                                                    .maximize = o.maximize});
  if (kind == "adadelta")
    return std::make_unique<optim::Adadelta>(ps, optim::AdadeltaOptions{.lr = o.lr, .rho = o.rho, .eps = o.eps,
                                                                        .weight_decay = o.weight_decay,
                                                                        .maximize = o.maximize});
  if (kind == "rprop")
    return std::make_unique<optim::Rprop>(
        ps, optim::RpropOptions{.lr = o.lr, .etas = o.etas, .step_sizes = o.step_sizes, .maximize = o.maximize});
  if (kind == "asgd")
    return std::make_unique<optim::ASGD>(ps, optim::ASGDOptions{.lr = o.lr, .lambd = o.lambd, .alpha = o.alpha,
                                                                .t0 = o.t0, .weight_decay = o.weight_decay,
                                                                .maximize = o.maximize});
  ADD_FAILURE() << "no optimizer " << kind;
  return nullptr;
}

Tensor table_tensor(const std::vector<double>& v, const IntList& shape, DType dtype) {
  if (dtype == kFloat64) return from_vector(v, shape);
  return from_vector(std::vector<float>(v.begin(), v.end()), shape);
}

// The case's loss at `step` over `ps`, with the step's linear terms `d` (one per parameter).
Tensor table_loss(const OptimCase& c, int step, const std::vector<Tensor>& ps, const std::vector<Tensor>& cs,
                  const std::vector<Tensor>& d) {
  Tensor loss;
  for (size_t j = 0; j < ps.size(); ++j) {
    if (j + 1 == ps.size() && step == c.skip) continue;
    Tensor term = (cs[j] * ps[j] * ps[j]).sum() / 2.0 + (d[j] * ps[j]).sum();
    loss = loss.defined() ? loss + term : term;
  }
  return loss;
}

struct TableRun {
  std::vector<Tensor> ps, cs;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::StepLR> schedule;
  TableRun(const OptimCase& c, DType dtype) {
    for (const OptimParam& p : kOptimParams) {
      ps.push_back(table_tensor(p.p0, p.shape, dtype).requires_grad_());
      cs.push_back(table_tensor(p.c, p.shape, dtype));
    }
    opt = make_optimizer(c.kind, c.o, ps);
    if (c.gamma > 0) schedule = std::make_unique<optim::StepLR>(*opt, 1, c.gamma);
  }
  std::vector<Tensor> d(int step, DType dtype) const {
    std::vector<Tensor> out;
    for (const OptimParam& p : kOptimParams) out.push_back(table_tensor(p.d[static_cast<size_t>(step)], p.shape, dtype));
    return out;
  }
  std::vector<std::vector<double>> values() const {
    std::vector<std::vector<double>> out;
    for (const Tensor& p : ps) out.push_back(p.to_vector<double>());
    return out;
  }
};

// An eager PyTorch-style loop over the case's steps.
Trajectory run_eager(const OptimCase& c, DType dtype) {
  TableRun r(c, dtype);
  Trajectory out;
  for (size_t s = 0; s < c.f64.size(); ++s) {
    r.opt->zero_grad();
    table_loss(c, static_cast<int>(s), r.ps, r.cs, r.d(static_cast<int>(s), dtype)).backward();
    r.opt->step();
    if (r.schedule) r.schedule->step();
    out.push_back(r.values());
  }
  return out;
}

// The same loop with the step compile()d (the linear terms are its arguments).
Trajectory run_compiled(const OptimCase& c, DType dtype, size_t& traces) {
  TableRun r(c, dtype);
  int step_now = 0;
  auto step = compile([&](const std::vector<Tensor>& d) {
    r.opt->zero_grad();
    Tensor loss = table_loss(c, step_now, r.ps, r.cs, d);
    loss.backward();
    r.opt->step();
    return std::vector<Tensor>{loss.detach()};
  });
  Trajectory out;
  for (size_t s = 0; s < c.f64.size(); ++s) {
    step_now = static_cast<int>(s);
    step(r.d(step_now, dtype));
    if (r.schedule) r.schedule->step();
    out.push_back(r.values());
  }
  traces = step.num_traces();
  return out;
}

void expect_trajectory(const Trajectory& got, const Trajectory& want, double rel, double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < want.size(); ++s) {
    ASSERT_EQ(got[s].size(), want[s].size()) << what;
    for (size_t j = 0; j < want[s].size(); ++j) {
      ASSERT_EQ(got[s][j].size(), want[s][j].size()) << what;
      for (size_t k = 0; k < want[s][j].size(); ++k)
        EXPECT_NEAR(got[s][j][k], want[s][j][k], abs + rel * std::fabs(want[s][j][k]))
            << what << ": step " << s + 1 << ", parameter " << j << ", element " << k;
    }
  }
}

} // namespace

// f64 within 1e-12 relative (the two differ by a few ulps at most, 6e-15 relative: not every
// operation rounds in the same order), f32 within 1e-5 (some 20 ulps at most after five steps,
// where a division by a small root amplifies a rounding).
TEST(TorchTable, EveryCaseMatchesPyTorchInF64AndF32) {
  for (const OptimCase& c : kOptimCases) {
    expect_trajectory(run_eager(c, kFloat64), c.f64, 1e-12, 1e-15, std::string(c.name) + " (f64)");
    expect_trajectory(run_eager(c, kFloat32), c.f32, 1e-5, 1e-6, std::string(c.name) + " (f32)");
  }
}

TEST(TorchTable, CompiledStepsMatchPyTorch) {
  // The step as one compiled function: slots, step counts, Adagrad's decayed lr and the StepLR
  // schedule all follow the replays. (Not the cases that leave a parameter out at one step: which
  // one is host control flow that a trace does not see.)
  size_t cases = 0;
  for (const OptimCase& c : kOptimCases) {
    if (c.skip >= 0) continue;
    size_t traces = 0;
    expect_trajectory(run_compiled(c, kFloat64, traces), c.f64, 1e-12, 1e-15, std::string(c.name) + " (compiled)");
    EXPECT_LE(traces, 2u) << c.name; // the first step (no slots yet), then replays
    ++cases;
  }
  EXPECT_GE(cases, 12u);
}

TEST(TorchTable, CoversTheOptionsOfTheNewOptimizers) {
  // The table holds what the brief of the new optimizers asks for; regenerating it must keep them.
  std::set<std::string> seen;
  for (const OptimCase& c : kOptimCases) {
    const OptimOptions& o = c.o;
    if (c.kind == "rmsprop" && o.centered) seen.insert("rmsprop centered");
    if (c.kind == "rmsprop" && o.momentum > 0) seen.insert("rmsprop momentum");
    if (c.kind == "rmsprop" && o.centered && o.momentum > 0 && o.weight_decay > 0) seen.insert("rmsprop all");
    if (c.kind == "adagrad" && o.lr_decay > 0) seen.insert("adagrad lr_decay");
    if (c.kind == "adagrad" && o.initial_accumulator_value > 0) seen.insert("adagrad initial_accumulator_value");
    if (o.weight_decay > 0) seen.insert(c.kind + " weight_decay");
    if (o.maximize) seen.insert(c.kind + " maximize");
    if (c.skip >= 0) seen.insert(c.kind + " skip");
    if (c.gamma > 0) seen.insert(c.kind + " schedule");
  }
  for (const char* want : {"rmsprop centered", "rmsprop momentum", "rmsprop all", "adagrad lr_decay",
                           "adagrad initial_accumulator_value", "rmsprop weight_decay", "adagrad weight_decay",
                           "sgd maximize", "adam maximize", "adamw maximize", "rmsprop maximize", "adagrad maximize",
                           "rmsprop skip", "adagrad skip", "rmsprop schedule", "adagrad schedule"})
    EXPECT_TRUE(seen.count(want)) << want;
}

TEST(TorchTable, CoversNAdamRAdamAdamaxAdadeltaRpropASGD) {
  // Each newer kind with several option sets, a skipped parameter and a schedule, over 12 steps (RAdam
  // rectifies from step 6 on; ASGD averages after t0).
  std::set<std::string> seen;
  for (const OptimCase& c : kOptimCases) {
    const OptimOptions& o = c.o;
    seen.insert(c.kind + " " + std::to_string(c.f64.size()) + " steps");
    if (c.skip >= 0) seen.insert(c.kind + " skip");
    if (c.gamma > 0) seen.insert(c.kind + " schedule");
    if (o.weight_decay > 0) seen.insert(c.kind + " weight_decay");
    if (o.maximize) seen.insert(c.kind + " maximize");
    if (c.kind == "nadam" && o.momentum_decay != 4e-3) seen.insert("nadam momentum_decay");
    if (c.kind == "rprop" && o.etas.first != 0.5 && o.step_sizes.second != 50) seen.insert("rprop etas step_sizes");
    if (c.kind == "asgd" && o.t0 < 10) seen.insert("asgd t0");
    if (c.kind == "adadelta" && o.rho != 0.9) seen.insert("adadelta rho");
  }
  for (const char* kind : {"nadam", "radam", "adamax", "adadelta", "rprop", "asgd"})
    for (const std::string what : {" 12 steps", " skip", " schedule"})
      EXPECT_TRUE(seen.count(kind + what)) << kind << what;
  for (const char* want : {"nadam weight_decay", "radam weight_decay", "adamax weight_decay", "adadelta weight_decay",
                           "asgd weight_decay", "adamax maximize", "adadelta maximize", "rprop maximize",
                           "asgd maximize", "nadam momentum_decay", "rprop etas step_sizes", "asgd t0", "adadelta rho"})
    EXPECT_TRUE(seen.count(want)) << want;
}

// ---------------------------------------------------------------- schedules

TEST(Schedules, StepAndCosine) {
  Tensor p = make_param();
  optim::SGD opt({p}, {.lr = 1.0});
  optim::StepLR step(opt, 2, 0.5);
  std::vector<double> seen;
  for (int e = 0; e < 5; ++e) {
    seen.push_back(opt.lr());
    step.step();
  }
  EXPECT_EQ(seen, (std::vector<double>{1.0, 1.0, 0.5, 0.5, 0.25}));

  optim::SGD opt2({p}, {.lr = 0.1});
  optim::CosineAnnealingLR cos(opt2, 4, 0.01);
  EXPECT_DOUBLE_EQ(opt2.lr(), 0.1);
  cos.step();
  cos.step();
  EXPECT_NEAR(opt2.lr(), 0.055, 1e-15); // halfway: the mean of 0.1 and 0.01
  cos.step();
  cos.step();
  EXPECT_NEAR(opt2.lr(), 0.01, 1e-15);
  cos.set_epoch(1);
  EXPECT_NEAR(opt2.lr(), 0.01 + 0.09 * (1 + std::cos(M_PI / 4)) / 2, 1e-15);
}

// ---------------------------------------------------------------- the lazy step

// A small model with every kind of state: parameters, BatchNorm buffers, Adam moments.
nn::Sequential small_model() {
  return nn::Sequential(nn::Linear(12, 16), nn::BatchNorm1d(16), nn::ReLU(), nn::Linear(16, 4));
}

// Host data, as a data loader gives it (kiln's randn would bake its seed into the kernels).
Tensor batch_x(int64_t step) {
  std::vector<float> x(8 * 12);
  uint64_t state = 1000 + static_cast<uint64_t>(step);
  for (float& v : x) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    v = static_cast<float>(static_cast<double>(state >> 11) / 9007199254740992.0 * 4.0 - 2.0);
  }
  return from_vector(x, {8, 12});
}
Tensor batch_y(int64_t step) {
  std::vector<int64_t> y(8);
  for (int64_t i = 0; i < 8; ++i) y[i] = (i * 7 + step * 3) % 4;
  return from_vector(y);
}

// One training step; returns the loss value.
float train_step(nn::Module& m, optim::Optimizer& opt, int64_t step) {
  opt.zero_grad();
  Tensor loss = F::cross_entropy(m(batch_x(step)), batch_y(step));
  loss.backward();
  opt.step();
  std::vector<Tensor> all = m.parameters();
  for (const Tensor& b : m.buffers()) all.push_back(b);
  for (const Tensor& s : opt.state()) all.push_back(s);
  Tensor v = loss.detach();
  all.push_back(v);
  kiln::realize(all);
  return v.item<float>();
}

TEST(TrainingStep, GraphAndMemoryStayBoundedOver50Steps) {
  nn::manual_seed(1);
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 1e-2});
  std::vector<size_t> nodes, bytes;
  for (int64_t s = 0; s < 50; ++s) {
    train_step(m, opt, s);
    nodes.push_back(graph::live_node_count());
    bytes.push_back(runtime::allocator_stats().bytes_in_use);
  }
  // After warm-up, every step leaves the same amount of graph and memory behind.
  EXPECT_LE(nodes[49], nodes[9] + 5) << "live graph nodes grow: " << nodes[9] << " -> " << nodes[49];
  EXPECT_LE(bytes[49], bytes[9] + 4096) << "bytes in use grow: " << bytes[9] << " -> " << bytes[49];
}

// One step as a PyTorch user writes it: no realize() call; returns the loss value.
float plain_step(nn::Module& m, optim::Optimizer& opt, int64_t step) {
  opt.zero_grad();
  Tensor loss = F::cross_entropy(m(batch_x(step)), batch_y(step));
  loss.backward();
  opt.step();
  return loss.item<float>();
}

// opt.step() realizes parameters, the optimizer's slots, BatchNorm's running statistics,
// gradients and the loss in one realize: step `steps` computes what step 5 does.
void expect_one_realize_per_step(optim::Optimizer& opt, nn::Sequential& m, int64_t steps) {
  size_t at_step5 = 0, live = 0;
  for (int64_t s = 0; s <= steps; ++s) {
    const auto before = runtime::executor_stats();
    plain_step(m, opt, s % 4);
    const auto after = runtime::executor_stats();
    const size_t nodes = after.nodes - before.nodes;
    EXPECT_EQ(after.realizations - before.realizations, 1u) << "step " << s; // one realize, with the loss in it
    if (s == 5) at_step5 = nodes;
    if (s == 10) live = graph::live_node_count();
    if (s > 5) {
      ASSERT_EQ(nodes, at_step5) << "step " << s;
    }
  }
  EXPECT_LE(graph::live_node_count(), live + 5); // and no history is kept
  const auto before = runtime::executor_stats();
  (void)m.buffers()[0].to_vector<float>(); // running_mean: already a buffer
  EXPECT_EQ(runtime::executor_stats().launches, before.launches);
}

TEST(TrainingStep, APlainEagerLoopRealizesTheSameGraphAtEveryStep) {
  nn::manual_seed(4);
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 1e-2});
  expect_one_realize_per_step(opt, m, 500);
}

TEST(TrainingStep, APlainEagerLoopWithRMSpropRealizesOnceAStep) {
  // Every slot RMSprop has (square_avg, grad_avg, momentum_buffer) is realized with the step.
  nn::manual_seed(4);
  nn::Sequential m = small_model();
  optim::RMSprop opt(m.parameters(), {.lr = 1e-3, .weight_decay = 1e-4, .momentum = 0.9, .centered = true});
  expect_one_realize_per_step(opt, m, 200);
  EXPECT_EQ(opt.state().size(), 3 * m.parameters().size());
}

TEST(TrainingStep, APlainEagerLoopWithAdagradRealizesOnceAStep) {
  // Adagrad's decayed learning rate changes every step: a host value, not a new graph.
  nn::manual_seed(4);
  nn::Sequential m = small_model();
  optim::Adagrad opt(m.parameters(), {.lr = 1e-2, .lr_decay = 1e-2, .initial_accumulator_value = 0.1});
  expect_one_realize_per_step(opt, m, 100);
}

TEST(TrainingStep, AHandWrittenUpdateLoopRealizesTheSameGraphAtEveryStep) {
  // No optimizer: parameters assign()ed by hand are realized with the next value read.
  nn::manual_seed(5);
  nn::Sequential m = small_model();
  size_t at_step5 = 0, live = 0;
  for (int64_t s = 0; s <= 200; ++s) {
    const auto before = runtime::executor_stats();
    Tensor loss = F::cross_entropy(m(batch_x(s % 4)), batch_y(s % 4));
    for (Tensor& p : m.parameters()) p.zero_grad();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (Tensor& p : m.parameters()) p.assign(p - p.grad() * 0.05);
    }
    (void)loss.item<float>();
    const auto after = runtime::executor_stats();
    EXPECT_EQ(after.realizations - before.realizations, 1u) << "step " << s; // the loss, the update with it
    if (s == 5) at_step5 = after.nodes - before.nodes;
    if (s == 10) live = graph::live_node_count();
    if (s > 5) {
      ASSERT_EQ(after.nodes - before.nodes, at_step5) << "step " << s;
    }
  }
  EXPECT_LE(graph::live_node_count(), live + 5); // and no history is kept
}

TEST(Optimizer, ATensorListedTwiceIsUpdatedOnceWithOneState) {
  // SGD({p, p}) took two updates a step with two momentum buffers (PyTorch 1.13 warns that listing a
  // tensor twice is deprecated, and takes two updates with one buffer). Once, as SGD({p}): PyTorch
  // gives [0.0620, 0.1240] after three steps of this problem (lr 0.1, momentum 0.9).
  Tensor p = from_vector<double>({1, 2}).requires_grad_();
  optim::SGD opt({p, p}, {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    (p * p).sum().backward();
    opt.step();
  }
  const std::vector<double> got = p.to_vector<double>();
  EXPECT_NEAR(got[0], 0.0620, 5e-5);
  EXPECT_NEAR(got[1], 0.1240, 5e-5);
  // tied weights: one module's parameter registered in two modules is one parameter
  nn::Linear a(2, 2);
  nn::Sequential tied(a, a);
  EXPECT_EQ(tied.parameters().size(), 2u);
  EXPECT_EQ(tied.named_parameters().size(), 4u); // the names stay (state_dict, checkpoints)
}

TEST(TrainingStep, AGraphBuiltBeforeALeafIsRealizedStillReachesIt) {
  // Realizing a leaf gives it a new node; a loss built on the old one must still
  // differentiate with respect to it (it used to get no gradient at all).
  Tensor w = ones({3}).requires_grad_();
  {
    NoGradGuard no_grad;
    w.assign(w * 2.0); // lazy
  }
  Tensor loss = (w * w).sum(); // built on the lazy node
  w.realize();                 // w drops its history: a new node
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{4, 4, 4}));
}

TEST(TrainingStep, ChangingLrAndBiasCorrectionDoNotRecompile) {
  nn::manual_seed(2);
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 1e-2});
  for (int64_t s = 0; s < 3; ++s) train_step(m, opt, s);
  const size_t compiles = runtime::executor_stats().compiles;
  for (int64_t s = 3; s < 8; ++s) {
    opt.set_lr(opt.lr() * 0.9);
    train_step(m, opt, s);
  }
  EXPECT_EQ(runtime::executor_stats().compiles, compiles);
}

TEST(TrainingStep, RMSpropAndAdagradDoNotRecompileAsTheLrChanges) {
  for (int kind = 0; kind < 2; ++kind) {
    nn::manual_seed(2);
    nn::Sequential m = small_model();
    std::unique_ptr<optim::Optimizer> opt;
    if (kind == 0) opt = std::make_unique<optim::RMSprop>(m.parameters(), optim::RMSpropOptions{.momentum = 0.5});
    else opt = std::make_unique<optim::Adagrad>(m.parameters(), optim::AdagradOptions{.lr_decay = 0.1});
    optim::CosineAnnealingLR schedule(*opt, 6);
    for (int64_t s = 0; s < 3; ++s) train_step(m, *opt, s);
    const size_t compiles = runtime::executor_stats().compiles;
    for (int64_t s = 3; s < 8; ++s) {
      schedule.step();
      train_step(m, *opt, s);
    }
    EXPECT_EQ(runtime::executor_stats().compiles, compiles) << opt->kind();
  }
}

TEST(TrainingStep, LossDecreases) {
  nn::manual_seed(3);
  nn::Sequential m = small_model();
  optim::SGD opt(m.parameters(), {.lr = 0.1, .momentum = 0.9});
  float first = 0, last = 0;
  for (int64_t s = 0; s < 30; ++s) {
    const float l = train_step(m, opt, s % 2); // two fixed batches: the model can fit them
    if (s == 0) first = l;
    last = l;
  }
  EXPECT_LT(last, first * 0.5f);
}

// ---------------------------------------------------------------- compiled steps

// The bits of every parameter, buffer and optimizer state tensor.
std::vector<std::vector<float>> snapshot(nn::Module& m, const optim::Optimizer& opt) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : m.parameters()) out.push_back(t.to_vector<float>());
  for (const Tensor& t : opt.state()) out.push_back(t.to_vector<float>());
  return out;
}

// Trains two identical models, one eagerly and one through compile(), and requires
// the same bits after every step: the optimizer's slots, step counts, bias corrections
// and learning rate must all follow the replays.
template <class MakeOpt, class BetweenSteps>
void expect_compiled_matches_eager(MakeOpt make_opt, BetweenSteps between, int steps,
                                   nn::Sequential (*make_model)() = small_model,
                                   float (*eager_step)(nn::Module&, optim::Optimizer&, int64_t) = train_step) {
  nn::manual_seed(11);
  nn::Sequential eager_model = make_model();
  nn::manual_seed(11);
  nn::Sequential compiled_model = make_model();
  auto eager_opt = make_opt(eager_model.parameters());
  auto compiled_opt = make_opt(compiled_model.parameters());
  auto step = compile([&](const std::vector<Tensor>& a) {
    compiled_opt.zero_grad();
    Tensor loss = F::cross_entropy(compiled_model(a[0]), a[1]);
    loss.backward();
    compiled_opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  for (int64_t s = 0; s < steps; ++s) {
    between(eager_opt, s);
    between(compiled_opt, s);
    const float eager_loss = eager_step(eager_model, eager_opt, s);
    const float compiled_loss = step({batch_x(s), batch_y(s)})[0].template item<float>();
    ASSERT_EQ(eager_loss, compiled_loss) << "step " << s;
    ASSERT_EQ(snapshot(eager_model, eager_opt), snapshot(compiled_model, compiled_opt)) << "step " << s;
    ASSERT_EQ(eager_opt.state_dict().size(), compiled_opt.state_dict().size());
  }
  // Traces: one without gradients or slots, one with them; then only replays.
  EXPECT_LE(step.num_traces(), 3u);
  const optim::NamedTensors a = eager_opt.state_dict(), b = compiled_opt.state_dict();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first.ends_with(".step")) {
      EXPECT_EQ(a[i].second.template item<int64_t>(), b[i].second.template item<int64_t>()) << a[i].first;
    }
}

TEST(CompiledStep, AdamMatchesEagerStepForStep) {
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return optim::Adam(std::move(p), {.lr = 1e-2}); },
                                [](optim::Optimizer&, int64_t) {}, 8);
}

TEST(CompiledStep, APlainEagerLoopMatchesTheCompiledStep) {
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return optim::Adam(std::move(p), {.lr = 1e-2}); },
                                [](optim::Optimizer&, int64_t) {}, 8, small_model, plain_step);
}

TEST(CompiledStep, DropoutDrawsTheEagerMasksStepForStep) {
  // Each replay must draw a new mask, the one the eager step draws (a repeated
  // trace-time mask fails from the second step on).
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return optim::Adam(std::move(p), {.lr = 1e-2}); },
                                [](optim::Optimizer&, int64_t) {}, 5, [] {
                                  return nn::Sequential(nn::Linear(12, 16), nn::ReLU(), nn::Dropout(0.4),
                                                        nn::Linear(16, 4));
                                });
}

TEST(CompiledStep, AdamWWithAmsgradMatchesEager) {
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) {
        return optim::AdamW(std::move(p), {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
      },
      [](optim::Optimizer&, int64_t) {}, 6);
}

TEST(CompiledStep, SgdMomentumFollowsTheLearningRateSchedule) {
  // The learning rate changes between replays: the compiled step must read it each time.
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) { return optim::SGD(std::move(p), {.lr = 0.1, .momentum = 0.9, .nesterov = true}); },
      [](optim::Optimizer& opt, int64_t s) { opt.set_lr(0.1 * std::pow(0.7, static_cast<double>(s))); }, 7);
}

TEST(CompiledStep, RMSpropCenteredWithMomentumFollowsTheSchedule) {
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) {
        return optim::RMSprop(std::move(p), {.lr = 1e-2, .weight_decay = 1e-3, .momentum = 0.9, .centered = true});
      },
      [](optim::Optimizer& opt, int64_t s) { opt.set_lr(1e-2 * std::pow(0.8, static_cast<double>(s))); }, 7);
}

TEST(CompiledStep, AdagradDecaysItsLrStepForStep) {
  // clr = lr / (1 + (t - 1) lr_decay) is a host value recomputed before every replay.
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) {
        return optim::Adagrad(std::move(p), {.lr = 0.1, .lr_decay = 0.2, .weight_decay = 1e-3,
                                             .initial_accumulator_value = 0.1});
      },
      [](optim::Optimizer& opt, int64_t s) { opt.set_lr(0.1 * std::pow(0.9, static_cast<double>(s))); }, 7);
}

TEST(CompiledStep, MaximizeMatchesEager) {
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) { return optim::RMSprop(std::move(p), {.lr = 1e-3, .maximize = true}); },
      [](optim::Optimizer&, int64_t) {}, 4);
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) { return optim::SGD(std::move(p), {.lr = 0.01, .momentum = 0.9, .maximize = true}); },
      [](optim::Optimizer&, int64_t) {}, 4);
}

TEST(CompiledStep, LoadingOptimizerStateTracesAgain) {
  nn::manual_seed(12);
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 1e-2});
  auto step = compile([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(m(a[0]), a[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  for (int64_t s = 0; s < 4; ++s) step({batch_x(s), batch_y(s)});
  const size_t traces = step.num_traces();
  optim::NamedTensors loaded; // the same values in new tensors (as from a checkpoint file)
  for (const auto& [name, t] : opt.state_dict()) loaded.emplace_back(name, t.detach());
  opt.load_state_dict(loaded); // new slot tensors: the old trace would update the old ones
  step({batch_x(4), batch_y(4)});
  EXPECT_EQ(step.num_traces(), traces + 1);
  size_t slots_after = 0;
  for (const auto& [name, t] : opt.state_dict()) {
    if (name.ends_with(".step")) EXPECT_EQ(t.item<int64_t>(), 5) << name;
    for (const auto& [old_name, old_t] : loaded)
      if (old_name == name && !name.ends_with(".step")) {
        EXPECT_EQ(t.impl(), old_t.impl()) << name << ": the replay must update the loaded slot";
        ++slots_after;
      }
  }
  EXPECT_GT(slots_after, 0u);
}

// ---------------------------------------------------------------- checkpoints

TEST(Checkpoint, SafetensorsRoundTripOfEveryDtype) {
  const fs::path dir = temp_dir("roundtrip");
  const std::string path = (dir / "t.safetensors").string();
  checkpoint::NamedTensors in{
      {"f32", from_vector<float>({1.5f, -2.25f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3})},
      {"f64", from_vector<double>({M_PI})},
      {"i32", from_vector<int32_t>({-7, 8})},
      {"i64", from_vector<int64_t>({int64_t{1} << 40}, {})},
      {"bool", from_vector<bool>({true, false, true})},
      {"lazy", arange(0, 4, 1, kFloat32) * 2.0},
      {"empty", zeros({0, 3})},
  };
  checkpoint::save_safetensors(path, in, {{"note", "quote \" and \\ and \xc3\xa9"}});
  checkpoint::Contents out = checkpoint::load_safetensors(path);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);
    EXPECT_EQ(out.tensors[i].second.type_str(), in[i].second.type_str());
    EXPECT_EQ(out.tensors[i].second.to_vector<double>(), in[i].second.to_vector<double>()) << in[i].first;
  }
  EXPECT_EQ(out.metadata.at("note"), "quote \" and \\ and \xc3\xa9");
  // The layout other readers expect: u64 header length, a JSON object, 8-byte aligned data.
  const std::vector<uint8_t> b = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(b[8], '{');
  EXPECT_EQ(b.size(), 8 + n + 6 * 4 + 8 + 2 * 4 + 8 + 3 + 4 * 4);
  // Atomic write: nothing but the file is left in the directory.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(Checkpoint, CorruptAndTruncatedFilesAreClearErrors) {
  const fs::path dir = temp_dir("corrupt");
  const fs::path good = dir / "good.safetensors";
  checkpoint::save_safetensors(good.string(), {{"w", from_vector<float>({1, 2, 3, 4})}, {"b", from_vector<int64_t>({5})}});
  const std::vector<uint8_t> bytes = read_bytes(good);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  auto variant = [&](const std::string& name, std::vector<uint8_t> b) {
    const fs::path p = dir / name;
    write_bytes(p, b);
    return error_of([&] { checkpoint::load_safetensors(p.string()); });
  };
  auto expect_error = [](const std::string& e, const std::string& part) {
    EXPECT_NE(e.find(part), std::string::npos) << "message: " << e;
  };
  expect_error(error_of([&] { checkpoint::load_safetensors((dir / "missing").string()); }), "cannot open");
  expect_error(variant("short", {1, 2, 3}), "truncated");
  expect_error(variant("cut", std::vector<uint8_t>(bytes.begin(), bytes.end() - 5)), "truncated: the header needs 24 bytes of tensor data, the file has 19");
  expect_error(variant("cut_header", std::vector<uint8_t>(bytes.begin(), bytes.begin() + 20)), "header length");
  std::vector<uint8_t> b = bytes;
  b.push_back(0);
  expect_error(variant("trailing", b), "size mismatch");
  b = bytes;
  b[8] = '#'; // not JSON
  expect_error(variant("json", b), "corrupt header");
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  auto with_header = [&](std::string h) {
    h.append((8 - h.size() % 8) % 8, ' ');
    std::vector<uint8_t> out(8);
    const uint64_t len = h.size();
    std::memcpy(out.data(), &len, 8);
    out.insert(out.end(), h.begin(), h.end());
    out.insert(out.end(), bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), bytes.end());
    return out;
  };
  auto replace = [&](std::string from, std::string to) {
    std::string h = header;
    const size_t at = h.find(from);
    EXPECT_NE(at, std::string::npos) << from << " not in " << h;
    return h.replace(at, from.size(), to);
  };
  expect_error(variant("f16", with_header(replace("\"F32\"", "\"F16\""))), "unsupported dtype \"F16\"");
  expect_error(variant("shape", with_header(replace("[4]", "[5]"))), "size mismatch");
  expect_error(variant("offsets", with_header(replace("[0,16]", "[8,24]"))), "gap or overlap");
  expect_error(variant("nodtype", with_header(replace("\"dtype\"", "\"dtypo\""))), "missing \"dtype\"");
  fs::remove_all(dir);
}

TEST(Checkpoint, LoadChecksNamesShapesAndDtypes) {
  const fs::path dir = temp_dir("mismatch");
  const std::string path = (dir / "m.safetensors").string();
  nn::Sequential saved(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2));
  checkpoint::save(path, saved);
  nn::Sequential other(nn::Linear(4, 5), nn::ReLU(), nn::Linear(5, 2), nn::ReLU(), nn::Linear(2, 2));
  const std::vector<float> before = other.parameters()[0].to_vector<float>();
  const std::string e = error_of([&] { checkpoint::load(path, other); });
  EXPECT_NE(e.find("\"0.weight\": the checkpoint has f32[3,4], the model needs f32[5,4]"), std::string::npos) << e;
  EXPECT_NE(e.find("missing \"4.weight\""), std::string::npos) << e;
  EXPECT_EQ(other.parameters()[0].to_vector<float>(), before); // nothing changed
  nn::Sequential smaller(nn::Linear(4, 3));
  EXPECT_NE(error_of([&] { checkpoint::load(path, smaller); }).find("unexpected \"2.weight\""), std::string::npos);
  // An optimizer needs optimizer state of its own kind.
  nn::Sequential same(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2));
  optim::SGD sgd(same.parameters());
  EXPECT_NE(error_of([&] { checkpoint::load(path, same, &sgd); }).find("no optimizer state"), std::string::npos);
  optim::Adam adam(saved.parameters());
  checkpoint::save(path, saved, &adam);
  EXPECT_NE(error_of([&] { checkpoint::load(path, same, &sgd); }).find("holds adam state"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, ResumeIsExact) {
  const fs::path dir = temp_dir("resume");
  const std::string path = (dir / "ckpt.safetensors").string();
  // Uninterrupted: 4 steps.
  nn::manual_seed(11);
  nn::Sequential a = small_model();
  optim::Adam opt_a(a.parameters(), {.lr = 1e-2, .weight_decay = 1e-3});
  std::vector<float> losses_a;
  for (int64_t s = 0; s < 4; ++s) losses_a.push_back(train_step(a, opt_a, s));
  // Interrupted: 2 steps, save, load into a fresh, differently initialized model, 2 more steps.
  nn::manual_seed(11);
  nn::Sequential b = small_model();
  optim::Adam opt_b(b.parameters(), {.lr = 1e-2, .weight_decay = 1e-3});
  for (int64_t s = 0; s < 2; ++s) EXPECT_EQ(train_step(b, opt_b, s), losses_a[s]);
  checkpoint::save(path, b, &opt_b, {{"step", "2"}});
  nn::manual_seed(999);
  nn::Sequential c = small_model();
  optim::Adam opt_c(c.parameters(), {.lr = 0.5, .weight_decay = 1e-3});
  checkpoint::Metadata meta = checkpoint::load(path, c, &opt_c);
  EXPECT_EQ(meta.at("step"), "2");
  EXPECT_EQ(meta.at("optimizer"), "adam");
  EXPECT_EQ(opt_c.lr(), 1e-2);
  EXPECT_EQ(opt_c.steps(0), 2);
  for (int64_t s = 2; s < 4; ++s) EXPECT_EQ(train_step(c, opt_c, s), losses_a[s]) << "step " << s;
  auto pa = a.state_dict(), pc = c.state_dict();
  ASSERT_EQ(pa.size(), pc.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<double>(), pc[i].second.to_vector<double>()) << pa[i].first;
  fs::remove_all(dir);
}

// Resuming from a checkpoint after 3 of 6 steps, as examples/train does (the optimizer and its
// schedule made as in the first run, then load() and set_epoch()), gives the uninterrupted run's
// bits: losses, parameters and optimizer state. make_opt(params) makes the optimizer (lr 1e-2).
template <class MakeOpt>
void expect_resume_is_exact(MakeOpt make_opt, const std::string& name) {
  const fs::path dir = temp_dir("resume_" + name);
  const std::string path = (dir / "ckpt.safetensors").string();
  nn::manual_seed(21);
  nn::Sequential a = small_model();
  auto opt_a = make_opt(a.parameters());
  optim::StepLR sched_a(opt_a, 2, 0.5);
  std::vector<float> losses_a;
  for (int64_t s = 0; s < 6; ++s) {
    losses_a.push_back(train_step(a, opt_a, s));
    sched_a.step();
  }
  nn::manual_seed(21);
  nn::Sequential b = small_model();
  auto opt_b = make_opt(b.parameters());
  optim::StepLR sched_b(opt_b, 2, 0.5);
  for (int64_t s = 0; s < 3; ++s) {
    ASSERT_EQ(train_step(b, opt_b, s), losses_a[s]) << name;
    sched_b.step();
  }
  checkpoint::save(path, b, &opt_b, {{"epoch", "3"}});
  nn::manual_seed(999); // a fresh, differently initialized model
  nn::Sequential c = small_model();
  auto opt_c = make_opt(c.parameters());
  optim::StepLR sched_c(opt_c, 2, 0.5);
  const checkpoint::Metadata meta = checkpoint::load(path, c, &opt_c);
  EXPECT_EQ(meta.at("optimizer"), opt_c.kind());
  EXPECT_EQ(opt_c.lr(), opt_b.lr()) << name << ": the checkpoint's lr";
  EXPECT_EQ(opt_c.steps(0), 3) << name;
  sched_c.set_epoch(3);
  for (int64_t s = 3; s < 6; ++s) {
    ASSERT_EQ(train_step(c, opt_c, s), losses_a[s]) << name << " step " << s;
    sched_c.step();
  }
  const optim::NamedTensors sa = opt_a.state_dict(), sc = opt_c.state_dict();
  ASSERT_EQ(sa.size(), sc.size()) << name;
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sc[i].first);
    EXPECT_EQ(sa[i].second.to_vector<double>(), sc[i].second.to_vector<double>()) << name << " " << sa[i].first;
  }
  auto pa = a.state_dict(), pc = c.state_dict();
  ASSERT_EQ(pa.size(), pc.size());
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second.to_vector<double>(), pc[i].second.to_vector<double>()) << name << " " << pa[i].first;
  fs::remove_all(dir);
}

TEST(Checkpoint, RMSpropResumeIsExact) {
  expect_resume_is_exact(
      [](std::vector<Tensor> p) {
        return optim::RMSprop(std::move(p), {.lr = 1e-2, .weight_decay = 1e-3, .momentum = 0.9, .centered = true});
      },
      "rmsprop");
  expect_resume_is_exact([](std::vector<Tensor> p) { return optim::RMSprop(std::move(p), {.lr = 1e-2}); },
                         "rmsprop_plain");
}

TEST(Checkpoint, AdagradResumeIsExact) {
  // The step count comes back too: the decayed lr of step 4 is lr / (1 + 3 lr_decay).
  expect_resume_is_exact(
      [](std::vector<Tensor> p) {
        return optim::Adagrad(std::move(p), {.lr = 1e-2, .lr_decay = 0.3, .weight_decay = 1e-3,
                                             .initial_accumulator_value = 0.2, .maximize = true});
      },
      "adagrad");
}

TEST(Optimizer, NewOptimizersStateDictRoundTripsInMemory) {
  // state_dict() of RMSprop (every slot) and Adagrad, loaded into fresh optimizers over copies of the
  // parameters: the next steps give the same bits as the uninterrupted optimizer's.
  for (int kind = 0; kind < 2; ++kind) {
    auto make = [&](std::vector<Tensor> p) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0)
        return std::make_unique<optim::RMSprop>(std::move(p), optim::RMSpropOptions{.lr = 0.05, .weight_decay = 0.1,
                                                                                    .momentum = 0.5, .centered = true});
      return std::make_unique<optim::Adagrad>(std::move(p), optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.5,
                                                                                  .initial_accumulator_value = 0.5});
    };
    Tensor p = make_param();
    auto opt = make({p});
    run_steps(*opt, p, 2);
    const optim::NamedTensors sd = opt->state_dict();
    std::set<std::string> names;
    for (const auto& [name, t] : sd) names.insert(name);
    if (kind == 0) EXPECT_EQ(names, (std::set<std::string>{"0.square_avg", "0.momentum_buffer", "0.grad_avg", "0.step"}));
    else EXPECT_EQ(names, (std::set<std::string>{"0.sum", "0.step"}));
    Tensor q = from_vector(p.to_vector<double>()).requires_grad_();
    auto resumed = make({q});
    optim::NamedTensors copy; // new tensors with the same values, as from a file
    for (const auto& [name, t] : sd) copy.emplace_back(name, from_vector(t.to_vector<double>(), t.shape()).to(t.dtype()));
    resumed->load_state_dict(copy);
    EXPECT_EQ(resumed->steps(0), 2);
    EXPECT_EQ(run_steps(*resumed, q, 3), run_steps(*opt, p, 3)) << opt->kind();
  }
}

TEST(Optimizer, AdagradStartsItsSumAtTheInitialAccumulatorValue) {
  // One step from p = 1 (loss p^2 / 2, g = 1), initial_accumulator_value 3: sum = 4, p = 1 - 0.1 / 2.
  Tensor p = from_vector<double>({1.0}).requires_grad_();
  optim::Adagrad opt({p}, {.lr = 0.1, .initial_accumulator_value = 3, .eps = 0});
  (p * p / 2.0).sum().backward();
  opt.step();
  EXPECT_EQ(p.item<double>(), 0.95);
  EXPECT_EQ(opt.state_dict().at(0).second.item<double>(), 4.0); // "0.sum"
  // A state loaded with the step at 0 and no sum (as state_dict() before the first step) starts there too.
  Tensor q = from_vector<double>({1.0}).requires_grad_();
  optim::Adagrad fresh({q}, {.lr = 0.1, .initial_accumulator_value = 3, .eps = 0});
  fresh.load_state_dict({{"0.step", from_vector<int64_t>({0}, {})}});
  (q * q / 2.0).sum().backward();
  fresh.step();
  EXPECT_EQ(q.item<double>(), 0.95);
}

TEST(Optimizer, StateOfAnotherOptimizerIsRefusedNamingTheLine) {
  Tensor p = make_param();
  optim::Adam adam({p});
  optim::Adagrad adagrad({p});
  optim::SGD sgd({p}, {.momentum = 0.9});
  optim::RMSprop centered({p}, {.centered = true});
  for (optim::Optimizer* o : std::vector<optim::Optimizer*>{&adam, &adagrad, &sgd, &centered}) run_steps(*o, p, 1);
  optim::RMSprop rmsprop({p});
  optim::RMSprop with_momentum({p}, {.momentum = 0.9});
  const std::string file = "test_optim.cpp";
  test::expect_error_at([&] { rmsprop.load_state_dict(adam.state_dict()); }, file, __LINE__, "load_state_dict",
                        {"the rmsprop state does not match", "this is the state of another optimizer (adam or adamw or nadam or radam), not of rmsprop",
                         "unexpected entry \"0.exp_avg\" (rmsprop has no state \"exp_avg\")", "missing \"0.square_avg\""});
  test::expect_error_at([&] { rmsprop.load_state_dict(adagrad.state_dict()); }, file, __LINE__, "load_state_dict",
                        {"another optimizer (adagrad), not of rmsprop"});
  test::expect_error_at([&] { adagrad.load_state_dict(centered.state_dict()); }, file, __LINE__, "load_state_dict",
                        {"another optimizer (rmsprop), not of adagrad", "missing \"0.sum\""});
  test::expect_error_at([&] { adam.load_state_dict(sgd.state_dict()); }, file, __LINE__, "load_state_dict",
                        {"another optimizer (sgd or rmsprop), not of adam"});
  // Another RMSprop's options: no other kind named, the slot named as one these options do not make.
  const std::string e = error_of([&] { rmsprop.load_state_dict(centered.state_dict()); });
  EXPECT_NE(e.find("(rmsprop has no state \"grad_avg\" with these options)"), std::string::npos) << e;
  EXPECT_EQ(e.find("another optimizer"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { with_momentum.load_state_dict(centered.state_dict()); }).find("missing \"0.momentum_buffer\""),
            std::string::npos);
  // A slot no optimizer has is unexpected, and names no other optimizer.
  const std::string unknown = error_of([&] { rmsprop.load_state_dict({{"0.foo", zeros({3}, kFloat64)}}); });
  EXPECT_NE(unknown.find("unexpected entry \"0.foo\" (rmsprop has no state \"foo\")"), std::string::npos) << unknown;
  EXPECT_EQ(unknown.find("another optimizer"), std::string::npos) << unknown;
  // Nothing was loaded by a refused call.
  EXPECT_EQ(rmsprop.steps(0), 0);
  EXPECT_TRUE(rmsprop.state().empty());
}

TEST(Checkpoint, ACheckpointOfAnotherOptimizerIsRefused) {
  const fs::path dir = temp_dir("other_kind");
  const std::string path = (dir / "c.safetensors").string();
  nn::manual_seed(3);
  nn::Sequential m = small_model();
  optim::RMSprop rmsprop(m.parameters());
  train_step(m, rmsprop, 0);
  checkpoint::save(path, m, &rmsprop);
  optim::Adagrad adagrad(m.parameters());
  test::expect_error_at([&] { (void)checkpoint::load(path, m, &adagrad); }, "test_optim.cpp", __LINE__, "load",
                        {"the checkpoint holds rmsprop state, the optimizer is adagrad"});
  optim::Adam adam(m.parameters());
  checkpoint::save(path, m, &adam);
  test::expect_error_at([&] { (void)checkpoint::load(path, m, &rmsprop); }, "test_optim.cpp", __LINE__, "load",
                        {"the checkpoint holds adam state, the optimizer is rmsprop"});
  fs::remove_all(dir);
}

TEST(Optimizer, NewOptionsAreValidatedAsTorchNamingOptionValueAndLine) {
  Tensor w = make_param();
  const std::string file = "test_optim.cpp";
  using optim::RMSprop, optim::Adagrad;
  test::expect_error_at([&] { RMSprop({w}, {.lr = -0.01}); }, file, __LINE__, "optimizer", {"invalid learning rate: -0.01"});
  test::expect_error_at([&] { RMSprop({w}, {.alpha = -0.5}); }, file, __LINE__, "RMSprop", {"invalid alpha: -0.5"});
  test::expect_error_at([&] { RMSprop({w}, {.eps = -1e-8}); }, file, __LINE__, "RMSprop", {"invalid eps: -1e-08"});
  test::expect_error_at([&] { RMSprop({w}, {.weight_decay = -0.1}); }, file, __LINE__, "RMSprop",
                        {"invalid weight_decay: -0.1"});
  test::expect_error_at([&] { RMSprop({w}, {.momentum = -0.9}); }, file, __LINE__, "RMSprop", {"invalid momentum: -0.9"});
  test::expect_error_at([&] { Adagrad({w}, {.lr = -1}); }, file, __LINE__, "optimizer", {"invalid learning rate: -1"});
  test::expect_error_at([&] { Adagrad({w}, {.lr_decay = -0.25}); }, file, __LINE__, "Adagrad", {"invalid lr_decay: -0.25"});
  test::expect_error_at([&] { Adagrad({w}, {.weight_decay = -2}); }, file, __LINE__, "Adagrad", {"invalid weight_decay: -2"});
  test::expect_error_at([&] { Adagrad({w}, {.initial_accumulator_value = -0.1}); }, file, __LINE__, "Adagrad",
                        {"invalid initial_accumulator_value: -0.1"});
  test::expect_error_at([&] { Adagrad({w}, {.eps = -1e-10}); }, file, __LINE__, "Adagrad", {"invalid eps: -1e-10"});
  test::expect_error_at([&] { Adagrad({w}, {.eps = NAN}); }, file, __LINE__, "Adagrad", {"invalid eps: nan"});
  // The old optimizers' messages print the value as given too (std::to_string printed -1e-10 as -0.000000).
  test::expect_error_at([&] { optim::Adam({w}, {.eps = -1e-10}); }, file, __LINE__, "Adam", {"invalid eps: -1e-10"});
  // What torch accepts is accepted: zeros everywhere, alpha above 1.
  EXPECT_NO_THROW(RMSprop({w}, {.lr = 0, .alpha = 0, .eps = 0, .weight_decay = 0, .momentum = 0}));
  EXPECT_NO_THROW(RMSprop({w}, {.alpha = 1.5}));
  EXPECT_NO_THROW(Adagrad({w}, {.lr = 0, .lr_decay = 0, .weight_decay = 0, .initial_accumulator_value = 0, .eps = 0}));
}

TEST(Schedules, DriveRMSpropAndAdagrad) {
  // The schedules set Optimizer's lr, which the next step reads (the table's step_lr cases check the
  // updates against PyTorch's StepLR).
  Tensor p = make_param();
  optim::RMSprop rmsprop({p}, {.lr = 0.1});
  optim::Adagrad adagrad({p}, {.lr = 0.2});
  optim::StepLR step(rmsprop, 1, 0.5);
  optim::CosineAnnealingLR cosine(adagrad, 2);
  step.step();
  cosine.step();
  EXPECT_EQ(rmsprop.lr(), 0.05);
  EXPECT_NEAR(adagrad.lr(), 0.1, 1e-16);
  run_steps(rmsprop, p, 1); // and a step runs with it
  EXPECT_EQ(rmsprop.steps(0), 1);
}

TEST(Checkpoint, SaveIntoMissingDirectoryFails) {
  EXPECT_NE(error_of([] { checkpoint::save_safetensors("/nonexistent_dir_kiln/x.safetensors", {{"a", zeros({1})}}); })
                .find("cannot create a temporary file"),
            std::string::npos);
  EXPECT_THROW(checkpoint::save_safetensors("/tmp/x.safetensors", {{"a", zeros({1})}, {"a", zeros({1})}}), Error);
}

namespace {
// A checkpoint of small_model() and an Adam after two steps, as its contents.
checkpoint::Contents trained_checkpoint(const std::string& path) {
  nn::manual_seed(5);
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 1e-2});
  for (int64_t s = 0; s < 2; ++s) train_step(m, opt, s);
  checkpoint::save(path, m, &opt);
  return checkpoint::load_safetensors(path);
}

// The load error of `contents` (rewritten to `path`) into a fresh model and Adam.
std::string load_error(const std::string& path, const checkpoint::Contents& contents) {
  checkpoint::save_safetensors(path, contents.tensors, contents.metadata);
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 0.5});
  return error_of([&] { checkpoint::load(path, m, &opt); });
}
} // namespace

TEST(Checkpoint, MissingOptimizerEntriesAreReported) {
  const fs::path dir = temp_dir("missing_opt");
  const std::string path = (dir / "c.safetensors").string();
  const checkpoint::Contents full = trained_checkpoint(path);
  EXPECT_EQ(load_error(path, full), "(no error)");
  checkpoint::Contents c = full; // one slot of one parameter dropped
  std::erase_if(c.tensors, [](const auto& e) { return e.first == "optimizer.0.exp_avg_sq"; });
  std::string e = load_error(path, c);
  EXPECT_NE(e.find("missing \"0.exp_avg_sq\""), std::string::npos) << e;
  c = full; // every entry of parameter 1 dropped
  std::erase_if(c.tensors, [](const auto& e) { return e.first.rfind("optimizer.1.", 0) == 0; });
  e = load_error(path, c);
  EXPECT_NE(e.find("missing \"1.step\""), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(Checkpoint, MetadataNumbersMustBeFiniteDecimals) {
  const fs::path dir = temp_dir("lr");
  const std::string path = (dir / "c.safetensors").string();
  checkpoint::Contents c = trained_checkpoint(path);
  for (const char* bad : {"abc", "0x10", "inf", "-inf", "nan", "1e999", "", " 1", "1 ", "1e-3x", "-0.5"}) {
    c.metadata["lr"] = bad;
    const std::string e = load_error(path, c);
    EXPECT_NE(e.find("\"lr\""), std::string::npos) << "lr = \"" << bad << "\": " << e;
  }
  c.metadata["lr"] = "2.5e-3";
  checkpoint::save_safetensors(path, c.tensors, c.metadata);
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 0.5});
  checkpoint::load(path, m, &opt);
  EXPECT_EQ(opt.lr(), 2.5e-3);
  fs::remove_all(dir);
}

TEST(Checkpoint, StaleTemporariesOfTheTargetAreRemovedLiveOnesKept) {
  const fs::path dir = temp_dir("stale");
  const fs::path target = dir / "c.safetensors";
  auto make = [&](const std::string& name) {
    std::ofstream(dir / name) << "partial";
    return dir / name;
  };
  const fs::path killed1 = make("c.safetensors.tmp.aB3dE9"), killed2 = make("c.safetensors.tmp.Zz0000");
  const fs::path other_target = make("d.safetensors.tmp.aB3dE9"), not_ours = make("c.safetensors.tmp.seven77");
  // A live writer (in any process) holds an flock on its temporary file.
  const fs::path live = make("c.safetensors.tmp.LIVE01");
  const int fd = ::open(live.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  checkpoint::save_safetensors(target.string(), {{"a", zeros({3})}});
  EXPECT_FALSE(fs::exists(killed1));
  EXPECT_FALSE(fs::exists(killed2));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other_target));
  EXPECT_TRUE(fs::exists(not_ours));
  ::close(fd); // the writer died: its file is stale now
  checkpoint::save_safetensors(target.string(), {{"a", zeros({3})}});
  EXPECT_FALSE(fs::exists(live));
  EXPECT_EQ(checkpoint::load_safetensors(target.string()).tensors.size(), 1u);
  fs::remove_all(dir);
}

TEST(Checkpoint, FilesHonourTheUmaskAndSymlinksAreWrittenThrough) {
  const fs::path dir = temp_dir("mode");
  const mode_t old = ::umask(022);
  checkpoint::save_safetensors((dir / "a.safetensors").string(), {{"a", zeros({3})}});
  ::umask(077);
  checkpoint::save_safetensors((dir / "b.safetensors").string(), {{"a", zeros({3})}});
  ::umask(old);
  struct stat a {}, b {};
  ASSERT_EQ(::stat((dir / "a.safetensors").c_str(), &a), 0);
  ASSERT_EQ(::stat((dir / "b.safetensors").c_str(), &b), 0);
  EXPECT_EQ(a.st_mode & 0777, 0644u);
  EXPECT_EQ(b.st_mode & 0777, 0600u);
  // A symlinked path (to a file in another directory, by a relative name) is written through.
  fs::create_directories(dir / "real");
  fs::create_symlink("real/target.safetensors", dir / "link.safetensors");
  checkpoint::save_safetensors((dir / "link.safetensors").string(), {{"x", from_vector<float>({1, 2})}});
  EXPECT_TRUE(fs::is_symlink(dir / "link.safetensors"));
  ASSERT_TRUE(fs::is_regular_file(dir / "real" / "target.safetensors"));
  EXPECT_EQ(checkpoint::load_safetensors((dir / "link.safetensors").string()).tensors.at(0).second.to_vector<float>(),
            (std::vector<float>{1, 2}));
  fs::remove_all(dir);
}

// A safetensors file with the given header JSON and data, written by hand.
std::vector<uint8_t> handmade_safetensors(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8);
  const uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

TEST(Checkpoint, NamesThatAreNotUtf8AreRejectedOnWriteAndRead) {
  const fs::path dir = temp_dir("utf8");
  const std::string path = (dir / "u.safetensors").string();
  for (const std::string bad : {"w\xff", "\xc3", "\xed\xa0\x80" /* a surrogate */, "\xc0\xaf" /* overlong */}) {
    const std::string e = error_of([&] { checkpoint::save_safetensors(path, {{bad, zeros({1})}}); });
    EXPECT_NE(e.find("UTF-8"), std::string::npos) << e;
    write_bytes(path, handmade_safetensors("{\"" + bad + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                                           std::string(4, '\0')));
    EXPECT_NE(error_of([&] { checkpoint::load_safetensors(path); }).find("corrupt header"), std::string::npos);
  }
  EXPECT_NE(error_of([&] { checkpoint::save_safetensors(path, {{"a", zeros({1})}}, {{"k", "\xff"}}); }).find("UTF-8"),
            std::string::npos);
  checkpoint::save_safetensors(path, {{"gr\xc3\xb6\xc3\x9f" "e \xf0\x9f\x94\xa5", zeros({1})}}); // valid: kept
  EXPECT_EQ(checkpoint::load_safetensors(path).tensors.at(0).first, "gr\xc3\xb6\xc3\x9f" "e \xf0\x9f\x94\xa5");
  fs::remove_all(dir);
}

TEST(Checkpoint, DataDigestIsWrittenAndVerified) {
  const fs::path dir = temp_dir("digest");
  const std::string path = (dir / "d.safetensors").string();
  checkpoint::save_safetensors(path, {{"w", from_vector<float>({1, 2, 3, 4})}}, {{"note", "x"}});
  std::vector<uint8_t> b = read_bytes(path);
  const std::string text(b.begin(), b.end());
  EXPECT_NE(text.find("\"kiln.data_crc32\":\""), std::string::npos) << "the digest is in __metadata__";
  EXPECT_EQ(checkpoint::load_safetensors(path).metadata, (checkpoint::Metadata{{"note", "x"}}));
  b[b.size() - 3] ^= 0x40; // one bit of the data flipped
  write_bytes(path, b);
  const std::string e = error_of([&] { checkpoint::load_safetensors(path); });
  EXPECT_NE(e.find("CRC-32"), std::string::npos) << e;
  // A file without a digest (as other writers make) loads; a malformed digest does not.
  const std::string entry = "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  write_bytes(path, handmade_safetensors("{" + entry + "}", std::string(4, '\0')));
  EXPECT_EQ(checkpoint::load_safetensors(path).tensors.size(), 1u);
  write_bytes(path, handmade_safetensors("{\"__metadata__\":{\"kiln.data_crc32\":\"xyz\"}," + entry + "}", std::string(4, '\0')));
  EXPECT_NE(error_of([&] { checkpoint::load_safetensors(path); }).find("kiln.data_crc32"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint::save_safetensors(path, {{"a", zeros({1})}}, {{"kiln.data_crc32", "0"}}); })
                .find("reserved"),
            std::string::npos);
  fs::remove_all(dir);
}

// The data digest leaves the header open: a changed lr digit or a shape [2, 3] read as [3, 2]
// loaded without a word. The header digest covers the metadata and every tensor entry.
TEST(Checkpoint, HeaderDigestFindsAChangedLrOrShape) {
  const fs::path dir = temp_dir("header_digest");
  const std::string path = (dir / "h.safetensors").string();
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters(), {.lr = 0.001});
  checkpoint::save(path, m, &opt, {{"step", "7"}});
  const std::vector<uint8_t> saved = read_bytes(path);
  const std::string text(saved.begin(), saved.end());
  EXPECT_NE(text.find("\"kiln.header_crc32\":\""), std::string::npos);
  EXPECT_EQ(checkpoint::load(path, m, &opt).at("step"), "7") << "an intact file loads";
  EXPECT_EQ(checkpoint::load_safetensors(path).metadata.count("kiln.header_crc32"), 0u) << "not returned as metadata";
  auto changed = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    std::string t = text;
    t.replace(at, from.size(), to); // same length: the header length and layout stay valid
    write_bytes(path, std::vector<uint8_t>(t.begin(), t.end()));
    return error_of([&] { checkpoint::load_safetensors(path); });
  };
  const std::string lr = changed("\"lr\":\"0.001", "\"lr\":\"0.009");
  EXPECT_NE(lr.find("corrupt header: the CRC-32 of its metadata and tensor entries"), std::string::npos) << lr;
  EXPECT_NE(changed("\"step\":\"7\"", "\"step\":\"9\"").find("corrupt header"), std::string::npos);
  // A [4, 16] weight read as [16, 4]: the same bytes, so the data digest cannot tell.
  const std::string shape = changed("\"shape\":[4,16]", "\"shape\":[16,4]");
  EXPECT_NE(shape.find("corrupt header"), std::string::npos) << shape;
  EXPECT_NE(error_of([&] { checkpoint::save_safetensors(path, {{"a", zeros({1})}}, {{"kiln.header_crc32", "0"}}); })
                .find("reserved"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, DirectoryPathIsAnError) {
  const fs::path dir = temp_dir("isdir");
  nn::Sequential m = small_model();
  optim::Adam opt(m.parameters());
  EXPECT_NE(error_of([&] { checkpoint::load(dir.string(), m, &opt); }).find("is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint::load_safetensors(dir.string()); }).find("is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { checkpoint::save(dir.string(), m, &opt); }).find("is a directory"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoint, HeaderJsonLimitsAndDuplicates) {
  const fs::path dir = temp_dir("json");
  const std::string path = (dir / "j.safetensors").string();
  auto error_for = [&](const std::string& header) {
    write_bytes(path, handmade_safetensors(header, ""));
    return error_of([&] { checkpoint::load_safetensors(path); });
  };
  EXPECT_NE(error_for("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}").find("nested too deeply"), std::string::npos);
  const std::string entry = "{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  EXPECT_NE(error_for("{\"a\":" + entry + ",\"a\":" + entry + "}").find("duplicate name \"a\""), std::string::npos);
  EXPECT_NE(error_for("{\"a\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,0]}}").find("out of range"),
            std::string::npos);
  EXPECT_NE(error_for("{\"a\":tru}").find("at byte"), std::string::npos);
  fs::remove_all(dir);
}

// Two parameters assign()ed one value share a hash-consed node; leaves are found by node, so they
// once shared one gradient (eagerly; a compiled step differed). Each must get its own.
TEST(Assign, TwoParametersGivenOneValueKeepTheirOwnGradients) {
  Tensor a = randn({4}, 1).requires_grad_(), b = randn({4}, 2).requires_grad_();
  a.assign(zeros({4}));
  b.assign(zeros({4}));
  const Tensor x = randn({4}, 3);
  (square(a - x) + 3.0 * square(b + x)).sum().backward();
  const std::vector<float> xs = x.to_vector<float>(), ga = a.grad().to_vector<float>(), gb = b.grad().to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_FLOAT_EQ(ga[i], -2 * xs[i]) << i;
    EXPECT_FLOAT_EQ(gb[i], 6 * xs[i]) << i;
  }
}

// ---------------------------------------------------------------- NAdam, RAdam, Adamax, Adadelta, Rprop, ASGD

TEST(CompiledStep, NewerOptimizersMatchEagerStepForStep) {
  // Their host values (NAdam's mu product, RAdam's rectification and its switch at step 6, ASGD's eta
  // and mu) follow the replays, as the lr set between steps does (Rprop reads the lr once, as torch).
  auto decay = [](optim::Optimizer& opt, int64_t s) { opt.set_lr(0.02 * std::pow(0.9, static_cast<double>(s))); };
  using namespace optim;
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return NAdam(std::move(p), {.weight_decay = 1e-2}); },
                                decay, 7);
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return RAdam(std::move(p), {.weight_decay = 1e-2}); },
                                decay, 8);
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return Adamax(std::move(p), {.maximize = true}); },
                                decay, 5);
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return Adadelta(std::move(p), {.weight_decay = 0.1}); },
                                decay, 5);
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return Rprop(std::move(p), {.step_sizes = {1e-4, 0.05}}); },
                                decay, 6);
  expect_compiled_matches_eager([](std::vector<Tensor> p) { return ASGD(std::move(p), {.lambd = 0.01, .t0 = 2}); },
                                decay, 6);
}

TEST(Checkpoint, NewerOptimizersResumeIsExact) {
  // The slots, the step counts and the host scalars (NAdam's mu_product, ASGD's eta and mu) come back.
  using namespace optim;
  expect_resume_is_exact([](std::vector<Tensor> p) { return NAdam(std::move(p), {.momentum_decay = 0.05}); }, "nadam");
  expect_resume_is_exact([](std::vector<Tensor> p) { return RAdam(std::move(p), {.betas = {0.9, 0.9}}); }, "radam");
  expect_resume_is_exact([](std::vector<Tensor> p) { return Adamax(std::move(p), {.weight_decay = 1e-3}); }, "adamax");
  expect_resume_is_exact([](std::vector<Tensor> p) { return Adadelta(std::move(p), {.lr = 0.5}); }, "adadelta");
  expect_resume_is_exact([](std::vector<Tensor> p) { return Rprop(std::move(p), {.lr = 1e-3}); }, "rprop");
  expect_resume_is_exact([](std::vector<Tensor> p) { return ASGD(std::move(p), {.lambd = 0.01, .t0 = 1}); }, "asgd");
}

TEST(Optimizer, ASGDAveragesTheIteratesAfterT0) {
  // Step t uses mu = 1 / max(1, t - 1 - t0): with t0 = 0, mu is 1 at steps 1 and 2 (ax = p), then 1/2,
  // 1/3: ax is the mean of the iterates of steps 2, 3 and 4.
  Tensor p = make_param();
  optim::ASGD opt({p}, {.lr = 0.1, .lambd = 0, .t0 = 0});
  EXPECT_FALSE(opt.averaged(0).defined());
  std::vector<std::vector<double>> after;
  for (int s = 0; s < 4; ++s) after.push_back(run_steps(opt, p, 1));
  const std::vector<double> ax = opt.averaged(0).to_vector<double>();
  for (size_t k = 0; k < ax.size(); ++k)
    EXPECT_NEAR(ax[k], (after[1][k] + after[2][k] + after[3][k]) / 3, 1e-15) << k;
  // lambd = 0: plain SGD with lr 0.1 (eta = lr / 1^alpha)
  EXPECT_NEAR(after[0][0], kP0[0] - 0.1 * grad_of(kP0)[0], 1e-15);
}

TEST(Optimizer, NewerOptimizersValidateOptionsAsTorchNamingOptionValueAndLine) {
  Tensor w = make_param();
  const std::string file = "test_optim.cpp";
  using namespace optim;
  test::expect_error_at([&] { NAdam({w}, {.lr = -1}); }, file, __LINE__, "optimizer", {"invalid learning rate: -1"});
  test::expect_error_at([&] { NAdam({w}, {.betas = {1.0, 0.999}}); }, file, __LINE__, "NAdam", {"invalid beta1: 1"});
  test::expect_error_at([&] { NAdam({w}, {.momentum_decay = -0.1}); }, file, __LINE__, "NAdam", {"invalid momentum_decay: -0.1"});
  test::expect_error_at([&] { RAdam({w}, {.betas = {0.9, -0.5}}); }, file, __LINE__, "RAdam", {"invalid beta2: -0.5"});
  test::expect_error_at([&] { RAdam({w}, {.eps = -1e-8}); }, file, __LINE__, "RAdam", {"invalid eps: -1e-08"});
  test::expect_error_at([&] { Adamax({w}, {.weight_decay = -2}); }, file, __LINE__, "Adamax", {"invalid weight_decay: -2"});
  test::expect_error_at([&] { Adamax({w}, {.betas = {0.9, NAN}}); }, file, __LINE__, "Adamax", {"invalid beta2: nan"});
  test::expect_error_at([&] { Adadelta({w}, {.rho = 1.5}); }, file, __LINE__, "Adadelta", {"invalid rho: 1.5"});
  test::expect_error_at([&] { Adadelta({w}, {.eps = -1}); }, file, __LINE__, "Adadelta", {"invalid eps: -1"});
  test::expect_error_at([&] { Rprop({w}, {.etas = {1.2, 0.5}}); }, file, __LINE__, "Rprop", {"invalid eta values: 1.2, 0.5"});
  test::expect_error_at([&] { Rprop({w}, {.etas = {0.5, 1.0}}); }, file, __LINE__, "Rprop", {"invalid eta values: 0.5, 1"});
  test::expect_error_at([&] { Rprop({w}, {.step_sizes = {1, 0.5}}); }, file, __LINE__, "Rprop", {"invalid step sizes: 1, 0.5"});
  test::expect_error_at([&] { ASGD({w}, {.lr = -0.5}); }, file, __LINE__, "optimizer", {"invalid learning rate: -0.5"});
  test::expect_error_at([&] { ASGD({w}, {.weight_decay = -1}); }, file, __LINE__, "ASGD", {"invalid weight_decay: -1"});
  test::expect_error_at([&] { ASGD({w}, {.t0 = INFINITY}); }, file, __LINE__, "ASGD", {"invalid t0: inf"});
  // What torch accepts is accepted: rho 0 and 1, zero eps and decay.
  EXPECT_NO_THROW(Adadelta({w}, {.rho = 0}));
  EXPECT_NO_THROW(Adadelta({w}, {.rho = 1, .eps = 0}));
  EXPECT_NO_THROW(NAdam({w}, {.lr = 0, .betas = {0, 0}, .eps = 0, .momentum_decay = 0}));
  EXPECT_NO_THROW(Rprop({w}, {.step_sizes = {0, 0}}));
}

TEST(Optimizer, HostScalarStateIsSavedAndChecked) {
  Tensor p = make_param();
  optim::ASGD opt({p}, {.lambd = 0.1, .t0 = 0});
  run_steps(opt, p, 3);
  optim::NamedTensors state = opt.state_dict();
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  ASSERT_TRUE(by_name.count("0.eta") && by_name.count("0.mu") && by_name.count("0.ax"));
  EXPECT_EQ(by_name["0.eta"].type_str(), "f64[]");
  EXPECT_DOUBLE_EQ(by_name["0.eta"].item<double>(), 0.01 / std::pow(1 + 0.1 * 0.01 * 3, 0.75));
  EXPECT_DOUBLE_EQ(by_name["0.mu"].item<double>(), 1.0 / 3);
  // A scalar of the wrong type, a missing one, and another optimizer's scalar are each named.
  optim::NamedTensors wrong, missing;
  for (const auto& [name, t] : state) {
    if (name == "0.eta") wrong.emplace_back(name, from_vector<float>({0.5f}, {}));
    else wrong.emplace_back(name, t);
    if (name != "0.mu") missing.emplace_back(name, t);
  }
  const std::string file = "test_optim.cpp";
  test::expect_error_at([&] { opt.load_state_dict(wrong); }, file, __LINE__, "load_state_dict", {"\"0.eta\" must be f64[], got f32[]"});
  test::expect_error_at([&] { opt.load_state_dict(missing); }, file, __LINE__, "load_state_dict", {"missing \"0.mu\""});
  optim::Adam adam({p});
  test::expect_error_at([&] { adam.load_state_dict(state); }, file, __LINE__, "load_state_dict", {"another optimizer (asgd)"});
  // A loaded eta is the next step's: load the state of 3 steps into a fresh ASGD, and both step alike.
  Tensor q = from_vector(p.to_vector<double>()).requires_grad_();
  optim::ASGD fresh({q}, {.lambd = 0.1, .t0 = 0});
  fresh.load_state_dict(state);
  EXPECT_EQ(run_steps(fresh, q, 2), run_steps(opt, p, 2));
}

TEST(Optimizer, NewerOptimizersStepZeroSizeParametersAlongsideOthers) {
  using namespace optim;
  auto run = [](auto make) {
    Tensor empty = zeros({0, 3}, kFloat64).requires_grad_(), p = make_param();
    auto opt = make(std::vector<Tensor>{empty, p});
    const std::vector<double> before = p.to_vector<double>();
    for (int s = 0; s < 2; ++s) {
      opt.zero_grad();
      ((p * p).sum() + empty.sum()).backward();
      opt.step();
    }
    EXPECT_EQ(empty.shape(), (IntList{0, 3}));
    EXPECT_NE(p.to_vector<double>(), before) << opt.kind();
    EXPECT_EQ(opt.steps(0), 2) << opt.kind();
  };
  run([](std::vector<Tensor> ps) { return NAdam(std::move(ps)); });
  run([](std::vector<Tensor> ps) { return RAdam(std::move(ps)); });
  run([](std::vector<Tensor> ps) { return Adamax(std::move(ps)); });
  run([](std::vector<Tensor> ps) { return Adadelta(std::move(ps)); });
  run([](std::vector<Tensor> ps) { return Rprop(std::move(ps)); });
  run([](std::vector<Tensor> ps) { return ASGD(std::move(ps)); });
}

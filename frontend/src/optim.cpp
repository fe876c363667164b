// Optimizers and learning-rate schedules. Updates are graph recorded under NoGradGuard;
// the end of step() realizes the parameters, state, gradients and losses in one realize.

#include "kiln/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"

namespace kiln::optim {

namespace {

// The shortest decimal that reads back as v (1e-10, not std::to_string's 0.000000).
std::string number(double v) {
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void check_hyper(const std::string& op, const std::string& name, double v, bool ok, const Loc& loc) {
  if (!ok || !std::isfinite(v)) throw Error(op, "invalid " + name + ": " + number(v), loc);
}

// Every slot each kind of optimizer makes with some options: tells another optimizer's state.
const std::vector<std::pair<std::string, std::vector<std::string>>>& slots_of_kinds() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kinds{
      {"sgd", {"momentum_buffer"}},
      {"adam", {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
      {"adamw", {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}},
      {"rmsprop", {"square_avg", "momentum_buffer", "grad_avg"}},
      {"adagrad", {"sum"}},
      {"nadam", {"exp_avg", "exp_avg_sq", "mu_product"}},
      {"radam", {"exp_avg", "exp_avg_sq"}},
      {"adamax", {"exp_avg", "exp_inf"}},
      {"adadelta", {"square_avg", "acc_delta"}},
      {"rprop", {"prev", "step_size"}},
      {"asgd", {"ax", "eta", "mu"}},
  };
  return kinds;
}

bool kind_has_slot(const std::string& kind, const std::string& slot) {
  for (const auto& [k, slots] : slots_of_kinds())
    if (k == kind) return std::find(slots.begin(), slots.end(), slot) != slots.end();
  return false;
}

// "12.exp_avg" -> (12, "exp_avg"); false when the name has no index prefix.
bool split_state_name(const std::string& name, size_t& index, std::string& slot) {
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string::npos) return false;
  for (size_t i = 0; i < dot; ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  index = std::stoul(name.substr(0, dot));
  slot = name.substr(dot + 1);
  return true;
}

std::string type_of(const Tensor& t) { return t.type_str(); }

// The gradient as torch.optim 1.13's updates begin: negated first for `maximize` (so an L2 decay and
// every buffer see -g), then the L2 penalty weight_decay * p added (none when it is 0).
Tensor decayed_grad(Tensor g, const Tensor& p, bool maximize, double weight_decay) {
  if (maximize) g = -g;
  if (weight_decay != 0) g = g + p * weight_decay;
  return g;
}

} // namespace

// ---------------------------------------------------------------- Optimizer

// Each tensor once: a tensor listed twice would take two updates a step with two states
// (PyTorch keeps one state per tensor).
Optimizer::Optimizer(std::vector<Tensor> params, double lr, Loc loc)
    : params_(detail::distinct_tensors(std::move(params))), state_(params_.size()), lr_(lr) {
  check_hyper("optimizer", "learning rate", lr, lr >= 0, loc);
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].defined() || !params_[i].requires_grad())
      throw Error("optimizer", "parameter " + std::to_string(i) + " does not require grad", loc);
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

void Optimizer::set_lr(double lr, Loc loc) {
  check_hyper("set_lr", "learning rate", lr, lr >= 0, loc);
  lr_ = lr;
}

Tensor Optimizer::grad_of(size_t i) {
  Tensor g = params_[i].grad();
  detail::trace_guard([this, i, had = g.defined()] { return params_[i].grad().defined() == had; });
  return g;
}

void Optimizer::update_each(const char* op, const Loc& loc,
                            const std::function<void(size_t, Tensor&, Tensor)>& update) {
  detail::UserCall call(op, loc);
  const graph::SourceScope at(loc); // the update's nodes record the caller's line
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = grad_of(i);
    if (g.defined()) update(i, params_[i], std::move(g));
  }
  detail::flush_pending();
}

Tensor& Optimizer::slot(size_t i, const std::string& name, double initial) {
  auto current = [this, i, name]() -> std::shared_ptr<TensorImpl> {
    auto it = state_[i].slots.find(name);
    return it == state_[i].slots.end() ? nullptr : it->second.impl();
  };
  detail::trace_guard([current, was = current()] { return current() == was; });
  auto [it, created] = state_[i].slots.try_emplace(name);
  if (created) {
    const Tensor& p = params_[i];
    it->second = initial == 0 ? zeros_like(p) : full(p.shape(), initial, p.dtype(), p.device());
  }
  return it->second;
}

std::vector<Tensor> Optimizer::host_values(size_t i, size_t n, std::function<void(double*)> fill) {
  return detail::host_values(n, params_[i].dtype(), params_[i].device(), std::move(fill));
}

std::vector<Tensor> Optimizer::state() const {
  std::vector<Tensor> out;
  for (const ParamState& s : state_)
    for (const auto& [name, t] : s.slots) out.push_back(t);
  return out;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  for (size_t i = 0; i < state_.size(); ++i) {
    for (const auto& [name, t] : state_[i].slots) out.emplace_back(std::to_string(i) + "." + name, t);
    for (const auto& [name, v] : state_[i].scalars)
      out.emplace_back(std::to_string(i) + "." + name, from_vector<double>({v}, {}));
    out.emplace_back(std::to_string(i) + ".step", from_vector<int64_t>({state_[i].step}, {}));
  }
  return out;
}

void Optimizer::load_state_dict(const NamedTensors& state, Loc loc) {
  std::string problems;
  std::vector<ParamState> fresh = parse_state(state, problems, loc);
  if (!problems.empty()) throw Error("load_state_dict", "the " + kind() + " state does not match:" + problems, loc);
  state_ = std::move(fresh);
}

std::string Optimizer::state_problems(const NamedTensors& state, Loc loc) const {
  std::string problems;
  (void)parse_state(state, problems, loc);
  return problems;
}

std::vector<Optimizer::ParamState> Optimizer::parse_state(const NamedTensors& state, std::string& problems,
                                                          const Loc& loc) const {
  std::vector<std::string> known = slot_names();
  const std::vector<std::string> scalars = scalar_names();
  known.insert(known.end(), scalars.begin(), scalars.end());
  std::vector<ParamState> fresh(params_.size());
  std::vector<bool> has_step(params_.size());
  auto problem = [&](const std::string& s) { problems += "\n  " + s; };
  // The slots named in `state`, and those that no options of this kind of optimizer make.
  std::set<std::string> slots, foreign;
  for (const auto& [name, t] : state) {
    size_t i = 0;
    std::string slot;
    if (!split_state_name(name, i, slot) || slot == "step") continue;
    slots.insert(slot);
    if (!kind_has_slot(kind(), slot) && std::find(known.begin(), known.end(), slot) == known.end())
      foreign.insert(slot);
  }
  if (!foreign.empty()) {
    // Another kind whose state has every slot named (Adam's and AdamW's look alike): say whose it is.
    std::string kinds;
    for (const auto& [k, ks] : slots_of_kinds()) {
      bool all = k != kind();
      for (const std::string& slot : slots) all = all && kind_has_slot(k, slot);
      if (all) kinds += (kinds.empty() ? "" : " or ") + k;
    }
    if (!kinds.empty()) problem("this is the state of another optimizer (" + kinds + "), not of " + kind());
  }
  for (const auto& [name, t] : state) {
    size_t i = 0;
    std::string slot;
    if (!split_state_name(name, i, slot) || i >= params_.size()) {
      problem("unexpected entry \"" + name + "\" (there are " + std::to_string(params_.size()) + " parameters)");
    } else if (slot == "step") {
      has_step[i] = true;
      if (t.dtype() != kInt64 || t.dim() != 0) problem("\"" + name + "\" must be i64[], got " + type_of(t));
      else if ((fresh[i].step = t.item<int64_t>(loc)) < 0) problem("\"" + name + "\" is negative");
    } else if (std::find(known.begin(), known.end(), slot) == known.end()) {
      problem("unexpected entry \"" + name + "\" (" + kind() + " has no state \"" + slot + "\"" +
              (foreign.count(slot) ? std::string() : " with these options") + ")");
    } else if (std::find(scalars.begin(), scalars.end(), slot) != scalars.end()) {
      if (t.dtype() != kFloat64 || t.dim() != 0) problem("\"" + name + "\" must be f64[], got " + type_of(t));
      else fresh[i].scalars[slot] = t.item<double>(loc);
    } else if (t.shape() != params_[i].shape() || t.dtype() != params_[i].dtype()) {
      problem("\"" + name + "\" is " + type_of(t) + " but parameter " + std::to_string(i) + " is " + type_of(params_[i]));
    } else {
      fresh[i].slots[slot] = t;
    }
  }
  problems += missing_entries(fresh, has_step);
  return fresh;
}

std::string Optimizer::missing_entries(const std::vector<ParamState>& state, const std::vector<bool>& has_step) const {
  std::vector<std::string> needed = slot_names();
  const std::vector<std::string> scalars = scalar_names();
  needed.insert(needed.end(), scalars.begin(), scalars.end());
  std::string problems;
  for (size_t i = 0; i < state.size(); ++i) {
    const std::string prefix = "\n  missing \"" + std::to_string(i) + ".";
    if (!has_step[i]) problems += prefix + "step\" (every parameter has one)";
    for (const std::string& slot : needed)
      if (state[i].step > 0 && !state[i].slots.count(slot) && !state[i].scalars.count(slot))
        problems += prefix + slot + "\" (parameter " + std::to_string(i) + " has taken " + std::to_string(state[i].step) + " steps)";
  }
  return problems;
}

// ---------------------------------------------------------------- SGD

SGD::SGD(std::vector<Tensor> params, SGDOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  check_hyper("SGD", "momentum", opts.momentum, opts.momentum >= 0, loc);
  check_hyper("SGD", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
  check_hyper("SGD", "dampening", opts.dampening, true, loc);
  if (opts.nesterov && (opts.momentum <= 0 || opts.dampening != 0))
    throw Error("SGD", "Nesterov momentum requires a momentum and zero dampening", loc);
}

void SGD::step(Loc loc) {
  const SGDOptions& o = options;
  update_each("SGD::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    g = decayed_grad(g, p, o.maximize, o.weight_decay);
    if (o.momentum != 0) {
      const bool first = state_[i].slots.count("momentum_buffer") == 0; // torch: the first buffer is g
      Tensor& buf = slot(i, "momentum_buffer");
      buf.assign(first ? g : buf * o.momentum + g * (1.0 - o.dampening));
      g = o.nesterov ? g + buf * o.momentum : buf;
    }
    const Tensor lr = host_values(i, 1, [this, i](double* v) {
      ++state_[i].step;
      v[0] = lr_;
    })[0];
    p.assign(p - lr * g);
  });
}

std::vector<std::string> SGD::slot_names() const {
  if (options.momentum == 0) return {};
  return {"momentum_buffer"};
}

// ---------------------------------------------------------------- Adam, AdamW

std::vector<std::string> Adam::slot_names() const {
  if (!options.amsgrad) return {"exp_avg", "exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
}

Adam::Adam(std::vector<Tensor> params, AdamOptions opts, Loc loc) : Adam(std::move(params), opts, false, loc) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions opts, bool decoupled, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts), decoupled_(decoupled) {
  const std::string name = decoupled ? "AdamW" : "Adam";
  const auto [b1, b2] = opts.betas;
  check_hyper(name, "beta1", b1, b1 >= 0 && b1 < 1, loc);
  check_hyper(name, "beta2", b2, b2 >= 0 && b2 < 1, loc);
  check_hyper(name, "eps", opts.eps, opts.eps >= 0, loc);
  check_hyper(name, "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
}

void Adam::step(Loc loc) {
  const auto [b1, b2] = options.betas;
  const double wd = options.weight_decay;
  update_each(decoupled_ ? "AdamW::step" : "Adam::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    // This step's host values: the decoupled decay factor and the bias corrections, in
    // double on the host as torch computes them for a non-capturable step.
    const std::vector<Tensor> h = host_values(i, 3, [this, i, b1, b2, wd](double* v) {
      const auto t = static_cast<double>(++state_[i].step);
      v[0] = 1.0 - lr_ * wd;
      v[1] = std::sqrt(1.0 - std::pow(b2, t));
      v[2] = lr_ / (1.0 - std::pow(b1, t));
    });
    // AdamW's decay is p's (the decoupled factor), never added to the gradient
    g = decayed_grad(g, p, options.maximize, decoupled_ ? 0 : wd);
    if (wd != 0 && decoupled_) p.assign(p * h[0]);
    Tensor& m = slot(i, "exp_avg");
    Tensor& v = slot(i, "exp_avg_sq");
    m.assign(m + (g - m) * (1.0 - b1)); // torch's lerp_(grad, 1 - beta1)
    v.assign(v * b2 + g * (1.0 - b2) * g); // torch's addcmul_(grad, grad, 1 - beta2)
    Tensor second = v;
    if (options.amsgrad) {
      Tensor& vmax = slot(i, "max_exp_avg_sq");
      vmax.assign(maximum(vmax, v));
      second = vmax;
    }
    Tensor denom = sqrt(second) / h[1] + options.eps;
    p.assign(p - h[2] * m / denom);
  });
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o, Loc loc)
    : Adam(std::move(params), AdamOptions{o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize}, true, loc) {}

// ---------------------------------------------------------------- RMSprop

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  // torch's checks, in its order (it accepts alpha > 1 too)
  check_hyper("RMSprop", "eps", opts.eps, opts.eps >= 0, loc);
  check_hyper("RMSprop", "momentum", opts.momentum, opts.momentum >= 0, loc);
  check_hyper("RMSprop", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
  check_hyper("RMSprop", "alpha", opts.alpha, opts.alpha >= 0, loc);
}

std::vector<std::string> RMSprop::slot_names() const {
  std::vector<std::string> out{"square_avg"};
  if (options.momentum > 0) out.push_back("momentum_buffer");
  if (options.centered) out.push_back("grad_avg");
  return out;
}

void RMSprop::step(Loc loc) {
  const RMSpropOptions& o = options;
  update_each("RMSprop::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    const Tensor lr = host_values(i, 1, [this, i](double* v) {
      ++state_[i].step;
      v[0] = lr_;
    })[0];
    g = decayed_grad(g, p, o.maximize, o.weight_decay);
    // torch's order of operations: mul_(alpha).addcmul_(g, g, 1 - alpha), addcmul(a, a, -1),
    // sqrt, add_(eps), addcdiv_(g, avg, -lr) (p + (-lr) (g / avg)).
    Tensor& square_avg = slot(i, "square_avg");
    square_avg.assign(square_avg * o.alpha + g * (1.0 - o.alpha) * g);
    Tensor avg;
    if (o.centered) {
      Tensor& grad_avg = slot(i, "grad_avg");
      grad_avg.assign(grad_avg * o.alpha + g * (1.0 - o.alpha));
      avg = sqrt(square_avg - grad_avg * grad_avg) + o.eps;
    } else {
      avg = sqrt(square_avg) + o.eps;
    }
    if (o.momentum > 0) {
      Tensor& buf = slot(i, "momentum_buffer");
      buf.assign(buf * o.momentum + g / avg);
      p.assign(p - lr * buf);
    } else {
      p.assign(p - lr * (g / avg));
    }
  });
}

// ---------------------------------------------------------------- Adagrad

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  // torch's checks, in its order
  check_hyper("Adagrad", "lr_decay", opts.lr_decay, opts.lr_decay >= 0, loc);
  check_hyper("Adagrad", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
  check_hyper("Adagrad", "initial_accumulator_value", opts.initial_accumulator_value,
              opts.initial_accumulator_value >= 0, loc);
  check_hyper("Adagrad", "eps", opts.eps, opts.eps >= 0, loc);
}

std::vector<std::string> Adagrad::slot_names() const { return {"sum"}; }

void Adagrad::step(Loc loc) {
  const AdagradOptions& o = options;
  update_each("Adagrad::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    // The decayed learning rate of this parameter's step, in double on the host as torch's
    // clr = lr / (1 + (step - 1) * lr_decay).
    const Tensor clr = host_values(i, 1, [this, i, decay = o.lr_decay](double* v) {
      const auto t = static_cast<double>(++state_[i].step);
      v[0] = lr_ / (1.0 + (t - 1.0) * decay);
    })[0];
    g = decayed_grad(g, p, o.maximize, o.weight_decay);
    Tensor& sum = slot(i, "sum", o.initial_accumulator_value);
    sum.assign(sum + g * g); // torch's addcmul_(g, g, value=1)
    p.assign(p - clr * (g / (sqrt(sum) + o.eps)));
  });
}

// ---------------------------------------------------------------- NAdam, RAdam, Adamax

namespace {

// torch's check of Adam-like betas and eps, in its order (eps, then each beta in [0, 1)).
void check_betas_eps(const std::string& op, std::pair<double, double> betas, double eps, const Loc& loc) {
  check_hyper(op, "eps", eps, eps >= 0, loc);
  check_hyper(op, "beta1", betas.first, betas.first >= 0 && betas.first < 1, loc);
  check_hyper(op, "beta2", betas.second, betas.second >= 0 && betas.second < 1, loc);
}

// torch's exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1) and exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
// value=1 - beta2) (NAdam's, RAdam's: Adam's own lerp_ rounds differently).
void update_moments(Tensor& m, Tensor& v, const Tensor& g, double b1, double b2) {
  m.assign(m * b1 + g * (1.0 - b1));
  v.assign(v * b2 + g * (1.0 - b2) * g);
}

} // namespace

NAdam::NAdam(std::vector<Tensor> params, NAdamOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  check_betas_eps("NAdam", opts.betas, opts.eps, loc);
  check_hyper("NAdam", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
  check_hyper("NAdam", "momentum_decay", opts.momentum_decay, opts.momentum_decay >= 0, loc);
}

std::vector<std::string> NAdam::slot_names() const { return {"exp_avg", "exp_avg_sq"}; }
std::vector<std::string> NAdam::scalar_names() const { return {"mu_product"}; }

void NAdam::step(Loc loc) {
  const NAdamOptions& o = options;
  const auto [b1, b2] = o.betas;
  update_each("NAdam::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    // torch 1.13's host arithmetic, in its order: the bias correction and the two step factors.
    const std::vector<Tensor> h = host_values(i, 3, [this, i, b1, b2, psi = o.momentum_decay](double* v) {
      ParamState& s = state_[i];
      const auto t = static_cast<double>(++s.step);
      const double mu = b1 * (1.0 - 0.5 * std::pow(0.96, t * psi));
      const double mu_next = b1 * (1.0 - 0.5 * std::pow(0.96, (t + 1) * psi));
      double& product = s.scalars.try_emplace("mu_product", 1.0).first->second;
      product *= mu;
      const double product_next = product * mu * mu_next; // torch 1.13's formula (mu counted twice)
      v[0] = 1.0 - std::pow(b2, t);
      v[1] = -lr_ * (1.0 - mu) / (1.0 - product);
      v[2] = -lr_ * mu_next / (1.0 - product_next);
    });
    g = decayed_grad(g, p, false, o.weight_decay);
    Tensor& m = slot(i, "exp_avg");
    Tensor& v = slot(i, "exp_avg_sq");
    update_moments(m, v, g, b1, b2);
    const Tensor denom = sqrt(v / h[0]) + o.eps;
    p.assign(p + h[1] * (g / denom) + h[2] * (m / denom)); // two addcdiv_s
  });
}

RAdam::RAdam(std::vector<Tensor> params, RAdamOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  check_betas_eps("RAdam", opts.betas, opts.eps, loc);
  check_hyper("RAdam", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
}

std::vector<std::string> RAdam::slot_names() const { return {"exp_avg", "exp_avg_sq"}; }

void RAdam::step(Loc loc) {
  const RAdamOptions& o = options;
  const auto [b1, b2] = o.betas;
  update_each("RAdam::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    // torch 1.13's host arithmetic: the corrections, the rectification and whether it applies (rho_t > 5).
    const std::vector<Tensor> h = host_values(i, 5, [this, i, b1, b2](double* v) {
      const auto t = static_cast<double>(++state_[i].step);
      const double bc2 = 1.0 - std::pow(b2, t);
      const double rho_inf = 2.0 / (1.0 - b2) - 1.0;
      const double rho_t = rho_inf - 2.0 * t * std::pow(b2, t) / bc2;
      const bool rectify = rho_t > 5.0;
      v[0] = 1.0 - std::pow(b1, t);
      v[1] = lr_;
      v[2] = std::sqrt(bc2);
      v[3] = rectify ? std::sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) : 0.0;
      v[4] = rectify ? 1.0 : 0.0;
    });
    g = decayed_grad(g, p, false, o.weight_decay);
    Tensor& m = slot(i, "exp_avg");
    Tensor& v = slot(i, "exp_avg_sq");
    update_moments(m, v, g, b1, b2);
    const Tensor step = m / h[0] * h[1]; // bias_corrected_exp_avg * lr
    const Tensor rectified = step * (h[2] / (sqrt(v) + o.eps)) * h[3];
    p.assign(where(h[4] > 0.5, p - rectified, p - step));
  });
}

Adamax::Adamax(std::vector<Tensor> params, AdamaxOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  check_betas_eps("Adamax", opts.betas, opts.eps, loc);
  check_hyper("Adamax", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
}

std::vector<std::string> Adamax::slot_names() const { return {"exp_avg", "exp_inf"}; }

void Adamax::step(Loc loc) {
  const AdamaxOptions& o = options;
  const auto [b1, b2] = o.betas;
  update_each("Adamax::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    const Tensor clr = host_values(i, 1, [this, i, b1](double* v) {
      const auto t = static_cast<double>(++state_[i].step);
      v[0] = lr_ / (1.0 - std::pow(b1, t));
    })[0];
    g = decayed_grad(g, p, o.maximize, o.weight_decay);
    Tensor& m = slot(i, "exp_avg");
    Tensor& u = slot(i, "exp_inf");
    m.assign(m * b1 + g * (1.0 - b1));
    u.assign(maximum(u * b2, abs(g) + o.eps));
    p.assign(p - clr * (m / u));
  });
}

// ---------------------------------------------------------------- Adadelta, Rprop, ASGD

Adadelta::Adadelta(std::vector<Tensor> params, AdadeltaOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  check_hyper("Adadelta", "rho", opts.rho, opts.rho >= 0 && opts.rho <= 1, loc);
  check_hyper("Adadelta", "eps", opts.eps, opts.eps >= 0, loc);
  check_hyper("Adadelta", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
}

std::vector<std::string> Adadelta::slot_names() const { return {"square_avg", "acc_delta"}; }

void Adadelta::step(Loc loc) {
  const AdadeltaOptions& o = options;
  update_each("Adadelta::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    const Tensor lr = host_values(i, 1, [this, i](double* v) {
      ++state_[i].step;
      v[0] = lr_;
    })[0];
    g = decayed_grad(g, p, o.maximize, o.weight_decay);
    Tensor& square_avg = slot(i, "square_avg");
    Tensor& acc_delta = slot(i, "acc_delta");
    square_avg.assign(square_avg * o.rho + g * (1.0 - o.rho) * g);
    const Tensor delta = sqrt(acc_delta + o.eps) / sqrt(square_avg + o.eps) * g;
    acc_delta.assign(acc_delta * o.rho + delta * (1.0 - o.rho) * delta);
    p.assign(p - lr * delta);
  });
}

Rprop::Rprop(std::vector<Tensor> params, RpropOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  const auto [minus, plus] = opts.etas;
  if (!(0 < minus && minus < 1 && 1 < plus) || !std::isfinite(plus))
    throw Error("Rprop", "invalid eta values: " + number(minus) + ", " + number(plus), loc);
  const auto [lo, hi] = opts.step_sizes;
  if (!(0 <= lo && lo <= hi) || !std::isfinite(hi))
    throw Error("Rprop", "invalid step sizes: " + number(lo) + ", " + number(hi) + " (need 0 <= min <= max)", loc);
}

std::vector<std::string> Rprop::slot_names() const { return {"prev", "step_size"}; }

void Rprop::step(Loc loc) {
  const RpropOptions& o = options;
  const auto [minus, plus] = o.etas;
  update_each("Rprop::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    (void)host_values(i, 0, [this, i](double*) { ++state_[i].step; });
    if (o.maximize) g = -g;
    Tensor& prev = slot(i, "prev");
    Tensor& step_size = slot(i, "step_size", lr_); // torch fills it with the lr at the first step
    const Tensor s = sign(g * prev);
    const Tensor zero = zeros_like(s); // exact factors: 0 + eta is eta
    const Tensor factor = where(s > 0, zero + plus, where(s < 0, zero + minus, 1.0));
    step_size.assign(clamp(step_size * factor, o.step_sizes.first, o.step_sizes.second));
    g = where(s < 0, zero, g);
    p.assign(p - sign(g) * step_size);
    prev.assign(g);
  });
}

ASGD::ASGD(std::vector<Tensor> params, ASGDOptions opts, Loc loc)
    : Optimizer(std::move(params), opts.lr, loc), options(opts) {
  check_hyper("ASGD", "weight_decay", opts.weight_decay, opts.weight_decay >= 0, loc);
  check_hyper("ASGD", "lambd", opts.lambd, true, loc);
  check_hyper("ASGD", "alpha", opts.alpha, true, loc);
  check_hyper("ASGD", "t0", opts.t0, true, loc);
}

std::vector<std::string> ASGD::slot_names() const { return {"ax"}; }
std::vector<std::string> ASGD::scalar_names() const { return {"eta", "mu"}; }

Tensor ASGD::averaged(size_t i) const {
  auto it = state_.at(i).slots.find("ax");
  return it == state_.at(i).slots.end() ? Tensor() : it->second;
}

void ASGD::step(Loc loc) {
  const ASGDOptions& o = options;
  update_each("ASGD::step", loc, [&](size_t i, Tensor& p, Tensor g) {
    // This step's eta and mu (torch's state, made at the first step from the lr), then the next ones.
    const std::vector<Tensor> h = host_values(i, 4, [this, i, o](double* v) {
      ParamState& s = state_[i];
      double& eta = s.scalars.try_emplace("eta", lr_).first->second;
      double& mu = s.scalars.try_emplace("mu", 1.0).first->second;
      v[0] = eta;
      v[1] = 1.0 - o.lambd * eta;
      v[2] = mu;
      v[3] = mu == 1 ? 1.0 : 0.0;
      const auto t = static_cast<double>(++s.step);
      eta = lr_ / std::pow(1.0 + o.lambd * lr_ * t, o.alpha);
      mu = 1.0 / std::max(1.0, t - o.t0);
    });
    g = decayed_grad(g, p, o.maximize, o.weight_decay);
    const Tensor next = p * h[1] - h[0] * g;
    p.assign(next);
    Tensor& ax = slot(i, "ax");
    ax.assign(where(h[3] > 0.5, next, ax + (next - ax) * h[2]));
  });
}

// ---------------------------------------------------------------- schedules

LRScheduler::LRScheduler(Optimizer& optimizer) : opt_(optimizer), first_(!optimizer.initial_lr_) {
  if (first_) opt_.initial_lr_ = opt_.lr(); // torch's group.setdefault('initial_lr', group['lr'])
  base_lr_ = *opt_.initial_lr_;
}

void LRScheduler::rebase(double lr, bool overwrite) {
  base_lr_ = lr;
  if (overwrite || first_) opt_.initial_lr_ = lr;
}

void LRScheduler::step(Loc loc) { set_epoch(epoch_ + 1, loc); }

void LRScheduler::set_epoch(int64_t epoch, Loc loc) {
  if (epoch < 0) throw Error(name(), "the epoch must be non-negative, got " + std::to_string(epoch), loc);
  check_epoch(epoch, loc);
  set_valid_lr(lr_at(epoch), std::to_string(epoch), loc);
  epoch_ = epoch;
}

void LRScheduler::set_valid_lr(double lr, const std::string& epoch, const Loc& loc) {
  if (!(lr >= 0) || !std::isfinite(lr))
    throw Error(name(), "epoch " + epoch + " gives an invalid learning rate: " + number(lr), loc);
  opt_.set_lr(lr, loc);
}

void LRScheduler::check_epoch(int64_t, const Loc&) const {}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, Loc loc)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) throw Error("StepLR", "step_size must be positive, got " + std::to_string(step_size), loc);
}

double StepLR::lr_at(int64_t epoch) const { return base_lr_ * std::pow(gamma_, static_cast<double>(epoch / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min, Loc loc)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  if (t_max <= 0) throw Error("CosineAnnealingLR", "T_max must be positive, got " + std::to_string(t_max), loc);
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double c = std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr_ - eta_min_) * (1.0 + c) / 2.0;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup, int64_t total, double eta_min, Loc loc)
    : LRScheduler(optimizer), warmup_(warmup), total_(total), eta_min_(eta_min) {
  if (warmup < 0 || total <= warmup)
    throw Error("WarmupCosineLR", "needs 0 <= warmup < total, got warmup " + std::to_string(warmup) + ", total " +
                                      std::to_string(total), loc);
  opt_.set_lr(lr_at(0), loc); // the first step already warms up (PyTorch's schedulers also set it at construction)
}

double WarmupCosineLR::lr_at(int64_t epoch) const {
  if (epoch < warmup_) return base_lr_ * static_cast<double>(epoch + 1) / static_cast<double>(warmup_);
  if (epoch >= total_) return eta_min_;
  const double t = static_cast<double>(epoch - warmup_) / static_cast<double>(total_ - warmup_);
  return eta_min_ + (base_lr_ - eta_min_) * (1.0 + std::cos(M_PI * t)) / 2.0;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma, Loc loc) : LRScheduler(optimizer), gamma_(gamma) {
  check_hyper("ExponentialLR", "gamma", gamma, gamma >= 0, loc);
  set_epoch(0, loc);
}

double ExponentialLR::lr_at(int64_t epoch) const { return base_lr_ * std::pow(gamma_, static_cast<double>(epoch)); }

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma, Loc loc)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  check_hyper("MultiStepLR", "gamma", gamma, gamma >= 0, loc);
  for (int64_t m : milestones_)
    if (m < 0) throw Error("MultiStepLR", "milestones must be non-negative, got " + std::to_string(m), loc);
  std::sort(milestones_.begin(), milestones_.end()); // torch's closed form sorts them too
  set_epoch(0, loc);                                 // a milestone 0 decays epoch 0, as torch
}

double MultiStepLR::lr_at(int64_t epoch) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  return base_lr_ * std::pow(gamma_, static_cast<double>(passed)); // torch's bisect_right
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters, Loc loc)
    : LRScheduler(optimizer), start_(start_factor), end_(end_factor), total_iters_(total_iters) {
  check_hyper("LinearLR", "start_factor (expected in [0, 1])", start_factor, start_factor >= 0 && start_factor <= 1,
              loc);
  check_hyper("LinearLR", "end_factor (expected in [0, 1])", end_factor, end_factor >= 0 && end_factor <= 1, loc);
  if (total_iters <= 0)
    throw Error("LinearLR", "total_iters must be positive, got " + std::to_string(total_iters), loc);
  set_epoch(0, loc);
}

double LinearLR::lr_at(int64_t epoch) const {
  const auto t = static_cast<double>(std::min(total_iters_, epoch));
  return base_lr_ * (start_ + (end_ - start_) * t / static_cast<double>(total_iters_)); // torch's order
}

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters, Loc loc)
    : LRScheduler(optimizer), factor_(factor), total_iters_(total_iters) {
  check_hyper("ConstantLR", "factor (expected in [0, 1])", factor, factor >= 0 && factor <= 1, loc);
  if (total_iters < 0)
    throw Error("ConstantLR", "total_iters must be non-negative, got " + std::to_string(total_iters), loc);
  set_epoch(0, loc);
}

double ConstantLR::lr_at(int64_t epoch) const {
  const double after = epoch >= total_iters_ ? 1.0 : 0.0;
  return base_lr_ * (factor_ + after * (1.0 - factor_)); // torch's expression, bit for bit
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda, Loc loc)
    : LRScheduler(optimizer), lambda_(std::move(lr_lambda)) {
  if (!lambda_) throw Error("LambdaLR", "lr_lambda is empty", loc);
  set_epoch(0, loc);
}

double LambdaLR::lr_at(int64_t epoch) const { return base_lr_ * lambda_(epoch); }

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleLROptions o, Loc loc)
    : LRScheduler(optimizer), total_steps_(total_steps), anneal_(o.anneal_strategy) {
  if (total_steps <= 0)
    throw Error("OneCycleLR", "expected a positive total_steps, got " + std::to_string(total_steps), loc);
  check_hyper("OneCycleLR", "pct_start (expected in [0, 1])", o.pct_start, o.pct_start >= 0 && o.pct_start <= 1, loc);
  check_hyper("OneCycleLR", "max_lr", max_lr, max_lr >= 0, loc);
  check_hyper("OneCycleLR", "div_factor", o.div_factor, o.div_factor > 0, loc);
  check_hyper("OneCycleLR", "final_div_factor", o.final_div_factor, o.final_div_factor > 0, loc);
  if (o.cycle_momentum)
    throw Error("OneCycleLR", "cycle_momentum is not supported: kiln's momentum and betas are constants of the "
                              "recorded update; pass cycle_momentum = false", loc);
  const double initial = max_lr / o.div_factor, min_lr = initial / o.final_div_factor;
  const double total = static_cast<double>(total_steps), up = o.pct_start * total - 1;
  rebase(initial, true); // torch's OneCycleLR sets the group's 'initial_lr'
  if (o.three_phase) phases_ = {{up, initial, max_lr}, {2 * o.pct_start * total - 2, max_lr, initial}, {total - 1, initial, min_lr}};
  else phases_ = {{up, initial, max_lr}, {total - 1, max_lr, min_lr}};
  set_epoch(0, loc);
}

void OneCycleLR::check_epoch(int64_t epoch, const Loc& loc) const {
  if (epoch > total_steps_)
    throw Error("OneCycleLR", "tried to step " + std::to_string(epoch + 1) + " times; total_steps is " +
                                  std::to_string(total_steps_), loc);
}

double OneCycleLR::lr_at(int64_t epoch) const {
  const auto step = static_cast<double>(epoch);
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& ph = phases_[i];
    if (step <= ph.end_step || i + 1 == phases_.size()) {
      if (step > ph.end_step) return ph.end; // epoch total_steps: torch extrapolates past the end (see optim.h)
      const double pct = (step - start_step) / (ph.end_step - start_step);
      if (anneal_ == Anneal::linear) return (ph.end - ph.start) * pct + ph.start;
      return ph.end + (ph.start - ph.end) / 2.0 * (std::cos(M_PI * pct) + 1);
    }
    start_step = ph.end_step;
  }
  return 0; // not reached: the last phase always matches
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power, Loc loc)
    : LRScheduler(optimizer), total_iters_(total_iters), power_(power) {
  if (total_iters <= 0)
    throw Error("PolynomialLR", "total_iters must be positive, got " + std::to_string(total_iters), loc);
  check_hyper("PolynomialLR", "power", power, true, loc);
  set_epoch(0, loc);
}

double PolynomialLR::lr_at(int64_t epoch) const {
  const double t = static_cast<double>(std::min(total_iters_, epoch)) / static_cast<double>(total_iters_);
  return base_lr_ * std::pow(1.0 - t, power_); // torch's closed form, in its order
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t t_0, int64_t t_mult,
                                                         double eta_min, Loc loc)
    : LRScheduler(optimizer), t_0_(t_0), t_mult_(t_mult), eta_min_(eta_min) {
  const char* op = "CosineAnnealingWarmRestarts";
  if (t_0 <= 0) throw Error(op, "expected a positive integer T_0, got " + std::to_string(t_0), loc);
  if (t_mult < 1) throw Error(op, "expected an integer T_mult >= 1, got " + std::to_string(t_mult), loc);
  check_hyper(op, "eta_min", eta_min, true, loc);
  set_epoch(0, loc);
}

double CosineAnnealingWarmRestarts::lr_of(double t_cur, double t_i) const {
  return eta_min_ + (base_lr_ - eta_min_) * (1 + std::cos(M_PI * t_cur / t_i)) / 2;
}

// T_cur and T_i as torch's step() counts them, epoch by epoch: exact integers (the cycle loop runs
// log_T_mult(epoch) times).
double CosineAnnealingWarmRestarts::lr_at(int64_t epoch) const {
  int64_t t_cur = epoch, t_i = t_0_;
  if (t_mult_ == 1) t_cur = epoch % t_0_;
  else
    while (t_cur >= t_i) t_cur -= t_i, t_i *= t_mult_;
  return lr_of(static_cast<double>(t_cur), static_cast<double>(t_i));
}

// torch's step(epoch) with an explicit (fractional) epoch, expression for expression.
double CosineAnnealingWarmRestarts::fractional_lr_at(double epoch) const {
  const auto t_0 = static_cast<double>(t_0_), t_mult = static_cast<double>(t_mult_);
  if (epoch < t_0) return lr_of(epoch, t_0);
  if (t_mult_ == 1) return lr_of(std::fmod(epoch, t_0), t_0); // Python's % (epoch >= 0 here)
  const double n = std::floor(std::log(epoch / t_0 * (t_mult - 1) + 1) / std::log(t_mult));
  return lr_of(epoch - t_0 * (std::pow(t_mult, n) - 1) / (t_mult - 1), t_0 * std::pow(t_mult, n));
}

void CosineAnnealingWarmRestarts::step(double epoch, Loc loc) {
  if (!(epoch >= 0) || !std::isfinite(epoch))
    throw Error(name(), "expected a non-negative epoch, got " + number(epoch), loc);
  set_valid_lr(fractional_lr_at(epoch), number(epoch), loc);
  epoch_ = static_cast<int64_t>(std::floor(epoch));
}

CyclicLR::CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicLROptions o, Loc loc)
    : LRScheduler(optimizer), max_lr_(max_lr), scale_fn_(std::move(o.scale_fn)), scale_mode_(o.scale_mode) {
  const char* op = "CyclicLR";
  check_hyper(op, "base_lr", base_lr, base_lr >= 0, loc);
  check_hyper(op, "max_lr", max_lr, max_lr >= 0, loc);
  check_hyper(op, "step_size_up (expected > 0)", o.step_size_up, o.step_size_up > 0, loc);
  const double down = o.step_size_down.value_or(o.step_size_up);
  check_hyper(op, "step_size_down (expected >= 0)", down, down >= 0, loc);
  check_hyper(op, "gamma", o.gamma, true, loc);
  if (o.cycle_momentum)
    throw Error(op, "cycle_momentum is not supported: kiln's momentum and betas are constants of the "
                    "recorded update; pass cycle_momentum = false", loc);
  total_size_ = o.step_size_up + down;
  step_ratio_ = o.step_size_up / total_size_;
  if (!scale_fn_) { // torch's three modes, each with its scale_mode
    const double gamma = o.gamma;
    scale_mode_ = o.mode == CyclicMode::exp_range ? ScaleMode::iterations : ScaleMode::cycle;
    switch (o.mode) {
    case CyclicMode::triangular: scale_fn_ = [](double) { return 1.0; }; break;
    case CyclicMode::triangular2: scale_fn_ = [](double x) { return 1 / std::pow(2.0, x - 1); }; break;
    case CyclicMode::exp_range: scale_fn_ = [gamma](double x) { return std::pow(gamma, x); }; break;
    }
  }
  rebase(base_lr, false); // torch sets the group's lr to base_lr before its base class records 'initial_lr'
  set_epoch(0, loc);
}

double CyclicLR::lr_at(int64_t epoch) const {
  const auto e = static_cast<double>(epoch);
  const double cycle = std::floor(1 + e / total_size_), x = 1. + e / total_size_ - cycle;
  const double scale = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  const double height = (max_lr_ - base_lr_) * scale;
  return base_lr_ + height * scale_fn_(scale_mode_ == ScaleMode::cycle ? cycle : e);
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones, Loc loc)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  const char* op = "SequentialLR";
  if (schedulers_.empty()) throw Error(op, "expects at least one scheduler", loc);
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    if (!schedulers_[i]) throw Error(op, "scheduler " + std::to_string(i) + " is null", loc);
    if (&schedulers_[i]->opt_ != &opt_)
      throw Error(op, "expects all schedulers to belong to the same optimizer, but scheduler " + std::to_string(i) +
                          " schedules another one", loc);
  }
  if (milestones_.size() + 1 != schedulers_.size())
    throw Error(op, "expects one more scheduler than milestones, got " + std::to_string(schedulers_.size()) +
                        " schedulers and " + std::to_string(milestones_.size()) + " milestones", loc);
  for (size_t i = 0; i < milestones_.size(); ++i)
    if (milestones_[i] <= (i == 0 ? 0 : milestones_[i - 1]))
      throw Error(op, "expects increasing positive milestones, got " + std::to_string(milestones_[i]) +
                          " at index " + std::to_string(i), loc);
  set_epoch(0, loc);
}

std::pair<size_t, int64_t> SequentialLR::running(int64_t epoch) const {
  const auto i = static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  return {i, i == 0 ? epoch : epoch - milestones_[i - 1]}; // torch's bisect_right, then step(0) at the milestone
}

double SequentialLR::lr_at(int64_t epoch) const {
  const auto [i, own] = running(epoch);
  return schedulers_[i]->lr_at(own);
}

void SequentialLR::check_epoch(int64_t epoch, const Loc& loc) const {
  const auto [i, own] = running(epoch);
  schedulers_[i]->check_epoch(own, loc);
}

// ---------------------------------------------------------------- ReduceLROnPlateau

namespace {

ReduceLROnPlateauOptions checked(ReduceLROnPlateauOptions o, const Loc& loc) {
  const char* op = "ReduceLROnPlateau";
  check_hyper(op, "factor (expected in [0, 1))", o.factor, o.factor >= 0 && o.factor < 1, loc);
  check_hyper(op, "patience", static_cast<double>(o.patience), o.patience >= 0, loc);
  check_hyper(op, "threshold", o.threshold, o.threshold >= 0, loc);
  check_hyper(op, "cooldown", static_cast<double>(o.cooldown), o.cooldown >= 0, loc);
  check_hyper(op, "min_lr", o.min_lr, o.min_lr >= 0, loc);
  check_hyper(op, "eps", o.eps, o.eps >= 0, loc);
  return o;
}

} // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions o, Loc loc)
    : options(checked(o, loc)), opt_(optimizer),
      best_((o.mode == PlateauMode::min ? 1 : -1) * std::numeric_limits<double>::infinity()) {} // torch's mode_worse

bool ReduceLROnPlateau::is_better(double a) const {
  const ReduceLROnPlateauOptions& o = options;
  const bool rel = o.threshold_mode == ThresholdMode::rel;
  if (o.mode == PlateauMode::min) return rel ? a < best_ * (1.0 - o.threshold) : a < best_ - o.threshold;
  return rel ? a > best_ * (o.threshold + 1.0) : a > best_ + o.threshold;
}

void ReduceLROnPlateau::step(double metric) {
  ++epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0; // bad epochs are not counted during cooldown
  }
  if (num_bad_epochs_ > options.patience) {
    const double old_lr = opt_.lr(), new_lr = std::max(old_lr * options.factor, options.min_lr);
    if (old_lr - new_lr > options.eps) opt_.set_lr(new_lr);
    cooldown_counter_ = options.cooldown;
    num_bad_epochs_ = 0;
  }
}

SchedulerState ReduceLROnPlateau::state_dict() const {
  return {{"plateau.best", number(best_)},
          {"plateau.num_bad_epochs", std::to_string(num_bad_epochs_)},
          {"plateau.cooldown_counter", std::to_string(cooldown_counter_)},
          {"plateau.epoch", std::to_string(epoch_)},
          {"plateau.lr", number(opt_.lr())}};
}

namespace {

// The entry `key` of a saved state, read whole by parse (strtod or strtoll); problems appended.
template <class T, class Parse>
T state_entry(const SchedulerState& state, const std::string& key, Parse parse, std::string& problems) {
  const auto it = state.find(key);
  if (it == state.end()) {
    problems += "\n  missing \"" + key + "\"";
    return T{};
  }
  char* end = nullptr;
  const T v = parse(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0') problems += "\n  \"" + key + "\" is not a number: '" + it->second + "'";
  return v;
}

} // namespace

void ReduceLROnPlateau::load_state_dict(const SchedulerState& state, Loc loc) {
  std::string problems;
  auto real = [&](const std::string& key) {
    return state_entry<double>(state, key, [](const char* s, char** e) { return std::strtod(s, e); }, problems);
  };
  auto integer = [&](const std::string& key) {
    return state_entry<int64_t>(state, key, [](const char* s, char** e) { return static_cast<int64_t>(std::strtoll(s, e, 10)); },
                                problems);
  };
  const double best = real("plateau.best"), lr = real("plateau.lr");
  const int64_t bad = integer("plateau.num_bad_epochs"), cooldown = integer("plateau.cooldown_counter"),
                epoch = integer("plateau.epoch");
  if (problems.empty() && (bad < 0 || cooldown < 0 || epoch < 0 || !(lr >= 0) || !std::isfinite(lr)))
    problems += "\n  a negative count or an invalid lr (" + number(lr) + ")";
  if (!problems.empty()) throw Error("ReduceLROnPlateau", "the saved state does not load:" + problems, loc);
  opt_.set_lr(lr, loc);
  best_ = best, num_bad_epochs_ = bad, cooldown_counter_ = cooldown, epoch_ = epoch;
}

} // namespace kiln::optim

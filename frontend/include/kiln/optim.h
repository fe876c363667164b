#pragma once
/// \file optim.h
/// Optimizers with torch.optim 1.13's update formulas (SGD with momentum, Nesterov and
/// weight decay; Adam; AdamW; RMSprop, centered or not, with momentum; Adagrad; NAdam; RAdam;
/// Adamax; Adadelta; Rprop; ASGD; each with PyTorch's `maximize` where torch 1.13 has it) and
/// learning-rate schedules.
///
/// step() records the update as graph: each parameter is assign()ed its new value
/// and the optimizer state (momentum buffers, moments) are tensors; then it realizes,
/// in ONE realize, everything the step changed since the last one: parameters, state,
/// gradients, BatchNorm's running statistics, any other assign()ed tensor and the
/// losses backward() ran from. So the whole eager training step (forward, backward,
/// update) is scheduled, fused and run at once, the realized tensors drop their
/// history, and the next step reads buffers: a PyTorch-style loop costs the same at
/// every step, with no realize() call. (Without an optimizer, tensors assign()ed by
/// hand are realized with the next value read or realize() after a backward().)
/// Inside a compile() trace nothing is realized.
///
/// Values that change from step to step (the learning rate, Adam's bias
/// corrections, Adagrad's decayed learning rate) enter the graph as 0-d input tensors, not constants, so the
/// compiled kernels are the same at every step.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::optim {

/// A list of (name, tensor) pairs.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// The base of the optimizers: the parameters, the learning rate and per-parameter state.
class Optimizer {
public:
  /// Optimizes `params` (each must require grad; a tensor listed twice counts once, with one state)
  /// with learning rate `lr`; errors name `loc`.
  Optimizer(std::vector<Tensor> params, double lr, Loc loc = Loc::current());
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Records one update of every parameter that has a gradient, and realizes it (see above);
  /// errors raised inside name `loc`, and the update's nodes record it as their source line.
  virtual void step(Loc loc = Loc::current()) = 0;
  /// The optimizer's name as stored in checkpoints ("sgd", "adam", "adamw", "rmsprop", "adagrad", "nadam",
  /// "radam", "adamax", "adadelta", "rprop", "asgd").
  virtual std::string kind() const = 0;
  /// Clears every parameter's gradient (like PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  /// The learning rate used by the next step().
  double lr() const { return lr_; }
  /// Changes the learning rate (schedulers call this).
  void set_lr(double lr, Loc loc = Loc::current());
  /// The parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  /// The base lr of the closed-form schedules (torch's param group 'initial_lr'): the lr when the
  /// first LRScheduler was constructed on this optimizer (OneCycleLR: its initial lr); unset before.
  std::optional<double> initial_lr() const { return initial_lr_; }
  /// Steps taken by parameter i (its gradient was defined at that many step() calls).
  int64_t steps(size_t i) const { return state_.at(i).step; }

  /// All state tensors (to realize together with the parameters after step()).
  std::vector<Tensor> state() const;
  /// The state as named tensors: "<param index>.<slot>" (e.g. "0.exp_avg"), "<param index>.<scalar>"
  /// for the per-parameter host numbers some optimizers keep (0-d f64: NAdam's "mu_product", ASGD's
  /// "eta" and "mu") and, for every parameter, "<param index>.step" (0-d i64; 0 before its first
  /// update). Slots and scalars not created yet are absent.
  NamedTensors state_dict() const;
  /// Replaces the state with `state` (as from state_dict()); checks names, shapes and dtypes,
  /// that every parameter has its step and every parameter that has taken a step has each
  /// of slot_names(), and throws a kiln::Error naming `loc` and listing every mismatch, missing
  /// and unexpected entry (those of state_problems()); the state of another kind of optimizer (Adam's
  /// "exp_avg" given to RMSprop) is named as such. The state is loaded only if all of it matches.
  void load_state_dict(const NamedTensors& state, Loc loc = Loc::current());
  /// What load_state_dict(state) would refuse: one "\n  " line per problem, "" when it would load.
  /// Reading a step's value (it may be lazy) names `loc`.
  std::string state_problems(const NamedTensors& state, Loc loc = Loc::current()) const;

protected:
  /// Per-parameter state: named tensor slots and the step count.
  struct ParamState {
    std::map<std::string, Tensor> slots; ///< e.g. "momentum_buffer", "exp_avg"
    std::map<std::string, double> scalars; ///< host numbers read by host_values (e.g. ASGD's "eta")
    int64_t step = 0;                    ///< updates applied so far
  };
  /// The slots this optimizer's step creates with its options (load_state_dict requires
  /// each of them for a parameter that has taken a step, and rejects others).
  virtual std::vector<std::string> slot_names() const = 0;
  /// The per-parameter host scalars this optimizer keeps (ParamState::scalars; load_state_dict
  /// requires each of them, as 0-d f64, for a parameter that has taken a step). None by default.
  virtual std::vector<std::string> scalar_names() const { return {}; }
  /// load_state_dict's list of missing entries (each on a line of its own; empty when none).
  std::string missing_entries(const std::vector<ParamState>& state, const std::vector<bool>& has_step) const;
  /// The per-parameter state that `state` (as from state_dict()) describes; what is wrong with it
  /// is appended to `problems`, one "\n  " line each.
  std::vector<ParamState> parse_state(const NamedTensors& state, std::string& problems, const Loc& loc) const;
  /// The gradient of parameter i (undefined: no update). Inside a compile() trace, the
  /// trace is replayed only while that stays so.
  Tensor grad_of(size_t i);
  /// One step's frame, shared by every optimizer: as the user's call `op` at `loc` (errors and the
  /// update's nodes name that line) and without gradients, update(i, parameter i, its gradient) for
  /// each parameter that has a gradient (grad_of); then the updates are realized together.
  void update_each(const char* op, const Loc& loc, const std::function<void(size_t, Tensor&, Tensor)>& update);
  /// The slot `name` of parameter i, created like the parameter, filled with `initial`
  /// (zeros by default), on first use.
  /// Update it with Tensor::assign() (so that compile() captures the update). Inside a
  /// trace, the trace is replayed only while the slot is this same tensor (a new slot
  /// or a loaded state traces again).
  Tensor& slot(size_t i, const std::string& name, double initial = 0);
  /// n 0-d tensors in parameter i's dtype computed by fill() on the host once per step:
  /// now, or before every replay of a compiled step (kernel arguments, not constants,
  /// so a scheduled learning rate and per-step corrections stay current). fill() is
  /// where per-step host state (the step count) advances.
  std::vector<Tensor> host_values(size_t i, size_t n, std::function<void(double*)> fill);

  std::vector<Tensor> params_;     ///< the parameters
  std::vector<ParamState> state_;  ///< one per parameter
  double lr_;                      ///< current learning rate
  std::optional<double> initial_lr_; ///< see initial_lr()
  friend class LRScheduler;        // records initial_lr_
};

/// Options of SGD (designated initializers: `{.lr = 0.1, .momentum = 0.9}`).
struct SGDOptions {
  double lr = 0.01;           ///< learning rate
  double momentum = 0;        ///< momentum factor
  double dampening = 0;       ///< dampening of the momentum's new-gradient term
  double weight_decay = 0;    ///< L2 penalty added to the gradient
  bool nesterov = false;      ///< Nesterov momentum (needs momentum > 0 and dampening 0)
  bool maximize = false;      ///< ascend: the gradient is negated before everything else (torch 1.13)
};

/// Stochastic gradient descent, exactly torch.optim.SGD's update:
/// g = maximize ? -g : g; g += wd p; b = g at the first step, else b = mu b + (1 - dampening) g;
/// g = nesterov ? g + mu b : b; p -= lr g.
class SGD : public Optimizer {
public:
  /// SGD over `params`.
  SGD(std::vector<Tensor> params, SGDOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;     ///< one update
  std::string kind() const override { return "sgd"; } ///< "sgd"
  SGDOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override; ///< "momentum_buffer" with a momentum
};

/// Options of Adam (designated initializers: `{.lr = 1e-3}`).
struct AdamOptions {
  double lr = 1e-3;                            ///< learning rate
  std::pair<double, double> betas{0.9, 0.999}; ///< decay of the first and second moments
  double eps = 1e-8;                           ///< added to the denominator
  double weight_decay = 0;                     ///< L2 penalty added to the gradient
  bool amsgrad = false;                        ///< use the maximum of past second moments
  bool maximize = false;                       ///< ascend: the gradient is negated first (torch 1.13)
};

/// Options of AdamW: Adam's, with decoupled weight decay defaulting to 1e-2 as PyTorch.
struct AdamWOptions {
  double lr = 1e-3;                            ///< learning rate
  std::pair<double, double> betas{0.9, 0.999}; ///< decay of the first and second moments
  double eps = 1e-8;                           ///< added to the denominator
  double weight_decay = 1e-2;                  ///< decoupled decay: p *= 1 - lr wd
  bool amsgrad = false;                        ///< use the maximum of past second moments
  bool maximize = false;                       ///< ascend: the gradient is negated first (torch 1.13)
};

/// Adam, exactly torch.optim.Adam's update (single-tensor path): g = maximize ? -g : g;
/// g += wd p (Adam only);
/// m += (1 - b1)(g - m); v = b2 v + (1 - b2) g^2;
/// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
/// With `decoupled` (AdamW), p *= 1 - lr wd first instead of adding wd p to g.
class Adam : public Optimizer {
public:
  /// Adam over `params`.
  Adam(std::vector<Tensor> params, AdamOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;       ///< one update
  std::string kind() const override { return decoupled_ ? "adamw" : "adam"; } ///< "adam" or "adamw"
  AdamOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  /// For AdamW.
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled, Loc loc);
  std::vector<std::string> slot_names() const override; ///< the moments (and their maximum with amsgrad)
private:
  bool decoupled_;
};

/// AdamW: Adam with decoupled weight decay (torch.optim.AdamW).
class AdamW : public Adam {
public:
  /// AdamW over `params`.
  AdamW(std::vector<Tensor> params, AdamWOptions options = {}, Loc loc = Loc::current());
};

/// Options of RMSprop (designated initializers: `{.lr = 1e-3, .momentum = 0.9, .centered = true}`),
/// torch.optim.RMSprop's defaults and order.
struct RMSpropOptions {
  double lr = 1e-2;         ///< learning rate
  double alpha = 0.99;      ///< smoothing constant of the averages
  double eps = 1e-8;        ///< added to the denominator
  double weight_decay = 0;  ///< L2 penalty added to the gradient
  double momentum = 0;      ///< momentum factor (> 0: a momentum buffer)
  bool centered = false;    ///< normalize by the estimated variance (square_avg - grad_avg^2)
  bool maximize = false;    ///< ascend: the gradient is negated first (torch 1.13)
};

/// RMSprop, exactly torch.optim.RMSprop's update (single-tensor path): g = maximize ? -g : g;
/// g += wd p; v = alpha v + (1 - alpha) g^2; centered: a = alpha a + (1 - alpha) g,
/// avg = sqrt(v - a^2) + eps, else avg = sqrt(v) + eps; with momentum: b = mu b + g / avg,
/// p -= lr b, else p -= lr (g / avg). State: "square_avg", "momentum_buffer" (momentum > 0),
/// "grad_avg" (centered), all starting at zero.
class RMSprop : public Optimizer {
public:
  /// RMSprop over `params`.
  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;           ///< one update
  std::string kind() const override { return "rmsprop"; } ///< "rmsprop"
  RMSpropOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override; ///< "square_avg", and the buffers the options need
};

/// Options of Adagrad (designated initializers: `{.lr = 0.1, .lr_decay = 1e-3}`),
/// torch.optim.Adagrad's defaults and order.
struct AdagradOptions {
  double lr = 1e-2;                     ///< learning rate
  double lr_decay = 0;                  ///< step t uses lr / (1 + (t - 1) lr_decay)
  double weight_decay = 0;              ///< L2 penalty added to the gradient
  double initial_accumulator_value = 0; ///< the starting value of the sum of squares
  double eps = 1e-10;                   ///< added to the denominator
  bool maximize = false;                ///< ascend: the gradient is negated first (torch 1.13)
};

/// Adagrad, exactly torch.optim.Adagrad's update (dense gradients): at the parameter's step t,
/// g = maximize ? -g : g; g += wd p; clr = lr / (1 + (t - 1) lr_decay); s += g^2;
/// p -= clr (g / (sqrt(s) + eps)). State: "sum", starting at initial_accumulator_value (made
/// at the parameter's first update, where PyTorch makes it at construction: the same values).
class Adagrad : public Optimizer {
public:
  /// Adagrad over `params`.
  Adagrad(std::vector<Tensor> params, AdagradOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;           ///< one update
  std::string kind() const override { return "adagrad"; } ///< "adagrad"
  AdagradOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override; ///< "sum"
};

/// Options of NAdam (designated initializers), torch.optim.NAdam 1.13's defaults and order
/// (torch 1.13's NAdam has no `maximize`).
struct NAdamOptions {
  double lr = 2e-3;                            ///< learning rate
  std::pair<double, double> betas{0.9, 0.999}; ///< decay of the first and second moments
  double eps = 1e-8;                           ///< added to the denominator
  double weight_decay = 0;                     ///< L2 penalty added to the gradient
  double momentum_decay = 4e-3;                ///< psi of mu_t = beta1 (1 - 0.96^(t psi) / 2)
};

/// NAdam (Adam with Nesterov momentum), exactly torch.optim.NAdam 1.13's update: g += wd p;
/// mu_t = b1 (1 - 0.96^(t psi) / 2); P *= mu_t (the "mu_product" scalar, from 1), and
/// P' = P mu_t mu_{t+1} (torch 1.13 multiplies mu_t in twice here; torch 2 uses P mu_{t+1});
/// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; d = sqrt(v / (1 - b2^t)) + eps;
/// p -= lr (1 - mu_t) / (1 - P) g / d; p -= lr mu_{t+1} / (1 - P') m / d.
class NAdam : public Optimizer {
public:
  /// NAdam over `params`; errors (options out of torch's ranges) name `loc`.
  NAdam(std::vector<Tensor> params, NAdamOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;         ///< one update
  std::string kind() const override { return "nadam"; } ///< "nadam"
  NAdamOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override;   ///< "exp_avg", "exp_avg_sq"
  std::vector<std::string> scalar_names() const override; ///< "mu_product"
};

/// Options of RAdam (designated initializers), torch.optim.RAdam 1.13's defaults and order
/// (torch 1.13's RAdam has no `maximize` nor decoupled decay).
struct RAdamOptions {
  double lr = 1e-3;                            ///< learning rate
  std::pair<double, double> betas{0.9, 0.999}; ///< decay of the first and second moments
  double eps = 1e-8;                           ///< added to the denominator
  double weight_decay = 0;                     ///< L2 penalty added to the gradient
};

/// RAdam (rectified Adam), exactly torch.optim.RAdam 1.13's update: g += wd p; Adam's moments;
/// rho_inf = 2 / (1 - b2) - 1, rho_t = rho_inf - 2 t b2^t / (1 - b2^t); while rho_t <= 5,
/// p -= lr m / (1 - b1^t) (momentum SGD); after, p -= lr m / (1 - b1^t) * sqrt(1 - b2^t) /
/// (sqrt(v) + eps) * r_t with the rectification r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf /
/// ((rho_inf - 4)(rho_inf - 2) rho_t)). Which branch is a host value of the step, so a compiled
/// step keeps replaying when it switches.
class RAdam : public Optimizer {
public:
  /// RAdam over `params`; errors (options out of torch's ranges) name `loc`.
  RAdam(std::vector<Tensor> params, RAdamOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;         ///< one update
  std::string kind() const override { return "radam"; } ///< "radam"
  RAdamOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override; ///< "exp_avg", "exp_avg_sq"
};

/// Options of Adamax (designated initializers), torch.optim.Adamax 1.13's defaults and order.
struct AdamaxOptions {
  double lr = 2e-3;                            ///< learning rate
  std::pair<double, double> betas{0.9, 0.999}; ///< decay of the first moment and of the infinity norm
  double eps = 1e-8;                           ///< added to |g| in the norm
  double weight_decay = 0;                     ///< L2 penalty added to the gradient
  bool maximize = false;                       ///< ascend: the gradient is negated first
};

/// Adamax (Adam with the infinity norm), exactly torch.optim.Adamax 1.13's update:
/// g = maximize ? -g : g; g += wd p; m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps);
/// p -= lr / (1 - b1^t) m / u. State: "exp_avg", "exp_inf".
class Adamax : public Optimizer {
public:
  /// Adamax over `params`; errors (options out of torch's ranges) name `loc`.
  Adamax(std::vector<Tensor> params, AdamaxOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;          ///< one update
  std::string kind() const override { return "adamax"; } ///< "adamax"
  AdamaxOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override; ///< "exp_avg", "exp_inf"
};

/// Options of Adadelta (designated initializers), torch.optim.Adadelta 1.13's defaults and order.
struct AdadeltaOptions {
  double lr = 1.0;         ///< scales the delta
  double rho = 0.9;        ///< decay of the running averages, in [0, 1]
  double eps = 1e-6;       ///< added inside both square roots
  double weight_decay = 0; ///< L2 penalty added to the gradient
  bool maximize = false;   ///< ascend: the gradient is negated first
};

/// Adadelta, exactly torch.optim.Adadelta 1.13's update: g = maximize ? -g : g; g += wd p;
/// s = rho s + (1 - rho) g^2; d = sqrt(a + eps) / sqrt(s + eps) g; a = rho a + (1 - rho) d^2;
/// p -= lr d. State: "square_avg", "acc_delta".
class Adadelta : public Optimizer {
public:
  /// Adadelta over `params`; errors (options out of torch's ranges) name `loc`.
  Adadelta(std::vector<Tensor> params, AdadeltaOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;            ///< one update
  std::string kind() const override { return "adadelta"; } ///< "adadelta"
  AdadeltaOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override; ///< "square_avg", "acc_delta"
};

/// Options of Rprop (designated initializers), torch.optim.Rprop 1.13's defaults and order
/// (torch 1.13's Rprop has no weight decay).
struct RpropOptions {
  double lr = 1e-2;                                ///< the initial step size
  std::pair<double, double> etas{0.5, 1.2};        ///< step size factors (etaminus < 1 < etaplus)
  std::pair<double, double> step_sizes{1e-6, 50};  ///< the least and the largest step size
  bool maximize = false;                           ///< ascend: the gradient is negated first
};

/// Rprop (resilient backpropagation), exactly torch.optim.Rprop 1.13's update: g = maximize ? -g : g;
/// s = sign(g prev); step_size *= etaplus where s > 0, etaminus where s < 0, then clamped to
/// step_sizes; g = 0 where s < 0; p -= sign(g) step_size; prev = g. State: "prev" (from 0) and
/// "step_size" (from the lr at the parameter's first step; a later lr has no effect, as torch).
class Rprop : public Optimizer {
public:
  /// Rprop over `params`; errors (etas not 0 < etaminus < 1 < etaplus, step sizes not
  /// 0 <= min <= max) name `loc`.
  Rprop(std::vector<Tensor> params, RpropOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;         ///< one update
  std::string kind() const override { return "rprop"; } ///< "rprop"
  RpropOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override; ///< "prev", "step_size"
};

/// Options of ASGD (designated initializers), torch.optim.ASGD 1.13's defaults and order.
struct ASGDOptions {
  double lr = 1e-2;        ///< learning rate
  double lambd = 1e-4;     ///< decay term
  double alpha = 0.75;     ///< power of the eta update
  double t0 = 1e6;         ///< the step from which averaging starts
  double weight_decay = 0; ///< L2 penalty added to the gradient
  bool maximize = false;   ///< ascend: the gradient is negated first
};

/// Averaged SGD, exactly torch.optim.ASGD 1.13's update: g = maximize ? -g : g; g += wd p;
/// p *= 1 - lambd eta; p -= eta g; ax = p while mu = 1, else ax += mu (p - ax); then
/// eta = lr / (1 + lambd lr t)^alpha and mu = 1 / max(1, t - t0). The averaged parameters are the
/// "ax" slot (averaged()). eta (from the lr at the parameter's first step) and mu (from 1) are host
/// scalars in double; torch keeps them in 0-d tensors of the default dtype (f32 unless changed),
/// so torch's f64 run equals kiln's with torch.set_default_dtype(torch.float64).
class ASGD : public Optimizer {
public:
  /// ASGD over `params`; errors (options out of torch's ranges, not finite) name `loc`.
  ASGD(std::vector<Tensor> params, ASGDOptions options = {}, Loc loc = Loc::current());
  void step(Loc loc = Loc::current()) override;        ///< one update
  std::string kind() const override { return "asgd"; } ///< "asgd"
  /// The averaged value of parameter i (the "ax" slot; undefined before its first step).
  Tensor averaged(size_t i) const;
  ASGDOptions options; ///< hyperparameters (lr lives in the base class)
protected:
  std::vector<std::string> slot_names() const override;   ///< "ax"
  std::vector<std::string> scalar_names() const override; ///< "eta", "mu"
};

/// Options of LBFGS (designated initializers), torch.optim.LBFGS 1.13's defaults and order.
struct LBFGSOptions {
  double lr = 1;                             ///< the step length (the first iteration's is scaled, as torch)
  int64_t max_iter = 20;                     ///< iterations per step() (> 0)
  std::optional<int64_t> max_eval = std::nullopt; ///< closure calls per step() (> 0); unset: max_iter * 5 / 4
  double tolerance_grad = 1e-7;              ///< stop when max |gradient| <= this
  double tolerance_change = 1e-9;            ///< stop when the loss or the step changes less than this
  int64_t history_size = 100;                ///< the correction pairs kept (> 0)
  std::string line_search_fn = "";           ///< "" (a fixed step lr) or "strong_wolfe"
};

/// L-BFGS, exactly torch.optim.LBFGS 1.13's algorithm (two-loop recursion over the last history_size
/// correction pairs, the first iteration's step min(1, 1 / |g|_1) lr, torch's strong Wolfe line search
/// with its cubic interpolation and its stopping rules), over all the parameters as one flat vector.
/// step(closure) runs up to max_iter iterations; the closure clears the gradients, computes the loss,
/// calls backward() and returns the loss (a one-element tensor); step() returns the closure's first
/// loss. The history carries over from one step() to the next, as torch's.
///
/// LBFGS is eager-only: its control flow (line search, stopping tests) reads the loss and the gradient on
/// the host after each closure call, so its direction arithmetic runs on the host in double (torch runs it
/// in the parameters' dtype: f64 parameters follow torch's iterates to rounding) and it writes the
/// parameters with assign(). step() inside a compile() trace is an error. It is not an Optimizer: its
/// state is host data that state_dict() and checkpoint::save do not hold, and the schedules do not drive it.
class LBFGS {
public:
  /// L-BFGS over `params` (each must require grad; a tensor listed twice counts once); errors (an option
  /// out of range, an unknown line_search_fn, a parameter without grad) name `loc`.
  LBFGS(std::vector<Tensor> params, LBFGSOptions options = {}, Loc loc = Loc::current());
  /// Runs up to max_iter iterations (see above) and returns the closure's first loss. Errors (a loss that
  /// is not one element, a call inside compile()) name `loc`.
  Tensor step(const std::function<Tensor()>& closure, Loc loc = Loc::current());
  /// Clears every parameter's gradient.
  void zero_grad();
  /// The parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  /// Closure calls over all steps so far (torch's state['func_evals']).
  int64_t func_evals() const { return func_evals_; }
  /// Iterations over all steps so far (torch's state['n_iter']).
  int64_t n_iter() const { return n_iter_; }
  const LBFGSOptions options; ///< the options given (max_eval filled in)

private:
  using Vec = std::vector<double>;
  /// The loss and flat gradient (zeros for a parameter without gradient) after one closure call; the
  /// closure's loss tensor goes to `first` when given.
  double evaluate(const std::function<Tensor()>& closure, Vec& grad, const Loc& loc, Tensor* first = nullptr);
  /// The parameters as one flat vector, in double.
  Vec flat_params() const;
  /// Writes `x` (flat) into the parameters.
  void set_params(const Vec& x);
  /// The strong Wolfe line search from `x` along `d` (torch's _strong_wolfe); returns the step length
  /// and sets `loss` and `grad` to those there; `evals` counts the closure calls.
  double strong_wolfe(const std::function<Tensor()>& closure, const Vec& x, double t, const Vec& d, double& loss,
                      Vec& grad, double gtd, int64_t& evals, const Loc& loc);
  /// The direction from the gradient and the history (two-loop recursion), after adding the pair of
  /// the last iteration.
  Vec direction(const Vec& grad);

  std::vector<Tensor> params_;
  int64_t func_evals_ = 0, n_iter_ = 0;
  // torch's state: the last direction and step, the correction pairs, the Hessian diagonal, the last
  // gradient and loss.
  Vec d_, prev_grad_;
  double t_ = 0, h_diag_ = 1, prev_loss_ = 0;
  std::vector<Vec> old_dirs_, old_stps_;
  Vec ro_;
};

/// The base of learning-rate schedules: step() once per epoch, after the epoch's optimizer steps.
/// Every step sets the lr from the schedule's closed form of the base lr and the epoch (so a resumed
/// run, via set_epoch, gets the uninterrupted run's bits). Unlike PyTorch's chainable schedulers, an lr
/// set by hand (Optimizer::set_lr) lasts until the next step(), and two schedulers on one optimizer
/// do not compose: the last one stepped sets the lr. (PyTorch's recursive forms equal these closed forms
/// up to rounding; tests/tools/pytorch_scheduler_table.py measures it.) Constructing a schedule sets the
/// lr of epoch 0, as PyTorch's first step does. The base lr is the optimizer's initial_lr(), as PyTorch's:
/// the lr before the first schedule on the optimizer changed it (so the schedules given to SequentialLR
/// share it). ReduceLROnPlateau, which depends on the metrics seen, is not one of these.
class LRScheduler {
public:
  /// Schedules `optimizer`; its initial_lr() (recorded now if unset: its current lr) is the base lr.
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  /// Advances one epoch and sets the optimizer's lr; errors (an invalid lr) name `loc`.
  void step(Loc loc = Loc::current());
  /// Jumps to `epoch` (for resuming) and sets the optimizer's lr; errors (a negative epoch, one past the
  /// schedule's end, an epoch whose lr is negative or not finite) name the schedule and `loc`.
  void set_epoch(int64_t epoch, Loc loc = Loc::current());
  /// Epochs stepped so far.
  int64_t epoch() const { return epoch_; }
  /// The lr of an epoch (closed form).
  virtual double lr_at(int64_t epoch) const = 0;
  /// The schedule's name, as in PyTorch ("StepLR"), which its errors start with.
  virtual std::string name() const = 0;

protected:
  /// Throws a kiln::Error naming `loc` when the schedule has no lr for `epoch` (none by default).
  virtual void check_epoch(int64_t epoch, const Loc& loc) const;
  /// Makes `lr` the optimizer's initial_lr() and this schedule's base lr (as torch's OneCycleLR and
  /// CyclicLR set the param group's lr or 'initial_lr' themselves).
  void rebase(double lr, bool overwrite);
  /// Sets the optimizer's lr to `lr`, the lr of `epoch` (as text), or throws a kiln::Error naming the
  /// schedule, the epoch and `loc` when it is negative or not finite.
  void set_valid_lr(double lr, const std::string& epoch, const Loc& loc);
  friend class SequentialLR; // runs its schedules' check_epoch

  Optimizer& opt_;  ///< the scheduled optimizer
  double base_lr_;  ///< the optimizer's initial_lr()
  int64_t epoch_ = 0; ///< epochs stepped
  bool first_ = false; ///< this schedule recorded the optimizer's initial_lr()
};

/// lr = base * gamma^(epoch / step_size) (integer division), as torch.optim.lr_scheduler.StepLR.
class StepLR : public LRScheduler {
public:
  /// Decays by `gamma` every `step_size` epochs; errors name `loc`.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "StepLR"; } ///< "StepLR"
private:
  int64_t step_size_;
  double gamma_;
};

/// lr = eta_min + (base - eta_min)(1 + cos(pi epoch / T_max)) / 2, the closed form of
/// torch.optim.lr_scheduler.CosineAnnealingLR (equal to its recursive form up to rounding).
class CosineAnnealingLR : public LRScheduler {
public:
  /// Anneals from the base lr to eta_min over t_max epochs; errors name `loc`.
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "CosineAnnealingLR"; } ///< "CosineAnnealingLR"
private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warm-up then cosine decay, stepped once per optimizer step (as in GPT training):
/// lr = base * (epoch + 1) / warmup for epoch < warmup, then eta_min + (base - eta_min)(1 + cos(pi
/// (epoch - warmup) / (total - warmup))) / 2 up to `total` steps, and eta_min after.
class WarmupCosineLR : public LRScheduler {
public:
  /// Warms up over `warmup` steps (0: none) and decays to eta_min at step `total` (> warmup); errors name `loc`.
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup, int64_t total, double eta_min = 0, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "WarmupCosineLR"; } ///< "WarmupCosineLR"
private:
  int64_t warmup_, total_;
  double eta_min_;
};

/// lr = base * gamma^epoch, torch.optim.lr_scheduler.ExponentialLR's closed form.
class ExponentialLR : public LRScheduler {
public:
  /// Decays by `gamma` (>= 0, finite; PyTorch checks nothing) every epoch; errors name `loc`.
  ExponentialLR(Optimizer& optimizer, double gamma, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "ExponentialLR"; } ///< "ExponentialLR"
private:
  double gamma_;
};

/// lr = base * gamma^(the number of milestones <= epoch), torch.optim.lr_scheduler.MultiStepLR's closed
/// form: the milestones in any order, a repeated one counted each time (PyTorch's Counter).
class MultiStepLR : public LRScheduler {
public:
  /// Decays by `gamma` (>= 0, finite) at each milestone (>= 0; PyTorch ignores a negative one in its
  /// recursive form and counts it in its closed form, kiln refuses it); errors name `loc`.
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "MultiStepLR"; } ///< "MultiStepLR"
private:
  std::vector<int64_t> milestones_; ///< sorted
  double gamma_;
};

/// lr = base * (start + (end - start) min(total_iters, epoch) / total_iters), the closed form of
/// torch.optim.lr_scheduler.LinearLR (its recursive form matches it to rounding, except that with
/// start_factor 0 PyTorch's recursive form divides by zero at epoch 1 where this form is defined).
class LinearLR : public LRScheduler {
public:
  /// Scales the base lr by a factor going linearly from `start_factor` to `end_factor` (each in [0, 1],
  /// as PyTorch) over `total_iters` (> 0; PyTorch's closed form divides by it) epochs; errors name `loc`.
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5,
           Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "LinearLR"; } ///< "LinearLR"
private:
  double start_, end_;
  int64_t total_iters_;
};

/// lr = base * (factor + (epoch >= total_iters)(1 - factor)), the closed form of
/// torch.optim.lr_scheduler.ConstantLR (PyTorch's recursive form divides by zero with factor 0 at
/// epoch total_iters, and with total_iters 0 keeps the factor forever; this form gives the base lr).
class ConstantLR : public LRScheduler {
public:
  /// Scales the base lr by `factor` (in [0, 1], as PyTorch) for the first `total_iters` (>= 0) epochs;
  /// errors name `loc`.
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "ConstantLR"; } ///< "ConstantLR"
private:
  double factor_;
  int64_t total_iters_;
};

/// lr = base * lr_lambda(epoch), as torch.optim.lr_scheduler.LambdaLR (one function: kiln's
/// optimizers have one parameter group). lr_lambda must be a pure function of the epoch for set_epoch
/// to resume exactly; an epoch whose lr is negative or not finite is an error naming LambdaLR.
class LambdaLR : public LRScheduler {
public:
  /// Scales the base lr by lr_lambda(epoch); errors (no function) name `loc`.
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> lr_lambda, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "LambdaLR"; } ///< "LambdaLR"
private:
  std::function<double(int64_t)> lambda_;
};

/// How OneCycleLR anneals within a phase (PyTorch's anneal_strategy 'cos' and 'linear').
enum class Anneal { cos, linear };

/// OneCycleLR's options after max_lr and total_steps (designated initializers), PyTorch's defaults,
/// except cycle_momentum (see OneCycleLR).
struct OneCycleLROptions {
  double pct_start = 0.3;          ///< the fraction of the steps spent increasing the lr, in [0, 1]
  Anneal anneal_strategy = Anneal::cos; ///< cosine or linear annealing
  bool cycle_momentum = false;     ///< unsupported: true is an error (see OneCycleLR)
  double div_factor = 25;          ///< initial lr = max_lr / div_factor
  double final_div_factor = 1e4;   ///< min lr = initial lr / final_div_factor
  bool three_phase = false;        ///< a third phase annealing from the initial lr to the min lr
};

/// The 1cycle policy, torch.optim.lr_scheduler.OneCycleLR's lr (get_lr, a closed form of the step):
/// from max_lr / div_factor up to max_lr over the first pct_start of total_steps, then down to
/// max_lr / div_factor / final_div_factor (three_phase: back to the initial lr at 2 pct_start, then to the
/// min lr). Stepped once per batch; the optimizer's own lr is ignored, and construction sets the initial
/// lr. Epochs 0..total_steps have an lr (PyTorch's limit); a later one is an error. At epoch total_steps
/// (after the last step, the lr of no update) kiln gives the min lr, where PyTorch extrapolates its last
/// phase past its end: back up with cos, below zero (a negative lr) with linear.
/// PyTorch also cycles SGD's momentum or Adam's beta1 between base_momentum and max_momentum (its
/// default cycle_momentum=True). kiln's momentum and betas are constants of the recorded update (a
/// changing one would recompile the step every step, and a compiled step would keep the first), so
/// kiln does not cycle them: cycle_momentum defaults to false and true is an error.
class OneCycleLR : public LRScheduler {
public:
  /// Cycles the lr of `optimizer` up to `max_lr` (>= 0, finite) and down over `total_steps` (> 0) steps;
  /// errors (options out of range, cycle_momentum) name `loc`.
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleLROptions options = {},
             Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< PyTorch's formula
  std::string name() const override { return "OneCycleLR"; } ///< "OneCycleLR"
protected:
  void check_epoch(int64_t epoch, const Loc& loc) const override; ///< at most total_steps
private:
  /// One phase: it ends at step `end_step` (a double, as PyTorch's), annealing from `start` to `end`.
  struct Phase {
    double end_step, start, end;
  };
  int64_t total_steps_;
  Anneal anneal_;
  std::vector<Phase> phases_;
};

/// lr = base * (1 - min(total_iters, epoch) / total_iters)^power, the closed form of
/// torch.optim.lr_scheduler.PolynomialLR (its recursive form matches it to rounding).
class PolynomialLR : public LRScheduler {
public:
  /// Decays the base lr to 0 over `total_iters` (> 0; PyTorch divides by it) epochs with `power` (finite);
  /// errors name `loc`.
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  std::string name() const override { return "PolynomialLR"; } ///< "PolynomialLR"
private:
  int64_t total_iters_;
  double power_;
};

/// Cosine annealing with warm restarts (SGDR), torch.optim.lr_scheduler.CosineAnnealingWarmRestarts:
/// lr = eta_min + (base - eta_min)(1 + cos(pi T_cur / T_i)) / 2, where the i-th cycle lasts T_i = T_0 T_mult^i
/// epochs and T_cur counts the epochs since the last restart. step() and set_epoch() take whole epochs
/// (T_cur in exact integer arithmetic, as PyTorch's step()); step(epoch) takes a fractional one, as
/// PyTorch's step(epoch) (e.g. epoch + batch / batches), with PyTorch's formula. After step(2.5) PyTorch's
/// step() continues from T_cur 3.5; kiln's continues from epoch 3 (floor(2.5) + 1), as set_epoch(3).
class CosineAnnealingWarmRestarts : public LRScheduler {
public:
  /// Restarts after `t_0` (> 0) epochs, then after cycles `t_mult` (>= 1) times longer each, annealing
  /// down to `eta_min` (finite); errors name `loc`.
  CosineAnnealingWarmRestarts(Optimizer& optimizer, int64_t t_0, int64_t t_mult = 1, double eta_min = 0,
                              Loc loc = Loc::current());
  using LRScheduler::step;
  /// Jumps to the fractional `epoch` (>= 0) and sets the lr there; epoch() becomes floor(epoch). Errors
  /// (a negative epoch) name `loc`.
  void step(double epoch, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< closed form
  /// The lr at a fractional epoch (PyTorch's step(epoch) formula).
  double fractional_lr_at(double epoch) const;
  std::string name() const override { return "CosineAnnealingWarmRestarts"; } ///< its name
private:
  double lr_of(double t_cur, double t_i) const;
  int64_t t_0_, t_mult_;
  double eta_min_;
};

/// CyclicLR's scaling of the cycle's amplitude (PyTorch's mode): triangular keeps it, triangular2 halves it
/// every cycle, exp_range multiplies it by gamma^iteration.
enum class CyclicMode { triangular, triangular2, exp_range };
/// What CyclicLR's custom scale_fn is given: the cycle number (from 1) or the iteration (PyTorch's scale_mode).
enum class ScaleMode { cycle, iterations };

/// CyclicLR's options after base_lr and max_lr (designated initializers), PyTorch's defaults, except
/// cycle_momentum (see CyclicLR).
struct CyclicLROptions {
  double step_size_up = 2000;                 ///< iterations in the increasing half of a cycle (> 0)
  std::optional<double> step_size_down = std::nullopt; ///< iterations in the decreasing half (>= 0); unset: step_size_up
  CyclicMode mode = CyclicMode::triangular;   ///< the amplitude's scaling, when scale_fn is empty
  double gamma = 1;                           ///< exp_range's factor per iteration
  std::function<double(double)> scale_fn = nullptr; ///< a custom scaling (overrides mode), of the cycle or iteration
  ScaleMode scale_mode = ScaleMode::cycle;    ///< what scale_fn is given
  bool cycle_momentum = false;                ///< unsupported: true is an error (see CyclicLR)
};

/// The cyclical learning rate policy, torch.optim.lr_scheduler.CyclicLR's lr (get_lr, a closed form of the
/// iteration): from base_lr up to max_lr over step_size_up iterations and back over step_size_down, the
/// amplitude scaled by the mode or scale_fn. Stepped once per batch; the optimizer's own lr is ignored and
/// construction sets base_lr (which becomes the optimizer's initial_lr() if it had none, as PyTorch's).
/// As OneCycleLR, kiln does not cycle momentum (PyTorch's default cycle_momentum=True), since momentum
/// is a constant of the recorded update: cycle_momentum defaults to false and true is an error.
class CyclicLR : public LRScheduler {
public:
  /// Cycles the lr of `optimizer` between `base_lr` and `max_lr` (each >= 0, finite); errors (options out
  /// of range, cycle_momentum) name `loc`.
  CyclicLR(Optimizer& optimizer, double base_lr, double max_lr, CyclicLROptions options = {},
           Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< PyTorch's formula
  std::string name() const override { return "CyclicLR"; } ///< "CyclicLR"
private:
  double max_lr_, total_size_, step_ratio_;
  std::function<double(double)> scale_fn_;
  ScaleMode scale_mode_;
};

/// Runs `schedulers` one after the other, torch.optim.lr_scheduler.SequentialLR: schedule i runs from
/// milestone i - 1 (0 for the first) and starts there from its own epoch 0, so lr(epoch) =
/// schedulers[i].lr_at(epoch - milestones[i - 1]) with i the number of milestones <= epoch. Every schedule
/// has the optimizer's initial_lr() as its base lr, as PyTorch's. The schedules are shared: stepping one
/// of them directly sets the lr from its own epoch. Differences from PyTorch: the milestones must be
/// increasing and positive (PyTorch bisects whatever it is given), and a schedule's epoch past its end
/// (OneCycleLR's) is an error, where PyTorch's step() raises only in its own next call.
class SequentialLR : public LRScheduler {
public:
  /// Sequences `schedulers` (at least one, each on `optimizer`) at `milestones` (one fewer, increasing,
  /// positive); errors name `loc`.
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones, Loc loc = Loc::current());
  double lr_at(int64_t epoch) const override; ///< the running schedule's closed form
  std::string name() const override { return "SequentialLR"; } ///< "SequentialLR"
protected:
  void check_epoch(int64_t epoch, const Loc& loc) const override; ///< the running schedule's check
private:
  /// The index of the schedule that runs at `epoch`, and that schedule's own epoch there.
  std::pair<size_t, int64_t> running(int64_t epoch) const;
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

/// ReduceLROnPlateau's comparison of a metric with the best so far (PyTorch's mode).
enum class PlateauMode { min, max };
/// Whether ReduceLROnPlateau's threshold is relative or absolute (PyTorch's threshold_mode).
enum class ThresholdMode { rel, abs };

/// ReduceLROnPlateau's options (designated initializers), torch 1.13's defaults and order.
struct ReduceLROnPlateauOptions {
  PlateauMode mode = PlateauMode::min;  ///< min: a lower metric is better; max: a higher one
  double factor = 0.1;                  ///< new lr = lr * factor, in [0, 1)
  int64_t patience = 10;                ///< epochs without improvement tolerated (>= 0)
  double threshold = 1e-4;              ///< the least improvement that counts (>= 0)
  ThresholdMode threshold_mode = ThresholdMode::rel; ///< rel: best * (1 -+ threshold); abs: best -+ threshold
  int64_t cooldown = 0;                 ///< epochs after a reduction before counting bad epochs again (>= 0)
  double min_lr = 0;                    ///< the lr is not reduced below this (>= 0)
  double eps = 1e-8;                    ///< a reduction smaller than this is skipped (>= 0)
};

/// Checkpoint metadata (as kiln::checkpoint::Metadata): ReduceLROnPlateau's saved state.
using SchedulerState = std::map<std::string, std::string>;

/// Reduces the optimizer's lr when a metric stops improving, exactly torch.optim.lr_scheduler.
/// ReduceLROnPlateau's step(metric). Unlike the closed-form schedules, it depends on the metrics seen and
/// on the optimizer's current lr (which it multiplies), so resuming takes its state: state_dict() gives
/// it as strings ("plateau.best", "plateau.num_bad_epochs", "plateau.cooldown_counter", "plateau.epoch",
/// "plateau.lr"; doubles written to read back exactly) to merge into checkpoint::save's metadata, and
/// load_state_dict() restores it (the lr included) from checkpoint::load's.
class ReduceLROnPlateau {
public:
  /// Watches the metric given to step() for `optimizer`; errors (options out of range) name `loc`.
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {}, Loc loc = Loc::current());
  /// Records one epoch's metric and reduces the lr after more than `patience` bad epochs.
  void step(double metric);
  /// The best metric so far (+inf in min mode, -inf in max mode before the first step).
  double best() const { return best_; }
  /// Epochs since the last improvement (reset by a reduction and during cooldown).
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  /// Epochs of cooldown left.
  int64_t cooldown_counter() const { return cooldown_counter_; }
  /// Epochs stepped so far.
  int64_t epoch() const { return epoch_; }
  /// The state, to store with a checkpoint (see above).
  SchedulerState state_dict() const;
  /// Restores the state from `state` (other entries, such as the rest of a checkpoint's metadata, are
  /// ignored) and sets the optimizer's lr to the saved one; a missing or malformed entry is a kiln::Error
  /// naming `loc`, and nothing is restored.
  void load_state_dict(const SchedulerState& state, Loc loc = Loc::current());

  const ReduceLROnPlateauOptions options; ///< the options given
private:
  bool is_better(double metric) const;
  Optimizer& opt_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, epoch_ = 0;
};

} // namespace kiln::optim

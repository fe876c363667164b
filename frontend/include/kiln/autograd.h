#pragma once
/// \file autograd.h
/// Reverse-mode gradients as more graph (so they fuse and can be differentiated
/// again), forward mode, custom gradients, gradcheck, grad mode, and the leaf
/// bookkeeping behind Tensor::backward().

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// True unless a NoGradGuard is active on this thread.
bool grad_mode_enabled();

/// While alive, ops on this thread record no gradient history (their results are detached).
class NoGradGuard {
public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
  bool previous_;
};

/// Gradients of sum_i <outputs[i], grad_outputs[i]> with respect to each input, as lazy tensors
/// (they fuse with the forward graph when realized together). grad_outputs may be omitted for
/// one-element outputs (ones). An input that the outputs do not depend on through differentiable
/// ops is an error unless allow_unused, when its gradient is zeros. Integer and bool tensors carry
/// no gradient. As torch.autograd.grad, create_graph = false (the default) gives plain values with
/// no graph history: they do not require grad, and differentiating them again sees constants. With
/// create_graph = true the results are themselves differentiable (grad of a grad, Hessian-vector
/// products) and require grad when grad mode is on and any output, input or grad_output does.
/// (allow_unused comes before create_graph, unlike PyTorch, so that existing positional calls keep
/// their meaning.)
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool allow_unused = false,
                         bool create_graph = false, Loc loc = Loc::current());

/// A function of several tensors to several tensors, as jvp() and gradcheck() take it.
using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Forward mode: evaluates fn at `primals` and returns (outputs, output tangents) for
/// the input tangents (each shaped and typed like its primal; an undefined tangent
/// is zero). Uses real forward rules on the graph. Tangents of integer or bool
/// outputs are undefined tensors; other zero tangents are zeros.
std::pair<std::vector<Tensor>, std::vector<Tensor>> jvp(const TensorFn& fn, const std::vector<Tensor>& primals,
                                                        const std::vector<Tensor>& tangents, Loc loc = Loc::current());
/// Forward mode for a function of one tensor: (fn(primal), its tangent along `tangent`).
std::pair<Tensor, Tensor> jvp(const std::function<Tensor(const Tensor&)>& fn, const Tensor& primal,
                              const Tensor& tangent, Loc loc = Loc::current());

/// A differentiable op given by a forward function and its own derivative rules,
/// like torch.autograd.Function or jax.custom_vjp. The forward's graph is not
/// differentiated: gradients come from `backward`, which receives the call's inputs
/// and outputs and one gradient per output (zeros where none reached it), and
/// returns one gradient per input, shaped like it (undefined: none). When backward
/// is built from kiln ops, the custom op is differentiable to any order. Without a
/// `jvp` rule, forward mode transposes `backward`, calling it with the inputs as the
/// call saw them, which in forward mode need not require grad: a backward that skips
/// the inputs that do not require grad (as conv2d's does) needs its own `jvp` rule.
///
///   CustomFunction lse{"logsumexp",
///     [](const std::vector<Tensor>& x) -> std::vector<Tensor> { ... },
///     [](const auto& in, const auto& out, const auto& g) -> std::vector<Tensor> {
///       return {g[0] * exp(in[0] - out[0])};   // the softmax, built from kiln ops
///     }};
///   Tensor y = lse({x})[0];
struct CustomFunction {
  /// Computes the outputs from the inputs.
  using Forward = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;
  /// (inputs, outputs, grad_outputs) -> one gradient per input.
  using Backward = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                                                     const std::vector<Tensor>& grad_outputs)>;
  /// (inputs, outputs, input tangents; undefined = zero) -> one tangent per output.
  using Jvp = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                                                const std::vector<Tensor>& tangents)>;

  /// An empty function (set the members before calling it).
  CustomFunction() = default;
  /// A function from its name, forward and backward, and optionally a forward-mode rule.
  CustomFunction(std::string name_, Forward forward_, Backward backward_, Jvp jvp_ = {})
      : name(std::move(name_)), forward(std::move(forward_)), backward(std::move(backward_)), jvp(std::move(jvp_)) {}

  std::string name; ///< names the op in error messages
  Forward forward;  ///< the values
  Backward backward; ///< the reverse-mode rule (must be linear in grad_outputs)
  Jvp jvp;          ///< optional forward-mode rule; when empty, jvp() transposes `backward`

  /// Applies the op. Floating outputs get the custom rules; others carry no gradient.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, Loc loc = Loc::current()) const;
};

/// The outcome of gradcheck(): whether every element agreed, and the worst one.
struct GradcheckResult {
  bool ok = true;          ///< every checked element within atol + rtol * |numeric|
  std::string report;      ///< readable summary naming the worst element
  size_t worst_input = 0;  ///< index (into the inputs) of the worst element's input
  IntList worst_index;     ///< the worst element's multi-index in that input
  double analytic = 0;     ///< the analytic value there
  double numeric = 0;      ///< the finite-difference value there
  double abs_error = 0;    ///< |analytic - numeric| there
  /// Same as ok.
  explicit operator bool() const { return ok; }
};

/// Compares the analytic gradients of fn with central finite differences, in f64:
/// the projections u^T J of the Jacobian onto directions u (every one-hot u when the
/// outputs have at most 16 elements in total, else 3 random Gaussian u), element by
/// element of every floating input (f32 inputs are converted to f64). An element
/// passes when |analytic - numeric| <= atol + rtol * |numeric|.
GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
                          double atol = 1e-5, double rtol = 1e-3, Loc loc = Loc::current());
/// gradcheck for a function with one output.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                          double rtol = 1e-3, Loc loc = Loc::current());

} // namespace kiln

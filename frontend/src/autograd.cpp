// The public autograd API: grad(), jvp(), CustomFunction and gradcheck(). The
// user-facing checks live here; the differentiation itself is the autograd
// library's (per-op rules and the two walks, on graph nodes).

#include "kiln/autograd.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <unordered_map>

#include "autograd/custom.h"
#include "autograd/walk.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"

namespace kiln {

namespace ag = autograd;
namespace b = graph::build;
using graph::NodeRef;
using detail::fail;

namespace {

std::string nth(const char* list, size_t i) { return std::string(list) + "[" + std::to_string(i) + "]"; }

// A derivative as a tensor: differentiable again when grad mode is on.
Tensor wrap(NodeRef node, bool needs_grad) {
  if (!grad_mode_enabled()) return Tensor(b::detach(node));
  Tensor t(std::move(node), needs_grad);
  t.impl()->is_leaf = !needs_grad;
  return t;
}

bool any_requires_grad(std::initializer_list<const std::vector<Tensor>*> lists) {
  for (const auto* list : lists)
    for (const Tensor& t : *list)
      if (t.requires_grad()) return true;
  return false;
}

std::vector<NodeRef> nodes_of(const std::vector<Tensor>& ts) {
  std::vector<NodeRef> out;
  for (const Tensor& t : ts) out.push_back(t.node());
  return out;
}

void check_defined(const char* op, const char* list, const std::vector<Tensor>& ts, const Loc& loc) {
  for (size_t i = 0; i < ts.size(); ++i)
    if (!ts[i].defined()) throw Error(op, nth(list, i) + " is an undefined tensor", loc);
}

// The seed of each output: its grad_output, or ones for a one-element output.
std::vector<NodeRef> output_seeds(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                                  const Loc& loc) {
  std::vector<NodeRef> seeds;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    if (!is_floating(o.dtype()))
      fail("grad", nth("outputs", i) + " has dtype " + std::string(dtype_name(o.dtype())) +
                       ": only floating-point outputs have gradients", {&o}, loc);
    if (grad_outputs.empty()) {
      if (o.numel() != 1)
        fail("grad", nth("outputs", i) + " is " + o.type_str() +
                         ", not a scalar: grad_outputs can be omitted only for one-element outputs", {&o}, loc);
      seeds.push_back(b::constant(1, o.dtype(), o.shape(), o.device()));
      continue;
    }
    const Tensor& g = grad_outputs[i];
    if (!g.defined()) throw Error("grad", nth("grad_outputs", i) + " is an undefined tensor", loc);
    if (g.shape() != o.shape() || g.dtype() != o.dtype())
      fail("grad", nth("grad_outputs", i) + " is " + g.type_str() + " but " + nth("outputs", i) + " is " +
                       o.type_str() + ": they must have the same shape and dtype", {&o, &g}, loc);
    seeds.push_back(g.node());
  }
  return seeds;
}

void check_distinct_values(const std::vector<Tensor>& inputs, const Loc& loc);

void check_grad_args(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                     const std::vector<Tensor>& grad_outputs, const Loc& loc) {
  if (outputs.empty()) throw Error("grad", "needs at least one output", loc);
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    throw Error("grad", "got " + std::to_string(outputs.size()) + " outputs but " +
                            std::to_string(grad_outputs.size()) + " grad_outputs (one per output, or none)", loc);
  check_defined("grad", "outputs", outputs, loc);
  check_defined("grad", "inputs", inputs, loc);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!is_floating(inputs[i].dtype()))
      fail("grad", nth("inputs", i) + " has dtype " + std::string(dtype_name(inputs[i].dtype())) +
                       ": integer and bool tensors carry no gradient", {&inputs[i]}, loc);
  check_distinct_values(inputs, loc);
}

// Identical computations merge into one graph node (hash-consing), and gradients are found by
// node: two tensors on one node get one gradient, the sum over both tensors' uses, where PyTorch
// gives each its own. Refused rather than mixed.
void check_distinct_values(const std::vector<Tensor>& inputs, const Loc& loc) {
  const std::string why = ": kiln merges identical computations into one value and finds gradients by value, so "
                          "their gradients cannot be told apart; compute the value once and use that tensor "
                          "everywhere";
  std::unordered_map<const graph::Node*, size_t> first_on; // each value's first input (backward passes every leaf)
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].node()->tensor_makers.load(std::memory_order_relaxed) > 1)
      fail("grad", nth("inputs", i) + " (" + inputs[i].type_str() +
                       ") was computed by the same ops on the same operands as another live tensor" + why,
           {&inputs[i]}, loc);
    const auto [at, fresh] = first_on.try_emplace(inputs[i].node().get(), i);
    const size_t j = at->second;
    if (!fresh && inputs[j].impl() != inputs[i].impl())
      fail("grad", nth("inputs", i) + " and " + nth("inputs", j) + " are two tensors holding the same value" + why,
           {&inputs[j], &inputs[i]}, loc);
  }
}

} // namespace

// ---------------------------------------------------------------- grad

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool allow_unused, bool create_graph, Loc loc) {
  check_grad_args(outputs, inputs, grad_outputs, loc);
  for (const Tensor& o : outputs) detail::check_graph_retained("grad", o, loc);
  const std::vector<NodeRef> seeds = output_seeds(outputs, grad_outputs, loc);
  const std::vector<NodeRef> grads = ag::vjp(nodes_of(outputs), seeds, nodes_of(inputs), loc);
  const bool needs = create_graph && any_requires_grad({&outputs, &inputs, &grad_outputs});
  std::vector<Tensor> result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!grads[i] && !allow_unused)
      fail("grad", nth("inputs", i) + " (" + inputs[i].type_str() +
                       ") is not used to compute the outputs through differentiable ops; "
                       "pass allow_unused = true to get zeros", {&inputs[i]}, loc);
    const NodeRef g = grads[i] ? grads[i] : b::constant_like(inputs[i].node(), 0);
    result.push_back(wrap(create_graph ? g : b::detach(g), needs)); // detached: no history to differentiate
  }
  return result;
}

// ---------------------------------------------------------------- jvp

namespace {

void check_jvp_args(const std::vector<Tensor>& primals, const std::vector<Tensor>& tangents, const Loc& loc) {
  if (primals.size() != tangents.size())
    throw Error("jvp", "got " + std::to_string(primals.size()) + " primals but " + std::to_string(tangents.size()) +
                           " tangents (one per primal)", loc);
  for (size_t i = 0; i < primals.size(); ++i) {
    const Tensor &p = primals[i], &t = tangents[i];
    if (!p.defined()) throw Error("jvp", nth("primals", i) + " is an undefined tensor", loc);
    if (!t.defined()) continue;
    if (!is_floating(p.dtype()))
      fail("jvp", nth("primals", i) + " has dtype " + std::string(dtype_name(p.dtype())) +
                      ": integer and bool tensors have no tangent", {&p, &t}, loc);
    if (t.shape() != p.shape() || t.dtype() != p.dtype())
      fail("jvp", nth("tangents", i) + " is " + t.type_str() + " but " + nth("primals", i) + " is " + p.type_str() +
                      ": they must have the same shape and dtype", {&p, &t}, loc);
  }
}

} // namespace

std::pair<std::vector<Tensor>, std::vector<Tensor>> jvp(const TensorFn& fn, const std::vector<Tensor>& primals,
                                                        const std::vector<Tensor>& tangents, Loc loc) {
  check_jvp_args(primals, tangents, loc);
  // Each primal gets a fresh identity, so that the tangent seeds it alone (a primal
  // equal to a constant elsewhere in fn would otherwise share its node), while
  // gradients still pass through to the caller's tensor.
  std::vector<Tensor> args;
  std::vector<NodeRef> seeds, seed_tangents;
  for (size_t i = 0; i < primals.size(); ++i) {
    if (!tangents[i].defined()) {
      args.push_back(primals[i]);
      continue;
    }
    Tensor a(ag::fresh_alias(primals[i].node()), primals[i].requires_grad());
    a.impl()->is_leaf = !primals[i].requires_grad();
    args.push_back(a);
    seeds.push_back(a.node());
    seed_tangents.push_back(tangents[i].node());
  }
  std::vector<Tensor> outputs;
  {
    const detail::KeepHistory keep; // realizing inside fn must not cut the graph the tangents follow
    outputs = fn(args);
  }
  check_defined("jvp", "outputs", outputs, loc);
  const std::vector<NodeRef> ts = ag::jvp(nodes_of(outputs), seeds, seed_tangents, loc);
  const bool needs = any_requires_grad({&primals, &tangents, &outputs});
  std::vector<Tensor> out_tangents;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!is_floating(outputs[i].dtype())) {
      out_tangents.emplace_back();
      continue;
    }
    out_tangents.push_back(wrap(ts[i] ? ts[i] : b::constant_like(outputs[i].node(), 0), needs));
  }
  return {std::move(outputs), std::move(out_tangents)};
}

std::pair<Tensor, Tensor> jvp(const std::function<Tensor(const Tensor&)>& fn, const Tensor& primal,
                              const Tensor& tangent, Loc loc) {
  auto [outs, ts] = jvp([&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs[0])}; }, {primal},
                        {tangent}, loc);
  return {outs[0], ts[0]};
}

// ---------------------------------------------------------------- custom functions

namespace {

// What the rules of one custom call need from the frontend, without holding any
// Tensor handle (a parameter's handle may later point at a new value).
struct CallSite {
  std::string name;
  Loc loc;
  std::vector<NodeRef> inputs;
  std::vector<bool> input_requires_grad;
  std::vector<NodeRef> all_outputs; // every output; custom ones are replaced at rule time
  std::vector<size_t> custom_pos;   // positions of the floating (custom) outputs
  bool requires_grad = false;

  std::vector<Tensor> input_tensors() const {
    std::vector<Tensor> out;
    for (size_t i = 0; i < inputs.size(); ++i) out.emplace_back(inputs[i], input_requires_grad[i]);
    return out;
  }

  std::vector<Tensor> output_tensors(const std::vector<NodeRef>& custom_outputs) const {
    std::vector<Tensor> out;
    for (const NodeRef& n : all_outputs) out.emplace_back(n, false);
    for (size_t k = 0; k < custom_pos.size(); ++k) out[custom_pos[k]] = Tensor(custom_outputs[k], requires_grad);
    return out;
  }

  // One tensor per output from one node per custom output (undefined for the others).
  std::vector<Tensor> spread(const std::vector<NodeRef>& per_custom) const {
    std::vector<Tensor> out(all_outputs.size());
    for (size_t k = 0; k < custom_pos.size(); ++k)
      if (per_custom[k]) out[custom_pos[k]] = Tensor(per_custom[k]);
    return out;
  }

  // Checks a rule's results against the nodes they belong to; casts floating dtypes.
  NodeRef conform(const Tensor& t, const NodeRef& like, const std::string& what) const {
    if (!t.defined() || !is_floating(like->dtype)) return nullptr;
    if (t.shape() != like->shape)
      throw Error(name, what + " is " + t.type_str() + " but must have shape " + graph::shape_str(like->shape), loc);
    if (!is_floating(t.dtype()))
      throw Error(name, what + " is " + t.type_str() + " but must be floating-point", loc);
    return b::cast(t.node(), like->dtype);
  }
};

std::vector<NodeRef> run_backward(const CallSite& site, const CustomFunction::Backward& backward,
                                  const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& adjoints) {
  const detail::KeepHistory keep; // the rule's results may be differentiated again
  const std::vector<Tensor> grads = backward(site.input_tensors(), site.output_tensors(outputs), site.spread(adjoints));
  if (grads.size() != site.inputs.size())
    throw Error(site.name, "backward returned " + std::to_string(grads.size()) + " gradients for " +
                               std::to_string(site.inputs.size()) + " inputs", site.loc);
  std::vector<NodeRef> out;
  for (size_t i = 0; i < grads.size(); ++i)
    out.push_back(site.conform(grads[i], site.inputs[i], "the gradient for input " + std::to_string(i)));
  return out;
}

std::vector<NodeRef> run_jvp(const CallSite& site, const CustomFunction::Jvp& jvp_rule,
                             const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& tangents) {
  std::vector<Tensor> ts;
  for (const NodeRef& t : tangents) ts.push_back(t ? Tensor(t) : Tensor());
  const detail::KeepHistory keep; // the rule's results may be differentiated again
  const std::vector<Tensor> out_ts = jvp_rule(site.input_tensors(), site.output_tensors(outputs), ts);
  if (out_ts.size() != site.all_outputs.size())
    throw Error(site.name, "jvp returned " + std::to_string(out_ts.size()) + " tangents for " +
                               std::to_string(site.all_outputs.size()) + " outputs", site.loc);
  std::vector<NodeRef> out;
  for (size_t k = 0; k < site.custom_pos.size(); ++k)
    out.push_back(site.conform(out_ts[site.custom_pos[k]], outputs[k],
                               "the tangent of output " + std::to_string(site.custom_pos[k])));
  return out;
}

} // namespace

std::vector<Tensor> CustomFunction::operator()(const std::vector<Tensor>& inputs, Loc loc) const {
  if (!forward || !backward) throw Error(name, "a custom function needs both forward and backward", loc);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined()) throw Error(name, nth("inputs", i) + " is an undefined tensor", loc);
  std::vector<Tensor> outputs = forward(inputs);
  if (!grad_mode_enabled()) return outputs;
  auto site = std::make_shared<CallSite>();
  site->name = name;
  site->loc = loc;
  site->inputs = nodes_of(inputs);
  for (const Tensor& t : inputs) site->input_requires_grad.push_back(t.requires_grad());
  site->all_outputs = nodes_of(outputs);
  site->requires_grad = any_requires_grad({&inputs});
  std::vector<NodeRef> values;
  for (size_t i = 0; i < outputs.size(); ++i)
    if (is_floating(outputs[i].dtype())) {
      site->custom_pos.push_back(i);
      values.push_back(outputs[i].node());
    }
  auto call = std::make_shared<ag::CustomCall>();
  call->name = name;
  call->vjp = [site, bw = backward](const auto& outs, const auto& adj) { return run_backward(*site, bw, outs, adj); };
  if (jvp) call->jvp = [site, fw = jvp](const auto& outs, const auto& ts) { return run_jvp(*site, fw, outs, ts); };
  const std::vector<NodeRef> wrapped = ag::make_custom_outputs(std::move(call), site->inputs, values);
  for (size_t k = 0; k < wrapped.size(); ++k) {
    Tensor t(wrapped[k], site->requires_grad);
    t.impl()->is_leaf = !site->requires_grad;
    outputs[site->custom_pos[k]] = t;
  }
  return outputs;
}

// ---------------------------------------------------------------- gradcheck

namespace {

// The directions u that the Jacobian is projected onto, one vector per floating output.
using Direction = std::vector<std::vector<double>>;

std::vector<Direction> make_directions(const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  std::vector<Direction> dirs;
  auto empty = [&] {
    Direction d;
    for (int64_t s : sizes) d.emplace_back(static_cast<size_t>(s), 0.0);
    return d;
  };
  if (total <= 16) { // small: the whole Jacobian, one output element at a time
    for (size_t j = 0; j < sizes.size(); ++j)
      for (int64_t e = 0; e < sizes[j]; ++e) {
        dirs.push_back(empty());
        dirs.back()[j][e] = 1;
      }
    return dirs;
  }
  std::mt19937_64 rng(0x6b696c6e); // fixed: a failure reproduces
  std::normal_distribution<double> normal;
  for (int k = 0; k < 3; ++k) {
    dirs.push_back(empty());
    for (auto& v : dirs.back())
      for (double& x : v) x = normal(rng);
  }
  return dirs;
}

struct FloatOutputs {
  std::vector<Tensor> tensors;
  std::vector<int64_t> sizes;
};

FloatOutputs floating_outputs(const std::vector<Tensor>& outs) {
  FloatOutputs f;
  for (const Tensor& o : outs)
    if (o.defined() && is_floating(o.dtype())) {
      f.tensors.push_back(o);
      f.sizes.push_back(o.numel());
    }
  return f;
}

// <u, f(args)> for every direction u.
std::vector<double> projections(const TensorFn& fn, const std::vector<Tensor>& args, const std::vector<Direction>& dirs) {
  NoGradGuard no_grad;
  FloatOutputs f = floating_outputs(fn(args));
  realize(f.tensors);
  std::vector<double> out(dirs.size(), 0.0);
  for (size_t j = 0; j < f.tensors.size(); ++j) {
    const std::vector<double> v = f.tensors[j].to_vector<double>();
    for (size_t d = 0; d < dirs.size(); ++d)
      for (size_t e = 0; e < v.size(); ++e) out[d] += dirs[d][j][e] * v[e];
  }
  return out;
}

IntList unflatten(int64_t flat, const IntList& shape) {
  IntList idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

struct Checker {
  Checker(double atol_, double rtol_) : atol(atol_), rtol(rtol_) {}
  double atol, rtol;
  double worst_ratio = -1;
  size_t count = 0;
  GradcheckResult result;

  void compare(size_t input, const IntList& shape, int64_t flat, double analytic, double numeric) {
    ++count;
    const double err = std::abs(analytic - numeric);
    const double bound = atol + rtol * std::abs(numeric);
    double ratio = err / bound;
    if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
    if (!(err <= bound)) result.ok = false;
    if (ratio <= worst_ratio) return;
    worst_ratio = ratio;
    result.worst_input = input;
    result.worst_index = unflatten(flat, shape);
    result.analytic = analytic;
    result.numeric = numeric;
    result.abs_error = err;
  }

  std::string report(size_t inputs, size_t dirs, double eps) const {
    std::ostringstream os;
    os << std::setprecision(10) << "gradcheck " << (result.ok ? "passed" : "FAILED") << ": worst element is input "
       << result.worst_input << " at " << graph::shape_str(result.worst_index) << ": analytic " << result.analytic
       << " vs numeric " << result.numeric << ", |error| " << result.abs_error
       << (result.ok ? " <= " : " > ") << "atol + rtol * |numeric| = " << atol + rtol * std::abs(result.numeric)
       << " (" << count << " comparisons over " << inputs << " inputs and " << dirs << " directions, eps "
       << eps << ", atol " << atol << ", rtol " << rtol << ")";
    return os.str();
  }
};

// f64 copies of the floating inputs (fresh Input nodes), whose indices go to `checked`; other inputs as given.
std::vector<Tensor> f64_copies(const std::vector<Tensor>& inputs, std::vector<size_t>& checked) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !is_floating(inputs[i].dtype())) {
      out.push_back(inputs[i]);
      continue;
    }
    checked.push_back(i);
    out.push_back(from_vector<double>(inputs[i].to_vector<double>(), inputs[i].shape()));
  }
  return out;
}

// u^T J for every direction: analytic[d][k] is the gradient for checked input k.
std::vector<std::vector<std::vector<double>>> analytic_projections(const TensorFn& fn, std::vector<Tensor> args,
                                                                   const std::vector<size_t>& checked,
                                                                   const std::vector<Direction>& dirs, const Loc& loc) {
  std::vector<Tensor> leaves;
  for (size_t i : checked) { // new handles: the caller's copies stay plain
    args[i] = Tensor(args[i].node());
    leaves.push_back(args[i].requires_grad_());
  }
  FloatOutputs f = floating_outputs(fn(args));
  std::vector<std::vector<Tensor>> grads;
  std::vector<Tensor> all;
  for (const Direction& u : dirs) {
    std::vector<Tensor> go;
    for (size_t j = 0; j < f.tensors.size(); ++j)
      go.push_back(from_vector<double>(u[j], f.tensors[j].shape()).to(f.tensors[j].dtype()));
    grads.push_back(grad(f.tensors, leaves, go, /*allow_unused=*/true, /*create_graph=*/false, loc));
    all.insert(all.end(), grads.back().begin(), grads.back().end());
  }
  realize(all);
  std::vector<std::vector<std::vector<double>>> out;
  for (const auto& gs : grads) {
    out.emplace_back();
    for (const Tensor& g : gs) out.back().push_back(g.to_vector<double>());
  }
  return out;
}

// Central differences for every element of input i, compared with the analytic values.
void check_input(const TensorFn& fn, const std::vector<Tensor>& args, size_t i, const std::vector<Direction>& dirs,
                 const std::vector<std::vector<double>>& analytic, double eps, Checker& checker) {
  const IntList shape = args[i].shape();
  const std::vector<double> x = args[i].to_vector<double>();
  std::vector<Tensor> moved = args;
  for (size_t e = 0; e < x.size(); ++e) {
    std::vector<double> xp = x, xm = x;
    xp[e] += eps;
    xm[e] -= eps;
    moved[i] = from_vector<double>(xp, shape);
    const std::vector<double> fp = projections(fn, moved, dirs);
    moved[i] = from_vector<double>(xm, shape);
    const std::vector<double> fm = projections(fn, moved, dirs);
    for (size_t d = 0; d < dirs.size(); ++d)
      checker.compare(i, shape, static_cast<int64_t>(e), analytic[d][e], (fp[d] - fm[d]) / (2 * eps));
  }
}

} // namespace

GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, double eps, double atol, double rtol,
                          Loc loc) {
  std::vector<size_t> checked;
  const std::vector<Tensor> args = f64_copies(inputs, checked);
  if (checked.empty()) throw Error("gradcheck", "no floating-point input to check", loc);
  std::vector<int64_t> sizes;
  {
    NoGradGuard no_grad;
    sizes = floating_outputs(fn(args)).sizes;
  }
  if (sizes.empty()) throw Error("gradcheck", "the function has no floating-point output", loc);
  const std::vector<Direction> dirs = make_directions(sizes);
  const auto analytic = analytic_projections(fn, args, checked, dirs, loc);
  Checker checker(atol, rtol);
  for (size_t k = 0; k < checked.size(); ++k) {
    std::vector<std::vector<double>> per_direction;
    for (const auto& a : analytic) per_direction.push_back(a[k]);
    check_input(fn, args, checked[k], dirs, per_direction, eps, checker);
  }
  checker.result.report = checker.report(checked.size(), dirs.size(), eps);
  return checker.result;
}

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol, Loc loc) {
  return gradcheck([&](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs)}; }, inputs, eps, atol,
                   rtol, loc);
}

} // namespace kiln

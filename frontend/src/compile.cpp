// Capture and replay (see kiln/compile.h).

#include "kiln/compile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <list>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include "frontend/src/tensor_impl.h"
#include "graph/random.h"
#include "runtime/api.h"
#include "runtime/observe.h"

namespace kiln {

namespace detail {

namespace {
// Makes a tensor's value a realized input node, so a replay can bind new storage to it.
graph::NodeRef realized_input(const graph::NodeRef& n) {
  runtime::realize({n});
  if (n->op == graph::OpKind::Input) return n;
  return graph::make_input(n->dtype, n->shape, n->realized());
}
} // namespace

namespace {
// True when `n` is computed from a placeholder of the trace (an argument, a host value, or a
// value made a leaf inside it): a tensor of the traced function itself, not state that outlives it.
bool traced_value(const graph::NodeRef& n) {
  std::vector<const graph::Node*> todo{n.get()};
  std::unordered_set<const graph::Node*> seen{n.get()};
  while (!todo.empty()) {
    const graph::Node* m = todo.back();
    todo.pop_back();
    if (m->realized()) continue;
    if (m->op == graph::OpKind::Input) return true;
    for (const graph::NodeRef& in : graph::value_inputs(*m))
      if (seen.insert(in.get()).second) todo.push_back(in.get());
  }
  return false;
}
} // namespace

namespace {
// Makes `impl` a slot of the trace in progress (see CaptureState::Slot), or makes its slot track
// the gradient too: its value (and gradient) become realized inputs that replays bind anew.
void note_slot(CaptureState& cap, const std::shared_ptr<TensorImpl>& impl, bool with_grad) {
  impl->noted_in_trace = cap.id;
  for (auto& s : cap.slots) {
    if (s.impl != impl) continue;
    if (with_grad && !s.tracks_grad) { // a value read before, now its gradient too
      set_active_capture(nullptr);
      if (impl->grad.defined()) impl->grad = Tensor(realized_input(impl->grad.node()));
      set_active_capture(&cap);
      s.tracks_grad = true;
      s.start_grad = impl->grad.defined() ? impl->grad.node() : nullptr;
    }
    return;
  }
  const graph::NodeRef current = impl->load_node(); // another thread may be realizing it
  if (traced_value(current)) return;
  set_active_capture(nullptr); // realizing a tensor's state is not part of the trace
  impl->begin_trace(realized_input(current));
  if (with_grad && impl->grad.defined()) impl->grad = Tensor(realized_input(impl->grad.node()));
  if (impl->requires_grad) register_leaf(impl);
  set_active_capture(&cap);
  cap.slots.push_back({impl, impl->node, with_grad && impl->grad.defined() ? impl->grad.node() : nullptr, with_grad});
}
} // namespace

void note_state_change(const std::shared_ptr<TensorImpl>& impl) {
  if (CaptureState* cap = active_capture()) note_slot(*cap, impl, true);
}

void note_state_read(const std::shared_ptr<TensorImpl>& impl, bool with_grad) {
  CaptureState* cap = active_capture();
  if (!cap || impl->serial >= cap->first_serial) return; // no trace, or a tensor of the trace itself
  if (impl->noted_in_trace == cap->id && !with_grad) return;
  note_slot(*cap, impl, with_grad);
}

namespace {
Tensor host_scalar(DType dtype, double v, Device device) {
  KILN_ASSERT(dtype == kFloat32 || dtype == kFloat64, "host_values of a non-float dtype");
  const Tensor t = dtype == kFloat64 ? from_vector<double>({v}, {}) : from_vector<float>({static_cast<float>(v)}, {});
  return t.to(device);
}
} // namespace

std::vector<Tensor> host_values(size_t n, DType dtype, Device device, std::function<void(double*)> fill) {
  std::vector<Tensor> out;
  if (CaptureState* cap = active_capture()) {
    CaptureState::HostValues h{{}, dtype, device, std::move(fill)};
    for (size_t i = 0; i < n; ++i) {
      h.placeholders.push_back(graph::make_input(dtype, {}, nullptr, device));
      out.emplace_back(h.placeholders.back());
    }
    cap->host_values.push_back(std::move(h));
    return out;
  }
  std::vector<double> v(n);
  fill(v.data());
  for (double x : v) out.push_back(host_scalar(dtype, x, device));
  return out;
}

uint64_t host_seed(std::function<uint64_t()> next) {
  CaptureState* cap = active_capture();
  if (!cap) return next();
  // A placeholder no user seed will equal by chance: distinct 64-bit values (random_bits
  // is a bijection of its counter for a fixed seed).
  static std::atomic<uint64_t> counter{0};
  const uint64_t token = graph::random_bits(0x5eedda7a5eedda7aULL, counter.fetch_add(1));
  cap->seeds.emplace_back(token, std::move(next));
  return token;
}

std::vector<Tensor> host_stage(const std::vector<Tensor>& inputs,
                               std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run,
                               const std::vector<IntList>& result_shapes) {
  KILN_ASSERT(result_shapes.empty() || result_shapes.size() == inputs.size(), "host_stage: one shape per input");
  CaptureState* cap = active_capture();
  if (!cap) return run(inputs);
  CaptureState::HostStage stage{{}, {}, std::move(run)};
  std::vector<Tensor> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    stage.inputs.push_back(t.node());
    const IntList shape = result_shapes.empty() ? t.shape() : result_shapes[i];
    stage.placeholders.push_back(graph::make_input(t.dtype(), shape, nullptr, t.device()));
    out.emplace_back(stage.placeholders.back());
  }
  cap->stages.push_back(std::move(stage));
  return out;
}

void trace_guard(std::function<bool()> still_valid) {
  if (CaptureState* cap = active_capture()) cap->guards.push_back(std::move(still_valid));
}

} // namespace detail

namespace {

using Slot = detail::CaptureState::Slot;

// Where each output of a traced plan goes after a replay: a result, a slot's value or gradient, or
// an argument's (a function may assign() to its arguments and accumulate their gradients, as an
// eager call would). The Clear kinds have no output: the gradient becomes undefined.
struct Destination {
  enum Kind { Result, Value, Grad, ClearGrad, ArgValue, ArgGrad, ClearArgGrad } kind;
  size_t slot = 0; // the slot, or for the Arg kinds the argument's index
  bool has_output() const { return kind != ClearGrad && kind != ClearArgGrad; }
};

// One trace: the plan(s), the placeholders standing for the arguments, and the slots.
struct Trace {
  std::vector<graph::NodeRef> placeholders;
  std::vector<bool> arg_grads; // per argument, whether it required a gradient
  // Per argument, the placeholder of the gradient it had at trace time (null: none), bound anew per
  // replay, so that a backward() inside accumulates into it as an eager call would.
  std::vector<graph::NodeRef> arg_start_grads;
  std::vector<bool> arg_grads_after; // per argument, whether it requires a gradient after the function ran
  std::vector<Slot> slots;
  std::vector<detail::CaptureState::HostValues> host_values;
  std::vector<std::pair<uint64_t, std::function<uint64_t()>>> seeds;
  std::vector<std::function<bool()>> guards;
  std::vector<bool> grad_defined; // per slot, at trace start
  std::vector<detail::CaptureState::HostStage> stages; // in trace order
  // One plan per stage and one after the last: plan j runs before stage j (see host_stage).
  std::vector<runtime::PlanRef> plans;
  std::vector<size_t> first_use; // per stage, the first plan reading its results (see Cut)
  // Per plan, where each of its outputs goes: a placeholder of later plans (a value they read),
  // or nowhere (null: a traced output or a stage input, found through `where`).
  std::vector<std::vector<graph::NodeRef>> carried;
  // For each traced output, then each stage's inputs: (plan, index into its outputs).
  std::vector<std::pair<size_t, size_t>> where;
  std::vector<graph::NodeRef> outputs;   // the traced function's outputs (results, then state)
  std::vector<Destination> destinations; // one per output, then ClearGrad entries
};

// The gradient an argument holds (undefined when none).
const Tensor& arg_grad(const Tensor& t) { return t.impl()->grad; }

std::string signature(const std::vector<Tensor>& args) {
  std::string s;
  for (const Tensor& t : args) {
    s += t.type_str() + "@" + t.device().str() + (t.requires_grad() ? "g" : "");
    if (arg_grad(t).defined()) s += "+" + arg_grad(t).type_str();
    s += ";";
  }
  return s;
}

// True when `args` have the signature `tr` was traced for, without building the string.
bool traced_for(const Trace& tr, const std::vector<Tensor>& args) {
  if (args.size() != tr.placeholders.size()) return false;
  for (size_t i = 0; i < args.size(); ++i) {
    const graph::Node& then = *tr.placeholders[i];
    const graph::Node& now = *args[i].node();
    if (now.dtype != then.dtype || now.shape != then.shape || now.device != then.device ||
        args[i].requires_grad() != tr.arg_grads[i])
      return false;
    const Tensor& g = arg_grad(args[i]);
    const graph::NodeRef& traced_grad = tr.arg_start_grads[i];
    if (g.defined() != (traced_grad != nullptr)) return false;
    if (traced_grad && (g.dtype() != traced_grad->dtype || g.shape() != traced_grad->shape)) return false;
  }
  return true;
}

class TraceGuard {
public:
  explicit TraceGuard(detail::CaptureState* s) { detail::set_active_capture(s); }
  ~TraceGuard() { detail::set_active_capture(nullptr); }
};

// The cut of a traced function with host stages into plans (see detail::host_stage).
// A node's level is the number of stages it waits for: 0 for the arguments and state, s + 1
// for the results of stage s, the largest of its inputs' otherwise. Each needed node is
// computed by one plan, as late as its uses allow (never before its level): the inputs of
// stage s by plan s at the latest, the traced outputs by the last plan, any other node by the
// first plan that uses it. So a DDP bucket's gradients are computed just before its all-reduce
// starts, and the rest of the backward pass runs while it travels. A value a later plan reads
// is carried: an output of its plan, bound to a placeholder of the later ones (nothing is
// computed twice), except views (reshape, permute, expand, slice: strides, not copies) and
// constant expressions (constants, random draws, what is computed from them alone), which
// are computed again where used, so that every kernel reads what it reads in an eager step.
// Without stages it is one plan of the outputs, the graph as traced.
class Cut {
public:
  // The cut of the graph of `roots`, each with the last plan that may compute it.
  Cut(const std::vector<detail::CaptureState::HostStage>& stages,
      const std::vector<std::pair<graph::NodeRef, size_t>>& roots)
      : first_use_(stages.size(), stages.size()) {
    for (size_t s = 0; s < stages.size(); ++s)
      for (const graph::NodeRef& p : stages[s].placeholders) {
        level_[p.get()] = s + 1;
        pure_[p.get()] = false;
        stage_[p.get()] = s;
      }
    assign(roots);
    for (const auto& [r, plan] : roots) need(r);
  }

  // The plan that computes `n` (a needed node).
  size_t plan(const graph::NodeRef& n) const { return at_.at(n.get()); }
  // The nodes carried from a plan to later ones, in the order they were found.
  const std::vector<graph::NodeRef>& carried() const { return carried_; }
  // The placeholder that later plans read a carried node from.
  const graph::NodeRef& placeholder(const graph::Node* n) const { return carry_.at(n); }
  // Per stage, the first plan that reads its results (the last one where only traced outputs do).
  const std::vector<size_t>& first_use() const { return first_use_; }

  // `root` as plan(root) computes it: what lower plans computed is read from placeholders.
  graph::NodeRef rewrite(const graph::NodeRef& root) {
    const size_t p = plan(root);
    auto& done = rewritten_[p];
    std::vector<const graph::Node*> todo{root.get()};
    while (!todo.empty()) {
      const graph::Node* n = todo.back();
      if (done.count(n)) {
        todo.pop_back();
        continue;
      }
      const graph::NodeRef self = n->shared_from_this();
      if (shared(self)) {
        done[n] = self;
        todo.pop_back();
        continue;
      }
      bool ready = true;
      std::vector<graph::NodeRef> ins;
      const auto values = graph::value_inputs(*n); // what plan p computes n from
      for (const graph::NodeRef& in : values) {
        if (carried_to(in, p)) {
          ins.push_back(carry_.at(in.get()));
          continue;
        }
        const auto it = done.find(in.get());
        if (it == done.end()) ready = false, todo.push_back(in.get());
        else ins.push_back(it->second);
      }
      if (!ready) continue;
      todo.pop_back();
      if (std::equal(ins.begin(), ins.end(), values.begin(), values.end())) {
        done[n] = self;
        continue;
      }
      ins.insert(ins.end(), n->inputs.begin() + static_cast<ptrdiff_t>(values.size()), n->inputs.end());
      const graph::SourceScope at(n->origin, true); // the rebuilt node keeps the user's line
      done[n] = graph::make_node(n->op, n->dtype, n->shape, std::move(ins), n->attrs, n->device);
    }
    return done.at(root.get());
  }

private:
  static bool leaf(const graph::Node* n) { return n->op == graph::OpKind::Input || n->realized(); }
  static bool view(const graph::NodeRef& n) {
    using graph::OpKind;
    return n->op == OpKind::Reshape || n->op == OpKind::Permute || n->op == OpKind::Expand || n->op == OpKind::Slice;
  }

  // True when plan `p` reads `in` from a placeholder rather than computing it.
  bool carried_to(const graph::NodeRef& in, size_t p) { return !shared(in) && !view(in) && plan(in) < p; }

  // Each needed node's plan: the roots' last plans, then (users first) the first plan using it.
  void assign(const std::vector<std::pair<graph::NodeRef, size_t>>& roots) {
    std::vector<const graph::Node*> starts;
    for (const auto& [r, last] : roots) {
      starts.push_back(r.get());
      const auto it = at_.find(r.get());
      at_[r.get()] = it == at_.end() ? last : std::min(it->second, last);
    }
    const std::vector<const graph::Node*> order =
        graph::value_order(starts, [this](const graph::Node* n) { return shared(n->shared_from_this()); });
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const graph::Node* n = *it;
      if (shared(n->shared_from_this())) continue;
      const size_t p = std::max(at_.at(n), level(n->shared_from_this()));
      at_[n] = p;
      for (const graph::NodeRef& in : graph::value_inputs(*n)) {
        if (const auto st = stage_.find(in.get()); st != stage_.end())
          first_use_[st->second] = std::min(first_use_[st->second], p);
        if (shared(in)) continue;
        const auto found = at_.find(in.get());
        at_[in.get()] = found == at_.end() ? p : std::min(found->second, p);
      }
    }
  }

  // Marks the carried values: inputs of a node computed by a later plan than theirs.
  void need(const graph::NodeRef& root) {
    std::vector<std::pair<graph::NodeRef, size_t>> todo{{root, plan(root)}}; // (node, the plan computing it)
    std::set<std::pair<const graph::Node*, size_t>> seen;
    while (!todo.empty()) {
      const auto [n, p] = todo.back();
      todo.pop_back();
      if (shared(n) || !seen.emplace(n.get(), p).second) continue;
      for (const graph::NodeRef& in : graph::value_inputs(*n)) {
        if (shared(in)) continue;
        if (!carried_to(in, p)) {
          todo.emplace_back(in, p); // computed by plan p too (a view of a lower plan's value is computed again)
          continue;
        }
        if (!carry_.count(in.get())) {
          carry_[in.get()] = graph::make_input(in->dtype, in->shape, nullptr, in->device);
          carried_.push_back(in);
        }
        todo.emplace_back(in, plan(in));
      }
    }
  }

  // The level of `n`.
  size_t level(const graph::NodeRef& n) {
    visit(n.get());
    return level_.at(n.get());
  }

  // Computes level_ and pure_ of `root` and the nodes below it, inputs first (iterative: a
  // training step's graph is deep).
  void visit(const graph::Node* root) {
    std::vector<const graph::Node*> todo{root};
    while (!todo.empty()) {
      const graph::Node* n = todo.back();
      if (level_.count(n)) {
        todo.pop_back();
        continue;
      }
      if (leaf(n)) {
        level_[n] = 0, pure_[n] = false;
        todo.pop_back();
        continue;
      }
      bool ready = true, pure = true;
      size_t l = 0;
      for (const graph::NodeRef& in : graph::value_inputs(*n)) {
        const auto it = level_.find(in.get());
        if (it == level_.end()) ready = false, todo.push_back(in.get());
        else l = std::max(l, it->second), pure = pure && pure_.at(in.get());
      }
      if (ready) level_[n] = l, pure_[n] = pure, todo.pop_back();
    }
  }

  // What every plan reads or computes as the trace made it: leaves (arguments, state, stage
  // results) and constant expressions.
  bool shared(const graph::NodeRef& n) {
    visit(n.get());
    return leaf(n.get()) || pure_.at(n.get());
  }

  std::unordered_map<const graph::Node*, size_t> level_;
  std::unordered_map<const graph::Node*, bool> pure_;    // a constant expression (no leaf below it)
  std::unordered_map<const graph::Node*, size_t> stage_; // a stage's result: its stage
  std::unordered_map<const graph::Node*, size_t> at_;    // the plan computing a needed node
  std::vector<size_t> first_use_;
  std::unordered_map<const graph::Node*, graph::NodeRef> carry_;
  std::vector<graph::NodeRef> carried_;
  std::unordered_map<size_t, std::unordered_map<const graph::Node*, graph::NodeRef>> rewritten_; // per plan
};

// The plans of a trace (see Cut).
void make_plans(Trace& tr) {
  const size_t last = tr.stages.size();
  std::vector<std::pair<graph::NodeRef, size_t>> roots;
  for (const graph::NodeRef& o : tr.outputs) roots.emplace_back(o, last);
  for (size_t s = 0; s < tr.stages.size(); ++s)
    for (const graph::NodeRef& in : tr.stages[s].inputs) roots.emplace_back(in, s);
  Cut cut(tr.stages, roots);
  std::vector<std::vector<graph::NodeRef>> outputs(last + 1);
  tr.carried.assign(outputs.size(), {});
  for (const auto& [r, _] : roots) {
    const size_t p = cut.plan(r);
    tr.where.emplace_back(p, outputs[p].size());
    outputs[p].push_back(cut.rewrite(r));
    tr.carried[p].push_back(nullptr);
  }
  for (const graph::NodeRef& c : cut.carried()) {
    const size_t p = cut.plan(c);
    outputs[p].push_back(cut.rewrite(c));
    tr.carried[p].push_back(cut.placeholder(c.get()));
  }
  tr.first_use = cut.first_use();
  for (const auto& o : outputs) tr.plans.push_back(runtime::make_plan_ref(o));
}

// Gives a slot's tensor back its value (and, where the trace tracks it, its gradient) from before
// the trace: the first call replays like every later one, and a failed trace leaves no placeholder.
void restore_start(Slot& s) {
  s.impl->end_trace(s.start_node);
  if (s.tracks_grad) s.impl->grad = s.start_grad ? Tensor(s.start_grad) : Tensor();
}

Trace trace(const CompiledFunction::Fn& fn, const std::vector<Tensor>& args) {
  runtime::observe::Span span("trace", "trace step");
  Trace tr;
  detail::CaptureState state;
  static std::atomic<uint64_t> traces{0};
  state.id = ++traces;
  state.first_serial = next_tensor_serial(); // tensors made from here on are the trace's own
  std::vector<Tensor> inputs;
  std::vector<graph::NodeRef> input_nodes; // the arguments' nodes in the trace, before the function ran
  for (const Tensor& a : args) {
    tr.placeholders.push_back(graph::make_input(a.dtype(), a.shape(), nullptr, a.device()));
    inputs.emplace_back(tr.placeholders.back(), a.requires_grad());
    // A leaf argument is one inside too: a backward() there accumulates into its gradient.
    if (a.requires_grad() && detail::leaf_for(a.node().get()) == a.impl()) detail::register_leaf(inputs.back().impl());
    input_nodes.push_back(inputs.back().node());
    tr.arg_grads.push_back(a.requires_grad());
    const Tensor& g = arg_grad(a);
    tr.arg_start_grads.push_back(g.defined() ? graph::make_input(g.dtype(), g.shape(), nullptr, g.device()) : nullptr);
    if (g.defined()) inputs.back().impl()->grad = Tensor(tr.arg_start_grads.back());
  }
  std::vector<Tensor> results;
  try {
    TraceGuard guard(&state);
    results = fn(inputs);
  } catch (...) {
    // The state the function touched holds the trace's nodes (placeholders without data): give
    // it back its values and gradients from before the call, so that a caught error leaves the
    // model and optimizer as they were.
    for (Slot& s : state.slots) restore_start(s);
    throw;
  }
  std::vector<graph::NodeRef> outputs;
  for (const Tensor& r : results) {
    outputs.push_back(r.node());
    tr.destinations.push_back({Destination::Result});
  }
  for (size_t i = 0; i < inputs.size(); ++i) { // what the function did to its arguments
    const TensorImpl& in = *inputs[i].impl();
    tr.arg_grads_after.push_back(in.requires_grad);
    if (in.node != input_nodes[i]) {
      outputs.push_back(in.node);
      tr.destinations.push_back({Destination::ArgValue, i});
    }
    const graph::NodeRef& start = tr.arg_start_grads[i];
    if (in.grad.defined() && in.grad.node() != start) {
      outputs.push_back(in.grad.node());
      tr.destinations.push_back({Destination::ArgGrad, i});
    } else if (!in.grad.defined() && start) {
      tr.destinations.push_back({Destination::ClearArgGrad, i});
    }
  }
  for (size_t i = 0; i < state.slots.size(); ++i) {
    Slot& s = state.slots[i];
    tr.grad_defined.push_back(s.start_grad != nullptr);
    if (s.impl->node != s.start_node) {
      outputs.push_back(s.impl->node);
      tr.destinations.push_back({Destination::Value, i});
    }
    if (!s.tracks_grad) { // read only: its value is bound per replay
      restore_start(s);
      continue;
    }
    const graph::NodeRef grad = s.impl->grad.defined() ? s.impl->grad.node() : nullptr;
    if (grad && grad != s.start_grad) {
      outputs.push_back(grad);
      tr.destinations.push_back({Destination::Grad, i});
    } else if (!grad && s.start_grad) {
      tr.destinations.push_back({Destination::ClearGrad, i});
    }
    restore_start(s); // the first call replays like every later one, from the state at trace start
  }
  tr.slots = std::move(state.slots);
  tr.host_values = std::move(state.host_values);
  tr.seeds = std::move(state.seeds);
  tr.guards = std::move(state.guards);
  tr.stages = std::move(state.stages);
  for (const graph::NodeRef& o : outputs)
    if (o->device != outputs[0]->device)
      throw Error("compile", "a compiled function computes on one device, but its results and updated state are on " +
                                 outputs[0]->device.str() + " and " + o->device.str());
  tr.outputs = outputs;
  make_plans(tr);
  return tr;
}

// Same dtype, shape and device: a replay can bind `now`'s storage where the trace had `then`.
bool same_type(const graph::Node& now, const graph::Node& then) {
  return now.dtype == then.dtype && now.shape == then.shape && now.device == then.device;
}

bool state_matches(const Trace& tr) {
  for (size_t i = 0; i < tr.slots.size(); ++i) {
    const Slot& s = tr.slots[i];
    if (!same_type(*s.impl->node, *s.start_node)) return false; // changed since (Module::to a dtype or device)
    if (!s.tracks_grad) continue;
    if (s.impl->grad.defined() != tr.grad_defined[i]) return false;
    if (s.start_grad && !same_type(*s.impl->grad.node(), *s.start_grad)) return false;
  }
  return std::all_of(tr.guards.begin(), tr.guards.end(), [](const auto& still_valid) { return still_valid(); });
}

runtime::Bindings bind(const Trace& tr, const std::vector<Tensor>& args) {
  runtime::Bindings b;
  b.reserve(args.size() + 2 * tr.slots.size());
  const bool computed =
      std::all_of(args.begin(), args.end(),
                  [](const Tensor& t) {
                    return detail::nothing_to_realize(t.impl()) &&
                           (!arg_grad(t).defined() || detail::nothing_to_realize(arg_grad(t).impl()));
                  }) &&
      std::all_of(tr.slots.begin(), tr.slots.end(), [](const Slot& s) {
        return detail::nothing_to_realize(s.impl) && (!s.start_grad || detail::nothing_to_realize(s.impl->grad.impl()));
      });
  if (!computed) { // a step's usual case skips building the list
    std::vector<Tensor> pending = args;
    for (const Tensor& t : args)
      if (arg_grad(t).defined()) pending.push_back(arg_grad(t));
    for (const Slot& s : tr.slots) {
      pending.emplace_back(s.impl->node);
      if (s.start_grad) pending.push_back(s.impl->grad);
    }
    kiln::realize(pending);
  }
  for (size_t i = 0; i < args.size(); ++i) {
    b[tr.placeholders[i].get()] = args[i].node()->realized();
    if (tr.arg_start_grads[i]) b[tr.arg_start_grads[i].get()] = arg_grad(args[i]).node()->realized();
  }
  // Slots that only read a value first: a gradient read through its own tensor handle
  // (g = p.grad() before p's slot took the gradient) shares its node with p's slot's
  // start_grad, and p's binding, which follows p's current gradient, must win.
  for (const bool tracking : {false, true})
    for (const Slot& s : tr.slots) {
      if (s.tracks_grad != tracking) continue;
      b[s.start_node.get()] = s.impl->node->realized();
      if (s.start_grad) b[s.start_grad.get()] = s.impl->grad.node()->realized();
    }
  for (const auto& h : tr.host_values) { // this step's host values, in trace order
    std::vector<double> v(h.placeholders.size());
    h.fill(v.data());
    for (size_t i = 0; i < v.size(); ++i)
      b[h.placeholders[i].get()] = detail::host_scalar(h.dtype, v[i], h.device).node()->realized();
  }
  return b;
}

} // namespace

namespace detail {

StartedStage::StartedStage(HostRun run, std::vector<Tensor> in, const StartedStage* before) {
  const bool host = std::all_of(in.begin(), in.end(), [](const Tensor& t) { return t.device() == kCPU; });
  std::shared_future<std::vector<Tensor>> prev = before ? before->result_ : decltype(prev)();
  auto task = [run = std::move(run), in = std::move(in), prev] {
    if (prev.valid()) prev.get(); // after the stage before; its error, if any, is this one's too
    std::vector<Tensor> out = run(in);
    kiln::realize(out);
    return out;
  };
  if (host) result_ = std::async(std::launch::async, std::move(task)).share();
  else {
    std::promise<std::vector<Tensor>> now;
    try {
      now.set_value(task());
    } catch (...) {
      now.set_exception(std::current_exception());
    }
    result_ = now.get_future().share();
  }
}

const std::vector<Tensor>& StartedStage::get() const {
  if (result_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    runtime::observe::Span span("dist", "wait");
    result_.wait();
  }
  return result_.get();
}

void StartedStage::wait() const { result_.wait(); }

} // namespace detail

namespace {

// The values of the traced function's outputs: plan 0, stage 0, plan 1, ... (see Cut), each
// stage waited for before the first plan that reads its results. `donate` gives the last plan
// its donations (runtime::Donations), asked right before it runs, when every stage has ended.
std::vector<std::shared_ptr<graph::Storage>> run_plans(
    const Trace& tr, runtime::Bindings b, const runtime::SeedOverrides& seeds,
    const std::function<const runtime::Donations&(const runtime::Bindings&)>& donate) {
  static const runtime::Donations none;
  std::vector<std::vector<std::shared_ptr<graph::Storage>>> values(tr.plans.size());
  auto value = [&](size_t i) { return values[tr.where[i].first][tr.where[i].second]; };
  std::list<detail::StartedStage> started; // a list: stages keep their address, and none costs nothing
  size_t stage_input = tr.outputs.size(); // into `where`
  auto wait_for = [&](size_t plan) { // the results of the stages plan `plan` reads
    size_t s = 0;
    for (auto stage = started.begin(); stage != started.end(); ++stage, ++s) {
      if (tr.first_use[s] != plan) continue;
      const std::vector<Tensor>& out = stage->get();
      KILN_ASSERT(out.size() == tr.stages[s].placeholders.size(), "a host stage returned the wrong number of tensors");
      for (size_t i = 0; i < out.size(); ++i) b[tr.stages[s].placeholders[i].get()] = out[i].node()->realized();
    }
  };
  try {
    for (size_t j = 0; j < tr.plans.size(); ++j) {
      wait_for(j);
      values[j] = runtime::execute(*tr.plans[j], b, seeds, {}, j + 1 == tr.plans.size() ? donate(b) : none);
      for (size_t i = 0; i < values[j].size(); ++i)
        if (tr.carried[j][i]) b[tr.carried[j][i].get()] = values[j][i];
      if (j == tr.stages.size()) break;
      std::vector<Tensor> in;
      for (const graph::NodeRef& n : tr.stages[j].inputs)
        in.emplace_back(graph::make_input(n->dtype, n->shape, value(stage_input++), n->device));
      started.emplace_back(tr.stages[j].run, std::move(in), started.empty() ? nullptr : &started.back());
    }
  } catch (...) {
    for (const detail::StartedStage& s : started) s.wait(); // no collective outlives the step
    throw;
  }
  if (tr.plans.size() == 1) return std::move(values[0]); // no stage: the plan's outputs are the traced outputs
  std::vector<std::shared_ptr<graph::Storage>> result;
  for (size_t i = 0; i < tr.outputs.size(); ++i) {
    const auto bound = b.find(tr.outputs[i].get()); // a stage's result returned as it is
    result.push_back(bound != b.end() ? bound->second : value(i));
  }
  return result;
}

// The slots' old values a replay may let the plan overwrite (runtime::Donations), with their
// tensors' locks held until the replay has stored the new values.
struct Donated {
  std::vector<std::unique_lock<std::mutex>> locks; // of the slots' tensors, by `slots`
  std::vector<size_t> slots;
  runtime::Donations pairs;
};

// What the last plan of a replay of `tr` may overwrite, asked right before it runs with the
// bindings `b` of that moment (with host stages, every stage has ended by then): each value or
// gradient the step replaces that nothing but its slot and the bindings reach (no other tensor,
// view, pending expression, stage input or result, or carried value holds its node or its
// storage), so that no one can tell it was written over. A reader on another thread (to_vector, a
// checkpoint save) waits for the tensor's lock, held from here until the replay has stored the
// new value, and then sees the whole new value, as with a concurrent assign. Locks are taken in
// address order. Pairs name the last plan's outputs. Adds to `d`.
void donate(const Trace& tr, const runtime::Bindings& b, Donated& d) {
  // (slot, output of the last plan): the gradients first, then the values (one allocation, not two)
  std::vector<std::pair<size_t, size_t>> replaced;
  size_t grads = 0;
  for (const Destination::Kind kind : {Destination::Grad, Destination::Value}) {
    size_t out = 0;
    for (const Destination& dest : tr.destinations) {
      if (!dest.has_output()) continue;
      const auto [plan, index] = tr.where[out++];
      if (plan + 1 == tr.plans.size() && dest.kind == kind) replaced.emplace_back(dest.slot, index);
    }
    if (kind == Destination::Grad) grads = replaced.size();
  }
  d.pairs.reserve(replaced.size());
  // A gradient tensor nothing else holds (no handle from p.grad()) is unreachable from other
  // threads too: no lock.
  for (const auto& [slot, output] : std::span(replaced).first(grads)) {
    const Slot& s = tr.slots[slot];
    const Tensor& g = s.impl->grad;
    const auto bound = s.start_grad && g.defined() ? b.find(s.start_grad.get()) : b.end();
    if (bound == b.end() || g.impl().use_count() != 1 || g.impl()->node.use_count() != 1 || bound->second.use_count() != 2)
      continue;
    d.pairs.emplace_back(s.start_grad.get(), output);
  }
  const auto values = replaced.begin() + static_cast<ptrdiff_t>(grads);
  std::sort(values, replaced.end(),
            [&](const auto& x, const auto& y) { return tr.slots[x.first].impl.get() < tr.slots[y.first].impl.get(); });
  for (const auto& [slot, output] : std::span(values, replaced.end())) {
    const Slot& s = tr.slots[slot];
    std::unique_lock lock(s.impl->node_mu);
    const auto bound = b.find(s.start_node.get());
    if (bound == b.end() || s.impl->node.use_count() != 1 || bound->second.use_count() != 2) continue;
    d.pairs.emplace_back(s.start_node.get(), output);
    d.locks.push_back(std::move(lock));
    d.slots.push_back(slot);
  }
}

std::vector<Tensor> replay(const Trace& tr, const std::vector<Tensor>& args) {
  runtime::SeedOverrides seeds;
  for (const auto& [token, next] : tr.seeds) seeds[static_cast<int64_t>(token)] = static_cast<int64_t>(next());
  Donated donated; // its locks are held until the new values are stored
  const auto values = run_plans(tr, bind(tr, args), seeds, [&](const runtime::Bindings& b) -> const runtime::Donations& {
    donate(tr, b, donated);
    return donated.pairs;
  });
  std::vector<Tensor> results;
  std::vector<std::shared_ptr<TensorImpl>> leaves; // registered once the locks are released
  size_t out = 0;
  for (const Destination& d : tr.destinations) {
    if (d.kind == Destination::ClearGrad) {
      tr.slots[d.slot].impl->grad = Tensor();
      continue;
    }
    if (d.kind == Destination::ClearArgGrad) {
      args[d.slot].impl()->grad = Tensor();
      continue;
    }
    const graph::NodeRef& node = tr.outputs[out];
    graph::NodeRef value = graph::make_input(node->dtype, node->shape, values[out++]);
    if (d.kind == Destination::Result) {
      results.emplace_back(std::move(value));
      continue;
    }
    if (d.kind == Destination::ArgGrad || d.kind == Destination::ArgValue) {
      const std::shared_ptr<TensorImpl>& arg = args[d.slot].impl();
      if (d.kind == Destination::ArgGrad) arg->grad = Tensor(std::move(value));
      else {
        arg->store_node(std::move(value)); // other threads may be reading it (see Tensor::assign)
        if (arg->requires_grad) leaves.push_back(arg);
      }
      continue;
    }
    TensorImpl& impl = *tr.slots[d.slot].impl;
    if (d.kind == Destination::Grad) impl.grad = Tensor(std::move(value));
    else {
      const bool locked = std::find(donated.slots.begin(), donated.slots.end(), d.slot) != donated.slots.end();
      if (locked) impl.node = std::move(value);
      else impl.store_node(std::move(value)); // other threads may be reading it (see Tensor::assign)
      if (impl.requires_grad) leaves.push_back(tr.slots[d.slot].impl);
    }
  }
  donated.locks.clear();
  for (const auto& impl : leaves) detail::register_leaf(impl);
  for (size_t i = 0; i < args.size(); ++i) // requires_grad_() on an argument, as an eager call sets it
    if (tr.arg_grads_after[i] != args[i].requires_grad()) Tensor(args[i]).requires_grad_(tr.arg_grads_after[i]);
  return results;
}

} // namespace

struct CompiledFunction::Impl {
  Fn fn;
  std::map<std::string, Trace> traces;
  const Trace* last = nullptr;
  size_t num_traces = 0;
};

CompiledFunction::CompiledFunction(Fn fn) : impl_(std::make_unique<Impl>()) { impl_->fn = std::move(fn); }
CompiledFunction::~CompiledFunction() = default;
CompiledFunction::CompiledFunction(CompiledFunction&&) noexcept = default;
CompiledFunction& CompiledFunction::operator=(CompiledFunction&&) noexcept = default;

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& args, Loc loc) {
  if (detail::active_capture()) throw Error("compile", "a compiled function cannot be called while tracing another", loc);
  // The executor's and the GPU runtime's errors in a replay are the call's, at the user's line.
  const detail::UserCall call("compile", loc, detail::UserCall::Claim::KilnLines);
  const bool observed = runtime::observe::on();
  const auto t0 = observed ? runtime::observe::Clock::now() : runtime::observe::Clock::time_point{};
  const double kernel_ms0 = observed ? runtime::observe::thread_kernel_ms() : 0;
  const Trace* found = impl_->last && traced_for(*impl_->last, args) ? impl_->last : nullptr; // a loop's usual case
  if (!found) {
    const auto it = impl_->traces.find(signature(args));
    found = it == impl_->traces.end() ? nullptr : &it->second;
  }
  if (!found || !state_matches(*found)) {
    Trace tr = detail::memory_guard("compile", loc, [&] { return trace(impl_->fn, args); });
    ++impl_->num_traces;
    found = &impl_->traces.insert_or_assign(signature(args), std::move(tr)).first->second;
  }
  impl_->last = found;
  std::vector<Tensor> results = detail::memory_guard("compile", loc, [&] { return replay(*found, args); });
  if (observed)
    runtime::observe::step(graph::source_line_str({loc.file_name(), loc.line()}), t0, runtime::observe::Clock::now(),
                           runtime::observe::thread_kernel_ms() - kernel_ms0, num_kernels());
  return results;
}

size_t CompiledFunction::num_kernels() const {
  size_t n = 0;
  if (impl_->last)
    for (const runtime::PlanRef& p : impl_->last->plans) n += runtime::plan_launches(*p);
  return n;
}
size_t CompiledFunction::peak_intermediate_bytes() const {
  size_t peak = 0;
  if (impl_->last)
    for (const runtime::PlanRef& p : impl_->last->plans) peak = std::max(peak, runtime::plan_arena_bytes(*p));
  return peak;
}
size_t CompiledFunction::num_traces() const { return impl_->num_traces; }
std::vector<size_t> CompiledFunction::kernels_per_plan() const {
  std::vector<size_t> n;
  if (impl_->last)
    for (const runtime::PlanRef& p : impl_->last->plans) n.push_back(runtime::plan_launches(*p));
  return n;
}

CompiledFunction compile(CompiledFunction::Fn fn) { return CompiledFunction(std::move(fn)); }

} // namespace kiln

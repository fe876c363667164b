// Capture and replay (see kiln/compile.h).

#include "kiln/compile.h"

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "frontend/src/tensor_impl.h"
#include "graph/random.h"
#include "runtime/executor.h"
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
    for (const graph::NodeRef& in : m->inputs)
      if (seen.insert(in.get()).second) todo.push_back(in.get());
  }
  return false;
}
} // namespace

void note_state_change(const std::shared_ptr<TensorImpl>& impl) {
  CaptureState* cap = active_capture();
  if (!cap) return;
  for (const auto& s : cap->slots)
    if (s.impl == impl) return;
  if (traced_value(impl->node)) return;
  set_active_capture(nullptr); // realizing a tensor's state is not part of the trace
  impl->node = realized_input(impl->node);
  if (impl->grad.defined()) impl->grad = Tensor(realized_input(impl->grad.node()));
  if (impl->requires_grad) register_leaf(impl);
  set_active_capture(cap);
  cap->slots.push_back({impl, impl->node, impl->grad.defined() ? impl->grad.node() : nullptr});
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
                               std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run, const char* op,
                               const Loc& loc) {
  CaptureState* cap = active_capture();
  if (!cap) return run(inputs);
  if (!cap->stages.empty())
    throw Error(op, "a compiled function can run one host computation (collective) between its kernels; this is "
                    "the second: split the function in two",
                loc);
  CaptureState::HostStage stage{{}, {}, std::move(run)};
  std::vector<Tensor> out;
  for (const Tensor& t : inputs) {
    stage.inputs.push_back(t.node());
    stage.placeholders.push_back(graph::make_input(t.dtype(), t.shape(), nullptr, t.device()));
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

// Where each output of a traced plan goes after a replay.
struct Destination {
  enum Kind { Result, Value, Grad, ClearGrad } kind;
  size_t slot = 0;
};

// Where an output of the traced function is computed: by the plan before the host stage, by
// the plan after it (`plan`, the only one without a stage), or it is a result of the stage.
struct Source {
  enum From { Pre, Post, Stage } from;
  size_t index; // into that plan's outputs, or the stage's results
};

// One trace: the plan(s), the placeholders standing for the arguments, and the slots.
struct Trace {
  std::vector<graph::NodeRef> placeholders;
  std::vector<Slot> slots;
  std::vector<detail::CaptureState::HostValues> host_values;
  std::vector<std::pair<uint64_t, std::function<uint64_t()>>> seeds;
  std::vector<std::function<bool()>> guards;
  std::vector<bool> grad_defined; // per slot, at trace start
  std::vector<detail::CaptureState::HostStage> stages; // at most one
  runtime::Plan pre;  // with a stage: its inputs (first), then the outputs that do not need it
  runtime::Plan plan; // without a stage: every output; with one: the outputs that need it
  std::vector<graph::NodeRef> outputs;   // the traced function's outputs (results, then state)
  std::vector<Source> sources;           // one per output
  std::vector<Destination> destinations; // one per output, then ClearGrad entries
};

std::string signature(const std::vector<Tensor>& args) {
  std::string s;
  for (const Tensor& t : args) s += t.type_str() + "@" + t.device().str() + (t.requires_grad() ? "g;" : ";");
  return s;
}

class TraceGuard {
public:
  explicit TraceGuard(detail::CaptureState* s) { detail::set_active_capture(s); }
  ~TraceGuard() { detail::set_active_capture(nullptr); }
};

// True when `n` is computed from one of `stage` (a placeholder of the host stage's results).
bool needs_stage(const graph::NodeRef& n, const std::unordered_set<const graph::Node*>& stage,
                 std::unordered_map<const graph::Node*, bool>& memo) {
  if (stage.count(n.get())) return true;
  if (const auto it = memo.find(n.get()); it != memo.end()) return it->second;
  bool needs = false;
  for (const graph::NodeRef& in : n->inputs)
    if (!in->realized() && needs_stage(in, stage, memo)) needs = true;
  return memo[n.get()] = needs;
}

// The plans of a trace: one for every output, or with a host stage, one for the stage's inputs
// and the outputs that do not need its results, and one for those that do (which recomputes
// what it needs of the first part rather than keeping it: none of it for an optimizer step).
void make_plans(Trace& tr) {
  if (tr.stages.empty()) {
    for (size_t i = 0; i < tr.outputs.size(); ++i) tr.sources.push_back({Source::Post, i});
    tr.plan = runtime::make_plan(tr.outputs);
    return;
  }
  const auto& stage = tr.stages[0];
  std::unordered_set<const graph::Node*> placeholders;
  for (const graph::NodeRef& p : stage.placeholders) placeholders.insert(p.get());
  std::unordered_map<const graph::Node*, bool> memo;
  std::vector<graph::NodeRef> pre = stage.inputs, post;
  for (const graph::NodeRef& o : tr.outputs) {
    const auto direct = std::find(stage.placeholders.begin(), stage.placeholders.end(), o);
    if (direct != stage.placeholders.end())
      tr.sources.push_back({Source::Stage, static_cast<size_t>(direct - stage.placeholders.begin())});
    else if (needs_stage(o, placeholders, memo))
      tr.sources.push_back({Source::Post, post.size()}), post.push_back(o);
    else
      tr.sources.push_back({Source::Pre, pre.size()}), pre.push_back(o);
  }
  tr.pre = runtime::make_plan(pre);
  if (!post.empty()) tr.plan = runtime::make_plan(post);
}

Trace trace(const CompiledFunction::Fn& fn, const std::vector<Tensor>& args) {
  runtime::observe::Span span("trace", "trace step");
  Trace tr;
  std::vector<Tensor> inputs;
  for (const Tensor& a : args) {
    tr.placeholders.push_back(graph::make_input(a.dtype(), a.shape(), nullptr, a.device()));
    inputs.emplace_back(tr.placeholders.back(), a.requires_grad());
  }
  detail::CaptureState state;
  std::vector<Tensor> results;
  {
    TraceGuard guard(&state);
    results = fn(inputs);
  }
  std::vector<graph::NodeRef> outputs;
  for (const Tensor& r : results) {
    outputs.push_back(r.node());
    tr.destinations.push_back({Destination::Result});
  }
  for (size_t i = 0; i < state.slots.size(); ++i) {
    Slot& s = state.slots[i];
    tr.grad_defined.push_back(s.start_grad != nullptr);
    if (s.impl->node != s.start_node) {
      outputs.push_back(s.impl->node);
      tr.destinations.push_back({Destination::Value, i});
    }
    const graph::NodeRef grad = s.impl->grad.defined() ? s.impl->grad.node() : nullptr;
    if (grad && grad != s.start_grad) {
      outputs.push_back(grad);
      tr.destinations.push_back({Destination::Grad, i});
    } else if (!grad && s.start_grad) {
      tr.destinations.push_back({Destination::ClearGrad, i});
    }
    // The first call replays like every later one, from the state at trace start.
    s.impl->node = s.start_node;
    s.impl->grad = s.start_grad ? Tensor(s.start_grad) : Tensor();
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

bool state_matches(const Trace& tr) {
  for (size_t i = 0; i < tr.slots.size(); ++i)
    if (tr.slots[i].impl->grad.defined() != tr.grad_defined[i]) return false;
  return std::all_of(tr.guards.begin(), tr.guards.end(), [](const auto& still_valid) { return still_valid(); });
}

runtime::Bindings bind(const Trace& tr, const std::vector<Tensor>& args) {
  runtime::Bindings b;
  std::vector<Tensor> pending = args;
  for (const Slot& s : tr.slots) {
    pending.emplace_back(s.impl->node);
    if (s.start_grad) pending.push_back(s.impl->grad);
  }
  kiln::realize(pending);
  for (size_t i = 0; i < args.size(); ++i) b[tr.placeholders[i].get()] = args[i].node()->realized();
  for (const Slot& s : tr.slots) {
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

// The values of the traced function's outputs: its plan's, or the plan before the host stage,
// the stage on its results, then the plan after it.
std::vector<std::shared_ptr<graph::Storage>> run_plans(const Trace& tr, runtime::Bindings b,
                                                       const runtime::SeedOverrides& seeds) {
  if (tr.stages.empty()) return runtime::execute(tr.plan, b, seeds);
  const auto& stage = tr.stages[0];
  const auto pre = runtime::execute(tr.pre, b, seeds);
  std::vector<Tensor> in;
  for (size_t i = 0; i < stage.inputs.size(); ++i) {
    const graph::NodeRef& n = stage.inputs[i];
    in.emplace_back(graph::make_input(n->dtype, n->shape, pre[i], n->device));
  }
  std::vector<Tensor> out = stage.run(in);
  KILN_ASSERT(out.size() == stage.placeholders.size(), "a host stage returned the wrong number of tensors");
  kiln::realize(out);
  for (size_t i = 0; i < out.size(); ++i) b[stage.placeholders[i].get()] = out[i].node()->realized();
  const auto post = tr.plan.outputs.empty() ? decltype(pre){} : runtime::execute(tr.plan, b, seeds);
  std::vector<std::shared_ptr<graph::Storage>> values;
  for (const Source& s : tr.sources)
    values.push_back(s.from == Source::Pre ? pre[s.index] : s.from == Source::Post ? post[s.index]
                                                                                    : out[s.index].node()->realized());
  return values;
}

std::vector<Tensor> replay(const Trace& tr, const std::vector<Tensor>& args) {
  runtime::SeedOverrides seeds;
  for (const auto& [token, next] : tr.seeds) seeds[static_cast<int64_t>(token)] = static_cast<int64_t>(next());
  const auto values = run_plans(tr, bind(tr, args), seeds);
  std::vector<Tensor> results;
  size_t out = 0;
  for (const Destination& d : tr.destinations) {
    if (d.kind == Destination::ClearGrad) {
      tr.slots[d.slot].impl->grad = Tensor();
      continue;
    }
    const graph::NodeRef& node = tr.outputs[out];
    Tensor value(graph::make_input(node->dtype, node->shape, values[out++]));
    if (d.kind == Destination::Result) {
      results.push_back(value);
      continue;
    }
    TensorImpl& impl = *tr.slots[d.slot].impl;
    if (d.kind == Destination::Grad) impl.grad = value;
    else {
      impl.node = value.node();
      if (impl.requires_grad) detail::register_leaf(tr.slots[d.slot].impl);
    }
  }
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
  const bool observed = runtime::observe::on();
  const auto t0 = observed ? runtime::observe::Clock::now() : runtime::observe::Clock::time_point{};
  const double kernel_ms0 = observed ? runtime::observe::thread_kernel_ms() : 0;
  const std::string sig = signature(args);
  auto it = impl_->traces.find(sig);
  if (it == impl_->traces.end() || !state_matches(it->second)) {
    Trace tr = detail::memory_guard("compile", loc, [&] { return trace(impl_->fn, args); });
    ++impl_->num_traces;
    it = impl_->traces.insert_or_assign(sig, std::move(tr)).first;
  }
  impl_->last = &it->second;
  std::vector<Tensor> results = detail::memory_guard("compile", loc, [&] { return replay(it->second, args); });
  if (observed)
    runtime::observe::step(graph::source_line_str({loc.file_name(), loc.line()}), t0, runtime::observe::Clock::now(),
                           runtime::observe::thread_kernel_ms() - kernel_ms0, num_kernels());
  return results;
}

size_t CompiledFunction::num_kernels() const {
  return impl_->last ? impl_->last->pre.schedule.launches.size() + impl_->last->plan.schedule.launches.size() : 0;
}
size_t CompiledFunction::peak_intermediate_bytes() const { return impl_->last ? impl_->last->plan.arena_bytes : 0; }
size_t CompiledFunction::num_traces() const { return impl_->num_traces; }

CompiledFunction compile(CompiledFunction::Fn fn) { return CompiledFunction(std::move(fn)); }

} // namespace kiln

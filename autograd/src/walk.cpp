#include "autograd/walk.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "autograd/custom.h"
#include "autograd/rules.h"
#include "graph/build.h"
#include "kiln/error.h"

namespace kiln::autograd {

namespace {

namespace b = graph::build;
using graph::Node;

// The line a gradient (or tangent) of `n` is made at: n's own (else the caller's, e.g. the
// user's backward()), marked as derived from n's op so that messages can say "in the
// gradient of log" (anomaly mode).
graph::SourceLine derived_line(const Node& n, graph::SourceLine::Derived how) {
  graph::SourceLine s = n.origin ? n.origin : graph::current_source_line();
  s.derived = how;
  s.of = n.op;
  return s;
}

// What the walks know about one node.
struct Info {
  std::vector<NodeRef> operands; // differentiable operands (null where gradients do not flow)
  CustomInfo custom;             // the custom call behind the node, if any
  bool relevant = false;         // reverse mode: a target lies below it
};

// The part of the graph reachable from `roots` along differentiable edges, in
// topological order (operands first).
class Graph {
public:
  /// `where` is the user's call (grad(), backward(), jvp()) that errors name, `op` its kind ("grad"
  /// or "jvp").
  Graph(const std::vector<NodeRef>& roots, const std::source_location& where, const char* op) : where_(where), op_(op) {
    for (const NodeRef& r : roots) visit(r);
  }
  /// Nodes, operands before their users.
  const std::vector<NodeRef>& order() const { return order_; }
  /// The node's entry (it must be in the graph).
  Info& info(const Node* n) { return info_.at(n); }
  /// True when the node is in the graph.
  bool contains(const Node* n) const { return info_.count(n) > 0; }

private:
  std::vector<NodeRef> order_;
  std::unordered_map<const Node*, Info> info_;
  std::source_location where_;
  const char* op_;

  Info describe(const NodeRef& n) const {
    if (n->op == graph::OpKind::CustomOutput) return describe_custom(n);
    Info info;
    const bool flows = is_differentiable(*n);
    for (const NodeRef& x : n->inputs) info.operands.push_back(flows && is_floating(x->dtype) ? x : nullptr);
    return info;
  }

  // A custom output's operands, for the walks, are its call's inputs (operands 1...): never its value.
  Info describe_custom(const NodeRef& n) const {
    Info info;
    info.custom = find_custom(*n);
    if (!info.custom.call && n->inputs.size() > 1)
      throw Error(op_, "custom output " + std::to_string(n->attrs.i1) + " of call " + std::to_string(n->attrs.i0) + " (" +
                              std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape) +
                              ") has no gradient rules in this process (a graph read from text keeps a custom call's "
                              "inputs, not its rules)",
                  where_);
    for (size_t k = 1; k < n->inputs.size(); ++k)
      info.operands.push_back(is_floating(n->inputs[k]->dtype) ? n->inputs[k] : nullptr);
    return info;
  }

  // Iterative post-order DFS, so that deep graphs (N-layer networks) do not overflow the stack.
  void visit(const NodeRef& root) {
    if (!info_.emplace(root.get(), describe(root)).second) return;
    std::vector<std::pair<NodeRef, size_t>> stack{{root, 0}};
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      const std::vector<NodeRef>& ops = info_.at(n.get()).operands;
      if (next < ops.size()) {
        const NodeRef child = ops[next++];
        if (child && info_.emplace(child.get(), describe(child)).second) stack.emplace_back(child, 0);
        continue;
      }
      order_.push_back(n);
      stack.pop_back();
    }
  }
};

void accumulate(std::unordered_map<const Node*, NodeRef>& adj, const NodeRef& n, const NodeRef& g) {
  KILN_ASSERT(g->shape == n->shape && g->dtype == n->dtype,
              "gradient " + std::string(dtype_name(g->dtype)) + graph::shape_str(g->shape) + " for node " +
                  std::string(graph::op_name(n->op)) + " " + std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape));
  NodeRef& slot = adj[n.get()];
  slot = slot ? b::add(slot, g) : g;
}

NodeRef sum_all(const NodeRef& x) {
  if (x->shape.empty()) return x;
  std::vector<int64_t> dims(x->shape.size());
  std::iota(dims.begin(), dims.end(), 0);
  return b::reshape(b::reduce(graph::OpKind::Sum, x, dims), {});
}

// Reverse mode over a prepared graph.
class Reverse {
public:
  Reverse(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& targets, const std::source_location& where)
      : graph_(outputs, where, "grad") {
    std::unordered_set<const Node*> is_target;
    for (const NodeRef& t : targets) is_target.insert(t.get());
    for (const NodeRef& n : graph_.order()) mark(n, is_target.count(n.get()) > 0);
  }

  std::vector<NodeRef> run(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& seeds,
                           const std::vector<NodeRef>& targets) {
    for (size_t i = 0; i < outputs.size(); ++i)
      if (graph_.info(outputs[i].get()).relevant) accumulate(adj_, outputs[i], seeds[i]);
    const auto& order = graph_.order();
    for (auto it = order.rbegin(); it != order.rend(); ++it) step(*it);
    std::vector<NodeRef> out;
    for (const NodeRef& t : targets) {
      auto found = adj_.find(t.get());
      out.push_back(found == adj_.end() ? nullptr : found->second);
    }
    return out;
  }

private:
  Graph graph_;
  std::unordered_map<const Node*, NodeRef> adj_;
  std::unordered_map<const CustomCall*, size_t> pending_; // relevant outputs of a call not yet visited

  void mark(const NodeRef& n, bool target) {
    Info& info = graph_.info(n.get());
    info.relevant = target;
    for (const NodeRef& x : info.operands) info.relevant = info.relevant || (x && graph_.info(x.get()).relevant);
    if (info.relevant && info.custom.call) ++pending_[info.custom.call.get()];
  }

  void step(const NodeRef& n) {
    const Info& info = graph_.info(n.get());
    if (!info.relevant) return;
    if (info.custom.call) return custom_step(info);
    auto found = adj_.find(n.get());
    if (found == adj_.end() || !feeds_target(info)) return; // e.g. a target with nothing below it
    const graph::SourceScope at(derived_line(*n, graph::SourceLine::Derived::Gradient), /*replace=*/true);
    const std::vector<NodeRef> grads = vjp_rule(n, found->second);
    propagate(info.operands, grads);
  }

  bool feeds_target(const Info& info) {
    return std::any_of(info.operands.begin(), info.operands.end(),
                       [&](const NodeRef& x) { return x && graph_.info(x.get()).relevant; });
  }

  void propagate(const std::vector<NodeRef>& operands, const std::vector<NodeRef>& grads) {
    for (size_t k = 0; k < operands.size() && k < grads.size(); ++k)
      if (operands[k] && grads[k] && graph_.info(operands[k].get()).relevant) accumulate(adj_, operands[k], grads[k]);
  }

  // A call runs its rule once, when the last of its outputs is visited: by then
  // every output's adjoint is complete (the call's inputs come after all of them).
  void custom_step(const Info& info) {
    if (--pending_[info.custom.call.get()] > 0 || !feeds_target(info)) return;
    std::vector<NodeRef> adjoints;
    bool any = false;
    for (const NodeRef& o : info.custom.outputs) {
      auto found = adj_.find(o.get());
      any = any || found != adj_.end();
      adjoints.push_back(found != adj_.end() ? found->second : b::constant_like(o, 0));
    }
    if (!any) return;
    propagate(info.operands, info.custom.call->vjp(info.custom.outputs, adjoints));
  }
};

// Forward mode for a custom call without a forward rule: its reverse rule is
// linear in the adjoints u, so J t = d/du <vjp(u), t>, taken by reverse mode
// with respect to placeholder adjoints (the double-VJP trick, for custom calls only).
std::vector<NodeRef> transpose_vjp(const CustomInfo& info, const std::vector<NodeRef>& tangents,
                                   const std::source_location& where) {
  std::vector<NodeRef> us;
  for (const NodeRef& o : info.outputs) us.push_back(fresh_zeros(o));
  const std::vector<NodeRef> cts = info.call->vjp(info.outputs, us);
  NodeRef s;
  for (size_t i = 0; i < tangents.size() && i < cts.size(); ++i) {
    if (!tangents[i] || !cts[i]) continue;
    NodeRef term = sum_all(b::mul(b::cast(cts[i], tangents[i]->dtype), tangents[i]));
    s = s ? b::add(s, b::cast(term, s->dtype)) : term;
  }
  if (!s) return std::vector<NodeRef>(us.size());
  return vjp({s}, {b::constant(1, s->dtype, {}, s->device)}, us, where);
}

std::vector<NodeRef> custom_tangents(const CustomInfo& info, const std::vector<NodeRef>& tangents,
                                     const std::source_location& where) {
  if (std::none_of(tangents.begin(), tangents.end(), [](const NodeRef& t) { return t != nullptr; }))
    return std::vector<NodeRef>(info.outputs.size());
  if (info.call->jvp) return info.call->jvp(info.outputs, tangents);
  return transpose_vjp(info, tangents, where);
}

} // namespace

std::vector<NodeRef> vjp(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& seeds,
                         const std::vector<NodeRef>& targets, const std::source_location& where) {
  KILN_ASSERT(outputs.size() == seeds.size(), "one seed per output");
  return Reverse(outputs, targets, where).run(outputs, seeds, targets);
}

std::vector<NodeRef> jvp(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& primals,
                         const std::vector<NodeRef>& tangents, const std::source_location& where) {
  KILN_ASSERT(primals.size() == tangents.size(), "one tangent per primal");
  Graph graph(outputs, where, "jvp");
  std::unordered_map<const Node*, NodeRef> tan;
  for (size_t i = 0; i < primals.size(); ++i)
    if (tangents[i]) tan[primals[i].get()] = tangents[i];
  std::unordered_map<const CustomCall*, std::vector<NodeRef>> call_tangents;
  auto tangent_of = [&](const NodeRef& x) -> NodeRef {
    if (!x) return nullptr;
    auto it = tan.find(x.get());
    return it == tan.end() ? nullptr : it->second;
  };
  for (const NodeRef& n : graph.order()) {
    if (tan.count(n.get())) continue; // a seeded primal keeps its given tangent
    const Info& info = graph.info(n.get());
    std::vector<NodeRef> ts;
    for (const NodeRef& x : info.operands) ts.push_back(tangent_of(x));
    NodeRef t;
    if (info.custom.call) {
      auto [it, fresh] = call_tangents.try_emplace(info.custom.call.get());
      if (fresh) it->second = custom_tangents(info.custom, ts, where);
      t = it->second.at(info.custom.index);
    } else if (n->op == graph::OpKind::CustomOutput) {
      continue; // without inputs (a fresh leaf): no tangent
    } else {
      const graph::SourceScope at(derived_line(*n, graph::SourceLine::Derived::Tangent), /*replace=*/true);
      t = jvp_rule(n, ts);
    }
    if (t) tan[n.get()] = t;
  }
  std::vector<NodeRef> out;
  for (const NodeRef& o : outputs) out.push_back(tangent_of(o));
  return out;
}

} // namespace kiln::autograd

#include "autograd/custom.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <span>
#include <unordered_map>

#include "graph/build.h"
#include "kiln/error.h"

namespace kiln::autograd {

namespace {

using graph::OpKind;

// One custom call as the table keeps it: its rules; its values (strong: the rules see every
// output, so an output that was freed is made again from its value); its outputs (weak: the
// entry is stale once they are all gone; they hold the table no reference).
struct Record {
  std::shared_ptr<const CustomCall> call;
  std::vector<NodeRef> values;
  std::vector<std::weak_ptr<const graph::Node>> outputs;
  bool live() const {
    return std::any_of(outputs.begin(), outputs.end(), [](const auto& o) { return !o.expired(); });
  }
};

struct Table {
  std::mutex mu;
  std::unordered_map<int64_t, Record> by_call; // by call id (a CustomOutput's attrs.i0)
  size_t size_after_prune = 0;
};

Table& table() {
  static auto* t = new Table; // never destroyed: nodes may outlive static destruction
  return *t;
}

std::atomic<int64_t> g_next_call{1};

// Output `index` of call `id`: the value, then the call's inputs as operands.
NodeRef custom_node(const NodeRef& value, std::span<const NodeRef> inputs, int64_t id, size_t index) {
  graph::Attrs a;
  a.i0 = id;
  a.i1 = static_cast<int64_t>(index);
  std::vector<NodeRef> operands{value};
  operands.insert(operands.end(), inputs.begin(), inputs.end());
  return graph::make_node(OpKind::CustomOutput, value->dtype, value->shape, std::move(operands), std::move(a));
}

// Drops the entries of calls whose outputs are all gone, amortized: only when the table has doubled.
void prune_locked(Table& t) {
  if (t.by_call.size() < 2 * t.size_after_prune + 64) return;
  for (auto it = t.by_call.begin(); it != t.by_call.end();)
    it = it->second.live() ? std::next(it) : t.by_call.erase(it);
  t.size_after_prune = t.by_call.size();
}

// The forward rule of an alias: the tangent passes through.
std::vector<NodeRef> pass_through(const std::vector<NodeRef>&, const std::vector<NodeRef>& v) { return v; }

} // namespace

std::vector<NodeRef> make_custom_outputs(std::shared_ptr<const CustomCall> call, const std::vector<NodeRef>& inputs,
                                         const std::vector<NodeRef>& values) {
  for (const NodeRef& v : values) KILN_ASSERT(is_floating(v->dtype), "custom outputs are floating-point");
  const int64_t id = g_next_call.fetch_add(1);
  std::vector<NodeRef> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back(custom_node(values[i], inputs, id, i));
  Table& t = table();
  std::lock_guard lock(t.mu);
  t.by_call[id] = Record{std::move(call), values, {out.begin(), out.end()}};
  prune_locked(t);
  return out;
}

NodeRef fresh_alias(const NodeRef& x) {
  auto call = std::make_shared<CustomCall>();
  call->name = "alias";
  call->vjp = pass_through;
  call->jvp = pass_through;
  return make_custom_outputs(std::move(call), {x}, {x})[0];
}

// A custom output without inputs (nor rules) is a fresh identity through which no gradient passes.
NodeRef fresh_zeros(const NodeRef& like) {
  return custom_node(graph::build::constant_like(like, 0), {}, g_next_call.fetch_add(1), 0);
}

NodeRef fresh_leaf(const NodeRef& x) { return custom_node(x, {}, g_next_call.fetch_add(1), 0); }

CustomInfo find_custom(const graph::Node& n) {
  if (n.op != OpKind::CustomOutput) return {};
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.by_call.find(n.attrs.i0);
  if (it == t.by_call.end()) return {};
  Record& rec = it->second;
  const auto index = static_cast<size_t>(n.attrs.i1);
  // The node must be that output of the call (not a node read from text that reuses its id).
  if (index >= rec.values.size() || n.inputs[0] != rec.values[index]) return {};
  if (const NodeRef known = rec.outputs[index].lock(); known && known.get() != &n) return {};
  CustomInfo info{rec.call, index, {}};
  const std::span<const NodeRef> inputs(n.inputs.begin() + 1, n.inputs.end());
  for (size_t i = 0; i < rec.values.size(); ++i) {
    NodeRef o = i == index ? n.shared_from_this() : rec.outputs[i].lock();
    if (!o) o = custom_node(rec.values[i], inputs, n.attrs.i0, i); // freed: made again
    rec.outputs[i] = o;
    info.outputs.push_back(std::move(o));
  }
  return info;
}

size_t custom_table_size() {
  Table& t = table();
  std::lock_guard lock(t.mu);
  return static_cast<size_t>(std::count_if(t.by_call.begin(), t.by_call.end(), [](const auto& e) { return e.second.live(); }));
}

} // namespace kiln::autograd

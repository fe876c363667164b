#include "autograd/custom.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "graph/build.h"
#include "kiln/error.h"

namespace kiln::autograd {

namespace {

// One custom call as the table keeps it: the values (strong; they are the tagged
// nodes' operands anyway) but not the tagged outputs themselves, which would
// keep their own table entries alive forever.
struct CallRecord {
  std::shared_ptr<const CustomCall> call;
  int64_t tag = 0;
  std::vector<NodeRef> values;
};

struct Entry {
  std::weak_ptr<const graph::Node> node; // the entry is stale once its node is gone
  std::shared_ptr<const CallRecord> record;
  size_t index = 0;
};

struct Table {
  std::mutex mu;
  std::unordered_map<const graph::Node*, Entry> by_node;
  size_t size_after_prune = 0;
};

Table& table() {
  static auto* t = new Table; // never destroyed: nodes may outlive static destruction
  return *t;
}

std::atomic<int64_t> g_next_tag{1};

// Detach tagged with (call id, output index): unique per call, the identity when lowered.
NodeRef tagged(const NodeRef& value, int64_t tag, size_t index) {
  graph::Attrs a;
  a.i0 = tag;
  a.i1 = static_cast<int64_t>(index);
  return graph::make_node(graph::OpKind::Detach, value->dtype, value->shape, {value}, std::move(a));
}

// Drops the entries of dead nodes, amortized: only when the table has doubled.
void prune_locked(Table& t) {
  if (t.by_node.size() < 2 * t.size_after_prune + 64) return;
  for (auto it = t.by_node.begin(); it != t.by_node.end();)
    it = it->second.node.expired() ? t.by_node.erase(it) : std::next(it);
  t.size_after_prune = t.by_node.size();
}

// The output node for `index`, recreated (and re-registered) if it was freed.
NodeRef output_of(const std::shared_ptr<const CallRecord>& rec, size_t index) {
  NodeRef n = tagged(rec->values[index], rec->tag, index);
  Table& t = table();
  std::lock_guard lock(t.mu);
  Entry& e = t.by_node[n.get()];
  if (e.node.lock() != n) e = Entry{n, rec, index};
  prune_locked(t);
  return n;
}

// The forward rule of an alias: the tangent passes through.
std::vector<NodeRef> pass_through(const std::vector<NodeRef>&, const std::vector<NodeRef>& v) { return v; }

} // namespace

std::vector<NodeRef> make_custom_outputs(std::shared_ptr<const CustomCall> call, const std::vector<NodeRef>& values) {
  for (const NodeRef& v : values) KILN_ASSERT(is_floating(v->dtype), "custom outputs are floating-point");
  auto rec = std::make_shared<CallRecord>();
  rec->call = std::move(call);
  rec->tag = g_next_tag.fetch_add(1);
  rec->values = values;
  std::vector<NodeRef> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back(output_of(rec, i));
  return out;
}

NodeRef fresh_alias(const NodeRef& x) {
  auto call = std::make_shared<CustomCall>();
  call->name = "alias";
  call->inputs = {x};
  call->vjp = pass_through;
  call->jvp = pass_through;
  return make_custom_outputs(std::move(call), {x})[0];
}

NodeRef fresh_zeros(const NodeRef& like) {
  return tagged(graph::build::constant_like(like, 0), g_next_tag.fetch_add(1), 0);
}

NodeRef fresh_leaf(const NodeRef& x) { return tagged(x, g_next_tag.fetch_add(1), 0); }

CustomInfo find_custom(const graph::Node& n) {
  if (n.op != graph::OpKind::Detach || n.attrs.i0 == 0) return {}; // fast path: not tagged
  std::shared_ptr<const CallRecord> rec;
  size_t index = 0;
  {
    Table& t = table();
    std::lock_guard lock(t.mu);
    auto it = t.by_node.find(&n);
    if (it == t.by_node.end() || it->second.node.lock().get() != &n) return {};
    rec = it->second.record;
    index = it->second.index;
  }
  CustomInfo info{rec->call, index, {}};
  for (size_t i = 0; i < rec->values.size(); ++i) info.outputs.push_back(output_of(rec, i));
  return info;
}

size_t custom_table_size() {
  Table& t = table();
  std::lock_guard lock(t.mu);
  size_t live = 0;
  for (const auto& [n, e] : t.by_node) live += e.node.expired() ? 0 : 1;
  return live;
}

} // namespace kiln::autograd

#include "graph/node.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::graph {

namespace {

struct OpInfo {
  std::string_view name;
  int arity;
  OpCategory category;
  OpTypes types;
};

constexpr OpInfo kOpTable[] = {
#define KILN_OP(e, name, arity, cat, types) {name, arity, OpCategory::cat, OpTypes::types},
#include "graph/ops.def"
#undef KILN_OP
};

size_t mix(size_t h, uint64_t v) {
  // splitmix64-style combine: cheap, well distributed
  uint64_t x = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 29;
  return static_cast<size_t>(x);
}

size_t structural_hash(OpKind op, DType dtype, const Shape& shape, const std::vector<NodeRef>& inputs,
                       const Attrs& a, Device device) {
  size_t h = mix(static_cast<size_t>(op), static_cast<uint64_t>(dtype));
  h = mix(h, static_cast<uint64_t>(device.kind) << 32 | static_cast<uint32_t>(device.index));
  for (int64_t d : shape) h = mix(h, static_cast<uint64_t>(d));
  h = mix(h, shape.size());
  for (const NodeRef& in : inputs) h = mix(h, reinterpret_cast<uintptr_t>(in.get()));
  for (int64_t v : a.ints) h = mix(h, static_cast<uint64_t>(v));
  h = mix(h, std::bit_cast<uint64_t>(a.f0));
  h = mix(h, std::bit_cast<uint64_t>(a.f1));
  h = mix(h, static_cast<uint64_t>(a.i0));
  return mix(h, static_cast<uint64_t>(a.i1));
}

// Doubles compare by bit pattern, so that -0.0 and 0.0 stay distinct nodes.
bool same_attrs(const Attrs& a, const Attrs& b) {
  return a.ints == b.ints && std::bit_cast<uint64_t>(a.f0) == std::bit_cast<uint64_t>(b.f0) &&
         std::bit_cast<uint64_t>(a.f1) == std::bit_cast<uint64_t>(b.f1) && a.i0 == b.i0 && a.i1 == b.i1;
}

// The table of live nodes. Entries are raw pointers removed by ~Node; a recursive
// mutex because destroying a node can destroy its inputs while the lock is held.
struct Interner {
  std::recursive_mutex mu;
  std::unordered_multimap<size_t, const Node*> table;
  std::atomic<int64_t> next_input_id{1};
};

Interner& interner() {
  static auto* in = new Interner; // never destroyed: nodes may outlive static destruction
  return *in;
}

thread_local SourceLine current_line;
thread_local SourceCall current_call; // the user's call current_line came from, when known

} // namespace

bool operator==(const SourceLine& a, const SourceLine& b) {
  if (a.line != b.line || !a.file != !b.file) return false;
  return a.file == b.file || std::strcmp(a.file, b.file) == 0;
}

std::string source_line_str(const SourceLine& s) {
  if (!s) return "";
  const char* slash = std::strrchr(s.file, '/');
  return std::string(slash ? slash + 1 : s.file) + ":" + std::to_string(s.line);
}

std::string source_lines_str(const std::vector<SourceLine>& lines, size_t max) {
  std::string out;
  for (size_t i = 0; i < lines.size() && i < max; ++i) out += (i ? ", " : "") + source_line_str(lines[i]);
  if (lines.size() > max) out += ", ...";
  return out;
}

void add_source_line(std::vector<SourceLine>& lines, const SourceLine& s) {
  if (s && std::find(lines.begin(), lines.end(), s) == lines.end()) lines.push_back(s);
}

SourceScope::SourceScope(const std::source_location& loc, std::string_view op)
    : SourceScope(SourceLine{loc.file_name(), loc.line()}, false) {
  if (active_) current_call = SourceCall{op, loc, true};
}

SourceScope::SourceScope(const SourceLine& s, bool replace) {
  if (!s || (current_line && !replace)) return;
  saved_ = current_line;
  saved_call_ = current_call; // restored on exit; a line alone names no call
  current_line = s;
  current_call = SourceCall{};
  active_ = true;
}

SourceScope::~SourceScope() {
  if (!active_) return;
  current_line = saved_;
  current_call = saved_call_;
}

SourceLine current_source_line() { return current_line; }

SourceCall current_source_call() { return current_call; }

std::string_view op_name(OpKind op) { return kOpTable[static_cast<int>(op)].name; }
int op_arity(OpKind op) { return kOpTable[static_cast<int>(op)].arity; }
OpCategory op_category(OpKind op) { return kOpTable[static_cast<int>(op)].category; }

OpTypes op_types(OpKind op) { return kOpTable[static_cast<int>(op)].types; }

bool op_from_name(std::string_view name, OpKind& out) {
  for (int i = 0; i < kNumOps; ++i)
    if (kOpTable[i].name == name) {
      out = static_cast<OpKind>(i);
      return true;
    }
  return false;
}

struct Node::Key {};

Node::Node(const Key&, OpKind op_, DType dtype_, Shape shape_, std::vector<NodeRef> inputs_, Attrs attrs_,
           Device device_, size_t hash_)
    : op(op_), dtype(dtype_), shape(std::move(shape_)), inputs(std::move(inputs_)), attrs(std::move(attrs_)),
      device(device_), hash(hash_) {}

void Node::set_realized(std::shared_ptr<Storage> s) const {
  KILN_ASSERT(!s || s->device() == device, "a value on " + s->device().str() + " attached to a node on " + device.str());
  realized_.store(std::move(s));
}

Node::~Node() {
  {
    Interner& in = interner();
    std::lock_guard lock(in.mu);
    auto [lo, hi] = in.table.equal_range(hash);
    for (auto it = lo; it != hi; ++it)
      if (it->second == this) {
        in.table.erase(it);
        break;
      }
  }
  // Inputs are released iteratively: a chain of a million nodes would otherwise nest
  // a million destructors and overflow the stack. The outermost ~Node on this thread
  // drains a work list; the nested ones (run by its resets) only append to it.
  thread_local std::vector<NodeRef>* pending = nullptr;
  if (pending) {
    for (NodeRef& n : inputs) pending->push_back(std::move(n));
    return;
  }
  std::vector<NodeRef> work = std::move(inputs);
  pending = &work;
  while (!work.empty()) {
    NodeRef n = std::move(work.back());
    work.pop_back();
    n.reset(); // may run ~Node, which appends its inputs to `work`
  }
  pending = nullptr;
}

NodeRef make_node(OpKind op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs, Device device) {
  if (const std::string err = check_node(op, dtype, shape, inputs, attrs); !err.empty())
    detail::internal_error("check_node", __FILE__, __LINE__,
                           std::string(op_name(op)) + ": " + err);
  if (!inputs.empty()) device = inputs[0]->device; // check_node saw that the value operands agree
  const size_t h = structural_hash(op, dtype, shape, inputs, attrs, device);
  Interner& in = interner();
  std::lock_guard lock(in.mu);
  auto [lo, hi] = in.table.equal_range(h);
  for (auto it = lo; it != hi; ++it) {
    const Node* n = it->second;
    if (n->op != op || n->dtype != dtype || n->shape != shape || n->inputs != inputs ||
        !same_attrs(n->attrs, attrs) || n->device != device)
      continue;
    // Null while it is being destroyed. Nothing in this loop may drop a strong reference: the
    // last one would run ~Node, which erases its entry from the table under `it` (the recursive
    // mutex lets it), so a found node is returned at once and weak_from_this() converts nothing.
    if (auto alive = n->weak_from_this().lock()) return alive;
  }
  if (op == OpKind::Input) {
    int64_t next = in.next_input_id.load();
    while (attrs.i0 >= next && !in.next_input_id.compare_exchange_weak(next, attrs.i0 + 1)) {
    }
  }
  auto node = std::make_shared<Node>(Node::Key{}, op, dtype, std::move(shape), std::move(inputs),
                                     std::move(attrs), device, h);
  node->origin = current_source_line();
  in.table.emplace(h, node.get());
  return node;
}

NodeRef make_input(DType dtype, Shape shape, std::shared_ptr<Storage> data, Device device) {
  Attrs a;
  a.i0 = interner().next_input_id.fetch_add(1);
  NodeRef n = make_node(OpKind::Input, dtype, std::move(shape), {}, std::move(a), data ? data->device() : device);
  if (data) n->set_realized(std::move(data));
  return n;
}

size_t live_node_count() {
  Interner& in = interner();
  std::lock_guard lock(in.mu);
  return in.table.size();
}

namespace {

// Iterative post-order DFS (deep graphs must not overflow the stack) through the operands
// `operands` gives, not below nodes for which `stop` is true.
template <class Operands>
std::vector<const Node*> post_order(const std::vector<const Node*>& roots, const std::function<bool(const Node*)>& stop,
                                    Operands operands) {
  std::vector<const Node*> order;
  std::unordered_set<const Node*> seen;
  std::vector<std::pair<const Node*, size_t>> stack;
  for (const Node* r : roots) {
    if (!seen.insert(r).second) continue;
    stack.emplace_back(r, 0);
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      const std::span<const NodeRef> ins = operands(*n);
      if (next < ins.size() && !(stop && stop(n))) {
        const Node* child = ins[next++].get();
        if (seen.insert(child).second) stack.emplace_back(child, 0);
        continue;
      }
      order.push_back(n);
      stack.pop_back();
    }
  }
  return order;
}

std::span<const NodeRef> all_inputs(const Node& n) { return n.inputs; }

} // namespace

std::vector<const Node*> topo_order(const std::vector<const Node*>& roots) { return post_order(roots, nullptr, all_inputs); }

std::vector<const Node*> topo_order(const std::vector<const Node*>& roots, const std::function<bool(const Node*)>& stop) {
  return post_order(roots, stop, all_inputs);
}

std::vector<const Node*> value_order(const std::vector<const Node*>& roots, const std::function<bool(const Node*)>& stop) {
  return post_order(roots, stop, value_inputs);
}

} // namespace kiln::graph

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <mutex>
#include <ostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "autograd/custom.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/text.h"
#include "kiln/autograd.h"
#include "kiln/options.h"
#include "runtime/api.h"
#include "runtime/storage.h"

namespace kiln {

namespace detail {

std::string operand_str(const Tensor& t) { return t.defined() ? t.type_str() : "undefined"; }

std::string list_str(const IntList& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void fail(const std::string& op, const std::string& what, std::initializer_list<const Tensor*> operands,
          const Loc& loc) {
  std::string msg = what;
  if (operands.size()) {
    msg += " (operands: ";
    bool first = true;
    for (const Tensor* t : operands) {
      msg += (first ? "" : ", ") + operand_str(*t);
      first = false;
    }
    msg += ")";
  }
  throw Error(op, msg, loc);
}

void check_shape(const std::string& op, const graph::Shape& shape, std::initializer_list<const Tensor*> operands,
                 const Loc& loc) {
  if (const std::string err = graph::shape_error(shape); !err.empty()) fail(op, err, operands, loc);
}

namespace {
bool follows_others(const Tensor& t) { return t.node()->op == graph::OpKind::Const; }

Device device_of_operands(const std::string& op, const std::vector<const Tensor*>& operands, const Loc& loc) {
  const Tensor* anchor = nullptr;
  for (const Tensor* t : operands) {
    if (!t->defined() || follows_others(*t)) continue;
    if (!anchor) anchor = t;
    else if (t->device() != anchor->device())
      throw Error(op, "expects its operands on one device, got " + operand_str(*anchor) + " on " +
                          anchor->device().str() + " and " + operand_str(*t) + " on " + t->device().str() +
                          " (move one with .to(device))",
                  loc);
  }
  if (anchor) return anchor->device();
  for (const Tensor* t : operands)
    if (t->defined()) return t->device();
  return kCPU;
}
} // namespace

void check_device(const std::string& op, Device device, const Loc& loc) {
  if (device.kind == Device::Kind::CPU && device.index != 0) // would compare unequal to kCPU everywhere
    throw Error(op, "the CPU has no device index (got index " + std::to_string(device.index) + "): use kCPU", loc);
  if (device.kind != Device::Kind::CUDA) return; // nothing to check
  const UserCall call(op, loc); // the GPU runtime's error (no driver, no such device) is op's at the user's line
  runtime::require_device(device);
}

Device common_device(const std::string& op, std::initializer_list<const Tensor*> operands, const Loc& loc) {
  return device_of_operands(op, std::vector<const Tensor*>(operands), loc);
}

Device common_device(const std::string& op, const std::vector<Tensor>& operands, const Loc& loc) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : operands) ptrs.push_back(&t);
  return device_of_operands(op, ptrs, loc);
}

namespace {

/// True when `node` is one of `inputs`' nodes or one of their near operands (breadth first, a
/// bounded walk): an op that folded to its operand or to an operand's operand (a no-op reshape,
/// x.t().t()) made an alias of a value it was given, not a second computation of it.
bool aliases_an_input(const graph::Node* node, const std::vector<const Tensor*>& inputs) {
  constexpr size_t kMostVisited = 64;
  std::vector<const graph::Node*> queue;
  for (const Tensor* t : inputs)
    if (t->defined()) queue.push_back(t->node().get());
  for (size_t i = 0; i < queue.size() && i < kMostVisited; ++i) {
    if (queue[i] == node) return true;
    for (const graph::NodeRef& in : queue[i]->inputs) queue.push_back(in.get());
  }
  return false;
}

/// An op's result tensor; a grad-requiring one counts itself a maker of its node
/// (graph::Node::tensor_makers), unless the node aliases an operand's value.
Tensor wrap_result(graph::NodeRef node, const std::vector<const Tensor*>& inputs) {
  bool needs = false;
  for (const Tensor* t : inputs) needs = needs || (t->defined() && t->requires_grad());
  if (needs && !grad_mode_enabled()) return Tensor(graph::build::detach(node));
  Tensor r(std::move(node), needs);
  r.impl()->is_leaf = !needs;
  const graph::NodeRef& n = r.impl()->node;
  if (needs && (n->tensor_makers.load(std::memory_order_relaxed) == 0 || !aliases_an_input(n.get(), inputs))) {
    n->tensor_makers.fetch_add(1, std::memory_order_relaxed);
    r.impl()->made = n;
  }
  return r;
}

} // namespace

Tensor result(graph::NodeRef node, std::initializer_list<const Tensor*> inputs) {
  return wrap_result(std::move(node), std::vector<const Tensor*>(inputs));
}

Tensor result_of(graph::NodeRef node, const std::vector<Tensor>& inputs) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : inputs) ptrs.push_back(&t);
  return wrap_result(std::move(node), ptrs);
}

namespace {
// Leaves by node. A leaf realized by kiln::realize() gets a new node (become_input); its
// entry under the old node stays while that node lives, so a graph built on the old
// node before the realize still finds the leaf (the two nodes hold the same storage).
struct LeafRegistry {
  struct Entry {
    std::weak_ptr<const graph::Node> node;
    std::weak_ptr<TensorImpl> impl;
  };
  std::mutex mu;
  std::unordered_map<const graph::Node*, Entry> by_node;
};
LeafRegistry& leaves() {
  static auto* r = new LeafRegistry;
  return *r;
}

// The node `n` stands for the leaf `impl`: it is its node, or an earlier node of it with the same value.
bool holds_leaf(const graph::Node* n, const TensorImpl& impl) {
  const graph::NodeRef current = impl.load_node();
  if (current.get() == n) return true;
  const auto value = n->realized();
  return value && value == current->realized();
}
} // namespace

void register_leaf(const std::shared_ptr<TensorImpl>& impl) {
  LeafRegistry& r = leaves();
  std::lock_guard lock(r.mu);
  for (auto it = r.by_node.begin(); it != r.by_node.end();) // drop entries of dead leaves or dead nodes
    it = it->second.impl.expired() || it->second.node.expired() ? r.by_node.erase(it) : std::next(it);
  const graph::NodeRef node = impl->load_node();
  r.by_node[node.get()] = {node, impl};
}

namespace {
// The live grad-requiring leaf registered under `n`, whether `n` still stands for its value or not.
std::shared_ptr<TensorImpl> registered_leaf(const graph::Node* n) {
  LeafRegistry& r = leaves();
  std::lock_guard lock(r.mu);
  auto it = r.by_node.find(n);
  if (it == r.by_node.end() || it->second.node.expired()) return nullptr;
  auto impl = it->second.impl.lock();
  return impl && impl->requires_grad ? impl : nullptr;
}
} // namespace

std::shared_ptr<TensorImpl> leaf_for(const graph::Node* n) {
  auto impl = registered_leaf(n);
  return impl && holds_leaf(n, *impl) ? impl : nullptr;
}

int64_t wrap_dim_or_fail(const std::string& op, int64_t dim, const Tensor& x, const Loc& loc) {
  const auto w = graph::wrap_dim(dim, x.dim());
  if (!w) fail(op, "dim " + std::to_string(dim) + " is out of range for rank " + std::to_string(x.dim()), {&x}, loc);
  return *w;
}

std::vector<Tensor> distinct_tensors(std::vector<Tensor> tensors) {
  std::vector<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  for (Tensor& t : tensors)
    if (!t.defined() || seen.insert(t.impl().get()).second) out.push_back(std::move(t));
  return out;
}

namespace {
thread_local CaptureState* g_capture = nullptr;
} // namespace

CaptureState* active_capture() { return g_capture; }
void set_active_capture(CaptureState* s) { g_capture = s; }

} // namespace detail

namespace {

thread_local bool g_grad_mode = true;

thread_local int g_keep_history = 0; // live detail::KeepHistory scopes on this thread

// A realized leaf drops its history: its node becomes a fresh input holding the
// value, so the graph that computed it can be freed (training loops would
// otherwise chain every step's graph). Not a tensor the caller realizes while a
// detail::KeepHistory is alive (`keepable`): a derivative may follow its graph again.
// `realized` is the node the caller realized; a concurrent assign since then wins. True
// when the node was replaced.
bool become_input(TensorImpl& impl, const graph::NodeRef& realized, bool keepable) {
  if (!impl.is_leaf || (keepable && g_keep_history > 0) || realized->op == graph::OpKind::Input) return false;
  auto storage = realized->realized();
  if (!storage) return false;
  return impl.replace_node(realized.get(), graph::make_input(realized->dtype, realized->shape, std::move(storage)));
}

// The tensor's node now (one consistent value while another thread assigns it).
graph::NodeRef node_snapshot(const Tensor& t) { return t.impl() ? t.impl()->load_node() : t.node(); }

// The value of a realized node in host memory.
std::shared_ptr<graph::Storage> host_value(const graph::Node& n) {
  std::shared_ptr<graph::Storage> s = n.realized();
  return s->device() == kCPU ? s : runtime::copy_to(*s, kCPU);
}

// After a realize: a realized leaf drops its history (a grad-requiring one is registered
// again under its new node); `keepable` as for become_input.
// `realized` is the node of it that was realized.
void drop_history(const std::shared_ptr<TensorImpl>& impl, const graph::NodeRef& realized, bool keepable) {
  if (become_input(*impl, realized, keepable) && impl->requires_grad) detail::register_leaf(impl);
}

// What note_pending() collected on this thread, in order of first note (so that each
// step realizes the same list in the same order).
struct Pending {
  std::vector<std::weak_ptr<TensorImpl>> changed, roots;
  std::unordered_map<const TensorImpl*, std::weak_ptr<TensorImpl>> seen;
  size_t prune_at = 1024; // without step() calls (gradients only), dead entries are dropped
};
thread_local Pending g_pending;

void prune(Pending& p) {
  auto dead = [](const std::weak_ptr<TensorImpl>& w) { return w.expired(); };
  std::erase_if(p.changed, dead);
  std::erase_if(p.roots, dead);
  std::erase_if(p.seen, [&](const auto& entry) { return dead(entry.second); });
  p.prune_at = std::max<size_t>(1024, 2 * p.seen.size());
}

void remember(std::vector<std::weak_ptr<TensorImpl>>& list, const std::shared_ptr<TensorImpl>& impl) {
  if (!impl || detail::active_capture()) return; // a trace's tensors are realized by its replays
  auto [it, fresh] = g_pending.seen.try_emplace(impl.get(), impl);
  if (!fresh && !it->second.expired()) return;
  it->second = impl;
  list.push_back(impl);
  if (g_pending.seen.size() > g_pending.prune_at) prune(g_pending);
}

template <class T> T read_element(const void* data, DType dt, size_t i) {
  switch (dt) {
  case DType::Bool: return static_cast<T>(static_cast<const uint8_t*>(data)[i] != 0);
  case DType::Int32: return static_cast<T>(static_cast<const int32_t*>(data)[i]);
  case DType::Int64: return static_cast<T>(static_cast<const int64_t*>(data)[i]);
  case DType::Float32: return static_cast<T>(static_cast<const float*>(data)[i]);
  case DType::Float64: return static_cast<T>(static_cast<const double*>(data)[i]);
  }
  return T{};
}

/// True when element i of a dt buffer converts to T without overflow: always for a floating T; for
/// an integer T, a value in its range (a floating one finite and in range after truncation).
template <class T> bool fits_element(const void* data, DType dt, size_t i) {
  if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bool>) {
    return true;
  } else {
    switch (dt) {
    case DType::Bool:
    case DType::Int32: return true; // T is int32_t or int64_t
    case DType::Int64: return detail::fits_integer(static_cast<const int64_t*>(data)[i], dtype_of<T>());
    case DType::Float32:
    case DType::Float64: return detail::fits_integer(read_element<double>(data, dt, i), dtype_of<T>());
    }
    return false;
  }
}

/// read_element, or kiln::Error for `op` when the element does not fit T (as libtorch's item<T>).
template <class T> T read_checked(const void* data, DType dt, size_t i, const Tensor& t, const char* op, const Loc& loc) {
  if (!fits_element<T>(data, dt, i))
    detail::fail(op, "element " + std::to_string(i) + " (" + std::to_string(read_element<double>(data, dt, i)) +
                         ") cannot be converted to " + std::string(dtype_name(dtype_of<T>())) + " without overflow",
                 {&t}, loc);
  return read_element<T>(data, dt, i);
}

} // namespace

bool grad_mode_enabled() { return g_grad_mode; }
NoGradGuard::NoGradGuard() : previous_(g_grad_mode) { g_grad_mode = false; }
NoGradGuard::~NoGradGuard() { g_grad_mode = previous_; }

Tensor::Tensor() = default;

Tensor::Tensor(std::shared_ptr<const graph::Node> node, bool requires_grad) : impl_(std::make_shared<TensorImpl>()) {
  impl_->node = std::move(node);
  impl_->requires_grad = requires_grad;
}

// An undefined tensor given to an op: the error names the op the user called and the user's line, as
// the op's SourceScope recorded them (an op that named none is "tensor").
[[noreturn]] static void undefined_tensor() {
  const graph::SourceCall call = graph::current_source_call();
  const std::string msg = "use of an undefined (default-constructed) tensor";
  if (!call.known) throw Error("tensor", msg);
  throw Error(call.op.empty() ? "tensor" : std::string(call.op), "an operand is an undefined (default-constructed) tensor",
              call.where);
}

const std::shared_ptr<const graph::Node>& Tensor::node() const {
  if (!impl_) undefined_tensor();
  if (detail::active_capture()) detail::note_state_read(impl_, false); // state a compiled function reads
  return impl_->node;
}

DType Tensor::dtype() const { return node()->dtype; }
const IntList& Tensor::shape() const { return node()->shape; }
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::numel() const { return node()->numel(); }
Device Tensor::device() const { return node()->device; }
std::string Tensor::type_str() const { return std::string(dtype_name(dtype())) + graph::shape_str(shape()); }

int64_t Tensor::size(int64_t d, Loc loc) const {
  auto w = graph::wrap_dim(d, dim());
  if (!w || dim() == 0) detail::fail("size", "dim " + std::to_string(d) + " out of range", {this}, loc);
  return shape()[*w];
}

const Tensor& Tensor::realize(Loc loc) const {
  kiln::realize({*this}, loc);
  return *this;
}

namespace {
// Realizes the current nodes of `impls` (read once each: another thread may assign them),
// with what note_pending() collected when `with_pending`, in one realize; the leaves drop
// their history (`impls` themselves not while a detail::KeepHistory is alive; the pending
// parameters and gradients always). Returns the nodes realized, `impls`' first.
std::vector<graph::NodeRef> realize_impls(std::vector<std::shared_ptr<TensorImpl>> impls, bool with_pending) {
  const size_t callers = impls.size();
  const Pending taken = with_pending ? std::exchange(g_pending, {}) : Pending{};
  for (const auto& w : taken.changed)
    if (auto impl = w.lock()) {
      impls.push_back(impl);
      if (impl->grad.defined()) impls.push_back(impl->grad.impl());
    }
  for (const auto& w : taken.roots)
    if (auto impl = w.lock()) impls.push_back(impl);
  std::vector<graph::NodeRef> nodes;
  for (const auto& impl : impls) nodes.push_back(impl->load_node());
  runtime::realize(nodes);
  for (size_t i = 0; i < impls.size(); ++i) drop_history(impls[i], nodes[i], /*keepable=*/i < callers);
  return nodes;
}

// True when `n` is a value already computed: a realize has nothing to do for it.
bool computed(const graph::NodeRef& n) { return n->op == graph::OpKind::Input && n->realized(); }

// Realizes the tensors' current nodes and returns them (see kiln::realize); memory that cannot
// be had is an OutOfMemoryError of `op` at `loc`; other errors raised in kiln's sources below (the
// executor's, the GPU runtime's) are op's at `loc` too.
std::vector<graph::NodeRef> realize_snapshots(const std::vector<Tensor>& tensors, const char* op, const Loc& loc) {
  std::vector<std::shared_ptr<TensorImpl>> impls;
  impls.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    if (!t.defined()) throw Error(op, "reads an undefined (default-constructed) tensor", loc);
    impls.push_back(t.impl());
  }
  const bool capturing = detail::active_capture() != nullptr; // a traced function is realized when it is replayed
  if (capturing || g_pending.roots.empty()) { // nothing pending joins: values already there need no realize
    std::vector<graph::NodeRef> nodes;
    nodes.reserve(impls.size());
    for (const auto& impl : impls) nodes.push_back(impl->load_node());
    if (capturing || std::all_of(nodes.begin(), nodes.end(), computed)) return nodes;
  }
  // After a backward() (a loop that assign()s by hand, or a value read before step()),
  // what is pending joins this realize; before one, it waits (BatchNorm's statistics
  // recorded by this step's forward pass wait for its step()).
  const detail::UserCall call(op, loc, detail::UserCall::Claim::KilnLines);
  return detail::memory_guard(op, loc, [&] { return realize_impls(std::move(impls), !g_pending.roots.empty()); });
}
} // namespace

void realize(const std::vector<Tensor>& tensors, Loc loc) { realize_snapshots(tensors, "realize", loc); }

bool detail::nothing_to_realize(const std::shared_ptr<TensorImpl>& impl) {
  return impl && !active_capture() && g_pending.roots.empty() && computed(impl->load_node());
}

detail::KeepHistory::KeepHistory() { ++g_keep_history; }
detail::KeepHistory::~KeepHistory() { --g_keep_history; }

void detail::note_pending(const std::shared_ptr<TensorImpl>& impl) { remember(g_pending.changed, impl); }
void detail::note_pending_root(const std::shared_ptr<TensorImpl>& impl) { remember(g_pending.roots, impl); }

void detail::flush_pending() {
  if (!active_capture()) detail::memory_guard("realize", Loc::current(), [] { realize_impls({}, true); });
}

std::string graph_text(const std::vector<Tensor>& tensors) {
  std::vector<graph::NodeRef> nodes;
  for (const Tensor& t : tensors) nodes.push_back(t.node());
  return graph::print_graph(nodes);
}

std::string graph_dot(const std::vector<Tensor>& tensors) {
  std::vector<const graph::Node*> todo;
  for (const Tensor& t : tensors)
    if (!t.node()->realized() && std::find(todo.begin(), todo.end(), t.node().get()) == todo.end())
      todo.push_back(t.node().get());
  const Device device = todo.empty() ? kCPU : todo[0]->device;
  return runtime::schedule_dot(todo, device, options().fusion);
}

namespace {
// (Also refuses to read an undefined tensor, naming op and the user's line.)
void forbid_reads_while_tracing(const char* op, const Tensor& t, const Loc& loc) {
  if (!t.defined()) throw Error(op, "reads an undefined (default-constructed) tensor", loc);
  if (detail::active_capture())
    detail::fail(op, "values cannot be read inside a function being traced by compile()", {&t}, loc);
}
} // namespace

std::shared_ptr<graph::Storage> detail::host_storage(const Tensor& t, const char* op, const Loc& loc) {
  const graph::NodeRef n = realize_snapshots({t}, op, loc)[0];
  return memory_guard(op, loc, [&] { return host_value(*n); });
}

template <class T> T Tensor::item(Loc loc) const {
  forbid_reads_while_tracing("item", *this, loc);
  if (node_snapshot(*this)->numel() != 1) detail::fail("item", "needs exactly one element", {this}, loc);
  const graph::NodeRef n = realize_snapshots({*this}, "item", loc)[0];
  return read_checked<T>(detail::memory_guard("item", loc, [&] { return host_value(*n); })->data(), n->dtype, 0, *this,
                        "item", loc);
}

template <class T> std::vector<T> Tensor::to_vector(Loc loc) const {
  forbid_reads_while_tracing("to_vector", *this, loc);
  const graph::NodeRef node = realize_snapshots({*this}, "to_vector", loc)[0];
  const size_t n = static_cast<size_t>(node->numel());
  std::vector<T> out = detail::host_vector<T>(n, "to_vector", [&] { return "the values of " + Tensor(node).type_str(); }, loc);
  const auto host = detail::memory_guard("to_vector", loc, [&] { return host_value(*node); });
  const void* data = host->data();
  for (size_t i = 0; i < n; ++i) out[i] = read_checked<T>(data, node->dtype, i, *this, "to_vector", loc);
  return out;
}

#define KILN_INSTANTIATE_READ(T)                                                                                 \
  template T Tensor::item<T>(Loc) const;                                                                         \
  template std::vector<T> Tensor::to_vector<T>(Loc) const;
KILN_INSTANTIATE_READ(float)
KILN_INSTANTIATE_READ(double)
KILN_INSTANTIATE_READ(int32_t)
KILN_INSTANTIATE_READ(int64_t)
KILN_INSTANTIATE_READ(bool)
#undef KILN_INSTANTIATE_READ

namespace {

// A tensor of more elements than this prints only the first and last kEdge of each longer dim.
constexpr int64_t kSummarizeAbove = 1000, kEdge = 3;

// What a summarized print shows of `t`: the first and last kEdge entries along each dim longer
// than 2 kEdge, computed alone, so that printing ones({1 << 20, 1 << 20}) computes 36 values,
// not 4 TiB.
Tensor printed_corners(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor c = t.detach();
  for (int64_t d = 0; d < c.dim(); ++d)
    if (const int64_t n = c.shape()[static_cast<size_t>(d)]; n > 2 * kEdge)
      c = concat({c.narrow(d, 0, kEdge), c.narrow(d, n - kEdge, kEdge)}, d);
  return c;
}

// Prints nested brackets like PyTorch, eliding the middle of dims longer than 2 kEdge when
// `summarize`. `v` holds either all of `shape` or (`corners`) only printed_corners' entries.
void print_values(std::ostream& os, const void* v, const IntList& shape, bool corners, size_t dim, size_t offset,
                  bool summarize, DType dt, int indent) {
  if (dim == shape.size()) {
    if (is_floating(dt)) os << std::setprecision(6) << read_element<double>(v, dt, offset);
    else if (dt == DType::Bool) os << (read_element<bool>(v, dt, offset) ? "true" : "false");
    else os << read_element<int64_t>(v, dt, offset);
    return;
  }
  auto held = [&](size_t d) { return corners ? std::min(shape[d], 2 * kEdge) : shape[d]; }; // entries of dim d in v
  const int64_t n = shape[dim];
  size_t stride = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) stride *= static_cast<size_t>(held(d));
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdge && i == kEdge) {
      os << "...";
      i = n - kEdge - 1;
    } else {
      const int64_t at = held(dim) == n ? i : i < kEdge ? i : i - (n - 2 * kEdge); // i's entry in v
      print_values(os, v, shape, corners, dim + 1, offset + static_cast<size_t>(at) * stride, summarize, dt, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

} // namespace

std::string Tensor::str(Loc loc) const {
  std::ostringstream os;
  os << "tensor(";
  forbid_reads_while_tracing("str", *this, loc);
  const graph::NodeRef whole = node_snapshot(*this);
  const bool summarize = whole->numel() > kSummarizeAbove;
  // A value still to compute: only the printed corners are (a computed one is read in place).
  const bool corners = summarize && !whole->realized();
  const Tensor shown = corners ? printed_corners(*this) : *this;
  const graph::NodeRef node = realize_snapshots({shown}, "str", loc)[0];
  const auto host = detail::memory_guard("str", loc, [&] { return host_value(*node); });
  if (whole->numel() == 0 && whole->shape != graph::Shape{0}) { // as PyTorch: the values say nothing of the shape
    os << "[], size=(";
    for (size_t d = 0; d < whole->shape.size(); ++d) os << (d ? ", " : "") << whole->shape[d];
    os << ")";
  } else {
    print_values(os, host->data(), whole->shape, corners, 0, 0, summarize, whole->dtype, 7);
  }
  os << ", dtype=" << dtype_name(whole->dtype) << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

Tensor& Tensor::requires_grad_(bool on, Loc loc) {
  if (on && !is_floating(dtype())) detail::fail("requires_grad_", "only floating tensors can require gradients", {this}, loc);
  if (on && !impl_->is_leaf) detail::fail("requires_grad_", "only leaf tensors can be marked; use detach() first", {this}, loc);
  impl_->requires_grad = on;
  if (!on) return *this;
  // A leaf needs an identity of its own: hash-consing would merge two zeros({3}) parameters.
  // Inside a compile() trace nothing is computed: the value stays lazy behind a fresh node.
  if (node()->op != graph::OpKind::Input && detail::active_capture()) {
    impl_->node = autograd::fresh_leaf(node());
  } else if (node()->op != graph::OpKind::Input) {
    kiln::realize({Tensor(node())});
    impl_->node = graph::make_input(node()->dtype, node()->shape, node()->realized());
  }
  detail::register_leaf(impl_);
  return *this;
}

namespace {
/// A copy of t's value on `device`, as a new input leaf (no gradient).
Tensor copied_to(const Tensor& t, Device device) {
  return Tensor(graph::make_input(t.dtype(), t.shape(), runtime::copy_to(*t.realize().node()->realized(), device)));
}
} // namespace

void detail::move_in_place(const Tensor& t, Device device, const Loc& loc) {
  if (t.device() == device) return;
  if (!t.impl()->is_leaf) fail("to", "only leaf tensors can be moved in place", {&t}, loc);
  TensorImpl& impl = *t.impl();
  impl.node = t.detach().to(device, loc).node();
  if (impl.grad.defined()) impl.grad = impl.grad.to(device, loc);
  if (impl.requires_grad) register_leaf(t.impl());
}

void detail::cast_in_place(const Tensor& t, DType dtype, const Loc& loc) {
  if (t.dtype() == dtype) return;
  if (!t.impl()->is_leaf) fail("to", "only leaf tensors can be converted in place", {&t}, loc);
  TensorImpl& impl = *t.impl();
  Tensor value = cast(t.detach(), dtype, loc);
  Tensor grad = impl.grad.defined() ? cast(impl.grad.detach(), dtype, loc) : Tensor();
  realize(grad.defined() ? std::vector<Tensor>{value, grad} : std::vector<Tensor>{value}, loc);
  const graph::NodeRef& v = value.node();
  impl.store_node(graph::make_input(v->dtype, v->shape, v->realized())); // a fresh input: no history
  if (grad.defined()) impl.grad = grad;
  if (impl.requires_grad) register_leaf(t.impl());
}

Tensor Tensor::to(Device device, Loc loc) const {
  const graph::SourceScope at(loc, "to"); // nodes made here record the caller's line
  if (this->device() == device) return *this;
  detail::check_device("to", device, loc);
  if (node()->inputs.empty() && node()->op != graph::OpKind::Input) // a constant, arange or random leaf: no data
    return detail::result(graph::build::leaf_on(node(), device), {});
  forbid_reads_while_tracing("to", *this, loc);
  realize(); // errors of computing the value (a failed index check) are not copying errors
  try {
    if (!requires_grad()) return copied_to(*this, device);
    const Device from = this->device();
    CustomFunction move{"to(" + device.str() + ")",
                        [device](const std::vector<Tensor>& in) { return std::vector<Tensor>{copied_to(in[0], device)}; },
                        [from](const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
                          return std::vector<Tensor>{g[0].to(from)};
                        }};
    return move({*this}, loc)[0];
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError("to", e.reason() + " (a copy of " + type_str() + " to " + device.str() + ")", e.bytes(), loc);
  } catch (const Error& e) {
    if (e.op() == "to") throw;
    detail::fail("to", "cannot copy to " + device.str() + ": " + e.what(), {this}, loc);
  }
}

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
bool Tensor::is_leaf() const { return !impl_ || impl_->is_leaf; }

namespace {
/// `g` passed through `hook` (none: unchanged); an undefined result keeps g, another shape is an error.
Tensor run_hook(const std::function<Tensor(const Tensor&)>* hook, const Tensor& g, const Loc& loc) {
  if (!hook) return g;
  Tensor r = (*hook)(g);
  if (!r.defined()) return g;
  if (r.shape() != g.shape())
    detail::fail("register_hook",
                 "the hook returned a gradient of shape " + detail::list_str(r.shape()) + " for one of shape " +
                     detail::list_str(g.shape()),
                 {&g, &r}, loc);
  return r;
}

} // namespace

Tensor detail::after_leaf_hooks(const TensorImpl& impl, Tensor g, const Loc& loc) {
  for (const auto& [on, hook] : impl.hooks)
    if (*on) g = run_hook(&hook, g, loc);
  return g;
}

namespace {
/// The non-leaves that retain_grad() was called on, while they live (backward() finds them by their node).
struct RetainedGrads {
  std::mutex mu;
  std::vector<std::weak_ptr<TensorImpl>> impls;

  static RetainedGrads& get() {
    static RetainedGrads r;
    return r;
  }
  void add(const std::shared_ptr<TensorImpl>& impl) {
    std::lock_guard lock(mu);
    std::erase_if(impls, [](const std::weak_ptr<TensorImpl>& w) { return w.expired(); });
    impls.push_back(impl);
  }
  /// The live retaining tensors whose value is one of `nodes`.
  std::vector<std::shared_ptr<TensorImpl>> among(const std::unordered_set<const graph::Node*>& nodes) {
    std::lock_guard lock(mu);
    std::vector<std::shared_ptr<TensorImpl>> found;
    for (const std::weak_ptr<TensorImpl>& w : impls)
      if (auto impl = w.lock(); impl && impl->retains_grad && nodes.count(impl->load_node().get()))
        found.push_back(impl);
    return found;
  }
};
} // namespace

HookHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> hook, Loc loc) {
  if (!requires_grad())
    detail::fail("register_hook", "cannot register a hook on a tensor that doesn't require gradient", {this}, loc);
  auto on = std::make_shared<bool>(true);
  if (impl_->is_leaf) {
    detail::note_state_change(impl_);
    impl_->hooks.emplace_back(on, std::move(hook));
    return HookHandle(on);
  }
  // A non-leaf: its value becomes an identity op whose backward runs the hook (later uses go through it).
  const CustomFunction through{"hook", [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; },
                               [on, loc, hook = std::move(hook)](const std::vector<Tensor>&, const std::vector<Tensor>&,
                                                                 const std::vector<Tensor>& g) {
                                 return std::vector<Tensor>{run_hook(*on ? &hook : nullptr, g[0], loc)};
                               }};
  store_value(through({*this}, loc)[0], true, "register_hook", loc);
  return HookHandle(on);
}

void Tensor::retain_grad(Loc loc) {
  if (!requires_grad())
    detail::fail("retain_grad", "can't retain_grad on Tensor that has requires_grad=False", {this}, loc);
  if (impl_->is_leaf || impl_->retains_grad) return;
  impl_->retains_grad = true;
  RetainedGrads::get().add(impl_);
}
Tensor Tensor::grad() const {
  if (!impl_) return Tensor();
  if (detail::active_capture()) detail::note_state_read(impl_, true); // a gradient a compiled function reads
  return impl_->grad;
}
void Tensor::zero_grad() {
  detail::note_state_change(impl_);
  impl_->grad = Tensor();
}
Tensor Tensor::detach() const { return Tensor(graph::build::detach(node())); }

void Tensor::assign(const Tensor& new_value, Loc loc) {
  const graph::SourceScope at(loc, "assign"); // nodes made here record the caller's line
  store_value(new_value, false, "assign", loc);
}

void Tensor::store_value(const Tensor& new_value, bool keep_graph, const char* op, const Loc& loc) {
  const graph::NodeRef current = node_snapshot(*this); // other threads may be reading this tensor
  const graph::NodeRef incoming = node_snapshot(new_value);
  if (incoming->shape != current->shape || incoming->dtype != current->dtype)
    detail::fail(op, "the new value must have the same shape and dtype", {this, &new_value}, loc);
  const Tensor value = new_value.to(current->device, loc); // a checkpoint's CPU value into a GPU tensor
  detail::note_state_change(impl_);
  if (keep_graph && value.requires_grad()) { // an in-place op recorded: this tensor is now its result
    impl_->requires_grad = true;
    impl_->is_leaf = false;
    if (auto old = impl_->made.lock()) old->tensor_makers.fetch_sub(1, std::memory_order_relaxed);
    impl_->made.reset();
    if (!detail::leaf_for(value.node().get())) { // as detail::result: count this tensor a maker of its node
      value.node()->tensor_makers.fetch_add(1, std::memory_order_relaxed);
      impl_->made = value.node();
    }
    impl_->store_node(value.node());
    detail::note_pending(impl_);
    return;
  }
  const bool detached = value.node()->op == graph::OpKind::Detach; // already blocks gradients
  graph::NodeRef stored = detached || !requires_grad() ? value.node() : graph::build::detach(value.node());
  // Leaves are found by node: two parameters assigned one value (hash-consed to one node) would
  // share their gradient. As requires_grad_() does, give this one a node of its own then.
  if (requires_grad())
    if (auto other = detail::leaf_for(stored.get()); other && other != impl_) stored = autograd::fresh_leaf(stored);
  impl_->store_node(stored);
  if (requires_grad()) detail::register_leaf(impl_);
  detail::note_pending(impl_);
}

namespace {
/// The nodes `root` depends on, a custom call's inputs included (they are its outputs'
/// operands, though a custom output's value may be computed without them, as in to(device)).
std::vector<const graph::Node*> reachable(const graph::Node* root) {
  std::vector<const graph::Node*> order, todo{root};
  std::unordered_set<const graph::Node*> seen{root};
  while (!todo.empty()) {
    const graph::Node* n = todo.back();
    todo.pop_back();
    order.push_back(n);
    for (const graph::NodeRef& in : n->inputs)
      if (seen.insert(in.get()).second) todo.push_back(in.get());
  }
  return order;
}
} // namespace

namespace {
// Throws kiln::Error for backward() when the graph of `root` reaches, along a path gradients follow
// (not below a leaf's current node, nor below a detach), a node of a leaf that was assigned a new
// value since: its gradient would be for a value the leaf no longer holds, with nowhere to go
// (PyTorch: "modified by an inplace operation"). Dropping it without a word loses an update.
void check_no_replaced_leaf(const graph::Node* root, const Tensor& t, const Loc& loc) {
  std::vector<const graph::Node*> todo{root};
  std::unordered_set<const graph::Node*> seen{root};
  while (!todo.empty()) {
    const graph::Node* n = todo.back();
    todo.pop_back();
    if (n->op == graph::OpKind::Detach) continue;
    if (auto impl = detail::registered_leaf(n)) {
      if (detail::holds_leaf(n, *impl)) continue; // a leaf: gradients end here
      const Tensor leaf(impl->load_node(), false);
      detail::fail("backward", "a grad-requiring leaf (" + leaf.type_str() +
                                   ") that this graph uses was assigned a new value since (assign(), an optimizer's "
                                   "step()); compute the loss again from its new value, then call backward()",
                   {&t}, loc);
    }
    for (const graph::NodeRef& in : n->inputs)
      if (seen.insert(in.get()).second) todo.push_back(in.get());
  }
}
} // namespace

void detail::check_graph_retained(const std::string& op, const Tensor& t, const Loc& loc) {
  if (t.defined() && t.impl()->graph_released)
    fail(op, "this tensor's graph was already differentiated by backward(); pass retain_graph = true to the "
             "first backward() to differentiate it again", {&t}, loc);
}

namespace {
/// Adds to backward()'s gradient targets the non-leaves that retain their grad (retain_grad()) on the graph of `root`.
void add_retained_grads(const graph::Node* root, std::vector<std::shared_ptr<TensorImpl>>& impls,
                        std::vector<Tensor>& targets) {
  const std::vector<const graph::Node*> nodes = reachable(root);
  for (const auto& impl : RetainedGrads::get().among({nodes.begin(), nodes.end()})) {
    targets.push_back(Tensor(impl->load_node(), false));
    targets.back().impl()->is_leaf = false;
    targets.back().impl()->requires_grad = true;
    impls.push_back(impl);
  }
}
} // namespace

void Tensor::backward(bool retain_graph, Loc loc) const { backward(Tensor(), retain_graph, loc); }

void Tensor::backward(const Tensor& grad_output, bool retain_graph, Loc loc) const {
  detail::UserCall call("backward", loc); // grad()'s errors are backward's
  const graph::SourceScope at(loc, "backward"); // nodes made here record the caller's line
  if (!requires_grad()) detail::fail("backward", "the tensor does not require grad", {this}, loc);
  detail::check_graph_retained("backward", *this, loc);
  std::vector<Tensor> leaf_tensors;
  std::vector<std::shared_ptr<TensorImpl>> impls;
  bool replaced = false; // a leaf assigned since: check_no_replaced_leaf walks the gradients' paths
  for (const graph::Node* n : reachable(node().get())) {
    auto impl = detail::registered_leaf(n);
    if (!impl) continue;
    if (!detail::holds_leaf(n, *impl)) {
      replaced = true;
      continue;
    }
    impls.push_back(impl);
    leaf_tensors.push_back(Tensor(n->shared_from_this(), true)); // the node this graph uses
  }
  add_retained_grads(node().get(), impls, leaf_tensors);
  if (replaced) check_no_replaced_leaf(node().get(), *this, loc);
  std::vector<Tensor> go;
  if (grad_output.defined()) go.push_back(grad_output);
  if (impls.empty()) {
    impl_->graph_released = !retain_graph;
    return;
  }
  std::vector<Tensor> grads = kiln::grad({*this}, leaf_tensors, go, /*allow_unused=*/true, /*create_graph=*/true, loc);
  impl_->graph_released = !retain_graph;
  for (size_t i = 0; i < impls.size(); ++i) {
    detail::note_state_change(impls[i]);
    Tensor g = (impls[i]->is_leaf ? detail::after_leaf_hooks(*impls[i], grads[i], loc) : grads[i]).detach();
    impls[i]->grad = impls[i]->grad.defined() ? Tensor(graph::build::add(impls[i]->grad.node(), g.node())) : g;
    detail::note_pending(impls[i]);
  }
  detail::note_pending_root(impl_);
}

} // namespace kiln

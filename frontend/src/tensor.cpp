#include <cstring>
#include <iomanip>
#include <mutex>
#include <ostream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd/custom.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/text.h"
#include "kiln/autograd.h"
#include "runtime/executor.h"
#include "runtime/storage.h"

namespace kiln {

namespace detail {

std::string operand_str(const Tensor& t) { return t.defined() ? t.type_str() : "undefined"; }

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
  try {
    runtime::require_device(device);
  } catch (const Error& e) {
    throw Error(op, e.what(), loc);
  }
}

Device common_device(const std::string& op, std::initializer_list<const Tensor*> operands, const Loc& loc) {
  return device_of_operands(op, std::vector<const Tensor*>(operands), loc);
}

Device common_device(const std::string& op, const std::vector<Tensor>& operands, const Loc& loc) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : operands) ptrs.push_back(&t);
  return device_of_operands(op, ptrs, loc);
}

Tensor result(graph::NodeRef node, std::initializer_list<const Tensor*> inputs) {
  bool needs = false;
  for (const Tensor* t : inputs) needs = needs || (t->defined() && t->requires_grad());
  if (needs && !grad_mode_enabled()) return Tensor(graph::build::detach(node));
  Tensor r(std::move(node), needs);
  r.impl()->is_leaf = !needs;
  return r;
}

Tensor result_of(graph::NodeRef node, const std::vector<Tensor>& inputs) {
  bool needs = false;
  for (const Tensor& t : inputs) needs = needs || t.requires_grad();
  if (needs && !grad_mode_enabled()) return Tensor(graph::build::detach(node));
  Tensor r(std::move(node), needs);
  r.impl()->is_leaf = !needs;
  return r;
}

namespace {
struct LeafRegistry {
  std::mutex mu;
  std::unordered_map<const graph::Node*, std::weak_ptr<TensorImpl>> by_node;
};
LeafRegistry& leaves() {
  static auto* r = new LeafRegistry;
  return *r;
}
} // namespace

void register_leaf(const std::shared_ptr<TensorImpl>& impl) {
  LeafRegistry& r = leaves();
  std::lock_guard lock(r.mu);
  for (auto it = r.by_node.begin(); it != r.by_node.end();) // drop entries of dead or moved leaves
    it = it->second.expired() ? r.by_node.erase(it) : std::next(it);
  r.by_node[impl->node.get()] = impl;
}

std::shared_ptr<TensorImpl> leaf_for(const graph::Node* n) {
  LeafRegistry& r = leaves();
  std::lock_guard lock(r.mu);
  auto it = r.by_node.find(n);
  if (it == r.by_node.end()) return nullptr;
  auto impl = it->second.lock();
  return impl && impl->node.get() == n && impl->requires_grad ? impl : nullptr;
}

namespace {
thread_local CaptureState* g_capture = nullptr;
} // namespace

CaptureState* active_capture() { return g_capture; }
void set_active_capture(CaptureState* s) { g_capture = s; }

} // namespace detail

namespace {

thread_local bool g_grad_mode = true;

// A realized leaf drops its history: its node becomes a fresh input holding the
// value, so the graph that computed it can be freed (training loops would
// otherwise chain every step's graph).
void become_input(TensorImpl& impl) {
  if (!impl.is_leaf || impl.node->op == graph::OpKind::Input) return;
  auto storage = impl.node->realized();
  if (!storage) return;
  impl.node = graph::make_input(impl.node->dtype, impl.node->shape, std::move(storage));
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

} // namespace

bool grad_mode_enabled() { return g_grad_mode; }
NoGradGuard::NoGradGuard() : previous_(g_grad_mode) { g_grad_mode = false; }
NoGradGuard::~NoGradGuard() { g_grad_mode = previous_; }

Tensor::Tensor() = default;

Tensor::Tensor(std::shared_ptr<const graph::Node> node, bool requires_grad) : impl_(std::make_shared<TensorImpl>()) {
  impl_->node = std::move(node);
  impl_->requires_grad = requires_grad;
}

const std::shared_ptr<const graph::Node>& Tensor::node() const {
  if (!impl_) throw Error("tensor", "use of an undefined tensor");
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

const Tensor& Tensor::realize() const {
  kiln::realize({*this});
  return *this;
}

void realize(const std::vector<Tensor>& tensors) {
  if (detail::active_capture()) return; // a traced function is realized when it is replayed
  std::vector<graph::NodeRef> nodes;
  for (const Tensor& t : tensors) nodes.push_back(t.node());
  runtime::realize(nodes);
  for (const Tensor& t : tensors) {
    const graph::Node* before = t.node().get();
    become_input(*t.impl());
    if (t.requires_grad() && t.impl()->node.get() != before) detail::register_leaf(t.impl());
  }
}

std::string graph_text(const std::vector<Tensor>& tensors) {
  std::vector<graph::NodeRef> nodes;
  for (const Tensor& t : tensors) nodes.push_back(t.node());
  return graph::print_graph(nodes);
}

namespace {
void forbid_reads_while_tracing(const char* op, const Tensor& t, const Loc& loc) {
  if (detail::active_capture())
    detail::fail(op, "values cannot be read inside a function being traced by compile()", {&t}, loc);
}
} // namespace

std::shared_ptr<graph::Storage> detail::host_storage(const Tensor& t) {
  t.realize();
  std::shared_ptr<graph::Storage> s = t.node()->realized();
  return s->device() == kCPU ? s : runtime::copy_to(*s, kCPU);
}

template <class T> T Tensor::item(Loc loc) const {
  forbid_reads_while_tracing("item", *this, loc);
  if (numel() != 1) detail::fail("item", "needs exactly one element", {this}, loc);
  return read_element<T>(detail::host_storage(*this)->data(), dtype(), 0);
}

template <class T> std::vector<T> Tensor::to_vector() const {
  forbid_reads_while_tracing("to_vector", *this, Loc::current());
  const size_t n = static_cast<size_t>(numel());
  std::vector<T> out(n);
  const auto host = detail::host_storage(*this);
  const void* data = host->data();
  for (size_t i = 0; i < n; ++i) out[i] = read_element<T>(data, dtype(), i);
  return out;
}

#define KILN_INSTANTIATE_READ(T)                                                                                 \
  template T Tensor::item<T>(Loc) const;                                                                         \
  template std::vector<T> Tensor::to_vector<T>() const;
KILN_INSTANTIATE_READ(float)
KILN_INSTANTIATE_READ(double)
KILN_INSTANTIATE_READ(int32_t)
KILN_INSTANTIATE_READ(int64_t)
KILN_INSTANTIATE_READ(bool)
#undef KILN_INSTANTIATE_READ

namespace {

// Prints nested brackets like PyTorch, eliding the middle of dims past 1000 elements.
void print_values(std::ostream& os, const std::vector<double>& v, const IntList& shape, size_t dim, size_t offset,
                  bool summarize, DType dt, int indent) {
  if (dim == shape.size()) {
    if (is_floating(dt)) os << std::setprecision(6) << v[offset];
    else if (dt == DType::Bool) os << (v[offset] != 0 ? "true" : "false");
    else os << static_cast<int64_t>(v[offset]);
    return;
  }
  const int64_t n = shape[dim];
  const size_t stride = static_cast<size_t>(graph::numel(IntList(shape.begin() + dim + 1, shape.end())));
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 6 && i == 3) {
      os << "...";
      i = n - 4;
    } else {
      print_values(os, v, shape, dim + 1, offset + i * stride, summarize, dt, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}

} // namespace

std::string Tensor::str() const {
  std::ostringstream os;
  os << "tensor(";
  const std::vector<double> v = to_vector<double>(); // realizes first: that may replace the node
  print_values(os, v, shape(), 0, 0, numel() > 1000, dtype(), 7);
  os << ", dtype=" << dtype_name(dtype()) << ")";
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

Tensor Tensor::to(Device device, Loc loc) const {
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
  } catch (const Error& e) {
    if (e.op() == "to") throw;
    detail::fail("to", "cannot copy to " + device.str() + ": " + e.what(), {this}, loc);
  }
}

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
Tensor Tensor::grad() const { return impl_ ? impl_->grad : Tensor(); }
void Tensor::zero_grad() {
  detail::note_state_change(impl_);
  impl_->grad = Tensor();
}
Tensor Tensor::detach() const { return Tensor(graph::build::detach(node())); }

void Tensor::assign(const Tensor& new_value, Loc loc) {
  if (new_value.shape() != shape() || new_value.dtype() != dtype())
    detail::fail("assign", "the new value must have the same shape and dtype", {this, &new_value}, loc);
  const Tensor value = new_value.to(device(), loc); // a checkpoint's CPU value into a GPU tensor
  detail::note_state_change(impl_);
  // A plain detach (i0 == 0) already blocks gradients; a tagged one is a custom-gradient output.
  const bool detached = value.node()->op == graph::OpKind::Detach && value.node()->attrs.i0 == 0;
  impl_->node = detached || !requires_grad() ? value.node() : graph::build::detach(value.node());
  if (requires_grad()) detail::register_leaf(impl_);
}

namespace {
/// The nodes `root` depends on, through the graph and through custom calls' inputs
/// (a custom output's value may be computed without them, as in to(device)).
std::vector<const graph::Node*> reachable_with_custom_inputs(const graph::Node* root) {
  std::vector<const graph::Node*> order, todo{root};
  std::unordered_set<const graph::Node*> seen{root};
  while (!todo.empty()) {
    const graph::Node* n = todo.back();
    todo.pop_back();
    order.push_back(n);
    auto visit = [&](const graph::NodeRef& in) {
      if (seen.insert(in.get()).second) todo.push_back(in.get());
    };
    for (const graph::NodeRef& in : n->inputs) visit(in);
    if (const autograd::CustomInfo info = autograd::find_custom(*n); info.call)
      for (const graph::NodeRef& in : info.call->inputs) visit(in);
  }
  return order;
}
} // namespace

void detail::check_graph_retained(const std::string& op, const Tensor& t, const Loc& loc) {
  if (t.defined() && t.impl()->graph_released)
    fail(op, "this tensor's graph was already differentiated by backward(); pass retain_graph = true to the "
             "first backward() to differentiate it again", {&t}, loc);
}

void Tensor::backward(bool retain_graph, Loc loc) const { backward(Tensor(), retain_graph, loc); }

void Tensor::backward(const Tensor& grad_output, bool retain_graph, Loc loc) const {
  detail::UserCall call("backward", loc); // grad()'s errors are backward's
  if (!requires_grad()) detail::fail("backward", "the tensor does not require grad", {this}, loc);
  detail::check_graph_retained("backward", *this, loc);
  std::vector<Tensor> leaf_tensors;
  std::vector<std::shared_ptr<TensorImpl>> impls;
  for (const graph::Node* n : reachable_with_custom_inputs(node().get()))
    if (auto impl = detail::leaf_for(n)) {
      impls.push_back(impl);
      leaf_tensors.push_back(Tensor(impl->node, true));
    }
  std::vector<Tensor> go;
  if (grad_output.defined()) go.push_back(grad_output);
  if (impls.empty()) {
    impl_->graph_released = !retain_graph;
    return;
  }
  std::vector<Tensor> grads = kiln::grad({*this}, leaf_tensors, go, /*allow_unused=*/true, loc);
  impl_->graph_released = !retain_graph;
  for (size_t i = 0; i < impls.size(); ++i) {
    detail::note_state_change(impls[i]);
    Tensor g = grads[i].detach();
    impls[i]->grad = impls[i]->grad.defined() ? Tensor(graph::build::add(impls[i]->grad.node(), g.node())) : g;
  }
}

} // namespace kiln

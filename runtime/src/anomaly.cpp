#include "runtime/anomaly.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "kiln/anomaly.h"
#include "kiln/options.h"
#include "runtime/cuda_runtime.h"
#include "runtime/storage.h"

namespace kiln {

namespace {
thread_local int8_t t_mode = -1;       // this thread's scope: -1 none (follow options()), 0 off, 1 on
thread_local bool t_searching = false; // re-running a kernel's ops to find the culprit: no checks
} // namespace

detect_anomaly::detect_anomaly(bool on) : saved_(t_mode) { t_mode = on ? 1 : 0; }
detect_anomaly::~detect_anomaly() { t_mode = saved_; }

bool anomaly_mode_enabled() { return t_mode < 0 ? options().detect_anomaly : t_mode > 0; }

namespace runtime {

bool anomaly_checks_on() { return !t_searching && anomaly_mode_enabled(); }

namespace {

using graph::Node;
using Bytes = std::vector<std::byte>;

// The first element whose exponent bits are all ones (NaN or inf), or -1. A branch-free
// pass first, which the compiler vectorizes; the element is searched only after a hit.
template <class Bits> int64_t first_nonfinite_bits(const std::byte* p, int64_t n, Bits exponent) {
  auto bits = [&](int64_t i) {
    Bits b;
    std::memcpy(&b, p + static_cast<size_t>(i) * sizeof(Bits), sizeof(Bits));
    return b;
  };
  Bits any = 0;
  for (int64_t i = 0; i < n; ++i) any |= static_cast<Bits>((bits(i) & exponent) == exponent);
  if (!any) return -1;
  for (int64_t i = 0; i < n; ++i)
    if ((bits(i) & exponent) == exponent) return i;
  return -1;
}

// The first non-finite element of `n` elements of type `t` at host address `p` (-1: none).
int64_t first_nonfinite(const void* p, DType t, int64_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  if (t == DType::Float32) return first_nonfinite_bits<uint32_t>(b, n, 0x7f800000u);
  if (t == DType::Float64) return first_nonfinite_bits<uint64_t>(b, n, 0x7ff0000000000000ull);
  return -1; // integers and bools are always finite
}

double value_at(const Bytes& v, DType t, int64_t i) {
  const std::byte* p = v.data() + static_cast<size_t>(i) * dtype_size(t);
  switch (t) {
  case DType::Bool: return std::to_integer<uint8_t>(*p) != 0 ? 1.0 : 0.0;
  case DType::Int32: { int32_t x; std::memcpy(&x, p, 4); return x; }
  case DType::Int64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
  case DType::Float32: { float x; std::memcpy(&x, p, 4); return x; }
  case DType::Float64: { double x; std::memcpy(&x, p, 8); return x; }
  }
  return 0;
}

bool finite_at(const Bytes& v, DType t, int64_t i) { return !is_floating(t) || std::isfinite(value_at(v, t, i)); }

std::string value_name(double x) { return std::isnan(x) ? "NaN" : x > 0 ? "inf" : "-inf"; }

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::string join(const std::vector<std::string>& parts) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : ", ") + p;
  return s;
}

std::string index_str(const std::vector<int64_t>& index) {
  std::string s = "[";
  for (size_t i = 0; i < index.size(); ++i) s += (i ? ", " : "") + std::to_string(index[i]);
  return s + "]";
}

// " at element [i, j]" ("" for a scalar).
std::string at_element(const std::vector<int64_t>& index) {
  return index.empty() ? "" : " at element " + index_str(index);
}

std::vector<int64_t> unravel(int64_t flat, const graph::Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t size = std::max<int64_t>(shape[d], 1);
    index[d] = flat % size;
    flat /= size;
  }
  return index;
}

std::string type_str(const Node* n) { return std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape); }

// Host bytes of a buffer on `device`.
Bytes read_buffer(const void* address, size_t bytes, Device device) {
  Bytes host(bytes);
  if (bytes == 0) return host;
  if (device == kCPU) std::memcpy(host.data(), address, bytes);
  else Gpu::get(device.index).download(host.data(), address, bytes);
  return host;
}

std::shared_ptr<graph::Storage> to_storage(const Bytes& host, Device device) {
  auto s = allocate_host(host.size());
  if (!host.empty()) std::memcpy(s->data(), host.data(), host.size());
  return device == kCPU ? s : copy_to(*s, device);
}

// The value of every node of one kernel: the buffers it read, and the ops it computed
// re-run one kernel per op (KILN_FUSION=0 gives the fused kernel's bits).
struct KernelValues {
  std::vector<const Node*> order;            // inputs before users
  std::unordered_set<const Node*> loads;     // read from buffers
  std::unordered_map<const Node*, Bytes> host;
};

class SearchGuard {
public:
  SearchGuard() : saved_(t_searching) { t_searching = true; }
  ~SearchGuard() { t_searching = saved_; }

private:
  bool saved_;
};

// A copy of the kernel's graph whose loads are inputs holding their buffers' values (read
// into v.host); returns the copies of the nodes it computes, in v.order's order.
std::vector<std::pair<const Node*, graph::NodeRef>> copy_kernel(KernelValues& v, Device device,
                                                                const BufferAddress& address,
                                                                const SeedOverrides& seeds) {
  std::unordered_map<const Node*, graph::NodeRef> copy;
  std::vector<std::pair<const Node*, graph::NodeRef>> computed;
  for (const Node* n : v.order) {
    if (v.loads.count(n)) {
      v.host[n] = read_buffer(address(n), n->bytes(), device);
      copy[n] = graph::make_input(n->dtype, n->shape, to_storage(v.host[n], device));
      continue;
    }
    std::vector<graph::NodeRef> inputs; // a custom output's copy keeps only its value (graph::value_inputs)
    for (const graph::NodeRef& in : graph::value_inputs(*n)) inputs.push_back(copy.at(in.get()));
    graph::Attrs attrs = n->attrs;
    if (n->op == graph::OpKind::Rand || n->op == graph::OpKind::Randn)
      if (auto it = seeds.find(attrs.i0); it != seeds.end()) attrs.i0 = it->second; // this execution's seed
    copy[n] = graph::make_node(n->op, n->dtype, n->shape, std::move(inputs), std::move(attrs), n->device);
    computed.emplace_back(n, copy[n]);
  }
  return computed;
}

KernelValues evaluate(const codegen::KernelLaunch& l, Device device, const BufferAddress& address,
                      const SeedOverrides& seeds) {
  KernelValues v;
  for (const Node* in : l.inputs)
    if (in) v.loads.insert(in);
  v.order = graph::value_order(l.outputs, [&](const Node* n) { return v.loads.count(n) > 0; });
  const auto computed = copy_kernel(v, device, address, seeds);
  std::vector<graph::NodeRef> outputs;
  for (const auto& c : computed) outputs.push_back(c.second);
  const SearchGuard searching;
  const Plan plan = make_plan(outputs, /*fusion=*/false);
  const auto values = execute(plan);
  for (size_t i = 0; i < computed.size(); ++i)
    v.host[computed[i].first] = read_buffer(values[i]->data(), computed[i].first->bytes(), values[i]->device());
  return v;
}

// The first element at which `n` made a non-finite value itself: where its inputs were
// finite (the same element for elementwise ops; all of them for the others). -1: none.
int64_t made_nonfinite(const Node* n, const KernelValues& v) {
  const Bytes& out = v.host.at(n);
  const int64_t first = first_nonfinite(out.data(), n->dtype, n->numel());
  if (first < 0 || v.loads.count(n)) return -1;
  if (!graph::is_elementwise(n->op)) {
    for (const graph::NodeRef& in : graph::value_inputs(*n))
      if (first_nonfinite(v.host.at(in.get()).data(), in->dtype, in->numel()) >= 0) return -1;
    return first;
  }
  for (int64_t i = first; i < n->numel(); ++i) {
    if (finite_at(out, n->dtype, i)) continue;
    bool inputs_finite = true;
    for (const graph::NodeRef& in : n->inputs)
      inputs_finite = inputs_finite && (in->numel() != n->numel() || finite_at(v.host.at(in.get()), in->dtype, i));
    if (inputs_finite) return i;
  }
  return -1;
}

// The nodes whose non-finite values reach `root`: root, and the inputs holding a
// non-finite value of each node already reached (a NaN that a where() drops is not followed).
std::unordered_set<const Node*> reaching(const Node* root, const KernelValues& v) {
  std::unordered_set<const Node*> reach{root};
  for (auto it = v.order.rbegin(); it != v.order.rend(); ++it) {
    const Node* n = *it;
    if (!reach.count(n) || v.loads.count(n)) continue;
    for (const graph::NodeRef& in : graph::value_inputs(*n))
      if (first_nonfinite(v.host.at(in.get()).data(), in->dtype, in->numel()) >= 0) reach.insert(in.get());
  }
  return reach;
}

std::string where_str(const graph::SourceLine& s) {
  const std::string line = graph::source_line_str(s);
  return line.empty() ? "at an unknown line (a graph built without kiln's ops)" : "at " + line;
}

// Where `n` came from: the user's line, and the forward op when autograd made it.
void set_origin(Anomaly& a, const Node* n) {
  a.line = graph::source_line_str(n->origin);
  const std::string of(graph::op_name(n->origin.of));
  a.gradient_of = n->origin.derived == graph::SourceLine::Derived::Gradient ? of : "";
  a.tangent_of = n->origin.derived == graph::SourceLine::Derived::Tangent ? of : "";
}

// The non-finite `element` of `n`, whose values are `values`.
Anomaly describe(const Node* n, int64_t element, const Bytes& values, const std::string& kernel) {
  Anomaly a;
  a.op = std::string(graph::op_name(n->op));
  a.value = value_name(value_at(values, n->dtype, element));
  a.index = unravel(element, n->shape);
  a.type = type_str(n);
  set_origin(a, n);
  a.kernel = kernel;
  return a;
}

std::string footer(const codegen::KernelLaunch& l) {
  const auto ops = std::count_if(l.nodes.begin(), l.nodes.end(), [](const Node* n) {
    const graph::OpCategory c = graph::op_category(n->op);
    return c != graph::OpCategory::Leaf && c != graph::OpCategory::Movement;
  });
  return "\n  (anomaly mode, KILN_DETECT_ANOMALY=1 or kiln::detect_anomaly: kernel " + l.kernel.name + " computing " +
         std::to_string(ops) + (ops == 1 ? " op" : " ops") + "; leave the mode off where NaN or inf values are intended)";
}

[[noreturn]] void report_culprit(const Node* n, int64_t element, const KernelValues& v,
                                 const codegen::KernelLaunch& l) {
  Anomaly a = describe(n, element, v.host.at(n), l.kernel.name);
  std::vector<std::string> inputs; // their values at the element, for elementwise ops
  if (graph::is_elementwise(n->op))
    for (const graph::NodeRef& in : n->inputs)
      if (in->numel() == n->numel()) inputs.push_back(number(value_at(v.host.at(in.get()), in->dtype, element)));
  std::string msg = "anomaly: " + a.op + " produced " + a.value + at_element(a.index) +
                    " of its " + a.type + " result";
  if (inputs.size() == 1) msg += " from finite input " + inputs[0];
  else if (!inputs.empty()) msg += " from finite inputs (" + join(inputs) + ")";
  else if (!n->inputs.empty()) msg += " from finite inputs";
  if (!a.gradient_of.empty()) msg += ", in the gradient of " + a.gradient_of + " (backward)";
  if (!a.tangent_of.empty()) msg += ", in the tangent of " + a.tangent_of + " (forward-mode jvp)";
  msg += "\n  " + where_str(n->origin);
  if (!a.gradient_of.empty() || !a.tangent_of.empty()) msg += " (the line of that forward op)";
  throw AnomalyError(std::move(a), msg + footer(l));
}

// The non-finite value came with the data the kernel read: name the first op on `path` reading it.
[[noreturn]] void report_input(const Node* load, const std::unordered_set<const Node*>& path, const KernelValues& v,
                               const codegen::KernelLaunch& l, const Node* out) {
  const Bytes& values = v.host.at(load);
  const int64_t element = first_nonfinite(values.data(), load->dtype, load->numel());
  // The first op on `path` reading it, through views of it (movement ops, detach).
  std::unordered_set<const Node*> views{load};
  const Node* reader = out; // the output the value reached, unless an op on the way reads it
  for (const Node* n : v.order) {
    if (!path.count(n) || v.loads.count(n)) continue;
    const auto ins = graph::value_inputs(*n);
    const bool reads = std::any_of(ins.begin(), ins.end(), [&](const graph::NodeRef& in) { return views.count(in.get()) > 0; });
    if (!reads) continue;
    const graph::OpCategory c = graph::op_category(n->op);
    if (c == graph::OpCategory::Movement || c == graph::OpCategory::Custom || n->op == graph::OpKind::Detach) {
      views.insert(n);
      continue;
    }
    reader = n;
    break;
  }
  Anomaly a = describe(load, element, values, l.kernel.name);
  a.op = "input";
  a.from_input = true;
  set_origin(a, reader);
  const std::string msg = "anomaly: an input " + a.type + " already held " + a.value +
                          at_element(a.index) + " (data given to kiln, or a value computed while anomaly mode " +
                          "was off); the first op reading it is " + std::string(graph::op_name(reader->op)) +
                          "\n  " + where_str(reader->origin);
  throw AnomalyError(std::move(a), msg + footer(l));
}

// Re-running the kernel's ops did not reproduce the value (it should, bitwise): name the kernel.
[[noreturn]] void report_kernel(const codegen::KernelLaunch& l, const Node* out, int64_t element, const Bytes& values) {
  Anomaly a = describe(out, element, values, l.kernel.name);
  const std::string msg = "anomaly: kernel " + l.kernel.name + " produced " + a.value + at_element(a.index) +
                          " of its " + a.type + " result (ops from " +
                          graph::source_lines_str(l.lines) + "); its ops run one by one gave finite values";
  throw AnomalyError(std::move(a), msg + footer(l));
}

} // namespace

void check_for_anomaly(const codegen::KernelLaunch& l, Device device, const BufferAddress& address,
                       const SeedOverrides& seeds, const std::function<void()>& before_report) {
  // The kernel's outputs holding a non-finite value; the first of them, its element and values.
  std::vector<const Node*> bad;
  const Node* first = nullptr;
  int64_t element = -1;
  Bytes host;
  for (const Node* out : l.outputs) {
    if (!is_floating(out->dtype) || out->numel() == 0) continue;
    Bytes copy;
    const void* p = address(out);
    if (device != kCPU) {
      copy = read_buffer(p, out->bytes(), device);
      p = copy.data();
    }
    const int64_t e = first_nonfinite(p, out->dtype, out->numel());
    if (e < 0) continue;
    bad.push_back(out);
    if (first) continue;
    first = out;
    element = e;
    host = copy.empty() ? read_buffer(p, out->bytes(), device) : std::move(copy);
  }
  if (!first) return;
  before_report();
  if (options().debug >= 1)
    std::fprintf(stderr, "[kiln] anomaly: %s wrote a non-finite value; running its ops one kernel per op\n",
                 l.kernel.name.c_str());
  const KernelValues v = evaluate(l, device, address, seeds);
  // The first op, in order, of those whose non-finite values reach an output: what the
  // unfused mode, which checks every op's output, finds first (unless a where() drops it).
  std::unordered_set<const Node*> reach;
  for (const Node* out : bad) reach.merge(reaching(out, v));
  for (const Node* n : v.order) {
    if (!reach.count(n) || v.loads.count(n)) continue;
    if (first_nonfinite(v.host.at(n).data(), n->dtype, n->numel()) < 0) continue;
    if (const int64_t e = made_nonfinite(n, v); e >= 0) report_culprit(n, e, v, l);
    const std::unordered_set<const Node*> from = reaching(n, v); // it passed on a value it read
    for (const Node* m : v.order)
      if (from.count(m) && v.loads.count(m)) report_input(m, reach, v, l, first);
  }
  report_kernel(l, first, element, host);
}

} // namespace runtime
} // namespace kiln

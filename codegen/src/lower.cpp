#include "codegen/lower.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "codegen/form.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::codegen {

namespace {

using graph::Node;
using graph::OpCategory;
using graph::OpKind;
using Index = std::vector<ExprRef>;

std::string describe(const Node* n) {
  std::string s = std::string(graph::op_name(n->op)) + " " + std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape);
  return n->origin ? s + " (" + graph::source_line_str(n->origin) + ")" : s;
}

// ---------------------------------------------------------------- partitioning

// Thrown while building a kernel when a reduction chosen for row fusion turns out
// to be read at indices the row kernel cannot provide; the schedule is redone with
// that reduction in a buffer of its own.
struct NeedsBuffer {
  const Node* node;
};

// Which nodes get a buffer of their own, and why. Decided from the outputs back:
// each node learns which kernel consumes it (its owner) before it is decided, so
// a value used only inside one kernel is computed there, and a reduction whose
// result is only broadcast back over its input's rows joins the row kernel that
// uses it (softmax, layernorm: reductions then a map over the same row).
class Partition {
public:
  Partition(const std::vector<const Node*>& outputs, const ScheduleOptions& opt,
            const std::unordered_set<const Node*>& forced)
      : opt_(opt), forced_(forced) {
    for (const Node* o : outputs) outputs_.insert(o);
    // a realized value's history is not needed
    order_ = graph::topo_order(outputs, [this](const Node* n) { return is_source(n); });
    for (const Node* n : order_)
      if (!is_source(n))
        for (const auto& in : n->inputs) users_[in.get()].push_back(n);
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) decide(*it);
  }
  /// Nodes in dependency order.
  const std::vector<const Node*>& order() const { return order_; }
  /// True when `n` is read from a buffer rather than recomputed inside its consumer.
  bool has_buffer(const Node* n) const { return is_source(n) || computed_.count(n); }
  /// True when a kernel must compute `n`.
  bool computed(const Node* n) const { return computed_.count(n) > 0; }
  /// True for a reduction computed inside the row kernel of its owner.
  bool absorbed(const Node* n) const { return absorbed_.count(n) > 0; }
  /// The row dims (reduced and mapped over) of a kernel root, empty when it has none.
  std::vector<int64_t> row_dims(const Node* root) const {
    auto it = row_dims_.find(root);
    return it == row_dims_.end() ? std::vector<int64_t>{} : it->second;
  }
  /// The reasons behind each boundary.
  std::vector<std::string> decisions;
  /// Each kernel root and why it has a buffer of its own.
  std::unordered_map<const Node*, std::string> boundaries;

private:
  const ScheduleOptions& opt_;
  const std::unordered_set<const Node*>& forced_;
  std::unordered_set<const Node*> outputs_;
  std::vector<const Node*> order_;
  std::unordered_map<const Node*, std::vector<const Node*>> users_;
  std::unordered_map<const Node*, const Node*> owner_; // kernel root that computes the node
  std::unordered_set<const Node*> computed_, absorbed_;
  std::unordered_map<const Node*, std::vector<int64_t>> row_dims_;
  std::unordered_set<const Node*> matmul_of_; // kernel roots that contain a matmul
  std::unordered_set<const Node*> needs_buffer_; // operands of matmuls (see buffer_matmul_operands)
  std::unordered_map<const Node*, int> depth_;   // ops between a node and its kernel's root (0: the root)
  static constexpr int kMaxFusedDepth = 256;
  // Buffers a kernel reads at most: a bounded kernel signature (CUDA's 4 KB of
  // arguments) and compile time. A concat joins a kernel only while the kernel reads at
  // most graph::build::kMaxConcatPieces buffers: each piece read from a buffer is a
  // guarded load per element, whose code costs LLVM far more than a plain load.
  static constexpr size_t kMaxKernelBuffers = 64;
  // Per kernel root, the nodes its kernel reads that are not (yet) fused into it: its
  // buffers once every node is decided (leaves computed in place are not counted).
  std::unordered_map<const Node*, std::unordered_set<const Node*>> reads_;
  // The kernels a node inlined into several kernels (a view read by several) is part of.
  std::unordered_map<const Node*, std::vector<const Node*>> kernels_of_;

  // True when n is read from its realized buffer. Decided once per node: another thread
  // may realize a shared node meanwhile, and the partition must not see it change
  // (a user realized between two looks left its operand without users).
  bool is_source(const Node* n) const {
    auto [it, first] = source_.try_emplace(n, false);
    if (first) it->second = n->realized() || n->op == OpKind::Input;
    return it->second;
  }
  mutable std::unordered_map<const Node*, bool> source_;
  static const Node* several() { return reinterpret_cast<const Node*>(uintptr_t{1}); }

  // The one kernel all users of n belong to, or several().
  const Node* users_owner(const Node* n) const {
    const Node* owner = nullptr;
    for (const Node* u : users_.at(n)) {
      auto it = owner_.find(u);
      const Node* o = it == owner_.end() ? several() : it->second;
      if (owner && owner != o) return several();
      owner = o;
    }
    return owner ? owner : several();
  }

  void materialize(const Node* n, const std::string& why) {
    computed_.insert(n);
    owner_[n] = n;
    boundaries[n] = why;
    decisions.push_back("kernel for " + describe(n) + ": " + why);
  }

  void decide(const Node* n) {
    if (is_source(n)) return; // inputs are bound when the plan runs
    // Its users are decided, so this does not depend on n's placement (an output has no users).
    const int depth = outputs_.count(n) ? 0 : fused_depth(n);
    decide_placement(n, depth);
    depth_[n] = computed_.count(n) ? 0 : depth;
    note_reads(n);
  }

  // An input that a kernel reading n's value would read from a buffer unless it fuses
  // it: anything but a leaf computed in place (a constant, arange, random numbers).
  bool reads_buffer(const Node* in) const { return graph::op_category(in->op) != OpCategory::Leaf || is_source(in); }

  // The kernels that would compute n inline: its users' kernel, or every kernel of its
  // users when they are several (views are recomputed in each kernel that reads them).
  std::vector<const Node*> inlined_into(const Node* n) const {
    const Node* owner = users_owner(n);
    if (owner != several()) return {owner};
    std::unordered_set<const Node*> seen;
    std::vector<const Node*> out;
    for (const Node* u : users_.at(n)) {
      auto it = owner_.find(u);
      if (it != owner_.end() && it->second != several()) {
        if (seen.insert(it->second).second) out.push_back(it->second);
        continue;
      }
      if (auto k = kernels_of_.find(u); k != kernels_of_.end())
        for (const Node* kernel : k->second)
          if (seen.insert(kernel).second) out.push_back(kernel);
    }
    return out;
  }

  // True when computing n inside the kernels that read it keeps each of them within
  // kMaxKernelBuffers buffers: n stops being one of their buffers, its inputs become ones.
  bool within_buffer_budget(const Node* n) const {
    if (!std::any_of(n->inputs.begin(), n->inputs.end(), [&](const auto& in) { return reads_buffer(in.get()); }))
      return true;
    for (const Node* kernel : inlined_into(n)) {
      auto it = reads_.find(kernel);
      size_t count = it == reads_.end() ? 0 : it->second.size() - it->second.count(n);
      std::unordered_set<const Node*> added;
      for (const auto& in : n->inputs)
        if (reads_buffer(in.get()) && (it == reads_.end() || !it->second.count(in.get())) && added.insert(in.get()).second)
          ++count;
      if (count > (n->op == OpKind::Concat ? graph::build::kMaxConcatPieces : kMaxKernelBuffers)) return false;
    }
    return true;
  }

  // Records what n's placement adds to the buffers each kernel reads (see reads_).
  void note_reads(const Node* n) {
    std::vector<const Node*> kernels{n};
    if (!computed_.count(n)) {
      if (!std::any_of(n->inputs.begin(), n->inputs.end(), [&](const auto& in) { return reads_buffer(in.get()); }))
        return; // nothing to charge (a leaf, or a view of one)
      kernels = inlined_into(n);
      if (owner_.at(n) == several()) kernels_of_[n] = kernels;
    }
    for (const Node* kernel : kernels) {
      auto& reads = reads_[kernel];
      if (kernel != n) reads.erase(n);
      for (const auto& in : n->inputs)
        if (reads_buffer(in.get())) reads.insert(in.get());
    }
  }

  // How many expression levels a node adds above its inputs: a concat selects among its
  // pieces with a chain of wheres.
  static int span(const Node* n) { return n->op == OpKind::Concat ? std::max<int>(1, static_cast<int>(n->inputs.size()) - 1) : 1; }

  // How deep inside its kernel's expression n would sit if fused into the kernel of
  // its users: 1 + the deepest of its users there.
  int fused_depth(const Node* n) const {
    const Node* owner = users_owner(n);
    int d = 0;
    for (const Node* u : users_.at(n))
      if (auto it = owner_.find(u); it != owner_.end() && it->second == owner) d = std::max(d, depth_.at(u) + span(u) - 1);
    return d + 1;
  }

  // depth: fused_depth(n).
  void decide_placement(const Node* n, int depth) {
    if (graph::op_category(n->op) == OpCategory::Contraction) buffer_matmul_operands(n);
    if (outputs_.count(n)) return materialize(n, "requested output");
    // The code generators walk a kernel's expressions recursively: a long chain of
    // ops (an unrolled loop) is cut into kernels of bounded depth.
    if (graph::op_category(n->op) != OpCategory::Leaf && users_owner(n) != several() && depth > kMaxFusedDepth)
      return materialize(n, "not fusing: the kernel would nest more than " + std::to_string(kMaxFusedDepth) +
                                " ops deep");
    // A wide graph (a long concat, a sum of many leaves) is cut into kernels that read a
    // bounded number of buffers.
    if (!within_buffer_budget(n))
      return materialize(n, "not fusing: the kernel would read more than " +
                                std::to_string(n->op == OpKind::Concat ? graph::build::kMaxConcatPieces : kMaxKernelBuffers) +
                                " buffers");
    if (needs_buffer_.count(n))
      return materialize(n, "a matmul operand: computed once rather than once per output row or column");
    switch (graph::op_category(n->op)) {
    case OpCategory::Reduce: return decide_reduce(n);
    case OpCategory::Contraction: return decide_matmul(n);
    case OpCategory::Leaf:
    case OpCategory::Movement: owner_[n] = users_owner(n); return; // index arithmetic inside consumers
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Ternary: return decide_elementwise(n);
    }
  }

  void decide_elementwise(const Node* n) {
    if (n->op == OpKind::Detach) { // an identity
      owner_[n] = users_owner(n);
      return;
    }
    if (!opt_.fusion) return materialize(n, "unfused mode (KILN_FUSION=0)");
    const Node* owner = users_owner(n);
    if (owner == several()) return materialize(n, "not fusing: its users are in more than one kernel");
    owner_[n] = owner;
    decisions.push_back("fusing " + describe(n) + " into the kernel for " + describe(owner));
  }

  void decide_reduce(const Node* r) {
    if (!opt_.fusion) return materialize(r, "unfused mode (KILN_FUSION=0)");
    const std::string why = why_not_absorbed(r);
    if (!why.empty()) return materialize(r, "reductions end a kernel unless fused into a row kernel; not fusing: " + why);
    const Node* owner = users_owner(r);
    absorbed_.insert(r);
    owner_[r] = owner;
    row_dims_[owner] = reduced_row_dims(r);
    decisions.push_back("fusing " + describe(r) + " into the row kernel for " + describe(owner));
  }

  // A matmul takes its elementwise users into its kernel as an epilogue (bias,
  // activation, residual) when they all belong to one kernel over the same shape.
  // A matmul reads each operand element once per output row or column, so its
  // operands must be cheap to index: views (reshape, permute, expand, slice) of a
  // buffer. The first node below such a view chain that is anything else (pad,
  // concat, arithmetic) is computed into a buffer of its own.
  // An operand that concatenates views of a pad (im2col's window taps) also gets the
  // pad in a buffer: each piece is then a plain load rather than a guarded one.
  void buffer_matmul_operands(const Node* m) {
    for (const auto& in : m->inputs) {
      const Node* n = below_views(in.get());
      if (is_source(n) || graph::op_category(n->op) == OpCategory::Leaf) continue;
      needs_buffer_.insert(n);
      if (n->op != OpKind::Concat) continue;
      for (const auto& piece : n->inputs)
        if (const Node* p = below_views(piece.get()); p->op == OpKind::Pad && !is_source(p)) needs_buffer_.insert(p);
    }
  }

  static const Node* below_views(const Node* n) {
    while (n->op == OpKind::Reshape || n->op == OpKind::Permute || n->op == OpKind::Expand || n->op == OpKind::Slice)
      n = n->inputs[0].get();
    return n;
  }

  void decide_matmul(const Node* m) {
    if (!opt_.fusion) return materialize(m, "unfused mode (KILN_FUSION=0)");
    const std::string why = why_no_epilogue(m);
    if (!why.empty()) return materialize(m, "matmul kernel; no epilogue fused: " + why);
    const Node* owner = users_owner(m);
    absorbed_.insert(m);
    owner_[m] = owner;
    matmul_of_.insert(owner);
    decisions.push_back("fusing " + describe(owner) + " into " + describe(m) + " as its epilogue");
  }

  std::string why_no_epilogue(const Node* m) const {
    if (forced_.count(m)) return "it is read at shifted indices";
    const Node* owner = users_owner(m);
    if (owner == several()) return "its users are in more than one kernel";
    if (!graph::is_elementwise(owner->op) || owner->shape != m->shape) return "its user is not elementwise over its shape";
    if (row_dims_.count(owner) || matmul_of_.count(owner)) return "its user's kernel already has a reduction";
    for (const Node* u : users_.at(m))
      if (!graph::is_elementwise(u->op)) return "it is used through a movement op";
    return "";
  }

  // The reduced dims that have extent > 1 in the reduction's input.
  static std::vector<int64_t> reduced_row_dims(const Node* r) {
    std::vector<int64_t> d;
    for (int64_t k : r->attrs.ints)
      if (r->inputs[0]->shape[k] != 1) d.push_back(k);
    return d;
  }

  // True when every use of n goes back to the full `shape` through an Expand, with
  // only elementwise ops of n's own shape in between.
  bool broadcast_back(const Node* n, const graph::Shape& shape) const {
    for (const Node* u : users_.at(n)) {
      if (u->op == OpKind::Expand && u->shape == shape) continue;
      if (!graph::is_elementwise(u->op) || u->shape != n->shape || computed_.count(u) || !broadcast_back(u, shape))
        return false;
    }
    return true;
  }

  std::string why_not_absorbed(const Node* r) const {
    if (r->op != OpKind::Sum && r->op != OpKind::Max && r->op != OpKind::Min) return "arg-reductions are not row-fused";
    if (forced_.count(r)) return "it is read at indices a row kernel cannot provide";
    const Node* owner = users_owner(r);
    if (owner == several()) return "its users are in more than one kernel";
    const graph::Shape& x = r->inputs[0]->shape;
    const bool owner_is_reduce = graph::op_category(owner->op) == OpCategory::Reduce;
    if (graph::op_category(owner->op) == OpCategory::Contraction) return "its user is a matmul";
    if ((owner_is_reduce ? owner->inputs[0]->shape : owner->shape) != x) return "its user iterates over another shape";
    if (!broadcast_back(r, x)) return "its result is not only broadcast back over its rows";
    const std::vector<int64_t> dims = reduced_row_dims(r);
    if (dims.empty()) return "it reduces nothing";
    if (matmul_of_.count(owner)) return "its user's kernel already has a matmul";
    if (auto it = row_dims_.find(owner); it != row_dims_.end() && it->second != dims)
      return "the row kernel already reduces other dims";
    if (owner_is_reduce && reduced_row_dims(owner) != dims) return "its user reduces other dims";
    return "";
  }
};

// ---------------------------------------------------------------- kernel building

class KernelBuilder {
public:
  KernelBuilder(const Partition& part, const Node* root, const Target& target)
      : part_(part), root_(root), target_(target) {}

  KernelLaunch build() {
    const bool row_map = graph::op_category(root_->op) != OpCategory::Reduce && !part_.row_dims(root_).empty();
    Index idx = make_domain(root_->shape, row_map ? part_.row_dims(root_) : std::vector<int64_t>{});
    root_idx_ = idx;
    note_computed(root_);
    ExprRef value;
    switch (graph::op_category(root_->op)) {
    case OpCategory::Reduce: value = lower_reduce(root_, idx); break;
    case OpCategory::Contraction: value = lower_matmul(root_, idx); break;
    case OpCategory::Leaf:
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Ternary:
    case OpCategory::Movement: value = compute(root_, idx, nullptr); break;
    }
    const int out = static_cast<int>(launch_.inputs.size());
    kernel_.buffers.push_back({root_->dtype, true});
    kernel_.stores.push_back({out, contiguous_offset(root_->shape, idx), value});
    kernel_.num_params = static_cast<int>(launch_.params.size());
    const FormPlan form = plan_form(kernel_, launch_.params, target_);
    set_form(kernel_, form);
    launch_.gemm_tasks = form.gemm_tasks;
    finalize(kernel_);
    launch_.kernel = std::move(kernel_);
    launch_.output = root_;
    launch_.domain_size = root_->numel() / std::max<int64_t>(1, map_size_);
    if (map_size_ > 1) launch_.work_per_point = map_size_ * static_cast<int64_t>(1 + launch_.kernel.reductions.size());
    return std::move(launch_);
  }

private:
  const Partition& part_;
  const Node* root_;
  const Target& target_; // what plan_form() plans the kernel for
  Kernel kernel_;
  KernelLaunch launch_;
  std::unordered_map<const Node*, int> buffer_of_;
  std::map<std::vector<const void*>, ExprRef> memo_;
  Index root_idx_;      // the root's index: loop vars, map vars, 0 for size-1 dims
  std::unordered_map<const Node*, ExprRef> absorbed_; // row-fused reductions already built
  int64_t map_size_ = 1; // points of the map loop per domain point
  std::unordered_set<const Node*> computed_here_; // launch_.nodes, for lookups
  int error_buffer_ = -1; // the buffer of failed checks, -1 until a check needs it
  std::unordered_map<const Node*, ExprRef> scalar_of_;      // Const node -> its scalar parameter
  std::unordered_map<const Expr*, ExprRef> baked_;          // scalar parameter -> the constant it stands for

  // A size or stride: 0 and 1 are structural (they change the loop shape), other
  // values are parameters so that one kernel serves every size.
  ExprRef P(int64_t v) {
    if (v == 0 || v == 1) return index_const(v);
    launch_.params.push_back(v);
    return param(static_cast<int>(launch_.params.size()) - 1);
  }

  // Domain loop vars for the dims of `shape` with extent != 1, map vars for the row
  // dims, 0 for size-1 dims.
  Index make_domain(const graph::Shape& shape, const std::vector<int64_t>& row_dims) {
    Index idx;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t e = shape[d];
      if (e == 1) {
        idx.push_back(index_const(0));
      } else if (std::find(row_dims.begin(), row_dims.end(), static_cast<int64_t>(d)) != row_dims.end()) {
        idx.push_back(map_var(static_cast<int>(kernel_.map.size())));
        kernel_.map.push_back(P(e));
        map_size_ *= e;
      } else {
        idx.push_back(loop_var(static_cast<int>(kernel_.domain.size())));
        kernel_.domain.push_back(P(e));
      }
    }
    return idx;
  }

  ExprRef contiguous_offset(const graph::Shape& shape, const Index& idx) {
    const graph::Strides st = graph::contiguous_strides(shape);
    ExprRef off = index_const(0);
    for (size_t d = 0; d < shape.size(); ++d)
      if (shape[d] != 1) off = iadd(off, imul(idx[d], P(st[d])));
    return off;
  }

  int buffer_for(const Node* n) {
    if (auto it = buffer_of_.find(n); it != buffer_of_.end()) return it->second;
    const int b = static_cast<int>(launch_.inputs.size());
    launch_.inputs.push_back(n);
    kernel_.buffers.push_back({n->dtype, false});
    buffer_of_[n] = b;
    return b;
  }

  // The kernel's error buffer (bound to a null input node), added on first use.
  int error_buffer() {
    if (error_buffer_ >= 0) return error_buffer_;
    error_buffer_ = static_cast<int>(launch_.inputs.size());
    launch_.inputs.push_back(nullptr);
    kernel_.buffers.push_back({DType::Int64, false, true});
    return error_buffer_;
  }

  // A check's site: always a parameter, so that one kernel serves every call site.
  ExprRef site_param(int64_t site) {
    launch_.params.push_back(site);
    return param(static_cast<int>(launch_.params.size()) - 1);
  }

  ExprRef load_node(const Node* n, const Index& idx, const ExprRef& guard) {
    return load(buffer_for(n), n->dtype, contiguous_offset(n->shape, idx), guard);
  }

  // The value of node n at index idx (one i64 expr per dim of n). `guard` is the
  // condition under which the value is used (pad/concat), or null for always.
  ExprRef compute(const Node* n, const Index& idx, const ExprRef& guard) {
    std::vector<const void*> key{n, guard.get()};
    for (const ExprRef& e : idx) key.push_back(e.get());
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    if (n == root_ || !part_.has_buffer(n)) note_computed(n);
    ExprRef v = n != root_ && part_.has_buffer(n) ? load_node(n, idx, guard)
                : n != root_ && part_.absorbed(n)   ? absorbed_value(n, idx)
                                                    : compute_inline(n, idx, guard);
    memo_[key] = v;
    return v;
  }

  // Records that this kernel computes n (for the user's lines and the DOT picture).
  void note_computed(const Node* n) {
    if (!computed_here_.insert(n).second) return;
    graph::add_source_line(launch_.lines, n->origin);
    launch_.nodes.push_back(n);
  }

  ExprRef compute_inline(const Node* n, const Index& idx, const ExprRef& guard) {
    switch (graph::op_category(n->op)) {
    case OpCategory::Leaf: return lower_leaf(n, idx);
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Ternary: return lower_elementwise(n, idx, guard);
    case OpCategory::Movement: return lower_movement(n, idx, guard);
    case OpCategory::Reduce:
    case OpCategory::Contraction: break;
    }
    KILN_ASSERT(false, "reductions and matmuls always have buffers: " + describe(n));
    return nullptr;
  }

  ExprRef lower_elementwise(const Node* n, const Index& idx, const ExprRef& guard) {
    std::vector<ExprRef> args;
    for (const auto& in : n->inputs) args.push_back(compute(in.get(), idx, guard));
    if (n->op == OpKind::Detach) return args[0];
    if (n->op == OpKind::Cast) return cast(args[0], n->dtype);
    if (n->op == OpKind::CheckIndex) return check(args[0], P(n->attrs.i0), site_param(n->attrs.i1), error_buffer());
    // What LLVM specialises on stays baked: pow's constant operands (x^2 is x*x) and a constant
    // divisor (x / 1024 is x * 2^-10; a mean divides by its count).
    if (n->op == OpKind::Pow)
      for (ExprRef& a : args) a = baked(a);
    if (n->op == OpKind::Div) args[1] = baked(args[1]);
    return op(n->op, n->dtype, std::move(args));
  }

  // e with scalar parameters (and casts of them) replaced by the constants they stand for.
  ExprRef baked(const ExprRef& e) const {
    if (auto it = baked_.find(e.get()); it != baked_.end()) return it->second;
    if (e->kind == ExprKind::Op && e->op == OpKind::Cast)
      if (ExprRef a = baked(e->args[0]); a != e->args[0]) return cast(a, e->dtype);
    return e;
  }

  // A Const node's value (not a bool's): a kernel parameter, one per node (see scalar_param()).
  ExprRef scalar_constant(const Node* n) {
    if (auto it = scalar_of_.find(n); it != scalar_of_.end()) return it->second;
    launch_.params.push_back(scalar_param_bits(*n));
    const int k = static_cast<int>(launch_.params.size()) - 1;
    launch_.const_params.emplace_back(k, n);
    ExprRef p = scalar_param(k, n->dtype);
    baked_[p.get()] = is_floating(n->dtype) ? constant(n->dtype, n->attrs.f0) : int_constant(n->dtype, n->attrs.i0);
    scalar_of_[n] = p;
    return p;
  }

  ExprRef lower_leaf(const Node* n, const Index& idx) {
    switch (n->op) {
    case OpKind::Const: return n->dtype != DType::Bool ? scalar_constant(n) : int_constant(n->dtype, n->attrs.i0);
    case OpKind::Arange:
      if (is_floating(n->dtype)) {
        ExprRef x = op(OpKind::Mul, DType::Float64, {cast(idx[0], DType::Float64), constant(DType::Float64, n->attrs.f1)});
        return cast(op(OpKind::Add, DType::Float64, {constant(DType::Float64, n->attrs.f0), x}), n->dtype);
      }
      return cast(iadd(index_const(n->attrs.i0), imul(idx[0], index_const(n->attrs.i1))), n->dtype);
    case OpKind::Rand:
    case OpKind::Randn: {
      ExprRef counter = index_const(0);
      const graph::Strides st = graph::contiguous_strides(n->shape);
      for (size_t d = 0; d < n->shape.size(); ++d)
        if (n->shape[d] != 1) counter = iadd(counter, imul(idx[d], P(st[d])));
      // The seed is always a parameter (P() would bake 0 and 1 into the kernel).
      launch_.params.push_back(n->attrs.i0);
      launch_.seed_params.push_back(static_cast<int>(launch_.params.size()) - 1);
      return random(n->op, n->dtype, param(static_cast<int>(launch_.params.size()) - 1), counter);
    }
    case OpKind::Input: break;
    default: break; // only leaves reach here
    }
    KILN_ASSERT(false, "leaf without a buffer: " + describe(n));
    return nullptr;
  }

  ExprRef lower_movement(const Node* n, const Index& idx, const ExprRef& guard) {
    const Node* x = n->inputs[0].get();
    switch (n->op) {
    case OpKind::Reshape: return lower_reshape(n, idx, guard);
    case OpKind::Permute: {
      Index in(idx.size());
      for (size_t d = 0; d < idx.size(); ++d) in[n->attrs.ints[d]] = idx[d];
      return compute(x, in, guard);
    }
    case OpKind::Expand: {
      Index in(idx.size());
      for (size_t d = 0; d < idx.size(); ++d) in[d] = x->shape[d] == 1 ? index_const(0) : idx[d];
      return compute(x, in, guard);
    }
    case OpKind::Slice: {
      Index in(idx.size());
      for (size_t d = 0; d < idx.size(); ++d)
        in[d] = n->shape[d] == 1 ? P(n->attrs.ints[2 * d]) : iadd(P(n->attrs.ints[2 * d]), imul(idx[d], P(n->attrs.ints[2 * d + 1])));
      return compute(x, in, guard);
    }
    case OpKind::Pad: return lower_pad(n, idx, guard);
    case OpKind::Concat: return lower_concat(n, idx, guard);
    default: break; // only movement ops reach here
    }
    KILN_ASSERT(false, describe(n));
    return nullptr;
  }

  static ExprRef both(const ExprRef& a, const ExprRef& b) {
    if (!a) return b;
    if (!b) return a;
    return op(OpKind::LogicalAnd, DType::Bool, {a, b});
  }

  ExprRef lower_pad(const Node* n, const Index& idx, const ExprRef& guard) {
    const Node* x = n->inputs[0].get();
    Index in(idx.size());
    ExprRef inside;
    for (size_t d = 0; d < idx.size(); ++d) {
      const int64_t before = n->attrs.ints[2 * d], after = n->attrs.ints[2 * d + 1];
      in[d] = x->shape[d] == 1 && before == 0 && after == 0 ? index_const(0) : isub(idx[d], P(before));
      if (before == 0 && after == 0) continue;
      ExprRef lo = op(OpKind::Ge, DType::Bool, {idx[d], P(before)});
      ExprRef hi = op(OpKind::Lt, DType::Bool, {idx[d], P(before + x->shape[d])});
      inside = both(inside, both(lo, hi));
    }
    if (!inside) return compute(x, in, guard);
    const ExprRef fill = is_floating(n->dtype) ? constant(n->dtype, n->attrs.f0) : int_constant(n->dtype, n->attrs.i0);
    return op(OpKind::Where, n->dtype, {inside, compute(x, in, both(guard, inside)), fill});
  }

  ExprRef lower_concat(const Node* n, const Index& idx, const ExprRef& guard) {
    const size_t dim = static_cast<size_t>(n->attrs.ints[0]);
    // Chooses among the pieces from the last one back: where(i < end_k, piece_k, later pieces).
    std::vector<int64_t> starts;
    int64_t start = 0;
    for (const auto& in : n->inputs) {
      starts.push_back(start);
      start += in->shape[dim];
    }
    ExprRef result, offset; // offset: while every piece is a load of one buffer, the chosen offset
    int buffer = -1;
    for (size_t k = n->inputs.size(); k-- > 0;) {
      const Node* piece = n->inputs[k].get();
      if (piece->shape[dim] == 0) continue;
      Index in = idx;
      in[dim] = piece->shape[dim] == 1 ? index_const(0) : isub(idx[dim], P(starts[k]));
      if (!result) { // the last non-empty piece takes every index not claimed before it
        ExprRef lo = starts[k] == 0 ? nullptr : op(OpKind::Ge, DType::Bool, {idx[dim], P(starts[k])});
        result = compute(piece, in, both(guard, lo));
        if (result->kind == ExprKind::Load) buffer = result->index, offset = result->args[0];
        continue;
      }
      ExprRef mine = op(OpKind::Lt, DType::Bool, {idx[dim], P(starts[k] + piece->shape[dim])});
      if (starts[k] > 0) mine = both(mine, op(OpKind::Ge, DType::Bool, {idx[dim], P(starts[k])}));
      ExprRef value = compute(piece, in, both(guard, mine));
      if (offset && value->kind == ExprKind::Load && value->index == buffer)
        offset = op(OpKind::Where, DType::Int64, {mine, value->args[0], offset});
      else
        offset = nullptr;
      result = op(OpKind::Where, n->dtype, {mine, value, result});
    }
    // Pieces that all read one buffer (im2col's window taps of a padded input): one load
    // at the chosen piece's offset rather than a load of every piece. The same value.
    if (offset) return load(buffer, n->dtype, offset, guard);
    // Every piece empty: the node has no elements, so the value is never evaluated.
    return result ? result : int_constant(n->dtype, 0);
  }

  // Reshape as index arithmetic: a buffer is read at the same linear offset; otherwise
  // the dims are matched in groups of equal element count, so that only merged groups
  // need division.
  ExprRef lower_reshape(const Node* n, const Index& idx, const ExprRef& guard) {
    const Node* x = n->inputs[0].get();
    if (part_.has_buffer(x)) return load(buffer_for(x), x->dtype, contiguous_offset(n->shape, idx), guard);
    const graph::Shape& out = n->shape;
    const graph::Shape& in = x->shape;
    Index in_idx(in.size(), index_const(0));
    size_t o = 0, i = 0;
    while (o < out.size() || i < in.size()) {
      // one group: the smallest runs out[o0..o), in[i0..i) with equal products
      const size_t o0 = o, i0 = i;
      int64_t po = 1, pi = 1;
      do {
        if (pi <= po && i < in.size()) pi *= in[i++];
        else if (o < out.size()) po *= out[o++];
        else pi *= in[i++];
      } while (po != pi && (o < out.size() || i < in.size()));
      while (o < out.size() && out[o] == 1 && pi == po) ++o; // trailing size-1 dims join this group
      while (i < in.size() && in[i] == 1 && pi == po) ++i;
      map_group(out, idx, o0, o, in, in_idx, i0, i);
    }
    return compute(x, in_idx, guard);
  }

  void map_group(const graph::Shape& out, const Index& idx, size_t o0, size_t o1, const graph::Shape& in,
                 Index& in_idx, size_t i0, size_t i1) {
    ExprRef linear = index_const(0);
    int64_t stride = 1;
    for (size_t d = o1; d-- > o0;) {
      if (out[d] != 1) linear = iadd(linear, imul(idx[d], P(stride)));
      stride *= out[d];
    }
    std::vector<size_t> live;
    for (size_t d = i0; d < i1; ++d)
      if (in[d] != 1) live.push_back(d);
    for (size_t k = 0; k < live.size(); ++k) {
      int64_t inner = 1;
      for (size_t j = k + 1; j < live.size(); ++j) inner *= in[live[j]];
      ExprRef v = idiv(linear, P(inner));
      in_idx[live[k]] = k == 0 ? v : imod(v, P(in[live[k]]));
    }
  }

  // A reduction fused into this row kernel: it must be read once per row, at the
  // root's own row index (its reduced dims broadcast, the others the root's vars).
  ExprRef absorbed_value(const Node* n, const Index& idx) {
    const bool matmul = graph::op_category(n->op) == OpCategory::Contraction;
    for (size_t d = 0; d < idx.size(); ++d) {
      const bool reduced = !matmul && std::find(n->attrs.ints.begin(), n->attrs.ints.end(), static_cast<int64_t>(d)) != n->attrs.ints.end();
      const bool same = idx[d] == root_idx_[d] || (is_const(idx[d], 0) && is_const(root_idx_[d], 0));
      const bool ok = reduced ? is_const(idx[d], 0) : same && root_idx_[d]->kind != ExprKind::MapVar;
      if (!ok) throw NeedsBuffer{n};
    }
    if (auto it = absorbed_.find(n); it != absorbed_.end()) return it->second; // once per row
    return absorbed_[n] = matmul ? lower_matmul(n, idx) : lower_reduce(n, idx);
  }

  ExprRef lower_reduce(const Node* n, const Index& idx) {
    const Node* x = n->inputs[0].get();
    Reduction red{n->op, x->dtype, {}, nullptr};
    Index in = idx;
    for (int64_t d : n->attrs.ints) {
      in[d] = x->shape[d] == 1 ? index_const(0) : reduce_var(static_cast<int>(red.extents.size()));
      if (x->shape[d] != 1 || n->op == OpKind::Argmax || n->op == OpKind::Argmin) red.extents.push_back(P(x->shape[d]));
    }
    red.value = compute(x, in, nullptr); // may add the reductions this one reads first
    launch_.work_per_point = graph::numel(x->shape) / std::max<int64_t>(1, n->numel());
    kernel_.reductions.push_back(std::move(red));
    return reduce_result(static_cast<int>(kernel_.reductions.size()) - 1, n->dtype);
  }

  // The GEMM form pays off from a few rows and columns on; a matrix-vector product
  // keeps the row-blocked or dot-product loops. It needs a float matmul computed at
  // the domain's own points (not inside a row map). Whether the kernel then takes the
  // form is plan_form()'s decision for the target (form.h).
  bool use_gemm(const Node* n, const Index& idx) const {
    const size_t r = n->shape.size();
    if (n->dtype != DType::Float32 && n->dtype != DType::Float64) return false;
    if (!kernel_.map.empty() || !kernel_.reductions.empty() || n->shape[r - 2] < 4 || n->shape[r - 1] < 8) return false;
    for (const ExprRef& e : idx)
      if (e->kind != ExprKind::LoopVar && !is_const(e, 0)) return false;
    return n->numel() > 0;
  }

  ExprRef lower_matmul(const Node* n, const Index& idx) {
    const Node* a = n->inputs[0].get();
    const Node* b = n->inputs[1].get();
    const size_t r = n->shape.size();
    const int64_t k = a->shape[r - 1];
    Index ai = idx, bi = idx;
    ExprRef kv = k == 1 ? index_const(0) : reduce_var(0);
    ai[r - 1] = kv;
    bi[r - 2] = kv;
    bi[r - 1] = idx[r - 1];
    Reduction red{OpKind::Sum, n->dtype, {P(k)}, nullptr, /*fma=*/true};
    // A transposed right operand is contiguous in k (dot products); otherwise its rows
    // are contiguous in j, and whole rows of the output accumulate together.
    red.block_inner = b->op != OpKind::Permute && n->shape[r - 1] > 1;
    if (red.block_inner) launch_.min_chunk = n->shape[r - 1]; // blocks of a row share the A loads
    red.value = op(OpKind::Mul, n->dtype, {compute(a, ai, nullptr), compute(b, bi, nullptr)});
    launch_.work_per_point = std::max<int64_t>(1, k);
    if (use_gemm(n, idx)) {
      // A GEMM-form candidate (plan_form decides). Its order is sequential, like a
      // block_inner reduction, whatever the form and the backend.
      red.block_inner = true;
      MatmulDims dims;
      if (idx[r - 2]->kind == ExprKind::LoopVar) dims.m_var = idx[r - 2]->index;
      if (idx[r - 1]->kind == ExprKind::LoopVar) dims.n_var = idx[r - 1]->index;
      kernel_.matmul = dims;
    }
    kernel_.reductions.push_back(std::move(red));
    return reduce_result(static_cast<int>(kernel_.reductions.size()) - 1, n->dtype);
  }
};

} // namespace

Schedule schedule(const std::vector<const graph::Node*>& outputs, const ScheduleOptions& options) {
  std::unordered_set<const Node*> forced; // reductions that turned out to need a buffer
  for (;;) {
    Partition part(outputs, options, forced);
    Schedule s;
    try {
      for (const Node* n : part.order())
        if (part.computed(n)) s.launches.push_back(KernelBuilder(part, n, options.target).build());
    } catch (const NeedsBuffer& e) {
      forced.insert(e.node);
      continue;
    }
    s.decisions = std::move(part.decisions);
    s.boundaries = std::move(part.boundaries);
    for (const KernelLaunch& l : s.launches) {
      const std::string lines = graph::source_lines_str(l.lines, 8);
      s.decisions.push_back(l.kernel.name + " computes " + describe(l.output) + (lines.empty() ? "" : " from " + lines));
    }
    return s;
  }
}

} // namespace kiln::codegen

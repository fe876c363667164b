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
  /// True when a kernel root's kernel has map loops (a row kernel: reductions, then stores per row element).
  bool has_map(const Node* root) const {
    return graph::op_category(root->op) != OpCategory::Reduce && row_dims_.count(root) > 0;
  }
  /// True when a kernel root's kernel computes a matmul (its own, or one it takes as an epilogue).
  bool has_matmul(const Node* root) const {
    return graph::op_category(root->op) == OpCategory::Contraction || matmul_of_.count(root) > 0;
  }
  /// True in unfused mode (one kernel per primitive op).
  bool unfused() const { return !opt_.fusion; }
  /// True for a node the realize asked for.
  bool is_output(const Node* n) const { return outputs_.count(n) > 0; }
  /// The nodes that read n (within what this schedule computes).
  const std::vector<const Node*>& users(const Node* n) const {
    static const std::vector<const Node*> none;
    auto it = users_.find(n);
    return it == users_.end() ? none : it->second;
  }
  /// The kernel root whose kernel computes n (n itself for a root), or null when n is computed
  /// inside several kernels (a view or leaf read by several).
  const Node* owner(const Node* n) const {
    auto it = owner_.find(n);
    return it == owner_.end() || it->second == several() ? nullptr : it->second;
  }
  /// True for a kernel root cut off its users' kernel by the depth or buffer bound.
  bool cut(const Node* root) const { return cut_.count(root) > 0; }
  /// Ops between a fused node and its kernel's root (0 for roots).
  int depth(const Node* n) const { return depth_.at(n); }
  /// The bound on a kernel's expression depth.
  static constexpr int kMaxFusedDepth = 256;
  /// Where each node is computed, and why, in the order decided (outputs first).
  std::vector<FusionDecision> decisions;
  /// Takes one unit of fusion fuel (ScheduleOptions::fuel); false when none is left.
  bool spend_fuel() const {
    if (opt_.fuel >= 0 && fuel_used_ >= opt_.fuel) return false;
    ++fuel_used_;
    return true;
  }
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
  std::unordered_set<const Node*> cut_;          // roots cut by the depth or buffer bound
  mutable int64_t fuel_used_ = 0;                // fusion decisions made (ScheduleOptions::fuel)
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
    decisions.push_back({FusionDecision::Kind::Kernel, n, n, why, {}});
  }

  // A fusion decision of n into kernel's kernel, or false (and n gets a kernel) when the fuel is spent.
  bool fuse(const Node* n, const Node* kernel, std::string why) {
    if (!spend_fuel()) {
      materialize(n, "out of fusion fuel (KILN_FUEL=" + std::to_string(opt_.fuel) + ")");
      return false;
    }
    decisions.push_back({FusionDecision::Kind::Fuse, n, kernel, std::move(why), {}});
    return true;
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
      return cut_.insert(n), materialize(n, "not fusing: the kernel would nest more than " + std::to_string(kMaxFusedDepth) +
                                " ops deep");
    // A wide graph (a long concat, a sum of many leaves) is cut into kernels that read a
    // bounded number of buffers.
    if (!within_buffer_budget(n))
      return cut_.insert(n), materialize(n, "not fusing: the kernel would read more than " +
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
    if (!fuse(n, owner, "its users are all in that kernel")) return;
    owner_[n] = owner;
  }

  void decide_reduce(const Node* r) {
    if (!opt_.fusion) return materialize(r, "unfused mode (KILN_FUSION=0)");
    const std::string why = why_not_absorbed(r);
    if (!why.empty()) return materialize(r, "reductions end a kernel unless fused into a row kernel; not fusing: " + why);
    const Node* owner = users_owner(r);
    if (!fuse(r, owner, "a row reduction whose result is only broadcast back over its rows")) return;
    absorbed_.insert(r);
    owner_[r] = owner;
    row_dims_[owner] = reduced_row_dims(r);
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
    if (!fuse(m, owner, "a matmul whose elementwise users become its epilogue")) return;
    absorbed_.insert(m);
    owner_[m] = owner;
    matmul_of_.insert(owner);
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

// ---------------------------------------------------------------- multi-output kernels

// The extents of a shape's dims other than 1: two kernels iterate over the same domain
// points when these are equal (size-1 dims are no loop).
std::vector<int64_t> loop_extents(const graph::Shape& shape) {
  std::vector<int64_t> e;
  for (int64_t d : shape)
    if (d != 1) e.push_back(d);
  return e;
}

// Which kernel roots one kernel stores together (see schedule()). A root joins the kernel of
// an earlier root (its leader) when both run over the same domain points, everything it reads
// is computed before that kernel runs, and it reads the kernel's other values only at the
// point being computed (where they are in registers rather than in memory yet).
class Grouping {
public:
  Grouping(const Partition& part) : part_(part) {
    for (const Node* n : part.order())
      if (part.computed(n)) place(n);
  }
  /// Kernels in launch order, each as its roots, the leader first.
  std::vector<std::vector<const Node*>> kernels;
  /// True for a root that needs no buffer: not asked for, and read only by the other values of its
  /// kernel (a reduction whose reshape is the output; a matmul whose users all joined its kernel).
  bool internal(const Node* root) const {
    if (part_.is_output(root)) return false;
    const size_t g = group_of_.at(root);
    if (groups_[g].roots.size() == 1) return false;
    for (const Node* u : part_.users(root)) {
      const Node* o = part_.owner(u);
      if (!o || !group_of_.count(o) || group_of_.at(o) != g || o == root) return false;
    }
    return true;
  }
  /// The roots stored by another root's kernel, and why.
  std::vector<FusionDecision> decisions;

private:
  // How a kernel root's own kernel computes it.
  enum class Kind : uint8_t {
    Plain,     // elementwise and movement ops only: one value per domain point
    Reduction, // one reduction (nothing fused into it but its operand's elementwise ops)
    Other,     // row kernels, matmuls: they lead kernels but join none
  };
  // What a root's own kernel reads: buffers, those read at other points than the root's own,
  // and the expression depth each buffer read at its own points is read at; the depth of the
  // root's expression.
  struct Reads {
    std::unordered_set<const Node*> buffers, shifted;
    std::unordered_map<const Node*, int> own_depth;
    int depth = 0;
    // An empty reduction or matmul (a structural zero extent): LLVM folds its value to a constant,
    // and NaNs folded at compile time can differ in sign from the hardware's, so what reads that
    // value reads it from memory, as in unfused mode.
    bool empty = false;
  };
  struct Kernel {
    std::vector<const Node*> roots;
    std::unordered_set<const Node*> reads; // buffers read, not its own roots
    bool sealed = false;                   // takes no other roots (Reads::empty)
  };
  // Joined kernels read at most this many buffers (as Partition's bound).
  static constexpr size_t kMaxBuffers = 64;
  // Independent values join a kernel only over small domains, where a launch costs more than the work.
  static constexpr int64_t kMaxHorizontalPoints = int64_t{1} << 15;
  // Independent values look this many kernels back for one to join.
  static constexpr size_t kHorizontalWindow = 8;

  const Partition& part_;
  std::vector<Kernel> groups_;
  std::unordered_map<const Node*, size_t> group_of_;
  std::unordered_map<const Node*, int> value_depth_; // a stored root's expression depth in its kernel

  Kind kind(const Node* root) const {
    if (part_.has_map(root) || part_.has_matmul(root) || !part_.row_dims(root).empty() || part_.cut(root) ||
        graph::numel(root->shape) == 0)
      return Kind::Other;
    return graph::op_category(root->op) == OpCategory::Reduce ? Kind::Reduction : Kind::Plain;
  }

  // True for a reduction over its input's innermost dim (contiguous rows).
  static bool along_rows(const Node* r) {
    const auto& dims = r->attrs.ints;
    const int64_t last = static_cast<int64_t>(r->inputs[0]->shape.size()) - 1;
    return std::find(dims.begin(), dims.end(), last) != dims.end();
  }

  // True when the edge from n to its input `in` keeps the index: an elementwise op's operand
  // (same shape), or a reshape that only adds or drops size-1 dims.
  static bool keeps_points(const Node* n, const Node* in) {
    if (graph::is_elementwise(n->op)) return in->shape == n->shape;
    return n->op == OpKind::Reshape && loop_extents(in->shape) == loop_extents(n->shape);
  }

  // The buffers root's kernel reads; `simple` turns false where it computes an absorbed node.
  Reads reads_of(const Node* root, bool& simple) const {
    Reads r;
    std::unordered_set<const Node*> seen_own, seen_shifted;
    const bool own_root = graph::op_category(root->op) != OpCategory::Reduce;
    struct Edge {
      const Node* node;
      bool own;  // read at the root's own points
      int depth; // of the reader, +1
    };
    std::vector<Edge> todo;
    for (const auto& in : root->inputs) todo.push_back({in.get(), own_root && keeps_points(root, in.get()), 1});
    r.empty = graph::numel(root->shape) == 0;
    while (!todo.empty()) {
      const Edge e = todo.back();
      todo.pop_back();
      r.depth = std::max(r.depth, e.depth);
      r.empty = r.empty || graph::numel(e.node->shape) == 0;
      if (part_.has_buffer(e.node)) {
        r.buffers.insert(e.node);
        if (!e.own) r.shifted.insert(e.node);
        else r.own_depth[e.node] = std::max(r.own_depth[e.node], e.depth);
        continue;
      }
      if (!(e.own ? seen_own : seen_shifted).insert(e.node).second) continue;
      if (part_.absorbed(e.node)) simple = false;
      const int d = part_.depth(e.node) + 1;
      for (const auto& in : e.node->inputs) todo.push_back({in.get(), e.own && keeps_points(e.node, in.get()), d});
    }
    return r;
  }

  void place(const Node* root) {
    bool simple = true;
    const Kind k = kind(root);
    const Reads r = part_.unfused() ? Reads{} : reads_of(root, simple);
    if (k != Kind::Other && simple && !r.empty && !part_.unfused())
      if (join(root, k, r)) return;
    group_of_[root] = groups_.size();
    value_depth_[root] = r.depth;
    groups_.push_back({{root}, r.buffers, r.empty});
    kernels.push_back({root});
  }

  // Joins root to the kernel it reads at its own points, or else (small and independent) to a
  // recent kernel over the same points; false when none qualifies.
  bool join(const Node* root, Kind k, const Reads& r) {
    // the latest kernel computing something root reads: root cannot run before it
    size_t ready = 0;
    bool reads_computed = false;
    for (const Node* b : r.buffers)
      if (auto it = group_of_.find(b); it != group_of_.end()) ready = std::max(ready, it->second), reads_computed = true;
    const int64_t points = graph::numel(root->shape);
    for (size_t g = groups_.size(); g-- > 0;) {
      if (reads_computed && g < ready) break;
      const bool reads_it = reads_computed && g == ready;
      if (!reads_it && groups_.size() - g > kHorizontalWindow) {
        if (!reads_computed) break;
        g = ready + 1; // on to the kernel it reads
        continue;
      }
      // a large independent value joins only a kernel reading the same data (Adam's m and v
      // updates both read the gradient): one pass over it instead of two
      if (!reads_it && points > kMaxHorizontalPoints && !shares_reads(groups_[g], r)) continue;
      if (!fits(groups_[g], root, k, r, g)) continue;
      if (!part_.spend_fuel()) {
        decisions.push_back({FusionDecision::Kind::Kernel, root, root,
                             "not stored with the kernel for " + describe(groups_[g].roots[0]) + ": out of fusion fuel",
                             {}});
        return false;
      }
      decisions.push_back({FusionDecision::Kind::Store, root, groups_[g].roots[0],
                           k == Kind::Reduction ? "a sibling reduction over the same rows"
                           : reads_it           ? "it reads that kernel's values at their own points"
                           : shares_reads(groups_[g], r) ? "a value over the same points reading the same data"
                                                         : "an independent value over the same points",
                           {}});
      groups_[g].roots.push_back(root);
      value_depth_[root] = joined_depth(r, g);
      for (const Node* b : r.buffers)
        if (!group_of_.count(b) || group_of_.at(b) != g) groups_[g].reads.insert(b);
      group_of_[root] = g;
      kernels[g].push_back(root);
      return true;
    }
    return false;
  }

  // True when root reads, at its own points, a buffer that kernel g reads too.
  static bool shares_reads(const Kernel& g, const Reads& r) {
    for (const Node* b : r.buffers)
      if (!r.shifted.count(b) && g.reads.count(b)) return true;
    return false;
  }

  // The depth of root's expression in kernel g: a value of g it reads is its expression there.
  int joined_depth(const Reads& r, size_t g) const {
    int depth = r.depth;
    for (const auto& [b, at] : r.own_depth)
      if (auto it = group_of_.find(b); it != group_of_.end() && it->second == g) depth = std::max(depth, at + value_depth_.at(b));
    return depth;
  }

  bool fits(const Kernel& g, const Node* root, Kind k, const Reads& r, size_t index) const {
    const Node* leader = g.roots[0];
    const Kind lk = kind(leader);
    if (g.sealed) return false;
    if (loop_extents(leader->shape) != loop_extents(root->shape)) return false;
    // reductions join reduction kernels only (a matmul's loops have one reduction; an
    // elementwise kernel keeps its vectorized loop over points), and only sums along rows:
    // two strided column reductions in one loop measured slower than apart (bias gradients)
    if (k == Kind::Reduction && (lk != Kind::Reduction || !along_rows(root) || !along_rows(leader))) return false;
    // A GEMM's epilogue runs per register tile, unvectorized: a value that streams another
    // full-size operand (SGD's w - lr * g) is faster as its own elementwise kernel (measured:
    // 1.48 ms fused vs 1.23 ms apart for the 784 x 512 weight gradient and its update)
    if (part_.has_matmul(leader))
      for (const Node* b : r.buffers)
        if (!r.shifted.count(b) && !(group_of_.count(b) && group_of_.at(b) == index)) return false;
    size_t extra = 0;
    for (const Node* b : r.buffers) {
      auto it = group_of_.find(b);
      if (it != group_of_.end() && it->second == index) { // a value of this kernel
        if (k != Kind::Plain || r.shifted.count(b)) return false;
        continue;
      }
      if (it != group_of_.end() && it->second > index) return false; // computed after it
      if (!g.reads.count(b)) ++extra;
    }
    return g.reads.size() + extra + g.roots.size() + 1 <= kMaxBuffers && joined_depth(r, index) <= Partition::kMaxFusedDepth;
  }
};

// ---------------------------------------------------------------- kernel building

class KernelBuilder {
public:
  /// The kernel storing `roots` (Grouping::kernels' entry), the leader first, planned for `target`.
  /// `stored[i]`: whether roots[i] is written to a buffer (else only later roots read it).
  KernelBuilder(const Partition& part, std::vector<const Node*> roots, std::vector<bool> stored, const Target& target)
      : part_(part), roots_(std::move(roots)), store_(std::move(stored)), root_(roots_[0]), target_(target) {}

  KernelLaunch build() {
    const bool row_map = graph::op_category(root_->op) != OpCategory::Reduce && !part_.row_dims(root_).empty();
    Index idx = make_domain(root_->shape, row_map ? part_.row_dims(root_) : std::vector<int64_t>{});
    root_idx_ = idx;
    std::vector<Store> stores;
    for (size_t i = 0; i < roots_.size(); ++i) {
      const Node* r = roots_[i];
      Index own = r == root_ ? idx : own_index(r->shape);
      ExprRef value = build_root(r, own);
      stores.push_back({0, store_[i] ? contiguous_offset(r->shape, own) : nullptr, value});
      stored_[r] = {std::move(own), std::move(value)};
    }
    // the outputs are the last buffers, after every input
    for (size_t i = 0; i < roots_.size(); ++i) {
      if (!store_[i]) continue;
      stores[i].buffer = static_cast<int>(kernel_.buffers.size());
      kernel_.buffers.push_back({roots_[i]->dtype, true});
      kernel_.stores.push_back(std::move(stores[i]));
      launch_.outputs.push_back(roots_[i]);
    }
    kernel_.num_params = static_cast<int>(launch_.params.size());
    const FormPlan form = plan_form(kernel_, launch_.params, target_);
    set_form(kernel_, form);
    launch_.gemm_tasks = form.gemm_tasks;
    finalize(kernel_);
    launch_.kernel = std::move(kernel_);
    launch_.domain_size = root_->numel() / std::max<int64_t>(1, map_size_);
    if (map_size_ > 1) launch_.work_per_point = map_size_ * static_cast<int64_t>(1 + launch_.kernel.reductions.size());
    return std::move(launch_);
  }

private:
  // A value this kernel stores, and the index it is computed at.
  struct Stored {
    Index idx;
    ExprRef value;
  };

  const Partition& part_;
  std::vector<const Node*> roots_;
  std::vector<bool> store_; // per root: written to a buffer
  const Node* root_;    // the leader: its shape gives the domain
  const Target& target_; // what plan_form() plans the kernel for
  const Node* current_ = nullptr; // the root being built
  std::unordered_map<const Node*, Stored> stored_; // roots built so far
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

  // The value of root r at index idx (its own points in this kernel's domain).
  ExprRef build_root(const Node* r, const Index& idx) {
    current_ = r;
    note_computed(r);
    const int64_t work = launch_.work_per_point;
    switch (graph::op_category(r->op)) {
    case OpCategory::Reduce: {
      ExprRef v = lower_reduce(r, idx);
      if (r != root_) launch_.work_per_point += work; // a sibling reduction: both loops run per point
      return v;
    }
    case OpCategory::Contraction: return lower_matmul(r, idx);
    case OpCategory::Leaf:
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Ternary:
    case OpCategory::Movement: break;
    }
    return compute(r, idx, nullptr);
  }

  // The index of a co-root of `shape`: the leader's loop and map vars for its dims other than 1
  // (the same extents, in the same order: Grouping checked it), 0 for the others.
  Index own_index(const graph::Shape& shape) const {
    Index vars;
    for (const ExprRef& e : root_idx_)
      if (e->kind == ExprKind::LoopVar || e->kind == ExprKind::MapVar) vars.push_back(e);
    Index idx;
    size_t k = 0;
    for (int64_t e : shape) idx.push_back(e == 1 ? index_const(0) : vars.at(k++));
    KILN_ASSERT(k == vars.size(), "a value stored with " + describe(root_) + " iterates over other points");
    return idx;
  }

  // True when two indices name the same point (loop vars and constants compared by value).
  static bool same_point(const Index& a, const Index& b) {
    if (a.size() != b.size()) return false;
    for (size_t d = 0; d < a.size(); ++d) {
      const Expr &x = *a[d], &y = *b[d];
      if (&x == &y) continue;
      if (x.kind != y.kind || (x.kind != ExprKind::LoopVar && x.kind != ExprKind::MapVar && x.kind != ExprKind::Const))
        return false;
      if (x.kind == ExprKind::Const ? x.i != y.i : x.index != y.index) return false;
    }
    return true;
  }

  // A value this kernel stores, read by a later one of its values: the same expression (it is
  // not in memory before the kernel ends; Grouping allows reads at its own points only).
  ExprRef stored_value(const Node* n, const Stored& s, const Index& idx, const ExprRef& guard) const {
    KILN_ASSERT(!guard && same_point(idx, s.idx), describe(n) + " is read at other points by a value stored with it");
    return s.value;
  }

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
    if (n == current_ || !part_.has_buffer(n)) note_computed(n);
    ExprRef v;
    if (n == current_) v = compute_inline(n, idx, guard);
    else if (auto s = stored_.find(n); s != stored_.end()) v = stored_value(n, s->second, idx, guard);
    else if (part_.has_buffer(n)) v = load_node(n, idx, guard);
    else if (part_.absorbed(n)) v = absorbed_value(n, idx);
    else v = compute_inline(n, idx, guard);
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
    if (part_.has_buffer(x) && !stored_.count(x)) return load(buffer_for(x), x->dtype, contiguous_offset(n->shape, idx), guard);
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

std::string FusionDecision::text() const {
  std::string s;
  switch (kind) {
  case Kind::Kernel: s = "kernel for " + describe(node) + ": " + why; break;
  case Kind::Fuse: s = "fusing " + describe(node) + " into the kernel for " + describe(kernel) + ": " + why; break;
  case Kind::Store: s = "storing " + describe(node) + " in the kernel for " + describe(kernel) + ": " + why; break;
  }
  return kernel_name.empty() ? s : s + " -> " + kernel_name;
}

std::vector<std::string> Schedule::debug_lines() const {
  std::vector<std::string> out;
  for (const FusionDecision& d : decisions) out.push_back(d.text());
  out.insert(out.end(), summaries.begin(), summaries.end());
  return out;
}

bool KernelLaunch::stores(const graph::Node* n) const { return std::find(outputs.begin(), outputs.end(), n) != outputs.end(); }

Schedule schedule(const std::vector<const graph::Node*>& outputs, const ScheduleOptions& options) {
  std::unordered_set<const Node*> forced; // reductions that turned out to need a buffer
  for (;;) {
    Partition part(outputs, options, forced);
    Grouping groups(part);
    Schedule s;
    try {
      for (const std::vector<const Node*>& roots : groups.kernels) {
        std::vector<bool> stored;
        for (const Node* r : roots) stored.push_back(!groups.internal(r));
        s.launches.push_back(KernelBuilder(part, roots, std::move(stored), options.target).build());
      }
    } catch (const NeedsBuffer& e) {
      forced.insert(e.node);
      continue;
    }
    s.decisions = std::move(part.decisions);
    s.decisions.insert(s.decisions.end(), groups.decisions.begin(), groups.decisions.end());
    s.boundaries = std::move(part.boundaries);
    std::unordered_map<const Node*, const std::string*> name_of; // kernel root -> its kernel's name
    for (size_t k = 0; k < s.launches.size(); ++k) {
      const KernelLaunch& l = s.launches[k];
      for (const Node* r : groups.kernels[k]) name_of[r] = &l.kernel.name;
      const std::string lines = graph::source_lines_str(l.lines, 8);
      std::string what;
      for (const Node* o : l.outputs) what += (what.empty() ? "" : ", ") + describe(o);
      s.summaries.push_back(l.kernel.name + " computes " + what + (lines.empty() ? "" : " from " + lines));
    }
    for (FusionDecision& d : s.decisions) {
      const Node* root = d.kind == FusionDecision::Kind::Store ? d.node : d.kernel;
      if (auto it = name_of.find(root); it != name_of.end()) d.kernel_name = *it->second;
    }
    return s;
  }
}

} // namespace kiln::codegen

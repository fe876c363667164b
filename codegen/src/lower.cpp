#include "codegen/lower.h"

#include <map>
#include <unordered_map>
#include <unordered_set>

#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::codegen {

namespace {

using graph::Node;
using graph::OpCategory;
using graph::OpKind;
using Index = std::vector<ExprRef>;

std::string describe(const Node* n) {
  return std::string(graph::op_name(n->op)) + " " + std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape);
}

// ---------------------------------------------------------------- partitioning

// Which nodes get a buffer of their own, and why.
class Partition {
public:
  Partition(const std::vector<const Node*>& outputs, const ScheduleOptions& opt) : opt_(opt) {
    for (const Node* o : outputs) outputs_.insert(o);
    order_ = graph::topo_order(outputs);
    for (const Node* n : order_)
      if (!n->realized() && n->op != OpKind::Input)
        for (const auto& in : n->inputs) {
          ++consumers_[in.get()];
          if (graph::op_category(n->op) == OpCategory::Contraction) feeds_matmul_.insert(in.get());
        }
    for (const Node* n : order_) decide(n);
  }
  /// Nodes in dependency order.
  const std::vector<const Node*>& order() const { return order_; }
  /// True when `n` is read from a buffer rather than recomputed inside its consumer.
  bool has_buffer(const Node* n) const { return n->realized() || n->op == OpKind::Input || computed_.count(n); }
  /// True when a kernel must compute `n`.
  bool computed(const Node* n) const { return computed_.count(n) > 0; }
  /// The reasons behind each boundary.
  std::vector<std::string> decisions;

private:
  const ScheduleOptions& opt_;
  std::unordered_set<const Node*> outputs_;
  std::vector<const Node*> order_;
  std::unordered_map<const Node*, int> consumers_;
  std::unordered_set<const Node*> computed_;
  std::unordered_set<const Node*> feeds_matmul_;

  void materialize(const Node* n, const std::string& why) {
    computed_.insert(n);
    decisions.push_back("kernel for " + describe(n) + ": " + why);
  }

  void decide(const Node* n) {
    if (n->realized() || n->op == OpKind::Input) return; // inputs are bound when the plan runs
    if (outputs_.count(n)) return materialize(n, "requested output");
    switch (graph::op_category(n->op)) {
    case OpCategory::Reduce: return materialize(n, "reductions end a kernel");
    case OpCategory::Contraction: return materialize(n, "matmul is its own kernel");
    case OpCategory::Leaf:
    case OpCategory::Movement: return; // computed by index arithmetic inside consumers
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Ternary: return decide_elementwise(n);
    }
  }

  void decide_elementwise(const Node* n) {
    if (n->op == OpKind::Detach) return; // an identity
    if (!opt_.fusion) return materialize(n, "unfused mode (KILN_FUSION=0)");
    if (feeds_matmul_.count(n))
      return materialize(n, "not fusing into matmul: the value would be computed once per output column");
    if (consumers_[n] > 1) return materialize(n, "not fusing into its " + std::to_string(consumers_[n]) +
                                                     " consumers: the value would be computed more than once");
    decisions.push_back("fusing " + describe(n) + " into its consumer");
  }
};

// ---------------------------------------------------------------- kernel building

class KernelBuilder {
public:
  KernelBuilder(const Partition& part, const Node* root) : part_(part), root_(root) {}

  KernelLaunch build() {
    Index idx = make_domain(root_->shape);
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
    finalize(kernel_);
    launch_.kernel = std::move(kernel_);
    launch_.output = root_;
    launch_.domain_size = root_->numel();
    return std::move(launch_);
  }

private:
  const Partition& part_;
  const Node* root_;
  Kernel kernel_;
  KernelLaunch launch_;
  std::unordered_map<const Node*, int> buffer_of_;
  std::map<std::vector<const void*>, ExprRef> memo_;

  // A size or stride: 0 and 1 are structural (they change the loop shape), other
  // values are parameters so that one kernel serves every size.
  ExprRef P(int64_t v) {
    if (v == 0 || v == 1) return index_const(v);
    launch_.params.push_back(v);
    return param(static_cast<int>(launch_.params.size()) - 1);
  }

  // Domain loop vars for the dims of `shape` with extent != 1; 0 for the others.
  Index make_domain(const graph::Shape& shape) {
    Index idx;
    for (int64_t e : shape) {
      if (e == 1) {
        idx.push_back(index_const(0));
        continue;
      }
      idx.push_back(loop_var(static_cast<int>(kernel_.domain.size())));
      kernel_.domain.push_back(P(e));
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

  ExprRef load_node(const Node* n, const Index& idx, const ExprRef& guard) {
    return load(buffer_for(n), n->dtype, contiguous_offset(n->shape, idx), guard);
  }

  // The value of node n at index idx (one i64 expr per dim of n). `guard` is the
  // condition under which the value is used (pad/concat), or null for always.
  ExprRef compute(const Node* n, const Index& idx, const ExprRef& guard) {
    std::vector<const void*> key{n, guard.get()};
    for (const ExprRef& e : idx) key.push_back(e.get());
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    ExprRef v = (n != root_ && part_.has_buffer(n)) ? load_node(n, idx, guard) : compute_inline(n, idx, guard);
    memo_[key] = v;
    return v;
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
    return op(n->op, n->dtype, std::move(args));
  }

  ExprRef lower_leaf(const Node* n, const Index& idx) {
    switch (n->op) {
    case OpKind::Const:
      return is_floating(n->dtype) ? constant(n->dtype, n->attrs.f0) : int_constant(n->dtype, n->attrs.i0);
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
      return random(n->op, n->dtype, n->attrs.i0, counter);
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
    ExprRef result;
    for (size_t k = n->inputs.size(); k-- > 0;) {
      const Node* piece = n->inputs[k].get();
      if (piece->shape[dim] == 0) continue;
      Index in = idx;
      in[dim] = piece->shape[dim] == 1 ? index_const(0) : isub(idx[dim], P(starts[k]));
      if (!result) { // the last non-empty piece takes every index not claimed before it
        ExprRef lo = starts[k] == 0 ? nullptr : op(OpKind::Ge, DType::Bool, {idx[dim], P(starts[k])});
        result = compute(piece, in, both(guard, lo));
        continue;
      }
      ExprRef mine = op(OpKind::Lt, DType::Bool, {idx[dim], P(starts[k] + piece->shape[dim])});
      if (starts[k] > 0) mine = both(mine, op(OpKind::Ge, DType::Bool, {idx[dim], P(starts[k])}));
      result = op(OpKind::Where, n->dtype, {mine, compute(piece, in, both(guard, mine)), result});
    }
    return result;
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

  ExprRef lower_reduce(const Node* n, const Index& idx) {
    const Node* x = n->inputs[0].get();
    Reduction red{n->op, x->dtype, {}, nullptr};
    Index in = idx;
    for (int64_t d : n->attrs.ints) {
      in[d] = x->shape[d] == 1 ? index_const(0) : reduce_var(static_cast<int>(red.extents.size()));
      if (x->shape[d] != 1 || n->op == OpKind::Argmax || n->op == OpKind::Argmin) red.extents.push_back(P(x->shape[d]));
    }
    red.value = compute(x, in, nullptr);
    launch_.work_per_point = graph::numel(x->shape) / std::max<int64_t>(1, n->numel());
    kernel_.reductions.push_back(std::move(red));
    return reduce_result(0, n->dtype);
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
    red.value = op(OpKind::Mul, n->dtype, {compute(a, ai, nullptr), compute(b, bi, nullptr)});
    launch_.work_per_point = std::max<int64_t>(1, k);
    kernel_.reductions.push_back(std::move(red));
    return reduce_result(0, n->dtype);
  }
};

} // namespace

Schedule schedule(const std::vector<const graph::Node*>& outputs, const ScheduleOptions& options) {
  Partition part(outputs, options);
  Schedule s;
  for (const Node* n : part.order())
    if (part.computed(n)) s.launches.push_back(KernelBuilder(part, n).build());
  s.decisions = std::move(part.decisions);
  return s;
}

} // namespace kiln::codegen

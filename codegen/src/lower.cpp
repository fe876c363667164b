#include "codegen/lower.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "codegen/form.h"
#include "codegen/src/fusion.h"
#include "codegen/src/scan_columns.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::codegen {

namespace {

using graph::Node;
using graph::OpCategory;
using graph::OpKind;
using Index = std::vector<ExprRef>;
using fusion::describe;
using fusion::Partition;

// ---------------------------------------------------------------- kernel building

class KernelBuilder {
public:
  /// The kernel storing `roots` (Grouping::kernels' entry), the leader first, planned for `target`.
  /// `stored[i]`: whether roots[i] is written to a buffer (else only later roots read it).
  KernelBuilder(const Partition& part, std::vector<const Node*> roots, std::vector<bool> stored, const Target& target)
      : part_(part), roots_(std::move(roots)), store_(std::move(stored)), root_(roots_[0]), target_(target) {}

  KernelLaunch build() {
    if (graph::op_category(root_->op) == OpCategory::Scan) return build_scan();
    if (graph::op_category(root_->op) == OpCategory::Attention) return build_attention();
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
    finish_kernel();
    launch_.domain_size = root_->numel() / std::max<int64_t>(1, map_size_);
    if (map_size_ > 1) launch_.work_per_point = map_size_ * static_cast<int64_t>(1 + launch_.kernel.reductions.size());
    return std::move(launch_);
  }

private:
  // Plans the kernel's form for the target, names it, and moves it into the launch.
  void finish_kernel() {
    kernel_.num_params = static_cast<int>(launch_.params.size());
    const FormPlan form = plan_form(kernel_, launch_.params, target_);
    set_form(kernel_, form);
    launch_.params.insert(launch_.params.end(), form.added_params.begin(), form.added_params.end());
    launch_.gemm_tasks = form.gemm_tasks;
    if (kernel_.form == KernelForm::Columns) launch_.chunk_multiple = columns_block_points(kernel_.reductions[0].dtype);
    finalize(kernel_);
    launch_.kernel = std::move(kernel_);
  }

  // The combine of a scan node's ScanLoop (unused by an argsort).
  static ScanOp scan_combine_of(OpKind op) {
    if (op == OpKind::Cumprod || op == OpKind::ScatterMul) return ScanOp::Mul;
    if (op == OpKind::Cummax || op == OpKind::ScatterMax) return ScanOp::Max;
    if (op == OpKind::Cummin || op == OpKind::ScatterMin) return ScanOp::Min;
    return op == OpKind::Logcumsumexp ? ScanOp::LogAddExp : ScanOp::Add;
  }

  // A Scan-form kernel (kernel_ir.h, ScanLoop) for a Cumsum, Cumprod, Cummax, Cummin, Logcumsumexp,
  // scatter (graph::is_scatter) or Argsort root:
  // the domain is the output's points off the dim; its input (and a scatter's index) is computed
  // at step ReduceVar(0) along the dim, counted from the end when reversed (an argsort's
  // attrs.ints[1] is its order instead: its keys are read from the start).
  KernelLaunch build_scan() {
    const Node* n = root_;
    current_ = n;
    note_computed(n);
    const size_t dim = static_cast<size_t>(n->attrs.ints.at(0));
    const bool sort = n->op == OpKind::Argsort;
    const bool reverse = !sort && n->attrs.ints.at(1) != 0, scatter = graph::is_scatter(n->op);
    const Node* x = n->inputs.back().get();
    graph::Shape cols = n->shape;
    cols[dim] = 1;
    const Index idx = make_domain(cols, {});
    root_idx_ = idx;
    const int64_t steps = x->shape[dim];
    ScanLoop scan;
    scan.op = scan_combine_of(n->op);
    // An f32 running scan accumulates in f64, each output rounded once from it (as PyTorch's CPU
    // cumsum and logcumsumexp): in f32 the running sum of a million 0.1s ended 1% off. A scatter combines
    // into its output, in its dtype; a running max or min is exact in its dtype.
    const bool exact = scatter || scan.op == ScanOp::Max || scan.op == ScanOp::Min;
    const DType acc = sort ? x->dtype : n->dtype == DType::Float32 && !exact ? DType::Float64 : n->dtype;
    scan.dtype = acc;
    scan.sort = sort;
    scan.descending = sort && n->attrs.ints.at(1) != 0;
    scan.steps = P(steps);
    Index at = idx;
    const ExprRef step = steps == 1 ? index_const(0) : reduce_var(0);
    at[dim] = reverse ? isub(P(steps - 1), step) : step;
    scan.value = compute(x, at, nullptr);
    if (scan.value->dtype != acc) scan.value = cast(scan.value, acc);
    if (scatter) {
      scan.target = cast(compute(n->inputs[0].get(), at, nullptr), DType::Int64);
      scan.positions = P(n->shape[dim]);
    }
    size_t innermost = n->shape.size() - 1; // the last dim with extent > 1
    while (innermost > 0 && n->shape[innermost] == 1) --innermost;
    scan.inner_axis = innermost == dim;
    kernel_.scan = std::move(scan);
    // the store's position: the target for a scatter; the step (from the end when reversed) for a running scan
    Index out = idx;
    const ExprRef position = n->shape[dim] == 1 ? index_const(0) : map_var(0);
    out[dim] = reverse && !scatter ? isub(P(n->shape[dim] - 1), position) : position;
    const int buffer = static_cast<int>(kernel_.buffers.size());
    kernel_.buffers.push_back({n->dtype, true});
    ExprRef result = reduce_result(0, sort ? DType::Int64 : acc); // an argsort's: the i64 position of a key
    if (result->dtype != n->dtype) result = cast(result, n->dtype);
    kernel_.stores.push_back({buffer, contiguous_offset(n->shape, out), result});
    launch_.outputs.push_back(n);
    finish_kernel();
    launch_.domain_size = n->numel() == 0 ? 0 : graph::numel(cols);
    launch_.work_per_point = std::max<int64_t>(1, steps + (scatter ? n->shape[dim] : 0));
    if (sort) // n log n: a merge sort's passes over the column
      for (int64_t runs = 1; runs < steps; runs *= 2) launch_.work_per_point += steps;
    // chunks of whole CPU column blocks (kScanColumns): two half blocks read every cache line twice
    // (measured 7.9 ms vs 43 ms for cumsum over dim 0 of [1M, 16]); inner-axis scans other than logaddexp go
    // column by column, and so do argsorts (each column sorted on its own in the scratch memory):
    // scan_column_at_a_time
    launch_.min_chunk = scan_column_at_a_time(*launch_.kernel.scan) ? 1 : kScanColumns;
    return std::move(launch_);
  }

  // The attention kernel of root_ (Kernel::attention): its operands are buffers (fusion.h), the
  // batch dims flattened; the mask is read at (batch point, query row, key) = (LoopVar(0),
  // LoopVar(1), ReduceVar(0)), its size-1 dims broadcast. For Attention and AttentionLse roots (fusion.h's
  // siblings), the forward writing out and lse; for AttentionGrad roots (the siblings of one forward and
  // adjoint), the backward writing each root's gradient.
  KernelLaunch build_attention() {
    const Node* n = root_;
    const bool backward = n->op == OpKind::AttentionGrad;
    const size_t mask_at = graph::build::attention_mask_operand(n->op);
    graph::Shape out = n->inputs[0]->shape; // the forward's [..., L, Ev]
    out.back() = n->inputs[2]->shape.back();
    current_ = n;
    for (const Node* root : roots_) note_computed(root);
    const size_t r = out.size();
    AttentionSpec a;
    a.dtype = n->dtype;
    a.q = buffer_for(n->inputs[0].get());
    a.k = buffer_for(n->inputs[1].get());
    a.v = buffer_for(n->inputs[2].get());
    int64_t batch = 1;
    for (size_t d = 0; d + 2 < r; ++d) batch *= out[d];
    a.bh = P(batch);
    a.l = P(out[r - 2]);
    a.s = P(n->inputs[1]->shape[r - 2]);
    a.e = P(n->inputs[0]->shape[r - 1]);
    a.ev = P(out[r - 1]);
    a.scale = constant(n->dtype, n->attrs.f0);
    a.causal = n->attrs.i0 != 0;
    if (backward) {
      a.backward = true;
      a.out = buffer_for(n->inputs[3].get());
      a.dout = buffer_for(n->inputs[4].get());
      a.lse = buffer_for(n->inputs[5].get());
    }
    if (n->inputs.size() > mask_at) {
      Index idx(r, index_const(0));
      int64_t inner = 1; // batch points per step of dim d
      for (size_t d = r - 2; d-- > 0;) {
        if (out[d] != 1)
          idx[d] = d == 0 ? idiv(loop_var(0), divisor(inner)) : imod(idiv(loop_var(0), divisor(inner)), divisor(out[d]));
        inner *= out[d];
      }
      idx[r - 2] = loop_var(1);
      idx[r - 1] = reduce_var(0);
      a.mask = compute(n->inputs[mask_at].get(), idx, nullptr);
    }
    a.dropout = dropout_factor(*n, out[r - 2], n->inputs[1]->shape[r - 2]);
    // the outputs are the last buffers, after every input
    for (const Node* root : roots_) {
      const int b = static_cast<int>(kernel_.buffers.size());
      kernel_.buffers.push_back({root->dtype, true});
      launch_.outputs.push_back(root);
      if (!backward) (root->op == OpKind::AttentionLse ? a.lse : a.out) = b;
      else (root->attrs.i1 == 0 ? a.dq : root->attrs.i1 == 1 ? a.dk : a.dv) = b;
    }
    kernel_.attention = std::move(a);
    finish_kernel();
    launch_.domain_size = 0;
    for (const Node* root : roots_) launch_.domain_size += root->numel();
    return std::move(launch_);
  }

  // A random seed as a kernel parameter, one that replays may change (KernelLaunch::seed_params).
  // Always a parameter: P() would bake 0 and 1 into the kernel.
  ExprRef seed_param(int64_t seed) {
    launch_.params.push_back(seed);
    launch_.seed_params.push_back(static_cast<int>(launch_.params.size()) - 1);
    return param(static_cast<int>(launch_.params.size()) - 1);
  }

  // The dropout factor of attention node n's weight (b, i, j) = (LoopVar(0), LoopVar(1), ReduceVar(0))
  // of [batch, l, s] (build::attention_dropout_factor's arithmetic, the same random draw: the counter
  // is the weight's flat index); null without dropout.
  ExprRef dropout_factor(const Node& n, int64_t l, int64_t s) {
    const graph::build::AttentionDropout d = graph::build::attention_dropout(n);
    if (d.p <= 0) return nullptr;
    const ExprRef counter = iadd(imul(iadd(imul(loop_var(0), P(l)), loop_var(1)), P(s)), reduce_var(0));
    const ExprRef u = random(RandomDist::Uniform, n.dtype, seed_param(static_cast<int64_t>(d.seed)), counter);
    const ExprRef keep = op(ScalarOp::Ge, DType::Bool, {u, constant(n.dtype, d.p)});
    return op(ScalarOp::Where, n.dtype, {keep, constant(n.dtype, graph::build::dropout_scale(d.p)), constant(n.dtype, 0.0)});
  }

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
  // compute()'s results by (node, guard, index expressions), keyed by address. memo_pins_ keeps
  // every guard and index expression of a key alive, so that no address in a key is reused for
  // another expression: a temporary index (a broadcast's 0) freed and its memory reused by the
  // next index (a slice's 1 + i) made two different loads one (seen with TSan's allocator).
  std::map<std::vector<const void*>, ExprRef> memo_;
  std::vector<ExprRef> memo_pins_;
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
    case OpCategory::Scan: break; // build_scan()
    case OpCategory::Attention: break; // build_attention()
    case OpCategory::Leaf:
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Ternary:
    case OpCategory::Movement:
    case OpCategory::Custom: break;
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

  // A divisor of index arithmetic (idiv, imod), baked into the kernel rather than a parameter
  // like other sizes: division by a constant is a shift or a multiply, in vectors too, where a
  // parameter divides one lane at a time (a reshape's index split ran at 19 ns a point).
  static ExprRef divisor(int64_t v) { return index_const(v); }

  // A stride of index arithmetic (a buffer dim's, a slice's or an unfold's step, a reshape's
  // split): a parameter, but baked when small (a pooling window's 2, a strided conv's step,
  // a 2 x 2 pool's tile view), so that LLVM sees the loads of the vectorized loop as
  // interleaved groups (wide loads and shuffles) rather than assuming a unit stride it then
  // finds false at run time: a 2 x 2 max-pool's loads, and its gradient's argmax, ran scalar.
  ExprRef stride(int64_t v) { return v <= kBakedStride ? index_const(v) : P(v); }
  static constexpr int64_t kBakedStride = 8;

  // A reduction's extent: a parameter, but baked when it is a short window (a pooling window, a
  // few taps), so that LLVM unrolls the loop instead of running a vector loop that never reaches
  // its first vector (a 2 x 2 max-pool window ran its scalar remainder at every point).
  ExprRef extent(int64_t v) { return v <= kBakedReduceExtent ? index_const(v) : P(v); }
  static constexpr int64_t kBakedReduceExtent = 8;

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
      if (shape[d] != 1) off = iadd(off, imul(idx[d], stride(st[d])));
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
    if (guard) memo_pins_.push_back(guard);
    memo_pins_.insert(memo_pins_.end(), idx.begin(), idx.end());
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
    case OpCategory::Custom: return compute(n->inputs[0].get(), idx, guard); // its value; the call's inputs are not read
    case OpCategory::Reduce:
    case OpCategory::Scan:
    case OpCategory::Contraction:
    case OpCategory::Attention: break;
    }
    KILN_ASSERT(false, "reductions, scans, matmuls and attention always have buffers: " + describe(n));
    return nullptr;
  }

  ExprRef lower_elementwise(const Node* n, const Index& idx, const ExprRef& guard) {
    std::vector<ExprRef> args;
    for (const auto& in : n->inputs) args.push_back(compute(in.get(), idx, guard));
    switch (n->op) {
    // the elementwise ops that are no ScalarOp (codegen/kernel_ops.h)
    case OpKind::Detach: return args[0];
    case OpKind::CheckIndex: return check(args[0], P(n->attrs.i0), site_param(n->attrs.i1), error_buffer());
#define KILN_OP(e, name, arity, cat, types) KILN_IF_SCALAR(e, cat, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      return scalar(*scalar_op(n->op), n->dtype, std::move(args));
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_ELEMENTWISE_##cat(case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, "not an elementwise op: " + describe(n));
    return nullptr;
  }

  // The Op expression of a scalar op of the graph.
  ExprRef scalar(ScalarOp o, DType dtype, std::vector<ExprRef> args) const {
    if (o == ScalarOp::Cast) return cast(args[0], dtype);
    // What LLVM specialises on stays baked: pow's constant operands (x^2 is x*x) and a constant
    // divisor (x / 1024 is x * 2^-10; a mean divides by its count).
    if (o == ScalarOp::Pow)
      for (ExprRef& a : args) a = baked(a);
    if (o == ScalarOp::Div) args[1] = baked(args[1]);
    return op(o, dtype, std::move(args));
  }

  // e with scalar parameters (and casts of them) replaced by the constants they stand for.
  ExprRef baked(const ExprRef& e) const {
    if (auto it = baked_.find(e.get()); it != baked_.end()) return it->second;
    if (e->kind == ExprKind::Op && e->op == ScalarOp::Cast)
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
        ExprRef x = op(ScalarOp::Mul, DType::Float64, {cast(idx[0], DType::Float64), constant(DType::Float64, n->attrs.f1)});
        return cast(op(ScalarOp::Add, DType::Float64, {constant(DType::Float64, n->attrs.f0), x}), n->dtype);
      }
      return cast(iadd(index_const(n->attrs.i0), imul(idx[0], index_const(n->attrs.i1))), n->dtype);
    case OpKind::Rand:
    case OpKind::Randn: {
      ExprRef counter = index_const(0);
      const graph::Strides st = graph::contiguous_strides(n->shape);
      for (size_t d = 0; d < n->shape.size(); ++d)
        if (n->shape[d] != 1) counter = iadd(counter, imul(idx[d], P(st[d])));
      const RandomDist dist = n->op == OpKind::Rand ? RandomDist::Uniform : RandomDist::Normal;
      return random(dist, n->dtype, seed_param(n->attrs.i0), counter);
    }
    case OpKind::Input: break;
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Leaf, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
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
        in[d] = n->shape[d] == 1 ? P(n->attrs.ints[2 * d]) : iadd(P(n->attrs.ints[2 * d]), imul(idx[d], stride(n->attrs.ints[2 * d + 1])));
      return compute(x, in, guard);
    }
    case OpKind::Unfold: { // the window's element k of window w along dim: x at w * step + k
      const auto& a = n->attrs.ints;
      Index in = idx;
      const ExprRef k = in[static_cast<size_t>(a[3])];
      in.erase(in.begin() + a[3]);
      in[a[0]] = iadd(imul(in[a[0]], stride(a[2])), k);
      return compute(x, in, guard);
    }
    case OpKind::Pad: return lower_pad(n, idx, guard);
    case OpKind::Concat: return lower_concat(n, idx, guard);
    case OpKind::Gather: return lower_gather(n, idx, guard);
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Movement, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, describe(n));
    return nullptr;
  }

  static ExprRef both(const ExprRef& a, const ExprRef& b) {
    if (!a) return b;
    if (!b) return a;
    return op(ScalarOp::LogicalAnd, DType::Bool, {a, b});
  }

  ExprRef lower_pad(const Node* n, const Index& idx, const ExprRef& guard) {
    const Node* x = n->inputs[0].get();
    Index in(idx.size());
    ExprRef inside;
    for (size_t d = 0; d < idx.size(); ++d) {
      const int64_t before = n->attrs.ints[2 * d], after = n->attrs.ints[2 * d + 1];
      in[d] = x->shape[d] == 1 && before == 0 && after == 0 ? index_const(0) : isub(idx[d], P(before));
      if (before == 0 && after == 0) continue;
      ExprRef lo = op(ScalarOp::Ge, DType::Bool, {idx[d], P(before)});
      ExprRef hi = op(ScalarOp::Lt, DType::Bool, {idx[d], P(before + x->shape[d])});
      inside = both(inside, both(lo, hi));
    }
    if (!inside) return compute(x, in, guard);
    const ExprRef fill = is_floating(n->dtype) ? constant(n->dtype, n->attrs.f0) : int_constant(n->dtype, n->attrs.i0);
    return op(ScalarOp::Where, n->dtype, {inside, compute(x, in, both(guard, inside)), fill});
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
        ExprRef lo = starts[k] == 0 ? nullptr : op(ScalarOp::Ge, DType::Bool, {idx[dim], P(starts[k])});
        result = compute(piece, in, both(guard, lo));
        if (result->kind == ExprKind::Load) buffer = result->index, offset = result->args[0];
        continue;
      }
      ExprRef mine = op(ScalarOp::Lt, DType::Bool, {idx[dim], P(starts[k] + piece->shape[dim])});
      if (starts[k] > 0) mine = both(mine, op(ScalarOp::Ge, DType::Bool, {idx[dim], P(starts[k])}));
      ExprRef value = compute(piece, in, both(guard, mine));
      if (offset && value->kind == ExprKind::Load && value->index == buffer)
        offset = iselect(mine, value->args[0], offset);
      else
        offset = nullptr;
      result = op(ScalarOp::Where, n->dtype, {mine, value, result});
    }
    // Pieces that all read one buffer (im2col's window taps of a padded input): one load
    // at the chosen piece's offset rather than a load of every piece. The same value.
    if (offset) return load(buffer, n->dtype, offset, guard);
    // Every piece empty: the node has no elements, so the value is never evaluated.
    return result ? result : int_constant(n->dtype, 0);
  }

  // An indexed load: x at the index's value along the dim. The value is clamped into [0, size)
  // (the frontend reports out-of-range indices through a CheckIndex, or on the host), so the
  // read stays inside x whatever the index holds.
  ExprRef lower_gather(const Node* n, const Index& idx, const ExprRef& guard) {
    const Node* x = n->inputs[0].get();
    const size_t dim = static_cast<size_t>(n->attrs.ints[0]);
    Index in = idx;
    if (x->shape[dim] == 0) { // then the result is empty too: never evaluated
      in[dim] = index_const(0);
      return compute(x, in, guard);
    }
    const ExprRef j = cast(compute(n->inputs[1].get(), idx, guard), DType::Int64);
    in[dim] = op(ScalarOp::Minimum, DType::Int64, {op(ScalarOp::Maximum, DType::Int64, {j, index_const(0)}), P(x->shape[dim] - 1)});
    ExprRef v = compute(x, in, guard);
    // The index's bounds check must run even where the address does not depend on it (x of
    // extent 1, or broadcast, along the dim): a select on it keeps it in the value.
    if (error_buffer_ >= 0 && mentions(j, ExprKind::Check, error_buffer_) && !mentions(v, ExprKind::Check, error_buffer_))
      v = op(ScalarOp::Where, v->dtype, {op(ScalarOp::Ge, DType::Bool, {j, index_const(0)}), v, v});
    return v;
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
    int64_t step = 1;
    for (size_t d = o1; d-- > o0;) {
      if (out[d] != 1) linear = iadd(linear, imul(idx[d], stride(step))); // a 2 x 2 pool's tile view: 2
      step *= out[d];
    }
    std::vector<size_t> live;
    for (size_t d = i0; d < i1; ++d)
      if (in[d] != 1) live.push_back(d);
    for (size_t k = 0; k < live.size(); ++k) {
      int64_t inner = 1;
      for (size_t j = k + 1; j < live.size(); ++j) inner *= in[live[j]];
      ExprRef v = idiv(linear, divisor(inner));
      in_idx[live[k]] = k == 0 ? v : imod(v, divisor(in[live[k]]));
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
      KILN_ASSERT(ok, describe(n) + " fused into the kernel of " + describe(root_) +
                          " is read at other points than the kernel's (fusion.h, read_at_root_index)");
    }
    if (auto it = absorbed_.find(n); it != absorbed_.end()) return it->second; // once per row
    return absorbed_[n] = matmul ? lower_matmul(n, idx) : lower_reduce(n, idx);
  }

  // A float sum over a long innermost dim (more than 2 kSumBlock points) runs over it in blocks
  // of kSumBlock: each block's run is one sum_lanes() partial (kernel_ir.h) and the partials add up
  // in order, so the rounding error grows with kSumBlock / lanes + E / kSumBlock instead of E /
  // lanes (2^22 times 0.1f: a relative error of 2.5e-3 in one run, 1.1e-5 in blocks; the sum of
  // 2^22 floats took the same time, 4096-point blocks cost 6%). The order is
  // the kernel IR's, so every backend and fusion decision still computes the same bits. Not in a
  // row kernel with a map (softmax's sum of a 50,000-wide row): the map's pass over the row and
  // the sum's would no longer match (the emitter keeps the sum's terms for the map), which measured
  // 2.8x slower; such a row keeps one run of lanes.
  static constexpr int64_t kSumBlock = 16384;

  ExprRef lower_reduce(const Node* n, const Index& idx) {
    const Node* x = n->inputs[0].get();
    Reduction red{*reduce_op(n->op), x->dtype, {}, nullptr};
    Index in = idx;
    ExprRef inside; // a ragged last block's guard: points past the dim add nothing
    for (int64_t d : n->attrs.ints) {
      const int64_t e = x->shape[d];
      const bool blocked = red.op == ReduceOp::Sum && is_floating(x->dtype) && kernel_.map.empty() &&
                           d == n->attrs.ints.back() && d == static_cast<int64_t>(x->shape.size()) - 1 &&
                           e > 2 * kSumBlock;
      if (blocked) {
        ExprRef outer = reduce_var(static_cast<int>(red.extents.size()));
        red.extents.push_back(P((e + kSumBlock - 1) / kSumBlock));
        in[d] = iadd(imul(outer, index_const(kSumBlock)), reduce_var(static_cast<int>(red.extents.size())));
        red.extents.push_back(index_const(kSumBlock));
        if (e % kSumBlock != 0) inside = op(ScalarOp::Lt, DType::Bool, {in[d], P(e)});
        continue;
      }
      in[d] = e == 1 ? index_const(0) : reduce_var(static_cast<int>(red.extents.size()));
      if (e != 1 || n->op == OpKind::Argmax || n->op == OpKind::Argmin) red.extents.push_back(extent(e));
    }
    red.value = compute(x, in, inside); // may add the reductions this one reads first
    if (inside) red.value = op(ScalarOp::Where, x->dtype, {inside, red.value, constant(x->dtype, 0.0)});
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
    Reduction red{ReduceOp::Sum, n->dtype, {P(k)}, nullptr, /*fma=*/true};
    // A transposed right operand is contiguous in k (dot products); otherwise its rows
    // are contiguous in j, and whole rows of the output accumulate together.
    red.block_inner = b->op != OpKind::Permute && n->shape[r - 1] > 1;
    if (red.block_inner) launch_.min_chunk = n->shape[r - 1]; // blocks of a row share the A loads
    red.value = op(ScalarOp::Mul, n->dtype, {compute(a, ai, nullptr), compute(b, bi, nullptr)});
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
  case Kind::Recompute: s = "recomputing " + describe(node) + " in each kernel that reads it: " + why; break;
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
  fusion::Fusion fused(outputs, options);
  Partition& part = fused.partition;
  const fusion::Grouping& groups = fused.groups;
  Schedule s;
  for (const std::vector<const Node*>& roots : groups.kernels) {
    std::vector<bool> stored;
    for (const Node* r : roots) stored.push_back(!groups.internal(r));
    s.launches.push_back(KernelBuilder(part, roots, std::move(stored), options.target).build());
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

} // namespace kiln::codegen

#include "graph/verify.h"

#include <algorithm>
#include <numeric>

#include "graph/build.h"
#include "graph/op_cases.h"

namespace kiln::graph {

bool is_float_only(OpKind op) { return op_types(op) == OpTypes::Float; }

bool returns_bool(OpKind op) { return op_types(op) == OpTypes::Bool; }

namespace {

std::string check_leaf(OpKind op, DType dtype, const Shape& shape) {
  if (op == OpKind::Arange && (shape.size() != 1 || dtype == DType::Bool)) return "arange is 1-d and numeric";
  if ((op == OpKind::Rand || op == OpKind::Randn) && !is_floating(dtype)) return "rand needs a float dtype";
  return "";
}

std::string check_elementwise(OpKind op, DType dtype, const Shape& shape, const std::vector<NodeRef>& in) {
  for (const NodeRef& x : in)
    if (x->shape != shape) return "operand shape " + shape_str(x->shape) + " differs from " + shape_str(shape);
  if (op == OpKind::Cast) return "";
  if (op == OpKind::Detach) return in[0]->dtype == dtype ? "" : "detach keeps the dtype";
  if (op == OpKind::CheckIndex)
    return in[0]->dtype == dtype && (dtype == DType::Int32 || dtype == DType::Int64) ? "" : "check_index takes an integer index";
  if (op == OpKind::Where) {
    if (in[0]->dtype != DType::Bool) return "condition must be bool";
    if (in[1]->dtype != dtype || in[2]->dtype != dtype) return "branches must have the result dtype";
    return "";
  }
  for (const NodeRef& x : in)
    if (x->dtype != in[0]->dtype) return "operands must have one dtype";
  if (returns_bool(op)) return dtype == DType::Bool ? "" : "result must be bool";
  if (in[0]->dtype != dtype) return "result dtype must match operands";
  if (is_float_only(op) && !is_floating(dtype)) return "needs a floating dtype";
  if (dtype == DType::Bool) return "arithmetic on bool";
  return "";
}

std::string check_reduce(OpKind op, DType dtype, const Shape& shape, const NodeRef& x, const Attrs& a) {
  if (shape.size() != x->shape.size()) return "reductions keep the rank (reduced dims become 1)";
  if (!std::is_sorted(a.ints.begin(), a.ints.end()) ||
      std::adjacent_find(a.ints.begin(), a.ints.end()) != a.ints.end())
    return "dims must be sorted and unique";
  for (size_t d = 0; d < shape.size(); ++d) {
    const bool reduced = std::find(a.ints.begin(), a.ints.end(), static_cast<int64_t>(d)) != a.ints.end();
    if (shape[d] != (reduced ? 1 : x->shape[d])) return "result shape does not match reduced dims";
  }
  for (int64_t d : a.ints)
    if (d < 0 || d >= static_cast<int64_t>(shape.size())) return "dim out of range";
  if (op == OpKind::Argmax || op == OpKind::Argmin)
    return a.ints.size() == 1 && dtype == DType::Int64 ? "" : "arg-reductions take one dim and give i64";
  if (x->dtype != dtype) return "result dtype must match the operand";
  if (dtype == DType::Bool) return "reduction of bool";
  return "";
}

std::string check_permute(const Shape& shape, const NodeRef& x, const Attrs& a) {
  if (a.ints.size() != x->shape.size() || shape.size() != x->shape.size()) return "permutation of the wrong rank";
  std::vector<int64_t> sorted = a.ints;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(x->shape.size());
  std::iota(iota.begin(), iota.end(), 0);
  if (sorted != iota) return "not a permutation";
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != x->shape[a.ints[d]]) return "shape is not the permuted input shape";
  return "";
}

std::string check_slice(const Shape& shape, const NodeRef& x, const Attrs& a) {
  if (a.ints.size() != 2 * shape.size() || shape.size() != x->shape.size()) return "needs (start, step) per dim";
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t start = a.ints[2 * d], step = a.ints[2 * d + 1];
    if (step <= 0 || start < 0 || shape[d] < 0) return "bad slice parameters";
    const auto last = checked_mul(shape[d] - 1, step);
    if (shape[d] > 0 && (!last || start >= x->shape[d] - *last)) return "slice out of bounds";
  }
  return "";
}

std::string check_unfold(const Shape& shape, const NodeRef& x, const Attrs& a) {
  const auto rank = static_cast<int64_t>(x->shape.size());
  if (a.ints.size() != 4) return "needs {dim, size, step, at}";
  const int64_t dim = a.ints[0], size = a.ints[1], step = a.ints[2], at = a.ints[3];
  if (dim < 0 || dim >= rank || at < 0 || at > rank) return "dim or window position out of range";
  if (step <= 0 || size < 0 || size > x->shape[static_cast<size_t>(dim)]) return "bad window size or step";
  if (shape != unfold_shape(x->shape, dim, size, step, at)) return "shape is not the unfolded input shape";
  return "";
}

// torch.gather's rules: same rank, the index's shape, no larger than x off the dim; an empty x
// along the dim has no valid index.
std::string check_gather(const Shape& shape, const NodeRef& x, const NodeRef& index, const Attrs& a) {
  if (!is_integral(index->dtype)) return "the index must be an integer tensor";
  if (a.ints.size() != 1 || a.ints[0] < 0 || a.ints[0] >= static_cast<int64_t>(shape.size())) return "bad dim";
  if (index->shape != shape || x->shape.size() != shape.size()) return "the result has the index's shape and rank";
  for (size_t d = 0; d < shape.size(); ++d)
    if (static_cast<int64_t>(d) != a.ints[0] && shape[d] > x->shape[d]) return "the index is larger than x off the dim";
  if (x->shape[a.ints[0]] == 0 && numel(shape) > 0) return "gathering from an empty dim";
  return "";
}

std::string check_movement(OpKind op, const Shape& shape, const std::vector<NodeRef>& in, const Attrs& a) {
  const NodeRef& x = in[0];
  switch (op) {
  case OpKind::Reshape: return numel(shape) == x->numel() ? "" : "reshape changes the element count";
  case OpKind::Permute: return check_permute(shape, x, a);
  case OpKind::Expand:
    if (shape.size() != x->shape.size()) return "expand keeps the rank";
    for (size_t d = 0; d < shape.size(); ++d)
      if (x->shape[d] != 1 && x->shape[d] != shape[d]) return "expand of a non-1 dim";
    return "";
  case OpKind::Slice: return check_slice(shape, x, a);
  case OpKind::Unfold: return check_unfold(shape, x, a);
  case OpKind::Pad:
    if (a.ints.size() != 2 * shape.size() || shape.size() != x->shape.size()) return "needs (before, after) per dim";
    for (size_t d = 0; d < shape.size(); ++d)
      if (a.ints[2 * d] < 0 || a.ints[2 * d + 1] < 0 || padded_extent(x->shape[d], a.ints[2 * d], a.ints[2 * d + 1]) != shape[d])
        return "bad padding";
    return "";
  case OpKind::Concat: {
    if (a.ints.size() != 1 || a.ints[0] < 0 || a.ints[0] >= static_cast<int64_t>(shape.size())) return "bad dim";
    std::optional<int64_t> total = 0;
    for (const NodeRef& y : in) {
      if (y->shape.size() != shape.size()) return "operands differ in rank";
      for (size_t d = 0; d < shape.size(); ++d)
        if (static_cast<int64_t>(d) != a.ints[0] && y->shape[d] != shape[d]) return "operands differ off the dim";
      total = total ? checked_add(*total, y->shape[a.ints[0]]) : std::nullopt;
    }
    return total == shape[a.ints[0]] ? "" : "concat extent mismatch";
  }
  case OpKind::Gather: return check_gather(shape, x, in[1], a);
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Movement, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
    break;
  }
  return "not a movement op";
}

// Scans: a dim and a direction; cumsum, cumprod, cummax, cummin and logcumsumexp (floating) keep x's shape and dtype;
// the scatters (scatter_add, scatter_mul, scatter_max, scatter_min) have src's dtype and the index's shape but along
// the dim; argsort (a dim and descending) gives i64 of x's shape, x of any dtype.
std::string check_scan(OpKind op, DType dtype, const Shape& shape, const std::vector<NodeRef>& in, const Attrs& a) {
  if (a.ints.size() != 2 || a.ints[0] < 0 || a.ints[0] >= static_cast<int64_t>(shape.size())) return "needs (dim, reverse)";
  const NodeRef& x = in.back();
  if (op == OpKind::Argsort) // any input dtype: the positions along the dim, i64
    return dtype == DType::Int64 && x->shape == shape ? "" : "argsort gives i64 positions of the input's shape";
  if (x->dtype != dtype || dtype == DType::Bool) return "the result has the (non-bool) input's dtype";
  if (op == OpKind::Logcumsumexp && !is_floating(dtype)) return "logcumsumexp needs a floating dtype";
  if (!is_scatter(op)) return x->shape == shape ? "" : "a scan keeps the shape";
  const NodeRef& index = in[0];
  if (!is_integral(index->dtype)) return "the index must be an integer tensor";
  if (index->shape != x->shape || shape.size() != x->shape.size()) return "src must have the index's shape";
  for (size_t d = 0; d < shape.size(); ++d)
    if (static_cast<int64_t>(d) != a.ints[0] && shape[d] != x->shape[d]) return "the result has the index's shape off the dim";
  return "";
}

std::string check_matmul(DType dtype, const Shape& shape, const NodeRef& a, const NodeRef& b) {
  const size_t r = shape.size();
  if (r < 2 || a->shape.size() != r || b->shape.size() != r) return "operands must have the result's rank >= 2";
  for (size_t d = 0; d + 2 < r; ++d)
    if (a->shape[d] != shape[d] || b->shape[d] != shape[d]) return "batch dims must match the result";
  if (a->shape[r - 1] != b->shape[r - 2]) return "inner dims differ";
  if (a->shape[r - 2] != shape[r - 2] || b->shape[r - 1] != shape[r - 1]) return "result is not [M, N]";
  if (a->dtype != dtype || b->dtype != dtype || dtype == DType::Bool) return "dtype mismatch";
  return "";
}

// The attention operands q [..., L, E], k [..., S, E], v [..., S, Ev] and the mask in[mask_at] if
// present, for an attention of result [..., L, Ev] `out` (ops.def, Attention and AttentionGrad).
std::string check_attention_operands(DType dtype, const Shape& out, const std::vector<NodeRef>& in, size_t mask_at) {
  const Shape &q = in[0]->shape, &k = in[1]->shape, &v = in[2]->shape;
  const size_t r = out.size();
  if (r < 2 || q.size() != r || k.size() != r || v.size() != r) return "operands must have the result's rank >= 2";
  for (size_t d = 0; d + 2 < r; ++d)
    if (q[d] != out[d] || k[d] != out[d] || v[d] != out[d]) return "batch dims must match the result";
  if (q[r - 1] != k[r - 1]) return "q and k differ in their last dim";
  if (k[r - 2] != v[r - 2]) return "k and v differ in their number of rows";
  if (q[r - 2] != out[r - 2] || v[r - 1] != out[r - 1]) return "result is not [..., L, Ev]";
  if (dtype != DType::Float32 && dtype != DType::Float64) return "needs a floating dtype";
  for (size_t i = 0; i < mask_at; ++i)
    if (in[i]->dtype != dtype) return "dtype mismatch";
  if (in.size() == mask_at) return "";
  const NodeRef& m = in[mask_at];
  if (m->dtype != DType::Bool && m->dtype != dtype) return "the mask must be bool or of the result's dtype";
  if (m->shape.size() != r) return "the mask must have the result's rank";
  for (size_t d = 0; d < r; ++d) {
    const int64_t want = d + 1 == r ? k[r - 2] : out[d];
    if (m->shape[d] != want && m->shape[d] != 1) return "the mask must broadcast to the scores [..., L, S]";
  }
  return "";
}

// (q [..., L, E], k [..., S, E], v [..., S, Ev][, mask]) -> [..., L, Ev] (ops.def, Attention) or
// [..., L] (AttentionLse), or (q, k, v, out [..., L, Ev], dout [..., L, Ev], lse [..., L][, mask]) ->
// dq, dk or dv (AttentionGrad).
std::string check_attention(OpKind op, DType dtype, const Shape& shape, const std::vector<NodeRef>& in, const Attrs& a) {
  const bool grad = op == OpKind::AttentionGrad;
  const size_t mask_at = build::attention_mask_operand(op);
  if (in.size() != mask_at && in.size() != mask_at + 1)
    return grad ? "takes q, k, v, out, dout, lse and an optional mask" : "takes q, k, v and an optional mask";
  if (a.i0 != 0 && a.i0 != 1) return "i0 (causal) must be 0 or 1";
  // the dropout (build::AttentionDropout): none (f1 = 0, no ints), or p in (0, 1] and one seed
  if (a.ints.size() > 1 || (a.ints.empty() && a.f1 != 0) || (!a.ints.empty() && !(a.f1 > 0 && a.f1 <= 1)))
    return "the dropout must be none (f1 0, no ints) or f1 in (0, 1] with ints [seed]";
  if (op == OpKind::Attention) return check_attention_operands(dtype, shape, in, mask_at);
  if (op == OpKind::AttentionLse) {
    if (in[0]->shape.size() < 2 || in[2]->shape.empty()) return "operands must have rank >= 2";
    Shape out = in[0]->shape; // the forward's [..., L, Ev]
    out.back() = in[2]->shape.back();
    if (Shape rows(out.begin(), out.end() - 1); shape != rows) return "result is not [..., L]";
    return check_attention_operands(dtype, out, in, mask_at);
  }
  if (a.i1 < 0 || a.i1 > 2) return "i1 (which gradient) must be 0 (dq), 1 (dk) or 2 (dv)";
  if (shape != in[static_cast<size_t>(a.i1)]->shape) return "the gradient must have its operand's shape";
  const Shape& out = in[3]->shape;
  if (in[4]->shape != out) return "out and dout differ in shape";
  if (Shape rows(out.begin(), out.end() - 1); in[5]->shape != rows) return "lse is not [..., L]";
  return check_attention_operands(dtype, out, in, mask_at);
}

} // namespace

std::string check_node(OpKind op, DType dtype, const Shape& shape, const std::vector<NodeRef>& inputs,
                       const Attrs& attrs) {
  const int arity = op_arity(op);
  if (arity >= 0 && static_cast<int>(inputs.size()) != arity) return "wrong number of operands";
  if (arity < 0 && inputs.empty()) return "needs at least one operand";
  if (std::string err = shape_error(shape); !err.empty()) return err;
  for (const NodeRef& x : inputs)
    if (!x) return "null operand";
  // A custom output's further operands are its call's inputs: they may live elsewhere (to(device)).
  const size_t on_device = op == OpKind::CustomOutput ? 1 : inputs.size();
  for (size_t k = 1; k < on_device; ++k)
    if (inputs[k]->device != inputs[0]->device)
      return "operands on different devices (" + inputs[0]->device.str() + " and " + inputs[k]->device.str() + ")";
  switch (op_category(op)) {
  case OpCategory::Leaf: return check_leaf(op, dtype, shape);
  case OpCategory::Unary:
  case OpCategory::Binary:
  case OpCategory::Ternary: return check_elementwise(op, dtype, shape, inputs);
  case OpCategory::Reduce: return check_reduce(op, dtype, shape, inputs[0], attrs);
  case OpCategory::Movement:
    for (const NodeRef& x : inputs)
      if (x->dtype != dtype && !(op == OpKind::Gather && x == inputs[1])) return "movement keeps the dtype";
    return check_movement(op, shape, inputs, attrs);
  case OpCategory::Scan: return check_scan(op, dtype, shape, inputs, attrs);
  case OpCategory::Contraction: return check_matmul(dtype, shape, inputs[0], inputs[1]);
  case OpCategory::Attention: return check_attention(op, dtype, shape, inputs, attrs);
  case OpCategory::Custom: // the identity of operand 0
    return inputs[0]->dtype == dtype && inputs[0]->shape == shape ? "" : "a custom output keeps its value's dtype and shape";
  }
  return "unknown category";
}

std::string verify(const std::vector<NodeRef>& roots) {
  std::vector<const Node*> raw;
  for (const NodeRef& r : roots) raw.push_back(r.get());
  for (const Node* n : topo_order(raw)) {
    const std::string err = check_node(n->op, n->dtype, n->shape, n->inputs, n->attrs);
    if (!err.empty()) return std::string(op_name(n->op)) + " " + shape_str(n->shape) + ": " + err;
  }
  return "";
}

} // namespace kiln::graph

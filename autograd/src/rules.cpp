// The per-op VJP and JVP rules. Elementwise ops have a diagonal Jacobian, so one
// function, `times_partial` (v ⊙ ∂y/∂operand), serves both modes: the VJP of an
// elementwise op is the same product applied to the adjoint, the JVP the sum of
// the products over the operands' tangents. Every switch lists all ops.

#include "autograd/rules.h"
#include "autograd/custom.h"
#include "autograd/walk.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "graph/build.h"
#include "graph/op_cases.h"
#include "kiln/error.h"

namespace kiln::autograd {

namespace {

namespace b = graph::build;
using graph::OpKind;
using graph::Shape;

NodeRef zeros_like(const NodeRef& x) { return b::constant_like(x, 0); }
NodeRef cst(const NodeRef& like, double v) { return b::constant_like(like, v); }
NodeRef cmp(OpKind op, const NodeRef& x, double v) { return b::binary(op, x, cst(x, v)); }
NodeRef keep_where(const NodeRef& cond, const NodeRef& v) { return b::where(cond, v, zeros_like(v)); }

// x + y where either may be null (a zero tangent).
NodeRef add_opt(const NodeRef& x, const NodeRef& y) {
  if (!x) return y;
  if (!y) return x;
  return b::add(x, y);
}

[[noreturn]] void missing_rule(const NodeRef& y, const char* mode) {
  throw Error("grad", std::string("no ") + mode + " rule for op '" + std::string(graph::op_name(y->op)) + "' (" +
                          std::string(dtype_name(y->dtype)) + graph::shape_str(y->shape) + ")");
}

// ---------------------------------------------------------------- elementwise

// 0 where the operand loses, v/2 where it ties (split evenly), else v: PyTorch's maximum and minimum,
// whose masks make a NaN on either side send the whole gradient to both operands.
NodeRef tie_split(const NodeRef& loses, const NodeRef& ties, const NodeRef& v) {
  return b::where(loses, zeros_like(v), b::where(ties, b::scale(v, 0.5), v));
}

// d/da a^b = b a^(b-1), zero where b == 0 (so that 0^0 gives 0, not 0 * inf).
NodeRef pow_base(const NodeRef& a, const NodeRef& e, const NodeRef& v) {
  if (e->op == OpKind::Const && e->attrs.f0 == 0) return zeros_like(v);
  const bool fixed = e->op == OpKind::Const; // fold e - 1 for constant exponents (x^2, x^0.5)
  NodeRef e1 = fixed ? b::constant(e->attrs.f0 - 1, e->dtype, e->shape, e->device) : b::sub(e, cst(e, 1));
  NodeRef d = b::mul(v, b::mul(e, b::binary(OpKind::Pow, a, e1)));
  if (fixed) return d; // a non-zero constant exponent needs no mask
  return b::where(cmp(OpKind::Eq, e, 0), zeros_like(v), d);
}

// d/db a^b = a^b log(a), zero where a == 0 and b >= 0 (PyTorch's choice: the limit from a > 0).
NodeRef pow_exponent(const NodeRef& y, const NodeRef& v) {
  const NodeRef &a = y->inputs[0], &e = y->inputs[1];
  NodeRef d = b::mul(v, b::mul(y, b::unary(OpKind::Log, a)));
  NodeRef at_zero = b::binary(OpKind::LogicalAnd, cmp(OpKind::Eq, a, 0), cmp(OpKind::Ge, e, 0));
  return b::where(at_zero, zeros_like(v), d);
}

// 1 / sqrt(1 - x^2), asin's derivative (PyTorch's (-x * x + 1).rsqrt()).
NodeRef one_minus_square_rsqrt(const NodeRef& x) { return b::unary(OpKind::Rsqrt, b::sub(cst(x, 1), b::mul(x, x))); }

// atan2(y, x)'s partials times v, PyTorch's: v x / (x^2 + y^2) for y (k = 0), -v y / (x^2 + y^2) for x
// (NaN at (0, 0), as PyTorch's 0 * inf).
NodeRef atan2_partial(const NodeRef& y, const NodeRef& x, size_t k, const NodeRef& v) {
  const NodeRef recip = b::unary(OpKind::Reciprocal, b::add(b::mul(y, y), b::mul(x, x)));
  return k == 0 ? b::mul(b::mul(v, x), recip) : b::mul(b::mul(v, b::neg(y)), recip);
}

// v ⊙ ∂y/∂(operand k) for an elementwise y, in v's dtype; null when operand k gets
// no gradient. Cast returns v unchanged (float <-> float): the caller casts it.
NodeRef times_partial(const NodeRef& y, size_t k, const NodeRef& v) {
  const NodeRef& x = y->inputs[0];
  const NodeRef& c = y->inputs.size() > 1 ? y->inputs[1] : x;
  switch (y->op) {
  case OpKind::Neg: return b::neg(v);
  case OpKind::Abs: return b::where(cmp(OpKind::Gt, x, 0), v, keep_where(cmp(OpKind::Lt, x, 0), b::neg(v)));
  case OpKind::Exp: return b::mul(v, y);
  case OpKind::Expm1: return b::mul(v, b::add(y, cst(y, 1)));
  case OpKind::Log: return b::div(v, x);
  case OpKind::Log1p: return b::div(v, b::add(x, cst(x, 1)));
  case OpKind::Sqrt: return b::div(v, b::scale(y, 2));
  case OpKind::Rsqrt: return b::mul(v, b::scale(b::mul(y, b::mul(y, y)), -0.5)); // -x^(-3/2) / 2
  case OpKind::Sin: return b::mul(v, b::unary(OpKind::Cos, x));
  case OpKind::Cos: return b::neg(b::mul(v, b::unary(OpKind::Sin, x)));
  case OpKind::Tanh: return b::mul(v, b::sub(cst(y, 1), b::mul(y, y)));
  case OpKind::Sigmoid: return b::mul(v, b::mul(y, b::sub(cst(y, 1), y)));
  case OpKind::Erf: return b::mul(v, b::scale(b::unary(OpKind::Exp, b::neg(b::mul(x, x))), M_2_SQRTPI));
  case OpKind::Tan: return b::mul(v, b::add(cst(y, 1), b::mul(y, y))); // 1 + tan^2
  case OpKind::Atan: return b::div(v, b::add(b::mul(x, x), cst(x, 1))); // 1 / (1 + x^2)
  case OpKind::Asin: return b::mul(v, one_minus_square_rsqrt(x)); // 1 / sqrt(1 - x^2)
  case OpKind::Acos: return b::neg(b::mul(v, one_minus_square_rsqrt(x))); // -1 / sqrt(1 - x^2)
  case OpKind::Sinh: return b::mul(v, b::unary(OpKind::Cosh, x));
  case OpKind::Cosh: return b::mul(v, b::unary(OpKind::Sinh, x));
  case OpKind::Asinh: return b::mul(v, b::unary(OpKind::Rsqrt, b::add(b::mul(x, x), cst(x, 1))));
  case OpKind::Acosh: return b::mul(v, b::unary(OpKind::Rsqrt, b::sub(b::mul(x, x), cst(x, 1))));
  case OpKind::Atanh: return b::div(v, b::sub(cst(x, 1), b::mul(x, x))); // 1 / (1 - x^2)
  case OpKind::Log2: return b::div(v, b::scale(x, M_LN2)); // 1 / (x ln2), as PyTorch's
  case OpKind::Log10: return b::div(v, b::scale(x, M_LN10));
  case OpKind::Exp2: return b::mul(v, b::scale(y, M_LN2));
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Round:
  case OpKind::Trunc: return zeros_like(v); // piecewise constant (as PyTorch)
  case OpKind::Relu: return b::where(cmp(OpKind::Le, x, 0), zeros_like(v), v); // NaN passes v, as PyTorch's
  case OpKind::Reciprocal: return b::neg(b::mul(v, b::mul(y, y)));
  case OpKind::Cast: return is_floating(x->dtype) && is_floating(y->dtype) ? v : nullptr; // none for int/bool
  case OpKind::Detach: return nullptr; // blocks gradients by definition
  case OpKind::Add: return v;
  case OpKind::Sub: return k == 0 ? v : b::neg(v);
  case OpKind::Mul: return b::mul(v, k == 0 ? c : x);
  case OpKind::Div: return k == 0 ? b::div(v, c) : b::neg(b::div(b::mul(v, y), c));
  case OpKind::Pow: return k == 0 ? pow_base(x, c, v) : pow_exponent(y, v);
  case OpKind::Atan2: return atan2_partial(x, c, k, v);
  case OpKind::Fmod: return k == 0 ? v : b::neg(b::mul(v, b::unary(OpKind::Trunc, b::div(x, c)))); // -trunc(x / c)
  case OpKind::Remainder: return k == 0 ? v : b::neg(b::mul(v, b::unary(OpKind::Floor, b::div(x, c)))); // -floor(x / c)
  case OpKind::Maximum:
    return tie_split(k == 0 ? b::binary(OpKind::Lt, x, c) : b::binary(OpKind::Lt, c, x), b::binary(OpKind::Eq, x, c), v);
  case OpKind::Minimum:
    return tie_split(k == 0 ? b::binary(OpKind::Gt, x, c) : b::binary(OpKind::Gt, c, x), b::binary(OpKind::Eq, x, c), v);
  case OpKind::Where: // no gradient to the condition
    if (k == 0) return nullptr;
    return k == 1 ? keep_where(x, v) : b::where(x, zeros_like(v), v);
  case OpKind::LogicalNot: case OpKind::Eq: case OpKind::Ne: case OpKind::Lt: case OpKind::Le:
  case OpKind::Gt: case OpKind::Ge: case OpKind::LogicalAnd: case OpKind::LogicalOr: case OpKind::CheckIndex:
    missing_rule(y, "derivative"); // bool and integer results: the walks never ask
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_ELEMENTWISE_##cat(case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
    break;
  }
  KILN_ASSERT(false, "times_partial of a non-elementwise op");
  return nullptr;
}

std::vector<NodeRef> elementwise_vjp(const NodeRef& y, const NodeRef& g) {
  std::vector<NodeRef> out;
  for (size_t k = 0; k < y->inputs.size(); ++k) {
    NodeRef d = times_partial(y, k, g);
    out.push_back(d ? b::cast(d, y->inputs[k]->dtype) : nullptr);
  }
  return out;
}

NodeRef elementwise_jvp(const NodeRef& y, const std::vector<NodeRef>& t) {
  NodeRef sum;
  for (size_t k = 0; k < y->inputs.size(); ++k)
    if (t[k]) sum = add_opt(sum, times_partial(y, k, t[k]));
  return sum ? b::cast(sum, y->dtype) : nullptr;
}

// ---------------------------------------------------------------- reductions

// Max/Min send the gradient to the elements equal to the result, split evenly
// among ties (PyTorch's amax/amin): deterministic, and the average of the
// one-sided derivatives for a two-way tie, so finite differences agree.
struct Extremum {
  NodeRef mask;  // 1 where x equals the reduced value, else 0 (x's shape)
  NodeRef count; // number of ties per reduced slot (y's shape)
};

Extremum extremum(const NodeRef& y) {
  const NodeRef& x = y->inputs[0];
  NodeRef mask = b::cast(b::binary(OpKind::Eq, x, b::broadcast_to(y, x->shape)), x->dtype);
  return {mask, b::reduce(OpKind::Sum, mask, y->attrs.ints)};
}

std::vector<NodeRef> reduce_vjp(const NodeRef& y, const NodeRef& g) {
  const NodeRef& x = y->inputs[0];
  if (y->op == OpKind::Sum) return {b::broadcast_to(g, x->shape)};
  const Extremum e = extremum(y);
  return {b::mul(b::broadcast_to(b::div(g, e.count), x->shape), e.mask)};
}

NodeRef reduce_jvp(const NodeRef& y, const NodeRef& t) {
  if (y->op == OpKind::Sum) return b::reduce(OpKind::Sum, t, y->attrs.ints);
  const Extremum e = extremum(y);
  return b::div(b::reduce(OpKind::Sum, b::mul(t, e.mask), y->attrs.ints), e.count);
}

// ---------------------------------------------------------------- movement

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inv[perm[d]] = static_cast<int64_t>(d);
  return inv;
}

// Along dim d, moves element i to position i*step with zeros between (pad each
// element to length `step` in a new inner dim, then merge the dims), and keeps
// at most `limit` positions (the tail past the last element is dropped).
NodeRef spread(const NodeRef& r, size_t d, int64_t step, int64_t limit) {
  const size_t rank = r->shape.size();
  const int64_t n = r->shape[d];
  Shape split = r->shape;
  split.insert(split.begin() + static_cast<int64_t>(d) + 1, 1);
  std::vector<int64_t> before(rank + 1, 0), after(rank + 1, 0);
  after[d + 1] = step - 1;
  Shape merged = r->shape;
  merged[d] = n * step;
  NodeRef t = b::reshape(b::pad(b::reshape(r, split), before, after, 0), merged);
  if (limit >= n * step) return t;
  Shape kept = merged;
  kept[d] = limit;
  return b::slice(t, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), kept);
}

// The starts (which = 0) or steps (1) of a Slice's (start, step) pairs, or a Pad's befores or afters.
std::vector<int64_t> slice_part(const std::vector<int64_t>& ints, size_t which) {
  std::vector<int64_t> out;
  for (size_t d = which; d < ints.size(); d += 2) out.push_back(ints[d]);
  return out;
}

// g placed at positions start + i * step (per dim) of zeros of `shape`: the adjoint of a strided slice.
NodeRef place_strided(const NodeRef& g, const Shape& shape, const std::vector<int64_t>& starts,
                      const std::vector<int64_t>& steps) {
  const size_t rank = shape.size();
  NodeRef r = g;
  std::vector<int64_t> before(rank), after(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (steps[d] > 1 && g->shape[d] > 1) r = spread(r, d, steps[d], shape[d] - starts[d]);
    before[d] = starts[d];
    after[d] = shape[d] - starts[d] - r->shape[d];
  }
  return b::pad(r, before, after, 0);
}

// The adjoint of a strided slice: the gradient placed at the sliced positions of zeros.
NodeRef unslice(const NodeRef& y, const NodeRef& g) {
  const NodeRef& x = y->inputs[0];
  if (y->numel() == 0) return zeros_like(x);
  return place_strided(g, x->shape, slice_part(y->attrs.ints, 0), slice_part(y->attrs.ints, 1));
}

// The adjoint of unfold: window element k of every window goes back to x at w * step + k along
// dim, summed over k in order (windows overlap where step < size).
NodeRef ununfold(const NodeRef& y, const NodeRef& g) {
  const NodeRef& x = y->inputs[0];
  const auto& a = y->attrs.ints;
  const size_t dim = static_cast<size_t>(a[0]), at = static_cast<size_t>(a[3]), rank = x->shape.size();
  if (y->numel() == 0) return zeros_like(x);
  Shape rest = y->shape; // the windows' shape: x's, with the window count along dim
  rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(at));
  NodeRef sum;
  for (int64_t k = 0; k < a[1]; ++k) {
    std::vector<int64_t> starts(rank + 1, 0), steps(rank + 1, 1);
    starts[at] = k;
    Shape one = y->shape;
    one[at] = 1;
    const NodeRef gk = b::reshape(b::slice(g, starts, steps, one), rest);
    std::vector<int64_t> at_k(rank, 0), step_k(rank, 1);
    at_k[dim] = k;
    step_k[dim] = a[2];
    sum = add_opt(sum, place_strided(gk, x->shape, at_k, step_k));
  }
  return sum;
}

NodeRef unpad(const NodeRef& y, const NodeRef& g) {
  const NodeRef& x = y->inputs[0];
  std::vector<int64_t> starts, steps(x->shape.size(), 1);
  for (size_t d = 0; d < x->shape.size(); ++d) starts.push_back(y->attrs.ints[2 * d]);
  return b::slice(g, starts, steps, x->shape);
}

std::vector<NodeRef> unconcat(const NodeRef& y, const NodeRef& g) {
  const int64_t dim = y->attrs.ints[0];
  const size_t rank = y->shape.size();
  std::vector<NodeRef> out;
  int64_t offset = 0;
  for (const NodeRef& x : y->inputs) {
    std::vector<int64_t> starts(rank, 0);
    starts[dim] = offset;
    out.push_back(x->numel() == 0 ? zeros_like(x) : b::slice(g, starts, std::vector<int64_t>(rank, 1), x->shape));
    offset += x->shape[dim];
  }
  return out;
}

NodeRef concat_jvp(const NodeRef& y, const std::vector<NodeRef>& t) {
  std::vector<NodeRef> parts;
  for (size_t k = 0; k < t.size(); ++k) parts.push_back(t[k] ? t[k] : zeros_like(y->inputs[k]));
  return b::concat(parts, y->attrs.ints[0]);
}

// ---------------------------------------------------------------- matmul

// Whether x is a matrix broadcast over batch dims (a convolution's weight, per sample) whose rows
// are shorter than a vector of 16 floats and more than their length: its gradient, a batched
// product summed over the batch (so no elementwise epilogue is lost), is better computed
// transposed (matmul_vjp).
bool broadcast_with_short_rows(const graph::Node& x) {
  const size_t r = x.shape.size();
  return x.op == OpKind::Expand && r >= 3 && x.shape[r - 1] < 16 && x.shape[r - 2] > x.shape[r - 1];
}

// y = a c with same-rank batched operands: ga = g c^T, gc = a^T g. An operand that is itself a
// transpose (Linear's x W^T; attention's q k^T, where k^T also moves the heads dim) gets its
// gradient as the transpose of the swapped product ((c g^T)^T, (g^T a)^T), which the permute's
// rule permutes back (build::permute folds the pair into one): the GEMM then writes rows along
// the last dim of the tensor underneath, not a transposed layout that its consumer (an optimizer
// update, attention's gradient assembly) reads with strides, one gathered element at a time.
// A broadcast operand's gradient with short rows and more of them than their length (a 3 x 3
// convolution's weight gradient on one input channel, [32, 9] a sample) is computed the same
// way: GEMM kernels vectorize along the product's last dim, which then is the long one ([9, 32]:
// a CPU register tile 75% full instead of 25%).
// Each element is the same fma chain over k, so the bits do not change.
std::vector<NodeRef> matmul_vjp(const NodeRef& y, const NodeRef& g) {
  const NodeRef &a = y->inputs[0], &c = y->inputs[1];
  const NodeRef ga = b::moves_last_dim_second_to_last(*a) || broadcast_with_short_rows(*a)
                         ? b::transpose_last(b::matmul(c, b::transpose_last(g)))
                         : b::matmul(g, b::transpose_last(c));
  const NodeRef gc = b::moves_last_dim_second_to_last(*c) || broadcast_with_short_rows(*c)
                         ? b::transpose_last(b::matmul(b::transpose_last(g), a))
                         : b::matmul(b::transpose_last(a), g);
  return {ga, gc};
}

NodeRef matmul_jvp(const NodeRef& y, const std::vector<NodeRef>& t) {
  const NodeRef &a = y->inputs[0], &c = y->inputs[1];
  return add_opt(t[0] ? b::matmul(t[0], c) : nullptr, t[1] ? b::matmul(a, t[1]) : nullptr);
}

// ---------------------------------------------------------------- attention

// O = P v with P = softmax(S), S = q k^T * scale (masked): the weights P recomputed as a
// composite of primitives (build::attention_weights), so gradients of gradients need nothing more.
NodeRef attention_weights_of(const NodeRef& y) {
  const NodeRef mask = y->inputs.size() > 3 ? y->inputs[3] : nullptr;
  return b::attention_weights(y->inputs[0], y->inputs[1], mask, y->attrs.f0, y->attrs.i0 != 0);
}

// The dropout factor of y's weights p (build::attention_dropout_factor), null without dropout.
NodeRef attention_dropout_of(const NodeRef& y, const NodeRef& p) {
  return b::attention_dropout_factor(b::attention_dropout(*y), p->dtype, p->shape, p->device);
}

// The fused backward: one AttentionGrad node per operand (build::attention_grad), which fusion gives
// one kernel (the attention form, on the CPU and on CUDA); a float mask's gradient is the composite's
// dS summed to its shape.
std::vector<NodeRef> attention_vjp(const NodeRef& y, const NodeRef& g) {
  const NodeRef &q = y->inputs[0], &k = y->inputs[1], &v = y->inputs[2];
  const NodeRef mask = y->inputs.size() > 3 ? y->inputs[3] : nullptr;
  const double scale = y->attrs.f0;
  const bool causal = y->attrs.i0 != 0;
  const b::AttentionDropout dropout = b::attention_dropout(*y);
  std::vector<NodeRef> out;
  const NodeRef lse = b::attention_lse(q, k, v, mask, scale, causal, dropout); // stored by y's kernel (fusion.h)
  for (auto which : {b::AttentionGradOf::Q, b::AttentionGradOf::K, b::AttentionGradOf::V})
    out.push_back(b::attention_grad(q, k, v, y, g, lse, mask, scale, causal, which, dropout));
  if (mask)
    out.push_back(mask->dtype == DType::Bool ? nullptr : b::attention_grads_composite(q, k, v, g, mask, scale, causal, dropout)[3]);
  return out;
}

// An AttentionGrad node y (q, k, v, out, dout, lse[, mask]) is, as a function of its operands, the
// composite gradient of its kind (build::attention_grads_composite); an AttentionLse node (q, k, v[,
// mask]) the composite logsumexp (build::attention_logsumexp). Their rules differentiate the
// composite, so gradients of gradients and tangents through attention need nothing more. The
// gradient composite reads neither `out` nor `lse` (its D = rowsum(dP * P) equals the kernel's
// rowsum(dout * out), and its P the kernel's exp(s - lse), exactly when out and lse are the forward's
// of the same q, k, v and mask, which is what attention_vjp builds): they get no gradient of their
// own, and what the kernel's D and p depend on reaches q, k, v and the mask through the composite's P.
//
// The rules need partial derivatives (each operand moved alone), while a walk from the composite
// to the operands themselves would also follow dout back into out and q (dout usually depends on
// them): the composite is built on stand-ins (autograd's fresh placeholders), differentiated with
// respect to them, and the stand-ins then replaced by the operands.
struct AttentionStandIns {
  std::vector<NodeRef> operands;  // y's operands
  std::vector<NodeRef> stand_ins; // for the floating operands the composite reads; null for the others
  NodeRef composite;
};

// Whether y's composite reads its operand i (AttentionGrad: not out, 3, nor lse, 5; AttentionLse: not v, 2).
bool composite_reads(const graph::Node& y, size_t i) {
  return y.op == OpKind::AttentionGrad ? i != 3 && i != 5 : i != 2;
}

AttentionStandIns attention_stand_ins(const NodeRef& y) {
  AttentionStandIns s;
  std::vector<NodeRef> in;
  for (size_t i = 0; i < y->inputs.size(); ++i) {
    const NodeRef& x = y->inputs[i];
    const bool stand = composite_reads(*y, i) && is_floating(x->dtype);
    s.operands.push_back(x);
    s.stand_ins.push_back(stand ? fresh_zeros(x) : nullptr);
    in.push_back(stand ? s.stand_ins.back() : x);
  }
  const size_t mask_at = b::attention_mask_operand(y->op);
  const NodeRef mask = in.size() > mask_at ? in[mask_at] : nullptr;
  const double scale = y->attrs.f0;
  const bool causal = y->attrs.i0 != 0;
  s.composite = y->op == OpKind::AttentionLse
                    ? b::attention_logsumexp(in[0], in[1], mask, scale, causal)
                    : b::attention_grads_composite(in[0], in[1], in[2], in[4], mask, scale, causal,
                                                   b::attention_dropout(*y))[static_cast<size_t>(y->attrs.i1)];
  return s;
}

// x with the nodes `memo` maps replaced (rebuilt up to them: nodes without operands stay).
NodeRef substitute(const NodeRef& x, std::unordered_map<const graph::Node*, NodeRef>& memo) {
  if (!x) return nullptr;
  if (auto it = memo.find(x.get()); it != memo.end()) return it->second;
  std::vector<NodeRef> in;
  bool same = true;
  for (const NodeRef& i : x->inputs) {
    in.push_back(substitute(i, memo));
    same = same && in.back() == i;
  }
  NodeRef r = same ? x : graph::make_node(x->op, x->dtype, x->shape, std::move(in), x->attrs, x->device);
  memo.emplace(x.get(), r);
  return r;
}

// Replaces the stand-ins of `s` in `results` by the operands; `keep` (the seed or the tangents) and
// the operands not stood in for (a bool mask) stay as they are (and are not walked into).
std::vector<NodeRef> from_stand_ins(const AttentionStandIns& s, std::vector<NodeRef> results, const std::vector<NodeRef>& keep) {
  std::unordered_map<const graph::Node*, NodeRef> memo;
  for (size_t i = 0; i < s.stand_ins.size(); ++i)
    if (s.stand_ins[i]) memo.emplace(s.stand_ins[i].get(), s.operands[i]);
    else memo.emplace(s.operands[i].get(), s.operands[i]);
  for (const NodeRef& k : keep)
    if (k) memo.emplace(k.get(), k);
  for (NodeRef& r : results) r = substitute(r, memo);
  return results;
}

std::vector<NodeRef> attention_composite_vjp(const NodeRef& y, const NodeRef& g) {
  const AttentionStandIns s = attention_stand_ins(y);
  std::vector<NodeRef> targets;
  for (const NodeRef& x : s.stand_ins)
    if (x) targets.push_back(x);
  const std::vector<NodeRef> got = from_stand_ins(s, vjp({s.composite}, {g}, targets), {g});
  std::vector<NodeRef> out(y->inputs.size());
  for (size_t i = 0, t = 0; i < out.size(); ++i)
    if (s.stand_ins[i]) out[i] = got[t++];
  return out;
}

NodeRef attention_composite_jvp(const NodeRef& y, const std::vector<NodeRef>& t) {
  const AttentionStandIns s = attention_stand_ins(y);
  std::vector<NodeRef> primals, tangents;
  for (size_t i = 0; i < t.size(); ++i)
    if (s.stand_ins[i] && t[i]) primals.push_back(s.stand_ins[i]), tangents.push_back(t[i]);
  if (primals.empty()) return nullptr; // only out, lse or v move, of which y does not depend (see above)
  return from_stand_ins(s, jvp({s.composite}, primals, tangents), tangents)[0];
}

// tO = (tP Z) v + (P Z) tv with tS = (tq k^T + q tk^T) * scale + tmask, tP = P * (tS - rowsum(P * tS))
// and Z the dropout factor (1 without dropout).
NodeRef attention_jvp(const NodeRef& y, const std::vector<NodeRef>& t) {
  const NodeRef &q = y->inputs[0], &k = y->inputs[1], &v = y->inputs[2];
  const NodeRef p = attention_weights_of(y);
  const NodeRef z = attention_dropout_of(y, p);
  auto dropped = [&](const NodeRef& w) { return z ? b::mul(w, z) : w; };
  NodeRef ts;
  if (t[0]) ts = b::scale(b::matmul(t[0], b::transpose_last(k)), y->attrs.f0);
  if (t[1]) ts = add_opt(ts, b::scale(b::matmul(q, b::transpose_last(t[1])), y->attrs.f0));
  if (t.size() > 3 && t[3]) ts = add_opt(ts, b::broadcast_to(t[3], p->shape));
  NodeRef out = t[2] ? b::matmul(dropped(p), t[2]) : nullptr;
  if (!ts) return out;
  const int64_t last = static_cast<int64_t>(p->shape.size()) - 1;
  const NodeRef dot = b::broadcast_to(b::reduce(OpKind::Sum, b::mul(p, ts), {last}), p->shape);
  return add_opt(out, b::matmul(dropped(b::mul(p, b::sub(ts, dot))), v));
}

// The positions of a Cummax or Cummin node's values in its input (build.h, cum_extreme_index).
NodeRef extreme_index(const NodeRef& y) {
  return b::cum_extreme_index(y->inputs[0], y, y->attrs.ints[0], y->attrs.ints[1] != 0);
}

} // namespace

bool is_differentiable(const graph::Node& y) {
  return is_floating(y.dtype) && y.op != OpKind::Detach && y.op != OpKind::CustomOutput;
}

std::vector<NodeRef> vjp_rule(const NodeRef& y, const NodeRef& g) {
  const auto& a = y->attrs.ints;
  switch (y->op) {
  case OpKind::Input: case OpKind::Const: case OpKind::Arange: case OpKind::Rand: case OpKind::Randn:
    return {}; // leaves have no operands
  // every elementwise op (graph/op_cases.h); times_partial refuses bool and integer results
#define KILN_OP(e, name, arity, cat, types) KILN_IF_ELEMENTWISE_##cat(case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
    return elementwise_vjp(y, g);
  case OpKind::Argmax: case OpKind::Argmin: case OpKind::Argsort:
    break; // i64 results carry no gradient: the walk never sends an adjoint here
  case OpKind::Sum: case OpKind::Max: case OpKind::Min: return reduce_vjp(y, g);
  case OpKind::Reshape: return {b::reshape(g, y->inputs[0]->shape)};
  case OpKind::Permute: return {b::permute(g, inverse_permutation(y->attrs.ints))};
  case OpKind::Expand: return {b::sum_to(g, y->inputs[0]->shape)};
  case OpKind::Slice: return {unslice(y, g)};
  case OpKind::Unfold: return {ununfold(y, g)};
  case OpKind::Pad: return {unpad(y, g)};
  case OpKind::Concat: return unconcat(y, g);
  case OpKind::Gather: // scattered back (summed where indices repeat); the index gets none
    return {b::scatter_add(zeros_like(y->inputs[0]), y->attrs.ints[0], y->inputs[1], g), nullptr};
  case OpKind::Cumsum: return {b::cumsum(g, a[0], a[1] == 0)}; // the sums of the adjoint the other way
  case OpKind::Cumprod: return {b::cumprod_vjp(y->inputs[0], a[0], a[1] != 0, g)};
  case OpKind::Cummax:
  case OpKind::Cummin: // each adjoint element to the position its value came from
    return {b::scatter_sum(extreme_index(y), g, a[0], y->shape[a[0]])};
  case OpKind::Logcumsumexp: return {b::logcumsumexp_vjp(y->inputs[0], y, a[0], a[1] != 0, g)};
  case OpKind::ScatterAdd: return {nullptr, b::gather(g, a[0], y->inputs[0])}; // each src element's target; no index gradient
  case OpKind::ScatterMul: return {nullptr, b::mul(b::gather(g, a[0], y->inputs[0]), b::scatter_mul_partials(y))};
  case OpKind::ScatterMax:
  case OpKind::ScatterMin: // ties share their target's adjoint evenly
    return {nullptr, b::mul(b::gather(g, a[0], y->inputs[0]), b::scatter_extreme_shares(y))};
  case OpKind::Matmul: return matmul_vjp(y, g);
  case OpKind::Attention: return attention_vjp(y, g);
  case OpKind::AttentionLse: case OpKind::AttentionGrad: return attention_composite_vjp(y, g);
  case OpKind::CustomOutput: break; // the walks apply its call's rules (walk.cpp)
  }
  missing_rule(y, "VJP");
}

NodeRef jvp_rule(const NodeRef& y, const std::vector<NodeRef>& t) {
  KILN_ASSERT(t.size() == y->inputs.size(), "one tangent per operand");
  const bool none = std::none_of(t.begin(), t.end(), [](const NodeRef& n) { return n != nullptr; });
  if (none) return nullptr;
  const auto& a = y->attrs.ints;
  switch (y->op) {
  case OpKind::Input: case OpKind::Const: case OpKind::Arange: case OpKind::Rand: case OpKind::Randn:
    return nullptr; // leaves have no operands
  // every elementwise op (graph/op_cases.h); times_partial refuses bool and integer results
#define KILN_OP(e, name, arity, cat, types) KILN_IF_ELEMENTWISE_##cat(case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
    return elementwise_jvp(y, t);
  case OpKind::Argmax: case OpKind::Argmin: case OpKind::Argsort:
    break; // i64 results carry no tangent: the walk never asks
  case OpKind::Sum: case OpKind::Max: case OpKind::Min: return reduce_jvp(y, t[0]);
  case OpKind::Reshape: return b::reshape(t[0], y->shape);
  case OpKind::Permute: return b::permute(t[0], a);
  case OpKind::Expand: return b::broadcast_to(t[0], y->shape);
  case OpKind::Slice: return b::slice(t[0], slice_part(a, 0), slice_part(a, 1), y->shape);
  case OpKind::Unfold: return b::unfold(t[0], a[0], a[1], a[2], a[3]); // linear
  case OpKind::Pad: return b::pad(t[0], slice_part(a, 0), slice_part(a, 1), 0); // constant fill: zero tangent
  case OpKind::Concat: return concat_jvp(y, t);
  case OpKind::Gather: return t[0] ? b::gather(t[0], a[0], y->inputs[1]) : nullptr; // linear in x
  case OpKind::Cumsum: return b::cumsum(t[0], a[0], a[1] != 0); // linear
  case OpKind::Cumprod: return b::cumprod_jvp(y->inputs[0], a[0], a[1] != 0, t[0]);
  case OpKind::Cummax:
  case OpKind::Cummin: return b::gather(t[0], a[0], extreme_index(y)); // the value's source
  case OpKind::Logcumsumexp: return b::logcumsumexp_jvp(y->inputs[0], y, a[0], a[1] != 0, t[0]);
  case OpKind::ScatterAdd: return t[1] ? b::scatter_sum(y->inputs[0], t[1], a[0], y->shape[a[0]], a[1] != 0) : nullptr;
  case OpKind::ScatterMul: // each factor's tangent times its partial, summed at its target
    return t[1]
               ? b::scatter_sum(y->inputs[0], b::mul(t[1], b::scatter_mul_partials(y)), a[0], y->shape[a[0]], a[1] != 0)
               : nullptr;
  case OpKind::ScatterMax:
  case OpKind::ScatterMin: // the mean of the tied elements' tangents
    return t[1] ? b::scatter_sum(y->inputs[0], b::mul(t[1], b::scatter_extreme_shares(y)), a[0], y->shape[a[0]],
                                 a[1] != 0)
                : nullptr;
  case OpKind::Matmul: return matmul_jvp(y, t);
  case OpKind::Attention: return attention_jvp(y, t);
  case OpKind::AttentionLse: case OpKind::AttentionGrad: return attention_composite_jvp(y, t);
  case OpKind::CustomOutput: break; // the walks apply its call's rules (walk.cpp)
  }
  missing_rule(y, "JVP");
}

} // namespace kiln::autograd

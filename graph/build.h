#pragma once
/// \file build.h
/// Node builders for kiln's own layers (frontend ops, autograd rules). They take
/// operands that already agree (shapes broadcast, dtypes promoted) and assert it;
/// user-facing checks and promotion are the frontend's job.

#include <vector>

#include "graph/node.h"
#include "kiln/scalar.h"

namespace kiln::graph::build {

/// A constant of `dtype` broadcast to `shape` (floating value, converted for ints and bool).
NodeRef constant(double value, DType dtype, Shape shape = {}, Device device = kCPU);
/// A constant from a Scalar, exact for 64-bit integers.
NodeRef constant_of(const Scalar& value, DType dtype, Shape shape = {}, Device device = kCPU);
/// The same leaf (a constant, arange or random node: no data) on `device`; x itself when
/// it is there already. Other nodes are returned unchanged.
NodeRef leaf_on(const NodeRef& x, Device device);
/// A constant shaped, typed and placed like `like`.
NodeRef constant_like(const NodeRef& like, double value);
/// An elementwise unary op (LogicalNot gives bool; Cast: use cast()).
NodeRef unary(OpKind op, const NodeRef& x);
/// An elementwise binary op on same-shape, same-dtype operands (comparisons give bool).
NodeRef binary(OpKind op, const NodeRef& a, const NodeRef& b);
/// where(cond, a, b) on same-shape operands.
NodeRef where(const NodeRef& cond, const NodeRef& a, const NodeRef& b);
/// Conversion (identity when the dtype already matches).
NodeRef cast(const NodeRef& x, DType dtype);
/// The identity that stops gradients.
NodeRef detach(const NodeRef& x);
/// x (an integer index) checked in the kernel against [0, bound), reported for `site` (graph/index_check.h).
NodeRef check_index(const NodeRef& x, int64_t bound, int64_t site);
/// A reduction over `dims` (any order, duplicates rejected), keeping reduced dims as 1.
NodeRef reduce(OpKind op, const NodeRef& x, std::vector<int64_t> dims);
/// Same elements, new shape (identity when equal).
NodeRef reshape(const NodeRef& x, Shape shape);
/// Reorders dims (identity for the identity permutation; a permute of a permute is one permute).
NodeRef permute(const NodeRef& x, std::vector<int64_t> perm);
/// Broadcasts to `shape` by NumPy rules (adds leading dims, expands size-1 dims).
NodeRef broadcast_to(const NodeRef& x, const Shape& shape);
/// Sums a broadcast value back to `shape` (the adjoint of broadcast_to).
NodeRef sum_to(const NodeRef& x, const Shape& shape);
/// Strided slice: per dim a start and a step, with the result extents `shape`.
NodeRef slice(const NodeRef& x, std::vector<int64_t> starts, std::vector<int64_t> steps, Shape shape);
/// Constant padding: per dim elements before and after.
/// Sliding windows along dim (ops.def's Unfold): [.., (x[dim] - size) / step + 1, ..] with a
/// window dim of `size` inserted at `at`.
NodeRef unfold(const NodeRef& x, int64_t dim, int64_t size, int64_t step, int64_t at);
NodeRef pad(const NodeRef& x, std::vector<int64_t> before, std::vector<int64_t> after, const Scalar& value = 0);
/// Most pieces of one Concat node: a kernel selects among them with a chain of that depth.
inline constexpr size_t kMaxConcatPieces = 16;
/// Concatenation along `dim`; more than kMaxConcatPieces pieces give a tree of Concat nodes.
NodeRef concat(const std::vector<NodeRef>& xs, int64_t dim);
/// torch.gather along `dim` (checked by the frontend: same rank, the index no larger than x off the
/// dim). Kernels read element 0 of the dim for an index outside [0, size), so they never read out of
/// range; the frontend reports such indices (check_index).
NodeRef gather(const NodeRef& x, int64_t dim, const NodeRef& index);
/// torch.scatter_add: self plus src[i] added at index[i] along `dim` (index no larger than src, and
/// than self off the dim): a ScatterAdd node (ops.def), then + self. Each result element sums its
/// hits sequentially in index order, starting from 0, and self is added last, so results are
/// bitwise reproducible on every backend; indices outside [0, size) hit nothing. Work: the
/// index's elements + self's. (Before the scan form this was a one-hot matmul for a 1-d index,
/// whose sums had the same order - finite results keep their bits - but whose 0 * inf spread NaN
/// to every row; and a masked sum in sum_lanes() order otherwise.)
NodeRef scatter_add(const NodeRef& self, int64_t dim, const NodeRef& index, const NodeRef& src);
/// The ScatterAdd node alone: zeros of the index's shape but `extent` along `dim`, with src (the
/// index's shape) added at the index's positions, in index order (`reverse`: from the end).
NodeRef scatter_sum(const NodeRef& index, const NodeRef& src, int64_t dim, int64_t extent, bool reverse = false);
/// A scatter node (ops.def: ScatterAdd, ScatterMul, ScatterMax or ScatterMin): its combine's identity (0, 1,
/// -inf or the lowest integer, +inf or the highest) in the index's shape but `extent` along `dim`, with
/// src (the index's shape) combined in at the index's positions, in index order (`reverse`: from the end).
NodeRef scatter_into(OpKind op, const NodeRef& index, const NodeRef& src, int64_t dim, int64_t extent,
                     bool reverse = false);
/// The partial derivative of a ScatterMul node `y` by each element of its src (the index's shape): the
/// product of the other factors at its target, without a division where a zero is among them: src's
/// zeros count (a ScatterAdd) and the product of its non-zero factors (a ScatterMul) give the one
/// zero's partial, 0 where two or more zeros meet, and y / x for a non-zero x (torch 1.13's prod rule).
/// Its own derivatives are exact where at most two zeros meet (second-order gradients everywhere).
NodeRef scatter_mul_partials(const NodeRef& y);
/// The share of each element of a ScatterMax or ScatterMin node `y`'s src (the index's shape) in its
/// target's value: 1 / (the number of src elements equal to it) for each such element, 0 for others
/// (ties share evenly, as torch's amax / amin; a NaN equals nothing).
NodeRef scatter_extreme_shares(const NodeRef& y);
/// Inclusive prefix sums along `dim` (a Cumsum node): element i is ((0 + x0) + x1) + ... + xi,
/// sequentially; `reverse` sums from the end (element i sums x[i..n-1], last first). Work: O(n).
/// An f32 scan (cumsum, cumprod) runs in f64, each element rounded once to f32 from it.
NodeRef cumsum(const NodeRef& x, int64_t dim, bool reverse = false);
/// Inclusive prefix products along `dim` (a Cumprod node): ((1 * x0) * x1) * ... * xi.
NodeRef cumprod(const NodeRef& x, int64_t dim, bool reverse = false);
/// The running maximum along `dim` (a Cummax node): element i is x[i] where x[i] >= element i-1 or
/// x[i] is NaN, else element i-1 (torch.cummax's values: a NaN sticks until the next NaN, a tie takes
/// the later element, so -0.0 after +0.0 gives -0.0); `reverse` runs from the end. Any non-bool dtype, O(n).
NodeRef cummax(const NodeRef& x, int64_t dim, bool reverse = false);
/// The running minimum along `dim` (a Cummin node), as cummax with <=.
NodeRef cummin(const NodeRef& x, int64_t dim, bool reverse = false);
/// The positions of cummax's or cummin's `values` of x (is_max: cummax) along `dim`, as torch.cummax's
/// indices: the last position (in scan order) at or before i where x equals values[i], or where x is
/// NaN once values[i] is NaN. An i64 running max (reverse: min) over the positions that hit: O(n).
NodeRef cum_extreme_index(const NodeRef& x, const NodeRef& values, int64_t dim, bool reverse);
/// log(cumsum(exp(x))) along `dim` (a Logcumsumexp node), computed stably as a running logaddexp from
/// -inf: m = max(acc, x_i), then m where m is +-inf, else m + log1p(exp(-|acc - x_i|)); floating, O(n).
/// f32 runs in f64 (as torch's CPU), each element rounded once.
NodeRef logcumsumexp(const NodeRef& x, int64_t dim, bool reverse = false);
/// The VJP of y = logcumsumexp(x, dim, reverse) for the adjoint g, torch's formula: dx_j = the sum over
/// i >= j (reverse: i <= j) of g_i exp(x_j - y_i), the positive and negative parts of g each summed as
/// exp(logcumsumexp(log|g| - y, the other way) + x). O(n).
NodeRef logcumsumexp_vjp(const NodeRef& x, const NodeRef& y, int64_t dim, bool reverse, const NodeRef& g);
/// The JVP of y = logcumsumexp(x, dim, reverse) for the tangent t: the sum over j <= i (reverse: j >= i)
/// of t_j exp(x_j - y_i), by parts as logcumsumexp_vjp's. O(n).
NodeRef logcumsumexp_jvp(const NodeRef& x, const NodeRef& y, int64_t dim, bool reverse, const NodeRef& t);
/// The VJP of cumprod(x, dim, reverse) for the adjoint g: dx[k] = sum over i >= k (reverse: i <= k)
/// of g[i] times the product of x[j] over j <= i (reverse: j >= i), j != k. Exact where x has zeros
/// (no division); O(n^2) work and memory per column along `dim` (an [.., n, n] intermediate).
NodeRef cumprod_vjp(const NodeRef& x, int64_t dim, bool reverse, const NodeRef& g);
/// The JVP of cumprod(x, dim, reverse) for the tangent t: the same products as cumprod_vjp's,
/// summed over k <= i (reverse: k >= i).
NodeRef cumprod_jvp(const NodeRef& x, int64_t dim, bool reverse, const NodeRef& t);
/// The positions that sort x along `dim` (an Argsort node, ops.def): i64 of x's shape, element i of a
/// column the position along `dim` of the column's i-th smallest element (`descending`: largest). The
/// order is stable (equal keys keep their input order, as torch.sort(stable=True)), NaN sorts above every
/// number (last ascending, first descending; NaNs among themselves in input order), -0.0 equals +0.0,
/// false < true. Any dtype; no gradient (an integer result). The sorted values are gather(x, dim, it).
/// Work: O(n log n) per column on the CPU, O(n^2) on CUDA (README, "Sorting").
NodeRef argsort(const NodeRef& x, int64_t dim, bool descending = false);
/// Batched matrix product of same-rank operands whose batch dims agree (over one term, K = 1:
/// the broadcast elementwise product, an outer product).
NodeRef matmul(const NodeRef& a, const NodeRef& b);
/// Dropout on attention weights [..., L, S] (p in (0, 1]), as functional::dropout draws it: weight
/// (b, i, j) is kept where rand(the weights' shape, seed) >= p there (the counter is its flat
/// index) and multiplied by dropout_scale(p), else 0. An attention node holds it in attrs f1 (p)
/// and ints ({seed}; empty without dropout).
struct AttentionDropout {
  double p = 0;      ///< the probability of dropping a weight; 0: no dropout, 1: every weight dropped
  uint64_t seed = 0; ///< rand's seed (a host seed token inside a compiled function)
};
/// The factor dropout with probability p multiplies a kept value by: 1 / (1 - p), and 0 at p = 1,
/// where nothing is kept (every value is 0, as PyTorch's, rather than 0 * inf).
double dropout_scale(double p);
/// The dropout of an attention node (Attention, AttentionLse or AttentionGrad).
AttentionDropout attention_dropout(const Node& n);
/// The factor dropout multiplies the weights [..., L, S] (`shape`) by, as a composite of primitives:
/// cast(rand(shape, seed) >= p) * dropout_scale(p) in `dtype`; null without dropout.
NodeRef attention_dropout_factor(const AttentionDropout& d, DType dtype, const Shape& shape, Device device);
/// softmax(q k^T * scale, masked) v over the last two dims, as one Attention node (ops.def):
/// q [..., L, E], k [..., S, E], v [..., S, Ev] with equal batch dims; `mask` null, or of their
/// rank with dims those of [..., L, S] or 1 (a bool keep-mask, or an additive float mask of q's
/// dtype); `causal`: key j > query i is masked. A row with every key masked is 0 (PyTorch's safe
/// softmax). With `dropout`, the weights are dropped (AttentionDropout) before the product with v.
NodeRef attention(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& mask, double scale, bool causal,
                  const AttentionDropout& dropout = {});
/// The attention weights of attention(q, k, v, mask, scale, causal) as a composite of primitive
/// ops, [..., L, S]: the masked scores' softmax over the last dim, 0 in a row with every key masked
/// (its max detached, as in a softmax). Autograd's attention rules differentiate it.
NodeRef attention_weights(const NodeRef& q, const NodeRef& k, const NodeRef& mask, double scale, bool causal);
/// Each query row's logsumexp of the masked scores of attention(q, k, v, mask, scale, causal), [..., L],
/// as one AttentionLse node (ops.def): the forward kernel stores it with the Attention node of the same
/// operands (and the same dropout, which the logsumexp does not depend on). -inf for a row with every
/// key masked.
NodeRef attention_lse(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& mask, double scale, bool causal,
                      const AttentionDropout& dropout = {});
/// attention_lse as a composite of primitives, [..., L]: c + log(sum exp(s - c)) over the masked scores
/// s, c their max detached (0 where -inf). Autograd's AttentionLse rules differentiate it.
NodeRef attention_logsumexp(const NodeRef& q, const NodeRef& k, const NodeRef& mask, double scale, bool causal);
/// The operand index of an attention node's optional mask (ops.def): 6 for AttentionGrad, else 3.
size_t attention_mask_operand(OpKind op);
/// Which gradient an AttentionGrad node is (its attrs.i1; ops.def).
enum class AttentionGradOf : int64_t { Q = 0, K = 1, V = 2 };
/// One gradient of `out` = attention(q, k, v, mask, scale, causal) for the adjoint `dout`, as one
/// AttentionGrad node (ops.def), `lse` the forward's attention_lse: the fused backward kernel computes
/// it (with its siblings of the same operands in one kernel).
NodeRef attention_grad(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& out, const NodeRef& dout,
                       const NodeRef& lse, const NodeRef& mask, double scale, bool causal, AttentionGradOf which,
                       const AttentionDropout& dropout = {});
/// The gradients of attention(q, k, v, mask, scale, causal, dropout) for the adjoint `dout` as a
/// composite of primitives recomputing the weights P (attention_weights): {dq, dk, dv, dmask}, dmask
/// null unless the mask is a float one. With Z the dropout factor (1 without dropout):
/// dv = (P * Z)^T dout; dP = (dout v^T) * Z; dS = P * (dP - rowsum(dP * P)); dq = dS k * scale;
/// dk = dS^T q * scale; dmask = dS summed to the mask's shape.
std::vector<NodeRef> attention_grads_composite(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& dout,
                                               const NodeRef& mask, double scale, bool causal,
                                               const AttentionDropout& dropout = {});
/// Swaps the last two dims.
NodeRef transpose_last(const NodeRef& x);
/// Whether x is a permute that puts its operand's last dim second to last: transpose_last's, or
/// one that moves other dims too (attention's k^T of a [B, T, heads, d] view: [B, heads, d, T]).
bool moves_last_dim_second_to_last(const Node& x);

// Shorthands for arithmetic on same-shape operands.
NodeRef add(const NodeRef& a, const NodeRef& b); ///< a + b
NodeRef sub(const NodeRef& a, const NodeRef& b); ///< a - b
NodeRef mul(const NodeRef& a, const NodeRef& b); ///< a * b
NodeRef div(const NodeRef& a, const NodeRef& b); ///< a / b
NodeRef neg(const NodeRef& a);                   ///< -a
NodeRef scale(const NodeRef& a, double s);       ///< a * s

} // namespace kiln::graph::build

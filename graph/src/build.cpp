#include "graph/build.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::graph::build {

NodeRef constant(double value, DType dtype, Shape shape, Device device) {
  Attrs a;
  if (is_floating(dtype)) a.f0 = dtype == DType::Float32 ? static_cast<float>(value) : value;
  else a.i0 = dtype == DType::Bool ? (value != 0) : static_cast<int64_t>(value);
  return make_node(OpKind::Const, dtype, std::move(shape), {}, std::move(a), device);
}

NodeRef constant_of(const Scalar& value, DType dtype, Shape shape, Device device) {
  if (dtype == DType::Float32 && value.kind() != DType::Float64) { // int64 -> f32 rounds once
    Attrs a;
    a.f0 = static_cast<float>(value.to_int());
    return make_node(OpKind::Const, dtype, std::move(shape), {}, std::move(a), device);
  }
  if (is_floating(dtype)) return constant(value.to_double(), dtype, std::move(shape), device);
  Attrs a;
  a.i0 = dtype == DType::Bool ? (value.to_double() != 0) : value.to_int();
  if (dtype == DType::Int32) a.i0 = static_cast<int32_t>(a.i0);
  return make_node(OpKind::Const, dtype, std::move(shape), {}, std::move(a), device);
}

NodeRef leaf_on(const NodeRef& x, Device device) {
  const bool dataless_leaf = x->inputs.empty() && x->op != OpKind::Input;
  if (x->device == device || !dataless_leaf) return x;
  return make_node(x->op, x->dtype, x->shape, {}, x->attrs, device);
}

NodeRef constant_like(const NodeRef& like, double value) {
  return constant(value, like->dtype, like->shape, like->device);
}

NodeRef unary(OpKind op, const NodeRef& x) {
  KILN_ASSERT(op != OpKind::Cast, "use cast()");
  return make_node(op, op == OpKind::LogicalNot ? DType::Bool : x->dtype, x->shape, {x});
}

NodeRef binary(OpKind op, const NodeRef& a, const NodeRef& b) {
  return make_node(op, returns_bool(op) ? DType::Bool : a->dtype, a->shape, {a, b});
}

NodeRef where(const NodeRef& cond, const NodeRef& a, const NodeRef& b) {
  return make_node(OpKind::Where, a->dtype, a->shape, {cond, a, b});
}

NodeRef cast(const NodeRef& x, DType dtype) {
  if (x->dtype == dtype) return x;
  if (x->op == OpKind::Const) { // fold, rounding exactly as the Cast kernel would
    if (is_floating(x->dtype) && is_floating(dtype)) return constant(x->attrs.f0, dtype, x->shape, x->device);
    if (!is_floating(x->dtype)) return constant_of(Scalar(x->attrs.i0), dtype, x->shape, x->device);
  }
  return make_node(OpKind::Cast, dtype, x->shape, {x});
}

NodeRef detach(const NodeRef& x) { return make_node(OpKind::Detach, x->dtype, x->shape, {x}); }

NodeRef check_index(const NodeRef& x, int64_t bound, int64_t site) {
  Attrs a;
  a.i0 = bound;
  a.i1 = site;
  return make_node(OpKind::CheckIndex, x->dtype, x->shape, {x}, std::move(a));
}

NodeRef reduce(OpKind op, const NodeRef& x, std::vector<int64_t> dims) {
  std::sort(dims.begin(), dims.end());
  Shape shape = x->shape;
  for (int64_t d : dims) shape[d] = 1;
  const DType dt = (op == OpKind::Argmax || op == OpKind::Argmin) ? DType::Int64 : x->dtype;
  Attrs a;
  a.ints = std::move(dims);
  return make_node(op, dt, std::move(shape), {x}, std::move(a));
}

NodeRef reshape(const NodeRef& x, Shape shape) {
  if (shape == x->shape) return x;
  if (x->op == OpKind::Reshape) return reshape(x->inputs[0], std::move(shape)); // reshape of reshape
  return make_node(OpKind::Reshape, x->dtype, std::move(shape), {x});
}

NodeRef permute(const NodeRef& x, std::vector<int64_t> perm) {
  if (x->op == OpKind::Permute) { // a permute of a permute is one permute (or none)
    for (int64_t& p : perm) p = x->attrs.ints[static_cast<size_t>(p)];
    return permute(x->inputs[0], std::move(perm));
  }
  std::vector<int64_t> iota(perm.size());
  std::iota(iota.begin(), iota.end(), 0);
  if (perm == iota) return x;
  Shape shape(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) shape[d] = x->shape[perm[d]];
  Attrs a;
  a.ints = std::move(perm);
  return make_node(OpKind::Permute, x->dtype, std::move(shape), {x}, std::move(a));
}

NodeRef broadcast_to(const NodeRef& x, const Shape& shape) {
  if (x->shape == shape) return x;
  KILN_ASSERT(x->shape.size() <= shape.size(), "broadcast to a lower rank");
  Shape padded(shape.size() - x->shape.size(), 1);
  padded.insert(padded.end(), x->shape.begin(), x->shape.end());
  NodeRef r = reshape(x, padded);
  if (padded == shape) return r;
  if (r->op == OpKind::Const) return make_node(OpKind::Const, r->dtype, shape, {}, r->attrs, r->device);
  return make_node(OpKind::Expand, x->dtype, shape, {r});
}

NodeRef sum_to(const NodeRef& x, const Shape& shape) {
  if (x->shape == shape) return x;
  const size_t lead = x->shape.size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t d = 0; d < x->shape.size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && x->shape[d] != 1)) dims.push_back(static_cast<int64_t>(d));
  NodeRef r = dims.empty() ? x : reduce(OpKind::Sum, x, dims);
  return reshape(r, shape);
}

NodeRef slice(const NodeRef& x, std::vector<int64_t> starts, std::vector<int64_t> steps, Shape shape) {
  Attrs a;
  for (size_t d = 0; d < starts.size(); ++d) {
    a.ints.push_back(starts[d]);
    a.ints.push_back(steps[d]);
  }
  bool identity = shape == x->shape;
  for (size_t d = 0; d < starts.size(); ++d) identity = identity && starts[d] == 0 && (steps[d] == 1 || shape[d] <= 1);
  if (identity) return x;
  return make_node(OpKind::Slice, x->dtype, std::move(shape), {x}, std::move(a));
}

NodeRef unfold(const NodeRef& x, int64_t dim, int64_t size, int64_t step, int64_t at) {
  Attrs a;
  a.ints = {dim, size, step, at};
  return make_node(OpKind::Unfold, x->dtype, unfold_shape(x->shape, dim, size, step, at), {x}, std::move(a));
}

NodeRef pad(const NodeRef& x, std::vector<int64_t> before, std::vector<int64_t> after, const Scalar& value) {
  Attrs a;
  Shape shape = x->shape;
  for (size_t d = 0; d < before.size(); ++d) {
    a.ints.push_back(before[d]);
    a.ints.push_back(after[d]);
    const auto extent = padded_extent(shape[d], before[d], after[d]);
    KILN_ASSERT(extent, "pad: the padded extent overflows (the frontend checks it)");
    shape[d] = *extent;
  }
  if (shape == x->shape) return x;
  const NodeRef fill = constant_of(value, x->dtype); // the value in x's dtype, exactly
  a.f0 = fill->attrs.f0;
  a.i0 = fill->attrs.i0;
  return make_node(OpKind::Pad, x->dtype, std::move(shape), {x}, std::move(a));
}

NodeRef concat(const std::vector<NodeRef>& xs, int64_t dim) {
  if (xs.size() == 1) return xs[0];
  if (xs.size() > kMaxConcatPieces) { // a tree of concats, each of at most kMaxConcatPieces pieces
    std::vector<NodeRef> groups;
    for (size_t i = 0; i < xs.size(); i += kMaxConcatPieces)
      groups.push_back(concat(std::vector<NodeRef>(xs.begin() + static_cast<std::ptrdiff_t>(i),
                                                   xs.begin() + static_cast<std::ptrdiff_t>(std::min(xs.size(), i + kMaxConcatPieces))),
                              dim));
    return concat(groups, dim);
  }
  Shape shape = xs[0]->shape;
  shape[dim] = 0;
  for (const NodeRef& x : xs) {
    const auto extent = checked_add(shape[dim], x->shape[dim]);
    KILN_ASSERT(extent, "concat: the extent overflows (the frontend checks it)");
    shape[dim] = *extent;
  }
  Attrs a;
  a.ints = {dim};
  return make_node(OpKind::Concat, xs[0]->dtype, std::move(shape), xs, std::move(a));
}

NodeRef gather(const NodeRef& x, int64_t dim, const NodeRef& index) {
  Attrs a;
  a.ints = {dim};
  return make_node(OpKind::Gather, x->dtype, index->shape, {x, index}, std::move(a));
}

namespace {

// 0, 1, ..., n - 1 as i64, shaped with ones around position `at` of a rank-`rank` shape.
NodeRef positions(int64_t n, size_t at, size_t rank, Device device) {
  Attrs a;
  a.i0 = 0;
  a.i1 = 1;
  Shape s(rank, 1);
  s[at] = n;
  return reshape(make_node(OpKind::Arange, DType::Int64, {n}, {}, std::move(a), device), std::move(s));
}

// x with `dim` moved last and a new axis of extent n inserted before it (broadcast).
NodeRef dim_last_spread(const NodeRef& x, int64_t dim, int64_t n) {
  std::vector<int64_t> order;
  for (size_t d = 0; d < x->shape.size(); ++d)
    if (static_cast<int64_t>(d) != dim) order.push_back(static_cast<int64_t>(d));
  order.push_back(dim);
  NodeRef p = permute(x, order);
  Shape s = p->shape;
  s.insert(s.end() - 1, 1);
  p = reshape(p, s);
  s[s.size() - 2] = n;
  return broadcast_to(p, s);
}

// x padded with zeros at the end of each dim to `shape`.
NodeRef pad_to(const NodeRef& x, const Shape& shape) {
  std::vector<int64_t> before(shape.size(), 0), after(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) after[d] = shape[d] - x->shape[d];
  if (std::all_of(after.begin(), after.end(), [](int64_t e) { return e == 0; })) return x;
  return pad(x, before, after, 0);
}

// The inverse of dim_last_spread's placement: [others..., n] with the last axis moved back to `dim`.
NodeRef dim_back(const NodeRef& y, int64_t dim) {
  const size_t rank = y->shape.size();
  std::vector<int64_t> perm(rank);
  for (size_t d = 0, k = 0; d < rank; ++d) perm[d] = static_cast<int64_t>(d) == dim ? static_cast<int64_t>(rank) - 1 : static_cast<int64_t>(k++);
  return permute(y, std::move(perm));
}

} // namespace

NodeRef scatter_add(const NodeRef& self, int64_t dim, const NodeRef& index, const NodeRef& src) {
  const Shape& is = index->shape;
  const size_t rank = is.size();
  NodeRef s = src->shape == is ? src : slice(src, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), is);
  // the sums start from 0 and self is added last, as the one-hot product before the scan did:
  // finite results keep those bits (see build.h)
  return add(self, pad_to(scatter_sum(index, s, dim, self->shape[dim]), self->shape));
}

NodeRef scatter_sum(const NodeRef& index, const NodeRef& src, int64_t dim, int64_t extent, bool reverse) {
  return scatter_into(OpKind::ScatterAdd, index, src, dim, extent, reverse);
}

NodeRef scatter_into(OpKind op, const NodeRef& index, const NodeRef& src, int64_t dim, int64_t extent, bool reverse) {
  KILN_ASSERT(is_scatter(op), "scatter_into takes a scatter op");
  Shape out = index->shape;
  out[dim] = extent;
  Attrs a;
  a.ints = {dim, reverse ? 1 : 0};
  return make_node(op, src->dtype, std::move(out), {index, src}, std::move(a));
}

NodeRef scatter_mul_partials(const NodeRef& y) {
  const NodeRef &index = y->inputs[0], &x = y->inputs[1];
  const int64_t dim = y->attrs.ints.at(0), extent = y->shape[static_cast<size_t>(dim)];
  const bool reverse = y->attrs.ints.at(1) != 0;
  const NodeRef zero = binary(OpKind::Eq, x, constant_like(x, 0)), one = constant_like(x, 1), nil = constant_like(x, 0);
  const NodeRef nonzero = where(zero, one, x);
  auto at_target = [&](OpKind op, const NodeRef& v) {
    return gather(scatter_into(op, index, v, dim, extent, reverse), dim, index);
  };
  // at each element's target: its zeros, and the product of its non-zero factors (the one zero's partial)
  const NodeRef zeros = at_target(OpKind::ScatterAdd, cast(zero, x->dtype));
  const NodeRef others = at_target(OpKind::ScatterMul, nonzero);
  // where two zeros meet, 0 as others * (the other zero): its derivative by that zero is others, so
  // second-order gradients stay exact (with three or more, they are 0 as they should be)
  const NodeRef other_zero = sub(at_target(OpKind::ScatterAdd, where(zero, x, nil)), x);
  const NodeRef two = constant_like(x, 2);
  const NodeRef lone = where(binary(OpKind::Eq, zeros, one), others,
                             where(binary(OpKind::Eq, zeros, two), mul(others, other_zero), nil));
  return where(zero, lone, div(gather(y, dim, index), nonzero));
}

NodeRef scatter_extreme_shares(const NodeRef& y) {
  const NodeRef &index = y->inputs[0], &x = y->inputs[1];
  const int64_t dim = y->attrs.ints.at(0), extent = y->shape[static_cast<size_t>(dim)];
  const NodeRef is = cast(binary(OpKind::Eq, x, gather(y, dim, index)), x->dtype);
  const NodeRef count = gather(scatter_sum(index, is, dim, extent, y->attrs.ints.at(1) != 0), dim, index);
  return div(is, where(binary(OpKind::Eq, count, constant_like(count, 0)), constant_like(count, 1), count));
}

namespace {

NodeRef scan(OpKind op, const NodeRef& x, int64_t dim, bool reverse) {
  Attrs a;
  a.ints = {dim, reverse ? 1 : 0};
  return make_node(op, x->dtype, x->shape, {x}, std::move(a));
}

// T[others..., k, i] = the product of x[.., j, ..] over j <= i (reverse: j >= i) but j != k (x's dim moved last, a
// new axis k before it): the partial derivative of cumprod's element i by x's element k, for
// k <= i, without a division (so zeros in x are exact). O(n^2) per column.
NodeRef cumprod_partials(const NodeRef& x, int64_t dim, bool reverse) {
  const size_t rank = x->shape.size();
  const int64_t n = x->shape[dim];
  NodeRef spread = dim_last_spread(x, dim, n);
  NodeRef k = broadcast_to(positions(n, rank - 1, rank + 1, x->device), spread->shape);
  NodeRef i = broadcast_to(positions(n, rank, rank + 1, x->device), spread->shape);
  NodeRef skip_k = where(binary(OpKind::Eq, i, k), constant_like(spread, 1), spread);
  return scan(OpKind::Cumprod, skip_k, static_cast<int64_t>(rank), reverse);
}

// where(cond(k, i), v, 0) summed over axis `over` (rank - 1: k, rank: i) of [others..., k, i],
// moved back to x's layout with the remaining axis at `dim`.
NodeRef masked_sum_back(const NodeRef& v, OpKind cmp, int64_t over, int64_t dim, size_t rank, int64_t n,
                        Device device) {
  NodeRef k = broadcast_to(positions(n, rank - 1, rank + 1, device), v->shape);
  NodeRef i = broadcast_to(positions(n, rank, rank + 1, device), v->shape);
  NodeRef sum = reduce(OpKind::Sum, where(binary(cmp, k, i), v, constant_like(v, 0)), {over});
  Shape cut = sum->shape;
  cut.erase(cut.begin() + over);
  return dim_back(reshape(sum, cut), dim);
}

} // namespace

NodeRef cumsum(const NodeRef& x, int64_t dim, bool reverse) { return scan(OpKind::Cumsum, x, dim, reverse); }

NodeRef cumprod(const NodeRef& x, int64_t dim, bool reverse) { return scan(OpKind::Cumprod, x, dim, reverse); }

NodeRef cummax(const NodeRef& x, int64_t dim, bool reverse) { return scan(OpKind::Cummax, x, dim, reverse); }

NodeRef cummin(const NodeRef& x, int64_t dim, bool reverse) { return scan(OpKind::Cummin, x, dim, reverse); }

NodeRef cum_extreme_index(const NodeRef& x, const NodeRef& values, int64_t dim, bool reverse) {
  const int64_t n = x->shape[static_cast<size_t>(dim)];
  NodeRef j = broadcast_to(positions(n, static_cast<size_t>(dim), x->shape.size(), x->device), x->shape);
  NodeRef hit = binary(OpKind::Eq, x, values); // values[i] is x at its last update: x[i] hits where it updated
  if (is_floating(x->dtype)) hit = binary(OpKind::LogicalOr, hit, binary(OpKind::Ne, x, x)); // a NaN updates
  // the latest hit in scan order: the largest position so far (reverse: the smallest)
  NodeRef marked = where(hit, j, constant_like(j, reverse ? static_cast<double>(n - 1) : 0));
  return scan(reverse ? OpKind::Cummin : OpKind::Cummax, marked, dim, reverse);
}

NodeRef logcumsumexp(const NodeRef& x, int64_t dim, bool reverse) {
  return scan(OpKind::Logcumsumexp, x, dim, reverse);
}

namespace {

// log(v) where keep (v > 0 there), else the dtype's lowest finite number (exp of it is 0): the log of one
// sign's part of a gradient or tangent, with no log of a non-positive number even unused.
NodeRef log_part(const NodeRef& keep, const NodeRef& v) {
  const double lowest = v->dtype == DType::Float32 ? -static_cast<double>(std::numeric_limits<float>::max())
                                                   : -std::numeric_limits<double>::max();
  NodeRef safe = where(keep, v, constant_like(v, 1));
  return where(keep, unary(OpKind::Log, safe), constant_like(v, lowest));
}

// exp(logcumsumexp(lp) + shift) - exp(logcumsumexp(ln) + shift) along dim, for the log parts lp and ln of
// a signed value v (log_part of v > 0 and of -v where v < 0).
NodeRef signed_lse(const NodeRef& v, const NodeRef& add_before, const NodeRef& add_after, int64_t dim, bool reverse) {
  NodeRef zero = constant_like(v, 0);
  NodeRef lp = log_part(binary(OpKind::Gt, v, zero), v), ln = log_part(binary(OpKind::Lt, v, zero), neg(v));
  auto part = [&](const NodeRef& l) {
    return unary(OpKind::Exp, add(logcumsumexp(add(l, add_before), dim, reverse), add_after));
  };
  return sub(part(lp), part(ln));
}

} // namespace

NodeRef logcumsumexp_vjp(const NodeRef& x, const NodeRef& y, int64_t dim, bool reverse, const NodeRef& g) {
  return signed_lse(g, neg(y), x, dim, !reverse);
}

NodeRef logcumsumexp_jvp(const NodeRef& x, const NodeRef& y, int64_t dim, bool reverse, const NodeRef& t) {
  return signed_lse(t, x, neg(y), dim, reverse);
}

NodeRef argsort(const NodeRef& x, int64_t dim, bool descending) {
  Attrs a;
  a.ints = {dim, descending ? 1 : 0};
  return make_node(OpKind::Argsort, DType::Int64, x->shape, {x}, std::move(a));
}

NodeRef cumprod_vjp(const NodeRef& x, int64_t dim, bool reverse, const NodeRef& g) {
  if (x->numel() == 0) return constant_like(x, 0);
  const size_t rank = x->shape.size();
  const int64_t n = x->shape[dim];
  NodeRef t = cumprod_partials(x, dim, reverse);
  // dx[k] = sum over i >= k (reverse: i <= k) of g[i] T[k, i]
  return masked_sum_back(mul(dim_last_spread(g, dim, n), t), reverse ? OpKind::Ge : OpKind::Le,
                         static_cast<int64_t>(rank), dim, rank, n, x->device);
}

NodeRef cumprod_jvp(const NodeRef& x, int64_t dim, bool reverse, const NodeRef& tangent) {
  if (x->numel() == 0) return constant_like(x, 0);
  const size_t rank = x->shape.size();
  const int64_t n = x->shape[dim];
  NodeRef t = cumprod_partials(x, dim, reverse);
  // dy[i] = sum over k <= i (reverse: k >= i) of tangent[k] T[k, i]
  return masked_sum_back(mul(transpose_last(dim_last_spread(tangent, dim, n)), t), reverse ? OpKind::Ge : OpKind::Le,
                         static_cast<int64_t>(rank) - 1, dim, rank, n, x->device);
}

NodeRef matmul(const NodeRef& a, const NodeRef& b) {
  Shape shape = a->shape;
  shape.back() = b->shape.back();
  // A product over one term is the operands' broadcast product (an outer product). As that it
  // fuses with its neighbours (a batch-1 weight gradient with its optimizer update), where the
  // GEMM form would pack both operands to multiply each pair once.
  if (a->shape.back() == 1) return mul(broadcast_to(a, shape), broadcast_to(b, shape));
  return make_node(OpKind::Matmul, a->dtype, std::move(shape), {a, b});
}

namespace {

// The attrs every attention node has: the scale, causal and the dropout (AttentionDropout).
Attrs attention_attrs(double scale, bool causal, const AttentionDropout& dropout) {
  Attrs a;
  a.f0 = scale;
  a.i0 = causal ? 1 : 0;
  if (dropout.p > 0) {
    a.f1 = dropout.p;
    a.ints = {static_cast<int64_t>(dropout.seed)};
  }
  return a;
}

} // namespace

double dropout_scale(double p) { return p < 1 ? 1.0 / (1.0 - p) : 0.0; }

AttentionDropout attention_dropout(const Node& n) {
  if (n.attrs.ints.empty()) return {};
  return {n.attrs.f1, static_cast<uint64_t>(n.attrs.ints[0])};
}

NodeRef attention_dropout_factor(const AttentionDropout& d, DType dtype, const Shape& shape, Device device) {
  if (d.p <= 0) return nullptr;
  Attrs seed;
  seed.i0 = static_cast<int64_t>(d.seed);
  const NodeRef r = make_node(OpKind::Rand, dtype, shape, {}, seed, device);
  const NodeRef keep = cast(binary(OpKind::Ge, r, constant_like(r, d.p)), dtype);
  return scale(keep, dropout_scale(d.p));
}

NodeRef attention(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& mask, double scale, bool causal,
                  const AttentionDropout& dropout) {
  Shape shape = q->shape;
  shape.back() = v->shape.back();
  std::vector<NodeRef> in{q, k, v};
  if (mask) in.push_back(mask);
  return make_node(OpKind::Attention, q->dtype, std::move(shape), std::move(in), attention_attrs(scale, causal, dropout));
}

NodeRef attention_lse(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& mask, double scale, bool causal,
                      const AttentionDropout& dropout) {
  Shape shape = q->shape;
  shape.pop_back();
  const Attrs a = attention_attrs(scale, causal, dropout);
  std::vector<NodeRef> in{q, k, v};
  if (mask) in.push_back(mask);
  return make_node(OpKind::AttentionLse, q->dtype, std::move(shape), std::move(in), a);
}

size_t attention_mask_operand(OpKind op) { return op == OpKind::AttentionGrad ? 6 : 3; }

namespace {

// The scaled scores q k^T * scale, causal and mask applied (-inf where masked), [..., L, S].
NodeRef masked_scores(const NodeRef& q, const NodeRef& k, const NodeRef& mask, double scale, bool causal) {
  const double inf = std::numeric_limits<double>::infinity();
  NodeRef s = build::scale(matmul(q, transpose_last(k)), scale);
  const size_t r = s->shape.size();
  const NodeRef minus_inf = constant_like(s, -inf);
  if (causal) {
    const int64_t L = s->shape[r - 2], S = s->shape[r - 1];
    NodeRef later = binary(OpKind::Gt, broadcast_to(positions(S, r - 1, r, s->device), s->shape),
                           broadcast_to(positions(L, r - 2, r, s->device), s->shape));
    s = where(later, minus_inf, s);
  }
  if (mask) {
    NodeRef m = broadcast_to(mask, s->shape);
    s = mask->dtype == DType::Bool ? where(m, s, minus_inf) : add(s, m);
  }
  return s;
}

// The rows' max of the scores s [..., L, S] over the last dim, detached, 0 where -inf, [..., L, 1].
NodeRef row_shift(const NodeRef& s) {
  const double inf = std::numeric_limits<double>::infinity();
  NodeRef mx = detach(reduce(OpKind::Max, s, {static_cast<int64_t>(s->shape.size() - 1)}));
  return where(binary(OpKind::Eq, mx, constant_like(mx, -inf)), constant_like(mx, 0), mx);
}

} // namespace

NodeRef attention_logsumexp(const NodeRef& q, const NodeRef& k, const NodeRef& mask, double scale, bool causal) {
  const NodeRef s = masked_scores(q, k, mask, scale, causal);
  const NodeRef mx = row_shift(s);
  const int64_t last = static_cast<int64_t>(s->shape.size() - 1);
  const NodeRef z = reduce(OpKind::Sum, unary(OpKind::Exp, sub(s, broadcast_to(mx, s->shape))), {last});
  Shape rows = q->shape;
  rows.pop_back();
  return reshape(add(mx, unary(OpKind::Log, z)), rows);
}

NodeRef attention_weights(const NodeRef& q, const NodeRef& k, const NodeRef& mask, double scale, bool causal) {
  const NodeRef s = masked_scores(q, k, mask, scale, causal);
  const size_t r = s->shape.size();
  const NodeRef mx = row_shift(s);
  NodeRef e = unary(OpKind::Exp, sub(s, broadcast_to(mx, s->shape)));
  NodeRef z = reduce(OpKind::Sum, e, {static_cast<int64_t>(r - 1)});
  z = where(binary(OpKind::Eq, z, constant_like(z, 0)), constant_like(z, 1), z);
  return div(e, broadcast_to(z, s->shape));
}

bool moves_last_dim_second_to_last(const Node& x) {
  if (x.op != OpKind::Permute) return false;
  const std::vector<int64_t>& p = x.attrs.ints;
  const size_t r = p.size();
  return r >= 2 && p[r - 2] == static_cast<int64_t>(r - 1);
}

NodeRef attention_grad(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& out, const NodeRef& dout,
                       const NodeRef& lse, const NodeRef& mask, double scale, bool causal, AttentionGradOf which,
                       const AttentionDropout& dropout) {
  Attrs a = attention_attrs(scale, causal, dropout);
  a.i1 = static_cast<int64_t>(which);
  const NodeRef& like = which == AttentionGradOf::Q ? q : which == AttentionGradOf::K ? k : v;
  std::vector<NodeRef> in{q, k, v, out, dout, lse};
  if (mask) in.push_back(mask);
  return make_node(OpKind::AttentionGrad, q->dtype, like->shape, std::move(in), a);
}

std::vector<NodeRef> attention_grads_composite(const NodeRef& q, const NodeRef& k, const NodeRef& v, const NodeRef& dout,
                                               const NodeRef& mask, double scale, bool causal,
                                               const AttentionDropout& dropout) {
  const NodeRef p = attention_weights(q, k, mask, scale, causal);
  const int64_t last = static_cast<int64_t>(p->shape.size()) - 1;
  const NodeRef z = attention_dropout_factor(dropout, p->dtype, p->shape, p->device);
  NodeRef dp = matmul(dout, transpose_last(v));
  if (z) dp = mul(dp, z);
  const NodeRef dot = broadcast_to(reduce(OpKind::Sum, mul(dp, p), {last}), p->shape);
  const NodeRef ds = mul(p, sub(dp, dot));
  return {build::scale(matmul(ds, k), scale), build::scale(matmul(transpose_last(ds), q), scale),
          matmul(transpose_last(z ? mul(p, z) : p), dout), mask && mask->dtype != DType::Bool ? sum_to(ds, mask->shape) : nullptr};
}

NodeRef transpose_last(const NodeRef& x) {
  std::vector<int64_t> perm(x->shape.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return permute(x, std::move(perm));
}

NodeRef add(const NodeRef& a, const NodeRef& b) { return binary(OpKind::Add, a, b); }
NodeRef sub(const NodeRef& a, const NodeRef& b) { return binary(OpKind::Sub, a, b); }
NodeRef mul(const NodeRef& a, const NodeRef& b) { return binary(OpKind::Mul, a, b); }
NodeRef div(const NodeRef& a, const NodeRef& b) { return binary(OpKind::Div, a, b); }
NodeRef neg(const NodeRef& a) { return unary(OpKind::Neg, a); }
NodeRef scale(const NodeRef& a, double s) { return mul(a, constant_like(a, s)); }

} // namespace kiln::graph::build

// Matrix products (mm, bmm, mv, dot, outer, the add* family, tensordot, kron), diagonals (trace,
// diagonal, diag, diag_embed), cross, cdist, as PyTorch 1.13's: checks of the shapes, then a
// composition of kiln's ops (matmul, permute, reshape, slice, pad, sum), so gradients, fusion,
// compile() and CUDA come with them. einsum is in einsum.cpp.

#include "kiln/linalg.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "frontend/src/tensor_impl.h"
#include "graph/shape.h"
#include "kiln/arrange.h"
#include "kiln/functional.h"
#include "kiln/indexops.h"

namespace kiln {

using detail::fail;
using detail::wrap_dim_or_fail;

namespace {

std::string num(int64_t v) { return std::to_string(v); }

void check_defined(const char* op, std::initializer_list<const Tensor*> ts, const Loc& loc) {
  for (const Tensor* t : ts)
    if (!t->defined()) throw Error(op, "an operand is undefined", loc);
}

// `t` must have `rank` dims: else an error naming the op, which operand and all operands.
void check_rank(const char* op, const Tensor& t, int64_t rank, const char* what,
                std::initializer_list<const Tensor*> all, const Loc& loc) {
  if (t.dim() != rank)
    fail(op, std::string(what) + " must be " + num(rank) + "-d, got " + num(t.dim()) + "-d", all, loc);
}

// a's extent along da equals b's along db, else "<op>: <what> (n vs m)".
void check_extent(const char* op, const Tensor& a, int64_t da, const Tensor& b, int64_t db, const std::string& what,
                  const Loc& loc) {
  if (a.size(da) != b.size(db)) fail(op, what + " (" + num(a.size(da)) + " vs " + num(b.size(db)) + ")", {&a, &b}, loc);
}

// beta * input + alpha * prod, input broadcast to prod's shape; beta = 0 drops input's values.
Tensor add_scaled(const char* op, const Tensor& input, const Tensor& prod, Scalar beta, Scalar alpha, const Loc& loc) {
  const auto shape = graph::broadcast_shapes(input.shape(), prod.shape());
  if (!shape || *shape != prod.shape())
    fail(op, "input cannot be broadcast to the product's shape " + graph::shape_str(prod.shape()), {&input}, loc);
  const Tensor scaled = alpha.to_double() == 1 ? prod : prod * alpha;
  if (beta.to_double() == 0) return scaled;
  return (beta.to_double() == 1 ? input : input * beta) + scaled;
}

// The permutation that moves dims `last` (in order) behind all the others (kept in order).
IntList moved_last(int64_t rank, const IntList& last) {
  IntList perm;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(last.begin(), last.end(), d) == last.end()) perm.push_back(d);
  perm.insert(perm.end(), last.begin(), last.end());
  return perm;
}

bool is_identity(const IntList& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Tensor permuted(const Tensor& x, const IntList& perm, const Loc& loc) {
  return is_identity(perm) ? x : x.permute(perm, loc);
}

int64_t product(IntList::const_iterator b, IntList::const_iterator e) {
  return std::accumulate(b, e, int64_t{1}, std::multiplies<>());
}

// tensordot's dims: wrapped, each once, and of matching extents (after summing a side of extent 1).
IntList wrapped_dims(const Tensor& x, const IntList& dims, const Loc& loc) {
  IntList out;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim_or_fail("tensordot", d, x, loc);
    if (std::find(out.begin(), out.end(), w) != out.end())
      fail("tensordot", "dim " + num(d) + " appears more than once in a dims list", {&x}, loc);
    out.push_back(w);
  }
  return out;
}

// linalg.cross of a and b of equal rank along dim (wrapped), for op `op`.
Tensor cross_along(const char* op, const Tensor& a, const Tensor& b, int64_t dim, const Loc& loc) {
  if (a.dim() != b.dim()) fail(op, "the inputs must have the same number of dims", {&a, &b}, loc);
  if (!graph::broadcast_shapes(a.shape(), b.shape())) fail(op, "the inputs cannot be broadcast", {&a, &b}, loc);
  const int64_t d = wrap_dim_or_fail(op, dim, a, loc);
  if (a.size(d) != 3 || b.size(d) != 3)
    fail(op, "dim " + num(dim) + " must have extent 3 in both inputs, got " + num(a.size(d)) + " and " + num(b.size(d)),
         {&a, &b}, loc);
  // (a1 b2 - a2 b1, a2 b0 - a0 b2, a0 b1 - a1 b0): a and b rolled by -1 and -2 along d.
  return a.roll({-1}, {d}, loc) * b.roll({-2}, {d}, loc) - a.roll({-2}, {d}, loc) * b.roll({-1}, {d}, loc);
}

} // namespace

// ---------------------------------------------------------------- products

Tensor mm(const Tensor& a, const Tensor& b, Loc loc) {
  const graph::SourceScope at(loc, "mm");
  check_defined("mm", {&a, &b}, loc);
  check_rank("mm", a, 2, "the first operand", {&a, &b}, loc);
  check_rank("mm", b, 2, "the second operand", {&a, &b}, loc);
  check_extent("mm", a, 1, b, 0, "the shapes cannot be multiplied: inner dims differ", loc);
  return matmul(a, b, loc);
}

Tensor bmm(const Tensor& a, const Tensor& b, Loc loc) {
  const graph::SourceScope at(loc, "bmm");
  check_defined("bmm", {&a, &b}, loc);
  check_rank("bmm", a, 3, "the first operand", {&a, &b}, loc);
  check_rank("bmm", b, 3, "the second operand", {&a, &b}, loc);
  check_extent("bmm", a, 0, b, 0, "batch sizes differ", loc);
  check_extent("bmm", a, 2, b, 1, "the shapes cannot be multiplied: inner dims differ", loc);
  return matmul(a, b, loc);
}

Tensor mv(const Tensor& mat, const Tensor& vec, Loc loc) {
  const graph::SourceScope at(loc, "mv");
  check_defined("mv", {&mat, &vec}, loc);
  check_rank("mv", mat, 2, "the matrix", {&mat, &vec}, loc);
  check_rank("mv", vec, 1, "the vector", {&mat, &vec}, loc);
  check_extent("mv", mat, 1, vec, 0, "the matrix's columns and the vector's length differ", loc);
  return matmul(mat, vec, loc);
}

Tensor dot(const Tensor& a, const Tensor& b, Loc loc) {
  const graph::SourceScope at(loc, "dot");
  check_defined("dot", {&a, &b}, loc);
  check_rank("dot", a, 1, "the first operand", {&a, &b}, loc);
  check_rank("dot", b, 1, "the second operand", {&a, &b}, loc);
  check_extent("dot", a, 0, b, 0, "the lengths differ", loc);
  return matmul(a, b, loc);
}

Tensor vdot(const Tensor& a, const Tensor& b, Loc loc) { return dot(a, b, loc); }

Tensor outer(const Tensor& a, const Tensor& b, Loc loc) {
  const graph::SourceScope at(loc, "outer");
  check_defined("outer", {&a, &b}, loc);
  check_rank("outer", a, 1, "the first operand", {&a, &b}, loc);
  check_rank("outer", b, 1, "the second operand", {&a, &b}, loc);
  return a.unsqueeze(1, loc) * b.unsqueeze(0, loc);
}

Tensor ger(const Tensor& a, const Tensor& b, Loc loc) { return outer(a, b, loc); }

Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, Scalar beta, Scalar alpha, Loc loc) {
  const graph::SourceScope at(loc, "addmm");
  check_defined("addmm", {&input, &m1, &m2}, loc);
  check_rank("addmm", m1, 2, "mat1", {&m1, &m2}, loc);
  check_rank("addmm", m2, 2, "mat2", {&m1, &m2}, loc);
  check_extent("addmm", m1, 1, m2, 0, "the shapes cannot be multiplied: inner dims differ", loc);
  return add_scaled("addmm", input, matmul(m1, m2, loc), beta, alpha, loc);
}

Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, Scalar beta, Scalar alpha, Loc loc) {
  const graph::SourceScope at(loc, "addmv");
  check_defined("addmv", {&input, &mat, &vec}, loc);
  check_rank("addmv", mat, 2, "the matrix", {&mat, &vec}, loc);
  check_rank("addmv", vec, 1, "the vector", {&mat, &vec}, loc);
  check_extent("addmv", mat, 1, vec, 0, "the matrix's columns and the vector's length differ", loc);
  return add_scaled("addmv", input, matmul(mat, vec, loc), beta, alpha, loc);
}

Tensor addr(const Tensor& input, const Tensor& v1, const Tensor& v2, Scalar beta, Scalar alpha, Loc loc) {
  const graph::SourceScope at(loc, "addr");
  check_defined("addr", {&input, &v1, &v2}, loc);
  check_rank("addr", v1, 1, "vec1", {&v1, &v2}, loc);
  check_rank("addr", v2, 1, "vec2", {&v1, &v2}, loc);
  return add_scaled("addr", input, v1.unsqueeze(1, loc) * v2.unsqueeze(0, loc), beta, alpha, loc);
}

Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, Scalar beta, Scalar alpha, Loc loc) {
  const graph::SourceScope at(loc, "baddbmm");
  check_defined("baddbmm", {&input, &b1, &b2}, loc);
  check_rank("baddbmm", b1, 3, "batch1", {&b1, &b2}, loc);
  check_rank("baddbmm", b2, 3, "batch2", {&b1, &b2}, loc);
  check_extent("baddbmm", b1, 0, b2, 0, "batch sizes differ", loc);
  check_extent("baddbmm", b1, 2, b2, 1, "the shapes cannot be multiplied: inner dims differ", loc);
  return add_scaled("baddbmm", input, matmul(b1, b2, loc), beta, alpha, loc);
}

Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, Scalar beta, Scalar alpha, Loc loc) {
  const graph::SourceScope at(loc, "addbmm");
  check_defined("addbmm", {&input, &b1, &b2}, loc);
  check_rank("addbmm", b1, 3, "batch1", {&b1, &b2}, loc);
  check_rank("addbmm", b2, 3, "batch2", {&b1, &b2}, loc);
  check_extent("addbmm", b1, 0, b2, 0, "batch sizes differ", loc);
  check_extent("addbmm", b1, 2, b2, 1, "the shapes cannot be multiplied: inner dims differ", loc);
  const int64_t nb = b1.size(0), n = b1.size(1), m = b1.size(2), p = b2.size(2);
  // sum_b b1[b] b2[b] is one product: [n, B*m] x [B*m, p]
  const Tensor prod = matmul(b1.permute({1, 0, 2}, loc).reshape({n, nb * m}, loc), b2.reshape({nb * m, p}, loc), loc);
  return add_scaled("addbmm", input, prod, beta, alpha, loc);
}

Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims, Loc loc) {
  check_defined("tensordot", {&a, &b}, loc);
  if (dims < 0) fail("tensordot", "dims must be >= 0, got " + num(dims), {&a, &b}, loc);
  if (dims > std::min(a.dim(), b.dim()))
    fail("tensordot", "dims " + num(dims) + " is more than an operand's rank", {&a, &b}, loc);
  IntList da, db;
  for (int64_t i = 0; i < dims; ++i) {
    da.push_back(a.dim() - dims + i);
    db.push_back(i);
  }
  return tensordot(a, b, da, db, loc);
}

Tensor tensordot(const Tensor& a, const Tensor& b, IntList dims_a, IntList dims_b, Loc loc) {
  const graph::SourceScope at(loc, "tensordot");
  check_defined("tensordot", {&a, &b}, loc);
  if (dims_a.size() != dims_b.size())
    fail("tensordot",
         "the dims lists differ in length: " + graph::shape_str(dims_a) + " and " + graph::shape_str(dims_b), {&a, &b},
         loc);
  const IntList wa = wrapped_dims(a, dims_a, loc), wb = wrapped_dims(b, dims_b, loc);
  Tensor x = a, y = b;
  for (size_t i = 0; i < wa.size(); ++i) { // as PyTorch's: an extent of 1 on one side sums the other side
    const int64_t sa = a.size(wa[i]), sb = b.size(wb[i]);
    if (sa == sb) continue;
    if (sb == 1) x = x.sum(IntList{wa[i]}, true, loc);
    else if (sa == 1) y = y.sum(IntList{wb[i]}, true, loc);
    else
      fail("tensordot",
           "contracted dims differ: " + num(sa) + " in dim " + num(wa[i]) + " of the first and " + num(sb) +
               " in dim " + num(wb[i]) + " of the second",
           {&a, &b}, loc);
  }
  const IntList pa = moved_last(x.dim(), wa), pb_last = moved_last(y.dim(), wb);
  IntList pb(pb_last.end() - static_cast<int64_t>(wb.size()), pb_last.end()); // contracted first, then the rest
  pb.insert(pb.end(), pb_last.begin(), pb_last.end() - static_cast<int64_t>(wb.size()));
  const Tensor xp = permuted(x, pa, loc), yp = permuted(y, pb, loc);
  const size_t free_a = pa.size() - wa.size(), nk = wb.size();
  IntList out(xp.shape().begin(), xp.shape().begin() + free_a);
  out.insert(out.end(), yp.shape().begin() + nk, yp.shape().end());
  const int64_t k = product(xp.shape().begin() + free_a, xp.shape().end());
  const int64_t m = product(xp.shape().begin(), xp.shape().begin() + free_a);
  const int64_t n = product(yp.shape().begin() + nk, yp.shape().end());
  return matmul(xp.reshape({m, k}, loc), yp.reshape({k, n}, loc), loc).reshape(out, loc);
}

Tensor kron(const Tensor& a, const Tensor& b, Loc loc) {
  const graph::SourceScope at(loc, "kron");
  check_defined("kron", {&a, &b}, loc);
  const int64_t r = std::max(a.dim(), b.dim()), pa = r - a.dim(), pb = r - b.dim();
  IntList sa, sb, out;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t ea = i >= pa ? a.size(i - pa) : 1, eb = i >= pb ? b.size(i - pb) : 1;
    sa.insert(sa.end(), {ea, 1});
    sb.insert(sb.end(), {1, eb});
    out.push_back(ea * eb);
  }
  detail::check_shape("kron", out, {&a, &b}, loc);
  return (a.reshape(sa, loc) * b.reshape(sb, loc)).reshape(out, loc);
}

// ---------------------------------------------------------------- diagonals

Tensor diagonal(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2, Loc loc) {
  const graph::SourceScope at(loc, "diagonal");
  check_defined("diagonal", {&x}, loc);
  if (x.dim() < 2) fail("diagonal", "needs at least 2 dims", {&x}, loc);
  const int64_t d1 = wrap_dim_or_fail("diagonal", dim1, x, loc), d2 = wrap_dim_or_fail("diagonal", dim2, x, loc);
  if (d1 == d2) fail("diagonal", "dim1 and dim2 are the same dim " + num(d1), {&x}, loc);
  const int64_t n = x.size(d1), m = x.size(d2);
  const int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min(n, m - offset) : std::min(n + offset, m));
  // the (d1, d2) planes flattened last; the diagonal is every (m + 1)-th element from its start
  const Tensor y = permuted(x, moved_last(x.dim(), {d1, d2}), loc);
  IntList flat(y.shape().begin(), y.shape().end() - 2);
  flat.push_back(n * m);
  const Tensor f = y.reshape(flat, loc);
  const int64_t last = f.dim() - 1;
  if (len == 0) return f.slice(last, 0, 0, 1, loc);
  const int64_t start = offset >= 0 ? offset : -offset * m;
  return f.slice(last, start, start + (len - 1) * (m + 1) + 1, m + 1, loc);
}

Tensor diag_embed(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2, Loc loc) {
  const graph::SourceScope at(loc, "diag_embed");
  check_defined("diag_embed", {&x}, loc);
  if (x.dim() < 1) fail("diag_embed", "needs at least 1 dim", {&x}, loc);
  const Tensor probe = x.unsqueeze(-1, loc); // rank + 1: the result's rank, to wrap dim1 and dim2
  const int64_t d1 = wrap_dim_or_fail("diag_embed", dim1, probe, loc);
  const int64_t d2 = wrap_dim_or_fail("diag_embed", dim2, probe, loc);
  if (d1 == d2) fail("diag_embed", "dim1 and dim2 are the same dim " + num(d1), {&x}, loc);
  const int64_t n = x.size(-1), m = n + std::abs(offset), rank = probe.dim();
  IntList batch(x.shape().begin(), x.shape().end() - 1), flat = batch, square = batch;
  flat.push_back(n * (m + 1));
  square.insert(square.end(), {m, m});
  detail::check_shape("diag_embed", square, {&x}, loc);
  // each value followed by m zeros puts the next one m + 1 further: on the diagonal of an m x m plane
  const int64_t start = offset >= 0 ? offset : -offset * m;
  const Tensor spaced = pad(probe, {0, m}, 0, loc).reshape(flat, loc);
  const Tensor plane = pad(spaced, {start, m * m - start - n * (m + 1)}, 0, loc).reshape(square, loc);
  IntList perm(static_cast<size_t>(rank), -1);
  perm[d1] = rank - 2;
  perm[d2] = rank - 1;
  for (int64_t i = 0, src = 0; i < rank; ++i)
    if (perm[i] < 0) perm[i] = src++;
  return permuted(plane, perm, loc);
}

Tensor diag(const Tensor& x, int64_t offset, Loc loc) {
  check_defined("diag", {&x}, loc);
  if (x.dim() == 1) return diag_embed(x, offset, 0, 1, loc);
  if (x.dim() == 2) return diagonal(x, offset, 0, 1, loc);
  fail("diag", "expects a 1-d or 2-d tensor", {&x}, loc);
}

Tensor trace(const Tensor& x, Loc loc) {
  check_defined("trace", {&x}, loc);
  check_rank("trace", x, 2, "the input", {&x}, loc);
  return diagonal(x, 0, 0, 1, loc).sum({}, false, loc);
}

// ---------------------------------------------------------------- cross, cdist

Tensor linalg::cross(const Tensor& a, const Tensor& b, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "linalg.cross");
  check_defined("linalg.cross", {&a, &b}, loc);
  return cross_along("linalg.cross", a, b, dim, loc);
}

Tensor cross(const Tensor& a, const Tensor& b, std::optional<int64_t> dim, Loc loc) {
  const graph::SourceScope at(loc, "cross");
  check_defined("cross", {&a, &b}, loc);
  if (dim) return cross_along("cross", a, b, *dim, loc);
  const auto three = std::find(a.shape().begin(), a.shape().end(), 3);
  if (three == a.shape().end()) fail("cross", "no dim of the first input has extent 3", {&a, &b}, loc);
  return cross_along("cross", a, b, three - a.shape().begin(), loc);
}

Tensor cdist(const Tensor& x1, const Tensor& x2, double p, Loc loc) {
  const graph::SourceScope at(loc, "cdist");
  check_defined("cdist", {&x1, &x2}, loc);
  if (x1.dim() < 2 || x2.dim() < 2) fail("cdist", "the inputs need at least 2 dims", {&x1, &x2}, loc);
  if (!is_floating(x1.dtype()) || !is_floating(x2.dtype()))
    fail("cdist", "the inputs must be floating point", {&x1, &x2}, loc);
  if (!(p >= 0)) fail("cdist", "p must be >= 0, got " + std::to_string(p), {&x1, &x2}, loc);
  check_extent("cdist", x1, -1, x2, -1, "the inputs' rows differ in length", loc);
  const IntList b1(x1.shape().begin(), x1.shape().end() - 2), b2(x2.shape().begin(), x2.shape().end() - 2);
  if (!graph::broadcast_shapes(b1, b2)) fail("cdist", "the batch dims cannot be broadcast", {&x1, &x2}, loc);
  const Tensor diff = x1.unsqueeze(-2, loc) - x2.unsqueeze(-3, loc); // [..., P, R, M]
  return linalg_vector_norm(diff, p, {-1}, false, loc);
}

Tensor pdist(const Tensor& x, double p, Loc loc) {
  const graph::SourceScope at(loc, "pdist");
  const detail::UserCall call("pdist", loc);
  check_defined("pdist", {&x}, loc);
  check_rank("pdist", x, 2, "the input", {&x}, loc);
  if (!is_floating(x.dtype())) fail("pdist", "the input must be floating point", {&x}, loc);
  if (!(p >= 0)) fail("pdist", "p must be >= 0, got " + std::to_string(p), {&x}, loc);
  const int64_t n = x.size(0);
  const Tensor pairs = triu_indices(n, n, 1, x.device(), loc); // [2, n (n - 1) / 2]: (i; j), i < j
  const Tensor diff =
      index_select(x, 0, pairs.select(0, 0, loc), loc) - index_select(x, 0, pairs.select(0, 1, loc), loc);
  return linalg_vector_norm(diff, p, {-1}, false, loc);
}

namespace {

// x [..., n, n] checked for matrix_power (under `op`).
void check_square(const char* op, const Tensor& x, const Loc& loc) {
  check_defined(op, {&x}, loc);
  if (x.dim() < 2 || x.size(-1) != x.size(-2)) fail(op, "needs square matrices [..., n, n]", {&x}, loc);
}

// x^0, ..., x^(N-1) of the elements of x along a new last dim: a cumulative product of [1, x, x, ...].
Tensor powers(const Tensor& x, int64_t N, const Loc& loc) {
  if (N == 0) return zeros_like(x).unsqueeze(-1, loc).slice(-1, 0, 0, 1, loc);
  IntList shape = x.shape();
  shape.push_back(N - 1);
  const Tensor repeated = x.unsqueeze(-1, loc).expand(shape, loc);
  return cumprod(concat({ones_like(x).unsqueeze(-1, loc), repeated}, -1, loc), -1, loc);
}

} // namespace

Tensor matrix_power(const Tensor& x, int64_t k, Loc loc) {
  const graph::SourceScope at(loc, "matrix_power");
  const detail::UserCall call("matrix_power", loc);
  check_square("matrix_power", x, loc);
  if (k < 0)
    fail("matrix_power", "a negative power (" + num(k) + ") needs a matrix inverse, which kiln does not have", {&x},
         loc);
  const int64_t n = x.size(-1);
  if (k == 0) return eye(n, n, x.dtype(), x.device(), loc).expand(x.shape(), loc);
  Tensor result, square = x;
  for (int64_t e = k;; e >>= 1) { // binary powering: the set bits of k
    if (e & 1) result = result.defined() ? matmul(result, square, loc) : square;
    if (e <= 1) break;
    square = matmul(square, square, loc);
  }
  return result;
}

Tensor vander(const Tensor& x, std::optional<int64_t> N, bool increasing, Loc loc) {
  const graph::SourceScope at(loc, "vander");
  const detail::UserCall call("vander", loc);
  check_defined("vander", {&x}, loc);
  check_rank("vander", x, 1, "the input", {&x}, loc);
  const int64_t cols = N.value_or(x.size(0));
  if (cols < 0) fail("vander", "N must be non-negative, got " + num(cols), {&x}, loc);
  const Tensor v = powers(x, cols, loc);
  return increasing ? v : flip(v, {1}, loc);
}

Tensor nn::functional::pdist(const Tensor& x, double p, Loc loc) { return kiln::pdist(x, p, loc); }

Tensor linalg::matrix_power(const Tensor& x, int64_t k, Loc loc) {
  const detail::UserCall call("linalg.matrix_power", loc);
  return kiln::matrix_power(x, k, loc);
}

Tensor linalg::multi_dot(const std::vector<Tensor>& tensors, Loc loc) {
  const graph::SourceScope at(loc, "linalg.multi_dot");
  const detail::UserCall call("linalg.multi_dot", loc);
  if (tensors.size() < 2)
    throw Error("linalg.multi_dot", "needs at least 2 tensors, got " + num(std::ssize(tensors)), loc);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    check_defined("linalg.multi_dot", {&t}, loc);
    const bool end = i == 0 || i + 1 == tensors.size();
    if (t.dim() != 2 && !(end && t.dim() == 1))
      fail("linalg.multi_dot",
           "tensor " + num(static_cast<int64_t>(i)) + " must be 2-d (the first and last may be 1-d)", {&t}, loc);
  }
  const bool row = tensors.front().dim() == 1, col = tensors.back().dim() == 1;
  Tensor acc = row ? tensors.front().unsqueeze(0, loc) : tensors.front();
  for (size_t i = 1; i < tensors.size(); ++i) {
    const Tensor next = i + 1 == tensors.size() && col ? tensors[i].unsqueeze(1, loc) : tensors[i];
    if (acc.size(1) != next.size(0))
      fail("linalg.multi_dot",
           "tensor " + num(static_cast<int64_t>(i)) + " does not chain: " + num(acc.size(1)) + " vs " +
               num(next.size(0)),
           {&acc, &next}, loc);
    acc = mm(acc, next, loc);
  }
  if (col) acc = acc.squeeze(1, loc);
  return row ? acc.squeeze(0, loc) : acc;
}

Tensor linalg::vecdot(const Tensor& x, const Tensor& y, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "linalg.vecdot");
  const detail::UserCall call("linalg.vecdot", loc);
  check_defined("linalg.vecdot", {&x, &y}, loc);
  const Tensor prod = x * y;
  return prod.sum({wrap_dim_or_fail("linalg.vecdot", dim, prod, loc)}, false, loc);
}

Tensor linalg::vander(const Tensor& x, std::optional<int64_t> N, Loc loc) {
  const graph::SourceScope at(loc, "linalg.vander");
  const detail::UserCall call("linalg.vander", loc);
  check_defined("linalg.vander", {&x}, loc);
  if (x.dim() < 1) fail("linalg.vander", "needs at least 1 dim", {&x}, loc);
  const int64_t cols = N.value_or(x.size(-1));
  if (cols < 1) fail("linalg.vander", "N must be at least 1, got " + num(cols), {&x}, loc);
  return powers(x, cols, loc);
}

// ---------------------------------------------------------------- methods

Tensor Tensor::mm(const Tensor& o, Loc loc) const { return kiln::mm(*this, o, loc); }
Tensor Tensor::bmm(const Tensor& o, Loc loc) const { return kiln::bmm(*this, o, loc); }
Tensor Tensor::mv(const Tensor& v, Loc loc) const { return kiln::mv(*this, v, loc); }
Tensor Tensor::dot(const Tensor& o, Loc loc) const { return kiln::dot(*this, o, loc); }
Tensor Tensor::outer(const Tensor& o, Loc loc) const { return kiln::outer(*this, o, loc); }
Tensor Tensor::kron(const Tensor& o, Loc loc) const { return kiln::kron(*this, o, loc); }
Tensor Tensor::trace(Loc loc) const { return kiln::trace(*this, loc); }
Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2, Loc loc) const {
  return kiln::diagonal(*this, offset, dim1, dim2, loc);
}
Tensor Tensor::diag(int64_t offset, Loc loc) const { return kiln::diag(*this, offset, loc); }
Tensor Tensor::diag_embed(int64_t offset, int64_t dim1, int64_t dim2, Loc loc) const {
  return kiln::diag_embed(*this, offset, dim1, dim2, loc);
}
Tensor Tensor::cross(const Tensor& o, std::optional<int64_t> dim, Loc loc) const {
  return kiln::cross(*this, o, dim, loc);
}
Tensor Tensor::addmm(const Tensor& m1, const Tensor& m2, Scalar beta, Scalar alpha, Loc loc) const {
  return kiln::addmm(*this, m1, m2, beta, alpha, loc);
}
Tensor Tensor::baddbmm(const Tensor& b1, const Tensor& b2, Scalar beta, Scalar alpha, Loc loc) const {
  return kiln::baddbmm(*this, b1, b2, beta, alpha, loc);
}

} // namespace kiln

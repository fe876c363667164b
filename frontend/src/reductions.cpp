// More reductions, NaN handling and scans (kiln/tensor.h), as PyTorch 1.13's functions of the same names:
// compositions of kiln's ops (sort, gather, cumprod, max, logsumexp, where) and its scans (cummax, cummin and
// logcumsumexp are graph::build's O(n) scans), so gradients, fusion, compile() and CUDA come with them. Each
// function checks its arguments under its own name, and a detail::UserCall reports an error of an op it uses
// as its own, at the caller's line.

#include <cmath>
#include <limits>
#include <numeric>

#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "kiln/autograd.h"
#include "kiln/indexops.h"

namespace kiln {

using detail::fail;
namespace b = graph::build;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using Scope = detail::OpScope;

void require_defined(const char* op, const Tensor& x, const Loc& loc) {
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
}

void require_floating(const char* op, const Tensor& x, const Loc& loc) {
  require_defined(op, x, loc);
  if (!is_floating(x.dtype())) fail(op, "needs a floating tensor", {&x}, loc);
}

Tensor bool_like(const Tensor& x, bool value, const Loc& loc) { return full(x.shape(), value, kBool, x.device(), loc); }

// x with its rank at least 1 (a 0-d tensor as [1]), and dim wrapped for it.
std::pair<Tensor, int64_t> with_dim(const char* op, const Tensor& x, int64_t dim, const Loc& loc) {
  require_defined(op, x, loc);
  const int64_t d = detail::wrap_dim_or_fail(op, dim, x, loc);
  return {x.dim() == 0 ? x.reshape({1}, loc) : x, x.dim() == 0 ? 0 : d};
}

// The permutation that moves dim d last, and its inverse.
IntList to_last(int64_t rank, int64_t d) {
  IntList p;
  for (int64_t i = 0; i < rank; ++i)
    if (i != d) p.push_back(i);
  p.push_back(d);
  return p;
}
IntList from_last(int64_t rank, int64_t d) {
  IntList p;
  for (int64_t i = 0; i < rank; ++i) p.push_back(i < d ? i : i == d ? rank - 1 : i - 1);
  return p;
}

// A pair result squeezed along d unless keepdim, and back to 0-d for a 0-d input.
std::pair<Tensor, Tensor> finish_pair(const Tensor& x, Tensor v, Tensor i, int64_t d, bool keepdim, const Loc& loc) {
  if (x.dim() == 0) return {v.reshape({}, loc), i.reshape({}, loc)};
  if (keepdim) return {v, i};
  return {v.squeeze(d, loc), i.squeeze(d, loc)};
}

// ---------------------------------------------------------------- prod

// The product of the other elements of dim d at each position, from prefix and suffix products (no division,
// so exact with zeros): PyTorch's prod_safe_zeros_backward.
Tensor others_product(const Tensor& x, int64_t d, const Loc& loc) {
  const int64_t n = x.size(d);
  IntList one_shape = x.shape();
  one_shape[d] = 1;
  const Tensor one = ones(one_shape, x.dtype(), x.device(), loc);
  const Tensor left = concat({one, cumprod(x, d, loc).narrow(d, 0, n - 1, loc)}, d, loc);
  const Tensor suffix = flip(cumprod(flip(x, {d}, loc), d, loc), {d}, loc);
  return left * concat({suffix.narrow(d, 1, n - 1, loc), one}, d, loc);
}

// The product along dim d (kept, extent 1) of a floating x with a non-empty dim d.
Tensor product_kept(const Tensor& x, int64_t d, const Loc& loc) {
  const int64_t n = x.size(d);
  const CustomFunction product{
      "prod",
      [d, n, loc](const std::vector<Tensor>& in) -> std::vector<Tensor> {
        return {cumprod(in[0], d, loc).narrow(d, n - 1, 1, loc)};
      },
      [d, loc](const std::vector<Tensor>& in, const std::vector<Tensor>&,
               const std::vector<Tensor>& g) -> std::vector<Tensor> { return {g[0] * others_product(in[0], d, loc)}; }};
  return product({x}, loc)[0];
}

Tensor prod_along(const Tensor& x, int64_t d, bool keepdim, const Loc& loc) {
  IntList kept = x.shape();
  kept[d] = 1;
  Tensor r;
  if (x.size(d) == 0) r = ones(kept, is_floating(x.dtype()) ? x.dtype() : kInt64, x.device(), loc);
  else if (!is_floating(x.dtype())) r = cumprod(x, d, loc).narrow(d, x.size(d) - 1, 1, loc);
  else r = product_kept(x, d, loc);
  return keepdim ? r : r.squeeze(d, loc);
}

// ---------------------------------------------------------------- median, kthvalue

// The element of each row of `sorted_index` (sorted along d) at the per-row position k (kept dim, i64), with
// its value read from x: (values, indices), so that the gradient goes to the index.
std::pair<Tensor, Tensor> pick(const Tensor& x, const Tensor& sorted_index, int64_t d, const Tensor& k,
                               const Loc& loc) {
  const Tensor index = gather(sorted_index, d, k, loc);
  return {gather(x, d, index, loc), index};
}

// The number of non-NaN elements along d (kept), as f64.
Tensor count_valid(const Tensor& x, int64_t d, const Loc& loc) {
  return logical_not(isnan(x, loc), loc).sum({d}, true, loc).to(kFloat64, loc);
}

// torch.median / nanmedian along d of a rank >= 1 x: the lower median of the (non-NaN) elements; median takes
// a row's first NaN (the stable sort's position `valid`) where it has one.
std::pair<Tensor, Tensor> median_along(const Tensor& x, int64_t d, bool ignore_nan, const Loc& loc) {
  const Tensor order = argsort(x, d, false, true, loc);
  const Tensor valid = count_valid(x, d, loc);
  const double n = static_cast<double>(x.size(d));
  Tensor k = floor(((ignore_nan ? valid : full({}, n, kFloat64, x.device(), loc)) - 1) * 0.5, loc);
  k = clamp(k, 0.0, std::nullopt, loc);
  if (!ignore_nan) k = where(lt(valid, full({}, n, kFloat64, x.device(), loc), loc), valid, k, loc);
  return pick(x, order, d, k.to(kInt64, loc), loc);
}

std::pair<Tensor, Tensor> median_dim(const char* op, const Tensor& x, int64_t dim, bool keepdim, bool ignore_nan,
                                     const Loc& loc) {
  auto [xr, d] = with_dim(op, x, dim, loc);
  if (x.dtype() == kBool) fail(op, "not defined for bool tensors", {&x}, loc);
  if (xr.size(d) == 0) fail(op, "cannot reduce over the empty dim " + std::to_string(dim), {&x}, loc);
  auto [v, i] = median_along(xr, d, ignore_nan, loc);
  return finish_pair(x, v, i, d, keepdim, loc);
}

// The value r (0-d) of every element of x, with PyTorch's evenly_distribute_backward: the gradient split
// evenly among the elements equal to r (the NaN elements when r is NaN).
Tensor evenly_distributed(const Tensor& x, const Tensor& r, const Loc& loc) {
  const Tensor flat = x.reshape({-1}, loc);
  const Tensor mask = logical_or(eq(flat, r, loc), logical_and(isnan(flat, loc), isnan(r, loc), loc), loc);
  const Tensor share = where(mask, flat, 0, loc).sum({}, false, loc) / mask.sum({}, false, loc).to(x.dtype(), loc);
  // A finite r keeps its exact value (share - share.detach() is 0); inf and NaN are share's own value.
  return where(isfinite(r, loc), r + (share - share.detach()), share, loc);
}

Tensor median_all(const char* op, const Tensor& x, bool ignore_nan, const Loc& loc) {
  require_defined(op, x, loc);
  if (x.dtype() == kBool) fail(op, "not defined for bool tensors", {&x}, loc);
  if (x.numel() == 0) {
    if (!is_floating(x.dtype())) fail(op, "an empty integer tensor has no median", {&x}, loc);
    return full({}, kNaN, x.dtype(), x.device(), loc);
  }
  const Tensor flat = x.reshape({-1}, loc);
  const Tensor r = median_along(flat.detach(), 0, ignore_nan, loc).first.reshape({}, loc);
  if (!is_floating(x.dtype())) return r;
  return evenly_distributed(x, r, loc);
}

// ---------------------------------------------------------------- quantile

enum class Interpolation { Linear, Lower, Higher, Nearest, Midpoint };

Interpolation interpolation_of(const char* op, const std::string& s, const Tensor& x, const Loc& loc) {
  if (s == "linear") return Interpolation::Linear;
  if (s == "lower") return Interpolation::Lower;
  if (s == "higher") return Interpolation::Higher;
  if (s == "nearest") return Interpolation::Nearest;
  if (s == "midpoint") return Interpolation::Midpoint;
  fail(op, "interpolation must be one of linear, lower, higher, midpoint or nearest, not '" + s + "'", {&x}, loc);
}

// The checks of quantile's arguments; q's values are read unless `q_checked` (a number q checked already).
void check_quantile_args(const char* op, const Tensor& x, const Tensor& q, bool q_checked, const Loc& loc) {
  require_floating(op, x, loc);
  if (!q.defined()) throw Error(op, "q is undefined", loc);
  if (q.dim() > 1) fail(op, "q must be a scalar or a 1-d tensor", {&x, &q}, loc);
  if (q.dtype() != x.dtype()) fail(op, "q must have the input's dtype", {&x, &q}, loc);
  if (x.numel() == 0) fail(op, "the input must not be empty", {&x, &q}, loc);
  if (q_checked || detail::active_capture()) return; // q's values cannot be read inside a trace
  for (double v : q.to_vector<double>(loc))
    if (!(v >= 0 && v <= 1)) fail(op, "q values must be in [0, 1], got " + std::to_string(v), {&x, &q}, loc);
}

// A number q made a 0-d tensor of x's dtype, checked.
Tensor number_q(const char* op, const Tensor& x, double q, const Loc& loc) {
  require_floating(op, x, loc);
  if (!(q >= 0 && q <= 1)) fail(op, "q must be in [0, 1], got " + std::to_string(q), {&x}, loc);
  return full({}, q, x.dtype(), x.device(), loc);
}

// Where each q falls in the sorted rows (of n elements, `valid` of them not NaN): PyTorch's ranks.
Tensor quantile_ranks(const Tensor& sorted, const Tensor& q, bool ignore_nan, Interpolation mode, const Loc& loc) {
  const double last = static_cast<double>(sorted.size(-1) - 1);
  Tensor ranks;
  if (ignore_nan) {
    const Tensor valid = logical_not(isnan(sorted, loc), loc).sum({-1}, true, loc).to(q.dtype(), loc);
    ranks = q * (valid - 1);
    ranks = where(ge(ranks, wrap_scalar(0, ranks), loc), ranks, 0.0, loc);
  } else {
    ranks = where(any(isnan(sorted, loc), -1, true, loc), wrap_scalar(last, q), q * last, loc);
  }
  if (mode == Interpolation::Lower) return floor(ranks, loc);
  if (mode == Interpolation::Higher) return ceil(ranks, loc);
  if (mode == Interpolation::Nearest) return round(ranks, loc);
  return ranks;
}

// The quantiles of the rows of xm (reduced along its last dim): [rows..., Q].
Tensor quantile_rows(const Tensor& xm, const Tensor& q1, bool ignore_nan, Interpolation mode, const Loc& loc) {
  const Tensor sorted = sort(xm, -1, false, true, loc).first;
  IntList rows = xm.shape();
  rows.back() = q1.size(0);
  const Tensor ranks = quantile_ranks(sorted, q1, ignore_nan, mode, loc).expand(rows, loc);
  const Tensor below = ranks.to(kInt64, loc);
  Tensor v = gather(sorted, -1, below, loc);
  if (mode != Interpolation::Linear && mode != Interpolation::Midpoint) return v;
  const Tensor w = mode == Interpolation::Midpoint ? full(ranks.shape(), 0.5, ranks.dtype(), ranks.device(), loc)
                                                   : ranks - below.to(ranks.dtype(), loc);
  return lerp(v, gather(sorted, -1, ceil(ranks, loc).to(kInt64, loc), loc), w, loc);
}

Tensor quantile_of(const char* op, const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   const std::string& interpolation, bool ignore_nan, bool q_checked, const Loc& loc) {
  const Scope scope(op, loc);
  check_quantile_args(op, x, q, q_checked, loc);
  const Interpolation mode = interpolation_of(op, interpolation, x, loc);
  Tensor xm = x.reshape({-1}, loc);
  IntList shape = keepdim ? IntList(static_cast<size_t>(x.dim()), 1) : IntList{};
  if (dim) {
    auto [xr, d] = with_dim(op, x, *dim, loc);
    xm = xr.permute(to_last(xr.dim(), d), loc);
    shape = x.shape();
    if (x.dim() > 0 && keepdim) shape[d] = 1;
    if (x.dim() > 0 && !keepdim) shape.erase(shape.begin() + d);
  }
  const Tensor r = quantile_rows(xm, q.reshape({-1}, loc), ignore_nan, mode, loc); // [rows..., Q]
  if (q.dim() == 1) shape.insert(shape.begin(), q.numel());
  return r.permute(from_last(r.dim(), 0), loc).reshape(shape, loc);
}

// cummax (is_max) or cummin along dim: the running extreme (a Cummax or Cummin scan: a NaN sticks, a tie
// takes the later element) and the last position that holds it, or once a NaN came, the last NaN
// (build::cum_extreme_index). O(n) per row; bool runs as i64 (exact).
std::pair<Tensor, Tensor> running_extreme(const char* op, const Tensor& x, int64_t dim, bool is_max, const Loc& loc) {
  const Scope scope(op, loc);
  auto [xr, d] = with_dim(op, x, dim, loc);
  if (xr.size(d) == 0) return {x, zeros(x.shape(), kInt64, x.device(), loc)};
  const Tensor xs = xr.dtype() == kBool ? xr.to(kInt64, loc) : xr;
  const Tensor values = detail::result(is_max ? b::cummax(xs.node(), d) : b::cummin(xs.node(), d), {&xs});
  const Tensor plain = xs.detach(), found = values.detach();
  const Tensor index = detail::result(b::cum_extreme_index(plain.node(), found.node(), d, false), {&plain, &found});
  const Tensor v = xr.dtype() == kBool ? values.to(kBool, loc) : values;
  return {v.reshape(x.shape(), loc), index.reshape(x.shape(), loc)};
}

// x with NaN replaced by `value` (integers and bool unchanged).
Tensor without_nan(const Tensor& x, double value, const Loc& loc) {
  if (!is_floating(x.dtype())) return x;
  return where(logical_not(isnan(x, loc), loc), x, value, loc);
}

void check_diff_operand(const Tensor& x, const Tensor& t, int64_t d, const char* which, const Loc& loc) {
  bool ok = t.dim() == x.dim();
  for (int64_t k = 0; ok && k < x.dim(); ++k) ok = k == d || t.size(k) == x.size(k);
  if (!ok)
    fail("diff", std::string(which) + " must have the input's rank and extents except along dim " + std::to_string(d),
         {&x, &t}, loc);
}

void check_lerp(const Tensor& start, const Tensor& end, const Tensor* weight, const Loc& loc) {
  require_floating("lerp", start, loc);
  require_defined("lerp", end, loc);
  if (end.dtype() != start.dtype()) fail("lerp", "start and end must have one dtype", {&start, &end}, loc);
  if (weight && weight->dtype() != start.dtype())
    fail("lerp", "the weight must have the dtype of start and end", {&start, &end, weight}, loc);
}

// x * log(y), 0 where x is 0 and y is not NaN.
Tensor xlogy_value(const Tensor& x, const Tensor& y, const Loc& loc) {
  const Tensor zero_x = logical_and(eq(x, wrap_scalar(0, x), loc), logical_not(isnan(y, loc), loc), loc);
  return where(logical_not(zero_x, loc), x * log(y, loc), 0, loc);
}

// PyTorch's xlogy gradients: g log(y) for x (0 where x is 0 and y <= 0), g x / y for y.
std::vector<Tensor> xlogy_grads(const std::vector<Tensor>& in, const Tensor& g, const Loc& loc) {
  const Tensor& x = in[0];
  const Tensor& y = in[1];
  const Tensor flat = logical_and(eq(x, wrap_scalar(0, x), loc), le(y, wrap_scalar(0, y), loc), loc);
  return {where(logical_not(flat, loc), g * log(y, loc), 0, loc), g * x / y};
}

} // namespace

// ---------------------------------------------------------------- products and extremes

Tensor prod(const Tensor& x, Loc loc) {
  const Scope scope("prod", loc);
  require_defined("prod", x, loc);
  return prod_along(x.reshape({-1}, loc), 0, false, loc);
}

Tensor prod(const Tensor& x, int64_t dim, bool keepdim, Loc loc) {
  const Scope scope("prod", loc);
  auto [xr, d] = with_dim("prod", x, dim, loc);
  const Tensor r = prod_along(xr, d, keepdim, loc);
  return x.dim() == 0 ? r.reshape({}, loc) : r;
}

Tensor amax(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  const Scope scope("amax", loc);
  require_defined("amax", x, loc);
  return max(x, std::move(dims), keepdim, loc);
}

Tensor amin(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  const Scope scope("amin", loc);
  require_defined("amin", x, loc);
  return min(x, std::move(dims), keepdim, loc);
}

std::pair<Tensor, Tensor> aminmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim, Loc loc) {
  const Scope scope("aminmax", loc);
  require_defined("aminmax", x, loc);
  const IntList dims = dim ? IntList{*dim} : IntList{};
  return {min(x, dims, keepdim, loc), max(x, dims, keepdim, loc)};
}

// ---------------------------------------------------------------- logical reductions and counts

Tensor any(const Tensor& x, Loc loc) {
  const Scope scope("any", loc);
  require_defined("any", x, loc);
  return gt(count_nonzero(x, {}, loc), wrap_scalar(0, x), loc);
}

Tensor any(const Tensor& x, int64_t dim, bool keepdim, Loc loc) {
  const Scope scope("any", loc);
  require_defined("any", x, loc);
  detail::wrap_dim_or_fail("any", dim, x, loc); // named with x, not the mask
  const Tensor c = ne(x, wrap_scalar(0, x), loc).sum({dim}, keepdim, loc);
  return gt(c, wrap_scalar(0, c), loc);
}

Tensor all(const Tensor& x, Loc loc) {
  const Scope scope("all", loc);
  require_defined("all", x, loc);
  return eq(eq(x, wrap_scalar(0, x), loc).sum({}, false, loc), wrap_scalar(0, x), loc);
}

Tensor all(const Tensor& x, int64_t dim, bool keepdim, Loc loc) {
  const Scope scope("all", loc);
  require_defined("all", x, loc);
  detail::wrap_dim_or_fail("all", dim, x, loc); // named with x, not the mask
  const Tensor c = eq(x, wrap_scalar(0, x), loc).sum({dim}, keepdim, loc);
  return eq(c, wrap_scalar(0, c), loc);
}

Tensor count_nonzero(const Tensor& x, IntList dims, Loc loc) {
  const Scope scope("count_nonzero", loc);
  require_defined("count_nonzero", x, loc);
  return ne(x, wrap_scalar(0, x), loc).sum(std::move(dims), false, loc);
}

Tensor nansum(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  const Scope scope("nansum", loc);
  require_defined("nansum", x, loc);
  return without_nan(x, 0, loc).sum(std::move(dims), keepdim, loc);
}

Tensor nanmean(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  const Scope scope("nanmean", loc);
  require_floating("nanmean", x, loc);
  const Tensor count = logical_not(isnan(x, loc), loc).sum(dims, keepdim, loc).to(x.dtype(), loc);
  return nansum(x, dims, keepdim, loc) / count;
}

// ---------------------------------------------------------------- NaN and infinity

Tensor isnan(const Tensor& x, Loc loc) {
  const Scope scope("isnan", loc);
  require_defined("isnan", x, loc);
  return is_floating(x.dtype()) ? ne(x, x, loc) : bool_like(x, false, loc);
}

Tensor isinf(const Tensor& x, Loc loc) {
  const Scope scope("isinf", loc);
  require_defined("isinf", x, loc);
  return is_floating(x.dtype()) ? eq(abs(x, loc), wrap_scalar(kInf, x), loc) : bool_like(x, false, loc);
}

Tensor isfinite(const Tensor& x, Loc loc) {
  const Scope scope("isfinite", loc);
  require_defined("isfinite", x, loc);
  if (!is_floating(x.dtype())) return bool_like(x, true, loc);
  return logical_and(eq(x, x, loc), ne(abs(x, loc), wrap_scalar(kInf, x), loc), loc);
}

Tensor isposinf(const Tensor& x, Loc loc) {
  const Scope scope("isposinf", loc);
  require_defined("isposinf", x, loc);
  return is_floating(x.dtype()) ? eq(x, wrap_scalar(kInf, x), loc) : bool_like(x, false, loc);
}

Tensor isneginf(const Tensor& x, Loc loc) {
  const Scope scope("isneginf", loc);
  require_defined("isneginf", x, loc);
  return is_floating(x.dtype()) ? eq(x, wrap_scalar(-kInf, x), loc) : bool_like(x, false, loc);
}

Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf, Loc loc) {
  const Scope scope("nan_to_num", loc);
  require_defined("nan_to_num", x, loc);
  if (!is_floating(x.dtype())) return x;
  const bool f32 = x.dtype() == kFloat32;
  const double hi = posinf.value_or(f32 ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max());
  const double lo = neginf.value_or(f32 ? std::numeric_limits<float>::lowest() : std::numeric_limits<double>::lowest());
  Tensor y = where(logical_not(isnan(x, loc), loc), x, nan, loc);
  y = where(logical_not(isposinf(x, loc), loc), y, hi, loc);
  return where(logical_not(isneginf(x, loc), loc), y, lo, loc);
}

// ---------------------------------------------------------------- order statistics

Tensor median(const Tensor& x, Loc loc) {
  const Scope scope("median", loc);
  return median_all("median", x, false, loc);
}

std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim, Loc loc) {
  const Scope scope("median", loc);
  return median_dim("median", x, dim, keepdim, false, loc);
}

Tensor nanmedian(const Tensor& x, Loc loc) {
  const Scope scope("nanmedian", loc);
  return median_all("nanmedian", x, true, loc);
}

std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim, Loc loc) {
  const Scope scope("nanmedian", loc);
  return median_dim("nanmedian", x, dim, keepdim, true, loc);
}

std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim, Loc loc) {
  const Scope scope("kthvalue", loc);
  auto [xr, d] = with_dim("kthvalue", x, dim, loc);
  if (x.dtype() == kBool) fail("kthvalue", "not defined for bool tensors", {&x}, loc);
  if (k < 1 || k > xr.size(d))
    fail("kthvalue",
         "k " + std::to_string(k) + " is out of range for dim " + std::to_string(dim) + " of extent " +
             std::to_string(xr.size(d)),
         {&x}, loc);
  const Tensor index = argsort(xr, d, false, true, loc).narrow(d, k - 1, 1, loc);
  return finish_pair(x, gather(xr, d, index, loc), index, d, keepdim, loc);
}

Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                const std::string& interpolation, Loc loc) {
  return quantile_of("quantile", x, q, dim, keepdim, interpolation, false, false, loc);
}

Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim, const std::string& interpolation,
                Loc loc) {
  const Scope scope("quantile", loc);
  return quantile_of("quantile", x, number_q("quantile", x, q, loc), dim, keepdim, interpolation, false, true, loc);
}

Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim, bool keepdim,
                   const std::string& interpolation, Loc loc) {
  return quantile_of("nanquantile", x, q, dim, keepdim, interpolation, true, false, loc);
}

Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim, bool keepdim,
                   const std::string& interpolation, Loc loc) {
  const Scope scope("nanquantile", loc);
  return quantile_of("nanquantile", x, number_q("nanquantile", x, q, loc), dim, keepdim, interpolation, true, true,
                     loc);
}

// ---------------------------------------------------------------- scans

std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim, Loc loc) {
  return running_extreme("cummax", x, dim, true, loc);
}

std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim, Loc loc) {
  return running_extreme("cummin", x, dim, false, loc);
}

Tensor logcumsumexp(const Tensor& x, int64_t dim, Loc loc) {
  const Scope scope("logcumsumexp", loc);
  require_floating("logcumsumexp", x, loc);
  auto [xr, d] = with_dim("logcumsumexp", x, dim, loc);
  if (xr.size(d) == 0) return x;
  return detail::result(b::logcumsumexp(xr.node(), d), {&xr}).reshape(x.shape(), loc);
}

Tensor diff(const Tensor& x, int64_t n, int64_t dim, const Tensor& prepend, const Tensor& append, Loc loc) {
  const Scope scope("diff", loc);
  require_defined("diff", x, loc);
  if (x.dim() == 0) fail("diff", "needs a tensor of at least 1 dim", {&x}, loc);
  if (n < 0) fail("diff", "the order n must be non-negative, got " + std::to_string(n), {&x}, loc);
  const int64_t d = detail::wrap_dim_or_fail("diff", dim, x, loc);
  std::vector<Tensor> parts;
  if (prepend.defined()) {
    check_diff_operand(x, prepend, d, "prepend", loc);
    parts.push_back(prepend);
  }
  parts.push_back(x);
  if (append.defined()) {
    check_diff_operand(x, append, d, "append", loc);
    parts.push_back(append);
  }
  Tensor y = parts.size() == 1 ? x : concat(parts, d, loc);
  for (int64_t i = 0; i < n && y.size(d) > 0; ++i) {
    const Tensor hi = y.slice(d, 1, y.size(d), 1, loc), lo = y.slice(d, 0, y.size(d) - 1, 1, loc);
    y = y.dtype() == kBool ? ne(hi, lo, loc) : hi - lo;
  }
  return y;
}

// ---------------------------------------------------------------- pointwise

Tensor lerp(const Tensor& start, const Tensor& end, double weight, Loc loc) {
  const Scope scope("lerp", loc);
  check_lerp(start, end, nullptr, loc);
  const Tensor span = end - start;
  if (std::fabs(weight) < 0.5) return start + span * weight;
  return end - span * (1.0 - weight);
}

Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight, Loc loc) {
  const Scope scope("lerp", loc);
  require_defined("lerp", weight, loc);
  check_lerp(start, end, &weight, loc);
  const Tensor span = end - start;
  return where(lt(abs(weight, loc), wrap_scalar(0.5, weight), loc), start + weight * span, end - span * (1.0 - weight),
               loc);
}

Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value, Loc loc) {
  const Scope scope("addcmul", loc);
  require_defined("addcmul", input, loc);
  return input + (value * t1) * t2;
}

Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value, Loc loc) {
  const Scope scope("addcdiv", loc);
  require_defined("addcdiv", input, loc);
  if (t1.defined() && t2.defined() && !is_floating(t1.dtype()) && !is_floating(t2.dtype()))
    fail("addcdiv", "integer division is not supported: give a floating t1 or t2", {&input, &t1, &t2}, loc);
  return input + (value * t1) / t2;
}

Tensor xlogy(const Tensor& x, const Tensor& y, Loc loc) {
  const Scope scope("xlogy", loc);
  require_defined("xlogy", x, loc);
  require_defined("xlogy", y, loc);
  const IntList shape = (x.detach() + y.detach()).shape(); // the broadcast shape (fails as xlogy)
  const DType dt = is_floating(x.dtype()) || is_floating(y.dtype()) ? promote_types(x.dtype(), y.dtype()) : kFloat32;
  const CustomFunction f{
      "xlogy", [loc](const std::vector<Tensor>& in) -> std::vector<Tensor> { return {xlogy_value(in[0], in[1], loc)}; },
      [loc](const std::vector<Tensor>& in, const std::vector<Tensor>&,
            const std::vector<Tensor>& g) -> std::vector<Tensor> { return xlogy_grads(in, g[0], loc); }};
  return f({x.to(dt, loc).expand(shape, loc), y.to(dt, loc).expand(shape, loc)}, loc)[0];
}

Tensor xlogy(const Tensor& x, Scalar y, Loc loc) {
  const Scope scope("xlogy", loc);
  require_defined("xlogy", x, loc);
  return xlogy(x, wrap_scalar(y, x, loc), loc);
}

Tensor clamp_min(const Tensor& x, Scalar min, Loc loc) {
  const Scope scope("clamp_min", loc);
  return clamp(x, min, std::nullopt, loc);
}

Tensor clamp_max(const Tensor& x, Scalar max, Loc loc) {
  const Scope scope("clamp_max", loc);
  return clamp(x, std::nullopt, max, loc);
}

std::pair<Tensor, Tensor> var_mean(const Tensor& x, IntList dims, bool unbiased, bool keepdim, Loc loc) {
  const Scope scope("var_mean", loc);
  return {var(x, dims, unbiased, keepdim, loc), mean(x, dims, keepdim, loc)};
}

std::pair<Tensor, Tensor> std_mean(const Tensor& x, IntList dims, bool unbiased, bool keepdim, Loc loc) {
  const Scope scope("std_mean", loc);
  return {std(x, dims, unbiased, keepdim, loc), mean(x, dims, keepdim, loc)};
}

std::pair<Tensor, Tensor> detail::moments_corrected(const Tensor& x, IntList dims, int64_t correction, bool keepdim,
                                                    bool root, Loc loc) {
  const char* op = root ? "std_mean" : "var_mean";
  const Scope scope(op, loc);
  require_defined(op, x, loc);
  const Tensor spread = root ? x.std(dims, correction, keepdim, loc) : x.var(dims, correction, keepdim, loc);
  return {spread, mean(x, dims, keepdim, loc)};
}

namespace {

// y along dim as its `before` (0 .. n-2) and `after` (1 .. n-1) samples; x likewise (x 1-d is laid along dim).
struct Samples {
  Tensor y0, y1, dx; // dx undefined: unit spacing (the caller scales)
};

Samples samples(const char* op, const Tensor& y, const Tensor* x, int64_t dim, const Loc& loc) {
  require_floating(op, y, loc);
  if (y.dim() == 0) fail(op, "needs an input of at least 1 dim", {&y}, loc);
  const int64_t d = detail::wrap_dim_or_fail(op, dim, y, loc), n = y.size(d);
  Samples s{y.slice(d, 0, std::max<int64_t>(n - 1, 0), 1, loc), y.slice(d, 1, n, 1, loc), Tensor()};
  if (!x) return s;
  require_defined(op, *x, loc);
  Tensor xs = *x;
  if (x->dim() == 1) {
    if (x->size(0) != n) fail(op, "a 1-d x must have y's extent along dim", {&y, x}, loc);
    IntList shape(static_cast<size_t>(y.dim()), 1);
    shape[static_cast<size_t>(d)] = n;
    xs = x->reshape(shape, loc);
  } else if (x->shape() != y.shape()) {
    fail(op, "x must be 1-d or have y's shape", {&y, x}, loc);
  }
  s.dx = xs.slice(d, 1, n, 1, loc) - xs.slice(d, 0, std::max<int64_t>(n - 1, 0), 1, loc);
  return s;
}

} // namespace

Tensor trapezoid(const Tensor& y, double dx, int64_t dim, Loc loc) {
  const Scope scope("trapezoid", loc);
  const Samples s = samples("trapezoid", y, nullptr, dim, loc);
  const int64_t d = detail::wrap_dim_or_fail("trapezoid", dim, y, loc);
  return (s.y0 + s.y1).sum({d}, false, loc) * (dx / 2);
}

Tensor trapezoid(const Tensor& y, const Tensor& x, int64_t dim, Loc loc) {
  const Scope scope("trapezoid", loc);
  const Samples s = samples("trapezoid", y, &x, dim, loc);
  const int64_t d = detail::wrap_dim_or_fail("trapezoid", dim, y, loc);
  return (s.dx * (s.y0 + s.y1)).sum({d}, false, loc) / 2.0;
}

Tensor trapz(const Tensor& y, double dx, int64_t dim, Loc loc) {
  const Scope scope("trapz", loc);
  return trapezoid(y, dx, dim, loc);
}

Tensor trapz(const Tensor& y, const Tensor& x, int64_t dim, Loc loc) {
  const Scope scope("trapz", loc);
  return trapezoid(y, x, dim, loc);
}

Tensor cumulative_trapezoid(const Tensor& y, double dx, int64_t dim, Loc loc) {
  const Scope scope("cumulative_trapezoid", loc);
  const Samples s = samples("cumulative_trapezoid", y, nullptr, dim, loc);
  return cumsum((s.y0 + s.y1) * (dx / 2), detail::wrap_dim_or_fail("cumulative_trapezoid", dim, y, loc), loc);
}

Tensor cumulative_trapezoid(const Tensor& y, const Tensor& x, int64_t dim, Loc loc) {
  const Scope scope("cumulative_trapezoid", loc);
  const Samples s = samples("cumulative_trapezoid", y, &x, dim, loc);
  return cumsum(s.dx * (s.y0 + s.y1) / 2.0, detail::wrap_dim_or_fail("cumulative_trapezoid", dim, y, loc), loc);
}

Tensor cov(const Tensor& x, int64_t correction, Loc loc) {
  const Scope scope("cov", loc);
  require_floating("cov", x, loc);
  if (x.dim() > 2) fail("cov", "needs a 1-d or 2-d input [variables, observations]", {&x}, loc);
  const Tensor rows = x.dim() < 2 ? x.reshape({1, -1}, loc) : x;
  const Tensor centered = rows - rows.mean({1}, true, loc);
  const double count = static_cast<double>(rows.size(1) - correction);
  const Tensor c = matmul(centered, centered.t(loc), loc) / std::max(count, 0.0);
  return x.dim() < 2 ? c.reshape({}, loc) : c;
}

Tensor corrcoef(const Tensor& x, Loc loc) {
  const Scope scope("corrcoef", loc);
  require_floating("corrcoef", x, loc);
  const Tensor c = cov(x, 1, loc);
  if (c.dim() == 0) return c / c;
  const Tensor sd = sqrt(c.diagonal(0, 0, 1, loc), loc);
  return clamp((c / sd.unsqueeze(1, loc)) / sd.unsqueeze(0, loc), -1.0, 1.0, loc);
}

Tensor logaddexp(const Tensor& a, const Tensor& b, Loc loc) {
  const Scope scope("logaddexp", loc);
  require_floating("logaddexp", a, loc);
  require_floating("logaddexp", b, loc);
  const IntList shape = (a.detach() + b.detach()).shape(); // the broadcast shape (fails as logaddexp)
  return logsumexp(stack({a.expand(shape, loc), b.expand(shape, loc)}, 0, loc), {0}, false, loc);
}

} // namespace kiln

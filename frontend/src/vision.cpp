// nn::functional's rearrangements of images (pixel_shuffle, pixel_unshuffle, channel_shuffle) and lookups
// (embedding, embedding_bag): reshapes, permutes, index_select and index_add, so that autograd, fusion and
// compile() treat them as any composite.

#include <cmath>
#include <limits>
#include <string>

#include "frontend/src/tensor_impl.h"
#include "frontend/src/windows.h"
#include "graph/shape.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/indexops.h"

namespace kiln::nn::functional {

namespace {

using kiln::detail::fail;

// x's leading dims, before its last three ([*, C, H, W]).
IntList batch_dims(const Tensor& x) {
  IntList s = x.shape();
  return IntList(s.begin(), s.end() - 3);
}

// The checks of pixel_shuffle and pixel_unshuffle (op): rank >= 3 and a positive factor.
void check_shuffle(const char* op, const Tensor& x, int64_t factor, const char* name, const Loc& loc) {
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (x.dim() < 3) fail(op, "expects an input [*, C, H, W] of at least 3 dims", {&x}, loc);
  if (factor <= 0) fail(op, std::string(name) + " must be positive, got " + std::to_string(factor), {&x}, loc);
}

// x viewed as `split` (its batch dims, then `rest`), permuted by `order` (after the batch dims) and reshaped to
// `out` (after the batch dims).
Tensor rearrange(const Tensor& x, const IntList& rest, const IntList& order, const IntList& out, const Loc& loc) {
  IntList split = batch_dims(x), perm, shape = batch_dims(x);
  const auto b = static_cast<int64_t>(split.size());
  for (int64_t d = 0; d < b; ++d) perm.push_back(d);
  for (int64_t d : order) perm.push_back(b + d);
  split.insert(split.end(), rest.begin(), rest.end());
  shape.insert(shape.end(), out.begin(), out.end());
  return x.reshape(split, loc).permute(perm, loc).reshape(shape, loc);
}

} // namespace

Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor, Loc loc) {
  const char* op = "pixel_shuffle";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  check_shuffle(op, x, upscale_factor, "upscale_factor", loc);
  const int64_t r = upscale_factor, c = x.size(-3), h = x.size(-2), w = x.size(-1);
  if (c % (r * r) != 0)
    fail(op,
         "the channels (dim -3, " + std::to_string(c) +
             ") must be divisible by upscale_factor^2 = " + std::to_string(r * r),
         {&x}, loc);
  return rearrange(x, {c / (r * r), r, r, h, w}, {0, 3, 1, 4, 2}, {c / (r * r), h * r, w * r}, loc);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor, Loc loc) {
  const char* op = "pixel_unshuffle";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  check_shuffle(op, x, downscale_factor, "downscale_factor", loc);
  const int64_t r = downscale_factor, c = x.size(-3), h = x.size(-2), w = x.size(-1);
  if (h % r != 0 || w % r != 0)
    fail(op,
         "the height and width (" + std::to_string(h) + ", " + std::to_string(w) +
             ") must be divisible by downscale_factor " + std::to_string(r),
         {&x}, loc);
  return rearrange(x, {c, h / r, r, w / r, r}, {0, 2, 4, 1, 3}, {c * r * r, h / r, w / r}, loc);
}

Tensor channel_shuffle(const Tensor& x, int64_t groups, Loc loc) {
  const char* op = "channel_shuffle";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (x.dim() < 3) fail(op, "expects an input [N, C, *] of more than 2 dims", {&x}, loc);
  if (groups <= 0) fail(op, "groups must be positive, got " + std::to_string(groups), {&x}, loc);
  const int64_t c = x.size(1);
  if (c % groups != 0)
    fail(op, "the channels (" + std::to_string(c) + ") must be divisible by groups (" + std::to_string(groups) + ")",
         {&x}, loc);
  IntList split = x.shape();
  split[1] = c / groups;
  split.insert(split.begin() + 1, groups); // [N, g, C / g, *]
  return x.reshape(split, loc).transpose(1, 2, loc).reshape(x.shape(), loc);
}

namespace {

// The checks of embedding and embedding_bag (op) on integer indices and a weight [num, dim]: padding_idx within
// [-num, num) (returned wrapped), max_norm >= 0 and finite, norm_type > 0 (or infinity).
std::optional<int64_t> check_lookup(const char* op, const Tensor& input, const Tensor& weight,
                                    std::optional<int64_t> padding_idx, std::optional<double> max_norm,
                                    double norm_type, const Loc& loc) {
  if (!input.defined() || !weight.defined()) throw Error(op, "the indices or the weight are undefined", loc);
  if (!is_integral(input.dtype())) fail(op, "needs integer (i32 or i64) indices", {&input}, loc);
  if (weight.dim() != 2) fail(op, "the weight must be [num_embeddings, embedding_dim]", {&input, &weight}, loc);
  const int64_t num = weight.size(0);
  if (padding_idx && (*padding_idx < -num || *padding_idx >= num))
    fail(op,
         "padding_idx " + std::to_string(*padding_idx) + " must be within [-" + std::to_string(num) + ", " +
             std::to_string(num) + ")",
         {&weight}, loc);
  if (max_norm && !(*max_norm >= 0 && std::isfinite(*max_norm)))
    fail(op, "max_norm must be non-negative and finite, got " + std::to_string(*max_norm), {&weight}, loc);
  if (max_norm && !(norm_type > 0))
    fail(op, "norm_type must be positive (or infinity), got " + std::to_string(norm_type), {&weight}, loc);
  if (!padding_idx) return std::nullopt;
  return *padding_idx < 0 ? *padding_idx + num : *padding_idx;
}

// torch's embedding_renorm_, as a graph over all rows (no host loop): the rows `flat` ([n] indices) references
// whose norm_type-norm exceeds max_norm are scaled by max_norm / (norm + 1e-7), the others multiplied by exactly
// 1. Like an optimizer's update, assign() records it (captured by compile()) without a gradient; the lookup then
// reads, and differentiates, the new weight.
void renorm_referenced_rows(Tensor weight, const Tensor& flat, double max_norm, double norm_type) {
  NoGradGuard no_grad;
  const Tensor magnitude = abs(weight);
  Tensor norm;
  if (std::isinf(norm_type)) norm = max(magnitude, {1}, true);
  else if (norm_type == 1) norm = sum(magnitude, 1, true);
  else if (norm_type == 2) norm = sqrt(sum(weight * weight, 1, true));
  else norm = pow(sum(pow(magnitude, norm_type), 1, true), 1.0 / norm_type);
  const Tensor uses = index_add(zeros({weight.size(0), 1}, weight.dtype(), weight.device()), 0, flat,
                                ones({flat.numel(), 1}, weight.dtype(), weight.device()));
  const Tensor scale = where(logical_and(uses > 0, norm > max_norm), max_norm / (norm + 1e-7), 1.0);
  weight.assign(weight * scale);
}

} // namespace

Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx,
                 std::optional<double> max_norm, double norm_type, Loc loc) {
  const graph::SourceScope at(loc, "embedding"); // nodes made here record the caller's line
  // index_select's range errors are embedding's (a module calling it keeps them its own: KilnLines)
  const detail::UserCall call("embedding", loc, detail::UserCall::Claim::KilnLines);
  const std::optional<int64_t> pad = check_lookup("embedding", input, weight, padding_idx, max_norm, norm_type, loc);
  const int64_t n = input.numel(), dim = weight.size(1);
  const Tensor flat = input.reshape({n}, loc);
  if (max_norm) renorm_referenced_rows(weight, flat, *max_norm, norm_type);
  Tensor rows = index_select(weight, 0, flat);
  // The padding row's uses read it but send no gradient back (torch's padding_idx).
  if (pad) rows = where((flat.reshape({n, 1}) == *pad).expand({n, dim}), rows.detach(), rows);
  IntList out = input.shape();
  out.push_back(dim);
  return rows.reshape(out, loc);
}

namespace {

// The bags of embedding_bag: which bag each index is in, where each bag starts and ends, and the longest.
struct Bags {
  Tensor flat; ///< the indices, [n]
  Tensor bag_of; ///< i64 [n]: each index's bag (count where it lies past include_last_offset's last offset)
  Tensor start; ///< i64 [count]: each bag's first position in flat
  Tensor end; ///< i64 [count]: one past its last
  int64_t count; ///< the number of bags
  int64_t longest; ///< an upper bound of the bags' lengths
};

// Offsets already computed must start at 0, not decrease and not pass the input's length, as PyTorch's checks;
// returns the longest bag (numel, a bound, for offsets not computed yet).
int64_t check_offsets(const char* op, const Tensor& input, const Tensor& offsets, bool include_last, const Loc& loc) {
  const int64_t n = input.numel();
  if (!offsets.node()->realized() || detail::active_capture()) return n;
  std::vector<int64_t> o = offsets.to_vector<int64_t>(loc);
  if (o.empty()) return 0;
  if (o[0] != 0)
    fail(op, "offsets[0] must be 0 (the first bag starts the input), got " + std::to_string(o[0]), {&input, &offsets},
         loc);
  if (o.back() > n)
    fail(op,
         "offsets[-1] (" + std::to_string(o.back()) + ") must not be greater than the input's length " +
             std::to_string(n),
         {&input, &offsets}, loc);
  if (!include_last) o.push_back(n);
  int64_t longest = 0;
  for (size_t i = 1; i < o.size(); ++i) {
    if (o[i] < o[i - 1])
      fail(op,
           "offsets must not decrease, but offsets[" + std::to_string(i) + "] < offsets[" + std::to_string(i - 1) + "]",
           {&input, &offsets}, loc);
    longest = std::max(longest, o[i] - o[i - 1]);
  }
  return longest;
}

// The bags of a 1-d input with offsets (checked): bag_of as PyTorch's offset2bag, a cumulative count of the
// offsets at or before each position.
Bags bags_of_offsets(const char* op, const Tensor& input, const Tensor& offsets, bool include_last, const Loc& loc) {
  if (offsets.dim() != 1 || !is_integral(offsets.dtype()))
    fail(op, "the offsets must be a 1-d integer tensor", {&input, &offsets}, loc);
  const int64_t n = input.numel(), m = offsets.size(0), count = include_last ? m - 1 : m;
  if (count < 0) fail(op, "include_last_offset needs at least one offset", {&input, &offsets}, loc);
  const int64_t longest = check_offsets(op, input, offsets, include_last, loc);
  const Device dev = input.device();
  const Tensor o = offsets.to(kInt64);
  const Tensor marks = index_add(zeros({n + 1}, kInt64, dev), 0, o, ones({m}, kInt64, dev), 1, loc);
  const Tensor bag_of = cumsum(marks, 0, loc).slice(0, 0, n) - 1;
  const Tensor end = include_last ? o.slice(0, 1, m) : concat({o.slice(0, 1, m), full({1}, n, kInt64, dev)});
  return {input.reshape({n}, loc), bag_of, o.slice(0, 0, count), end, count, longest};
}

// The bags of a 2-d input [B, N]: its rows.
Bags bags_of_rows(const Tensor& input, const Loc& loc) {
  const int64_t b = input.size(0), w = input.size(1);
  const Device dev = input.device();
  const Tensor rows = arange(0, static_cast<double>(b), 1, kInt64, dev), start = rows * w;
  return {input.reshape({b * w}, loc), rows.reshape({b, 1}).expand({b, w}).reshape({b * w}), start, start + w, b, w};
}

// The sum of each bag's rows (their per-sample weights applied; the padding row's uses left out), or their mean.
// One more bag collects what lies past include_last_offset's last offset.
Tensor bag_sums(const Bags& g, const Tensor& rows, const Tensor& keep, bool mean, const Loc& loc) {
  const int64_t dim = rows.size(1);
  const Tensor kept = where(keep.reshape({g.flat.numel(), 1}), rows, 0.0, loc);
  const Tensor sums =
      index_add(zeros({g.count + 1, dim}, rows.dtype(), rows.device()), 0, g.bag_of, kept, 1, loc).slice(0, 0, g.count);
  if (!mean) return sums;
  const Tensor counts =
      index_add(zeros({g.count + 1}, rows.dtype(), rows.device()), 0, g.bag_of, keep.to(rows.dtype()), 1, loc)
          .slice(0, 0, g.count);
  return sums / maximum(counts, ones({}, rows.dtype(), rows.device())).reshape({g.count, 1}); // an empty bag: 0
}

// The max of each bag's rows (the padding row's uses left out; an empty bag gives 0), its gradient going to the
// first maximum (windows::window_max) as PyTorch's max_indices: the rows gathered into [count, longest, dim]
// slots, the slots past a bag's end -infinity.
Tensor bag_max(const Bags& g, const Tensor& rows, const Tensor& keep, const Loc& loc) {
  const int64_t n = g.flat.numel(), dim = rows.size(1), l = std::max<int64_t>(g.longest, 1);
  if (n == 0) return zeros({g.count, dim}, rows.dtype(), rows.device(), loc);
  const Tensor pos =
      g.start.reshape({g.count, 1}) + arange(0, static_cast<double>(l), 1, kInt64, rows.device()).reshape({1, l});
  const Tensor at = minimum(pos, full({}, n - 1, kInt64, rows.device())).reshape({g.count * l});
  const Tensor valid =
      logical_and(lt(pos, g.end.reshape({g.count, 1})), index_select(keep, 0, at, loc).reshape({g.count, l}));
  const Tensor slots = where(valid.reshape({g.count, l, 1}), index_select(rows, 0, at, loc).reshape({g.count, l, dim}),
                             -std::numeric_limits<double>::infinity(), loc);
  const Tensor any = valid.to(kInt64).sum({1}, true) > 0;
  return where(any, windows::window_max("embedding_bag", slots, {1}, loc), 0.0, loc);
}

// The checks of embedding_bag's mode, input rank, offsets and per_sample_weights.
void check_bag_options(const char* op, const Tensor& input, const Tensor& weight, const EmbeddingBagOptions& o,
                       const Loc& loc) {
  if (o.mode != "sum" && o.mode != "mean" && o.mode != "max")
    fail(op, "mode must be \"sum\", \"mean\" or \"max\", not \"" + o.mode + "\"", {&input}, loc);
  if (input.dim() != 1 && input.dim() != 2)
    fail(op, "expects 1-d indices with offsets or 2-d indices [B, N]", {&input}, loc);
  if (input.dim() == 2 && o.offsets.defined())
    fail(op, "with a 2-d input (bags of fixed length, its rows) the offsets must be undefined", {&input, &o.offsets},
         loc);
  if (input.dim() == 1 && !o.offsets.defined()) fail(op, "a 1-d input needs offsets", {&input}, loc);
  const Tensor& w = o.per_sample_weights;
  if (!w.defined()) return;
  if (o.mode != "sum")
    fail(op, "per_sample_weights is only supported for mode \"sum\" (got mode \"" + o.mode + "\")", {&input, &w}, loc);
  if (w.shape() != input.shape() || w.dtype() != weight.dtype())
    fail(op, "per_sample_weights must have the input's shape and the weight's dtype", {&input, &weight, &w}, loc);
}

} // namespace

Tensor embedding_bag(const Tensor& input, const Tensor& weight, const EmbeddingBagOptions& options, Loc loc) {
  const char* op = "embedding_bag";
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  // the index ops' range errors are embedding_bag's (a module calling it keeps them its own: KilnLines)
  const detail::UserCall call(op, loc, detail::UserCall::Claim::KilnLines);
  const std::optional<int64_t> pad =
      check_lookup(op, input, weight, options.padding_idx, options.max_norm, options.norm_type, loc);
  check_bag_options(op, input, weight, options, loc);
  const Bags g = input.dim() == 2 ? bags_of_rows(input, loc)
                                  : bags_of_offsets(op, input, options.offsets, options.include_last_offset, loc);
  if (options.max_norm) renorm_referenced_rows(weight, g.flat, *options.max_norm, options.norm_type);
  const int64_t n = g.flat.numel();
  Tensor rows = index_select(weight, 0, g.flat);
  if (options.per_sample_weights.defined()) rows = rows * options.per_sample_weights.reshape({n, 1}, loc);
  const Tensor keep =
      pad ? ne(g.flat, full({}, *pad, g.flat.dtype(), g.flat.device())) : ones({n}, kBool, input.device());
  if (options.mode == "max") return bag_max(g, rows, keep, loc);
  return bag_sums(g, rows, keep, options.mode == "mean", loc);
}

} // namespace kiln::nn::functional

// Rearranging a tensor's elements (flip, roll, repeat, tile, repeat_interleave), as PyTorch 1.13's: each
// is a composition of kiln's movement ops (gather, slice, concat, expand, reshape), so gradients,
// fusion, compile() and CUDA come with them.

#include <algorithm>
#include <limits>
#include <numeric>

#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "kiln/indexops.h"

namespace kiln {

namespace b = graph::build;
using detail::fail;
using detail::result;
using detail::wrap_dim_or_fail;

namespace {

// x with the elements of dim d in reverse order: a gather by n-1, ..., 0 (an index made in range,
// so it needs no check).
Tensor reversed_along(const Tensor& x, int64_t d, const Loc& loc) {
  const int64_t n = x.size(d);
  IntList along(static_cast<size_t>(x.dim()), 1);
  along[d] = n;
  const Tensor index = arange(static_cast<double>(n - 1), -1, -1, kInt64, x.device(), loc).reshape(along, loc);
  return result(b::gather(x.node(), d, index.expand(x.shape(), loc).node()), {&x});
}

// x rolled by `shift` along dim d: the last `shift` elements (modulo the extent) move to the front.
Tensor rolled_along(const Tensor& x, int64_t shift, int64_t d, const Loc& loc) {
  const int64_t n = x.size(d);
  if (n == 0) return x;
  const int64_t k = ((shift % n) + n) % n;
  if (k == 0) return x;
  return concat({slice(x, d, n - k, n, 1, loc), slice(x, d, 0, n - k, 1, loc)}, d, loc);
}

// Each element of dim d (of a tensor with rank > 0) repeated `r` times in place: a new dim after d
// expanded to r, merged into d.
Tensor interleaved(const Tensor& x, int64_t r, int64_t d, const Loc& loc) {
  IntList wide = x.shape(), merged = x.shape();
  wide.insert(wide.begin() + d + 1, r);
  merged[d] *= r;
  return x.unsqueeze(d + 1, loc).expand(wide, loc).reshape(merged, loc);
}

// The repeats of repeat_interleave's tensor form, read on the host and checked: one per element of
// dim d (of extent n), or one for all of them.
std::vector<int64_t> host_repeats(const Tensor& x, const Tensor& repeats, int64_t n, const Loc& loc) {
  const char* op = "repeat_interleave";
  if (!repeats.defined()) throw Error(op, "repeats is undefined", loc);
  if (!is_integral(repeats.dtype())) fail(op, "repeats must be an integer tensor (i32 or i64)", {&x, &repeats}, loc);
  if (repeats.dim() > 1) fail(op, "repeats must be a 0-d or 1-d tensor", {&x, &repeats}, loc);
  if (detail::active_capture()) // its values decide the result's shape: they cannot stay lazy
    fail(op, "a repeats tensor is read on the host, which a function traced by compile() cannot do: pass an integer",
         {&x, &repeats}, loc);
  std::vector<int64_t> r = repeats.to_vector<int64_t>(loc);
  if (r.size() == 1) r.assign(static_cast<size_t>(n), r[0]);
  if (static_cast<int64_t>(r.size()) != n)
    fail(op, "repeats must have one value, or as many as the input's extent " + std::to_string(n) + " along dim",
         {&x, &repeats}, loc);
  if (std::any_of(r.begin(), r.end(), [](int64_t v) { return v < 0; }))
    fail(op, "repeats can not be negative", {&x, &repeats}, loc);
  return r;
}

// The dim repeat_interleave works along: `dim` wrapped, or 0 of the flattened x when it is not given.
std::pair<Tensor, int64_t> interleave_target(const Tensor& x, std::optional<int64_t> dim, const Loc& loc) {
  if (!x.defined()) throw Error("repeat_interleave", "the input is undefined", loc);
  if (!dim) return {x.reshape({-1}, loc), 0};
  if (x.dim() == 0) fail("repeat_interleave", "a 0-d tensor has no dim " + std::to_string(*dim), {&x}, loc);
  return {x, wrap_dim_or_fail("repeat_interleave", *dim, x, loc)};
}

// The (before, after) amounts of pad's mode `m` for dim d (of extent n), checked as PyTorch 1.13's
// reflection, replication and circular pads check them.
void check_mode_amounts(const std::string& m, const Tensor& x, int64_t d, int64_t b, int64_t e, const Loc& loc) {
  const int64_t n = x.size(d);
  const std::string amounts = "(" + std::to_string(b) + ", " + std::to_string(e) + ") of dim " + std::to_string(d);
  const std::string extent = " its extent " + std::to_string(n);
  const int64_t big = std::numeric_limits<int64_t>::max() / 4;
  if (b > big || e > big || b < -big || e < -big) fail("pad", "padding " + amounts + " overflows", {&x}, loc);
  if (m == "reflect" && (b >= n || e >= n))
    fail("pad", "mode reflect needs padding " + amounts + " less than" + extent, {&x}, loc);
  if (m == "circular" && (b > n || e > n))
    fail("pad", "mode circular's padding " + amounts + " wraps around more than once: it exceeds" + extent, {&x}, loc);
  if (m != "circular" && n + b + e < 1)
    fail("pad", "mode " + m + "'s padding " + amounts + " leaves no element of" + extent, {&x}, loc);
  const int64_t core = n - std::max<int64_t>(-b, 0) - std::max<int64_t>(-e, 0); // circular crops first
  if (m == "circular" && core < 0) fail("pad", "padding " + amounts + " crops more than" + extent, {&x}, loc);
  if (m == "circular" && (b > core || e > core))
    fail("pad",
         "mode circular's padding " + amounts + " wraps around more than once: it exceeds the " + std::to_string(core) +
             " elements left of" + extent + " by the negative amount",
         {&x}, loc);
}

// x (extent n along d) reflected (mirrored about its edge elements) or replicated (its edge elements
// repeated) by b before and e after, where both are not negative.
Tensor edges_padded(const Tensor& x, bool reflect, int64_t d, int64_t b, int64_t e, const Loc& loc) {
  const int64_t n = x.size(d);
  auto repeated = [&](int64_t at, int64_t k) {
    IntList wide = x.shape();
    wide[static_cast<size_t>(d)] = k;
    return slice(x, d, at, at + 1, 1, loc).expand(wide, loc);
  };
  std::vector<Tensor> parts;
  if (b > 0) parts.push_back(reflect ? reversed_along(slice(x, d, 1, b + 1, 1, loc), d, loc) : repeated(0, b));
  parts.push_back(x);
  if (e > 0)
    parts.push_back(reflect ? reversed_along(slice(x, d, n - 1 - e, n - 1, 1, loc), d, loc) : repeated(n - 1, e));
  return parts.size() == 1 ? x : concat(parts, d, loc);
}

// pad's non-constant mode `m` along dim d by (b, e), which check_mode_amounts accepted.
Tensor mode_padded(const std::string& m, const Tensor& x, int64_t d, int64_t b, int64_t e, const Loc& loc) {
  const int64_t cut_b = std::max<int64_t>(-b, 0), cut_e = std::max<int64_t>(-e, 0);
  if (m != "circular") { // pad by the positive amounts, then crop the result by the negative ones
    const Tensor y = edges_padded(x, m == "reflect", d, std::max<int64_t>(b, 0), std::max<int64_t>(e, 0), loc);
    return cut_b + cut_e == 0 ? y : slice(y, d, cut_b, y.size(d) - cut_e, 1, loc);
  }
  const Tensor core = cut_b + cut_e == 0 ? x : slice(x, d, cut_b, x.size(d) - cut_e, 1, loc);
  const int64_t n = core.size(d);
  std::vector<Tensor> parts;
  if (b > 0) parts.push_back(slice(core, d, n - b, n, 1, loc));
  parts.push_back(core);
  if (e > 0) parts.push_back(slice(core, d, 0, e, 1, loc));
  return parts.size() == 1 ? core : concat(parts, d, loc);
}

} // namespace

Tensor pad(const Tensor& x, IntList pads, PadMode mode, Scalar value, Loc loc) {
  const graph::SourceScope at(loc, "pad"); // nodes made here record the caller's line
  const std::string& m = mode.name;
  if (m == "constant") return pad(x, std::move(pads), value, loc);
  if (!x.defined()) throw Error("pad", "the input is undefined", loc);
  if (m != "reflect" && m != "replicate" && m != "circular")
    fail("pad", "unknown mode \"" + m + "\": constant, reflect, replicate or circular", {&x}, loc);
  if (value.to_double() != 0)
    fail("pad", "mode " + m + " takes no value (got " + std::to_string(value.to_double()) + ")", {&x}, loc);
  const int64_t k = static_cast<int64_t>(pads.size()) / 2;
  if (pads.size() % 2 != 0 || k < 1 || k > 3)
    fail("pad", "mode " + m + " needs (before, after) pairs for the last 1, 2 or 3 dims, got " + graph::shape_str(pads),
         {&x}, loc);
  const bool rank_ok = m == "circular" ? x.dim() == k + 2 : x.dim() == k + 1 || x.dim() == k + 2;
  if (!rank_ok)
    fail("pad",
         "mode " + m + " pads " + std::to_string(k) + " dims of a " +
             (m == "circular" ? std::to_string(k + 2) + "-d"
                              : std::to_string(k + 1) + "-d or " + std::to_string(k + 2) + "-d") +
             " input, got a " + std::to_string(x.dim()) + "-d one",
         {&x}, loc);
  for (int64_t i = 0; i < k; ++i) check_mode_amounts(m, x, x.dim() - 1 - i, pads[2 * i], pads[2 * i + 1], loc);
  Tensor y = x;
  for (int64_t i = 0; i < k; ++i) y = mode_padded(m, y, x.dim() - 1 - i, pads[2 * i], pads[2 * i + 1], loc);
  return y;
}

Tensor flip(const Tensor& x, IntList dims, Loc loc) {
  const graph::SourceScope at(loc, "flip"); // nodes made here record the caller's line
  if (!x.defined()) throw Error("flip", "the input is undefined", loc);
  std::vector<int64_t> seen;
  for (int64_t d : dims) {
    const int64_t w = wrap_dim_or_fail("flip", d, x, loc);
    if (std::find(seen.begin(), seen.end(), w) != seen.end())
      fail("flip", "dim " + std::to_string(d) + " appears more than once", {&x}, loc);
    seen.push_back(w);
  }
  Tensor y = x;
  if (x.dim() == 0) return y; // one element: nothing to reverse
  for (int64_t d : seen)
    if (x.size(d) > 1) y = reversed_along(y, d, loc);
  return y;
}

Tensor roll(const Tensor& x, IntList shifts, IntList dims, Loc loc) {
  const graph::SourceScope at(loc, "roll"); // nodes made here record the caller's line
  if (!x.defined()) throw Error("roll", "the input is undefined", loc);
  if (shifts.size() != std::max<size_t>(dims.size(), 1) || shifts.empty())
    fail("roll",
         "shifts and dims must align: " + std::to_string(shifts.size()) + " shifts, " + std::to_string(dims.size()) +
             " dims",
         {&x}, loc);
  if (dims.empty()) return rolled_along(x.reshape({-1}, loc), shifts[0], 0, loc).reshape(x.shape(), loc);
  if (x.dim() == 0) fail("roll", "a 0-d tensor has no dim " + std::to_string(dims[0]), {&x}, loc);
  Tensor y = x;
  for (size_t i = 0; i < dims.size(); ++i)
    y = rolled_along(y, shifts[i], wrap_dim_or_fail("roll", dims[i], x, loc), loc);
  return y;
}

Tensor tile(const Tensor& x, IntList reps, Loc loc) {
  const graph::SourceScope at(loc, "tile"); // nodes made here record the caller's line
  if (static_cast<int64_t>(reps.size()) < x.dim()) reps.insert(reps.begin(), x.dim() - reps.size(), 1);
  return x.repeat(std::move(reps), loc);
}

Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim, Loc loc) {
  const graph::SourceScope at(loc, "repeat_interleave"); // nodes made here record the caller's line
  const auto [t, d] = interleave_target(x, dim, loc);
  if (repeats < 0) fail("repeat_interleave", "repeats can not be negative, got " + std::to_string(repeats), {&x}, loc);
  return interleaved(t, repeats, d, loc);
}

Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim, Loc loc) {
  const graph::SourceScope at(loc, "repeat_interleave"); // nodes made here record the caller's line
  const auto [t, d] = interleave_target(x, dim, loc);
  const std::vector<int64_t> r = host_repeats(x, repeats, t.size(d), loc);
  std::vector<int64_t> index;
  for (size_t i = 0; i < r.size(); ++i) index.insert(index.end(), static_cast<size_t>(r[i]), static_cast<int64_t>(i));
  Tensor idx = from_vector(index, {static_cast<int64_t>(index.size())}, loc);
  if (x.device() != kCPU) idx = idx.to(x.device(), loc);
  return index_select(t, d, idx, loc);
}

Tensor Tensor::repeat(IntList sizes, Loc loc) const {
  const graph::SourceScope at(loc, "repeat"); // nodes made here record the caller's line
  if (!defined()) throw Error("repeat", "the input is undefined", loc);
  const int64_t rank = static_cast<int64_t>(sizes.size());
  if (rank < dim())
    fail("repeat", "needs at least as many repeats as dims, got " + graph::shape_str(sizes), {this}, loc);
  if (std::any_of(sizes.begin(), sizes.end(), [](int64_t r) { return r < 0; }))
    fail("repeat", "repeats can not be negative, got " + graph::shape_str(sizes), {this}, loc);
  // [s0, s1, ...] (ones in front for the added dims) as [1, s0, 1, s1, ...], expanded to [r0, s0, r1, s1, ...].
  IntList padded(static_cast<size_t>(rank - dim()), 1), pairs, wide, out;
  padded.insert(padded.end(), shape().begin(), shape().end());
  for (int64_t i = 0; i < rank; ++i) {
    pairs.insert(pairs.end(), {1, padded[i]});
    wide.insert(wide.end(), {sizes[i], padded[i]});
    out.push_back(sizes[i] * padded[i]);
  }
  detail::check_shape("repeat", out, {this}, loc);
  return reshape(pairs, loc).expand(wide, loc).reshape(out, loc);
}

Tensor Tensor::flip(IntList dims, Loc loc) const { return kiln::flip(*this, std::move(dims), loc); }
Tensor Tensor::roll(IntList shifts, IntList dims, Loc loc) const {
  return kiln::roll(*this, std::move(shifts), std::move(dims), loc);
}
Tensor Tensor::tile(IntList reps, Loc loc) const { return kiln::tile(*this, std::move(reps), loc); }
Tensor Tensor::repeat_interleave(int64_t repeats, std::optional<int64_t> dim, Loc loc) const {
  return kiln::repeat_interleave(*this, repeats, dim, loc);
}
Tensor Tensor::repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim, Loc loc) const {
  return kiln::repeat_interleave(*this, repeats, dim, loc);
}

} // namespace kiln

// nn::functional::interpolate: resampling the spatial dims of [N, C, ...] one dim at a time, each an
// index_select (two, weighted, for linear interpolation) whose indices and weights are computed on
// the tensor's device from an arange, with PyTorch 1.13's CPU index arithmetic (upsample kernels'
// area_pixel_compute_source_index and nearest_idx), so that gradients, fusion, compile() and the
// CUDA path need nothing new.

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "frontend/src/tensor_impl.h"
#include "graph/node.h"
#include "kiln/functional.h"
#include "kiln/indexops.h"

namespace kiln::nn::functional {

namespace {

constexpr const char* kOp = "interpolate";

enum class Mode { Nearest, NearestExact, Linear };

// One spatial dim's resampling: its extents, and the user's scale factor where the source
// coordinates use it (scale_factor given and recompute_scale_factor not true).
struct Axis {
  int64_t dim = 0, in = 0, out = 0;
  std::optional<double> scale;
};

[[noreturn]] void fail(const std::string& what, const Tensor& x, const Loc& loc) { detail::fail(kOp, what, {&x}, loc); }

// The mode, checked against the input's rank (3 to 5, checked before) and align_corners.
Mode parse_mode(const InterpolateOptions& o, const Tensor& x, const Loc& loc) {
  if (o.mode == "nearest" || o.mode == "nearest-exact") {
    if (o.align_corners)
      fail("align_corners is for the linear modes (linear, bilinear, trilinear) only, not \"" + o.mode + "\"", x, loc);
    return o.mode == "nearest" ? Mode::Nearest : Mode::NearestExact;
  }
  const char* linear[] = {"linear", "bilinear", "trilinear"}; // for 1, 2 and 3 spatial dims
  for (int64_t k = 0; k < 3; ++k) {
    if (o.mode != linear[k]) continue;
    if (x.dim() != k + 3)
      fail("mode \"" + o.mode + "\" needs a " + std::to_string(k + 3) + "-d input (" + std::to_string(k + 1) +
               " spatial dims), got " + std::to_string(x.dim()) + "-d",
           x, loc);
    return Mode::Linear;
  }
  fail("mode \"" + o.mode + "\" is not one of nearest, nearest-exact, linear, bilinear, trilinear" +
           (o.mode == "bicubic" || o.mode == "area" ? " (kiln has no \"" + o.mode + "\")" : std::string()),
       x, loc);
}

// Entry i of a per-dim list of k values, or its one value for every dim.
template <class T>
T per_dim(const std::vector<T>& v, size_t i, const char* name, const Tensor& x, const Loc& loc) {
  const auto k = static_cast<size_t>(x.dim() - 2);
  if (v.size() != 1 && v.size() != k)
    fail(std::string(name) + " has " + std::to_string(v.size()) + " values for " + std::to_string(k) +
             " spatial dims (give one per dim, or one for all)",
         x, loc);
  return v.size() == 1 ? v[0] : v[i];
}

// The spatial dims' extents and scales, as PyTorch's interpolate and upsample_*'s compute_output_size.
std::vector<Axis> axes(const InterpolateOptions& o, const Tensor& x, const Loc& loc) {
  const bool has_size = !o.size.empty(), has_scale = !o.scale_factor.empty();
  if (has_size == has_scale) fail(has_size ? "give only one of size and scale_factor" : "give size or scale_factor", x, loc);
  const bool recompute = o.recompute_scale_factor.value_or(false);
  if (recompute && has_size) fail("recompute_scale_factor is not meaningful with an explicit size", x, loc);
  std::vector<Axis> out;
  for (int64_t d = 2; d < x.dim(); ++d) {
    const auto i = static_cast<size_t>(d - 2);
    Axis a{d, x.size(d), 0, std::nullopt};
    if (has_size) {
      a.out = per_dim(o.size, i, "size", x, loc);
    } else {
      const double s = per_dim(o.scale_factor, i, "scale_factor", x, loc), extent = static_cast<double>(a.in) * s;
      if (extent >= 0x1p63) fail("scale_factor " + std::to_string(s) + " makes dim " + std::to_string(d) + " overflow int64", x, loc);
      a.out = extent >= 1 ? static_cast<int64_t>(std::floor(extent)) : 0; // NaN and below 1: no element
      if (!recompute) a.scale = s;
    }
    if (a.in <= 0 || a.out <= 0)
      fail("input and output extents must be positive, got " + std::to_string(a.in) + " -> " + std::to_string(a.out) +
               " in dim " + std::to_string(d),
           x, loc);
    out.push_back(a);
  }
  return out;
}

// PyTorch's compute_scales_value: 1 / scale_factor where one is used, else in / out, in T.
template <class T> T source_scale(const Axis& a) {
  return a.scale && *a.scale > 0 ? static_cast<T>(1.0 / *a.scale) : static_cast<T>(a.in) / static_cast<T>(a.out);
}

// The source index of output j, as PyTorch's nearest_neighbor(_exact)_compute_source_index (in float).
int64_t nearest_source(int64_t j, float s, bool exact, int64_t in) {
  const float f = exact ? static_cast<float>((static_cast<double>(j) + 0.5) * static_cast<double>(s))
                        : static_cast<float>(j) * s;
  return std::min<int64_t>(static_cast<int64_t>(std::floor(f)), in - 1);
}

// The nearest mode's source indices, on the host; PyTorch's 2-d and 3-d legacy nearest (nearest_idx)
// copies a kept extent and halves the index for a doubled one, whatever the scale factor says.
std::vector<int64_t> nearest_sources(const Axis& a, bool exact, bool shortcuts) {
  std::vector<int64_t> idx(static_cast<size_t>(a.out));
  const float s = source_scale<float>(a);
  for (int64_t j = 0; j < a.out; ++j) {
    int64_t v = nearest_source(j, s, exact, a.in);
    if (shortcuts && a.out == a.in) v = j;
    if (shortcuts && a.out == 2 * a.in) v = j >> 1;
    idx[static_cast<size_t>(j)] = v;
  }
  return idx;
}

// The same indices as a lazy i64 tensor on `dev` (the general case; the arithmetic of nearest_source).
Tensor nearest_index(const Axis& a, bool exact, Device dev) {
  const auto s = static_cast<double>(source_scale<float>(a)); // a float value: exact in either dtype
  const auto out = static_cast<double>(a.out);
  const Tensor f = exact ? ((arange(0, out, 1, kFloat64, dev) + 0.5) * s).to(kFloat32)
                         : arange(0, out, 1, kFloat32, dev) * s;
  return clamp(floor(f).to(kInt64), std::nullopt, a.in - 1);
}

// y resampled along a.dim by the nearest indices: a view where they are a pattern (the extent kept,
// each element repeated k times, every k-th element), else an index_select.
Tensor nearest_axis(const Tensor& y, const Axis& a, bool exact, bool shortcuts, const Loc& loc) {
  const std::vector<int64_t> idx = nearest_sources(a, exact, shortcuts);
  auto all = [&](auto pred) {
    for (int64_t j = 0; j < a.out; ++j)
      if (!pred(j, idx[static_cast<size_t>(j)])) return false;
    return true;
  };
  const int64_t d = a.dim;
  if (a.out == a.in && all([](int64_t j, int64_t v) { return v == j; })) return y;
  if (a.out % a.in == 0) {
    const int64_t k = a.out / a.in;
    if (all([k](int64_t j, int64_t v) { return v == j / k; })) {
      IntList big = y.shape(), out = y.shape();
      big.insert(big.begin() + d + 1, k);
      out[static_cast<size_t>(d)] = a.out;
      return y.unsqueeze(d + 1, loc).expand(big, loc).reshape(out, loc);
    }
  }
  if (a.out > 1 && idx[1] > 1) {
    const int64_t k = idx[1];
    if (all([k](int64_t j, int64_t v) { return v == j * k; })) return y.slice(d, 0, (a.out - 1) * k + 1, k, loc);
  }
  return index_select(y, d, nearest_index(a, exact, y.device()), loc);
}

// y linearly interpolated along a.dim, as PyTorch's compute_source_index_and_lambda in x's dtype T: the
// source coordinate src (clamped at 0), its two neighbours floor(src) and the next (the last one twice),
// weighted 1 - l and l = src - floor(src). An extent kept is copied, as PyTorch.
template <class T> Tensor linear_axis(const Tensor& y, const Axis& a, bool align_corners, const Loc& loc) {
  if (a.out == a.in) return y;
  constexpr DType dt = std::is_same_v<T, float> ? kFloat32 : kFloat64;
  const Device dev = y.device();
  const auto out = static_cast<double>(a.out);
  Tensor src;
  if (align_corners) {
    const T scale = a.out > 1 ? static_cast<T>(a.in - 1) / static_cast<T>(a.out - 1) : T(0);
    src = arange(0, out, 1, dt, dev) * static_cast<double>(scale);
  } else { // (dst + 0.5) * scale - 0.5 in double, as PyTorch, then rounded to T
    src = ((arange(0, out, 1, kFloat64, dev) + 0.5) * static_cast<double>(source_scale<T>(a)) - 0.5).to(dt);
    src = clamp(src, 0.0);
  }
  const Tensor base = floor(src), i0 = base.to(kInt64), i1 = clamp(i0 + 1, std::nullopt, a.in - 1);
  IntList wshape(static_cast<size_t>(y.dim() - a.dim), 1);
  wshape[0] = a.out;
  const Tensor l1 = clamp(src - base, 0.0, 1.0).reshape(wshape), l0 = 1.0 - l1;
  return index_select(y, a.dim, i0, loc) * l0 + index_select(y, a.dim, i1, loc) * l1;
}

} // namespace

Tensor interpolate(const Tensor& x, const InterpolateOptions& options, Loc loc) {
  const graph::SourceScope at(loc, kOp); // nodes made here record the caller's line
  if (!x.defined()) throw Error(kOp, "the input is undefined", loc);
  if (x.dim() < 3 || x.dim() > 5) fail("expects a [N, C, L], [N, C, H, W] or [N, C, D, H, W] input", x, loc);
  if (!is_floating(x.dtype())) fail("needs a floating tensor", x, loc);
  const Mode mode = parse_mode(options, x, loc);
  const std::vector<Axis> dims = axes(options, x, loc);
  if (x.size(1) == 0) fail("needs at least one channel (only the batch may be empty)", x, loc);
  IntList shape = x.shape();
  for (const Axis& a : dims) shape[static_cast<size_t>(a.dim)] = a.out;
  detail::check_shape(kOp, shape, {&x}, loc);
  Tensor y = x;
  // The last dim first, as PyTorch's separable kernels nest them (the same products and sums).
  for (auto a = dims.rbegin(); a != dims.rend(); ++a) {
    if (mode != Mode::Linear) y = nearest_axis(y, *a, mode == Mode::NearestExact, mode == Mode::Nearest && x.dim() > 3, loc);
    else if (x.dtype() == kFloat32) y = linear_axis<float>(y, *a, options.align_corners.value_or(false), loc);
    else y = linear_axis<double>(y, *a, options.align_corners.value_or(false), loc);
  }
  return y;
}

} // namespace kiln::nn::functional

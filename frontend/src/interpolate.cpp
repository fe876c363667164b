// nn::functional::interpolate and adaptive_avg_pool1d/2d: resampling the spatial dims of [N, C, ...] one dim
// at a time, each an index_select (two, weighted, for linear interpolation, four for cubic, the longest
// window's taps for area) whose indices and weights are computed on the tensor's device from an arange, with
// PyTorch 1.13's CPU index arithmetic (upsample kernels' area_pixel_compute_source_index, nearest_idx and
// cubic coefficients, adaptive pooling's start_index and end_index), so that gradients, fusion, compile()
// and the CUDA path need nothing new.

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "frontend/src/cubic.h"
#include "frontend/src/tensor_impl.h"
#include "frontend/src/windows.h"
#include "graph/node.h"
#include "graph/shape.h"
#include "kiln/functional.h"
#include "kiln/indexops.h"

namespace kiln::nn::functional {

namespace {

constexpr const char* kOp = "interpolate";

enum class Mode { Nearest, NearestExact, Linear, Cubic, Area };

// One spatial dim's resampling: its extents, and the user's scale factor where the source
// coordinates use it (scale_factor given and recompute_scale_factor not true).
struct Axis {
  int64_t dim = 0, in = 0, out = 0;
  std::optional<double> scale;
};

[[noreturn]] void fail(const std::string& what, const Tensor& x, const Loc& loc) { detail::fail(kOp, what, {&x}, loc); }

// The mode, checked against the input's rank (3 to 5, checked before) and align_corners.
Mode parse_mode(const InterpolateOptions& o, const Tensor& x, const Loc& loc) {
  const bool nearest = o.mode == "nearest" || o.mode == "nearest-exact";
  if ((nearest || o.mode == "area") && o.align_corners)
    fail("align_corners is for the interpolating modes (linear, bilinear, bicubic, trilinear) only, not \"" + o.mode +
             "\"",
         x, loc);
  if (nearest) return o.mode == "nearest" ? Mode::Nearest : Mode::NearestExact;
  if (o.mode == "area") return Mode::Area;
  // the interpolating modes, each for its rank
  const char* modes[] = {"linear", "bilinear", "trilinear", "bicubic"};
  const int64_t spatial[] = {1, 2, 3, 2};
  for (int64_t k = 0; k < 4; ++k) {
    if (o.mode != modes[k]) continue;
    if (x.dim() != spatial[k] + 2)
      fail("mode \"" + o.mode + "\" needs a " + std::to_string(spatial[k] + 2) + "-d input (" +
               std::to_string(spatial[k]) + " spatial dims), got " + std::to_string(x.dim()) + "-d",
           x, loc);
    return k == 3 ? Mode::Cubic : Mode::Linear;
  }
  fail("mode \"" + o.mode + "\" is not one of nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area", x,
       loc);
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

// The source coordinates of a.dim's outputs as an [out] tensor of T on `dev`, as PyTorch's
// area_pixel_compute_source_index: align_corners maps the corner samples onto each other (scale
// (in - 1) / (out - 1), in T); else (dst + 0.5) * scale - 0.5 in double, as PyTorch, then rounded to T and,
// but for cubic interpolation, clamped at 0.
template <class T> Tensor source_coordinates(const Axis& a, bool align_corners, bool cubic, Device dev) {
  constexpr DType dt = std::is_same_v<T, float> ? kFloat32 : kFloat64;
  const auto out = static_cast<double>(a.out);
  if (align_corners) {
    const T scale = a.out > 1 ? static_cast<T>(a.in - 1) / static_cast<T>(a.out - 1) : T(0);
    return arange(0, out, 1, dt, dev) * static_cast<double>(scale);
  }
  const Tensor src = ((arange(0, out, 1, kFloat64, dev) + 0.5) * static_cast<double>(source_scale<T>(a)) - 0.5).to(dt);
  return cubic ? src : clamp(src, 0.0);
}

// A per-output weight [out] shaped to broadcast against y along a.dim: [out, 1, ...].
Tensor along(const Tensor& w, const Tensor& y, const Axis& a) {
  IntList shape(static_cast<size_t>(y.dim() - a.dim), 1);
  shape[0] = w.size(0);
  return w.reshape(shape);
}

// y linearly interpolated along a.dim, as PyTorch's compute_source_index_and_lambda in x's dtype T: the
// source coordinate src (clamped at 0), its two neighbours floor(src) and the next (the last one twice),
// weighted 1 - l and l = src - floor(src). An extent kept is copied, as PyTorch.
template <class T> Tensor linear_axis(const Tensor& y, const Axis& a, bool align_corners, const Loc& loc) {
  if (a.out == a.in) return y;
  const Tensor src = source_coordinates<T>(a, align_corners, false, y.device());
  const Tensor base = floor(src), i0 = base.to(kInt64), i1 = clamp(i0 + 1, std::nullopt, a.in - 1);
  const Tensor l1 = along(clamp(src - base, 0.0, 1.0), y, a), l0 = 1.0 - l1;
  return index_select(y, a.dim, i0, loc) * l0 + index_select(y, a.dim, i1, loc) * l1;
}

// y cubically interpolated along a.dim, as PyTorch 1.13's upsample_bicubic2d (HelperInterpCubic) in x's
// dtype T: the source coordinate src (not clamped), the four taps floor(src) - 1 .. floor(src) + 2 clamped
// to the input (the border repeated), weighted by the cubic kernel at t = src - floor(src). An extent kept is
// not copied: PyTorch interpolates it too (its weights are 0, 1, 0, 0, and a non-finite neighbour gives NaN).
template <class T> Tensor cubic_axis(const Tensor& y, const Axis& a, bool align_corners, const Loc& loc) {
  const Tensor src = source_coordinates<T>(a, align_corners, true, y.device());
  const Tensor base = floor(src), t = src - base, i0 = base.to(kInt64);
  const std::array<Tensor, 4> weights = cubic::weights(t);
  Tensor sum;
  for (int64_t k = 0; k < 4; ++k) { // summed in PyTorch's order
    const Tensor tap =
        index_select(y, a.dim, clamp(i0 + (k - 1), 0, a.in - 1), loc) * along(weights[static_cast<size_t>(k)], y, a);
    sum = sum.defined() ? sum + tap : tap;
  }
  return sum;
}

// PyTorch's adaptive windows of `out` outputs over `in` inputs: output j covers [floor(j * in / out),
// ceil((j + 1) * in / out)). `index` [out * K] lists the K taps of the longest window for every output (a shorter
// window's extra taps repeat its last element), `real` [out, K] marks the taps inside the window, `length` [out]
// is each window's length (f64).
struct AdaptiveTaps {
  Tensor index, real, length;
  int64_t taps = 0;
};

AdaptiveTaps adaptive_taps(int64_t in, int64_t out, Device dev) {
  int64_t taps = 0; // the longest window, at most ceil(in / out) + 1
  for (int64_t j = 0; j < out; ++j)
    taps = std::max(taps, (j + 1) * in / out + ((j + 1) * in % out != 0) - j * in / out);
  // start and end in f64: exact, as j * in stays far below 2^53 for any tensor kiln holds
  const Tensor j = arange(0, static_cast<double>(out), 1, kFloat64, dev).reshape({out, 1});
  const Tensor start = floor(j * static_cast<double>(in) / static_cast<double>(out));
  const Tensor end = ceil((j + 1.0) * static_cast<double>(in) / static_cast<double>(out));
  const Tensor at = start + arange(0, static_cast<double>(taps), 1, kFloat64, dev).reshape({1, taps}); // [out, K]
  return {minimum(at, end - 1.0).to(kInt64).reshape({out * taps}), lt(at, end), (end - start).reshape({out}), taps};
}

// y with dim d replaced by the adaptive windows' taps [out, K] (index_select, so the gradient adds back).
Tensor adaptive_windows(const Tensor& y, int64_t d, const AdaptiveTaps& t, const Loc& loc) {
  IntList windows = y.shape();
  windows[static_cast<size_t>(d)] = t.taps;
  windows.insert(windows.begin() + d, t.index.numel() / std::max<int64_t>(1, t.taps)); // [..., out, K, ...]
  return index_select(y, d, t.index, loc).reshape(windows, loc);
}

// y averaged along a.dim over PyTorch's adaptive windows: output j averages the inputs
// [floor(j * in / out), ceil((j + 1) * in / out)), its sum divided by its length. Windows that tile
// the input are a reshape and a mean; else one index_select gathers the K taps of the longest window for
// every output (a shorter window's extra taps repeat its last element and are masked out).
Tensor area_axis(const Tensor& y, const Axis& a, const Loc& loc) {
  const int64_t d = a.dim, in = a.in, out = a.out;
  if (out == in) return y; // windows of one element each
  IntList shape = y.shape();
  shape[static_cast<size_t>(d)] = out;
  if (out == 0) return y.slice(d, 0, 0, 1, loc);
  if (in % out == 0) {
    IntList split = shape;
    split.insert(split.begin() + d + 1, in / out);
    return y.reshape(split, loc).sum(d + 1, false, loc) / static_cast<double>(in / out);
  }
  const AdaptiveTaps t = adaptive_taps(in, out, y.device());
  const Tensor gathered = adaptive_windows(y, d, t, loc);
  IntList mask_shape(static_cast<size_t>(y.dim() - d), 1);
  mask_shape[0] = out;
  mask_shape.insert(mask_shape.begin() + 1, t.taps);
  const Tensor sums = where(t.real.reshape(mask_shape), gathered, 0.0, loc).sum(d + 1, false, loc);
  return sums / along(t.length.to(y.dtype()), sums, a);
}

// x resampled along each of `dims` in `mode`, the last dim first, as PyTorch's separable kernels nest them
// (the same products and sums).
Tensor resample(const Tensor& x, const std::vector<Axis>& dims, Mode mode, bool align_corners, const Loc& loc) {
  Tensor y = x;
  const bool f32 = x.dtype() == kFloat32;
  for (auto a = dims.rbegin(); a != dims.rend(); ++a) {
    switch (mode) {
    case Mode::Nearest:
    case Mode::NearestExact:
      y = nearest_axis(y, *a, mode == Mode::NearestExact, mode == Mode::Nearest && x.dim() > 3, loc);
      break;
    case Mode::Linear:
      y = f32 ? linear_axis<float>(y, *a, align_corners, loc) : linear_axis<double>(y, *a, align_corners, loc);
      break;
    case Mode::Cubic:
      y = f32 ? cubic_axis<float>(y, *a, align_corners, loc) : cubic_axis<double>(y, *a, align_corners, loc);
      break;
    case Mode::Area: y = area_axis(y, *a, loc); break;
    }
  }
  return y;
}

// The checks of adaptive_avg_pool1d/2d (op) on x with `spatial` trailing dims, as PyTorch's: its rank,
// a floating dtype, output extents >= 0 and input extents > 0 (only the batch and channels may be empty).
void check_adaptive(const char* op, const Tensor& x, int64_t spatial, const IntList& output_size, const Loc& loc) {
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (x.dim() != spatial + 1 && x.dim() != spatial + 2)
    detail::fail(op,
                 spatial == 1   ? "expects a [N, C, L] (or unbatched [C, L]) input"
                 : spatial == 2 ? "expects a [N, C, H, W] (or unbatched [C, H, W]) input"
                                : "expects a [N, C, D, H, W] (or unbatched [C, D, H, W]) input",
                 {&x}, loc);
  if (!is_floating(x.dtype())) detail::fail(op, "needs a floating tensor", {&x}, loc);
  for (int64_t v : output_size)
    if (v < 0)
      detail::fail(op,
                   "elements of output_size must be greater than or equal to 0 but received " +
                       graph::shape_str(output_size),
                   {&x}, loc);
  for (int64_t d = x.dim() - spatial; d < x.dim(); ++d)
    if (x.size(d) == 0)
      detail::fail(op, "expects non-zero extents in the spatial dims, but dim " + std::to_string(d) + " is empty", {&x},
                   loc);
}

// adaptive average pooling of x's last output_size.size() dims, checked.
Tensor adaptive_avg_pool(const char* op, const Tensor& x, const IntList& output_size, const Loc& loc) {
  const auto spatial = static_cast<int64_t>(output_size.size());
  check_adaptive(op, x, spatial, output_size, loc);
  std::vector<Axis> dims;
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t d = x.dim() - spatial + i;
    dims.push_back({d, x.size(d), output_size[static_cast<size_t>(i)], std::nullopt});
  }
  IntList shape = x.shape();
  for (const Axis& a : dims) shape[static_cast<size_t>(a.dim)] = a.out;
  detail::check_shape(op, shape, {&x}, loc);
  return resample(x, dims, Mode::Area, false, loc);
}

// Adaptive max pooling of x [N, C, H, W] to ho x wo, and the flat index h * W + w in x's plane of the element
// each window takes (window_pick: its first maximum, row-major, or its last NaN), as PyTorch's
// adaptive_max_pool2d. The windows are adaptive_windows of the rows, then of the columns: a shorter window's
// repeated taps come after the element they repeat, so they never change which element is picked.
std::pair<Tensor, Tensor> adaptive_max_impl(const char* op, const Tensor& x, int64_t ho, int64_t wo, const Loc& loc) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const Device dev = x.device();
  if (ho == 0 || wo == 0) return {zeros({n, c, ho, wo}, x.dtype(), dev, loc), zeros({n, c, ho, wo}, kInt64, dev, loc)};
  const AdaptiveTaps rows = adaptive_taps(h, ho, dev), cols = adaptive_taps(w, wo, dev);
  const auto windows_of = [&](const Tensor& t) { // [N, C, Ho, Kh, Wo, Kw]
    return adaptive_windows(adaptive_windows(t, 2, rows, loc), 4, cols, loc);
  };
  const Tensor taps = windows_of(x);
  const Tensor plane = arange(0, static_cast<double>(h * w), 1, kInt64, dev).reshape({1, 1, h, w});
  return {windows::window_max(op, taps, {3, 5}, loc), windows::window_pick(taps, {3, 5}, windows_of(plane))};
}

// adaptive_max_impl of x [N, C, spatial...] or unbatched (checked as adaptive_avg_pool's), `spatial` 1 (over a
// unit height) or 2.
std::pair<Tensor, Tensor> adaptive_max_pool(const char* op, const Tensor& x, const IntList& output_size,
                                            const Loc& loc) {
  const auto spatial = static_cast<int64_t>(output_size.size());
  check_adaptive(op, x, spatial, output_size, loc);
  const bool unbatched = x.dim() == spatial + 1;
  Tensor x4 = unbatched ? x.unsqueeze(0, loc) : x;
  if (spatial == 1) x4 = x4.unsqueeze(2, loc);
  auto [v, i] = adaptive_max_impl(op, x4, spatial == 1 ? 1 : output_size[0], output_size.back(), loc);
  for (Tensor* t : {&v, &i}) {
    if (spatial == 1) *t = t->squeeze(2, loc);
    if (unbatched) *t = t->squeeze(0, loc);
  }
  return {v, i};
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
  return resample(x, dims, mode, options.align_corners.value_or(false), loc);
}

Tensor adaptive_avg_pool2d(const Tensor& x, const Size2& output_size, Loc loc) {
  const graph::SourceScope at(loc, "adaptive_avg_pool2d"); // nodes made here record the caller's line
  return adaptive_avg_pool("adaptive_avg_pool2d", x, {output_size.h, output_size.w}, loc);
}

Tensor adaptive_avg_pool1d(const Tensor& x, int64_t output_size, Loc loc) {
  const graph::SourceScope at(loc, "adaptive_avg_pool1d"); // nodes made here record the caller's line
  return adaptive_avg_pool("adaptive_avg_pool1d", x, {output_size}, loc);
}

Tensor adaptive_avg_pool3d(const Tensor& x, const Size3& output_size, Loc loc) {
  const graph::SourceScope at(loc, "adaptive_avg_pool3d"); // nodes made here record the caller's line
  return adaptive_avg_pool("adaptive_avg_pool3d", x, {output_size.d, output_size.h, output_size.w}, loc);
}

std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x, const Size2& output_size, Loc loc) {
  const graph::SourceScope at(loc, "adaptive_max_pool2d"); // nodes made here record the caller's line
  return adaptive_max_pool("adaptive_max_pool2d", x, {output_size.h, output_size.w}, loc);
}

Tensor adaptive_max_pool2d(const Tensor& x, const Size2& output_size, Loc loc) {
  return adaptive_max_pool2d_with_indices(x, output_size, loc).first;
}

std::pair<Tensor, Tensor> adaptive_max_pool1d_with_indices(const Tensor& x, int64_t output_size, Loc loc) {
  const graph::SourceScope at(loc, "adaptive_max_pool1d"); // nodes made here record the caller's line
  return adaptive_max_pool("adaptive_max_pool1d", x, {output_size}, loc);
}

Tensor adaptive_max_pool1d(const Tensor& x, int64_t output_size, Loc loc) {
  return adaptive_max_pool1d_with_indices(x, output_size, loc).first;
}

Tensor upsample(const Tensor& x, const InterpolateOptions& options, Loc loc) {
  const detail::UserCall call("upsample", loc);
  return interpolate(x, options, loc);
}

Tensor upsample_nearest(const Tensor& x, IntList size, std::vector<double> scale_factor, Loc loc) {
  const detail::UserCall call("upsample_nearest", loc);
  return interpolate(x, {.size = std::move(size), .scale_factor = std::move(scale_factor), .mode = "nearest"}, loc);
}

Tensor upsample_bilinear(const Tensor& x, IntList size, std::vector<double> scale_factor, Loc loc) {
  const detail::UserCall call("upsample_bilinear", loc);
  return interpolate(
      x, {.size = std::move(size), .scale_factor = std::move(scale_factor), .mode = "bilinear", .align_corners = true},
      loc);
}

} // namespace kiln::nn::functional

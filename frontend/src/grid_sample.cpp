// Spatial transformers' sampling, as PyTorch 1.13's torch.nn.functional.affine_grid and grid_sample (2-d and
// 3-d): compositions of a matmul, elementwise ops and gathers of the input, one per tap combination (2^k for
// linear, 4^2 for bicubic), so that the gradients of the input and of the grid, fusion and compile() come from
// the ops they are made of.

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "frontend/src/cubic.h"
#include "frontend/src/tensor_impl.h"
#include "kiln/functional.h"
#include "kiln/indexops.h"

namespace kiln::nn::functional {

namespace {

using kiln::detail::fail;

// The n normalized coordinates of an extent n along one axis: pixel centers (2i + 1) / n - 1 without
// align_corners, -1 ... 1 with it; 0 for an extent 1, as PyTorch's linspace_from_neg_one.
Tensor axis_coordinates(int64_t n, bool align_corners, DType dt, Device dev, const Loc& loc) {
  const Tensor i = arange(0, static_cast<double>(n), 1, dt, dev, loc);
  if (n == 1) return zeros({1}, dt, dev, loc);
  const double nd = static_cast<double>(n);
  return align_corners ? i * (2.0 / (nd - 1)) - 1.0 : (i * 2.0 + 1.0) / nd - 1.0;
}

// The rows (x, y, (z,) 1) [P, k + 1] of the normalized coordinates of the output points of the spatial extents
// `spatial` (row-major; x along the last dim), as PyTorch's affine_grid's base grid.
Tensor base_points(const IntList& spatial, bool align_corners, DType dt, Device dev, const Loc& loc) {
  const auto k = static_cast<int64_t>(spatial.size());
  std::vector<Tensor> columns;
  for (size_t d = spatial.size(); d-- > 0;) {
    IntList along(spatial.size(), 1);
    along[d] = spatial[d];
    columns.push_back(axis_coordinates(spatial[d], align_corners, dt, dev, loc).reshape(along).expand(spatial));
  }
  columns.push_back(ones(spatial, dt, dev, loc));
  return stack(columns, k, loc).reshape({graph::numel(spatial), k + 1});
}

// A pixel coordinate from a normalized one along an axis of extent n.
Tensor unnormalized(const Tensor& x, int64_t n, bool align_corners) {
  const double nd = static_cast<double>(n);
  return align_corners ? (x + 1.0) * ((nd - 1) / 2) : ((x + 1.0) * nd - 1.0) / 2;
}

// How PyTorch 1.13's CPU kernels sample: the 2-d one (vectorized) and the 3-d one (a scalar loop) differ where
// kiln follows each: the 3-d one rounds "nearest" halves away from zero (2-d: to even), clips a NaN coordinate
// to the far border (2-d: to 0), and with "zeros" padding samples 0 at a NaN coordinate (2-d: NaN).
struct Sampling {
  const GridSampleOptions& o;
  bool scalar_loop; ///< the 3-d kernel's ways
};

// x clipped to [0, n - 1], with gradient 0 at and past the borders (PyTorch's clip_coordinates_set_grad); a NaN
// becomes 0 (scalar_loop: n - 1), as PyTorch's CPU kernels clip it.
Tensor clipped(const Tensor& x, int64_t n, bool scalar_loop) {
  const double top = static_cast<double>(n - 1);
  const Tensor zero = zeros_like(x).detach();
  if (scalar_loop) return where(x < top, where(x > 0.0, x, zero), zero + top);
  return where(x > 0.0, where(x >= top, zero + top, x), zero);
}

// x reflected into [low, high] = [twice_low / 2, twice_high / 2] (PyTorch's reflect_coordinates: the gradient
// is -1 on the mirrored stretches, and +1 at the reflection's start).
Tensor reflected(const Tensor& x, int64_t twice_low, int64_t twice_high) {
  if (twice_low == twice_high) return zeros_like(x).detach();
  const double low = static_cast<double>(twice_low) / 2, span = static_cast<double>(twice_high - twice_low) / 2;
  const Tensor t = x - low;
  const Tensor a = where(t < 0.0, -t, t);
  const Tensor extra = fmod(a, span);
  const Tensor odd = fmod(floor(a / span).detach(), 2.0) == 1.0;
  return where(odd, (span + low) - extra, extra + low);
}

// The pixel coordinate c along an axis of extent n mapped into the input by padding_mode: clipped
// ("border"), reflected and clipped ("reflection") or kept ("zeros"), as PyTorch's compute_coordinates.
Tensor padded(const Tensor& c, int64_t n, const Sampling& s) {
  if (s.o.padding_mode == "border") return clipped(c, n, s.scalar_loop);
  if (s.o.padding_mode == "reflection")
    return clipped(s.o.align_corners ? reflected(c, 0, 2 * (n - 1)) : reflected(c, -1, 2 * n - 1), n, s.scalar_loop);
  return c;
}

// x rounded half away from zero (std::round), exactly: trunc(x), plus sign(x) where the rest is at least 1/2.
Tensor rounded_away(const Tensor& x) {
  const Tensor t = trunc(x);
  return t + where(abs(x - t) >= 0.5, sign(x), zeros_like(x));
}

// The sampling points' taps along one spatial dim: the integer coordinates `at` [N, 1, P] (floating, detached)
// and their weights (undefined: 1).
struct Tap {
  Tensor at, weight;
};

// The input's values [N, C, P] at the integer points `at` (one [N, 1, P] per spatial dim, in the input's order:
// (y, x) or (z, y, x); floating, detached) times `weight` (undefined: 1), 0 where they fall outside the input
// (or are NaN): with scalar_loop, whatever the weight (PyTorch's 3-d kernel adds only the taps inside).
Tensor corner(const Tensor& volume, const std::vector<Tensor>& at, const IntList& extents, const Tensor& weight,
              bool scalar_loop) {
  Tensor inside;
  for (size_t d = 0; d < at.size(); ++d) {
    const Tensor in_d = logical_and(at[d] >= 0.0, at[d] <= static_cast<double>(extents[d] - 1));
    inside = d == 0 ? in_d : logical_and(inside, in_d);
  }
  Tensor flat; // the row-major offset in the volume, in i64
  for (size_t d = 0; d < at.size(); ++d) {
    const Tensor i = where(inside, at[d], zeros_like(at[d])).to(kInt64);
    flat = d == 0 ? i : flat * extents[d] + i;
  }
  const Tensor index = flat.expand({volume.size(0), volume.size(1), flat.size(2)});
  const Tensor zero = zeros({}, volume.dtype(), volume.device()), value = gather(volume, 2, index);
  if (!weight.defined()) return where(inside, value, zero);
  return scalar_loop ? where(inside, value * weight, zero) : where(inside, value, zero) * weight;
}

// The sum over every combination of one tap per spatial dim of the input's value there times the taps' weights
// (the first dim's tap varying slowest).
Tensor sum_of_taps(const Tensor& volume, const std::vector<std::vector<Tap>>& taps, const IntList& extents,
                   bool scalar_loop) {
  std::vector<size_t> pick(taps.size(), 0);
  Tensor sum;
  while (true) {
    std::vector<Tensor> at;
    Tensor weight;
    for (size_t d = 0; d < taps.size(); ++d) {
      const Tap& t = taps[d][pick[d]];
      at.push_back(t.at);
      if (t.weight.defined()) weight = weight.defined() ? weight * t.weight : t.weight;
    }
    const Tensor v = corner(volume, at, extents, weight, scalar_loop);
    sum = sum.defined() ? sum + v : v;
    size_t d = taps.size();
    while (d > 0 && ++pick[d - 1] == taps[d - 1].size()) pick[--d] = 0;
    if (d == 0) return sum;
  }
}

// The taps of the source coordinate x by mode: its nearest pixel, its two linear neighbours, or its four
// cubic ones (the taps clipped or reflected by padding_mode, as PyTorch's get_value_bounded; x unpadded).
std::vector<Tap> taps_of(const Tensor& x, int64_t n, const Sampling& s) {
  const GridSampleOptions& o = s.o;
  if (o.mode == "nearest") return {{(s.scalar_loop ? rounded_away(x) : round(x)).detach(), Tensor()}};
  const Tensor x0 = floor(x).detach();
  if (o.mode == "bilinear") {
    const Tensor x1 = x0 + 1.0;
    return {{x0, x1 - x}, {x1, x - x0}};
  }
  const std::array<Tensor, 4> w = cubic::weights(x - x0);
  std::vector<Tap> taps;
  for (size_t k = 0; k < 4; ++k) taps.push_back({padded(x0 + (static_cast<double>(k) - 1), n, s).detach(), w[k]});
  return taps;
}

// grid_sample's checks, as PyTorch's.
void check_grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& o, const Loc& loc) {
  const char* op = "grid_sample";
  if (!input.defined() || !grid.defined()) throw Error(op, "the input or the grid is undefined", loc);
  if (o.mode != "bilinear" && o.mode != "nearest" && o.mode != "bicubic")
    fail(op, "expected mode to be 'bilinear', 'nearest' or 'bicubic', but got: '" + o.mode + "'", {&input, &grid}, loc);
  if (o.padding_mode != "zeros" && o.padding_mode != "border" && o.padding_mode != "reflection")
    fail(op, "expected padding_mode to be 'zeros', 'border', or 'reflection', but got: '" + o.padding_mode + "'",
         {&input, &grid}, loc);
  if ((input.dim() != 4 && input.dim() != 5) || grid.dim() != input.dim())
    fail(op,
         "expected 4-d or 5-d input and grid with the same number of dimensions ([N, C, H, W] with [N, Ho, Wo, 2], "
         "or [N, C, D, H, W] with [N, Do, Ho, Wo, 3])",
         {&input, &grid}, loc);
  const int64_t k = input.dim() - 2;
  if (grid.size(-1) != k)
    fail(op, "expected the grid to have size " + std::to_string(k) + " in its last dimension", {&input, &grid}, loc);
  if (o.mode == "bicubic" && k != 2) fail(op, "bicubic interpolation only supports 4-d input", {&input, &grid}, loc);
  if (grid.size(0) != input.size(0)) fail(op, "the input and the grid need the same batch size", {&input, &grid}, loc);
  if (!is_floating(input.dtype()) || grid.dtype() != input.dtype())
    fail(op, "the input and the grid must be floating, of one dtype", {&input, &grid}, loc);
  for (int64_t d = 2; d < input.dim(); ++d)
    if (input.size(d) <= 0) fail(op, "the input's spatial extents must be positive", {&input, &grid}, loc);
}

} // namespace

Tensor affine_grid(const Tensor& theta, const IntList& size, bool align_corners, Loc loc) {
  const graph::SourceScope at(loc, "affine_grid"); // nodes made here record the caller's line
  const char* op = "affine_grid";
  if (!theta.defined()) throw Error(op, "theta is undefined", loc);
  if (!is_floating(theta.dtype())) fail(op, "theta must be floating", {&theta}, loc);
  if (size.size() != 4 && size.size() != 5)
    fail(op, "size must be {N, C, H, W} or {N, C, D, H, W} (2-d or 3-d affine maps), got " + graph::shape_str(size),
         {&theta}, loc);
  if (std::ranges::any_of(size, [](int64_t e) { return e <= 0; }))
    fail(op, "expected a non-zero, positive output size, got " + graph::shape_str(size), {&theta}, loc);
  const auto k = static_cast<int64_t>(size.size()) - 2;
  if (theta.dim() != 3 || theta.size(0) != size[0] || theta.size(1) != k || theta.size(2) != k + 1)
    fail(op,
         "expected a batch of " + std::to_string(k) + "-d affine matrices of shape N x " + std::to_string(k) + " x " +
             std::to_string(k + 1) + " for size " + graph::shape_str(size),
         {&theta}, loc);
  const IntList spatial(size.begin() + 2, size.end());
  const Tensor base = base_points(spatial, align_corners, theta.dtype(), theta.device(), loc);
  IntList shape = size;
  shape[1] = k; // [N, (D,) H, W, k] after the rotation below
  std::rotate(shape.begin() + 1, shape.begin() + 2, shape.end());
  return matmul(base, theta.transpose(1, 2, loc), loc).reshape(shape, loc);
}

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& options, Loc loc) {
  const graph::SourceScope at(loc, "grid_sample"); // nodes made here record the caller's line
  check_grid_sample(input, grid, options, loc);
  const detail::UserCall call("grid_sample", loc); // the ops it is made of report as grid_sample
  const int64_t k = input.dim() - 2, n = input.size(0), c = input.size(1);
  const IntList extents(input.shape().begin() + 2, input.shape().end());
  IntList out_shape = grid.shape(); // [N, C, (Do,) Ho, Wo]
  out_shape.pop_back();
  out_shape.insert(out_shape.begin() + 1, c);
  const int64_t points = graph::numel(IntList(grid.shape().begin() + 1, grid.shape().end() - 1));
  const Tensor volume = input.reshape({n, c, graph::numel(extents)});
  const Tensor g = grid.reshape({n, 1, points, k});
  const Sampling s{options, k == 3};
  std::vector<std::vector<Tap>> taps; // per spatial dim in the input's order; the grid lists x (the last) first
  for (int64_t d = 0; d < k; ++d) {
    const int64_t e = extents[static_cast<size_t>(d)];
    const Tensor x = unnormalized(g.slice(3, k - 1 - d, k - d).squeeze(3), e, options.align_corners);
    taps.push_back(taps_of(options.mode == "bicubic" ? x : padded(x, e, s), e, s));
  }
  return sum_of_taps(volume, taps, extents, s.scalar_loop).reshape(out_shape, loc);
}

} // namespace kiln::nn::functional

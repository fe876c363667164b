// Spatial transformers' sampling, as PyTorch 1.13's torch.nn.functional.affine_grid and grid_sample (2-d):
// compositions of a matmul, elementwise ops and gathers of the input plane, so that the gradients of the
// input and of the grid, fusion and compile() come from the ops they are made of.

#include <string>

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

// A pixel coordinate from a normalized one along an axis of extent n.
Tensor unnormalized(const Tensor& x, int64_t n, bool align_corners) {
  const double nd = static_cast<double>(n);
  return align_corners ? (x + 1.0) * ((nd - 1) / 2) : ((x + 1.0) * nd - 1.0) / 2;
}

// x clipped to [0, n - 1], with gradient 0 at and past the borders (PyTorch's clip_coordinates_set_grad); a NaN
// becomes 0, as PyTorch's CPU kernel clips it.
Tensor clipped(const Tensor& x, int64_t n) {
  const double top = static_cast<double>(n - 1);
  const Tensor zero = zeros_like(x).detach();
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

// The source pixel coordinate along an axis of extent n for the normalized x, by padding_mode.
Tensor source_coordinate(const Tensor& x, int64_t n, const GridSampleOptions& o) {
  Tensor c = unnormalized(x, n, o.align_corners);
  if (o.padding_mode == "border") return clipped(c, n);
  if (o.padding_mode == "reflection")
    return clipped(o.align_corners ? reflected(c, 0, 2 * (n - 1)) : reflected(c, -1, 2 * n - 1), n);
  return c;
}

// The input plane's values [N, C, P] at the integer pixels (ix, iy) [N, 1, P] (floating, detached), 0 where
// they fall outside the plane (or are NaN).
Tensor corner(const Tensor& plane, const Tensor& ix, const Tensor& iy, int64_t h, int64_t w) {
  const Tensor inside = logical_and(logical_and(ix >= 0.0, ix <= static_cast<double>(w - 1)),
                                    logical_and(iy >= 0.0, iy <= static_cast<double>(h - 1)));
  const Tensor flat = where(inside, iy * static_cast<double>(w) + ix, zeros_like(ix)).to(kInt64);
  const Tensor index = flat.expand({plane.size(0), plane.size(1), flat.size(2)});
  return where(inside, gather(plane, 2, index), zeros({}, plane.dtype(), plane.device()));
}

// grid_sample's checks, as PyTorch's.
void check_grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& o, const Loc& loc) {
  const char* op = "grid_sample";
  if (!input.defined() || !grid.defined()) throw Error(op, "the input or the grid is undefined", loc);
  if (o.mode != "bilinear" && o.mode != "nearest")
    fail(op, "mode must be 'bilinear' or 'nearest' (2-d), got '" + o.mode + "'", {&input, &grid}, loc);
  if (o.padding_mode != "zeros" && o.padding_mode != "border" && o.padding_mode != "reflection")
    fail(op, "padding_mode must be 'zeros', 'border' or 'reflection', got '" + o.padding_mode + "'", {&input, &grid},
         loc);
  if (input.dim() != 4) fail(op, "expects a 4-d input [N, C, H, W] (2-d sampling only)", {&input, &grid}, loc);
  if (grid.dim() != 4 || grid.size(3) != 2)
    fail(op, "expects a grid [N, Ho, Wo, 2] for a 4-d input", {&input, &grid}, loc);
  if (grid.size(0) != input.size(0)) fail(op, "the input and the grid need the same batch size", {&input, &grid}, loc);
  if (!is_floating(input.dtype()) || grid.dtype() != input.dtype())
    fail(op, "the input and the grid must be floating, of one dtype", {&input, &grid}, loc);
  if (input.size(2) <= 0 || input.size(3) <= 0)
    fail(op, "the input's spatial extents must be positive", {&input, &grid}, loc);
}

} // namespace

Tensor affine_grid(const Tensor& theta, const IntList& size, bool align_corners, Loc loc) {
  const graph::SourceScope at(loc, "affine_grid"); // nodes made here record the caller's line
  const char* op = "affine_grid";
  if (!theta.defined()) throw Error(op, "theta is undefined", loc);
  if (!is_floating(theta.dtype())) fail(op, "theta must be floating", {&theta}, loc);
  if (size.size() != 4)
    fail(op, "size must be {N, C, H, W} (2-d grids only), got " + graph::shape_str(size), {&theta}, loc);
  if (size[0] <= 0 || size[1] <= 0 || size[2] <= 0 || size[3] <= 0)
    fail(op, "expected a non-zero, positive output size, got " + graph::shape_str(size), {&theta}, loc);
  if (theta.dim() != 3 || theta.size(0) != size[0] || theta.size(1) != 2 || theta.size(2) != 3)
    fail(op, "expected a batch of 2-d affine matrices of shape N x 2 x 3 for size " + graph::shape_str(size), {&theta},
         loc);
  const int64_t h = size[2], w = size[3];
  const DType dt = theta.dtype();
  const Device dev = theta.device();
  const Tensor xs = axis_coordinates(w, align_corners, dt, dev, loc).reshape({1, w}).expand({h, w});
  const Tensor ys = axis_coordinates(h, align_corners, dt, dev, loc).reshape({h, 1}).expand({h, w});
  const Tensor base = stack({xs, ys, ones({h, w}, dt, dev, loc)}, 2, loc).reshape({h * w, 3}); // (x, y, 1) rows
  return matmul(base, theta.transpose(1, 2, loc), loc).reshape({size[0], h, w, 2}, loc);
}

Tensor grid_sample(const Tensor& input, const Tensor& grid, const GridSampleOptions& options, Loc loc) {
  const graph::SourceScope at(loc, "grid_sample"); // nodes made here record the caller's line
  check_grid_sample(input, grid, options, loc);
  const detail::UserCall call("grid_sample", loc); // the ops it is made of report as grid_sample
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  const int64_t ho = grid.size(1), wo = grid.size(2);
  const Tensor plane = input.reshape({n, c, h * w});
  const Tensor g = grid.reshape({n, 1, ho * wo, 2});
  const Tensor x = source_coordinate(g.slice(3, 0, 1).squeeze(3), w, options);
  const Tensor y = source_coordinate(g.slice(3, 1, 2).squeeze(3), h, options);
  Tensor out;
  if (options.mode == "nearest") {
    out = corner(plane, round(x).detach(), round(y).detach(), h, w);
  } else {
    const Tensor x0 = floor(x).detach(), y0 = floor(y).detach(), x1 = x0 + 1.0, y1 = y0 + 1.0;
    out = corner(plane, x0, y0, h, w) * ((x1 - x) * (y1 - y)) + corner(plane, x1, y0, h, w) * ((x - x0) * (y1 - y)) +
          corner(plane, x0, y1, h, w) * ((x1 - x) * (y - y0)) + corner(plane, x1, y1, h, w) * ((x - x0) * (y - y0));
  }
  return out.reshape({n, c, ho, wo}, loc);
}

} // namespace kiln::nn::functional

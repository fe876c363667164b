#pragma once
/// \file shape.h
/// Static shapes, strides and NumPy broadcasting.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::graph {

/// A static shape: one extent per dim, outermost first. Rank 0 is a scalar.
using Shape = std::vector<int64_t>;
/// Strides in elements, one per dim.
using Strides = std::vector<int64_t>;

/// The most elements one tensor may have: 2^48 (1 PiB of f32, beyond any machine). Every
/// shape kiln makes is within it, so no extent, element count, stride or element offset
/// of a valid shape overflows int64.
inline constexpr int64_t kMaxNumel = int64_t{1} << 48;

/// a + b; nullopt when it overflows int64.
std::optional<int64_t> checked_add(int64_t a, int64_t b);
/// a * b; nullopt when it overflows int64.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);
/// Why `s` cannot be a tensor's shape, "" when it can: a negative extent, or more than
/// kMaxNumel elements counting only the non-zero extents (so that every stride of it fits
/// too: [2^62, 2^62, 0] is rejected although it has no element).
std::string shape_error(const Shape& s);
/// Number of elements (1 for a scalar, 0 if any extent is 0); saturates at INT64_MAX
/// instead of overflowing, so only a valid shape's count is exact.
int64_t numel(const Shape& s);
/// The extent of start:end:step (0 <= start <= end, step > 0): ceil((end - start) / step),
/// without the overflow of end - start + step - 1.
int64_t slice_extent(int64_t start, int64_t end, int64_t step);
/// n + before + after (a padded or concatenated extent); nullopt when it overflows.
std::optional<int64_t> padded_extent(int64_t n, int64_t before, int64_t after);
/// The output extent of a sliding window over n elements, kernel k, stride s, padding p and
/// dilation d (all sizes non-negative, s and d positive): floor((n + 2p - d(k-1) - 1) / s) + 1;
/// nullopt when an intermediate overflows int64. It is <= 0 when the window does not fit (floor
/// division, as PyTorch: a truncating one made a too large window of stride > 1 one output).
std::optional<int64_t> window_extent(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d);
/// The shape of unfold(x, dim, size, step, at) (ops.def; parameters checked by verify): x's,
/// with dim's extent replaced by the window count (x[dim] - size) / step + 1, and `size`
/// inserted at position `at` (0 <= at <= rank).
Shape unfold_shape(const Shape& x, int64_t dim, int64_t size, int64_t step, int64_t at);
/// The length of arange(start, end, step) (finite bounds, non-zero step of the right sign):
/// ceil((end - start) / step); nullopt when it exceeds kMaxNumel (or is not a number).
std::optional<int64_t> arange_length(double start, double end, double step);
/// Row-major strides of a contiguous tensor of this shape.
Strides contiguous_strides(const Shape& s);
/// "[2,3]".
std::string shape_str(const Shape& s);
/// NumPy broadcasting of two shapes; nullopt where they are incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);
/// Wraps a possibly negative dim into [0, rank); nullopt when out of range.
std::optional<int64_t> wrap_dim(int64_t dim, int64_t rank);

/// A strided view: element (i0..in) lives at offset + sum(i_d * strides_d).
struct StridedLayout {
  Shape shape;      ///< extents
  Strides strides;  ///< per-dim strides in elements (0 for broadcast dims)
  int64_t offset = 0; ///< element offset of element (0, ..., 0)
};

/// The layout of a contiguous tensor.
StridedLayout contiguous_layout(const Shape& s);
/// True when the layout is row-major contiguous from offset 0 (size-1 dims ignored).
bool is_contiguous(const StridedLayout& l);
/// Strides for viewing `l` with a new shape of the same numel without copying
/// (PyTorch's computeStride); nullopt when a copy is needed.
std::optional<Strides> reshape_strides(const StridedLayout& l, const Shape& new_shape);

} // namespace kiln::graph

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

/// Number of elements (1 for a scalar, 0 if any extent is 0).
int64_t numel(const Shape& s);
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

#include "graph/shape.h"

#include <cmath>
#include <limits>
#include <range/v3/view/reverse.hpp>
#include <range/v3/view/zip.hpp>

namespace kiln::graph {

namespace views = ranges::views;

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::string shape_error(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) return "negative extent in shape " + shape_str(s);
    if (d == 0) continue;
    const auto m = checked_mul(n, d);
    if (!m || *m > kMaxNumel)
      return "shape " + shape_str(s) + " has more than 2^48 elements (counting its non-zero extents)";
    n = *m;
  }
  return "";
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d == 0) return 0;
    n = checked_mul(n, d).value_or(std::numeric_limits<int64_t>::max());
  }
  return n;
}

// Row-major: each stride is the product of the extents after it (within kMaxNumel for a valid shape).
Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (auto&& [stride, extent] : views::zip(st, s) | views::reverse) {
    stride = acc;
    acc = checked_mul(acc, extent).value_or(std::numeric_limits<int64_t>::max());
  }
  return st;
}

int64_t slice_extent(int64_t start, int64_t end, int64_t step) {
  const int64_t span = end - start;
  return span / step + (span % step != 0);
}

Shape unfold_shape(const Shape& x, int64_t dim, int64_t size, int64_t step, int64_t at) {
  Shape s = x;
  s[static_cast<size_t>(dim)] = (x[static_cast<size_t>(dim)] - size) / step + 1;
  s.insert(s.begin() + at, size);
  return s;
}

std::optional<int64_t> padded_extent(int64_t n, int64_t before, int64_t after) {
  const auto m = checked_add(n, before);
  return m ? checked_add(*m, after) : std::nullopt;
}

std::optional<int64_t> window_extent(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
  const auto two_p = checked_mul(p, 2), span = checked_mul(d, k - 1);
  const auto padded = two_p ? checked_add(n, *two_p) : std::nullopt;
  if (!padded || !span) return std::nullopt;
  const int64_t num = *padded - *span - 1; // both terms are non-negative: no overflow
  return num / s - (num % s < 0) + 1;      // floor division, as PyTorch: a window that does not fit gives <= 0
}

std::optional<int64_t> arange_length(double start, double end, double step) {
  const double n = std::ceil((end - start) / step);
  if (!(n >= 0 && n <= static_cast<double>(kMaxNumel))) return std::nullopt;
  return static_cast<int64_t>(n);
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// Aligned from the trailing dim: each operand's extent either matches, or one of them is 1.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (const Shape* in : {&a, &b})
    for (auto&& [o, d] : views::zip(out | views::reverse, *in | views::reverse)) {
      if (o != d && o != 1 && d != 1) return std::nullopt;
      if (o == 1) o = d;
    }
  return out;
}

std::optional<int64_t> wrap_dim(int64_t dim, int64_t rank) {
  const int64_t r = std::max<int64_t>(rank, 1); // a scalar accepts dim 0 and -1, as in PyTorch
  if (dim < -r || dim >= r) return std::nullopt;
  return dim < 0 ? dim + r : dim;
}

StridedLayout contiguous_layout(const Shape& s) { return {s, contiguous_strides(s), 0}; }

bool is_contiguous(const StridedLayout& l) {
  if (l.offset != 0) return false;
  int64_t expected = 1;
  for (auto&& [extent, stride] : views::zip(l.shape, l.strides) | views::reverse) {
    if (extent == 1) continue;
    if (stride != expected) return false;
    expected *= extent;
  }
  return true;
}

// Groups old dims into runs that are contiguous with each other and matches
// each run against new dims with the same element count (as PyTorch does).
std::optional<Strides> reshape_strides(const StridedLayout& l, const Shape& new_shape) {
  const Shape& old_shape = l.shape;
  Strides new_strides(new_shape.size(), 0);
  if (numel(old_shape) == 0) return contiguous_strides(new_shape);
  if (old_shape.empty()) return Strides(new_shape.size(), 1);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = l.strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && l.strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = l.strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

} // namespace kiln::graph

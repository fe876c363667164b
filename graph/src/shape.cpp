#include "graph/shape.h"

#include <range/v3/view/zip.hpp>

namespace kiln::graph {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& s) {
  Strides st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
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
  for (size_t i = l.shape.size(); i-- > 0;) {
    if (l.shape[i] == 1) continue;
    if (l.strides[i] != expected) return false;
    expected *= l.shape[i];
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

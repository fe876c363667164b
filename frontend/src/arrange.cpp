// meshgrid, cartesian_prod, tril_indices, triu_indices, rot90, block_diag: the user-facing checks, then
// movement ops (and, for the triangle indices, a host-built constant).

#include "kiln/arrange.h"

#include "frontend/src/tensor_impl.h"
#include "graph/build.h"

namespace kiln {

using detail::fail;

namespace {

// The 0-d or 1-d inputs of meshgrid / cartesian_prod as 1-d tensors (of one dtype and device).
std::vector<Tensor> as_vectors(const char* op, const std::vector<Tensor>& tensors, bool one_d, const Loc& loc) {
  if (tensors.empty()) throw Error(op, "takes at least one tensor", loc);
  std::vector<Tensor> v;
  for (const Tensor& t : tensors) {
    if (!t.defined()) throw Error(op, "a tensor is undefined", loc);
    if (t.dim() > 1 || (one_d && t.dim() != 1))
      fail(op, one_d ? "takes 1-d tensors" : "takes 0-d or 1-d tensors", {&t}, loc);
    if (t.dtype() != tensors[0].dtype()) fail(op, "the tensors must have one dtype", {&tensors[0], &t}, loc);
    v.push_back(t.reshape({t.numel()}, loc));
  }
  (void)detail::common_device(op, v, loc);
  return v;
}

} // namespace

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing, Loc loc) {
  const graph::SourceScope at(loc, "meshgrid"); // nodes made here record the caller's line
  if (indexing != "ij" && indexing != "xy")
    throw Error("meshgrid", "indexing must be \"ij\" or \"xy\", got \"" + indexing + "\"", loc);
  const std::vector<Tensor> v = as_vectors("meshgrid", tensors, false, loc);
  const bool xy = indexing == "xy" && v.size() >= 2;
  IntList shape;
  for (const Tensor& t : v) shape.push_back(t.numel());
  if (xy) std::swap(shape[0], shape[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t at_dim = xy && i < 2 ? 1 - i : i; // "xy": the first two inputs vary along the swapped dims
    IntList along(shape.size(), 1);
    along[at_dim] = shape[at_dim];
    out.push_back(v[i].reshape(along, loc).expand(shape, loc));
  }
  return out;
}

Tensor cartesian_prod(const std::vector<Tensor>& tensors, Loc loc) {
  const graph::SourceScope at(loc, "cartesian_prod"); // nodes made here record the caller's line
  const std::vector<Tensor> v = as_vectors("cartesian_prod", tensors, true, loc);
  if (v.size() == 1) return v[0];
  std::vector<Tensor> cols;
  for (const Tensor& g : meshgrid(v, "ij", loc)) cols.push_back(g.reshape({g.numel()}, loc));
  return stack(cols, 1, loc);
}

namespace {

// The (row; col) coordinates of a row x col matrix's elements with col - row <= offset (lower) or >=
// offset (upper), row by row, as a [2, N] i64 constant.
Tensor triangle(const char* op, int64_t row, int64_t col, int64_t offset, bool lower, Device device, const Loc& loc) {
  if (row < 0 || col < 0)
    throw Error(op, "row and col must be >= 0, got " + std::to_string(row) + " and " + std::to_string(col), loc);
  std::vector<int64_t> rows, cols;
  for (int64_t r = 0; r < row; ++r)
    for (int64_t c = 0; c < col; ++c)
      if (lower ? c - r <= offset : c - r >= offset) rows.push_back(r), cols.push_back(c);
  const auto n = static_cast<int64_t>(rows.size());
  rows.insert(rows.end(), cols.begin(), cols.end());
  return from_vector(rows, {2, n}, loc).to(device, loc);
}

} // namespace

Tensor tril_indices(int64_t row, int64_t col, int64_t offset, Device device, Loc loc) {
  return triangle("tril_indices", row, col, offset, true, device, loc);
}

Tensor triu_indices(int64_t row, int64_t col, int64_t offset, Device device, Loc loc) {
  return triangle("triu_indices", row, col, offset, false, device, loc);
}

Tensor rot90(const Tensor& x, int64_t k, IntList dims, Loc loc) {
  const graph::SourceScope at(loc, "rot90"); // nodes made here record the caller's line
  if (!x.defined()) throw Error("rot90", "the input is undefined", loc);
  if (dims.size() != 2) fail("rot90", "takes two dims, got " + std::to_string(dims.size()), {&x}, loc);
  if (x.dim() < 2) fail("rot90", "needs an input of at least 2 dims", {&x}, loc);
  const int64_t d0 = detail::wrap_dim_or_fail("rot90", dims[0], x, loc);
  const int64_t d1 = detail::wrap_dim_or_fail("rot90", dims[1], x, loc);
  if (d0 == d1) fail("rot90", "the two dims must differ, got " + std::to_string(d0) + " twice", {&x}, loc);
  switch (((k % 4) + 4) % 4) {
  case 1: return x.flip({d1}, loc).transpose(d0, d1, loc);
  case 2: return x.flip({d0, d1}, loc);
  case 3: return x.flip({d0}, loc).transpose(d0, d1, loc);
  }
  return where(zeros({}, kBool, x.device(), loc), x, x, loc); // k a multiple of 4: a copy (the same bits)
}

Tensor block_diag(const std::vector<Tensor>& tensors, Loc loc) {
  const graph::SourceScope at(loc, "block_diag"); // nodes made here record the caller's line
  if (tensors.empty()) return zeros({1, 0}, kFloat32, kCPU, loc); // as PyTorch: an empty [1, 0]
  DType dtype = tensors[0].defined() ? tensors[0].dtype() : kFloat32;
  int64_t cols = 0;
  for (const Tensor& t : tensors) {
    if (!t.defined()) throw Error("block_diag", "a tensor is undefined", loc);
    if (t.dim() > 2) fail("block_diag", "takes 0-d, 1-d or 2-d tensors", {&t}, loc);
    dtype = promote_types(dtype, t.dtype());
    cols += t.dim() == 2 ? t.size(1) : t.dim() == 1 ? t.size(0) : 1;
  }
  (void)detail::common_device("block_diag", tensors, loc);
  std::vector<Tensor> rows;
  int64_t before = 0;
  for (const Tensor& t : tensors) {
    const Tensor m = t.dim() == 2 ? t : t.reshape({1, t.numel()}, loc);
    const int64_t w = m.size(1);
    rows.push_back(pad(m.to(dtype, loc), {before, cols - before - w}, 0, loc));
    before += w;
  }
  return concat(rows, 0, loc);
}

} // namespace kiln

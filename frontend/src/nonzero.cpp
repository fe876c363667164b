// Selections whose size depends on the data (kiln/indexops.h), as PyTorch 1.13's nonzero, argwhere and
// masked_select: the mask is computed and read on the host, its true positions become an i64 tensor, and the
// values are an index_select of them (so the gradient scatters back, and what uses them fuses as usual).

#include "frontend/src/tensor_impl.h"
#include "graph/shape.h"
#include "kiln/indexops.h"

namespace kiln {

using detail::fail;

namespace {

// The flat positions where `mask` (any dtype: nonzero, NaN included) is true, read on the host.
std::vector<int64_t> true_positions(const char* op, const Tensor& mask, std::initializer_list<const Tensor*> operands,
                                    const Loc& loc) {
  if (detail::active_capture()) // the positions decide the result's shape: they cannot stay lazy
    fail(op,
         "reads its mask on the host (the result's size depends on it), which a function traced by compile() "
         "cannot do",
         operands, loc);
  const Tensor nz = mask.dtype() == kBool ? mask : ne(mask, wrap_scalar(0, mask, loc), loc);
  const std::vector<bool> flags = nz.to_vector<bool>(loc);
  std::vector<int64_t> at;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) at.push_back(static_cast<int64_t>(i));
  return at;
}

Tensor i64_tensor(std::vector<int64_t> values, IntList shape, Device device, const Loc& loc) {
  const Tensor t = from_vector<int64_t>(values, std::move(shape), loc);
  return device == kCPU ? t : t.to(device, loc);
}

} // namespace

Tensor nonzero(const Tensor& input, Loc loc) {
  const graph::SourceScope at(loc, "nonzero");
  const detail::UserCall call("nonzero", loc);
  if (!input.defined()) throw Error("nonzero", "the input is undefined", loc);
  const std::vector<int64_t> flat = true_positions("nonzero", input, {&input}, loc);
  const IntList& shape = input.shape();
  const int64_t rank = input.dim(), n = static_cast<int64_t>(flat.size());
  std::vector<int64_t> coords(static_cast<size_t>(n * rank));
  for (int64_t k = 0; k < n; ++k) {
    int64_t rest = flat[static_cast<size_t>(k)];
    for (int64_t d = rank - 1; d >= 0; --d) {
      coords[static_cast<size_t>(k * rank + d)] = rest % shape[static_cast<size_t>(d)];
      rest /= shape[static_cast<size_t>(d)];
    }
  }
  return i64_tensor(std::move(coords), {n, rank}, input.device(), loc);
}

Tensor argwhere(const Tensor& input, Loc loc) {
  const detail::UserCall call("argwhere", loc);
  return nonzero(input, loc);
}

Tensor masked_select(const Tensor& input, const Tensor& mask, Loc loc) {
  const graph::SourceScope at(loc, "masked_select");
  const detail::UserCall call("masked_select", loc);
  if (!input.defined() || !mask.defined()) throw Error("masked_select", "an input is undefined", loc);
  if (mask.dtype() != kBool) fail("masked_select", "the mask must be bool", {&input, &mask}, loc);
  const std::optional<graph::Shape> shape = graph::broadcast_shapes(input.shape(), mask.shape());
  if (!shape) fail("masked_select", "the input and the mask cannot be broadcast together", {&input, &mask}, loc);
  const std::vector<int64_t> flat = true_positions("masked_select", mask.expand(*shape, loc), {&input, &mask}, loc);
  const int64_t n = static_cast<int64_t>(flat.size());
  const Tensor index = i64_tensor(flat, {n}, input.device(), loc);
  return index_select(input.expand(*shape, loc).reshape({-1}, loc), 0, index, loc);
}

Tensor Tensor::nonzero(Loc loc) const { return kiln::nonzero(*this, loc); }
Tensor Tensor::argwhere(Loc loc) const { return kiln::argwhere(*this, loc); }
Tensor Tensor::masked_select(const Tensor& mask, Loc loc) const { return kiln::masked_select(*this, mask, loc); }

} // namespace kiln

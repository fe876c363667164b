// In-place methods (x.add_(y), x.zero_(), x.index_put_(...)): each computes the out-of-place op and
// makes the result this tensor's value (Tensor::store_value, shared with assign), with PyTorch's rules
// on dtype, shape, leaves and autograd, and kiln's on views (it has none: see README "In-place methods").

#include <optional>
#include <string>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"
#include "kiln/indexops.h"

namespace kiln {

namespace {

/// PyTorch's name of a dtype in its casting errors ("Float", "Long").
const char* torch_dtype_name(DType t) {
  switch (t) {
  case DType::Bool: return "Bool";
  case DType::Int32: return "Int";
  case DType::Int64: return "Long";
  case DType::Float32: return "Float";
  case DType::Float64: return "Double";
  }
  return "?";
}

/// True when the node is a view-like movement of its operand (PyTorch would return a view sharing memory).
bool is_view_like(const graph::Node& n) {
  using graph::OpKind;
  return n.op == OpKind::Reshape || n.op == OpKind::Permute || n.op == OpKind::Expand || n.op == OpKind::Slice ||
         n.op == OpKind::Unfold;
}

} // namespace

Tensor& Tensor::update_in_place(const char* op, const Tensor& value, const Loc& loc) {
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  if (is_view_like(*node()))
    detail::fail(op,
                 std::string("this tensor's value is a view (") + std::string(graph::op_name(node()->op)) +
                     ") of another tensor's, and kiln has no views sharing memory: the op would change the "
                     "copy alone; update the base instead (index_put_, scatter_, masked_fill_ or assign on it)",
                 {this}, loc);
  if (requires_grad() && impl_->is_leaf && grad_mode_enabled())
    detail::fail(op, "a leaf Variable that requires grad is being used in an in-place operation", {this}, loc);
  if (value.shape() != shape())
    detail::fail(op,
                 "output with shape " + detail::list_str(shape()) + " doesn't match the broadcast shape " +
                     detail::list_str(value.shape()),
                 {this, &value}, loc);
  if (dtype_category(value.dtype()) > dtype_category(dtype()))
    detail::fail(op,
                 std::string("result type ") + torch_dtype_name(value.dtype()) +
                     " can't be cast to the desired output type " + torch_dtype_name(dtype()),
                 {this, &value}, loc);
  store_value(kiln::cast(value, dtype(), loc), !(requires_grad() && impl_->is_leaf), op, loc);
  return *this;
}

namespace {
/// `other * alpha`, or `other` when alpha is 1 (add_'s and sub_'s scaled operand).
Tensor scaled(const Tensor& other, Scalar alpha, const Loc& loc) {
  if (alpha.kind() != DType::Float64 && alpha.to_int() == 1) return other;
  return kiln::mul(other, wrap_scalar(alpha, other, loc), loc);
}
} // namespace

Tensor& Tensor::add_(const Tensor& o, Scalar alpha, Loc loc) {
  return update_in_place("add_", kiln::add(*this, scaled(o, alpha, loc), loc), loc);
}
Tensor& Tensor::add_(Scalar o, Scalar alpha, Loc loc) { return add_(wrap_scalar(o, *this, loc), alpha, loc); }
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha, Loc loc) {
  return update_in_place("sub_", kiln::sub(*this, scaled(o, alpha, loc), loc), loc);
}
Tensor& Tensor::sub_(Scalar o, Scalar alpha, Loc loc) { return sub_(wrap_scalar(o, *this, loc), alpha, loc); }
Tensor& Tensor::mul_(const Tensor& o, Loc loc) { return update_in_place("mul_", kiln::mul(*this, o, loc), loc); }
Tensor& Tensor::mul_(Scalar o, Loc loc) { return mul_(wrap_scalar(o, *this, loc), loc); }
Tensor& Tensor::div_(const Tensor& o, Loc loc) { return update_in_place("div_", kiln::div(*this, o, loc), loc); }
Tensor& Tensor::div_(Scalar o, Loc loc) { return div_(wrap_scalar(o, *this, loc), loc); }
Tensor& Tensor::pow_(const Tensor& e, Loc loc) { return update_in_place("pow_", kiln::pow(*this, e, loc), loc); }
Tensor& Tensor::pow_(Scalar e, Loc loc) { return update_in_place("pow_", kiln::pow(*this, e, loc), loc); }
Tensor& Tensor::neg_(Loc loc) { return update_in_place("neg_", kiln::neg(*this, loc), loc); }
Tensor& Tensor::abs_(Loc loc) { return update_in_place("abs_", kiln::abs(*this, loc), loc); }
Tensor& Tensor::sqrt_(Loc loc) { return update_in_place("sqrt_", kiln::sqrt(*this, loc), loc); }
Tensor& Tensor::exp_(Loc loc) { return update_in_place("exp_", kiln::exp(*this, loc), loc); }
Tensor& Tensor::log_(Loc loc) { return update_in_place("log_", kiln::log(*this, loc), loc); }
Tensor& Tensor::relu_(Loc loc) { return update_in_place("relu_", kiln::relu(*this, loc), loc); }
Tensor& Tensor::sigmoid_(Loc loc) { return update_in_place("sigmoid_", kiln::sigmoid(*this, loc), loc); }
Tensor& Tensor::tanh_(Loc loc) { return update_in_place("tanh_", kiln::tanh(*this, loc), loc); }
Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max, Loc loc) {
  return update_in_place("clamp_", kiln::clamp(*this, min, max, loc), loc);
}
Tensor& Tensor::clamp_min_(Scalar min, Loc loc) {
  return update_in_place("clamp_min_", kiln::clamp_min(*this, min, loc), loc);
}
Tensor& Tensor::clamp_max_(Scalar max, Loc loc) {
  return update_in_place("clamp_max_", kiln::clamp_max(*this, max, loc), loc);
}
Tensor& Tensor::zero_(Loc loc) { return update_in_place("zero_", kiln::zeros_like(*this, loc), loc); }
Tensor& Tensor::fill_(Scalar value, Loc loc) {
  return update_in_place("fill_", kiln::full(shape(), value, dtype(), device(), loc), loc);
}
Tensor& Tensor::fill_(const Tensor& value, Loc loc) {
  if (value.dim() != 0)
    detail::fail("fill_",
                 "fill_ only supports 0-dimension value tensor but got tensor with " + std::to_string(value.dim()) +
                     " dimensions.",
                 {this, &value}, loc);
  return copy_(value, loc);
}
Tensor& Tensor::copy_(const Tensor& src, Loc loc) {
  const detail::OpScope scope("copy_", loc);
  const Tensor moved = src.device() == device() ? src : src.to(device(), loc);
  return update_in_place("copy_", kiln::broadcast_to(kiln::cast(moved, dtype(), loc), shape(), loc), loc);
}
Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value, Loc loc) {
  return update_in_place("masked_fill_", kiln::masked_fill(*this, mask, value, loc), loc);
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, Scalar value, Loc loc) {
  return update_in_place("index_fill_", kiln::index_fill(*this, dim, index, value, loc), loc);
}
Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& source, Loc loc) {
  return update_in_place("index_copy_", kiln::index_copy(*this, dim, index, source, loc), loc);
}
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha, Loc loc) {
  return update_in_place("index_add_", kiln::index_add(*this, dim, index, source, alpha, loc), loc);
}
Tensor& Tensor::index_put_(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate, Loc loc) {
  return update_in_place("index_put_", kiln::index_put(*this, indices, values, accumulate, loc), loc);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src, Loc loc) {
  return update_in_place("scatter_", kiln::scatter(*this, dim, index, src, loc), loc);
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, Scalar value, Loc loc) {
  return update_in_place("scatter_", kiln::scatter(*this, dim, index, value, loc), loc);
}
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src, Loc loc) {
  return update_in_place("scatter_add_", kiln::scatter_add(*this, dim, index, src, loc), loc);
}
Tensor& Tensor::uniform_(double from, double to, uint64_t seed, Loc loc) {
  return update_in_place("uniform_", kiln::rand_like(*this, seed, loc) * (to - from) + from, loc);
}
Tensor& Tensor::normal_(double mean, double std, uint64_t seed, Loc loc) {
  return update_in_place("normal_", kiln::randn_like(*this, seed, loc) * std + mean, loc);
}

} // namespace kiln

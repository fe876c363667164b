// The user-facing ops: argument checks with clear errors, PyTorch's type
// promotion and broadcasting, then graph nodes through graph::build.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/verify.h"
#include "kiln/autograd.h"
#include "runtime/storage.h"

namespace kiln {

namespace b = graph::build;
using graph::NodeRef;
using graph::OpKind;
using detail::fail;
using detail::result;

namespace {

// ---------------------------------------------------------------- promotion

// PyTorch's result_type: dimensioned tensors outrank 0-d tensors, which outrank
// wrapped numbers; a lower group only wins when it is of a higher category.
DType combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return *lower;
  if (!lower) return *higher;
  if (is_floating(*higher)) return *higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
  return *higher;
}

DType result_type(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) (void)t->node(); // an undefined operand throws kiln::Error here
  std::optional<DType> dim, zero, wrapped;
  auto update = [](std::optional<DType>& slot, DType t) { slot = slot ? promote_types(*slot, t) : t; };
  for (const Tensor* t : ts) {
    if (t->impl()->wrapped_number) update(wrapped, t->dtype() == DType::Float64 ? kDefaultFloat : t->dtype());
    else if (t->dim() == 0) update(zero, t->dtype());
    else update(dim, t->dtype());
  }
  if (!zero && !wrapped) return *dim;
  const DType low = !zero ? *wrapped : !wrapped ? *zero : combine_categories(zero, wrapped);
  return dim ? combine_categories(dim, low) : low;
}

graph::Shape broadcast_or_fail(const std::string& op, std::initializer_list<const Tensor*> ts, const Loc& loc) {
  graph::Shape shape;
  for (const Tensor* t : ts) {
    auto s = graph::broadcast_shapes(shape, t->shape());
    if (!s) fail(op, "shapes cannot be broadcast together", ts, loc);
    shape = *s;
  }
  detail::check_shape(op, shape, ts, loc);
  return shape;
}

NodeRef prepare(const Tensor& t, DType dtype, const graph::Shape& shape, Device device) {
  return b::broadcast_to(b::cast(b::leaf_on(t.node(), device), dtype), shape);
}

bool is_float_result(OpKind op) {
  return op == OpKind::Div || op == OpKind::Atan2 || op == OpKind::Fmod || op == OpKind::Remainder;
}

// PyTorch refuses a - b where either is bool (a tensor or a C++ bool), whatever the promoted dtype.
void check_sub_operands(OpKind op, const Tensor& a, const Tensor& c, const Loc& loc) {
  if (op != OpKind::Sub || (a.dtype() != DType::Bool && c.dtype() != DType::Bool)) return;
  fail("sub", a.dtype() == c.dtype() ? "is not defined for two bools; use logical_xor (a != b) instead"
                                     : "is not defined for a bool operand; use logical_not to invert a mask",
       {&a, &c}, loc);
}

// The op that `op` on two bools is, as in PyTorch: logical or for add and maximum, logical and for mul
// and minimum (a bool result); sub and pow are not defined for bools.
OpKind bool_arithmetic(OpKind op, const std::string& name, const Tensor& a, const Tensor& c, const Loc& loc) {
  if (op == OpKind::Add || op == OpKind::Maximum) return OpKind::LogicalOr;
  if (op == OpKind::Mul || op == OpKind::Minimum) return OpKind::LogicalAnd;
  fail(name, "is not defined for bool tensors; cast them first", {&a, &c}, loc);
}

// add, sub, mul, div, pow, maximum, minimum.
Tensor arithmetic(OpKind op, const Tensor& a, const Tensor& c, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  const std::string name(graph::op_name(op));
  DType dt = result_type({&a, &c});
  check_sub_operands(op, a, c, loc);
  if (is_float_result(op) && !is_floating(dt)) dt = kDefaultFloat;
  const OpKind kind = dt == DType::Bool ? bool_arithmetic(op, name, a, c, loc) : op;
  const graph::Shape shape = broadcast_or_fail(name, {&a, &c}, loc);
  const Device dev = detail::common_device(name, {&a, &c}, loc);
  const NodeRef n = b::binary(kind, prepare(a, dt, shape, dev), prepare(c, dt, shape, dev));
  return dt == DType::Bool ? Tensor(n) : result(n, {&a, &c}); // bools never require grad
}

// eq ... ge, logical_and, logical_or: compared in the promoted dtype, result bool.
Tensor comparison(OpKind op, const Tensor& a, const Tensor& c, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  const DType dt = result_type({&a, &c});
  const std::string name(graph::op_name(op));
  const graph::Shape shape = broadcast_or_fail(name, {&a, &c}, loc);
  const Device dev = detail::common_device(name, {&a, &c}, loc);
  return Tensor(b::binary(op, prepare(a, dt, shape, dev), prepare(c, dt, shape, dev)));
}

// Float-only unary ops promote integers to the default float dtype.
Tensor float_unary(OpKind op, const Tensor& x, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  const DType dt = is_floating(x.dtype()) ? x.dtype() : kDefaultFloat;
  return result(b::unary(op, b::cast(x.node(), dt)), {&x});
}

Tensor numeric_unary(OpKind op, const Tensor& x, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  if (x.dtype() == DType::Bool)
    fail(std::string(graph::op_name(op)), "not defined for bool tensors", {&x}, loc);
  return result(b::unary(op, x.node()), {&x});
}

// ---------------------------------------------------------------- dims

int64_t dim_or_fail(const std::string& op, int64_t d, const Tensor& x, const Loc& loc) {
  const int64_t w = detail::wrap_dim_or_fail(op, d, x, loc);
  return x.dim() == 0 ? -1 : w; // -1: a 0-d tensor has no dim to reduce
}

std::vector<int64_t> dims_or_fail(const std::string& op, const IntList& dims, const Tensor& x, const Loc& loc) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    out.resize(x.dim());
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int64_t d : dims) {
    const int64_t w = dim_or_fail(op, d, x, loc);
    if (w < 0) continue;
    if (std::find(out.begin(), out.end(), w) != out.end())
      fail(op, "dim " + std::to_string(d) + " appears more than once", {&x}, loc);
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

graph::Shape drop_dims(const graph::Shape& s, const std::vector<int64_t>& dims) {
  graph::Shape out;
  for (size_t d = 0; d < s.size(); ++d)
    if (std::find(dims.begin(), dims.end(), static_cast<int64_t>(d)) == dims.end()) out.push_back(s[d]);
  return out;
}

Tensor reduction(OpKind op, const Tensor& x, const IntList& dims, bool keepdim, DType dt, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  const std::string name(graph::op_name(op));
  const auto ds = dims_or_fail(name, dims, x, loc);
  NodeRef r = b::reduce(op, b::cast(x.node(), dt), ds);
  if (!keepdim) r = b::reshape(r, drop_dims(x.shape(), ds));
  return result(r, {&x});
}

int64_t reduced_count(const Tensor& x, const std::vector<int64_t>& ds) {
  int64_t n = 1;
  for (int64_t d : ds) n *= x.shape()[d];
  return n;
}

Tensor min_max(OpKind op, const Tensor& x, const IntList& dims, bool keepdim, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  const std::string name(graph::op_name(op));
  if (reduced_count(x, dims_or_fail(name, dims, x, loc)) == 0)
    fail(name, "cannot reduce over an empty dimension (the result has no identity)", {&x}, loc);
  if (x.dtype() == DType::Bool) // as PyTorch: any (max) or all (min), a bool result
    return cast(reduction(op, cast(x, DType::Int32, loc), dims, keepdim, DType::Int32, loc), DType::Bool, loc);
  return reduction(op, x, dims, keepdim, x.dtype(), loc);
}

Tensor arg_reduction(OpKind op, const Tensor& x, int64_t dim, bool keepdim, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  const std::string name(graph::op_name(op));
  if (x.dtype() == DType::Bool) fail(name, "not defined for bool tensors", {&x}, loc);
  const int64_t d = dim_or_fail(name, dim, x, loc);
  if (d >= 0 && x.shape()[d] == 0) fail(name, "cannot reduce over an empty dimension", {&x}, loc);
  if (d < 0) return Tensor(b::constant(0, DType::Int64, {}, x.device())); // a 0-d tensor: index 0
  NodeRef r = b::reduce(op, x.node(), {d});
  if (!keepdim) r = b::reshape(r, drop_dims(x.shape(), {d}));
  return Tensor(r);
}

// Shape with one -1 inferred, as torch.reshape.
graph::Shape infer_shape(const Tensor& x, IntList shape, const Loc& loc) {
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      if (infer >= 0) fail("reshape", "only one dim can be -1 in " + graph::shape_str(shape), {&x}, loc);
      infer = static_cast<int64_t>(d);
    } else if (shape[d] < 0) {
      fail("reshape", "invalid extent in " + graph::shape_str(shape), {&x}, loc);
    } else {
      known = graph::checked_mul(known, shape[d]).value_or(std::numeric_limits<int64_t>::max());
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0)
      fail("reshape", "shape " + graph::shape_str(shape) + " is invalid for " + std::to_string(x.numel()) + " elements",
           {&x}, loc);
    shape[infer] = x.numel() / known;
  }
  detail::check_shape("reshape", shape, {&x}, loc);
  if (graph::numel(shape) != x.numel())
    fail("reshape", "shape " + graph::shape_str(shape) + " is invalid for " + std::to_string(x.numel()) + " elements",
         {&x}, loc);
  return shape;
}

// The values in new host storage (OutOfMemoryError of from_vector at `loc` when it cannot be had).
template <class T>
std::shared_ptr<graph::Storage> copy_to_storage(const std::vector<T>& data, DType dt, const IntList& shape, const Loc& loc) {
  const size_t bytes = data.size() * dtype_size(dt);
  auto s = runtime::try_allocate_host(bytes);
  if (!s)
    detail::out_of_memory("from_vector", "host", bytes, "the values of " + std::string(dtype_name(dt)) + graph::shape_str(shape), loc);
  if constexpr (std::is_same_v<T, bool>) {
    auto* p = static_cast<uint8_t*>(s->data());
    for (size_t i = 0; i < data.size(); ++i) p[i] = data[i] ? 1 : 0;
  } else {
    std::copy(data.begin(), data.end(), static_cast<T*>(s->data()));
  }
  return s;
}

void check_shape(const std::string& op, const IntList& shape, const Loc& loc) { detail::check_shape(op, shape, {}, loc); }

std::string number_str(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// An integer arange computes start + i * step in int64: its values, and (n - 1) * step, must fit
// the dtype (n > 1; a single value needs no step, none needs no start).
void check_integer_arange(double start, double step, int64_t n, DType dtype, const Loc& loc) {
  const long double lim = dtype == DType::Int32 ? 0x1p31L : 0x1p63L;
  const long double span = static_cast<long double>(n - 1) * step, last = start + span;
  const bool fits = start >= -lim && start < lim && last >= -lim && last < lim && std::fabs(span) < 0x1p63L;
  if (!fits)
    throw Error("arange", "values from " + number_str(start) + " in steps of " + number_str(step) + " leave the range of " +
                              std::string(dtype_name(dtype)), loc);
}

} // namespace

// ---------------------------------------------------------------- creation

namespace {

/// Throws kiln::Error for `op` when `value` cannot be converted to the integer `dtype` without
/// overflow (NaN and the infinities included), as PyTorch refuses it; a floating value in range
/// truncates toward zero. Bool and floating dtypes take any value.
void check_fits(const char* op, const Scalar& value, DType dtype, std::initializer_list<const Tensor*> operands,
                const Loc& loc) {
  const bool floating = value.kind() == DType::Float64;
  if (!(floating ? detail::fits_integer(value.to_double(), dtype) : detail::fits_integer(value.to_int(), dtype))) {
    std::ostringstream text;
    text << "value " << (value.kind() == DType::Float64 ? std::to_string(value.to_double()) : std::to_string(value.to_int()))
         << " cannot be converted to " << dtype_name(dtype) << " without overflow";
    fail(op, text.str(), operands, loc);
  }
}

// full() and the creation ops made from it, each checked under its own name.
Tensor filled(const char* op, const IntList& shape, Scalar value, DType dtype, Device device, const Loc& loc) {
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  check_shape(op, shape, loc);
  detail::check_device(op, device, loc);
  check_fits(op, value, dtype, {}, loc);
  return Tensor(b::constant_of(value, dtype, shape, device));
}

} // namespace

Tensor full(IntList shape, Scalar value, DType dtype, Device device, Loc loc) {
  return filled("full", shape, value, dtype, device, loc);
}
Tensor zeros(IntList shape, DType dtype, Device device, Loc loc) { return filled("zeros", shape, 0, dtype, device, loc); }
Tensor ones(IntList shape, DType dtype, Device device, Loc loc) { return filled("ones", shape, 1, dtype, device, loc); }
Tensor zeros_like(const Tensor& like, Loc loc) { return filled("zeros_like", like.shape(), 0, like.dtype(), like.device(), loc); }
Tensor ones_like(const Tensor& like, Loc loc) { return filled("ones_like", like.shape(), 1, like.dtype(), like.device(), loc); }
Tensor scalar_tensor(Scalar value, DType dtype, Loc loc) { return filled("scalar_tensor", {}, value, dtype, kCPU, loc); }

Tensor arange(int64_t end, Loc loc) { return arange(0, static_cast<double>(end), 1, DType::Int64, kCPU, loc); }

Tensor arange(double start, double end, double step, DType dtype, Device device, Loc loc) {
  const graph::SourceScope at(loc, "arange"); // nodes made here record the caller's line
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw Error("arange", "needs finite bounds and a non-zero step", loc);
  if ((end - start) * step < 0) throw Error("arange", "step has the wrong sign for the bounds", loc);
  if (dtype == DType::Bool) throw Error("arange", "bool is not a valid dtype", loc);
  if (is_integral(dtype) && std::trunc(step) == 0) // as torch's "step must be nonzero"
    throw Error("arange", "an integer dtype steps by the integer part of step, and " + number_str(step) + "'s is 0", loc);
  detail::check_device("arange", device, loc);
  const auto n = graph::arange_length(start, end, step);
  if (!n)
    throw Error("arange", "[" + number_str(start) + ", " + number_str(end) + ") in steps of " + number_str(step) +
                              " has more than 2^48 elements", loc);
  graph::Attrs a;
  if (is_floating(dtype)) {
    a.f0 = start;
    a.f1 = step;
  } else if (*n > 0) {
    check_integer_arange(start, step, *n, dtype, loc);
    a.i0 = static_cast<int64_t>(start);
    a.i1 = *n > 1 ? static_cast<int64_t>(step) : 1;
  }
  return Tensor(graph::make_node(OpKind::Arange, dtype, {*n}, {}, a, device));
}

static Tensor random_tensor(OpKind op, IntList shape, uint64_t seed, DType dtype, Device device, const Loc& loc) {
  const graph::SourceScope at(loc, graph::op_name(op)); // nodes made here record the caller's line
  const std::string name(graph::op_name(op));
  check_shape(name, shape, loc);
  if (!is_floating(dtype)) throw Error(name, "needs a floating dtype, not " + std::string(dtype_name(dtype)), loc);
  detail::check_device(name, device, loc);
  graph::Attrs a;
  a.i0 = static_cast<int64_t>(seed);
  return Tensor(graph::make_node(op, dtype, shape, {}, a, device));
}
Tensor rand(IntList shape, uint64_t seed, DType dtype, Device device, Loc loc) {
  const graph::SourceScope at(loc, "rand"); // nodes made here record the caller's line
  return random_tensor(OpKind::Rand, shape, seed, dtype, device, loc);
}
Tensor randn(IntList shape, uint64_t seed, DType dtype, Device device, Loc loc) {
  const graph::SourceScope at(loc, "randn"); // nodes made here record the caller's line
  return random_tensor(OpKind::Randn, shape, seed, dtype, device, loc);
}

template <class T> Tensor from_vector(const std::vector<T>& data) {
  return from_vector(data, {static_cast<int64_t>(data.size())});
}

template <class T> Tensor from_vector(const std::vector<T>& data, IntList shape, Loc loc) {
  check_shape("from_vector", shape, loc);
  if (graph::numel(shape) != static_cast<int64_t>(data.size()))
    throw Error("from_vector", std::to_string(data.size()) + " values do not fill shape " + graph::shape_str(shape), loc);
  constexpr DType dt = dtype_of<T>();
  return Tensor(graph::make_input(dt, shape, copy_to_storage(data, dt, shape, loc)));
}
template Tensor from_vector<float>(const std::vector<float>&);
template Tensor from_vector<float>(const std::vector<float>&, IntList, Loc);
template Tensor from_vector<double>(const std::vector<double>&);
template Tensor from_vector<double>(const std::vector<double>&, IntList, Loc);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, IntList, Loc);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, IntList, Loc);
template Tensor from_vector<bool>(const std::vector<bool>&);
template Tensor from_vector<bool>(const std::vector<bool>&, IntList, Loc);

Tensor wrap_scalar(Scalar s, const Tensor& other, Loc loc) {
  const graph::SourceScope at(loc); // nodes made here record the caller's line
  Tensor t(b::constant_of(s, s.kind(), {}, other.defined() ? other.device() : kCPU));
  t.impl()->wrapped_number = true;
  return t;
}

// ---------------------------------------------------------------- elementwise

Tensor neg(const Tensor& x, Loc loc) { return numeric_unary(OpKind::Neg, x, loc); }
Tensor abs(const Tensor& x, Loc loc) { return numeric_unary(OpKind::Abs, x, loc); }
Tensor relu(const Tensor& x, Loc loc) { return numeric_unary(OpKind::Relu, x, loc); }
Tensor exp(const Tensor& x, Loc loc) { return float_unary(OpKind::Exp, x, loc); }
Tensor log(const Tensor& x, Loc loc) { return float_unary(OpKind::Log, x, loc); }
Tensor expm1(const Tensor& x, Loc loc) { return float_unary(OpKind::Expm1, x, loc); }
Tensor log1p(const Tensor& x, Loc loc) { return float_unary(OpKind::Log1p, x, loc); }
Tensor sqrt(const Tensor& x, Loc loc) { return float_unary(OpKind::Sqrt, x, loc); }
Tensor rsqrt(const Tensor& x, Loc loc) { return float_unary(OpKind::Rsqrt, x, loc); }
Tensor sin(const Tensor& x, Loc loc) { return float_unary(OpKind::Sin, x, loc); }
Tensor cos(const Tensor& x, Loc loc) { return float_unary(OpKind::Cos, x, loc); }
Tensor tanh(const Tensor& x, Loc loc) { return float_unary(OpKind::Tanh, x, loc); }
Tensor sigmoid(const Tensor& x, Loc loc) { return float_unary(OpKind::Sigmoid, x, loc); }
Tensor erf(const Tensor& x, Loc loc) { return float_unary(OpKind::Erf, x, loc); }
Tensor reciprocal(const Tensor& x, Loc loc) { return float_unary(OpKind::Reciprocal, x, loc); }
Tensor tan(const Tensor& x, Loc loc) { return float_unary(OpKind::Tan, x, loc); }
Tensor atan(const Tensor& x, Loc loc) { return float_unary(OpKind::Atan, x, loc); }
Tensor asin(const Tensor& x, Loc loc) { return float_unary(OpKind::Asin, x, loc); }
Tensor acos(const Tensor& x, Loc loc) { return float_unary(OpKind::Acos, x, loc); }
Tensor sinh(const Tensor& x, Loc loc) { return float_unary(OpKind::Sinh, x, loc); }
Tensor cosh(const Tensor& x, Loc loc) { return float_unary(OpKind::Cosh, x, loc); }
Tensor asinh(const Tensor& x, Loc loc) { return float_unary(OpKind::Asinh, x, loc); }
Tensor acosh(const Tensor& x, Loc loc) { return float_unary(OpKind::Acosh, x, loc); }
Tensor atanh(const Tensor& x, Loc loc) { return float_unary(OpKind::Atanh, x, loc); }
Tensor log2(const Tensor& x, Loc loc) { return float_unary(OpKind::Log2, x, loc); }
Tensor log10(const Tensor& x, Loc loc) { return float_unary(OpKind::Log10, x, loc); }
Tensor exp2(const Tensor& x, Loc loc) { return float_unary(OpKind::Exp2, x, loc); }

namespace {
// floor, ceil, round: integers are already integral and come back unchanged, as in PyTorch.
Tensor integral_rounding(OpKind op, const Tensor& x, const Loc& loc) {
  if (x.defined() && is_integral(x.dtype())) return x;
  return numeric_unary(op, x, loc);
}
} // namespace

Tensor floor(const Tensor& x, Loc loc) { return integral_rounding(OpKind::Floor, x, loc); }
Tensor ceil(const Tensor& x, Loc loc) { return integral_rounding(OpKind::Ceil, x, loc); }
Tensor round(const Tensor& x, Loc loc) { return integral_rounding(OpKind::Round, x, loc); }
Tensor trunc(const Tensor& x, Loc loc) { return integral_rounding(OpKind::Trunc, x, loc); }
Tensor frac(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "frac"); // nodes made here record the caller's line
  if (x.defined() && !is_floating(x.dtype())) fail("frac", "needs a floating dtype", {&x}, loc);
  return sub(x, trunc(x, loc), loc); // exact: x and trunc(x) share x's binade or trunc(x) = 0
}
Tensor square(const Tensor& x, Loc loc) { return mul(x, x, loc); }
Tensor logical_not(const Tensor& x, Loc loc) { return Tensor(b::unary(OpKind::LogicalNot, x.node())); }

Tensor add(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Add, a, c, loc); }
Tensor sub(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Sub, a, c, loc); }
Tensor mul(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Mul, a, c, loc); }
Tensor div(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Div, a, c, loc); }
Tensor pow(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Pow, a, c, loc); }
Tensor atan2(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Atan2, a, c, loc); }
Tensor fmod(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Fmod, a, c, loc); }
Tensor remainder(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Remainder, a, c, loc); }
Tensor fmod(const Tensor& a, Scalar c, Loc loc) { return fmod(a, wrap_scalar(c, a, loc), loc); }
Tensor remainder(const Tensor& a, Scalar c, Loc loc) { return remainder(a, wrap_scalar(c, a, loc), loc); }
Tensor maximum(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Maximum, a, c, loc); }
Tensor minimum(const Tensor& a, const Tensor& c, Loc loc) { return arithmetic(OpKind::Minimum, a, c, loc); }
Tensor eq(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::Eq, a, c, loc); }
Tensor ne(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::Ne, a, c, loc); }
Tensor lt(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::Lt, a, c, loc); }
Tensor le(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::Le, a, c, loc); }
Tensor gt(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::Gt, a, c, loc); }
Tensor ge(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::Ge, a, c, loc); }
Tensor logical_and(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::LogicalAnd, a, c, loc); }
Tensor logical_or(const Tensor& a, const Tensor& c, Loc loc) { return comparison(OpKind::LogicalOr, a, c, loc); }

Tensor pow(const Tensor& a, Scalar e, Loc loc) {
  const graph::SourceScope at(loc, "pow"); // nodes made here record the caller's line
  if (!is_floating(a.dtype()) && e.kind() != DType::Float64 && e.to_int() < 0)
    fail("pow", "integers to negative integer powers are not allowed", {&a}, loc);
  // As PyTorch's kernel for a number exponent: x^0.5 is sqrt(x) and x^-0.5 is rsqrt(x), so -inf gives
  // NaN and -0 gives -0 and -inf (C's pow: inf, 0 and inf). A tensor exponent stays C's pow, as PyTorch's.
  if (e.kind() == DType::Float64 && e.to_double() == 0.5) return sqrt(a, loc);
  if (e.kind() == DType::Float64 && e.to_double() == -0.5) return rsqrt(a, loc);
  return pow(a, wrap_scalar(e, a, loc), loc);
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& c, Loc loc) {
  const graph::SourceScope at(loc, "where"); // nodes made here record the caller's line
  if (cond.dtype() != DType::Bool) fail("where", "the condition must be bool", {&cond, &a, &c}, loc);
  const DType dt = result_type({&a, &c});
  const graph::Shape shape = broadcast_or_fail("where", {&cond, &a, &c}, loc);
  const Device dev = detail::common_device("where", {&cond, &a, &c}, loc);
  return result(b::where(prepare(cond, DType::Bool, shape, dev), prepare(a, dt, shape, dev), prepare(c, dt, shape, dev)),
                {&a, &c});
}

Tensor where(const Tensor& cond, const Tensor& a, Scalar c, Loc loc) { return where(cond, a, wrap_scalar(c, a, loc), loc); }

Tensor sign(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "sign"); // nodes made here record the caller's line
  if (x.dtype() == DType::Bool) return x;
  const Tensor one = full({}, 1, x.dtype(), x.device(), loc), zero = zeros({}, x.dtype(), x.device(), loc);
  // The zero branch reads x (x * 0 + 0 is +0 for +-0), so that the gradient is a defined zero as
  // in PyTorch rather than "unused"; NaN takes the constant 0 branch, as PyTorch's sign.
  const Tensor zeros_of_x = where(x == 0, x * 0 + 0, zero, loc);
  return where(x > 0, one, where(x < 0, -one, zeros_of_x, loc), loc);
}

namespace {
// The dtype PyTorch clamps a bool x in: its result type with the bounds (int64 for an integer bound,
// the default float for a floating one); bool bounds alone are refused, as PyTorch's.
DType bool_clamp_dtype(const Tensor& x, const std::optional<Scalar>& min, const std::optional<Scalar>& max,
                       const Loc& loc) {
  DType to = DType::Bool;
  for (const std::optional<Scalar>& bound : {min, max})
    if (bound && bound->kind() != DType::Bool) to = promote_types(to, bound->kind() == DType::Float64 ? kDefaultFloat : DType::Int64);
  if (to == DType::Bool) fail("clamp", "not defined for a bool tensor with bool bounds", {&x}, loc);
  return to;
}
} // namespace

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max, Loc loc) {
  const graph::SourceScope at(loc, "clamp"); // nodes made here record the caller's line
  if (!min && !max) fail("clamp", "needs at least one of min and max", {&x}, loc);
  if (x.dtype() == DType::Bool) return clamp(cast(x, bool_clamp_dtype(x, min, max, loc), loc), min, max, loc);
  // An integer x takes an integer bound in its own dtype, which the bound must fit.
  for (const std::optional<Scalar>& bound : {min, max})
    if (bound && bound->kind() != DType::Float64) check_fits("clamp", *bound, x.dtype(), {&x}, loc);
  auto is_nan = [](const std::optional<Scalar>& v) { return v && v->kind() == DType::Float64 && std::isnan(v->to_double()); };
  if (is_nan(min) || is_nan(max)) // a NaN bound makes every element NaN (gradient 0), as PyTorch's clamp of two bounds
    return x * 0 + std::numeric_limits<double>::quiet_NaN();
  // Selects, not maximum/minimum: x keeps its gradient of 1 on the bounds. NaN compares false and
  // stays NaN, with gradient 0 (PyTorch's: 1 only where min <= x <= max).
  Tensor y = x;
  if (min) y = where(lt(y, wrap_scalar(*min, y), loc), wrap_scalar(*min, y), y, loc);
  if (max) y = where(gt(y, wrap_scalar(*max, y), loc), wrap_scalar(*max, y), y, loc);
  if (is_floating(y.dtype())) y = where(ne(x, x, loc), wrap_scalar(std::numeric_limits<double>::quiet_NaN(), y), y, loc);
  return y;
}

Tensor cast(const Tensor& x, DType dtype, Loc loc) {
  const graph::SourceScope at(loc, "cast"); // nodes made here record the caller's line
  if (x.dtype() == dtype) return x;
  return result(b::cast(x.node(), dtype), is_floating(dtype) ? std::initializer_list<const Tensor*>{&x}
                                                              : std::initializer_list<const Tensor*>{});
}

// ---------------------------------------------------------------- reductions

Tensor sum(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  const graph::SourceScope at(loc, "sum"); // nodes made here record the caller's line
  const DType dt = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  return reduction(OpKind::Sum, x, dims, keepdim, dt, loc);
}

Tensor mean(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  const graph::SourceScope at(loc, "mean"); // nodes made here record the caller's line
  if (!is_floating(x.dtype())) fail("mean", "needs a floating dtype (cast the input first)", {&x}, loc);
  const int64_t n = reduced_count(x, dims_or_fail("mean", dims, x, loc));
  Tensor s = sum(x, dims, keepdim, loc);
  return result(b::div(s.node(), b::constant_like(s.node(), static_cast<double>(n))), {&s});
}

Tensor max(const Tensor& x, IntList dims, bool keepdim, Loc loc) { return min_max(OpKind::Max, x, dims, keepdim, loc); }
Tensor min(const Tensor& x, IntList dims, bool keepdim, Loc loc) { return min_max(OpKind::Min, x, dims, keepdim, loc); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim, Loc loc) { return arg_reduction(OpKind::Argmax, x, dim, keepdim, loc); }
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim, Loc loc) { return arg_reduction(OpKind::Argmin, x, dim, keepdim, loc); }

Tensor logsumexp(const Tensor& x, IntList dims, bool keepdim, Loc loc) {
  const graph::SourceScope at(loc, "logsumexp"); // nodes made here record the caller's line
  if (x.dtype() == DType::Bool) fail("logsumexp", "not defined for bool tensors", {&x}, loc);
  const Tensor xf = is_floating(x.dtype()) ? x : cast(x, kDefaultFloat, loc);
  const auto ds = dims_or_fail("logsumexp", dims, xf, loc);
  if (reduced_count(xf, ds) == 0) return log(exp(xf, loc).sum(dims, keepdim, loc), loc); // log(0) = -inf
  // The shift does not change the value, so it needs no gradient; an infinite max shifts by 0,
  // so that a row of -inf gives log(0) = -inf and a +inf gives +inf, not NaN.
  Tensor m = xf.max(dims, true, loc).detach();
  m = where(abs(m, loc) == std::numeric_limits<double>::infinity(), zeros({}, m.dtype(), m.device(), loc), m, loc);
  Tensor r = log(exp(xf - m, loc).sum(dims, true, loc), loc) + m;
  return keepdim ? r : reshape(r, drop_dims(xf.shape(), ds), loc);
}

namespace {

// var and std: the squared deviations from the mean over dims, summed and divided by max(0, n - c)
// for a correction c (unbiased: 1), as PyTorch 1.13; a zero divisor gives inf (0 / 0 = NaN for a
// constant row), and PyTorch's gradient 2 (x - mean) / (n - c) even where n - c < 0.
Tensor variance(const char* op, const Tensor& x, const IntList& dims, int64_t correction, bool keepdim,
                const Loc& loc) {
  const graph::SourceScope at(loc, op); // nodes made here record the caller's line
  if (!x.defined()) throw Error(op, "the input is undefined", loc);
  if (!is_floating(x.dtype())) fail(op, "needs a floating dtype (cast the input first)", {&x}, loc);
  const int64_t n = reduced_count(x, dims_or_fail(op, dims, x, loc));
  const double divisor = static_cast<double>(n) - static_cast<double>(correction);
  const Tensor m = mean(x, dims, true, loc);
  if (divisor > 0) {
    const Tensor xc = x - m;
    return sum(xc * xc, dims, keepdim, loc) / divisor;
  }
  // n <= c: the value divides by max(0, n - c) = 0; the gradient is PyTorch's 2 (x - mean) / (n - c)
  // without the mean's part (0, but inf * 0 = NaN at n = c), and divides by n - c, not 0, for n < c.
  const Tensor xc = x - m.detach();
  const Tensor squares = sum(xc * xc, dims, keepdim, loc);
  if (divisor == 0) return squares / 0.0;
  const Tensor q = squares / divisor;
  return (squares / 0.0).detach() + (q - q.detach());
}

// The square root of a variance `v`. PyTorch's std backward divides by 2 * std and masks the result
// where std is 0: a selected sqrt of 1 there keeps the 0 * inf of sqrt's derivative at 0 out of it.
Tensor root_of_variance(const Tensor& v, const Loc& loc) {
  const Tensor nonzero = ne(v, wrap_scalar(0, v, loc), loc);
  return where(nonzero, sqrt(where(nonzero, v, 1, loc), loc), 0, loc);
}

} // namespace

Tensor var(const Tensor& x, IntList dims, bool unbiased, bool keepdim, Loc loc) {
  return variance("var", x, dims, unbiased ? 1 : 0, keepdim, loc);
}

Tensor std(const Tensor& x, IntList dims, bool unbiased, bool keepdim, Loc loc) {
  const graph::SourceScope at(loc, "std"); // nodes made here record the caller's line
  return root_of_variance(variance("std", x, dims, unbiased ? 1 : 0, keepdim, loc), loc);
}

Tensor Tensor::var_corrected(IntList dims, int64_t correction, bool keepdim, bool root, Loc loc) const {
  const graph::SourceScope at(loc, root ? "std" : "var"); // nodes made here record the caller's line
  const Tensor v = variance(root ? "std" : "var", *this, dims, correction, keepdim, loc);
  return root ? root_of_variance(v, loc) : v;
}

// ---------------------------------------------------------------- movement

Tensor reshape(const Tensor& x, IntList shape, Loc loc) {
  const graph::SourceScope at(loc, "reshape"); // nodes made here record the caller's line
  return result(b::reshape(x.node(), infer_shape(x, shape, loc)), {&x});
}

Tensor permute(const Tensor& x, IntList dims, Loc loc) {
  const graph::SourceScope at(loc, "permute"); // nodes made here record the caller's line
  if (static_cast<int64_t>(dims.size()) != x.dim())
    fail("permute", "needs " + std::to_string(x.dim()) + " dims, got " + graph::shape_str(dims), {&x}, loc);
  std::vector<int64_t> perm;
  for (int64_t d : dims) {
    const int64_t w = dim_or_fail("permute", d, x, loc);
    if (std::find(perm.begin(), perm.end(), w) != perm.end()) fail("permute", "dim " + std::to_string(d) + " repeats", {&x}, loc);
    perm.push_back(w);
  }
  return result(b::permute(x.node(), perm), {&x});
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, Loc loc) {
  const graph::SourceScope at(loc, "transpose"); // nodes made here record the caller's line
  if (x.dim() == 0) return x;
  std::vector<int64_t> perm(x.dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[dim_or_fail("transpose", d0, x, loc)], perm[dim_or_fail("transpose", d1, x, loc)]);
  return result(b::permute(x.node(), perm), {&x});
}

Tensor expand(const Tensor& x, IntList shape, Loc loc) {
  const graph::SourceScope at(loc, "expand"); // nodes made here record the caller's line
  if (shape.size() < static_cast<size_t>(x.dim()))
    fail("expand", "target " + graph::shape_str(shape) + " has fewer dims than the tensor", {&x}, loc);
  const size_t lead = shape.size() - x.dim();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d >= lead && shape[d] == -1) shape[d] = x.shape()[d - lead];
    const int64_t have = d < lead ? 1 : x.shape()[d - lead];
    if (shape[d] < 0 || (have != 1 && have != shape[d]))
      fail("expand", "cannot expand to " + graph::shape_str(shape) + " (dim " + std::to_string(d) + ")", {&x}, loc);
  }
  check_shape("expand", shape, loc);
  return result(b::broadcast_to(x.node(), shape), {&x});
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step, Loc loc) {
  const graph::SourceScope at(loc, "slice"); // nodes made here record the caller's line
  if (step <= 0) fail("slice", "step must be positive, got " + std::to_string(step), {&x}, loc);
  const int64_t d = dim_or_fail("slice", dim, x, loc);
  if (d < 0) fail("slice", "cannot slice a 0-d tensor", {&x}, loc);
  const int64_t n = x.shape()[d];
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  std::vector<int64_t> starts(x.dim(), 0), steps(x.dim(), 1);
  starts[d] = start;
  steps[d] = step;
  graph::Shape shape = x.shape();
  shape[d] = graph::slice_extent(start, end, step);
  if (shape[d] == 0) starts[d] = 0;
  if (shape[d] <= 1) steps[d] = 1; // the step of at most one element is moot: no stride of it can overflow
  return result(b::slice(x.node(), starts, steps, shape), {&x});
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "concat"); // nodes made here record the caller's line
  if (xs.empty()) throw Error("concat", "needs at least one tensor", loc);
  const int64_t d = dim_or_fail("concat", dim, xs[0], loc);
  if (d < 0) fail("concat", "cannot concatenate 0-d tensors", {&xs[0]}, loc);
  DType dt = xs[0].dtype();
  for (const Tensor& t : xs) dt = promote_types(dt, t.dtype());
  const Device dev = detail::common_device("concat", xs, loc);
  std::vector<NodeRef> nodes;
  std::optional<int64_t> extent = 0;
  for (const Tensor& t : xs) {
    bool same = t.dim() == xs[0].dim();
    for (int64_t k = 0; same && k < t.dim(); ++k) same = k == d || t.shape()[k] == xs[0].shape()[k];
    if (!same) fail("concat", "shapes must match except in dim " + std::to_string(d), {&xs[0], &t}, loc);
    nodes.push_back(b::cast(b::leaf_on(t.node(), dev), dt));
    extent = extent ? graph::checked_add(*extent, t.shape()[d]) : std::nullopt;
  }
  graph::Shape shape = xs[0].shape();
  shape[d] = extent.value_or(std::numeric_limits<int64_t>::max());
  if (const std::string err = graph::shape_error(shape); !err.empty())
    fail("concat", "the result " + (extent ? err : "extent in dim " + std::to_string(d) + " overflows int64"),
         {&xs[0], &xs.back()}, loc);
  return detail::result_of(b::concat(nodes, d), xs);
}

// ---------------------------------------------------------------- pieces and joins

namespace {

// The pieces of `sizes` (which add up to the extent) along the wrapped dim d.
std::vector<Tensor> pieces(const Tensor& x, int64_t d, const IntList& sizes, const Loc& loc) {
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t n : sizes) {
    out.push_back(slice(x, d, start, start + n, 1, loc));
    start += n;
  }
  return out;
}

// The dim of a splitting op, which needs a tensor of rank >= 1.
int64_t split_dim(const std::string& op, const Tensor& x, int64_t dim, const Loc& loc) {
  const int64_t d = dim_or_fail(op, dim, x, loc);
  if (d < 0) fail(op, "cannot split a 0-d tensor", {&x}, loc);
  return d;
}

} // namespace

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length, Loc loc) {
  const graph::SourceScope at(loc, "narrow"); // nodes made here record the caller's line
  const int64_t d = split_dim("narrow", x, dim, loc);
  const int64_t n = x.shape()[d];
  if (start < -n || start > n)
    fail("narrow", "start " + std::to_string(start) + " is out of range for dim " + std::to_string(dim) +
                       " of extent " + std::to_string(n), {&x}, loc);
  if (start < 0) start += n;
  if (length < 0 || length > n - start)
    fail("narrow", "start " + std::to_string(start) + " + length " + std::to_string(length) +
                       " exceeds the extent " + std::to_string(n) + " of dim " + std::to_string(dim), {&x}, loc);
  return slice(x, d, start, start + length, 1, loc);
}

Tensor detail::unfold_at(const Tensor& x, int64_t dim, int64_t size, int64_t step, int64_t at, Loc loc) {
  const graph::SourceScope here(loc, "unfold"); // nodes made here record the caller's line
  if (step <= 0) fail("unfold", "step must be positive, got " + std::to_string(step), {&x}, loc);
  const int64_t d = split_dim("unfold", x, dim, loc);
  const int64_t n = x.shape()[d];
  if (size < 0 || size > n)
    fail("unfold", "the window size " + std::to_string(size) + " must be in [0, " + std::to_string(n) +
                       "], the extent of dim " + std::to_string(dim), {&x}, loc);
  KILN_ASSERT(at >= 0 && at <= x.dim(), "unfold's window dim position");
  return result(b::unfold(x.node(), d, size, step, at), {&x});
}

Tensor unfold(const Tensor& x, int64_t dim, int64_t size, int64_t step, Loc loc) {
  return detail::unfold_at(x, dim, size, step, x.dim(), loc);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "chunk"); // nodes made here record the caller's line
  if (chunks <= 0) fail("chunk", "chunks must be positive, got " + std::to_string(chunks), {&x}, loc);
  const int64_t d = split_dim("chunk", x, dim, loc);
  const int64_t n = x.shape()[d];
  if (n == 0) return pieces(x, d, IntList(static_cast<size_t>(chunks), 0), loc);
  return detail::split_by_size(x, n / chunks + (n % chunks != 0), d, loc);
}

std::vector<Tensor> detail::split_by_size(const Tensor& x, int64_t split_size, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "split"); // nodes made here record the caller's line
  const int64_t d = split_dim("split", x, dim, loc);
  const int64_t n = x.shape()[d];
  if (split_size < 0 || (split_size == 0 && n != 0))
    fail("split", "split_size " + std::to_string(split_size) + " does not fit dim " + std::to_string(dim) +
                      " of extent " + std::to_string(n) + " (it must be positive, or 0 for an empty dim)", {&x}, loc);
  if (n == 0) return {x};
  IntList sizes(static_cast<size_t>(n / split_size), split_size);
  if (n % split_size != 0) sizes.push_back(n % split_size);
  return pieces(x, d, sizes, loc);
}

std::vector<Tensor> split(const Tensor& x, const IntList& split_sizes, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "split"); // nodes made here record the caller's line
  const int64_t d = split_dim("split", x, dim, loc);
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    if (s < 0) fail("split", "split sizes must be non-negative, got " + graph::shape_str(split_sizes), {&x}, loc);
    total = graph::checked_add(total, s).value_or(-1);
    if (total < 0) break;
  }
  if (total != x.shape()[d])
    fail("split", "split sizes " + graph::shape_str(split_sizes) + " do not add up to the extent " +
                      std::to_string(x.shape()[d]) + " of dim " + std::to_string(dim), {&x}, loc);
  return pieces(x, d, split_sizes, loc);
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "unbind"); // nodes made here record the caller's line
  const int64_t d = dim_or_fail("unbind", dim, x, loc);
  if (d < 0) fail("unbind", "cannot unbind a 0-d tensor", {&x}, loc);
  const graph::Shape rest = drop_dims(x.shape(), {d});
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.shape()[d]; ++i) out.push_back(reshape(slice(x, d, i, i + 1, 1, loc), rest, loc));
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "stack"); // nodes made here record the caller's line
  if (xs.empty()) throw Error("stack", "needs at least one tensor", loc);
  const auto d = graph::wrap_dim(dim, xs[0].dim() + 1);
  if (!d) fail("stack", "dim " + std::to_string(dim) + " is out of range for rank " + std::to_string(xs[0].dim()) + " + 1", {&xs[0]}, loc);
  std::vector<Tensor> parts;
  for (const Tensor& t : xs) {
    if (t.shape() != xs[0].shape()) fail("stack", "every tensor must have the same shape", {&xs[0], &t}, loc);
    parts.push_back(unsqueeze(t, *d, loc));
  }
  return concat(parts, *d, loc);
}

Tensor unsqueeze(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "unsqueeze"); // nodes made here record the caller's line
  auto w = graph::wrap_dim(dim, x.dim() + 1);
  if (!w) fail("unsqueeze", "dim " + std::to_string(dim) + " is out of range for rank " + std::to_string(x.dim()) + " + 1", {&x}, loc);
  IntList s = x.shape();
  s.insert(s.begin() + *w, 1);
  return reshape(x, s, loc);
}

Tensor squeeze(const Tensor& x, int64_t dim, Loc loc) {
  const graph::SourceScope at(loc, "squeeze"); // nodes made here record the caller's line
  const int64_t w = dim_or_fail("squeeze", dim, x, loc);
  if (w < 0 || x.shape()[w] != 1) return x;
  IntList s = x.shape();
  s.erase(s.begin() + w);
  return reshape(x, s, loc);
}

Tensor squeeze(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc, "squeeze"); // nodes made here record the caller's line
  IntList s;
  for (int64_t e : x.shape())
    if (e != 1) s.push_back(e);
  return s.size() == x.shape().size() ? x : reshape(x, s, loc);
}

// ---------------------------------------------------------------- masks

namespace {

// Keeps the elements of the last two dims whose col - row compares with `diagonal` by `keep`
// (a mask built from two aranges, broadcast over the leading dims); the others become 0.
template <class Keep> Tensor triangle(const char* op, const Tensor& x, Keep keep, const Loc& loc) {
  if (x.dim() < 2) fail(op, "needs a tensor of at least 2 dims", {&x}, loc);
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  const Tensor r = arange(0, static_cast<double>(rows), 1, kInt64, x.device(), loc).reshape({rows, 1}, loc);
  const Tensor c = arange(0, static_cast<double>(cols), 1, kInt64, x.device(), loc);
  return where(keep(c - r), x, zeros({}, x.dtype(), x.device(), loc), loc);
}

} // namespace

Tensor tril(const Tensor& x, int64_t diagonal, Loc loc) {
  const graph::SourceScope at(loc, "tril"); // nodes made here record the caller's line
  return triangle("tril", x, [&](const Tensor& offset) { return le(offset, wrap_scalar(diagonal, offset), loc); }, loc);
}

Tensor triu(const Tensor& x, int64_t diagonal, Loc loc) {
  const graph::SourceScope at(loc, "triu"); // nodes made here record the caller's line
  return triangle("triu", x, [&](const Tensor& offset) { return ge(offset, wrap_scalar(diagonal, offset), loc); }, loc);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value, Loc loc) {
  const graph::SourceScope at(loc, "masked_fill"); // nodes made here record the caller's line
  if (!mask.defined() || mask.dtype() != DType::Bool) fail("masked_fill", "the mask must be a bool tensor", {&x, &mask}, loc);
  (void)broadcast_or_fail("masked_fill", {&x, &mask}, loc);
  check_fits("masked_fill", value, x.dtype(), {&x, &mask}, loc);
  // A 0-d tensor of x's dtype (not a wrapped number) keeps x's dtype, as PyTorch's masked_fill.
  return where(mask, full({}, value, x.dtype(), x.device(), loc), x, loc);
}

Tensor pad(const Tensor& x, IntList pads, Scalar value, Loc loc) {
  const graph::SourceScope at(loc, "pad"); // nodes made here record the caller's line
  if (pads.size() % 2 != 0 || static_cast<int64_t>(pads.size()) > 2 * x.dim())
    fail("pad", "needs (before, after) pairs for at most every dim, got " + graph::shape_str(pads), {&x}, loc);
  check_fits("pad", value, x.dtype(), {&x}, loc);
  // Negative amounts crop first, as torch.nn.functional.pad (constant_pad_nd narrows, then pads): a
  // slice, whose gradient is the pad; the crops of a dim may not add up past its extent.
  Tensor y = x;
  std::vector<int64_t> before(x.dim(), 0), after(x.dim(), 0);
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(k), n = x.shape()[static_cast<size_t>(d)];
    const int64_t b = pads[2 * k], e = pads[2 * k + 1];
    const int64_t cut_b = b < 0 ? (b < -n ? n + 1 : -b) : 0;                  // n + 1: too many, whatever e is
    const int64_t cut_e = e < 0 ? (e < -(n - std::min(cut_b, n)) ? n + 1 : -e) : 0;
    if (cut_b + cut_e > n)
      fail("pad", "negative padding (" + std::to_string(b) + ", " + std::to_string(e) + ") of dim " + std::to_string(d) +
                      " crops more than its extent " + std::to_string(n),
           {&x}, loc);
    if (cut_b > 0 || cut_e > 0) y = y.slice(d, cut_b, n - cut_e, 1, loc);
    before[static_cast<size_t>(d)] = std::max<int64_t>(b, 0);
    after[static_cast<size_t>(d)] = std::max<int64_t>(e, 0);
  }
  graph::Shape shape = y.shape();
  for (size_t d = 0; d < shape.size(); ++d) {
    const auto ext = graph::padded_extent(shape[d], before[d], after[d]);
    if (!ext) fail("pad", "padding " + graph::shape_str(pads) + " overflows the extent of dim " + std::to_string(d), {&x}, loc);
    shape[d] = *ext;
  }
  detail::check_shape("pad", shape, {&x}, loc);
  return result(b::pad(y.node(), before, after, value), {&y});
}

Tensor matmul(const Tensor& a, const Tensor& c, Loc loc) {
  const graph::SourceScope at(loc, "matmul"); // nodes made here record the caller's line
  if (a.dim() == 0 || c.dim() == 0) fail("matmul", "both operands need at least 1 dim", {&a, &c}, loc);
  const DType dt = promote_types(a.dtype(), c.dtype());
  if (dt == DType::Bool) fail("matmul", "not defined for bool tensors", {&a, &c}, loc);
  const Device dev = detail::common_device("matmul", {&a, &c}, loc);
  NodeRef x = b::cast(b::leaf_on(a.node(), dev), dt), y = b::cast(b::leaf_on(c.node(), dev), dt);
  if (a.dim() == 1) x = b::reshape(x, {1, a.shape()[0]});
  if (c.dim() == 1) y = b::reshape(y, {c.shape()[0], 1});
  const int64_t k = x->shape.back(), k2 = y->shape[y->shape.size() - 2];
  if (k != k2) fail("matmul", "inner dims differ (" + std::to_string(k) + " vs " + std::to_string(k2) + ")", {&a, &c}, loc);
  const graph::Shape bx(x->shape.begin(), x->shape.end() - 2), by(y->shape.begin(), y->shape.end() - 2);
  auto batch = graph::broadcast_shapes(bx, by);
  if (!batch) fail("matmul", "batch dims cannot be broadcast", {&a, &c}, loc);
  graph::Shape sx = *batch, sy = *batch, sr = *batch;
  sx.insert(sx.end(), x->shape.end() - 2, x->shape.end());
  sy.insert(sy.end(), y->shape.end() - 2, y->shape.end());
  sr.insert(sr.end(), {x->shape[x->shape.size() - 2], y->shape.back()});
  for (const graph::Shape* s : {&sx, &sy, &sr}) detail::check_shape("matmul", *s, {&a, &c}, loc);
  NodeRef r = b::matmul(b::broadcast_to(x, sx), b::broadcast_to(y, sy));
  graph::Shape out = *batch;
  if (a.dim() > 1) out.push_back(x->shape[x->shape.size() - 2]);
  if (c.dim() > 1) out.push_back(y->shape.back());
  return result(b::reshape(r, out), {&a, &c});
}

// ---------------------------------------------------------------- methods

Tensor Tensor::reshape(IntList s, Loc loc) const { return kiln::reshape(*this, std::move(s), loc); }
Tensor Tensor::view(IntList s, Loc loc) const { return kiln::reshape(*this, std::move(s), loc); }
Tensor Tensor::flatten(int64_t start, int64_t end, Loc loc) const {
  if (dim() == 0) return kiln::reshape(*this, {1}, loc);
  const int64_t s = dim_or_fail("flatten", start, *this, loc), e = dim_or_fail("flatten", end, *this, loc);
  if (s > e) fail("flatten", "start dim is after end dim", {this}, loc);
  IntList out(shape().begin(), shape().begin() + s);
  out.push_back(graph::numel(IntList(shape().begin() + s, shape().begin() + e + 1)));
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return kiln::reshape(*this, out, loc);
}
Tensor Tensor::unflatten(int64_t dim, IntList sizes, Loc loc) const {
  const graph::SourceScope at(loc, "unflatten"); // nodes made here record the caller's line
  if (this->dim() == 0) fail("unflatten", "a 0-d tensor has no dim to unflatten", {this}, loc);
  const int64_t d = dim_or_fail("unflatten", dim, *this, loc), n = size(d);
  if (sizes.empty()) fail("unflatten", "sizes must be non-empty", {this}, loc);
  int64_t known = 1, inferred = 0;
  for (int64_t s : sizes) {
    if (s < -1) fail("unflatten", "sizes can not be negative, got " + graph::shape_str(sizes), {this}, loc);
    if (s == -1) ++inferred;
    else if (__builtin_mul_overflow(known, s, &known)) known = -1; // past any extent: the check below fails
  }
  if (inferred > 1) fail("unflatten", "only one size can be -1, got " + graph::shape_str(sizes), {this}, loc);
  if (inferred ? known <= 0 || n % known != 0 : known != n)
    fail("unflatten",
         "provided sizes " + graph::shape_str(sizes) + " don't multiply up to the size of dim " + std::to_string(d) +
             " (" + std::to_string(n) + ")",
         {this}, loc);
  for (int64_t& s : sizes)
    if (s == -1) s = n / known;
  IntList out(shape().begin(), shape().begin() + d);
  out.insert(out.end(), sizes.begin(), sizes.end());
  out.insert(out.end(), shape().begin() + d + 1, shape().end());
  return kiln::reshape(*this, out, loc);
}
Tensor Tensor::permute(IntList d, Loc loc) const { return kiln::permute(*this, std::move(d), loc); }
Tensor Tensor::transpose(int64_t d0, int64_t d1, Loc loc) const { return kiln::transpose(*this, d0, d1, loc); }
Tensor Tensor::t(Loc loc) const {
  if (dim() > 2) fail("t", "expects a tensor of at most 2 dims", {this}, loc);
  return dim() < 2 ? *this : kiln::transpose(*this, 0, 1, loc);
}
Tensor Tensor::expand(IntList s, Loc loc) const { return kiln::expand(*this, std::move(s), loc); }
Tensor Tensor::unsqueeze(int64_t d, Loc loc) const { return kiln::unsqueeze(*this, d, loc); }
Tensor Tensor::squeeze(int64_t d, Loc loc) const { return kiln::squeeze(*this, d, loc); }
Tensor Tensor::squeeze(Loc loc) const { return kiln::squeeze(*this, loc); }
Tensor Tensor::narrow(int64_t d, int64_t s, int64_t n, Loc loc) const { return kiln::narrow(*this, d, s, n, loc); }
std::vector<Tensor> Tensor::chunk(int64_t n, int64_t d, Loc loc) const { return kiln::chunk(*this, n, d, loc); }
std::vector<Tensor> Tensor::split(const IntList& s, int64_t d, Loc loc) const { return kiln::split(*this, s, d, loc); }
std::vector<Tensor> Tensor::unbind(int64_t d, Loc loc) const { return kiln::unbind(*this, d, loc); }
Tensor Tensor::tril(int64_t k, Loc loc) const { return kiln::tril(*this, k, loc); }
Tensor Tensor::triu(int64_t k, Loc loc) const { return kiln::triu(*this, k, loc); }
Tensor Tensor::masked_fill(const Tensor& m, Scalar v, Loc loc) const { return kiln::masked_fill(*this, m, v, loc); }
Tensor Tensor::logsumexp(IntList d, bool k, Loc loc) const { return kiln::logsumexp(*this, std::move(d), k, loc); }
Tensor Tensor::slice(int64_t d, int64_t s, int64_t e, int64_t st, Loc loc) const { return kiln::slice(*this, d, s, e, st, loc); }
Tensor Tensor::unfold(int64_t d, int64_t size, int64_t step, Loc loc) const { return kiln::unfold(*this, d, size, step, loc); }
Tensor Tensor::sum(IntList d, bool k, Loc loc) const { return kiln::sum(*this, std::move(d), k, loc); }
Tensor Tensor::mean(IntList d, bool k, Loc loc) const { return kiln::mean(*this, std::move(d), k, loc); }
Tensor Tensor::max(IntList d, bool k, Loc loc) const { return kiln::max(*this, std::move(d), k, loc); }
Tensor Tensor::min(IntList d, bool k, Loc loc) const { return kiln::min(*this, std::move(d), k, loc); }
Tensor Tensor::argmax(int64_t d, bool k, Loc loc) const { return kiln::argmax(*this, d, k, loc); }
Tensor Tensor::argmin(int64_t d, bool k, Loc loc) const { return kiln::argmin(*this, d, k, loc); }
Tensor Tensor::to(DType dt, Loc loc) const { return kiln::cast(*this, dt, loc); }
Tensor Tensor::matmul(const Tensor& o, Loc loc) const { return kiln::matmul(*this, o, loc); }
Tensor Tensor::neg(Loc loc) const { return kiln::neg(*this, loc); }
Tensor Tensor::abs(Loc loc) const { return kiln::abs(*this, loc); }
Tensor Tensor::exp(Loc loc) const { return kiln::exp(*this, loc); }
Tensor Tensor::log(Loc loc) const { return kiln::log(*this, loc); }
Tensor Tensor::expm1(Loc loc) const { return kiln::expm1(*this, loc); }
Tensor Tensor::log1p(Loc loc) const { return kiln::log1p(*this, loc); }
Tensor Tensor::sqrt(Loc loc) const { return kiln::sqrt(*this, loc); }
Tensor Tensor::rsqrt(Loc loc) const { return kiln::rsqrt(*this, loc); }
Tensor Tensor::sin(Loc loc) const { return kiln::sin(*this, loc); }
Tensor Tensor::cos(Loc loc) const { return kiln::cos(*this, loc); }
Tensor Tensor::tanh(Loc loc) const { return kiln::tanh(*this, loc); }
Tensor Tensor::sigmoid(Loc loc) const { return kiln::sigmoid(*this, loc); }
Tensor Tensor::relu(Loc loc) const { return kiln::relu(*this, loc); }
Tensor Tensor::reciprocal(Loc loc) const { return kiln::reciprocal(*this, loc); }
Tensor Tensor::square(Loc loc) const { return kiln::square(*this, loc); }
Tensor Tensor::sign(Loc loc) const { return kiln::sign(*this, loc); }
Tensor Tensor::floor(Loc loc) const { return kiln::floor(*this, loc); }
Tensor Tensor::ceil(Loc loc) const { return kiln::ceil(*this, loc); }
Tensor Tensor::round(Loc loc) const { return kiln::round(*this, loc); }
Tensor Tensor::tan(Loc loc) const { return kiln::tan(*this, loc); }
Tensor Tensor::atan(Loc loc) const { return kiln::atan(*this, loc); }
Tensor Tensor::asin(Loc loc) const { return kiln::asin(*this, loc); }
Tensor Tensor::acos(Loc loc) const { return kiln::acos(*this, loc); }
Tensor Tensor::sinh(Loc loc) const { return kiln::sinh(*this, loc); }
Tensor Tensor::cosh(Loc loc) const { return kiln::cosh(*this, loc); }
Tensor Tensor::asinh(Loc loc) const { return kiln::asinh(*this, loc); }
Tensor Tensor::acosh(Loc loc) const { return kiln::acosh(*this, loc); }
Tensor Tensor::atanh(Loc loc) const { return kiln::atanh(*this, loc); }
Tensor Tensor::log2(Loc loc) const { return kiln::log2(*this, loc); }
Tensor Tensor::log10(Loc loc) const { return kiln::log10(*this, loc); }
Tensor Tensor::exp2(Loc loc) const { return kiln::exp2(*this, loc); }
Tensor Tensor::trunc(Loc loc) const { return kiln::trunc(*this, loc); }
Tensor Tensor::frac(Loc loc) const { return kiln::frac(*this, loc); }
Tensor Tensor::atan2(const Tensor& other, Loc loc) const { return kiln::atan2(*this, other, loc); }
Tensor Tensor::fmod(const Tensor& other, Loc loc) const { return kiln::fmod(*this, other, loc); }
Tensor Tensor::fmod(Scalar other, Loc loc) const { return kiln::fmod(*this, other, loc); }
Tensor Tensor::remainder(const Tensor& other, Loc loc) const { return kiln::remainder(*this, other, loc); }
Tensor Tensor::remainder(Scalar other, Loc loc) const { return kiln::remainder(*this, other, loc); }
Tensor Tensor::var(IntList d, bool u, bool k, Loc loc) const { return kiln::var(*this, std::move(d), u, k, loc); }
Tensor Tensor::std(IntList d, bool u, bool k, Loc loc) const { return kiln::std(*this, std::move(d), u, k, loc); }
Tensor Tensor::pow(Scalar e, Loc loc) const { return kiln::pow(*this, e, loc); }
Tensor Tensor::pow(const Tensor& e, Loc loc) const { return kiln::pow(*this, e, loc); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi, Loc loc) const {
  return kiln::clamp(*this, lo, hi, loc);
}

// ---------------------------------------------------------------- operators

Tensor operator-(Operand a) { return neg(a.t, a.loc); }
Tensor operator+(Operand a, const Tensor& c) { return add(a.t, c, a.loc); }
Tensor operator-(Operand a, const Tensor& c) { return sub(a.t, c, a.loc); }
Tensor operator*(Operand a, const Tensor& c) { return mul(a.t, c, a.loc); }
Tensor operator/(Operand a, const Tensor& c) { return div(a.t, c, a.loc); }
Tensor operator+(Operand a, Scalar c) { return add(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator-(Operand a, Scalar c) { return sub(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator*(Operand a, Scalar c) { return mul(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator/(Operand a, Scalar c) { return div(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator+(Scalar c, Operand a) { return add(wrap_scalar(c, a.t), a.t, a.loc); }
Tensor operator-(Scalar c, Operand a) { return sub(wrap_scalar(c, a.t), a.t, a.loc); }
Tensor operator*(Scalar c, Operand a) { return mul(wrap_scalar(c, a.t), a.t, a.loc); }
Tensor operator/(Scalar c, Operand a) { return div(wrap_scalar(c, a.t), a.t, a.loc); }
Tensor operator==(Operand a, const Tensor& c) { return eq(a.t, c, a.loc); }
Tensor operator!=(Operand a, const Tensor& c) { return ne(a.t, c, a.loc); }
Tensor operator<(Operand a, const Tensor& c) { return lt(a.t, c, a.loc); }
Tensor operator<=(Operand a, const Tensor& c) { return le(a.t, c, a.loc); }
Tensor operator>(Operand a, const Tensor& c) { return gt(a.t, c, a.loc); }
Tensor operator>=(Operand a, const Tensor& c) { return ge(a.t, c, a.loc); }
Tensor operator==(Operand a, Scalar c) { return eq(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator!=(Operand a, Scalar c) { return ne(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator<(Operand a, Scalar c) { return lt(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator<=(Operand a, Scalar c) { return le(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator>(Operand a, Scalar c) { return gt(a.t, wrap_scalar(c, a.t), a.loc); }
Tensor operator>=(Operand a, Scalar c) { return ge(a.t, wrap_scalar(c, a.t), a.loc); }

} // namespace kiln

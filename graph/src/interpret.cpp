// The reference interpreter: one plain loop nest per op, f64 for floats, int64
// (wrapped to the node's width) for integers and bool. Deliberately simple and
// slow: it shares no code with the lowering it checks, only random.h (the RNG's
// definition).

#include "graph/interpret.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "graph/build.h"
#include "graph/op_cases.h"
#include "graph/random.h"
#include "kiln/error.h"

namespace kiln::graph {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// One node's value: doubles for float dtypes, int64 for integer and bool dtypes.
struct Buf {
  bool is_float = true;
  std::vector<double> f;
  std::vector<int64_t> i;
  double as_double(int64_t k) const { return is_float ? f[k] : static_cast<double>(i[k]); }
  bool truthy(int64_t k) const { return is_float ? f[k] != 0 : i[k] != 0; }
};

Buf make_buf(DType dt, int64_t n) {
  Buf b;
  b.is_float = is_floating(dt);
  if (b.is_float) b.f.assign(static_cast<size_t>(n), 0.0);
  else b.i.assign(static_cast<size_t>(n), 0);
  return b;
}

/// Wraps an integer into the dtype's range (two's complement), bool to 0/1.
int64_t wrap(DType dt, int64_t v) {
  switch (dt) {
  case DType::Bool: return v != 0;
  case DType::Int32: return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
  case DType::Int64:
  case DType::Float32:
  case DType::Float64: return v;
  }
  return v;
}

int64_t wadd(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wsub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
int64_t wmul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

/// Integer power by repeated squaring; negative exponents give 0 unless |base| is 1.
int64_t ipow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
  uint64_t r = 1, b = static_cast<uint64_t>(base);
  for (uint64_t k = static_cast<uint64_t>(e); k; k >>= 1) {
    if (k & 1) r *= b;
    b *= b;
  }
  return static_cast<int64_t>(r);
}

/// Float -> integer conversion: truncation, saturating at the type's bounds, NaN -> 0.
int64_t saturate(double v, DType to) {
  if (to == DType::Bool) return v != 0;
  if (std::isnan(v)) return 0;
  if (to == DType::Int32) {
    if (v >= 2147483647.0) return std::numeric_limits<int32_t>::max();
    if (v <= -2147483648.0) return std::numeric_limits<int32_t>::min();
    return static_cast<int64_t>(v);
  }
  if (v >= 0x1p63) return std::numeric_limits<int64_t>::max();
  if (v <= -0x1p63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : (a > b ? a : b); }
double nan_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : (a < b ? a : b); }

/// Calls fn(index, linear) for every multi-index of `shape` in row-major order.
template <class Fn> void for_each_index(const Shape& shape, Fn&& fn) {
  const int64_t n = numel(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t lin = 0; lin < n; ++lin) {
    fn(idx, lin);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

class Interpreter {
public:
  explicit Interpreter(const InterpretOptions& o) : opt_(o) {}

  std::vector<InterpretResult> run(const std::vector<NodeRef>& roots) {
    std::vector<const Node*> raw;
    for (const NodeRef& r : roots) raw.push_back(r.get());
    const std::vector<const Node*> order = value_order(raw);
    count_uses(order, raw);
    for (const Node* n : order) {
      bufs_[n] = evaluate(n);
      if (!leaf_like(n))
        for (const NodeRef& in : value_inputs(*n)) release(in.get());
    }
    std::vector<InterpretResult> out;
    for (const Node* r : raw) out.push_back(result_of(r));
    return out;
  }

private:
  const InterpretOptions& opt_;
  std::unordered_map<const Node*, Buf> bufs_;
  std::unordered_map<const Node*, int64_t> uses_;

  // ------------------------------------------------------------ bookkeeping

  bool leaf_like(const Node* n) const { return n->op == OpKind::Input || (opt_.use_realized && n->realized()); }

  void count_uses(const std::vector<const Node*>& order, const std::vector<const Node*>& roots) {
    for (const Node* n : order)
      if (!leaf_like(n))
        for (const NodeRef& in : value_inputs(*n)) ++uses_[in.get()];
    for (const Node* r : roots) uses_[r] += 1 << 30; // roots are never released
  }

  void release(const Node* n) {
    if (--uses_[n] == 0) bufs_.erase(n);
  }

  const Buf& in(const Node* n, size_t k) const { return bufs_.at(n->inputs[k].get()); }

  InterpretResult result_of(const Node* n) const {
    const Buf& b = bufs_.at(n);
    InterpretResult r;
    r.dtype = n->dtype;
    r.shape = n->shape;
    if (b.is_float) {
      r.values = b.f;
      return r;
    }
    r.ints = b.i;
    r.values.reserve(b.i.size());
    for (int64_t v : b.i) r.values.push_back(static_cast<double>(v));
    return r;
  }

  /// A float result of an op on a node of dtype `dt`.
  double rf(DType dt, double v) const {
    return dt == DType::Float32 && opt_.exact_f32_rounding ? static_cast<double>(static_cast<float>(v)) : v;
  }

  // ------------------------------------------------------------ dispatch

  Buf evaluate(const Node* n) {
    if (leaf_like(n)) return read_storage(n);
    switch (op_category(n->op)) {
    case OpCategory::Leaf: return leaf(n);
    case OpCategory::Unary: return unary(n);
    case OpCategory::Binary: return binary(n);
    case OpCategory::Ternary: return where(n);
    case OpCategory::Reduce: return reduce(n);
    case OpCategory::Movement: return movement(n);
    case OpCategory::Scan: return scan(n);
    case OpCategory::Contraction: return matmul(n);
    case OpCategory::Attention: return attention(n);
    case OpCategory::Custom: return in(n, 0); // the identity of its value
    }
    KILN_ASSERT(false, "unknown op category");
    return {};
  }

  // ------------------------------------------------------------ leaves

  Buf read_storage(const Node* n) const {
    auto s = n->realized();
    if (!s) throw Error("interpret", "input " + std::string(dtype_name(n->dtype)) + shape_str(n->shape) + " has no data");
    const int64_t count = n->numel();
    KILN_ASSERT(s->bytes() >= static_cast<size_t>(count) * dtype_size(n->dtype), "storage smaller than its node");
    Buf b = make_buf(n->dtype, count);
    const void* p = s->data();
    for (int64_t k = 0; k < count; ++k) {
      switch (n->dtype) {
      case DType::Bool: b.i[k] = static_cast<const uint8_t*>(p)[k] != 0; break;
      case DType::Int32: b.i[k] = static_cast<const int32_t*>(p)[k]; break;
      case DType::Int64: b.i[k] = static_cast<const int64_t*>(p)[k]; break;
      case DType::Float32: b.f[k] = static_cast<const float*>(p)[k]; break;
      case DType::Float64: b.f[k] = static_cast<const double*>(p)[k]; break;
      }
    }
    return b;
  }

  Buf leaf(const Node* n) const {
    const int64_t count = n->numel();
    Buf b = make_buf(n->dtype, count);
    const Attrs& a = n->attrs;
    const bool f64 = n->dtype == DType::Float64;
    for (int64_t k = 0; k < count; ++k) {
      switch (n->op) {
      case OpKind::Const:
        if (b.is_float) b.f[k] = rf(n->dtype, a.f0);
        else b.i[k] = wrap(n->dtype, a.i0);
        break;
      case OpKind::Arange:
        if (b.is_float) b.f[k] = rf(n->dtype, a.f0 + static_cast<double>(k) * a.f1);
        else b.i[k] = wrap(n->dtype, wadd(a.i0, wmul(k, a.i1)));
        break;
      case OpKind::Rand:
        b.f[k] = rf(n->dtype, graph::random_uniform(static_cast<uint64_t>(a.i0), static_cast<uint64_t>(k), f64));
        break;
      case OpKind::Randn:
        b.f[k] = rf(n->dtype, graph::random_normal(static_cast<uint64_t>(a.i0), static_cast<uint64_t>(k), f64));
        break;
      case OpKind::Input: // bound, never computed
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Leaf, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
        KILN_ASSERT(false, "not a computed leaf: " + std::string(op_name(n->op)));
        break;
      }
    }
    return b;
  }

  // ------------------------------------------------------------ elementwise

  /// 1 / (1 + e^-x), in the form that neither overflows nor cancels.
  static long double sigmoid(long double x) {
    if (x >= 0) return 1.0L / (1.0L + std::exp(-x));
    const long double e = std::exp(x);
    return e / (1.0L + e);
  }

  // Transcendental functions are evaluated in long double and rounded once, so the
  // oracle is (nearly always) correctly rounded in f64 too.
  static double float_unary(OpKind op, double x) {
    const long double lx = x;
    switch (op) {
    case OpKind::Neg: return -x;
    case OpKind::Abs: return std::fabs(x);
    case OpKind::Exp: return static_cast<double>(std::exp(lx));
    case OpKind::Expm1: return static_cast<double>(std::expm1(lx));
    case OpKind::Log: return static_cast<double>(std::log(lx));
    case OpKind::Log1p: return static_cast<double>(std::log1p(lx));
    case OpKind::Sqrt: return std::sqrt(x);
    case OpKind::Rsqrt: return 1.0 / std::sqrt(x);
    case OpKind::Sin: return static_cast<double>(std::sin(lx));
    case OpKind::Cos: return static_cast<double>(std::cos(lx));
    case OpKind::Tanh: return static_cast<double>(std::tanh(lx));
    case OpKind::Sigmoid: return static_cast<double>(sigmoid(lx));
    case OpKind::Erf: return static_cast<double>(std::erf(lx));
    case OpKind::Tan: return static_cast<double>(std::tan(lx));
    case OpKind::Atan: return static_cast<double>(std::atan(lx));
    case OpKind::Asin: return static_cast<double>(std::asin(lx));
    case OpKind::Acos: return static_cast<double>(std::acos(lx));
    case OpKind::Sinh: return static_cast<double>(std::sinh(lx));
    case OpKind::Cosh: return static_cast<double>(std::cosh(lx));
    case OpKind::Asinh: return static_cast<double>(std::asinh(lx));
    case OpKind::Acosh: return static_cast<double>(std::acosh(lx));
    case OpKind::Atanh: return static_cast<double>(std::atanh(lx));
    case OpKind::Log2: return static_cast<double>(std::log2(lx));
    case OpKind::Log10: return static_cast<double>(std::log10(lx));
    case OpKind::Exp2: return static_cast<double>(std::exp2(lx));
    case OpKind::Floor: return std::floor(x);
    case OpKind::Trunc: return std::trunc(x);
    case OpKind::Ceil: return std::ceil(x);
    case OpKind::Round: return std::nearbyint(x); // the default rounding mode: ties to even
    case OpKind::Relu: return std::isnan(x) ? x : (x > 0 ? x : 0.0);
    case OpKind::Reciprocal: return 1.0 / x;
    case OpKind::Detach: return x;
    case OpKind::LogicalNot: case OpKind::Cast: break; // unary() computes them
    case OpKind::CheckIndex: break;                     // integers only
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Unary, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, "not a float unary op: " + std::string(op_name(op)));
    return 0;
  }

  static int64_t int_unary(OpKind op, int64_t x) {
    switch (op) {
    case OpKind::Neg: return wsub(0, x);
    case OpKind::Abs: return x < 0 ? wsub(0, x) : x;
    case OpKind::Relu: return x > 0 ? x : 0;
    case OpKind::Detach: return x;
    case OpKind::CheckIndex: return x; // the reference interpreter does not check
    case OpKind::LogicalNot: case OpKind::Cast: break; // unary() computes them
#define KILN_OP(e, name, arity, cat, types) KILN_IF_CATEGORY(cat, Unary, KILN_IF_TYPES(types, Float, case OpKind::e:))
#include "graph/ops.def"
#undef KILN_OP
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Unary, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, "not an integer unary op: " + std::string(op_name(op)));
    return 0;
  }

  Buf unary(const Node* n) const {
    const Buf& x = in(n, 0);
    const DType from = n->inputs[0]->dtype;
    const int64_t count = n->numel();
    Buf b = make_buf(n->dtype, count);
    for (int64_t k = 0; k < count; ++k) {
      if (n->op == OpKind::Cast) convert(x, from, k, b, n->dtype);
      else if (n->op == OpKind::LogicalNot) b.i[k] = !x.truthy(k);
      else if (b.is_float) b.f[k] = rf(n->dtype, float_unary(n->op, x.f[k]));
      else b.i[k] = wrap(n->dtype, int_unary(n->op, x.i[k]));
    }
    return b;
  }

  void convert(const Buf& x, DType from, int64_t k, Buf& out, DType to) const {
    if (to == DType::Bool) {
      out.i[k] = x.truthy(k);
    } else if (is_floating(to) && is_floating(from)) {
      out.f[k] = rf(to, x.f[k]);
    } else if (is_floating(to)) { // exact int64 -> float rounding (no double rounding through f64)
      const int64_t v = x.i[k];
      out.f[k] = to == DType::Float32 && opt_.exact_f32_rounding ? static_cast<double>(static_cast<float>(v))
                                                                 : static_cast<double>(v);
    } else if (is_floating(from)) {
      out.i[k] = saturate(x.f[k], to);
    } else {
      out.i[k] = wrap(to, x.i[k]);
    }
  }

  /// PyTorch's remainder: C's fmod, plus b where the result is non-zero and its sign differs from b's.
  static double remainder_of(double a, double b) {
    const double m = std::fmod(a, b);
    return m != 0 && ((b < 0) != (m < 0)) ? m + b : m;
  }

  static double float_binary(OpKind op, double a, double b) {
    switch (op) {
    case OpKind::Add: return a + b;
    case OpKind::Sub: return a - b;
    case OpKind::Mul: return a * b;
    case OpKind::Div: return a / b;
    case OpKind::Pow: return static_cast<double>(std::pow(static_cast<long double>(a), static_cast<long double>(b)));
    case OpKind::Atan2:
      return static_cast<double>(std::atan2(static_cast<long double>(a), static_cast<long double>(b)));
    case OpKind::Fmod: return std::fmod(a, b);
    case OpKind::Remainder: return remainder_of(a, b);
    case OpKind::Maximum: return nan_max(a, b);
    case OpKind::Minimum: return nan_min(a, b);
#define KILN_OP(e, name, arity, cat, types) KILN_IF_CATEGORY(cat, Binary, KILN_IF_TYPES(types, Bool, case OpKind::e:))
#include "graph/ops.def"
#undef KILN_OP
      break; // predicate() computes them
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Binary, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, "not a float binary op: " + std::string(op_name(op)));
    return 0;
  }

  static int64_t int_binary(OpKind op, int64_t a, int64_t b) {
    switch (op) {
    case OpKind::Add: return wadd(a, b);
    case OpKind::Sub: return wsub(a, b);
    case OpKind::Mul: return wmul(a, b);
    case OpKind::Pow: return ipow(a, b);
    case OpKind::Maximum: return a > b ? a : b;
    case OpKind::Minimum: return a < b ? a : b;
#define KILN_OP(e, name, arity, cat, types) KILN_IF_CATEGORY(cat, Binary, KILN_IF_NOT_TYPES(types, Any, case OpKind::e:))
#include "graph/ops.def"
#undef KILN_OP
      break; // float-only ops, and predicate()'s
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Binary, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, "not an integer binary op: " + std::string(op_name(op)));
    return 0;
  }

  /// Comparisons and logical ops on element k of two same-dtype operands.
  static bool predicate(OpKind op, const Buf& x, const Buf& y, int64_t k) {
    if (op == OpKind::LogicalAnd) return x.truthy(k) && y.truthy(k);
    if (op == OpKind::LogicalOr) return x.truthy(k) || y.truthy(k);
    if (x.is_float) return compare(op, x.f[k], y.f[k]);
    return compare(op, x.i[k], y.i[k]);
  }

  template <class T> static bool compare(OpKind op, T a, T b) {
    switch (op) {
    case OpKind::Eq: return a == b;
    case OpKind::Ne: return a != b;
    case OpKind::Lt: return a < b;
    case OpKind::Le: return a <= b;
    case OpKind::Gt: return a > b;
    case OpKind::Ge: return a >= b;
    case OpKind::LogicalAnd: case OpKind::LogicalOr: break; // predicate() computes them
#define KILN_OP(e, name, arity, cat, types) KILN_IF_CATEGORY(cat, Binary, KILN_IF_NOT_TYPES(types, Bool, case OpKind::e:))
#include "graph/ops.def"
#undef KILN_OP
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Binary, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, "not a comparison: " + std::string(op_name(op)));
    return false;
  }

  Buf binary(const Node* n) const {
    const Buf& x = in(n, 0);
    const Buf& y = in(n, 1);
    const int64_t count = n->numel();
    Buf b = make_buf(n->dtype, count);
    const bool pred = n->dtype == DType::Bool;
    for (int64_t k = 0; k < count; ++k) {
      if (pred) b.i[k] = predicate(n->op, x, y, k);
      else if (b.is_float) b.f[k] = rf(n->dtype, float_binary(n->op, x.f[k], y.f[k]));
      else b.i[k] = wrap(n->dtype, int_binary(n->op, x.i[k], y.i[k]));
    }
    return b;
  }

  Buf where(const Node* n) const {
    const Buf& c = in(n, 0);
    const Buf& x = in(n, 1);
    const Buf& y = in(n, 2);
    const int64_t count = n->numel();
    Buf b = make_buf(n->dtype, count);
    for (int64_t k = 0; k < count; ++k) {
      if (b.is_float) b.f[k] = c.truthy(k) ? x.f[k] : y.f[k];
      else b.i[k] = c.truthy(k) ? x.i[k] : y.i[k];
    }
    return b;
  }

  // ------------------------------------------------------------ reductions

  /// For every element of the input (row-major), the linear index of its output element.
  static std::vector<int64_t> output_positions(const Node* n) {
    const Shape& xs = n->inputs[0]->shape;
    const Strides os = contiguous_strides(n->shape);
    std::vector<int64_t> pos(static_cast<size_t>(numel(xs)));
    for_each_index(xs, [&](const std::vector<int64_t>& idx, int64_t lin) {
      int64_t o = 0;
      for (size_t d = 0; d < xs.size(); ++d)
        if (n->shape[d] != 1) o += idx[d] * os[d];
      pos[lin] = o;
    });
    return pos;
  }

  Buf reduce(const Node* n) const {
    switch (n->op) {
    case OpKind::Sum: return n->dtype == DType::Bool || !is_floating(n->dtype) ? int_sum(n) : float_sum(n);
    case OpKind::Max:
    case OpKind::Min: return extreme(n);
    case OpKind::Argmax:
    case OpKind::Argmin: return arg_extreme(n);
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_REDUCE_##cat(case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
      break;
    }
    KILN_ASSERT(false, "not a reduction: " + std::string(op_name(n->op)));
    return {};
  }

  Buf float_sum(const Node* n) const {
    const Buf& x = in(n, 0);
    const std::vector<int64_t> pos = output_positions(n);
    Buf b = make_buf(n->dtype, n->numel());
    for (size_t k = 0; k < pos.size(); ++k) b.f[pos[k]] += x.f[k]; // exact enough in f64, rounded once below
    for (double& v : b.f) v = rf(n->dtype, v);
    return b;
  }

  Buf int_sum(const Node* n) const {
    const Buf& x = in(n, 0);
    const std::vector<int64_t> pos = output_positions(n);
    Buf b = make_buf(n->dtype, n->numel());
    for (size_t k = 0; k < pos.size(); ++k) b.i[pos[k]] = wadd(b.i[pos[k]], x.i[k]);
    for (int64_t& v : b.i) v = wrap(n->dtype, v);
    return b;
  }

  Buf extreme(const Node* n) const {
    const Buf& x = in(n, 0);
    const bool is_max = n->op == OpKind::Max;
    const std::vector<int64_t> pos = output_positions(n);
    Buf b = make_buf(n->dtype, n->numel());
    if (b.is_float) {
      for (double& v : b.f) v = is_max ? -kInf : kInf;
      for (size_t k = 0; k < pos.size(); ++k)
        b.f[pos[k]] = is_max ? nan_max(b.f[pos[k]], x.f[k]) : nan_min(b.f[pos[k]], x.f[k]);
      return b;
    }
    for (int64_t& v : b.i) v = is_max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
    for (size_t k = 0; k < pos.size(); ++k)
      b.i[pos[k]] = is_max ? std::max(b.i[pos[k]], x.i[k]) : std::min(b.i[pos[k]], x.i[k]);
    return b;
  }

  /// True when a (at a later index) replaces the current best b.
  static bool better(bool is_max, double a, double b, bool have) {
    if (!have) return true;
    if (std::isnan(b)) return false;
    if (std::isnan(a)) return true;
    return is_max ? a > b : a < b;
  }

  Buf arg_extreme(const Node* n) const {
    const Buf& x = in(n, 0);
    const bool is_max = n->op == OpKind::Argmax;
    const int64_t dim = n->attrs.ints.at(0);
    const Shape& xs = n->inputs[0]->shape;
    const std::vector<int64_t> pos = output_positions(n);
    Buf b = make_buf(DType::Int64, n->numel());
    std::vector<double> best_f(static_cast<size_t>(n->numel()), 0.0);
    std::vector<int64_t> best_i(static_cast<size_t>(n->numel()), 0);
    std::vector<char> have(static_cast<size_t>(n->numel()), 0);
    for_each_index(xs, [&](const std::vector<int64_t>& idx, int64_t lin) {
      const int64_t o = pos[lin];
      bool take;
      if (x.is_float) take = better(is_max, x.f[lin], best_f[o], have[o]);
      else take = !have[o] || (is_max ? x.i[lin] > best_i[o] : x.i[lin] < best_i[o]);
      if (!take) return;
      have[o] = 1;
      if (x.is_float) best_f[o] = x.f[lin];
      else best_i[o] = x.i[lin];
      b.i[o] = idx[dim];
    });
    return b;
  }

  // ------------------------------------------------------------ movement

  /// Input linear offset for output index `idx` of a one-input movement op; -1 for padding.
  static int64_t source_offset(const Node* n, const std::vector<int64_t>& idx, const Strides& xst) {
    const Shape& xs = n->inputs[0]->shape;
    const std::vector<int64_t>& a = n->attrs.ints;
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) {
      switch (n->op) {
      case OpKind::Permute: off += idx[d] * xst[a[d]]; break;
      case OpKind::Expand: off += (xs[d] == 1 ? 0 : idx[d]) * xst[d]; break;
      case OpKind::Slice: off += (a[2 * d] + idx[d] * a[2 * d + 1]) * xst[d]; break;
      case OpKind::Pad: {
        const int64_t j = idx[d] - a[2 * d];
        if (j < 0 || j >= xs[d]) return -1;
        off += j * xst[d];
        break;
      }
      case OpKind::Reshape: case OpKind::Concat: case OpKind::Gather: case OpKind::Unfold: // their own functions
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Movement, case OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
        KILN_ASSERT(false, "not a strided movement op: " + std::string(op_name(n->op)));
        break;
      }
    }
    return off;
  }

  static void copy_element(const Buf& from, int64_t src, Buf& to, int64_t dst) {
    if (to.is_float) to.f[dst] = from.f[src];
    else to.i[dst] = from.i[src];
  }

  Buf movement(const Node* n) const {
    if (n->op == OpKind::Reshape) return in(n, 0);
    if (n->op == OpKind::Concat) return concat(n);
    if (n->op == OpKind::Gather) return gather(n);
    if (n->op == OpKind::Unfold) return unfold(n);
    const Buf& x = in(n, 0);
    const Strides xst = contiguous_strides(n->inputs[0]->shape);
    Buf b = make_buf(n->dtype, n->numel());
    for_each_index(n->shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
      const int64_t src = source_offset(n, idx, xst);
      if (src >= 0) copy_element(x, src, b, lin);
      else if (b.is_float) b.f[lin] = rf(n->dtype, n->attrs.f0);
      else b.i[lin] = wrap(n->dtype, n->attrs.i0);
    });
    return b;
  }

  // Window k of window w along dim is x at w * step + k there (ops.def).
  Buf unfold(const Node* n) const {
    const auto& a = n->attrs.ints;
    const size_t dim = static_cast<size_t>(a[0]), at = static_cast<size_t>(a[3]);
    const int64_t step = a[2];
    const Buf& x = in(n, 0);
    const Strides xst = contiguous_strides(n->inputs[0]->shape);
    Buf b = make_buf(n->dtype, n->numel());
    for_each_index(n->shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
      std::vector<int64_t> src = idx;
      const int64_t k = src[at];
      src.erase(src.begin() + static_cast<std::ptrdiff_t>(at));
      src[dim] = src[dim] * step + k;
      int64_t off = 0;
      for (size_t d = 0; d < src.size(); ++d) off += src[d] * xst[d];
      copy_element(x, off, b, lin);
    });
    return b;
  }

  // x at the index's value along the dim; an index out of range reads element 0 there, as kernels do.
  Buf gather(const Node* n) const {
    const size_t dim = static_cast<size_t>(n->attrs.ints.at(0));
    const Buf& x = in(n, 0);
    const Buf& index = in(n, 1);
    const Shape& xs = n->inputs[0]->shape;
    const Strides st = contiguous_strides(xs);
    Buf b = make_buf(n->dtype, n->numel());
    for_each_index(n->shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
      const int64_t j = index.i[lin];
      int64_t src = 0;
      for (size_t d = 0; d < idx.size(); ++d) src += (d == dim ? (j >= 0 && j < xs[d] ? j : 0) : idx[d]) * st[d];
      copy_element(x, src, b, lin);
    });
    return b;
  }

  Buf concat(const Node* n) const {
    const size_t dim = static_cast<size_t>(n->attrs.ints.at(0));
    Buf b = make_buf(n->dtype, n->numel());
    for_each_index(n->shape, [&](const std::vector<int64_t>& idx, int64_t lin) {
      int64_t j = idx[dim];
      size_t piece = 0;
      while (j >= n->inputs[piece]->shape[dim]) j -= n->inputs[piece++]->shape[dim];
      const Strides st = contiguous_strides(n->inputs[piece]->shape);
      int64_t src = 0;
      for (size_t d = 0; d < idx.size(); ++d) src += (d == dim ? j : idx[d]) * st[d];
      copy_element(in(n, piece), src, b, lin);
    });
    return b;
  }

  // ------------------------------------------------------------ scans

  /// cumsum, cumprod: each column (a point off the dim) in step order, as kernels do; a float scan
  /// accumulates in f64, each output rounded from it.
  Buf scan(const Node* n) const {
    if (n->op == OpKind::Argsort) return argsort(n);
    if (is_scatter(n->op)) return scatter(n);
    if (n->op == OpKind::Cummax || n->op == OpKind::Cummin || n->op == OpKind::Logcumsumexp) return running(n);
    const size_t dim = static_cast<size_t>(n->attrs.ints.at(0));
    const bool reverse = n->attrs.ints.at(1) != 0, mul = n->op == OpKind::Cumprod;
    const Buf& v = in(n, 0);
    const Strides st = contiguous_strides(n->shape);
    const int64_t steps = n->shape[dim];
    Buf b = make_buf(n->dtype, n->numel());
    Shape cols = n->shape;
    cols[dim] = 1;
    for_each_index(cols, [&](const std::vector<int64_t>& idx, int64_t) {
      int64_t base = 0;
      for (size_t d = 0; d < idx.size(); ++d) base += idx[d] * st[d];
      double acc_f = mul ? 1 : 0; // the f64 running value, not the rounded output
      int64_t acc_i = mul ? 1 : 0;
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t at = base + (reverse ? steps - 1 - s : s) * st[dim];
        if (b.is_float) b.f[at] = rf(n->dtype, acc_f = mul ? acc_f * v.f[at] : acc_f + v.f[at]);
        else b.i[at] = acc_i = wrap(n->dtype, mul ? wmul(acc_i, v.i[at]) : wadd(acc_i, v.i[at]));
      }
    });
    return b;
  }

  /// scatter_add, scatter_mul, scatter_max, scatter_min: the combine's identity everywhere, then each
  /// column's src elements in step order, each combined into the element the index names (one
  /// outside [0, size) skipped) and rounded to the dtype there, as kernels do. Max and min take
  /// cummax's update (a NaN sticks, a tie takes the later).
  Buf scatter(const Node* n) const {
    const size_t dim = static_cast<size_t>(n->attrs.ints.at(0));
    const bool reverse = n->attrs.ints.at(1) != 0;
    const Node* x = n->inputs[1].get();
    const Buf &v = in(n, 1), &index = in(n, 0);
    const Strides xst = contiguous_strides(x->shape), ost = contiguous_strides(n->shape);
    const int64_t steps = x->shape[dim], bound = n->shape[dim];
    const OpKind op = n->op;
    const bool is_max = op == OpKind::ScatterMax, extreme = is_max || op == OpKind::ScatterMin;
    const bool i32 = n->dtype == DType::Int32;
    Buf b = make_buf(n->dtype, n->numel());
    if (b.is_float)
      std::fill(b.f.begin(), b.f.end(), op == OpKind::ScatterMul ? 1 : extreme ? (is_max ? -kInf : kInf) : 0);
    else
      std::fill(b.i.begin(), b.i.end(),
                op == OpKind::ScatterMul ? 1
                : !extreme               ? 0
                : is_max ? (i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min())
                         : (i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max()));
    auto combine_f = [&](double acc, double x) {
      if (extreme) return std::isnan(x) || (is_max ? x >= acc : x <= acc) ? x : acc;
      return op == OpKind::ScatterMul ? acc * x : acc + x;
    };
    auto combine_i = [&](int64_t acc, int64_t x) {
      if (extreme) return is_max ? std::max(acc, x) : std::min(acc, x);
      return wrap(n->dtype, op == OpKind::ScatterMul ? wmul(acc, x) : wadd(acc, x));
    };
    Shape cols = x->shape;
    cols[dim] = 1;
    for_each_index(cols, [&](const std::vector<int64_t>& idx, int64_t) {
      int64_t xbase = 0, obase = 0;
      for (size_t d = 0; d < idx.size(); ++d) xbase += idx[d] * xst[d], obase += idx[d] * ost[d];
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t from = xbase + (reverse ? steps - 1 - s : s) * xst[dim], t = index.i[from];
        if (t < 0 || t >= bound) continue;
        const int64_t at = obase + t * ost[dim];
        if (b.is_float) b.f[at] = rf(n->dtype, combine_f(b.f[at], v.f[from]));
        else b.i[at] = combine_i(b.i[at], v.i[from]);
      }
    });
    return b;
  }

  /// cummax, cummin (torch's update: x where x >= acc, <= for cummin, or x is NaN) and logcumsumexp
  /// (logaddexp in f64, libm's log1p and exp): each column in step order, each output rounded from the
  /// f64 running value.
  Buf running(const Node* n) const {
    const size_t dim = static_cast<size_t>(n->attrs.ints.at(0));
    const bool reverse = n->attrs.ints.at(1) != 0, is_max = n->op == OpKind::Cummax;
    const Buf& v = in(n, 0);
    const Strides st = contiguous_strides(n->shape);
    const int64_t steps = n->shape[dim];
    Buf b = make_buf(n->dtype, n->numel());
    auto combine_f = [&](double acc, double x) {
      if (n->op == OpKind::Logcumsumexp) {
        const double m = std::isnan(acc) || std::isnan(x) ? acc + x : std::max(acc, x);
        return std::isinf(m) ? m : m + std::log1p(std::exp(-std::fabs(acc - x)));
      }
      return std::isnan(x) || (is_max ? x >= acc : x <= acc) ? x : acc;
    };
    Shape cols = n->shape;
    cols[dim] = 1;
    for_each_index(cols, [&](const std::vector<int64_t>& idx, int64_t) {
      int64_t base = 0;
      for (size_t d = 0; d < idx.size(); ++d) base += idx[d] * st[d];
      double acc_f = is_max || n->op == OpKind::Logcumsumexp ? -INFINITY : INFINITY;
      int64_t acc_i = is_max ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
      for (int64_t s = 0; s < steps; ++s) {
        const int64_t at = base + (reverse ? steps - 1 - s : s) * st[dim];
        if (b.is_float) b.f[at] = rf(n->dtype, acc_f = combine_f(acc_f, v.f[at]));
        else b.i[at] = acc_i = is_max ? std::max(acc_i, v.i[at]) : std::min(acc_i, v.i[at]);
      }
    });
    return b;
  }

  /// argsort: each column's positions ordered by std::stable_sort, NaN above every number
  /// (descending: first), -0 equal to +0 (the comparison of the values as doubles, or as int64).
  Buf argsort(const Node* n) const {
    const size_t dim = static_cast<size_t>(n->attrs.ints.at(0));
    const bool descending = n->attrs.ints.at(1) != 0;
    const Buf& v = in(n, 0);
    const Strides st = contiguous_strides(n->shape);
    const int64_t steps = n->shape[dim];
    Buf b = make_buf(DType::Int64, n->numel());
    Shape cols = n->shape;
    cols[dim] = 1;
    std::vector<int64_t> order(static_cast<size_t>(steps));
    for_each_index(cols, [&](const std::vector<int64_t>& idx, int64_t) {
      int64_t base = 0;
      for (size_t d = 0; d < idx.size(); ++d) base += idx[d] * st[d];
      auto at = [&](int64_t j) { return base + j * st[dim]; };
      // a before c (ascending: a < c with NaN largest; descending the other way round)
      auto before = [&](int64_t j, int64_t k) {
        if (!v.is_float) return descending ? v.i[at(j)] > v.i[at(k)] : v.i[at(j)] < v.i[at(k)];
        const double x = v.f[at(j)], y = v.f[at(k)];
        if (descending) return (std::isnan(x) && !std::isnan(y)) || x > y;
        return (!std::isnan(x) && std::isnan(y)) || x < y;
      };
      for (int64_t j = 0; j < steps; ++j) order[static_cast<size_t>(j)] = j;
      std::stable_sort(order.begin(), order.end(), before);
      for (int64_t j = 0; j < steps; ++j) b.i[at(j)] = order[static_cast<size_t>(j)];
    });
    return b;
  }

  // ------------------------------------------------------------ matmul

  Buf matmul(const Node* n) const {
    const Buf& x = in(n, 0);
    const Buf& y = in(n, 1);
    const size_t r = n->shape.size();
    const int64_t m = n->shape[r - 2], cols = n->shape[r - 1], kk = n->inputs[0]->shape[r - 1];
    const int64_t batch = m * cols == 0 ? 0 : n->numel() / (m * cols);
    Buf b = make_buf(n->dtype, n->numel());
    for (int64_t bi = 0; bi < batch; ++bi)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t xo = (bi * m + i) * kk, yo = bi * kk * cols + j, o = (bi * m + i) * cols + j;
          if (b.is_float) {
            double acc = 0;
            for (int64_t k = 0; k < kk; ++k) acc += x.f[xo + k] * y.f[yo + k * cols];
            b.f[o] = rf(n->dtype, acc);
          } else {
            int64_t acc = 0;
            for (int64_t k = 0; k < kk; ++k) acc = wadd(acc, wmul(x.i[xo + k], y.i[yo + k * cols]));
            b.i[o] = wrap(n->dtype, acc);
          }
        }
    return b;
  }

  // ------------------------------------------------------------ attention

  // An attention node's sizes and operands (Attention, AttentionLse or AttentionGrad: the forward's
  // result shape is operand 3's for the latter).
  struct AttentionProblem {
    const Node* n;
    const Node* mask;
    graph::Shape out; // the forward's result [..., L, Ev] (its batch dims index the mask)
    size_t r;
    int64_t L, S, E, Ev, batch;
    Strides mst; // the mask's strides, 0 along its size-1 dims
  };

  AttentionProblem attention_problem(const Node* n) const {
    const size_t mask_at = build::attention_mask_operand(n->op);
    graph::Shape out = n->op == OpKind::AttentionGrad ? n->inputs[3]->shape : n->shape;
    if (n->op == OpKind::AttentionLse) out = n->inputs[0]->shape, out.back() = n->inputs[2]->shape.back();
    AttentionProblem a{n, n->inputs.size() > mask_at ? n->inputs[mask_at].get() : nullptr, out, out.size(), 0, 0, 0, 0, 0, {}};
    const size_t r = a.r;
    a.L = out[r - 2], a.Ev = out[r - 1], a.E = n->inputs[0]->shape[r - 1], a.S = n->inputs[1]->shape[r - 2];
    a.batch = a.L * a.Ev == 0 ? 0 : graph::numel(out) / (a.L * a.Ev);
    if (a.mask) {
      a.mst = contiguous_strides(a.mask->shape);
      for (size_t d = 0; d < r; ++d)
        if (a.mask->shape[d] == 1) a.mst[d] = 0;
    }
    return a;
  }

  // The composite's masked scores of query row i of batch point bi, rounded where its ops round:
  // s_j = (q . k_j) * scale, masked (-inf); returns their max, 0 where the row is all -inf.
  double attention_scores_row(const AttentionProblem& a, int64_t bi, int64_t i, std::vector<double>& s) const {
    const Node* n = a.n;
    const Buf &q = in(n, 0), &k = in(n, 1);
    const DType dt = n->dtype;
    const double inf = std::numeric_limits<double>::infinity();
    const size_t r = a.r;
    int64_t moff = 0; // the mask's offset of the batch point
    for (size_t d = r - 2, rest = static_cast<size_t>(bi); d-- > 0;) {
      moff += a.mask ? static_cast<int64_t>(rest % static_cast<size_t>(a.out[d])) * a.mst[d] : 0;
      rest /= static_cast<size_t>(a.out[d]);
    }
    s.assign(static_cast<size_t>(a.S), 0);
    double m = -inf;
    for (int64_t j = 0; j < a.S; ++j) {
      double acc = 0;
      for (int64_t d = 0; d < a.E; ++d) acc += q.f[(bi * a.L + i) * a.E + d] * k.f[(bi * a.S + j) * a.E + d];
      double x = rf(dt, rf(dt, acc) * n->attrs.f0);
      if (n->attrs.i0 && j > i) x = -inf;
      if (a.mask) {
        const int64_t mo = moff + i * a.mst[r - 2] + j * a.mst[r - 1];
        const Buf& mb = in(n, static_cast<size_t>(n->inputs.size() - 1));
        x = a.mask->dtype == DType::Bool ? (mb.truthy(mo) ? x : -inf) : rf(dt, x + mb.f[mo]);
      }
      s[j] = x;
      m = std::max(m, x);
    }
    return m == -inf ? 0 : m;
  }

  // The composite's weights of query row i of batch point bi (attention_scores_row's s): p = exp(s - m)
  // / sum, rounded where its ops round (a fully masked row gives 0); returns the sum's logarithm + m,
  // the row's logsumexp (-inf for a fully masked row).
  double attention_weights_row(const AttentionProblem& a, int64_t bi, int64_t i, std::vector<double>& s) const {
    const DType dt = a.n->dtype;
    const double m = attention_scores_row(a, bi, i, s);
    double z = 0;
    for (int64_t j = 0; j < a.S; ++j) z += s[j] = rf(dt, std::exp(rf(dt, s[j] - m)));
    z = rf(dt, z);
    for (int64_t j = 0; j < a.S; ++j) s[j] = z == 0 ? 0 : rf(dt, s[j] / z);
    return rf(dt, m + rf(dt, std::log(z)));
  }

  // The dropout factor of weight (bi, i, j) (build::attention_dropout_factor's, rounded as its ops
  // round): build::dropout_scale(p) where rand >= p, else 0; 1 without dropout.
  double attention_dropout_factor(const AttentionProblem& a, int64_t bi, int64_t i, int64_t j) const {
    const build::AttentionDropout d = build::attention_dropout(*a.n);
    if (d.p <= 0) return 1;
    const DType dt = a.n->dtype;
    const auto counter = static_cast<uint64_t>((bi * a.L + i) * a.S + j);
    const double u = rf(dt, graph::random_uniform(d.seed, counter, dt == DType::Float64));
    return u >= rf(dt, d.p) ? rf(dt, build::dropout_scale(d.p)) : 0.0;
  }

  // The output p v per query row (attention_weights_row's p, times the dropout factor).
  Buf attention(const Node* n) const {
    if (n->op == OpKind::AttentionGrad) return attention_grad(n);
    const AttentionProblem a = attention_problem(n);
    if (n->op == OpKind::AttentionLse) return attention_lse(a);
    const Buf& v = in(n, 2);
    Buf b = make_buf(n->dtype, n->numel());
    std::vector<double> s;
    for (int64_t bi = 0; bi < a.batch; ++bi)
      for (int64_t i = 0; i < a.L; ++i) {
        attention_weights_row(a, bi, i, s);
        for (int64_t j = 0; j < a.S; ++j) s[j] = rf(n->dtype, s[j] * attention_dropout_factor(a, bi, i, j));
        for (int64_t c = 0; c < a.Ev; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < a.S; ++j) acc += s[j] * v.f[(bi * a.S + j) * a.Ev + c];
          b.f[(bi * a.L + i) * a.Ev + c] = rf(n->dtype, acc);
        }
      }
    return b;
  }

  // Each row's logsumexp (attention_weights_row's).
  Buf attention_lse(const AttentionProblem& a) const {
    Buf b = make_buf(a.n->dtype, a.n->numel());
    std::vector<double> s;
    for (int64_t bi = 0; bi < a.batch; ++bi)
      for (int64_t i = 0; i < a.L; ++i) b.f[bi * a.L + i] = attention_weights_row(a, bi, i, s);
    return b;
  }

  // The fused backward's math in f64 (rounded once, at the end): per row, p_j = exp(s_j - lse) with s
  // attention_scores_row's (0 where lse is -inf: a fully masked row), D = dout . out, z_j the dropout
  // factor (1 without dropout), dS_j = p_j (z_j (dout . v_j) - D); dq_i = scale sum_j dS_j k_j,
  // dk_j = scale sum_i dS_ij q_i, dv_j = sum_i p_ij z_ij dout_i.
  Buf attention_grad(const Node* n) const {
    const AttentionProblem a = attention_problem(n);
    const Buf &q = in(n, 0), &k = in(n, 1), &v = in(n, 2), &out = in(n, 3), &dout = in(n, 4), &lse = in(n, 5);
    const int64_t which = n->attrs.i1;
    const int64_t width = which == 2 ? a.Ev : a.E, rows = which == 0 ? a.L : a.S;
    std::vector<double> g(static_cast<size_t>(a.batch * rows * width), 0.0), p;
    for (int64_t bi = 0; bi < a.batch; ++bi)
      for (int64_t i = 0; i < a.L; ++i) {
        attention_scores_row(a, bi, i, p);
        const double l = lse.f[static_cast<size_t>(bi * a.L + i)];
        for (double& x : p) x = std::isinf(l) && l < 0 ? 0 : std::exp(x - l);
        const double* dor = &dout.f[static_cast<size_t>((bi * a.L + i) * a.Ev)];
        double dd = 0;
        for (int64_t c = 0; c < a.Ev; ++c) dd += dor[c] * out.f[static_cast<size_t>((bi * a.L + i) * a.Ev + c)];
        for (int64_t j = 0; j < a.S; ++j) {
          if (p[j] == 0) continue;
          double dp = 0;
          for (int64_t c = 0; c < a.Ev; ++c) dp += dor[c] * v.f[static_cast<size_t>((bi * a.S + j) * a.Ev + c)];
          const double z = attention_dropout_factor(a, bi, i, j);
          const double ds = p[j] * (z * dp - dd) * n->attrs.f0;
          for (int64_t c = 0; c < width; ++c) {
            if (which == 0) g[(bi * a.L + i) * width + c] += ds * k.f[(bi * a.S + j) * a.E + c];
            if (which == 1) g[(bi * a.S + j) * width + c] += ds * q.f[(bi * a.L + i) * a.E + c];
            if (which == 2) g[(bi * a.S + j) * width + c] += p[j] * z * dor[c];
          }
        }
      }
    Buf b = make_buf(n->dtype, n->numel());
    for (size_t x = 0; x < g.size(); ++x) b.f[x] = rf(n->dtype, g[x]);
    return b;
  }
};

} // namespace

std::vector<InterpretResult> interpret(const std::vector<NodeRef>& roots, const InterpretOptions& options) {
  return Interpreter(options).run(roots);
}

InterpretResult interpret_one(const NodeRef& root, const InterpretOptions& options) {
  return interpret({root}, options).at(0);
}

} // namespace kiln::graph

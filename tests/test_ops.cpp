// Every op's forward values through the public API (realized by the JIT) against
// the reference interpreter evaluating the same graph, and for a subset against
// hand-written f64 loops. Shapes include broadcasting, size-1 and zero-size dims,
// non-contiguous views and odd sizes; every valid dtype; special values.

#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include "graph/random.h"
#include "graph/interpret.h"
#include "graph/node.h"
#include "graph/text.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"
#include "tests/random_graph.h"
#include "tests/table_checks.h"

namespace kiln {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfF = std::numeric_limits<float>::infinity();

const std::vector<DType> kAll = {kFloat32, kFloat64, kInt32, kInt64, kBool};
const std::vector<DType> kNumeric = {kFloat32, kFloat64, kInt32, kInt64};
const std::vector<DType> kFloats = {kFloat32, kFloat64};
const std::vector<DType> kInts = {kInt32, kInt64};

std::string name_of(DType dt) { return std::string(dtype_name(dt)); }
std::string shape_of(const IntList& s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? "," : "") + std::to_string(s[k]);
  return out + "]";
}

// ---------------------------------------------------------------- test data

/// How test values are drawn.
enum class Fill {
  Normal,   ///< floats in [-3, 3], ints in [-9, 9], bool 0/1
  Positive, ///< floats in [0.05, 5], ints in [0, 9]
  Ties,     ///< few distinct values (ties for arg-reductions): floats k/2 in [-1, 1], ints in [-2, 2]
  Specials, ///< Normal mixed with NaN, +-inf, +-0, huge, tiny and integer extremes
  Exponent, ///< small exponents for pow: floats in [-2, 2], ints in [0, 5]
};

double uniform(uint64_t seed, uint64_t k) { return graph::random_uniform(seed ^ 0x5eed, k, true); }

double special_value(DType dt, uint64_t pick) {
  if (is_floating(dt)) {
    static const double f[] = {kNaN, kInf, -kInf, 0.0, -0.0, 1e30, -1e30, 1e-30, 3e-40, 1.0, -1.0, 88.0, -104.0, 1e10};
    return f[pick % std::size(f)];
  }
  if (dt == kInt32) {
    static const double i[] = {2147483647.0, -2147483648.0, 0, -1, 1, 65536, -65536};
    return i[pick % std::size(i)];
  }
  static const double l[] = {9.2e18, -9.2e18, 0, -1, 1, 4294967296.0, -3037000500.0};
  return l[pick % std::size(l)];
}

/// n deterministic values of dtype `dt`.
std::vector<double> values(DType dt, int64_t n, uint64_t seed, Fill fill) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const double u = uniform(seed, static_cast<uint64_t>(k));
    double x = 0;
    if (dt == kBool) x = u < 0.5 ? 0 : 1;
    else if (fill == Fill::Positive) x = is_floating(dt) ? 0.05 + 4.95 * u : std::floor(10 * u);
    else if (fill == Fill::Ties) x = is_floating(dt) ? std::floor(5 * u) / 2 - 1 : std::floor(5 * u) - 2;
    else if (fill == Fill::Exponent) x = is_floating(dt) ? 4 * u - 2 : std::floor(6 * u);
    else x = is_floating(dt) ? 6 * u - 3 : std::floor(19 * u) - 9;
    if (fill == Fill::Specials && dt != kBool && uniform(seed + 1, static_cast<uint64_t>(k)) < 0.4)
      x = special_value(dt, static_cast<uint64_t>(uniform(seed + 2, static_cast<uint64_t>(k)) * 1000));
    v[static_cast<size_t>(k)] = x;
  }
  return v;
}

using test::tensor_of;

/// A contiguous tensor of deterministic values.
Tensor make(DType dt, IntList shape, uint64_t seed, Fill fill = Fill::Normal) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return tensor_of(values(dt, n, seed, fill), dt, shape);
}

/// How an operand is laid out: contiguous, or a view of another tensor.
enum class View { Contiguous, Transposed, Strided, Expanded, Permuted, NegSliced };
const std::vector<View> kViews = {View::Contiguous, View::Transposed, View::Strided,
                                  View::Expanded, View::Permuted, View::NegSliced};

std::string view_name(View v) {
  switch (v) {
  case View::Contiguous: return "contiguous";
  case View::Transposed: return "transposed";
  case View::Strided: return "strided";
  case View::Expanded: return "expanded";
  case View::Permuted: return "permuted";
  case View::NegSliced: return "neg-sliced";
  }
  return "?";
}

/// A tensor of `shape` laid out as `view`; nullopt when the view does not apply to the shape.
std::optional<Tensor> make_view(DType dt, IntList shape, View view, uint64_t seed, Fill fill) {
  const size_t r = shape.size();
  switch (view) {
  case View::Contiguous: return make(dt, shape, seed, fill);
  case View::Transposed: {
    if (r < 2) return std::nullopt;
    IntList s = shape;
    std::swap(s[r - 1], s[r - 2]);
    return make(dt, s, seed, fill).transpose(-1, -2);
  }
  case View::Strided: {
    if (r == 0) return std::nullopt;
    IntList s = shape;
    s[0] = 2 * shape[0] + 3;
    return make(dt, s, seed, fill).slice(0, 1, 1 + 2 * shape[0], 2);
  }
  case View::Expanded: {
    for (size_t d = r; d-- > 0;)
      if (shape[d] > 1) {
        IntList s = shape;
        s[d] = 1;
        return make(dt, s, seed, fill).expand(shape);
      }
    return std::nullopt;
  }
  case View::Permuted: { // the last dim stored outermost
    if (r < 3) return std::nullopt;
    IntList s = {shape[r - 1]}, perm;
    s.insert(s.end(), shape.begin(), shape.end() - 1);
    for (size_t d = 1; d < r; ++d) perm.push_back(static_cast<int64_t>(d));
    perm.push_back(0);
    return make(dt, s, seed, fill).permute(perm);
  }
  case View::NegSliced: {
    if (r == 0) return std::nullopt;
    IntList s = shape;
    s[r - 1] += 3;
    return make(dt, s, seed, fill).slice(-1, -(shape[r - 1] + 1), -1);
  }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- comparison

/// Allowed error: `ulps` units in the last place of the result dtype, or `atol` absolute.
struct Tol {
  double ulps = 0;
  double atol = 0;
};
const Tol kExact{0, 0};
const Tol kTranscendental{4, 0};
const Tol kComposite{6, 0}; ///< a few rounded steps after a transcendental (sigmoid)
const Tol kPow{8, 0};       ///< pow: exp(y log x) needs extra precision to be tighter

/// Distance in representable values of `dt` between a and b (both finite or equal).
double ulp_distance(double a, double b, DType dt) {
  if (dt == kFloat32) {
    auto key = [](float f) {
      const int64_t i = std::bit_cast<int32_t>(f);
      return i < 0 ? -(i & 0x7fffffff) : i;
    };
    return std::fabs(static_cast<double>(key(static_cast<float>(a)) - key(static_cast<float>(b))));
  }
  auto key = [](double f) {
    const int64_t i = std::bit_cast<int64_t>(f);
    return static_cast<long double>(i < 0 ? -(i & 0x7fffffffffffffffLL) : i);
  };
  return static_cast<double>(std::fabs(key(a) - key(b)));
}

bool close(double got, double want, DType dt, Tol tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (got == want) return true;
  if (std::isinf(want) || std::isinf(got)) return false;
  if (std::fabs(got - want) <= tol.atol) return true;
  return ulp_distance(got, want, dt) <= tol.ulps;
}

/// Compares the JIT's values with expected ones; names up to 5 mismatches.
::testing::AssertionResult compare(const std::vector<double>& got, const std::vector<double>& want, DType dt, Tol tol,
                                   const std::vector<double>* scale = nullptr) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs expected " << want.size();
  int bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t k = 0; k < got.size(); ++k) {
    if (close(got[k], want[k], dt, scale ? Tol{tol.ulps, tol.atol * scale->at(k)} : tol)) continue;
    if (++bad <= 5)
      os << "\n  element " << k << ": got " << got[k] << ", expected " << want[k]
         << (scale ? ", allowed " + std::to_string(tol.atol * scale->at(k)) : std::string());
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ (" << name_of(dt)
                                       << ", ulps " << tol.ulps << ", atol " << tol.atol << "):" << os.str();
}

::testing::AssertionResult compare_ints(const std::vector<int64_t>& got, const std::vector<int64_t>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs expected " << want.size();
  int bad = 0;
  std::ostringstream os;
  for (size_t k = 0; k < got.size(); ++k) {
    if (got[k] == want[k]) continue;
    if (++bad <= 5) os << "\n  element " << k << ": got " << got[k] << ", expected " << want[k];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ:" << os.str();
}

/// The bytes of a realized node.
std::vector<unsigned char> realized_bytes(const graph::NodeRef& n) {
  const auto* p = static_cast<const unsigned char*>(n->realized()->data());
  return {p, p + graph::numel(n->shape) * dtype_size(n->dtype)};
}

/// Realizes a copy of `node`'s graph in the fusion mode that is not current: the two
/// modes must agree bitwise (the kernel IR fixes every accumulation order).
::testing::AssertionResult matches_other_mode(const std::vector<graph::NodeRef>& copy, const graph::NodeRef& node) {
  const bool saved = options().fusion;
  options().fusion = !saved;
  try {
    runtime::realize(copy);
  } catch (...) {
    options().fusion = saved;
    throw;
  }
  options().fusion = saved;
  if (realized_bytes(copy[0]) == realized_bytes(node)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "fusion " << (saved ? "off" : "on") << " gives other bits than fusion "
                                       << (saved ? "on" : "off");
}

/// Realizes `t` with the JIT and compares it with the interpreter on the same graph, and
/// bitwise with the other fusion mode. With `scale`, element k may differ by
/// tol.atol * scale[k] (error bounds of sums).
::testing::AssertionResult matches_interpreter(const Tensor& t, Tol tol, const std::vector<double>* scale = nullptr) {
  const graph::NodeRef node = t.node();
  const std::vector<graph::NodeRef> copy = kiln::testing::clone_graph({node}); // before `t` is realized
  const graph::InterpretResult want = graph::interpret_one(node);
  const std::string text = graph::print_graph({node});
  ::testing::AssertionResult r = ::testing::AssertionSuccess();
  if (want.shape != t.shape()) return ::testing::AssertionFailure() << "interpreter shape differs";
  if (is_floating(t.dtype())) r = compare(t.to_vector<double>(), want.values, t.dtype(), tol, scale);
  else r = compare_ints(t.to_vector<int64_t>(), want.ints);
  if (r) r = matches_other_mode(copy, node);
  if (!r) r << "\n  graph:\n" << text;
  return r;
}

/// Adds the JIT-vs-interpreter check of `t` with a label.
#define EXPECT_INTERP(t, tol, label)                                                                    \
  do {                                                                                                 \
    EXPECT_TRUE(matches_interpreter((t), (tol))) << (label);                                           \
  } while (0)

/// Runs `body` in a child process, so that a crash in kiln fails this test only.
void expect_no_crash(const std::function<void()>& body) {
  EXPECT_EXIT(
      {
        body();
        std::exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

/// Expected values computed by a C++ loop, rounded to `dt`.
std::vector<double> rounded(std::vector<double> v, DType dt) {
  if (dt == kFloat32)
    for (double& x : v) x = static_cast<float>(x);
  return v;
}

// ---------------------------------------------------------------- op drivers

using Fn1 = std::function<Tensor(const Tensor&)>;
using Fn2 = std::function<Tensor(const Tensor&, const Tensor&)>;

const std::vector<IntList> kShapes = {{}, {1}, {7}, {17}, {1027}, {3, 0}, {0}, {4, 33}, {2, 3, 5}, {1, 1, 9}, {3, 4, 1}};

/// A unary op on every shape and view, for each dtype, against the interpreter.
void check_unary(const std::string& name, const Fn1& f, const std::vector<DType>& dts, Tol tol = {},
                 Fill fill = Fill::Normal) {
  uint64_t seed = 1;
  for (DType dt : dts)
    for (const IntList& shape : kShapes)
      for (View v : kViews) {
        auto x = make_view(dt, shape, v, ++seed, fill);
        if (!x) continue;
        EXPECT_INTERP(f(*x), tol, name + " " + name_of(dt) + shape_of(shape) + " " + view_name(v));
      }
}

/// Operand shape pairs: equal, broadcasting both ways, scalars, size-1 and zero-size dims.
const std::vector<std::pair<IntList, IntList>> kPairs = {
    {{7}, {7}},       {{1027}, {1027}}, {{}, {17}},        {{17}, {}},          {{4, 1}, {1, 5}},
    {{2, 3, 5}, {3, 1}}, {{3, 1}, {2, 3, 5}}, {{0, 3}, {1, 3}}, {{3, 0}, {3, 1}}, {{1, 1, 9}, {9}},
    {{4, 33}, {4, 33}}, {{1027}, {1}},   {{2, 1, 4}, {2, 3, 1}}, {{}, {}}};

/// A binary op on every shape pair (each operand also as each view), for each dtype.
void check_binary(const std::string& name, const Fn2& f, const std::vector<DType>& dts, Tol tol = {},
                  Fill fill_a = Fill::Normal, Fill fill_b = Fill::Normal) {
  uint64_t seed = 100;
  for (DType dt : dts)
    for (const auto& [sa, sb] : kPairs)
      for (View v : kViews) {
        auto a = make_view(dt, sa, v, ++seed, fill_a);
        auto b = make_view(dt, sb, v == View::Contiguous ? v : View::Transposed, ++seed, fill_b);
        if (!b) b = make(dt, sb, ++seed, fill_b);
        if (!a) continue;
        const std::string label = name + " " + name_of(dt) + shape_of(sa) + "," + shape_of(sb) + " " + view_name(v);
        EXPECT_INTERP(f(*a, *b), tol, label);
        EXPECT_INTERP(f(*b, *a), tol, label + " (swapped)");
      }
}

/// A unary op against a hand-written f64 loop on 1027 contiguous values.
void check_unary_loop(const Fn1& f, const std::function<double(double)>& ref, DType dt, Tol tol,
                      Fill fill = Fill::Normal) {
  const std::vector<double> v = values(dt, 1027, 7, fill);
  std::vector<double> want;
  for (double x : v) want.push_back(ref(is_floating(dt) && dt == kFloat32 ? static_cast<float>(x) : x));
  Tensor y = f(tensor_of(v, dt, {1027}));
  EXPECT_TRUE(compare(y.to_vector<double>(), rounded(want, y.dtype()), y.dtype(), tol)) << name_of(dt);
}

/// A binary op against a hand-written loop over a [4,1] x [1,5] broadcast.
void check_binary_loop(const Fn2& f, const std::function<double(double, double)>& ref, DType dt, Tol tol,
                       Fill fb = Fill::Normal) {
  const std::vector<double> a = values(dt, 4, 11, Fill::Normal), b = values(dt, 5, 12, fb);
  auto rd = [&](double x) { return dt == kFloat32 ? static_cast<double>(static_cast<float>(x)) : x; };
  std::vector<double> want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) want.push_back(ref(rd(a[i]), rd(b[j])));
  Tensor y = f(tensor_of(a, dt, {4, 1}), tensor_of(b, dt, {1, 5}));
  ASSERT_EQ(y.shape(), (IntList{4, 5}));
  EXPECT_TRUE(compare(y.to_vector<double>(), rounded(want, y.dtype()), y.dtype(), tol)) << name_of(dt);
}

// ---------------------------------------------------------------- unary ops

TEST(Unary, Exp) { check_unary("exp", [](auto& x) { return exp(x); }, kAll, kTranscendental); }
TEST(Unary, Log) { check_unary("log", [](auto& x) { return log(x); }, kAll, kTranscendental, Fill::Positive); }
TEST(Unary, Expm1) { check_unary("expm1", [](auto& x) { return expm1(x); }, kAll, kTranscendental); }
TEST(Unary, Log1p) { check_unary("log1p", [](auto& x) { return log1p(x); }, kAll, kTranscendental, Fill::Positive); }
TEST(Unary, Log1pBelowMinusOne) { check_unary("log1p", [](auto& x) { return log1p(x); }, kFloats, kTranscendental); }
TEST(Unary, Tan) {
  check_unary(
      "tan", [](auto& x) { return tan(x); }, kAll, kTranscendental);
}
TEST(Unary, Atan) {
  check_unary(
      "atan", [](auto& x) { return atan(x); }, kAll, kTranscendental);
}
TEST(Unary, Asin) {
  check_unary(
      "asin", [](auto& x) { return asin(x); }, kAll, kTranscendental);
}
TEST(Unary, Acos) {
  check_unary(
      "acos", [](auto& x) { return acos(x); }, kAll, kTranscendental);
}
TEST(Unary, Sinh) {
  check_unary(
      "sinh", [](auto& x) { return sinh(x); }, kAll, kTranscendental);
}
TEST(Unary, Cosh) {
  check_unary(
      "cosh", [](auto& x) { return cosh(x); }, kAll, kTranscendental);
}
TEST(Unary, Asinh) {
  check_unary(
      "asinh", [](auto& x) { return asinh(x); }, kAll, kTranscendental);
}
TEST(Unary, Acosh) {
  check_unary(
      "acosh", [](auto& x) { return acosh(x); }, kAll, kTranscendental, Fill::Positive);
}
TEST(Unary, Atanh) {
  check_unary(
      "atanh", [](auto& x) { return atanh(x); }, kAll, kTranscendental);
}
TEST(Unary, Log2) {
  check_unary(
      "log2", [](auto& x) { return log2(x); }, kAll, kTranscendental, Fill::Positive);
}
TEST(Unary, Log10) {
  check_unary(
      "log10", [](auto& x) { return log10(x); }, kAll, kTranscendental, Fill::Positive);
}
TEST(Unary, Exp2) {
  check_unary(
      "exp2", [](auto& x) { return exp2(x); }, kAll, kTranscendental);
}
TEST(Unary, Trunc) {
  check_unary(
      "trunc", [](auto& x) { return trunc(x); }, kNumeric, kExact);
}
TEST(Unary, Frac) {
  check_unary(
      "frac", [](auto& x) { return frac(x); }, kFloats, kExact);
}
TEST(Unary, TruncKeepsIntegersAndFracRefusesThem) {
  const Tensor i = from_vector<int32_t>({-3, 4});
  EXPECT_EQ(trunc(i).dtype(), kInt32);
  EXPECT_EQ(trunc(i).to_vector<int64_t>(), (std::vector<int64_t>{-3, 4}));
  EXPECT_THROW(frac(i), Error);
}
TEST(Binary, Atan2) {
  check_binary(
      "atan2", [](auto& a, auto& b) { return atan2(a, b); }, kAll, kTranscendental);
}
TEST(Binary, Fmod) {
  check_binary(
      "fmod", [](auto& a, auto& b) { return fmod(a, b); }, kAll, kExact);
}
TEST(Binary, Remainder) {
  check_binary("remainder", [](auto& a, auto& b) { return remainder(a, b); }, kAll, {1, 0});
}

/// PyTorch 1.13's values (tests/tools/torch_math_values.py) of the functions added with atan.
struct TorchValues {
  const char* op;
  DType dt;
  std::vector<double> a, b, want;
};
const std::vector<TorchValues> kTorchValues = {
#include "torch_math_values.inc"
};

/// kiln's function named `op` on a (and b).
Tensor apply_named(const std::string& op, const Tensor& a, const Tensor& b) {
  static const std::map<std::string, Fn1> unary = {
      {"tan", [](auto& x) { return tan(x); }},      {"atan", [](auto& x) { return x.atan(); }},
      {"asin", [](auto& x) { return asin(x); }},    {"acos", [](auto& x) { return x.acos(); }},
      {"sinh", [](auto& x) { return sinh(x); }},    {"cosh", [](auto& x) { return x.cosh(); }},
      {"asinh", [](auto& x) { return asinh(x); }},  {"acosh", [](auto& x) { return x.acosh(); }},
      {"atanh", [](auto& x) { return atanh(x); }},  {"log2", [](auto& x) { return x.log2(); }},
      {"log10", [](auto& x) { return log10(x); }},  {"exp2", [](auto& x) { return x.exp2(); }},
      {"trunc", [](auto& x) { return x.trunc(); }}, {"frac", [](auto& x) { return frac(x); }}};
  if (op == "atan2") return a.atan2(b);
  if (op == "fmod") return fmod(a, b);
  if (op == "remainder") return a.remainder(b);
  return unary.at(op)(a);
}

TEST(Unary, MoreMathMatchesTorch) {
  for (const TorchValues& t : kTorchValues) {
    const auto n = static_cast<int64_t>(t.a.size());
    const Tensor a = tensor_of(t.a, t.dt, {n});
    const Tensor b = t.b.empty() ? a : tensor_of(t.b, t.dt, {n});
    const std::vector<double> got = apply_named(t.op, a, b).to_vector<double>();
    const std::string op = t.op;
    // torch's f32 kernels (Sleef's, within 1 ulp) and f64 ones (glibc's) against ours (0.5 / up to 3 ulp)
    const Tol tol = op == "fmod" || op == "remainder" || op == "trunc" || op == "frac" ? kExact
                    : t.dt == kFloat32                                                 ? Tol{1, 0}
                                                                                       : Tol{3, 0};
    for (int64_t i = 0; i < n; ++i) {
      if (op == "tan" && std::isfinite(t.a[i]) && std::fabs(t.a[i]) > 1e5) continue; // beyond tan's reduction
      const double w = t.want[i];
      // torch's f64 tan gives 0 for subnormal x; C's tan (and kiln's) x itself
      if (op == "tan" && w == 0 && t.a[i] != 0 && std::fabs(t.a[i]) < 0x1p-1022 && got[i] == t.a[i]) continue;
      const bool ok = (w == 0 || std::isinf(w)) ? got[i] == w && std::signbit(got[i]) == std::signbit(w)
                                                : close(got[i], w, t.dt, tol);
      EXPECT_TRUE(ok) << op << " " << name_of(t.dt) << " at (" << t.a[i] << (t.b.empty() ? "" : ", ")
                      << (t.b.empty() ? "" : std::to_string(t.b[i])) << "): " << got[i] << ", torch " << w;
    }
  }
}

TEST(Binary, IntegersPromoteForAtan2FmodRemainder) {
  const Tensor a = from_vector<int64_t>({5, -5, 7}), b = from_vector<int32_t>({3, 3, -2});
  EXPECT_EQ(atan2(a, b).dtype(), kFloat32);
  EXPECT_EQ(fmod(a, b).to_vector<double>(), (std::vector<double>{2, -2, 1}));
  EXPECT_EQ(remainder(a, b).to_vector<double>(), (std::vector<double>{2, 1, -1}));
  EXPECT_EQ(fmod(from_vector<double>({-7.5}), 2).to_vector<double>(), std::vector<double>{-1.5});
  EXPECT_EQ(from_vector<double>({-7.5}).remainder(2).to_vector<double>(), std::vector<double>{0.5});
}

TEST(Unary, LogOfNegatives) { check_unary("log", [](auto& x) { return log(x); }, kFloats, kTranscendental); }
TEST(Unary, Sqrt) { check_unary("sqrt", [](auto& x) { return sqrt(x); }, kAll, kExact, Fill::Positive); }
TEST(Unary, Rsqrt) { check_unary("rsqrt", [](auto& x) { return rsqrt(x); }, kAll, {1, 0}, Fill::Positive); }
TEST(Unary, Sin) { check_unary("sin", [](auto& x) { return sin(x); }, kAll, kTranscendental); }
TEST(Unary, Cos) { check_unary("cos", [](auto& x) { return cos(x); }, kAll, kTranscendental); }
TEST(Unary, Tanh) { check_unary("tanh", [](auto& x) { return tanh(x); }, kAll, kTranscendental); }
TEST(Unary, Sigmoid) { check_unary("sigmoid", [](auto& x) { return sigmoid(x); }, kAll, kComposite); }
TEST(Unary, Erf) { check_unary("erf", [](auto& x) { return erf(x); }, kAll, kTranscendental); }
TEST(Unary, Floor) { check_unary("floor", [](auto& x) { return floor(x); }, kNumeric, kExact); }
TEST(Unary, Ceil) { check_unary("ceil", [](auto& x) { return ceil(x); }, kNumeric, kExact); }
TEST(Unary, Round) { check_unary("round", [](auto& x) { return round(x); }, kNumeric, kExact); }
TEST(Unary, RoundingTiesAndSpecials) {
  for (DType dt : kFloats) {
    check_unary_loop([](auto& x) { return floor(x); }, [](double x) { return std::floor(x); }, dt, kExact, Fill::Ties);
    check_unary_loop([](auto& x) { return ceil(x); }, [](double x) { return std::ceil(x); }, dt, kExact, Fill::Ties);
    // k/2 values: half of them ties, which go to the even neighbour (torch.round)
    check_unary_loop([](auto& x) { return round(x); }, [](double x) { return std::nearbyint(x); }, dt, kExact, Fill::Ties);
    for (auto f : {+[](const Tensor& x) { return floor(x); }, +[](const Tensor& x) { return ceil(x); },
                   +[](const Tensor& x) { return round(x); }})
      EXPECT_INTERP(f(make(dt, {1027}, 91, Fill::Specials)), kExact, "rounding specials " + name_of(dt));
  }
  const Tensor r = round(from_vector<double>({0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999999999999994, 4503599627370497.0}));
  EXPECT_EQ(r.to_vector<double>(), (std::vector<double>{0, 2, 2, -0.0, -2, -2, 0, 4503599627370497.0}));
  EXPECT_TRUE(std::signbit(round(from_vector<double>({-0.5})).item<double>())); // -0, as torch
  EXPECT_TRUE(std::signbit(ceil(from_vector<float>({-0.5f})).item<float>()));
  EXPECT_EQ(floor(from_vector<int32_t>({-3, 4})).dtype(), kInt32); // integers unchanged
  EXPECT_THROW(floor(from_vector<bool>({true})), Error);
}
TEST(Unary, Reciprocal) { check_unary("reciprocal", [](auto& x) { return reciprocal(x); }, kAll, kExact); }
TEST(Unary, Neg) { check_unary("neg", [](auto& x) { return neg(x); }, kNumeric, kExact); }
TEST(Unary, NegOperator) { check_unary("-x", [](auto& x) { return -x; }, kNumeric, kExact); }
TEST(Unary, Abs) { check_unary("abs", [](auto& x) { return abs(x); }, kNumeric, kExact); }
TEST(Unary, Relu) { check_unary("relu", [](auto& x) { return relu(x); }, kNumeric, kExact); }
TEST(Unary, Square) { check_unary("square", [](auto& x) { return square(x); }, kNumeric, kExact); }
TEST(Unary, LogicalNot) { check_unary("logical_not", [](auto& x) { return logical_not(x); }, kAll, kExact); }

TEST(Unary, SpecialValues) {
  const std::vector<std::pair<std::string, Fn1>> ops = {
      {"exp", [](auto& x) { return exp(x); }},           {"log", [](auto& x) { return log(x); }},
      {"expm1", [](auto& x) { return expm1(x); }},       {"log1p", [](auto& x) { return log1p(x); }},
      {"sqrt", [](auto& x) { return sqrt(x); }},         {"rsqrt", [](auto& x) { return rsqrt(x); }},
      {"tanh", [](auto& x) { return tanh(x); }},         {"sigmoid", [](auto& x) { return sigmoid(x); }},
      {"reciprocal", [](auto& x) { return reciprocal(x); }}, {"neg", [](auto& x) { return neg(x); }},
      {"abs", [](auto& x) { return abs(x); }},           {"relu", [](auto& x) { return relu(x); }},
      {"logical_not", [](auto& x) { return logical_not(x); }}};
  for (const auto& [name, f] : ops)
    for (DType dt : kNumeric) {
      if (!is_floating(dt) && (name != "neg" && name != "abs" && name != "relu" && name != "logical_not")) continue;
      const Tol tol = name == "sigmoid" ? kComposite : kTranscendental;
      EXPECT_INTERP(f(make(dt, {257}, 3, Fill::Specials)), tol, name + " specials " + name_of(dt));
    }
}

TEST(Unary, SinCosSpecialValues) {
  // no huge arguments here (1e10, 1e30: see SinCosLargeArguments)
  const std::vector<double> v = {kNaN, kInf, -kInf, 0.0, -0.0, 1e-30, 3e-40, 88, -104, 1000, -12345.5, 3.14159265, 1.5707963};
  for (DType dt : kFloats) {
    EXPECT_INTERP(sin(tensor_of(v, dt, {13})), kTranscendental, "sin specials " + name_of(dt));
    EXPECT_INTERP(cos(tensor_of(v, dt, {13})), kTranscendental, "cos specials " + name_of(dt));
  }
}

TEST(Unary, SinCosLargeArguments) {
  const std::vector<double> v = {1e5, -3e6, 1e10};
  for (DType dt : kFloats) {
    EXPECT_INTERP(sin(tensor_of(v, dt, {3})), kTranscendental, "sin large " + name_of(dt));
    EXPECT_INTERP(cos(tensor_of(v, dt, {3})), kTranscendental, "cos large " + name_of(dt));
  }
}

// A documented limitation (README): the argument reduction is Cody-Waite in f64, not
// Payne-Hanek, so beyond about 1e10 sin/cos are not accurate; they stay in [-1, 1].
TEST(Unary, SinCosHugeArgumentsStayBounded) {
  const std::vector<double> v = {1e30, -2.5e38, 1e300};
  for (DType dt : kFloats) {
    const std::vector<double> s = sin(tensor_of(v, dt, {3})).to_vector<double>();
    const std::vector<double> c = cos(tensor_of(v, dt, {3})).to_vector<double>();
    for (size_t i = 0; i < s.size(); ++i) {
      if (dt == kFloat32 && i == 2) continue; // 1e300 is inf in f32: NaN, checked with the specials
      EXPECT_LE(std::abs(s[i]), 1.0) << v[i];
      EXPECT_LE(std::abs(c[i]), 1.0) << v[i];
    }
  }
}

/// A unary op on 4099 values spread over [lo, hi] (log-spaced magnitudes when `log_scale`,
/// both signs when `signed_values`) against the interpreter.
void check_range(const std::string& name, const Fn1& f, DType dt, double lo, double hi, bool log_scale, Tol tol,
                 bool signed_values = false) {
  std::vector<double> v;
  for (uint64_t k = 0; k < 4099; ++k) {
    const double u = uniform(77, k);
    double x = log_scale ? std::pow(10.0, lo + (hi - lo) * u) : lo + (hi - lo) * u;
    if (signed_values && uniform(78, k) < 0.5) x = -x;
    v.push_back(x);
  }
  EXPECT_INTERP(f(tensor_of(v, dt, {4099})), tol, name + " over the range of " + name_of(dt));
}

TEST(Unary, WideRanges) {
  const Tol tiny32{4, 1e-44}, tiny64{4, 1e-320}; // allow 1-bit differences among subnormal results
  for (DType dt : kFloats) {
    const bool f = dt == kFloat32;
    const Tol tol = f ? tiny32 : tiny64;
    check_range("exp", [](auto& x) { return exp(x); }, dt, f ? -104 : -745, f ? 89 : 710, false, tol);
    check_range("log", [](auto& x) { return log(x); }, dt, f ? -45 : -323, f ? 38 : 308, true, tol);
    check_range("sqrt", [](auto& x) { return sqrt(x); }, dt, f ? -45 : -323, f ? 38 : 308, true, kExact);
    check_range("rsqrt", [](auto& x) { return rsqrt(x); }, dt, f ? -37 : -307, f ? 38 : 308, true, {1, 0});
    check_range("expm1", [](auto& x) { return expm1(x); }, dt, f ? -104 : -745, f ? 89 : 710, false, tol);
    check_range("expm1 small", [](auto& x) { return expm1(x); }, dt, f ? -44 : -320, 0, true, tol, true);
    check_range("log1p", [](auto& x) { return log1p(x); }, dt, f ? -45 : -323, f ? 38 : 308, true, tol);
    check_range("log1p small", [](auto& x) { return log1p(x); }, dt, f ? -44 : -320, -0.1, true, tol, true);
    check_range("tanh", [](auto& x) { return tanh(x); }, dt, -30, 30, false, tol);
    check_range("tanh small", [](auto& x) { return tanh(x); }, dt, -20, 0, true, tol, true);
    check_range("erf", [](auto& x) { return erf(x); }, dt, -7, 7, false, tol);
    check_range("erf small", [](auto& x) { return erf(x); }, dt, f ? -44 : -320, 0, true, tol, true);
    check_range("sin", [](auto& x) { return sin(x); }, dt, -1e4, 1e4, false, tol);
    check_range("cos", [](auto& x) { return cos(x); }, dt, -1e4, 1e4, false, tol);
    check_range("sin small", [](auto& x) { return sin(x); }, dt, -20, 0, true, tol, true);
    check_range("sigmoid", [](auto& x) { return sigmoid(x); }, dt, f ? -110 : -750, f ? 110 : 750, false,
                f ? Tol{6, 1e-44} : Tol{6, 1e-320});
    check_range("reciprocal", [](auto& x) { return reciprocal(x); }, dt, f ? -38 : -308, f ? 38 : 308, true, kExact, true);
    check_range("pow", [](auto& x) { return pow(x, 2.5); }, dt, -10, 10, true, kPow);
  }
}

TEST(Unary, SignOfZero) {
  Tensor z = from_vector<float>({0.0f, -0.0f});
  const auto n = neg(z).to_vector<float>();
  EXPECT_TRUE(std::signbit(n[0]));
  EXPECT_FALSE(std::signbit(n[1]));
  const auto a = abs(z).to_vector<float>();
  EXPECT_FALSE(std::signbit(a[1])) << "abs(-0.0) must be +0.0";
  const auto s = sqrt(z).to_vector<float>();
  EXPECT_TRUE(std::signbit(s[1])) << "sqrt(-0.0) is -0.0 in IEEE";
  const auto r = reciprocal(z).to_vector<float>();
  EXPECT_EQ(r[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(r[1], -std::numeric_limits<float>::infinity());
}

TEST(Unary, AgainstLoops) {
  for (DType dt : kFloats) {
    check_unary_loop([](auto& x) { return exp(x); }, [](double x) { return std::exp(x); }, dt, kTranscendental);
    check_unary_loop([](auto& x) { return log(x); }, [](double x) { return std::log(x); }, dt, kTranscendental, Fill::Positive);
    check_unary_loop([](auto& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, dt, kExact, Fill::Positive);
    check_unary_loop([](auto& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, dt, {1, 0}, Fill::Positive);
    check_unary_loop([](auto& x) { return sin(x); }, [](double x) { return std::sin(x); }, dt, kTranscendental);
    check_unary_loop([](auto& x) { return cos(x); }, [](double x) { return std::cos(x); }, dt, kTranscendental);
    check_unary_loop([](auto& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, dt, kTranscendental);
    check_unary_loop([](auto& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, dt, kTranscendental);
    check_unary_loop([](auto& x) { return erf(x); }, [](double x) { return std::erf(x); }, dt, kTranscendental);
    check_unary_loop([](auto& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, dt, kExact);
    check_unary_loop([](auto& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, dt, kExact);
    check_unary_loop([](auto& x) { return abs(x); }, [](double x) { return std::fabs(x); }, dt, kExact);
  }
  for (DType dt : kInts) {
    check_unary_loop([](auto& x) { return neg(x); }, [](double x) { return -x; }, dt, kExact);
    check_unary_loop([](auto& x) { return abs(x); }, [](double x) { return std::fabs(x); }, dt, kExact);
    check_unary_loop([](auto& x) { return exp(x); }, [](double x) { return std::exp(x); }, dt, kTranscendental);
  }
}

TEST(Unary, IntegerWrapAround) {
  Tensor x = from_vector<int32_t>({std::numeric_limits<int32_t>::min(), -5, std::numeric_limits<int32_t>::max()});
  EXPECT_EQ(neg(x).to_vector<int32_t>(), (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 5, -2147483647}));
  EXPECT_EQ(abs(x).to_vector<int32_t>(), (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 5, 2147483647}));
  Tensor y = from_vector<int64_t>({std::numeric_limits<int64_t>::min(), 3});
  EXPECT_EQ(neg(y).to_vector<int64_t>(), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -3}));
}

TEST(Unary, ResultDtypes) {
  EXPECT_EQ(exp(make(kInt32, {3}, 1)).dtype(), kFloat32);
  EXPECT_EQ(sqrt(make(kInt64, {3}, 1)).dtype(), kFloat32);
  EXPECT_EQ(sigmoid(make(kBool, {3}, 1)).dtype(), kFloat32);
  EXPECT_EQ(exp(make(kFloat64, {3}, 1)).dtype(), kFloat64);
  EXPECT_EQ(neg(make(kInt32, {3}, 1)).dtype(), kInt32);
  EXPECT_EQ(logical_not(make(kFloat32, {3}, 1)).dtype(), kBool);
  EXPECT_EQ(square(make(kInt64, {3}, 1)).dtype(), kInt64);
}

// ---------------------------------------------------------------- binary ops

TEST(Unary, MoreMathWideRanges) {
  const Tol tiny32{4, 1e-44}, tiny64{4, 1e-320}; // allow 1-bit differences among subnormal results
  for (DType dt : kFloats) {
    const bool f = dt == kFloat32;
    const Tol tol = f ? tiny32 : tiny64;
    check_range(
        "sinh", [](auto& x) { return sinh(x); }, dt, f ? -90 : -711, f ? 90 : 711, false, tol);
    check_range(
        "cosh", [](auto& x) { return cosh(x); }, dt, f ? -90 : -711, f ? 90 : 711, false, tol);
    check_range(
        "exp2", [](auto& x) { return exp2(x); }, dt, f ? -151 : -1076, f ? 129 : 1025, false, tol);
    check_range(
        "log2", [](auto& x) { return log2(x); }, dt, f ? -45 : -323, f ? 38 : 308, true, tol);
    check_range(
        "log10", [](auto& x) { return log10(x); }, dt, f ? -45 : -323, f ? 38 : 308, true, tol);
    check_range(
        "atan", [](auto& x) { return atan(x); }, dt, f ? -45 : -323, f ? 38 : 308, true, tol, true);
    check_range(
        "asinh", [](auto& x) { return asinh(x); }, dt, f ? -45 : -323, f ? 38 : 308, true, tol, true);
    check_range(
        "acosh", [](auto& x) { return acosh(x); }, dt, 0, f ? 38 : 308, true, tol);
    check_range(
        "tan", [](auto& x) { return tan(x); }, dt, -1e4, 1e4, false, tol);
    check_range(
        "asin small", [](auto& x) { return asin(x); }, dt, f ? -44 : -320, 0, true, tol, true);
    check_range(
        "atanh small", [](auto& x) { return atanh(x); }, dt, f ? -44 : -320, 0, true, tol, true);
  }
}

TEST(Binary, Add) { check_binary("add", [](auto& a, auto& b) { return add(a, b); }, kNumeric, kExact); }
TEST(Binary, Sub) { check_binary("sub", [](auto& a, auto& b) { return a - b; }, kNumeric, kExact); }
TEST(Binary, Mul) { check_binary("mul", [](auto& a, auto& b) { return a * b; }, kNumeric, kExact); }
TEST(Binary, Div) { check_binary("div", [](auto& a, auto& b) { return a / b; }, kAll, kExact); }
TEST(Binary, PowFloat) { check_binary("pow", [](auto& a, auto& b) { return pow(a, b); }, kFloats, kPow, Fill::Positive, Fill::Exponent); }
TEST(Binary, PowFloatNegativeBase) { check_binary("pow", [](auto& a, auto& b) { return pow(a, b); }, kFloats, kPow, Fill::Normal, Fill::Ties); }
TEST(Binary, PowInt) { check_binary("pow", [](auto& a, auto& b) { return pow(a, b); }, kInts, kExact, Fill::Normal, Fill::Exponent); }
TEST(Binary, PowIntNegativeExponent) { check_binary("pow", [](auto& a, auto& b) { return pow(a, b); }, kInts, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, Maximum) { check_binary("maximum", [](auto& a, auto& b) { return maximum(a, b); }, kNumeric, kExact); }
TEST(Binary, Minimum) { check_binary("minimum", [](auto& a, auto& b) { return minimum(a, b); }, kNumeric, kExact); }
TEST(Binary, Eq) { check_binary("eq", [](auto& a, auto& b) { return a == b; }, kAll, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, Ne) { check_binary("ne", [](auto& a, auto& b) { return a != b; }, kAll, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, Lt) { check_binary("lt", [](auto& a, auto& b) { return a < b; }, kAll, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, Le) { check_binary("le", [](auto& a, auto& b) { return a <= b; }, kAll, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, Gt) { check_binary("gt", [](auto& a, auto& b) { return gt(a, b); }, kAll, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, Ge) { check_binary("ge", [](auto& a, auto& b) { return ge(a, b); }, kAll, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, LogicalAnd) { check_binary("logical_and", [](auto& a, auto& b) { return logical_and(a, b); }, kAll, kExact, Fill::Ties, Fill::Ties); }
TEST(Binary, LogicalOr) { check_binary("logical_or", [](auto& a, auto& b) { return logical_or(a, b); }, kAll, kExact, Fill::Ties, Fill::Ties); }

TEST(Binary, SpecialValues) {
  const std::vector<std::pair<std::string, Fn2>> ops = {
      {"add", [](auto& a, auto& b) { return a + b; }},         {"sub", [](auto& a, auto& b) { return a - b; }},
      {"mul", [](auto& a, auto& b) { return a * b; }},         {"div", [](auto& a, auto& b) { return a / b; }},
      {"pow", [](auto& a, auto& b) { return pow(a, b); }},     {"maximum", [](auto& a, auto& b) { return maximum(a, b); }},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); }}, {"eq", [](auto& a, auto& b) { return a == b; }},
      {"ne", [](auto& a, auto& b) { return a != b; }},         {"lt", [](auto& a, auto& b) { return a < b; }},
      {"ge", [](auto& a, auto& b) { return a >= b; }},         {"logical_and", [](auto& a, auto& b) { return logical_and(a, b); }},
      {"logical_or", [](auto& a, auto& b) { return logical_or(a, b); }}};
  for (const auto& [name, f] : ops)
    for (DType dt : kNumeric) {
      if (name == "pow" && !is_floating(dt)) continue; // integer pow of extremes: see PowInt
      Tensor a = make(dt, {16, 16}, 21, Fill::Specials), b = make(dt, {16, 16}, 22, Fill::Specials);
      const Tol tol = name == "pow" ? kPow : kExact;
      EXPECT_INTERP(f(a, b), tol, name + " specials " + name_of(dt));
      EXPECT_INTERP(f(a, b.t()), tol, name + " specials (transposed) " + name_of(dt));
    }
}

TEST(Binary, IntegerPowerRules) {
  Tensor base = from_vector<int32_t>({2, 3, -1, -1, 1, 0, 2, 5, -2, 0});
  Tensor e = from_vector<int32_t>({10, -1, -3, -2, -5, 0, 31, 0, 3, -1});
  EXPECT_EQ(pow(base, e).to_vector<int32_t>(), (std::vector<int32_t>{1024, 0, -1, 1, 1, 1, std::numeric_limits<int32_t>::min(), 1, -8, 0}));
  Tensor lb = from_vector<int64_t>({3, 2, -3});
  EXPECT_EQ(pow(lb, from_vector<int64_t>({39, 62, 3})).to_vector<int64_t>(),
            (std::vector<int64_t>{4052555153018976267LL, int64_t{1} << 62, -27}));
  EXPECT_EQ(pow(from_vector<int32_t>({3, -2}), 2).to_vector<int32_t>(), (std::vector<int32_t>{9, 4}));
}

TEST(Binary, FloatPowerSpecialCases) {
  Tensor x = from_vector<double>({2, -8, kNaN, 1, -2, 0, -0.0, kInf, -kInf, 0.5});
  Tensor e = from_vector<double>({0.5, 1.0 / 3, 0, kNaN, 3, -1, -1, -1, 3, kInf});
  const auto got = pow(x, e).to_vector<double>();
  const std::vector<double> want = {std::sqrt(2.0), kNaN, 1, 1, -8, kInf, -kInf, 0, -kInf, 0};
  EXPECT_TRUE(compare(got, want, kFloat64, kTranscendental));
}

TEST(Binary, IntegerWrapAround) {
  Tensor x = from_vector<int32_t>({2147483647, -2147483647 - 1, 65536});
  Tensor y = from_vector<int32_t>({1, 1, 65536});
  EXPECT_EQ((x + y).to_vector<int32_t>(), (std::vector<int32_t>{-2147483647 - 1, -2147483647, 131072}));
  EXPECT_EQ((x - y).to_vector<int32_t>(), (std::vector<int32_t>{2147483646, 2147483647, 0}));
  EXPECT_EQ((x * y).to_vector<int32_t>(), (std::vector<int32_t>{2147483647, -2147483647 - 1, 0}));
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ((from_vector<int64_t>({big}) + from_vector<int64_t>({1})).item<int64_t>(), std::numeric_limits<int64_t>::min());
}

TEST(Binary, NaNPropagation) {
  Tensor a = from_vector<float>({kNaNF, 1, kNaNF, 2, -0.0f});
  Tensor b = from_vector<float>({1, kNaNF, kNaNF, 3, 0.0f});
  const auto mx = maximum(a, b).to_vector<float>(), mn = minimum(a, b).to_vector<float>();
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(std::isnan(mx[k])) << k;
    EXPECT_TRUE(std::isnan(mn[k])) << k;
  }
  EXPECT_EQ(mx[3], 3);
  EXPECT_EQ(mn[3], 2);
  EXPECT_EQ((a == a).to_vector<bool>(), (std::vector<bool>{false, true, false, true, true}));
  EXPECT_EQ((a != a).to_vector<bool>(), (std::vector<bool>{true, false, true, false, false}));
  EXPECT_EQ((a < b).to_vector<bool>(), (std::vector<bool>{false, false, false, true, false}));
  EXPECT_EQ((a == b).to_vector<bool>(), (std::vector<bool>{false, false, false, false, true})); // -0 == 0
}

TEST(Binary, AgainstLoops) {
  for (DType dt : kFloats) {
    check_binary_loop([](auto& a, auto& b) { return a + b; }, [](double a, double b) { return a + b; }, dt, kExact);
    check_binary_loop([](auto& a, auto& b) { return a - b; }, [](double a, double b) { return a - b; }, dt, kExact);
    check_binary_loop([](auto& a, auto& b) { return a * b; }, [](double a, double b) { return a * b; }, dt, kExact);
    check_binary_loop([](auto& a, auto& b) { return a / b; }, [](double a, double b) { return a / b; }, dt, kExact);
    check_binary_loop([](auto& a, auto& b) { return pow(abs(a), b); }, [](double a, double b) { return std::pow(std::fabs(a), b); }, dt, kTranscendental, Fill::Exponent);
    check_binary_loop([](auto& a, auto& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }, dt, kExact);
    check_binary_loop([](auto& a, auto& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }, dt, kExact);
    check_binary_loop([](auto& a, auto& b) { return (a < b).to(kFloat64); }, [](double a, double b) { return a < b ? 1.0 : 0.0; }, dt, kExact);
  }
  for (DType dt : kInts) {
    check_binary_loop([](auto& a, auto& b) { return a * b - a; }, [](double a, double b) { return a * b - a; }, dt, kExact);
    check_binary_loop([](auto& a, auto& b) { return a / b; }, [](double a, double b) { return static_cast<float>(a) / static_cast<float>(b); }, dt, kExact);
  }
}

TEST(Binary, ScalarOperands) {
  for (DType dt : kNumeric) {
    Tensor x = make(dt, {4, 17}, 5, Fill::Positive);
    EXPECT_INTERP(x + 2, kExact, "x + 2 " + name_of(dt));
    EXPECT_INTERP(2 - x, kExact, "2 - x " + name_of(dt));
    EXPECT_INTERP(x * 1.5, kExact, "x * 1.5 " + name_of(dt));
    EXPECT_INTERP(3 / x, kExact, "3 / x " + name_of(dt));
    EXPECT_INTERP(x / 3, kExact, "x / 3 " + name_of(dt));
    EXPECT_INTERP(pow(x, 2), kTranscendental, "pow(x, 2) " + name_of(dt));
    EXPECT_INTERP(pow(x, 0.5), kTranscendental, "pow(x, 0.5) " + name_of(dt));
    EXPECT_INTERP(x > 2.5, kExact, "x > 2.5 " + name_of(dt));
  }
}

// ---------------------------------------------------------------- type promotion

TEST(Promotion, FollowsPyTorch) {
  Tensor i32 = make(kInt32, {3}, 1), i64 = make(kInt64, {3}, 2), f32 = make(kFloat32, {3}, 3);
  Tensor f64 = make(kFloat64, {3}, 4), b = make(kBool, {3}, 5);
  EXPECT_EQ((i32 + i64).dtype(), kInt64);
  EXPECT_EQ((i32 + 2).dtype(), kInt32);
  EXPECT_EQ((i32 + 2.5).dtype(), kFloat32);
  EXPECT_EQ((i64 * 2.5).dtype(), kFloat32);
  EXPECT_EQ((f64 + 1.5).dtype(), kFloat64);
  EXPECT_EQ((f32 + 1.5).dtype(), kFloat32);
  EXPECT_EQ((b + 1).dtype(), kInt64);
  EXPECT_EQ((b + 1.5).dtype(), kFloat32);
  EXPECT_EQ((i32 / i32).dtype(), kFloat32);
  EXPECT_EQ((i64 / 2).dtype(), kFloat32);
  EXPECT_EQ((i32 + f64).dtype(), kFloat64);
  EXPECT_EQ((i64 + f32).dtype(), kFloat32);
  EXPECT_EQ((f32 + f64).dtype(), kFloat64);
  EXPECT_EQ((f32 + scalar_tensor(1.5, kFloat64)).dtype(), kFloat32); // 0-d tensors rank below dimensioned ones
  EXPECT_EQ((i32 + scalar_tensor(1.5, kFloat64)).dtype(), kFloat64); // ... unless of a higher category
  EXPECT_EQ((i32 + scalar_tensor(7, kInt64)).dtype(), kInt32);
  EXPECT_EQ(sum(i32).dtype(), kInt64);
  EXPECT_EQ(sum(b).dtype(), kInt64);
  EXPECT_EQ(sum(f32).dtype(), kFloat32);
  EXPECT_EQ(mean(f64).dtype(), kFloat64);
  EXPECT_EQ(maximum(i32, f32).dtype(), kFloat32);
  EXPECT_EQ(where(b, i32, f32).dtype(), kFloat32);
  EXPECT_EQ(where(b, f32, 1).dtype(), kFloat32);
  EXPECT_EQ(where(b, i32, 1.5).dtype(), kFloat32);
  EXPECT_EQ(concat({i32, f64}).dtype(), kFloat64);
  EXPECT_EQ(matmul(i32, f32).dtype(), kFloat32);
  EXPECT_EQ(pow(i32, 2.5).dtype(), kFloat32);
  EXPECT_EQ(pow(f32, 2).dtype(), kFloat32);
  EXPECT_EQ((i32 < 2.5).dtype(), kBool);
  EXPECT_EQ(argmax(f32, 0).dtype(), kInt64);
}

TEST(Promotion, ValuesOfMixedOps) {
  Tensor i32 = from_vector<int32_t>({1, 2, 3}), i64 = from_vector<int64_t>({int64_t{1} << 40, -5, 7});
  EXPECT_EQ((i32 + i64).to_vector<int64_t>(), (std::vector<int64_t>{(int64_t{1} << 40) + 1, -3, 10}));
  EXPECT_EQ((i32 + 2.5).to_vector<float>(), (std::vector<float>{3.5f, 4.5f, 5.5f}));
  EXPECT_EQ((i32 < 2.5).to_vector<bool>(), (std::vector<bool>{true, true, false})); // compared in f32, not truncated
  EXPECT_EQ((i32 / 2).to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f}));
  Tensor b = from_vector<bool>({true, false, true});
  EXPECT_EQ((b + 1).to_vector<int64_t>(), (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(sum(b).item<int64_t>(), 2);
  Tensor big = full({3}, 2000000000, kInt32);
  EXPECT_EQ(sum(big).item<int64_t>(), 6000000000LL) << "i32 sums accumulate in i64";
  Tensor f = from_vector<double>({0.1, 0.2});
  EXPECT_EQ((f + 1.1).to_vector<double>(), (std::vector<double>{0.1 + 1.1, 0.2 + 1.1})) << "f64 keeps the double scalar";
  EXPECT_EQ((from_vector<float>({0.1f}) + 0.1).item<float>(), 0.1f + static_cast<float>(0.1));
}

// Arithmetic on bools as PyTorch's: bool + bool is logical or and bool * bool logical and (bool results,
// maximum and minimum too, also with a C++ bool or a 0-d bool); a bool with numbers promotes.
// torch (a = [T, T, F, F], b = [T, F, T, F], i = int32 [[1], [-2]], f = [0.5, -1.5, 2., 4.]):
TEST(Promotion, BoolArithmeticFollowsPyTorch) {
  const Tensor a = from_vector<bool>({true, true, false, false}), b = from_vector<bool>({true, false, true, false});
  using B = std::vector<bool>;
  auto expect_bool = [](const Tensor& t, const B& want, const char* what) {
    EXPECT_EQ(t.dtype(), kBool) << what;
    EXPECT_EQ(t.to_vector<bool>(), want) << what;
  };
  expect_bool(a + b, {true, true, true, false}, "a + b");                   // [T, T, T, F]
  expect_bool(a * b, {true, false, false, false}, "a * b");                 // [T, F, F, F]
  expect_bool(maximum(a, b), {true, true, true, false}, "maximum(a, b)");   // [T, T, T, F]
  expect_bool(minimum(a, b), {true, false, false, false}, "minimum(a, b)"); // [T, F, F, F]
  expect_bool(a + true, {true, true, true, true}, "a + True");              // [T, T, T, T]
  expect_bool(a * false, {false, false, false, false}, "a * False");        // [F, F, F, F]
  expect_bool(true * a, {true, true, false, false}, "True * a");            // [T, T, F, F]
  expect_bool(a + scalar_tensor(true, kBool), {true, true, true, true}, "a + torch.tensor(True)");
  // (b.reshape(4, 1) + a) -> rows [T, T, T, T], [T, T, F, F], [T, T, T, T], [T, T, F, F]
  expect_bool(b.reshape({4, 1}) + a, {true, true, true, true, true, true, false, false, true, true, true, true, true, true, false, false},
              "broadcast");
  const Tensor i = from_vector<int32_t>({1, -2}, {2, 1}), f = from_vector<float>({0.5f, -1.5f, 2, 4});
  EXPECT_EQ((a + i).dtype(), kInt32); // a + i -> [[2, 2, 1, 1], [-1, -1, -2, -2]], int32
  EXPECT_EQ((a + i).to_vector<int32_t>(), (std::vector<int32_t>{2, 2, 1, 1, -1, -1, -2, -2}));
  EXPECT_EQ((a * f).to_vector<float>(), (std::vector<float>{0.5f, -1.5f, 0, 0})); // a * f -> [0.5, -1.5, 0., 0.], float32
  EXPECT_EQ((a + 2).to_vector<int64_t>(), (std::vector<int64_t>{3, 3, 2, 2}));    // a + 2 -> [3, 3, 2, 2], int64
  EXPECT_EQ((a * 2.5).dtype(), kFloat32);                                         // a * 2.5 -> [2.5, 2.5, 0., 0.], float32
  EXPECT_EQ((a * 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 0, 0}));
  EXPECT_EQ((a + scalar_tensor(3, kInt64)).to_vector<int64_t>(), (std::vector<int64_t>{4, 4, 3, 3})); // int64
  EXPECT_EQ((a + scalar_tensor(1.5, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(maximum(a, i).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 0, 0})); // int32
  EXPECT_EQ((a / b).dtype(), kFloat32); // a / b -> [1., inf, 0., nan]
  // bool - bool, bool - number and number - bool raise in PyTorch ("Subtraction, the `-` operator, with
  // two bool tensors / with a bool tensor is not supported"), pow of bools too
  EXPECT_THROW(a - b, Error);
  EXPECT_THROW(a - true, Error);
  EXPECT_THROW(a - 1, Error);
  EXPECT_THROW(1.5 - a, Error);
  EXPECT_THROW(f - a, Error);
  EXPECT_THROW(pow(a, b), Error);
  EXPECT_INTERP(a + b, kExact, "bool + bool");
  EXPECT_INTERP(b.reshape({4, 1}) * a, kExact, "bool * bool, broadcast");
}

// ---------------------------------------------------------------- where and casts

TEST(Where, BroadcastsAllOperands) {
  uint64_t seed = 300;
  for (DType dt : kAll)
    for (const auto& [sa, sb] : kPairs) {
      Tensor c = make(kBool, sa, ++seed), a = make(dt, sb, ++seed), b = make(dt, sa, ++seed);
      const std::string label = "where " + name_of(dt) + shape_of(sa) + "," + shape_of(sb);
      EXPECT_INTERP(where(c, a, b), kExact, label);
      EXPECT_INTERP(where(c, b, a), kExact, label + " (swapped)");
      if (sa.size() >= 2 && sb.size() == sa.size())
        EXPECT_INTERP(where(c.transpose(0, 1), a.transpose(0, 1), b.transpose(0, 1)), kExact, label + " transposed");
      if (dt != kBool) EXPECT_INTERP(where(c, a, 7), kExact, label + " scalar");
    }
}

TEST(Where, DoesNotPropagateNaNFromTheOtherBranch) {
  Tensor c = from_vector<bool>({true, false});
  Tensor a = from_vector<float>({1, kNaNF}), b = from_vector<float>({kNaNF, 2});
  EXPECT_EQ(where(c, a, b).to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(Cast, EveryPairOfDtypes) {
  for (DType from : kAll)
    for (DType to : kAll)
      for (Fill fill : {Fill::Normal, Fill::Specials, Fill::Ties}) {
        const std::string label = "cast " + name_of(from) + "->" + name_of(to);
        EXPECT_INTERP(make(from, {1027}, 40, fill).to(to), kExact, label);
        EXPECT_INTERP(make(from, {5, 7}, 41, fill).t().to(to), kExact, label + " transposed");
      }
}

TEST(Cast, FloatToIntSaturatesAndTruncates) {
  Tensor x = from_vector<float>({1e10f, -1e10f, kNaNF, -2.7f, 2.7f, -0.0f, kInfF, -kInfF, 2147483520.0f});
  EXPECT_EQ(x.to(kInt32).to_vector<int32_t>(),
            (std::vector<int32_t>{2147483647, -2147483647 - 1, 0, -2, 2, 0, 2147483647, -2147483647 - 1, 2147483520}));
  EXPECT_EQ(x.to(kInt64).to_vector<int64_t>(),
            (std::vector<int64_t>{10000000000LL, -10000000000LL, 0, -2, 2, 0, std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min(), 2147483520}));
  EXPECT_EQ(x.to(kBool).to_vector<bool>(), (std::vector<bool>{true, true, true, true, true, false, true, true, true}));
}

TEST(Cast, FoldedConstantCastsAreExact) {
  // casts of constants are folded at graph-build time; they must give what the kernel gives
  const int64_t big = (int64_t{1} << 62) + 1;
  EXPECT_EQ(full({1}, big, kInt64).to(kInt32).item<int32_t>(), 1) << "i64 -> i32 of 2^62+1 wraps to 1";
  EXPECT_EQ(from_vector<int64_t>({big}, {1}).to(kInt32).item<int32_t>(), 1);
  const int64_t x = (int64_t{1} << 60) + (int64_t{1} << 36) + 1; // rounds up to f32 directly, down via f64
  EXPECT_EQ(from_vector<int64_t>({x}, {1}).to(kFloat32).item<float>(), static_cast<float>(x));
  EXPECT_EQ(full({1}, x, kInt64).to(kFloat32).item<float>(), static_cast<float>(x));
  EXPECT_EQ((from_vector<float>({0.0f}, {1}) + x).item<float>(), static_cast<float>(x)) << "int scalar into f32";
}

TEST(Cast, IntegerConversions) {
  Tensor x = from_vector<int64_t>({(int64_t{1} << 32) + 5, 16777217, -1, (int64_t{1} << 53) + 1});
  EXPECT_EQ(x.to(kInt32).to_vector<int32_t>(), (std::vector<int32_t>{5, 16777217, -1, 1}));
  EXPECT_EQ(x.to(kFloat32).to_vector<float>(), (std::vector<float>{4294967296.0f, 16777216.0f, -1, 9007199254740992.0f}));
  EXPECT_EQ(x.to(kFloat64).to_vector<double>(), (std::vector<double>{4294967301.0, 16777217, -1, 9007199254740992.0}));
  EXPECT_EQ(x.to(kBool).to_vector<bool>(), (std::vector<bool>{true, true, true, true}));
  // constant folding of casts must wrap like the kernel does
  EXPECT_EQ(full({2}, (int64_t{1} << 32) + 5, kInt64).to(kInt32).to_vector<int32_t>(), (std::vector<int32_t>{5, 5}));
}

// ---------------------------------------------------------------- reductions

using ReduceFn = std::function<Tensor(const Tensor&, const IntList&, bool)>;

/// Shapes with the dim lists to reduce over.
const std::vector<std::pair<IntList, std::vector<IntList>>> kReductions = {
    {{}, {{}}},
    {{1}, {{}, {0}}},
    {{7}, {{}, {0}, {-1}}},
    {{1027}, {{}, {0}}},
    {{3, 5, 17}, {{}, {0}, {1}, {2}, {-1}, {0, 2}, {2, 0}, {0, 1}, {1, 2}, {0, 1, 2}}},
    {{4, 1, 6}, {{1}, {0, 1}, {2}}},
    {{33, 65}, {{0}, {1}}},
    {{2, 3, 4, 5}, {{1, 3}, {0, 3}, {-2}}},
};

/// Unit roundoff of a dtype (0 for integers: exact).
double unit_roundoff(DType dt) { return dt == kFloat32 ? 0x1p-24 : dt == kFloat64 ? 0x1p-53 : 0; }

/// Per-element error scale of a sum-like op: `same_op_on_abs` evaluated by the interpreter
/// (sum |x| for a sum); the tolerance is a multiple of it.
std::vector<double> abs_scale(const Tensor& same_op_on_abs) { return graph::interpret_one(same_op_on_abs.node()).values; }

/// Number of elements reduced into each result element.
int64_t reduced_count(const IntList& shape, const IntList& dims) {
  int64_t n = 1;
  if (dims.empty()) {
    for (int64_t e : shape) n *= e;
    return n;
  }
  for (int64_t d : dims) n *= shape[d < 0 ? d + static_cast<int64_t>(shape.size()) : d];
  return n;
}

/// A reduction over every shape, dim list and view, with and without keepdim.
void check_reduce(const std::string& name, const ReduceFn& f, const std::vector<DType>& dts, Fill fill,
                  bool allow_empty, bool is_sum) {
  uint64_t seed = 500;
  for (DType dt : dts)
    for (const auto& [shape, dim_lists] : kReductions)
      for (View v : kViews)
        for (const IntList& dims : dim_lists)
          for (bool keep : {false, true}) {
            auto x = make_view(dt, shape, v, ++seed, fill);
            if (!x) continue;
            const std::string label = name + " " + name_of(dt) + shape_of(shape) + " dims " + shape_of(dims) +
                                      (keep ? " keepdim " : " ") + view_name(v);
            if (!is_sum || !is_floating(dt)) {
              EXPECT_INTERP(f(*x, dims, keep), kExact, label);
              continue;
            }
            // the classic bound of a float sum of n terms in any order: n u sum |x|
            const std::vector<double> scale = abs_scale(f(abs(*x), dims, keep));
            const double n = static_cast<double>(reduced_count(shape, dims));
            EXPECT_TRUE(matches_interpreter(f(*x, dims, keep), {0, unit_roundoff(dt) * (n + 1)}, &scale)) << label;
          }
  if (!allow_empty) return;
  for (DType dt : dts)
    for (const IntList& dims : std::vector<IntList>{{1}, {0}, {}, {0, 2}})
      EXPECT_INTERP(f(make(dt, {2, 0, 3}, 9, fill), dims, false), kExact, name + " zero-size " + shape_of(dims));
}

TEST(Reduce, Sum) { check_reduce("sum", [](auto& x, auto& d, bool k) { return sum(x, d, k); }, kAll, Fill::Normal, true, true); }
TEST(Reduce, Mean) { check_reduce("mean", [](auto& x, auto& d, bool k) { return mean(x, d, k); }, kFloats, Fill::Normal, true, true); }
TEST(Reduce, Max) { check_reduce("max", [](auto& x, auto& d, bool k) { return max(x, d, k); }, kNumeric, Fill::Normal, false, false); }
TEST(Reduce, Min) { check_reduce("min", [](auto& x, auto& d, bool k) { return x.min(d, k); }, kNumeric, Fill::Normal, false, false); }
TEST(Reduce, MaxWithSpecials) { check_reduce("max", [](auto& x, auto& d, bool k) { return max(x, d, k); }, kNumeric, Fill::Specials, false, false); }
TEST(Reduce, MinWithSpecials) { check_reduce("min", [](auto& x, auto& d, bool k) { return min(x, d, k); }, kNumeric, Fill::Specials, false, false); }
// Rows long enough for the CPU's fast max/min pass (a vector of terms or more) and short ones:
// the signed zero PyTorch returns (max: +0 if any term is +0; min: -0 if any is -0), NaN
// anywhere in the row, infinities and plain rows, bit for bit, in both fusion modes.
TEST(Reduce, MaxMinOfZerosAndNaNKeepTheirBits) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : kFloats)
    for (int64_t n : {7, 16, 40}) {
      // rows: [0] negatives, -0s and one +0 late; [1] negatives and -0s; [2] positives, +0s and one
      // -0 late; [3] positives and +0s; [4] a NaN at the end; [5] all -inf; [6] plain values
      std::vector<double> v;
      for (int row = 0; row < 7; ++row)
        for (int64_t j = 0; j < n; ++j) {
          const double x = static_cast<double>((j * 7 + row) % 11) + 1.0;
          double e = row == 0 || row == 1 ? -x : x;
          if ((row == 0 || row == 1) && j % 3 == 0) e = -0.0;
          if (row == 0 && j == n - 2) e = 0.0;
          if ((row == 2 || row == 3) && j % 4 == 1) e = 0.0;
          if (row == 2 && j == n - 3) e = -0.0;
          if (row == 4 && j == n - 1) e = nan;
          if (row == 5) e = -inf;
          if (row == 6) e = std::sin(static_cast<double>(j)) * 3.0;
          v.push_back(e);
        }
      const Tensor x = tensor_of(v, dt, {7, n});
      const std::string label = name_of(dt) + " rows of " + std::to_string(n);
      const std::vector<double> hi = max(x, {1}).to_vector<double>(), lo = min(x, {1}).to_vector<double>();
      EXPECT_TRUE(hi[0] == 0.0 && !std::signbit(hi[0])) << label << ": max " << hi[0];
      EXPECT_TRUE(hi[1] == 0.0 && std::signbit(hi[1])) << label << ": max " << hi[1];
      EXPECT_TRUE(lo[2] == 0.0 && std::signbit(lo[2])) << label << ": min " << lo[2];
      EXPECT_TRUE(lo[3] == 0.0 && !std::signbit(lo[3])) << label << ": min " << lo[3];
      EXPECT_TRUE(std::isnan(hi[4]) && std::isnan(lo[4])) << label;
      EXPECT_EQ(hi[5], -inf) << label;
      EXPECT_EQ(lo[5], -inf) << label;
      EXPECT_INTERP(max(x, {1}), kExact, "max " + label);
      EXPECT_INTERP(min(x, {1}), kExact, "min " + label);
    }
}

TEST(Reduce, SumWithSpecials) {
  for (DType dt : kNumeric) EXPECT_INTERP(sum(make(dt, {8, 64}, 77, Fill::Specials), {1}), kExact, "sum specials " + name_of(dt));
}

TEST(Reduce, LongFloatSumsRunInBlocks) {
  // A float sum over a long last dim runs in blocks of 16384 (lower.cpp, kSumBlock), each one lane
  // partial, the partials in order: 2^22 times 0.1f came out 2.5e-3 too small in one run of lanes
  // (PyTorch: 3e-7). A ragged last block adds nothing past the end; the result is the same fused
  // and unfused, on 1 and 2 threads (the order is the kernel IR's).
  for (const int64_t n : {int64_t{1} << 22, (int64_t{1} << 22) + 77, int64_t{3} * 16384 + 1}) {
    const double want = static_cast<double>(0.1f) * static_cast<double>(n);
    const Tensor x = full({n}, 0.1f);
    const double got = x.sum().item<float>();
    EXPECT_LT(std::abs(got - want) / want, 2e-5) << n;
    const Tensor rows = full({2, n}, 0.1f) + arange(0, 2, 1, kFloat32).reshape({2, 1}); // a row each
    const std::vector<float> fused = rows.sum({1}).to_vector<float>();
    EXPECT_LT(std::abs(fused[1] - (want + static_cast<double>(n))) / (want + static_cast<double>(n)), 2e-5) << n;
    const bool saved = options().fusion;
    options().fusion = false;
    const std::vector<float> unfused = (full({2, n}, 0.1f) + arange(0, 2, 1, kFloat32).reshape({2, 1})).sum({1}).to_vector<float>();
    options().fusion = saved;
    EXPECT_EQ(fused, unfused) << n;
    std::vector<float> two;
    {
      tbb::global_control g(tbb::global_control::max_allowed_parallelism, 2);
      two = (full({2, n}, 0.1f) + arange(0, 2, 1, kFloat32).reshape({2, 1})).sum({1}).to_vector<float>();
    }
    EXPECT_EQ(fused, two) << n;
  }
  // against the f64 interpreter, with a view and a ragged block
  EXPECT_INTERP(sum(make(DType::Float64, {3, 40000}, 78, Fill::Normal), {1}), (Tol{64, 1e-12}), "long f64 sum");
}

/// An arg-reduction over every dim of each shape, with ties and NaN.
void check_arg(const std::string& name, bool is_max, const std::vector<DType>& dts, Fill fill) {
  uint64_t seed = 900;
  for (DType dt : dts)
    for (const IntList& shape : std::vector<IntList>{{}, {1}, {7}, {1027}, {3, 5, 17}, {4, 1, 6}, {33, 65}})
      for (View v : kViews)
        for (int64_t d = -1; d < static_cast<int64_t>(shape.size()); ++d)
          for (bool keep : {false, true}) {
            auto x = make_view(dt, shape, v, ++seed, fill);
            if (!x) continue;
            Tensor r = is_max ? argmax(*x, d, keep) : x->argmin(d, keep);
            EXPECT_INTERP(r, kExact, name + " " + name_of(dt) + shape_of(shape) + " dim " + std::to_string(d) +
                                         (keep ? " keepdim " : " ") + view_name(v));
          }
}

TEST(Reduce, Argmax) { check_arg("argmax", true, kNumeric, Fill::Normal); }
TEST(Reduce, Argmin) { check_arg("argmin", false, kNumeric, Fill::Normal); }
TEST(Reduce, ArgmaxTies) { check_arg("argmax", true, kNumeric, Fill::Ties); }
TEST(Reduce, ArgminTies) { check_arg("argmin", false, kNumeric, Fill::Ties); }
TEST(Reduce, ArgmaxSpecials) { check_arg("argmax", true, kNumeric, Fill::Specials); }
TEST(Reduce, ArgminSpecials) { check_arg("argmin", false, kNumeric, Fill::Specials); }

TEST(Reduce, ArgHandValues) {
  Tensor x = from_vector<float>({1, 3, 3, 0, kNaNF, 2, kNaNF, -1, 0, 0, 0, 0}, {3, 4});
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 0}));
  EXPECT_EQ(argmax(x, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(argmax(x, 1, true).shape(), (IntList{3, 1}));
  Tensor y = from_vector<float>({-kInfF, -kInfF, 2, kInfF, kInfF});
  EXPECT_EQ(argmax(y, 0).item<int64_t>(), 3);
  EXPECT_EQ(argmin(y, 0).item<int64_t>(), 0);
  EXPECT_EQ(argmax(scalar_tensor(5.0), 0).item<int64_t>(), 0);
}

TEST(Reduce, HandValues) {
  Tensor x = from_vector<double>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3, 2});
  EXPECT_EQ(sum(x, {1}).to_vector<double>(), (std::vector<double>{6, 9, 24, 27}));
  EXPECT_EQ(sum(x, {1}, true).shape(), (IntList{2, 1, 2}));
  EXPECT_EQ(sum(x, {0, 2}).to_vector<double>(), (std::vector<double>{14, 22, 30}));
  EXPECT_EQ(sum(x).item<double>(), 66);
  EXPECT_EQ(sum(x).dim(), 0);
  EXPECT_EQ(mean(x, {0}).to_vector<double>(), (std::vector<double>{3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(max(x, {0, 1}).to_vector<double>(), (std::vector<double>{10, 11}));
  EXPECT_EQ(min(x, {2}, true).to_vector<double>(), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(sum(from_vector<float>({}, {2, 0}), {1}).to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_TRUE(std::isnan(mean(from_vector<float>({}, {0})).item<float>())) << "mean of nothing is NaN";
  Tensor nan = from_vector<float>({1, kNaNF, 3});
  EXPECT_TRUE(std::isnan(max(nan).item<float>()));
  EXPECT_TRUE(std::isnan(min(nan).item<float>()));
  EXPECT_TRUE(std::isnan(sum(nan).item<float>()));
}

TEST(Reduce, AgainstLoops) {
  const std::vector<double> v = values(kFloat64, 3 * 5 * 7, 61, Fill::Normal);
  Tensor x = tensor_of(v, kFloat64, {3, 5, 7});
  std::vector<double> s(3 * 7, 0), m(5, -kInf);
  std::vector<int64_t> am(3 * 5, 0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 7; ++k) {
        const double e = v[(i * 5 + j) * 7 + k];
        s[i * 7 + k] += e;
        m[j] = std::max(m[j], e);
        if (e > v[(i * 5 + j) * 7 + am[i * 5 + j]]) am[i * 5 + j] = k;
      }
  EXPECT_TRUE(compare(sum(x, {1}).to_vector<double>(), s, kFloat64, {0, 1e-14}));
  EXPECT_TRUE(compare(max(x, {0, 2}).to_vector<double>(), m, kFloat64, kExact));
  EXPECT_EQ(argmax(x, 2).to_vector<int64_t>(), am);
  std::vector<double> mean_t(5, 0); // mean over dim 0 of the transposed [7,5,3] view, summed back over k
  Tensor xt = x.permute({2, 1, 0});
  Tensor mt = mean(xt, {0, 2});
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 7; ++k) mean_t[j] += v[(i * 5 + j) * 7 + k] / 21;
  EXPECT_TRUE(compare(mt.to_vector<double>(), mean_t, kFloat64, {0, 1e-14}));
}

TEST(Reduce, IntegerSums) {
  Tensor x = from_vector<int64_t>({std::numeric_limits<int64_t>::max(), 1, 5});
  EXPECT_EQ(sum(x).item<int64_t>(), std::numeric_limits<int64_t>::min() + 5) << "i64 sums wrap";
  EXPECT_EQ(max(from_vector<int32_t>({-7, -3, -9})).item<int32_t>(), -3);
  EXPECT_EQ(min(from_vector<int64_t>({int64_t{1} << 60, 3})).item<int64_t>(), 3);
}

// ---------------------------------------------------------------- movement

TEST(Movement, Reshape) {
  for (DType dt : kAll) {
    Tensor x = make(dt, {4, 6}, 71);
    EXPECT_INTERP(x.reshape({2, 12}), kExact, "reshape " + name_of(dt));
    EXPECT_INTERP(x.reshape({-1}), kExact, "reshape -1");
    EXPECT_INTERP(x.reshape({3, -1, 2}), kExact, "reshape 3,-1,2");
    EXPECT_INTERP(x.t().reshape({24}), kExact, "non-viewable reshape of a transpose");
    EXPECT_INTERP(x.t().reshape({8, 3}), kExact, "non-viewable reshape of a transpose");
    EXPECT_INTERP(logical_not(x.t().reshape({2, 3, 4})), kExact, "reshape of a transpose, fused into a consumer");
    EXPECT_INTERP(make(dt, {2, 3, 4}, 72).permute({2, 0, 1}).reshape({4, 6}), kExact, "reshape of a permute");
    EXPECT_INTERP(make(dt, {2, 3, 4}, 73).permute({1, 2, 0}).reshape({-1, 2}), kExact, "reshape of a permute");
    EXPECT_INTERP(make(dt, {0, 3}, 74).reshape({3, 0, 5}), kExact, "reshape of zero-size");
    EXPECT_INTERP(make(dt, {1}, 75).reshape({}), kExact, "reshape to 0-d");
    EXPECT_INTERP(make(dt, {}, 76).reshape({1, 1, 1}), kExact, "reshape of 0-d");
    EXPECT_INTERP(make(dt, {6, 1, 5}, 77).slice(0, 1, 6, 2).reshape({15}), kExact, "reshape of a slice");
    EXPECT_INTERP(make(dt, {3, 1}, 78).expand({3, 4}).reshape({2, 6}), kExact, "reshape of an expand");
    EXPECT_INTERP(make(dt, {6, 5}, 79).t().flatten(), kExact, "flatten");
    EXPECT_INTERP(make(dt, {6, 5}, 80).t().unsqueeze(1).squeeze(1), kExact, "unsqueeze/squeeze");
  }
}

TEST(Movement, ReshapeAgainstLoop) {
  const std::vector<double> v = values(kFloat32, 24, 81, Fill::Normal);
  Tensor x = tensor_of(v, kFloat32, {2, 3, 4});
  // permute {2, 0, 1} then reshape to [4, 6]: element (a, b*3+c) = x[b][c][a]
  std::vector<double> want;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) want.push_back(static_cast<float>(v[(b * 3 + c) * 4 + a]));
  EXPECT_TRUE(compare(x.permute({2, 0, 1}).reshape({4, 6}).to_vector<double>(), want, kFloat32, kExact));
}

TEST(Movement, PermuteAndTranspose) {
  for (DType dt : kAll) {
    Tensor x = make(dt, {2, 3, 5, 7}, 82);
    for (IntList p : std::vector<IntList>{{3, 2, 1, 0}, {0, 2, 1, 3}, {1, 3, 0, 2}, {-1, 0, 1, 2}})
      EXPECT_INTERP(x.permute(p), kExact, "permute " + shape_of(p) + " " + name_of(dt));
    EXPECT_INTERP(x.transpose(1, -1), kExact, "transpose");
    EXPECT_INTERP(x.permute({3, 2, 1, 0}).permute({3, 2, 1, 0}), kExact, "double permute");
    EXPECT_INTERP(make(dt, {1027, 3}, 83).t(), kExact, "t of 1027x3");
    EXPECT_INTERP(make(dt, {17}, 84).t(), kExact, "t of 1-d");
  }
  const std::vector<double> v = values(kFloat64, 2 * 3 * 4, 85, Fill::Normal);
  std::vector<double> want; // permute {2, 0, 1}: out[a][b][c] = x[b][c][a]
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) want.push_back(v[(b * 3 + c) * 4 + a]);
  EXPECT_TRUE(compare(tensor_of(v, kFloat64, {2, 3, 4}).permute({2, 0, 1}).to_vector<double>(), want, kFloat64, kExact));
}

TEST(Movement, Expand) {
  for (DType dt : kAll) {
    EXPECT_INTERP(make(dt, {3, 1}, 86).expand({3, 1027}), kExact, "expand " + name_of(dt));
    EXPECT_INTERP(make(dt, {1}, 87).expand({2, 5, 7}), kExact, "expand adds dims");
    EXPECT_INTERP(make(dt, {}, 88).expand({4, 3}), kExact, "expand 0-d");
    EXPECT_INTERP(make(dt, {1, 4}, 89).expand({-1, 4}), kExact, "expand -1");
    EXPECT_INTERP(make(dt, {2, 1}, 90).expand({0, 2, 3}), kExact, "expand to zero-size");
    EXPECT_INTERP(make(dt, {1, 3}, 91).t().expand({3, 5}), kExact, "expand a transpose");
  }
}

TEST(Movement, Slice) {
  for (DType dt : kAll) {
    Tensor x = make(dt, {9, 1027}, 92);
    EXPECT_INTERP(x.slice(1, 3, 1000, 7), kExact, "slice step 7 " + name_of(dt));
    EXPECT_INTERP(x.slice(0, -4, -1), kExact, "slice negative bounds");
    EXPECT_INTERP(x.slice(0, -100, 100, 3), kExact, "slice clamped bounds");
    EXPECT_INTERP(x.slice(1, 5, 2), kExact, "empty slice");
    EXPECT_INTERP(x.slice(1, 1026, 2000), kExact, "last element");
    EXPECT_INTERP(x.slice(0, 1, 8, 2).slice(1, 2, 900, 3).slice(0, 1, 3), kExact, "slice of slice");
    EXPECT_INTERP(x.t().slice(0, 7, 30, 5), kExact, "slice of a transpose");
    EXPECT_INTERP(x.slice(0, 2, 3).expand({4, 1027}), kExact, "expand of a size-1 slice");
  }
  const std::vector<double> v = values(kInt64, 50, 93, Fill::Normal);
  std::vector<int64_t> want;
  for (int k = 3; k < 47; k += 4) want.push_back(static_cast<int64_t>(v[k]));
  EXPECT_EQ(tensor_of(v, kInt64, {50}).slice(0, -47, -3, 4).to_vector<int64_t>(), want);
}

TEST(Movement, Concat) {
  for (DType dt : kAll) {
    Tensor a = make(dt, {3, 5}, 94), b = make(dt, {3, 2}, 95), c = make(dt, {3, 0}, 96), d = make(dt, {3, 1}, 97);
    EXPECT_INTERP(concat({a, b, c, d}, 1), kExact, "concat dim 1 " + name_of(dt));
    EXPECT_INTERP(concat({a, b}, -1), kExact, "concat dim -1");
    EXPECT_INTERP(concat({c, a}, 1), kExact, "concat leading empty");
    EXPECT_INTERP(concat({a.t(), b.t(), d.t()}, 0), kExact, "concat transposed pieces");
    EXPECT_INTERP(concat({a}, 0), kExact, "concat one");
    EXPECT_INTERP(concat({make(dt, {1027}, 98), make(dt, {17}, 99), make(dt, {1}, 100)}), kExact, "concat 1-d odd");
    EXPECT_INTERP(concat({a, a, a}, 0), kExact, "concat the same tensor");
    EXPECT_INTERP(concat({make(dt, {2, 1}, 101).expand({2, 4}), a.slice(0, 0, 2)}, 1), kExact, "concat views");
  }
  EXPECT_INTERP(concat({make(kInt32, {2}, 102), make(kFloat64, {3}, 103), make(kBool, {1}, 104)}), kExact,
                "concat promotes");
  std::vector<int32_t> want = {1, 2, 3, 4, 5};
  EXPECT_EQ(concat({from_vector<int32_t>({1, 2}), from_vector<int32_t>({3}, {1}), from_vector<int32_t>({4, 5})}).to_vector<int32_t>(), want);
}

TEST(Movement, ConcatOfOnlyEmptyPieces) {
  expect_no_crash([] {
    Tensor a = make(kFloat32, {0, 3}, 105), b = make(kFloat32, {0, 3}, 106);
    Tensor c = concat({a, b}, 0);
    EXPECT_EQ(c.shape(), (IntList{0, 3}));
    EXPECT_TRUE(c.to_vector<float>().empty());
    EXPECT_EQ(concat({make(kInt32, {2, 0}, 107), make(kInt32, {2, 0}, 108)}, 1).to_vector<int32_t>().size(), 0u);
  });
}

TEST(Movement, Pad) {
  for (DType dt : kAll) {
    Tensor x = make(dt, {3, 17}, 109);
    EXPECT_INTERP(pad(x, {1, 2}), kExact, "pad last dim " + name_of(dt));
    EXPECT_INTERP(pad(x, {0, 0, 2, 1}, 1), kExact, "pad first dim with 1");
    EXPECT_INTERP(pad(x, {3, 0, 0, 4}, dt == kBool ? 1 : -7), kExact, "pad both dims");
    EXPECT_INTERP(pad(x.t(), {1, 1, 1, 1}), kExact, "pad a transpose");
    EXPECT_INTERP(pad(make(dt, {0, 2}, 110), {1, 1, 1, 1}, 1), kExact, "pad zero-size");
    EXPECT_INTERP(pad(make(dt, {1027}, 111), {5, 6}), kExact, "pad 1027");
    EXPECT_INTERP(pad(pad(make(dt, {2, 2}, 112), {1, 0}, 1), {0, 1, 1, 0}, 0), kExact, "pad of pad");
  }
  EXPECT_EQ(pad(from_vector<float>({1, 2}), {1, 2}, 0.5).to_vector<float>(), (std::vector<float>{0.5f, 1, 2, 0.5f, 0.5f}));
  EXPECT_EQ(pad(from_vector<int64_t>({1}, {1}), {1, 0}, (int64_t{1} << 53) + 1).to_vector<int64_t>(),
            (std::vector<int64_t>{(int64_t{1} << 53) + 1, 1}))
      << "integer pad values must be exact";
}

// Attention's head merges ([.., heads, T, d] -> [.., T, heads * d]), their concats and pads: the
// row's index divided by d, which the CPU emitter runs in stretches of constant quotient and
// bounds (llvm_emitter.cpp, emit_row_runs). Head widths a power of 2 and not, pads that start
// inside a head and before the row (negative offsets), one and two threads (chunks that start
// inside a row).
TEST(Movement, HeadMergesConcatsAndPadsAlongTheRow) {
  auto merge = [](const Tensor& h) {
    const IntList s = h.shape();
    return h.permute({0, 2, 1, 3}).reshape({s[0], s[2], s[1] * s[3]});
  };
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    for (int64_t d : {16, 20, 32, 64}) {
      const std::string at = " d=" + std::to_string(d) + " threads=" + std::to_string(threads);
      const Tensor q = make(kFloat32, {3, 4, 7, d}, 120), k = make(kFloat32, {3, 4, d, 7}, 121);
      const Tensor v = make(kFloat32, {3, 2, 7, d}, 122);
      EXPECT_INTERP(merge(q), kExact, "merge" + at);
      EXPECT_INTERP(merge(q) * 2.0 + 1.0, kExact, "merge, fused" + at);
      EXPECT_INTERP(concat({merge(q), merge(k.transpose(-2, -1)), merge(v)}, -1), kExact, "concat" + at);
      EXPECT_INTERP(pad(merge(q), {5, d + 3}, 1.5), kExact, "pad" + at);
      EXPECT_INTERP(pad(merge(v), {3, 0}) + pad(merge(v), {0, 3}), kExact, "sum of pads" + at);
      EXPECT_INTERP(merge(q).narrow(-1, 3, 2 * d + 1), kExact, "a slice inside the heads" + at);
      // the pad's bounds fall inside a head, where the quotient does not change
      EXPECT_INTERP(pad(merge(q).narrow(-1, 3, 2 * d + 1), {2, 5}, -1.0), kExact, "pad of a slice" + at);
    }
  }
}

/// A small deterministic generator for the random movement chains.
struct Rng {
  uint64_t seed, k = 0;
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(uniform(seed, k++) * static_cast<double>(n)); }
};

/// A random shape with `n` elements and rank <= 4 (size-1 dims included).
IntList random_factorization(Rng& r, int64_t n) {
  if (n == 0) return r.below(2) ? IntList{0, 1 + r.below(3)} : IntList{r.below(3) + 1, 0};
  IntList s;
  while (n > 1 && s.size() < 3) {
    std::vector<int64_t> divs;
    for (int64_t d = 1; d <= n; ++d)
      if (n % d == 0) divs.push_back(d);
    const int64_t d = divs[r.below(static_cast<int64_t>(divs.size()))];
    s.push_back(d);
    n /= d;
  }
  s.push_back(n);
  if (r.below(3) == 0) s.insert(s.begin() + r.below(static_cast<int64_t>(s.size()) + 1), 1);
  return s;
}

/// One random movement op applied to x (identity when it does not apply).
Tensor random_movement(Rng& r, const Tensor& x) {
  const int64_t rank = x.dim();
  const int64_t d = r.below(rank);
  switch (r.below(7)) {
  case 0: {
    IntList perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = rank - 1; i > 0; --i) std::swap(perm[i], perm[r.below(i + 1)]);
    return x.permute(perm);
  }
  case 1: return x.reshape(random_factorization(r, x.numel()));
  case 2: {
    if (rank == 0) return x;
    const int64_t n = x.shape()[d];
    return x.slice(d, r.below(2 * n + 1) - n, r.below(2 * n + 2) - n, 1 + r.below(3));
  }
  case 3: {
    IntList s = x.shape();
    for (int64_t& e : s)
      if (e == 1) e = 1 + r.below(4);
    if (r.below(2) && x.numel() < 500) s.insert(s.begin(), 2);
    return x.numel() * 8 > 6000 ? x : x.expand(s);
  }
  case 4: return rank == 0 || x.numel() > 3000 ? x : pad(x, {r.below(3), r.below(3)}, 1);
  case 5: return rank < 2 ? x : x.transpose(d, r.below(rank));
  default: {
    if (rank == 0 || x.numel() > 3000) return x;
    return concat({x, x.slice(d, 0, 1 + r.below(3))}, d);
  }
  }
}

/// Random chains of movement ops, as roots, fused into a consumer and reduced; a crash
/// (in a child process) names the last seed on stderr.
void run_movement_chains(uint64_t first, uint64_t last) {
  const bool saved = options().fusion;
  for (uint64_t seed = first; seed <= last; ++seed) {
    Rng r{seed * 7919};
    const DType dt = kAll[r.below(5)];
    Tensor x = make(dt, random_factorization(r, 1 + r.below(120)), seed);
    for (int step = 0, n = 1 + static_cast<int>(r.below(6)); step < n; ++step) x = random_movement(r, x);
    options().fusion = seed % 3 != 0;
    const std::string label = "chain seed " + std::to_string(seed) + " " + x.type_str();
    std::fprintf(stderr, "%s\n", label.c_str());
    EXPECT_INTERP(x, kExact, label);
    EXPECT_INTERP(logical_not(random_movement(r, x)), kExact, label + " fused into a consumer");
    if (x.dim() > 0 && x.shape()[0] > 0 && dt != kBool)
      EXPECT_INTERP(max(x, {0}) + x.slice(0, 0, 1), kExact, label + " reduced");
  }
  options().fusion = saved;
}

TEST(Movement, RandomChains) {
  expect_no_crash([] { run_movement_chains(1, 300); });
}

// ---------------------------------------------------------------- matmul

/// matmul(a, b) against the interpreter, within the float dot-product bound (k + 1) u |a| |b|.
void expect_matmul(const Tensor& a, const Tensor& b, const std::string& label) {
  Tensor c = matmul(a, b);
  if (!is_floating(c.dtype())) {
    EXPECT_INTERP(c, kExact, label);
    return;
  }
  const std::vector<double> scale = abs_scale(matmul(abs(a), abs(b)));
  const double k = static_cast<double>(a.shape().back());
  EXPECT_TRUE(matches_interpreter(c, {0, unit_roundoff(c.dtype()) * (k + 1)}, &scale)) << label;
}

TEST(Matmul, ShapesAndDtypes) {
  const std::vector<std::pair<IntList, IntList>> cases = {
      {{7}, {7}},          {{5}, {5, 3}},          {{4, 5}, {5}},           {{1, 1}, {1, 1}},
      {{7, 17}, {17, 3}},  {{33, 65}, {65, 17}},   {{3, 5, 7}, {3, 7, 4}},  {{2, 1, 3, 4}, {5, 4, 2}},
      {{4}, {2, 4, 3}},    {{2, 3, 4}, {4}},       {{3, 0}, {0, 4}},        {{0, 3}, {3, 2}},
      {{2, 3}, {3, 0}},    {{1, 7}, {7, 1027}},    {{1027, 2}, {2, 1}},     {{6, 1, 2, 3}, {1, 5, 3, 2}}};
  uint64_t seed = 200;
  for (DType dt : kNumeric)
    for (const auto& [sa, sb] : cases) {
      Tensor a = make(dt, sa, ++seed), b = make(dt, sb, ++seed);
      const std::string label = "matmul " + name_of(dt) + shape_of(sa) + "x" + shape_of(sb);
      expect_matmul(a, b, label);
      if (sa.size() >= 2 && sb.size() >= 2) {
        auto at = make_view(dt, sa, View::Transposed, ++seed, Fill::Normal);
        auto bt = make_view(dt, sb, View::Transposed, ++seed, Fill::Normal);
        expect_matmul(*at, *bt, label + " transposed");
        auto as = make_view(dt, sa, View::Strided, ++seed, Fill::Normal);
        auto be = make_view(dt, sb, View::Expanded, ++seed, Fill::Normal);
        expect_matmul(*as, be ? *be : b, label + " strided/expanded");
      }
    }
  expect_matmul(make(kInt32, {3, 4}, 1), make(kFloat32, {4, 2}, 2), "mixed dtypes");
  expect_matmul(exp(make(kFloat32, {7, 17}, 3)), make(kFloat32, {17, 5}, 4) * 2, "fused operands");
}

TEST(Matmul, ResultShapes) {
  EXPECT_EQ(matmul(make(kFloat32, {7}, 1), make(kFloat32, {7}, 2)).shape(), IntList{});
  EXPECT_EQ(matmul(make(kFloat32, {5}, 1), make(kFloat32, {5, 3}, 2)).shape(), (IntList{3}));
  EXPECT_EQ(matmul(make(kFloat32, {4, 5}, 1), make(kFloat32, {5}, 2)).shape(), (IntList{4}));
  EXPECT_EQ(matmul(make(kFloat32, {2, 1, 3, 4}, 1), make(kFloat32, {5, 4, 2}, 2)).shape(), (IntList{2, 5, 3, 2}));
  EXPECT_EQ(matmul(make(kFloat32, {4}, 1), make(kFloat32, {2, 4, 3}, 2)).shape(), (IntList{2, 3}));
}

TEST(Matmul, AgainstLoop) {
  const int64_t B = 3, M = 5, K = 17, N = 4;
  const std::vector<double> va = values(kFloat64, B * M * K, 120, Fill::Normal), vb = values(kFloat64, K * N, 121, Fill::Normal);
  std::vector<double> want(B * M * N, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k) want[(b * M + i) * N + j] += va[(b * M + i) * K + k] * vb[k * N + j];
  Tensor c = matmul(tensor_of(va, kFloat64, {B, M, K}), tensor_of(vb, kFloat64, {K, N}));
  EXPECT_TRUE(compare(c.to_vector<double>(), want, kFloat64, {0, 1e-13}));
  Tensor ci = matmul(tensor_of(va, kInt64, {B, M, K}), tensor_of(vb, kInt64, {K, N}));
  std::vector<int64_t> want_i(B * M * N, 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        for (int64_t k = 0; k < K; ++k)
          want_i[(b * M + i) * N + j] += static_cast<int64_t>(va[(b * M + i) * K + k]) * static_cast<int64_t>(vb[k * N + j]);
  EXPECT_EQ(ci.to_vector<int64_t>(), want_i);
  EXPECT_EQ(matmul(from_vector<float>({1, 2, 3}), from_vector<float>({4, 5, 6})).item<float>(), 32.0f);
}

// ---------------------------------------------------------------- creation

TEST(Creation, ZerosOnesFull) {
  for (DType dt : kAll)
    for (const IntList& s : kShapes) {
      const std::string label = name_of(dt) + shape_of(s);
      int64_t n = 1;
      for (int64_t d : s) n *= d;
      EXPECT_TRUE(compare(zeros(s, dt).to_vector<double>(), std::vector<double>(n, 0), dt, kExact)) << label;
      EXPECT_TRUE(compare(ones(s, dt).to_vector<double>(), std::vector<double>(n, 1), dt, kExact)) << label;
      const double v = dt == kBool ? 1 : is_floating(dt) ? -2.5 : -7;
      EXPECT_TRUE(compare(full(s, v, dt).to_vector<double>(), std::vector<double>(n, v), dt, kExact)) << label;
      EXPECT_EQ(zeros(s, dt).shape(), s);
      EXPECT_EQ(full(s, v, dt).dtype(), dt);
    }
  EXPECT_EQ(full({2}, (int64_t{1} << 53) + 1, kInt64).to_vector<int64_t>(), (std::vector<int64_t>(2, (int64_t{1} << 53) + 1)));
  EXPECT_EQ(full({1}, 0.1, kFloat32).item<float>(), 0.1f);
  EXPECT_EQ(full({1}, 0.1, kFloat64).item<double>(), 0.1);
  EXPECT_TRUE(std::isnan(full({1}, kNaN).item<float>()));
  EXPECT_TRUE(std::signbit(full({1}, -0.0).item<float>()));
  EXPECT_EQ(zeros_like(make(kInt32, {2, 3}, 1)).to_vector<int32_t>(), std::vector<int32_t>(6, 0));
  EXPECT_EQ(ones_like(make(kFloat64, {4}, 1)).to_vector<double>(), std::vector<double>(4, 1));
  EXPECT_EQ(scalar_tensor(3, kInt64).item<int64_t>(), 3);
  EXPECT_INTERP(full({3, 5}, 2.5) * make(kFloat32, {5}, 3), kExact, "full used in a kernel");
}

TEST(Creation, Arange) {
  EXPECT_EQ(arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_EQ(arange(10, 0, -3, kInt32).to_vector<int32_t>(), (std::vector<int32_t>{10, 7, 4, 1}));
  EXPECT_EQ(arange(0.5, 3, 0.5, kFloat64).to_vector<double>(), (std::vector<double>{0.5, 1, 1.5, 2, 2.5}));
  Tensor f = arange(0, 1, 0.1, kFloat32);
  ASSERT_EQ(f.numel(), 10);
  for (int k = 0; k < 10; ++k) EXPECT_EQ(f.to_vector<float>()[k], static_cast<float>(k * 0.1)) << k;
  EXPECT_INTERP(arange(-3, 1024, 1, kFloat32), kExact, "arange f32 1027");
  EXPECT_INTERP(arange(-1000, 1000, 7, kInt64) * 3, kExact, "arange i64 in a kernel");
  EXPECT_INTERP(arange(0, 17, 1, kFloat64).slice(0, 2, 17, 3), kExact, "slice of arange");
  EXPECT_INTERP(arange(0, 6, 1, kInt32).reshape({2, 3}).t(), kExact, "arange reshaped and transposed");
}

// An integer arange with fractional bounds or step: ceil((end - start) / step) values (counted in double,
// as for every dtype) trunc(start) + i * trunc(step). That is torch 1.13's rule for int32, and today's
// PyTorch's for int64 too (pytorch#149097, fixed in aten/src/ATen/native/RangeUtils.h). torch 1.13's
// int64 alone counted from the truncated bounds (arange(0, 5, 1.5, dtype=torch.int64) -> 5 values),
// a bug PyTorch has since removed; kiln keeps the count of every other dtype. A step whose integer
// part is 0 is refused as torch 1.13 refuses it ("step must be nonzero"; 0 * i would repeat start).
TEST(Creation, ArangeOfAnIntegerDtypeTruncatesStartAndStep) {
  struct Case {
    double start, end, step;
    std::vector<int64_t> want; // torch.arange(start, end, step, dtype=torch.int32).tolist()
  };
  const std::vector<Case> cases = {
      {0, 5, 1.5, {0, 1, 2, 3}},         {0.5, 5, 1, {0, 1, 2, 3, 4}}, {5, 0, -1.5, {5, 4, 3, 2}},
      {5.5, 0, -1, {5, 4, 3, 2, 1, 0}},  {0, -5, -1.5, {0, -1, -2, -3}}, {-0.5, 3, 1, {0, 1, 2, 3}},
      {-2.5, 2.5, 1.5, {-2, -1, 0, 1}},  {1.5, 1.6, 1, {1}},           {0, 5, 2.5, {0, 2}},
      {0, 10, 2.9, {0, 2, 4, 6}},        {0.5, 0.5, 1, {}},
  };
  for (const Case& c : cases)
    for (DType dt : {kInt32, kInt64}) {
      const Tensor t = arange(c.start, c.end, c.step, dt);
      const std::vector<int64_t> got = t.to(kInt64).to_vector<int64_t>();
      EXPECT_EQ(got, c.want) << "arange(" << c.start << ", " << c.end << ", " << c.step << ", " << dtype_name(dt) << ")";
    }
  // torch.arange(0, 5, 0.5, dtype=torch.int64) and torch.arange(0, 0.3, 0.5, dtype=torch.int32):
  // RuntimeError: step must be nonzero
  for (DType dt : {kInt32, kInt64}) {
    EXPECT_THROW(arange(0, 5, 0.5, dt), Error);
    EXPECT_THROW(arange(0, 0.3, 0.5, dt), Error);
    EXPECT_THROW(arange(3, 0, -0.9, dt), Error);
  }
  EXPECT_EQ(arange(0, 0.3, 0.5, kFloat32).numel(), 1); // floating dtypes keep the step
}

TEST(Creation, RandIsBitExact) {
  for (DType dt : kFloats) {
    Tensor r = rand({3, 17}, 1234, dt);
    const auto got = r.to_vector<double>();
    for (uint64_t k = 0; k < 51; ++k) ASSERT_EQ(got[k], graph::random_uniform(1234, k, dt == kFloat64)) << k;
    // counters follow the rand node's own row-major order, whatever view reads it
    const auto t = rand({3, 17}, 1234, dt).t().to_vector<double>();
    for (uint64_t i = 0; i < 17; ++i)
      for (uint64_t j = 0; j < 3; ++j) ASSERT_EQ(t[i * 3 + j], graph::random_uniform(1234, j * 17 + i, dt == kFloat64));
    const auto s = (rand({50}, 9, dt).slice(0, 10, 50, 4) * 1.0).to_vector<double>();
    for (uint64_t k = 0; k < 10; ++k) ASSERT_EQ(s[k], graph::random_uniform(9, 10 + 4 * k, dt == kFloat64));
  }
  const auto one = rand({1027}, 5).to_vector<float>();
  for (float v : one) {
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.0f);
  }
}

TEST(Creation, RandSeeds) {
  EXPECT_EQ(rand({100}, 7).to_vector<float>(), rand({100}, 7).to_vector<float>());
  const auto a = rand({1000}, 7).to_vector<float>(), b = rand({1000}, 8).to_vector<float>();
  int same = 0;
  for (size_t k = 0; k < a.size(); ++k) same += a[k] == b[k];
  EXPECT_LT(same, 5);
  const auto n1 = randn({1000}, 7).to_vector<float>(), n2 = randn({1000}, 8).to_vector<float>();
  same = 0;
  for (size_t k = 0; k < n1.size(); ++k) same += n1[k] == n2[k];
  EXPECT_LT(same, 5);
  EXPECT_EQ(randn({64}, 3, kFloat64).to_vector<double>(), randn({64}, 3, kFloat64).to_vector<double>());
}

TEST(Creation, RandnStatisticsAndReference) {
  for (DType dt : kFloats) {
    const auto v = randn({200000}, 42, dt).to_vector<double>();
    double s = 0, s2 = 0;
    for (double x : v) {
      s += x;
      s2 += x * x;
      ASSERT_TRUE(std::isfinite(x));
    }
    const double m = s / v.size(), sd = std::sqrt(s2 / v.size() - m * m);
    EXPECT_NEAR(m, 0, 0.01) << name_of(dt);
    EXPECT_NEAR(sd, 1, 0.01) << name_of(dt);
    std::vector<double> want;
    for (uint64_t k = 0; k < 4096; ++k) want.push_back(graph::random_normal(42, k, dt == kFloat64));
    std::vector<double> head(v.begin(), v.begin() + 4096);
    EXPECT_TRUE(compare(head, rounded(want, dt), dt, {16, dt == kFloat32 ? 2e-6 : 1e-14})) << name_of(dt);
  }
}

TEST(Creation, FromVector) {
  EXPECT_EQ(from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3}).t().to_vector<int32_t>(), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(from_vector<bool>({true, false}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(from_vector<double>({2.5}, {1}).dim(), 1);
  EXPECT_EQ(from_vector<double>({2.5}).dim(), 1) << "tensor.h: the shape defaults to 1-d (torch.tensor([2.5]) is [1])";
}

// ---------------------------------------------------------------- fused chains, fusion on and off

/// Compound expressions whose nodes fuse into one kernel (or don't).
std::vector<std::pair<std::string, Tensor>> chains(uint64_t seed) {
  Tensor x = make(kFloat32, {33, 65}, seed), y = make(kFloat32, {65}, seed + 1), z = make(kFloat32, {33, 1}, seed + 2);
  Tensor xi = make(kInt32, {33, 65}, seed + 3);
  Tensor s = x - max(x, {1}, true);
  Tensor e = exp(s);
  return {
      {"x*y+z", x * y + z},
      {"swish", x * sigmoid(x * 1.5)},
      {"softmax", e / sum(e, {1}, true)},
      {"shared subexpression", (x * y) * (x * y) + exp(x * y)},
      {"mixed dtypes", (xi + 1).to(kFloat32) * x - xi.to(kFloat64).sum({0}).to(kFloat32)},
      {"relu of matmul", relu(matmul(x, make(kFloat32, {65, 17}, seed + 4)) - 1)},
      {"where chain", where(x > 0, sqrt(abs(x)), -x * x)},
      {"views", (x.t() + 1).sum({0}) + x.slice(1, 0, 65, 2).max({1})},
      {"pad and concat", concat({pad(x, {1, 1}), pad(z, {33, 33}, 2)}, 0) * 2},
      {"mean var", ((x - x.mean({0}, true)) * (x - x.mean({0}, true))).mean({0})},
      {"argmax of fused", argmax(x * y - z, 1)},
      {"rand fused", rand({33, 65}, 3) * x + randn({65}, 4)},
  };
}

TEST(Fusion, ChainsMatchTheInterpreterFusedAndUnfused) {
  const bool saved = options().fusion;
  for (bool fusion : {true, false}) {
    options().fusion = fusion;
    for (auto& [name, t] : chains(fusion ? 700 : 800))
      EXPECT_INTERP(t, (Tol{4, 1e-4}), name + (fusion ? " fused" : " unfused"));
  }
  options().fusion = saved;
}

TEST(Fusion, FusedAndUnfusedAgree) {
  const bool saved = options().fusion;
  std::vector<std::vector<double>> results[2];
  for (int pass = 0; pass < 2; ++pass) {
    options().fusion = pass == 0;
    for (auto& [name, t] : chains(900)) results[pass].push_back(t.to(kFloat64).to_vector<double>());
  }
  options().fusion = saved;
  // Bitwise: reductions accumulate in an order fixed by the kernel IR (sum_lanes), never
  // by what the kernel around them looks like.
  for (size_t k = 0; k < results[0].size(); ++k) {
    ASSERT_EQ(results[0][k].size(), results[1][k].size());
    EXPECT_EQ(0, std::memcmp(results[0][k].data(), results[1][k].data(), results[0][k].size() * sizeof(double)))
        << chains(900)[k].first;
  }
}

TEST(Fusion, LeavesInsideKernels) {
  // constants, aranges and random numbers computed inside reductions, matmuls and views
  EXPECT_INTERP(sum(ones({1027})), kExact, "sum of ones");
  EXPECT_INTERP(full({3, 5}, 2.5).sum({0}), kExact, "sum of a full");
  EXPECT_INTERP(argmax(full({4, 6}, 1.0), 1), kExact, "argmax of a constant: all ties");
  EXPECT_INTERP(max(arange(-5, 5, 1, kInt32).reshape({2, 5}), {1}), kExact, "max of arange");
  EXPECT_TRUE(matches_interpreter(sum(rand({4, 1027}, 1), {1}), {0, 1e-4})) << "sum of rand";
  EXPECT_INTERP(matmul(ones({3, 4}), make(kFloat32, {4, 5}, 2)), (Tol{0, 1e-5}), "matmul of ones");
  EXPECT_INTERP(matmul(arange(0, 12, 1, kFloat64).reshape({3, 4}), rand({4, 2}, 3, kFloat64)), (Tol{0, 1e-13}),
                "matmul of arange and rand");
  EXPECT_INTERP(sum(make(kFloat32, {5, 7}, 4), {0}).reshape({7, 1}).expand({7, 3}).t(), (Tol{0, 1e-5}),
                "a view of a reduction as the root");
  EXPECT_INTERP(matmul(make(kFloat64, {6, 3}, 5), make(kFloat64, {3, 4}, 6)).t().slice(0, 1, 4, 2), (Tol{0, 1e-13}),
                "a view of a matmul as the root");
}

TEST(Fusion, DeepGraphWithReusedBuffers) {
  const bool saved = options().fusion;
  for (bool fusion : {true, false}) {
    options().fusion = fusion;
    Tensor x = make(kFloat64, {17, 33}, 31), w = make(kFloat64, {33, 33}, 32);
    Tensor y = x;
    for (int k = 0; k < 12; ++k) { // every step: values with several consumers, a reduction and a matmul
      Tensor a = tanh(y), b = a * y + x;
      Tensor c = b - max(b, {1}, true);
      y = matmul(c, w) * 0.1 + a.slice(1, 0, 33) - sum(c, {0}, true) * 0.01;
    }
    EXPECT_INTERP(y, (Tol{0, 1e-11}), fusion ? "fused" : "unfused");
  }
  options().fusion = saved;
}

TEST(Fusion, LargeOddShapes) {
  Tensor x = make(kFloat32, {1031, 1023}, 41), y = make(kFloat32, {1023, 1031}, 42);
  EXPECT_INTERP(x * y.t() + 1, kExact, "elementwise over 1M with a transposed operand");
  EXPECT_INTERP(exp(x.slice(0, 1, 1031, 3)), kTranscendental, "exp of a strided view");
  const std::vector<double> s0 = abs_scale(sum(abs(x), {0})), s1 = abs_scale(sum(abs(x), {1}));
  EXPECT_TRUE(matches_interpreter(sum(x, {0}), {0, 1032 * 0x1p-24}, &s0)) << "column sums";
  EXPECT_TRUE(matches_interpreter(sum(x, {1}), {0, 1024 * 0x1p-24}, &s1)) << "row sums";
  EXPECT_INTERP(argmax(y, 0), kExact, "argmax over columns");
  EXPECT_INTERP(max(x.t(), {1}), kExact, "max of a transpose");
}

// ---------------------------------------------------------------- laziness, threads, printing

TEST(Runtime, NothingRunsBeforeARead) {
  const auto before = runtime::executor_stats();
  Tensor x = rand({1000}, 1);
  Tensor y = exp(x) * 2 + matmul(x.reshape({10, 100}), x.reshape({100, 10})).sum();
  Tensor s = sum(y, {0});
  const auto built = runtime::executor_stats();
  EXPECT_EQ(built.launches, before.launches);
  EXPECT_EQ(built.realizations, before.realizations);
  (void)y.shape(); // metadata needs no computation
  (void)s.dtype();
  EXPECT_EQ(runtime::executor_stats().launches, before.launches);
  const float v = s.item<float>();
  EXPECT_TRUE(std::isfinite(v));
  const auto after = runtime::executor_stats();
  EXPECT_GT(after.launches, before.launches);
  EXPECT_EQ(after.realizations, before.realizations + 1);
  (void)s.item<float>(); // already realized: nothing runs again
  EXPECT_EQ(runtime::executor_stats().launches, after.launches);
}

TEST(Runtime, RealizeComputesSeveral) {
  Tensor a = rand({100}, 2), b = exp(a), c = b + 1;
  Tensor b2 = b, c2 = c;
  const auto before = runtime::executor_stats();
  realize({b, c});
  EXPECT_EQ(runtime::executor_stats().realizations, before.realizations + 1);
  const auto mid = runtime::executor_stats();
  EXPECT_TRUE(compare(c2.to_vector<double>(), (b2 + 1).to_vector<double>(), kFloat32, kExact));
  (void)mid;
}

/// Runs a fixed program on fresh inputs with at most `threads` threads.
std::vector<std::vector<double>> program(int threads) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
  Tensor x = make(kFloat32, {1024, 1027}, 1234), w = make(kFloat32, {1027, 65}, 4321);
  Tensor big = make(kFloat32, {1 << 20}, 99);
  std::vector<Tensor> outs = {
      exp(x) * 0.5 + x,                      // elementwise, many chunks
      sum(x, {1}),                           // row reductions, parallel over rows
      sum(x, {0}),                           // column reductions
      sum(big),                              // one long reduction
      matmul(x, w),                          // contraction
      mean(x.t(), {1}) + max(x, {0}),        // views and max
      rand({1 << 20}, 5) + randn({1 << 20}, 6),
  };
  std::vector<std::vector<double>> r;
  for (Tensor& t : outs) r.push_back(t.to_vector<double>());
  return r;
}

TEST(Runtime, ResultsAreIndependentOfThreadCount) {
  const auto one = program(1), two = program(2), again = program(2);
  ASSERT_EQ(one.size(), two.size());
  for (size_t k = 0; k < one.size(); ++k) {
    ASSERT_EQ(one[k].size(), two[k].size());
    EXPECT_EQ(std::memcmp(one[k].data(), two[k].data(), one[k].size() * sizeof(double)), 0) << "output " << k;
    EXPECT_EQ(std::memcmp(two[k].data(), again[k].data(), two[k].size() * sizeof(double)), 0) << "rerun " << k;
  }
}

TEST(Printing, Str) {
  EXPECT_EQ(from_vector<float>({1, 2.5f, -3}).str(), "tensor([1, 2.5, -3], dtype=f32)");
  EXPECT_EQ(from_vector<int32_t>({1, 2, 3, 4}, {2, 2}).str(), "tensor([[1, 2],\n        [3, 4]], dtype=i32)");
  EXPECT_EQ(from_vector<bool>({true, false}).str(), "tensor([true, false], dtype=bool)");
  EXPECT_EQ(scalar_tensor(3.5).str(), "tensor(3.5, dtype=f32)");
  EXPECT_EQ(from_vector<int64_t>({int64_t{1} << 40}, {1}).str(), "tensor([1099511627776], dtype=i64)");
  EXPECT_EQ(zeros({0}).str(), "tensor([], dtype=f32)");
  EXPECT_EQ(zeros({0, 3}).str(), "tensor([], size=(0, 3), dtype=f32)"); // as PyTorch: the shape, not [[]]
  EXPECT_EQ(zeros({2, 0, 3}, kInt64).str(), "tensor([], size=(2, 0, 3), dtype=i64)");
  EXPECT_EQ((from_vector<double>({1, 2}) * 0.5).str(), "tensor([0.5, 1], dtype=f64)");
  const std::string big = arange(2000).str();
  EXPECT_NE(big.find("..."), std::string::npos);
  EXPECT_NE(big.find("1999"), std::string::npos);
  EXPECT_LT(big.size(), 200u);
  std::ostringstream os;
  os << from_vector<float>({kNaNF, kInfF});
  EXPECT_EQ(os.str(), "tensor([nan, inf], dtype=f32)");
}

// A summarized print computes only what it shows: printing a lazy ones({2^20, 2^20}) asked for
// 4 TiB. A lazy value and the same value computed first print the same text.
TEST(Printing, ASummarizedLazyTensorComputesOnlyItsCorners) {
  const std::string huge = ones({int64_t{1} << 20, int64_t{1} << 20}).str();
  EXPECT_EQ(huge.substr(0, 38), "tensor([[1, 1, 1, ..., 1, 1, 1],\n     ") << huge;
  EXPECT_NE(huge.find("...,\n"), std::string::npos) << huge;
  for (const IntList shape : {IntList{3000}, IntList{10, 20, 15}, IntList{7, 1, 200}, IntList{2, 3, 4, 5, 6, 7}}) {
    const Tensor lazy = arange(graph::numel(shape)).reshape(shape) * 2 - 1;
    const std::string printed = lazy.str();
    const Tensor computed = arange(graph::numel(shape)).reshape(shape) * 2 - 1;
    computed.realize();
    EXPECT_EQ(printed, computed.str()) << graph::shape_str(shape);
  }
  const Tensor row = arange(2000).reshape({2, 1000}) + 0.5; // ..., 998.5, 999.5 ends the first row
  EXPECT_NE(row.str().find("997.5, 998.5, 999.5]"), std::string::npos) << row.str();
}

TEST(Printing, PrintingRealizes) {
  Tensor x = from_vector<float>({1, 2}) + 1;
  const auto before = runtime::executor_stats();
  EXPECT_EQ(x.str(), "tensor([2, 3], dtype=f32)");
  EXPECT_GT(runtime::executor_stats().launches, before.launches);
}

// A scan written as log2(n) steps of shifted slices (Hillis-Steele): each step reads the one before
// at two places, so fused into one kernel the expression would double with every step (2^12 copies
// of the first step here, which did not finish). Fusion gives a value read at several places a
// buffer of its own once it costs 8 ops or more a point; the sums are exact (small integers).
TEST(Fusion, ShiftedReadsOfEachStepDoNotCompoundIntoOneKernel) {
  const int64_t n = 4096;
  std::vector<double> v(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i % 7 - 3);
  std::partial_sum(v.begin(), v.end(), want.begin());
  Tensor s = from_vector(v, {n});
  for (int64_t k = 1; k < n; k *= 2) s = concat({s.slice(0, 0, k), s.slice(0, k, n) + s.slice(0, 0, n - k)}, 0);
  const std::vector<graph::NodeRef> copy = kiln::testing::clone_graph({s.node()});
  EXPECT_EQ(s.to_vector<double>(), want);
  EXPECT_TRUE(matches_other_mode(copy, s.node()));
}

} // namespace
} // namespace kiln

#include "tests/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "graph/build.h"
#include "graph/interpret.h"
#include "graph/random.h"
#include "graph/text.h"
#include "runtime/storage.h"

namespace kiln::testing {

namespace b = graph::build;
using graph::NodeRef;
using graph::OpKind;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A small deterministic generator (splitmix64 over a counter).
struct Rng {
  uint64_t seed, n = 0;
  uint64_t next() { return graph::random_bits(seed, n++); }
  /// Uniform in [lo, hi].
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1)); }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
  template <class T> const T& pick(const std::vector<T>& v) { return v[next() % v.size()]; }
};

int64_t numel_of(const IntList& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const IntList& s) {
  std::string out = "[";
  for (size_t k = 0; k < s.size(); ++k) out += (k ? "," : "") + std::to_string(s[k]);
  return out + "]";
}

/// True when a and c broadcast together.
bool broadcastable(const IntList& a, const IntList& c) {
  for (size_t k = 1; k <= std::min(a.size(), c.size()); ++k) {
    const int64_t x = a[a.size() - k], y = c[c.size() - k];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

/// One generation or replay of a program.
struct Gen {
  Rng rng;
  const GenOptions& o;
  std::function<Tensor(const InputSpec&)> input; ///< a new input of the given spec
  std::vector<Tensor> pool;                      ///< every value so far
  std::vector<bool> is_input;                    ///< pool[k] is an input
  std::vector<std::string> steps;                ///< what each step did

  Gen(uint64_t seed, const GenOptions& opt) : rng{seed * 0x2545f4914f6cdd1dULL + 17}, o(opt) {}

  DType random_dtype() {
    if (o.differentiable) return kFloat64;
    static const std::vector<DType> w = {kFloat32, kFloat32, kFloat32, kFloat64, kFloat64, kInt32, kInt64, kBool};
    return rng.pick(w);
  }
  Fill random_fill(DType dt) {
    if (o.differentiable) return Fill::Normal;
    const int64_t r = rng.range(0, 9);
    if (r < 5) return Fill::Normal;
    if (r < 7) return Fill::Ties;
    if (r < 9) return Fill::Positive;
    return is_floating(dt) ? Fill::Specials : Fill::Normal;
  }
  int64_t random_extent() {
    static const std::vector<int64_t> e = {1, 1, 2, 3, 3, 4, 5, 7, 8, 16, 17, 33};
    if (o.allow_empty && rng.chance(0.02)) return 0;
    return rng.pick(e);
  }
  IntList random_shape() {
    const int64_t rank = rng.range(0, 4);
    IntList s;
    for (int64_t k = 0; k < rank; ++k) s.push_back(random_extent());
    while (numel_of(s) > o.max_numel / 4 && !s.empty()) s.erase(s.begin());
    return s;
  }
  Tensor new_input(IntList shape, DType dt) {
    Tensor t = input({shape, dt, random_fill(dt)});
    push(t, "input " + std::string(dtype_name(dt)) + shape_str(shape), true);
    return t;
  }
  void push(const Tensor& t, std::string what, bool inp = false) {
    pool.push_back(t);
    is_input.push_back(inp);
    steps.push_back("%" + std::to_string(pool.size() - 1) + " = " + what + " -> " + t.type_str());
  }
  /// A pool value, biased towards recent ones.
  size_t pick_index() {
    const size_t n = pool.size();
    if (rng.chance(0.75)) return n - 1 - static_cast<size_t>(rng.range(0, std::min<int64_t>(2, static_cast<int64_t>(n) - 1)));
    return static_cast<size_t>(rng.range(0, static_cast<int64_t>(n) - 1));
  }
  /// A shape that broadcasts with `s`: some dims set to 1, maybe leading dims dropped or added.
  IntList broadcast_partner(const IntList& s) {
    IntList p = s;
    for (int64_t& d : p)
      if (rng.chance(0.3)) d = 1;
    if (!p.empty() && rng.chance(0.25)) p.erase(p.begin(), p.begin() + rng.range(1, static_cast<int64_t>(p.size())));
    if (p.size() < 4 && rng.chance(0.1) && numel_of(s) * 2 <= o.max_numel) p.insert(p.begin(), 2);
    return p;
  }
  /// A second operand for a binary op with `x`.
  Tensor partner(const Tensor& x, std::string& what) {
    if (rng.chance(0.45)) {
      std::vector<size_t> ok;
      for (size_t k = 0; k < pool.size(); ++k)
        if (broadcastable(pool[k].shape(), x.shape())) ok.push_back(k);
      if (!ok.empty()) {
        const size_t k = rng.pick(ok);
        what += "%" + std::to_string(k);
        return pool[k];
      }
    }
    DType dt = rng.chance(0.7) ? x.dtype() : random_dtype();
    Tensor t = new_input(broadcast_partner(x.shape()), dt);
    what += "%" + std::to_string(pool.size() - 1);
    return t;
  }
  Scalar random_scalar(DType like) {
    static const std::vector<double> f = {0.5, -1.5, 2.0, 3.25, -0.0, 1e-3, 7.0};
    if (is_floating(like) || rng.chance(0.3)) return rng.pick(f);
    return static_cast<int64_t>(rng.range(-3, 5));
  }
  IntList random_dims(int64_t rank, bool nonempty) {
    IntList dims;
    for (int64_t d = 0; d < rank; ++d)
      if (rng.chance(0.5)) dims.push_back(rng.chance(0.5) ? d : d - rank);
    if (dims.empty() && nonempty && rank > 0) dims.push_back(rng.range(0, rank - 1));
    return dims;
  }

  /// One random op on the pool; returns false when nothing was added.
  bool step() {
    const size_t xi = pick_index();
    const Tensor x = pool[xi];
    const std::string xs = "%" + std::to_string(xi);
    const DType dt = x.dtype();
    const int kind = static_cast<int>(rng.range(0, 99));
    if (o.differentiable) return smooth_step(x, xs, kind);

    if (kind < 14) { // float unary (integers and bool promote to f32)
      static const std::vector<std::pair<const char*, Tensor (*)(const Tensor&, Loc)>> ops = {
          {"exp", exp},     {"log", kiln::log},   {"sqrt", sqrt},
          {"rsqrt", rsqrt}, {"sin", sin},         {"cos", cos},
          {"tanh", tanh},   {"sigmoid", sigmoid}, {"reciprocal", reciprocal},
          {"expm1", expm1}, {"log1p", log1p},     {"tan", tan},
          {"atan", atan},   {"asin", asin},       {"acos", acos},
          {"sinh", sinh},   {"cosh", cosh},       {"asinh", asinh},
          {"acosh", acosh}, {"atanh", atanh},     {"log2", log2},
          {"log10", log10}, {"exp2", exp2},       {"trunc", trunc}};
      const auto& [name, f] = rng.pick(ops);
      const std::string n(name);
      // the inverse functions on their domains mostly (else NaN would spread through the rest)
      if (n == "asin" || n == "acos" || n == "atanh") {
        push(f(sin(x), Loc::current()), n + " sin " + xs);
      } else if (n == "acosh") {
        push(f(exp(x) + 1.0, Loc::current()), n + " (exp " + xs + " + 1)");
      } else {
        push(f(x, Loc::current()), n + " " + xs);
      }
      return true;
    }
    if (kind < 22) { // numeric unary
      if (dt == kBool) {
        push(logical_not(x), "logical_not " + xs);
        return true;
      }
      static const std::vector<std::pair<const char*, Tensor (*)(const Tensor&, Loc)>> ops = {
          {"neg", neg}, {"abs", abs}, {"relu", relu}, {"square", square}, {"logical_not", logical_not}};
      const auto& [name, f] = rng.pick(ops);
      push(f(x, Loc::current()), std::string(name) + " " + xs);
      return true;
    }
    if (kind < 40) { // arithmetic
      static const std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&, Loc)>> ops = {
          {"add", kiln::add}, {"sub", sub},         {"mul", mul},
          {"div", div},       {"maximum", maximum}, {"minimum", minimum},
          {"atan2", atan2},   {"fmod", kiln::fmod}, {"remainder", remainder}};
      const auto& [name, f] = rng.pick(ops);
      const Tensor xx = dt == kBool ? cast(x, kInt32) : x;
      std::string what = std::string(name) + " " + xs + ", ";
      const std::string nm(name);
      if (rng.chance(0.25) && (nm == "add" || nm == "sub" || nm == "mul" || nm == "div")) {
        const Scalar c = random_scalar(xx.dtype());
        what += std::to_string(c.to_double());
        const std::string n(name);
        push(n == "add" ? xx + c : n == "sub" ? xx - c : n == "mul" ? xx * c : xx / c, what);
        return true;
      }
      Tensor y = partner(xx, what);
      if (y.dtype() == kBool) y = cast(y, kInt64);
      if (nm == "fmod" || nm == "remainder") { // a divisor of 0 (often, from integers) gives NaN, which would spread
        y = y + 0.5;
        what += " + 0.5";
      }
      push(f(xx, y, Loc::current()), what);
      return true;
    }
    if (kind < 44) { // pow with a small exponent
      if (!is_floating(dt)) return false;
      static const std::vector<double> e = {2.0, 3.0, 0.5, -1.0, 1.5, -2.0};
      const double p = rng.pick(e);
      push(pow(x, p), "pow " + xs + ", " + std::to_string(p));
      return true;
    }
    if (kind < 52) { // comparison
      static const std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&, Loc)>> ops = {
          {"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}, {"logical_and", logical_and},
          {"logical_or", logical_or}};
      const auto& [name, f] = rng.pick(ops);
      std::string what = std::string(name) + " " + xs + ", ";
      const Tensor y = partner(x, what);
      push(f(x, y, Loc::current()), what);
      return true;
    }
    if (kind < 57) { // where
      std::string what = "where ";
      Tensor c;
      if (dt == kBool) {
        c = x;
        what += xs;
      } else {
        const Scalar t = random_scalar(dt);
        c = x > t;
        what += "(" + xs + " > " + std::to_string(t.to_double()) + ")";
      }
      what += ", ";
      Tensor a = partner(c, what);
      what += ", ";
      if (rng.chance(0.3)) {
        const Scalar v = random_scalar(a.dtype());
        what += std::to_string(v.to_double());
        push(where(c, a, v), what);
        return true;
      }
      Tensor e = partner(c, what);
      push(where(c, a, e), what);
      return true;
    }
    if (kind < 62) { // cast
      const DType to = random_dtype();
      push(cast(x, to), "cast " + xs + " to " + std::string(dtype_name(to)));
      return true;
    }
    if (kind < 69) return reduction(x, xs);
    if (kind < 72) return scan_step(x, xs, false);
    if (kind < 90) return movement(x, xs);
    if (kind < 95) return concat_step(x, xs);
    return matmul_step(x, xs);
  }

  /// The elements a reduction of x over `dims` (none: all of them) combines into each result.
  static int64_t reduced_count(const Tensor& x, const IntList& dims) {
    if (dims.empty()) return x.numel();
    int64_t reduced = 1;
    for (int64_t d : dims) reduced *= x.shape()[static_cast<size_t>(d < 0 ? d + x.dim() : d)];
    return reduced;
  }

  bool reduction(const Tensor& x, const std::string& xs) {
    const int64_t r = x.dim();
    const bool keep = rng.chance(0.5);
    const int which = static_cast<int>(rng.range(0, 5));
    IntList dims = random_dims(r, which >= 4);
    const int64_t reduced = reduced_count(x, dims);
    const std::string tail = " " + xs + " dims " + shape_str(dims) + (keep ? " keepdim" : "");
    switch (which) {
    case 0: push(sum(x, dims, keep), "sum" + tail); return true;
    case 1:
      if (!is_floating(x.dtype())) return false;
      push(mean(x, dims, keep), "mean" + tail);
      return true;
    case 2:
    case 3:
      if (reduced == 0 || x.dtype() == kBool) return false;
      push(which == 2 ? max(x, dims, keep) : min(x, dims, keep), (which == 2 ? "max" : "min") + tail);
      return true;
    default: {
      if (r == 0 || x.dtype() == kBool) return false;
      const int64_t d = dims[0];
      if (x.shape()[static_cast<size_t>(d < 0 ? d + r : d)] == 0) return false;
      push(which == 4 ? argmax(x, d, keep) : argmin(x, d, keep),
          std::string(which == 4 ? "argmax" : "argmin") + " " + xs + " dim " + std::to_string(d) + (keep ? " keepdim" : ""));
      return true;
    }
    }
  }

  /// A scan along a random dim: cumsum, cumprod, cummax / cummin (values or indices), logcumsumexp, or
  /// (not smooth) a scatter; `smooth`: only those with a smooth gradient (cumsum, logcumsumexp).
  bool scan_step(const Tensor& x, const std::string& xs, bool smooth) {
    const int64_t r = x.dim();
    if (r == 0) return false;
    const int64_t d = rng.chance(0.5) ? rng.range(0, r - 1) : rng.range(-r, -1);
    const std::string tail = " " + xs + " dim " + std::to_string(d);
    if (!smooth && rng.chance(0.3)) return scatter_step(x, d, tail);
    switch (rng.range(0, smooth ? 1 : 4)) {
    case 0: push(cumsum(x, d), "cumsum" + tail); return true;
    case 1:
      if (!is_floating(x.dtype())) return false;
      push(logcumsumexp(x, d), "logcumsumexp" + tail);
      return true;
    case 2: // products of [-3, 3] values overflow f32 after ~80 factors: keep them short
      if (x.dtype() == kBool || x.shape()[static_cast<size_t>(d < 0 ? d + r : d)] > 24) return false;
      push(cumprod(x, d), "cumprod" + tail);
      return true;
    default: {
      if (x.dtype() == kBool) return false;
      const bool max = rng.chance(0.5);
      const auto [values, indices] = max ? cummax(x, d) : cummin(x, d);
      const bool idx = rng.chance(0.3);
      push(idx ? indices : values, std::string(max ? "cummax" : "cummin") + (idx ? " indices" : "") + tail);
      return true;
    }
    }
  }

  /// x with src (a value of x's shape and dtype) scattered into it along d by scatter_reduce (sum, prod,
  /// mean, amax, amin; with or without self) or scatter (the last write wins). The index, of x's shape, is a
  /// new integer input's magnitude clamped to the extent: in range, and many elements to a place (kiln's
  /// remainder of integers is a float, so it would not do).
  bool scatter_step(const Tensor& x, int64_t d, const std::string& tail) {
    const int64_t extent = x.shape()[static_cast<size_t>(d < 0 ? d + x.dim() : d)];
    if (x.dtype() == kBool || extent == 0) return false;
    const Tensor index = clamp(abs(new_input(x.shape(), kInt64)), 0, extent - 1);
    const std::string is = "|%" + std::to_string(pool.size() - 1) + "| clamped to " + std::to_string(extent - 1);
    const Tensor src = new_input(x.shape(), x.dtype());
    const std::string ss = "%" + std::to_string(pool.size() - 1);
    static const std::vector<std::string> reduces = {"sum", "prod", "mean", "amax", "amin", "none"};
    const std::string& reduce = rng.pick(reduces);
    if (reduce == "prod" && extent > 24) return false; // products of [-3, 3] values overflow f32: keep them short
    if (reduce == "none") {
      push(scatter(x, d, index, src), "scatter" + tail + " index " + is + " src " + ss);
      return true;
    }
    const bool with_self = rng.chance(0.5);
    push(scatter_reduce(x, d, index, src, reduce, with_self),
         "scatter_reduce " + reduce + (with_self ? "" : " without self") + tail + " index " + is + " src " + ss);
    return true;
  }

  bool movement(const Tensor& x, const std::string& xs) {
    const IntList& s = x.shape();
    const int64_t r = x.dim();
    switch (rng.range(0, 8)) {
    case 0: { // reshape: split or merge dims, or flatten
      IntList t = s;
      if (r >= 2 && rng.chance(0.5)) {
        const int64_t d = rng.range(0, r - 2);
        t[static_cast<size_t>(d)] *= t[static_cast<size_t>(d) + 1];
        t.erase(t.begin() + d + 1);
      } else if (r >= 1) {
        const int64_t d = rng.range(0, r - 1);
        const int64_t n = t[static_cast<size_t>(d)];
        int64_t f = 1;
        for (int64_t c : {2, 3, 4, 1})
          if (n % c == 0 && n > 0) {
            f = c;
            break;
          }
        t[static_cast<size_t>(d)] = n / (f ? f : 1);
        t.insert(t.begin() + d, f);
      } else {
        t = {1, 1};
      }
      if (rng.chance(0.2) && numel_of(t) > 0) t = {-1};
      push(reshape(x, t), "reshape " + xs + " to " + shape_str(t));
      return true;
    }
    case 1: { // permute
      if (r < 2) return false;
      IntList p(static_cast<size_t>(r));
      for (int64_t k = 0; k < r; ++k) p[static_cast<size_t>(k)] = k;
      for (int64_t k = r - 1; k > 0; --k) std::swap(p[static_cast<size_t>(k)], p[static_cast<size_t>(rng.range(0, k))]);
      push(permute(x, p), "permute " + xs + " " + shape_str(p));
      return true;
    }
    case 2: { // expand size-1 dims, maybe a new leading dim
      IntList t = s;
      for (int64_t& d : t)
        if (d == 1 && rng.chance(0.7)) d = rng.range(2, 5);
      if (t.size() < 4 && rng.chance(0.3)) t.insert(t.begin(), rng.range(1, 3));
      if (numel_of(t) > o.max_numel || t == s) return false;
      push(expand(x, t), "expand " + xs + " to " + shape_str(t));
      return true;
    }
    case 3: { // strided slice, Python bounds
      if (r == 0) return false;
      const int64_t d = rng.range(-r, r - 1);
      const int64_t n = s[static_cast<size_t>(d < 0 ? d + r : d)];
      const int64_t start = rng.range(-n - 1, n), end = rng.chance(0.2) ? std::numeric_limits<int64_t>::max() : rng.range(-n - 1, n + 1);
      const int64_t step = rng.range(1, 3);
      push(slice(x, d, start, end, step),
          "slice " + xs + " dim " + std::to_string(d) + " " + std::to_string(start) + ":" + std::to_string(end) + ":" + std::to_string(step));
      return true;
    }
    case 4: { // constant pad of the last dims
      if (r == 0) return false;
      IntList pads;
      const int64_t k = rng.range(1, std::min<int64_t>(r, 2));
      for (int64_t i = 0; i < 2 * k; ++i) pads.push_back(rng.range(0, 2));
      IntList t = s;
      for (int64_t i = 0; i < k; ++i) t[static_cast<size_t>(r - 1 - i)] += pads[2 * i] + pads[2 * i + 1];
      if (numel_of(t) > o.max_numel) return false;
      const Scalar v = x.dtype() == kBool ? Scalar(true) : random_scalar(x.dtype());
      push(pad(x, pads, v), "pad " + xs + " " + shape_str(pads) + " value " + std::to_string(v.to_double()));
      return true;
    }
    case 5: { // transpose
      if (r < 2) return false;
      const int64_t a = rng.range(0, r - 1), c = rng.range(0, r - 1);
      push(transpose(x, a, c), "transpose " + xs + " " + std::to_string(a) + " " + std::to_string(c));
      return true;
    }
    case 7: { // sliding windows (overlapping, or with gaps)
      if (r == 0 || r >= 5) return false;
      const int64_t d = rng.range(-r, r - 1);
      const int64_t n = s[static_cast<size_t>(d < 0 ? d + r : d)];
      const int64_t size = rng.range(0, std::min<int64_t>(n, 3)), step = rng.range(1, 3);
      if (numel_of(graph::unfold_shape(s, d < 0 ? d + r : d, size, step, r)) > o.max_numel) return false;
      push(x.unfold(d, size, step), "unfold " + xs + " dim " + std::to_string(d) + " size " + std::to_string(size) +
                                        " step " + std::to_string(step));
      return true;
    }
    case 6: { // unsqueeze
      if (r >= 5) return false;
      const int64_t d = rng.range(0, r);
      push(x.unsqueeze(d), "unsqueeze " + xs + " " + std::to_string(d));
      return true;
    }
    default: { // squeeze a size-1 dim
      for (int64_t d = 0; d < r; ++d)
        if (s[static_cast<size_t>(d)] == 1) {
          push(x.squeeze(d), "squeeze " + xs + " " + std::to_string(d));
          return true;
        }
      return false;
    }
    }
  }

  bool concat_step(const Tensor& x, const std::string& xs) {
    const int64_t r = x.dim();
    if (r == 0) return false;
    const int64_t d = rng.range(0, r - 1);
    std::vector<Tensor> parts = {x};
    std::string what = "concat dim " + std::to_string(d) + " " + xs;
    const int64_t n = rng.range(1, 2);
    for (int64_t k = 0; k < n; ++k) {
      if (rng.chance(0.3)) {
        parts.push_back(x);
        what += ", " + xs;
        continue;
      }
      IntList t = x.shape();
      t[static_cast<size_t>(d)] = rng.range(0, 3);
      const DType dt = rng.chance(0.8) ? x.dtype() : random_dtype();
      parts.push_back(new_input(t, dt));
      what += ", %" + std::to_string(pool.size() - 1);
    }
    IntList out = x.shape();
    for (size_t k = 1; k < parts.size(); ++k) out[static_cast<size_t>(d)] += parts[k].shape()[static_cast<size_t>(d)];
    if (numel_of(out) > o.max_numel) return false;
    push(concat(parts, d), what);
    return true;
  }

  bool matmul_step(const Tensor& x, const std::string& xs) {
    if (x.dim() == 0 || x.dim() > 3 || x.dtype() == kBool) return false;
    const int64_t k = x.shape().back();
    IntList t;
    if (x.dim() >= 2 && rng.chance(0.2)) t = {k}; // matrix x vector
    else if (x.dim() == 3 && rng.chance(0.3)) t = {x.shape()[0], k, rng.range(1, 9)};
    else t = {k, rng.range(1, 9)};
    if (x.dim() == 1 && rng.chance(0.3)) t = {k};
    const DType dt = o.differentiable ? kFloat64 : x.dtype();
    Tensor y = new_input(t, dt);
    const int64_t m = x.dim() >= 2 ? x.shape()[x.shape().size() - 2] : 1;
    if (numel_of(x.shape()) / std::max<int64_t>(k, 1) * t.back() > o.max_numel || m * k * t.back() > 20000) return false;
    if (rng.chance(0.3) && t.size() == 2) { // the right operand as a transposed view
      Tensor yt = new_input({t[1], t[0]}, dt);
      push(matmul(x, yt.t()), "matmul " + xs + ", %" + std::to_string(pool.size() - 1) + ".t()");
      return true;
    }
    push(matmul(x, y), "matmul " + xs + ", %" + std::to_string(pool.size() - 1));
    return true;
  }

  /// Differentiable programs: f64, smooth ops only, values kept moderate.
  bool smooth_step(const Tensor& x, const std::string& xs, int kind) {
    const int64_t r = x.dim();
    if (kind < 25) {
      static const std::vector<std::pair<const char*, Tensor (*)(const Tensor&, Loc)>> ops = {
          {"sin", sin}, {"cos", cos},       {"tanh", tanh}, {"sigmoid", sigmoid},
          {"neg", neg}, {"square", square}, {"atan", atan}, {"asinh", asinh}};
      const auto& [name, f] = rng.pick(ops);
      push(f(x, Loc::current()), std::string(name) + " " + xs);
      return true;
    }
    if (kind < 33) { // functions needing a bounded or positive argument
      switch (rng.range(0, 3)) {
      case 0: push(exp(tanh(x)), "exp(tanh " + xs + ")"); return true;
      case 1: push(log(square(x) + 1.0), "log(" + xs + "^2 + 1)"); return true;
      case 2: push(sqrt(square(x) + 0.5), "sqrt(" + xs + "^2 + 0.5)"); return true;
      default: push(reciprocal(square(x) + 1.0), "1/(" + xs + "^2 + 1)"); return true;
      }
    }
    if (kind < 50) {
      static const std::vector<std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&, Loc)>> ops = {
          {"add", kiln::add}, {"sub", sub}, {"mul", mul}};
      std::string what = std::string(rng.pick(ops).first);
      const auto& [name, f] = ops[static_cast<size_t>(rng.range(0, 2))];
      what = std::string(name) + " " + xs + ", ";
      const Tensor y = partner(x, what);
      push(f(x, y, Loc::current()), what);
      return true;
    }
    if (kind < 55) { // division by something bounded away from 0
      std::string what = "div " + xs + ", 1.5 + sin ";
      const Tensor y = partner(x, what);
      push(x / (sin(y) + 1.5), what);
      return true;
    }
    if (kind < 60) { // where with a condition on an input
      std::string what = "where(";
      const Tensor c = partner(x, what) > 0.1;
      what += " > 0.1), " + xs + ", ";
      const Tensor y = partner(x, what);
      push(where(c, x, y), what);
      return true;
    }
    if (kind < 70) { // sum / mean
      const bool keep = rng.chance(0.5);
      const IntList dims = random_dims(r, false);
      // a mean of no elements is NaN, which would leave gradcheck nothing to check
      const bool m = rng.chance(0.5) && reduced_count(x, dims) > 0;
      push(m ? mean(x, dims, keep) : sum(x, dims, keep),
          std::string(m ? "mean " : "sum ") + xs + " dims " + shape_str(dims) + (keep ? " keepdim" : ""));
      return true;
    }
    if (kind < 85) return movement(x, xs);
    if (kind < 88) return scan_step(x, xs, true);
    if (kind < 94) return concat_step(x, xs);
    return matmul_step(x, xs);
  }

  /// Runs the whole program; returns its outputs.
  std::vector<Tensor> run() {
    const int64_t n_inputs = rng.range(1, 2);
    for (int64_t k = 0; k < n_inputs; ++k) new_input(random_shape(), random_dtype());
    const int64_t n_ops = rng.range(o.min_ops, o.max_ops);
    for (int64_t k = 0, tries = 0; k < n_ops && tries < 4 * n_ops; ++tries) {
      const size_t before = pool.size();
      try {
        if (step()) ++k;
      } catch (const Error&) {
        // an invalid combination (e.g. arithmetic on bools): deterministic, so replays skip it too
      }
      if (pool.size() > before && pool.back().numel() > o.max_numel) { // too big to be useful
        pool.resize(before);
        is_input.resize(before);
        steps.resize(before);
      }
    }
    std::vector<Tensor> out = {pool.back()};
    std::vector<size_t> others;
    for (size_t k = 0; k + 1 < pool.size(); ++k)
      if (!is_input[k]) others.push_back(k);
    if (!others.empty() && rng.chance(0.35)) out.push_back(pool[rng.pick(others)]);
    if (o.differentiable) // keep outputs that depend on an input
      for (Tensor& t : out)
        if (!is_floating(t.dtype())) t = cast(t, kFloat64);
    return out;
  }
};

} // namespace

Tensor make_tensor(const InputSpec& spec, uint64_t seed) {
  const int64_t n = numel_of(spec.shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const double u = graph::random_uniform(seed, static_cast<uint64_t>(k), true);
    const bool f = is_floating(spec.dtype);
    double x = 0;
    switch (spec.fill) {
    case Fill::Normal: x = f ? 6 * u - 3 : std::floor(19 * u) - 9; break;
    case Fill::Positive: x = f ? 0.1 + 3.9 * u : 1 + std::floor(9 * u); break;
    case Fill::Ties: x = f ? std::floor(9 * u) / 2 - 2 : std::floor(5 * u) - 2; break;
    case Fill::Specials: {
      x = 6 * u - 3;
      const double pick = graph::random_uniform(seed + 1, static_cast<uint64_t>(k), true);
      static const double sp[] = {kNaN, kInf, -kInf, 0.0, -0.0, 1e30, -1e30, 1e-30, 1.0};
      if (pick < 0.3) x = sp[static_cast<size_t>(pick * 30) % std::size(sp)];
      break;
    }
    }
    v[static_cast<size_t>(k)] = x;
  }
  const IntList& s = spec.shape;
  switch (spec.dtype) {
  case DType::Float32: return from_vector(std::vector<float>(v.begin(), v.end()), s);
  case DType::Float64: return from_vector(v, s);
  case DType::Int32: return from_vector(std::vector<int32_t>(v.begin(), v.end()), s);
  case DType::Int64: return from_vector(std::vector<int64_t>(v.begin(), v.end()), s);
  case DType::Bool: {
    std::vector<bool> x;
    for (double d : v) x.push_back(spec.fill == Fill::Normal ? d > 0 : d >= 2);
    return from_vector(x, s);
  }
  }
  return {};
}

RandomProgram make_program(uint64_t seed, const GenOptions& options) {
  RandomProgram p;
  p.seed = seed;
  p.options = options;
  Gen g(seed, p.options);
  g.input = [&](const InputSpec& spec) {
    p.inputs.push_back(spec);
    return make_tensor(spec, seed * 1000 + p.inputs.size());
  };
  g.run();
  return p;
}

std::vector<Tensor> RandomProgram::make_inputs() const {
  std::vector<Tensor> out;
  for (size_t k = 0; k < inputs.size(); ++k) out.push_back(make_tensor(inputs[k], seed * 1000 + k + 1));
  return out;
}

std::vector<Tensor> RandomProgram::build(const std::vector<Tensor>& in) const {
  Gen g(seed, options);
  size_t next = 0;
  g.input = [&](const InputSpec& spec) {
    if (next >= in.size()) throw Error("random_graph", "replay needs more inputs than were given");
    return in[next++];
  };
  return g.run();
}

std::string RandomProgram::describe() const {
  Gen g(seed, options);
  size_t k = 0;
  g.input = [&](const InputSpec& spec) { return make_tensor(spec, seed * 1000 + ++k); };
  g.run();
  std::string out;
  for (const std::string& line : g.steps) out += "  " + line + "\n";
  return out;
}

// ---------------------------------------------------------------- graph helpers

namespace {

std::vector<const graph::Node*> raw(const std::vector<NodeRef>& v) {
  std::vector<const graph::Node*> out;
  for (const NodeRef& n : v) out.push_back(n.get());
  return out;
}

NodeRef rebuild(const graph::Node* n, const std::unordered_map<const graph::Node*, NodeRef>& map) {
  std::vector<NodeRef> ins;
  bool same = true;
  for (const NodeRef& i : n->inputs) {
    ins.push_back(map.at(i.get()));
    same = same && ins.back() == i;
  }
  if (same) return n->shared_from_this();
  return graph::make_node(n->op, n->dtype, n->shape, std::move(ins), n->attrs);
}

} // namespace

std::vector<NodeRef> clone_graph(const std::vector<NodeRef>& roots) {
  std::unordered_map<const graph::Node*, NodeRef> map;
  for (const graph::Node* n : graph::topo_order(raw(roots))) {
    if (n->op == OpKind::Input) map[n] = graph::make_input(n->dtype, n->shape, n->realized());
    else map[n] = rebuild(n, map);
  }
  std::vector<NodeRef> out;
  for (const NodeRef& r : roots) out.push_back(map.at(r.get()));
  return out;
}

std::vector<NodeRef> substitute(const std::vector<NodeRef>& roots, const graph::Node* from, const NodeRef& to) {
  std::unordered_map<const graph::Node*, NodeRef> map;
  for (const graph::Node* n : graph::topo_order(raw(roots))) map[n] = n == from ? to : rebuild(n, map);
  std::vector<NodeRef> out;
  for (const NodeRef& r : roots) out.push_back(map.at(r.get()));
  return out;
}

NodeRef as_input(const NodeRef& n) {
  const graph::InterpretResult v = graph::interpret_one(n);
  const size_t count = v.values.size();
  auto storage = runtime::allocate_host(std::max<size_t>(1, count) * dtype_size(n->dtype));
  void* p = storage->data();
  for (size_t k = 0; k < count; ++k) switch (n->dtype) {
    case DType::Bool: static_cast<uint8_t*>(p)[k] = v.ints[k] != 0; break;
    case DType::Int32: static_cast<int32_t*>(p)[k] = static_cast<int32_t>(v.ints[k]); break;
    case DType::Int64: static_cast<int64_t*>(p)[k] = v.ints[k]; break;
    case DType::Float32: static_cast<float*>(p)[k] = static_cast<float>(v.values[k]); break;
    case DType::Float64: static_cast<double*>(p)[k] = v.values[k]; break;
    }
  return graph::make_input(n->dtype, n->shape, storage);
}

namespace {

/// Builds the error-bound graph of every node, memoized.
struct ErrorBound {
  std::unordered_map<const graph::Node*, NodeRef> memo;

  static NodeRef c(double v, const graph::Shape& s) { return b::constant(v, kFloat64, s); }
  static NodeRef f64(const NodeRef& n) { return b::cast(n, kFloat64); }
  static NodeRef un(OpKind op, const NodeRef& x) { return b::unary(op, x); }
  static NodeRef bin(OpKind op, const NodeRef& x, const NodeRef& y) { return b::binary(op, x, y); }
  static NodeRef absv(const NodeRef& n) { return un(OpKind::Abs, f64(n)); }
  static NodeRef is_zero(const NodeRef& e) { return bin(OpKind::Eq, e, c(0, e->shape)); }
  /// 0 where e == 0, else v (so that 0 * inf never makes NaN in exact places).
  static NodeRef unless_exact(const NodeRef& e, const NodeRef& v) { return b::where(is_zero(e), c(0, e->shape), v); }
  /// inf where cond holds, else v.
  static NodeRef inf_if(const NodeRef& cond, const NodeRef& v) { return b::where(cond, c(kInf, v->shape), v); }
  /// One ulp of n's dtype at n's value (an upper bound; subnormals included).
  static NodeRef ulp(const NodeRef& n) {
    const bool f32 = n->dtype == kFloat32;
    return b::add(b::mul(absv(n), c(f32 ? 0x1.0p-23 : 0x1.0p-52, n->shape)), c(f32 ? 0x1.0p-149 : 0x1.0p-1074, n->shape));
  }
  static NodeRef ulps(const NodeRef& n, double k) { return b::mul(ulp(n), c(k, n->shape)); }
  /// |x| > 2 e (the value's sign or zero-ness is certain), or e == 0.
  static NodeRef certain(const NodeRef& x, const NodeRef& e) {
    return bin(OpKind::LogicalOr, is_zero(e), bin(OpKind::Gt, absv(x), b::mul(e, c(2, e->shape))));
  }
  /// The relative perturbation is too large for a first-order bound near a singularity at 0.
  static NodeRef near_zero(const NodeRef& x, const NodeRef& e) {
    return bin(OpKind::Gt, b::mul(e, c(4, e->shape)), absv(x));
  }

  NodeRef of(const NodeRef& n) {
    auto it = memo.find(n.get());
    if (it != memo.end()) return it->second;
    NodeRef r = compute(n);
    memo[n.get()] = r;
    return r;
  }

  NodeRef compute(const NodeRef& n) {
    const graph::Shape& s = n->shape;
    const bool fl = is_floating(n->dtype);
    auto E = [&](size_t i) { return of(n->inputs[i]); };
    auto X = [&](size_t i) { return n->inputs[i]; };
    // Integer and bool results: exact unless a discrete decision depends on an inexact value.
    switch (n->op) {
    case OpKind::Input:
    case OpKind::Const:
    case OpKind::Arange: return c(0, s);
    case OpKind::Rand:
    case OpKind::Randn: return fl ? ulps(n, 8) : c(0, s);
    case OpKind::Neg:
    case OpKind::Abs:
    case OpKind::Relu:
    case OpKind::Detach:
    case OpKind::CustomOutput: // the identity of its value
    case OpKind::CheckIndex: return E(0);
    case OpKind::Exp: return b::add(unless_exact(E(0), b::mul(absv(n), E(0))), ulps(n, 4));
    case OpKind::Expm1: // expm1' = expm1 + 1
      return b::add(unless_exact(E(0), b::mul(un(OpKind::Abs, b::add(f64(n), c(1, s))), E(0))), ulps(n, 4));
    case OpKind::Log:
      return inf_if(near_zero(X(0), E(0)), b::add(unless_exact(E(0), b::div(E(0), absv(X(0)))), ulps(n, 4)));
    case OpKind::Log1p: { // log1p' = 1 / (1 + x), singular at -1
      const NodeRef u = b::add(f64(X(0)), c(1, s));
      return inf_if(near_zero(u, E(0)), b::add(unless_exact(E(0), b::div(E(0), absv(u))), ulps(n, 4)));
    }
    case OpKind::Sqrt:
      return inf_if(near_zero(X(0), E(0)),
                    b::add(unless_exact(E(0), b::div(E(0), b::mul(absv(n), c(2, s)))), unless_exact(E(0), ulp(n))));
    case OpKind::Rsqrt:
      return inf_if(near_zero(X(0), E(0)), b::add(unless_exact(E(0), b::div(b::mul(E(0), absv(n)), absv(X(0)))), ulps(n, 2)));
    case OpKind::Sin:
    case OpKind::Cos: // documented limitation (README): no Payne-Hanek reduction, inaccurate beyond ~1e10
      return inf_if(bin(OpKind::Gt, absv(X(0)), c(1e9, s)), b::add(E(0), ulps(n, 4)));
    case OpKind::Tanh: return b::add(E(0), ulps(n, 4));
    case OpKind::Sigmoid: return b::add(b::mul(E(0), c(0.25, s)), ulps(n, 6));
    case OpKind::Erf: return b::add(b::mul(E(0), c(1.13, s)), ulps(n, 2)); // erf' <= 2/sqrt(pi)
    case OpKind::Tan: { // tan' = 1 + tan^2; first order only while that stays below |tan| + 1
      const NodeRef e = b::mul(E(0), b::add(c(1, s), b::mul(f64(n), f64(n))));
      const NodeRef unsure = bin(OpKind::LogicalOr, bin(OpKind::Gt, absv(X(0)), c(1e5, s)),
                                 bin(OpKind::Gt, b::mul(e, c(4, s)), b::add(absv(n), c(1, s))));
      return inf_if(unsure, b::add(e, ulps(n, 4)));
    }
    case OpKind::Atan: return b::add(E(0), ulps(n, 2)); // atan' <= 1
    case OpKind::Asinh: return b::add(E(0), ulps(n, 4)); // asinh' <= 1
    case OpKind::Asin:
    case OpKind::Acos: { // 1 / sqrt(1 - x^2), singular at +-1
      const NodeRef u = b::sub(c(1, s), absv(X(0)));
      const NodeRef d = un(OpKind::Sqrt, absv(b::mul(u, b::add(c(1, s), absv(X(0))))));
      return inf_if(near_zero(u, E(0)), b::add(unless_exact(E(0), b::div(b::mul(E(0), c(2, s)), d)), ulps(n, 4)));
    }
    case OpKind::Acosh: { // 1 / sqrt(x^2 - 1), singular at 1
      const NodeRef u = b::sub(f64(X(0)), c(1, s));
      const NodeRef d = un(OpKind::Sqrt, absv(b::mul(u, b::add(f64(X(0)), c(1, s)))));
      return inf_if(near_zero(u, E(0)), b::add(unless_exact(E(0), b::div(b::mul(E(0), c(2, s)), d)), ulps(n, 4)));
    }
    case OpKind::Atanh: { // 1 / (1 - x^2), singular at +-1
      const NodeRef u = b::sub(c(1, s), absv(X(0)));
      return inf_if(near_zero(u, E(0)), b::add(unless_exact(E(0), b::div(b::mul(E(0), c(2, s)), absv(u))), ulps(n, 4)));
    }
    case OpKind::Sinh:
    case OpKind::Cosh: // derivative cosh / sinh <= |sinh| + 1 <= |y| + 1, to first order (E(0) <= 1/4)
      return inf_if(bin(OpKind::Gt, E(0), c(0.25, s)),
                    b::add(unless_exact(E(0), b::mul(b::mul(E(0), c(2, s)), b::add(absv(n), c(1, s)))), ulps(n, 4)));
    case OpKind::Log2:
    case OpKind::Log10: // log2' = 1 / (x ln2) < 1.45 / x
      return inf_if(near_zero(X(0), E(0)),
                    b::add(unless_exact(E(0), b::div(b::mul(E(0), c(1.45, s)), absv(X(0)))), ulps(n, 4)));
    case OpKind::Exp2: return b::add(unless_exact(E(0), b::mul(absv(n), E(0))), ulps(n, 4)); // exp2' = y ln2 < y
    case OpKind::Floor:
    case OpKind::Ceil:
    case OpKind::Trunc:
    case OpKind::Round: return unless_exact(E(0), b::add(E(0), c(1, s))); // exact; an inexact input may cross a step
    case OpKind::Reciprocal:
      return inf_if(near_zero(X(0), E(0)),
                    b::add(unless_exact(E(0), b::div(b::mul(E(0), absv(n)), absv(X(0)))), unless_exact(E(0), ulp(n))));
    case OpKind::LogicalNot: return inf_if(un(OpKind::LogicalNot, certain(X(0), E(0))), c(0, s));
    case OpKind::Cast: {
      const DType from = X(0)->dtype;
      if (!is_floating(from)) return E(0); // ints convert identically on both sides
      if (n->dtype == kBool) return inf_if(un(OpKind::LogicalNot, certain(X(0), E(0))), c(0, s));
      if (!fl) return inf_if(un(OpKind::LogicalNot, is_zero(E(0))), c(0, s));
      return b::add(E(0), unless_exact(E(0), ulp(n)));
    }
    case OpKind::Add:
    case OpKind::Sub: {
      if (!fl) return b::add(E(0), E(1));
      const NodeRef e = b::add(E(0), E(1));
      return b::add(e, unless_exact(e, ulp(n)));
    }
    case OpKind::Mul: {
      if (!fl) return b::add(E(0), E(1));
      const NodeRef e = b::add(b::add(unless_exact(E(0), b::mul(E(0), absv(X(1)))), unless_exact(E(1), b::mul(E(1), absv(X(0))))),
                               b::mul(E(0), E(1)));
      return b::add(e, unless_exact(e, ulp(n)));
    }
    case OpKind::Div: {
      const NodeRef e = b::add(E(0), unless_exact(E(1), b::mul(E(1), absv(n))));
      const NodeRef q = b::div(e, absv(X(1)));
      return inf_if(near_zero(X(1), E(1)), b::add(unless_exact(e, q), unless_exact(e, ulp(n))));
    }
    case OpKind::Pow: {
      if (!fl) return b::add(E(0), E(1));
      const NodeRef ta = unless_exact(E(0), b::mul(E(0), absv(b::div(b::mul(f64(X(1)), f64(n)), f64(X(0))))));
      const NodeRef tb = unless_exact(E(1), b::mul(E(1), absv(b::mul(f64(n), un(OpKind::Log, absv(X(0)))))));
      return inf_if(near_zero(X(0), E(0)), b::add(b::add(ta, tb), ulps(n, 8)));
    }
    case OpKind::Atan2: { // |partials| <= 1 / r, r = |(x, y)|; the cut along x < 0 needs y's sign certain
      const NodeRef e = b::add(E(0), E(1));
      const NodeRef r = un(OpKind::Sqrt, b::add(b::mul(f64(X(0)), f64(X(0))), b::mul(f64(X(1)), f64(X(1)))));
      const NodeRef cut =
          bin(OpKind::LogicalAnd, un(OpKind::LogicalNot, certain(X(0), E(0))), bin(OpKind::Lt, f64(X(1)), c(0, s)));
      const NodeRef unsure = bin(OpKind::LogicalOr, cut, near_zero(r, e));
      return inf_if(unsure, b::add(unless_exact(e, b::div(b::mul(e, c(2, s)), r)), ulps(n, 2)));
    }
    case OpKind::Fmod:
    case OpKind::Remainder: { // x - k y, k = trunc / floor(x / y): E(0) + |k| E(1), unless x / y may cross an
                              // integer (a jump by y); exact on exact operands (remainder's m + y rounds once)
      const NodeRef q = b::div(f64(X(0)), f64(X(1)));
      const NodeRef e = b::add(E(0), unless_exact(E(1), b::mul(b::add(absv(q), c(1, s)), E(1))));
      const NodeRef gap = b::mul(absv(b::sub(q, un(OpKind::Round, q))), absv(X(1))); // to the nearest jump, in x
      const NodeRef unsure = bin(OpKind::LogicalOr, near_zero(X(1), E(1)), bin(OpKind::Lt, gap, b::mul(e, c(2, s))));
      return b::add(inf_if(b::where(is_zero(e), bin(OpKind::Ne, e, e), unsure), unless_exact(e, e)), ulp(n));
    }
    case OpKind::Maximum:
    case OpKind::Minimum: return fl ? bin(OpKind::Maximum, E(0), E(1)) : b::add(E(0), E(1));
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge: {
      const NodeRef e = b::add(E(0), E(1));
      if (!is_floating(X(0)->dtype)) return e;
      const NodeRef gap = un(OpKind::Abs, b::sub(f64(X(0)), f64(X(1))));
      const NodeRef sure = bin(OpKind::LogicalOr, is_zero(e), bin(OpKind::Gt, gap, b::mul(e, c(2, s))));
      return inf_if(un(OpKind::LogicalNot, sure), c(0, s));
    }
    case OpKind::LogicalAnd:
    case OpKind::LogicalOr:
      return inf_if(un(OpKind::LogicalNot, bin(OpKind::LogicalAnd, certain(X(0), E(0)), certain(X(1), E(1)))), c(0, s));
    case OpKind::Where: return b::add(E(0), b::where(X(0), E(1), E(2)));
    case OpKind::Sum: {
      const NodeRef e = b::reduce(OpKind::Sum, E(0), n->attrs.ints);
      if (!fl) return e;
      int64_t count = 1;
      for (int64_t d : n->attrs.ints) count *= X(0)->shape[static_cast<size_t>(d)];
      const double eps = n->dtype == kFloat32 ? 0x1.0p-23 : 0x1.0p-52;
      const NodeRef order = b::mul(b::reduce(OpKind::Sum, absv(X(0)), n->attrs.ints), c(static_cast<double>(count) * eps, s));
      return b::add(b::add(e, order), ulp(n));
    }
    case OpKind::Max:
    case OpKind::Min: return b::reduce(OpKind::Max, E(0), n->attrs.ints);
    case OpKind::Argmax:
    case OpKind::Argmin: return inf_if(un(OpKind::LogicalNot, is_zero(b::reduce(OpKind::Max, E(0), n->attrs.ints))), c(0, s));
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Expand:
    case OpKind::Slice:
    case OpKind::Unfold:
    case OpKind::Concat: {
      std::vector<NodeRef> ins;
      for (size_t i = 0; i < n->inputs.size(); ++i) ins.push_back(E(i));
      return graph::make_node(n->op, kFloat64, s, std::move(ins), n->attrs);
    }
    case OpKind::Gather: // exact where the index is
      return inf_if(un(OpKind::LogicalNot, is_zero(E(1))), b::gather(E(0), n->attrs.ints[0], X(1)));
    case OpKind::Pad: {
      graph::Attrs a = n->attrs;
      a.f0 = a.f1 = 0;
      a.i0 = a.i1 = 0;
      return graph::make_node(OpKind::Pad, kFloat64, s, {E(0)}, a);
    }
    case OpKind::Cumsum:
    case OpKind::ScatterAdd: { // sequential sums: each partial sum rounds once
      const int64_t d = n->attrs.ints[0];
      const bool rev = n->attrs.ints[1] != 0;
      const NodeRef& x = X(n->inputs.size() - 1);
      auto sum = [&](const NodeRef& v) {
        return n->op == OpKind::Cumsum ? b::cumsum(v, d, rev) : b::scatter_sum(X(0), v, d, s[static_cast<size_t>(d)], rev);
      };
      const NodeRef e = sum(E(n->inputs.size() - 1));
      if (!fl) return e;
      const double eps = n->dtype == kFloat32 ? 0x1.0p-23 : 0x1.0p-52;
      const double count = static_cast<double>(x->shape[static_cast<size_t>(d)]);
      return b::add(b::add(e, b::mul(sum(absv(x)), c(count * eps, s))), ulp(n));
    }
    case OpKind::ScatterMax: // moves by at most its terms' largest error (the generator makes none)
    case OpKind::ScatterMin:
      return b::scatter_sum(X(0), E(1), n->attrs.ints[0], s[static_cast<size_t>(n->attrs.ints[0])],
                            n->attrs.ints[1] != 0);
    case OpKind::ScatterMul: { // as Cumprod's: relative errors add up at each target; none near a zero factor
      const int64_t d = n->attrs.ints[0];
      const bool rev = n->attrs.ints[1] != 0;
      const double eps = n->dtype == kFloat32 ? 0x1.0p-23 : 0x1.0p-52;
      auto sum = [&](const NodeRef& v) { return b::scatter_sum(X(0), v, d, s[static_cast<size_t>(d)], rev); };
      const NodeRef rel = sum(b::add(b::div(E(1), absv(X(1))), c(2 * eps, X(1)->shape)));
      const NodeRef zeros = sum(f64(near_zero(X(1), E(1))));
      return inf_if(bin(OpKind::Gt, zeros, c(0, s)), b::add(b::mul(absv(n), b::mul(rel, c(2, s))), ulp(n)));
    }
    case OpKind::Argsort: // exact where its column's keys are (the generator makes none: it keeps its programs)
      return inf_if(un(OpKind::LogicalNot, is_zero(b::broadcast_to(b::reduce(OpKind::Max, E(0), {n->attrs.ints[0]}), s))),
                    c(0, s));
    case OpKind::Cummax: // a running max or min moves by at most the largest error so far
    case OpKind::Cummin: return b::cummax(E(0), n->attrs.ints[0], n->attrs.ints[1] != 0);
    case OpKind::Logcumsumexp: { // its weights sum to 1; each step rounds in f64 (a few ulps of the running value)
      const int64_t d = n->attrs.ints[0];
      const bool rev = n->attrs.ints[1] != 0;
      const double count = static_cast<double>(X(0)->shape[static_cast<size_t>(d)]);
      const NodeRef steps = b::mul(b::add(b::cummax(absv(n), d, rev), c(1, s)), c(count * 8 * 0x1.0p-52, s));
      return b::add(b::add(b::cummax(E(0), d, rev), steps), ulps(n, 2));
    }
    case OpKind::Cumprod: { // relative errors add up along the products; none near a zero factor
      const int64_t d = n->attrs.ints[0];
      const bool rev = n->attrs.ints[1] != 0;
      const double eps = n->dtype == kFloat32 ? 0x1.0p-23 : 0x1.0p-52;
      const NodeRef rel = b::cumsum(b::add(b::div(E(0), absv(X(0))), c(2 * eps, s)), d, rev);
      const NodeRef zeros_before = b::cumsum(f64(near_zero(X(0), E(0))), d, rev);
      return inf_if(bin(OpKind::Gt, zeros_before, c(0, s)), b::add(b::mul(absv(n), b::mul(rel, c(2, s))), ulp(n)));
    }
    case OpKind::Matmul: {
      const graph::Shape& as = X(0)->shape;
      const graph::Shape& bs = X(1)->shape;
      if (!fl) {
        return b::add(b::matmul(E(0), c(1, bs)), b::matmul(c(1, as), E(1)));
      }
      const double k = static_cast<double>(as.back());
      const double eps = n->dtype == kFloat32 ? 0x1.0p-23 : 0x1.0p-52;
      const NodeRef A = absv(X(0)), B = absv(X(1));
      const NodeRef e = b::add(b::add(b::matmul(E(0), B), b::matmul(A, E(1))), b::mul(b::matmul(A, B), c(k * eps, s)));
      return b::add(e, ulp(n));
    }
    case OpKind::Attention:
    case OpKind::AttentionLse:
    case OpKind::AttentionGrad: break; // not generated here: no bound
    }
    return c(kInf, s);
  }
};

} // namespace

NodeRef error_bound(const NodeRef& n) {
  ErrorBound eb;
  return eb.of(n);
}

NodeRef minimize(NodeRef root, const std::function<bool(const NodeRef&)>& fails, int max_tries) {
  int tries = 0;
  for (bool progress = true; progress && tries < max_tries;) {
    progress = false;
    std::vector<const graph::Node*> order = graph::topo_order({root.get()});
    std::reverse(order.begin(), order.end()); // the root first: big cuts before small ones
    for (const NodeRef& i : root->inputs) { // a smaller root: one of the root's operands
      if (graph::op_category(i->op) == graph::OpCategory::Leaf || tries >= max_tries) continue;
      ++tries;
      if (fails(i)) {
        root = i;
        progress = true;
        break;
      }
    }
    if (progress) continue;
    for (const graph::Node* n : order) {
      if (graph::op_category(n->op) == graph::OpCategory::Leaf || tries >= max_tries) continue;
      std::vector<NodeRef> candidates;
      for (const NodeRef& i : n->inputs) // bypass the op
        if (i->dtype == n->dtype && i->shape == n->shape) candidates.push_back(i);
      if (n != root.get()) candidates.push_back(as_input(n->shared_from_this())); // cut the subgraph
      for (const NodeRef& cand : candidates) {
        ++tries;
        NodeRef smaller = substitute({root}, n, cand)[0];
        if (smaller != root && fails(smaller)) {
          root = smaller;
          progress = true;
          break;
        }
      }
      if (progress) break;
    }
  }
  return root;
}

std::string describe_graph(const NodeRef& root) {
  std::ostringstream os;
  os.precision(9);
  os << graph::print_graph({root});
  for (const graph::Node* n : graph::topo_order({root.get()})) {
    if (n->op != OpKind::Input || !n->realized()) continue;
    os << "  input i0=" << n->attrs.i0 << " " << dtype_name(n->dtype) << graph::shape_str(n->shape) << ": [";
    const int64_t count = std::min<int64_t>(n->numel(), 64);
    const void* p = n->realized()->data();
    for (int64_t k = 0; k < count; ++k) {
      os << (k ? ", " : "");
      switch (n->dtype) {
      case DType::Bool: os << int(static_cast<const uint8_t*>(p)[k]); break;
      case DType::Int32: os << static_cast<const int32_t*>(p)[k]; break;
      case DType::Int64: os << static_cast<const int64_t*>(p)[k]; break;
      case DType::Float32: os << static_cast<const float*>(p)[k]; break;
      case DType::Float64: os << static_cast<const double*>(p)[k]; break;
      }
    }
    os << (n->numel() > count ? ", ...]\n" : "]\n");
  }
  return os.str();
}

} // namespace kiln::testing

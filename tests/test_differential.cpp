// Differential testing on random programs: every seeded program (tests/random_graph.h)
// runs fused, unfused, and through the reference interpreter. Each JIT result must
// agree with the interpreter within a first-order error bound derived from the graph
// itself (0 for exactly rounded chains, a few ulps per transcendental, n*eps*sum|x|
// for reductions and matmuls, propagated through every op; elements whose value
// depends on a discrete decision over an inexact value are not compared). Fused and
// unfused results must be bitwise equal, every element.
//
// On a mismatch the test prints the seed, the program, and a minimized graph in text
// IR with its input values. KILN_SOAK=N runs N programs instead of the CI count;
// KILN_SEED=S runs only seed S.
//
// Gradients: random differentiable f64 programs under kiln::gradcheck (central finite
// differences) and, on the first output, analytic gradients evaluated by the JIT
// against finite differences of the interpreter.

#include <gtest/gtest.h>

#include <set>

#include <chrono>
#include <map>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "graph/interpret.h"
#include "graph/text.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"
#include "tests/random_graph.h"

namespace kiln {
namespace {

using graph::NodeRef;
using testing::clone_graph;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

/// The values of a realized node, as doubles and (for integers and bool) exactly.
struct Values {
  std::vector<double> f;
  std::vector<int64_t> i;
};

Values read(const NodeRef& n) {
  Values v;
  const size_t count = static_cast<size_t>(n->numel());
  const void* p = count ? n->realized()->data() : nullptr;
  for (size_t k = 0; k < count; ++k) {
    switch (n->dtype) {
    case DType::Bool: v.i.push_back(static_cast<const uint8_t*>(p)[k] != 0); break;
    case DType::Int32: v.i.push_back(static_cast<const int32_t*>(p)[k]); break;
    case DType::Int64: v.i.push_back(static_cast<const int64_t*>(p)[k]); break;
    case DType::Float32: v.f.push_back(static_cast<const float*>(p)[k]); break;
    case DType::Float64: v.f.push_back(static_cast<const double*>(p)[k]); break;
    }
  }
  return v;
}

/// Runs fresh copies of `roots` through the JIT with fusion on or off.
std::vector<Values> run_jit(const std::vector<NodeRef>& roots, bool fusion) {
  const bool saved = options().fusion;
  options().fusion = fusion;
  std::vector<NodeRef> copy = clone_graph(roots);
  try {
    runtime::realize(copy);
  } catch (...) {
    options().fusion = saved;
    throw;
  }
  options().fusion = saved;
  std::vector<Values> out;
  for (const NodeRef& n : copy) out.push_back(read(n));
  return out;
}

/// The oracle for one root: interpreter values and the error bound of each element.
struct Oracle {
  graph::InterpretResult want;
  std::vector<double> bound;
};

Oracle oracle(const NodeRef& root) {
  Oracle o;
  std::vector<graph::InterpretResult> r = graph::interpret({root, testing::error_bound(root)});
  o.want = std::move(r[0]);
  o.bound = std::move(r[1].values);
  return o;
}

struct Mismatch {
  bool any = false;
  std::string what;
  size_t compared = 0, skipped = 0;
};

/// Compares JIT values with the oracle; the first few mismatches are described.
Mismatch compare(const Values& got, const Oracle& o, DType dt, const std::string& mode) {
  Mismatch m;
  std::ostringstream os;
  os.precision(17);
  int bad = 0;
  const size_t count = o.bound.size();
  for (size_t k = 0; k < count; ++k) {
    const double tol = o.bound[k];
    if (!std::isfinite(tol)) {
      ++m.skipped;
      continue;
    }
    ++m.compared;
    bool ok;
    double g, w;
    if (is_floating(dt)) {
      g = got.f[k];
      w = o.want.values[k];
      if (std::isnan(w) || std::isnan(g)) ok = std::isnan(w) && std::isnan(g);
      else if (tol == 0 || std::isinf(w) || std::isinf(g)) ok = g == w;
      else ok = std::fabs(g - w) <= 2 * tol;
    } else {
      g = static_cast<double>(got.i[k]);
      w = static_cast<double>(o.want.ints[k]);
      ok = got.i[k] == o.want.ints[k];
    }
    if (ok) continue;
    if (++bad <= 5) os << "\n    " << mode << " element " << k << ": got " << g << ", expected " << w << " (bound " << tol << ")";
  }
  if (bad) {
    m.any = true;
    m.what = std::to_string(bad) + " of " + std::to_string(count) + " elements differ in " + mode + os.str();
  }
  return m;
}

/// Fused and unfused must agree bitwise everywhere: every kernel accumulates in the
/// order the kernel IR fixes (codegen::sum_lanes), whatever was fused around it.
Mismatch compare_modes(const Values& fused, const Values& unfused, const Oracle& o, DType dt) {
  Mismatch m;
  int bad = 0;
  std::ostringstream os;
  os.precision(17);
  for (size_t k = 0; k < o.bound.size(); ++k) {
    const bool same = is_floating(dt) ? (std::memcmp(&fused.f[k], &unfused.f[k], sizeof(double)) == 0 ||
                                         (std::isnan(fused.f[k]) && std::isnan(unfused.f[k])))
                                      : fused.i[k] == unfused.i[k];
    if (same) continue;
    if (++bad <= 5) os << "\n    element " << k << ": fused " << (is_floating(dt) ? fused.f[k] : double(fused.i[k]))
                       << ", unfused " << (is_floating(dt) ? unfused.f[k] : double(unfused.i[k]));
  }
  if (bad) {
    m.any = true;
    m.what = std::to_string(bad) + " elements differ between fused and unfused" + os.str();
  }
  return m;
}

/// A planted bug for testing the harness itself: with KILN_DIFF_PLANT=<op name>, the fused
/// result of any float graph containing that op is off by 0.1% in its first element.
std::string g_plant = std::getenv("KILN_DIFF_PLANT") ? std::getenv("KILN_DIFF_PLANT") : "";

void plant_bug(const NodeRef& root, Values& fused) {
  const std::string& plant = g_plant;
  if (plant.empty() || fused.f.empty()) return;
  for (const graph::Node* n : graph::topo_order({root.get()}))
    if (graph::op_name(n->op) == plant) {
      fused.f[0] = static_cast<float>(fused.f[0] * 1.001 + 1e-3);
      return;
    }
}

struct Stats {
  size_t graphs = 0, nodes = 0, compared = 0, skipped = 0;
};

/// Checks one root in both modes; the description of any mismatch, or "".
std::string check_root(const NodeRef& root, Stats* stats) {
  const Oracle o = oracle(root);
  std::string failure;
  std::vector<Values> fused, unfused;
  try {
    fused = run_jit({root}, true);
    unfused = run_jit({root}, false);
  } catch (const Error& e) {
    return std::string("the JIT threw: ") + e.what();
  }
  plant_bug(root, fused[0]);
  const Mismatch a = compare(fused[0], o, root->dtype, "fused");
  const Mismatch b = compare(unfused[0], o, root->dtype, "unfused");
  const Mismatch c = compare_modes(fused[0], unfused[0], o, root->dtype);
  if (stats) {
    stats->compared += a.compared;
    stats->skipped += a.skipped;
  }
  for (const Mismatch* m : {&a, &b, &c})
    if (m->any) failure += "\n  " + m->what;
  return failure;
}

/// Runs program `seed`; on failure reports it with a minimized graph.
void check_program(uint64_t seed, Stats& stats) {
  const testing::RandomProgram prog = testing::make_program(seed);
  std::vector<Tensor> outs = prog.build(prog.make_inputs());
  std::vector<NodeRef> roots;
  for (const Tensor& t : outs) roots.push_back(t.node());
  ++stats.graphs;
  stats.nodes += graph::topo_order({roots[0].get()}).size();

  // All outputs together first (multi-output kernels), then each on its own.
  const std::vector<Values> fused = run_jit(roots, true);
  for (size_t k = 0; k < roots.size(); ++k) {
    const Oracle o = oracle(roots[k]);
    const Mismatch m = compare(fused[k], o, roots[k]->dtype, "fused (all outputs)");
    EXPECT_FALSE(m.any) << "seed " << seed << " output " << k << ": " << m.what << "\nprogram:\n"
                        << prog.describe() << "graph:\n" << testing::describe_graph(roots[k]);
  }
  for (size_t k = 0; k < roots.size(); ++k) {
    const std::string failure = check_root(roots[k], &stats);
    if (failure.empty()) continue;
    const NodeRef small = testing::minimize(roots[k], [](const NodeRef& r) { return !check_root(r, nullptr).empty(); });
    ADD_FAILURE() << "seed " << seed << " output " << k << ":" << failure << "\nprogram:\n" << prog.describe()
                  << "minimized graph:\n" << testing::describe_graph(small) << "its mismatch:" << check_root(small, nullptr)
                  << "\nrerun with KILN_SEED=" << seed;
  }
}

TEST(Differential, RandomPrograms) {
  const int n = env_int("KILN_SOAK", 300);
  const int only = env_int("KILN_SEED", -1);
  const auto start = std::chrono::steady_clock::now();
  Stats stats;
  for (int s = 0; s < n; ++s) {
    const uint64_t seed = only >= 0 ? static_cast<uint64_t>(only) : static_cast<uint64_t>(s) + 1;
    SCOPED_TRACE("seed " + std::to_string(seed));
    try {
      check_program(seed, stats);
    } catch (const Error& e) {
      ADD_FAILURE() << "seed " << seed << " threw: " << e.what() << "\nprogram:\n" << testing::make_program(seed).describe();
    }
    if (only >= 0) break;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[differential] %zu programs, %zu nodes, %zu elements compared, %zu skipped, %.1f s\n", stats.graphs,
              stats.nodes, stats.compared, stats.skipped, secs);
  EXPECT_GT(stats.compared, 5 * stats.skipped) << "too few elements are comparable";
}

// The programs the suite runs (seeds 0-299) reach the ops that combine values by index: scans and the
// scatters (each scatter_reduce reduce, and scatter), so the differential check covers their kernels.
TEST(Differential, ProgramsCoverScansAndScatters) {
  std::map<std::string, int> programs_with;
  const std::vector<std::string> ops = {"cumsum", "scatter ",         "scatter_reduce sum", "scatter_reduce prod",
                                        "scatter_reduce mean", "scatter_reduce amax", "scatter_reduce amin"};
  for (uint64_t seed = 0; seed < 300; ++seed) {
    const std::string text = testing::make_program(seed).describe();
    for (const std::string& op : ops) programs_with[op] += text.find("= " + op) != std::string::npos;
  }
  for (const std::string& op : ops) EXPECT_GE(programs_with[op], 2) << op;
  int scatters = 0;
  for (const std::string& op : ops) scatters += op == "cumsum" ? 0 : programs_with[op];
  std::printf("[differential] of 300 programs: %d with a cumsum, %d scatter steps' programs\n", programs_with["cumsum"],
              scatters);
}

TEST(Differential, GeneratorIsDeterministic) {
  for (uint64_t seed : {3u, 99u, 1234u}) {
    const testing::RandomProgram a = testing::make_program(seed), b = testing::make_program(seed);
    EXPECT_EQ(a.describe(), b.describe());
    std::vector<Tensor> x = a.build(a.make_inputs()), y = b.build(b.make_inputs());
    ASSERT_EQ(x.size(), y.size());
    for (size_t k = 0; k < x.size(); ++k) {
      EXPECT_EQ(x[k].shape(), y[k].shape());
      EXPECT_EQ(x[k].dtype(), y[k].dtype());
    }
  }
}

TEST(Differential, GeneratorCoversTheOpTable) {
  // Over the CI seeds every op category, dtype and a size-0 dim appear.
  std::set<std::string> ops;
  std::set<DType> dtypes;
  bool empty = false;
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    const testing::RandomProgram p = testing::make_program(seed);
    std::vector<Tensor> outs = p.build(p.make_inputs());
    std::vector<const graph::Node*> roots;
    for (const Tensor& t : outs) roots.push_back(t.node().get());
    for (const graph::Node* n : graph::topo_order(roots)) {
      ops.insert(std::string(graph::op_name(n->op)));
      dtypes.insert(n->dtype);
      empty = empty || n->numel() == 0;
    }
  }
  for (const char* op : {"tan", "atan", "asin", "acos", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10",
                         "exp2", "trunc", "atan2", "fmod", "remainder"})
    EXPECT_TRUE(ops.count(op)) << op << " never generated";
  for (const char* op : {"exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "reciprocal", "neg", "abs",
                         "relu", "logical_not", "cast", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq",
                         "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "where", "sum", "max", "min",
                         "argmax", "argmin", "reshape", "permute", "expand", "slice", "pad", "concat", "matmul"})
    EXPECT_TRUE(ops.count(op)) << op << " never generated";
  EXPECT_EQ(dtypes.size(), 5u);
  EXPECT_TRUE(empty) << "no size-0 dim generated";
}

TEST(Differential, MinimizerShrinksToTheCulprit) {
  // A fake failure predicate: "the graph contains a sin node". The minimizer must keep
  // the sin and cut (almost) everything else.
  Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = (exp(x) * 2.0 + sin(x.sum({1}, true) * x)).permute({1, 0}).sum({0});
  auto has_sin = [](const NodeRef& r) {
    for (const graph::Node* n : graph::topo_order({r.get()}))
      if (n->op == graph::OpKind::Sin) return true;
    return false;
  };
  const NodeRef small = testing::minimize(y.node(), has_sin);
  EXPECT_TRUE(has_sin(small));
  EXPECT_LE(graph::topo_order({small.get()}).size(), 3u) << testing::describe_graph(small);
}

TEST(Differential, HarnessCatchesAndMinimizesAPlantedError) {
  g_plant = "tanh";
  Tensor x = from_vector(std::vector<float>{0.5f, -1, 2, 0.25f, 3, -2}, {2, 3});
  Tensor y = (exp(x).sum({1}, true) * tanh(x * 2.0 + 1.0)).t();
  EXPECT_FALSE(check_root(y.node(), nullptr).empty());
  const NodeRef small = testing::minimize(y.node(), [](const NodeRef& r) { return !check_root(r, nullptr).empty(); });
  size_t tanhs = 0, nodes = 0;
  for (const graph::Node* n : graph::topo_order({small.get()})) {
    ++nodes;
    tanhs += n->op == graph::OpKind::Tanh;
  }
  EXPECT_EQ(tanhs, 1u);
  EXPECT_LE(nodes, 2u) << testing::describe_graph(small);
  g_plant.clear();
  EXPECT_TRUE(check_root(y.node(), nullptr).empty());
}

TEST(Differential, ErrorBoundIsZeroForExactChains) {
  Tensor x = from_vector(std::vector<float>{1, -2, 3.5f, 4}, {2, 2});
  Tensor y = relu(x * x - x / 3.0).t() + 1.0;
  const graph::InterpretResult b = graph::interpret_one(testing::error_bound(y.node()));
  for (double v : b.values) EXPECT_EQ(v, 0);
  Tensor z = exp(x).sum({1});
  const graph::InterpretResult bz = graph::interpret_one(testing::error_bound(z.node()));
  for (double v : bz.values) EXPECT_GT(v, 0);
  Tensor c = exp(x) > 1e-3; // a comparison far from its threshold stays exact
  const graph::InterpretResult bc = graph::interpret_one(testing::error_bound(c.node()));
  for (double v : bc.values) EXPECT_EQ(v, 0);
}

// ---------------------------------------------------------------- gradients

TEST(DifferentialGrad, GradcheckOnRandomPrograms) {
  const int n = env_int("KILN_SOAK", 0) > 0 ? env_int("KILN_SOAK", 0) / 4 : 60;
  testing::GenOptions opt;
  opt.differentiable = true;
  opt.min_ops = 2;
  opt.max_ops = 7;
  opt.allow_empty = false;
  opt.max_numel = 256;
  int checked = 0;
  for (int s = 1; s <= n; ++s) {
    const uint64_t seed = 100000 + static_cast<uint64_t>(s);
    const testing::RandomProgram prog = testing::make_program(seed, opt);
    std::vector<Tensor> inputs = prog.make_inputs();
    for (Tensor& t : inputs) ASSERT_EQ(t.dtype(), kFloat64);
    const TensorFn fn = [&](const std::vector<Tensor>& xs) { return prog.build(xs); };
    GradcheckResult r;
    try {
      r = gradcheck(fn, inputs, 1e-6, 1e-5, 1e-3);
    } catch (const Error& e) {
      // an input the outputs do not depend on is the only acceptable error here
      const std::string what = e.what();
      EXPECT_NE(what.find("not"), std::string::npos) << "seed " << seed << ": " << what << "\n" << prog.describe();
      continue;
    }
    ++checked;
    EXPECT_TRUE(r.ok) << "seed " << seed << ": " << r.report << "\nprogram:\n" << prog.describe();
  }
  std::printf("[differential] gradcheck on %d of %d programs\n", checked, n);
  EXPECT_GT(checked, n / 2);
}

/// Central differences of sum(w * f(x)) on the interpreter, for one input element.
double numeric_directional(const testing::RandomProgram& prog, std::vector<Tensor> inputs, size_t which, size_t elem,
                           const std::vector<double>& w, double eps) {
  auto eval = [&](double delta) {
    std::vector<double> v = inputs[which].to_vector<double>();
    v[elem] += delta;
    std::vector<Tensor> in = inputs;
    in[which] = from_vector(v, inputs[which].shape());
    const NodeRef out = prog.build(in)[0].node();
    const graph::InterpretResult r = graph::interpret_one(out, {.exact_f32_rounding = false});
    double s = 0;
    for (size_t k = 0; k < r.values.size(); ++k) s += w[k] * r.values[k];
    return s;
  };
  return (eval(eps) - eval(-eps)) / (2 * eps);
}

TEST(DifferentialGrad, JitGradientsMatchInterpreterFiniteDifferences) {
  const int n = env_int("KILN_SOAK", 0) > 0 ? env_int("KILN_SOAK", 0) / 8 : 25;
  testing::GenOptions opt;
  opt.differentiable = true;
  opt.min_ops = 2;
  opt.max_ops = 6;
  opt.allow_empty = false;
  opt.max_numel = 64;
  for (int s = 1; s <= n; ++s) {
    const uint64_t seed = 200000 + static_cast<uint64_t>(s);
    const testing::RandomProgram prog = testing::make_program(seed, opt);
    std::vector<Tensor> inputs = prog.make_inputs();
    const Tensor out = prog.build(inputs)[0];
    std::vector<double> w(static_cast<size_t>(out.numel()));
    for (size_t k = 0; k < w.size(); ++k) w[k] = std::cos(1.0 + 0.7 * static_cast<double>(k));
    std::vector<Tensor> grads;
    try {
      grads = grad({out}, inputs, {from_vector(w, out.shape())}, /*allow_unused=*/true);
    } catch (const Error& e) {
      ADD_FAILURE() << "seed " << seed << ": " << e.what() << "\n" << prog.describe();
      continue;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::vector<double> g = grads[i].to_vector<double>();
      for (size_t e = 0; e < g.size(); e += 1 + g.size() / 6) {
        const double num = numeric_directional(prog, inputs, i, e, w, 1e-6);
        EXPECT_NEAR(g[e], num, 1e-5 + 1e-4 * std::fabs(num))
            << "seed " << seed << " input " << i << " element " << e << "\nprogram:\n" << prog.describe();
      }
    }
  }
}

} // namespace
} // namespace kiln

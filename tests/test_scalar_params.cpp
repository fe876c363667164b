// Scalar constants as kernel parameters (issue 16, DESIGN.md practice 8): a floating Const
// node's value is a kernel parameter, not baked into the kernel, so that kernels that differ
// only in such constants are one compiled kernel, eager loops with a changing scalar reuse
// their plan, and results stay bitwise those of the baked kernels.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/llvm_jit.h"
#include "codegen/lower.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"

namespace kiln {
namespace {

using codegen::ExprKind;
using codegen::ExprRef;
using codegen::Kernel;
namespace F = nn::functional;
constexpr double kInf = std::numeric_limits<double>::infinity();

// The kernels computing `outputs`, with their launches (fused as kiln fuses).
codegen::Schedule schedule_of(const std::vector<Tensor>& outputs) {
  std::vector<const graph::Node*> nodes;
  for (const Tensor& t : outputs) nodes.push_back(t.node().get());
  return codegen::schedule(nodes, {options().fusion});
}

TEST(ScalarParams, KernelsThatDifferOnlyInConstantsAreOneCompiledKernel) {
  const Tensor x = randn({37}, 3).realize();
  const std::vector<float> xv = x.to_vector<float>();
  std::vector<Tensor> outs;
  for (int i = 0; i < 200; ++i) outs.push_back(sigmoid(x * (0.125 * i - 7.0)) + 2.3); // 2.3: no c_i (a shared node is another kernel)
  // Each realized alone (together, small independent values would share kernels: horizontal fusion).
  std::set<std::string> names;
  for (const Tensor& o : outs) {
    const codegen::Schedule s = schedule_of({o});
    EXPECT_EQ(s.launches.size(), 1u);
    names.insert(s.launches[0].kernel.name);
  }
  EXPECT_EQ(names.size(), 1u) << *names.begin();
  const size_t compiles = runtime::executor_stats().compiles;
  for (const Tensor& o : outs) o.realize();
  // One kernel; the JIT may compile it once per thread that misses its cache at the same time.
  EXPECT_LE(runtime::executor_stats().compiles - compiles, std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < 200; i += 7) { // against the same computation realized alone
    const std::vector<float> v = outs[i].to_vector<float>();
    options().schedule_cache = false;
    EXPECT_EQ(v, (sigmoid(x * (0.125 * i - 7.0)) + 2.3).to_vector<float>()) << i;
    options().schedule_cache = true;
    for (size_t j = 0; j < v.size(); ++j)
      ASSERT_NEAR(v[j], 1 / (1 + std::exp(-xv[j] * (0.125 * i - 7.0))) + 2.3, 1e-5) << i << ", " << j;
  }
}

TEST(ScalarParams, IntegerConstantsAreParametersToo) {
  const Tensor i = arange(0, 50, 1, kInt64).realize();
  (void)(i * 3 + 1).realize();
  const auto before = runtime::executor_stats();
  for (int64_t step = 0; step < 20; ++step) {
    const std::vector<int64_t> v = (i * (step - 7) + step * 1000).to_vector<int64_t>();
    for (int64_t k = 0; k < 50; ++k) ASSERT_EQ(v[k], k * (step - 7) + step * 1000);
  }
  const auto after = runtime::executor_stats();
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_GE(after.plan_reuses - before.plan_reuses, 15u); // steps whose constants are not 0, 1 or shared
}

TEST(ScalarParams, AnEagerLoopWithAChangingScalarReusesItsPlan) {
  Tensor x = full({1000}, 1.0, kFloat64).realize();
  double want = 1.0;
  (void)(x * 1.5 - 0.25).realize(); // the plan and kernel, made once
  const auto before = runtime::executor_stats();
  for (int step = 0; step < 50; ++step) {
    const double lr = 1.0 / (step + 3), shift = 0.01 * step;
    x = (x * (1 + lr) - shift).realize();
    want = want * (1 + lr) - shift;
  }
  const auto after = runtime::executor_stats();
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.plan_reuses - before.plan_reuses, 50u);
  for (double v : x.to_vector<double>()) ASSERT_EQ(v, want); // each step used its own scalars
}

TEST(ScalarParams, CompiledFunctionsThatDifferInAConstantShareTheKernelNotTheValue) {
  auto make = [](double c) {
    return compile([c](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 0.5 + c}; });
  };
  auto f = make(1.0), g = make(-4.0);
  for (int i = 0; i < 3; ++i) {
    const Tensor x = full({17}, static_cast<double>(i));
    EXPECT_EQ(f({x})[0].to_vector<float>()[16], 0.5f * i + 1.0f);
    EXPECT_EQ(g({x})[0].to_vector<float>()[16], 0.5f * i - 4.0f);
  }
}

TEST(ScalarParams, ConstantsTheEmittersSpecialiseOnStayBaked) {
  const Tensor x = rand({16}, 4).realize();
  const codegen::Schedule s2 = schedule_of({pow(x, 2.0)}), s3 = schedule_of({pow(x, 3.0)});
  const std::string text = codegen::print_kernel(s2.launches[0].kernel);
  EXPECT_NE(text.find("2:f32"), std::string::npos) << text; // the exponent is in the kernel
  EXPECT_NE(s2.launches[0].kernel.name, s3.launches[0].kernel.name);
  EXPECT_EQ(pow(x, 2.0).to_vector<float>(), (x * x).to_vector<float>());
  // So does a divisor: x / 1024 is a multiplication by 2^-10.
  const std::string divided = codegen::print_kernel(schedule_of({x / 1024.0}).launches[0].kernel);
  EXPECT_NE(divided.find("1024:f32"), std::string::npos) << divided;
  // A plain scalar is a parameter: its value is not in the kernel's text.
  const std::string scaled = codegen::print_kernel(schedule_of({x * 0.7071067811865476}).launches[0].kernel);
  EXPECT_EQ(scaled.find("0.70710"), std::string::npos) << scaled;
  EXPECT_NE(scaled.find(":f32"), std::string::npos) << scaled;
}

// Property: random programs of ops with scalar constants, run with one set of constants and
// then with another, give bitwise the results of a fresh plan for the second. Half of them
// ("ordinary": distinct constants, none that the graph builder simplifies or LLVM specialises
// on) must reuse the first plan; the others draw special values (NaN, infinities, zeros, 1)
// and use baked divisors and exponents too.
TEST(ScalarParams, RandomProgramsWithNewConstantsReuseTheirPlanBitwise) {
  const std::vector<double> specials = {0.5, -1.5, 3.0, 1e-3, -0.0, 0.0, 7.25, 1e30, -1e-30, kInf, -kInf,
                                        std::numeric_limits<double>::quiet_NaN(), 2.0, 1.0, -1.0};
  std::mt19937_64 rng(1616);
  for (int program = 0; program < 60; ++program) {
    const bool ordinary = program % 2 == 0;
    const DType dt = rng() % 2 ? kFloat32 : kFloat64;
    const Tensor x = randn({6, 10}, 100 + program, dt).realize();
    std::vector<int> ops(3 + rng() % 6);
    for (int& o : ops) o = static_cast<int>(rng() % 9);
    if (ordinary)
      for (int& o : ops) o = o == 5 || o == 6 ? 0 : o;
    auto run = [&](const std::vector<double>& c) {
      Tensor y = x;
      size_t k = 0;
      for (int o : ops) {
        const double a = c[k++ % c.size()], b = c[k++ % c.size()];
        switch (o) {
        case 0: y = y * a + b; break;
        case 1: y = maximum(y - a, full({10}, b, dt)); break;
        case 2: y = where(y > a, y, full({1}, b, dt)); break;
        case 3: y = exp(tanh(y) * a); break;
        case 4: y = y.sum({1}, true) * a + y; break;
        case 5: y = y / a; break;          // a baked divisor
        case 6: y = pow(abs(y), a); break; // a baked exponent
        case 7: y = F::softmax(y * a, 1); break;
        default: y = sigmoid(y) - b; break;
        }
      }
      return y;
    };
    auto constants = [&] {
      std::vector<double> c(2 * ops.size());
      for (size_t i = 0; i < c.size(); ++i)
        c[i] = ordinary ? (rng() % 2 ? 1 : -1) * (1.25 + static_cast<double>(i) + std::ldexp(static_cast<double>(rng() % 1024), -11))
                        : specials[rng() % specials.size()] * (rng() % 2 ? 1 : 0.37);
      return c;
    };
    const std::vector<double> first = constants(), second = constants();
    (void)run(first).to_vector<double>(); // the plan into the cache
    options().schedule_cache = false;
    const std::vector<double> want = run(second).to_vector<double>();
    options().schedule_cache = true;
    const auto before = runtime::executor_stats();
    const std::vector<double> got = run(second).to_vector<double>();
    const auto after = runtime::executor_stats();
    if (ordinary) {
      EXPECT_EQ(after.plan_reuses - before.plan_reuses, 1u) << "program " << program;
      EXPECT_EQ(after.compiles, before.compiles) << "program " << program;
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) // bitwise (NaNs included)
      ASSERT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(want[i])) << "program " << program << ", " << i;
  }
}

// ------------------------------------------------------------ bitwise against baked kernels

// A copy of `e` with the scalar parameters (`scalars`: their slots) replaced by the constants they hold.
ExprRef bake(const ExprRef& e, const std::map<int, int64_t>& scalars, std::map<const codegen::Expr*, ExprRef>& done) {
  if (auto it = done.find(e.get()); it != done.end()) return it->second;
  ExprRef out;
  if (e->kind == ExprKind::Param && scalars.count(e->index)) {
    const int64_t bits = scalars.at(e->index);
    if (e->dtype == DType::Float64) out = codegen::constant(e->dtype, std::bit_cast<double>(bits));
    else if (e->dtype == DType::Float32) out = codegen::constant(e->dtype, std::bit_cast<float>(static_cast<uint32_t>(bits)));
    else out = codegen::int_constant(e->dtype, bits);
  } else {
    auto copy = std::make_shared<codegen::Expr>(*e);
    for (ExprRef& a : copy->args) a = bake(a, scalars, done);
    out = copy;
  }
  done[e.get()] = out;
  return out;
}

// The kernel as it was before scalar parameters: every constant baked in.
Kernel baked(const codegen::KernelLaunch& l) {
  Kernel b = l.kernel;
  std::map<int, int64_t> scalars;
  for (const auto& [i, node] : l.const_params) scalars[i] = l.params[static_cast<size_t>(i)];
  std::map<const codegen::Expr*, ExprRef> done;
  auto all = [&](std::vector<ExprRef>& v) {
    for (ExprRef& e : v) e = bake(e, scalars, done);
  };
  all(b.domain);
  all(b.map);
  for (codegen::Reduction& r : b.reductions) {
    all(r.extents);
    r.value = bake(r.value, scalars, done);
  }
  for (codegen::Store& st : b.stores) {
    st.offset = bake(st.offset, scalars, done);
    st.value = bake(st.value, scalars, done);
  }
  codegen::finalize(b);
  return b;
}

// Runs `s` (no GEMM-form kernels) with each kernel compiled as given or baked; the outputs' bytes.
std::vector<std::vector<uint8_t>> run(const codegen::Schedule& s, bool bake_constants) {
  std::map<const graph::Node*, std::vector<uint8_t>> values;
  std::vector<std::vector<uint8_t>> outs;
  for (const auto& l : s.launches) {
    EXPECT_FALSE(l.kernel.gemm.has_value());
    const Kernel k = bake_constants ? baked(l) : l.kernel;
    if (bake_constants) EXPECT_NE(k.name, l.kernel.name);
    std::vector<void*> bufs;
    for (const graph::Node* in : l.inputs) {
      EXPECT_NE(in, nullptr); // no index checks here
      bufs.push_back(values.count(in) ? values[in].data() : in->realized()->data());
    }
    for (const graph::Node* o : l.outputs) {
      auto& out = values[o];
      out.assign(std::max<size_t>(64, static_cast<size_t>(o->numel()) * dtype_size(o->dtype)), 0);
      bufs.push_back(out.data());
    }
    codegen::LlvmJit::instance().compile(k)(0, l.domain_size, bufs.data(), l.params.data());
    for (const graph::Node* o : l.outputs) outs.push_back(values[o]);
  }
  return outs;
}

TEST(ScalarParams, ResultsAreBitwiseThoseOfTheBakedKernels) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {kFloat32, kFloat64}) {
    const Tensor x = (randn({8, 33}, 5, dt) * 3).realize();
    const Tensor y = rand({8, 33}, 6, dt).realize();
    const std::vector<Tensor> outs = {
        x * 0.1 + 0.2 - y / 3.0,                                      // inexact constants, a division
        maximum(minimum(x, full({8, 33}, 1e-45, dt)), full({33}, -3e38, dt)) * 7.0 + -0.0, // denormal, huge, -0
        where(x > 0.5, y * kInf, x * -kInf) + where(y < 0.25, y, nan) * 1.0, // infinities and NaN
        F::softmax(x * 0.7071067811865476, 1),                         // a row kernel
        F::layer_norm(x, {33}) * 1.25 + 0.5,                            // eps as a parameter
        F::gelu(x, "tanh") + F::gelu(y),                               // many constants
        exp(x * -1.0).sum({1}, true) * (1.0 / 33) + sqrt(y + 1e-8),          // a reduction
        full({4}, 0.3, dt) + full({4}, -2.5, dt).sum() * pow(full({4}, 1.7, dt), 2.0),
    };
    const Tensor i = arange(-20, 20, 1, kInt64).reshape({8, 5}).realize(), j = i.to(kInt32);
    const std::vector<Tensor> ints = {
        i * 3 + 7 - (i > -2).to(kInt64) * 1000000007, maximum(j * -5, full({5}, 9, kInt32)) + 2147483000,
        where(i < 4, i, full({1}, -9223372036854775807LL, kInt64)) + i.sum({1}, true) * 11, pow(i, 3) + 2};
    std::vector<Tensor> all = outs;
    if (dt == kFloat32) all.insert(all.end(), ints.begin(), ints.end());
    const codegen::Schedule s = schedule_of(all);
    const auto params = run(s, false), consts = run(s, true);
    ASSERT_EQ(params.size(), consts.size());
    for (size_t i = 0; i < params.size(); ++i)
      EXPECT_EQ(params[i], consts[i]) << dtype_name(dt) << " launch " << i << ": " << s.launches[i].kernel.name;
  }
}

} // namespace
} // namespace kiln

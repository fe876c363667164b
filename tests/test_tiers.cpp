// Tiered compilation of CPU kernels (codegen/llvm_jit.h): a kernel's quick code and its
// optimized code compute the same bits, on a corpus of random programs (tests/random_graph.h,
// with NaN, infinities, signed zeros and large values among their inputs) and of the
// kernels models are made of (GEMM in every operand layout and both float types, small
// matmuls, softmax, layernorm, conv2d and pooling, reductions, math functions, pow with
// constant exponents and bases, random numbers, a training step's backward); the optimized
// code is swapped in once its background compile is done; a warm start loads it from the
// disk cache, and the quick tier's code never goes there.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <bit>
#include <cmath>
#include <type_traits>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "codegen/llvm_jit.h"
#include "kiln/functional.h"
#include "kiln/kiln.h"
#include "kiln/options.h"
#include "runtime/executor.h"
#include "tests/random_graph.h"

namespace kiln {
namespace {

namespace F = nn::functional;
namespace fs = std::filesystem;
using codegen::CpuKernelSlot;
using codegen::LlvmJit;
using graph::NodeRef;

/// Tiers on, no disk cache: every kernel new to this process is compiled by both tiers.
struct TiersOn {
  std::string saved_dir = options().cache_dir;
  bool saved_tier = options().jit_tier;
  TiersOn() {
    options().cache_dir = "";
    options().jit_tier = true;
  }
  ~TiersOn() {
    options().cache_dir = saved_dir;
    options().jit_tier = saved_tier;
  }
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback; // set but empty (as .ci/sanitize.sh exports it): the default
}

template <class F> std::string first_float_difference(const void* a, const void* b, int64_t n) {
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  for (int64_t i = 0; i < n; ++i) {
    F x, y;
    std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(F), sizeof(F));
    std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(F), sizeof(F));
    if (std::memcmp(&x, &y, sizeof(F)) == 0 || (std::isnan(x) && std::isnan(y))) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "element %lld: %.17g (0x%llx) vs %.17g (0x%llx)", static_cast<long long>(i),
                  static_cast<double>(x), static_cast<unsigned long long>(std::bit_cast<Bits>(x)), static_cast<double>(y),
                  static_cast<unsigned long long>(std::bit_cast<Bits>(y)));
    return buf;
  }
  return "";
}

/// "" when n elements of `dtype` at a and b are bitwise equal, NaNs aside: any NaN equals
/// any NaN. LLVM leaves a NaN result's sign and payload unspecified, and x86 returns the
/// first operand's NaN when both are NaN (an input's +NaN, or the -NaN that inf - inf
/// makes), so the order of a commutative add's operands, which InstCombine and the
/// register allocator choose differently at O3 and in the quick tier, decides which NaN
/// comes out: seen in sums over inputs holding both (1 random program in 500 here; the
/// specials of the model-kernel test). The tiers agree on every other bit. Else the first difference.
std::string first_difference(const void* a, const void* b, int64_t n, DType dtype) {
  if (dtype == kFloat32) return first_float_difference<float>(a, b, n);
  if (dtype == kFloat64) return first_float_difference<double>(a, b, n);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  return bytes == 0 || std::memcmp(a, b, bytes) == 0 ? "" : "the bytes differ";
}

/// Plans `roots`, waits for the optimized code of every kernel, then runs the plan once
/// with each launch's optimized code and once with its quick code, and expects every
/// output bitwise equal (signed zeros included; see first_difference for NaNs). Returns the
/// number of launches whose kernel had quick code of its own (the others compare the
/// optimized code with itself: kernels compiled before tiers were on).
size_t expect_tiers_agree(const std::vector<NodeRef>& roots, const std::string& what) {
  const runtime::Plan optimized = runtime::make_plan(roots);
  LlvmJit::instance().wait_background();
  runtime::Plan quick = optimized;
  std::vector<CpuKernelSlot> quick_code(optimized.kernels.size());
  size_t tiered = 0;
  for (size_t i = 0; i < optimized.kernels.size(); ++i) {
    const CpuKernelSlot* s = optimized.kernels[i];
    EXPECT_TRUE(s->optimized()) << what << ": " << optimized.schedule.launches[i].kernel.name << " was not swapped in";
    quick_code[i].fn = s->quick ? s->quick : s->get();
    tiered += s->quick != nullptr;
    quick.kernels[i] = &quick_code[i];
  }
  const auto a = runtime::execute(optimized);
  const auto b = runtime::execute(quick);
  for (size_t k = 0; k < roots.size(); ++k) {
    const std::string diff = first_difference(a[k]->data(), b[k]->data(), roots[k]->numel(), roots[k]->dtype);
    EXPECT_EQ(diff, "") << what << ": output " << k << " differs between the optimized and the quick code";
  }
  return tiered;
}

std::vector<NodeRef> nodes(const std::vector<Tensor>& ts) {
  std::vector<NodeRef> r;
  for (const Tensor& t : ts) r.push_back(t.node());
  return r;
}

TEST(Tiers, RandomProgramsComputeTheSameBits) {
  TiersOn on;
  const int n = env_int("KILN_SOAK", 120);
  size_t tiered = 0;
  for (int s = 1; s <= n; ++s) {
    const testing::RandomProgram prog = testing::make_program(static_cast<uint64_t>(s));
    SCOPED_TRACE("seed " + std::to_string(s) + "\n" + prog.describe());
    tiered += expect_tiers_agree(nodes(prog.build(prog.make_inputs())), "random program " + std::to_string(s));
  }
  std::printf("[ tiers    ] %d random programs, %zu launches compared by their quick and optimized code\n", n, tiered);
  EXPECT_GT(tiered, static_cast<size_t>(n)); // the quick code of hundreds of kernels was compared
}

// Inputs with the awkward values: NaN, infinities, signed zeros, huge and tiny numbers.
Tensor specials(IntList shape, uint64_t seed, DType dtype = kFloat32) {
  Tensor x = randn(shape, seed, dtype) * 3.0;
  Tensor pick = rand(shape, seed + 1000, dtype);
  auto band = [&](double lo, double hi) {
    return logical_and(ge(pick, full(shape, lo, dtype)), lt(pick, full(shape, hi, dtype)));
  };
  const double inf = std::numeric_limits<double>::infinity();
  x = where(band(0.00, 0.02), full(shape, std::nan(""), dtype), x);
  x = where(band(0.02, 0.04), full(shape, inf, dtype), x);
  x = where(band(0.04, 0.06), full(shape, -inf, dtype), x);
  x = where(band(0.06, 0.08), full(shape, -0.0, dtype), x);
  x = where(band(0.08, 0.10), x * 1e30, x);
  x = where(band(0.10, 0.12), x * 1e-40, x); // subnormal in f32
  x.realize();
  return x;
}

TEST(Tiers, ModelKernelsComputeTheSameBits) {
  TiersOn on;
  size_t tiered = 0;
  for (DType dt : {kFloat32, kFloat64}) {
    const std::string t = dt == kFloat32 ? " f32" : " f64";
    Tensor a = randn({67, 129}, 1, dt), b = randn({129, 45}, 2, dt), c = randn({45, 129}, 3, dt);
    realize({a, b, c});
    // GEMM forms: plain, transposed right operand (x @ W^T), transposed left, batched, with epilogues.
    tiered += expect_tiers_agree(nodes({matmul(a, b), relu(matmul(a, c.t()) + 1.5), matmul(b.t(), a.t()) * 2.0,
                                        matmul(a.reshape({1, 67, 129}).expand({3, 67, 129}), b)}),
                                 "gemm" + t);
    Tensor s = randn({5, 7}, 4, dt), u = randn({7, 3}, 5, dt);
    realize({s, u});
    tiered += expect_tiers_agree(nodes({matmul(s, u), matmul(s, s.t()).sum({1})}), "small matmul" + t);
    Tensor x = specials({33, 70}, 6, dt);
    tiered += expect_tiers_agree(nodes({F::softmax(x, 1), F::log_softmax(x, 0), F::layer_norm(x, {70}),
                                        x.sum({1}), x.max({0}), x.argmax(1), x.mean({0, 1}), x.min({1}, true)}),
                                 "rows and reductions" + t);
    tiered += expect_tiers_agree(nodes({exp(x), log(x), sqrt(x), tanh(x), sigmoid(x), sin(x), cos(x), F::gelu(x),
                                        F::gelu(x, "tanh"), F::silu(x), erf(x), rsqrt(x), abs(x), reciprocal(x)}),
                                 "math" + t);
    tiered += expect_tiers_agree(nodes({pow(x, 0.5), pow(x, 2.0), pow(x, -1.0), pow(x, 3.0), pow(x, -0.5), pow(x, 1.0),
                                        pow(x, 0.0), pow(full({33, 70}, 2.0, dt), x), pow(full({33, 70}, 4.0, dt), x),
                                        pow(full({33, 70}, 8.0, dt), x), pow(full({33, 70}, 0.5, dt), x),
                                        pow(full({33, 70}, 10.0, dt), x), pow(abs(x), x)}),
                                 "pow with constants" + t);
    // Constants only: what the optimizer folds at compile time, the quick code computes.
    tiered += expect_tiers_agree(nodes({log(full({8}, -1.0, dt)), full({8}, 0.0, dt) * full({8}, 1e300, dt) * 1e300,
                                        sqrt(full({8}, -2.0, dt)), exp(full({8}, 0.3, dt)) - 1.0,
                                        pow(full({8}, 3.0, dt), 0.5)}),
                                 "constants" + t);
    tiered += expect_tiers_agree(nodes({rand({1000}, 7, dt), randn({999}, 8, dt), F::dropout(ones({500}, dt), 0.3, 16)}),
                                 "random" + t);
  }
  Tensor img = randn({4, 3, 17, 17}, 9), w = randn({8, 3, 3, 3}, 10), bias = randn({8}, 11);
  realize({img, w, bias});
  Tensor y = F::conv2d(img, w, bias, {1, 1}, {1, 1}, {1, 1}, 1);
  tiered += expect_tiers_agree(nodes({y, F::max_pool2d(relu(y), {2, 2}, {2, 2}, {0, 0}, {1, 1}),
                                      F::avg_pool2d(y, {3, 3}, {2, 2}, {1, 1})}),
                               "conv2d and pooling");
  // A training step's forward and backward (matmul gradients, reduction backwards).
  Tensor w1 = (randn({64, 32}, 12) * 0.1).requires_grad_(), w2 = (randn({32, 10}, 13) * 0.1).requires_grad_();
  Tensor xs = randn({48, 64}, 14), labels = (rand({48}, 15) * 10.0).to(kInt64);
  realize({w1, w2, xs, labels});
  Tensor loss = F::cross_entropy(matmul(F::gelu(matmul(xs, w1)), w2), labels);
  std::vector<Tensor> grads = grad({loss}, {w1, w2});
  tiered += expect_tiers_agree(nodes({loss, grads[0], grads[1]}), "training step");
  EXPECT_GT(tiered, 40u);
}

TEST(Tiers, TheOptimizedCodeIsSwappedIn) {
  TiersOn on;
  LlvmJit& jit = LlvmJit::instance();
  Tensor x = randn({3000}, 21);
  x.realize();
  Tensor y = sin(cos(x) * 1.25) - tanh(x * 0.75) * exp(-x * x); // kernels no other test compiles
  jit.wait_background(); // x's own kernel may still be in the background when its cache is cold
  const codegen::JitStats before = jit.stats();
  const runtime::Plan plan = runtime::make_plan({y.node()});
  ASSERT_EQ(plan.kernels.size(), 1u);
  const CpuKernelSlot& slot = *plan.kernels[0];
  ASSERT_NE(slot.quick, nullptr) << "compiled by the quick tier first";
  EXPECT_EQ(jit.stats().quick, before.quick + 1);
  jit.wait_background();
  EXPECT_EQ(jit.stats().pending, 0u);
  EXPECT_EQ(jit.stats().optimized, before.optimized + 1);
  EXPECT_TRUE(slot.optimized());
  EXPECT_NE(slot.get(), slot.quick);
  // The launches now run the optimized code, and KILN_DEBUG=1 says so.
  const int saved_debug = options().debug;
  options().debug = 1;
  ::testing::internal::CaptureStderr();
  runtime::execute(plan);
  const std::string log = ::testing::internal::GetCapturedStderr();
  options().debug = saved_debug;
  EXPECT_NE(log.find(", optimized)"), std::string::npos) << log;
  EXPECT_EQ(log.find("quick tier"), std::string::npos) << log;
}

TEST(Tiers, OffCompilesTheOptimizedCodeAtOnce) {
  TiersOn on;
  options().jit_tier = false;
  LlvmJit& jit = LlvmJit::instance();
  Tensor x = randn({2000}, 22);
  x.realize();
  Tensor y = cos(sin(x) * 0.5) + tanh(x * 1.75); // a kernel no other test compiles
  const codegen::JitStats before = jit.stats();
  const runtime::Plan plan = runtime::make_plan({y.node()});
  ASSERT_EQ(plan.kernels.size(), 1u);
  EXPECT_EQ(plan.kernels[0]->quick, nullptr);
  EXPECT_TRUE(plan.kernels[0]->optimized());
  EXPECT_EQ(jit.stats().quick, before.quick);
  EXPECT_EQ(jit.stats().optimized, before.optimized + 1);
  EXPECT_EQ(jit.stats().pending, before.pending);
}

// A fork()ed child (death tests, crash-isolating harnesses: test_ops' expect_no_crash)
// exits at once: its exit handlers do not wait for background compiles that run on the
// parent's threads, which the child does not have (it hung there, waiting for ever).
TEST(Tiers, AForkedChildExitsWhileCompilesRunInTheBackground) {
  TiersOn on;
  Tensor x = randn({1000}, 23);
  x.realize();
  std::vector<Tensor> ys; // fresh kernels, so that the background tier is busy at the fork
  for (int i = 0; i < 12; ++i) ys.push_back(tanh(sin(x * (1.5 + i)) + cos(x) * exp(-abs(x)) * (0.25 * i + 3.0)));
  realize(ys);
  const pid_t child = ::fork();
  if (child == 0) std::exit(0); // runs the exit handlers
  ASSERT_GT(child, 0);
  int status = -1;
  for (int waited_ms = 0; waited_ms < 60000; waited_ms += 10) {
    if (::waitpid(child, &status, WNOHANG) == child) break;
    ::usleep(10000);
  }
  if (!WIFEXITED(status)) ::kill(child, SIGKILL);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the forked child did not exit within 60 s";
  LlvmJit::instance().wait_background();
}

// ---------------------------------------------------------------- the disk cache

// The child process of WarmStartLoadsTheOptimizedCode: a small model's forward and backward
// (a GEMM, so the GEMM support routines too), then what the JIT did. Exiting finishes the
// background compiles, which write the disk cache.
TEST(TiersChild, DISABLED_Run) {
  Tensor w = (randn({40, 24}, 31) * 0.2).requires_grad_();
  Tensor x = randn({50, 40}, 32);
  realize({w, x});
  Tensor loss = (F::softmax(matmul(x, w), 1) * log(abs(x.sum({1}, true)) + 1.0)).sum();
  std::vector<Tensor> g = grad({loss}, {w});
  const double v = loss.item<double>() + g[0].sum().item<double>();
  LlvmJit& jit = LlvmJit::instance();
  const codegen::JitStats s = jit.stats();
  std::printf("RESULT %.17g QUICK %zu OPTIMIZED %zu HITS %zu COMPILES %zu\n", v, s.quick, s.optimized, jit.disk_hits(),
              jit.compiled_count());
}

struct Child {
  std::string output, result;
  size_t quick = 0, optimized = 0, hits = 0, compiles = 0;
};

Child run_child(const std::string& env) {
  const std::string cmd = "env " + env + " " + fs::read_symlink("/proc/self/exe").string() +
                          " --gtest_filter=TiersChild.DISABLED_Run --gtest_also_run_disabled_tests 2>&1";
  Child c;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) c.output += buf;
  if (p) pclose(p);
  std::smatch m;
  static const std::regex line("RESULT (\\S+) QUICK (\\d+) OPTIMIZED (\\d+) HITS (\\d+) COMPILES (\\d+)");
  if (std::regex_search(c.output, m, line)) {
    c.result = m[1];
    c.quick = std::stoul(m[2]);
    c.optimized = std::stoul(m[3]);
    c.hits = std::stoul(m[4]);
    c.compiles = std::stoul(m[5]);
  }
  return c;
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t pos = 0; (pos = text.find(part, pos)) != std::string::npos; ++pos) ++n;
  return n;
}

TEST(Tiers, WarmStartLoadsTheOptimizedCode) {
  const std::string dir = (fs::temp_directory_path() / ("kiln_tiers_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  const Child cold = run_child("KILN_JIT_TIER=1 KILN_DEBUG=1 KILN_CACHE_DIR='" + dir + "'");
  ASSERT_FALSE(cold.result.empty()) << cold.output;
  EXPECT_GE(cold.quick, 3u) << cold.output;
  EXPECT_EQ(cold.hits, 0u);
  // Every kernel is launched on this first run: by its quick code, unless its background compile
  // swapped the optimized code in before the first launch (a race a loaded machine shows); the
  // optimized code is written to disk by the background (at the latest, when the process exits).
  const size_t quick_launches = count(cold.output, "quick tier)");
  EXPECT_GE(quick_launches, 1u) << cold.output;
  EXPECT_GE(quick_launches + count(cold.output, "(cache miss, optimized)"), cold.quick) << cold.output;
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.path().extension() == ".o";
  EXPECT_EQ(entries, cold.compiles) << "one optimized object per kernel and set of GEMM routines; no quick code";

  const Child warm = run_child("KILN_JIT_TIER=1 KILN_DEBUG=1 KILN_CACHE_DIR='" + dir + "'");
  EXPECT_EQ(warm.result, cold.result) << warm.output;
  EXPECT_EQ(warm.quick, 0u) << warm.output;
  EXPECT_EQ(warm.optimized, 0u) << warm.output;
  EXPECT_EQ(warm.compiles, 0u) << warm.output;
  EXPECT_EQ(warm.hits, cold.compiles) << warm.output;
  EXPECT_EQ(count(warm.output, "quick tier"), 0u) << warm.output;
  EXPECT_GE(count(warm.output, "(cache disk, optimized)"), cold.quick - 1) << warm.output;
  fs::remove_all(dir);
}

} // namespace
} // namespace kiln

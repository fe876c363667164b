// libkiln as users link it (kiln::kiln, the public headers only; see frontend/cmake/package.cmake):
// the version header and kiln::version(), that a shared build really runs from libkiln.so, and
// that its JIT still resolves what kernels call (libm's powf, the GEMM support routines, the sort routine) and gives
// the same bits fused and unfused through the shared library.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;

TEST(Package, VersionMacrosMatchTheLibrary) {
  const std::string composed = std::to_string(KILN_VERSION_MAJOR) + "." + std::to_string(KILN_VERSION_MINOR) + "." +
                               std::to_string(KILN_VERSION_PATCH);
  EXPECT_EQ(composed, KILN_VERSION_STRING);
  EXPECT_EQ(version(), KILN_VERSION_STRING);
  EXPECT_EQ(KILN_VERSION_NUMBER, KILN_VERSION_MAJOR * 10000 + KILN_VERSION_MINOR * 100 + KILN_VERSION_PATCH);
}

#ifdef KILN_TEST_SHARED
TEST(Package, RunsFromTheSharedLibrary) {
  Dl_info info{};
  ASSERT_NE(dladdr(version().data(), &info), 0); // a string in libkiln's read-only data
  ASSERT_NE(info.dli_fname, nullptr);
  EXPECT_NE(std::strstr(info.dli_fname, KILN_TEST_SONAME), nullptr) << info.dli_fname;
}
#endif

TEST(Package, JitResolvesLibmThroughTheSharedLibrary) {
  const std::vector<float> x{0.5f, 1.25f, 2.0f, 3.75f, 10.0f, 0.0f, 7.5f, 1e-3f};
  const std::vector<float> y = pow(from_vector(x), 2.5).to_vector<float>(); // llvm.pow: powf from the process
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(y[i], std::pow(x[i], 2.5f)) << "at " << x[i];
}

// An argsort kernel calls kiln's sort routine (codegen/src/sort_runtime.h), which the JIT defines by
// address: found through the shared library as in a static binary, rows short and long.
TEST(Package, JitResolvesTheSortRoutineThroughTheSharedLibrary) {
  const auto [values, indices] = sort(from_vector<float>({3, 1, NAN, 2, 1, -0.0f}), 0, true);
  EXPECT_EQ(indices.to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 3, 1, 4, 5}));
  std::vector<int64_t> many(5000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int64_t>((i * 7919) % 1000);
  const std::vector<int64_t> top = topk(from_vector(many), 3, 0, false).second.to_vector<int64_t>();
  EXPECT_EQ(top, (std::vector<int64_t>{0, 1000, 2000})); // the three 0s, in input order
}

// Losses of a few compiled Adam steps of a small MLP (GEMM kernels and their support module).
std::vector<float> train_losses() {
  nn::manual_seed(0); // the same initial weights on every call
  const Tensor x = randn({64, 16}, 1);
  const Tensor y = argmax(matmul(x, randn({16, 4}, 2)), 1);
  nn::Sequential model(nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 4));
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  CompiledFunction step = compile([&](const std::vector<Tensor>& xy) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model(xy[0]), xy[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  });
  std::vector<float> losses;
  for (int i = 0; i < 5; ++i)
    losses.push_back(step({x, y})[0].item<float>());
  return losses;
}

TEST(Package, CompiledTrainingStepFusedAndUnfusedAgree) {
  const bool saved = options().fusion;
  options().fusion = true;
  const std::vector<float> fused = train_losses();
  options().fusion = false;
  const std::vector<float> unfused = train_losses();
  options().fusion = saved;
  EXPECT_EQ(fused, unfused);
  EXPECT_LT(fused.back(), fused.front());
}

} // namespace
} // namespace kiln

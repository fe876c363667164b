// A program that uses an installed kiln, as a user's project would (see CMakeLists.txt here
// and .ci/consumer.sh): a small MLP (8-32-3) learns to classify synthetic points labelled by a
// fixed random linear "teacher", with Adam, in one compiled training step replayed 40 times.
// Exits non-zero unless the loss falls to under half its first value.

#include <cstdio>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
namespace F = kiln::nn::functional;

int main() {
  if (version() != KILN_VERSION_STRING) {
    std::fprintf(stderr, "consumer: built against kiln %s headers but runs with libkiln %.*s\n",
                 KILN_VERSION_STRING, static_cast<int>(version().size()), version().data());
    return 1;
  }
  const Tensor x = randn({256, 8}, /*seed=*/1);
  const Tensor y = argmax(matmul(x, randn({8, 3}, /*seed=*/2)), 1); // class labels (int64)
  nn::manual_seed(0);
  nn::Sequential model(nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 3));
  optim::Adam opt(model.parameters(), {.lr = 1e-2});
  CompiledFunction step = compile([&](const std::vector<Tensor>& xy) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model(xy[0]), xy[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  });
  // JIT code calling into libkiln (the argsort kernel's sort routine) resolves through the installed library
  const std::vector<int64_t> order = argsort(from_vector<float>({3, 1, 2, 1})).to_vector<int64_t>();
  if (order != std::vector<int64_t>{1, 3, 2, 0}) {
    std::fprintf(stderr, "consumer: argsort gave the wrong order\n");
    return 1;
  }
  std::vector<float> losses;
  for (int i = 0; i < 40; ++i)
    losses.push_back(step({x, y})[0].item<float>());
  std::printf("kiln %.*s: %zu kernels per step, loss %.4f -> %.4f\n", static_cast<int>(version().size()),
              version().data(), step.num_kernels(), losses.front(), losses.back());
  if (!(losses.back() < 0.5f * losses.front())) {
    std::fprintf(stderr, "consumer: the loss did not fall to half (%.4f -> %.4f)\n", losses.front(), losses.back());
    return 1;
  }
  return 0;
}

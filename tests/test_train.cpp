// End to end: train on a Fashion-MNIST subset and require a real test accuracy.
// An MLP (784-128-10) trained for 3 epochs on 10000 images with Adam must
// classify at least 80% of the first 2000 test images correctly; a small CNN
// (conv + BatchNorm + pooling) trained briefly must clearly learn too.

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>

#include "kiln/data.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

bool have_dataset() {
  return std::filesystem::exists(std::string(data::kFashionMnistRoot) + "/train-images-idx3-ubyte.gz");
}

// Trains for `epochs` over `train`; returns the mean loss of the last epoch.
double fit(nn::Module& model, optim::Optimizer& opt, const data::Dataset& train, int64_t batch, int epochs) {
  std::vector<Tensor> state = model.parameters();
  for (const Tensor& b : model.buffers()) state.push_back(b);
  double last = 0;
  for (int e = 0; e < epochs; ++e) {
    double sum = 0;
    int64_t steps = 0;
    for (const data::Batch& b : train.batches(batch, /*shuffle_seed=*/100 + static_cast<uint64_t>(e))) {
      opt.zero_grad();
      Tensor loss = F::cross_entropy(model(b.x), b.y);
      loss.backward();
      opt.step();
      std::vector<Tensor> all = state;
      for (const Tensor& s : opt.state()) all.push_back(s);
      Tensor v = loss.detach();
      all.push_back(v);
      kiln::realize(all);
      sum += v.item<float>();
      ++steps;
    }
    last = sum / static_cast<double>(steps);
  }
  return last;
}

double accuracy(nn::Module& model, const data::Dataset& ds) {
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  for (const data::Batch& b : ds.batches(500)) correct += (model(b.x).argmax(1) == b.y).sum().item<int64_t>();
  model.train();
  return static_cast<double>(correct) / static_cast<double>(ds.size());
}

} // namespace

TEST(Train, MlpOnTenThousandImagesReaches80Percent) {
  if (!have_dataset()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  const data::Dataset train = data::FashionMNIST("train").slice(0, 10000);
  const data::Dataset test = data::FashionMNIST("test").slice(0, 2000);
  nn::manual_seed(0);
  nn::Sequential model(nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10));
  optim::Adam opt(model.parameters(), {.lr = 2e-3});
  const double loss = fit(model, opt, train, 100, 3); // 300 steps
  const double acc = accuracy(model, test);
  std::cout << "MLP test accuracy " << acc << ", last-epoch loss " << loss << "\n";
  EXPECT_LT(loss, 0.6);
  EXPECT_GE(acc, 0.80) << "last-epoch loss " << loss;
}

TEST(Train, SmallCnnLearns) {
  if (!have_dataset()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  const data::Dataset train = data::FashionMNIST("train").slice(0, 2000);
  const data::Dataset test = data::FashionMNIST("test").slice(0, 1000);
  nn::manual_seed(0);
  nn::Sequential model(nn::Conv2d(1, 8, 3, {.padding = 1}), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
                       nn::Conv2d(8, 16, 3, {.padding = 1}), nn::ReLU(), nn::AvgPool2d(2), nn::Flatten(),
                       nn::Linear(16 * 7 * 7, 10));
  const double before = accuracy(model, test);
  optim::Adam opt(model.parameters(), {.lr = 5e-3});
  fit(model, opt, train, 50, 2); // 80 steps
  const double acc = accuracy(model, test);
  std::cout << "CNN test accuracy " << acc << " (before training " << before << ")\n";
  EXPECT_GE(acc, 0.70) << "accuracy before training " << before;
  EXPECT_GE(acc, before + 0.4);
}

// libtorch's eager training step of bench/mlp.h's MLP (784-512-512-10, ReLU, mean softmax
// cross-entropy, SGD with lr 0.01, no momentum), for the kiln_vs_torch binary, which also
// holds kiln_bench's cases (bench_fusion.cpp), so that kiln's EagerMLPStep and this one
// are measured in one run. This is the only translation unit that includes libtorch.
//
//   EagerMLPStep/<batch>/torch             the loop a PyTorch user writes: nn::Linear layers,
//                                          F::cross_entropy, optim::SGD
//   EagerMLPStep/<batch>/torch_kiln_graph  kiln's graph op for op (x @ w + b with w [in, out],
//                                          relu, the max-shifted log-sum-exp, a one-hot from
//                                          eq(labels, arange)), through the same optim::SGD
//   MLPGemms/128/torch                     the step's eight matmuls alone (torch::mm)
//   CNNStep/128/torch                      examples/train's CNN (kiln's CNNStep/128/kiln): conv,
//                                          BatchNorm, ReLU and max-pool modules (oneDNN's
//                                          convolutions), F::cross_entropy, optim::Adam
//   LSTMStep/32x16x64x128/torch            bench_rnn.cpp's LSTM sequence model (kiln's
//                                          LSTMStep/.../kiln): nn::LSTM, nn::Linear,
//                                          F::cross_entropy, optim::Adam
//
// Each iteration is zero_grad; forward; loss; backward; step; loss.item(). Threads: the
// first argument, through torch::set_num_threads (OpenMP; with Debian's OpenMP build of
// OpenBLAS the matmuls share that pool). OPENBLAS_CORETYPE and OMP_WAIT_POLICY are read by
// the libraries when they load, so they must be set in the environment (see RESULTS.md).

#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/modules/rnn.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/rnn_step.h"

namespace {

namespace F = torch::nn::functional;

// kiln's graph (bench/mlp.h) written with torch ops: weights [in, out], uniform(-1/sqrt(in),
// 1/sqrt(in)) as kiln's initialization, zero biases.
struct KilnGraphMlp {
  std::vector<torch::Tensor> params;

  KilnGraphMlp() {
    const int64_t sizes[] = {784, 512, 512, 10};
    for (int l = 0; l < 3; ++l) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(sizes[l]));
      params.push_back(((torch::rand({sizes[l], sizes[l + 1]}) * 2.0 - 1.0) * bound).requires_grad_());
      params.push_back(torch::zeros({sizes[l + 1]}).requires_grad_());
    }
  }

  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& labels) const {
    torch::Tensor h = x;
    for (size_t l = 0; l < 3; ++l) {
      h = torch::matmul(h, params[2 * l]) + params[2 * l + 1];
      if (l < 2) h = torch::relu(h);
    }
    const torch::Tensor m = std::get<0>(h.max(1, true)).detach();
    const torch::Tensor lse = torch::log(torch::exp(h - m).sum({1}, true)) + m;
    const torch::Tensor classes = torch::arange(0, 10, torch::kLong).reshape({1, 10});
    const torch::Tensor onehot = torch::eq(labels.reshape({-1, 1}), classes).to(torch::kFloat32);
    return (lse - (onehot * h).sum({1}, true)).mean();
  }
};

// The same MLP as a PyTorch user writes it.
struct IdiomaticMlp {
  torch::nn::Linear l0{784, 512}, l1{512, 512}, l2{512, 10};

  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> out;
    for (const auto* l : {&l0, &l1, &l2})
      for (const torch::Tensor& p : (*l)->parameters()) out.push_back(p);
    return out;
  }

  torch::Tensor loss(const torch::Tensor& x, const torch::Tensor& labels) {
    const torch::Tensor h = torch::relu(l1(torch::relu(l0(x))));
    return F::cross_entropy(l2(h), labels);
  }
};

// One benchmark: builds the model, runs two warm-up steps, then times the eager loop.
template <class Model> void TorchEagerMlpStep(benchmark::State& state, int64_t batch) {
  torch::set_num_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(7);
  Model model;
  std::vector<torch::Tensor> params;
  if constexpr (requires { model.params; }) params = model.params;
  else params = model.parameters();
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.01));
  const torch::Tensor x = torch::randn({batch, 784});
  const torch::Tensor y = torch::randint(0, 10, {batch}, torch::kLong);
  auto step = [&] {
    opt.zero_grad();
    torch::Tensor loss = model.loss(x, y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  const float first = step();
  step(); // the gradients exist from now on: the steady state
  if (!std::isfinite(first)) state.SkipWithError("the loss is not finite");
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.counters["GFLOP/s"] = benchmark::Counter(3209216.0 * static_cast<double>(batch * state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The eight matmuls of the step alone (kiln's MLPGemms/<batch>/kiln): torch::mm on the
// same shapes, the transposed operands as views, as autograd passes them to the BLAS.
void TorchMlpGemms(benchmark::State& state, int64_t batch) {
  torch::set_num_threads(static_cast<int>(state.range(0)));
  const torch::Tensor x = torch::randn({batch, 784}), h0 = torch::randn({batch, 512}), h1 = torch::randn({batch, 512});
  const torch::Tensor g0 = torch::randn({batch, 512}), g1 = torch::randn({batch, 512}), g2 = torch::randn({batch, 10});
  const torch::Tensor w0 = torch::randn({784, 512}), w1 = torch::randn({512, 512}), w2 = torch::randn({512, 10});
  auto gemms = [&] {
    const std::vector<torch::Tensor> out{torch::mm(x, w0),     torch::mm(h0, w1),     torch::mm(h1, w2),
                                         torch::mm(h1.t(), g2), torch::mm(g2, w2.t()), torch::mm(h0.t(), g1),
                                         torch::mm(g1, w1.t()), torch::mm(x.t(), g0)};
    return out[0].data_ptr();
  };
  gemms();
  for (auto _ : state) benchmark::DoNotOptimize(gemms());
  state.counters["GFLOP/s"] = benchmark::Counter(3209216.0 * static_cast<double>(batch * state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// The CNN of examples/train as a PyTorch user writes it, trained by Adam (lr 1e-3) at batch 128 on
// a fixed random batch: the eager step, after two warm-up steps.
void TorchCnnStep(benchmark::State& state) {
  namespace nn = torch::nn;
  constexpr int64_t kBatch = 128;
  torch::set_num_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(3);
  nn::Sequential model(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                       nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                       nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(nn::MaxPool2dOptions(2)), nn::Flatten(),
                       nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  const torch::Tensor x = torch::rand({kBatch, 1, 28, 28});
  const torch::Tensor y = torch::randint(0, 10, {kBatch}, torch::kLong);
  auto step = [&] {
    opt.zero_grad();
    torch::Tensor loss = F::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  const float first = step();
  step(); // Adam's moments exist from now on: the steady state
  if (!std::isfinite(first)) state.SkipWithError("the loss is not finite");
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.counters["samples/s"] =
      benchmark::Counter(static_cast<double>(kBatch * state.iterations()), benchmark::Counter::kIsRate);
}

// bench_rnn.cpp's LSTM sequence model as a PyTorch user writes it (the same sizes, Adam lr 1e-3, fixed
// random inputs and classes): the eager step, after two warm-up steps.
void TorchLstmStep(benchmark::State& state) {
  namespace nn = torch::nn;
  const bench::RnnStepSizes& z = bench::kRnnSteps;
  torch::set_num_threads(static_cast<int>(state.range(0)));
  torch::manual_seed(3);
  nn::LSTM lstm(nn::LSTMOptions(z.input, z.hidden).num_layers(2));
  nn::Linear head(z.hidden, z.classes);
  std::vector<torch::Tensor> params = lstm->parameters();
  for (const torch::Tensor& p : head->parameters()) params.push_back(p);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));
  const torch::Tensor x = torch::randn({z.time, z.batch, z.input});
  const torch::Tensor y = torch::randint(0, z.classes, {z.time * z.batch}, torch::kLong);
  auto step = [&] {
    opt.zero_grad();
    const torch::Tensor out = std::get<0>(lstm->forward(x));
    torch::Tensor loss = F::cross_entropy(head->forward(out.reshape({z.time * z.batch, z.hidden})), y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  const float first = step();
  step();
  if (!std::isfinite(first)) state.SkipWithError("the loss is not finite");
  for (auto _ : state) benchmark::DoNotOptimize(step());
  state.counters["sequences/s"] =
      benchmark::Counter(static_cast<double>(z.batch * state.iterations()), benchmark::Counter::kIsRate);
}

// What a comparison must state: the libraries' versions and the settings they were loaded with.
const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string openblas_info() {
  using CoreName = char* (*)();
  using Parallel = int (*)();
  auto core = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  auto parallel = reinterpret_cast<Parallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (!core || !parallel) return "not OpenBLAS (a reference BLAS is slow: install libopenblas0-openmp)";
  const int p = parallel();
  return std::string(core()) + (p == 2 ? ", OpenMP" : p == 1 ? ", pthreads (a second thread pool)" : ", sequential");
}

[[maybe_unused]] const bool registered = [] {
  benchmark::AddCustomContext("libtorch", TORCH_VERSION);
  benchmark::AddCustomContext("blas", openblas_info());
  benchmark::AddCustomContext("OPENBLAS_CORETYPE", env_or("OPENBLAS_CORETYPE", "(unset)"));
  benchmark::AddCustomContext("OMP_WAIT_POLICY", env_or("OMP_WAIT_POLICY", "(unset: libgomp spins, slowing 2 threads)"));
  benchmark::RegisterBenchmark("MLPGemms/128/torch", [](benchmark::State& s) { TorchMlpGemms(s, 128); })
      ->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("CNNStep/128/torch", TorchCnnStep)
      ->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("LSTMStep/32x16x64x128/torch", TorchLstmStep)
      ->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (int64_t batch : {1, 128, 1024}) {
    const std::string b = std::to_string(batch);
    benchmark::RegisterBenchmark(("EagerMLPStep/" + b + "/torch").c_str(),
                                 [batch](benchmark::State& s) { TorchEagerMlpStep<IdiomaticMlp>(s, batch); })
        ->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("EagerMLPStep/" + b + "/torch_kiln_graph").c_str(),
                                 [batch](benchmark::State& s) { TorchEagerMlpStep<KilnGraphMlp>(s, batch); })
        ->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  return true;
}();

} // namespace

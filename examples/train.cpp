// kiln's main job: train an MLP or a CNN on Fashion-MNIST and report the test accuracy.
//
//   ./build/examples/train --model mlp --epochs 10
//   ./build/examples/train --model cnn --epochs 3 --checkpoint cnn.safetensors
//   ./build/examples/train --model cnn --epochs 5 --checkpoint cnn.safetensors --resume
//   mpirun -np 2 ./build/examples/train --ddp     (as root: mpirun --allow-run-as-root ...)
//
// A training step (forward, loss, backward and the optimizer's update) is one
// compiled function: traced and scheduled (and fused) as a whole once, then replayed
// for every batch with no graph building. --eager builds each step's
// graph instead, with the same results.
//
// --ddp trains data-parallel on the ranks of mpirun (kiln/dist.h): each rank reads its
// shard of every epoch (data::DistributedSampler over the single process's shuffle) with
// --batch samples per rank, gradients are averaged across ranks before each update, rank 0
// prints and writes the checkpoints (atomically), and every rank can resume from them.

#include <chrono>
#include <functional>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <sched.h>
#include <sys/stat.h>
#include <vector>

#include "cli.h"
#include "kiln/checkpoint.h"
#include "kiln/data.h"
#include "kiln/kiln.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

using namespace kiln;
namespace F = kiln::nn::functional;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = "mlp";
  int64_t epochs = 10;
  int64_t batch = 128;
  double lr = 1e-3;
  std::string device = options().device; // KILN_DEVICE, default cpu
  Device resolved;                         // the device --device names
  bool list_devices = false;
  bool fusion = true;
  bool eager = false; // build and schedule every step's graph instead of replaying a compiled step
  std::string checkpoint;
  bool resume = false;
  int64_t limit = 0; // 0: all training samples
  uint64_t seed = 0;
  std::string data = data::kFashionMnistRoot;
  bool ddp = false; // data-parallel over the ranks of mpirun
  bool sync_bn = false; // --ddp with BatchNorm statistics of the global batch
  double bucket_mb = 25; // --ddp: gradients are all-reduced in buckets of this size (DDPOptions::bucket_bytes)
  int64_t stop_after = 0; // 0: run every epoch; else stop after this one (an interruption, for --resume)
};

void usage() {
  std::cerr << "usage: train [--model mlp|cnn] [--epochs N] [--batch N] [--lr X] [--device D]\n"
               "             [--list-devices] [--no-fusion] [--eager] [--checkpoint PATH] [--resume] [--limit N] [--seed N]\n"
               "             [--data DIR] [--ddp] [--sync-bn] [--bucket-mb X] [--stop-after N]\n"
               "  --model       mlp (784-256-128-10) or cnn (2 x conv3x3+BN+ReLU+maxpool, 2 FC); default mlp\n"
               "  --epochs      passes over the training set (default 10)\n"
               "  --batch       batch size (default 128)\n"
               "  --lr          Adam's learning rate, annealed by a cosine schedule (default 1e-3)\n"
               "  --device      cpu, cuda, cuda:N or auto (default $KILN_DEVICE, else cpu); cuda says why when it\n"
               "                cannot be used, auto falls back to cpu with one line saying why\n"
               "  --list-devices  print the CPU and the CUDA devices (or why there are none) and exit\n"
               "  --no-fusion   one kernel per primitive op (same results, slower)\n"
               "  --eager       build and schedule each step's graph instead of replaying the compiled step\n"
               "                (same results, slower)\n"
               "  --checkpoint  save model and optimizer state here after every epoch (safetensors)\n"
               "  --resume      continue from --checkpoint (same losses as an uninterrupted run)\n"
               "  --limit       train on the first N samples only (quick runs)\n"
               "  --seed        initialization and shuffling seed (default 0)\n"
               "  --data        directory of the Fashion-MNIST IDX files (default " << data::kFashionMnistRoot << ")\n"
               "  --ddp         data-parallel over the ranks of mpirun (`mpirun -np 2 train --ddp`); --batch is\n"
               "                per rank; rank 0 prints and writes the checkpoint\n"
               "  --sync-bn     with --ddp: the CNN's BatchNorm layers become SyncBatchNorm (statistics of the\n"
               "                global batch, as one process with batch ranks x --batch)\n"
               "  --bucket-mb   with --ddp: all-reduce the gradients in buckets of about X MB (default 25, as\n"
               "                PyTorch); a bucket's all-reduce runs while the backward pass computes the next\n"
               "  --stop-after  end after epoch N of --epochs, as if interrupted (then --resume continues)\n";
}

template <class T> T number(const std::string& flag, const char* text) { return cli::number<T>("train", flag, text); }

// The flags a resumed run must share with the checkpoint's (--epochs may grow: training longer).
cli::RunFlags run_flags(const Args& a) {
  cli::RunFlags f;
  f.add("--batch", static_cast<long long>(a.batch)).add("--lr", a.lr).add("--limit", static_cast<long long>(a.limit));
  f.add("--seed", static_cast<unsigned long long>(a.seed));
  return f;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&] { return cli::value("train", argc, argv, i); };
    if (f == "--model") a.model = value();
    else if (f == "--epochs") a.epochs = number<int64_t>(f, value());
    else if (f == "--batch") a.batch = number<int64_t>(f, value());
    else if (f == "--lr") a.lr = number<double>(f, value());
    else if (f == "--device") a.device = value();
    else if (f == "--list-devices") a.list_devices = true;
    else if (f == "--no-fusion") a.fusion = false;
    else if (f == "--eager") a.eager = true;
    else if (f == "--checkpoint") a.checkpoint = value();
    else if (f == "--resume") a.resume = true;
    else if (f == "--limit") a.limit = number<int64_t>(f, value());
    else if (f == "--seed") a.seed = number<uint64_t>(f, value());
    else if (f == "--data") a.data = value();
    else if (f == "--ddp") a.ddp = true;
    else if (f == "--sync-bn") a.sync_bn = true;
    else if (f == "--bucket-mb") a.bucket_mb = number<double>(f, value());
    else if (f == "--stop-after") a.stop_after = number<int64_t>(f, value());
    else if (f == "--help" || f == "-h") usage(), std::exit(0);
    else {
      std::cerr << "train: unknown flag '" << f << "'\n";
      usage();
      std::exit(2);
    }
  }
  if (a.model != "mlp" && a.model != "cnn") throw Error("train", "--model must be mlp or cnn, not '" + a.model + "'");
  if (a.epochs <= 0 || a.batch <= 0 || a.limit < 0 || a.stop_after < 0 || !(a.lr > 0))
    throw Error("train", "--epochs, --batch and --lr must be positive, --limit and --stop-after non-negative");
  if (a.resume && a.checkpoint.empty()) throw Error("train", "--resume needs --checkpoint PATH");
  cli::check_checkpoint_dir("train", a.checkpoint);
  if (a.sync_bn && !a.ddp) throw Error("train", "--sync-bn needs --ddp");
  if (!(a.bucket_mb * 1024 * 1024 >= 1)) throw Error("train", "--bucket-mb must be positive");
  return a;
}

nn::Sequential make_model(const std::string& kind) {
  if (kind == "mlp")
    return nn::Sequential(nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 128), nn::ReLU(),
                          nn::Linear(128, 10));
  return nn::Sequential(nn::Conv2d(1, 32, 3, {.padding = 1}), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(32, 64, 3, {.padding = 1}), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10));
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "\repoch 2/10 [=======>      ]  23040/60000  5120 samples/s  loss 0.4123" on stderr.
void progress(int64_t epoch, int64_t epochs, int64_t done, int64_t total, double secs, double loss) {
  constexpr int width = 30;
  const int filled = static_cast<int>(width * done / std::max<int64_t>(total, 1));
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
  std::fprintf(stderr, "\repoch %lld/%lld [%s] %6lld/%lld  %7.0f samples/s  loss %.4f", static_cast<long long>(epoch),
               static_cast<long long>(epochs), bar.c_str(), static_cast<long long>(done), static_cast<long long>(total),
               done / std::max(secs, 1e-9), loss);
  std::fflush(stderr);
}

// This process's place in a --ddp run (rank 0 of 1 otherwise).
struct Parallel {
  int rank = 0;
  int world = 1;
  nn::DistributedDataParallel* ddp = nullptr; // the wrapper of a --ddp run
  bool leader() const { return rank == 0; }   // prints and writes checkpoints
};

// Fraction of `ds` classified correctly, in eval mode without gradients. Under --ddp each rank
// counts its slice of `ds` (with rank 0's BatchNorm statistics) and the counts are summed.
double accuracy(nn::Module& model, const data::Dataset& ds, Device device, const Parallel& par) {
  if (ds.size() == 0) throw Error("train", "the test set is empty: no accuracy to report");
  if (par.ddp) par.ddp->sync_buffers();
  NoGradGuard no_grad;
  model.eval();
  int64_t correct = 0;
  const data::Dataset mine = ds.slice(ds.size() * par.rank / par.world, ds.size() * (par.rank + 1) / par.world);
  for (const data::Batch& b : mine.batches(1000))
    correct += (model(b.x.to(device)).argmax(1) == b.y.to(device)).sum().item<int64_t>();
  model.train();
  if (par.ddp) correct = dist::all_reduce(from_vector<int64_t>({correct})).item<int64_t>();
  return static_cast<double>(correct) / static_cast<double>(ds.size());
}

// The graph of one training step: forward, loss, backward (and under --ddp the averaging of
// the gradients across ranks) and the optimizer's update; returns the loss.
Tensor build_step(nn::Module& model, optim::Optimizer& opt, const Tensor& x, const Tensor& y,
                  nn::DistributedDataParallel* ddp = nullptr) {
  opt.zero_grad();
  Tensor loss = F::cross_entropy(model(x), y);
  loss.backward();
  if (ddp) ddp->sync_gradients();
  opt.step();
  return loss.detach();
}

// One training step of (x, y), returning the loss.
using Step = std::function<Tensor(const Tensor&, const Tensor&)>;

// The step as --eager, or as one compiled function (under --ddp the all-reduce of the gradients
// is part of every replay, between the plan of the backward pass and the update's).
Step make_step(nn::Module& model, optim::Optimizer& opt, const Parallel& par, bool eager) {
  nn::DistributedDataParallel* ddp = par.ddp;
  if (eager) return [&model, &opt, ddp](const Tensor& x, const Tensor& y) { return build_step(model, opt, x, y, ddp); };
  auto step = std::make_shared<CompiledFunction>(compile([&model, &opt, ddp](const std::vector<Tensor>& xy) {
    return std::vector<Tensor>{build_step(model, opt, xy[0], xy[1], ddp)};
  }));
  return [step](const Tensor& x, const Tensor& y) { return (*step)({x, y})[0]; };
}

// One epoch of training; returns the mean training loss (of all ranks under --ddp).
double train_epoch(const Step& step, const data::Dataset& train, const Args& a, int64_t epoch, const Parallel& par) {
  double sum = 0;
  int64_t done = 0, steps = 0;
  const auto start = Clock::now();
  auto last_print = start;
  const uint64_t seed = a.seed * 1000003;
  data::Loader batches = train.batches(a.batch, seed + static_cast<uint64_t>(epoch));
  int64_t total = train.size();
  if (a.ddp) { // rank r reads positions r, r + world, ... of the single process's shuffle
    data::DistributedSampler sampler(train.size(), par.rank, par.world, seed);
    sampler.set_epoch(epoch);
    batches = train.batches(sampler, a.batch);
    total = sampler.num_samples() * par.world;
  }
  for (const data::Batch& b : batches) {
    const Tensor loss = step(b.x.to(a.resolved), b.y.to(a.resolved));
    sum += loss.item<float>();
    done += b.y.size(0) * par.world;
    ++steps;
    if (par.leader() && (seconds_since(last_print) > 0.2 || done == total)) {
      progress(epoch + 1, a.epochs, done, total, seconds_since(start), sum / static_cast<double>(steps));
      last_print = Clock::now();
    }
  }
  if (par.leader()) std::fprintf(stderr, "\n");
  const double mean = sum / static_cast<double>(std::max<int64_t>(steps, 1));
  return a.ddp ? dist::all_reduce(from_vector<double>({mean}), dist::ReduceOp::Mean).item<double>() : mean;
}

// CPUs this process may run on (mpirun binds each rank to one core by default): its threads.
int cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

bool file_exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

// --list-devices: the CPU, then each CUDA device or why CUDA cannot be used.
int list_devices() {
  std::cout << "cpu\n";
  for (const DeviceInfo& d : cuda_devices()) std::cout << d.str() << "\n";
  const std::string why = cuda_unavailable_reason();
  if (!why.empty()) std::cout << "cuda: unavailable: " << why << "\n";
  return 0;
}

int run(Args a) {
  if (a.list_devices) return list_devices();
  a.resolved = resolve_device(a.device); // throws with the reason when the device cannot be used
  options().fusion = a.fusion;

  data::Dataset train = data::FashionMNIST("train", a.data);
  const data::Dataset test = data::FashionMNIST("test", a.data);
  if (a.limit > 0) train = train.slice(0, a.limit);

  Parallel par;
  if (a.ddp) par.rank = dist::rank(), par.world = dist::world_size();
  nn::manual_seed(a.seed);
  auto model_ptr = std::make_shared<nn::Sequential>(make_model(a.model));
  nn::Sequential& model = *model_ptr;
  if (a.sync_bn) nn::SyncBatchNorm::convert_sync_batchnorm(model_ptr); // the same parameters and names
  model.to(a.resolved);
  optim::Adam opt(model.parameters(), {.lr = a.lr});
  optim::CosineAnnealingLR schedule(opt, a.epochs);
  if (par.leader()) {
    std::cout << model.str() << "\nparameters: " << model.num_parameters() << ", training samples: " << train.size()
              << ", batch " << a.batch << ", device " << a.resolved.str() << ", fusion " << (a.fusion ? "on" : "off")
              << (a.eager ? ", eager steps" : ", compiled steps") << "\n";
    if (a.ddp)
      std::cout << "data-parallel: " << par.world << " ranks (" << dist::backend() << "), global batch "
                << a.batch * par.world << ", " << cpus() << " cpu(s) on rank 0\n";
  }

  int64_t first_epoch = 0;
  if (a.resume) {
    if (!file_exists(a.checkpoint)) throw Error("train", "--resume: no checkpoint at '" + a.checkpoint + "'");
    checkpoint::Metadata meta = checkpoint::load(a.checkpoint, model, &opt);
    if (meta["model"] != a.model)
      throw Error("train", "'" + a.checkpoint + "' holds a '" + meta["model"] + "' model, not " + a.model);
    char* end = nullptr;
    first_epoch = std::strtoll(meta["epoch"].c_str(), &end, 10);
    if (meta["epoch"].empty() || *end != '\0' || first_epoch < 0)
      throw Error("train", "'" + a.checkpoint + "' has no valid \"epoch\" in its metadata");
    if (const std::string diff = cli::resume_mismatch(meta["run"], run_flags(a)); !diff.empty())
      throw Error("train", "'" + a.checkpoint + "' was trained with other flags: " + diff +
                               "; resume with the same ones (or train afresh)");
    schedule.set_epoch(first_epoch);
    if (par.leader()) std::cout << "resumed from " << a.checkpoint << " after epoch " << first_epoch << "\n";
  }
  // Made after a resume: its broadcast of rank 0's state then changes nothing.
  std::unique_ptr<nn::DistributedDataParallel> ddp;
  if (a.ddp) {
    const nn::DDPOptions options{.bucket_bytes = static_cast<int64_t>(a.bucket_mb * 1024 * 1024)};
    ddp = std::make_unique<nn::DistributedDataParallel>(model_ptr, options), par.ddp = ddp.get();
  }

  const Step step = make_step(model, opt, par, a.eager);
  double acc = 0;
  const int64_t last_epoch = a.stop_after > 0 ? std::min(a.stop_after, a.epochs) : a.epochs;
  for (int64_t epoch = first_epoch; epoch < last_epoch; ++epoch) {
    dist::reset_stats();
    const auto start = Clock::now();
    const double loss = train_epoch(step, train, a, epoch, par);
    const double train_secs = seconds_since(start);
    const dist::Stats comm = dist::stats();
    acc = accuracy(model, test, a.resolved, par);
    schedule.step();
    if (par.leader()) {
      std::printf("epoch %lld/%lld: train_loss %.4f  test_accuracy %.4f  epoch_time %.1f s (%.0f samples/s)\n",
                  static_cast<long long>(epoch + 1), static_cast<long long>(a.epochs), loss, acc, train_secs,
                  static_cast<double>(train.size()) / train_secs);
      if (a.ddp)
        std::printf("  rank 0: %lld collectives, %.1f MB sent, %.2f s in them (%.1f%% of the epoch, waiting included)\n",
                    static_cast<long long>(comm.collectives), static_cast<double>(comm.bytes_sent) / 1e6, comm.seconds,
                    100 * comm.seconds / train_secs);
      std::fflush(stdout);
    }
    if (!a.checkpoint.empty() && par.leader()) // atomic: a temporary file renamed over the old one
      checkpoint::save(a.checkpoint, model, &opt,
                       {{"model", a.model}, {"epoch", std::to_string(epoch + 1)}, {"run", run_flags(a).str()}});
  }
  if (first_epoch >= a.epochs) acc = accuracy(model, test, a.resolved, par);
  if (par.leader()) std::printf("test_accuracy: %.4f\n", acc);
  if (a.ddp) dist::barrier(); // the checkpoint is written before any rank ends
  return 0;
}

// Set by a --ddp run: a failing rank then ends the job (dist::abort_job) instead of waiting in
// MPI's finalization for ranks that wait for it.
bool g_distributed = false;

int fail(const std::string& what) {
  std::cerr << "error: " << what << "\n";
  if (g_distributed) {
    try {
      std::cerr << "(rank " << dist::rank() << " ends the job)\n";
    } catch (const Error&) { // the group itself could not be joined
    }
    dist::abort_job(1);
  }
  return 1;
}

} // namespace

int main(int argc, char** argv) {
  try {
    Args a = parse(argc, argv);
    g_distributed = a.ddp;
    return run(std::move(a));
  } catch (const Error& e) {
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory");
  } catch (const std::exception& e) { // anything else still ends as one line and a failure, never terminate()
    return fail(e.what());
  }
}

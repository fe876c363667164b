// Hardening (issue 16): losses that stay finite where PyTorch's do (against a table of PyTorch 1.13
// results), softmax over an empty dim, and file readers that check sizes before they allocate or
// inflate and reject empty data sets by the file's name.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/error_of.h"
#include "kiln/data.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using F::Reduction;
namespace fs = std::filesystem;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------- losses against PyTorch

struct LossCase {
  const char* name;
  bool f64;
  int64_t classes;
  std::vector<double> logits; ///< [N, C] row-major (log-probabilities for nll_loss)
  std::vector<int64_t> targets;
  double label_smoothing;
  bool nll; ///< nll_loss instead of cross_entropy
  Reduction reduction;
  std::vector<double> loss; ///< PyTorch's value(s)
  std::vector<double> grad; ///< PyTorch's d(loss.sum()) / d(logits)
};

const LossCase kPyTorch[] = {
#include "pytorch_loss_table.inc"
};

// Equal as PyTorch's results go: the same non-finite class, finite values to float rounding.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, bool f64, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(w) || std::isinf(w)) {
      EXPECT_TRUE(std::isnan(w) ? std::isnan(g) : g == w) << what << " [" << i << "]: " << g << " vs PyTorch " << w;
      continue;
    }
    EXPECT_NEAR(g, w, (f64 ? 1e-12 : 1e-5) * std::max(1.0, std::fabs(w))) << what << " [" << i << "]";
  }
}

TEST(Losses, MatchPyTorchOnNonFiniteAndHugeInputs) {
  std::vector<Tensor> losses, grads;
  for (const LossCase& c : kPyTorch) {
    const DType dt = c.f64 ? kFloat64 : kFloat32;
    const int64_t n = static_cast<int64_t>(c.targets.size());
    Tensor x = from_vector(c.logits, {n, c.classes}).to(dt).detach().requires_grad_();
    Tensor t = from_vector(c.targets);
    Tensor loss = c.nll ? F::nll_loss(x, t, c.reduction)
                        : F::cross_entropy(x, t, {.reduction = c.reduction, .label_smoothing = c.label_smoothing});
    loss.sum().backward();
    losses.push_back(loss);
    grads.push_back(x.grad());
  }
  std::vector<Tensor> all = losses;
  all.insert(all.end(), grads.begin(), grads.end());
  realize(all); // one schedule: far fewer kernels to compile than case by case
  for (size_t i = 0; i < std::size(kPyTorch); ++i) {
    const LossCase& c = kPyTorch[i];
    expect_close(losses[i].to_vector<double>(), c.loss, c.f64, std::string(c.name) + " loss");
    expect_close(grads[i].to_vector<double>(), c.grad, c.f64, std::string(c.name) + " grad");
  }
}

// The same losses compiled and fused into one step give the same values.
TEST(Losses, MaskedLogitsInACompiledStep) {
  auto step = compile([](const std::vector<Tensor>& a) { return std::vector<Tensor>{F::cross_entropy(a[0], a[1])}; });
  Tensor x = from_vector<float>({-std::numeric_limits<float>::infinity(), 0, 3e38f, -3e38f}, {2, 2});
  for (int i = 0; i < 2; ++i) EXPECT_EQ(step({x, from_vector<int64_t>({1, 0})})[0].item<float>(), 0.0f); // trace, replay
}

// ---------------------------------------------------------------- softmax over an empty dim

TEST(Softmax, EmptyDimGivesAnEmptyTensor) {
  for (const IntList& shape : {IntList{2, 0}, IntList{0, 3}, IntList{0}}) {
    Tensor x = zeros(shape).requires_grad_();
    for (Tensor y : {F::softmax(x, -1), F::log_softmax(x, -1), F::softmax(x, 0)}) {
      EXPECT_EQ(y.shape(), shape);
      EXPECT_TRUE(y.to_vector<float>().empty());
    }
    F::log_softmax(x, -1).sum().backward();
    EXPECT_EQ(x.grad().shape(), shape);
  }
  EXPECT_THROW(F::softmax(zeros({2, 0}), 2), Error); // a bad dim is still an error
}

// Zero channels: was a division by zero (SIGFPE) computing the values per channel.
TEST(BatchNorm, ZeroChannelsIsAnError) {
  EXPECT_THROW(F::batch_norm(zeros({2, 0, 3}), Tensor(), Tensor()), Error);
}

// ---------------------------------------------------------------- the IDX reader

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_test_hardening_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<uint8_t> idx_header(const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> b{0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  return b;
}

// One gzip member holding `bytes`.
std::vector<uint8_t> gzip_member(const std::vector<uint8_t>& bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::vector<uint8_t> out(deflateBound(&z, bytes.size()));
  z.next_in = const_cast<uint8_t*>(bytes.data());
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write_file(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

using test::error_of;

// A 2 MB file that inflates to 2 GiB: a 4-byte array, then 2 GiB of zeros (2048 concatenated gzip
// members of 1 MiB each, which gzread reads as one stream). Read under a 512 MiB address-space
// limit, it must fail fast with kiln::Error (was: inflated it all, then std::bad_alloc).
TEST(Idx, ReaderBoundsWhatItInflates) {
  const fs::path dir = temp_dir("bomb");
  const std::vector<uint8_t> head = gzip_member(idx_header({4})), zeros_mib = gzip_member(std::vector<uint8_t>(1 << 20));
  std::vector<uint8_t> file = head;
  for (int i = 0; i < 2048; ++i) file.insert(file.end(), zeros_mib.begin(), zeros_mib.end());
  write_file(dir / "bomb.gz", file);
  ASSERT_LT(file.size(), size_t{4} << 20);
  const pid_t pid = ::fork();
  if (pid == 0) {
    rlimit r{};
    getrlimit(RLIMIT_AS, &r);
    rlimit lim{size_t{512} << 20, r.rlim_max};
    std::ifstream status("/proc/self/statm");
    size_t pages = 0;
    status >> pages;
    lim.rlim_cur = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + (size_t{512} << 20);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) // their shadow memory needs the address space
    setrlimit(RLIMIT_AS, &lim);
#endif
    const auto t0 = std::chrono::steady_clock::now();
    int code = 3;
    try {
      (void)data::read_idx((dir / "bomb.gz").string());
    } catch (const Error& e) {
      code = std::string(e.what()).find("bomb.gz': size mismatch: at least") != std::string::npos ? 0 : 4;
    } catch (...) {
      code = 5; // std::bad_alloc: what the old reader ended with
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ::_exit(code == 0 && secs > 5 ? 6 : code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: no error, 4: another message, 5: not a kiln::Error, 6: too slow";
  fs::remove_all(dir);
}

// A header that declares more data than the file could hold once inflated is rejected before
// anything is allocated or inflated.
TEST(Idx, HeaderLargerThanTheFileCanHold) {
  const fs::path dir = temp_dir("claim");
  write_file(dir / "claim.gz", gzip_member(idx_header({60000, 60000, 28})));
  EXPECT_NE(error_of([&] { (void)data::read_idx((dir / "claim.gz").string()); })
                .find("claim.gz': truncated: the header declares 60000 x 60000 x 28 = 100800000000 bytes of data, more "
                      "than a file of this size can hold"),
            std::string::npos);
  write_file(dir / "plain", idx_header({1000}));
  EXPECT_NE(error_of([&] { (void)data::read_idx((dir / "plain").string()); }).find("plain': truncated"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)data::read_idx(dir.string()); }).find("not a regular file"), std::string::npos);
  fs::remove_all(dir);
}

// 0 test images: an error naming the file, not test_accuracy: -nan.
TEST(Idx, EmptyDataSetsNameTheFile) {
  const fs::path dir = temp_dir("empty");
  for (const std::vector<uint32_t>& dims : {std::vector<uint32_t>{0, 28, 28}, std::vector<uint32_t>{4, 0, 28}}) {
    std::vector<uint8_t> images = idx_header(dims);
    images.resize(images.size() + static_cast<size_t>(dims[0]) * dims[1] * dims[2]);
    std::vector<uint8_t> labels = idx_header({dims[0]});
    labels.resize(labels.size() + dims[0]);
    write_file(dir / "t10k-images-idx3-ubyte", images);
    write_file(dir / "t10k-labels-idx1-ubyte", labels);
    const std::string msg = error_of([&] { data::FashionMNIST("test", dir.string()); });
    EXPECT_NE(msg.find("t10k-images-idx3-ubyte': empty data set"), std::string::npos) << msg;
  }
  fs::remove_all(dir);
}

// Sizes of in-memory data sets and loaders that overflowed int64.
TEST(DatasetLimits, HugeSampleShapesAndBatchSizes) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_THROW(data::Dataset({}, {big, big, 4}, {0}), Error);        // was: 2^126 wrapped to 0 values per sample
  EXPECT_THROW(data::Dataset(std::vector<float>(4), {big}, {0, 0, 0, 0}), Error);
  data::Dataset ds(std::vector<float>(6), {2}, {0, 1, 2});
  EXPECT_EQ(ds.batches(std::numeric_limits<int64_t>::max()).size(), 1); // was: n + batch - 1 overflowed to 0 batches
  EXPECT_EQ(ds.batches(std::numeric_limits<int64_t>::max(), std::nullopt, true).size(), 0);
  EXPECT_EQ(ds.batches(2).size(), 2);
}

} // namespace
} // namespace kiln

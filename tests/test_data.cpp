// Data: the IDX reader (real Fashion-MNIST files and broken ones written to a
// temp dir), normalization, seeded shuffling and batching.

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <unistd.h>

#include "tests/error_of.h"
#include "kiln/data.h"
#include "kiln/kiln.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

bool have_dataset() { return fs::exists(std::string(data::kFashionMnistRoot) + "/train-images-idx3-ubyte.gz"); }

#define REQUIRE_DATASET()                                                                                             \
  if (!have_dataset()) GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed"

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln_test_data_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<uint8_t> idx_bytes(std::vector<uint32_t> dims, uint8_t type = 0x08, int64_t data_delta = 0) {
  std::vector<uint8_t> b{0, 0, type, static_cast<uint8_t>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
    n *= d;
  }
  for (size_t i = 0; i < n + data_delta; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

void write_plain(const fs::path& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_gz(const fs::path& p, const std::vector<uint8_t>& b) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  gzclose(f);
}

using kiln::test::error_of;

#define EXPECT_ERROR_HAS(expr, part)                                                                                  \
  do {                                                                                                                \
    const std::string msg_ = error_of([&] { (void)(expr); });                                                        \
    EXPECT_NE(msg_.find(part), std::string::npos) << "message: " << msg_;                                            \
  } while (0)

} // namespace

// ---------------------------------------------------------------- the real files

TEST(FashionMNIST, ReadsBothSplits) {
  REQUIRE_DATASET();
  const data::IdxArray images = data::read_idx(std::string(data::kFashionMnistRoot) + "/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(images.dims, (IntList{10000, 28, 28}));
  EXPECT_EQ(images.data.size(), 10000u * 784);
  data::FashionMNIST train("train"), test("test");
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.sample_shape(), (IntList{1, 28, 28}));
  std::vector<int64_t> per_class(10, 0);
  for (int64_t y : train.labels()) per_class.at(static_cast<size_t>(y))++;
  EXPECT_EQ(per_class, std::vector<int64_t>(10, 6000)); // Fashion-MNIST is balanced
}

TEST(FashionMNIST, NormalizationUsesTrainStatistics) {
  REQUIRE_DATASET();
  data::FashionMNIST train("train");
  const auto& x = train.samples();
  double mean = 0, sq = 0;
  for (float v : x) mean += v, sq += static_cast<double>(v) * v;
  mean /= static_cast<double>(x.size());
  const double stdev = std::sqrt(sq / static_cast<double>(x.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(stdev, 1.0, 0.01);
  data::FashionMNIST raw("test", data::kFashionMnistRoot, /*normalize=*/false);
  const auto [lo, hi] = std::minmax_element(raw.samples().begin(), raw.samples().end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
}

TEST(FashionMNIST, BadSplitAndMissingRoot) {
  EXPECT_ERROR_HAS(data::FashionMNIST("validation"), "split must be");
  EXPECT_ERROR_HAS(data::FashionMNIST("train", "/nonexistent/kiln"), "/nonexistent/kiln/train-images-idx3-ubyte.gz");
  EXPECT_ERROR_HAS(data::FashionMNIST("train", "/nonexistent/kiln"), "dataset-fashion-mnist");
  // File errors name the function called and the caller's line, not data.cpp's.
  const int line = __LINE__ + 1;
  const std::string e = error_of([] { (void)data::FashionMNIST("train", "/nonexistent/kiln"); });
  EXPECT_NE(e.find("FashionMNIST: "), std::string::npos) << e;
  EXPECT_NE(e.find("test_data.cpp:" + std::to_string(line)), std::string::npos) << e;
  EXPECT_EQ(e.find("data.cpp:"), e.find("test_data.cpp:") + 5) << "no line of kiln's: " << e;
  const int idx_line = __LINE__ + 1;
  const std::string idx = error_of([] { (void)data::read_idx("/nonexistent/kiln.gz"); });
  EXPECT_NE(idx.find("read_idx: '/nonexistent/kiln.gz': cannot open"), std::string::npos) << idx;
  EXPECT_NE(idx.find("test_data.cpp:" + std::to_string(idx_line)), std::string::npos) << idx;
}

// ---------------------------------------------------------------- batching and shuffling

TEST(Loader, BatchesCoverEverySampleOnce) {
  std::vector<float> x(10 * 2);
  std::vector<int64_t> y(10);
  for (int i = 0; i < 10; ++i) x[2 * i] = static_cast<float>(i), x[2 * i + 1] = -static_cast<float>(i), y[i] = i;
  data::Dataset ds(x, {2}, y);
  auto loader = ds.batches(4, /*shuffle_seed=*/5);
  EXPECT_EQ(loader.size(), 3);
  std::vector<int64_t> seen;
  std::vector<int64_t> sizes;
  for (auto [bx, by] : loader) {
    sizes.push_back(by.size(0));
    EXPECT_EQ(bx.shape(), (IntList{by.size(0), 2}));
    auto xv = bx.to_vector<float>();
    auto yv = by.to_vector<int64_t>();
    for (size_t i = 0; i < yv.size(); ++i) {
      EXPECT_EQ(xv[2 * i], static_cast<float>(yv[i])); // samples stay with their labels
      seen.push_back(yv[i]);
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
  std::vector<int64_t> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> all(10);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  EXPECT_NE(seen, all); // shuffled
  EXPECT_EQ(ds.batches(4, 5, /*drop_last=*/true).size(), 2);
  EXPECT_EQ(ds.batches(4)[0].y.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3})); // no seed: in order
  EXPECT_THROW(ds.batches(0), Error);
}

TEST(Loader, ShuffleIsSeededAndPortable) {
  const auto a = data::shuffled_indices(1000, 42), b = data::shuffled_indices(1000, 42), c = data::shuffled_indices(1000, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> s = a;
  std::sort(s.begin(), s.end());
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(s[i], i);
  // The order comes from std::mt19937_64 (fully specified by the standard) and kiln's own
  // bounded draw, so it is the same everywhere: pin the first elements.
  const auto small = data::shuffled_indices(8, 0);
  EXPECT_EQ(small, (std::vector<int64_t>{4, 5, 2, 0, 7, 1, 3, 6}));
}

TEST(Loader, SliceAndBatchFromDataset) {
  data::Dataset ds(std::vector<float>(6 * 4, 1.0f), {2, 2}, {0, 1, 2, 3, 4, 5});
  data::Dataset part = ds.slice(2, 100);
  EXPECT_EQ(part.size(), 4);
  EXPECT_EQ(part.labels().front(), 2);
  data::Batch b = ds.batch({5, 0});
  EXPECT_EQ(b.x.shape(), (IntList{2, 2, 2}));
  EXPECT_EQ(b.y.dtype(), kInt64);
  EXPECT_EQ(b.y.to_vector<int64_t>(), (std::vector<int64_t>{5, 0}));
  EXPECT_THROW(ds.batch({6}), Error);
  EXPECT_THROW(data::Dataset(std::vector<float>(5), {2}, {0, 1, 2}), Error);
}

// ---------------------------------------------------------------- broken IDX files

TEST(Idx, ReadsPlainAndGzip) {
  const fs::path dir = temp_dir("ok");
  write_plain(dir / "a.idx", idx_bytes({3, 2}));
  write_gz(dir / "a.idx.gz", idx_bytes({3, 2}));
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    const data::IdxArray a = data::read_idx((dir / name).string());
    EXPECT_EQ(a.dims, (IntList{3, 2}));
    EXPECT_EQ(a.data, (std::vector<uint8_t>{0, 1, 2, 3, 4, 5}));
  }
  fs::remove_all(dir);
}

TEST(Idx, BrokenFilesAreClearErrors) {
  const fs::path dir = temp_dir("broken");
  auto path = [&](const char* n) { return (dir / n).string(); };
  EXPECT_ERROR_HAS(data::read_idx(path("missing.gz")), "missing.gz': cannot open");
  write_gz(dir / "magic.gz", {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 1, 0, 0, 0, 0});
  EXPECT_ERROR_HAS(data::read_idx(path("magic.gz")), "magic.gz': bad magic number 0x1f8b0800");
  write_gz(dir / "type.gz", idx_bytes({4}, 0x0d));
  EXPECT_ERROR_HAS(data::read_idx(path("type.gz")), "unsupported IDX element type 0x0d");
  write_gz(dir / "short.gz", idx_bytes({10, 28, 28}, 0x08, -100));
  EXPECT_ERROR_HAS(data::read_idx(path("short.gz")), "short.gz': truncated: the header declares 10 x 28 x 28 = 7840 bytes of data, the file has 7740");
  write_gz(dir / "long.gz", idx_bytes({5}, 0x08, 3));
  EXPECT_ERROR_HAS(data::read_idx(path("long.gz")), "size mismatch: 3 bytes after");
  write_gz(dir / "header.gz", {0, 0, 8, 3, 0, 0});
  EXPECT_ERROR_HAS(data::read_idx(path("header.gz")), "header of a 3-d array is cut short");
  // A gzip stream cut in half, and one with its deflate data overwritten.
  write_gz(dir / "full.gz", idx_bytes({200, 28, 28}));
  std::ifstream in(dir / "full.gz", std::ios::binary);
  std::vector<uint8_t> gz{std::istreambuf_iterator<char>(in), {}};
  write_plain(dir / "cut.gz", std::vector<uint8_t>(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2)));
  EXPECT_ERROR_HAS(data::read_idx(path("cut.gz")), "cut.gz': truncated gzip data");
  std::vector<uint8_t> bad = gz;
  for (size_t i = 20; i < 60; ++i) bad[i] = 0xff;
  write_plain(dir / "corrupt.gz", bad);
  EXPECT_ERROR_HAS(data::read_idx(path("corrupt.gz")), "corrupt.gz': corrupt gzip data");
  fs::remove_all(dir);
}

TEST(Idx, FashionMnistChecksPairsAndLabels) {
  const fs::path dir = temp_dir("pairs");
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_bytes({4, 3, 3}));
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_bytes({5}));
  EXPECT_ERROR_HAS(data::FashionMNIST("test", dir.string()), "size mismatch: 5 labels for 4 images");
  std::vector<uint8_t> labels = idx_bytes({4});
  labels.back() = 12;
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", labels);
  EXPECT_ERROR_HAS(data::FashionMNIST("test", dir.string()), "label 12 of sample 3 is not a class 0-9");
  write_gz(dir / "t10k-labels-idx1-ubyte.gz", idx_bytes({4}));
  data::FashionMNIST tiny("test", dir.string(), false);
  EXPECT_EQ(tiny.size(), 4);
  EXPECT_EQ(tiny.sample_shape(), (IntList{1, 3, 3}));
  EXPECT_FLOAT_EQ(tiny.samples()[1], 1.0f / 255.0f);
  write_gz(dir / "t10k-images-idx3-ubyte.gz", idx_bytes({36}));
  EXPECT_ERROR_HAS(data::FashionMNIST("test", dir.string()), "expected 3-d images");
  fs::remove_all(dir);
}

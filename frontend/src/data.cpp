// Datasets, seeded shuffling and batching, and the IDX reader behind Fashion-MNIST.

#include "kiln/data.h"

#include "frontend/src/tensor_impl.h"
#include "graph/shape.h"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <cerrno>
#include <cstring>
#include <new>
#include <random>
#include <sys/stat.h>

namespace kiln::data {

namespace {

// An error about the file `path`, raised here: the public functions that read files are each a
// detail::UserCall, so the error is reported as theirs, at their caller's line.
[[noreturn]] void file_error(const std::string& path, const std::string& what) {
  throw Error("data", "'" + path + "': " + what);
}

std::string hex(uint32_t v, int digits) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (int i = digits - 1; i >= 0; --i) s += d[(v >> (4 * i)) & 0xf];
  return s;
}

// A file read through zlib (gzread passes plain files through unchanged), a chunk at a time,
// so that only what the caller asks for is inflated and held.
class GzReader {
public:
  explicit GzReader(const std::string& path) : path_(path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) file_error(path, std::string("cannot open: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) file_error(path, "cannot open: not a regular file");
    file_size_ = static_cast<uint64_t>(st.st_size);
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) file_error(path, std::string("cannot open: ") + std::strerror(errno));
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() { gzclose(f_); }

  // Appends up to n bytes to out; returns how many there were (fewer only at the end of the data).
  size_t read(size_t n, std::vector<uint8_t>& out) {
    size_t got = 0;
    while (got < n) {
      const size_t want = std::min<size_t>(n - got, size_t{1} << 20); // grows with the data, not the header
      const size_t at = out.size();
      out.resize(at + want);
      const int r = gzread(f_, out.data() + at, static_cast<unsigned>(want));
      if (r < 0) fail_corrupt();
      out.resize(at + static_cast<size_t>(r));
      got += static_cast<size_t>(r);
      if (r == 0) break;
    }
    if (got < n) check_end();
    return got;
  }

  // The most bytes this file can hold once inflated: deflate expands at most 1032:1.
  uint64_t max_content() const { return gzdirect(f_) ? file_size_ : file_size_ * 1032 + 1024; }

private:
  [[noreturn]] void fail_corrupt() {
    int code = 0;
    file_error(path_, std::string("corrupt gzip data (") + gzerror(f_, &code) + ")");
  }
  // zlib reports a stream cut short as Z_BUF_ERROR ("unexpected end of file") after the last read.
  void check_end() {
    int code = 0;
    const std::string msg = gzerror(f_, &code);
    if (code == Z_BUF_ERROR) file_error(path_, "truncated gzip data (" + msg + ")");
    if (code != Z_OK && code != Z_STREAM_END) file_error(path_, "corrupt gzip data (" + msg + ")");
  }

  std::string path_;
  uint64_t file_size_ = 0;
  gzFile f_ = nullptr;
};

uint32_t big_endian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string dims_str(const IntList& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? " x " : "") + std::to_string(dims[i]);
  return s;
}

// Draws uniformly from [0, bound) without modulo bias (rejection of the short tail).
uint64_t bounded(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  for (;;) {
    const uint64_t r = rng();
    if (r < limit) return r % bound;
  }
}

std::string file_in(const std::string& root, const std::string& name) {
  struct stat st{};
  const std::string gz = root + "/" + name + ".gz";
  if (::stat(gz.c_str(), &st) == 0) return gz;
  const std::string plain = root + "/" + name;
  if (::stat(plain.c_str(), &st) == 0) return plain;
  file_error(gz, "cannot open: no such file (nor '" + plain +
                     "'); on Debian, install the dataset-fashion-mnist package or pass the directory holding the files");
}

// The header is read and checked first; the data is then inflated only as far as the header
// declares (and a little more, to report trailing bytes), never the whole stream.
IdxArray read_idx_checked(const std::string& path) {
  GzReader in(path);
  std::vector<uint8_t> bytes;
  if (in.read(4, bytes) < 4)
    file_error(path, "truncated: " + std::to_string(bytes.size()) + " bytes, too short for an IDX header");
  const uint32_t magic = big_endian32(bytes.data());
  if (bytes[0] != 0 || bytes[1] != 0)
    file_error(path, "bad magic number " + hex(magic, 8) + ": not an IDX file (it must start with two zero bytes)");
  if (bytes[2] != 0x08)
    file_error(path, "unsupported IDX element type " + hex(bytes[2], 2) + " (only unsigned bytes, 0x08, are supported)");
  const size_t rank = bytes[3];
  if (rank == 0) file_error(path, "bad magic number " + hex(magic, 8) + ": an IDX array needs at least one dim");
  if (in.read(4 * rank, bytes) < 4 * rank)
    file_error(path, "truncated: the header of a " + std::to_string(rank) + "-d array is cut short");
  IdxArray out;
  size_t expected = 1;
  bool overflow = false;
  for (size_t d = 0; d < rank; ++d) {
    out.dims.push_back(big_endian32(bytes.data() + 4 + 4 * d));
    overflow = __builtin_mul_overflow(expected, static_cast<size_t>(out.dims.back()), &expected) || overflow;
  }
  if (overflow) // the product could otherwise wrap around to the (small) size of the data
    file_error(path, "corrupt header: the dims " + dims_str(out.dims) + " overflow the element count");
  if (expected > in.max_content())
    file_error(path, "truncated: the header declares " + dims_str(out.dims) + " = " + std::to_string(expected) +
                         " bytes of data, more than a file of this size can hold");
  const size_t have = in.read(expected, out.data);
  if (have < expected)
    file_error(path, "truncated: the header declares " + dims_str(out.dims) + " = " + std::to_string(expected) +
                         " bytes of data, the file has " + std::to_string(have));
  std::vector<uint8_t> rest;
  constexpr size_t kReported = size_t{1} << 20; // trailing bytes are counted this far, not inflated further
  if (const size_t extra = in.read(kReported, rest); extra > 0)
    file_error(path, "size mismatch: " + std::string(extra == kReported ? "at least " : "") + std::to_string(extra) +
                         " bytes after the " + std::to_string(expected) + " bytes of data the header declares (" +
                         dims_str(out.dims) + ")");
  return out;
}

Dataset load_fashion_mnist(const std::string& split, const std::string& root, bool normalize, const Loc& loc) {
  if (split != "train" && split != "test")
    throw Error("FashionMNIST", "split must be \"train\" or \"test\", not \"" + split + "\"", loc);
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string images_path = file_in(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = file_in(root, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx(images_path, loc);
  IdxArray labels = read_idx(labels_path, loc);
  if (images.dims.size() != 3) file_error(images_path, "expected 3-d images, the header says " + dims_str(images.dims));
  if (std::find(images.dims.begin(), images.dims.end(), 0) != images.dims.end())
    file_error(images_path, "empty data set: the header says " + dims_str(images.dims) + " images");
  if (labels.dims.size() != 1) file_error(labels_path, "expected 1-d labels, the header says " + dims_str(labels.dims));
  if (images.dims[0] != labels.dims[0])
    file_error(labels_path, "size mismatch: " + std::to_string(labels.dims[0]) + " labels for " +
                                std::to_string(images.dims[0]) + " images in '" + images_path + "'");
  const auto what = [&](const char* of) { return [&, of] { return std::string(of) + " of '" + images_path + "'"; }; };
  std::vector<int64_t> y = detail::host_vector<int64_t>(labels.data.size(), "FashionMNIST", what("the labels"), loc);
  std::copy(labels.data.begin(), labels.data.end(), y.begin());
  for (size_t i = 0; i < y.size(); ++i)
    if (y[i] > 9) file_error(labels_path, "label " + std::to_string(y[i]) + " of sample " + std::to_string(i) + " is not a class 0-9");
  const double mean = normalize ? kFashionMnistMean : 0.0, stdev = normalize ? kFashionMnistStd : 1.0;
  std::vector<float> x = detail::host_vector<float>(images.data.size(), "FashionMNIST", what("the f32 images"), loc);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((images.data[i] / 255.0 - mean) / stdev);
  return Dataset(std::move(x), {1, images.dims[1], images.dims[2]}, std::move(y), loc);
}

} // namespace

// ---------------------------------------------------------------- IDX

IdxArray read_idx(const std::string& path, Loc loc) {
  detail::UserCall call("read_idx", loc);
  try {
    return read_idx_checked(path);
  } catch (const std::bad_alloc&) {
    file_error(path, "out of memory reading the file");
  }
}

// ---------------------------------------------------------------- Dataset

Dataset::Dataset(std::vector<float> samples, IntList sample_shape, std::vector<int64_t> labels, Loc loc)
    : shape_(std::move(sample_shape)) {
  sample_numel_ = 1;
  for (int64_t d : shape_) {
    if (d <= 0) throw Error("Dataset", "sample extents must be positive, got " + graph::shape_str(shape_), loc);
    sample_numel_ = graph::checked_mul(sample_numel_, d).value_or(std::numeric_limits<int64_t>::max());
  }
  const auto values = graph::checked_mul(sample_numel_, static_cast<int64_t>(labels.size()));
  if (values != static_cast<int64_t>(samples.size())) // an overflowed count matches no vector
    throw Error("Dataset", std::to_string(samples.size()) + " values do not make " + std::to_string(labels.size()) +
                               " samples of " + std::to_string(sample_numel_), loc);
  samples_ = std::make_shared<const std::vector<float>>(std::move(samples));
  labels_ = std::make_shared<const std::vector<int64_t>>(std::move(labels));
}

Batch Dataset::batch(const std::vector<int64_t>& indices, Loc loc) const {
  const auto n = static_cast<int64_t>(indices.size());
  IntList shape{n};
  shape.insert(shape.end(), shape_.begin(), shape_.end());
  const auto values = graph::checked_mul(n, sample_numel_);
  if (!values) throw Error("Dataset::batch", "a batch of " + std::to_string(n) + " samples is too large", loc);
  std::vector<float> x = detail::host_vector<float>(static_cast<size_t>(*values), "Dataset::batch",
                                                    [&] { return "a batch f32" + graph::shape_str(shape); }, loc);
  std::vector<int64_t> y = detail::host_vector<int64_t>(static_cast<size_t>(n), "Dataset::batch",
                                                        [&] { return "its labels i64[" + std::to_string(n) + "]"; }, loc);
  for (int64_t b = 0; b < n; ++b) {
    const int64_t i = indices[b];
    if (i < 0 || i >= size())
      throw Error("Dataset::batch", "index " + std::to_string(i) + " out of range for " + std::to_string(size()) + " samples", loc);
    std::copy_n(samples_->begin() + i * sample_numel_, sample_numel_, x.begin() + b * sample_numel_);
    y[b] = (*labels_)[i];
  }
  return {from_vector(x, shape, loc), from_vector(y, {n}, loc)};
}

Dataset Dataset::slice(int64_t begin, int64_t end, Loc loc) const {
  begin = std::clamp<int64_t>(begin, 0, size());
  end = std::clamp<int64_t>(end, begin, size());
  const auto n = static_cast<size_t>(end - begin);
  const auto what = [&] { return std::to_string(n) + " samples"; };
  std::vector<float> x = detail::host_vector<float>(n * static_cast<size_t>(sample_numel_), "Dataset::slice", what, loc);
  std::vector<int64_t> y = detail::host_vector<int64_t>(n, "Dataset::slice", what, loc);
  std::copy(samples_->begin() + begin * sample_numel_, samples_->begin() + end * sample_numel_, x.begin());
  std::copy(labels_->begin() + begin, labels_->begin() + end, y.begin());
  return detail::memory_guard("Dataset::slice", loc, [&] { return Dataset(std::move(x), shape_, std::move(y), loc); });
}

Loader Dataset::batches(int64_t batch_size, std::optional<uint64_t> shuffle_seed, bool drop_last, Loc loc) const {
  return Loader(*this, batch_size, shuffle_seed, drop_last, loc);
}

Loader Dataset::batches(const DistributedSampler& sampler, int64_t batch_size, bool drop_last, Loc loc) const {
  return Loader(*this, sampler.indices(), batch_size, drop_last, loc);
}

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, Loc loc) {
  if (n < 0) throw Error("shuffled_indices", "n must not be negative, got " + std::to_string(n), loc);
  std::vector<int64_t> order = detail::host_vector<int64_t>(
      static_cast<size_t>(n), "shuffled_indices", [&] { return "a permutation of " + std::to_string(n) + " indices"; }, loc);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[bounded(rng, static_cast<uint64_t>(i) + 1)]);
  return order;
}

// ---------------------------------------------------------------- DistributedSampler

DistributedSampler::DistributedSampler(int64_t size, int rank, int world_size, uint64_t seed, bool shuffle,
                                       bool drop_last, Loc loc)
    : size_(size), rank_(rank), world_(world_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last), loc_(loc) {
  const char* op = "DistributedSampler";
  if (size < 0) throw Error(op, "the data set size must not be negative, got " + std::to_string(size), loc);
  if (world_size <= 0 || rank < 0 || rank >= world_size)
    throw Error(op, "rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world_size), loc);
}

int64_t DistributedSampler::num_samples() const {
  return drop_last_ ? size_ / world_ : size_ / world_ + (size_ % world_ != 0);
}

std::vector<int64_t> DistributedSampler::indices() const {
  const char* op = "DistributedSampler::indices";
  std::vector<int64_t> order;
  if (shuffle_) {
    order = shuffled_indices(size_, seed_ + static_cast<uint64_t>(epoch_), loc_);
  } else {
    order = detail::host_vector<int64_t>(static_cast<size_t>(size_), op,
                                         [&] { return "the order of " + std::to_string(size_) + " samples"; }, loc_);
    for (int64_t i = 0; i < size_; ++i) order[static_cast<size_t>(i)] = i;
  }
  const int64_t n = num_samples();
  std::vector<int64_t> mine = detail::host_vector<int64_t>(
      static_cast<size_t>(n), op, [&] { return "the " + std::to_string(n) + " indices of rank " + std::to_string(rank_); }, loc_);
  for (int64_t k = 0; k < n; ++k) mine[static_cast<size_t>(k)] = order[static_cast<size_t>((rank_ + k * world_) % size_)];
  return mine;
}

// ---------------------------------------------------------------- Loader

Loader::Loader(Dataset dataset, int64_t batch_size, std::optional<uint64_t> shuffle_seed, bool drop_last, Loc loc)
    : dataset_(std::move(dataset)), batch_size_(batch_size), drop_last_(drop_last), loc_(loc) {
  if (batch_size <= 0) throw Error("batches", "batch_size must be positive, got " + std::to_string(batch_size), loc);
  if (shuffle_seed) {
    order_ = shuffled_indices(dataset_.size(), *shuffle_seed, loc);
  } else {
    order_ = detail::host_vector<int64_t>(static_cast<size_t>(dataset_.size()), "batches",
                                          [&] { return "the order of " + std::to_string(dataset_.size()) + " samples"; }, loc);
    for (int64_t i = 0; i < dataset_.size(); ++i) order_[i] = i;
  }
}

Loader::Loader(Dataset dataset, std::vector<int64_t> order, int64_t batch_size, bool drop_last, Loc loc)
    : dataset_(std::move(dataset)), batch_size_(batch_size), drop_last_(drop_last), order_(std::move(order)), loc_(loc) {
  if (batch_size <= 0) throw Error("batches", "batch_size must be positive, got " + std::to_string(batch_size), loc);
  for (int64_t i : order_)
    if (i < 0 || i >= dataset_.size())
      throw Error("batches", "index " + std::to_string(i) + " out of range for a dataset of " +
                                 std::to_string(dataset_.size()) + " samples", loc);
}

int64_t Loader::size() const {
  const int64_t n = static_cast<int64_t>(order_.size());
  return n / batch_size_ + (!drop_last_ && n % batch_size_ != 0); // no n + batch_size - 1 to overflow
}

Batch Loader::operator[](IndexAt at) const {
  const int64_t i = at.i;
  if (i < 0 || i >= size())
    throw Error("batches", "batch " + std::to_string(i) + " out of range for " + std::to_string(size()) + " batches", at.loc);
  const int64_t begin = i * batch_size_, end = std::min<int64_t>(begin + batch_size_, static_cast<int64_t>(order_.size()));
  return dataset_.batch(std::vector<int64_t>(order_.begin() + begin, order_.begin() + end), loc_);
}

// ---------------------------------------------------------------- Fashion-MNIST

FashionMNIST::FashionMNIST(const std::string& split, const std::string& root, bool normalize, Loc loc)
    : Dataset([&] {
        detail::UserCall call("FashionMNIST", loc);
        return load_fashion_mnist(split, root, normalize, loc);
      }()) {}

} // namespace kiln::data

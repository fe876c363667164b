#pragma once
/// \file data.h
/// Datasets in memory, seeded shuffling and batching, and the Fashion-MNIST
/// reader (IDX files, gzip-compressed or not, as Debian's dataset-fashion-mnist
/// installs them under /usr/share/datasets/fashion-mnist/).
///
/// A missing, truncated or corrupt file is a kiln::Error naming the file and
/// what is wrong with it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::data {

/// An IDX array of unsigned bytes (the only element type Fashion-MNIST uses).
struct IdxArray {
  IntList dims;              ///< extents, outermost first
  std::vector<uint8_t> data; ///< row-major elements
};

/// Reads an IDX file of unsigned bytes (gzip-compressed or plain). Throws kiln::Error
/// naming the file for: a missing file, corrupt or truncated gzip data, a bad magic
/// number, an unsupported element type, or data shorter or longer than the header says;
/// the error names read_idx and `loc`.
IdxArray read_idx(const std::string& path, Loc loc = Loc::current());

/// One batch: inputs [B, ...sample shape] (f32) and labels [B] (i64).
struct Batch {
  Tensor x; ///< inputs
  Tensor y; ///< class labels
};

class Loader;
class DistributedSampler;

/// Labelled samples held in host memory: f32 samples of one shape and i64 labels.
/// Copies share the (immutable) data.
class Dataset {
public:
  /// From `samples` (n * numel(sample_shape) values, row-major) and n `labels`; errors name `loc`.
  Dataset(std::vector<float> samples, IntList sample_shape, std::vector<int64_t> labels, Loc loc = Loc::current());
  /// Number of samples.
  int64_t size() const { return static_cast<int64_t>(labels_->size()); }
  /// Shape of one sample ([1, 28, 28] for Fashion-MNIST).
  const IntList& sample_shape() const { return shape_; }
  /// The labels, in order.
  const std::vector<int64_t>& labels() const { return *labels_; }
  /// The samples, in order (size() * numel(sample_shape) values).
  const std::vector<float>& samples() const { return *samples_; }
  /// The samples at `indices`, stacked, with their labels. Memory that cannot be had (here,
  /// in slice() and in a Loader's batches) is a kiln::OutOfMemoryError naming the bytes.
  Batch batch(const std::vector<int64_t>& indices, Loc loc = Loc::current()) const;
  /// Samples [begin, end) as a new dataset (end is clamped to size()).
  Dataset slice(int64_t begin, int64_t end, Loc loc = Loc::current()) const;
  /// Batches of `batch_size` in order, or shuffled by `shuffle_seed` (pass a different
  /// seed per epoch, e.g. seed + epoch); the last partial batch is kept unless drop_last.
  /// Errors of making the batches name `loc`, the line that asked for them.
  Loader batches(int64_t batch_size, std::optional<uint64_t> shuffle_seed = std::nullopt, bool drop_last = false,
                 Loc loc = Loc::current()) const;
  /// Batches of `batch_size` of this rank's shard (sampler.indices(), in that order).
  Loader batches(const DistributedSampler& sampler, int64_t batch_size, bool drop_last = false,
                 Loc loc = Loc::current()) const;

private:
  std::shared_ptr<const std::vector<float>> samples_;
  std::shared_ptr<const std::vector<int64_t>> labels_;
  IntList shape_;
  int64_t sample_numel_;
};

/// A permutation of 0..n-1 by Fisher-Yates driven by std::mt19937_64 seeded with `seed`,
/// with kiln's own unbiased bounded draw: the same order on every platform.
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, Loc loc = Loc::current());

/// One rank's share of a data set for data-parallel training, as PyTorch's DistributedSampler:
/// each epoch, the indices 0..size-1 are shuffled by shuffled_indices(size, seed + epoch) (the
/// same order on every rank), padded by repeating its first indices to a multiple of
/// world_size (or cut to one, with drop_last), and rank r takes positions r, r + world_size,
/// r + 2 world_size, ... So the shards of one epoch are disjoint and cover the data, and a
/// batch i of B samples on each of N ranks holds the samples of batch i of N*B samples of a
/// single process that reads the same order (Dataset::batches with the same seed).
class DistributedSampler {
public:
  /// The sampler of `rank` among `world_size` ranks for a data set of `size` samples.
  DistributedSampler(int64_t size, int rank, int world_size, uint64_t seed = 0, bool shuffle = true,
                     bool drop_last = false, Loc loc = Loc::current());
  /// Sets the epoch: each epoch shuffles differently (call it before each epoch, as in PyTorch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  /// The epoch set last (0 at first).
  int64_t epoch() const { return epoch_; }
  /// This rank's indices for the current epoch.
  std::vector<int64_t> indices() const;
  /// How many indices each rank gets per epoch.
  int64_t num_samples() const;

private:
  int64_t size_;
  int rank_, world_;
  uint64_t seed_;
  bool shuffle_, drop_last_;
  int64_t epoch_ = 0;
  Loc loc_;
};

/// The batches of one pass over a dataset; iterate with a range-for.
class Loader {
public:
  /// See Dataset::batches.
  Loader(Dataset dataset, int64_t batch_size, std::optional<uint64_t> shuffle_seed, bool drop_last,
         Loc loc = Loc::current());
  /// The batches of the samples at `order` (indices into `dataset`), in that order.
  Loader(Dataset dataset, std::vector<int64_t> order, int64_t batch_size, bool drop_last, Loc loc = Loc::current());
  /// Number of batches.
  int64_t size() const;
  /// The i-th batch; an index out of range is a kiln::Error naming the line that reads it.
  Batch operator[](IndexAt i) const;

  /// An input iterator over the batches.
  class iterator {
  public:
    using value_type = Batch;              ///< what it yields
    using difference_type = std::ptrdiff_t; ///< iterator distance
    /// Batch i of `loader`.
    iterator(const Loader* loader, int64_t i) : loader_(loader), i_(i) {}
    Batch operator*() const { return (*loader_)[i_]; } ///< the current batch
    iterator& operator++() { ++i_; return *this; }     ///< next batch
    bool operator==(const iterator& o) const { return i_ == o.i_; } ///< same position
  private:
    const Loader* loader_;
    int64_t i_;
  };
  iterator begin() const { return {this, 0}; }     ///< first batch
  iterator end() const { return {this, size()}; }  ///< past the last batch

private:
  Dataset dataset_;
  int64_t batch_size_;
  bool drop_last_;
  std::vector<int64_t> order_;
  Loc loc_; // where the batches were asked for
};

/// Fashion-MNIST's normalization constants (of the training images, pixels in [0, 1]).
inline constexpr double kFashionMnistMean = 0.2860;
/// See kFashionMnistMean.
inline constexpr double kFashionMnistStd = 0.3530;
/// Where Debian's dataset-fashion-mnist installs the files.
inline constexpr const char* kFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

/// Fashion-MNIST: 28x28 grey images of 10 clothing classes; "train" (60000) or "test" (10000).
/// Samples are [1, 28, 28], pixels scaled to [0, 1] and, by default, normalized with the
/// training set's mean and std.
class FashionMNIST : public Dataset {
public:
  /// Reads `split` ("train" or "test") from `root` ({train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]);
  /// a bad split and memory that cannot be had name `loc`.
  explicit FashionMNIST(const std::string& split = "train", const std::string& root = kFashionMnistRoot,
                        bool normalize = true, Loc loc = Loc::current());
};

} // namespace kiln::data

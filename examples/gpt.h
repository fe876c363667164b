#pragma once
/// \file gpt.h
/// A character-level GPT and its data, shared by examples/gpt.cpp (the second main job) and
/// tests/test_transformer.cpp: token and position embeddings, pre-LN transformer layers
/// (nn::TransformerEncoderLayer with a causal mask, GELU, 4x feed-forward), a final LayerNorm and
/// a linear head. bench/gpt_torch.py builds the same model, data, split and batches in PyTorch.

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace gpt {

/// The model's sizes.
struct Config {
  int64_t vocab = 0;     ///< characters in the vocabulary
  int64_t layers = 4;    ///< transformer layers
  int64_t heads = 4;     ///< attention heads per layer
  int64_t dim = 128;     ///< embedding width
  int64_t context = 64;  ///< block size: the longest sequence
  double dropout = 0.1;  ///< dropout after the embeddings and inside every layer
};

/// Character-level GPT: logits [B, T, vocab] of the next character for indices [B, T] (T <= context).
class GPT : public kiln::nn::Module {
public:
  /// A model of `config`'s sizes, initialized as PyTorch's modules.
  explicit GPT(const Config& config) : config_(config) {
    using namespace kiln::nn;
    tok_emb = register_module("tok_emb", Embedding(config.vocab, config.dim));
    pos_emb = register_module("pos_emb", Embedding(config.context, config.dim));
    drop = register_module("drop", Dropout(config.dropout));
    blocks = register_module("blocks", ModuleList());
    for (int64_t i = 0; i < config.layers; ++i)
      blocks->push_back(TransformerEncoderLayer(config.dim, config.heads,
                                                {.dim_feedforward = 4 * config.dim, .dropout = config.dropout,
                                                 .activation = "gelu", .batch_first = true, .norm_first = true}));
    ln_f = register_module("ln_f", LayerNorm({config.dim}));
    head = register_module("head", Linear(config.dim, config.vocab, /*bias=*/false));
  }
  /// Next-character logits [B, T, vocab] for indices [B, T]; a direct call names the caller's line.
  kiln::Tensor forward(const kiln::Tensor& idx, kiln::Loc loc = kiln::Loc::current()) { return forward_at(idx, loc); }
  std::string name() const override { return "GPT"; } ///< "GPT"
  /// The sizes.
  const Config& config() const { return config_; }

  std::shared_ptr<kiln::nn::Embedding> tok_emb;   ///< [vocab, dim]
  std::shared_ptr<kiln::nn::Embedding> pos_emb;   ///< [context, dim]
  std::shared_ptr<kiln::nn::Dropout> drop;        ///< after the embeddings
  std::shared_ptr<kiln::nn::ModuleList> blocks;   ///< the transformer layers
  std::shared_ptr<kiln::nn::LayerNorm> ln_f;      ///< final norm
  std::shared_ptr<kiln::nn::Linear> head;         ///< dim -> vocab, no bias
protected:
  kiln::Tensor forward_impl(const kiln::Tensor& idx) override {
    using namespace kiln;
    if (idx.dim() != 2 || idx.size(1) > config_.context || idx.size(1) == 0)
      throw Error("GPT", "expects indices [B, T] with 0 < T <= " + std::to_string(config_.context) + ", got " +
                             idx.type_str());
    Tensor x = (*drop)((*tok_emb)(idx) + (*pos_emb)(arange(idx.size(1))));
    for (nn::Module& b : *blocks)
      x = static_cast<nn::TransformerEncoderLayer&>(b).forward(x, Tensor(), Tensor(), /*is_causal=*/true);
    return (*head)((*ln_f)(x));
  }
private:
  Config config_;
};

/// Where Debian's fortunes package puts its text.
inline const char* kFortunesDir = "/usr/share/games/fortunes";

/// The bytes of every fortune file in `dir` (the text files, not the .dat indexes or the .u8
/// links), in name order. Empty when there are none.
inline std::string read_corpus(const std::string& dir = kFortunesDir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && !e.is_symlink() && !e.path().has_extension()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return text;
}

/// A character vocabulary: the distinct bytes of a text, in byte order.
struct Vocab {
  std::vector<unsigned char> chars;    ///< id -> byte
  std::array<int64_t, 256> ids{};      ///< byte -> id (-1: not in the vocabulary)
  /// The vocabulary of `text`.
  explicit Vocab(const std::string& text) {
    std::array<bool, 256> seen{};
    for (char c : text) seen[static_cast<unsigned char>(c)] = true;
    ids.fill(-1);
    for (int b = 0; b < 256; ++b)
      if (seen[b]) ids[b] = static_cast<int64_t>(chars.size()), chars.push_back(static_cast<unsigned char>(b));
  }
  /// Number of characters.
  int64_t size() const { return static_cast<int64_t>(chars.size()); }
  /// The ids of `text` (every byte must be in the vocabulary).
  std::vector<int64_t> encode(const std::string& text) const {
    std::vector<int64_t> out;
    out.reserve(text.size());
    for (char c : text) out.push_back(ids[static_cast<unsigned char>(c)]);
    return out;
  }
};

/// SplitMix64 (also in bench/gpt_torch.py, so both draw the same windows).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A batch of `batch` random windows of `context` + 1 characters of `data`, the windows of batch
/// number `index` of stream `seed` (stateless, so that a resumed run draws the same batches):
/// inputs x [batch, context] and next-character targets y [batch, context], both i64.
inline std::pair<kiln::Tensor, kiln::Tensor> windows(const std::vector<int64_t>& data, int64_t batch, int64_t context,
                                                     uint64_t seed, uint64_t index) {
  const auto span = static_cast<uint64_t>(data.size()) - static_cast<uint64_t>(context);
  std::vector<int64_t> x, y;
  x.reserve(static_cast<size_t>(batch * context));
  y.reserve(static_cast<size_t>(batch * context));
  for (int64_t b = 0; b < batch; ++b) {
    const uint64_t start = splitmix64(seed * 0x100000001b3ULL + index * static_cast<uint64_t>(batch) +
                                      static_cast<uint64_t>(b)) % span;
    x.insert(x.end(), data.begin() + static_cast<int64_t>(start), data.begin() + static_cast<int64_t>(start) + context);
    y.insert(y.end(), data.begin() + static_cast<int64_t>(start) + 1, data.begin() + static_cast<int64_t>(start) + context + 1);
  }
  return {kiln::from_vector(x, {batch, context}), kiln::from_vector(y, {batch, context})};
}

/// Mean cross entropy (nats per character) of next-character logits [B, T, V] against targets [B, T].
inline kiln::Tensor loss(const kiln::Tensor& logits, const kiln::Tensor& targets) {
  return kiln::nn::functional::cross_entropy(logits.flatten(0, 1), targets.flatten());
}

/// The mean loss over `batches` fixed windows of `data` (stream `seed`), in eval mode without gradients.
inline double evaluate(GPT& model, const std::vector<int64_t>& data, int64_t batch, int64_t batches, uint64_t seed) {
  kiln::NoGradGuard no_grad;
  model.eval();
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    auto [x, y] = windows(data, batch, model.config().context, seed, static_cast<uint64_t>(i));
    sum += loss(model(x), y).item<double>();
  }
  model.train();
  return sum / static_cast<double>(batches);
}

} // namespace gpt

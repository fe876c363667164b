#pragma once
/// \file checkpoint.h
/// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
/// an 8-byte little-endian header length, a JSON header mapping each tensor's
/// name to {"dtype", "shape", "data_offsets"} (plus an optional "__metadata__"
/// object of strings), then the raw little-endian data. Other tools (the
/// safetensors Python package, PyTorch, NumPy readers) can read the files.
///
/// Files are written atomically: to a temporary file "<target>.tmp.XXXXXX" in the same
/// directory, flushed with fsync, then renamed over the target, so a crash leaves either
/// the old checkpoint or the new one. A writer holds an flock() on its temporary file until
/// the rename; a write removes the temporaries of the same target that no live writer
/// holds (those of killed writers). New files get mode 0666 & ~umask; a path that is a
/// symlink is written through to its target. The header is JSON parsed and written with
/// nlohmann-json; names and metadata must be valid UTF-8. The "__metadata__" entry
/// "kiln.data_crc32" holds the CRC-32 of the data (as Python's zlib.crc32, 8 hex digits), and
/// "kiln.header_crc32" that of the rest of the header (the other metadata, such as a
/// checkpoint's lr, and each tensor's name, dtype, shape and offsets): written on save,
/// verified on load when present (files of other writers have none), and not returned in
/// Contents::metadata. Loading validates the whole file first and throws a
/// kiln::Error naming the file and what is wrong (not a regular file, truncated, corrupt
/// header, size mismatch, data digest, missing or unexpected names, shapes, dtypes). Every
/// error of the functions below names the function and `loc`, the line that called it.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn {
class Module;
}
namespace kiln::optim {
class Optimizer;
}

namespace kiln::checkpoint {

/// A list of (name, tensor) pairs.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
/// The string-to-string "__metadata__" of a safetensors file.
using Metadata = std::map<std::string, std::string>;

/// Writes `tensors` (realizing them) and `metadata` to `path` in the safetensors format, atomically.
/// Names must be unique, non-empty and valid UTF-8; "__metadata__" and the metadata keys
/// "kiln.data_crc32" and "kiln.header_crc32" are reserved. Memory that cannot be had, here and in the functions below,
/// is a kiln::OutOfMemoryError naming the function, the bytes, the tensor and `loc`.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {},
                      Loc loc = Loc::current());

/// What a safetensors file holds.
struct Contents {
  NamedTensors tensors; ///< in the order of their data in the file
  Metadata metadata;    ///< "__metadata__" (empty when absent)
};
/// Reads and validates a safetensors file (dtypes F32, F64, I32, I64, BOOL).
Contents load_safetensors(const std::string& path, Loc loc = Loc::current());

/// Saves the model's state_dict() under its own names and, when given, the optimizer's
/// state under "optimizer.<index>.<slot>", with metadata {"format": "kiln", "optimizer":
/// kind, "lr": current lr} added to `metadata`.
void save(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer = nullptr,
          Metadata metadata = {}, Loc loc = Loc::current());

/// Loads a checkpoint written by save() into `model` and, when given, `optimizer` (whose
/// learning rate is restored too; "lr" must be a finite, non-negative decimal number).
/// Every parameter and buffer must be present with the same shape and dtype and no other
/// model entry may be present, and the optimizer state must be complete (see
/// Optimizer::load_state_dict); otherwise nothing is changed and the error lists every
/// mismatch. Returns the file's metadata.
Metadata load(const std::string& path, nn::Module& model, optim::Optimizer* optimizer = nullptr,
              Loc loc = Loc::current());

} // namespace kiln::checkpoint

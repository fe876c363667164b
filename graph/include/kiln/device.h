#pragma once
/// \file device.h
/// Where tensors live and kernels run.

#include <string>

namespace kiln {

/// A compute device: the host CPU, or one CUDA GPU.
struct Device {
  /// The kind of device.
  enum class Kind { CPU, CUDA };
  Kind kind = Kind::CPU; ///< CPU or CUDA
  int index = 0;         ///< GPU ordinal (0 for the CPU)

  /// "cpu" or "cuda:N".
  std::string str() const { return kind == Kind::CPU ? "cpu" : "cuda:" + std::to_string(index); }
  friend bool operator==(const Device&, const Device&) = default;
};

inline const Device kCPU{}; ///< The host CPU.

} // namespace kiln

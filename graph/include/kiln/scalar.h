#pragma once
/// \file scalar.h
/// A C++ number used as an op operand (a "wrapped number" in PyTorch's promotion rules).

#include <cstdint>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln {

/// A bool, integer or floating-point number. Integers are kept exact as int64.
class Scalar {
public:
  /// From any arithmetic C++ value.
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) { // NOLINT: implicit on purpose, like torch::Scalar
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = DType::Bool;
      i_ = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = DType::Int64;
      i_ = static_cast<int64_t>(v);
    } else {
      kind_ = DType::Float64;
      f_ = static_cast<double>(v);
    }
  }
  /// Bool, Int64 or Float64: the kind of number held.
  DType kind() const { return kind_; }
  /// The value as a double.
  double to_double() const { return kind_ == DType::Float64 ? f_ : static_cast<double>(i_); }
  /// The value as an int64 (floating values truncate toward zero).
  int64_t to_int() const { return kind_ == DType::Float64 ? static_cast<int64_t>(f_) : i_; }

private:
  DType kind_ = DType::Int64;
  int64_t i_ = 0;
  double f_ = 0;
};

} // namespace kiln

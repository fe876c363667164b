#pragma once
/// \file dtype.h
/// Element types and PyTorch's type-promotion rules.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace kiln {

/// The element type of a tensor. Ordered from the lowest promotion category up.
enum class DType : uint8_t { Bool, Int32, Int64, Float32, Float64 };

inline constexpr DType kBool = DType::Bool;       ///< bool
inline constexpr DType kInt32 = DType::Int32;     ///< int32_t
inline constexpr DType kInt64 = DType::Int64;     ///< int64_t
inline constexpr DType kFloat32 = DType::Float32; ///< float
inline constexpr DType kFloat64 = DType::Float64; ///< double

/// Size of one element in bytes.
constexpr size_t dtype_size(DType t) {
  switch (t) {
  case DType::Bool: return 1;
  case DType::Int32: return 4;
  case DType::Int64: return 8;
  case DType::Float32: return 4;
  case DType::Float64: return 8;
  }
  return 0;
}

/// Short name as used in the text IR: bool, i32, i64, f32, f64.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
  case DType::Bool: return "bool";
  case DType::Int32: return "i32";
  case DType::Int64: return "i64";
  case DType::Float32: return "f32";
  case DType::Float64: return "f64";
  }
  return "?";
}

/// The dtype whose dtype_name() is `name`; false when there is none.
constexpr bool dtype_from_name(std::string_view name, DType& out) {
  for (DType t : {DType::Bool, DType::Int32, DType::Int64, DType::Float32, DType::Float64})
    if (dtype_name(t) == name) {
      out = t;
      return true;
    }
  return false;
}

/// True for f32 and f64.
constexpr bool is_floating(DType t) { return t == DType::Float32 || t == DType::Float64; }
/// True for i32 and i64 (bool is its own category).
constexpr bool is_integral(DType t) { return t == DType::Int32 || t == DType::Int64; }

/// The promotion category: 0 bool, 1 integer, 2 floating.
constexpr int dtype_category(DType t) { return t == DType::Bool ? 0 : is_integral(t) ? 1 : 2; }

/// torch.promote_types: the higher category wins; within a category the wider type.
constexpr DType promote_types(DType a, DType b) {
  if (dtype_category(a) != dtype_category(b))
    return dtype_category(a) > dtype_category(b) ? a : b;
  return static_cast<uint8_t>(a) > static_cast<uint8_t>(b) ? a : b;
}

/// The default floating type (torch.get_default_dtype()).
inline constexpr DType kDefaultFloat = DType::Float32;

/// Maps a C++ element type to its DType.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<int32_t>() { return DType::Int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::Int64; }
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }

} // namespace kiln

// The CPU argsort's routines (sort_runtime.h): each column's keys mapped to unsigned integers whose
// order is the sort's (NaN largest, -0 = +0; descending: complemented), then a stable merge sort
// of (key, position) pairs.

#include "codegen/src/sort_runtime.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kiln/error.h"

namespace kiln::codegen {

namespace {

// The unsigned key whose ascending order is the sort's order of the value with bits `u` (a float's,
// with its sign in the top bit): NaN above every number, -0 as +0.
template <class U> U float_key(U u) {
  constexpr U sign = U(1) << (8 * sizeof(U) - 1);
  constexpr U exponent = sizeof(U) == 4 ? U(0x7f800000u) : U(0x7ff0000000000000ull);
  if ((u & ~sign) > exponent) return ~U(0); // NaN (a non-zero mantissa under a full exponent)
  if ((u & ~sign) == 0) u = 0;             // -0 as +0
  return (u & sign) ? U(~u) : U(u | sign);
}

// Stable ascending sort of the n keys `key` (with their positions, idx[i] = i first); ktmp and itmp
// hold n more of each. Runs of kRun are insertion-sorted, then merged pairwise, taking the left run's
// key on ties.
template <class U> void merge_sort(U* key, int64_t* idx, int64_t n, U* ktmp, int64_t* itmp) {
  constexpr int64_t kRun = 16;
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  for (int64_t lo = 0; lo < n; lo += kRun) {
    const int64_t hi = std::min(n, lo + kRun);
    for (int64_t i = lo + 1; i < hi; ++i) {
      const U k = key[i];
      const int64_t v = idx[i];
      int64_t j = i;
      for (; j > lo && k < key[j - 1]; --j) key[j] = key[j - 1], idx[j] = idx[j - 1];
      key[j] = k;
      idx[j] = v;
    }
  }
  U *ka = key, *kb = ktmp;
  int64_t *ia = idx, *ib = itmp;
  for (int64_t w = kRun; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      const int64_t mid = std::min(n, lo + w), hi = std::min(n, lo + 2 * w);
      int64_t i = lo, j = mid, o = lo;
      while (i < mid && j < hi) {
        const bool right = ka[j] < ka[i]; // strictly: equal keys keep the left (earlier) one first
        kb[o] = right ? ka[j] : ka[i];
        ib[o++] = right ? ia[j++] : ia[i++];
      }
      for (; i < mid; ++i, ++o) kb[o] = ka[i], ib[o] = ia[i];
      for (; j < hi; ++j, ++o) kb[o] = ka[j], ib[o] = ia[j];
    }
    std::swap(ka, kb);
    std::swap(ia, ib);
  }
  if (ia != idx) std::memcpy(idx, ia, static_cast<size_t>(n) * sizeof(int64_t));
}

// The keys of type T (in place, as U of the same size) made sortable, then sorted.
template <class T, class U>
void argsort(void* keys, int64_t* idx, int64_t n, int64_t descending, void* keys_tmp, int64_t* idx_tmp) {
  static_assert(sizeof(T) == sizeof(U));
  auto* k = static_cast<U*>(keys);
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, k + i, sizeof v);
    U u;
    std::memcpy(&u, &v, sizeof u);
    if constexpr (std::is_floating_point_v<T>) u = float_key(u);
    else if constexpr (std::is_same_v<T, bool>) u = v ? 1 : 0;
    else u ^= U(1) << (8 * sizeof(U) - 1); // two's complement: the sign bit flipped orders as unsigned
    k[i] = descending ? U(~u) : u;
  }
  merge_sort(k, idx, n, static_cast<U*>(keys_tmp), idx_tmp);
}

} // namespace

} // namespace kiln::codegen

// The routines kernels call (their names: argsort_routine()).
extern "C" {
void kiln_argsort_f32(void* k, int64_t* i, int64_t n, int64_t d, void* kt, int64_t* it) {
  kiln::codegen::argsort<float, uint32_t>(k, i, n, d, kt, it);
}
void kiln_argsort_f64(void* k, int64_t* i, int64_t n, int64_t d, void* kt, int64_t* it) {
  kiln::codegen::argsort<double, uint64_t>(k, i, n, d, kt, it);
}
void kiln_argsort_i32(void* k, int64_t* i, int64_t n, int64_t d, void* kt, int64_t* it) {
  kiln::codegen::argsort<int32_t, uint32_t>(k, i, n, d, kt, it);
}
void kiln_argsort_i64(void* k, int64_t* i, int64_t n, int64_t d, void* kt, int64_t* it) {
  kiln::codegen::argsort<int64_t, uint64_t>(k, i, n, d, kt, it);
}
void kiln_argsort_bool(void* k, int64_t* i, int64_t n, int64_t d, void* kt, int64_t* it) {
  kiln::codegen::argsort<bool, uint8_t>(k, i, n, d, kt, it);
}
}

namespace kiln::codegen {

const char* argsort_routine(DType key) {
  switch (key) {
  case DType::Float32: return "kiln_argsort_f32";
  case DType::Float64: return "kiln_argsort_f64";
  case DType::Int32: return "kiln_argsort_i32";
  case DType::Int64: return "kiln_argsort_i64";
  case DType::Bool: return "kiln_argsort_bool";
  }
  KILN_ASSERT(false, "argsort of an unknown dtype");
  return nullptr;
}

std::vector<std::pair<const char*, void*>> sort_routines() {
  return {{"kiln_argsort_f32", reinterpret_cast<void*>(&kiln_argsort_f32)},
          {"kiln_argsort_f64", reinterpret_cast<void*>(&kiln_argsort_f64)},
          {"kiln_argsort_i32", reinterpret_cast<void*>(&kiln_argsort_i32)},
          {"kiln_argsort_i64", reinterpret_cast<void*>(&kiln_argsort_i64)},
          {"kiln_argsort_bool", reinterpret_cast<void*>(&kiln_argsort_bool)}};
}

} // namespace kiln::codegen

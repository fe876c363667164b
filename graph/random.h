#pragma once
/// \file random.h
/// The counter-based random numbers of rand/randn. Every backend computes
/// exactly these functions of (seed, element counter), so results do not depend
/// on threads, chunking or device; this header is the reference implementation.

#include <cmath>
#include <cstdint>

namespace kiln::graph {

/// splitmix64's finalizer of (seed, counter): 64 well-mixed bits.
inline uint64_t random_bits(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ULL + counter * 0xd1b54a32d192ed03ULL + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Uniform in [0, 1) with 24 random bits (f32) or 53 (f64).
inline double random_uniform(uint64_t seed, uint64_t counter, bool f64) {
  const uint64_t b = random_bits(seed, counter);
  return f64 ? static_cast<double>(b >> 11) * 0x1.0p-53 : static_cast<double>(b >> 40) * 0x1.0p-24;
}

/// Standard normal by Box-Muller from the uniforms at counters 2c and 2c+1:
/// sqrt(-2 log(1 - u1)) * cos(2 pi u2). (Backends evaluate log, sqrt and cos in
/// the element dtype, so values agree to a few ulp, not bitwise, across backends.)
inline double random_normal(uint64_t seed, uint64_t counter, bool f64) {
  const double u1 = random_uniform(seed, 2 * counter, f64);
  const double u2 = random_uniform(seed, 2 * counter + 1, f64);
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(6.283185307179586 * u2);
}

} // namespace kiln::graph

#pragma once
/// \file random.h
/// The counter-based random numbers of rand/randn. Every backend computes
/// exactly these functions of (seed, element counter), so results do not depend
/// on threads, chunking or device; this header is the reference implementation
/// and the one place of the generator's constants (the code generators build the
/// same arithmetic from them in codegen/src/math_body.h).

#include <cmath>
#include <cstdint>

namespace kiln::graph {

/// The constants of the generator.
namespace rng {
/// splitmix64's increment (the golden ratio in 64 bits): the seed's multiplier.
inline constexpr uint64_t kSeedMul = 0x9e3779b97f4a7c15ULL;
/// The counter's multiplier and the additive constant of the input to the finalizer.
inline constexpr uint64_t kCounterMul = 0xd1b54a32d192ed03ULL;
inline constexpr uint64_t kOffset = 0x632be59bd9b4e019ULL;
/// splitmix64's finalizer: z = (z ^ z >> kShift1) * kMul1; z = (z ^ z >> kShift2) * kMul2; z ^ z >> kShift3.
inline constexpr uint64_t kMul1 = 0xbf58476d1ce4e5b9ULL;
inline constexpr uint64_t kMul2 = 0x94d049bb133111ebULL;
inline constexpr int kShift1 = 30, kShift2 = 27, kShift3 = 31;
/// Random bits per uniform: the top 24 (f32) or 53 (f64) bits of the 64, times 2^-bits.
inline constexpr int kUniformBitsF32 = 24, kUniformBitsF64 = 53;
/// 2 pi, Box-Muller's angle factor (rounded to the element type by the code generators).
inline constexpr double kTwoPi = 6.283185307179586;
} // namespace rng

/// splitmix64's finalizer: 64 well-mixed bits of z.
inline uint64_t splitmix64_finalize(uint64_t z) {
  z = (z ^ (z >> rng::kShift1)) * rng::kMul1;
  z = (z ^ (z >> rng::kShift2)) * rng::kMul2;
  return z ^ (z >> rng::kShift3);
}

/// splitmix64's finalizer of (seed, counter): 64 well-mixed bits.
inline uint64_t random_bits(uint64_t seed, uint64_t counter) {
  return splitmix64_finalize(seed * rng::kSeedMul + counter * rng::kCounterMul + rng::kOffset);
}

/// Uniform in [0, 1) with 24 random bits (f32) or 53 (f64).
inline double random_uniform(uint64_t seed, uint64_t counter, bool f64) {
  const int bits = f64 ? rng::kUniformBitsF64 : rng::kUniformBitsF32;
  return std::ldexp(static_cast<double>(random_bits(seed, counter) >> (64 - bits)), -bits);
}

/// Standard normal by Box-Muller from the uniforms at counters 2c and 2c+1:
/// sqrt(-2 log(1 - u1)) * cos(2 pi u2). (Backends evaluate log, sqrt and cos in
/// the element dtype, so values agree to a few ulp, not bitwise, across backends.)
inline double random_normal(uint64_t seed, uint64_t counter, bool f64) {
  const double u1 = random_uniform(seed, 2 * counter, f64);
  const double u2 = random_uniform(seed, 2 * counter + 1, f64);
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(rng::kTwoPi * u2);
}

} // namespace kiln::graph

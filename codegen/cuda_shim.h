#pragma once
/// \file cuda_shim.h
/// Lets the CUDA C++ that codegen/cuda_emitter.h emits compile as plain C++ with the
/// host compiler and run on the CPU (tests only; no GPU involved). Include it before
/// the generated source; compile with -ffp-contract=off (GCC's default for GNU C++
/// contracts a*b+c into FMAs, which the GPU build forbids with --fmad=false).
///
/// Emitted kernels are barrier-free (no __syncthreads, no shared memory), so a launch
/// is a plain loop over blocks and threads: kiln_shim::launch(grid, block, body) sets
/// blockIdx/threadIdx (thread_local, so separate host threads may launch at once) and
/// calls body once per CUDA thread.

#include <cstdint>
#include <cstring>
#include <math.h>

#define __global__
#define __device__
#define __forceinline__ inline

/// CUDA's dim3, reduced to what the emitted kernels read.
struct kiln_shim_dim3 {
  unsigned x = 1, y = 1, z = 1;
};

inline thread_local kiln_shim_dim3 threadIdx, blockIdx, blockDim, gridDim;

/// CUDA's bit casts.
inline int __float_as_int(float x) {
  int i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline float __int_as_float(int i) {
  float x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}
inline long long __double_as_longlong(double x) {
  long long i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline double __longlong_as_double(long long i) {
  double x;
  std::memcpy(&x, &i, sizeof x);
  return x;
}

namespace kiln_shim {

/// Runs body() once per CUDA thread of a 1-d launch of `grid` blocks of `block` threads.
template <class Body> void launch(unsigned grid, unsigned block, const Body& body) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx.x = b;
    for (unsigned t = 0; t < block; ++t) {
      threadIdx.x = t;
      body();
    }
  }
}

} // namespace kiln_shim

#pragma once
/// \file cuda_shim.h
/// Lets the CUDA C++ that codegen/cuda_emitter.h emits compile as plain C++ with the
/// host compiler and run on the CPU (tests only; no GPU involved). Include it before
/// the generated source; compile with -ffp-contract=off (GCC's default for GNU C++
/// contracts a*b+c into FMAs, which the GPU build forbids with --fmad=false).
///
/// Two launchers, chosen by the emitted entry (emit_cuda_shim_entry):
/// - kiln_shim::launch(grid, block, body): barrier-free kernels. A plain loop over blocks
///   and threads sets blockIdx/threadIdx and calls body once per CUDA thread.
/// - kiln_shim::launch_sync(grid, block, body): kernels that use __shared__ memory and
///   __syncthreads (the tiled GEMM) or warp shuffles (row kernels; emulated with two
///   block barriers each). The threads of one block run as fibers
///   (makecontext/swapcontext, one small stack each, on the launching host thread): each
///   round resumes every live fiber in threadIdx order until it reaches the next
///   __syncthreads or returns, so no fiber passes a barrier before all have reached it.
///   A round in which some threads returned while others wait at a barrier is a
///   divergent barrier (undefined on a GPU): it aborts with a message.
/// blockIdx/threadIdx/blockDim/gridDim are thread_local (the scheduler sets threadIdx
/// before resuming a fiber); __shared__ variables are `static thread_local`: shared by
/// the fibers of a block (one host thread), separate between host threads that launch
/// at once, reused (uninitialized, as on a GPU) by the next block.

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>

#define __global__
#define __device__
#define __forceinline__ inline

/// CUDA's atomicCAS on 64 bits (the index checks' error buffer): returns the old value.
inline unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare, unsigned long long val) {
  __atomic_compare_exchange_n(address, &compare, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;
}
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

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

/// A kernel's own check failed (e.g. launched with the wrong block size).
[[noreturn]] inline void __trap() {
  std::fprintf(stderr, "kiln cuda shim: __trap() in a kernel\n");
  std::abort();
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

/// The fibers of the block being run on this host thread (launch_sync).
struct Fibers {
  ucontext_t scheduler;        ///< where a fiber returns to at a barrier or at its end
  ucontext_t* ctx = nullptr;   ///< one context per CUDA thread
  unsigned char* done = nullptr; ///< 1 once a thread's body returned
  void (*run)(void*) = nullptr;  ///< calls the body
  void* body = nullptr;
};

inline thread_local Fibers* current_fibers = nullptr;

/// A fiber's entry: runs the body for threadIdx.x (set by the scheduler), then returns
/// to the scheduler for good.
inline void fiber_main() {
  Fibers* f = current_fibers;
  const unsigned me = threadIdx.x;
  f->run(f->body);
  f->done[me] = 1;
  swapcontext(&f->ctx[me], &f->scheduler); // never resumed
}

} // namespace kiln_shim

/// The block barrier: back to the scheduler, which resumes this fiber once every
/// thread of the block got here.
inline void __syncthreads() {
  kiln_shim::Fibers* f = kiln_shim::current_fibers;
  if (!f) {
    std::fprintf(stderr, "kiln cuda shim: __syncthreads outside launch_sync\n");
    std::abort();
  }
  swapcontext(&f->ctx[threadIdx.x], &f->scheduler);
}

namespace kiln_shim {
/// The values of one warp shuffle, by threadIdx.x (a block has at most 1024 threads).
inline thread_local unsigned char shuffle_slots[1024 * 8];

/// Every thread of the block publishes v; each returns the value thread `from` published.
template <class T> T exchange(T v, unsigned from) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  std::memcpy(shuffle_slots + 8 * threadIdx.x, &v, sizeof v);
  __syncthreads();
  T r;
  std::memcpy(&r, shuffle_slots + 8 * from, sizeof r);
  __syncthreads();
  return r;
}
} // namespace kiln_shim

/// CUDA's warp shuffles, for kernels run by launch_sync whose every thread of the block
/// executes the same shuffles (as the emitted row kernels do): each is a write, a block
/// barrier, a read of the source lane's value (within segments of `width` lanes) and a
/// barrier. Values travel as bits.
template <class T> T __shfl_sync(unsigned, T v, int src, int width = 32) {
  const unsigned me = threadIdx.x;
  return kiln_shim::exchange(v, me - me % static_cast<unsigned>(width) + static_cast<unsigned>(src));
}
template <class T> T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  const unsigned me = threadIdx.x, lane = me % static_cast<unsigned>(width);
  return kiln_shim::exchange(v, lane + delta < static_cast<unsigned>(width) ? me + delta : me);
}

template <class T> T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  const unsigned me = threadIdx.x, lane = me % static_cast<unsigned>(width);
  const unsigned other = lane ^ static_cast<unsigned>(mask);
  return kiln_shim::exchange(v, other < static_cast<unsigned>(width) ? me - lane + other : me);
}

namespace kiln_shim {

/// Runs body() on every CUDA thread of a 1-d launch, the threads of a block as fibers
/// that meet at each __syncthreads (see the file comment).
template <class Body> void launch_sync(unsigned grid, unsigned block, const Body& body) {
  constexpr size_t kStack = 64 * 1024, kGuard = 4096; // per fiber; a guard page below each stack
  gridDim.x = grid;
  blockDim.x = block;
  if (grid == 0 || block == 0) return;
  const size_t bytes = static_cast<size_t>(block) * (kStack + kGuard);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "kiln cuda shim: no memory for %u fiber stacks\n", block);
    std::abort();
  }
  auto* base = static_cast<unsigned char*>(mem);
  for (unsigned t = 0; t < block; ++t) mprotect(base + t * (kStack + kGuard), kGuard, PROT_NONE);
  Fibers f;
  f.ctx = new ucontext_t[block];
  f.done = new unsigned char[block];
  f.run = [](void* b) { (*static_cast<const Body*>(b))(); };
  f.body = const_cast<void*>(static_cast<const void*>(&body));
  Fibers* const saved = current_fibers;
  current_fibers = &f;
  for (unsigned b = 0; b < grid; ++b) {
    blockIdx.x = b;
    for (unsigned t = 0; t < block; ++t) {
      f.done[t] = 0;
      getcontext(&f.ctx[t]);
      f.ctx[t].uc_stack.ss_sp = base + t * (kStack + kGuard) + kGuard;
      f.ctx[t].uc_stack.ss_size = kStack;
      f.ctx[t].uc_link = nullptr;
      makecontext(&f.ctx[t], fiber_main, 0);
    }
    for (unsigned live = block; live > 0;) {
      unsigned ended = 0;
      for (unsigned t = 0; t < block; ++t) {
        if (f.done[t]) continue;
        threadIdx.x = t;
        swapcontext(&f.scheduler, &f.ctx[t]);
        ended += f.done[t];
      }
      if (ended != 0 && ended != live) {
        std::fprintf(stderr, "kiln cuda shim: divergent __syncthreads in block %u (%u of %u threads returned)\n", b,
                     ended, live);
        std::abort();
      }
      live -= ended;
    }
  }
  current_fibers = saved;
  delete[] f.ctx;
  delete[] f.done;
  munmap(mem, bytes);
}

} // namespace kiln_shim

#pragma once
/// \file nccl.h
/// Internal: NCCL for kiln::dist's collectives on CUDA tensors, below the tensors (on device
/// addresses and element counts).
///
/// NVIDIA's libnccl.so.2 is loaded with dlopen on first use (KILN_NCCL_LIBRARY names another
/// path; never linked, no NCCL header: the few entry points are declared in nccl.cpp with
/// their documented C signatures). One communicator per process, made by the first NCCL
/// collective on the device of its tensors: rank 0's ncclUniqueId (128 bytes) travels to the
/// other ranks over the MPI process group (runtime/comm.h), then every rank calls
/// ncclCommInitRank. Collectives are queued on the kiln GPU runtime's stream of that device
/// (runtime::Gpu::stream()), so they run after the kernels that computed their inputs and
/// before the kernels that read their results, without the host waiting.
///
/// Whether NCCL is used is decided per call by kiln::dist (every rank must be able to: see
/// usable()); this file only runs what it is asked.

#include <cstddef>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/devices.h"
#include "kiln/dtype.h"

namespace kiln::runtime::nccl {

/// "" when NCCL can run collectives on `device` in this process, else why not (the library
/// cannot be loaded or lacks an entry point, `device` is not a CUDA device, the communicator
/// lives on another device, or an earlier NCCL error disabled it). Loads the library on the
/// first call; at KILN_DEBUG >= 1 says once on stderr which backend CUDA tensors get.
std::string unusable(Device device);

/// "nccl 2.21.5 (libnccl.so.2)" once loaded, else "".
std::string describe();

/// A collective of a group.
enum class Kind { AllReduce, Broadcast, AllGather, ReduceScatter };
/// A reduction (the subset of ncclRedOp_t kiln uses).
enum class Reduction { Sum, Max };

/// One NCCL collective on device addresses: `count` elements of `dtype` as NCCL counts them
/// (all_reduce, broadcast: the buffer; all_gather: what each rank sends; reduce_scatter: what
/// each rank receives). `send` may equal `recv` (in place).
struct Call {
  Kind kind;                            ///< which collective
  const void* send;                     ///< device address read
  void* recv;                           ///< device address written
  size_t count;                         ///< elements (see above)
  DType dtype;                          ///< element type (bool: broadcast and all_gather only)
  Reduction reduction = Reduction::Sum; ///< all_reduce, reduce_scatter
  int root = 0;                         ///< broadcast
};

/// Queues `calls` as one NCCL group (ncclGroupStart/End) on `device`'s stream, making the
/// communicator first when there is none. Every rank must make the same calls. An NCCL
/// failure (returned, or reported by ncclCommGetAsyncError for this or an earlier call)
/// throws kiln::Error of `op` at `loc` naming the NCCL function, this rank and NCCL's message;
/// the communicator is then aborted and unusable() says why from then on.
void run(Device device, const std::vector<Call>& calls, const char* op, double timeout_s,
         const std::source_location& loc);

} // namespace kiln::runtime::nccl

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
///
/// A watchdog follows every queued group until the stream passed it (markers before and after
/// it, runtime::Gpu::mark()): host waits on the communicator's device poll it
/// (runtime::Gpu::set_watch), and so does the next run(). When NCCL reports an asynchronous
/// error, or a group has not completed `timeout_s` seconds after the stream reached it, it
/// aborts the communicator (the stream then drains), asks every peer over MPI where it is (with
/// the same timeout), and throws kiln::Error of the group's collective at its line naming it,
/// this rank, the timeout and the peers that did not answer (or what each answered); NCCL is
/// then unusable in this process (see docs/distributed.md).

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
/// communicator first when there is none, and has the watchdog follow it for `timeout_s`
/// seconds (see above). Every rank must make the same calls. An NCCL failure (returned, or
/// reported by ncclCommGetAsyncError) throws kiln::Error of `op` at `loc` naming the NCCL
/// function, this rank and NCCL's message (an earlier group's failure or timeout: the
/// watchdog's error, of that group's collective and line); the communicator is then aborted
/// and unusable() says why from then on.
void run(Device device, const std::vector<Call>& calls, const char* op, double timeout_s,
         const std::source_location& loc);

} // namespace kiln::runtime::nccl

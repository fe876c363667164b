#pragma once
/// \file comm.h
/// Internal: the process group behind kiln::dist (kiln/dist.h), at the level of bytes.
///
/// The group is read from the launcher's environment on first use. Under Open MPI's mpirun
/// (OMPI_COMM_WORLD_RANK/SIZE) it is MPI_COMM_WORLD of Open MPI's libmpi.so.40, loaded with
/// dlopen like the CUDA driver (never linked), so kiln builds, installs and runs where MPI is
/// absent. Without a launcher it is one process (rank 0 of 1), where every collective is a copy.
///
/// Collectives are built by their caller from exchange(): non-blocking sends and receives
/// polled against a deadline, so a rank that hangs or leaves makes the others throw a
/// kiln::Error naming it, never a silent hang. One thread is in MPI at a time (exchanges from
/// several threads take turns).

#include <cstddef>
#include <source_location>
#include <string>
#include <vector>

namespace kiln::runtime::comm {

/// This process's place in the group.
struct World {
  int rank = 0;        ///< 0 .. size-1
  int size = 1;        ///< number of processes
  std::string backend; ///< "mpi (libmpi.so.40)" or "single process"
};

/// The group, initialized on first use from the environment. Throws kiln::Error of `op` at `loc`
/// when the environment asks for several processes that cannot be reached (no libmpi.so.40,
/// WORLD_SIZE > 1 without mpirun, RANK/WORLD_SIZE disagreeing with MPI's).
const World& world(const char* op, const std::source_location& loc);

/// Bytes to send to, or receive into from, one peer rank.
struct Transfer {
  int peer;     ///< the other rank
  void* data;   ///< the bytes (read for a send, written for a receive)
  size_t bytes; ///< how many
};

/// Posts every send and receive (with message tag `tag`), then polls them until all completed.
/// After `timeout_s` seconds it throws kiln::Error of `op` at `loc` naming the ranks whose
/// messages have not arrived (or were not taken), and the group is broken: every later
/// exchange throws, and the process leaves MPI without MPI_Finalize (which would wait for
/// the missing ranks), so that mpirun ends the job instead of hanging.
void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, int tag, const char* op,
              double timeout_s, const std::source_location& loc);

/// exchange() that returns what failed instead of throwing: "" when every transfer completed,
/// else "no data from rank 1 within 2 s", an MPI error, or "the process group failed earlier
/// (...)". A failure breaks the group as in exchange(). For a caller that reports a failure of
/// its own and asks the peers about it (the NCCL watchdog, runtime/nccl.h).
std::string try_exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, int tag,
                         const char* op, double timeout_s, const std::source_location& loc);

/// Ends this process with status `code` without waiting for the other ranks: under MPI,
/// MPI_Abort (mpirun then ends every rank); otherwise std::exit(code).
[[noreturn]] void abort_job(int code);

} // namespace kiln::runtime::comm

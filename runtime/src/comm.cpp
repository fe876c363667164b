// The process group behind kiln::dist (see runtime/comm.h).
//
// Open MPI is reached through dlopen of libmpi.so.40, its soname since Open MPI 3.0 (Debian 12
// ships 4.1). The few entry points are declared here with their C signatures from the MPI
// standard; Open MPI's handles (MPI_Comm, MPI_Datatype, MPI_Request, MPI_Errhandler) are
// pointers, and its predefined handles (MPI_COMM_WORLD, MPI_BYTE, MPI_ERRORS_RETURN) are the
// addresses of the exported objects ompi_mpi_comm_world, ompi_mpi_byte, ompi_mpi_errors_return,
// so no MPI header is needed to build kiln. Only bytes travel: the reductions are kiln's own
// (in rank order, see frontend/src/dist.cpp), so no MPI_Op or typed datatype is used.
#include "runtime/comm.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "kiln/error.h"
#include "runtime/env.h"
#include "runtime/poll.h"

namespace kiln::runtime::comm {

namespace {

using Handle = void*; // MPI_Comm, MPI_Datatype, MPI_Request, MPI_Errhandler: pointers in Open MPI

constexpr const char* kLibrary = "libmpi.so.40"; // KILN_MPI_LIBRARY overrides it (a full path)
constexpr int kThreadSerialized = 2; // MPI_THREAD_SERIALIZED in Open MPI's enum
constexpr size_t kMaxMessage = size_t{1} << 30; // MPI counts are ints: larger transfers go in pieces

/// The MPI entry points kiln calls, and Open MPI's predefined handles.
struct Mpi {
  int (*Initialized)(int*) = nullptr;
  int (*Init_thread)(int*, char***, int, int*) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Abort)(Handle, int) = nullptr;
  int (*Comm_rank)(Handle, int*) = nullptr;
  int (*Comm_size)(Handle, int*) = nullptr;
  int (*Comm_set_errhandler)(Handle, Handle) = nullptr;
  int (*Isend)(const void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*Irecv)(void*, int, Handle, int, int, Handle, Handle*) = nullptr;
  int (*Test)(Handle*, int*, void*) = nullptr; // status: MPI_STATUS_IGNORE (null)
  int (*Cancel)(Handle*) = nullptr;
  int (*Request_free)(Handle*) = nullptr;
  int (*Error_string)(int, char*, int*) = nullptr;
  Handle comm_world = nullptr;
  Handle byte = nullptr;
  Handle errors_return = nullptr;
};

template <class F> void bind(void* h, F& f, const char* name, std::string& missing) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) missing += std::string(" ") + name;
}

// Every symbol is looked up, so that the message lists all that are missing.
std::string bind_all(void* h, Mpi& m) {
  std::string missing;
  bind(h, m.Initialized, "MPI_Initialized", missing);
  bind(h, m.Init_thread, "MPI_Init_thread", missing);
  bind(h, m.Finalize, "MPI_Finalize", missing);
  bind(h, m.Abort, "MPI_Abort", missing);
  bind(h, m.Comm_rank, "MPI_Comm_rank", missing);
  bind(h, m.Comm_size, "MPI_Comm_size", missing);
  bind(h, m.Comm_set_errhandler, "MPI_Comm_set_errhandler", missing);
  bind(h, m.Isend, "MPI_Isend", missing);
  bind(h, m.Irecv, "MPI_Irecv", missing);
  bind(h, m.Test, "MPI_Test", missing);
  bind(h, m.Cancel, "MPI_Cancel", missing);
  bind(h, m.Request_free, "MPI_Request_free", missing);
  bind(h, m.Error_string, "MPI_Error_string", missing);
  bind(h, m.comm_world, "ompi_mpi_comm_world", missing);
  bind(h, m.byte, "ompi_mpi_byte", missing);
  bind(h, m.errors_return, "ompi_mpi_errors_return", missing);
  return missing;
}

/// The group's state: set once by init(); `broken` after a failed exchange.
struct State {
  std::once_flag once;
  World world;
  std::string failure; // why the group cannot be had ("" when it can)
  Mpi mpi;
  bool uses_mpi = false;
  bool broken = false;
  std::string broken_by; // the failure that broke it
  std::mutex mpi_mu;     // MPI_THREAD_SERIALIZED: one exchange at a time (the NCCL watchdog asks from any thread)
};

State& state() {
  static State s;
  return s;
}

/// A non-negative integer environment variable, or nullopt when unset; when set to anything else
/// (not an integer, negative) `bad` gets its name and value, and the result is nullopt.
std::optional<long long> env_rank(const char* name, std::string& bad) {
  const EnvInteger e = env_integer(name);
  if (e.malformed() || (e.value && *e.value < 0)) {
    bad += std::string(" ") + name + "='" + e.text + "'";
    return std::nullopt;
  }
  return e.value;
}

std::string mpi_error(const Mpi& m, int code) {
  char text[512] = {};
  int len = 0;
  if (m.Error_string && m.Error_string(code, text, &len) == 0) return std::string(text, static_cast<size_t>(len));
  return "MPI error " + std::to_string(code);
}

// Without MPI_Finalize a rank leaves a job whose other ranks may be gone; after a failure
// that is what we want (mpirun then ends the job). Runs at exit.
void finalize_at_exit() {
  State& s = state();
  if (s.uses_mpi && !s.broken) s.mpi.Finalize();
}

// Loads libmpi.so.40 and joins MPI_COMM_WORLD; returns why that failed ("" on success).
std::string init_mpi(State& s) {
  const char* env = std::getenv("KILN_MPI_LIBRARY");
  const std::string library = env && *env ? env : kLibrary;
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL); // global: Open MPI's plugins resolve against it
  if (!h)
    return "started by mpirun, but Open MPI's " + library + " cannot be loaded (" + dlerror() +
           "); install Open MPI (Debian: libopenmpi3 / openmpi-bin) or set KILN_MPI_LIBRARY";
  if (std::string missing = bind_all(h, s.mpi); !missing.empty())
    return library + " lacks" + missing + ": kiln needs Open MPI's libmpi.so.40 (Open MPI 3.0 or later)";
  int ready = 0, provided = 0;
  s.mpi.Initialized(&ready);
  if (!ready) {
    if (int r = s.mpi.Init_thread(nullptr, nullptr, kThreadSerialized, &provided); r != 0)
      return "MPI_Init_thread failed: " + mpi_error(s.mpi, r);
    std::atexit(finalize_at_exit);
  }
  s.uses_mpi = true;
  s.mpi.Comm_set_errhandler(s.mpi.comm_world, s.mpi.errors_return); // errors come back as codes
  s.mpi.Comm_rank(s.mpi.comm_world, &s.world.rank);
  s.mpi.Comm_size(s.mpi.comm_world, &s.world.size);
  s.world.backend = "mpi (" + library + ")";
  return "";
}

// Reads the launcher's environment; returns why the group cannot be had ("" when it can).
std::string init(State& s) {
  std::string bad;
  const auto ompi_size = env_rank("OMPI_COMM_WORLD_SIZE", bad);
  const auto rank = env_rank("RANK", bad), size = env_rank("WORLD_SIZE", bad);
  if (!bad.empty()) return "the environment gives ranks that are not non-negative integers:" + bad;
  s.world.backend = "single process";
  if (ompi_size && *ompi_size > 1) {
    if (std::string why = init_mpi(s); !why.empty()) return why;
  } else if (size && *size > 1) {
    return "WORLD_SIZE=" + std::to_string(*size) +
           " but this process was not started by Open MPI's mpirun, kiln's launcher: run `mpirun -np " +
           std::to_string(*size) + " <program>`";
  }
  if ((rank && *rank != s.world.rank) || (size && *size != s.world.size))
    return "RANK/WORLD_SIZE (" + std::to_string(rank.value_or(0)) + "/" + std::to_string(size.value_or(1)) +
           ") disagree with the launcher's rank " + std::to_string(s.world.rank) + " of " +
           std::to_string(s.world.size);
  return "";
}

/// One posted piece of a transfer.
struct Posted {
  Handle request = nullptr;
  int peer;
  bool receive;
};

std::string ranks_str(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// Cancels what is still posted; the group is unusable afterwards.
void abandon(State& s, std::vector<Posted>& posted) {
  for (Posted& p : posted) {
    if (!p.request) continue;
    if (p.receive) s.mpi.Cancel(&p.request);
    s.mpi.Request_free(&p.request);
  }
}

// How a failed exchange broke the group: `why` as try_exchange() returns it, and the message
// exchange() throws.
struct Failure {
  std::string why;
  std::string message;
};

// Breaks the group after a failed exchange: cancels what is still posted and remembers
// `broken_by` for later calls.
Failure break_group(State& s, std::vector<Posted>& posted, std::string broken_by, Failure f) {
  s.broken = true;
  s.broken_by = std::move(broken_by);
  abandon(s, posted);
  return f;
}

// The ranks whose transfers are still posted after the timeout, and what that means.
std::string who_is_missing(const std::vector<Posted>& posted) {
  std::vector<int> silent, stuck;
  for (const Posted& p : posted)
    if (p.request) (p.receive ? silent : stuck).push_back(p.peer);
  return !silent.empty() ? "no data from " + ranks_str(silent) : ranks_str(stuck) + " did not take this rank's data";
}

// Posts each transfer in pieces of at most kMaxMessage bytes; a failure breaks the group.
std::optional<Failure> post(State& s, const std::vector<Transfer>& ts, bool receive, int tag, std::vector<Posted>& out) {
  for (const Transfer& t : ts)
    for (size_t at = 0; at < t.bytes || (at == 0 && t.bytes == 0); at += kMaxMessage) {
      const int n = static_cast<int>(std::min(kMaxMessage, t.bytes - at));
      Posted p{nullptr, t.peer, receive};
      char* data = static_cast<char*>(t.data) + at;
      const int r = receive ? s.mpi.Irecv(data, n, s.mpi.byte, t.peer, tag, s.mpi.comm_world, &p.request)
                            : s.mpi.Isend(data, n, s.mpi.byte, t.peer, tag, s.mpi.comm_world, &p.request);
      if (r != 0) {
        const std::string why = std::string(receive ? "MPI_Irecv from" : "MPI_Isend to") + " rank " +
                                std::to_string(t.peer) + " failed: " + mpi_error(s.mpi, r);
        return break_group(s, out, why, {why, why});
      }
      out.push_back(p);
      if (t.bytes == 0) break;
    }
  return std::nullopt;
}

// Between polls: MPI moves a large message in fragments only while both sides poll, so for
// the first 50 ms the loop only yields (taking a quick answer at once, and the core where
// ranks share one); a longer wait (a slow or missing rank) sleeps up to 1 ms a poll.
constexpr std::chrono::milliseconds kYieldFor{50};

// Posts every transfer and polls them until all completed (nullopt), or until a failure or
// the timeout broke the group.
std::optional<Failure> attempt(State& s, const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                               int tag, const char* op, double timeout_s) {
  std::vector<Posted> posted;
  if (auto f = post(s, recvs, true, tag, posted)) return f;
  if (auto f = post(s, sends, false, tag, posted)) return f;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
  size_t pending = posted.size();
  while (pending > 0) {
    for (Posted& p : posted) {
      if (!p.request) continue;
      int done = 0;
      if (int r = s.mpi.Test(&p.request, &done, nullptr); r != 0) {
        const std::string why = "MPI_Test with rank " + std::to_string(p.peer) + ": " + mpi_error(s.mpi, r);
        return break_group(s, posted, why, {why, why});
      }
      if (done) p.request = nullptr, --pending;
    }
    if (pending == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      const std::string who = who_is_missing(posted);
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeout_s);
      return break_group(s, posted, who + " in " + op,
                         {who + " within " + secs + " s",
                          "rank " + std::to_string(s.world.rank) + " of " + std::to_string(s.world.size) + ": " + who +
                              " within the timeout of " + secs +
                              " s (KILN_DIST_TIMEOUT): a rank died, hangs, or left this collective"});
    }
    back_off(start, kYieldFor);
  }
  return std::nullopt;
}

} // namespace

const World& world(const char* op, const std::source_location& loc) {
  State& s = state();
  std::call_once(s.once, [&] { s.failure = init(s); });
  if (!s.failure.empty()) throw Error(op, "cannot join the process group: " + s.failure, loc);
  return s.world;
}

namespace {

// exchange() and try_exchange(): nullopt when every transfer completed, else what failed.
std::optional<Failure> exchange_or_failure(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs,
                                           int tag, const char* op, double timeout_s,
                                           const std::source_location& loc) {
  State& s = state();
  world(op, loc);
  if (!s.uses_mpi) return std::nullopt; // one process: nothing to exchange
  std::lock_guard one_thread_in_mpi(s.mpi_mu);
  if (s.broken) {
    const std::string why = "the process group failed earlier (" + s.broken_by + ")";
    return Failure{why, why + " and cannot be used again"};
  }
  return attempt(s, sends, recvs, tag, op, timeout_s);
}

} // namespace

void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, int tag, const char* op,
              double timeout_s, const std::source_location& loc) {
  if (auto f = exchange_or_failure(sends, recvs, tag, op, timeout_s, loc)) throw Error(op, f->message, loc);
}

std::string try_exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, int tag,
                         const char* op, double timeout_s, const std::source_location& loc) {
  auto f = exchange_or_failure(sends, recvs, tag, op, timeout_s, loc);
  return f ? f->why : "";
}

void abort_job(int code) {
  State& s = state();
  if (s.uses_mpi) s.mpi.Abort(s.mpi.comm_world, code);
  std::exit(code);
}

} // namespace kiln::runtime::comm

// NCCL for kiln::dist's collectives on CUDA tensors (see runtime/nccl.h).
//
// libnccl.so.2 is reached through dlopen; the entry points are declared here with the C
// signatures of NCCL's documentation (nccl.h of NCCL 2.x): ncclResult_t, ncclDataType_t and
// ncclRedOp_t are C enums (ints), ncclComm_t is a pointer, cudaStream_t is the driver's CUstream,
// and ncclUniqueId is a struct of 128 bytes passed by value to ncclCommInitRank.
#include "runtime/nccl.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>

#include "kiln/error.h"
#include "kiln/options.h"
#include "runtime/comm.h"
#include "runtime/cuda_runtime.h"

namespace kiln::runtime::nccl {

namespace {

using Result = int;   // ncclResult_t: 0 is ncclSuccess
using Comm = void*;   // ncclComm_t
using Stream = void*; // cudaStream_t (a CUstream)

/// ncclUniqueId: NCCL_UNIQUE_ID_BYTES = 128.
struct UniqueId {
  char internal[128];
};

constexpr const char* kLibrary = "libnccl.so.2"; // KILN_NCCL_LIBRARY overrides it (a full path)
constexpr int kIdTag = 4;       // the unique id's message tag on the MPI group (dist.cpp's are 1-3)
constexpr int kWatchdogTag = 5; // the watchdog's question to the peers

// ncclDataType_t and ncclRedOp_t values (nccl.h).
enum : int { kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat32 = 7, kFloat64 = 8 };
enum : int { kSum = 0, kMax = 2 };

/// The NCCL entry points kiln calls (GetLastError is optional: NCCL 2.13 and later).
struct Api {
  Result (*GetVersion)(int*) = nullptr;
  Result (*GetUniqueId)(UniqueId*) = nullptr;
  Result (*CommInitRank)(Comm*, int, UniqueId, int) = nullptr;
  Result (*CommDestroy)(Comm) = nullptr;
  Result (*CommAbort)(Comm) = nullptr;
  Result (*CommGetAsyncError)(Comm, Result*) = nullptr;
  const char* (*GetErrorString)(Result) = nullptr;
  const char* (*GetLastError)(Comm) = nullptr;
  Result (*AllReduce)(const void*, void*, size_t, int, int, Comm, Stream) = nullptr;
  Result (*Broadcast)(const void*, void*, size_t, int, int, Comm, Stream) = nullptr;
  Result (*AllGather)(const void*, void*, size_t, int, Comm, Stream) = nullptr;
  Result (*ReduceScatter)(const void*, void*, size_t, int, int, Comm, Stream) = nullptr;
  Result (*GroupStart)() = nullptr;
  Result (*GroupEnd)() = nullptr;
};

// Every required symbol is looked up, so that the message lists all that are missing.
std::string bind_all(void* h, Api& a) {
  std::string missing;
  bind_symbol(h, a.GetVersion, "ncclGetVersion", missing);
  bind_symbol(h, a.GetUniqueId, "ncclGetUniqueId", missing);
  bind_symbol(h, a.CommInitRank, "ncclCommInitRank", missing);
  bind_symbol(h, a.CommDestroy, "ncclCommDestroy", missing);
  bind_symbol(h, a.CommAbort, "ncclCommAbort", missing);
  bind_symbol(h, a.CommGetAsyncError, "ncclCommGetAsyncError", missing);
  bind_symbol(h, a.GetErrorString, "ncclGetErrorString", missing);
  bind_symbol(h, a.AllReduce, "ncclAllReduce", missing);
  bind_symbol(h, a.Broadcast, "ncclBroadcast", missing);
  bind_symbol(h, a.AllGather, "ncclAllGather", missing);
  bind_symbol(h, a.ReduceScatter, "ncclReduceScatter", missing);
  bind_symbol(h, a.GroupStart, "ncclGroupStart", missing);
  bind_symbol(h, a.GroupEnd, "ncclGroupEnd", missing);
  a.GetLastError = reinterpret_cast<const char* (*)(Comm)>(dlsym(h, "ncclGetLastError"));
  return missing;
}

using Clock = std::chrono::steady_clock;

/// A queued NCCL group the watchdog follows until the stream passed it.
struct Work {
  uint64_t seq = 0;        ///< this rank's NCCL groups so far, this one included
  std::string name;        ///< its first NCCL function ("ncclAllReduce")
  std::string op;          ///< the kiln collective ("all_reduce")
  std::source_location loc; ///< the user's line
  double timeout_s = 0;    ///< KILN_DIST_TIMEOUT when it was queued
  CUevent start = nullptr, done = nullptr; ///< Gpu markers before and after it
  std::optional<Clock::time_point> started; ///< when the host first saw the stream reach it
};

/// The process's NCCL: loaded once; `failure` says why it cannot be used ("" when it can).
struct State {
  std::mutex mu;
  bool loaded = false;
  std::string failure;
  std::string description; // "nccl 2.21.5 (libnccl.so.2)"
  Api api;
  Comm comm = nullptr;
  int comm_device = -1; // the CUDA ordinal of the communicator
  std::deque<Work> pending; // queued groups the stream has not passed, oldest first
  uint64_t queued = 0, completed = 0; // the last group queued, and the last one seen complete
};

State& state() {
  static State s;
  return s;
}

// NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + minor*100 + patch before.
std::string version_str(int code) {
  const bool wide = code >= 20900;
  const int major = wide ? code / 10000 : code / 1000, minor = wide ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

// Loads the library; returns why NCCL cannot be used ("" when it can).
std::string load(State& s) {
  const char* env = std::getenv("KILN_NCCL_LIBRARY");
  const std::string library = env && *env ? env : kLibrary;
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return "NCCL's " + library + " cannot be loaded (" + dlerror() + "); set KILN_NCCL_LIBRARY to its path";
  if (std::string missing = bind_all(h, s.api); !missing.empty())
    return library + " lacks" + missing + ": it is not NCCL 2";
  int code = 0;
  if (Result r = s.api.GetVersion(&code); r != 0)
    return "ncclGetVersion of " + library + " failed: " + s.api.GetErrorString(r);
  s.description = "nccl " + version_str(code) + " (" + library + ")";
  return "";
}

// The first time: loads NCCL and says at KILN_DEBUG >= 1 what CUDA tensors get.
void ensure_loaded(State& s) {
  if (s.loaded) return;
  s.loaded = true;
  s.failure = load(s);
  if (options().debug < 1) return;
  if (s.failure.empty())
    std::fprintf(stderr, "[kiln] dist: collectives on CUDA tensors use %s where every rank can\n", s.description.c_str());
  else
    std::fprintf(stderr, "[kiln] dist: collectives on CUDA tensors are staged through host memory on MPI: %s\n",
                 s.failure.c_str());
}

// "unhandled system error (run with NCCL_DEBUG=INFO for details): <last error>".
std::string nccl_message(const State& s, Result r) {
  std::string msg = s.api.GetErrorString(r);
  if (s.api.GetLastError && s.comm)
    if (const char* last = s.api.GetLastError(s.comm); last && *last) msg += ": " + std::string(last);
  return msg + " (ncclResult_t " + std::to_string(r) + ")";
}

// Stops following the queued groups (after the communicator was aborted).
void forget_pending(State& s, Gpu& gpu) {
  for (Work& w : s.pending) gpu.release(w.start), gpu.release(w.done);
  s.pending.clear();
}

// NCCL off in this process after a failure: later callers learn it from `failure`, the
// communicator is aborted (NCCL's kernels return, so the stream drains) and the queued groups are
// no longer followed.
void turn_off(State& s, std::string failure) {
  s.failure = std::move(failure);
  if (s.comm) s.api.CommAbort(s.comm);
  s.comm = nullptr;
  if (!s.pending.empty()) forget_pending(s, Gpu::get(s.comm_device));
}

// After a failure: NCCL is off in this process (turn_off), and `op` throws.
[[noreturn]] void fail(State& s, const std::string& what, Result r, Device device, const char* op,
                       const std::source_location& loc) {
  const auto& w = comm::world(op, loc);
  const std::string msg = nccl_message(s, r);
  turn_off(s, "NCCL failed earlier (" + what + ": " + msg + ")");
  throw Error(op, what + " failed on rank " + std::to_string(w.rank) + " of " + std::to_string(w.size) + " (" +
                      device.str() + "): " + msg + "; later collectives on CUDA tensors are staged through host memory",
              loc);
}

// Makes the communicator: rank 0's unique id over the MPI group, then ncclCommInitRank on `device`.
void make_comm(State& s, Device device, const char* op, double timeout_s, const std::source_location& loc) {
  const auto& w = comm::world(op, loc);
  UniqueId id{};
  if (w.rank == 0)
    if (Result r = s.api.GetUniqueId(&id); r != 0) fail(s, "ncclGetUniqueId", r, device, op, loc);
  std::vector<comm::Transfer> sends, recvs;
  if (w.rank == 0)
    for (int r = 1; r < w.size; ++r) sends.push_back({r, &id, sizeof id});
  else
    recvs.push_back({0, &id, sizeof id});
  comm::exchange(sends, recvs, kIdTag, op, timeout_s, loc);
  if (Result r = s.api.CommInitRank(&s.comm, w.size, id, w.rank); r != 0) {
    s.comm = nullptr;
    fail(s, "ncclCommInitRank", r, device, op, loc);
  }
  s.comm_device = device.index;
}

int nccl_type(DType dt) {
  switch (dt) {
  case DType::Int32: return kInt32;
  case DType::Int64: return kInt64;
  case DType::Float32: return kFloat32;
  case DType::Float64: return kFloat64;
  case DType::Bool: return kUint8; // one byte an element; only broadcast and all_gather carry it
  }
  return kUint8;
}

int nccl_op(Reduction r) {
  switch (r) {
  case Reduction::Sum: return kSum;
  case Reduction::Max: return kMax;
  }
  return kSum;
}

const char* nccl_name(Kind k) {
  switch (k) {
  case Kind::AllReduce: return "ncclAllReduce";
  case Kind::Broadcast: return "ncclBroadcast";
  case Kind::AllGather: return "ncclAllGather";
  case Kind::ReduceScatter: return "ncclReduceScatter";
  }
  return "nccl?";
}

Result enqueue(const Api& a, const Call& c, Comm comm, Stream stream) {
  const int t = nccl_type(c.dtype);
  switch (c.kind) {
  case Kind::AllReduce: return a.AllReduce(c.send, c.recv, c.count, t, nccl_op(c.reduction), comm, stream);
  case Kind::Broadcast: return a.Broadcast(c.send, c.recv, c.count, t, c.root, comm, stream);
  case Kind::AllGather: return a.AllGather(c.send, c.recv, c.count, t, comm, stream);
  case Kind::ReduceScatter: return a.ReduceScatter(c.send, c.recv, c.count, t, nccl_op(c.reduction), comm, stream);
  }
  return 0;
}

// A failure NCCL found while running earlier work (a peer that left, a network error).
void check_async(State& s, Device device, const char* what, const char* op, const std::source_location& loc) {
  Result async = 0;
  if (Result r = s.api.CommGetAsyncError(s.comm, &async); r != 0) fail(s, "ncclCommGetAsyncError", r, device, op, loc);
  if (async != 0) fail(s, what, async, device, op, loc);
}

// ncclGroupStart, the calls on the device's stream, ncclGroupEnd; a failure throws (fail()).
void queue_group(State& s, const std::vector<Call>& calls, Device device, const char* op,
                 const std::source_location& loc) {
  Stream stream = Gpu::get(device.index).stream();
  if (Result r = s.api.GroupStart(); r != 0) fail(s, "ncclGroupStart", r, device, op, loc);
  for (const Call& c : calls)
    if (Result r = enqueue(s.api, c, s.comm, stream); r != 0) {
      s.api.GroupEnd();
      fail(s, nccl_name(c.kind), r, device, op, loc);
    }
  if (Result r = s.api.GroupEnd(); r != 0) fail(s, "ncclGroupEnd", r, device, op, loc);
}

// ---------------------------------------------------------------- watchdog
//
// Every queued group is followed (Work) until the stream passed its end marker. Host waits on
// the communicator's device poll watch() instead of blocking in the driver (Gpu::set_watch),
// and so does the next run(): no thread of its own, so that the error is thrown by the thread
// that waits, MPI is asked from the thread that holds it, and nothing runs while no NCCL work
// is pending. The timeout counts from the first poll that saw the stream reach the group, so
// that kernels queued before it do not count.

/// What a rank tells the others when its watchdog fires: the group it was stuck in, and its
/// last groups queued and completed.
struct Report {
  int64_t seq, queued, completed;
};

// "rank 1 had not queued it (its last NCCL collective is #2)", for one peer that answered.
std::string peer_state(int rank, const Report& r, uint64_t seq) {
  const std::string who = "rank " + std::to_string(rank);
  if (r.queued < static_cast<int64_t>(seq))
    return who + " had not queued it (its last NCCL collective is #" + std::to_string(r.queued) + ")";
  if (r.completed >= static_cast<int64_t>(seq)) return who + " completed it";
  return who + " queued it and it did not complete there either";
}

// Asks every peer over MPI (with the same timeout) where it is; says who did not answer, or
// what each answered, and what that leaves of the process group.
std::string ask_peers(const State& s, const Work& w, const comm::World& world) {
  Report mine{static_cast<int64_t>(w.seq), static_cast<int64_t>(s.queued), static_cast<int64_t>(s.completed)};
  std::vector<Report> theirs(static_cast<size_t>(world.size));
  std::vector<comm::Transfer> sends, recvs;
  for (int r = 0; r < world.size; ++r) {
    if (r == world.rank) continue;
    sends.push_back({r, &mine, sizeof mine});
    recvs.push_back({r, &theirs[static_cast<size_t>(r)], sizeof(Report)});
  }
  const std::string failed = comm::try_exchange(sends, recvs, kWatchdogTag, w.op.c_str(), w.timeout_s, w.loc);
  if (!failed.empty())
    return "asked over MPI: " + failed + " (died, hangs, or never reached its watchdog); the process group cannot "
           "be used again";
  std::string out = "asked over MPI: ";
  for (int r = 0, n = 0; r < world.size; ++r)
    if (r != world.rank) out += (n++ ? "; " : "") + peer_state(r, theirs[static_cast<size_t>(r)], w.seq);
  return out + "; later collectives on CUDA tensors are staged through host memory";
}

// The oldest pending group `w` failed (`what`: NCCL's asynchronous error, or the timeout):
// turns NCCL off in this process (turn_off: the communicator aborted), asks the peers, and
// throws kiln::Error of w's collective at its line.
[[noreturn]] void watchdog_fires(State& s, Gpu& gpu, const std::string& what) {
  const Work w = s.pending.front();
  const auto& world = comm::world(w.op.c_str(), w.loc);
  const std::string head = w.name + " (NCCL collective #" + std::to_string(w.seq) + " of rank " +
                           std::to_string(world.rank) + " of " + std::to_string(world.size) + ", " +
                           gpu.device().str() + ") " + what;
  turn_off(s, "NCCL failed earlier (" + head + ")");
  throw Error(w.op, head + "; the communicator was aborted (ncclCommAbort); " + ask_peers(s, w, world), w.loc);
}

std::string seconds_str(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

// One poll: drops the groups the stream passed; throws when NCCL reports an error or the oldest
// group passed its timeout. Returns whether any is still pending.
bool watch_locked(State& s) {
  if (s.pending.empty() || !s.comm) return false;
  Gpu& gpu = Gpu::get(s.comm_device);
  Result async = 0;
  if (Result r = s.api.CommGetAsyncError(s.comm, &async); r != 0) async = r;
  if (async != 0) watchdog_fires(s, gpu, "failed: " + nccl_message(s, async));
  while (!s.pending.empty() && gpu.passed(s.pending.front().done)) {
    Work& w = s.pending.front();
    s.completed = w.seq;
    gpu.release(w.start), gpu.release(w.done);
    s.pending.pop_front();
  }
  if (s.pending.empty()) return false;
  Work& w = s.pending.front();
  const auto now = Clock::now();
  if (!w.started && gpu.passed(w.start)) w.started = now;
  if (w.started && now - *w.started > std::chrono::duration<double>(w.timeout_s))
    watchdog_fires(s, gpu, "did not complete within the timeout of " + seconds_str(w.timeout_s) +
                               " s (KILN_DIST_TIMEOUT)");
  return true;
}

// Gpu::Watch of the communicator's device.
bool watch(Gpu&) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return watch_locked(s);
}

// Queues the group between two markers and follows it.
void queue_watched(State& s, Gpu& gpu, const std::vector<Call>& calls, const char* op, double timeout_s,
                   const std::source_location& loc) {
  Work w;
  w.seq = ++s.queued, w.name = nccl_name(calls[0].kind), w.op = op, w.loc = loc, w.timeout_s = timeout_s;
  w.start = gpu.mark();
  try {
    queue_group(s, calls, gpu.device(), op, loc);
  } catch (...) {
    gpu.release(w.start);
    throw;
  }
  w.done = gpu.mark();
  s.pending.push_back(std::move(w));
}

std::string unusable_locked(State& s, Device device) {
  ensure_loaded(s);
  if (!s.failure.empty()) return s.failure;
  if (device.kind != Device::Kind::CUDA) return "the tensor is on " + device.str();
  if (s.comm && s.comm_device != device.index)
    return "this rank's NCCL communicator is on cuda:" + std::to_string(s.comm_device) + ", the tensor on " +
           device.str();
  return "";
}

} // namespace

std::string unusable(Device device) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return unusable_locked(s, device);
}

std::string describe() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.loaded && s.failure.empty() ? s.description : "";
}

void run(Device device, const std::vector<Call>& calls, const char* op, double timeout_s,
         const std::source_location& loc) {
  State& s = state();
  std::lock_guard lock(s.mu);
  KILN_ASSERT(unusable_locked(s, device).empty(), "nccl::run where NCCL is unusable");
  Gpu& gpu = Gpu::get(device.index);
  gpu.make_current(); // NCCL uses the calling thread's current device
  if (!s.comm) {
    make_comm(s, device, op, timeout_s, loc);
    gpu.set_watch(&watch);
  }
  watch_locked(s); // an earlier group that failed or timed out throws here
  check_async(s, device, "an earlier NCCL collective", op, loc);
  if (calls.empty()) return;
  queue_watched(s, gpu, calls, op, timeout_s, loc);
  check_async(s, device, nccl_name(calls[0].kind), op, loc);
}

} // namespace kiln::runtime::nccl

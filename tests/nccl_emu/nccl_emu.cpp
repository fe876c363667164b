// libkiln_nccl_emu.so: an emulator of the part of NCCL 2 that kiln::dist calls, for kiln's
// CPU emulator of the CUDA driver (tests/cuda_emu, whose "device memory" is host memory), so
// that kiln's NCCL backend (runtime/src/nccl.cpp) is tested where there is no GPU. Load it in
// place of libnccl.so.2: KILN_NCCL_LIBRARY=/path/libkiln_nccl_emu.so, with
// KILN_CUDA_DRIVER=/path/libkiln_cuda_emu.so. No NCCL header is used: every entry point has
// nccl.h's C signature and C linkage under NCCL's name.
//
// Entry points: ncclGetVersion (2.21.5), ncclGetUniqueId, ncclCommInitRank, ncclCommDestroy,
// ncclCommAbort, ncclCommGetAsyncError, ncclGetErrorString, ncclGetLastError, ncclAllReduce,
// ncclBroadcast, ncclAllGather, ncclReduceScatter, ncclGroupStart, ncclGroupEnd. Types: int8,
// uint8, int32, uint32, int64, uint64, float32, float64 (half and bfloat16 are
// ncclInvalidArgument); reductions sum, prod, max, min, avg.
//
// Between processes. ncclGetUniqueId names a fresh POSIX shared-memory segment (its 128 bytes
// hold a marker and the name); the caller sends it to the other ranks (kiln: over MPI) and
// every rank's ncclCommInitRank maps it: a header with a barrier, then one 1 MiB slot per rank.
// Init waits until every rank mapped it (then rank 0 unlinks the name, so nothing is left in
// /dev/shm). A collective moves its data through the slots in chunks: each rank copies its
// chunk into its slot, all meet at the barrier, each computes its part of the result from the
// slots, all meet again.
//
// Order of a sum. The chunk k of an all-reduce or reduce-scatter is combined starting at rank
// (k + 1) mod p and going round ((x1 + x2) + x0 for one chunk on 3 ranks): every rank gets the
// same bits, but not those of rank order, as with NCCL's rings, so that a test cannot rely on
// rank order by accident. On 2 ranks the sums are rank order's bits (x1 + x0 == x0 + x1).
//
// Streams. Collectives need the emulated driver's context current on the calling thread (else
// ncclUnhandledCudaError, as NCCL's cudaGetDevice would fail) and run on the given stream, in
// its order, through the driver emulator's cuLaunchHostFunc: the call returns at once. Between
// ncclGroupStart and ncclGroupEnd calls are collected and queued at ncclGroupEnd, in order (a
// call that fails fails the group: ncclGroupEnd returns its error and queues none of them).
// Device addresses are checked at the call (kilnEmuHostAddress: in one live allocation, else
// ncclInvalidArgument) and translated again when the stream runs them.
//
// Errors. A rank that waits at a barrier longer than KILN_NCCL_EMU_TIMEOUT seconds (default 60),
// or sees that another rank aborted its communicator, stops: its communicator's asynchronous
// error (ncclCommGetAsyncError) becomes ncclRemoteError and its later work is skipped.
// ncclCommAbort also ends this rank's own work waiting in a collective (as NCCL's kernels return
// on abort), so that the stream drains; unlike NCCL it then waits until the communicator's
// queued work ran or was skipped (before freeing what that work reads), which takes no longer
// than the stream's work queued before it. kilnNcclEmuFailNext(code) (a test hook) makes this
// process's next collective call return `code` with ncclGetLastError saying so;
// kilnNcclEmuCounters(out[2]) gives the communicators made and the collectives run by this
// process.
//
// Peer failures (test hooks, for the other ranks' point of view). kilnNcclEmuHangNext(): when the
// stream reaches this process's next collective, it never takes part (a device stuck before the
// collective's kernel): the stream waits there until this rank aborts its communicator; nothing
// is reported, as NCCL reports nothing. kilnNcclEmuDieNext(status): the process exits with
// `status` (_exit) in the middle of its next collective, after the first chunk was exchanged.
// The other ranks then wait at a barrier as NCCL's kernels would wait for a peer over shared
// memory or NVLink: until their KILN_NCCL_EMU_TIMEOUT, or until they abort.
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#define KILN_NCCL_EMU_API extern "C" __attribute__((visibility("default")))

using ncclResult_t = int;
using CUdeviceptr = unsigned long long;

/// ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
struct ncclUniqueId {
  char internal[128];
};

struct ncclComm;
using ncclComm_t = ncclComm*;

namespace {

// ncclResult_t values (nccl.h).
enum : ncclResult_t {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
};
// ncclRedOp_t values.
enum : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

constexpr int kVersion = 22105; // 2.21.5
constexpr char kMarker[] = "kiln-nccl-emu:";
constexpr size_t kSlot = size_t{1} << 20; // bytes a rank moves per barrier
constexpr size_t kHeader = 64;

/// The shared segment's header.
struct Shared {
  std::atomic<uint32_t> arrived;    ///< ranks at the barrier now
  std::atomic<uint32_t> generation; ///< barriers passed
  std::atomic<uint32_t> aborted;    ///< a rank aborted: nobody waits any more
};
static_assert(sizeof(Shared) <= kHeader);

/// The driver emulator's entry points this library uses.
struct Driver {
  int (*LaunchHostFunc)(void*, void (*)(void*), void*) = nullptr;
  int (*CtxGetCurrent)(void**) = nullptr;
  void* (*HostAddress)(CUdeviceptr, size_t) = nullptr;
};

std::mutex g_error_mu;
std::string g_last_error; // ncclGetLastError
std::atomic<int> g_fail_next{0};
std::atomic<int> g_fault_next{0}; // kilnNcclEmuHangNext / DieNext: the next collective's Fault
std::atomic<int> g_die_status{0};
std::atomic<unsigned long long> g_comms{0}, g_collectives{0}; // kilnNcclEmuCounters

void set_last_error(const std::string& s) {
  std::lock_guard lock(g_error_mu);
  g_last_error = s;
}

ncclResult_t error(ncclResult_t r, const std::string& why) {
  set_last_error(why);
  return r;
}

// The loaded driver emulator (KILN_CUDA_DRIVER), or a Driver with nulls.
const Driver& driver() {
  static const Driver d = [] {
    Driver out;
    const char* path = std::getenv("KILN_CUDA_DRIVER");
    void* h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return out;
    out.LaunchHostFunc = reinterpret_cast<int (*)(void*, void (*)(void*), void*)>(dlsym(h, "cuLaunchHostFunc"));
    out.CtxGetCurrent = reinterpret_cast<int (*)(void**)>(dlsym(h, "cuCtxGetCurrent"));
    out.HostAddress = reinterpret_cast<void* (*)(CUdeviceptr, size_t)>(dlsym(h, "kilnEmuHostAddress"));
    return out;
  }();
  return d;
}

double timeout_s() {
  const char* t = std::getenv("KILN_NCCL_EMU_TIMEOUT");
  return t && *t ? std::atof(t) : 60.0;
}

size_t type_size(int t) {
  switch (t) {
  case 0: case 1: return 1;           // int8, uint8
  case 2: case 3: case 7: return 4;   // int32, uint32, float32
  case 4: case 5: case 8: return 8;   // int64, uint64, float64
  }
  return 0; // half, bfloat16, fp8: not emulated
}

} // namespace

/// A communicator: this rank's view of the shared segment.
struct ncclComm {
  int rank = 0, nranks = 1;
  Shared* shared = nullptr;
  unsigned char* slots = nullptr;
  size_t mapped = 0;
  std::atomic<int> async_error{0};
  std::atomic<bool> aborted{false}; // ncclCommAbort of this rank: its waiting work ends
  std::mutex mu; // in_flight
  std::condition_variable idle;
  int in_flight = 0; // queued batches not yet run
};

namespace {

// All ranks of c meet; false when a rank aborted or the wait timed out (then c's async error is set).
bool barrier(ncclComm* c, const char* what) {
  Shared* s = c->shared;
  const uint32_t gen = s->generation.load(std::memory_order_acquire);
  if (s->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(c->nranks)) {
    s->arrived.store(0, std::memory_order_relaxed);
    s->generation.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::duration<double>(timeout_s());
  for (int spins = 0; s->generation.load(std::memory_order_acquire) == gen; ++spins) {
    const bool aborted = s->aborted.load(std::memory_order_acquire) != 0;
    if (aborted || std::chrono::steady_clock::now() - start > limit) {
      set_last_error(std::string(what) + " on rank " + std::to_string(c->rank) + ": " +
                     (aborted ? "another rank aborted the communicator" : "the other ranks did not arrive in time"));
      c->async_error.store(kRemoteError);
      return false;
    }
    if (spins < 200) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
}

unsigned char* slot(ncclComm* c, int rank) { return c->slots + kSlot * static_cast<size_t>(rank); }

template <class T> void combine(T* acc, const T* x, size_t n, int op) {
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
    case kSum: case kAvg: acc[i] = static_cast<T>(acc[i] + x[i]); break;
    case kProd: acc[i] = static_cast<T>(acc[i] * x[i]); break;
    case kMax: acc[i] = x[i] > acc[i] ? x[i] : acc[i]; break;
    case kMin: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
    }
  }
}

template <class T> void divide(T* acc, size_t n, int p) {
  for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(p));
}

template <class F> void by_type(int t, F f) {
  switch (t) {
  case 0: return f(int8_t{});
  case 1: return f(uint8_t{});
  case 2: return f(int32_t{});
  case 3: return f(uint32_t{});
  case 4: return f(int64_t{});
  case 5: return f(uint64_t{});
  case 7: return f(float{});
  case 8: return f(double{});
  }
}

// out = the ranks' pieces at `offset` bytes into their slots (n elements), combined starting at rank `first`.
void reduce_slots(ncclComm* c, size_t offset, size_t n, int type, int op, int first, unsigned char* out) {
  const size_t es = type_size(type);
  std::memcpy(out, slot(c, first) + offset, n * es);
  for (int k = 1; k < c->nranks; ++k) {
    const unsigned char* x = slot(c, (first + k) % c->nranks) + offset;
    by_type(type, [&](auto v) {
      using T = decltype(v);
      combine(reinterpret_cast<T*>(out), reinterpret_cast<const T*>(x), n, op);
    });
  }
  if (op == kAvg)
    by_type(type, [&](auto v) {
      using T = decltype(v);
      divide(reinterpret_cast<T*>(out), n, c->nranks);
    });
}

enum class Kind { AllReduce, Broadcast, AllGather, ReduceScatter };
/// A peer failure injected by a test hook.
enum class Fault { None, Hang, Die };

/// One queued collective.
struct Op {
  Kind kind;
  CUdeviceptr send, recv;
  size_t count;
  int type, op, root;
  ncclComm* comm;
  void* stream;
  Fault fault = Fault::None;
};

const char* name(Kind k) {
  switch (k) {
  case Kind::AllReduce: return "ncclAllReduce";
  case Kind::Broadcast: return "ncclBroadcast";
  case Kind::AllGather: return "ncclAllGather";
  case Kind::ReduceScatter: return "ncclReduceScatter";
  }
  return "?";
}

// Bytes each buffer of `o` spans.
size_t send_bytes(const Op& o) {
  const size_t es = type_size(o.type), p = static_cast<size_t>(o.comm->nranks);
  return o.kind == Kind::ReduceScatter ? o.count * p * es : o.count * es;
}
size_t recv_bytes(const Op& o) {
  const size_t es = type_size(o.type), p = static_cast<size_t>(o.comm->nranks);
  return o.kind == Kind::AllGather ? o.count * p * es : o.count * es;
}

unsigned char* host(CUdeviceptr d, size_t n) {
  return n == 0 ? nullptr : static_cast<unsigned char*>(driver().HostAddress(d, n));
}

// kilnNcclEmuHangNext: the stream stays in the collective, taking no part, until this rank aborts.
bool hang(ncclComm* c) {
  while (!c->aborted.load(std::memory_order_acquire)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return false;
}

// kilnNcclEmuDieNext: the process ends in the middle of the collective.
void die() {
  std::fflush(nullptr);
  _exit(g_die_status.load());
}

// Runs `o` on the stream's thread; false when a barrier failed.
bool execute(const Op& o) {
  ncclComm* c = o.comm;
  if (o.fault == Fault::Hang) return hang(c);
  const size_t es = type_size(o.type), p = static_cast<size_t>(c->nranks), me = static_cast<size_t>(c->rank);
  unsigned char* in = host(o.send, send_bytes(o));
  unsigned char* out = host(o.recv, recv_bytes(o));
  if (o.count > 0 && ((o.kind != Kind::Broadcast || c->rank == o.root) && !in)) {
    set_last_error(std::string(name(o.kind)) + ": the send buffer was freed before the stream ran the collective");
    c->async_error.store(kInvalidArgument);
    return false;
  }
  const size_t step = o.kind == Kind::ReduceScatter ? kSlot / es / p : kSlot / es; // elements a round
  size_t round = 0;
  for (size_t at = 0; at < o.count; at += step, ++round) {
    const size_t n = std::min(step, o.count - at), bytes = n * es;
    const int first = static_cast<int>((round + 1) % p);
    switch (o.kind) {
    case Kind::AllReduce: std::memcpy(slot(c, c->rank), in + at * es, bytes); break;
    case Kind::Broadcast:
      if (c->rank == o.root) std::memcpy(slot(c, c->rank), in + at * es, bytes);
      break;
    case Kind::AllGather: std::memcpy(slot(c, c->rank), in + at * es, bytes); break;
    case Kind::ReduceScatter:
      for (size_t b = 0; b < p; ++b) std::memcpy(slot(c, c->rank) + b * bytes, in + (b * o.count + at) * es, bytes);
      break;
    }
    if (!barrier(c, name(o.kind))) return false;
    if (o.fault == Fault::Die) die();
    switch (o.kind) {
    case Kind::AllReduce: reduce_slots(c, 0, n, o.type, o.op, first, out + at * es); break;
    case Kind::Broadcast: std::memcpy(out + at * es, slot(c, o.root), bytes); break;
    case Kind::AllGather:
      for (size_t r = 0; r < p; ++r) std::memcpy(out + (r * o.count + at) * es, slot(c, static_cast<int>(r)), bytes);
      break;
    case Kind::ReduceScatter: reduce_slots(c, me * bytes, n, o.type, o.op, first, out + at * es); break;
    }
    if (!barrier(c, name(o.kind))) return false;
  }
  return true;
}

/// Collectives queued on one stream as one host function.
struct Batch {
  std::vector<Op> ops;
};

void run_batch(void* user) {
  Batch* b = static_cast<Batch*>(user);
  bool ok = true;
  for (const Op& o : b->ops) {
    ok = ok && o.comm->async_error.load() == kSuccess && execute(o);
    if (ok) ++g_collectives;
    std::lock_guard lock(o.comm->mu);
    if (--o.comm->in_flight == 0) o.comm->idle.notify_all();
  }
  delete b;
}

thread_local int t_group_depth = 0;
thread_local std::vector<Op> t_group;             // calls collected since ncclGroupStart
thread_local ncclResult_t t_group_error = kSuccess; // the first failed call of the group

// Queues `ops` (in order) on their streams: consecutive ops on one stream become one batch.
ncclResult_t launch(std::vector<Op> ops) {
  for (size_t i = 0; i < ops.size();) {
    auto* b = new Batch;
    const void* stream = ops[i].stream;
    for (; i < ops.size() && ops[i].stream == stream; ++i) {
      std::lock_guard lock(ops[i].comm->mu);
      ++ops[i].comm->in_flight;
      b->ops.push_back(ops[i]);
    }
    if (int r = driver().LaunchHostFunc(b->ops[0].stream, run_batch, b); r != 0) {
      for (const Op& o : b->ops) {
        std::lock_guard lock(o.comm->mu);
        --o.comm->in_flight;
      }
      delete b;
      return error(kUnhandledCudaError, "cuLaunchHostFunc failed: CUDA error " + std::to_string(r));
    }
  }
  return kSuccess;
}

ncclResult_t check(const Op& o);

// Checks a collective's arguments at the call, then queues it (or collects it in a group; a
// failed call fails the group: ncclGroupEnd returns its error and queues nothing).
ncclResult_t submit(Op o) {
  if (ncclResult_t r = check(o); r != kSuccess) {
    if (t_group_depth > 0 && t_group_error == kSuccess) t_group_error = r;
    return r;
  }
  o.fault = static_cast<Fault>(g_fault_next.exchange(0));
  if (t_group_depth > 0) {
    t_group.push_back(o);
    return kSuccess;
  }
  return launch({o});
}

ncclResult_t check(const Op& o) {
  if (int f = g_fail_next.exchange(0); f != 0)
    return error(f, std::string(name(o.kind)) + ": failure injected by kilnNcclEmuFailNext");
  if (!o.comm || !o.comm->shared) return error(kInvalidArgument, std::string(name(o.kind)) + ": invalid communicator");
  if (type_size(o.type) == 0)
    return error(kInvalidArgument, std::string(name(o.kind)) + ": datatype " + std::to_string(o.type) + " is not emulated");
  if (o.op < kSum || o.op > kAvg) return error(kInvalidArgument, std::string(name(o.kind)) + ": invalid reduction");
  if (o.root < 0 || o.root >= o.comm->nranks) return error(kInvalidArgument, std::string(name(o.kind)) + ": invalid root");
  void* ctx = nullptr;
  if (!driver().CtxGetCurrent || driver().CtxGetCurrent(&ctx) != 0 || !ctx)
    return error(kUnhandledCudaError, std::string(name(o.kind)) + ": no CUDA context is current on this thread");
  const bool sends = o.kind != Kind::Broadcast || o.comm->rank == o.root;
  if (o.count > 0 && ((sends && !host(o.send, send_bytes(o))) || !host(o.recv, recv_bytes(o))))
    return error(kInvalidArgument, std::string(name(o.kind)) + ": a buffer is not in one live device allocation");
  if (o.comm->async_error.load() != kSuccess) return error(o.comm->async_error.load(), "the communicator failed earlier");
  return kSuccess;
}

// Waits until the communicator's queued work ran (or was skipped).
void wait_idle(ncclComm* c) {
  std::unique_lock lock(c->mu);
  c->idle.wait(lock, [&] { return c->in_flight == 0; });
}

void unmap(ncclComm* c) {
  if (c->shared) munmap(c->shared, c->mapped);
  c->shared = nullptr;
}

} // namespace

KILN_NCCL_EMU_API ncclResult_t ncclGetVersion(int* version) {
  if (!version) return kInvalidArgument;
  *version = kVersion;
  return kSuccess;
}

KILN_NCCL_EMU_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return error(kInvalidArgument, "ncclGetUniqueId: null id");
  static std::atomic<unsigned> serial{0};
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "%s/kiln-nccl-emu-%d-%u-%lld", kMarker, static_cast<int>(getpid()),
                serial.fetch_add(1), static_cast<long long>(now));
  return kSuccess;
}

KILN_NCCL_EMU_API ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (!out || nranks < 1 || rank < 0 || rank >= nranks)
    return error(kInvalidArgument, "ncclCommInitRank: invalid rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  if (std::strncmp(id.internal, kMarker, sizeof kMarker - 1) != 0)
    return error(kInvalidArgument, "ncclCommInitRank: not an id of ncclGetUniqueId");
  if (!driver().LaunchHostFunc || !driver().HostAddress || !driver().CtxGetCurrent)
    return error(kSystemError, "the NCCL emulator runs only on kiln's CUDA driver emulator (KILN_CUDA_DRIVER)");
  void* ctx = nullptr;
  if (driver().CtxGetCurrent(&ctx) != 0 || !ctx)
    return error(kUnhandledCudaError, "ncclCommInitRank: no CUDA context is current on this thread");
  const char* shm_name = id.internal + sizeof kMarker - 1;
  const size_t bytes = kHeader + kSlot * static_cast<size_t>(nranks);
  const int fd = shm_open(shm_name, O_CREAT | O_RDWR, 0600);
  if (fd < 0) return error(kSystemError, std::string("shm_open ") + shm_name + ": " + std::strerror(errno));
  void* p = ftruncate(fd, static_cast<off_t>(bytes)) == 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                                          : MAP_FAILED;
  close(fd);
  if (p == MAP_FAILED) return error(kSystemError, std::string("mapping ") + shm_name + ": " + std::strerror(errno));
  auto* c = new ncclComm;
  c->rank = rank, c->nranks = nranks, c->mapped = bytes;
  c->shared = static_cast<Shared*>(p); // a fresh segment is zeros: no rank arrived, generation 0
  c->slots = static_cast<unsigned char*>(p) + kHeader;
  const bool met = barrier(c, "ncclCommInitRank");
  if (rank == 0) shm_unlink(shm_name); // every rank mapped it (or gave up)
  if (!met) {
    unmap(c);
    delete c;
    return kRemoteError;
  }
  *out = c;
  ++g_comms;
  return kSuccess;
}

KILN_NCCL_EMU_API ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return kInvalidArgument;
  wait_idle(c);
  unmap(c);
  delete c;
  return kSuccess;
}

KILN_NCCL_EMU_API ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return kInvalidArgument;
  if (c->shared) c->shared->aborted.store(1, std::memory_order_release); // the other ranks stop waiting
  c->async_error.store(kRemoteError);
  c->aborted.store(true, std::memory_order_release); // this rank's work waiting in a collective ends
  wait_idle(c);
  unmap(c);
  delete c;
  return kSuccess;
}

KILN_NCCL_EMU_API ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* r) {
  if (!c || !r) return kInvalidArgument;
  *r = c->async_error.load();
  return kSuccess;
}

KILN_NCCL_EMU_API const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case kSuccess: return "no error";
  case kUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case kSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case kInternalError: return "internal error - please report this issue to the NCCL developers";
  case kInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case kInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case kRemoteError: return "remote process exited or there was a network error";
  }
  return "unknown result code";
}

KILN_NCCL_EMU_API const char* ncclGetLastError(ncclComm_t) {
  thread_local std::string copy; // stays valid for the caller after the lock
  std::lock_guard lock(g_error_mu);
  copy = g_last_error;
  return copy.c_str();
}

KILN_NCCL_EMU_API ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, int type, int op, ncclComm_t c,
                                             void* stream) {
  return submit({Kind::AllReduce, reinterpret_cast<CUdeviceptr>(send), reinterpret_cast<CUdeviceptr>(recv), count, type,
                 op, 0, c, stream});
}

KILN_NCCL_EMU_API ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, int type, int root,
                                             ncclComm_t c, void* stream) {
  return submit({Kind::Broadcast, reinterpret_cast<CUdeviceptr>(send), reinterpret_cast<CUdeviceptr>(recv), count, type,
                 kSum, root, c, stream});
}

KILN_NCCL_EMU_API ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, int type, ncclComm_t c,
                                             void* stream) {
  return submit({Kind::AllGather, reinterpret_cast<CUdeviceptr>(send), reinterpret_cast<CUdeviceptr>(recv), count, type,
                 kSum, 0, c, stream});
}

KILN_NCCL_EMU_API ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, int type, int op,
                                                 ncclComm_t c, void* stream) {
  return submit({Kind::ReduceScatter, reinterpret_cast<CUdeviceptr>(send), reinterpret_cast<CUdeviceptr>(recv), count,
                 type, op, 0, c, stream});
}

KILN_NCCL_EMU_API ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return kSuccess;
}

KILN_NCCL_EMU_API ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return error(kInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group_depth > 0) return kSuccess;
  std::vector<Op> ops;
  ops.swap(t_group);
  const ncclResult_t failed = std::exchange(t_group_error, kSuccess);
  return failed != kSuccess ? failed : launch(std::move(ops));
}

/// Test hook: this process's next collective call returns `code` (an ncclResult_t).
KILN_NCCL_EMU_API void kilnNcclEmuFailNext(int code) { g_fail_next.store(code); }

/// Test hook: this process's next collective never takes part: its stream waits in it until this
/// rank calls ncclCommAbort.
KILN_NCCL_EMU_API void kilnNcclEmuHangNext() { g_fault_next.store(static_cast<int>(Fault::Hang)); }

/// Test hook: this process exits with `status` in the middle of its next collective (after the
/// first chunk was exchanged).
KILN_NCCL_EMU_API void kilnNcclEmuDieNext(int status) {
  g_die_status.store(status);
  g_fault_next.store(static_cast<int>(Fault::Die));
}

/// Test hook: communicators made and collectives run (completed on their stream) by this process.
KILN_NCCL_EMU_API void kilnNcclEmuCounters(unsigned long long out[2]) {
  out[0] = g_comms.load();
  out[1] = g_collectives.load();
}

// libkiln_cuda_emu.so: a CPU emulator of the subset of the CUDA driver API that kiln's GPU
// runtime uses, so that the runtime can be tested where there is no GPU. Load it in place
// of libcuda.so.1 (KILN_CUDA_DRIVER=/path/libkiln_cuda_emu.so). No CUDA header is used:
// the types (cuda_abi.h) have the real driver's ABI (CUresult = int, 0 success; CUdevice
// = int; CUdeviceptr = unsigned long long; handles are opaque pointers) and every entry
// point has C linkage under the name the real libcuda exports (the `_v2` ones where
// cuda.h maps to them).
//
// Device and context. One device (ordinal 0, "kiln CUDA emulator (CPU)", compute
// capability 9.0, 4 SMs, warp 32, 48 KiB shared memory a block, driver version 13000).
// Every call but cuInit, cuDriverGetVersion, cuGetErrorName/String and the two kilnEmu*
// extensions returns CUDA_ERROR_NOT_INITIALIZED (3) before cuInit. As with the real
// driver, the calls that act on a context (memory, streams, events, modules, launches,
// cuCtxSynchronize) need one current on the calling thread (cuDevicePrimaryCtxRetain,
// then cuCtxSetCurrent on every host thread): else CUDA_ERROR_INVALID_CONTEXT (201).
// The primary context is reference counted; when the last reference is released, the
// pending work drains and a sticky error is cleared (a fresh context, as on a GPU);
// unlike a real driver, allocations, streams, events and modules survive that reset.
//
// Device memory. cuMemAlloc_v2 takes host memory (256-byte aligned, filled with 0xA5 so
// that reading uninitialized device memory is not accidentally zero) and returns a tagged
// address: the host address with bit 62 set, non-canonical on x86-64, so a runtime that
// dereferences a device pointer on the host faults at once. Every memcpy/memset range must
// lie inside one live allocation (else CUDA_ERROR_INVALID_VALUE); cuMemFree_v2 takes the
// base address of a live allocation (else CUDA_ERROR_INVALID_VALUE) and first waits for
// all streams to drain (the implicit synchronization of the real cuMemFree). The device
// has KILN_EMU_MEMORY bytes (default 4 GiB), read at every cuMemAlloc_v2, cuMemGetInfo_v2
// and cuDeviceTotalMem_v2 (so a test may setenv it at any time); an allocation beyond it
// is CUDA_ERROR_OUT_OF_MEMORY (2). Zero-byte copies and memsets succeed and do nothing.
//
// Streams. Each created stream is a FIFO run in order by its own worker thread, so async
// operations complete after the call returns. KILN_EMU_DELAY_US (default 0) is read when
// an operation is enqueued (on the calling thread) and makes the worker sleep that many
// microseconds before running it: a runtime that reads results without synchronizing
// sees stale data. The legacy default stream (0) and CU_STREAM_LEGACY (1) /
// CU_STREAM_PER_THREAD (2) are synchronous: an operation on them first waits for every
// stream to drain and then runs on the calling thread; so do the synchronous memcpys and
// cuMemsetD8_v2. cuMemcpyHtoDAsync_v2 copies the host source into a staging buffer at the
// call (the caller may reuse it at once, as with pageable memory on a real driver);
// cuMemcpyDtoHAsync_v2 writes host memory when the stream runs it. Events take a
// timestamp when their stream reaches them (cuEventElapsedTime: CUDA_ERROR_NOT_READY
// until both completed). Also exported, though kiln may not need them: cuEventQuery,
// cuStreamWaitEvent and the cuEventElapsedTime_v2 name (what cuda.h 13 maps
// cuEventElapsedTime to).
//
// Sticky errors. A failure found when work executes (a launch buffer or an async copy's
// range not in a live allocation: CUDA_ERROR_ILLEGAL_ADDRESS, 700) is a sticky context
// error, as on a device (nothing is reported as CUDA_ERROR_LAUNCH_FAILED, 719: no other
// failure is found at execution): the context's later work is skipped, and every later
// synchronizing call (cuStreamSynchronize, cuCtxSynchronize, cuEventSynchronize, the
// synchronous memcpys and memset), query (cuStreamQuery, cuEventQuery) and work
// submission (async copies, memsets, launches, event records) returns it, until the
// primary context is released for the last time. Allocation, free, create and destroy
// calls do not return it, so that a runtime can clean up.
//
// Modules. cuModuleLoadData's image is NUL-terminated text. An image starting with the line
// "//kiln-emu-source" is CUDA C++ as kiln emits it: concatenations of
// codegen::emit_cuda(k) + codegen::emit_cuda_shim_entry(k), whose entries
// `extern "C" void NAME_shim(unsigned grid, unsigned block, void* const* buffers,
// const long long* params)` and `extern "C" const int NAME_shim_arity[2]` (buffers, i64
// parameters) the emulator calls. Any other image (CUBIN, PTX) is CUDA_ERROR_INVALID_IMAGE
// (200). The source, behind `#include "tests/cuda_emu/cuda_shim.h"`, is compiled with
//   KILN_CXX -std=c++17 -O1 -ffp-contract=off -fno-fast-math -fPIC -shared -w -I KILN_SOURCE_DIR
// (as tests/test_cuda.cpp's ShimLibrary does) and dlopen'ed. The .so is cached on disk in
// $KILN_EMU_CACHE (read at every load), else ${TMPDIR:-/tmp}/kiln-cuda-emu-$UID, named by
// an FNV-1a hash of the compiler, the flags, cuda_shim.h's text and the source; it is
// written under a unique temporary name and renamed into place (safe between processes);
// a cached file that fails to dlopen is recompiled. A compile failure is
// CUDA_ERROR_INVALID_SOURCE (300) with the compiler's output (first 4000 characters) on
// stderr. cuModuleGetFunction(NAME) finds NAME_shim and NAME_shim_arity (else
// CUDA_ERROR_NOT_FOUND, 500). cuModuleUnload waits for all streams to drain first.
//
// Launches. cuLaunchKernel takes 1-d launches only (gridY/Z and blockY/Z 1,
// 1 <= blockX <= 1024, gridX >= 1), no dynamic shared memory and no `extra` (else
// CUDA_ERROR_INVALID_VALUE at the call). kernelParams point to arity[0] CUdeviceptr values,
// then arity[1] long long values; they are copied at the call. When the stream runs the
// launch, each buffer address is translated back to its host address and must lie in a
// live allocation (else the sticky CUDA_ERROR_ILLEGAL_ADDRESS); then NAME_shim(grid,
// block, host buffers, params) runs on the stream's worker thread. A kernel's own failure
// (the shim's __trap, e.g. a fixed-block kernel launched with another block) aborts the
// process, as the shim does everywhere.
//
// Extensions: kilnEmuIsEmulator() returns 1 (kiln's runtime then passes source to
// cuModuleLoadData instead of a CUBIN); kilnEmuHostAddress(d, n) is the host address of a
// live device range (or null), for kiln's NCCL emulator (tests/nccl_emu), which also queues
// its work with cuLaunchHostFunc (a callback run in stream order); kilnEmuCounters(out[6]) gives live allocations,
// live bytes, cuMemAlloc calls, kernel launches, module compiles (host compiler runs, not
// disk-cache hits) and synchronizations (stream, context and event syncs and synchronous
// memcpys). All entry points are thread-safe. The library is linked -z nodelete, so a
// dlclose (the runtime's driver probe does one) never unloads code that stream worker
// threads run.

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda_abi.h"

#define KILN_EMU_API extern "C" __attribute__((visibility("default")))

extern char** environ;

namespace {

using namespace kiln_cuda_emu;

constexpr uint64_t kTag = kDeviceTag;
constexpr size_t kAlign = 256;           ///< alignment of allocations
constexpr unsigned char kGarbage = 0xA5; ///< fresh allocations' bytes
constexpr const char kMarker[] = "//kiln-emu-source\n";
using Clock = std::chrono::steady_clock;
using Entry = void (*)(unsigned, unsigned, void* const*, const long long*);

/// An unsigned environment variable, or `fallback` when unset or not a number.
unsigned long long env_number(const char* name, unsigned long long fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  return errno == 0 && end && *end == '\0' ? v : fallback;
}

size_t memory_limit() { return static_cast<size_t>(env_number("KILN_EMU_MEMORY", 4ull << 30)); }
unsigned delay_us() { return static_cast<unsigned>(env_number("KILN_EMU_DELAY_US", 0)); }

} // namespace

/// The primary context (the only one).
struct CUctx_st {
  std::mutex mu;
  int refs = 0; ///< cuDevicePrimaryCtxRetain minus Release
};

/// A stream: a FIFO of operations that its worker thread runs in order.
struct CUstream_st {
  struct Op {
    std::function<void()> run;
    unsigned delay_us = 0;
  };
  std::mutex mu;
  std::condition_variable work;  ///< an op arrived, or stop
  std::condition_variable idle;  ///< the queue ran empty
  std::deque<Op> queue;
  bool busy = false;  ///< the worker is running an op it popped
  bool stop = false;  ///< cuStreamDestroy: finish the queue, then exit
  std::thread worker;

  void loop() {
    for (;;) {
      Op op;
      {
        std::unique_lock lock(mu);
        work.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        op = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      if (op.delay_us) std::this_thread::sleep_for(std::chrono::microseconds(op.delay_us));
      op.run();
      {
        std::lock_guard lock(mu);
        busy = false;
      }
      idle.notify_all();
    }
  }
  void push(std::function<void()> f) {
    {
      std::lock_guard lock(mu);
      queue.push_back({std::move(f), delay_us()});
    }
    work.notify_one();
  }
  bool is_idle() {
    std::lock_guard lock(mu);
    return queue.empty() && !busy;
  }
  void wait_idle() {
    std::unique_lock lock(mu);
    idle.wait(lock, [&] { return queue.empty() && !busy; });
  }
};

/// An event: the timestamp of the last record its stream reached.
struct CUevent_st {
  std::mutex mu;
  std::condition_variable reached;
  unsigned flags = 0;
  uint64_t recorded = 0;  ///< records so far
  uint64_t completed = 0; ///< the latest record the streams reached
  Clock::time_point when;

  bool done() { // mu held
    return completed == recorded;
  }
};

/// A kernel of a module.
struct CUfunc_st {
  Entry entry = nullptr;
  int buffers = 0, params = 0; ///< NAME_shim_arity
};

/// A loaded module: a compiled shared library.
struct CUmod_st {
  void* handle = nullptr;
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions; ///< by kernel name
};

namespace {

/// The whole emulator's state (never destroyed: stream workers may run at exit).
struct Emu {
  std::atomic<bool> initialized{false};
  CUctx_st primary;
  std::atomic<int> sticky{0}; ///< the context's sticky error (0: none)

  std::mutex mu; ///< the handle registries below
  std::unordered_map<CUstream_st*, std::shared_ptr<CUstream_st>> streams;
  std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>> events;
  std::unordered_map<CUmod_st*, std::unique_ptr<CUmod_st>> modules;
  std::unordered_set<CUfunc_st*> functions; ///< of the loaded modules

  std::mutex mem_mu;                 ///< allocs and used
  std::map<uintptr_t, size_t> allocs; ///< live allocations: host address -> requested bytes
  size_t used = 0;                   ///< sum of allocs' bytes
  /// Held shared while work touches device memory, exclusively by cuMemFree: an
  /// allocation is never freed under a running copy or kernel.
  std::shared_mutex gate;

  std::mutex compile_mu; ///< compile_locks
  std::map<uint64_t, std::shared_ptr<std::mutex>> compile_locks; ///< one compile of a source at a time

  std::atomic<unsigned long long> total_allocs{0}, launches{0}, compiles{0}, syncs{0};
};

Emu& emu() {
  static Emu* e = new Emu;
  return *e;
}

thread_local CUctx_st* current = nullptr; ///< cuCtxSetCurrent of this thread

bool initialized() { return emu().initialized.load(std::memory_order_acquire); }

/// 0 when the driver is initialized and the calling thread has an active context current.
CUresult need_context() {
  if (!initialized()) return kNotInitialized;
  if (!current) return kInvalidContext;
  std::lock_guard lock(current->mu);
  return current->refs > 0 ? kSuccess : kInvalidContext;
}

void set_sticky(int err) {
  int none = 0;
  emu().sticky.compare_exchange_strong(none, err);
}
int sticky() { return emu().sticky.load(); }

/// Waits until every stream's queue ran empty.
void drain_all() {
  std::vector<std::shared_ptr<CUstream_st>> all;
  {
    std::lock_guard lock(emu().mu);
    for (auto& [p, s] : emu().streams) all.push_back(s);
  }
  for (auto& s : all) s->wait_idle();
}

/// The stream behind a handle: nullptr for the synchronous ones (0, CU_STREAM_LEGACY,
/// CU_STREAM_PER_THREAD); false for an unknown handle.
bool find_stream(CUstream h, std::shared_ptr<CUstream_st>& out) {
  out = nullptr;
  const auto v = reinterpret_cast<uintptr_t>(h);
  if (v <= 2) return true;
  std::lock_guard lock(emu().mu);
  auto it = emu().streams.find(h);
  if (it == emu().streams.end()) return false;
  out = it->second;
  return true;
}

std::shared_ptr<CUevent_st> find_event(CUevent h) {
  std::lock_guard lock(emu().mu);
  auto it = emu().events.find(h);
  return it == emu().events.end() ? nullptr : it->second;
}

/// Adds an object to a handle registry of emu() and returns its handle.
template <class Map, class Ptr> auto add(Map& registry, Ptr p) {
  auto* h = p.get();
  std::lock_guard lock(emu().mu);
  registry.emplace(h, std::move(p));
  return h;
}

/// Removes handle h from a registry of emu() and returns what it held (empty when unknown).
template <class Map, class Handle> typename Map::mapped_type take(Map& registry, Handle h) {
  std::lock_guard lock(emu().mu);
  auto it = registry.find(h);
  if (it == registry.end()) return {};
  typename Map::mapped_type p = std::move(it->second);
  registry.erase(it);
  return p;
}

/// Runs f on stream s (enqueued), or, for a synchronous stream, after all streams drained
/// on the calling thread.
void submit(const std::shared_ptr<CUstream_st>& s, std::function<void()> f) {
  if (s) return s->push(std::move(f));
  drain_all();
  f();
}

/// The host address of the device range [d, d + n) when it lies in one live allocation
/// (n >= 1), else nullptr.
unsigned char* host_range(CUdeviceptr d, size_t n) {
  if ((d >> 48) != (kTag >> 48) || n == 0) return nullptr; // bit 62 and a 48-bit host address
  const uintptr_t h = static_cast<uintptr_t>(d & ~kTag);
  std::lock_guard lock(emu().mem_mu);
  auto it = emu().allocs.upper_bound(h);
  if (it == emu().allocs.begin()) return nullptr;
  --it;
  const size_t off = h - it->first;
  if (off >= it->second || n > it->second - off) return nullptr;
  return reinterpret_cast<unsigned char*>(h);
}

CUdeviceptr tag(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)) | kTag; }

// ---------------------------------------------------------------- compiling modules

uint64_t fnv1a(const std::string& s, uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The compiler's arguments after the compiler itself, up to the output.
const std::vector<std::string>& compile_flags() {
  static const std::vector<std::string> flags = {"-std=c++17", "-O1",   "-ffp-contract=off",
                                                 "-fno-fast-math", "-fPIC", "-shared", "-w",
                                                 "-I",          KILN_SOURCE_DIR};
  return flags;
}

std::string cache_dir() {
  if (const char* d = std::getenv("KILN_EMU_CACHE"); d && *d) return d;
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-cuda-emu-" + std::to_string(getuid());
}

/// Runs the compiler on src_path into so_path; its output goes to log_path. True on success.
bool run_compiler(const std::string& src_path, const std::string& so_path, const std::string& log_path) {
  std::vector<std::string> args = {KILN_CXX};
  args.insert(args.end(), compile_flags().begin(), compile_flags().end());
  for (const char* a : {"-o", so_path.c_str(), src_path.c_str()}) args.emplace_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    std::ofstream(log_path) << "cannot run " << argv[0] << ": " << std::strerror(rc) << "\n";
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/// dlopen's handle of the compiled source (from the disk cache or compiled now), or nullptr
/// after printing why.
void* load_source(const std::string& source) {
  static const std::string shim = read_file(std::string(KILN_SOURCE_DIR) + "/tests/cuda_emu/cuda_shim.h");
  std::string key_text = std::string(KILN_CXX) + '\n';
  for (const std::string& f : compile_flags()) key_text += f + '\n';
  const uint64_t key = fnv1a(source, fnv1a(shim, fnv1a(key_text)));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));

  const std::string dir = cache_dir();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string so = dir + "/" + hex + ".so";

  std::shared_ptr<std::mutex> one;
  {
    std::lock_guard lock(emu().compile_mu);
    auto& m = emu().compile_locks[key];
    if (!m) m = std::make_shared<std::mutex>();
    one = m;
  }
  std::lock_guard compiling(*one);
  if (access(so.c_str(), R_OK) == 0) {
    if (void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    std::fprintf(stderr, "kiln cuda emu: cached %s does not load (%s); compiling it again\n", so.c_str(), dlerror());
  }
  std::string base = dir + "/" + hex + "-XXXXXX";
  std::string src = base + ".cpp";
  const int fd = mkstemps(src.data(), 4);
  if (fd < 0) {
    std::fprintf(stderr, "kiln cuda emu: cannot create a file in %s: %s\n", dir.c_str(), std::strerror(errno));
    return nullptr;
  }
  close(fd);
  base = src.substr(0, src.size() - 4);
  const std::string tmp_so = base + ".so", log = base + ".log";
  std::ofstream(src, std::ios::binary) << source;
  const bool ok = run_compiler(src, tmp_so, log);
  if (!ok)
    std::fprintf(stderr, "kiln cuda emu: the host compiler failed on a module (CUDA_ERROR_INVALID_SOURCE):\n%s\n",
                 read_file(log).substr(0, 4000).c_str());
  std::remove(log.c_str());
  std::remove(src.c_str());
  if (!ok) {
    std::remove(tmp_so.c_str());
    return nullptr;
  }
  ++emu().compiles;
  if (std::rename(tmp_so.c_str(), so.c_str()) != 0) {
    std::fprintf(stderr, "kiln cuda emu: cannot rename %s to %s: %s\n", tmp_so.c_str(), so.c_str(), std::strerror(errno));
    std::remove(tmp_so.c_str());
    return nullptr;
  }
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) std::fprintf(stderr, "kiln cuda emu: cannot load %s: %s\n", so.c_str(), dlerror());
  return h;
}

// ---------------------------------------------------------------- errors

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};

constexpr ErrorText kErrors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "link to a shared object failed to resolve"},
    {303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {710, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
    {716, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* find_error(CUresult r) {
  for (const ErrorText& e : kErrors)
    if (e.code == r) return &e;
  return nullptr;
}

/// A copy or memset as a stream runs it: the ranges are looked up again (they may have
/// been freed since the call); a failure is the sticky CUDA_ERROR_ILLEGAL_ADDRESS.
/// `body` gets the host addresses of the device ranges (dst first).
template <class Body> std::function<void()> device_work(CUdeviceptr a, size_t na, CUdeviceptr b, size_t nb, Body body) {
  return [=] {
    if (sticky()) return;
    std::shared_lock gate(emu().gate);
    unsigned char* ha = na ? host_range(a, na) : nullptr;
    unsigned char* hb = nb ? host_range(b, nb) : nullptr;
    if ((na && !ha) || (nb && !hb)) return set_sticky(kIllegalAddress);
    body(ha, hb);
  };
}

/// The start of the memcpy/memset entry points: a current context and, for the async
/// ones, a known stream (s: nullptr for a synchronous one).
CUresult begin_copy(bool async, CUstream hs, std::shared_ptr<CUstream_st>& s) {
  if (CUresult r = need_context()) return r;
  return async && !find_stream(hs, s) ? kInvalidHandle : kSuccess;
}

/// The end of the memcpy/memset entry points, once the arguments are checked: `work` is
/// enqueued on s (async), or runs after all streams drained (synchronous; counted as a
/// synchronization where `count_sync`). Both return a sticky error.
CUresult end_copy(bool async, const std::shared_ptr<CUstream_st>& s, std::function<void()> work,
                  bool count_sync = false) {
  if (async) {
    if (int e = sticky()) return e;
    submit(s, std::move(work));
    return kSuccess;
  }
  drain_all();
  if (count_sync) ++emu().syncs;
  if (int e = sticky()) return e;
  work();
  return sticky();
}

} // namespace

// ---------------------------------------------------------------- initialization, device

KILN_EMU_API CUresult cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  emu().initialized.store(true, std::memory_order_release);
  return kSuccess;
}

KILN_EMU_API CUresult cuDriverGetVersion(int* v) {
  if (!v) return kInvalidValue;
  *v = 13000;
  return kSuccess;
}

KILN_EMU_API CUresult cuDeviceGetCount(int* n) {
  if (!initialized()) return kNotInitialized;
  if (!n) return kInvalidValue;
  *n = 1;
  return kSuccess;
}

KILN_EMU_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (!initialized()) return kNotInitialized;
  if (!d) return kInvalidValue;
  if (ordinal != 0) return kInvalidDevice;
  *d = 0;
  return kSuccess;
}

namespace {
/// The checks of a device query: the driver initialized, somewhere to write, device 0.
CUresult check_query(const void* out, CUdevice d) {
  if (!initialized()) return kNotInitialized;
  if (!out) return kInvalidValue;
  return d == 0 ? kSuccess : kInvalidDevice;
}
} // namespace

KILN_EMU_API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (CUresult r = check_query(name, d)) return r;
  if (len <= 0) return kInvalidValue;
  std::snprintf(name, static_cast<size_t>(len), "%s", "kiln CUDA emulator (CPU)");
  return kSuccess;
}

KILN_EMU_API CUresult cuDeviceGetAttribute(int* v, int attrib, CUdevice d) {
  if (CUresult r = check_query(v, d)) return r;
  switch (attrib) {
  case 1: *v = 1024; break;        // MAX_THREADS_PER_BLOCK
  case 2: *v = 1024; break;        // MAX_BLOCK_DIM_X
  case 3: *v = 1024; break;        // MAX_BLOCK_DIM_Y
  case 4: *v = 64; break;          // MAX_BLOCK_DIM_Z
  case 5: *v = 2147483647; break;  // MAX_GRID_DIM_X
  case 6: *v = 65535; break;       // MAX_GRID_DIM_Y
  case 7: *v = 65535; break;       // MAX_GRID_DIM_Z
  case 8: *v = 49152; break;       // MAX_SHARED_MEMORY_PER_BLOCK
  case 9: *v = 65536; break;       // TOTAL_CONSTANT_MEMORY
  case 10: *v = 32; break;         // WARP_SIZE
  case 12: *v = 65536; break;      // MAX_REGISTERS_PER_BLOCK
  case 13: *v = 1980000; break;    // CLOCK_RATE (kHz)
  case 16: *v = 4; break;          // MULTIPROCESSOR_COUNT
  case 17: *v = 0; break;          // KERNEL_EXEC_TIMEOUT
  case 19: *v = 1; break;          // CAN_MAP_HOST_MEMORY
  case 20: *v = 0; break;          // COMPUTE_MODE (default)
  case 31: *v = 1; break;          // CONCURRENT_KERNELS
  case 38: *v = 4 << 20; break;    // L2_CACHE_SIZE
  case 39: *v = 2048; break;       // MAX_THREADS_PER_MULTIPROCESSOR
  case 40: *v = 2; break;          // ASYNC_ENGINE_COUNT
  case 41: *v = 1; break;          // UNIFIED_ADDRESSING
  case 75: *v = 9; break;          // COMPUTE_CAPABILITY_MAJOR
  case 76: *v = 0; break;          // COMPUTE_CAPABILITY_MINOR
  case 81: *v = 233472; break;     // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
  case 82: *v = 65536; break;      // MAX_REGISTERS_PER_MULTIPROCESSOR
  case 97: *v = 232448; break;     // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  case 106: *v = 32; break;        // MAX_BLOCKS_PER_MULTIPROCESSOR
  default: return kInvalidValue;
  }
  return kSuccess;
}

KILN_EMU_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
  if (CUresult r = check_query(bytes, d)) return r;
  *bytes = memory_limit();
  return kSuccess;
}

KILN_EMU_API CUresult cuGetErrorName(CUresult r, const char** s) {
  if (!s) return kInvalidValue;
  const ErrorText* e = find_error(r);
  *s = e ? e->name : nullptr;
  return e ? kSuccess : kInvalidValue;
}

KILN_EMU_API CUresult cuGetErrorString(CUresult r, const char** s) {
  if (!s) return kInvalidValue;
  const ErrorText* e = find_error(r);
  *s = e ? e->text : nullptr;
  return e ? kSuccess : kInvalidValue;
}

// ---------------------------------------------------------------- context

KILN_EMU_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  if (!initialized()) return kNotInitialized;
  if (!ctx) return kInvalidValue;
  if (d != 0) return kInvalidDevice;
  std::lock_guard lock(emu().primary.mu);
  ++emu().primary.refs;
  *ctx = &emu().primary;
  return kSuccess;
}

KILN_EMU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (!initialized()) return kNotInitialized;
  if (d != 0) return kInvalidDevice;
  CUctx_st& p = emu().primary;
  std::lock_guard lock(p.mu);
  if (p.refs == 0) return kInvalidContext;
  if (--p.refs == 0) { // the context is reset: its work drains, its sticky error goes
    drain_all();
    emu().sticky.store(0);
  }
  return kSuccess;
}

KILN_EMU_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (!initialized()) return kNotInitialized;
  if (ctx && ctx != &emu().primary) return kInvalidContext;
  current = ctx;
  return kSuccess;
}

KILN_EMU_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (!initialized()) return kNotInitialized;
  if (!ctx) return kInvalidValue;
  *ctx = current;
  return kSuccess;
}

KILN_EMU_API CUresult cuCtxSynchronize() {
  if (CUresult r = need_context()) return r;
  drain_all();
  ++emu().syncs;
  return sticky();
}

// ---------------------------------------------------------------- memory

KILN_EMU_API CUresult cuMemAlloc_v2(CUdeviceptr* d, size_t bytes) {
  if (CUresult r = need_context()) return r;
  if (!d || bytes == 0) return kInvalidValue;
  Emu& e = emu();
  const size_t limit = memory_limit();
  {
    std::lock_guard lock(e.mem_mu);
    if (bytes > limit || e.used > limit - bytes) return kOutOfMemory;
    e.used += bytes; // reserved
  }
  void* p = bytes > SIZE_MAX - kAlign ? nullptr : std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  if (p) std::memset(p, kGarbage, bytes);
  std::lock_guard lock(e.mem_mu);
  if (!p) {
    e.used -= bytes;
    return kOutOfMemory;
  }
  e.allocs.emplace(reinterpret_cast<uintptr_t>(p), bytes);
  ++e.total_allocs;
  *d = tag(p);
  return kSuccess;
}

KILN_EMU_API CUresult cuMemFree_v2(CUdeviceptr d) {
  if (CUresult r = need_context()) return r;
  if ((d >> 48) != (kTag >> 48)) return kInvalidValue;
  drain_all(); // the real cuMemFree synchronizes too
  Emu& e = emu();
  std::unique_lock gate(e.gate); // no copy or kernel runs on it now
  std::lock_guard lock(e.mem_mu);
  auto it = e.allocs.find(static_cast<uintptr_t>(d & ~kTag));
  if (it == e.allocs.end()) return kInvalidValue;
  e.used -= it->second;
  std::free(reinterpret_cast<void*>(it->first));
  e.allocs.erase(it);
  return kSuccess;
}

KILN_EMU_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  if (CUresult r = need_context()) return r;
  if (!free_bytes || !total) return kInvalidValue;
  const size_t limit = memory_limit();
  std::lock_guard lock(emu().mem_mu);
  *total = limit;
  *free_bytes = emu().used >= limit ? 0 : limit - emu().used;
  return kSuccess;
}


namespace {

CUresult memcpy_htod(CUdeviceptr dst, const void* src, size_t n, bool async, CUstream hs) {
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = begin_copy(async, hs, s)) return r;
  if (n == 0) return kSuccess;
  if (!src || !host_range(dst, n)) return kInvalidValue;
  if (!async) // the caller's buffer stays valid until the copy is done
    return end_copy(false, s,
                    device_work(dst, n, 0, 0, [src, n](unsigned char* d, unsigned char*) { std::memcpy(d, src, n); }),
                    true);
  // pageable memory: the source is staged at the call, so the caller may reuse its buffer
  const auto* p = static_cast<const unsigned char*>(src);
  auto staged = std::make_shared<const std::vector<unsigned char>>(p, p + n);
  return end_copy(true, s, device_work(dst, n, 0, 0, [staged](unsigned char* d, unsigned char*) {
                    std::memcpy(d, staged->data(), staged->size());
                  }));
}

CUresult memcpy_dtoh(void* dst, CUdeviceptr src, size_t n, bool async, CUstream hs) {
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = begin_copy(async, hs, s)) return r;
  if (n == 0) return kSuccess;
  if (!dst || !host_range(src, n)) return kInvalidValue;
  return end_copy(async, s,
                  device_work(src, n, 0, 0, [dst, n](unsigned char* h, unsigned char*) { std::memcpy(dst, h, n); }),
                  !async);
}

CUresult memcpy_dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, bool async, CUstream hs) {
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = begin_copy(async, hs, s)) return r;
  if (n == 0) return kSuccess;
  if (!host_range(dst, n) || !host_range(src, n)) return kInvalidValue;
  return end_copy(async, s, device_work(dst, n, src, n, [n](unsigned char* d, unsigned char* h) { std::memmove(d, h, n); }),
                  !async);
}

CUresult memset_d8(CUdeviceptr dst, unsigned char v, size_t n, bool async, CUstream hs) {
  std::shared_ptr<CUstream_st> s;
  if (CUresult r = begin_copy(async, hs, s)) return r;
  if (n == 0) return kSuccess;
  if (!host_range(dst, n)) return kInvalidValue;
  return end_copy(async, s, device_work(dst, n, 0, 0, [v, n](unsigned char* d, unsigned char*) { std::memset(d, v, n); }));
}

} // namespace

KILN_EMU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return memcpy_htod(dst, src, n, false, nullptr);
}
KILN_EMU_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return memcpy_dtoh(dst, src, n, false, nullptr);
}
KILN_EMU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return memcpy_dtod(dst, src, n, false, nullptr);
}
KILN_EMU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return memcpy_htod(dst, src, n, true, s);
}
KILN_EMU_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return memcpy_dtoh(dst, src, n, true, s);
}
KILN_EMU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return memcpy_dtod(dst, src, n, true, s);
}
KILN_EMU_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  return memset_d8(dst, v, n, false, nullptr);
}
KILN_EMU_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  return memset_d8(dst, v, n, true, s);
}

// ---------------------------------------------------------------- streams

KILN_EMU_API CUresult cuStreamCreate(CUstream* out, unsigned flags) {
  if (CUresult r = need_context()) return r;
  if (!out || (flags & ~1u)) return kInvalidValue; // CU_STREAM_DEFAULT, CU_STREAM_NON_BLOCKING
  auto s = std::make_shared<CUstream_st>();
  s->worker = std::thread([p = s.get()] { p->loop(); }); // s lives until the worker is joined
  *out = add(emu().streams, std::move(s));
  return kSuccess;
}

KILN_EMU_API CUresult cuStreamDestroy_v2(CUstream h) {
  if (CUresult r = need_context()) return r;
  const std::shared_ptr<CUstream_st> s = take(emu().streams, h);
  if (!s) return kInvalidHandle;
  { // its pending work still runs (as on a real device), then the worker ends
    std::lock_guard lock(s->mu);
    s->stop = true;
  }
  s->work.notify_all();
  s->worker.join();
  return kSuccess;
}

KILN_EMU_API CUresult cuStreamSynchronize(CUstream h) {
  if (CUresult r = need_context()) return r;
  std::shared_ptr<CUstream_st> s;
  if (!find_stream(h, s)) return kInvalidHandle;
  if (s) s->wait_idle();
  else drain_all();
  ++emu().syncs;
  return sticky();
}

KILN_EMU_API CUresult cuStreamQuery(CUstream h) {
  if (CUresult r = need_context()) return r;
  std::shared_ptr<CUstream_st> s;
  if (!find_stream(h, s)) return kInvalidHandle;
  bool idle = true;
  if (s) idle = s->is_idle();
  else {
    std::lock_guard lock(emu().mu);
    for (auto& [p, t] : emu().streams) idle = idle && t->is_idle();
  }
  if (!idle) return kNotReady;
  return sticky();
}

// ---------------------------------------------------------------- events

KILN_EMU_API CUresult cuEventCreate(CUevent* out, unsigned flags) {
  if (CUresult r = need_context()) return r;
  if (!out || (flags & ~7u)) return kInvalidValue; // BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS
  auto e = std::make_shared<CUevent_st>();
  e->flags = flags;
  *out = add(emu().events, std::move(e));
  return kSuccess;
}

KILN_EMU_API CUresult cuEventDestroy_v2(CUevent h) {
  if (CUresult r = need_context()) return r;
  return take(emu().events, h) ? kSuccess : kInvalidHandle; // a pending record keeps its own reference
}

KILN_EMU_API CUresult cuEventRecord(CUevent h, CUstream hs) {
  if (CUresult r = need_context()) return r;
  std::shared_ptr<CUevent_st> e = find_event(h);
  std::shared_ptr<CUstream_st> s;
  if (!e || !find_stream(hs, s)) return kInvalidHandle;
  if (int err = sticky()) return err;
  uint64_t n;
  {
    std::lock_guard lock(e->mu);
    n = ++e->recorded;
  }
  submit(s, [e, n] {
    {
      std::lock_guard lock(e->mu);
      if (n > e->completed) e->completed = n, e->when = Clock::now();
    }
    e->reached.notify_all();
  });
  return kSuccess;
}

KILN_EMU_API CUresult cuEventQuery(CUevent h) {
  if (CUresult r = need_context()) return r;
  std::shared_ptr<CUevent_st> e = find_event(h);
  if (!e) return kInvalidHandle;
  std::lock_guard lock(e->mu);
  return e->done() ? sticky() : kNotReady;
}

KILN_EMU_API CUresult cuEventSynchronize(CUevent h) {
  if (CUresult r = need_context()) return r;
  std::shared_ptr<CUevent_st> e = find_event(h);
  if (!e) return kInvalidHandle;
  {
    std::unique_lock lock(e->mu);
    e->reached.wait(lock, [&] { return e->done(); });
  }
  ++emu().syncs;
  return sticky();
}

KILN_EMU_API CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  if (CUresult r = need_context()) return r;
  if (!ms) return kInvalidValue;
  std::shared_ptr<CUevent_st> a = find_event(start), b = find_event(end);
  if (!a || !b || ((a->flags | b->flags) & 2u)) return kInvalidHandle; // CU_EVENT_DISABLE_TIMING
  std::scoped_lock lock(a->mu, b->mu);
  if (a->recorded == 0 || b->recorded == 0) return kInvalidHandle; // never recorded
  if (!a->done() || !b->done()) return kNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return kSuccess;
}

KILN_EMU_API CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  return cuEventElapsedTime(ms, start, end);
}

KILN_EMU_API CUresult cuStreamWaitEvent(CUstream hs, CUevent h, unsigned flags) {
  if (CUresult r = need_context()) return r;
  std::shared_ptr<CUevent_st> e = find_event(h);
  std::shared_ptr<CUstream_st> s;
  if (!e || !find_stream(hs, s)) return kInvalidHandle;
  if (flags != 0) return kInvalidValue;
  uint64_t n;
  {
    std::lock_guard lock(e->mu);
    n = e->recorded; // the record to wait for: the latest one at this call (none: no wait)
  }
  submit(s, [e, n] {
    std::unique_lock lock(e->mu);
    e->reached.wait(lock, [&] { return e->completed >= n; });
  });
  return kSuccess;
}

// ---------------------------------------------------------------- modules and launches

KILN_EMU_API CUresult cuModuleLoadData(CUmodule* out, const void* image) {
  if (CUresult r = need_context()) return r;
  if (!out || !image) return kInvalidValue;
  const char* text = static_cast<const char*>(image);
  const size_t marker = sizeof kMarker - 1;
  if (std::strncmp(text, kMarker, marker) != 0) return kInvalidImage; // a CUBIN or PTX
  void* h = load_source("#include \"tests/cuda_emu/cuda_shim.h\"\n" + std::string(text + marker));
  if (!h) return kInvalidSource;
  auto m = std::make_unique<CUmod_st>();
  m->handle = h;
  *out = add(emu().modules, std::move(m));
  return kSuccess;
}

KILN_EMU_API CUresult cuModuleUnload(CUmodule h) {
  if (CUresult r = need_context()) return r;
  const std::unique_ptr<CUmod_st> m = take(emu().modules, h);
  if (!m) return kInvalidHandle;
  {
    std::lock_guard lock(emu().mu);
    for (auto& [name, f] : m->functions) emu().functions.erase(f.get());
  }
  drain_all(); // no queued launch still calls into it
  dlclose(m->handle);
  return kSuccess;
}

KILN_EMU_API CUresult cuModuleGetFunction(CUfunction* out, CUmodule h, const char* name) {
  if (CUresult r = need_context()) return r;
  if (!out || !name) return kInvalidValue;
  std::lock_guard lock(emu().mu);
  auto it = emu().modules.find(h);
  if (it == emu().modules.end()) return kInvalidHandle;
  CUmod_st& m = *it->second;
  std::unique_ptr<CUfunc_st>& f = m.functions[name];
  if (!f) {
    auto entry = reinterpret_cast<Entry>(dlsym(m.handle, (std::string(name) + "_shim").c_str()));
    const auto* arity = static_cast<const int*>(dlsym(m.handle, (std::string(name) + "_shim_arity").c_str()));
    if (!entry || !arity || arity[0] < 0 || arity[1] < 0 || arity[0] + arity[1] > 4096) {
      m.functions.erase(name);
      return kNotFound;
    }
    f = std::make_unique<CUfunc_st>(CUfunc_st{entry, arity[0], arity[1]});
    emu().functions.insert(f.get());
  }
  *out = f.get();
  return kSuccess;
}

KILN_EMU_API CUresult cuLaunchKernel(CUfunction hf, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                                     unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream hs,
                                     void** kernel_params, void** extra) {
  if (CUresult r = need_context()) return r;
  Entry entry;
  int nb, np;
  {
    std::lock_guard lock(emu().mu);
    if (!emu().functions.count(hf)) return kInvalidHandle;
    entry = hf->entry, nb = hf->buffers, np = hf->params;
  }
  std::shared_ptr<CUstream_st> s;
  if (!find_stream(hs, s)) return kInvalidHandle;
  if (grid_x < 1 || grid_y != 1 || grid_z != 1 || block_x < 1 || block_x > 1024 || block_y != 1 || block_z != 1 ||
      shared_bytes != 0 || extra)
    return kInvalidValue;
  if (nb + np > 0 && !kernel_params) return kInvalidValue;
  for (int i = 0; i < nb + np; ++i)
    if (!kernel_params[i]) return kInvalidValue;
  if (int e = sticky()) return e;
  // The argument values are copied now: the caller may reuse kernelParams after the call.
  std::vector<CUdeviceptr> buffers(static_cast<size_t>(nb));
  std::vector<long long> params(static_cast<size_t>(np));
  for (int i = 0; i < nb; ++i) std::memcpy(&buffers[i], kernel_params[i], sizeof(CUdeviceptr));
  for (int i = 0; i < np; ++i) std::memcpy(&params[i], kernel_params[nb + i], sizeof(long long));
  ++emu().launches;
  submit(s, [entry, grid_x, block_x, buffers = std::move(buffers), params = std::move(params)] {
    if (sticky()) return; // the context is dead
    std::shared_lock gate(emu().gate);
    std::vector<void*> host(buffers.size());
    for (size_t i = 0; i < buffers.size(); ++i)
      if (!(host[i] = host_range(buffers[i], 1))) return set_sticky(kIllegalAddress);
    entry(grid_x, block_x, host.data(), params.data());
  });
  return kSuccess;
}

// cuLaunchHostFunc: fn(user_data) runs on the stream's worker when the stream reaches it (on
// the calling thread after all streams drained, for a synchronous stream); skipped once the
// context has a sticky error, as on a device. What kiln's NCCL emulator (tests/nccl_emu) queues
// its collectives with.
KILN_EMU_API CUresult cuLaunchHostFunc(CUstream hs, void (*fn)(void*), void* user_data) {
  if (CUresult r = need_context()) return r;
  std::shared_ptr<CUstream_st> s;
  if (!find_stream(hs, s)) return kInvalidHandle;
  if (!fn) return kInvalidValue;
  if (int e = sticky()) return e;
  submit(s, [fn, user_data] {
    if (!sticky()) fn(user_data);
  });
  return kSuccess;
}

// ---------------------------------------------------------------- extensions

KILN_EMU_API int kilnEmuIsEmulator(void) { return 1; }

// The host address of device range [d, d + n) when it lies in one live allocation, else
// null (n = 0: the address of d when d is in one, or null). For tests/nccl_emu.
KILN_EMU_API void* kilnEmuHostAddress(CUdeviceptr d, size_t n) { return host_range(d, n ? n : 1); }

KILN_EMU_API void kilnEmuCounters(unsigned long long out[6]) {
  Emu& e = emu();
  {
    std::lock_guard lock(e.mem_mu);
    out[0] = e.allocs.size();
    out[1] = e.used;
  }
  out[2] = e.total_allocs.load();
  out[3] = e.launches.load();
  out[4] = e.compiles.load();
  out[5] = e.syncs.load();
}

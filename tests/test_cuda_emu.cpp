// The CPU emulator of the CUDA driver API (tests/cuda_emu/cuda_emu.cpp), loaded by its
// full path with dlopen and called through dlsym'ed entry points, as kiln's GPU runtime
// does: initialization and device queries, tagged device addresses, range checks, the
// out-of-memory limit, stream asynchrony (KILN_EMU_DELAY_US makes unsynchronized reads
// stale), events, sticky errors, modules (images, the disk cache, compile errors) and
// real kiln kernels (emit_cuda + emit_cuda_shim_entry) matching the CPU path bitwise.
//
// The emulator reads KILN_EMU_MEMORY at every allocation and KILN_EMU_DELAY_US when an
// operation is enqueued, KILN_EMU_CACHE at every module load: the tests setenv them
// (ScopedEnv) on the main thread while no other thread calls the emulator.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/lower.h"
#include "graph/node.h"
#include "kiln/functional.h"
#include "kiln/kiln.h"
#include "tests/cuda_emu/cuda_abi.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace F = nn::functional;

// ---------------------------------------------------------------- the driver ABI

using namespace kiln_cuda_emu;
constexpr CUdeviceptr kTag = kDeviceTag;

/// Reading host memory that an async copy still has to write is the race a runtime must
/// not have; the tests make it on purpose to see stale data, except under ThreadSanitizer
/// (which rightly reports it).
#if defined(__SANITIZE_THREAD__)
constexpr bool kRacyReads = false;
#elif defined(__has_feature)
constexpr bool kRacyReads = !__has_feature(thread_sanitizer);
#else
constexpr bool kRacyReads = true;
#endif
const auto kLegacy = reinterpret_cast<CUstream>(uintptr_t{1});
const auto kPerThread = reinterpret_cast<CUstream>(uintptr_t{2});

#define KILN_EMU_FUNCTIONS(X)                                                                                          \
  X(cuInit, CUresult(unsigned))                                                                                        \
  X(cuDriverGetVersion, CUresult(int*))                                                                                \
  X(cuDeviceGetCount, CUresult(int*))                                                                                  \
  X(cuDeviceGet, CUresult(CUdevice*, int))                                                                             \
  X(cuDeviceGetName, CUresult(char*, int, CUdevice))                                                                   \
  X(cuDeviceGetAttribute, CUresult(int*, int, CUdevice))                                                               \
  X(cuDeviceTotalMem_v2, CUresult(size_t*, CUdevice))                                                                  \
  X(cuGetErrorName, CUresult(CUresult, const char**))                                                                  \
  X(cuGetErrorString, CUresult(CUresult, const char**))                                                                \
  X(cuDevicePrimaryCtxRetain, CUresult(CUcontext*, CUdevice))                                                          \
  X(cuDevicePrimaryCtxRelease_v2, CUresult(CUdevice))                                                                  \
  X(cuCtxSetCurrent, CUresult(CUcontext))                                                                              \
  X(cuCtxGetCurrent, CUresult(CUcontext*))                                                                             \
  X(cuCtxSynchronize, CUresult())                                                                                      \
  X(cuMemAlloc_v2, CUresult(CUdeviceptr*, size_t))                                                                     \
  X(cuMemFree_v2, CUresult(CUdeviceptr))                                                                               \
  X(cuMemGetInfo_v2, CUresult(size_t*, size_t*))                                                                       \
  X(cuMemcpyHtoD_v2, CUresult(CUdeviceptr, const void*, size_t))                                                       \
  X(cuMemcpyDtoH_v2, CUresult(void*, CUdeviceptr, size_t))                                                             \
  X(cuMemcpyDtoD_v2, CUresult(CUdeviceptr, CUdeviceptr, size_t))                                                       \
  X(cuMemcpyHtoDAsync_v2, CUresult(CUdeviceptr, const void*, size_t, CUstream))                                        \
  X(cuMemcpyDtoHAsync_v2, CUresult(void*, CUdeviceptr, size_t, CUstream))                                              \
  X(cuMemcpyDtoDAsync_v2, CUresult(CUdeviceptr, CUdeviceptr, size_t, CUstream))                                        \
  X(cuMemsetD8_v2, CUresult(CUdeviceptr, unsigned char, size_t))                                                       \
  X(cuMemsetD8Async, CUresult(CUdeviceptr, unsigned char, size_t, CUstream))                                           \
  X(cuStreamCreate, CUresult(CUstream*, unsigned))                                                                     \
  X(cuStreamDestroy_v2, CUresult(CUstream))                                                                            \
  X(cuStreamSynchronize, CUresult(CUstream))                                                                           \
  X(cuStreamQuery, CUresult(CUstream))                                                                                 \
  X(cuStreamWaitEvent, CUresult(CUstream, CUevent, unsigned))                                                          \
  X(cuEventCreate, CUresult(CUevent*, unsigned))                                                                       \
  X(cuEventRecord, CUresult(CUevent, CUstream))                                                                        \
  X(cuEventQuery, CUresult(CUevent))                                                                                   \
  X(cuEventSynchronize, CUresult(CUevent))                                                                             \
  X(cuEventElapsedTime, CUresult(float*, CUevent, CUevent))                                                            \
  X(cuEventElapsedTime_v2, CUresult(float*, CUevent, CUevent))                                                         \
  X(cuEventDestroy_v2, CUresult(CUevent))                                                                              \
  X(cuModuleLoadData, CUresult(CUmodule*, const void*))                                                                \
  X(cuModuleUnload, CUresult(CUmodule))                                                                                \
  X(cuModuleGetFunction, CUresult(CUfunction*, CUmodule, const char*))                                                 \
  X(cuLaunchKernel, CUresult(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,         \
                             CUstream, void**, void**))                                                                \
  X(kilnEmuIsEmulator, int())                                                                                          \
  X(kilnEmuCounters, void(unsigned long long*))

template <class T> using Fn = T*;

/// The emulator's entry points.
struct Driver {
  void* lib = nullptr;
  std::string missing; ///< why it is incomplete ("" when every entry point was found)
#define KILN_EMU_MEMBER(name, type) Fn<type> name = nullptr;
  KILN_EMU_FUNCTIONS(KILN_EMU_MEMBER)
#undef KILN_EMU_MEMBER
};

Driver load_driver() {
  Driver d;
  d.lib = dlopen(KILN_CUDA_EMU, RTLD_NOW | RTLD_LOCAL);
  if (!d.lib) {
    d.missing = std::string("dlopen: ") + dlerror();
    return d;
  }
#define KILN_EMU_BIND(name, type)                                                                                      \
  d.name = reinterpret_cast<Fn<type>>(dlsym(d.lib, #name));                                                               \
  if (!d.name) d.missing += " " #name;
  KILN_EMU_FUNCTIONS(KILN_EMU_BIND)
#undef KILN_EMU_BIND
  return d;
}

const Driver& drv() {
  static const Driver d = load_driver();
  return d;
}

enum Counter { kLiveAllocs, kLiveBytes, kAllocCalls, kLaunches, kCompiles, kSyncs };
std::array<unsigned long long, 6> counters() {
  std::array<unsigned long long, 6> c{};
  drv().kilnEmuCounters(c.data());
  return c;
}

/// Sets (or, with nullptr, unsets) an environment variable for a scope.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

private:
  const char* name_;
  std::optional<std::string> old_;
};

/// A fresh directory, removed at the end of the scope.
struct TempDir {
  TempDir() {
    char t[] = "/tmp/kiln-emu-test-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

/// A kernel in the shim ABI, written by hand: out[i] = a * in[i] + b for i < n
/// (buffers: in, out as long long; params: n, a, b), with a grid-stride loop.
const std::string kAffine = R"(//kiln-emu-source
extern "C" void kiln_emu_affine_shim(unsigned grid, unsigned block, void* const* buffers, const long long* params) {
  kiln_shim::launch(grid, block, [&] {
    const long long* in = static_cast<const long long*>(buffers[0]);
    long long* out = static_cast<long long*>(buffers[1]);
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < params[0]; i += step)
      out[i] = params[1] * in[i] + params[2];
  });
}
extern "C" const int kiln_emu_affine_shim_arity[2] = {2, 3};
)";

// ---------------------------------------------------------------- the fixture

/// The driver initialized and the primary context current; every test frees what it
/// allocates.
class CudaEmu : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(d.missing, "") << "the emulator " << KILN_CUDA_EMU << " lacks entry points";
    ASSERT_EQ(d.cuInit(0), 0);
    ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&ctx, 0), 0);
    ASSERT_EQ(d.cuCtxSetCurrent(ctx), 0);
    live_before = counters()[kLiveAllocs];
  }
  void TearDown() override {
    if (!d.lib || !d.missing.empty()) return;
    EXPECT_EQ(counters()[kLiveAllocs], live_before) << "the test leaked device memory";
    EXPECT_EQ(d.cuDevicePrimaryCtxRelease_v2(0), 0);
    d.cuCtxSetCurrent(nullptr);
  }

  CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(d.cuMemAlloc_v2(&p, bytes), 0);
    return p;
  }
  CUstream stream() {
    CUstream s = nullptr;
    EXPECT_EQ(d.cuStreamCreate(&s, 0), 0);
    return s;
  }
  CUmodule load(const std::string& source) {
    CUmodule m = nullptr;
    EXPECT_EQ(d.cuModuleLoadData(&m, source.c_str()), 0);
    return m;
  }
  CUfunction function(CUmodule m, const std::string& name) {
    CUfunction f = nullptr;
    EXPECT_EQ(d.cuModuleGetFunction(&f, m, name.c_str()), 0) << name;
    return f;
  }
  /// Launches kAffine's kernel: out[i] = a * in[i] + b for i < n.
  CUresult affine(CUfunction f, CUdeviceptr in, CUdeviceptr out, long long n, long long a, long long b, CUstream s,
                  unsigned grid = 3, unsigned block = 32) {
    void* args[] = {&in, &out, &n, &a, &b};
    return d.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args, nullptr);
  }
  /// kAffine's module and kernel.
  std::pair<CUmodule, CUfunction> load_affine() {
    const CUmodule m = load(kAffine);
    return {m, m ? function(m, "kiln_emu_affine") : nullptr};
  }
  /// A device copy of x.
  CUdeviceptr upload(const std::vector<long long>& x) {
    const CUdeviceptr p = alloc(x.size() * sizeof(long long));
    EXPECT_EQ(d.cuMemcpyHtoD_v2(p, x.data(), x.size() * sizeof(long long)), 0);
    return p;
  }
  void free_all(std::initializer_list<CUdeviceptr> ps) {
    for (CUdeviceptr p : ps) EXPECT_EQ(d.cuMemFree_v2(p), 0);
  }
  std::vector<long long> download(CUdeviceptr p, size_t n) {
    std::vector<long long> v(n);
    EXPECT_EQ(d.cuMemcpyDtoH_v2(v.data(), p, n * sizeof(long long)), 0);
    return v;
  }
  /// Releases the primary context for the last time (it resets: the sticky error goes) and retains it again.
  void reset_context() {
    ASSERT_EQ(d.cuDevicePrimaryCtxRelease_v2(0), 0);
    ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&ctx, 0), 0);
    ASSERT_EQ(d.cuCtxSetCurrent(ctx), 0);
  }

  const Driver& d = drv();
  CUcontext ctx = nullptr;
  unsigned long long live_before = 0;
};

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return v;
}

// ---------------------------------------------------------------- initialization and device

/// In a fresh process (the death test re-executes the binary): everything but cuInit,
/// cuDriverGetVersion and the error names is CUDA_ERROR_NOT_INITIALIZED before cuInit.
int before_cu_init() {
  const Driver& d = drv();
  if (!d.missing.empty()) return std::fprintf(stderr, "incomplete emulator:%s\n", d.missing.c_str()), 2;
  int n = -1, version = 0;
  CUdevice dev = -1;
  CUdeviceptr p = 0;
  CUcontext c = nullptr;
  const char* name = nullptr;
  size_t bytes = 0;
  const std::vector<std::pair<const char*, CUresult>> calls = {
      {"cuDeviceGetCount", d.cuDeviceGetCount(&n)},
      {"cuDeviceGet", d.cuDeviceGet(&dev, 0)},
      {"cuDeviceTotalMem_v2", d.cuDeviceTotalMem_v2(&bytes, 0)},
      {"cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&c, 0)},
      {"cuMemAlloc_v2", d.cuMemAlloc_v2(&p, 64)},
      {"cuCtxSynchronize", d.cuCtxSynchronize()}};
  for (const auto& [fn, r] : calls)
    if (r != kNotInitialized) return std::fprintf(stderr, "%s returned %d before cuInit\n", fn, r), 3;
  if (d.cuDriverGetVersion(&version) != 0 || version != 13000) return std::fprintf(stderr, "cuDriverGetVersion\n"), 4;
  if (d.cuGetErrorName(kNotInitialized, &name) != 0 || std::strcmp(name, "CUDA_ERROR_NOT_INITIALIZED") != 0)
    return std::fprintf(stderr, "cuGetErrorName\n"), 5;
  if (d.cuInit(0) != 0 || d.cuDeviceGetCount(&n) != 0 || n != 1) return std::fprintf(stderr, "cuInit\n"), 6;
  return 0;
}

TEST(CudaEmuInit, CallsBeforeCuInitAreNotInitialized) {
  GTEST_FLAG_SET(death_test_style, "threadsafe"); // the child is a fresh process: no cuInit ran in it
  EXPECT_EXIT(std::exit(before_cu_init()), ::testing::ExitedWithCode(0), "");
}

TEST_F(CudaEmu, DeviceVersionAndAttributes) {
  EXPECT_EQ(d.kilnEmuIsEmulator(), 1);
  int v = 0;
  ASSERT_EQ(d.cuDriverGetVersion(&v), 0);
  EXPECT_EQ(v, 13000);
  ASSERT_EQ(d.cuDeviceGetCount(&v), 0);
  EXPECT_EQ(v, 1);
  CUdevice dev = -1;
  ASSERT_EQ(d.cuDeviceGet(&dev, 0), 0);
  EXPECT_EQ(d.cuDeviceGet(&dev, 1), kInvalidDevice);
  char name[64] = {};
  ASSERT_EQ(d.cuDeviceGetName(name, sizeof name, dev), 0);
  EXPECT_STREQ(name, "kiln CUDA emulator (CPU)");
  const std::map<int, int> want = {{1, 1024}, {2, 1024}, {5, 2147483647}, {8, 49152}, {10, 32}, {16, 4},
                                   {39, 2048}, {75, 9}, {76, 0}, {38, 4 << 20}};
  for (const auto& [attr, value] : want) {
    int got = -1;
    EXPECT_EQ(d.cuDeviceGetAttribute(&got, attr, dev), 0) << attr;
    EXPECT_EQ(got, value) << "attribute " << attr;
  }
  EXPECT_EQ(d.cuDeviceGetAttribute(&v, 9999, dev), kInvalidValue);
  EXPECT_EQ(d.cuDeviceGetAttribute(&v, 1, 7), kInvalidDevice);
  size_t total = 0;
  {
    ScopedEnv unset("KILN_EMU_MEMORY", nullptr);
    ASSERT_EQ(d.cuDeviceTotalMem_v2(&total, dev), 0);
    EXPECT_EQ(total, size_t{4} << 30);
  }
  for (const auto& [code, text] : std::map<CUresult, std::string>{{0, "CUDA_SUCCESS"},
                                                                  {2, "CUDA_ERROR_OUT_OF_MEMORY"},
                                                                  {200, "CUDA_ERROR_INVALID_IMAGE"},
                                                                  {300, "CUDA_ERROR_INVALID_SOURCE"},
                                                                  {600, "CUDA_ERROR_NOT_READY"},
                                                                  {700, "CUDA_ERROR_ILLEGAL_ADDRESS"},
                                                                  {719, "CUDA_ERROR_LAUNCH_FAILED"}}) {
    const char* s = nullptr;
    ASSERT_EQ(d.cuGetErrorName(code, &s), 0);
    EXPECT_STREQ(s, text.c_str());
    ASSERT_EQ(d.cuGetErrorString(code, &s), 0);
    EXPECT_GT(std::strlen(s), 3u);
  }
  const char* s = "unchanged";
  EXPECT_EQ(d.cuGetErrorName(12345, &s), kInvalidValue);
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(d.cuInit(1), kInvalidValue);
}

TEST_F(CudaEmu, WorkNeedsACurrentContext) {
  CUcontext c = ctx;
  ASSERT_EQ(d.cuCtxGetCurrent(&c), 0);
  EXPECT_EQ(c, ctx);
  ASSERT_EQ(d.cuCtxSetCurrent(nullptr), 0);
  CUdeviceptr p = 0;
  EXPECT_EQ(d.cuMemAlloc_v2(&p, 64), kInvalidContext);
  EXPECT_EQ(d.cuCtxSynchronize(), kInvalidContext);
  ASSERT_EQ(d.cuCtxGetCurrent(&c), 0);
  EXPECT_EQ(c, nullptr);
  int bogus = 0;
  EXPECT_EQ(d.cuCtxSetCurrent(reinterpret_cast<CUcontext>(&bogus)), kInvalidContext);
  // Another host thread has no current context until it sets one (as with a real driver).
  CUresult without = 0, with = -1;
  std::thread([&] {
    without = d.cuMemAlloc_v2(&p, 64);
    if (d.cuCtxSetCurrent(ctx) == 0) with = d.cuCtxSynchronize();
  }).join();
  EXPECT_EQ(without, kInvalidContext);
  EXPECT_EQ(with, 0);
  ASSERT_EQ(d.cuCtxSetCurrent(ctx), 0);
  EXPECT_EQ(d.cuCtxSynchronize(), 0);
}

// ---------------------------------------------------------------- memory

TEST_F(CudaEmu, TaggedAllocationsRoundTrip) {
  const auto before = counters();
  const size_t n = 1000;
  const CUdeviceptr a = alloc(n), b = alloc(n);
  // A device address is a host address with bit 62 set: the host cannot dereference it.
  EXPECT_EQ(a & (kTag | 0xffull << 48), kTag);
  EXPECT_EQ(a % 256, 0u);
  EXPECT_NE(a, b);
  auto c = counters();
  EXPECT_EQ(c[kLiveAllocs], before[kLiveAllocs] + 2);
  EXPECT_EQ(c[kLiveBytes], before[kLiveBytes] + 2 * n);
  EXPECT_EQ(c[kAllocCalls], before[kAllocCalls] + 2);

  std::vector<unsigned char> h(n, 0);
  ASSERT_EQ(d.cuMemcpyDtoH_v2(h.data(), a, n), 0);
  EXPECT_EQ(h, std::vector<unsigned char>(n, 0xA5)) << "fresh device memory is garbage, not zeros";
  const std::vector<unsigned char> p = pattern(n, 1);
  ASSERT_EQ(d.cuMemcpyHtoD_v2(a, p.data(), n), 0);
  ASSERT_EQ(d.cuMemcpyDtoH_v2(h.data(), a, n), 0);
  EXPECT_EQ(h, p);
  ASSERT_EQ(d.cuMemsetD8_v2(b, 0x3C, n), 0);
  ASSERT_EQ(d.cuMemcpyDtoD_v2(b + 100, a + 300, 500), 0); // interior addresses of both
  ASSERT_EQ(d.cuMemcpyDtoH_v2(h.data(), b, n), 0);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(h[i], i >= 100 && i < 600 ? p[i + 200] : 0x3C) << "byte " << i;
  ASSERT_EQ(d.cuMemsetD8_v2(a + 10, 0, 5), 0);
  ASSERT_EQ(d.cuMemcpyDtoH_v2(h.data(), a, 20), 0);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(h[i], i >= 10 && i < 15 ? 0 : p[i]) << i;

  ASSERT_EQ(d.cuMemFree_v2(a), 0);
  ASSERT_EQ(d.cuMemFree_v2(b), 0);
  c = counters();
  EXPECT_EQ(c[kLiveAllocs], before[kLiveAllocs]);
  EXPECT_EQ(c[kLiveBytes], before[kLiveBytes]);
}

TEST_F(CudaEmu, BadRangesAndFreesAreRejected) {
  const size_t n = 512;
  const CUdeviceptr a = alloc(n);
  std::vector<unsigned char> h(2 * n);
  EXPECT_EQ(d.cuMemcpyHtoD_v2(a, h.data(), n + 1), kInvalidValue);     // past the end
  EXPECT_EQ(d.cuMemcpyDtoH_v2(h.data(), a + n - 4, 8), kInvalidValue); // straddles the end
  EXPECT_EQ(d.cuMemcpyDtoH_v2(h.data(), a + n, 1), kInvalidValue);     // one past the end
  EXPECT_EQ(d.cuMemcpyDtoH_v2(h.data(), a - 1, 1), kInvalidValue);     // before the start
  EXPECT_EQ(d.cuMemcpyDtoH_v2(h.data(), a & ~kTag, 8), kInvalidValue); // a host address
  EXPECT_EQ(d.cuMemcpyDtoH_v2(nullptr, a, 8), kInvalidValue);
  EXPECT_EQ(d.cuMemcpyDtoD_v2(a, a + 1, n), kInvalidValue);
  EXPECT_EQ(d.cuMemsetD8_v2(a + 1, 0, n), kInvalidValue);
  EXPECT_EQ(d.cuMemsetD8Async(a, 0, n + 1, nullptr), kInvalidValue);
  EXPECT_EQ(d.cuMemcpyHtoDAsync_v2(a, h.data(), n + 1, nullptr), kInvalidValue);
  CUdeviceptr p = 0;
  EXPECT_EQ(d.cuMemAlloc_v2(&p, 0), kInvalidValue);
  EXPECT_EQ(d.cuMemFree_v2(a + 16), kInvalidValue); // not the base
  EXPECT_EQ(d.cuMemFree_v2(0x1234), kInvalidValue);
  EXPECT_EQ(d.cuMemFree_v2(kTag | 0x1000), kInvalidValue);
  EXPECT_EQ(d.cuMemcpyDtoH_v2(h.data(), a, n), 0); // still fine
  ASSERT_EQ(d.cuMemFree_v2(a), 0);
  EXPECT_EQ(d.cuMemFree_v2(a), kInvalidValue); // twice
  EXPECT_EQ(d.cuMemcpyDtoH_v2(h.data(), a, 1), kInvalidValue); // freed
}

TEST_F(CudaEmu, OutOfMemoryThenRetryAfterFree) {
  ScopedEnv limit("KILN_EMU_MEMORY", "1048576"); // 1 MiB, read at every allocation
  const size_t big = 600 << 10;
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(d.cuMemGetInfo_v2(&free_bytes, &total), 0);
  EXPECT_EQ(total, 1u << 20);
  const CUdeviceptr a = alloc(big);
  ASSERT_EQ(d.cuMemGetInfo_v2(&free_bytes, &total), 0);
  EXPECT_EQ(free_bytes, (1u << 20) - big);
  CUdeviceptr b = 0;
  EXPECT_EQ(d.cuMemAlloc_v2(&b, big), kOutOfMemory);
  EXPECT_EQ(d.cuMemAlloc_v2(&b, size_t{1} << 62), kOutOfMemory);
  ASSERT_EQ(d.cuMemFree_v2(a), 0); // what a caching allocator does: free its cache, retry
  ASSERT_EQ(d.cuMemAlloc_v2(&b, big), 0);
  ASSERT_EQ(d.cuMemFree_v2(b), 0);
  size_t dev_total = 0;
  ASSERT_EQ(d.cuDeviceTotalMem_v2(&dev_total, 0), 0);
  EXPECT_EQ(dev_total, 1u << 20);
}

// ---------------------------------------------------------------- streams and events

TEST_F(CudaEmu, AsyncCopyLandsOnlyAfterStreamSynchronize) {
  const size_t n = 4096;
  const CUdeviceptr a = alloc(n);
  const std::vector<unsigned char> p = pattern(n, 2);
  ASSERT_EQ(d.cuMemcpyHtoD_v2(a, p.data(), n), 0);
  ScopedEnv delay("KILN_EMU_DELAY_US", "500000");
  const CUstream s = stream();
  std::vector<unsigned char> h(n, 0);
  const auto syncs = counters()[kSyncs];
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(d.cuMemcpyDtoHAsync_v2(h.data(), a, n, s), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(400)) << "the async copy blocked";
  if (kRacyReads) EXPECT_EQ(h, std::vector<unsigned char>(n, 0)) << "the data arrived before any synchronization";
  EXPECT_EQ(d.cuStreamQuery(s), kNotReady);
  ASSERT_EQ(d.cuStreamSynchronize(s), 0);
  EXPECT_EQ(h, p);
  EXPECT_EQ(d.cuStreamQuery(s), 0);
  EXPECT_EQ(counters()[kSyncs], syncs + 1);
  ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
  ASSERT_EQ(d.cuMemFree_v2(a), 0);
}

TEST_F(CudaEmu, StreamIsFifoAndHtoDAsyncStagesItsSource) {
  const size_t n = 2048;
  const CUdeviceptr a = alloc(n), b = alloc(n);
  ScopedEnv delay("KILN_EMU_DELAY_US", "20000");
  const CUstream s = stream();
  const std::vector<unsigned char> first = pattern(n, 3), second = pattern(n, 4);
  std::vector<unsigned char> src = first, h(n, 0);
  ASSERT_EQ(d.cuMemcpyHtoDAsync_v2(a, src.data(), n, s), 0);
  src = second; // the caller reuses its buffer at once: the copy still sends `first`
  ASSERT_EQ(d.cuMemsetD8Async(b, 7, n, s), 0);
  ASSERT_EQ(d.cuMemcpyDtoDAsync_v2(b, a, n / 2, s), 0);
  ASSERT_EQ(d.cuMemcpyDtoHAsync_v2(h.data(), b, n, s), 0);
  ASSERT_EQ(d.cuStreamSynchronize(s), 0);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], i < n / 2 ? first[i] : 7) << "byte " << i;
  // A synchronous copy waits for the streams' pending work (legacy default-stream semantics).
  ASSERT_EQ(d.cuMemcpyHtoDAsync_v2(a, second.data(), n, s), 0);
  ASSERT_EQ(d.cuMemcpyDtoH_v2(h.data(), a, n), 0);
  EXPECT_EQ(h, second);
  // A destroyed stream's pending work still runs.
  ASSERT_EQ(d.cuMemsetD8Async(a, 9, n, s), 0);
  ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
  ASSERT_EQ(d.cuMemcpyDtoH_v2(h.data(), a, n), 0);
  EXPECT_EQ(h, std::vector<unsigned char>(n, 9));
  ASSERT_EQ(d.cuMemFree_v2(a), 0);
  ASSERT_EQ(d.cuMemFree_v2(b), 0);
}

TEST_F(CudaEmu, FreeWaitsForPendingWork) {
  // Like the real cuMemFree, which synchronizes: work queued on the memory still runs
  // on it (else it would find the memory freed: a sticky illegal address).
  const size_t n = 1 << 16;
  const CUdeviceptr a = alloc(n);
  ScopedEnv delay("KILN_EMU_DELAY_US", "50000");
  const CUstream s = stream();
  ASSERT_EQ(d.cuMemsetD8Async(a, 1, n, s), 0);
  ASSERT_EQ(d.cuMemFree_v2(a), 0);
  EXPECT_EQ(d.cuStreamQuery(s), 0);
  EXPECT_EQ(d.cuCtxSynchronize(), 0);
  ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
}

TEST_F(CudaEmu, LegacyStreamsAreSynchronous) {
  const size_t n = 1024;
  const CUdeviceptr a = alloc(n);
  ScopedEnv delay("KILN_EMU_DELAY_US", "100000");
  const CUstream s = stream();
  for (CUstream legacy : {CUstream{}, kLegacy, kPerThread}) {
    const unsigned char v = legacy == kLegacy ? 1 : legacy == kPerThread ? 2 : 3;
    std::vector<unsigned char> h(n, 0);
    ASSERT_EQ(d.cuMemsetD8Async(a, v, n, s), 0); // pending on s
    ASSERT_EQ(d.cuMemcpyDtoHAsync_v2(h.data(), a, n, legacy), 0); // waits for s, then copies
    EXPECT_EQ(h, std::vector<unsigned char>(n, v)) << "stream " << legacy;
    EXPECT_EQ(d.cuStreamQuery(legacy), 0);
  }
  ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
  ASSERT_EQ(d.cuMemFree_v2(a), 0);
}

TEST_F(CudaEmu, BadStreamAndEventHandles) {
  int bogus = 0;
  const auto bad_stream = reinterpret_cast<CUstream>(&bogus);
  const auto bad_event = reinterpret_cast<CUevent>(&bogus);
  CUstream s = nullptr;
  EXPECT_EQ(d.cuStreamCreate(&s, 4), kInvalidValue);
  EXPECT_EQ(d.cuStreamCreate(nullptr, 0), kInvalidValue);
  EXPECT_EQ(d.cuStreamDestroy_v2(bad_stream), kInvalidHandle);
  EXPECT_EQ(d.cuStreamSynchronize(bad_stream), kInvalidHandle);
  EXPECT_EQ(d.cuStreamQuery(bad_stream), kInvalidHandle);
  EXPECT_EQ(d.cuMemsetD8Async(0, 0, 1, bad_stream), kInvalidHandle);
  EXPECT_EQ(d.cuEventRecord(bad_event, nullptr), kInvalidHandle);
  EXPECT_EQ(d.cuEventSynchronize(bad_event), kInvalidHandle);
  EXPECT_EQ(d.cuEventDestroy_v2(bad_event), kInvalidHandle);
  ASSERT_EQ(d.cuStreamCreate(&s, 1), 0); // CU_STREAM_NON_BLOCKING
  ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
  EXPECT_EQ(d.cuStreamDestroy_v2(s), kInvalidHandle); // twice
}

TEST_F(CudaEmu, EventsTimeTheirStream) {
  const size_t n = 256;
  const CUdeviceptr a = alloc(n);
  ScopedEnv delay("KILN_EMU_DELAY_US", "60000");
  const CUstream s = stream(), s2 = stream();
  CUevent start = nullptr, end = nullptr, untimed = nullptr, never = nullptr;
  ASSERT_EQ(d.cuEventCreate(&start, 0), 0);
  ASSERT_EQ(d.cuEventCreate(&end, 0), 0);
  ASSERT_EQ(d.cuEventCreate(&untimed, 2), 0); // CU_EVENT_DISABLE_TIMING
  ASSERT_EQ(d.cuEventCreate(&never, 0), 0);
  ASSERT_EQ(d.cuEventRecord(start, s), 0);
  ASSERT_EQ(d.cuMemsetD8Async(a, 5, n, s), 0);
  ASSERT_EQ(d.cuEventRecord(end, s), 0);
  float ms = -1;
  EXPECT_EQ(d.cuEventElapsedTime(&ms, start, end), kNotReady);
  EXPECT_EQ(d.cuEventQuery(end), kNotReady);
  // Another stream waits for `end` before it reads the memset's result.
  std::vector<unsigned char> h(n, 0);
  ASSERT_EQ(d.cuStreamWaitEvent(s2, end, 0), 0);
  ASSERT_EQ(d.cuMemcpyDtoHAsync_v2(h.data(), a, n, s2), 0);
  ASSERT_EQ(d.cuEventSynchronize(end), 0);
  EXPECT_EQ(d.cuEventQuery(end), 0);
  ASSERT_EQ(d.cuEventElapsedTime(&ms, start, end), 0);
  EXPECT_GE(ms, 100.0f) << "two delayed operations lie between the events";
  EXPECT_LT(ms, 10000.0f);
  float ms2 = -1;
  ASSERT_EQ(d.cuEventElapsedTime_v2(&ms2, start, end), 0);
  EXPECT_EQ(ms2, ms);
  ASSERT_EQ(d.cuStreamSynchronize(s2), 0);
  EXPECT_EQ(h, std::vector<unsigned char>(n, 5));
  // Timing disabled, or never recorded: no elapsed time.
  ASSERT_EQ(d.cuEventRecord(untimed, nullptr), 0); // the legacy stream: complete at once
  EXPECT_EQ(d.cuEventQuery(untimed), 0);
  EXPECT_EQ(d.cuEventElapsedTime(&ms, start, untimed), kInvalidHandle);
  EXPECT_EQ(d.cuEventElapsedTime(&ms, start, never), kInvalidHandle);
  EXPECT_EQ(d.cuEventSynchronize(never), 0);
  for (CUevent e : {start, end, untimed, never}) EXPECT_EQ(d.cuEventDestroy_v2(e), 0);
  ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
  ASSERT_EQ(d.cuStreamDestroy_v2(s2), 0);
  ASSERT_EQ(d.cuMemFree_v2(a), 0);
}

// ---------------------------------------------------------------- modules

TEST_F(CudaEmu, ImagesOtherThanKilnSourceAreInvalid) {
  CUmodule m = nullptr;
  std::vector<unsigned char> junk = pattern(300, 9);
  for (auto& c : junk) c = c ? c : 1;
  junk.push_back(0);
  EXPECT_EQ(d.cuModuleLoadData(&m, junk.data()), kInvalidImage);
  const char elf[] = "\x7f" "ELF\x02\x01\x01";
  EXPECT_EQ(d.cuModuleLoadData(&m, elf), kInvalidImage); // a CUBIN
  EXPECT_EQ(d.cuModuleLoadData(&m, ".version 8.0\n.target sm_90\n.address_size 64\n"), kInvalidImage); // PTX
  EXPECT_EQ(d.cuModuleLoadData(&m, "//kiln-emu-source"), kInvalidImage); // no newline after the marker
  EXPECT_EQ(d.cuModuleLoadData(&m, nullptr), kInvalidValue);
  EXPECT_EQ(d.cuModuleLoadData(nullptr, kAffine.c_str()), kInvalidValue);
  int bogus = 0;
  CUfunction f = nullptr;
  EXPECT_EQ(d.cuModuleGetFunction(&f, reinterpret_cast<CUmodule>(&bogus), "x"), kInvalidHandle);
  EXPECT_EQ(d.cuModuleUnload(reinterpret_cast<CUmodule>(&bogus)), kInvalidHandle);
}

TEST_F(CudaEmu, CompileErrorIsInvalidSourceWithTheLog) {
  TempDir dir;
  ScopedEnv cache("KILN_EMU_CACHE", dir.path.c_str());
  CUmodule m = nullptr;
  const auto compiles = counters()[kCompiles];
  ::testing::internal::CaptureStderr();
  const CUresult r = d.cuModuleLoadData(&m, "//kiln-emu-source\nint kiln_emu_broken = undefined_thing_42;\n");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, kInvalidSource);
  EXPECT_NE(err.find("undefined_thing_42"), std::string::npos) << "the compiler's output is not on stderr:\n" << err;
  EXPECT_EQ(counters()[kCompiles], compiles) << "a failed compile is not a module compile";
  EXPECT_TRUE(fs::is_empty(dir.path)) << "temporary files were left in the cache";
}

TEST_F(CudaEmu, DiskCacheSkipsTheSecondCompile) {
  TempDir first, second;
  // A source no earlier run compiled: the first load must compile.
  const std::string src = kAffine + "// " + std::to_string(getpid()) + " " +
                          std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "\n";
  const auto c0 = counters()[kCompiles];
  CUmodule m1 = nullptr, m2 = nullptr, m3 = nullptr;
  {
    ScopedEnv cache("KILN_EMU_CACHE", first.path.c_str());
    m1 = load(src);
    EXPECT_EQ(counters()[kCompiles], c0 + 1);
    m2 = load(src);
    EXPECT_EQ(counters()[kCompiles], c0 + 1) << "the second load of the same source compiled again";
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(first.path)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u) << "one .so and no temporary files";
  EXPECT_EQ(files[0].extension(), ".so");
  CUfunction f1 = function(m1, "kiln_emu_affine"), f1again = function(m1, "kiln_emu_affine");
  EXPECT_EQ(f1, f1again);
  CUfunction missing = nullptr;
  EXPECT_EQ(d.cuModuleGetFunction(&missing, m1, "no_such_kernel"), kNotFound);
  // A cached file that does not load is compiled again.
  std::ofstream(fs::path(second.path) / files[0].filename()) << "not a shared library";
  {
    ScopedEnv cache("KILN_EMU_CACHE", second.path.c_str());
    m3 = load(src);
  }
  EXPECT_EQ(counters()[kCompiles], c0 + 2);
  // Every module works.
  const long long n = 100;
  std::vector<long long> x(n);
  for (long long i = 0; i < n; ++i) x[i] = i - 50;
  const CUdeviceptr in = upload(x), out = alloc(n * 8);
  for (CUmodule m : {m1, m2, m3}) {
    ASSERT_EQ(affine(function(m, "kiln_emu_affine"), in, out, n, 3, -4, nullptr), 0);
    const std::vector<long long> y = download(out, n);
    for (long long i = 0; i < n; ++i) ASSERT_EQ(y[i], 3 * x[i] - 4);
  }
  for (CUmodule m : {m1, m2, m3}) EXPECT_EQ(d.cuModuleUnload(m), 0);
  EXPECT_EQ(d.cuModuleUnload(m1), kInvalidHandle);
  EXPECT_EQ(affine(f1, in, out, n, 1, 1, nullptr), kInvalidHandle) << "a function of an unloaded module";
  free_all({in, out});
}

// ---------------------------------------------------------------- launches

TEST_F(CudaEmu, LaunchCopiesItsArgumentsAndChecksItsConfiguration) {
  const auto [m, f] = load_affine();
  const long long n = 1000;
  std::vector<long long> x(n);
  for (long long i = 0; i < n; ++i) x[i] = i * i - 7;
  const CUdeviceptr in = upload(x), out = alloc(n * 8);
  const auto launches = counters()[kLaunches];
  {
    ScopedEnv delay("KILN_EMU_DELAY_US", "100000");
    const CUstream s = stream();
    CUdeviceptr bin = in, bout = out;
    long long pn = n, pa = -2, pb = 5;
    void* args[] = {&bin, &bout, &pn, &pa, &pb};
    ASSERT_EQ(d.cuLaunchKernel(f, 3, 1, 1, 32, 1, 1, 0, s, args, nullptr), 0); // 96 threads, grid-stride
    bin = bout = 0, pn = pa = pb = 0; // the real driver copied them at the call: so must the emulator
    args[0] = args[1] = nullptr;
    std::vector<long long> y(n, 0);
    ASSERT_EQ(d.cuMemcpyDtoHAsync_v2(y.data(), out, n * 8, s), 0);
    if (kRacyReads) EXPECT_EQ(y[0], 0) << "the kernel ran before the stream got to it";
    ASSERT_EQ(d.cuStreamSynchronize(s), 0);
    for (long long i = 0; i < n; ++i) ASSERT_EQ(y[i], -2 * x[i] + 5) << i;
    ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
  }
  EXPECT_EQ(counters()[kLaunches], launches + 1);
  // Configurations kiln never uses, or the real driver rejects, are rejected at the call.
  CUdeviceptr bin = in, bout = out;
  long long pn = n, pa = 1, pb = 0;
  void* args[] = {&bin, &bout, &pn, &pa, &pb};
  void* extra[] = {nullptr};
  auto launch = [&](unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm,
                    void** params, void** ex) {
    return d.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, nullptr, params, ex);
  };
  EXPECT_EQ(launch(1, 1, 1, 0, 1, 1, 0, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 1025, 1, 1, 0, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(0, 1, 1, 32, 1, 1, 0, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(1, 2, 1, 32, 1, 1, 0, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 2, 32, 1, 1, 0, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 32, 2, 1, 0, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 32, 1, 2, 0, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 32, 1, 1, 16, args, nullptr), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 32, 1, 1, 0, args, extra), kInvalidValue);
  EXPECT_EQ(launch(1, 1, 1, 32, 1, 1, 0, nullptr, nullptr), kInvalidValue);
  int bogus = 0;
  EXPECT_EQ(d.cuLaunchKernel(reinterpret_cast<CUfunction>(&bogus), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr),
            kInvalidHandle);
  EXPECT_EQ(d.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(&bogus), args, nullptr), kInvalidHandle);
  EXPECT_EQ(launch(1, 1, 1, 1024, 1, 1, 0, args, nullptr), 0); // the largest block, on the legacy stream
  EXPECT_EQ(download(out, n), x);
  EXPECT_EQ(counters()[kLaunches], launches + 2);
  free_all({in, out});
  ASSERT_EQ(d.cuModuleUnload(m), 0);
}

TEST_F(CudaEmu, BadLaunchBufferIsAStickyIllegalAddress) {
  const auto [m, f] = load_affine();
  const long long n = 64;
  const CUdeviceptr in = upload(std::vector<long long>(n, 1)), out = alloc(n * 8);
  ASSERT_EQ(d.cuMemFree_v2(in), 0);
  const CUstream s = stream();
  CUevent e = nullptr;
  ASSERT_EQ(d.cuEventCreate(&e, 0), 0);
  ASSERT_EQ(affine(f, in, out, n, 1, 0, s), 0) << "found when the stream runs the launch, not at the call";
  EXPECT_EQ(d.cuStreamSynchronize(s), kIllegalAddress);
  // The error is sticky: every later synchronization and submission returns it.
  EXPECT_EQ(d.cuCtxSynchronize(), kIllegalAddress);
  EXPECT_EQ(d.cuStreamSynchronize(s), kIllegalAddress);
  EXPECT_EQ(d.cuStreamQuery(s), kIllegalAddress);
  EXPECT_EQ(d.cuEventSynchronize(e), kIllegalAddress);
  EXPECT_EQ(d.cuEventRecord(e, s), kIllegalAddress);
  long long h = 0;
  EXPECT_EQ(d.cuMemcpyDtoH_v2(&h, out, 8), kIllegalAddress);
  EXPECT_EQ(d.cuMemcpyHtoDAsync_v2(out, &h, 8, s), kIllegalAddress);
  EXPECT_EQ(affine(f, out, out, n, 1, 0, s), kIllegalAddress);
  // Cleaning up still works; the last release of the primary context resets it.
  EXPECT_EQ(d.cuEventDestroy_v2(e), 0);
  EXPECT_EQ(d.cuStreamDestroy_v2(s), 0);
  reset_context();
  EXPECT_EQ(d.cuCtxSynchronize(), 0);
  EXPECT_EQ(d.cuMemcpyDtoH_v2(&h, out, 8), 0);
  // A host address (no device tag) and an address past the allocation are illegal too.
  std::vector<long long> host(n);
  const auto host_address = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(host.data()));
  for (const CUdeviceptr bad : {host_address, out + n * 8}) {
    ASSERT_EQ(affine(f, bad, out, n, 1, 0, nullptr), 0);
    EXPECT_EQ(d.cuCtxSynchronize(), kIllegalAddress) << std::hex << bad;
    reset_context();
  }
  EXPECT_EQ(d.cuCtxSynchronize(), 0);
  ASSERT_EQ(d.cuMemFree_v2(out), 0);
  ASSERT_EQ(d.cuModuleUnload(m), 0);
}

Tensor values(IntList shape, unsigned seed) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (float& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = static_cast<float>(static_cast<double>(x >> 11) / 9007199254740992.0 * 4.0 - 2.0);
  }
  return from_vector(v, shape);
}

TEST_F(CudaEmu, KilnKernelsMatchTheCpuBitwise) {
  // An elementwise chain, a row softmax (the row kernel: shuffles) and a matmul (the tiled
  // GEMM: __shared__ and __syncthreads), emitted as CUDA and run by the emulator.
  const Tensor x = values({5, 37}, 1), z = values({33, 70}, 2), a = values({64, 48}, 3), b = values({48, 40}, 4);
  const std::vector<Tensor> outs = {exp(x * 2 + 1), F::softmax(z, 1), matmul(a, b)};
  std::vector<const graph::Node*> nodes;
  for (const Tensor& t : outs) nodes.push_back(t.node().get());
  const codegen::Schedule sched = codegen::schedule(nodes, {true, codegen::Target::cuda(9, 0)});
  ASSERT_FALSE(sched.launches.empty());
  std::string source = "//kiln-emu-source\n";
  std::set<std::string> names;
  int tiled = 0, rows = 0;
  for (const codegen::KernelLaunch& l : sched.launches) {
    if (!names.insert(l.kernel.name).second) continue;
    const std::string cuda = codegen::emit_cuda(l.kernel);
    tiled += cuda.find("__syncthreads()") != std::string::npos;
    rows += cuda.find("__shfl_down_sync") != std::string::npos;
    source += cuda + codegen::emit_cuda_shim_entry(l.kernel);
  }
  EXPECT_GT(tiled, 0) << "no tiled GEMM in the schedule";
  EXPECT_GT(rows, 0) << "no row kernel in the schedule";
  const CUmodule m = load(source);
  ASSERT_NE(m, nullptr);

  ScopedEnv delay("KILN_EMU_DELAY_US", "2000");
  const CUstream s = stream();
  const auto launches = counters()[kLaunches];
  std::map<const graph::Node*, CUdeviceptr> dev;
  auto buffer_of = [&](const graph::Node* n) -> CUdeviceptr {
    if (auto it = dev.find(n); it != dev.end()) return it->second;
    const graph::Storage& st = *n->realized();
    const CUdeviceptr p = dev[n] = alloc(st.bytes());
    EXPECT_EQ(d.cuMemcpyHtoDAsync_v2(p, st.data(), st.bytes(), s), 0);
    return p;
  };
  int launched = 0;
  for (const codegen::KernelLaunch& l : sched.launches) {
    std::vector<CUdeviceptr> bufs;
    for (const graph::Node* in : l.inputs) bufs.push_back(buffer_of(in));
    for (const graph::Node* o : l.outputs) bufs.push_back(dev[o] = alloc(static_cast<size_t>(o->numel()) * dtype_size(o->dtype)));
    std::vector<long long> params(l.params.begin(), l.params.end());
    std::vector<void*> args;
    for (CUdeviceptr& p : bufs) args.push_back(&p);
    for (long long& p : params) args.push_back(&p);
    const codegen::CudaLaunchConfig cfg = codegen::cuda_launch_config(l.kernel, l.params);
    if (cfg.grid == 0) continue;
    const CUfunction f = function(m, l.kernel.name);
    ASSERT_EQ(d.cuLaunchKernel(f, cfg.grid, 1, 1, cfg.block, 1, 1, 0, s, args.data(), nullptr), 0) << l.kernel.name;
    ++launched;
    std::fill(bufs.begin(), bufs.end(), 0); // the arguments were copied at the call
    std::fill(params.begin(), params.end(), -1);
  }
  EXPECT_EQ(counters()[kLaunches], launches + launched);
  std::vector<std::vector<unsigned char>> got;
  for (const Tensor& t : outs) {
    got.emplace_back(static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
    ASSERT_EQ(d.cuMemcpyDtoHAsync_v2(got.back().data(), dev.at(t.node().get()), got.back().size(), s), 0);
  }
  ASSERT_EQ(d.cuStreamSynchronize(s), 0);

  realize(outs); // the CPU (LLVM) path
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto* cpu = static_cast<const unsigned char*>(outs[i].node()->realized()->data());
    ASSERT_EQ(got[i].size(), outs[i].numel() * sizeof(float));
    size_t bad = 0;
    for (size_t k = 0; k < got[i].size(); k += 4) {
      float e, c;
      std::memcpy(&e, &got[i][k], 4);
      std::memcpy(&c, cpu + k, 4);
      if (std::memcmp(&e, &c, 4) != 0 && ++bad <= 5)
        ADD_FAILURE() << "output " << i << " " << outs[i].type_str() << " element " << k / 4 << ": emulator " << e
                      << " vs cpu " << c;
    }
    EXPECT_EQ(bad, 0u) << "output " << i;
  }
  for (auto& [n, p] : dev) EXPECT_EQ(d.cuMemFree_v2(p), 0);
  ASSERT_EQ(d.cuStreamDestroy_v2(s), 0);
  ASSERT_EQ(d.cuModuleUnload(m), 0);
}

// ---------------------------------------------------------------- threads

TEST_F(CudaEmu, HostThreadsShareTheDevice) {
  const auto [m, f] = load_affine();
  const auto before = counters();
  constexpr int kThreads = 4, kRounds = 12;
  constexpr long long n = 3000;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::string& fail = failures[static_cast<size_t>(t)];
      auto check = [&](CUresult r, const char* what) {
        if (r != 0 && fail.empty()) fail = std::string(what) + " returned " + std::to_string(r);
        return r == 0;
      };
      if (!check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")) return;
      CUmodule own = nullptr; // the same source loaded again, concurrently: a cache hit
      check(d.cuModuleLoadData(&own, kAffine.c_str()), "cuModuleLoadData");
      CUstream s = nullptr;
      check(d.cuStreamCreate(&s, 0), "cuStreamCreate");
      std::vector<long long> x(n), y(n);
      for (int r = 0; r < kRounds; ++r) {
        CUdeviceptr in = 0, out = 0;
        if (!check(d.cuMemAlloc_v2(&in, n * 8), "cuMemAlloc_v2") || !check(d.cuMemAlloc_v2(&out, n * 8), "cuMemAlloc_v2"))
          return;
        for (long long i = 0; i < n; ++i) x[i] = i * (t + 1) + r;
        long long pn = n, pa = t + 2, pb = r;
        void* args[] = {&in, &out, &pn, &pa, &pb};
        check(d.cuMemcpyHtoDAsync_v2(in, x.data(), n * 8, s), "cuMemcpyHtoDAsync_v2");
        check(d.cuLaunchKernel(f, 4, 1, 1, 64, 1, 1, 0, s, args, nullptr), "cuLaunchKernel");
        check(d.cuMemcpyDtoHAsync_v2(y.data(), out, n * 8, s), "cuMemcpyDtoHAsync_v2");
        check(d.cuStreamSynchronize(s), "cuStreamSynchronize");
        for (long long i = 0; i < n && fail.empty(); ++i)
          if (y[i] != (t + 2) * x[i] + r) fail = "wrong value in round " + std::to_string(r);
        check(d.cuMemFree_v2(in), "cuMemFree_v2");
        check(d.cuMemFree_v2(out), "cuMemFree_v2");
      }
      check(d.cuStreamDestroy_v2(s), "cuStreamDestroy_v2");
      check(d.cuModuleUnload(own), "cuModuleUnload");
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[static_cast<size_t>(t)], "") << "thread " << t;
  const auto after = counters();
  EXPECT_EQ(after[kLaunches], before[kLaunches] + kThreads * kRounds);
  EXPECT_EQ(after[kAllocCalls], before[kAllocCalls] + 2 * kThreads * kRounds);
  EXPECT_EQ(after[kCompiles], before[kCompiles]);
  ASSERT_EQ(d.cuModuleUnload(m), 0);
}

} // namespace
} // namespace kiln

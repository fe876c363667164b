#include "runtime/cuda_runtime.h"

#include <chrono>
#include <cstdio>

#include "codegen/cuda_emitter.h"
#include "codegen/nvrtc.h"
#include "kiln/error.h"
#include "kiln/options.h"
#include "runtime/cuda_driver.h"
#include "runtime/observe.h"
#include "runtime/poll.h"

namespace kiln::runtime {

namespace {

constexpr size_t kGranule = 512; // allocation rounding: cuMemAlloc aligns to 256 at least
constexpr unsigned kStreamFlags = 0; // CU_STREAM_DEFAULT: the legacy stream's synchronous copies wait for it
constexpr const char* kEmulatorMarker = "//kiln-emu-source\n";

constexpr unsigned kEventDisableTiming = 2; // CU_EVENT_DISABLE_TIMING
constexpr CUresult kNotReady = 600;         // CUDA_ERROR_NOT_READY

CUdeviceptr as_dptr(const void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

// Between polls of a watched wait: yields for the first millisecond (an NCCL collective that
// is about to finish), then sleeps a little longer each time, up to 1 ms (runtime/poll.h).
constexpr std::chrono::milliseconds kWatchYieldFor{1};

} // namespace

std::string bind_cuda_api(void* h, CudaApi& a) {
  std::string missing;
  bind_symbol(h, a.GetErrorName, "cuGetErrorName", missing);
  bind_symbol(h, a.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", missing);
  bind_symbol(h, a.CtxSetCurrent, "cuCtxSetCurrent", missing);
  bind_symbol(h, a.MemAlloc, "cuMemAlloc_v2", missing);
  bind_symbol(h, a.MemFree, "cuMemFree_v2", missing);
  bind_symbol(h, a.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", missing);
  bind_symbol(h, a.MemcpyDtoH, "cuMemcpyDtoH_v2", missing);
  bind_symbol(h, a.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", missing);
  bind_symbol(h, a.StreamCreate, "cuStreamCreate", missing);
  bind_symbol(h, a.StreamSynchronize, "cuStreamSynchronize", missing);
  bind_symbol(h, a.EventCreate, "cuEventCreate", missing);
  bind_symbol(h, a.EventRecord, "cuEventRecord", missing);
  bind_symbol(h, a.EventSynchronize, "cuEventSynchronize", missing);
  bind_symbol(h, a.EventQuery, "cuEventQuery", missing);
  bind_symbol(h, a.EventElapsedTime, "cuEventElapsedTime", missing);
  bind_symbol(h, a.EventDestroy, "cuEventDestroy_v2", missing);
  bind_symbol(h, a.ModuleLoadData, "cuModuleLoadData", missing);
  bind_symbol(h, a.ModuleGetFunction, "cuModuleGetFunction", missing);
  bind_symbol(h, a.LaunchKernel, "cuLaunchKernel", missing);
  return missing;
}

// ---------------------------------------------------------------- storage

/// A block of device memory from a Gpu's caching allocator.
class DeviceStorage final : public graph::Storage {
public:
  DeviceStorage(Gpu& gpu, CUdeviceptr p, size_t bytes, size_t size) : gpu_(gpu), p_(p), bytes_(bytes), size_(size) {}
  ~DeviceStorage() override { gpu_.give_back(data(), size_); }
  void* data() const override { return reinterpret_cast<void*>(static_cast<uintptr_t>(p_)); }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return gpu_.device(); }

private:
  Gpu& gpu_;
  CUdeviceptr p_;
  size_t bytes_, size_;
};

// ---------------------------------------------------------------- set-up

Gpu& Gpu::get(int index) {
  static std::mutex mu;
  // Never destroyed (nor the map, which keeps them reachable for LeakSanitizer): storages
  // may be freed during static destruction.
  static auto* gpus = new std::map<int, Gpu*>;
  std::lock_guard lock(mu);
  if (auto it = gpus->find(index); it != gpus->end()) return *it->second;
  Gpu* g = new Gpu(index);
  (*gpus)[index] = g;
  return *g;
}

Gpu::Gpu(int index) {
  const DriverProbe& probe = cuda_driver();
  const std::string name = "cuda:" + std::to_string(index);
  if (!probe.reason.empty()) throw Error("device", "cannot use " + name + ": " + probe.reason);
  if (index < 0 || static_cast<size_t>(index) >= probe.devices.size())
    throw Error("device", "no CUDA device " + name + " (the driver sees " + std::to_string(probe.devices.size()) + ")");
  info_ = probe.devices[static_cast<size_t>(index)];
  emulator_ = probe.emulator;
  void* h = dlopen(probe.library.c_str(), RTLD_NOW | RTLD_LOCAL); // already loaded by the probe
  if (!h) throw Error("device", "cannot load the CUDA driver " + probe.library);
  if (std::string missing = bind_cuda_api(h, api_); !missing.empty())
    throw Error("device", "the CUDA driver " + probe.library + " lacks" + missing);
  check(api_.DevicePrimaryCtxRetain(&ctx_, index), "cuDevicePrimaryCtxRetain");
  make_current();
  check(api_.StreamCreate(&stream_, kStreamFlags), "cuStreamCreate");
  arch_ = "sm_" + std::to_string(info_.cc_major) + std::to_string(info_.cc_minor);
}

void Gpu::make_current() {
  thread_local CUcontext current = nullptr;
  if (current == ctx_) return;
  check(api_.CtxSetCurrent(ctx_), "cuCtxSetCurrent");
  current = ctx_;
}

void Gpu::check(CUresult r, const std::string& what) {
  if (r == 0) return;
  std::string msg = what + " failed on " + device().str() + ": " + cuda_error_text(api_.GetErrorName, r);
  if (r == 700 || r == 719 || r == 716 || r == 999) // illegal address, launch failure, misaligned, unknown
    msg += options().launch_blocking ? "" : " (a queued kernel failed; KILN_LAUNCH_BLOCKING=1 names it)";
  throw Error("cuda", msg);
}

// ---------------------------------------------------------------- memory

std::shared_ptr<graph::Storage> Gpu::allocate(size_t bytes) {
  const size_t size = std::max(kGranule, (bytes + kGranule - 1) / kGranule * kGranule);
  std::lock_guard lock(mem_mu_);
  auto note_use = [&](size_t block) {
    stats_.bytes_in_use += block;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.bytes_in_use);
  };
  if (auto it = free_.lower_bound(size); it != free_.end() && it->first <= size + size / 4) { // <= 25% waste
    const auto [got, p] = *it;
    stats_.bytes_cached -= got;
    free_.erase(it);
    note_use(got);
    return std::make_shared<DeviceStorage>(*this, p, bytes, got);
  }
  make_current();
  CUdeviceptr p = 0;
  CUresult r = api_.MemAlloc(&p, size);
  if (r == 2 && !free_.empty()) { // CUDA_ERROR_OUT_OF_MEMORY: return the cache to the driver and retry
    free_cached_locked();
    r = api_.MemAlloc(&p, size);
  }
  if (r == 2)
    throw OutOfMemoryError("cuda", "out of device memory on " + device().str() + ": cannot allocate " +
                                       detail::bytes_str(bytes) + ", " + detail::bytes_str(stats_.bytes_in_use) +
                                       " in use by tensors",
                           bytes);
  check(r, "cuMemAlloc of " + std::to_string(size) + " bytes");
  ++stats_.fresh_allocations;
  note_use(size);
  return std::make_shared<DeviceStorage>(*this, p, bytes, size);
}

void Gpu::give_back(void* p, size_t size) {
  // Queued kernels may still use the block: it is only handed to later work on the same
  // stream (or freed after a synchronization), so stream order keeps that safe.
  std::lock_guard lock(mem_mu_);
  stats_.bytes_in_use -= size;
  stats_.bytes_cached += size;
  free_.emplace(size, as_dptr(p));
}

void Gpu::free_cached_locked() {
  wait_stream("cuStreamSynchronize");
  for (auto& [size, p] : free_) check(api_.MemFree(p), "cuMemFree");
  free_.clear();
  stats_.bytes_cached = 0;
}

void Gpu::release_cached_memory() {
  std::lock_guard lock(mem_mu_);
  free_cached_locked();
}

AllocatorStats Gpu::memory_stats() {
  std::lock_guard lock(mem_mu_);
  return stats_;
}

void Gpu::upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  // Queued on the stream: the driver stages pageable memory before returning, so `src`
  // may be reused at once, and the host does not wait for the stream's queued kernels
  // (the synchronous cuMemcpyHtoD would).
  if (observe::tracing()) trace_begin("copy", "upload " + std::to_string(bytes) + " B");
  check(api_.MemcpyHtoDAsync(as_dptr(dst), src, bytes, stream_), "cuMemcpyHtoDAsync of " + std::to_string(bytes) + " bytes");
  if (observe::tracing()) trace_end();
}

void Gpu::download(void* dst, const void* src, size_t bytes) {
  wait_stream("cuStreamSynchronize before a device-to-host copy");
  if (bytes) check(api_.MemcpyDtoH(dst, as_dptr(src), bytes), "cuMemcpyDtoH of " + std::to_string(bytes) + " bytes");
  drain_device_spans();
}

void Gpu::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  make_current();
  if (observe::tracing()) trace_begin("copy", "device copy " + std::to_string(bytes) + " B");
  check(api_.MemcpyDtoDAsync(as_dptr(dst), as_dptr(src), bytes, stream_), "cuMemcpyDtoDAsync");
  if (observe::tracing()) trace_end();
}

void Gpu::synchronize() {
  wait_stream("cuStreamSynchronize");
  drain_device_spans();
}

void Gpu::set_watch(Watch watch) { watch_.store(watch); }

void Gpu::await_watched() {
  const Watch watch = watch_.load();
  if (!watch) return;
  for (const auto start = std::chrono::steady_clock::now(); watch(*this);) back_off(start, kWatchYieldFor);
}

void Gpu::wait_stream(const std::string& what) {
  await_watched();
  make_current();
  check(api_.StreamSynchronize(stream_), what);
}

CUevent Gpu::mark() {
  make_current();
  CUevent e = nullptr;
  check(api_.EventCreate(&e, kEventDisableTiming), "cuEventCreate");
  if (CUresult r = api_.EventRecord(e, stream_); r != 0) {
    api_.EventDestroy(e);
    check(r, "cuEventRecord");
  }
  return e;
}

bool Gpu::passed(CUevent mark) {
  make_current();
  return api_.EventQuery(mark) != kNotReady;
}

void Gpu::release(CUevent mark) {
  make_current();
  api_.EventDestroy(mark);
}

// Records the start event of a device span (the caller made the context current).
void Gpu::trace_begin(const char* cat, const std::string& name) {
  std::lock_guard lock(trace_mu_);
  if (!origin_) { // the time base: an event the host sees complete
    wait_stream("cuStreamSynchronize");
    check(api_.EventCreate(&origin_, 0), "cuEventCreate");
    check(api_.EventRecord(origin_, stream_), "cuEventRecord");
    check(api_.EventSynchronize(origin_), "cuEventSynchronize");
    origin_host_ = observe::Clock::now();
  }
  DeviceSpan s{cat, name};
  check(api_.EventCreate(&s.start, 0), "cuEventCreate");
  check(api_.EventRecord(s.start, stream_), "cuEventRecord");
  device_spans_.push_back(std::move(s));
}

// Records the stop event of the span trace_begin() opened.
void Gpu::trace_end() {
  std::lock_guard lock(trace_mu_);
  DeviceSpan& s = device_spans_.back();
  check(api_.EventCreate(&s.stop, 0), "cuEventCreate");
  check(api_.EventRecord(s.stop, stream_), "cuEventRecord");
}

// After a synchronization: every recorded span becomes a trace event on this GPU's track.
void Gpu::drain_device_spans() {
  std::lock_guard lock(trace_mu_);
  for (DeviceSpan& s : device_spans_) {
    float a = 0, b = 0;
    if (s.stop && api_.EventElapsedTime(&a, origin_, s.start) == 0 &&
        api_.EventElapsedTime(&b, origin_, s.stop) == 0) {
      auto at = [&](float ms) {
        return origin_host_ + std::chrono::duration_cast<observe::Clock::duration>(std::chrono::duration<double, std::milli>(ms));
      };
      observe::device_span(s.cat, std::move(s.name), device().str(), at(a), at(b));
    }
    api_.EventDestroy(s.start);
    if (s.stop) api_.EventDestroy(s.stop);
  }
  device_spans_.clear();
}

double Gpu::time_ms(const std::function<void()>& work) {
  make_current();
  CUevent start = nullptr, stop = nullptr;
  check(api_.EventCreate(&start, 0), "cuEventCreate");
  check(api_.EventCreate(&stop, 0), "cuEventCreate");
  check(api_.EventRecord(start, stream_), "cuEventRecord");
  work();
  check(api_.EventRecord(stop, stream_), "cuEventRecord");
  await_watched();
  check(api_.EventSynchronize(stop), "cuEventSynchronize");
  float ms = 0;
  check(api_.EventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
  api_.EventDestroy(start);
  api_.EventDestroy(stop);
  return ms;
}

// ---------------------------------------------------------------- kernels

CudaBinary cuda_binary(const std::string& source, const std::string& name, const std::string& arch,
                       codegen::DiskCache& cache, std::mutex& cache_mu) {
  const std::string key = "cuda " + arch + " nvrtc " + codegen::nvrtc_version() + "\n" + source;
  {
    std::lock_guard lock(cache_mu);
    if (cache.enabled())
      if (auto image = cache.read(key, [](const std::string& bin) { return !bin.empty(); })) return {*image, true, 0};
  }
  codegen::CompileResult r;
  try {
    r = codegen::nvrtc_compile(source, name, arch);
  } catch (const Error&) { // an NVRTC older than the GPU: PTX for the driver to JIT
    r = codegen::nvrtc_compile(source, name, "compute_" + arch.substr(3));
    r.binary.push_back('\0'); // cuModuleLoadData reads PTX as a C string
  }
  std::lock_guard lock(cache_mu);
  cache.write(key, r.binary);
  return {r.binary, false, r.ms};
}

std::string Gpu::compile_image(const codegen::Kernel& k, const std::string& source, Source& from) {
  from = Source::Compiled;
  if (emulator_) // the emulator compiles the source itself (and caches what it builds)
    return kEmulatorMarker + source + codegen::emit_cuda_shim_entry(k);
  {
    std::lock_guard lock(disk_mu_);
    if (disk_dir_ != options().cache_dir) {
      disk_dir_ = options().cache_dir;
      disk_.open(disk_dir_.empty() ? "" : disk_dir_ + "/cuda");
    }
  }
  const CudaBinary b = cuda_binary(source, k.name + ".cu", arch_, disk_, disk_mu_);
  if (b.from_disk) from = Source::Disk;
  else if (options().debug >= 1)
    std::fprintf(stderr, "[kiln] nvrtc compiled %s for %s in %.2f ms\n", k.name.c_str(), arch_.c_str(), b.compile_ms);
  return b.image;
}

CUfunction Gpu::kernel(const codegen::Kernel& k, Source& source) {
  {
    std::lock_guard lock(kernel_mu_);
    if (auto it = kernels_.find(k.name); it != kernels_.end()) {
      source = Source::Memory;
      return it->second;
    }
  }
  const std::string text = codegen::emit_cuda(k);
  const std::string image = compile_image(k, text, source); // outside the lock: kernels compile in parallel
  make_current();
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  check(api_.ModuleLoadData(&mod, image.c_str()), "cuModuleLoadData of " + k.name);
  check(api_.ModuleGetFunction(&fn, mod, k.name.c_str()), "cuModuleGetFunction of " + k.name);
  std::lock_guard lock(kernel_mu_);
  return kernels_.emplace(k.name, fn).first->second; // a racing thread's copy wins; both are valid
}

codegen::Target Gpu::target() const {
  return codegen::Target::cuda(info_.cc_major, info_.cc_minor, info_.sm_count, info_.max_threads_per_sm,
                               info_.shared_memory_per_block);
}

codegen::CudaLaunchConfig Gpu::launch_config(const codegen::Kernel& k, const std::vector<int64_t>& params) const {
  return codegen::cuda_launch_config(k, params, {info_.sm_count, info_.max_threads_per_sm});
}

void Gpu::launch(CUfunction fn, const std::string& name, const codegen::CudaLaunchConfig& c,
                 const std::vector<void*>& buffers, const std::vector<int64_t>& params) {
  if (c.grid == 0) return;
  std::vector<CUdeviceptr> ptrs;
  for (void* b : buffers) ptrs.push_back(as_dptr(b));
  std::vector<long long> values(params.begin(), params.end());
  std::vector<void*> args;
  for (CUdeviceptr& p : ptrs) args.push_back(&p);
  for (long long& v : values) args.push_back(&v);
  make_current();
  const bool traced = observe::tracing();
  if (traced) trace_begin("gpu", name);
  check(api_.LaunchKernel(fn, c.grid, 1, 1, c.block, 1, 1, 0, stream_, args.data(), nullptr),
        "cuLaunchKernel of " + name + " (grid " + std::to_string(c.grid) + ", block " + std::to_string(c.block) + ")");
  if (traced) trace_end();
  if (options().launch_blocking) wait_stream("kernel " + name);
}

} // namespace kiln::runtime

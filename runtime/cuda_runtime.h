#pragma once
/// \file cuda_runtime.h
/// kiln's GPU runtime on the CUDA driver API: one Gpu per device in use, holding the
/// device's primary context, one stream on which every kernel and device-to-device copy
/// is queued (so work runs in program order without events), a caching allocator on
/// cuMemAlloc (no managed memory) and the kernels loaded so far.
///
/// Kernels: the CUDA emitter's source compiled by NVRTC to CUBIN for the device's
/// architecture (PTX for compute_XY when NVRTC does not know sm_XY; the driver then
/// JIT-compiles it), cached in memory by kernel name and on disk under
/// options().cache_dir + "/cuda" keyed by source, architecture and NVRTC version. Under
/// kiln's CPU emulator of the driver (tests/cuda_emu) the module image is the source.
///
/// Synchronization happens only where the host needs a value: download() waits for the
/// queued work first; uploads are queued too (the driver stages the host memory). With
/// options().launch_blocking every launch is waited for. Every host wait on the stream goes
/// through wait_stream(), which first polls the device's watch (set_watch): queued work that
/// depends on other processes (NCCL collectives, runtime/nccl.h) and so may never complete is
/// waited for by polling, so that its owner can abort it and throw instead of the host
/// blocking in the driver for ever.

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/disk_cache.h"
#include "codegen/llvm_jit.h"
#include "codegen/target.h"
#include "codegen/kernel_ir.h"
#include "graph/node.h"
#include "kiln/devices.h"
#include "runtime/cuda_api.h"
#include "runtime/storage.h"

namespace kiln::runtime {

/// What cuda_binary() produced.
struct CudaBinary {
  std::string image;      ///< CUBIN, or NUL-terminated PTX (for cuModuleLoadData)
  bool from_disk = false; ///< read from the cache rather than compiled
  double compile_ms = 0;  ///< NVRTC's time when compiled
};

/// The binary of CUDA `source` (file name `name` in messages) for `arch` ("sm_90"): from
/// `cache` when it holds a valid entry (keyed by source, arch and NVRTC's version), else
/// compiled by NVRTC to CUBIN, or to PTX for compute_XY when NVRTC rejects sm_XY (an
/// NVRTC older than the GPU), and stored in the cache. `cache_mu` guards the cache (NVRTC
/// runs outside it, so that kernels compile in parallel).
CudaBinary cuda_binary(const std::string& source, const std::string& name, const std::string& arch,
                       codegen::DiskCache& cache, std::mutex& cache_mu);

/// One CUDA device in use. Thread-safe.
class Gpu {
public:
  /// The GPU cuda:`index`, set up on first use (never destroyed). Throws kiln::Error
  /// saying why when CUDA is unusable or there is no such device.
  static Gpu& get(int index);

  /// cuda:N.
  Device device() const { return {Device::Kind::CUDA, info_.index}; }
  /// What the driver reports about it.
  const DeviceInfo& info() const { return info_; }
  /// True when this is kiln's CPU emulator of the driver (tests).
  bool emulator() const { return emulator_; }
  /// The device as a scheduling target (compute capability, SMs, threads per SM, shared
  /// memory per block): what its kernels are planned for (codegen/form.h).
  codegen::Target target() const;

  /// At least `bytes` of device memory (from the cache when a freed block fits). When
  /// cuMemAlloc fails, the cached blocks are freed and it is tried once more; then
  /// kiln::Error ("out of device memory ...").
  std::shared_ptr<graph::Storage> allocate(size_t bytes);
  /// Host -> device, queued on the stream (host_src may be reused when it returns).
  void upload(void* device_dst, const void* host_src, size_t bytes);
  /// Device -> host after all queued work: synchronizes (and reports a failed kernel).
  void download(void* host_dst, const void* device_src, size_t bytes);
  /// Device -> device, queued on the stream.
  void copy(void* device_dst, const void* device_src, size_t bytes);
  /// Waits for all queued work; throws kiln::Error naming the failure if any failed.
  void synchronize();

  /// Where kernel() found a kernel's code (the CPU JIT's three answers).
  using Source = codegen::LlvmJit::Source;
  /// The loaded kernel `k` (finalize()d), compiled or read from the caches.
  CUfunction kernel(const codegen::Kernel& k, Source& source);
  /// The launch configuration of k for these parameter values on this GPU
  /// (codegen::cuda_launch_config with the device's limits).
  codegen::CudaLaunchConfig launch_config(const codegen::Kernel& k, const std::vector<int64_t>& params) const;
  /// Queues kernel `name` (loaded as `fn`) on the stream in configuration `c`, with the
  /// buffers' device addresses (inputs, then the output) and its i64 parameters.
  void launch(CUfunction fn, const std::string& name, const codegen::CudaLaunchConfig& c,
              const std::vector<void*>& buffers, const std::vector<int64_t>& params);

  /// The caching allocator's counters.
  AllocatorStats memory_stats();
  /// Frees every cached block (waits for queued work first).
  void release_cached_memory();

  /// The events API, for benchmarks: milliseconds the stream spends on `work`.
  double time_ms(const std::function<void()>& work);

  /// The raw stream and API (benchmarks comparing with cuBLAS).
  CUstream stream() const { return stream_; }
  /// The driver functions in use.
  const CudaApi& api() const { return api_; }

  /// Markers in the stream's queue: mark() records one after the work queued so far (an event
  /// without timing); passed() says without waiting whether the stream reached it (true also
  /// when the context failed: a wait then reports that); release() frees it (also before the
  /// stream reached it).
  CUevent mark();
  /// See mark().
  bool passed(CUevent mark);
  /// See mark().
  void release(CUevent mark);

  /// A poll of queued work that may never complete: true while some is pending; throws
  /// kiln::Error when it cannot complete (it is then no longer pending).
  using Watch = bool (*)(Gpu&);
  /// Sets the one watch of this device (NCCL's watchdog sets it with its communicator).
  void set_watch(Watch watch);
  /// Polls the watch until it has nothing pending (returns at once when none is set).
  void await_watched();

  /// Makes the device's primary context current on the calling thread (once per thread):
  /// what a library queueing work on stream() itself needs first (NCCL).
  void make_current();

private:
  explicit Gpu(int index);
  void check(CUresult r, const std::string& what);
  void wait_stream(const std::string& what);
  std::string compile_image(const codegen::Kernel& k, const std::string& source, Source& from);
  void free_cached_locked();
  void give_back(void* p, size_t size);
  void trace_begin(const char* cat, const std::string& name);
  void trace_end();
  void drain_device_spans();
  friend class DeviceStorage;

  // KILN_TRACE's device-time track: events recorded around each queued operation while
  // a trace records, turned into spans once the stream passed them (drain_device_spans,
  // at every synchronization). `origin_` is an event the host saw complete at `origin_host_`.
  struct DeviceSpan {
    const char* cat;
    std::string name;
    CUevent start = nullptr, stop = nullptr;
  };
  std::mutex trace_mu_;
  std::vector<DeviceSpan> device_spans_;
  CUevent origin_ = nullptr;
  std::chrono::steady_clock::time_point origin_host_;

  CudaApi api_;
  DeviceInfo info_;
  bool emulator_ = false; // modules are loaded from CUDA source (the driver probe says)
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::string arch_; // "sm_90"
  std::atomic<Watch> watch_{nullptr};

  std::mutex mem_mu_;
  std::multimap<size_t, CUdeviceptr> free_; // cached blocks by rounded size
  AllocatorStats stats_;

  std::mutex kernel_mu_;
  std::unordered_map<std::string, CUfunction> kernels_;
  std::mutex disk_mu_; // the disk cache (not thread-safe)
  codegen::DiskCache disk_{".cubin"};
  std::string disk_dir_ = "\x01unset";
};

} // namespace kiln::runtime

// The CUDA driver through dlopen (see cuda_driver.h). The few entry points are declared
// here with their C signatures from the driver API's documentation (CUresult and
// CUdevice are ints, the attributes are values of CUdevice_attribute); no CUDA header
// is needed.
#include "runtime/cuda_driver.h"

#include "runtime/cuda_api.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "codegen/nvrtc.h"
#include "kiln/error.h"

namespace kiln::runtime {

namespace {


constexpr CUresult kStubLibrary = 34; // CUDA_ERROR_STUB_LIBRARY
constexpr CUresult kNoDevice = 100;   // CUDA_ERROR_NO_DEVICE
constexpr int kAttrSmCount = 16;      // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrThreadsPerSm = 39; // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
constexpr int kAttrSharedPerBlock = 8; // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
constexpr int kAttrCcMajor = 75;      // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;      // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

/// The driver entry points the probe uses.
struct Api {
  CUresult (*Init)(unsigned) = nullptr;
  CUresult (*DriverGetVersion)(int*) = nullptr;
  CUresult (*DeviceGetCount)(int*) = nullptr;
  CUresult (*DeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*DeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*DeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*GetErrorName)(CUresult, const char**) = nullptr;
};

/// Resolves every entry point; the names of those missing are appended to `missing`.
bool bind_all(void* h, Api& a, std::string& missing) {
  bool ok = bind_symbol(h, a.Init, "cuInit", missing); // every name is tried, so that all missing ones are listed
  ok &= bind_symbol(h, a.DriverGetVersion, "cuDriverGetVersion", missing);
  ok &= bind_symbol(h, a.DeviceGetCount, "cuDeviceGetCount", missing);
  ok &= bind_symbol(h, a.DeviceGet, "cuDeviceGet", missing);
  ok &= bind_symbol(h, a.DeviceGetName, "cuDeviceGetName", missing);
  ok &= bind_symbol(h, a.DeviceGetAttribute, "cuDeviceGetAttribute", missing);
  ok &= bind_symbol(h, a.DeviceTotalMem, "cuDeviceTotalMem_v2", missing);
  ok &= bind_symbol(h, a.GetErrorName, "cuGetErrorName", missing);
  return ok;
}

/// Names of errors the probe may meet, for libraries (the stub) whose cuGetErrorName fails.
const char* known_error_name(CUresult r) {
  switch (r) {
  case 1: return "CUDA_ERROR_INVALID_VALUE";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 4: return "CUDA_ERROR_DEINITIALIZED";
  case kStubLibrary: return "CUDA_ERROR_STUB_LIBRARY";
  case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
  case kNoDevice: return "CUDA_ERROR_NO_DEVICE";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 303: return "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED";
  case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
  case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
  case 999: return "CUDA_ERROR_UNKNOWN";
  }
  return nullptr;
}

/// "CUDA_ERROR_NO_DEVICE (100)".
std::string error_name(const Api& a, CUresult r) { return cuda_error_text(a.GetErrorName, r); }

/// Why cuInit's failure `r` makes the driver unusable.
std::string init_failure(const Api& a, CUresult r, const std::string& library) {
  if (r == kStubLibrary)
    return library + " is the CUDA toolkit's stub libcuda, not a real driver (cuInit returned "
           "CUDA_ERROR_STUB_LIBRARY); install the NVIDIA driver, which provides libcuda.so.1";
  if (r == kNoDevice) return "no CUDA device: cuInit of the driver " + library + " returned " + error_name(a, r);
  return "the CUDA driver " + library + " failed to initialize: cuInit returned " + error_name(a, r);
}

/// Fills `d` for ordinal `i`; returns why that failed ("" on success).
std::string device_info(const Api& a, int i, DeviceInfo& d) {
  CUdevice dev = 0;
  char name[256] = {};
  d.index = i;
  CUresult r = a.DeviceGet(&dev, i);
  if (r == 0) r = a.DeviceGetName(name, sizeof name - 1, dev);
  if (r == 0) r = a.DeviceGetAttribute(&d.cc_major, kAttrCcMajor, dev);
  if (r == 0) r = a.DeviceGetAttribute(&d.cc_minor, kAttrCcMinor, dev);
  if (r == 0) r = a.DeviceGetAttribute(&d.sm_count, kAttrSmCount, dev);
  if (r == 0) r = a.DeviceGetAttribute(&d.max_threads_per_sm, kAttrThreadsPerSm, dev);
  if (r == 0) r = a.DeviceGetAttribute(&d.shared_memory_per_block, kAttrSharedPerBlock, dev);
  if (r == 0) r = a.DeviceTotalMem(&d.total_memory, dev);
  d.name = name;
  if (r == 0) return "";
  return "the CUDA driver cannot describe device " + std::to_string(i) + ": " + error_name(a, r);
}

/// Initializes the driver and lists its devices into p; returns why it is unusable ("" if usable).
std::string query(const Api& a, DriverProbe& p) {
  if (CUresult r = a.DriverGetVersion(&p.driver_version); r != 0)
    return "the CUDA driver " + p.library + " does not say its version: cuDriverGetVersion returned " +
           error_name(a, r);
  int count = 0;
  if (CUresult r = a.DeviceGetCount(&count); r != 0)
    return "the CUDA driver " + p.library + " cannot count devices: cuDeviceGetCount returned " + error_name(a, r);
  if (count == 0)
    return "no CUDA device: the driver " + p.library + " (" + cuda_version_text(p.driver_version) + ") sees no GPU";
  p.devices.resize(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i)
    if (std::string why = device_info(a, i, p.devices[static_cast<size_t>(i)]); !why.empty()) return why;
  return "";
}

/// The GPU the process-wide probe found, for messages ("" when none).
std::string first_device_text(const DriverProbe& p) { return p.devices.empty() ? "" : p.devices.front().str(); }

/// The process-wide probe: the driver, then its version against NVRTC's, then NVRTC itself.
DriverProbe probe_process() {
  DriverProbe p = probe_cuda_driver(driver_library());
  if (!p.reason.empty() || p.emulator) return p; // the emulator runs kernels from their source: no NVRTC
  std::string why;
  if (!codegen::nvrtc_available(&why))
    p.reason = "found " + first_device_text(p) + " but kiln compiles GPU kernels with NVRTC, which is unavailable: " + why;
  else
    p.reason = driver_version_reason(p.driver_version, codegen::nvrtc_version());
  return p;
}

/// The ordinal in "cuda" (0) or "cuda:N"; none for any other name.
std::optional<int> cuda_index(std::string_view name) {
  if (name == "cuda") return 0;
  if (name.substr(0, 5) != "cuda:" || name.size() == 5 || name.size() > 9) return std::nullopt;
  int index = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    index = index * 10 + (c - '0');
  }
  return index;
}

/// Why a request for CUDA device `index` cannot be granted ("" when it can).
std::string cuda_refusal(std::string_view requested, int index, const DriverProbe& p) {
  const std::string head = "cannot use '" + std::string(requested) + "': ";
  if (!p.reason.empty()) return head + p.reason;
  if (static_cast<size_t>(index) >= p.devices.size())
    return head + "no CUDA device " + std::to_string(index) + " (the driver sees " + std::to_string(p.devices.size()) +
           ")";
  return "";
}

} // namespace

std::string cuda_error_text(CUresult (*get_error_name)(CUresult, const char**), CUresult r) {
  const char* s = nullptr;
  if (!get_error_name || get_error_name(r, &s) != 0 || !s) s = known_error_name(r);
  return (s ? std::string(s) : "CUDA error") + " (" + std::to_string(r) + ")";
}

std::string driver_library() {
  const char* env = std::getenv("KILN_CUDA_DRIVER");
  return env && *env ? env : "libcuda.so.1";
}

DriverProbe probe_cuda_driver(const std::string& library) {
  DriverProbe p;
  p.library = library;
  dlerror();
  void* h = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* err = dlerror();
    p.reason = "no CUDA driver: cannot load " + library + " (" + (err ? err : "dlopen failed") + ")";
    return p;
  }
  p.emulator = dlsym(h, "kilnEmuIsEmulator") != nullptr;
  Api a;
  if (std::string missing; !bind_all(h, a, missing)) {
    p.reason = "no usable CUDA driver: " + library + " lacks" + missing;
    dlclose(h);
    return p;
  }
  if (CUresult r = a.Init(0); r != 0) {
    p.reason = init_failure(a, r, library);
    dlclose(h); // the stub's SONAME is libcuda.so.1: unload it so that a later probe cannot find it by name
    return p;
  }
  p.reason = query(a, p); // after a successful cuInit the library stays loaded
  if (!p.reason.empty()) p.devices.clear();
  return p;
}

std::string cuda_version_text(int version) {
  return "CUDA " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string driver_version_reason(int driver_version, const std::string& nvrtc_version) {
  int major = 0, minor = 0;
  const bool known = std::sscanf(nvrtc_version.c_str(), "%d.%d", &major, &minor) == 2;
  const int required = known ? major * 1000 + minor * 10 : 12000;
  if (driver_version >= required) return "";
  const std::string need = known ? "the NVRTC kiln loads is " + nvrtc_version + ", whose PTX needs a driver for " +
                                       cuda_version_text(required) + " or newer"
                                 : "kiln needs a driver for CUDA 12.0 or newer (NVRTC's version is unknown)";
  return "the CUDA driver is too old: it supports " + cuda_version_text(driver_version) + " (cuDriverGetVersion " +
         std::to_string(driver_version) + ") but " + need + "; update the NVIDIA driver";
}

const DriverProbe& cuda_driver() {
  static std::once_flag once;
  static DriverProbe probe;
  std::call_once(once, [] { probe = probe_process(); });
  return probe;
}

Device resolve_device(std::string_view requested, const DriverProbe& probe, const std::source_location& where) {
  if (requested == "cpu") return kCPU;
  if (requested == "auto") {
    if (probe.reason.empty() && !probe.devices.empty()) return {Device::Kind::CUDA, 0};
    std::fprintf(stderr, "[kiln] device auto: using the CPU: CUDA is unavailable: %s\n", probe.reason.c_str());
    return kCPU;
  }
  if (std::optional<int> index = cuda_index(requested)) {
    if (std::string why = cuda_refusal(requested, *index, probe); !why.empty()) throw Error("device", why, where);
    return {Device::Kind::CUDA, *index};
  }
  throw Error("device", "unknown device '" + std::string(requested) + "'; valid: cpu, cuda, cuda:N, auto", where);
}

} // namespace kiln::runtime

namespace kiln {

std::string DeviceInfo::str() const {
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f GiB", static_cast<double>(total_memory) / (1024.0 * 1024.0 * 1024.0));
  return "cuda:" + std::to_string(index) + " " + name + " (compute capability " + std::to_string(cc_major) + "." +
         std::to_string(cc_minor) + ", " + std::to_string(sm_count) + " SMs, " + mem + ")";
}

std::vector<DeviceInfo> cuda_devices() { return runtime::cuda_driver().devices; }

std::string cuda_unavailable_reason() { return runtime::cuda_driver().reason; }

Device resolve_device(std::string_view requested, const std::source_location& where) {
  if (requested == "cpu") return kCPU; // no need to load the driver
  return runtime::resolve_device(requested, runtime::cuda_driver(), where);
}

} // namespace kiln

#pragma once
/// \file cuda_driver.h
/// The CUDA driver API, loaded with dlopen (see kiln/devices.h for the public side).
///
/// The library is libcuda.so.1 (the NVIDIA driver's), or $KILN_CUDA_DRIVER (a full
/// path) when set; never libcuda.so, the toolkit's link-time stub, whose cuInit returns
/// CUDA_ERROR_STUB_LIBRARY (34). The stub's SONAME is libcuda.so.1 too: once loaded, a
/// later dlopen("libcuda.so.1") in the same process would find it, so a failed probe
/// dlcloses its library. No CUDA header is needed to build this.

#include <string>
#include <string_view>
#include <vector>

#include "kiln/devices.h"

namespace kiln::runtime {

/// What probing one driver library found.
struct DriverProbe {
  std::string library;             ///< the library tried (a name or a full path)
  int driver_version = 0;          ///< cuDriverGetVersion, e.g. 13000 for CUDA 13.0 (0 when unknown)
  std::vector<DeviceInfo> devices; ///< the GPUs it sees (empty when the driver itself is unusable)
  std::string reason;              ///< why the driver is unusable; "" when it is usable
  bool emulator = false;           ///< kiln's CPU emulator of the driver (tests/cuda_emu: exports kilnEmuIsEmulator)
};

/// The default driver library: $KILN_CUDA_DRIVER when set and non-empty, else "libcuda.so.1".
std::string driver_library();

/// Loads `library` and asks it for its version and devices: dlopen, dlsym, cuInit,
/// cuDriverGetVersion, cuDeviceGetCount and each device's name, compute capability, SM
/// count and memory. Never throws; a failure is described in DriverProbe::reason.
/// Each call probes afresh (tests use it with several libraries in one process).
DriverProbe probe_cuda_driver(const std::string& library);

/// Why a driver of `driver_version` (cuDriverGetVersion) cannot run what the NVRTC of
/// `nvrtc_version` ("13.0"; "" when NVRTC is absent) produces: the driver must support at
/// least NVRTC's CUDA version (its PTX ISA), or 12.0 when no NVRTC version is known.
/// "" when it is new enough.
std::string driver_version_reason(int driver_version, const std::string& nvrtc_version);

/// The process-wide probe of driver_library(), done once (std::call_once), with the
/// driver-version and NVRTC checks folded into its reason.
const DriverProbe& cuda_driver();

/// resolve_device() against a given probe instead of the process-wide one (for tests).
Device resolve_device(std::string_view requested, const DriverProbe& probe, const std::source_location& where);

/// "CUDA 13.0" for a cuDriverGetVersion value of 13000.
std::string cuda_version_text(int version);

} // namespace kiln::runtime

#pragma once
/// \file devices.h
/// The devices present at run time and choosing one (KILN_DEVICE, train's --device).
///
/// The CUDA driver (libcuda.so.1, or $KILN_CUDA_DRIVER) is loaded with dlopen and
/// probed once per process; kiln links no CUDA library. resolve_device() gives a CUDA
/// device where the driver, the device and NVRTC are usable, and otherwise says why
/// (no driver, stub driver, no device, driver too old, NVRTC missing).

#include <cstddef>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/device.h"

namespace kiln {

/// One CUDA GPU as the driver reports it.
struct DeviceInfo {
  int index = 0;           ///< CUDA ordinal (Device{Kind::CUDA, index})
  std::string name;        ///< e.g. "NVIDIA H200"
  int cc_major = 0;        ///< compute capability, major (9 for sm_90)
  int cc_minor = 0;        ///< compute capability, minor
  int sm_count = 0;        ///< streaming multiprocessors
  int max_threads_per_sm = 0; ///< resident threads per SM (launch configuration)
  size_t total_memory = 0; ///< bytes of device memory
  int shared_memory_per_block = 0; ///< bytes of shared memory a block may use without opting in

  /// "cuda:0 NVIDIA H200 (compute capability 9.0, 132 SMs, 140.4 GiB)".
  std::string str() const;
};

/// The CUDA GPUs the driver sees; empty where no usable driver was found or it sees none
/// (a driver too old for kiln's NVRTC, or NVRTC missing, still lists its GPUs).
/// Probed once per process (thread-safe).
std::vector<DeviceInfo> cuda_devices();

/// One sentence saying why CUDA cannot be used (no driver and which library was tried,
/// the toolkit's stub driver, cuInit's error, no device, a driver older than the NVRTC
/// kiln loads, NVRTC missing); "" when the driver, a device and NVRTC are all usable.
/// kiln's CPU emulator of the driver (tests) needs no NVRTC.
std::string cuda_unavailable_reason();

/// Turns a device name into a device: "cpu" gives the CPU; "cuda" or "cuda:N" gives
/// that GPU, or throws kiln::Error (op "device") saying why CUDA or that device is
/// unavailable; "auto" gives cuda:0 where usable, else the CPU with one line on stderr
/// saying why. Any other name throws kiln::Error listing the valid ones. `where` is
/// the caller's source line.
Device resolve_device(std::string_view requested, const std::source_location& where = std::source_location::current());

} // namespace kiln

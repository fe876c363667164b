// CUDA driver discovery (runtime/cuda_driver.h, kiln/devices.h): the reasons CUDA cannot
// be used (no driver, the toolkit's stub, a driver too old for NVRTC), device selection
// (cpu, cuda, cuda:N, auto, bad names) and KILN_CUDA_DRIVER / KILN_DEVICE. The machine
// needs no GPU: the stub libcuda from the CUDA toolkit stands in for a broken driver, and
// a made-up probe stands in for a usable one.

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "runtime/cuda_driver.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using runtime::DriverProbe;

constexpr const char* kMissing = "/nonexistent/kiln-test/libcuda.so.1";

/// The toolkit's stub libcuda ($KILN_CUDA_HOME first, like NVRTC), or "" when absent.
std::string stub_library() {
  std::vector<fs::path> homes;
  if (const char* home = std::getenv("KILN_CUDA_HOME"); home && *home) homes.emplace_back(home);
  homes.emplace_back("/usr/local/cuda");
  for (const fs::path& h : homes)
    for (const char* lib : {"lib64", "lib"}) {
      const fs::path p = h / lib / "stubs" / "libcuda.so";
      std::error_code ec;
      if (fs::exists(p, ec)) return p.string();
    }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The kiln::Error message `f` throws (op "device", this file's line in it); "" and a failure if none.
std::string device_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "device") << e.what();
    EXPECT_TRUE(contains(e.what(), "test_cuda_driver.cpp:")) << "the caller's line is missing: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no kiln::Error was thrown";
  return "";
}

/// A probe as a machine with one usable H200 would give.
DriverProbe usable_probe() {
  DriverProbe p;
  p.library = "libcuda.so.1";
  p.driver_version = 13000;
  p.devices.push_back({.index = 0, .name = "NVIDIA H200", .cc_major = 9, .cc_minor = 0, .sm_count = 132,
                       .total_memory = size_t{150} << 30});
  return p;
}

Device resolve(std::string_view name, const DriverProbe& p) {
  return runtime::resolve_device(name, p, std::source_location::current());
}

// First in this file, so that no earlier test of this binary has loaded a libcuda.
TEST(CudaDriver, StubIsUnloadedAfterItsProbe) {
  // The stub's SONAME is libcuda.so.1: were it kept loaded, dlopen("libcuda.so.1") would find it.
  const std::string stub = stub_library();
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so";
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) GTEST_SKIP() << "a libcuda.so.1 is already loaded";
  EXPECT_TRUE(contains(runtime::probe_cuda_driver(stub).reason, "CUDA_ERROR_STUB_LIBRARY"));
  EXPECT_EQ(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), nullptr) << "the stub is still loaded";
}

TEST(CudaDriver, MissingLibraryNamesThePathAndSaysNoDriver) {
  const DriverProbe p = runtime::probe_cuda_driver(kMissing);
  EXPECT_TRUE(contains(p.reason, "no CUDA driver")) << p.reason;
  EXPECT_TRUE(contains(p.reason, kMissing)) << p.reason;
  EXPECT_TRUE(contains(p.reason, "No such file")) << "dlopen's error is missing: " << p.reason;
  EXPECT_TRUE(p.devices.empty());
}

TEST(CudaDriver, LibraryWithoutTheDriverApiListsWhatIsMissing) {
  const DriverProbe p = runtime::probe_cuda_driver("libz.so.1"); // kiln links zlib, so it is present
  EXPECT_TRUE(contains(p.reason, "no usable CUDA driver: libz.so.1 lacks")) << p.reason;
  EXPECT_TRUE(contains(p.reason, "cuInit")) << p.reason;
  EXPECT_TRUE(contains(p.reason, "cuDeviceTotalMem_v2")) << p.reason;
}

TEST(CudaDriver, StubLibraryIsRecognised) {
  const std::string stub = stub_library();
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so under $KILN_CUDA_HOME or /usr/local/cuda";
  const DriverProbe p = runtime::probe_cuda_driver(stub);
  std::printf("stub driver reason: %s\n", p.reason.c_str());
  EXPECT_TRUE(contains(p.reason, "CUDA_ERROR_STUB_LIBRARY")) << p.reason;
  EXPECT_TRUE(contains(p.reason, "stub libcuda, not a real driver")) << p.reason;
  EXPECT_TRUE(contains(p.reason, stub)) << p.reason;
  EXPECT_TRUE(p.devices.empty());
}

TEST(CudaDriver, DriverVersionAgainstNvrtc) {
  EXPECT_EQ(runtime::driver_version_reason(13000, "13.0"), "");
  EXPECT_EQ(runtime::driver_version_reason(13020, "13.0"), "");
  EXPECT_EQ(runtime::driver_version_reason(12000, ""), "");
  const std::string old = runtime::driver_version_reason(12040, "13.0");
  EXPECT_TRUE(contains(old, "too old")) << old;
  EXPECT_TRUE(contains(old, "CUDA 12.4")) << old;
  EXPECT_TRUE(contains(old, "CUDA 13.0 or newer")) << old;
  EXPECT_TRUE(contains(old, "NVRTC")) << old;
  const std::string unknown = runtime::driver_version_reason(11080, "");
  EXPECT_TRUE(contains(unknown, "CUDA 11.8")) << unknown;
  EXPECT_TRUE(contains(unknown, "CUDA 12.0 or newer")) << unknown;
}

TEST(DeviceSelection, CpuIsAlwaysTheCpu) {
  EXPECT_EQ(resolve("cpu", runtime::probe_cuda_driver(kMissing)), kCPU);
  EXPECT_EQ(resolve("cpu", usable_probe()), kCPU);
  EXPECT_EQ(resolve_device("cpu"), kCPU);
}

TEST(DeviceSelection, CudaThrowsTheReason) {
  const DriverProbe missing = runtime::probe_cuda_driver(kMissing);
  const std::string msg = device_error([&] { resolve("cuda", missing); });
  EXPECT_TRUE(contains(msg, missing.reason)) << msg;
  EXPECT_TRUE(contains(device_error([&] { resolve("cuda:1", missing); }), missing.reason));
  const std::string stub = stub_library();
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so";
  const std::string stub_msg = device_error([&] { resolve("cuda", runtime::probe_cuda_driver(stub)); });
  EXPECT_TRUE(contains(stub_msg, "CUDA_ERROR_STUB_LIBRARY")) << stub_msg;
}

TEST(DeviceSelection, UsableGpuIsChosen) {
  EXPECT_EQ(resolve("cuda", usable_probe()), (Device{Device::Kind::CUDA, 0}));
  EXPECT_EQ(resolve("cuda:0", usable_probe()), (Device{Device::Kind::CUDA, 0}));
  const std::string bad_index = device_error([] { resolve("cuda:1", usable_probe()); });
  EXPECT_TRUE(contains(bad_index, "no CUDA device 1")) << bad_index;
  EXPECT_TRUE(contains(bad_index, "the driver sees 1")) << bad_index;
}

/// resolve(name, p) on auto: returns the CPU and prints exactly one line, returned.
std::string auto_line(const DriverProbe& p) {
  testing::internal::CaptureStderr();
  const Device d = resolve("auto", p);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(d, kCPU);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.back(), '\n') << err;
  return err;
}

TEST(DeviceSelection, AutoFallsBackToTheCpuWithOneLine) {
  const DriverProbe missing = runtime::probe_cuda_driver(kMissing);
  const std::string line = auto_line(missing);
  EXPECT_TRUE(contains(line, "using the CPU")) << line;
  EXPECT_TRUE(contains(line, missing.reason)) << line;
  testing::internal::CaptureStderr();
  EXPECT_EQ(resolve("auto", usable_probe()), (Device{Device::Kind::CUDA, 0})); // a usable GPU: silently
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(DeviceSelection, BadNamesListTheValidOnes) {
  for (const char* name : {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "", "cpu:0"}) {
    const std::string msg = device_error([&] { resolve(name, usable_probe()); });
    EXPECT_TRUE(contains(msg, "unknown device '" + std::string(name) + "'")) << msg;
    EXPECT_TRUE(contains(msg, "cpu, cuda, cuda:N, auto")) << msg;
  }
  EXPECT_TRUE(contains(device_error([] { resolve_device("tpu"); }), "unknown device 'tpu'"));
}

TEST(DeviceInfoText, NamesEverything) {
  EXPECT_EQ(usable_probe().devices[0].str(), "cuda:0 NVIDIA H200 (compute capability 9.0, 132 SMs, 150.0 GiB)");
}

// The process-wide probe runs once, so each scenario runs in a fresh process: the
// "threadsafe" death-test style re-executes this binary for the one test.
class ProcessWide : public testing::Test {
protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

/// In a fresh process with KILN_CUDA_DRIVER=library: the reason and resolve_device("cuda")'s
/// message must contain `part`; "auto" gives the CPU. Exits 0 when all holds, else prints why and exits 1.
[[noreturn]] void check_process_wide(const std::string& library, const std::string& part) {
  setenv("KILN_CUDA_DRIVER", library.c_str(), 1);
  const std::string why = cuda_unavailable_reason();
  std::string msg;
  try {
    resolve_device("cuda");
  } catch (const Error& e) {
    msg = e.what();
  }
  const bool ok = contains(why, part) && contains(msg, why) && cuda_devices().empty() && resolve_device("auto") == kCPU;
  std::fprintf(stderr, "%s\nreason: %s\nerror: %s\n", ok ? "OK" : "FAILED", why.c_str(), msg.c_str());
  std::exit(ok ? 0 : 1);
}

TEST_F(ProcessWide, KilnCudaDriverSelectsTheLibrary) {
  EXPECT_EXIT(check_process_wide(kMissing, kMissing), testing::ExitedWithCode(0), "OK\nreason: no CUDA driver");
}

TEST_F(ProcessWide, StubThroughKilnCudaDriver) {
  const std::string stub = stub_library();
  if (stub.empty()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so";
  EXPECT_EXIT(check_process_wide(stub, "CUDA_ERROR_STUB_LIBRARY"), testing::ExitedWithCode(0), "OK\n");
}

TEST_F(ProcessWide, KilnDeviceIsReadIntoOptions) {
  EXPECT_EXIT(
      {
        setenv("KILN_DEVICE", "auto", 1);
        std::exit(options().device == "auto" ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

} // namespace
} // namespace kiln

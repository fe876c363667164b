// NVRTC through dlopen (see nvrtc.h). The few entry points are declared here with
// their C signatures from NVRTC's documentation; no CUDA header is needed.
#include "codegen/nvrtc.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "kiln/error.h"

namespace kiln::codegen {

namespace {

namespace fs = std::filesystem;

using nvrtcResult = int;      // an enum in nvrtc.h; 0 is NVRTC_SUCCESS
using nvrtcProgram = void*;   // pointer to an opaque struct

/// The NVRTC entry points kiln uses.
struct Api {
  const char* (*GetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*Version)(int*, int*) = nullptr;
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
  bool ok = false;
  std::string why;  ///< why loading failed
  std::string path; ///< the library loaded
};

/// Directories that may hold libnvrtc, in search order.
std::vector<fs::path> library_dirs() {
  std::vector<fs::path> dirs;
  if (const char* home = std::getenv("KILN_CUDA_HOME"); home && *home) {
    dirs.emplace_back(fs::path(home) / "lib64");
    dirs.emplace_back(fs::path(home) / "lib");
  }
  dirs.emplace_back("/usr/local/cuda/lib64");
  dirs.emplace_back("/usr/local/cuda/lib");
  return dirs;
}

/// Preloads libnvrtc-builtins.so.<major>* from dir (not the ".alt" variant) by full
/// path with RTLD_GLOBAL, so that NVRTC's later dlopen by name finds it.
void preload_builtins(const fs::path& dir, const std::string& major) {
  std::error_code ec;
  const std::string prefix = "libnvrtc-builtins.so." + major;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.rfind(prefix, 0) != 0) continue;
    if (dlopen(entry.path().c_str(), RTLD_NOW | RTLD_GLOBAL)) return;
  }
}

/// dlopens libnvrtc: from the known directories first, then by name.
void* open_library(std::string& path, std::string& why) {
  static const char* const kMajors[] = {"13", "12"};
  for (const fs::path& dir : library_dirs())
    for (const char* major : kMajors) {
      const fs::path lib = dir / ("libnvrtc.so." + std::string(major));
      std::error_code ec;
      if (!fs::exists(lib, ec)) continue;
      preload_builtins(dir, major);
      if (void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL)) return path = lib.string(), h;
      why += std::string(" ") + lib.string() + ": " + dlerror() + ";";
    }
  for (const char* major : kMajors) {
    const std::string name = "libnvrtc.so." + std::string(major);
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return path = name, h;
    why += " " + name + ": " + dlerror() + ";";
  }
  return nullptr;
}

template <class F> bool bind(void* h, F& f, const char* name, std::string& why) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) why += std::string(" missing symbol ") + name + ";";
  return f != nullptr;
}

Api load() {
  Api a;
  void* h = open_library(a.path, a.why);
  if (!h) {
    a.why = "NVRTC not found (set KILN_CUDA_HOME to the CUDA toolkit):" + a.why;
    return a;
  }
  bool ok = bind(h, a.GetErrorString, "nvrtcGetErrorString", a.why) & bind(h, a.Version, "nvrtcVersion", a.why) &
            bind(h, a.CreateProgram, "nvrtcCreateProgram", a.why) &
            bind(h, a.DestroyProgram, "nvrtcDestroyProgram", a.why) &
            bind(h, a.CompileProgram, "nvrtcCompileProgram", a.why) & bind(h, a.GetPTXSize, "nvrtcGetPTXSize", a.why) &
            bind(h, a.GetPTX, "nvrtcGetPTX", a.why) & bind(h, a.GetCUBINSize, "nvrtcGetCUBINSize", a.why) &
            bind(h, a.GetCUBIN, "nvrtcGetCUBIN", a.why) &
            bind(h, a.GetProgramLogSize, "nvrtcGetProgramLogSize", a.why) &
            bind(h, a.GetProgramLog, "nvrtcGetProgramLog", a.why);
  if (!ok) {
    a.why = a.path + " is unusable:" + a.why;
    return a;
  }
  a.ok = true;
  return a;
}

const Api& api() {
  static const Api a = load();
  return a;
}

std::string error_string(nvrtcResult r) {
  const char* s = api().GetErrorString ? api().GetErrorString(r) : nullptr;
  return s ? s : "NVRTC error " + std::to_string(r);
}

/// Owns one nvrtcProgram.
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) api().DestroyProgram(&p);
  }
};

std::string program_log(nvrtcProgram p) {
  size_t n = 0;
  if (api().GetProgramLogSize(p, &n) != 0 || n <= 1) return "";
  std::string log(n, '\0');
  if (api().GetProgramLog(p, log.data()) != 0) return "";
  log.resize(n - 1);
  return log;
}

[[noreturn]] void fail(const std::string& what, const std::string& name, const std::string& log,
                       const std::string& source) {
  throw Error("nvrtc: " + what + " for " + name + "\n--- log ---\n" + log + "\n--- source ---\n" + source);
}

/// The compiled binary: CUBIN or PTX.
std::string binary_of(nvrtcProgram p, bool ptx) {
  size_t n = 0;
  const nvrtcResult r = ptx ? api().GetPTXSize(p, &n) : api().GetCUBINSize(p, &n);
  if (r != 0) throw Error("nvrtc: cannot read the compiled binary: " + error_string(r));
  std::string bin(n, '\0');
  const nvrtcResult r2 = ptx ? api().GetPTX(p, bin.data()) : api().GetCUBIN(p, bin.data());
  if (r2 != 0) throw Error("nvrtc: cannot read the compiled binary: " + error_string(r2));
  if (ptx && !bin.empty() && bin.back() == '\0') bin.pop_back();
  return bin;
}

} // namespace

bool nvrtc_available(std::string* why) {
  if (!api().ok && why) *why = api().why;
  return api().ok;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (!api().ok || api().Version(&major, &minor) != 0) return "";
  return std::to_string(major) + "." + std::to_string(minor);
}

CompileResult nvrtc_compile(const std::string& source, const std::string& name, const std::string& arch) {
  if (!api().ok) throw Error("nvrtc: unavailable: " + api().why);
  const auto t0 = std::chrono::steady_clock::now();
  CompileResult out;
  out.is_ptx = arch.rfind("compute_", 0) == 0;
  Program prog;
  if (nvrtcResult r = api().CreateProgram(&prog.p, source.c_str(), name.c_str(), 0, nullptr, nullptr); r != 0)
    fail("nvrtcCreateProgram failed: " + error_string(r), name, "", source);
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "-std=c++17", "--fmad=false"};
  const nvrtcResult r = api().CompileProgram(prog.p, 3, opts);
  out.log = program_log(prog.p);
  if (r != 0) fail("compilation failed (" + error_string(r) + ", " + arch + ")", name, out.log, source);
  out.binary = binary_of(prog.p, out.is_ptx);
  out.ptx = out.is_ptx ? out.binary : binary_of(prog.p, true);
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

std::string ptxas_path() {
  std::vector<fs::path> dirs;
  if (const char* home = std::getenv("KILN_CUDA_HOME"); home && *home) dirs.emplace_back(fs::path(home) / "bin");
  dirs.emplace_back("/usr/local/cuda/bin");
  for (const fs::path& d : dirs) {
    const fs::path p = d / "ptxas";
    if (access(p.c_str(), X_OK) == 0) return p.string();
  }
  return "";
}

void ptxas_check(const std::string& ptx, const std::string& arch) {
  const std::string exe = ptxas_path();
  if (exe.empty()) throw Error("ptxas: not found (set KILN_CUDA_HOME to the CUDA toolkit)");
  char dir[] = "/tmp/kiln-ptxas-XXXXXX";
  if (!mkdtemp(dir)) throw Error("ptxas: cannot create a temporary directory");
  const std::string in = std::string(dir) + "/k.ptx", out = std::string(dir) + "/k.cubin";
  std::ofstream(in) << ptx;
  const std::string cmd = "'" + exe + "' -arch=" + arch + " '" + in + "' -o '" + out + "' 2>&1";
  std::string log;
  int status = -1;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) log.append(buf, n);
    status = pclose(f);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (status != 0) throw Error("ptxas -arch=" + arch + " rejected the PTX:\n" + log + "\n--- ptx ---\n" + ptx);
}

} // namespace kiln::codegen

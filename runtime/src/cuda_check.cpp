#include "runtime/cuda_check.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_set>

#include "codegen/cuda_emitter.h"
#include "codegen/form.h"
#include "codegen/nvrtc.h"
#include "kiln/error.h"
#include "kiln/options.h"

namespace kiln::runtime {

namespace {

std::atomic<size_t> g_checked{0};

/// Claims k's name: true the first time it is seen in this process.
bool first_time(const std::string& name) {
  static std::mutex mu;
  static std::unordered_set<std::string> seen;
  std::lock_guard lock(mu);
  return seen.insert(name).second;
}

/// Whether NVRTC can be used; says once on stderr why not.
bool usable() {
  static const bool ok = [] {
    std::string why;
    if (codegen::nvrtc_available(&why)) return true;
    std::fprintf(stderr, "[kiln] KILN_CUDA_CHECK: CUDA checks skipped: %s\n", why.c_str());
    return false;
  }();
  return ok;
}

/// The marker file recording that this exact source compiled with this NVRTC: in
/// kiln-cuda-checked/ next to options().cache_dir (not inside it: the CPU kernel cache
/// owns that directory), none when the disk cache is off. Later processes skip it.
std::string marker_path(const std::string& source) {
  if (options().cache_dir.empty()) return "";
  const std::filesystem::path parent = std::filesystem::path(options().cache_dir).lexically_normal().parent_path();
  char key[40];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(codegen::hash_text(
                                                 source + "\nnvrtc " + codegen::nvrtc_version() + " sm_90 compute_90")));
  return ((parent.empty() ? std::filesystem::path(".") : parent) / "kiln-cuda-checked" / key).string();
}

bool marked(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::exists(path, ec);
}

void mark(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::ofstream(path) << "ok\n";
}

} // namespace

void cuda_check_kernel(const codegen::Kernel& cpu_kernel) {
  if (!options().cuda_check || !usable()) return;
  // The same IR planned for the GPU the check compiles for (its form and, for a GEMM, its
  // name differ from the CPU kernel's). A CUDA plan reads no parameter values.
  codegen::Kernel k = cpu_kernel;
  codegen::set_form(k, codegen::plan_form(k, {}, codegen::Target::cuda(9, 0)));
  codegen::finalize(k);
  if (!first_time(k.name)) return;
  const std::string source = codegen::emit_cuda(k);
  const std::string marker = marker_path(source);
  if (!marked(marker)) {
    // One compile gives both: NVRTC builds the compute_90 PTX and assembles it for sm_90
    // (test_cuda checks that this PTX equals a compute_90 compile's).
    const codegen::CompileResult r = codegen::nvrtc_compile(source, k.name + ".cu", "sm_90");
    if (r.binary.empty() || r.ptx.find(".entry " + k.name) == std::string::npos)
      throw Error("KILN_CUDA_CHECK: NVRTC produced no CUBIN or PTX for " + k.name + "\n" + source);
    mark(marker);
  }
  ++g_checked;
}

size_t cuda_checked_count() { return g_checked.load(); }

} // namespace kiln::runtime

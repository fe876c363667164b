#include "runtime/cuda_check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <unistd.h>

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

/// A kernel waiting for its NVRTC compile: compiles are batched, since much of NVRTC's cost is per
/// program (the Conv and Pool tests' 841 kernels: 74 s of NVRTC alone, 49 s in batches).
struct Pending {
  std::string name, source, marker;
  pid_t pid; // the process that queued it: a fork()ed child does not compile its parent's kernels
};

/// At most this many kernels wait; the batch compiles when it is full, when the count is read
/// (cuda_checked_count) and when the process exits.
constexpr size_t kBatch = 64;

std::mutex g_queue_mu;
std::vector<Pending> g_queue;

/// Compiles `batch` as one program for sm_90 (the PTX behind it is compute_90's) and marks each
/// kernel; when the program fails, compiles each kernel alone and throws the first failure's error.
void compile_batch(const std::vector<Pending>& batch) {
  if (batch.empty()) return;
  std::string source;
  for (const Pending& p : batch) source += p.source; // each kernel's prelude parts are include-guarded
  bool all_in = false;
  try {
    const codegen::CompileResult r = codegen::nvrtc_compile(source, batch[0].name + "_batch.cu", "sm_90");
    all_in = !r.binary.empty();
    for (const Pending& p : batch) all_in = all_in && r.ptx.find(".entry " + p.name) != std::string::npos;
  } catch (const Error&) {
  }
  for (const Pending& p : batch) {
    if (!all_in) {
      const codegen::CompileResult r = codegen::nvrtc_compile(p.source, p.name + ".cu", "sm_90");
      if (r.binary.empty() || r.ptx.find(".entry " + p.name) == std::string::npos)
        throw Error("KILN_CUDA_CHECK: NVRTC produced no CUBIN or PTX for " + p.name + "\n" + p.source);
    }
    mark(p.marker);
    ++g_checked;
  }
}

void flush_at_exit();

/// Has flush_at_exit run at exit, before the static objects made so far are destroyed: called
/// when the first kernel is queued, and again after the first compile, since NVRTC makes its own
/// static objects then (an exit-time compile after their destruction crashed).
void register_exit_flush() {
  static std::atomic<int> registered{0};
  if (registered.load() < 2 && registered.fetch_add(1) < 2) std::atexit(flush_at_exit);
}

/// Compiles what this process queued (all of it, in batches of kBatch).
void flush() {
  std::vector<Pending> mine;
  {
    std::lock_guard lock(g_queue_mu);
    const pid_t self = getpid();
    for (Pending& p : g_queue)
      if (p.pid == self) mine.push_back(std::move(p));
    g_queue.clear();
  }
  for (size_t at = 0; at < mine.size(); at += kBatch)
    compile_batch({mine.begin() + static_cast<std::ptrdiff_t>(at),
                   mine.begin() + static_cast<std::ptrdiff_t>(std::min(mine.size(), at + kBatch))});
  if (!mine.empty()) register_exit_flush();
}

/// At exit, the kernels still waiting compile; a failure there cannot be thrown to the caller that
/// ran the kernel, so it is printed and the process exits with status 1 (a test then fails).
void flush_at_exit() {
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[kiln] KILN_CUDA_CHECK failed at exit: %s\n", e.what());
    std::fflush(nullptr);
    std::_Exit(1);
  }
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
  std::string source = codegen::emit_cuda(k);
  std::string marker = marker_path(source);
  if (marked(marker)) {
    ++g_checked;
    return;
  }
  static const bool registered = (register_exit_flush(), true); // after options() and NVRTC's loader exist
  (void)registered;
  bool full = false;
  {
    std::lock_guard lock(g_queue_mu);
    g_queue.push_back({k.name, std::move(source), std::move(marker), getpid()});
    full = g_queue.size() >= kBatch;
  }
  if (full) flush();
}

size_t cuda_checked_count() {
  if (options().cuda_check) flush();
  return g_checked.load();
}

} // namespace kiln::runtime

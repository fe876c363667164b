#include "runtime/executor.h"

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <mutex>
#include <unordered_set>

#include "kiln/error.h"
#include "kiln/options.h"
#include "codegen/cuda_emitter.h"
#include "codegen/dot.h"
#include "codegen/in_place.h"
#include "runtime/anomaly.h"
#include "runtime/cuda_check.h"
#include "runtime/cuda_runtime.h"
#include "runtime/observe.h"
#include "runtime/storage.h"
#include "graph/index_check.h"

namespace kiln::runtime {

namespace {

using Clock = std::chrono::steady_clock;

struct Counters {
  std::atomic<size_t> launches{0}, compiles{0}, realizations{0}, nodes{0}, plan_reuses{0}, in_place{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

size_t aligned(size_t bytes) { return std::max<size_t>(64, (bytes + 63) / 64 * 64); }

// Writes `text` to `path` under KILN_DUMP_DIR; false (said on stderr) when it cannot, such as a
// directory that does not exist: a dump the user looks for must not vanish without a word.
bool write_dump(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (out.flush()) return true;
  std::fprintf(stderr, "[kiln] KILN_DUMP_DIR: cannot write %s (does the directory exist?)\n", path.c_str());
  return false;
}

void dump(const std::string& name, const std::string& ext, const std::string& text) {
  std::fprintf(stderr, "[kiln] ---- %s%s ----\n%s\n", name.c_str(), ext.c_str(), text.c_str());
  if (options().dump_dir.empty()) return;
  (void)write_dump(options().dump_dir + "/" + name + ext, text);
}

// With KILN_DUMP_DIR (and KILN_DEBUG >= 2), the picture of each new plan's schedule as
// plan_<n>.dot, numbered in order across the process.
void dump_dot(const codegen::Schedule& s, const std::vector<const graph::Node*>& outputs) {
  if (options().dump_dir.empty() || s.launches.empty()) return;
  static std::atomic<int> next{0};
  const std::string path = options().dump_dir + "/plan_" + std::to_string(next++) + ".dot";
  if (write_dump(path, codegen::schedule_dot(s, outputs)))
    std::fprintf(stderr, "[kiln] wrote %s (%zu kernels)\n", path.c_str(), s.launches.size());
}

// Points the JIT's disk cache at options().cache_dir whenever that changes, and passes
// on the tiers' switch (KILN_JIT_TIER), whether to log their swaps (KILN_DEBUG>=1) and
// whether to write perf's map (KILN_PERF_MAP).
void sync_jit_options(codegen::LlvmJit& jit) {
  static std::mutex mu;
  static std::string applied = "\x01unset";
  static int tiered = -1, log = -1, perf_map = -1;
  std::lock_guard lock(mu);
  if (perf_map != static_cast<int>(options().perf_map)) jit.set_perf_map((perf_map = options().perf_map) != 0);
  if (tiered != static_cast<int>(options().jit_tier)) jit.set_tiered((tiered = options().jit_tier) != 0);
  if (log != static_cast<int>(options().debug >= 1)) jit.set_log((log = options().debug >= 1) != 0);
  if (applied == options().cache_dir) return;
  applied = options().cache_dir;
  jit.set_disk_cache(applied);
}

const char* status_name(codegen::LlvmJit::Source s) {
  switch (s) {
  case codegen::LlvmJit::Source::Memory: return "hit";
  case codegen::LlvmJit::Source::Disk: return "disk";
  case codegen::LlvmJit::Source::Compiled: return "miss";
  }
  return "?";
}

const codegen::CpuKernelSlot* compile(const codegen::Kernel& k, codegen::LlvmJit::Source& source) {
  auto& jit = codegen::LlvmJit::instance();
  sync_jit_options(jit);
  const codegen::CpuKernelSlot* fn = &jit.kernel(k, source);
  cuda_check_kernel(k); // KILN_CUDA_CHECK=1: also compile it as CUDA (once per kernel)
  if (source == codegen::LlvmJit::Source::Memory) return fn;
  const int level = options().debug;
  const bool compiled = source == codegen::LlvmJit::Source::Compiled;
  if (compiled) ++counters().compiles;
  if (level >= 1)
    std::fprintf(stderr, "[kiln] %s %s in %.2f ms%s\n", compiled ? "compiled" : "loaded from disk cache", k.name.c_str(),
                 jit.last_compile_ms(), fn->optimized() ? "" : " (quick tier; optimizing in the background)");
  if (level >= 3) dump(k.name, ".kir", codegen::print_kernel(k));
  if (level >= 4) dump(k.name, ".ll", jit.llvm_ir(k));
  if (level >= 5) dump(k.name, ".s", jit.assembly(k));
  return fn;
}

// Packs intermediates into one arena: each lives from the launch that writes it to
// the last launch that reads it; a buffer takes the lowest offset not overlapping
// any buffer whose lifetime intersects its own (largest buffers placed first).
void plan_memory(Plan& p) {
  struct Interval {
    const graph::Node* node;
    size_t first, last, bytes;
  };
  std::unordered_map<const graph::Node*, size_t> def, last;
  const auto& launches = p.schedule.launches;
  for (size_t i = 0; i < launches.size(); ++i) {
    for (const graph::Node* out : launches[i].outputs) def[out] = i;
    for (const graph::Node* in : launches[i].inputs) last[in] = i;
  }
  std::unordered_set<const graph::Node*> outputs;
  for (const auto& o : p.outputs) outputs.insert(o.get());
  std::vector<Interval> items;
  for (auto [node, d] : def) {
    if (outputs.count(node)) continue;
    items.push_back({node, d, last.count(node) ? last[node] : d, aligned(node->bytes())});
  }
  std::sort(items.begin(), items.end(), [](const Interval& a, const Interval& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.first < b.first;
  });
  std::vector<std::pair<Interval, size_t>> placed;
  for (const Interval& it : items) {
    std::vector<std::pair<size_t, size_t>> busy; // [offset, end) of overlapping lifetimes
    for (const auto& [other, off] : placed)
      if (other.first <= it.last && it.first <= other.last) busy.emplace_back(off, off + other.bytes);
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + it.bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    placed.emplace_back(it, offset);
    p.arena_offset[it.node] = offset;
    p.arena_bytes = std::max(p.arena_bytes, offset + it.bytes);
  }
}

// Bytes of scratch memory one task of launch `l` needs at `params` (0: it runs no tasks).
size_t task_scratch_bytes(const codegen::KernelLaunch& l, const std::vector<int64_t>& params) {
  return static_cast<size_t>(codegen::gemm_scratch_bytes(l.kernel) + codegen::attention_scratch_bytes(l.kernel, params) +
                             codegen::sort_scratch_bytes(l.kernel, params));
}

// True for a CPU kernel that takes scratch memory after its buffers (GemmTiling, AttentionSpec, ScanLoop::sort).
bool takes_scratch(const codegen::KernelLaunch& l) {
  return l.kernel.gemm || l.kernel.attention || (l.kernel.scan && l.kernel.scan->sort);
}

// Scratch memory for the tasks of one execution, taken before its first launch: one block per
// thread index of the task arena. An execution that writes in place uses it, so that no
// allocation can fail after its first write (a thread's own scratch grows on its first need).
struct ReservedScratch {
  std::shared_ptr<graph::Storage> blocks;
  size_t stride = 0; // bytes per thread index
};

// Runs [begin, end) of a kernel that takes scratch memory (takes_scratch), appended to the
// buffers: the thread's own, or its block of `reserved` where that is given.
void run_with_scratch(codegen::CpuKernelFn fn, const codegen::KernelLaunch& l, const std::vector<int64_t>& params,
                      void* const* bufs, const ReservedScratch& reserved, int64_t begin, int64_t end) {
  const size_t bytes = task_scratch_bytes(l, params);
  const size_t nbufs = l.inputs.size() + l.outputs.size();
  thread_local std::unique_ptr<std::byte[], void (*)(std::byte*)> scratch{nullptr, [](std::byte*) {}};
  thread_local size_t capacity = 0;
  std::vector<void*> args(bufs, bufs + nbufs);
  if (reserved.blocks && bytes <= reserved.stride) {
    const auto at = reinterpret_cast<uintptr_t>(reserved.blocks->data());
    const auto slot = static_cast<size_t>(std::max(0, tbb::this_task_arena::current_thread_index()));
    args.push_back(reinterpret_cast<void*>((at + 4095) / 4096 * 4096 + slot * reserved.stride));
    return fn(begin, end, args.data(), params.data());
  }
  if (capacity < bytes) {
    const size_t want = (bytes + 4095) / 4096 * 4096;
    scratch = {static_cast<std::byte*>(std::aligned_alloc(4096, want)), [](std::byte* p) { std::free(p); }};
    capacity = scratch ? want : 0;
    if (!scratch)
      detail::out_of_memory("realize", "host", want,
                            l.kernel.attention ? "the scratch memory of attention"
                            : l.kernel.scan    ? "the scratch memory of a sort"
                                               : "the scratch memory of a matrix product",
                            std::source_location::current());
  }
  args.push_back(scratch.get());
  fn(begin, end, args.data(), params.data());
}

// A GEMM-form or attention kernel's tasks (output blocks), one or more per chunk, each chunk
// with scratch memory (run_with_scratch; see GemmTiling, AttentionSpec).
void run_tasks(codegen::CpuKernelFn fn, const codegen::KernelLaunch& l, const std::vector<int64_t>& params,
               void* const* bufs, const ReservedScratch& reserved) {
  if (l.gemm_tasks == 1) return run_with_scratch(fn, l, params, bufs, reserved, 0, 1);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, l.gemm_tasks, 1), [&](const tbb::blocked_range<int64_t>& r) {
    run_with_scratch(fn, l, params, bufs, reserved, r.begin(), r.end());
  });
}

// Runs the flattened domain in chunks of roughly equal work, each starting at a multiple of
// l.chunk_multiple points. Results never depend on the chunking: each domain point is computed
// by the same code either way.
void run(codegen::CpuKernelFn fn, const codegen::KernelLaunch& l, const std::vector<int64_t>& params,
         void* const* bufs, const ReservedScratch& reserved) {
  const int64_t n = l.domain_size;
  if (n == 0) return;
  if (l.kernel.gemm || l.kernel.attention) return run_tasks(fn, l, params, bufs, reserved);
  const int64_t work = std::max<int64_t>(1, l.work_per_point);
  const int64_t grain = std::max<int64_t>(l.min_chunk, (int64_t{1} << 15) / work);
  const int64_t* p = params.data();
  if (takes_scratch(l)) { // an argsort: its columns in chunks, each with the thread's scratch
    auto chunk = [&](int64_t begin, int64_t end) { run_with_scratch(fn, l, params, bufs, reserved, begin, end); };
    if (n <= grain) return chunk(0, n);
    return tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                             [&](const tbb::blocked_range<int64_t>& r) { chunk(r.begin(), r.end()); });
  }
  if (n <= grain) return fn(0, n, bufs, p);
  // TBB splits a range in halves down to the grain; it splits units of chunk_multiple points
  const int64_t unit = std::max<int64_t>(1, l.chunk_multiple);
  auto points = [&](const tbb::blocked_range<int64_t>& r) {
    return std::pair{r.begin() * unit, std::min(n, r.end() * unit)};
  };
  const tbb::blocked_range<int64_t> units(0, (n + unit - 1) / unit, std::max<int64_t>(1, grain / unit));
  if (observe::tracing()) // each TBB chunk a child span of the launch, on its thread's track
    return tbb::parallel_for(units, [&](const tbb::blocked_range<int64_t>& r) {
      const auto [begin, end] = points(r);
      observe::Span s("chunk", "chunk");
      s.arg("points", static_cast<double>(end - begin));
      fn(begin, end, bufs, p);
    });
  tbb::parallel_for(units, [&](const tbb::blocked_range<int64_t>& r) {
    const auto [begin, end] = points(r);
    fn(begin, end, bufs, p);
  });
}

// `tier`: which of the JIT's tiers ran a CPU launch ("quick tier", "optimized"; null on a GPU);
// `in_place`: how many of its outputs it wrote over a donated input (api.h, Donations).
void log_launch(const codegen::KernelLaunch& l, Device device, const char* cache, const char* tier, double run_ms,
                size_t in_place) {
  const double bytes = observe::launch_bytes(l);
  const std::string lines = graph::source_lines_str(l.lines);
  const std::string from = lines.empty() ? "" : " from " + lines;
  if (device != kCPU && !options().launch_blocking) { // queued: the host did not wait for it
    std::fprintf(stderr, "[kiln] launch %s on %s (cache %s): %lld points, queued, %.2f MB%s\n", l.kernel.name.c_str(),
                 device.str().c_str(), cache, static_cast<long long>(l.domain_size), bytes / 1e6, from.c_str());
    return;
  }
  const std::string over = in_place ? ", " + std::to_string(in_place) + " output(s) in place" : "";
  std::fprintf(stderr, "[kiln] launch %s on %s (cache %s%s%s): %lld points, %.3f ms, %.2f MB, %.2f GB/s%s%s\n",
               l.kernel.name.c_str(), device.str().c_str(), cache, tier ? ", " : "", tier ? tier : "",
               static_cast<long long>(l.domain_size), run_ms,
               bytes / 1e6, run_ms > 0 ? bytes / run_ms / 1e6 : 0.0, over.c_str(), from.c_str());
}

// Loads the plan's kernels on its GPU (compiled in parallel).
void load_gpu_kernels(Plan& p) {
  Gpu& gpu = Gpu::get(p.device.index);
  const size_t n = p.schedule.launches.size();
  p.gpu_kernels.resize(n);
  for (const codegen::KernelLaunch& l : p.schedule.launches) p.gpu_configs.push_back(gpu.launch_config(l.kernel, l.params));
  tbb::parallel_for(size_t{0}, n, [&](size_t i) {
    Gpu::Source source;
    const codegen::Kernel& k = p.schedule.launches[i].kernel;
    observe::Span span("compile", k.name);
    p.gpu_kernels[i] = gpu.kernel(k, source);
    p.cache_status[i] = status_name(source);
    span.arg("cache", p.cache_status[i]);
    if (source == Gpu::Source::Memory) return;
    if (source == Gpu::Source::Compiled) ++counters().compiles;
    const int level = options().debug;
    if (level >= 1) std::fprintf(stderr, "[kiln] loaded %s on %s (%s)\n", k.name.c_str(), gpu.device().str().c_str(),
                                 source == Gpu::Source::Compiled ? "compiled" : "from the disk cache");
    if (level >= 3) dump(k.name, ".kir", codegen::print_kernel(k));
    if (level >= 4) dump(k.name, ".cu", codegen::emit_cuda(k));
  });
}

/// Threads this thread's kernels may run on now: its task arena's, within a global_control limit.
int cpu_threads() {
  const auto limit = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return static_cast<int>(std::min<size_t>(static_cast<size_t>(tbb::this_task_arena::max_concurrency()), limit));
}

// Runs jobs[0], jobs[1], ... in that order on up to cpu_threads() threads, each taking the
// next job when done with its last.
void run_in_order(const std::vector<std::function<void()>>& jobs) {
  std::atomic<size_t> next{0};
  const int workers = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(1, cpu_threads())), jobs.size()));
  tbb::parallel_for(0, workers, [&](int) {
    for (size_t j; (j = next.fetch_add(1)) < jobs.size();) jobs[j]();
  });
}

// Compiles the plan's CPU kernels in parallel. Each distinct kernel once: two launches of
// one kernel would otherwise compile it on two threads at once, one of them for nothing.
// The GEMM support routines first and the GEMM kernels last: every GEMM kernel waits for
// the routines, so the other kernels compile meanwhile.
void compile_cpu_kernels(Plan& p) {
  auto& jit = codegen::LlvmJit::instance();
  sync_jit_options(jit); // the tiers' switch, before prepare_support() reads it
  const auto& launches = p.schedule.launches;
  auto compile_launch = [&p, &launches](size_t i) {
    codegen::LlvmJit::Source source;
    observe::Span span("compile", launches[i].kernel.name);
    p.kernels[i] = compile(launches[i].kernel, source);
    p.cache_status[i] = status_name(source);
    span.arg("cache", p.cache_status[i]);
  };
  std::vector<std::function<void()>> jobs;
  std::vector<size_t> gemm, again;
  std::unordered_set<std::string> names, supports;
  for (size_t i = 0; i < launches.size(); ++i) {
    const codegen::Kernel& k = launches[i].kernel;
    if (!names.insert(k.name).second) again.push_back(i);
    else if (const std::string s = codegen::LlvmJit::support_name(k); s.empty()) jobs.emplace_back([=] { compile_launch(i); });
    else {
      gemm.push_back(i);
      if (supports.insert(s).second) jobs.insert(jobs.begin(), [&jit, &k] { jit.prepare_support(k); });
    }
  }
  for (size_t i : gemm) jobs.emplace_back([=] { compile_launch(i); });
  run_in_order(jobs);
  for (size_t i : again) compile_launch(i); // in memory now
}

// Where each buffer of one execution lives.
struct Memory {
  const Plan& plan;
  const Bindings& bindings;
  std::shared_ptr<graph::Storage> arena;
  Bindings outputs; // the launches' outputs outside the arena

  void* address(const graph::Node* n) const {
    if (auto it = bindings.find(n); it != bindings.end()) return it->second->data();
    if (auto it = outputs.find(n); it != outputs.end()) return it->second->data();
    if (auto it = plan.arena_offset.find(n); it != plan.arena_offset.end())
      return static_cast<char*>(arena->data()) + it->second;
    auto s = n->realized();
    if (!s)
      throw Error("realize", "input " + std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape) +
                                 " has no data (a placeholder of a traced function used outside it?)");
    return s->data();
  }
};

} // namespace

codegen::ScheduleOptions schedule_options(Device device, bool fusion) {
  if (device != kCPU) return {fusion, Gpu::get(device.index).target(), options().fuel};
  codegen::Target cpu = codegen::host_cpu_target();
  cpu.threads = cpu_threads();
  return {fusion, cpu, options().fuel};
}

Plan make_plan(const std::vector<graph::NodeRef>& outputs) { return make_plan(outputs, options().fusion); }

Plan make_plan(const std::vector<graph::NodeRef>& outputs, bool fusion) {
  Plan p;
  p.outputs = outputs;
  p.device = outputs.empty() ? kCPU : outputs[0]->device;
  for (const auto& n : outputs)
    KILN_ASSERT(n->device == p.device, "one plan computes on one device: " + n->device.str() + " vs " + p.device.str());
  std::vector<const graph::Node*> todo;
  std::unordered_set<const graph::Node*> seen;
  for (const auto& n : outputs)
    if (!n->realized() && seen.insert(n.get()).second) todo.push_back(n.get());
  observe::start_from_options();
  observe::Span plan_span("plan", "plan");
  {
    observe::Span span("schedule", "schedule");
    p.schedule = codegen::schedule(todo, schedule_options(p.device, fusion));
    span.arg("kernels", static_cast<double>(p.schedule.launches.size()));
  }
  if (options().debug >= 2) {
    std::fprintf(stderr, "[kiln] schedule: for %s (%s)\n", p.device.str().c_str(),
                 schedule_options(p.device, fusion).target.str().c_str());
    for (const std::string& d : p.schedule.debug_lines()) std::fprintf(stderr, "[kiln] schedule: %s\n", d.c_str());
    dump_dot(p.schedule, todo);
  }
  const size_t n = p.schedule.launches.size();
  if (p.device == kCPU) p.kernels.resize(n);
  p.cache_status.resize(n);
  if (p.device != kCPU) load_gpu_kernels(p);
  else compile_cpu_kernels(p);
  for (const graph::Node* n : todo) p.output_bytes += n->bytes();
  plan_memory(p);
  return p;
}

namespace {
// A launch's parameters with its seeds and scalar constants replaced where `seeds` and `consts` say so.
const std::vector<int64_t>& launch_params(const codegen::KernelLaunch& l, const SeedOverrides& seeds,
                                          const ConstOverrides& consts, std::vector<int64_t>& scratch) {
  const bool new_seeds = !seeds.empty() && !l.seed_params.empty(), new_consts = !consts.empty() && !l.const_params.empty();
  if (!new_seeds && !new_consts) return l.params;
  scratch = l.params;
  if (new_seeds)
    for (int i : l.seed_params)
      if (auto it = seeds.find(scratch[static_cast<size_t>(i)]); it != seeds.end()) scratch[static_cast<size_t>(i)] = it->second;
  if (new_consts)
    for (const auto& [i, node] : l.const_params)
      if (auto it = consts.find(node); it != consts.end()) scratch[static_cast<size_t>(i)] = it->second;
  return scratch;
}
} // namespace

namespace {
// True when launch `l` checks indices (reads the error buffer: a null input).
bool checks_indices(const codegen::KernelLaunch& l) { return std::find(l.inputs.begin(), l.inputs.end(), nullptr) != l.inputs.end(); }

// A zeroed error buffer for the plan's index checks (kernel_ir.h, ExprKind::Check), or null when it has none.
std::shared_ptr<graph::Storage> error_buffer(const Plan& plan) {
  if (std::none_of(plan.schedule.launches.begin(), plan.schedule.launches.end(), checks_indices)) return nullptr;
  auto host = allocate_host(graph::kErrorBufferElements * sizeof(int64_t));
  std::memset(host->data(), 0, graph::kErrorBufferElements * sizeof(int64_t));
  return plan.device == kCPU ? host : copy_to(*host, plan.device);
}

// Storage of `bytes` for a plan; memory that cannot be had is an OutOfMemoryError of "realize"
// that says what it was for (`what()`): public functions rename it after themselves.
template <class What> std::shared_ptr<graph::Storage> plan_storage(Device device, size_t bytes, What what) {
  try {
    return allocate(device, bytes);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError("realize", e.reason() + " for " + what(), e.bytes());
  }
}

ReservedScratch reserve_scratch(const Plan& plan) {
  if (plan.device != kCPU) return {}; // only CPU kernels take scratch memory
  size_t most = 0;
  for (const codegen::KernelLaunch& l : plan.schedule.launches)
    if (takes_scratch(l)) most = std::max(most, task_scratch_bytes(l, l.params));
  if (most == 0) return {};
  const size_t stride = (most + 4095) / 4096 * 4096, threads = static_cast<size_t>(tbb::this_task_arena::max_concurrency());
  return {plan_storage(kCPU, stride * threads + 4096, [] { return std::string("the scratch memory of matrix products and sorts"); }), stride};
}

std::shared_ptr<graph::Storage> output_storage(const Plan& plan, const codegen::KernelLaunch& l, const graph::Node* out) {
  return plan_storage(plan.device, out->bytes(), [&] {
    const std::string lines = graph::source_lines_str(l.lines);
    return std::string(dtype_name(out->dtype)) + graph::shape_str(out->shape) +
           (lines.empty() ? "" : " computed at " + lines);
  });
}

// The arena of the plan's intermediates.
std::shared_ptr<graph::Storage> arena_storage(const Plan& plan) {
  return plan_storage(plan.device, plan.arena_bytes, [&] {
    std::vector<graph::SourceLine> lines;
    for (const codegen::KernelLaunch& l : plan.schedule.launches)
      if (std::any_of(l.outputs.begin(), l.outputs.end(), [&](const graph::Node* o) { return plan.arena_offset.count(o); }) &&
          lines.size() <= 4) // source_lines_str names 4
        for (const graph::SourceLine& s : l.lines) graph::add_source_line(lines, s);
    const std::string at = graph::source_lines_str(lines);
    return std::to_string(plan.arena_offset.size()) + " intermediate values" + (at.empty() ? "" : " computed at " + at);
  });
}

// The index of `n` in `nodes`, or -1 where it is absent or there more than once.
int only_position(const std::vector<const graph::Node*>& nodes, const graph::Node* n) {
  const auto first = std::find(nodes.begin(), nodes.end(), n);
  if (first == nodes.end() || std::find(first + 1, nodes.end(), n) != nodes.end()) return -1;
  return static_cast<int>(first - nodes.begin());
}

// Whether `plan` may compute `output` into the storage bound to `input`: the output's one writer
// runs after every launch that checks indices (a failed check must leave the caller's values as
// they were: execute() reads the checks' verdict before the first write in place), is the last
// launch to read the input, and its kernel reads the input only where it writes the output
// (codegen::may_write_in_place at the launch's parameters). `fixed` is set when the answer holds
// for every execution: it read no parameter that a seed or an integer constant may replace.
bool may_compute_in_place(const Plan& plan, const graph::Node* input, const graph::Node* output, const SeedOverrides& seeds,
                          const ConstOverrides& consts, bool& fixed) {
  fixed = true;
  const auto& launches = plan.schedule.launches;
  if (input->dtype != output->dtype || input->shape != output->shape || plan.arena_offset.count(output)) return false;
  size_t writer = launches.size(), first_writable = 0; // the launches before first_writable check indices
  for (size_t i = 0; i < launches.size(); ++i) {
    if (checks_indices(launches[i])) first_writable = i + 1;
    if (writer == launches.size() && std::find(launches[i].outputs.begin(), launches[i].outputs.end(), output) != launches[i].outputs.end())
      writer = i;
  }
  if (writer == launches.size() || writer < first_writable) return false;
  const bool read_later = std::any_of(launches.begin() + static_cast<ptrdiff_t>(writer) + 1, launches.end(), [&](const auto& l) {
    return std::find(l.inputs.begin(), l.inputs.end(), input) != l.inputs.end();
  });
  const codegen::KernelLaunch& l = launches[writer];
  const int out = only_position(l.outputs, output);
  if (read_later || out < 0) return false;
  const auto reads = std::count(l.inputs.begin(), l.inputs.end(), input);
  if (reads == 0) return true; // the writer does not read it
  if (reads > 1) return false;
  const int in = only_position(l.inputs, input);
  fixed = l.seed_params.empty() &&
          std::all_of(l.const_params.begin(), l.const_params.end(), [](const auto& c) { return is_floating(c.second->dtype); });
  std::vector<int64_t> scratch;
  return codegen::may_write_in_place(l.kernel, in, static_cast<int>(l.inputs.size()) + out, launch_params(l, seeds, consts, scratch));
}

// The donated storages (api.h, Donations) this execution computes outputs into, by output (see
// may_compute_in_place; its verdicts are kept in the plan). Anomaly mode, which may throw after
// any launch, writes nothing in place. CPU plans only: a CUDA kernel's inputs are `const
// __restrict__`, which lets NVCC read them through the non-coherent cache at any time, so a kernel
// would have to be compiled without that promise to write over one.
Bindings in_place_outputs(
    const Plan& plan, const Bindings& bindings, const Donations& donations, const SeedOverrides& seeds,
    const ConstOverrides& consts) {
  Bindings result;
  if (donations.empty() || anomaly_checks_on() || plan.device != kCPU) return result;
  NodeMap<bool> given;
  std::lock_guard lock(plan.in_place.mu);
  for (const auto& [input, index] : donations) {
    if (index >= plan.outputs.size()) continue;
    const graph::Node* output = plan.outputs[index].get();
    const auto bound = bindings.find(input);
    if (bound == bindings.end() || bound->second->device() != plan.device || result.count(output) ||
        std::exchange(given[input], true)) // an input given twice goes to the first output only
      continue;
    const auto known = plan.in_place.ok.find({input, output});
    bool ok = known != plan.in_place.ok.end() && known->second;
    if (known == plan.in_place.ok.end()) {
      bool fixed = false;
      ok = may_compute_in_place(plan, input, output, seeds, consts, fixed);
      if (fixed) plan.in_place.ok[{input, output}] = ok;
    }
    if (ok) result[output] = bound->second;
  }
  return result;
}

// Throws the first failed index check's kiln::Error (reading a GPU's buffer waits for its kernels).
void report_failed_checks(const std::shared_ptr<graph::Storage>& errors) {
  if (!errors) return;
  const auto host = errors->device() == kCPU ? errors : copy_to(*errors, kCPU);
  graph::throw_index_error(static_cast<const int64_t*>(host->data()));
}
} // namespace

std::vector<std::shared_ptr<graph::Storage>> execute(const Plan& plan, const Bindings& bindings,
                                                     const SeedOverrides& seeds, const ConstOverrides& consts,
                                                     const Donations& donations) {
  for (const auto& [node, storage] : bindings)
    if (storage->device() != plan.device)
      throw Error("realize", "an input " + std::string(dtype_name(node->dtype)) + graph::shape_str(node->shape) +
                                 " is on " + storage->device().str() + " but the computation runs on " +
                                 plan.device.str() + " (move it with .to(device))");
  const std::shared_ptr<graph::Storage> errors = error_buffer(plan);
  const auto written_over = in_place_outputs(plan, bindings, donations, seeds, consts);
  const ReservedScratch reserved = written_over.empty() ? ReservedScratch{} : reserve_scratch(plan);
  counters().in_place += written_over.size();
  Memory mem{plan, bindings, plan.arena_bytes ? arena_storage(plan) : nullptr, {}};
  mem.outputs.reserve(plan.outputs.size() + written_over.size()); // most values outside the arena leave the plan
  for (const auto& [out, storage] : written_over) mem.outputs[out] = storage;
  for (const auto& l : plan.schedule.launches)
    for (const graph::Node* out : l.outputs)
      if (!plan.arena_offset.count(out) && !mem.outputs.count(out)) mem.outputs[out] = output_storage(plan, l, out);
  Gpu* gpu = plan.device == kCPU ? nullptr : &Gpu::get(plan.device.index);
  const bool anomaly = anomaly_checks_on(); // kiln/anomaly.h: off, this load is all it costs
  std::vector<void*> bufs;
  std::vector<int64_t> scratch;
  bool checked = written_over.empty();
  for (size_t i = 0; i < plan.schedule.launches.size(); ++i) {
    const codegen::KernelLaunch& l = plan.schedule.launches[i];
    const auto over = static_cast<size_t>(std::count_if(l.outputs.begin(), l.outputs.end(), [&](const graph::Node* o) { return written_over.count(o); }));
    if (!checked && over) {
      report_failed_checks(errors); // every check has run (in_place_outputs): none fails after a write in place
      checked = true;
    }
    bufs.clear();
    for (const graph::Node* in : l.inputs) bufs.push_back(in ? mem.address(in) : errors->data());
    for (const graph::Node* out : l.outputs) bufs.push_back(mem.address(out));
    const std::vector<int64_t>& params = launch_params(l, seeds, consts, scratch);
    const bool observed = observe::on(), logged = options().debug >= 1;
    const auto t0 = observed || logged ? Clock::now() : Clock::time_point{}; // a clock read costs as much as a tiny launch
    const codegen::CpuKernelFn fn = gpu ? nullptr : plan.kernels[i]->get(); // the best code so far
    if (gpu) gpu->launch(plan.gpu_kernels[i], l.kernel.name, plan.gpu_configs[i], bufs, params);
    else run(fn, l, params, bufs.data(), reserved);
    ++counters().launches;
    if (observed) observe::launch(l, plan.device, t0, Clock::now());
    if (logged) {
      const char* tier = gpu ? nullptr : fn == plan.kernels[i]->quick ? "quick tier" : "optimized";
      log_launch(l, plan.device, plan.runs == 0 ? plan.cache_status[i] : "hit", tier, ms_since(t0), over);
    }
    if (anomaly)
      check_for_anomaly(l, plan.device, [&](const graph::Node* n) { return mem.address(n); }, seeds,
                        [&] { report_failed_checks(errors); });
  }
  ++plan.runs;
  report_failed_checks(errors); // no result is returned past a failed check
  std::vector<std::shared_ptr<graph::Storage>> result;
  for (const auto& n : plan.outputs) {
    if (auto it = mem.outputs.find(n.get()); it != mem.outputs.end()) result.push_back(it->second);
    else if (auto b = bindings.find(n.get()); b != bindings.end()) result.push_back(b->second);
    else result.push_back(n->realized());
  }
  return result;
}

namespace {

// ---------------------------------------------------------------- the schedule cache

// A realize's graph as the schedule cache sees it: the nodes computing the roots' values
// (graph::value_inputs), not descending below sources (inputs and realized nodes), inputs before users; and its
// structure as words. Equal keys mean equal graphs up to the sources' values, so equal plans.
struct GraphWalk {
  std::vector<const graph::Node*> order;
  std::vector<uint8_t> source;             // per node in order: read from its buffer
  std::vector<const graph::Node*> sources; // the sources, in order
  std::vector<int64_t> seeds;              // distinct random seeds, in order (kernel parameters)
  std::vector<const graph::Node*> consts;  // scalar Const nodes (not bools), in order (kernel parameters)
  std::vector<uint64_t> key;
  size_t hash = 0;
  bool root_is_source = false;             // a root was realized meanwhile (by another thread)
};

bool reads_buffer(const graph::Node* n) { return n->op == graph::OpKind::Input || n->realized() != nullptr; }

void append_dims(std::vector<uint64_t>& k, const graph::Node* n) {
  k.push_back(static_cast<uint64_t>(n->dtype));
  k.push_back(static_cast<uint64_t>(n->device.kind) << 32 | static_cast<uint32_t>(n->device.index));
  k.push_back(n->shape.size());
  for (int64_t d : n->shape) k.push_back(static_cast<uint64_t>(d));
}

// A Const node whose value is a kernel parameter (codegen::scalar_param): any but a bool's.
bool scalar_constant(const graph::Node* n) { return n->op == graph::OpKind::Const && n->dtype != DType::Bool; }

// A random leaf's seed is a kernel parameter (see codegen::KernelLaunch::seed_params): the
// key holds which of the graph's distinct seeds it is, not its value. So is a scalar constant's.
uint64_t seed_word(GraphWalk& w, const graph::Node* n) {
  if (scalar_constant(n)) return 0;
  if (n->op != graph::OpKind::Rand && n->op != graph::OpKind::Randn) return static_cast<uint64_t>(n->attrs.i0);
  auto it = std::find(w.seeds.begin(), w.seeds.end(), n->attrs.i0);
  if (it == w.seeds.end()) it = w.seeds.insert(it, n->attrs.i0);
  return static_cast<uint64_t>(it - w.seeds.begin());
}

// The floating Const node that the operand `n` of a pow or a divisor is, through views and casts,
// or null. The lowering keeps such constants baked into the kernel (codegen/src/lower.cpp, baked()),
// so the key must hold their values. (It may name more than the lowering bakes: that only costs a reuse.)
const graph::Node* baked_scalar(const graph::Node* n, const std::unordered_map<const graph::Node*, uint32_t>& pos,
                                const GraphWalk& w) {
  using graph::OpKind;
  const auto passes = [](OpKind op) { // ops whose lowering is their operand's expression (a Pad or Concat selects)
    return op == OpKind::Reshape || op == OpKind::Permute || op == OpKind::Expand || op == OpKind::Slice ||
           op == OpKind::Cast || op == OpKind::Detach || op == OpKind::CustomOutput;
  };
  while (!w.source[pos.at(n)] && passes(n->op)) n = n->inputs[0].get();
  return !w.source[pos.at(n)] && scalar_constant(n) ? n : nullptr;
}

// A source is its type and place; another node also its op, attributes and operands (by position).
void append_node(GraphWalk& w, const graph::Node* n, bool source,
                 const std::unordered_map<const graph::Node*, uint32_t>& pos) {
  std::vector<uint64_t>& k = w.key;
  k.push_back(source ? 0 : 1 + static_cast<uint64_t>(n->op));
  append_dims(k, n);
  if (source) return;
  const graph::Attrs& a = n->attrs;
  k.push_back(a.ints.size());
  for (int64_t v : a.ints) k.push_back(static_cast<uint64_t>(v));
  // Which custom call a node is an output of (attrs.i0, i1) does not change its value:
  // structurally equal graphs through different calls share a plan.
  const bool custom = n->op == graph::OpKind::CustomOutput;
  const uint64_t i0 = custom ? 0 : seed_word(w, n);
  // A scalar constant's value is a kernel parameter (codegen::scalar_param): the key holds
  // that it is one, the plan takes the values of the graph it runs for.
  const bool scalar = scalar_constant(n);
  if (scalar) w.consts.push_back(n);
  k.insert(k.end(), {scalar ? 0 : std::bit_cast<uint64_t>(a.f0), std::bit_cast<uint64_t>(a.f1), i0,
                     custom ? 0 : static_cast<uint64_t>(a.i1), graph::value_inputs(*n).size()});
  for (const graph::NodeRef& in : graph::value_inputs(*n)) k.push_back(pos.at(in.get()));
  const bool pow = n->op == graph::OpKind::Pow, div = n->op == graph::OpKind::Div;
  for (size_t i = 0; (pow || div) && i < n->inputs.size(); ++i)
    if (const graph::Node* c = pow || i == 1 ? baked_scalar(n->inputs[i].get(), pos, w) : nullptr)
      k.push_back(static_cast<uint64_t>(codegen::scalar_param_bits(*c)));
}

// One iterative post-order walk (deep graphs must not overflow the stack); each node's
// source decision is taken once, even if another thread realizes it meanwhile.
GraphWalk walk(const std::vector<graph::NodeRef>& roots) {
  constexpr uint32_t kOpen = ~uint32_t{0};
  struct Frame {
    const graph::Node* node;
    size_t next;
    bool source;
  };
  GraphWalk w;
  w.key.push_back(options().fusion ? 1 : 0);
  w.key.push_back(static_cast<uint64_t>(options().fuel));
  w.key.push_back(static_cast<uint64_t>(cpu_threads())); // the CPU target's threads (GEMM plans)
  std::unordered_map<const graph::Node*, uint32_t> pos;
  std::vector<Frame> stack;
  for (const graph::NodeRef& r : roots) {
    if (!pos.try_emplace(r.get(), kOpen).second) continue;
    stack.push_back({r.get(), 0, reads_buffer(r.get())});
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (!f.source && f.next < graph::value_inputs(*f.node).size()) {
        const graph::Node* child = graph::value_inputs(*f.node)[f.next++].get();
        if (pos.try_emplace(child, kOpen).second) stack.push_back({child, 0, reads_buffer(child)});
        continue;
      }
      const Frame done = f;
      stack.pop_back();
      pos[done.node] = static_cast<uint32_t>(w.order.size());
      append_node(w, done.node, done.source, pos);
      w.order.push_back(done.node);
      w.source.push_back(done.source);
      if (done.source) w.sources.push_back(done.node);
    }
  }
  for (const graph::NodeRef& r : roots) {
    const uint32_t p = pos.at(r.get());
    w.key.push_back(p);
    w.root_is_source = w.root_is_source || w.source[p];
  }
  size_t h = w.key.size();
  for (uint64_t v : w.key) h = (h ^ v) * 0x100000001b3ULL + (h >> 29);
  w.hash = h;
  return w;
}

// A plan made from a copy of a graph whose sources are placeholders, so that it holds no
// data; a realize with an equal key binds its own sources to them.
struct CachedPlan {
  std::vector<uint64_t> key;
  std::vector<graph::NodeRef> sources; // placeholders, in the walk's order of sources
  std::vector<int64_t> seeds;          // the plan's random seeds (GraphWalk::seeds)
  std::vector<graph::NodeRef> consts;  // its floating Const nodes, in the walk's order (GraphWalk::consts)
  Plan plan;
};

std::unique_ptr<CachedPlan> plan_copy(const GraphWalk& w, const std::vector<graph::NodeRef>& roots) {
  auto c = std::make_unique<CachedPlan>();
  c->key = w.key;
  c->seeds = w.seeds;
  std::unordered_map<const graph::Node*, graph::NodeRef> copy;
  for (size_t i = 0; i < w.order.size(); ++i) {
    const graph::Node* n = w.order[i];
    graph::NodeRef m;
    if (w.source[i]) {
      m = graph::make_input(n->dtype, n->shape, nullptr, n->device);
      c->sources.push_back(m);
    } else {
      std::vector<graph::NodeRef> inputs; // a custom output's copy keeps only its value (graph::value_inputs)
      for (const graph::NodeRef& in : graph::value_inputs(*n)) inputs.push_back(copy.at(in.get()));
      m = graph::make_node(n->op, n->dtype, n->shape, std::move(inputs), n->attrs, n->device);
    }
    if (scalar_constant(n) && !w.source[i]) c->consts.push_back(m);
    copy.emplace(n, std::move(m));
  }
  std::vector<graph::NodeRef> outputs;
  for (const graph::NodeRef& r : roots) {
    outputs.push_back(copy.at(r.get()));
    // A root computed from no source is its own copy (hash-consing): the cache would keep
    // the value attached to it. Such graphs are planned afresh each time.
    if (outputs.back() == r) return nullptr;
  }
  c->plan = make_plan(outputs);
  return c;
}

// Per thread (a Plan is executed by one thread at a time), bounded: cleared when full.
struct ScheduleCache {
  static constexpr size_t kMaxPlans = 256;
  std::unordered_map<size_t, std::vector<std::unique_ptr<CachedPlan>>> by_hash;
  size_t size = 0;

  CachedPlan* find(const GraphWalk& w) {
    auto it = by_hash.find(w.hash);
    if (it == by_hash.end()) return nullptr;
    for (const auto& c : it->second)
      if (c->key == w.key) return c.get();
    return nullptr;
  }
  CachedPlan* insert(const GraphWalk& w, std::unique_ptr<CachedPlan> c) {
    if (++size > kMaxPlans) {
      by_hash.clear();
      size = 1;
    }
    auto& bucket = by_hash[w.hash];
    bucket.push_back(std::move(c));
    return bucket.back().get();
  }
};
thread_local ScheduleCache t_schedule_cache;

// The cached plan for `roots` with its bindings and seeds; null where the plan must be made
// afresh (cache off, a source without data: make_plan and execute report that).
const Plan* cached_plan(const std::vector<graph::NodeRef>& roots, Bindings& bindings, SeedOverrides& seeds,
                        ConstOverrides& consts) {
  const GraphWalk w = walk(roots);
  counters().nodes += w.order.size();
  // Anomaly mode names the lines of this graph's nodes, which a cached plan's copies lack.
  if (!options().schedule_cache || w.root_is_source || anomaly_checks_on()) return nullptr;
  for (const graph::Node* s : w.sources)
    if (!s->realized()) return nullptr;
  ScheduleCache& cache = t_schedule_cache;
  CachedPlan* c = cache.find(w);
  if (c) {
    ++counters().plan_reuses;
    if (options().debug >= 2)
      std::fprintf(stderr, "[kiln] schedule: the plan of a structurally equal graph (%zu kernels)\n",
                   c->plan.schedule.launches.size());
  } else {
    std::unique_ptr<CachedPlan> fresh = plan_copy(w, roots);
    if (!fresh) return nullptr;
    c = cache.insert(w, std::move(fresh));
  }
  for (size_t i = 0; i < w.sources.size(); ++i) bindings[c->sources[i].get()] = w.sources[i]->realized();
  for (size_t i = 0; i < w.seeds.size(); ++i)
    if (c->seeds[i] != w.seeds[i]) seeds[c->seeds[i]] = w.seeds[i];
  for (size_t i = 0; i < w.consts.size(); ++i)
    if (const int64_t bits = codegen::scalar_param_bits(*w.consts[i]); bits != codegen::scalar_param_bits(*c->consts[i]))
      consts[c->consts[i].get()] = bits;
  return &c->plan;
}

// Computes `here` (all on one device) and attaches the values.
void realize_on_device(const std::vector<graph::NodeRef>& here) {
  ++counters().realizations;
  Bindings bindings;
  SeedOverrides seeds;
  ConstOverrides consts;
  std::vector<std::shared_ptr<graph::Storage>> values;
  if (const Plan* cached = cached_plan(here, bindings, seeds, consts)) {
    values = execute(*cached, bindings, seeds, consts);
  } else {
    const Plan plan = make_plan(here);
    values = execute(plan);
  }
  for (size_t i = 0; i < here.size(); ++i)
    if (!here[i]->realized()) here[i]->set_realized(values[i]);
}

} // namespace

void realize(const std::vector<graph::NodeRef>& nodes) {
  std::vector<graph::NodeRef> todo;
  for (const auto& n : nodes)
    if (!n->realized()) todo.push_back(n);
  while (!todo.empty()) { // one plan per device, in order of first appearance
    const Device device = todo[0]->device;
    std::vector<graph::NodeRef> here, later;
    for (auto& n : todo) (n->device == device ? here : later).push_back(std::move(n));
    realize_on_device(here);
    todo = std::move(later);
  }
}

PlanRef make_plan_ref(const std::vector<graph::NodeRef>& outputs) { return std::make_shared<const Plan>(make_plan(outputs)); }
size_t plan_launches(const Plan& plan) { return plan.schedule.launches.size(); }
size_t plan_arena_bytes(const Plan& plan) { return plan.arena_bytes; }

std::string schedule_dot(const std::vector<const graph::Node*>& outputs, Device device, bool fusion) {
  return codegen::schedule_dot(codegen::schedule(outputs, schedule_options(device, fusion)), outputs);
}

ExecutorStats executor_stats() {
  ExecutorStats s{counters().launches.load(), counters().compiles.load(), counters().realizations.load()};
  s.cuda_checked = cuda_checked_count();
  s.nodes = counters().nodes.load();
  s.plan_reuses = counters().plan_reuses.load();
  s.in_place = counters().in_place.load();
  return s;
}

} // namespace kiln::runtime

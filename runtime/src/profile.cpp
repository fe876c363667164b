// The per-kernel profile and the Chrome trace (kiln/profile.h), fed by the hooks of
// runtime/observe.h. Collection is guarded by one mutex; while both are off, nothing
// here runs but the hooks' flag test.

#include "kiln/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <unordered_map>

#include "codegen/lower.h"
#include "graph/node.h"
#include "kiln/options.h"
#include "runtime/observe.h"

namespace kiln::runtime::observe {

namespace detail {
std::atomic<unsigned> flags{0};
} // namespace detail

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct KernelAcc {
  std::string device;
  size_t calls = 0;
  // Summed over the launches: one kernel serves every shape its parameters allow (a GEMM
  // kernel runs several layers' products), so the first launch's figures would not do.
  double total_ms = 0, bytes = 0, flops = 0;
  std::vector<graph::SourceLine> lines;
};

struct StepAcc {
  size_t calls = 0, kernels = 0;
  double total_ms = 0, kernel_ms = 0;
};

// One complete ("X") event of the trace.
struct Event {
  const char* cat;
  std::string name, args;
  double ts_us, dur_us;
  int tid;
};

struct State {
  std::mutex mu;
  std::unordered_map<std::string, KernelAcc> kernels;
  std::vector<std::pair<std::string, StepAcc>> steps; // in order of first call
  std::string trace_path;
  std::vector<Event> events;
  std::map<std::string, int> device_tracks; // "cuda:0" -> its track's tid
  Clock::time_point origin = Clock::now();
  std::atomic<int> next_tid{1};
};

State& state() {
  static auto* s = new State; // never destroyed: used by the exit handler
  return *s;
}

thread_local double kernel_ms_here = 0;

int thread_track() {
  thread_local const int tid = state().next_tid.fetch_add(1);
  return tid;
}

double us_since_origin(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(t - state().origin).count();
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out;
}

void add_event(const char* cat, std::string name, Clock::time_point t0, Clock::time_point t1, std::string args,
               int tid = 0) {
  Event e{cat, std::move(name), std::move(args), us_since_origin(t0), us_since_origin(t1) - us_since_origin(t0),
          tid ? tid : thread_track()};
  State& s = state();
  std::lock_guard lock(s.mu);
  s.events.push_back(std::move(e));
}

int device_track(const std::string& device) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.device_tracks.try_emplace(device, 1000 + static_cast<int>(s.device_tracks.size())).first->second;
}

void write_trace(const std::string& path, const std::vector<Event>& events, const std::map<std::string, int>& tracks) {
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "[kiln] cannot write the trace file %s\n", path.c_str());
    return;
  }
  f << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  f << R"({"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"kiln"}})";
  for (const auto& [device, tid] : tracks)
    f << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << tid << ",\"args\":{\"name\":\"" << device
      << " (device time)\"}}";
  char buf[96];
  for (const Event& e : events) {
    std::snprintf(buf, sizeof buf, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":%d", e.ts_us, e.dur_us, e.tid);
    f << ",\n{\"name\":\"" << json_escape(e.name) << "\",\"cat\":\"" << e.cat << "\"" << buf << ",\"args\":{" << e.args
      << "}}";
  }
  f << "\n]}\n";
}

void set_flag(unsigned bit, bool on) {
  if (on) detail::flags.fetch_or(bit);
  else detail::flags.fetch_and(~bit);
}

void at_exit() {
  if (detail::flags.load() & detail::kProfile) kiln::profile::print();
  kiln::profile::stop_trace();
}

} // namespace

void start_from_options() {
  // Once, at the first plan: options() is read lazily (programs and tests set the
  // environment first), and nothing is launched before a plan exists.
  static const bool started = [] {
    if (!options().profile && options().trace_path.empty()) return false;
    if (options().profile) set_flag(detail::kProfile, true);
    if (!options().trace_path.empty()) kiln::profile::start_trace(options().trace_path);
    std::atexit(at_exit);
    return true;
  }();
  (void)started;
}

double launch_bytes(const codegen::KernelLaunch& l) {
  auto bytes = [](const graph::Node* n) { return static_cast<double>(n->bytes()); };
  double b = 0;
  for (const graph::Node* out : l.outputs) b += bytes(out);
  for (const graph::Node* in : l.inputs)
    if (in) b += bytes(in); // null: the error buffer of in-kernel index checks
  return b;
}

double launch_flops(const codegen::KernelLaunch& l) {
  const auto& r = l.kernel.reductions;
  if (r.size() != 1 || !r[0].fma) return 0;
  return 2.0 * static_cast<double>(l.domain_size) * static_cast<double>(l.work_per_point);
}

void launch(const codegen::KernelLaunch& l, Device device, Clock::time_point t0, Clock::time_point t1) {
  const double ms = ms_between(t0, t1);
  kernel_ms_here += ms;
  const unsigned f = detail::flags.load(std::memory_order_relaxed);
  if (f & detail::kTrace)
    add_event("launch", l.kernel.name, t0, t1,
              "\"device\":\"" + device.str() + "\",\"points\":" + std::to_string(l.domain_size) +
                  ",\"lines\":\"" + json_escape(graph::source_lines_str(l.lines)) + "\"");
  if (!(f & detail::kProfile)) return;
  State& s = state();
  std::lock_guard lock(s.mu);
  KernelAcc& k = s.kernels[l.kernel.name];
  if (k.calls == 0) k.device = device.str();
  k.bytes += launch_bytes(l);
  k.flops += launch_flops(l);
  ++k.calls;
  k.total_ms += ms;
  for (const graph::SourceLine& line : l.lines) graph::add_source_line(k.lines, line);
}

void step(const std::string& where, Clock::time_point t0, Clock::time_point t1, double kernel_ms, size_t kernels) {
  const unsigned f = detail::flags.load(std::memory_order_relaxed);
  if (f & detail::kTrace) add_event("step", "step " + where, t0, t1, "\"kernels\":" + std::to_string(kernels));
  if (!(f & detail::kProfile)) return;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = std::find_if(s.steps.begin(), s.steps.end(), [&](const auto& p) { return p.first == where; });
  if (it == s.steps.end()) it = s.steps.insert(s.steps.end(), {where, StepAcc{}});
  ++it->second.calls;
  it->second.total_ms += ms_between(t0, t1);
  it->second.kernel_ms += kernel_ms;
  it->second.kernels = kernels;
}

double thread_kernel_ms() { return kernel_ms_here; }

void device_span(const char* cat, std::string name, const std::string& device, Clock::time_point t0,
                 Clock::time_point t1) {
  if (tracing()) add_event(cat, std::move(name), t0, t1, "\"device\":\"" + device + "\"", device_track(device));
}

Span::Span(const char* cat, std::string name) : cat_(cat), active_(tracing()) {
  if (!active_) return;
  name_ = std::move(name);
  t0_ = Clock::now();
}

Span::~Span() {
  if (active_) add_event(cat_, std::move(name_), t0_, Clock::now(), std::move(args_));
}

void Span::arg(const char* key, const std::string& value) {
  if (!active_) return;
  args_ += (args_.empty() ? "\"" : ",\"") + std::string(key) + "\":\"" + json_escape(value) + "\"";
}

void Span::arg(const char* key, double value) {
  if (!active_) return;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  args_ += (args_.empty() ? "\"" : ",\"") + std::string(key) + "\":" + buf;
}

} // namespace kiln::runtime::observe

namespace kiln::profile {

namespace obs = runtime::observe;

void enable(bool on) { obs::set_flag(obs::detail::kProfile, on); }
bool enabled() { return (obs::detail::flags.load() & obs::detail::kProfile) != 0; }

void reset() {
  obs::State& s = obs::state();
  std::lock_guard lock(s.mu);
  s.kernels.clear();
  s.steps.clear();
}

std::vector<KernelRow> kernels() {
  obs::State& s = obs::state();
  std::vector<KernelRow> rows;
  {
    std::lock_guard lock(s.mu);
    for (const auto& [name, k] : s.kernels)
    {
      const double calls = static_cast<double>(std::max<size_t>(k.calls, 1));
      rows.push_back({name, k.device, k.calls, k.total_ms, k.bytes / calls, k.flops / calls,
                      graph::source_lines_str(k.lines)});
    }
  }
  std::sort(rows.begin(), rows.end(), [](const KernelRow& a, const KernelRow& b) {
    return a.total_ms != b.total_ms ? a.total_ms > b.total_ms : a.name < b.name;
  });
  return rows;
}

std::vector<StepRow> steps() {
  obs::State& s = obs::state();
  std::lock_guard lock(s.mu);
  std::vector<StepRow> rows;
  for (const auto& [where, st] : s.steps) rows.push_back({where, st.calls, st.total_ms, st.kernel_ms, st.kernels});
  return rows;
}

namespace {

std::string kernel_table(const std::vector<KernelRow>& rows) {
  double all_ms = 0;
  size_t launches = 0;
  for (const KernelRow& r : rows) {
    all_ms += r.total_ms;
    launches += r.calls;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "kiln profile: %zu kernels, %zu launches, %.3f ms in kernels\n", rows.size(), launches,
                all_ms);
  std::string out = buf;
  out += "  share   total ms    calls    mean us    MB/call     GB/s  GFLOP/s  kernel  [user lines]\n";
  for (const KernelRow& r : rows) {
    const double mean_ms = r.calls ? r.total_ms / static_cast<double>(r.calls) : 0;
    const double gbs = mean_ms > 0 ? r.bytes / mean_ms / 1e6 : 0;
    const double gflops = mean_ms > 0 && r.flops > 0 ? r.flops / mean_ms / 1e6 : 0;
    char gf[16] = "        -";
    if (r.flops > 0) std::snprintf(gf, sizeof gf, "%9.1f", gflops);
    std::snprintf(buf, sizeof buf, "%6.1f%% %10.3f %8zu %10.2f %10.3f %8.2f %s  %s%s%s%s\n",
                  all_ms > 0 ? 100 * r.total_ms / all_ms : 0.0, r.total_ms, r.calls, 1e3 * mean_ms, r.bytes / 1e6, gbs, gf,
                  r.name.c_str(), r.device == "cpu" ? "" : (" on " + r.device).c_str(), r.lines.empty() ? "" : "  [",
                  (r.lines + (r.lines.empty() ? "" : "]")).c_str());
    out += buf;
  }
  return out;
}

std::string step_table(const std::vector<StepRow>& rows) {
  if (rows.empty()) return "";
  std::string out = "compiled functions (per step: host time = total - kernel time)\n";
  out += "  called at              steps   total ms    mean ms  kernel ms/step  host ms/step  kernel share  kernels\n";
  char buf[256];
  for (const StepRow& r : rows) {
    const double n = std::max<double>(1, static_cast<double>(r.calls));
    std::snprintf(buf, sizeof buf, "  %-20s %7zu %10.3f %10.4f %15.4f %13.4f %12.1f%% %8zu\n", r.where.c_str(), r.calls,
                  r.total_ms, r.total_ms / n, r.kernel_ms / n, (r.total_ms - r.kernel_ms) / n,
                  r.total_ms > 0 ? 100 * r.kernel_ms / r.total_ms : 0.0, r.kernels);
    out += buf;
  }
  return out;
}

} // namespace

std::string report() { return kernel_table(kernels()) + step_table(steps()); }

void print() { std::fprintf(stderr, "%s", report().c_str()); }

scope::scope(bool print_at_end) : print_(print_at_end), was_on_(enabled()) {
  reset();
  enable(true);
}

scope::~scope() {
  if (print_) print();
  enable(was_on_);
}

void start_trace(const std::string& path) {
  stop_trace();
  obs::State& s = obs::state();
  {
    std::lock_guard lock(s.mu);
    s.trace_path = path;
    s.events.clear();
  }
  obs::set_flag(obs::detail::kTrace, true);
}

void stop_trace() {
  obs::State& s = obs::state();
  std::string path;
  std::vector<obs::Event> events;
  std::map<std::string, int> tracks;
  {
    std::lock_guard lock(s.mu);
    if (s.trace_path.empty()) return;
    obs::set_flag(obs::detail::kTrace, false);
    path = std::move(s.trace_path);
    s.trace_path.clear();
    events = std::move(s.events);
    s.events.clear();
    tracks = s.device_tracks;
  }
  obs::write_trace(path, events, tracks);
}

bool tracing() { return obs::tracing(); }

} // namespace kiln::profile

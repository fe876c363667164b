#pragma once
/// \file observe.h
/// The hooks behind kiln/profile.h: the executor, copies and compile() report here what
/// they do, for the per-kernel profile (KILN_PROFILE) and the Chrome trace (KILN_TRACE).
/// While both are off a hook costs one relaxed atomic load (on(), tracing()).

#include <atomic>
#include <chrono>
#include <string>

#include "kiln/device.h"

namespace kiln::codegen {
struct KernelLaunch; // codegen/lower.h; declared only, so the frontend, which includes this header, sees no codegen/
} // namespace kiln::codegen

namespace kiln::runtime::observe {

using Clock = std::chrono::steady_clock;

namespace detail {
inline constexpr unsigned kProfile = 1, kTrace = 2;
/// Which collectors are on (kProfile | kTrace).
extern std::atomic<unsigned> flags;
} // namespace detail

/// True when the profile or the trace collects.
inline bool on() { return detail::flags.load(std::memory_order_relaxed) != 0; }
/// True when the trace records.
inline bool tracing() { return (detail::flags.load(std::memory_order_relaxed) & detail::kTrace) != 0; }

/// Applies KILN_PROFILE and KILN_TRACE (options()) once per process: make_plan calls it.
void start_from_options();
/// Bytes a launch reads and writes (its inputs and its output).
double launch_bytes(const codegen::KernelLaunch& l);
/// Floating-point operations of a launch: 2 m n k for a contraction (a float fma sum), else 0.
double launch_flops(const codegen::KernelLaunch& l);

/// Records a launch the host ran (or queued) from t0 to t1: a profile row and a trace span.
void launch(const codegen::KernelLaunch& l, Device device, Clock::time_point t0, Clock::time_point t1);
/// Records a replay of a compiled function called at `where` (profile and trace "step" span);
/// kernel_ms is the part spent in launches (see thread_kernel_ms()).
void step(const std::string& where, Clock::time_point t0, Clock::time_point t1, double kernel_ms, size_t kernels);
/// Records a span of device time (from CUDA events, mapped onto the host clock) on the
/// device's own track, named after `device` ("cuda:0").
void device_span(const char* cat, std::string name, const std::string& device, Clock::time_point t0,
                 Clock::time_point t1);
/// Milliseconds of kernel launches recorded on this thread so far (differences give a step's share).
double thread_kernel_ms();

/// A trace span from construction to destruction, on the calling thread's track; inactive
/// (no clock read) when no trace records. `cat` is a category such as "schedule",
/// "compile", "copy", "trace", "plan", "chunk".
class Span {
public:
  /// Starts the span named `name`.
  Span(const char* cat, std::string name);
  /// Ends and records it.
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  /// Adds a string argument shown with the span.
  void arg(const char* key, const std::string& value);
  /// Adds a number argument.
  void arg(const char* key, double value);

private:
  const char* cat_;
  std::string name_, args_;
  Clock::time_point t0_;
  bool active_;
};

} // namespace kiln::runtime::observe

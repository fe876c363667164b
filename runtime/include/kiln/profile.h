#pragma once
/// \file profile.h
/// Seeing what ran: a per-kernel profile (KILN_PROFILE=1, or this API) and a Chrome
/// trace-event file (KILN_TRACE=path.json, or start_trace()). Both cost one branch per
/// kernel launch while off. Pulls in no LLVM, TBB or CUDA header.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::profile {

/// Turns the per-kernel profile on or off (KILN_PROFILE=1 turns it on at start and
/// prints the table at exit). What was collected stays until reset().
void enable(bool on = true);
/// True while the profile collects.
bool enabled();
/// Forgets every kernel and step collected so far.
void reset();

/// One kernel of the profile (kernels are keyed by name, so every plan that runs the
/// same kernel adds to one row).
struct KernelRow {
  std::string name;        ///< the kernel's name (k_<description>_<hash>)
  std::string device;      ///< where it ran ("cpu", "cuda:0")
  size_t calls = 0;        ///< launches
  double total_ms = 0;     ///< host time of its launches (on a GPU without KILN_LAUNCH_BLOCKING: queueing time)
  double bytes = 0;        ///< bytes read and written per call (inputs plus outputs), the mean over the calls
  double flops = 0;        ///< floating-point operations per call (2 m n k for a contraction, else 0), the mean
  std::string lines;       ///< the user's source lines of its ops ("train.cpp:160, train.cpp:161")
};
/// The kernels collected, by total time (largest first).
std::vector<KernelRow> kernels();

/// The replays of one compiled function (kiln/compile.h), keyed by the line that calls it.
struct StepRow {
  std::string where;      ///< the caller's line ("train.cpp:170")
  size_t calls = 0;       ///< replays
  double total_ms = 0;    ///< wall time of the calls (binding inputs, host values, kernels)
  double kernel_ms = 0;   ///< of which in kernel launches
  size_t kernels = 0;     ///< kernels in its plan (the last one)
};
/// The compiled functions collected, in order of first call.
std::vector<StepRow> steps();

/// The profile as a text table: per kernel calls, total and mean time, share of all
/// kernel time, bytes, GB/s, GFLOP/s (contractions) and user lines; then per compiled
/// function its steps' host time against kernel time.
std::string report();
/// Writes report() to stderr.
void print();

/// Collects the profile while it lives; at its end prints the table of what ran inside
/// it (when `print_at_end`) and restores the previous on/off state. Rows collected
/// before the scope are forgotten when it starts.
class scope {
public:
  /// Starts collecting (after reset()).
  explicit scope(bool print_at_end = true);
  /// Prints (if asked) and restores.
  ~scope();
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;

private:
  bool print_, was_on_;
};

/// Starts recording a Chrome trace (trace event format, for chrome://tracing and
/// ui.perfetto.dev) into `path`, replacing a trace already in progress (which is written).
void start_trace(const std::string& path);
/// Writes the trace in progress to its file and stops recording (nothing when none).
/// KILN_TRACE=path starts one at startup that is written at exit.
void stop_trace();
/// True while a trace records.
bool tracing();

} // namespace kiln::profile

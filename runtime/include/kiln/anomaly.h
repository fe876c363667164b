#pragma once
/// \file anomaly.h
/// Anomaly mode: finding where a NaN or an infinity comes from (KILN_DETECT_ANOMALY=1, or a
/// kiln::detect_anomaly scope). While it is on, every kernel's output is checked for NaN
/// and inf as soon as the kernel has run (on a GPU after waiting for it), in eager
/// realizes, item(), backward() and optimizer steps alike, and in compile()d steps. The
/// first kernel whose output holds one stops the computation with an AnomalyError naming
/// the first graph op that made a non-finite value from finite inputs: its name, the
/// element and the inputs' values there, its shape and dtype, the user's line, and whether
/// autograd made it for the gradient of a forward op (whose line it then names). A fused
/// kernel is searched by running its ops again one kernel per op (results are bitwise
/// those of the fused kernel), only after a detection, following the non-finite values
/// back from its output: the first op on that path to make one is named (what the
/// unfused mode, KILN_FUSION=0, names too). An op fed a NaN is not blamed; a value that
/// was already in the data is reported as such (Anomaly::from_input).
///
/// Off, it costs a thread-local test per plan execution (a few ns). On, every kernel's output is
/// read once more (on a GPU: copied to the host after a synchronization), and realize()
/// plans every graph afresh instead of reusing a structurally equal graph's plan, so that
/// messages name the lines of the graph at hand. Where infinities are legitimate (masked
/// attention logits of -inf), leave the mode off. Pulls in no LLVM, TBB or CUDA header.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"

namespace kiln {

/// Turns anomaly mode on (or off) on this thread while it lives, then restores what was
/// in force before; scopes nest. Without any scope, a thread follows options().detect_anomaly
/// (KILN_DETECT_ANOMALY=1), which is process-wide. The check runs on the thread that
/// realizes, so a scope covers what this thread computes (compiled steps included).
class detect_anomaly {
public:
  /// Turns the mode on (`on` true) or off on this thread.
  explicit detect_anomaly(bool on = true);
  /// Restores the state in force before.
  ~detect_anomaly();
  detect_anomaly(const detect_anomaly&) = delete;
  detect_anomaly& operator=(const detect_anomaly&) = delete;

private:
  int8_t saved_;
};

/// True when anomaly mode is on for this thread (a scope, else KILN_DETECT_ANOMALY).
bool anomaly_mode_enabled();

/// What anomaly mode found.
struct Anomaly {
  std::string op;              ///< the graph op that made the value ("log"), or "input" when a kernel read it
  std::string value;           ///< "NaN", "inf" or "-inf"
  std::vector<int64_t> index;  ///< the element (one index per dim of `shape`)
  std::string type;            ///< the op's result type ("f32[4]")
  std::string line;            ///< the user's line ("train.cpp:42"; for a gradient, its forward op's line); "" unknown
  std::string gradient_of;     ///< the forward op whose gradient (backward) made it ("" for a forward op)
  std::string tangent_of;      ///< the forward op whose tangent (jvp) made it ("" otherwise)
  std::string kernel;          ///< the kernel that was running (its name)
  bool from_input = false;     ///< the value was already in data the kernel read (not computed under the mode)
};

/// The kiln::Error anomaly mode throws (catchable as kiln::Error); its message says it all.
class AnomalyError : public Error {
public:
  /// An error reporting `a`, with `message` as what().
  AnomalyError(Anomaly a, const std::string& message) : Error(message), anomaly_(std::move(a)) {}
  /// What was found.
  const Anomaly& anomaly() const { return anomaly_; }

private:
  Anomaly anomaly_;
};

} // namespace kiln

#pragma once
/// \file options.h
/// Process-wide options, initialized from the environment (see the README's table).

#include <cstdint>
#include <string>

namespace kiln {

/// Run-time options. Read once from the environment; tests and programs may change them.
struct Options {
  /// KILN_DEBUG: 0 quiet, 1 launches, 2 schedule and fusion reasons, 3 kernel IR,
  /// 4 LLVM IR / CUDA source, 5 assembly.
  int debug = 0;
  /// KILN_FUSION (default 1): 0 runs one kernel per primitive op.
  bool fusion = true;
  /// KILN_FUEL=N: each schedule makes at most N fusion decisions, then gives every other node a
  /// kernel of its own (codegen::ScheduleOptions::fuel); bisects a fusion bug to one decision,
  /// which KILN_DEBUG=2 prints. Negative (the default): no limit.
  int64_t fuel = -1;
  /// KILN_DUMP_DIR: where debug output at levels >= 3 is also written as files ("" = none).
  std::string dump_dir;
  /// KILN_CACHE_DIR: the on-disk kernel cache (default ~/.cache/kiln; "" disables it).
  std::string cache_dir;
  /// KILN_CUDA_CHECK=1: every kernel compiled for the CPU is also emitted as CUDA and
  /// compiled by NVRTC (sm_90 and compute_90); skipped with one line where NVRTC is absent.
  bool cuda_check = false;
  /// KILN_DEVICE: cpu (default), cuda, cuda:N or auto; resolved by resolve_device()
  /// (kiln/devices.h). Programs such as examples/train read it; tensors are placed explicitly.
  std::string device = "cpu";
  /// KILN_LAUNCH_BLOCKING=1: wait for every GPU kernel to finish before the next call
  /// returns, so that a failing kernel is named (and launch times are real) when debugging.
  bool launch_blocking = false;
  /// KILN_PROFILE=1: collect the per-kernel profile from the start and print it at exit
  /// (kiln/profile.h). Read at startup; use kiln::profile::enable() to change it later.
  bool profile = false;
  /// KILN_TRACE=path.json: record a Chrome trace from the start and write it there at exit
  /// (kiln/profile.h). Read at startup; use kiln::profile::start_trace() to change it later.
  std::string trace_path;
  /// KILN_SCHEDULE_CACHE (default 1): 0 makes realize() plan every graph afresh instead of
  /// reusing the plan of a structurally equal graph realized before (runtime/executor.h).
  bool schedule_cache = true;
  /// KILN_DETECT_ANOMALY=1: check every kernel's output for NaN and inf and name the op that
  /// made one (kiln/anomaly.h). Process-wide; a kiln::detect_anomaly scope overrides it on its thread.
  bool detect_anomaly = false;
  /// KILN_JIT_TIER (default 1): 0 compiles every new CPU kernel by the optimized tier
  /// before its first launch, instead of a quick compile first with the optimized one in
  /// the background, swapped in when ready (codegen/llvm_jit.h). Same results either way.
  bool jit_tier = true;
  /// KILN_PERF_MAP=1: every CPU kernel the JIT links is listed in /tmp/perf-PID.map (its
  /// address, size and name), so that `perf record` / `perf report` attribute time to kernels
  /// by name. Off by default (the file stays in /tmp after the process).
  bool perf_map = false;
  /// KILN_DIST_TIMEOUT=seconds (default 300): how long a collective of kiln::dist waits for the
  /// other ranks before it throws kiln::Error naming the ranks not heard from (kiln/dist.h).
  double dist_timeout = 300;
  /// KILN_NCCL (default 1): collectives of kiln::dist on CUDA tensors use NCCL where every rank
  /// can (libnccl.so.2 loads, KILN_NCCL_LIBRARY); 0 stages them through host memory on MPI,
  /// whose sums are in rank order (bitwise the CPU path's). Consulted at each collective.
  bool nccl = true;
};

/// The options in force (a process-wide singleton).
Options& options();

} // namespace kiln

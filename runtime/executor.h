#pragma once
/// \file executor.h
/// Realization: a Plan is a schedule whose kernels are compiled and whose
/// intermediates are packed into one arena by liveness; executing it runs the
/// kernels on the plan's device: on the CPU with oneTBB, or queued on a GPU's stream
/// (runtime/cuda_runtime.h). realize() plans and executes once; capture and replay
/// keeps the Plan and executes it again with new inputs. The frontend sees only
/// runtime/api.h (realize, execute, plans as handles); this header is for the runtime,
/// tests and benchmarks.

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/llvm_jit.h"
#include "codegen/lower.h"
#include "graph/node.h"
#include "runtime/api.h"
#include "runtime/cuda_api.h"

namespace kiln::runtime {

/// A compiled, memory-planned schedule (declared in runtime/api.h).
struct Plan {
  Device device;                             ///< where its kernels run and its memory lives (its outputs' device)
  codegen::Schedule schedule;                ///< kernels in order
  std::vector<const codegen::CpuKernelSlot*> kernels; ///< compiled CPU code, one slot per launch (CPU plans):
                                             ///< the quick tier's code until the JIT swaps in the optimized one
  std::vector<CUfunction> gpu_kernels;       ///< loaded GPU kernels, one per launch (CUDA plans)
  std::vector<codegen::CudaLaunchConfig> gpu_configs; ///< their grids and blocks (seeds do not change them)
  std::vector<graph::NodeRef> outputs;       ///< what the plan computes (keeps the graph alive)
  std::unordered_map<const graph::Node*, size_t> arena_offset; ///< intermediates' byte offsets
  size_t arena_bytes = 0;                    ///< peak bytes of intermediates (the arena's size)
  size_t output_bytes = 0;                   ///< bytes of the outputs
  std::vector<const char*> cache_status;     ///< per launch, where make_plan found its code: hit, disk, miss
  mutable size_t runs = 0;                   ///< executions so far (later runs are all cache hits)
  /// Per donated (input, output) pair (api.h, Donations): whether the plan may compute the output
  /// into the input's storage, where that cannot change between executions (see executor.cpp).
  /// (A copy of a plan starts with none: its schedule may be changed.)
  struct InPlaceVerdicts {
    std::mutex mu;
    std::map<std::pair<const graph::Node*, const graph::Node*>, bool> ok;
    InPlaceVerdicts() = default;
    InPlaceVerdicts(const InPlaceVerdicts&) {}
    InPlaceVerdicts& operator=(const InPlaceVerdicts&) { return *this; }
  };
  mutable InPlaceVerdicts in_place;
};

/// How make_plan schedules for `device`: fused or not as `fusion` says, planned for the
/// device's target (this host's CPU from the LLVM backend, or the GPU's from its driver).
codegen::ScheduleOptions schedule_options(Device device, bool fusion);

/// Schedules, compiles and memory-plans the computation of `outputs` (realized nodes are
/// read), which must all live on one device.
Plan make_plan(const std::vector<graph::NodeRef>& outputs);
/// Same, fused or one kernel per op as `fusion` says rather than options().fusion.
Plan make_plan(const std::vector<graph::NodeRef>& outputs, bool fusion);

/// Counters of what the executor did (for tests and benchmarks).
struct ExecutorStats {
  size_t launches = 0;     ///< kernels run
  size_t compiles = 0;     ///< kernels compiled (cache misses)
  size_t realizations = 0; ///< realize() calls that ran something
  size_t cuda_checked = 0; ///< kernels also compiled as CUDA by NVRTC (KILN_CUDA_CHECK=1)
  size_t nodes = 0;        ///< graph nodes realize() walked (what it computed and the sources it read)
  size_t plan_reuses = 0;  ///< plans realize() took from the schedule cache
  size_t in_place = 0;     ///< outputs computed into a donated input's storage (api.h, Donations)
};
/// Current counters.
ExecutorStats executor_stats();

} // namespace kiln::runtime

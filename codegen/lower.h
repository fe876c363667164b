#pragma once
/// \file lower.h
/// Scheduling and lowering: partitions a graph into kernels and builds each
/// kernel's IR. Movement ops become index arithmetic (views), leaves such as
/// constants and random numbers are computed in place, and each kernel reads
/// the buffers of the nodes it depends on.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/target.h"
#include "graph/node.h"

namespace kiln::codegen {

/// How to partition the graph, and for what.
struct ScheduleOptions {
  bool fusion = true; ///< false: one kernel per primitive op (KILN_FUSION=0)
  /// What the kernels are planned for (their forms, form.h). The runtime passes the device's
  /// (runtime::schedule_options); the default is the baseline CPU, not this host's.
  Target target = Target::baseline_cpu();
};

/// One kernel launch in a schedule.
struct KernelLaunch {
  Kernel kernel;                          ///< finalized kernel IR
  std::vector<const graph::Node*> inputs; ///< node whose buffer binds to input buffer i (null: the error buffer)
  const graph::Node* output = nullptr;    ///< the node this launch computes (the last buffer)
  std::vector<int64_t> params;            ///< values of the kernel's i64 parameters
  std::vector<int> seed_params;           ///< indices into params holding random seeds (replays may change them)
  /// Params holding scalar constants (kernel_ir.h, scalar_param()) and the Const node of each, in the
  /// order the lowering met them; a plan reused for a graph with other constants changes them.
  std::vector<std::pair<int, const graph::Node*>> const_params;
  int64_t domain_size = 0;                ///< number of domain points
  int64_t work_per_point = 1;             ///< loop trips per domain point (for chunk sizes)
  int64_t min_chunk = 1;                  ///< smallest useful chunk of domain points (whole rows for matmul)
  int64_t gemm_tasks = 0;                 ///< CPU GEMM-form kernel (kernel.gemm): tasks (output blocks) to run
  std::vector<graph::SourceLine> lines;   ///< the user's lines of the ops computed in it (graph::Node::origin), first seen first
  std::vector<const graph::Node*> nodes;  ///< the nodes it computes (not those it loads), output included, first seen first
};

/// Kernels in execution order.
struct Schedule {
  std::vector<KernelLaunch> launches;     ///< in dependency order
  std::vector<std::string> decisions;     ///< why kernel boundaries are where they are (KILN_DEBUG=2)
  /// Each kernel root (a node with a buffer of its own) and why it is not fused into its users.
  std::unordered_map<const graph::Node*, std::string> boundaries;
};

/// Builds the schedule that computes `outputs` (nodes already realized are read, not recomputed).
Schedule schedule(const std::vector<const graph::Node*>& outputs, const ScheduleOptions& options);

} // namespace kiln::codegen

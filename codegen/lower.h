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
  /// At most this many fusion decisions (fusing a node into a kernel, storing a value with another
  /// kernel) per schedule; later nodes get kernels of their own. Negative: no limit. KILN_FUEL=N
  /// bisects a fusion bug to one decision: the smallest N that shows it names it (KILN_DEBUG=2).
  int64_t fuel = -1;
};

/// One decision of the fusion pass: where a node is computed, and why (printed at KILN_DEBUG=2).
struct FusionDecision {
  /// What was decided.
  enum class Kind : uint8_t {
    Kernel, ///< the node is a kernel root: it gets a buffer of its own
    Fuse,   ///< the node is computed inside the kernel of `kernel` (elementwise, row reduction, epilogue)
    Store,  ///< the kernel root is computed and stored by the kernel of `kernel` (a multi-output kernel)
    Recompute, ///< the node is computed again inside each kernel that reads it (`kernel` is null)
  };
  Kind kind;
  const graph::Node* node;          ///< the node decided
  const graph::Node* kernel;        ///< the root whose kernel computes it (the node itself for Kernel; null for Recompute)
  std::string why;                  ///< the reason, in words
  std::string kernel_name;          ///< the name of the kernel that computes it (set once lowered)
  /// One line: "kernel for add f32[8] (main.cpp:3): requested output -> k_add_f32_...".
  std::string text() const;
};

/// One kernel launch in a schedule.
struct KernelLaunch {
  Kernel kernel;                          ///< finalized kernel IR
  std::vector<const graph::Node*> inputs; ///< node whose buffer binds to input buffer i (null: the error buffer)
  /// The nodes this launch stores, at least one: output j is buffer inputs.size() + j (the last
  /// buffers). The first is the kernel's root; the others are values over the same domain that
  /// the kernel stores as well (see schedule()).
  std::vector<const graph::Node*> outputs;
  std::vector<int64_t> params;            ///< values of the kernel's i64 parameters
  std::vector<int> seed_params;           ///< indices into params holding random seeds (replays may change them)
  /// Params holding scalar constants (kernel_ir.h, scalar_param()) and the Const node of each, in the
  /// order the lowering met them; a plan reused for a graph with other constants changes them.
  std::vector<std::pair<int, const graph::Node*>> const_params;
  int64_t domain_size = 0;                ///< number of domain points
  int64_t work_per_point = 1;             ///< loop trips per domain point (for chunk sizes)
  int64_t min_chunk = 1;                  ///< smallest useful chunk of domain points (whole rows for matmul)
  /// Chunks of the domain start at multiples of this many points: a Columns-form kernel's blocks,
  /// which a chunk boundary inside would split into two shorter blocks of the slow variable width.
  int64_t chunk_multiple = 1;
  int64_t gemm_tasks = 0;                 ///< CPU GEMM-form kernel (kernel.gemm) or attention kernel: tasks to run
  std::vector<graph::SourceLine> lines;   ///< the user's lines of the ops computed in it (graph::Node::origin), first seen first
  std::vector<const graph::Node*> nodes;  ///< the nodes it computes (not those it loads), outputs included, first seen first
  /// True when `n` is one of the outputs.
  bool stores(const graph::Node* n) const;
};

/// Kernels in execution order.
struct Schedule {
  std::vector<KernelLaunch> launches;     ///< in dependency order
  std::vector<FusionDecision> decisions;  ///< where each node is computed and why, in the order decided
  /// Per launch, one line: its kernel's name, the values it computes and the user's lines.
  std::vector<std::string> summaries;
  /// decisions' text() then the summaries: what KILN_DEBUG=2 prints.
  std::vector<std::string> debug_lines() const;
  /// Each kernel root (a node with a buffer of its own) and why it is not fused into its users.
  std::unordered_map<const graph::Node*, std::string> boundaries;
};

/// Builds the schedule that computes `outputs` (nodes already realized are read, not recomputed).
/// With fusion on, one kernel may store several values computed over the same domain (a
/// multi-output kernel): a value read only at the kernel's own points (a matmul's result and the
/// parameter updated from it; a forward value and what its backward keeps), an independent small
/// value over the same points (horizontal fusion), or a sibling reduction over the same rows.
Schedule schedule(const std::vector<const graph::Node*>& outputs, const ScheduleOptions& options);

} // namespace kiln::codegen

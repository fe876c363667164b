#pragma once
/// \file dot.h
/// A picture of a schedule: the graph as Graphviz DOT with each kernel drawn as a
/// cluster (labelled with its name and form) and each kernel boundary annotated with
/// the reason the partition gave for it.

#include <string>
#include <vector>

#include "codegen/lower.h"

namespace kiln::codegen {

/// The form of a kernel in words: "gemm", "matmul", "row" (reductions then a map over
/// the row), "reduce" or "elementwise".
std::string kernel_form(const Kernel& k);

/// DOT text of `s`, the schedule computing `outputs`: a cluster per launch holding the
/// nodes it computes (a node recomputed in several kernels, such as a broadcast
/// constant, is drawn in the first), realized inputs outside every cluster, and edges
/// between kernels labelled with the producer's boundary reason. Renders with `dot -Tsvg`.
std::string schedule_dot(const Schedule& s, const std::vector<const graph::Node*>& outputs);

} // namespace kiln::codegen

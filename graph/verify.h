#pragma once
/// \file verify.h
/// The graph's invariants: what every node of each op must satisfy.

#include <string>
#include <vector>

#include "graph/node.h"

namespace kiln::graph {

/// Checks one prospective node; returns "" when valid, else what is wrong.
std::string check_node(OpKind op, DType dtype, const Shape& shape, const std::vector<NodeRef>& inputs,
                       const Attrs& attrs);
/// Checks every node reachable from `roots`; returns "" or the first problem, naming the node.
std::string verify(const std::vector<NodeRef>& roots);

/// True for the ops defined on floating point only (exp, log, div, ...): ops.def's Types column is Float.
bool is_float_only(OpKind op);
/// True for comparisons and logical ops, whose result is bool: ops.def's Types column is Bool.
bool returns_bool(OpKind op);

} // namespace kiln::graph

#pragma once
/// \file rules.h
/// The per-op differentiation rules, on graph nodes. Each rule builds its result
/// from primitive ops through graph::build, so gradients are ordinary graph: they
/// fuse with the forward pass and can be differentiated again.

#include <vector>

#include "graph/node.h"

namespace kiln::autograd {

using graph::NodeRef;

/// Reverse mode: given y (a node) and the adjoint `g` of y (y's shape and dtype),
/// returns one gradient per operand of y, shaped and typed like that operand;
/// null where the operand gets no gradient (conditions, integer casts, Detach).
/// Throws kiln::Error naming the op when the op has no rule.
std::vector<NodeRef> vjp_rule(const NodeRef& y, const NodeRef& g);

/// Forward mode: given y and one tangent per operand of y (null = zero tangent),
/// returns the tangent of y (y's shape and dtype), or null when it is zero.
/// Throws kiln::Error naming the op when the op has no rule.
NodeRef jvp_rule(const NodeRef& y, const std::vector<NodeRef>& tangents);

/// True when gradients may flow from a node of this op into its operands
/// (false for Detach, for custom outputs, whose call the walks apply instead, and for ops whose
/// result is not floating-point).
bool is_differentiable(const graph::Node& y);

} // namespace kiln::autograd

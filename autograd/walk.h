#pragma once
/// \file walk.h
/// The two walks over the graph: reverse mode (one reverse-topological walk that
/// applies the VJP rules) and forward mode (one topological walk that applies
/// the JVP rules). Both follow only differentiable edges: into floating-point
/// operands, never through Detach, and from a custom output to its call's inputs (its operands
/// after the first), by the call's rules.

#include <source_location>
#include <vector>

#include "graph/node.h"

namespace kiln::autograd {

using graph::NodeRef;

/// Reverse mode: the gradients of sum_i <outputs[i], seeds[i]> with respect to
/// each target node, as graph. Only nodes on a path from a target to an output
/// get adjoints; gradients reaching a node along several paths are summed. A
/// target that no differentiable path connects to the outputs gets null.
/// Each seed has its output's shape and dtype; outputs and targets are floating. A kiln::Error
/// (a custom output without its rules) names `where`, the user's call.
std::vector<NodeRef> vjp(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& seeds,
                         const std::vector<NodeRef>& targets,
                         const std::source_location& where = std::source_location::current());

/// Forward mode: the tangents of `outputs` when each primal node moves along its
/// tangent (null: a zero tangent), as graph; null where an output's tangent is zero.
/// A tangent has its primal's shape and dtype. Every primitive op has a real forward
/// rule; only a custom call without a forward rule is handled by transposing its
/// reverse rule (the double-VJP trick: J t = d/du <vjp(u), t>). Errors name `where`, as vjp()'s.
std::vector<NodeRef> jvp(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& primals,
                         const std::vector<NodeRef>& tangents,
                         const std::source_location& where = std::source_location::current());

} // namespace kiln::autograd

#pragma once
/// \file custom.h
/// Custom-gradient calls. A call's outputs are CustomOutput nodes (graph/ops.def): operand 0
/// is the value, the further operands are the call's inputs, and attrs name the call (i0, an
/// id unique per call, so hash-consing never merges two calls) and the output (i1). The
/// graph thus records the dependency the gradient follows; lowering treats the node as the
/// identity of its value. What cannot live in a node, the call's name and rules, sits in a
/// process-wide side table keyed by the call id, alive while any output of the call is.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/node.h"

namespace kiln::autograd {

using graph::NodeRef;

/// The rules of a group of outputs computed together, whose derivatives come from
/// here rather than from the graph that computed the values.
struct CustomCall {
  /// Names the call in error messages.
  std::string name;
  /// Reverse rule: given the call's outputs and one adjoint per output (zeros where
  /// none reached it), returns one gradient per input, shaped and typed like it
  /// (null: no gradient). Must be linear in the adjoints.
  std::function<std::vector<NodeRef>(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& adjoints)> vjp;
  /// Forward rule, optional: given the outputs and one tangent per input (null: zero),
  /// returns one tangent per output (null: zero). When empty, forward mode
  /// transposes `vjp` (see jvp() in walk.h).
  std::function<std::vector<NodeRef>(const std::vector<NodeRef>& outputs, const std::vector<NodeRef>& tangents)> jvp;
};

/// Makes the outputs of a custom call: one fresh node per value (floating dtypes
/// only), equal to the value, whose derivatives with respect to `inputs` (the operands
/// gradients are computed for) come from `call`.
std::vector<NodeRef> make_custom_outputs(std::shared_ptr<const CustomCall> call, const std::vector<NodeRef>& inputs,
                                         const std::vector<NodeRef>& values);

/// A fresh node equal to `x` through which gradients pass unchanged (an identity
/// with an identity of its own: the point where forward mode seeds a tangent).
NodeRef fresh_alias(const NodeRef& x);

/// A fresh node of zeros shaped, typed and placed like `like`, equal to no other node,
/// that blocks gradients: a placeholder to differentiate with respect to.
NodeRef fresh_zeros(const NodeRef& like);

/// A fresh node equal to `x`, equal to no other node, that blocks gradients: a leaf of
/// its own made from a value that has no data yet (requires_grad_() inside compile()).
NodeRef fresh_leaf(const NodeRef& x);

/// What the walks need to know about a custom output.
struct CustomInfo {
  std::shared_ptr<const CustomCall> call; ///< null when the node is not a custom output with rules
  size_t index = 0;                       ///< which output of the call the node is (attrs.i1)
  std::vector<NodeRef> outputs;           ///< all outputs of the call, in order
};

/// The custom call behind node `n`: null `call` when n is not a CustomOutput, or is one without
/// rules in this process (a fresh leaf, or a node read from graph text).
CustomInfo find_custom(const graph::Node& n);

/// Number of calls in the side table with a live output (for leak tests).
size_t custom_table_size();

} // namespace kiln::autograd

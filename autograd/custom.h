#pragma once
/// \file custom.h
/// Custom-gradient nodes. A custom call's outputs are fresh nodes (Detach nodes
/// tagged with a call id, so hash-consing never merges them with anything else,
/// and lowering treats them as the identity). A side table, keyed by node,
/// records the call whose rules the walks use instead of the op's own rule:
/// without the table such a node is a plain Detach.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/node.h"

namespace kiln::autograd {

using graph::NodeRef;

/// A group of outputs computed together, whose derivatives come from rules
/// given here rather than from the graph that computed the values.
struct CustomCall {
  /// Names the call in error messages.
  std::string name;
  /// The operands that gradients are computed for.
  std::vector<NodeRef> inputs;
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
/// only), equal to the value, whose derivatives come from `call`.
std::vector<NodeRef> make_custom_outputs(std::shared_ptr<const CustomCall> call, const std::vector<NodeRef>& values);

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
  std::shared_ptr<const CustomCall> call; ///< null when the node is not a custom output
  size_t index = 0;                       ///< which output of the call the node is
  std::vector<NodeRef> outputs;           ///< all outputs of the call, in order
};

/// The custom call behind node `n`, if any.
CustomInfo find_custom(const graph::Node& n);

/// Number of live entries in the side table (for leak tests).
size_t custom_table_size();

} // namespace kiln::autograd

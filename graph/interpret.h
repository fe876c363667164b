#pragma once
/// \file interpret.h
/// The reference interpreter: evaluates a graph node by node with plain C++
/// loops, in f64 (integers exactly, in int64 with the dtype's wrap-around), with
/// no code generation. It is the oracle that tests compare the JIT against.
///
/// exp, log, sin, cos, tanh, sigmoid and pow are evaluated in long double and
/// rounded once, so that f64 results are (nearly always) correctly rounded.
///
/// Semantics (the ones the JIT implements):
///  - integer add/sub/mul/neg/abs wrap around in the node's width;
///  - pow: floats like std::pow; integers by repeated squaring, a negative
///    exponent gives 0 unless the base is 1 or -1;
///  - maximum/minimum/max/min propagate NaN; relu(NaN) is NaN;
///  - comparisons are IEEE; logical ops test != 0;
///  - casts float -> int saturate (NaN -> 0), anything -> bool is != 0;
///  - argmax/argmin give the first index of the extreme, a NaN counting as extreme;
///  - the sum of an empty set is 0.
/// Leaves: Input nodes (and, optionally, any realized node) are read from their
/// storage, which is contiguous row-major with elements of the node's dtype.

#include <cstdint>
#include <vector>

#include "graph/node.h"

namespace kiln::graph {

/// Options of interpret().
struct InterpretOptions {
  /// Round the result of every f32 node to float, so that the interpreter mimics
  /// f32 arithmetic closely (each op exact in f64, then rounded once).
  bool exact_f32_rounding = true;
  /// Read any node that is already realized from its storage instead of
  /// recomputing it (Input nodes are always read).
  bool use_realized = false;
};

/// The value of one root.
struct InterpretResult {
  DType dtype = DType::Float32;  ///< the root's dtype
  Shape shape;                   ///< the root's shape
  std::vector<double> values;    ///< every element, row-major, as a double
  std::vector<int64_t> ints;     ///< every element exactly (integer and bool dtypes only; empty for floats)
};

/// Evaluates `roots` (and everything they depend on). Throws kiln::Error when an
/// Input has no data.
std::vector<InterpretResult> interpret(const std::vector<NodeRef>& roots, const InterpretOptions& options = {});

/// Evaluates one root.
InterpretResult interpret_one(const NodeRef& root, const InterpretOptions& options = {});

} // namespace kiln::graph

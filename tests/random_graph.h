#pragma once
/// \file random_graph.h
/// A seeded generator of random, valid kiln programs, built through the public
/// API (so every graph is one a user could write): elementwise unary and binary
/// ops (comparisons and where included), casts, reductions with and without
/// keepdim, scans (cumsum, cumprod, cummax / cummin, logcumsumexp), movement
/// (reshape, permute, expand, strided slice, pad, concat),
/// matmul, with broadcasting, over f32/f64/i32/i64/bool, on small shapes with
/// size-1 and occasionally size-0 dims.
///
/// A program is a pure function of its seed: make_inputs() gives fresh input
/// tensors (new Input leaves each call), and build() replays the same ops on any
/// inputs of the specified shapes and dtypes, so the same program can run in
/// several modes (fused, unfused) and under gradcheck.
///
/// Also: graph-level helpers for differential tests: cloning a graph onto fresh
/// inputs, a first-order error bound (as an f64 graph evaluated by the reference
/// interpreter) and a minimizer that shrinks a failing graph.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph/node.h"
#include "kiln/kiln.h"

namespace kiln::testing {

/// How an input's values are drawn.
enum class Fill : uint8_t {
  Normal,   ///< floats in [-3, 3], ints in [-9, 9], bool 0/1
  Positive, ///< floats in [0.1, 4], ints in [1, 9]
  Ties,     ///< floats k/2 in [-2, 2], ints in [-2, 2] (ties for comparisons and argmax)
  Specials, ///< Normal mixed with NaN, +-inf, +-0 and large values
};

/// One input of a program.
struct InputSpec {
  IntList shape;
  DType dtype = kFloat32;
  Fill fill = Fill::Normal;
};

/// What the generator may produce.
struct GenOptions {
  int min_ops = 3;             ///< ops per program, at least
  int max_ops = 20;            ///< ops per program, at most
  bool differentiable = false; ///< f64 only, smooth ops only (for gradient checks)
  bool allow_empty = true;     ///< occasionally size-0 dims
  int64_t max_numel = 2048;    ///< cap on any value's element count
};

/// A random program: its inputs and a deterministic recipe (the seed).
struct RandomProgram {
  uint64_t seed = 0;
  GenOptions options;
  std::vector<InputSpec> inputs;
  /// Fresh input tensors with deterministic values (new Input leaves at each call).
  std::vector<Tensor> make_inputs() const;
  /// The program's outputs computed from `inputs` (shaped and typed as `this->inputs`).
  std::vector<Tensor> build(const std::vector<Tensor>& inputs) const;
  /// The op sequence as readable text (for failure messages).
  std::string describe() const;
};

/// The program of a seed.
RandomProgram make_program(uint64_t seed, const GenOptions& options = {});

/// A tensor of shape/dtype with deterministic values.
Tensor make_tensor(const InputSpec& spec, uint64_t seed);

// ---------------------------------------------------------------- graph helpers

/// The same graph over fresh Input leaves holding the same data (so nothing in it is
/// realized yet and it can be run again in another mode).
std::vector<graph::NodeRef> clone_graph(const std::vector<graph::NodeRef>& roots);

/// An f64 graph shaped like `n` bounding |jit - exact| element by element, to first order,
/// for a JIT whose elementwise ops are correctly rounded but for transcendentals (a few
/// ulps), and whose reductions and matmuls may sum in any order. 0 means the result must be
/// bitwise equal; inf (or NaN) means the element cannot be compared (a discrete decision on
/// an inexact value, or a perturbation near a singularity).
graph::NodeRef error_bound(const graph::NodeRef& n);

/// The interpreter's value of `n` as a fresh Input leaf of the same dtype and shape.
graph::NodeRef as_input(const graph::NodeRef& n);

/// Rebuilds `roots` with node `from` replaced by `to` (same dtype and shape).
std::vector<graph::NodeRef> substitute(const std::vector<graph::NodeRef>& roots, const graph::Node* from,
                                       const graph::NodeRef& to);

/// Shrinks `root` while `fails(root)` stays true: replaces subgraphs by inputs holding their
/// values, bypasses ops whose operand has the same type. Returns the smallest failing graph.
graph::NodeRef minimize(graph::NodeRef root, const std::function<bool(const graph::NodeRef&)>& fails,
                        int max_tries = 400);

/// Text IR of `root` followed by the values of its (small) inputs.
std::string describe_graph(const graph::NodeRef& root);

} // namespace kiln::testing

#pragma once
/// \file node.h
/// The graph: one hash-consed node type. Identical nodes are the same node,
/// so common subexpressions are shared by construction.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/shape.h"
#include "kiln/device.h"
#include "kiln/dtype.h"

namespace kiln::graph {

/// Every primitive op, from ops.def.
enum class OpKind : uint8_t {
#define KILN_OP(e, name, arity, cat, types) e,
#include "graph/ops.def"
#undef KILN_OP
};

/// The families of ops, which decide how they are lowered and differentiated.
enum class OpCategory : uint8_t { Leaf, Unary, Binary, Ternary, Reduce, Movement, Scan, Contraction, Attention, Custom };

/// An op's dtype rule (the Types column of ops.def).
enum class OpTypes : uint8_t {
  Any,   ///< any dtype its category allows
  Float, ///< float-only: operands and result are floating
  Bool,  ///< a predicate: the result is bool
};

/// The op's text name ("add").
std::string_view op_name(OpKind op);
/// The op's arity (-1: variadic).
int op_arity(OpKind op);
/// The op's category.
OpCategory op_category(OpKind op);
/// The op's dtype rule.
OpTypes op_types(OpKind op);
/// Looks an op up by its text name; false when unknown.
bool op_from_name(std::string_view name, OpKind& out);
/// Number of ops in the table.
constexpr int kNumOps = 0
#define KILN_OP(e, name, arity, cat, types) +1
#include "graph/ops.def"
#undef KILN_OP
    ;
/// True for Unary, Binary and Ternary ops.
inline bool is_elementwise(OpKind op) {
  const OpCategory c = op_category(op);
  return c == OpCategory::Unary || c == OpCategory::Binary || c == OpCategory::Ternary;
}

/// True for the scatters (ScatterAdd, ScatterMul, ScatterMax, ScatterMin: ops.def), the scans that
/// combine src into the positions an index names.
inline bool is_scatter(OpKind op) {
  return op == OpKind::ScatterAdd || op == OpKind::ScatterMul || op == OpKind::ScatterMax || op == OpKind::ScatterMin;
}

/// Raw memory holding a tensor's elements on some device. Backends subclass it.
class Storage {
public:
  virtual ~Storage() = default;
  /// Pointer to the first byte (device pointer for GPU storage).
  virtual void* data() const = 0;
  /// Size in bytes.
  virtual size_t bytes() const = 0;
  /// Where the memory lives.
  virtual Device device() const = 0;
};

/// Non-structural attributes of a node. Which fields an op reads is listed in ops.def.
struct Attrs {
  std::vector<int64_t> ints; ///< dims, permutations, slice and pad parameters
  double f0 = 0, f1 = 0;     ///< floating-point payload (constants, arange start/step)
  int64_t i0 = 0, i1 = 0;    ///< integer payload (integer constants, ids, seeds)
  friend bool operator==(const Attrs&, const Attrs&) = default;
};

/// Where a node was made in the user's code. It is not part of a node's structure (nor
/// of its hash), so caching and common subexpressions are unaffected: a hash-consed
/// node keeps the line of the call that first made it.
struct SourceLine {
  /// Whether autograd made the node for a forward op (its line is then that op's line).
  enum class Derived : uint8_t { No, Gradient, Tangent };
  const char* file = nullptr; ///< std::source_location::file_name() (static storage); null when unknown
  uint32_t line = 0;          ///< 1-based line
  Derived derived = Derived::No; ///< made by autograd's rule for the gradient or tangent of op `of`
  OpKind of = OpKind::Input;     ///< that forward op (when derived)
  /// True when known.
  explicit operator bool() const { return file != nullptr; }
  /// Same file name (by content) and line.
  friend bool operator==(const SourceLine& a, const SourceLine& b);
};
/// "train.cpp:42" (the file's base name and the line), or "" when unknown.
std::string source_line_str(const SourceLine& s);
/// "train.cpp:42, train.cpp:57" for a set of lines (at most `max` shown, then ", ..."), "" for none.
std::string source_lines_str(const std::vector<SourceLine>& lines, size_t max = 4);
/// Adds `s` to `lines` unless it is unknown or already there.
void add_source_line(std::vector<SourceLine>& lines, const SourceLine& s);

/// The user's call the active SourceScope records: the op ("" when the scope named none) and the
/// call's line. `known` is false outside any scope and inside autograd's (which record a line only).
struct SourceCall {
  std::string_view op;        ///< the op the scope named (a string with static storage), or ""
  std::source_location where; ///< the user's line of the call
  bool known = false;         ///< false when no scope made by a user's call is active
};

/// While it lives, nodes made on this thread record `loc` as their source line. The
/// outermost scope wins (the user's call into kiln, not the calls kiln's own ops make
/// inside it), unless `replace` (autograd gives a gradient its forward node's line).
class SourceScope {
public:
  /// Records `loc` unless an outer scope is active; `op` names the user's call made at `loc`
  /// (for errors raised inside it that know no op or line: see current_source_call()).
  explicit SourceScope(const std::source_location& loc, std::string_view op = {});
  /// Records `s` unless an outer scope is active and `replace` is false (an unknown `s` is ignored).
  SourceScope(const SourceLine& s, bool replace);
  ~SourceScope();
  SourceScope(const SourceScope&) = delete;
  SourceScope& operator=(const SourceScope&) = delete;

private:
  SourceLine saved_;
  SourceCall saved_call_;
  bool active_ = false;
};
/// The line nodes made now on this thread record (unknown outside any SourceScope).
SourceLine current_source_line();
/// See SourceCall.
SourceCall current_source_call();

class Node;
/// Nodes are shared and immutable (but for their realized value).
using NodeRef = std::shared_ptr<const Node>;

/// One op application. Construct only through make_node().
// The base is enable_shared_from_this<const Node> so that weak_from_this() on the const nodes
// everyone holds is a plain copy: libstdc++ converts a weak_ptr<Node> to weak_ptr<const Node>
// by taking and dropping a strong reference, which can destroy the node inside make_node's walk
// of the node table (tests/test_threads.cpp, TwoThreadsBuildingAndDroppingOneNodeAtOnce).
class Node : public std::enable_shared_from_this<const Node> {
public:
  OpKind op;                   ///< what it computes
  DType dtype;                 ///< element type of the result
  Shape shape;                 ///< static shape of the result
  std::vector<NodeRef> inputs; ///< operands
  Attrs attrs;                 ///< op parameters
  Device device;               ///< where its value is computed and lives (a leaf's own; else its inputs')
  size_t hash = 0;             ///< structural hash (op, dtype, shape, inputs, attrs, device)
  SourceLine origin;           ///< the user's line that first made it (not hashed; see SourceLine)
  /// The live grad-requiring tensors that computed this value each by ops of their own (the
  /// frontend's detail::result counts them; an op that returns an alias of its operand does not
  /// count). Identical computations merge into one node, so from 2 on, the gradients of those
  /// tensors cannot be told apart: kiln::grad refuses them rather than mix their uses.
  mutable std::atomic<int> tensor_makers{0};

  ~Node();
  /// Number of elements.
  int64_t numel() const { return graph::numel(shape); }
  /// Bytes of its value (contiguous).
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  /// The computed value, if this node was realized (or is an Input); else null.
  std::shared_ptr<Storage> realized() const { return realized_.load(); }
  /// Attaches the computed value (contiguous, row-major), which must live on the node's device.
  void set_realized(std::shared_ptr<Storage> s) const;

  struct Key; // construction key, see make_node
  Node(const Key&, OpKind op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs, Device device,
       size_t hash);

private:
  mutable std::atomic<std::shared_ptr<Storage>> realized_;
};

/// Returns the unique node with this structure, creating it if needed.
/// Asserts the graph invariants (see verify.h); user-facing checks are the frontend's.
/// `device` is a leaf's; any other node lives on its operand 0's device, which its value_inputs share.
NodeRef make_node(OpKind op, DType dtype, Shape shape, std::vector<NodeRef> inputs, Attrs attrs = {},
                  Device device = kCPU);
/// A new Input leaf holding `data` (or a placeholder when data is null), with a fresh id;
/// it lives on data's device, or on `device` for a placeholder.
NodeRef make_input(DType dtype, Shape shape, std::shared_ptr<Storage> data, Device device = kCPU);
/// Number of live nodes (for tests of hash-consing and graph size).
size_t live_node_count();

/// The operands `n`'s value is computed from: all of them, but for a custom output its operand 0 alone (its
/// further operands are its call's inputs, which only gradients follow; ops.def). Walks that compute values
/// (interpreter, scheduling, replay) follow these; walks over the graph's structure follow `inputs`.
inline std::span<const NodeRef> value_inputs(const Node& n) {
  return {n.inputs.data(), n.op == OpKind::CustomOutput ? 1 : n.inputs.size()};
}

/// All nodes reachable from `roots`, inputs before users (deterministic order).
std::vector<const Node*> topo_order(const std::vector<const Node*>& roots);
/// Same, not descending into the inputs of nodes for which `stop` is true (they are listed).
std::vector<const Node*> topo_order(const std::vector<const Node*>& roots, const std::function<bool(const Node*)>& stop);
/// The nodes that computing the roots' values reaches (through value_inputs), inputs before users, not
/// descending into the operands of nodes for which `stop` is true (they are listed).
std::vector<const Node*> value_order(const std::vector<const Node*>& roots,
                                     const std::function<bool(const Node*)>& stop = nullptr);

} // namespace kiln::graph

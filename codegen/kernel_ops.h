#pragma once
/// \file kernel_ops.h
/// The kernel IR's own operations, so that an emitter's switch lists only what can reach it:
///   * ScalarOp: an Op expression's operation (and a scan's combine), generated from the
///     elementwise rows (Unary, Binary, Ternary) of graph/ops.def less the few that never reach a
///     kernel as a scalar op (KILN_NOT_SCALAR_ below);
///   * ReduceOp: a Reduction's combine, generated from the Reduce rows of ops.def;
///   * RandomDist: a Random expression's distribution (the graph's Rand and Randn leaves).
/// A ScalarOp or ReduceOp has the name of its graph op ("add", "sum"), so the kernel text, and
/// with it every kernel name and golden file, reads as it did when the kernel IR held graph ops.
/// A new elementwise or reduction row in ops.def appears here with no line, and makes every
/// switch over the enum that lacks it a -Wswitch error.

#include <cstdint>
#include <optional>
#include <string_view>

#include "graph/node.h"
#include "graph/op_cases.h"

// The elementwise rows of ops.def that are not ScalarOps: the one place that lists them, one
// line each (`#define KILN_NOT_SCALAR_<Enum> KILN_PP_PROBE`, see graph/op_cases.h). Lowering
// handles each of them itself (lower.cpp, lower_elementwise, where -Wswitch asks for a case for
// a new one); the emitters never see them.
#define KILN_NOT_SCALAR_Detach KILN_PP_PROBE     // an identity: lowering removes it
#define KILN_NOT_SCALAR_CheckIndex KILN_PP_PROBE // lowered to ExprKind::Check

/// KILN_IF_SCALAR(e, cat, x...): x for the ops.def row (e, cat) that is a ScalarOp, else nothing.
/// Like graph/op_cases.h's selectors, for use inside a KILN_OP definition:
///   #define KILN_OP(e, name, arity, cat, types) KILN_IF_SCALAR(e, cat, case graph::OpKind::e:)
#define KILN_IF_SCALAR(e, cat, ...) \
  KILN_IF_ELEMENTWISE_##cat(KILN_PP_CAT(KILN_PP_DROP_, KILN_PP_IS_PROBE(KILN_NOT_SCALAR_##e))(__VA_ARGS__))
/// KILN_IF_NOT_SCALAR_ELEMENTWISE(e, cat, x...): x for the elementwise rows that are not ScalarOps.
#define KILN_IF_NOT_SCALAR_ELEMENTWISE(e, cat, ...) \
  KILN_IF_ELEMENTWISE_##cat(KILN_PP_CAT(KILN_PP_KEEP_, KILN_PP_IS_PROBE(KILN_NOT_SCALAR_##e))(__VA_ARGS__))

namespace kiln::codegen {

/// An Op expression's elementwise operation: ops.def's elementwise rows but those listed above.
/// Cast converts to the expression's dtype.
enum class ScalarOp : uint8_t {
#define KILN_OP(e, name, arity, cat, types) KILN_IF_SCALAR(e, cat, e,)
#include "graph/ops.def"
#undef KILN_OP
};

/// A reduction's combine: ops.def's Reduce rows (Sum, Max, Min, Argmax, Argmin).
enum class ReduceOp : uint8_t {
#define KILN_OP(e, name, arity, cat, types) KILN_IF_CATEGORY(cat, Reduce, e,)
#include "graph/ops.def"
#undef KILN_OP
};

/// A Random expression's distribution (graph/random.h).
enum class RandomDist : uint8_t {
  Uniform, ///< uniform in [0, 1) (the graph's Rand)
  Normal,  ///< standard normal (the graph's Randn)
};

/// The ScalarOp of a graph op; nullopt for an op that is none (not elementwise, or listed above).
std::optional<ScalarOp> scalar_op(graph::OpKind op);
/// The graph op a ScalarOp stands for (its name, arity and dtype rule are that op's).
graph::OpKind graph_op(ScalarOp op);
/// The ReduceOp of a graph op; nullopt for an op that is not a reduction.
std::optional<ReduceOp> reduce_op(graph::OpKind op);
/// The graph reduction a ReduceOp stands for.
graph::OpKind graph_op(ReduceOp op);

/// The op's text name, its graph op's ("add", "cast").
std::string_view op_name(ScalarOp op);
/// The reduction's text name, its graph op's ("sum", "argmax").
std::string_view op_name(ReduceOp op);
/// The distribution's text name in the kernel text: "rand" (Uniform) or "randn" (Normal).
std::string_view op_name(RandomDist dist);
/// The number of operands of the op (1, 2 or 3).
int op_arity(ScalarOp op);
/// True for comparisons and logical ops, whose result is bool.
bool returns_bool(ScalarOp op);

} // namespace kiln::codegen

#pragma once
/// \file reduction_kind.h
/// Internal: how a reduction op combines values, classified once for both emitters.

#include <string>

#include "graph/node.h"
#include "kiln/error.h"

namespace kiln::codegen {

/// The reduction combines.
enum class RedKind : uint8_t { Sum, Max, Min, Argmax, Argmin };

// Case labels for every op of ops.def except reductions: a new elementwise, movement or leaf
// op needs no line here, and a new reduction (no label generated) makes the switch below
// incomplete, which the compiler names (-Wswitch).
#define KILN_NOT_REDUCTION_Leaf(e) case graph::OpKind::e:
#define KILN_NOT_REDUCTION_Unary(e) case graph::OpKind::e:
#define KILN_NOT_REDUCTION_Binary(e) case graph::OpKind::e:
#define KILN_NOT_REDUCTION_Ternary(e) case graph::OpKind::e:
#define KILN_NOT_REDUCTION_Movement(e) case graph::OpKind::e:
#define KILN_NOT_REDUCTION_Contraction(e) case graph::OpKind::e:
#define KILN_NOT_REDUCTION_Attention(e) case graph::OpKind::e:
#define KILN_NOT_REDUCTION_Reduce(e)

/// The combine of a reduction op; a kiln bug (assertion) for any other op.
inline RedKind reduction_kind(graph::OpKind op) {
  switch (op) {
  case graph::OpKind::Sum: return RedKind::Sum;
  case graph::OpKind::Max: return RedKind::Max;
  case graph::OpKind::Min: return RedKind::Min;
  case graph::OpKind::Argmax: return RedKind::Argmax;
  case graph::OpKind::Argmin: return RedKind::Argmin;
#define KILN_OP(e, name, arity, cat) KILN_NOT_REDUCTION_##cat(e)
#include "graph/ops.def"
#undef KILN_OP
    break;
  }
  KILN_ASSERT(false, "not a reduction: " + std::string(graph::op_name(op)));
  return RedKind::Sum;
}

#undef KILN_NOT_REDUCTION_Leaf
#undef KILN_NOT_REDUCTION_Unary
#undef KILN_NOT_REDUCTION_Binary
#undef KILN_NOT_REDUCTION_Ternary
#undef KILN_NOT_REDUCTION_Movement
#undef KILN_NOT_REDUCTION_Contraction
#undef KILN_NOT_REDUCTION_Attention
#undef KILN_NOT_REDUCTION_Reduce

} // namespace kiln::codegen

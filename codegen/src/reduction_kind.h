#pragma once
/// \file reduction_kind.h
/// Internal: how a reduction op combines values, classified once for both emitters.

#include <string>

#include "graph/node.h"
#include "graph/op_cases.h"
#include "kiln/error.h"

namespace kiln::codegen {

/// The reduction combines.
enum class RedKind : uint8_t { Sum, Max, Min, Argmax, Argmin };

/// The combine of a reduction op; a kiln bug (assertion) for any other op.
inline RedKind reduction_kind(graph::OpKind op) {
  switch (op) {
  case graph::OpKind::Sum: return RedKind::Sum;
  case graph::OpKind::Max: return RedKind::Max;
  case graph::OpKind::Min: return RedKind::Min;
  case graph::OpKind::Argmax: return RedKind::Argmax;
  case graph::OpKind::Argmin: return RedKind::Argmin;
// every other op (graph/op_cases.h): a new reduction makes this switch incomplete
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_REDUCE_##cat(case graph::OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
    break;
  }
  KILN_ASSERT(false, "not a reduction: " + std::string(graph::op_name(op)));
  return RedKind::Sum;
}

} // namespace kiln::codegen

#pragma once
// How a CPU scan-form kernel walks its columns (kernel_ir.h, ScanLoop): read by the LLVM emitter and by
// lowering's chunking, so that both agree.

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// Whether a CPU scan kernel runs its columns one at a time, streaming along the axis: an argsort, and
/// a scan along the output's innermost axis (ScanLoop::inner_axis: a block of columns would read
/// kScanColumns far-apart rows per step) unless its combine is a logaddexp, whose exp and log1p make a
/// step's latency, not memory, the bound: then blocks of kScanColumns columns, whose chains overlap (and
/// vectorize), as on the other axes. A column's result is the same either way.
inline bool scan_column_at_a_time(const ScanLoop& sc) {
  return sc.sort || (sc.inner_axis && sc.op != ScanOp::LogAddExp);
}

} // namespace kiln::codegen

#pragma once
/// \file cuda_attention.h
/// Internal: the CUDA attention kernel (KernelForm::Attention, kernel_ir.h's AttentionSpec),
/// written into the kernel function the CUDA emitter (cuda_emitter.cpp) is building. The
/// emitter lends its statement writer and expression evaluation through CudaBody: sizes, the
/// scale and the mask are the kernel's own expressions. Layout and numerics: cuda_attention.cpp.

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// What the attention emitter needs of the CUDA writer.
class CudaBody {
public:
  virtual ~CudaBody() = default;
  /// One statement line.
  virtual void line(const std::string& s) = 0;
  /// `s {` and a new scope of computed expressions (its values are forgotten at close()).
  virtual void open(const std::string& s) = 0;
  /// `}`, ending the innermost scope.
  virtual void close() = 0;
  /// The name or literal of e's value, its statements emitted on first use in scope. In an
  /// attention kernel, LoopVar(0) is the C variable i0 (batch point), LoopVar(1) i1 (query row)
  /// and ReduceVar(0) r0 (key): the caller declares them where it evaluates the mask.
  virtual std::string ref(const ExprRef& e) = 0;
};

/// The attention kernel's helper functions (guarded, like the prelude; after it).
std::string cuda_attention_helpers();

/// The body of attention kernel k's __global__ function.
void emit_cuda_attention(const Kernel& k, CudaBody& body);

/// The launch configuration of attention kernel k: 256 threads a block (fixed), one block per
/// task, at most `max_grid` blocks (the kernel loops over its tasks).
CudaLaunchConfig cuda_attention_launch_config(const Kernel& k, const std::vector<int64_t>& params, int64_t max_grid);

} // namespace kiln::codegen

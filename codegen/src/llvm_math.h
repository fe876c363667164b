#pragma once
/// \file llvm_math.h
/// Internal: kiln's math functions (math_body.h) and random numbers as LLVM IR, the
/// emitter's small IR helpers, and the emitter's entry point.

#include <functional>
#include <memory>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/kernel_ir.h"
#include "codegen/src/math_body.h"

namespace kiln::codegen {

/// Calls `fn` on x (a float or double scalar) at the builder's insertion point,
/// defining the internal alwaysinline function `kiln.<fn>.<f32|f64>` in the builder's
/// module on first use.
llvm::Value* emit_math(llvm::IRBuilder<>& b, MathFn fn, llvm::Value* x);

/// Calls the two-operand `fn` on (x, y) (both float or both double), as emit_math.
llvm::Value* emit_math(llvm::IRBuilder<>& b, MathFn2 fn, llvm::Value* x, llvm::Value* y);

/// Replaces every call of kiln.scalef in `mod`, scalar or widened by the vectorizer, by its
/// code: vscalefps/pd where the target has it (AVX-512F; 128- and 256-bit vectors need VL), else
/// math::scale_by_halves' ops. Run after the IR pipeline, before code generation.
void lower_scalef(llvm::Module& mod, bool avx512f, bool avx512vl);

/// graph/random.h's uniform (normal false) or standard normal number of type `ty` (float
/// or double) at the i64 `seed` and `counter`, inline at the builder's insertion point.
llvm::Value* emit_random(llvm::IRBuilder<>& b, bool normal, llvm::Type* ty, llvm::Value* seed, llvm::Value* counter);

/// fmuladd(a, b, acc) with `contract` only: one FMA where the target has one.
llvm::Value* emit_fmuladd(llvm::IRBuilder<>& b, llvm::Value* a, llvm::Value* x, llvm::Value* acc);

/// What emit_for asks of LLVM's loop passes for its loop.
enum class LoopHint {
  None,
  MaskedTail, ///< vectorize with the tail folded into masked iterations (loops often shorter than a vector)
  Rolled,     ///< never unrolled (a short loop whose unrolled body would only cost compile time)
};

/// for (v = start; v < end; v += step) body(v), counting in `iv` (an i64 alloca in the
/// entry block, so that SROA promotes it), its latch marked as `hint` says.
void emit_for(llvm::IRBuilder<>& b, llvm::AllocaInst* iv, llvm::Value* start, llvm::Value* end, int64_t step,
              const std::function<void(llvm::Value*)>& body, LoopHint hint = LoopHint::None);

} // namespace kiln::codegen

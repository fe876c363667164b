#pragma once
/// \file llvm_math.h
/// Internal: kiln's own vectorizable math functions as LLVM IR, and the emitter's entry point.
/// Each function is branch-free IR (polynomials, selects and bit manipulation), emitted
/// once per module as an internal alwaysinline function, so the loop vectorizer sees
/// straight-line code and vector and scalar lanes compute bit-identical results.
/// (libm calls would be neither vectorized nor identical across lanes.)
/// Fused multiply-adds are explicit llvm.fma calls at the places where the CUDA port
/// (cuda_math.cpp) writes fma(); no op carries fast-math flags (no `contract`), so the
/// CPU and the GPU compute the same IEEE operations and agree bitwise.
///
/// Accuracy: max ulp error against long double over ~1e6 points each, measured by
/// test_llvm (MathAccuracy*), whole ranges incl. subnormal inputs/outputs:
///            exp    log    sin*   cos*   tanh   (sigmoid, in the emitter)
///   f32      0.96   0.81   1.43   1.47   1.49   2.29
///   f64      0.96   0.80   2.10   2.14   2.48   2.28
/// (*) for |x| <= 1e5; sin_cos_body() in llvm_math.cpp gives the limits of its
/// argument reduction (accurate to |x| ~ 1.6e6, bounded but meaningless beyond).

#include <functional>
#include <memory>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// The functions of llvm_math.cpp.
enum class MathFn : uint8_t { Exp, Expm1, Log, Sin, Cos, Tanh };

/// Calls `fn` on x (a float or double scalar) at the builder's insertion point,
/// defining the internal function in the builder's module on first use.
llvm::Value* emit_math(llvm::IRBuilder<>& b, MathFn fn, llvm::Value* x);

/// fmuladd(a, b, acc) with `contract` only: one FMA where the target has one.
llvm::Value* emit_fmuladd(llvm::IRBuilder<>& b, llvm::Value* a, llvm::Value* x, llvm::Value* acc);

/// for (v = start; v < end; v += step) body(v), counting in `iv` (an i64 alloca in the
/// entry block, so that SROA promotes it).
void emit_for(llvm::IRBuilder<>& b, llvm::AllocaInst* iv, llvm::Value* start, llvm::Value* end, int64_t step,
              const std::function<void(llvm::Value*)>& body);

/// Builds the module holding kernel `k` (finalize()d) as the external function
/// `void k.name(i64 begin, i64 end, ptr buffers, ptr params)`; defined in llvm_emitter.cpp.
/// Does not verify or optimize; the caller sets the data layout and target.
std::unique_ptr<llvm::Module> emit_kernel_module(const Kernel& k, llvm::LLVMContext& ctx);

} // namespace kiln::codegen

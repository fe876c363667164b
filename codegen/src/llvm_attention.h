#pragma once
/// \file llvm_attention.h
/// Internal: the CPU attention kernel (KernelForm::Attention, kernel_ir.h's AttentionSpec),
/// generated as LLVM IR into the body function the kernel emitter is building. The emitter
/// lends its expression evaluation through GemmHost (llvm_gemm.h): sizes, the scale and the
/// mask are the kernel's own expressions.

#include <llvm/IR/IRBuilder.h>

#include "codegen/kernel_ir.h"
#include "codegen/src/llvm_gemm.h"

namespace kiln::codegen {

/// Emits the tasks [begin, end) of the attention kernel `k` at the builder's insertion point;
/// `scratch` is the call's scratch memory (attention_scratch_bytes(), 64-byte aligned).
void emit_attention(const Kernel& k, GemmHost& host, llvm::Value* begin, llvm::Value* end, llvm::Value* scratch);

} // namespace kiln::codegen

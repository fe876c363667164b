#pragma once
/// \file llvm_emitter.h
/// Internal: the LLVM emitter's entry point (the CPU kernel of a kernel IR kernel).

#include <memory>

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// Builds the module holding kernel `k` (finalize()d) as the external function
/// `void k.name(i64 begin, i64 end, ptr buffers, ptr params)`; defined in llvm_emitter.cpp.
/// Does not verify or optimize; the caller sets the data layout and target.
std::unique_ptr<llvm::Module> emit_kernel_module(const Kernel& k, llvm::LLVMContext& ctx);

} // namespace kiln::codegen

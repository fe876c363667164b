#pragma once
/// \file llvm_gemm.h
/// Internal: the CPU GEMM of a matmul kernel in the GEMM form (Kernel::gemm, see
/// kernel_ir.h), generated as LLVM IR into the body function the kernel emitter is
/// building. The emitter lends its expression evaluation through GemmHost, so the
/// packing routines read the operands through the kernel's own index expressions
/// (strided, transposed and broadcast views need no copy) and the epilogue is the
/// kernel's own stores.

#include <memory>
#include <string>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

/// What the GEMM generator needs from the kernel emitter.
class GemmHost {
public:
  virtual ~GemmHost() = default;
  /// The builder, positioned where the GEMM goes.
  virtual llvm::IRBuilder<>& builder() = 0;
  /// An alloca in the function's entry block.
  virtual llvm::AllocaInst* entry_alloca(llvm::Type* t, const char* name) = 0;
  /// The pointer to element 0 of buffer b.
  virtual llvm::Value* buffer(int b) = 0;
  /// The value of `e` at the current variable bindings (cached in the innermost scope).
  virtual llvm::Value* eval(const ExprRef& e) = 0;
  /// Binds domain var d (nullptr unbinds).
  virtual void set_loop_var(int d, llvm::Value* v) = 0;
  /// Binds reduction var 0 of reduction 0 (nullptr unbinds).
  virtual void set_reduce_var(llvm::Value* v) = 0;
  /// Opens / closes a scope of cached expression values (open one per block of code
  /// whose bindings differ from the enclosing one's).
  virtual void push_scope() = 0;
  virtual void pop_scope() = 0;
  /// Runs the kernel's stores at the current bindings with ReduceResult(0) = result.
  virtual void store(llvm::Value* result) = 0;
};

/// The GEMM support routines a GEMM-form kernel calls: its microkernel and its packing
/// of a b panel contiguous in k. They depend only on the dtype and the register tile,
/// so they are generated and compiled once per process (and cached on disk) instead of
/// once per kernel: most of a GEMM kernel's compile time went to them.
struct GemmSupport {
  DType dtype = DType::Float32;
  int64_t mr = 0, nr = 0;
  /// The symbol prefix of the routines, e.g. "kiln_gemm_f32_12x32".
  std::string name() const;
  /// One symbol the module defines (what a cached object of it must define).
  std::string defined_symbol() const;
};

/// The support routines kernel `k` (in the GEMM form) calls.
GemmSupport gemm_support_of(const Kernel& k);

/// A module defining the support routines `s` (external linkage, named after s.name()).
std::unique_ptr<llvm::Module> emit_gemm_support_module(const GemmSupport& s, llvm::LLVMContext& ctx);

/// Emits the tasks [begin, end) of the GEMM-form kernel `k` at the builder's insertion
/// point; `scratch` is the call's scratch memory (gemm_scratch_bytes(k), 64-byte aligned).
void emit_gemm(const Kernel& k, GemmHost& host, llvm::Value* begin, llvm::Value* end, llvm::Value* scratch);

} // namespace kiln::codegen

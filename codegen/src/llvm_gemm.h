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
#include <vector>

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

/// The parts of the GEMM support routines, each a module of its own, so that a process
/// compiles only the parts its kernels call: the packs (of an a or a b contiguous in k),
/// the microkernels, and the microkernels that fetch the caller's next b panel (those a
/// kernel with a strided b calls).
enum class SupportPart { Packs, Micro, MicroFetching };

/// One part of the GEMM support routines a GEMM-form kernel calls: its microkernels and its
/// packing of operands contiguous in k. They depend only on the dtype and the register tile,
/// so they are generated and compiled once per process (and cached on disk) instead of
/// once per kernel: most of a GEMM kernel's compile time went to them.
struct GemmSupport {
  DType dtype = DType::Float32;
  int64_t mr = 0, nr = 0;
  SupportPart part = SupportPart::Packs;
  /// The symbol prefix of the routines (of every part), e.g. "kiln_gemm_f32_12x32".
  std::string name() const;
  /// The part's module, e.g. "kiln_gemm_f32_12x32_packs" (its key in the caches).
  std::string module_name() const;
  /// One symbol the part's module defines (what a cached object of it must define).
  std::string defined_symbol() const;
};

/// The support parts kernel `k` (in the CPU GEMM form) calls: the packs, then its microkernels.
std::vector<GemmSupport> gemm_supports_of(const Kernel& k);

/// A module defining the support routines of part `s` (external linkage, named after s.name()).
std::unique_ptr<llvm::Module> emit_gemm_support_module(const GemmSupport& s, llvm::LLVMContext& ctx);

/// Emits the tasks [begin, end) of the GEMM-form kernel `k` at the builder's insertion
/// point; `scratch` is the call's scratch memory (gemm_scratch_bytes(k), 64-byte aligned).
void emit_gemm(const Kernel& k, GemmHost& host, llvm::Value* begin, llvm::Value* end, llvm::Value* scratch);

} // namespace kiln::codegen

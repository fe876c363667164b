// ORC LLJIT for CPU kernels: host TargetMachine, verify, O3 with the TargetMachine
// (without it nothing is vectorized), compile, cache by kernel name.
#include "codegen/llvm_jit.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "codegen/src/llvm_math.h"
#include "kiln/error.h"

namespace kiln::codegen {

namespace {

/// Converts an llvm::Error into kiln::Error at the boundary.
void check(llvm::Error err, const std::string& what) {
  if (err) throw Error("LLVM JIT: " + what + ": " + llvm::toString(std::move(err)));
}

template <class T> T check(llvm::Expected<T> v, const std::string& what) {
  if (!v) throw Error("LLVM JIT: " + what + ": " + llvm::toString(v.takeError()));
  return std::move(*v);
}

std::string module_text(const llvm::Module& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os, nullptr);
  return s;
}

} // namespace

struct LlvmJit::Impl {
  std::mutex mu; // guards everything below (LLVM objects are not shared-thread-safe)
  std::unique_ptr<llvm::TargetMachine> tm;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unordered_map<std::string, CpuKernelFn> cache;
  double last_ms = 0;
  size_t compiled = 0;

  Impl() {
    // Safe to call repeatedly; done before any LLJIT is created.
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    auto jtmb = check(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    tm = check(jtmb.createTargetMachine(), "creating the target machine");
    jit = check(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(), "creating LLJIT");
    // pow (llvm.pow) resolves to the process's libm.
    auto gen = check(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                         jit->getDataLayout().getGlobalPrefix()),
                     "process symbols");
    jit->getMainJITDylib().addGenerator(std::move(gen));
  }

  /// The kernel's module, targeted at the host and verified (a failure is a kiln bug).
  std::unique_ptr<llvm::Module> build(const Kernel& k, llvm::LLVMContext& ctx) {
    auto m = emit_kernel_module(k, ctx);
    m->setDataLayout(tm->createDataLayout());
    m->setTargetTriple(tm->getTargetTriple().str());
    for (llvm::Function& f : *m) {
      f.addFnAttr("target-cpu", tm->getTargetCPU());
      f.addFnAttr("target-features", tm->getTargetFeatureString());
    }
    std::string errors;
    llvm::raw_string_ostream os(errors);
    const bool broken = llvm::verifyModule(*m, &os);
    KILN_ASSERT(!broken, "LLVM verifier failed for " + k.name + ":\n" + errors + "\n" + module_text(*m));
    return m;
  }

  /// The O3 per-module pipeline, tuned by the host TargetMachine.
  void optimize(llvm::Module& m) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;
    llvm::PassBuilder pb(tm.get(), pto);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
  }

  CpuKernelFn compile(const Kernel& k) {
    if (auto it = cache.find(k.name); it != cache.end()) return it->second;
    const auto t0 = std::chrono::steady_clock::now();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto m = build(k, *ctx);
    optimize(*m);
    check(jit->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))), "adding " + k.name);
    auto addr = check(jit->lookup(k.name), "looking up " + k.name);
    auto fn = addr.toPtr<CpuKernelFn>();
    cache.emplace(k.name, fn);
    last_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++compiled;
    return fn;
  }

  std::string assembly(const Kernel& k) {
    llvm::LLVMContext ctx;
    auto m = build(k, ctx);
    optimize(*m);
    llvm::SmallString<4096> out;
    llvm::raw_svector_ostream os(out);
    llvm::legacy::PassManager pm;
    const bool unsupported = tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile);
    KILN_ASSERT(!unsupported, "the target cannot emit assembly");
    pm.run(*m);
    return std::string(out.str());
  }
};

LlvmJit::LlvmJit() : impl_(std::make_unique<Impl>()) {}
LlvmJit::~LlvmJit() = default;

LlvmJit& LlvmJit::instance() {
  static LlvmJit jit; // C++ guarantees thread-safe initialization
  return jit;
}

CpuKernelFn LlvmJit::compile(const Kernel& k) {
  KILN_ASSERT(!k.name.empty(), "compile() of a kernel that was not finalize()d");
  std::lock_guard lock(impl_->mu);
  return impl_->compile(k);
}

std::string LlvmJit::llvm_ir(const Kernel& k, bool optimized) {
  std::lock_guard lock(impl_->mu);
  llvm::LLVMContext ctx;
  auto m = impl_->build(k, ctx);
  if (optimized) impl_->optimize(*m);
  return module_text(*m);
}

std::string LlvmJit::assembly(const Kernel& k) {
  std::lock_guard lock(impl_->mu);
  return impl_->assembly(k);
}

double LlvmJit::last_compile_ms() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last_ms;
}

size_t LlvmJit::compiled_count() const {
  std::lock_guard lock(impl_->mu);
  return impl_->compiled;
}

std::string LlvmJit::target_description() const {
  std::lock_guard lock(impl_->mu);
  return impl_->tm->getTargetCPU().str() + " " + impl_->tm->getTargetFeatureString().str();
}

} // namespace kiln::codegen

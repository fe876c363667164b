// ORC LLJIT for CPU kernels: host TargetMachine, verify, O3 with the TargetMachine
// (without it nothing is vectorized), compile, cache by kernel name.
#include "codegen/llvm_jit.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "codegen/disk_cache.h"
#include "codegen/src/llvm_gemm.h"
#include "codegen/src/llvm_math.h"
#include "codegen_hash.h" // generated: KILN_CODEGEN_HASH
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

using Elf = llvm::object::ELF64LE;

/// Why the relocations of section `sec` cannot be applied safely ("" when they can).
std::string relocation_problem(const llvm::object::ELFFile<Elf>& ef, const Elf::Shdr& sec) {
  if (sec.sh_type == llvm::ELF::SHT_REL) return "REL relocations (x86-64 objects use RELA)";
  auto relas = ef.relas(sec);
  auto target = ef.getSection(sec.sh_info);
  auto symtab = ef.getSection(sec.sh_link);
  if (!relas) return llvm::toString(relas.takeError());
  if (!target) return llvm::toString(target.takeError());
  if (!symtab) return llvm::toString(symtab.takeError());
  if ((*symtab)->sh_type != llvm::ELF::SHT_SYMTAB) return "relocations without a symbol table";
  const uint64_t symbols = (*symtab)->sh_size / sizeof(Elf::Sym);
  for (const Elf::Rela& r : *relas) {
    const uint64_t width = r.getType(false) == llvm::ELF::R_X86_64_64 ? 8 : 4;
    if (r.r_offset > (*target)->sh_size || (*target)->sh_size - r.r_offset < width)
      return "a relocation outside its section";
    if (r.getSymbol(false) >= symbols) return "a relocation of a symbol that does not exist";
  }
  return "";
}

/// Why the symbols of symbol table `symtab` are unsafe ("" when they are safe); sets
/// `defines` when one of them is the function `symbol`, defined.
std::string symbol_problem(const llvm::object::ELFFile<Elf>& ef, const Elf::Shdr& symtab,
                           const llvm::ArrayRef<Elf::Shdr>& sections, const std::string& symbol, bool& defines) {
  auto syms = ef.symbols(&symtab);
  auto strtab = ef.getStringTableForSymtab(symtab);
  if (!syms) return llvm::toString(syms.takeError());
  if (!strtab) return llvm::toString(strtab.takeError());
  for (const Elf::Sym& sym : *syms) {
    auto name = sym.getName(*strtab);
    if (!name) return llvm::toString(name.takeError());
    const uint16_t shndx = sym.st_shndx;
    if (shndx == llvm::ELF::SHN_UNDEF || shndx >= llvm::ELF::SHN_LORESERVE) continue;
    if (shndx >= sections.size()) return "a symbol in a section that does not exist";
    const Elf::Shdr& in = sections[shndx];
    if (sym.getType() != llvm::ELF::STT_SECTION && (sym.st_value > in.sh_size || in.sh_size - sym.st_value < sym.st_size))
      return "symbol " + name->str() + " extends past its section";
    if (*name == symbol && sym.getType() == llvm::ELF::STT_FUNC && (in.sh_flags & llvm::ELF::SHF_EXECINSTR)) defines = true;
  }
  return "";
}

/// Why `object` must not be linked ("" when it may): it must be an ELF64 relocatable
/// object for `arch` whose sections, symbols and relocations all lie within the file and
/// their sections, defining the function `symbol`. A checksum only proves the bytes are
/// those written; this keeps a damaged or forged entry's structure from reaching the
/// linker (LLVM's ELF reader reports most of it as errors, some of it crashes JITLink).
std::string object_problem(const std::string& object, const std::string& symbol, llvm::Triple::ArchType arch) {
  auto file = llvm::object::ObjectFile::createObjectFile(llvm::MemoryBufferRef(object, symbol));
  if (!file) return llvm::toString(file.takeError());
  const auto* elf = llvm::dyn_cast<llvm::object::ELF64LEObjectFile>(file->get());
  if (!elf || elf->getArch() != arch) return "not an ELF64 object for the host";
  const llvm::object::ELFFile<Elf>& ef = elf->getELFFile();
  if (ef.getHeader().e_type != llvm::ELF::ET_REL) return "not a relocatable object";
  auto sections = ef.sections();
  if (!sections) return llvm::toString(sections.takeError());
  bool defines = false;
  for (const Elf::Shdr& sec : *sections) {
    auto name = ef.getSectionName(sec);
    if (!name) return llvm::toString(name.takeError());
    if (sec.sh_entsize && sec.sh_size % sec.sh_entsize) return "section " + name->str() + ": size not a multiple of its entries";
    if (sec.sh_type != llvm::ELF::SHT_NOBITS) {
      auto contents = ef.getSectionContents(sec);
      if (!contents) return llvm::toString(contents.takeError());
    }
    std::string problem;
    if (sec.sh_type == llvm::ELF::SHT_REL || sec.sh_type == llvm::ELF::SHT_RELA) problem = relocation_problem(ef, sec);
    if (sec.sh_type == llvm::ELF::SHT_SYMTAB) problem = symbol_problem(ef, sec, *sections, symbol, defines);
    if (!problem.empty()) return "section " + name->str() + ": " + problem;
  }
  return defines ? "" : "no function " + symbol;
}

} // namespace

struct LlvmJit::Impl {
  std::mutex mu; // guards everything below (LLVM objects are not shared-thread-safe)
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb; // makes each compiling thread's TargetMachine
  std::unique_ptr<llvm::TargetMachine> tm;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unordered_map<std::string, CpuKernelFn> cache;
  std::mutex support_mu;                  // held while GEMM support routines are made (before mu)
  std::unordered_set<std::string> supports; // GEMM support routines linked (GemmSupport::name)
  double last_ms = 0;
  size_t compiled = 0;
  DiskCache disk{".o"};

  Impl() {
    // Safe to call repeatedly; done before any LLJIT is created.
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    auto jtmb = check(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host");
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    tm = check(jtmb.createTargetMachine(), "creating the target machine");
    this->jtmb = jtmb;
    jit = check(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(), "creating LLJIT");
    // pow (llvm.pow) resolves to the process's libm.
    auto gen = check(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                         jit->getDataLayout().getGlobalPrefix()),
                     "process symbols");
    jit->getMainJITDylib().addGenerator(std::move(gen));
  }

  /// The kernel's module, targeted at the host and verified (a failure is a kiln bug).
  std::unique_ptr<llvm::Module> build(const Kernel& k, llvm::LLVMContext& ctx) { return build(k, ctx, *tm); }
  std::unique_ptr<llvm::Module> build(const Kernel& k, llvm::LLVMContext& ctx, llvm::TargetMachine& tm_) {
    auto m = emit_kernel_module(k, ctx);
    target(*m, tm_);
    return m;
  }

  /// Targets module m at tm and verifies it (a failure is a kiln bug).
  void target(llvm::Module& mod, llvm::TargetMachine& tm_) {
    llvm::TargetMachine* tm = &tm_; // shadows the shared one: this may run on any thread
    llvm::Module* m = &mod;
    const bool avx512 = tm->getTargetFeatureString().contains("+avx512f");
    const bool math = llvm::any_of(*m, [](const llvm::Function& f) { return f.getName().starts_with("kiln."); });
    m->setDataLayout(tm->createDataLayout());
    m->setTargetTriple(tm->getTargetTriple().str());
    for (llvm::Function& f : *m) {
      f.addFnAttr("target-cpu", tm->getTargetCPU());
      f.addFnAttr("target-features", tm->getTargetFeatureString());
      // LLVM tunes Ice Lake-class CPUs to 256-bit vectors. Kernels that evaluate kiln's
      // math functions (exp, log, tanh, ...) are compute-bound and run faster at 512
      // bits (Softmax/8192x1024 12.2 -> 8.4 ms, Elementwise8/16M 21.6 -> 17.4 ms, 1
      // thread); the others are memory-bound or have short rows, where 512 bits
      // gained nothing and lost time in remainders (Conv2d 32->64 step 44 -> 50 ms).
      if (avx512 && math) f.addFnAttr("prefer-vector-width", "512");
    }
    std::string errors;
    llvm::raw_string_ostream os(errors);
    const bool broken = llvm::verifyModule(*m, &os);
    KILN_ASSERT(!broken, "LLVM verifier failed for " + m->getName().str() + ":\n" + errors + "\n" + module_text(*m));
  }

  /// The pipeline for kernel k: O3, but O2 for a GEMM kernel. A GEMM kernel's hot loops
  /// are the support routines' explicit vectors (compiled at O3 once); O3's extra passes
  /// bought its packing loops and epilogue no measurable speed and cost about 20% of
  /// the MLP step's cold compile (300 -> 246 ms, 2026-12-03).
  static llvm::OptimizationLevel level_for(const Kernel& k) {
    return k.gemm ? llvm::OptimizationLevel::O2 : llvm::OptimizationLevel::O3;
  }

  /// The per-module pipeline at `level`, tuned by the host TargetMachine.
  void optimize(llvm::Module& m, llvm::OptimizationLevel level) { optimize(m, *tm, level); }
  void optimize(llvm::Module& m, llvm::TargetMachine& tm_, llvm::OptimizationLevel level) {
    llvm::TargetMachine* tm = &tm_;
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;
    llvm::PassBuilder pb(tm, pto);
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    pb.buildPerModuleDefaultPipeline(level).run(m, mam);
  }

  /// The disk-cache key: everything the object code depends on.
  std::string cache_key(const Kernel& k) const {
    return print_kernel(k) + "\n" + target_key();
  }

  /// The part of every disk-cache key that names the target and the compilers.
  std::string target_key() const {
    return "target " + tm->getTargetCPU().str() + " " + tm->getTargetFeatureString().str() +
           "\nllvm " LLVM_VERSION_STRING "\nkiln " KILN_VERSION " codegen " KILN_CODEGEN_HASH "\n";
  }

  /// This thread's TargetMachine: code generation runs outside the lock, in parallel.
  llvm::TargetMachine& thread_target_machine() {
    thread_local std::unique_ptr<llvm::TargetMachine> own;
    if (!own) {
      std::lock_guard lock(mu);
      own = check(jtmb->createTargetMachine(), "creating a target machine");
    }
    return *own;
  }

  /// Optimized object code for the kernel (thread-safe: its own context and TargetMachine).
  std::string object_code(const Kernel& k) {
    llvm::TargetMachine& tm = thread_target_machine();
    llvm::LLVMContext ctx;
    auto m = build(k, ctx, tm);
    return object_code(*m, tm, level_for(k));
  }

  /// Object code for module m (targeted at tm), optimized at `level`.
  std::string object_code(llvm::Module& mod, llvm::TargetMachine& tm, llvm::OptimizationLevel level) {
    llvm::Module* m = &mod;
    optimize(*m, tm, level);
    llvm::SmallString<16384> out;
    llvm::raw_svector_ostream os(out);
    llvm::legacy::PassManager pm;
    const bool unsupported = tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile);
    KILN_ASSERT(!unsupported, "the target cannot emit object files");
    pm.run(*m);
    return std::string(out.str());
  }

  /// Code for `k`: from memory, else from the disk cache, else compiled. Only the
  /// compilation itself runs outside the lock, so several threads compile at once.
  CpuKernelFn compile(const Kernel& k, Source& source) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string key;
    std::optional<std::string> object;
    {
      std::lock_guard lock(mu);
      if (auto it = cache.find(k.name); it != cache.end()) {
        source = Source::Memory;
        return it->second;
      }
      key = disk.enabled() ? cache_key(k) : std::string();
      if (disk.enabled()) object = disk.read(key, [&](const std::string& obj) { return loadable(obj, k.name); });
    }
    source = object ? Source::Disk : Source::Compiled;
    if (!object) object = object_code(k);
    // A GEMM kernel calls its support routines: they are linked first.
    if (k.gemm) ensure_gemm_support(gemm_support_of(k));
    std::unique_lock lock(mu);
    if (auto it = cache.find(k.name); it != cache.end()) return it->second; // another thread was first
    if (source == Source::Disk) {
      if (auto fn = add_from_disk(k, *object, t0)) return fn;
      source = Source::Compiled; // it would not link: compiled after all
      lock.unlock();             // (object_code may take the lock for this thread's TargetMachine)
      object = object_code(k);
      lock.lock();
      if (auto it = cache.find(k.name); it != cache.end()) return it->second;
    }
    disk.write(key, *object);
    ++compiled;
    return add(k, *object, t0, jit->getMainJITDylib().getDefaultResourceTracker());
  }

  /// True when a cached object may be linked (see object_problem).
  bool loadable(const std::string& object, const std::string& symbol) const {
    return object_problem(object, symbol, tm->getTargetTriple().getArch()).empty();
  }

  /// Links a disk-cached object under a resource tracker of its own; when LLVM still
  /// fails to link it, removes what it added, counts the entry as a reject and returns
  /// null (the lock is held).
  CpuKernelFn add_from_disk(const Kernel& k, const std::string& object, std::chrono::steady_clock::time_point t0) {
    auto rt = jit->getMainJITDylib().createResourceTracker();
    try {
      return add(k, object, t0, rt);
    } catch (const Error&) {
      check(rt->remove(), "removing the cached object of " + k.name);
      disk.reject_hit();
      return nullptr;
    }
  }

  /// Links the GEMM support routines `s` into the JIT, from the disk cache or compiled,
  /// once per process, before any kernel that calls them. Other kernels keep compiling
  /// meanwhile; kernels that need the same routines wait for them.
  void ensure_gemm_support(const GemmSupport& s) {
    const std::string name = s.name();
    std::lock_guard once(support_mu);
    std::string key;
    {
      std::lock_guard lock(mu);
      if (supports.count(name)) return;
      key = disk.enabled() ? "gemm support " + name + "\n" + target_key() : std::string();
      if (auto object = disk.enabled() ? disk.read(key, [&](const std::string& obj) { return loadable(obj, s.defined_symbol()); }) : std::nullopt)
        return add_support(name, *object);
    }
    llvm::TargetMachine& tm = thread_target_machine();
    llvm::LLVMContext ctx;
    auto m = emit_gemm_support_module(s, ctx);
    target(*m, tm);
    const std::string object = object_code(*m, tm, llvm::OptimizationLevel::O3);
    std::lock_guard lock(mu);
    disk.write(key, object);
    ++compiled;
    add_support(name, object);
  }

  /// Links the support object `name` into the JIT (the lock is held).
  void add_support(const std::string& name, const std::string& object) {
    check(jit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, name)), "adding " + name);
    supports.insert(name);
  }

  /// Links object code into the JIT under `rt` and caches its entry point (the lock is held).
  CpuKernelFn add(const Kernel& k, const std::string& object, std::chrono::steady_clock::time_point t0,
                  const llvm::orc::ResourceTrackerSP& rt) {
    check(jit->addObjectFile(rt, llvm::MemoryBuffer::getMemBufferCopy(object, k.name)), "adding " + k.name);
    auto fn = check(jit->lookup(k.name), "looking up " + k.name).toPtr<CpuKernelFn>();
    cache.emplace(k.name, fn);
    last_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return fn;
  }

  std::string assembly(const Kernel& k) {
    llvm::LLVMContext ctx;
    auto m = build(k, ctx);
    optimize(*m, level_for(k));
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
  Source source;
  return compile(k, source);
}

CpuKernelFn LlvmJit::compile(const Kernel& k, Source& source) {
  KILN_ASSERT(!k.name.empty(), "compile() of a kernel that was not finalize()d");
  return impl_->compile(k, source); // locks as needed
}

void LlvmJit::set_disk_cache(const std::string& dir) {
  std::lock_guard lock(impl_->mu);
  impl_->disk.open(dir);
}

size_t LlvmJit::disk_hits() const {
  std::lock_guard lock(impl_->mu);
  return impl_->disk.hits;
}

size_t LlvmJit::disk_rejects() const {
  std::lock_guard lock(impl_->mu);
  return impl_->disk.rejects;
}

std::string LlvmJit::llvm_ir(const Kernel& k, bool optimized) {
  std::lock_guard lock(impl_->mu);
  llvm::LLVMContext ctx;
  auto m = impl_->build(k, ctx);
  if (optimized) impl_->optimize(*m, Impl::level_for(k));
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

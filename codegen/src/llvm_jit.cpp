// ORC LLJIT for CPU kernels: host TargetMachine, verify, O3 with the TargetMachine
// (without it nothing is vectorized), compile, cache by kernel name. Two tiers (see
// llvm_jit.h): a quick compile first, the optimized one in the background on oneTBB.
#include "codegen/llvm_jit.h"

#include <unistd.h>

#include <cstdlib>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
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
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Object/ObjectFile.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/IPO/AlwaysInliner.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>

#include "codegen/disk_cache.h"
#include "codegen/src/llvm_gemm.h"
#include "codegen/src/llvm_emitter.h"
#include "codegen/src/llvm_math.h"
#include "codegen/src/llvm_perf_map.h"
#include "codegen/src/sort_runtime.h"
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

/// The two compilers of a kernel (see llvm_jit.h).
enum class Tier : uint8_t { Quick, Optimized };

/// Appended to the quick tier's symbols: its kernel's entry point (the optimized code
/// defines the plain name in the same JITDylib) and its GEMM support routines.
constexpr const char* kQuickSuffix = ".quick";

/// Replaces each llvm.fmuladd in `m` by what the target makes of it at every
/// optimization level: llvm.fma where the target has FMA instructions, else an fmul and
/// an fadd (no fast-math flags). fmuladd leaves the choice to the compiler: SelectionDAG
/// fuses it where FMA is fast whatever the level (LLVM 19), but the constant folder
/// fuses it even where the target does not. With the choice made in the IR, the quick and
/// the optimized tier compute the same bits by construction.
void lower_fmuladd(llvm::Module& m, bool fma) {
  std::vector<llvm::IntrinsicInst*> calls;
  for (llvm::Function& f : m)
    for (llvm::Instruction& i : llvm::instructions(f))
      if (auto* c = llvm::dyn_cast<llvm::IntrinsicInst>(&i); c && c->getIntrinsicID() == llvm::Intrinsic::fmuladd)
        calls.push_back(c);
  for (llvm::IntrinsicInst* c : calls) {
    llvm::IRBuilder<> b(c);
    llvm::Value* x = c->getArgOperand(0);
    llvm::Value* y = c->getArgOperand(1);
    llvm::Value* z = c->getArgOperand(2);
    llvm::Value* r = fma ? b.CreateIntrinsic(llvm::Intrinsic::fma, {c->getType()}, {x, y, z})
                         : b.CreateFAdd(b.CreateFMul(x, y), z);
    c->replaceAllUsesWith(r);
    c->eraseFromParent();
  }
}

/// True when `m` calls llvm.pow.
bool calls_pow(const llvm::Module& m) {
  return llvm::any_of(m, [](const llvm::Function& f) { return f.getIntrinsicID() == llvm::Intrinsic::pow; });
}

/// Whether the machine's target features hold `feature` ("avx512f").
bool has_feature(const llvm::TargetMachine& tm, llvm::StringRef feature) {
  llvm::SmallVector<llvm::StringRef, 64> features;
  tm.getTargetFeatureString().split(features, ',');
  return llvm::is_contained(features, ("+" + feature).str());
}

/// lower_scalef() for tm's target: both tiers run it last.
void lower_scalef_for(llvm::Module& m, const llvm::TargetMachine& tm) {
  lower_scalef(m, has_feature(tm, "avx512f"), has_feature(tm, "avx512vl"));
}

/// The quick tier's IR pipeline: the always-inliner (the kernel's body and kiln's math
/// functions) and SROA (allocas to registers). That is what makes fast instruction
/// selection's code tolerable; the rest of O3 is the optimized tier's job.
/// One transformation of O3 changes values, with no fast-math flag: InstCombine's
/// library-call simplifier rewrites pow with a constant operand (pow(x, 0.5) to a sqrt,
/// pow(x, 2) to x*x, pow(x, -1) to 1/x, pow(2^n, x) to exp2(n*x), pow(10, x) to exp10(x)),
/// which glibc's pow and exp2 do not always round alike (1 ulp in f64; test_tiers). So a
/// module that calls pow goes through InstCombine here too, after the inliner and SROA
/// as in O3: the same rewrites, the same bits.
void quick_passes(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::AlwaysInlinerPass());
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(llvm::SROAPass(llvm::SROAOptions::ModifyCFG)));
  if (calls_pow(m)) mpm.addPass(llvm::createModuleToFunctionPassAdaptor(llvm::InstCombinePass()));
  mpm.run(m, mam);
  lower_scalef_for(m, tm);
}

/// Renames the functions of `m` named `prefix`... (defined or declared) to name + kQuickSuffix.
void add_quick_suffix(llvm::Module& m, const std::string& prefix) {
  for (llvm::Function& f : m)
    if (f.getName().starts_with(prefix)) f.setName(f.getName().str() + kQuickSuffix);
}


double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The background tier's queue of compiles. TBB tasks of a low-priority arena each run
/// one job; the JIT's teardown and wait_background() run what is still queued themselves
/// and wait for the running ones. The tasks capture nothing and reach the queue through
/// background(), never destroyed, so a task that starts after the JIT is gone finds it
/// empty; every job reaches its thread through the queue's mutex (which ThreadSanitizer
/// sees, unlike oneTBB's hand-off of the task itself).
struct Background {
  /// A queued compile: run(true) does it, run(false) drops it (a process that exits
  /// without a disk cache has no use for optimized code).
  struct Job {
    bool persists; // its code goes to the disk cache
    std::function<void(bool)> run;
  };
  std::mutex mu;
  std::condition_variable done;
  std::deque<Job> jobs;
  size_t pending = 0; // queued or running
  const pid_t owner = ::getpid(); // a fork()ed child has none of the threads running the jobs

  /// Runs the first queued job, if any, on this thread (drops it when `all` is false and
  /// it does not persist); returns false when there was none.
  bool run_one(bool all = true) {
    Job job;
    {
      std::lock_guard lock(mu);
      if (jobs.empty()) return false;
      job = std::move(jobs.front());
      jobs.pop_front();
    }
    job.run(all || job.persists); // catches its own errors
    std::lock_guard lock(mu); // notified under the lock: a waiter may destroy us once it has it
    --pending;
    done.notify_all();
    return true;
  }

  /// Runs the queued jobs here (all of them, or at exit only those whose code goes to
  /// the disk cache) and waits for the running ones.
  void drain(bool all) {
    // In a fork()ed child (a death test, a crash-isolating test harness) the jobs counted
    // as running belong to the parent's threads, and the locks may be held by them: the
    // child neither waits nor compiles (its exit would otherwise hang).
    if (::getpid() != owner) return;
    while (run_one(all)) {}
    std::unique_lock lock(mu);
    done.wait(lock, [&] { return pending == 0; });
  }
};

/// The one queue of background compiles (leaked on purpose: tasks may outlive the JIT).
Background& background() {
  static Background* b = new Background;
  return *b;
}

/// Finishes the background compiles whose code goes to the disk cache at exit (see register_exit_drain).
void drain_at_exit() { background().drain(/*all=*/false); }

/// Registers drain_at_exit() to run at exit before the static objects constructed so
/// far are destroyed (exit handlers run in reverse order of registration). LLVM's code
/// generator keeps state in function-local statics (SelectionDAG's value-type tables)
/// that are constructed by the first compile, after the JIT itself, and destroyed
/// before it: compiling in the JIT's destructor read freed tables. A later compile of
/// either tier may construct more of them (a quick compile's fast instruction selection
/// falls back to SelectionDAG for some blocks; a background optimized compile builds
/// others), so every compile registers the drain again; the drains after the first find
/// nothing to do.
void register_exit_drain() { std::atexit(drain_at_exit); }

} // namespace

struct LlvmJit::Impl {
  std::mutex mu; // guards everything below but `background` (LLVM objects are not shared-thread-safe)
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb; // makes each compiling thread's TargetMachine
  std::unique_ptr<llvm::TargetMachine> tm; // the optimized tier's, for keys and dumps (under mu)
  // KILN_PERF_MAP: write /tmp/perf-PID.map (llvm_perf_map.h); before `jit`, whose plugin reads it
  std::atomic<bool> perf_map{false};
  bool perf_map_supported = false; // the JIT's object layer takes the map's plugin
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unordered_map<std::string, std::unique_ptr<CpuKernelSlot>> cache; // by kernel name; slots never move
  std::mutex support_mu[2];                 // per tier, held while its GEMM support routines are made (before mu)
  std::unordered_set<std::string> supports; // GEMM support routines linked (GemmSupport::name, + kQuickSuffix)
  /// Optimized support routines the disk cache had no usable object of: not read again (a
  /// damaged entry would count as rejected once per read), compiled by this process.
  std::unordered_set<std::string> supports_off_disk;
  double last_ms = 0;
  size_t compiled = 0;
  JitStats counts;
  bool tiered = true;
  bool warmed_up = false; // warm_up_code_generator() ran
  std::atomic<bool> log{false};
  DiskCache disk{".o"};
  // Half the cores at most: the foreground (quick compiles and kernels) keeps the rest.
  tbb::task_arena arena{std::max(1, tbb::info::default_concurrency() / 2), 0, tbb::task_arena::priority::low};

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
    perf_map_supported = install_perf_map(jit->getObjLinkingLayer(), perf_map);
    // pow (llvm.pow) resolves to the process's libm.
    auto gen = check(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                         jit->getDataLayout().getGlobalPrefix()),
                     "process symbols");
    jit->getMainJITDylib().addGenerator(std::move(gen));
    // kiln's own routines that kernels call (an argsort's, sort_runtime.h), by address: a static
    // binary need not export them, nor the shared library keep them visible.
    llvm::orc::SymbolMap routines;
    for (const auto& [name, address] : sort_routines())
      routines[jit->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                              llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
    check(jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(routines))), "defining kiln's routines");
  }

  /// Compiles a function on an extended value type (13 x i7), before the first background
  /// compile is queued (queue_optimized; the lock is held). SelectionDAG keeps its extended value types in function-local statics (SDNode's value
  /// type list), constructed by the first compile that meets one, which was often a background
  /// optimized compile (vectorized code): running when main returned, it registered their
  /// destructor after the exit drain, so exit destroyed them before draining, under the
  /// compiles still using them (SIGSEGV in EVT::isExtendedFixedLengthVector at exit, in about
  /// 1 of 18 fresh-cache runs of SGD.MomentumByHand). Constructed now, they outlive every drain.
  /// It costs about 6 ms, so only a process that compiles in the background pays it: one that
  /// finds its kernels in the disk cache starts without it.
  void warm_up_code_generator() {
    if (warmed_up) return;
    warmed_up = true;
    llvm::LLVMContext ctx;
    llvm::Module m("kiln_warm_up", ctx);
    m.setDataLayout(tm->createDataLayout());
    m.setTargetTriple(tm->getTargetTriple().str());
    auto* vt = llvm::FixedVectorType::get(llvm::IntegerType::get(ctx, 7), 13);
    auto* f = llvm::Function::Create(llvm::FunctionType::get(vt, {vt, vt}, false), llvm::Function::ExternalLinkage,
                                     "kiln_warm_up", m);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", f));
    b.CreateRet(b.CreateMul(f->getArg(0), f->getArg(1)));
    (void)emit_object(m, *tm);
    register_exit_drain();
  }

  // The background compiles finish first (their code goes to the disk cache); normally the
  // exit handlers (register_exit_drain) have already run them all.
  ~Impl() { background().drain(/*all=*/false); }

  /// The kernel's module, targeted at the host and verified (a failure is a kiln bug).
  std::unique_ptr<llvm::Module> build(const Kernel& k, llvm::LLVMContext& ctx) { return build(k, ctx, *tm); }
  std::unique_ptr<llvm::Module> build(const Kernel& k, llvm::LLVMContext& ctx, llvm::TargetMachine& tm_) {
    auto m = emit_kernel_module(k, ctx);
    target(*m, tm_);
    return m;
  }

  /// Targets module m at tm, makes its multiply-adds explicit (lower_fmuladd) and
  /// verifies it (a failure is a kiln bug).
  void target(llvm::Module& mod, llvm::TargetMachine& tm_) {
    llvm::TargetMachine* tm = &tm_; // shadows the shared one: this may run on any thread
    llvm::Module* m = &mod;
    const bool avx512 = has_feature(*tm, "avx512f");
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
    lower_fmuladd(*m, has_feature(*tm, "fma"));
    std::string errors;
    llvm::raw_string_ostream os(errors);
    const bool broken = llvm::verifyModule(*m, &os);
    KILN_ASSERT(!broken, "LLVM verifier failed for " + m->getName().str() + ":\n" + errors + "\n" + module_text(*m));
  }

  /// The optimized tier's pipeline for kernel k: O3, but O2 for a GEMM kernel. A GEMM
  /// kernel's hot loops are the support routines' explicit vectors (compiled at O3 once);
  /// O3's extra passes bought its packing loops and epilogue no measurable speed and cost
  /// about 20% of the MLP step's cold compile (300 -> 246 ms, 2026-12-03).
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
    lower_scalef_for(m, *tm);
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

  /// A TargetMachine for `tier`, lent from a pool for one compile: code generation runs
  /// outside the lock, in parallel. (Not thread_local: the JIT's teardown compiles too,
  /// after the main thread's thread_local objects are gone.) The quick tier's machines
  /// generate code at level None, with fast instruction selection.
  struct LentTargetMachine {
    Impl& jit;
    Tier tier;
    std::unique_ptr<llvm::TargetMachine> tm;
    LentTargetMachine(Impl& j, Tier t) : jit(j), tier(t), tm(j.take_target_machine(t)) {}
    ~LentTargetMachine() {
      std::lock_guard lock(jit.mu);
      jit.target_machines[static_cast<int>(tier)].push_back(std::move(tm));
    }
    LentTargetMachine(const LentTargetMachine&) = delete;
    LentTargetMachine& operator=(const LentTargetMachine&) = delete;
  };
  std::vector<std::unique_ptr<llvm::TargetMachine>> target_machines[2]; // idle ones, per tier (under mu)

  std::unique_ptr<llvm::TargetMachine> take_target_machine(Tier tier) {
    std::lock_guard lock(mu);
    auto& idle = target_machines[static_cast<int>(tier)];
    if (!idle.empty()) {
      auto t = std::move(idle.back());
      idle.pop_back();
      return t;
    }
    auto t = check(jtmb->createTargetMachine(), "creating a target machine");
    if (tier == Tier::Quick) {
      t->setOptLevel(llvm::CodeGenOptLevel::None);
      t->setFastISel(true);
    }
    return t;
  }

  /// Object code for the kernel by `tier` (thread-safe: its own context and TargetMachine).
  /// `support` is the suffix of the GEMM support routines the quick tier's code calls.
  std::string object_code(const Kernel& k, Tier tier, const std::string& support = "") {
    LentTargetMachine lent(*this, tier);
    llvm::TargetMachine& tm = *lent.tm;
    llvm::LLVMContext ctx;
    const auto t0 = std::chrono::steady_clock::now();
    auto m = build(k, ctx, tm);
    if (tier == Tier::Optimized) {
      optimize(*m, tm, level_for(k));
      return emit_object(*m, tm);
    }
    const double ir = ms_since(t0);
    add_quick_suffix(*m, k.name); // the entry point (internal functions do not clash)
    if (k.gemm && !support.empty()) add_quick_suffix(*m, gemm_supports_of(k).front().name());
    const auto t1 = std::chrono::steady_clock::now();
    quick_passes(*m, tm);
    const double passes = ms_since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    std::string object = emit_object(*m, tm);
    const double codegen = ms_since(t2);
    std::lock_guard lock(mu);
    counts.quick_ir_ms += ir;
    counts.quick_passes_ms += passes;
    counts.quick_codegen_ms += codegen;
    return object;
  }

  /// Code generation of module m (targeted at tm, already through its IR pipeline).
  std::string emit_object(llvm::Module& m, llvm::TargetMachine& tm) {
    llvm::SmallString<16384> out;
    llvm::raw_svector_ostream os(out);
    llvm::legacy::PassManager pm;
    const bool unsupported = tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile);
    KILN_ASSERT(!unsupported, "the target cannot emit object files");
    pm.run(m);
    return std::string(out.str());
  }

  /// The slot of `k`'s code: from memory, else from the disk cache, else compiled (by the
  /// quick tier when tiered, the optimized tier following in the background). Only the
  /// compilation itself runs outside the lock, so several threads compile at once.
  const CpuKernelSlot& kernel(const Kernel& k, Source& source) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string key;
    std::optional<std::string> object;
    bool tiers = false;
    {
      std::lock_guard lock(mu);
      if (auto it = cache.find(k.name); it != cache.end()) {
        source = Source::Memory;
        return *it->second;
      }
      key = disk.enabled() ? cache_key(k) : std::string();
      if (disk.enabled()) object = disk.read(key, [&](const std::string& obj) { return loadable(obj, k.name); });
      tiers = tiered;
    }
    source = Source::Disk;
    if (object)
      if (const CpuKernelSlot* slot = from_disk(k, *object, t0, source)) return *slot;
    source = Source::Compiled;
    return tiers ? compile_quick(k, key, t0, source) : compile_optimized(k, key, t0, source);
  }

  /// Links a disk-cached (optimized) object of `k`; null when LLVM would not link it
  /// (counted as a reject: the caller compiles it). `source` becomes Memory when another
  /// thread linked `k` meanwhile (here and in the compile_* functions).
  const CpuKernelSlot* from_disk(const Kernel& k, const std::string& object, std::chrono::steady_clock::time_point t0,
                                 Source& source) {
    link_optimized_supports(k); // before the kernel
    std::lock_guard lock(mu);
    if (const CpuKernelSlot* first = linked_meanwhile(k, source)) return first;
    auto rt = jit->getMainJITDylib().createResourceTracker();
    try {
      return &publish(k.name, link(k.name, object, rt), nullptr, t0);
    } catch (const Error&) {
      check(rt->remove(), "removing the cached object of " + k.name);
      disk.reject_hit();
      return nullptr;
    }
  }

  /// Compiles `k` by the optimized tier now (tiers off), into the disk cache and the JIT.
  const CpuKernelSlot& compile_optimized(const Kernel& k, const std::string& key, std::chrono::steady_clock::time_point t0,
                                        Source& source) {
    const std::string object = object_code(k, Tier::Optimized);
    link_optimized_supports(k);
    std::lock_guard lock(mu);
    if (const CpuKernelSlot* first = linked_meanwhile(k, source)) return *first;
    if (!key.empty()) disk.write(key, object);
    ++compiled;
    ++counts.optimized;
    const CpuKernelSlot& slot = publish(k.name, link(k.name, object, jit->getMainJITDylib().getDefaultResourceTracker()), nullptr, t0);
    counts.first_use_ms += last_ms;
    return slot;
  }

  /// Compiles `k` by the quick tier, links it, and queues its optimized compile.
  const CpuKernelSlot& compile_quick(const Kernel& k, const std::string& key, std::chrono::steady_clock::time_point t0,
                                    Source& source) {
    const std::string support = k.gemm ? support_for_quick(gemm_supports_of(k)) : "";
    const std::string object = object_code(k, Tier::Quick, support);
    std::lock_guard lock(mu);
    if (const CpuKernelSlot* first = linked_meanwhile(k, source)) return *first;
    ++compiled;
    ++counts.quick;
    const std::string symbol = k.name + kQuickSuffix;
    CpuKernelFn fn = link(symbol, object, jit->getMainJITDylib().getDefaultResourceTracker());
    CpuKernelSlot& slot = publish(k.name, fn, fn, t0);
    counts.first_use_ms += last_ms;
    register_exit_drain(); // after any static this compile made (a later quick compile may make more)
    queue_optimized(k, key, slot);
    return slot;
  }

  /// The slot of `k` when another thread linked it while this one compiled or read it
  /// (its work is dropped, and `source` says Memory: counted once); else null (the lock is held).
  const CpuKernelSlot* linked_meanwhile(const Kernel& k, Source& source) {
    auto it = cache.find(k.name);
    if (it == cache.end()) return nullptr;
    source = Source::Memory;
    return it->second.get();
  }

  /// Queues the optimized compile of `k` (which the quick tier compiled into `slot`) on
  /// the background arena (the lock is held).
  void queue_optimized(const Kernel& k, const std::string& key, CpuKernelSlot& slot) {
    warm_up_code_generator();
    ++counts.pending;
    Background& bg = background();
    {
      std::lock_guard lock(bg.mu);
      ++bg.pending;
      bg.jobs.push_back({!key.empty(), [this, k, key, &slot](bool run) { optimize_in_background(k, key, slot, run); }});
    }
    arena.enqueue([] { background().run_one(); });
  }

  /// The background job: compiles `k` by the optimized tier, writes it to the disk
  /// cache, links it and swaps it into `slot` (or, `run` false, only drops it). A failure
  /// leaves the quick code in place (with one line on stderr): it computes the same bits.
  void optimize_in_background(const Kernel& k, const std::string& key, CpuKernelSlot& slot, bool run) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!run) { // dropped at exit
      std::lock_guard lock(mu);
      --counts.pending;
      return;
    }
    try {
      const std::string object = object_code(k, Tier::Optimized);
      link_optimized_supports(k);
      // The optimized tier's code generator may have made statics of its own (SelectionDAG's
      // tables): a drain at exit must run before they are destroyed, as after a quick compile.
      register_exit_drain();
      std::lock_guard lock(mu);
      if (!key.empty()) disk.write(key, object);
      slot.fn.store(link(k.name, object, jit->getMainJITDylib().getDefaultResourceTracker()), std::memory_order_release);
      ++counts.optimized;
      --counts.pending;
      counts.background_ms += ms_since(t0);
    } catch (const std::exception& e) { // kiln::Error from LLVM, or no memory
      std::lock_guard lock(mu);
      --counts.pending;
      std::fprintf(stderr, "[kiln] warning: the optimized compile of %s failed; its quick code stays: %s\n",
                   k.name.c_str(), e.what());
      return;
    }
    register_exit_drain();
    if (log) std::fprintf(stderr, "[kiln] optimized %s in %.2f ms in the background; swapped in\n", k.name.c_str(), ms_since(t0));
  }

  /// True when a cached object may be linked (see object_problem).
  bool loadable(const std::string& object, const std::string& symbol) const {
    return object_problem(object, symbol, tm->getTargetTriple().getArch()).empty();
  }

  /// See LlvmJit::prepare_support.
  void prepare_support(const Kernel& k) {
    if (!k.gemm) return;
    bool tiers = false;
    {
      std::lock_guard lock(mu);
      if (cache.count(k.name)) return; // its code, and so its routines, are linked already
      tiers = tiered;
    }
    if (tiers) support_for_quick(gemm_supports_of(k));
    else link_optimized_supports(k);
  }

  /// Links the optimized GEMM support parts a GEMM kernel `k` calls (nothing for other kernels).
  void link_optimized_supports(const Kernel& k) {
    if (!k.gemm) return;
    for (const GemmSupport& s : gemm_supports_of(k)) ensure_gemm_support(s, Tier::Optimized);
  }

  /// The suffix of the GEMM support routines a quick kernel calls: "" when the optimized
  /// parts are all linked or on disk, else kQuickSuffix (the quick tier compiles its own).
  std::string support_for_quick(const std::vector<GemmSupport>& parts) {
    bool optimized = true;
    for (const GemmSupport& s : parts) optimized = ensure_gemm_support(s, Tier::Optimized, /*compile=*/false) && optimized;
    if (optimized) return "";
    for (const GemmSupport& s : parts) ensure_gemm_support(s, Tier::Quick);
    return kQuickSuffix;
  }

  /// Links the GEMM support routines `s` of `tier` into the JIT, once per process, before
  /// any kernel that calls them: the optimized ones from the disk cache or compiled
  /// (unless `compile` is false), the quick ones compiled. Other kernels keep compiling
  /// meanwhile; kernels that need the same routines wait for them, unless `compile` is
  /// false (then nothing waits for a compile). Returns whether they are linked.
  bool ensure_gemm_support(const GemmSupport& s, Tier tier, bool compile = true) {
    const bool quick = tier == Tier::Quick;
    const std::string name = s.module_name() + (quick ? kQuickSuffix : "");
    std::unique_lock once(support_mu[static_cast<int>(tier)], std::defer_lock);
    if (compile) once.lock();
    else if (!once.try_lock()) return false; // being compiled (in the background): the caller does not wait
    std::string key;
    {
      std::lock_guard lock(mu);
      if (supports.count(name)) return true;
      key = disk.enabled() && !quick ? "gemm support " + s.module_name() + "\n" + target_key() : std::string();
      const bool read = !key.empty() && !supports_off_disk.count(name);
      if (auto object = read ? disk.read(key, [&](const std::string& obj) { return loadable(obj, s.defined_symbol()); }) : std::nullopt) {
        if (add_cached_support(name, *object, s.defined_symbol())) return true;
        disk.reject_hit(); // compiled below
      }
      if (read) supports_off_disk.insert(name);
    }
    if (!compile) return false;
    LentTargetMachine lent(*this, tier);
    llvm::TargetMachine& tm = *lent.tm;
    llvm::LLVMContext ctx;
    auto m = emit_gemm_support_module(s, ctx);
    target(*m, tm);
    if (quick) {
      add_quick_suffix(*m, s.name());
      quick_passes(*m, tm);
    } else {
      optimize(*m, tm, llvm::OptimizationLevel::O3);
    }
    const std::string object = emit_object(*m, tm);
    std::lock_guard lock(mu);
    if (!key.empty()) disk.write(key, object); // the optimized routines only
    // Counted once per set of routines, whichever tier compiled it first.
    if (quick || !supports.count(s.module_name() + kQuickSuffix)) ++compiled;
    add_support(name, object);
    return true;
  }

  /// Links a disk-cached support object now, by looking up `symbol`, under a tracker of its
  /// own: one that LLVM will not link (a damaged relocation) is undone here and compiled
  /// afresh, rather than failing every kernel that calls it. False when undone (the lock is held).
  bool add_cached_support(const std::string& name, const std::string& object, const std::string& symbol) {
    auto rt = jit->getMainJITDylib().createResourceTracker();
    bool linked = true;
    if (llvm::Error err = jit->addObjectFile(rt, llvm::MemoryBuffer::getMemBufferCopy(object, name))) {
      llvm::consumeError(std::move(err));
      linked = false;
    } else if (auto found = jit->lookup(symbol); !found) {
      llvm::consumeError(found.takeError());
      linked = false;
    }
    if (!linked) {
      check(rt->remove(), "removing the cached object of " + name);
      return false;
    }
    supports.insert(name);
    return true;
  }

  /// Links the support object `name` into the JIT (the lock is held).
  void add_support(const std::string& name, const std::string& object) {
    check(jit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, name)), "adding " + name);
    supports.insert(name);
  }

  /// Links object code into the JIT under `rt` and returns the address of `symbol` (the lock is held).
  CpuKernelFn link(const std::string& symbol, const std::string& object, const llvm::orc::ResourceTrackerSP& rt) {
    const auto t0 = std::chrono::steady_clock::now();
    check(jit->addObjectFile(rt, llvm::MemoryBuffer::getMemBufferCopy(object, symbol)), "adding " + symbol);
    auto fn = check(jit->lookup(symbol), "looking up " + symbol).toPtr<CpuKernelFn>();
    counts.link_ms += ms_since(t0);
    return fn;
  }

  /// A new slot holding `fn` in the memory cache (the lock is held).
  CpuKernelSlot& publish(const std::string& name, CpuKernelFn fn, CpuKernelFn quick, std::chrono::steady_clock::time_point t0) {
    auto slot = std::make_unique<CpuKernelSlot>();
    slot->quick = quick;
    slot->fn.store(fn, std::memory_order_release);
    last_ms = ms_since(t0);
    return *cache.emplace(name, std::move(slot)).first->second;
  }

  /// The kernel's host assembly; a GEMM kernel's is followed by that of the support routines
  /// it calls (its microkernel), optimized as ensure_gemm_support() optimizes them.
  std::string assembly(const Kernel& k) {
    llvm::LLVMContext ctx;
    auto m = build(k, ctx);
    optimize(*m, level_for(k));
    std::string text = module_assembly(*m);
    if (k.form == KernelForm::Gemm && k.gemm && k.gemm->mr > 0) {
      for (const GemmSupport& s : gemm_supports_of(k)) {
        auto support = emit_gemm_support_module(s, ctx);
        target(*support, *tm);
        optimize(*support, *tm, llvm::OptimizationLevel::O3);
        text += "\n# GEMM support routines (" + s.module_name() + ")\n" + module_assembly(*support);
      }
    }
    return text;
  }

  std::string module_assembly(llvm::Module& m) {
    llvm::SmallString<4096> out;
    llvm::raw_svector_ostream os(out);
    llvm::legacy::PassManager pm;
    const bool unsupported = tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile);
    KILN_ASSERT(!unsupported, "the target cannot emit assembly");
    pm.run(m);
    return std::string(out.str());
  }
};

LlvmJit::LlvmJit() : impl_(std::make_unique<Impl>()) {}
LlvmJit::~LlvmJit() = default;

LlvmJit& LlvmJit::instance() {
  static LlvmJit jit; // C++ guarantees thread-safe initialization
  return jit;
}

const CpuKernelSlot& LlvmJit::kernel(const Kernel& k, Source& source) {
  KILN_ASSERT(!k.name.empty(), "compile() of a kernel that was not finalize()d");
  return impl_->kernel(k, source); // locks as needed
}

CpuKernelFn LlvmJit::compile(const Kernel& k) {
  Source source;
  return compile(k, source);
}

CpuKernelFn LlvmJit::compile(const Kernel& k, Source& source) { return kernel(k, source).get(); }

std::string LlvmJit::support_name(const Kernel& k) {
  if (!k.gemm) return {};
  std::string names;
  for (const GemmSupport& s : gemm_supports_of(k)) {
    if (!names.empty()) names += ' ';
    names += s.module_name();
  }
  return names;
}

void LlvmJit::prepare_support(const Kernel& k) { impl_->prepare_support(k); }

void LlvmJit::set_tiered(bool on) {
  std::lock_guard lock(impl_->mu);
  impl_->tiered = on;
}

void LlvmJit::set_log(bool on) { impl_->log = on; }

void LlvmJit::set_perf_map(bool on) {
  impl_->perf_map = on;
  static std::once_flag said;
  if (on && !impl_->perf_map_supported)
    std::call_once(said, [] {
      std::fprintf(stderr, "[kiln] KILN_PERF_MAP: this LLVM JIT does not link with JITLink; no perf map is written\n");
    });
}

void LlvmJit::wait_background() { background().drain(/*all=*/true); }

JitStats LlvmJit::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->counts;
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

Target host_cpu_target() {
  static const Target host = [] {
    const auto features = llvm::sys::getHostCPUFeatures();
    auto has = [&](const char* f) {
      auto it = features.find(f);
      return it != features.end() && it->second;
    };
    const bool avx512 = has("avx512f");
    return Target::cpu(avx512 ? 512 : has("avx") ? 256 : 128, has("fma"), avx512 ? 32 : 16);
  }();
  return host;
}

std::string LlvmJit::target_description() const {
  std::lock_guard lock(impl_->mu);
  return impl_->tm->getTargetCPU().str() + " " + impl_->tm->getTargetFeatureString().str();
}

} // namespace kiln::codegen

// Kernel IR -> LLVM IR (see kernel_ir.h for the semantics, llvm_jit.h for the ABI).
//
// The module holds two functions:
//   internal alwaysinline void NAME.body(i64 begin, i64 end, ptr b0, ..., ptr params)
//     with noalias on every buffer (outputs writeonly, inputs readonly), and
//   void NAME(i64 begin, i64 end, ptr buffers, ptr params), which loads the buffer
//     pointers and calls the body. After inlining, the noalias arguments become
//     alias scopes, so the vectorizer needs no runtime overlap checks.
// Loop counters and accumulators live in allocas; SROA turns them into SSA values.
// A reduction marked block_inner (matmul, B row-major) runs over blocks of points of
// a row with the reduction loop outside (emit_row_blocked): B's loads vectorize over
// the points and the block's accumulators stay in vector registers.
#include <algorithm>
#include <functional>
#include <limits>
#include <unordered_map>

#include <llvm/IR/Intrinsics.h>

#include "codegen/src/llvm_attention.h"
#include "codegen/src/llvm_gemm.h"
#include "codegen/src/llvm_emitter.h"
#include "codegen/src/llvm_math.h"
#include "codegen/src/scan_columns.h"
#include "codegen/src/sort_runtime.h"
#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {

/// The type of a value of dtype t in registers (bool is i1).
Type* reg_type(LLVMContext& c, DType t) {
  switch (t) {
  case DType::Bool: return Type::getInt1Ty(c);
  case DType::Int32: return Type::getInt32Ty(c);
  case DType::Int64: return Type::getInt64Ty(c);
  case DType::Float32: return Type::getFloatTy(c);
  case DType::Float64: return Type::getDoubleTy(c);
  }
  return nullptr;
}

/// The type of an element of dtype t in memory (bool is i8).
Type* mem_type(LLVMContext& c, DType t) { return t == DType::Bool ? Type::getInt8Ty(c) : reg_type(c, t); }

class Emitter {
public:
  // No `contract` on the kernel's own arithmetic: a fused chain must round exactly
  // like the unfused kernels, which store every op's result. FMAs come from the math
  // functions' polynomials and from reductions marked `fma` (matmul).
  Emitter(const Kernel& k, Module& mod) : k_(k), mod_(mod), ctx_(mod.getContext()), b_(ctx_) {}
  void emit() { emit_abi_function(emit_body_function()); }

private:
  using Scope = std::unordered_map<const Expr*, Value*>;

  const Kernel& k_;
  Module& mod_;
  LLVMContext& ctx_;
  IRBuilder<> b_;
  Function* fn_ = nullptr;           // the body function being emitted
  std::vector<Value*> bufs_;         // buffer pointers (body arguments)
  Value* params_ = nullptr;          // i64 parameter array
  Argument* scratch_ = nullptr;      // scratch memory (GEMM-form and attention kernels only)
  std::vector<Value*> loop_vars_, reduce_vars_, map_vars_, results_;
  std::vector<Scope> scopes_;        // expression values, innermost last (outer ones dominate)
  std::unordered_map<const Expr*, AllocaInst*> checks_; // accumulators of the Check expressions (start_checks)
  std::vector<const Expr*> row_divisions_;              // see find_row_divisions()
  std::vector<const Expr*> row_bounds_;                 // see find_row_divisions()
  std::unordered_map<const Expr*, Value*> quotients_;   // per run of a row: x / D of each row division
  std::unordered_map<const Expr*, Value*> run_values_;  // per run of a row: each row bound's value
  // The row's kept terms (find_kept_terms): a sum whose terms the map computes again
  const Reduction* kept_sum_ = nullptr; // that sum
  const Expr* kept_term_ = nullptr;     // the map's copy of its term
  const Store* kept_in_ = nullptr;      // the store whose buffer keeps the terms in between
  std::vector<std::pair<const Expr*, const Expr*>> kept_if_equal_; // parameters the copy must share
  bool keeping_ = false;                // in this copy of the row's code
  std::vector<const Expr*> check_order_;                 // those Checks, in the order found (stable IR)

  Type* i64() { return b_.getInt64Ty(); }
  Value* c64(int64_t v) { return b_.getInt64(v); }
  Type* reg(DType t) { return reg_type(ctx_, t); }

  // --- functions and loops ---------------------------------------------------

  Function* emit_body_function() {
    std::vector<Type*> args{i64(), i64()};
    for (size_t i = 0; i <= k_.buffers.size(); ++i) args.push_back(b_.getPtrTy());
    if (has_scratch()) args.push_back(b_.getPtrTy()); // GEMM or attention scratch (after the params)
    auto* fty = FunctionType::get(b_.getVoidTy(), args, false);
    fn_ = Function::Create(fty, GlobalValue::InternalLinkage, k_.name + ".body", mod_);
    fn_->addFnAttr(Attribute::AlwaysInline);
    fn_->addFnAttr(Attribute::NoUnwind);
    find_kept_terms();
    for (size_t i = 0; i <= k_.buffers.size(); ++i) {
      Argument* a = fn_->getArg(2 + i);
      a->addAttr(Attribute::NoAlias);
      a->addAttr(Attribute::NoCapture);
      const bool output = i < k_.buffers.size() && k_.buffers[i].output;
      const bool error = i < k_.buffers.size() && k_.buffers[i].error; // read and written by checks
      const bool read_back = output && (k_.form == KernelForm::Scan || // a scatter adds into its output
                                        (kept_in_ && static_cast<int>(i) == kept_in_->buffer)); // kept terms
      if (!error && !read_back) a->addAttr(output ? Attribute::WriteOnly : Attribute::ReadOnly);
      if (i < k_.buffers.size()) bufs_.push_back(a);
    }
    params_ = fn_->getArg(2 + k_.buffers.size());
    if (has_scratch()) {
      scratch_ = fn_->getArg(3 + k_.buffers.size());
      scratch_->addAttr(Attribute::NoAlias);
      scratch_->addAttr(Attribute::NoCapture);
    }
    b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", fn_));
    scopes_.emplace_back();
    start_checks();
    emit_domain(fn_->getArg(0), fn_->getArg(1));
    flush_checks();
    scopes_.pop_back();
    b_.CreateRetVoid();
    return fn_;
  }

  void emit_abi_function(Function* body) {
    Type* ptr = b_.getPtrTy();
    auto* fty = FunctionType::get(b_.getVoidTy(), {i64(), i64(), ptr, ptr}, false);
    Function* f = Function::Create(fty, GlobalValue::ExternalLinkage, k_.name, mod_);
    f->addFnAttr(Attribute::NoUnwind);
    b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", f));
    std::vector<Value*> args{f->getArg(0), f->getArg(1)};
    for (size_t i = 0; i < k_.buffers.size(); ++i)
      args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, f->getArg(2), i)));
    args.push_back(f->getArg(3));
    if (has_scratch()) // the scratch pointer follows the buffers (kernel_ir.h, GemmTiling and AttentionSpec)
      args.push_back(b_.CreateLoad(ptr, b_.CreateConstInBoundsGEP1_64(ptr, f->getArg(2), k_.buffers.size())));
    b_.CreateCall(body, args);
    b_.CreateRetVoid();
  }

  /// True for the forms whose kernels get scratch memory after their buffers.
  bool has_scratch() const {
    return k_.form == KernelForm::Gemm || k_.form == KernelForm::Attention || (k_.form == KernelForm::Scan && k_.scan->sort);
  }

  // --- GEMM form (llvm_gemm.cpp) and attention (llvm_attention.cpp) ---------------

  /// The emitter's expression evaluation and stores, lent to the GEMM generator.
  struct GemmAdapter final : GemmHost {
    Emitter& e;
    explicit GemmAdapter(Emitter& em) : e(em) {}
    IRBuilder<>& builder() override { return e.b_; }
    AllocaInst* entry_alloca(Type* t, const char* name) override { return e.local(t, name); }
    Value* buffer(int b) override { return e.bufs_.at(b); }
    Value* eval(const ExprRef& x) override { return e.expr(x); }
    void set_loop_var(int d, Value* v) override { e.loop_vars_.at(d) = v; }
    void set_reduce_var(Value* v) override { e.reduce_vars_.assign(1, v); }
    void push_scope() override { e.scopes_.emplace_back(); }
    void pop_scope() override { e.scopes_.pop_back(); }
    void store(Value* result) override {
      e.results_ = {result};
      e.emit_stores();
    }
  };

  /// The tasks [begin, end) of a GEMM-form kernel (see kernel_ir.h, GemmTiling).
  void emit_gemm_domain(Value* begin, Value* end) {
    loop_vars_.assign(k_.domain.size(), nullptr);
    GemmAdapter host(*this);
    emit_gemm(k_, host, begin, end, scratch_);
  }

  /// The tasks [begin, end) of an attention kernel (see kernel_ir.h, AttentionSpec): loop vars
  /// 0 and 1 are its batch point and query row, reduction var 0 its key.
  void emit_attention_domain(Value* begin, Value* end) {
    loop_vars_.assign(2, nullptr);
    GemmAdapter host(*this);
    emit_attention(k_, host, begin, end, scratch_);
  }

  /// An alloca in the entry block (so SROA promotes it).
  AllocaInst* local(Type* t, const char* name) {
    IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    return eb.CreateAlloca(t, nullptr, name);
  }

  /// for (v = start; v < end; v += step) body(v), marked for LLVM's loop passes as `hint` says.
  void for_range(Value* start, Value* end, const std::function<void(Value*)>& body, int64_t step = 1,
                 LoopHint hint = LoopHint::None) {
    emit_for(b_, local(i64(), "iv"), start, end, step, body, hint);
  }

  /// if (cond) body().
  void if_then(Value* cond, const std::function<void()>& body) {
    BasicBlock* then = BasicBlock::Create(ctx_, "then", fn_);
    BasicBlock* exit = BasicBlock::Create(ctx_, "endif", fn_);
    b_.CreateCondBr(cond, then, exit);
    b_.SetInsertPoint(then);
    body();
    b_.CreateBr(exit);
    b_.SetInsertPoint(exit);
  }

  /// The head of a loop that runs while *counter < end, its step written by the caller: the
  /// insertion point moves into the body, which branches back to `test` (or out to `exit`).
  struct LoopHead {
    BasicBlock* test;
    BasicBlock* exit;
    Value* counter; ///< its value in this trip
  };
  LoopHead loop_while_below(AllocaInst* counter, Value* end, const std::string& name) {
    BasicBlock* test = BasicBlock::Create(ctx_, name + ".cond", fn_);
    BasicBlock* body = BasicBlock::Create(ctx_, name, fn_);
    BasicBlock* exit = BasicBlock::Create(ctx_, name + ".exit", fn_);
    b_.CreateBr(test);
    b_.SetInsertPoint(test);
    Value* c = b_.CreateLoad(i64(), counter);
    b_.CreateCondBr(b_.CreateICmpSLT(c, end), body, exit);
    b_.SetInsertPoint(body);
    return {test, exit, c};
  }

  /// Nested loops over ext (last innermost), setting vars; body runs in a fresh scope.
  void for_nest(const std::vector<Value*>& ext, std::vector<Value*>& vars, size_t d,
                const std::function<void()>& body) {
    if (d == ext.size()) {
      scopes_.emplace_back();
      body();
      scopes_.pop_back();
      return;
    }
    for_range(c64(0), ext[d], [&](Value* v) {
      vars[d] = v;
      for_nest(ext, vars, d + 1, body);
    });
  }

  std::vector<Value*> exprs(const std::vector<ExprRef>& es) {
    std::vector<Value*> out;
    for (const ExprRef& e : es) out.push_back(expr(e));
    return out;
  }

  /// The flattened domain, one row at a time: the div/mod decomposition of the flat
  /// index runs once per call, and each row advances the index like an odometer (short
  /// rows, as in im2col and pooling, would otherwise pay a division per dim per row);
  /// the innermost loop over the row is the vectorized one.
  void emit_domain(Value* begin, Value* end) {
    if (k_.form == KernelForm::Gemm) return emit_gemm_domain(begin, end);
    if (k_.form == KernelForm::Scan && k_.domain.empty()) { // one column
      for_range(begin, end, [&](Value*) { emit_scan_block(nullptr, c64(1)); });
      return;
    }
    if (k_.form == KernelForm::Attention) return emit_attention_domain(begin, end);
    if (k_.domain.empty()) {
      for_range(begin, end, [&](Value*) { emit_point(); });
      return;
    }
    const size_t rank = k_.domain.size();
    std::vector<Value*> ext = exprs(k_.domain);
    find_row_divisions();
    AllocaInst* iv = local(i64(), "flat");
    b_.CreateStore(begin, iv);
    // The multi-index of `begin`, by div/mod once (divisors kept >= 1: with an empty
    // extent the loop never runs); later rows advance it like an odometer.
    std::vector<AllocaInst*> index(rank);
    Value* rem = begin;
    for (size_t d = rank; d-- > 0;) {
      index[d] = local(i64(), "index");
      Value* e = b_.CreateBinaryIntrinsic(Intrinsic::umax, ext[d], c64(1));
      b_.CreateStore(d == 0 ? rem : b_.CreateURem(rem, e), index[d]);
      if (d > 0) rem = b_.CreateUDiv(rem, e);
    }
    const auto [cond, exit, i] = loop_while_below(iv, end, "row");
    loop_vars_.assign(rank, nullptr);
    for (size_t d = 0; d < rank; ++d) loop_vars_[d] = b_.CreateLoad(i64(), index[d]);
    const std::vector<Value*> row_index = loop_vars_;
    Value* j = loop_vars_[rank - 1];
    Value* n = b_.CreateBinaryIntrinsic(Intrinsic::smin, b_.CreateSub(ext[rank - 1], j), b_.CreateSub(end, i));
    if (k_.form == KernelForm::Scan) {
      loop_vars_[rank - 1] = nullptr; // set per column inside the blocks
      emit_scan_row(j, n);
    } else if (blocked()) {
      loop_vars_[rank - 1] = nullptr; // set per point inside the blocks
      emit_row_blocked(j, n);
    } else if (k_.form == KernelForm::Columns) {
      loop_vars_[rank - 1] = nullptr; // set per point inside the blocks
      emit_row_columns(j, n);
    } else {
      emit_row_points(j, n, rank > 1);
    }
    b_.CreateStore(b_.CreateAdd(i, n), iv);
    // The next row's index: the last var wraps to 0 at its extent, carrying outward.
    Value* carry = b_.getTrue();
    for (size_t d = rank; d-- > 0;) {
      Value* next = d == rank - 1 ? b_.CreateAdd(j, n) : b_.CreateAdd(row_index[d], b_.CreateZExt(carry, i64()));
      Value* wrap = b_.CreateAnd(carry, b_.CreateICmpEQ(next, ext[d]));
      b_.CreateStore(d == 0 ? next : b_.CreateSelect(wrap, c64(0), next), index[d]);
      carry = wrap;
    }
    // An empty last extent gives n <= 0: stop rather than spin.
    b_.CreateCondBr(b_.CreateICmpSGT(n, c64(0)), cond, exit);
    b_.SetInsertPoint(exit);
  }

  /// Rows shorter than this run as masked vectors (when rows can be short at all).
  static constexpr int64_t kShortRow = 64;

  // --- runs: index division by a constant along the row ------------------------------

  /// The smallest divisor find_row_divisions() takes: runs shorter than a vector gain nothing.
  static constexpr int64_t kRunDivisor = 16;

  /// The IntDiv and IntMod expressions of an elementwise kernel that divide an index x = (the
  /// innermost domain var) + (terms without it) by a constant D >= kRunDivisor: a reshape that
  /// splits the row's dim, such as attention's [.., heads * d] -> [.., heads, d]. Along a run of
  /// the row in which x / D does not change, x / D is that constant and x % D = x - D (x / D)
  /// moves with the row one by one, so the loads it addresses are vector loads, where LLVM,
  /// which cannot see through a division, gathers them one lane at a time (emit_row_runs).
  void find_row_divisions() {
    row_divisions_.clear();
    row_bounds_.clear();
    if (k_.form != KernelForm::Elementwise || k_.domain.empty()) return;
    const int inner = static_cast<int>(k_.domain.size()) - 1;
    std::unordered_set<const Expr*> seen;
    std::function<void(const ExprRef&)> visit = [&](const ExprRef& e) {
      if (!seen.insert(e.get()).second) return;
      if (e->kind == ExprKind::Op && (e->op == ScalarOp::Lt || e->op == ScalarOp::Ge) && e->args[0]->dtype == DType::Int64 &&
          coefficient(e->args[0], ExprKind::LoopVar, inner) == 1 && coefficient(e->args[1], ExprKind::LoopVar, inner) == 0)
        row_bounds_.push_back(e.get());
      const Expr* d = e->args.size() == 2 ? e->args[1].get() : nullptr;
      if ((e->kind == ExprKind::IntDiv || e->kind == ExprKind::IntMod) && d->kind == ExprKind::Const &&
          d->dtype == DType::Int64 && d->i >= kRunDivisor &&
          coefficient(e->args[0], ExprKind::LoopVar, inner) == 1)
        row_divisions_.push_back(e.get());
      for (const ExprRef& a : e->args) visit(a);
    };
    for (const Store& s : k_.stores) {
      visit(s.offset);
      visit(s.value);
    }
    if (row_divisions_.empty()) row_bounds_.clear(); // runs only where a division asks for them
  }

  /// The points [j, j + n) of one row in runs over which every row division's quotient is
  /// constant (at most D points each; a run also ends where x would wrap past 0, since the
  /// division is unsigned). The same points and operations as emit_row_points: the same results.
  void emit_row_runs(Value* j, Value* n) {
    AllocaInst* done = local(i64(), "run.done");
    b_.CreateStore(c64(0), done);
    const auto [cond, exit, t] = loop_while_below(done, n, "run");
    Value* start = b_.CreateAdd(j, t, "", true, true);
    Value* len = b_.CreateSub(n, t);
    scopes_.emplace_back(); // the values at the run's first point
    loop_vars_.back() = start;
    for (const Expr* e : row_divisions_) {
      Value* x = expr(e->args[0]);
      Value* d = expr(e->args[1]);
      Value* to_boundary = b_.CreateSub(d, b_.CreateURem(x, d));
      Value* to_wrap = b_.CreateSelect(b_.CreateICmpSLT(x, c64(0)), b_.CreateNeg(x), to_boundary);
      len = b_.CreateBinaryIntrinsic(Intrinsic::smin, len, b_.CreateBinaryIntrinsic(Intrinsic::smin, to_boundary, to_wrap));
      quotients_[e] = b_.CreateUDiv(x, d);
    }
    // A bound x < b or x >= b (a pad's or a concat's range) keeps its value up to x = b: the run
    // stops there, and the guards of the run's loads are the same for all its points.
    for (const Expr* e : row_bounds_) {
      Value* x = expr(e->args[0]);
      Value* bound = expr(e->args[1]);
      Value* below = b_.CreateICmpSLT(x, bound);
      len = b_.CreateSelect(below, b_.CreateBinaryIntrinsic(Intrinsic::smin, len, b_.CreateSub(bound, x)), len);
      run_values_[e] = e->op == ScalarOp::Lt ? below : b_.CreateNot(below);
    }
    scopes_.pop_back();
    for_range(c64(0), len, [&](Value* u) {
      loop_vars_.back() = b_.CreateAdd(start, u, "", true, true);
      emit_point();
    }, 1, LoopHint::MaskedTail);
    quotients_.clear();
    run_values_.clear();
    b_.CreateStore(b_.CreateAdd(t, len), done);
    b_.CreateBr(cond);
    b_.SetInsertPoint(exit);
  }

  /// The points [j, j + n) of one row, one at a time: the loop LLVM vectorizes. Where rows can
  /// be short (a domain of rank > 1: a pooling or im2col row of 14 points), a short row runs a
  /// copy of the loop whose tail is folded into masked vector iterations; long rows keep the
  /// plain loop (a vector body and a scalar remainder), which is faster there.
  void emit_row_points(Value* j, Value* n, bool rows_can_be_short) {
    if (!row_divisions_.empty()) return emit_row_runs(j, n);
    auto points = [&](LoopHint hint) {
      for_range(c64(0), n, [&](Value* t) {
        loop_vars_.back() = b_.CreateAdd(j, t, "", true, true);
        emit_point();
      }, 1, hint);
    };
    if (!rows_can_be_short) return points(LoopHint::None);
    BasicBlock* shortb = BasicBlock::Create(ctx_, "row.short", fn_);
    BasicBlock* longb = BasicBlock::Create(ctx_, "row.long", fn_);
    BasicBlock* join = BasicBlock::Create(ctx_, "row.done", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(n, c64(kShortRow)), shortb, longb);
    b_.SetInsertPoint(shortb);
    points(LoopHint::MaskedTail);
    b_.CreateBr(join);
    b_.SetInsertPoint(longb);
    points(LoopHint::None);
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
  }

  /// Everything the kernel does at one domain point; with kept terms (find_kept_terms), two copies:
  /// keeping them where the sum and the map run over the same extent, not keeping them elsewhere.
  void emit_point() {
    if (!kept_sum_) return emit_point_body();
    scopes_.emplace_back(); // this point's values (the caller's scope may serve other copies of the loop)
    Value* same = b_.CreateICmpEQ(expr(kept_sum_->extents[0]), expr(k_.map[0]));
    for (const auto& [a, b] : kept_if_equal_) same = b_.CreateAnd(same, b_.CreateICmpEQ(param(*a), param(*b)));
    BasicBlock* keep = BasicBlock::Create(ctx_, "row.keep", fn_);
    BasicBlock* plain = BasicBlock::Create(ctx_, "row.plain", fn_);
    BasicBlock* done = BasicBlock::Create(ctx_, "row.done", fn_);
    b_.CreateCondBr(same, keep, plain);
    for (BasicBlock* copy : {keep, plain}) {
      b_.SetInsertPoint(copy);
      keeping_ = copy == keep;
      emit_point_body();
      b_.CreateBr(done);
    }
    keeping_ = false;
    b_.SetInsertPoint(done);
    scopes_.pop_back();
  }

  void emit_point_body() {
    scopes_.emplace_back();
    results_.clear();
    for (const Reduction& r : k_.reductions) results_.push_back(emit_reduction(r));
    if (k_.map.empty()) {
      emit_stores();
    } else {
      map_vars_.assign(k_.map.size(), nullptr);
      for_nest(exprs(k_.map), map_vars_, 0, [&] { emit_stores(); });
    }
    scopes_.pop_back();
  }

  // --- blocked reduction (matmul with a row-major right operand) -------------------

  /// One Sum reduction whose loads are contiguous in the innermost domain var, and no
  /// map: the row is computed in blocks of points, reduction loops outside the block.
  bool blocked() const {
    return k_.reductions.size() == 1 && k_.reductions[0].block_inner && k_.reductions[0].op == ReduceOp::Sum &&
           k_.map.empty() && !k_.domain.empty();
  }

  /// Points per full block: 256 bytes of accumulators (8 AVX2 registers), enough
  /// independent FMA chains to hide the FMA latency.
  int64_t block_width() const {
    const DType dt = k_.reductions[0].dtype;
    return dt == DType::Float64 || dt == DType::Int64 ? 32 : 64;
  }

  /// The points [j, j + n) of one row (outer loop vars set). Blocks have constant
  /// widths w, w/2, w/4 - a constant trip count lets LLVM unroll the vectorized loop
  /// over the block and keep the accumulators in registers - and then one shorter
  /// block of variable width. The split never changes a point's result: each point
  /// accumulates over k in order with the same step, whatever block it lands in.
  void emit_row_blocked(Value* j, Value* n) {
    const int64_t w = block_width();
    AllocaInst* done = local(i64(), "done");
    b_.CreateStore(c64(0), done);
    auto rest = [&] { return b_.CreateSub(n, b_.CreateLoad(i64(), done)); };
    auto block = [&](Value* width) {
      Value* t0 = b_.CreateLoad(i64(), done);
      emit_block(b_.CreateAdd(j, t0, "", true, true), width);
      b_.CreateStore(b_.CreateAdd(t0, width, "", true, true), done);
    };
    // Full blocks while they fit, then at most one block of each smaller constant width.
    Value* full = b_.CreateMul(b_.CreateSDiv(n, c64(w)), c64(w));
    for_range(c64(0), full, [&](Value*) { block(c64(w)); }, w);
    for (int64_t part = w / 2; part >= w / 4; part /= 2)
      if_then(b_.CreateICmpSGE(rest(), c64(part)), [&] { block(c64(part)); });
    if_then(b_.CreateICmpSGT(rest(), c64(0)), [&] { block(rest()); });
  }

  /// The block of points j0 + [0, width): acc[t] for each point, the reduction loops
  /// outermost and the points innermost (the loop LLVM vectorizes), then the stores.
  void emit_block(Value* j0, Value* width) {
    const Reduction& r = k_.reductions[0];
    KILN_ASSERT(r.value->dtype == r.dtype, "reduction dtype mismatch in " + k_.name);
    const size_t last = k_.domain.size() - 1;
    Type* t = reg(r.dtype);
    auto* arr = ArrayType::get(t, static_cast<uint64_t>(block_width()));
    AllocaInst* acc = local(arr, "acc.block");
    auto slot = [&](Value* p) { return b_.CreateInBoundsGEP(arr, acc, {c64(0), p}); };
    auto at_point = [&](Value* p) { loop_vars_[last] = b_.CreateAdd(j0, p, "", true, true); };
    scopes_.emplace_back();
    for_range(c64(0), width, [&](Value* p) { b_.CreateStore(reduction_init(ReduceOp::Sum, r.dtype), slot(p)); });
    reduce_vars_.assign(r.extents.size(), nullptr);
    for_nest(exprs(r.extents), reduce_vars_, 0, [&] {
      for_range(c64(0), width, [&](Value* p) {
        scopes_.emplace_back();
        at_point(p);
        b_.CreateStore(sum_step(r, b_.CreateLoad(t, slot(p))), slot(p));
        scopes_.pop_back();
      });
    });
    reduce_vars_.clear();
    for_range(c64(0), width, [&](Value* p) {
      scopes_.emplace_back();
      at_point(p);
      results_ = {b_.CreateLoad(t, slot(p))};
      emit_stores();
      scopes_.pop_back();
    });
    loop_vars_[last] = nullptr;
    scopes_.pop_back();
  }

  // --- columns form (kernel_ir.h, KernelForm::Columns) ----------------------------

  /// Points per column block: one vector register of them, so that the block's lanes
  /// (sum_lanes() accumulators per point) fill 16 (f32) or 8 (f64) vector registers.
  int64_t column_width() const { return columns_block_points(k_.reductions[0].dtype); }

  /// The points [j, j + n) of one row, in blocks of column_width() and one shorter block.
  void emit_row_columns(Value* j, Value* n) {
    const int64_t w = column_width();
    Value* full = b_.CreateMul(b_.CreateSDiv(n, c64(w)), c64(w));
    for_range(c64(0), full, [&](Value* t) { emit_column_block(b_.CreateAdd(j, t, "", true, true), c64(w)); }, w);
    if_then(b_.CreateICmpSGT(n, full), [&] { emit_column_block(b_.CreateAdd(j, full, "", true, true), b_.CreateSub(n, full)); });
  }

  /// The block of points j0 + [0, width) of a Columns-form kernel: every point's sum in the
  /// order of emit_lane_sum() (the same operations on the same values: the same bits), the
  /// reduction loops outermost and the points innermost, the loop LLVM vectorizes.
  void emit_column_block(Value* j0, Value* width) {
    const Reduction& r = k_.reductions[0];
    const size_t last = k_.domain.size() - 1;
    const int64_t w = column_width(), lanes = sum_lanes(r.dtype);
    Type* t = reg(r.dtype);
    auto* row = ArrayType::get(t, static_cast<uint64_t>(w));
    auto* grid = ArrayType::get(row, static_cast<uint64_t>(lanes));
    AllocaInst* total = local(row, "col.total");
    AllocaInst* part = local(row, "col.part");
    AllocaInst* acc = local(grid, "col.lanes");
    auto at = [&](AllocaInst* a, Value* p) { return b_.CreateInBoundsGEP(row, a, {c64(0), p}); };
    auto lane = [&](Value* l, Value* p) { return b_.CreateInBoundsGEP(grid, acc, {c64(0), l, p}); };
    // A block shorter than w (a row's last) runs each loop over points as one masked vector
    // iteration rather than vector loops with remainders (compile time).
    const LoopHint over_points = isa<ConstantInt>(width) ? LoopHint::None : LoopHint::MaskedTail;
    auto points = [&](const std::function<void(Value*)>& body) { for_range(c64(0), width, body, 1, over_points); };
    auto zero = [&](AllocaInst* a) {
      b_.CreateMemSet(a, b_.getInt8(0), mod_.getDataLayout().getTypeAllocSize(a->getAllocatedType()), a->getAlign());
    };
    // *s += the value at reduction point k, point p
    auto add_term = [&](Value* k, Value* p, Value* s) {
      scopes_.emplace_back();
      reduce_vars_.back() = k;
      loop_vars_[last] = b_.CreateAdd(j0, p, "", true, true);
      b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(t, s), expr(r.value)), s);
      scopes_.pop_back();
    };
    // slot(p) += value at reduction point k, for every point p
    auto step = [&](Value* k, const std::function<Value*(Value*)>& slot) {
      points([&](Value* p) { add_term(k, p, slot(p)); });
    };
    scopes_.emplace_back(); // values of this block's code only
    std::vector<Value*> ext = exprs(r.extents);
    zero(total);
    reduce_vars_.assign(ext.size(), nullptr);
    std::vector<Value*> outer(ext.begin(), ext.end() - 1);
    for_nest(outer, reduce_vars_, 0, [&] {
      Value* n = ext.back();
      zero(part);
      BasicBlock* join = BasicBlock::Create(ctx_, "col.join", fn_);
      BasicBlock* seq = BasicBlock::Create(ctx_, "col.seq", fn_);
      BasicBlock* wide = BasicBlock::Create(ctx_, "col.wide", fn_);
      b_.CreateCondBr(b_.CreateICmpSLT(n, c64(lanes)), seq, wide);
      // Short runs: one sequential chain per point.
      b_.SetInsertPoint(seq);
      for_range(c64(0), n, [&](Value* k) { step(k, [&](Value* p) { return at(part, p); }); });
      b_.CreateBr(join);
      // Long runs: lanes per point, the tail into the first lanes, the pairwise combine.
      b_.SetInsertPoint(wide);
      zero(acc);
      Value* full = b_.CreateMul(b_.CreateSDiv(n, c64(lanes)), c64(lanes));
      // All 16 lanes in each step of the loop over k (one pass over the block's rows): a rolled
      // loop over groups of 4 or 8 lanes compiled faster but read the rows once per group and
      // ran 1.2-1.7x slower (bench ColumnSum). One loop over the points holds all 16 lanes'
      // terms (and one holds the whole pairwise combine): each point's chains are the same,
      // and the vectorizer sees 2 loops instead of 31 (compile time).
      for_range(c64(0), full, [&](Value* k0) {
        points([&](Value* p) {
          for (int64_t l = 0; l < lanes; ++l) add_term(b_.CreateAdd(k0, c64(l), "", true, true), p, lane(c64(l), p));
        });
      }, lanes);
      for_range(full, n, [&](Value* k) {
        Value* l = b_.CreateSub(k, full, "", true, true);
        step(k, [&](Value* p) { return lane(l, p); });
      });
      points([&](Value* p) {
        for (int64_t h = lanes / 2; h >= 1; h /= 2)
          for (int64_t l = 0; l < h; ++l)
            b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(t, lane(c64(l), p)), b_.CreateLoad(t, lane(c64(l + h), p))), lane(c64(l), p));
        b_.CreateStore(b_.CreateLoad(t, lane(c64(0), p)), at(part, p));
      });
      b_.CreateBr(join);
      b_.SetInsertPoint(join);
      points([&](Value* p) { b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(t, at(total, p)), b_.CreateLoad(t, at(part, p))), at(total, p)); });
    });
    reduce_vars_.clear();
    points([&](Value* p) {
      scopes_.emplace_back();
      loop_vars_[last] = b_.CreateAdd(j0, p, "", true, true);
      results_ = {b_.CreateLoad(t, at(total, p))};
      emit_stores();
      scopes_.pop_back();
    });
    loop_vars_[last] = nullptr;
    scopes_.pop_back();
  }

  /// acc + value in sequential order: fmuladd for matmul, a plain add otherwise (no
  /// reassoc: each point's chain is its own, the vectorized loop runs over points).
  Value* sum_step(const Reduction& r, Value* acc) {
    if (!is_fma_reduction(r)) {
      Value* v = expr(r.value);
      if (r.dtype == DType::Bool) return b_.CreateOr(acc, v);
      return is_floating(r.dtype) ? b_.CreateFAdd(acc, v) : b_.CreateAdd(acc, v);
    }
    return fma_step(r, acc);
  }

  void emit_stores() {
    for (const Store& s : k_.stores) {
      const DType dt = k_.buffers.at(s.buffer).dtype;
      KILN_ASSERT(k_.buffers[s.buffer].output && s.value->dtype == dt, "bad store in " + k_.name);
      Value* off = expr(s.offset);
      Value* v = expr(s.value);
      if (dt == DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
      b_.CreateStore(v, b_.CreateInBoundsGEP(mem_type(ctx_, dt), bufs_[s.buffer], off));
    }
  }

  // --- scan form (kernel_ir.h, ScanLoop) -------------------------------------------

  /// The columns [j, j + n) of one row of the domain (one at a time where the axis is the
  /// innermost, scan_column_at_a_time()), else in blocks of constant width (so that the
  /// block's accumulators stay in registers and its column loop vectorizes): kScanColumns
  /// while they fit, then at most one block of each smaller power of two. A column's result
  /// never depends on its block: its steps run in order either way.
  void emit_scan_row(Value* j, Value* n) {
    if (scan_column_at_a_time(*k_.scan)) { // one column at a time, streaming along the contiguous axis
      for_range(c64(0), n, [&](Value* t) { emit_scan_block(b_.CreateAdd(j, t, "", true, true), c64(1)); });
      return;
    }
    AllocaInst* done = local(i64(), "done");
    b_.CreateStore(c64(0), done);
    auto block = [&](int64_t width) {
      Value* t0 = b_.CreateLoad(i64(), done);
      emit_scan_block(b_.CreateAdd(j, t0, "", true, true), c64(width));
      b_.CreateStore(b_.CreateAdd(t0, c64(width), "", true, true), done);
    };
    Value* full = b_.CreateMul(b_.CreateSDiv(n, c64(kScanColumns)), c64(kScanColumns));
    for_range(c64(0), full, [&](Value*) { block(kScanColumns); }, kScanColumns);
    for (int64_t part = kScanColumns / 2; part >= 1; part /= 2)
      if_then(b_.CreateICmpSGE(b_.CreateSub(n, b_.CreateLoad(i64(), done)), c64(part)), [&] { block(part); });
  }

  /// acc op v for the scan's combine (kernel_ir.h, ScanOp; no contraction, no reassociation).
  Value* scan_combine(const ScanLoop& sc, Value* acc, Value* v) {
    switch (sc.op) {
    case ScanOp::Add: return arith(Instruction::FAdd, Instruction::Add, Instruction::Or, acc, v, sc.dtype);
    case ScanOp::Mul: return arith(Instruction::FMul, Instruction::Mul, Instruction::And, acc, v, sc.dtype);
    case ScanOp::Max: return scan_extreme(true, sc.dtype, acc, v);
    case ScanOp::Min: return scan_extreme(false, sc.dtype, acc, v);
    case ScanOp::LogAddExp: return log_add_exp(sc.dtype, acc, v);
    }
    KILN_ASSERT(false, "bad scan combine in " + k_.name);
    return nullptr;
  }

  /// v where v >= acc (<= for min) or v is NaN, else acc: torch's cummax/cummin update (a tie takes v).
  Value* scan_extreme(bool is_max, DType t, Value* acc, Value* v) {
    if (!is_floating(t)) return max_min(is_max, t, acc, v); // the same value for integers and bool
    Value* better = is_max ? b_.CreateFCmpOGE(v, acc) : b_.CreateFCmpOLE(v, acc);
    return b_.CreateSelect(b_.CreateOr(better, b_.CreateFCmpUNO(v, v)), v, acc);
  }

  /// logaddexp(acc, v): m = max(acc, v) (NaN-propagating), m where m is +-inf, else m + log1p(exp(-|acc - v|)).
  Value* log_add_exp(DType t, Value* acc, Value* v) {
    require_float(t, "logaddexp");
    Value* m = max_min(true, t, acc, v);
    Value* gap = b_.CreateFNeg(b_.CreateUnaryIntrinsic(Intrinsic::fabs, b_.CreateFSub(acc, v)));
    Value* r = b_.CreateFAdd(m, math(MathFn::Log1p, math(MathFn::Exp, gap, t), t));
    Value* inf = b_.CreateFCmpOEQ(b_.CreateUnaryIntrinsic(Intrinsic::fabs, m), ConstantFP::getInfinity(reg(t)));
    return b_.CreateSelect(inf, m, r);
  }

  /// The scan's identity: 0 for add, 1 for mul, max's and min's reduction identity, -inf for logaddexp.
  Value* scan_identity(const ScanLoop& sc) {
    Type* t = reg(sc.dtype);
    switch (sc.op) {
    case ScanOp::Add:
    case ScanOp::Mul: {
      const int one = sc.op == ScanOp::Mul ? 1 : 0;
      return is_floating(sc.dtype) ? ConstantFP::get(t, one) : ConstantInt::get(t, one);
    }
    case ScanOp::Max: return reduction_init(ReduceOp::Max, sc.dtype);
    case ScanOp::Min: return reduction_init(ReduceOp::Min, sc.dtype);
    case ScanOp::LogAddExp: return ConstantFP::getInfinity(t, true);
    }
    KILN_ASSERT(false, "bad scan combine in " + k_.name);
    return nullptr;
  }

  /// The columns j0 + [0, width) (j0 null: the one column of an empty domain), steps outermost.
  void emit_scan_block(Value* j0, Value* width) {
    const ScanLoop& sc = *k_.scan;
    if (sc.sort) return emit_sort_column(j0);
    KILN_ASSERT(k_.stores.size() == 1 && k_.reductions.empty() && k_.map.empty() && sc.value->dtype == sc.dtype,
                "a scan kernel has one store and no reductions or map: " + k_.name);
    const Store& st = k_.stores[0];
    const size_t last = k_.domain.size() - 1;
    Type* t = reg(sc.dtype);
    auto at = [&](Value* p, const std::function<void()>& body) { // in a scope of its own: the column's values
      scopes_.emplace_back();
      if (j0) loop_vars_[last] = b_.CreateAdd(j0, p, "", true, true);
      body();
      scopes_.pop_back();
    };
    auto store = [&](Value* position, Value* result) {
      map_vars_ = {position};
      results_ = {result};
      emit_stores();
    };
    scopes_.emplace_back();
    Value* steps = expr(sc.steps);
    if (!sc.target) { // a running scan: the block's accumulators, in order along the steps
      auto* arr = ArrayType::get(t, static_cast<uint64_t>(kScanColumns));
      AllocaInst* acc = local(arr, "acc.scan");
      auto slot = [&](Value* p) { return b_.CreateInBoundsGEP(arr, acc, {c64(0), p}); };
      for_range(c64(0), width, [&](Value* p) { b_.CreateStore(scan_identity(sc), slot(p)); });
      for_range(c64(0), steps, [&](Value* s) {
        for_range(c64(0), width, [&](Value* p) {
          at(p, [&] {
            reduce_vars_ = {s};
            Value* a = scan_combine(sc, b_.CreateLoad(t, slot(p)), expr(sc.value));
            b_.CreateStore(a, slot(p));
            store(s, a);
          });
        });
      });
    } else { // a scatter: the identity everywhere, then each step into its target
      Value* positions = expr(sc.positions);
      for_range(c64(0), positions, [&](Value* q) {
        for_range(c64(0), width, [&](Value* p) { at(p, [&] { store(q, scan_identity(sc)); }); });
      });
      Type* mt = mem_type(ctx_, sc.dtype);
      for_range(c64(0), steps, [&](Value* s) {
        for_range(c64(0), width, [&](Value* p) {
          at(p, [&] {
            reduce_vars_ = {s};
            Value* target = expr(sc.target);
            Value* v = expr(sc.value);
            // branch-free: a target outside [0, positions) rewrites position 0 of its own column unchanged
            Value* inside = b_.CreateICmpULT(target, positions);
            map_vars_ = {b_.CreateSelect(inside, target, c64(0))};
            Value* ptr = b_.CreateInBoundsGEP(mt, bufs_.at(st.buffer), expr(st.offset));
            Value* old = b_.CreateLoad(mt, ptr);
            store(map_vars_[0], b_.CreateSelect(inside, scan_combine(sc, old, v), old));
          });
        });
      });
    }
    reduce_vars_.clear();
    map_vars_.clear();
    scopes_.pop_back();
  }

  /// The argsort of column j0 (null: the one column of an empty domain; kernel_ir.h, ScanLoop::sort):
  /// its keys into the scratch memory (sort_scratch()), one call of the dtype's routine
  /// (sort_runtime.h) writing their sorted positions there, then a store per position.
  void emit_sort_column(Value* j0) {
    const ScanLoop& sc = *k_.scan;
    KILN_ASSERT(k_.stores.size() == 1 && k_.reductions.empty() && k_.map.empty() && sc.value->dtype == sc.dtype && scratch_,
                "an argsort kernel has one store, no reductions or map, and scratch memory: " + k_.name);
    scopes_.emplace_back();
    if (j0) loop_vars_[k_.domain.size() - 1] = j0;
    Value* steps = expr(sc.steps);
    // the offsets of sort_scratch(): keys, keys_tmp, idx, idx_tmp, each region a multiple of 64 bytes
    auto region = [&](Value* bytes) { return b_.CreateAnd(b_.CreateAdd(bytes, c64(63)), c64(~int64_t{63})); };
    Value* keys_bytes = region(b_.CreateMul(steps, c64(static_cast<int64_t>(dtype_size(sc.dtype)))));
    Value* idx_bytes = region(b_.CreateMul(steps, c64(8)));
    auto at_byte = [&](Value* off) { return b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_, off); };
    Value* keys = scratch_;
    Value* keys_tmp = at_byte(keys_bytes);
    Value* idx = at_byte(b_.CreateShl(keys_bytes, 1));
    Value* idx_tmp = at_byte(b_.CreateAdd(b_.CreateShl(keys_bytes, 1), idx_bytes));
    Type* mt = mem_type(ctx_, sc.dtype);
    for_range(c64(0), steps, [&](Value* s) {
      scopes_.emplace_back(); // the key's values
      reduce_vars_ = {s};
      Value* v = expr(sc.value);
      if (sc.dtype == DType::Bool) v = b_.CreateZExt(v, b_.getInt8Ty());
      b_.CreateStore(v, b_.CreateInBoundsGEP(mt, keys, s));
      scopes_.pop_back();
    });
    Type* ptr = b_.getPtrTy();
    FunctionCallee routine = mod_.getOrInsertFunction(
        argsort_routine(sc.dtype), FunctionType::get(b_.getVoidTy(), {ptr, ptr, i64(), i64(), ptr, ptr}, false));
    if (auto* f = dyn_cast<Function>(routine.getCallee())) f->addFnAttr(Attribute::NoUnwind);
    b_.CreateCall(routine, {keys, idx, steps, c64(sc.descending ? 1 : 0), keys_tmp, idx_tmp});
    for_range(c64(0), steps, [&](Value* p) {
      scopes_.emplace_back(); // the store's values
      map_vars_ = {p};
      results_ = {b_.CreateLoad(i64(), b_.CreateInBoundsGEP(i64(), idx, p))};
      emit_stores();
      scopes_.pop_back();
    });
    reduce_vars_.clear();
    map_vars_.clear();
    scopes_.pop_back();
  }

  // --- kept terms: a row's sum whose terms the map computes again ---------------------

  /// A Row-form kernel whose one store's value contains a float sum's term again, with the map
  /// var for the sum's var (softmax: exp(x - max) in the sum and in x's output e / sum): the sum
  /// keeps each term in the output buffer at the position the map will store to, and the map
  /// reads it back instead of computing it again (one exp per element, not two). The same
  /// values in the same places: the same bits. Terms with index checks are computed as before.
  void find_kept_terms() {
    if (k_.form != KernelForm::Row || k_.map.size() != 1 || k_.stores.size() != 1) return;
    const Store& s = k_.stores[0];
    for (const Reduction& r : k_.reductions) {
      if (r.op != ReduceOp::Sum || !is_floating(r.dtype) || r.block_inner || r.fma || r.extents.size() != 1 ||
          r.dtype != k_.buffers.at(s.buffer).dtype || mentions(r.value, ExprKind::Check, kAnyIndex) ||
          !mentions(r.value, ExprKind::ReduceVar, 0) || // a term the same for every k (its copy: any map position)
          !has_math_function(r.value)) // cheaper to compute again than to store and load (layernorm's x)
        continue;
      if (const Expr* term = copy_of(s.value, r.value)) {
        kept_sum_ = &r;
        kept_term_ = term;
        kept_in_ = &s;
        return;
      }
    }
  }

  /// True when e calls a math function (each shared subtree looked at once).
  static bool has_math_function(const ExprRef& e) {
    static constexpr ScalarOp kCostly[] = {
        ScalarOp::Exp,   ScalarOp::Expm1, ScalarOp::Log,     ScalarOp::Log1p, ScalarOp::Sin,
        ScalarOp::Cos,   ScalarOp::Tanh,  ScalarOp::Sigmoid, ScalarOp::Erf,   ScalarOp::Pow,
        ScalarOp::Tan,   ScalarOp::Atan,  ScalarOp::Asin,    ScalarOp::Acos,  ScalarOp::Sinh,
        ScalarOp::Cosh,  ScalarOp::Asinh, ScalarOp::Acosh,   ScalarOp::Atanh, ScalarOp::Log2,
        ScalarOp::Log10, ScalarOp::Exp2,  ScalarOp::Atan2,   ScalarOp::Fmod,  ScalarOp::Remainder};
    std::unordered_set<const Expr*> seen;
    std::function<bool(const ExprRef&)> visit = [&](const ExprRef& x) {
      if (!seen.insert(x.get()).second) return false;
      if (x->kind == ExprKind::Op && std::find(std::begin(kCostly), std::end(kCostly), x->op) != std::end(kCostly)) return true;
      return std::any_of(x->args.begin(), x->args.end(), visit);
    };
    return visit(e);
  }

  /// A subexpression of `e` equal to the sum's term `term` with map var 0 for reduce var 0, and
  /// parameters that may differ in index (the lowering gives each stride its own) but must be
  /// equal at run time (kept_if_equal_).
  const Expr* copy_of(const ExprRef& e, const ExprRef& term) {
    kept_if_equal_.clear();
    if (same_but_var(e, term)) return e.get();
    for (const ExprRef& a : e->args)
      if (const Expr* c = copy_of(a, term)) return c;
    kept_if_equal_.clear();
    return nullptr;
  }

  bool same_but_var(const ExprRef& m, const ExprRef& r) {
    if (m->kind == ExprKind::MapVar && r->kind == ExprKind::ReduceVar) return m->index == 0 && r->index == 0;
    if (m == r) return !mentions(m, ExprKind::MapVar, kAnyIndex) && !mentions(m, ExprKind::ReduceVar, kAnyIndex);
    if (m->kind == ExprKind::Param && r->kind == ExprKind::Param && m->dtype == DType::Int64 && r->dtype == DType::Int64) {
      kept_if_equal_.emplace_back(m.get(), r.get());
      return true;
    }
    if (!same_node(*m, *r)) return false;
    for (size_t i = 0; i < m->args.size(); ++i)
      if (!same_but_var(m->args[i], r->args[i])) return false;
    return true;
  }

  /// The kept term's place: the kept-in store's offset at map position k.
  Value* kept_place(Value* k) {
    const std::vector<Value*> saved = map_vars_;
    map_vars_.assign(1, k);
    scopes_.emplace_back();
    const DType dt = k_.buffers.at(kept_in_->buffer).dtype;
    Value* p = b_.CreateInBoundsGEP(mem_type(ctx_, dt), bufs_[kept_in_->buffer], expr(kept_in_->offset));
    scopes_.pop_back();
    map_vars_ = saved;
    return p;
  }

  void keep_term(Value* v) { b_.CreateStore(v, kept_place(reduce_vars_.back())); }

  // --- reductions --------------------------------------------------------------

  /// The accumulator's initial value: 0, or the identity of max/min (-inf/+inf, INT_MIN/MAX).
  Value* reduction_init(ReduceOp kind, DType dt) {
    Type* t = reg(dt);
    const bool maxlike = kind == ReduceOp::Max || kind == ReduceOp::Argmax;
    if (kind == ReduceOp::Sum) return Constant::getNullValue(t);
    if (is_floating(dt)) return ConstantFP::getInfinity(t, maxlike);
    if (dt == DType::Bool) return b_.getInt1(!maxlike);
    const unsigned w = t->getIntegerBitWidth();
    return ConstantInt::get(ctx_, maxlike ? APInt::getSignedMinValue(w) : APInt::getSignedMaxValue(w));
  }

  /// acc (+) v for integer and bool Sum, Max, Min (float sums: emit_lane_sum).
  Value* combine(ReduceOp kind, DType dt, Value* acc, Value* v) {
    if (kind != ReduceOp::Sum) return max_min(kind == ReduceOp::Max, dt, acc, v);
    KILN_ASSERT(!is_floating(dt), "float sums are lane sums");
    return dt == DType::Bool ? b_.CreateOr(acc, v) : b_.CreateAdd(acc, v);
  }

  /// A float Sum of a product that the kernel allows to contract (matmul).
  static bool is_fma_reduction(const Reduction& r) {
    return r.fma && r.op == ReduceOp::Sum && is_floating(r.dtype) && r.value->kind == ExprKind::Op &&
           r.value->op == ScalarOp::Mul;
  }

  /// acc + a*b as one fused multiply-add (never reassociated: see sum_lanes()).
  Value* fma_step(const Reduction& r, Value* acc) {
    Value* a = expr(r.value->args[0]);
    Value* c = expr(r.value->args[1]);
    return emit_fmuladd(b_, a, c, acc);
  }

  /// Whether v replaces the best so far in argmax/argmin: strictly better, or the
  /// first NaN (NaN counts as the extreme; later equal values never replace).
  Value* arg_better(bool is_max, DType dt, Value* best, Value* v) {
    if (is_floating(dt)) {
      Value* strict = is_max ? b_.CreateFCmpOGT(v, best) : b_.CreateFCmpOLT(v, best);
      Value* first_nan = b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpORD(best, best));
      return b_.CreateOr(strict, first_nan);
    }
    if (dt == DType::Bool) return is_max ? b_.CreateICmpUGT(v, best) : b_.CreateICmpULT(v, best);
    return is_max ? b_.CreateICmpSGT(v, best) : b_.CreateICmpSLT(v, best);
  }

  /// A float sum in the order of sum_lanes(): per run of the innermost loop, lanes of
  /// independent in-order chains (the loop over lanes is what vectorizes; no `reassoc`),
  /// combined pairwise; the runs' partials summed in order.
  Value* emit_lane_sum(const Reduction& r) {
    std::vector<Value*> ext = exprs(r.extents);
    Type* t = reg(r.dtype);
    Value* zero = Constant::getNullValue(t);
    AllocaInst* total = local(t, "sum");
    b_.CreateStore(zero, total);
    reduce_vars_.assign(ext.size(), nullptr);
    if (ext.empty()) {
      scopes_.emplace_back();
      b_.CreateStore(lane_step(r, zero), total);
      scopes_.pop_back();
    } else {
      std::vector<Value*> outer(ext.begin(), ext.end() - 1);
      for_nest(outer, reduce_vars_, 0, [&] {
        Value* part = lane_run(r, ext.back());
        b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(t, total), part), total);
      });
    }
    reduce_vars_.clear();
    return b_.CreateLoad(t, total);
  }

  /// A float sum in sequential order (a `block_inner` reduction outside a block).
  Value* emit_sequential_sum(const Reduction& r) {
    std::vector<Value*> ext = exprs(r.extents);
    Type* t = reg(r.dtype);
    AllocaInst* acc = local(t, "acc");
    b_.CreateStore(Constant::getNullValue(t), acc);
    reduce_vars_.assign(ext.size(), nullptr);
    for_nest(ext, reduce_vars_, 0, [&] { b_.CreateStore(sum_step(r, b_.CreateLoad(t, acc)), acc); });
    reduce_vars_.clear();
    return b_.CreateLoad(t, acc);
  }

  /// acc + value (or fmuladd(a, b, acc) for a matmul) at the current reduce vars.
  Value* lane_step(const Reduction& r, Value* acc) {
    if (is_fma_reduction(r)) return fma_step(r, acc);
    return b_.CreateFAdd(acc, lane_term(r));
  }

  /// True when this copy of the row's code keeps r's terms for the map (see find_kept_terms).
  bool keeps_terms(const Reduction& r) const { return keeping_ && &r == kept_sum_; }

  /// The term a (not fma) sum adds at the current reduce vars, kept where the map reuses it.
  Value* lane_term(const Reduction& r) {
    Value* v = expr(r.value);
    if (keeps_terms(r)) keep_term(v);
    return v;
  }

  /// The partial sum of one run of the innermost reduction loop, over [0, n).
  Value* lane_run(const Reduction& r, Value* n) {
    const int64_t lanes = sum_lanes(r.dtype);
    const size_t last = r.extents.size() - 1;
    Type* t = reg(r.dtype);
    AllocaInst* part = local(t, "part");
    auto at = [&](Value* k, const std::function<void()>& body) {
      scopes_.emplace_back();
      reduce_vars_[last] = k;
      body();
      scopes_.pop_back();
    };
    BasicBlock* join = BasicBlock::Create(ctx_, "lanes.join", fn_);
    BasicBlock* seq = BasicBlock::Create(ctx_, "lanes.seq", fn_);
    BasicBlock* wide = BasicBlock::Create(ctx_, "lanes.wide", fn_);
    b_.CreateCondBr(b_.CreateICmpSLT(n, c64(lanes)), seq, wide);
    // Short runs: one sequential chain.
    b_.SetInsertPoint(seq);
    b_.CreateStore(Constant::getNullValue(t), part);
    for_range(c64(0), n, [&](Value* k) { at(k, [&] { b_.CreateStore(lane_step(r, b_.CreateLoad(t, part)), part); }); });
    b_.CreateBr(join);
    // Long runs: lanes, then the tail into the first lanes, then the pairwise combine.
    b_.SetInsertPoint(wide);
    auto* arr = ArrayType::get(t, static_cast<uint64_t>(lanes));
    AllocaInst* acc = local(arr, "lanes");
    auto slot = [&](Value* l) { return b_.CreateInBoundsGEP(arr, acc, {c64(0), l}); };
    for (int64_t l = 0; l < lanes; ++l) b_.CreateStore(Constant::getNullValue(t), slot(c64(l)));
    auto step_at = [&](Value* k, Value* l) { at(k, [&] { b_.CreateStore(lane_step(r, b_.CreateLoad(t, slot(l))), slot(l)); }); };
    Value* full = b_.CreateMul(b_.CreateSDiv(n, c64(lanes)), c64(lanes));
    if (keeps_terms(r)) // a loop over the lanes: see lane_vectors()
      for_range(c64(0), full, [&](Value* k0) {
        for_range(c64(0), c64(lanes), [&](Value* l) { step_at(b_.CreateAdd(k0, l, "", true, true), l); });
      }, lanes);
    else
      lane_vectors(r, full, acc, at);
    for_range(full, n, [&](Value* k) { step_at(k, b_.CreateSub(k, full, "", true, true)); });
    for (int64_t h = lanes / 2; h >= 1; h /= 2)
      for (int64_t l = 0; l < h; ++l)
        b_.CreateStore(b_.CreateFAdd(b_.CreateLoad(t, slot(c64(l))), b_.CreateLoad(t, slot(c64(l + h)))), slot(c64(l)));
    b_.CreateStore(b_.CreateLoad(t, slot(c64(0))), part);
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
    reduce_vars_[last] = nullptr;
    return b_.CreateLoad(t, part);
  }

  /// The lanes' chains over [0, full) (a multiple of sum_lanes()) into `acc`, the array of the
  /// lanes, with `at(k, body)` running body at reduce var k: each step's terms built as one vector
  /// and added (or multiplied and added) into a vector of the lanes that stays in a register. Lane
  /// by lane, the operations and their order are those of a loop over the lanes; but that loop,
  /// where LLVM unrolled it (a short term), was left to its SLP pass, which split the lanes into
  /// pairs of registers (LayerNorm's sums ran 2 floats wide; CrossEntropy 1.2x slower). A sum whose
  /// terms the map reuses (softmax's exp) keeps the loop, which LLVM vectorizes whole: built here,
  /// Softmax/48x64x64 ran 4% slower.
  void lane_vectors(const Reduction& r, Value* full, AllocaInst* acc,
                    const std::function<void(Value*, const std::function<void()>&)>& at) {
    auto* vt = FixedVectorType::get(reg(r.dtype), static_cast<unsigned>(sum_lanes(r.dtype)));
    AllocaInst* sums = local(vt, "lanes.v");
    b_.CreateStore(Constant::getNullValue(vt), sums);
    const bool fma = is_fma_reduction(r);
    for_range(c64(0), full, [&](Value* k0) {
      Value* x = PoisonValue::get(vt); // the terms, or a product's factors x and y
      Value* y = PoisonValue::get(vt);
      for (uint64_t l = 0; l < vt->getNumElements(); ++l)
        at(b_.CreateAdd(k0, c64(static_cast<int64_t>(l)), "", true, true), [&] {
          if (!fma) return void(x = b_.CreateInsertElement(x, lane_term(r), l));
          x = b_.CreateInsertElement(x, expr(r.value->args[0]), l);
          y = b_.CreateInsertElement(y, expr(r.value->args[1]), l);
        });
      Value* sum = b_.CreateLoad(vt, sums);
      b_.CreateStore(fma ? emit_fmuladd(b_, x, y, sum) : b_.CreateFAdd(sum, x), sums);
    }, sum_lanes(r.dtype));
    b_.CreateAlignedStore(b_.CreateLoad(vt, sums), acc, acc->getAlign()); // the array, laid out as the vector
  }

  Value* emit_reduction(const Reduction& r) {
    const ReduceOp kind = r.op;
    if (kind == ReduceOp::Sum && is_floating(r.dtype)) return r.block_inner ? emit_sequential_sum(r) : emit_lane_sum(r);
    if ((kind == ReduceOp::Max || kind == ReduceOp::Min) && is_floating(r.dtype) && !r.extents.empty())
      return emit_float_extreme(r);
    return emit_fold(r);
  }

  /// A float max or min. llvm.maximum/minimum (NaN wins, -0 < +0) vectorizes into six x86 ops a
  /// vector; over rows of at least a vector of terms, a first pass takes plain compare-selects
  /// (nnan, nsz: one vmaxps/vminps a vector) and notes whether a term was NaN. Without a NaN,
  /// its result is the extreme's value, and a nonzero one has one bit pattern, so it is taken;
  /// where a term was NaN or the result is a zero of either sign, emit_fold's exact pass runs
  /// again. The result is emit_fold's, bit for bit (bench Softmax/48x64x64: 1.35x,
  /// Softmax/8192x1024: 1.06x, 1 thread).
  Value* emit_float_extreme(const Reduction& r) {
    std::vector<Value*> ext = exprs(r.extents);
    Type* t = reg(r.dtype);
    const bool is_max = r.op == ReduceOp::Max;
    AllocaInst* out = local(t, "extreme");
    AllocaInst* acc = local(t, "extreme.fast");
    AllocaInst* nan = local(b_.getInt1Ty(), "extreme.nan");
    BasicBlock* fast = BasicBlock::Create(ctx_, "extreme.fast", fn_);
    BasicBlock* check = BasicBlock::Create(ctx_, "extreme.check", fn_);
    BasicBlock* take = BasicBlock::Create(ctx_, "extreme.take", fn_);
    BasicBlock* exact = BasicBlock::Create(ctx_, "extreme.exact", fn_);
    BasicBlock* done = BasicBlock::Create(ctx_, "extreme.done", fn_);
    b_.CreateCondBr(b_.CreateICmpSGE(ext.back(), c64(sum_lanes(r.dtype))), fast, exact);
    b_.SetInsertPoint(fast);
    b_.CreateStore(reduction_init(r.op, r.dtype), acc);
    b_.CreateStore(b_.getFalse(), nan);
    reduce_vars_.assign(ext.size(), nullptr);
    for_nest(ext, reduce_vars_, 0, [&] {
      Value* v = expr(r.value);
      Value* a = b_.CreateLoad(t, acc);
      b_.CreateStore(b_.CreateOr(b_.CreateLoad(b_.getInt1Ty(), nan), b_.CreateFCmpUNO(v, v)), nan);
      IRBuilderBase::FastMathFlagGuard guard(b_);
      FastMathFlags flags;
      flags.setNoNaNs();
      flags.setNoSignedZeros();
      b_.setFastMathFlags(flags);
      Value* better = is_max ? b_.CreateFCmpOGT(v, a) : b_.CreateFCmpOLT(v, a);
      b_.CreateStore(b_.CreateSelect(better, v, a), acc);
    });
    reduce_vars_.clear();
    // The fast result is poison where a term was NaN (nnan): looked at only where none was.
    b_.CreateCondBr(b_.CreateLoad(b_.getInt1Ty(), nan), exact, check);
    b_.SetInsertPoint(check);
    Value* m = b_.CreateLoad(t, acc);
    b_.CreateCondBr(b_.CreateFCmpOEQ(m, ConstantFP::get(t, 0.0)), exact, take);
    b_.SetInsertPoint(take);
    b_.CreateStore(m, out);
    b_.CreateBr(done);
    b_.SetInsertPoint(exact);
    b_.CreateStore(emit_fold(r), out);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    return b_.CreateLoad(t, out);
  }

  /// Any reduction but a float sum, in order: acc = combine(acc, term), or argmax/argmin.
  Value* emit_fold(const Reduction& r) {
    const ReduceOp kind = r.op;
    const bool arg = kind == ReduceOp::Argmax || kind == ReduceOp::Argmin;
    KILN_ASSERT(r.value->dtype == r.dtype, "reduction dtype mismatch in " + k_.name);
    std::vector<Value*> ext = exprs(r.extents);
    Type* t = reg(r.dtype);
    AllocaInst* acc = local(t, "acc");
    AllocaInst* idx = local(i64(), "argidx");
    AllocaInst* count = local(i64(), "count");
    b_.CreateStore(reduction_init(kind, r.dtype), acc);
    b_.CreateStore(c64(0), idx);
    b_.CreateStore(c64(0), count);
    reduce_vars_.assign(ext.size(), nullptr);
    for_nest(ext, reduce_vars_, 0, [&] {
      Value* v = expr(r.value);
      Value* a = b_.CreateLoad(t, acc);
      if (!arg) {
        b_.CreateStore(combine(kind, r.dtype, a, v), acc);
        return;
      }
      Value* c = b_.CreateLoad(i64(), count);
      Value* take = arg_better(kind == ReduceOp::Argmax, r.dtype, a, v);
      b_.CreateStore(b_.CreateSelect(take, v, a), acc);
      b_.CreateStore(b_.CreateSelect(take, c, b_.CreateLoad(i64(), idx)), idx);
      b_.CreateStore(b_.CreateAdd(c, c64(1)), count);
    });
    reduce_vars_.clear();
    return arg ? b_.CreateLoad(i64(), idx) : b_.CreateLoad(t, acc);
  }

  // --- expressions -------------------------------------------------------------

  Value* expr(const ExprRef& e) {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(e.get()); it != s->end()) return it->second;
    Value* v = expr_uncached(*e);
    KILN_ASSERT(v->getType() == reg(e->dtype), "IR type mismatch in " + k_.name);
    scopes_.back()[e.get()] = v;
    return v;
  }

  Value* var(const std::vector<Value*>& vars, int index, const char* what) {
    KILN_ASSERT(index >= 0 && index < static_cast<int>(vars.size()) && vars[index],
                std::string(what) + " out of scope in " + k_.name);
    return vars[index];
  }

  Value* expr_uncached(const Expr& e) {
    if (keeping_ && &e == kept_term_) // the sum kept it
      return b_.CreateLoad(reg(e.dtype), kept_place(var(map_vars_, 0, "map var")));
    switch (e.kind) {
    case ExprKind::Const: return constant(e);
    case ExprKind::LoopVar: return var(loop_vars_, e.index, "loop var");
    case ExprKind::ReduceVar: return var(reduce_vars_, e.index, "reduce var");
    case ExprKind::MapVar: return var(map_vars_, e.index, "map var");
    case ExprKind::Param: return param(e);
    case ExprKind::Load: return load(e);
    case ExprKind::Op:
      if (auto v = run_values_.find(&e); v != run_values_.end()) return v->second; // the same along the run
      return op(e);
    case ExprKind::IntDiv:
      if (auto q = quotients_.find(&e); q != quotients_.end()) return q->second; // constant along the run
      return b_.CreateUDiv(expr(e.args[0]), expr(e.args[1]));
    case ExprKind::IntMod:
      if (auto q = quotients_.find(&e); q != quotients_.end()) // x - D (x / D): moves with the run
        return b_.CreateSub(expr(e.args[0]), b_.CreateMul(q->second, expr(e.args[1])));
      return b_.CreateURem(expr(e.args[0]), expr(e.args[1]));
    case ExprKind::ReduceResult: return var(results_, e.index, "reduction result");
    case ExprKind::Random: return random(e);
    case ExprKind::Check: return check(e);
    }
    KILN_ASSERT(false, "bad ExprKind");
    return nullptr;
  }

  /// The index, unchanged; outside [0, bound) the first failing point's {site + 1, index}
  /// goes to the error buffer (a compare-and-swap on its first element picks the first).
  /// Branch-free, so that the loops around it still vectorize: a failing index (unsigned
  /// compare: negative ones fail too) joins an unsigned-max accumulator of its Check,
  /// which is nonzero exactly when some point failed (bound >= 1); flush_checks()
  /// records it once per call.
  Value* check(const Expr& e) {
    Value* v = expr(e.args[0]);
    Value* wide = b_.CreateSExtOrTrunc(v, i64());
    Value* bad = b_.CreateICmpUGE(wide, expr(e.args[1]));
    AllocaInst* acc = checks_.at(&e);
    Value* worst = b_.CreateBinaryIntrinsic(Intrinsic::umax, b_.CreateLoad(i64(), acc), b_.CreateSelect(bad, wide, c64(0)));
    b_.CreateStore(worst, acc);
    return v;
  }

  /// One zeroed accumulator per Check expression of the kernel, in the entry block.
  void start_checks() {
    std::vector<const Expr*> todo;
    auto add = [&](const ExprRef& x) { todo.push_back(x.get()); };
    for (const ExprRef& x : k_.domain) add(x);
    for (const ExprRef& x : k_.map) add(x);
    for (const Reduction& r : k_.reductions) {
      for (const ExprRef& x : r.extents) add(x);
      add(r.value);
    }
    for (const Store& st : k_.stores) {
      add(st.offset);
      add(st.value);
    }
    if (const auto& sc = k_.scan)
      for (const ExprRef& x : {sc->steps, sc->value, sc->target, sc->positions})
        if (x) add(x);
    std::unordered_map<const Expr*, bool> seen;
    while (!todo.empty()) {
      const Expr* x = todo.back();
      todo.pop_back();
      if (!seen.emplace(x, true).second) continue;
      if (x->kind == ExprKind::Check) {
        checks_[x] = local(i64(), "check");
        check_order_.push_back(x);
        b_.CreateStore(c64(0), checks_[x]);
      }
      for (const ExprRef& a : x->args) add(a);
    }
  }

  /// After the domain: a failed Check records {site + 1, a failing index} in its error
  /// buffer unless a failure is recorded there already (compare-and-swap on element 0).
  void flush_checks() {
    for (const Expr* e : check_order_) {
      Value* worst = b_.CreateLoad(i64(), checks_.at(e));
      if_then(b_.CreateICmpNE(worst, c64(0)), [&] {
        Value* err = bufs_.at(e->index);
        Value* site = expr(e->args[2]);
        Value* swap = b_.CreateAtomicCmpXchg(err, c64(0), b_.CreateAdd(site, c64(1)), MaybeAlign(8),
                                             AtomicOrdering::Monotonic, AtomicOrdering::Monotonic);
        if_then(b_.CreateExtractValue(swap, 1), [&] {
          b_.CreateAlignedStore(worst, b_.CreateConstInBoundsGEP1_64(i64(), err, 1), MaybeAlign(8));
        });
      });
    }
  }

  /// An i64 parameter, or a scalar of another dtype from its slot (kernel_ir.h, scalar_param_bits()).
  Value* param(const Expr& e) {
    KILN_ASSERT(e.index >= 0 && e.index < k_.num_params, "param out of range in " + k_.name);
    Value* slot = b_.CreateLoad(i64(), b_.CreateConstInBoundsGEP1_64(i64(), params_, e.index));
    KILN_ASSERT(e.dtype != DType::Bool, "a bool parameter in " + k_.name);
    if (e.dtype == DType::Int64) return slot;
    if (e.dtype == DType::Int32) return b_.CreateTrunc(slot, reg(e.dtype));
    if (e.dtype == DType::Float64) return b_.CreateBitCast(slot, reg(e.dtype));
    return b_.CreateBitCast(b_.CreateTrunc(slot, b_.getInt32Ty()), reg(e.dtype));
  }

  Value* constant(const Expr& e) {
    if (is_floating(e.dtype)) return ConstantFP::get(reg(e.dtype), e.f);
    return ConstantInt::get(reg(e.dtype), static_cast<uint64_t>(e.i), true);
  }

  /// A load; with a guard, element 0 is loaded where the guard is false (always
  /// allocated) and the result replaced by 0, so the access is memory-safe.
  Value* load(const Expr& e) {
    KILN_ASSERT(e.index >= 0 && e.index < static_cast<int>(k_.buffers.size()), "bad buffer in " + k_.name);
    KILN_ASSERT(k_.buffers[e.index].dtype == e.dtype, "load dtype mismatch in " + k_.name);
    Value* off = expr(e.args[0]);
    Value* guard = e.args.size() > 1 ? expr(e.args[1]) : nullptr;
    if (guard) off = b_.CreateSelect(guard, off, c64(0));
    Type* mt = mem_type(ctx_, e.dtype);
    Value* v = b_.CreateLoad(mt, b_.CreateInBoundsGEP(mt, bufs_[e.index], off));
    if (e.dtype == DType::Bool) v = b_.CreateICmpNE(v, b_.getInt8(0));
    return guard ? b_.CreateSelect(guard, v, Constant::getNullValue(reg(e.dtype))) : v;
  }

  /// One switch over every op, so a new op is a compile error here.
  Value* op(const Expr& e) {
    const DType in = e.args.at(0)->dtype;
    auto a = [&](int i) { return expr(e.args.at(i)); };
    switch (e.op) {
    case ScalarOp::Neg: return neg(a(0), in);
    case ScalarOp::Abs: return abs(a(0), in);
    case ScalarOp::Exp: return math(MathFn::Exp, a(0), in);
    case ScalarOp::Expm1: return math(MathFn::Expm1, a(0), in);
    case ScalarOp::Log: return math(MathFn::Log, a(0), in);
    case ScalarOp::Log1p: return math(MathFn::Log1p, a(0), in);
    case ScalarOp::Sin: return math(MathFn::Sin, a(0), in);
    case ScalarOp::Cos: return math(MathFn::Cos, a(0), in);
    case ScalarOp::Tanh: return math(MathFn::Tanh, a(0), in);
    case ScalarOp::Sqrt: return sqrt(a(0), in);
    case ScalarOp::Rsqrt: return recip(sqrt(a(0), in), in);
    case ScalarOp::Sigmoid: return math(MathFn::Sigmoid, a(0), in);
    case ScalarOp::Erf: return math(MathFn::Erf, a(0), in);
    case ScalarOp::Tan: return math(MathFn::Tan, a(0), in);
    case ScalarOp::Atan: return math(MathFn::Atan, a(0), in);
    case ScalarOp::Asin: return math(MathFn::Asin, a(0), in);
    case ScalarOp::Acos: return math(MathFn::Acos, a(0), in);
    case ScalarOp::Sinh: return math(MathFn::Sinh, a(0), in);
    case ScalarOp::Cosh: return math(MathFn::Cosh, a(0), in);
    case ScalarOp::Asinh: return math(MathFn::Asinh, a(0), in);
    case ScalarOp::Acosh: return math(MathFn::Acosh, a(0), in);
    case ScalarOp::Atanh: return math(MathFn::Atanh, a(0), in);
    case ScalarOp::Log2: return math(MathFn::Log2, a(0), in);
    case ScalarOp::Log10: return math(MathFn::Log10, a(0), in);
    case ScalarOp::Exp2: return math(MathFn::Exp2, a(0), in);
    case ScalarOp::Floor: return rounding(Intrinsic::floor, a(0), in, "floor");
    case ScalarOp::Ceil: return rounding(Intrinsic::ceil, a(0), in, "ceil");
    case ScalarOp::Round: return rounding(Intrinsic::roundeven, a(0), in, "round");
    case ScalarOp::Trunc: return rounding(Intrinsic::trunc, a(0), in, "trunc");
    case ScalarOp::Reciprocal: return recip(a(0), in);
    case ScalarOp::Relu: return relu(a(0), in);
    case ScalarOp::LogicalNot: return b_.CreateNot(to_bool(a(0), in));
    case ScalarOp::Cast: return cast(a(0), in, e.dtype);
    case ScalarOp::Add: return arith(Instruction::FAdd, Instruction::Add, Instruction::Or, a(0), a(1), in);
    case ScalarOp::Sub: return arith(Instruction::FSub, Instruction::Sub, Instruction::BinaryOpsEnd, a(0), a(1), in);
    case ScalarOp::Mul: return arith(Instruction::FMul, Instruction::Mul, Instruction::And, a(0), a(1), in);
    case ScalarOp::Div:
      require_float(in, "div");
      return b_.CreateFDiv(a(0), a(1));
    case ScalarOp::Pow: return pow(a(0), a(1), in);
    case ScalarOp::Atan2: require_float(in, "atan2"); return emit_math(b_, MathFn2::Atan2, a(0), a(1));
    case ScalarOp::Fmod: require_float(in, "fmod"); return b_.CreateFRem(a(0), a(1));
    case ScalarOp::Remainder: return remainder(a(0), a(1), in);
    case ScalarOp::Maximum: return max_min(true, in, a(0), a(1));
    case ScalarOp::Minimum: return max_min(false, in, a(0), a(1));
    case ScalarOp::Eq: return compare(CmpInst::FCMP_OEQ, CmpInst::ICMP_EQ, CmpInst::ICMP_EQ, a(0), a(1), in);
    case ScalarOp::Ne: return compare(CmpInst::FCMP_UNE, CmpInst::ICMP_NE, CmpInst::ICMP_NE, a(0), a(1), in);
    case ScalarOp::Lt: return compare(CmpInst::FCMP_OLT, CmpInst::ICMP_SLT, CmpInst::ICMP_ULT, a(0), a(1), in);
    case ScalarOp::Le: return compare(CmpInst::FCMP_OLE, CmpInst::ICMP_SLE, CmpInst::ICMP_ULE, a(0), a(1), in);
    case ScalarOp::Gt: return compare(CmpInst::FCMP_OGT, CmpInst::ICMP_SGT, CmpInst::ICMP_UGT, a(0), a(1), in);
    case ScalarOp::Ge: return compare(CmpInst::FCMP_OGE, CmpInst::ICMP_SGE, CmpInst::ICMP_UGE, a(0), a(1), in);
    case ScalarOp::LogicalAnd: return b_.CreateAnd(to_bool(a(0), in), to_bool(a(1), e.args[1]->dtype));
    case ScalarOp::LogicalOr: return b_.CreateOr(to_bool(a(0), in), to_bool(a(1), e.args[1]->dtype));
    case ScalarOp::Where: return b_.CreateSelect(to_bool(a(0), in), a(1), a(2));
    }
    KILN_ASSERT(false, "bad ScalarOp " + std::to_string(static_cast<int>(e.op)) + " in " + k_.name);
    return nullptr;
  }

  void require_float(DType t, const char* what) {
    KILN_ASSERT(is_floating(t), std::string(what) + " on " + std::string(dtype_name(t)) + " in " + k_.name);
  }

  Value* math(MathFn fn, Value* x, DType t) {
    require_float(t, "math function");
    return emit_math(b_, fn, x);
  }

  Value* fconst(DType t, double v) { return ConstantFP::get(reg(t), v); }

  /// PyTorch's remainder: m = fmod(x, y) (frem: exact, C's fmod), m + y where m != 0 and the signs of m and
  /// y differ.
  Value* remainder(Value* x, Value* y, DType t) {
    require_float(t, "remainder");
    Value* m = b_.CreateFRem(x, y);
    Value* zero = fconst(t, 0);
    Value* differ = b_.CreateXor(b_.CreateFCmpOLT(y, zero), b_.CreateFCmpOLT(m, zero));
    return b_.CreateSelect(b_.CreateAnd(b_.CreateFCmpUNE(m, zero), differ), b_.CreateFAdd(m, y), m);
  }

  Value* neg(Value* x, DType t) {
    KILN_ASSERT(t != DType::Bool, "neg on bool in " + k_.name);
    return is_floating(t) ? b_.CreateFNeg(x) : b_.CreateNeg(x); // ints wrap (no nsw)
  }

  Value* abs(Value* x, DType t) {
    if (t == DType::Bool) return x;
    if (is_floating(t)) return b_.CreateUnaryIntrinsic(Intrinsic::fabs, x);
    return b_.CreateBinaryIntrinsic(Intrinsic::abs, x, b_.getFalse()); // abs(INT_MIN) wraps to INT_MIN
  }

  /// floor, ceil or roundeven: exact, vectorizable intrinsics (no rounding-mode dependence).
  Value* rounding(Intrinsic::ID id, Value* x, DType t, const char* name) {
    require_float(t, name);
    return b_.CreateUnaryIntrinsic(id, x);
  }

  Value* sqrt(Value* x, DType t) {
    require_float(t, "sqrt");
    return b_.CreateUnaryIntrinsic(Intrinsic::sqrt, x);
  }

  Value* recip(Value* x, DType t) {
    require_float(t, "reciprocal");
    return b_.CreateFDiv(fconst(t, 1), x);
  }

  /// max(x, 0), keeping NaN (NaN < 0 is false).
  Value* relu(Value* x, DType t) {
    if (t == DType::Bool) return x;
    Value* zero = Constant::getNullValue(x->getType());
    if (is_floating(t)) return b_.CreateSelect(b_.CreateFCmpOLT(x, zero), zero, x);
    return b_.CreateBinaryIntrinsic(Intrinsic::smax, x, zero);
  }

  /// x != 0 (NaN is true).
  Value* to_bool(Value* x, DType from) {
    if (from == DType::Bool) return x;
    Value* zero = Constant::getNullValue(x->getType());
    return is_floating(from) ? b_.CreateFCmpUNE(x, zero) : b_.CreateICmpNE(x, zero);
  }

  Value* arith(Instruction::BinaryOps fop, Instruction::BinaryOps iop, Instruction::BinaryOps bop,
               Value* x, Value* y, DType t) {
    if (is_floating(t)) return b_.CreateBinOp(fop, x, y);
    if (t != DType::Bool) return b_.CreateBinOp(iop, x, y); // wraps: no nsw/nuw
    KILN_ASSERT(bop != Instruction::BinaryOpsEnd, "arithmetic on bool in " + k_.name);
    return b_.CreateBinOp(bop, x, y);
  }

  /// NaN-propagating maximum/minimum (llvm.maximum orders -0 < +0).
  Value* max_min(bool is_max, DType t, Value* x, Value* y) {
    if (is_floating(t)) return b_.CreateBinaryIntrinsic(is_max ? Intrinsic::maximum : Intrinsic::minimum, x, y);
    if (t == DType::Bool) return is_max ? b_.CreateOr(x, y) : b_.CreateAnd(x, y);
    return b_.CreateBinaryIntrinsic(is_max ? Intrinsic::smax : Intrinsic::smin, x, y);
  }

  Value* compare(CmpInst::Predicate fp, CmpInst::Predicate sp, CmpInst::Predicate up, Value* x, Value* y,
                 DType t) {
    if (is_floating(t)) return b_.CreateFCmp(fp, x, y);
    return b_.CreateICmp(t == DType::Bool ? up : sp, x, y);
  }

  Value* cast(Value* x, DType from, DType to) {
    if (from == to) return x;
    if (to == DType::Bool) return to_bool(x, from);
    Type* tt = reg(to);
    if (from == DType::Bool) return is_floating(to) ? b_.CreateUIToFP(x, tt) : b_.CreateZExt(x, tt);
    if (is_floating(from) && is_floating(to)) return b_.CreateFPCast(x, tt);
    if (is_floating(from)) // saturating, NaN -> 0
      return b_.CreateIntrinsic(Intrinsic::fptosi_sat, {tt, x->getType()}, {x});
    if (is_floating(to)) return b_.CreateSIToFP(x, tt);
    return b_.CreateSExtOrTrunc(x, tt);
  }

  /// Float pow is C's pow (llvm.pow on f64, so f32 is rounded once from a
  /// near-correctly-rounded double). It is a libm call: the loop is scalarized but
  /// every lane computes the same function. Integer pow: exact repeated squaring.
  Value* pow(Value* x, Value* y, DType t) {
    KILN_ASSERT(t != DType::Bool, "pow on bool in " + k_.name);
    if (!is_floating(t)) return ipow(x, y);
    Type* d = b_.getDoubleTy();
    Value* r = b_.CreateBinaryIntrinsic(Intrinsic::pow, b_.CreateFPExt(x, d), b_.CreateFPExt(y, d));
    return b_.CreateFPTrunc(r, reg(t));
  }

  /// x^e on wrapping integers, branch-free (one squaring per exponent bit). For
  /// e < 0 the result is 1 for x = 1, +-1 for x = -1 (by parity), else 0.
  Value* ipow(Value* x, Value* e) {
    auto* t = cast_int(x->getType());
    const unsigned w = t->getBitWidth();
    Value* one = ConstantInt::get(t, 1);
    Value* r = one;
    Value* base = x;
    for (unsigned bit = 0; bit + 1 < w; ++bit) {
      Value* set = b_.CreateTrunc(b_.CreateLShr(e, bit), b_.getInt1Ty());
      r = b_.CreateSelect(set, b_.CreateMul(r, base), r);
      if (bit + 2 < w) base = b_.CreateMul(base, base);
    }
    Value* minus_one = ConstantInt::get(t, -1, true);
    Value* odd = b_.CreateTrunc(e, b_.getInt1Ty());
    Value* of_minus_one = b_.CreateSelect(odd, minus_one, one);
    Value* neg = b_.CreateSelect(b_.CreateICmpEQ(x, one), one,
                                 b_.CreateSelect(b_.CreateICmpEQ(x, minus_one), of_minus_one,
                                                 ConstantInt::get(t, 0)));
    return b_.CreateSelect(b_.CreateICmpSLT(e, ConstantInt::get(t, 0)), neg, r);
  }

  static IntegerType* cast_int(Type* t) { return llvm::cast<IntegerType>(t); }

  /// rand/randn (graph/random.h), built by math_body.h's generator.
  Value* random(const Expr& e) {
    require_float(e.dtype, "random");
    Value* seed = expr(e.args.at(1));
    Value* counter = expr(e.args.at(0));
    return emit_random(b_, e.dist == RandomDist::Normal, reg(e.dtype), seed, counter);
  }
};

} // namespace

Value* emit_fmuladd(IRBuilder<>& b, Value* a, Value* x, Value* acc) {
  IRBuilder<>::FastMathFlagGuard guard(b);
  FastMathFlags f;
  f.setAllowContract(true);
  b.setFastMathFlags(f);
  return b.CreateIntrinsic(Intrinsic::fmuladd, {acc->getType()}, {a, x, acc});
}

void emit_for(IRBuilder<>& b, AllocaInst* iv, Value* start, Value* end, int64_t step,
              const std::function<void(Value*)>& body, LoopHint hint) {
  LLVMContext& ctx = b.getContext();
  Function* fn = b.GetInsertBlock()->getParent();
  b.CreateStore(start, iv);
  BasicBlock* cond = BasicBlock::Create(ctx, "cond", fn);
  BasicBlock* loop = BasicBlock::Create(ctx, "loop", fn);
  BasicBlock* exit = BasicBlock::Create(ctx, "exit", fn);
  b.CreateBr(cond);
  b.SetInsertPoint(cond);
  Value* v = b.CreateLoad(b.getInt64Ty(), iv);
  b.CreateCondBr(b.CreateICmpSLT(v, end), loop, exit);
  b.SetInsertPoint(loop);
  body(v);
  b.CreateStore(b.CreateAdd(v, b.getInt64(step), "", true, true), iv);
  BranchInst* back = b.CreateBr(cond);
  if (hint != LoopHint::None) {
    // MaskedTail: vectorize with the tail folded into masked iterations (AVX-512 masks), so
    // that a loop shorter than one vector (a row of 14 points) still runs as vectors.
    const bool masked = hint == LoopHint::MaskedTail;
    Metadata* property[] = {MDString::get(ctx, masked ? "llvm.loop.vectorize.predicate.enable" : "llvm.loop.unroll.disable"),
                            ConstantAsMetadata::get(b.getTrue())};
    const ArrayRef<Metadata*> operands(property, masked ? 2 : 1); // unroll.disable takes no value
    MDNode* self = MDNode::getDistinct(ctx, {nullptr, MDNode::get(ctx, operands)});
    self->replaceOperandWith(0, self);
    back->setMetadata(LLVMContext::MD_loop, self);
  }
  b.SetInsertPoint(exit);
}

std::unique_ptr<Module> emit_kernel_module(const Kernel& k, LLVMContext& ctx) {
  KILN_ASSERT(!k.name.empty(), "kernel not finalize()d");
  auto mod = std::make_unique<Module>(k.name, ctx);
  Emitter(k, *mod).emit();
  return mod;
}

} // namespace kiln::codegen

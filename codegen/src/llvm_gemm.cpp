// The CPU GEMM of a matmul kernel in the GEMM form (see kernel_ir.h, GemmTiling).
//
// One task computes a block of at most mc x nc outputs (blocks balanced in size) over
// all of k:
//   for each k block of kc (in order):
//     pack the a block: mr-row panels, Ap[panel][kk][p], rows past M zero - unless a
//       is a strided view contiguous in k (a row-major left operand), which the
//       microkernel then reads in place, row by row;
//     for each nr-column panel of the block:
//       pack the b panel: Bp[kk][q], columns past N zero (stays in L1);
//       for each a panel: the microkernel - an mr x nr tile of accumulators in vector
//         registers (explicit <V x T> vectors, V the host's vector width), one
//         fmuladd(splat(a), b, acc) per k step; the tile starts at 0 on the first k
//         block, otherwise from the scratch copy, and goes back to scratch after each
//         k block except the last, where the kernel's stores (the fused epilogue) run
//         for the tile's elements inside the output.
// A full b panel of a b contiguous in k (a transposed view, as in x @ W^T) is packed
// by vector loads down its columns and a register transpose.
// The packing loops read the operands through the kernel's own index expressions, so
// transposed, sliced, broadcast and batched views need no copy beforehand.
// Every output element thus accumulates fmuladd(a, b, acc) over k in order from 0,
// exactly like the kernel without the GEMM form: tiling, task split and thread count
// never change a result.
#include "codegen/src/llvm_gemm.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <optional>

#include <llvm/IR/Intrinsics.h>
#include <llvm/TargetParser/Host.h>

#include "codegen/gemm.h"
#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {
std::mutex tiling_mutex;
std::optional<GemmTiling> tiling_override; // tests: set_gemm_tiling_override()
} // namespace

void set_gemm_tiling_override(std::optional<GemmTiling> tiling) {
  std::lock_guard lock(tiling_mutex);
  tiling_override = tiling;
}

GemmTiling host_gemm_tiling(DType dtype) {
  {
    std::lock_guard lock(tiling_mutex);
    if (tiling_override) {
      GemmTiling g = *tiling_override;
      g.m_var = g.n_var = -1;
      return g;
    }
  }
  static const auto features = sys::getHostCPUFeatures();
  auto has = [](const char* f) {
    auto it = features.find(f);
    return it != features.end() && it->second;
  };
  const bool avx512 = has("avx512f");
  const int64_t vector_bytes = avx512 ? 64 : has("avx") ? 32 : 16;
  const int64_t elem = dtype == DType::Float64 ? 8 : 4;
  GemmTiling g;
  g.nr = 2 * vector_bytes / elem;  // two vectors of columns
  g.mr = avx512 ? 12 : 6;          // 24 (of 32) or 12 (of 16) vector accumulators
  g.mc = 384;                      // b is read from memory once per mc rows
  g.nc = 2048 / elem;              // 512 f32 or 256 f64 columns
  g.kc = 256;                      // a b panel of kc x nr: 32 KiB (AVX-512), in L1
  return g;
}

namespace {

class GemmEmitter {
public:
  GemmEmitter(const Kernel& k, GemmHost& host) : k_(k), g_(*k.gemm), h_(host), b_(host.builder()), ctx_(b_.getContext()) {
    const Reduction& r = k.reductions.at(0);
    KILN_ASSERT(k.reductions.size() == 1 && k.map.empty() && r.op == graph::OpKind::Sum && is_floating(r.dtype) &&
                    r.value->kind == ExprKind::Op && r.value->op == graph::OpKind::Mul && r.value->args.size() == 2 &&
                    r.extents.size() == 1,
                "not a GEMM-form kernel: " + k.name);
    KILN_ASSERT(g_.mr > 0 && g_.nr > 0 && g_.mc % g_.mr == 0 && g_.nc % g_.nr == 0 && g_.kc > 0,
                "bad GEMM tiling in " + k.name);
    t_ = r.dtype == DType::Float64 ? Type::getDoubleTy(ctx_) : Type::getFloatTy(ctx_);
    elem_ = r.dtype == DType::Float64 ? 8 : 4;
    vlen_ = std::min<int64_t>(g_.nr, 64 / elem_); // at most 64 bytes a vector
    while (g_.nr % vlen_ != 0) vlen_ /= 2;
    vt_ = FixedVectorType::get(t_, static_cast<unsigned>(vlen_));
    a_ = r.value->args[0];
    b_expr_ = r.value->args[1];
    affine_a_ = a_->kind == ExprKind::Load && a_->args.size() == 1 && affine(a_->args[0]);
    affine_b_ = b_expr_->kind == ExprKind::Load && b_expr_->args.size() == 1 && affine(b_expr_->args[0]);
  }

  void emit(Value* begin, Value* end, Value* scratch) {
    // Sizes, evaluated once (the entry scope).
    const size_t rank = k_.domain.size();
    std::vector<Value*> ext;
    for (const ExprRef& e : k_.domain) ext.push_back(h_.eval(e));
    m_ = g_.m_var >= 0 ? ext.at(g_.m_var) : c64(1);
    n_ = g_.n_var >= 0 ? ext.at(g_.n_var) : c64(1);
    kk_ = h_.eval(k_.reductions[0].extents[0]);
    for (size_t d = 0; d < rank; ++d)
      if (static_cast<int>(d) != g_.m_var && static_cast<int>(d) != g_.n_var) batch_vars_.push_back(static_cast<int>(d));
    // Blocks of at most mc rows and nc columns, balanced: rows_ rows a block (a multiple
    // of mr), the last block shorter; likewise columns.
    Value* row_blocks = ceil_div(m_, g_.mc);
    Value* col_blocks = ceil_div(n_, g_.nc);
    rows_ = mul(ceil_div(b_.CreateUDiv(b_.CreateAdd(m_, b_.CreateSub(row_blocks, c64(1))), row_blocks), g_.mr), g_.mr);
    cols_ = mul(ceil_div(b_.CreateUDiv(b_.CreateAdd(n_, b_.CreateSub(col_blocks, c64(1))), col_blocks), g_.nr), g_.nr);
    // Scratch: Ap (mc x kc), Bp (kc x nr), Cs (mc x nc, by tiles), the epilogue tile (mr x nr).
    // Each region starts 64-byte aligned (the vector loads and stores are aligned);
    // gemm_scratch_bytes() leaves room for the rounding.
    auto aligned = [&](int64_t elems) { return c64((elems + 64 / elem_ - 1) / (64 / elem_) * (64 / elem_)); };
    ap_ = scratch;
    bp_ = gep(ap_, aligned(g_.mc * g_.kc));
    cs_ = gep(bp_, aligned(g_.kc * g_.nr));
    tile_ = gep(cs_, aligned(g_.mc * g_.nc));
    for_range(begin, end, [&](Value* t) {
      Value* cb = b_.CreateURem(t, col_blocks);
      Value* rest = b_.CreateUDiv(t, col_blocks);
      Value* rb = b_.CreateURem(rest, row_blocks);
      Value* bt = b_.CreateUDiv(rest, row_blocks);
      h_.push_scope();
      for (size_t i = batch_vars_.size(); i-- > 0;) {
        const int d = batch_vars_[i];
        h_.set_loop_var(d, i == 0 ? bt : b_.CreateURem(bt, ext[d]));
        if (i > 0) bt = b_.CreateUDiv(bt, ext[d]);
      }
      direct_ = b_.getFalse();
      if (affine_a_) bind_direct_a();
      if (affine_b_) bind_b();
      emit_task(b_.CreateMul(rb, rows_), b_.CreateMul(cb, cols_));
      h_.pop_scope();
    });
  }

private:
  const Kernel& k_;
  const GemmTiling& g_;
  GemmHost& h_;
  IRBuilder<>& b_;
  LLVMContext& ctx_;
  Type* t_ = nullptr;
  FixedVectorType* vt_ = nullptr;
  int64_t elem_ = 4, vlen_ = 16;
  ExprRef a_, b_expr_;
  Value *m_ = nullptr, *n_ = nullptr, *kk_ = nullptr, *rows_ = nullptr, *cols_ = nullptr;
  Value* a_base_ = nullptr; // a's element (row 0, k 0) at the current batch point
  bool affine_a_ = false;    // a is a strided view of a buffer
  bool affine_b_ = false;    // b is a strided view of a buffer
  Value *b_base_ = nullptr, *b_col_stride_ = nullptr; // b's element (k 0, column 0); column stride
  Value* b_by_columns_ = nullptr; // (per batch point) b is contiguous in k, not in columns
  Value* direct_ = nullptr;  // (per batch point) a is contiguous in k: read in place, not packed
  Value *a_row_stride_ = nullptr, *a_k_stride_ = nullptr;
  Value *ap_ = nullptr, *bp_ = nullptr, *cs_ = nullptr, *tile_ = nullptr;
  std::vector<int> batch_vars_;

  Type* i64() { return b_.getInt64Ty(); }
  Value* c64(int64_t v) { return b_.getInt64(v); }
  Value* gep(Value* p, Value* i) { return b_.CreateInBoundsGEP(t_, p, i); }
  Value* add(Value* a, Value* b) { return b_.CreateAdd(a, b, "", true, true); }
  Value* mul(Value* a, int64_t c) { return b_.CreateMul(a, c64(c), "", true, true); }
  Value* smin(Value* a, Value* b) { return b_.CreateBinaryIntrinsic(Intrinsic::smin, a, b); }
  Value* smax(Value* a, Value* b) { return b_.CreateBinaryIntrinsic(Intrinsic::smax, a, b); }
  Value* ceil_div(Value* a, int64_t c) { return b_.CreateUDiv(b_.CreateAdd(a, c64(c - 1)), c64(c)); }
  Function* fn() { return b_.GetInsertBlock()->getParent(); }

  /// for (v = start; v < end; v += step) body(v).
  void for_range(Value* start, Value* end, const std::function<void(Value*)>& body, int64_t step = 1) {
    AllocaInst* iv = h_.entry_alloca(i64(), "g.iv");
    b_.CreateStore(start, iv);
    BasicBlock* cond = BasicBlock::Create(ctx_, "g.cond", fn());
    BasicBlock* loop = BasicBlock::Create(ctx_, "g.loop", fn());
    BasicBlock* exit = BasicBlock::Create(ctx_, "g.exit", fn());
    b_.CreateBr(cond);
    b_.SetInsertPoint(cond);
    Value* v = b_.CreateLoad(i64(), iv);
    b_.CreateCondBr(b_.CreateICmpSLT(v, end), loop, exit);
    b_.SetInsertPoint(loop);
    h_.push_scope();
    body(v);
    h_.pop_scope();
    b_.CreateStore(b_.CreateAdd(v, c64(step), "", true, true), iv);
    b_.CreateBr(cond);
    b_.SetInsertPoint(exit);
  }

  /// if (cond) then() else otherwise().
  void if_else(Value* cond, const std::function<void()>& then, const std::function<void()>& otherwise) {
    BasicBlock* t = BasicBlock::Create(ctx_, "g.then", fn());
    BasicBlock* e = BasicBlock::Create(ctx_, "g.else", fn());
    BasicBlock* join = BasicBlock::Create(ctx_, "g.endif", fn());
    b_.CreateCondBr(cond, t, e);
    b_.SetInsertPoint(t);
    h_.push_scope();
    then();
    h_.pop_scope();
    b_.CreateBr(join);
    b_.SetInsertPoint(e);
    h_.push_scope();
    otherwise();
    h_.pop_scope();
    b_.CreateBr(join);
    b_.SetInsertPoint(join);
  }

  Value* fmuladd(Value* a, Value* b, Value* acc) {
    IRBuilder<>::FastMathFlagGuard guard(b_);
    FastMathFlags f;
    f.setAllowContract(true);
    b_.setFastMathFlags(f);
    return b_.CreateIntrinsic(Intrinsic::fmuladd, {acc->getType()}, {a, b, acc});
  }

  /// True when e does not depend on any variable or memory.
  static bool var_free(const ExprRef& e) {
    switch (e->kind) {
    case ExprKind::Const:
    case ExprKind::Param: return true;
    case ExprKind::Op:
    case ExprKind::IntDiv:
    case ExprKind::IntMod:
      for (const ExprRef& x : e->args)
        if (!var_free(x)) return false;
      return true;
    case ExprKind::LoopVar: case ExprKind::ReduceVar: case ExprKind::MapVar: case ExprKind::Load:
    case ExprKind::ReduceResult: case ExprKind::Random:
      return false;
    }
    return false;
  }

  /// True when the i64 expression e is affine in the loop and reduction vars (so that
  /// its strides are the same everywhere).
  static bool affine(const ExprRef& e) {
    if (var_free(e)) return true;
    switch (e->kind) {
    case ExprKind::LoopVar:
    case ExprKind::ReduceVar: return true;
    case ExprKind::Op:
      if (e->dtype != DType::Int64) return false;
      if (e->op == graph::OpKind::Add || e->op == graph::OpKind::Sub) return affine(e->args[0]) && affine(e->args[1]);
      if (e->op == graph::OpKind::Mul)
        return (var_free(e->args[0]) && affine(e->args[1])) || (affine(e->args[0]) && var_free(e->args[1]));
      return false;
    default: return false;
    }
  }

  /// a's offset at row m, k (at the current batch point).
  Value* a_offset(Value* m, Value* k) {
    h_.push_scope();
    if (g_.m_var >= 0) h_.set_loop_var(g_.m_var, m);
    h_.set_reduce_var(k);
    Value* v = h_.eval(a_->args[0]);
    h_.set_reduce_var(nullptr);
    if (g_.m_var >= 0) h_.set_loop_var(g_.m_var, nullptr);
    h_.pop_scope();
    return v;
  }

  /// a is a strided view of a buffer: its base and strides at the current batch point.
  void bind_direct_a() {
    Value* o = a_offset(c64(0), c64(0));
    a_row_stride_ = b_.CreateSub(a_offset(c64(1), c64(0)), o);
    a_k_stride_ = b_.CreateSub(a_offset(c64(0), c64(1)), o);
    a_base_ = gep(h_.buffer(a_->index), o);
    direct_ = b_.CreateICmpEQ(a_k_stride_, c64(1));
  }

  /// b's offset at k, column n (at the current batch point).
  Value* b_offset(Value* k, Value* n) {
    h_.push_scope();
    if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, n);
    h_.set_reduce_var(k);
    Value* v = h_.eval(b_expr_->args[0]);
    h_.set_reduce_var(nullptr);
    if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, nullptr);
    h_.pop_scope();
    return v;
  }

  /// b is a strided view of a buffer: its base, column stride and layout at the current batch point.
  void bind_b() {
    Value* o = b_offset(c64(0), c64(0));
    Value* k_stride = b_.CreateSub(b_offset(c64(1), c64(0)), o);
    b_col_stride_ = b_.CreateSub(b_offset(c64(0), c64(1)), o);
    b_base_ = gep(h_.buffer(b_expr_->index), o);
    b_by_columns_ = b_.CreateAnd(b_.CreateICmpEQ(k_stride, c64(1)), b_.CreateICmpNE(b_col_stride_, c64(1)));
  }

  /// vlen x vlen transpose by bit swaps: stage h exchanges, between rows i and i + h
  /// (i without bit h), the elements whose row and column bits h differ.
  std::vector<Value*> transpose(std::vector<Value*> v) {
    const int L = static_cast<int>(vlen_);
    for (int h = 1; h < L; h *= 2)
      for (int i = 0; i < L; ++i) {
        if (i & h) continue;
        std::vector<int> lo(L), hi(L);
        for (int c = 0; c < L; ++c) {
          lo[c] = (c & h) ? L + (c ^ h) : c;
          hi[c] = (c & h) ? L + c : (c ^ h);
        }
        Value* a = b_.CreateShuffleVector(v[i], v[i + h], lo);
        Value* b = b_.CreateShuffleVector(v[i], v[i + h], hi);
        v[i] = a;
        v[i + h] = b;
      }
    return v;
  }

  /// A full b panel of a b contiguous in k (a transposed view): vlen x vlen blocks read
  /// down the columns with vector loads and transposed in registers; the k rows past
  /// the last whole block one element at a time.
  void pack_b_by_columns(Value* c0, Value* k0, Value* kcur) {
    Value* whole = mul(b_.CreateUDiv(kcur, c64(vlen_)), vlen_);
    for_range(c64(0), whole, [&](Value* kk0) {
      for (int64_t qb = 0; qb < g_.nr; qb += vlen_) {
        std::vector<Value*> cols;
        for (int64_t q = 0; q < vlen_; ++q) {
          Value* col = gep(b_base_, b_.CreateAdd(b_.CreateMul(add(c0, c64(qb + q)), b_col_stride_), add(k0, kk0)));
          cols.push_back(b_.CreateAlignedLoad(vt_, col, Align(static_cast<uint64_t>(elem_))));
        }
        std::vector<Value*> rows = transpose(cols);
        for (int64_t r = 0; r < vlen_; ++r)
          b_.CreateAlignedStore(rows[r], gep(bp_, add(mul(add(kk0, c64(r)), g_.nr), c64(qb))),
                                Align(static_cast<uint64_t>(vlen_ * elem_)));
      }
    }, vlen_);
    for_range(whole, kcur, [&](Value* kk) {
      h_.set_reduce_var(add(k0, kk));
      Value* row = gep(bp_, mul(kk, g_.nr));
      for_range(c64(0), c64(g_.nr), [&](Value* q) {
        if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, add(c0, q));
        b_.CreateStore(h_.eval(b_expr_), gep(row, q));
        if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, nullptr);
      });
      h_.set_reduce_var(nullptr);
    });
  }

  /// The output block at rows i0, cols j0 of the current batch point.
  void emit_task(Value* i0, Value* j0) {
    Value* mcur = smin(rows_, b_.CreateSub(m_, i0));
    Value* ncur = smin(cols_, b_.CreateSub(n_, j0));
    Value* mpanels = ceil_div(mcur, g_.mr);
    Value* npanels = ceil_div(ncur, g_.nr);
    // At least one k block, so that K = 0 still runs the stores (of 0).
    Value* kblocks = smax(c64(1), ceil_div(kk_, g_.kc));
    for_range(c64(0), kblocks, [&](Value* kb) {
      Value* k0 = mul(kb, g_.kc);
      Value* kcur = smax(c64(0), smin(c64(g_.kc), b_.CreateSub(kk_, k0)));
      Value* first = b_.CreateICmpEQ(kb, c64(0));
      Value* last = b_.CreateICmpEQ(kb, b_.CreateSub(kblocks, c64(1)));
      if_else(direct_, [] {}, [&] {
        for_range(c64(0), mpanels, [&](Value* ip) {
          Value* r0 = add(i0, mul(ip, g_.mr));
          pack_a(gep(ap_, mul(ip, g_.mr * g_.kc)), r0, smin(c64(g_.mr), b_.CreateSub(m_, r0)), k0, kcur);
        });
      });
      for_range(c64(0), npanels, [&](Value* jp) {
        Value* c0 = add(j0, mul(jp, g_.nr));
        Value* nvalid = smin(c64(g_.nr), b_.CreateSub(n_, c0));
        if (affine_b_)
          if_else(b_.CreateAnd(b_by_columns_, b_.CreateICmpEQ(nvalid, c64(g_.nr))), [&] { pack_b_by_columns(c0, k0, kcur); },
                  [&] { pack_b(c0, nvalid, k0, kcur); });
        else
          pack_b(c0, nvalid, k0, kcur);
        for_range(c64(0), mpanels, [&](Value* ip) {
          Value* r0 = add(i0, mul(ip, g_.mr));
          Value* mvalid = smin(c64(g_.mr), b_.CreateSub(m_, r0));
          Value* cs = gep(cs_, mul(add(mul(ip, g_.nc / g_.nr), jp), g_.mr * g_.nr));
          microkernel(ip, k0, kcur, cs, first, last, r0, mvalid, c0, nvalid);
        });
      });
    });
  }

  /// Ap[kk][p] = a(row r0 + p, k0 + kk) for p < rows, 0 for rows <= p < mr. (Loops of a
  /// variable trip count throughout: constant-count copies vectorize no better here and
  /// double the compile time.)
  void pack_a(Value* dst, Value* r0, Value* rows, Value* k0, Value* kcur) {
    for_range(c64(0), kcur, [&](Value* kk) {
      h_.set_reduce_var(add(k0, kk));
      Value* row = gep(dst, mul(kk, g_.mr));
      for_range(c64(0), rows, [&](Value* p) {
        if (g_.m_var >= 0) h_.set_loop_var(g_.m_var, add(r0, p));
        b_.CreateStore(h_.eval(a_), gep(row, p));
        if (g_.m_var >= 0) h_.set_loop_var(g_.m_var, nullptr);
      });
      for_range(rows, c64(g_.mr), [&](Value* p) { b_.CreateStore(ConstantFP::get(t_, 0.0), gep(row, p)); });
      h_.set_reduce_var(nullptr);
    });
  }

  /// Bp[kk][q] = b(k0 + kk, column c0 + q) for q < cols, 0 for cols <= q < nr.
  void pack_b(Value* c0, Value* cols, Value* k0, Value* kcur) {
    for_range(c64(0), kcur, [&](Value* kk) {
      h_.set_reduce_var(add(k0, kk));
      Value* row = gep(bp_, mul(kk, g_.nr));
      for_range(c64(0), cols, [&](Value* q) {
        if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, add(c0, q));
        b_.CreateStore(h_.eval(b_expr_), gep(row, q));
        if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, nullptr);
      });
      for_range(cols, c64(g_.nr), [&](Value* q) { b_.CreateStore(ConstantFP::get(t_, 0.0), gep(row, q)); });
      h_.set_reduce_var(nullptr);
    });
  }

  /// The mr x nr tile at rows r0 (mvalid inside the output), columns c0 (nvalid inside).
  void microkernel(Value* ip, Value* k0, Value* kcur, Value* cs, Value* first, Value* last, Value* r0, Value* mvalid,
                   Value* c0, Value* nvalid) {
    const int64_t nv = g_.nr / vlen_;
    const Align valign(static_cast<uint64_t>(vlen_ * elem_));
    std::vector<AllocaInst*> acc;
    for (int64_t i = 0; i < g_.mr * nv; ++i) acc.push_back(h_.entry_alloca(vt_, "g.acc"));
    auto slot = [&](Value* base, int64_t p, int64_t v) { return gep(base, c64(p * g_.nr + v * vlen_)); };
    if_else(first,
            [&] {
              for (AllocaInst* a : acc) b_.CreateStore(Constant::getNullValue(vt_), a);
            },
            [&] {
              for (int64_t p = 0; p < g_.mr; ++p)
                for (int64_t v = 0; v < nv; ++v)
                  b_.CreateStore(b_.CreateAlignedLoad(vt_, slot(cs, p, v), valign), acc[p * nv + v]);
            });
    // Where row p of the a panel starts: the packed panel, or a's own row (rows past
    // the output's end read its last row; their results are never stored).
    std::vector<Value*> arows;
    Value* ap = gep(ap_, mul(ip, g_.mr * g_.kc));
    for (int64_t p = 0; p < g_.mr; ++p) {
      Value* packed = gep(ap, c64(p));
      if (!affine_a_) {
        arows.push_back(packed);
        continue;
      }
      Value* row = smin(add(r0, c64(p)), b_.CreateSub(m_, c64(1)));
      Value* in_place = gep(a_base_, b_.CreateAdd(b_.CreateMul(row, a_row_stride_), k0));
      arows.push_back(b_.CreateSelect(direct_, in_place, packed));
    }
    // Elements between consecutive k: 1 in place (a_k_stride is 1), mr packed.
    Value* a_step = affine_a_ ? b_.CreateSelect(direct_, c64(1), c64(g_.mr)) : c64(g_.mr);
    for_range(c64(0), kcur, [&](Value* kk) {
      Value* brow = gep(bp_, mul(kk, g_.nr));
      Value* ak = b_.CreateMul(kk, a_step);
      std::vector<Value*> bv;
      for (int64_t v = 0; v < nv; ++v) bv.push_back(b_.CreateAlignedLoad(vt_, gep(brow, c64(v * vlen_)), valign));
      for (int64_t p = 0; p < g_.mr; ++p) {
        Value* a = b_.CreateVectorSplat(static_cast<unsigned>(vlen_), b_.CreateLoad(t_, gep(arows[p], ak)));
        for (int64_t v = 0; v < nv; ++v) {
          AllocaInst* s = acc[p * nv + v];
          b_.CreateStore(fmuladd(a, bv[v], b_.CreateLoad(vt_, s)), s);
        }
      }
    });
    // Not the last k block: the tile goes back to scratch. The last: the epilogue.
    auto spill = [&](Value* base) {
      for (int64_t p = 0; p < g_.mr; ++p)
        for (int64_t v = 0; v < nv; ++v)
          b_.CreateAlignedStore(b_.CreateLoad(vt_, acc[p * nv + v]), slot(base, p, v), valign);
    };
    if_else(last,
            [&] {
              spill(tile_);
              epilogue(r0, mvalid, c0, nvalid);
            },
            [&] { spill(cs); });
  }

  /// The kernel's stores for the tile's elements [0, rows) x [0, cols).
  void epilogue(Value* r0, Value* rows, Value* c0, Value* cols) {
    for_range(c64(0), rows, [&](Value* p) {
      if (g_.m_var >= 0) h_.set_loop_var(g_.m_var, add(r0, p));
      for_range(c64(0), cols, [&](Value* q) {
        if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, add(c0, q));
        h_.store(b_.CreateLoad(t_, gep(tile_, add(mul(p, g_.nr), q))));
        if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, nullptr);
      });
      if (g_.m_var >= 0) h_.set_loop_var(g_.m_var, nullptr);
    });
  }
};

} // namespace

void emit_gemm(const Kernel& k, GemmHost& host, Value* begin, Value* end, Value* scratch) {
  KILN_ASSERT(k.gemm.has_value(), "emit_gemm without a GEMM form: " + k.name);
  GemmEmitter(k, host).emit(begin, end, scratch);
}

} // namespace kiln::codegen

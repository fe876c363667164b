// The CPU GEMM of a matmul kernel in the GEMM form (see kernel_ir.h, GemmTiling).
//
// One task computes a block of at most mc x nc outputs (blocks balanced in size) over
// all of k:
//   for each k block of kc (in order):
//     pack the a block: mr-row panels, Ap[panel][kk][p], rows past M zero (an a
//       contiguous in k, a row-major left operand, by vector loads along its rows and
//       register transposes) - unless a is contiguous in k and packing it does not pay
//       (pack_a_pays): the microkernel then reads it in place, row by row;
//     for each nr-column panel of the block:
//       pack the b panel: Bp[kk][q], columns past N zero (stays in L1); for a strided b,
//         list the cache lines of the next panel, which the panel's microkernels fetch
//         meanwhile (next_panel_lines, Fetching);
//       for each a panel: the microkernel - an mr x nr tile of accumulators in vector
//         registers (explicit <V x T> vectors, V the host's vector width), one
//         fmuladd(splat(a), b, acc) per k step; the tile starts at 0 on the first k
//         block, otherwise from the scratch copy, and goes back to scratch after each
//         k block except the last, where the kernel's stores (the fused epilogue) run
//         for the tile's elements inside the output.
// A full b panel of a b contiguous in k (a transposed view, as in x @ W^T) is packed
// by vector loads down its columns and a register transpose.
// The microkernel and the transposing packs depend only on the dtype and the register
// tile: they are support routines (GemmSupport), generated once per process into a
// module of their own and called by every GEMM kernel, which keeps a GEMM kernel's
// compile time to its packing loops and epilogue.
// The packing loops read the operands through the kernel's own index expressions, so
// transposed, sliced, broadcast and batched views need no copy beforehand.
// Every output element thus accumulates fmuladd(a, b, acc) over k in order from 0,
// exactly like the kernel without the GEMM form: tiling, task split and thread count
// never change a result.
#include "codegen/src/llvm_gemm.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

#include <llvm/IR/Intrinsics.h>

#include "codegen/src/llvm_math.h"
#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {

/// Elements a vector of the register tile: nr's largest divisor of at most 64 bytes.
int64_t vector_length(DType dtype, int64_t nr) {
  const int64_t elem = dtype == DType::Float64 ? 8 : 4;
  int64_t v = std::min<int64_t>(nr, 64 / elem);
  while (nr % v != 0) v /= 2;
  return v;
}

Type* element_type(LLVMContext& ctx, DType dtype) {
  return dtype == DType::Float64 ? Type::getDoubleTy(ctx) : Type::getFloatTy(ctx);
}

/// The microkernel's two forms: the a panel packed (Ap[kk][p]), or read in place from
/// mr row pointers (a row-major left operand).
enum class MicroForm { Packed, Rows };

/// Whether a microkernel prefetches lines for its caller meanwhile (see emit_micro): the one a
/// strided b's kernel calls, which fetches its next b panel; the others do not pay for it.
enum class Fetching { No, Yes };

std::string micro_suffix(MicroForm form, Fetching fetching = Fetching::No) {
  return std::string(form == MicroForm::Packed ? "_micro_packed" : "_micro_rows") + (fetching == Fetching::Yes ? "_fetching" : "");
}

/// The suffix of the transposing b pack's symbol.
constexpr const char* kPackBtSuffix = "_pack_bt";

/// The suffix of the symbol of the transposing a pack (an a contiguous in k).
constexpr const char* kPackAkSuffix = "_pack_ak";

/// A task packs an a contiguous in k (a row-major left operand) rather than reading it in
/// place when its rows are a multiple of kPackARowBytes apart and it runs each a panel against
/// kPackAMinPanels b panels or more. Such rows share the L1's sets with each other and with the
/// b panel, so the in-place tile misses: bench Peak/tile_12x32 runs 217 GFLOP/s packed, 181
/// and 177 in place at 1024 and 2048 floats a row, 202-207 at 784 and 1040. The pack is one
/// pass over the a block, which pays back only over many b panels (at 2 KiB apart or with
/// fewer panels, the MLP's and transformer's products, it measured a loss or nothing).
constexpr int64_t kPackARowBytes = 4096;
constexpr int64_t kPackAMinPanels = 16;

/// An a packed element by element (not contiguous in k) is packed this many k steps at a time
/// across all the task's panels (see GemmEmitter::pack_a_block).
constexpr int64_t kPackASteps = 8;

FunctionType* micro_type(LLVMContext& ctx, Fetching fetching) {
  // (a: the packed panel or the mr row pointers, bp, kcur, first, acc_in, acc_out
  //  [Fetching::Yes: lines to prefetch: their addresses, how many (at least 1)])
  auto* ptr = PointerType::getUnqual(ctx);
  auto* i64 = Type::getInt64Ty(ctx);
  std::vector<Type*> args{ptr, ptr, i64, Type::getInt1Ty(ctx), ptr, ptr};
  if (fetching == Fetching::Yes) args.insert(args.end(), {ptr, i64});
  return FunctionType::get(Type::getVoidTy(ctx), args, false);
}

/// The microkernel prefetches one line every kStepsPerFetch k steps (see emit_micro).
constexpr int64_t kStepsPerFetch = 4;

FunctionType* pack_bt_type(LLVMContext& ctx) {
  // (b_base, col_stride, c0, k0, kcur, bp)
  auto* ptr = PointerType::getUnqual(ctx);
  auto* i64 = Type::getInt64Ty(ctx);
  return FunctionType::get(Type::getVoidTy(ctx), {ptr, i64, i64, i64, i64, ptr}, false);
}

FunctionType* pack_ak_type(LLVMContext& ctx) {
  auto* ptr = PointerType::getUnqual(ctx);
  auto* i64 = Type::getInt64Ty(ctx);
  // (a: the element (row 0, k 0), row_stride, rows, kcur, ap)
  return FunctionType::get(Type::getVoidTy(ctx), {ptr, i64, i64, i64, ptr}, false);
}

/// Generates the support routines of one (dtype, mr, nr) (see GemmSupport).
class SupportEmitter {
public:
  SupportEmitter(const GemmSupport& s, Module& m)
      : s_(s), m_(m), ctx_(m.getContext()), b_(ctx_), t_(element_type(ctx_, s.dtype)),
        vlen_(vector_length(s.dtype, s.nr)), vt_(FixedVectorType::get(t_, static_cast<unsigned>(vlen_))) {}

  void emit() {
    switch (s_.part) {
    case SupportPart::Packs:
      emit_pack_bt();
      emit_pack_ak();
      return;
    case SupportPart::Micro:
    case SupportPart::MicroFetching: {
      const Fetching fetching = s_.part == SupportPart::MicroFetching ? Fetching::Yes : Fetching::No;
      emit_micro(MicroForm::Packed, fetching);
      emit_micro(MicroForm::Rows, fetching);
      return;
    }
    }
  }

private:
  const GemmSupport& s_;
  Module& m_;
  LLVMContext& ctx_;
  IRBuilder<> b_;
  Type* t_;
  int64_t vlen_;
  FixedVectorType* vt_;
  Function* fn_ = nullptr;

  Value* c64(int64_t v) { return b_.getInt64(v); }
  Value* gep(Value* p, Value* i) { return b_.CreateInBoundsGEP(t_, p, i); }
  Value* add(Value* a, Value* b) { return b_.CreateAdd(a, b, "", true, true); }
  Value* mul(Value* a, int64_t c) { return b_.CreateMul(a, c64(c), "", true, true); }
  Align elem_align() const { return Align(static_cast<uint64_t>(s_.dtype == DType::Float64 ? 8 : 4)); }
  Align vector_align() const { return Align(static_cast<uint64_t>(vlen_) * elem_align().value()); }

  Function* begin_function(FunctionType* ty, const std::string& name) {
    fn_ = Function::Create(ty, GlobalValue::ExternalLinkage, name, m_);
    fn_->addFnAttr(Attribute::NoUnwind);
    b_.SetInsertPoint(BasicBlock::Create(ctx_, "entry", fn_));
    return fn_;
  }
  AllocaInst* local(Type* t, const char* name) {
    IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    return eb.CreateAlloca(t, nullptr, name);
  }
  void for_range(Value* start, Value* end, const std::function<void(Value*)>& body, int64_t step = 1) {
    emit_for(b_, local(b_.getInt64Ty(), "g.iv"), start, end, step, body);
  }

  /// The mr x nr register tile: acc = first ? 0 : acc_in; acc += a[p][kk] * bp[kk][q]
  /// for kk < kcur in order; acc_out = acc. a[p][kk] is a[kk * mr + p] (Packed) or
  /// a[p][kk], a holding mr row pointers (Rows). Two functions rather than one with a
  /// stride: the packed form addresses every row from one pointer, which leaves the
  /// loop enough registers. acc_in and acc_out hold the tile row by row (nr elements
  /// a row, vector-aligned) and may be the same memory.
  /// Meanwhile it prefetches the npf >= 1 lines at pf (the caller's next b panel), one every
  /// kStepsPerFetch steps and the rest after the loop: lines fetched in bursts wait for the
  /// core's few line buffers and stall it; one per step costs the loop too many instructions.
  void emit_micro(MicroForm form, Fetching fetching) {
    Function* f = begin_function(micro_type(ctx_, fetching), s_.name() + micro_suffix(form, fetching));
    Value *a = f->getArg(0), *bp = f->getArg(1), *kcur = f->getArg(2);
    Value *first = f->getArg(3), *acc_in = f->getArg(4), *acc_out = f->getArg(5);
    const int64_t nv = s_.nr / vlen_;
    std::vector<AllocaInst*> acc;
    for (int64_t i = 0; i < s_.mr * nv; ++i) acc.push_back(local(vt_, "g.acc"));
    auto slot = [&](Value* base, int64_t p, int64_t v) { return gep(base, c64(p * s_.nr + v * vlen_)); };
    for (int64_t p = 0; p < s_.mr; ++p)
      for (int64_t v = 0; v < nv; ++v) {
        Value* in = b_.CreateAlignedLoad(vt_, slot(acc_in, p, v), vector_align());
        b_.CreateStore(b_.CreateSelect(first, Constant::getNullValue(vt_), in), acc[p * nv + v]);
      }
    std::vector<Value*> rows; // Rows: row p's pointer
    for (int64_t p = 0; form == MicroForm::Rows && p < s_.mr; ++p)
      rows.push_back(b_.CreateLoad(b_.getPtrTy(), b_.CreateConstInBoundsGEP1_64(b_.getPtrTy(), a, p)));
    auto step = [&](Value* kk) {
      Value* brow = gep(bp, mul(kk, s_.nr));
      std::vector<Value*> bv;
      for (int64_t v = 0; v < nv; ++v) bv.push_back(b_.CreateAlignedLoad(vt_, gep(brow, c64(v * vlen_)), vector_align()));
      for (int64_t p = 0; p < s_.mr; ++p) {
        Value* at = form == MicroForm::Packed ? gep(a, add(mul(kk, s_.mr), c64(p))) : gep(rows[p], kk);
        Value* splat = b_.CreateVectorSplat(static_cast<unsigned>(vlen_), b_.CreateLoad(t_, at));
        for (int64_t v = 0; v < nv; ++v) {
          AllocaInst* slot_acc = acc[p * nv + v];
          b_.CreateStore(emit_fmuladd(b_, splat, bv[v], b_.CreateLoad(vt_, slot_acc)), slot_acc);
        }
      }
    };
    auto store_tile = [&] {
      for (int64_t p = 0; p < s_.mr; ++p)
        for (int64_t v = 0; v < nv; ++v)
          b_.CreateAlignedStore(b_.CreateLoad(vt_, acc[p * nv + v]), slot(acc_out, p, v), vector_align());
    };
    if (fetching == Fetching::No) {
      for_range(c64(0), kcur, step);
      store_tile();
      b_.CreateRetVoid();
      return;
    }
    Value *pf = f->getArg(6), *npf = f->getArg(7);
    Function* prefetch = Intrinsic::getDeclaration(&m_, Intrinsic::prefetch, {b_.getPtrTy()});
    auto fetch = [&](Value* i) {
      Value* at = b_.CreateLoad(b_.getPtrTy(), b_.CreateInBoundsGEP(b_.getPtrTy(), pf, i));
      b_.CreateCall(prefetch, {at, b_.getInt32(0), b_.getInt32(3), b_.getInt32(1)});
    };
    // Group g: steps kStepsPerFetch g.. and line min(g, npf - 1), branch-free (the lines past the
    // list repeat its last, in cache), so that the loop stays one block.
    Value* groups = b_.CreateUDiv(kcur, c64(kStepsPerFetch));
    Value* last_line = b_.CreateSub(npf, c64(1));
    for_range(c64(0), groups, [&](Value* g) {
      fetch(b_.CreateBinaryIntrinsic(Intrinsic::umin, g, last_line));
      for (int64_t j = 0; j < kStepsPerFetch; ++j) step(add(mul(g, kStepsPerFetch), c64(j)));
    });
    for_range(mul(groups, kStepsPerFetch), kcur, step);
    store_tile();
    for_range(groups, npf, fetch); // the lines the groups did not reach
    b_.CreateRetVoid();
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

  /// Bp[kk][q] = b_base[(c0 + q) * col_stride + k0 + kk] for kk < kcur, q < nr: a full
  /// b panel of a b contiguous in k (a transposed view). vlen x vlen blocks are read
  /// down the columns with vector loads and transposed in registers; the k rows past
  /// the last whole block one element at a time.
  void emit_pack_bt() {
    Function* f = begin_function(pack_bt_type(ctx_), s_.name() + kPackBtSuffix);
    Value *base = f->getArg(0), *col_stride = f->getArg(1), *c0 = f->getArg(2), *k0 = f->getArg(3);
    Value *kcur = f->getArg(4), *bp = f->getArg(5);
    auto at = [&](Value* col, Value* k) { return gep(base, b_.CreateAdd(b_.CreateMul(col, col_stride), k)); };
    Value* whole = mul(b_.CreateUDiv(kcur, c64(vlen_)), vlen_);
    for_range(c64(0), whole, [&](Value* kk0) {
      for (int64_t qb = 0; qb < s_.nr; qb += vlen_) {
        std::vector<Value*> cols;
        for (int64_t q = 0; q < vlen_; ++q)
          cols.push_back(b_.CreateAlignedLoad(vt_, at(add(c0, c64(qb + q)), add(k0, kk0)), elem_align()));
        std::vector<Value*> rows = transpose(cols);
        for (int64_t r = 0; r < vlen_; ++r)
          b_.CreateAlignedStore(rows[r], gep(bp, add(mul(add(kk0, c64(r)), s_.nr), c64(qb))), vector_align());
      }
    }, vlen_);
    for_range(whole, kcur, [&](Value* kk) {
      Value* row = gep(bp, mul(kk, s_.nr));
      for_range(c64(0), c64(s_.nr), [&](Value* q) {
        b_.CreateStore(b_.CreateLoad(t_, at(add(c0, q), add(k0, kk))), gep(row, q));
      });
    });
    b_.CreateRetVoid();
  }

  /// Ap[kk][p] = a[p * row_stride + kk] for p < rows, 0 for rows <= p < mr, kk < kcur: an a panel
  /// of an a contiguous in k (a row-major left operand). Blocks of vlen rows by vlen k steps are
  /// read along the rows with vector loads and transposed in registers (rows past `rows` read the
  /// last row and are replaced by 0); the k steps past the last whole block one element at a time.
  void emit_pack_ak() {
    Function* f = begin_function(pack_ak_type(ctx_), s_.name() + kPackAkSuffix);
    Value *a = f->getArg(0), *row_stride = f->getArg(1), *rows = f->getArg(2), *kcur = f->getArg(3), *ap = f->getArg(4);
    std::vector<Value*> row, valid; // row p's element k 0 (clamped to the last row); p < rows
    for (int64_t p = 0; p < s_.mr; ++p) {
      Value* r = b_.CreateBinaryIntrinsic(Intrinsic::umin, c64(p), b_.CreateSub(rows, c64(1)));
      row.push_back(gep(a, b_.CreateMul(r, row_stride)));
      valid.push_back(b_.CreateICmpSLT(c64(p), rows));
    }
    auto dst = [&](Value* kk, int64_t p) { return gep(ap, add(mul(kk, s_.mr), c64(p))); };
    Value* whole = mul(b_.CreateUDiv(kcur, c64(vlen_)), vlen_);
    for_range(c64(0), whole, [&](Value* kk0) {
      for (int64_t p0 = 0; p0 < s_.mr; p0 += vlen_) {
        const int64_t block_rows = std::min(vlen_, s_.mr - p0);
        std::vector<Value*> block;
        for (int64_t p = p0; p < p0 + vlen_; ++p) {
          if (p - p0 >= block_rows) {
            block.push_back(Constant::getNullValue(vt_));
            continue;
          }
          Value* v = b_.CreateAlignedLoad(vt_, gep(row[p], kk0), elem_align());
          block.push_back(b_.CreateSelect(valid[p], v, Constant::getNullValue(vt_)));
        }
        std::vector<Value*> by_k = transpose(block); // by_k[r][p] = a[p0 + p][kk0 + r]
        std::vector<Constant*> lanes;
        for (int64_t l = 0; l < vlen_; ++l) lanes.push_back(b_.getInt1(l < block_rows));
        Constant* mask = ConstantVector::get(lanes);
        for (int64_t r = 0; r < vlen_; ++r) b_.CreateMaskedStore(by_k[r], dst(add(kk0, c64(r)), p0), elem_align(), mask);
      }
    }, vlen_);
    for_range(whole, kcur, [&](Value* kk) {
      for (int64_t p = 0; p < s_.mr; ++p)
        b_.CreateStore(b_.CreateSelect(valid[p], b_.CreateLoad(t_, gep(row[p], kk)), ConstantFP::get(t_, 0.0)), dst(kk, p));
    });
    b_.CreateRetVoid();
  }
};

class GemmEmitter {
public:
  GemmEmitter(const Kernel& k, GemmHost& host) : k_(k), g_(*k.gemm), h_(host), b_(host.builder()), ctx_(b_.getContext()) {
    const Reduction& r = k.reductions.at(0);
    KILN_ASSERT(k.reductions.size() == 1 && k.map.empty() && r.op == ReduceOp::Sum && is_floating(r.dtype) &&
                    r.value->kind == ExprKind::Op && r.value->op == ScalarOp::Mul && r.value->args.size() == 2 &&
                    r.extents.size() == 1,
                "not a GEMM-form kernel: " + k.name);
    KILN_ASSERT(g_.mr > 0 && g_.nr > 0 && g_.mc % g_.mr == 0 && g_.nc % g_.nr == 0 && g_.kc > 0,
                "bad GEMM tiling in " + k.name);
    t_ = element_type(ctx_, r.dtype);
    elem_ = r.dtype == DType::Float64 ? 8 : 4;
    const GemmSupport support = gemm_supports_of(k).front();
    Module* m = b_.GetInsertBlock()->getModule();
    pack_bt_ = m->getOrInsertFunction(support.name() + kPackBtSuffix, pack_bt_type(ctx_));
    pack_ak_ = m->getOrInsertFunction(support.name() + kPackAkSuffix, pack_ak_type(ctx_));
    a_ = r.value->args[0];
    b_expr_ = r.value->args[1];
    affine_a_ = a_->kind == ExprKind::Load && a_->args.size() == 1 && affine(a_->args[0]);
    affine_b_ = strided_b(k);
    // a strided b's kernel fetches its next b panel during the microkernels (next_panel_lines)
    const Fetching fetching = affine_b_ ? Fetching::Yes : Fetching::No;
    micro_packed_ = m->getOrInsertFunction(support.name() + micro_suffix(MicroForm::Packed, fetching), micro_type(ctx_, fetching));
    micro_rows_ = m->getOrInsertFunction(support.name() + micro_suffix(MicroForm::Rows, fetching), micro_type(ctx_, fetching));
    gather_a_ = !affine_a_ && a_->kind == ExprKind::Load && a_->args.size() == 1 && separable(a_->args[0], g_.m_var);
    gather_b_ = !affine_b_ && b_expr_->kind == ExprKind::Load && b_expr_->args.size() == 1 &&
                separable(b_expr_->args[0], g_.n_var);
    epilogue_streams_ = find_epilogue_streams();
  }

  /// True when k's b is a strided view of a buffer: its kernel fetches its next b panel
  /// during the microkernels (Fetching::Yes).
  static bool strided_b(const Kernel& k) {
    const ExprRef& b = k.reductions.at(0).value->args.at(1);
    return b->kind == ExprKind::Load && b->args.size() == 1 && affine(b->args[0]);
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
    // Blocks of at most the launch's rows and columns per task (GemmTiling::mc_param,
    // nc_param), balanced: rows_ rows a block (a multiple of mr), the last block shorter;
    // likewise columns.
    auto per_task = [&](int at, int64_t most) { // (the expression lives as long as the emitter:
      // the host caches values by expression)
      return at >= 0 ? h_.eval(block_params_.emplace_back(kiln::codegen::param(at))) : c64(most);
    };
    Value* row_blocks = ceil_div(m_, per_task(g_.mc_param, g_.mc));
    Value* col_blocks = ceil_div(n_, per_task(g_.nc_param, g_.nc));
    rows_ = mul(ceil_div(ceil_div(m_, row_blocks), g_.mr), g_.mr);
    cols_ = mul(ceil_div(ceil_div(n_, col_blocks), g_.nr), g_.nr);
    col_tiles_ = b_.CreateUDiv(cols_, c64(g_.nr), "", true);
    // Scratch: Ap (mc x kc), Bp (kc x nr), Cs (mc x nc, by tiles), the epilogue tile (mr x nr).
    // Each region starts 64-byte aligned (the vector loads and stores are aligned);
    // gemm_scratch_bytes() leaves room for the rounding.
    auto aligned = [&](int64_t elems) { return c64((elems + 64 / elem_ - 1) / (64 / elem_) * (64 / elem_)); };
    ap_ = scratch;
    bp_ = gep(ap_, aligned(g_.mc * g_.kc));
    cs_ = gep(bp_, aligned(g_.kc * g_.nr));
    tile_ = gep(cs_, aligned(g_.mc * g_.nc));
    next_lines_ = h_.entry_alloca(ArrayType::get(b_.getPtrTy(), static_cast<uint64_t>(max_next_lines())), "g.nextb");
    idle_line_ = h_.entry_alloca(b_.getPtrTy(), "g.idle");
    b_.CreateStore(bp_, idle_line_);
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
  int64_t elem_ = 4;
  FunctionCallee micro_packed_, micro_rows_, pack_bt_, pack_ak_; // the support routines (emit_gemm_support_module)
  ExprRef a_, b_expr_;
  std::vector<ExprRef> block_params_; // the launch's rows and columns per task (GemmTiling::mc_param, nc_param)
  Value *m_ = nullptr, *n_ = nullptr, *kk_ = nullptr, *rows_ = nullptr, *cols_ = nullptr;
  Value* col_tiles_ = nullptr; // cols_ / nr: the tiles of a row of the accumulators (Cs)
  Value* a_base_ = nullptr; // a's element (row 0, k 0) at the current batch point
  bool affine_a_ = false;    // a is a strided view of a buffer
  bool affine_b_ = false;    // b is a strided view of a buffer
  bool gather_a_ = false;    // a is a load at a row offset plus a k offset (separable): packed by gathers
  bool gather_b_ = false;    // b is a load at a row offset plus a column offset (separable): packed by gathers
  Value *b_base_ = nullptr, *b_col_stride_ = nullptr; // b's element (k 0, column 0); column stride
  Value* b_k_stride_ = nullptr;                         // b's k stride (affine_b_)
  AllocaInst* next_lines_ = nullptr;  // the lines of the next b panel (next_panel_lines), room for max_next_lines()
  AllocaInst* idle_line_ = nullptr;   // one line for a microkernel with none to fetch: the b panel's (in cache)
  Value* b_by_columns_ = nullptr; // (per batch point) b is contiguous in k, not in columns
  Value* direct_ = nullptr;   // (per batch point) a is contiguous in k
  Value* in_place_ = nullptr; // (per task) direct_, and packing a does not pay (pack_a_pays): read in place
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
  Value* ceil_div(Value* a, Value* b) { return b_.CreateUDiv(b_.CreateAdd(a, b_.CreateSub(b, c64(1))), b); }
  Function* fn() { return b_.GetInsertBlock()->getParent(); }

  /// for (v = start; v < end; v += step) body(v), in a scope of its own.
  void for_range(Value* start, Value* end, const std::function<void(Value*)>& body, int64_t step = 1,
                 LoopHint hint = LoopHint::None) {
    emit_for(b_, h_.entry_alloca(i64(), "g.iv"), start, end, step, [&](Value* v) {
      h_.push_scope();
      body(v);
      h_.pop_scope();
    }, hint);
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
    case ExprKind::ReduceResult: case ExprKind::Random: case ExprKind::Check:
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
      if (e->op == ScalarOp::Add || e->op == ScalarOp::Sub) return affine(e->args[0]) && affine(e->args[1]);
      if (e->op == ScalarOp::Mul)
        return (var_free(e->args[0]) && affine(e->args[1])) || (affine(e->args[0]) && var_free(e->args[1]));
      return false;
    case ExprKind::Const: case ExprKind::MapVar: case ExprKind::Param: case ExprKind::Load: case ExprKind::IntDiv:
    case ExprKind::IntMod: case ExprKind::ReduceResult: case ExprKind::Random: case ExprKind::Check:
      return false;
    }
    return false;
  }

  /// True when the i64 expression e is a term of k alone plus a term of the loop var `var` alone
  /// (b's column or a's row; other vars are constant over a task): b's offset at (k, n) is then
  /// off(k, n0) + off(k0, n) - off(k0, n0), and likewise a's. So is an unfold read through a
  /// reshape (im2col's columns: the taps' offsets plus the windows'), and a reshape that merges a
  /// permuted view's dims (attention's [N, H, L, D] output read as [N L, H D] rows and k).
  static bool separable(const ExprRef& e, int var) {
    auto of_k = [](const ExprRef& x) { return mentions(x, ExprKind::ReduceVar, 0); };
    auto of_var = [&](const ExprRef& x) { return var >= 0 && mentions(x, ExprKind::LoopVar, var); };
    auto constant = [&](const ExprRef& x) { return !of_k(x) && !of_var(x); };
    if (!of_k(e) || !of_var(e)) return true;
    if (e->kind != ExprKind::Op || e->dtype != DType::Int64) return false;
    if (e->op == ScalarOp::Add || e->op == ScalarOp::Sub) return separable(e->args[0], var) && separable(e->args[1], var);
    if (e->op != ScalarOp::Mul) return false;
    return (constant(e->args[0]) && separable(e->args[1], var)) || (separable(e->args[0], var) && constant(e->args[1]));
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

  /// Whether a task over npanels b panels packs an a contiguous in k (kPackARowBytes, kPackAMinPanels).
  Value* pack_a_pays(Value* npanels) {
    if (!affine_a_) return b_.getFalse();
    Value* far = b_.CreateAnd(b_.CreateICmpNE(a_row_stride_, c64(0)), // (0: a broadcast row)
                              b_.CreateICmpEQ(b_.CreateSRem(mul(a_row_stride_, elem_), c64(kPackARowBytes)), c64(0)));
    return b_.CreateAnd(far, b_.CreateICmpSGE(npanels, c64(kPackAMinPanels)));
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
    b_k_stride_ = k_stride;
    b_col_stride_ = b_.CreateSub(b_offset(c64(0), c64(1)), o);
    b_base_ = gep(h_.buffer(b_expr_->index), o);
    b_by_columns_ = b_.CreateAnd(b_.CreateICmpEQ(k_stride, c64(1)), b_.CreateICmpNE(b_col_stride_, c64(1)));
  }

  /// The output block at rows i0, cols j0 of the current batch point.
  void emit_task(Value* i0, Value* j0) {
    Value* mcur = smin(rows_, b_.CreateSub(m_, i0));
    Value* ncur = smin(cols_, b_.CreateSub(n_, j0));
    Value* mpanels = ceil_div(mcur, g_.mr);
    Value* npanels = ceil_div(ncur, g_.nr);
    in_place_ = b_.CreateAnd(direct_, b_.CreateNot(pack_a_pays(npanels)));
    // At least one k block, so that K = 0 still runs the stores (of 0).
    Value* kblocks = smax(c64(1), ceil_div(kk_, g_.kc));
    for_range(c64(0), kblocks, [&](Value* kb) {
      Value* k0 = mul(kb, g_.kc);
      Value* kcur = smax(c64(0), smin(c64(g_.kc), b_.CreateSub(kk_, k0)));
      Value* first = b_.CreateICmpEQ(kb, c64(0));
      Value* last = b_.CreateICmpEQ(kb, b_.CreateSub(kblocks, c64(1)));
      if_else(in_place_, [] {}, [&] {
        auto generic = [&] {
          if (!gather_a_) return pack_a_block(i0, mpanels, k0, kcur);
          for_range(c64(0), mpanels, [&](Value* ip) {
            Value* r0 = add(i0, mul(ip, g_.mr));
            pack_a_gather(gep(ap_, mul(ip, g_.mr * g_.kc)), r0, smin(c64(g_.mr), b_.CreateSub(m_, r0)), k0, kcur);
          });
        };
        if (!affine_a_) return generic(); // (a_base_ is bound only for a strided a)
        if_else(direct_, [&] {
          for_range(c64(0), mpanels, [&](Value* ip) {
            Value* r0 = add(i0, mul(ip, g_.mr));
            Value* rows = smin(c64(g_.mr), b_.CreateSub(m_, r0));
            Value* at = gep(a_base_, b_.CreateAdd(b_.CreateMul(r0, a_row_stride_), k0));
            b_.CreateCall(pack_ak_, {at, a_row_stride_, rows, kcur, gep(ap_, mul(ip, g_.mr * g_.kc))});
          });
        }, generic);
      });
      for_range(c64(0), npanels, [&](Value* jp) {
        Value* c0 = add(j0, mul(jp, g_.nr));
        Value* nvalid = smin(c64(g_.nr), b_.CreateSub(n_, c0));
        if (affine_b_)
          if_else(b_.CreateAnd(b_by_columns_, b_.CreateICmpEQ(nvalid, c64(g_.nr))), [&] { b_.CreateCall(pack_bt_, {b_base_, b_col_stride_, c0, k0, kcur, bp_}); },
                  [&] { pack_b(c0, nvalid, k0, kcur); });
        else if (gather_b_)
          pack_b_gather(c0, nvalid, k0, kcur);
        else
          pack_b(c0, nvalid, k0, kcur);
        // The next panel's lines, fetched by this panel's microkernels, an equal share each.
        Value* lines = next_panel_lines(add(jp, c64(1)), npanels, j0, k0, kcur);
        Value* share = b_.CreateUDiv(b_.CreateAdd(lines, b_.CreateSub(mpanels, c64(1))), mpanels);
        for_range(c64(0), mpanels, [&](Value* ip) {
          Value* r0 = add(i0, mul(ip, g_.mr));
          Value* mvalid = smin(c64(g_.mr), b_.CreateSub(m_, r0));
          Value* cs = gep(cs_, mul(add(b_.CreateMul(ip, col_tiles_, "", true, true), jp), g_.mr * g_.nr));
          Value* from = b_.CreateMul(ip, share);
          Value* count = smax(c64(0), smin(share, b_.CreateSub(lines, from)));
          Value* none = b_.CreateICmpEQ(count, c64(0));
          Value* at = b_.CreateSelect(none, idle_line_, b_.CreateInBoundsGEP(b_.getPtrTy(), next_lines_, from));
          microkernel(ip, k0, kcur, cs, first, last, r0, mvalid, c0, nvalid, at, b_.CreateSelect(none, c64(1), count));
        });
      });
    });
  }

  /// Lists in next_lines_ the cache lines the pack of b panel jp (of npanels, from column j0 of the
  /// task) will read over k0..k0 + kcur, and returns their number: 0 past the last panel, or for a
  /// b that is not a strided view. A panel of a row-major b is kcur rows a row of b apart (each by
  /// its first and last element); of a b contiguous in k, nr columns of kcur elements.
  Value* next_panel_lines(Value* jp, Value* npanels, Value* j0, Value* k0, Value* kcur) {
    if (!affine_b_) return c64(0);
    AllocaInst* count = h_.entry_alloca(i64(), "g.nextn");
    b_.CreateStore(c64(0), count);
    auto append = [&](Value* at) {
      Value* n = b_.CreateLoad(i64(), count);
      b_.CreateStore(at, b_.CreateInBoundsGEP(b_.getPtrTy(), next_lines_, n));
      b_.CreateStore(b_.CreateAdd(n, c64(1)), count);
    };
    if_else(b_.CreateICmpSLT(jp, npanels), [&] {
      Value* c0 = add(j0, mul(jp, g_.nr));
      Value* cols = smin(c64(g_.nr), b_.CreateSub(n_, c0));
      Value* first = gep(b_base_, b_.CreateAdd(b_.CreateMul(c0, b_col_stride_), b_.CreateMul(k0, b_k_stride_)));
      const int64_t line = 64 / elem_;
      if_else(b_by_columns_, [&] {
        Value* per_column = ceil_div(kcur, line);
        for_range(c64(0), cols, [&](Value* q) {
          Value* column = gep(first, b_.CreateMul(q, b_col_stride_));
          for_range(c64(0), per_column, [&](Value* l) { append(gep(column, mul(l, line))); });
        });
      }, [&] {
        Value* last = b_.CreateMul(b_.CreateSub(cols, c64(1)), b_col_stride_);
        for_range(c64(0), kcur, [&](Value* kk) {
          Value* row = gep(first, b_.CreateMul(kk, b_k_stride_));
          append(row);
          append(gep(row, last));
        });
      });
    }, [] {});
    return b_.CreateLoad(i64(), count);
  }

  /// The most lines next_panel_lines() lists: two a row of a kc-row panel, or the lines of nr
  /// columns of kc elements.
  int64_t max_next_lines() const {
    const int64_t line = 64 / elem_;
    return std::max(2 * g_.kc, g_.nr * ((g_.kc + line - 1) / line));
  }

  /// The a block's mpanels panels from row i0 over k0..k0 + kcur (pack_a), kPackASteps k steps
  /// at a time across all the panels. An a read along its rows (the x^T of a weight gradient, a
  /// row-major [k, m] buffer) is then read a few whole rows at a time: panel by panel, each
  /// panel's 12 floats of kcur rows lie in kcur lines a row apart, which share a few of the L1's
  /// sets when rows are 1.5 KiB apart (the GPT's) and missed the L1 every time.
  void pack_a_block(Value* i0, Value* mpanels, Value* k0, Value* kcur) {
    for_range(c64(0), kcur, [&](Value* kb) {
      Value* kend = smin(add(kb, c64(kPackASteps)), kcur);
      for_range(c64(0), mpanels, [&](Value* ip) {
        Value* r0 = add(i0, mul(ip, g_.mr));
        Value* rows = smin(c64(g_.mr), b_.CreateSub(m_, r0));
        Value* dst = gep(ap_, mul(ip, g_.mr * g_.kc));
        auto generic = [&] { pack_a(dst, r0, rows, k0, kb, kend); };
        if (!affine_a_) return generic();
        Value* whole = b_.CreateAnd(b_.CreateICmpEQ(rows, c64(g_.mr)), b_.CreateICmpEQ(a_row_stride_, c64(1)));
        if_else(whole, [&] { copy_a_rows(dst, r0, k0, kb, kend); }, generic);
      });
    }, kPackASteps);
  }

  /// pack_a of a whole panel (mr rows) of an a contiguous in m: each k step's mr elements by one
  /// vector copy (the generic loop's masked 16-lane copies cost about 15% more).
  void copy_a_rows(Value* dst, Value* r0, Value* k0, Value* kfrom, Value* kto) {
    auto* vt = FixedVectorType::get(t_, static_cast<unsigned>(g_.mr));
    const Align align(static_cast<uint64_t>(elem_));
    Value* first = gep(a_base_, b_.CreateAdd(r0, b_.CreateMul(k0, a_k_stride_)));
    for_range(kfrom, kto, [&](Value* kk) {
      Value* v = b_.CreateAlignedLoad(vt, gep(first, b_.CreateMul(kk, a_k_stride_)), align);
      b_.CreateAlignedStore(v, gep(dst, mul(kk, g_.mr)), align);
    });
  }

  /// Ap[kk][p] = a(row r0 + p, k0 + kk) for p < rows, 0 for rows <= p < mr, kfrom <= kk < kto.
  /// (Loops of a variable trip count throughout: constant-count copies vectorize no better here
  /// and double the compile time.)
  void pack_a(Value* dst, Value* r0, Value* rows, Value* k0, Value* kfrom, Value* kto) {
    for_range(kfrom, kto, [&](Value* kk) {
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

  /// pack_b for a separable b (gather_b_), by pack_gathered(). im2col's columns are read from the
  /// padded input this way, without a column matrix.
  void pack_b_gather(Value* c0, Value* cols, Value* k0, Value* kcur) {
    pack_gathered(h_.buffer(b_expr_->index), [&](Value* k, Value* n) { return b_offset(k, n); }, c0, cols, g_.nr, bp_,
                  k0, kcur);
  }

  /// pack_a for a separable a (gather_a_), by pack_gathered(): the panel's rows are its lanes.
  /// Attention's [N, H, L, D] output merged into rows N L and k H D (the head-merging reshape
  /// before the output projection) is read this way, not element by element through idiv/imod.
  void pack_a_gather(Value* dst, Value* r0, Value* rows, Value* k0, Value* kcur) {
    pack_gathered(h_.buffer(a_->index), [&](Value* k, Value* m) { return a_offset(m, k); }, r0, rows, g_.mr, dst, k0, kcur);
  }

  /// dst[kk][q] = buffer[offset(k0 + kk, lane0 + q)] for q < lanes, 0 for lanes <= q < width, over
  /// kk < kcur, where offset is separable: the lanes' offsets relative to lane 0 once, then each k
  /// step by masked vector gathers at the step's own offset (lanes past `lanes` read nothing). Where
  /// the lanes are consecutive elements (a head's columns, read as a panel), by masked vector loads.
  void pack_gathered(Value* buffer, const std::function<Value*(Value*, Value*)>& offset, Value* lane0, Value* lanes,
                     int64_t width, Value* dst, Value* k0, Value* kcur) {
    const int64_t vlen = vector_length(k_.reductions[0].dtype, width);
    auto* offsets = h_.entry_alloca(ArrayType::get(i64(), static_cast<uint64_t>(width)), "g.offs");
    Value* first = offset(k0, lane0);
    for_range(c64(0), c64(width), [&](Value* q) {
      Value* at = b_.CreateInBoundsGEP(i64(), offsets, q);
      b_.CreateStore(c64(0), at);
      if_else(b_.CreateICmpSLT(q, lanes), [&] { b_.CreateStore(b_.CreateSub(offset(k0, add(lane0, q)), first), at); }, [] {});
    });
    auto* vt = FixedVectorType::get(t_, static_cast<unsigned>(vlen));
    auto* vi = FixedVectorType::get(i64(), static_cast<unsigned>(vlen));
    const Align elem_align(static_cast<uint64_t>(elem_));
    std::vector<Value*> offs, masks;
    Value* consecutive = b_.getTrue();
    for (int64_t v = 0; v < width; v += vlen) {
      offs.push_back(b_.CreateAlignedLoad(vi, b_.CreateInBoundsGEP(i64(), offsets, c64(v)), Align(8)));
      std::vector<Constant*> lane;
      for (int64_t l = 0; l < vlen; ++l) lane.push_back(b_.getInt64(v + l));
      Value* index = ConstantVector::get(lane);
      masks.push_back(b_.CreateICmpSLT(index, b_.CreateVectorSplat(static_cast<unsigned>(vlen), lanes)));
      // (the lanes past `lanes` hold offset 0; they count as consecutive)
      Value* in_line = b_.CreateOr(b_.CreateICmpEQ(offs.back(), index), b_.CreateNot(masks.back()));
      consecutive = b_.CreateAnd(consecutive, b_.CreateAndReduce(in_line));
    }
    auto rows = [&](bool gather) {
      for_range(c64(0), kcur, [&](Value* kk) {
        Value* row = gep(buffer, offset(add(k0, kk), lane0));
        Value* to = gep(dst, mul(kk, width));
        for (size_t v = 0; v < offs.size(); ++v) {
          Value* from = gather ? b_.CreateInBoundsGEP(t_, row, offs[v]) : gep(row, c64(static_cast<int64_t>(v) * vlen));
          Value* got = gather ? b_.CreateMaskedGather(vt, from, elem_align, masks[v], Constant::getNullValue(vt))
                              : b_.CreateMaskedLoad(vt, from, elem_align, masks[v], Constant::getNullValue(vt));
          b_.CreateAlignedStore(got, gep(to, c64(static_cast<int64_t>(v) * vlen)), elem_align);
        }
      });
    };
    if_else(consecutive, [&] { rows(false); }, [&] { rows(true); });
  }

  /// The mr x nr tile at rows r0 (mvalid inside the output), columns c0 (nvalid
  /// inside): the support microkernel, then the epilogue on the last k block.
  void microkernel(Value* ip, Value* k0, Value* kcur, Value* cs, Value* first, Value* last, Value* r0, Value* mvalid, Value* c0,
                   Value* nvalid, Value* fetch_at, Value* fetch_count) {
    // Not the last k block: the tile goes back to scratch. The last: the epilogue.
    Value* out = b_.CreateSelect(last, tile_, cs);
    auto call = [&](FunctionCallee micro, Value* a) {
      std::vector<Value*> args{a, bp_, kcur, first, cs, out};
      if (affine_b_) args.insert(args.end(), {fetch_at, fetch_count});
      b_.CreateCall(micro, args);
    };
    auto packed = [&] { call(micro_packed_, gep(ap_, mul(ip, g_.mr * g_.kc))); };
    auto in_place = [&] {
      // a's own rows from k0 (rows past the output's end read its last row; their
      // results are never stored).
      AllocaInst* rows = h_.entry_alloca(ArrayType::get(b_.getPtrTy(), static_cast<uint64_t>(g_.mr)), "g.arows");
      for (int64_t p = 0; p < g_.mr; ++p) {
        Value* r = smin(add(r0, c64(p)), b_.CreateSub(m_, c64(1)));
        Value* row = gep(a_base_, b_.CreateAdd(b_.CreateMul(r, a_row_stride_), k0));
        b_.CreateStore(row, b_.CreateConstInBoundsGEP1_64(b_.getPtrTy(), rows, static_cast<uint64_t>(p)));
      }
      call(micro_rows_, rows);
    };
    // On the last k block, the epilogue's rows are fetched while the microkernel runs.
    if (!epilogue_streams_.empty()) if_else(last, [&] { prefetch_epilogue(r0, c0); }, [] {});
    if (affine_a_) if_else(in_place_, in_place, packed);
    else packed();
    if_else(last, [&] { epilogue(r0, mvalid, c0, nvalid); }, [] {});
  }

  /// A buffer the epilogue reads or writes row by row at the output's points: a store's target,
  /// or a load in a stored value whose offset moves with the output's row.
  struct Stream {
    int buffer;
    ExprRef offset;
    DType dtype;
    bool write;
  };

  /// The epilogue's streams (see Stream). Only they are worth fetching ahead: a load that does
  /// not move with the row (a bias) stays in L1 across the tiles.
  std::vector<Stream> find_epilogue_streams() const {
    std::vector<Stream> streams;
    if (g_.m_var < 0) return streams;
    std::vector<const Expr*> loads;
    std::unordered_set<const Expr*> seen;
    for (const Store& s : k_.stores) {
      streams.push_back({s.buffer, s.offset, k_.buffers.at(static_cast<size_t>(s.buffer)).dtype, true});
      const size_t known = loads.size();
      collect_loads(s.value, loads, seen);
      for (size_t i = known; i < loads.size(); ++i)
        if (mentions(loads[i]->args[0], ExprKind::LoopVar, g_.m_var))
          streams.push_back({loads[i]->index, loads[i]->args[0], loads[i]->dtype, false});
    }
    return streams;
  }
  std::vector<Stream> epilogue_streams_; // find_epilogue_streams(), once per kernel

  /// Prefetches the cache lines of the epilogue's streams over the tile at rows r0, columns c0
  /// (clamped into the output): the epilogue runs once per tile, right after the microkernel, and
  /// its loads and write-allocates would otherwise each wait for memory, row by row.
  /// (A loop over the rows, kept rolled: unrolled, these prefetches were two thirds of a GEMM
  /// kernel's IR before optimization and about a quarter of its compile time; rolled, they cost a
  /// few instructions a row, once a tile.)
  void prefetch_epilogue(Value* r0, Value* c0) {
    Function* prefetch = Intrinsic::getDeclaration(fn()->getParent(), Intrinsic::prefetch, {b_.getPtrTy()});
    for_range(c64(0), c64(g_.mr), [&](Value* p) {
      h_.push_scope();
      h_.set_loop_var(g_.m_var, smin(add(r0, p), b_.CreateSub(m_, c64(1))));
      for (const Stream& s : epilogue_streams_) {
        const int64_t line = 64 / static_cast<int64_t>(dtype_size(s.dtype));
        // Each line-sized chunk of the tile's row by its first and last element: the row need
        // not start on a line, so a chunk can straddle two lines.
        for (int64_t q = 0; q < g_.nr; q += line)
          for (int64_t qq : {q, std::min(q + line - 1, g_.nr - 1)}) {
            if (qq != q && qq % line == 0) continue;
            h_.push_scope(); // the offset at another column: not the cached one
            if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, smin(add(c0, c64(qq)), b_.CreateSub(n_, c64(1))));
            Value* bytes = mul(h_.eval(s.offset), static_cast<int64_t>(dtype_size(s.dtype)));
            Value* at = b_.CreateInBoundsGEP(b_.getInt8Ty(), h_.buffer(s.buffer), bytes);
            b_.CreateCall(prefetch, {at, b_.getInt32(s.write ? 1 : 0), b_.getInt32(3), b_.getInt32(1)});
            if (g_.n_var >= 0) h_.set_loop_var(g_.n_var, nullptr);
            h_.pop_scope();
          }
      }
      h_.set_loop_var(g_.m_var, nullptr);
      h_.pop_scope();
    }, 1, LoopHint::Rolled);
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

std::string GemmSupport::name() const {
  return "kiln_gemm_" + std::string(dtype == DType::Float64 ? "f64" : "f32") + "_" + std::to_string(mr) + "x" +
         std::to_string(nr);
}

std::string GemmSupport::module_name() const {
  switch (part) {
  case SupportPart::Packs: return name() + "_packs";
  case SupportPart::Micro: return name() + "_micro";
  case SupportPart::MicroFetching: return name() + "_micro_fetching";
  }
  return name();
}

std::string GemmSupport::defined_symbol() const {
  switch (part) {
  case SupportPart::Packs: return name() + kPackBtSuffix;
  case SupportPart::Micro: return name() + micro_suffix(MicroForm::Packed, Fetching::No);
  case SupportPart::MicroFetching: return name() + micro_suffix(MicroForm::Packed, Fetching::Yes);
  }
  return name();
}

std::vector<GemmSupport> gemm_supports_of(const Kernel& k) {
  KILN_ASSERT(k.form == KernelForm::Gemm && k.gemm && k.gemm->mr > 0 && !k.reductions.empty(),
              "gemm_supports_of without a CPU GEMM form: " + k.name);
  const GemmSupport packs{k.reductions[0].dtype, k.gemm->mr, k.gemm->nr, SupportPart::Packs};
  GemmSupport micro = packs;
  micro.part = GemmEmitter::strided_b(k) ? SupportPart::MicroFetching : SupportPart::Micro;
  return {packs, micro};
}

std::unique_ptr<Module> emit_gemm_support_module(const GemmSupport& s, LLVMContext& ctx) {
  auto m = std::make_unique<Module>(s.name(), ctx);
  SupportEmitter(s, *m).emit();
  return m;
}

void emit_gemm(const Kernel& k, GemmHost& host, Value* begin, Value* end, Value* scratch) {
  KILN_ASSERT(k.form == KernelForm::Gemm && k.gemm && k.gemm->mr > 0,
              "emit_gemm without a CPU GEMM form (a kernel planned for another target?): " + k.name);
  GemmEmitter(k, host).emit(begin, end, scratch);
}

} // namespace kiln::codegen

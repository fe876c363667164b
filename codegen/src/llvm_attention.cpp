// The CPU attention kernel (KernelForm::Attention; the arithmetic is AttentionSpec's, kernel_ir.h).
//
// A task is one batch point and a block of kAttentionQueryBlock query rows. Its scratch holds
// the running maxima m and sums z of its rows and their output rows o (never the [L, S] scores):
//   for each block of kAttentionKeyBlock keys (with causal, only keys some row of the block sees):
//     pack the key block transposed, kt[d][jj] (so a row's scores vectorize across keys);
//     for each query row: the block's scores sc[jj] (d outer, fmuladd in order of d), scaled
//       and masked; the block max; p = exp(sc - c); z = z * a + sum(p); o = o * a + p V_blk.
//   out = o / z (0 where z is 0: every key masked).
// Rows are independent and the key blocks fixed, so tasks, chunks and threads never change a bit.
#include "codegen/src/llvm_attention.h"

#include <functional>
#include <limits>

#include <llvm/IR/Intrinsics.h>

#include "codegen/src/llvm_math.h"
#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {

class AttentionEmitter {
public:
  AttentionEmitter(const Kernel& k, GemmHost& host)
      : a_(*k.attention), h_(host), b_(host.builder()), ctx_(b_.getContext()) {
    KILN_ASSERT(k.form == KernelForm::Attention && (a_.dtype == DType::Float32 || a_.dtype == DType::Float64),
                "not an attention kernel: " + k.name);
    t_ = a_.dtype == DType::Float64 ? Type::getDoubleTy(ctx_) : Type::getFloatTy(ctx_);
    elem_ = a_.dtype == DType::Float64 ? 8 : 4;
  }

  void emit(Value* begin, Value* end, Value* scratch) {
    bh_ = h_.eval(a_.bh);
    l_ = h_.eval(a_.l);
    s_ = h_.eval(a_.s);
    e_ = h_.eval(a_.e);
    ev_ = h_.eval(a_.ev);
    scale_ = h_.eval(a_.scale);
    // scratch: kt (e x key block), sc (key block), o (query block x ev), m, z (query block)
    kt_ = scratch;
    sc_ = gep(kt_, region(mul(e_, kAttentionKeyBlock)));
    o_ = gep(sc_, region(c64(kAttentionKeyBlock)));
    m_ = gep(o_, region(mul(ev_, kAttentionQueryBlock)));
    z_ = gep(m_, region(c64(kAttentionQueryBlock)));
    Value* qblocks = ceil_div(l_, kAttentionQueryBlock);
    for_range(begin, end, [&](Value* t) {
      Value* bh = b_.CreateUDiv(t, qblocks);
      Value* i0 = mul(b_.CreateURem(t, qblocks), kAttentionQueryBlock);
      h_.set_loop_var(0, bh);
      emit_task(bh, i0, smin(c64(kAttentionQueryBlock), b_.CreateSub(l_, i0)));
      h_.set_loop_var(0, nullptr);
    });
  }

private:
  const AttentionSpec& a_;
  GemmHost& h_;
  IRBuilder<>& b_;
  LLVMContext& ctx_;
  Type* t_ = nullptr;
  int64_t elem_ = 4;
  Value *bh_ = nullptr, *l_ = nullptr, *s_ = nullptr, *e_ = nullptr, *ev_ = nullptr, *scale_ = nullptr;
  Value *kt_ = nullptr, *sc_ = nullptr, *o_ = nullptr, *m_ = nullptr, *z_ = nullptr;

  Value* c64(int64_t v) { return b_.getInt64(v); }
  Value* fc(double v) { return ConstantFP::get(t_, v); }
  Value* gep(Value* p, Value* i) { return b_.CreateInBoundsGEP(t_, p, i); }
  Value* add(Value* a, Value* b) { return b_.CreateAdd(a, b, "", true, true); }
  Value* mul(Value* a, Value* b) { return b_.CreateMul(a, b, "", true, true); }
  Value* mul(Value* a, int64_t c) { return mul(a, c64(c)); }
  Value* smin(Value* a, Value* b) { return b_.CreateBinaryIntrinsic(Intrinsic::smin, a, b); }
  Value* ceil_div(Value* a, int64_t c) { return b_.CreateUDiv(b_.CreateAdd(a, c64(c - 1)), c64(c)); }
  Value* load(Value* p) { return b_.CreateLoad(t_, p); }
  void store(Value* v, Value* p) { b_.CreateStore(v, p); }
  /// Elements of a scratch region of `elems` elements, rounded up to 64 bytes.
  Value* region(Value* elems) {
    const int64_t per = 64 / elem_;
    return mul(b_.CreateUDiv(b_.CreateAdd(elems, c64(per - 1)), c64(per)), per);
  }
  /// Element `i` of buffer `b`.
  Value* at(int b, Value* i) { return gep(h_.buffer(b), i); }

  /// for (v = start; v < end; ++v) body(v), in a scope of cached expressions of its own.
  void for_range(Value* start, Value* end, const std::function<void(Value*)>& body) {
    emit_for(b_, h_.entry_alloca(b_.getInt64Ty(), "a.iv"), start, end, 1, [&](Value* v) {
      h_.push_scope();
      body(v);
      h_.pop_scope();
    });
  }

  void emit_task(Value* bh, Value* i0, Value* rows) {
    const double inf = std::numeric_limits<double>::infinity();
    for_range(c64(0), rows, [&](Value* r) {
      store(fc(-inf), gep(m_, r));
      store(fc(0), gep(z_, r));
      Value* orow = gep(o_, mul(r, ev_));
      for_range(c64(0), ev_, [&](Value* c) { store(fc(0), gep(orow, c)); });
    });
    // with causal, the keys after the block's last row are masked in every row: skipped (exactly:
    // a block of masked keys leaves m, z and o as they are)
    Value* keys = a_.causal ? smin(s_, add(i0, rows)) : s_;
    Value* kbase = mul(bh, s_); // row of key 0 of this batch point in k and v
    for_range(c64(0), ceil_div(keys, kAttentionKeyBlock), [&](Value* kb) {
      Value* j0 = mul(kb, kAttentionKeyBlock);
      Value* jn = smin(c64(kAttentionKeyBlock), b_.CreateSub(keys, j0));
      for_range(c64(0), jn, [&](Value* jj) { // kt[d][jj] = k[j0 + jj][d]
        Value* krow = at(a_.k, mul(add(kbase, add(j0, jj)), e_));
        for_range(c64(0), e_, [&](Value* d) { store(load(gep(krow, d)), gep(kt_, add(mul(d, kAttentionKeyBlock), jj))); });
      });
      for_range(c64(0), rows, [&](Value* r) { emit_row(bh, add(i0, r), r, j0, jn, kbase); });
    });
    for_range(c64(0), rows, [&](Value* r) {
      Value* z = load(gep(z_, r));
      Value* empty = b_.CreateFCmpOEQ(z, fc(0));
      Value* orow = gep(o_, mul(r, ev_));
      Value* out = at(a_.out, mul(add(mul(bh, l_), add(i0, r)), ev_));
      for_range(c64(0), ev_, [&](Value* c) {
        store(b_.CreateSelect(empty, fc(0), b_.CreateFDiv(load(gep(orow, c)), z)), gep(out, c));
      });
    });
  }

  /// Query row i (row r of the task) against the keys [j0, j0 + jn).
  void emit_row(Value* bh, Value* i, Value* r, Value* j0, Value* jn, Value* kbase) {
    const double inf = std::numeric_limits<double>::infinity();
    h_.set_loop_var(1, i);
    for_range(c64(0), jn, [&](Value* jj) { store(fc(0), gep(sc_, jj)); });
    Value* qrow = at(a_.q, mul(add(mul(bh, l_), i), e_));
    for_range(c64(0), e_, [&](Value* d) {
      Value* qd = load(gep(qrow, d));
      Value* ktrow = gep(kt_, mul(d, kAttentionKeyBlock));
      for_range(c64(0), jn, [&](Value* jj) {
        Value* p = gep(sc_, jj);
        store(emit_fmuladd(b_, qd, load(gep(ktrow, jj)), load(p)), p);
      });
    });
    AllocaInst* mx = h_.entry_alloca(t_, "a.max");
    Value* m_old = load(gep(m_, r));
    store(m_old, mx);
    for_range(c64(0), jn, [&](Value* jj) {
      Value* p = gep(sc_, jj);
      Value* x = b_.CreateFMul(load(p), scale_);
      Value* j = add(j0, jj);
      if (a_.causal) x = b_.CreateSelect(b_.CreateICmpSGT(j, i), fc(-inf), x);
      if (a_.mask) {
        h_.set_reduce_var(j);
        Value* mv = h_.eval(a_.mask);
        h_.set_reduce_var(nullptr);
        x = a_.mask->dtype == DType::Bool ? b_.CreateSelect(mv, x, fc(-inf)) : b_.CreateFAdd(x, mv);
      }
      store(x, p);
      store(b_.CreateBinaryIntrinsic(Intrinsic::maximum, b_.CreateLoad(t_, mx), x), mx);
    });
    Value* m_new = b_.CreateLoad(t_, mx);
    Value* c = b_.CreateSelect(b_.CreateFCmpOEQ(m_new, fc(-inf)), fc(0), m_new);
    Value* alpha = emit_math(b_, MathFn::Exp, b_.CreateFSub(m_old, c));
    for_range(c64(0), jn, [&](Value* jj) {
      Value* p = gep(sc_, jj);
      store(emit_math(b_, MathFn::Exp, b_.CreateFSub(load(p), c)), p);
    });
    AllocaInst* sum = h_.entry_alloca(t_, "a.sum");
    store(fc(0), sum);
    for_range(c64(0), jn, [&](Value* jj) { store(b_.CreateFAdd(b_.CreateLoad(t_, sum), load(gep(sc_, jj))), sum); });
    Value* zp = gep(z_, r);
    store(b_.CreateFAdd(b_.CreateFMul(load(zp), alpha), b_.CreateLoad(t_, sum)), zp);
    store(m_new, gep(m_, r));
    Value* orow = gep(o_, mul(r, ev_));
    for_range(c64(0), ev_, [&](Value* col) {
      Value* p = gep(orow, col);
      store(b_.CreateFMul(load(p), alpha), p);
    });
    for_range(c64(0), jn, [&](Value* jj) {
      Value* pj = load(gep(sc_, jj));
      Value* vrow = at(a_.v, mul(add(kbase, add(j0, jj)), ev_));
      for_range(c64(0), ev_, [&](Value* col) {
        Value* p = gep(orow, col);
        store(emit_fmuladd(b_, pj, load(gep(vrow, col)), load(p)), p);
      });
    });
    h_.set_loop_var(1, nullptr);
  }
};

} // namespace

void emit_attention(const Kernel& k, GemmHost& host, Value* begin, Value* end, Value* scratch) {
  KILN_ASSERT(k.attention.has_value(), "emit_attention without an attention kernel: " + k.name);
  AttentionEmitter(k, host).emit(begin, end, scratch);
}

} // namespace kiln::codegen

// The CPU attention kernel (KernelForm::Attention; the arithmetic is AttentionSpec's, kernel_ir.h).
//
// A task is one batch point and a block of kAttentionQueryBlock query rows. Its scratch holds
// the running maxima m and sums z of its rows and their output rows o (never the [L, S] scores):
//   for each block of kAttentionKeyBlock keys (with causal, only keys some row of the block sees):
//     pack the key block transposed, kt[d][jj] (so a row's scores vectorize across keys);
//     for each group of AttentionSpec::rows query rows: their scores as one vector of the
//       block's keys per row, accumulated in registers over d (fmuladd in order of d); per
//       row, scaled and masked, the block max, p = exp(s - c), z = z * a + sum(p), then p times the
//       dropout factor (with dropout); then o = o * a + p V_blk by tiles of two 64-byte column
//       vectors, V's vectors shared by the group (skipped when only lse is stored).
//   out = o / z (0 where z is 0: every key masked); lse = c + log(z) (-inf where z is 0).
// Rows are independent and the key blocks fixed, so tasks, chunks and threads never change a bit.
//
// The backward (AttentionSpec::backward; kernel_ir.h's AttentionBackward), FlashAttention-2 style: a
// task is one batch point. The forward stored each row's logsumexp (lse), so no pass recomputes the
// row maxima and sums: D = dout . out per row, then per key block, k and v packed
// transposed, per chunk of kAttentionQueryBlock rows: per group of rows, the scores and dP = dout v^T
// as vectors of the block's keys (the forward's register accumulation), p = exp(s - lse) and g = p (dP - D) scale
// per key into the chunk's p and g; then dv_j += p dout_i and dk_j += g q_i as tiles of keys x 2
// column vectors in registers over the chunk's rows, and dq_i += g k_j as tiles of rows x 2 column
// vectors over the block's keys (small products, not axpys). The [L, S] weights are never in memory.
#include "codegen/src/llvm_attention.h"

#include <algorithm>
#include <functional>
#include <limits>

#include <llvm/IR/Intrinsics.h>

#include "codegen/src/llvm_math.h"
#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {

/// The backward's register tiles: 64-byte column vectors of a tile (its tile_rows() rows or keys x
/// kColumnVectors accumulators stay in vector registers over a chunk of rows or a block of keys).
constexpr int64_t kColumnVectors = 2;

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
    if (a_.backward) return emit_backward(begin, end, scratch);
    // scratch (attention_scratch_bytes): kt (e x key block), sc (4 rows of a key block), o (query
    // block x ev rounded up to width()), m, z (query block)
    kt_ = scratch;
    sc_ = gep(kt_, region(mul(e_, kAttentionKeyBlock)));
    o_ = gep(sc_, region(c64(4 * kAttentionKeyBlock)));
    m_ = gep(o_, region(mul(o_stride(), kAttentionQueryBlock)));
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
  Value *vt_ = nullptr, *g_ = nullptr, *d_ = nullptr; // the backward's v^T block, g of the rows, D

  Value* c64(int64_t v) { return b_.getInt64(v); }
  Value* fc(double v) { return ConstantFP::get(t_, v); }
  Value* gep(Value* p, Value* i) { return b_.CreateInBoundsGEP(t_, p, i); }
  Value* add(Value* a, Value* b) { return b_.CreateAdd(a, b, "", true, true); }
  Value* mul(Value* a, Value* b) { return b_.CreateMul(a, b, "", true, true); }
  Value* mul(Value* a, int64_t c) { return mul(a, c64(c)); }
  Value* smin(Value* a, Value* b) { return b_.CreateBinaryIntrinsic(Intrinsic::smin, a, b); }
  Value* smax(Value* a, Value* b) { return b_.CreateBinaryIntrinsic(Intrinsic::smax, a, b); }
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

  /// The vector of kAttentionKeyBlock scores of one row.
  FixedVectorType* score_type() { return FixedVectorType::get(t_, static_cast<unsigned>(kAttentionKeyBlock)); }
  /// Elements of a 64-byte vector: the width of o's column vectors (rows of o are padded to it).
  int64_t width() const { return 64 / elem_; }
  FixedVectorType* column_type() { return FixedVectorType::get(t_, static_cast<unsigned>(width())); }
  /// Scratch vectors start at multiples of 64 bytes (the regions, rows and offsets are).
  static Align vector_align(FixedVectorType*) { return Align(64); }
  /// Elements of a row of o in scratch: ev rounded up to a tile of kColumnVectors vectors of width().
  Value* o_stride() { return mul(ceil_div(ev_, kColumnVectors * width()), kColumnVectors * width()); }

  void emit_task(Value* bh, Value* i0, Value* rows) {
    const double inf = std::numeric_limits<double>::infinity();
    for_range(c64(0), rows, [&](Value* r) {
      store(fc(-inf), gep(m_, r));
      store(fc(0), gep(z_, r));
      Value* orow = gep(o_, mul(r, o_stride()));
      for_range(c64(0), o_stride(), [&](Value* c) { store(fc(0), gep(orow, c)); });
    });
    // with causal, the keys after the block's last row are masked in every row: skipped (exactly:
    // a block of masked keys leaves m, z and o as they are)
    Value* keys = a_.causal ? smin(s_, add(i0, rows)) : s_;
    Value* kbase = mul(bh, s_); // row of key 0 of this batch point in k and v
    for_range(c64(0), ceil_div(keys, kAttentionKeyBlock), [&](Value* kb) {
      Value* j0 = mul(kb, kAttentionKeyBlock);
      Value* jn = smin(c64(kAttentionKeyBlock), b_.CreateSub(keys, j0));
      pack(a_.k, e_, kbase, j0, jn, kt_);
      // groups of a_.rows query rows; a short last group repeats the last row (its results unused)
      emit_for(b_, h_.entry_alloca(b_.getInt64Ty(), "a.group"), c64(0), rows, a_.rows, [&](Value* g) {
        h_.push_scope();
        std::vector<Value*> slot, row;
        for (int64_t r = 0; r < a_.rows; ++r) {
          slot.push_back(add(g, c64(r)));
          row.push_back(add(i0, smin(add(g, c64(r)), b_.CreateSub(rows, c64(1)))));
        }
        Value* live = live_vectors(row.back(), j0, jn);
        scores(bh, row, live);
        std::vector<Value*> alpha;
        // with causal and no mask, p of the vectors past the group's last row is exp(-inf) = 0 without
        // an exp (a mask could make such a score NaN: +inf or NaN added to -inf); otherwise a constant
        // trip count (a run-time one measured ~1% slower at T = 1024)
        Value* exp_lanes = a_.causal && !a_.mask ? mul(live, width()) : c64(kAttentionKeyBlock);
        for (int64_t r = 0; r < a_.rows; ++r)
          alpha.push_back(softmax_step(row[r], slot[r], gep(sc_, c64(r * kAttentionKeyBlock)), j0, jn, exp_lanes));
        if (a_.out >= 0) accumulate(slot, row, alpha, kbase, j0, jn);
        h_.pop_scope();
      });
    });
    for_range(c64(0), rows, [&](Value* r) {
      Value* z = load(gep(z_, r));
      Value* empty = b_.CreateFCmpOEQ(z, fc(0));
      Value* row = add(mul(bh, l_), add(i0, r));
      if (a_.lse >= 0) store(row_lse(load(gep(m_, r)), z, empty), at(a_.lse, row));
      if (a_.out < 0) return;
      Value* orow = gep(o_, mul(r, o_stride()));
      Value* out = at(a_.out, mul(row, ev_));
      for_range(c64(0), ev_, [&](Value* c) {
        store(b_.CreateSelect(empty, fc(0), b_.CreateFDiv(load(gep(orow, c)), z)), gep(out, c));
      });
    });
  }

  /// A row's logsumexp from its running max m and sum z: c + log(z) with c = m or 0 where m is -inf;
  /// -inf where z is 0 (`empty`: every key masked).
  Value* row_lse(Value* m, Value* z, Value* empty) {
    const double inf = std::numeric_limits<double>::infinity();
    Value* c = b_.CreateSelect(b_.CreateFCmpOEQ(m, fc(-inf)), fc(0), m);
    return b_.CreateSelect(empty, fc(-inf), b_.CreateFAdd(c, emit_math(b_, MathFn::Log, z)));
  }

  /// packed[d][jj] = buffer[base + j0 + jj][d] (rows of `width` elements) for jj < jn, 0 for
  /// jn <= jj < kAttentionKeyBlock: a block of k (or v) transposed.
  void pack(int buffer, Value* width, Value* base, Value* j0, Value* jn, Value* packed) {
    for_range(c64(0), jn, [&](Value* jj) {
      Value* row = at(buffer, mul(add(base, add(j0, jj)), width));
      for_range(c64(0), width, [&](Value* d) { store(load(gep(row, d)), gep(packed, add(mul(d, kAttentionKeyBlock), jj))); });
    });
    for_range(jn, c64(kAttentionKeyBlock), [&](Value* jj) {
      for_range(c64(0), width, [&](Value* d) { store(fc(0), gep(packed, add(mul(d, kAttentionKeyBlock), jj))); });
    });
  }

  /// The block's raw scores of query rows `row` (q . k_j, fmuladd in order of d) into sc, row r
  /// at sc + r * kAttentionKeyBlock.
  void scores(Value* bh, const std::vector<Value*>& row, Value* live) { dots(a_.q, e_, mul(bh, l_), row, kt_, sc_, live); }

  /// The 64-byte vectors of a key block [j0, j0 + jn) that some of query rows up to i_max sees (at
  /// least 1): the lanes past jn, and with causal the keys past i_max, are masked in every such row,
  /// so their scores are never read (mask_scores puts -inf there whatever they hold).
  Value* live_vectors(Value* i_max, Value* j0, Value* jn) {
    Value* lanes = jn;
    if (a_.causal) lanes = smin(lanes, add(b_.CreateSub(i_max, j0), c64(1)));
    lanes = smax(lanes, c64(1));
    return ceil_div(lanes, width());
  }

  /// body(n) for the value n in [1, count] of `n_value` (count where it is larger), each in a
  /// scope of cached expressions of its own: code specialized to a run-time count.
  void emit_cases(Value* n_value, int64_t count, const std::function<void(int64_t)>& body) {
    Function* f = b_.GetInsertBlock()->getParent();
    BasicBlock* done = BasicBlock::Create(ctx_, "a.cases.done", f);
    std::vector<BasicBlock*> cases;
    for (int64_t n = 1; n <= count; ++n) cases.push_back(BasicBlock::Create(ctx_, "a.case", f));
    SwitchInst* sw = b_.CreateSwitch(n_value, cases.back(), static_cast<unsigned>(count - 1));
    for (int64_t n = 1; n < count; ++n) sw->addCase(b_.getInt64(static_cast<uint64_t>(n)), cases[static_cast<size_t>(n - 1)]);
    for (int64_t n = 1; n <= count; ++n) {
      b_.SetInsertPoint(cases[static_cast<size_t>(n - 1)]);
      h_.push_scope();
      body(n);
      h_.pop_scope();
      b_.CreateBr(done);
    }
    b_.SetInsertPoint(done);
  }

  /// For rows `row` of `buffer` (rows of `width` elements from row `base`), their dot products with
  /// the packed block's keys (fmuladd in order of d) into dest + r * kAttentionKeyBlock: per row one
  /// accumulator per live 64-byte vector of keys (live_vectors), in registers over d; the other
  /// vectors of dest are 0.
  void dots(int buffer, Value* width, Value* base, const std::vector<Value*>& row, Value* packed, Value* dest, Value* live) {
    std::vector<Value*> xrow;
    for (Value* r : row) xrow.push_back(at(buffer, mul(add(base, r), width)));
    emit_cases(live, kAttentionKeyBlock / this->width(), [&](int64_t vectors) { dots_of(width, xrow, packed, dest, vectors); });
  }
  /// dots() with `vectors` live vectors.
  void dots_of(Value* width, const std::vector<Value*>& xrow, Value* packed, Value* dest, int64_t vectors) {
    FixedVectorType* vt = column_type();
    const auto w = static_cast<unsigned>(this->width());
    std::vector<AllocaInst*> acc;
    for (size_t x = 0; x < xrow.size() * static_cast<size_t>(vectors); ++x) {
      acc.push_back(h_.entry_alloca(vt, "a.acc"));
      store(Constant::getNullValue(vt), acc.back());
    }
    for_range(c64(0), width, [&](Value* d) {
      std::vector<Value*> kv;
      for (int64_t v = 0; v < vectors; ++v)
        kv.push_back(b_.CreateAlignedLoad(vt, gep(packed, add(mul(d, kAttentionKeyBlock), c64(v * this->width()))), vector_align(vt)));
      for (size_t r = 0; r < xrow.size(); ++r) {
        Value* xd = b_.CreateVectorSplat(w, load(gep(xrow[r], d)));
        for (int64_t v = 0; v < vectors; ++v) {
          AllocaInst* a = acc[r * static_cast<size_t>(vectors) + static_cast<size_t>(v)];
          store(emit_fmuladd(b_, xd, kv[static_cast<size_t>(v)], b_.CreateLoad(vt, a)), a);
        }
      }
    });
    for (size_t r = 0; r < xrow.size(); ++r)
      for (int64_t v = 0; v < kAttentionKeyBlock / this->width(); ++v) {
        Value* value = v < vectors ? static_cast<Value*>(b_.CreateLoad(vt, acc[r * static_cast<size_t>(vectors) + static_cast<size_t>(v)]))
                                   : Constant::getNullValue(vt);
        b_.CreateAlignedStore(value, gep(dest, c64(static_cast<int64_t>(r) * kAttentionKeyBlock + v * this->width())), vector_align(vt));
      }
  }

  /// Query row i (slot `slot` of the task's m, z and o) over the keys [j0, j0 + jn): scales and
  /// masks its scores in sc, turns them into p, updates m and z; returns the factor a of o. The
  /// lanes from `exp_lanes` on are -inf (causal, no mask: live_vectors): p is 0 there, stored
  /// without an exp.
  Value* softmax_step(Value* i, Value* slot, Value* sc, Value* j0, Value* jn, Value* exp_lanes) {
    const double inf = std::numeric_limits<double>::infinity();
    h_.push_scope();
    h_.set_loop_var(1, i);
    Value* m_old = load(gep(m_, slot));
    Value* m_new = mask_scores(i, sc, j0, jn, m_old);
    Value* c = b_.CreateSelect(b_.CreateFCmpOEQ(m_new, fc(-inf)), fc(0), m_new);
    Value* alpha = emit_math(b_, MathFn::Exp, b_.CreateFSub(m_old, c));
    for_range(c64(0), exp_lanes, [&](Value* jj) {
      Value* p = gep(sc, jj);
      store(emit_math(b_, MathFn::Exp, b_.CreateFSub(load(p), c)), p);
    });
    for_range(exp_lanes, c64(kAttentionKeyBlock), [&](Value* jj) { store(fc(0), gep(sc, jj)); });
    Value* sum = lane_sum(b_.CreateAlignedLoad(score_type(), sc, vector_align(score_type())));
    Value* zp = gep(z_, slot);
    store(b_.CreateFAdd(b_.CreateFMul(load(zp), alpha), sum), zp);
    store(m_new, gep(m_, slot));
    // the weights o takes are dropped, z's are not: p_j * z_j (the lanes from exp_lanes on hold p = 0)
    if (a_.dropout)
      for_range(c64(0), exp_lanes, [&](Value* jj) {
        Value* p = gep(sc, jj);
        store(b_.CreateFMul(load(p), dropout_factor(add(j0, jj))), p);
      });
    h_.set_loop_var(1, nullptr);
    h_.pop_scope();
    return alpha;
  }

  /// The dropout factor of key j for the query row bound to loop var 1 (AttentionSpec::dropout).
  /// (Past the last key it is some factor, 0 or dropout_scale(p), which multiplies a weight of 0.)
  Value* dropout_factor(Value* j) {
    h_.set_reduce_var(j);
    Value* z = h_.eval(a_.dropout);
    h_.set_reduce_var(nullptr);
    return z;
  }

  /// Scales and masks query row i's raw scores in sc (keys [j0, j0 + jn); the lanes past jn -inf),
  /// in place; returns the maximum of `start` and them (a tree of llvm.maximum over the block's
  /// vector: the same value as in order, maximum being exact). Loop var 1 is i.
  Value* mask_scores(Value* i, Value* sc, Value* j0, Value* jn, Value* start) {
    const double inf = std::numeric_limits<double>::infinity();
    if (!a_.mask) {
      mask_by_lane(i, sc, j0, jn);
    } else {
      // all kAttentionKeyBlock lanes (a constant trip count): the keys past jn are -inf, so p is 0 there
      for_range(c64(0), c64(kAttentionKeyBlock), [&](Value* jj) {
        Value* p = gep(sc, jj);
        Value* x = b_.CreateFMul(load(p), scale_);
        Value* j = add(j0, smin(jj, b_.CreateSub(jn, c64(1)))); // a key inside k (the mask is read there)
        if (a_.causal) x = b_.CreateSelect(b_.CreateICmpSGT(j, i), fc(-inf), x);
        h_.set_reduce_var(j);
        Value* mv = h_.eval(a_.mask);
        h_.set_reduce_var(nullptr);
        x = a_.mask->dtype == DType::Bool ? b_.CreateSelect(mv, x, fc(-inf)) : b_.CreateFAdd(x, mv);
        x = b_.CreateSelect(b_.CreateICmpSLT(jj, jn), x, fc(-inf));
        store(x, p);
      });
    }
    Value* block = b_.CreateAlignedLoad(score_type(), sc, vector_align(score_type()));
    return b_.CreateBinaryIntrinsic(Intrinsic::maximum, start, b_.CreateFPMaximumReduce(block));
  }

  /// mask_scores() without a mask, as vectors: lane jj keeps its scaled score where jj < jn and
  /// (causal) j0 + jj <= i, else -inf: one compare of the lane numbers (i32) with the last kept lane.
  void mask_by_lane(Value* i, Value* sc, Value* j0, Value* jn) {
    const double inf = std::numeric_limits<double>::infinity();
    Value* last = b_.CreateSub(jn, c64(1));
    if (a_.causal) last = smin(last, b_.CreateSub(i, j0));
    last = b_.CreateTrunc(smax(last, c64(-1)), b_.getInt32Ty()); // in [-1, 63]
    FixedVectorType* st = score_type();
    std::vector<Constant*> lanes;
    for (int64_t l = 0; l < kAttentionKeyBlock; ++l) lanes.push_back(b_.getInt32(static_cast<uint32_t>(l)));
    Value* keep = b_.CreateICmpSLE(ConstantVector::get(lanes), b_.CreateVectorSplat(static_cast<unsigned>(kAttentionKeyBlock), last));
    Value* x = b_.CreateFMul(b_.CreateAlignedLoad(st, sc, vector_align(st)), b_.CreateVectorSplat(static_cast<unsigned>(kAttentionKeyBlock), scale_));
    b_.CreateAlignedStore(b_.CreateSelect(keep, x, ConstantFP::get(st, -inf)), sc, vector_align(st));
  }

  /// The sum of the block's p in sum_lanes() order (kernel_ir.h): lane l of sum_lanes(dtype) lanes
  /// adds the keys jj = l (mod lanes) in order from 0, then lane l += lane l + h for h = lanes / 2, ..., 1.
  Value* lane_sum(Value* p) {
    const int64_t lanes = sum_lanes(a_.dtype);
    auto* vt = FixedVectorType::get(t_, static_cast<unsigned>(lanes));
    Value* acc = Constant::getNullValue(vt);
    for (int64_t c = 0; c < kAttentionKeyBlock; c += lanes) {
      std::vector<int> part;
      for (int64_t l = 0; l < lanes; ++l) part.push_back(static_cast<int>(c + l));
      acc = b_.CreateFAdd(acc, b_.CreateShuffleVector(p, part));
    }
    for (int64_t h = lanes / 2; h >= 1; h /= 2) {
      std::vector<int> upper;
      for (int64_t l = 0; l < lanes; ++l) upper.push_back(static_cast<int>(l < h ? l + h : l));
      acc = b_.CreateFAdd(acc, b_.CreateShuffleVector(acc, upper));
    }
    return b_.CreateExtractElement(acc, uint64_t{0});
  }

  /// o = o * a + sum over jj < jn of p_jj v[j0 + jj] for each row of the group (with causal, the keys
  /// j0 + jj <= the row only), by tiles of kColumnVectors vectors of width() columns (v's vectors
  /// past ev read with a mask), the group's rows together: rows x kColumnVectors accumulators in
  /// registers over the block's keys.
  void accumulate(const std::vector<Value*>& slot, const std::vector<Value*>& row, const std::vector<Value*>& alpha, Value* kbase,
                  Value* j0, Value* jn) {
    FixedVectorType* vt = column_type();
    const auto w = static_cast<unsigned>(width());
    const auto cols = static_cast<size_t>(kColumnVectors);
    Value* stride = o_stride();
    std::vector<AllocaInst*> acc;
    for (size_t x = 0; x < slot.size() * cols; ++x) acc.push_back(h_.entry_alloca(vt, "a.oacc"));
    for_column_tiles(ev_, [&](Value* c0, const std::vector<Value*>& in) {
      std::vector<Value*> op;
      for (size_t r = 0; r < slot.size(); ++r)
        for (size_t v = 0; v < cols; ++v) {
          op.push_back(gep(o_, add(mul(slot[r], stride), add(c0, c64(static_cast<int64_t>(v) * width())))));
          Value* o = b_.CreateAlignedLoad(vt, op.back(), vector_align(vt));
          store(b_.CreateFMul(o, b_.CreateVectorSplat(w, alpha[r])), acc[r * cols + v]);
        }
      // key jj for every row (seen: null) or, on the causal diagonal, for the rows that see it
      auto key_step = [&](Value* jj, bool diagonal) {
        Value* key = add(kbase, add(j0, jj));
        std::vector<Value*> vv;
        for (size_t v = 0; v < cols; ++v) vv.push_back(load_cols(tile_at(a_.v, ev_, key, c0, static_cast<int64_t>(v)), in[v]));
        for (size_t r = 0; r < slot.size(); ++r) {
          Value* p = b_.CreateVectorSplat(w, load(gep(sc_, add(c64(static_cast<int64_t>(r) * kAttentionKeyBlock), jj))));
          Value* seen = diagonal ? b_.CreateICmpSLE(add(j0, jj), row[r]) : nullptr;
          for (size_t v = 0; v < cols; ++v) accumulate_into(acc[r * cols + v], p, vv[v], seen);
        }
      };
      if (!a_.causal) {
        for_range(c64(0), jn, [&](Value* jj) { key_step(jj, false); });
      } else { // rows increase through the group: keys up to the first row's for all, then the diagonal
        Value* all = clamp(add(b_.CreateSub(row.front(), j0), c64(1)), jn);
        Value* some = clamp(add(b_.CreateSub(row.back(), j0), c64(1)), jn);
        for_range(c64(0), all, [&](Value* jj) { key_step(jj, false); });
        for_range(all, some, [&](Value* jj) { key_step(jj, true); });
      }
      for (size_t x = 0; x < op.size(); ++x) b_.CreateAlignedStore(b_.CreateLoad(vt, acc[x]), op[x], vector_align(vt));
    });
  }

  /// acc = fmuladd(f, x, acc), or, where `seen` (an i1, or null: always) is false, acc as it is: a
  /// pair that causal masks is skipped, not multiplied by its 0 (which would let a non-finite x in).
  void accumulate_into(AllocaInst* acc, Value* f, Value* x, Value* seen) {
    Value* old = b_.CreateLoad(column_type(), acc);
    Value* sum = emit_fmuladd(b_, f, x, old);
    store(seen ? b_.CreateSelect(seen, sum, old) : sum, acc);
  }

  /// v clamped to [0, hi] (i64).
  Value* clamp(Value* v, Value* hi) { return smin(smax(v, c64(0)), hi); }

  // --- the backward (kernel_ir.h, AttentionBackward) -------------------------------------------

  /// Column vectors of width() lanes: lane l of the vector at column c0 is inside a row of `width`.
  Value* inside(Value* c0, Value* width) {
    const auto w = static_cast<unsigned>(this->width());
    std::vector<Constant*> lanes;
    for (unsigned l = 0; l < w; ++l) lanes.push_back(b_.getInt64(l));
    return b_.CreateICmpSLT(b_.CreateAdd(b_.CreateVectorSplat(w, c0), ConstantVector::get(lanes)), b_.CreateVectorSplat(w, width));
  }
  Value* load_cols(Value* p, Value* in) {
    return b_.CreateMaskedLoad(column_type(), p, Align(static_cast<uint64_t>(elem_)), in, Constant::getNullValue(column_type()));
  }
  void store_cols(Value* v, Value* p, Value* in) { b_.CreateMaskedStore(v, p, Align(static_cast<uint64_t>(elem_)), in); }
  /// Rows [first, end) by groups: body(rows) for groups of a_.rows rows, then for the rows left one by one.
  void for_row_groups(Value* first, Value* end, const std::function<void(const std::vector<Value*>&)>& body) {
    Value* full = add(first, mul(b_.CreateSDiv(b_.CreateSub(end, first), c64(a_.rows)), a_.rows));
    auto groups = [&](Value* from, Value* to, int64_t n) {
      emit_for(b_, h_.entry_alloca(b_.getInt64Ty(), "a.group"), from, to, n, [&](Value* g) {
        h_.push_scope();
        std::vector<Value*> rows;
        for (int64_t r = 0; r < n; ++r) rows.push_back(add(g, c64(r)));
        body(rows);
        h_.pop_scope();
      });
    };
    groups(first, full, a_.rows);
    if (a_.rows > 1) groups(full, end, 1);
  }
  /// The first query row that sees a key of the block starting at j0 (with causal, row j0).
  Value* first_row(Value* j0) { return a_.causal ? smin(j0, l_) : c64(0); }

  void emit_backward(Value* begin, Value* end, Value* scratch) {
    // scratch (attention_scratch_bytes): kt (e x key block), vt (ev x key block), p and g (a chunk of
    // kAttentionQueryBlock rows of a key block each), then D per query row of the batch point
    kt_ = scratch;
    vt_ = gep(kt_, region(mul(e_, kAttentionKeyBlock)));
    sc_ = gep(vt_, region(mul(ev_, kAttentionKeyBlock)));
    g_ = gep(sc_, region(c64(kAttentionQueryBlock * kAttentionKeyBlock)));
    d_ = gep(g_, region(c64(kAttentionQueryBlock * kAttentionKeyBlock)));
    for_range(begin, end, [&](Value* bh) {
      h_.set_loop_var(0, bh);
      row_statistics(bh);
      zero_gradients(bh);
      gradients(bh);
      h_.set_loop_var(0, nullptr);
    });
  }

  /// Per query row of batch point bh, D = dout . out (fmuladd in order of columns).
  void row_statistics(Value* bh) {
    for_range(c64(0), l_, [&](Value* i) {
      Value* row = mul(add(mul(bh, l_), i), ev_);
      AllocaInst* acc = h_.entry_alloca(t_, "a.d");
      store(fc(0), acc);
      for_range(c64(0), ev_, [&](Value* c) {
        store(emit_fmuladd(b_, load(at(a_.dout, add(row, c))), load(at(a_.out, add(row, c))), load(acc)), acc);
      });
      store(load(acc), gep(d_, i));
    });
  }

  /// dq, dk and dv (those written) of batch point bh = 0.
  void zero_gradients(Value* bh) {
    auto zero = [&](int buffer, Value* rows, Value* width) {
      if (buffer < 0) return;
      Value* n = mul(rows, width);
      Value* base = mul(bh, n);
      for_range(c64(0), n, [&](Value* x) { store(fc(0), at(buffer, add(base, x))); });
    };
    zero(a_.dq, l_, e_);
    zero(a_.dk, s_, e_);
    zero(a_.dv, s_, ev_);
  }

  /// The main pass of batch point bh: per key block, per chunk of kAttentionQueryBlock query rows, p and g
  /// of the chunk's rows (by groups of a_.rows), then the chunk's updates as register-tiled products.
  void gradients(Value* bh) {
    Value* kbase = mul(bh, s_);
    Value* qbase = mul(bh, l_);
    const bool need_g = a_.dq >= 0 || a_.dk >= 0;
    for_range(c64(0), ceil_div(s_, kAttentionKeyBlock), [&](Value* kb) {
      Value* j0 = mul(kb, kAttentionKeyBlock);
      Value* jn = smin(c64(kAttentionKeyBlock), b_.CreateSub(s_, j0));
      pack(a_.k, e_, kbase, j0, jn, kt_);
      if (need_g) pack(a_.v, ev_, kbase, j0, jn, vt_);
      Value* first = first_row(j0);
      emit_for(b_, h_.entry_alloca(b_.getInt64Ty(), "a.chunk"), first, l_, kAttentionQueryBlock, [&](Value* i0) {
        h_.push_scope();
        Value* n = smin(c64(kAttentionQueryBlock), b_.CreateSub(l_, i0));
        for_row_groups(i0, add(i0, n), [&](const std::vector<Value*>& rows) {
          Value* lane0 = mul(b_.CreateSub(rows[0], i0), kAttentionKeyBlock); // the group's first row in p and g
          Value* live = live_vectors(rows.back(), j0, jn);
          dots(a_.q, e_, qbase, rows, kt_, gep(sc_, lane0), live);
          if (need_g) dots(a_.dout, ev_, qbase, rows, vt_, gep(g_, lane0), live);
          for (size_t r = 0; r < rows.size(); ++r) {
            Value* at_r = add(lane0, c64(static_cast<int64_t>(r) * kAttentionKeyBlock));
            weights(bh, rows[r], gep(sc_, at_r), need_g ? gep(g_, at_r) : nullptr, j0, jn, mul(live, width()));
          }
        });
        Value* keys = add(kbase, j0);
        Value* chunk = add(qbase, i0); // the chunk's first row in q, dout and dq
        Value* lag = b_.CreateSub(i0, j0); // with causal, row i of the chunk sees key jj of the block where jj <= i + lag
        if (a_.dv >= 0) update_keys(a_.dv, ev_, a_.dout, chunk, n, sc_, keys, jn, lag);
        if (a_.dk >= 0) update_keys(a_.dk, e_, a_.q, chunk, n, g_, keys, jn, lag);
        if (a_.dq >= 0) update_rows(chunk, n, keys, jn, lag);
        h_.pop_scope();
      });
    });
  }

  /// Query row i of batch point bh over the keys [j0, j0 + jn): its scores in sc (raw) become
  /// p = exp(s - L) (L the row's lse, +inf where -inf), and (where g is not null) its dP in g becomes
  /// (p * (dP - D)) * scale, 0 where s is -inf (masked keys, and those past jn).
  /// The dropout factors are drawn for the lanes below `live_lanes` only: past them every row of the
  /// group masks its keys (live_vectors), so p is 0 and g is 0 there whatever the factor.
  void weights(Value* bh, Value* i, Value* sc, Value* g, Value* j0, Value* jn, Value* live_lanes) {
    const double inf = std::numeric_limits<double>::infinity();
    h_.push_scope();
    h_.set_loop_var(1, i);
    mask_scores(i, sc, j0, jn, fc(0));
    Value* lse = load(at(a_.lse, add(mul(bh, l_), i)));
    Value* shift = b_.CreateSelect(b_.CreateFCmpOEQ(lse, fc(-inf)), fc(inf), lse);
    Value* d = load(gep(d_, i));
    auto lanes = [&](Value* from, Value* to, bool dropout) {
      for_range(from, to, [&](Value* jj) {
        Value* s = load(gep(sc, jj));
        Value* p = emit_math(b_, MathFn::Exp, b_.CreateFSub(s, shift));
        Value* z = dropout ? dropout_factor(add(j0, jj)) : nullptr;
        store(z ? b_.CreateFMul(p, z) : p, gep(sc, jj)); // dv's weight: the dropped one
        if (!g) return;
        // a masked key (s = -inf) adds nothing: g = 0 whatever dP holds (dots() left 0 in the skipped vectors)
        Value* dp = load(gep(g, jj));
        if (z) dp = b_.CreateFMul(dp, z);
        Value* gj = b_.CreateFMul(b_.CreateFMul(p, b_.CreateFSub(dp, d)), scale_);
        store(b_.CreateSelect(b_.CreateFCmpOEQ(s, fc(-inf)), fc(0), gj), gep(g, jj));
      });
    };
    if (!a_.dropout) {
      lanes(c64(0), c64(kAttentionKeyBlock), false);
    } else {
      lanes(c64(0), live_lanes, true);
      lanes(live_lanes, c64(kAttentionKeyBlock), false);
    }
    h_.set_loop_var(1, nullptr);
    h_.pop_scope();
  }

  /// Rows (or keys) of a backward register tile: AttentionSpec::rows, at least 2.
  int64_t tile_rows() const { return std::max<int64_t>(a_.rows, 2); }

  /// Tiles of `n` things from 0: body(first, size) for tiles of `size` then of 1 (the rest).
  void for_tiles(Value* n, int64_t size, const std::function<void(Value*, int64_t)>& body) {
    Value* full = mul(b_.CreateSDiv(n, c64(size)), size);
    emit_for(b_, h_.entry_alloca(b_.getInt64Ty(), "a.tile"), c64(0), full, size, [&](Value* t) {
      h_.push_scope();
      body(t, size);
      h_.pop_scope();
    });
    if (size > 1)
      emit_for(b_, h_.entry_alloca(b_.getInt64Ty(), "a.tile"), full, n, 1, [&](Value* t) {
        h_.push_scope();
        body(t, 1);
        h_.pop_scope();
      });
  }

  /// Column tiles of kColumnVectors vectors of width() lanes over rows of `width`: body(c0, the lanes
  /// inside of each vector).
  void for_column_tiles(Value* width, const std::function<void(Value*, const std::vector<Value*>&)>& body) {
    emit_for(b_, h_.entry_alloca(b_.getInt64Ty(), "a.col"), c64(0), width, kColumnVectors * this->width(), [&](Value* c0) {
      h_.push_scope();
      std::vector<Value*> in;
      for (int64_t v = 0; v < kColumnVectors; ++v) in.push_back(inside(add(c0, c64(v * this->width())), width));
      body(c0, in);
      h_.pop_scope();
    });
  }

  /// An accumulator tile of rows x kColumnVectors column vectors, loaded from rows `row(t)` of `buffer`
  /// (rows of `width`) at column c0; store_tile writes it back.
  std::vector<AllocaInst*> load_tile(int buffer, Value* width, int64_t rows, const std::function<Value*(int64_t)>& row, Value* c0,
                                     const std::vector<Value*>& in) {
    std::vector<AllocaInst*> acc;
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t v = 0; v < kColumnVectors; ++v) {
        acc.push_back(h_.entry_alloca(column_type(), "a.tile"));
        store(load_cols(tile_at(buffer, width, row(t), c0, v), in[static_cast<size_t>(v)]), acc.back());
      }
    return acc;
  }
  void store_tile(const std::vector<AllocaInst*>& acc, int buffer, Value* width, int64_t rows, const std::function<Value*(int64_t)>& row,
                  Value* c0, const std::vector<Value*>& in) {
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t v = 0; v < kColumnVectors; ++v)
        store_cols(b_.CreateLoad(column_type(), acc[static_cast<size_t>(t * kColumnVectors + v)]), tile_at(buffer, width, row(t), c0, v),
                   in[static_cast<size_t>(v)]);
  }
  /// Vector v of a column tile at c0 of row `row` of `buffer` (rows of `width`).
  Value* tile_at(int buffer, Value* width, Value* row, Value* c0, int64_t v) {
    return at(buffer, add(mul(row, width), add(c0, c64(v * this->width()))));
  }

  /// dst[key j] += sum over the chunk's n rows i (in order) of coef[i][jj] * src[row i] for the block's
  /// keys jj < jn (rows of `width`; coef rows of kAttentionKeyBlock from the chunk's first row): dv
  /// (coef p, src dout) or dk (coef g, src q); with causal only the pairs jj <= i + lag. Tiles of
  /// tile_rows() keys x kColumnVectors column vectors accumulate in registers over the chunk's rows.
  void update_keys(int dst, Value* width, int src, Value* chunk, Value* n, Value* coef, Value* keys, Value* jn, Value* lag) {
    const auto w = static_cast<unsigned>(this->width());
    for_tiles(jn, tile_rows(), [&](Value* jj, int64_t kt) {
      auto key = [&](int64_t t) { return add(keys, add(jj, c64(t))); };
      for_column_tiles(width, [&](Value* c0, const std::vector<Value*>& in) {
        std::vector<AllocaInst*> acc = load_tile(dst, width, kt, key, c0, in);
        auto row_step = [&](Value* i, bool diagonal) {
          std::vector<Value*> x;
          for (int64_t v = 0; v < kColumnVectors; ++v) x.push_back(load_cols(tile_at(src, width, add(chunk, i), c0, v), in[static_cast<size_t>(v)]));
          Value* crow = gep(coef, add(mul(i, kAttentionKeyBlock), jj));
          for (int64_t t = 0; t < kt; ++t) {
            Value* f = b_.CreateVectorSplat(w, load(gep(crow, c64(t))));
            Value* seen = diagonal ? b_.CreateICmpSLE(add(jj, c64(t)), add(i, lag)) : nullptr;
            for (int64_t v = 0; v < kColumnVectors; ++v)
              accumulate_into(acc[static_cast<size_t>(t * kColumnVectors + v)], f, x[static_cast<size_t>(v)], seen);
          }
        };
        if (!a_.causal) {
          for_range(c64(0), n, [&](Value* i) { row_step(i, false); });
        } else { // rows before the tile's first key see none of it; from its last key on, all of it
          Value* first = clamp(b_.CreateSub(jj, lag), n);
          Value* all = clamp(b_.CreateSub(add(jj, c64(kt - 1)), lag), n);
          for_range(first, all, [&](Value* i) { row_step(i, true); });
          for_range(all, n, [&](Value* i) { row_step(i, false); });
        }
        store_tile(acc, dst, width, kt, key, c0, in);
      });
    });
  }

  /// dq[row i] += sum over the block's keys jj < jn (in order) of g[i][jj] * k[key jj] for the chunk's
  /// n rows (with causal, the keys jj <= i + lag): tiles of tile_rows() rows x kColumnVectors column
  /// vectors accumulate in registers over the keys.
  void update_rows(Value* chunk, Value* n, Value* keys, Value* jn, Value* lag) {
    const auto w = static_cast<unsigned>(this->width());
    for_tiles(n, tile_rows(), [&](Value* i, int64_t rt) {
      auto row = [&](int64_t t) { return add(chunk, add(i, c64(t))); };
      for_column_tiles(e_, [&](Value* c0, const std::vector<Value*>& in) {
        std::vector<AllocaInst*> acc = load_tile(a_.dq, e_, rt, row, c0, in);
        auto key_step = [&](Value* jj, bool diagonal) {
          std::vector<Value*> kv;
          for (int64_t v = 0; v < kColumnVectors; ++v) kv.push_back(load_cols(tile_at(a_.k, e_, add(keys, jj), c0, v), in[static_cast<size_t>(v)]));
          for (int64_t t = 0; t < rt; ++t) {
            Value* f = b_.CreateVectorSplat(w, load(gep(g_, add(mul(add(i, c64(t)), kAttentionKeyBlock), jj))));
            Value* seen = diagonal ? b_.CreateICmpSLE(jj, add(add(i, c64(t)), lag)) : nullptr;
            for (int64_t v = 0; v < kColumnVectors; ++v)
              accumulate_into(acc[static_cast<size_t>(t * kColumnVectors + v)], f, kv[static_cast<size_t>(v)], seen);
          }
        };
        if (!a_.causal) {
          for_range(c64(0), jn, [&](Value* jj) { key_step(jj, false); });
        } else { // keys up to the tile's first row are seen by all its rows; past its last row by none
          Value* all = clamp(add(add(i, lag), c64(1)), jn);
          Value* some = clamp(add(add(i, c64(rt)), lag), jn);
          for_range(c64(0), all, [&](Value* jj) { key_step(jj, false); });
          for_range(all, some, [&](Value* jj) { key_step(jj, true); });
        }
        store_tile(acc, a_.dq, e_, rt, row, c0, in);
      });
    });
  }
};

} // namespace

void emit_attention(const Kernel& k, GemmHost& host, Value* begin, Value* end, Value* scratch) {
  KILN_ASSERT(k.attention.has_value(), "emit_attention without an attention kernel: " + k.name);
  AttentionEmitter(k, host).emit(begin, end, scratch);
}

} // namespace kiln::codegen

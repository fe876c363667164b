// The LLVM instantiation of kiln's math functions (math_body.h): IrOps builds each
// operation of the bodies as one IR instruction, so every fused multiply-add is an
// llvm.fma call (always fused, one rounding), every other mul/add/sub rounds on its
// own, and no float op carries `contract`, so the backend fuses nothing else (LLVM's
// DAG combiner would otherwise fuse the first single-use fmul of an fadd, which depends
// on operand order after InstCombine). On a target without FMA instructions llvm.fma is
// a libm fma call: correct, slow.
#include "codegen/src/llvm_math.h"

#include <string>

#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include "codegen/src/math_body.h"
#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {

Function* scalef_function(Module& mod, Type* ft);

/// MathOps over llvm::Value*: one float type (float or double, or a vector of them: lower_scalef)
/// and the int of its width.
class IrOps {
public:
  using V = Value*;

  IrOps(IRBuilder<>& b, Type* ft)
      : b_(&b), ft_(ft), it_(ft->getWithNewType(b.getIntNTy(ft->getScalarType()->isDoubleTy() ? 64 : 32))),
        f64(ft->getScalarType()->isDoubleTy()) {}

private:
  IRBuilder<>* b_;
  Type* ft_; ///< float or double (or a vector of them)
  Type* it_; ///< the integer type of the same width (and lanes)

public:
  bool f64; ///< ft_ is double

  IrOps wide() const { return IrOps(*b_, b_->getDoubleTy()); }
  V c(double v) const { return ConstantFP::get(ft_, v); }
  V ci(int64_t v) const { return ConstantInt::get(it_, v, true); }
  V ci32(int64_t v) const { return b_->getInt32(static_cast<uint32_t>(v)); }
  V add(V x, V y) { return b_->CreateFAdd(x, y); }
  V sub(V x, V y) { return b_->CreateFSub(x, y); }
  V mul(V x, V y) { return b_->CreateFMul(x, y); }
  V div(V x, V y) { return b_->CreateFDiv(x, y); }
  V fma(V x, V y, V z) { return b_->CreateIntrinsic(Intrinsic::fma, {ft_}, {x, y, z}); }
  V neg(V x) { return b_->CreateFNeg(x); }
  V fabs(V x) { return b_->CreateUnaryIntrinsic(Intrinsic::fabs, x); }
  V sqrt(V x) { return b_->CreateUnaryIntrinsic(Intrinsic::sqrt, x); }
  V copysign(V x, V y) { return b_->CreateBinaryIntrinsic(Intrinsic::copysign, x, y); }
  V rint(V x) { return b_->CreateUnaryIntrinsic(Intrinsic::roundeven, x); }
  V floor(V x) { return b_->CreateUnaryIntrinsic(Intrinsic::floor, x); }
  V fmin(V x, V y) { return b_->CreateMinNum(x, y); }
  V fmax(V x, V y) { return b_->CreateMaxNum(x, y); }
  V lt(V x, V y) { return b_->CreateFCmpOLT(x, y); }
  V gt(V x, V y) { return b_->CreateFCmpOGT(x, y); }
  V eq(V x, V y) { return b_->CreateFCmpOEQ(x, y); }
  V is_nan(V x) { return b_->CreateFCmpUNO(x, x); }
  V nge(V x, V y) { return b_->CreateFCmpULT(x, y); }
  V sel(V c, V x, V y) { return b_->CreateSelect(c, x, y); }
  V to_int(V x) { return b_->CreateFPToSI(x, it_); }
  V to_i32(V x) { return b_->CreateFPToSI(x, b_->getInt32Ty()); }
  V to_float(V i) { return b_->CreateSIToFP(i, ft_); }
  V u64_to_float(V i) { return b_->CreateUIToFP(i, ft_); }
  V to_f64(V x) { return f64 ? x : b_->CreateFPExt(x, b_->getDoubleTy()); }
  V from_f64(V x) { return f64 ? x : b_->CreateFPTrunc(x, ft_); }
  V bits(V x) { return b_->CreateBitCast(x, it_); }
  V from_bits(V i) { return b_->CreateBitCast(i, ft_); }
  V iadd(V x, V y) { return b_->CreateAdd(x, y); }
  V isub(V x, V y) { return b_->CreateSub(x, y); }
  V imul(V x, V y) { return b_->CreateMul(x, y); }
  V iand(V x, V y) { return b_->CreateAnd(x, y); }
  V ior(V x, V y) { return b_->CreateOr(x, y); }
  V ixor(V x, V y) { return b_->CreateXor(x, y); }
  V ine(V x, V y) { return b_->CreateICmpNE(x, y); }
  V shl(V x, int k) { return b_->CreateShl(x, ConstantInt::get(x->getType(), k)); }
  V lshr(V x, int k) { return b_->CreateLShr(x, ConstantInt::get(x->getType(), k)); }
  V ashr(V x, int k) { return b_->CreateAShr(x, ConstantInt::get(x->getType(), k)); }
  V call(MathFn fn, V x) { return emit_math(*b_, fn, x); }
  V scale(V x, V n) { return b_->CreateCall(scalef_function(*b_->GetInsertBlock()->getModule(), ft_), {x, n}); }
};
static_assert(MathOps<IrOps>);

constexpr const char* kScalef = "kiln.scalef.";

/// The name of kiln.scalef on `ty` (float, double or a vector of them): kiln.scalef.f32, .v16f32, ...
std::string scalef_name(Type* ty) {
  auto* v = dyn_cast<FixedVectorType>(ty);
  const std::string elem = ty->getScalarType()->isDoubleTy() ? "f64" : "f32";
  return kScalef + (v ? "v" + std::to_string(v->getNumElements()) : "") + elem;
}

// The declaration of kiln.scalef.<f32|f64>(x, n) in `mod`: IrOps::scale, x * 2^n, declared only:
// lower_scalef() gives it its code after the optimization pipeline. Its vector variants (the
// VFABI attribute, kept alive by llvm.compiler.used until then) let the loop vectorizer widen
// it, so that on AVX-512 one vscalefps replaces scale_by_halves' conversion, six integer ops and
// second multiply.
Function* scalef_function(Module& mod, Type* ft) {
  const std::string name = scalef_name(ft);
  if (Function* f = mod.getFunction(name)) return f;
  auto declare = [&](Type* t) {
    auto* f = Function::Create(FunctionType::get(t, {t, t}, false), GlobalValue::ExternalLinkage, scalef_name(t), mod);
    f->addFnAttr(Attribute::NoUnwind);
    f->addFnAttr(Attribute::WillReturn);
    f->setDoesNotAccessMemory();
    return f;
  };
  Function* f = declare(ft);
  std::string variants;
  std::vector<GlobalValue*> keep;
  for (unsigned lanes : ft->isDoubleTy() ? std::vector<unsigned>{8, 4, 2} : std::vector<unsigned>{16, 8, 4}) {
    Function* v = declare(FixedVectorType::get(ft, lanes));
    keep.push_back(v);
    variants += (variants.empty() ? "" : ",") + ("_ZGV_LLVM_N" + std::to_string(lanes) + "vv_" + name + "(" +
                                                 v->getName().str() + ")");
  }
  f->addFnAttr("vector-function-abi-variant", variants);
  appendToCompilerUsed(mod, keep);
  return f;
}

} // namespace

void lower_scalef(Module& mod, bool avx512f, bool avx512vl) {
  std::vector<CallInst*> calls;
  for (Function& f : mod)
    if (f.getName().starts_with(kScalef))
      for (User* u : f.users())
        if (auto* c = dyn_cast<CallInst>(u)) calls.push_back(c);
  for (CallInst* c : calls) {
    IRBuilder<> b(c);
    Value *x = c->getArgOperand(0), *n = c->getArgOperand(1);
    Type* t = x->getType();
    auto* v = dyn_cast<FixedVectorType>(t);
    const bool f64 = t->getScalarType()->isDoubleTy();
    const unsigned bits = v ? v->getNumElements() * (f64 ? 64 : 32) : 0;
    Intrinsic::ID id = Intrinsic::not_intrinsic;
    if (avx512f && bits == 512) id = f64 ? Intrinsic::x86_avx512_mask_scalef_pd_512 : Intrinsic::x86_avx512_mask_scalef_ps_512;
    if (avx512vl && bits == 256) id = f64 ? Intrinsic::x86_avx512_mask_scalef_pd_256 : Intrinsic::x86_avx512_mask_scalef_ps_256;
    if (avx512vl && bits == 128) id = f64 ? Intrinsic::x86_avx512_mask_scalef_pd_128 : Intrinsic::x86_avx512_mask_scalef_ps_128;
    Value* r = nullptr;
    if (id != Intrinsic::not_intrinsic) { // x * 2^floor(n), rounded once: all lanes, current rounding
      Type* mask = b.getIntNTy(std::max(8u, v->getNumElements()));
      std::vector<Value*> args{x, n, x, Constant::getAllOnesValue(mask)};
      if (bits == 512) args.push_back(b.getInt32(4)); // _MM_FROUND_CUR_DIRECTION
      r = b.CreateIntrinsic(id, {}, args);
    } else { // on scalars or vectors
      IrOps m(b, t);
      r = math::scale_by_halves(m, x, n);
    }
    c->replaceAllUsesWith(r);
    c->eraseFromParent();
  }
  removeFromUsedLists(mod, [](Constant* c) { return c->getName().starts_with(kScalef); });
  for (Function& f : make_early_inc_range(mod)) {
    if (!f.getName().starts_with(kScalef)) continue;
    f.removeDeadConstantUsers(); // the used list's old initializer
    if (f.use_empty()) f.eraseFromParent();
  }
}

namespace {

/// Defines the internal function `name` computing fn on scalar type ty.
/// Defines the internal function `name` of `arity` operands of type ty, returning body(ops, operands).
template <class Body> Function* define_function(Module& mod, Type* ty, int arity, const std::string& name, Body body) {
  auto* f = Function::Create(FunctionType::get(ty, std::vector<Type*>(arity, ty), false), GlobalValue::InternalLinkage,
                             name, mod);
  f->addFnAttr(Attribute::AlwaysInline);
  f->addFnAttr(Attribute::NoUnwind);
  f->addFnAttr(Attribute::WillReturn);
  f->setDoesNotAccessMemory();
  IRBuilder<> b(BasicBlock::Create(mod.getContext(), "entry", f)); // no fast-math flags: nothing contracts
  IrOps m(b, ty);
  b.CreateRet(body(m, f));
  return f;
}

Function* define_math(Module& mod, MathFn fn, Type* ty, const std::string& name) {
  return define_function(mod, ty, 1, name, [&](IrOps& m, Function* f) { return math::body(m, fn, f->getArg(0)); });
}

/// The name of fn on ty in emitted IR (kiln.exp.f32).
template <class Fn> std::string math_name(Fn fn, Type* ty) {
  return std::string("kiln.") + math_fn_name(fn) + (ty->isDoubleTy() ? ".f64" : ".f32");
}

} // namespace

Value* emit_math(IRBuilder<>& b, MathFn fn, Value* x) {
  Type* ty = x->getType();
  KILN_ASSERT(ty->isFloatTy() || ty->isDoubleTy(), "math on a non-float type");
  Module& mod = *b.GetInsertBlock()->getModule();
  const std::string name = math_name(fn, ty);
  Function* f = mod.getFunction(name);
  if (!f) f = define_math(mod, fn, ty, name);
  return b.CreateCall(f, {x});
}

Value* emit_math(IRBuilder<>& b, MathFn2 fn, Value* x, Value* y) {
  Type* ty = x->getType();
  KILN_ASSERT((ty->isFloatTy() || ty->isDoubleTy()) && y->getType() == ty, "math on non-float types");
  Module& mod = *b.GetInsertBlock()->getModule();
  const std::string name = math_name(fn, ty);
  Function* f = mod.getFunction(name);
  if (!f)
    f = define_function(mod, ty, 2, name,
                        [&](IrOps& m, Function* g) { return math::body(m, fn, g->getArg(0), g->getArg(1)); });
  return b.CreateCall(f, {x, y});
}

Value* emit_random(IRBuilder<>& b, bool normal, Type* ty, Value* seed, Value* counter) {
  KILN_ASSERT(ty->isFloatTy() || ty->isDoubleTy(), "random numbers of a non-float type");
  IrOps m(b, ty);
  return normal ? math::random_normal(m, seed, counter) : math::random_uniform(m, seed, counter);
}

} // namespace kiln::codegen

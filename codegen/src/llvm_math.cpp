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

#include "codegen/src/math_body.h"
#include "kiln/error.h"

namespace kiln::codegen {

using namespace llvm;

namespace {

/// MathOps over llvm::Value*: one float type (float or double) and the int of its width.
class IrOps {
public:
  using V = Value*;

  IrOps(IRBuilder<>& b, Type* ft) : b_(&b), ft_(ft), it_(b.getIntNTy(ft->isDoubleTy() ? 64 : 32)), f64(ft->isDoubleTy()) {}

private:
  IRBuilder<>* b_;
  Type* ft_;          ///< float or double
  IntegerType* it_;   ///< the integer type of the same width

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
};
static_assert(MathOps<IrOps>);

/// Defines the internal function `name` computing fn on scalar type ty.
Function* define_math(Module& mod, MathFn fn, Type* ty, const std::string& name) {
  auto* f = Function::Create(FunctionType::get(ty, {ty}, false), GlobalValue::InternalLinkage, name, mod);
  f->addFnAttr(Attribute::AlwaysInline);
  f->addFnAttr(Attribute::NoUnwind);
  f->addFnAttr(Attribute::WillReturn);
  f->setDoesNotAccessMemory();
  IRBuilder<> b(BasicBlock::Create(mod.getContext(), "entry", f)); // no fast-math flags: nothing contracts
  IrOps m(b, ty);
  b.CreateRet(math::body(m, fn, f->getArg(0)));
  return f;
}

} // namespace

Value* emit_math(IRBuilder<>& b, MathFn fn, Value* x) {
  Type* ty = x->getType();
  KILN_ASSERT(ty->isFloatTy() || ty->isDoubleTy(), "math on a non-float type");
  Module& mod = *b.GetInsertBlock()->getModule();
  const std::string name = std::string("kiln.") + math_fn_name(fn) + (ty->isDoubleTy() ? ".f64" : ".f32");
  Function* f = mod.getFunction(name);
  if (!f) f = define_math(mod, fn, ty, name);
  return b.CreateCall(f, {x});
}

Value* emit_random(IRBuilder<>& b, bool normal, Type* ty, Value* seed, Value* counter) {
  KILN_ASSERT(ty->isFloatTy() || ty->isDoubleTy(), "random numbers of a non-float type");
  IrOps m(b, ty);
  return normal ? math::random_normal(m, seed, counter) : math::random_uniform(m, seed, counter);
}

} // namespace kiln::codegen

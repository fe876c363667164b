// User errors: shape, dtype, dim and argument errors throw kiln::Error naming
// the op, the operands' types ("f32[2,3]") and the user's source line, also when
// raised through an operator.

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "error_of.h"

namespace kiln {
namespace {

/// Runs `f`, which must throw kiln::Error for `op` holding each of `parts` and naming `line` of this file.
void expect_error(const std::function<void()>& f, int line, const std::string& op,
                  const std::vector<std::string>& parts) {
  test::expect_error_at(f, "test_errors.cpp", line, op, parts);
}

Tensor f32(IntList s) { return zeros(std::move(s), kFloat32); }
Tensor f64(IntList s) { return zeros(std::move(s), kFloat64); }
Tensor i32(IntList s) { return zeros(std::move(s), kInt32); }
Tensor i64(IntList s) { return zeros(std::move(s), kInt64); }
Tensor b8(IntList s) { return zeros(std::move(s), kBool); }

// ---------------------------------------------------------------- broadcasting, through operators

TEST(Errors, BinaryOperatorsNameTheirLine) {
  Tensor a = f32({2, 3}), b = f32({4});
  expect_error([&] { (void)(a + b); }, __LINE__, "add", {"f32[2,3]", "f32[4]", "broadcast"});
  expect_error([&] { (void)(a - b); }, __LINE__, "sub", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a * b); }, __LINE__, "mul", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a / b); }, __LINE__, "div", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a == b); }, __LINE__, "eq", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a != b); }, __LINE__, "ne", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a < b); }, __LINE__, "lt", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a <= b); }, __LINE__, "le", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a > b); }, __LINE__, "gt", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)(a >= b); }, __LINE__, "ge", {"f32[2,3]", "f32[4]"});
}

TEST(Errors, MixedDtypesAreNamed) {
  Tensor a = i32({2, 3}), b = f64({3, 2});
  expect_error([&] { (void)(a + b); }, __LINE__, "add", {"i32[2,3]", "f64[3,2]"});
  expect_error([&] { (void)add(i64({5}), f32({0})); }, __LINE__, "add", {"i64[5]", "f32[0]"});
}

TEST(Errors, ChainedExpressionNamesTheFailingOperator) {
  Tensor a = f32({3}), b = f32({3}), c = f32({2});
  expect_error([&] { (void)(a * b + c); }, __LINE__, "add", {"f32[3]", "f32[2]"});
  Tensor d = a + b; // fine
  expect_error(
      [&] {
        Tensor e = d * 2;
        (void)(e - c); // the line of the '-'
      },
      __LINE__ - 2, "sub", {"f32[3]", "f32[2]"});
}

TEST(Errors, NamedFunctions) {
  Tensor a = f32({2, 3}), b = f32({4});
  expect_error([&] { (void)add(a, b); }, __LINE__, "add", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)pow(a, b); }, __LINE__, "pow", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)maximum(a, b); }, __LINE__, "maximum", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)minimum(a, b); }, __LINE__, "minimum", {"f32[2,3]", "f32[4]"});
  expect_error([&] { (void)logical_and(b8({2}), b8({3})); }, __LINE__, "logical_and", {"bool[2]", "bool[3]"});
  expect_error([&] { (void)logical_or(b8({2}), b8({3})); }, __LINE__, "logical_or", {"bool[2]", "bool[3]"});
  // a bad dim is the function's error, not that of the max it is built from
  expect_error([&] { (void)nn::functional::softmax(b, 1); }, __LINE__, "softmax", {"dim 1 is out of range for rank 1"});
  expect_error([&] { (void)nn::functional::log_softmax(b, -2); }, __LINE__, "log_softmax", {"dim -2"});
}

// ---------------------------------------------------------------- dtype errors

// bool + bool and bool * bool are logical or and and (Promotion.BoolArithmeticFollowsPyTorch); the rest
// is refused, as PyTorch refuses it, sub with any bool operand included.
TEST(Errors, ArithmeticOnBool) {
  Tensor p = b8({2}), q = b8({2});
  expect_error([&] { (void)(p - q); }, __LINE__, "sub", {"bool[2]", "two bools", "logical_xor"});
  expect_error([&] { (void)(p - true); }, __LINE__, "sub", {"bool[2]", "two bools"});
  expect_error([&] { (void)(p - 1); }, __LINE__, "sub", {"bool[2]", "a bool operand", "logical_not"});
  expect_error([&] { (void)(2.5 - p); }, __LINE__, "sub", {"bool[2]", "a bool operand"}); // scalar on the left
  expect_error([&] { (void)(f32({2}) - p); }, __LINE__, "sub", {"f32[2]", "bool[2]"});
  expect_error([&] { (void)pow(p, q); }, __LINE__, "pow", {"bool[2]", "cast them first"});
  expect_error([&] { (void)neg(p); }, __LINE__, "neg", {"bool[2]"});
  expect_error([&] { (void)(-p); }, __LINE__, "neg", {"bool[2]"});
  expect_error([&] { (void)abs(p); }, __LINE__, "abs", {"bool[2]"});
  expect_error([&] { (void)relu(p); }, __LINE__, "relu", {"bool[2]"});
  EXPECT_TRUE(max(p).item<bool>() == false); // max and min of bools are any and all, as PyTorch's
  expect_error([&] { (void)argmax(p, 0); }, __LINE__, "argmax", {"bool[2]"});
  expect_error([&] { (void)matmul(b8({2, 2}), b8({2, 2})); }, __LINE__, "matmul", {"bool[2,2]"});
}

TEST(Errors, DtypeRequirements) {
  expect_error([&] { (void)mean(i32({3})); }, __LINE__, "mean", {"i32[3]", "floating"});
  expect_error([&] { (void)i64({3}).mean({0}); }, __LINE__, "mean", {"i64[3]"});
  expect_error([&] { (void)where(f32({3}), f32({3}), f32({3})); }, __LINE__, "where", {"f32[3]", "bool"});
  expect_error([&] { (void)pow(i32({3}), -1); }, __LINE__, "pow", {"i32[3]", "negative"});
  expect_error([&] { (void)rand({2}, 0, kInt32); }, __LINE__, "rand", {"i32"});
  expect_error([&] { (void)randn({2}, 0, kBool); }, __LINE__, "randn", {"bool"});
  expect_error([&] { (void)arange(0, 3, 1, kBool); }, __LINE__, "arange", {"bool"});
}

// ---------------------------------------------------------------- dims

TEST(Errors, ReductionDims) {
  Tensor x = f32({2, 3});
  expect_error([&] { (void)sum(x, {2}); }, __LINE__, "sum", {"f32[2,3]", "dim 2"});
  expect_error([&] { (void)x.sum({-3}); }, __LINE__, "sum", {"f32[2,3]", "dim -3"});
  expect_error([&] { (void)sum(x, {0, -2}); }, __LINE__, "sum", {"f32[2,3]", "more than once"});
  expect_error([&] { (void)mean(x, {5}); }, __LINE__, "mean", {"f32[2,3]", "dim 5"});
  expect_error([&] { (void)max(x, {7}); }, __LINE__, "max", {"f32[2,3]"});
  expect_error([&] { (void)x.min({2}, true); }, __LINE__, "min", {"f32[2,3]"});
  expect_error([&] { (void)argmax(x, 2); }, __LINE__, "argmax", {"f32[2,3]", "dim 2"});
  expect_error([&] { (void)x.argmin(-3); }, __LINE__, "argmin", {"f32[2,3]"});
}

TEST(Errors, EmptyReductions) {
  Tensor x = f32({2, 0});
  expect_error([&] { (void)max(x, {1}); }, __LINE__, "max", {"f32[2,0]", "empty"});
  expect_error([&] { (void)min(x); }, __LINE__, "min", {"f32[2,0]"});
  expect_error([&] { (void)argmax(x, 1); }, __LINE__, "argmax", {"f32[2,0]"});
  expect_error([&] { (void)argmin(x, -1); }, __LINE__, "argmin", {"f32[2,0]"});
}

TEST(Errors, MovementDims) {
  Tensor x = f32({2, 3});
  expect_error([&] { (void)x.permute({0}); }, __LINE__, "permute", {"f32[2,3]"});
  expect_error([&] { (void)permute(x, {1, 1}); }, __LINE__, "permute", {"f32[2,3]", "repeats"});
  expect_error([&] { (void)x.permute({0, 2}); }, __LINE__, "permute", {"f32[2,3]", "dim 2"});
  expect_error([&] { (void)x.transpose(0, 2); }, __LINE__, "transpose", {"f32[2,3]"});
  expect_error([&] { (void)transpose(x, -3, 0); }, __LINE__, "transpose", {"f32[2,3]"});
  expect_error([&] { (void)f32({2, 3, 4}).t(); }, __LINE__, "t", {"f32[2,3,4]"});
  expect_error([&] { (void)x.unsqueeze(3); }, __LINE__, "unsqueeze", {"f32[2,3]"});
  expect_error([&] { (void)x.squeeze(2); }, __LINE__, "squeeze", {"f32[2,3]"});
  expect_error([&] { (void)x.size(2); }, __LINE__, "size", {"f32[2,3]"});
  expect_error([&] { (void)x.flatten(1, 0); }, __LINE__, "flatten", {"f32[2,3]"});
  expect_error([&] { (void)concat({x, x}, 2); }, __LINE__, "concat", {"f32[2,3]"});
  expect_error([&] { (void)x.slice(2, 0, 1); }, __LINE__, "slice", {"f32[2,3]"});
}

// ---------------------------------------------------------------- shapes and arguments

TEST(Errors, Reshape) {
  Tensor x = f32({2, 3});
  expect_error([&] { (void)x.reshape({5}); }, __LINE__, "reshape", {"f32[2,3]", "[5]"});
  expect_error([&] { (void)reshape(x, {-1, -1}); }, __LINE__, "reshape", {"f32[2,3]", "-1"});
  expect_error([&] { (void)x.view({4, -1}); }, __LINE__, "reshape", {"f32[2,3]", "[4,-1]"});
  expect_error([&] { (void)x.reshape({-2, 3}); }, __LINE__, "reshape", {"f32[2,3]"});
  expect_error([&] { (void)f32({0, 3}).reshape({0, -1}); }, __LINE__, "reshape", {"f32[0,3]"});
}

TEST(Errors, Expand) {
  Tensor x = f32({2, 3});
  expect_error([&] { (void)x.expand({4, 3}); }, __LINE__, "expand", {"f32[2,3]", "[4,3]"});
  expect_error([&] { (void)expand(x, {3}); }, __LINE__, "expand", {"f32[2,3]", "fewer dims"});
  expect_error([&] { (void)x.expand({-1, -1, 3}); }, __LINE__, "expand", {"f32[2,3]"});
}

TEST(Errors, SliceConcatPad) {
  Tensor x = f32({4, 5});
  expect_error([&] { (void)x.slice(0, 0, 4, 0); }, __LINE__, "slice", {"f32[4,5]", "step"});
  expect_error([&] { (void)slice(x, 1, 0, 4, -1); }, __LINE__, "slice", {"f32[4,5]", "step"});
  expect_error([&] { (void)scalar_tensor(1).slice(0, 0, 1); }, __LINE__, "slice", {"f32[]"});
  expect_error([&] { (void)concat({x, f32({4, 2}), f32({3, 5})}, 1); }, __LINE__, "concat", {"f32[4,5]", "f32[3,5]"});
  expect_error([&] { (void)concat({x, f32({4})}); }, __LINE__, "concat", {"f32[4,5]", "f32[4]"});
  expect_error([&] { (void)concat({}); }, __LINE__, "concat", {"at least one"});
  expect_error([&] { (void)pad(x, {1}); }, __LINE__, "pad", {"f32[4,5]"});
  expect_error([&] { (void)pad(x, {1, 1, 1, 1, 1, 1}); }, __LINE__, "pad", {"f32[4,5]"});
  expect_error([&] { (void)pad(x, {-3, -3}); }, __LINE__, "pad", {"f32[4,5]", "negative padding (-3, -3) of dim 1"}); // crops 6 of 5
}

TEST(Errors, Matmul) {
  expect_error([&] { (void)matmul(f32({2, 3}), f32({4, 5})); }, __LINE__, "matmul", {"f32[2,3]", "f32[4,5]", "inner"});
  expect_error([&] { (void)f32({3}).matmul(f64({4})); }, __LINE__, "matmul", {"f32[3]", "f64[4]"});
  expect_error([&] { (void)matmul(scalar_tensor(1), f32({3})); }, __LINE__, "matmul", {"f32[]", "f32[3]"});
  expect_error([&] { (void)matmul(f32({2, 2, 3}), f32({3, 3, 4})); }, __LINE__, "matmul", {"f32[2,2,3]", "f32[3,3,4]", "batch"});
}

TEST(Errors, Where) {
  expect_error([&] { (void)where(b8({2}), f32({3}), f32({3})); }, __LINE__, "where", {"bool[2]", "f32[3]"});
  expect_error([&] { (void)where(b8({3}), i32({2, 3}), f32({4, 3})); }, __LINE__, "where", {"i32[2,3]", "f32[4,3]"});
}

TEST(Errors, Creation) {
  expect_error([&] { (void)zeros({2, -1}); }, __LINE__, "zeros", {"[2,-1]"});
  expect_error([&] { (void)full({-3}, 1.5); }, __LINE__, "full", {"[-3]"});
  expect_error([&] { (void)rand({-1}, 0); }, __LINE__, "rand", {"[-1]"});
  expect_error([&] { (void)arange(0, 5, 0, kFloat32); }, __LINE__, "arange", {"step"});
  expect_error([&] { (void)arange(5, 0, 1, kInt64); }, __LINE__, "arange", {"sign"});
  expect_error([&] { (void)arange(0, 5, 0.5, kInt32); }, __LINE__, "arange", {"integer part", "0.5"});
  expect_error([&] { (void)from_vector<float>({1, 2, 3}, {2, 2}); }, __LINE__, "from_vector", {"[2,2]"});
}

TEST(Errors, ReadingValues) {
  Tensor x = f32({2, 3});
  expect_error([&] { (void)x.item<float>(); }, __LINE__, "item", {"f32[2,3]", "one element"});
  expect_error([&] { (void)f32({0}).item<double>(); }, __LINE__, "item", {"f32[0]"});
}

TEST(Errors, BackwardWithoutGrad) {
  Tensor x = f32({3});
  expect_error([&] { x.backward(); }, __LINE__, "backward", {"f32[3]"});
  expect_error([&] { x.assign(f64({3})); }, __LINE__, "assign", {"f32[3]", "f64[3]"});
}

TEST(Errors, RequiresGradOnIntegerTensorNamesTheLine) {
  Tensor x = i32({3});
  expect_error([&] { x.requires_grad_(); }, __LINE__, "requires_grad_", {"i32[3]"});
}

// An undefined (default-constructed) operand: the error names the op the user called and the user's
// line, not kiln's Tensor::node(): ops, functionals, modules and reads.
TEST(Errors, UndefinedTensorOperandNamesTheOpAndLine) {
  namespace F = nn::functional;
  const Tensor u, a = f32({2, 3});
  const std::vector<std::string> undefined{"undefined"};
  expect_error([&] { (void)(u + a); }, __LINE__, "add", undefined);
  expect_error([&] { (void)(a * u); }, __LINE__, "mul", undefined);
  expect_error([&] { (void)(a < u); }, __LINE__, "lt", undefined);
  expect_error([&] { (void)matmul(a, u); }, __LINE__, "matmul", undefined);
  expect_error([&] { (void)u.sum(); }, __LINE__, "sum", undefined);
  expect_error([&] { (void)u.max({1}); }, __LINE__, "max", undefined);
  expect_error([&] { (void)exp(u); }, __LINE__, "exp", undefined);
  expect_error([&] { (void)relu(u); }, __LINE__, "relu", undefined);
  expect_error([&] { (void)u.reshape({6}); }, __LINE__, "reshape", undefined);
  expect_error([&] { (void)concat({a, u}, 0); }, __LINE__, "concat", undefined);
  expect_error([&] { (void)where(b8({2, 3}), a, u); }, __LINE__, "where", undefined);
  expect_error([&] { (void)F::softmax(u, 1); }, __LINE__, "softmax", undefined);
  expect_error([&] { (void)F::layer_norm(u, {3}); }, __LINE__, "layer_norm", undefined);
  expect_error([&] { (void)F::linear(a, u); }, __LINE__, "linear", undefined);
  expect_error([&] { (void)F::mse_loss(a, u); }, __LINE__, "mse_loss", undefined);
  nn::Linear lin(3, 2);
  expect_error([&] { (void)lin.forward(u); }, __LINE__, "Linear", undefined);
  expect_error([&] { (void)lin(u); }, __LINE__, "Linear", undefined);
  expect_error([&] { (void)u.item<float>(); }, __LINE__, "item", undefined);
  expect_error([&] { (void)u.to_vector<float>(); }, __LINE__, "to_vector", undefined);
  expect_error([&] { realize({a, u}); }, __LINE__, "realize", undefined);
  for (const auto& f : std::vector<std::function<void()>>{[&] { (void)(u - a); }, [&] { (void)F::softmax(u, 0); }})
    test::expect_no_kiln_line(test::error_of(f));
}

// A null module given to a container: a kiln::Error naming the method and the user's line.
TEST(Errors, NullModuleInAContainerNamesTheLine) {
  nn::ModuleList list;
  expect_error([&] { list.push_back(nullptr); }, __LINE__, "ModuleList::push_back", {"null module"});
  expect_error([&] { list.push_back(std::shared_ptr<nn::Linear>()); }, __LINE__, "ModuleList::push_back", {"null"});
  expect_error([&] { list.insert(0, nullptr); }, __LINE__, "ModuleList::insert", {"null module"});
  nn::Sequential seq;
  expect_error([&] { seq.push_back(std::shared_ptr<nn::ReLU>()); }, __LINE__, "Sequential::push_back", {"null module"});
  nn::ModuleDict dict;
  expect_error([&] { dict.insert("a", nullptr); }, __LINE__, "ModuleDict", {"\"a\" is null"});
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(seq.size(), 0u);
  EXPECT_EQ(dict.size(), 0u);
}

TEST(Errors, UndefinedTensorOperandThrows) {
  // In a child process, so that a crash fails this test only.
  EXPECT_EXIT(
      {
        Tensor undefined;
        try {
          (void)(undefined + f32({2}));
        } catch (const Error&) {
          std::exit(0);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------- modules, losses, optimizers

TEST(Errors, ModulesNameTheModuleAndTheCallersLine) {
  nn::manual_seed(0);
  const Tensor x = f32({2, 5});
  nn::Linear lin(4, 3);
  expect_error([&] { (void)lin(x); }, __LINE__, "Linear", {"f32[2,5]", "in_features = 4"});
  // a bias of another shape (on a rank-3 input it would meet the [B*T, out] product)
  const Tensor x3 = f32({2, 6, 4}), w = f32({3, 4}), b2 = f32({6, 3});
  expect_error([&] { (void)nn::functional::linear(x3, w, b2); }, __LINE__, "linear",
               {"f32[6,3]", "[out_features] = [3]"});
  nn::Sequential seq(nn::Linear(4, 3), nn::ReLU());
  expect_error([&] { (void)seq(x); }, __LINE__, "Linear", {"f32[2,5]"});
  nn::Embedding emb(10, 3);
  expect_error([&] { (void)emb(from_vector<int64_t>({1, 42})); }, __LINE__, "Embedding", {"index 42 at position [1]", "[0, 10)"});
  expect_error([&] { (void)emb(f32({2})); }, __LINE__, "Embedding", {"integer", "f32[2]"});
  nn::BatchNorm1d bn(3);
  expect_error([&] { (void)bn(x); }, __LINE__, "BatchNorm1d", {"f32[2,5]"});
  expect_error([&] { (void)nn::Linear(0, 3); }, __LINE__, "Linear", {"positive"});
  expect_error([&] { (void)nn::Dropout(1.5); }, __LINE__, "Dropout", {"p must be"});
  expect_error([&] { (void)nn::Embedding(0, 3); }, __LINE__, "Embedding", {"positive"});
}

// A user's module whose forward calls a layer's forward directly.
struct UsersNet : nn::Module {
  nn::Linear fc{4, 3};
  static constexpr int kFcLine = __LINE__ + 1;
  Tensor forward(const Tensor& x) override { return fc.forward(x); }
};

// A user's subclass of a layer whose override calls the layer's own forward.
struct Doubled : nn::Linear {
  using nn::Linear::Linear;
  static constexpr int kBaseLine = __LINE__ + 1;
  Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) * 2.0; }
};

TEST(Errors, ADirectForwardNamesTheModuleAndTheCallersLine) {
  nn::manual_seed(0);
  const Tensor x = f32({2, 5});
  nn::Linear lin(4, 3);
  expect_error([&] { (void)lin.forward(x); }, __LINE__, "Linear", {"f32[2,5]", "in_features = 4"});
  nn::Sequential seq(nn::Linear(4, 3), nn::ReLU());
  expect_error([&] { (void)seq.forward(x); }, __LINE__, "Linear", {"f32[2,5]"});
  nn::Sequential nested(nn::ReLU(), nn::Sequential(nn::Tanh(), nn::Linear(4, 3)));
  expect_error([&] { (void)nested.forward(x); }, __LINE__, "Linear", {"f32[2,5]"});
  nn::BatchNorm1d bn(3);
  expect_error([&] { (void)bn.forward(x); }, __LINE__, "BatchNorm1d", {"f32[2,5]"});
  nn::Embedding emb(10, 3);
  expect_error([&] { (void)emb.forward(f32({2})); }, __LINE__, "Embedding", {"integer", "f32[2]"});
  UsersNet net;
  expect_error([&] { (void)net.forward(x); }, UsersNet::kFcLine, "Linear", {"f32[2,5]"});
  expect_error([&] { (void)net(x); }, UsersNet::kFcLine, "Linear", {"f32[2,5]"});
}

TEST(Errors, AnOverrideCallingItsLayersForwardRunsItOnce) {
  nn::manual_seed(0);
  Doubled d(4, 3);
  const Tensor x = from_vector<float>({1, 2, 3, 4}).reshape({1, 4});
  const std::vector<float> expected = (nn::functional::linear(x, d.weight, d.bias) * 2.0).to_vector<float>();
  EXPECT_EQ(d.forward(x).to_vector<float>(), expected);
  EXPECT_EQ(d(x).to_vector<float>(), expected);
  nn::Module& as_module = d;
  EXPECT_EQ(as_module.forward(x).to_vector<float>(), expected);
  nn::Sequential seq(std::make_shared<Doubled>(d));
  EXPECT_EQ(seq.forward(x).to_vector<float>(), expected);
  // Through a Linear&, forward is Linear's non-virtual one (as nn.h says): Linear's own computation.
  nn::Linear& as_linear = d;
  EXPECT_EQ(as_linear.forward(x).to_vector<float>(), nn::functional::linear(x, d.weight, d.bias).to_vector<float>());
  expect_error([&] { (void)d.forward(f32({2, 5})); }, Doubled::kBaseLine, "Linear", {"f32[2,5]"});
}

TEST(Errors, LossesNameTheLossNotTheOpsTheyUse) {
  const Tensor logits = f32({2, 5});
  expect_error([&] { (void)nn::functional::cross_entropy(logits, from_vector<int64_t>({1, 7})); }, __LINE__,
               "cross_entropy", {"target 7", "5 classes"});
  expect_error([&] { (void)nn::functional::nll_loss(logits, from_vector<int64_t>({-1, 0})); }, __LINE__, "nll_loss",
               {"target -1"});
}

TEST(Errors, OptimizersAndBackwardNameTheCallersLine) {
  Tensor w = f32({3});
  w.requires_grad_();
  expect_error([&] { (void)optim::SGD({w}, {.lr = -1}); }, __LINE__, "optimizer", {"learning rate"});
  expect_error([&] { (void)optim::SGD({w}, {.momentum = -1}); }, __LINE__, "SGD", {"momentum"});
  expect_error([&] { (void)optim::Adam({w}, {.betas = {1.5, 0.9}}); }, __LINE__, "Adam", {"beta1"});
  expect_error([&] { (void)optim::AdamW({w}, {.eps = -1}); }, __LINE__, "AdamW", {"eps"});
  expect_error([&] { (void)optim::SGD({f32({3})}); }, __LINE__, "optimizer", {"does not require grad"});
  optim::SGD sgd({w});
  expect_error([&] { sgd.set_lr(-2); }, __LINE__, "set_lr", {"learning rate"});
  expect_error([&] { (w * 2).backward(); }, __LINE__, "backward", {"not a scalar", "f32[3]"});
}

TEST(Errors, SchedulesAndOptimizerStateNameTheCallersLine) {
  Tensor w = f32({3});
  w.requires_grad_();
  optim::Adam adam({w});
  expect_error([&] { adam.load_state_dict({{"0.exp_avg", f32({2})}}); }, __LINE__, "load_state_dict",
               {"adam state does not match", "f32[2]", "missing \"0.step\""});
  optim::SGD sgd({w}, {.lr = 1.0});
  expect_error([&] { (void)optim::StepLR(sgd, 0); }, __LINE__, "StepLR", {"step_size must be positive, got 0"});
  expect_error([&] { (void)optim::CosineAnnealingLR(sgd, -1); }, __LINE__, "CosineAnnealingLR", {"T_max", "got -1"});
  expect_error([&] { (void)optim::WarmupCosineLR(sgd, 5, 5); }, __LINE__, "WarmupCosineLR", {"warmup 5, total 5"});
  optim::CosineAnnealingLR to_negative(sgd, 4, -1.0); // lr 1 annealed towards -1: negative from epoch 3
  expect_error([&] { to_negative.set_epoch(-1); }, __LINE__, "CosineAnnealingLR", {"non-negative, got -1"});
  to_negative.set_epoch(2);
  expect_error([&] { to_negative.step(); }, __LINE__, "CosineAnnealingLR", {"epoch 3 gives an invalid learning rate: -0.7"});
  EXPECT_EQ(to_negative.epoch(), 2) << "a refused step leaves the epoch";
}

TEST(Errors, DataSetsAndLoadersNameTheCallersLine) {
  expect_error([] { data::Dataset(std::vector<float>(4), {0}, {0}); }, __LINE__, "Dataset", {"positive", "[0]"});
  expect_error([] { data::Dataset(std::vector<float>(5), {2}, {0, 1, 2}); }, __LINE__, "Dataset", {"5 values", "3 samples"});
  const data::Dataset ds(std::vector<float>(6), {2}, {0, 1, 2});
  expect_error([&] { (void)ds.batch({6}); }, __LINE__, "Dataset::batch", {"index 6", "3 samples"});
  expect_error([&] { (void)ds.batches(0); }, __LINE__, "batches", {"batch_size must be positive, got 0"});
  expect_error([&] { (void)ds.batches(-2, 7); }, __LINE__, "batches", {"got -2"});
  const data::Loader loader = ds.batches(2);
  expect_error([&] { (void)loader[2]; }, __LINE__, "batches", {"batch 2 out of range for 2 batches"});
  expect_error([] { data::FashionMNIST("valid", "/nonexistent"); }, __LINE__, "FashionMNIST", {"\"valid\""});
}

// A directory of its own for a test's files, removed when it ends.
struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("kiln_test_errors_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

TEST(Errors, CheckpointsNameTheCallersLine) {
  const TempDir dir;
  const std::string path = dir / "a.safetensors";
  expect_error([&] { (void)checkpoint::load_safetensors(dir / "missing"); }, __LINE__, "load_safetensors",
               {"missing': cannot open"});
  expect_error([&] { checkpoint::save_safetensors(dir / "no/dir/x", {{"a", f32({1})}}); }, __LINE__,
               "save_safetensors", {"cannot create a temporary file"});
  expect_error([&] { checkpoint::save_safetensors(path, {{"a", f32({1})}, {"a", f32({1})}}); }, __LINE__,
               "save_safetensors", {"duplicate tensor name \"a\""});
  nn::manual_seed(0);
  nn::Linear lin(2, 2);
  optim::Adam adam(lin.parameters());
  expect_error([&] { checkpoint::save(dir.path.string(), lin, &adam); }, __LINE__, "save", {"is a directory"});
  checkpoint::save(path, lin);
  nn::Linear wider(3, 2);
  expect_error([&] { (void)checkpoint::load(path, wider); }, __LINE__, "load", {"does not match the model", "f32[2,3]"});
  expect_error([&] { (void)checkpoint::load(path, lin, &adam); }, __LINE__, "load", {"no optimizer state"});
  checkpoint::save(path, lin, &adam);
  optim::Adam of_weight({lin.weight}); // one parameter: the file's "1.step" is not its
  const auto load_of_weight = [&] { (void)checkpoint::load(path, lin, &of_weight); }; const int line = __LINE__;
  expect_error(load_of_weight, line, "load", {"a.safetensors': the adam state does not match", "unexpected entry \"1.step\""});
  const std::string msg = test::error_of(load_of_weight);
  test::expect_no_kiln_line(msg);
  EXPECT_EQ(msg.find("\n  at "), msg.rfind("\n  at ")) << "one line, named once: " << msg;
}

TEST(Errors, BatchNormRefusesIntegerStatistics) {
  const Tensor x = f32({4, 3}), ones3 = f32({3}) + 1.0;
  for (const bool training : {true, false})
    expect_error([&] { (void)nn::functional::batch_norm(x, i64({3}), ones3, Tensor(), Tensor(), training); },
                 __LINE__ - 1, "batch_norm", {"floating", "f32[4,3]", "i64[3]"});
  expect_error([&] { (void)nn::functional::batch_norm(x, f32({3}), i32({3}) + 1); }, __LINE__, "batch_norm",
               {"floating", "i32[3]"});
  expect_error([&] { (void)nn::functional::batch_norm(x, Tensor(), Tensor(), b8({3})); }, __LINE__, "batch_norm",
               {"floating", "bool[3]"});
  nn::BatchNorm1d bn(3);
  bn.running_var = i64({3}) + 1;
  expect_error([&] { (void)bn(x); }, __LINE__, "BatchNorm1d", {"floating", "i64[3]"});
}

// A user's module that registers its own tensors.
struct Registers : nn::Module {
  std::string name() const override { return "Registers"; }
};

TEST(Errors, RegisteringATakenDottedOrEmptyNameIsRefused) {
  Registers m;
  m.register_parameter("w", f32({2}));
  m.register_module("sub", nn::ReLU());
  const std::string op = "Registers::register_";
  expect_error([&] { m.register_parameter("w", f32({2})); }, __LINE__, op + "parameter", {"attribute 'w' already exists"});
  expect_error([&] { m.register_buffer("w", f32({2})); }, __LINE__, op + "buffer", {"attribute 'w' already exists"});
  expect_error([&] { m.register_module("w", nn::ReLU()); }, __LINE__, op + "module", {"attribute 'w' already exists"});
  expect_error([&] { m.register_parameter("sub", f32({2})); }, __LINE__, op + "parameter", {"'sub' already exists"});
  expect_error([&] { m.register_parameter("a.b", f32({2})); }, __LINE__, op + "parameter",
               {"parameter name can't contain \".\"", "\"a.b\""});
  expect_error([&] { m.register_buffer("a.b", f32({2})); }, __LINE__, op + "buffer", {"buffer name can't contain"});
  expect_error([&] { m.register_module("a.b", nn::ReLU()); }, __LINE__, op + "module", {"module name can't contain"});
  expect_error([&] { m.register_parameter("", f32({2})); }, __LINE__, op + "parameter", {"can't be empty"});
  expect_error([&] { m.register_parameter("u", Tensor()); }, __LINE__, op + "parameter", {"\"u\" is undefined"});
  expect_error([&] { m.register_module("n", std::shared_ptr<nn::ReLU>()); }, __LINE__, op + "module", {"\"n\" is null"});
  EXPECT_EQ(m.state_dict().size(), 1u) << "a refused name registers nothing";
  nn::Module plain;
  expect_error([&] { plain.register_buffer("x.y", f32({1})); }, __LINE__, "Module::register_buffer", {"\"x.y\""});
}

// ---------------------------------------------------------------- indices checked in the kernel

/// A lazy copy of `v`: computed by a kernel, so only the kernel that reads it can check it.
Tensor lazy_i64(const std::vector<int64_t>& v) { return from_vector<int64_t>(v) + 1 - 1; }

TEST(Errors, LazyClassIndicesAreCheckedInTheKernel) {
  const Tensor logits = from_vector<float>({0.5f, -1, 2, 0, 1, 3, -2, 0.25f, 1, -1}, {2, 5});
  const bool fusion = options().fusion;
  for (bool fused : {true, false}) {
    options().fusion = fused;
    for (int64_t bad : {int64_t{42}, int64_t{-1}}) {
      const int line = __LINE__ + 1;
      const Tensor loss = nn::functional::cross_entropy(logits, lazy_i64({1, bad}));
      expect_error([&] { (void)loss.item<float>(); }, line, "cross_entropy",
                   {"target " + std::to_string(bad), "[0, 5)", "no result"});
      const int nll_line = __LINE__ + 1;
      const Tensor nll = nn::functional::nll_loss(logits, lazy_i64({bad, 0}), nn::functional::Reduction::None);
      expect_error([&] { (void)nll.to_vector<float>(); }, nll_line, "nll_loss", {"target " + std::to_string(bad)});
    }
    // In range, the kernel-checked loss is the host-checked one, bit for bit.
    EXPECT_EQ(nn::functional::cross_entropy(logits, lazy_i64({1, 4})).item<float>(),
              nn::functional::cross_entropy(logits, from_vector<int64_t>({1, 4})).item<float>());
  }
  options().fusion = fusion;
}

TEST(Errors, LazyEmbeddingIndicesAreCheckedInTheKernel) {
  nn::manual_seed(0);
  nn::Embedding emb(10, 3);
  const int line = __LINE__ + 1;
  const Tensor rows = emb(lazy_i64({2, 10, 3}));
  expect_error([&] { (void)rows.to_vector<float>(); }, line, "Embedding", {"index 10", "[0, 10)", "(index [3])"});
  EXPECT_EQ(emb(lazy_i64({2, 9})).to_vector<float>(), emb(from_vector<int64_t>({2, 9})).to_vector<float>());
}

TEST(Errors, ClassIndicesOfACompiledStepAreChecked) {
  nn::manual_seed(0);
  nn::Linear lin(4, 5);
  optim::SGD opt(lin.parameters(), {.lr = 0.1});
  int line = 0;
  auto step = compile([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    line = __LINE__ + 1;
    Tensor loss = nn::functional::cross_entropy(lin(a[0]), a[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  });
  const Tensor x = from_vector<float>({1, 0, -1, 2, 0.5f, 0.25f, 0, -2}, {2, 4});
  (void)step({x, from_vector<int64_t>({1, 4})});
  const std::vector<float> weight = lin.weight.to_vector<float>();
  for (int64_t bad : {int64_t{42}, int64_t{-1}}) {
    expect_error([&] { (void)step({x, from_vector<int64_t>({bad, 0})}); }, line, "cross_entropy",
                 {"target " + std::to_string(bad), "[0, 5)"});
    EXPECT_EQ(lin.weight.to_vector<float>(), weight) << "a failed step must not update the parameters";
  }
  EXPECT_GT(step({x, from_vector<int64_t>({0, 3})})[0].item<float>(), 0.0f) << "good steps go on after a failed one";
}

// ---------------------------------------------------------------- errors raised below the frontend

/// Runs `f`, which must fail as expect_error says, naming the user's line only: an error the runtime
/// raises (the GPU runtime, the executor) must not name a line of kiln's own sources.
void expect_error_below(const std::function<void()>& f, int line, const std::string& op,
                        const std::vector<std::string>& parts) {
  expect_error(f, line, op, parts);
  test::expect_no_kiln_line(test::error_of(f));
}

TEST(Errors, AnUnusableDeviceNamesTheCallersLine) {
  const Device missing{Device::Kind::CUDA, 7}; // no machine has it; without a driver the reason is the driver's
  expect_error_below([&] { (void)f32({2}).to(missing); }, __LINE__, "to", {"cuda:7"});
  expect_error_below([&] { (void)zeros({2}, kFloat32, missing); }, __LINE__, "zeros", {"cuda:7"});
  expect_error_below([&] { (void)arange(0, 4, 1, kFloat32, missing); }, __LINE__, "arange", {"cuda:7"});
  // a CPU with an index compared unequal to kCPU and was taken for cuda:3 (audit)
  const Device cpu3{Device::Kind::CPU, 3};
  expect_error([&] { (void)f32({2}).to(cpu3); }, __LINE__, "to", {"the CPU has no device index (got index 3)"});
  expect_error([&] { (void)zeros({2}, kFloat32, cpu3); }, __LINE__, "zeros", {"the CPU has no device index"});
}

TEST(Errors, ATracedValueReadOutsideItsFunctionNamesTheCallersLine) {
  Tensor leaked; // computed from the placeholder of a traced argument, which holds no data outside the trace
  auto f = compile([&](const std::vector<Tensor>& a) {
    leaked = a[0] * 2;
    return std::vector<Tensor>{a[0] + 1};
  });
  (void)f({f32({2})});
  expect_error_below([&] { (void)leaked.to_vector<float>(); }, __LINE__, "to_vector", {"f32[2]", "has no data"});
  expect_error_below([&] { realize({leaked}); }, __LINE__, "realize", {"has no data"});
  auto g = compile([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{a[0] + leaked}; });
  expect_error_below([&] { (void)g({f32({2})}); }, __LINE__, "compile", {"has no data"});
}

TEST(Errors, AReadOnTheLineOfALazyCheckKeepsTheCheckedOp) {
  // The read realizes (its errors below the frontend are its own), but the kernel's index check
  // recorded cross_entropy at this same line, and keeps it.
  const Tensor logits = zeros({2, 5}, kFloat32);
  expect_error([&] { (void)nn::functional::cross_entropy(logits, lazy_i64({1, 42})).item<float>(); }, __LINE__,
               "cross_entropy", {"target 42", "[0, 5)"});
  expect_error([&] { realize({nn::functional::nll_loss(logits, lazy_i64({-1, 0}))}); }, __LINE__, "nll_loss",
               {"target -1"});
}

TEST(Errors, BackwardThroughALeafAssignedSinceIsAnError) {
  // The graph uses w's old value; its gradient has nowhere to go (PyTorch: "modified by an inplace
  // operation"). It was dropped without a word before.
  Tensor w = from_vector<float>({1, 2}).requires_grad_();
  const Tensor loss = (w * w).sum();
  w.assign(from_vector<float>({10, 10}));
  expect_error([&] { loss.backward(); }, __LINE__, "backward", {"f32[2]", "assigned a new value since"});
  (w * w).sum().backward(); // from the new value: fine
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{20, 20}));
}

TEST(Errors, ReadingAValueThatDoesNotFitTheTypeIsAnError) {
  // As libtorch's item<T>: no wrap-around, no undefined conversion of NaN or of huge floats.
  const Tensor big = from_vector<int64_t>({5000000000});
  expect_error([&] { (void)big.item<int32_t>(); }, __LINE__, "item", {"5000000000", "cannot be converted to i32"});
  const Tensor f = from_vector<float>({1.5f, std::numeric_limits<float>::quiet_NaN()});
  expect_error([&] { (void)f.to_vector<int64_t>(); }, __LINE__, "to_vector", {"element 1", "cannot be converted to i64"});
  EXPECT_EQ(from_vector<float>({-2.9f, 3e9f}).to_vector<int64_t>(), (std::vector<int64_t>{-2, 3000000000}));
  EXPECT_EQ(big.item<int64_t>(), 5000000000);
}

TEST(Errors, ErrorIsARuntimeError) {
  try {
    (void)(f32({2}) + f32({3}));
    FAIL() << "no throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos);
  }
}

} // namespace
} // namespace kiln

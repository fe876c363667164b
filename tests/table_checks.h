#pragma once
/// \file table_checks.h
/// Test helpers shared by the tests that check layers against generated PyTorch tables
/// (test_layers1d, test_conv_transpose, test_transformer, ...): values, tolerances, gradchecks, the tables' weights, and the
/// check that fused, unfused and compiled runs of a program give the same bits.

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/options.h"

namespace kiln::test {

/// A function of several tensors, as gradcheck takes it.
using Fn1 = std::function<Tensor(const std::vector<Tensor>&)>;

/// t's elements as doubles.
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

/// A standard-normal f64 tensor of `shape` drawn from `seed`.
inline Tensor rnd(IntList shape, uint64_t seed) { return randn(std::move(shape), seed, kFloat64); }

/// A tensor of dtype `dt` and `shape` ({}: 0-d) holding `v`, each value converted as static_cast does.
inline Tensor tensor_of(const std::vector<double>& v, DType dt, IntList shape) {
  switch (dt) {
  case DType::Float32: return from_vector(std::vector<float>(v.begin(), v.end()), shape);
  case DType::Float64: return from_vector(v, shape);
  case DType::Int32: {
    std::vector<int32_t> x;
    for (double d : v) x.push_back(static_cast<int32_t>(d));
    return from_vector(x, shape);
  }
  case DType::Int64: {
    std::vector<int64_t> x;
    for (double d : v) x.push_back(static_cast<int64_t>(d));
    return from_vector(x, shape);
  }
  case DType::Bool: {
    std::vector<bool> x;
    for (double d : v) x.push_back(d != 0);
    return from_vector(x, shape);
  }
  }
  return {};
}

/// The number of elements of a tensor of `shape`.
inline int64_t numel_of(const IntList& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/// gradcheck(f, inputs) passes, its report printed where it does not.
inline void expect_gradcheck(const Fn1& f, const std::vector<Tensor>& inputs) {
  GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.ok) << r.report;
}

/// Within `rel` of PyTorch's value, relative to max(1, |want|).
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
}

/// Bitwise equal.
inline void expect_same(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << what << " [" << i << "]";
}

/// 1, 2, 3, ... shaped and typed like y: the weights of the tables' d(sum(y * u)).
inline Tensor weights_for(const Tensor& y) {
  return arange(1, static_cast<double>(y.numel()) + 1, 1, y.dtype()).reshape(y.shape());
}

/// A convolution's table case (fields name, shape, input, weight_shape, weight, bias ({}: none),
/// out_shape, out, grad, weight_grad, bias_grad) through conv(x, w, b): PyTorch's shape, values and
/// gradients of sum(out * u) (weights_for), each within 1e-12.
template <class Case>
void expect_conv_case(const Case& c, const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& conv) {
  Tensor x = from_vector(c.input, c.shape).requires_grad_();
  Tensor w = from_vector(c.weight, c.weight_shape).requires_grad_();
  Tensor b = c.bias.empty() ? Tensor() : from_vector(c.bias).requires_grad_();
  const Tensor y = conv(x, w, b);
  ASSERT_EQ(y.shape(), c.out_shape) << c.name;
  (y * weights_for(y)).sum().backward();
  expect_close(values(y), c.out, 1e-12, std::string(c.name) + " values");
  expect_close(values(x.grad()), c.grad, 1e-12, std::string(c.name) + " input grad");
  expect_close(values(w.grad()), c.weight_grad, 1e-12, std::string(c.name) + " weight grad");
  if (b.defined()) expect_close(values(b.grad()), c.bias_grad, 1e-12, std::string(c.name) + " bias grad");
}

/// A program of the mode check: its outputs (and gradients) from its inputs.
using Program = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// The values of program(inputs), realized together.
inline std::vector<std::vector<double>> program_values(const Program& program, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out = program(inputs);
  realize(out);
  std::vector<std::vector<double>> v;
  for (const Tensor& t : out) v.push_back(values(t));
  return v;
}

/// program(inputs(50)) gives the same bits fused and unfused; compile(program), traced once and replayed on
/// inputs(60) too, gives the eager bits at both.
inline void expect_fused_unfused_and_compiled_agree(const Program& program,
                                                    const std::function<std::vector<Tensor>(uint64_t)>& inputs) {
  const bool fusion = options().fusion;
  options().fusion = true;
  const auto fused = program_values(program, inputs(50));
  options().fusion = false;
  const auto unfused = program_values(program, inputs(50));
  options().fusion = fusion;
  ASSERT_EQ(fused.size(), unfused.size());
  for (size_t i = 0; i < fused.size(); ++i) expect_same(unfused[i], fused[i], "output " + std::to_string(i));
  CompiledFunction step = compile(program);
  for (uint64_t seed : {50, 60}) { // a replay with new values
    const auto eager = program_values(program, inputs(seed));
    const std::vector<Tensor> got = step(inputs(seed));
    ASSERT_EQ(got.size(), eager.size());
    for (size_t i = 0; i < got.size(); ++i) expect_same(values(got[i]), eager[i], "compiled output " + std::to_string(i));
  }
  EXPECT_EQ(step.num_traces(), 1u);
}

/// One named parameter of a PyTorch module's state dict, as the tables print it.
struct NamedValues {
  const char* name;           ///< its dotted name ("self_attn.in_proj_weight")
  IntList shape;              ///< its shape
  std::vector<double> values; ///< its values
};

/// Loads PyTorch's named parameters into `m` (the names must map 1:1 to m's named_parameters()).
inline void load_params(nn::Module& m, const std::vector<NamedValues>& params) {
  std::map<std::string, Tensor> mine;
  for (const auto& [n, t] : m.named_parameters()) mine[n] = t;
  ASSERT_EQ(mine.size(), params.size());
  for (const NamedValues& p : params) {
    ASSERT_TRUE(mine.count(p.name)) << p.name;
    mine[p.name].assign(from_vector(p.values, p.shape));
  }
}

} // namespace kiln::test

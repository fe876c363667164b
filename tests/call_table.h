#pragma once
/// \file call_table.h
/// Test helpers for the tables of PyTorch calls (tests/pytorch_reductions_table.inc, pytorch_losses_more_table.inc,
/// written by tests/tools/call_tables.py): each case names a call, which the test maps to the same kiln call, and
/// holds PyTorch's inputs, outputs and the gradients of sum(out * u) over its floating outputs (u = 1, 2, 3, ...).

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "tests/table_checks.h"

namespace kiln::test {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN(); ///< the tables' NaN
constexpr double kInf = std::numeric_limits<double>::infinity(); ///< the tables' infinity

/// One tensor of a table: dtype, shape and values (row-major).
struct TableTensor {
  DType dtype; ///< its dtype
  IntList shape; ///< its shape
  std::vector<double> values; ///< its values
};

/// One case: its name, the call id, PyTorch's inputs and outputs, and (with_grad) the gradients of the f64 inputs
/// that have them (empty for the others).
struct Case {
  const char* name; ///< the case
  const char* call; ///< the call id
  std::vector<TableTensor> inputs, outputs; ///< PyTorch's inputs and outputs
  bool with_grad; ///< whether the gradients are checked
  std::vector<std::vector<double>> grads; ///< one per input
};

/// A kiln call of a table: the outputs from the inputs.
using Call = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Equal to PyTorch's within 1e-12 relative to max(1, |want|), NaN where it is NaN and infinities exactly.
inline void expect_matches(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i]))
      EXPECT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << what << " [" << i << "]: " << got[i] << " vs " << want[i];
    else EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, std::fabs(want[i]))) << what << " [" << i << "]";
  }
}

/// The case's inputs as tensors (the f64 ones requiring grad when the case has gradients).
inline std::vector<Tensor> inputs_of(const Case& c) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const TableTensor& t = c.inputs[i];
    Tensor x = test::tensor_of(t.values, t.dtype, t.shape);
    if (c.with_grad && t.dtype == kFloat64 && !c.grads[i].empty()) x.requires_grad_();
    xs.push_back(x);
  }
  return xs;
}

/// Each output's dtype, shape and values.
inline void check_outputs(const Case& c, const std::vector<Tensor>& outs) {
  ASSERT_EQ(outs.size(), c.outputs.size()) << c.name;
  for (size_t k = 0; k < outs.size(); ++k) {
    const std::string what = std::string(c.name) + " output " + std::to_string(k);
    EXPECT_EQ(outs[k].dtype(), c.outputs[k].dtype) << what;
    EXPECT_EQ(outs[k].shape(), c.outputs[k].shape) << what;
    expect_matches(values(outs[k]), c.outputs[k].values, what);
  }
}

/// The gradients of sum(out * u) over the floating outputs, for each input whose table gradient is not empty.
inline void check_grads(const Case& c, const std::vector<Tensor>& xs, const std::vector<Tensor>& outs) {
  Tensor loss = zeros({}, kFloat64);
  for (const Tensor& o : outs)
    if (o.dtype() == kFloat64) loss = loss + (o * test::weights_for(o)).sum();
  std::vector<Tensor> wrt;
  for (const Tensor& x : xs)
    if (x.requires_grad()) wrt.push_back(x);
  const std::vector<Tensor> g = grad({loss}, wrt, {}, /*allow_unused=*/true);
  size_t k = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i].requires_grad())
      expect_matches(values(g[k++]), c.grads[i], std::string(c.name) + " grad " + std::to_string(i));
}

/// Every case of the table through its kiln call: outputs and gradients as PyTorch's.
inline void expect_call_table(const std::vector<Case>& cases, const std::map<std::string, Call>& calls) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(calls.count(c.call)) << "no kiln call for " << c.call;
    const std::vector<Tensor> xs = inputs_of(c);
    const std::vector<Tensor> outs = calls.at(c.call)(xs);
    check_outputs(c, outs);
    if (c.with_grad) check_grads(c, xs, outs);
  }
}

/// Every call of the map has a case in the table.
inline void expect_every_call_used(const std::vector<Case>& cases, const std::map<std::string, Call>& calls) {
  std::map<std::string, int> used;
  for (const Case& c : cases) ++used[c.call];
  for (const auto& [id, call] : calls) EXPECT_TRUE(used.count(id)) << id << " has no table case";
}

} // namespace kiln::test

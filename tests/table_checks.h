#pragma once
/// \file table_checks.h
/// Test helpers shared by the tests that check layers against generated PyTorch tables
/// (test_layers1d, test_conv_transpose): values, tolerances, gradchecks and the tables' weights.

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/autograd.h"
#include "kiln/kiln.h"

namespace kiln::test {

/// A function of several tensors, as gradcheck takes it.
using Fn1 = std::function<Tensor(const std::vector<Tensor>&)>;

/// t's elements as doubles.
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

/// A standard-normal f64 tensor of `shape` drawn from `seed`.
inline Tensor rnd(IntList shape, uint64_t seed) { return randn(std::move(shape), seed, kFloat64); }

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

} // namespace kiln::test

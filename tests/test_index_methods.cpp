// torch.Tensor's indexing methods (x.gather, x.index_select, x.scatter_add, x.index_add, x.scatter,
// x.scatter_reduce, x.index_fill, x.index_copy, x.index_put, x.take, x.take_along_dim) and index_put with bool
// mask indices, against PyTorch 1.13 (tests/pytorch_index_methods_table.inc, from
// tests/tools/pytorch_index_methods_table.py): values and the gradients of every f64 input; masks computed
// already and lazy ones (a where() where the values need no count of the mask's true elements, an error
// otherwise), gradchecks, fused / unfused / compile() agreement, and the errors.

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/call_table.h"
#include "tests/error_of.h"
#include "tests/table_checks.h"

namespace kiln {
namespace {

using test::Call;
using test::Case;
using test::expect_error_at;
using test::expect_gradcheck;
using test::expect_same;
using test::rnd;
using test::values;
using Vec = std::vector<Tensor>;

const std::vector<Case> kCases = {
#include "tests/pytorch_index_methods_table.inc"
};

// The table's calls, as the methods (and index_put with the masks where the id puts them).
const std::map<std::string, Call>& calls() {
  static const std::map<std::string, Call> c = {
      {"gather_d1", [](const Vec& a) { return Vec{a[0].gather(1, a[1])}; }},
      {"index_select_dm1", [](const Vec& a) { return Vec{a[0].index_select(-1, a[1])}; }},
      {"scatter_add_d0", [](const Vec& a) { return Vec{a[0].scatter_add(0, a[1], a[2])}; }},
      {"index_add_d1_alpha", [](const Vec& a) { return Vec{a[0].index_add(1, a[1], a[2], -1.5)}; }},
      {"scatter_d1", [](const Vec& a) { return Vec{a[0].scatter(1, a[1], a[2])}; }},
      {"scatter_value_d0", [](const Vec& a) { return Vec{a[0].scatter(0, a[1], 2.5)}; }},
      {"scatter_reduce_amax_d0", [](const Vec& a) { return Vec{a[0].scatter_reduce(0, a[1], a[2], "amax", false)}; }},
      {"index_fill_d0", [](const Vec& a) { return Vec{a[0].index_fill(0, a[1], -4.0)}; }},
      {"index_copy_dm1", [](const Vec& a) { return Vec{a[0].index_copy(-1, a[1], a[2])}; }},
      {"index_put_two", [](const Vec& a) { return Vec{a[0].index_put({a[1], a[2]}, a[3])}; }},
      {"take", [](const Vec& a) { return Vec{a[0].take(a[1])}; }},
      {"take_along_dim_d1", [](const Vec& a) { return Vec{a[0].take_along_dim(a[1], 1)}; }},
      {"take_along_dim_flat", [](const Vec& a) { return Vec{a[0].take_along_dim(a[1])}; }},
      {"put_mask", [](const Vec& a) { return Vec{a[0].index_put({a[1]}, a[2])}; }},
      {"put_mask_acc", [](const Vec& a) { return Vec{a[0].index_put({a[1]}, a[2], true)}; }},
      {"put_mask_index", [](const Vec& a) { return Vec{a[0].index_put({a[1], a[2]}, a[3])}; }},
      {"put_index_mask_acc", [](const Vec& a) { return Vec{a[0].index_put({a[1], a[2]}, a[3], true)}; }},
      {"put_mask_mask", [](const Vec& a) { return Vec{a[0].index_put({a[1], a[2]}, a[3])}; }},
  };
  return c;
}

// The mask cases whose values need no count of the mask's true elements (a where(), lazy masks too).
const std::set<std::string> kCountless = {"mask_rows_broadcast",        "mask_rows_broadcast_leading_one",
                                          "mask_rows_accumulate",       "mask_full_scalar",
                                          "mask_full_scalar_accumulate", "mask_2d_of_3d_broadcast",
                                          "mask_none_true",             "mask_column_broadcast",
                                          "mask_empty_self"};

bool is_mask_case(const Case& c) { return std::string(c.call).rfind("put_", 0) == 0; }

TEST(IndexMethods, MatchPyTorch) {
  test::expect_call_table(kCases, calls()); // the masks here are computed already (from the table)
  test::expect_every_call_used(kCases, calls());
}

// The same cases with every mask lazy (computed from itself, not realized): the countless ones give PyTorch's
// values and gradients; the others are an error that says why.
TEST(IndexPutMask, LazyMasks) {
  for (const Case& c : kCases) {
    if (!is_mask_case(c)) continue;
    SCOPED_TRACE(c.name);
    Vec xs = test::inputs_of(c);
    for (Tensor& x : xs)
      if (x.dtype() == kBool) x = logical_not(logical_not(x)); // lazy
    const Call& call = calls().at(c.call);
    if (!kCountless.count(c.name)) {
      const std::string msg = test::error_of([&] { (void)call(xs); });
      EXPECT_EQ(msg.rfind("index_put: ", 0), 0u) << msg;
      EXPECT_NE(msg.find("data-dependent"), std::string::npos) << msg;
      continue;
    }
    const Vec outs = call(xs);
    test::check_outputs(c, outs);
    test::check_grads(c, xs, outs);
  }
}

TEST(IndexPutMask, Gradcheck) {
  const Tensor rows = from_vector<bool>({true, false, true, true}), full = rnd({4, 3}, 3) > 0.0;
  expect_gradcheck([&](const Vec& v) { return (v[0].index_put({rows}, v[1]) * v[2]).sum(); },
                   {rnd({4, 3}, 4), rnd({3}, 5), rnd({4, 3}, 6)});
  expect_gradcheck([&](const Vec& v) { return (v[0].index_put({full}, v[1], true) * v[2]).sum(); },
                   {rnd({4, 3}, 7), rnd({}, 8), rnd({4, 3}, 9)});
  expect_gradcheck([&](const Vec& v) { return (v[0].index_put({rows}, v[1]) * v[2]).sum(); }, // one row per place
                   {rnd({4, 3}, 10), rnd({3, 3}, 11), rnd({4, 3}, 12)});
}

// x[x > 0] = v (lazy in every mode), x[mask] += w, and their gradients.
std::vector<Tensor> masked_program(const Tensor& x, const Tensor& v, const Tensor& w) {
  const Tensor a = x.index_put({x > 0.0}, v);
  const Tensor b = a.index_put({x.slice(1, 0, 1).squeeze(1) < 0.5}, w, true);
  const Tensor loss = (b * b).sum();
  std::vector<Tensor> out = {a, b, loss};
  for (const Tensor& g : grad({loss}, {x, v, w})) out.push_back(g);
  return out;
}

TEST(IndexPutMask, FusedUnfusedAndCompiledAgree) {
  test::expect_fused_unfused_and_compiled_agree(
      [](const Vec& v) { return masked_program(v[0], v[1], v[2]); },
      [](uint64_t seed) {
        return Vec{randn({4, 3}, seed, kFloat64).requires_grad_(), randn({}, seed + 1, kFloat64).requires_grad_(),
                   randn({3}, seed + 2, kFloat64).requires_grad_()};
      });
}

TEST(IndexMethods, AreTheFreeFunctions) {
  const Tensor x = rnd({3, 4}, 13), i = from_vector<int64_t>({2, 0}), src = rnd({3, 2}, 14);
  const Tensor g = from_vector<int64_t>({1, 0, 3, 3, 2, 1}, {3, 2});
  expect_same(values(x.gather(1, g)), values(gather(x, 1, g)), "gather");
  expect_same(values(x.index_select(0, i)), values(index_select(x, 0, i)), "index_select");
  expect_same(values(x.scatter_add(1, g, src)), values(scatter_add(x, 1, g, src)), "scatter_add");
  expect_same(values(x.index_add(0, i, rnd({2, 4}, 15), 2.0)), values(index_add(x, 0, i, rnd({2, 4}, 15), 2.0)),
              "index_add");
  expect_same(values(x.scatter_reduce(1, g, src, "prod")), values(scatter_reduce(x, 1, g, src, "prod")),
              "scatter_reduce");
  expect_same(values(x.index_fill(1, i, from_vector<double>({7.0}, {}))),
              values(index_fill(x, 1, i, from_vector<double>({7.0}, {}))), "index_fill tensor");
  expect_same(values(x.take_along_dim(g, 1)), values(take_along_dim(x, g, 1)), "take_along_dim");
}

// clang-format off
TEST(IndexMethods, ErrorsNameTheCallersLine) {
  const Tensor x = rnd({3, 4}, 16), i = from_vector<int64_t>({5});
  expect_error_at([&] { (void)x.gather(1, from_vector<int64_t>({0, 5, 1}, {3, 1})); }, __FILE__, __LINE__, "gather", {"index 5", "[0, 4)"});
  expect_error_at([&] { (void)x.index_select(2, i); }, __FILE__, __LINE__, "index_select", {"dim"});
  expect_error_at([&] { (void)x.scatter(0, from_vector<int64_t>({5}, {1, 1}), 1.0); }, __FILE__, __LINE__, "scatter", {"index 5"});
  expect_error_at([&] { (void)x.index_put({i}, rnd({4}, 17)); }, __FILE__, __LINE__, "index_put", {"index 5"});
  expect_error_at([&] { (void)x.take(from_vector<int64_t>({12})); }, __FILE__, __LINE__, "take", {"index 12"});
  expect_error_at([&] { (void)x.scatter_reduce(0, from_vector<int64_t>({0}, {1, 1}), x, "median"); }, __FILE__, __LINE__, "scatter_reduce", {"median"});
}

TEST(IndexPutMask, Errors) {
  const Tensor x = rnd({3, 4}, 18);
  const Tensor rows = from_vector<bool>({true, false, true}), cols = from_vector<bool>({true, false, true, false});
  expect_error_at([&] { (void)x.index_put({cols}, rnd({4}, 19)); }, __FILE__, __LINE__, "index_put", {"the shape of the mask [4] at index 0 does not match the shape of the indexed tensor [3, 4] at index 0", "f64[3,4]", "bool[4]"});
  expect_error_at([&] { (void)x.index_put({from_vector<int64_t>({0}), rows}, rnd({}, 20)); }, __FILE__, __LINE__, "index_put", {"the shape of the mask [3] at index 0 does not match the shape of the indexed tensor [3, 4] at index 1"});
  expect_error_at([&] { (void)x.index_put({rows, rows}, rnd({}, 21)); }, __FILE__, __LINE__, "index_put", {"the shape of the mask [3] at index 0", "at index 1"});
  expect_error_at([&] { (void)x.index_put({x > 0.0, rows}, rnd({}, 22)); }, __FILE__, __LINE__, "index_put", {"too many indices for a tensor of dimension 2"});
  expect_error_at([&] { (void)x.index_put({from_vector<bool>({true}, {})}, rnd({}, 23)); }, __FILE__, __LINE__, "index_put", {"0-d bool mask"});
  expect_error_at([&] { (void)x.index_put({rows}, rnd({4}, 24).to(kFloat32)); }, __FILE__, __LINE__, "index_put", {"self's dtype"});
  expect_error_at([&] { (void)(x > 0.0).index_put({rows}, from_vector<bool>({true}), true); }, __FILE__, __LINE__, "index_put", {"accumulate is not defined for bool"});
  // computed masks: values are PyTorch's [count, 4] (2 true rows); lazy ones: only one value per masked place
  expect_error_at([&] { (void)x.index_put({rows}, rnd({3, 4}, 25)); }, __FILE__, __LINE__, "index_put", {"values must broadcast to [2, 4]"});
  expect_error_at([&] { (void)x.index_put({logical_not(logical_not(rows))}, rnd({2, 4}, 26)); }, __FILE__, __LINE__, "index_put", {"data-dependent", "values that broadcast to [1, 4]", "bool[3]", "f64[2,4]"});
  CompiledFunction step = compile([&](const Vec& v) { return Vec{v[0].index_put({v[1]}, v[2])}; }); const int traced = __LINE__;
  expect_error_at([&] { (void)step({x, rows, rnd({2, 4}, 27)}); }, __FILE__, traced, "index_put", {"data-dependent", "traced by compile()"});
}
// clang-format on

} // namespace
} // namespace kiln

// More losses of torch.nn.functional (kiln/functional.h, losses.cpp) against PyTorch 1.13
// (tests/pytorch_losses_more_table.inc, from tests/tools/pytorch_losses_more_table.py): each loss with the
// reductions none, mean and sum, its values and the gradients of sum(out * u) with respect to every differentiable
// input; gradchecks of a few, fused / unfused / compile() agreement, and the errors.

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/call_table.h"
#include "tests/error_of.h"
#include "tests/table_checks.h"

namespace kiln {
namespace {

namespace F = nn::functional;
using F::Reduction;
using test::Call;
using test::Case;
using test::expect_error_at;
using test::kInf;
using test::kNaN;

const std::vector<Case> kCases = {
#include "tests/pytorch_losses_more_table.inc"
};

using V = const std::vector<Tensor>&;

// The kiln calls of one reduction (named as the table's ids with the reduction's name appended).
void add_calls(std::map<std::string, Call>& m, const std::string& name, Reduction r) {
  auto one = [](Tensor t) { return std::vector<Tensor>{t}; };
  m["margin_ranking_" + name] = [=](V x) { return one(F::margin_ranking_loss(x[0], x[1], x[2], 0.5, r)); };
  m["hinge_embedding_" + name] = [=](V x) { return one(F::hinge_embedding_loss(x[0], x[1], 1.5, r)); };
  m["soft_margin_" + name] = [=](V x) { return one(F::soft_margin_loss(x[0], x[1], r)); };
  m["multilabel_soft_margin_" + name] = [=](V x) { return one(F::multilabel_soft_margin_loss(x[0], x[1], {}, r)); };
  m["multilabel_soft_margin_w_" + name] = [=](V x) { return one(F::multilabel_soft_margin_loss(x[0], x[1], x[2], r)); };
  m["multi_margin_" + name] = [=](V x) { return one(F::multi_margin_loss(x[0], x[1], {.reduction = r})); };
  m["multi_margin_p2_w_" + name] = [=](V x) {
    return one(F::multi_margin_loss(x[0], x[1], {.p = 2, .margin = 0.7, .weight = x[2], .reduction = r}));
  };
  m["multilabel_margin_" + name] = [=](V x) { return one(F::multilabel_margin_loss(x[0], x[1], r)); };
  m["triplet_" + name] = [=](V x) { return one(F::triplet_margin_loss(x[0], x[1], x[2], {.reduction = r})); };
  m["triplet_p1_swap_" + name] = [=](V x) {
    return one(
        F::triplet_margin_loss(x[0], x[1], x[2], {.margin = 2, .p = 1, .eps = 1e-3, .swap = true, .reduction = r}));
  };
  m["cosine_embedding_" + name] = [=](V x) { return one(F::cosine_embedding_loss(x[0], x[1], x[2], 0.2, r)); };
  m["poisson_" + name] = [=](V x) { return one(F::poisson_nll_loss(x[0], x[1], {.reduction = r})); };
  m["poisson_rate_full_" + name] = [=](V x) {
    return one(F::poisson_nll_loss(x[0], x[1], {.log_input = false, .full = true, .eps = 1e-3, .reduction = r}));
  };
  m["gaussian_" + name] = [=](V x) { return one(F::gaussian_nll_loss(x[0], x[1], x[2], {.reduction = r})); };
  m["gaussian_full_" + name] = [=](V x) {
    return one(F::gaussian_nll_loss(x[0], x[1], x[2], {.full = true, .eps = 0.1, .reduction = r}));
  };
}

const std::map<std::string, Call>& calls() {
  static const std::map<std::string, Call> m = [] {
    std::map<std::string, Call> c;
    add_calls(c, "none", Reduction::None);
    add_calls(c, "mean", Reduction::Mean);
    add_calls(c, "sum", Reduction::Sum);
    return c;
  }();
  return m;
}

TEST(LossesMore, MatchPyTorch) { test::expect_call_table(kCases, calls()); }

TEST(LossesMore, EveryCallIsInTheTable) { test::expect_every_call_used(kCases, calls()); }

Tensor spread(IntList shape, uint64_t seed) { return test::rnd(std::move(shape), seed) * 2 + 0.05; }

TEST(LossesMore, Gradcheck) {
  const Tensor t = from_vector<int64_t>({2, 0, 3});
  test::expect_gradcheck([&](V x) { return F::multi_margin_loss(x[0], t, {.p = 2}); }, {spread({3, 4}, 1)});
  const Tensor labels = from_vector<int64_t>({1, 3, -1, 0, 2, 0, 1, 3}, {2, 4});
  test::expect_gradcheck([&](V x) { return F::multilabel_margin_loss(x[0], labels); }, {spread({2, 4}, 2)});
  test::expect_gradcheck([](V x) { return F::triplet_margin_loss(x[0], x[1], x[2], {.swap = true}); },
                         {spread({3, 4}, 3), spread({3, 4}, 4), spread({3, 4}, 5)});
  const Tensor y = from_vector<double>({1, -1, -1});
  test::expect_gradcheck([&](V x) { return F::cosine_embedding_loss(x[0], x[1], y, -0.5); },
                         {spread({3, 4}, 6), spread({3, 4}, 7)});
  test::expect_gradcheck([](V x) { return F::gaussian_nll_loss(x[0], x[1], x[2], {.full = true}); },
                         {spread({2, 3}, 8), spread({2, 3}, 9), abs(spread({2}, 10)) + 0.5});
  test::expect_gradcheck([](V x) { return F::poisson_nll_loss(x[0], x[1], {.full = true}); },
                         {spread({2, 3}, 11), abs(spread({2, 3}, 12)) + 0.5});
}

TEST(LossesMore, FusedUnfusedAndCompiledAgree) {
  test::expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& in) {
        const Tensor& x = in[0];
        const Tensor t = from_vector<int64_t>({1, 0, 3});
        const Tensor y = from_vector<double>({1, -1, 1});
        const Tensor loss = F::multi_margin_loss(x, t) + F::soft_margin_loss(x, x.detach().sign()) +
                            F::triplet_margin_loss(x, x * 0.5, x.flip({0})) + F::cosine_embedding_loss(x, x.exp(), y) +
                            F::gaussian_nll_loss(x, x * x, x.abs()) + F::hinge_embedding_loss(x, x.sign(), 0.5);
        return std::vector<Tensor>{loss, grad({loss}, {x})[0]};
      },
      [](uint64_t seed) {
        return std::vector<Tensor>{test::rnd({3, 4}, seed).requires_grad_()};
      });
}

TEST(LossesMore, Errors) {
  const Tensor x = test::rnd({3, 4}, 1), v = test::rnd({3}, 2);
  const Tensor t = from_vector<int64_t>({1, 0, 3});
  const std::string file = __FILE__;
  expect_error_at([&] { F::margin_ranking_loss(x, x, v); }, file, __LINE__, "margin_ranking_loss", {"rank", "f64[3]"});
  expect_error_at([&] { F::margin_ranking_loss(x, x, x, 0, Reduction::BatchMean); }, file, __LINE__,
                  "margin_ranking_loss", {"BatchMean"});
  expect_error_at([&] { F::soft_margin_loss(x, v.unsqueeze(0)); }, file, __LINE__, "soft_margin_loss",
                  {"broadcast", "f64[3,4]", "f64[1,3]"});
  expect_error_at([&] { F::hinge_embedding_loss(arange(3), v); }, file, __LINE__, "hinge_embedding_loss",
                  {"floating", "i64[3]"});
  const Tensor two = from_vector<int64_t>({1, 0}), out_of_range = from_vector<int64_t>({1, 4, 0});
  expect_error_at([&] { F::multi_margin_loss(x, two); }, file, __LINE__, "multi_margin_loss",
                  {"one target per sample", "f64[3,4]", "i64[2]"});
  expect_error_at([&] { F::multi_margin_loss(x, t, {.p = 3}); }, file, __LINE__, "multi_margin_loss",
                  {"p must be 1 or 2"});
  expect_error_at([&] { F::multi_margin_loss(x, out_of_range); }, file, __LINE__, "multi_margin_loss",
                  {"target 4", "[0, 4)", "i64[3]"});
  expect_error_at([&] { F::multi_margin_loss(x, t, {.weight = v}); }, file, __LINE__, "multi_margin_loss",
                  {"[C]", "f64[3]"});
  expect_error_at([&] { F::multi_margin_loss(x, v); }, file, __LINE__, "multi_margin_loss", {"integer", "f64[3]"});
  expect_error_at([&] { F::multilabel_margin_loss(x, t); }, file, __LINE__, "multilabel_margin_loss",
                  {"input's shape", "f64[3,4]", "i64[3]"});
  const Tensor bad_labels = from_vector<int64_t>({0, -1, 1, 2, 3, -2, 0, 0, 1, 2, 3, 0}, {3, 4});
  expect_error_at([&] { F::multilabel_margin_loss(x, bad_labels); }, file, __LINE__, "multilabel_margin_loss",
                  {"target -2", "[-1, 4)"});
  expect_error_at([&] { F::triplet_margin_loss(x, x, v); }, file, __LINE__, "triplet_margin_loss", {"rank", "f64[3]"});
  expect_error_at([&] { F::cosine_embedding_loss(x, x, x); }, file, __LINE__, "cosine_embedding_loss",
                  {"target [N]", "f64[3,4]"});
  expect_error_at([&] { F::gaussian_nll_loss(x, x, test::rnd({4}, 3)); }, file, __LINE__, "gaussian_nll_loss",
                  {"var", "f64[4]"});
  const Tensor negative = (-x.abs()).realize();
  expect_error_at([&] { F::gaussian_nll_loss(x, x, negative); }, file, __LINE__, "gaussian_nll_loss",
                  {"negative", "f64[3,4]"});
  expect_error_at([&] { F::poisson_nll_loss(x, x, {.reduction = Reduction::BatchMean}); }, file, __LINE__,
                  "poisson_nll_loss", {"BatchMean"});
}

} // namespace
} // namespace kiln

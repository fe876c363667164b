// More of PyTorch's functions (kiln/tensor.h, kiln/special.h: aliases.cpp, special.cpp) against PyTorch 1.13
// (tests/pytorch_parity_more_table.inc, from tests/tools/pytorch_parity_more_table.py): values and the gradients of
// sum(out * u) of every f64 input, with signed zeros, NaN, infinities, huge and tiny magnitudes, zero-size and 0-d
// inputs and negative dims; gradchecks, fused / unfused / compile() agreement, clone's identity, and the errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
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
using test::values;

using test::kInf;
using test::kNaN;
namespace F = nn::functional;

const std::vector<Case> kCases = {
#include "tests/pytorch_parity_more_table.inc"
};

Tensor boolean(bool v) { return full({}, v, kBool); }

// The kiln call of each call id of the table (the same arguments as the PyTorch call of that id).
const std::map<std::string, Call>& calls() {
  using V = const std::vector<Tensor>&;
  using T = std::vector<Tensor>;
  static const std::map<std::string, Call> m = {
      {"hypot", [](V x) { return T{hypot(x[0], x[1])}; }},
      {"logaddexp2", [](V x) { return T{logaddexp2(x[0], x[1])}; }},
      {"logit", [](V x) { return T{logit(x[0])}; }},
      {"logit_eps", [](V x) { return T{x[0].logit(0.1)}; }},
      {"sinc", [](V x) { return T{sinc(x[0])}; }},
      {"deg2rad", [](V x) { return T{deg2rad(x[0])}; }},
      {"rad2deg", [](V x) { return T{rad2deg(x[0])}; }},
      {"float_power", [](V x) { return T{float_power(x[0], x[1])}; }},
      {"float_power_2_5", [](V x) { return T{x[0].float_power(2.5)}; }},
      {"fmax", [](V x) { return T{fmax(x[0], x[1])}; }},
      {"fmin", [](V x) { return T{x[0].fmin(x[1])}; }},
      {"heaviside", [](V x) { return T{heaviside(x[0], x[1])}; }},
      {"logical_xor", [](V x) { return T{logical_xor(x[0], x[1])}; }},
      {"xlog1py", [](V x) { return T{special::xlog1py(x[0], x[1])}; }},
      {"entr", [](V x) { return T{special::entr(x[0])}; }},
      {"expit", [](V x) { return T{special::expit(x[0])}; }},
      {"isclose", [](V x) { return T{isclose(x[0], x[1])}; }},
      {"isclose_tol_nan", [](V x) { return T{x[0].isclose(x[1], 0.1, 0.01, true)}; }},
      {"allclose", [](V x) { return T{boolean(allclose(x[0], x[1]))}; }},
      {"allclose_tol", [](V x) { return T{boolean(x[0].allclose(x[1], 0.1, 0.01))}; }},
      {"equal", [](V x) { return T{boolean(equal(x[0], x[1]))}; }},
      {"cat_d1", [](V x) { return T{cat({x[0], x[1]}, 1)}; }},
      {"concatenate_dm1", [](V x) { return T{concatenate({x[0], x[1]}, -1)}; }},
      {"clip", [](V x) { return T{clip(x[0], -0.5, 0.7)}; }},
      {"arctan2", [](V x) { return T{arctan2(x[0], x[1])}; }},
      {"arcsinh", [](V x) { return T{arcsinh(x[0])}; }},
      {"negative", [](V x) { return T{negative(x[0])}; }},
      {"absolute", [](V x) { return T{absolute(x[0])}; }},
      {"fix", [](V x) { return T{fix(x[0])}; }},
      {"multiply", [](V x) { return T{multiply(x[0], x[1])}; }},
      {"divide", [](V x) { return T{divide(x[0], x[1])}; }},
      {"subtract", [](V x) { return T{subtract(x[0], x[1])}; }},
      {"greater_equal", [](V x) { return T{greater_equal(x[0], x[1])}; }},
      {"less", [](V x) { return T{less(x[0], x[1])}; }},
      {"not_equal", [](V x) { return T{not_equal(x[0], x[1])}; }},
      {"movedim", [](V x) { return T{movedim(x[0], 0, -1)}; }},
      {"movedim_list", [](V x) { return T{x[0].movedim({0, 3}, {2, 0})}; }},
      {"moveaxis", [](V x) { return T{x[0].moveaxis(-1, 1)}; }},
      {"swapaxes", [](V x) { return T{swapaxes(x[0], 0, 2)}; }},
      {"select", [](V x) { return T{select(x[0], 1, -1)}; }},
      {"select_d0", [](V x) { return T{x[0].select(0, 1)}; }},
      {"ravel", [](V x) { return T{ravel(x[0])}; }},
      {"atleast_1d", [](V x) { return T{atleast_1d(x[0])}; }},
      {"atleast_2d", [](V x) { return T{atleast_2d(x[0])}; }},
      {"atleast_3d", [](V x) { return T{atleast_3d(x[0])}; }},
      {"broadcast_tensors", [](V x) { return broadcast_tensors({x[0], x[1]}); }},
      {"broadcast_to", [](V x) { return T{x[0].broadcast_to({2, -1, 3})}; }},
      {"diagflat", [](V x) { return T{diagflat(x[0])}; }},
      {"diagflat_m1", [](V x) { return T{diagflat(x[0], -1)}; }},
      {"inner", [](V x) { return T{inner(x[0], x[1])}; }},
      {"eye_3", [](V) { return T{eye(3, std::nullopt, kFloat64)}; }},
      {"eye_2x4", [](V) { return T{eye(2, 4, kFloat64)}; }},
      {"linspace_7", [](V) { return T{linspace(-1.5, 2.0, 7, kFloat64)}; }},
      {"linspace_1", [](V) { return T{linspace(3.0, 5.0, 1, kFloat64)}; }},
      {"linspace_0", [](V) { return T{linspace(3.0, 5.0, 0, kFloat64)}; }},
      {"logspace_5", [](V) { return T{logspace(-2.0, 1.0, 5, 10, kFloat64)}; }},
      {"logspace_base2", [](V) { return T{logspace(0.0, 3.5, 8, 2.0, kFloat64)}; }},
      {"full_like", [](V x) { return T{full_like(x[0], 2.5)}; }},
      {"clone", [](V x) { return T{x[0].clone() * 2.0}; }},
      {"expand_as", [](V x) { return T{x[0].expand_as(x[1])}; }},
      {"reshape_as", [](V x) { return T{x[0].reshape_as(x[1])}; }},
      {"view_as", [](V x) { return T{x[0].view_as(x[1])}; }},
      {"type_as", [](V x) { return T{x[0].type_as(x[1])}; }},
      {"new_zeros", [](V x) { return T{x[0].new_zeros({2, 3})}; }},
      {"new_ones", [](V x) { return T{x[0].new_ones({1, 2})}; }},
      {"new_full", [](V x) { return T{x[0].new_full({3}, 7)}; }},
      {"hardshrink", [](V x) { return T{F::hardshrink(x[0])}; }},
      {"hardshrink_1", [](V x) { return T{nn::Hardshrink(1.0)(x[0])}; }},
      {"softshrink", [](V x) { return T{nn::Softshrink()(x[0])}; }},
      {"softshrink_0", [](V x) { return T{F::softshrink(x[0], 0.0)}; }},
      {"tanhshrink", [](V x) { return T{nn::Tanhshrink()(x[0])}; }},
      {"lrn_3", [](V x) { return T{F::local_response_norm(x[0], 3)}; }},
      {"lrn_2_args", [](V x) { return T{nn::LocalResponseNorm(2, 0.5, 0.6, 2.0)(x[0])}; }},
      {"lrn_4", [](V x) { return T{F::local_response_norm(x[0], 4, 0.1)}; }},
      {"CrossEntropyLoss",
       [](V x) {
         return T{nn::CrossEntropyLoss({.weight = x[2], .label_smoothing = 0.1}).forward(x[0], x[1])};
       }},
      {"NLLLoss", [](V x) { return T{nn::NLLLoss({.ignore_index = 1}).forward(x[0], x[1])}; }},
      {"BCELoss", [](V x) { return T{nn::BCELoss(x[2]).forward(x[0], x[1])}; }},
      {"BCEWithLogitsLoss", [](V x) { return T{nn::BCEWithLogitsLoss({.pos_weight = x[2]}).forward(x[0], x[1])}; }},
      {"MSELoss", [](V x) { return T{nn::MSELoss(F::Reduction::Sum).forward(x[0], x[1])}; }},
      {"L1Loss", [](V x) { return T{nn::L1Loss(F::Reduction::None).forward(x[0], x[1])}; }},
      {"SmoothL1Loss", [](V x) { return T{nn::SmoothL1Loss(F::Reduction::Mean, 0.5).forward(x[0], x[1])}; }},
      {"HuberLoss", [](V x) { return T{nn::HuberLoss(F::Reduction::Mean, 2.0).forward(x[0], x[1])}; }},
      {"KLDivLoss", [](V x) { return T{nn::KLDivLoss(F::Reduction::BatchMean, true).forward(x[0], x[1])}; }},
      {"SoftMarginLoss", [](V x) { return T{nn::SoftMarginLoss().forward(x[0], x[1])}; }},
      {"MultiLabelSoftMarginLoss",
       [](V x) { return T{nn::MultiLabelSoftMarginLoss(x[2], F::Reduction::Sum).forward(x[0], x[1])}; }},
      {"MultiMarginLoss", [](V x) { return T{nn::MultiMarginLoss({.p = 2, .margin = 0.5}).forward(x[0], x[1])}; }},
      {"MultiLabelMarginLoss", [](V x) { return T{nn::MultiLabelMarginLoss(F::Reduction::None).forward(x[0], x[1])}; }},
      {"MarginRankingLoss", [](V x) { return T{nn::MarginRankingLoss(0.3).forward(x[0], x[1], x[2])}; }},
      {"CosineEmbeddingLoss",
       [](V x) { return T{nn::CosineEmbeddingLoss(0.2, F::Reduction::Sum).forward(x[0], x[1], x[2])}; }},
      {"HingeEmbeddingLoss", [](V x) { return T{nn::HingeEmbeddingLoss(0.5).forward(x[0], x[1])}; }},
      {"TripletMarginLoss",
       [](V x) {
         return T{nn::TripletMarginLoss({.margin = 0.5, .p = 1.0, .swap = true}).forward(x[0], x[1], x[2])};
       }},
      {"PoissonNLLLoss",
       [](V x) { return T{nn::PoissonNLLLoss({.log_input = false, .full = true}).forward(x[0], x[1])}; }},
      {"GaussianNLLLoss",
       [](V x) {
         return T{nn::GaussianNLLLoss({.full = true, .reduction = F::Reduction::None}).forward(x[0], x[1], x[2])};
       }},
      {"trapezoid", [](V x) { return T{trapezoid(x[0])}; }},
      {"trapezoid_dx_d0", [](V x) { return T{trapezoid(x[0], 0.5, 0)}; }},
      {"trapezoid_x", [](V x) { return T{trapezoid(x[0], x[1], 1)}; }},
      {"trapz_x", [](V x) { return T{trapz(x[0], x[1])}; }},
      {"cumulative_trapezoid", [](V x) { return T{cumulative_trapezoid(x[0], 2.0)}; }},
      {"cumulative_trapezoid_x", [](V x) { return T{cumulative_trapezoid(x[0], x[1], 0)}; }},
      {"cov", [](V x) { return T{cov(x[0])}; }},
      {"cov_0", [](V x) { return T{cov(x[0], 0)}; }},
      {"corrcoef", [](V x) { return T{corrcoef(x[0])}; }},
      {"pdist", [](V x) { return T{pdist(x[0])}; }},
      {"pdist_1", [](V x) { return T{F::pdist(x[0], 1.0)}; }},
      {"pdist_inf", [](V x) { return T{pdist(x[0], kInf)}; }},
      {"matrix_power_0", [](V x) { return T{matrix_power(x[0], 0)}; }},
      {"matrix_power_1", [](V x) { return T{matrix_power(x[0], 1)}; }},
      {"matrix_power_5", [](V x) { return T{linalg::matrix_power(x[0], 5)}; }},
      {"vander", [](V x) { return T{vander(x[0])}; }},
      {"vander_4_inc", [](V x) { return T{vander(x[0], 4, true)}; }},
      {"linalg_vander", [](V x) { return T{linalg::vander(x[0])}; }},
      {"linalg_vander_3", [](V x) { return T{linalg::vander(x[0], 3)}; }},
      {"multi_dot", [](V x) { return T{linalg::multi_dot({x[0], x[1], x[2]})}; }},
      {"vecdot", [](V x) { return T{linalg::vecdot(x[0], x[1], 0)}; }},
      {"BatchNorm3d",
       [](V x) {
         nn::BatchNorm3d m(3, {.momentum = 0.2});
         m.to(kFloat64);
         const Tensor y = m(x[0]);
         return T{y, m.running_mean.detach(), m.running_var.detach()};
       }},
      {"InstanceNorm3d",
       [](V x) {
         nn::InstanceNorm3d m(3, 1e-5, 0.1, /*affine=*/true);
         m.to(kFloat64);
         return T{m(x[0])};
       }},
      {"nonzero", [](V x) { return T{nonzero(x[0])}; }},
      {"argwhere", [](V x) { return T{x[0].argwhere()}; }},
      {"masked_select", [](V x) { return T{x[0].masked_select(x[1])}; }},
      {"adaptive_avg_pool3d", [](V x) { return T{F::adaptive_avg_pool3d(x[0], {2, 3, 1})}; }},
      {"AdaptiveAvgPool3d", [](V x) { return T{nn::AdaptiveAvgPool3d(2)(x[0])}; }},
      {"UpsamplingNearest2d", [](V x) { return T{nn::UpsamplingNearest2d({}, {2.0})(x[0])}; }},
      {"UpsamplingBilinear2d", [](V x) { return T{nn::UpsamplingBilinear2d({3, 5})(x[0])}; }},
      {"upsample_bilinear", [](V x) { return T{F::upsample_bilinear(x[0], {}, {2.0})}; }},
      {"lgamma", [](V x) { return T{lgamma(x[0])}; }},
      {"gammaln", [](V x) { return T{special::gammaln(x[0])}; }},
      {"digamma", [](V x) { return T{x[0].digamma()}; }},
      {"psi", [](V x) { return T{special::psi(x[0])}; }},
      {"mvlgamma_3", [](V x) { return T{mvlgamma(x[0], 3)}; }},
      {"multigammaln_1", [](V x) { return T{special::multigammaln(x[0], 1)}; }},
      {"rrelu_eval", [](V x) { return T{F::rrelu(x[0], 0.1, 0.3)}; }},
      {"RReLU_eval",
       [](V x) {
         nn::RReLU m;
         m.eval();
         return T{m(x[0])};
       }},
      {"isin", [](V x) { return T{isin(x[0], x[1])}; }},
      {"isin_invert", [](V x) { return T{isin(x[0], x[1], true)}; }},
      {"fliplr", [](V x) { return T{fliplr(x[0])}; }},
      {"flipud", [](V x) { return T{flipud(x[0])}; }},
      {"rsub", [](V x) { return T{rsub(x[0], x[1])}; }},
      {"rsub_alpha", [](V x) { return T{rsub(x[0], x[1], 2.5)}; }},
      {"split_with_sizes", [](V x) { return split_with_sizes(x[0], {1, 3}, 1); }},
      {"CosineSimilarity", [](V x) { return T{nn::CosineSimilarity(0).forward(x[0], x[1])}; }},
      {"PairwiseDistance", [](V x) { return T{nn::PairwiseDistance(1.0, 1e-6, true).forward(x[0], x[1])}; }},
  };
  return m;
}

TEST(ParityMore, MatchPyTorch) { test::expect_call_table(kCases, calls()); }

TEST(ParityMore, EveryCallIsInTheTable) { test::expect_every_call_used(kCases, calls()); }

// Distinct values away from the kinks: finite differences see one smooth branch.
Tensor spread(IntList shape, uint64_t seed) { return test::rnd(std::move(shape), seed) * 3 + 0.1; }
Tensor unit(IntList shape, uint64_t seed) { return rand(std::move(shape), seed, kFloat64) * 0.8 + 0.1; }

TEST(ParityMore, Gradcheck) {
  using V = const std::vector<Tensor>&;
  test::expect_gradcheck([](V x) { return hypot(x[0], x[1]); }, {spread({2, 3}, 1), spread({3}, 2)});
  test::expect_gradcheck([](V x) { return logaddexp2(x[0], x[1]); }, {spread({4}, 3), spread({4}, 4)});
  test::expect_gradcheck([](V x) { return logit(x[0]); }, {unit({5}, 5)});
  test::expect_gradcheck([](V x) { return logit(x[0], 0.05); }, {unit({5}, 6)});
  test::expect_gradcheck([](V x) { return sinc(x[0]); }, {spread({6}, 7)});
  test::expect_gradcheck([](V x) { return float_power(x[0], x[1]); }, {unit({3}, 8) + 0.5, spread({3}, 9)});
  test::expect_gradcheck([](V x) { return fmax(x[0], x[1]) + fmin(x[0], x[1]) * 2; }, {spread({5}, 10), spread({5}, 11)});
  test::expect_gradcheck([](V x) { return special::xlog1py(x[0], x[1]); }, {spread({4}, 12), unit({4}, 13) * 3});
  test::expect_gradcheck([](V x) { return special::entr(x[0]); }, {unit({4}, 14) * 2});
  test::expect_gradcheck([](V x) { return movedim(x[0], {0, 1}, {2, 0}) * x[1]; }, {spread({2, 3, 4}, 15), spread({2}, 16)});
  test::expect_gradcheck([](V x) { return inner(x[0], x[1]); }, {spread({2, 3}, 17), spread({4, 3}, 18)});
  test::expect_gradcheck([](V x) { return F::softshrink(x[0], 0.05) + F::tanhshrink(x[0]); }, {spread({5}, 19)});
  test::expect_gradcheck([](V x) { return F::local_response_norm(x[0], 3, 0.5, 0.7, 1.5); }, {spread({2, 4, 3}, 24)});
  test::expect_gradcheck([](V x) { return vander(x[0], 4) + vander(x[0], 4, true) * 0.5; }, {spread({4}, 25)});
  test::expect_gradcheck([](V x) { return linalg::vander(x[0], 3); }, {spread({2, 3}, 26)});
  test::expect_gradcheck([](V x) { return matrix_power(x[0], 3); }, {spread({2, 2}, 27) * 0.3});
  test::expect_gradcheck([](V x) { return corrcoef(x[0]) + cov(x[0], 0); }, {spread({2, 5}, 28)});
  test::expect_gradcheck([](V x) { return pdist(x[0]) + pdist(x[0], 3.0); }, {spread({4, 3}, 29)});
  test::expect_gradcheck([](V x) { return cumulative_trapezoid(x[0], x[1], 0); }, {spread({3, 2}, 30), spread({3}, 31)});
  test::expect_gradcheck([](V x) { return lgamma(x[0]) + digamma(x[0]); }, {spread({6}, 32)});
}

TEST(ParityMore, CustomGradientsAreDifferentiable) {
  // hypot, logit, xlog1py and entr have custom rules built from kiln ops: their second derivatives check.
  using V = const std::vector<Tensor>&;
  const auto second = [](const std::function<Tensor(const Tensor&)>& f) {
    return [f](V in) {
      const Tensor g = grad({f(in[0]).sum()}, {in[0]}, {}, false, /*create_graph=*/true)[0];
      return (g * g).sum();
    };
  };
  test::expect_gradcheck(second([](const Tensor& x) { return hypot(x, x * 0.5 + 1.0); }), {spread({4}, 20)});
  test::expect_gradcheck(second([](const Tensor& x) { return logit(x); }), {unit({4}, 21)});
  test::expect_gradcheck(second([](const Tensor& x) { return special::xlog1py(x, x * x); }), {spread({4}, 22)});
  test::expect_gradcheck(second([](const Tensor& x) { return special::entr(x); }), {unit({4}, 23)});
  test::expect_gradcheck(second([](const Tensor& x) { return lgamma(x); }), {spread({4}, 24)});
}

TEST(ParityMore, FusedUnfusedAndCompiledAgree) {
  test::expect_fused_unfused_and_compiled_agree(
      [](const std::vector<Tensor>& in) {
        const Tensor x = in[0], u = sigmoid(in[0]);
        const Tensor y = (hypot(x, x.movedim(0, 1).t()) + logaddexp2(x, x * 2.0) + logit(u, 0.01) + sinc(x) +
                          fmax(x, x.flip({1})) + special::xlog1py(x, u) + special::entr(u) + deg2rad(x))
                             .sum() +
                         inner(x, x).sum() + select(x, 1, -1).sum() + F::hardshrink(x).sum() +
                         F::softshrink(x).sum() + F::local_response_norm(x.reshape({1, 3, 3}), 2).sum() +
                         (lgamma(u + 0.25) + digamma(u + 0.5)).sum();
        return std::vector<Tensor>{y, isclose(x, x * 1.000001), grad({y}, {x})[0]};
      },
      [](uint64_t seed) {
        return std::vector<Tensor>{test::rnd({3, 3}, seed).requires_grad_()};
      });
}

TEST(ParityMore, CloneIsANewTensor) {
  Tensor x = from_vector<double>({1, 2, 3}).requires_grad_();
  Tensor c = x.clone();
  EXPECT_TRUE(c.requires_grad());
  (c * c).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 4, 6})); // the gradient flows through the clone
  c.assign(from_vector<double>({7, 8, 9}));
  EXPECT_EQ(values(x), (std::vector<double>{1, 2, 3})); // an assign to the clone leaves the original
  // A clone of a value without gradient, made a leaf, is a leaf of its own: the original's uses are not its uses.
  const Tensor w = from_vector<double>({1, 2});
  Tensor leaf = w.clone().requires_grad_();
  const Tensor g = grad({(w * leaf).sum()}, {leaf})[0];
  EXPECT_EQ(values(g), (std::vector<double>{1, 2}));
  EXPECT_TRUE(x.contiguous().requires_grad());
}

TEST(ParityMore, ModulesAsPyTorch) {
  // PyTorch 1.13's reprs of the same modules
  EXPECT_EQ(nn::Hardshrink().str(), "Hardshrink(0.5)");
  EXPECT_EQ(nn::Softshrink(1.0).str(), "Softshrink(1.0)");
  EXPECT_EQ(nn::Tanhshrink().str(), "Tanhshrink()");
  EXPECT_EQ(nn::LocalResponseNorm(5).str(), "LocalResponseNorm(5, alpha=0.0001, beta=0.75, k=1.0)");
  EXPECT_EQ(nn::LocalResponseNorm(2, 2e-5, 1.5, 1e16).str(), "LocalResponseNorm(2, alpha=2e-05, beta=1.5, k=1e+16)");
  EXPECT_EQ(nn::MSELoss().str(), "MSELoss()");
  EXPECT_EQ(nn::CrossEntropyLoss().str(), "CrossEntropyLoss()");
  EXPECT_EQ(nn::CosineSimilarity().str(), "CosineSimilarity()");
  EXPECT_EQ(nn::AdaptiveAvgPool3d({1, 2, 3}).str(), "AdaptiveAvgPool3d(output_size=(1, 2, 3))");
  EXPECT_EQ(nn::UpsamplingNearest2d({}, {2.0}).str(), "UpsamplingNearest2d(scale_factor=2.0, mode='nearest')"); // as kiln's Upsample (Debian's 1.13: no quotes)
  EXPECT_EQ(nn::UpsamplingBilinear2d({4, 4}).str(), "UpsamplingBilinear2d(size=(4, 4), mode='bilinear')");
  // A class weight is a buffer, as PyTorch's ("weight" in the state dict), that moves with the module.
  nn::CrossEntropyLoss ce({.weight = from_vector<double>({1, 2})});
  ASSERT_EQ(ce.buffers().size(), 1u);
  ASSERT_EQ(ce.state_dict().size(), 1u);
  EXPECT_EQ(ce.state_dict()[0].first, "weight");
  nn::BCEWithLogitsLoss bce({.pos_weight = from_vector<double>({3})});
  ASSERT_EQ(bce.state_dict().size(), 1u);
  EXPECT_EQ(bce.state_dict()[0].first, "pos_weight");
  EXPECT_EQ(nn::NLLLoss().buffers().size(), 0u);
  // Shrinks and LRN go in a Sequential; the losses' forward takes (input, target).
  nn::Sequential seq(nn::Linear(3, 3), nn::Hardshrink(), nn::Softshrink(0.1), nn::Tanhshrink());
  EXPECT_EQ(seq(test::rnd({2, 3}, 4).to(kFloat32)).shape(), (IntList{2, 3}));
}

// Every channel of a channel dropout is zeroed whole or scaled whole by 1 / (1 - p); about p of them are zeroed;
// the gradient is the same mask; eval mode and p = 0 are the identity.
void expect_channel_dropout(const Tensor& x, int64_t channel_dims, const Tensor& y) {
  const std::vector<double> in = values(x), out = values(y);
  const size_t per_channel = static_cast<size_t>(x.numel() / test::numel_of(IntList(x.shape().begin(), x.shape().begin() + channel_dims)));
  size_t dropped = 0, channels = in.size() / per_channel;
  for (size_t c = 0; c < channels; ++c) {
    const bool zero = out[c * per_channel] == 0;
    dropped += zero;
    for (size_t i = c * per_channel; i < (c + 1) * per_channel; ++i)
      ASSERT_EQ(out[i], zero ? 0.0 : in[i] * 2.0) << "channel " << c << " element " << i; // p = 0.5
  }
  EXPECT_GT(dropped, channels / 4);
  EXPECT_LT(dropped, 3 * channels / 4);
}

TEST(ParityMore, ChannelDropout) {
  const Tensor x1 = test::rnd({16, 32, 5}, 1) + 5.0, x2 = test::rnd({8, 16, 3, 2}, 2) + 5.0;
  const Tensor x3 = test::rnd({4, 16, 2, 2, 2}, 3) + 5.0, x3u = test::rnd({64, 2, 1, 2}, 4) + 5.0;
  expect_channel_dropout(x1, 2, F::dropout1d(x1, 0.5, 7));
  expect_channel_dropout(x1.select(0, 0), 1, F::dropout1d(x1.select(0, 0), 0.5, 7)); // unbatched [C, L]
  expect_channel_dropout(x2, 2, F::dropout2d(x2, 0.5, 8));
  expect_channel_dropout(x1, 2, F::dropout2d(x1, 0.5, 8)); // [N, C, L]: channel-wise, as PyTorch 1.13
  expect_channel_dropout(x3, 2, F::dropout3d(x3, 0.5, 9));
  expect_channel_dropout(x3u, 1, F::dropout3d(x3u, 0.5, 9)); // unbatched [C, D, H, W]
  Tensor w = x2.detach().requires_grad_();
  const Tensor y = F::dropout2d(w, 0.5, 10);
  y.sum().backward();
  EXPECT_EQ(values(w.grad()), values(y / w.detach())); // the mask (0 or 2) where x is not 0
  EXPECT_EQ(values(F::dropout2d(x2, 0.5, 8, false)), values(x2));
  EXPECT_EQ(values(F::dropout3d(x3, 0.0, 8)), values(x3));
  EXPECT_EQ(values(F::dropout1d(x1, 1.0, 8)), std::vector<double>(static_cast<size_t>(x1.numel()), 0.0));
  // The modules: a new mask each training call (seeded as Dropout), the identity in eval mode.
  nn::Dropout2d d(0.5, 3);
  const std::vector<double> first = values(d(x2)), second = values(d(x2));
  EXPECT_NE(first, second);
  EXPECT_EQ(d.calls(), 2u);
  expect_channel_dropout(x2, 2, d(x2));
  d.eval();
  EXPECT_EQ(values(d(x2)), values(x2));
  EXPECT_EQ(nn::Dropout1d(0.25).str(), "Dropout1d(p=0.25)");
  EXPECT_EQ(nn::Dropout3d().str(), "Dropout3d(p=0.5)");
  nn::Sequential seq(nn::Conv2d(2, 4, 3), nn::Dropout2d(0.2), nn::Dropout());
  EXPECT_EQ(seq(zeros({1, 2, 5, 5})).shape(), (IntList{1, 4, 3, 3}));
}

TEST(ParityMore, RandomizedReLUAndGumbelSoftmax) {
  // rrelu in training: x where x > 0, else x times a slope in [lower, upper) that is also its gradient.
  Tensor x = (test::rnd({400}, 5) * 2.0).detach().requires_grad_();
  const Tensor y = F::rrelu(x, 0.1, 0.3, true, 11);
  y.sum().backward();
  const std::vector<double> xv = values(x), yv = values(y), gv = values(x.grad());
  double smallest = 1, largest = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (xv[i] > 0) {
      EXPECT_EQ(yv[i], xv[i]);
      EXPECT_EQ(gv[i], 1.0);
      continue;
    }
    const double slope = yv[i] / xv[i];
    EXPECT_NEAR(gv[i], slope, 1e-12);
    smallest = std::min(smallest, slope), largest = std::max(largest, slope);
  }
  EXPECT_GE(smallest, 0.1);
  EXPECT_LT(largest, 0.3);
  EXPECT_GT(largest - smallest, 0.15); // the slopes spread over the range
  EXPECT_EQ(values(F::rrelu(x, 0.1, 0.3, true, 11)), yv); // one seed, one draw
  nn::RReLU m(0.1, 0.3, 4);
  EXPECT_NE(values(m(x)), values(m(x))); // a new draw each training call
  EXPECT_EQ(m.str(), "RReLU(lower=0.1, upper=0.3)");
  EXPECT_EQ(nn::RReLU().str(), "RReLU(lower=0.125, upper=0.3333333333333333)");

  // gumbel_softmax: rows on the simplex, one seed one sample; hard rows one-hot at the soft sample's argmax with
  // the soft sample's gradient (straight through).
  Tensor logits = test::rnd({64, 5}, 6).detach().requires_grad_();
  const Tensor soft = F::gumbel_softmax(logits, 3, 0.5);
  const std::vector<double> sums = values(soft.sum({1}));
  for (double v : sums) EXPECT_NEAR(v, 1.0, 1e-12);
  EXPECT_EQ(values(F::gumbel_softmax(logits, 3, 0.5)), values(soft));
  EXPECT_NE(values(F::gumbel_softmax(logits, 4, 0.5)), values(soft));
  const Tensor hard = F::gumbel_softmax(logits, 3, 0.5, true);
  EXPECT_EQ(values(hard.sum({1})), std::vector<double>(64, 1.0));
  EXPECT_EQ(values(hard.argmax(1)), values(soft.argmax(1)));
  EXPECT_EQ(values(hard.max({1})), std::vector<double>(64, 1.0));
  const Tensor u = test::rnd({64, 5}, 7);
  const Tensor g_hard = grad({(hard * u).sum()}, {logits})[0], g_soft = grad({(soft * u).sum()}, {logits})[0];
  test::expect_close(values(g_hard), values(g_soft), 1e-12, "straight-through gradient");
  // Along dim 0: the columns are on the simplex.
  for (double v : values(F::gumbel_softmax(logits, 5, 2.0, false, 0).sum({0}))) EXPECT_NEAR(v, 1.0, 1e-12);
}

// The mean and (population) standard deviation of a tensor's values.
std::pair<double, double> moments(const Tensor& t) {
  const std::vector<double> v = values(t);
  double m = 0, s = 0;
  for (double e : v) m += e;
  m /= static_cast<double>(v.size());
  for (double e : v) s += (e - m) * (e - m);
  return {m, std::sqrt(s / static_cast<double>(v.size()))};
}

TEST(ParityMore, RandomTensors) {
  const Tensor like = zeros({200, 500}, kFloat64);
  const Tensor r = rand_like(like, 1), n = randn_like(like, 2);
  EXPECT_EQ(r.shape(), like.shape());
  EXPECT_EQ(n.dtype(), kFloat64);
  EXPECT_EQ(values(r), values(rand({200, 500}, 1, kFloat64))); // rand's values of like's shape
  EXPECT_NEAR(moments(n).first, 0, 0.01);
  EXPECT_NEAR(moments(n).second, 1, 0.01);
  const Tensor i = randint(-3, 4, {100000}, 3);
  EXPECT_EQ(i.dtype(), kInt64);
  std::vector<int64_t> counts(7, 0);
  for (int64_t v : i.to_vector<int64_t>()) {
    ASSERT_TRUE(v >= -3 && v < 4) << v;
    ++counts[static_cast<size_t>(v + 3)];
  }
  for (int64_t c : counts) EXPECT_NEAR(static_cast<double>(c), 100000.0 / 7, 600); // each value about 1/7
  std::vector<int64_t> perm = randperm(1000, 4).to_vector<int64_t>(), sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t k = 0; k < 1000; ++k) ASSERT_EQ(sorted[static_cast<size_t>(k)], k);
  EXPECT_NE(perm, sorted);
  EXPECT_EQ(randperm(0, 4).shape(), (IntList{0}));
  const Tensor p = full({100000}, 0.3, kFloat64);
  const Tensor b = bernoulli(p, 5);
  EXPECT_NEAR(moments(b).first, 0.3, 0.01);
  for (double v : values(b)) ASSERT_TRUE(v == 0 || v == 1);
  EXPECT_EQ(values(bernoulli(from_vector<double>({0, 1, 0, 1}), 6)), (std::vector<double>{0, 1, 0, 1}));
  Tensor mean = full({100000}, 2.0, kFloat64).requires_grad_(), sd = full({1}, 3.0, kFloat64).requires_grad_();
  const Tensor y = normal(mean, sd, 7);
  EXPECT_NEAR(moments(y).first, 2, 0.05);
  EXPECT_NEAR(moments(y).second, 3, 0.05);
  const auto g = grad({y.sum()}, {mean, sd});
  EXPECT_EQ(values(g[0]), std::vector<double>(100000, 1.0));
  EXPECT_NEAR(values(g[1])[0], values((y.detach() - 2.0).sum() / 3.0)[0], 1e-6); // d/dstd = the draws
}

TEST(ParityMore, AlphaDropout) {
  // Each element is a x + alpha a p (kept) or alpha a p - alpha a (dropped), PyTorch's constants; a standard
  // normal input keeps mean 0 and variance 1.
  constexpr double alpha = 1.7580993408473766, p = 0.2;
  const double a = 1 / std::sqrt((alpha * alpha * p + 1) * (1 - p));
  const Tensor x = test::rnd({400, 500}, 8);
  const Tensor y = F::alpha_dropout(x, p, 9);
  const std::vector<double> xv = values(x), yv = values(y);
  size_t dropped = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const bool kept = std::fabs(yv[i] - (xv[i] * a + alpha * a * p)) < 1e-12;
    dropped += !kept;
    if (!kept) {
      ASSERT_NEAR(yv[i], alpha * a * p - alpha * a, 1e-12) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(xv.size()), p, 0.005);
  EXPECT_NEAR(moments(y).first, 0, 0.01);
  EXPECT_NEAR(moments(y).second, 1, 0.01);
  EXPECT_EQ(values(F::alpha_dropout(x, p, 9, false)), xv);
  EXPECT_EQ(values(F::alpha_dropout(x, 1.0, 9)), std::vector<double>(xv.size(), 0.0));
  // The feature form draws once per [N, C]: each channel is all kept or all dropped.
  const Tensor xc = test::rnd({8, 16, 3, 2}, 10);
  const std::vector<double> in = values(xc), out = values(F::feature_alpha_dropout(xc, 0.5, 11));
  const double a5 = 1 / std::sqrt((alpha * alpha * 0.5 + 1) * 0.5); // a at p = 1/2
  size_t channels_dropped = 0;
  for (size_t c = 0; c < in.size() / 6; ++c) { // 6 elements a channel
    const bool kept = std::fabs(out[c * 6] - (in[c * 6] * a5 + alpha * a5 * 0.5)) < 1e-12;
    channels_dropped += !kept;
    for (size_t i = c * 6; i < c * 6 + 6; ++i)
      ASSERT_NEAR(out[i], kept ? in[i] * a5 + alpha * a5 * 0.5 : alpha * a5 * 0.5 - alpha * a5, 1e-12) << i;
  }
  EXPECT_GT(channels_dropped, 32u); // of 128, about half
  EXPECT_LT(channels_dropped, 96u);
  nn::AlphaDropout m(p, 3);
  EXPECT_NE(values(m(x)), values(m(x)));
  m.eval();
  EXPECT_EQ(values(m(x)), xv);
  EXPECT_EQ(nn::FeatureAlphaDropout(0.1).str(), "FeatureAlphaDropout(p=0.1)");
  EXPECT_EQ(nn::FeatureAlphaDropout(0.5, 2)(xc).shape(), xc.shape());
}

TEST(ParityMore, Errors) {
  const Tensor x = test::rnd({2, 3}, 1);
  const std::string file = __FILE__;
  expect_error_at([&] { hypot(x, arange(3)); }, file, __LINE__, "hypot", {"floating", "i64[3]"});
  expect_error_at([&] { hypot(x, zeros({4}, kFloat64)); }, file, __LINE__, "hypot", {"f64[4]"});
  expect_error_at([&] { logaddexp2(arange(2), x); }, file, __LINE__, "logaddexp2", {"floating", "i64[2]"});
  expect_error_at([&] { fmax(x, zeros({2}, kFloat64)); }, file, __LINE__, "fmax", {"f64[2]"});
  expect_error_at([&] { heaviside(x, zeros({1}, kFloat32)); }, file, __LINE__, "heaviside", {"dtype", "f32[1]"});
  expect_error_at([&] { special::xlog1py(x, zeros({4}, kFloat64)); }, file, __LINE__, "xlog1py", {"f64[4]"});
  expect_error_at([&] { movedim(x, {0}, {1, 0}); }, file, __LINE__, "movedim", {"one length", "f64[2,3]"});
  expect_error_at([&] { movedim(x, {0, -2}, {1, 0}); }, file, __LINE__, "movedim", {"more than once", "f64[2,3]"});
  expect_error_at([&] { movedim(x, 2, 0); }, file, __LINE__, "movedim", {"dim 2", "f64[2,3]"});
  expect_error_at([&] { moveaxis(x, 0, -3); }, file, __LINE__, "moveaxis", {"dim -3", "f64[2,3]"});
  expect_error_at([&] { select(x, 1, 3); }, file, __LINE__, "select", {"index 3", "extent 3", "f64[2,3]"});
  expect_error_at([&] { select(zeros({}, kFloat64), 0, 0); }, file, __LINE__, "select", {"1 dim", "f64[]"});
  expect_error_at([&] { x.select(-3, 0); }, file, __LINE__, "select", {"dim -3", "f64[2,3]"});
  expect_error_at([&] { broadcast_tensors({x, zeros({4}, kFloat64)}); }, file, __LINE__, "broadcast_tensors", {"[4]", "[2, 3]"});
  expect_error_at([&] { inner(x, zeros({2}, kFloat64)); }, file, __LINE__, "inner", {"3 and 2", "f64[2]"});
  expect_error_at([&] { eye(-1); }, file, __LINE__, "eye", {"non-negative", "-1"});
  expect_error_at([&] { linspace(0, 1, -2); }, file, __LINE__, "linspace", {"non-negative", "-2"});
  expect_error_at([&] { linspace(0, 1, 3, kInt64); }, file, __LINE__, "linspace", {"floating", "i64"});
  expect_error_at([&] { isclose(x, x.to(kFloat32)); }, file, __LINE__, "isclose", {"dtype", "f32[2,3]"});
  expect_error_at([&] { isclose(x, x, -1.0); }, file, __LINE__, "isclose", {"non-negative", "f64[2,3]"});
  expect_error_at([&] { allclose(x, zeros({4}, kFloat64)); }, file, __LINE__, "allclose", {"f64[4]"});
  expect_error_at([&] { positive(zeros({2}, kBool)); }, file, __LINE__, "positive", {"bool", "bool[2]"});
  expect_error_at([&] { cat({x, zeros({3, 3}, kFloat64)}, 1); }, file, __LINE__, "cat", {"f64[3,3]"});
  expect_error_at([&] { x.expand_as(zeros({4}, kFloat64)); }, file, __LINE__, "expand_as", {"f64[2,3]"});
  expect_error_at([&] { x.view_as(zeros({4}, kFloat64)); }, file, __LINE__, "view_as", {"f64[2,3]"});
  expect_error_at([&] { clip(x, 1.0, 0.5).swapaxes(0, 2); }, file, __LINE__, "swapaxes", {"dim 2", "f64[2,3]"});
  expect_error_at([&] { F::hardshrink(arange(3)); }, file, __LINE__, "hardshrink", {"floating", "i64[3]"});
  expect_error_at([&] { F::softshrink(x, -0.5); }, file, __LINE__, "softshrink", {"lambd", "f64[2,3]"});
  expect_error_at([&] { nn::Softshrink(-1.0)(x); }, file, __LINE__, "Softshrink", {"lambd", "f64[2,3]"});
  expect_error_at([&] { F::local_response_norm(x, 2); }, file, __LINE__, "local_response_norm", {"3 or more dims", "f64[2,3]"});
  expect_error_at([&] { F::local_response_norm(zeros({1, 2, 3}, kFloat64), 0); }, file, __LINE__, "local_response_norm", {"size", "f64[1,2,3]"});
  expect_error_at([&] { nn::CrossEntropyLoss().forward(x, from_vector<int64_t>({0})); }, file, __LINE__, "CrossEntropyLoss", {"f64[2,3]"});
  expect_error_at([&] { nn::MSELoss().forward(x, zeros({3}, kFloat64)); }, file, __LINE__, "MSELoss", {"f64[3]"});
  expect_error_at([&] { nn::SmoothL1Loss(F::Reduction::Mean, -1.0).forward(x, x); }, file, __LINE__, "SmoothL1Loss", {"beta"});
  expect_error_at([&] { nn::KLDivLoss(F::Reduction::BatchMean).forward(x, zeros({4}, kFloat64)); }, file, __LINE__, "KLDivLoss", {"f64[4]"});
  expect_error_at([&] { nn::PairwiseDistance().forward(x, zeros({4}, kFloat64)); }, file, __LINE__, "PairwiseDistance", {"f64[4]"});
  expect_error_at([&] { trapezoid(x, from_vector<double>({1, 2})); }, file, __LINE__, "trapezoid", {"1-d x", "f64[2]"});
  expect_error_at([&] { trapz(zeros({}, kFloat64)); }, file, __LINE__, "trapz", {"1 dim", "f64[]"});
  expect_error_at([&] { cumulative_trapezoid(x, 1.0, 2); }, file, __LINE__, "cumulative_trapezoid", {"dim 2", "f64[2,3]"});
  expect_error_at([&] { cov(zeros({2, 2, 2}, kFloat64)); }, file, __LINE__, "cov", {"2-d", "f64[2,2,2]"});
  expect_error_at([&] { corrcoef(arange(3)); }, file, __LINE__, "corrcoef", {"floating", "i64[3]"});
  expect_error_at([&] { pdist(zeros({3}, kFloat64)); }, file, __LINE__, "pdist", {"2-d", "f64[3]"});
  expect_error_at([&] { matrix_power(x, 2); }, file, __LINE__, "matrix_power", {"square", "f64[2,3]"});
  expect_error_at([&] { matrix_power(zeros({2, 2}, kFloat64), -1); }, file, __LINE__, "matrix_power", {"inverse", "f64[2,2]"});
  expect_error_at([&] { vander(x); }, file, __LINE__, "vander", {"1-d", "f64[2,3]"});
  expect_error_at([&] { linalg::multi_dot({x}); }, file, __LINE__, "linalg.multi_dot", {"at least 2"});
  expect_error_at([&] { linalg::multi_dot({x, x}); }, file, __LINE__, "linalg.multi_dot", {"3 vs 2", "f64[2,3]"});
  expect_error_at([&] { linalg::vecdot(x, x, 2); }, file, __LINE__, "linalg.vecdot", {"dim 2", "f64[2,3]"});
  expect_error_at([&] { nn::BatchNorm3d(3)(zeros({2, 3, 4, 4}, kFloat64)); }, file, __LINE__, "BatchNorm3d", {"[N, 3, D, H, W]", "f64[2,3,4,4]"});
  expect_error_at([&] { nn::InstanceNorm3d(3)(zeros({2, 3}, kFloat64)); }, file, __LINE__, "InstanceNorm3d", {"D, H, W]", "f64[2,3]"});
  expect_error_at([&] { masked_select(x, zeros({2, 3}, kFloat64)); }, file, __LINE__, "masked_select", {"bool", "f64[2,3]"});
  expect_error_at([&] { masked_select(x, zeros({4}, kBool)); }, file, __LINE__, "masked_select", {"broadcast", "bool[4]"});
  expect_error_at([&] { compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{nonzero(in[0])}; })({x}); }, file, __LINE__, "nonzero", {"compile()", "f64[2,3]"});
  expect_error_at([&] { F::adaptive_avg_pool3d(x, 2); }, file, __LINE__, "adaptive_avg_pool3d", {"[N, C, D, H, W]", "f64[2,3]"});
  expect_error_at([&] { mvlgamma(x, 0); }, file, __LINE__, "mvlgamma", {"at least 1", "f64[2,3]"});
  expect_error_at([&] { mvlgamma(from_vector<double>({1.5, 0.9}).realize(), 3); }, file, __LINE__, "mvlgamma", {"greater than", "f64[2]"});
  expect_error_at([&] { F::rrelu(x, 0.5, 0.2); }, file, __LINE__, "rrelu", {"lower", "f64[2,3]"});
  expect_error_at([&] { nn::RReLU(0.5, 0.2); }, file, __LINE__, "RReLU", {"lower"});
  expect_error_at([&] { F::gumbel_softmax(x, 1, 0.0); }, file, __LINE__, "gumbel_softmax", {"tau", "f64[2,3]"});
  expect_error_at([&] { F::gumbel_softmax(x, 1, 1.0, false, 2); }, file, __LINE__, "gumbel_softmax", {"dim 2", "f64[2,3]"});
  expect_error_at([&] { rand_like(arange(3), 1); }, file, __LINE__, "rand_like", {"floating", "i64[3]"});
  expect_error_at([&] { randint(3, 3, {2}, 1); }, file, __LINE__, "randint", {"high (3)", "low (3)"});
  expect_error_at([&] { randperm(-1, 1); }, file, __LINE__, "randperm", {"non-negative", "-1"});
  expect_error_at([&] { bernoulli(from_vector<double>({0.5, 1.5}).realize(), 1); }, file, __LINE__, "bernoulli", {"[0, 1]", "f64[2]"});
  expect_error_at([&] { normal(x, x.to(kFloat32), 1); }, file, __LINE__, "normal", {"dtype", "f32[2,3]"});
  expect_error_at([&] { normal(x, from_vector<double>({-1.0}).realize(), 1); }, file, __LINE__, "normal", {"std", "f64[1]"});
  expect_error_at([&] { fliplr(zeros({3}, kFloat64)); }, file, __LINE__, "fliplr", {"2 dims", "f64[3]"});
  expect_error_at([&] { flipud(zeros({}, kFloat64)); }, file, __LINE__, "flipud", {"1 dim", "f64[]"});
  expect_error_at([&] { F::alpha_dropout(x, -0.1, 1); }, file, __LINE__, "alpha_dropout", {"[0, 1]", "f64[2,3]"});
  expect_error_at([&] { F::feature_alpha_dropout(zeros({3}, kFloat64), 0.5, 1); }, file, __LINE__, "feature_alpha_dropout", {"2 dims", "f64[3]"});
  EXPECT_EQ(broadcast_shapes({{2, 1}, {3, 1, 4}, {}}), (IntList{3, 2, 4})); // torch.broadcast_shapes's
  EXPECT_EQ(broadcast_shapes({}), (IntList{}));
  expect_error_at([&] { broadcast_shapes({{2, 3}, {4}}); }, file, __LINE__, "broadcast_shapes", {"[4]", "[2, 3]"});
  expect_error_at([&] { split_with_sizes(x, {1, 1}, 1); }, file, __LINE__, "split_with_sizes", {"f64[2,3]"});
  expect_error_at([&] { F::dropout2d(x, 0.5, 1); }, file, __LINE__, "dropout2d", {"3 or 4 dims", "f64[2,3]"});
  expect_error_at([&] { F::dropout1d(zeros({2}, kFloat64), 0.5, 1, false); }, file, __LINE__, "dropout1d", {"2 or 3 dims", "f64[2]"});
  expect_error_at([&] { F::dropout3d(zeros({1, 1, 1, 1}, kFloat64), 1.5, 1); }, file, __LINE__, "dropout3d", {"[0, 1]", "f64[1,1,1,1]"});
  expect_error_at([&] { nn::Dropout2d(0.5)(x); }, file, __LINE__, "Dropout2d", {"3 or 4 dims", "f64[2,3]"});
  expect_error_at([&] { nn::TripletMarginLoss().forward(x, x, zeros({2, 4}, kFloat64)); }, file, __LINE__, "TripletMarginLoss", {"f64[2,4]"});
  expect_error_at([&] { nn::GaussianNLLLoss().forward(x, x, zeros({3, 3}, kFloat64)); }, file, __LINE__, "GaussianNLLLoss", {"f64[3,3]"});
}

} // namespace
} // namespace kiln

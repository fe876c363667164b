// Matrix products and einsum (mm, bmm, mv, dot, vdot, outer, ger, addmm, addmv, addr, baddbmm, addbmm,
// tensordot, kron, trace, diagonal, diag, diag_embed, cross, cdist, einsum): values and gradients against
// PyTorch 1.13 (a generated table with broadcast batch dims, zero-size dims, negative offsets and dims,
// beta = 0 over NaN and inf), gradchecks in f64, fused against unfused and compile(), einsum's lowering
// onto the GEMM, and error messages naming the op, the shapes and this file's line.

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "error_of.h"
#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/kiln.h"
#include "kiln/linalg.h"
#include "table_checks.h"

namespace kiln {
namespace {

using namespace test; // values, rnd, expect_gradcheck, expect_close, expect_same, weights_for

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int64_t kNoDim = -1000;

void expect_error(const std::function<void()>& f, int line, const std::string& op,
                  const std::vector<std::string>& parts = {}) {
  test::expect_error_at(f, "test_linalg.cpp", line, op, parts);
}

// ---------------------------------------------------------------- against PyTorch

/// A case of the table (see tests/tools/pytorch_linalg_table.py).
struct LinalgCase {
  const char* op;
  const char* equation; ///< einsum's
  std::vector<IntList> shapes;
  std::vector<std::vector<double>> inputs;
  IntList a, b; ///< dims or offsets; tensordot's second dims
  double s1, s2; ///< beta and alpha, or cdist's p
  IntList out_shape;
  std::vector<double> out;
  std::vector<std::vector<double>> grads; ///< PyTorch's d(sum(out * u)) of each input
};

#include "pytorch_linalg_table.inc"

/// The kiln call of a table case.
Tensor run_case(const LinalgCase& c, const std::vector<Tensor>& x) {
  const std::string op = c.op;
  if (op == "einsum") return einsum(c.equation, x);
  if (op == "mm") return mm(x[0], x[1]);
  if (op == "bmm") return bmm(x[0], x[1]);
  if (op == "mv") return mv(x[0], x[1]);
  if (op == "dot") return dot(x[0], x[1]);
  if (op == "vdot") return vdot(x[0], x[1]);
  if (op == "outer") return outer(x[0], x[1]);
  if (op == "ger") return ger(x[0], x[1]);
  if (op == "addmm") return addmm(x[0], x[1], x[2], c.s1, c.s2);
  if (op == "addmv") return addmv(x[0], x[1], x[2], c.s1, c.s2);
  if (op == "addr") return addr(x[0], x[1], x[2], c.s1, c.s2);
  if (op == "baddbmm") return baddbmm(x[0], x[1], x[2], c.s1, c.s2);
  if (op == "addbmm") return addbmm(x[0], x[1], x[2], c.s1, c.s2);
  if (op == "tensordot_int") return tensordot(x[0], x[1], c.a[0]);
  if (op == "tensordot") return tensordot(x[0], x[1], c.a, c.b);
  if (op == "kron") return kron(x[0], x[1]);
  if (op == "trace") return trace(x[0]);
  if (op == "diagonal") return diagonal(x[0], c.a[0], c.a[1], c.a[2]);
  if (op == "diag") return diag(x[0], c.a[0]);
  if (op == "diag_embed") return diag_embed(x[0], c.a[0], c.a[1], c.a[2]);
  if (op == "linalg_cross") return linalg::cross(x[0], x[1], c.a[0]);
  if (op == "cross") return cross(x[0], x[1], c.a[0] == kNoDim ? std::nullopt : std::optional(c.a[0]));
  if (op == "cdist") return cdist(x[0], x[1], c.s1);
  ADD_FAILURE() << "unknown op " << op;
  return x[0];
}

TEST(Linalg, MatchesPyTorch) {
  int i = 0, einsums = 0;
  for (const LinalgCase& c : kLinalgCases) {
    SCOPED_TRACE(std::string(c.op) + " " + c.equation + " case " + std::to_string(i++));
    std::vector<Tensor> x;
    for (size_t k = 0; k < c.shapes.size(); ++k) x.push_back(from_vector(c.inputs[k], c.shapes[k]).requires_grad_());
    const Tensor y = run_case(c, x);
    ASSERT_EQ(y.shape(), c.out_shape);
    expect_close(values(y), c.out, 1e-12, "values");
    const std::vector<Tensor> g = grad({(y * weights_for(y)).sum()}, x, {}, /*allow_unused=*/true);
    for (size_t k = 0; k < x.size(); ++k) expect_close(values(g[k]), c.grads[k], 1e-11, "grad " + std::to_string(k));
    einsums += std::string(c.op) == "einsum";
  }
  EXPECT_GE(einsums, 25);
}

// ---------------------------------------------------------------- gradients, agreement, lowering

TEST(Linalg, Gradcheck) {
  auto check = [](const Fn1& f, std::vector<IntList> shapes, uint64_t seed) {
    std::vector<Tensor> in;
    for (IntList& s : shapes) in.push_back(rnd(std::move(s), seed++));
    expect_gradcheck([&](const std::vector<Tensor>& v) { return (f(v) * weights_for(f(v))).sum(); }, in);
  };
  check([](const auto& v) { return einsum("bn,anm,bm->ba", v); }, {{2, 3}, {4, 3, 5}, {2, 5}}, 1);
  check([](const auto& v) { return einsum("...ii,...i->...i", v); }, {{2, 3, 3}, {1, 3}}, 4);
  check([](const auto& v) { return tensordot(v[0], v[1], {2, 0}, {0, 1}); }, {{3, 2, 4}, {4, 3}}, 6);
  check([](const auto& v) { return addbmm(v[0], v[1], v[2], 0.5, 2); }, {{3, 5}, {2, 3, 4}, {2, 4, 5}}, 8);
  check([](const auto& v) { return kron(v[0], v[1]); }, {{2, 3}, {2, 1, 2}}, 11);
  check([](const auto& v) { return diag_embed(v[0], -1, 0, 2); }, {{2, 3}}, 13);
  check([](const auto& v) { return diagonal(v[0], 1, 2, 0); }, {{3, 2, 4}}, 14);
  check([](const auto& v) { return linalg::cross(v[0], v[1]); }, {{2, 3}, {1, 3}}, 15);
  for (double p : {2.0, 1.0, 3.0, 1.5})
    check([p](const auto& v) { return cdist(v[0], v[1], p); }, {{3, 4}, {2, 4}}, 17);
}

// cdist's gradient at a zero distance is 0 (PyTorch's), not sqrt's 0 * inf.
TEST(Linalg, CdistGradientAtZeroDistance) {
  Tensor x = rnd({2, 3}, 20).requires_grad_();
  const Tensor y = cdist(x, x.detach());
  EXPECT_EQ(values(diagonal(y)), (std::vector<double>{0, 0}));
  diagonal(y).sum().backward();
  for (double g : values(x.grad())) EXPECT_EQ(g, 0.0);
}

// The gradient of a tall matrix's trace is 1 on its diagonal only (torch 1.13's trace backward also puts a 1 at
// every (cols + 1)-th element past it: [3, 0] of a [4, 2]; the table leaves tall matrices out).
TEST(Linalg, TraceOfTallMatrix) {
  Tensor x = rnd({4, 2}, 25).requires_grad_();
  EXPECT_DOUBLE_EQ(trace(x).item<double>(), values(x)[0] + values(x)[3]);
  trace(x).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 0, 0, 1, 0, 0, 0, 0}));
}

TEST(Linalg, MethodsAreTheFreeFunctions) {
  const Tensor a = rnd({3, 3}, 21), b = rnd({3, 3}, 22), v = rnd({3}, 23), w = rnd({2, 3, 3}, 24);
  expect_same(values(a.mm(b)), values(mm(a, b)), "mm");
  expect_same(values(w.bmm(w)), values(bmm(w, w)), "bmm");
  expect_same(values(a.mv(v)), values(mv(a, v)), "mv");
  expect_same(values(v.dot(v)), values(dot(v, v)), "dot");
  expect_same(values(v.outer(v)), values(outer(v, v)), "outer");
  expect_same(values(a.kron(b)), values(kron(a, b)), "kron");
  expect_same(values(a.trace()), values(trace(a)), "trace");
  expect_same(values(w.diagonal(1, -1, 0)), values(diagonal(w, 1, -1, 0)), "diagonal");
  expect_same(values(v.diag(-1)), values(diag(v, -1)), "diag");
  expect_same(values(a.diag_embed(1)), values(diag_embed(a, 1)), "diag_embed");
  expect_same(values(a.cross(b, 1)), values(linalg::cross(a, b, 1)), "cross");
  expect_same(values(a.addmm(a, b, 0.5, 2)), values(addmm(a, a, b, 0.5, 2)), "addmm");
  expect_same(values(w.baddbmm(w, w, 2, 0.5)), values(baddbmm(w, w, w, 2, 0.5)), "baddbmm");
  // the products are the GEMM's: mm, einsum and matmul give the same bits
  expect_same(values(einsum("ij,jk->ik", {a, b})), values(matmul(a, b)), "einsum as matmul");
  expect_same(values(einsum("bij,bkj->bik", {w, w})), values(matmul(w, w.transpose(1, 2))), "einsum transposed");
}

/// The numel of the largest shape in a graph's text ("f64[2,3,5]").
int64_t largest_shape(const std::string& text) {
  static const std::regex shape(R"((?:f32|f64|i32|i64|bool)\[([0-9,]*)\])");
  int64_t most = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), shape); it != std::sregex_iterator(); ++it) {
    int64_t n = 1;
    const std::string dims = (*it)[1];
    for (size_t p = 0; p < dims.size();) {
      const size_t q = std::min(dims.find(',', p), dims.size());
      n *= std::stoll(dims.substr(p, q - p));
      p = q + 1;
    }
    most = std::max(most, n);
  }
  return most;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// einsum lowers each pairwise contraction onto one matmul: the graph (forward and backward) holds a
// matmul per product and no tensor as large as the [b, i, j, k] product a broadcast multiply would make.
TEST(Linalg, EinsumContractsWithOneMatmul) {
  Tensor a = rnd({2, 3, 5}, 30).requires_grad_(), b = rnd({2, 5, 7}, 31).requires_grad_();
  const Tensor y = einsum("bij,bjk->bik", {a, b});
  const std::string forward = graph_text({y});
  EXPECT_EQ(count_of(forward, "matmul"), 1u) << forward;
  EXPECT_LT(largest_shape(forward), 2 * 3 * 5 * 7) << forward;
  EXPECT_EQ(forward, graph_text({matmul(a, b)})); // the very graph of the matmul code
  const std::vector<Tensor> g = grad({(y * weights_for(y)).sum()}, {a, b});
  const std::string backward = graph_text(g);
  EXPECT_EQ(count_of(backward, "matmul"), 2u) << backward; // one per gradient
  EXPECT_LT(largest_shape(backward), 2 * 3 * 5 * 7) << backward;
  // attention-like, and a chain of three: one matmul per pair
  const Tensor q = rnd({2, 2, 3, 4}, 32), k = rnd({2, 2, 5, 4}, 33);
  const std::string att = graph_text({einsum("bhqd,bhkd->bhqk", {q, k})});
  EXPECT_EQ(count_of(att, "matmul"), 1u) << att;
  EXPECT_LT(largest_shape(att), 2 * 2 * 3 * 4 * 5) << att;
  EXPECT_EQ(att, graph_text({matmul(q, k.transpose(-2, -1))}));
  const std::string chain = graph_text({einsum("ij,jk,kl->il", {rnd({3, 4}, 34), rnd({4, 5}, 35), rnd({5, 6}, 36)})});
  EXPECT_EQ(count_of(chain, "matmul"), 2u) << chain;
  EXPECT_LT(largest_shape(chain), 3 * 4 * 5) << chain;
}

// The functions in one program, and the gradients of its loss: the same bits fused, unfused and compiled.
std::vector<Tensor> linalg_program(const std::vector<Tensor>& in) {
  const Tensor &x = in[0], &w = in[1], &v = in[2];
  const Tensor e = einsum("bij,jk->bik", {x, w}); // [2, 3, 4]
  const Tensor d = diag_embed(diagonal(e, 0, 1, 2)) + baddbmm(e.sum({2}, true), e, e.transpose(1, 2), 0.5);
  const Tensor c = cdist(e, x.slice(2, 0, 4) * 2.0) + addmm(v, v, w.slice(0, 0, 3).slice(1, 0, 3), 2, 0.5).sum();
  const Tensor t = tensordot(kron(w.slice(0, 0, 3), v.slice(0, 0, 1)), linalg::cross(v, v.flip({0}), 0), {0}, {0});
  const Tensor loss = (d * d).sum() + c.sum() + t.sum() + trace(v) * einsum("ii->", {v});
  std::vector<Tensor> out = {e, d, c, t, loss};
  for (const Tensor& g : grad({loss}, {x, w, v})) out.push_back(g);
  return out;
}

std::vector<Tensor> linalg_inputs(uint64_t seed) {
  return {randn({2, 3, 5}, seed).requires_grad_(), randn({5, 4}, seed + 1).requires_grad_(),
          randn({3, 3}, seed + 2).requires_grad_()};
}

TEST(Linalg, FusedUnfusedAndCompiledAgree) { expect_fused_unfused_and_compiled_agree(linalg_program, linalg_inputs); }

// ---------------------------------------------------------------- errors
// Each expect_error keeps the failing call on the line its __LINE__ names:
// clang-format off

TEST(Linalg, ProductErrors) {
  const Tensor m23 = rnd({2, 3}, 40), m34 = rnd({3, 4}, 41), v3 = rnd({3}, 42), v4 = rnd({4}, 43);
  const Tensor b234 = rnd({2, 3, 4}, 44), b345 = rnd({3, 4, 5}, 45);
  expect_error([&] { (void)mm(m23, v3); }, __LINE__, "mm", {"f64[2,3]", "f64[3]", "2-d"});
  expect_error([&] { (void)mm(m23, m23); }, __LINE__, "mm", {"cannot be multiplied", "(3 vs 2)"});
  expect_error([&] { (void)mm(b234, m34); }, __LINE__, "mm", {"first operand must be 2-d, got 3-d"});
  expect_error([&] { (void)bmm(m23, m34); }, __LINE__, "bmm", {"3-d", "f64[2,3]"});
  expect_error([&] { (void)bmm(b234, b345); }, __LINE__, "bmm", {"batch sizes differ (2 vs 3)", "f64[3,4,5]"});
  expect_error([&] { (void)bmm(b234, b234); }, __LINE__, "bmm", {"inner dims differ (4 vs 3)"});
  expect_error([&] { (void)mv(m23, v4); }, __LINE__, "mv", {"f64[2,3]", "f64[4]", "(3 vs 4)"});
  expect_error([&] { (void)mv(v3, v3); }, __LINE__, "mv", {"matrix must be 2-d"});
  expect_error([&] { (void)dot(v3, v4); }, __LINE__, "dot", {"lengths differ (3 vs 4)"});
  expect_error([&] { (void)dot(m23, v3); }, __LINE__, "dot", {"1-d", "f64[2,3]"});
  expect_error([&] { (void)vdot(v3, m23); }, __LINE__, "dot", {"second operand must be 1-d"});
  expect_error([&] { (void)outer(m23, v3); }, __LINE__, "outer", {"1-d"});
  expect_error([&] { (void)addmm(rnd({3}, 46), m23, m34); }, __LINE__, "addmm", {"f64[3]", "[2,4]", "broadcast"});
  expect_error([&] { (void)addmm(m23, m23, m23); }, __LINE__, "addmm", {"inner dims differ"});
  expect_error([&] { (void)addmv(v4, m23, v3); }, __LINE__, "addmv", {"f64[4]", "[2]"});
  expect_error([&] { (void)addr(m34, v3, v3); }, __LINE__, "addr", {"f64[3,4]", "[3,3]"});
  expect_error([&] { (void)baddbmm(b234, b234, b345); }, __LINE__, "baddbmm", {"batch sizes differ"});
  expect_error([&] { (void)addbmm(m23, b234, m34); }, __LINE__, "addbmm", {"batch2 must be 3-d"});
  expect_error([&] { (void)tensordot(m23, m34, 3); }, __LINE__, "tensordot", {"dims 3", "rank"});
  expect_error([&] { (void)tensordot(m23, m34, -1); }, __LINE__, "tensordot", {">= 0"});
  expect_error([&] { (void)tensordot(m23, m34, {0}, {0, 1}); }, __LINE__, "tensordot", {"differ in length"});
  expect_error([&] { (void)tensordot(m23, m34, {0}, {1}); }, __LINE__, "tensordot",
               {"2 in dim 0 of the first and 4 in dim 1", "f64[2,3]", "f64[3,4]"});
  expect_error([&] { (void)tensordot(m23, m34, {1, -1}, {0, 1}); }, __LINE__, "tensordot", {"more than once"});
  expect_error([&] { (void)tensordot(m23, m34, {2}, {0}); }, __LINE__, "tensordot", {"out of range"});
}

TEST(Linalg, DiagonalCrossCdistErrors) {
  const Tensor m23 = rnd({2, 3}, 50), v3 = rnd({3}, 51);
  expect_error([&] { (void)trace(v3); }, __LINE__, "trace", {"f64[3]", "2-d"});
  expect_error([&] { (void)diagonal(v3); }, __LINE__, "diagonal", {"f64[3]", "at least 2 dims"});
  expect_error([&] { (void)diagonal(m23, 0, 1, -1); }, __LINE__, "diagonal", {"the same dim 1"});
  expect_error([&] { (void)diagonal(m23, 0, 0, 2); }, __LINE__, "diagonal", {"out of range"});
  expect_error([&] { (void)diag(rnd({2, 2, 2}, 52)); }, __LINE__, "diag", {"f64[2,2,2]", "1-d or 2-d"});
  expect_error([&] { (void)diag_embed(m23, 0, 0, -3); }, __LINE__, "diag_embed", {"the same dim 0"});
  expect_error([&] { (void)diag_embed(m23, 0, 0, 3); }, __LINE__, "diag_embed", {"out of range"});
  expect_error([&] { (void)linalg::cross(m23.t(), m23.t()); }, __LINE__, "linalg.cross", {"f64[3,2]", "extent 3"});
  expect_error([&] { (void)linalg::cross(v3, m23.slice(0, 0, 1)); }, __LINE__, "linalg.cross", {"same number of dims"});
  expect_error([&] { (void)cross(rnd({2, 2}, 53), rnd({2, 2}, 54)); }, __LINE__, "cross", {"no dim", "extent 3"});
  expect_error([&] { (void)cross(rnd({2, 3}, 55), rnd({4, 3}, 56)); }, __LINE__, "cross", {"broadcast"});
  expect_error([&] { (void)cdist(v3, m23); }, __LINE__, "cdist", {"at least 2 dims", "f64[3]"});
  expect_error([&] { (void)cdist(m23, rnd({2, 4}, 57)); }, __LINE__, "cdist", {"rows differ in length (3 vs 4)"});
  expect_error([&] { (void)cdist(m23, m23, -1); }, __LINE__, "cdist", {"p must be >= 0"});
  expect_error([&] { (void)cdist(rnd({2, 1, 3}, 58), rnd({3, 2, 3}, 59)); }, __LINE__, "cdist", {"batch dims"});
  expect_error([&] { (void)cdist(from_vector<int64_t>({1, 2}, {1, 2}), m23.slice(1, 0, 2)); }, __LINE__, "cdist",
               {"floating point", "i64[1,2]"});
}

TEST(Linalg, EinsumErrors) {
  const Tensor a = rnd({2, 3}, 60), b = rnd({3, 4}, 61);
  expect_error([&] { (void)einsum("ij,jk->ik", {a}); }, __LINE__, "einsum",
               {"'ij,jk->ik'", "2 operand terms but 1 operands", "f64[2,3]"});
  expect_error([&] { (void)einsum("ij->ij", {a, b}); }, __LINE__, "einsum", {"1 operand terms but 2", "f64[3,4]"});
  expect_error([&] { (void)einsum("i1,jk->ik", {a, b}); }, __LINE__, "einsum", {"invalid subscript '1' at index 1"});
  expect_error([&] { (void)einsum("ij,jk=>ik", {a, b}); }, __LINE__, "einsum", {"invalid subscript '='"});
  expect_error([&] { (void)einsum("ij,jk->i-k", {a, b}); }, __LINE__, "einsum", {"invalid subscript '-'"});
  expect_error([&] { (void)einsum("ij.,jk", {a, b}); }, __LINE__, "einsum", {"not part of an ellipsis"});
  expect_error([&] { (void)einsum("...i...,jk", {a, b}); }, __LINE__, "einsum", {"more than one ellipsis"});
  expect_error([&] { (void)einsum("ijk,jk->ik", {a, b}); }, __LINE__, "einsum",
               {"operand 0 has 2 dims but its term names 3", "'ijk,jk->ik'", "f64[2,3], f64[3,4]"});
  expect_error([&] { (void)einsum("i,jk", {a, b}); }, __LINE__, "einsum", {"operand 0 has 2 dims but its term names 1"});
  expect_error([&] { (void)einsum("ij...,jk", {rnd({2}, 62), b}); }, __LINE__, "einsum", {"names at least 2"});
  expect_error([&] { (void)einsum("ij,ik->jk", {a, b}); }, __LINE__, "einsum",
               {"subscript 'i' has extent 2 in operand 0 and 3 in operand 1"});
  expect_error([&] { (void)einsum("ii->i", {a}); }, __LINE__, "einsum", {"'i' is repeated in operand 0 with extents 2 and 3"});
  expect_error([&] { (void)einsum("ij,jk->iz", {a, b}); }, __LINE__, "einsum", {"output subscript 'z' does not appear"});
  expect_error([&] { (void)einsum("ij,jk->ii", {a, b}); }, __LINE__, "einsum", {"'i' appears more than once"});
  expect_error([&] { (void)einsum("...i,...i", {rnd({2, 3}, 63), rnd({4, 3}, 64)}); }, __LINE__, "einsum",
               {"'... dim 0' has extent 2 in operand 0 and 4"});
  expect_error([&] { (void)einsum("ij", {}); }, __LINE__, "einsum", {"at least one operand"});
  expect_error([&] { (void)einsum("ij,jk", {a, Tensor()}); }, __LINE__, "einsum", {"undefined"});
}

// clang-format on

} // namespace
} // namespace kiln

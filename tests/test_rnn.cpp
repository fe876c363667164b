// Recurrent layers: RNNCell, LSTMCell, GRUCell, RNN, LSTM and GRU against torch.nn's
// (tests/pytorch_rnn_table.inc, from tests/tools/pytorch_rnn_table.py) in f64, with every gradient;
// parameter names and initialization, gradcheck, dropout between layers, fused = unfused = compile(),
// errors, and a small LSTM that learns to add up a sequence.

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "error_of.h"
#include "kiln/kiln.h"
#include "table_checks.h"

using namespace kiln;
using namespace kiln::test;
namespace F = kiln::nn::functional;

namespace {

constexpr int64_t kIn = 3, kHidden = 4; // the table's sizes

struct RnnCase {
  const char* name;
  std::string kind; // rnn_cell_tanh, rnn_cell_relu, lstm_cell, gru_cell, rnn_tanh, rnn_relu, lstm, gru
  int64_t num_layers;
  bool bias, batch_first, bidirectional;
  IntList x_shape;
  std::vector<double> x;
  IntList h_shape; // {}: no initial state given
  std::vector<double> h0, c0;
  std::vector<NamedValues> params;
  IntList out_shape;
  std::vector<double> out, hn, cn, dx, dh0, dc0;
  IntList hn_shape;
  std::vector<NamedValues> grads;
};

const RnnCase kCases[] = {
#include "pytorch_rnn_table.inc"
};

void expect_error(const std::function<void()>& f, int line, const std::string& op,
                  const std::vector<std::string>& parts) {
  test::expect_error_at(f, "test_rnn.cpp", line, op, parts);
}

// What a case's module gives: the module, its output, h_n (undefined for a cell) and c_n (LSTM's).
struct CaseRun {
  std::shared_ptr<nn::Module> module;
  Tensor out, hn, cn;
};

// t's first element along dim 0, without that dim.
Tensor first_of(const Tensor& t) { return t.narrow(0, 0, 1).squeeze(0); }

bool is_cell(const RnnCase& c) { return c.kind.find("cell") != std::string::npos; }

CaseRun run_cell(const RnnCase& c, const Tensor& x, const Tensor& h0, const Tensor& c0) {
  if (c.kind == "lstm_cell") {
    auto m = std::make_shared<nn::LSTMCell>(kIn, kHidden, c.bias);
    m->to(kFloat64);
    load_params(*m, c.params);
    auto [h, cc] = m->forward(x, h0, c0);
    return {m, h, Tensor(), cc};
  }
  if (c.kind == "gru_cell") {
    auto m = std::make_shared<nn::GRUCell>(kIn, kHidden, c.bias);
    m->to(kFloat64);
    load_params(*m, c.params);
    return {m, m->forward(x, h0), Tensor(), Tensor()};
  }
  auto m = std::make_shared<nn::RNNCell>(kIn, kHidden, c.bias, c.kind == "rnn_cell_relu" ? "relu" : "tanh");
  m->to(kFloat64);
  load_params(*m, c.params);
  return {m, m->forward(x, h0), Tensor(), Tensor()};
}

CaseRun run_layers(const RnnCase& c, const Tensor& x, const Tensor& h0, const Tensor& c0) {
  const nn::RNNOptions o{.input_size = kIn, .hidden_size = kHidden, .num_layers = c.num_layers,
                         .nonlinearity = c.kind == "rnn_relu" ? "relu" : "tanh", .bias = c.bias,
                         .batch_first = c.batch_first, .bidirectional = c.bidirectional};
  auto prepare = [&](auto m) {
    m->to(kFloat64);
    load_params(*m, c.params);
    return m;
  };
  if (c.kind == "lstm") {
    auto m = prepare(std::make_shared<nn::LSTM>(o));
    auto [out, hn, cn] = m->forward(x, h0, c0);
    return {m, out, hn, cn};
  }
  if (c.kind == "gru") {
    auto m = prepare(std::make_shared<nn::GRU>(o));
    auto [out, hn] = m->forward(x, h0);
    return {m, out, hn, Tensor()};
  }
  auto m = prepare(std::make_shared<nn::RNN>(o));
  auto [out, hn] = m->forward(x, h0);
  return {m, out, hn, Tensor()};
}

// sum(t * u) over the defined tensors, u = 1, 2, 3, ... for each: the table's loss.
Tensor table_loss(const std::vector<Tensor>& ts) {
  Tensor loss = zeros({}, kFloat64);
  for (const Tensor& t : ts)
    if (t.defined()) loss = loss + (t * weights_for(t)).sum();
  return loss;
}

void expect_param_grads(const nn::Module& m, const RnnCase& c) {
  std::map<std::string, Tensor> mine;
  for (const auto& [n, p] : m.named_parameters()) mine[n] = p;
  ASSERT_EQ(mine.size(), c.grads.size());
  for (const NamedValues& g : c.grads) {
    ASSERT_TRUE(mine.count(g.name)) << g.name;
    const Tensor grad = mine[g.name].grad();
    ASSERT_TRUE(grad.defined()) << g.name;
    EXPECT_EQ(grad.shape(), g.shape) << g.name;
    expect_close(values(grad), g.values, 1e-10, std::string("d") + g.name);
  }
}

} // namespace

TEST(Rnn, MatchesPyTorch) {
  for (const RnnCase& c : kCases) {
    SCOPED_TRACE(c.name);
    Tensor x = from_vector(c.x, c.x_shape).requires_grad_();
    const bool states = !c.h_shape.empty();
    Tensor h0 = states ? from_vector(c.h0, c.h_shape).requires_grad_() : Tensor();
    const bool lstm = c.kind == "lstm" || c.kind == "lstm_cell";
    Tensor c0 = states && lstm ? from_vector(c.c0, c.h_shape).requires_grad_() : Tensor();
    const CaseRun r = is_cell(c) ? run_cell(c, x, h0, c0) : run_layers(c, x, h0, c0);
    ASSERT_EQ(r.out.shape(), c.out_shape);
    if (!is_cell(c)) {
      ASSERT_EQ(r.hn.shape(), c.hn_shape);
    }
    table_loss({r.out, r.hn, r.cn}).backward();
    expect_close(values(r.out), c.out, 1e-10, "out");
    if (r.hn.defined()) expect_close(values(r.hn), c.hn, 1e-10, "h_n");
    if (r.cn.defined()) expect_close(values(r.cn), c.cn, 1e-10, "c_n");
    expect_close(values(x.grad()), c.dx, 1e-10, "dx");
    if (h0.defined()) expect_close(values(h0.grad()), c.dh0, 1e-10, "dh0");
    if (c0.defined()) expect_close(values(c0.grad()), c.dc0, 1e-10, "dc0");
    expect_param_grads(*r.module, c);
  }
}

TEST(Rnn, ParameterNamesShapesAndInitAsPyTorch) {
  nn::manual_seed(1);
  nn::LSTM lstm({.input_size = 3, .hidden_size = 5, .num_layers = 2, .bidirectional = true});
  const std::vector<std::string> want{
      "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l0_reverse", "weight_hh_l0_reverse",
      "bias_ih_l0_reverse", "bias_hh_l0_reverse", "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  const nn::NamedTensors got = lstm.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  const double bound = 1 / std::sqrt(5.0);
  std::vector<std::vector<double>> seen;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i]);
    EXPECT_EQ(got[i].second.dtype(), kFloat32);
    for (double v : values(got[i].second)) ASSERT_LE(std::fabs(v), bound) << want[i];
    seen.push_back(values(got[i].second));
  }
  EXPECT_NE(seen[2], seen[3]) << "each parameter drawn afresh";
  EXPECT_EQ(got[0].second.shape(), (IntList{20, 3}));
  EXPECT_EQ(got[8].second.shape(), (IntList{20, 10})) << "layer 1 reads both directions";
  EXPECT_EQ(got[9].second.shape(), (IntList{20, 5}));
  EXPECT_EQ(got[10].second.shape(), (IntList{20}));
  EXPECT_EQ(lstm.all_weights.size(), 4u);
  nn::GRU gru({.input_size = 2, .hidden_size = 3, .bias = false});
  EXPECT_EQ(gru.named_parameters().size(), 2u);
  EXPECT_EQ(gru.named_parameters()[1].second.shape(), (IntList{9, 3}));
  nn::RNNCell cell(2, 3, true, "relu");
  EXPECT_EQ(cell.named_parameters()[0].first, "weight_ih");
  EXPECT_EQ(cell.named_parameters()[3].first, "bias_hh");
  EXPECT_EQ(nn::LSTMCell(2, 3).weight_hh.shape(), (IntList{12, 3}));
  EXPECT_EQ(nn::GRUCell(2, 3, false).named_parameters().size(), 2u);
  EXPECT_NE(lstm.str().find("LSTM(3, 5, num_layers=2"), std::string::npos) << lstm.str();
}

// gradcheck in f64 of a cell with respect to its input, states and (rebinding the members) parameters.
TEST(Rnn, CellsGradcheckInF64) {
  nn::manual_seed(3);
  nn::RNNCell rnn(3, 2);
  nn::LSTMCell lstm(3, 2);
  nn::GRUCell gru(3, 2);
  for (nn::RNNCellBase* cell : std::initializer_list<nn::RNNCellBase*>{&rnn, &lstm, &gru}) {
    SCOPED_TRACE(cell->name());
    cell->to(kFloat64);
    auto f = [&](const std::vector<Tensor>& in) {
      cell->weight_ih = in[2];
      cell->weight_hh = in[3];
      cell->bias_hh = in[4];
      if (cell == &lstm) {
        auto [h, c] = lstm.forward(in[0], in[1], in[1] * 0.5);
        return h + c;
      }
      return cell == &gru ? gru.forward(in[0], in[1]) : rnn.forward(in[0], in[1]);
    };
    const int64_t g = cell->weight_ih.size(0);
    expect_gradcheck(f, {rnd({2, 3}, 1), rnd({2, 2}, 2), rnd({g, 3}, 3) * 0.5, rnd({g, 2}, 4) * 0.5, rnd({g}, 5)});
  }
}

TEST(Rnn, TwoLayerBidirectionalLstmGradcheckInF64) {
  nn::manual_seed(4);
  nn::LSTM lstm({.input_size = 2, .hidden_size = 2, .num_layers = 2, .bidirectional = true});
  lstm.to(kFloat64);
  auto f = [&](const std::vector<Tensor>& in) {
    lstm.all_weights[3][1] = in[3]; // layer 1 reverse's weight_hh
    auto [out, hn, cn] = lstm.forward(in[0], in[1], in[2]);
    return out.sum() + (hn * cn).sum();
  };
  expect_gradcheck(f, {rnd({3, 2, 2}, 1), rnd({4, 2, 2}, 2), rnd({4, 2, 2}, 3), rnd({8, 2}, 4) * 0.5});
}

TEST(Rnn, DropoutBetweenLayersInTrainingOnly) {
  nn::manual_seed(5);
  const nn::RNNOptions o{.input_size = 3, .hidden_size = 6, .num_layers = 3, .dropout = 0.5};
  nn::GRU with(o), without({.input_size = 3, .hidden_size = 6, .num_layers = 3});
  const nn::NamedTensors from = with.named_parameters();
  nn::NamedTensors to = without.named_parameters();
  for (size_t i = 0; i < from.size(); ++i) to[i].second.assign(from[i].second.detach());
  const Tensor x = randn({4, 2, 3}, 9);
  const auto train = with.forward(x);
  without.train();
  const auto plain = without.forward(x);
  with.eval();
  const auto eval = with.forward(x);
  expect_same(values(eval.first), values(plain.first), "eval = no dropout");
  expect_same(values(eval.second), values(plain.second), "eval h_n = no dropout");
  EXPECT_NE(values(train.first), values(eval.first)) << "training drops between layers";
  // the first layer's h_n is before any dropout; the later ones read dropped inputs
  expect_same(values(train.second.narrow(0, 0, 1)), values(eval.second.narrow(0, 0, 1)), "layer 0's h_n");
  EXPECT_NE(values(train.second.narrow(0, 2, 1)), values(eval.second.narrow(0, 2, 1)));
  // one layer: nothing between layers, so training equals evaluation (as PyTorch)
  nn::LSTM one({.input_size = 3, .hidden_size = 6, .dropout = 0.5});
  const Tensor a = std::get<0>(one.forward(x));
  one.eval();
  expect_same(values(a), values(std::get<0>(one.forward(x))), "one layer");
}

TEST(Rnn, UnbatchedEqualsABatchOfOne) {
  nn::manual_seed(6);
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4, .num_layers = 2, .batch_first = true, .bidirectional = true});
  const Tensor x = randn({5, 3}, 1), h = randn({4, 4}, 2), c = randn({4, 4}, 3);
  auto [o1, h1, c1] = lstm.forward(x, h, c);
  auto [o2, h2, c2] = lstm.forward(x.unsqueeze(0), h.unsqueeze(1), c.unsqueeze(1));
  EXPECT_EQ(o1.shape(), (IntList{5, 8}));
  EXPECT_EQ(h1.shape(), (IntList{4, 4}));
  expect_close(values(o1), values(o2.squeeze(0)), 1e-6, "out");
  expect_close(values(c1), values(c2.squeeze(1)), 1e-6, "c_n");
  nn::GRUCell cell(3, 4);
  expect_close(values(cell.forward(first_of(x))), values(cell.forward(x.narrow(0, 0, 1)).squeeze(0)), 1e-6, "cell");
  nn::Sequential seq(nn::RNN({.input_size = 3, .hidden_size = 4}));
  EXPECT_EQ(seq(x).shape(), (IntList{5, 4})) << "the output alone inside Sequential";
}

TEST(Rnn, FusedUnfusedAndCompiledAgree) {
  nn::manual_seed(7);
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true});
  nn::GRU gru({.input_size = 8, .hidden_size = 3, .batch_first = true});
  nn::RNNCell cell(3, 4, true, "relu");
  expect_fused_unfused_and_compiled_agree(
      [&](const std::vector<Tensor>& in) {
        Tensor x = in[0].detach().requires_grad_();
        auto [out, hn, cn] = lstm.forward(x, in[1], in[2]);
        auto [g, gh] = gru.forward(out.transpose(0, 1));
        const Tensor h = cell.forward(first_of(x), first_of(hn));
        const Tensor loss = (g * g).sum() + (cn * hn).sum() + h.sum() + gh.sum();
        std::vector<Tensor> params = lstm.parameters();
        params.push_back(x);
        params.push_back(gru.all_weights[0][1]);
        std::vector<Tensor> result = grad({loss}, params);
        result.push_back(g);
        result.push_back(h);
        return result;
      },
      [](uint64_t seed) {
        return std::vector<Tensor>{randn({5, 2, 3}, seed), randn({4, 2, 4}, seed + 1), randn({4, 2, 4}, seed + 2)};
      });
}

TEST(Rnn, Errors) {
  nn::manual_seed(8);
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4, .num_layers = 2});
  expect_error([&] { lstm.forward(zeros({2, 5, 2, 3})); }, __LINE__, "LSTM",
               {"expected input to be 2-d", "got 4-d", "f32[2,5,2,3]"});
  expect_error([&] { lstm.forward(zeros({5, 2, 7})); }, __LINE__, "LSTM",
               {"input.size(-1) must be equal to input_size = 3", "f32[5,2,7]"});
  expect_error([&] { lstm.forward(zeros({5, 2, 3}), zeros({1, 2, 4}), zeros({2, 2, 4})); }, __LINE__, "LSTM",
               {"h0 must be [2, 2, 4]", "f32[5,2,3]", "f32[1,2,4]"});
  expect_error([&] { lstm.forward(zeros({5, 2, 3}), zeros({2, 2, 4}), zeros({2, 3, 4})); }, __LINE__, "LSTM",
               {"c0 must be [2, 2, 4]", "f32[2,3,4]"});
  expect_error([&] { lstm.forward(zeros({5, 2, 3}), zeros({2, 2, 4})); }, __LINE__, "LSTM",
               {"takes both h0 and c0, or neither"});
  expect_error([&] { lstm.forward(zeros({0, 2, 3})); }, __LINE__, "LSTM", {"sequence length", "f32[0,2,3]"});
  expect_error([&] { lstm.forward(zeros({5, 2, 3}, kFloat64)); }, __LINE__, "LSTM", {"dtype f32", "f64[5,2,3]"});
  nn::GRU gru({.input_size = 3, .hidden_size = 4, .batch_first = true, .bidirectional = true});
  expect_error([&] { gru.forward(zeros({2, 5, 3}), zeros({2, 5, 4})); }, __LINE__, "GRU",
               {"h0 must be [2, 2, 4]", "f32[2,5,4]"});
  expect_error([&] { gru.forward(zeros({5, 3}), zeros({2, 1, 4})); }, __LINE__, "GRU", {"h0 must be [2, 4]"});
  expect_error([] { nn::LSTM({.input_size = 3, .hidden_size = 4, .proj_size = 2}); }, __LINE__, "LSTM",
               {"proj_size 2 is not supported"});
  expect_error([] { nn::RNN({.input_size = 3, .hidden_size = 4, .nonlinearity = "sigmoid"}); }, __LINE__, "RNN",
               {"nonlinearity must be \"tanh\" or \"relu\""});
  expect_error([] { nn::GRU({.input_size = 3, .hidden_size = 4, .nonlinearity = "relu"}); }, __LINE__, "GRU",
               {"nonlinearity is RNN's option"});
  expect_error([] { nn::RNN({.input_size = 3, .hidden_size = 0}); }, __LINE__, "RNN",
               {"input_size and hidden_size must be positive"});
  expect_error([] { nn::GRU({.input_size = 3, .hidden_size = 2, .num_layers = 0}); }, __LINE__, "GRU",
               {"num_layers must be positive, got 0"});
  expect_error([] { nn::LSTM({.input_size = 3, .hidden_size = 2, .dropout = 1.5}); }, __LINE__, "LSTM",
               {"dropout must be in [0, 1]"});
  nn::RNNCell cell(3, 4);
  expect_error([&] { cell.forward(zeros({2, 2, 3})); }, __LINE__, "RNNCell",
               {"expected input to be 1-d or 2-d, got 3-d", "f32[2,2,3]"});
  expect_error([&] { cell.forward(zeros({2, 5})); }, __LINE__, "RNNCell", {"input_size = 3", "f32[2,5]"});
  expect_error([&] { cell.forward(zeros({2, 3}), zeros({3, 4})); }, __LINE__, "RNNCell",
               {"hidden state must be [2, 4]", "f32[3,4]"});
  expect_error([] { nn::RNNCell(3, 4, true, "gelu"); }, __LINE__, "RNNCell", {"nonlinearity must be"});
  nn::LSTMCell lcell(3, 4);
  expect_error([&] { lcell.forward(zeros({3}), zeros({4}), zeros({2, 4})); }, __LINE__, "LSTMCell",
               {"hidden state must be [4]", "f32[2,4]"});
  expect_error([&] { lcell.forward(zeros({3}), Tensor(), zeros({4})); }, __LINE__, "LSTMCell",
               {"takes both hx and cx, or neither"});
}

// An LSTM and a linear head learn the sum of a sequence of 8 values drawn from U(-1, 1) (variance 8/3) to a
// test MSE below 0.02 in 500 compiled Adam steps.
TEST(Rnn, LstmLearnsToAddASequence) {
  constexpr int64_t kT = 8, kBatch = 64;
  nn::manual_seed(11);
  nn::LSTM lstm({.input_size = 1, .hidden_size = 16, .batch_first = true});
  nn::Linear head(16, 1);
  std::vector<Tensor> params = lstm.parameters();
  for (const Tensor& p : head.parameters()) params.push_back(p);
  optim::Adam opt(params, {.lr = 1e-2});
  auto predict = [&](const Tensor& x) { return head(first_of(std::get<1>(lstm.forward(x)))).squeeze(-1); };
  auto batch = [](uint64_t seed) {
    const Tensor x = rand({kBatch, kT, 1}, seed) * 2.0 - 1.0;
    return std::pair{x, x.sum({1, 2})};
  };
  CompiledFunction step([&](const std::vector<Tensor>& in) {
    opt.zero_grad();
    const Tensor loss = F::mse_loss(predict(in[0]), in[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  double first = 0;
  for (uint64_t s = 0; s < 500; ++s) {
    const auto [x, y] = batch(100 + s);
    const double loss = step({x, y})[0].item<double>();
    if (s == 0) first = loss;
  }
  const auto [x, y] = batch(7);
  const double test_loss = F::mse_loss(predict(x), y).item<double>();
  EXPECT_GT(first, 1.5); // about 8/3 at the start
  EXPECT_LT(test_loss, 0.02) << "first " << first; // 0.005 when written; predicting 0 gives 8/3
}

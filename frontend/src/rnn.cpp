// Recurrent layers: RNNCell, LSTMCell, GRUCell and the multi-layer RNN, LSTM and GRU, composed from
// kiln's primitive ops with PyTorch 1.13's semantics.

#include "kiln/rnn.h"

#include <cmath>
#include <sstream>

#include "frontend/src/tensor_impl.h"
#include "graph/node.h"
#include "kiln/autograd.h"

namespace kiln::nn {

namespace {

using detail::fail;

// uniform(-bound, bound), seeded from the module sequence (PyTorch's reset_parameters of the RNNs).
Tensor uniform(IntList shape, double bound) { return (rand(std::move(shape), next_seed()) * 2.0 - 1.0) * bound; }

// The recurrent state of one sequence position: h, and c for LSTM (undefined otherwise).
struct State {
  Tensor h, c;
};

// The kind of cell: its gate count, and for the Elman cell, its nonlinearity.
struct CellKind {
  int64_t gates; // 1 Elman, 4 LSTM, 3 GRU
  bool relu; // Elman only
};

State elman_step(const Tensor& gi, const Tensor& gh, bool use_relu) {
  const Tensor pre = gi + gh;
  return {use_relu ? relu(pre) : tanh(pre), Tensor()};
}

// Gates in PyTorch's order i, f, g, o.
State lstm_step(const Tensor& gi, const Tensor& gh, const State& s) {
  const std::vector<Tensor> g = (gi + gh).chunk(4, -1);
  const Tensor c = sigmoid(g[1]) * s.c + sigmoid(g[0]) * tanh(g[2]);
  return {sigmoid(g[3]) * tanh(c), c};
}

// Gates in PyTorch's order r, z, n; r scales the hidden product of n with its bias (b_hn).
State gru_step(const Tensor& gi, const Tensor& gh, const State& s) {
  const std::vector<Tensor> a = gi.chunk(3, -1), b = gh.chunk(3, -1);
  const Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]);
  const Tensor n = tanh(a[2] + r * b[2]);
  return {n + z * (s.h - n), Tensor()}; // (1 - z) n + z h, as ATen's gru_cell
}

// One step of a cell from the input's gate products gi [N, G * H] (bias included) and state s:
// the hidden product of all gates is one matmul.
State cell_step(CellKind kind, const Tensor& gi, const State& s, const Tensor& w_hh, const Tensor& b_hh) {
  const Tensor gh = functional::linear(s.h, w_hh, b_hh);
  if (kind.gates == 4) return lstm_step(gi, gh, s);
  if (kind.gates == 3) return gru_step(gi, gh, s);
  return elman_step(gi, gh, kind.relu);
}

// The weights {w_ih, w_hh, b_ih, b_hh} (or {w_ih, w_hh}) of a layer direction.
struct Weights {
  Tensor w_ih, w_hh, b_ih, b_hh;
  explicit Weights(const std::vector<Tensor>& w)
      : w_ih(w[0]), w_hh(w[1]), b_ih(w.size() > 2 ? w[2] : Tensor()), b_hh(w.size() > 2 ? w[3] : Tensor()) {}
};

// One direction of one layer over x [T, N, in] from state s: the outputs [T, N, H] in time order and
// the final state. The input products of all steps are one [T * N, in] x [in, G * H] matmul.
std::pair<Tensor, State> run_direction(CellKind kind, const Tensor& x, State s, const Weights& w, bool reverse) {
  const int64_t T = x.size(0), N = x.size(1), GH = w.w_ih.size(0);
  const Tensor gi = functional::linear(x.reshape({T * N, x.size(2)}), w.w_ih, w.b_ih).reshape({T, N, GH});
  const std::vector<Tensor> steps = gi.unbind(0);
  std::vector<Tensor> hs(static_cast<size_t>(T));
  for (int64_t k = 0; k < T; ++k) {
    const size_t t = static_cast<size_t>(reverse ? T - 1 - k : k);
    s = cell_step(kind, steps[t], s, w.w_hh, w.b_hh);
    hs[t] = s.h;
  }
  return {stack(hs, 0), s};
}

void check_sizes(const char* op, int64_t input_size, int64_t hidden_size, const Loc& loc) {
  if (input_size <= 0 || hidden_size <= 0)
    throw Error(op,
                "input_size and hidden_size must be positive, got " + std::to_string(input_size) + " and " +
                    std::to_string(hidden_size),
                loc);
}

} // namespace

// ---------------------------------------------------------------- the cells

RNNCellBase::RNNCellBase(const char* op, int64_t input_size, int64_t hidden_size, bool bias, int64_t gates,
                         const Loc& loc)
    : input_size_(input_size), hidden_size_(hidden_size), gates_(gates) {
  check_sizes(op, input_size, hidden_size, loc);
  const detail::UserCall call(op, loc);
  const graph::SourceScope at(loc);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  weight_ih = register_parameter("weight_ih", uniform({gates * hidden_size, input_size}, bound), loc);
  weight_hh = register_parameter("weight_hh", uniform({gates * hidden_size, hidden_size}, bound), loc);
  if (!bias) return;
  bias_ih = register_parameter("bias_ih", uniform({gates * hidden_size}, bound), loc);
  bias_hh = register_parameter("bias_hh", uniform({gates * hidden_size}, bound), loc);
}

std::string RNNCellBase::extra_repr() const {
  return std::to_string(input_size_) + ", " + std::to_string(hidden_size_) + (bias_ih.defined() ? "" : ", bias=false");
}

void RNNCellBase::check_cell_inputs(const Tensor& input, std::initializer_list<const Tensor*> states,
                                    const Loc& loc) const {
  const std::string op = name();
  if (!input.defined()) throw Error(op, "input must be defined", loc);
  if (input.dim() != 1 && input.dim() != 2)
    fail(op, "expected input to be 1-d or 2-d, got " + std::to_string(input.dim()) + "-d", {&input}, loc);
  if (input.size(-1) != input_size_)
    fail(op, "input.size(-1) must be equal to input_size = " + std::to_string(input_size_), {&input}, loc);
  if (input.dtype() != weight_ih.dtype())
    fail(op, "input must have the parameters' dtype " + std::string(dtype_name(weight_ih.dtype())), {&input}, loc);
  const IntList want = input.dim() == 2 ? IntList{input.size(0), hidden_size_} : IntList{hidden_size_};
  for (const Tensor* s : states) {
    if (!s->defined()) continue;
    if (s->shape() != want) fail(op, "the hidden state must be " + detail::list_str(want), {&input, s}, loc);
    if (s->dtype() != input.dtype()) fail(op, "the hidden state must have the input's dtype", {&input, s}, loc);
  }
}

Tensor RNNCellBase::batched_state(const Tensor& state, const Tensor& input) const {
  if (state.defined()) return state.dim() == 1 ? state.unsqueeze(0) : state;
  return zeros({input.size(0), hidden_size_}, input.dtype(), input.device());
}

Tensor RNNCellBase::step_of(const Tensor& input, const Tensor& hx, const Tensor& cx, Tensor* c_out) const {
  const Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  const State s{batched_state(hx, x), gates_ == 4 ? batched_state(cx, x) : Tensor()};
  const CellKind kind{gates_, relu_};
  State next = cell_step(kind, functional::linear(x, weight_ih, bias_ih), s, weight_hh, bias_hh);
  if (input.dim() == 1) next = {next.h.squeeze(0), next.c.defined() ? next.c.squeeze(0) : Tensor()};
  if (c_out) *c_out = next.c;
  return next.h;
}

RNNCell::RNNCell(int64_t input_size, int64_t hidden_size, bool bias, std::string nonlinearity, Loc loc)
    : RNNCellBase("RNNCell", input_size, hidden_size, bias, 1, loc), nonlinearity_(std::move(nonlinearity)) {
  if (nonlinearity_ != "tanh" && nonlinearity_ != "relu")
    throw Error("RNNCell", "nonlinearity must be \"tanh\" or \"relu\", not \"" + nonlinearity_ + "\"", loc);
  relu_ = nonlinearity_ == "relu";
}

Tensor RNNCell::forward(const Tensor& input, const Tensor& hx, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  check_cell_inputs(input, {&hx}, loc);
  return step_of(input, hx, Tensor(), nullptr);
}

Tensor RNNCell::forward_impl(const Tensor& x) { return forward(x); }

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool bias, Loc loc)
    : RNNCellBase("LSTMCell", input_size, hidden_size, bias, 4, loc) {}

std::pair<Tensor, Tensor> LSTMCell::forward(const Tensor& input, const Tensor& hx, const Tensor& cx, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  if (hx.defined() != cx.defined()) throw Error(name(), "takes both hx and cx, or neither", loc);
  check_cell_inputs(input, {&hx, &cx}, loc);
  Tensor c;
  Tensor h = step_of(input, hx, cx, &c);
  return {h, c};
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool bias, Loc loc)
    : RNNCellBase("GRUCell", input_size, hidden_size, bias, 3, loc) {}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  check_cell_inputs(input, {&hx}, loc);
  return step_of(input, hx, Tensor(), nullptr);
}

Tensor GRUCell::forward_impl(const Tensor& x) { return forward(x); }

// ---------------------------------------------------------------- RNN, LSTM, GRU

namespace {

void check_options(const char* op, const RNNOptions& o, int64_t gates, const Loc& loc) {
  check_sizes(op, o.input_size, o.hidden_size, loc);
  if (o.num_layers <= 0) throw Error(op, "num_layers must be positive, got " + std::to_string(o.num_layers), loc);
  if (!(o.dropout >= 0 && o.dropout <= 1))
    throw Error(op, "dropout must be in [0, 1], got " + std::to_string(o.dropout), loc);
  if (o.proj_size != 0)
    throw Error(op, "proj_size " + std::to_string(o.proj_size) + " is not supported (only 0, no projection)", loc);
  if (gates == 1 && o.nonlinearity != "tanh" && o.nonlinearity != "relu")
    throw Error(op, "nonlinearity must be \"tanh\" or \"relu\", not \"" + o.nonlinearity + "\"", loc);
  if (gates != 1 && o.nonlinearity != "tanh")
    throw Error(op, "nonlinearity is RNN's option (got \"" + o.nonlinearity + "\")", loc);
}

} // namespace

RNNBase::RNNBase(const char* op, RNNOptions opts, int64_t gates, const Loc& loc)
    : options(std::move(opts)), gates_(gates) {
  check_options(op, options, gates, loc);
  const detail::UserCall call(op, loc);
  const graph::SourceScope at(loc);
  const int64_t H = options.hidden_size, D = directions();
  const double bound = 1.0 / std::sqrt(static_cast<double>(H));
  // Registered in PyTorch's order (layer, then direction; w_ih, w_hh, b_ih, b_hh).
  for (int64_t l = 0; l < options.num_layers; ++l) {
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t in = l == 0 ? options.input_size : H * D;
      std::vector<Tensor>& w = all_weights.emplace_back();
      w.push_back(register_parameter("weight_ih" + sfx, uniform({gates * H, in}, bound), loc));
      w.push_back(register_parameter("weight_hh" + sfx, uniform({gates * H, H}, bound), loc));
      if (!options.bias) continue;
      w.push_back(register_parameter("bias_ih" + sfx, uniform({gates * H}, bound), loc));
      w.push_back(register_parameter("bias_hh" + sfx, uniform({gates * H}, bound), loc));
    }
  }
}

std::string RNNBase::extra_repr() const {
  std::ostringstream os;
  os << options.input_size << ", " << options.hidden_size << ", num_layers=" << options.num_layers;
  if (gates_ == 1) os << ", nonlinearity=" << options.nonlinearity;
  os << ", bias=" << (options.bias ? "true" : "false") << ", batch_first=" << (options.batch_first ? "true" : "false")
     << ", dropout=" << options.dropout << ", bidirectional=" << (options.bidirectional ? "true" : "false");
  return os.str();
}

void RNNBase::check_run_inputs(const Tensor& input, const std::vector<Tensor>& states, const Loc& loc) const {
  const std::string op = name();
  if (!input.defined()) throw Error(op, "input must be defined", loc);
  if (input.dim() != 2 && input.dim() != 3)
    fail(op,
         std::string("expected input to be 2-d (unbatched [T, input_size]) or 3-d (") +
             (options.batch_first ? "[N, T, input_size]" : "[T, N, input_size]") + "), got " +
             std::to_string(input.dim()) + "-d",
         {&input}, loc);
  if (input.size(-1) != options.input_size)
    fail(op, "input.size(-1) must be equal to input_size = " + std::to_string(options.input_size), {&input}, loc);
  const DType dt = all_weights[0][0].dtype();
  if (input.dtype() != dt)
    fail(op, "input must have the parameters' dtype " + std::string(dtype_name(dt)), {&input}, loc);
  const bool batched = input.dim() == 3;
  const int64_t T = input.size(batched && options.batch_first ? 1 : 0);
  if (T == 0) fail(op, "expected the sequence length to be larger than 0", {&input}, loc);
  const int64_t LD = options.num_layers * directions(), H = options.hidden_size;
  const IntList want = batched ? IntList{LD, input.size(options.batch_first ? 0 : 1), H} : IntList{LD, H};
  for (size_t i = 0; i < states.size(); ++i) {
    const Tensor& s = states[i];
    if (!s.defined()) continue;
    const std::string what = i == 0 ? "h0" : "c0";
    if (s.shape() != want)
      fail(op,
           what + " must be " + detail::list_str(want) + " (num_layers * num_directions" + (batched ? ", N" : "") +
               ", hidden_size)",
           {&input, &s}, loc);
    if (s.dtype() != dt) fail(op, what + " must have the input's dtype", {&input, &s}, loc);
  }
}

std::vector<Tensor> RNNBase::run(const Tensor& input, const std::vector<Tensor>& states, const Loc& loc) {
  check_run_inputs(input, states, loc);
  const bool batched = input.dim() == 3;
  Tensor x = !batched ? input.unsqueeze(1) : options.batch_first ? input.transpose(0, 1) : input; // [T, N, in]
  const int64_t N = x.size(1), H = options.hidden_size, D = directions(), LD = options.num_layers * D;
  // Each initial state as LD tensors [N, H].
  std::vector<std::vector<Tensor>> init;
  for (const Tensor& s : states)
    init.push_back((!s.defined() ? zeros({LD, N, H}, input.dtype(), input.device())
                    : batched    ? s
                                 : s.unsqueeze(1))
                       .unbind(0));
  std::vector<std::vector<Tensor>> finals(states.size());
  const CellKind kind{gates_, options.nonlinearity == "relu"};
  const double p = is_training() ? options.dropout : 0.0;
  for (int64_t l = 0; l < options.num_layers; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      const size_t k = static_cast<size_t>(l * D + d);
      const State s{init[0][k], init.size() > 1 ? init[1][k] : Tensor()};
      auto [out, last] = run_direction(kind, x, s, Weights(all_weights[k]), d == 1);
      outs.push_back(out);
      finals[0].push_back(last.h);
      if (finals.size() > 1) finals[1].push_back(last.c);
    }
    x = D == 2 ? concat(outs, 2) : outs[0];
    if (p > 0 && l + 1 < options.num_layers)
      x = functional::dropout(x, p, detail::host_seed([] { return next_seed(); }));
  }
  std::vector<Tensor> result{!batched ? x.squeeze(1) : options.batch_first ? x.transpose(0, 1) : x};
  for (const std::vector<Tensor>& f : finals) result.push_back(batched ? stack(f, 0) : stack(f, 0).squeeze(1));
  return result;
}

Tensor RNNBase::forward_impl(const Tensor& x) {
  return run(x, std::vector<Tensor>(gates_ == 4 ? 2 : 1), Loc::current())[0];
}

RNN::RNN(RNNOptions opts, Loc loc) : RNNBase("RNN", std::move(opts), 1, loc) {}

std::pair<Tensor, Tensor> RNN::forward(const Tensor& input, const Tensor& h0, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  const std::vector<Tensor> r = run(input, {h0}, loc);
  return {r[0], r[1]};
}

LSTM::LSTM(RNNOptions opts, Loc loc) : RNNBase("LSTM", std::move(opts), 4, loc) {}

std::tuple<Tensor, Tensor, Tensor> LSTM::forward(const Tensor& input, const Tensor& h0, const Tensor& c0, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  if (h0.defined() != c0.defined()) throw Error(name(), "takes both h0 and c0, or neither", loc);
  const std::vector<Tensor> r = run(input, {h0, c0}, loc);
  return {r[0], r[1], r[2]};
}

GRU::GRU(RNNOptions opts, Loc loc) : RNNBase("GRU", std::move(opts), 3, loc) {}

std::pair<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& h0, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  const std::vector<Tensor> r = run(input, {h0}, loc);
  return {r[0], r[1]};
}

} // namespace kiln::nn

#pragma once
/// \file rnn.h
/// Recurrent layers with PyTorch 1.13's semantics, composed from kiln's primitive ops (matmul,
/// sigmoid, tanh, narrow/chunk, stack): the cells nn::RNNCell, nn::LSTMCell and nn::GRUCell, and
/// the multi-layer, optionally bidirectional nn::RNN, nn::LSTM and nn::GRU. Parameters are named,
/// shaped, ordered and initialized as PyTorch's (U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))), so a
/// PyTorch state dict maps 1:1. A layer computes the input-to-hidden products of all its time steps
/// as one matmul, then one matmul per step for the hidden product of all gates; everything is lazy
/// graph, so gradients come from autograd and the steps fuse and run under compile().
/// Not supported: PackedSequence inputs (pad the batch instead) and LSTM's proj_size (refused).

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln::nn {

/// What the three cells share: the sizes, the gate count and the parameters weight_ih
/// [gates * hidden, input], weight_hh [gates * hidden, hidden], bias_ih and bias_hh [gates * hidden].
class RNNCellBase : public Module {
public:
  int64_t input_size() const { return input_size_; } ///< features of the input
  int64_t hidden_size() const { return hidden_size_; } ///< features of the hidden state
  std::string extra_repr() const override; ///< sizes and bias
  Tensor weight_ih; ///< [gates * hidden_size, input_size]
  Tensor weight_hh; ///< [gates * hidden_size, hidden_size]
  Tensor bias_ih; ///< [gates * hidden_size], undefined without bias
  Tensor bias_hh; ///< [gates * hidden_size], undefined without bias
protected:
  /// Registers the parameters of a cell with `gates` gates (`op` names the errors).
  RNNCellBase(const char* op, int64_t input_size, int64_t hidden_size, bool bias, int64_t gates, const Loc& loc);
  /// Checks input ([N, input_size] or [input_size]) and each defined state ([N, hidden_size] or
  /// [hidden_size] alike): a kiln::Error of name() at `loc` names the shapes.
  void check_cell_inputs(const Tensor& input, std::initializer_list<const Tensor*> states, const Loc& loc) const;
  /// A defined state as [N, hidden_size], or zeros [N, hidden_size] for input [N, input_size].
  Tensor batched_state(const Tensor& state, const Tensor& input) const;
  /// One step of the cell on checked operands: h' (and c' in *c_out when not null), shaped as input's batch.
  Tensor step_of(const Tensor& input, const Tensor& hx, const Tensor& cx, Tensor* c_out) const;
  bool relu_ = false; ///< the Elman cell's nonlinearity is relu (else tanh)
private:
  int64_t input_size_, hidden_size_, gates_;
};

/// An Elman RNN cell as torch.nn.RNNCell: h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu.
class RNNCell : public RNNCellBase {
public:
  /// nonlinearity is "tanh" or "relu"; sizes must be positive.
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true, std::string nonlinearity = "tanh",
          Loc loc = Loc::current());
  /// h' [N, hidden_size] from input [N, input_size] (or unbatched [input_size] to [hidden_size]) and
  /// hx shaped like h' (zeros when undefined).
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor(), Loc loc = Loc::current());
  std::string name() const override { return "RNNCell"; } ///< "RNNCell"
  const std::string& nonlinearity() const { return nonlinearity_; } ///< "tanh" or "relu"
protected:
  /// forward(x) with zero state (so that the cell works inside Sequential).
  Tensor forward_impl(const Tensor& x) override;

private:
  std::string nonlinearity_;
};

/// A long short-term memory cell as torch.nn.LSTMCell, gates in PyTorch's order i, f, g, o:
/// c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c').
class LSTMCell : public RNNCellBase {
public:
  /// Sizes must be positive.
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true, Loc loc = Loc::current());
  /// (h', c'), each [N, hidden_size], from input [N, input_size] (or unbatched [input_size]) and the
  /// state (hx, cx) shaped like them: both given, or both undefined (zeros).
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = Tensor(), const Tensor& cx = Tensor(),
                                    Loc loc = Loc::current());
  std::string name() const override { return "LSTMCell"; } ///< "LSTMCell"
};

/// A gated recurrent unit cell as torch.nn.GRUCell, gates in PyTorch's order r, z, n:
/// n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn)), h' = (1 - z) n + z h.
class GRUCell : public RNNCellBase {
public:
  /// Sizes must be positive.
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true, Loc loc = Loc::current());
  /// h' [N, hidden_size] from input [N, input_size] (or unbatched [input_size]) and hx shaped like h'
  /// (zeros when undefined).
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor(), Loc loc = Loc::current());
  std::string name() const override { return "GRUCell"; } ///< "GRUCell"
protected:
  /// forward(x) with zero state (so that the cell works inside Sequential).
  Tensor forward_impl(const Tensor& x) override;
};

/// The options of RNN, LSTM and GRU: PyTorch's constructor arguments, in its order and
/// with its defaults (designated initializers: `{.input_size = 4, .hidden_size = 8, .num_layers = 2}`).
struct RNNOptions {
  int64_t input_size = 0; ///< features of the input (positive)
  int64_t hidden_size = 0; ///< features of the hidden state (positive)
  int64_t num_layers = 1; ///< stacked layers (positive)
  std::string nonlinearity = "tanh"; ///< RNN only: "tanh" or "relu" (LSTM and GRU refuse anything but "tanh")
  bool bias = true; ///< the bias_ih and bias_hh parameters
  bool batch_first = false; ///< input and output [N, T, features] instead of [T, N, features]
  double dropout = 0; ///< in [0, 1]: dropout on each layer's output but the last, in training
  bool bidirectional = false; ///< a second, reversed direction per layer (outputs concatenated)
  int64_t proj_size = 0; ///< LSTM's projection: not supported, anything but 0 is refused
};

/// What RNN, LSTM and GRU share: the options, the parameters and the layer loop.
class RNNBase : public Module {
public:
  RNNOptions options; ///< the configuration
  /// The parameters per layer and direction (layer 0, layer 0 reverse, layer 1, ...), each
  /// {weight_ih, weight_hh, bias_ih, bias_hh} (two without bias), as torch's all_weights.
  std::vector<std::vector<Tensor>> all_weights;
  std::string extra_repr() const override; ///< the options
protected:
  /// Checks the options and registers the parameters of a `gates`-gate cell per layer and direction
  /// under PyTorch's names (weight_ih_l0, ..., bias_hh_l1_reverse), in PyTorch's order.
  RNNBase(const char* op, RNNOptions options, int64_t gates, const Loc& loc);
  /// Runs the layers on input with the initial states (one per state kind: h for RNN and GRU, h and
  /// c for LSTM; undefined ones are zeros). Returns the output, then the final states, each shaped
  /// as PyTorch's. Errors name `loc`.
  std::vector<Tensor> run(const Tensor& input, const std::vector<Tensor>& states, const Loc& loc);
  /// forward(x) with zero states, the output only (so that the layer works inside Sequential).
  Tensor forward_impl(const Tensor& x) override;
  /// 1 or 2.
  int64_t directions() const { return options.bidirectional ? 2 : 1; }

private:
  int64_t gates_;
  void check_run_inputs(const Tensor& input, const std::vector<Tensor>& states, const Loc& loc) const;
};

/// A multi-layer Elman RNN as torch.nn.RNN (tanh or relu).
class RNN : public RNNBase {
public:
  /// The layers of `options` (sizes positive, nonlinearity "tanh" or "relu", proj_size 0).
  explicit RNN(RNNOptions options, Loc loc = Loc::current());
  /// (output, h_n): input [T, N, input_size] ([N, T, input_size] with batch_first, or unbatched
  /// [T, input_size]) gives output [T, N, D * hidden_size] (laid out as the input) and h_n
  /// [num_layers * D, N, hidden_size] (never batch-first; [num_layers * D, hidden_size] unbatched),
  /// D = 2 when bidirectional. h0 is shaped as h_n (zeros when undefined). T must be positive.
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = Tensor(), Loc loc = Loc::current());
  std::string name() const override { return "RNN"; } ///< "RNN"
};

/// A multi-layer long short-term memory as torch.nn.LSTM (cells as LSTMCell's).
class LSTM : public RNNBase {
public:
  /// The layers of `options` (sizes positive, proj_size 0).
  explicit LSTM(RNNOptions options, Loc loc = Loc::current());
  /// (output, h_n, c_n): shapes as RNN::forward's, h0 and c0 as h_n and c_n (both given, or both
  /// undefined: zeros).
  std::tuple<Tensor, Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = Tensor(),
                                             const Tensor& c0 = Tensor(), Loc loc = Loc::current());
  std::string name() const override { return "LSTM"; } ///< "LSTM"
};

/// A multi-layer gated recurrent unit as torch.nn.GRU (cells as GRUCell's).
class GRU : public RNNBase {
public:
  /// The layers of `options` (sizes positive, proj_size 0).
  explicit GRU(RNNOptions options, Loc loc = Loc::current());
  /// (output, h_n): shapes as RNN::forward's.
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& h0 = Tensor(), Loc loc = Loc::current());
  std::string name() const override { return "GRU"; } ///< "GRU"
};

} // namespace kiln::nn

#!/usr/bin/env python3
"""Prints tests/pytorch_rnn_table.inc: torch.nn's RNNCell, LSTMCell, GRUCell, RNN (tanh, relu), LSTM and GRU
in f64, the reference of test_rnn. Run with Debian's python3-torch (1.13):
    cd tests/tools && /usr/bin/python3 pytorch_rnn_table.py > ../pytorch_rnn_table.inc
Each case records the module's parameters by name (torch's initialization, seeded), the input, the
initial states (none: zeros), the outputs and the gradients of sum(out * u1) + sum(h_n * u2) + sum(c_n * u3)
(u = 1, 2, 3, ... for each; a cell's outputs are h' and, for LSTMCell, c') with respect to the input, the
initial states and every parameter."""
import sys

import torch

from cpp_literals import cbool, ints, lits
from torch_tables import header, weights_for

gen = torch.Generator().manual_seed(31)
IN, HID, T, N = 3, 4, 5, 2


def randn(*shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def shape(t):
    return ints(t.shape)


# (name, kind, num_layers, bias, batch_first, bidirectional, T, N (0 unbatched... see batched), batched, states)
CELL_CASES = [
    ("rnn_cell_tanh", "rnn_cell_tanh", True, True, True),
    ("rnn_cell_relu", "rnn_cell_relu", True, True, True),
    ("lstm_cell", "lstm_cell", True, True, True),
    ("gru_cell", "gru_cell", True, True, True),
    ("rnn_cell_tanh_no_bias_no_state", "rnn_cell_tanh", False, True, False),
    ("lstm_cell_unbatched", "lstm_cell", True, False, True),
    ("gru_cell_unbatched_no_state", "gru_cell", True, False, False),
    ("lstm_cell_no_state", "lstm_cell", True, True, False),
]

# (name, kind, num_layers, bias, batch_first, bidirectional, T, N (None: unbatched), states given)
LAYER_CASES = []
for kind in ("rnn_tanh", "rnn_relu", "lstm", "gru"):
    LAYER_CASES += [
        (kind + "_2_layers_states", kind, 2, True, False, False, T, N, True),
        (kind + "_2_layers_bidirectional_batch_first", kind, 2, True, True, True, T, N, False),
        (kind + "_2_layers_bidirectional_states", kind, 2, True, False, True, T, N, True),
    ]
LAYER_CASES += [
    ("lstm_no_bias_bidirectional_batch_first_states", "lstm", 1, False, True, True, T, N, True),
    ("gru_no_bias", "gru", 2, False, False, False, T, N, False),
    ("gru_unbatched_bidirectional_states", "gru", 2, True, False, True, T, None, True),
    ("lstm_unbatched", "lstm", 2, True, True, False, T, None, False),
    ("rnn_tanh_one_step_bidirectional_states", "rnn_tanh", 2, True, False, True, 1, N, True),
    ("lstm_one_step_batch_first", "lstm", 1, True, True, False, 1, 3, False),
    ("lstm_zero_batch_bidirectional_states", "lstm", 2, True, False, True, T, 0, True),
    ("gru_zero_batch_batch_first", "gru", 1, True, True, False, 3, 0, False),
]


def build_cell(kind, bias):
    if kind.startswith("rnn_cell"):
        return torch.nn.RNNCell(IN, HID, bias, nonlinearity=kind[len("rnn_cell_"):], dtype=torch.float64)
    cls = torch.nn.LSTMCell if kind == "lstm_cell" else torch.nn.GRUCell
    return cls(IN, HID, bias, dtype=torch.float64)


def build_layer(kind, layers, bias, bf, bidir):
    kw = dict(num_layers=layers, bias=bias, batch_first=bf, bidirectional=bidir, dtype=torch.float64)
    if kind.startswith("rnn"):
        return torch.nn.RNN(IN, HID, nonlinearity=kind[4:], **kw)
    return (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(IN, HID, **kw)


def loss_of(outs):
    return sum((y * weights_for(y)).sum() for y in outs)


def grad_or_empty(t):
    if t is None:
        return "{}"
    return lits(t.grad if t.grad is not None else torch.zeros_like(t))


def write(out, name, kind, layers, bias, bf, bidir, m, x, h0, c0, y, hn, cn):
    params = ", ".join('{"%s", %s, %s}' % (n, shape(p), lits(p.detach())) for n, p in m.named_parameters())
    grads = ", ".join('{"%s", %s, %s}' % (n, shape(p), lits(p.grad)) for n, p in m.named_parameters())
    opt = lambda t: (shape(t), lits(t.detach())) if t is not None else ("{}", "{}")
    h_shape, h_vals = opt(h0)
    _, c_vals = opt(c0)
    out.write('{"%s", "%s", %d, %s, %s, %s, %s, %s, %s, %s, %s, {%s}, %s, %s, %s, %s, %s, %s, %s, %s, {%s}},\n' % (
        name, kind, layers, cbool(bias), cbool(bf), cbool(bidir), shape(x), lits(x.detach()), h_shape, h_vals, c_vals,
        params, shape(y), lits(y.detach()), lits(hn.detach()) if hn is not None else "{}",
        lits(cn.detach()) if cn is not None else "{}", lits(x.grad), grad_or_empty(h0), grad_or_empty(c0),
        shape(hn) if hn is not None else "{}", grads))


def cell_case(out, name, kind, bias, batched, states):
    torch.manual_seed(len(name))
    m = build_cell(kind, bias)
    x = randn(*([N, IN] if batched else [IN])).requires_grad_()
    hs = [N, HID] if batched else [HID]
    h0 = randn(*hs).requires_grad_() if states else None
    c0 = randn(*hs).requires_grad_() if states and kind == "lstm_cell" else None
    if kind == "lstm_cell":
        y, cn = m(x, (h0, c0)) if states else m(x)
    else:
        y, cn = m(x, h0) if states else m(x), None
    loss_of([y] + ([cn] if cn is not None else [])).backward()
    write(out, name, kind, 1, bias, False, False, m, x, h0, c0, y, None, cn)


def layer_case(out, name, kind, layers, bias, bf, bidir, steps, n, states):
    torch.manual_seed(len(name))
    m = build_layer(kind, layers, bias, bf, bidir)
    xs = [steps, IN] if n is None else ([n, steps, IN] if bf else [steps, n, IN])
    x = randn(*xs).requires_grad_()
    hs = [layers * (2 if bidir else 1), HID] if n is None else [layers * (2 if bidir else 1), n, HID]
    h0 = randn(*hs).requires_grad_() if states else None
    c0 = randn(*hs).requires_grad_() if states and kind == "lstm" else None
    if kind == "lstm":
        y, (hn, cn) = m(x, (h0, c0)) if states else m(x)
    else:
        y, hn = m(x, h0) if states else m(x)
        cn = None
    loss_of([y, hn] + ([cn] if cn is not None else [])).backward()
    write(out, name, kind, layers, bias, bf, bidir, m, x, h0, c0, y, hn, cn)


def main():
    out = sys.stdout
    header(out, "torch.nn's recurrent cells and layers in f64; gradients of sum(out * u1) + sum(h_n * u2) + "
                "sum(c_n * u3) (a cell: h' and c').",
           "{name, kind, num_layers, bias, batch_first, bidirectional, x shape, x, h0 shape ({}: none), h0, c0, "
           "params {name, shape, values}, out shape, out, h_n (cells: none), c_n (LSTMCell: c'), dx, dh0, dc0, "
           "h_n shape, param grads {name, shape, values}}")
    for c in CELL_CASES:
        cell_case(out, *c)
    for c in LAYER_CASES:
        layer_case(out, *c)


if __name__ == "__main__":
    main()

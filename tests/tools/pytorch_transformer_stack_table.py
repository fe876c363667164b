#!/usr/bin/env python3
"""Prints tests/pytorch_transformer_stack_table.inc: torch.nn's TransformerDecoderLayer,
TransformerEncoder, TransformerDecoder and Transformer in f64 (dropout 0), the reference of
test_transformer_stack. Run with Debian's python3-torch (1.13):
    /usr/bin/python3 tests/tools/pytorch_transformer_stack_table.py > tests/pytorch_transformer_stack_table.inc
Each module's parameters are perturbed (so that the stacks' copies differ and no LayerNorm is the
identity) and exported by name; each case records the output and the gradients of sum(out * u)
(u = 1, 2, 3, ...) with respect to both inputs."""
import sys

import torch

from cpp_literals import lits
from torch_tables import header, weights_for

gen = torch.Generator().manual_seed(23)


def randn(*shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


def shape(t):
    return "{" + ", ".join(str(d) for d in t.shape) + "}"


def causal(n):
    return torch.triu(torch.full((n, n), float("-inf"), dtype=torch.float64), 1)


def padding(n, length, hidden):
    """A key padding mask [n, length] (true: ignore) hiding the last `hidden` positions of batch 0."""
    m = torch.zeros(n, length, dtype=torch.bool)
    m[0, length - hidden:] = True
    return m


def blocked(rows, cols):
    """A bool attn mask [rows, cols] (true: ignore) hiding some pairs but never a whole row."""
    m = torch.zeros(rows, cols, dtype=torch.bool)
    for i in range(rows):
        m[i, (i + 1) % cols] = True
    return m


# (name, kind, d_model, nhead, dim_feedforward, layers, activation, batch_first, norm_first, N, La, Lb, masks)
# kind: decoder_layer (a = tgt, b = memory), encoder (a = src), decoder (a = tgt, b = memory),
# transformer (a = src, b = tgt, layers = (encoder layers, decoder layers)). masks: forward's
# keyword arguments.
CASES = [
    ("decoder_layer_post_norm_relu", "decoder_layer", 8, 2, 16, 1, "relu", False, False, 2, 4, 6,
     lambda N, T, S: {"tgt_mask": causal(T), "memory_key_padding_mask": padding(N, S, 2)}),
    ("decoder_layer_pre_norm_gelu_batch_first", "decoder_layer", 8, 2, 12, 1, "gelu", True, True, 2, 5, 3,
     lambda N, T, S: {"memory_mask": blocked(T, S), "tgt_key_padding_mask": padding(N, T, 1)}),
    ("encoder_two_layers_norm", "encoder", 8, 2, 12, 2, "relu", False, False, 2, 5, 0,
     lambda N, L, _: {"mask": causal(L), "src_key_padding_mask": padding(N, L, 1)}),
    ("decoder_two_layers_pre_norm", "decoder", 12, 3, 16, 2, "gelu", True, True, 2, 4, 5,
     lambda N, T, S: {"tgt_mask": causal(T), "memory_key_padding_mask": padding(N, S, 1)}),
    ("transformer", "transformer", 8, 2, 12, (2, 1), "relu", False, False, 2, 5, 4,
     lambda N, S, T: {"tgt_mask": torch.nn.Transformer.generate_square_subsequent_mask(T).double(),
                      "src_key_padding_mask": padding(N, S, 1)}),
]


def build(kind, d, h, ff, layers, act, bf, nf):
    opts = dict(dim_feedforward=ff, dropout=0.0, activation=act, batch_first=bf, norm_first=nf, dtype=torch.float64)
    if kind == "decoder_layer":
        return torch.nn.TransformerDecoderLayer(d, h, **opts)
    if kind == "encoder":
        return torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(d, h, **opts), layers,
                                           torch.nn.LayerNorm(d, dtype=torch.float64), enable_nested_tensor=False)
    if kind == "decoder":
        return torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(d, h, **opts), layers,
                                           torch.nn.LayerNorm(d, dtype=torch.float64))
    return torch.nn.Transformer(d, h, layers[0], layers[1], **opts)


def mask_literal(name, m):
    kind = 1 if m.dtype == torch.bool else 2
    return '{"%s", %d, %s, %s}' % (name, kind, shape(m), lits(m.double()))


def main():
    out = sys.stdout
    header(out, "Transformer decoder layers, stacks and nn.Transformer in f64 (dropout 0).",
               "{name, kind, d_model, nhead, dim_feedforward, encoder layers, decoder layers, activation, "
               "batch_first, norm_first, a shape, a, b shape, b, masks {name, 1 bool / 2 float, shape, values}, "
               "params {name, shape, values}, out, da, db}")
    for name, kind, d, h, ff, layers, act, bf, nf, N, la, lb, masks in CASES:
        m = build(kind, d, h, ff, layers, act, bf, nf)
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(p + randn(*p.shape) * 0.3)
        a = randn(*([N, la, d] if bf else [la, N, d])).requires_grad_()
        b = randn(*([N, lb, d] if bf else [lb, N, d])).requires_grad_() if lb else None
        kw = masks(N, la, lb)
        y = m(a, **kw) if kind == "encoder" else m(a, b, **kw)
        (y * weights_for(y)).sum().backward()
        enc, dec = layers if kind == "transformer" else (layers if kind == "encoder" else 0,
                                                           layers if kind != "encoder" else 0)
        params = ", ".join('{"%s", %s, %s}' % (n, shape(p), lits(p.detach())) for n, p in m.named_parameters())
        mask_list = ", ".join(mask_literal(k, v) for k, v in kw.items())
        out.write('{"%s", "%s", %d, %d, %d, %d, %d, "%s", %s, %s, %s, %s, %s, %s, {%s}, {%s}, %s, %s, %s},\n' % (
            name, kind, d, h, ff, enc, dec, act, "true" if bf else "false", "true" if nf else "false",
            shape(a), lits(a.detach()), shape(b) if b is not None else "{}", lits(b.detach()) if b is not None else "{}",
            mask_list, params, lits(y.detach()), lits(a.grad), lits(b.grad) if b is not None else "{}"))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Prints tests/pytorch_attention_table.inc: PyTorch's attention in f64, the reference of
test_transformer's parity tests. Run with Debian's python3-torch (1.13):
    /usr/bin/python3 tests/tools/pytorch_attention_table.py > tests/pytorch_attention_table.inc
torch is needed only to regenerate the table, never by the tests.

- scaled_dot_product_attention: PyTorch 1.13 has no public F.scaled_dot_product_attention, so the
  reference is the math form PyTorch 2.x documents for it, written with torch ops, with the
  "safe softmax" of PyTorch >= 2.5's math backend (a fully masked row gives zeros).
- MultiheadAttention and TransformerEncoderLayer: torch.nn's modules themselves (dropout 0), with
  their state dicts exported by name.
Every case records the outputs and the gradients of sum(out * u) with u[i] = 1 + i % 5."""
import math
import torch

from cpp_literals import lits

gen = torch.Generator().manual_seed(15)


def randn(*shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)




def shape(t):
    return "{" + ", ".join(str(d) for d in t.shape) + "}"


def weights_u(out):
    return (1 + torch.arange(out.numel(), dtype=torch.float64) % 5).reshape(out.shape)


def sdpa_ref(q, k, v, mask, causal, scale):
    L, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    p = torch.softmax(s, -1)
    p = torch.where((s == float("-inf")).all(-1, keepdim=True), torch.zeros_like(p), p)
    return p @ v


# (name, q shape, k shape, v shape, mask: None | ("bool"|"float", shape[, "full_row"]), causal, scale)
SDPA = [
    ("plain", [2, 5, 4], [2, 6, 4], [2, 6, 3], None, False, None),
    ("heads_broadcast_kv", [2, 3, 4, 8], [1, 3, 5, 8], [2, 1, 5, 2], None, False, None),
    ("scale", [3, 4], [5, 4], [5, 4], None, False, 0.7),
    ("causal_square", [2, 2, 5, 4], [2, 2, 5, 4], [2, 2, 5, 4], None, True, None),
    ("causal_rect", [1, 6, 3], [1, 4, 3], [1, 4, 2], None, True, None),
    ("bool_mask", [2, 4, 3], [2, 5, 3], [2, 5, 3], ("bool", [2, 4, 5]), False, None),
    ("bool_mask_broadcast", [2, 2, 4, 3], [2, 2, 5, 3], [2, 2, 5, 3], ("bool", [2, 1, 1, 5]), False, None),
    ("float_mask", [2, 4, 3], [2, 5, 3], [2, 5, 3], ("float", [4, 5]), False, 0.5),
    ("fully_masked_row", [2, 4, 3], [2, 5, 3], [2, 5, 4], ("bool", [2, 4, 5], "full_row"), False, None),
]


def sdpa_cases():
    print("// SDPA: {name, q shape, k shape, v shape, q, k, v, mask kind (0 none, 1 bool, 2 float), mask shape,")
    print("//  mask, is_causal, scale (0: default), out, dq, dk, dv}")
    print("#ifdef KILN_SDPA_TABLE")
    for name, qs, ks, vs, m, causal, scale in SDPA:
        q, k, v = randn(*qs).requires_grad_(), randn(*ks).requires_grad_(), randn(*vs).requires_grad_()
        mask, kind = None, 0
        if m is not None:
            if m[0] == "bool":
                mask, kind = torch.rand(m[1], generator=gen) > 0.35, 1
                mask[..., 0] = True  # no fully masked rows unless asked for
                if len(m) > 2:
                    mask[0, 1, :] = False
                    mask[1, 3, :] = False
            else:
                mask, kind = randn(*m[1]), 2
                mask[1, 2] = float("-inf")
        out = sdpa_ref(q, k, v, mask, causal, scale)
        (out * weights_u(out)).sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(q.grad).all()
        mvals = "{}" if mask is None else lits(mask.double())
        print('{"%s", %s, %s, %s, %s, %s, %s, %d, %s, %s, %s, %r, %s, %s, %s, %s},' % (
            name, shape(q), shape(k), shape(v), lits(q.detach()), lits(k.detach()), lits(v.detach()), kind,
            "{}" if mask is None else shape(mask), mvals, "true" if causal else "false", 0.0 if scale is None else scale,
            lits(out.detach()), lits(q.grad), lits(k.grad), lits(v.grad)))
    print("#endif")


# (name, E, H, bias, batch_first, self-attention, need_weights, average, L, S, N (0: unbatched),
#  key_padding_mask: None | "bool" | "float", attn_mask: None | ("bool"|"float", "2d"|"3d"))
MHA = [
    ("self_seq_first", 8, 2, True, False, True, True, True, 5, 5, 3, None, None),
    ("self_batch_first", 8, 2, True, True, True, True, True, 5, 5, 3, None, None),
    ("cross_batch_first_per_head", 12, 3, True, True, False, True, False, 4, 6, 2, None, None),
    ("no_bias_no_weights", 8, 4, False, False, False, False, True, 3, 4, 2, None, None),
    ("unbatched", 6, 2, True, False, False, True, True, 4, 3, 0, None, None),
    ("padding_bool", 8, 2, True, True, True, True, True, 5, 5, 3, "bool", None),
    ("causal_float_2d", 8, 2, True, False, True, True, True, 5, 5, 2, None, ("float", "2d")),
    ("bool_3d_and_padding", 8, 2, True, True, True, True, False, 4, 4, 2, "bool", ("bool", "3d")),
    ("bool_padding_float_3d", 8, 2, True, True, True, True, True, 4, 4, 2, "bool", ("float", "3d")),
    ("float_padding", 8, 2, True, False, True, True, True, 4, 4, 2, "float", None),
]


def mha_cases():
    print("// MHA: {name, E, H, bias, batch_first, self-attention, need_weights, average_attn_weights,")
    print("//  query shape, key shape, params {name, shape, values}, query, key, value,")
    print("//  key_padding_mask kind, shape, values, attn_mask kind, shape, values, out, weights, dquery, dkey,")
    print("//  d(in_proj_weight)} (kinds: 0 none, 1 bool, 2 float; bool masks mark positions to ignore)")
    print("#ifdef KILN_MHA_TABLE")
    for name, E, H, bias, bf, self_attn, need, avg, L, S, N, kpm, am in MHA:
        mha = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=bf, dtype=torch.float64)
        with torch.no_grad():
            for p in mha.parameters():
                p.copy_(randn(*p.shape) * 0.5)
        qshape = [L, E] if N == 0 else ([N, L, E] if bf else [L, N, E])
        kshape = [S, E] if N == 0 else ([N, S, E] if bf else [S, N, E])
        q = randn(*qshape).requires_grad_()
        k = q if self_attn else randn(*kshape).requires_grad_()
        v = q if self_attn else randn(*kshape)
        kp = None
        kpk = 0
        if kpm is not None:
            kshape2 = [S] if N == 0 else [N, S]
            if kpm == "bool":
                kp, kpk = torch.rand(kshape2, generator=gen) > 0.7, 1
                kp[..., 0] = False
            else:
                kp, kpk = randn(*kshape2), 2
        amask, amk = None, 0
        if am is not None:
            ashape = [L, S] if am[1] == "2d" else [max(N, 1) * H, L, S]
            if am[0] == "float":
                amask, amk = torch.triu(torch.full(ashape, float("-inf"), dtype=torch.float64), 1) + randn(*ashape) * 0.1, 2
            else:
                amask, amk = torch.rand(ashape, generator=gen) > 0.6, 1
                amask[..., 0] = False
        out, w = mha(q, k, v, key_padding_mask=kp, need_weights=need, attn_mask=amask, average_attn_weights=avg)
        (out * weights_u(out)).sum().backward()
        assert torch.isfinite(out).all(), name
        params = ", ".join('{"%s", %s, %s}' % (n, shape(p), lits(p.detach())) for n, p in mha.named_parameters())
        print('{"%s", %d, %d, %s, %s, %s, %s, %s, %s, %s, {%s}, %s, %s, %s, %d, %s, %s, %d, %s, %s, %s, %s, %s, %s, %s},' % (
            name, E, H, *("true" if b else "false" for b in (bias, bf, self_attn, need, avg)), shape(q),
            shape(k), params, lits(q.detach()), lits(k.detach()), lits(v.detach()),
            kpk, "{}" if kp is None else shape(kp), "{}" if kp is None else lits(kp.double()),
            amk, "{}" if amask is None else shape(amask), "{}" if amask is None else lits(amask.double()),
            lits(out.detach()), "{}" if w is None else lits(w.detach()), lits(q.grad),
            "{}" if self_attn else lits(k.grad), lits(mha.in_proj_weight.grad)))
    print("#endif")


# (name, d_model, nhead, dim_feedforward, activation, batch_first, norm_first, causal mask, N, L)
LAYERS = [
    ("post_norm_relu", 8, 2, 16, "relu", False, False, False, 2, 5),
    ("pre_norm_gelu_batch_first_causal", 8, 2, 16, "gelu", True, True, True, 2, 5),
    ("post_norm_gelu_causal", 12, 3, 20, "gelu", True, False, True, 3, 4),
]


def layer_cases():
    print("// Encoder layers: {name, d_model, nhead, dim_feedforward, activation, batch_first, norm_first, causal,")
    print("//  src shape, params {name, shape, values}, src, out, dsrc}")
    print("#ifdef KILN_LAYER_TABLE")
    for name, d, h, ff, act, bf, nf, causal, N, L in LAYERS:
        layer = torch.nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, activation=act, batch_first=bf, norm_first=nf,
                                                 dtype=torch.float64)
        with torch.no_grad():
            for p in layer.parameters():
                p.copy_(p + randn(*p.shape) * 0.3)
        src = randn(*([N, L, d] if bf else [L, N, d])).requires_grad_()
        mask = torch.triu(torch.full((L, L), float("-inf"), dtype=torch.float64), 1) if causal else None
        out = layer(src, src_mask=mask)
        (out * weights_u(out)).sum().backward()
        params = ", ".join('{"%s", %s, %s}' % (n, shape(p), lits(p.detach())) for n, p in layer.named_parameters())
        print('{"%s", %d, %d, %d, "%s", %s, %s, %s, %s, {%s}, %s, %s, %s},' % (
            name, d, h, ff, act, "true" if bf else "false", "true" if nf else "false", "true" if causal else "false",
            shape(src), params, lits(src.detach()), lits(out.detach()), lits(src.grad)))
    print("#endif")


def main():
    print("// Generated by tests/tools/pytorch_attention_table.py with PyTorch " + torch.__version__ + ": do not edit.")
    sdpa_cases()
    mha_cases()
    layer_cases()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_vision.cpp, values (and indices) and gradients of d(sum(out * u))
with u = 1, 2, 3, ... (in the output's dtype), all in f64, into tests/pytorch_vision_table.inc (one file, several
tables, each opened by its own `#if defined(...)` section name):
    KILN_MAX_POOL_INDICES  max_pool1d/2d(..., return_indices=True): values, indices, input grad
    KILN_MAX_UNPOOL        max_unpool1d/2d (output_size, repeated indices): values, input grad
    KILN_ADAPTIVE_MAX      adaptive_max_pool1d/2d(..., return_indices=True): values, indices, input grad
    KILN_LP_POOL           lp_pool1d/2d (norm_type, stride, ceil_mode): values, input grad
    KILN_SHUFFLE           pixel_shuffle, pixel_unshuffle, channel_shuffle: values, input grad
    KILN_FOLD              unfold and fold (kernel, dilation, padding, stride): values, input grad
    KILN_EMBEDDING         embedding (padding_idx, max_norm, norm_type): values, renormed weight, weight grad
    KILN_EMBEDDING_BAG     embedding_bag (modes, offsets, include_last_offset, per_sample_weights, padding_idx,
                           2-d input): values, weight grad, per_sample_weights grad
    KILN_CONV3D            conv3d (stride, padding, dilation, groups, unbatched): values, input, weight and bias grads
    KILN_POOL3D            max_pool3d and avg_pool3d (ceil_mode, padding, dilation, count_include_pad,
                           divisor_override, ties, unbatched): values, input grad
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_vision_table.py tests
torch is needed only to regenerate the table, never by the tests."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import cbool, ints, lits  # noqa: E402
from torch_tables import header, weights_for  # noqa: E402

F64 = torch.float64


def ties(gen, shape):
    """Small integers as f64: many ties in every window."""
    return torch.randint(-2, 3, shape, generator=gen).to(F64)


def normal(gen, shape):
    return torch.randn(shape, generator=gen, dtype=F64)


# (name, input shape, kernel, stride (None: kernel), padding, dilation, ceil_mode, tied values); the kernel's
# length says 1-d or 2-d.
MAX_POOL = [
    ("2d_3x3_s2", [2, 2, 7, 6], [3, 3], [2, 2], [0, 0], [1, 1], False, False),
    ("2d_ties", [1, 3, 5, 5], [2, 2], [1, 1], [0, 0], [1, 1], False, True),
    ("2d_ties_padding_ceil", [2, 2, 7, 5], [3, 2], [2, 2], [1, 1], [1, 1], True, True),
    ("2d_dilation", [1, 2, 8, 9], [2, 3], [1, 2], [1, 1], [2, 2], False, False),
    ("2d_default_stride_ceil_odd", [1, 1, 7, 7], [2, 2], None, [0, 0], [1, 1], True, False),
    ("2d_tiles", [2, 1, 4, 6], [2, 3], None, [0, 0], [1, 1], False, True),
    ("2d_unbatched", [2, 5, 6], [3, 3], [2, 1], [1, 0], [1, 1], False, True),
    ("1d_k3_s2_ceil", [2, 3, 8], [3], [2], [1], [1], True, True),
    ("1d_dilation", [1, 2, 11], [3], [1], [0], [3], False, False),
    ("1d_unbatched", [3, 9], [2], None, [1], [1], False, True),
]

# (name, pooled input shape, kernel, stride (None), padding, output_size (None), repeat (indices all equal))
UNPOOL = [
    ("2d_default", [2, 2, 6, 6], [2, 2], None, [0, 0], None, False),
    ("2d_output_size", [1, 2, 7, 7], [2, 2], [2, 2], [0, 0], [7, 7], False),
    ("2d_output_size_full", [1, 1, 5, 7], [3, 3], [2, 2], [1, 1], [1, 1, 5, 7], False),
    ("2d_overlap", [1, 2, 5, 5], [3, 3], [1, 1], [0, 0], None, False),
    ("2d_unbatched", [2, 6, 4], [2, 2], None, [0, 0], None, False),
    ("2d_repeated_indices", [1, 1, 4, 4], [2, 2], None, [0, 0], None, True),
    ("1d_default", [2, 2, 9], [3], [2], [1], None, False),
    ("1d_output_size", [1, 3, 8], [2], None, [0], [9], False),
    ("1d_unbatched", [2, 8], [2], None, [0], None, False),
]

# (name, input shape, output size, tied values); its length says 1-d or 2-d.
ADAPTIVE = [
    ("2d_5x7_to_3x4", [2, 2, 5, 7], [3, 4], False),
    ("2d_ties_7x5_to_4x3", [1, 3, 7, 5], [4, 3], True),
    ("2d_upsample", [1, 2, 3, 4], [5, 7], True),
    ("2d_global", [2, 2, 5, 3], [1, 1], False),
    ("2d_unbatched", [2, 8, 6], [3, 4], True),
    ("1d_7_to_3", [2, 2, 7], [3], True),
    ("1d_unbatched_10_to_4", [3, 10], [4], False),
]

# (name, input shape, norm_type, kernel, stride (None), ceil_mode, positive input)
LP = [
    ("2d_p2", [2, 2, 6, 7], 2.0, [2, 3], None, False, False),
    ("2d_p3_ceil", [1, 2, 7, 7], 3.0, [3, 3], [2, 2], True, True),
    ("2d_p1_5", [1, 2, 5, 6], 1.5, [2, 2], [1, 2], False, True),
    ("2d_p1_mixed_signs", [1, 2, 4, 6], 1.0, [2, 2], None, False, False),
    ("2d_unbatched_ceil", [2, 5, 5], 2.0, [2, 2], None, True, False),
    ("1d_p2", [2, 3, 9], 2.0, [3], [2], False, False),
    ("1d_p4_ceil", [1, 2, 8], 4.0, [3], None, True, True),
    ("1d_unbatched", [3, 7], 2.0, [2], [1], False, True),
]

# (name, op, input shape, factor)
SHUFFLE = [
    ("pixel_shuffle_2", "pixel_shuffle", [2, 8, 3, 2], 2),
    ("pixel_shuffle_3_unbatched", "pixel_shuffle", [9, 2, 3], 3),
    ("pixel_shuffle_5d", "pixel_shuffle", [2, 2, 4, 2, 1], 2),
    ("pixel_unshuffle_2", "pixel_unshuffle", [2, 3, 4, 6], 2),
    ("pixel_unshuffle_3_unbatched", "pixel_unshuffle", [2, 3, 6], 3),
    ("channel_shuffle_3", "channel_shuffle", [2, 6, 2, 3], 3),
    ("channel_shuffle_2_1d", "channel_shuffle", [1, 4, 5], 2),
]

# (name, op, input shape, output_size (fold), kernel, dilation, padding, stride)
FOLD = [
    ("unfold_2x2", "unfold", [2, 3, 4, 5], None, [2, 2], [1, 1], [0, 0], [1, 1]),
    ("unfold_all", "unfold", [1, 2, 7, 6], None, [3, 2], [2, 1], [1, 2], [2, 3]),
    ("unfold_unbatched", "unfold", [2, 5, 5], None, [2, 3], [1, 1], [1, 0], [2, 1]),
    ("fold_2x2", "fold", [2, 12, 12], [4, 5], [2, 2], [1, 1], [0, 0], [1, 1]),
    ("fold_all", "fold", [1, 12, 9], [7, 6], [3, 2], [2, 1], [1, 2], [2, 3]),
    ("fold_unbatched", "fold", [12, 9], [5, 5], [2, 3], [1, 1], [1, 0], [2, 1]),
    ("fold_stride_gaps", "fold", [1, 4, 4], [6, 7], [2, 2], [1, 1], [0, 0], [3, 4]),
]

# (name, input indices, num_embeddings, dim, padding_idx, max_norm, norm_type)
EMBED = [
    ("plain_2d", [[1, 4, 2], [0, 4, 3]], 5, 3, None, None, 2.0),
    ("padding", [1, 2, 2, 0, 2], 4, 3, 2, None, 2.0),
    ("negative_padding", [[3], [1], [0]], 4, 2, -1, None, 2.0),
    ("max_norm", [0, 2, 2, 4], 5, 4, None, 1.0, 2.0),
    ("max_norm_p1_padding", [1, 3, 0], 4, 3, 0, 0.5, 1.0),
    ("max_norm_inf", [[2, 1], [1, 1]], 3, 3, None, 0.7, float("inf")),
]

# (name, indices, offsets (None: 2-d input), num_embeddings, dim, mode, per_sample_weights, include_last_offset,
#  padding_idx, max_norm)
BAG = [
    ("sum_offsets", [1, 2, 4, 5, 4, 3, 2, 9], [0, 3, 5], 10, 3, "sum", False, False, None, None),
    ("mean_offsets_empty_bag", [1, 2, 4, 5, 4], [0, 2, 2, 4], 6, 3, "mean", False, False, None, None),
    ("max_offsets", [1, 2, 4, 5, 4, 3, 2, 0], [0, 3, 4, 4], 6, 4, "max", False, False, None, None),
    ("sum_weights", [1, 2, 4, 5, 4, 3], [0, 2, 5], 6, 3, "sum", True, False, None, None),
    ("sum_include_last", [1, 2, 4, 5, 4, 3], [0, 2, 6], 6, 3, "sum", False, True, None, None),
    ("mean_include_last_full", [1, 2, 4, 5, 4, 3], [0, 1, 6], 6, 2, "mean", False, True, None, None),
    ("max_include_last", [1, 2, 4, 5, 0], [0, 3, 5], 6, 3, "max", False, True, None, None),
    ("mean_padding", [1, 2, 2, 5, 2, 3], [0, 3, 4], 6, 3, "mean", False, False, 2, None),
    ("max_padding_only_bag", [1, 2, 2, 5], [0, 2, 3], 6, 3, "max", False, False, 2, None),
    ("sum_weights_padding", [0, 2, 1, 0], [0, 2], 3, 2, "sum", True, False, 0, None),
    ("2d_mean", [[1, 2, 3], [4, 4, 0]], None, 5, 3, "mean", False, False, None, None),
    ("2d_max", [[1, 2, 3], [4, 4, 0]], None, 5, 3, "max", False, False, None, None),
    ("2d_sum_weights", [[1, 2], [0, 4], [3, 3]], None, 5, 2, "sum", True, False, None, None),
    ("max_norm_sum", [0, 1, 3, 1], [0, 2], 4, 3, "sum", False, False, None, 1.0),
]

# (name, input shape, weight shape [out, in/groups, kd, kh, kw], bias, stride, padding, dilation, groups)
CONV3D = [
    ("plain", [2, 2, 4, 5, 4], [3, 2, 2, 3, 2], True, [1, 1, 1], [0, 0, 0], [1, 1, 1], 1),
    ("stride_padding", [1, 2, 5, 6, 5], [2, 2, 3, 3, 3], True, [2, 1, 2], [1, 1, 0], [1, 1, 1], 1),
    ("dilation_groups", [1, 4, 6, 5, 5], [4, 2, 2, 2, 3], False, [1, 2, 1], [0, 1, 1], [2, 1, 2], 2),
    ("unbatched", [2, 3, 4, 4], [2, 2, 2, 2, 2], True, [1, 1, 1], [1, 0, 1], [1, 1, 1], 1),
]

# (name, op, input shape, kernel, stride (None), padding, dilation, ceil_mode, count_include_pad, divisor_override,
#  tied values)
POOL3D = [
    ("max_plain", "max", [2, 2, 4, 4, 5], [2, 2, 2], None, [0, 0, 0], [1, 1, 1], False, True, None, False),
    ("max_ties_padding_ceil", "max", [1, 2, 5, 6, 5], [3, 2, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], True, True, None,
     True),
    ("max_dilation", "max", [1, 1, 7, 6, 6], [2, 3, 2], [1, 2, 2], [1, 1, 0], [3, 1, 2], False, True, None, False),
    ("max_unbatched_ties", "max", [2, 4, 4, 4], [2, 2, 2], [1, 1, 1], [0, 0, 0], [1, 1, 1], False, True, None, True),
    ("avg_plain", "avg", [2, 2, 4, 4, 6], [2, 2, 3], None, [0, 0, 0], [1, 1, 1], False, True, None, False),
    ("avg_padding_ceil", "avg", [1, 2, 5, 6, 7], [3, 2, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], True, True, None, False),
    ("avg_exclude_pad_ceil", "avg", [1, 2, 5, 6, 7], [3, 2, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], True, False, None,
     False),
    ("avg_divisor_override", "avg", [1, 1, 4, 5, 5], [2, 3, 2], [2, 1, 2], [1, 1, 1], [1, 1, 1], True, True, 5, False),
    ("avg_unbatched", "avg", [2, 5, 4, 4], [3, 2, 2], [1, 2, 1], [1, 0, 1], [1, 1, 1], False, False, None, False),
]


def opt_ints(v):
    return "{}" if v is None else ints(v)


def max_pool_table(out):
    header(out, "{name, input shape, input, kernel, stride ({}: the kernel), padding, dilation, ceil_mode,",
           " output shape, output, indices, input grad}")
    gen = torch.Generator().manual_seed(51)
    for name, xs, k, s, p, d, ceil, tied in MAX_POOL:
        x = (ties(gen, xs) if tied else normal(gen, xs)).requires_grad_()
        f = F.max_pool1d if len(k) == 1 else F.max_pool2d
        kk = k[0] if len(k) == 1 else k
        ss = None if s is None else (s[0] if len(s) == 1 else s)
        pp = p[0] if len(p) == 1 else p
        dd = d[0] if len(d) == 1 else d
        y, i = f(x, kk, ss, pp, dd, ceil_mode=ceil, return_indices=True)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(k), opt_ints(s), ints(p), ints(d), cbool(ceil), ints(y.shape),
            lits(y.detach()), ints(i.flatten().tolist()), lits(x.grad)))


def unpool_table(out):
    header(out, "{name, input shape, input, indices, kernel, stride ({}: the kernel), padding,",
           " output_size ({}: default), output shape, output, input grad}")
    gen = torch.Generator().manual_seed(52)
    for name, xs, k, s, p, size, repeat in UNPOOL:
        two = len(k) == 2
        src = normal(gen, xs)
        kk, ss, pp = (k, s, p) if two else (k[0], None if s is None else s[0], p[0])
        v, i = (F.max_pool2d if two else F.max_pool1d)(src, kk, ss, pp, return_indices=True)
        if repeat:
            i = torch.zeros_like(i)
        x = normal(gen, list(v.shape)).requires_grad_()
        y = (F.max_unpool2d if two else F.max_unpool1d)(x, i, kk, ss, pp, size)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(v.shape), lits(x.detach()), ints(i.flatten().tolist()), ints(k), opt_ints(s), ints(p),
            opt_ints(size), ints(y.shape), lits(y.detach()), lits(x.grad)))


def adaptive_table(out):
    header(out, "{name, input shape, input, output size,", " output shape, output, indices, input grad}")
    gen = torch.Generator().manual_seed(53)
    for name, xs, size, tied in ADAPTIVE:
        x = (ties(gen, xs) if tied else normal(gen, xs)).requires_grad_()
        if len(size) == 1:
            y, i = F.adaptive_max_pool1d(x, size[0], return_indices=True)
        else:
            y, i = F.adaptive_max_pool2d(x, size, return_indices=True)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(size), ints(y.shape), lits(y.detach()),
            ints(i.flatten().tolist()), lits(x.grad)))


def lp_table(out):
    header(out, "{name, input shape, input, norm_type, kernel, stride ({}: the kernel), ceil_mode,",
           " output shape, output, input grad}")
    gen = torch.Generator().manual_seed(54)
    for name, xs, p, k, s, ceil, positive in LP:
        x = normal(gen, xs)
        x = (x.abs() + 0.1 if positive else x).requires_grad_()
        if len(k) == 1:
            y = F.lp_pool1d(x, p, k[0], None if s is None else s[0], ceil)
        else:
            y = F.lp_pool2d(x, p, k, s, ceil)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), repr(p), ints(k), opt_ints(s), cbool(ceil), ints(y.shape),
            lits(y.detach()), lits(x.grad)))


def shuffle_table(out):
    header(out, "{name, op, input shape, input, factor or groups,", " output shape, output, input grad ({}: none in PyTorch 1.13)}")
    gen = torch.Generator().manual_seed(55)
    for name, op, xs, r in SHUFFLE:
        x = normal(gen, xs).requires_grad_()
        y = getattr(F, op)(x, r)
        if op != "channel_shuffle":  # PyTorch 1.13 has no derivative for it: {}
            (y * weights_for(y)).sum().backward()
        out.write('{"%s", "%s", %s, %s, %d, %s, %s, %s},\n' % (
            name, op, ints(xs), lits(x.detach()), r, ints(y.shape), lits(y.detach()),
            "{}" if x.grad is None else lits(x.grad)))


def fold_table(out):
    header(out, "{name, op, input shape, input, output_size ({}: unfold), kernel, dilation, padding, stride,",
           " output shape, output, input grad}")
    gen = torch.Generator().manual_seed(56)
    for name, op, xs, size, k, d, p, s in FOLD:
        x = normal(gen, xs).requires_grad_()
        if op == "unfold":
            y = F.unfold(x, k, d, p, s)
        else:
            y = F.fold(x, size, k, d, p, s)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", "%s", %s, %s, %s, %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, op, ints(xs), lits(x.detach()), opt_ints(size), ints(k), ints(d), ints(p), ints(s), ints(y.shape),
            lits(y.detach()), lits(x.grad)))


def embed_table(out):
    header(out, "{name, indices shape, indices, weight shape, weight, padding_idx (has, value), max_norm (< 0: none),",
           " norm_type, output shape, output, weight after the call, weight grad}")
    gen = torch.Generator().manual_seed(57)
    for name, idx, num, dim, pad, max_norm, norm_type in EMBED:
        i = torch.tensor(idx)
        w = normal(gen, [num, dim])
        w0 = w.clone()
        w.requires_grad_()
        y = F.embedding(i, w, pad, max_norm, norm_type)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %d, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(i.shape), ints(i.flatten().tolist()), ints(w.shape), lits(w0), cbool(pad is not None),
            pad or 0, repr(-1.0 if max_norm is None else max_norm), "kInf" if norm_type == float("inf") else
            repr(norm_type), ints(y.shape), lits(y.detach()), lits(w.detach()), lits(w.grad)))


def bag_table(out):
    header(out, "{name, indices shape, indices, offsets ({}: a 2-d input), weight shape, weight, mode,",
           " per_sample_weights ({}: none), include_last_offset, padding_idx (has, value), max_norm (< 0: none),"
           " output shape, output, weight grad, per_sample_weights grad}")
    gen = torch.Generator().manual_seed(58)
    for name, idx, offs, num, dim, mode, weighted, last, pad, max_norm in BAG:
        i = torch.tensor(idx)
        o = None if offs is None else torch.tensor(offs)
        w = normal(gen, [num, dim])
        w0 = w.clone()
        w.requires_grad_()
        psw = normal(gen, list(i.shape)).requires_grad_() if weighted else None
        y = F.embedding_bag(i, w, o, max_norm, 2, False, mode, False, psw, last, pad)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, "%s", %s, %s, %s, %d, %s, %s, %s, %s, %s},\n' % (
            name, ints(i.shape), ints(i.flatten().tolist()), opt_ints(offs), ints(w.shape), lits(w0), mode,
            lits(psw.detach()) if weighted else "{}", cbool(last), cbool(pad is not None), pad or 0,
            repr(-1.0 if max_norm is None else max_norm), ints(y.shape), lits(y.detach()), lits(w.grad),
            lits(psw.grad) if weighted else "{}"))


def conv3d_table(out):
    header(out, "{name, input shape, input, weight shape, weight, bias ({}: none), stride, padding, dilation, groups,",
           " output shape, output, input grad, weight grad, bias grad}")
    gen = torch.Generator().manual_seed(59)
    for name, xs, ws, with_bias, st, p, d, g in CONV3D:
        x = normal(gen, xs).requires_grad_()
        w = normal(gen, ws).requires_grad_()
        b = normal(gen, [ws[0]]).requires_grad_() if with_bias else None
        y = F.conv3d(x, w, b, st, p, d, g)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s, %s, %d, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(ws), lits(w.detach()), lits(b.detach()) if with_bias else "{}",
            ints(st), ints(p), ints(d), g, ints(y.shape), lits(y.detach()), lits(x.grad), lits(w.grad),
            lits(b.grad) if with_bias else "{}"))


def pool3d_table(out):
    header(out, "{name, op, input shape, input, kernel, stride ({}: the kernel), padding, dilation, ceil_mode,",
           " count_include_pad, divisor_override (0: none), output shape, output, input grad}")
    gen = torch.Generator().manual_seed(60)
    for name, op, xs, k, st, p, d, ceil, include, divisor, tied in POOL3D:
        x = (ties(gen, xs) if tied else normal(gen, xs)).requires_grad_()
        if op == "max":
            y = F.max_pool3d(x, k, st, p, d, ceil)
        else:
            y = F.avg_pool3d(x, k, st, p, ceil, include, divisor)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", "%s", %s, %s, %s, %s, %s, %s, %s, %s, %d, %s, %s, %s},\n' % (
            name, op, ints(xs), lits(x.detach()), ints(k), opt_ints(st), ints(p), ints(d), cbool(ceil), cbool(include),
            divisor or 0, ints(y.shape), lits(y.detach()), lits(x.grad)))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    with open(os.path.join(folder, "pytorch_vision_table.inc"), "w") as out:
        for section, write in [("KILN_MAX_POOL_INDICES", max_pool_table), ("KILN_MAX_UNPOOL", unpool_table),
                               ("KILN_ADAPTIVE_MAX", adaptive_table), ("KILN_LP_POOL", lp_table),
                               ("KILN_SHUFFLE", shuffle_table), ("KILN_FOLD", fold_table),
                               ("KILN_EMBEDDING", embed_table), ("KILN_EMBEDDING_BAG", bag_table),
                               ("KILN_CONV3D", conv3d_table), ("KILN_POOL3D", pool3d_table)]:
            out.write("#if defined(%s)\n" % section)
            write(out)
            out.write("#endif\n")


if __name__ == "__main__":
    main()

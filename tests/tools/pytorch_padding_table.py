#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_padding.cpp, values and gradients of d(sum(out * u)) with
u = 1, 2, 3, ... (f64):
    tests/pytorch_padding_table.inc       F.pad in each mode (reflect, replicate, circular, constant; 1, 2 and 3
                                          padded dims, batched or not, negative amounts)
    tests/pytorch_conv_pad_mode_table.inc  Conv1d/2d/3d with each padding_mode (explicit and "same" padding,
                                          stride, dilation, groups): output, input, weight and bias gradients
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_padding_table.py tests
torch is needed only to regenerate the tables, never by the tests."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import ints, lits  # noqa: E402
from torch_tables import header, weights_for  # noqa: E402

F64 = torch.float64

# (name, mode, input shape, pads (torch order: last dim first), value)
PAD = [
    ("reflect_1d", "reflect", [2, 3, 5], [2, 3], 0.0),
    ("reflect_1d_unbatched_crop", "reflect", [3, 5], [1, -2], 0.0),
    ("reflect_1d_crop_start_past_pad", "reflect", [1, 2, 4], [-2, 3], 0.0),
    ("reflect_1d_crop_to_one", "reflect", [1, 1, 4], [-4, 1], 0.0),
    ("reflect_1d_none", "reflect", [2, 2, 3], [0, 0], 0.0),
    ("reflect_1d_most", "reflect", [1, 2, 4], [3, 3], 0.0),
    ("reflect_2d", "reflect", [1, 2, 4, 5], [1, 2, 3, 0], 0.0),
    ("reflect_2d_unbatched_mixed", "reflect", [2, 3, 4], [2, 1, -1, 2], 0.0),
    ("reflect_3d", "reflect", [1, 1, 3, 4, 3], [1, 2, 2, 1, 0, 2], 0.0),
    ("reflect_3d_unbatched", "reflect", [2, 3, 3, 4], [1, 1, 1, 1, 1, 1], 0.0),
    ("replicate_1d", "replicate", [2, 3, 5], [2, 3], 0.0),
    ("replicate_1d_past_extent", "replicate", [1, 2, 3], [5, 5], 0.0),
    ("replicate_1d_crop_end_past_pad", "replicate", [1, 1, 4], [3, -3], 0.0),
    ("replicate_1d_crop_start_past_extent", "replicate", [1, 1, 4], [-5, 4], 0.0),
    ("replicate_1d_unbatched", "replicate", [3, 4], [1, -1], 0.0),
    ("replicate_2d", "replicate", [1, 2, 3, 4], [2, 1, 0, 3], 0.0),
    ("replicate_2d_unbatched_crop", "replicate", [2, 3, 4], [-1, 2, 1, -1], 0.0),
    ("replicate_3d", "replicate", [1, 2, 2, 3, 2], [1, 0, 2, 1, 1, 1], 0.0),
    ("replicate_3d_unbatched", "replicate", [1, 2, 3, 2], [0, 2, 1, 0, 2, 1], 0.0),
    ("circular_1d", "circular", [2, 2, 4], [1, 2], 0.0),
    ("circular_1d_whole_extent", "circular", [1, 2, 4], [4, 0], 0.0),
    ("circular_1d_crop_then_wrap", "circular", [1, 2, 4], [-1, 2], 0.0),
    ("circular_1d_crop_both", "circular", [1, 1, 4], [-1, -2], 0.0),
    ("circular_1d_crop_to_empty", "circular", [1, 2, 4], [-3, -1], 0.0),
    ("circular_2d", "circular", [1, 2, 3, 4], [1, 2, 2, 1], 0.0),
    ("circular_2d_mixed", "circular", [2, 1, 3, 4], [-1, 1, 3, 0], 0.0),
    ("circular_3d", "circular", [1, 1, 2, 3, 4], [1, 1, 2, 0, 1, 1], 0.0),
    ("constant_mode", "constant", [2, 3], [1, -1], 2.5),
    ("constant_mode_three_dims", "constant", [2, 2, 3], [1, 0, 0, 1, 1, 1], -1.0),
]

# (name, spatial dims, input shape, out channels, kernel, stride, padding (int or "same"/"valid"), dilation, groups,
#  bias, padding_mode)
CONV = [
    ("conv1d_reflect", 1, [2, 2, 7], 3, 3, 1, 1, 1, 1, True, "reflect"),
    ("conv1d_replicate_stride_dilation", 1, [1, 2, 9], 2, 3, 2, 2, 2, 1, True, "replicate"),
    ("conv1d_circular_groups", 1, [2, 4, 6], 4, 3, 1, 2, 1, 2, False, "circular"),
    ("conv1d_reflect_same_even_kernel", 1, [1, 2, 6], 2, 4, 1, "same", 1, 1, True, "reflect"),
    ("conv1d_circular_same_dilation", 1, [1, 1, 7], 2, 3, 1, "same", 2, 1, True, "circular"),
    ("conv1d_replicate_valid", 1, [1, 2, 5], 1, 2, 1, "valid", 1, 1, True, "replicate"),
    ("conv1d_replicate_unbatched", 1, [2, 6], 3, 3, 1, 1, 1, 1, True, "replicate"),
    ("conv1d_zeros", 1, [1, 2, 6], 2, 3, 1, 1, 1, 1, True, "zeros"),
    ("conv2d_reflect", 2, [1, 2, 5, 6], 3, 3, 1, 1, 1, 1, True, "reflect"),
    ("conv2d_replicate_stride", 2, [2, 2, 5, 5], 2, 3, 2, 2, 1, 1, True, "replicate"),
    ("conv2d_circular", 2, [1, 2, 4, 5], 2, [2, 3], 1, [1, 2], 1, 2, True, "circular"),
    ("conv2d_reflect_same_even", 2, [1, 1, 5, 6], 2, [2, 4], 1, "same", [2, 1], 1, False, "reflect"),
    ("conv2d_replicate_unbatched", 2, [2, 4, 4], 2, 3, 1, 1, 1, 1, True, "replicate"),
    ("conv3d_reflect", 3, [1, 2, 3, 4, 4], 2, 3, 1, 1, 1, 1, True, "reflect"),
    ("conv3d_replicate_stride", 3, [1, 1, 4, 4, 5], 2, 2, 2, [1, 0, 1], 1, 1, True, "replicate"),
    ("conv3d_circular", 3, [2, 2, 3, 3, 4], 2, 3, 1, [1, 1, 2], 1, 2, True, "circular"),
]


def pad_table(out):
    header(out, "{name, mode, input shape, input, pads (last dim first), value,", " output shape, output, input grad}")
    gen = torch.Generator().manual_seed(31)
    for name, mode, xs, pads, value in PAD:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        y = F.pad(x, pads, mode=mode, value=value) if mode == "constant" else F.pad(x, pads, mode=mode)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", "%s", %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, mode, ints(xs), lits(x.detach()), ints(pads), repr(float(value)), ints(y.shape), lits(y.detach()),
            lits(x.grad)))


def tup(v, n):
    return ints(v if isinstance(v, list) else [v] * n)


def conv_table(out):
    header(out, "{name, dims, input shape, input, out channels, kernel, stride, padding ({}: \"same\", {-1}: \"valid\"),",
           " dilation, groups, padding_mode, weight shape, weight, bias ({}: none), output shape, output, input grad,"
           " weight grad, bias grad}")
    gen = torch.Generator().manual_seed(32)
    for name, d, xs, oc, k, s, p, dil, g, bias, mode in CONV:
        cls = [None, nn.Conv1d, nn.Conv2d, nn.Conv3d][d]
        ic = xs[0] if len(xs) == d + 1 else xs[1]
        m = cls(ic, oc, k, stride=s, padding=p, dilation=dil, groups=g, bias=bias, padding_mode=mode).to(F64)
        with torch.no_grad():
            m.weight.copy_(torch.randn(m.weight.shape, generator=gen, dtype=F64))
            if bias:
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen, dtype=F64))
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        y = m(x)
        (y * weights_for(y)).sum().backward()
        padding = "{}" if p == "same" else "{-1}" if p == "valid" else tup(p, d)
        out.write('{"%s", %d, %s, %s, %d, %s, %s, %s, %s, %d, "%s", %s, %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, d, ints(xs), lits(x.detach()), oc, tup(k, d), tup(s, d), padding, tup(dil, d), g, mode,
            ints(m.weight.shape), lits(m.weight.detach()), lits(m.bias.detach()) if bias else "{}", ints(y.shape),
            lits(y.detach()), lits(x.grad), lits(m.weight.grad), lits(m.bias.grad) if bias else "{}"))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    for file, write in [("pytorch_padding_table.inc", pad_table), ("pytorch_conv_pad_mode_table.inc", conv_table)]:
        with open(os.path.join(folder, file), "w") as out:
            write(out)


if __name__ == "__main__":
    main()

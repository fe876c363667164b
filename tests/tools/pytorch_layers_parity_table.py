#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_layers_parity.cpp, values and gradients of d(sum(out * u)) with
u = 1, 2, 3, ... (in the output's dtype), into tests/pytorch_layers_parity_table.inc (one file, four tables,
each opened by its own `#if defined(...)` section name):
    KILN_CONV_PADDING_MODE   conv1d and conv2d with padding "same" and "valid" (input, weight and bias grads)
    KILN_CONV_T_OUTPUT_SIZE  ConvTranspose1d/2d/3d.forward(input, output_size) (input, weight and bias grads)
    KILN_ADAPTIVE_AVG_POOL   adaptive_avg_pool1d and adaptive_avg_pool2d (input grad)
    KILN_INTERP_AREA_CUBIC   interpolate "area" and "bicubic" (size or scale_factor, align_corners,
                             recompute_scale_factor, f32 and f64; input grad)
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_layers_parity_table.py tests
torch is needed only to regenerate the table, never by the tests."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import ints, lits  # noqa: E402
from torch_tables import header, weights_for  # noqa: E402

F32, F64 = torch.float32, torch.float64

# (name, input shape, weight shape [out, in/groups, k...], bias, padding string, dilation, groups);
# the weight's rank says 1-d or 2-d.
CONV = [
    ("1d_same_odd_kernel", [2, 3, 7], [4, 3, 3], True, "same", [1], 1),
    ("1d_same_even_kernel_right_extra", [2, 2, 6], [3, 2, 4], True, "same", [1], 1),
    ("1d_same_dilation3_even", [1, 2, 9], [2, 2, 3], False, "same", [3], 1),
    ("1d_same_groups2_unbatched", [4, 5], [6, 2, 2], True, "same", [1], 2),
    ("1d_same_kernel_past_input", [1, 1, 2], [1, 1, 5], True, "same", [1], 1),
    ("1d_valid", [2, 3, 8], [2, 3, 3], True, "valid", [2], 1),
    ("2d_same_3x3", [2, 3, 5, 6], [4, 3, 3, 3], True, "same", [1, 1], 1),
    ("2d_same_even_asymmetric_kernel", [1, 2, 5, 7], [3, 2, 2, 4], True, "same", [1, 1], 1),
    ("2d_same_dilation_odd_total", [1, 2, 6, 5], [2, 2, 2, 3], False, "same", [3, 2], 1),
    ("2d_same_groups_unbatched", [4, 4, 3], [4, 2, 3, 2], True, "same", [1, 1], 2),
    ("2d_valid", [2, 2, 5, 6], [3, 2, 3, 2], True, "valid", [1, 2], 1),
]

# (name, input shape, in, out, kernel, stride, padding, dilation, groups, output_size as the forward is given it)
CONV_T = [
    ("2d_stride2_low", [1, 2, 5, 6], 2, 3, [3, 3], [2, 2], [1, 1], [1, 1], 1, [9, 11]),
    ("2d_stride2_high", [1, 2, 5, 6], 2, 3, [3, 3], [2, 2], [1, 1], [1, 1], 1, [10, 12]),
    ("2d_stride3_mixed_with_batch_and_channels", [2, 2, 3, 4], 2, 4, [2, 3], [3, 2], [0, 1], [1, 2], 2, [2, 4, 10, 10]),
    ("2d_unbatched", [2, 4, 3], 2, 2, [3, 3], [2, 3], [1, 0], [1, 1], 1, [8, 9]),
    ("2d_unbatched_with_channels", [2, 4, 3], 2, 2, [3, 3], [2, 3], [1, 0], [1, 1], 1, [2, 7, 11]),
    ("1d_stride3_dilation2", [1, 2, 6], 2, 3, [3], [3], [1], [2], 1, [19]),
    ("1d_stride4_top", [2, 2, 5], 2, 2, [2], [4], [0], [1], 1, [21]),
    ("1d_unbatched_with_channels", [2, 5], 2, 4, [3], [2], [1], [1], 2, [4, 10]),
    ("3d_stride2_mixed", [1, 2, 3, 2, 3], 2, 2, [2, 3, 2], [2, 3, 2], [0, 1, 1], [1, 1, 2], 1, [7, 4, 6]),
    ("3d_with_batch_and_channels_groups", [2, 2, 2, 3, 2], 2, 4, [2, 2, 3], [3, 2, 2], [1, 0, 1], [1, 2, 1], 2,
     [2, 4, 5, 7, 4]),
    ("3d_unbatched", [2, 2, 2, 3], 2, 3, [3, 2, 2], [2, 2, 3], [1, 0, 0], [1, 1, 1], 1, [4, 4, 9]),
]

# (name, input shape, output size); its length says 1-d or 2-d.
ADAPTIVE = [
    ("1d_5_to_3", [2, 3, 5], [3]),
    ("1d_7_to_4", [1, 2, 7], [4]),
    ("1d_3_to_5_upsample", [1, 2, 3], [5]),
    ("1d_6_to_3_tiles", [1, 2, 6], [3]),
    ("1d_11_to_1_global", [1, 2, 11], [1]),
    ("1d_unbatched_10_to_4", [3, 10], [4]),
    ("2d_5x7_to_3x4", [2, 2, 5, 7], [3, 4]),
    ("2d_6x6_to_4x4", [1, 3, 6, 6], [4, 4]),
    ("2d_3x4_to_5x7_upsample", [1, 1, 3, 4], [5, 7]),
    ("2d_4x9_to_2x3_tiles", [1, 2, 4, 9], [2, 3]),
    ("2d_kept_rows", [1, 2, 4, 7], [4, 3]),
    ("2d_unbatched_8x5_to_3x2", [2, 8, 5], [3, 2]),
    ("2d_to_1x1_global", [2, 2, 5, 3], [1, 1]),
]

# (name, dtype, input shape, size (None or list), scale_factor (None or list), mode, align_corners (None: unset),
#  recompute_scale_factor (None: unset))
INTERP = [
    ("area_1d_size", F64, [2, 2, 7], [3], None, "area", None, None),
    ("area_1d_upsample", F64, [1, 2, 3], [7], None, "area", None, None),
    ("area_2d_size", F64, [1, 2, 5, 7], [3, 4], None, "area", None, None),
    ("area_2d_scale_half", F64, [1, 2, 6, 7], None, [0.5], "area", None, None),
    ("area_2d_scale_recompute", F64, [1, 2, 5, 6], None, [0.7, 1.3], "area", None, True),
    ("area_3d_size", F64, [1, 1, 4, 5, 6], [3, 2, 4], None, "area", None, None),
    ("area_2d_f32", F32, [2, 2, 9, 10], [4, 3], None, "area", None, None),
    ("bicubic_size_up", F64, [1, 2, 4, 5], [7, 9], None, "bicubic", None, None),
    ("bicubic_size_down", F64, [1, 2, 9, 8], [4, 3], None, "bicubic", None, None),
    ("bicubic_align_corners", F64, [2, 1, 4, 5], [7, 3], None, "bicubic", True, None),
    ("bicubic_align_corners_one_out", F64, [1, 1, 4, 5], [1, 6], None, "bicubic", True, None),
    ("bicubic_scale", F64, [1, 2, 4, 5], None, [1.7, 2.3], "bicubic", False, None),
    ("bicubic_scale_recompute", F64, [1, 2, 4, 5], None, [1.7, 2.3], "bicubic", None, True),
    ("bicubic_scale_down", F64, [1, 1, 7, 9], None, [0.6], "bicubic", None, None),
    ("bicubic_kept_extent", F64, [1, 2, 5, 4], [5, 6], None, "bicubic", None, None),
    ("bicubic_one_pixel", F64, [1, 1, 1, 1], [3, 2], None, "bicubic", None, None),
    ("bicubic_f32", F32, [1, 2, 5, 6], [9, 4], None, "bicubic", None, None),
    ("bicubic_f32_align", F32, [1, 2, 5, 6], [9, 11], None, "bicubic", True, None),
    ("bicubic_f32_scale", F32, [1, 1, 6, 5], None, [1.37, 0.83], "bicubic", None, None),
]


def conv_table(out):
    header(out, "{name, input shape, input, weight shape, weight, bias ({}: none), padding, dilation, groups,",
           " output shape, output, input grad, weight grad, bias grad}")
    gen = torch.Generator().manual_seed(41)
    for name, xs, ws, with_bias, padding, d, g in CONV:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        w = torch.randn(ws, generator=gen, dtype=F64).requires_grad_()
        b = torch.randn(ws[0], generator=gen, dtype=F64).requires_grad_() if with_bias else None
        f = F.conv1d if len(ws) == 3 else F.conv2d
        y = f(x, w, b, 1, padding, d, g)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, "%s", %s, %d, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(ws), lits(w.detach()), lits(b.detach()) if with_bias else "{}",
            padding, ints(d), g, ints(y.shape), lits(y.detach()), lits(x.grad), lits(w.grad),
            lits(b.grad) if with_bias else "{}"))


def conv_t_table(out):
    header(out, "{name, input shape, input, in, out, kernel, stride, padding, dilation, groups, output_size, weight,",
           " bias, output shape, output, input grad, weight grad, bias grad}")
    gen = torch.Generator().manual_seed(42)
    for name, xs, cin, cout, k, s, p, d, g, size in CONV_T:
        module = [nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d][len(k) - 1]
        m = module(cin, cout, k, s, p, 0, g, True, d).double()
        with torch.no_grad():
            m.weight.copy_(torch.randn(m.weight.shape, generator=gen, dtype=F64))
            m.bias.copy_(torch.randn(m.bias.shape, generator=gen, dtype=F64))
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        y = m(x, output_size=size)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %d, %d, %s, %s, %s, %s, %d, %s, %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), cin, cout, ints(k), ints(s), ints(p), ints(d), g, ints(size),
            lits(m.weight.detach()), lits(m.bias.detach()), ints(y.shape), lits(y.detach()), lits(x.grad),
            lits(m.weight.grad), lits(m.bias.grad)))


def adaptive_table(out):
    header(out, "{name, input shape, input, output size,", " output shape, output, input grad}")
    gen = torch.Generator().manual_seed(43)
    for name, xs, size in ADAPTIVE:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        y = F.adaptive_avg_pool1d(x, size[0]) if len(size) == 1 else F.adaptive_avg_pool2d(x, size)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(size), ints(y.shape), lits(y.detach()), lits(x.grad)))


def opt(v):
    return -1 if v is None else int(v)


def interp_table(out):
    header(out, "{name, f32, input shape, input, size ({}: none), scale_factor ({}: none), mode, align_corners,",
           " recompute_scale_factor (-1: unset, 0, 1), output shape, output, input grad}")
    gen = torch.Generator().manual_seed(44)
    for name, dt, xs, size, scale, mode, align, recompute in INTERP:
        x = torch.randn(xs, generator=gen, dtype=F64).to(dt).requires_grad_()
        sz = None if size is None else (size[0] if len(size) == 1 else tuple(size))
        sf = None if scale is None else (scale[0] if len(scale) == 1 else tuple(scale))
        y = F.interpolate(x, size=sz, scale_factor=sf, mode=mode, align_corners=align,
                          recompute_scale_factor=recompute)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, "%s", %d, %d, %s, %s, %s},\n' % (
            name, "true" if dt == F32 else "false", ints(xs), lits(x.detach()), ints(size or []),
            "{" + ", ".join(repr(float(v)) for v in (scale or [])) + "}", mode, opt(align), opt(recompute),
            ints(y.shape), lits(y.detach()), lits(x.grad)))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    with open(os.path.join(folder, "pytorch_layers_parity_table.inc"), "w") as out:
        for section, write in [("KILN_CONV_PADDING_MODE", conv_table), ("KILN_CONV_T_OUTPUT_SIZE", conv_t_table),
                               ("KILN_ADAPTIVE_AVG_POOL", adaptive_table), ("KILN_INTERP_AREA_CUBIC", interp_table)]:
            out.write("#if defined(%s)\n" % section)
            write(out)
            out.write("#endif\n")


if __name__ == "__main__":
    main()

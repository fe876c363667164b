#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_conv_transpose.cpp, values and gradients of d(sum(out * u)) with
u = 1, 2, 3, ... (in the output's dtype):
    tests/pytorch_conv_transpose_table.inc   conv_transpose1d, 2d and 3d (stride, padding, output_padding,
                                             dilation, groups, bias; input, weight and bias grads)
    tests/pytorch_avg_pool_divisor_table.inc avg_pool2d with divisor_override (ceil_mode, padding, unbatched)
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_conv_transpose_table.py tests
torch is needed only to regenerate the tables, never by the tests."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import cbool, ints, lits  # noqa: E402
from torch_tables import header, weights_for  # noqa: E402

F64 = torch.float64


# (name, input shape, weight shape [in, out/groups, k...], bias, stride, padding, output_padding, groups, dilation);
# the weight's rank says 1-d, 2-d or 3-d, and the per-dim arguments have one value per spatial dim.
CONV_T = [
    ("2d_basic_bias", [2, 3, 4, 5], [3, 2, 3, 3], True, [1, 1], [0, 0], [0, 0], 1, [1, 1]),
    ("2d_stride2_pad1_outpad1", [2, 3, 4, 4], [3, 4, 3, 3], True, [2, 2], [1, 1], [1, 1], 1, [1, 1]),
    ("2d_asymmetric_no_bias", [1, 2, 3, 5], [2, 3, 2, 3], False, [2, 3], [0, 1], [1, 2], 1, [1, 1]),
    ("2d_dilation2_outpad_below_dilation", [1, 2, 4, 4], [2, 2, 3, 3], True, [1, 1], [2, 2], [1, 1], 1, [2, 2]),
    ("2d_groups2_stride2", [2, 4, 3, 3], [4, 3, 3, 3], True, [2, 2], [1, 1], [0, 0], 2, [1, 1]),
    ("2d_depthwise", [1, 3, 4, 4], [3, 1, 3, 3], True, [1, 1], [1, 1], [0, 0], 3, [1, 1]),
    ("2d_padding_past_kernel_crops", [1, 2, 5, 5], [2, 2, 2, 2], True, [2, 2], [3, 3], [1, 0], 1, [1, 1]),
    ("2d_odd_everything", [1, 2, 3, 3], [2, 3, 5, 4], True, [3, 2], [2, 1], [2, 0], 1, [1, 2]),
    ("2d_kernel1_stride3", [1, 2, 3, 3], [2, 2, 1, 1], False, [3, 3], [0, 0], [2, 1], 1, [1, 1]),
    ("2d_crop_past_one_point", [1, 2, 1, 2], [2, 2, 1, 1], True, [5, 5], [2, 2], [4, 4], 1, [1, 1]),
    ("2d_groups3_dilation_stride", [1, 6, 3, 4], [6, 2, 2, 3], True, [2, 1], [1, 2], [1, 1], 3, [2, 2]),
    ("2d_unbatched", [3, 4, 4], [3, 2, 3, 3], True, [2, 2], [1, 1], [1, 1], 1, [1, 1]),
    ("2d_empty_batch", [0, 3, 4, 4], [3, 2, 3, 3], True, [2, 2], [1, 1], [0, 0], 1, [1, 1]),
    ("1d_basic_bias", [2, 3, 7], [3, 4, 3], True, [1], [0], [0], 1, [1]),
    ("1d_stride2_pad1_outpad1", [2, 3, 5], [3, 2, 3], True, [2], [1], [1], 1, [1]),
    ("1d_groups2_stride3_dilation2", [1, 4, 6], [4, 3, 3], True, [3], [2], [2], 2, [2]),
    ("1d_outpad_below_dilation", [1, 2, 4], [2, 2, 3], False, [1], [0], [1], 1, [2]),
    ("1d_unbatched", [3, 5], [3, 2, 2], True, [2], [0], [0], 1, [1]),
    ("1d_padding_past_kernel", [2, 2, 6], [2, 3, 2], True, [3], [2], [0], 1, [1]),
    ("3d_basic_bias", [2, 2, 3, 3, 4], [2, 3, 2, 2, 3], True, [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, [1, 1, 1]),
    ("3d_stride_pad_outpad", [1, 2, 3, 3, 3], [2, 2, 3, 3, 2], True, [2, 2, 1], [1, 1, 0], [1, 0, 0], 1, [1, 1, 1]),
    ("3d_groups2_dilation", [1, 4, 3, 2, 3], [4, 1, 2, 2, 2], False, [3, 1, 2], [1, 0, 1], [2, 0, 1], 2, [2, 1, 1]),
    ("3d_depth_padding_past_kernel", [1, 1, 4, 2, 2], [1, 2, 2, 1, 2], True, [3, 1, 1], [2, 0, 1], [1, 0, 0], 1,
     [1, 1, 1]),
    ("3d_unbatched", [2, 2, 3, 2], [2, 2, 2, 2, 2], True, [2, 1, 2], [0, 1, 0], [1, 0, 1], 1, [1, 1, 1]),
    ("3d_empty_batch", [0, 2, 2, 2, 2], [2, 2, 2, 2, 2], True, [1, 1, 1], [0, 0, 0], [0, 0, 0], 1, [1, 1, 1]),
]

# (name, input shape, kernel, stride (None: the kernel), padding, ceil_mode, count_include_pad, divisor_override)
DIVISOR = [
    ("tiles_floor", [2, 2, 5, 6], [2, 2], None, [0, 0], False, True, 3),
    ("pad_ceil_exclude", [1, 2, 7, 7], [3, 3], [2, 2], [1, 1], True, False, 4),
    ("asymmetric_negative", [1, 1, 6, 5], [3, 2], [2, 1], [1, 1], False, True, -2),
    ("unbatched_ceil_overhang", [2, 5, 5], [3, 3], [2, 2], [0, 0], True, True, 5),
    ("divisor_one", [1, 2, 4, 4], [2, 2], [1, 1], [1, 1], False, True, 1),
]


def conv_transpose_table(out):
    header(out, "{name, input shape, input, weight shape, weight, bias ({}: none), stride, padding, output_padding,",
           " groups, dilation, output shape, output, input grad, weight grad, bias grad}")
    gen = torch.Generator().manual_seed(31)
    for name, xs, ws, with_bias, s, p, op, g, d in CONV_T:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        w = torch.randn(ws, generator=gen, dtype=F64).requires_grad_()
        b = torch.randn(ws[1] * g, generator=gen, dtype=F64).requires_grad_() if with_bias else None
        f = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(ws)]
        y = f(x, w, b, s, p, op, g, d)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s, %s, %d, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(ws), lits(w.detach()), lits(b.detach()) if with_bias else "{}",
            ints(s), ints(p), ints(op), g, ints(d), ints(y.shape), lits(y.detach()), lits(x.grad), lits(w.grad),
            lits(b.grad) if with_bias else "{}"))


def divisor_table(out):
    header(out, "{name, input shape, input, kernel, stride ({}: the kernel), padding, ceil_mode, count_include_pad,",
           " divisor_override, output shape, output, input grad}")
    gen = torch.Generator().manual_seed(32)
    for name, xs, k, s, p, ceil, include, div in DIVISOR:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        y = F.avg_pool2d(x, k, s, p, ceil, include, div)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s, %d, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(k), ints(s or []), ints(p), cbool(ceil), cbool(include), div,
            ints(y.shape), lits(y.detach()), lits(x.grad)))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    for file, write in [("pytorch_conv_transpose_table.inc", conv_transpose_table),
                        ("pytorch_avg_pool_divisor_table.inc", divisor_table)]:
        with open(os.path.join(folder, file), "w") as out:
            write(out)


if __name__ == "__main__":
    main()

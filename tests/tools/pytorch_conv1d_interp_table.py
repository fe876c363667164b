#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_layers1d.cpp, values and gradients of d(sum(out * u)) with
u = 1, 2, 3, ... (in the output's dtype):
    tests/pytorch_conv1d_table.inc       conv1d (stride, padding, dilation, groups, bias; input, weight, bias grads)
    tests/pytorch_pool1d_table.inc       max_pool1d and avg_pool1d (ceil_mode, count_include_pad, padding, ties)
    tests/pytorch_interpolate_table.inc  interpolate (each mode, align_corners, size or scale_factor, f32 and f64)
    tests/pytorch_pad_table.inc          pad with negative (cropping) and mixed amounts
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_conv1d_interp_table.py tests
torch is needed only to regenerate the tables, never by the tests."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import cbool, ints, lits  # noqa: E402
from torch_tables import header, weights_for  # noqa: E402


# (name, input shape, weight shape, bias, stride, padding, dilation, groups)
CONV1D = [
    ("basic_bias", [2, 3, 7], [4, 3, 3], True, 1, 0, 1, 1),
    ("stride2_pad1", [2, 3, 8], [4, 3, 3], True, 2, 1, 1, 1),
    ("dilation2_pad2_no_bias", [1, 2, 9], [3, 2, 3], False, 1, 2, 2, 1),
    ("groups2", [2, 4, 6], [6, 2, 2], True, 1, 1, 1, 2),
    ("depthwise", [1, 3, 5], [3, 1, 3], True, 1, 1, 1, 3),
    ("stride3_pad2_dilation2_groups2", [2, 4, 11], [4, 2, 3], True, 3, 2, 2, 2),
    ("padding_past_kernel", [1, 2, 4], [2, 2, 2], True, 1, 3, 1, 1),
    ("kernel1", [2, 3, 5], [2, 3, 1], False, 1, 0, 1, 1),
    ("kernel_whole_input", [2, 3, 5], [2, 3, 5], True, 1, 0, 1, 1),
    ("unbatched", [3, 7], [2, 3, 3], True, 2, 1, 1, 1),
    ("empty_batch", [0, 3, 7], [4, 3, 3], True, 1, 1, 1, 1),
]

# (name, "max" or "avg", input shape, kernel, stride (None: the kernel), padding, dilation (max only),
#  ceil_mode, count_include_pad (avg only), ties (integer inputs, so windows hold equal maxima))
POOL1D = [
    ("max_default_stride", "max", [2, 3, 7], 2, None, 0, 1, False, True, False),
    ("max_ceil", "max", [1, 2, 7], 2, None, 0, 1, True, True, False),
    ("max_stride_pad_dilation_ceil", "max", [2, 1, 10], 3, 2, 1, 2, True, True, False),
    ("max_overlapping_ties", "max", [1, 2, 9], 3, 1, 1, 1, False, True, True),
    ("max_unbatched", "max", [3, 9], 3, 2, 1, 1, False, True, False),
    ("max_only_partial_window", "max", [1, 1, 2], 3, 2, 0, 1, True, True, False),
    ("avg_default_stride", "avg", [2, 3, 7], 3, None, 0, 1, False, True, False),
    ("avg_pad_include", "avg", [2, 2, 9], 3, 2, 1, 1, False, True, False),
    ("avg_pad_exclude", "avg", [2, 2, 9], 3, 2, 1, 1, False, False, False),
    ("avg_ceil_pad_include", "avg", [1, 2, 8], 3, 2, 1, 1, True, True, False),
    ("avg_ceil_pad_exclude", "avg", [1, 2, 8], 3, 2, 1, 1, True, False, False),
    ("avg_unbatched", "avg", [2, 6], 2, 1, 1, 1, False, True, False),
    ("avg_empty_batch", "avg", [0, 2, 6], 2, None, 0, 1, False, True, False),
    ("max_empty_batch", "max", [0, 2, 6], 2, None, 0, 1, False, True, False),
]

# (name, dtype, input shape, size (None or list), scale_factor (None or list), mode, align_corners
#  (None: unset), recompute_scale_factor (None: unset))
F64, F32 = torch.float64, torch.float32
INTERP = [
    ("nearest_1d_up_size", F64, [2, 2, 5], [8], None, "nearest", None, None),
    ("nearest_1d_down_size", F64, [1, 2, 9], [4], None, "nearest", None, None),
    ("nearest_1d_scale_1_7", F64, [1, 2, 5], None, [1.7], "nearest", None, None),
    ("nearest_1d_scale_2_1", F64, [1, 1, 5], None, [2.1], "nearest", None, None),
    ("nearest_1d_scale_1_15_kept_extent", F64, [1, 1, 5], None, [1.15], "nearest", None, None),
    ("nearest_1d_scale_0_6", F64, [1, 2, 9], None, [0.6], "nearest", None, None),
    ("nearest_1d_scale_2", F64, [2, 1, 4], None, [2.0], "nearest", None, None),
    ("nearest_1d_scale_3", F64, [1, 1, 4], None, [3.0], "nearest", None, None),
    ("nearest_1d_scale_0_5", F64, [1, 1, 9], None, [0.5], "nearest", None, None),
    ("nearest_1d_recompute", F64, [1, 1, 5], None, [1.7], "nearest", None, True),
    ("nearest_2d_size", F64, [1, 2, 3, 4], [5, 7], None, "nearest", None, None),
    ("nearest_2d_size_down", F64, [1, 1, 7, 6], [3, 4], None, "nearest", None, None),
    ("nearest_2d_shortcuts", F64, [1, 1, 4, 5], None, [2.19, 1.15], "nearest", None, None),
    ("nearest_2d_scale_one_value", F64, [1, 2, 3, 4], None, [1.5], "nearest", None, None),
    ("nearest_2d_recompute", F64, [1, 1, 4, 5], None, [2.19, 1.15], "nearest", None, True),
    ("nearest_3d_scale", F64, [1, 1, 2, 3, 4], None, [2.0, 1.5, 0.8], "nearest", None, None),
    ("nearest_exact_1d_size", F64, [1, 2, 5], [8], None, "nearest-exact", None, None),
    ("nearest_exact_1d_scale_1_15", F64, [1, 1, 5], None, [1.15], "nearest-exact", None, None),
    ("nearest_exact_2d_scale", F64, [1, 1, 5, 6], None, [0.7, 2.19], "nearest-exact", None, None),
    ("linear_up_size", F64, [2, 2, 5], [8], None, "linear", None, None),
    ("linear_up_size_align", F64, [2, 2, 5], [8], None, "linear", True, None),
    ("linear_down_size", F64, [1, 2, 9], [4], None, "linear", False, None),
    ("linear_down_size_align", F64, [1, 2, 9], [4], None, "linear", True, None),
    ("linear_scale_1_7", F64, [1, 2, 5], None, [1.7], "linear", None, None),
    ("linear_scale_1_7_align", F64, [1, 2, 5], None, [1.7], "linear", True, None),
    ("linear_scale_0_6", F64, [1, 1, 9], None, [0.6], "linear", False, None),
    ("linear_scale_1_1_kept_extent", F64, [1, 1, 5], None, [1.1], "linear", None, None),
    ("linear_recompute", F64, [1, 1, 5], None, [1.7], "linear", None, True),
    ("linear_output_one_align", F64, [1, 2, 5], [1], None, "linear", True, None),
    ("linear_output_one", F64, [1, 2, 5], [1], None, "linear", False, None),
    ("linear_input_one", F64, [1, 2, 1], [4], None, "linear", False, None),
    ("bilinear_up_size", F64, [1, 2, 3, 4], [5, 7], None, "bilinear", None, None),
    ("bilinear_up_size_align", F64, [1, 2, 3, 4], [5, 7], None, "bilinear", True, None),
    ("bilinear_scale", F64, [2, 1, 3, 4], None, [1.5, 2.3], "bilinear", False, None),
    ("bilinear_scale_align", F64, [2, 1, 3, 4], None, [1.5, 2.3], "bilinear", True, None),
    ("bilinear_down_scale", F64, [1, 1, 7, 9], None, [0.4], "bilinear", False, None),
    ("bilinear_down_size_align", F64, [1, 1, 7, 9], [3, 4], None, "bilinear", True, None),
    ("bilinear_one_dim_kept", F64, [1, 2, 4, 3], [4, 6], None, "bilinear", False, None),
    ("bilinear_recompute", F64, [1, 1, 4, 5], None, [1.7, 0.6], "bilinear", None, True),
    ("trilinear_size", F64, [1, 1, 3, 4, 2], [5, 3, 4], None, "trilinear", False, None),
    ("trilinear_scale_align", F64, [1, 2, 2, 3, 2], None, [1.5], "trilinear", True, None),
    ("f32_nearest_1d_scale_1_7", F32, [1, 2, 5], None, [1.7], "nearest", None, None),
    ("f32_nearest_2d_size", F32, [1, 1, 5, 3], [7, 8], None, "nearest", None, None),
    ("f32_linear_scale_1_3", F32, [1, 2, 6], None, [1.3], "linear", None, None),
    ("f32_bilinear_scale", F32, [1, 2, 5, 6], None, [1.7, 0.45], "bilinear", False, None),
    ("f32_bilinear_size_align", F32, [1, 1, 4, 5], [7, 3], None, "bilinear", True, None),
    ("empty_batch_nearest", F64, [0, 2, 5], [8], None, "nearest", None, None),
    ("empty_batch_bilinear", F64, [0, 2, 3, 4], None, [2.0], "bilinear", True, None),
]

# (name, input shape, pads (torch order: last dim first), value)
PAD = [
    ("crop_start_last_dim", [2, 3, 4], [-1, 0], 0.0),
    ("crop_both_ends", [2, 3, 4], [-1, -2], 0.0),
    ("crop_and_pad", [2, 3, 4], [-1, 2], 0.0),
    ("pad_and_crop_two_dims", [2, 3, 4], [1, -1, -1, 0], 0.0),
    ("crop_everything_then_pad", [2, 3], [-3, 2], 0.0),
    ("crop_to_empty", [2, 4], [0, -4], 0.0),
    ("three_dims_mixed_value", [2, 3, 4], [0, 0, -1, 1, 2, -1], 1.5),
    ("crop_first_dim_only", [3, 2], [0, 0, -2, 0], 0.0),
    ("positive_only", [2, 3], [1, 2], -2.0),
]


def conv1d_table(out):
    header(out, "{name, input shape, input, weight shape, weight, bias ({}: none), stride, padding, dilation, groups,",
           " output shape, output, input grad, weight grad, bias grad}")
    gen = torch.Generator().manual_seed(21)
    for name, xs, ws, with_bias, s, p, d, g in CONV1D:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        w = torch.randn(ws, generator=gen, dtype=F64).requires_grad_()
        b = torch.randn(ws[0], generator=gen, dtype=F64).requires_grad_() if with_bias else None
        y = F.conv1d(x, w, b, s, p, d, g)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %d, %d, %d, %d, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(ws), lits(w.detach()), lits(b.detach()) if with_bias else "{}",
            s, p, d, g, ints(y.shape), lits(y.detach()), lits(x.grad), lits(w.grad),
            lits(b.grad) if with_bias else "{}"))


def pool1d_table(out):
    header(out, "{name, max, input shape, input, kernel, stride (0: default), padding, dilation, ceil_mode,",
           " count_include_pad, output shape, output, input grad}")
    gen = torch.Generator().manual_seed(22)
    for name, kind, xs, k, s, p, d, ceil, include, ties in POOL1D:
        if ties:
            x = torch.randint(-2, 3, xs, generator=gen).to(F64).requires_grad_()
        else:
            x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        if kind == "max":
            y = F.max_pool1d(x, k, s, p, d, ceil_mode=ceil)
        else:
            y = F.avg_pool1d(x, k, s, p, ceil_mode=ceil, count_include_pad=include)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %d, %d, %d, %d, %s, %s, %s, %s, %s},\n' % (
            name, cbool(kind == "max"), ints(xs), lits(x.detach()), k, 0 if s is None else s, p, d, cbool(ceil),
            cbool(include), ints(y.shape), lits(y.detach()), lits(x.grad)))


def opt(v):
    return -1 if v is None else int(v)


def interp_table(out):
    header(out, "{name, f32, input shape, input, size ({}: none), scale_factor ({}: none), mode, align_corners,",
           " recompute_scale_factor (-1: unset, 0, 1), output shape, output, input grad, torch_grad_differs}\n"
           "// The nearest modes' input grad is that of the map their forward computes, from the sources it picks;\n"
           "// torch_grad_differs marks where PyTorch's own backward disagrees with its forward (1-d legacy nearest:\n"
           "// the forward has no shortcuts, the backward copies a kept extent and halves a doubled one).")
    gen = torch.Generator().manual_seed(23)
    for name, dt, xs, size, scale, mode, align, recompute in INTERP:
        x = torch.randn(xs, generator=gen, dtype=F64).to(dt).requires_grad_()
        sz = None if size is None else (size[0] if len(size) == 1 else tuple(size))
        sf = None if scale is None else (scale[0] if len(scale) == 1 else tuple(scale))
        y = F.interpolate(x, size=sz, scale_factor=sf, mode=mode, align_corners=align,
                          recompute_scale_factor=recompute)
        u = weights_for(y)
        (y * u).sum().backward()
        grad, differs = x.grad, False
        if mode.startswith("nearest"):  # the gradient of the map the forward computed
            grad = nearest_grad(xs, u, lambda t: F.interpolate(
                t, size=sz, scale_factor=sf, mode=mode, recompute_scale_factor=recompute))
            differs = not torch.equal(grad.to(x.grad.dtype), x.grad)
        out.write('{"%s", %s, %s, %s, %s, %s, "%s", %d, %d, %s, %s, %s, %s},\n' % (
            name, cbool(dt == F32), ints(xs), lits(x.detach()), ints(size or []),
            "{" + ", ".join(repr(float(v)) for v in (scale or [])) + "}", mode, opt(align), opt(recompute),
            ints(y.shape), lits(y.detach()), lits(grad), cbool(differs)))


def nearest_grad(shape, u, resample):
    """d(sum(resample(x) * u))/dx for a nearest mode, from the sources its forward picks: resampling the
    elements' flat positions (exact in f64) gives each output's source, and u is summed into it."""
    n = 1
    for e in shape:
        n *= e
    src = resample(torch.arange(n, dtype=F64).reshape(shape)).flatten().long()
    return torch.zeros(n, dtype=F64).index_add_(0, src, u.flatten().to(F64)).reshape(shape)


def pad_table(out):
    header(out, "{name, input shape, input, pads (last dim first), value,", " output shape, output, input grad}")
    gen = torch.Generator().manual_seed(24)
    for name, xs, pads, value in PAD:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        y = F.pad(x, pads, value=value)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(pads), repr(float(value)), ints(y.shape), lits(y.detach()),
            lits(x.grad)))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    for file, write in [("pytorch_conv1d_table.inc", conv1d_table), ("pytorch_pool1d_table.inc", pool1d_table),
                        ("pytorch_interpolate_table.inc", interp_table), ("pytorch_pad_table.inc", pad_table)]:
        with open(os.path.join(folder, file), "w") as out:
            write(out)


if __name__ == "__main__":
    main()

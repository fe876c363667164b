#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_vision.cpp's affine_grid and grid_sample tests, values and
gradients of d(sum(out * u)) with u = 1, 2, 3, ... (f64):
    tests/pytorch_grid_sample_table.inc  affine_grid (2-d and 3-d; theta gradient) and grid_sample (2-d and 3-d,
                                         each mode, padding_mode and align_corners; input and grid gradients)
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_grid_sample_table.py tests
torch is needed only to regenerate the tables, never by the tests."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import cbool, ints, lits  # noqa: E402
from torch_tables import header, weights_for  # noqa: E402

F64 = torch.float64

# (name, size [N, C, H, W], align_corners)
AFFINE = [
    ("affine_3x4", [2, 1, 3, 4], False),
    ("affine_3x4_align", [2, 3, 3, 4], True),
    ("affine_1x5", [1, 1, 1, 5], True),
    ("affine_3d_2x3x4", [2, 1, 2, 3, 4], False),
    ("affine_3d_2x3x4_align", [2, 2, 2, 3, 4], True),
    ("affine_3d_1x1x3", [1, 1, 1, 1, 3], True),
]

# (name, input shape, grid [(Do,) Ho, Wo], grid scale (0: halves, below) (1.2: some points outside [-1, 1]), mode, padding_mode, align_corners)
SAMPLE = []
for mode in ["bilinear", "nearest"]:
    for pad in ["zeros", "border", "reflection"]:
        for align in [False, True]:
            SAMPLE.append(("%s_%s%s" % (mode, pad, "_align" if align else ""), [2, 2, 3, 4], [3, 5], 1.6, mode, pad,
                           align))
SAMPLE += [
    ("bilinear_reflection_far", [1, 1, 3, 3], [2, 4], 4.0, "bilinear", "reflection", False),
    ("bilinear_reflection_far_align", [1, 2, 4, 3], [3, 2], 4.0, "bilinear", "reflection", True),
    ("bilinear_one_pixel_wide", [1, 1, 4, 1], [2, 3], 1.2, "bilinear", "zeros", False),
    ("bilinear_border_one_pixel", [1, 1, 1, 1], [2, 2], 1.5, "bilinear", "border", True),
]
for pad in ["zeros", "border", "reflection"]:  # bicubic: each of the 16 taps clipped or reflected
    for align in [False, True]:
        SAMPLE.append(("bicubic_%s%s" % (pad, "_align" if align else ""), [2, 2, 4, 5], [3, 4], 1.6, "bicubic", pad,
                       align))
SAMPLE += [
    ("bicubic_reflection_far", [1, 1, 2, 3], [2, 3], 4.0, "bicubic", "reflection", False),
    ("bicubic_reflection_far_align", [1, 2, 3, 2], [3, 2], 4.0, "bicubic", "reflection", True),
    ("bicubic_border_one_pixel", [1, 1, 1, 1], [2, 2], 1.5, "bicubic", "border", True),
    ("bicubic_zeros_one_row", [1, 2, 1, 4], [2, 3], 1.3, "bicubic", "zeros", False),
]
for mode in ["bilinear", "nearest"]:  # 5-d input: trilinear and nearest
    for pad in ["zeros", "border", "reflection"]:
        for align in [False, True]:
            SAMPLE.append(("3d_%s_%s%s" % (mode, pad, "_align" if align else ""), [2, 2, 3, 4, 5], [2, 3, 4], 1.6,
                           mode, pad, align))
SAMPLE += [
    ("3d_bilinear_reflection_far", [1, 1, 2, 3, 2], [2, 2, 3], 4.0, "bilinear", "reflection", False),
    ("3d_bilinear_reflection_far_align", [1, 2, 3, 2, 2], [3, 2, 1], 4.0, "bilinear", "reflection", True),
    ("3d_bilinear_one_plane", [1, 1, 1, 2, 3], [1, 2, 3], 1.2, "bilinear", "zeros", False),
]
# scale 0: a grid of multiples of 1/2, so that pixel coordinates fall on halves: "nearest" rounds them to even in
# PyTorch's 2-d kernel and away from zero in its 3-d one
SAMPLE += [
    ("nearest_halves", [1, 1, 2, 3], [3, 4], 0, "nearest", "zeros", True),
    ("3d_nearest_halves_align", [1, 1, 2, 3, 3], [2, 3, 4], 0, "nearest", "zeros", True),
    ("3d_nearest_halves", [1, 2, 2, 3, 2], [2, 3, 3], 0, "nearest", "border", False),
    ("3d_nearest_halves_reflection", [1, 1, 3, 2, 3], [2, 2, 4], 0, "nearest", "reflection", False),
]


def affine_table(out, gen):
    for name, size, align in AFFINE:
        k = len(size) - 2
        theta = torch.randn([size[0], k, k + 1], generator=gen, dtype=F64).requires_grad_()
        y = F.affine_grid(theta, size, align_corners=align)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s},\n' % (name, ints(size), cbool(align), lits(theta.detach()),
                                                     lits(y.detach()), lits(theta.grad)))


def sample_table(out, gen):
    for name, xs, gs, scale, mode, pad, align in SAMPLE:
        x = torch.randn(xs, generator=gen, dtype=F64).requires_grad_()
        shape = [xs[0]] + gs + [len(xs) - 2]
        if scale == 0:
            grid = (torch.randint(-3, 4, shape, generator=gen).to(F64) / 2).requires_grad_()
        else:
            grid = ((torch.rand(shape, generator=gen, dtype=F64) * 2 - 1) * scale).requires_grad_()
        y = F.grid_sample(x, grid, mode=mode, padding_mode=pad, align_corners=align)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, "%s", "%s", %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(grid.shape), lits(grid.detach()), mode, pad, cbool(align),
            lits(y.detach()), lits(x.grad), lits(grid.grad)))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    gen = torch.Generator().manual_seed(51)
    with open(os.path.join(folder, "pytorch_grid_sample_table.inc"), "w") as out:
        header(out, "affine_grid cases, then grid_sample cases (two tables: kAffineGrid and kGridSample)",
               "{name, size, align_corners, theta, grid, theta grad} / {name, input shape, input, grid shape, grid,"
               " mode, padding_mode, align_corners, output, input grad, grid grad}")
        out.write("#ifdef KILN_AFFINE_GRID_CASES\n")
        affine_table(out, gen)
        out.write("#else\n")
        sample_table(out, gen)
        out.write("#endif\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_nn_more.cpp, values and gradients of d(sum(out * u)) with
u = 1, 2, 3, ... (f64):
    tests/pytorch_nn_more_table.inc  F.bilinear (input, input, weight and bias gradients), F.threshold and
                                     nn.Softmax2d (input gradients)
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_nn_more_table.py tests
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

# (name, x1 shape, x2 shape, out features, bias)
BILINEAR = [
    ("bilinear_2d", [4, 3], [4, 2], 5, True),
    ("bilinear_3d_no_bias", [2, 3, 2], [2, 3, 4], 3, False),
    ("bilinear_1d", [3], [2], 2, True),
    ("bilinear_empty_batch", [0, 3], [0, 2], 2, True),
]

# (name, "threshold" or "softmax2d", input shape, threshold, value)
ELEMENTWISE = [
    ("threshold", "threshold", [3, 5], 0.1, -2.0),
    ("threshold_negative", "threshold", [2, 2, 3], -0.5, 7.5),
    ("softmax2d_batched", "softmax2d", [2, 3, 2, 2], 0.0, 0.0),
    ("softmax2d_unbatched", "softmax2d", [4, 2, 3], 0.0, 0.0),
]


def bilinear_table(out, gen):
    for name, s1, s2, o, bias in BILINEAR:
        x1 = torch.randn(s1, generator=gen, dtype=F64).requires_grad_()
        x2 = torch.randn(s2, generator=gen, dtype=F64).requires_grad_()
        w = torch.randn([o, s1[-1], s2[-1]], generator=gen, dtype=F64).requires_grad_()
        b = torch.randn([o], generator=gen, dtype=F64).requires_grad_() if bias else None
        y = F.bilinear(x1, x2, w, b)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s},\n' % (
            name, ints(s1), lits(x1.detach()), ints(s2), lits(x2.detach()), ints(w.shape), lits(w.detach()),
            lits(b.detach()) if bias else "{}", ints(y.shape), lits(y.detach()), lits(x1.grad), lits(x2.grad),
            lits(w.grad), lits(b.grad) if bias else "{}"))


def elementwise_table(out, gen):
    for name, op, shape, th, value in ELEMENTWISE:
        x = torch.randn(shape, generator=gen, dtype=F64)
        if op == "threshold":
            x.view(-1)[0] = th  # at the threshold: replaced
        x.requires_grad_()
        y = F.threshold(x, th, value) if op == "threshold" else nn.Softmax2d()(x)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", "%s", %s, %s, %s, %s, %s, %s},\n' % (
            name, op, ints(shape), lits(x.detach()), repr(th), repr(value), lits(y.detach()), lits(x.grad)))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    gen = torch.Generator().manual_seed(41)
    with open(os.path.join(folder, "pytorch_nn_more_table.inc"), "w") as out:
        header(out, "bilinear cases, then threshold and Softmax2d cases (two tables: kBilinear and kElementwise)",
               "{name, x1 shape, x1, x2 shape, x2, weight shape, weight, bias ({}: none), output shape, output,"
               " x1 grad, x2 grad, weight grad, bias grad} / {name, op, shape, input, threshold, value, output,"
               " input grad}")
        out.write("#ifdef KILN_BILINEAR_CASES\n")
        bilinear_table(out, gen)
        out.write("#else\n")
        elementwise_table(out, gen)
        out.write("#endif\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the PyTorch references of tests/test_activations.cpp, values and gradients of d(sum(out * u)) with
u = 1, 2, 3, ... (in the output's dtype):
    tests/pytorch_activation_table.inc       the elementwise activations (with their arguments) on extremes
                                             (+-1e4, +-100, softplus's threshold +-20.5, -0, +-inf, NaN),
                                             kinks (0, +-1, +-3, 6) and random values: f64 values and gradients
                                             (at finite inputs), f32 values
    tests/pytorch_activation_dim_table.inc   glu, prelu (input and weight gradients) and softmin on small shapes
Run with Debian's python3-torch (1.13) from the repository root:
    python3 tests/tools/pytorch_activation_table.py tests
torch is needed only to regenerate the tables, never by the tests."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import ints, lits  # noqa: E402
from torch_tables import header, weights_for  # noqa: E402

F64 = torch.float64
INF, NAN = float("inf"), float("nan")

# The inputs of every elementwise case: extremes, each function's kinks, then random values.
SPECIAL = [-1e4, -100.0, -20.5, -20.0, -19.5, -6.0, -3.0, -2.5, -1.0, -0.5, -1e-8, -0.0, 0.0, 1e-8, 0.5, 1.0, 2.5, 3.0,
           6.0, 19.5, 20.0, 20.5, 100.0, 1e4, INF, -INF, NAN]

# (name as the test calls it, its arguments, the torch function of x)
ELEMENTWISE = [
    ("leaky_relu", [], lambda x: F.leaky_relu(x)),
    ("leaky_relu", [0.2], lambda x: F.leaky_relu(x, 0.2)),
    ("elu", [], lambda x: F.elu(x)),
    ("elu", [0.5], lambda x: F.elu(x, 0.5)),
    ("selu", [], lambda x: F.selu(x)),
    ("celu", [], lambda x: F.celu(x)),
    ("celu", [2.0], lambda x: F.celu(x, 2.0)),
    ("softplus", [], lambda x: F.softplus(x)),
    ("softplus", [2.0, 10.0], lambda x: F.softplus(x, 2.0, 10.0)),
    ("mish", [], lambda x: F.mish(x)),
    ("hardswish", [], lambda x: F.hardswish(x)),
    ("hardsigmoid", [], lambda x: F.hardsigmoid(x)),
    ("hardtanh", [], lambda x: F.hardtanh(x)),
    ("hardtanh", [-2.0, 3.0], lambda x: F.hardtanh(x, -2.0, 3.0)),
    ("hardtanh", [2.0, 1.0], lambda x: F.hardtanh(x, 2.0, 1.0)),  # min > max: max everywhere, as clamp
    ("relu6", [], lambda x: F.relu6(x)),
    ("logsigmoid", [], lambda x: F.logsigmoid(x)),
    ("softsign", [], lambda x: F.softsign(x)),
]


def scalar_grad(f, v, u):
    """u f'(v) from a one-element tensor: PyTorch's scalar kernel. (Its vectorized hardswish backward takes x = 3 as
    above the kink, gradient 1, and its scalar one as on it, 3/2, the derivative of x (x + 3) / 6 there.)"""
    x = v.reshape(1).clone().requires_grad_()
    (f(x) * u).sum().backward()
    return x.grad[0]


def elementwise_table(out):
    header(out, "{name, arguments, x, f64 values, f64 gradients (NaN where x is not finite: not compared),",
           " f32 values}")
    gen = torch.Generator().manual_seed(17)
    xs = torch.tensor(SPECIAL, dtype=F64)
    xs = torch.cat([xs, torch.randn(24, generator=gen, dtype=F64) * 4])
    for name, args, f in ELEMENTWISE:
        y = f(xs)
        g = torch.stack([scalar_grad(f, v, u) for v, u in zip(xs, weights_for(y))])
        g = torch.where(torch.isfinite(xs), g, torch.full_like(xs, NAN))
        y32 = f(xs.float())
        out.write('{"%s", %s, %s, %s, %s, %s},\n' % (name, lits(args), lits(xs), lits(y), lits(g),
                                                    lits(y32.double())))


def dim_table(out):
    header(out, "{name, x shape, x, weight shape (prelu's; {}: none), weight, dim, y shape, y, x grad, weight grad}",
           "")
    gen = torch.Generator().manual_seed(23)
    cases = [("glu", [3, 4], None, -1), ("glu", [4, 3, 2], None, 0), ("glu", [2, 6, 2], None, 1),
             ("prelu", [2, 3, 4], [3], 1), ("prelu", [2, 3, 4], [1], 1), ("prelu", [5], [1], 1),
             ("prelu", [2, 3], [3], 1), ("prelu", [], [1], 1),
             ("softmin", [3, 5], None, 1), ("softmin", [3, 5], None, 0), ("softmin", [2, 3, 4], None, -1)]
    for name, xs, ws, dim in cases:
        x = torch.randn(xs, generator=gen, dtype=F64)
        if name == "prelu":
            x.view(-1)[0] = 0.0  # the kink
        x.requires_grad_()
        w = torch.randn(ws, generator=gen, dtype=F64).requires_grad_() if ws else None
        if name == "glu":
            y = F.glu(x, dim)
        elif name == "prelu":
            y = F.prelu(x, w)
        else:
            y = F.softmin(x, dim)
        (y * weights_for(y)).sum().backward()
        out.write('{"%s", %s, %s, %s, %s, %d, %s, %s, %s, %s},\n' % (
            name, ints(xs), lits(x.detach()), ints(ws) if ws else "{}", lits(w.detach()) if ws else "{}", dim,
            ints(y.shape), lits(y.detach()), lits(x.grad), lits(w.grad) if ws else "{}"))


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "tests"
    with open(os.path.join(folder, "pytorch_activation_table.inc"), "w") as out:
        elementwise_table(out)
    with open(os.path.join(folder, "pytorch_activation_dim_table.inc"), "w") as out:
        dim_table(out)


if __name__ == "__main__":
    main()

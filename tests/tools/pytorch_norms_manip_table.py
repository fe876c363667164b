#!/usr/bin/env python3
"""Prints tests/pytorch_norms_manip_table.inc, the reference of test_norms_manip: torch.flip, roll,
Tensor.repeat, tile, repeat_interleave, linalg.vector_norm, nn.functional.normalize, cosine_similarity,
pairwise_distance, group_norm and instance_norm (and nn.InstanceNorm1d's running statistics) of PyTorch 1.13,
in f64: each output and the gradients of sum(out * u) (u = 1, 2, 3, ...). Run with Debian's python3-torch:
    cd tests/tools && /usr/bin/python3 pytorch_norms_manip_table.py > ../pytorch_norms_manip_table.inc"""
import sys

import torch
import torch.nn.functional as F

from cpp_literals import cbool, ints, lit, lits
from torch_tables import header, weights_for

INF = float("inf")
NONE = -1000  # no dim
GEN = torch.Generator().manual_seed(7)


def randn(*shape):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64)


def with_zeros(shape):
    """N(0, 1) values with a zero row (the last) and, in the first row, a zero and a tie of |max|."""
    x = randn(*shape)
    x[-1] = 0
    x[0, 0] = 0
    x[0, 1] = x[0].abs().max() * -1
    x[0, 2] = -x[0, 1]
    return x


def grads(out, inputs):
    """d(sum(out * u)) for each input (zeros where torch gives none)."""
    inputs = [t for t in inputs]
    g = torch.autograd.grad((out * weights_for(out)).sum(), inputs, allow_unused=True) if out.numel() else [None] * len(inputs)
    return [torch.zeros_like(t) if gi is None else gi for t, gi in zip(inputs, g)]


def manip_cases():
    """(op, x, x2, a, b, p, eps, dim, keepdim, f) with f(x, x2) the PyTorch call."""
    c = []
    def add(op, x, f, x2=None, a=(), b=(), p=0.0, eps=0.0, dim=NONE, keepdim=False):
        c.append((op, x, x2, a, b, p, eps, dim, keepdim, f))
    x345, x35 = randn(3, 4, 5), randn(3, 5)
    for dims in [(0, 2), (-1,), (), (1, 0)]:
        add("flip", x345, lambda x, _, d=dims: torch.flip(x, d), a=dims)
    add("flip", randn(()), lambda x, _: torch.flip(x, (0,)), a=(0,))
    add("flip", randn(2, 0, 3), lambda x, _: torch.flip(x, (1, 2)), a=(1, 2))
    for shifts, dims in [((2,), (1,)), ((-7,), (0,)), ((1, -2), (0, 1)), ((4,), ()), ((13,), ()), ((-1, 3), (1, 1))]:
        add("roll", x35, lambda x, _, s=shifts, d=dims: torch.roll(x, s, d), a=shifts, b=dims)
    add("roll", randn(()), lambda x, _: torch.roll(x, 1), a=(1,))
    add("roll", randn(0, 3), lambda x, _: torch.roll(x, (1, 2), (0, 1)), a=(1, 2), b=(0, 1))
    x23 = randn(2, 3)
    for sizes in [(2, 1), (1, 2, 3), (0, 2), (2, 2, 1, 1)]:
        add("repeat", x23, lambda x, _, s=sizes: x.repeat(*s), a=sizes)
    add("repeat", randn(()), lambda x, _: x.repeat(2, 3), a=(2, 3))
    add("repeat", randn(()), lambda x, _: x.repeat(()), a=())
    add("repeat", randn(0, 2), lambda x, _: x.repeat(3, 1), a=(3, 1))
    for reps in [(2,), (2, 1, 2), ()]:
        add("tile", x23, lambda x, _, r=reps: torch.tile(x, r), a=reps)
    for r, dim in [(2, NONE), (3, 1), (0, 0), (2, -2)]:
        add("repeat_interleave", x23,
            lambda x, _, r=r, d=dim: torch.repeat_interleave(x, r, None if d == NONE else d), a=(r,), dim=dim)
    add("repeat_interleave", randn(()), lambda x, _: torch.repeat_interleave(x, 3), a=(3,))
    for reps, dim in [((1, 0, 2), 1), ((2,), 0), ((2, 1, 1, 0, 0, 1), NONE), ((0, 0), 0)]:
        add("repeat_interleave_tensor", x23,
            lambda x, _, r=reps, d=dim: torch.repeat_interleave(x, torch.tensor(r), None if d == NONE else d),
            a=reps, dim=dim)
    xz = with_zeros((3, 5))
    for p in [2, 1, INF, -INF, 0, 3, 0.5, -1, -2.5, 1.5]:
        for dims, keepdim in [((1,), False), ((0,), True)]:
            add("norm", xz, lambda x, _, p=p, d=dims, k=keepdim: torch.linalg.vector_norm(x, p, d, k), p=p, a=dims,
                keepdim=keepdim)
    add("norm", xz, lambda x, _: torch.linalg.vector_norm(x), p=2)
    add("norm", x345, lambda x, _: torch.linalg.vector_norm(x, INF, (-1, 0)), p=INF, a=(-1, 0))
    add("norm", x345, lambda x, _: torch.linalg.vector_norm(x, 3, (), True), p=3, keepdim=True)
    add("norm", randn(()), lambda x, _: torch.linalg.vector_norm(x, 2), p=2)
    add("norm", randn(0, 3), lambda x, _: torch.linalg.vector_norm(x, 2, (0,)), p=2, a=(0,))
    add("norm", randn(0, 3), lambda x, _: torch.linalg.vector_norm(x, 0, (0,)), p=0, a=(0,))
    add("norm", randn(0, 3), lambda x, _: torch.linalg.vector_norm(x, -1, (1,)), p=-1, a=(1,))
    for p, dim, eps in [(2, 1, 1e-12), (1, 0, 1e-12), (INF, -1, 1e-12), (2, 1, 0.5), (3, 0, 1e-12)]:
        add("normalize", xz, lambda x, _, p=p, d=dim, e=eps: F.normalize(x, p, d, e), p=p, dim=dim, eps=eps)
    add("normalize", randn(()), lambda x, _: F.normalize(x, 2, 0), p=2, dim=0, eps=1e-12)
    tiny = randn(3, 4)
    tiny[1] *= 1e-10
    tiny[2] = 0
    for x1, x2, dim, eps in [(randn(3, 4), randn(3, 4), 1, 1e-8), (tiny, randn(3, 4), 1, 1e-8),
                             (randn(2, 1, 4), randn(3, 4), -1, 1e-8), (randn(3, 4), randn(1, 4), 0, 0.5),
                             (randn(4), randn(4), 0, 1e-8)]:
        add("cosine_similarity", x1, lambda a, b, d=dim, e=eps: F.cosine_similarity(a, b, d, e), x2=x2, dim=dim, eps=eps)
    for x1, x2, p, eps, keepdim in [(randn(3, 4), randn(3, 4), 2, 1e-6, False), (randn(3, 4), randn(3, 4), 1, 1e-6, True),
                                    (randn(3, 4), randn(3, 4), INF, 1e-6, False), (randn(2, 3, 4), randn(4), 2, 1e-6, False),
                                    (randn(4), randn(4), 3, 1e-3, True), (randn(3, 4), randn(3, 4), -1, 1e-6, False),
                                    (randn(()), randn(()), 2, 1e-6, False)]:
        add("pairwise_distance", x1, lambda a, b, p=p, e=eps, k=keepdim: F.pairwise_distance(a, b, p, e, k), x2=x2, p=p,
            eps=eps, keepdim=keepdim)
    return c


def norm_cases():
    """(op, x, groups, weight, bias, running_mean, running_var, use_input_stats, momentum, eps)."""
    c = []
    c.append(("group_norm", randn(2, 6, 5), 3, randn(6), randn(6), None, None, True, 0.0, 1e-5))
    c.append(("group_norm", randn(2, 4, 3, 3), 2, None, None, None, None, True, 0.0, 1e-5))
    c.append(("group_norm", randn(3, 4, 2), 4, randn(4), None, None, None, True, 0.0, 1e-3))
    c.append(("group_norm", randn(3, 6), 2, randn(6), None, None, None, True, 0.0, 1e-5))
    c.append(("group_norm", randn(2, 6, 7), 1, randn(6), randn(6), None, None, True, 0.0, 1e-5))
    c.append(("group_norm", randn(0, 6, 3), 3, randn(6), randn(6), None, None, True, 0.0, 1e-5))
    c.append(("instance_norm", randn(2, 3, 5), 0, randn(3), randn(3), randn(3), randn(3).abs(), True, 0.2, 1e-5))
    c.append(("instance_norm", randn(3, 2, 4, 3), 0, None, None, None, None, True, 0.1, 1e-5))
    c.append(("instance_norm", randn(2, 3, 2), 0, None, None, randn(3), randn(3).abs(), True, 0.5, 1e-3))
    c.append(("instance_norm", randn(2, 3, 5), 0, randn(3), randn(3), randn(3), randn(3).abs(), False, 0.1, 1e-5))
    return c


def opt(t):
    return "{}" if t is None else lits(t)


def main(out):
    header(out, "flip, roll, repeat, tile, repeat_interleave, vector norms, normalize, cosine_similarity, "
                "pairwise_distance (f64)",
           "{op, shape, input, shape2, input2, a (dims, shifts, sizes, repeats), b (roll's dims), p, eps, dim "
           "(-1000: none), keepdim, out shape, out, grad, grad2}")
    out.write("const ManipCase kManipCases[] = {\n")
    for op, x, x2, a, b, p, eps, dim, keepdim, f in manip_cases():
        xs = [x.clone().requires_grad_()] + ([] if x2 is None else [x2.clone().requires_grad_()])
        y = f(xs[0], xs[1] if len(xs) > 1 else None)
        g = grads(y, xs)
        out.write("    {\"%s\", %s, %s, %s, %s, %s, %s, %s, %s, %d, %s,\n     %s, %s,\n     %s,\n     %s},\n" %
                  (op, ints(x.shape), lits(x), ints(() if x2 is None else x2.shape), opt(x2), ints(a), ints(b),
                   lit(p), lit(eps), dim, cbool(keepdim), ints(y.shape), lits(y.detach()), lits(g[0]),
                   "{}" if x2 is None else lits(g[1])))
    out.write("};\n\n")
    out.write("// {op, shape, input, groups, weight, bias, running mean, running var ({}: none), use_input_stats, "
              "momentum, eps, out, grad, weight grad, bias grad, running mean and var after}\n")
    out.write("const NormCase kNormCases[] = {\n")
    for op, x, groups, w, bia, rm, rv, use_input, momentum, eps in norm_cases():
        xs = [t.clone().requires_grad_() for t in (x, w, bia) if t is not None]
        xg = xs[0]
        wg = xs[1] if w is not None else None
        bg = xs[-1] if bia is not None else None
        rm1 = None if rm is None else rm.clone()
        rv1 = None if rv is None else rv.clone()
        if op == "group_norm":
            y = F.group_norm(xg, groups, wg, bg, eps)
        else:
            y = F.instance_norm(xg, rm1, rv1, wg, bg, use_input, momentum, eps)
        g = grads(y, xs)
        gw = g[1] if w is not None else None
        gb = g[-1] if bia is not None else None
        out.write("    {\"%s\", %s, %s, %d, %s, %s, %s, %s, %s, %s, %s,\n     %s,\n     %s,\n     %s, %s, %s, %s},\n" %
                  (op, ints(x.shape), lits(x), groups, opt(w), opt(bia), opt(rm), opt(rv), cbool(use_input), lit(momentum),
                   lit(eps), lits(y.detach()), lits(g[0]), opt(gw), opt(gb), opt(rm1), opt(rv1)))
    out.write("};\n\n")
    # nn.InstanceNorm1d(3, momentum=0.3, affine=True, track_running_stats=True): two training passes, one in eval mode
    m = torch.nn.InstanceNorm1d(3, momentum=0.3, affine=True, track_running_stats=True).double()
    inputs = [randn(2, 3, 4), randn(4, 3, 3), randn(2, 3, 5)]
    outs, stats = [], []
    for i, x in enumerate(inputs):
        m.train(i < 2)
        outs.append(m(x).detach())
        stats.append(torch.cat([m.running_mean, m.running_var]))
    out.write("// nn.InstanceNorm1d(3, momentum=0.3, affine=True, track_running_stats=True): two training passes and one in "
              "eval mode: {input shape, input, output, running mean and var after}\n")
    out.write("const InstanceNormPass kInstanceNormPasses[] = {\n")
    for x, y, s in zip(inputs, outs, stats):
        out.write("    {%s, %s,\n     %s,\n     %s},\n" % (ints(x.shape), lits(x), lits(y), lits(s)))
    out.write("};\n")


if __name__ == "__main__":
    main(sys.stdout)

#!/usr/bin/env python3
"""Prints tests/pytorch_linalg_table.inc, the reference of test_linalg: torch.mm, bmm, mv, dot, vdot, outer,
ger, addmm, addmv, addr, baddbmm, addbmm, tensordot, kron, trace, diagonal, diag, diag_embed, linalg.cross,
cross, cdist and einsum of PyTorch 1.13, in f64: each output and the gradients of sum(out * u) of every input
(u = 1, 2, 3, ...). Run with Debian's python3-torch:
    cd tests/tools && /usr/bin/python3 pytorch_linalg_table.py > ../pytorch_linalg_table.inc"""
import sys

import torch

from cpp_literals import ints, lit, lits
from torch_tables import header, weights_for

INF = float("inf")
NAN = float("nan")
NONE = -1000  # no dim
GEN = torch.Generator().manual_seed(11)


def randn(*shape):
    return torch.randn(shape, generator=GEN, dtype=torch.float64)


def grads(out, inputs):
    """d(sum(out * u)) for each input (zeros where torch gives none)."""
    g = torch.autograd.grad((out * weights_for(out)).sum(), inputs, allow_unused=True) if out.numel() else [None] * len(inputs)
    return [torch.zeros_like(t) if gi is None else gi for t, gi in zip(inputs, g)]


def function_cases():
    """(op, [inputs], a, b, s1, s2, f) with f(*inputs) the PyTorch call; a and b integer arguments, s1 and s2
    beta and alpha (or cdist's p)."""
    c = []

    def add(op, xs, f, a=(), b=(), s1=1.0, s2=1.0):
        c.append((op, xs, a, b, s1, s2, f))

    add("mm", [randn(3, 4), randn(4, 5)], torch.mm)
    add("mm", [randn(0, 3), randn(3, 2)], torch.mm)
    add("mm", [randn(2, 0), randn(0, 3)], torch.mm)
    add("bmm", [randn(2, 3, 4), randn(2, 4, 5)], torch.bmm)
    add("bmm", [randn(0, 2, 3), randn(0, 3, 4)], torch.bmm)
    add("mv", [randn(3, 4), randn(4)], torch.mv)
    add("mv", [randn(0, 4), randn(4)], torch.mv)
    add("dot", [randn(5), randn(5)], torch.dot)
    add("dot", [randn(0), randn(0)], torch.dot)
    add("vdot", [randn(4), randn(4)], torch.vdot)
    add("outer", [randn(3), randn(4)], torch.outer)
    add("ger", [randn(2), randn(3)], torch.ger)
    with_nan = randn(3, 5)
    with_nan[1, 2] = NAN
    with_nan[0, 0] = INF
    for inp, beta, alpha in [(randn(3, 5), 1.0, 1.0), (randn(5), 0.5, 2.0), (randn(3, 1), -1.0, 0.5), (with_nan, 0.0, 1.5)]:
        add("addmm", [inp, randn(3, 4), randn(4, 5)], lambda i, a, b, be=beta, al=alpha: torch.addmm(i, a, b, beta=be, alpha=al),
            s1=beta, s2=alpha)
    for inp, beta, alpha in [(randn(3), 1.0, 1.0), (randn(1), 2.0, -1.0), (torch.tensor([NAN, INF, 1.0], dtype=torch.float64), 0.0, 1.0)]:
        add("addmv", [inp, randn(3, 4), randn(4)], lambda i, a, b, be=beta, al=alpha: torch.addmv(i, a, b, beta=be, alpha=al),
            s1=beta, s2=alpha)
    for inp, beta, alpha in [(randn(3, 4), 1.0, 1.0), (randn(1, 4), 2.0, -1.0), (randn(4), 0.0, 0.5)]:
        add("addr", [inp, randn(3), randn(4)], lambda i, a, b, be=beta, al=alpha: torch.addr(i, a, b, beta=be, alpha=al),
            s1=beta, s2=alpha)
    for inp, beta, alpha in [(randn(2, 3, 5), 1.0, 1.0), (randn(3, 5), 0.5, 2.0), (randn(2, 3, 5) * NAN, 0.0, -1.0)]:
        add("baddbmm", [inp, randn(2, 3, 4), randn(2, 4, 5)],
            lambda i, a, b, be=beta, al=alpha: torch.baddbmm(i, a, b, beta=be, alpha=al), s1=beta, s2=alpha)
    for inp, beta, alpha in [(randn(3, 5), 1.0, 1.0), (randn(5), 0.5, 1.5), (randn(3, 5) * INF, 0.0, 2.0)]:
        add("addbmm", [inp, randn(4, 3, 2), randn(4, 2, 5)],
            lambda i, a, b, be=beta, al=alpha: torch.addbmm(i, a, b, beta=be, alpha=al), s1=beta, s2=alpha)
    add("tensordot_int", [randn(2, 3, 4), randn(3, 4, 5)], lambda a, b: torch.tensordot(a, b, 2), a=(2,))
    add("tensordot_int", [randn(2, 3), randn(4)], lambda a, b: torch.tensordot(a, b, 0), a=(0,))
    add("tensordot_int", [randn(2, 3), randn(3, 2)], lambda a, b: torch.tensordot(a, b, 1), a=(1,))
    add("tensordot", [randn(3, 2, 4), randn(2, 5, 3)], lambda a, b: torch.tensordot(a, b, ([1, 0], [0, 2])),
        a=(1, 0), b=(0, 2))
    add("tensordot", [randn(3, 4), randn(2, 4)], lambda a, b: torch.tensordot(a, b, ([-1], [-1])), a=(-1,), b=(-1,))
    add("tensordot", [randn(2, 1), randn(3, 4)], lambda a, b: torch.tensordot(a, b, ([1], [0])), a=(1,), b=(0,))
    add("tensordot", [randn(2, 3), randn(1, 4)], lambda a, b: torch.tensordot(a, b, ([1], [0])), a=(1,), b=(0,))
    add("tensordot", [randn(0, 3), randn(3, 2)], lambda a, b: torch.tensordot(a, b, ([1], [0])), a=(1,), b=(0,))
    add("kron", [randn(2, 3), randn(4, 2)], torch.kron)
    add("kron", [randn(3), randn(2, 2)], torch.kron)
    add("kron", [randn(2, 1, 2), randn(3, 2)], torch.kron)
    add("kron", [randn(0, 2), randn(2, 2)], torch.kron)
    # not a tall matrix: torch 1.13's trace gradient of a [4, 2] puts a 1 at [3, 0] too (test_linalg checks kiln's)
    for shape in [(3, 3), (3, 5), (0, 3)]:
        add("trace", [randn(*shape)], torch.trace)
    x34, x234 = randn(3, 4), randn(2, 3, 4)
    for off, d1, d2 in [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (5, 0, 1), (-3, 0, 1), (2, 1, 0)]:
        add("diagonal", [x34], lambda x, o=off, a=d1, b=d2: torch.diagonal(x, o, a, b), a=(off, d1, d2))
    for off, d1, d2 in [(1, 2, 0), (-1, -1, -2), (0, 1, 2), (-2, 0, 2)]:
        add("diagonal", [x234], lambda x, o=off, a=d1, b=d2: torch.diagonal(x, o, a, b), a=(off, d1, d2))
    add("diagonal", [randn(2, 3, 4, 5)], lambda x: torch.diagonal(x, 1, 1, 3), a=(1, 1, 3))
    add("diagonal", [randn(2, 0, 3)], lambda x: torch.diagonal(x, 0, 1, 2), a=(0, 1, 2))
    for x, off in [(randn(4), 0), (randn(4), 2), (randn(3), -1), (randn(3, 4), 1), (randn(3, 4), -2), (randn(0), 1),
                   (randn(4, 3), 0)]:
        add("diag", [x], lambda t, o=off: torch.diag(t, o), a=(off,))
    for x, off, d1, d2 in [(randn(2, 3), 0, -2, -1), (randn(2, 3), 1, 0, 2), (randn(2, 3), -2, 2, 0), (randn(3), 0, 0, 1),
                           (randn(3), -1, 1, 0), (randn(2, 0), 1, -1, 0), (randn(2, 3, 2), 2, 1, 3)]:
        add("diag_embed", [x], lambda t, o=off, a=d1, b=d2: torch.diag_embed(t, o, a, b), a=(off, d1, d2))
    add("linalg_cross", [randn(4, 3), randn(4, 3)], lambda a, b: torch.linalg.cross(a, b), a=(-1,))
    add("linalg_cross", [randn(3, 4), randn(3, 1)], lambda a, b: torch.linalg.cross(a, b, dim=0), a=(0,))
    add("linalg_cross", [randn(2, 1, 3), randn(1, 4, 3)], lambda a, b: torch.linalg.cross(a, b, dim=-1), a=(-1,))
    add("cross", [randn(2, 3, 3), randn(2, 3, 3)], lambda a, b: torch.cross(a, b), a=(NONE,))
    add("cross", [randn(3, 2), randn(3, 2)], lambda a, b: torch.cross(a, b, 0), a=(0,))
    x1, x2 = randn(4, 3), randn(5, 3)
    x2[1] = x1[0]  # a zero distance
    x2[3, 1] = x1[2, 1]  # a zero coordinate difference
    for p in [2.0, 1.0, 0.0, 3.0, 0.5, 1.5, INF]:
        add("cdist", [x1, x2], lambda a, b, p=p: torch.cdist(a, b, p), s1=p)
    add("cdist", [randn(2, 1, 4, 3), randn(3, 5, 3)], lambda a, b: torch.cdist(a, b), s1=2.0)
    add("cdist", [randn(0, 3), randn(2, 3)], lambda a, b: torch.cdist(a, b), s1=2.0)
    add("cdist", [randn(3, 0), randn(2, 0)], lambda a, b: torch.cdist(a, b, 1.0), s1=1.0)
    return c


def einsum_cases():
    """(equation, [shapes])."""
    return [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("bij,bjk->bik", [(1, 3, 4), (2, 4, 5)]),
        ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
        ("i,j->ij", [(3,), (4,)]),
        ("ii", [(3, 3)]),
        ("ii->i", [(3, 3)]),
        ("iji->j", [(3, 4, 3)]),
        ("ij->ji", [(3, 4)]),
        ("ij", [(3, 4)]),
        ("ji", [(3, 4)]),
        ("ij->", [(3, 4)]),
        ("i->", [(4,)]),
        ("i,i->", [(5,), (5,)]),
        ("i,i", [(5,), (5,)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("ij,ij->ij", [(3, 4), (3, 4)]),
        ("ij,ij->ij", [(1, 4), (3, 4)]),
        ("ij,ij->", [(3, 4), (3, 4)]),
        ("ij,jk->ik", [(3, 1), (4, 5)]),
        ("ijk,ikl->jl", [(2, 3, 4), (2, 4, 5)]),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
        ("...ij->...ji", [(2, 3, 4)]),
        ("a...b,b...->...a", [(2, 3, 4, 5), (5, 3, 4)]),
        ("i...->i", [(2, 3, 4)]),
        ("...ii->...i", [(2, 3, 3)]),
        ("b...,b...", [(2, 3), (2, 1)]),
        ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
        ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
        ("i,i,i->", [(4,), (4,), (4,)]),
        ("ab,cd->abcd", [(2, 3), (2, 2)]),
        ("AB,Bc->Ac", [(2, 3), (3, 4)]),
        ("ba,aC", [(2, 3), (3, 4)]),
        (" i j , j k -> i k ", [(2, 3), (3, 2)]),
        ("ij,jk->ik", [(0, 3), (3, 2)]),
        ("ij,jk->ik", [(2, 0), (0, 3)]),
        ("...->...", [(2, 3)]),
        ("ij,kl,jl->ik", [(2, 3), (4, 5), (3, 5)]),
        (",i->i", [(), (3,)]),
        ("ij,ji->", [(3, 4), (4, 3)]),
        ("bij,bjk->kbi", [(2, 3, 4), (2, 4, 5)]),
        ("i,j,k->ijk", [(2,), (3,), (4,)]),
        ("ab,ab,ab->a", [(2, 3), (2, 3), (1, 3)]),
        ("bij,bjk->bik", [(0, 3, 4), (0, 4, 2)]),
    ]


def write_case(out, op, eq, xs, a, b, s1, s2, y, g):
    out.write("    {\"%s\", \"%s\", {%s},\n     {%s},\n     %s, %s, %s, %s, %s, %s,\n     {%s}},\n" %
              (op, eq, ", ".join(ints(x.shape) for x in xs), ", ".join(lits(x) for x in xs), ints(a), ints(b), lit(s1),
               lit(s2), ints(y.shape), lits(y.detach()), ", ".join(lits(t) for t in g)))


def main(out):
    header(out, "mm, bmm, mv, dot, vdot, outer, ger, addmm, addmv, addr, baddbmm, addbmm, tensordot, kron, trace, "
                "diagonal, diag, diag_embed, linalg.cross, cross, cdist, einsum (f64)",
           "{op, equation, shapes, inputs, a (dims, offsets), b (tensordot's second dims), s1 (beta, p), s2 (alpha), "
           "out shape, out, grad of each input}")
    out.write("const LinalgCase kLinalgCases[] = {\n")
    for op, xs, a, b, s1, s2, f in function_cases():
        ins = [x.clone().requires_grad_() for x in xs]
        y = f(*ins)
        write_case(out, op, "", xs, a, b, s1, s2, y, grads(y, ins))
    for eq, shapes in einsum_cases():
        xs = [randn(*s) for s in shapes]
        ins = [x.clone().requires_grad_() for x in xs]
        y = torch.einsum(eq, *ins)
        write_case(out, "einsum", eq, xs, (), (), 0.0, 0.0, y, grads(y, ins))
    out.write("};\n")


if __name__ == "__main__":
    main(sys.stdout)

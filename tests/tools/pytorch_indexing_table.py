#!/usr/bin/env python3
"""Prints tests/pytorch_indexing_table.inc: PyTorch's scatter, scatter_reduce, index_fill, index_copy,
index_put, take and take_along_dim (kIndexTable), and searchsorted, bucketize, histc, bincount, meshgrid,
cartesian_prod, tril_indices, triu_indices, rot90 and block_diag (kCallTable), the reference of tests/test_indexing_more.cpp. Run with Debian's
python3-torch (1.13) from the repository root:
    /usr/bin/python3 tests/tools/pytorch_indexing_table.py > tests/pytorch_indexing_table.inc
torch is needed only to regenerate the table, never by the tests.

Each row: an op, self (dtype, shape, values), a dim, index tensors, a src / source / values tensor (of
self's dtype; none: shape [] and no values), a reduce string, a flag (include_self, accumulate), a number
(the filled value); torch's result, and for floating rows the gradients of sum(out * u), u = 1, 2, 3, ...
(flattened, out's dtype) with respect to self and src. Places hit twice appear only where torch defines the
result (scatter_reduce, index_put with accumulate): kiln's rule for the others is tested by hand.
"""
import math
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpp_literals import cbool, ints, lits  # noqa: E402

warnings.filterwarnings("ignore")
NAN, INF = float("nan"), float("inf")
DT = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32, "i64": torch.int64, "bool": torch.bool}


def vals(n, seed, scale=1.0):
    """n distinct-ish values in [-3, 3) from a seed."""
    return [(((i + 1) * 7919 + seed * 104729) % 601) / 100.0 * scale - 3.0 for i in range(n)]


def ints_vals(n, seed, bound):
    return [((i + 1) * 7919 + seed * 104729) % bound for i in range(n)]


def tensor(dtype, shape, v):
    if dtype in ("i32", "i64"):
        return torch.tensor([int(x) for x in v], dtype=DT[dtype]).reshape(shape)
    if dtype == "bool":
        return torch.tensor([x != 0 for x in v], dtype=torch.bool).reshape(shape)
    return torch.tensor(v, dtype=DT[dtype]).reshape(shape)


def idx(shape, v):
    return torch.tensor(v, dtype=torch.int64).reshape(shape)


# (name, op, dtype, self shape, self values, dim, [(index shape, index values)], src shape or None, src values,
#  reduce, flag, value)
ROWS = []


def row(name, op, dt, shape, sv, dim, indices, src_shape=None, src=(), reduce="", flag=False, value=0.0):
    ROWS.append((name, op, dt, shape, list(sv), dim, indices, src_shape, list(src), reduce, flag, value))


# scatter: distinct targets per column (torch defines these), src larger than the index, negative dims
row("scatter_2d_dim0", "scatter", "f64", [3, 4], vals(12, 1), 0, [([2, 3], [2, 0, 1, 0, 2, 2])], [2, 4], vals(8, 2))
row("scatter_2d_dim1", "scatter", "f64", [3, 5], vals(15, 3), 1, [([3, 2], [4, 0, 1, 3, 2, 0])], [3, 3], vals(9, 4))
row("scatter_3d_dim_minus2", "scatter", "f64", [2, 3, 2], vals(12, 5), -2,
    [([2, 2, 2], [2, 1, 0, 0, 1, 2, 0, 1])], [2, 2, 2], vals(8, 6))
row("scatter_i64", "scatter", "i64", [2, 4], ints_vals(8, 7, 100), 1, [([2, 2], [3, 1, 0, 2])], [2, 2],
    [-(2 ** 62), 5, 2 ** 62 + 3, -7])
row("scatter_f32", "scatter", "f32", [4], vals(4, 8), 0, [([2], [3, 0])], [3], [NAN, -0.0, 1.5])
row("scatter_bool", "scatter", "bool", [2, 3], [1, 0, 1, 0, 0, 1], 1, [([2, 1], [1, 2])], [2, 1], [1, 0])
row("scatter_rank0", "scatter", "f64", [], [2.5], 0, [([], [0])], [], [-1.0])
row("scatter_value", "scatter_value", "f64", [3, 4], vals(12, 9), 1, [([3, 2], [0, 3, 1, 1, 2, 0])], value=-4.5)
row("scatter_value_i32", "scatter_value", "i32", [2, 3], ints_vals(6, 10, 50), 0, [([2, 3], [1, 1, 0, 1, 0, 0])],
    value=7)
# scatter_reduce: every reduce, with and without self, duplicates, ties for amax / amin, zeros for prod
DUP = ([3, 4], [0, 2, 2, 1, 0, 2, 0, 1, 2, 2, 0, 1])
for r in ("sum", "prod", "mean", "amax", "amin"):
    for inc in (True, False):
        tag = r + ("" if inc else "_no_self")
        row("reduce_" + tag + "_dim0", "scatter_reduce", "f64", [3, 4], vals(12, 11), 0, [DUP], [3, 4], vals(12, 12),
            r, inc)
        row("reduce_" + tag + "_dim1", "scatter_reduce", "f64", [2, 5], vals(10, 13), -1,
            [([2, 6], [4, 0, 4, 4, 1, 0, 2, 2, 2, 0, 3, 2])], [2, 7], vals(14, 14), r, inc)
        row("reduce_" + tag + "_i64", "scatter_reduce", "i64", [5], [4, -9, 2, 0, 11], 0,
            [([7], [0, 1, 0, 3, 3, 3, 1])], [7], [3, -5, 6, 2, -8, 9, 4], r, inc)
TIE_SELF = [2.0, 5.0, -1.0, 0.0]
TIE_SRC = [5.0, 2.0, 5.0, -1.0, 3.0, -1.0, 0.0, 0.0]
TIE_IDX = ([8], [1, 0, 1, 2, 1, 2, 3, 3])
for r in ("amax", "amin"):
    for inc in (True, False):
        row("reduce_ties_%s%s" % (r, "" if inc else "_no_self"), "scatter_reduce", "f64", [4], TIE_SELF, 0,
            [TIE_IDX], [8], TIE_SRC, r, inc)
ZERO_SELF = [2.0, 0.0, 3.0, 0.0, 1.5]
ZERO_SRC = [0.0, 2.0, 4.0, 0.0, 0.0, -1.0, 3.0, 0.5, 0.0]
ZERO_IDX = ([9], [0, 0, 1, 2, 2, 3, 3, 4, 1])
for inc in (True, False):
    row("reduce_prod_zeros" + ("" if inc else "_no_self"), "scatter_reduce", "f64", [5], ZERO_SELF, 0, [ZERO_IDX],
        [9], [v if i != 4 else 2.0 for i, v in enumerate(ZERO_SRC)], "prod", inc)
row("reduce_amax_nan", "scatter_reduce", "f32", [3], [1.0, 2.0, 3.0], 0, [([4], [0, 0, 2, 2])], [4],
    [NAN, 4.0, -1.0, INF], "amax", True)
row("reduce_amin_nan", "scatter_reduce", "f32", [3], [1.0, 2.0, 3.0], 0, [([4], [0, 0, 2, 2])], [4],
    [5.0, NAN, -INF, 1.0], "amin", False)
# the scatter kernels of prod / amax / amin: NaN in self and src, two zeros in a place (src's own, and self's
# with src's), f32 (dyadic values: every product exact), i32 and i64 products that wrap, a 3-d index smaller
# than self and src off the dim, and an empty index
for r in ("amax", "amin"):
    for inc in (True, False):
        row("reduce_%s_nan_self%s" % (r, "" if inc else "_no_self"), "scatter_reduce", "f64", [4],
            [NAN, 3.0, -0.0, NAN], 0, [([5], [0, 0, 2, 1, 2])], [5], [1.0, NAN, 0.0, 2.0, -2.0], r, inc)
for inc in (True, False):
    row("reduce_prod_two_zeros" + ("" if inc else "_no_self"), "scatter_reduce", "f64", [3], [2.0, 3.0, 0.0], 0,
        [([6], [0, 0, 1, 1, 2, 2])], [6], [0.0, 0.0, 5.0, 1.0, 0.0, 4.0], "prod", inc)
    for r in ("prod", "amax", "amin"):
        row("reduce_%s_f32%s" % (r, "" if inc else "_no_self"), "scatter_reduce", "f32", [3, 4],
            [0.5, -2.0, 1.5, 4.0, 0.0, 3.0, -0.25, 1.0, 2.0, -1.0, 0.75, -3.0], 1,
            [([3, 5], [3, 0, 3, 1, 1, 2, 0, 2, 0, 3, 1, 1, 1, 3, 0])], [3, 6],
            [2.0, -0.5, 0.0, 1.25, -4.0, 8.0, 0.5, 0.5, -2.0, 3.0, 0.0, 1.0, -1.5, 2.0, 0.25, -0.5, 1.0, 6.0],
            r, inc)
        row("reduce_%s_i32%s" % (r, "" if inc else "_no_self"), "scatter_reduce", "i32", [3], [7, -3, 65536], 0,
            [([6], [2, 0, 2, 1, 0, 2])], [6], [65536, -5, 3, 2 ** 30, 11, -(2 ** 31)], r, inc)
        row("reduce_%s_i64_wraps%s" % (r, "" if inc else "_no_self"), "scatter_reduce", "i64", [2], [3, -(2 ** 40)],
            0, [([4], [0, 1, 0, 1])], [4], [2 ** 40 + 1, 2 ** 30, -(2 ** 35), 7], r, inc)
        row("reduce_%s_3d%s" % (r, "" if inc else "_no_self"), "scatter_reduce", "f64", [2, 3, 4], vals(24, 15), 1,
            [([2, 5, 3], ints_vals(30, 16, 3))], [2, 5, 4], vals(40, 17), r, inc)
        row("reduce_%s_empty_index%s" % (r, "" if inc else "_no_self"), "scatter_reduce", "f64", [2, 3], vals(6, 18),
            1, [([2, 0], [])], [2, 0], [], r, inc)
row("reduce_mean_i32_floor", "scatter_reduce", "i32", [4], [7, -3, 4, 0], 0, [([5], [0, 1, 1, 0, 2])], [5],
    [2, -4, 2, -3, -1], "mean", True)
row("reduce_rank0", "scatter_reduce", "f64", [], [2.0], 0, [([], [0])], [], [3.0], "prod", True)
# index_fill, index_copy
row("index_fill_dim1", "index_fill", "f64", [3, 4], vals(12, 21), 1, [([2], [3, 1])], value=2.25)
row("index_fill_dim0_repeat_negative", "index_fill", "f64", [3, 2], vals(6, 22), -2, [([3], [2, 0, -1])], value=-1.0)
row("index_fill_i64_0d_index", "index_fill", "i64", [2, 3], ints_vals(6, 23, 40), 1, [([], [2])], value=-5)
row("index_copy_dim0", "index_copy", "f64", [4, 3], vals(12, 24), 0, [([2], [3, 1])], [2, 3], vals(6, 25))
row("index_copy_dim_minus1", "index_copy", "f64", [2, 2, 4], vals(16, 26), -1, [([3], [0, 3, 2])], [2, 2, 3],
    vals(12, 27))
# index_put: one to three index tensors that broadcast, negative indices, accumulate with repeats
row("index_put_one", "index_put", "f64", [4, 3], vals(12, 31), 0, [([2], [3, -4])], [2, 3], vals(6, 32))
row("index_put_two_broadcast", "index_put", "f64", [3, 4, 2], vals(24, 33), 0,
    [([2, 1], [0, 2]), ([3], [1, -1, 2])], [2, 3, 2], vals(12, 34))
row("index_put_values_broadcast", "index_put", "f64", [3, 4], vals(12, 35), 0, [([2], [2, 0]), ([2], [1, 3])],
    [], [9.5])
row("index_put_accumulate", "index_put", "f64", [3, 4], vals(12, 36), 0, [([5], [1, 2, 1, 1, 0])], [5, 4],
    vals(20, 37), flag=True)
row("index_put_accumulate_two", "index_put", "f64", [2, 3], vals(6, 38), 0,
    [([4], [1, 1, 0, 1]), ([4], [2, 2, -3, 2])], [4], vals(4, 39), flag=True)
row("index_put_all_dims_i64", "index_put", "i64", [2, 2, 3], ints_vals(12, 40, 30), 0,
    [([2], [1, 0]), ([2], [0, 1]), ([2], [2, -3])], [2], [-100, 200])
# take, take_along_dim
row("take", "take", "f64", [3, 4], vals(12, 41), 0, [([2, 3], [0, 11, -1, 5, -12, 7])])
row("take_i32", "take", "i32", [5], ints_vals(5, 42, 90), 0, [([4], [4, 0, 4, -2])])
row("take_along_dim_flat", "take_along_dim_flat", "f64", [2, 3], vals(6, 43), 0, [([4], [5, 0, 3, 3])])
row("take_along_dim_1", "take_along_dim", "f64", [3, 4], vals(12, 44), 1, [([3, 2], [3, 0, 1, 1, 2, 0])])
row("take_along_dim_broadcast", "take_along_dim", "f64", [1, 4, 2], vals(8, 45), -2,
    [([3, 2, 1], [0, 3, 1, 2, 3, 3])])


def apply(op, x, dim, indices, src, reduce, flag, value):
    if op == "scatter":
        return x.scatter(dim, indices[0], src)
    if op == "scatter_value":
        return x.scatter(dim, indices[0], value)
    if op == "scatter_reduce":
        return x.scatter_reduce(dim, indices[0], src, reduce, include_self=flag)
    if op == "index_fill":
        return x.index_fill(dim, indices[0], value)
    if op == "index_copy":
        return x.index_copy(dim, indices[0], src)
    if op == "index_put":
        return x.index_put(tuple(indices), src, accumulate=flag)
    if op == "take":
        return torch.take(x, indices[0])
    if op == "take_along_dim_flat":
        return torch.take_along_dim(x, indices[0])
    if op == "take_along_dim":
        return torch.take_along_dim(x, indices[0], dim)
    raise ValueError(op)


def flat(t):
    return [float(v) for v in t.flatten().tolist()]


def main():
    out = sys.stdout
    out.write("// Generated by tests/tools/" + os.path.basename(sys.argv[0]) + " with PyTorch " + torch.__version__ +
              ": do not edit.\n")
    out.write("// {name, op, dtype, self shape, self, dim, index shapes, indices, src shape, src (none: {}), reduce, flag,\n"
              "//  value, out shape, out, d(sum(out * u))/dself, /dsrc (floating rows; u = 1, 2, ...)}\n")
    out.write("const std::vector<IndexRow> kIndexTable = {\n")
    for name, op, dt, shape, sv, dim, indices, src_shape, src, reduce, flag, value in ROWS:
        floating = dt in ("f32", "f64")
        x = tensor(dt, shape, sv).requires_grad_(floating)
        s = tensor(dt, src_shape, src).requires_grad_(floating) if src_shape is not None else None
        ix = [idx(sh, v) for sh, v in indices]
        if dt in ("i32", "i64", "bool") and op in ("scatter_value", "index_fill"):
            value = int(value)
        y = apply(op, x, dim, ix, s, reduce, flag, value)
        gx, gs = [], []
        if floating:
            # torch 1.13's scatter backward fails for src larger than the index: differentiate by src's leading
            # block (the rest of src is unused: gradient 0)
            lead = s
            if op.startswith("scatter") and s is not None and s.shape != ix[0].shape:
                lead = s.detach()[tuple(slice(0, n) for n in ix[0].shape)].clone().requires_grad_()
                y = apply(op, x, dim, ix, lead, reduce, flag, value)
            u = torch.arange(1, y.numel() + 1, dtype=y.dtype).reshape(y.shape)
            wrt = [x] + ([lead] if s is not None else [])
            g = torch.autograd.grad((y * u).sum(), wrt, allow_unused=True)
            gx = flat(g[0]) if g[0] is not None else [0.0] * x.numel()
            if s is not None:
                gl = g[1] if g[1] is not None else torch.zeros_like(lead)
                full = torch.zeros_like(s.detach())
                full[tuple(slice(0, n) for n in gl.shape)] = gl
                gs = flat(full)
        out.write("    {\"%s\", \"%s\", \"%s\", %s, %s, %d, {%s}, {%s}, %s, %s, \"%s\", %s, %s, %s, %s, %s, %s},\n" % (
            name, op, dt, ints(shape), lits(flat(x.detach())), dim, ", ".join(ints(sh) for sh, _ in indices),
            ", ".join(ints(v) for _, v in indices), ints(src_shape or []), lits(src), reduce, cbool(flag),
            lits([value]), ints(y.shape), lits(flat(y.detach())), lits(gx), lits(gs)))
    out.write("};\n")



# ---------------------------------------------------------------- searches, counts and arrangements
# (name, op, inputs [(dtype, shape, values)], ints, string, flag, reals): torch's outputs, and for floating
# inputs the gradients of the sum over outputs k of sum(out_k * u_k) (u_k = 1, 2, ... of out_k's dtype).
CALLS = []


def call(name, op, inputs, ints_=(), string="", flag=False, reals=()):
    CALLS.append((name, op, inputs, list(ints_), string, flag, list(reals)))


SEQ = [-2.0, -1.0, 0.5, 0.5, 0.5, 3.0, 7.0]
PROBE = [0.5, -3.0, 7.0, 8.0, NAN, 0.4, 3.0, -1.0, INF, -INF, 0.6, -2.0]
call("searchsorted_left", "searchsorted", [("f64", [7], SEQ), ("f64", [3, 4], PROBE)])
call("searchsorted_right", "searchsorted", [("f64", [7], SEQ), ("f64", [3, 4], PROBE)], flag=True)
call("searchsorted_side_right_i32", "searchsorted", [("f32", [7], SEQ), ("f32", [12], PROBE)], [1], "right")
call("searchsorted_batched", "searchsorted", [("f64", [2, 4], [0, 1, 2, 3, -5, -5, 0, 9]),
                                              ("f64", [2, 3], [1, 2.5, -9, -5, 0, 10])])
call("searchsorted_sorter", "searchsorted", [("f64", [5], [3.0, -1.0, 2.0, 0.0, 2.0]), ("f64", [4], [2.0, -2, 5, 0]),
                                             ("i64", [5], [1, 3, 2, 4, 0])], string="left")
call("searchsorted_ints", "searchsorted", [("i64", [5], [1, 3, 3, 8, 2 ** 40]), ("i64", [4], [3, 0, 2 ** 40, 9])],
     flag=True)
call("searchsorted_scalar_value", "searchsorted", [("f64", [7], SEQ), ("f64", [], [0.5])])
call("bucketize_left", "bucketize", [("f64", [3, 4], PROBE), ("f64", [7], SEQ)])
call("bucketize_right_i32", "bucketize", [("f32", [12], PROBE), ("f32", [7], SEQ)], [1], flag=True)
# The binary search's probes (torch's cus_lower_bound / cus_upper_bound): sequences of every length up to 9
# and 1000, with duplicates, probed at every element, between, beyond both ends, NaN and the infinities; then
# sequences that are not sorted or hold NaN, where the answer is the one torch's probing order gives.


def search_seq(n, seed, sort=True, nan_every=0):
    """n values from a few distinct ones (duplicates); NaN at every nan_every-th place when given."""
    v = [float(x) - 3.0 for x in ints_vals(n, seed, n // 2 + 3)] if n < 100 else vals(n, seed, 2.0)
    if sort:
        v.sort()
    elif v == sorted(v):
        v.reverse()
    if nan_every:
        v = [NAN if i % nan_every == nan_every - 1 else x for i, x in enumerate(v)]
    return v


def search_probes(seq, count, seed):
    """The sequence's elements (count of them: all of a short one), points between them, beyond both ends, NaN
    and +-inf."""
    finite = sorted(x for x in seq if x == x) or [0.0]
    picks = finite if len(finite) <= count else [finite[i] for i in ints_vals(count, seed, len(finite))]
    return picks + [x + 0.5 for x in picks[: count // 2]] + [finite[0] - 1, finite[-1] + 1, NAN, INF, -INF]


for n in (1, 2, 3, 7, 8, 9, 1000):
    SQ = search_seq(n, 60 + n)
    PR = search_probes(SQ, 40 if n == 1000 else n, 70 + n)
    for side in ("left", "right"):
        call("searchsorted_n%d_%s" % (n, side), "searchsorted", [("f64", [n], SQ), ("f64", [len(PR)], PR)],
             string=side)
    if n > 1:
        US = search_seq(n, 80 + n, sort=False, nan_every=3 if n % 2 else 0)
        UP = search_probes(US, 40 if n == 1000 else n, 90 + n)
        for right in (False, True):
            call("searchsorted_unsorted_n%d_%s" % (n, "right" if right else "left"), "searchsorted",
                 [("f64", [n], US), ("f64", [len(UP)], UP)], flag=right)
SQ9 = search_seq(9, 7)
call("searchsorted_f32_int32_out", "searchsorted", [("f32", [9], SQ9), ("f32", [2, 9], search_probes(SQ9, 9, 8))],
     [1], flag=True)
call("searchsorted_i32", "searchsorted", [("i32", [8], sorted(ints_vals(8, 9, 11))), ("i32", [6], [0, 3, 5, 10, 11, -1])],
     [1], "right")
call("searchsorted_batched_long", "searchsorted",
     [("f64", [3, 9], search_seq(9, 10) + search_seq(9, 11) + search_seq(9, 12, sort=False, nan_every=4)),
      ("f64", [3, 5], [-2.0, 0.0, NAN, 5.5, -9.0, 1.0, 1.5, INF, -1.0, 3.0, 0.0, -3.0, 2.0, 4.0, NAN])], string="right")
call("searchsorted_batched_3d", "searchsorted",
     [("f64", [2, 2, 3], search_seq(3, 13) + search_seq(3, 14) + search_seq(3, 15) + search_seq(3, 16)),
      ("f64", [2, 2, 4], [float(x) - 6.0 for x in ints_vals(16, 17, 13)])])
US9 = search_seq(9, 18, sort=False)
call("searchsorted_sorter_n9", "searchsorted", [("f64", [9], US9), ("f64", [9], search_probes(US9, 3, 19)),
                                                ("i64", [9], sorted(range(9), key=lambda i: (US9[i], i)))],
     string="right")
call("searchsorted_sorter_not_sorting", "searchsorted", [("f64", [9], US9), ("f64", [9], search_probes(US9, 3, 20)),
                                                         ("i64", [9], [4, 0, 8, 1, 7, 2, 6, 3, 5])])
call("searchsorted_batched_sorter", "searchsorted",
     [("f64", [2, 5], [3.0, -1.0, 2.0, 0.0, 2.0, 1.0, NAN, 0.0, -4.0, 1.0]), ("f64", [2, 3], [2.0, -2.0, 5.0, 0.0, 1.0, NAN]),
      ("i64", [2, 5], [1, 3, 2, 4, 0, 3, 2, 0, 4, 1])], flag=True)
call("searchsorted_empty_sequence", "searchsorted", [("f64", [0], []), ("f64", [3], [1.0, NAN, -1.0])])
call("searchsorted_empty_values", "searchsorted", [("f64", [9], SQ9), ("f64", [0, 2], [])])
call("searchsorted_batched_empty_sequence", "searchsorted", [("f64", [2, 0], []), ("f64", [2, 3], [1, NAN, -1, 0, 2, 3])])
call("searchsorted_int_sequence_float_values", "searchsorted", [("i64", [7], [-3, -1, 0, 0, 2, 5, 9]),
                                                                 ("f64", [6], [0.0, -0.5, 2.5, NAN, 9.0, -4.0])])
call("bucketize_scalar", "bucketize", [("f64", [], [0.5]), ("f64", [9], SQ9)], flag=True)
call("bucketize_n1000_i32", "bucketize", [("f32", [3, 13], search_probes(search_seq(1000, 21), 23, 22)),
                                          ("f32", [1000], search_seq(1000, 21))], [1])
# no NaN: torch 1.13 counts a NaN in bin 0 (its position is a cast of NaN); kiln counts none (tested by hand)
HX = [0.0, 0.25, 1.0, 0.99, -0.5, 2.0, 1.5, 1.75, 0.5, 2.0, 5.0, 0.3, 1.1, 3.0]
call("histc_range", "histc", [("f64", [14], HX)], [4], reals=[0.0, 2.0])
call("histc_data_range_f32", "histc", [("f32", [2, 6], HX[:10] + HX[11:13])], [5])
call("histc_equal_data", "histc", [("f32", [3], [2.0, 2.0, 2.0])], [4])
call("histc_f32_edges", "histc", [("f32", [9], [0.1, 0.2, 0.3, 0.7, 0.9, 1.0, 0.0, 0.35, 0.65])], [7],
     reals=[0.0, 1.0])
call("histc_min_eq_max_given", "histc", [("f64", [5], [1.0, 2.0, 3.0, 2.5, 1.0])], [3], reals=[2.0, 2.0])
call("bincount", "bincount", [("i64", [8], [1, 3, 1, 0, 7, 3, 3, 1])])
call("bincount_minlength", "bincount", [("i32", [3], [1, 0, 1])], [6])
call("bincount_weights_f64", "bincount", [("i64", [6], [2, 0, 2, 2, 4, 0]), ("f64", [6], [0.5, 1.5, -2, 3.25, 1, 1])])
call("bincount_weights_f32", "bincount", [("i64", [4], [1, 1, 3, 0]), ("f32", [4], [0.1, 0.2, 0.3, 0.4])], [2])
call("bincount_empty", "bincount", [("i64", [0], [])], [3])
call("meshgrid_ij", "meshgrid", [("f64", [3], [1, 2, 3]), ("f64", [2], [-1, -2]), ("f64", [], [5])], string="ij")
call("meshgrid_xy", "meshgrid", [("f64", [3], [1, 2, 3]), ("f64", [2], [-1, -2]), ("f64", [4], [7, 8, 9, 10])],
     string="xy")
call("meshgrid_one", "meshgrid", [("i64", [4], [4, 3, 2, 1])], string="xy")
call("cartesian_prod", "cartesian_prod", [("f64", [2], [1, 2]), ("f64", [3], [-1, -2, -3]), ("f64", [2], [9, 8])])
call("cartesian_prod_one", "cartesian_prod", [("i64", [3], [5, 6, 7])])
for r, c, o in ((4, 3, 0), (3, 5, 1), (5, 4, -2), (0, 3, 0), (3, 3, 5), (3, 3, -5)):
    call("tril_indices_%d_%d_%d" % (r, c, o), "tril_indices", [], [r, c, o])
    call("triu_indices_%d_%d_%d" % (r, c, o), "triu_indices", [], [r, c, o])
X234 = vals(24, 51)
for k in (1, 2, 3, 0, -1, 5):
    call("rot90_k%d" % k if k >= 0 else "rot90_k_minus1", "rot90", [("f64", [2, 3, 4], X234)], [k, 0, 1])
call("rot90_dims_2_minus3", "rot90", [("f64", [2, 3, 4], X234)], [1, 2, -3])
call("block_diag", "block_diag", [("f64", [2, 2], [1, 2, 3, 4]), ("f64", [], [5]), ("f64", [3], [6, 7, 8]),
                                  ("f64", [2, 1], [9, 10])])
call("block_diag_promote", "block_diag", [("i64", [1, 2], [1, 2]), ("f64", [2, 2], [3, 4, 5, 6])])
call("block_diag_empty_block", "block_diag", [("f64", [0, 2], []), ("f64", [2, 0], []), ("f64", [1], [3])])


def run_call(op, ts, ints_, string, flag, reals):
    if op == "searchsorted":
        kw = {"out_int32": bool(ints_ and ints_[0]), "right": flag}
        if string:
            kw["side"] = string
        if len(ts) > 2:
            kw["sorter"] = ts[2]
        return [torch.searchsorted(ts[0], ts[1], **kw)]
    if op == "bucketize":
        return [torch.bucketize(ts[0], ts[1], out_int32=bool(ints_ and ints_[0]), right=flag)]
    if op == "histc":
        lo, hi = reals if reals else (0.0, 0.0)
        return [torch.histc(ts[0], bins=ints_[0], min=lo, max=hi)]
    if op == "bincount":
        return [torch.bincount(ts[0], ts[1] if len(ts) > 1 else None, minlength=ints_[0] if ints_ else 0)]
    if op == "meshgrid":
        return list(torch.meshgrid(*ts, indexing=string))
    if op == "cartesian_prod":
        return [torch.cartesian_prod(*ts)]
    if op == "tril_indices":
        return [torch.tril_indices(*ints_)]
    if op == "triu_indices":
        return [torch.triu_indices(*ints_)]
    if op == "rot90":
        return [torch.rot90(ts[0], ints_[0], ints_[1:])]
    if op == "block_diag":
        return [torch.block_diag(*ts)]
    raise ValueError(op)


def lit_tensor(dt, shape, v):
    return "{\"%s\", %s, %s}" % (dt, ints(shape), lits(v))


def dtype_name(t):
    return {torch.float32: "f32", torch.float64: "f64", torch.int32: "i32", torch.int64: "i64",
            torch.bool: "bool"}[t.dtype]


def main_calls():
    out = sys.stdout
    out.write("// {name, op, inputs {dtype, shape, values}, ints, string, flag, reals, torch's outputs, the gradients of\n"
              "//  sum_k sum(out_k * u_k) by each floating input (u_k = 1, 2, ...; {} for the others)}\n")
    out.write("const std::vector<CallRow> kCallTable = {\n")
    for name, op, inputs, ints_, string, flag, reals in CALLS:
        ts = [tensor(dt, sh, v) for dt, sh, v in inputs]
        for t in ts:
            if t.is_floating_point() and op not in ("histc", "searchsorted", "bucketize", "bincount"):
                t.requires_grad_()
        outs = run_call(op, ts, ints_, string, flag, reals)
        grads = [[] for _ in ts]
        wrt = [t for t in ts if t.requires_grad]
        if wrt:
            loss = sum((o * torch.arange(1, o.numel() + 1, dtype=o.dtype).reshape(o.shape)).sum() for o in outs
                       if o.is_floating_point())
            g = torch.autograd.grad(loss, wrt, allow_unused=True)
            k = 0
            for i, t in enumerate(ts):
                if t.requires_grad:
                    grads[i] = flat(g[k]) if g[k] is not None else [0.0] * t.numel()
                    k += 1
        out.write("    {\"%s\", \"%s\", {%s}, %s, \"%s\", %s, %s, {%s}, {%s}},\n" % (
            name, op, ", ".join(lit_tensor(dt, sh, flat(t.detach())) for (dt, sh, _), t in zip(inputs, ts)),
            ints(ints_), string, cbool(flag), lits(reals),
            ", ".join(lit_tensor(dtype_name(o), list(o.shape), flat(o.detach())) for o in outs),
            ", ".join(lits(g) for g in grads)))
    out.write("};\n")


if __name__ == "__main__":
    main()
    main_calls()

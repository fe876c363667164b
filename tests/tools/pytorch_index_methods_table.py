#!/usr/bin/env python3
"""Prints tests/pytorch_index_methods_table.inc, the reference of tests/test_index_methods.cpp: torch.Tensor's
indexing methods (gather, index_select, scatter_add, index_add, scatter, scatter_reduce, index_fill, index_copy,
index_put, take, take_along_dim) and index_put with bool mask indices (alone, broadcast values or one per masked
place, accumulate, masks with integer indices, several masks, none true), in f64 with the gradients of each f64
input. Run with Debian's python3-torch (1.13) from the repository root:
    /usr/bin/python3 tests/tools/pytorch_index_methods_table.py > tests/pytorch_index_methods_table.inc
torch is needed only to regenerate the table, never by the tests. Call ids ending in "_mask" are index_put
with the mask inputs in the positions the id names; the test maps each id to the same kiln call."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from call_tables import write_cases  # noqa: E402

GEN = torch.Generator().manual_seed(23)
F64, I64 = torch.float64, torch.int64


def randn(*shape):
    return torch.randn(shape, generator=GEN, dtype=F64)


def ix(v):
    return torch.tensor(v, dtype=I64)


def mask(v):
    return torch.tensor(v, dtype=torch.bool)


CALLS = {
    "gather_d1": lambda x, i: x.gather(1, i),
    "index_select_dm1": lambda x, i: x.index_select(-1, i),
    "scatter_add_d0": lambda x, i, s: x.scatter_add(0, i, s),
    "index_add_d1_alpha": lambda x, i, s: x.index_add(1, i, s, alpha=-1.5),
    "scatter_d1": lambda x, i, s: x.scatter(1, i, s),
    "scatter_value_d0": lambda x, i: x.scatter(0, i, 2.5),
    "scatter_reduce_amax_d0": lambda x, i, s: x.scatter_reduce(0, i, s, "amax", include_self=False),
    "index_fill_d0": lambda x, i: x.index_fill(0, i, -4.0),
    "index_copy_dm1": lambda x, i, s: x.index_copy(-1, i, s),
    "index_put_two": lambda x, i, j, v: x.index_put((i, j), v),
    "take": lambda x, i: x.take(i),
    "take_along_dim_d1": lambda x, i: x.take_along_dim(i, 1),
    "take_along_dim_flat": lambda x, i: x.take_along_dim(i),
    # index_put with bool masks: (self, mask or index..., values)
    "put_mask": lambda x, m, v: x.index_put((m,), v),
    "put_mask_acc": lambda x, m, v: x.index_put((m,), v, accumulate=True),
    "put_mask_index": lambda x, m, i, v: x.index_put((m, i), v),
    "put_index_mask_acc": lambda x, i, m, v: x.index_put((i, m), v, accumulate=True),
    "put_mask_mask": lambda x, m, n, v: x.index_put((m, n), v),
}


def cases():
    c = []

    def add(name, call, *inputs):
        c.append((name, call, list(inputs), True))

    # the methods (their rows need no mask)
    add("gather", "gather_d1", randn(3, 4), ix([[0, 3], [2, 2], [1, 0]]))
    add("index_select", "index_select_dm1", randn(2, 5), ix([4, 0, 4, 1]))
    add("scatter_add", "scatter_add_d0", randn(3, 2), ix([[0, 2], [0, 0], [2, 1]]), randn(3, 2))
    add("index_add", "index_add_d1_alpha", randn(2, 4), ix([3, 0, 3]), randn(2, 3))
    add("scatter", "scatter_d1", randn(2, 4), ix([[3, 1], [0, 2]]), randn(2, 2))
    add("scatter_value", "scatter_value_d0", randn(3, 2), ix([[2, 0], [1, 2]]))
    add("scatter_reduce", "scatter_reduce_amax_d0", randn(3, 2), ix([[1, 0], [1, 0], [2, 0]]),
        torch.tensor([[0.5, -1.0], [2.0, -1.0], [0.25, 3.0]], dtype=F64))
    add("index_fill", "index_fill_d0", randn(3, 2), ix([2, 0]))
    add("index_copy", "index_copy_dm1", randn(2, 4), ix([1, 3]), randn(2, 2))
    add("index_put", "index_put_two", randn(3, 4), ix([2, 0]), ix([-1, 1]), randn(2))
    add("take", "take", randn(3, 4), ix([[11, 0], [-1, 5]]))
    add("take_along_dim", "take_along_dim_d1", randn(3, 4), ix([[3], [0], [1]]))
    add("take_along_dim_flat", "take_along_dim_flat", randn(2, 3), ix([5, 0, 2]))
    # index_put with bool masks: values that need no count (a where in kiln, lazy masks too) ...
    rows = mask([True, False, True])
    add("mask_rows_broadcast", "put_mask", randn(3, 4), rows, randn(4))
    add("mask_rows_broadcast_leading_one", "put_mask", randn(3, 4), rows, randn(1, 4))
    add("mask_rows_accumulate", "put_mask_acc", randn(3, 4), rows, randn(4))
    add("mask_full_scalar", "put_mask", randn(3, 4), randn(3, 4) > 0, randn())
    add("mask_full_scalar_accumulate", "put_mask_acc", randn(2, 3), mask([[True, False, True], [False, True, True]]),
        randn())
    add("mask_2d_of_3d_broadcast", "put_mask", randn(2, 3, 2), mask([[True, True, False], [False, True, False]]),
        randn(2))
    add("mask_none_true", "put_mask", randn(4, 3), mask([False] * 4), randn(3))
    add("mask_column_broadcast", "put_mask", randn(3, 4), rows, randn(4, 1)[:1, :1].reshape(1))
    add("mask_empty_self", "put_mask_acc", randn(0, 3), mask([]), randn(3))
    # ... and values with one entry per true element (computed masks only in kiln)
    add("mask_rows_per_place", "put_mask", randn(3, 4), rows, randn(2, 4))
    add("mask_full_per_place", "put_mask", randn(3, 4), mask([[True, False, False, True]] * 3), randn(6))
    add("mask_full_per_place_accumulate", "put_mask_acc", randn(2, 3), mask([[False, True, True], [True, False, True]]),
        randn(4))
    add("mask_2d_of_3d_per_place", "put_mask", randn(2, 3, 2), mask([[True, False, True], [False, True, False]]),
        randn(3, 2))
    add("mask_none_true_per_place", "put_mask", randn(4, 3), mask([False] * 4), randn(0, 3))
    add("mask_then_index", "put_mask_index", randn(3, 4), rows, ix([3, -4]), randn(2))
    add("index_then_mask_accumulate", "put_index_mask_acc", randn(3, 4), ix([2, 2, 0]),
        mask([False, True, False, False]), randn(3))
    add("mask_then_mask", "put_mask_mask", randn(3, 4, 2), rows, mask([False, False, True, False]), randn(2))
    return c


def main():
    write_cases(sys.stdout, "torch.Tensor's indexing methods, and index_put with bool mask indices, of PyTorch 1.13"
                            " in f64.", CALLS, cases())


if __name__ == "__main__":
    main()

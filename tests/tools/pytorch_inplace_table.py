#!/usr/bin/env python3
"""Prints tests/pytorch_inplace_table.inc, the reference of tests/test_inplace_methods.cpp: PyTorch 1.13's in-place
methods applied to a non-leaf (x * 1, so that the op is recorded) in f64: the values and the gradients of
sum(out * u) with respect to every f64 input (u = 1, 2, 3, ...). A case names a call; the test makes the same
call under the same name. Run with Debian's python3-torch from the repository root:
    cd tests/tools && /usr/bin/python3 pytorch_inplace_table.py > ../pytorch_inplace_table.inc"""
import sys

import torch

from call_tables import write_cases

GEN = torch.Generator().manual_seed(17)


def randn(*shape):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64)


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def calls():
    """call id -> the PyTorch call; the test maps the same ids to kiln's calls."""
    return {
        "add_alpha": lambda x, y: (x * 1).add_(y, alpha=2.5),
        "sub_scalar": lambda x: (x * 1).sub_(1.5, alpha=2),
        "mul_": lambda x, y: (x * 1).mul_(y),
        "div_": lambda x, y: (x * 1).div_(y),
        "pow_": lambda x: (x * 1).pow_(3),
        "sqrt_": lambda x: (x * 1).neg_().abs_().add_(0.5).sqrt_(),
        "log_": lambda x: (x * 1).abs_().add_(0.5).log_(),
        "exp_": lambda x: (x * 1).exp_(),
        "tanh_": lambda x: (x * 1).tanh_(),
        "sigmoid_": lambda x: (x * 1).sigmoid_(),
        "clamp_": lambda x: (x * 1).clamp_(-0.5, 0.7),
        "relu_": lambda x: (x * 1).relu_(),
        "copy_": lambda x, y: (x * 1).copy_(y),
        "masked_fill_": lambda x, m: (x * 1).masked_fill_(m, 2.5),
        "index_add_": lambda x, i, s: (x * 1).index_add_(0, i, s, alpha=0.5),
        "index_copy_": lambda x, i, s: (x * 1).index_copy_(1, i, s),
        "index_put_acc": lambda x, i, v: (x * 1).index_put_((i,), v, accumulate=True),
        "scatter_": lambda x, i, s: (x * 1).scatter_(1, i, s),
        "scatter_add_": lambda x, i, s: (x * 1).scatter_add_(0, i, s),
        "index_fill_": lambda x, i: (x * 1).index_fill_(1, i, -1.0),
        "zero_then_add_": lambda x, y: (x * 1).zero_().add_(y),
    }


def cases():
    """(name, call id, inputs, with gradients)."""
    c = []
    def add(name, call, *inputs, grad=True):
        c.append((name, call, list(inputs), grad))
    add("add_alpha_broadcast", "add_alpha", randn(2, 3), randn(3))
    add("sub_scalar", "sub_scalar", randn(4))
    add("mul_broadcast", "mul_", randn(2, 3), randn(2, 1))
    add("div_", "div_", randn(3, 2), randn(3, 2).abs() + 0.5)
    add("pow_", "pow_", randn(5))
    for op in ["sqrt_", "log_", "exp_", "tanh_", "sigmoid_"]:
        add(op, op, randn(2, 3))
    add("clamp_", "clamp_", randn(6))
    add("relu_", "relu_", randn(6))
    add("copy_broadcast", "copy_", randn(2, 3), randn(1, 3))
    add("masked_fill_", "masked_fill_", randn(2, 3), t([[True, False, True]], torch.bool))
    add("index_add_", "index_add_", randn(3, 2), t([2, 0, 2], torch.int64), randn(3, 2))
    add("index_copy_", "index_copy_", randn(2, 4), t([3, 1], torch.int64), randn(2, 2))
    add("index_put_acc", "index_put_acc", randn(4), t([1, 1, 3], torch.int64), randn(3))
    add("scatter_", "scatter_", randn(2, 3), t([[2, 0], [1, 2]], torch.int64), randn(2, 2))
    add("scatter_add_", "scatter_add_", randn(3, 2), t([[0, 2], [0, 0]], torch.int64), randn(2, 2))
    add("index_fill_", "index_fill_", randn(2, 3), t([0, 2], torch.int64))
    add("zero_then_add_", "zero_then_add_", randn(2, 2), randn(2))
    return c


if __name__ == "__main__":
    write_cases(sys.stdout, "In-place methods of torch.Tensor (PyTorch 1.13) on a non-leaf, in f64.", calls(), cases())

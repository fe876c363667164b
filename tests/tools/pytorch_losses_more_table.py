#!/usr/bin/env python3
"""Prints tests/pytorch_losses_more_table.inc, the reference of test_losses_more: PyTorch 1.13's margin_ranking_loss,
hinge_embedding_loss, soft_margin_loss, multilabel_soft_margin_loss, multi_margin_loss, multilabel_margin_loss,
triplet_margin_loss, cosine_embedding_loss, poisson_nll_loss and gaussian_nll_loss (torch.nn.functional), each with
the reductions none, mean and sum, in f64: the losses and the gradients of sum(out * u) with respect to every f64
input (u = 1, 2, 3, ...). A case names a call; tests/test_losses_more.cpp makes the same call under the same name.
Run with Debian's python3-torch from the repository root:
    cd tests/tools && /usr/bin/python3 pytorch_losses_more_table.py > ../pytorch_losses_more_table.inc"""
import sys

import torch
import torch.nn.functional as F

from call_tables import write_cases

GEN = torch.Generator().manual_seed(13)
REDUCTIONS = ["none", "mean", "sum"]


def randn(*shape):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64)


def signs(*shape):
    return torch.randint(0, 2, shape, generator=GEN).to(torch.float64) * 2 - 1


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def calls():
    """call id -> the PyTorch call; the test maps the same ids to kiln's calls."""
    c = {}
    for r in REDUCTIONS:
        c["margin_ranking_" + r] = lambda a, b, y, r=r: F.margin_ranking_loss(a, b, y, 0.5, reduction=r)
        c["hinge_embedding_" + r] = lambda x, y, r=r: F.hinge_embedding_loss(x, y, 1.5, reduction=r)
        c["soft_margin_" + r] = lambda x, y, r=r: F.soft_margin_loss(x, y, reduction=r)
        c["multilabel_soft_margin_" + r] = lambda x, y, r=r: F.multilabel_soft_margin_loss(x, y, reduction=r)
        c["multilabel_soft_margin_w_" + r] = lambda x, y, w, r=r: F.multilabel_soft_margin_loss(x, y, w, reduction=r)
        c["multi_margin_" + r] = lambda x, y, r=r: F.multi_margin_loss(x, y, reduction=r)
        c["multi_margin_p2_w_" + r] = lambda x, y, w, r=r: F.multi_margin_loss(x, y, 2, 0.7, w, reduction=r)
        c["multilabel_margin_" + r] = lambda x, y, r=r: F.multilabel_margin_loss(x, y, reduction=r)
        c["triplet_" + r] = lambda a, p, n, r=r: F.triplet_margin_loss(a, p, n, reduction=r)
        c["triplet_p1_swap_" + r] = lambda a, p, n, r=r: F.triplet_margin_loss(a, p, n, 2.0, 1, 1e-3, True, reduction=r)
        c["cosine_embedding_" + r] = lambda a, b, y, r=r: F.cosine_embedding_loss(a, b, y, 0.2, reduction=r)
        c["poisson_" + r] = lambda x, y, r=r: F.poisson_nll_loss(x, y, reduction=r)
        c["poisson_rate_full_" + r] = lambda x, y, r=r: F.poisson_nll_loss(x, y, False, True, eps=1e-3, reduction=r)
        c["gaussian_" + r] = lambda x, y, v, r=r: F.gaussian_nll_loss(x, y, v, reduction=r)
        c["gaussian_full_" + r] = lambda x, y, v, r=r: F.gaussian_nll_loss(x, y, v, True, 0.1, reduction=r)
    return c


def cases():
    """(name, call id, inputs, with gradients)."""
    c = []
    def add(name, call, *inputs, grad=True):
        """grad: True, False, or one bool per input (PyTorch refuses some targets' gradients)."""
        c.append((name, call, list(inputs), grad))
    for r in REDUCTIONS:
        # ties input1 == input2 put a hinge exactly at its kink for target -1 with margin 0.5: avoided
        add("margin_ranking_" + r, "margin_ranking_" + r, randn(6), randn(6), signs(6))
        add("margin_ranking_broadcast_" + r, "margin_ranking_" + r, randn(2, 3), randn(1, 3), signs(2, 1))
        add("hinge_embedding_" + r, "hinge_embedding_" + r, randn(2, 4) * 2, t([[1.0, -1.0, 1.0, -1.0], [-1.0, 1.0, -1.0, 0.5]]))
        add("soft_margin_" + r, "soft_margin_" + r, randn(3, 4) * 3, signs(3, 4), grad=[True, False])
        add("multilabel_soft_margin_" + r, "multilabel_soft_margin_" + r, randn(3, 5), torch.rand(3, 5, generator=GEN, dtype=torch.float64))
        add("multilabel_soft_margin_w_" + r, "multilabel_soft_margin_w_" + r, randn(2, 4), signs(2, 4).clamp(0), randn(4).abs())
        add("multi_margin_" + r, "multi_margin_" + r, randn(4, 5), t([0, 4, 2, 2], torch.int64))
        add("multi_margin_1d_" + r, "multi_margin_" + r, randn(5), t(3, torch.int64))
        add("multi_margin_p2_w_" + r, "multi_margin_p2_w_" + r, randn(3, 4), t([1, 0, 3], torch.int64), randn(4).abs(),
            grad=[True, False, False])
        add("multilabel_margin_" + r, "multilabel_margin_" + r, randn(3, 5),
            t([[3, 0, -1, 1, 2], [1, 2, 4, 0, 3], [-1, 2, 0, 1, 1]], torch.int64))
        add("multilabel_margin_1d_" + r, "multilabel_margin_" + r, randn(4), t([2, 2, -1, 0], torch.int64))
        add("triplet_" + r, "triplet_" + r, randn(4, 3), randn(4, 3), randn(4, 3))
        add("triplet_1d_" + r, "triplet_" + r, randn(5), randn(5), randn(5))
        add("triplet_p1_swap_" + r, "triplet_p1_swap_" + r, randn(5, 3), randn(5, 3), randn(5, 3))
        add("cosine_embedding_" + r, "cosine_embedding_" + r, randn(4, 3), randn(4, 3), t([1.0, -1.0, -1.0, 1.0]))
        add("cosine_embedding_0d_" + r, "cosine_embedding_" + r, randn(3), randn(3), t(-1.0))
        add("poisson_" + r, "poisson_" + r, randn(2, 3), torch.rand(2, 3, generator=GEN, dtype=torch.float64) * 4)
        add("poisson_rate_full_" + r, "poisson_rate_full_" + r, randn(2, 3).abs(),
            t([[0.5, 1.0, 2.0], [3.5, 1.5, 7.0]]))
        add("gaussian_" + r, "gaussian_" + r, randn(2, 3), randn(2, 3), randn(2, 3).abs() + 0.1)
        add("gaussian_homoscedastic_" + r, "gaussian_" + r, randn(3, 2), randn(3, 2), randn(3).abs() + 0.1)
        add("gaussian_last_one_" + r, "gaussian_full_" + r, randn(2, 3), randn(2, 3), t([[0.05], [2.0]]))
    add("margin_ranking_empty", "margin_ranking_mean", randn(0), randn(0), signs(0), grad=False)
    add("soft_margin_empty_sum", "soft_margin_sum", randn(0, 2), signs(0, 2), grad=[True, False])
    return c


if __name__ == "__main__":
    write_cases(sys.stdout, "More losses of torch.nn.functional (PyTorch 1.13) in f64, reductions none, mean and sum.",
                calls(), cases())

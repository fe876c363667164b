#!/usr/bin/env python3
"""Prints tests/pytorch_parity_more_table.inc, the reference of test_parity_more: PyTorch 1.13's hypot, logaddexp2,
logit, sinc, deg2rad, rad2deg, float_power, fmax, fmin, heaviside, logical_xor, torch.special (xlog1py, entr, expit),
isclose, allclose, equal, the other names (cat, clip, arctan2, ...), movedim, select, ravel, atleast_*d,
broadcast_tensors, diagflat, inner, eye, linspace, logspace, full_like, Tensor's conveniences (clone, expand_as,
type_as, new_*), F.hardshrink, softshrink, tanhshrink, local_response_norm and torch.nn's loss and distance classes,
in f64 (and bool / i64 / f32 where the contract is about them): each case's outputs and the gradients of
sum(out * u) over its floating outputs (u = 1, 2, 3, ...) with respect to each f64 input. A case names a call;
tests/test_parity_more.cpp makes the same call under the same name. Run with Debian's python3-torch from the
repository root:
    cd tests/tools && /usr/bin/python3 pytorch_parity_more_table.py > ../pytorch_parity_more_table.inc"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from call_tables import write_cases

NAN, INF = float("nan"), float("inf")
GEN = torch.Generator().manual_seed(17)


def randn(*shape):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64)


def t(values, shape=None, dtype=torch.float64):
    x = torch.tensor(values, dtype=dtype)
    return x if shape is None else x.reshape(shape)


def unit(*shape):
    """Values in (0.05, 0.95)."""
    return torch.rand(*shape, generator=GEN, dtype=torch.float64) * 0.9 + 0.05


def b(value):
    return torch.tensor(value)


# call id -> the PyTorch call; tests/test_parity_more.cpp maps the same ids to kiln's calls.
CALLS = {
    "hypot": lambda a, c: torch.hypot(a, c),
    "logaddexp2": lambda a, c: torch.logaddexp2(a, c),
    "logit": lambda x: torch.logit(x),
    "logit_eps": lambda x: torch.logit(x, 0.1),
    "sinc": lambda x: torch.sinc(x),
    "deg2rad": lambda x: torch.deg2rad(x),
    "rad2deg": lambda x: torch.rad2deg(x),
    "float_power": lambda a, c: torch.float_power(a, c),
    "float_power_2_5": lambda a: torch.float_power(a, 2.5),
    "fmax": lambda a, c: torch.fmax(a, c),
    "fmin": lambda a, c: torch.fmin(a, c),
    "heaviside": lambda x, v: torch.heaviside(x, v),
    "logical_xor": lambda a, c: torch.logical_xor(a, c),
    "xlog1py": lambda x, y: torch.special.xlog1py(x, y),
    "entr": lambda x: torch.special.entr(x),
    "expit": lambda x: torch.special.expit(x),
    "isclose": lambda a, c: torch.isclose(a, c),
    "isclose_tol_nan": lambda a, c: torch.isclose(a, c, 0.1, 0.01, True),
    "allclose": lambda a, c: b(torch.allclose(a, c)),
    "allclose_tol": lambda a, c: b(torch.allclose(a, c, 0.1, 0.01)),
    "equal": lambda a, c: b(torch.equal(a, c)),
    "cat_d1": lambda a, c: torch.cat([a, c], 1),
    "concatenate_dm1": lambda a, c: torch.concatenate([a, c], -1) if hasattr(torch, "concatenate")
    else torch.cat([a, c], -1),
    "clip": lambda x: torch.clip(x, -0.5, 0.7),
    "arctan2": lambda a, c: torch.arctan2(a, c),
    "arcsinh": lambda x: torch.arcsinh(x),
    "negative": lambda x: torch.negative(x),
    "absolute": lambda x: torch.absolute(x),
    "fix": lambda x: torch.fix(x),
    "multiply": lambda a, c: torch.multiply(a, c),
    "divide": lambda a, c: torch.divide(a, c),
    "subtract": lambda a, c: torch.subtract(a, c),
    "greater_equal": lambda a, c: torch.greater_equal(a, c),
    "less": lambda a, c: torch.less(a, c),
    "not_equal": lambda a, c: torch.not_equal(a, c),
    "movedim": lambda x: torch.movedim(x, 0, -1),
    "movedim_list": lambda x: torch.movedim(x, (0, 3), (2, 0)),
    "moveaxis": lambda x: torch.moveaxis(x, -1, 1),
    "swapaxes": lambda x: torch.swapaxes(x, 0, 2),
    "select": lambda x: torch.select(x, 1, -1),
    "select_d0": lambda x: x.select(0, 1),
    "ravel": lambda x: torch.ravel(x),
    "atleast_1d": lambda x: torch.atleast_1d(x),
    "atleast_2d": lambda x: torch.atleast_2d(x),
    "atleast_3d": lambda x: torch.atleast_3d(x),
    "broadcast_tensors": lambda a, c: torch.broadcast_tensors(a, c),
    "broadcast_to": lambda x: torch.broadcast_to(x, (2, -1, 3)),
    "diagflat": lambda x: torch.diagflat(x),
    "diagflat_m1": lambda x: torch.diagflat(x, -1),
    "inner": lambda a, c: torch.inner(a, c),
    "eye_3": lambda: torch.eye(3, dtype=torch.float64),
    "eye_2x4": lambda: torch.eye(2, 4, dtype=torch.float64),
    "linspace_7": lambda: torch.linspace(-1.5, 2.0, 7, dtype=torch.float64),
    "linspace_1": lambda: torch.linspace(3.0, 5.0, 1, dtype=torch.float64),
    "linspace_0": lambda: torch.linspace(3.0, 5.0, 0, dtype=torch.float64),
    "logspace_5": lambda: torch.logspace(-2.0, 1.0, 5, dtype=torch.float64),
    "logspace_base2": lambda: torch.logspace(0.0, 3.5, 8, base=2.0, dtype=torch.float64),
    "full_like": lambda x: torch.full_like(x, 2.5),
    "clone": lambda x: x.clone() * 2,
    "expand_as": lambda x, o: x.expand_as(o),
    "reshape_as": lambda x, o: x.reshape_as(o),
    "view_as": lambda x, o: x.view_as(o),
    "type_as": lambda x, o: x.type_as(o),
    "new_zeros": lambda x: x.new_zeros((2, 3)),
    "new_ones": lambda x: x.new_ones((1, 2)),
    "new_full": lambda x: x.new_full((3,), 7),
    "hardshrink": lambda x: F.hardshrink(x),
    "hardshrink_1": lambda x: F.hardshrink(x, 1.0),
    "softshrink": lambda x: F.softshrink(x),
    "softshrink_0": lambda x: F.softshrink(x, 0.0),
    "tanhshrink": lambda x: F.tanhshrink(x),
    "lrn_3": lambda x: F.local_response_norm(x, 3),
    "lrn_2_args": lambda x: F.local_response_norm(x, 2, 0.5, 0.6, 2.0),
    "lrn_4": lambda x: F.local_response_norm(x, 4, 0.1),
    "CrossEntropyLoss": lambda x, t, w: nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(x, t),
    "NLLLoss": lambda x, t: nn.NLLLoss(ignore_index=1)(x, t),
    "BCELoss": lambda x, t, w: nn.BCELoss(weight=w)(x, t),
    "BCEWithLogitsLoss": lambda x, t, p: nn.BCEWithLogitsLoss(pos_weight=p)(x, t),
    "MSELoss": lambda x, t: nn.MSELoss(reduction="sum")(x, t),
    "L1Loss": lambda x, t: nn.L1Loss(reduction="none")(x, t),
    "SmoothL1Loss": lambda x, t: nn.SmoothL1Loss(beta=0.5)(x, t),
    "HuberLoss": lambda x, t: nn.HuberLoss(delta=2.0)(x, t),
    "KLDivLoss": lambda x, t: nn.KLDivLoss(reduction="batchmean", log_target=True)(x, t),
    "SoftMarginLoss": lambda x, t: nn.SoftMarginLoss()(x, t),
    "MultiLabelSoftMarginLoss": lambda x, t, w: nn.MultiLabelSoftMarginLoss(weight=w, reduction="sum")(x, t),
    "MultiMarginLoss": lambda x, t: nn.MultiMarginLoss(p=2, margin=0.5)(x, t),
    "MultiLabelMarginLoss": lambda x, t: nn.MultiLabelMarginLoss(reduction="none")(x, t),
    "MarginRankingLoss": lambda a, c, t: nn.MarginRankingLoss(margin=0.3)(a, c, t),
    "CosineEmbeddingLoss": lambda a, c, t: nn.CosineEmbeddingLoss(margin=0.2, reduction="sum")(a, c, t),
    "HingeEmbeddingLoss": lambda x, t: nn.HingeEmbeddingLoss(margin=0.5)(x, t),
    "TripletMarginLoss": lambda a, p, n: nn.TripletMarginLoss(margin=0.5, p=1.0, swap=True)(a, p, n),
    "PoissonNLLLoss": lambda x, t: nn.PoissonNLLLoss(log_input=False, full=True)(x, t),
    "GaussianNLLLoss": lambda x, t, v: nn.GaussianNLLLoss(full=True, reduction="none")(x, t, v),
    "CosineSimilarity": lambda a, c: nn.CosineSimilarity(dim=0)(a, c),
    "PairwiseDistance": lambda a, c: nn.PairwiseDistance(p=1.0, keepdim=True)(a, c),
}


def edges():
    """Values at the edges of most functions: signed zeros, infinities, NaN, large and tiny magnitudes."""
    return t([0.0, -0.0, 1.0, -2.5, INF, -INF, NAN, 1e300, -1e-300, 3.0, 0.5, -0.5])


def cases():
    ties = t([1.0, 2.0, NAN, NAN, -3.0, 0.0, -0.0, 4.0], [2, 4])
    other = t([1.0, 3.0, 2.0, NAN, -4.0, -0.0, 0.0, INF], [2, 4])
    return [
        ("hypot", "hypot", [randn(3, 4), randn(3, 4)], True),
        ("hypot_broadcast", "hypot", [randn(3, 1), randn(4)], True),
        ("hypot_large_small", "hypot", [t([1e200, -3e-200, 0.0, 5.0]), t([1e200, 4e-200, 2.0, -12.0])], True),
        ("hypot_edges", "hypot", [edges(), edges().flip(0)], False),
        ("hypot_zero_size", "hypot", [randn(0, 3), randn(3)], True),
        ("logaddexp2", "logaddexp2", [randn(2, 3) * 5, randn(3) * 5], True),
        ("logaddexp2_edges", "logaddexp2", [edges(), edges().flip(0)], False),
        ("logit", "logit", [unit(3, 4)], True),
        ("logit_edges", "logit", [t([0.0, 1.0, -0.5, 1.5, 0.5, NAN, 1e-300])], True),
        ("logit_eps", "logit_eps", [t([0.0, 0.05, 0.1, 0.5, 0.9, 0.95, 1.0, -1.0, 2.0, NAN])], True),
        ("logit_i64", "logit", [t([0, 1, 2], dtype=torch.int64)], False),
        ("sinc", "sinc", [t([0.0, -0.0, 0.5, -1.0, 1.0, 2.25, -3.7, 40.5])], True),
        ("sinc_random", "sinc", [randn(2, 5)], True),
        ("sinc_edges", "sinc", [edges()], False),
        ("sinc_i64", "sinc", [t([0, 1, -2], dtype=torch.int64)], False),
        ("deg2rad", "deg2rad", [randn(5) * 180], True),
        ("rad2deg", "rad2deg", [randn(2, 2) * 3], True),
        ("deg2rad_i64", "deg2rad", [t([0, 90, -180, 360], dtype=torch.int64)], False),
        ("float_power", "float_power", [unit(3, 2) * 3, randn(2)], True),
        ("float_power_i64", "float_power", [t([2, 3, -2], dtype=torch.int64), t([3, -1, 2], dtype=torch.int64)],
         False),
        ("float_power_scalar", "float_power_2_5", [unit(4) * 2], True),
        ("fmax", "fmax", [ties, other], True),
        ("fmin", "fmin", [ties, other], True),
        ("fmax_broadcast", "fmax", [randn(3, 1), randn(1, 4)], True),
        ("fmin_i64", "fmin", [t([1, 5, -2], dtype=torch.int64), t([2, 4, -2], dtype=torch.int64)], False),
        ("heaviside", "heaviside", [t([-1.5, 0.0, -0.0, 2.0, NAN, INF, -INF]), t([0.5])], False),
        ("heaviside_values", "heaviside", [t([[0.0, 1.0], [-1.0, 0.0]]), t([0.25, 0.75])], False),
        ("logical_xor", "logical_xor", [t([True, False, True, False], dtype=torch.bool),
                                        t([True, True, False, False], dtype=torch.bool)], False),
        ("logical_xor_f64", "logical_xor", [t([0.0, 2.0, NAN, -0.0]), t([[1.0], [0.0]])], False),
        ("xlog1py", "xlog1py", [randn(3, 4), unit(3, 4) * 4 - 0.5], True),
        ("xlog1py_zeros", "xlog1py", [t([0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 1.5]),
                                      t([-1.0, -2.0, 3.0, NAN, -1.0, INF, 0.0])], True),
        ("xlog1py_broadcast", "xlog1py", [randn(2, 1), unit(3)], True),
        ("entr", "entr", [t([0.5, 2.0, 0.0, -1.0, NAN, INF, 1e-300, 1.0])], True),
        ("entr_random", "entr", [unit(2, 3) * 3], True),
        ("expit", "expit", [randn(2, 3)], True),
        ("isclose", "isclose", [t([1.0, 1.0, NAN, INF, -INF, INF, 0.0, 1e-9]),
                                t([1.0 + 1e-6, 1.1, NAN, INF, INF, 1e308, 1e-8, 0.0])], False),
        ("isclose_tol_nan", "isclose_tol_nan", [t([1.0, 1.0, NAN, 2.0, 0.0]), t([1.05, 1.2, NAN, NAN, 0.011])],
         False),
        ("isclose_i64", "isclose", [t([1, 100000, 3], dtype=torch.int64), t([1, 100001, 4], dtype=torch.int64)],
         False),
        ("allclose_true", "allclose", [t([1.0, 2.0]), t([1.0 + 1e-7, 2.0])], False),
        ("allclose_false", "allclose", [t([1.0, 2.0]), t([1.0, 2.1])], False),
        ("allclose_nan", "allclose", [t([1.0, NAN]), t([1.0, NAN])], False),
        ("allclose_tol", "allclose_tol", [t([1.0, 2.0]), t([1.05, 2.1])], False),
        ("equal_true", "equal", [t([[1.0, 2.0]]), t([[1.0, 2.0]])], False),
        ("equal_values", "equal", [t([1.0, 2.0]), t([1.0, 3.0])], False),
        ("equal_shapes", "equal", [t([1.0, 2.0]), t([[1.0, 2.0]])], False),
        ("equal_nan", "equal", [t([NAN]), t([NAN])], False),
        ("cat", "cat_d1", [randn(2, 3), randn(2, 1)], True),
        ("concatenate", "concatenate_dm1", [randn(1, 2), randn(1, 3)], True),
        ("clip", "clip", [t([-1.0, -0.5, 0.0, 0.7, 2.0, NAN])], True),
        ("arctan2", "arctan2", [randn(3), randn(3)], True),
        ("arcsinh", "arcsinh", [randn(4)], True),
        ("negative", "negative", [randn(2, 2)], True),
        ("absolute", "absolute", [t([-1.5, 2.0, 3.25])], True),
        ("fix", "fix", [t([-1.5, 2.7, -0.2, 3.0])], True),
        ("multiply", "multiply", [randn(2, 3), randn(3)], True),
        ("divide", "divide", [randn(3), unit(3) + 1], True),
        ("subtract", "subtract", [randn(3), randn(2, 1)], True),
        ("greater_equal", "greater_equal", [t([1.0, 2.0, NAN]), t([1.0, 3.0, 0.0])], False),
        ("less", "less", [t([1.0, 2.0, NAN]), t([1.0, 3.0, 0.0])], False),
        ("not_equal", "not_equal", [t([1.0, 2.0, NAN]), t([1.0, 3.0, NAN])], False),
        ("movedim", "movedim", [randn(2, 3, 4)], True),
        ("movedim_list", "movedim_list", [randn(2, 3, 4, 5)], True),
        ("moveaxis", "moveaxis", [randn(2, 3, 4)], True),
        ("swapaxes", "swapaxes", [randn(2, 3, 4)], True),
        ("select", "select", [randn(2, 3, 4)], True),
        ("select_d0", "select_d0", [randn(3, 2)], True),
        ("ravel", "ravel", [randn(2, 3)], True),
        ("atleast_1d_0d", "atleast_1d", [t(2.5)], True),
        ("atleast_1d_2d", "atleast_1d", [randn(2, 2)], True),
        ("atleast_2d_0d", "atleast_2d", [t(2.5)], True),
        ("atleast_2d_1d", "atleast_2d", [randn(3)], True),
        ("atleast_3d_0d", "atleast_3d", [t(2.5)], True),
        ("atleast_3d_1d", "atleast_3d", [randn(3)], True),
        ("atleast_3d_2d", "atleast_3d", [randn(2, 3)], True),
        ("atleast_3d_4d", "atleast_3d", [randn(1, 2, 1, 2)], True),
        ("broadcast_tensors", "broadcast_tensors", [randn(3, 1), randn(2, 1, 4)], True),
        ("broadcast_to", "broadcast_to", [randn(4, 1)], True),
        ("diagflat", "diagflat", [randn(2, 2)], True),
        ("diagflat_m1", "diagflat_m1", [randn(3)], True),
        ("diagflat_0d", "diagflat", [t(1.5)], True),
        ("inner", "inner", [randn(2, 3), randn(4, 2, 3)], True),
        ("inner_1d", "inner", [randn(5), randn(5)], True),
        ("inner_0d", "inner", [t(2.0), randn(2, 3)], True),
        ("eye_3", "eye_3", [], False),
        ("eye_2x4", "eye_2x4", [], False),
        ("linspace_7", "linspace_7", [], False),
        ("linspace_1", "linspace_1", [], False),
        ("linspace_0", "linspace_0", [], False),
        ("logspace_5", "logspace_5", [], False),
        ("logspace_base2", "logspace_base2", [], False),
        ("full_like", "full_like", [randn(2, 3)], False),
        ("full_like_i64", "full_like", [t([1, 2], dtype=torch.int64)], False),
        ("clone", "clone", [randn(3)], True),
        ("expand_as", "expand_as", [randn(3, 1), randn(2, 3, 4)], [True, False]),
        ("reshape_as", "reshape_as", [randn(2, 3), randn(3, 2)], [True, False]),
        ("view_as", "view_as", [randn(6), randn(2, 3)], [True, False]),
        ("type_as", "type_as", [t([1, 2], dtype=torch.int64), randn(2)], False),
        ("type_as_f32", "type_as", [t([1.5, 2.25]), t([1.0], dtype=torch.float32)], False),
        ("new_zeros", "new_zeros", [t([1, 2], dtype=torch.int64)], False),
        ("new_ones", "new_ones", [randn(3)], False),
        ("new_full", "new_full", [t([True])], False),
        ("hardshrink", "hardshrink", [t([-1.0, -0.5, -0.2, 0.0, 0.5, 0.7, 3.0, NAN, -INF])], True),
        ("hardshrink_1", "hardshrink_1", [randn(3, 4)], True),
        ("softshrink", "softshrink", [t([-1.0, -0.5, -0.2, 0.0, 0.5, 0.7, 3.0, NAN, -INF])], True),
        ("softshrink_0", "softshrink_0", [t([-1.0, 0.0, -0.0, 2.0])], True),
        ("tanhshrink", "tanhshrink", [t([-3.0, -0.5, 0.0, 1e-3, 2.0, 20.0])], True),
        ("lrn_3", "lrn_3", [randn(2, 5, 4)], True),
        ("lrn_2_args", "lrn_2_args", [randn(2, 4, 3, 2)], True),
        ("lrn_4_5d", "lrn_4", [randn(1, 3, 2, 2, 2)], True),
        ("lrn_zero_size", "lrn_3", [randn(0, 3, 2)], True),
        ("CrossEntropyLoss", "CrossEntropyLoss", [randn(4, 3), t([0, 2, 1, 2], dtype=torch.int64),
                                                  t([1.0, 2.0, 0.5])], [True, False, False]),
        ("NLLLoss", "NLLLoss", [F.log_softmax(randn(5, 3), 1), t([0, 1, 2, 1, 0], dtype=torch.int64)], True),
        ("BCELoss", "BCELoss", [unit(2, 3), unit(2, 3), t([1.0, 2.0, 3.0])], [True, False, False]),
        ("BCEWithLogitsLoss", "BCEWithLogitsLoss", [randn(2, 3), unit(2, 3), t([1.0, 2.0, 0.5])],
         [True, True, False]),
        ("MSELoss", "MSELoss", [randn(2, 3), randn(2, 3)], True),
        ("L1Loss", "L1Loss", [randn(2, 3), randn(2, 3)], True),
        ("SmoothL1Loss", "SmoothL1Loss", [randn(3, 3), randn(3, 3)], True),
        ("HuberLoss", "HuberLoss", [randn(3, 3) * 3, randn(3, 3)], True),
        ("KLDivLoss", "KLDivLoss", [F.log_softmax(randn(3, 4), 1), F.log_softmax(randn(3, 4), 1)], True),
        ("SoftMarginLoss", "SoftMarginLoss", [randn(5), t([1.0, -1.0, 1.0, 1.0, -1.0])], [True, False]),
        ("MultiLabelSoftMarginLoss", "MultiLabelSoftMarginLoss",
         [randn(3, 4), t([[1, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 0]], dtype=torch.float64), t([1.0, 2.0, 0.5, 1.5])],
         [True, False, False]),
        ("MultiMarginLoss", "MultiMarginLoss", [randn(4, 3), t([0, 2, 1, 1], dtype=torch.int64)], True),
        ("MultiLabelMarginLoss", "MultiLabelMarginLoss",
         [randn(2, 4), t([[3, 0, -1, 1], [1, 2, 3, -1]], dtype=torch.int64)], True),
        ("MarginRankingLoss", "MarginRankingLoss", [randn(5), randn(5), t([1.0, -1.0, 1.0, -1.0, 1.0])],
         [True, True, False]),
        ("CosineEmbeddingLoss", "CosineEmbeddingLoss", [randn(3, 4), randn(3, 4), t([1.0, -1.0, -1.0])],
         [True, True, False]),
        ("HingeEmbeddingLoss", "HingeEmbeddingLoss", [randn(2, 3), t([[1.0, -1.0, 1.0], [-1.0, -1.0, 1.0]])],
         [True, False]),
        ("TripletMarginLoss", "TripletMarginLoss", [randn(3, 4), randn(3, 4), randn(3, 4)], True),
        ("PoissonNLLLoss", "PoissonNLLLoss", [unit(2, 3) * 3, t([[0.0, 1.0, 2.0], [3.0, 0.5, 4.0]])], [True, False]),
        ("GaussianNLLLoss", "GaussianNLLLoss", [randn(2, 3), randn(2, 3), unit(2, 3)], [True, True, True]),
        ("CosineSimilarity", "CosineSimilarity", [randn(3, 2), randn(3, 2)], True),
        ("PairwiseDistance", "PairwiseDistance", [randn(4, 3), randn(4, 3)], True),
    ]


def main():
    write_cases(sys.stdout, "More of PyTorch 1.13's functions, methods and other names, in f64 (bool, i64 and f32 "
                            "where noted).", CALLS, cases())


if __name__ == "__main__":
    main()

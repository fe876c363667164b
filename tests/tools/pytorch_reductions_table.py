#!/usr/bin/env python3
"""Prints tests/pytorch_reductions_table.inc, the reference of test_reductions: PyTorch 1.13's prod, amax, amin,
aminmax, any, all, count_nonzero, nansum, nanmean, isnan, isinf, isfinite, isposinf, isneginf, nan_to_num, median,
nanmedian, kthvalue, quantile, nanquantile, cummax, cummin, logcumsumexp, diff, lerp, addcmul, addcdiv, xlogy,
clamp_min, clamp_max, var_mean, std_mean and logaddexp, in f64 (and bool / i64 where the contract is about them):
each case's outputs and the gradients of sum(out * u) over its floating outputs (u = 1, 2, 3, ...) with respect to
each f64 input. A case names a call; tests/test_reductions.cpp makes the same call under the same name. Run with
Debian's python3-torch from the repository root:
    cd tests/tools && /usr/bin/python3 pytorch_reductions_table.py > ../pytorch_reductions_table.inc"""
import sys

import torch

from call_tables import write_cases

NAN, INF = float("nan"), float("inf")
GEN = torch.Generator().manual_seed(11)


def randn(*shape):
    return torch.randn(*shape, generator=GEN, dtype=torch.float64)


def t(values, shape=None, dtype=torch.float64):
    x = torch.tensor(values, dtype=dtype)
    return x if shape is None else x.reshape(shape)


def ties(*shape):
    """Small integers as f64: many ties."""
    return torch.randint(-2, 3, shape, generator=GEN).to(torch.float64)


def ranked(*shape):
    """A random permutation of distinct values (no ties)."""
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=GEN).to(torch.float64) * 0.5 - 3).reshape(shape)


# call id -> the PyTorch call; tests/test_reductions.cpp maps the same ids to kiln's calls.
CALLS = {
    "prod": lambda x: torch.prod(x),
    "prod_d1": lambda x: torch.prod(x, 1),
    "prod_dm1_keep": lambda x: torch.prod(x, -1, True),
    "prod_d0": lambda x: torch.prod(x, 0),
    "amax_d1": lambda x: torch.amax(x, 1),
    "amax_d02_keep": lambda x: torch.amax(x, (0, -1), True),
    "amin_all": lambda x: torch.amin(x),
    "amin_dm1": lambda x: torch.amin(x, -1),
    "aminmax": lambda x: torch.aminmax(x),
    "aminmax_d0_keep": lambda x: torch.aminmax(x, dim=0, keepdim=True),
    "any": lambda x: torch.any(x),
    "any_d1": lambda x: torch.any(x, 1),
    "all": lambda x: torch.all(x),
    "all_dm1_keep": lambda x: torch.all(x, -1, True),
    "count_nonzero": lambda x: torch.count_nonzero(x),
    "count_nonzero_d0": lambda x: torch.count_nonzero(x, 0),
    "count_nonzero_d01": lambda x: torch.count_nonzero(x, (0, 1)),
    "nansum": lambda x: torch.nansum(x),
    "nansum_d1_keep": lambda x: torch.nansum(x, 1, True),
    "nanmean": lambda x: torch.nanmean(x),
    "nanmean_dm1": lambda x: torch.nanmean(x, -1),
    "isnan": lambda x: torch.isnan(x),
    "isinf": lambda x: torch.isinf(x),
    "isfinite": lambda x: torch.isfinite(x),
    "isposinf": lambda x: torch.isposinf(x),
    "isneginf": lambda x: torch.isneginf(x),
    "nan_to_num": lambda x: torch.nan_to_num(x),
    "nan_to_num_args": lambda x: torch.nan_to_num(x, 1.5, 100.0, -7.0),
    "median": lambda x: torch.median(x),
    "median_d1": lambda x: torch.median(x, 1),
    "median_dm2_keep": lambda x: torch.median(x, -2, True),
    "nanmedian": lambda x: torch.nanmedian(x),
    "nanmedian_d1": lambda x: torch.nanmedian(x, 1),
    "nanmedian_d1_values": lambda x: torch.nanmedian(x, 1).values,
    "kthvalue_k2_d1": lambda x: torch.kthvalue(x, 2, 1),
    "kthvalue_k4_dm1_keep": lambda x: torch.kthvalue(x, 4, -1, True),
    "kthvalue_k1_d0": lambda x: torch.kthvalue(x, 1, 0),
    "quantile_q03": lambda x: torch.quantile(x, 0.3),
    "quantile_q_d1": lambda x: torch.quantile(x, t([0.0, 0.25, 0.5, 0.9, 1.0]), 1),
    "quantile_q_d0_keep": lambda x: torch.quantile(x, t([0.1, 0.75]), 0, True),
    "quantile_q07_dm1_lower": lambda x: torch.quantile(x, 0.7, -1, interpolation="lower"),
    "quantile_q_d1_higher": lambda x: torch.quantile(x, t([0.2, 0.5, 0.61]), 1, interpolation="higher"),
    "quantile_q_d1_nearest": lambda x: torch.quantile(x, t([0.125, 0.375, 0.5, 0.875]), 1, interpolation="nearest"),
    "quantile_q_d1_midpoint": lambda x: torch.quantile(x, t([0.2, 0.5, 1.0]), 1, interpolation="midpoint"),
    "quantile_keep_all": lambda x: torch.quantile(x, 0.4, keepdim=True),
    "nanquantile_q_d1": lambda x: torch.nanquantile(x, t([0.0, 0.3, 0.5, 1.0]), 1),
    "nanquantile_q06": lambda x: torch.nanquantile(x, 0.6),
    "cummax_d0": lambda x: torch.cummax(x, 0),
    "cummax_d1": lambda x: torch.cummax(x, 1),
    "cummin_dm1": lambda x: torch.cummin(x, -1),
    "cummin_d0": lambda x: torch.cummin(x, 0),
    "logcumsumexp_d1": lambda x: torch.logcumsumexp(x, 1),
    "logcumsumexp_dm2": lambda x: torch.logcumsumexp(x, -2),
    "diff": lambda x: torch.diff(x),
    "diff_n2_d0": lambda x: torch.diff(x, 2, 0),
    "diff_n3_dm1": lambda x: torch.diff(x, 3, -1),
    "diff_prepend_append": lambda x, p, a: torch.diff(x, 1, 1, p, a),
    "diff_n2_append": lambda x, a: torch.diff(x, 2, 0, append=a),
    "lerp_w03": lambda a, b: torch.lerp(a, b, 0.3),
    "lerp_w08": lambda a, b: torch.lerp(a, b, 0.8),
    "lerp_wt": lambda a, b, w: torch.lerp(a, b, w),
    "addcmul": lambda x, a, b: torch.addcmul(x, a, b),
    "addcmul_v": lambda x, a, b: torch.addcmul(x, a, b, value=-0.5),
    "addcdiv_v": lambda x, a, b: torch.addcdiv(x, a, b, value=2.5),
    "xlogy": lambda x, y: torch.xlogy(x, y),
    "xlogy_s": lambda x: torch.xlogy(x, 3.0),
    "clamp_min": lambda x: torch.clamp_min(x, -0.5),
    "clamp_max": lambda x: torch.clamp_max(x, 0.25),
    "var_mean_d1": lambda x: torch.var_mean(x, 1),
    "var_mean_biased_d0_keep": lambda x: torch.var_mean(x, 0, unbiased=False, keepdim=True),
    "var_mean_c2_dm1": lambda x: torch.var_mean(x, -1, correction=2),
    "std_mean": lambda x: torch.std_mean(x),
    "std_mean_d1_biased": lambda x: torch.std_mean(x, 1, unbiased=False),
    "logaddexp": lambda a, b: torch.logaddexp(a, b),
}


def zeros_in(shape, where):
    x = randn(*shape)
    for i in where:
        x.view(-1)[i] = 0
    return x


def cases():
    """(name, call id, inputs, with gradients)."""
    c = []
    def add(name, call, *inputs, grad=True):
        c.append((name, call, list(inputs), grad))
    x34 = randn(3, 4)
    add("prod_all", "prod", randn(2, 3))
    add("prod_all_one_zero", "prod", zeros_in((2, 3), [4]))
    add("prod_all_two_zeros", "prod", zeros_in((2, 3), [1, 4]))
    # rows without zeros, with one zero and with two
    add("prod_rows_zeros", "prod_d1", zeros_in((3, 4), [5, 8, 10]))
    add("prod_keepdim", "prod_dm1_keep", zeros_in((2, 3, 4), [0, 13, 14]))
    add("prod_dim0", "prod_d0", randn(3, 2))
    add("prod_empty_dim", "prod_d1", randn(2, 0))
    add("prod_rank0", "prod_d0", randn(()))
    add("prod_i64", "prod_d1", t([1, 2, 3, -4, 5, 6], (2, 3), torch.int64))
    add("prod_bool", "prod", t([True, True, False], None, torch.bool))
    tie = t([[1, 3, 3, 2], [0, -1, -1, -1], [NAN, 2, 5, 1]])
    add("amax_ties", "amax_d1", tie[:2])
    add("amax_nan", "amax_d1", tie)
    add("amax_dims_keep", "amax_d02_keep", ties(3, 2, 4))
    add("amin_all_ties", "amin_all", ties(3, 4))
    add("amin_rows", "amin_dm1", ties(3, 5))
    add("aminmax_all", "aminmax", ties(3, 4), grad=False)  # torch 1.13 has no aminmax derivative
    add("aminmax_dim", "aminmax_d0_keep", ties(3, 4), grad=False)
    ab = t([[0.0, 0.0, NAN], [0.0, -0.0, 0.0], [1.0, 0.0, 2.0]])
    for call in ["any", "any_d1", "all", "all_dm1_keep", "count_nonzero", "count_nonzero_d0", "count_nonzero_d01"]:
        add(call + "_f64", call, ab)
    add("any_bool", "any_d1", t([[False, False], [True, False]], None, torch.bool))
    add("all_i64", "all", t([1, 2, -3], None, torch.int64))
    add("any_empty", "any", randn(0, 3))
    add("all_empty_dim", "all_dm1_keep", randn(2, 0))
    add("count_nonzero_i64", "count_nonzero_d0", t([[0, 3], [4, 0], [0, 0]], None, torch.int64))
    xn = t([[1.0, NAN, 2.0, -3.0], [NAN, NAN, NAN, NAN], [0.5, INF, NAN, 1.0]])
    for call in ["nansum", "nansum_d1_keep", "nanmean", "nanmean_dm1"]:
        add(call, call, xn[[0, 2]])
        # kiln's gradient is 0 at NaN; PyTorch's is NaN (0 * inf) in a row of NaN of nanmean: values only
        add(call + "_nan_row", call, xn, grad=False)
    add("nansum_i64", "nansum", t([1, 2, 3], None, torch.int64))
    special = t([[0.0, -0.0, NAN, INF], [-INF, 1e308, -1e-300, 5.0]])
    for call in ["isnan", "isinf", "isfinite", "isposinf", "isneginf", "nan_to_num", "nan_to_num_args"]:
        add(call, call, special)
    add("isfinite_i64", "isfinite", t([1, 2], None, torch.int64))
    add("isnan_i64", "isnan", t([1, 2], None, torch.int64))
    add("nan_to_num_i64", "nan_to_num", t([1, -2], None, torch.int64))
    add("median_all_ties", "median", t([[2.0, 1.0, 2.0], [2.0, 3.0, 1.0], [2.0, 0.0, 5.0]]))
    add("median_all_even", "median", randn(2, 4))
    add("median_all_nan", "median", t([1.0, NAN, 2.0, NAN]))
    add("median_all_empty", "median", randn(0, 2))
    add("median_rows_ties", "median_d1", t([[2.0, 1.0, 2.0, 2.0, 3.0, 1.0, 2.0], [1.0, 5.0, 5.0, 2.0, 5.0, 1.0, 1.0]]))
    add("median_rows_nan", "median_d1", t([[2.0, NAN, 1.0, NAN, 3.0], [4.0, 1.0, 2.0, 3.0, 0.0]]))
    add("median_dim_keep", "median_dm2_keep", ties(2, 5, 3))
    add("median_rank0", "median_d1", randn(()).reshape(1, 1))
    add("nanmedian_all", "nanmedian", t([1.0, NAN, 2.0, NAN, -1.0, 7.0]))
    add("nanmedian_all_nan", "nanmedian", t([NAN, NAN]))
    add("nanmedian_rows", "nanmedian_d1", t([[2.0, NAN, 1.0, NAN, 3.0], [4.0, 4.0, NAN, 1.0, 4.0]]))
    # the index of a row of NaN comes from nth_element with an inconsistent comparator: values only
    add("nanmedian_rows_all_nan", "nanmedian_d1_values", t([[NAN, NAN, NAN, NAN, NAN], [4.0, NAN, NAN, 1.0, 4.0]]),
        grad=False)
    add("kthvalue_rows", "kthvalue_k2_d1", ranked(3, 5))
    add("kthvalue_keep", "kthvalue_k4_dm1_keep", ranked(2, 3, 4))
    add("kthvalue_nan", "kthvalue_k4_dm1_keep", t([[2.0, NAN, 1.0, NAN, 3.0]]))
    add("kthvalue_dim0", "kthvalue_k1_d0", ranked(4, 3))
    add("quantile_all", "quantile_q03", randn(3, 4))
    add("quantile_rows", "quantile_q_d1", randn(3, 6))
    add("quantile_cols_keep", "quantile_q_d0_keep", randn(5, 2))
    add("quantile_lower", "quantile_q07_dm1_lower", randn(2, 3, 5))
    add("quantile_higher", "quantile_q_d1_higher", randn(2, 7))
    add("quantile_nearest", "quantile_q_d1_nearest", randn(2, 5))
    add("quantile_midpoint", "quantile_q_d1_midpoint", randn(2, 6))
    add("quantile_keepdim_all", "quantile_keep_all", randn(2, 3))
    add("quantile_nan_row", "quantile_q_d1", t([[1.0, NAN, 2.0, 0.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]))
    add("quantile_ties", "quantile_q_d1", ties(2, 6))
    add("nanquantile_rows", "nanquantile_q_d1",
        t([[1.0, NAN, 2.0, 0.0, 3.0], [NAN, NAN, NAN, NAN, NAN], [1.0, 2.0, NAN, 4.0, 5.0]]))
    add("nanquantile_all", "nanquantile_q06", t([3.0, NAN, 1.0, 2.0, NAN, 0.0]))
    add("cummax_ties", "cummax_d0", t([3.0, 1.0, 3.0, 2.0, 4.0, 4.0, 0.0]))
    add("cummax_nan", "cummax_d0", t([1.0, NAN, 2.0, NAN, 3.0]))
    add("cummax_rows", "cummax_d1", ties(3, 6))
    add("cummin_ties", "cummin_dm1", t([[3.0, 1.0, 1.0, 2.0, 1.0, 0.0, 0.0], [2.0, NAN, -1.0, NAN, -5.0, 0.0, 1.0]]))
    add("cummin_cols", "cummin_d0", ties(5, 3))
    add("cummax_i64", "cummax_d1", t([[1, 3, 2, 3], [0, -1, 5, 5]], None, torch.int64))
    add("cummin_empty", "cummin_d0", randn(0, 2))
    add("cummax_rank0", "cummax_d0", randn(()))
    add("logcumsumexp_rows", "logcumsumexp_d1", randn(3, 5) * 30)
    add("logcumsumexp_large", "logcumsumexp_d1", t([[1000.0, 0.0, -1000.0, 1001.0], [-800.0, -800.0, -790.0, -1e4]]))
    add("logcumsumexp_dim", "logcumsumexp_dm2", randn(4, 3, 2))
    add("logcumsumexp_neginf", "logcumsumexp_d1", t([[-INF, -INF, 0.0, -INF]]), grad=False)
    add("diff_last", "diff", randn(3, 5))
    add("diff_n2", "diff_n2_d0", randn(4, 3))
    add("diff_n_past_extent", "diff_n3_dm1", randn(2, 2))
    add("diff_bool", "diff", t([True, False, False, True], None, torch.bool))
    add("diff_i64", "diff_n2_d0", t([1, 4, 9, 16], None, torch.int64))
    add("diff_prepend_append", "diff_prepend_append", randn(2, 3), randn(2, 1), randn(2, 2))
    add("diff_n2_append", "diff_n2_append", randn(2, 3), randn(1, 3))
    add("lerp_scalar_low", "lerp_w03", randn(2, 3), randn(3))
    add("lerp_scalar_high", "lerp_w08", randn(3), randn(2, 3))
    add("lerp_tensor", "lerp_wt", randn(2, 4), randn(2, 4), t([[0.0, 0.3, 0.5, 1.0], [-0.5, 0.49, 0.7, 2.0]]))
    add("addcmul", "addcmul", randn(2, 3), randn(2, 3), randn(3))
    add("addcmul_value", "addcmul_v", randn(3), randn(2, 3), randn(2, 1))
    add("addcdiv_value", "addcdiv_v", randn(2, 3), randn(2, 3), randn(2, 3))
    add("xlogy", "xlogy", t([0.0, 0.0, 1.5, 2.0, 0.0, 3.0, -1.0, 0.0, 0.0]), t([2.0, NAN, 0.5, 3.0, INF, NAN, 4.0, 0.0, -1.0]))
    add("xlogy_i64", "xlogy", t([0, 2, 3], None, torch.int64), t([0, 5, 1], None, torch.int64))
    add("xlogy_broadcast", "xlogy", randn(2, 3), randn(3).abs())
    add("xlogy_scalar", "xlogy_s", t([0.0, 2.0, -1.5]))
    add("clamp_min", "clamp_min", t([-1.0, -0.5, 0.0, 2.0, NAN]))
    add("clamp_max", "clamp_max", t([-1.0, 0.25, 0.5, NAN]))
    for call in ["var_mean_d1", "var_mean_biased_d0_keep", "var_mean_c2_dm1", "std_mean", "std_mean_d1_biased"]:
        add(call, call, randn(3, 4))
    add("logaddexp", "logaddexp", randn(2, 3) * 10, randn(3) * 10)
    add("logaddexp_ties", "logaddexp", t([1.0, -3.0, 800.0, -800.0]), t([1.0, -3.0, 799.0, -1000.0]))
    add("logaddexp_inf", "logaddexp", t([INF, -INF, INF, 0.0]), t([INF, -INF, -INF, -INF]), grad=False)
    return c


def main():
    write_cases(sys.stdout, "Reductions, NaN handling and scans of PyTorch 1.13 in f64 (bool and i64 where noted).",
                CALLS, cases())


if __name__ == "__main__":
    main()

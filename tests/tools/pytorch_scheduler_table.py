#!/usr/bin/env python3
"""Prints tests/pytorch_scheduler_table.inc: the learning rates torch.optim.lr_scheduler's ExponentialLR,
MultiStepLR, LinearLR, ConstantLR, LambdaLR, OneCycleLR, ReduceLROnPlateau, PolynomialLR,
CosineAnnealingWarmRestarts (whole and fractional epochs), CyclicLR and SequentialLR give (the lr at construction,
then after each step) over combinations of their options, the reference of test_schedulers' TorchTable
tests. Run with Debian's python3-torch (1.13):
    /usr/bin/python3 tests/tools/pytorch_scheduler_table.py > tests/pytorch_scheduler_table.inc
torch is needed only to regenerate the table, never by the tests.

The table holds what a PyTorch user gets: the recursive (chainable) form of each closed-form scheduler,
stepped as usual. kiln implements the closed forms (_get_closed_form_lr); for each such case this script
also evaluates torch's closed form at every epoch and writes the largest relative difference between the
two forms as a comment (rounding: a few ulps). Where torch's recursive form fails (it divides by zero:
LinearLR with start_factor 0, ConstantLR with factor 0) or differs beyond rounding (ConstantLR with
total_iters 0 keeps the factor forever), the table holds its closed form and says so."""
import math
import warnings

import torch
from torch.optim import lr_scheduler as S

from cpp_literals import lit, lits

# The lambdas of the LambdaLR cases, by the name test_schedulers maps to the same C++ expression.
LAMBDAS = {
    "pow_0.95": lambda e: 0.95 ** e,
    "inverse": lambda e: 1.0 / (1.0 + 0.5 * e),
    "steps_of_3": lambda e: float(e // 3) + 0.25,
}

# The schedules of the SequentialLR cases, by the name test_schedulers builds the same ones under (in the
# same order: each schedule's construction can set the optimizer's 'initial_lr').
SEQUENCES = {
    "constant_exponential": lambda o: [S.ConstantLR(o, factor=0.1, total_iters=2), S.ExponentialLR(o, gamma=0.9)],
    "linear_cosine": lambda o: [S.LinearLR(o, start_factor=0.1, total_iters=3),
                                S.CosineAnnealingLR(o, T_max=6, eta_min=0.001)],
    "linear_step_polynomial": lambda o: [S.LinearLR(o, start_factor=0.25, total_iters=4),
                                         S.StepLR(o, step_size=2, gamma=0.5),
                                         S.PolynomialLR(o, total_iters=4, power=2.0)],
    "linear_warm_restarts": lambda o: [S.LinearLR(o, start_factor=0.5, total_iters=2),
                                       S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2)],
    "multistep_lambda": lambda o: [S.MultiStepLR(o, milestones=[1, 3], gamma=0.5), S.LambdaLR(o, LAMBDAS["pow_0.95"])],
    "cyclic_exponential": lambda o: [S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2, cycle_momentum=False),
                                     S.ExponentialLR(o, gamma=0.8)],
    "onecycle_constant": lambda o: [S.OneCycleLR(o, max_lr=0.5, total_steps=6, cycle_momentum=False),
                                    S.ConstantLR(o, factor=0.5, total_iters=2)],
}

# CyclicLR's custom scale functions (modes fn_cycle and fn_iterations), the same expressions in test_schedulers.
SCALE_FNS = {"fn_cycle": (lambda x: 1.0 / (1.0 + x), "cycle"), "fn_iterations": (lambda x: 0.99 ** x, "iterations")}

# (name, kind, base lr, reals, integers, mode, steps, metrics (ReduceLROnPlateau))
# reals / integers / mode per kind (the order test_schedulers reads them in):
#   exponential: (gamma), ()                                   multistep: (gamma), milestones
#   linear: (start_factor, end_factor), (total_iters)          constant: (factor), (total_iters)
#   lambda: (), (), mode = the lambda's name
#   onecycle: (max_lr, pct_start, div_factor, final_div_factor), (total_steps, three_phase), mode cos|linear;
#     total_steps - 1 steps: the lrs of the total_steps updates (torch's lr at epoch total_steps, after the
#     last update, extrapolates past the schedule's end, where kiln gives the min lr; see optim.h)
#   plateau: (factor, threshold, min_lr, eps), (patience, cooldown), mode "min rel" | "max abs" | ...
#   polynomial: (power), (total_iters)
#   warmrestarts: (eta_min), (T_0, T_mult); warmrestarts_epochs: the same, stepped at the epochs in metrics
#   cyclic: (base_lr, max_lr, step_size_up, step_size_down (-1: None), gamma), (), mode: PyTorch's or a SCALE_FNS name
#   sequential: (), milestones, mode: a SEQUENCES name
PLATEAU_METRICS = [1.0, 0.9, 0.9, 0.95, 0.91, 0.89995, 0.7, 0.7, 0.71, 0.72, 0.73, 0.69, 0.7, 0.7, 0.7, 0.7,
                   float("nan"), 0.7, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
RISING = [0.1, 0.2, 0.25, 0.2501, 0.24, 0.3, 0.3, 0.3, 0.30005, 0.4, 0.4, 0.4, 0.4, 0.4, 0.41, 0.4, 0.4, 0.4,
          0.4, 0.4]
CASES = [
    ("exponential", "exponential", 0.1, [0.9], [], "", 20, None),
    ("exponential_fast", "exponential", 1.0, [0.5], [], "", 12, None),
    ("exponential_zero", "exponential", 0.3, [0.0], [], "", 3, None),
    ("multistep", "multistep", 0.1, [0.1], [3, 7], "", 12, None),
    ("multistep_unsorted_repeated", "multistep", 0.05, [0.5], [6, 2, 6, 9, 2, 2], "", 12, None),
    ("multistep_milestone_0", "multistep", 1.0, [0.3], [0, 4], "", 6, None),
    ("linear_defaults", "linear", 0.05, [1.0 / 3, 1.0], [5], "", 8, None),
    ("linear_warmup", "linear", 0.1, [0.25, 1.0], [4], "", 7, None),
    ("linear_decay", "linear", 0.2, [1.0, 0.1], [7], "", 10, None),
    ("linear_long", "linear", 0.01, [0.3, 0.9], [13], "", 16, None),
    ("linear_start_0", "linear", 0.1, [0.0, 1.0], [3], "", 5, None),
    ("constant_defaults", "constant", 0.05, [1.0 / 3], [5], "", 8, None),
    ("constant_half", "constant", 0.1, [0.5], [2], "", 4, None),
    ("constant_factor_0", "constant", 0.1, [0.0], [2], "", 4, None),
    ("constant_total_0", "constant", 0.1, [0.7], [0], "", 3, None),
    ("lambda_pow", "lambda", 0.1, [], [], "pow_0.95", 10, None),
    ("lambda_inverse", "lambda", 0.3, [], [], "inverse", 8, None),
    ("lambda_steps", "lambda", 0.2, [], [], "steps_of_3", 8, None),
    ("onecycle_defaults", "onecycle", 0.1, [0.1, 0.3, 25.0, 1e4], [20, 0], "cos", 19, None),
    ("onecycle_linear", "onecycle", 0.1, [0.5, 0.3, 25.0, 1e4], [17, 0], "linear", 16, None),
    ("onecycle_three_phase", "onecycle", 0.1, [1.0, 0.25, 10.0, 100.0], [24, 1], "cos", 23, None),
    ("onecycle_three_phase_linear", "onecycle", 0.1, [0.2, 0.4, 5.0, 1e3], [15, 1], "linear", 14, None),
    ("onecycle_pct_0", "onecycle", 0.1, [0.3, 0.0, 25.0, 1e4], [10, 0], "cos", 9, None),
    ("onecycle_pct_1", "onecycle", 0.1, [0.3, 1.0, 25.0, 1e4], [10, 0], "linear", 9, None),
    ("onecycle_one_step", "onecycle", 0.1, [0.3, 0.3, 25.0, 1e4], [1, 0], "cos", 0, None),
    ("plateau_defaults", "plateau", 0.1, [0.1, 1e-4, 0.0, 1e-8], [10, 0], "min rel", 30, PLATEAU_METRICS),
    ("plateau_patience_cooldown_min_lr", "plateau", 0.1, [0.5, 1e-4, 0.01, 1e-8], [1, 2], "min rel", 30,
     PLATEAU_METRICS),
    ("plateau_abs", "plateau", 0.1, [0.5, 0.05, 0.0, 1e-8], [1, 0], "min abs", 30, PLATEAU_METRICS),
    ("plateau_eps", "plateau", 0.1, [0.7, 1e-4, 0.0, 0.02], [0, 0], "min rel", 30, PLATEAU_METRICS),
    ("plateau_max_rel", "plateau", 1.0, [0.3, 1e-3, 0.0, 1e-8], [2, 1], "max rel", 20, RISING),
    ("plateau_max_abs", "plateau", 1.0, [0.1, 0.01, 1e-3, 1e-8], [1, 0], "max abs", 20, RISING),
    ("polynomial_defaults", "polynomial", 0.1, [1.0], [5], "", 8, None),
    ("polynomial_square", "polynomial", 0.3, [2.0], [7], "", 9, None),
    ("polynomial_root", "polynomial", 0.05, [0.5], [11], "", 13, None),
    ("polynomial_one_iter", "polynomial", 0.2, [3.0], [1], "", 3, None),
    ("warmrestarts_t0_4", "warmrestarts", 0.1, [0.0], [4, 1], "", 13, None),
    ("warmrestarts_mult_2", "warmrestarts", 0.1, [0.001], [3, 2], "", 30, None),
    ("warmrestarts_mult_3", "warmrestarts", 1.0, [0.05], [2, 3], "", 40, None),
    ("warmrestarts_t0_1", "warmrestarts", 0.2, [0.0], [1, 1], "", 4, None),
    ("warmrestarts_epochs_mult_1", "warmrestarts_epochs", 0.1, [0.01], [5, 1], "", 9,
     [0.0, 0.25, 1.5, 4.9, 5.0, 7.75, 12.5, 3.0, 100.2]),
    ("warmrestarts_epochs_mult_2", "warmrestarts_epochs", 0.1, [0.0], [2, 2], "", 10,
     [0.5, 1.999, 2.0, 3.5, 5.9, 6.0, 13.25, 14.0, 29.5, 30.0]),
    ("cyclic_triangular", "cyclic", 0.5, [0.01, 0.1, 3.0, -1.0, 1.0], [], "triangular", 14, None),
    ("cyclic_triangular_asymmetric", "cyclic", 0.5, [0.02, 0.2, 2.0, 5.0, 1.0], [], "triangular", 16, None),
    ("cyclic_triangular2", "cyclic", 0.5, [0.001, 0.1, 2.0, 3.0, 1.0], [], "triangular2", 22, None),
    ("cyclic_exp_range", "cyclic", 0.5, [0.01, 0.2, 4.0, -1.0, 0.9], [], "exp_range", 20, None),
    ("cyclic_down_0", "cyclic", 0.5, [0.01, 0.1, 3.0, 0.0, 1.0], [], "triangular", 8, None),
    ("cyclic_inverted", "cyclic", 0.5, [0.1, 0.02, 2.5, 1.5, 1.0], [], "triangular", 10, None),
    ("cyclic_fn_cycle", "cyclic", 0.5, [0.01, 0.1, 2.0, -1.0, 1.0], [], "fn_cycle", 14, None),
    ("cyclic_fn_iterations", "cyclic", 0.5, [0.01, 0.1, 3.0, 2.0, 1.0], [], "fn_iterations", 14, None),
    ("sequential_constant_exponential", "sequential", 1.0, [], [2], "constant_exponential", 8, None),
    ("sequential_linear_cosine", "sequential", 0.1, [], [3], "linear_cosine", 12, None),
    ("sequential_three", "sequential", 0.2, [], [4, 9], "linear_step_polynomial", 16, None),
    ("sequential_warm_restarts", "sequential", 0.1, [], [2], "linear_warm_restarts", 14, None),
    ("sequential_multistep_lambda", "sequential", 0.3, [], [5], "multistep_lambda", 10, None),
    ("sequential_cyclic_exponential", "sequential", 0.5, [], [5], "cyclic_exponential", 9, None),
    ("sequential_onecycle_constant", "sequential", 0.5, [], [6], "onecycle_constant", 9, None),
]


def make(kind, opt, reals, ints, mode):
    if kind == "exponential":
        return S.ExponentialLR(opt, gamma=reals[0])
    if kind == "multistep":
        return S.MultiStepLR(opt, milestones=ints, gamma=reals[0])
    if kind == "linear":
        return S.LinearLR(opt, start_factor=reals[0], end_factor=reals[1], total_iters=ints[0])
    if kind == "constant":
        return S.ConstantLR(opt, factor=reals[0], total_iters=ints[0])
    if kind == "lambda":
        return S.LambdaLR(opt, LAMBDAS[mode])
    if kind == "onecycle":
        return S.OneCycleLR(opt, max_lr=reals[0], total_steps=ints[0], pct_start=reals[1], anneal_strategy=mode,
                            cycle_momentum=False, div_factor=reals[2], final_div_factor=reals[3],
                            three_phase=bool(ints[1]))
    if kind == "polynomial":
        return S.PolynomialLR(opt, total_iters=ints[0], power=reals[0])
    if kind.startswith("warmrestarts"):
        return S.CosineAnnealingWarmRestarts(opt, T_0=ints[0], T_mult=ints[1], eta_min=reals[0])
    if kind == "cyclic":
        fn, scale_mode = SCALE_FNS.get(mode, (None, "cycle"))
        return S.CyclicLR(opt, base_lr=reals[0], max_lr=reals[1], step_size_up=reals[2],
                          step_size_down=None if reals[3] < 0 else reals[3], mode="triangular" if fn else mode,
                          gamma=reals[4], scale_fn=fn, scale_mode=scale_mode, cycle_momentum=False)
    if kind == "sequential":
        return S.SequentialLR(opt, SEQUENCES[mode](opt), milestones=ints)
    mode_, threshold_mode = mode.split()
    return S.ReduceLROnPlateau(opt, mode=mode_, factor=reals[0], patience=ints[0], threshold=reals[1],
                               threshold_mode=threshold_mode, cooldown=ints[1], min_lr=reals[2], eps=reals[3])


def lr_of(opt):
    return opt.param_groups[0]["lr"]


def run(kind, base_lr, reals, ints, mode, steps, metrics):
    """The lrs (at construction and after each step) and, for a closed-form scheduler, its closed form's
    lrs at the same epochs (None where torch has none)."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make(kind, opt, reals, ints, mode)
    closed_form = hasattr(sched, "_get_closed_form_lr")
    lrs, closed = [lr_of(opt)], [sched._get_closed_form_lr()[0]] if closed_form else None
    for s in range(steps):
        opt.step()
        if metrics is not None:
            sched.step(metrics[s])  # ReduceLROnPlateau's metric, or CosineAnnealingWarmRestarts' epoch
        else:
            sched.step()
        lrs.append(lr_of(opt))
        if closed_form:
            closed.append(sched._get_closed_form_lr()[0])
    return lrs, closed


def closed_form_only(kind, base_lr, reals, ints, mode, steps):
    """The closed form at epochs 0..steps, for a case whose recursive form fails."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make(kind, opt, reals, ints, mode)
    out = []
    for e in range(steps + 1):
        sched.last_epoch = e
        out.append(sched._get_closed_form_lr()[0])
    return out


def max_rel_diff(a, b):
    return max((abs(x - y) / abs(y) if y != 0 else abs(x)) for x, y in zip(a, b))


def main():
    warnings.simplefilter("ignore")
    print("// Generated by tests/tools/pytorch_scheduler_table.py with PyTorch " + torch.__version__ + ": do not edit.")
    print("// {name, kind, base lr, reals, integers, mode, metrics (ReduceLROnPlateau), the lr at construction")
    print("//  and after each step} (see the script for what reals, integers and mode hold per kind)")
    print("const SchedulerCase kSchedulerCases[] = {")
    for name, kind, base_lr, reals, ints, mode, steps, metrics in CASES:
        try:
            lrs, closed = run(kind, base_lr, reals, ints, mode, steps, metrics)
            if closed is not None:
                d = max_rel_diff(lrs, closed)
                if d < 1e-14:
                    print("    // recursive form vs closed form: max relative difference %.3g" % d)
                else:
                    print("    // torch's recursive form differs here (max relative difference %.3g): the closed "
                          "form's values" % d)
                    lrs = closed
        except ZeroDivisionError:
            lrs = closed_form_only(kind, base_lr, reals, ints, mode, steps)
            print("    // torch's recursive form divides by zero here: the closed form's values")
        print("    {\"%s\", \"%s\", %s, %s, {%s}, \"%s\", %s," % (name, kind, lit(base_lr), lits(reals),
                                                              ", ".join(str(n) for n in ints), mode,
                                                              lits(metrics or [])))
        print("     %s}," % lits(lrs))
    print("};")


if __name__ == "__main__":
    main()

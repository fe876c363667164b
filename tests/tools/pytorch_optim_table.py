#!/usr/bin/env python3
"""Prints tests/pytorch_optim_table.inc: the parameters torch.optim's SGD, Adam, AdamW, RMSprop,
Adagrad, NAdam, RAdam, Adamax, Adadelta, Rprop and ASGD reach after each of several steps
(single-tensor path, foreach=False), over combinations of their options (momentum, centered,
weight_decay, maximize, lr_decay, initial_accumulator_value, momentum_decay, etas, t0, ...),
in f64 and in f32, the reference of test_optim's TorchTable tests. Run with Debian's python3-torch (1.13):
    python3 tests/tools/pytorch_optim_table.py > tests/pytorch_optim_table.inc
torch is needed only to regenerate the table, never by the tests.

The problem: parameters p_j (shapes SHAPES) with loss_s = sum_j sum(c_j * p_j^2) / 2 + sum(d_sj * p_j)
at step s, so grad = c_j * p_j + d_sj. A case with skip >= 0 leaves the last parameter out of the
loss at step `skip` (no gradient: zero_grad(set_to_none=True), so the optimizer skips it and its
step count stays behind). A case with gamma > 0 steps StepLR(opt, 1, gamma) after every step.
The older kinds take STEPS steps, the newer ones LONG_STEPS (RAdam's rectification starts at step 6,
ASGD's averaging after t0); the linear terms of the steps after STEPS come from a second generator, so
the first STEPS are unchanged. The f64 runs use torch.set_default_dtype(torch.float64): NAdam's mu_product
and ASGD's eta and mu are 0-d tensors of the default dtype, which kiln keeps in double."""
import torch

from cpp_literals import lits

SHAPES = [[3], [2, 3], [4]]
STEPS = 5
LONG_STEPS = 12

# The fields of the test's OptimOptions, in its declaration order, and each kind's fields.
FIELDS = ["lr", "momentum", "dampening", "nesterov", "betas", "amsgrad", "alpha", "centered", "lr_decay",
          "initial_accumulator_value", "eps", "weight_decay", "maximize", "momentum_decay", "rho", "etas",
          "step_sizes", "lambd", "t0"]
KINDS = {
    "sgd": (torch.optim.SGD, ["lr", "momentum", "dampening", "nesterov", "weight_decay", "maximize"]),
    "adam": (torch.optim.Adam, ["lr", "betas", "amsgrad", "eps", "weight_decay", "maximize"]),
    "adamw": (torch.optim.AdamW, ["lr", "betas", "amsgrad", "eps", "weight_decay", "maximize"]),
    "rmsprop": (torch.optim.RMSprop, ["lr", "momentum", "alpha", "centered", "eps", "weight_decay", "maximize"]),
    "adagrad": (torch.optim.Adagrad, ["lr", "lr_decay", "initial_accumulator_value", "eps", "weight_decay",
                                      "maximize"]),
    "nadam": (torch.optim.NAdam, ["lr", "betas", "eps", "weight_decay", "momentum_decay"]),
    "radam": (torch.optim.RAdam, ["lr", "betas", "eps", "weight_decay"]),
    "adamax": (torch.optim.Adamax, ["lr", "betas", "eps", "weight_decay", "maximize"]),
    "adadelta": (torch.optim.Adadelta, ["lr", "rho", "eps", "weight_decay", "maximize"]),
    "rprop": (torch.optim.Rprop, ["lr", "etas", "step_sizes", "maximize"]),
    "asgd": (torch.optim.ASGD, ["lr", "alpha", "weight_decay", "maximize", "lambd", "t0"]),
}
NEW_KINDS = {"nadam", "radam", "adamax", "adadelta", "rprop", "asgd"}

# (name, kind, options (torch's keywords; the rest torch's defaults), skip, gamma)
CASES = [
    ("sgd_maximize", "sgd", dict(lr=0.1, maximize=True), -1, 0),
    ("sgd_momentum_dampening_wd_maximize", "sgd",
     dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01, maximize=True), 1, 0),
    ("sgd_nesterov_wd_maximize", "sgd", dict(lr=0.05, momentum=0.8, weight_decay=0.02, nesterov=True, maximize=True),
     -1, 0),
    ("adam_maximize", "adam", dict(lr=0.1, maximize=True), -1, 0),
    ("adam_amsgrad_wd_maximize", "adam",
     dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True, maximize=True), 2, 0),
    ("adamw_maximize", "adamw", dict(lr=0.1, weight_decay=0.05, maximize=True), -1, 0),
    ("adamw_amsgrad_maximize", "adamw", dict(lr=0.02, amsgrad=True, maximize=True), -1, 0),
    ("rmsprop_defaults", "rmsprop", dict(), -1, 0),
    ("rmsprop_alpha_skip", "rmsprop", dict(lr=0.05, alpha=0.9), 2, 0),
    ("rmsprop_centered", "rmsprop", dict(lr=0.02, centered=True), -1, 0),
    ("rmsprop_momentum", "rmsprop", dict(lr=0.01, momentum=0.9), 1, 0),
    ("rmsprop_centered_momentum_wd", "rmsprop", dict(lr=0.01, alpha=0.95, momentum=0.5, centered=True,
                                                     weight_decay=0.1), -1, 0),
    ("rmsprop_wd_maximize", "rmsprop", dict(lr=0.03, weight_decay=0.2, maximize=True), -1, 0),
    ("rmsprop_everything", "rmsprop", dict(lr=0.02, alpha=0.8, eps=1e-4, weight_decay=0.05, momentum=0.7,
                                           centered=True, maximize=True), 3, 0),
    ("rmsprop_step_lr", "rmsprop", dict(lr=0.04, momentum=0.6), -1, 0.5),
    ("adagrad_defaults", "adagrad", dict(), -1, 0),
    ("adagrad_lr_decay_skip", "adagrad", dict(lr=0.1, lr_decay=0.05), 2, 0),
    ("adagrad_initial_accumulator", "adagrad", dict(lr=0.1, initial_accumulator_value=0.3), -1, 0),
    ("adagrad_wd_maximize", "adagrad", dict(lr=0.05, weight_decay=0.1, maximize=True), -1, 0),
    ("adagrad_everything", "adagrad", dict(lr=0.2, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.25,
                                           eps=1e-6, maximize=True), 1, 0),
    ("adagrad_step_lr", "adagrad", dict(lr=0.1, lr_decay=0.05), -1, 0.5),
    ("nadam_defaults", "nadam", dict(lr=0.05), -1, 0),
    ("nadam_everything_skip", "nadam", dict(lr=0.1, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1,
                                            momentum_decay=0.01), 2, 0),
    ("nadam_step_lr", "nadam", dict(lr=0.05, momentum_decay=0.1), -1, 0.8),
    ("radam_defaults", "radam", dict(lr=0.05), -1, 0),
    ("radam_betas_wd_skip", "radam", dict(lr=0.1, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1), 7, 0),
    ("radam_step_lr", "radam", dict(lr=0.05, betas=(0.9, 0.99)), -1, 0.8),
    ("adamax_defaults", "adamax", dict(lr=0.05), -1, 0),
    ("adamax_everything_skip", "adamax", dict(lr=0.1, betas=(0.8, 0.95), eps=1e-4, weight_decay=0.1,
                                              maximize=True), 2, 0),
    ("adamax_step_lr", "adamax", dict(lr=0.05), -1, 0.8),
    ("adadelta_defaults", "adadelta", dict(), -1, 0),
    ("adadelta_everything_skip", "adadelta", dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1, maximize=True),
     3, 0),
    ("adadelta_step_lr", "adadelta", dict(lr=2.0), -1, 0.8),
    ("rprop_defaults", "rprop", dict(), -1, 0),
    ("rprop_everything_skip", "rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.08), maximize=True),
     4, 0),
    ("rprop_step_lr", "rprop", dict(lr=0.02), -1, 0.5),
    ("asgd_defaults", "asgd", dict(lr=0.1), -1, 0),
    ("asgd_averaging_wd_skip", "asgd", dict(lr=0.05, lambd=0.01, alpha=0.5, t0=3, weight_decay=0.05), 5, 0),
    ("asgd_maximize_step_lr", "asgd", dict(lr=0.05, lambd=0.1, t0=2, maximize=True), -1, 0.8),
]


def cpp(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tuple):
        return "{" + ", ".join(cpp(x) for x in v) + "}"
    return repr(float(v))


def problem():
    """The initial values, curvatures and per-step linear terms of each parameter, in f64."""
    gen = torch.Generator().manual_seed(7)
    out = []
    for shape in SHAPES:
        p0 = torch.randn(shape, generator=gen, dtype=torch.float64)
        c = torch.rand(shape, generator=gen, dtype=torch.float64) * 1.5 + 0.5
        d = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(STEPS)]
        out.append((p0, c, d))
    more = torch.Generator().manual_seed(8)
    for _, _, d in out:
        d += [torch.randn(d[0].shape, generator=more, dtype=torch.float64) for _ in range(LONG_STEPS - STEPS)]
    return out


def run(kind, options, skip, gamma, params, dtype):
    """The parameters after each step: [step][param] flat lists."""
    torch.set_default_dtype(dtype)
    try:
        return run_steps(kind, options, skip, gamma, params, dtype)
    finally:
        torch.set_default_dtype(torch.float32)


def run_steps(kind, options, skip, gamma, params, dtype):
    """run() under the default dtype `dtype`."""
    ps = [p0.to(dtype).clone().requires_grad_() for p0, _, _ in params]
    cls, _ = KINDS[kind]
    opt = cls(ps, foreach=False, **options)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma) if gamma > 0 else None
    after = []
    for s in range(LONG_STEPS if kind in NEW_KINDS else STEPS):
        opt.zero_grad(set_to_none=True)
        loss = 0
        for j, (p, (_, c, d)) in enumerate(zip(ps, params)):
            if j == len(ps) - 1 and s == skip:
                continue
            c, ds = c.to(dtype), d[s].to(dtype)
            loss = loss + (c * p * p).sum() / 2 + (ds * p).sum()
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        after.append([p.detach().to(torch.float64).flatten().tolist() for p in ps])
    return opt, after


def nested(after):
    return "{" + ", ".join("{" + ", ".join(lits(p) for p in step) + "}" for step in after) + "}"


def main():
    params = problem()
    print("// Generated by tests/tools/pytorch_optim_table.py with PyTorch " + torch.__version__ + ": do not edit.")
    print("// The problem: loss_s = sum_j sum(c_j * p_j^2) / 2 + sum(d_sj * p_j), %d or %d steps."
          % (STEPS, LONG_STEPS))
    print("// {shape, p0, c, d (one list per step)}")
    print("const OptimParam kOptimParams[] = {")
    for shape, (p0, c, d) in zip(SHAPES, params):
        print("    {{%s}, %s, %s, {%s}}," % (", ".join(str(n) for n in shape), lits(p0), lits(c),
                                           ", ".join(lits(x) for x in d)))
    print("};")
    print("// {name, kind, options (all of the kind's, torch's values), skip (the step at which the last")
    print("//  parameter has no gradient; -1: none), StepLR's gamma (0: no schedule),")
    print("//  the parameters after each step in f64, the same run in f32 (widened to f64)}")
    print("const OptimCase kOptimCases[] = {")
    for name, kind, options, skip, gamma in CASES:
        opt, after64 = run(kind, options, skip, gamma, params, torch.float64)
        _, after32 = run(kind, options, skip, gamma, params, torch.float32)
        group = opt.param_groups[0]
        fields = [f for f in FIELDS if f in KINDS[kind][1]]
        lr = options.get("lr", opt.defaults["lr"])  # the group's lr is the scheduled one
        values = {f: (lr if f == "lr" else group[f]) for f in fields}
        opts = "{" + ", ".join(".%s = %s" % (f, cpp(values[f])) for f in fields) + "}"
        print("    {\"%s\", \"%s\", %s, %d, %s," % (name, kind, opts, skip, cpp(gamma)))
        print("     %s," % nested(after64))
        print("     %s}," % nested(after32))
    print("};")


if __name__ == "__main__":
    main()

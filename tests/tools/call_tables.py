"""The writer of the call tables (pytorch_reductions_table.py, pytorch_losses_more_table.py) that
tests/call_table.h reads: each case names a call (the test maps the same name to kiln's call) and holds the inputs,
PyTorch's outputs and the gradients of sum(out * u) over the floating outputs (u = 1, 2, 3, ...) with respect to
each f64 input."""
import torch

from cpp_literals import ints, lits
from torch_tables import header, weights_for

DTYPES = {torch.float64: "kFloat64", torch.float32: "kFloat32", torch.int64: "kInt64", torch.bool: "kBool"}


def tensor(x):
    return "{" + DTYPES[x.dtype] + ", " + ints(x.shape) + ", " + lits(x.to(torch.float64)) + "}"


def outputs_of(r):
    return list(r) if isinstance(r, tuple) else [r]


def gradients(outs, inputs):
    """d(sum over floating outputs of sum(out * u)) for each input requiring grad (zeros where torch gives none)."""
    xs = [x for x in inputs if x.requires_grad]
    floats = [o for o in outs if o.dtype == torch.float64 and o.requires_grad]
    if not xs or not floats:
        return [[] for _ in inputs]
    loss = sum((o * weights_for(o)).sum() for o in floats)
    g = torch.autograd.grad(loss, xs, allow_unused=True)
    g = [torch.zeros_like(x) if gi is None else gi for x, gi in zip(xs, g)]
    it = iter(g)
    return [next(it).flatten().tolist() if x.requires_grad else [] for x in inputs]


def write_cases(out, what, calls, cases):
    """The table of `cases`, (name, call id, inputs, with gradients: a bool, or one per input), each run through
    calls[call id]. The gradients are those of the f64 inputs that want them (empty lists for the others)."""
    header(out, what, "name, call, inputs {dtype, shape, values}, outputs {dtype, shape, values}, with_grad, "
                      "grads (one per input: d(sum over floating outputs of sum(out * u)), empty for a non-f64 input)")
    names = set()
    for name, call, inputs, grad in cases:
        assert name not in names, name
        names.add(name)
        wants = grad if isinstance(grad, list) else [grad] * len(inputs)
        xs = [x.clone().requires_grad_(w) if x.dtype == torch.float64 else x for x, w in zip(inputs, wants)]
        outs = [o.detach() if o.dtype != torch.float64 else o for o in outputs_of(calls[call](*xs))]
        grad = any(wants) and any(o.dtype == torch.float64 and o.requires_grad for o in outs)
        gs = gradients(outs, xs) if grad else [[] for _ in xs]
        out.write("{\"%s\", \"%s\",\n {%s},\n {%s},\n %s,\n {%s}},\n" % (
            name, call, ", ".join(tensor(x.detach()) for x in inputs), ", ".join(tensor(o.detach()) for o in outs),
            "true" if grad else "false", ", ".join(lits(g) for g in gs)))

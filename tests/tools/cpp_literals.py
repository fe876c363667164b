"""C++ literals of float values for the generated PyTorch tables (tests/*.inc): NaN and the
infinities by the tests' names kNaN and kInf, every other value as the repr of its double."""


def lit(v):
    """One value."""
    if v != v:
        return "kNaN"
    if v in (float("inf"), float("-inf")):
        return "kInf" if v > 0 else "-kInf"
    return repr(float(v))


def lits(vs):
    """A braced list of the values of an iterable, or of a tensor (flattened)."""
    if hasattr(vs, "flatten"):
        vs = vs.flatten().tolist()
    return "{" + ", ".join(lit(float(v)) for v in vs) + "}"


def ints(vs):
    """A braced list of integers."""
    return "{" + ", ".join(str(int(v)) for v in vs) + "}"


def cbool(b):
    """A C++ bool."""
    return "true" if b else "false"

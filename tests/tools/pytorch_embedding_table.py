#!/usr/bin/env python3
"""Prints tests/pytorch_embedding_table.inc: torch.nn.Embedding with max_norm (and norm_type, padding_idx)
over several forward passes, the reference of test_embedding_max_norm. Each pass renormalizes, in place, the
rows its indices reference, then looks them up; the table holds, per pass, the output, the weight after it
and the weight's gradient of sum(out * u) (u = 1, 2, 3, ...; the gradient zeroed before each pass). Run with
Debian's python3-torch (1.13):
    cd tests/tools && /usr/bin/python3 pytorch_embedding_table.py > ../pytorch_embedding_table.inc"""
import sys

import torch

from cpp_literals import cbool, ints, lit, lits
from torch_tables import header, weights_for

INF = float("inf")

# (name, num_embeddings, embedding_dim, padding_idx (None), max_norm, norm_type, f64, passes: index lists
# (nested lists give their shape), weight scale (the N(0, 1) rows times it, so that some exceed max_norm))
CASES = [
    ("l2_repeated_rows", 7, 4, None, 1.0, 2.0, True, [[0, 2, 2, 5], [2, 3], [[1, 1], [6, 0]]], 1.5),
    ("l1_padding_row_renormed", 6, 3, 2, 1.5, 1.0, True, [[2, 0, 2], [[4], [2], [5]], [1, 2, 3]], 1.0),
    ("p3_negative_padding_idx", 5, 5, -1, 2.0, 3.0, True, [[4, 4, 1], [0, 3, 4, 1]], 1.2),
    ("inf_norm", 4, 3, None, 0.8, INF, True, [[3, 1], [[0, 1, 2], [3, 3, 3]]], 1.0),
    ("max_norm_0", 3, 2, None, 0.0, 2.0, True, [[1], [0, 1]], 1.0),
    ("no_row_exceeds", 5, 3, 0, 100.0, 2.0, True, [[0, 4, 4], [1]], 1.0),
    ("fractional_p", 6, 4, None, 1.1, 1.5, True, [[5, 0, 5, 2], [[3, 2]], [1, 4, 0]], 1.3),
    ("f32_l2", 9, 5, 4, 1.2, 2.0, False, [[8, 4, 1, 1, 0], [[2, 3, 4], [8, 8, 7]], [5, 6]], 1.0),
]


def main(out):
    header(out, "torch.nn.Embedding(max_norm, norm_type, padding_idx) over several forward passes",
           "{name, num, dim, padding_idx (-1000: none), max_norm, norm_type, f64, initial weight, per pass: "
           "index shape and indices, output, weight after, weight grad}")
    out.write("const EmbeddingCase kEmbeddingCases[] = {\n")
    gen = torch.Generator().manual_seed(41)
    for name, num, dim, pad, max_norm, norm_type, f64, passes, scale in CASES:
        dtype = torch.float64 if f64 else torch.float32
        w0 = (torch.randn(num, dim, generator=gen, dtype=torch.float64) * scale).to(dtype)
        e = torch.nn.Embedding(num, dim, padding_idx=pad, max_norm=max_norm, norm_type=norm_type, _weight=w0.clone())
        out.write("    {\"%s\", %d, %d, %d, %s, %s, %s,\n     %s,\n     {" %
                  (name, num, dim, -1000 if pad is None else pad, lit(max_norm), lit(norm_type), cbool(f64),
                   lits(w0)))
        for idx in passes:
            x = torch.tensor(idx)
            e.weight.grad = None
            y = e(x)
            (y * weights_for(y)).sum().backward()
            out.write("\n      {%s, %s,\n       %s,\n       %s,\n       %s}," %
                      (ints(x.shape), ints(x.flatten().tolist()), lits(y.detach()), lits(e.weight.detach()),
                       lits(e.weight.grad)))
        out.write("}},\n")
    out.write("};\n")


if __name__ == "__main__":
    main(sys.stdout)

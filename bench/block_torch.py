#!/usr/bin/env python3
"""kiln_bench's TransformerBlockStep in PyTorch, for a side-by-side: one training step of the same
pre-LN block (nn.TransformerEncoderLayer, norm_first, GELU, 4x feed-forward, causal self-attention,
no dropout) with AdamW (lr 1e-3), at batch 16 x 64 tokens, d_model 128, 4 heads; the loss is the mean
square of the output. Prints the minimum and median ms per step over --reps repetitions of --steps
steps (after a warm-up), in eager mode, the way a PyTorch user trains it.

    OPENBLAS_CORETYPE=Zen taskset -c 0 /usr/bin/python3 bench/block_torch.py --threads 1
    taskset -c 0 ./build/bench/kiln_bench --benchmark_filter='^TransformerBlockStep/16x64x128/threads:1'

Run with Debian's python3-torch (1.13); set OPENBLAS_CORETYPE as bench/openblas_env.sh says (its
best kernels on this CPU)."""
import argparse
import statistics
import time

import torch
import torch.nn as nn

BATCH, TOKENS, DIM, HEADS = 16, 64, 128, 4


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20, help="steps per repetition")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    block = nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=4 * DIM, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True)
    opt = torch.optim.AdamW(block.parameters(), lr=1e-3)
    x = torch.randn(BATCH, TOKENS, DIM)
    causal = torch.triu(torch.full((TOKENS, TOKENS), float("-inf")), diagonal=1)

    def step():
        opt.zero_grad()
        loss = block(x, src_mask=causal).square().mean()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(5):
        step()
    per_step = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        per_step.append((time.perf_counter() - t0) * 1e3 / args.steps)
    print(f"TransformerBlockStep/16x64x128 torch threads {args.threads}: min {min(per_step):.2f} ms, "
          f"median {statistics.median(per_step):.2f} ms per step")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The training step of kiln's `train --model cnn` (examples/train.cpp) in PyTorch, for a side-by-side
speed figure (issue 17): 2 x (conv3x3 pad 1 + BatchNorm + ReLU + 2x2 max-pool), 64*7*7 -> 128 -> 10,
cross-entropy, Adam (lr 1e-3), batch 128, on random Fashion-MNIST-shaped data (speed only: the
loss is not comparable). Prints samples/s over the timed steps, after warm-up steps.

    OPENBLAS_CORETYPE=Cooperlake taskset -c 1 /usr/bin/python3 bench/cnn_torch.py --threads 1
    ./build/examples/train --model cnn --epochs 1 --limit 2560      # kiln's figure, the same step

Run with Debian's python3-torch (1.13), whose convolutions run through oneDNN."""
import argparse
import time

import torch
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    xs = torch.rand(a.steps + a.warmup, a.batch, 1, 28, 28)
    ys = torch.randint(0, 10, (a.steps + a.warmup, a.batch))

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(a.warmup, a.warmup + a.steps):
        step(i)
    dt = time.perf_counter() - t0
    print("torch %s, %d threads: %.1f ms a step, %.0f samples/s" %
          (torch.__version__, a.threads, 1e3 * dt / a.steps, a.steps * a.batch / dt))


if __name__ == "__main__":
    main()

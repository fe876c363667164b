#!/usr/bin/env python3
"""Ring all-reduce cost model for data-parallel training (docs/distributed.md, issue 19).

Per step, every rank all-reduces its gradients (n bytes). A ring all-reduce (reduce-scatter then
all-gather, Patarasuk & Yuan 2009; Thakur, Rabenseifner & Gropp 2005) costs

    T_comm(p) = 2 (p - 1) alpha + 2 (p - 1) / p * n / B + (p - 1) / p * n / R

alpha: per-message latency, B: link bandwidth (bytes/s), R: the rate at which a core adds two
arrays (the reduction). kiln's DDP does not overlap the all-reduce with the backward pass
(backward is lazy), so a step of local time T_c takes T_c + T_comm(p) and the weak-scaling
efficiency (fixed per-rank batch) is T_c / (T_c + T_comm(p)).

    python3 bench/dist_model.py [--alpha-us 5] [--mlp-ms 3.8] [--cnn-ms 286]
"""
import argparse

PARAMS = {"mlp": 235146, "cnn": 421834}  # examples/train's "parameters:" line, f32 gradients


def t_comm(p, n, alpha, link_bytes_per_s, reduce_bytes_per_s):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / link_bytes_per_s + (p - 1) / p * n / reduce_bytes_per_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--alpha-us", type=float, default=5.0, help="per-message latency (us)")
    ap.add_argument("--reduce-gbs", type=float, default=11.7, help="reduction rate (GB/s): STREAM triad, 1 core")
    ap.add_argument("--mlp-ms", type=float, default=3.8, help="measured local step time of the MLP (ms)")
    ap.add_argument("--cnn-ms", type=float, default=286.0, help="measured local step time of the CNN (ms)")
    a = ap.parse_args()
    local = {"mlp": a.mlp_ms * 1e-3, "cnn": a.cnn_ms * 1e-3}
    print("| model | bytes/step | link | p=8 | p=64 | p=512 |")
    print("|---|---|---|---|---|---|")
    for model, params in PARAMS.items():
        n = 4 * params
        for gbps in (100, 400):
            cells = []
            for p in (8, 64, 512):
                t = t_comm(p, n, a.alpha_us * 1e-6, gbps / 8 * 1e9, a.reduce_gbs * 1e9)
                cells.append(f"{t * 1e3:.2f} ms, {100 * local[model] / (local[model] + t):.1f}%")
            print(f"| {model} | {n:,} | {gbps} Gb/s | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

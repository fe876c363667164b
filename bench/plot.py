#!/usr/bin/env python3
"""Figures from kiln_bench's JSON output (Debian: apt install python3-matplotlib).

    ./build/bench/kiln_bench --benchmark_filter='Elementwise8|Softmax|LayerNorm|Gemm/|MLPStep' \
        --benchmark_format=json --benchmark_repetitions=1 > bench.json
    python3 bench/plot.py bench.json docs/

writes into the output folder:
  memory_bound.png   GB/s of each memory-bound case: kiln fused, kiln unfused and the
                     hand-written fused C++ loop (the ceiling), on 1 and 2 threads
  gemm.png           GEMM GFLOP/s of kiln against Eigen at 1024 and 2048, 1 and 2 threads
  training_step.png  time of one compiled MLP training step (batch 128 and 1024),
                     fused and unfused, 1 and 2 threads
Numbers are read as ratios within one run (see bench/RESULTS.md); a case missing from
the JSON is left out of its figure.
"""

import json
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    """Benchmark entries by (base name, threads, fused) from one JSON file."""
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b["name"]
        threads = re.search(r"/threads:(\d+)", name)
        fused = re.search(r"/fused:(\d+)", name)
        base = re.sub(r"/(threads|fused):\d+|/real_time|/manual_time|_median", "", name)
        key = (base, int(threads.group(1)) if threads else 1, int(fused.group(1)) if fused else None)
        runs[key] = b
    return runs


def bars(ax, groups, series, ylabel, title):
    """Grouped bars: groups on the x axis, one bar per series (label -> list of values)."""
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [g + i * width for g in range(len(groups))]
        ax.bar(xs, [v or 0 for v in values], width, label=label)
        for x, v in zip(xs, values):
            if v:
                ax.text(x, v, f"{v:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))])
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)


def value(runs, key, field):
    """A field of one run: rates (GB/s, GFLOP/s) in units of 1e9 a second, times in ms."""
    b = runs.get(key)
    if not b or b.get(field) is None:
        return None
    v = b[field]
    if field.startswith("G") and v > 1e6:  # Google Benchmark writes rates per second
        v /= 1e9
    if field == "real_time":
        v *= {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
    return v


def memory_bound(runs, out):
    cases = ["Elementwise8/16M", "Softmax/8192x1024", "LayerNorm/8192x1024"]
    groups, fused, unfused, ceiling = [], [], [], []
    for case in cases:
        for t in (1, 2):
            groups.append(f"{case.split('/')[0]}\n{t} thr")
            fused.append(value(runs, (case + "/kiln", t, 1), "GB/s"))
            unfused.append(value(runs, (case + "/kiln", t, 0), "GB/s"))
            ceiling.append(value(runs, (case + "/cxx_fast", t, None), "GB/s"))
    fig, ax = plt.subplots(figsize=(9, 4))
    bars(ax, groups, {"kiln fused": fused, "kiln unfused": unfused, "hand-fused C++ loop (-ffast-math)": ceiling}, "GB/s",
         "Memory-bound kernels: fused vs unfused vs the hand-written ceiling")
    fig.tight_layout()
    fig.savefig(out / "memory_bound.png", dpi=110)


def gemm(runs, out):
    groups, kiln, eigen = [], [], []
    for n in (1024, 2048):
        for t in (1, 2):
            groups.append(f"{n}^3\n{t} thr")
            kiln.append(value(runs, (f"Gemm/{n}/kiln", t, None), "GFLOP/s"))
            eigen.append(value(runs, (f"Gemm/{n}/eigen", t, None), "GFLOP/s"))
    fig, ax = plt.subplots(figsize=(6, 4))
    bars(ax, groups, {"kiln": kiln, "Eigen": eigen}, "GFLOP/s", "SGEMM: kiln's generated GEMM vs Eigen")
    fig.tight_layout()
    fig.savefig(out / "gemm.png", dpi=110)


def training_step(runs, out):
    groups, fused, unfused = [], [], []
    for batch in (128, 1024):
        for t in (1, 2):
            groups.append(f"batch {batch}\n{t} thr")
            fused.append(value(runs, (f"MLPStep/{batch}/kiln", t, 1), "real_time"))
            unfused.append(value(runs, (f"MLPStep/{batch}/kiln", t, 0), "real_time"))
    fig, ax = plt.subplots(figsize=(6, 4))
    bars(ax, groups, {"fused": fused, "unfused (KILN_FUSION=0)": unfused}, "ms per step",
         "Compiled MLP training step (784-256-128-10, SGD)")
    fig.tight_layout()
    fig.savefig(out / "training_step.png", dpi=110)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py BENCH.json OUTPUT_DIR")
    runs = load(sys.argv[1])
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    memory_bound(runs, out)
    gemm(runs, out)
    training_step(runs, out)
    print(f"wrote {out}/memory_bound.png, gemm.png, training_step.png")


if __name__ == "__main__":
    main()

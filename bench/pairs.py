#!/usr/bin/env python3
"""kiln against a peer in one kiln_bench process, by repetitions interleaved at random.

On a shared machine a run minutes after another sees other neighbours; repetitions interleaved
at random within one process (Google Benchmark's --benchmark_enable_random_interleaving) see the
same ones. For each case that has both a `/kiln/` and a `/PEER/` variant (the same name
otherwise), this prints both sides' minimum and median time and the peer's time over kiln's
(> 1: kiln is faster), by minimum and by median.

    bench/pairs.py '^Gemm/(1024|2048)/(kiln|openblas)/threads:(1|2)' --peer openblas
    bench/pairs.py '^Softmax/8192x1024/(kiln/threads:1/fused:1|cxx_fast/threads:1)' --peer cxx_fast

The peer's settings come from bench/openblas_env.sh (sourced by the caller or set here).
"""
import argparse
import collections
import csv
import io
import os
import re
import subprocess
import sys

UNITS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("filter", help="a --benchmark_filter matching both sides")
    ap.add_argument("--peer", required=True, help="the peer's name component (openblas, cxx_fast, eigen)")
    ap.add_argument("--bin", default="./build/bench/kiln_bench")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--min-time", default="0.2")
    ap.add_argument("--cpus", default="0,1", help="taskset -c")
    args = ap.parse_args()
    env = dict(os.environ)
    if "OPENBLAS_CORETYPE" not in env:
        out = subprocess.run(["bash", "-c", ". bench/openblas_env.sh && env"], capture_output=True, text=True).stdout
        env.update(dict(line.split("=", 1) for line in out.splitlines() if "=" in line))
    cmd = ["taskset", "-c", args.cpus, args.bin, f"--benchmark_filter={args.filter}",
           f"--benchmark_min_time={args.min_time}", f"--benchmark_repetitions={args.reps}",
           "--benchmark_enable_random_interleaving=true", "--benchmark_format=csv"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout
    times = collections.defaultdict(list)
    rows = csv.reader(io.StringIO(out[out.index("name,"):] if "name," in out else ""))
    header = next(rows, None)
    if header is None:
        sys.exit("no results: check the filter")
    col = {h: i for i, h in enumerate(header)}
    for r in rows:
        name = r[col["name"]]
        if re.search(r"_(mean|median|stddev|cv)$", name) or r[col["error_occurred"]] == "true":
            continue
        times[name].append(float(r[col["real_time"]]) * UNITS[r[col["time_unit"]]])
    print(f"{'case':60s} {'kiln min/med':>18s} {'peer min/med':>18s}  peer/kiln by min, by median")
    for name in sorted(times):
        if f"/{args.peer}/" not in name:
            continue
        prefix = name.split(f"/{args.peer}/")[0]
        mine = [n for n in times if n.startswith(prefix + "/kiln/") and
                n.split("/kiln/")[1].split("/")[0] == name.split(f"/{args.peer}/")[1].split("/")[0]]
        if len(mine) != 1:
            continue
        k, p = sorted(times[mine[0]]), sorted(times[name])
        km, pm = k[len(k) // 2], p[len(p) // 2]
        print(f"{mine[0]:60s} {k[0]:8.3f} {km:8.3f}  {p[0]:8.3f} {pm:8.3f}  {p[0] / k[0]:.3f}x  {pm / km:.3f}x")


if __name__ == "__main__":
    main()

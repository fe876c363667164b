#!/bin/bash
# Before/after of two kiln_bench binaries on a noisy machine, round by round.
#
#   bench/ab.sh OLD NEW FILTER [ROUNDS=10] [MIN_TIME=0.3] [CPUS=0]
#
# Each round runs OLD, then NEW, on the benchmarks matching FILTER (a --benchmark_filter regex),
# pinned to CPUS (taskset -c), each binary with a kernel disk cache of its own. Per benchmark it
# prints the median times and the median of the per-round ratios old/new (> 1: NEW is faster)
# with their quartiles, and in how many rounds NEW won. A ratio within one round compares runs
# seconds apart, so slow drifts of a shared machine (other tenants, frequency) cancel, where
# medians of whole runs taken minutes apart do not; on this project's 2-core VMs, the ratios of a
# change that does nothing spread over about +-3%, so read the quartiles and the wins, and run
# 12 rounds or more for effects of a few percent. OpenBLAS cases run with its best settings
# (bench/openblas_env.sh).
#
# Example (the binary before a change copied aside first):
#   cp build/bench/kiln_bench /tmp/kiln_bench.before   # ... change, rebuild ...
#   bench/ab.sh /tmp/kiln_bench.before build/bench/kiln_bench 'Gemm/2048/kiln/threads:1' 20 0.5
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,4p' "$0"
  exit 2
fi
. "$(dirname "$0")/openblas_env.sh"
OLD=$1 NEW=$2 FILTER=$3 ROUNDS=${4:-10} MIN_TIME=${5:-0.3} CPUS=${6:-0}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for round in $(seq "$ROUNDS"); do
  for side in old new; do
    bin=$OLD
    [ "$side" = new ] && bin=$NEW
    KILN_CACHE_DIR="${TMPDIR:-/tmp}/kiln_ab_cache_$side" \
      taskset -c "$CPUS" "$bin" --benchmark_filter="$FILTER" --benchmark_min_time="$MIN_TIME" 2>/dev/null |
      awk -v side="$side" -v round="$round" '/^[A-Z][A-Za-z0-9]*\// {print round, side, $1, $2}' >> "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    round_, side, name, value = line.split()
    times[(name, round_)][side] = float(value)
ratios, old, new = collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(list)
for (name, _), t in times.items():
    if len(t) == 2:
        ratios[name].append(t["old"] / t["new"])
        old[name].append(t["old"])
        new[name].append(t["new"])
for name in sorted(ratios):
    r = sorted(ratios[name])
    q = len(r) // 4
    print(f"{name:64s} old {statistics.median(old[name]):8.4g} new {statistics.median(new[name]):8.4g}  "
          f"old/new {statistics.median(r):.3f} [{r[q]:.3f}, {r[-1 - q]:.3f}]  new won {sum(x > 1 for x in r)}/{len(r)}")
PY

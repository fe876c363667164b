#!/usr/bin/env python3
"""Communication in a KILN_TRACE timeline of `examples/train --ddp` (one file per rank):
the replayed steps' time, the collectives' time (on any thread), and the part of it the
steps waited for (collectives on the stepping thread, and "wait" spans for stages that ran
on another thread while the next plans computed), each summed over the steps after the first.

  mpirun -np 2 sh -c 'KILN_TRACE=r$OMPI_COMM_WORLD_RANK.json ./build/examples/train --ddp ...'
  python3 bench/dist_overlap.py r0.json
"""
import json
import sys


def main(path):
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    steps = sorted((e for e in events if e.get("cat") == "step"), key=lambda e: e["ts"])[1:]  # the first traces
    if not steps:
        sys.exit(f"{path}: no replayed steps")
    main_tid = steps[0]["tid"]
    inside = lambda e: any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] for s in steps)
    dist = [e for e in events if e.get("cat") == "dist" and inside(e)]
    step_us = sum(s["dur"] for s in steps)
    comm_us = sum(e["dur"] for e in dist if e["name"] != "wait")
    exposed_us = sum(e["dur"] for e in dist if e["tid"] == main_tid)
    print(f"{path}: {len(steps)} steps, {step_us / 1e3:.1f} ms; collectives {comm_us / 1e3:.1f} ms "
          f"({100 * comm_us / step_us:.1f}% of the steps); waited for {exposed_us / 1e3:.1f} ms "
          f"({100 * exposed_us / step_us:.1f}%)")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)

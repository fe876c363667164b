#!/usr/bin/env python3
"""Where inside a JIT-compiled kernel `perf` found the time: samples per instruction.

`perf annotate` cannot show a kiln kernel's instructions (its code exists only in the process),
but kiln can write two things that together name them: KILN_PERF_MAP=1 makes perf attribute
samples to the kernel's symbol with an offset, and KILN_DEBUG=5 with KILN_DUMP_DIR writes the
kernel's assembly (<kernel>.s, a GEMM kernel's followed by its support routines). This script
assembles that file again (llvm-mc-19, objdump) and prints each instruction with the samples
at its offset.

    mkdir -p /tmp/dump
    KILN_DEBUG=5 KILN_DUMP_DIR=/tmp/dump KILN_CACHE_DIR=/tmp/kc KILN_JIT_TIER=0 ./build/examples/train --epochs 1
    KILN_PERF_MAP=1 KILN_CACHE_DIR=/tmp/kc KILN_JIT_TIER=0 perf record -e cpu-clock -o perf.data \\
        ./build/examples/train --epochs 1
    perf report -i perf.data --sort sym              # which kernels
    bench/perf_kernel.py perf.data /tmp/dump k_gemm_add_relu_f32_84cf3a1bd638 --top 30
    bench/perf_kernel.py perf.data /tmp/dump kiln_gemm_f32_12x32_micro_rows_fetching \\
        --asm /tmp/dump/k_gemm_add_relu_f32_84cf3a1bd638.s

Both runs must use the same code: the same kiln build, the optimized tier only
(KILN_JIT_TIER=0), and the disk cache the first run filled, so that the second run loads the
very objects whose assembly was dumped.
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

SUPPORT_MARK = "# GEMM support routines"


def samples_by_offset(perf_data, symbol):
    """Samples of `symbol` in perf_data, by offset into it."""
    out = subprocess.run(["perf", "script", "-i", perf_data, "-F", "ip,sym,symoff"], capture_output=True, text=True,
                         check=True).stdout
    counts = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*[0-9a-f]+\s+(\S+)\+0x([0-9a-f]+)", line)
        if m and m.group(1) == symbol:
            counts[int(m.group(2), 16)] += 1
    return counts


def instructions(asm_path, symbol):
    """(offset, text) of each instruction of `symbol`, assembled from the dump."""
    text = open(asm_path).read()
    # A GEMM kernel's dump is several modules: the kernel's, then each part of its support
    # routines (their local labels would clash if assembled together): take the one defining symbol.
    if SUPPORT_MARK in text:
        modules = text.split(SUPPORT_MARK)
        modules = [modules[0]] + [m.split("\n", 1)[1] for m in modules[1:]]
        text = next((m for m in modules if re.search(rf"^{re.escape(symbol)}:", m, re.M)), modules[0])
    with tempfile.TemporaryDirectory() as tmp:
        src, obj = os.path.join(tmp, "k.s"), os.path.join(tmp, "k.o")
        open(src, "w").write(text)
        subprocess.run(["llvm-mc-19", "-filetype=obj", "-o", obj, src], check=True)
        dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-M", "intel", obj], capture_output=True,
                             text=True, check=True).stdout
    result, current, start = [], None, 0
    for line in dis.splitlines():
        m = re.match(r"^([0-9a-f]+) <(.+)>:", line)
        if m:
            current, start = m.group(2), int(m.group(1), 16)
            continue
        m = re.match(r"^\s+([0-9a-f]+):\s+(.*)", line)
        if m and current == symbol:
            result.append((int(m.group(1), 16) - start, m.group(2).strip()))
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("perf_data")
    ap.add_argument("dump_dir", help="KILN_DUMP_DIR of the KILN_DEBUG=5 run")
    ap.add_argument("symbol", help="a kernel (k_...) or a GEMM support routine (kiln_gemm_...)")
    ap.add_argument("--asm", help="the .s file holding the symbol (default: DUMP_DIR/SYMBOL.s)")
    ap.add_argument("--top", type=int, default=0, help="only the N instructions with the most samples, hottest first")
    args = ap.parse_args()
    asm = args.asm or os.path.join(args.dump_dir, args.symbol + ".s")
    if not os.path.exists(asm):
        sys.exit(f"no {asm}: pass the kernel's .s with --asm (a support routine is in each GEMM kernel's)")
    counts = samples_by_offset(args.perf_data, args.symbol)
    insns = instructions(asm, args.symbol)
    if not insns:
        sys.exit(f"{args.symbol} is not defined in {asm}")
    total = sum(counts.values())
    print(f"{total} samples in {args.symbol}")
    rows = [(counts.get(off, 0), off, txt) for off, txt in insns]
    if args.top:
        rows = sorted(rows, key=lambda r: -r[0])[: args.top]
    for n, off, txt in rows:
        print(f"{n:7d} {100.0 * n / max(total, 1):5.1f}%  {off:6x}:  {txt}")


if __name__ == "__main__":
    main()

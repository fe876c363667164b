#!/usr/bin/env bash
# The GPU check: builds kiln (Release) on a machine with an NVIDIA GPU, runs the tests with
# KILN_CUDA_CHECK=1, the GPU benchmarks (bench/bench_gpu.cpp) and one epoch of
# examples/train on cuda, then prints the ratios the GPU runtime is judged by.
#
# Usage (from anywhere; paths are relative to the repository root):
#   bench/gpu_check.sh
# Environment (all optional):
#   OUT=DIR            where results go (default ./gpu-out): gpu_bench.json, summary.txt, logs
#   BUILD_DIR=DIR      build directory (default build-gpu)
#   SKIP_BUILD=1       reuse BUILD_DIR as it is (no configure, no build)
#   SKIP_TESTS=1       do not run ctest
#   CTEST_ARGS="..."   extra ctest arguments (e.g. "-R Gpu" or "-E Tsan")
#   BENCH_MIN_TIME=S   --benchmark_min_time (default 0.5)
#   TRAIN_ARGS="..."   arguments of examples/train after --device cuda (default "--epochs 1")
#   KILN_FASHION_MNIST=DIR  the Fashion-MNIST IDX files for train (default /usr/share/datasets/fashion-mnist,
#                      else the slice gpu_bundle.sh packs in gpu-bundle/fashion-mnist)
#   KILN_CUDA_DRIVER=PATH   the driver library (default: libcuda.so.1 where `ldconfig -p` lists it)
#   KILN_CUDA_HOME=DIR the CUDA toolkit (default /usr/local/cuda); CMAKE_PREFIX_PATH to find LLVM/TBB/...
#
# Build requirements: kiln needs LLVM 19.1 and oneTBB 2021 (its CPU backend is compiled in;
# there is no GPU-only build), range-v3, GoogleTest (tests) and Google Benchmark (kiln_bench),
# all as CMake packages, plus CMake >= 3.25, a C++20 compiler and ninja. The CUDA toolkit is
# not needed to build; at run time kiln loads libcuda.so.1, NVRTC and (for the cuBLAS
# reference) libcublas with dlopen. Where a package is missing the script says which ones
# and exits 2 before building.
#
# Without the build requirements, the script runs from a bundle made by bench/gpu_bundle.sh
# on a machine that has them (BUNDLE=FILE, default gpu-bundle/kiln-gpu.tar.xz when present):
# the bundle's test_gpu_runtime, kiln_bench and train, with their own libraries.
#
# Either way, tests/test_gpu_runtime also runs against the real driver
# (KILN_CUDA_DRIVER=libcuda.so.1): results on the GPU must equal the CPU's bitwise.
#
# Exit status: 0 when everything ran (the ratios are reported, not enforced: see
# summary.txt), 1 when the tests, the benchmarks or train failed, 2 when kiln cannot be
# built here.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu-out}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
BENCH_MIN_TIME="${BENCH_MIN_TIME:-0.5}"
TRAIN_ARGS="${TRAIN_ARGS:---epochs 1}"
DATA="${KILN_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}"
# no data set on the machine: the slice gpu_bundle.sh packs beside the bundle
[[ -z "${KILN_FASHION_MNIST:-}" && ! -d "$DATA" && -d "$ROOT/gpu-bundle/fashion-mnist" ]] && DATA="$ROOT/gpu-bundle/fashion-mnist"
export KILN_CUDA_HOME="${KILN_CUDA_HOME:-/usr/local/cuda}"
# the driver where the loader's cache has it (the bundle's own loader may not look there)
if [[ -z "${KILN_CUDA_DRIVER:-}" ]]; then
  driver="$( (ldconfig -p 2>/dev/null || true) | awk '/libcuda\.so\.1 /{print $NF; exit}')"
  [[ -n "$driver" ]] && export KILN_CUDA_DRIVER="$driver"
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
failed=()

step() { printf '\n=== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || echo "nvidia-smi: unavailable"
compgen -G "$KILN_CUDA_HOME/lib64/libnvrtc.so.*" || echo "no NVRTC under $KILN_CUDA_HOME/lib64"
# kiln::dist's NCCL needs 2 ranks on 2 GPUs (NCCL refuses two ranks on one GPU): only whether it is there.
ldconfig -p 2>/dev/null | grep -m1 'libnccl.so.2' ||
  echo "no libnccl.so.2 (KILN_NCCL_LIBRARY): kiln::dist would stage CUDA tensors through host memory"

# ---------------------------------------------------------------- dependencies and build
BUNDLE="${BUNDLE:-$ROOT/gpu-bundle/kiln-gpu.tar.xz}"
BENCH="$BUILD_DIR/bench/kiln_bench"
TRAIN="$BUILD_DIR/examples/train"
GPU_TEST="$BUILD_DIR/tests/test_gpu_runtime"
use_bundle() { # runs the bundled programs instead of building
  step "unpacking $BUNDLE (built from commit $(tar -xJOf "$BUNDLE" kiln-gpu/COMMIT | cut -c1-12))"
  # unpacked outside OUT, which keeps only the results (a device tool may fetch all of OUT)
  local dir
  dir="$(mktemp -d)"
  tar -C "$dir" -xJf "$BUNDLE"
  BENCH="$dir/kiln-gpu/bin/kiln_bench"
  TRAIN="$dir/kiln-gpu/bin/train"
  GPU_TEST="$dir/kiln-gpu/bin/test_gpu_runtime"
  SKIP_BUILD=1
  SKIP_TESTS=1 # ctest needs the build tree; the GPU runtime's tests run below
}
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  step "checking build dependencies"
  for tool in cmake ninja; do
    command -v "$tool" >/dev/null || { echo "missing: $tool"; exit 2; }
  done
  # A throw-away CMake project looks for every package, so that all missing ones are named
  # at once (kiln's own configure stops at the first).
  probe="$(mktemp -d)"
  trap 'rm -rf "$probe"' EXIT
  cat >"$probe/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(kiln_dependency_probe LANGUAGES C CXX)
set(missing "")
foreach(spec "LLVM;19.1;LLVM 19 (Debian llvm-19-dev)" "TBB;2021;oneTBB 2021 (libtbb-dev)"
             "range-v3;;range-v3 (librange-v3-dev)" "GTest;;GoogleTest (libgtest-dev)"
             "benchmark;;Google Benchmark (libbenchmark-dev)")
  list(GET spec 0 pkg)
  list(GET spec 1 ver)
  list(GET spec 2 what)
  find_package(${pkg} ${ver} QUIET) # as kiln does: GTest in module mode, the others by their CMake configs
  if(${pkg}_FOUND)
    message(STATUS "found: ${what} at ${${pkg}_DIR}")
  else()
    message(STATUS "MISSING: ${what}")
    list(APPEND missing "${what}")
  endif()
endforeach()
if(missing)
  string(REPLACE ";" ", " missing "${missing}")
  message(FATAL_ERROR "kiln cannot be built here: missing ${missing}")
endif()
EOF
  buildable=1
  if ! cmake -S "$probe" -B "$probe/build" -G Ninja >"$OUT/dependencies.log" 2>&1; then
    buildable=0
    grep -E "found:|MISSING:|cannot be built|CMake Error" "$OUT/dependencies.log" || cat "$OUT/dependencies.log"
  fi
  if ((buildable)); then :
  elif [[ -f "$BUNDLE" ]]; then
    use_bundle
  else
    {
      echo "kiln cannot be built on this machine:"
      grep -E "MISSING:" "$OUT/dependencies.log" | sed 's/^-- /  /'
      echo "kiln needs LLVM 19 and oneTBB to build at all (its CPU JIT is part of every build), and"
      echo "GoogleTest and Google Benchmark for the tests and kiln_bench. Install them (or point"
      echo "CMAKE_PREFIX_PATH at them) and run this script again. Nothing was built or measured."
    } | tee "$OUT/summary.txt"
    exit 2
  fi
fi
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  grep -E "found:" "$OUT/dependencies.log" | sed 's/^-- /  /'

  step "configure ($BUILD_DIR, Release)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA_HOME="$KILN_CUDA_HOME" \
    >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; echo "configure failed" | tee "$OUT/summary.txt"; exit 2; }
  step "build"
  if ! cmake --build "$BUILD_DIR" -j "$(nproc)" >"$OUT/build.log" 2>&1; then
    tail -60 "$OUT/build.log"
    echo "build failed (see $OUT/build.log)" | tee "$OUT/summary.txt"
    exit 2
  fi
  tail -1 "$OUT/build.log"
fi

# ---------------------------------------------------------------- tests
if [[ "${SKIP_TESTS:-0}" != 1 ]]; then
  step "ctest (KILN_CUDA_CHECK=1)"
  # shellcheck disable=SC2086
  if ! KILN_CUDA_CHECK=1 ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-} \
      >"$OUT/ctest.log" 2>&1; then
    failed+=("ctest")
  fi
  grep -E "tests passed|tests failed|\*\*\*Failed|\(Failed\)|Timeout|Not Run" "$OUT/ctest.log" || tail -20 "$OUT/ctest.log"
fi

step "test_gpu_runtime on the GPU (KILN_CUDA_DRIVER=${KILN_CUDA_DRIVER:-libcuda.so.1})"
if ! KILN_CUDA_DRIVER="${KILN_CUDA_DRIVER:-libcuda.so.1}" "$GPU_TEST" >"$OUT/gpu_runtime_tests.log" 2>&1; then
  failed+=("test_gpu_runtime")
fi
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/gpu_runtime_tests.log" || tail -20 "$OUT/gpu_runtime_tests.log"

# ---------------------------------------------------------------- benchmarks
step "GPU benchmarks"
"$BENCH" --benchmark_filter='^Gpu/' --benchmark_min_time="$BENCH_MIN_TIME" \
  --benchmark_out="$OUT/gpu_bench.json" --benchmark_out_format=json 2>&1 | tee "$OUT/gpu_bench.txt" ||
  failed+=("kiln_bench")

# ---------------------------------------------------------------- train
step "examples/train --device cuda $TRAIN_ARGS"
train_status="not run"
if [[ -f "$DATA/train-images-idx3-ubyte" || -f "$DATA/train-images-idx3-ubyte.gz" ]]; then
  # shellcheck disable=SC2086
  if "$TRAIN" --device cuda --data "$DATA" $TRAIN_ARGS 2>&1 | tee "$OUT/train.log"; then
    train_status="ok ($(grep -iE "epoch|accuracy" "$OUT/train.log" | tail -1))"
  else
    train_status="FAILED (see train.log)"
    failed+=("train")
  fi
else
  train_status="skipped: no Fashion-MNIST IDX files in $DATA (set KILN_FASHION_MNIST)"
  echo "$train_status"
fi

# ---------------------------------------------------------------- ratios
step "summary"
python3 - "$OUT/gpu_bench.json" "$train_status" "${failed[*]:-}" <<'EOF' | tee "$OUT/summary.txt"
import json, sys

path, train_status, failed = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    with open(path) as f:
        doc = json.load(f)
except (OSError, ValueError) as e:
    print(f"no benchmark results ({path}: {e})")
    doc = {"benchmarks": []}

ctx = doc.get("context", {})
runs = [b for b in doc.get("benchmarks", []) if b.get("run_type", "iteration") == "iteration"]
print(f"kiln GPU check, {ctx.get('date', '?')} on {ctx.get('host_name', '?')}")
errors = [b for b in runs if b.get("error_occurred")]
for b in errors:
    print(f"  {b['name']}: not measured: {b.get('error_message', '?')}")

def find(prefix):
    """All measured runs whose name starts with prefix."""
    return [b for b in runs if b["name"].startswith(prefix) and not b.get("error_occurred")]

def first(prefix):
    found = find(prefix)
    return found[0] if found else None

def gbs(b):
    return b["bytes_per_second"] / 1e9

copy = first("Gpu/Copy/")
if copy:
    print(f"  copy bandwidth {gbs(copy):8.1f} GB/s  ({copy['name']})")
for b in find("Gpu/Elementwise8/") + find("Gpu/Softmax/"):
    print(f"  {b['name'].removesuffix('/manual_time'):40s} {gbs(b):8.1f} GB/s")
for b in find("Gpu/Sgemm/") + find("Gpu/CublasSgemm/"):
    print(f"  {b['name'].removesuffix('/manual_time'):40s} {b['FLOP/s'] / 1e12:8.2f} TFLOP/s")
nv = first("Gpu/NvrtcColdCompile/")
if nv:
    secs = nv["real_time"] * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[nv.get("time_unit", "ns")]
    print(f"  NVRTC cold compile of one MLP step: {secs:.2f} s for {nv.get('compiled', 0):.0f} distinct kernels "
          f"({nv.get('kernels', 0):.0f} launches), {nv.get('ms_per_kernel', 0):.0f} ms a kernel")

print("ratios:")
def ratio(label, num, den, target=None):
    if num is None or den is None:
        print(f"  {label}: n/a (not measured)")
        return
    r = num / den
    verdict = "" if target is None else (f"  target >= {target}: " + ("MET" if r >= target else "MISSED"))
    print(f"  {label}: {r:.3f}{verdict}")

ew = first("Gpu/Elementwise8/")
ratio("Elementwise8 / copy (GB/s)", ew and gbs(ew), copy and gbs(copy), 0.85)
for b in find("Gpu/Softmax/"):
    shape = b["name"].removeprefix("Gpu/Softmax/").removesuffix("/manual_time")
    ratio(f"Softmax {shape} / copy (GB/s)", gbs(b), copy and gbs(copy))
kg, cb = first("Gpu/Sgemm/"), first("Gpu/CublasSgemm/")
ratio("kiln SGEMM / cuBLAS SGEMM (FLOP/s)", kg and kg["FLOP/s"], cb and cb["FLOP/s"], 0.6)
# attention forward + backward: the composite's time over the fused kernels' (above 1: fused is faster)
for b in find("Gpu/Attention/fused:1/"):
    t = b["name"].removeprefix("Gpu/Attention/fused:1/").removesuffix("/manual_time")
    comp = first(f"Gpu/Attention/fused:0/{t}/")
    print(f"  attention {t}: fused {b['real_time']:.3f} {b.get('time_unit', '')} (fused kernels ran: {b.get('fused', 0):.0f})"
          + (f", composite {comp['real_time']:.3f}" if comp else ""))
    ratio(f"Attention {t} composite / fused (time)", comp and comp["real_time"], b["real_time"])
print(f"train: {train_status}")
print(f"failed steps: {failed or 'none'}")
EOF

if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi

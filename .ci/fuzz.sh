#!/usr/bin/env bash
# Fuzzes the graph text IR parser, the kernel IR text parser, the safetensors loader and the IDX reader with libFuzzer
# (clang-19, ASan + UBSan, the libraries instrumented with -fsanitize=fuzzer-no-link),
# in its own build directory build-fuzz. Malformed input must always be a kiln::Error:
# any crash, sanitizer report, abort, leak, timeout (> 10 s per input) or out-of-memory
# (> 2 GB) stops the run and leaves the input as build-fuzz/crash-* (or timeout-*/oom-*).
#
#   .ci/fuzz.sh                 60 s per target (the CI run)
#   FUZZ_SECONDS=3600 .ci/fuzz.sh   a longer run: an hour per target
#   FUZZ_TARGETS="text" .ci/fuzz.sh a subset
#   FUZZ_JOBS=2                 parallel fuzzing processes per target (-fork)
#
# Seeds come from tests/fuzz/corpus/<target>/ (checked in, small); new interesting inputs
# accumulate in build-fuzz/corpus/<target>/ (not checked in). A crashing input worth
# keeping goes to tests/fuzz/corpus/<target>/ and into tests/test_fuzz_regressions.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"text safetensors idx kernel"}
jobs=${FUZZ_JOBS:-1}
if ! command -v clang++-19 >/dev/null; then
  echo "fuzz.sh: clang++-19 is missing (apt-get install clang-19 libclang-rt-19-dev)" >&2
  exit 2
fi
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_ASSERTIONS=ON \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link" -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" \
  -DKILN_SANITIZE=ON -DKILN_FUZZ=ON -DKILN_BUILD_BENCH=OFF >/dev/null
build_targets=""
for t in $targets; do build_targets="$build_targets fuzz_$t"; done
cmake --build build-fuzz -j "$(nproc)" --target $build_targets
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in $targets; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "== fuzz_$t: $seconds s"
  fork=()
  if [ "$jobs" -gt 1 ]; then fork=(-fork="$jobs"); fi
  # (the crash input, if any, is written to build-fuzz/ and named in the output)
  (cd build-fuzz && "./tests/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
     -max_len=8192 -print_final_stats=1 "${fork[@]}" "corpus/$t" "../tests/fuzz/corpus/$t" \
     > "fuzz_$t.log" 2>&1) || status=1
  grep -v -e NEW_FUNC -e '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)' "build-fuzz/fuzz_$t.log" | tail -n 30
done
exit $status

#!/usr/bin/env bash
# The README's Quick start: installs what is missing, builds (Release, assertions on), then
#   run  [args...]  runs the main job: examples/train (an MLP on Fashion-MNIST; --help lists options)
#   gpt  [args...]  runs the second main job: examples/gpt (a character-level GPT on the fortunes)
#   test            runs every test through ctest
#   bench [args...] runs the benchmark binary
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
shift || true
bash .ci/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_ASSERTIONS=ON >/dev/null
cmake --build build -j "$jobs"
case "$mode" in
  run) ./build/examples/train "$@" ;;
  gpt) ./build/examples/gpt "$@" ;;
  test) ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600 ;;
  bench) ./build/bench/kiln_bench "$@" ;;
  *) echo "usage: .ci/kiln.sh run|gpt|test|bench [args]" >&2; exit 2 ;;
esac

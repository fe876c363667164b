#!/bin/bash
# One sitting: kiln against the peers this machine has (issue 17's table): OpenBLAS, the
# -ffast-math hand loops, libtorch (kiln_vs_torch, when built; bench/cnn_torch.py is PyTorch's CNN step)
# and XLA:CPU (bench/mlp_jax.py, when JAX is installed: JAX_PYTHON names a python that has it,
# default /tmp/jaxenv/bin/python; see that script for the one-line install).
# Run from the repository root after a build.
set -u
cd "$(dirname "$0")/.."
. bench/openblas_env.sh
echo "== OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE OMP_WAIT_POLICY=$OMP_WAIT_POLICY"
B=./build/bench/kiln_bench
echo "== gemm against OpenBLAS and memory-bound against the -ffast-math loops (kiln_bench, bench/pairs.py:"
echo "   repetitions interleaved at random in one process; peer/kiln by minimum and by median)"
python3 bench/pairs.py '^Gemm/[^/]*/(kiln|openblas)/threads:(1|2)' --peer openblas --reps 6 --bin $B
python3 bench/pairs.py '^(Elementwise8/16M|Softmax/8192x1024|LayerNorm/8192x1024)/(kiln/threads:(1|2)/fused:1|cxx_fast/threads:(1|2))/' \
  --peer cxx_fast --reps 10 --bin $B
echo "== MLP step against libtorch (kiln_vs_torch)"
./build/bench/kiln_vs_torch --benchmark_filter='^EagerMLPStep/(1|128|1024)/(kiln_compiled|torch)/threads:(1|2)' --benchmark_min_time=0.3 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null | grep median
echo "== MLP step against XLA:CPU (the functional step, as JAX writes it; bench/mlp_jax.py)"
JAX_PYTHON=${JAX_PYTHON:-/tmp/jaxenv/bin/python}
if [ -x "$JAX_PYTHON" ]; then
  taskset -c 0 $B --benchmark_filter='^MLPStep/kiln_functional/threads:1/' --benchmark_min_time=1 2>/dev/null | grep "^MLPStep"
  taskset -c 0 "$JAX_PYTHON" bench/mlp_jax.py --threads 1 | grep "^MLPStep"
  $B --benchmark_filter='^MLPStep/kiln_functional/threads:2/' --benchmark_min_time=1 2>/dev/null | grep "^MLPStep"
  "$JAX_PYTHON" bench/mlp_jax.py --threads 2 | grep "^MLPStep"
else
  echo "no JAX at $JAX_PYTHON: skipped"
fi
echo "== CNN step against libtorch (kiln_vs_torch: the compiled step and libtorch's eager one, one run)"
./build/bench/kiln_vs_torch --benchmark_filter='^CNNStep/128/(kiln|torch)/threads:(1|2)' --benchmark_min_time=1 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>/dev/null | grep median
echo "== cold compile"
$B --benchmark_filter='^Cold/(MLPStep|CNNStep)' 2>/dev/null | grep "^Cold"

# Sourced by bench/peers.sh and bench/ab.sh: the peers' best configuration on this host, unless
# the caller set it. OPENBLAS_CORETYPE names the kernels OpenBLAS runs (Debian's build picks slow
# ones by itself on these machines): on AMD Zen 4 its AVX2 "Zen" kernels are the fastest (SGEMM
# 1024 at 105 GFLOP/s against 101 for "Cooperlake" and 98 unset, bench/RESULTS.md stop 35), on
# Intel AVX-512 hosts its "Cooperlake" ones. OMP_WAIT_POLICY=passive keeps libgomp's idle threads
# (libtorch's OpenBLAS) from spinning against the other thread on 2 cores.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q AuthenticAMD /proc/cpuinfo 2>/dev/null; then OPENBLAS_CORETYPE=Zen; else OPENBLAS_CORETYPE=Cooperlake; fi
fi
export OPENBLAS_CORETYPE
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

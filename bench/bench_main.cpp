// Entry point of kiln_bench. Figures are compared as ratios within one run.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();

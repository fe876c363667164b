// Entry point of kiln_bench. Figures are compared as ratios within one run.
// `--kiln_compile_child` runs the child process of the Compile/MLPStep benchmark,
// `--kiln_cold_child=NAME` those of Cold/* (bench_cold.cpp).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/options.h"

int kiln_compile_cost_child();
int kiln_cold_child(const std::string& name);

int main(int argc, char** argv) {
  // The benchmarks time steady states: unless KILN_JIT_TIER says otherwise, kernels are
  // compiled by the optimized tier before they first run, as before the tiers existed,
  // so that no quick code and no background compile falls into a timed loop. Cold/*
  // children set KILN_JIT_TIER themselves.
  if (!std::getenv("KILN_JIT_TIER")) kiln::options().jit_tier = false;
  if (argc == 2 && std::strcmp(argv[1], "--kiln_compile_child") == 0) return kiln_compile_cost_child();
  if (argc == 2 && std::strncmp(argv[1], "--kiln_cold_child=", 18) == 0) return kiln_cold_child(argv[1] + 18);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

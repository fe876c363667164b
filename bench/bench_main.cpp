// Entry point of kiln_bench. Figures are compared as ratios within one run.
// `--kiln_compile_child` runs the child process of the Compile/MLPStep benchmark,
// `--kiln_cold_child=NAME` those of Cold/* (bench_cold.cpp).
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

int kiln_compile_cost_child();
int kiln_cold_child(const std::string& name);

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--kiln_compile_child") == 0) return kiln_compile_cost_child();
  if (argc == 2 && std::strncmp(argv[1], "--kiln_cold_child=", 18) == 0) return kiln_cold_child(argv[1] + 18);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

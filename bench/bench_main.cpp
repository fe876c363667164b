// Entry point of kiln_bench. Figures are compared as ratios within one run.
// `--kiln_compile_child` runs the child process of the Compile/MLPStep benchmark.
#include <benchmark/benchmark.h>

#include <cstring>

int kiln_compile_cost_child();

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--kiln_compile_child") == 0) return kiln_compile_cost_child();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

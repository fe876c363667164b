#pragma once
/// \file child_process.h
/// Test helper: runs one disabled test of this test binary in a child process with extra
/// environment variables (what a process reads once at start: KILN_* options, anomaly mode, the
/// kernel disk cache) and returns what it printed, stdout and stderr together.

#include <cstdio>
#include <filesystem>
#include <string>

namespace kiln::test {

/// The output of `this binary --gtest_filter=<test> --gtest_also_run_disabled_tests` run under
/// `env` ("NAME=value ..." as for env(1)); `test` names a DISABLED_ test.
inline std::string run_child_test(const std::string& env, const std::string& test) {
  const std::string cmd = "env " + env + " " + std::filesystem::read_symlink("/proc/self/exe").string() +
                          " --gtest_filter=" + test + " --gtest_also_run_disabled_tests 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return out;
}

} // namespace kiln::test

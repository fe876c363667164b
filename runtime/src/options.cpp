#include "kiln/options.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "codegen/disk_cache.h"
#include "runtime/env.h"

namespace kiln {

namespace {

// An environment variable's value that is not what it should be keeps the default, said once on
// stderr (atoi would read "true" or "on" as 0: KILN_FUSION=true turned fusion off, without a word).
void warn_ignored(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "[kiln] %s=%s is not %s; it is ignored\n", name, value, expected);
}

/// A boolean variable: 1/0, true/false, on/off, yes/no (any case); unset or empty: `fallback`.
bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  warn_ignored(name, v, "a boolean (1/0, true/false, on/off, yes/no)");
  return fallback;
}

/// An integer variable (the whole value); unset or empty: `fallback`.
long long env_int(const char* name, long long fallback) {
  const runtime::EnvInteger e = runtime::env_integer(name);
  if (e.malformed()) warn_ignored(name, e.text, "an integer");
  return e.value.value_or(fallback);
}

/// A positive number of seconds; unset or empty: `fallback`.
double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x > 0) || !std::isfinite(x)) {
    warn_ignored(name, v, "a positive number of seconds");
    return fallback;
  }
  return x;
}

Options from_environment() {
  Options o;
  o.debug = static_cast<int>(env_int("KILN_DEBUG", o.debug));
  o.fusion = env_flag("KILN_FUSION", o.fusion);
  o.fuel = env_int("KILN_FUEL", o.fuel);
  o.cuda_check = env_flag("KILN_CUDA_CHECK", o.cuda_check);
  o.launch_blocking = env_flag("KILN_LAUNCH_BLOCKING", o.launch_blocking);
  o.schedule_cache = env_flag("KILN_SCHEDULE_CACHE", o.schedule_cache);
  o.jit_tier = env_flag("KILN_JIT_TIER", o.jit_tier);
  o.perf_map = env_flag("KILN_PERF_MAP", o.perf_map);
  o.dist_timeout = env_seconds("KILN_DIST_TIMEOUT", o.dist_timeout);
  o.nccl = env_flag("KILN_NCCL", o.nccl);
  if (const char* p = std::getenv("KILN_DUMP_DIR")) o.dump_dir = p;
  o.detect_anomaly = env_flag("KILN_DETECT_ANOMALY", o.detect_anomaly);
  o.profile = env_flag("KILN_PROFILE", o.profile);
  if (const char* t = std::getenv("KILN_TRACE")) o.trace_path = t;
  if (const char* d = std::getenv("KILN_DEVICE"); d && *d) o.device = d;
  if (const char* c = std::getenv("KILN_CACHE_DIR")) o.cache_dir = c;
  else if (const char* home = std::getenv("HOME"); home && *home) o.cache_dir = std::string(home) + "/.cache/kiln";
  else codegen::DiskCache::warn_disabled("HOME is empty or unset and KILN_CACHE_DIR is not set");
  return o;
}
} // namespace

Options& options() {
  static Options o = from_environment();
  return o;
}

} // namespace kiln

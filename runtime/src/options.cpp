#include "kiln/options.h"

#include <cstdlib>

#include "codegen/disk_cache.h"

namespace kiln {

namespace {
Options from_environment() {
  Options o;
  if (const char* d = std::getenv("KILN_DEBUG")) o.debug = std::atoi(d);
  if (const char* f = std::getenv("KILN_FUSION")) o.fusion = std::atoi(f) != 0;
  if (const char* f = std::getenv("KILN_FUEL"); f && *f) o.fuel = std::atoll(f);
  if (const char* c = std::getenv("KILN_CUDA_CHECK")) o.cuda_check = std::atoi(c) != 0;
  if (const char* b = std::getenv("KILN_LAUNCH_BLOCKING")) o.launch_blocking = std::atoi(b) != 0;
  if (const char* c = std::getenv("KILN_SCHEDULE_CACHE")) o.schedule_cache = std::atoi(c) != 0;
  if (const char* t = std::getenv("KILN_JIT_TIER")) o.jit_tier = std::atoi(t) != 0;
  if (const char* m = std::getenv("KILN_PERF_MAP")) o.perf_map = std::atoi(m) != 0;
  if (const char* t = std::getenv("KILN_DIST_TIMEOUT"); t && *t) o.dist_timeout = std::atof(t);
  if (const char* n = std::getenv("KILN_NCCL"); n && *n) o.nccl = std::atoi(n) != 0;
  if (const char* p = std::getenv("KILN_DUMP_DIR")) o.dump_dir = p;
  if (const char* a = std::getenv("KILN_DETECT_ANOMALY")) o.detect_anomaly = std::atoi(a) != 0;
  if (const char* p = std::getenv("KILN_PROFILE")) o.profile = std::atoi(p) != 0;
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

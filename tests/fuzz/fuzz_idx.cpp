// libFuzzer target: the IDX reader (plain or gzip). Any file either loads with as many
// bytes as its dims say, or throws kiln::Error.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/data.h"

namespace {
const std::string& path() {
  static const std::string p = "/tmp/kiln_fuzz_idx_" + std::to_string(::getpid()) + ".idx";
  return p;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path().c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const kiln::data::IdxArray a = kiln::data::read_idx(path());
    unsigned __int128 n = 1;
    for (int64_t d : a.dims) n *= static_cast<unsigned __int128>(d);
    if (n != a.data.size()) {
      std::fprintf(stderr, "dims do not match the %zu data bytes\n", a.data.size());
      std::abort();
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}

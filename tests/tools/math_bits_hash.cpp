// Hashes the bits of kiln's f32 exp and sigmoid on every float (2^32 inputs, in 64 chunks), one
// line per function and chunk. Not a ctest (~50 s): run it with the library before and after a
// change to codegen/src/math_body.h that must keep every result, and diff the two outputs. Build
// as tests/tools/erf_exhaustive.cpp says; point LD_LIBRARY_PATH at the other build's libkiln and
// KILN_CACHE_DIR at a separate directory for the second run.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>
#include "kiln/kiln.h"
int main() {
  using namespace kiln;
  const uint64_t chunk = uint64_t{1} << 26;
  std::vector<float> xs(chunk);
  for (uint64_t lo = 0; lo < (uint64_t{1} << 32); lo += chunk) {
    for (uint64_t i = 0; i < chunk; ++i) {
      const uint32_t b = static_cast<uint32_t>(lo + i);
      std::memcpy(&xs[i], &b, 4);
    }
    const Tensor x = from_vector(xs, {static_cast<int64_t>(chunk)});
    for (const char* fn : {"exp", "sigmoid"}) {
      const Tensor y = std::strcmp(fn, "exp") == 0 ? exp(x) : sigmoid(x);
      uint64_t h = 1469598103934665603ull; // FNV-1a over the result bits
      for (float v : y.to_vector<float>()) {
        uint32_t b;
        std::memcpy(&b, &v, 4);
        h = (h ^ b) * 1099511628211ull;
      }
      std::printf("%s %08llx %016llx\n", fn, static_cast<unsigned long long>(lo), static_cast<unsigned long long>(h));
    }
  }
}

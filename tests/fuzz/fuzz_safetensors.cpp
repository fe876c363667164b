// libFuzzer target: the safetensors checkpoint loader. Any file either loads (every
// tensor then has the element count its shape says) or throws kiln::Error.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/checkpoint.h"

namespace {
const std::string& path() {
  static const std::string p = "/tmp/kiln_fuzz_safetensors_" + std::to_string(::getpid()) + ".safetensors";
  return p;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path().c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const kiln::checkpoint::Contents c = kiln::checkpoint::load_safetensors(path());
    for (const auto& [name, t] : c.tensors) {
      int64_t n = 1;
      for (int64_t d : t.shape()) n *= d;
      if (n != t.numel() || static_cast<uint64_t>(n) * kiln::dtype_size(t.dtype()) > size) std::abort();
      if (n <= 4096) (void)t.to_vector<double>(); // reads every element (an Input leaf: no JIT)
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}

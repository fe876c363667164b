// libFuzzer target: the kernel IR text parser (codegen::parse_kernel). Any input either
// parses to a kernel or throws kiln::Error; a parsed kernel prints, and its text parses
// back to a kernel that prints the same text.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "codegen/kernel_ir.h"
#include "kiln/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::codegen::Kernel k;
  try {
    k = kiln::codegen::parse_kernel(text);
  } catch (const kiln::Error&) {
    return 0;
  }
  const std::string printed = kiln::codegen::print_kernel(k);
  try {
    if (kiln::codegen::print_kernel(kiln::codegen::parse_kernel(printed)) != printed) {
      std::fprintf(stderr, "round trip changed the text:\n%s", printed.c_str());
      std::abort();
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "printed kernel does not parse: %s\n%s", e.what(), printed.c_str());
    std::abort();
  }
  return 0;
}

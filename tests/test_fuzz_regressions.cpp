// Replays the fuzz corpora (tests/fuzz/corpus/<target>/: seeds and inputs that crashed
// or hung kiln before a fix) through the fuzz targets' own checks, with any compiler and
// without libFuzzer, and pins each fixed bug with a named test. Under the sanitizer
// build (.ci/sanitize.sh) these also catch the out-of-bounds reads and overflows that
// the fixes removed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "codegen/kernel_ir.h"
#include "graph/interpret.h"
#include "graph/text.h"
#include "graph/verify.h"
#include "kiln/checkpoint.h"
#include "kiln/data.h"
#include "kiln/error.h"

// The fuzz targets' bodies, each under its own name and namespace.
#define LLVMFuzzerTestOneInput fuzz_text_one
namespace fuzz_text {
#include "fuzz/fuzz_text.cpp"
}
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors_one
namespace fuzz_safetensors {
#include "fuzz/fuzz_safetensors.cpp"
}
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_idx_one
namespace fuzz_idx {
#include "fuzz/fuzz_idx.cpp"
}
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_kernel_one
namespace fuzz_kernel {
#include "fuzz/fuzz_kernel.cpp"
}
#undef LLVMFuzzerTestOneInput

namespace fs = std::filesystem;

namespace kiln {
namespace {

using Target = int (*)(const uint8_t*, size_t);

int replay(const std::string& name, Target target) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(std::string(KILN_FUZZ_CORPUS) + "/" + name)) {
    std::ifstream in(e.path(), std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    SCOPED_TRACE(e.path().string());
    target(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    ++n;
  }
  return n;
}

TEST(FuzzCorpus, Text) { EXPECT_GE(replay("text", fuzz_text::fuzz_text_one), 2); }
TEST(FuzzCorpus, Safetensors) { EXPECT_GE(replay("safetensors", fuzz_safetensors::fuzz_safetensors_one), 2); }
TEST(FuzzCorpus, Idx) { EXPECT_GE(replay("idx", fuzz_idx::fuzz_idx_one), 2); }
TEST(FuzzCorpus, KernelText) { EXPECT_GE(replay("kernel", fuzz_kernel::fuzz_kernel_one), 5); }

TEST(FuzzCorpus, SeedsAreValid) {
  // The checked-in seeds parse and load, so the fuzzers start from the interesting side.
  std::ifstream in(std::string(KILN_FUZZ_CORPUS) + "/text/ops.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(graph::parse_graph(text).size(), 3u);
  EXPECT_EQ(checkpoint::load_safetensors(std::string(KILN_FUZZ_CORPUS) + "/safetensors/two.safetensors").tensors.size(), 3u);
  EXPECT_EQ(data::read_idx(std::string(KILN_FUZZ_CORPUS) + "/idx/labels.idx.gz").data.size(), 4u);
}

// ---------------------------------------------------------------- text IR

/// The parser must reject `text` with a kiln::Error mentioning `what`.
void expect_parse_error(const std::string& text, const std::string& what) {
  try {
    graph::parse_graph(text);
    ADD_FAILURE() << "accepted:\n" << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

// Was: check_node read attrs.ints[d] for every result dim, past the end of a shorter
// permutation (heap overflow under ASan).
TEST(FuzzRegressions, TextPermuteWithFewerDimsThanTheResult) {
  expect_parse_error("%0 = input f32[3,2] i0=1\n%1 = permute f32[2,3,4] (%0) ints=[1,0]\nreturn %1\n", "permute");
}

// Was: accepted; any element count or stride computed from it overflowed int64.
TEST(FuzzRegressions, TextGiganticShapes) {
  expect_parse_error("%0 = const f32[1099511627776,1099511627776]\nreturn %0\n", "too large");
  expect_parse_error("%0 = const f32[0,4611686018427387904,4611686018427387904]\nreturn %0\n", "too large");
  expect_parse_error("%0 = const f32[2199023255552]\nreturn %0\n", "too large");
  EXPECT_NO_THROW(graph::parse_graph("%0 = const f32[1024,1024,1024]\nreturn %0\n")); // 2^30: fine
}

// Was: start + (len - 1) * step overflowed in check_node (UB).
TEST(FuzzRegressions, TextSliceWhoseLastIndexOverflows) {
  expect_parse_error("%0 = input f32[1099511627776] i0=1\n%1 = slice f32[1099511627776] (%0) ints=[0,1099511627776]\nreturn %1\n",
                     "slice");
  expect_parse_error("%0 = input f32[4] i0=1\n%1 = slice f32[3] (%0) ints=[0,4611686018427387904]\nreturn %1\n", "range");
}

// Was: make_node bumped the next input id to i0 + 1, overflowing at INT64_MAX.
TEST(FuzzRegressions, TextInputIdAtInt64Max) {
  expect_parse_error("%0 = input f32[1] i0=9223372036854775807\nreturn %0\n", "input id");
}

// ---------------------------------------------------------------- IDX

std::string temp_file(const std::string& name, const std::string& bytes) {
  const std::string p = (fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

// Was: the element count 2^22 * 2^21 * 2^21 = 2^64 wrapped to 0 and matched an empty file:
// read_idx returned dims promising 2^64 bytes with no data (out-of-bounds reads downstream).
TEST(FuzzRegressions, IdxDimsWhoseProductWrapsToTheDataSize) {
  const std::string bytes = std::string("\0\0\x08\x03", 4) + std::string("\0\x40\0\0", 4) + std::string("\0\x20\0\0", 4) +
                            std::string("\0\x20\0\0", 4);
  const std::string p = temp_file("kiln_idx_wrap", bytes);
  try {
    data::read_idx(p);
    ADD_FAILURE() << "accepted dims whose product overflows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overflow"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

// ---------------------------------------------------------------- safetensors

std::string safetensors(const std::string& header_json, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header_json.size();
  std::memcpy(out.data(), &n, 8);
  return out + header_json + data;
}

// Was: accepted (0 bytes), giving a tensor whose strides overflow int64.
TEST(FuzzRegressions, SafetensorsEmptyShapeWithHugeExtents) {
  const std::string p = temp_file(
      "kiln_st_huge", safetensors(R"({"x":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})", ""));
  EXPECT_THROW(checkpoint::load_safetensors(p), Error);
  fs::remove(p);
}

} // namespace
} // namespace kiln

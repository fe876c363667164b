// Allocation failure (issue 16): memory that cannot be had is a kiln::OutOfMemoryError naming
// the function, the bytes, what they were for and the user's line, never std::bad_alloc or an
// abort. Each case runs in a child process (a gtest death test: the binary re-executed) whose
// address space is limited (RLIMIT_AS) to what it uses plus a headroom, so that the failing
// allocation is one the test chose. Sanitizers need the address space for their shadow memory
// and abort on huge allocations by design: there these tests are skipped.

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/checkpoint.h"
#include "kiln/data.h"
#include "kiln/kiln.h"
#include "kiln/options.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KILN_SANITIZED 1
#endif
#endif

namespace kiln {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMiB = size_t{1} << 20;

// Limits this process's address space to what it maps now plus `headroom` bytes.
void limit_address_space(size_t headroom) {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0;
  statm >> pages;
  rlimit r{};
  getrlimit(RLIMIT_AS, &r);
  r.rlim_cur = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + headroom;
  setrlimit(RLIMIT_AS, &r);
}

// Runs `setup` and then, under an address space of what it uses plus `headroom`, `body`, in a
// child process; `body` returns "" when all is well, else what went wrong. Anything but a
// normal "ok" exit of the child (an abort, a crash, std::bad_alloc, a wrong result) fails.
void in_limited_child(size_t headroom, const std::function<void()>& setup, const std::function<std::string()>& body) {
#ifdef KILN_SANITIZED
  GTEST_SKIP() << "sanitizers need the address space";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto child = [&] {
    std::string failure;
    try {
      // KILN_CUDA_CHECK=1 (a CI pass) also compiles every kernel with NVRTC, which needs far
      // more address space than the headroom: the child measures kiln's own allocations.
      options().cuda_check = false;
      setup();
      limit_address_space(headroom);
      failure = body();
    } catch (const Error& e) {
      failure = std::string("unexpected kiln::Error: ") + e.what();
    } catch (const std::bad_alloc&) {
      failure = "std::bad_alloc escaped";
    } catch (const std::exception& e) {
      failure = std::string("unexpected exception: ") + e.what();
    }
    std::fprintf(stderr, "%s\n", failure.empty() ? "CHILD-OK" : ("CHILD-FAILED: " + failure).c_str());
    std::fflush(stderr);
    std::_Exit(failure.empty() ? 0 : 1);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "CHILD-OK");
}

// "" when `f` throws an OutOfMemoryError of `op` at this file's `line` whose message holds every
// one of `parts`; else what it did instead.
std::string expect_oom(const std::function<void()>& f, const std::string& op, int line,
                       const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    if (e.op() != op) return "op " + e.op() + ", expected " + op + ": " + what;
    if (e.bytes() == 0) return "no byte count: " + what;
    if (what.find("test_memory.cpp:" + std::to_string(line)) == std::string::npos)
      return "not at the user's line " + std::to_string(line) + ": " + what;
    for (const std::string& p : parts)
      if (what.find(p) == std::string::npos) return "no \"" + p + "\" in: " + what;
    return "";
  } catch (const Error& e) {
    return std::string("a kiln::Error that is not an OutOfMemoryError: ") + e.what();
  }
  return "no error";
}

TEST(Memory, AHugeRealizeReadByToVector) {
  in_limited_child(256 * kMiB, [] {}, [] {
    const Tensor t = ones({int64_t{1} << 36});
    return expect_oom([&] { (void)t.to_vector<float>(); }, "to_vector", __LINE__,
                      {"out of host memory: cannot allocate 256 GiB (274877906944 bytes) for f32[68719476736] computed at",
                       "test_memory.cpp:" + std::to_string(__LINE__ - 2)});
  });
}

TEST(Memory, AHugeRealizeOfSeveralTensors) {
  in_limited_child(256 * kMiB, [] {}, [] {
    const Tensor a = rand({int64_t{1} << 34}, 7), b = a * 2;
    return expect_oom([&] { realize({a, b}); }, "realize", __LINE__, {"64 GiB", "f32[17179869184]"});
  });
}

TEST(Memory, AHugeIntermediateArena) {
  in_limited_child(256 * kMiB, [] {}, [] {
    // A computed matmul operand gets a buffer of its own: 256 GiB of intermediate.
    const Tensor a = rand({int64_t{1} << 16, int64_t{1} << 20}, 3) * 2, b = ones({int64_t{1} << 20, 1});
    const Tensor y = matmul(a, b).sum();
    return expect_oom([&] { (void)y.item<float>(); }, "item", __LINE__,
                      {"out of host memory: cannot allocate 256 GiB", "intermediate values computed at test_memory.cpp:" +
                                                                          std::to_string(__LINE__ - 4)});
  });
}

TEST(Memory, ToVectorOfARealizedTensor) {
  // The values fit (400 MB) but their f64 copy (800 MB) does not.
  Tensor t;
  in_limited_child(600 * kMiB, [&] { t = full({100'000'000}, 0.5).realize(); }, [&] {
    std::string r = expect_oom([&] { (void)t.to_vector<double>(); }, "to_vector", __LINE__,
                               {"cannot allocate 763 MiB (800000000 bytes) for the values of f32[100000000]"});
    if (!r.empty()) return r;
    const std::vector<float> v = t.to_vector<float>(); // 400 MB still fits
    return std::string(v[12345] == 0.5f && v.back() == 0.5f ? "" : "wrong values");
  });
}

TEST(Memory, PrintingAHugeTensorReadsOnlyWhatItPrints) {
  // 800 MB of values: printing them copied all of them as f64 (1.6 GB) to print 14.
  Tensor t;
  in_limited_child(256 * kMiB, [&] { t = arange(0, 200'000'000, 1, kFloat32).realize(); }, [&] {
    const std::string s = t.str();
    const std::string want = "tensor([0, 1, 2, ..., 2e+08, 2e+08, 2e+08], dtype=f32)";
    return s == want ? std::string() : "printed " + s;
  });
}

TEST(Memory, FromVectorOfAHugeVector) {
  std::vector<float> values;
  in_limited_child(400 * kMiB, [&] { values.assign(150'000'000, 1.5f); }, [&] {
    return expect_oom([&] { (void)from_vector(values, {150'000'000}); }, "from_vector", __LINE__,
                      {"cannot allocate 572 MiB (600000000 bytes) for the values of f32[150000000]"});
  });
}

TEST(Memory, CompiledStepWithAHugeResult) {
  in_limited_child(256 * kMiB, [] {}, [] {
    auto f = compile([](const std::vector<Tensor>& n) {
      return std::vector<Tensor>{n[0].reshape({1, 1}).expand({1 << 18, 1 << 16}) * 2};
    });
    return expect_oom([&] { (void)f({ones({1})}); }, "compile", __LINE__, {"64 GiB", "f32[262144,65536]"});
  });
}

TEST(Memory, DataSetBatchesAndSlices) {
  in_limited_child(300 * kMiB, [] {}, [] {
    const data::Dataset ds(std::vector<float>(size_t{2} << 20, 0.25f), {1 << 20}, {0, 1}); // 2 samples of 4 MB
    // 100000 samples of 4 MB: 400 GB.
    std::string r = expect_oom([&] { (void)ds.batch(std::vector<int64_t>(100'000, 1)); }, "Dataset::batch", __LINE__,
                               {"for a batch f32[100000,1048576]", "(419430400000 bytes)"});
    if (!r.empty()) return r;
    const data::Dataset wide(std::vector<float>(size_t{50} << 20, 1.f), {50 << 20}, {3}); // one 200 MB sample
    r = expect_oom([&] { (void)wide.slice(0, 1); }, "Dataset::slice", __LINE__, {"for 1 samples"});
    if (!r.empty()) return r;
    const auto loader = wide.batches(1); const int line = __LINE__;
    return expect_oom([&] { (void)loader[0]; }, "Dataset::batch", line, {"for a batch f32[1,52428800]"});
  });
}

TEST(Memory, ShuffledIndicesOfAHugeCount) {
  in_limited_child(256 * kMiB, [] {}, [] {
    return expect_oom([&] { (void)data::shuffled_indices(int64_t{1} << 40, 0); }, "shuffled_indices", __LINE__,
                      {"(8796093022208 bytes) for a permutation of 1099511627776 indices"});
  });
}

// A count beyond what a vector can hold threw std::length_error (no limit needed: it never fits).
TEST(Memory, IndicesBeyondWhatAVectorHolds) {
  const int64_t n = int64_t{1} << 60;
  EXPECT_EQ(expect_oom([&] { (void)data::shuffled_indices(n, 0); }, "shuffled_indices", __LINE__,
                       {"cannot allocate 8.0 EiB (9223372036854775808 bytes) for a permutation of 1152921504606846976 indices"}),
            "");
  const data::DistributedSampler in_order(n, 0, 1, 0, false); const int line = __LINE__;
  EXPECT_EQ(expect_oom([&] { (void)in_order.indices(); }, "DistributedSampler::indices", line, {"for the order of"}), "");
}

TEST(Memory, AHugeModuleAndOptimizerState) {
  in_limited_child(256 * kMiB, [] {}, [] {
    std::string r = expect_oom([&] { nn::Linear huge(1 << 20, 1 << 20); }, "Linear", __LINE__,
                               {"(4398046511104 bytes) for f32[1048576,1048576]"});
    if (!r.empty()) return r;
    nn::Linear wide(1 << 14, 1 << 11); // 128 MiB of weights
    optim::Adam opt(wide.parameters(), {.lr = 1e-3});
    const Tensor loss = wide(ones({1, 1 << 14})).sum();
    loss.backward();
    return expect_oom([&] { opt.step(); }, "Adam::step", __LINE__, {"out of host memory"});
  });
}

// A valid safetensors file holding one f32 tensor of `n` zeros (sparse: no disk space).
void write_sparse_checkpoint(const fs::path& path, int64_t n) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[)" + std::to_string(n) + R"(],"data_offsets":[0,)" +
                             std::to_string(n * 4) + "]}}";
  std::ofstream f(path, std::ios::binary);
  const uint64_t len = header.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << header;
  f.close();
  fs::resize_file(path, 8 + header.size() + static_cast<size_t>(n) * 4);
}

TEST(Memory, CheckpointWithAHugeTensor) {
  const fs::path path = fs::temp_directory_path() / ("kiln_memory_" + std::to_string(::getpid()) + ".safetensors");
  write_sparse_checkpoint(path, 75'000'000); // 300 MB of data: the file fits, the file and its tensor do not
  in_limited_child(450 * kMiB, [] {}, [&] {
    return expect_oom([&] { (void)checkpoint::load_safetensors(path.string()); }, "load_safetensors", __LINE__,
                      {"cannot allocate 286 MiB (300000000 bytes) for f32[75000000] \"w\" of '" + path.string() + "'"});
  });
  in_limited_child(200 * kMiB, [] {}, [&] {
    return expect_oom([&] { (void)checkpoint::load_safetensors(path.string()); }, "load_safetensors", __LINE__,
                      {"for the file '" + path.string() + "'"});
  });
  fs::remove(path);
}

// Property: creation ops (and an elementwise op after them) of random sizes from 2^10 to the
// element cap, realized and read under a 256 MiB headroom, give an OutOfMemoryError or the right
// values; never std::bad_alloc, an abort, a crash or a hang (the test has a time limit).
TEST(Memory, RandomHugeCreationsGiveAnErrorOrTheRightValues) {
  in_limited_child(256 * kMiB, [] {}, [] {
    std::mt19937_64 rng(16);
    int errors = 0, results = 0;
    for (int i = 0; i < 120; ++i) {
      const int log2 = 10 + static_cast<int>(rng() % 38); // 2^10 .. 2^47 elements (the cap is 2^48)
      const int64_t n = (int64_t{1} << log2) + static_cast<int64_t>(rng() % 1000);
      const DType dt = std::vector<DType>{kFloat32, kFloat64, kInt32, kInt64}[rng() % 4];
      const int kind = static_cast<int>(rng() % 4);
      const bool twice = rng() % 2;
      Tensor t = kind == 0 ? zeros({n}, dt) : kind == 1 ? full({n}, 3, dt) : kind == 2 ? arange(0, 1, 1, dt).expand({n}) : ones({2, n / 2}, dt).flatten();
      if (twice) t = t * 2 + 1;
      const double expect = (kind == 0 ? 0 : kind == 1 ? 3 : kind == 2 ? 0 : 1) * (twice ? 2 : 1) + (twice ? 1 : 0);
      const int64_t len = t.numel();
      try {
        const std::vector<double> tail = t.slice(0, len - 3, len).to_vector<double>();
        const std::vector<double> all_but_huge = len < (1 << 22) ? t.to_vector<double>() : tail;
        for (double v : tail)
          if (v != expect) return "case " + std::to_string(i) + ": " + std::to_string(v) + " != " + std::to_string(expect);
        for (double v : all_but_huge)
          if (v != expect) return "case " + std::to_string(i) + ": wrong value";
        // Materialized: an error, or a buffer of n elements within the headroom.
        t.realize();
        ++results;
      } catch (const OutOfMemoryError& e) {
        if (std::string(e.what()).find("out of host memory: cannot allocate") == std::string::npos)
          return std::string("case ") + std::to_string(i) + ": " + e.what();
        ++errors;
      }
    }
    return errors > 10 && results > 10 ? "" : "errors " + std::to_string(errors) + ", results " + std::to_string(results);
  });
}

} // namespace
} // namespace kiln

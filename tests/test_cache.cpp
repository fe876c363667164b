// The on-disk kernel cache, across processes: a second run skips compilation;
// corrupt or truncated entries are rejected and recompiled; concurrent writers are
// safe; an unusable directory disables the cache with one warning. Each case runs
// this binary's DISABLED_ child test in fresh processes.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <string>

#include "codegen/llvm_jit.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"

namespace fs = std::filesystem;

namespace kiln {
namespace {

// The child: realize a few kernels - among them a GEMM with a transposed operand,
// whose kernel calls the GEMM support routines (cached on disk too) - and report what
// the cache did.
TEST(DiskCacheChild, DISABLED_Run) {
  Tensor x = rand({257, 3}, 42) * 3.25 - 1.0;
  Tensor w = rand({24, 40}, 7) - 0.5;
  Tensor h = relu(matmul(rand({40, 40}, 8), w.transpose(0, 1)));         // 40 x 24, a GEMM
  Tensor y = (exp(x) * x.sum({1}, true)).sum({0}) + h.sum({0}).slice(0, 0, 3); // 3
  const std::vector<double> v = y.to_vector<double>();
  auto& jit = codegen::LlvmJit::instance();
  std::printf("RESULT %.17g %.17g %.17g HITS %zu COMPILES %zu REJECTS %zu\n", v[0], v[1], v[2], jit.disk_hits(),
              jit.compiled_count(), jit.disk_rejects());
}

struct ChildReport {
  std::string result, output;
  size_t hits = 0, compiles = 0, rejects = 0;
};

ChildReport run_child(const std::string& cache_dir) {
  const std::string cmd = "KILN_CACHE_DIR='" + cache_dir + "' " + fs::read_symlink("/proc/self/exe").string() +
                          " --gtest_filter=DiskCacheChild.DISABLED_Run --gtest_also_run_disabled_tests 2>&1";
  ChildReport r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) r.output += buf;
  if (p) pclose(p);
  std::smatch m;
  static const std::regex line("RESULT (\\S+ \\S+ \\S+) HITS (\\d+) COMPILES (\\d+) REJECTS (\\d+)");
  if (std::regex_search(r.output, m, line)) {
    r.result = m[1];
    r.hits = std::stoul(m[2]);
    r.compiles = std::stoul(m[3]);
    r.rejects = std::stoul(m[4]);
  }
  return r;
}

std::string fresh_dir(const std::string& name) {
  const std::string d = (fs::temp_directory_path() / ("kiln_cache_test_" + name + "_" + std::to_string(::getpid()))).string();
  fs::remove_all(d);
  return d;
}

TEST(DiskCache, SecondProcessSkipsCompilation) {
  const std::string dir = fresh_dir("second");
  const ChildReport first = run_child(dir);
  ASSERT_FALSE(first.result.empty()) << first.output;
  EXPECT_GE(first.compiles, 2u);
  EXPECT_EQ(first.hits, 0u);
  const ChildReport second = run_child(dir);
  EXPECT_EQ(second.compiles, 0u) << second.output;
  EXPECT_EQ(second.hits, first.compiles);
  EXPECT_EQ(second.result, first.result);
  fs::remove_all(dir);
}

TEST(DiskCache, CorruptAndTruncatedEntriesAreRecompiled) {
  const std::string dir = fresh_dir("corrupt");
  const ChildReport first = run_child(dir);
  ASSERT_FALSE(first.result.empty()) << first.output;
  int damaged = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (damaged++ % 2 == 0) {
      fs::resize_file(e.path(), fs::file_size(e.path()) / 2); // truncated
    } else {
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(fs::file_size(e.path()) - 5));
      f.write("XXXXX", 5); // flipped bytes in the object
    }
  }
  ASSERT_GE(damaged, 2);
  const ChildReport second = run_child(dir);
  EXPECT_EQ(second.rejects, static_cast<size_t>(damaged)) << second.output;
  EXPECT_EQ(second.compiles, first.compiles);
  EXPECT_EQ(second.result, first.result);
  const ChildReport third = run_child(dir); // the rewritten entries load again
  EXPECT_EQ(third.compiles, 0u);
  EXPECT_EQ(third.result, first.result);
  fs::remove_all(dir);
}

// Rewrites the cache entry at `path` with `object` in place of its object code,
// keeping the entry well-formed: the right key, length and checksum.
void replace_object(const fs::path& path, const std::string& object) {
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  uint64_t key_len = 0;
  std::memcpy(&key_len, data.data() + 8, 8);
  std::string entry = data.substr(0, 16 + key_len);
  auto append_u64 = [&](uint64_t v) { entry.append(reinterpret_cast<const char*>(&v), 8); };
  append_u64(object.size());
  append_u64(codegen::hash_text(object));
  entry += object;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(entry.data(), static_cast<std::streamsize>(entry.size()));
}

TEST(DiskCache, WellFormedEntriesWithUnloadableObjectsAreRecompiled) {
  // A checksum only proves the bytes are those written; an object LLVM cannot load
  // (or that lacks the kernel's symbol) must not reach the JIT either.
  const std::string dir = fresh_dir("unloadable");
  const ChildReport first = run_child(dir);
  ASSERT_FALSE(first.result.empty()) << first.output;
  int replaced = 0;
  std::string another_entry_object; // a real object file, of another kernel
  for (const auto& e : fs::directory_iterator(dir)) {
    if (replaced == 0) {
      replace_object(e.path(), "not an object file");
    } else if (replaced == 1) {
      std::ifstream in(e.path(), std::ios::binary);
      another_entry_object.assign(std::istreambuf_iterator<char>(in), {});
    } else if (replaced == 2) {
      // a valid ELF object, but without this kernel's symbol: strip the entry header
      uint64_t key_len = 0;
      std::memcpy(&key_len, another_entry_object.data() + 8, 8);
      replace_object(e.path(), another_entry_object.substr(16 + key_len + 16));
    }
    ++replaced;
  }
  ASSERT_GE(replaced, 3);
  const ChildReport second = run_child(dir);
  EXPECT_EQ(second.rejects, 2u) << second.output;
  EXPECT_EQ(second.compiles, 2u) << second.output;
  EXPECT_EQ(second.result, first.result);
  fs::remove_all(dir);
}

TEST(DiskCache, ConcurrentWritersAreSafe) {
  const std::string dir = fresh_dir("concurrent");
  auto a = std::async(std::launch::async, [&] { return run_child(dir); });
  auto b = std::async(std::launch::async, [&] { return run_child(dir); });
  const ChildReport ra = a.get(), rb = b.get();
  ASSERT_FALSE(ra.result.empty()) << ra.output;
  EXPECT_EQ(ra.result, rb.result);
  const ChildReport after = run_child(dir);
  EXPECT_EQ(after.compiles, 0u) << after.output;
  EXPECT_EQ(after.rejects, 0u);
  EXPECT_EQ(after.result, ra.result);
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().extension(), ".o") << "leftover " << e.path();
  fs::remove_all(dir);
}

TEST(DiskCache, UnusableDirectoryDisablesTheCacheWithOneWarning) {
  const std::string file = fresh_dir("file");
  std::ofstream(file) << "not a directory";
  const ChildReport r = run_child(file + "/sub");
  ASSERT_FALSE(r.result.empty()) << r.output;
  EXPECT_EQ(r.hits, 0u);
  size_t warnings = 0;
  for (size_t pos = 0; (pos = r.output.find("kernel disk cache disabled", pos)) != std::string::npos; ++pos) ++warnings;
  EXPECT_EQ(warnings, 1u) << r.output;
  fs::remove(file);
}

} // namespace
} // namespace kiln

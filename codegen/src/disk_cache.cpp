#include "codegen/disk_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "codegen/kernel_ir.h"

namespace kiln::codegen {

namespace {

void append_u64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }

void warn(const std::string& what) { std::fprintf(stderr, "[kiln] warning: kernel disk cache %s\n", what.c_str()); }

} // namespace

void DiskCache::warn_disabled(const std::string& why) { warn("disabled: " + why); }

void DiskCache::open(const std::string& dir) {
  dir_.clear();
  writable_ = false;
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string probe = dir + "/.probe." + std::to_string(::getpid());
  if (!ec && std::ofstream(probe).good() && std::filesystem::remove(probe, ec)) {
    dir_ = dir;
    writable_ = true;
    return;
  }
  if (std::filesystem::is_directory(dir, ec) && ::access(dir.c_str(), R_OK | X_OK) == 0) {
    dir_ = dir;
    warn("at " + dir + " is read-only: its kernels are used, new ones are not stored");
    return;
  }
  warn_disabled("cannot write to " + dir);
}

std::optional<std::string> DiskCache::read(const std::string& key, const std::function<bool(const std::string&)>& valid) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path(key), ec)) return std::nullopt; // missing, or not a file
  std::ifstream in(path(key), std::ios::binary);
  if (!in) return std::nullopt;
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  auto take = [&](size_t n) -> std::optional<std::string> {
    if (data.size() - pos < n) return std::nullopt;
    pos += n;
    return data.substr(pos - n, n);
  };
  auto take_u64 = [&]() -> std::optional<uint64_t> {
    auto b = take(8);
    if (!b) return std::nullopt;
    uint64_t v;
    std::memcpy(&v, b->data(), 8);
    return v;
  };
  const auto magic = take(8);
  const auto key_len = magic && *magic == "KILNOBJ1" ? take_u64() : std::nullopt;
  const auto stored_key = key_len && *key_len <= data.size() ? take(*key_len) : std::nullopt;
  if (stored_key && *stored_key != key) return std::nullopt; // a hash collision: not ours
  const auto obj_len = stored_key ? take_u64() : std::nullopt;
  const auto obj_hash = obj_len ? take_u64() : std::nullopt;
  const auto obj = obj_hash && *obj_len <= data.size() ? take(*obj_len) : std::nullopt;
  if (!obj || hash_text(*obj) != *obj_hash || pos != data.size() || !valid(*obj)) {
    ++rejects;
    return std::nullopt;
  }
  ++hits;
  return obj;
}

void DiskCache::write(const std::string& key, const std::string& object) {
  if (!writable_) return;
  static std::atomic<uint64_t> counter{0};
  const std::string final_path = path(key);
  const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  std::string entry = "KILNOBJ1";
  append_u64(entry, key.size());
  entry += key;
  append_u64(entry, object.size());
  append_u64(entry, hash_text(object));
  entry += object;
  std::ofstream out(tmp, std::ios::binary);
  out.write(entry.data(), static_cast<std::streamsize>(entry.size()));
  out.close();
  std::error_code ec;
  if (out.good()) std::filesystem::rename(tmp, final_path, ec);
  if (!out.good() || ec) {
    std::filesystem::remove(tmp, ec);
    if (!warned_write_) warn("cannot store " + final_path + " (that kernel is not cached; further failures are not reported)");
    warned_write_ = true;
  }
}

std::string DiskCache::path(const std::string& key) const {
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(hash_text(key)));
  return dir_ + "/" + name + extension_;
}

} // namespace kiln::codegen

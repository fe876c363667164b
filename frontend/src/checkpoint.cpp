// safetensors checkpoints: the JSON header (nlohmann-json), validation of the header
// against the file, a digest of the data, atomic writes, and model/optimizer save and load.

#include "kiln/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <sys/file.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "frontend/src/tensor_impl.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "runtime/storage.h"

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

namespace kiln::checkpoint {

namespace {

// An error about the file `path`, raised here: each public function below is a detail::UserCall, so the
// error is reported as that function's, at its caller's line.
[[noreturn]] void file_error(const std::string& path, const std::string& what) {
  throw Error("checkpoint", "'" + path + "': " + what);
}

// ---------------------------------------------------------------- JSON

// The header's JSON (nlohmann's, RFC 8259, UTF-8 checked), keeping the file's order.
using Json = nlohmann::ordered_json;

constexpr int kMaxJsonDepth = 64;

// Parses the header; throws std::runtime_error with a message (and the byte offset where
// the parser has one). Besides nlohmann's checks: a nesting limit, integers that fit
// int64, and no duplicate top-level names.
Json parse_json_header(std::string_view text) {
  std::set<std::string> names;
  auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    const bool opens = event == E::object_start || event == E::array_start;
    if (opens && depth > kMaxJsonDepth) throw std::runtime_error("JSON nested too deeply");
    if (event == E::value && parsed.is_number_unsigned() &&
        parsed.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw std::runtime_error("integer out of range");
    if (event == E::key && depth == 1 && !names.insert(parsed.get<std::string>()).second)
      throw std::runtime_error("duplicate name \"" + parsed.get<std::string>() + "\"");
    return true;
  };
  try {
    return Json::parse(text, check);
  } catch (const Json::parse_error& e) {
    const std::string what = e.what();
    const size_t colon = what.find(": ");
    throw std::runtime_error((colon == std::string::npos ? what : what.substr(colon + 2)) + " at byte " +
                             std::to_string(e.byte) + " of the header");
  } catch (const Json::exception& e) { // a number out of range
    const std::string what = e.what();
    throw std::runtime_error(what.substr(what.find(']') + 2));
  }
}

// True when s is valid UTF-8 (nlohmann's serializer is the judge, as its parser is on read).
bool valid_utf8(const std::string& s) {
  try {
    (void)Json(s).dump();
    return true;
  } catch (const Json::type_error&) {
    return false;
  }
}

// s as a JSON string, invalid UTF-8 shown as U+FFFD: for messages.
std::string quoted(const std::string& s) { return Json(s).dump(-1, ' ', false, Json::error_handler_t::replace); }

// ---------------------------------------------------------------- dtypes

std::string st_dtype(DType t) {
  switch (t) {
  case DType::Bool: return "BOOL";
  case DType::Int32: return "I32";
  case DType::Int64: return "I64";
  case DType::Float32: return "F32";
  case DType::Float64: return "F64";
  }
  return "?";
}

bool dtype_from_st(const std::string& s, DType& out) {
  for (DType t : {DType::Bool, DType::Int32, DType::Int64, DType::Float32, DType::Float64})
    if (st_dtype(t) == s) return out = t, true;
  return false;
}

// The tensor `name` of `path` from its bytes at `p` (copied once, into the tensor's storage).
Tensor make_tensor(const std::string& path, const std::string& name, DType dt, const uint8_t* p, const IntList& shape,
                   const Loc& loc) {
  const auto n = static_cast<size_t>(graph::numel(shape));
  const size_t bytes = n * dtype_size(dt);
  auto storage = runtime::try_allocate_host(bytes);
  if (!storage)
    detail::out_of_memory("load_safetensors", "host", bytes,
                          std::string(dtype_name(dt)) + graph::shape_str(shape) + " \"" + name + "\" of '" + path + "'", loc);
  if (dt == DType::Bool) // any non-zero byte is true; kiln's bools are 0 or 1
    for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(storage->data())[i] = p[i] != 0;
  else if (bytes)
    std::memcpy(storage->data(), p, bytes);
  return Tensor(graph::make_input(dt, shape, std::move(storage)));
}

// ---------------------------------------------------------------- the data digest

// "__metadata__" key of the optional digest: the CRC-32 (zlib's, as Python's zlib.crc32)
// of the whole data buffer, 8 lowercase hex digits. Written by save_safetensors (about
// 1 ms per 10 MB), verified by load_safetensors when present, not returned as metadata.
const std::string kDigestKey = "kiln.data_crc32";
// "__metadata__" key of the header's digest: the CRC-32 of header_text(), which covers what
// the data digest does not (the other metadata, such as a checkpoint's lr, and each tensor's
// dtype, shape and offsets), so that a changed byte anywhere in the file is found.
const std::string kHeaderDigestKey = "kiln.header_crc32";

bool digest_key(const std::string& k) { return k == kDigestKey || k == kHeaderDigestKey; }

uint32_t crc32_of(uint32_t crc, const void* data, size_t n) {
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// One tensor entry of the header, checked against its own dtype and shape.
struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  IntList shape;
  uint64_t begin = 0, end = 0;
};

// What the header digest covers, independent of the JSON's spelling (order, spaces, escapes):
// the metadata but its digests, by key, then the tensor entries, by name; each field as its
// length, ':' and its bytes, so that no two headers give the same text.
std::string header_text(const Metadata& metadata, std::vector<Entry> entries) {
  std::string text;
  auto field = [&](const std::string& s) { text += std::to_string(s.size()) + ':' + s; };
  for (const auto& [k, v] : metadata)
    if (!digest_key(k)) field(k), field(v);
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (const Entry& e : entries) {
    field(e.name);
    field(st_dtype(e.dtype));
    std::string shape;
    for (int64_t d : e.shape) shape += std::to_string(d) + ',';
    field(shape);
    field(std::to_string(e.begin) + '-' + std::to_string(e.end));
  }
  return text;
}

uint32_t header_crc(const Metadata& metadata, const std::vector<Entry>& entries) {
  const std::string text = header_text(metadata, entries);
  return crc32_of(crc32_of(0, nullptr, 0), text.data(), text.size());
}

// ---------------------------------------------------------------- writing

// The host bytes of each tensor, in order, and their digest.
struct Payload {
  std::vector<std::shared_ptr<graph::Storage>> storage;
  std::vector<size_t> bytes;
  uint32_t crc = 0;
};

Payload payload_of(const NamedTensors& tensors) {
  Payload p;
  p.crc = crc32_of(0, nullptr, 0);
  for (const auto& [name, t] : tensors) {
    p.storage.push_back(detail::host_storage(t, "save_safetensors", Loc::current()));
    p.bytes.push_back(static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
    p.crc = crc32_of(p.crc, p.storage.back()->data(), p.bytes.back());
  }
  return p;
}

std::string build_header(const NamedTensors& tensors, const Metadata& metadata, const Payload& payload) {
  Json h = Json::object();
  std::vector<Entry> entries;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i].second;
    entries.push_back({tensors[i].first, t.dtype(), t.shape(), offset, offset + payload.bytes[i]});
    offset += payload.bytes[i];
  }
  Json meta(metadata);
  meta[kDigestKey] = hex32(payload.crc);
  meta[kHeaderDigestKey] = hex32(header_crc(metadata, entries));
  h["__metadata__"] = std::move(meta);
  for (const Entry& e : entries)
    h[e.name] = {{"dtype", st_dtype(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' '); // the data starts 8-byte aligned, as the reference writer does
  return text;
}

void check_names(const NamedTensors& tensors, const Metadata& metadata) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__") throw Error("save_safetensors", "invalid tensor name \"" + name + "\"");
    if (!valid_utf8(name)) throw Error("save_safetensors", "tensor name " + quoted(name) + " is not valid UTF-8");
    if (!seen.insert(name).second) throw Error("save_safetensors", "duplicate tensor name \"" + name + "\"");
    if (!t.defined()) throw Error("save_safetensors", "tensor \"" + name + "\" is undefined");
  }
  for (const auto& [k, v] : metadata) {
    if (!valid_utf8(k) || !valid_utf8(v))
      throw Error("save_safetensors", "metadata entry " + quoted(k) + ": " + quoted(v) + " is not valid UTF-8");
    if (digest_key(k)) throw Error("save_safetensors", "metadata key \"" + k + "\" is reserved (kiln writes a digest there)");
  }
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) file_error(path, std::string("write failed: ") + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The file a write to `path` replaces: `path`, or what its chain of symlinks names.
std::string write_target(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(p, ec)) return p;
    const std::filesystem::path to = std::filesystem::read_symlink(p, ec);
    if (ec) file_error(path, "cannot read the symlink: " + ec.message());
    p = to.is_absolute() ? to.string() : (std::filesystem::path(dir_of(p)) / to).string();
  }
  file_error(path, "too many levels of symbolic links");
}

// The process's umask, read without changing it (umask(2) can only swap it, racing other threads).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8));
  const mode_t m = ::umask(022); // no /proc: swap and restore
  ::umask(m);
  return m;
}

// Stale temporaries. A writer holds an exclusive flock() on its temporary file
// "<target>.tmp.XXXXXX" from creating it until it has been renamed into place; the kernel
// drops the lock when the writer dies, however it dies. So a temporary of the same target
// that can be locked without waiting belongs to no live writer (in any process, or another
// thread of this one: flock locks belong to the open file) and is removed. A writer that
// finds its own new file unlinked (a cleaner got the lock in the instant between mkstemp
// and flock) starts over with a fresh name.
void remove_stale_temporaries(const std::string& target) {
  const std::string prefix = base_of(target) + ".tmp.";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_of(target), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool pattern = name.size() == prefix.size() + 6 && name.rfind(prefix, 0) == 0 &&
                         std::all_of(name.end() - 6, name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
    if (!pattern) continue; // mkstemp's six letters and digits
    const std::string p = it->path().string();
    const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat by_fd {}, by_name {};
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::fstat(fd, &by_fd) == 0 && ::lstat(p.c_str(), &by_name) == 0 &&
        by_fd.st_ino == by_name.st_ino && by_fd.st_dev == by_name.st_dev && S_ISREG(by_fd.st_mode))
      ::unlink(p.c_str());
    ::close(fd); // drops the lock
  }
}

// Creates and locks the temporary file for `target` (see remove_stale_temporaries); returns its fd.
int create_temporary(const std::string& target, std::string& tmp) {
  for (;;) {
    tmp = target + ".tmp.XXXXXX";
    const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0) file_error(target, std::string("cannot create a temporary file next to it: ") + std::strerror(errno));
    struct stat st {};
    if (::flock(fd, LOCK_EX) == 0 && ::fstat(fd, &st) == 0 && st.st_nlink > 0) return fd;
    ::close(fd); // removed by a cleaner before we locked it: another name
  }
}

// Writes the file's bytes to a temporary file next to the target, fsyncs it, renames it
// over the target and fsyncs the directory, so the rename itself is durable. The file
// gets mode 0666 & ~umask, as other tools' new files; a symlink's target is written.
void write_atomically(const std::string& path, const std::string& header, const NamedTensors& tensors,
                      const Payload& payload) {
  const std::string target = write_target(path);
  std::error_code ec;
  if (std::filesystem::is_directory(target, ec)) file_error(path, "is a directory");
  remove_stale_temporaries(target);
  std::string tmp;
  const int fd = create_temporary(target, tmp);
  try {
    if (::fchmod(fd, 0666 & ~current_umask()) != 0) file_error(tmp, std::string("chmod failed: ") + std::strerror(errno));
    const uint64_t n = header.size();
    write_all(fd, &n, 8, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    for (size_t i = 0; i < tensors.size(); ++i) write_all(fd, payload.storage[i]->data(), payload.bytes[i], tmp);
    if (::fsync(fd) != 0) file_error(tmp, std::string("fsync failed: ") + std::strerror(errno));
    if (::rename(tmp.c_str(), target.c_str()) != 0)
      file_error(path, std::string("cannot rename the temporary file into place: ") + std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) file_error(target, std::string("close failed: ") + std::strerror(errno));
  const int dfd = ::open(dir_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// ---------------------------------------------------------------- reading

std::vector<uint8_t> read_file(const std::string& path, const Loc& loc) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) file_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    file_error(path, dir ? "cannot open: is a directory" : "cannot open: not a regular file");
  }
  std::vector<uint8_t> bytes;
  try {
    bytes = detail::host_vector<uint8_t>(static_cast<size_t>(st.st_size), "load_safetensors",
                                         [&] { return "the file '" + path + "'"; }, loc);
  } catch (const Error&) {
    ::close(fd);
    throw;
  }
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + at, bytes.size() - at);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ::close(fd);
      file_error(path, "read failed");
    }
    at += static_cast<size_t>(r);
  }
  ::close(fd);
  return bytes;
}

const Json* member(const Json& obj, const std::string& key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool non_negative_ints(const Json* v, size_t want, std::vector<int64_t>& out) {
  if (!v || !v->is_array() || (want && v->size() != want)) return false;
  for (const Json& e : *v) {
    if (!e.is_number_integer() || e.get<int64_t>() < 0) return false;
    out.push_back(e.get<int64_t>());
  }
  return true;
}

Entry parse_entry(const std::string& path, const std::string& name, const Json& v) {
  Entry e;
  e.name = name;
  const std::string where = "tensor \"" + name + "\": ";
  if (!v.is_object()) file_error(path, "corrupt header: " + where + "not an object");
  const Json* dt = member(v, "dtype");
  if (!dt || !dt->is_string()) file_error(path, "corrupt header: " + where + "missing \"dtype\"");
  if (!dtype_from_st(dt->get<std::string>(), e.dtype))
    file_error(path, where + "unsupported dtype \"" + dt->get<std::string>() + "\" (kiln reads F32, F64, I32, I64, BOOL)");
  std::vector<int64_t> offs;
  if (!non_negative_ints(member(v, "shape"), 0, e.shape))
    file_error(path, "corrupt header: " + where + "\"shape\" must be a list of non-negative integers");
  if (!non_negative_ints(member(v, "data_offsets"), 2, offs) || offs[0] > offs[1])
    file_error(path, "corrupt header: " + where + "\"data_offsets\" must be [begin, end] with begin <= end");
  e.begin = static_cast<uint64_t>(offs[0]);
  e.end = static_cast<uint64_t>(offs[1]);
  // The product of the non-zero extents must fit too: [0, 2^62, 2^62] holds no bytes, but
  // any stride or element count computed from it later would overflow.
  uint64_t n = dtype_size(e.dtype);
  bool empty = false;
  for (int64_t d : e.shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / static_cast<uint64_t>(d))
      file_error(path, "corrupt header: " + where + "shape too large");
    n *= static_cast<uint64_t>(d);
  }
  if (empty) n = 0;
  if (e.end - e.begin != n)
    file_error(path, "size mismatch: " + where + st_dtype(e.dtype) + graph::shape_str(e.shape) + " needs " +
                         std::to_string(n) + " bytes but data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

Metadata parse_metadata(const std::string& path, const Json& v) {
  if (!v.is_object()) file_error(path, "corrupt header: \"__metadata__\" must be an object of strings");
  Metadata m;
  for (const auto& [k, s] : v.items()) {
    if (!s.is_string()) file_error(path, "corrupt header: \"__metadata__\" value of \"" + k + "\" is not a string");
    m[k] = s.get<std::string>();
  }
  return m;
}

// The digest `key` of `metadata`, removed from it ("" when there is none).
std::string take_digest(const std::string& path, Metadata& metadata, const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return "";
  const std::string want = it->second;
  metadata.erase(it);
  const bool hex = want.size() == 8 && want.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex) file_error(path, "corrupt header: \"" + key + "\" must be 8 lowercase hex digits, got " + quoted(want));
  return want;
}

// Verifies the header against its digest in `metadata` when there is one (before anything
// else is read from it), and removes it.
void check_header_digest(const std::string& path, Metadata& metadata, const std::vector<Entry>& entries) {
  const std::string want = take_digest(path, metadata, kHeaderDigestKey);
  if (want.empty()) return;
  const std::string got = hex32(header_crc(metadata, entries));
  if (got != want)
    file_error(path, "corrupt header: the CRC-32 of its metadata and tensor entries is " + got +
                         " but the header says " + want);
}

// Verifies the data against the digest in `metadata` when there is one, and removes it.
void check_data_digest(const std::string& path, Metadata& metadata, const uint8_t* data, size_t n) {
  const std::string want = take_digest(path, metadata, kDigestKey);
  if (want.empty()) return;
  const std::string got = hex32(crc32_of(crc32_of(0, nullptr, 0), data, n));
  if (got != want)
    file_error(path, "corrupt data: the tensor data's CRC-32 is " + got + " but the header says " + want);
}

// Entries must tile the data buffer exactly: no gaps, no overlaps, nothing after.
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  uint64_t at = 0;
  for (const Entry& e : entries) {
    if (e.begin != at)
      file_error(path, "corrupt header: tensor \"" + e.name + "\" starts at byte " + std::to_string(e.begin) +
                           " of the data, expected " + std::to_string(at) + " (gap or overlap)");
    at = e.end;
  }
  if (at > data_bytes)
    file_error(path, "truncated: the header needs " + std::to_string(at) + " bytes of tensor data, the file has " +
                         std::to_string(data_bytes));
  if (at < data_bytes)
    file_error(path, "size mismatch: " + std::to_string(data_bytes - at) + " bytes after the last tensor's data");
}

std::string prefixed(const std::string& prefix, const std::string& name) { return prefix + name; }

// A metadata value that must be a finite decimal number ("1e-3", "0.5", "-2"): not
// "abc", "0x10", "inf", "nan", "1e999", " 1" or "1 ".
double metadata_number(const std::string& path, const std::string& key, const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v, std::chars_format::general);
  const bool digits = !text.empty() && text.find_first_not_of("+-.0123456789eE") == std::string::npos;
  if (ec != std::errc() || ptr != end || !digits || !std::isfinite(v))
    file_error(path, "corrupt metadata: \"" + key + "\" must be a finite decimal number, got " + quoted(text));
  return v;
}

} // namespace

// ---------------------------------------------------------------- public

namespace {
// save_safetensors, inside a public function's detail::UserCall.
void write_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata, const Loc& loc) {
  check_names(tensors, metadata);
  std::vector<Tensor> all;
  for (const auto& [name, t] : tensors) all.push_back(t);
  kiln::realize(all, loc);
  detail::memory_guard("save_safetensors", loc, [&] {
    const Payload payload = payload_of(tensors);
    write_atomically(path, build_header(tensors, metadata, payload), tensors, payload);
  });
}
} // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata, Loc loc) {
  detail::UserCall call("save_safetensors", loc);
  write_safetensors(path, tensors, metadata, loc);
}

namespace {
Contents read_safetensors(const std::string& path, const Loc& loc) {
  const std::vector<uint8_t> bytes = read_file(path, loc);
  if (bytes.size() < 8) file_error(path, "truncated: " + std::to_string(bytes.size()) + " bytes, too short for a safetensors header");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8)
    file_error(path, "truncated or corrupt: the header length is " + std::to_string(header_len) + " bytes but the file has " +
                         std::to_string(bytes.size() - 8) + " after it");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  Json root;
  try {
    root = parse_json_header(text);
  } catch (const std::runtime_error& e) {
    file_error(path, std::string("corrupt header: ") + e.what());
  }
  if (!root.is_object()) file_error(path, "corrupt header: the JSON header must be an object");
  Contents out;
  std::vector<Entry> entries;
  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__") out.metadata = parse_metadata(path, v);
    else entries.push_back(parse_entry(path, name, v));
  }
  const uint64_t data_start = 8 + header_len;
  check_layout(path, entries, bytes.size() - data_start); // first: says what is wrong where it can
  check_header_digest(path, out.metadata, entries);
  check_data_digest(path, out.metadata, bytes.data() + data_start, bytes.size() - data_start);
  for (const Entry& e : entries)
    out.tensors.emplace_back(e.name, make_tensor(path, e.name, e.dtype, bytes.data() + data_start + e.begin, e.shape, loc));
  return out;
}
} // namespace

Contents load_safetensors(const std::string& path, Loc loc) {
  detail::UserCall call("load_safetensors", loc);
  return detail::memory_guard("load_safetensors", loc, [&] { return read_safetensors(path, loc); });
}

void save(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer, Metadata metadata,
          Loc loc) {
  detail::UserCall call("save", loc);
  NamedTensors all = model.state_dict();
  metadata["format"] = "kiln";
  if (optimizer) {
    for (auto& [name, t] : optimizer->state_dict()) all.emplace_back(prefixed("optimizer.", name), t);
    metadata["optimizer"] = optimizer->kind();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", optimizer->lr()); // exact round trip of the lr
    metadata["lr"] = buf;
  }
  write_safetensors(path, all, metadata, loc);
}

namespace {

// Checks the model entries against the module's state and returns problems (empty when all match).
std::string compare_model(const NamedTensors& expected, const std::map<std::string, Tensor>& found) {
  std::string problems;
  std::set<std::string> wanted;
  for (const auto& [name, t] : expected) {
    wanted.insert(name);
    auto it = found.find(name);
    if (it == found.end()) problems += "\n  missing \"" + name + "\" (" + t.type_str() + ")";
    else if (it->second.dtype() != t.dtype() || it->second.shape() != t.shape())
      problems += "\n  \"" + name + "\": the checkpoint has " + it->second.type_str() + ", the model needs " + t.type_str();
  }
  for (const auto& [name, t] : found)
    if (!wanted.count(name)) problems += "\n  unexpected \"" + name + "\" (" + t.type_str() + ")";
  return problems;
}

} // namespace

Metadata load(const std::string& path, nn::Module& model, optim::Optimizer* optimizer, Loc loc) {
  detail::UserCall call("load", loc);
  Contents c = detail::memory_guard("load", loc, [&] { return read_safetensors(path, loc); });
  std::map<std::string, Tensor> model_entries;
  optim::NamedTensors opt_entries;
  const std::string opt_prefix = "optimizer.";
  for (auto& [name, t] : c.tensors) {
    if (name.rfind(opt_prefix, 0) == 0) opt_entries.emplace_back(name.substr(opt_prefix.size()), t);
    else model_entries.emplace(name, t);
  }
  const NamedTensors expected = model.state_dict();
  const std::string problems = compare_model(expected, model_entries);
  if (!problems.empty()) file_error(path, "the checkpoint does not match the model:" + problems);
  double lr = 0;
  if (optimizer) {
    auto kind = c.metadata.find("optimizer");
    if (kind == c.metadata.end()) file_error(path, "the checkpoint has no optimizer state");
    if (kind->second != optimizer->kind())
      file_error(path, "the checkpoint holds " + kind->second + " state, the optimizer is " + optimizer->kind());
    auto lr_it = c.metadata.find("lr");
    lr = lr_it == c.metadata.end() ? optimizer->lr() : metadata_number(path, "lr", lr_it->second);
    if (lr < 0) file_error(path, "corrupt metadata: \"lr\" is negative (" + lr_it->second + ")");
    const std::string mismatch = optimizer->state_problems(opt_entries, loc);
    if (!mismatch.empty()) file_error(path, "the " + optimizer->kind() + " state does not match:" + mismatch);
    optimizer->load_state_dict(opt_entries, loc);
    optimizer->set_lr(lr, loc);
  }
  std::vector<Tensor> changed;
  for (auto [name, t] : expected) {
    t.assign(model_entries.at(name));
    changed.push_back(t);
  }
  kiln::realize(changed, loc); // parameters become plain inputs again
  return c.metadata;
}

} // namespace kiln::checkpoint

// safetensors checkpoints: a small JSON reader and writer, validation of the
// header against the file, atomic writes, and model/optimizer save and load.

#include "kiln/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include "frontend/src/tensor_impl.h"
#include "kiln/nn.h"
#include "kiln/optim.h"

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

namespace kiln::checkpoint {

namespace {

[[noreturn]] void file_error(const std::string& path, const std::string& what) { throw Error("'" + path + "': " + what); }

// ---------------------------------------------------------------- JSON

// A parsed JSON value. Numbers without fraction or exponent are kept exactly as integers.
struct Json {
  enum class Kind { Null, Bool, Int, Float, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  struct Member;                // (key, value); a std::pair<std::string, Json> would need Json complete here
  std::vector<Member> object;   // in file order
};
struct Json::Member {
  std::string first;
  Json second;
};

// A recursive-descent JSON parser (RFC 8259) with a depth limit; throws a message with the byte offset.
class JsonParser {
public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  Json parse_document() {
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected characters after the JSON value");
    return v;
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(what + " at byte " + std::to_string(pos_) + " of the header");
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of the JSON text");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  Json value(int depth) {
    if (depth > 64) fail("JSON nested too deeply");
    Json v;
    switch (peek()) {
    case '{': return object(depth);
    case '[': return array(depth);
    case '"': v.kind = Json::Kind::String; v.string = string(); return v;
    case 't': literal("true"); v.kind = Json::Kind::Bool; v.boolean = true; return v;
    case 'f': literal("false"); v.kind = Json::Kind::Bool; return v;
    case 'n': literal("null"); return v;
    default: return number();
    }
  }

  Json object(int depth) {
    Json v;
    v.kind = Json::Kind::Object;
    expect('{');
    if (peek() == '}') return ++pos_, v;
    for (;;) {
      if (peek() != '"') fail("expected a string key");
      std::string key = string();
      expect(':');
      v.object.emplace_back(std::move(key), value(depth + 1));
      if (peek() == '}') return ++pos_, v;
      expect(',');
    }
  }

  Json array(int depth) {
    Json v;
    v.kind = Json::Kind::Array;
    expect('[');
    if (peek() == ']') return ++pos_, v;
    for (;;) {
      v.array.push_back(value(depth + 1));
      if (peek() == ']') return ++pos_, v;
      expect(',');
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("invalid \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  void escape(std::string& out) {
    if (pos_ >= s_.size()) fail("truncated escape");
    const char c = s_[pos_++];
    switch (c) {
    case '"': case '\\': case '/': out += c; return;
    case 'b': out += '\b'; return;
    case 'f': out += '\f'; return;
    case 'n': out += '\n'; return;
    case 'r': out += '\r'; return;
    case 't': out += '\t'; return;
    case 'u': break;
    default: fail("invalid escape");
    }
    unsigned cp = hex4();
    if (cp >= 0xd800 && cp < 0xdc00) { // a surrogate pair
      if (s_.substr(pos_, 2) != "\\u") fail("unpaired surrogate");
      pos_ += 2;
      const unsigned lo = hex4();
      if (lo < 0xdc00 || lo >= 0xe000) fail("invalid surrogate pair");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    append_utf8(out, cp);
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c == '\\') escape(out);
      else out += c;
    }
  }

  Json number() {
    const size_t start = pos_;
    bool is_int = true;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t b = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == b) fail("invalid number");
    };
    digits();
    if (pos_ < s_.size() && s_[pos_] == '.') {
      is_int = false;
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      is_int = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    const std::string text(s_.substr(start, pos_ - start));
    Json v;
    errno = 0;
    if (is_int) {
      v.kind = Json::Kind::Int;
      v.integer = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer out of range");
    } else {
      v.kind = Json::Kind::Float;
      v.number = std::strtod(text.c_str(), nullptr);
    }
    return v;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

void write_json_string(std::string& out, const std::string& s) {
  static const char* hexd = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += "\\u00";
      out += hexd[c >> 4];
      out += hexd[c & 0xf];
    } else {
      out += ch;
    }
  }
  out += '"';
}

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

template <class T> Tensor tensor_from_bytes(const uint8_t* p, size_t n, const IntList& shape) {
  std::vector<T> v(n);
  if (n) std::memcpy(v.data(), p, n * sizeof(T));
  return from_vector(v, shape);
}

Tensor make_tensor(DType dt, const uint8_t* p, const IntList& shape) {
  const auto n = static_cast<size_t>(graph::numel(shape));
  switch (dt) {
  case DType::Bool: {
    std::vector<bool> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = p[i] != 0;
    return from_vector(v, shape);
  }
  case DType::Int32: return tensor_from_bytes<int32_t>(p, n, shape);
  case DType::Int64: return tensor_from_bytes<int64_t>(p, n, shape);
  case DType::Float32: return tensor_from_bytes<float>(p, n, shape);
  case DType::Float64: return tensor_from_bytes<double>(p, n, shape);
  }
  return Tensor();
}

// ---------------------------------------------------------------- writing

std::string build_header(const NamedTensors& tensors, const Metadata& metadata) {
  std::string h = "{";
  if (!metadata.empty()) {
    write_json_string(h, "__metadata__");
    h += ":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) h += ',';
      first = false;
      write_json_string(h, k);
      h += ':';
      write_json_string(h, v);
    }
    h += '}';
  }
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (h.size() > 1) h += ',';
    write_json_string(h, name);
    h += ":{\"dtype\":\"" + st_dtype(t.dtype()) + "\",\"shape\":[";
    for (size_t d = 0; d < t.shape().size(); ++d) h += (d ? "," : "") + std::to_string(t.shape()[d]);
    const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' '); // the data starts 8-byte aligned, as the reference writer does
  return h;
}

void check_names(const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__") throw Error("save_safetensors", "invalid tensor name \"" + name + "\"");
    if (!seen.insert(name).second) throw Error("save_safetensors", "duplicate tensor name \"" + name + "\"");
    if (!t.defined()) throw Error("save_safetensors", "tensor \"" + name + "\" is undefined");
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

// Writes the file's bytes to a temporary file next to `path`, fsyncs it, renames it over `path`
// and fsyncs the directory, so the rename itself is durable.
void write_atomically(const std::string& path, const std::string& header, const NamedTensors& tensors) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) file_error(path, std::string("cannot create a temporary file next to it: ") + std::strerror(errno));
  try {
    const uint64_t n = header.size();
    write_all(fd, &n, 8, tmp);
    write_all(fd, header.data(), header.size(), tmp);
    for (const auto& [name, t] : tensors)
      write_all(fd, detail::host_storage(t)->data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()), tmp);
    if (::fsync(fd) != 0) file_error(tmp, std::string("fsync failed: ") + std::strerror(errno));
    if (::close(fd) != 0) file_error(tmp, std::string("close failed: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    file_error(path, std::string("cannot rename the temporary file into place: ") + std::strerror(e));
  }
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// ---------------------------------------------------------------- reading

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) file_error(path, std::string("cannot open: ") + std::strerror(errno));
  const std::streamsize size = in.tellg();
  std::vector<uint8_t> bytes(static_cast<size_t>(std::max<std::streamsize>(size, 0)));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) file_error(path, "read failed");
  return bytes;
}

// One tensor entry of the header, checked against its own dtype and shape.
struct Entry {
  std::string name;
  DType dtype = DType::Float32;
  IntList shape;
  uint64_t begin = 0, end = 0;
};

const Json* member(const Json& obj, const std::string& key) {
  for (const auto& [k, v] : obj.object)
    if (k == key) return &v;
  return nullptr;
}

bool non_negative_ints(const Json* v, size_t want, std::vector<int64_t>& out) {
  if (!v || v->kind != Json::Kind::Array || (want && v->array.size() != want)) return false;
  for (const Json& e : v->array) {
    if (e.kind != Json::Kind::Int || e.integer < 0) return false;
    out.push_back(e.integer);
  }
  return true;
}

Entry parse_entry(const std::string& path, const std::string& name, const Json& v) {
  Entry e;
  e.name = name;
  const std::string where = "tensor \"" + name + "\": ";
  if (v.kind != Json::Kind::Object) file_error(path, "corrupt header: " + where + "not an object");
  const Json* dt = member(v, "dtype");
  if (!dt || dt->kind != Json::Kind::String) file_error(path, "corrupt header: " + where + "missing \"dtype\"");
  if (!dtype_from_st(dt->string, e.dtype))
    file_error(path, where + "unsupported dtype \"" + dt->string + "\" (kiln reads F32, F64, I32, I64, BOOL)");
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
  if (v.kind != Json::Kind::Object) file_error(path, "corrupt header: \"__metadata__\" must be an object of strings");
  Metadata m;
  for (const auto& [k, s] : v.object) {
    if (s.kind != Json::Kind::String) file_error(path, "corrupt header: \"__metadata__\" value of \"" + k + "\" is not a string");
    m[k] = s.string;
  }
  return m;
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

} // namespace

// ---------------------------------------------------------------- public

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  check_names(tensors);
  std::vector<Tensor> all;
  for (const auto& [name, t] : tensors) all.push_back(t);
  kiln::realize(all);
  write_atomically(path, build_header(tensors, metadata), tensors);
}

Contents load_safetensors(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  if (bytes.size() < 8) file_error(path, "truncated: " + std::to_string(bytes.size()) + " bytes, too short for a safetensors header");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8)
    file_error(path, "truncated or corrupt: the header length is " + std::to_string(header_len) + " bytes but the file has " +
                         std::to_string(bytes.size() - 8) + " after it");
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_len);
  Json root;
  try {
    root = JsonParser(text).parse_document();
  } catch (const std::runtime_error& e) {
    file_error(path, std::string("corrupt header: ") + e.what());
  }
  if (root.kind != Json::Kind::Object) file_error(path, "corrupt header: the JSON header must be an object");
  Contents out;
  std::vector<Entry> entries;
  std::set<std::string> names;
  for (const auto& [name, v] : root.object) {
    if (!names.insert(name).second) file_error(path, "corrupt header: duplicate name \"" + name + "\"");
    if (name == "__metadata__") out.metadata = parse_metadata(path, v);
    else entries.push_back(parse_entry(path, name, v));
  }
  const uint64_t data_start = 8 + header_len;
  check_layout(path, entries, bytes.size() - data_start);
  for (const Entry& e : entries)
    out.tensors.emplace_back(e.name, make_tensor(e.dtype, bytes.data() + data_start + e.begin, e.shape));
  return out;
}

void save(const std::string& path, const nn::Module& model, const optim::Optimizer* optimizer, Metadata metadata) {
  NamedTensors all = model.state_dict();
  metadata["format"] = "kiln";
  if (optimizer) {
    for (auto& [name, t] : optimizer->state_dict()) all.emplace_back(prefixed("optimizer.", name), t);
    metadata["optimizer"] = optimizer->kind();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", optimizer->lr()); // exact round trip of the lr
    metadata["lr"] = buf;
  }
  save_safetensors(path, all, metadata);
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

Metadata load(const std::string& path, nn::Module& model, optim::Optimizer* optimizer) {
  Contents c = load_safetensors(path);
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
    lr = lr_it == c.metadata.end() ? optimizer->lr() : std::strtod(lr_it->second.c_str(), nullptr);
    try {
      optimizer->load_state_dict(opt_entries); // validates before changing anything
    } catch (const Error& e) {
      file_error(path, e.what());
    }
    optimizer->set_lr(lr);
  }
  std::vector<Tensor> changed;
  for (auto [name, t] : expected) {
    t.assign(model_entries.at(name));
    changed.push_back(t);
  }
  kiln::realize(changed); // parameters become plain inputs again
  return c.metadata;
}

} // namespace kiln::checkpoint

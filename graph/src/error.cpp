#include "kiln/error.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace kiln {

std::string format_location(const std::source_location& loc) {
  return std::string(loc.file_name()) + ":" + std::to_string(loc.line());
}

namespace {

struct Call {
  std::string op;
  std::source_location where;
  detail::UserCall::Claim claim = detail::UserCall::Claim::KilnAndItsLine;
};
thread_local std::vector<Call> g_calls; // UserCall scopes, outermost first

// The op of the innermost call that names an error raised in kiln's sources: a call claiming only
// kiln's lines names it only when the user made it (a read kiln itself makes inside Linear's
// constructor or an optimizer's step() leaves the error Linear's or the step's).
const std::string& innermost_op() {
  for (auto it = g_calls.rbegin(); it != g_calls.rend(); ++it)
    if (it->claim == detail::UserCall::Claim::KilnAndItsLine || !detail::in_kiln_sources(it->where)) return it->op;
  return g_calls.back().op;
}

// The op and line an error raised by `op` at `where` is reported with (see detail::UserCall).
Call reported(const std::string& op, const std::source_location& where) {
  if (g_calls.empty()) return {op, where};
  if (!detail::in_kiln_sources(where)) {
    for (const Call& c : g_calls)
      if (c.claim == detail::UserCall::Claim::KilnAndItsLine && c.where.line() == where.line() &&
          std::string_view(c.where.file_name()) == where.file_name())
        return {c.op, where};
    return {op, where};
  }
  for (auto it = g_calls.rbegin(); it != g_calls.rend(); ++it)
    if (!detail::in_kiln_sources(it->where)) return {innermost_op(), it->where};
  return {op, where};
}

std::string message(const Call& c, const std::string& what) { return c.op + ": " + what + "\n  at " + format_location(c.where); }

// Where kiln's sources are, as this build spells them: error.cpp's path less "graph/src/error.cpp".
std::string_view source_root() {
  static const std::string_view root = [] {
    std::string_view f = __FILE__;
    const size_t at = f.rfind("graph/src/error.cpp");
    return at == std::string_view::npos ? std::string_view{} : f.substr(0, at);
  }();
  return root;
}

} // namespace

Error::Error(const std::string& op, const std::string& what, const std::source_location& where)
    : std::runtime_error(message(reported(op, where), what)), op_(reported(op, where).op) {}

Error::Error(const std::string& what) : std::runtime_error(what) {}

OutOfMemoryError::OutOfMemoryError(const std::string& op, const std::string& reason, uint64_t bytes,
                                   const std::source_location& where)
    : Error(op, reason, where), reason_(reason), bytes_(bytes) {}

namespace detail {

UserCall::UserCall(const char* op, const std::source_location& where, Claim claim) {
  g_calls.push_back({op, where, claim});
}
UserCall::UserCall(std::string op, const std::source_location& where, Claim claim) {
  g_calls.push_back({std::move(op), where, claim});
}
UserCall::~UserCall() { g_calls.pop_back(); }

std::pair<std::string, std::source_location> reported_call(const std::string& op, const std::source_location& where) {
  Call c = reported(op, where);
  return {std::move(c.op), c.where};
}

std::string bytes_str(uint64_t bytes) {
  static const char* const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 10 && u ? "%.1f %s" : "%.0f %s", v, units[u]);
  return u ? std::string(buf) + " (" + std::to_string(bytes) + " bytes)" : std::to_string(bytes) + " bytes";
}

void out_of_memory(const std::string& op, const char* place, uint64_t bytes, const std::string& what,
                   const std::source_location& where) {
  throw OutOfMemoryError(op, std::string("out of ") + place + " memory: cannot allocate " + bytes_str(bytes) +
                                 (what.empty() ? "" : " for " + what),
                         bytes, where);
}

bool in_kiln_sources(const std::source_location& loc) {
  std::string_view f = loc.file_name();
  const std::string_view root = source_root();
  if (f.substr(0, root.size()) != root) return false;
  f.remove_prefix(root.size());
  for (std::string_view dir : {"frontend/", "graph/", "autograd/", "codegen/", "runtime/"})
    if (f.substr(0, dir.size()) == dir) return true;
  return false;
}

void internal_error(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "kiln internal error at %s:%d: %s%s%s\n", file, line, cond, msg.empty() ? "" : ": ",
               msg.c_str());
  std::abort();
}
} // namespace detail

} // namespace kiln

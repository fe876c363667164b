#include "kiln/error.h"

#include <cstdio>
#include <cstdlib>

namespace kiln {

std::string format_location(const std::source_location& loc) {
  return std::string(loc.file_name()) + ":" + std::to_string(loc.line());
}

Error::Error(const std::string& op, const std::string& what, const std::source_location& where)
    : std::runtime_error(op + ": " + what + "\n  at " + format_location(where)), op_(op) {}

Error::Error(const std::string& what) : std::runtime_error(what) {}

namespace detail {
void internal_error(const char* cond, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "kiln internal error at %s:%d: %s%s%s\n", file, line, cond, msg.empty() ? "" : ": ",
               msg.c_str());
  std::abort();
}
} // namespace detail

} // namespace kiln

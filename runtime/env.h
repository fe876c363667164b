#pragma once
/// \file env.h
/// Internal: environment variables read strictly, the whole value or nothing (atoi and a bare
/// strtol read "true" as 0 and "12abc" as 12), for kiln's options and the launcher's rank
/// variables alike.

#include <cerrno>
#include <cstdlib>
#include <optional>

namespace kiln::runtime {

/// An integer environment variable as read: unset (or empty), a whole decimal integer in the range
/// of long long, or malformed (anything else: a trailing text, a fraction, out of range).
struct EnvInteger {
  const char* text = nullptr;    ///< the value as set, or null when unset or empty
  std::optional<long long> value; ///< the integer, when `text` is one
  /// True when the variable is set but is not an integer.
  bool malformed() const { return text && !value; }
};

/// Reads the integer environment variable `name`.
inline EnvInteger env_integer(const char* name) {
  EnvInteger e;
  const char* v = std::getenv(name);
  if (!v || !*v) return e;
  e.text = v;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (*end == '\0' && errno == 0) e.value = n;
  return e;
}

} // namespace kiln::runtime

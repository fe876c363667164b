// Command-line helpers shared by the example programs (train, gpt).
#pragma once

#include <cstdlib>
#include <iostream>
#include <string>

namespace cli {

/// Parses an integer or floating-point flag value, or exits (status 2) with
/// "<program>: <flag> needs a number, got '<text>'".
template <class T> T number(const char* program, const std::string& flag, const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0') {
    std::cerr << program << ": " << flag << " needs a number, got '" << text << "'\n";
    std::exit(2);
  }
  return static_cast<T>(v);
}

/// The value following the flag argv[i] (advancing i), or exits (status 2) with
/// "<program>: <flag> needs a value".
inline const char* value(const char* program, int argc, char** argv, int& i) {
  if (i + 1 >= argc) {
    std::cerr << program << ": " << argv[i] << " needs a value\n";
    std::exit(2);
  }
  return argv[++i];
}

} // namespace cli

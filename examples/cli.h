// Command-line helpers shared by the example programs (train, gpt).
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cli {

/// Parses a flag value of type T, or exits (status 2) with "<program>: <flag> needs ..., got '<text>'":
/// an integer type takes a whole number in its range (no fraction, no rounding through a double), a
/// floating type any number strtod reads.
template <class T> T number(const char* program, const std::string& flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  if constexpr (std::is_integral_v<T>) {
    const bool is_unsigned = std::is_unsigned_v<T>;
    const long long v = is_unsigned ? 0 : std::strtoll(text, &end, 10);
    const unsigned long long u = is_unsigned ? std::strtoull(text, &end, 10) : 0;
    const bool in_range = errno == 0 && (is_unsigned ? text[0] != '-' && u <= std::numeric_limits<T>::max()
                                                     : v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max());
    if (end == text || *end != '\0' || !in_range) {
      std::cerr << program << ": " << flag << " needs a whole number in [" << +std::numeric_limits<T>::min() << ", "
                << +std::numeric_limits<T>::max() << "], got '" << text << "'\n";
      std::exit(2);
    }
    return static_cast<T>(is_unsigned ? u : static_cast<unsigned long long>(v));
  } else {
    const double v = std::strtod(text, &end);
    if (end == text || *end != '\0') {
      std::cerr << program << ": " << flag << " needs a number, got '" << text << "'\n";
      std::exit(2);
    }
    return static_cast<T>(v);
  }
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

/// Exits (status 2) with "<program>: --checkpoint ..." when `path` (if any) lies in a directory that
/// does not exist, so that a run does not train for an epoch before it finds it cannot save.
inline void check_checkpoint_dir(const char* program, const std::string& path) {
  if (path.empty()) return;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (dir.empty() || std::filesystem::is_directory(dir, ec)) return;
  std::cerr << program << ": --checkpoint " << path << ": the directory " << dir.string() << " does not exist\n";
  std::exit(2);
}

/// The flags that decide a run's trajectory, saved in its checkpoints' metadata ("run"), so that
/// --resume can tell a run with other values (see resume_mismatch). Doubles are written exactly.
class RunFlags {
public:
  /// Adds `flag` with an integer value.
  RunFlags& add(const std::string& flag, long long v) { return put(flag, std::to_string(v)); }
  /// Adds `flag` with an unsigned value.
  RunFlags& add(const std::string& flag, unsigned long long v) { return put(flag, std::to_string(v)); }
  /// Adds `flag` with a double value (17 digits: the same text for the same bits).
  RunFlags& add(const std::string& flag, double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return put(flag, buf);
  }
  /// "--a 1 --b 2": the form kept in the metadata.
  const std::string& str() const { return text_; }

private:
  RunFlags& put(const std::string& flag, const std::string& v) {
    text_ += (text_.empty() ? "" : " ") + flag + " " + v;
    return *this;
  }
  std::string text_;
};

/// What differs between a checkpoint's saved RunFlags text and this run's, as
/// "--batch 4 (this run: 8), ..." (empty when nothing does, or when the checkpoint has none:
/// files from before the flags were saved).
inline std::string resume_mismatch(const std::string& saved, const RunFlags& now) {
  auto pairs = [](const std::string& text) {
    std::vector<std::pair<std::string, std::string>> out;
    std::istringstream in(text);
    std::string flag, value;
    while (in >> flag >> value) out.emplace_back(flag, value);
    return out;
  };
  if (saved.empty()) return "";
  std::string diff;
  const auto then = pairs(saved);
  for (const auto& [flag, value] : pairs(now.str())) {
    const auto it = std::find_if(then.begin(), then.end(), [&](const auto& p) { return p.first == flag; });
    const std::string old = it == then.end() ? "(none)" : it->second;
    if (old != value) diff += (diff.empty() ? "" : ", ") + flag + " " + old + " (this run: " + value + ")";
  }
  return diff;
}

} // namespace cli

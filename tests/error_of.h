#pragma once
/// \file error_of.h
/// A test helper: the message of the kiln::Error a call throws.

#include <functional>
#include <string>

#include "kiln/error.h"

namespace kiln::test {

/// The what() of the kiln::Error that f throws, or "(no error)" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace kiln::test

#pragma once
/// \file error_of.h
/// Test helpers: the message of the kiln::Error a call throws, and the check that a call fails
/// with an error naming the op, the user's line and what went wrong.

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

/// Runs f, which must throw kiln::Error for `op`: the message starts with "op: ", holds each of
/// `parts`, and names `file`:`line` (the user's line of the failing call).
inline void expect_error_at(const std::function<void()>& f, const std::string& file, int line, const std::string& op,
                            const std::vector<std::string>& parts = {}) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.op(), op) << msg;
    EXPECT_EQ(msg.rfind(op + ": ", 0), 0u) << "the message starts with the op: " << msg;
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    const std::string where = file + ":" + std::to_string(line);
    EXPECT_NE(msg.find(where), std::string::npos) << "missing '" << where << "' in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-kiln exception: " << e.what();
    return;
  }
  ADD_FAILURE() << op << ": nothing was thrown";
}

/// Checks that `msg`, an error's message, names no line of kiln's own library sources: an error
/// raised below the frontend names the user's line (detail::UserCall in kiln/error.h).
inline void expect_no_kiln_line(const std::string& msg) {
  for (const char* dir : {"frontend/src/", "graph/src/", "autograd/src/", "codegen/src/", "runtime/src/"})
    EXPECT_EQ(msg.find(dir), std::string::npos) << "names a line of kiln's sources (" << dir << "): " << msg;
}

} // namespace kiln::test

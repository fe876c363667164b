#pragma once
/// \file error.h
/// The user-error channel: kiln::Error, with the op and the user's source line.

#include <cstdint>
#include <new>
#include <source_location>
#include <stdexcept>
#include <string>
#include <utility>

namespace kiln {

/// A user error: bad shapes, dtypes, dims or arguments, unreadable files,
/// an unusable device. The message names the op, its operands and where the
/// user called it.
class Error : public std::runtime_error {
public:
  /// An error in `op` with a description; `where` is the user's call site.
  Error(const std::string& op, const std::string& what,
        const std::source_location& where = std::source_location::current());
  /// An error that is not tied to an op or a source line (files, devices).
  explicit Error(const std::string& what);
  /// The op named in the message ("" when none).
  const std::string& op() const { return op_; }

private:
  std::string op_;
};

/// Memory that could not be had (host or GPU): a kiln::Error whose message says how many
/// bytes were asked for and what for.
class OutOfMemoryError : public Error {
public:
  /// An allocation of `bytes` in `op` failed; `reason` says where and what for ("out of host
  /// memory: cannot allocate 1 GiB (1073741824 bytes) for f32[268435456]"); `where` is the user's call site.
  OutOfMemoryError(const std::string& op, const std::string& reason, uint64_t bytes,
                   const std::source_location& where = std::source_location::current());
  /// The reason, without the op and the line.
  const std::string& reason() const { return reason_; }
  /// The bytes asked for (0 when unknown).
  uint64_t bytes() const { return bytes_; }

private:
  std::string reason_;
  uint64_t bytes_;
};

/// Formats a source location as "file:line".
std::string format_location(const std::source_location& loc);

namespace detail {
/// While alive, names a user-facing call (a module, a loss, an optimizer, a creation op)
/// that kiln implements with other ops, so that a kiln::Error raised inside it on this
/// thread names what the user called and where: an error raised at a line of kiln's own
/// sources is reported at the innermost such call made from the user's code, as an
/// error of the innermost call; an error raised at the user's line of such a call is
/// reported as an error of the outermost call made at that line (cross_entropy, not
/// the one_hot it uses), unless the call claims only kiln's lines (Claim::KilnLines).
class UserCall {
public:
  /// Which errors raised inside the call it reports as its own.
  enum class Claim {
    KilnAndItsLine, ///< those raised in kiln's sources, and those raised at its own line (a loss made of other ops)
    KilnLines,      ///< those raised in kiln's sources only, and only when the user made the call: a read that
                    ///< realizes (the executor and GPU runtime below it do not know the user's line), while the
                    ///< kernels' deferred checks keep the op and line they recorded, even at the read's own line
  };
  /// Names `op`, called at `where`.
  UserCall(const char* op, const std::source_location& where, Claim claim = Claim::KilnAndItsLine);
  /// Same, with a computed name (a module's name()).
  UserCall(std::string op, const std::source_location& where, Claim claim = Claim::KilnAndItsLine);
  ~UserCall();
  UserCall(const UserCall&) = delete;
  UserCall& operator=(const UserCall&) = delete;
};
/// The op and line a kiln::Error of `op` raised at `where` would name now (see UserCall):
/// what a check made now but reported later (in a kernel) records.
std::pair<std::string, std::source_location> reported_call(const std::string& op, const std::source_location& where);
/// "1 GiB (1073741824 bytes)": a byte count for messages.
std::string bytes_str(uint64_t bytes);
/// Throws the OutOfMemoryError of `op` at `where` for `bytes` of `place` memory ("host") asked for `what`.
[[noreturn]] void out_of_memory(const std::string& op, const char* place, uint64_t bytes, const std::string& what,
                                const std::source_location& where);
/// Runs f() and returns its result; memory it cannot get (an OutOfMemoryError or a raw std::bad_alloc) becomes an
/// OutOfMemoryError of `op` at `where` (a user's call, resolved as for any kiln::Error), keeping the reason.
/// Public functions that allocate what their user sized wrap their work in it.
template <class F> decltype(auto) memory_guard(const std::string& op, const std::source_location& where, F&& f) {
  try {
    return f();
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(op, e.reason(), e.bytes(), where);
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError(op, "out of memory", 0, where);
  }
}
/// True when `loc` is a line of kiln's own library sources (not of its tests or examples).
bool in_kiln_sources(const std::source_location& loc);
/// An internal invariant failed: print file and line and abort.
[[noreturn]] void internal_error(const char* cond, const char* file, int line, const std::string& msg);
} // namespace detail

} // namespace kiln

/// Checks an internal invariant (a kiln bug, not a user error); aborts with file and line.
#define KILN_ASSERT(cond, ...)                                                                     \
  do {                                                                                             \
    if (!(cond)) ::kiln::detail::internal_error(#cond, __FILE__, __LINE__, std::string{__VA_ARGS__}); \
  } while (0)

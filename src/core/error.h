// Errors a user can act on: what failed, where, and what to do next.
//
// Library code never aborts on a user's mistake; it throws dlperf::Error, and the CLI prints
// it once and exits non-zero. `hint` is the "what to do next" line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dlperf {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string what, std::string hint = "")
      : std::runtime_error(std::move(what)), hint_(std::move(hint)) {}
  /// What the user can do about it; may be empty.
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

/// "what (hint)", or "what" where there is none: an error told inside a line of its own.
inline std::string with_hint(const Error& e) { return e.hint().empty() ? e.what() : std::string(e.what()) + " (" + e.hint() + ")"; }

/// Throws Error when `ok` is false. For checks of user input and invariants alike.
inline void check(bool ok, const std::string& what, const std::string& hint = "") {
  if (!ok) throw Error(what, hint);
}

}  // namespace dlperf

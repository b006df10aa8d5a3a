// The subcommand table: each command registers its own flags and handler on the CLI app.
#pragma once

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace dlperf::cli {

struct Command {
  const char* name;
  const char* summary;
  void (*add)(CLI::App& app, const Command& self);
};

/// A bound as the user would type it: 1000000, not 1e+06; 1e+18 past what a double counts exactly.
inline std::string bound_text(double x) {
  if (x == std::floor(x) && std::fabs(x) < 1e15) return std::to_string(int64_t(x));
  std::ostringstream o;
  o << x;
  return o.str();
}

/// A flag's lowest value, said in words ("--epochs: must be at least 1"); CLI11's
/// PositiveNumber names DBL_MAX as its upper bound in full. Infinity is refused too: "--tokens
/// inf" planned a job of inf years.
inline CLI::Validator at_least(double lo) {
  auto text = bound_text;
  return CLI::Validator(
      [lo, text](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        if (std::isinf(v)) return "must be a finite number, not " + s;
        return v >= lo ? std::string() : "must be at least " + text(lo) + ", not " + s;
      },
      ">= " + text(lo));
}

/// A flag's range, said as at_least says its floor ("--zero: must be between 0 and 3, not 7");
/// CLI11's Range says "Value 7 not in range 0 to 3", and calls "abc" a value out of range.
inline CLI::Validator between(double lo, double hi) {
  auto text = bound_text;
  return CLI::Validator(
      [lo, hi, text](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        return v >= lo && v <= hi ? std::string() : "must be between " + text(lo) + " and " + text(hi) + ", not " + s;
      },
      "in [" + text(lo) + " - " + text(hi) + "]");
}

/// The long flag among `flags` ("--epochs", "-b", ...) that `given` most likely meant: the same
/// word under another command's name ("--profile-skip" for profile's "--skip"), one edit away (two
/// in longer words), or the one flag it starts; "" when none is close.
std::string suggest_flag(const std::string& given, const std::vector<std::string>& flags);
/// One line about the first of `extras`, the arguments `command` (as the user named it, "dlperf
/// train") did not take, in the order given: the flag it meant, or the flag a positional value
/// belongs to ("--model resnet18"). "" when there are none.
std::string unexpected_arguments(const CLI::App& command, const std::string& command_name, const std::vector<std::string>& extras);
/// CLI11's refusal of a command line, said in dlperf's words: an unknown flag first (above), a
/// value of the wrong kind ("--batch-size: 'abc' is not a whole number"), a flag given twice or
/// without its value; anything else as CLI11 says it. `command` is the deepest one parsed.
std::string explain_parse_error(const CLI::ParseError& e, const CLI::App& command, const std::string& command_name);

void add_train(CLI::App& app, const Command& self);
void add_profile(CLI::App& app, const Command& self);
void add_models(CLI::App& app, const Command& self);
void add_bench(CLI::App& app, const Command& self);
void add_lab(CLI::App& app, const Command& self);
void add_plan(CLI::App& app, const Command& self);

}  // namespace dlperf::cli

// The subcommand table: each command registers its own flags and handler on the CLI app.
#pragma once

#include <CLI/CLI.hpp>

#include <sstream>
#include <string>

namespace dlperf::cli {

struct Command {
  const char* name;
  const char* summary;
  void (*add)(CLI::App& app, const Command& self);
};

/// A flag's lowest value, said in words ("--epochs: must be at least 1"); CLI11's
/// PositiveNumber names DBL_MAX as its upper bound in full.
inline CLI::Validator at_least(double lo) {
  auto text = [](double x) { std::ostringstream o; o << x; return o.str(); };
  return CLI::Validator(
      [lo, text](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        return v >= lo ? std::string() : "must be at least " + text(lo) + ", not " + s;
      },
      ">= " + text(lo));
}

void add_train(CLI::App& app, const Command& self);
void add_profile(CLI::App& app, const Command& self);
void add_models(CLI::App& app, const Command& self);
void add_bench(CLI::App& app, const Command& self);
void add_lab(CLI::App& app, const Command& self);
void add_plan(CLI::App& app, const Command& self);

}  // namespace dlperf::cli

// The subcommand table: each command registers its own flags and handler on the CLI app.
#pragma once

#include <CLI/CLI.hpp>

namespace dlperf::cli {

struct Command {
  const char* name;
  const char* summary;
  void (*add)(CLI::App& app, const Command& self);
};

void add_train(CLI::App& app, const Command& self);
void add_profile(CLI::App& app, const Command& self);
void add_models(CLI::App& app, const Command& self);
void add_bench(CLI::App& app, const Command& self);
void add_lab(CLI::App& app, const Command& self);
void add_plan(CLI::App& app, const Command& self);

}  // namespace dlperf::cli

// dlperf: a thin main over a table of subcommands. Errors from anywhere below arrive here as
// dlperf::Error, are printed once with their hint, and exit non-zero.
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/memory.h"
#include "core/text.h"
#include "core/version.h"

namespace {
const dlperf::cli::Command kCommands[] = {
    {"help", "list the commands; 'dlperf help COMMAND' shows one's flags", nullptr},
    {"lab", "the training lab: device, batch size, model size, loader workers and precision, with a report", dlperf::cli::add_lab},
    {"train", "train a model on a dataset and report time, throughput, memory and accuracy", dlperf::cli::add_train},
    {"profile", "where time and memory go, op by op, against the roofline; a per-op table and a Chrome/Perfetto trace", dlperf::cli::add_profile},
    {"models", "list the preset models, or show one layer by layer", dlperf::cli::add_models},
    {"plan", "predict a run's FLOPs, memory and step time from op costs, or check predictions --against run records", dlperf::cli::add_plan},
    {"bench", "measure the machine's ceilings: memory bandwidth per level, FMA and GEMM peaks, the presets' convolutions, the cost of a call; on a GPU also host-device copies and launch latency; all-reduce; the data loader alone; an empirical roofline", dlperf::cli::add_bench},
};
void print_commands(FILE* to) {
  std::fprintf(to, "usage: dlperf COMMAND [flags]   (dlperf COMMAND --help for its flags)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(to, "  %-8s %s\n", c.name, c.summary);
}
}  // namespace

int main(int argc, char** argv) {
  dlperf::rerun_with_huge_page_heap(argv);  // may start dlperf again, its malloc asking for huge pages
  // 'dlperf help train' (and 'help models show') is 'dlperf train --help', as git and cargo read it.
  std::vector<char*> args(argv, argv + argc);
  static char help_flag[] = "--help";
  if (argc > 2 && std::string(argv[1]) == "help") {
    args.erase(args.begin() + 1);
    args.push_back(help_flag);
    argc = int(args.size());
    argv = args.data();
  }
  const std::string first = argc > 1 ? argv[1] : "";
  if (argc == 1 || first == "help") {
    print_commands(argc == 1 ? stderr : stdout);  // asked for: stdout; a bare 'dlperf' is a usage error
    return argc == 1 ? 2 : 0;
  }
  if (first[0] != '-' && std::none_of(std::begin(kCommands), std::end(kCommands), [&](const auto& c) { return first == c.name; })) {
    std::fprintf(stderr, "dlperf: error: unknown command '%s'", first.c_str());
    // The closest command within two edits, as ninja suggests one tool ("tran": train, not plan).
    std::vector<std::string> names;
    for (const auto& c : kCommands) names.emplace_back(c.name);
    if (const std::string best = dlperf::closest(first, names); !best.empty()) std::fprintf(stderr, "; did you mean '%s'?", best.c_str());
    std::fprintf(stderr, "\n\n");
    print_commands(stderr);
    return 2;
  }
  CLI::App app{"dlperf: a deep-learning performance lab. Trains real networks with its own engine and\n"
               "measures time, throughput, memory and accuracy."};
  app.set_version_flag("--version", fmt::format("dlperf {} (commit {})", dlperf::dlperf_version(), dlperf::dlperf_commit()));
  app.require_subcommand(1);
  for (const auto& c : kCommands)
    if (c.add) c.add(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help and --version end here too
    // A flag CLI11 could not take: said the way dlperf's own errors are, with where to look.
    // The deepest command given ('dlperf models show'), whose --help lists the flag's values.
    std::string command = "dlperf";
    const CLI::App* deepest = &app;
    while (!deepest->get_subcommands().empty()) {
      deepest = deepest->get_subcommands().front();
      command += " " + deepest->get_name();
    }
    const std::string message = dlperf::cli::explain_parse_error(e, *deepest, command);
    const bool any = command != "dlperf";
    std::fprintf(stderr, "dlperf: error: %s\n  hint: '%s' lists %s\n", message.c_str(), any ? (command + " --help").c_str() : "dlperf help",
                 any ? "its flags and their values" : "the commands");
    return 2;
  } catch (const dlperf::Interrupted& e) {  // not an error: what finished was written
    std::fflush(stdout);  // the lines printed before it come first, also when both go to one file
    std::fprintf(stderr, "\ndlperf: %s\n", e.what());
    if (!e.hint().empty()) std::fprintf(stderr, "  hint: %s\n", e.hint().c_str());
    return 128 + e.signal();
  } catch (const dlperf::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\ndlperf: error: %s\n", e.what());
    if (!e.hint().empty()) std::fprintf(stderr, "  hint: %s\n", e.hint().c_str());
    return 1;
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "\ndlperf: error: oneDNN failed: %s (status %d)\n", e.what(), int(e.status));
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "\ndlperf: error: out of memory\n  hint: use a smaller --batch-size or model\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ndlperf: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

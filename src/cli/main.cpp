// dlperf: a thin main over a table of subcommands. Errors from anywhere below arrive here as
// dlperf::Error, are printed once with their hint, and exit non-zero.
#include <fmt/format.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"

namespace {
const dlperf::cli::Command kCommands[] = {
    {"train", "train a model on a dataset and report time, throughput, memory and accuracy", dlperf::cli::add_train},
    {"models", "list the preset models, or show one layer by layer", dlperf::cli::add_models},
};
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dlperf: a deep-learning performance lab. Trains real networks with its own engine and\n"
               "measures time, throughput, memory and accuracy."};
  app.set_version_flag("--version", std::string("dlperf ") + DLPERF_VERSION);
  app.require_subcommand(1);
  for (const auto& c : kCommands) c.add(app, c);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dlperf::Error& e) {
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

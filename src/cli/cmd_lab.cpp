// dlperf lab [device|batch|model|workers|precision ...]: flags map onto lab::LabConfig.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/text.h"
#include "lab/lab.h"

namespace dlperf::cli {

void add_lab(CLI::App& app, const Command& self) {
  auto cfg = std::make_shared<lab::LabConfig>();
  auto* c = app.add_subcommand(self.name, self.summary);
  c->add_option("experiment", cfg->experiments, "which experiments to run (default: all): device batch model workers precision")
      ->check(CLI::IsMember(lab::experiment_names()));
  auto* quick = c->add_flag_callback("--quick", [cfg] { cfg->full = false; },
                                     "a subset (20,000 training images) and 1 epoch per run: minutes on 2 CPU cores (the default without a GPU)");
  auto* full = c->add_flag_callback("--full", [cfg] { cfg->full = true; }, "the whole dataset, 5 epochs per run (the default with a GPU)")
                   ->excludes(quick);
  c->add_option("--data,-d", cfg->data, "fashion-mnist, synthetic[:CxHxW[:N]], or a directory of IDX / CIFAR-10 files")->capture_default_str();
  c->add_option("--out,-o", cfg->out, "the report folder (README.md, CSV, JSON, plots, run records)")->capture_default_str();
  c->add_option("--model,-m", cfg->base_model, "the model of the device, batch, workers and precision experiments")->capture_default_str();
  c->add_option("--batch-size,-b", cfg->base_batch, "the batch size of the device, model, workers and precision experiments")
      ->capture_default_str()->check(at_least(1));
  c->add_option("--models", cfg->models, "the model experiment's models")->delimiter(',')->capture_default_str();
  c->add_option("--batches", cfg->batches, "the batch experiment's batch sizes")->delimiter(',')->capture_default_str()->check(at_least(1));
  c->add_option("--epochs,-e", cfg->epochs, "epochs per run (default: 1 with --quick, 5 with --full)")->check(between(1, double(train::kMaxEpochs)));
  c->add_option("--train-limit", cfg->train_limit, "training images per run, 0 for all (default: 20000 with --quick, all with --full)")->check(at_least(0));
  c->add_option("--test-limit", cfg->test_limit, "test images per run, 0 for all (default: 5000 with --quick, all with --full)")->check(at_least(0));
  c->add_option("--max-workers", cfg->max_workers, "the most loader workers the workers experiment tries (default: the core count)")->check(at_least(1));
  c->add_option("--seed", cfg->seed, "seed for every run")->capture_default_str()->check(at_least(0));
  c->add_flag("!--no-progress", cfg->progress, "no progress bar");
  auto* resume = c->add_flag("--resume", cfg->resume,
                             "reuse the finished runs an interrupted lab left in --out's runs/ (same settings, machine and dlperf build)");
  auto redraw = std::make_shared<bool>(false);
  c->add_flag("--redraw", *redraw,
              "run nothing: write the report of the lab in --out again from its lab.json, with plots where gnuplot is present "
              "(for a lab made on a machine without it)")
      ->excludes(resume)
      ->excludes(quick)
      ->excludes(full);
  c->callback([cfg, c, redraw] {
    if (*redraw) {  // what shapes runs would be ignored: said instead
      std::vector<std::string> ignored;
      for (const char* flag : {"--data", "--model", "--batch-size", "--models", "--batches", "--epochs", "--train-limit", "--test-limit",
                               "--max-workers", "--seed"})
        if (c->count(flag) > 0) ignored.emplace_back(flag);
      if (!cfg->experiments.empty()) ignored.emplace_back("the experiments named");
      check(ignored.empty(), fmt::format("--redraw runs nothing, so {} would be ignored", listed(ignored)),
            "drop them to redraw the report, or drop --redraw to run a lab");
      lab::redraw_report(cfg->out);
      return;
    }
    // A flag for experiments this lab does not run would be ignored: say so before any run.
    const std::vector<std::pair<const char*, std::vector<std::string>>> used_by = {
        {"--batches", {"batch"}},
        {"--models", {"model"}},
        {"--max-workers", {"workers"}}};  // --model and --batch-size also make every lab's base and drift runs
    const auto& runs = cfg->experiments;
    if (!runs.empty())
      for (const auto& [flag, experiments] : used_by) {
        const bool applies = std::any_of(experiments.begin(), experiments.end(),
                                         [&](const std::string& e) { return std::find(runs.begin(), runs.end(), e) != runs.end(); });
        check(c->count(flag) == 0 || applies,
              fmt::format("{} is for the {} experiment{}, and this lab runs {}", flag, fmt::join(experiments, ", "), experiments.size() == 1 ? "" : "s",
                          fmt::join(runs, ", ")),
              fmt::format("drop {}, or add one of those experiments", flag));
      }
    lab::run_lab(*cfg);
  });
}

}  // namespace dlperf::cli

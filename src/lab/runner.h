// The lab's training runs: each configuration trained once (experiments share runs with
// identical settings: the base run is the batch-64 row, the fp32 row and a workers row), or
// reused from an interrupted lab's records with --resume; listed first without training, so the
// lab can say how many runs it has and how long the planner expects them to take; and the base
// configuration run again to measure how much identical runs differ. experiments.cpp drives it.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/interrupt.h"
#include "lab/lab.h"
#include "train/trainer.h"

namespace dlperf::lab {

/// The measurements every experiment reports, from a run record (a finished run's row, which
/// --resume reads each earlier record as).
nlohmann::json measured_row(const nlohmann::json& rec);

class Runner {
 public:
  Runner(const LabConfig& lab, bool quick);

  /// A few steps of the base model before anything is timed, so the first measured run does
  /// not pay the process's one-off costs (page faults, thread start-up, kernel generation). It
  /// also checks the lab's settings: where the base run cannot train (no such data, too few
  /// images for its batch), no experiment can, so the lab stops here with the reason.
  void warm_up();
  const train::TrainConfig& base() const { return base_; }

  struct Outcome {
    bool ok = false;
    std::string error;  ///< when !ok: the trainer's message (divergence, out of memory, ...)
    nlohmann::json record;
    std::string diverged;  ///< when the loss stopped being finite: how ("the loss became NaN at ...")
  };

  /// Runs the base configuration twice: the first becomes the shared base run, the second
  /// measures how much identical runs differ on this machine (noise()).
  void measure_noise();
  /// After the experiments: the base configuration once more, so noise() also covers how far
  /// the machine's speed drifted over the lab.
  void measure_drift();
  Noise noise() const;

  /// One run per configuration: a configuration that an earlier experiment ran (the base run,
  /// say) is reused, so the report shows one measurement of it, not two that differ by noise.
  /// With --resume, so is a finished run of an earlier lab that was interrupted.
  const Outcome& run(const std::string& experiment, const std::string& label, const train::TrainConfig& c);

  /// --resume: indexes the run records in the report's runs/ folder that this machine and this
  /// build of dlperf measured, by configuration. Returns how many there are.
  size_t load_earlier_runs();
  /// The record files of this lab's runs (measured or reused), in the order they first ran.
  std::vector<std::string> record_paths() const;

  /// Planning: run() and the noise runs only list the configurations they would train (each
  /// once, and not those --resume reuses), so the lab can say up front how many runs it has and
  /// how long the planner expects them to take; then the runs are numbered "3/17".
  void set_planning(bool on) { planning_ = on; }
  bool planning() const { return planning_; }
  const std::vector<train::TrainConfig>& planned() const { return planned_; }

  /// Run records an earlier lab left in the report's runs/ folder (a fresh lab adds its own).
  size_t records_in_runs_dir() const;
  size_t reused() const { return reused_; }
  /// The run records --resume found damaged, with why: "x.json (type must be string, but is number)".
  const std::vector<std::string>& damaged() const { return damaged_; }
  /// The planner's seconds for each planned run (estimate_time's per_run), to be set against
  /// the runs' measured time as they finish.
  void set_predictions(const std::vector<double>& seconds);
  const PlanCheck& plan_check() const { return check_; }

 private:
  // The configuration as it runs: --device auto and the device it resolves to ("cpu" on a
  // machine without a GPU, "cuda:0" with one) are the same run.
  static std::string run_key(train::TrainConfig c);
  Outcome reuse(const std::string& experiment, const std::string& label, const nlohmann::json& record);
  Outcome execute(const std::string& experiment, const std::string& label, const train::TrainConfig& c);
  /// A signal stopped the run `during`: the lab ends there, keeping its finished runs' records.
  Interrupted stopped(const Interrupted& e, const std::string& during) const;
  std::string base_label() const;
  train::TrainConfig noise_twin() const;
  // The planner's seconds for configuration `c` (planned_seconds_ follows planned_), or < 0.
  double planned_seconds_for(const train::TrainConfig& c) const;
  // "; about 9.2 min left": the planned time of the runs still to come (the real pass trains them
  // in the planning pass's order), scaled by how the finished ones compared with their plan.
  // Nothing when a run to come cannot be predicted, or none is left.
  std::string time_left() const;
  // "3/17, ": the run's place among those planned, its number as wide as their count.
  std::string count(int run) const;
  // Whether a run shared the CPUs with other work (its record's host_load): 1 or 0.
  static int shared_cpus(const nlohmann::json& record);
  // A call into the engine (bench::cpu_dispatch, a few ms): the threads' round trip between cores,
  // which moves when a VM places its vCPUs elsewhere, and every step with it. Not while planning.
  double engine_call_us() const;

  const LabConfig& lab_;
  train::TrainConfig base_;
  std::vector<double> base_images_per_s_;  ///< the base runs' images/s: start, start again, end
  double start_;
  std::map<std::string, Outcome> cache_;
  std::vector<std::string> order_;  ///< cache_'s keys in the order the runs came
  std::map<std::string, nlohmann::json> earlier_;  ///< --resume: finished runs of an earlier lab, by configuration
  size_t reused_ = 0;
  std::vector<std::string> damaged_;
  int runs_ = 0;  ///< training runs started (warm-up excluded)
  bool planning_ = false;
  PlanCheck check_;
  std::vector<double> planned_seconds_;  ///< the planner's seconds for each of planned_, in order
  int base_shared_ = 0;  ///< of the noise runs
  std::array<double, 2> call_us_{};  ///< at the start of the lab and at its end
  std::set<std::string> planned_keys_;
  std::vector<train::TrainConfig> planned_;
  const Outcome not_run_{false, "planned, not run", {}, ""};
};

}  // namespace dlperf::lab

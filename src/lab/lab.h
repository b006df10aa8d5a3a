// dlperf lab: the classic training-performance lab in one command. Five experiments (device,
// batch, model, workers, precision), each a set of real training runs whose measurements land
// in a table, a CSV, a JSON, gnuplot PNGs, and a README.md with observations drawn from the
// numbers. Rows that cannot run here (no GPU, an unsupported precision) are kept, marked
// missing, with the reason.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "train/trainer.h"

namespace dlperf::lab {

/// The first line of a lab's README.md: an --out folder whose README.md starts otherwise is not
/// the lab's to write over.
inline constexpr const char* kReportTitle = "# dlperf lab report";

/// One column of an experiment's table. `key` names it in the CSV and JSON (docs/lab.md lists
/// them); `header` is the console and README heading.
struct Column {
  std::string key, header;
  int decimals = 2;  ///< for numbers; kText for text, kOwnDigits for a number's own digits
};
inline constexpr int kText = -1;
/// A number as it was set, up to 4 significant digits: an lr of 0.025 or 1.6 (with 4 decimals
/// they read 0.0250 and 1.6000).
inline constexpr int kOwnDigits = -2;

/// The columns of an experiment's table ("device", ..., "precision", and "plan" for the
/// prediction); empty for another name.
std::vector<Column> columns_of(const std::string& experiment);

/// One experiment's results: rows are JSON objects keyed by column key; a number that was not
/// measured is null. Every row has "status" ("measured", "missing" or "diverged") and "note".
struct Experiment {
  std::string name, title, question;
  std::vector<Column> columns;
  std::vector<nlohmann::json> rows;
  std::vector<std::string> observations;  ///< sentences computed from the rows
  std::vector<std::string> plots;          ///< PNG paths relative to the report folder
  /// How much two identical runs differed in images/s, in % (0 = not measured); differences
  /// below it are noise, and the observations say so.
  double noise_pct = 0;

  std::vector<nlohmann::json> measured() const;  ///< rows whose status is "measured"
};

/// A table cell: "-" for null, text as it is, a number with the column's decimals, or more where
/// those would show fewer than two significant digits (a 5.4 ms epoch is "0.0054", not "0.01");
/// with kOwnDigits, the number's own digits.
std::string cell_text(const nlohmann::json& v, int decimals);

struct LabConfig {
  std::vector<std::string> experiments;  ///< empty = all five
  /// true = --full, false = --quick; unset = --full on a machine with a GPU, --quick without
  /// (where --full would take hours). run_lab settles it before writing the report.
  std::optional<bool> full;
  std::string data = "fashion-mnist";
  std::string out = "reports/lab";
  std::string base_model = "medium";                   ///< for device, batch, workers, precision
  std::vector<std::string> models = {"small", "medium", "large"};
  /// The device experiment's tiny workloads, at batch 16, largest first: on an H100 (2026-11-28)
  /// the GPU still trained the mlp 1.5x faster than one CPU thread, so the logistic regression,
  /// a fifth of its arithmetic, is there to find where the CPU wins.
  std::vector<std::string> tiny_models = {"mlp", "logreg"};
  double tiny_lr = 0.02;                               ///< models without batchnorm need a smaller lr
  std::vector<int64_t> batches = {16, 64, 256, 1024};
  int64_t base_batch = 64;
  double base_lr = 0.1;                                ///< at base_batch; the linear rule scales it
  int64_t epochs = 0;                                  ///< 0 = 1 in --quick, 5 in --full
  int64_t train_limit = -1, test_limit = -1;           ///< -1 = the mode's default, 0 = all
  uint64_t seed = 42;
  int max_workers = 0;                                 ///< 0 = bounded by the core count
  bool progress = true;
  bool quiet = false;                                  ///< tests
  int sigint_in_run = 0;                               ///< tests: a Ctrl-C in the lab's Nth training run (1 = the first after the warm-up)
  /// Reuse the finished runs an interrupted lab left in <out>/runs (same configuration, machine
  /// and dlperf build: version and git commit) instead of running them again.
  bool resume = false;
};

inline const std::vector<std::string>& experiment_names() {
  static const std::vector<std::string> n = {"device", "batch", "model", "workers", "precision"};
  return n;
}

/// Runs the chosen experiments and writes the report; returns the experiments.
std::vector<Experiment> run_lab(const LabConfig& cfg);

/// The last table of every lab: `dlperf plan --against` the lab's run records (name "plan"):
/// planned and measured step time and peak memory per run; records it cannot plan are rows
/// marked missing, with the reason.
Experiment prediction(const std::vector<std::string>& records);

/// How long training runs should take, by the step times `dlperf plan` predicts for them (on
/// this CPU from its measured ceilings, on a GPU its kernels on the catalog's datasheet,
/// plan/gpu_step.h): each run's training steps, plus its test passes at a forward pass per test batch. Runs it cannot predict
/// (a GPU the catalog lacks, a model that does not build) are counted apart.
struct TimeEstimate {
  double seconds = 0;  ///< of the runs it could predict
  int runs = 0, unpredicted = 0;
  std::vector<double> per_run;  ///< each run's seconds, in order; < 0 where it could not predict it
};
TimeEstimate estimate_time(const std::vector<train::TrainConfig>& runs, const data::DataPair& data);

/// How much identical runs of the base configuration differed in images/s: two back to back at
/// the start of the lab and, once its experiments ran, one more at its end. Two adjacent runs
/// can agree while the machine's speed drifts over minutes (a VM's neighbours), which the
/// experiments' rows, trained minutes apart, do see: the run at the end catches that.
struct Noise {
  double start_pct = 0;  ///< between the two at the start
  double pct = 0;        ///< the largest difference among all of them: what a row must exceed
  int runs = 0;          ///< identical runs measured: 2, or 3 with the one at the end (0: none)
  /// With 3 runs: the one at the end against the mean of the two at the start, in percent
  /// (negative: it was slower).
  double end_change_pct = 0;
  int shared_runs = 0;   ///< of them, those that shared the CPUs with other work (hw::HostLoad::busy)
  /// A call into the CPU engine (bench::cpu_dispatch) at the lab's start and end, in us; 0 = not
  /// measured. Where they differ by more than 25%, the cores' placement moved during the lab.
  double call_start_us = 0, call_end_us = 0;
};
/// The Noise of base runs' images/s, in the order they ran (the first two at the start).
Noise noise_of(const std::vector<double>& images_per_s);
/// What the identical runs differed by, and the difference up to which rows are called alike:
/// the noise, never less than 3% (a few runs can agree by luck). Without the ".".
std::string noise_sentence(const Noise& n);

/// A row's note as the tables show it: "missing: why" for a row that did not measure, else its
/// note (a measured row's is empty unless something is to be said, such as shared CPUs).
std::string row_note(const nlohmann::json& row);

/// Whether the lab's runs shared the CPUs with other work (each row's host_busy_pct, a run
/// counted once however many experiments show it): "no run shared the CPUs with other work (...)",
/// or how many did and by how much; "" where the records do not say (made before dlperf kept it).
std::string shared_cpus_sentence(const std::vector<Experiment>& exps);

/// The observations for one experiment, from its rows only (so they follow the data).
std::vector<std::string> observe(const Experiment& e);

/// The planned time against the measured one, over the runs that finished and were predicted
/// (a run that diverges stops early, and would make the plan look slow).
struct PlanCheck {
  int runs = 0;  ///< finished and predicted
  int of = 0;    ///< runs planned
  double planned_s = 0, measured_s = 0;  ///< their training and testing time
};

/// "14 runs trained and tested in 64.2 s; dlperf plan had expected 61.9 s (0.96x)" (to follow
/// "Its" or "The lab's"), or "" when no run finished that the plan predicted.
std::string planned_against_measured(const PlanCheck& c);

/// What the lab as a whole did, for the report's opening lines and lab.json.
struct LabTotals {
  double seconds = 0;        ///< the lab's wall time
  Noise noise;
  size_t reused_runs = 0;    ///< runs that came from an earlier, interrupted lab (--resume)
  TimeEstimate planned;      ///< the runs it was to train, and the time the planner expected them to take
  PlanCheck check;           ///< the plan against the runs that finished
  std::string created;       ///< when the lab ran ("2026-11-28 02:39"); "" = now
  /// false: a lab.json from before it kept the base model, batch and lr (redraw_report), whose
  /// report then leaves that sentence out rather than state the defaults
  bool settings_known = true;
};

/// Writes <out>/<name>.csv for each experiment, <out>/lab.json, <out>/plots/*.png (when
/// gnuplot is present) and <out>/README.md. Fills each experiment's `plots`.
void write_report(std::vector<Experiment>& exps, const LabConfig& cfg, const nlohmann::json& machine, const LabTotals& totals);

/// `dlperf lab --redraw`: the report of the lab in `out` written again from its lab.json, with
/// no run: the CSVs, README.md and, where gnuplot is present now, the plots. For a lab made on a
/// machine without gnuplot (the GPU machines dlperf is lent have none), drawn on one with it.
/// Throws Error naming the file where lab.json is missing or damaged.
void redraw_report(const std::string& out, bool quiet = false);

/// The key under which --resume finds a run: its configuration as it ran (the device it used,
/// not the flag). For a run record: empty unless the record is a finished training run that
/// this build of dlperf (version and commit) measured on this `machine` (hw::machine_json()).
std::string run_key_of_config(nlohmann::json config);
std::string resumable_run_key(const nlohmann::json& record, const nlohmann::json& machine);

}  // namespace dlperf::lab

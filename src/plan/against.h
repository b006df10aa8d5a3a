// plan --against: predict recorded training runs and compare with what they measured.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plan/step_time.h"

namespace dlperf::plan {

struct Comparison {
  /// "medium b64 w1" ("... on 3x32x32", "... lr 0.4", "... 1 thread" where runs differ in those;
  /// a GPU run's "medium b64 bf16 on h100-sxm", with ", nchw", ", pageable copies", ", no graphs" ...
  /// where runs differ in the settings of gpu_settings)
  std::string run;
  std::string file;  ///< the record's file name
  double lr = 0;     ///< the run's peak learning rate (0: not recorded)
  std::string input;  ///< the data's image shape, "1x28x28"
  int threads = 0;    ///< CPU threads it trained on (0: not recorded, or a GPU run)
  /// A GPU run's settings that change its step, each as its name says it where runs of one name
  /// differ in it: the activations' layout, how the data is fed, CUDA graphs, the convolutions'
  /// workspace cap, who runs the small convolutions (empty where a setting needs no word).
  std::vector<std::pair<std::string, std::string>> gpu_settings;
  double predicted_step_s = 0, measured_step_s = 0;
  double predicted_peak = 0, measured_peak = 0;
  double predicted_energy_j = -1, measured_energy_j = -1;  ///< < 0 = unknown
  std::string energy_source;  ///< the record's, when it measured none
  std::string busy_note;      ///< what else ran on the CPUs in the measured epoch, where it slowed it (hw::busy_note)
  /// A call into the engine's cost the prediction took, in microseconds: the mean of the two the
  /// run's record measured around its epochs (`call_from_record`), else measured now; 0 for a GPU run.
  double call_us = 0;
  bool call_from_record = false;
  /// A GPU run: predicted as the targets table predicts that GPU (plan::estimate): dlperf's GPU
  /// kernels on the roofline fitted to one H100's profiles (plan/gpu_step.h), not to this GPU's.
  bool on_gpu = false;
  /// A GPU run whose record kept its convolutions' workspace (gpu_step.conv_workspace_bytes, since
  /// 2026-11-28): counted in predicted_peak, the one buffer chosen at run time; older GPU records
  /// leave it out.
  bool conv_workspace_from_record = false;
  double time_error() const { return (predicted_step_s - measured_step_s) / measured_step_s; }
  double memory_error() const { return (predicted_peak - measured_peak) / measured_peak; }
};

/// The cost of a call into the engine a CPU run's record measured around its epochs (the mean of
/// summary.engine_call_us's start and end), in microseconds; 0 where it has none (a GPU run, a
/// record from before 2026-11-24, a damaged field).
double recorded_call_us(const nlohmann::json& summary);

/// A file --against could not compare, and why.
struct Skipped {
  std::string file, why;
};

/// What another file dlperf writes is ("bench result", "profile table", "trace", "machine
/// profile", "lab summary"), or "" for anything else.
std::string other_dlperf_output(const nlohmann::json& j);

/// Predicts the training run a record describes (run records of `dlperf train`; other files
/// are skipped, saying why, in `skipped`). A CPU run is predicted at the threads it trained on,
/// and skipped where it ran on another CPU than this one. With `others`, dlperf's other outputs
/// (bench results, profile tables, traces: runs/*.json matches them all) are counted there by
/// kind instead of each getting a notice. `cpu_watts` > 0 predicts energy as watts x predicted
/// training time. A folder in `files` stands for the .json files in and below it, traces left out.
std::vector<Comparison> compare_with_records(const std::vector<std::string>& files, const CpuCeilings& c,
                                             std::vector<Skipped>& skipped, double cpu_watts = 0,
                                             std::map<std::string, int>* others = nullptr);

/// This CPU's ceilings at a thread count, asked for only when a CPU record is to be predicted.
using CeilingsAt = std::function<CpuCeilings(int threads)>;
/// The same, measuring the ceilings only when a CPU record needs them (at `threads` where the
/// record does not say): without a machine profile that takes seconds, which a mistyped path or a
/// folder of GPU runs should not wait for.
std::vector<Comparison> compare_with_records(const std::vector<std::string>& files, int threads, const CeilingsAt& ceilings_at,
                                             std::vector<Skipped>& skipped, double cpu_watts = 0,
                                             std::map<std::string, int>* others = nullptr);

struct ErrorSummary {
  double median = 0, worst = 0;  ///< of |error|
};
ErrorSummary summarize(std::vector<double> errors);

}  // namespace dlperf::plan

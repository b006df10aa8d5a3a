// plan --against: predict recorded training runs and compare with what they measured.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "plan/step_time.h"

namespace dlperf::plan {

struct Comparison {
  std::string run;  ///< "medium b64 w1" and the record's file name
  std::string file;
  double predicted_step_s = 0, measured_step_s = 0;
  double predicted_peak = 0, measured_peak = 0;
  double time_error() const { return (predicted_step_s - measured_step_s) / measured_step_s; }
  double memory_error() const { return (predicted_peak - measured_peak) / measured_peak; }
};

/// Predicts the training run a record describes (run records of `dlperf train`; other files
/// are skipped with a notice in `skipped`).
std::vector<Comparison> compare_with_records(const std::vector<std::string>& files, const CpuCeilings& c,
                                             std::vector<std::string>& skipped);

struct ErrorSummary {
  double median = 0, worst = 0;  ///< of |error|
};
ErrorSummary summarize(std::vector<double> errors);

}  // namespace dlperf::plan

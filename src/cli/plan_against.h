#pragma once
// dlperf plan --against's report (plan_against.cpp), apart from the rest of dlperf plan.
#include <string>
#include <vector>

namespace dlperf::cli {

/// Predicts the runs the records in `files` (or folders of them) describe, at `threads` where a
/// record does not say, and prints them beside their measurements: step time, peak memory and,
/// where measured, energy (predicted from `cpu_watts` on the CPU). Writes the comparison as JSON
/// to `json_out` unless empty; throws where no record could be compared.
void print_against(const std::vector<std::string>& files, int threads, double cpu_watts, const std::string& json_out);

}  // namespace dlperf::cli

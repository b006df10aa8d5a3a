// The lab's last table: `dlperf plan --against` the lab's own runs. The plan predicts each run's
// step time and peak memory from the op cost model and the machine's ceilings, before anything
// runs; the table sets that beside what the run measured, so the report shows how far the
// planner can be trusted on this machine.
#include <fmt/format.h>
#include <omp.h>

#include <filesystem>

#include "lab/lab.h"
#include "plan/against.h"

namespace dlperf::lab {

using nlohmann::json;

Experiment prediction(const std::vector<std::string>& records) {
  Experiment e;
  e.name = "plan";
  e.title = "Prediction: dlperf plan against these runs";
  e.question =
      "Before a run, how close does `dlperf plan` come to the step time and peak memory the run measured? It predicts from "
      "the op cost model and this machine's ceilings (measured by `dlperf bench all` where it ran, else measured on the "
      "spot in about a second).";
  e.columns = {{"run", "run", -1},
               {"step_ms_planned", "step ms planned", 3},
               {"step_ms", "step ms measured", 3},
               {"step_ratio", "planned / measured", 3},
               {"peak_mb_planned", "peak MB planned", 2},
               {"peak_mb", "peak MB measured", 2},
               {"peak_error_bytes", "peak error bytes", 0}};  // the report adds status and note
  std::vector<std::string> skipped;
  const auto rows = plan::compare_with_records(records, plan::host_ceilings(omp_get_max_threads()), skipped);
  for (const plan::Comparison& c : rows)
    e.rows.push_back({{"run", c.run},
                      {"step_ms_planned", 1e3 * c.predicted_step_s},
                      {"step_ms", 1e3 * c.measured_step_s},
                      {"step_ratio", c.predicted_step_s / c.measured_step_s},
                      {"peak_mb_planned", c.predicted_peak / 1e6},
                      {"peak_mb", c.measured_peak / 1e6},
                      {"peak_error_bytes", c.predicted_peak - c.measured_peak},
                      {"status", "measured"},
                      {"note", ""},
                      {"record", c.file}});
  for (const std::string& why : skipped) {  // "<file>: <reason>"
    const size_t colon = why.find(": ");
    e.rows.push_back({{"run", std::filesystem::path(why.substr(0, colon)).filename().string()},
                      {"status", "missing"},
                      {"note", colon == std::string::npos ? why : why.substr(colon + 2)}});
  }
  return e;
}

}  // namespace dlperf::lab

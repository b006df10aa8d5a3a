// dlperf plan --against: predict the runs that run records describe, on this machine, and show
// each prediction beside what the run measured (plan/against.cpp does the predicting).
#include "cli/plan_against.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "plan/against.h"
#include "plan/gpu_step.h"
#include "plan/step_time.h"
#include "report/table.h"

namespace dlperf::cli {

void print_against(const std::vector<std::string>& files, int threads, double cpu_watts, const std::string& json_out) {
  std::vector<plan::Skipped> skipped;
  std::map<std::string, int> others;  // runs/*.json also matches the bench results, profile tables, ...
  // host_ceilings measures each thread count's once a process (where no machine profile has them).
  const auto rows = plan::compare_with_records(files, threads, [](int t) { return plan::host_ceilings(t); }, skipped,
                                               cpu_watts, &others);
  // One line per reason: a lab's 13 records from another machine are one line, not 13 of 300 characters.
  std::vector<std::pair<std::string, std::vector<std::string>>> by_why;
  for (const auto& s : skipped) {
    auto it = std::find_if(by_why.begin(), by_why.end(), [&](const auto& w) { return w.first == s.why; });
    if (it == by_why.end()) it = by_why.insert(by_why.end(), {s.why, {}});
    it->second.push_back(s.file);
  }
  for (const auto& [why, files] : by_why)
    if (files.size() == 1)
      std::fprintf(stderr, "skipped %s: %s\n", files[0].c_str(), why.c_str());
    else
      std::fprintf(stderr, "skipped %zu files (%s and %zu more): %s\n", files.size(), files[0].c_str(), files.size() - 1,
                   why.c_str());
  if (!others.empty()) {
    std::string kinds;
    for (const auto& [kind, n] : others) kinds += fmt::format("{}{} {}{}", kinds.empty() ? "" : ", ", n, kind, n == 1 ? "" : "s");
    std::fprintf(stderr, "skipped dlperf's other files: %s\n", kinds.c_str());
  }
  check(!rows.empty(),
        skipped.empty() ? "none of the files given to --against is a training run record"
                        : "none of the files given to --against could be compared (the lines above say why)",
        "pass run records of 'dlperf train' or 'dlperf lab' made on this machine, for example runs/*.json, or a folder holding them: runs or reports/lab");
  report::Table t({"run", "step ms pred", "step ms meas", "time err", "peak MB pred", "peak MB meas", "mem err", "call us"});
  std::vector<double> te, me;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    t.add({r.run + (r.busy_note.empty() ? "" : " *"), format_decimals(r.predicted_step_s * 1e3, 2), format_decimals(r.measured_step_s * 1e3, 2),
           fmt::format("{:+.1f}%", 100 * r.time_error()), format_decimals(r.predicted_peak / 1e6, 1),
           format_decimals(r.measured_peak / 1e6, 1), fmt::format("{:+.1f}%", 100 * r.memory_error()),
           r.call_us > 0 ? fmt::format("{:.2f}", r.call_us) : "-"});
    te.push_back(r.time_error());
    me.push_back(r.memory_error());
    auto maybe = [](double x) { return x < 0 ? nlohmann::json() : nlohmann::json(x); };
    out.push_back({{"run", r.run}, {"file", r.file}, {"predicted_step_s", r.predicted_step_s}, {"measured_step_s", r.measured_step_s},
                   {"predicted_peak_bytes", r.predicted_peak}, {"measured_peak_bytes", r.measured_peak},
                   {"predicted_energy_j", maybe(r.predicted_energy_j)}, {"measured_energy_j", maybe(r.measured_energy_j)},
                   {"busy_note", r.busy_note}, {"call_us", r.call_us > 0 ? nlohmann::json(r.call_us) : nlohmann::json()},
                   {"call_from_record", r.call_from_record}, {"on_gpu", r.on_gpu},
                   {"conv_workspace_from_record", r.conv_workspace_from_record}});
  }
  // This CPU's ceilings where a CPU run was predicted; GPU runs alone measure none.
  const bool any_cpu = std::any_of(rows.begin(), rows.end(), [](const plan::Comparison& r) { return !r.on_gpu; });
  const std::optional<plan::CpuCeilings> c = any_cpu ? std::optional(plan::host_ceilings(threads)) : std::nullopt;
  if (c)
    std::printf("Predicted vs measured, %s (ceilings: %s; engine efficiencies: %s, docs/plan.md)\n",
                counted((long long)rows.size(), "training run").c_str(), c->source.c_str(), plan::engine_fit_name(*c).c_str());
  else
    std::printf("Predicted vs measured, %s (GPU runs: dlperf's GPU step model, as the note under the table says; docs/plan.md)\n",
                counted((long long)rows.size(), "training run").c_str());
  // Whose call cost each CPU row took: its record's, or (older records) the one measured now.
  long long from_record = 0, measured_now = 0;
  for (const auto& r : rows)
    if (r.call_from_record) ++from_record;
    else if (r.call_us > 0) ++measured_now;
  if (from_record > 0)
    std::printf("call us: a call into the engine as each run measured it around its epochs (%s)%s\n", counted(from_record, "run").c_str(),
                measured_now > 0 ? fmt::format(", else as measured just now ({}: older records)", counted(measured_now, "run")).c_str() : "");
  std::printf("\n");
  t.print();
  const auto ts = plan::summarize(te), ms = plan::summarize(me);
  // The worst run by name: the row to look at first.
  auto worst_run = [&](const std::vector<double>& errors) {
    size_t w = 0;
    for (size_t i = 1; i < errors.size(); ++i)
      if (std::fabs(errors[i]) > std::fabs(errors[w])) w = i;
    return rows.size() > 1 && errors[w] != 0 ? " (" + rows[w].run + ")" : std::string();
  };
  for (const auto& r : rows)
    if (!r.busy_note.empty())
      std::printf("* %s: %s while it trained, so its measured step reads slow ('dlperf train' it again on an idle machine)\n",
                  r.run.c_str(), r.busy_note.c_str());
  std::printf("\nstep time: median |error| %.1f%%, worst %.1f%%%s\npeak memory: median |error| %.1f%%, worst %.1f%%%s\n",
              100 * ts.median, 100 * ts.worst, worst_run(te).c_str(), 100 * ms.median, 100 * ms.worst, worst_run(me).c_str());
  // The GPU rows' step time comes from a fit to one H100's kernels: say so, and what it leaves out.
  if (std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.on_gpu; }))
    std::printf("GPU rows: step time from dlperf's GPU kernels pass by pass on a roofline fitted to an H100's 'dlperf profile' "
                "tables (convolutions at %.0f%% of the datasheet peak in fp32, %.0f%% on tensor cores; %.0f%% of memory bandwidth; "
                "%.1f to %.1f us a kernel; docs/plan.md), not to this GPU's: cuDNN's timed search picks kernels run by run, and a "
                "--layout other than the precision's default runs slower kernels than the fit's. Peak memory is the executor's "
                "own buffers plus the convolutions' workspace, which cuDNN's timed search chooses at run time: the one each run "
                "recorded%s.\n",
                100 * plan::GpuEngineModel{}.conv_share_fp32, 100 * plan::GpuEngineModel{}.conv_share_tensor_cores,
                100 * plan::GpuEngineModel{}.bandwidth_share, 1e6 * plan::GpuEngineModel{}.streaming_fill_s,
                1e6 * plan::GpuEngineModel{}.conv_fill_fp32_s,
                [&] {
                  const auto older = std::count_if(rows.begin(), rows.end(), [](const auto& r) { return r.on_gpu && !r.conv_workspace_from_record; });
                  return older == 0 ? std::string()
                                    : fmt::format(" ({} from before 2026-11-28 recorded none, and leave{} it out)", counted(older, "GPU run"),
                                                  older == 1 ? "s" : "");
                }().c_str());
  // Energy: predicted from --cpu-watts (a GPU's from its TDP), measured where the records have
  // RAPL or fine enough NVML readings; the runs left out, with each reason once.
  std::vector<double> ee;
  std::vector<std::pair<std::string, long long>> why;
  bool gpu_compared = false;
  for (const auto& r : rows) {
    if (r.predicted_energy_j > 0 && r.measured_energy_j > 0) {
      ee.push_back((r.predicted_energy_j - r.measured_energy_j) / r.measured_energy_j);
      gpu_compared = gpu_compared || r.on_gpu;
      continue;
    }
    const std::string reason = r.measured_energy_j < 0 ? r.energy_source : "pass --cpu-watts to predict it";
    auto it = std::find_if(why.begin(), why.end(), [&](const auto& w) { return w.first == reason; });
    if (it == why.end()) why.emplace_back(reason, 1);
    else ++it->second;
  }
  if (!ee.empty()) {
    const auto es = plan::summarize(ee);
    std::printf("energy (last epoch): median |error| %.1f%%, worst %.1f%% over %s%s\n", 100 * es.median, 100 * es.worst,
                counted((long long)ee.size(), "run").c_str(), gpu_compared ? " (a GPU's planned at its TDP, an upper bound)" : "");
  }
  if (!why.empty()) {
    std::vector<std::string> parts;
    for (const auto& [reason, n] : why)
      parts.push_back(why.size() == 1 && ee.empty() ? reason : fmt::format("{} ({})", reason, counted(n, "run")));
    std::printf("energy: not compared%s: %s\n", ee.empty() ? "" : " for the others", fmt::format("{}", fmt::join(parts, "; ")).c_str());
  }
  const nlohmann::json comparison{{"runs", out}, {"ceilings", c ? plan::to_json(*c) : nlohmann::json()},
                                   {"step_time_error", {{"median", ts.median}, {"worst", ts.worst}}},
                                   {"peak_memory_error", {{"median", ms.median}, {"worst", ms.worst}}}};
  if (!json_out.empty()) write_file_atomically(json_out, comparison.dump(2) + "\n", "pick a writable --json path");
}

}  // namespace dlperf::cli

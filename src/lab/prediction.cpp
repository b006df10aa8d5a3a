// The lab's last table: `dlperf plan --against` the lab's own runs. The plan predicts each run's
// step time and peak memory from the op cost model and the machine's ceilings, before anything
// runs; the table sets that beside what the run measured, so the report shows how far the
// planner can be trusted on this machine.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <optional>

#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "core/text.h"
#include "core/timer.h"
#include "lab/lab.h"
#include "nn/graph.h"
#include "plan/against.h"
#include "plan/catalog.h"
#include "plan/targets.h"

namespace dlperf::lab {

using nlohmann::json;

Experiment prediction(const std::vector<std::string>& records) {
  Experiment e;
  e.name = "plan";
  e.title = "Prediction: dlperf plan against these runs";
  e.question =
      "Before a run, how close does `dlperf plan` come to the step time and peak memory the run measured? It predicts from "
      "the op cost model and this machine's ceilings (measured by `dlperf bench all` where it ran, else measured on the "
      "spot in about two seconds), with the cost of a call into the engine each run measured around its epochs.";
  const plan::CpuCeilings ceilings = plan::host_ceilings(omp_get_max_threads());
  e.question += fmt::format(" The ceilings here ({:.0f} GFLOP/s, DRAM {:.0f} GB/s) were {}; how close the engine comes to them is {}.",
                            ceilings.peak_gflops, ceilings.dram_gbps, ceilings.source, plan::engine_fit_name(ceilings));
  e.columns = columns_of("plan");
  std::vector<plan::Skipped> skipped;
  const auto rows = plan::compare_with_records(records, ceilings, skipped);
  for (const plan::Comparison& c : rows)
    e.rows.push_back({{"run", c.run},
                      {"step_ms_planned", 1e3 * c.predicted_step_s},
                      {"step_ms", 1e3 * c.measured_step_s},
                      {"step_ratio", c.predicted_step_s / c.measured_step_s},
                      {"peak_mb_planned", c.predicted_peak / 1e6},
                      {"peak_mb", c.measured_peak / 1e6},
                      {"peak_error_bytes", c.predicted_peak - c.measured_peak},
                      {"call_us", c.call_us > 0 ? json(c.call_us) : json()},
                      {"status", "measured"},
                      {"note", c.busy_note.empty() ? "" : "CPUs shared: " + c.busy_note},
                      {"record", c.file}});
  for (const plan::Skipped& s : skipped)
    e.rows.push_back({{"run", std::filesystem::path(s.file).filename().string()}, {"status", "missing"}, {"note", s.why}});
  return e;
}

TimeEstimate estimate_time(const std::vector<train::TrainConfig>& runs, const data::DataPair& data) {
  TimeEstimate t;
  std::optional<plan::Catalog> catalog;
  for (const train::TrainConfig& c : runs) {
    ++t.runs;
    t.per_run.push_back(-1);
    const auto images = [](int64_t limit, int64_t size) { return limit > 0 ? std::min(limit, size) : size; };
    // Training drops a last partial batch; testing pads it.
    const int64_t train_batches = images(c.train_limit, data.train.size()) / c.batch;
    const int64_t test_batches = (images(c.test_limit, data.test.size()) + c.batch - 1) / c.batch;
    const double train_steps = double(train_batches * c.epochs), test_steps = double(test_batches * c.epochs);
    try {
      const nn::Graph g = nn::build_graph(nn::load_model(c.model), {data.train.channels, data.train.height, data.train.width},
                                          data.train.classes, c.batch);
      if (const int gpu = cuda::resolve_device(c.device); gpu >= 0) {
        const std::string id = plan::catalog_id_for_gpu(cuda::gpus_json().at(size_t(gpu)).value("name", ""));
        if (id.empty()) throw Error("a GPU the catalog does not know");
        if (!catalog) catalog = plan::load_catalog();
        const plan::Device& d = catalog->find(id);
        plan::JobSpec job;
        job.graph = &g, job.global_batch = c.batch, job.steps = train_steps, job.precision = c.precision;
        job.optimizer = c.optimizer.name, job.gpu_layout = c.layout;
        const plan::TargetEstimate e = plan::estimate(job, d, 0, 1);
        if (!e.unsupported.empty()) throw Error(e.unsupported);
        // A test step is the step's forward passes (plan/gpu_step.h).
        double forward_s = 0;
        for (const plan::GpuPassOn& p : plan::gpu_passes_on(job, d))
          if (p.pass.phase == "forward") forward_s += p.time.total();
        t.per_run.back() = e.step_s * train_steps + forward_s * test_steps;
      } else {
        const int threads = c.threads > 0 ? c.threads : omp_get_max_threads();
        plan::CpuCeilings at = plan::host_ceilings(threads);
        at.loader_workers = c.workers;
        at.augment = c.augment;
        const plan::StepPrediction p = plan::predict_step(g, c.optimizer, plan::with_precision(at, c.precision));
        t.per_run.back() = p.step_s * train_steps + p.forward_s * test_steps;
      }
      t.seconds += t.per_run.back();
    } catch (const Error&) {
      ++t.unpredicted;
    }
  }
  return t;
}

std::string planned_against_measured(const PlanCheck& c) {
  if (c.runs == 0 || c.measured_s <= 0) return "";
  return fmt::format("{} trained and tested in {}; dlperf plan had expected {} ({:.2f}x){}", counted(c.runs, "run"),
                     format_seconds(c.measured_s), format_seconds(c.planned_s), c.planned_s / c.measured_s,
                     c.runs < c.of ? fmt::format(", leaving out {} that did not finish or that it could not predict", counted(c.of - c.runs, "run"))
                                   : "");
}

}  // namespace dlperf::lab

// dlperf plan: predict a training run's FLOPs, memory and time from the op cost model before it
// runs, or (--against) predict recorded runs and show the prediction's error.
#include <fmt/format.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "plan/against.h"
#include "plan/memory.h"
#include "plan/step_time.h"
#include "report/table.h"

namespace dlperf::cli {

namespace {

struct PlanArgs {
  std::string model = "medium";
  std::string input = "1x28x28";
  int64_t classes = 10;
  int64_t batch = 64;
  std::string optimizer = "sgd";
  int workers = 1;
  int64_t dataset = 60000;
  int64_t epochs = 5;
  bool layers = false;
  std::vector<std::string> against;
  std::string json_out;
};

double available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

std::string seconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

void plan_one(const PlanArgs& a, const plan::CpuCeilings& c) {
  nn::OptimizerConfig opt;
  opt.name = a.optimizer;
  check(a.batch >= 1, "--batch-size must be at least 1");
  check(a.dataset >= a.batch, "--dataset-size must be at least one batch");
  const nn::Graph g = nn::build_graph(nn::load_model(a.model), parse_chw(a.input), a.classes, a.batch);
  const plan::MemoryEstimate m = plan::engine_memory(g, opt, a.workers);
  const plan::StepPrediction p = plan::predict_step(g, opt, c);
  const double steps = std::floor(double(a.dataset) / double(a.batch));
  std::printf("dlperf plan: %s on %s, batch %lld, %s, %d loader workers, on this CPU (%d threads)\n\n", g.model.c_str(),
              a.input.c_str(), (long long)a.batch, a.optimizer.c_str(), a.workers, omp_get_max_threads());
  std::printf("parameters        %lld (%s as f32)\n", (long long)g.param_count(), format_bytes(double(g.param_count()) * 4).c_str());
  std::printf("FLOPs per step    %.3g forward + %.3g backward = %.3g\n", g.forward_flops(), g.backward_flops(),
              g.forward_flops() + g.backward_flops());
  std::printf("FLOPs for the job %.3g (%lld epochs of %.0f steps)\n\n", (g.forward_flops() + g.backward_flops()) * steps * double(a.epochs),
              (long long)a.epochs, steps);
  report::Table mt({"memory", "bytes"});
  for (int i = 0; i < kMemCategories; ++i) mt.add({std::string(to_string(MemCategory(i))), format_bytes(m.bytes[size_t(i)])});
  mt.separator();
  mt.add({"peak (all allocated at start)", format_bytes(m.total())});
  mt.print();
  const double avail = available_memory();
  if (avail > 0) {
    const bool fits = m.total() <= 0.9 * avail;
    std::printf("%s: %s of %s available\n\n", fits ? "fits" : "does NOT fit", format_bytes(m.total()).c_str(), format_bytes(avail).c_str());
  }
  std::printf("step time         %s (forward %s, backward %s, optimizer %s)\n", seconds(p.step_s).c_str(), seconds(p.forward_s).c_str(),
              seconds(p.backward_s).c_str(), seconds(p.optimizer_s).c_str());
  std::printf("throughput        %.0f images/s\n", double(a.batch) / p.step_s);
  std::printf("epoch             %s (%.0f steps, training only)\n", seconds(p.step_s * steps).c_str(), steps);
  std::printf("job               %s for %lld epochs\n", seconds(p.step_s * steps * double(a.epochs)).c_str(), (long long)a.epochs);
  std::printf("ceilings          %.1f GFLOP/s, L2 %.0f / L3 %.0f / DRAM %.0f GB/s: %s\n", c.peak_gflops, c.l2_gbps, c.l3_gbps,
              c.dram_gbps, c.source.c_str());
  if (a.layers) {
    report::Table t({"layer", "op", "fwd ms", "bwd ms", "fwd bound"});
    for (const auto& l : p.layers)
      t.add({l.name, l.op, fmt::format("{:.3f}", l.forward_s * 1e3), fmt::format("{:.3f}", l.backward_s * 1e3), l.bound});
    std::printf("\n");
    t.print();
  }
}

void against(const PlanArgs& a, const plan::CpuCeilings& c) {
  std::vector<std::string> skipped;
  const auto rows = plan::compare_with_records(a.against, c, skipped);
  for (const auto& s : skipped) std::fprintf(stderr, "skipped %s\n", s.c_str());
  check(!rows.empty(), "none of the files given to --against is a training run record",
        "pass run records of 'dlperf train' or 'dlperf lab', for example runs/*.json or reports/lab/runs/*.json");
  report::Table t({"run", "step ms pred", "step ms meas", "time err", "peak MB pred", "peak MB meas", "mem err"});
  std::vector<double> te, me;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    t.add({r.run, fmt::format("{:.2f}", r.predicted_step_s * 1e3), fmt::format("{:.2f}", r.measured_step_s * 1e3),
           fmt::format("{:+.1f}%", 100 * r.time_error()), fmt::format("{:.1f}", r.predicted_peak / 1e6),
           fmt::format("{:.1f}", r.measured_peak / 1e6), fmt::format("{:+.1f}%", 100 * r.memory_error())});
    te.push_back(r.time_error());
    me.push_back(r.memory_error());
    out.push_back({{"run", r.run}, {"file", r.file}, {"predicted_step_s", r.predicted_step_s}, {"measured_step_s", r.measured_step_s},
                   {"predicted_peak_bytes", r.predicted_peak}, {"measured_peak_bytes", r.measured_peak}});
  }
  std::printf("Predicted vs measured, %zu training runs (ceilings: %s)\n\n", rows.size(), c.source.c_str());
  t.print();
  const auto ts = plan::summarize(te), ms = plan::summarize(me);
  std::printf("\nstep time: median |error| %.1f%%, worst %.1f%%\npeak memory: median |error| %.1f%%, worst %.1f%%\n",
              100 * ts.median, 100 * ts.worst, 100 * ms.median, 100 * ms.worst);
  if (!a.json_out.empty()) {
    std::ofstream f(a.json_out);
    f << nlohmann::json{{"runs", out}, {"ceilings", plan::to_json(c)},
                        {"step_time_error", {{"median", ts.median}, {"worst", ts.worst}}},
                        {"peak_memory_error", {{"median", ms.median}, {"worst", ms.worst}}}}.dump(2) << "\n";
    check(bool(f), fmt::format("cannot write {}", a.json_out));
  }
}

}  // namespace

void add_plan(CLI::App& app, const Command& self) {
  auto a = std::make_shared<PlanArgs>();
  auto* c = app.add_subcommand(self.name, self.summary);
  c->add_option("--model,-m", a->model, "preset or .json spec")->capture_default_str();
  c->add_option("--input", a->input, "image shape CxHxW")->capture_default_str();
  c->add_option("--classes", a->classes, "output classes")->capture_default_str();
  c->add_option("--batch-size,-b", a->batch, "images per step")->capture_default_str();
  c->add_option("--optimizer", a->optimizer, "sgd | adamw")->capture_default_str()->check(CLI::IsMember({"sgd", "adamw"}));
  c->add_option("--workers,-j", a->workers, "data-loader threads")->capture_default_str();
  c->add_option("--dataset-size", a->dataset, "training images per epoch")->capture_default_str();
  c->add_option("--epochs,-e", a->epochs, "epochs")->capture_default_str();
  c->add_flag("--layers", a->layers, "per-layer predicted times");
  c->add_option("--against", a->against, "run records to predict and compare with (runs/*.json)");
  c->add_option("--json", a->json_out, "with --against: write the comparison here");
  c->callback([a] {
    const plan::CpuCeilings ceilings = plan::host_ceilings(omp_get_max_threads());
    if (a->against.empty())
      plan_one(*a, ceilings);
    else
      against(*a, ceilings);
  });
}

}  // namespace dlperf::cli

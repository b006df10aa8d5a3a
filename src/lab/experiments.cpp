// The five lab experiments: which training runs each makes, and the row each run becomes.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "backend/cpu/ops.h"
#include "backend/cuda/runtime.h"
#include "bench/loader_bench.h"
#include "core/error.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "lab/lab.h"
#include "lab/runner.h"
#include "nn/graph.h"
#include "plan/step_time.h"
#include "report/table.h"
#include "train/trainer.h"

namespace dlperf::lab {

using nlohmann::json;

std::vector<json> Experiment::measured() const {
  std::vector<json> out;
  for (const auto& r : rows)
    if (r.value("status", "") == "measured") out.push_back(r);
  return out;
}

std::string cell_text(const json& v, int decimals) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (decimals == kOwnDigits) return fmt::format("{:.4g}", v.get<double>());
  return format_decimals(v.get<double>(), decimals);
}

std::vector<Column> columns_of(const std::string& experiment) {
  // Each table's columns; the report adds status and note. docs/lab.md lists the keys.
  static const std::map<std::string, std::vector<Column>> all = {
      {"device",
       {
        {"device", "device", kText}, {"workload", "workload", kText}, {"batch", "batch", 0},
        {"threads", "threads", 0}, {"epoch_s", "s/epoch", 2}, {"total_s", "total s", 2},
        {"images_per_s", "img/s", 0}, {"step_ms", "ms/step", 3}, {"mflops_per_step", "MFLOP/step", 2},
        {"kernels_per_step", "kernels/step", 0}, {"speedup_vs_cpu", "speed-up", 2}, {"test_acc", "test acc %", 2}}},
      {"batch",
       {
        {"batch", "batch", 0}, {"lr_rule", "lr rule", kText}, {"lr", "lr", kOwnDigits},
        {"epoch_s", "s/epoch", 2}, {"total_s", "total s", 2}, {"images_per_s", "img/s", 0},
        {"peak_mb", "peak MB", 1}, {"test_acc", "test acc %", 2}}},
      {"model",
       {
        {"model", "model", kText}, {"parameters_m", "params (M)", 3}, {"mflops_per_image", "MFLOP/img (train)", 2},
        {"epoch_s", "s/epoch", 2}, {"images_per_s", "img/s", 0}, {"peak_mb", "peak MB", 1},
        {"achieved_gflops", "GFLOP/s", 1}, {"test_acc", "test acc %", 2}}},
      {"workers",
       {
        {"workers", "workers", 0}, {"epoch_s", "s/epoch", 2}, {"images_per_s", "img/s", 0},
        {"loader_images_per_s", "loader alone img/s", 0}, {"data_wait_pct", "data wait %", 1}, {"idle_pct", "device idle %", 1}, {"test_acc", "test acc %", 2}}},
      {"precision",
       {
        {"precision", "precision", kText}, {"device", "device", kText}, {"epoch_s", "s/epoch", 2},
        {"images_per_s", "img/s", 0}, {"ceiling_gflops", "ceiling GFLOP/s", 1}, {"peak_mb", "peak MB", 1},
        {"test_acc", "test acc %", 2}, {"loss_scale_skips", "loss-scale skips", 0}}},
      {"plan",
       {
        {"run", "run", kText}, {"step_ms_planned", "step ms planned", 3}, {"step_ms", "step ms measured", 3},
        {"step_ratio", "planned / measured", 3}, {"peak_mb_planned", "peak MB planned", 2}, {"peak_mb", "peak MB measured", 2},
        {"peak_error_bytes", "peak error bytes", 0}, {"call_us", "call us", 2}}},
  };
  const auto it = all.find(experiment);
  return it == all.end() ? std::vector<Column>{} : it->second;
}

namespace {

bool gpu_available() { return cuda::built() && cuda::device_count() > 0; }

// Why there are no GPU rows: the build, or the machine.
std::string gpu_missing_reason() {
  if (::access("/dev/nvidia0", F_OK) != 0) return "no NVIDIA GPU on this machine (no /dev/nvidia0)";
  return cuda::why_no_device();
}

// "17 runs to train; dlperf plan expects about 2.1 min of training and testing": said before the
// runs, so a long lab's user knows what is coming.
std::string planned_sentence(const TimeEstimate& t) {
  if (t.runs == 0) return "nothing to train: every run is reused";
  std::string s = counted(t.runs, "run") + " to train";
  if (t.runs > t.unpredicted)
    s += fmt::format("; dlperf plan expects about {} of training and testing{}", format_seconds(t.seconds),
                     t.unpredicted > 0 ? fmt::format(" for {} of them", t.runs - t.unpredicted) : "");
  return s;
}

// A row for an outcome: the measurements, or why there are none, plus the row's own keys.
json row_of(const Runner::Outcome& o, json keys) {
  // A diverged run's status says so, and its note how ("the loss became NaN at epoch 1, step 4").
  json r = o.ok                  ? measured_row(o.record)
           : !o.diverged.empty() ? json{{"status", "diverged"}, {"note", o.diverged}}
                                 : json{{"status", "failed"}, {"note", o.error}};
  for (auto& [k, v] : keys.items()) r[k] = v;
  return r;
}

json missing_row(const std::string& why, json keys) {
  json r = {{"status", "missing"}, {"note", why}};
  for (auto& [k, v] : keys.items()) r[k] = v;
  return r;
}

Experiment device(Runner& run, const LabConfig& lab) {
  Experiment e{"device", "Device: CPU vs GPU",
               "How much faster does the same training run on a GPU, and when does the CPU win?", {}, {}, {}, {}};
  e.columns = columns_of("device");
  const std::string no_gpu = gpu_missing_reason();
  struct Workload {
    std::string model;
    int64_t batch;
    bool tiny;
  };
  std::vector<Workload> workloads = {{lab.base_model, lab.base_batch, false}};
  for (const std::string& m : lab.tiny_models) workloads.push_back({m, 16, true});
  for (const Workload& w : workloads) {
    train::TrainConfig c = run.base();
    c.device = "cpu";
    c.model = w.model;
    c.batch = w.batch;
    if (w.tiny) {
      c.lr = lab.tiny_lr;
      // Its steps take microseconds: one epoch of them lasts a few tens of milliseconds, too
      // short to time reliably on a shared machine, so it runs five times as long.
      c.epochs = 5 * run.base().epochs;
    }
    const auto& o = run.run("device", fmt::format("cpu, {} at batch {}", w.model, w.batch), c);
    // The threads it trained on: all of OpenMP's (the trainer's default) unless --threads said.
    const int threads = o.ok ? o.record["config"].value("threads_used", 0) : c.threads > 0 ? c.threads : omp_get_max_threads();
    json cpu = row_of(o, {{"device", "cpu"}, {"workload", w.model}, {"batch", w.batch}, {"threads", threads}});
    if (cpu["status"] == "measured") cpu["speedup_vs_cpu"] = 1.0;
    e.rows.push_back(cpu);
    // A tiny model's ops are too small to share between cores: each call into the engine pays
    // the threads' round trip (bench launch's figure, microseconds) for less work than that, and
    // one thread leaves the loader's worker a core of its own. Its smallest layers run on one
    // thread anyway (backend/cpu/small_layers.h), its larger ones (the mlp's fc1) on all. On one
    // thread the CPU trains it at its best, which is the CPU a GPU should be compared with.
    if (w.tiny && threads > 1) {
      train::TrainConfig one = c;
      one.threads = 1;
      json r = row_of(run.run("device", fmt::format("cpu, {} at batch {}, 1 thread", w.model, w.batch), one),
                      {{"device", "cpu"}, {"workload", w.model}, {"batch", w.batch}, {"threads", 1}});
      if (r["status"] == "measured" && cpu["status"] == "measured") r["speedup_vs_cpu"] = cpu["epoch_s"].get<double>() / r["epoch_s"].get<double>();
      e.rows.push_back(r);
    }
    if (!gpu_available()) {
      e.rows.push_back(missing_row(no_gpu, {{"device", "cuda"}, {"workload", w.model}, {"batch", w.batch}}));
      continue;
    }
    c.device = "cuda";
    json gpu = row_of(run.run("device", fmt::format("cuda, {} at batch {}", w.model, w.batch), c),
                      {{"device", "cuda"}, {"workload", w.model}, {"batch", w.batch}});
    if (gpu["status"] == "measured" && cpu["status"] == "measured") gpu["speedup_vs_cpu"] = cpu["epoch_s"].get<double>() / gpu["epoch_s"].get<double>();
    e.rows.push_back(gpu);
  }
  return e;
}

Experiment batch(Runner& run, const LabConfig& lab) {
  Experiment e{"batch", "Batch size",
               "How do time, throughput, memory and accuracy change with the batch size, with and without the "
               "linear learning-rate scaling rule?", {}, {}, {}, {}};
  e.columns = columns_of("batch");
  for (const std::string rule : {"fixed", "linear"})
    for (int64_t b : lab.batches) {
      train::TrainConfig c = run.base();
      c.batch = b;
      c.lr = rule == "fixed" ? lab.base_lr : lab.base_lr * double(b) / double(lab.base_batch);
      const auto& o = run.run("batch", fmt::format("batch {}, lr {:g} ({})", b, c.lr, rule), c);
      e.rows.push_back(row_of(o, {{"batch", b}, {"lr_rule", rule}, {"lr", c.lr}}));
    }
  return e;
}

Experiment model(Runner& run, const LabConfig& lab) {
  Experiment e{"model", "Model size",
               "How do time, memory and achieved FLOP/s grow with the model?", {}, {}, {}, {}};
  e.columns = columns_of("model");
  for (const std::string& m : lab.models) {
    train::TrainConfig c = run.base();
    c.model = m;
    e.rows.push_back(row_of(run.run("model", m, c), {{"model", m}}));
  }
  return e;
}

Experiment workers(Runner& run, const LabConfig& lab) {
  Experiment e{"workers", "Data-loader workers",
               "How much does loading data in parallel help, and how long does the step wait for data?", {}, {}, {}, {}};
  e.columns = columns_of("workers");
  const std::vector<int> counts = data::worker_counts(hw::cpu_info().cores, lab.max_workers);
  for (int w : counts) {
    train::TrainConfig c = run.base();
    c.workers = w;
    e.rows.push_back(row_of(run.run("workers", counted(w, "worker"), c), {{"workers", w}}));
  }
  // The loader alone on the same images (bench loader's measurement, a second or two): the rate
  // no run of a row can beat, so the rows' images/s read against what loading allows.
  if (!run.planning()) {
    try {
      const train::TrainConfig& b = run.base();
      data::DataPair d = data::load_data(b.data);
      d.train.truncate(b.train_limit);
      bench::Options o;
      o.quick = true;
      const auto points = bench::loader_sweep(d.train, b.batch, counts, o, {b.augment});
      for (size_t i = 0; i < points.size() && i < e.rows.size(); ++i) e.rows[i]["loader_images_per_s"] = points[i].best_round_images_per_s;
    } catch (const Error& err) {  // the rows stand without it; the first row's note says why
      json& r = e.rows.front();
      const std::string note = r.value("note", "");
      r["note"] = note + (note.empty() ? "" : "; ") + "loader alone not measured: " + err.what();
    }
  }
  return e;
}

Experiment precision(Runner& run, const LabConfig&) {
  Experiment e{"precision", "Precision",
               "What do lower-precision formats buy in time and memory, and what do they cost in accuracy?", {}, {}, {}, {}};
  e.columns = columns_of("precision");
  const std::string device = cuda::resolve_device(run.base().device) >= 0 ? "cuda" : "cpu";
  for (const std::string p : {"fp32", "tf32", "bf16", "fp16"}) {
    const std::string refusal = device == "cpu" ? train::cpu_precision_refusal(p) : "";
    if (!refusal.empty()) {
      e.rows.push_back(missing_row(refusal, {{"precision", p}, {"device", device}}));
      continue;
    }
    train::TrainConfig c = run.base();
    c.precision = p;
    const Runner::Outcome o = run.run("precision", p, c);
    json row = row_of(o, {{"precision", p}, {"device", device}});
    // On a CPU, the compute ceiling of the precision, measured (plan::host_ceilings: the fp32
    // FMA peak, or the bf16 dot-product peak), for the threads the run trained on: it says whether
    // bf16 has more arithmetic to offer on this CPU at all (an Intel Xeon VM's bf16 peak was half
    // its fp32's, a Zen 4's twice).
    if (o.ok && device == "cpu") {
      const json threads = o.record["config"].value("threads_used", json());
      const plan::CpuCeilings c = plan::host_ceilings(threads.is_number_integer() && threads.get<int>() > 0 ? threads.get<int>() : omp_get_max_threads(), p);
      // (a machine profile from before bench kept the bf16 peak has none: the plan's twice fp32 is no measurement)
      if (p != "bf16" || c.bf16_measured_gflops > 0) row["ceiling_gflops"] = c.peak_gflops;
      // A bf16 run whose convolutions or linear layers ran on AMX tiles: their peak is the ceiling.
      if (p == "bf16" && c.amx_gflops > 0 && !row.value("amx_layers", json::array()).empty()) row["ceiling_gflops"] = c.amx_gflops;
    }
    e.rows.push_back(row);
  }
  return e;
}

// The "Performance Comparison" table on the console, the observations under it.
void print_experiment(const Experiment& e) {
  std::vector<std::string> header;
  for (const auto& c : e.columns) header.push_back(c.header);
  header.push_back("note");
  report::Table t(header);
  for (const auto& r : e.rows) {
    std::vector<std::string> cells;
    for (const auto& c : e.columns) {
      cells.push_back(cell_text(r.value(c.key, json()), c.decimals));
    }
    cells.push_back(row_note(r));
    t.add(cells);
  }
  std::printf("\nPerformance Comparison: %s\n", e.title.c_str());
  t.print();
  for (const auto& o : e.observations) std::printf("  * %s\n", o.c_str());
  std::fflush(stdout);
}

// The report's GPU line: the GPU the lab's GPU rows ran on, or why there are none.
json gpu_json() {
  if (!gpu_available()) return {{"present", false}, {"reason", gpu_missing_reason()}};
  json g = cuda::gpus_json().at(cuda::resolve_device("auto"));
  g["present"] = true;
  return g;
}

}  // namespace

std::vector<Experiment> run_lab(const LabConfig& asked) {
  LabConfig cfg = asked;
  if (!cfg.full) cfg.full = gpu_available();
  for (const auto& name : cfg.experiments)
    check(std::find(experiment_names().begin(), experiment_names().end(), name) != experiment_names().end(),
          fmt::format("there is no lab experiment '{}'", name), "choose from device, batch, model, workers, precision");
  check(!cfg.models.empty() && !cfg.batches.empty(), "the lab needs at least one model and one batch size");
  const auto check_batch = [](const char* flag, int64_t batch) {
    check(batch >= 1 && batch <= train::kMaxBatch,
          fmt::format("{}: {} is not a batch size between 1 and {}", flag, batch, train::kMaxBatch));
  };
  for (const int64_t batch : cfg.batches) check_batch("--batches", batch);
  check_batch("--batch-size", cfg.base_batch);
  // A value twice would compare a run with itself ("batch 64 trains about as fast as batch 64").
  auto check_once = [](const char* flag, const char* what, const auto& values) {
    for (size_t i = 0; i < values.size(); ++i)
      check(std::find(values.begin(), values.begin() + i, values[i]) == values.begin() + i,
            fmt::format("{} lists {} twice", flag, values[i]), fmt::format("name each {} once", what));
  };
  check_once("--batches", "batch size", cfg.batches);
  check_once("--models", "model", cfg.models);
  // Every model now, not at its row minutes later (load_model names the presets if one is wrong).
  for (const auto& m : cfg.models) (void)nn::load_model(m);
  (void)nn::load_model(cfg.base_model);
  // The report replaces an earlier lab's README.md, never another one (a user's --out . in a
  // project would otherwise lose the project's README).
  const std::filesystem::path readme = std::filesystem::path(cfg.out) / "README.md";
  if (std::filesystem::exists(readme)) {
    std::string first;
    std::getline(std::ifstream(readme), first);
    check(first == kReportTitle,
          fmt::format("{} holds a README.md that is not a dlperf lab report, and the lab's report would replace it", cfg.out),
          "pick another --out folder (the default is reports/lab)");
  }
  // The report folder now, not after every run has failed to write its record into it.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(cfg.out) / "runs", ec);
  check(!ec, fmt::format("cannot create the report folder {}: {}", cfg.out, ec.message()), "pick a writable --out directory");
  const bool quick = !*cfg.full;
  const double t0 = now_s();
  const StopOnSignal stop_on_signal;  // Ctrl-C ends the lab after the run it stops, keeping the finished ones
  Runner runner(cfg, quick);
  runner.warm_up();
  const auto& b = runner.base();
  if (!cfg.quiet)
    std::printf("dlperf lab (%s): %s, %lld epoch%s per run, %s training images%s; report in %s\n\n",
                quick ? "quick" : "full", cfg.data.c_str(), (long long)b.epochs, b.epochs == 1 ? "" : "s",
                b.train_limit > 0 ? fmt::format("up to the first {}", b.train_limit).c_str() : "all",
                quick ? " (--full runs the real thing)" : asked.full ? "" : " (the default with a GPU; --quick takes minutes)",
                cfg.out.c_str());
  if (cfg.resume) {
    const size_t n = runner.load_earlier_runs();
    if (!cfg.quiet) {
      std::printf("resuming: %zu finished run%s of this machine and this build of dlperf in %s/runs can be reused\n", n,
                  n == 1 ? "" : "s", cfg.out.c_str());
      for (const std::string& d : runner.damaged()) std::printf("note: not reusing the damaged run record %s: its run trains again\n", d.c_str());
      std::printf("\n");
    }
  } else if (const size_t n = runner.records_in_runs_dir(); n > 0 && !cfg.quiet) {
    std::printf("note: %s/runs already holds %zu run record%s; this lab adds its own beside them (--resume reuses "
                "the finished runs of an interrupted lab)\n\n", cfg.out.c_str(), n, n == 1 ? "" : "s");
  }
  using Fn = Experiment (*)(Runner&, const LabConfig&);
  const std::pair<const char*, Fn> all[] = {
      {"device", device}, {"batch", batch}, {"model", model}, {"workers", workers}, {"precision", precision}};
  const auto chosen = [&](const char* name) {
    return cfg.experiments.empty() || std::find(cfg.experiments.begin(), cfg.experiments.end(), name) != cfg.experiments.end();
  };
  // The runs to come, and how long the planner expects them to take (said, and checked at the end).
  runner.set_planning(true);
  runner.measure_noise();
  for (const auto& [name, fn] : all)
    if (chosen(name)) (void)fn(runner, cfg);
  runner.measure_drift();
  runner.set_planning(false);
  const TimeEstimate planned = estimate_time(runner.planned(), data::load_data(b.data));
  runner.set_predictions(planned.per_run);
  if (!cfg.quiet) std::printf("%s\n\n", planned_sentence(planned).c_str());
  runner.measure_noise();
  std::vector<Experiment> ran;
  for (const auto& [name, fn] : all)
    if (chosen(name)) ran.push_back(fn(runner, cfg));
  runner.measure_drift();
  const Noise noise = runner.noise();
  std::vector<Experiment> exps;
  auto finish = [&](Experiment e) {
    for (auto& r : e.rows)  // every row has every column (null = not measured)
      for (const auto& c : e.columns)
        if (!r.contains(c.key)) r[c.key] = nullptr;
    e.noise_pct = noise.pct;
    e.observations = observe(e);
    exps.push_back(std::move(e));
  };
  for (Experiment& e : ran) finish(std::move(e));
  // Last, the planner against this lab's runs: how far its predictions can be trusted here.
  if (const std::vector<std::string> records = runner.record_paths(); !records.empty()) finish(prediction(records));
  json machine = hw::machine_json();
  machine["gpu"] = gpu_json();
  // Which code max-pooled AVX-512's blocks in these runs, where one did: timed, so said.
  if (const cpu::MaxPool16cChoice* c = cpu::max_pool_16c_choice_if_made()) machine["cpu_max_pool_nChw16c"] = c->why;
  // And whether its 3x3 convolutions could run as Winograd: also timed.
  if (const cpu::WinogradChoice* c = cpu::winograd_choice_if_made()) machine["cpu_winograd"] = c->why;
  const double seconds = now_s() - t0;
  try {
    write_report(exps, cfg, machine, {seconds, noise, runner.reused(), planned, runner.plan_check(), "", true});
  } catch (const Error& e) {  // a full disk at the end of hours of runs: they are kept, and say how to get the report
    const size_t n = runner.record_paths().size();
    throw Error(e.what(), fmt::format("free some space, then run the same dlperf lab command with --resume: it reuses the {} finished "
                                      "run{} kept in {}/runs and writes the report",
                                      n, n == 1 ? "" : "s", cfg.out));
  }
  if (!cfg.quiet) {
    for (const auto& e : exps) print_experiment(e);
    if (noise.runs > 0)
      std::printf("\nRun-to-run noise: %s.\n", noise_sentence(noise).c_str());
    if (const std::string s = shared_cpus_sentence(exps); !s.empty()) std::printf("Other work on the CPUs: %s.\n", s.c_str());
    std::printf("\nlab done in %s; report: %s/README.md (CSV, JSON and plots beside it)\n", format_seconds(seconds).c_str(),
                cfg.out.c_str());
    if (const std::string p = planned_against_measured(runner.plan_check()); !p.empty()) std::printf("the lab's %s\n", p.c_str());
  }
  // A lab whose every run failed has measured nothing: the report says why row by row, and the
  // exit status says so too.
  const bool any = std::any_of(exps.begin(), exps.end(), [](const Experiment& e) { return e.name != "plan" && !e.measured().empty(); });
  check(any || exps.empty(), "no run of the lab trained", fmt::format("each row of {}/README.md says why", cfg.out));
  return exps;
}

}  // namespace dlperf::lab

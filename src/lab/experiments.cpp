// The five lab experiments: which training runs each makes, and the row each run becomes.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "backend/cpu/ops.h"
#include "backend/cuda/runtime.h"
#include "bench/loader_bench.h"
#include "bench/ops_bench.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/json_error.h"
#include "core/text.h"
#include "core/timer.h"
#include "core/version.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"
#include "lab/lab.h"
#include "nn/graph.h"
#include "plan/against.h"
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

namespace {
// What must match for a measurement to stand for this machine: the host, its CPU and its GPUs.
json machine_identity(const json& m) {
  json gpus = json::array();
  for (const auto& g : m.value("gpus", json::array())) gpus.push_back(g.value("name", ""));
  const json cpu = m.value("cpu", json::object());
  return {{"hostname", m.value("hostname", "")}, {"cpu", hw::cpu_identity(cpu)}, {"cores", cpu.value("cores", 0)},
          {"gpus", gpus}};
}

// The run records in a lab's runs/ folder (none when it does not exist yet).
std::vector<std::filesystem::path> record_files(const std::string& dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec))
    if (f.path().extension() == ".json") out.push_back(f.path());
  return out;
}
}  // namespace

std::string run_key_of_config(json config) {
  // The device a run used, not the flag: "auto" on a machine without a GPU ran on the CPU.
  const std::string used = config.value("device_used", "");
  if (!used.empty()) config["device"] = used;
  else if (config.value("device", "") == "auto") config["device"] = "cpu";
  config.erase("device_used");
  config.erase("threads_used");
  return config.dump();
}

std::string resumable_run_key(const json& record, const json& machine) {
  if (!record.is_object() || record.value("command", "") != "train" || !record.contains("summary") ||
      !record.contains("config") || record.contains("profile") || record.contains("stopped"))
    return "";
  // Another build measured it: its numbers may not be this code's.
  if (record.value("dlperf_version", "") != dlperf_version() || record.value("dlperf_commit", "") != dlperf_commit()) return "";
  if (machine_identity(record.value("machine", json::object())) != machine_identity(machine)) return "";
  return run_key_of_config(record["config"]);
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

json measured_row(const json& rec);  // below: a finished run's row, which --resume reads each earlier record as

// Runs training configurations, once each: experiments share runs with identical settings (the
// base run is the batch-64 row, the fp32 row and a workers row), so the lab does not repeat them.
class Runner {
 public:
  Runner(const LabConfig& lab, bool quick) : lab_(lab), start_(now_s()) {
    base_.model = lab.base_model;
    base_.data = lab.data;
    base_.epochs = lab.epochs > 0 ? lab.epochs : quick ? 1 : 5;
    base_.batch = lab.base_batch;
    base_.lr = lab.base_lr;
    base_.seed = lab.seed;
    base_.train_limit = lab.train_limit >= 0 ? lab.train_limit : quick ? 20000 : 0;
    base_.test_limit = lab.test_limit >= 0 ? lab.test_limit : quick ? 5000 : 0;
    base_.runs_dir = lab.out + "/runs";
    base_.quiet = true;
    base_.progress = lab.progress && !lab.quiet;
  }

  /// A few steps of the base model before anything is timed, so the first measured run does
  /// not pay the process's one-off costs (page faults, thread start-up, kernel generation). It
  /// also checks the lab's settings: where the base run cannot train (no such data, too few
  /// images for its batch), no experiment can, so the lab stops here with the reason.
  void warm_up() {
    train::TrainConfig c = base_;
    if (c.train_limit == 0 || c.train_limit > 4 * c.batch) c.train_limit = 4 * c.batch;
    if (c.test_limit == 0 || c.test_limit > 4 * c.batch) c.test_limit = 4 * c.batch;
    c.epochs = 1;
    c.runs_dir.clear();
    c.progress = false;
    try {
      train::train(c);
    } catch (const Interrupted& e) {
      throw stopped(e, "its warm-up run");
    } catch (const Error& e) {
      throw Error(fmt::format("the lab's base run ({} at batch {} on {}) cannot train: {}", c.model, c.batch, c.data, e.what()),
                  e.hint());
    }
  }
  const train::TrainConfig& base() const { return base_; }

  struct Outcome {
    bool ok = false;
    std::string error;  ///< when !ok: the trainer's message (divergence, out of memory, ...)
    json record;
    std::string diverged;  ///< when the loss stopped being finite: how ("the loss became NaN at ...")
  };

  /// Runs the base configuration twice: the first becomes the shared base run, the second
  /// measures how much identical runs differ on this machine (noise()).
  void measure_noise() {
    base_images_per_s_.clear();
    base_shared_ = 0;
    call_us_ = {engine_call_us(), 0};
    const Outcome& a = run("base", base_label(), base_);
    const Outcome b = execute("base", base_label() + " again (run-to-run noise)", noise_twin());
    if (a.ok && b.ok) {
      base_images_per_s_ = {a.record["summary"]["images_per_s"], b.record["summary"]["images_per_s"]};
      base_shared_ = shared_cpus(a.record) + shared_cpus(b.record);
    }
  }
  /// After the experiments: the base configuration once more, so noise() also covers how far
  /// the machine's speed drifted over the lab.
  void measure_drift() {
    const Outcome c = execute("base", base_label() + " at the end (drift over the lab)", noise_twin());
    if (c.ok && base_images_per_s_.size() == 2) {
      base_images_per_s_.push_back(c.record["summary"]["images_per_s"]);
      base_shared_ += shared_cpus(c.record);
    }
    call_us_[1] = engine_call_us();
  }
  Noise noise() const {
    Noise n = noise_of(base_images_per_s_);
    if (n.runs > 0) n.shared_runs = base_shared_;
    n.call_start_us = call_us_[0], n.call_end_us = call_us_[1];
    return n;
  }

  /// One run per configuration: a configuration that an earlier experiment ran (the base run,
  /// say) is reused, so the report shows one measurement of it, not two that differ by noise.
  /// With --resume, so is a finished run of an earlier lab that was interrupted.
  const Outcome& run(const std::string& experiment, const std::string& label, const train::TrainConfig& c) {
    const std::string key = run_key(c);
    if (planning_) {  // listed once, unless --resume has it
      if (planned_keys_.insert(key).second && earlier_.count(key) == 0) planned_.push_back(c);
      return not_run_;
    }
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    order_.push_back(key);
    if (auto it = earlier_.find(key); it != earlier_.end()) return cache_.emplace(key, reuse(experiment, label, it->second)).first->second;
    return cache_.emplace(key, execute(experiment, label, c)).first->second;
  }

  /// --resume: indexes the run records in the report's runs/ folder that this machine and this
  /// build of dlperf measured, by configuration. Returns how many there are.
  size_t load_earlier_runs() {
    const json machine = hw::machine_json();
    for (const auto& path : record_files(base_.runs_dir)) {
      std::ifstream in(path);
      json rec = json::parse(in, nullptr, /*allow_exceptions=*/false);
      std::string key;
      try {  // a record with a field of the wrong type (damaged, hand-edited) is not reused: its run trains again
        key = resumable_run_key(rec, machine);
        if (!key.empty()) measured_row(rec);  // read as its row will be
      } catch (const json::exception& e) {
        damaged_.push_back(fmt::format("{} ({})", path.filename().string(), json_error_text(e)));
        continue;
      }
      if (key.empty()) continue;
      rec["record_path"] = path.string();
      earlier_.emplace(key, std::move(rec));  // of two records of one configuration, either will do
    }
    return earlier_.size();
  }

  /// The record files of this lab's runs (measured or reused), in the order they first ran.
  std::vector<std::string> record_paths() const {
    std::vector<std::string> out;
    for (const std::string& key : order_)  // a run in progress has a key in order_, and no outcome yet
      if (auto it = cache_.find(key); it != cache_.end() && it->second.ok && it->second.record.contains("record_path"))
        out.push_back(it->second.record["record_path"]);
    return out;
  }

  /// Planning: run() and the noise runs only list the configurations they would train (each
  /// once, and not those --resume reuses), so the lab can say up front how many runs it has and
  /// how long the planner expects them to take; then the runs are numbered "3/17".
  void set_planning(bool on) { planning_ = on; }
  bool planning() const { return planning_; }
  const std::vector<train::TrainConfig>& planned() const { return planned_; }

  /// Run records an earlier lab left in the report's runs/ folder (a fresh lab adds its own).
  size_t records_in_runs_dir() const { return record_files(base_.runs_dir).size(); }
  size_t reused() const { return reused_; }
  /// The run records --resume found damaged, with why: "x.json (type must be string, but is number)".
  const std::vector<std::string>& damaged() const { return damaged_; }
  /// The planner's seconds for each planned run (estimate_time's per_run), to be set against
  /// the runs' measured time as they finish.
  void set_predictions(const std::vector<double>& seconds) {
    check_.of = int(planned_.size());
    planned_seconds_ = seconds;
  }
  const PlanCheck& plan_check() const { return check_; }

 private:
  // The configuration as it runs: --device auto and the device it resolves to ("cpu" on a
  // machine without a GPU, "cuda:0" with one) are the same run.
  static std::string run_key(train::TrainConfig c) {
    try {
      const int gpu = cuda::resolve_device(c.device);
      c.device = gpu >= 0 ? fmt::format("cuda:{}", gpu) : "cpu";
    } catch (const Error&) {
      // Kept as given: running it reports the problem.
    }
    return run_key_of_config(train::to_json(c));
  }

  Outcome reuse(const std::string& experiment, const std::string& label, const json& record) {
    ++reused_;
    if (!lab_.quiet)  // in the column of the trained runs' "3/17, "
      std::printf("  [%s%6.1f s] %-9s %s ... reused %s\n", std::string(count(0).size(), ' ').c_str(), now_s() - start_,
                  experiment.c_str(), label.c_str(), record["record_path"].get<std::string>().c_str());
    return {true, "", record, ""};
  }

  Outcome execute(const std::string& experiment, const std::string& label, const train::TrainConfig& c) {
    if (planning_) {
      planned_.push_back(c);
      return not_run_;
    }
    const std::string line = fmt::format("  [{}{:6.1f} s] {:<9} {} ... ", count(runs_ + 1), now_s() - start_, experiment, label);
    if (!lab_.quiet) {
      std::printf("%s", line.c_str());
      std::fflush(stdout);
    }
    // The run's progress bar draws over this line on a terminal (it starts with a carriage
    // return), so the line is written again before its result.
    const bool redraw = c.progress && isatty(STDERR_FILENO) && isatty(STDOUT_FILENO);
    Outcome o;
    try {
      train::TrainConfig run = c;
      if (++runs_ == lab_.sigint_in_run) run.sigint_at_step = 1;
      train::TrainResult r = train::train(run);
      o.record = std::move(r.record);
      o.record["record_path"] = r.record_path;
      o.ok = o.record.contains("summary");
      if (const double planned_s = planned_seconds_for(c); o.ok && planned_s >= 0) {
        ++check_.runs;
        check_.planned_s += planned_s;
        for (const auto& e : o.record["epochs"]) check_.measured_s += e.value("train_s", 0.0) + e.value("eval_s", 0.0);
      }
    } catch (const Interrupted& e) {
      if (!lab_.quiet) std::printf("%sstopped\n", redraw ? ("\r" + line).c_str() : "");
      throw stopped(e, "its run of " + label);
    } catch (const train::Diverged& e) {
      o.error = e.what();
      o.diverged = e.how();
    } catch (const Error& e) {
      o.error = e.what();
    }
    if (!lab_.quiet) {
      if (redraw) std::printf("\r%s", line.c_str());
      if (o.ok)
        std::printf("%s, %.0f img/s, test acc %.2f%%%s\n", format_seconds(o.record["summary"]["train_s"].get<double>()).c_str(),
                    o.record["summary"]["images_per_s"].get<double>(), 100 * o.record["summary"]["final_test_acc"].get<double>(),
                    time_left().c_str());
      else
        std::printf("failed: %s%s\n", o.error.c_str(), time_left().c_str());
      std::fflush(stdout);
    }
    return o;
  }

  /// A signal stopped the run `during`: the lab ends there, keeping its finished runs' records.
  Interrupted stopped(const Interrupted& e, const std::string& during) const {
    const size_t n = record_paths().size();
    if (n == 0)
      return Interrupted(e.signal(), fmt::format("the lab was stopped by {} during {}, before any run had finished", signal_name(e.signal()), during),
                         "run the same dlperf lab command again to start over");
    return Interrupted(e.signal(),
                       fmt::format("the lab was stopped by {} during {}; {} run{} had finished, {} kept in {}", signal_name(e.signal()),
                                   during, n, n == 1 ? "" : "s", n == 1 ? "its record is" : "their records are", base_.runs_dir),
                       "go on where it stopped: the same dlperf lab command with --resume reuses the finished runs");
  }

  std::string base_label() const { return fmt::format("{} at batch {}", base_.model, base_.batch); }
  train::TrainConfig noise_twin() const {
    train::TrainConfig c = base_;
    c.runs_dir.clear();  // not a row of any experiment
    return c;
  }

  const LabConfig& lab_;
  train::TrainConfig base_;
  std::vector<double> base_images_per_s_;  ///< the base runs' images/s: start, start again, end
  double start_;
  std::map<std::string, Outcome> cache_;
  std::vector<std::string> order_;  ///< cache_'s keys in the order the runs came
  std::map<std::string, json> earlier_;  ///< --resume: finished runs of an earlier lab, by configuration
  size_t reused_ = 0;
  std::vector<std::string> damaged_;
  int runs_ = 0;  ///< training runs started (warm-up excluded)
  bool planning_ = false;
  PlanCheck check_;
  std::vector<double> planned_seconds_;  ///< the planner's seconds for each of planned_, in order
  // The planner's seconds for configuration `c` (planned_seconds_ follows planned_), or < 0.
  double planned_seconds_for(const train::TrainConfig& c) const {
    const std::string key = run_key(c);
    for (size_t i = 0; i < planned_.size() && i < planned_seconds_.size(); ++i)
      if (run_key(planned_[i]) == key) return planned_seconds_[i];
    return -1;
  }
  // "; about 9.2 min left": the planned time of the runs still to come (the real pass trains them
  // in the planning pass's order), scaled by how the finished ones compared with their plan.
  // Nothing when a run to come cannot be predicted, or none is left.
  std::string time_left() const {
    if (planned_seconds_.size() != planned_.size() || size_t(runs_) >= planned_seconds_.size()) return "";
    double left = 0;
    for (size_t i = size_t(runs_); i < planned_seconds_.size(); ++i) {
      if (planned_seconds_[i] < 0) return "";
      left += planned_seconds_[i];
    }
    if (check_.runs > 0 && check_.planned_s > 0) left *= check_.measured_s / check_.planned_s;
    return fmt::format("; about {} left", format_seconds(left));
  }
  // "3/17, ": the run's place among those planned, its number as wide as their count.
  std::string count(int run) const {
    if (planned_.empty()) return "";
    const std::string total = std::to_string(planned_.size());
    return fmt::format("{:>{}}/{}, ", run, total.size(), total);
  }
  // Whether a run shared the CPUs with other work (its record's host_load): 1 or 0.
  static int shared_cpus(const json& record) {
    return hw::host_load_from_json(record.value("summary", json::object()).value("host_load", json())).busy() ? 1 : 0;
  }
  int base_shared_ = 0;  ///< of the noise runs
  // A call into the engine (bench::cpu_dispatch, a few ms): the threads' round trip between cores,
  // which moves when a VM places its vCPUs elsewhere, and every step with it. Not while planning.
  double engine_call_us() const { return planning_ ? 0 : bench::cpu_call_now_us(base_.threads); }
  std::array<double, 2> call_us_{};  ///< at the start of the lab and at its end
  std::set<std::string> planned_keys_;
  std::vector<train::TrainConfig> planned_;
  const Outcome not_run_{false, "planned, not run", {}, ""};
};

// The measurements every experiment reports, from a run record.
json measured_row(const json& rec) {
  const json& s = rec.at("summary");
  double train_s = 0, eval_s = 0, compute_s = 0;
  for (const auto& e : rec.at("epochs")) {
    train_s += e.at("train_s").get<double>();
    eval_s += e.at("eval_s").get<double>();
    compute_s += e.at("compute_s").get<double>();
  }
  const double epochs = double(rec.at("epochs").size());
  const double batch = rec.at("config").at("batch_size");
  const double steps = std::floor(rec.at("data").at("train_images").get<double>() / batch) * epochs;
  const json& m = rec.at("model");
  // Other work on the CPUs while it trained (hw::HostLoad): a row that shared them reads slow.
  const hw::HostLoad load = hw::host_load_from_json(s.value("host_load", json()));
  const std::string busy = hw::busy_note(load);
  const double flops_per_image = m.at("forward_flops_per_image").get<double>() + m.at("backward_flops_per_image").get<double>();
  const double call_us = plan::recorded_call_us(s);
  return {{"status", "measured"},
          {"note", busy.empty() ? "" : "CPUs shared: " + busy},
          {"host_busy_pct", load.known ? json(100 * (load.others_share + load.steal_share)) : json()},
          {"host_shared", load.busy()},  // the verdict, by hw::HostLoad's rule (a second or more, 10% or more)
          {"epoch_s", (train_s + eval_s) / epochs},
          {"total_s", train_s + eval_s},
          {"train_s", train_s},
          {"images_per_s", s.at("images_per_s").get<double>()},
          {"step_ms", 1e3 * train_s / std::max(steps, 1.0)},
          {"mflops_per_step", flops_per_image * batch / 1e6},
          // The kernels of the GPU's captured step (none counted on the CPU, or on eager GPU steps).
          {"kernels_per_step", rec.value(json::json_pointer("/gpu_step/graph_nodes/kernels"), json())},
          {"peak_mb", s.at("peak_bytes").get<double>() / 1e6},
          {"test_acc", 100 * s.at("final_test_acc").get<double>()},
          {"loss_scale_skips", s.contains("loss_scale_skips") ? s.at("loss_scale_skips") : json()},
          {"data_wait_pct", 100 * s.at("data_wait_share").get<double>()},
          {"idle_pct", 100 * (1 - compute_s / train_s)},
          {"parameters_m", m.at("parameters").get<double>() / 1e6},
          {"mflops_per_image", flops_per_image / 1e6},
          {"achieved_gflops", flops_per_image * s.at("images_per_s").get<double>() / 1e9},
          // The convolutions that ran as Winograd, whose multiplies the FLOPs above overcount.
          {"winograd_layers", rec.value(json::json_pointer("/cpu_step/winograd_layers"), json::array())},
          {"epochs", rec.at("epochs").size()},
          {"train_images", rec.at("data").at("train_images").get<int64_t>()},
          {"test_images", rec.at("data").at("test_images").get<int64_t>()},
          {"classes", rec.at("data").at("classes").get<int64_t>()},
          {"workers", rec.at("config").value("workers", json())},  // the loader's threads (device's observations read it)
          {"call_us", call_us > 0 ? json(call_us) : json()},  // null where its record measured none
          {"record", rec.value("record_path", "")}};
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
    // one thread leaves the loader's worker a core of its own. On one thread the CPU trains it at
    // its best, which is the CPU a GPU should be compared with.
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

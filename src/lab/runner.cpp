// The lab's runs (runner.h): each configuration trained once, reused with --resume, planned
// before anything trains, and the base run repeated to measure the machine's noise.
#include "lab/runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "backend/cuda/runtime.h"
#include "bench/ops_bench.h"
#include "core/error.h"
#include "core/json_error.h"
#include "core/text.h"
#include "core/timer.h"
#include "core/version.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"
#include "plan/against.h"

namespace dlperf::lab {

using nlohmann::json;

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
  if (!record.is_object() || record.value("command", json()) != "train" || !record.contains("summary") ||
      !record.contains("config") || record.contains("profile") || record.contains("stopped"))
    return "";
  // Another build measured it: its numbers may not be this code's.
  if (record.value("dlperf_version", "") != dlperf_version() || record.value("dlperf_commit", "") != dlperf_commit()) return "";
  if (machine_identity(record.value("machine", json::object())) != machine_identity(machine)) return "";
  return run_key_of_config(record["config"]);
}

Runner::Runner(const LabConfig& lab, bool quick) : lab_(lab), start_(now_s()) {
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

void Runner::warm_up() {
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

void Runner::measure_noise() {
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

void Runner::measure_drift() {
  const Outcome c = execute("base", base_label() + " at the end (drift over the lab)", noise_twin());
  if (c.ok && base_images_per_s_.size() == 2) {
    base_images_per_s_.push_back(c.record["summary"]["images_per_s"]);
    base_shared_ += shared_cpus(c.record);
  }
  call_us_[1] = engine_call_us();
}

Noise Runner::noise() const {
  Noise n = noise_of(base_images_per_s_);
  if (n.runs > 0) n.shared_runs = base_shared_;
  n.call_start_us = call_us_[0], n.call_end_us = call_us_[1];
  return n;
}

const Runner::Outcome& Runner::run(const std::string& experiment, const std::string& label, const train::TrainConfig& c) {
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

size_t Runner::load_earlier_runs() {
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

std::vector<std::string> Runner::record_paths() const {
  std::vector<std::string> out;
  for (const std::string& key : order_)  // a run in progress has a key in order_, and no outcome yet
    if (auto it = cache_.find(key); it != cache_.end() && it->second.ok && it->second.record.contains("record_path"))
      out.push_back(it->second.record["record_path"]);
  return out;
}

size_t Runner::records_in_runs_dir() const { return record_files(base_.runs_dir).size(); }

void Runner::set_predictions(const std::vector<double>& seconds) {
  check_.of = int(planned_.size());
  planned_seconds_ = seconds;
}

std::string Runner::run_key(train::TrainConfig c) {
  try {
    const int gpu = cuda::resolve_device(c.device);
    c.device = gpu >= 0 ? fmt::format("cuda:{}", gpu) : "cpu";
  } catch (const Error&) {
    // Kept as given: running it reports the problem.
  }
  return run_key_of_config(train::to_json(c));
}

Runner::Outcome Runner::reuse(const std::string& experiment, const std::string& label, const json& record) {
  ++reused_;
  if (!lab_.quiet)  // in the column of the trained runs' "3/17, "
    std::printf("  [%s%6.1f s] %-9s %s ... reused %s\n", std::string(count(0).size(), ' ').c_str(), now_s() - start_,
                experiment.c_str(), label.c_str(), record["record_path"].get<std::string>().c_str());
  return {true, "", record, ""};
}

Runner::Outcome Runner::execute(const std::string& experiment, const std::string& label, const train::TrainConfig& c) {
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

Interrupted Runner::stopped(const Interrupted& e, const std::string& during) const {
  const size_t n = record_paths().size();
  if (n == 0)
    return Interrupted(e.signal(), fmt::format("the lab was stopped by {} during {}, before any run had finished", signal_name(e.signal()), during),
                       "run the same dlperf lab command again to start over");
  return Interrupted(e.signal(),
                     fmt::format("the lab was stopped by {} during {}; {} run{} had finished, {} kept in {}", signal_name(e.signal()),
                                 during, n, n == 1 ? "" : "s", n == 1 ? "its record is" : "their records are", base_.runs_dir),
                     "go on where it stopped: the same dlperf lab command with --resume reuses the finished runs");
}

std::string Runner::base_label() const { return fmt::format("{} at batch {}", base_.model, base_.batch); }

train::TrainConfig Runner::noise_twin() const {
  train::TrainConfig c = base_;
  c.runs_dir.clear();  // not a row of any experiment
  return c;
}

double Runner::planned_seconds_for(const train::TrainConfig& c) const {
  const std::string key = run_key(c);
  for (size_t i = 0; i < planned_.size() && i < planned_seconds_.size(); ++i)
    if (run_key(planned_[i]) == key) return planned_seconds_[i];
  return -1;
}

std::string Runner::time_left() const {
  if (planned_seconds_.size() != planned_.size() || size_t(runs_) >= planned_seconds_.size()) return "";
  double left = 0;
  for (size_t i = size_t(runs_); i < planned_seconds_.size(); ++i) {
    if (planned_seconds_[i] < 0) return "";
    left += planned_seconds_[i];
  }
  if (check_.runs > 0 && check_.planned_s > 0) left *= check_.measured_s / check_.planned_s;
  return fmt::format("; about {} left", format_seconds(left));
}

std::string Runner::count(int run) const {
  if (planned_.empty()) return "";
  const std::string total = std::to_string(planned_.size());
  return fmt::format("{:>{}}/{}, ", run, total.size(), total);
}

int Runner::shared_cpus(const json& record) {
  return hw::host_load_from_json(record.value("summary", json::object()).value("host_load", json())).busy() ? 1 : 0;
}

double Runner::engine_call_us() const { return planning_ ? 0 : bench::cpu_call_now_us(base_.threads); }

json measured_row(const json& rec) {
  const json& s = rec.at("summary");
  double train_s = 0, eval_s = 0, compute_s = 0;
  for (const auto& e : rec.at("epochs")) {
    train_s += field<double>(e, "train_s");
    eval_s += field<double>(e, "eval_s");
    compute_s += field<double>(e, "compute_s");
  }
  const double epochs = double(rec.at("epochs").size());
  const double batch = field<double>(rec.at("config"), "batch_size");
  const double steps = std::floor(field<double>(rec.at("data"), "train_images") / batch) * epochs;
  const json& m = rec.at("model");
  // Other work on the CPUs while it trained (hw::HostLoad): a row that shared them reads slow.
  const hw::HostLoad load = hw::host_load_from_json(s.value("host_load", json()));
  const std::string busy = hw::busy_note(load);
  const double flops_per_image = field<double>(m, "forward_flops_per_image") + field<double>(m, "backward_flops_per_image");
  const double call_us = plan::recorded_call_us(s);
  return {{"status", "measured"},
          {"note", busy.empty() ? "" : "CPUs shared: " + busy},
          {"host_busy_pct", load.known ? json(100 * (load.others_share + load.steal_share)) : json()},
          {"host_shared", load.busy()},  // the verdict, by hw::HostLoad's rule (a second or more, 10% or more)
          {"epoch_s", (train_s + eval_s) / epochs},
          {"total_s", train_s + eval_s},
          {"train_s", train_s},
          {"images_per_s", field<double>(s, "images_per_s")},
          {"step_ms", 1e3 * train_s / std::max(steps, 1.0)},
          {"mflops_per_step", flops_per_image * batch / 1e6},
          // The kernels of the GPU's captured step (none counted on the CPU, or on eager GPU steps).
          {"kernels_per_step", rec.value(json::json_pointer("/gpu_step/graph_nodes/kernels"), json())},
          {"peak_mb", field<double>(s, "peak_bytes") / 1e6},
          {"test_acc", 100 * field<double>(s, "final_test_acc")},
          {"loss_scale_skips", s.contains("loss_scale_skips") ? s.at("loss_scale_skips") : json()},
          {"data_wait_pct", 100 * field<double>(s, "data_wait_share")},
          {"idle_pct", 100 * (1 - compute_s / train_s)},
          {"parameters_m", field<double>(m, "parameters") / 1e6},
          {"mflops_per_image", flops_per_image / 1e6},
          {"achieved_gflops", flops_per_image * field<double>(s, "images_per_s") / 1e9},
          // The convolutions that ran as Winograd, whose multiplies the FLOPs above overcount.
          {"winograd_layers", rec.value(json::json_pointer("/cpu_step/winograd_layers"), json::array())},
          // A bf16 run's layers that ran on AMX tiles, whose peak is its ceiling.
          {"amx_layers", rec.value(json::json_pointer("/cpu_step/amx_layers"), json::array())},
          // The layers too small to share between the threads, which ran on one.
          {"one_thread_layers", rec.value(json::json_pointer("/cpu_step/one_thread_layers"), json::array())},
          {"epochs", rec.at("epochs").size()},
          {"train_images", field<int64_t>(rec.at("data"), "train_images")},
          {"test_images", field<int64_t>(rec.at("data"), "test_images")},
          {"classes", field<int64_t>(rec.at("data"), "classes")},
          {"workers", rec.at("config").value("workers", json())},  // the loader's threads (device's observations read it)
          {"call_us", call_us > 0 ? json(call_us) : json()},  // null where its record measured none
          {"record", rec.value("record_path", "")}};
}

}  // namespace dlperf::lab

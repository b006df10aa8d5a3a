// dlperf lab: a quick lab on a tiny synthetic dataset writes every file with the documented
// columns, and the observations follow the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/cpu/ops.h"
#include "backend/cuda/runtime.h"
#include "core/interrupt.h"
#include "core/memory.h"
#include "core/version.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "lab/lab.h"
#include "nn/graph.h"
#include "plan/step_time.h"
#include "report/plot.h"
#include "test_util.h"

namespace dlperf::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string first_line(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

// The columns docs/lab.md lists for each CSV, from lines like "- `batch.csv`: `batch, lr, ...`".
std::map<std::string, std::string> documented_columns() {
  std::map<std::string, std::string> out;
  std::ifstream f(fs::path(DLPERF_SOURCE_DIR) / "docs" / "lab.md");
  std::string line;
  while (std::getline(f, line)) {
    const auto a = line.find("- `"), b = line.find(".csv`: `");
    if (a != 0 || b == std::string::npos) continue;
    std::string cols = line.substr(b + 8, line.rfind('`') - (b + 8));
    std::string compact;
    for (char c : cols)
      if (c != ' ') compact += c;
    out[line.substr(3, b - 3)] = compact;
  }
  return out;
}

lab::LabConfig tiny_lab(const fs::path& out) {
  lab::LabConfig c;
  c.data = "synthetic:1x12x12:192";
  c.out = out.string();
  c.base_model = "small";
  c.models = {"mlp", "small"};
  c.batches = {8, 32};
  c.base_batch = 32;
  c.train_limit = c.test_limit = 0;
  c.epochs = 1;
  c.max_workers = 2;
  c.quiet = true;
  c.progress = false;
  return c;
}

TEST(Lab, QuickLabWritesEveryFileWithTheDocumentedColumns) {
  TempDir dir;
  const auto exps = lab::run_lab(tiny_lab(dir.path));
  ASSERT_EQ(exps.size(), 6u);  // the five and, last, the planner against their runs
  const auto docs = documented_columns();
  ASSERT_EQ(docs.size(), 6u) << "docs/lab.md should list the columns of the six CSV files";

  const json j = json::parse(slurp(dir.path / "lab.json"));
  ASSERT_EQ(j["experiments"].size(), 6u);
  const std::string readme = slurp(dir.path / "README.md");
  // Whether the engine's large buffers asked for huge pages, with the kernel's mode (a run's speed moves with it).
  EXPECT_EQ(j["machine"]["huge_pages"], host_huge_pages_note());
  EXPECT_NE(readme.find("- **Huge pages:** " + host_huge_pages_note()), std::string::npos);
  // Where the runs max-pooled AVX-512's blocks, the machine section says which code did (timed).
  if (const cpu::MaxPool16cChoice* c = cpu::max_pool_16c_choice_if_made()) {
    EXPECT_EQ(j["machine"]["cpu_max_pool_nChw16c"], c->why);
    EXPECT_NE(readme.find("- **CPU max pooling (nChw16c):** " + c->why), std::string::npos);
  }
  if (const cpu::WinogradChoice* c = cpu::winograd_choice_if_made()) {
    EXPECT_EQ(j["machine"]["cpu_winograd"], c->why);
    EXPECT_NE(readme.find("- **CPU convolutions:** " + c->why), std::string::npos);
  }
  for (size_t i = 0; i < exps.size(); ++i) {
    const auto& e = exps[i];
    SCOPED_TRACE(e.name);
    // CSV header = documented columns; JSON rows carry every column.
    ASSERT_TRUE(docs.count(e.name));
    EXPECT_EQ(first_line(dir.path / (e.name + ".csv")), docs.at(e.name));
    std::stringstream cols(docs.at(e.name));
    std::string key;
    const json& je = j["experiments"][i];
    EXPECT_EQ(je["name"], e.name);
    EXPECT_EQ(je["rows"].size(), e.rows.size());
    while (std::getline(cols, key, ','))
      for (const auto& r : je["rows"]) EXPECT_TRUE(r.contains(key)) << key;
    EXPECT_FALSE(e.observations.empty());
    EXPECT_NE(readme.find("## " + e.title), std::string::npos);
    for (const auto& o : e.observations) EXPECT_NE(readme.find(o), std::string::npos) << o;
    // Plots: valid PNGs, embedded in the README.
    if (report::gnuplot_available()) {
      EXPECT_FALSE(e.plots.empty());
      for (const auto& p : e.plots) {
        EXPECT_TRUE(report::png_is_whole((dir.path / p).string())) << p;
        EXPECT_NE(readme.find("](" + p + ")"), std::string::npos) << p;
      }
    }
  }
  // The workers rows carry the loader alone on the same images (measured: whether it outruns
  // training here is a race of thread start-ups on 6 tiny batches, which a busy machine can lose;
  // the sentences it makes are tested on set numbers below).
  for (const auto& r : exps[3].rows) {
    ASSERT_EQ(exps[3].name, "workers");
    EXPECT_GT(r.value("loader_images_per_s", 0.0), 0) << r.dump();
  }
  // Every measured row has its run record, and the GPU rows say why they are missing.
  EXPECT_GE(records_in(dir.path / "runs"), 7u);  // distinct runs: 2 devices' workloads, 4 batch rows less the shared one, 2 models ...
  // One configuration, one run: the device experiment's CPU row of the base model and batch is
  // the base run the batch experiment shows (--device auto is the CPU here), not a second
  // measurement of it.
  auto base_row = [&](const lab::Experiment& e, const char* key, const json& value) {
    for (const auto& r : e.rows)
      if (r[key] == value) return r;
    return json();
  };
  if (!cuda::built() || cuda::device_count() == 0) {
    const json cpu = base_row(exps[0], "workload", "small"), fixed = base_row(exps[1], "batch", 32);
    ASSERT_FALSE(cpu.is_null());
    ASSERT_FALSE(fixed.is_null());
    EXPECT_EQ(cpu["images_per_s"], fixed["images_per_s"]);
  }
  // The tiny workloads (the mlp, then the logistic regression, at batch 16) also ran on one
  // thread, wherever the lab had more than one.
  for (const char* tiny : {"mlp", "logreg"}) {
    const auto one_thread = std::count_if(exps[0].rows.begin(), exps[0].rows.end(),
                                          [&](const json& r) { return r["workload"] == tiny && r["threads"] == 1; });
    EXPECT_EQ(one_thread, hw::usable_cpus() > 1 ? 1 : 0) << tiny;
    EXPECT_TRUE(std::any_of(exps[0].rows.begin(), exps[0].rows.end(),
                            [&](const json& r) { return r["workload"] == tiny && r["batch"] == 16 && r["status"] == "measured"; }))
        << tiny;
  }
  EXPECT_EQ(exps[0].rows[0]["threads"], hw::usable_cpus());
  for (const auto& r : exps[0].rows)
    if (r["device"] == "cuda") {
      EXPECT_EQ(r["status"], "missing");
      EXPECT_FALSE(r["note"].get<std::string>().empty());
    }
  EXPECT_NE(readme.find("## Machine"), std::string::npos);
  EXPECT_NE(readme.find("**Other work on the CPUs:** "), std::string::npos) << "every run record says what else ran";
  // Before the runs, the lab listed them and the planner predicted their time; every run it
  // trained was planned (the records, and the two noise runs that keep none).
  const json& planned = j["planned"];
  EXPECT_EQ(planned["runs"].get<size_t>(), records_in(dir.path / "runs") + 2);
  EXPECT_EQ(j["noise_runs"], 3);
  EXPECT_GT(j["engine_call_us"]["start"].get<double>(), 0);  // the cores' round trip, before and after the runs
  EXPECT_GT(j["engine_call_us"]["end"].get<double>(), 0);
  EXPECT_GE(j["noise_pct"].get<double>(), j["noise_start_pct"].get<double>());
  EXPECT_LE(std::fabs(j["noise_end_change_pct"].get<double>()), j["noise_pct"].get<double>());
  EXPECT_EQ(planned["unpredicted_runs"], 0);
  EXPECT_GT(planned["seconds"].get<double>(), 0);
  EXPECT_EQ(planned["finished_runs"], planned["runs"]);  // none diverged here
  EXPECT_NEAR(planned["finished_planned_seconds"].get<double>(), planned["seconds"].get<double>(), 1e-9);
  EXPECT_GT(planned["finished_measured_seconds"].get<double>(), 0);
  EXPECT_NE(readme.find(fmt::format("Its {} runs trained and tested in ", planned["runs"].get<int>())), std::string::npos);

  // --redraw writes the same report again from lab.json alone, running nothing: the GPU machines
  // have no gnuplot, so a GPU lab's plots are drawn elsewhere.
  std::map<std::string, std::string> before;
  for (const auto& f : fs::directory_iterator(dir.path))
    if (f.is_regular_file()) before[f.path().filename().string()] = slurp(f.path());
  for (const auto& [name, body] : before)
    if (name != "lab.json") fs::remove(dir.path / name);
  fs::remove_all(dir.path / "plots");
  lab::redraw_report(dir.path.string(), true);
  for (const auto& [name, body] : before) EXPECT_EQ(slurp(dir.path / name), body) << name;
  if (report::gnuplot_available()) {
    for (const auto& e : exps)
      for (const auto& p : e.plots) EXPECT_TRUE(report::png_is_whole((dir.path / p).string())) << p;
  }
  // A lab.json from before it kept the settings and the columns' decimals: the report leaves the
  // settings out rather than state defaults, and takes the decimals of this dlperf's columns.
  json old = j;
  old.erase("settings");
  for (auto& e : old["experiments"])
    for (auto& c : e["columns"]) c.erase("decimals");
  std::ofstream(dir.path / "lab.json") << old.dump(1);
  lab::redraw_report(dir.path.string(), true);
  const std::string redrawn = slurp(dir.path / "README.md");
  EXPECT_EQ(redrawn.find("Unless an experiment varies it"), std::string::npos);
  EXPECT_NE(readme.find("Unless an experiment varies it"), std::string::npos);
  const auto tables = [](const std::string& md) {  // the README's table lines
    std::string t;
    std::stringstream lines(md);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("|", 0) == 0) t += line + "\n";
    return t;
  };
  EXPECT_EQ(tables(redrawn), tables(readme));
  old["experiments"][1]["columns"][0]["decimals"] = 99;
  std::ofstream(dir.path / "lab.json") << old.dump(1);
  EXPECT_NE(error_of([&] { lab::redraw_report(dir.path.string(), true); }).find("is damaged: its batch column batch has 99 decimals"),
            std::string::npos);
  for (const auto& e : exps)
    for (const auto& o : e.observations) EXPECT_NE(redrawn.find(o), std::string::npos) << o;
}

// --redraw on a folder without a lab, or with a damaged lab.json: one message naming the file.
TEST(Lab, RedrawRefusesWhatIsNotALab) {
  TempDir dir;
  EXPECT_NE(error_of([&] { lab::redraw_report(dir.path.string(), true); }).find("has no lab.json: there is no lab report to redraw"),
            std::string::npos);
  std::ofstream(dir.path / "lab.json") << "{\"command\": \"train\"}";
  EXPECT_NE(error_of([&] { lab::redraw_report(dir.path.string(), true); }).find("is not a dlperf lab's lab.json"), std::string::npos);
  std::ofstream(dir.path / "lab.json") << "{\"command\": \"lab\", \"experiments\": [], \"data\": 3}";
  EXPECT_NE(error_of([&] { lab::redraw_report(dir.path.string(), true); }).find("lab.json is damaged: data: type must be string, but is number"),
            std::string::npos)
      << error_of([&] { lab::redraw_report(dir.path.string(), true); });
  // A field the lab may leave out, or one inside another, is named with where it is (found by
  // damaging every field of a quick lab's lab.json in turn).
  const json lab = {{"command", "lab"}, {"data", "fashion-mnist"}, {"mode", "quick"}, {"machine", json::object()},
                    {"created", "2026-11-29 09:00"}, {"seconds", 1.0}, {"experiments", json::array()}};
  for (const auto& [pointer, value, said] : std::vector<std::tuple<std::string, json, std::string>>{
           {"/command", 3, "is not a dlperf lab's lab.json"},
           {"/noise_pct", "x", "damaged: noise_pct: type must be number, but is string"},
           {"/settings", 3, "damaged: settings: type must be object, but is number"},
           {"/settings", json{{"model", "medium"}, {"batch", "64"}, {"lr", 0.1}}, "damaged: settings.batch: type must be number, but is string"},
           {"/planned", json{{"seconds", json::array()}}, "damaged: planned.seconds: type must be number, but is array"},
           {"/engine_call_us", true, "damaged: engine_call_us: type must be object, but is boolean"},
           // found by scripts/fuzz_inputs.py (seed 9129): the machine section's fields went unnamed
           {"/machine/cpu_winograd", 0.5, "damaged: machine.cpu_winograd: type must be string, but is number"},
           {"/machine/cpu", json{{"cores", "2"}}, "damaged: machine.cpu.cores: type must be number, but is string"},
           {"/machine/gpu", json{{"present", true}, {"sm_count", "x"}}, "damaged: machine.gpu.sm_count: type must be number, but is string"},
           {"/machine/gpu", 1, "damaged: machine.gpu: type must be object, but is number"},
           {"/machine", "x", "damaged: machine: type must be object, but is string"},
           {"/experiments/0", 5, "damaged: experiments[0]: type must be object, but is number"},
           {"/experiments/0", json{{"name", "batch"}}, "damaged: experiments[0]: key 'title' not found"},
           {"/experiments/0", json{{"name", "batch"}, {"title", "B"}, {"question", "Q"}, {"rows", json::array()}, {"observations", json::array()},
                                   {"columns", json::array({json{{"key", "batch"}, {"header", 1}}})}},
            "damaged: experiments[0].columns[0].header: type must be string, but is number"},
           {"/experiments/0", json{{"name", "batch"}, {"title", "B"}, {"question", "Q"}, {"observations", json::array()},
                                   {"columns", json::array({json{{"key", "batch"}, {"header", "batch"}, {"decimals", 0}}})},
                                   {"rows", json::array({json{{"status", "measured"}, {"note", ""}, {"batch", "64"}}})}},
            "damaged: experiments[0].rows[0].batch: type must be number, but is string"},
           {"/experiments/0", json{{"name", "batch"}, {"title", "B"}, {"question", "Q"}, {"observations", json::array()},
                                   {"columns", json::array({json{{"key", "batch"}, {"header", "batch"}, {"decimals", 0}}})},
                                   {"rows", json::array({json{{"status", "missing"}, {"note", "no GPU"}, {"batch", nullptr}}})}},
            "damaged: experiments[0].rows[0].batch: type must be number, but is null"},
           // found by scripts/fuzz_inputs.py (seed 9136): a field the observations read beside the columns went unnamed
           {"/experiments/0", json{{"name", "batch"}, {"title", "B"}, {"question", "Q"}, {"observations", json::array()},
                                   {"columns", json::array({json{{"key", "batch"}, {"header", "batch"}, {"decimals", 0}}})},
                                   {"rows", json::array({json{{"status", "measured"}, {"note", ""}, {"batch", 64}, {"total_s", {{"a", 1}}}}})}},
            "damaged: experiments[0].rows[0].total_s: type must be number, but is object"},
           {"/experiments/0", json{{"name", "model"}, {"title", "M"}, {"question", "Q"}, {"observations", json::array()},
                                   {"columns", json::array({json{{"key", "model"}, {"header", "model"}, {"decimals", -1}}})},
                                   {"rows", json::array({json{{"status", "measured"}, {"note", ""}, {"model", "medium"}, {"winograd_layers", "conv2"}}})}},
            "damaged: experiments[0].rows[0].winograd_layers: type must be a list of layer names, but is string"}}) {
    json j = lab;
    j[json::json_pointer(pointer)] = value;
    std::ofstream(dir.path / "lab.json") << j.dump();
    const std::string error = error_of([&] { lab::redraw_report(dir.path.string(), true); });
    EXPECT_NE(error.find(said), std::string::npos) << pointer << ": " << error;
  }
}

// The lab's time estimate is the planner's: each run's training steps at the predicted step time,
// and a forward pass per test batch.
TEST(Lab, EstimatesItsTimeFromThePlannersStepTimes) {
  const data::DataPair d = data::load_data("synthetic:1x12x12:600");
  train::TrainConfig c;
  c.device = "cpu", c.model = "small", c.batch = 32, c.epochs = 2, c.threads = 1;
  const lab::TimeEstimate t = lab::estimate_time({c, c}, d);
  EXPECT_EQ(t.runs, 2);
  EXPECT_EQ(t.unpredicted, 0);
  const nn::Graph g = nn::build_graph(nn::load_model("small"), {1, 12, 12}, d.train.classes, 32);
  const plan::StepPrediction p = plan::predict_step(g, c.optimizer, plan::host_ceilings(1));
  const double train_steps = double(d.train.size() / 32) * 2, test_steps = double((d.test.size() + 31) / 32) * 2;
  EXPECT_NEAR(t.seconds, 2 * (p.step_s * train_steps + p.forward_s * test_steps), 1e-9);
  c.model = "nosuch";  // counted, not predicted
  EXPECT_EQ(lab::estimate_time({c}, d).unpredicted, 1);
  EXPECT_EQ(t.per_run.size(), 2u);
  EXPECT_NEAR(t.per_run[0] + t.per_run[1], t.seconds, 1e-12);
  // The check covers the runs that finished and were predicted, and says how many it leaves out.
  EXPECT_EQ(lab::planned_against_measured({14, 14, 2.0, 2.5}), "14 runs trained and tested in 2.5 s; dlperf plan had expected 2.0 s (0.80x)");
  EXPECT_EQ(lab::planned_against_measured({13, 14, 2.0, 2.5}),
            "13 runs trained and tested in 2.5 s; dlperf plan had expected 2.0 s (0.80x), leaving out 1 run that did not finish "
            "or that it could not predict");
  EXPECT_EQ(lab::planned_against_measured({0, 3, 0, 0}), "");
}

// An interrupted lab (here: one that ran the batch experiment only) leaves its finished runs;
// --resume reuses exactly those whose settings, machine and dlperf version match.
TEST(Lab, ResumeReusesTheFinishedRunsOfAnInterruptedLab) {
  TempDir dir;
  lab::LabConfig c = tiny_lab(dir.path);
  c.experiments = {"batch"};
  const auto first = lab::run_lab(c);
  const fs::path runs = dir.path / "runs";
  const size_t batch_runs = records_in(runs);  // the base run (batch 32) and batch 8 at both lrs
  ASSERT_EQ(batch_runs, 3u);

  // A record another dlperf version made is not reused: that run is made again.
  const json& row = first[0].rows[2];
  ASSERT_EQ(row["batch"], 8);
  ASSERT_EQ(row["lr_rule"], "linear");
  const std::string stale = row["record"];
  json rec = json::parse(slurp(stale));
  rec["dlperf_version"] = "0.0.0";
  std::ofstream(stale) << rec.dump();
  // Nor is a damaged one (found by scripts/fuzz_inputs.py: a missing field was read through a
  // const reference, undefined behaviour; a field of another type stopped the lab).
  ASSERT_EQ(first[0].rows[0]["batch"], 8);
  const std::string damaged = first[0].rows[0]["record"];
  rec = json::parse(slurp(damaged));
  rec["summary"].erase("data_wait_share");
  std::ofstream(damaged) << rec.dump();

  c.experiments = {"batch", "model"};
  c.resume = true;
  const auto second = lab::run_lab(c);
  const json j = json::parse(slurp(dir.path / "lab.json"));
  EXPECT_EQ(j["reused_runs"], 1);
  EXPECT_EQ(j["planned"]["runs"], 5);  // the three below and the two noise runs: the reused one is not planned
  EXPECT_NE(slurp(dir.path / "README.md").find("resumed: 1 run reused"), std::string::npos);
  // New runs: batch 8 at both lrs again, and the model experiment's mlp (its small row is the base run).
  EXPECT_EQ(records_in(runs), batch_runs + 3);
  ASSERT_EQ(second[0].name, "batch");
  for (size_t i = 0; i < second[0].rows.size(); ++i) {
    SCOPED_TRACE(i);
    const json &a = first[0].rows[i], &b = second[0].rows[i];
    if (a["record"] == stale || a["record"] == damaged) {
      EXPECT_NE(b["record"], stale);
    } else {  // the very measurement of the first lab
      EXPECT_EQ(b["record"], a["record"]);
      EXPECT_EQ(b["images_per_s"], a["images_per_s"]);
    }
  }
}

// A report that cannot be written (a full disk: /dev/full stands in for it) fails the lab after
// its runs, whose records are kept, and says how to get the report without training them again.
TEST(Lab, AReportThatCannotBeWrittenSaysResumeKeepsTheRuns) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  TempDir dir;
  lab::LabConfig c = tiny_lab(dir.path);
  c.experiments = {"batch"};
  fs::create_symlink("/dev/full", dir.path / "batch.csv.tmp");
  const std::string error = error_of([&] { lab::run_lab(c); });
  EXPECT_NE(error.find("could not write " + (dir.path / "batch.csv").string()), std::string::npos) << error;
  EXPECT_NE(error.find("| free some space, then run the same dlperf lab command with --resume: it reuses the 3 finished runs kept in " +
                       dir.path.string() + "/runs and writes the report"),
            std::string::npos)
      << error;
  EXPECT_EQ(records_in(dir.path / "runs"), 3u);
  c.resume = true;  // the space is back
  lab::run_lab(c);
  EXPECT_EQ(json::parse(slurp(dir.path / "lab.json"))["reused_runs"], 3);
  EXPECT_EQ(records_in(dir.path / "runs"), 3u);
}

TEST(Lab, CtrlCEndsTheLabAndResumeReusesTheRunsThatFinished) {
  const SigintAsAtATerminal sigint;
  TempDir dir;
  lab::LabConfig c = tiny_lab(dir.path);
  c.experiments = {"batch"};
  c.sigint_in_run = 3;  // the base run, its noise twin (no record), then batch 8: stopped in its first epoch
  try {
    lab::run_lab(c);
    FAIL() << "the lab was not stopped";
  } catch (const Interrupted& e) {
    EXPECT_EQ(e.signal(), SIGINT);
    EXPECT_NE(std::string(e.what()).find("the lab was stopped by SIGINT (Ctrl-C) during its run of batch 8"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("1 run had finished"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("--resume"), std::string::npos);
  }
  const fs::path runs = dir.path / "runs";
  EXPECT_EQ(records_in(runs), 1u);
  EXPECT_FALSE(fs::exists(dir.path / "README.md"));  // no report of a lab that stopped
  c.sigint_in_run = 0;
  c.resume = true;
  lab::run_lab(c);
  EXPECT_EQ(json::parse(slurp(dir.path / "lab.json"))["reused_runs"], 1);
  EXPECT_EQ(records_in(runs), 3u);
  // Stopped in its first run, a lab has nothing to resume, and says so.
  TempDir fresh;
  c = tiny_lab(fresh.path);
  c.experiments = {"batch"};
  c.sigint_in_run = 1;
  try {
    lab::run_lab(c);
    FAIL() << "the lab was not stopped";
  } catch (const Interrupted& e) {
    EXPECT_NE(std::string(e.what()).find("during its run of small at batch 32, before any run had finished"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("start over"), std::string::npos);
  }
}

TEST(Lab, ResumeMatchesRunsByTheirSettingsOnThisMachineOnly) {
  const json machine = {{"hostname", "h"}, {"cpu", {{"model", "EPYC"}, {"cores", 2}}}, {"gpus", json::array()}};
  const json config = {{"model", "small"}, {"device", "auto"}, {"batch_size", 32}, {"threads", 0}};
  json rec = {{"command", "train"}, {"dlperf_version", dlperf_version()}, {"dlperf_commit", dlperf_commit()},
              {"summary", json::object()}, {"config", config}, {"machine", machine}};
  rec["config"]["threads_used"] = 2;
  json cpu_config = config;
  cpu_config["device"] = "cpu";
  // "auto" that ran on the CPU is the --device cpu run; the threads it used are not a setting.
  EXPECT_EQ(lab::resumable_run_key(rec, machine), lab::run_key_of_config(cpu_config));
  json gpu = rec;
  gpu["config"]["device_used"] = "cuda:0";
  json cuda_config = config;
  cuda_config["device"] = "cuda:0";
  EXPECT_EQ(lab::resumable_run_key(gpu, machine), lab::run_key_of_config(cuda_config));
  json other = machine;
  other["hostname"] = "elsewhere";
  EXPECT_EQ(lab::resumable_run_key(rec, other), "");
  other = machine;
  other["gpus"] = {{{"name", "NVIDIA H100"}}};
  EXPECT_EQ(lab::resumable_run_key(rec, other), "");
  other = machine;  // the same host name and CPU name on another CPU (VMs name Zen 3 to 5 "AMD EPYC")
  other["cpu"]["isa"] = "avx512";
  EXPECT_EQ(lab::resumable_run_key(rec, other), "");
  json rebuilt = rec;
  rebuilt["dlperf_commit"] = "0123456789ab";  // another build's numbers
  EXPECT_EQ(lab::resumable_run_key(rebuilt, machine), "");
  json profiled = rec;
  profiled["profile"] = json::object();  // stopped after a few steps: not a finished run
  EXPECT_EQ(lab::resumable_run_key(profiled, machine), "");
  json unfinished = rec;
  unfinished.erase("summary");
  EXPECT_EQ(lab::resumable_run_key(unfinished, machine), "");
  json stopped = rec;  // Ctrl-C'd: its finished epochs are fewer than the run asked for
  stopped["stopped"] = {{"signal", "SIGINT (Ctrl-C)"}, {"in_epoch", 2}, {"epochs_asked", 5}};
  EXPECT_EQ(lab::resumable_run_key(stopped, machine), "");
}

TEST(Lab, RefusesUnknownExperiments) {
  TempDir dir;
  lab::LabConfig c = tiny_lab(dir.path);
  c.experiments = {"bacth"};
  EXPECT_NE(error_of([&] { lab::run_lab(c); }).find("no lab experiment 'bacth'"), std::string::npos);
}

// Settings that would fail every row are refused before the first run; a lab whose runs all
// failed anyway still writes its report and then fails.
TEST(Lab, BadSettingsStopTheLabAndALabThatTrainedNothingFails) {
  TempDir dir;
  lab::LabConfig c = tiny_lab(dir.path);
  c.models = {"small", "nosuch"};
  EXPECT_NE(error_of([&] { lab::run_lab(c); }).find("model 'nosuch' is neither a preset"), std::string::npos);
  c = tiny_lab(dir.path / "report");
  std::ofstream(dir.path / "report") << "a file where the report folder would go";
  // Refused before the base run, which would have failed first, unable to write its record.
  EXPECT_NE(error_of([&] { lab::run_lab(c); }).find("cannot create the report folder"), std::string::npos);
  c = tiny_lab(dir.path);
  c.data = (dir.path / "missing").string();
  EXPECT_NE(error_of([&] { lab::run_lab(c); }).find("the lab's base run (small at batch 32 on"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir.path / "README.md"));
  c = tiny_lab(dir.path);
  c.experiments = {"batch"};
  c.batches = {4096};  // more than the 192 images: both rows fail, the base run (batch 32) does not
  EXPECT_NE(error_of([&] { lab::run_lab(c); }).find("no run of the lab trained"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir.path / "README.md"));
  // A folder whose README.md is someone else's (--out . in a project) keeps it: refused before
  // any run. An earlier lab's report is the lab's to replace (the runs above wrote one).
  TempDir project;
  std::ofstream(project.path / "README.md") << "# my project\n";
  c = tiny_lab(project.path);
  EXPECT_NE(error_of([&] { lab::run_lab(c); }).find("holds a README.md that is not a dlperf lab report"), std::string::npos);
  EXPECT_EQ(slurp(project.path / "README.md"), "# my project\n");
  EXPECT_FALSE(fs::exists(project.path / "runs"));
}

// A tiny run's 5.4 ms epoch reads "0.0054", not "0.01" (twice as long) or "0.00" (free).
TEST(Lab, TableCellsKeepTwoSignificantDigits) {
  EXPECT_EQ(lab::cell_text(0.0054108, 2), "0.0054");
  EXPECT_EQ(lab::cell_text(0.0467, 2), "0.047");
  EXPECT_EQ(lab::cell_text(12.345, 2), "12.35");
  EXPECT_EQ(lab::cell_text(0.47, 1), "0.47");
  EXPECT_EQ(lab::cell_text(387781.2, 0), "387781");
  EXPECT_EQ(lab::cell_text(0.0, 2), "0.00");
  EXPECT_EQ(lab::cell_text(nlohmann::json(), 2), "-");
  EXPECT_EQ(lab::cell_text("fp32", lab::kText), "fp32");
  // A learning rate as it was set: 0.025 and 1.6, not 0.0250 and 1.6000 (0.1 * 16 is 1.6000000000000001).
  EXPECT_EQ(lab::cell_text(0.1 / 4, lab::kOwnDigits), "0.025");
  EXPECT_EQ(lab::cell_text(0.1 * 16, lab::kOwnDigits), "1.6");
  EXPECT_EQ(lab::cell_text(0.1, lab::kOwnDigits), "0.1");
}

TEST(Lab, WorkerCountsAreBoundedByTheCores) {
  EXPECT_EQ(data::worker_counts(2, 0), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(data::worker_counts(1, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(data::worker_counts(16, 0), (std::vector<int>{0, 2, 4, 8}));
  EXPECT_EQ(data::worker_counts(16, 4), (std::vector<int>{0, 2, 4}));
}

json row(json keys, double epoch_s, double ips, double acc, double peak_mb) {
  keys["status"] = "measured";
  keys["note"] = "";
  keys["epoch_s"] = epoch_s;
  keys["images_per_s"] = ips;
  keys["test_acc"] = acc;
  keys["peak_mb"] = peak_mb;
  keys["step_ms"] = epoch_s;
  return keys;
}

bool says(const std::vector<std::string>& obs, const std::string& text) {
  for (const auto& o : obs)
    if (o.find(text) != std::string::npos) return true;
  return false;
}

TEST(Lab, BatchObservationsFollowTheData) {
  lab::Experiment e;
  e.name = "batch";
  e.rows = {row({{"batch", 16}, {"lr_rule", "fixed"}, {"lr", 0.1}}, 34, 1000, 91.5, 215),
            row({{"batch", 1024}, {"lr_rule", "fixed"}, {"lr", 0.1}}, 7, 4900, 90.2, 555),
            row({{"batch", 1024}, {"lr_rule", "linear"}, {"lr", 6.4}}, 7, 4900, 91.0, 555)};
  auto obs = lab::observe(e);
  EXPECT_TRUE(says(obs, "Batch 1024 trains 4.9x faster than batch 16")) << obs[0];
  EXPECT_TRUE(says(obs, "test accuracy fell 1.3 points")) << obs[0];
  EXPECT_TRUE(says(obs, "Peak memory grows from 215 MB at batch 16 to 555 MB at batch 1024: 2.6x for 64x the batch"));
  EXPECT_TRUE(says(obs, "linear scaling rule (lr 6.4 at batch 1024), test accuracy rose 0.8 points"));
  EXPECT_FALSE(says(obs, "weight updates"));  // rows without their image and epoch counts
  for (auto& r : e.rows) r["train_images"] = 60000, r["epochs"] = 5;
  EXPECT_TRUE(says(lab::observe(e), "Over the same 5 epochs of 60000 images, batch 1024 makes 290 weight updates to batch 16's 18750."));

  e.rows[1]["test_acc"] = 93.0;   // now the big batch generalizes better
  e.rows[1]["images_per_s"] = 500;  // and is slower
  obs = lab::observe(e);
  EXPECT_TRUE(says(obs, "Batch 1024 trains 2.0x slower than batch 16")) << obs[0];
  EXPECT_TRUE(says(obs, "test accuracy rose 1.5 points")) << obs[0];
  e.rows[1]["images_per_s"] = 960;  // 4% apart, beyond a 1% noise: a percentage, not "1.0x slower"
  e.noise_pct = 1;
  EXPECT_TRUE(says(lab::observe(e), "Batch 1024 trains 4% slower than batch 16")) << lab::observe(e)[0];

  e.rows[1]["images_per_s"] = 1040;  // 4% apart, within a 5% run-to-run noise
  e.noise_pct = 5;
  EXPECT_TRUE(says(lab::observe(e), "Batch 1024 trains about as fast as batch 16"));

  // An accuracy no better than guessing says so (the quick lab's lr 1.6 at batch 1024 reached
  // 9.64% on 10 classes); 20% on 10 classes is poor, not chance.
  for (auto& r : e.rows) r["classes"] = 10;
  e.rows[2]["test_acc"] = 9.64;
  EXPECT_TRUE(says(lab::observe(e), "(9.64% vs 93.00%): 9.64% is chance for 10 classes, so that run learned nothing."))
      << lab::observe(e).back();
  e.rows[2]["test_acc"] = 3.0;  // one wrong class predicted for all 500 test images: below chance, not chance
  EXPECT_TRUE(says(lab::observe(e), "3.00% is below chance (10% for 10 classes), so that run learned nothing."))
      << lab::observe(e).back();
  e.rows[2]["test_acc"] = 20.0;
  EXPECT_FALSE(says(lab::observe(e), "chance"));

  e.rows[2] = {{"batch", 1024}, {"lr_rule", "linear"}, {"lr", 6.4}, {"status", "diverged"}, {"note", "the loss became NaN at epoch 1, step 4"}};
  obs = lab::observe(e);
  EXPECT_TRUE(says(obs, "Batch 1024 with the linear lr diverged: the loss became NaN at epoch 1, step 4"));
}

// The noise line says up to what difference rows are called alike: the measured noise, or 3%
// when the runs happened to agree more closely (it said "smaller differences are noise" at 0.0%).
// The run at the end counts: two adjacent runs can agree while the machine drifts.
TEST(Lab, TheNoiseLineSaysTheDifferenceRowsMustExceed) {
  const lab::Noise pair = lab::noise_of({1000, 1047});
  EXPECT_EQ(pair.runs, 2);
  EXPECT_NEAR(pair.pct, 4.7, 1e-9);
  EXPECT_EQ(lab::noise_sentence(pair), "two identical runs of the base configuration differed by 4.7% in images/s, so rows closer than that are called alike");
  EXPECT_EQ(lab::noise_sentence(lab::noise_of({1000, 1000.2})),
            "two identical runs of the base configuration differed by 0.0% in images/s; rows closer than 3% are still called alike "
            "(a few runs can agree by luck)");
  const lab::Noise drift = lab::noise_of({1000, 1010, 1300});
  EXPECT_EQ(drift.runs, 3);
  EXPECT_NEAR(drift.start_pct, 1.0, 1e-9);
  EXPECT_NEAR(drift.pct, 30.0, 1e-9);  // the slowest against the fastest, wherever they ran
  EXPECT_NEAR(drift.end_change_pct, 100 * (1300 / 1005.0 - 1), 1e-9);
  EXPECT_EQ(lab::noise_sentence(drift),
            "three identical runs of the base configuration, two at the start of the lab and one at its end, differed by up to 30.0% "
            "in images/s (1.0% between the two at the start; the one at the end ran 29.4% faster than those at the start: the machine's "
            "speed changed while the lab ran), so rows closer than "
            "that are called alike");
  EXPECT_NEAR(lab::noise_of({1010, 1000, 1005}).pct, 1.0, 1e-9);
  // A slower run at the end says so.
  const lab::Noise slower = lab::noise_of({4024, 4001, 3537});
  EXPECT_NEAR(slower.pct, 13.77, 0.01);
  EXPECT_NE(lab::noise_sentence(slower).find("(0.6% between the two at the start; the one at the end ran 11.9% slower than those at the "
                                             "start: the machine's speed changed while the lab ran)"),
            std::string::npos)
      << lab::noise_sentence(slower);
  EXPECT_EQ(lab::noise_sentence(lab::noise_of({1000, 1010, 1020})),
            "three identical runs of the base configuration, two at the start of the lab and one at its end, differed by up to 2.0% "
            "in images/s (1.0% between the two at the start); rows closer than 3% are still called alike (a few runs can agree by luck)");
  EXPECT_EQ(lab::noise_of({1000}).runs, 0);
  // Runs that shared the CPUs with other work are said: their difference is partly the load's.
  lab::Noise shared = drift;
  shared.shared_runs = 1;
  EXPECT_EQ(lab::noise_sentence(shared),
            "three identical runs of the base configuration, two at the start of the lab and one at its end, differed by up to 30.0% "
            "in images/s (1.0% between the two at the start; the one at the end ran 29.4% faster than those at the start: the machine's "
            "speed changed while the lab ran), so rows closer than "
            "that are called alike; 1 of them shared the CPUs with other work, so part of the difference is the machine's load");
  // A call into the engine that moved by more than 25% over the lab is said; one that did not is not.
  lab::Noise moved = pair;
  moved.call_start_us = 1.14, moved.call_end_us = 2.65;
  EXPECT_EQ(lab::noise_sentence(moved), lab::noise_sentence(pair) + "; meanwhile a call into the engine went from 1.14 to 2.65 us, so "
                                        "the round trip between the cores changed (as when a VM's vCPUs are placed elsewhere), and every "
                                        "step with it");
  moved.call_end_us = 1.3;
  EXPECT_EQ(lab::noise_sentence(moved), lab::noise_sentence(pair));
  shared = pair;
  shared.shared_runs = 2;
  EXPECT_EQ(lab::noise_sentence(shared), "two identical runs of the base configuration differed by 4.7% in images/s, so rows closer "
                                         "than that are called alike; both shared the CPUs with other work, so part of the difference "
                                         "is the machine's load");
}

// Rows say when their run shared the CPUs with other work, and the report says how many did: a
// run counted once, however many experiments show it.
TEST(Lab, SharedCpusAreSaidRowByRowAndOverTheLab) {
  json calm = {{"status", "measured"}, {"note", ""}, {"host_busy_pct", 1.5}, {"total_s", 30.0}, {"record", "runs/a.json"}};
  lab::Experiment batch, model;
  batch.rows = {calm, calm};
  batch.rows[1]["record"] = "runs/b.json";
  batch.rows[1]["host_busy_pct"] = 4.0;
  model.rows = {calm, json{{"status", "missing"}, {"note", "no GPU"}}};
  EXPECT_EQ(lab::shared_cpus_sentence({batch, model}),
            "no run shared the CPUs with other work: other processes and the hypervisor took at most 4% of their time during any run");
  // A run under a second spans too few of the kernel's 10 ms ticks: one stray tick read as 100%.
  json blip = calm;
  blip["record"] = "runs/blip.json";
  blip["total_s"] = 0.02;
  blip["host_busy_pct"] = 100.0;
  lab::Experiment quick;
  quick.rows = {blip};
  EXPECT_EQ(lab::shared_cpus_sentence({quick}),
            "every run took under a second, too short for the kernel's 10 ms clock to tell whether other work shared the CPUs");
  EXPECT_EQ(lab::shared_cpus_sentence({batch, model, quick}),
            "no run shared the CPUs with other work: other processes and the hypervisor took at most 4% of their time during any run "
            "of a second or more (shorter ones are too short to tell)");
  model.rows.push_back({{"status", "measured"}, {"note", "CPUs shared: other processes used 37% of the 2 CPUs' time"},
                        {"host_busy_pct", 37.2}, {"host_shared", true}, {"total_s", 30.0}, {"record", "runs/c.json"}});
  EXPECT_EQ(lab::shared_cpus_sentence({batch, model}),
            "1 of 3 runs shared the CPUs with other work (up to 37% of their time; those rows' notes say so), so they read slow");
  EXPECT_EQ(lab::row_note(model.rows[2]), "CPUs shared: other processes used 37% of the 2 CPUs' time");
  EXPECT_EQ(lab::row_note(model.rows[1]), "missing: no GPU");
  EXPECT_EQ(lab::row_note(calm), "");
  // Records from before dlperf kept the host's load say nothing, and neither does the report.
  calm["host_busy_pct"] = nullptr;
  batch.rows = {calm};
  EXPECT_EQ(lab::shared_cpus_sentence({batch}), "");
}

TEST(Lab, WorkerAndDeviceObservationsFollowTheData) {
  lab::Experiment w;
  w.name = "workers";
  auto wr = [](int n, double ips, double wait) {
    json r = row({{"workers", n}}, 1, ips, 90, 10);
    r["data_wait_pct"] = wait;
    return r;
  };
  w.rows = {wr(0, 1000, 30), wr(2, 1010, 2)};
  EXPECT_TRUE(says(lab::observe(w), "barely matters"));
  EXPECT_TRUE(says(lab::observe(w), "waits for data 30.0% of the time; with 2 workers, 2.0%"));
  w.rows[1]["images_per_s"] = 1400;
  EXPECT_TRUE(says(lab::observe(w), "The fastest is 2 workers at 1400 img/s, 1.40x the slowest"));
  EXPECT_FALSE(says(lab::observe(w), "at most"));  // 30% of the step loading: up to 1.43x is the workers' to gain
  // With hardly any loading to take off the training thread, a large gain is the machine's drift.
  w.rows[0]["data_wait_pct"] = 0.3;
  EXPECT_TRUE(says(lab::observe(w), "With 0 workers loading took 0.3% of the step, so moving it to workers can make a step at most "
                                    "0.3% faster; the 1.40x that 2 workers measured is beyond that"))
      << lab::observe(w).back();
  w.rows[1]["images_per_s"] = 1020;  // within the noise floor: no claim either way
  EXPECT_FALSE(says(lab::observe(w), "at most"));
  // The loader alone, against what training took with the same workers.
  EXPECT_FALSE(says(lab::observe(w), "The loader alone"));
  w.rows[0]["loader_images_per_s"] = 4.26e6;
  EXPECT_TRUE(says(lab::observe(w), "The loader alone delivers 4.3 million img/s with 0 workers (loading in the training thread), 4260x "
                                    "the 1000 img/s training took: loading cannot be what holds training back here."));
  w.rows[0]["loader_images_per_s"] = 1500.0;
  EXPECT_TRUE(says(lab::observe(w), "1.5x the 1000 img/s training took: loading is a large part of each step"));

  lab::Experiment d;
  d.name = "device";
  d.rows = {row({{"device", "cpu"}, {"workload", "medium"}, {"batch", 64}}, 30, 2000, 90, 60),
            row({{"device", "cuda"}, {"workload", "medium"}, {"batch", 64}}, 3, 20000, 90, 60),
            row({{"device", "cpu"}, {"workload", "mlp"}, {"batch", 16}}, 0.05, 0, 90, 1),
            row({{"device", "cuda"}, {"workload", "mlp"}, {"batch", 16}}, 0.2, 0, 90, 1)};
  auto obs = lab::observe(d);
  EXPECT_TRUE(says(obs, "medium at batch 64: the GPU trains 10.0x faster than the CPU (3.0 s vs 30.0 s per epoch)"));
  EXPECT_TRUE(says(obs, "mlp at batch 16: the CPU wins, 4.0x faster than the GPU"));
  // Why, in the runs' numbers: without a kernel count, the work a step does; with one (the GPU's
  // captured step), the kernels and their average time against the arithmetic they do.
  d.rows[3]["mflops_per_step"] = 3.3;
  EXPECT_TRUE(says(lab::observe(d), "3.3 MFLOP a step is too little work to pay for the GPU's fixed cost of launching kernels"))
      << lab::observe(d)[1];
  d.rows[3]["kernels_per_step"] = 30;
  d.rows[3]["step_ms"] = 0.15;
  EXPECT_TRUE(says(lab::observe(d), "the GPU's step runs 30 kernels, 5.00 us each on average, for 3.3 MFLOP in all (0.11 a kernel)"))
      << lab::observe(d)[1];
  d.rows[3]["epoch_s"] = 0.052;  // 4% apart, within a 5% run-to-run noise
  d.noise_pct = 5;
  // A tiny workload's times keep their digits: 52.0 ms, not 0.05 s.
  EXPECT_TRUE(says(lab::observe(d), "mlp at batch 16: the GPU and the CPU train about as fast (52.0 ms vs 50.0 ms per epoch)"))
      << lab::observe(d)[1];
  d.rows[1]["status"] = "missing";
  d.rows[1]["note"] = "no GPU";
  obs = lab::observe(d);
  EXPECT_FALSE(says(obs, "the GPU trains"));

  // Where the CPU starts to win, from the work a step does: medium (GPU), mlp (GPU), logreg (CPU).
  lab::Experiment x;
  x.name = "device";
  x.rows = {row({{"device", "cpu"}, {"workload", "medium"}, {"batch", 64}}, 30, 2000, 90, 60),
            row({{"device", "cuda"}, {"workload", "medium"}, {"batch", 64}, {"mflops_per_step", 2961.13}}, 3, 20000, 90, 60),
            row({{"device", "cpu"}, {"workload", "mlp"}, {"batch", 16}}, 0.08, 0, 90, 1),
            row({{"device", "cuda"}, {"workload", "mlp"}, {"batch", 16}, {"mflops_per_step", 3.28}}, 0.05, 0, 90, 1),
            row({{"device", "cpu"}, {"workload", "logreg"}, {"batch", 16}}, 0.012, 0, 90, 1),
            row({{"device", "cuda"}, {"workload", "logreg"}, {"batch", 16}, {"mflops_per_step", 0.5}}, 0.03, 0, 90, 1)};
  EXPECT_TRUE(says(lab::observe(x), "The crossover lies between logreg (0.50 MFLOP a step, the CPU faster) and mlp (3.28 MFLOP a step, "
                                    "the GPU faster): with less work a step, the GPU's fixed cost of a step outweighs its speed."))
      << lab::observe(x).back();
  x.rows[5]["epoch_s"] = x.rows[5]["step_ms"] = 0.01;  // the GPU faster on logreg too
  EXPECT_TRUE(says(lab::observe(x), "The GPU wins even on logreg, the least work here (0.50 MFLOP a step: 10.0 us a step against the "
                                    "CPU's 12.0 us): on this machine no workload of this lab is small enough for the CPU to win."))
      << lab::observe(x).back();
  x.rows[5]["epoch_s"] = x.rows[5]["step_ms"] = 0.0121;  // alike on logreg: the GPU has not won them all, and no crossover is seen
  EXPECT_FALSE(says(lab::observe(x), "The GPU wins even")) << lab::observe(x).back();
  EXPECT_FALSE(says(lab::observe(x), "crossover")) << lab::observe(x).back();
  x.rows[5]["epoch_s"] = x.rows[5]["step_ms"] = 0.03;
  x.rows[3]["epoch_s"] = x.rows[3]["step_ms"] = 0.2;  // the CPU wins on mlp and logreg, the GPU on medium
  EXPECT_TRUE(says(lab::observe(x), "The crossover lies between mlp (3.28 MFLOP a step, the CPU faster) and medium (2961 MFLOP a step"))
      << lab::observe(x).back();
  x.rows[3]["epoch_s"] = x.rows[3]["step_ms"] = 0.05;
  x.rows[1]["epoch_s"] = x.rows[1]["step_ms"] = 60;  // the CPU on medium, the GPU on mlp: not split by work, so no claim
  EXPECT_FALSE(says(lab::observe(x), "crossover")) << lab::observe(x).back();
  x.rows.resize(4);  // one workload on both devices with a GPU verdict left: nothing to compare
  x.rows[1]["status"] = "missing";
  EXPECT_FALSE(says(lab::observe(x), "crossover"));
  EXPECT_FALSE(says(lab::observe(x), "wins even"));

  // The tiny workload on every core and on one thread: the sentence says which is faster and
  // why, and the GPU is compared with the faster of the two, named.
  lab::Experiment t;
  t.name = "device";
  t.rows = {row({{"device", "cpu"}, {"workload", "mlp"}, {"batch", 16}, {"threads", 2}}, 0.13, 0, 90, 1),
            row({{"device", "cpu"}, {"workload", "mlp"}, {"batch", 16}, {"threads", 1}}, 0.10, 0, 90, 1),
            row({{"device", "cuda"}, {"workload", "mlp"}, {"batch", 16}}, 0.2, 0, 90, 1)};
  t.rows[0]["step_ms"] = 0.065, t.rows[1]["step_ms"] = 0.05, t.rows[2]["step_ms"] = 0.1;
  obs = lab::observe(t);
  ASSERT_EQ(obs.size(), 2u);
  EXPECT_TRUE(says(obs, "mlp at batch 16 on the CPU: 1 thread trains 1.30x faster than 2 threads (50.0 us vs 65.0 us a step): its ops "
                        "are too small to share between cores, so each call into the engine costs the threads' round trip for little work."))
      << obs[0];
  // With a loader worker, one thread leaves it a core of its own; two workers would not fit.
  t.rows[1]["workers"] = 1;
  EXPECT_TRUE(says(lab::observe(t), "for little work, and the data loader's worker gets a core of its own instead of sharing them "
                                    "with the compute threads."))
      << lab::observe(t)[0];
  t.rows[1]["workers"] = 2;
  EXPECT_TRUE(says(lab::observe(t), "for little work.")) << lab::observe(t)[0];
  t.rows[1].erase("workers");
  // The runs' records measured a call's cost around them: the sentence gives both.
  t.rows[0]["call_us"] = 1.42, t.rows[1]["call_us"] = 0.49;
  EXPECT_TRUE(says(lab::observe(t), "costs the threads' round trip (1.42 us a call on 2 threads around that run, 0.49 on 1 thread) "
                                    "for little work."))
      << lab::observe(t)[0];
  t.rows[1]["call_us"] = nullptr;  // an older record: no figures
  EXPECT_TRUE(says(lab::observe(t), "costs the threads' round trip for little work.")) << lab::observe(t)[0];
  // Where its smallest layers ran on one thread on every core too, the sentence blames the larger.
  t.rows[0]["one_thread_layers"] = {"relu1", "fc2"};
  EXPECT_TRUE(says(lab::observe(t), ": its larger layers are too small to share between cores, so each call into the engine costs the "
                                    "threads' round trip for little work (relu1 and fc2 already ran on one thread)."))
      << lab::observe(t)[0];
  t.rows[0].erase("one_thread_layers");
  t.rows[0].erase("call_us"), t.rows[1].erase("call_us");
  EXPECT_TRUE(says(obs, "mlp at batch 16: the CPU (1 thread) wins, 2.0x faster than the GPU (50.0 us vs 100 us per step)")) << obs[1];
  t.rows[1]["epoch_s"] = 0.26;  // one thread twice as slow: the all-core row is the CPU's best
  obs = lab::observe(t);
  EXPECT_TRUE(says(obs, "1 thread trains 2.00x slower than 2 threads (50.0 us vs 65.0 us a step).")) << obs[0];
  EXPECT_TRUE(says(obs, "the CPU (2 threads) wins, 1.5x faster than the GPU")) << obs[1];
  t.rows[1]["epoch_s"] = 0.128;  // within the noise: alike, and no reason given
  obs = lab::observe(t);
  EXPECT_TRUE(says(obs, "1 thread trains about as fast as 2 threads (50.0 us vs 65.0 us a step).")) << obs[0];
  t.rows[2]["status"] = "missing";  // no GPU: the CPU's best row is the one described
  obs = lab::observe(t);
  EXPECT_TRUE(says(obs, "mlp at batch 16 on the CPU (1 thread): 128 ms per epoch")) << obs[1];
}

TEST(Lab, ModelObservationsFollowTheData) {
  lab::Experiment m;
  m.name = "model";
  auto model_row = [](const char* name, double params_m, double mflops, double epoch_s, double acc, double gflops) {
    json r = row({{"model", name}}, epoch_s, 1000, acc, 10 * params_m);
    r["parameters_m"] = params_m, r["mflops_per_image"] = mflops, r["achieved_gflops"] = gflops;
    return r;
  };
  m.rows = {model_row("small", 0.03, 12, 1.7, 87.7, 150), model_row("medium", 0.27, 46, 5.2, 87.1, 190),
            model_row("large", 4.0, 546, 53.6, 86.4, 220)};
  auto obs = lab::observe(m);
  EXPECT_TRUE(says(obs, "large has 133x the parameters and 45.5x the training FLOPs per image of small")) << obs[0];
  EXPECT_TRUE(says(obs, "Achieved compute rises from 150.0 GFLOP/s (small) to 220.0 GFLOP/s (large): larger layers")) << obs[1];
  EXPECT_TRUE(says(obs, "Peak memory: 300 KB for small, 40.0 MB for large.")) << obs[2];
  EXPECT_TRUE(says(obs, "The best test accuracy is small's, 87.70%.")) << obs[3];
  EXPECT_FALSE(says(obs, "Winograd"));
  // Convolutions that ran as Winograd are named: their GFLOP/s overcounts the multiplies.
  m.rows[1]["winograd_layers"] = {"conv2", "conv3"};
  m.rows[2]["winograd_layers"] = {"conv2"};
  EXPECT_TRUE(says(lab::observe(m), "Winograd convolutions (medium's conv2 and conv3; large's conv2) do fewer multiplies than the "
                                    "FLOPs count, so a model's GFLOP/s with them is the rate direct convolutions would need"));
  m.rows[1].erase("winograd_layers"), m.rows[2].erase("winograd_layers");
  // Measured on 5000 test images, 0.6 points ahead is within what they resolve (1.3 points).
  for (auto& r : m.rows) r["test_images"] = 5000;
  obs = lab::observe(m);
  EXPECT_TRUE(says(obs, "The best test accuracy is small's, 87.70%; medium's 87.10% is within the 1.3 points that 5000 test images can resolve."))
      << obs[3];
  m.rows[1]["test_acc"] = 80.0;  // 7.7 points behind: the best is the best
  m.rows[2]["test_acc"] = 81.0;
  EXPECT_TRUE(says(lab::observe(m), "The best test accuracy is small's, 87.70%.")) << lab::observe(m)[3];
  m.rows[2]["test_acc"] = 87.7;  // the same accuracy is a tie, not a ranking
  EXPECT_TRUE(says(lab::observe(m), "small and large tie for the best test accuracy, 87.70%.")) << lab::observe(m)[3];
  // Ratios under 10 keep a decimal: 2.4x the parameters, not "2x".
  m.rows[1]["parameters_m"] = 0.072;
  m.rows.pop_back();
  EXPECT_TRUE(says(lab::observe(m), "medium has 2.4x the parameters")) << lab::observe(m)[0];
  // Models are compared by the work an image takes: the mlp has more parameters than small and
  // 60x fewer FLOPs, so small is the larger one (it read "mlp has 1.7x the parameters and 0.0x
  // the training FLOPs per image of small").
  m.rows = {model_row("mlp", 0.051, 0.2, 0.004, 73.8, 115), model_row("small", 0.029, 11.8, 0.092, 68.8, 278)};
  obs = lab::observe(m);
  EXPECT_TRUE(says(obs, "small has 0.57x the parameters and 59.0x the training FLOPs per image of mlp, and takes 23.0x as long "
                        "per epoch (92.0 ms vs 4.00 ms).")) << obs[0];
  EXPECT_TRUE(says(obs, "Achieved compute rises from 115.0 GFLOP/s (mlp) to 278.0 GFLOP/s (small)")) << obs[1];
}

TEST(Lab, PrecisionObservationsFollowTheData) {
  lab::Experiment p;
  p.name = "precision";
  p.rows = {row({{"precision", "fp32"}, {"device", "cuda"}}, 10, 5000, 91.0, 400),
            row({{"precision", "bf16"}, {"device", "cuda"}}, 5, 10000, 90.8, 250),
            row({{"precision", "fp16"}, {"device", "cuda"}, {"loss_scale_skips", 3}}, 4, 12500, 91.1, 250)};
  auto obs = lab::observe(p);
  EXPECT_TRUE(says(obs, "bf16 trains 2.00x faster than fp32 (10000 vs 5000 img/s), peak memory 250 MB vs 400 MB")) << obs[0];
  // With the test set's size, a change the test images cannot tell from chance says so: 0.2
  // points on 5000 images is within 2 standard errors (1.2 points); 3.0 points on 10000 is not.
  for (auto& r : p.rows) r["test_images"] = 5000;
  obs = lab::observe(p);
  EXPECT_TRUE(says(obs, "test accuracy fell 0.2 points (90.80% vs 91.00%), within the 1.2 points that 5000 test images can resolve."))
      << obs[0];
  p.rows[1]["test_acc"] = 88.0;
  for (auto& r : p.rows) r["test_images"] = 10000;
  obs = lab::observe(p);
  EXPECT_TRUE(says(obs, "test accuracy fell 3.0 points (88.00% vs 91.00%).")) << obs[0];
  p.rows[1]["test_acc"] = 90.8;
  EXPECT_TRUE(says(obs, "skipped 3 steps whose gradients overflowed"));
  p.rows[2]["loss_scale_skips"] = 0;
  EXPECT_TRUE(says(lab::observe(p), "skipped no step"));
  p.rows[1]["images_per_s"] = 4650;  // 7% slower: a difference with 3% noise, none with 10%
  p.rows[1]["peak_mb"] = 15.5;        // small models' memory keeps a decimal
  p.noise_pct = 3;
  EXPECT_TRUE(says(lab::observe(p), "bf16 trains 7% slower than fp32 (4650 vs 5000 img/s), peak memory 15.5 MB vs 400 MB"));
  // The speed is the training throughput, as the noise is measured, not s/epoch, which also
  // holds the evaluation: a slow first evaluation does not make bf16 "about as fast".
  p.rows[1]["images_per_s"] = 10000;
  p.rows[1]["epoch_s"] = 9.5;
  EXPECT_TRUE(says(lab::observe(p), "bf16 trains 2.00x faster than fp32")) << lab::observe(p)[0];
  p.rows[1]["images_per_s"] = 4650;
  p.noise_pct = 10;
  EXPECT_TRUE(says(lab::observe(p), "bf16 trains about as fast as fp32"));
  // On a CPU, whether bf16 has more arithmetic to offer at all, from the ceilings measured.
  json cpu_fp32 = row({{"precision", "fp32"}, {"device", "cpu"}}, 6, 3700, 86.7, 61);
  json cpu_bf16 = row({{"precision", "bf16"}, {"device", "cpu"}}, 8.7, 2480, 86.8, 37);
  cpu_fp32["ceiling_gflops"] = 330.0;
  cpu_bf16["ceiling_gflops"] = 161.0;  // an Intel Xeon VM's, 2026-11-28
  lab::Experiment c{"precision", "Precision", "", {}, {cpu_fp32, cpu_bf16}, {}, {}};
  obs = lab::observe(c);
  EXPECT_TRUE(says(obs, "This CPU's bf16 dot products peak at 0.49x its fp32 multiply-adds (161 vs 330 GFLOP/s, measured): bf16 has no "
                        "more arithmetic to offer here")) << obs[1];
  c.rows[1]["ceiling_gflops"] = 640.0;  // a Zen 4's
  EXPECT_TRUE(says(lab::observe(c), "peak at 1.94x its fp32 multiply-adds (640 vs 330 GFLOP/s, measured): bf16 gains where compute"));
  c.rows[1]["ceiling_gflops"] = 5991.0;  // a Xeon's AMX tiles, 2026-11-29, where the run's layers ran on them
  c.rows[1]["amx_layers"] = {"conv2", "conv3", "fc1"};
  EXPECT_TRUE(says(lab::observe(c), "This CPU's AMX tiles multiply bf16 at 18.2x its fp32 multiply-adds (5991 vs 330 GFLOP/s, measured), "
                                    "and conv2, conv3 and fc1 ran there"))
      << lab::observe(c)[1];
  c.rows[1].erase("amx_layers");
  c.rows[1]["ceiling_gflops"] = nullptr;  // a report from before the column: no sentence
  EXPECT_FALSE(says(lab::observe(c), "dot products"));
  p.rows[1] = {{"precision", "bf16"}, {"device", "cpu"}, {"status", "missing"}, {"note", "bf16 training needs AVX512-BF16"}};
  EXPECT_TRUE(says(lab::observe(p), "AVX512-BF16"));
}

// The planner's table: memory to the byte or how far off, and step time's median and worst error.
TEST(Lab, PlanObservationsFollowTheData) {
  auto plan_row = [](const char* run, double planned_ms, double ms, double peak_mb, double error_bytes) {
    return json{{"run", run}, {"step_ms_planned", planned_ms}, {"step_ms", ms}, {"step_ratio", planned_ms / ms},
                {"peak_mb_planned", peak_mb + error_bytes / 1e6}, {"peak_mb", peak_mb}, {"peak_error_bytes", error_bytes},
                {"status", "measured"}, {"note", ""}};
  };
  lab::Experiment p;
  p.name = "plan";
  p.rows = {plan_row("medium b64 w1", 15.0, 16.0, 58.5, 0), plan_row("mlp b16 w1", 0.15, 0.12, 1.0, 0),
            plan_row("large b64 w1", 170, 160, 238.0, 0)};
  p.noise_pct = 1.5;
  auto obs = lab::observe(p);
  EXPECT_TRUE(says(obs, "predicted the peak memory of all 3 runs to the byte")) << obs[0];
  // |errors| 6.25%, 25%, 6.25%: median 6.25%, worst the mlp's.
  EXPECT_TRUE(says(obs, "within a median 6.2% of the measured (3 runs: worst mlp b16 w1, planned 150 us against 120 us "
                        "measured); identical runs differed by up to 1.5% in speed")) << obs[1];
  p.rows[1]["note"] = "CPUs shared: other processes used 37% of the 2 CPUs' time";  // its row says why it was off
  EXPECT_TRUE(says(lab::observe(p), "(3 runs: worst mlp b16 w1, planned 150 us against 120 us measured, a run that shared the CPUs "
                                    "with other work)")) << lab::observe(p)[1];
  p.rows[1]["note"] = "";
  p.rows[2]["peak_error_bytes"] = -476000.0;  // 0.2% under
  p.rows[2]["peak_mb_planned"] = 237.524;
  obs = lab::observe(p);
  EXPECT_TRUE(says(obs, "peak memory of 2 of 3 runs to the byte; the furthest off was large b64 w1 (0.20%: planned 237.52 MB, "
                        "measured 238.00 MB)")) << obs[0];
  p.rows[1] = {{"run", "x.json"}, {"status", "missing"}, {"note", "a GPU run on a GPU the catalog lacks"}};
  obs = lab::observe(p);
  EXPECT_TRUE(says(obs, "Not planned: x.json missing: a GPU run on a GPU the catalog lacks."));
  EXPECT_TRUE(says(obs, "(2 runs: worst medium b64 w1"));
  p.rows[2]["peak_error_bytes"] = 0.0;  // two planned runs, both to the byte: "both runs", not "all 2 runs"
  EXPECT_TRUE(says(lab::observe(p), "dlperf plan predicted the peak memory of both runs to the byte.")) << lab::observe(p)[0];
}

}  // namespace
}  // namespace dlperf::test

// The lab's report folder: a CSV per experiment, lab.json, gnuplot PNGs, and README.md that
// embeds the plots, describes the machine and states the observations.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/json_error.h"
#include "core/text.h"
#include "core/timer.h"
#include "core/version.h"
#include "lab/lab.h"
#include "report/plot.h"

namespace dlperf::lab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string csv_cell(const json& v) {
  if (v.is_null()) return "";
  if (!v.is_string()) return v.dump();
  std::string s = v.get<std::string>();
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

void write_file(const fs::path& path, const std::string& body) {
  write_file_atomically(path.string(), body, "pick a writable --out directory");
}

void write_csv(const Experiment& e, const fs::path& path) {
  std::string s;
  for (const auto& c : e.columns) s += c.key + ",";
  s += "status,note\n";
  for (const auto& r : e.rows) {
    for (const auto& c : e.columns) s += csv_cell(r.value(c.key, json())) + ",";
    s += csv_cell(r["status"]) + "," + csv_cell(r["note"]) + "\n";
  }
  write_file(path, s);
}

// One plot: a line per series over a numeric x, or bars over labelled rows.
struct Series {
  std::string title;
  std::function<bool(const json&)> keep;
};
struct Plot {
  std::string stem, title, xlabel, ylabel;
  std::string x;               ///< numeric x column; empty = bars labelled by `label`
  std::function<std::string(const json&)> label;
  std::string y;
  std::vector<Series> series;
  bool log2x = false;
  bool logy = false;  ///< for bars hundreds of times apart (the device plot's base and tiny workloads)
};

std::vector<Plot> plots_for(const Experiment& e) {
  auto all = [](const json&) { return true; };
  auto rule = [](const char* r) { return [r](const json& row) { return row["lr_rule"] == r; }; };
  auto field = [](const char* k) { return [k](const json& r) { return r[k].get<std::string>(); }; };
  if (e.name == "device")
    return {{"device-time", "Seconds per epoch by device", "", "seconds per epoch", "",
             [](const json& r) {
               // The tiny workload's one-thread CPU row beside its all-core one.
               const bool one_thread = r["device"] == "cpu" && r.value("threads", json()) == 1;
               return fmt::format("{}{} {} b{}", r["device"].get<std::string>(), one_thread ? " 1 thread" : "",
                                  r["workload"].get<std::string>(), r["batch"].get<int64_t>());
             },
             "epoch_s", {{"measured", all}}, false, true}};
  if (e.name == "batch")
    return {{"batch-throughput", "Throughput by batch size", "batch size", "images per second", "batch", nullptr, "images_per_s",
             {{"fixed lr", rule("fixed")}, {"linear lr scaling", rule("linear")}}, true},
            {"batch-accuracy", "Test accuracy by batch size", "batch size", "test accuracy (%)", "batch", nullptr, "test_acc",
             {{"fixed lr", rule("fixed")}, {"linear lr scaling", rule("linear")}}, true},
            {"batch-memory", "Peak memory by batch size", "batch size", "peak tracked memory (MB)", "batch", nullptr, "peak_mb",
             {{"fixed lr", rule("fixed")}}, true}};
  if (e.name == "model")
    return {{"model-time", "Seconds per epoch by model", "", "seconds per epoch", "", field("model"), "epoch_s", {{"measured", all}}, false},
            {"model-gflops", "Achieved GFLOP/s by model", "", "GFLOP/s (forward + backward)", "", field("model"), "achieved_gflops",
             {{"measured", all}}, false}};
  if (e.name == "workers")
    return {{"workers-throughput", "Throughput by data-loader workers", "workers", "images per second", "workers", nullptr,
             "images_per_s", {{"measured", all}}, false},
            {"workers-wait", "Data wait by data-loader workers", "workers", "share of the step waiting for data (%)", "workers",
             nullptr, "data_wait_pct", {{"measured", all}}, false}};
  if (e.name == "precision")
    return {{"precision-time", "Seconds per epoch by precision", "", "seconds per epoch", "", field("precision"), "epoch_s",
             {{"measured", all}}, false}};
  if (e.name == "plan")
    return {{"plan-step", "dlperf plan: planned / measured step time (1 = exact)", "", "planned / measured step time", "",
             field("run"), "step_ratio", {{"measured", all}}, false}};
  return {};
}

// Writes the data files and the script for one plot and runs gnuplot; returns the PNG's path
// relative to the report folder, or "" when no row of it was measured.
std::string draw(const Plot& p, const Experiment& e, const fs::path& out) {
  const auto rows = e.measured();
  const fs::path dir = out / "plots";
  std::string plot_cmd;
  bool any = false;
  for (size_t i = 0; i < p.series.size(); ++i) {
    std::string dat;
    for (const auto& r : rows) {
      if (!p.series[i].keep(r) || r.value(p.y, json()).is_null()) continue;
      dat += p.x.empty() ? fmt::format("\"{}\" {}\n", p.label(r), r[p.y].dump()) : fmt::format("{} {}\n", r[p.x].dump(), r[p.y].dump());
    }
    if (dat.empty()) continue;
    any = true;
    const std::string file = fmt::format("{}-{}.dat", p.stem, i);
    write_file(dir / file, dat);
    plot_cmd += plot_cmd.empty() ? "plot " : ", ";
    plot_cmd += p.x.empty() ? fmt::format("'{}' using 0:2:xtic(1) with boxes fs solid 0.6 lc rgb '#4477aa' notitle, "
                                          "'{}' using 0:2:(sprintf('%.3g', $2)) with labels offset 0,0.8 notitle",
                                          (dir / file).string(), (dir / file).string())
                            : fmt::format("'{}' using 1:2 with linespoints lw 2 pt 7 title '{}'", (dir / file).string(), p.series[i].title);
  }
  if (!any) return "";
  const fs::path png = dir / (p.stem + ".png"), gp = dir / (p.stem + ".gp");
  std::string script = fmt::format(
      "# Made by dlperf lab. Rerun with: gnuplot {}\n"
      "set terminal pngcairo size 900,560 enhanced font 'Sans,10'\nset output '{}'\nset title '{}'\n"
      "set ylabel '{}'\nset grid ytics\nset key top left\n{}\n",
      gp.string(), png.string(), p.title, p.ylabel, p.logy ? "set logscale y\nset yrange [*:*]" : "set yrange [0:*]");
  if (p.x.empty())  // bars; more than four labels are slanted so that they do not overlap
    script += fmt::format("set style fill solid\nset boxwidth 0.6\nset xtics nomirror{}\nset offsets 0.5,0.5,0,0\n",
                          rows.size() > 4 ? " rotate by 30 right" : "");
  else
    script += fmt::format("set xlabel '{}'\n{}set offsets graph 0.05, graph 0.05, 0, 0\n", p.xlabel, p.log2x ? "set logscale x 2\n" : "");
  script += plot_cmd + "\n";
  write_file(gp, script);
  report::run_gnuplot(gp.string(), png.string());
  return (fs::path("plots") / (p.stem + ".png")).string();
}

std::string markdown_table(const Experiment& e) {
  std::string s = "|";
  for (const auto& c : e.columns) s += " " + c.header + " |";
  s += " note |\n|";
  for (const auto& c : e.columns) s += c.decimals == kText ? " --- |" : " ---: |";
  s += " --- |\n";
  for (const auto& r : e.rows) {
    s += "|";
    for (const auto& c : e.columns) s += fmt::format(" {} |", cell_text(r.value(c.key, json()), c.decimals));
    s += fmt::format(" {} |\n", row_note(r));
  }
  return s;
}

// "NVIDIA H100 80GB HBM3 (132 SMs, compute capability 9.0, 85.0 GB, driver 13.0, CUDA runtime 13.0)".
std::string gpu_text(const json& g) {
  const std::string unknown = "?";
  if (!value_field(g, "present", false)) return "none: " + value_field(g, "reason", unknown);
  return fmt::format("{} ({} SMs, compute capability {}, {:.1f} GB, driver {}, CUDA runtime {})", value_field(g, "name", unknown),
                     value_field(g, "sm_count", 0), value_field(g, "compute_capability", unknown),
                     value_field(g, "memory_bytes", 0.0) / 1e9, value_field(g, "driver_version", unknown),
                     value_field(g, "runtime_version", unknown));
}

// The report's machine section, from lab.json's `machine`: a field of the wrong type there is
// named ("machine.cpu.cores: type must be number, but is string"), as everywhere in lab.json.
std::string machine_text(const json& m) {
  return within("machine", [&] {
    const std::string unknown = "?";
    const json c = object_field(as_object(m), "cpu"), g = object_field(m, "gpu");
    const std::string cpu = within("cpu", [&] {
      return fmt::format("{} ({} cores usable, {}, {}, {:.2f} GHz reported)\n- **Memory:** {:.1f} GB", value_field(c, "model", unknown),
                         value_field(c, "cores", 0), value_field(c, "isa", unknown), value_field(c, "caches", unknown),
                         value_field(c, "ghz", 0.0), value_field(c, "memory_gb", 0.0));
    });
    const std::string gpu = within("gpu", [&] { return gpu_text(g); });
    auto line = [&](const char* key, const char* title) {
      return m.contains(key) ? fmt::format("- **{}:** {}\n", title, field<std::string>(m, key)) : std::string();
    };
    return fmt::format("- **CPU:** {}\n- **OS:** {}\n- **GPU:** {}\n- **Software:** dlperf {} (commit {}), oneDNN {}\n", cpu,
                       value_field(m, "os", unknown), gpu, value_field(m, "dlperf", unknown),
                       value_field(m, "dlperf_commit", std::string("unknown")), value_field(m, "onednn", unknown)) +
           line("huge_pages", "Huge pages") + line("cpu_max_pool_nChw16c", "CPU max pooling (nChw16c)") +
           line("cpu_winograd", "CPU convolutions");
  });
}

// "20000 training and 5000 test images, 1 epoch", from the first measured row.
std::string run_size(const std::vector<Experiment>& exps) {
  for (const auto& e : exps)
    for (const auto& r : e.measured())
      return fmt::format("{} training and {} test images, {} epoch{}", r.value("train_images", 0), r.value("test_images", 0),
                         r.value("epochs", 0), r.value("epochs", 0) == 1 ? "" : "s");
  return "no run was measured";
}

}  // namespace

void write_report(std::vector<Experiment>& exps, const LabConfig& cfg, const json& machine, const LabTotals& totals) {
  const double lab_seconds = totals.seconds;
  const Noise& noise = totals.noise;
  const size_t reused_runs = totals.reused_runs;
  const TimeEstimate& planned = totals.planned;  // lab.json's "planned"
  const fs::path out(cfg.out);
  std::error_code ec;
  fs::create_directories(out / "plots", ec);
  check(!ec, fmt::format("cannot create the report folder {}: {}", cfg.out, ec.message()), "pick a writable --out directory");

  const bool gnuplot = report::gnuplot_available();
  if (!gnuplot && !cfg.quiet)
    std::printf("note: gnuplot with the pngcairo terminal was not found, so the lab draws no plots; the CSV and JSON are "
                "written (Debian: apt-get install gnuplot-nox)\n");
  for (auto& e : exps) {
    write_csv(e, out / (e.name + ".csv"));
    e.plots.clear();
    if (gnuplot)
      for (const auto& p : plots_for(e))
        if (std::string png = draw(p, e, out); !png.empty()) e.plots.push_back(png);
  }

  std::string date = totals.created;
  if (date.empty()) {
    const std::time_t now = std::time(nullptr);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&now));
    date = buf;
  }
  json j = {{"dlperf_version", dlperf_version()}, {"dlperf_commit", dlperf_commit()}, {"command", "lab"}, {"mode", cfg.full.value_or(false) ? "full" : "quick"},
            {"created", date}, {"seconds", lab_seconds}, {"reused_runs", reused_runs}, {"noise_pct", noise.pct},
            {"noise_start_pct", noise.start_pct}, {"noise_end_change_pct", noise.end_change_pct}, {"noise_runs", noise.runs}, {"noise_shared_runs", noise.shared_runs},
            {"engine_call_us", {{"start", noise.call_start_us}, {"end", noise.call_end_us}}},
            {"planned", {{"runs", planned.runs}, {"seconds", planned.seconds}, {"unpredicted_runs", planned.unpredicted},
                         {"finished_runs", totals.check.runs}, {"finished_planned_seconds", totals.check.planned_s},
                         {"finished_measured_seconds", totals.check.measured_s}}},
            {"machine", machine}, {"data", cfg.data},
            {"experiments", json::array()}};
  if (totals.settings_known) j["settings"] = {{"model", cfg.base_model}, {"batch", cfg.base_batch}, {"lr", cfg.base_lr}};
  for (const auto& e : exps) {
    json cols = json::array();
    for (const auto& c : e.columns) cols.push_back({{"key", c.key}, {"header", c.header}, {"decimals", c.decimals}});
    j["experiments"].push_back({{"name", e.name}, {"title", e.title}, {"question", e.question}, {"columns", cols},
                                {"rows", e.rows}, {"observations", e.observations}, {"plots", e.plots},
                                {"csv", e.name + ".csv"}});
  }
  write_file(out / "lab.json", j.dump(2) + "\n");

  std::string md = fmt::format(
      "{}\n\nMade by `dlperf lab{}` on {} in {}{}. {}Every number below was measured by a training run "
      "on this machine (the run records are in `runs/`); rows that could not run say why.\n\n## Machine\n\n{}\n"
      "## Settings\n\nData: {}. Each run: {}.{}{}{}\n\n",
      kReportTitle, cfg.full.value_or(false) ? " --full" : " --quick", date, format_seconds(lab_seconds),
      reused_runs > 0 ? fmt::format(" (resumed: {} run{} reused from the interrupted lab before it)", reused_runs,
                                    reused_runs == 1 ? "" : "s")
                      : "",
      [&] {
        const std::string p = planned_against_measured(totals.check);
        return p.empty() ? p : "Its " + p + ". ";
      }(),
      machine_text(machine), cfg.data,
      run_size(exps),
      totals.settings_known ? fmt::format(" Unless an experiment varies it: model {}, batch {}, SGD (Nesterov momentum 0.9, weight decay "
                                          "5e-4) with a one-cycle lr schedule peaking at {:g}.",
                                          cfg.base_model, cfg.base_batch, cfg.base_lr)
                            : "",
      noise.runs > 0 ? fmt::format("\n\n**Run-to-run noise:** {}.", noise_sentence(noise))
                    : "",
      [&] {
        const std::string s = shared_cpus_sentence(exps);
        return s.empty() ? s : fmt::format("\n\n**Other work on the CPUs:** {}.", s);
      }());
  for (const auto& e : exps) {
    md += fmt::format("## {}\n\n{}\n\n{}\n", e.title, e.question, markdown_table(e));
    for (const auto& p : e.plots) md += fmt::format("![{}]({})\n", e.title, p);
    if (!gnuplot)
      md += "_No plots: gnuplot (Debian: gnuplot-nox) was not found when the lab ran; `dlperf lab --redraw -o FOLDER` draws them "
            "where it is._\n";
    md += "\n**Observations**\n\n";
    for (const auto& o : e.observations) md += "- " + o + "\n";
    md += fmt::format("\nData: [{0}.csv]({0}.csv), and `lab.json`.\n\n", e.name);
  }
  write_file(out / "README.md", md);
}

namespace {

// A row's cells as a lab writes them, checked before the tables, plots and observations read them:
// each column's text or number as its table prints it (or null, "-"), but never null where it
// says which run the row is, and the fields the observations read beside the columns. A cell of
// another type is named ("batch: type must be number, but is string"), not left to the reader
// that trips on it.
void check_cell_types(const json& row, const std::vector<Column>& columns) {
  using type = json::value_t;
  auto must_be = [&](const std::string& key, type t, bool or_null) {
    if (!row.contains(key)) return;
    const json& v = row[key];
    const bool ok = (or_null && v.is_null()) || (t == type::boolean ? v.is_boolean() : t == type::string ? v.is_string() : v.is_number());
    if (!ok)
      throw json::type_error::create(302, fmt::format("{}: type must be {}, but is {}", key, json(t).type_name(), v.type_name()), nullptr);
  };
  for (const Column& c : columns) must_be(c.key, c.decimals == kText ? type::string : type::number_float, true);  // null: "-"
  // The cells that say which run a row is are never null, nor what the observations read beside the columns.
  for (const char* key : {"batch", "workers", "epochs", "train_images", "test_images", "host_busy_pct"})
    must_be(key, type::number_float, false);
  for (const char* key : {"device", "workload", "model", "precision", "lr_rule", "record", "run"}) must_be(key, type::string, false);
  must_be("host_shared", type::boolean, false);
  // What the observations read where a row has it, whichever columns its experiment shows.
  for (const char* key : {"total_s", "images_per_s", "test_acc", "call_us", "mflops_per_image", "data_wait_pct", "loss_scale_skips"})
    must_be(key, type::number_float, true);
  for (const char* key : {"winograd_layers", "amx_layers", "one_thread_layers"})
    if (row.contains(key) && !(row[key].is_array() && std::all_of(row[key].begin(), row[key].end(), [](const json& v) { return v.is_string(); })))
      throw json::type_error::create(302, fmt::format("{}: type must be a list of layer names, but is {}", key, row[key].type_name()), nullptr);
}

// One column of an experiment's table as lab.json keeps it; `file` and `hint` for a refusal.
Column column_from_json(const json& c, const Experiment& e, const std::string& file, const std::string& hint) {
  const std::string key = field<std::string>(c, "key");
  const std::vector<Column> now = columns_of(e.name);
  int decimals = 2;
  if (c.contains("decimals")) {
    read_field(c, "decimals", decimals);
    check(decimals >= kOwnDigits && decimals <= 12,
          fmt::format("{} is damaged: its {} column {} has {} decimals", file, e.name, key, decimals), hint);
  } else if (auto it = std::find_if(now.begin(), now.end(), [&](const Column& col) { return col.key == key; }); it != now.end()) {
    decimals = it->decimals;  // a lab.json from before its columns kept their decimals: this dlperf's
  } else {  // nor a column this dlperf has: text where the rows hold text
    for (const json& r : e.rows)
      if (const json v = r.value(key, json()); !v.is_null()) {
        decimals = v.is_string() ? kText : 2;
        break;
      }
  }
  return {key, field<std::string>(c, "header"), decimals};
}

// One experiment of lab.json: its text, rows and columns, every row checked (check_cell_types)
// before the report draws it.
Experiment experiment_from_json(const json& je, double noise_pct, const std::string& file, const std::string& hint) {
  Experiment e;
  read_field(je, "name", e.name);
  read_field(je, "title", e.title);
  read_field(je, "question", e.question);
  read_field(je, "rows", e.rows);
  read_field(je, "observations", e.observations);
  e.noise_pct = noise_pct;
  const json& columns = je.at("columns");
  check(columns.is_array(), fmt::format("{} is damaged: its {} experiment's columns are not a list", file, e.name), hint);
  for (size_t k = 0; k < columns.size(); ++k)
    e.columns.push_back(within(fmt::format("columns[{}]", k), [&] { return column_from_json(as_object(columns[k]), e, file, hint); }));
  for (size_t k = 0; k < e.rows.size(); ++k) {  // the fields the tables and plots read of every row
    const json& r = e.rows[k];
    check(r.is_object() && r.value("status", json()).is_string() && r.value("note", json()).is_string(),
          fmt::format("{} is damaged: a row of its {} experiment has no status or note", file, e.name), hint);
    within(fmt::format("rows[{}]", k), [&] { check_cell_types(r, e.columns); });
  }
  return e;
}

}  // namespace

void redraw_report(const std::string& out, bool quiet) {
  const fs::path path = fs::path(out) / "lab.json";
  const std::string hint = "point --out at the folder of a finished lab (it holds lab.json and README.md)";
  std::ifstream f(path);
  check(bool(f), fmt::format("{} has no lab.json: there is no lab report to redraw", out), hint);
  std::stringstream text;
  text << f.rdbuf();
  LabConfig cfg;
  cfg.out = out;
  cfg.quiet = quiet;
  LabTotals totals;
  std::vector<Experiment> exps;
  json machine;
  try {
    const json j = json::parse(text.str());
    check(j.is_object() && j.value("command", json()) == "lab" && j.contains("experiments") && j["experiments"].is_array(),
          fmt::format("{} is not a dlperf lab's lab.json", path.string()), hint);
    read_field(j, "data", cfg.data);
    cfg.full = field<std::string>(j, "mode") == "full";
    if (j.contains("settings")) {
      const json& s = object_at(j, "settings");
      within("settings", [&] {
        read_field(s, "model", cfg.base_model), read_field(s, "batch", cfg.base_batch), read_field(s, "lr", cfg.base_lr);
      });
    } else {
      totals.settings_known = false;
    }
    machine = j.at("machine");
    read_field(j, "created", totals.created);
    read_field(j, "seconds", totals.seconds);
    totals.reused_runs = value_field(j, "reused_runs", size_t(0));
    Noise& n = totals.noise;
    n.pct = value_field(j, "noise_pct", 0.0), n.start_pct = value_field(j, "noise_start_pct", 0.0);
    n.end_change_pct = value_field(j, "noise_end_change_pct", 0.0), n.runs = value_field(j, "noise_runs", 0);
    n.shared_runs = value_field(j, "noise_shared_runs", 0);
    const json call = object_field(j, "engine_call_us");
    within("engine_call_us", [&] { n.call_start_us = value_field(call, "start", 0.0), n.call_end_us = value_field(call, "end", 0.0); });
    const json planned = object_field(j, "planned");
    within("planned", [&] {
      totals.planned.runs = value_field(planned, "runs", 0), totals.planned.seconds = value_field(planned, "seconds", 0.0);
      totals.planned.unpredicted = value_field(planned, "unpredicted_runs", 0);
      totals.check = {value_field(planned, "finished_runs", 0), totals.planned.runs, value_field(planned, "finished_planned_seconds", 0.0),
                      value_field(planned, "finished_measured_seconds", 0.0)};
    });
    for (size_t i = 0; i < j["experiments"].size(); ++i)
      exps.push_back(within(fmt::format("experiments[{}]", i),
                            [&] { return experiment_from_json(as_object(j["experiments"][i]), n.pct, path.string(), hint); }));
    write_report(exps, cfg, machine, totals);  // inside: the plots read each row's fields as the lab wrote them
  } catch (const json::exception& e) {
    throw Error(fmt::format("{} is damaged: {}", path.string(), json_error_text(e)), hint);
  }
  if (!quiet) {
    size_t plots = 0;
    for (const auto& e : exps) plots += e.plots.size();
    std::printf("report redrawn from %s: %s/README.md, %zu plot%s\n", path.string().c_str(), out.c_str(), plots, plots == 1 ? "" : "s");
  }
}

}  // namespace dlperf::lab

// Observations: sentences computed from an experiment's rows, so the report's conclusions are
// the data's (a test changes the numbers and sees the sentences change).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "bench/cpu_bench.h"
#include "core/text.h"
#include "core/timer.h"
#include "hw/host_load.h"
#include "lab/lab.h"
#include "plan/against.h"

namespace dlperf::lab {

using nlohmann::json;

namespace {

double num(const json& r, const char* key) { return r.at(key).get<double>(); }
/// A column older reports (and missing rows) lack: 0 where it is absent or null.
double num_or_0(const json& r, const char* key) {
  const json v = r.value(key, json());
  return v.is_number() ? v.get<double>() : 0;
}

std::optional<json> find(const std::vector<json>& rows, const std::function<bool(const json&)>& pred) {
  for (const auto& r : rows)
    if (pred(r)) return r;
  return std::nullopt;
}

// "fell 1.3 points", "rose 0.4 points", "stayed the same".
std::string change(double from, double to) {
  const double d = to - from;
  if (std::fabs(d) < 0.05) return "stayed the same";
  return fmt::format("{} {:.1f} point{}", d < 0 ? "fell" : "rose", std::fabs(d), std::fabs(d) >= 0.95 && std::fabs(d) < 1.05 ? "" : "s");
}

// When two rows say how many test images measured their accuracies: whether those images can
// tell the difference from chance. A change under twice the standard error of the difference
// (binomial, as if the two test sets were independent, which over-states it for the one shared
// set) gets "within the 1.3 points that 5000 test images can resolve"; otherwise "".
std::string resolution(const json& from, const json& to) {
  const double a = num(from, "test_acc"), b = num(to, "test_acc");
  if (!from.contains("test_images") || !to.contains("test_images") || std::fabs(b - a) < 0.05) return "";
  const double n = std::min(num(from, "test_images"), num(to, "test_images"));
  if (n <= 0) return "";
  const double pa = a / 100, pb = b / 100;
  const double resolves = 100 * 2 * std::sqrt((pa * (1 - pa) + pb * (1 - pb)) / n);
  return std::fabs(b - a) < resolves ? fmt::format("within the {:.1f} points that {:.0f} test images can resolve", resolves, n) : "";
}

// ": 9.64% is chance for 10 classes, so that run learned nothing" where a row's test accuracy is
// no better than guessing (under 1.5x chance), else "": a number like 9.64% alone reads as a
// poor result rather than none.
std::string at_chance(const json& r) {
  const json c = r.value("classes", json());
  const double classes = c.is_number() ? c.get<double>() : 0;
  if (classes < 2 || !r.value("test_acc", json()).is_number() || num(r, "test_acc") >= 1.5 * 100 / classes) return "";
  const double chance = 100 / classes;
  // Near chance it is chance; well below it (3% of 10 classes, on a few hundred test images) the
  // model predicts one wrong class, no better than guessing.
  if (num(r, "test_acc") >= 0.5 * chance)
    return fmt::format(": {:.2f}% is chance for {:.0f} classes, so that run learned nothing", num(r, "test_acc"), classes);
  return fmt::format(": {:.2f}% is below chance ({:.0f}% for {:.0f} classes), so that run learned nothing", num(r, "test_acc"),
                     chance, classes);
}

// A step time the rows keep in milliseconds, in the unit that keeps its digits.
std::string step_time(double ms) { return format_seconds(ms / 1e3); }

// ", " and `s`, or "" for an empty `s`: a clause that may be absent.
std::string clause(const std::string& s) { return s.empty() ? "" : ", " + s; }

std::string megabytes(double mb) {
  if (mb < 1) return fmt::format("{:.0f} KB", mb * 1000);  // a tiny model's 0.47 MB read "0.5 MB"
  return mb >= 1000 ? fmt::format("{:.2f} GB", mb / 1000) : mb >= 100 ? fmt::format("{:.0f} MB", mb) : fmt::format("{:.1f} MB", mb);
}

// The smallest difference a sentence calls a difference: the run-to-run noise, never under 3%.
constexpr double kNoiseFloorPct = 3;

// Whether two speeds differ by no more than the run-to-run noise (at least 3%), so a sentence
// claims no more than the measurement shows.
bool within_noise(double speedup, double noise_pct) { return 100 * std::fabs(speedup - 1) <= std::max(kNoiseFloorPct, noise_pct); }

// "2.07x faster than", "1.15x slower than", "4% slower than" (under 10% apart, where "1.0x
// slower" would read as no difference), or "about as fast as" within the noise. `speedup`: the
// row's speed over the one it is compared with.
std::string relative_speed(double speedup, double noise_pct, int decimals) {
  if (within_noise(speedup, noise_pct)) return "about as fast as";
  if (std::fabs(speedup - 1) < 0.1) return fmt::format("{:.0f}% {} than", 100 * std::fabs(speedup - 1), speedup >= 1 ? "faster" : "slower");
  return fmt::format("{:.{}f}x {} than", speedup >= 1 ? speedup : 1 / speedup, decimals, speedup >= 1 ? "faster" : "slower");
}

std::vector<std::string> missing_notes(const Experiment& e, const char* label_key) {
  std::vector<std::string> out;
  for (const auto& r : e.rows)
    if (r["status"] != "measured") {
      std::string label = r.value(label_key, json()).is_string() ? r[label_key].get<std::string>() : r.value(label_key, json()).dump();
      out.push_back(fmt::format("{} {}: {}", label, r["status"].get<std::string>(), r["note"].get<std::string>()));
    }
  return out;
}

// The threads a CPU row trained on, in words ("1 thread"), or "" where the row does not say.
std::string threads_of(const json& r) {
  const json t = r.value("threads", json());
  return t.is_number_integer() ? counted(t.get<int64_t>(), "thread") : "";
}

// Where the CPU starts to win, from the workloads both devices ran (`winner`: +1 the GPU faster,
// -1 the CPU, 0 alike): between the least work a step the GPU won and the most the CPU won; or
// that one device won them all, down to the least work (or up to the most). Empty where fewer
// than two workloads ran on both, or where the winners do not split by work.
template <class Verdict>
std::string crossover(std::vector<Verdict> v) {
  if (v.size() < 2) return "";
  std::sort(v.begin(), v.end(), [](const Verdict& a, const Verdict& b) { return a.mflop < b.mflop; });
  auto mflop = [](const Verdict& x) { return format_decimals(x.mflop, x.mflop < 10 ? 2 : 0) + " MFLOP a step"; };
  const auto gpu = std::find_if(v.begin(), v.end(), [](const Verdict& x) { return x.winner > 0; });   // the least work it won
  const auto cpu = std::find_if(v.rbegin(), v.rend(), [](const Verdict& x) { return x.winner < 0; });  // the most work it won
  const bool gpu_all = std::all_of(v.begin(), v.end(), [](const Verdict& x) { return x.winner > 0; });
  const bool cpu_all = std::all_of(v.begin(), v.end(), [](const Verdict& x) { return x.winner < 0; });
  if (gpu_all)
    return fmt::format("The GPU wins even on {}, the least work here ({}: {} a step against the CPU's {}): on this machine no "
                       "workload of this lab is small enough for the CPU to win.",
                       v.front().workload, mflop(v.front()), step_time(v.front().gpu_step_ms), step_time(v.front().cpu_step_ms));
  if (cpu_all)
    return fmt::format("The CPU wins even on {}, the most work here ({}: {} a step against the GPU's {}).", v.back().workload,
                       mflop(v.back()), step_time(v.back().cpu_step_ms), step_time(v.back().gpu_step_ms));
  if (gpu == v.end() || cpu == v.rend() || cpu->mflop >= gpu->mflop) return "";
  return fmt::format("The crossover lies between {} ({}, the CPU faster) and {} ({}, the GPU faster): with less work a step, "
                     "the GPU's fixed cost of a step outweighs its speed.",
                     cpu->workload, mflop(*cpu), gpu->workload, mflop(*gpu));
}

std::vector<std::string> device(const Experiment& e) {
  std::vector<std::string> out;
  const auto rows = e.measured();
  std::vector<std::string> workloads;
  for (const auto& r : e.rows) {
    const auto w = r["workload"].get<std::string>();
    if (std::find(workloads.begin(), workloads.end(), w) == workloads.end()) workloads.push_back(w);
  }
  bool any_gpu = false;
  // Who won each workload the GPU ran, by the work a step does: where the crossover lies.
  struct Verdict {
    std::string workload;
    double mflop, cpu_step_ms, gpu_step_ms;
    int winner;  // +1 the GPU, -1 the CPU, 0 alike
  };
  std::vector<Verdict> verdicts;
  for (const auto& w : workloads) {
    std::vector<json> cpus;  // the first on every core; a tiny workload's second on one thread
    for (const auto& r : rows)
      if (r["workload"] == w && r["device"] == "cpu") cpus.push_back(r);
    auto gpu = find(rows, [&](const json& r) { return r["workload"] == w && r["device"] != "cpu"; });
    if (cpus.empty()) continue;
    const int64_t batch = cpus.front().at("batch").get<int64_t>();
    // The GPU is compared with the CPU at its best: where the CPU ran on several thread counts,
    // the fastest, named.
    const json cpu = *std::min_element(cpus.begin(), cpus.end(), [](const json& a, const json& b) { return num(a, "epoch_s") < num(b, "epoch_s"); });
    const std::string the_cpu = cpus.size() > 1 && !threads_of(cpu).empty() ? "the CPU (" + threads_of(cpu) + ")" : "the CPU";
    for (size_t i = 1; i < cpus.size(); ++i) {
      const json &all = cpus.front(), &fewer = cpus[i];
      if (threads_of(all).empty() || threads_of(fewer).empty()) continue;
      const double speedup = num(all, "epoch_s") / num(fewer, "epoch_s");
      const bool faster = speedup > 1 && !within_noise(speedup, e.noise_pct);
      // The all-core row's threads are the CPUs: fewer threads plus the loader's workers within
      // them leave the workers cores of their own, which they share with the compute threads on
      // every core (measured on the mlp: about half of one thread's gain, docs/plan.md).
      const int64_t workers = fewer.value("workers", json()).is_number_integer() ? fewer["workers"].get<int64_t>() : 0;
      const bool own_core = workers > 0 && fewer["threads"].get<int64_t>() + workers <= all["threads"].get<int64_t>();
      const std::string loader = !own_core      ? ""
                                 : workers == 1 ? ", and the data loader's worker gets a core of its own instead of sharing them with the compute threads"
                                                : ", and the data loader's workers get cores of their own instead of sharing them with the compute threads";
      // The round trip in numbers, where both runs' records measured it.
      const bool calls = fewer.value("call_us", json()).is_number() && all.value("call_us", json()).is_number();
      const std::string round_trip =
          calls ? fmt::format(" ({:.2f} us a call on {} around that run, {:.2f} on {})", all["call_us"].get<double>(), threads_of(all),
                              fewer["call_us"].get<double>(), threads_of(fewer))
                : "";
      // Its smallest layers ran on one thread on every core's run too (small_layers.h): then the
      // calls that still fork the team are its larger layers'.
      const auto alone = all.value("one_thread_layers", std::vector<std::string>{});
      const std::string ops = alone.empty() ? "its ops are" : "its larger layers are";
      const std::string smallest = alone.empty() ? "" : fmt::format(" ({} already ran on one thread)", listed(alone));
      out.push_back(fmt::format("{} at batch {} on the CPU: {} trains {} {} ({} vs {} a step){}.", w, batch, threads_of(fewer),
                                relative_speed(speedup, e.noise_pct, 2), threads_of(all), step_time(num(fewer, "step_ms")),
                                step_time(num(all, "step_ms")),
                                faster ? ": " + ops + " too small to share between cores, so each call into the engine costs "
                                         "the threads' round trip" + round_trip + " for little work" + smallest + loader
                                       : ""));
    }
    if (!gpu) {
      out.push_back(fmt::format("{} at batch {} on {}: {} per epoch, {:.0f} img/s, {} per step.", w, batch, the_cpu,
                                format_seconds(num(cpu, "epoch_s")), num(cpu, "images_per_s"), step_time(num(cpu, "step_ms"))));
      continue;
    }
    any_gpu = true;
    const double speedup = num(cpu, "epoch_s") / num(*gpu, "epoch_s");
    if (gpu->value("mflops_per_step", json()).is_number())
      verdicts.push_back({w, num(*gpu, "mflops_per_step"), num(cpu, "step_ms"), num(*gpu, "step_ms"),
                          within_noise(speedup, e.noise_pct) ? 0 : speedup >= 1 ? 1 : -1});
    if (within_noise(speedup, e.noise_pct))
      out.push_back(fmt::format("{} at batch {}: the GPU and {} train about as fast ({} vs {} per epoch).", w, batch, the_cpu,
                                format_seconds(num(*gpu, "epoch_s")), format_seconds(num(cpu, "epoch_s"))));
    else if (speedup >= 1)
      out.push_back(fmt::format("{} at batch {}: the GPU trains {:.1f}x faster than {} ({} vs {} per epoch).", w, batch, speedup, the_cpu,
                                format_seconds(num(*gpu, "epoch_s")), format_seconds(num(cpu, "epoch_s"))));
    else {
      // Why, in the runs' numbers: the GPU step's kernels (counted in its CUDA graph) and the time
      // each takes on average, against the arithmetic they do.
      const double mflop = gpu->value("mflops_per_step", json()).is_number() ? num(*gpu, "mflops_per_step") : 0;
      const json kernels = gpu->value("kernels_per_step", json());
      std::string why = "too little work to pay for the GPU's fixed cost of launching kernels and copying each batch";
      if (kernels.is_number() && kernels.get<double>() > 0)
        why = fmt::format("the GPU's step runs {:.0f} kernels, {} each on average, for {} MFLOP in all ({} a kernel): "
                          "launching and running many tiny kernels, not arithmetic, sets its time",
                          kernels.get<double>(), step_time(num(*gpu, "step_ms") / kernels.get<double>()),
                          format_decimals(mflop, 1), format_decimals(mflop / kernels.get<double>(), 2));
      else if (mflop > 0)
        why = fmt::format("{} MFLOP a step is {}", format_decimals(mflop, 1), why);
      out.push_back(fmt::format("{} at batch {}: {}, {:.1f}x faster than the GPU ({} vs {} per step): {}.", w, batch,
                                the_cpu + " wins", 1 / speedup, step_time(num(cpu, "step_ms")), step_time(num(*gpu, "step_ms")), why));
    }
  }
  if (std::string c = crossover(verdicts); !c.empty()) out.push_back(c);
  if (!any_gpu)
    for (const auto& r : e.rows)
      if (r["device"] != "cpu" && r["status"] == "missing") {
        out.push_back("No GPU rows: " + r["note"].get<std::string>() + ".");
        break;
      }
  return out;
}

std::vector<std::string> batch(const Experiment& e) {
  std::vector<std::string> out;
  const auto rows = e.measured();
  auto rule_rows = [&](const char* rule) {
    std::vector<json> v;
    for (const auto& r : rows)
      if (r["lr_rule"] == rule) v.push_back(r);
    std::sort(v.begin(), v.end(), [](const json& a, const json& b) { return a["batch"] < b["batch"]; });
    return v;
  };
  const auto fixed = rule_rows("fixed"), linear = rule_rows("linear");
  if (fixed.size() >= 2) {
    const json &lo = fixed.front(), &hi = fixed.back();
    const double speed = num(hi, "images_per_s") / num(lo, "images_per_s");
    const std::string how = relative_speed(speed, e.noise_pct, 1);
    out.push_back(fmt::format("Batch {} trains {} batch {} ({:.0f} vs {:.0f} img/s), and test accuracy {} "
                              "(fixed lr {:g}: {:.2f}% vs {:.2f}%){}{}.",
                              hi["batch"].get<int64_t>(), how, lo["batch"].get<int64_t>(), num(hi, "images_per_s"), num(lo, "images_per_s"),
                              change(num(lo, "test_acc"), num(hi, "test_acc")), num(lo, "lr"), num(hi, "test_acc"), num(lo, "test_acc"),
                              clause(resolution(lo, hi)), at_chance(hi)));
    // Equal epochs mean fewer updates for the bigger batch: much of what it loses in accuracy.
    if (lo.contains("train_images") && lo.contains("epochs") && lo["epochs"] == hi["epochs"] && lo["train_images"] == hi["train_images"]) {
      const int64_t images = lo["train_images"], epochs = lo["epochs"];
      const auto updates = [&](const json& r) { return epochs * (images / r["batch"].get<int64_t>()); };  // training drops a partial batch
      out.push_back(fmt::format("Over the same {} epoch{} of {} images, batch {} makes {} weight updates to batch {}'s {}.", epochs,
                                epochs == 1 ? "" : "s", images, hi["batch"].get<int64_t>(), updates(hi), lo["batch"].get<int64_t>(),
                                updates(lo)));
    }
    out.push_back(fmt::format("Peak memory grows from {} at batch {} to {} at batch {}: {:.1f}x for {:.0f}x the batch.",
                              megabytes(num(lo, "peak_mb")), lo["batch"].get<int64_t>(), megabytes(num(hi, "peak_mb")),
                              hi["batch"].get<int64_t>(), num(hi, "peak_mb") / num(lo, "peak_mb"),
                              num(hi, "batch") / num(lo, "batch")));
  }
  // The linear rule at the largest batch against the fixed lr there.
  if (!fixed.empty()) {
    const json& hi = fixed.back();
    auto lin = find(linear, [&](const json& r) { return r["batch"] == hi["batch"]; });
    if (lin && num(*lin, "lr") != num(hi, "lr"))
      out.push_back(fmt::format("With the linear scaling rule (lr {:g} at batch {}), test accuracy {} against the fixed lr "
                                "({:.2f}% vs {:.2f}%){}{}.",
                                num(*lin, "lr"), hi["batch"].get<int64_t>(), change(num(hi, "test_acc"), num(*lin, "test_acc")),
                                num(*lin, "test_acc"), num(hi, "test_acc"), clause(resolution(hi, *lin)), at_chance(*lin)));
  }
  for (const auto& r : e.rows)
    if (r["status"] != "measured")
      out.push_back(fmt::format("Batch {} with the {} lr {}: {}.", r["batch"].get<int64_t>(), r["lr_rule"].get<std::string>(),
                                r["status"].get<std::string>(), r["note"].get<std::string>()));
  return out;
}

// "The best test accuracy is small's, 87.70%", with the runner-up where the test images cannot
// tell them apart; models with the same accuracy (as printed) tie: naming one would rank a tie.
std::string best_accuracy(const std::vector<json>& rows) {
  const json& best = *std::max_element(rows.begin(), rows.end(), [](const json& x, const json& y) { return x["test_acc"] < y["test_acc"]; });
  std::vector<std::string> tied;
  for (const auto& r : rows)
    if (std::fabs(num(r, "test_acc") - num(best, "test_acc")) < 0.005) tied.push_back(r["model"]);
  if (tied.size() > 1) return fmt::format("{} tie for the best test accuracy, {:.2f}%.", listed(tied), num(best, "test_acc"));
  const json* second = nullptr;
  for (const auto& r : rows)
    if (&r != &best && (!second || num(r, "test_acc") > num(*second, "test_acc"))) second = &r;
  const std::string tie = second ? resolution(*second, best) : "";
  return fmt::format("The best test accuracy is {}'s, {:.2f}%{}.", best["model"].get<std::string>(), num(best, "test_acc"),
                     tie.empty() ? "" : fmt::format("; {}'s {:.2f}% is {}", (*second)["model"].get<std::string>(),
                                                    num(*second, "test_acc"), tie));
}

std::vector<std::string> model(const Experiment& e) {
  std::vector<std::string> out;
  auto rows = e.measured();
  if (rows.size() < 2) return missing_notes(e, "model");
  // Ordered by the work an image takes, which sets the time: an MLP has more parameters than a
  // small CNN and 60x fewer FLOPs ("mlp has 1.7x the parameters ... and takes 0.0x as long").
  std::sort(rows.begin(), rows.end(), [](const json& a, const json& b) { return a["mflops_per_image"] < b["mflops_per_image"]; });
  const json &lo = rows.front(), &hi = rows.back();
  const std::string a = lo["model"], b = hi["model"];
  // "133x", "2.4x", and under 1 two significant digits: "0.57x", not "0.6x" or "0.0x".
  auto times = [](double x, int decimals) { return x < 1 ? fmt::format("{:.2g}x", x) : fmt::format("{:.{}f}x", x, decimals); };
  const double params = num(hi, "parameters_m") / num(lo, "parameters_m");
  out.push_back(fmt::format("{} has {} the parameters and {} the training FLOPs per image of {}, and takes {} as long per epoch "
                            "({} vs {}).",
                            b, times(params, params < 10 ? 1 : 0), times(num(hi, "mflops_per_image") / num(lo, "mflops_per_image"), 1),
                            a, times(num(hi, "epoch_s") / num(lo, "epoch_s"), 1), format_seconds(num(hi, "epoch_s")),
                            format_seconds(num(lo, "epoch_s"))));
  const double g_lo = num(lo, "achieved_gflops"), g_hi = num(hi, "achieved_gflops");
  out.push_back(fmt::format("Achieved compute {} from {:.1f} GFLOP/s ({}) to {:.1f} GFLOP/s ({}){}.", g_hi >= g_lo ? "rises" : "falls",
                            g_lo, a, g_hi, b,
                            g_hi > 1.2 * g_lo ? ": larger layers keep the cores busier, so time grows slower than FLOPs" : ""));
  std::vector<std::string> winograd;  // "medium's conv2 and conv3"
  for (const auto& r : rows)
    if (const auto w = r.value("winograd_layers", std::vector<std::string>{}); !w.empty())
      winograd.push_back(fmt::format("{}'s {}", r["model"].get<std::string>(), listed(w)));
  if (!winograd.empty())
    out.push_back(fmt::format("Winograd convolutions ({}) do fewer multiplies than the FLOPs count, so a model's GFLOP/s with "
                              "them is the rate direct convolutions would need to train as fast.",
                              fmt::join(winograd, "; ")));
  out.push_back(fmt::format("Peak memory: {} for {}, {} for {}.", megabytes(num(lo, "peak_mb")), a, megabytes(num(hi, "peak_mb")), b));
  out.push_back(best_accuracy(rows));
  for (const auto& m : missing_notes(e, "model")) out.push_back("Model " + m + ".");
  return out;
}

std::string n_workers(const json& r) {
  const int n = r["workers"];
  return n == 0 ? "0 workers (loading in the training thread)" : fmt::format("{} worker{}", n, n == 1 ? "" : "s");
}

std::vector<std::string> workers(const Experiment& e) {
  std::vector<std::string> out;
  auto rows = e.measured();
  if (rows.empty()) return missing_notes(e, "workers");
  std::sort(rows.begin(), rows.end(), [](const json& a, const json& b) { return a["workers"] < b["workers"]; });
  const json& first = rows.front();
  const auto fastest = *std::max_element(rows.begin(), rows.end(), [](const json& x, const json& y) { return x["images_per_s"] < y["images_per_s"]; });
  const auto slowest = *std::min_element(rows.begin(), rows.end(), [](const json& x, const json& y) { return x["images_per_s"] < y["images_per_s"]; });
  out.push_back(fmt::format("With {} the step waits for data {:.1f}% of the time; with {}, {:.1f}%.",
                            n_workers(first), num(first, "data_wait_pct"), n_workers(rows.back()), num(rows.back(), "data_wait_pct")));
  const double spread = num(fastest, "images_per_s") / num(slowest, "images_per_s");
  const double max_wait = num(*std::max_element(rows.begin(), rows.end(), [](const json& x, const json& y) {
    return x["data_wait_pct"] < y["data_wait_pct"]; }), "data_wait_pct");
  if (within_noise(spread, e.noise_pct))
    out.push_back(fmt::format("The worker count barely matters here: all within {:.1f}%{}.{}", 100 * (spread - 1),
                              e.noise_pct > 3 ? fmt::format(", no more than the run-to-run noise ({:.1f}%)", e.noise_pct) : "",
                              max_wait < 5 ? " Loading is cheap next to the compute, so the step is compute-bound." : ""));
  else
    out.push_back(fmt::format("The fastest is {} at {:.0f} img/s, {:.2f}x the slowest ({}, {:.0f} img/s).", n_workers(fastest),
                              num(fastest, "images_per_s"), spread, n_workers(slowest), num(slowest, "images_per_s")));
  // The loader alone (measured beside the runs) against what training took: whether loading can
  // be what holds the step back.
  if (first.value("loader_images_per_s", json()).is_number() && num(first, "loader_images_per_s") > 0) {
    const double alone = num(first, "loader_images_per_s"), trained = num(first, "images_per_s"), headroom = alone / trained;
    std::string verdict = headroom >= 10 ? "loading cannot be what holds training back here"
                          : headroom < 2 ? "loading is a large part of each step, so workers (with cores of their own) pay off"
                                         : "loading is a noticeable part of each step";
    out.push_back(fmt::format("The loader alone delivers {} img/s with {}, {} the {:.0f} img/s training took: {}.",
                              alone >= 1e6 ? fmt::format("{:.1f} million", alone / 1e6) : fmt::format("{:.0f}", alone), n_workers(first), headroom >= 10 ? fmt::format("{:.0f}x", headroom) : fmt::format("{:.1f}x", headroom),
                              trained, verdict));
  }
  // What workers can gain at most: the loading the training thread did itself with 0 workers.
  // A larger gain is the machine's speed moving between the runs (a VM's neighbours can shift it
  // by a third within minutes), which the identical base runs need not catch: on the 2-core
  // development VM, 2 workers once ran medium 1.37x faster than 0 with 0.3% of the step loading.
  if (first["workers"] == 0 && fastest["workers"] != 0) {
    const double wait = num(first, "data_wait_pct"), bound = 100 / (100 - std::min(wait, 99.0));
    const double gain = num(fastest, "images_per_s") / num(first, "images_per_s");
    if (gain > bound && !within_noise(gain / bound, e.noise_pct))
      out.push_back(fmt::format("With 0 workers loading took {:.1f}% of the step, so moving it to workers can make a step at most {} "
                                "faster; the {:.2f}x that {} measured is beyond that: the machine's speed varied between these runs "
                                "more than the run-to-run noise shows.",
                                wait, bound < 1.1 ? fmt::format("{:.1f}%", 100 * (bound - 1)) : fmt::format("{:.2f}x", bound), gain,
                                n_workers(fastest)));
  }
  return out;
}

std::vector<std::string> precision(const Experiment& e) {
  std::vector<std::string> out;
  const auto rows = e.measured();
  auto fp32 = find(rows, [](const json& r) { return r["precision"] == "fp32"; });
  for (const auto& r : rows) {
    if (!fp32 || r["precision"] == "fp32") continue;
    // Training throughput, as the run-to-run noise is measured: s/epoch also holds the
    // evaluation, whose first pass builds each precision's inference kernels.
    const double s = num(r, "images_per_s") / num(*fp32, "images_per_s");
    out.push_back(fmt::format("{} trains {} fp32 ({:.0f} vs {:.0f} img/s), peak memory {} vs {}, test accuracy {} ({:.2f}% vs {:.2f}%){}{}.",
                              r["precision"].get<std::string>(), relative_speed(s, e.noise_pct, 2), num(r, "images_per_s"),
                              num(*fp32, "images_per_s"),
                              megabytes(num(r, "peak_mb")), megabytes(num(*fp32, "peak_mb")),
                              change(num(*fp32, "test_acc"), num(r, "test_acc")), num(r, "test_acc"), num(*fp32, "test_acc"),
                              clause(resolution(*fp32, r)), at_chance(r)));
    // Whether the CPU has more bf16 arithmetic than fp32 at all, from the ceilings measured.
    if (r["precision"] == "bf16" && r.value("device", "") == "cpu" && num_or_0(r, "ceiling_gflops") > 0 && num_or_0(*fp32, "ceiling_gflops") > 0) {
      const double peak = num(r, "ceiling_gflops") / num(*fp32, "ceiling_gflops");
      if (const auto amx = r.value("amx_layers", std::vector<std::string>{}); !amx.empty()) {
        out.push_back(fmt::format("This CPU's AMX tiles multiply bf16 at {:.1f}x its fp32 multiply-adds ({:.0f} vs {:.0f} GFLOP/s, measured), "
                                  "and {} ran there: bf16 gains where compute, not memory, limits the step.",
                                  peak, num(r, "ceiling_gflops"), num(*fp32, "ceiling_gflops"), listed(amx)));
      } else {
        out.push_back(fmt::format("This CPU's bf16 dot products peak at {:.2f}x its fp32 multiply-adds ({:.0f} vs {:.0f} GFLOP/s, measured){}.",
                                  peak, num(r, "ceiling_gflops"), num(*fp32, "ceiling_gflops"),
                                  peak < bench::kBf16GainsAbove ? ": bf16 has no more arithmetic to offer here, only half the bytes to move, and its "
                                                                  "conversions to and from fp32 to pay"
                                                                : ": bf16 gains where compute, not memory, limits the step"));
      }
    }
    if (r.contains("loss_scale_skips") && r["loss_scale_skips"].is_number())
      out.push_back(r["loss_scale_skips"].get<double>() > 0
                        ? fmt::format("fp16's dynamic loss scaling skipped {:.0f} steps whose gradients overflowed.",
                                      r["loss_scale_skips"].get<double>())
                        : "fp16's dynamic loss scaling skipped no step: no gradient overflowed.");
  }
  if (rows.size() == 1)
    out.push_back(fmt::format("Only {} runs here.", rows.front()["precision"].get<std::string>()));
  for (const auto& m : missing_notes(e, "precision")) out.push_back(m + ".");
  return out;
}

}  // namespace

std::string row_note(const json& row) {
  const std::string note = row.value("note", "");
  if (row.value("status", "") != "measured") return fmt::format("{}: {}", row.value("status", ""), note);
  return note;
}

std::string shared_cpus_sentence(const std::vector<Experiment>& exps) {
  // By run record: the base run is a row of several experiments. Shared: the row's verdict
  // (HostLoad::busy), not the share alone: a run of 50 ms is 10 ticks of the kernel's clock, and
  // one stray tick is 10%.
  // The share of runs under a second is left out of the "at most" too: one tick in a run of 20 ms
  // read as 100% (a quick lab on 64 images said "no run shared the CPUs ...: at most 100%").
  struct Load {
    double pct;
    bool shared, judged;
  };
  std::map<std::string, Load> runs;
  for (const auto& e : exps)
    for (const auto& r : e.rows)
      if (r.value("status", "") == "measured" && r.value("host_busy_pct", json()).is_number())
        runs[r.value("record", "") + r.value("run", "")] = {r["host_busy_pct"], r.value("host_shared", false),
                                                           r.value("total_s", 0.0) >= hw::kLeastJudgedSeconds};
  if (runs.empty()) return "";
  int shared = 0, judged = 0;
  double most = 0;
  for (const auto& [run, load] : runs) {
    shared += load.shared;
    judged += load.judged;
    if (load.judged) most = std::max(most, load.pct);
  }
  if (judged == 0)
    return "every run took under a second, too short for the kernel's 10 ms clock to tell whether other work shared the CPUs";
  if (shared == 0)
    return fmt::format("no run shared the CPUs with other work: other processes and the hypervisor took at most {:.0f}% of "
                       "their time during any run{}",
                       most, judged < int(runs.size()) ? " of a second or more (shorter ones are too short to tell)" : "");
  return fmt::format("{} of {} runs shared the CPUs with other work (up to {:.0f}% of their time; those rows' notes say so), "
                     "so they read slow", shared, runs.size(), most);
}

Noise noise_of(const std::vector<double>& images_per_s) {
  Noise n;
  if (images_per_s.size() < 2) return n;
  auto apart = [](double x, double y) { return 100 * std::fabs(x - y) / std::min(x, y); };
  n.runs = int(images_per_s.size());
  n.start_pct = apart(images_per_s[0], images_per_s[1]);
  const auto [lo, hi] = std::minmax_element(images_per_s.begin(), images_per_s.end());
  n.pct = apart(*lo, *hi);
  if (n.runs == 3) n.end_change_pct = 100 * (2 * images_per_s[2] / (images_per_s[0] + images_per_s[1]) - 1);
  return n;
}

std::string noise_sentence(const Noise& n) {
  // The run at the end more than twice as far off as the start pair (and over 2%): the machine's
  // speed changed. Which way is said, not how: one run cannot tell a slow spell from a drift.
  const bool changed = n.pct > 2 * std::max(n.start_pct, 1.0);
  const std::string change =
      changed ? fmt::format("; the one at the end ran {:.1f}% {} than those at the start: the machine's speed changed while the lab ran",
                            std::fabs(n.end_change_pct), n.end_change_pct < 0 ? "slower" : "faster")
              : "";
  const std::string measured =
      n.runs == 3 ? fmt::format("three identical runs of the base configuration, two at the start of the lab and one at its end, "
                                "differed by up to {:.1f}% in images/s ({:.1f}% between the two at the start{})",
                                n.pct, n.start_pct, change)
                  : fmt::format("two identical runs of the base configuration differed by {:.1f}% in images/s", n.pct);
  const std::string shared =
      n.shared_runs == 0 ? ""
                         : fmt::format("; {} shared the CPUs with other work, so part of the difference is the machine's load",
                                       n.shared_runs == n.runs ? (n.runs == 2 ? "both" : "all three")
                                                               : fmt::format("{} of them", n.shared_runs));
  // The cores' round trip (the OpenMP fork and join of every op), before and after the runs.
  const bool moved = n.call_start_us > 0 && n.call_end_us > 0 && std::fabs(n.call_end_us / n.call_start_us - 1) > 0.25;
  const std::string placement =
      moved ? fmt::format("; meanwhile a call into the engine went from {:.2f} to {:.2f} us, so the round trip between the cores "
                          "changed (as when a VM's vCPUs are placed elsewhere), and every step with it",
                          n.call_start_us, n.call_end_us)
            : "";
  if (n.pct >= kNoiseFloorPct) return measured + ", so rows closer than that are called alike" + shared + placement;
  return measured + fmt::format("; rows closer than {:.0f}% are still called alike (a few runs can agree by luck)", kNoiseFloorPct) +
         shared + placement;
}

// The planner against the runs: memory to the byte or how far off, step time's median and worst
// error beside the run-to-run noise.
std::vector<std::string> prediction(const Experiment& e) {
  std::vector<std::string> out;
  const auto rows = e.measured();
  if (!rows.empty()) {
    const size_t n = rows.size();
    auto mem_err = [](const json& r) { return std::fabs(num(r, "peak_error_bytes")) / (1e6 * num(r, "peak_mb")); };
    auto step_err = [](const json& r) { return std::fabs(num(r, "step_ratio") - 1); };
    const size_t exact = size_t(std::count_if(rows.begin(), rows.end(), [](const json& r) { return num(r, "peak_error_bytes") == 0; }));
    const json& worst_mem = *std::max_element(rows.begin(), rows.end(), [&](const json& a, const json& b) { return mem_err(a) < mem_err(b); });
    const json& worst_step = *std::max_element(rows.begin(), rows.end(), [&](const json& a, const json& b) { return step_err(a) < step_err(b); });
    std::vector<double> step_errors;
    for (const auto& r : rows) step_errors.push_back(step_err(r));
    const std::string all = n == 1 ? "the run" : n == 2 ? "both runs" : fmt::format("all {} runs", n);
    if (exact == n)
      out.push_back(fmt::format("dlperf plan predicted the peak memory of {} to the byte.", all));
    else
      out.push_back(fmt::format("dlperf plan predicted the peak memory of {} of {} runs to the byte; the furthest off was {} "
                                "({:.2f}%: planned {:.2f} MB, measured {:.2f} MB).",
                                exact, n, worst_mem["run"].get<std::string>(), 100 * mem_err(worst_mem), num(worst_mem, "peak_mb_planned"),
                                num(worst_mem, "peak_mb")));
    const double median = plan::summarize(step_errors).median;
    // A run that shared the CPUs measured the load as much as the engine (its note says so).
    const bool shared = !worst_step.value("note", "").empty();
    out.push_back(fmt::format("It predicted step time within a median {:.1f}% of the measured ({}: worst {}, planned {} "
                              "against {} measured{}){}.",
                              100 * median, n == 1 ? "one run" : fmt::format("{} runs", n), worst_step["run"].get<std::string>(),
                              step_time(num(worst_step, "step_ms_planned")), step_time(num(worst_step, "step_ms")),
                              shared ? ", a run that shared the CPUs with other work" : "",
                              e.noise_pct > 0 ? fmt::format("; identical runs differed by up to {:.1f}% in speed", e.noise_pct) : ""));
  }
  for (const auto& m : missing_notes(e, "run")) out.push_back("Not planned: " + m + ".");
  return out;
}

std::vector<std::string> observe(const Experiment& e) {
  if (e.name == "device") return device(e);
  if (e.name == "batch") return batch(e);
  if (e.name == "model") return model(e);
  if (e.name == "workers") return workers(e);
  if (e.name == "precision") return precision(e);
  if (e.name == "plan") return prediction(e);
  return {};
}

}  // namespace dlperf::lab

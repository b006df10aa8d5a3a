// The pieces of detail.h the CPU and GPU training loops share: the epoch table's rows, the
// run's opening lines, stops and divergence, the loaders' settings, the profile's files, and
// the run record's file.
#include "train/detail.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <cmath>
#include <filesystem>

#include "bench/cpu_bench.h"
#include "core/files.h"
#include "core/memory.h"
#include "core/version.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"
#include "profile/recorder.h"
#include "profile/report.h"
#include "train/checkpoint.h"

namespace dlperf::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {

// The epoch table, one row at a time as epochs finish (fixed widths, so rows line up).
const char* const kEpochHeader =
    "epoch   time s    img/s  train loss  train acc  test acc    peak mem  data wait  compute\n"
    "-----  -------  -------  ----------  ---------  --------  ----------  ---------  -------\n";

std::string epoch_row(const EpochStats& e) {
  return fmt::format("{:>5}  {:>7}  {:>7.0f}  {:>10}  {:>8.2f}%  {:>8}  {:>10}  {:>8.1f}%  {:>6.1f}%\n", e.epoch,
                     format_decimals(e.train_s, 2), e.images_per_s, format_decimals(e.train_loss, 4), 100 * e.train_acc,
                     e.evaluated ? fmt::format("{:.2f}%", 100 * e.test_acc) : "-", format_bytes(e.peak_bytes),
                     100 * e.data_wait_s / e.train_s, 100 * e.compute_s / e.train_s);
}

std::string model_line(const nn::Graph& graph, const data::DataPair& data) {
  const auto& t = data.train;
  return fmt::format("dlperf train: model {} ({:.3f}M parameters, {:.2f} MFLOP/image forward) on {} {}, {} classes, {} train / {} test images\n",
                     graph.model, double(graph.param_count()) / 1e6, graph.forward_flops() / double(graph.batch()) / 1e6, t.name,
                     dims_str({t.channels, t.height, t.width}), t.classes, t.size(), data.test.size());
}

std::string recipe_text(const TrainConfig& cfg, const data::Dataset& train) {
  std::string s = fmt::format("{} lr {:g} {}", cfg.optimizer.name, cfg.lr, nn::describe(cfg.schedule));
  if (cfg.label_smoothing > 0) s += fmt::format(", label smoothing {:g}", cfg.label_smoothing);
  if (const data::LoaderConfig lc = loader_config(cfg, true); lc.augment)
    s += lc.pad_crop == 0 ? ", augmented (random horizontal flips)"
                          : fmt::format(", augmented (random {}-px crops{})", lc.pad_crop, train.flip_ok ? " and horizontal flips" : "");
  return s;
}

std::string resumed_line(const TrainConfig& cfg, int64_t epochs_done, const json& was) {
  const std::string left = epochs_done >= cfg.epochs
                               ? fmt::format(", and --epochs is {}: nothing to train (raise --epochs to train further)", cfg.epochs)
                               : fmt::format(", training epochs {} to {}", epochs_done + 1, cfg.epochs);
  std::string line = fmt::format("resumed from {} after epoch {}{}\n", checkpoint_path(cfg.checkpoint_dir), epochs_done, left);
  // Settings that change the training from here (loader workers, threads and the device do not)
  // are allowed, as extending a run with more --epochs must be, but said: the run is then not the
  // one the checkpoint's settings describe.
  const json now = to_json(cfg);
  const bool spans_run = cfg.schedule.name == "onecycle" || cfg.schedule.name == "cosine";
  std::string changed;
  for (const auto& [key, flag] : std::vector<std::pair<const char*, const char*>>{
           {"data", "--data"}, {"train_limit", "--train-limit"}, {"precision", "--precision"}, {"epochs", "--epochs"},
           {"lr", "--lr"}, {"schedule", "--schedule"}, {"warmup_epochs", "--warmup-epochs"}, {"step_epochs", "--step-epochs"},
           {"momentum", "--momentum"}, {"nesterov", "nesterov"}, {"weight_decay", "--weight-decay"},
           {"label_smoothing", "--label-smoothing"}, {"augment", "--augment"}, {"crop_pad", "--crop-pad"}, {"seed", "--seed"}}) {
    if (!was.contains(key) || was[key] == now[key]) continue;
    if (std::string(key) == "data" && was[key].is_string() && data::same_data(was[key], now[key])) continue;
    if (std::string(key) == "epochs" && !spans_run) continue;  // a longer constant or step run is the same run, extended
    auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    changed += fmt::format("{}{} {} -> {}", changed.empty() ? "" : ", ", flag, text(was[key]), text(now[key]));
  }
  if (!changed.empty())
    line += fmt::format("note: resumed with other settings than the checkpoint's run: {}{}\n", changed,
                        spans_run && was.value("epochs", cfg.epochs) != cfg.epochs
                            ? fmt::format(" (the {} rate spans --epochs, so from here it follows the {}-epoch curve)", cfg.schedule.name, cfg.epochs)
                            : "");
  return line;
}

json stopped_json(const TrainConfig& cfg, int64_t stopped_in) {
  return {{"signal", signal_name(stop_signal())}, {"in_epoch", stopped_in}, {"epochs_asked", cfg.epochs}};
}

// "the checkpoint in DIR holds epoch N" when this run saved (or resumed from) one holding its
// last finished epoch, else "": dlperf profile saves none, and neither does a run before its first epoch ends.
std::string checkpoint_holds(const TrainConfig& cfg, int64_t finished_epochs) {
  if (cfg.profile_only || cfg.checkpoint_dir.empty() || finished_epochs <= 0) return "";
  return fmt::format("the checkpoint in {} holds epoch {}", cfg.checkpoint_dir, finished_epochs);
}

Interrupted stopped_run(const TrainConfig& cfg, int64_t stopped_in, const TrainResult& r) {
  const int sig = stop_signal();
  const size_t done = r.epochs.size();
  std::string what = fmt::format("stopped by {} in epoch {} of {}", signal_name(sig), stopped_in, cfg.epochs);
  if (!r.record_path.empty())
    what += fmt::format(": the run record {} keeps the {} finished epoch{}", r.record_path, done, done == 1 ? "" : "s");
  std::string hint;  // none for dlperf profile, which saves nothing
  if (const std::string held = checkpoint_holds(cfg, done > 0 ? r.epochs.back().epoch : 0); !held.empty())
    hint = fmt::format("to go on, run the same command with --resume ({})", held);
  else if (!cfg.profile_only && cfg.checkpoint_dir.empty())
    hint = "a run with --checkpoint DIR saves every epoch, and --resume goes on from there";
  return Interrupted(sig, what, hint);
}

Diverged diverged_run(const TrainConfig& cfg, double loss, const std::string& when, int64_t finished_epochs) {
  const std::string value = std::isnan(loss) ? "NaN" : loss > 0 ? "+inf" : "-inf";
  std::string hint = fmt::format("lower --lr (now {})", cfg.lr);
  if (const std::string held = checkpoint_holds(cfg, finished_epochs); !held.empty())
    hint += fmt::format("; to go on from the last good epoch, add --resume ({})", held);
  return Diverged(fmt::format("the loss became {} {}", value, when), hint);
}

std::string loss_rise_note(const TrainConfig& cfg, const std::vector<EpochStats>& epochs) {
  constexpr double kRise = 1.5;
  for (size_t e = 1; e < epochs.size(); ++e) {
    size_t low = 0;  // the lowest loss before epoch e
    for (size_t k = 1; k < e; ++k)
      if (epochs[k].train_loss < epochs[low].train_loss) low = k;
    const double from = epochs[low].train_loss, to = epochs[e].train_loss;
    if (!(from > 0) || !(to > kRise * from)) continue;
    // The default lr (0.1) suits batch 64: below it, the linear scaling rule's share; else half.
    const double lower = cfg.batch < 64 ? cfg.lr * double(cfg.batch) / 64 : cfg.lr / 2;
    return fmt::format("the training loss rose from {:.4g} (epoch {}) to {:.4g} (epoch {}), {:.1f}x: the learning rate may be too "
                       "high for batch {} (peak lr {:g}); try --lr {:g}{}",
                       from, epochs[low].epoch, to, epochs[e].epoch, to / from, cfg.batch, cfg.lr, lower,
                       cfg.batch < 64 ? " (the linear scaling rule from lr 0.1 at batch 64)" : "");
  }
  return "";
}

std::string cpu_bf16_note(double bf16_gflops, double fp32_gflops, const std::string& source) {
  if (!(bf16_gflops > 0 && fp32_gflops > 0) || bf16_gflops >= bench::kBf16GainsAbove * fp32_gflops) return "";
  return fmt::format("this CPU's bf16 dot products peak at {:.2f}x its fp32 multiply-adds ({:.0f} vs {:.0f} GFLOP/s, {}): bf16 "
                     "halves the activations' memory here but has no more arithmetic to offer, and its conversions to and from "
                     "fp32 cost time, so expect it to train slower than fp32 (--precision fp32 for speed)",
                     bf16_gflops / fp32_gflops, bf16_gflops, fp32_gflops, source);
}

std::string final_accuracy(const json& summary) {
  const json& acc = summary.at("final_test_acc");
  if (acc.is_null()) return "test accuracy not measured after the last epoch run (dlperf profile stops after its recorded steps)";
  return fmt::format("final test accuracy {:.2f}%", 100 * acc.get<double>());
}

data::LoaderConfig loader_config(const TrainConfig& cfg, bool training, int compute_threads) {
  data::LoaderConfig lc;
  lc.compute_threads = compute_threads;
  lc.batch = cfg.batch;
  lc.workers = cfg.workers;
  lc.seed = cfg.seed;
  lc.augment = training && cfg.augment;
  lc.pad_crop = cfg.crop_pad;
  lc.shuffle = lc.drop_last = training;
  return lc;
}

void finish_profile(const TrainConfig& cfg, const nn::Graph& graph, const plan::CpuCeilings& ceilings, const MemoryStats& ms,
                    TrainResult& result, int64_t kernels_per_step, double planned_step_s, double clock_tick_ns,
                    profile::CpuLayers layers) {
  const bool say = !cfg.quiet;
  const auto& rec = profile::Recorder::get();
  const auto events = rec.events();
  check(!events.empty(), "the profile recorded no steps", fmt::format("lower {}", detail::profile_flag(cfg, "skip")));
  profile::Report rep = profile::build_report(events, graph, ceilings, cfg.precision, cfg.profile_group,
                                                    cuda::resolve_layout(cfg.layout, cfg.precision));
  rep.step.loader_workers = cfg.data_on_device ? 0 : cfg.workers;
  rep.step.every = cfg.profile_every;
  rep.host_load = rec.host_load();
  rep.winograd_layers = std::move(layers.winograd);
  profile::set_amx_layers(rep, std::move(layers.amx));
  rep.matrix_product_layers = std::move(layers.matrix_products);
  rep.one_thread_layers = std::move(layers.one_thread);
  rep.step.planned_s = planned_step_s;
  rep.step.device_clock_tick_ns = clock_tick_ns;
  if (kernels_per_step > 0) {
    rep.step.launches = double(kernels_per_step);
    rep.step.launches_source = "counted in the step's CUDA graph";
  }
  result.profile = profile::to_json(rep);
  json peaks = json::object();
  for (int c = 0; c < kMemCategories; ++c) peaks[std::string(to_string(MemCategory(c)))] = double(ms.peak[size_t(c)]);
  result.profile["peak_bytes_by_category"] = peaks;
  result.record["profile"] = result.profile;
  if (say) profile::print_report(rep);
  const std::string trace_ext = cfg.trace_gzip ? ".trace.json.gz" : ".trace.json";
  // A path prefix the user gave names both files, and a second run replaces them, as --json does
  // elsewhere. The default names (in a directory given, or in --runs-dir) are timestamped and
  // never replace an earlier profile's: a directory named with '--out .' would otherwise give
  // the hidden files '..json' and '..trace.json'.
  std::string prefix = cfg.profile_out;
  const std::string dir = names_a_directory(prefix) ? prefix : prefix.empty() ? cfg.runs_dir : "";
  if (!dir.empty())
    prefix = unused_stem(dir, fmt::format("{}-profile-{}-b{}", file_timestamp(), graph.model, cfg.batch), {".json", trace_ext});
  if (prefix.empty()) {  // the table above points to "the JSON": say that there is none, and how to get it
    if (say) std::printf("no trace or table file: --runs-dir is empty and no %s was given\n", detail::profile_flag(cfg, "out").c_str());
    return;
  }
  // A file that cannot be written names the flag that chose where it goes (the hint's words).
  const std::string where = cfg.profile_out.empty() ? std::string("--runs-dir") : detail::profile_flag(cfg, "out");
  result.trace_path = prefix + trace_ext;
  profile::write_trace(result.trace_path, events, rec.memory(), "check " + where);
  const std::string table = prefix + ".json";
  write_file_atomically(table, result.profile.dump(2) + "\n", "check " + where);
  if (say)
    std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing); table: %s\n", result.trace_path.c_str(),
                table.c_str());
}

json checkpoint_meta(const TrainConfig& cfg, const nn::Graph& graph, int64_t epochs_done, int64_t optimizer_steps,
                     const std::vector<EpochStats>& history) {
  json meta = {{"model", graph.model}, {"batch_size", cfg.batch}, {"input", graph.input}, {"epoch_done", epochs_done},
               {"optimizer_steps", optimizer_steps}, {"config", to_json(cfg)}, {"history", json::array()}};
  for (const auto& e : history) meta["history"].push_back(to_json(e));
  return meta;
}

void print_host_load_note(const json& summary) {
  if (const std::string busy = hw::busy_note(hw::host_load_from_json(summary.value("host_load", json()))); !busy.empty())
    std::printf("note: %s during training, so its speed reads low; 'top' shows what else runs\n", busy.c_str());
}

void print_notes(const std::vector<std::string>& notes) {
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
}

std::string write_record(const json& record, const std::string& dir, const std::string& name) {
  const std::string path = unused_stem(dir, name, {".json"}) + ".json";
  // Atomically, so an interrupted write leaves no half record for `plan --against` or
  // `lab --resume` to trip over.
  write_file_atomically(path, record.dump(2) + "\n", "check --runs-dir");
  return path;
}

json build_record(const TrainConfig& cfg, const nn::Graph& graph, const data::DataPair& data,
                const std::vector<EpochStats>& epochs, int threads, const std::string& energy_source) {
  json r;
  r["dlperf_version"] = dlperf_version();
  r["dlperf_commit"] = dlperf_commit();
  r["command"] = "train";
  r["config"] = to_json(cfg);
  r["config"]["threads_used"] = threads;
  r["machine"] = hw::machine_json();
  const double b = double(cfg.batch);
  r["model"] = {{"name", graph.model}, {"parameters", graph.param_count()},
                {"forward_flops_per_image", graph.forward_flops() / b},
                {"backward_flops_per_image", graph.backward_flops() / b},
                {"activation_bytes_per_image", graph.activation_bytes() / b}};
  const auto& t = data.train;
  r["data"] = {{"name", t.name}, {"source", data.source}, {"train_images", t.size()}, {"test_images", data.test.size()},
               {"shape", {t.channels, t.height, t.width}}, {"classes", t.classes}};
  r["epochs"] = json::array();
  double train_s = 0, peak = 0, wait = 0, images = 0, joules = 0, low = 0, high = 0;
  bool ranged = true;  // every measured epoch has its range (NVML)
  std::vector<hw::HostLoad> loads;
  for (const auto& e : epochs) {
    loads.push_back(e.host_load);
    if (e.energy_j > 0) joules += e.energy_j;
    if (e.energy_j > 0 && e.energy_low_j >= 0) low += e.energy_low_j, high += e.energy_high_j;
    else if (e.energy_j > 0) ranged = false;
    r["epochs"].push_back(to_json(e));
    train_s += e.train_s;
    wait += e.data_wait_s;
    images += e.images_per_s * e.train_s;
    peak = std::max(peak, e.peak_bytes);
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  if (!epochs.empty())
    r["summary"] = {{"epochs_run", epochs.size()}, {"train_s", train_s}, {"images_per_s", images / train_s},
                    {"final_test_acc", epochs.back().evaluated ? json(epochs.back().test_acc) : json()},
                    {"final_train_loss", epochs.back().train_loss},
                    {"peak_bytes", peak}, {"max_rss_bytes", double(ru.ru_maxrss) * 1024.0},
                    {"data_wait_share", wait / train_s}, {"host_load", hw::to_json(hw::combined(loads))}};
  // What of the process the kernel backed with huge pages (machine.huge_pages says what asked).
  if (const double huge = process_huge_page_bytes(); !epochs.empty() && huge >= 0) r["summary"]["huge_page_bytes"] = huge;
  // Energy and CO2 where measured (RAPL: CPU packages only; NVML: the GPU board).
  if (!epochs.empty() && epochs.back().energy_j >= 0) {
    r["summary"]["energy_j"] = joules;
    if (ranged && high > 0) r["summary"]["energy_j_range"] = {low, high};
    r["summary"]["co2_g_world_average"] = joules / 3.6e6 * 480;  // 480 gCO2e/kWh: Ember's 2023 world average
  }
  r["energy_source"] = energy_source;
  return r;
}

}  // namespace detail

}  // namespace dlperf::train

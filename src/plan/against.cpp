#include "plan/against.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "backend/cpu/batchnorm_bf16.h"
#include "backend/cpu/conv_gemm.h"
#include "backend/cpu/layouts.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/small_layers.h"
#include "backend/cuda/layout.h"  // CUDA-free
#include "core/memory.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/json_error.h"
#include "core/text.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"
#include "plan/catalog.h"
#include "plan/memory.h"
#include "plan/targets.h"

namespace dlperf::plan {

using nlohmann::json;

ErrorSummary summarize(std::vector<double> errors) {
  if (errors.empty()) return {};
  for (double& e : errors) e = std::fabs(e);
  std::sort(errors.begin(), errors.end());
  const size_t n = errors.size();
  return {n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2, errors.back()};
}

namespace {

// The fields a record needs to be planned, as JSON pointers: a damaged or hand-edited record is
// skipped naming the first one missing (or of the wrong type), rather than stopping the whole
// comparison with a bare JSON error.
std::string missing_field(const json& r) {
  const std::vector<std::pair<const char*, bool (*)(const json&)>> need = {
      {"/config/batch_size", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() > 0; }},
      {"/config/model", [](const json& v) { return v.is_string(); }},
      {"/data/shape", [](const json& v) { return v.is_array() && v.size() == 3 && v[0].is_number() && v[1].is_number() && v[2].is_number(); }},
      {"/data/classes", [](const json& v) { return v.is_number_integer(); }},
      {"/data/train_images", [](const json& v) { return v.is_number() && v.get<double>() >= 1; }},
      {"/epochs", [](const json& v) { return v.is_array() && !v.empty() && v.back().is_object(); }},
      {"/summary/peak_bytes", [](const json& v) { return v.is_number(); }}};
  for (const auto& [pointer, ok] : need) {
    const json::json_pointer p(pointer);
    if (!r.contains(p) || !ok(r[p])) return pointer;
  }
  if (r["data"]["train_images"].get<double>() < r["config"]["batch_size"].get<double>()) return "/data/train_images";  // not a step
  for (const char* key : {"images_per_s", "train_s"})
    if (const json v = r["epochs"].back().value(key, json()); !v.is_number() || v.get<double>() <= 0)
      return fmt::format("/epochs/-1/{}", key);
  if (r.contains("profile") && !r.value(json::json_pointer("/profile/step/step_s"), json()).is_number()) return "/profile/step/step_s";
  // Fields read with a default where absent (older records lack some), but of the right type where present.
  const auto is_string = [](const json& v) { return v.is_string(); };
  const auto is_number = [](const json& v) { return v.is_number(); };
  const std::vector<std::pair<const char*, bool (*)(const json&)>> typed = {
      {"/config/optimizer", is_string}, {"/config/precision", is_string}, {"/config/device_used", is_string},
      {"/config/layout", is_string}, {"/energy_source", is_string}, {"/config/momentum", is_number},
      {"/config/workers", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; }},
      {"/config/data_on_device", [](const json& v) { return v.is_boolean(); }},
      {"/config/augment", [](const json& v) { return v.is_boolean(); }},
      {"/device", [](const json& v) { return v.is_object() && v.value("name", json("")).is_string(); }},
      {"/config/pin_memory", [](const json& v) { return v.is_boolean(); }},
      {"/config/graphs", [](const json& v) { return v.is_boolean(); }},
      {"/config/flush_denormals", [](const json& v) { return v.is_boolean(); }},
      {"/config/small_conv", is_string},
      {"/data/test_images", [](const json& v) { return v.is_number() && v.get<double>() >= 0; }},
      {"/cpu_step/winograd_on", [](const json& v) { return v.is_boolean(); }},
      {"/cpu_step/add_relu_fused", [](const json& v) { return v.is_boolean(); }},
      {"/cpu_step/amx_layers", [](const json& v) { return v.is_array(); }},
      {"/cpu_step/one_thread_layers", [](const json& v) { return v.is_array(); }},
      {"/cpu_step/conv_matrix_products",
       [](const json& v) { return v.is_string() && (v == "auto" || v == "off" || v == "all"); }},
      {"/cpu_step/bf16_batchnorm", [](const json& v) { return v.is_string() && (v == "dlperf" || v == "onednn"); }}};
  for (const auto& [pointer, ok] : typed) {
    const json::json_pointer p(pointer);
    if (r.contains(p) && !ok(r[p])) return pointer;
  }
  return "";
}

// Why a CPU record cannot be predicted here, or "": it ran on another CPU (the plan predicts with
// this machine's measured ceilings, engine fit and oneDNN layouts). Records without the
// machine's facts (hand-made, or older than them) are taken as this machine's.
std::string made_on_another_cpu(const json& r, const json& here) {
  const json cpu = r.value(json::json_pointer("/machine/cpu"), json());
  if (!cpu.is_object()) return "";
  const json theirs = hw::cpu_identity(cpu), ours = hw::cpu_identity(here);
  for (const auto& [key, value] : theirs.items())
    if (ours.contains(key) && ours[key] != value)
      return fmt::format("trained on another CPU, {}, than this one, {}: the plan predicts with this machine's ceilings and "
                         "memory layouts, so compare it on the machine that made it",
                         hw::cpu_facts(cpu), hw::cpu_facts(here));
  return "";
}

// Why an epoch's NVML energy is too coarse to compare, or "" when it is fine. The board's energy
// counter moves about every 100 ms (hw/energy_trace.h): records since 2026-11-28 keep the range
// its updates allow, and a range wider than half the estimate (an epoch of a few updates) says
// little. Older records read the counter twice, each read up to one update stale; their epochs
// are compared from 2 s on (20 updates: within about 10%).
std::string nvml_energy_too_coarse(const json& r, const json& epoch) {
  if (r.value("energy_source", "").rfind("NVML", 0) != 0) return "";
  const json range = epoch.value("energy_j_range", json());
  if (range.is_array() && range.size() == 2 && range[0].is_number() && range[1].is_number()) {
    const double joules = epoch["energy_j"], spread = range[1].get<double>() - range[0].get<double>();
    return spread <= 0.5 * joules ? "" : "its last epoch spanned too few of NVML's energy counter updates (about every 100 ms) to pin its energy within 25%";
  }
  return epoch["train_s"].get<double>() >= 2 ? ""
                                              : "its last epoch lasted under 2 s and was measured (before 2026-11-28) by two reads of NVML's "
                                                "energy counter, each up to one of its updates (about 100 ms) stale";
}

}  // namespace

std::string other_dlperf_output(const json& j) {
  if (!j.is_object()) return "";
  if (j.contains("traceEvents")) return "trace";
  const json command = j.value("command", json());
  if (command == "bench") return "bench result";
  if (command == "lab") return "lab summary";
  if (j.contains("rows") && j.contains("step") && j.contains("ceilings")) return "profile table";
  if (j.contains("f32_gflops") && j.contains("bandwidth_gbps")) return "machine profile";
  return "";
}

double recorded_call_us(const json& summary) {
  const json call = summary.value("engine_call_us", json());
  auto positive = [&](const char* k) { return call.is_object() && call.value(k, json()).is_number() && call[k].get<double>() > 0; };
  return positive("start") && positive("end") ? 0.5 * (call["start"].get<double>() + call["end"].get<double>()) : 0;
}

std::vector<Comparison> compare_with_records(const std::vector<std::string>& files, const CpuCeilings& c,
                                             std::vector<Skipped>& skipped, double cpu_watts,
                                             std::map<std::string, int>* others) {
  const CeilingsAt at = [&](int threads) { return threads == c.threads || threads <= 0 ? c : host_ceilings(threads); };
  return compare_with_records(files, c.threads, at, skipped, cpu_watts, others);
}

namespace {

// The files --against names, with each folder in its place replaced by the .json files in and
// below it, sorted: `--against runs` as `--against runs/*.json`, and a lab's report folder
// (reports/lab) with the records in its runs/. A profile's Chrome traces are left out by name
// (they can be hundreds of MB to parse only to be told apart). A folder without any is skipped
// and says so.
std::vector<std::string> with_folders_listed(const std::vector<std::string>& files, std::vector<Skipped>& skipped) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& file : files) {
    std::error_code ec;
    if (!fs::is_directory(file, ec)) {
      out.push_back(file);
      continue;
    }
    std::vector<std::string> inside;
    try {  // the walk's later steps throw where they fail
      for (const auto& e : fs::recursive_directory_iterator(file, fs::directory_options::skip_permission_denied, ec)) {
        const std::string name = e.path().filename().string();
        std::error_code entry;  // an entry that cannot be read (a dangling link) is left out, not the folder
        if (e.is_regular_file(entry) && e.path().extension() == ".json" && !name.ends_with(".trace.json")) inside.push_back(e.path().string());
      }
    } catch (const fs::filesystem_error& e) {
      ec = e.code();
    }
    if (ec) {
      skipped.push_back({file, fmt::format("a folder that cannot be listed ({})", ec.message())});
      continue;
    }
    if (inside.empty()) skipped.push_back({file, "a folder with no .json files in or below it"});
    std::sort(inside.begin(), inside.end());
    out.insert(out.end(), inside.begin(), inside.end());
  }
  return out;
}

}  // namespace

std::vector<Comparison> compare_with_records(const std::vector<std::string>& given, int default_threads, const CeilingsAt& ceilings_at,
                                             std::vector<Skipped>& skipped, double cpu_watts,
                                             std::map<std::string, int>* others) {
  const std::vector<std::string> files = with_folders_listed(given, skipped);
  std::vector<Comparison> out;
  std::optional<Catalog> catalog;  // read at the first GPU record; find() returns references into it
  const json here = hw::to_json(hw::cpu_info());
  // One record; a field of the wrong type that missing_field does not look at (it checks those
  // every record needs) is caught below and said as the record's fault.
  auto compare_one = [&](const std::string& file) {
    json r;
    try {
      if (!std::filesystem::exists(file)) {  // most often a glob that matched nothing, passed on as is
        skipped.push_back({file, "no such file"});
        return;
      }
      std::ifstream f(file);
      check(bool(f), fmt::format("cannot read {}", file));
      r = json::parse(f);
    } catch (const json::exception& e) {
      skipped.push_back({file, fmt::format("not a JSON run record ({})", json_error_text(e))});
      return;
    } catch (const std::exception& e) {  // unreadable (dlperf::Error), or the file system's error
      skipped.push_back({file, fmt::format("not a JSON run record ({})", e.what())});
      return;
    }
    if (r.is_object() && r.contains("command") && !r["command"].is_string()) {
      skipped.push_back({file, "a damaged run record: /command is missing or not what dlperf wrote"});
      return;
    }
    if (!r.is_object() || r.value("command", "") != "train" || !r.contains("summary")) {
      const std::string kind = other_dlperf_output(r);
      if (others && !kind.empty()) {
        ++(*others)[kind];
        return;
      }
      skipped.push_back({file, kind.empty() ? "not a finished training run record" : fmt::format("a {}, not a training run record", kind)});
      return;
    }
    if (const std::string field = missing_field(r); !field.empty()) {
      skipped.push_back({file, fmt::format("a damaged run record: {} is missing or not what dlperf wrote", field)});
      return;
    }
    const json& cfg = r["config"];
    const json& d = r["data"];
    const int64_t batch = cfg["batch_size"];
    nn::OptimizerConfig opt;
    opt.name = cfg.value("optimizer", "sgd");
    opt.momentum = cfg.value("momentum", 0.9);
    nn::Graph g;
    try {
      g = nn::build_graph(nn::load_model(cfg["model"]), {d["shape"][0], d["shape"][1], d["shape"][2]}, d["classes"], batch);
    } catch (const Error& e) {
      skipped.push_back({file, fmt::format("cannot rebuild its model: {}", e.what())});
      return;
    }
    Comparison cmp;
    cmp.file = std::filesystem::path(file).filename().string();
    cmp.run = fmt::format("{} b{} w{}", g.model, batch, cfg.value("workers", 0));
    if (cfg.value("lr", json()).is_number()) cmp.lr = cfg["lr"];
    cmp.input = dims_str(Dims(g.input.begin() + 1, g.input.end()));  // without the batch
    const json& last = r["epochs"].back();
    const double steps = std::floor(d["train_images"].get<double>() / double(batch));
    // dlperf profile stops after its recorded steps: its one epoch is a few steps, warm-up
    // included, so the measured step is the profile's (the recorded steps' mean) and its energy
    // is not an epoch's. (Told by the images it trained; older records put 0 for its accuracy.)
    const double images_trained = last["images_per_s"].get<double>() * last["train_s"].get<double>();
    const bool profile_run = r.contains("profile") && images_trained < 0.99 * steps * double(batch);
    cmp.measured_step_s = profile_run ? r["profile"]["step"]["step_s"].get<double>() : last["train_s"].get<double>() / steps;
    cmp.measured_peak = r["summary"]["peak_bytes"];
    cmp.busy_note = hw::busy_note(hw::host_load_from_json(last.value("host_load", json())));
    if (!profile_run && last.value("energy_j", json()).is_number()) cmp.measured_energy_j = last["energy_j"];
    cmp.energy_source = profile_run ? "a dlperf profile run: its energy covers a few steps, not an epoch"
                                    : r.value("energy_source", "the record has no energy measurement");
    if (const std::string coarse = cmp.measured_energy_j >= 0 ? nvml_energy_too_coarse(r, last) : ""; !coarse.empty()) {
      cmp.measured_energy_j = -1;
      cmp.energy_source = coarse;
    }
    const std::string tag = profile_run ? " (profile)" : "";
    const std::string device = cfg.value("device_used", "cpu");
    if (device.rfind("cuda", 0) == 0) {
      // A GPU run: the targets table's row for the GPU it ran on (its kernels on the fitted roofline).
      const std::string gpu = r.contains("device") ? r["device"].value("name", "") : "";
      const std::string id = catalog_id_for_gpu(gpu);
      if (id.empty()) {
        skipped.push_back({file, fmt::format("a GPU run on {}, which the hardware catalog has no entry for", gpu.empty() ? "?" : gpu)});
        return;
      }
      JobSpec job;
      job.graph = &g;
      job.global_batch = batch;
      job.steps = steps;
      job.precision = cfg.value("precision", "fp32");
      job.optimizer = opt.name;
      job.gpu_layout = cfg.value("layout", "auto");
      if (!catalog) catalog = load_catalog();
      const Device& gpu_spec = catalog->find(id);
      const TargetEstimate t = estimate(job, gpu_spec, 0, 1);
      if (!t.unsupported.empty()) {
        skipped.push_back({file, fmt::format("{}: {}", id, t.unsupported)});
        return;
      }
      cmp.run = fmt::format("{} b{} {} on {}{}", g.model, batch, job.precision, id, tag);
      cmp.on_gpu = true;
      const bool on_device = cfg.value("data_on_device", false), pinned = cfg.value("pin_memory", true);
      cmp.gpu_settings = {
          {"layout", cuda::to_string(cuda::resolve_layout(job.gpu_layout, job.precision))},
          {"feed", on_device ? "data on the GPU" : pinned ? "pinned copies" : "pageable copies"},
          {"graphs", cfg.value("graphs", true) ? "" : "no graphs"},
          {"workspace", cfg.value("conv_workspace_mb", json()).is_number() ? fmt::format("{} MB workspace", cfg["conv_workspace_mb"].dump()) : ""},
          {"small conv", cfg.value("small_conv", "auto") == "auto" ? "" : "small-conv " + cfg.value("small_conv", std::string())}};
      cmp.predicted_step_s = t.step_s;
      // Memory: dlperf's GPU executor byte for byte, plus the dataset when it was on the GPU.
      cmp.predicted_peak = gpu_engine_memory(g, opt.name, job.precision, job.gpu_layout).total();
      // The convolutions' workspace is what cuDNN's timed search chose on that GPU: the run's own.
      const json step = r.contains("gpu_step") && r["gpu_step"].is_object() ? r["gpu_step"] : json::object();
      if (const json ws = step.value("conv_workspace_bytes", json()); ws.is_number_unsigned()) {
        if (const auto bytes = ws.get<uint64_t>(); bytes > 0) cmp.predicted_peak += double(CachingAllocator::block_bytes(bytes));
        cmp.conv_workspace_from_record = true;
      }
      // And the trainer's feed: the dataset where it was on the GPU, else pinned staging slots.
      cmp.predicted_peak += gpu_feed_bytes(g, {.data_on_device = cfg.value("data_on_device", false),
                                               .pin_memory = cfg.value("pin_memory", true),
                                               .train_images = int64_t(d["train_images"].get<double>()),
                                               .test_images = int64_t(d.value("test_images", 0.0))});
      if (gpu_spec.tdp_w > 0) cmp.predicted_energy_j = gpu_spec.tdp_w * cmp.predicted_step_s * steps;
      out.push_back(cmp);
      return;
    }
    if (const std::string why = made_on_another_cpu(r, here); !why.empty()) {
      skipped.push_back({file, why});
      return;
    }
    const std::string precision = cfg.value("precision", "fp32");
    if (precision == "bf16" && !cpu::has_bf16_kernels()) {  // its layouts are oneDNN's bf16 kernels'
      skipped.push_back({file, "a bf16 run, and oneDNN has no bf16 kernels on this CPU to plan its memory by"});
      return;
    }
    if (precision != "fp32") cmp.run += " " + precision;
    if (cfg.value("augment", false)) cmp.run += " aug";  // its batches fill slower (EngineModel)
    // Arithmetic on denormals (--keep-denormals) can take 100x an instruction: not in the plan.
    if (!cfg.value("flush_denormals", true)) cmp.run += " kept denormals";
    cmp.run += tag;
    // With the ceilings of the threads it trained on: a --threads 1 run has half the cores' peak.
    const int threads = cfg.value("threads_used", json()).is_number_integer() ? cfg["threads_used"].get<int>() : default_threads;
    if (threads > hw::usable_cpus()) {
      skipped.push_back({file, fmt::format("trained on {}, more than the {} this process may use here, so its ceilings cannot be "
                                           "measured here", counted(threads, "thread"), counted(hw::usable_cpus(), "CPU"))});
      return;
    }
    const int workers = cfg.value("workers", 0);
    CpuCeilings at = ceilings_at(threads <= 0 ? default_threads : threads);
    // The engine call's cost the run trained under, where its record measured it (since
    // 2026-11-24): on a VM it moves with where the vCPUs are placed, and a tiny model's step with
    // it, so the cost measured now would blame the model for the machine's change.
    if (const double call_us = recorded_call_us(r["summary"]); call_us > 0) {
      at.call_overhead_s = call_us * 1e-6;
      cmp.call_from_record = true;
    }
    cmp.call_us = at.call_overhead_s * 1e6;
    at.loader_workers = workers;
    at.augment = cfg.value("augment", false);
    // Its convolutions as they ran: Winograd where its record says the engine used it (since
    // 2026-11-28), direct in older records and under DLPERF_CPU_WINOGRAD=off, whatever this
    // process would choose; its memory is laid out so too (a Winograd kernel's scratchpad differs).
    const bool winograd = r.value(json::json_pointer("/cpu_step/winograd_on"), false);
    at.winograd = winograd;
    const cpu::ScopedWinograd as_run(winograd ? cpu::WinogradUse::where_it_pays : cpu::WinogradUse::off);
    // bf16 convolutions on AMX where its record lists the layers that ran there (since
    // 2026-11-29); older bf16 records ran them on the AVX512-BF16 kernels (their memory is laid
    // out as this process would: on a CPU with AMX, in nhwc).
    at.amx_convolutions = r.contains(json::json_pointer("/cpu_step/amx_layers"));
    // Their passes as matrix products as its record says (since 2026-11-29), none in older ones.
    const cpu::ScopedConvGemm products_as_run(r.value(json::json_pointer("/cpu_step/conv_matrix_products"), std::string("off")));
    // Its bf16 batchnorms on dlperf's code or oneDNN's kernel as its record says (since
    // 2026-11-30: DLPERF_CPU_BF16_BATCHNORM=onednn runs the kernel); older records as this process would.
    std::optional<cpu::ScopedBf16Batchnorm> batchnorm_as_run;
    if (const std::string bn = r.value(json::json_pointer("/cpu_step/bf16_batchnorm"), std::string()); !bn.empty())
      batchnorm_as_run.emplace(bn == "dlperf");
    // A residual add's relu: inside the add where its record says so (since 2026-11-29), on its
    // own in older records, which its memory and passes follow.
    std::optional<ScopedReluAfterAddApart> relu_apart;
    if (!r.value(json::json_pointer("/cpu_step/add_relu_fused"), false)) relu_apart.emplace();
    // Its small layers on one thread where its record lists some that ran so (since 2026-11-30);
    // every layer on all its threads in older records, and in runs under
    // DLPERF_CPU_SMALL_LAYERS=all-threads (an empty list: where the rule picks none, the same plan).
    const cpu::ScopedSmallLayers small_layers_as_run(!r.value(json::json_pointer("/cpu_step/one_thread_layers"), json::array()).empty());
    cmp.threads = std::max(threads, 0);
    cmp.predicted_step_s = predict_step(g, opt, with_precision(at, precision)).step_s;
    // oneDNN sizes some scratchpads by the threads it will fork: laid out on the run's.
    const hw::ScopedThreads run_threads(threads);
    cmp.predicted_peak = engine_memory(g, opt, workers, precision).total();
    if (cpu_watts > 0) cmp.predicted_energy_j = cpu_watts * cmp.predicted_step_s * steps;
    out.push_back(cmp);
  };
  for (const auto& file : files) {
    try {
      compare_one(file);
    } catch (const json::exception& e) {
      skipped.push_back({file, fmt::format("a damaged run record: {}", json_error_text(e))});
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {  // one record the engine cannot plan does not stop the others' comparison
      skipped.push_back({file, e.what()});
    }
  }
  // Runs of one name are told apart by what differs among them: the image shape (one model on
  // two datasets), the learning rate (the lab's batch sizes with and without the linear scaling
  // rule), the CPU threads (the lab's tiny workload on all cores and on one). Repeats of one
  // configuration keep the name.
  std::map<std::string, std::set<std::string>> inputs;
  std::map<std::string, std::set<double>> lrs;
  std::map<std::string, std::set<int>> threads;
  for (const Comparison& cmp : out) inputs[cmp.run].insert(cmp.input), lrs[cmp.run].insert(cmp.lr), threads[cmp.run].insert(cmp.threads);
  // A GPU run's settings likewise: the layout, the feed, graphs, the workspace, the small convolutions.
  std::map<std::pair<std::string, std::string>, std::set<std::string>> settings;  // (name, setting) -> its words
  for (const Comparison& cmp : out)
    for (const auto& [what, words] : cmp.gpu_settings) settings[{cmp.run, what}].insert(words);
  for (Comparison& cmp : out) {
    const std::string name = cmp.run;
    if (inputs[name].size() > 1) cmp.run += " on " + cmp.input;
    if (lrs[name].size() > 1 && cmp.lr > 0) cmp.run += fmt::format(" lr {:g}", cmp.lr);
    if (threads[name].size() > 1 && cmp.threads > 0) cmp.run += fmt::format(" {}", counted(cmp.threads, "thread"));
    for (const auto& [what, words] : cmp.gpu_settings)
      if (settings[{name, what}].size() > 1 && !words.empty()) cmp.run += ", " + words;
  }
  return out;
}

}  // namespace dlperf::plan

// dlperf plan: predict a training run's FLOPs, memory and time from the op cost model before it
// runs, or (--against, plan_against.cpp) predict recorded runs and show the prediction's error.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>

#include "backend/cpu/layouts.h"
#include "backend/cpu/ops.h"
#include "backend/cuda/layout.h"
#include "bench/cpu_bench.h"
#include "cli/commands.h"
#include "cli/plan_against.h"
#include "core/error.h"
#include "core/files.h"
#include "core/memory.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "plan/against.h"
#include "plan/gpu_step.h"
#include "plan/layout_search.h"
#include "plan/memory.h"
#include "plan/step_time.h"
#include "plan/targets.h"
#include "plan/transformer.h"
#include "report/table.h"

namespace dlperf::cli {

namespace {

struct PlanArgs {
  std::string model = "medium";
  std::string input = "1x28x28";
  int64_t classes = 10;
  std::string made_for;  ///< "(3x224x224 and 1000 classes: ...)" where the spec's own were taken
  int64_t batch = 64;
  std::string optimizer = "sgd";
  int workers = 1;
  int threads = 0;  ///< this CPU's compute threads; 0 = all, as train's
  bool augment = false;
  int64_t dataset = 60000;
  int64_t epochs = 5;
  bool layers = false;
  std::vector<std::string> against;
  std::string json_out;
  // Transformers and hardware targets
  std::string transformer;
  double tokens = 0;
  int64_t micro_batch = 1;
  std::string precision = "fp32";
  plan::Layout layout;
  std::vector<std::string> targets;
  std::string region = "world";
  double pue = 0, grid = -1, cpu_watts = 0;
  std::string catalog;
  int64_t scaling = 0;
  int64_t devices = 0;       ///< Transformer: search the layouts of this many devices (0: plan --dp/--tp/--pp as given)
  std::string grad_overlap = "auto";  ///< --grad-overlap: auto | on | off
  double bucket_mb = 0;               ///< --bucket-mb: 0 = the framework's
  double nic_gbits = 400;             ///< --nic-gbits: each device's link to other nodes
  int node_size = 8;                  ///< --node-size: devices a node's interconnect joins
  plan::LayoutFixed fixed;   ///< with devices: the degrees the user set, which the search keeps
};

// $12.50, $4,108,252; past a trillion dollars, $1.05e+13 (a plan of an absurd job stays readable);
// under a cent, "<$0.01" rather than a $0.00 that reads as free.
std::string money(double x) {
  if (x < 0) return "-";
  if (x > 0 && x < 0.005) return "<$0.01";
  if (x < 100) return fmt::format("${:.2f}", x);
  if (x >= 1e12) return fmt::format("${:.3g}", x);
  std::string digits = fmt::format("{:.0f}", x);
  for (int i = int(digits.size()) - 3; i > 0; i -= 3) digits.insert(size_t(i), ",");
  return "$" + digits;
}
// --grad-overlap: the data-parallel all-reduce in buckets during the backward pass. auto follows
// what users of each kind of job run: PyTorch DDP, which overlaps, for a CNN; Megatron-LM, whose
// --overlap-grad-reduce is off unless asked for, for a Transformer.
bool overlaps_grad_reduce(const PlanArgs& a) { return a.grad_overlap == "on" || (a.grad_overlap == "auto" && a.transformer.empty()); }

// A job's cluster from the flags: its nodes and network, and whether the data-parallel
// all-reduce overlaps the backward pass, in which buckets.
void set_cluster(plan::JobSpec& job, const PlanArgs& a) {
  job.node_size = a.node_size;
  job.network_gbps = a.nic_gbits / 8;
  job.overlap_grad_reduce = overlaps_grad_reduce(a);
  job.bucket_bytes = a.bucket_mb * 1024 * 1024;  // MiB, as DDP's bucket_cap_mb
}

std::string or_dash(double x, const char* f) { return x < 0 ? "-" : fmt::format(fmt::runtime(f), x); }

// gCO2e per kWh: --grid-intensity, or the catalog's figure for --region.
double grid_intensity(const PlanArgs& a, const plan::Catalog& cat) {
  if (a.grid >= 0) return a.grid;
  auto it = cat.grid.find(a.region);
  check(it != cat.grid.end(), fmt::format("no grid carbon intensity for region '{}'", a.region),
        "use a region of data/hardware.json (world, us, eu, fr, de, gb, ...) or --grid-intensity G_PER_KWH");
  return it->second;
}

// One target's estimate for --json: numbers in SI units, null where unknown.
nlohmann::json to_json(const plan::TargetEstimate& e) {
  auto known = [](double x) { return x < 0 ? nlohmann::json() : nlohmann::json(x); };
  if (!e.unsupported.empty()) return {{"target", e.id}, {"unsupported", e.unsupported}};
  return {{"target", e.id},         {"devices", e.devices},           {"memory_bytes_per_device", e.memory},
          {"capacity_bytes", e.capacity}, {"fits", e.fits},          {"what_fits", e.what_fits.empty() ? nlohmann::json() : nlohmann::json(e.what_fits)},
          {"step_s", e.step_s},      {"compute_s", e.compute_s},       {"comm_s", e.comm_s}, {"dp_comm_s", e.dp_comm_s},
          {"comm_hidden_s", e.hidden_comm_s}, {"gradient_buckets", e.gradient_buckets}, {"tp_comm_s", e.tp_comm_s}, {"pp_comm_s", e.pp_comm_s},
          {"allreduce", e.allreduce == "-" ? nlohmann::json() : nlohmann::json(e.allreduce)},
          {"scaling_efficiency", e.efficiency}, {"mfu", known(e.mfu)}, {"job_s", e.job_s}, {"cost_usd", known(e.cost)},
          {"energy_kwh", known(e.energy_kwh)}, {"co2_kg", known(e.co2_kg)}};
}

// The comm column: the step's communication, the data-parallel all-reduce's algorithm, the
// shares of it that tensor parallelism's all-reduces and the pipeline's sends take, and what of
// it the backward pass hides ("1.4 s ring (tp 1.2 s, pp 40 ms, 90 ms hidden)"); a step whose only
// communication is one of those names it ("12 ms tp").
std::string comm_text(const plan::TargetEstimate& e) {
  if (e.comm_s <= 0) return "-";
  std::string s = format_seconds(e.comm_s);
  if (e.allreduce != "-") s += " " + e.allreduce;
  std::vector<std::string> shares;
  for (const auto& [name, t] : {std::pair{"tp", e.tp_comm_s}, std::pair{"pp", e.pp_comm_s}}) {
    if (t <= 0) continue;
    if (t >= e.comm_s) return s + " " + name;  // all of it
    shares.push_back(fmt::format("{} {}", name, format_seconds(t)));
  }
  if (e.hidden_comm_s > 0) shares.push_back(format_seconds(e.hidden_comm_s) + " hidden");
  return shares.empty() ? s : fmt::format("{} ({})", s, fmt::join(shares, ", "));
}

// Why a target does not fit, and the first change the planner found that makes it fit.
std::string does_not_fit(const plan::JobSpec& job, const plan::TargetEstimate& e) {
  if (!e.what_fits.empty()) return fmt::format("{} does not fit; it would with {}", e.id, e.what_fits);
  if (!job.transformer) return fmt::format("{} does not fit even at batch 1 per device", e.id);
  return fmt::format("{} does not fit at --tp {} --pp {}, even with ZeRO-3, full activation checkpointing and micro-batch 1: "
                     "raise --tp or --pp",
                     e.id, job.layout.tp, job.layout.pp);
}

// The target a search or scaling table is planned on: the first of --targets, else an H100.
std::string first_target(const PlanArgs& a) { return a.targets.empty() ? "h100-sxm" : a.targets.front(); }

// The targets planned when --targets is not given: this CPU for a CNN, the large GPUs for a Transformer.
std::vector<std::string> targets_or_default(const PlanArgs& a, bool transformer) {
  if (!a.targets.empty()) return a.targets;
  return transformer ? std::vector<std::string>{"a100-80gb", "h100-sxm", "h200"} : std::vector<std::string>{"cpu"};
}

// dlperf's GPU step on target `d`, pass by pass, slowest first: what `dlperf profile` on that GPU
// would show, predicted (plan/gpu_step.h). `step_s` is the target row's step, which they add up to.
nlohmann::json print_gpu_passes(const plan::JobSpec& job, const plan::Device& d, double step_s) {
  const nn::Graph& g = *job.graph;
  const std::string precision = plan::gpu_kernels_precision(d, job.precision);
  const double peak = plan::peak_flops(d, job.precision);
  std::vector<plan::GpuPassOn> rows = plan::gpu_passes_on(job, d);
  std::stable_sort(rows.begin(), rows.end(), [](const auto& x, const auto& y) { return x.time.total() > y.time.total(); });
  report::Table t({"layer", "phase", "GFLOP", "MB", "us", "share", "limit"});
  nlohmann::json out = nlohmann::json::array();
  std::map<std::string, double> by_limit;
  for (const auto& r : rows) {
    const double s = r.time.total();
    const std::string layer = plan::gpu_layer_name(g, r.pass);
    by_limit[r.time.limit()] += s;
    t.add({layer, r.pass.phase, format_decimals(r.pass.cost.flops / 1e9, 3), format_decimals(r.pass.cost.bytes / 1e6, 2),
           format_decimals(s * 1e6, 1), fmt::format("{:.1f}%", 100 * s / step_s), r.time.limit()});
    out.push_back({{"layer", layer}, {"phase", r.pass.phase}, {"flops", r.pass.cost.flops},
                   {"bytes", r.pass.cost.bytes}, {"predicted_s", s}, {"limit", r.time.limit()}});
  }
  std::printf("\nOn %s, pass by pass (dlperf's GPU kernels in %s, %s layout: each pass its fill plus the longer of its FLOPs at "
              "the fitted share of the %.0f TFLOP/s peak and its bytes at %.0f%% of %.0f GB/s; fitted on an H100, docs/plan.md). "
              "'dlperf profile' on that GPU measures the same passes.\n",
              d.id.c_str(), precision.c_str(), cuda::to_string(cuda::resolve_layout(job.gpu_layout, precision)), peak / 1e12,
              100 * plan::GpuEngineModel{}.bandwidth_share, d.bandwidth_gbps);
  t.print();
  std::vector<std::string> parts;
  for (const char* limit : {"compute", "memory", "fill"})
    if (by_limit.count(limit)) parts.push_back(fmt::format("{} {:.0f}%", limit, 100 * by_limit[limit] / step_s));
  std::printf("  %zu passes, %s a step; the step's time by what limits each pass: %s (fill: a kernel too small to fill the GPU)\n",
              rows.size(), format_seconds(step_s).c_str(), fmt::format("{}", fmt::join(parts, ", ")).c_str());
  return out;
}

// This CPU's ceilings for its `cpu` target, asked for only where that target is planned: measured
// (seconds without a machine profile), they would hold up a plan for GPUs alone.
using CpuCeilingsFn = std::function<plan::CpuCeilings()>;

// The targets table (with --layers, each GPU target's passes after it); returns its rows for --json.
nlohmann::json print_targets(const plan::JobSpec& job, const PlanArgs& a, const CpuCeilingsFn& c) {
  const plan::Catalog cat = plan::load_catalog(a.catalog);
  const double pue = a.pue > 0 ? a.pue : cat.pue;
  const double grid = grid_intensity(a, cat);
  const std::vector<std::string> ids = targets_or_default(a, job.transformer.has_value());
  // A Transformer's rows add the model FLOPs utilization its step comes to (the figure LLM
  // training runs are reported by).
  const bool mfu = job.transformer.has_value();
  std::vector<std::string> header = {"target", "devices", "mem/device", "fits", "step", "comm", "scaling eff", "job", "cost", "energy kWh", "CO2 kg"};
  if (mfu) header.insert(header.begin() + 7, "MFU");
  report::Table t(header);
  std::vector<std::string> notes;
  // Targets that cannot run the job, grouped by why: every GPU refusing the same convolution is
  // one note, not one 250-character line each.
  std::vector<std::pair<std::string, std::vector<std::string>>> unsupported;
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::pair<plan::Device, double>> gpus;  // the GPU targets that run the job, and their compute time a step
  for (const auto& id : ids) {
    const plan::Device d = id == "cpu" ? plan::host_device(c(), a.cpu_watts) : cat.find(id);
    const plan::TargetEstimate e = plan::estimate(job, d, grid, pue);
    rows.push_back(to_json(e));
    if (d.kind == "gpu" && e.unsupported.empty()) gpus.emplace_back(d, e.compute_s);
    if (!e.unsupported.empty()) {
      std::vector<std::string> dashes(header.size(), "-");
      dashes.front() = d.id;
      t.add(dashes);  // why goes below: in the CO2 column it pushed the others' figures right
      auto it = std::find_if(unsupported.begin(), unsupported.end(), [&](const auto& u) { return u.first == e.unsupported; });
      if (it == unsupported.end()) it = unsupported.insert(unsupported.end(), {e.unsupported, {}});
      it->second.push_back(d.id);
      continue;
    }
    std::vector<std::string> row = {d.id, fmt::format("{:.0f}", e.devices), format_bytes(e.memory) + " / " + format_bytes(e.capacity),
                                    e.fits ? "yes" : "NO", format_seconds(e.step_s),
                                    comm_text(e),
                                    fmt::format("{:.0f}%", 100 * e.efficiency), format_seconds(e.job_s), money(e.cost),
                                    or_dash(e.energy_kwh, "{:.3g}"), or_dash(e.co2_kg, "{:.3g}")};
    if (mfu) row.insert(row.begin() + 7, fmt::format("{:.0f}%", 100 * e.mfu));
    t.add(row);
    if (!e.fits) notes.push_back(does_not_fit(job, e));
    if (d.tdp_w <= 0)
      notes.push_back(fmt::format("{}: no power figure, so no energy or CO2 ({})", d.id,
                                  d.id == "cpu" ? "pass --cpu-watts for this CPU" : "add its tdp_w with --catalog"));
    if (d.price_per_hour < 0 && d.id != "cpu") notes.push_back(fmt::format("{}: no list price in the catalog ({})", d.id, d.sources.value("price", "")));
  }
  std::printf("\nOn hardware targets (%s; energy at TDP x PUE %.2f, CO2 at %.0f gCO2e/kWh for '%s'):\n",
              job.transformer ? "datasheet peaks at 60% for GEMMs"
                              : "this CPU from measured ceilings, GPUs from dlperf's kernels on their datasheets (fitted on an H100), "
                                "others from datasheets",
              pue, grid, a.grid >= 0 ? "--grid-intensity" : a.region.c_str());
  std::vector<std::string> why_not;
  for (const auto& [why, targets] : unsupported) why_not.push_back(fmt::format("{}: {}", fmt::join(targets, ", "), why));
  notes.insert(notes.begin(), why_not.begin(), why_not.end());
  t.print();
  if (mfu)  // the one published yardstick a reader can hold the row against (docs/plan.md)
    notes.push_back("MFU: the model's training FLOPs a step (6N + attention, without recomputation) over the step time and the "
                    "devices' peak; Megatron-LM reports 41-48% for GPT models of 2B to 462B parameters on up to 6144 H100s: "
                    "a row above that is likely optimistic by as much");
  for (const auto& n : notes) std::printf("  * %s\n", n.c_str());
  nlohmann::json out = {{"rows", rows}, {"pue", pue}, {"grid_gco2_per_kwh", grid}, {"notes", notes}};
  // With --layers, each GPU target's step pass by pass, as this CPU's is layer by layer.
  if (a.layers && !job.transformer)
    for (const auto& [d, compute_s] : gpus) out["gpu_passes"][d.id] = print_gpu_passes(job, d, compute_s);
  return out;
}

// Weak scaling (the per-device batch stays, the global batch grows with the devices) and strong
// scaling (the global batch stays and is split), data-parallel 1, 2, 4, ... up to --scaling N on
// the first target. `rebuild(per_device_batch)` gives the job at another per-device batch.
nlohmann::json print_scaling(const plan::JobSpec& base, const PlanArgs& a, const CpuCeilingsFn& c,
                             const std::function<plan::JobSpec(int64_t, nn::Graph&)>& rebuild) {
  if (a.scaling <= 1) return nullptr;
  nlohmann::json rows = nlohmann::json::array();
  const plan::Catalog cat = plan::load_catalog(a.catalog);
  const std::string id = !a.targets.empty() || base.transformer ? first_target(a) : "cpu";
  const plan::Device d = id == "cpu" ? plan::host_device(c(), a.cpu_watts) : cat.find(id);
  report::Table t({"data-parallel", "weak: step", "weak: comm", "weak: samples/s", "weak: efficiency", "strong: per-device batch",
                   "strong: step", "strong: speed-up", "strong: efficiency"});
  const int64_t per_device = base.transformer ? base.global_batch / base.layout.dp : base.graph->batch();
  const int64_t global = per_device * base.layout.dp;
  double t1_weak = 0, t1_strong = 0;
  for (int64_t dp = 1; dp <= a.scaling; dp *= 2) {
    nn::Graph g1, g2;
    plan::JobSpec weak = rebuild(per_device, g1);
    weak.layout.dp = dp;
    weak.global_batch = per_device * dp;
    const auto w = plan::estimate(weak, d, 0, 1);
    if (!w.unsupported.empty()) {  // no step time to scale (it printed inf and nan)
      std::printf("\nNo scaling on %s: %s\n", d.id.c_str(), w.unsupported.c_str());
      return {{"target", d.id}, {"unsupported", w.unsupported}};
    }
    if (dp == 1) t1_weak = w.step_s;
    const double samples_per_s = double(per_device * dp) / w.step_s, weak_efficiency = t1_weak / w.step_s;
    std::vector<std::string> row = {std::to_string(dp), format_seconds(w.step_s), comm_text(w), fmt::format("{:.0f}", samples_per_s),
                                    fmt::format("{:.0f}%", 100 * weak_efficiency)};
    nlohmann::json r = {{"data_parallel", dp},
                        {"weak",
                         {{"step_s", w.step_s},
                          {"comm_s", w.comm_s},
                          {"comm_hidden_s", w.hidden_comm_s},
                          {"samples_per_s", samples_per_s},
                          {"efficiency", weak_efficiency}}},
                        {"strong", nullptr}};
    if (global % dp == 0) {  // strong scaling splits the global batch evenly, or not at all
      plan::JobSpec strong = rebuild(global / dp, g2);
      strong.layout.dp = dp;
      strong.global_batch = global;
      const auto s = plan::estimate(strong, d, 0, 1);
      if (dp == 1) t1_strong = s.step_s;
      const double speed_up = t1_strong / s.step_s;
      row.insert(row.end(), {std::to_string(global / dp), format_seconds(s.step_s), fmt::format("{:.2f}x", speed_up),
                             fmt::format("{:.0f}%", 100 * speed_up / double(dp))});
      r["strong"] = {{"per_device_batch", global / dp}, {"step_s", s.step_s}, {"comm_s", s.comm_s},
                     {"comm_hidden_s", s.hidden_comm_s}, {"speed_up", speed_up}, {"efficiency", speed_up / double(dp)}};
    }
    t.add(row);
    rows.push_back(r);
  }
  std::printf("\nScaling on %s (data parallel; %s):\n", d.id.c_str(),
              base.overlap_grad_reduce ? "the gradients all-reduced in buckets during the backward pass, the step waiting for what is left"
                                       : "the gradients all-reduced after the backward pass, not overlapped (--grad-overlap on overlaps them)");
  t.print();
  return {{"target", d.id}, {"rows", rows}};
}

void write_plan_json(const PlanArgs& a, const nlohmann::json& plan) {
  if (!a.json_out.empty()) write_file_atomically(a.json_out, plan.dump(2) + "\n", "pick a writable --json path");
}

// How long the pipeline idles in a step (1F1B's bubble, plan/transformer.h), and what would cut
// it: more micro-batches where they cannot fill the stages, a multiple of pp of them where
// interleaving leaves a partial group, else --virtual-stages where it idles a tenth or more
// (each V that splits a device's layers into V chunks).
void print_pipeline_idle(const plan::TransformerSpec& t, const plan::Layout& l, int64_t m, int64_t micro_batch) {
  const double idle = plan::pipeline_bubble(l, double(m));
  const auto pp = (long long)l.pp, vp = (long long)l.vp, gap = (long long)(m % l.pp == 0 ? 0 : l.pp - m % l.pp);
  const double slots = double(vp) * double(m);  // vp x m, which a batch near 2^63 would overflow
  const std::string formula = vp == 1 ? fmt::format("(pp - 1) / micro-batches = {} / {}", pp - 1, m)
                              : gap == 0 ? fmt::format("(pp - 1) / (virtual stages x micro-batches) = {} / {:.0f}", pp - 1, slots)
                                         : fmt::format("(pp - 1 + (virtual stages - 1) x (pp - micro-batches mod pp)) / "
                                                       "(virtual stages x micro-batches) = ({} + {} x {}) / {:.0f}",
                                                       pp - 1, vp - 1, gap, slots);
  std::printf("pipeline idle  %.0f%% of the busy time: %s\n", 100 * idle, formula.c_str());
  const char* smaller = micro_batch > 1 ? " or a smaller --micro-batch" : "";
  if (m < l.pp) {
    std::printf("  * %lld micro-batches a step cannot fill %lld stages: a larger --batch-size%s gives each step %lld or more\n",
                (long long)m, pp, smaller, pp);
    return;
  }
  if (vp > 1 && gap > 0) {
    std::printf("  * interleaving takes micro-batches in groups of pp, and the last group of %lld leaves stages idle: a --batch-size%s "
                "that makes a multiple of %lld micro-batches idles less\n",
                (long long)(m % l.pp), smaller, pp);
    return;
  }
  if (vp > 1 || idle < 0.1) return;
  std::vector<int64_t> v = plan::divisors(t.layers / l.pp, t.layers / l.pp);
  v.erase(v.begin());  // 1 chunk is no interleaving
  if (v.empty()) return;
  plan::Layout two = l;
  two.vp = v.front();
  const double more = plan::activations_in_flight(two, double(m)) / plan::activations_in_flight(l, double(m));
  std::printf("  * --virtual-stages V (Megatron's interleaved 1F1B: each device's %lld layers in V chunks) divides it by V%s, for V = %s;\n"
              "    it holds %.2fx the activations at V = %lld\n",
              (long long)(t.layers / l.pp), m % l.pp == 0 ? "" : " where micro-batches are a multiple of pp",
              fmt::format("{}", fmt::join(v, ", ")).c_str(), more, (long long)v.front());
}

// The layout search's findings: the table printed above the plan's layout, and its JSON.
struct ChosenLayout {
  std::string text;
  nlohmann::json json;
};

// --devices N: every layout of N devices of the first target, planned; the fastest that fit, in a
// table (`shown` of them), and the plan's layout and micro-batch set to the fastest.
ChosenLayout choose_layout(PlanArgs& a, const plan::TransformerSpec& t, size_t shown = 8) {
  const plan::Catalog cat = plan::load_catalog(a.catalog);
  const std::string id = first_target(a);
  check(id != "cpu", "--devices searches the layouts of GPUs or TPUs, and the first target is this CPU", "put a GPU first in --targets");
  const plan::Device d = cat.find(id);
  plan::JobSpec job;
  job.transformer = t;
  job.global_batch = a.batch;
  job.precision = a.precision;
  job.optimizer = a.optimizer;
  set_cluster(job, a);
  const plan::LayoutSearch s = plan::search_layouts(job, d, a.devices, a.fixed, grid_intensity(a, cat), a.pue > 0 ? a.pue : cat.pue);
  check(!s.fitting.empty(),
        fmt::format("none of the {} layouts of {} {} fits: the leanest needs {} a device, and the search fills {:.0f}% of its {}", s.tried,
                    a.devices, id, format_bytes(s.least_memory), 100 * plan::kSearchMemoryShare, format_bytes(d.memory_gb * 1e9)),
        "use more --devices, or put a GPU with more memory first in --targets");
  const plan::LayoutChoice& best = s.fitting.front();
  a.layout = best.layout;
  a.micro_batch = best.micro_batch;
  report::Table table({"#", "dp", "tp", "pp", "vp", "micro-batch", "ZeRO", "checkpointing", "mem/device", "step", "pipeline idle", "comm", "MFU"});
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < std::min(shown, s.fitting.size()); ++i) {
    const plan::LayoutChoice& c = s.fitting[i];
    const plan::Layout& l = c.layout;
    const double idle = plan::pipeline_bubble(l, double(a.batch) / double(l.dp * c.micro_batch));
    table.add({fmt::format("{}", i + 1), fmt::format("{}", l.dp), fmt::format("{}", l.tp), fmt::format("{}", l.pp), fmt::format("{}", l.vp),
               fmt::format("{}", c.micro_batch), fmt::format("{}", l.zero), l.checkpointing, format_bytes(c.estimate.memory),
               format_seconds(c.estimate.step_s), fmt::format("{:.0f}%", 100 * idle), comm_text(c.estimate),
               fmt::format("{:.0f}%", 100 * c.estimate.mfu)});
    rows.push_back({{"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"virtual_stages", l.vp}, {"micro_batch", c.micro_batch}, {"zero", l.zero},
                    {"checkpointing", l.checkpointing}, {"pipeline_bubble", idle}, {"estimate", to_json(c.estimate)}});
  }
  const std::string note = fmt::format(
      "  * within {:.0f}% of each device's {} (the rest for the CUDA context, NCCL's buffers and fragmentation); steps a few percent "
      "apart are alike to this model: choose among them by what else matters\n",
      100 * plan::kSearchMemoryShare, format_bytes(d.memory_gb * 1e9));
  return {fmt::format("\nLayouts of {} {} devices, fastest first ({} of the {} tried fit; the plan takes the first):\n{}{}", a.devices, id,
                      s.fitting.size(), s.tried, table.str(), note),
          {{"target", id}, {"devices", a.devices}, {"tried", s.tried}, {"fitting", s.fitting.size()}, {"rows", rows}}};
}

void plan_transformer(const PlanArgs& given, const CpuCeilingsFn& c) {
  PlanArgs a = given;  // --devices sets its layout
  const plan::TransformerSpec t = plan::transformer(a.transformer);
  const ChosenLayout chosen = a.devices > 0 ? choose_layout(a, t) : ChosenLayout{};
  const double n = plan::transformer_params(t);
  const double per_token = plan::transformer_train_flops_per_token(t);
  const double tokens = a.tokens > 0 ? a.tokens : 20 * n;  // Chinchilla's 20 tokens a parameter
  const double tokens_per_step = double(a.batch) * double(t.seq);
  const plan::StateBytes sb = plan::state_bytes_per_param(a.precision, a.optimizer);
  // Each of the dp replicas takes whole micro-batches of the global batch, as Megatron and
  // DeepSpeed require; 3 sequences over 4 devices would be planned as if each got 0.75.
  // dp x micro-batch past what int64 holds is past any batch: said before the product overflows.
  check(a.layout.dp <= std::numeric_limits<int64_t>::max() / a.micro_batch,
        fmt::format("--batch-size {} is smaller than --dp {} replicas x --micro-batch {}: each replica takes whole micro-batches",
                    a.batch, a.layout.dp, a.micro_batch),
        "lower --dp or --micro-batch");
  const int64_t split = a.layout.dp * a.micro_batch;
  if (a.batch % split != 0)  // the hint's next multiple is formed only here: near 2^63 it overflows
    throw Error(fmt::format("--batch-size {} does not split into --dp {} replicas of whole micro-batches of {} (--micro-batch): the "
                            "global batch must be a multiple of {}", a.batch, a.layout.dp, a.micro_batch, split),
                a.batch <= std::numeric_limits<int64_t>::max() - split ? fmt::format("use --batch-size {}", (a.batch / split + 1) * split)
                                                                       : "lower --dp or --micro-batch");
  // Checks the layout (--tp divides the heads, ...) before anything prints.
  const int64_t micro_batches = a.batch / split;  // a pipeline's in each step
  const plan::DeviceMemory m = plan::transformer_memory(t, a.micro_batch, a.precision, a.optimizer, a.layout, double(micro_batches));
  std::printf("dlperf plan: Transformer %s (%lld layers, hidden %lld, %lld heads, sequence %lld, vocabulary %lld)\n\n", t.name.c_str(),
              (long long)t.layers, (long long)t.hidden, (long long)t.heads, (long long)t.seq, (long long)t.vocab);
  std::printf("parameters          %.4g\n", n);
  std::printf("bytes per parameter %.0f (%s weights %.0f + gradients %.0f + optimizer %.0f, %s)\n", sb.total(), a.precision.c_str(),
              sb.weights, sb.gradients, sb.optimizer, a.optimizer.c_str());
  std::printf("FLOPs per token     %.4g training (6N = %.4g, attention adds %.4g)\n", per_token, 6 * n, per_token - 6 * n);
  std::printf("tokens              %.4g%s, %.0f per step (%lld sequences)\n", tokens, a.tokens > 0 ? "" : " (20 per parameter)",
              tokens_per_step, (long long)a.batch);
  const double job_flops = per_token * tokens * (1 + plan::recompute_overhead(t, a.layout.checkpointing));
  std::printf("job FLOPs           %.4g (6ND = %.4g)%s\n", job_flops,
              6 * n * tokens, a.layout.checkpointing == "none" ? "" : fmt::format(", with {} recomputation", a.layout.checkpointing).c_str());
  report::Table mt({"memory per device", "bytes"});
  mt.add({"parameters", format_bytes(m.parameters)});
  mt.add({"gradients", format_bytes(m.gradients)});
  mt.add({"optimizer states", format_bytes(m.optimizer)});
  mt.add({"activations", format_bytes(m.activations)});
  mt.add({"workspace (logits)", format_bytes(m.workspace)});
  mt.separator();
  mt.add({"total", format_bytes(m.total())});
  std::printf("%s", chosen.text.c_str());
  const std::string interleaved = a.layout.vp > 1 ? fmt::format(" (interleaved: {} chunks a device)", a.layout.vp) : "";
  std::printf("\nlayout: data %lld x tensor %lld x pipeline %lld%s, ZeRO %d, checkpointing %s, micro-batch %lld (%lld a step)\n",
              (long long)a.layout.dp, (long long)a.layout.tp, (long long)a.layout.pp, interleaved.c_str(), a.layout.zero,
              a.layout.checkpointing.c_str(), (long long)a.micro_batch, (long long)micro_batches);
  if (a.layout.pp > 1) print_pipeline_idle(t, a.layout, micro_batches, a.micro_batch);
  mt.print();
  plan::JobSpec job;
  job.transformer = t;
  job.global_batch = a.batch;
  job.micro_batch = a.micro_batch;
  job.steps = std::ceil(tokens / tokens_per_step);
  job.precision = a.precision;
  job.optimizer = a.optimizer;
  set_cluster(job, a);
  job.layout = a.layout;
  nlohmann::json out = {
      {"command", "plan"},
      {"transformer", {{"name", t.name}, {"layers", t.layers}, {"hidden", t.hidden}, {"heads", t.heads}, {"seq", t.seq}, {"vocab", t.vocab}}},
      {"parameters", n},
      {"bytes_per_parameter", {{"weights", sb.weights}, {"gradients", sb.gradients}, {"optimizer", sb.optimizer}}},
      {"precision", a.precision},
      {"optimizer", a.optimizer},
      {"flops_per_token", per_token},
      {"tokens", tokens},
      {"global_batch", a.batch},
      {"job_flops", job_flops},
      {"layout", {{"dp", a.layout.dp}, {"tp", a.layout.tp}, {"pp", a.layout.pp}, {"virtual_stages", a.layout.vp}, {"zero", a.layout.zero},
                  {"checkpointing", a.layout.checkpointing}, {"micro_batch", a.micro_batch}, {"micro_batches", micro_batches},
                  {"pipeline_bubble", plan::pipeline_bubble(a.layout, double(micro_batches))}}},
      {"memory_bytes_per_device", {{"parameters", m.parameters}, {"gradients", m.gradients}, {"optimizer_state", m.optimizer},
                                   {"activations", m.activations}, {"workspace", m.workspace}, {"total", m.total()}}}};
  if (a.devices > 0) out["layouts"] = chosen.json;
  out["targets"] = print_targets(job, a, c);
  out["scaling"] = print_scaling(job, a, c, [&](int64_t per_device, nn::Graph&) {
    plan::JobSpec j = job;
    j.micro_batch = std::min(per_device, a.micro_batch);
    j.layout.dp = 1;
    j.global_batch = per_device;
    return j;
  });
  write_plan_json(a, out);
}



// This CPU's section of a plan: memory by category, whether it fits, step time and the ceilings.
void print_cpu_plan(const PlanArgs& a, const plan::CpuCeilings& c, const plan::MemoryEstimate& m, const plan::StepPrediction& p,
                    double steps, double avail, bool fits) {
  report::Table mt({"memory", "bytes"});
  for (int i = 0; i < kMemCategories; ++i) mt.add({std::string(to_string(MemCategory(i))), format_bytes(m.bytes[size_t(i)])});
  mt.separator();
  mt.add({"peak (all allocated at start)", format_bytes(m.total())});
  mt.print();
  if (avail > 0) {
    // The same capacity as the cpu target's row below, and dlperf train's check.
    std::printf("%s: %s of the %s dlperf plans on (%.0f%% of the %s available)\n\n", fits ? "fits" : "does NOT fit",
                format_bytes(m.total()).c_str(), format_bytes(hw::kUsableMemoryShare * avail).c_str(), 100 * hw::kUsableMemoryShare,
                format_bytes(avail).c_str());
  }
  std::printf("step time         %s (forward %s, backward %s, optimizer %s, per-step overhead %s)\n", format_seconds(p.step_s).c_str(),
              format_seconds(p.forward_s).c_str(), format_seconds(p.backward_s).c_str(), format_seconds(p.optimizer_s).c_str(),
              format_seconds(p.overhead_s).c_str());
  std::printf("throughput        %.0f images/s\n", double(a.batch) / p.step_s);
  std::printf("epoch             %s (%.0f steps, training only)\n", format_seconds(p.step_s * steps).c_str(), steps);
  std::printf("job               %s for %s\n", format_seconds(p.step_s * steps * double(a.epochs)).c_str(), counted(a.epochs, "epoch").c_str());
  std::printf("ceilings          %.1f GFLOP/s, L2 %.0f / L3 %.0f / DRAM %.0f GB/s, %s a call: %s\n", c.peak_gflops, c.l2_gbps,
              c.l3_gbps, c.dram_gbps, format_seconds(c.call_overhead_s).c_str(), c.source.c_str());
  // Which kernel the fp32 convolutions were planned on, and why: it sets their time and memory.
  std::vector<std::string> winograd;
  bool convs = false;
  for (const plan::LayerTime& l : p.layers) {
    convs = convs || l.op == "conv2d";
    if (l.winograd) winograd.push_back(l.name);
  }
  if (convs && a.precision == "fp32")
    std::printf("convolutions      %s: %s\n", winograd.empty() ? "direct" : fmt::format("Winograd for {}", fmt::join(winograd, ", ")).c_str(),
                cpu::winograd_choice().why.c_str());
}

void plan_one(const PlanArgs& a, const CpuCeilingsFn& fp32_ceilings) {
  nn::OptimizerConfig opt;
  opt.name = a.optimizer;
  check(a.dataset >= a.batch, fmt::format("--batch-size {} is larger than --dataset-size {}", a.batch, a.dataset),
        "lower --batch-size, or give the training set's real size with --dataset-size");
  const nn::ModelSpec spec = nn::load_model(a.model);
  const nn::Graph g = nn::build_graph(spec, parse_chw(a.input), a.classes, a.batch);
  // This CPU's section is dlperf's CPU engine: fp32, or bf16 where the CPU has AVX512-BF16 (as
  // `dlperf train` would run it); --precision applies to the targets below in any case. Its
  // ceilings are measured once the flags and the model have passed their checks.
  const bool cpu_bf16 = a.precision == "bf16" && cpu::has_bf16_kernels();
  const std::string cpu_precision = cpu_bf16 ? "bf16" : "fp32";
  plan::CpuCeilings c = plan::with_precision(fp32_ceilings(), cpu_precision);
  c.loader_workers = a.workers;
  c.augment = a.augment;
  // A job the CPU engine cannot run (a tensor too big for oneDNN to index) still gets its
  // FLOPs and the targets below: a GPU may take it.
  std::string cpu_refuses;
  plan::MemoryEstimate m;
  try {
    m = plan::engine_memory(g, opt, a.workers, cpu_precision);
  } catch (const Error& e) {
    cpu_refuses = with_hint(e);
  }
  plan::StepPrediction p;
  if (cpu_refuses.empty()) p = plan::predict_step(g, opt, c);
  const double steps = std::floor(double(a.dataset) / double(a.batch));
  std::printf("dlperf plan: %s on %s, batch %lld, %s, %s%s, on this CPU (%s, %s)\n", g.model.c_str(), a.input.c_str(),
              (long long)a.batch, a.optimizer.c_str(), counted(a.workers, "loader worker").c_str(), a.augment ? ", augmented" : "",
              counted(omp_get_max_threads(), "thread").c_str(), cpu_precision.c_str());
  if (!a.made_for.empty()) std::printf("%s\n", a.made_for.c_str());
  if (a.precision != cpu_precision)
    std::printf("(this CPU's section is fp32: %s; --precision %s applies to the targets below)\n",
                a.precision == "bf16" ? "dlperf's CPU engine needs AVX512-BF16 for bf16, and this CPU has none"
                                      : "dlperf's CPU engine trains fp32, and bf16 on CPUs with AVX512-BF16",
                a.precision.c_str());
  std::printf("\n");
  std::printf("parameters        %lld (%s as f32)\n", (long long)g.param_count(), format_bytes(double(g.param_count()) * 4).c_str());
  std::printf("FLOPs per step    %.3g forward + %.3g backward = %.3g\n", g.forward_flops(), g.backward_flops(),
              g.forward_flops() + g.backward_flops());
  const double job_flops = (g.forward_flops() + g.backward_flops()) * steps * double(a.epochs);
  std::printf("FLOPs for the job %.3g (%s of %.0f steps)\n\n", job_flops, counted(a.epochs, "epoch").c_str(), steps);
  if (!cpu_refuses.empty()) std::printf("this CPU          dlperf's CPU engine cannot run it: %s\n", cpu_refuses.c_str());
  const double avail = hw::available_memory_bytes();
  const bool fits = m.total() <= hw::kUsableMemoryShare * avail;
  if (cpu_refuses.empty()) print_cpu_plan(a, c, m, p, steps, avail, fits);
  // A step under a millisecond on all cores is made of ops too small to share well between them:
  // planned on one thread too (about two seconds to measure its ceilings), and said where faster.
  nlohmann::json one_thread;
  if (cpu_refuses.empty() && a.threads == 0 && c.threads > 1 && p.step_s < 1e-3) {
    plan::CpuCeilings one = plan::with_precision(plan::host_ceilings(1), cpu_precision);
    one.loader_workers = a.workers;
    one.augment = a.augment;
    const double step_s = plan::predict_step(g, opt, one).step_s;
    one_thread = {{"step_s", step_s}, {"speedup", p.step_s / step_s}};
    if (p.step_s / step_s >= 1.05)
      std::printf("fewer threads     1 thread is planned at %s a step, %.2fx faster (--threads 1): this step's ops are too "
                  "small to share between cores%s\n",
                  format_seconds(step_s).c_str(), p.step_s / step_s,
                  !plan::workers_have_own_cores(one) ? ""
                  : a.workers == 1                   ? ", and the loader's worker gets a core of its own"
                                                     : ", and the loader's workers get cores of their own");
  }
  // bf16 on this CPU against fp32, as the lab's precision experiment would measure them: bf16
  // halves the activations, but pays only where the CPU has more bf16 arithmetic than fp32 (the
  // Intel Xeon VM's is 0.49x: medium at batch 64 planned at 24.4 ms a step against 13.7 in fp32).
  nlohmann::json fp32_here;
  if (cpu_refuses.empty() && cpu_bf16) {
    const plan::CpuCeilings f = plan::with_precision(c, "fp32");
    const double step_s = plan::predict_step(g, opt, f).step_s, bytes = plan::engine_memory(g, opt, a.workers, "fp32").total();
    fp32_here = {{"step_s", step_s}, {"peak_bytes", bytes}};
    const double speed = step_s / p.step_s;  // bf16's speed-up; under 1 where it is slower
    std::printf("against fp32      %s a step in fp32: bf16 is planned %s, in %s of memory against %s%s\n", format_seconds(step_s).c_str(),
                speed >= 1 ? fmt::format("{:.2f}x faster", speed).c_str() : fmt::format("{:.2f}x slower", 1 / speed).c_str(),
                format_bytes(m.total()).c_str(), format_bytes(bytes).c_str(),
                c.amx_gflops > 0
                    ? fmt::format(" (its convolutions and linear layers on AMX tiles, which peak at {:.1f}x the fp32 multiply-adds)",
                                  c.amx_gflops / f.peak_gflops).c_str()
                : c.peak_gflops < bench::kBf16GainsAbove * f.peak_gflops
                    ? fmt::format(" (this CPU's bf16 dot products peak at {:.2f}x its fp32 multiply-adds)", c.peak_gflops / f.peak_gflops).c_str()
                    : "");
  }
  plan::JobSpec job;
  job.graph = &g;
  job.spec = &spec;
  job.global_batch = a.batch;
  job.steps = steps * double(a.epochs);
  job.precision = a.precision;
  job.optimizer = a.optimizer;
  set_cluster(job, a);
  nlohmann::json memory = nlohmann::json::object();
  for (int i = 0; i < kMemCategories; ++i) memory[std::string(to_string(MemCategory(i)))] = m.bytes[size_t(i)];
  memory["total"] = m.total();
  memory["available"] = avail > 0 ? nlohmann::json(avail) : nlohmann::json();
  memory["fits"] = avail > 0 ? nlohmann::json(fits) : nlohmann::json();
  nlohmann::json out = {{"command", "plan"},
                        {"model", g.model},
                        {"input", a.input},
                        {"classes", a.classes},
                        {"batch_size", a.batch},
                        {"optimizer", a.optimizer},
                        {"workers", a.workers},
                        {"augment", a.augment},
                        {"threads", c.threads},
                        {"dataset_size", a.dataset},
                        {"epochs", a.epochs},
                        {"precision", a.precision},
                        {"cpu_precision", cpu_precision},
                        {"parameters", g.param_count()},
                        {"flops_per_step", {{"forward", g.forward_flops()}, {"backward", g.backward_flops()}}},
                        {"job_flops", job_flops},
                        {"memory_bytes", memory},
                        {"step", {{"step_s", p.step_s}, {"forward_s", p.forward_s}, {"backward_s", p.backward_s}, {"optimizer_s", p.optimizer_s}, {"overhead_s", p.overhead_s}}},
                        {"images_per_s", double(a.batch) / p.step_s},
                        {"steps_per_epoch", steps},
                        {"epoch_s", p.step_s * steps},
                        {"job_s", p.step_s * steps * double(a.epochs)},
                        {"ceilings", plan::to_json(c)},
                        {"one_thread", one_thread},
                        {"fp32_here", fp32_here}};
  if (!cpu_refuses.empty()) {  // nothing to say about this CPU but why
    for (const char* key : {"memory_bytes", "step", "images_per_s", "epoch_s", "job_s"}) out[key] = nullptr;
    out["cpu_cannot_run"] = cpu_refuses;
  }
  const CpuCeilingsFn this_cpu = [&] { return c; };
  out["targets"] = print_targets(job, a, this_cpu);
  out["scaling"] = print_scaling(job, a, this_cpu, [&](int64_t per_device, nn::Graph& holder) {
    holder = nn::build_graph(spec, parse_chw(a.input), a.classes, per_device);
    plan::JobSpec j = job;
    j.graph = &holder;
    j.global_batch = per_device;
    return j;
  });
  if (a.layers && !cpu_refuses.empty()) std::printf("\nNo per-layer plan: it is this CPU's, and dlperf's CPU engine cannot run the job.\n");
  if (a.layers && cpu_refuses.empty()) {
    // Memory: what each layer's buffers hold (a fused relu's are its batchnorm's or add's).
    const std::vector<plan::MemoryEstimate> by_layer = plan::engine_memory_by_layer(g, opt, a.workers, cpu_precision);
    check(by_layer.size() == p.layers.size() + 1, "plan: the time and memory models disagree on the layers");
    report::Table t({"layer", "op", "fwd ms", "bwd ms", "fwd bound", "memory", "of peak"});
    auto share = [&](double bytes) { return fmt::format("{:.1f}%", 100 * bytes / m.total()); };
    out["layers"] = nlohmann::json::array();
    for (size_t i = 0; i < p.layers.size(); ++i) {
      const auto& l = p.layers[i];
      t.add({l.name, l.winograd ? l.op + " (Winograd)" : l.amx ? l.op + " (AMX)" : l.op, format_decimals(l.forward_s * 1e3, 3),
             format_decimals(l.backward_s * 1e3, 3), l.bound, format_bytes(by_layer[i].total()), share(by_layer[i].total())});
      out["layers"].push_back({{"layer", l.name}, {"op", l.op}, {"winograd", l.winograd}, {"amx", l.amx}, {"forward_s", l.forward_s},
                               {"backward_s", l.backward_s}, {"forward_bound", l.bound}, {"memory_bytes", by_layer[i].total()}});
    }
    out["memory_bytes_no_layer"] = by_layer.back().total();
    t.separator();
    t.add({"(no layer's)", "", "", "", "", format_bytes(by_layer.back().total()), share(by_layer.back().total())});
    std::printf("\nPer layer: predicted time, and the memory its buffers hold (parameters with their gradients and\n"
                "optimizer states, outputs and gradients, masks, converted inputs, workspace); no layer's: the model\n"
                "input, the shared oneDNN scratchpad, the loaders' batches.\n");
    t.print();
  }
  write_plan_json(a, out);
}

}  // namespace

void add_plan(CLI::App& app, const Command& self) {
  auto a = std::make_shared<PlanArgs>();
  auto* c = app.add_subcommand(self.name, self.summary);
  // Ranges and which flags go together are checked while parsing, so a mistake is refused before
  // anything prints and no flag is silently ignored.
  c->add_option("--model,-m", a->model, "preset or .json spec")->capture_default_str();
  c->add_option("--input", a->input, "image shape CxHxW (default: the one the model is made for, else this)")->capture_default_str();
  c->add_option("--classes", a->classes, "output classes (default: the model's own, else this)")->capture_default_str()->check(at_least(1));
  c->add_option("--batch-size,-b", a->batch, "images per step")->capture_default_str()->check(at_least(1));
  c->add_option("--optimizer", a->optimizer, "sgd | adamw")->capture_default_str()->check(CLI::IsMember({"sgd", "adamw"}));
  c->add_option("--workers,-j", a->workers, "data-loader threads")->capture_default_str()->check(between(0, data::kMaxWorkers));
  c->add_option("--threads", a->threads, "this CPU's compute threads, as train takes them (0 = all cores)")->capture_default_str();
  c->add_flag("--augment,!--no-augment", a->augment, "random crops and flips, as train --augment: slower batches")->capture_default_str();
  c->add_option("--dataset-size", a->dataset, "training images per epoch (default: the one the model is made for, else this)")->capture_default_str()->check(at_least(1));
  c->add_option("--epochs,-e", a->epochs, "epochs")->capture_default_str()->check(at_least(1));
  auto* layers = c->add_flag("--layers", a->layers, "per-layer predicted times and memory");
  auto* against_opt = c->add_option("--against", a->against, "run records to predict and compare with (runs/*.json, or folders holding them: runs, reports/lab)");
  c->add_option("--json", a->json_out, "also write the plan (with --against: the comparison) as JSON here");
  auto* transformer = c->add_option("--transformer", a->transformer, "plan a GPT-style Transformer instead: gpt2-small ... gpt3-175b, or L,H,A,S,V");
  // Upper bounds far past any real job, so that no product of them (FLOPs, hours, dollars, grams)
  // overflows to inf: 1e18 tokens is 60,000x the largest published training sets (15e12); a
  // PUE of 10, 5000 gCO2e/kWh (lignite emits about 1100) and 100 kW a CPU are past any facility.
  c->add_option("--tokens", a->tokens, "Transformer: training tokens (default 20 per parameter)")->check(between(1, 1e18))->needs(transformer);
  c->add_option("--micro-batch", a->micro_batch, "Transformer: sequences per device per micro-step")
      ->capture_default_str()->check(at_least(1))->needs(transformer);
  c->add_option("--precision", a->precision, "fp32 | tf32 | bf16 | fp16 (mixed precision keeps fp32 master weights)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  c->add_option("--dp", a->layout.dp, "Transformer: data-parallel degree")->capture_default_str()->check(at_least(1))->needs(transformer);
  c->add_option("--tp", a->layout.tp, "Transformer: tensor-parallel degree")->capture_default_str()->check(at_least(1))->needs(transformer);
  c->add_option("--pp", a->layout.pp, "Transformer: pipeline-parallel degree")->capture_default_str()->check(at_least(1))->needs(transformer);
  c->add_option("--virtual-stages", a->layout.vp,
                "Transformer: model chunks per pipeline device, Megatron's interleaved 1F1B (divides the pipeline's idle time by it)")
      ->capture_default_str()->check(at_least(1))->needs(transformer);
  c->add_option("--devices", a->devices,
                                "Transformer: plan the fastest layout of this many devices of the first target (--tp, --pp, --virtual-stages, "
                                "--micro-batch, --zero and --checkpointing, where given, are kept)")
                      ->check(between(1, 1 << 20))->needs(transformer);
  c->add_option("--zero", a->layout.zero, "Transformer: ZeRO stage 0-3")->capture_default_str()->check(between(0, 3))->needs(transformer);
  c->add_option("--checkpointing", a->layout.checkpointing, "Transformer: activation checkpointing: none | selective | full")
      ->capture_default_str()->check(CLI::IsMember({"none", "selective", "full"}))->needs(transformer);
  auto* targets = c->add_option("--targets", a->targets, "hardware targets: cpu (this machine) and catalog ids (t4, v100, a100-40gb, a100-80gb, h100-sxm, h100-pcie, h200, b200, rtx-4090, l4, l40s, tpu-v4, tpu-v5e)")
      ->delimiter(',');
  auto* region = c->add_option("--region", a->region, "grid region for CO2 (world, us, eu, fr, de, gb, no, se, ca, cn, in)")->capture_default_str();
  auto* grid = c->add_option("--grid-intensity", a->grid, "gCO2e per kWh, instead of --region")->check(between(0, 5000))->excludes(region);
  auto* pue = c->add_option("--pue", a->pue, "power usage effectiveness, 1 or more (default: the catalog's 1.1)")->check(between(1, 10));
  c->add_option("--cpu-watts", a->cpu_watts, "this CPU's power, for energy on the cpu target")->check(between(1, 1e5));
  auto* scaling = c->add_option("--scaling", a->scaling, "also print weak and strong data-parallel scaling up to N devices on the first target")
      ->check(between(2, 65536));
  auto* grad_overlap = c->add_option("--grad-overlap", a->grad_overlap,
                                     "data parallelism: all-reduce the gradients in buckets during the backward pass: auto = on for CNNs "
                                     "(PyTorch DDP's default), off for Transformers (Megatron-LM's; its --overlap-grad-reduce), on, off")
                           ->capture_default_str()->check(CLI::IsMember({"auto", "on", "off"}));
  auto* bucket_mb = c->add_option("--bucket-mb", a->bucket_mb,
                                  "with the all-reduce overlapped: each bucket's MiB, as DDP's bucket_cap_mb (default: DDP's 25 for a CNN, "
                                  "after a first of 1; Megatron-LM's max(40M, 1M x dp) parameters for a Transformer)")
                        ->check(between(0.001, 1e6));
  transformer->excludes(layers);
  // --against predicts the runs its records describe, on this machine: no targets, no scaling.
  auto* nic = c->add_option("--nic-gbits", a->nic_gbits,
                            "each device's network link to other nodes, in Gb/s as NICs are sold (400: 50 GB/s; InfiniBand NDR)")
                  ->capture_default_str()->check(between(1, 1e5));
  auto* node = c->add_option("--node-size", a->node_size, "devices per node, joined by its interconnect (NVLink); beyond it, the network")
                   ->capture_default_str()->check(between(1, 1024));
  for (auto* o : {transformer, layers, targets, region, grid, pue, scaling, grad_overlap, bucket_mb, nic, node}) against_opt->excludes(o);
  c->add_option("--catalog", a->catalog, "a JSON file of extra or replacement hardware entries (docs/plan.md)");
  c->callback([a, c] {
    // Each record is planned as it ran: a flag describing the run would be ignored.
    if (!a->against.empty())
      for (const char* flag : {"--model", "--input", "--classes", "--batch-size", "--optimizer", "--workers", "--threads", "--augment",
                               "--dataset-size", "--epochs", "--precision", "--catalog"})
        check(c->count(flag) == 0,
              fmt::format("{} does not apply with --against: each run record is planned with the model, input, batch size, optimizer, "
                          "workers, threads, augmentation, dataset and precision it ran with",
                          flag),
              fmt::format("drop {}; to plan another run, leave out --against", flag));
    // A Transformer's plan reads its size, --tokens, --batch-size, --micro-batch, --precision,
    // --optimizer and the parallel layout: the CNN run's flags would be ignored.
    if (!a->transformer.empty())
      for (const char* flag : {"--model", "--input", "--classes", "--workers", "--threads", "--augment", "--dataset-size", "--epochs"})
        check(c->count(flag) == 0, fmt::format("{} describes a CNN training run, and --transformer plans a Transformer", flag),
              fmt::format("drop {}; a Transformer's job is set by --tokens, --batch-size and --micro-batch", flag));
    // --devices searches the layouts: --dp follows from the devices and the degrees it is given.
    if (a->devices > 0) {
      check(c->count("--dp") == 0, "--dp follows from --devices and the other degrees: the search sets it",
            "drop --dp, or drop --devices to plan the layout given");
      a->fixed.tp = c->count("--tp") > 0 ? a->layout.tp : 0;
      a->fixed.pp = c->count("--pp") > 0 ? a->layout.pp : 0;
      a->fixed.vp = c->count("--virtual-stages") > 0 ? a->layout.vp : 0;
      a->fixed.micro_batch = c->count("--micro-batch") > 0 ? a->micro_batch : 0;
      a->fixed.zero = c->count("--zero") > 0 ? a->layout.zero : -1;
      a->fixed.checkpointing = c->count("--checkpointing") > 0 ? a->layout.checkpointing : "";
    }
    // --grad-overlap and --bucket-mb shape data parallelism's communication: a plan without any
    // would ignore them, as one that does not overlap would ignore the buckets.
    // --nic-gbits and --node-size place a job's devices: a plan of one device would ignore them.
    const bool is_transformer = !a->transformer.empty();
    const bool data_parallel = a->scaling > 1 || (is_transformer && (a->layout.dp > 1 || a->devices > 0));
    const bool several_devices = data_parallel || (is_transformer && (a->layout.tp > 1 || a->layout.pp > 1));
    const char* cnn_hint = "add --scaling N for data-parallel scaling of the CNN";
    for (const char* flag : {"--grad-overlap", "--bucket-mb"})
      if (c->count(flag) > 0)
        check(data_parallel, fmt::format("{} changes how data parallelism's all-reduce runs, and this plan has no data parallelism", flag),
              is_transformer ? "add --dp 2 or more, --devices N or --scaling N" : cnn_hint);
    for (const char* flag : {"--nic-gbits", "--node-size"})
      if (c->count(flag) > 0)
        check(several_devices, fmt::format("{} describes how a job's devices are connected, and this plan is of one device", flag),
              is_transformer ? "add --dp, --tp or --pp, --devices N or --scaling N" : cnn_hint);
    if (c->count("--bucket-mb") > 0)
      check(overlaps_grad_reduce(*a),
            fmt::format("--bucket-mb sizes the buckets of an all-reduce overlapped with the backward pass, and {}",
                        a->grad_overlap == "off" ? "--grad-overlap is off" : "a Transformer's is not overlapped unless asked"),
            "add --grad-overlap on, or drop --bucket-mb");
    // --cpu-watts prices the cpu target's energy (and the records' with --against).
    if (a->against.empty() && c->count("--cpu-watts") > 0) {
      const std::vector<std::string> ids = targets_or_default(*a, !a->transformer.empty());
      check(std::find(ids.begin(), ids.end(), "cpu") != ids.end(),
            fmt::format("--cpu-watts is this CPU's power, for the cpu target, and the targets are {}", fmt::join(ids, ", ")),
            "add cpu to --targets, or drop --cpu-watts");
    }
    // A model made for one input (resnet18-imagenet: 3x224x224, 1000 classes) is planned on it
    // unless told otherwise; the Fashion-MNIST default would plan a different network.
    if (a->transformer.empty() && a->against.empty()) {
      const nn::ModelSpec spec = nn::load_model(a->model);
      std::vector<std::string> taken;
      if (c->count("--input") == 0 && !spec.input.empty()) taken.push_back(a->input = dims_str(spec.input));
      if (c->count("--classes") == 0 && spec.classes > 0)
        taken.push_back(fmt::format("{} classes", a->classes = spec.classes));
      // An epoch of ImageNet is 1.28 million images, not Fashion-MNIST's 60,000.
      if (c->count("--dataset-size") == 0 && spec.train_images > 0)
        taken.push_back(fmt::format("{} training images", a->dataset = spec.train_images));
      if (!taken.empty())
        a->made_for = fmt::format("({}: what {} is made for; --input, --classes and --dataset-size plan others)", listed(taken), spec.name);
    }
    // Unknown targets and regions are refused before the plan prints a page that ends in an error.
    if (a->against.empty()) {
      const plan::Catalog cat = plan::load_catalog(a->catalog);
      for (const auto& id : a->targets)
        if (id != "cpu") (void)cat.find(id);  // throws, listing the known ids
      (void)grid_intensity(*a, cat);
    }
    if (!a->json_out.empty()) check_file_path(a->json_out, "--json");
    // This CPU's section and its cpu target on the threads asked for: the ceilings, and the layouts,
    // since oneDNN sizes some scratchpads by the threads it forks.
    hw::check_threads(a->threads);
    const hw::ScopedThreads threads(a->threads);
    if (!a->against.empty()) return print_against(a->against, threads.count(), a->cpu_watts, a->json_out);  // measures the ceilings where a record needs them
    // Measured at first use (seconds without a machine profile), then kept by host_ceilings.
    const CpuCeilingsFn ceilings = [&] { return plan::host_ceilings(threads.count()); };
    if (!a->transformer.empty())
      plan_transformer(*a, ceilings);
    else
      plan_one(*a, ceilings);
  });
}

}  // namespace dlperf::cli

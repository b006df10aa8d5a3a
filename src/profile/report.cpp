#include "profile/report.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/files.h"
#include "core/stats.h"
#include "core/text.h"
#include "core/timer.h"
#include "plan/gpu_step.h"
#include "plan/memory.h"
#include "plan/step_time.h"
#include "report/table.h"

namespace dlperf::profile {

using nlohmann::json;

namespace {

// The gzip file format (windowBits 16 + 15) in memory, so a compressed trace is written as
// atomically as a plain one; gzopen/gzwrite would stream straight into the final file.
std::string gzip(const std::string& body) {
  // One deflate call takes at most 4 GiB; a trace that big would not open in Perfetto anyway.
  check(body.size() < (size_t(1) << 32) - 1024, "the trace is over 4 GiB, too big to compress in one go",
        "profile fewer steps (--steps) or write it uncompressed");
  z_stream z{};
  check(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) == Z_OK,
        "zlib could not start compressing the trace");
  std::string out(deflateBound(&z, uLong(body.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = uInt(body.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  check(rc == Z_STREAM_END, "zlib could not compress the trace", "write an uncompressed trace (a name not ending in .gz)");
  return out;
}

// A CPU pass's cost: node n's and its fused relu's (plan/gpu_step.h).
ops::PassCost cost_of(const nn::Graph& g, int n, Phase p, const std::vector<double>& elem_bytes) {
  const plan::Pass pass = p == Phase::forward ? plan::Pass::forward : p == Phase::backward_weight ? plan::Pass::backward_weight : plan::Pass::backward_data;
  return plan::pass_cost(g, n, pass, false, cuda::Layout::nchw, elem_bytes);
}

// The bytes a gradient sum of the CPU engine's node `n` moves (plan::inputs_summing_gradients):
// it reads the gradient a later reader of n's input wrote and n's own, and writes their sum (each
// a value's size; no FLOPs counted, as for the optimizer). The GPU's sums are the planner's passes.
ops::PassCost gradient_sum_cost(const nn::Graph& g, int n, const std::vector<double>& value_bytes) {
  const std::vector<size_t> summed = plan::inputs_summing_gradients(g, size_t(n));
  const nn::Node& node = g.nodes[size_t(n)];
  const size_t k = summed.empty() ? 0 : summed.front();
  if (node.inputs[k] < 0) return {};
  return {0, 3 * double(numel(node.in_dims[k])) * value_bytes[size_t(node.inputs[k])]};
}

struct Costed {
  const Event* e;
  double self = 0;
  ops::PassCost cost;
  bool has_launch_child = false;
};

}  // namespace

Report build_report(const std::vector<Event>& events, const nn::Graph& g, const plan::CpuCeilings& c,
                    const std::string& precision, const std::string& group_by, cuda::Layout gpu_layout) {
  check(group_by == "layer" || group_by == "op", fmt::format("--group-by {} is not layer or op", group_by));
  Report r;
  r.ceilings = c;
  // The track the table is built from: the GPU's when the run was on a GPU, else the training
  // thread's. Self times: an event's duration less its direct children's (one level deeper).
  int track = 0;
  for (const auto& e : events)
    if (e.track == kGpuTrack) track = kGpuTrack;
  std::vector<Costed> xs;
  for (const auto& e : events)
    if (e.track == track) xs.push_back({&e, e.t1 - e.t0, {}});
  // A forward pass's one primitive is the pass itself: it folds into its layer's forward event.
  std::vector<size_t> stack;
  std::vector<bool> folded(xs.size(), false);
  for (size_t i = 0; i < xs.size(); ++i) {
    const Event& e = *xs[i].e;
    while (!stack.empty() && xs[stack.back()].e->depth >= e.depth) stack.pop_back();
    if (!stack.empty()) {
      Costed& parent = xs[stack.back()];
      if (e.launch) parent.has_launch_child = true;
      if (e.launch && e.phase == parent.e->phase && e.node == parent.e->node) folded[i] = true;
      else parent.self -= e.t1 - e.t0;
    }
    stack.push_back(i);
  }
  // Each primitive execution, and each of our own kernels (a layer pass without primitives),
  // the loss and the optimizer.
  double launches = 0;
  for (const auto& x : xs)
    if (x.e->launch || (x.e->node >= 0 && !x.has_launch_child) || x.e->phase == Phase::loss || x.e->phase == Phase::optimizer)
      launches += 1;
  std::vector<Costed> kept;
  for (size_t i = 0; i < xs.size(); ++i)
    if (!folded[i]) kept.push_back(xs[i]);
  xs.swap(kept);
  // FLOPs and bytes from the cost model. A layer's backward pass is split into the primitives
  // inside it where they were recorded (backward-data, backward-weight); what no primitive
  // carries stays with the whole pass.
  std::map<std::pair<int64_t, int>, std::pair<bool, bool>> split;  // (step, node) -> has data / weight primitive
  for (const auto& x : xs)
    if (x.e->node >= 0 && x.e->launch) {
      auto& s = split[{x.e->step, x.e->node}];
      if (x.e->phase == Phase::backward_data) s.first = true;
      if (x.e->phase == Phase::backward_weight) s.second = true;
    }
  const bool gpu = track == kGpuTrack;
  r.on_gpu = gpu;
  if (gpu) {
    // On the GPU each pass is costed as the planner costs it (plan::gpu_step_passes, which walks
    // the executor's backward as it runs): the k-th event of a layer's phase in a step is its k-th
    // planned pass (a residual add hands its gradient to each input in a copy, or a sum where one
    // was written). A plan and a profile of the same run count the same FLOPs and bytes.
    std::map<std::pair<int, std::string>, std::vector<ops::PassCost>> planned;
    for (const auto& p : plan::gpu_step_passes(g, precision, cuda::to_string(gpu_layout))) planned[{p.node, p.phase}].push_back(p.cost);
    std::map<std::tuple<int64_t, int, std::string>, size_t> seen;
    for (auto& x : xs) {
      const Event& e = *x.e;
      const std::string phase(to_string(e.phase));
      const auto it = planned.find({e.node, phase});
      if (it == planned.end()) continue;
      const size_t k = seen[{e.step, e.node, phase}]++;
      if (k < it->second.size()) x.cost = it->second[k];
    }
  } else {
    // The CPU engine's bf16 reads fp32 at dropout (and the model input) and converts (plan::engine_input_bytes).
    const std::string cpu_precision = precision == "bf16" ? "bf16" : "fp32";
    const std::vector<double> elem_bytes = plan::engine_input_bytes(g, cpu_precision);
    const std::vector<double> value_bytes = plan::engine_value_bytes(g, cpu_precision);
    for (auto& x : xs) {
      const Event& e = *x.e;
      ops::PassCost k;
      if (e.node >= 0 && (e.phase == Phase::forward && !e.launch)) k = cost_of(g, e.node, Phase::forward, elem_bytes);
      if (e.node >= 0 && e.launch && (e.phase == Phase::backward_data || e.phase == Phase::backward_weight))
        k = cost_of(g, e.node, e.phase, elem_bytes);
      if (e.node >= 0 && e.phase == Phase::grad_sum) k = gradient_sum_cost(g, e.node, value_bytes);
      if (e.node >= 0 && e.phase == Phase::backward && !e.launch) {  // what the primitives inside it did not carry
        const auto s = split[{e.step, e.node}];
        if (!s.first) k += cost_of(g, e.node, Phase::backward_data, elem_bytes);
        if (!s.second) k += cost_of(g, e.node, Phase::backward_weight, elem_bytes);
      }
      if (e.phase == Phase::loss) k = plan::loss_cost(g);
      if (e.phase == Phase::optimizer) k = {0, plan::optimizer_step_bytes(g)};  // streams weights, grads, momentum
      x.cost = k;
    }
  }
  // Group into rows.
  std::map<std::pair<std::string, std::string>, OpRow> rows;
  std::set<int64_t> steps;
  std::vector<double> step_times;
  for (const auto& x : xs) {
    const Event& e = *x.e;
    if (e.phase == Phase::step) {
      r.recorded_s += e.t1 - e.t0;
      steps.insert(e.step);
      step_times.push_back(e.t1 - e.t0);
    }
    const std::string name = e.phase == Phase::step ? "(step: loop overhead)" : group_by == "op" && !e.op.empty() ? e.op : e.name;
    const std::string phase(to_string(e.phase));
    OpRow& row = rows[{name, phase}];
    row.name = name;
    row.op = e.op;
    row.phase = phase;
    row.calls += 1;
    row.self_s += x.self;
    row.total_s += e.t1 - e.t0;
    row.flops += x.cost.flops;
    row.bytes += x.cost.bytes;
    row.padding_flops += x.cost.padding_flops;
    if (e.node >= 0) r.flops_per_step += x.cost.flops;
  }
  const double ridge = c.peak_gflops / c.dram_gbps;  // FLOP per byte where compute and DRAM meet
  for (auto& [k, row] : rows) {
    row.share = r.recorded_s > 0 ? row.self_s / r.recorded_s : 0;
    if (row.flops > 0) row.bound = row.intensity() >= ridge ? "compute" : "memory";
    r.rows.push_back(row);
  }
  std::sort(r.rows.begin(), r.rows.end(), [](const OpRow& a, const OpRow& b) { return a.self_s > b.self_s; });
  // The step summary.
  StepSummary& s = r.step;
  s.steps = int64_t(steps.size());
  const double n = std::max<double>(double(s.steps), 1);
  if (s.steps > 0) r.flops_per_step /= n;
  for (const auto& x : xs) {
    const Event& e = *x.e;
    const double d = e.t1 - e.t0;
    if (e.depth != 1) continue;  // the step's direct parts
    switch (e.phase) {
      case Phase::data: s.data_s += d; break;
      case Phase::copy: s.copy_s += d; break;
      case Phase::forward: case Phase::loss: s.forward_s += d; break;
      // On the GPU the backward passes of convolutions and linear layers, and gradient sums, are
      // spans of the step of their own (on the CPU, primitives inside a layer's backward pass).
      case Phase::backward: case Phase::backward_data: case Phase::backward_weight: case Phase::grad_sum: s.backward_s += d; break;
      case Phase::optimizer: s.optimizer_s += d; break;
      default: break;
    }
  }
  s.step_s = r.recorded_s / n;
  if (!step_times.empty()) {
    const Spread spread = spread_of(step_times);
    s.step_median_s = spread.median, s.step_min_s = spread.min, s.step_max_s = spread.max;
  }
  s.data_s /= n, s.copy_s /= n, s.forward_s /= n, s.backward_s /= n, s.optimizer_s /= n;
  s.idle_s = s.step_s - s.data_s - s.copy_s - s.forward_s - s.backward_s - s.optimizer_s;
  s.launches = launches / n;
  // The workers are recorded through the whole window, the steps --profile-every skips included
  // (they fill in bursts, which one step in N could always or never see), so their busy time is
  // taken over the training thread's span, from the first recorded step's start to the last one's end.
  double first = std::numeric_limits<double>::infinity(), last = -first, busy = 0;
  for (const auto& e : events)
    if (e.track == 0 && e.phase == Phase::step) first = std::min(first, e.t0), last = std::max(last, e.t1);
  for (const auto& e : events)
    if (e.track > 0 && e.track != kGpuTrack) busy += std::max(0.0, std::min(e.t1, last) - std::max(e.t0, first));
  s.loader_busy = last > first ? busy / (last - first) : 0;
  return r;
}

void print_report(const Report& r, size_t max_rows) {
  const StepSummary& s = r.step;
  auto pct = [&](double x) { return fmt::format("{:.1f}%", 100 * x / std::max(s.step_s, 1e-12)); };
  const std::string spread = s.steps > 1 ? fmt::format(" (median {}, {} to {})", format_seconds(s.step_median_s),
                                                        format_seconds(s.step_min_s), format_seconds(s.step_max_s))
                                          : std::string();
  const std::string sampled = s.every > 1 ? fmt::format(" (one in {})", s.every) : std::string();
  std::printf("\nProfile of %s%s: %s a step%s, %.0f kernel launches a step (%s)\n", counted(s.steps, "training step").c_str(),
              sampled.c_str(), format_seconds(s.step_s).c_str(), spread.c_str(), s.launches, s.launches_source.c_str());
  if (s.device_clock_tick_ns > 0)
    std::printf("  times on the GPU from stamps of its clock, which ticks every %.0f ns: a span's time is good to that, the table's sums over steps finer\n",
                s.device_clock_tick_ns);
  // loader_busy sums the workers' busy time, so 2 workers can be busy 150% of the time: the
  // console shows the mean per worker, which reads as a share.
  const std::string loader = s.loader_workers > 0 ? fmt::format("{} loader worker{}, each busy {:.1f}% of the time on average", s.loader_workers,
                                                                s.loader_workers == 1 ? "" : "s", 100 * s.loader_busy / double(s.loader_workers))
                                                  : std::string("no loader workers");
  std::printf("  data wait %s | input copy %s | forward %s | backward %s | optimizer %s | idle/loop %s   (%s)\n", pct(s.data_s).c_str(),
              pct(s.copy_s).c_str(), pct(s.forward_s).c_str(), pct(s.backward_s).c_str(), pct(s.optimizer_s).c_str(),
              pct(s.idle_s).c_str(), loader.c_str());
  report::Table t({"name", "phase", "calls", "self ms", "total ms", "share", "GFLOP", "MB", "GFLOP/s", "GB/s", "FLOP/B", "bound"});
  size_t shown = 0;
  double rest = 0;
  for (const auto& row : r.rows) {
    if (shown++ >= max_rows) {
      rest += row.share;
      continue;
    }
    t.add({row.name, row.phase, std::to_string(row.calls), format_decimals(1e3 * row.self_s, 3), format_decimals(1e3 * row.total_s, 3),
           fmt::format("{:.1f}%", 100 * row.share), row.flops > 0 ? format_decimals(row.flops / 1e9, 3) : "-",
           row.bytes > 0 ? format_decimals(row.bytes / 1e6, 2) : "-", row.flops > 0 ? format_decimals(row.gflops(), 1) : "-",
           row.bytes > 0 ? format_decimals(row.gbps(), 1) : "-", row.bytes > 0 && row.flops > 0 ? format_decimals(row.intensity(), 1) : "-",
           row.bound});
  }
  std::printf("\n");
  t.print();
  if (rest > 0) std::printf("(%zu more rows, %.1f%% of the time, in the JSON)\n", r.rows.size() - max_rows, 100 * rest);
  std::printf("Ceilings: %.1f GFLOP/s, DRAM %.1f GB/s (ridge %.1f FLOP/B): %s\n", r.ceilings.peak_gflops, r.ceilings.dram_gbps,
              r.ceilings.peak_gflops / r.ceilings.dram_gbps, r.ceilings.source.c_str());
  if (const std::string why = winograd_note(r); !why.empty()) std::printf("%s\n", why.c_str());
  if (const std::string why = amx_note(r); !why.empty()) std::printf("%s\n", why.c_str());
  if (const std::string why = matrix_product_note(r); !why.empty()) std::printf("%s\n", why.c_str());
  if (const std::string why = one_thread_note(r); !why.empty()) std::printf("%s\n", why.c_str());
  if (const std::string why = above_peak_note(r); !why.empty()) std::printf("%s\n", why.c_str());
  if (const std::string why = unsteady_note(r); !why.empty()) std::printf("%s\n", why.c_str());
  if (const std::string why = slower_than_plan_note(r); !why.empty()) std::printf("%s\n", why.c_str());
}

std::string slower_than_plan_note(const Report& r) {
  const StepSummary& s = r.step;
  if (s.planned_s <= 0 || s.step_median_s < (r.on_gpu ? kSlowerThanGpuPlan : kSlowerThanPlan) * s.planned_s) return "";
  if (r.on_gpu)
    return fmt::format("Slower than planned: the median step took {:.2f}x the {} that dlperf plan predicts for this run on this "
                       "GPU (dlperf's kernels on a model fitted to an H100's profiles). Either other work shared the GPU while it "
                       "recorded, or this run's kernels are slower than the fit's: a --layout other than the precision's default, "
                       "a kind of run the fit had no table of, or a GPU unlike the H100. Rerun to tell which, and compare the "
                       "table with the planned passes of 'dlperf plan --layers --targets <this GPU>'.",
                       s.step_median_s / s.planned_s, format_seconds(s.planned_s));
  std::string spell = "other work on the machine, or a VM's neighbours";
  if (const std::string busy = hw::busy_note(r.host_load); !busy.empty()) spell += "; here " + busy + " while it recorded";
  return fmt::format("Slow throughout: the median step took {:.2f}x the {} that dlperf plan predicts for this run from this machine's "
                     "ceilings. A slow spell over the whole recording reads so ({}; it slows every step alike, so the mean step "
                     "stays at the median), or the plan misjudges this run on this CPU. Rerun to tell which: a spell passes, a "
                     "misjudgement stays.",
                     s.step_median_s / s.planned_s, format_seconds(s.planned_s), spell);
}

std::string unsteady_note(const Report& r) {
  const StepSummary& s = r.step;
  if (s.steps < 2 || s.step_median_s <= 0 || s.step_s < (1 + kUnsteadyShare) * s.step_median_s) return "";
  std::string why = "most often because other work shared the machine";
  if (const std::string busy = hw::busy_note(r.host_load); !busy.empty()) why += " (here " + busy + " while it recorded)";
  return fmt::format("Unsteady steps: the mean step is {:.0f}% above the median and the slowest took {:.1f}x the median. Some steps "
                     "ran slow, {}. Every time in the table is a sum over the steps, the slow ones included: rerun, or record more "
                     "steps (--steps) so that a short slow spell weighs less.",
                     100 * (s.step_s / s.step_median_s - 1), s.step_max_s / s.step_median_s, why);
}

std::string unsteady_note_from_json(const json& report) {
  Report r;
  const json& s = report.value("step", json::object());
  r.step.steps = s.value("steps", int64_t(0));
  r.step.step_s = s.value("step_s", 0.0), r.step.step_median_s = s.value("step_median_s", 0.0);
  r.step.step_min_s = s.value("step_min_s", 0.0), r.step.step_max_s = s.value("step_max_s", 0.0);
  r.host_load = hw::host_load_from_json(report.value("host_load", json()));
  return unsteady_note(r);
}

namespace {
// A row of a Winograd convolution: the layer's, or with --group-by op all convolutions' where one was.
bool winograd_row(const Report& r, const OpRow& row) {
  if (r.winograd_layers.empty() || row.op != "conv2d") return false;
  return row.name == row.op || std::find(r.winograd_layers.begin(), r.winograd_layers.end(), row.name) != r.winograd_layers.end();
}

// A row of a layer on AMX tiles: the layer's, or with --group-by op its op's where one of its layers was.
bool amx_row(const Report& r, const OpRow& row) {
  if (r.amx_layers.empty() || (row.op != "conv2d" && row.op != "linear")) return false;
  return row.name == row.op || std::find(r.amx_layers.begin(), r.amx_layers.end(), row.name) != r.amx_layers.end();
}

// {layer: passes}, as the run record keeps them (cpu_step.matrix_product_passes).
json matrix_product_json(const Report& r) {
  json passes = json::object();
  for (const auto& [layer, which] : r.matrix_product_layers) passes[layer] = which;
  return passes;
}
}  // namespace

void set_amx_layers(Report& r, std::vector<std::string> layers) {
  r.amx_layers = std::move(layers);
  if (r.ceilings.amx_gflops <= 0 || r.ceilings.dram_gbps <= 0) return;
  const double ridge = r.ceilings.amx_gflops / r.ceilings.dram_gbps;
  for (OpRow& row : r.rows)
    if (row.flops > 0 && amx_row(r, row)) row.bound = row.intensity() >= ridge ? "compute" : "memory";
}

std::string amx_note(const Report& r) {
  if (r.amx_layers.empty() || r.ceilings.amx_gflops <= 0) return "";
  return fmt::format("{} ran on AMX tiles, whose bf16 peak is {:.0f} GFLOP/s here ({:.1f}x the {:.1f} above): their rows are compute- or "
                     "memory-bound against that",
                     listed(r.amx_layers), r.ceilings.amx_gflops, r.ceilings.amx_gflops / r.ceilings.peak_gflops, r.ceilings.peak_gflops);
}

std::string matrix_product_note(const Report& r) {
  if (r.matrix_product_layers.empty()) return "";
  std::vector<std::string> each;
  for (const auto& [layer, passes] : r.matrix_product_layers) each.push_back(fmt::format("{} ({})", layer, passes));
  return fmt::format("{} ran those passes as matrix products on the tiles (the input unfolded per tap, then oneDNN's matmul, where "
                     "small maps and strides leave oneDNN's AMX convolutions short): they compute every tap, the padding's too",
                     listed(each));
}

std::string one_thread_note(const Report& r) {
  if (r.one_thread_layers.empty() || r.ceilings.threads <= 1) return "";
  const size_t n = r.one_thread_layers.size();
  return fmt::format("{} ran on one thread of {} (too small to share: forking the threads would cost more than they save), so {} "
                     "reach{} at most a {} share of the ceilings",
                     listed(r.one_thread_layers), r.ceilings.threads, n == 1 ? "it" : "they", n == 1 ? "es" : "",
                     r.ceilings.threads == 2 ? std::string("half") : fmt::format("1/{}", r.ceilings.threads));
}

std::string winograd_note(const Report& r) {
  if (r.winograd_layers.empty()) return "";
  const size_t n = r.winograd_layers.size();
  return fmt::format("{} ran as Winograd (oneDNN's F(4x4, 3x3) kernel: 36 multiplies per 4x4 tile of outputs and channel pair where the "
                     "direct convolution does 144): {} GFLOP/s count{} the direct convolution's FLOPs, so {} can read above the peak",
                     listed(r.winograd_layers), n == 1 ? "its" : "their", n == 1 ? "s" : "", n == 1 ? "it" : "they");
}

std::string above_peak_note(const Report& r) {
  if (r.on_gpu || r.ceilings.peak_gflops <= 0) return "";
  const OpRow* fastest = nullptr;  // the fastest of the passes that read above the peak for their padding's taps
  std::vector<std::string> above;
  for (const auto& row : r.rows)
    if (row.padding_flops > 0 && row.gflops() > r.ceilings.peak_gflops && !winograd_row(r, row) && !amx_row(r, row)) {
      above.push_back(row.name + " " + row.phase);
      if (fastest == nullptr || row.gflops() > fastest->gflops()) fastest = &row;
    }
  if (fastest == nullptr) return "";
  return fmt::format("{} read{} above the {:.1f} GFLOP/s peak: the FLOPs count the multiply-adds on the zero padding, as PyTorch's FLOP "
                     "counters do, and oneDNN skips them ({:.0f}% of {}'s); on data alone {} ran at {:.1f} GFLOP/s ({:.0f}% of the peak)",
                     listed(above), above.size() == 1 ? "s" : "", r.ceilings.peak_gflops, 100 * fastest->padding_flops / fastest->flops,
                     fastest->name + " " + fastest->phase, fastest->name + " " + fastest->phase, fastest->gflops_on_data(),
                     100 * fastest->gflops_on_data() / r.ceilings.peak_gflops);
}

json to_json(const Report& r) {
  json rows = json::array();
  for (const auto& x : r.rows)
    rows.push_back({{"name", x.name}, {"op", x.op}, {"phase", x.phase}, {"calls", x.calls}, {"self_s", x.self_s},
                    {"total_s", x.total_s}, {"share", x.share}, {"flops", x.flops}, {"padding_flops", x.padding_flops}, {"bytes", x.bytes},
                    {"gflops", x.gflops()}, {"gbps", x.gbps()}, {"intensity", x.intensity()}, {"bound", x.bound}});
  const StepSummary& s = r.step;
  return {{"rows", rows},
          {"step", {{"steps", s.steps}, {"every", s.every}, {"step_s", s.step_s}, {"step_median_s", s.step_median_s}, {"step_min_s", s.step_min_s},
                    {"step_max_s", s.step_max_s}, {"data_s", s.data_s}, {"copy_s", s.copy_s}, {"forward_s", s.forward_s},
                    {"backward_s", s.backward_s}, {"optimizer_s", s.optimizer_s}, {"idle_s", s.idle_s},
                    {"launches_per_step", s.launches}, {"launches_source", s.launches_source},
                    {"device_clock_tick_ns", s.device_clock_tick_ns > 0 ? json(s.device_clock_tick_ns) : json()}, {"loader_busy", s.loader_busy}, {"loader_workers", s.loader_workers},
                    {"planned_s", s.planned_s > 0 ? json(s.planned_s) : json()}}},
          {"recorded_s", r.recorded_s},
          {"flops_per_step", r.flops_per_step},
          {"host_load", hw::to_json(r.host_load)},
          {"ceilings", plan::to_json(r.ceilings)}, {"winograd_layers", r.winograd_layers}, {"amx_layers", r.amx_layers},
          {"matrix_product_passes", matrix_product_json(r)}, {"one_thread_layers", r.one_thread_layers}};
}

void write_trace(const std::string& path, const std::vector<Event>& events, const std::vector<MemorySample>& memory,
                 const std::string& hint) {
  json ev = json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "dlperf"}}}});
  std::set<int> tracks;
  for (const auto& e : events) tracks.insert(e.track);
  for (int t : tracks)
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t},
                  {"args", {{"name", t == 0            ? std::string("training thread")
                                     : t == kGpuTrack ? std::string("GPU (device clock)")
                                                      : fmt::format("loader worker {}", t - 1)}}}});
  for (const auto& e : events) {
    json args = {{"step", e.step}};
    if (!e.op.empty()) args["op"] = e.op;
    ev.push_back({{"name", e.name}, {"cat", std::string(to_string(e.phase))}, {"ph", "X"}, {"pid", 1}, {"tid", e.track},
                  {"ts", e.t0 * 1e6}, {"dur", (e.t1 - e.t0) * 1e6}, {"args", args}});
  }
  for (const auto& m : memory) {
    json args;
    for (int c = 0; c < kMemCategories; ++c) args[std::string(to_string(MemCategory(c)))] = m.bytes[size_t(c)] / 1e6;
    ev.push_back({{"name", "memory (MB)"}, {"ph", "C"}, {"pid", 1}, {"ts", m.t * 1e6}, {"args", args}});
  }
  const std::string body = json{{"traceEvents", ev}, {"displayTimeUnit", "ms"}}.dump();
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  write_file_atomically(path, gz ? gzip(body) : body, hint);
}

}  // namespace dlperf::profile

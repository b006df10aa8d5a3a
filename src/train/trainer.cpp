#include "train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <tuple>

#include "backend/cpu/batchnorm_bf16.h"
#include "backend/cpu/conv_gemm.h"
#include "backend/cpu/layouts.h"
#include "backend/cpu/network.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/small_layers.h"
#include "backend/cuda/runtime.h"
#include "bench/cpu_bench.h"
#include "bench/machine_profile.h"
#include "bench/ops_bench.h"
#include "core/error.h"
#include "core/files.h"
#include "core/json_error.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "hw/cpu_info.h"
#include "hw/energy.h"
#include "plan/against.h"
#include "plan/memory.h"
#include "plan/step_time.h"
#include "profile/recorder.h"
#include "profile/report.h"
#include "report/table.h"
#include "train/checkpoint.h"
#include "train/detail.h"

namespace dlperf::train {

namespace fs = std::filesystem;
using nlohmann::json;


using namespace detail;

json to_json(const TrainConfig& c) {
  return {{"model", c.model},
          {"data", c.data},
          {"device", c.device},
          {"precision", c.precision},
          {"graphs", c.graphs},
          {"pin_memory", c.pin_memory},
          {"data_on_device", c.data_on_device},
          {"layout", c.layout},
          {"deterministic", c.deterministic},
          {"flush_denormals", c.flush_denormals},
          {"conv_workspace_mb", c.conv_workspace_mb},
          {"small_conv", c.small_conv},
          {"epochs", c.epochs},
          {"batch_size", c.batch},
          {"lr", c.lr},
          {"optimizer", c.optimizer.name},
          {"momentum", c.optimizer.momentum},
          {"nesterov", c.optimizer.nesterov},
          {"weight_decay", c.optimizer.weight_decay},
          {"schedule", c.schedule.name},
          {"warmup_epochs", c.schedule.warmup_epochs},
          {"step_epochs", c.schedule.step_epochs},
          {"label_smoothing", c.label_smoothing},
          {"augment", c.augment},
          {"crop_pad", c.crop_pad},
          {"workers", c.workers},
          {"threads", c.threads},
          {"seed", c.seed},
          {"train_limit", c.train_limit},
          {"test_limit", c.test_limit},
          {"eval_every", c.eval_every}};
}

json to_json(const EpochStats& e) {
  json by_cat = json::object();
  for (int i = 0; i < kMemCategories && i < int(e.peak_by_category.size()); ++i)
    by_cat[std::string(to_string(MemCategory(i)))] = e.peak_by_category[size_t(i)];
  return {{"epoch", e.epoch},         {"train_s", e.train_s},       {"eval_s", e.eval_s},
          {"images_per_s", e.images_per_s}, {"data_wait_s", e.data_wait_s}, {"compute_s", e.compute_s},
          {"train_loss", e.train_loss}, {"train_acc", e.train_acc},
          {"test_loss", e.evaluated ? json(e.test_loss) : json()},
          {"test_acc", e.evaluated ? json(e.test_acc) : json()},
          {"lr", e.lr},               {"peak_bytes", e.peak_bytes},
          {"energy_j", e.energy_j >= 0 ? json(e.energy_j) : json()},
          {"energy_j_range", e.energy_low_j >= 0 ? json{e.energy_low_j, e.energy_high_j} : json()},
          {"peak_bytes_by_category", by_cat},
          {"host_load", hw::to_json(e.host_load)}};
}

EpochStats epoch_from_json(const json& j) {
  EpochStats e;
  read_field(j, "epoch", e.epoch);
  read_field(j, "train_s", e.train_s);
  read_field(j, "eval_s", e.eval_s);
  read_field(j, "images_per_s", e.images_per_s);
  read_field(j, "data_wait_s", e.data_wait_s);
  read_field(j, "compute_s", e.compute_s);
  read_field(j, "train_loss", e.train_loss);
  read_field(j, "train_acc", e.train_acc);
  e.evaluated = !j.at("test_acc").is_null();
  if (e.evaluated) read_field(j, "test_loss", e.test_loss), read_field(j, "test_acc", e.test_acc);
  read_field(j, "lr", e.lr);
  read_field(j, "peak_bytes", e.peak_bytes);
  e.energy_j = j.value("energy_j", json()).is_number() ? j["energy_j"].get<double>() : -1;
  if (const json range = j.value("energy_j_range", json()); range.is_array() && range.size() == 2 && range[0].is_number() && range[1].is_number())
    e.energy_low_j = range[0], e.energy_high_j = range[1];
  e.host_load = hw::host_load_from_json(j.value("host_load", json()));
  const json& by_category = object_at(j, "peak_bytes_by_category");
  for (int i = 0; i < kMemCategories; ++i)
    e.peak_by_category.push_back(value_field(by_category, std::string(to_string(MemCategory(i))).c_str(), 0.0));
  return e;
}

namespace {


struct EvalResult {
  double loss = 0, acc = 0;
};

EvalResult evaluate(cpu::Network& net, data::Loader& loader, int64_t size, Progress& progress) {
  loader.start_epoch(0);
  double loss = 0;
  int64_t correct = 0, batches = 0, images = 0;
  while (const data::Batch* b = loader.next()) {
    std::memcpy(net.input(), b->data(), b->images->bytes());
    net.forward(false);
    auto r = net.loss(b->labels.data(), b->valid, 0.0, false);
    loss += r.loss * double(b->valid);
    correct += r.correct;
    images += b->valid;
    progress.update(++batches, images, std::nan(""));
  }
  progress.clear();
  return {loss / double(size), double(correct) / double(size)};
}

std::vector<std::pair<std::string, std::vector<float>>> snapshot(cpu::Network& net, nn::Optimizer* opt) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  auto params = net.params();
  for (cpu::Param* p : params) out.emplace_back(p->name, cpu::to_plain(p->layout, p->dims, p->value));
  for (auto& [name, m] : net.buffers()) out.emplace_back(name, std::vector<float>(m->f32(), m->f32() + cpu::floats_in(m->desc())));
  if (opt)
    for (auto& s : opt->state()) {
      cpu::Param* p = params[s.param];
      cpu::Mem view(p->layout, MemCategory::workspace);
      std::memcpy(view.f32(), s.data, p->layout.get_size());
      out.emplace_back(p->name + s.suffix, cpu::to_plain(p->layout, p->dims, view));
    }
  return out;
}

void restore(cpu::Network& net, nn::Optimizer& opt, const Checkpoint& ck) {
  auto get = [&](const std::string& name, size_t count) -> const std::vector<float>& { return checkpoint_tensor(ck, name, count); };
  auto params = net.params();
  for (cpu::Param* p : params)
    cpu::from_plain(p->layout, p->dims, get(p->name, size_t(numel(p->dims))).data(), p->value);
  for (auto& [name, m] : net.buffers()) {
    const auto& v = get(name, cpu::floats_in(m->desc()));
    std::memcpy(m->f32(), v.data(), v.size() * 4);
  }
  for (auto& s : opt.state()) {
    cpu::Param* p = params[s.param];
    cpu::Mem tmp(p->layout, MemCategory::workspace);
    cpu::from_plain(p->layout, p->dims, get(p->name + s.suffix, size_t(numel(p->dims))).data(), tmp);
    std::memcpy(s.data, tmp.f32(), p->layout.get_size());
  }
}


// Records per-layer times and efficiencies in the run record; prints them when `say`.
void layer_times(const cpu::Network& net, int threads, json& record, bool say) {
  int64_t steps = 0;
  for (const auto& x : net.node_times()) steps = std::max(steps, x.backward_calls);
  report::Table t({"layer", "op", "fwd ms", "bwd ms", "fwd GFLOP/s", "bwd GFLOP/s", "% of peak"});
  // The peak profile and plan use (bench all's, else measured now); twice fp32's for bf16.
  const plan::CpuCeilings ceilings = plan::host_ceilings(threads, net.bf16() ? "bf16" : "fp32");
  const double peak = ceilings.peak_gflops;
  json rows = json::array();
  const auto& g = net.graph();
  // The bytes each pass moves at the element size the engine reads it in (bf16 between convs).
  const std::vector<double> in_bytes = plan::engine_input_bytes(g, net.bf16() ? "bf16" : "fp32");
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const std::string name = net.step_name(int(i));
    if (name.empty()) continue;
    const auto& n = g.nodes[i];
    const auto& tm = net.node_times()[i];
    if (tm.forward_calls == 0) continue;
    const double fwd = tm.forward_s / double(tm.forward_calls), bwd = tm.backward_calls ? tm.backward_s / double(tm.backward_calls) : 0;
    const double ff = n.cost.forward.flops, bf = n.cost.total_backward().flops;
    const double fg = fwd > 0 ? ff / fwd / 1e9 : 0, bg = bwd > 0 ? bf / bwd / 1e9 : 0;
    // Against the peak, only what oneDNN runs: not a convolution's taps on zero padding.
    const double fp = n.cost.forward.padding_flops, bp = n.cost.total_backward().padding_flops;
    const double all = (fwd + bwd) > 0 ? (ff + bf - fp - bp) / (fwd + bwd) / 1e9 : 0;
    t.add({name, std::string(ops::to_string(n.kind)), format_decimals(fwd * 1e3, 3), format_decimals(bwd * 1e3, 3),
           fmt::format("{:.1f}", fg), fmt::format("{:.1f}", bg), fmt::format("{:.1f}%", 100 * all / peak)});
    const ops::OpCost at = n.cost_at(in_bytes[i]);
    rows.push_back({{"layer", name}, {"op", ops::to_string(n.kind)}, {"forward_s", fwd}, {"backward_s", bwd},
                    {"forward_flops", ff}, {"backward_flops", bf}, {"forward_padding_flops", fp}, {"backward_padding_flops", bp},
                    {"forward_bytes", at.forward.bytes},
                    {"backward_bytes", at.total_backward().bytes}, {"forward_gflops", fg}, {"backward_gflops", bg},
                    {"percent_of_peak", 100 * all / peak}});
  }
  record["layer_times"] = rows;
  record["layer_times_peak_gflops"] = peak;
  record["layer_times_peak_source"] = ceilings.source;
  if (!say) return;
  std::printf("\nPer-layer time per training step (%s timed), against the %s peak of %.1f GFLOP/s\n(%s):\n",
              counted(steps, "step").c_str(), net.bf16() ? "bf16" : "FMA", peak, ceilings.source.c_str());
  t.print();
  std::printf("(GFLOP/s count a convolution's multiply-adds on its zero padding, as PyTorch's FLOP counters do; oneDNN skips\n"
              " them, and %% of peak counts only the others)\n");
}

// cpu_bf16_note for this CPU: from the machine profile's peaks where it holds both ('dlperf bench
// all'), else from both measured now, quickly (about 0.2 s, paid only by a bf16 run that prints).
std::string bf16_note_here(int threads) {
  // With AMX oneDNN runs the bf16 convolutions and linear layers on its tiles, far beyond fp32.
  if (cpu::has_amx_kernels()) return "";
  const bench::Ceilings kept = bench::load_ceilings(hw::cpu_info().model, threads);
  if (kept.f32_gflops > 0 && kept.bf16_gflops > 0) return cpu_bf16_note(kept.bf16_gflops, kept.f32_gflops, kept.source());
  bench::Options o;
  o.quick = true;
  o.threads = threads;
  std::string why_not;
  const bench::FlopsResult bf16 = bench::bf16_peak(o, &why_not);
  if (bf16.isa.empty()) return "";
  return cpu_bf16_note(bf16.gflops.max, bench::fma_peak(o).gflops.max, "measured just now, quickly");
}

}  // namespace

std::string cpu_precision_refusal(const std::string& p) {
  if (p == "fp32") return "";
  if (p == "tf32") return "tf32 is a GPU tensor-core format (NVIDIA Ampere and later); CPUs have none";
  const hw::CpuInfo cpu = hw::cpu_info();
  if (p == "bf16") {
    if (!cpu.avx512_bf16) return fmt::format("bf16 training needs AVX512-BF16; this CPU ({}) has {}", cpu.model, cpu.isa);
    if (!cpu::has_bf16_kernels()) return "bf16 training needs oneDNN's AVX512-BF16 kernels, which ONEDNN_MAX_CPU_ISA turns off here";
    return "";
  }
  return "fp16 training needs a GPU: x86 CPUs have no fp16 FMA before AVX512-FP16, and dlperf's CPU engine has no fp16 path";
}

double estimate_train_bytes(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers, const std::string& precision) {
  return plan::engine_memory(g, opt, workers, precision).total();
}

void check_fits(const nn::ModelSpec& spec, const nn::Graph& g, const nn::OptimizerConfig& opt, double available, int workers,
                const std::string& precision) {
  const double need = plan::engine_memory(g, opt, workers, precision).total();
  if (need <= hw::kUsableMemoryShare * available) return;
  const Dims chw(g.input.begin() + 1, g.input.end());
  const int64_t fits = plan::largest_batch_within(spec, chw, g.classes, g.batch() - 1, hw::kUsableMemoryShare * available, [&](const nn::Graph& b) {
    return plan::engine_memory(b, opt, workers, precision).total();
  });
  throw Error(fmt::format("model {} at batch size {} needs about {} of memory, but {} is available (dlperf plans on {:.0f}% of it)",
                          g.model, g.batch(), format_bytes(need), format_bytes(available), 100 * hw::kUsableMemoryShare),
              fits >= 1 ? fmt::format("use --batch-size {} or less", fits) : "use a smaller model");
}

namespace {

void validate(const TrainConfig& cfg) {
  // A million epochs is past any real run, and keeps epochs x steps (the schedule's length, the
  // profile's window) within int64: 2^63 - 1 of them wrapped the step count negative.
  check(cfg.epochs >= 1 && cfg.epochs <= kMaxEpochs, fmt::format("--epochs must be between 1 and {}, not {}", kMaxEpochs, cfg.epochs));
  check(cfg.batch >= 1 && cfg.batch <= kMaxBatch, fmt::format("--batch-size must be between 1 and {}", kMaxBatch));
  // Each says the value it was given: "--lr must be a positive number, not nan".
  auto given = [](double v) { return fmt::format(", not {:g}", v); };
  check(cfg.lr > 0 && std::isfinite(cfg.lr), "--lr must be a positive number" + given(cfg.lr));
  check(cfg.label_smoothing >= 0 && cfg.label_smoothing < 1, "--label-smoothing must be in [0, 1)" + given(cfg.label_smoothing));
  // Momentum at or above 1 (or below 0) makes the velocity grow without bound.
  check(cfg.optimizer.momentum >= 0 && cfg.optimizer.momentum < 1, "--momentum must be in [0, 1)" + given(cfg.optimizer.momentum));
  check(cfg.optimizer.weight_decay >= 0 && std::isfinite(cfg.optimizer.weight_decay), "--weight-decay must be a finite number, 0 or more" + given(cfg.optimizer.weight_decay));
  check(cfg.train_limit >= 0 && cfg.test_limit >= 0, "--train-limit and --test-limit must be 0 (all) or more");
  check(cfg.crop_pad >= 0 && cfg.crop_pad <= 8, fmt::format("--crop-pad must be between 0 and 8 pixels, not {}", cfg.crop_pad));
  // onecycle, the default schedule, warms up on its own: a --warmup-epochs it ignored would look applied.
  check(cfg.schedule.warmup_epochs >= 0 && std::isfinite(cfg.schedule.warmup_epochs), "--warmup-epochs must be a finite number, 0 or more" + given(cfg.schedule.warmup_epochs));
  check(cfg.schedule.warmup_epochs == 0 || cfg.schedule.name != "onecycle",
        "--warmup-epochs does not apply to --schedule onecycle (the default), which warms up over its first 30% of steps",
        "drop --warmup-epochs, or pick --schedule constant, step or cosine");
  check(cfg.schedule.warmup_epochs <= double(cfg.epochs),
        fmt::format("--warmup-epochs {} is longer than the run ({} epoch{}): the rate would not reach --lr before the run ends",
                    cfg.schedule.warmup_epochs, cfg.epochs, cfg.epochs == 1 ? "" : "s"),
        "lower --warmup-epochs, or raise --epochs");
  check(cfg.schedule.step_epochs > 0 && std::isfinite(cfg.schedule.step_epochs), "--step-epochs must be a finite number more than 0" + given(cfg.schedule.step_epochs));
  hw::check_threads(cfg.threads);
  // Checked here, before the memory check counts their prefetched batches.
  check(cfg.workers >= 0 && cfg.workers <= data::kMaxWorkers, fmt::format("--workers must be between 0 and {}", data::kMaxWorkers));
  check(cfg.precision == "fp32" || cfg.precision == "tf32" || cfg.precision == "bf16" || cfg.precision == "fp16",
        fmt::format("--precision {} is not one of fp32, tf32, bf16, fp16", cfg.precision));
  check(!cfg.resume || !cfg.checkpoint_dir.empty(), "--resume needs --checkpoint DIR", "name the directory the checkpoint is in");
  // Every place a run writes to is checked now, not after the epochs that would then be lost.
  auto writable_dir = [](const std::string& dir, const std::string& what, const std::string& flag) {
    const std::error_code ec = make_writable_dir(dir);
    check(!ec, fmt::format("cannot write {} to {}: {}", what, dir, ec.message()), fmt::format("pick a writable {}", flag));
  };
  if (!cfg.runs_dir.empty()) writable_dir(cfg.runs_dir, "run records", "--runs-dir");
  if (!cfg.checkpoint_dir.empty()) writable_dir(cfg.checkpoint_dir, "checkpoints", "--checkpoint");
  check(!cfg.overwrite_checkpoint || !cfg.checkpoint_dir.empty(), "--overwrite-checkpoint needs --checkpoint DIR",
        "name the directory whose checkpoint this run replaces");
  check(!cfg.overwrite_checkpoint || !cfg.resume, "--overwrite-checkpoint starts afresh, and --resume goes on from the checkpoint",
        "keep one of them");
  // A new run would replace an earlier run's checkpoint after its first epoch, and that run's
  // epochs with it: asked for, not assumed (as Hugging Face's Trainer asks for overwrite_output_dir).
  if (!cfg.checkpoint_dir.empty() && !cfg.resume && !cfg.overwrite_checkpoint)
    if (const auto held = checkpoint_held(cfg.checkpoint_dir))
      throw Error(fmt::format("{} already exists ({}), and this run would replace it after its first epoch",
                              checkpoint_path(cfg.checkpoint_dir), held->what),
                  held->readable ? "add --resume to go on from it, --overwrite-checkpoint to start afresh, or name another --checkpoint directory"
                                 : "add --overwrite-checkpoint to replace it, or name another --checkpoint directory");
  // Its epoch stops after the recorded steps: a checkpoint would call a part-trained epoch done.
  check(!cfg.profile_only || cfg.checkpoint_dir.empty() || cfg.resume, "dlperf profile writes no checkpoint: it stops mid-epoch",
        "drop --checkpoint, or add --resume to profile the run saved there");
  check(cfg.profile_skip >= 0 && cfg.profile_steps >= 0,
        fmt::format("{} and {} count steps: they cannot be negative", detail::profile_flag(cfg, "skip"),
                    detail::profile_flag(cfg, "steps")));
  check(cfg.profile_every >= 1, fmt::format("{} {} records no step", detail::profile_flag(cfg, "every"), cfg.profile_every),
        fmt::format("{} 1 records every step of the window, 4 one in four", detail::profile_flag(cfg, "every")));
  if (cfg.profile && !cfg.profile_out.empty()) {
    const std::string dir =
        names_a_directory(cfg.profile_out) ? cfg.profile_out : fs::path(cfg.profile_out).parent_path().string();
    writable_dir(dir.empty() ? "." : dir, "the profile", detail::profile_flag(cfg, "out"));
  }
}


std::vector<nn::ParamRef> param_refs(cpu::Network& net) {
  std::vector<nn::ParamRef> refs;
  for (cpu::Param* p : net.params()) refs.push_back({p->value.f32(), p->grad.f32(), p->floats()});
  return refs;
}

// Everything one training run holds, in the order it is built.
struct Run {
  const TrainConfig& cfg;
  data::DataPair data;
  struct Normalization {
    std::vector<float> mean, stddev;
    explicit Normalization(const data::Dataset& d) { data::channel_stats(d, mean, stddev); }
  } norm;
  data::Loader train_loader, test_loader;
  nn::Graph graph;
  cpu::Network net;
  nn::Optimizer opt;
  int64_t per_epoch, total_steps;
  hw::EnergyMeter energy;
  bool profiling_ = false, profiled_ = false;
  /// Whether the profile's window has been recorded.
  bool profiled() const { return profiled_; }
  std::optional<detail::ProfileWindow> window;  ///< set when profiling
  int64_t steps_run = 0;                        ///< steps this run has trained (the window counts them)
  json resumed_config = json::object();         ///< --resume: the settings the checkpoint was made with

  /// `threads`: the engine's compute threads.
  Run(const TrainConfig& c, data::DataPair d, nn::Graph g, int threads)
      : cfg(c), data(std::move(d)), norm(data.train),
        // A network whose layers all run on one thread (small_layers.h) leaves the workers the other cores.
        train_loader(data.train, loader_config(c, true, cpu::step_compute_threads(g, threads)), norm.mean, norm.stddev),
        test_loader(data.test, loader_config(c, false, cpu::step_compute_threads(g, threads)), norm.mean, norm.stddev),
        graph(std::move(g)),
        net(graph, c.seed, /*fuse=*/true, c.precision), opt(c.optimizer, param_refs(net)),
        per_epoch(train_loader.batches_per_epoch()), total_steps(per_epoch * c.epochs) {}

  /// Restores weights, optimizer state and history; returns the epochs already done.
  int64_t resume(std::vector<EpochStats>& history) {
    Checkpoint ck = load_checkpoint(cfg.checkpoint_dir);
    check_checkpoint_matches(ck, cfg.checkpoint_dir, graph.model, cfg.batch, graph.input, cfg.optimizer.name);
    restore(net, opt, ck);
    resumed_config = ck.meta.value("config", json::object());
    opt.set_steps_done(ck.meta.at("optimizer_steps"));
    for (const auto& e : ck.meta.at("history")) history.push_back(epoch_from_json(e));
    return ck.meta.at("epoch_done");
  }

  /// The run's header, and the epochs a resumed run has done.
  void print_header(int64_t start_epoch, const std::vector<EpochStats>& history, int threads) const {
    const hw::CpuInfo cpu = hw::cpu_info();
    if (cfg.resume) std::fputs(resumed_line(cfg, start_epoch, resumed_config).c_str(), stdout);
    std::fputs(model_line(graph, data).c_str(), stdout);
    std::printf("device cpu (%s, %s, %s), %s, batch %lld, %s, %s, seed %llu\n\n%s", cpu.model.c_str(),
                counted(threads, "thread").c_str(), cpu.isa.c_str(),
                net.bf16() ? "bf16 activations and convolutions (fp32 master weights and logits)" : "fp32", (long long)cfg.batch,
                recipe_text(cfg, data.train).c_str(), counted(cfg.workers, "loader worker").c_str(), (unsigned long long)cfg.seed,
                kEpochHeader);
    for (const auto& e : history) std::fputs(epoch_row(e).c_str(), stdout);
    std::fflush(stdout);
  }

  /// One epoch of training, then evaluation; none when a signal stopped it (core/interrupt.h).
  std::optional<EpochStats> epoch(int64_t epoch, BarInfo bar) {
    HostAllocator::instance().reset_peaks();  // the epoch's own peaks
    EpochStats st;
    st.epoch = epoch + 1;
    Progress progress(bar, epoch + 1, cfg.epochs, per_epoch);
    train_loader.start_epoch(epoch);
    EpochTally tally;
    const double t_start = now_s(), j_start = energy.available() ? energy.joules() : 0;
    const hw::CpuTimes cpu_start = hw::cpu_times_now();
    profile::Recorder& rec = profile::Recorder::get();
    for (int64_t i = 0;; ++i) {
      if (opt.steps_done() == cfg.sigint_at_step) std::raise(SIGINT);
      if (stop_signal() != 0) {  // an unfinished recording is dropped: profiled_ stays false
        if (rec.started()) rec.stop();
        progress.clear();
        return std::nullopt;
      }
      if (profiling_ && !profiled_) {  // i < per_epoch: a step follows (the loader's end is no step)
        if (i < per_epoch && window->starts_at(steps_run)) rec.start();
        if (rec.started() && (window->ends_at(steps_run) || i == per_epoch)) {
          rec.stop();
          profiled_ = true;
          if (cfg.profile_only) break;
        }
        if (rec.started()) window->enter_step(rec, steps_run);
      }
      const profile::Scope step_scope("step", profile::Phase::step);
      const double t0 = now_s();
      const data::Batch* b = nullptr;
      {
        const profile::Scope wait("data wait", profile::Phase::data);
        b = train_loader.next();
      }
      const double t1 = now_s();
      if (!b) break;
      st.data_wait_s += t1 - t0;
      const int64_t step = opt.steps_done();
      {
        const profile::Scope copy("input copy", profile::Phase::copy);
        std::memcpy(net.input(), b->data(), b->images->bytes());
      }
      cpu::set_dropout_step(uint64_t(step));
      net.forward(true);
      cpu::LossResult r;
      {
        const profile::Scope loss("loss", profile::Phase::loss);
        r = net.loss(b->labels.data(), b->valid, cfg.label_smoothing, true);
      }
      if (!std::isfinite(r.loss))
        throw diverged_run(cfg, r.loss, fmt::format("at epoch {}, step {}", epoch + 1, i + 1), epoch);
      net.backward();
      st.lr = nn::learning_rate(cfg.schedule, cfg.lr, step, total_steps, per_epoch);
      {
        const profile::Scope update("optimizer", profile::Phase::optimizer);
        opt.step(st.lr);
      }
      st.compute_s += now_s() - t1;
      ++steps_run;
      tally.add(r.loss, r.correct, b->valid);
      progress.update(i + 1, tally.seen, tally.loss_sum / double(tally.seen));
    }
    if (rec.started()) {  // the epoch ended inside the recording window
      rec.stop();
      profiled_ = true;
    }
    st.train_s = now_s() - t_start;
    st.host_load = hw::host_load(cpu_start, hw::cpu_times_now());
    if (energy.available()) st.energy_j = energy.joules() - j_start;
    progress.clear();
    tally.finish(st);
    const double e0 = now_s();
    if (!(cfg.profile_only && profiled_) && evaluates_after(cfg, epoch)) {  // profile stops after its steps; --eval-every
      net.set_timing(false);  // layer times are of training steps only
      Progress testing(bar, epoch + 1, cfg.epochs, test_loader.batches_per_epoch(), "test");
      const EvalResult ev = evaluate(net, test_loader, data.test.size(), testing);
      net.set_timing(cfg.layer_times);
      st.test_loss = ev.loss;
      st.test_acc = ev.acc;
    } else {
      st.evaluated = false;
    }
    st.eval_s = st.evaluated ? now_s() - e0 : 0.0;
    record_peaks(st, HostAllocator::instance().stats());
    return st;
  }

  void save(int64_t epochs_done, const std::vector<EpochStats>& history) {
    Checkpoint ck;
    ck.meta = checkpoint_meta(cfg, graph, epochs_done, opt.steps_done(), history);
    for (auto& [name, v] : snapshot(net, &opt)) ck.tensors[name] = std::move(v);
    save_checkpoint(cfg.checkpoint_dir, ck);
  }

  json record(const std::vector<EpochStats>& epochs, int threads) const {
    json r = build_record(cfg, graph, data, epochs, threads,
                          energy.available() ? "RAPL package counters (CPU packages only)" : energy.why_not());
    // Which code pooled the AVX-512 layout, where this run had such a pooling: it was timed.
    if (const cpu::MaxPool16cChoice* c = cpu::max_pool_16c_choice_if_made()) r["cpu_step"]["max_pool_nChw16c"] = c->why;
    // Where the model has a convolution: whether the engine runs them as Winograd here (timed once
    // per process, and now if no layer asked), and which did.
    if (std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const nn::Node& n) { return n.kind == ops::OpKind::conv2d; })) {
      r["cpu_step"]["winograd"] = cpu::winograd_choice().why;
      r["cpu_step"]["winograd_on"] = cpu::winograd_choice().on;  // what plan --against reads
      r["cpu_step"]["winograd_layers"] = net.winograd_layers();
    }
    // The layers small enough to run on one thread, which did (since 2026-11-30; plan --against
    // plans a record without them with every layer on all its threads, as the engine ran them).
    r["cpu_step"]["one_thread_layers"] = net.one_thread_layers();
    // A bf16 run's layers that ran on AMX tiles (since 2026-11-29; plan --against plans a bf16
    // record without this on the AVX512-BF16 kernels it ran on before).
    // And the passes of theirs that ran as matrix products, under which mode (since 2026-11-29;
    // plan --against plans a record without it with oneDNN's convolutions, as it ran).
    if (cfg.precision == "bf16") {
      r["cpu_step"]["amx_layers"] = net.amx_layers();
      r["cpu_step"]["conv_matrix_products"] = cpu::conv_gemm_mode();
      json passes = json::object();
      for (const auto& [layer, which] : net.matrix_product_layers()) passes[layer] = which;
      r["cpu_step"]["matrix_product_passes"] = passes;
      // Whose code ran its batchnorms (since 2026-11-30), which plan --against plans so.
      r["cpu_step"]["bf16_batchnorm"] = cpu::bf16_batchnorm_own_code() ? "dlperf" : "onednn";
    }
    // Where a relu ran inside the residual add before it (since 2026-11-29): plan --against plans
    // a residual model's record without this as the engine ran it before, the relu apart.
    for (size_t i = 0; i < graph.nodes.size(); ++i)
      if (plan::relu_fused_into_add(graph, i) && plan::relu_fused_on_cpu(graph, i)) r["cpu_step"]["add_relu_fused"] = true;
    return r;
  }
};

// dlperf plan's step time for this CPU run, as `plan --against` predicts it from the run's
// record: the profile's ceilings with the engine call's cost measured around the epochs, the
// run's loader workers and augmentation. 0 where the plan cannot model the run: the profile
// stands without it.
double planned_step_s(const TrainConfig& cfg, const nn::Graph& g, plan::CpuCeilings at, const json& summary) {
  try {
    if (const double call_us = plan::recorded_call_us(summary); call_us > 0) at.call_overhead_s = call_us * 1e-6;
    at.loader_workers = cfg.workers;
    at.augment = cfg.augment;
    return plan::predict_step(g, cfg.optimizer, at).step_s;
  } catch (const Error&) {
    return 0;
  }
}

}  // namespace

TrainResult train(const TrainConfig& cfg) {
  validate(cfg);
  const StopOnSignal stop_on_signal;  // Ctrl-C stops at the next step and keeps the finished epochs
  // A profile an earlier run left recording (it threw mid-window) must not record this one.
  if (profile::Recorder::get().started()) profile::Recorder::get().stop();
  const bool say = !cfg.quiet;
  const hw::ScopedThreads scoped_threads(cfg.threads);
  const int threads = scoped_threads.count();
  const hw::ScopedDenormals denormals(cfg.flush_denormals);  // after the thread count: it sets that team's
  data::DataPair d = data::load_data(cfg.data);
  // Digits (and synthetic data) are never flipped: there, flips-only augmentation would do nothing.
  check(!cfg.augment || cfg.crop_pad > 0 || d.train.flip_ok,
        fmt::format("--augment --crop-pad 0 asks for horizontal flips only, and dlperf does not flip {} (a mirrored digit is "
                    "no digit; synthetic data is not flipped either)", d.train.name),
        "raise --crop-pad for random crops, or drop --augment");
  // Notes about the run, printed with its header: after every check below that can refuse it, so
  // a refused run prints its one error and nothing before it.
  std::vector<std::string> notes;
  if (!d.notice.empty()) notes.push_back(d.notice);
  // Allowed (the lab's workers experiment measures it), but said, as PyTorch's DataLoader does.
  if (const int cpus = hw::usable_cpus(); cfg.workers > cpus && !cfg.data_on_device)
    notes.push_back(fmt::format("{} loader workers on {} CPU{}: workers beyond the CPU count take turns on the same cores "
                                "('dlperf lab workers' measures what workers buy here)", cfg.workers, cpus, cpus == 1 ? "" : "s"));
  // A limit past the set's size trains on all of it, as asked for a subset it could not have: said.
  for (const auto& [flag, limit, set, what] : {std::tuple{"--train-limit", cfg.train_limit, &d.train, "training"},
                                               std::tuple{"--test-limit", cfg.test_limit, &d.test, "test"}})
    if (limit > set->size())
      notes.push_back(fmt::format("{} {} is more than the {} {} images: all of them are used", flag, limit, set->size(), what));
  d.train.truncate(cfg.train_limit);
  d.test.truncate(cfg.test_limit);
  // Training skips a partial last batch (as drop_last does): said where that is a tenth of the set
  // or more, since those images then train less often than the rest.
  if (const int64_t n = d.train.size(), left = cfg.batch > 0 ? n % cfg.batch : 0; n >= cfg.batch && 10 * left >= n)
    notes.push_back(fmt::format("batch {} makes {} per epoch on {} training images: the other {} ({:.0f}%) would fill only part of a "
                                "batch and are skipped, different ones each epoch (shuffled)",
                                cfg.batch, counted(n / cfg.batch, "step"), n, left, 100.0 * double(left) / double(n)));
  nn::Graph graph = nn::build_graph(nn::load_model(cfg.model), {d.train.channels, d.train.height, d.train.width},
                                    d.train.classes, cfg.batch);
  if (const int gpu = cuda::resolve_device(cfg.device); gpu >= 0) {  // throws when the device cannot be used
#ifdef DLPERF_HAVE_CUDA
    check(cfg.flush_denormals, "--keep-denormals sets how the CPU's threads compute, and this run is on a GPU",
          "drop --keep-denormals, or train on the CPU (--device cpu)");
    return detail::train_on_gpu(cfg, gpu, std::move(d), std::move(graph), std::move(notes));
#endif
  }
  if (const std::string why = cpu_precision_refusal(cfg.precision); !why.empty())
    throw Error(fmt::format("--precision {} cannot train on this CPU: {}", cfg.precision, why),
                "use --precision fp32 on the CPU, or a GPU (--device cuda)");
  check(!cfg.data_on_device, "--data-on-device keeps the dataset in GPU memory, and this run is on the CPU",
        "drop --data-on-device, or train on a GPU (--device cuda)");
  check(cfg.layout == "auto", fmt::format("--layout {} sets how the GPU stores activations, and this run is on the CPU", cfg.layout),
        "drop --layout (the CPU engine lets oneDNN pick its layouts), or train on a GPU (--device cuda)");
  check(cfg.graphs, "--no-graphs turns off CUDA graphs, and this run is on the CPU", "drop --no-graphs, or train on a GPU (--device cuda)");
  check(cfg.conv_workspace_mb == TrainConfig{}.conv_workspace_mb,
        fmt::format("--conv-workspace {} sets what cuDNN's convolutions on a GPU may use, and this run is on the CPU", cfg.conv_workspace_mb),
        "drop --conv-workspace, or train on a GPU (--device cuda)");
  check(cfg.small_conv == TrainConfig{}.small_conv,
        fmt::format("--small-conv {} picks who runs a GPU's convolutions of few channels, and this run is on the CPU", cfg.small_conv),
        "drop --small-conv, or train on a GPU (--device cuda)");
  check(cfg.pin_memory, "--pin-memory off changes how batches reach a GPU, and this run is on the CPU",
        "drop --pin-memory, or train on a GPU (--device cuda)");
  // Linux overcommits: a run that does not fit is not refused by malloc but killed later.
  if (const double avail = hw::available_memory_bytes(); avail > 0)
    check_fits(nn::load_model(cfg.model), graph, cfg.optimizer, avail, cfg.workers, cfg.precision);
  if (say && cfg.precision == "bf16")
    if (std::string note = bf16_note_here(threads); !note.empty()) notes.push_back(std::move(note));
  // A call into the engine's cost just before the epochs and just after (a few ms each: bench's
  // dispatch measurement): the threads' round trip between the cores, which on a VM moves with
  // where its vCPUs are placed, and a small model's step with it. The record keeps both, so
  // `plan --against` predicts the run with the cost it trained under, and the lab can say it.
  const double call_start_us = bench::cpu_call_now_us(threads);
  // Start from an empty block cache: blocks cached by earlier runs in this process (the lab
  // runs many) would be reused for smaller requests and counted at their larger size. Likewise
  // oneDNN's shared scratchpad, which is live and sized by the largest primitive run so far.
  cpu::release_scratchpad();
  HostAllocator::instance().trim();
  HostAllocator::instance().reset_peaks();
  Run run(cfg, std::move(d), std::move(graph), threads);

  TrainResult result;
  const int64_t start_epoch = cfg.resume ? run.resume(result.epochs) : 0;
  const size_t resumed_epochs = result.epochs.size();
  // Before the header, so a profile window past the run's end is refused before anything prints.
  if (cfg.profile) {
    run.window.emplace(cfg, run.per_epoch, cfg.epochs - start_epoch);
    if (!run.window->note.empty()) notes.push_back(run.window->note);
  }
  if (say) {
    print_notes(notes);
    run.print_header(start_epoch, result.epochs, threads);
  }

  run.net.set_timing(cfg.layer_times);
  run.profiling_ = cfg.profile;
  const int64_t stopped_in = run_epochs(cfg, run, start_epoch, result.epochs);  // the epoch a signal stopped, or 0

  result.record = run.record(result.epochs, threads);
  if (result.record.contains("summary"))
    result.record["summary"]["engine_call_us"] = {{"start", call_start_us}, {"end", bench::cpu_call_now_us(threads)}};
  if (stopped_in > 0) result.record["stopped"] = stopped_json(cfg, stopped_in);
  if (say && result.record.contains("summary")) {
    const json& s = result.record["summary"];
    std::printf("\ndone: %s in %s of training (%.0f img/s), %s, peak tracked memory %s (process RSS %s)\n",
                counted((long long)result.epochs.size(), "epoch").c_str(), format_seconds(s["train_s"].get<double>()).c_str(), s["images_per_s"].get<double>(),
                final_accuracy(s).c_str(), format_bytes(s["peak_bytes"]).c_str(), format_bytes(s["max_rss_bytes"]).c_str());
    print_host_load_note(s);
    if (const std::string rose = loss_rise_note(cfg, result.epochs); !rose.empty()) std::printf("note: %s\n", rose.c_str());
  }
  if (cfg.layer_times && stopped_in == 0) layer_times(run.net, threads, result.record, say);
  if (cfg.profile && (stopped_in == 0 || run.profiled())) {
    const plan::CpuCeilings ceilings = plan::host_ceilings(threads, cfg.precision);
    finish_profile(cfg, run.graph, ceilings, HostAllocator::instance().stats(), result, 0,
                   planned_step_s(cfg, run.graph, ceilings, result.record.value("summary", json::object())), 0,
                   {.winograd = run.net.winograd_layers(), .amx = run.net.amx_layers(), .one_thread = run.net.one_thread_layers(),
                    .matrix_products = run.net.matrix_product_layers()});
  }
  if (!cfg.runs_dir.empty() && keeps_record(result, resumed_epochs)) {
    result.record_path = write_record(result.record, cfg.runs_dir,
                                      fmt::format("{}-train-{}-{}-b{}", file_timestamp(), run.graph.model, run.data.train.name, cfg.batch));
    if (say) std::printf("run record: %s\n", result.record_path.c_str());
  }
  if (stopped_in > 0) throw stopped_run(cfg, stopped_in, result);
  for (auto& [name, v] : snapshot(run.net, nullptr)) result.weights.insert(result.weights.end(), v.begin(), v.end());
  return result;
}

}  // namespace dlperf::train

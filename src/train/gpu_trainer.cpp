// dlperf train --device cuda[:N]: the training loop on one GPU, over cuda::Network. The epoch
// table, the run record and the schedule are the CPU loop's. What differs (docs/gpu.md):
//   - the host never waits for a step: the loss and accuracy accumulate on the GPU and are read
//     at the end of the epoch (and when the progress bar redraws);
//   - the step is captured once in a CUDA graph and replayed (--no-graphs: eager launches);
//   - batches come from the host loaders through pinned buffers on a copy stream that overlaps
//     compute (--pin-memory off: pageable copies in the step's stream), or, with
//     --data-on-device, are gathered, augmented and normalized on the GPU from a copy of the
//     dataset there, in the host loader's exact order and crops;
//   - the GPU's power comes from NVML.
// Precision: fp32, tf32, or bf16/fp16 mixed precision (cuda::Network). Checkpoints use the CPU
// engine's tensor names, so a run resumes on either device. --profile times each layer with CUDA
// events (GpuProfile); --layer-times, the CPU's per-layer timer, is refused here.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <deque>
#include <limits>
#include <functional>
#include <memory>
#include <optional>

#include "backend/cuda/check.h"
#include "backend/cuda/network.h"
#include "backend/cuda/runtime.h"
#include "bench/machine_profile.h"
#include "core/error.h"
#include "core/files.h"
#include "core/text.h"
#include "core/timer.h"
#include "hw/nvml.h"
#include "plan/catalog.h"
#include "plan/memory.h"
#include "plan/targets.h"
#include "profile/recorder.h"
#include "train/checkpoint.h"
#include "train/detail.h"
#include "train/gpu_feed.h"

namespace dlperf::train::detail {

namespace {
using cuda::ok;
using nlohmann::json;

cuda::Precision precision_of(const std::string& p) {
  if (p == "tf32") return cuda::Precision::tf32;
  if (p == "bf16") return cuda::Precision::bf16;
  if (p == "fp16") return cuda::Precision::fp16;
  return cuda::Precision::fp32;
}

// Device bytes this run needs before cuDNN's workspaces, and the largest batch size that fits in
// 90% of `free_bytes` (the rest for cuDNN's workspaces).
struct GpuFit {
  double need = 0;
  int64_t largest_batch = 0;
};
GpuFit gpu_fit(const TrainConfig& cfg, const nn::Graph& graph, const data::DataPair& d, double free_bytes) {
  auto total = [&](const nn::Graph& g) {
    return plan::gpu_engine_memory(g, cfg.optimizer.name, cfg.precision, cfg.layout).total() +
           plan::gpu_feed_bytes(g, {.data_on_device = cfg.data_on_device, .pin_memory = cfg.pin_memory,
                                    .train_images = d.train.size(), .test_images = d.test.size()});
  };
  GpuFit f;
  f.need = total(graph);
  f.largest_batch = plan::largest_batch_within(nn::load_model(cfg.model), {d.train.channels, d.train.height, d.train.width},
                                               d.train.classes, cfg.batch - 1, 0.9 * free_bytes, total);
  return f;
}

// dlperf plan's step time for this GPU run, as `plan --against` predicts it (the catalog's entry
// for this GPU, the run's precision and layout: plan/gpu_step.h); 0 for a GPU the catalog lacks.
double planned_gpu_step_s(const TrainConfig& cfg, const nn::Graph& g, const cuda::GpuInfo& info) {
  const std::string id = plan::catalog_id_for_gpu(info.name);
  if (id.empty()) return 0;
  plan::JobSpec job;
  job.graph = &g, job.global_batch = g.batch(), job.precision = cfg.precision, job.optimizer = cfg.optimizer.name;
  job.gpu_layout = cfg.layout;
  const plan::Catalog catalog = plan::load_catalog();
  const plan::TargetEstimate e = plan::estimate(job, catalog.find(id), 0, 1);
  return e.unsupported.empty() ? e.compute_s : 0;
}

// The profile's ceilings on a GPU, the best known: measured by `dlperf bench all` on this GPU
// model (runs/machine-profile.json), else the catalog's datasheet figures for the precision where
// the GPU is known, else peak FP32 from SMs x FP32 lanes x clock and bandwidth from the memory
// clock and bus width.
plan::CpuCeilings gpu_ceilings(const cuda::GpuInfo& info, const std::string& precision) {
  plan::CpuCeilings c;
  if (const bench::GpuCeilings m = bench::load_gpu_ceilings(info.name); m.peak(precision) > 0) {
    c.peak_gflops = m.peak(precision);
    c.dram_gbps = m.hbm_gbps();
    c.source = fmt::format("measured by 'dlperf bench all{}' ({}): {} GEMM peak{}", m.quick ? " --quick" : "", bench::kMachineProfile,
                           precision, c.dram_gbps > 0 ? fmt::format(", device memory {}", m.bandwidth_kernel) : "");
  }
  if (c.peak_gflops <= 0)
    if (const std::string id = plan::catalog_id_for_gpu(info.name); !id.empty()) {
      const plan::Catalog catalog = plan::load_catalog();
      const plan::Device& d = catalog.find(id);
      c.peak_gflops = 1e3 * d.peak_tflops(precision);
      if (c.dram_gbps <= 0) c.dram_gbps = d.bandwidth_gbps;
      c.source = fmt::format("{} datasheet, {} (catalog entry {})", d.name, precision, id);
    }
  if (c.peak_gflops <= 0) {
    const int lanes = info.cc_major == 8 && info.cc_minor == 0 ? 64 : info.cc_major >= 8 ? 128 : 64;
    c.peak_gflops = double(info.sm_count) * lanes * 2 * info.clock_mhz / 1e3;
    c.source = fmt::format("{}: fp32 peak estimated as {} SMs x {} lanes x 2 x {:.0f} MHz", info.name, info.sm_count, lanes, info.clock_mhz);
  }
  if (c.dram_gbps <= 0) c.dram_gbps = info.peak_bandwidth_gbps;
  return c;
}

// What the host knew of a profiled step when it queued it: the step's index in the recording
// and when its data wait ended (recorder time).
struct HostStep {
  int64_t step = 0;
  double wait_end = 0;
};

// Puts a profiled step on the GPU track (device times from its events, placed on the recorder's
// clock by `origin`, the recorder time of the profile's time origin): the step from when the GPU
// reached it to its last kernel; within it the time the GPU waited for the step's data (the part
// of the host's data wait after the GPU reached the step), and each span.
void add_gpu_step(const cuda::ProfiledStep& p, const HostStep& h, double origin) {
  profile::Recorder& rec = profile::Recorder::get();
  const double start = origin + p.start;
  double end = start, first = std::numeric_limits<double>::infinity();
  for (const auto& s : p.spans) end = std::max(end, origin + s.t1), first = std::min(first, origin + s.t0);
  auto event = [&](std::string name, std::string op, profile::Phase phase, int node, double t0, double t1, int depth) {
    profile::Event e;
    e.name = std::move(name), e.op = std::move(op), e.phase = phase, e.node = node;
    e.t0 = t0, e.t1 = t1, e.track = profile::kGpuTrack, e.depth = depth, e.step = h.step;
    rec.add(std::move(e));
  };
  event("step", "", profile::Phase::step, -1, start, end, 0);
  const double waited = std::clamp(h.wait_end, start, std::min(first, end));
  if (waited > start) event("data wait", "", profile::Phase::data, -1, start, waited, 1);
  for (const auto& s : p.spans) event(s.name, s.op, s.phase, s.node, origin + s.t0, origin + s.t1, 1);
}

[[noreturn]] void out_of_memory(const TrainConfig& cfg, const nn::Graph& graph, const data::DataPair& d, const std::string& what,
                                int device) {
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const double usable = double(free_b) + double(cuda::device_allocator(device).stats().current_total);
  const GpuFit f = gpu_fit(cfg, graph, d, usable);
  throw Error(fmt::format("model {} at batch size {} does not fit on GPU {} ({}): it needs about {} plus cuDNN workspaces, "
                          "{} of {} is free",
                          graph.model, cfg.batch, device, what, format_bytes(f.need), format_bytes(usable), format_bytes(double(total_b))),
              f.largest_batch >= 1 ? fmt::format("use --batch-size {} or less{}", f.largest_batch,
                                                 cfg.data_on_device ? ", or drop --data-on-device" : "")
                                   : "use a smaller model or a GPU with more memory");
}


// dlperf profile's window on the GPU: starts and stops the recording at the window's edges, and
// puts each recorded step's clock stamps on the GPU track as they are read, two steps after the
// step was queued (cuda::Network::begin_profile).
class GpuProfile {
 public:
  /// `first_step`: the run's step count when this run starts training (the window counts from it).
  GpuProfile(const TrainConfig& cfg, int64_t per_epoch, int64_t epochs_to_train, int64_t first_step, cuda::Network& net,
             CachingAllocator& mem)
      : window_(cfg, per_epoch, epochs_to_train), first_step_(first_step), net_(net), mem_(mem) {}
  bool done() const { return done_; }
  /// Said with the run's notes: the window is cut short by the end of its epoch.
  const std::string& note() const { return window_.note; }
  /// Whether the window is open (its steps recorded or, with --profile-every, some skipped).
  bool recording() const { return profile::Recorder::get().started(); }
  /// Whether the step about to run is recorded: its spans timed with stamps of the GPU's clock.
  bool records_step() const { return profile::Recorder::get().on(); }

  /// Before the run's step `step`: starts or stops the recording where the window starts or ends,
  /// and pauses it for the window's steps --profile-every skips. Returns true when it stopped here.
  bool before_step(int64_t step) {
    if (done_) return false;
    profile::Recorder& rec = profile::Recorder::get();
    const int64_t k = step - first_step_;
    if (window_.starts_at(k)) start();
    if (rec.started() && window_.ends_at(k)) {
      stop();
      return true;
    }
    if (rec.started()) window_.enter_step(rec, k);
    return false;
  }
  /// Bracket a recorded step; `wait_end`: when its data wait ended (recorder time; none: -inf).
  void begin_step() { net_.begin_profiled_step(); }
  void end_step(double wait_end) {
    net_.end_profiled_step();
    queued_.push_back({profile::Recorder::get().step(), wait_end});
    add_read_steps();
  }
  /// Ends the recording: at the window's end, or at the end of the epoch it started in. A
  /// recording a signal cut short (`complete` false) is dropped: done() stays false.
  void stop(bool complete = true) {
    net_.end_profile();
    add_read_steps();
    profile::Recorder::get().stop();
    mem_.set_observer(nullptr);
    done_ = complete;
  }

 private:
  void start() {
    ok(cudaStreamSynchronize(net_.stream()), "starting the profile");
    profile::Recorder& rec = profile::Recorder::get();
    rec.start();
    HostAllocator::instance().set_observer(nullptr);  // the timeline is the GPU's memory
    mem_.set_observer([](const MemoryStats& m) { profile::Recorder::get().sample_memory(m); });
    rec.sample_memory(mem_.stats());
    net_.begin_profile();
    origin_ = rec.now();
  }
  void add_read_steps() {
    for (const cuda::ProfiledStep& p : net_.take_profiled()) {
      add_gpu_step(p, queued_.front(), origin_);
      queued_.pop_front();
    }
  }
  ProfileWindow window_;
  int64_t first_step_;
  cuda::Network& net_;
  CachingAllocator& mem_;
  std::deque<HostStep> queued_;  ///< what the host knew of each recorded step until its events are read
  double origin_ = 0;            ///< recorder time of the profile's time origin
  bool done_ = false;
};

std::string pci_bus_id(int device) {
  char bus[32] = {};
  cudaDeviceGetPCIBusId(bus, sizeof bus, device);
  return bus;
}

// Everything one GPU training run holds, in the order it is built (as the CPU loop's Run).
struct GpuRun {
  const TrainConfig& cfg;
  const int device;
  data::DataPair data;
  nn::Graph graph;
  std::vector<float> mean, stddev;  ///< the training set's per-channel normalization
  CachingAllocator& mem;
  cuda::GpuInfo info;
  cuda::NetworkOptions opts;
  std::unique_ptr<cuda::Network> net;
  std::unique_ptr<DeviceDataset> train_dev, test_dev;        ///< --data-on-device
  std::unique_ptr<PinnedUploader> pinned;                    ///< --pin-memory on
  std::unique_ptr<data::Loader> train_loader, test_loader;  ///< the data from the host
  std::optional<hw::GpuPowerMeter> power;
  int64_t per_epoch = 0, total_steps = 0;
  int64_t step = 0;  ///< steps trained, resumed ones included (the schedule's clock)
  std::optional<GpuProfile> profile;
  nlohmann::json resumed_config = nlohmann::json::object();  ///< --resume: the settings the checkpoint was made with

  /// Checks that the run can go (precision, memory) before it allocates, then builds the network
  /// and the feed; out of memory is reported with the largest batch size that fits.
  GpuRun(const TrainConfig& c, int dev, data::DataPair d, nn::Graph g)
      : cfg(c), device(dev), data(std::move(d)), graph(std::move(g)), mem(cuda::device_allocator(dev)) {
    check(!cfg.layer_times, "--layer-times does not run on the GPU", "use --profile there (per-layer time on the device, from the GPU's clock)");
    data::channel_stats(data.train, mean, stddev);
    check(data.train.size() >= cfg.batch, fmt::format("--batch-size {} is larger than the {} training images", cfg.batch, data.train.size()),
          "use a smaller --batch-size or more data");
    mem.trim();
    mem.reset_peaks();
    ok(cudaSetDevice(device), "cudaSetDevice");
    info = cuda::gpu_info(device);
    check(cuda::supported(precision_of(cfg.precision), info.cc_major, info.cc_minor),
          fmt::format("--precision {} needs tensor cores this GPU ({}, compute capability {}.{}) lacks", cfg.precision, info.name,
                      info.cc_major, info.cc_minor),
          "tf32 and bf16 need compute capability 8.0 (Ampere) or later, fp16 7.0; use --precision fp32");
    {  // refuse a run that cannot fit before allocating anything
      size_t free_b = 0, total_b = 0;
      ok(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
      if (gpu_fit(cfg, graph, data, double(free_b)).need > 0.95 * double(free_b))
        out_of_memory(cfg, graph, data, "checked before starting", device);
    }
    opts.precision = precision_of(cfg.precision);
    opts.optimizer = cfg.optimizer.name;
    opts.graphs = cfg.graphs;
    opts.layout = cuda::resolve_layout(cfg.layout, cfg.precision);
    opts.deterministic = cfg.deterministic;
    opts.conv_workspace = size_t(cfg.conv_workspace_mb) << 20;
    opts.small_conv = cuda::parse_small_conv(cfg.small_conv);
    opts.input_as_stored = cfg.data_on_device;  // DeviceDataset::loader writes the stored input
    // The host's compute: the thread driving the GPU.
    const data::LoaderConfig train_lc = loader_config(cfg, true, 1), test_lc = loader_config(cfg, false, 1);
    try {
      net = std::make_unique<cuda::Network>(graph, cfg.seed, device, opts);
      if (cfg.data_on_device) {
        train_dev = std::make_unique<DeviceDataset>(data.train, train_lc, mean, stddev, device);
        test_dev = std::make_unique<DeviceDataset>(data.test, test_lc, mean, stddev, device);
      } else if (cfg.pin_memory) {
        pinned = std::make_unique<PinnedUploader>(*net, device);
      }
    } catch (const Error& e) {
      if (std::string(e.what()).find("out of GPU") == std::string::npos) throw;
      out_of_memory(cfg, graph, data, "allocation failed", device);
    }
    if (!cfg.data_on_device) {  // the host loaders run only when the data is not on the GPU
      train_loader = std::make_unique<data::Loader>(data.train, train_lc, mean, stddev);
      test_loader = std::make_unique<data::Loader>(data.test, test_lc, mean, stddev);
    }
    power.emplace(pci_bus_id(device));
    per_epoch = cfg.data_on_device ? train_dev->batches() : train_loader->batches_per_epoch();
    total_steps = per_epoch * cfg.epochs;
  }

  std::string feed() const { return cfg.data_on_device ? "data on the GPU" : cfg.pin_memory ? "pinned copies" : "pageable copies"; }

  /// Restores weights, optimizer state and history from the checkpoint; returns the epochs done.
  /// A missing, damaged or mismatched checkpoint is refused (before anything is printed).
  int64_t resume(std::vector<EpochStats>& history) {
    const Checkpoint ck = load_checkpoint(cfg.checkpoint_dir);
    check_checkpoint_matches(ck, cfg.checkpoint_dir, graph.model, cfg.batch, graph.input, cfg.optimizer.name);
    net->restore([&](const std::string& name, size_t count) -> const std::vector<float>& { return checkpoint_tensor(ck, name, count); },
                 cfg.optimizer, ck.meta.at("optimizer_steps").get<int64_t>());
    resumed_config = ck.meta.value("config", nlohmann::json::object());
    for (const auto& e : ck.meta.at("history")) history.push_back(epoch_from_json(e));
    return ck.meta.at("epoch_done").get<int64_t>();
  }

  /// The run's header (as the CPU loop's), and the epochs a resumed run has done.
  void print_header(int64_t start_epoch, const std::vector<EpochStats>& history) const {
    if (cfg.resume) std::fputs(resumed_line(cfg, start_epoch, resumed_config).c_str(), stdout);
    std::fputs(model_line(graph, data).c_str(), stdout);
    const std::string workers =
        cfg.data_on_device ? "" : fmt::format(" ({})", counted(cfg.workers, "loader worker"));
    std::printf("device cuda:%d (%s, %d SMs, %s), %s %s, batch %lld, %s, %s%s, CUDA graphs %s, seed %llu\n\n%s", device,
                info.name.c_str(), info.sm_count, format_bytes(info.memory_bytes).c_str(), cfg.precision.c_str(),
                cuda::to_string(opts.layout), (long long)cfg.batch, recipe_text(cfg, data.train).c_str(), feed().c_str(),
                workers.c_str(), cfg.graphs ? "on" : "off", (unsigned long long)cfg.seed, kEpochHeader);
    for (const auto& e : history) std::fputs(epoch_row(e).c_str(), stdout);
    std::fflush(stdout);
  }

  Diverged diverged(double loss, int64_t epoch, int64_t upto) const {
    return diverged_run(cfg, loss, fmt::format("during epoch {} (by step {} of {})", epoch + 1, upto, per_epoch), epoch);
  }

  void upload(const data::Batch& b) {
    if (pinned) pinned->upload(b);
    else upload_pageable(*net, b);
  }

  /// One epoch: its training steps (the host never waits for them; the loss and accuracy are
  /// summed on the GPU and read at the end, and when the progress bar redraws), then evaluation.
  /// None when a signal stopped it (core/interrupt.h).
  std::optional<EpochStats> epoch(int64_t epoch, BarInfo bar) {
    mem.reset_peaks();
    EpochStats st;
    st.epoch = epoch + 1;
    Progress progress(bar, epoch + 1, cfg.epochs, per_epoch);
    net->tally(true);
    const double t_start = now_s();
    const hw::CpuTimes cpu_start = hw::cpu_times_now();
    if (cfg.data_on_device) train_dev->set_order(epoch, net->stream());
    else train_loader->start_epoch(epoch);
    const std::function<void(cudaStream_t)> gather = cfg.data_on_device ? train_dev->loader(*net, -1) : nullptr;
    int64_t seen = 0;
    for (int64_t i = 0; i < per_epoch; ++i) {
      if (step == cfg.sigint_at_step) std::raise(SIGINT);
      if (stop_signal() != 0) {
        if (profile && profile->recording()) profile->stop(false);
        net->tally(true);  // waits for the queued steps
        progress.clear();
        return std::nullopt;
      }
      if (profile && profile->before_step(step) && cfg.profile_only) break;
      const bool timing = profile && profile->records_step();
      const profile::Scope step_scope("step", profile::Phase::step);
      if (timing) profile->begin_step();
      double wait_end = -std::numeric_limits<double>::infinity();  // none when the data is on the GPU
      int64_t valid = cfg.batch;
      if (!cfg.data_on_device) {
        const double t0 = now_s();
        const data::Batch* b = nullptr;
        {
          const profile::Scope wait("data wait", profile::Phase::data);
          b = train_loader->next();
        }
        st.data_wait_s += now_s() - t0;
        if (!b) break;
        if (timing) wait_end = profile::Recorder::get().now();
        valid = b->valid;
        const profile::Scope copy("input copy", profile::Phase::copy);
        upload(*b);
      }
      st.lr = nn::learning_rate(cfg.schedule, cfg.lr, step, total_steps, per_epoch);
      net->train_step(gather, valid, cfg.label_smoothing, cfg.optimizer, {st.lr, uint64_t(step), i, epoch});
      if (timing) profile->end_step(wait_end);
      ++step;
      seen += valid;
      if (progress.due()) {  // reading the tally waits for the GPU: only when the bar redraws
        const cuda::GpuTally t = net->tally(false);
        if (!std::isfinite(t.loss_sum)) throw diverged(t.loss_sum, epoch, i + 1);
        progress.update(i + 1, seen, t.loss_sum / double(seen));
      }
    }
    if (profile && profile->recording()) profile->stop();  // the epoch ended inside the recording window
    const cuda::GpuTally t = net->tally(true);              // waits for the epoch's last step
    st.train_s = now_s() - t_start;
    st.host_load = hw::host_load(cpu_start, hw::cpu_times_now());
    st.compute_s = st.train_s - st.data_wait_s;
    if (!std::isfinite(t.loss_sum)) throw diverged(t.loss_sum, epoch, per_epoch);
    progress.clear();
    EpochTally tally;
    tally.loss_sum = t.loss_sum;
    tally.correct = t.correct;
    tally.seen = seen;
    tally.finish(st);
    const double e0 = now_s();
    if ((cfg.profile_only && profiled()) || !evaluates_after(cfg, epoch)) st.evaluated = false;  // profile stops after its steps; --eval-every
    else evaluate(st);
    st.eval_s = st.evaluated ? now_s() - e0 : 0.0;
    // The training loop's energy, once NVML's counter has moved past its end (up to ~0.1 s after
    // it; evaluation usually covers that), outside the timed windows.
    if (const auto e = power->energy(t_start, t_start + st.train_s)) {
      st.energy_j = e->joules;
      st.energy_low_j = e->low;
      st.energy_high_j = e->high;
    }
    record_peaks(st, mem.stats());
    return st;
  }

  /// Whether the profile's window has been recorded (always, when not profiling).
  bool profiled() const { return !profile || profile->done(); }

  void evaluate(EpochStats& st) {
    if (cfg.data_on_device) {
      for (int64_t i = 0; i < test_dev->batches(); ++i) net->eval_step(test_dev->loader(*net, i), test_dev->valid(i));
    } else {
      test_loader->start_epoch(0);
      while (const data::Batch* b = test_loader->next()) {
        upload(*b);
        net->eval_step(nullptr, b->valid);
      }
    }
    const cuda::GpuTally e = net->tally(true);
    st.test_loss = e.loss_sum / double(data.test.size());
    st.test_acc = double(e.correct) / double(data.test.size());
  }

  void save(int64_t epochs_done, const std::vector<EpochStats>& history) {
    Checkpoint ck;
    ck.meta = checkpoint_meta(cfg, graph, epochs_done, net->updates_done(), history);
    for (auto& [name, v] : net->snapshot(cfg.optimizer)) ck.tensors[name] = std::move(v);
    save_checkpoint(cfg.checkpoint_dir, ck);
  }

  /// Where the epochs' energy came from, and how finely.
  std::string energy_source() const {
    if (!power->available()) return power->why_not();
    const double period = power->update_period_s();
    return fmt::format("NVML board energy counter (the whole GPU board){}; read every 5 ms and interpolated between its updates, "
                       "with the range they allow in energy_j_range",
                       period > 0 ? fmt::format(", which moved every {:.0f} ms", period * 1e3) : "");
  }

  /// The run record: the CPU loop's, plus the GPU, how its steps ran and fp16's loss scaling.
  json record(const std::vector<EpochStats>& epochs) const {
    json r = build_record(cfg, graph, data, epochs, 0, energy_source());
    r["device"] = cuda::to_json(info);
    r["config"]["device_used"] = fmt::format("cuda:{}", device);
    r["gpu_step"] = {{"layout", cuda::to_string(opts.layout)},
                     {"cuda_graph", net->graphed()},
                     {"why_not_graph", net->graphed() ? "" : net->why_not_graphed()},
                     {"feed", feed()},
                     {"conv_workspace_bytes", net->conv_workspace_bytes()}};
    if (cfg.profile) r["gpu_step"]["profiled_steps"] = net->profiled_steps();
    json algorithms = json::object();  // which cuDNN kernels ran: a timed search may pick otherwise next time
    for (const auto& [layer, a] : net->conv_algorithms()) algorithms[layer] = a;
    r["gpu_step"]["conv_algorithms"] = algorithms;
    json gemms = json::object();  // likewise for cuBLASLt, where timing overturned its heuristic
    for (const auto& [layer, a] : net->gemm_choices()) gemms[layer] = a;
    r["gpu_step"]["gemm_algorithms"] = gemms;
    const cuda::GraphNodes& nodes = net->step_nodes();
    if (net->graphed())
      r["gpu_step"]["graph_nodes"] = {{"kernels", nodes.kernels}, {"copies", nodes.copies}, {"memsets", nodes.memsets}, {"other", nodes.other}};
    if (cfg.precision == "fp16" && r.contains("summary")) {  // dynamic loss scaling's account
      const cuda::LossScale ls = net->loss_scale();
      r["summary"]["loss_scale_skips"] = ls.skipped;
      r["summary"]["final_loss_scale"] = ls.scale;
    }
    return r;
  }

  /// What the run did, after its epoch table: fp16's skipped steps, the step's graph, the totals.
  void print_summary(const TrainResult& result) const {
    if (cfg.precision == "fp16") {
      const cuda::LossScale ls = net->loss_scale();
      std::printf("\nfp16 loss scaling: %lld of %lld steps skipped for overflow, final scale %g\n", (long long)ls.skipped,
                  (long long)step, double(ls.scale));
    }
    if (cfg.graphs && !net->graphed()) std::printf("\nnote: steps ran eagerly: %s\n", net->why_not_graphed().c_str());
    if (net->graphed()) {
      const cuda::GraphNodes& nodes = net->step_nodes();
      std::printf("\nCUDA graph: a step is %lld kernels, %lld copies and %lld memsets\n", (long long)nodes.kernels,
                  (long long)nodes.copies, (long long)nodes.memsets);
    }
    if (result.record.contains("summary")) {
      const json& s = result.record["summary"];
      std::printf("\ndone: %s in %s of training (%.0f img/s), %s, peak GPU memory %s\n",
                  counted((long long)result.epochs.size(), "epoch").c_str(), format_seconds(s["train_s"].get<double>()).c_str(), s["images_per_s"].get<double>(),
                  final_accuracy(s).c_str(), format_bytes(s["peak_bytes"].get<double>()).c_str());
      print_host_load_note(s);
      if (const std::string rose = loss_rise_note(cfg, result.epochs); !rose.empty()) std::printf("note: %s\n", rose.c_str());
    }
  }
};

}  // namespace

TrainResult train_on_gpu(const TrainConfig& cfg, int device, data::DataPair d, nn::Graph graph, std::vector<std::string> notes) {
  GpuRun run(cfg, device, std::move(d), std::move(graph));
  const bool say = !cfg.quiet;
  TrainResult result;
  const int64_t start_epoch = cfg.resume ? run.resume(result.epochs) : 0;
  const size_t resumed_epochs = result.epochs.size();
  run.step = start_epoch * run.per_epoch;
  // Before the header, so a profile window past the run's end is refused before anything prints.
  if (cfg.profile) {
    run.profile.emplace(cfg, run.per_epoch, cfg.epochs - start_epoch, run.step, *run.net, run.mem);
    if (!run.profile->note().empty()) notes.push_back(run.profile->note());
  }
  if (say) {
    print_notes(notes);
    run.print_header(start_epoch, result.epochs);
  }
  const int64_t stopped_in = run_epochs(cfg, run, start_epoch, result.epochs);  // the epoch a signal stopped, or 0
  result.record = run.record(result.epochs);
  if (stopped_in > 0) result.record["stopped"] = stopped_json(cfg, stopped_in);
  if (say) run.print_summary(result);
  if (cfg.profile && (stopped_in == 0 || run.profiled())) {
    const cuda::GraphNodes& nodes = run.net->step_nodes();
    finish_profile(cfg, run.graph, gpu_ceilings(run.info, cfg.precision), run.mem.stats(), result, run.net->graphed() ? nodes.kernels : 0,
                   planned_gpu_step_s(cfg, run.graph, run.info), run.net->clock_tick_ns());
  }
  if (!cfg.runs_dir.empty() && keeps_record(result, resumed_epochs)) {
    result.record_path = write_record(result.record, cfg.runs_dir,
                                      fmt::format("{}-train-{}-{}-b{}-cuda", file_timestamp(), run.graph.model, run.data.train.name, cfg.batch));
    if (say) std::printf("run record: %s\n", result.record_path.c_str());
  }
  if (stopped_in > 0) throw stopped_run(cfg, stopped_in, result);
  result.weights = run.net->parameters();
  return result;
}

}  // namespace dlperf::train::detail

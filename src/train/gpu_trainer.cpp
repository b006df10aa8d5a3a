// dlperf train --device cuda[:N]: the training loop on one GPU, over cuda::Network (fp32). The
// loaders, the epoch table, the run record and the schedule are the CPU loop's; the batch goes to
// the GPU with one copy per step, and the GPU's power comes from NVML.
//
// First version: fp32, pageable copies, no CUDA graphs, no checkpoints or profiling on the GPU
// yet (each is refused with a message).
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

#include "backend/cuda/check.h"
#include "backend/cuda/network.h"
#include "backend/cuda/runtime.h"
#include "core/error.h"
#include "core/timer.h"
#include "hw/nvml.h"
#include "train/detail.h"

namespace dlperf::train::detail {

namespace {
using cuda::ok;

void upload(cuda::Network& net, const data::Batch& b) {
  ok(cudaMemcpyAsync(net.input(), b.data(), b.images->bytes(), cudaMemcpyHostToDevice, net.stream()), "copying the batch");
  ok(cudaMemcpyAsync(net.labels(), b.labels.data(), b.labels.size() * sizeof(int32_t), cudaMemcpyHostToDevice, net.stream()),
     "copying the labels");
}
}  // namespace

TrainResult train_on_gpu(const TrainConfig& cfg, int device, data::DataPair d, nn::Graph graph) {
  check(cfg.checkpoint_dir.empty() && !cfg.resume, "checkpoints are not written on the GPU yet", "train with --device cpu to checkpoint");
  check(!cfg.layer_times && !cfg.profile, "--layer-times and --profile do not run on the GPU yet", "use --device cpu for them");
  const bool say = !cfg.quiet;
  std::vector<float> mean, stddev;
  data::channel_stats(d.train, mean, stddev);
  data::Loader train_loader(d.train, loader_config(cfg, true), mean, stddev);
  data::Loader test_loader(d.test, loader_config(cfg, false), mean, stddev);
  CachingAllocator& mem = cuda::device_allocator(device);
  mem.trim();
  mem.reset_peaks();
  cuda::Network net(graph, cfg.seed, device);
  const cuda::GpuInfo info = cuda::gpu_info(device);
  char bus[32] = {};
  cudaDeviceGetPCIBusId(bus, sizeof bus, device);
  hw::GpuPowerMeter power(bus);
  const int64_t per_epoch = train_loader.batches_per_epoch(), total_steps = per_epoch * cfg.epochs;
  if (say) {
    std::printf("dlperf train: model %s (%.3fM parameters) on %s, %lld train / %lld test images\n", graph.model.c_str(),
                double(graph.param_count()) / 1e6, d.train.name.c_str(), (long long)d.train.size(), (long long)d.test.size());
    std::printf("device cuda:%d (%s, %d SMs, %s), fp32, batch %lld, %s lr %g %s, %d loader workers, seed %llu\n\n%s", device,
                info.name.c_str(), info.sm_count, format_bytes(info.memory_bytes).c_str(), (long long)cfg.batch,
                cfg.optimizer.name.c_str(), cfg.lr, cfg.schedule.name.c_str(), cfg.workers, (unsigned long long)cfg.seed, kEpochHeader);
    std::fflush(stdout);
  }
  TrainResult result;
  int64_t step = 0;
  const bool bar = cfg.progress && isatty(STDERR_FILENO);
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    if (cfg.stop_after_epochs > 0 && epoch >= cfg.stop_after_epochs) break;
    mem.reset_peaks();
    EpochStats st;
    st.epoch = epoch + 1;
    Progress progress(bar, epoch + 1, cfg.epochs, per_epoch);
    train_loader.start_epoch(epoch);
    EpochTally tally;
    const double t_start = now_s(), j_start = power.joules();
    for (int64_t i = 0;; ++i) {
      const double t0 = now_s();
      const data::Batch* b = train_loader.next();
      const double t1 = now_s();
      if (!b) break;
      st.data_wait_s += t1 - t0;
      upload(net, *b);
      net.forward(true, uint64_t(step));
      const cuda::GpuLoss r = net.loss(b->valid, cfg.label_smoothing, true);
      if (!std::isfinite(r.loss))
        throw Error(fmt::format("training diverged: the loss is {} at epoch {}, step {}", r.loss, epoch + 1, i + 1),
                    fmt::format("lower --lr (now {})", cfg.lr));
      net.backward();
      st.lr = nn::learning_rate(cfg.schedule, cfg.lr, step, total_steps, per_epoch);
      net.step(cfg.optimizer, st.lr);
      ++step;
      st.compute_s += now_s() - t1;
      tally.add(r.loss, r.correct, b->valid);
      progress.update(i + 1, tally.seen, tally.loss_sum / double(tally.seen));
    }
    ok(cudaStreamSynchronize(net.stream()), "the epoch's last step");
    st.train_s = now_s() - t_start;
    if (power.available()) st.energy_j = power.joules() - j_start;
    progress.clear();
    tally.finish(st);
    const double e0 = now_s();
    test_loader.start_epoch(0);
    double test_loss = 0;
    int64_t test_correct = 0;
    while (const data::Batch* b = test_loader.next()) {
      upload(net, *b);
      net.forward(false);
      const cuda::GpuLoss r = net.loss(b->valid, 0.0, false);
      test_loss += r.loss * double(b->valid);
      test_correct += r.correct;
    }
    st.eval_s = now_s() - e0;
    st.test_loss = test_loss / double(d.test.size());
    st.test_acc = double(test_correct) / double(d.test.size());
    record_peaks(st, mem.stats());
    result.epochs.push_back(st);
    if (say) {
      std::fputs(epoch_row(st).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  result.record = build_record(cfg, graph, d, result.epochs, 0,
                               power.available() ? "NVML board energy counter (the whole GPU board)" : power.why_not());
  result.record["device"] = cuda::to_json(info);
  result.record["config"]["device_used"] = fmt::format("cuda:{}", device);
  if (say && result.record.contains("summary"))
    std::printf("\ndone: %zu epochs in %.1f s of training (%.0f img/s), final test accuracy %.2f%%, peak GPU memory %s\n",
                result.epochs.size(), result.record["summary"]["train_s"].get<double>(),
                result.record["summary"]["images_per_s"].get<double>(), 100 * result.record["summary"]["final_test_acc"].get<double>(),
                format_bytes(result.record["summary"]["peak_bytes"].get<double>()).c_str());
  if (!cfg.runs_dir.empty()) {
    result.record_path = write_record(result.record, cfg.runs_dir,
                                      fmt::format("{}-train-{}-{}-b{}-cuda", timestamp(), graph.model, d.train.name, cfg.batch));
    if (say) std::printf("run record: %s\n", result.record_path.c_str());
  }
  result.weights = net.parameters();
  return result;
}

}  // namespace dlperf::train::detail

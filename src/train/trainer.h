// The training loop: epochs of (load -> forward -> loss -> backward -> update), evaluation,
// timing split into data wait and compute, memory peaks, checkpoints, and the run record.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "hw/host_load.h"
#include "nn/graph.h"
#include "nn/optimizer.h"

namespace dlperf::train {

/// The largest --batch-size a run takes (train, profile, and each of the lab's runs).
constexpr int64_t kMaxBatch = 65536;
/// The most --epochs a run takes (validate() says why).
constexpr int64_t kMaxEpochs = 1000000;

struct TrainConfig {
  std::string model = "medium";
  std::string data = "fashion-mnist";
  std::string device = "auto";  ///< auto (a GPU when there is one), cpu, cuda, cuda:N
  std::string precision = "fp32";  ///< fp32 | tf32 | bf16 | fp16 (docs/gpu.md: which runs where)
  // GPU speed machinery (docs/gpu.md); ignored on the CPU.
  bool graphs = true;          ///< capture the training step in a CUDA graph and replay it
  bool pin_memory = true;      ///< batches go through pinned buffers on a copy stream, overlapping compute
  bool data_on_device = false; ///< the whole dataset on the GPU; batches gathered there
  std::string layout = "auto"; ///< auto | nchw | nhwc: how the GPU stores activations (auto: NHWC for bf16 and fp16)
  bool deterministic = false;  ///< only cuDNN algorithms that give the same bits every run (the CPU engine always does)
  std::string small_conv = "auto";  ///< auto | own | cudnn: who convolves inputs of 1 or 3 channels (cuda::SmallConv)
  int64_t conv_workspace_mb = 4096;  ///< the most workspace a convolution's cuDNN algorithms may use (cuda::kDefaultConvWorkspace)
  int64_t epochs = 5;
  int64_t batch = 64;
  double lr = 0.1;
  nn::OptimizerConfig optimizer;
  nn::ScheduleConfig schedule;
  double label_smoothing = 0.0;
  int64_t eval_every = 1;    ///< measure test accuracy after every Nth epoch, and always after the last
  bool augment = false;      ///< off: in 5-epoch runs random crops cost accuracy (docs/benchmarks.md)
  int64_t crop_pad = 2;      ///< with augment: pixels of padding for the random crop; 0 = flips only
  int workers = 1;
  int threads = 0;            ///< 0 = all cores this process may use
  bool flush_denormals = true;  ///< CPU threads flush denormal floats to zero (hw::ScopedDenormals); --keep-denormals: false
  uint64_t seed = 42;
  int64_t train_limit = 0;    ///< use only the first N training images (0 = all)
  int64_t test_limit = 0;
  std::string checkpoint_dir; ///< empty = no checkpoints
  bool resume = false;
  bool overwrite_checkpoint = false;  ///< start afresh where checkpoint_dir holds another run's checkpoint
  std::string runs_dir = "runs";  ///< empty = no run record
  bool progress = true;       ///< progress bar when stderr is a terminal
  bool layer_times = false;   ///< time every layer (adds a clock read per layer)
  int64_t stop_after_epochs = 0;  ///< tests: stop early as if interrupted (0 = never)
  int64_t sigint_at_step = -1;    ///< tests: raise SIGINT before the run's step N (from 0, over all epochs), as a Ctrl-C then would
  // Profiling (docs/profile.md): record steps [profile_skip, profile_skip + profile_steps),
  // counted from the first step this run trains (in any epoch), then report them.
  bool profile = false;
  int64_t profile_skip = 5;
  int64_t profile_steps = 20;   ///< 0 = to the end of the epoch the recording starts in
  int64_t profile_every = 1;    ///< of the window's steps, record the first and every Nth after it
  bool profile_only = false;    ///< dlperf profile: stop once the steps are recorded
  std::string profile_group = "layer";  ///< layer | op
  std::string profile_out;      ///< report files' path prefix; empty = in runs_dir
  bool trace_gzip = false;
  bool quiet = false;         ///< no console output (tests)
};

/// Whether the run measures test accuracy after its epoch `epoch` (0-based): every
/// --eval-every epochs, and after the last.
inline bool evaluates_after(const TrainConfig& c, int64_t epoch) { return (epoch + 1) % c.eval_every == 0 || epoch + 1 >= c.epochs; }

struct EpochStats {
  int64_t epoch = 0;          ///< 1-based
  double train_s = 0;         ///< the training loop only
  double eval_s = 0;
  double images_per_s = 0;
  double data_wait_s = 0;     ///< time the step waited for the loader
  double compute_s = 0;       ///< forward + loss + backward + update
  double train_loss = 0, train_acc = 0;
  double test_loss = 0, test_acc = 0;
  bool evaluated = true;      ///< false: not evaluated (--eval-every, or dlperf profile stopped first); test_* are not measured
  double lr = 0;              ///< at the end of the epoch
  double energy_j = -1;       ///< energy of the training loop: CPU packages (RAPL) or the GPU board (NVML); < 0 = not measured
  /// On a GPU, the range NVML's counter updates allow for it (hw/energy_trace.h); < 0 = none
  /// (RAPL's counters update every millisecond or so).
  double energy_low_j = -1, energy_high_j = -1;
  double peak_bytes = 0;      ///< tracked by the allocator, all categories at once
  std::vector<double> peak_by_category;
  hw::HostLoad host_load;     ///< what else ran on the CPUs during the training loop
};

struct TrainResult {
  std::vector<EpochStats> epochs;
  nlohmann::json record;
  std::string record_path;
  std::vector<float> weights;  ///< all parameters and buffers, plain, in order (tests)
  nlohmann::json profile;      ///< the profile report (dlperf profile / --profile)
  std::string trace_path;      ///< its Chrome trace
};

TrainResult train(const TrainConfig& cfg);

/// Thrown when the loss stops being finite; what() is the whole message, how() the part after
/// "training diverged: " ("the loss became NaN at epoch 1, step 4"), which the lab's rows show.
class Diverged : public Error {
 public:
  Diverged(const std::string& how, std::string hint) : Error("training diverged: " + how, std::move(hint)), how_(how) {}
  const std::string& how() const { return how_; }

 private:
  std::string how_;
};

/// Why `precision` cannot train on this machine's CPU, or "" when it can.
std::string cpu_precision_refusal(const std::string& precision);

/// Host memory a training run at the graph's batch size needs: plan::engine_memory, the engine's
/// buffers laid out by oneDNN (docs/plan.md; equal to the measured peak).
double estimate_train_bytes(const nn::Graph& g, const nn::OptimizerConfig& opt, int workers = 1,
                            const std::string& precision = "fp32");
/// Throws Error when the run (`g`, built from `spec`) needs more than 90% of `available` bytes,
/// naming the largest batch size that fits in that.
void check_fits(const nn::ModelSpec& spec, const nn::Graph& g, const nn::OptimizerConfig& opt, double available,
                int workers = 1, const std::string& precision = "fp32");

nlohmann::json to_json(const TrainConfig& c);
nlohmann::json to_json(const EpochStats& e);
EpochStats epoch_from_json(const nlohmann::json& j);

}  // namespace dlperf::train

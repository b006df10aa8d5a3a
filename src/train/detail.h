// Pieces the CPU and GPU training loops share: the progress bar, the epoch table's rows, the
// loaders' settings, run-record names and files. Internal to src/train.
#pragma once

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/text.h"
#include "core/timer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "nn/graph.h"
#include "plan/step_time.h"
#include "profile/recorder.h"
#include "profile/report.h"
#include "train/trainer.h"

namespace dlperf::train::detail {

/// What an epoch's progress bar shows besides its own steps: whether it is drawn at all, and the
/// seconds the epochs after it should take, from the last finished epoch (< 0: none finished yet,
/// so the bar projects them from its own epoch's rate).
struct BarInfo {
  bool on = false;
  double later_s = -1;
};

// A one-line progress bar on stderr, redrawn at most 5 times a second.
class Progress {
 public:
  /// `what`: "" for the training steps, "test" for the evaluation after them (which on a CPU
  /// can take seconds, and would otherwise sit on the training bar's "100%"). The training bar's
  /// eta is the run's: with epochs after this one, their time too.
  Progress(BarInfo bar, int64_t epoch, int64_t epochs, int64_t total, std::string what = "")
      : on_(bar.on), epoch_(epoch), epochs_(epochs), total_(total), later_s_(bar.later_s), start_(now_s()), what_(std::move(what)) {}
  /// `loss` NaN: none shown (the test pass sums its loss at the end).
  void update(int64_t done, int64_t images, double loss) {
    if (!on_) return;
    const double t = now_s();
    if (t - last_ < 0.2 && done < total_) return;
    last_ = t;
    const double rate = double(images) / std::max(t - start_, 1e-9);
    const double eta = done > 0 ? (t - start_) * double(total_ - done) / double(done) : 0;
    const int pct = int(100 * done / std::max<int64_t>(total_, 1));
    const std::string head = fmt::format("  epoch {}/{}{} ", epoch_, epochs_, what_.empty() ? "" : " " + what_);
    // The training bar's eta is the run's: this epoch's rest, and the epochs after it.
    double left = eta;
    if (what_.empty() && epochs_ > epoch_ && done > 0)
      left += later_s_ >= 0 ? later_s_ : double(epochs_ - epoch_) * (t - start_) * double(total_) / double(done);
    const std::string tail = fmt::format(" {:3d}%  {:6.0f} img/s{}  eta {:>7} ", pct, rate,
                                         std::isnan(loss) ? "" : fmt::format("  loss {:.4f}", loss),
                                         left < 1 ? "<1 s" : format_seconds(left));
    // The bar takes what the terminal's width leaves (10 to 30 marks): a line that wraps makes
    // each redraw start a new line instead of replacing the last.
    const int room = terminal_columns() - 1 - int(head.size() + tail.size()) - 2;
    const int width = std::clamp(room, 10, 30), filled = int(width * done / std::max<int64_t>(total_, 1));
    const std::string line = head + "[" + std::string(size_t(filled), '#') + std::string(size_t(width - filled), '.') + "]" + tail;
    std::fprintf(stderr, "\r%s", line.c_str());
    drawn_ = int(line.size());
    std::fflush(stderr);
  }
  /// Whether update() would redraw now (callers skip fetching its numbers otherwise).
  bool due() const { return on_ && now_s() - last_ >= 0.2; }
  void clear() {
    if (on_ && drawn_ > 0) std::fprintf(stderr, "\r%*s\r", drawn_, "");
  }

 private:
  bool on_;
  int64_t epoch_, epochs_, total_;
  double later_s_;
  double start_, last_ = 0;
  std::string what_;
  int drawn_ = 0;  // characters of the last line drawn, which clear() blanks
  static int terminal_columns() {
    winsize w{};
    return ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? int(w.ws_col) : 80;
  }
};

/// The epoch table: its header, and one row per finished epoch (fixed widths, so rows line up).
extern const char* const kEpochHeader;
std::string epoch_row(const EpochStats& e);
/// The header's first line: the model, its size and forward FLOPs per image, the data and its images.
std::string model_line(const nn::Graph& graph, const data::DataPair& data);
/// How the run learns, as the header's second line says it: "sgd lr 0.1 onecycle", with label
/// smoothing and augmentation where they are on ("augmented: random 2-px crops and flips").
std::string recipe_text(const TrainConfig& cfg, const data::Dataset& train);
/// "resumed from DIR/checkpoint.dlperf after epoch 3", what is left of --epochs, and a note naming
/// the settings that differ from the checkpoint's run (`checkpoint_config`).
std::string resumed_line(const TrainConfig& cfg, int64_t epochs_done, const nlohmann::json& checkpoint_config = nlohmann::json::object());
/// A note where an epoch's training loss rose to more than 1.5x the lowest before it (the `mlp`
/// at batch 16 and lr 0.1: 0.86 in epoch 1, 2.21 in epoch 2), which a learning rate too high for
/// the batch size does; with the lr to try. Empty where the loss never rose so.
std::string loss_rise_note(const TrainConfig& cfg, const std::vector<EpochStats>& epochs);
/// A note for a bf16 run on a CPU whose bf16 dot products peak under 1.2x its fp32 FMAs
/// (`bf16_gflops` against `fp32_gflops`, measured; `source` says by what): there bf16 halves
/// the activations' bytes but has no more arithmetic to offer, and its conversions cost, so it
/// trains slower than fp32 (an Intel Xeon VM: 0.49x, medium at batch 64 1.5-2.7x slower). Empty
/// where bf16's peak is higher (2.0x on a Zen 4) or unknown.
std::string cpu_bf16_note(double bf16_gflops, double fp32_gflops, const std::string& source);
/// "final test accuracy 93.10%", or why there is none, from a run record's summary.
std::string final_accuracy(const nlohmann::json& summary);
/// The epochs both trainers run from `start_epoch` (`Run`, `GpuRun`): each one's row on the
/// console and a checkpoint after it. Returns the epoch a signal stopped (1-based; it is not in
/// `epochs`), or 0.
template <class TrainingRun>
int64_t run_epochs(const TrainConfig& cfg, TrainingRun& run, int64_t start_epoch, std::vector<EpochStats>& epochs) {
  const bool bar = cfg.progress && isatty(STDERR_FILENO);  // also when quiet: the lab's runs show it
  double last_epoch_s = -1;  // the last finished epoch's training and testing, for the run's time left
  for (int64_t epoch = start_epoch; epoch < cfg.epochs; ++epoch) {
    if (cfg.stop_after_epochs > 0 && epoch >= cfg.stop_after_epochs) break;
    std::optional<EpochStats> st =
        run.epoch(epoch, BarInfo{bar, last_epoch_s < 0 ? -1 : last_epoch_s * double(cfg.epochs - epoch - 1)});
    if (!st) return epoch + 1;
    last_epoch_s = st->train_s + st->eval_s;
    epochs.push_back(*st);
    if (!cfg.quiet) {
      std::fputs(epoch_row(epochs.back()).c_str(), stdout);
      std::fflush(stdout);
    }
    if (cfg.profile_only && run.profiled()) break;  // dlperf profile writes no checkpoint: its epoch stopped early
    if (!cfg.checkpoint_dir.empty()) run.save(epoch + 1, epochs);
  }
  return 0;
}
/// A run a signal stopped (core/interrupt.h) in epoch `stopped_in` (1-based): the unfinished epoch
/// is dropped, and the record keeps the finished ones with a "stopped" entry saying so.
nlohmann::json stopped_json(const TrainConfig& cfg, int64_t stopped_in);
/// Whether the run has a record to write: an epoch finished in this process. A resumed run's
/// earlier epochs are in the record its own process wrote, so a stopped run with none of its
/// own, or a resume with nothing left to train, writes none.
inline bool keeps_record(const TrainResult& r, size_t resumed_epochs) { return r.epochs.size() > resumed_epochs; }
/// What ends the command once the stopped run wrote what it finished: where that is, and how to go on.
Interrupted stopped_run(const TrainConfig& cfg, int64_t stopped_in, const TrainResult& r);
/// A run whose loss became `loss` (NaN or infinite) `when` ("at epoch 2, step 40"), after
/// `finished_epochs` epochs (resumed ones included): what happened, and how to go on.
Diverged diverged_run(const TrainConfig& cfg, double loss, const std::string& when, int64_t finished_epochs);
/// The loaders' settings; `compute_threads`: the threads the training computes on while they fill
/// (the CPU engine's team; on a GPU the one thread driving it; 0 = not known).
data::LoaderConfig loader_config(const TrainConfig& cfg, bool training, int compute_threads = 0);
/// Running totals of an epoch's training steps, and what they make of its EpochStats.
struct EpochTally {
  double loss_sum = 0;
  int64_t correct = 0, seen = 0;
  void add(double loss, int64_t right, int64_t valid) {
    loss_sum += loss * double(valid);
    correct += right;
    seen += valid;
  }
  /// Fills images/s, train loss and accuracy (train_s must be set).
  void finish(EpochStats& st) const {
    st.images_per_s = double(seen) / st.train_s;
    st.train_loss = loss_sum / double(seen);
    st.train_acc = double(correct) / double(seen);
  }
};
/// A profile flag as the user typed it: `dlperf profile` names them --skip, --steps and --out;
/// `dlperf train` prefixes them with --profile-.
inline std::string profile_flag(const TrainConfig& cfg, const std::string& name) {
  return (cfg.profile_only ? "--" : "--profile-") + name;
}
/// The profile's window (--profile-skip, --profile-steps): steps [skip, skip + steps) counted from
/// the first step this run trains, so a window may start in any epoch (a benchmark of what
/// profiling costs records a whole later epoch, past the GPU's warm-up). steps 0 = to the end of
/// the epoch the window starts in. Refuses a window that starts after the run's last step.
/// --profile-every N records the window's first step and every Nth after it.
struct ProfileWindow {
  int64_t skip, steps, every;
  ProfileWindow(const TrainConfig& cfg, int64_t per_epoch, int64_t epochs_to_train)
      : skip(cfg.profile_skip), steps(cfg.profile_steps), every(cfg.profile_every) {
    const int64_t run_steps = per_epoch * epochs_to_train;
    const std::string flag = profile_flag(cfg, "skip"), steps_flag = profile_flag(cfg, "steps");
    check(skip < run_steps,
          fmt::format("{} {} leaves no step to record: this run trains {} ({} of {})", flag, skip, counted(run_steps, "step"),
                      counted(epochs_to_train, "epoch"), per_epoch),
          fmt::format("lower {}, or use more data, more --epochs or a smaller --batch-size", flag));
    // Recording stops at the end of the epoch it starts in: a longer window is cut short, and said.
    const int64_t left = per_epoch - skip % per_epoch;
    if (steps > left)
      note = fmt::format("{} {} is more than the {} left in the epoch after {} {}: it records {} {} (recording ends with "
                         "the epoch it starts in; {} 0 records to that end)",
                         steps_flag, steps, counted(left, "step"), flag, skip, every > 1 ? fmt::format("one in {} of", every) : "those",
                         left, steps_flag);
    // A sampling interval as long as the window records its first step alone: almost surely a
    // window left at its default (--steps 20) under an --every meant for a long recording.
    if (const int64_t window = steps > 0 ? std::min(steps, left) : left; every > 1 && window <= every) {
      const std::string every_flag = profile_flag(cfg, "every");
      if (!note.empty()) note += "; ";
      if (every >= left) {  // no window in this epoch holds a second recorded step
        note += fmt::format("{} {} is no shorter than the {} left in the epoch after {} {}: it records its first step alone (use "
                            "more data or a smaller {})",
                            every_flag, every, counted(left, "step"), flag, skip, every_flag);
      } else {  // every < left: no overflow
        const int64_t spread = std::min(every * 10, left);
        note += fmt::format("{} {} over a window of {} records its first step alone: {} {} records {} in {}", every_flag, every,
                            counted(window, "step"), steps_flag, spread, counted((spread + every - 1) / every, "step"), spread);
      }
    }
  }
  std::string note;  ///< said with the run's notes when the window is cut short or holds one recorded step, else empty
  /// `k`: steps this run trained before the one about to start.
  bool starts_at(int64_t k) const { return k == skip; }
  bool ends_at(int64_t k) const { return steps > 0 && k == skip + steps; }
  /// Before step `k` of the open window: numbers the recording's step, and resumes it for a step
  /// the window records or pauses it for one --profile-every skips (that step runs unrecorded).
  void enter_step(profile::Recorder& rec, int64_t k) const {
    rec.set_step(k - skip);
    if ((k - skip) % every == 0) rec.resume();
    else rec.pause();
  }
};
/// The allocator's peaks (all categories at once, and each) into an epoch's stats.
inline void record_peaks(EpochStats& st, const MemoryStats& ms) {
  st.peak_bytes = double(ms.peak_total);
  st.peak_by_category.clear();
  for (size_t c = 0; c < ms.peak.size(); ++c) st.peak_by_category.push_back(double(ms.peak[c]));
}
/// The run record of a training run (docs/run-record.md).
nlohmann::json build_record(const TrainConfig& cfg, const nn::Graph& graph, const data::DataPair& data,
                            const std::vector<EpochStats>& epochs, int threads, const std::string& energy_source);
/// The end of a profiled run: builds the report from the recorder's events against `ceilings`,
/// prints it, adds it to the run record and writes the trace and table files. `kernels_per_step`,
/// when positive, is the exact count (a GPU step's CUDA graph) that replaces the estimate.
/// `planned_step_s`, when positive, is dlperf plan's step time for the run (a CPU run's), which
/// the report reads the median step against (profile::slower_than_plan_note). `clock_tick_ns`,
/// when positive, is how finely a GPU profile's stamps resolve a span (cuda::Network::clock_tick_ns).
/// `layers`: which code ran a CPU run's layers (Winograd, AMX tiles, matrix products, one thread),
/// which the report's notes name.
void finish_profile(const TrainConfig& cfg, const nn::Graph& graph, const plan::CpuCeilings& ceilings, const MemoryStats& peaks,
                    TrainResult& result, int64_t kernels_per_step = 0, double planned_step_s = 0, double clock_tick_ns = 0,
                    profile::CpuLayers layers = {});
/// A checkpoint's header: where the run stands (epochs and updates done, the history so far).
nlohmann::json checkpoint_meta(const TrainConfig& cfg, const nn::Graph& graph, int64_t epochs_done, int64_t optimizer_steps,
                               const std::vector<EpochStats>& history);
/// Writes `record` to dir/name.json (name-2.json, ... when taken); returns the path.
std::string write_record(const nlohmann::json& record, const std::string& dir, const std::string& name);

/// Prints each of `notes` as "note: ..." (what train() found about the run's data and flags),
/// once nothing can refuse the run any more.
void print_notes(const std::vector<std::string>& notes);
/// After a run's "done:" line: what else ran on the CPUs, where that slowed it (hw::busy_note).
void print_host_load_note(const nlohmann::json& summary);

/// The training loop on GPU `device` (builds with the CUDA backend only; gpu_trainer.cpp), with
/// the notes to print before its header.
TrainResult train_on_gpu(const TrainConfig& cfg, int device, data::DataPair d, nn::Graph graph, std::vector<std::string> notes);

}  // namespace dlperf::train::detail

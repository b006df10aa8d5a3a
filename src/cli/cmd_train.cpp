// dlperf train and dlperf profile: flags map one to one onto train::TrainConfig.
#include <fmt/format.h>

#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "nn/graph.h"
#include "train/trainer.h"

namespace dlperf::cli {

void add_train_flags(CLI::App* c, train::TrainConfig* cfg) {
  // The preset list comes from the registry, so a new preset shows here without an edit.
  c->add_option("--model,-m", cfg->model, fmt::format("preset ({}) or a .json spec", fmt::join(nn::preset_names(), ", ")))
      ->capture_default_str();
  c->add_option("--data,-d", cfg->data, "fashion-mnist, synthetic[:CxHxW[:N]], or a directory of IDX / CIFAR-10 files")->capture_default_str();
  c->add_option("--epochs,-e", cfg->epochs, "passes over the training set")->capture_default_str();
  c->add_option("--batch-size,-b", cfg->batch, "images per step")->capture_default_str();
  c->add_option("--lr", cfg->lr, "peak learning rate")->capture_default_str();
  c->add_option("--optimizer", cfg->optimizer.name, "sgd | adamw")->capture_default_str()->check(CLI::IsMember({"sgd", "adamw"}));
  c->add_option("--momentum", cfg->optimizer.momentum, "SGD momentum")->capture_default_str();
  c->add_flag("!--no-nesterov", cfg->optimizer.nesterov, "plain momentum instead of Nesterov");
  c->add_option("--weight-decay", cfg->optimizer.weight_decay, "L2 (sgd) or decoupled (adamw) weight decay")->capture_default_str();
  c->add_option("--schedule", cfg->schedule.name, "constant | step | cosine | onecycle")->capture_default_str()
      ->check(CLI::IsMember({"constant", "step", "cosine", "onecycle"}));
  c->add_option("--warmup-epochs", cfg->schedule.warmup_epochs, "linear warm-up for constant, step and cosine")->capture_default_str();
  c->add_option("--step-epochs", cfg->schedule.step_epochs, "step schedule: decay every N epochs")->capture_default_str();
  c->add_option("--label-smoothing", cfg->label_smoothing, "cross-entropy label smoothing")->capture_default_str();
  c->add_flag("--augment,!--no-augment", cfg->augment, "random crop (--crop-pad px padding) and, where the data allows, horizontal flip; pays off in runs longer than 5 epochs");
  c->add_option("--crop-pad", cfg->crop_pad, "with --augment: pixels of zero padding the random crop shifts within (0 = horizontal flips only)")
      ->capture_default_str()->check(between(0, 8));
  c->add_option("--workers,-j", cfg->workers, "data-loader threads (0 = load in the training thread)")->capture_default_str();
  c->add_option("--threads", cfg->threads, "compute threads (0 = all cores)")->capture_default_str();
  c->add_flag("!--keep-denormals", cfg->flush_denormals,
              "CPU: compute with denormal floats as they are, as PyTorch does by default, instead of flushing them to zero (dlperf's default, as TensorFlow's: arithmetic on them is up to 100x slower on Intel cores)");
  c->add_option("--seed", cfg->seed, "seed for init, shuffling, augmentation and dropout")->capture_default_str()->check(at_least(0));
  c->add_option("--device", cfg->device, "auto (a GPU when there is one) | cpu | cuda | cuda:N")->capture_default_str();
  c->add_option("--precision", cfg->precision, "fp32 | tf32 | bf16 | fp16 (tf32 and fp16 need a GPU; bf16 a GPU or AVX512-BF16)")
      ->capture_default_str()->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  c->add_flag("!--no-graphs", cfg->graphs, "GPU: run every step eagerly instead of replaying a CUDA graph");
  c->add_option_function<std::string>("--pin-memory", [cfg](const std::string& v) { cfg->pin_memory = v == "on"; },
                                      "GPU: on = batches go through pinned buffers on a copy stream, overlapping compute (default); off = pageable copies in the step's stream")
      ->check(CLI::IsMember({"on", "off"}));
  c->add_option("--layout", cfg->layout, "GPU: how activations are stored: nchw, nhwc (channels last), or auto = nhwc for bf16 and fp16, nchw for fp32 and tf32")
      ->capture_default_str()->check(CLI::IsMember({"auto", "nchw", "nhwc"}));
  c->add_flag("--deterministic", cfg->deterministic,
              "GPU: only convolution algorithms that give the same bits on every run (some fast backward ones sum with atomics); the CPU engine always does");
  c->add_option("--conv-workspace", cfg->conv_workspace_mb,
                "GPU: the most memory (MB) a convolution's cuDNN algorithms may use as workspace; the fastest within it is taken")
      ->capture_default_str()->check(at_least(0));
  c->add_option("--small-conv", cfg->small_conv,
                "GPU: who runs the forward pass and weight gradient of convolutions of 1 or 3 input channels (a first layer): auto = whichever of dlperf's own kernels and cuDNN timed faster here, own, or cudnn")
      ->capture_default_str()->check(CLI::IsMember({"auto", "own", "cudnn"}));
  c->add_flag("--data-on-device", cfg->data_on_device, "GPU: keep the dataset in GPU memory and build batches there (shuffle, augment, normalize)");
  c->add_option("--train-limit", cfg->train_limit, "use only the first N training images (0 = all)")->capture_default_str()->check(at_least(0));
  c->add_option("--test-limit", cfg->test_limit, "use only the first N test images (0 = all)")->capture_default_str()->check(at_least(0));
  c->add_option("--eval-every", cfg->eval_every, "measure test accuracy after every N epochs and after the last (1 = every epoch)")
      ->capture_default_str()->check(at_least(1));
  c->add_option("--checkpoint", cfg->checkpoint_dir, "save a checkpoint in DIR after every epoch");
  c->add_flag("--resume", cfg->resume, "continue from the checkpoint in --checkpoint DIR");
  c->add_flag("--overwrite-checkpoint", cfg->overwrite_checkpoint,
              "start afresh in a --checkpoint DIR that holds a checkpoint, replacing it after this run's first epoch");
  c->add_option("--runs-dir", cfg->runs_dir, "where the run record (JSON) goes; empty for none")->capture_default_str();
  c->add_flag("!--no-progress", cfg->progress, "no progress bar");
  c->add_flag("--layer-times", cfg->layer_times, "time every layer and report achieved GFLOP/s against the CPU's peak");
}

void add_profile_flags(CLI::App* c, train::TrainConfig* cfg, bool in_train) {
  CLI::Option* profile = in_train ? c->add_flag("--profile", cfg->profile, "profile some steps of the first epoch (see dlperf profile)") : nullptr;
  const std::vector<CLI::Option*> options = {
      c->add_option(in_train ? "--profile-skip" : "--skip", cfg->profile_skip, "steps to run before recording (warm-up; counted over the whole run, so recording may start in a later epoch)")->capture_default_str(),
      c->add_option(in_train ? "--profile-steps" : "--steps", cfg->profile_steps, "steps to record (0 = to the end of the epoch recording starts in)")->capture_default_str(),
      c->add_option(in_train ? "--profile-every" : "--every", cfg->profile_every,
                    "of those steps, record the first and every Nth after it (the others run unrecorded, as training runs them: what a long recording costs is divided by N)")
          ->capture_default_str()->check(at_least(1)),
      c->add_option("--group-by", cfg->profile_group, "layer | op")->capture_default_str()->check(CLI::IsMember({"layer", "op"})),
      c->add_option(in_train ? "--profile-out" : "--out", cfg->profile_out, "path prefix of the profile's .json and .trace.json, or a directory for them (default: in --runs-dir)"),
      c->add_flag("--gzip", cfg->trace_gzip, "write the trace gzip-compressed (.trace.json.gz)")};
  // In dlperf train they mean something only with --profile: refused without it, not ignored.
  if (profile)
    for (auto* o : options) o->needs(profile);
}

// A flag this run would ignore is refused, as dlperf plan refuses its own: a user who set a decay
// or a momentum the run never applied would read the run wrongly. These flags have defaults, so
// only the command line knows whether they were given (validate() in trainer.cpp refuses a
// --warmup-epochs that onecycle would ignore by its value).
void refuse_ignored_flags(const CLI::App* c, const train::TrainConfig& cfg) {
  const auto given = [&](const char* name) { return c->count(name) > 0; };
  check(!(given("--step-epochs") && cfg.schedule.name != "step"),
        fmt::format("--step-epochs sets when the step schedule decays, and this run's schedule is {}", cfg.schedule.name),
        "add --schedule step, or drop --step-epochs");
  check(!(given("--crop-pad") && !cfg.augment), "--crop-pad sets the random crop of --augment, and this run is not augmented",
        "add --augment, or drop --crop-pad");
  if (cfg.optimizer.name == "adamw")
    for (const char* sgd_only : {"--momentum", "--no-nesterov"})
      check(!given(sgd_only), fmt::format("{} is SGD's, and this run's optimizer is adamw (betas 0.9 and 0.999)", sgd_only),
            fmt::format("drop {}, or use --optimizer sgd", sgd_only));
}

void add_train(CLI::App& app, const Command& self) {
  auto cfg = std::make_shared<train::TrainConfig>();
  auto* c = app.add_subcommand(self.name, self.summary);
  add_train_flags(c, cfg.get());
  add_profile_flags(c, cfg.get(), true);
  c->callback([cfg, c] {
    refuse_ignored_flags(c, *cfg);
    train::train(*cfg);
  });
}

void add_profile(CLI::App& app, const Command& self) {
  auto cfg = std::make_shared<train::TrainConfig>();
  cfg->epochs = 1;
  cfg->profile = cfg->profile_only = true;
  auto* c = app.add_subcommand(self.name, self.summary);
  add_train_flags(c, cfg.get());
  add_profile_flags(c, cfg.get(), false);
  c->get_option("--checkpoint")->description("with --resume: profile the run saved in DIR (profile itself writes no checkpoint)");
  c->remove_option(c->get_option("--overwrite-checkpoint"));  // profile writes no checkpoint to overwrite
  c->callback([cfg, c] {
    refuse_ignored_flags(c, *cfg);
    train::train(*cfg);
  });
}

}  // namespace dlperf::cli

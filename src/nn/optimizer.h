// Optimizers over flat float arrays, and learning-rate schedules.
//
// Semantics follow PyTorch's SGD (momentum, dampening 0, Nesterov, L2 weight decay added to
// the gradient) and AdamW (decoupled weight decay), so results and hyper-parameters carry
// over. Parameters may be stored in blocked layouts; element-wise updates do not care, and
// padding stays zero because its gradient is zero.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/memory.h"

namespace dlperf::nn {

/// One parameter as the optimizer sees it.
struct ParamRef {
  float* value;
  const float* grad;
  size_t size;
};

struct OptimizerConfig {
  std::string name = "sgd";  ///< sgd | adamw
  double momentum = 0.9;
  bool nesterov = true;
  double weight_decay = 5e-4;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

class Optimizer {
 public:
  Optimizer(OptimizerConfig cfg, std::vector<ParamRef> params);
  /// One update with learning rate `lr`.
  void step(double lr);
  int64_t steps_done() const { return t_; }
  /// State buffers (momentum, or Adam's m and v) for checkpoints: name suffix and floats.
  struct State {
    std::string suffix;
    size_t param;
    float* data;
  };
  std::vector<State> state();
  void set_steps_done(int64_t t) { t_ = t; }
  const OptimizerConfig& config() const { return cfg_; }

 private:
  OptimizerConfig cfg_;
  std::vector<ParamRef> params_;
  std::vector<BufferPtr> m_, v_;
  int64_t t_ = 0;
};

struct ScheduleConfig {
  std::string name = "onecycle";  ///< constant | step | cosine | onecycle
  double step_epochs = 30;        ///< step: decay every this many epochs
  double gamma = 0.1;             ///< step: decay factor
  double warmup_fraction = 0.3;   ///< onecycle: share of steps spent warming up
  double warmup_epochs = 0;       ///< constant/step/cosine: linear warm-up length
};

/// The schedule as a run's header says it: "onecycle", "step (x0.1 every 30 epochs)", "cosine
/// after a 2-epoch warm-up".
std::string describe(const ScheduleConfig& s);

/// Learning rate at `step` (0-based) of `total` steps, `per_epoch` steps an epoch.
/// onecycle is PyTorch's OneCycleLR (cosine; from lr/25 up to lr, then down to lr/25e4).
double learning_rate(const ScheduleConfig& s, double base_lr, int64_t step, int64_t total,
                     int64_t per_epoch);

}  // namespace dlperf::nn

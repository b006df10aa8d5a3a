#include "nn/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "hw/cpu_info.h"

namespace dlperf::nn {

Optimizer::Optimizer(OptimizerConfig cfg, std::vector<ParamRef> params)
    : cfg_(std::move(cfg)), params_(std::move(params)) {
  check(cfg_.name == "sgd" || cfg_.name == "adamw",
        "unknown optimizer '" + cfg_.name + "'", "use --optimizer sgd or adamw");
  for (const auto& p : params_) {
    const bool need_m = cfg_.name == "adamw" || cfg_.momentum != 0;
    m_.push_back(need_m ? make_buffer(p.size * 4, MemCategory::optimizer_state) : nullptr);
    v_.push_back(cfg_.name == "adamw" ? make_buffer(p.size * 4, MemCategory::optimizer_state) : nullptr);
    if (m_.back()) std::memset(m_.back()->data(), 0, p.size * 4);
    if (v_.back()) std::memset(v_.back()->data(), 0, p.size * 4);
  }
}

void Optimizer::step(double lr_d) {
  ++t_;
  const float lr = float(lr_d), wd = float(cfg_.weight_decay);
  for (size_t k = 0; k < params_.size(); ++k) {
    float* w = params_[k].value;
    const float* g = params_[k].grad;
    const int64_t n = int64_t(params_[k].size);
    if (cfg_.name == "sgd") {
      const float mu = float(cfg_.momentum);
      float* buf = m_[k] ? static_cast<float*>(m_[k]->data()) : nullptr;
      const bool nesterov = cfg_.nesterov;
#pragma omp parallel for schedule(static) if (n > hw::kParallelMinElements)
      for (int64_t i = 0; i < n; ++i) {
        float d = g[i] + wd * w[i];
        if (buf) {
          buf[i] = mu * buf[i] + d;
          d = nesterov ? d + mu * buf[i] : buf[i];
        }
        w[i] -= lr * d;
      }
    } else {
      const float b1 = float(cfg_.beta1), b2 = float(cfg_.beta2), eps = float(cfg_.eps);
      const float c1 = 1.0f / (1.0f - std::pow(b1, float(t_)));
      const float c2 = 1.0f / (1.0f - std::pow(b2, float(t_)));
      float* m = static_cast<float*>(m_[k]->data());
      float* v = static_cast<float*>(v_[k]->data());
#pragma omp parallel for schedule(static) if (n > hw::kParallelMinElements)
      for (int64_t i = 0; i < n; ++i) {
        w[i] *= 1.0f - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        w[i] -= lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
      }
    }
  }
}

std::vector<Optimizer::State> Optimizer::state() {
  std::vector<State> s;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (m_[k]) s.push_back({cfg_.name == "sgd" ? ".momentum" : ".adam_m", k, static_cast<float*>(m_[k]->data())});
    if (v_[k]) s.push_back({".adam_v", k, static_cast<float*>(v_[k]->data())});
  }
  return s;
}

std::string describe(const ScheduleConfig& s) {
  std::string d = s.name;
  if (s.name == "step") d += fmt::format(" (x{:g} every {:g} epoch{})", s.gamma, s.step_epochs, s.step_epochs == 1 ? "" : "s");
  if (s.warmup_epochs > 0 && s.name != "onecycle") d += fmt::format(" after a {:g}-epoch warm-up", s.warmup_epochs);
  return d;
}

double learning_rate(const ScheduleConfig& s, double lr, int64_t step, int64_t total, int64_t per_epoch) {
  const double pi = 3.14159265358979323846;
  total = std::max<int64_t>(total, 1);
  if (s.name == "onecycle") {
    // As torch.optim.lr_scheduler.OneCycleLR: the rate peaks at step warmup_fraction * total - 1
    // and reaches its end at the last step, total - 1 (PyTorchGolden.SchedulesSetPyTorchsLearningRates).
    const double peak = s.warmup_fraction * double(total) - 1;
    const double lo = lr / 25.0, end = lo / 1e4;
    const double x = double(step);
    if (peak > 0 && x <= peak) return lo + (lr - lo) * 0.5 * (1 - std::cos(pi * x / peak));
    const double f = std::clamp((x - peak) / std::max(1e-9, double(total) - 1 - peak), 0.0, 1.0);
    return end + (lr - end) * 0.5 * (1 + std::cos(pi * f));
  }
  const double warm = s.warmup_epochs * double(per_epoch);
  if (warm > 0 && double(step) < warm) lr *= double(step + 1) / warm;
  if (s.name == "constant") return lr;
  if (s.name == "step") {
    const int64_t k = int64_t(double(step) / (s.step_epochs * double(std::max<int64_t>(per_epoch, 1))));
    return lr * std::pow(s.gamma, double(k));
  }
  if (s.name == "cosine") return lr * 0.5 * (1 + std::cos(pi * double(step) / double(total)));
  throw Error("unknown schedule '" + s.name + "'", "use --schedule constant, step, cosine or onecycle");
}

}  // namespace dlperf::nn

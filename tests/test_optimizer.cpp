// Optimizers against their formulas in double precision; schedules at their landmarks.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "nn/optimizer.h"

namespace dlperf::test {
namespace {

TEST(Optimizer, SgdNesterovWithWeightDecayFollowsPyTorch) {
  std::vector<float> w = {1.0f, -2.0f}, g = {0.5f, 0.25f};
  nn::OptimizerConfig c;
  c.momentum = 0.9, c.nesterov = true, c.weight_decay = 0.01;
  nn::Optimizer opt(c, {{w.data(), g.data(), 2}});
  double wd[2] = {1.0, -2.0}, buf[2] = {0, 0};
  for (int step = 0; step < 3; ++step) {
    opt.step(0.1);
    for (int i = 0; i < 2; ++i) {
      const double d = g[i] + 0.01 * wd[i];
      buf[i] = 0.9 * buf[i] + d;
      wd[i] -= 0.1 * (d + 0.9 * buf[i]);
      EXPECT_NEAR(w[i], wd[i], 1e-6);
    }
  }
}

TEST(Optimizer, PlainSgdWithoutMomentum) {
  std::vector<float> w = {1.0f}, g = {0.5f};
  nn::OptimizerConfig c;
  c.momentum = 0, c.weight_decay = 0;
  nn::Optimizer opt(c, {{w.data(), g.data(), 1}});
  opt.step(0.1);
  EXPECT_FLOAT_EQ(w[0], 0.95f);
  EXPECT_TRUE(opt.state().empty());
}

TEST(Optimizer, AdamWFollowsPyTorch) {
  std::vector<float> w = {0.3f, -0.7f, 2.0f}, g = {0.1f, -0.2f, 0.0f};
  nn::OptimizerConfig c;
  c.name = "adamw", c.weight_decay = 0.05;
  nn::Optimizer opt(c, {{w.data(), g.data(), 3}});
  double wd[3] = {0.3, -0.7, 2.0}, m[3] = {}, v[3] = {};
  for (int t = 1; t <= 4; ++t) {
    opt.step(0.01);
    for (int i = 0; i < 3; ++i) {
      wd[i] *= 1 - 0.01 * 0.05;
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
      wd[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-8);
      EXPECT_NEAR(w[i], wd[i], 1e-6);
    }
  }
  EXPECT_EQ(opt.state().size(), 2u);
}

// The run's header names the schedule with what shapes it: a step schedule's decay and period, a warm-up.
TEST(Schedule, DescribedAsTheHeaderSaysIt) {
  nn::ScheduleConfig s;
  EXPECT_EQ(nn::describe(s), "onecycle");
  s.name = "step", s.step_epochs = 1;
  EXPECT_EQ(nn::describe(s), "step (x0.1 every 1 epoch)");
  s.step_epochs = 30, s.warmup_epochs = 2;
  EXPECT_EQ(nn::describe(s), "step (x0.1 every 30 epochs) after a 2-epoch warm-up");
  s.name = "cosine", s.warmup_epochs = 0.5;
  EXPECT_EQ(nn::describe(s), "cosine after a 0.5-epoch warm-up");
}

TEST(Schedule, Landmarks) {
  nn::ScheduleConfig s;
  const double lr = 0.1;
  s.name = "constant";
  EXPECT_DOUBLE_EQ(nn::learning_rate(s, lr, 50, 100, 10), lr);
  s.name = "step";
  s.step_epochs = 2;
  EXPECT_DOUBLE_EQ(nn::learning_rate(s, lr, 19, 100, 10), lr);
  EXPECT_NEAR(nn::learning_rate(s, lr, 20, 100, 10), lr * 0.1, 1e-12);
  EXPECT_NEAR(nn::learning_rate(s, lr, 45, 100, 10), lr * 0.01, 1e-12);
  s.name = "cosine";
  EXPECT_DOUBLE_EQ(nn::learning_rate(s, lr, 0, 100, 10), lr);
  EXPECT_NEAR(nn::learning_rate(s, lr, 50, 100, 10), lr / 2, 1e-12);
  s.warmup_epochs = 1;
  EXPECT_NEAR(nn::learning_rate(s, lr, 4, 100, 10), lr * 0.5 * (1 + std::cos(M_PI * 0.04)) * 0.5, 1e-12);
  s.name = "onecycle";
  EXPECT_NEAR(nn::learning_rate(s, lr, 0, 100, 10), lr / 25, 1e-12);
  EXPECT_NEAR(nn::learning_rate(s, lr, 29, 100, 10), lr, 1e-12);  // PyTorch's peak: 0.3 * total - 1
  EXPECT_NEAR(nn::learning_rate(s, lr, 99, 100, 10), lr / 25 / 1e4, 1e-12);
  EXPECT_NEAR(nn::learning_rate(s, lr, 100, 100, 10), lr / 25 / 1e4, 1e-12);
  EXPECT_NEAR(nn::learning_rate(s, lr, 0, 1, 1), lr / 25 / 1e4, 1e-12);  // one step: PyTorch's too
  s.name = "nope";
  EXPECT_THROW(nn::learning_rate(s, lr, 0, 1, 1), Error);
}

}  // namespace
}  // namespace dlperf::test

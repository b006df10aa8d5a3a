// dlperf train on the GPU (src/train/gpu_trainer.cpp): learning, mixed precision, tf32,
// checkpoints that resume on either device. Built twice (cuda_kernel_util.h): on a GPU in
// dlperf_tests (suite Cuda), and in dlperf_emu_tests (suite CudaEmu), where the trainer runs on
// the CPU around the emulated executor (test_cuda_network.cpp says how), its steps eager.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cuda_kernel_util.h"
#include "test_util.h"

#if defined(DLPERF_HAVE_CUDA) || defined(DLPERF_CUDA_EMULATION)
#include "train/trainer.h"

namespace dlperf::test {
namespace {

// dlperf train on the GPU: learns the synthetic task as the CPU does, records the device.
TEST(KERNEL_SUITE, TrainingOnTheGpuLearns) {
  REQUIRE_GPU();
  TempDir dir;
  train::TrainConfig c;
  c.model = "small";
  c.data = "synthetic:1x12x12:1024";
  c.device = "cuda";
  c.batch = 32;
  c.epochs = 3;
  c.runs_dir = dir.path.string();
  c.quiet = true;
  c.progress = false;
  const auto r = train::train(c);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_GE(r.epochs.back().test_acc, 0.9);
  EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
  EXPECT_EQ(r.record["config"]["device_used"], "cuda:0");
  EXPECT_GT(r.record["summary"]["peak_bytes"].get<double>(), 0);
}

TEST(KERNEL_SUITE, CheckpointsResumeOnTheGpuAndOnTheCpu) {
  REQUIRE_GPU();
  TempDir dir;
  for (const char* optimizer : {"sgd", "adamw"}) {
    SCOPED_TRACE(optimizer);
    train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:512", 32, 2);
    c.optimizer.name = optimizer;
    c.lr = std::string(optimizer) == "adamw" ? 0.003 : 0.05;
    c.graphs = false;  // eager steps on both sides: the same kernels in the same order
    const auto whole = train::train(c);
    train::TrainConfig first = c;
    first.checkpoint_dir = (dir.path / optimizer).string();
    first.stop_after_epochs = 1;
    train::train(first);
    train::TrainConfig rest = first;
    rest.stop_after_epochs = 0;
    rest.resume = true;
    const auto resumed = train::train(rest);
    ASSERT_EQ(resumed.epochs.size(), 2u);
    ASSERT_EQ(resumed.weights.size(), whole.weights.size());
    for (size_t i = 0; i < whole.weights.size(); ++i)
      ASSERT_NEAR(resumed.weights[i], whole.weights[i], 1e-4 * (1 + std::fabs(whole.weights[i]))) << i;
    train::TrainConfig on_cpu = first;
    on_cpu.device = "cpu";
    on_cpu.stop_after_epochs = 0;
    on_cpu.resume = true;
    const auto cpu = train::train(on_cpu);  // must load without complaint, and go on learning
    EXPECT_EQ(cpu.epochs.size(), 2u);
    EXPECT_NEAR(cpu.epochs.back().test_acc, resumed.epochs.back().test_acc, 0.1);
  }
}

// bf16 and fp16 train end to end (graphs, on-device data), fp16 reports its skipped steps.
TEST(KERNEL_SUITE, MixedPrecisionTrainingLearns) {
  REQUIRE_GPU();
  for (const char* precision : {"bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:1024", 32, 3);
    c.precision = precision;
    c.data_on_device = true;
    const auto r = train::train(c);
    EXPECT_GE(r.epochs.back().test_acc, 0.9);
    EXPECT_LT(r.epochs.back().train_loss, r.epochs.front().train_loss);
    EXPECT_EQ(r.record["config"]["precision"], precision);
    EXPECT_EQ(r.record["summary"].contains("loss_scale_skips"), std::string(precision) == "fp16");
  }
}

// tf32 trains like fp32, to tf32's 10-bit mantissa.
TEST(KERNEL_SUITE, Tf32TrainingTracksFp32) {
  REQUIRE_GPU();
  train::TrainConfig c = gpu_run("small", "synthetic:1x12x12:1024", 32, 2);
  const auto fp32 = train::train(c);
  c.precision = "tf32";
  const auto tf32 = train::train(c);
  EXPECT_NEAR(tf32.epochs.back().train_loss, fp32.epochs.back().train_loss, 0.05 * (1 + fp32.epochs.back().train_loss));
  EXPECT_NEAR(tf32.epochs.back().test_acc, fp32.epochs.back().test_acc, 0.05);
  EXPECT_EQ(tf32.record["config"]["precision"], "tf32");
}

}  // namespace
}  // namespace dlperf::test

#endif

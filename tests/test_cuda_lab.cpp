// dlperf lab on a machine with a GPU: the device experiment's cuda rows, the precision
// experiment on the GPU, the report's GPU line, --full as the default. Built twice
// (cuda_kernel_util.h): on a GPU in dlperf_tests (suite Cuda), and in dlperf_emu_tests (suite
// CudaEmu), where the lab's GPU runs go through the emulated executor (test_cuda_network.cpp
// says how), so the lab's GPU path is checked before a GPU session spends its minutes on it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cuda_kernel_util.h"
#include "test_util.h"

#if defined(DLPERF_HAVE_CUDA) || defined(DLPERF_CUDA_EMULATION)
#include <nlohmann/json.hpp>

#include "backend/cuda/runtime.h"
#include "lab/lab.h"

namespace dlperf::test {
namespace {

using nlohmann::json;

TEST(KERNEL_SUITE, LabMeasuresTheGpuRows) {
  REQUIRE_GPU();
  TempDir dir;
  lab::LabConfig c;
  c.experiments = {"device", "precision"};
  c.data = "synthetic:1x12x12:192";
  c.out = dir.path.string();
  c.base_model = "small";
  c.base_batch = 32;
  c.epochs = 1;
  c.train_limit = c.test_limit = 0;
  c.quiet = true;
  c.progress = false;
  const auto exps = lab::run_lab(c);
  ASSERT_EQ(exps.size(), 2u);

  // device: a cpu and a cuda row per workload, all measured, the GPU's speed-up against the CPU.
  const auto& device = exps[0];
  ASSERT_EQ(device.name, "device");
  ASSERT_EQ(device.rows.size(), 4u);
  int cuda_rows = 0;
  for (const auto& r : device.rows) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["status"], "measured");
    if (r["device"] != "cuda") continue;
    ++cuda_rows;
    EXPECT_GT(r["speedup_vs_cpu"].get<double>(), 0);
    const json rec = json::parse(std::ifstream(r["record"].get<std::string>()));
    EXPECT_EQ(rec["config"]["device_used"], "cuda:0");
  }
  EXPECT_EQ(cuda_rows, 2);

  // precision: all four run on the GPU; fp16 reports its loss-scale skips (a number, maybe 0).
  const auto& precision = exps[1];
  ASSERT_EQ(precision.name, "precision");
  ASSERT_EQ(precision.rows.size(), 4u);
  for (const auto& r : precision.rows) {
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r["status"], "measured");
    EXPECT_EQ(r["device"], "cuda");
    const json rec = json::parse(std::ifstream(r["record"].get<std::string>()));
    EXPECT_EQ(rec["config"]["precision"], r["precision"]);
    if (r["precision"] == "fp16") {
      EXPECT_TRUE(r["loss_scale_skips"].is_number());
    }
  }
  EXPECT_FALSE(precision.observations.empty());

  // The report names the GPU, and says the lab ran --full (the default with a GPU).
  const json j = json::parse(std::ifstream(dir.path / "lab.json"));
  EXPECT_EQ(j["mode"], "full");
  const json& gpu = j["machine"]["gpu"];
  EXPECT_TRUE(gpu.value("present", false)) << gpu.dump();
  const std::string name = cuda::gpu_info(0).name;
  EXPECT_EQ(gpu.value("name", ""), name);
  std::stringstream readme;
  readme << std::ifstream(dir.path / "README.md").rdbuf();
  EXPECT_NE(readme.str().find("- **GPU:** " + name + " ("), std::string::npos);
  EXPECT_NE(readme.str().find("dlperf lab --full"), std::string::npos);
}

}  // namespace
}  // namespace dlperf::test
#endif

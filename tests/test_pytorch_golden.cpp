// The CPU engine against PyTorch: the same networks, weights, batches and optimizer give the same
// losses, logits, gradients, updated weights and batchnorm running statistics (to fp32 rounding),
// and the learning-rate schedules set the same rate at every step. The op tests compare with
// dlperf's own float64 reference; these compare the semantics (padding in average pooling,
// batchnorm's running variance, label smoothing, Nesterov, AdamW, OneCycleLR...) with an
// independent implementation. Golden values: scripts/make_pytorch_golden.py.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cpu/network.h"
#include "pytorch_golden.h"

namespace dlperf::test {
namespace {

using nlohmann::json;

std::vector<float> plain(const cpu::Param& p, const cpu::Mem& m) { return cpu::to_plain(p.layout, p.dims, m); }

// Tolerances: on the development machine the largest differences were 3e-7 (losses, logits),
// 7e-6 (gradients) and 3e-6 (weights and statistics after three steps); a not-unbiased running
// variance is off by 2e-4.
TEST(PyTorchGolden, TrainingStepsMatchPyTorch) {
  const json golden = load_pytorch_golden();
  const int64_t batch = golden.at("batch"), classes = golden.at("classes");
  const double smoothing = golden.at("label_smoothing");
  ASSERT_EQ(golden.at("cases").size(), 2u);
  for (const json& c : golden.at("cases")) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    const nn::Graph g = golden_graph(golden, c);
    cpu::Network net(g, 1);
    ASSERT_EQ(net.params().size(), c.at("initial_params").size());
    for (cpu::Param* p : net.params()) {
      const auto w = c.at("initial_params").at(p->name).get<std::vector<float>>();
      ASSERT_EQ(w.size(), size_t(numel(p->dims))) << p->name;
      cpu::from_plain(p->layout, p->dims, w.data(), p->value);
    }
    std::vector<nn::ParamRef> refs;
    for (cpu::Param* p : net.params()) refs.push_back({p->value.f32(), p->grad.f32(), p->floats()});
    nn::Optimizer opt(golden_optimizer(c.at("optimizer")), refs);
    for (size_t i = 0; i < c.at("steps").size(); ++i) {
      const json& s = c.at("steps")[i];
      const auto x = s.at("input").get<std::vector<float>>();
      const auto y = s.at("labels").get<std::vector<int32_t>>();
      std::copy(x.begin(), x.end(), net.input());
      net.forward(true);
      const auto r = net.loss(y.data(), batch, smoothing, true);
      net.backward();
      EXPECT_NEAR(r.loss, s.at("loss").get<double>(), 1e-5) << "step " << i;
      if (i == 0) {
        EXPECT_LT(golden_error({net.logits(), net.logits() + batch * classes}, c.at("first_logits")), 1e-5);
        for (cpu::Param* p : net.params()) EXPECT_LT(golden_error(plain(*p, p->grad), c.at("first_grads").at(p->name)), 1e-4) << p->name;
      }
      opt.step(s.at("lr").get<double>());
    }
    for (cpu::Param* p : net.params()) EXPECT_LT(golden_error(plain(*p, p->value), c.at("params_after").at(p->name)), 3e-5) << p->name;
    size_t stats = 0;
    for (const auto& [name, mem] : net.buffers())
      if (c.at("running_stats_after").contains(name)) {
        ++stats;
        const std::vector<float> v(mem->f32(), mem->f32() + c.at("running_stats_after").at(name).size());
        EXPECT_LT(golden_error(v, c.at("running_stats_after").at(name)), 3e-5) << name;
      }
    EXPECT_EQ(stats, c.at("running_stats_after").size());
    const auto x = c.at("eval").at("input").get<std::vector<float>>();
    std::copy(x.begin(), x.end(), net.input());
    net.forward(false);
    EXPECT_LT(golden_error({net.logits(), net.logits() + batch * classes}, c.at("eval").at("logits")), 3e-5);
  }
}

TEST(PyTorchGolden, SchedulesSetPyTorchsLearningRates) {
  const json golden = load_pytorch_golden();
  ASSERT_EQ(golden.at("schedules").size(), 3u);
  for (const json& s : golden.at("schedules")) {
    SCOPED_TRACE(s.at("name").get<std::string>());
    nn::ScheduleConfig sc;
    sc.name = s.at("name");
    if (s.contains("step_epochs")) sc.step_epochs = s.at("step_epochs"), sc.gamma = s.at("gamma");
    const double lr = s.at("lr");
    const int64_t total = s.at("total"), per_epoch = s.at("per_epoch");
    for (int64_t k = 0; k < total; ++k)
      EXPECT_NEAR(nn::learning_rate(sc, lr, k, total, per_epoch), s.at("lrs")[size_t(k)].get<double>(), 1e-9) << "step " << k;
  }
}

}  // namespace
}  // namespace dlperf::test

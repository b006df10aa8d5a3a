// A whole network on the CPU backend against the same graph run with the float64 reference
// ops: logits, loss and every parameter's gradient. This covers what single-op tests cannot:
// batchnorm+relu fusion, layout reorders between layers, flatten, and gradient accumulation
// where a residual branch rejoins.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>

#include "backend/cpu/layouts.h"
#include "backend/cpu/conv_gemm.h"
#include "backend/cpu/network.h"
#include "backend/cpu/small_layers.h"
#include "core/error.h"
#include "hw/cpu_info.h"
#include "nn/optimizer.h"
#include "op_harness.h"
#include "plan/memory.h"
#include "test_util.h"

namespace dlperf::test {
namespace {

using nlohmann::json;
using ops::OpKind;

// Runs a graph with backend/ref in float64: forward, softmax cross-entropy, backward.
struct RefNet {
  const nn::Graph& g;
  std::map<std::string, Vec> params, grads;
  std::vector<Vec> vals, dvals;
  std::vector<Vec> means, vars;
  /// Where the engine's bf16 path rounds, the reference rounds too; identity otherwise. It rounds
  /// every value and gradient it stores (all but the logits, which are fp32) and the fp32 values
  /// conv and linear read: the model input, the weights and the logits' gradient.
  std::function<Vec(const Vec&)> low = [](const Vec& v) { return v; };

  Vec& p(const nn::Node& n, const char* which) { return params[n.name + "." + which]; }

  double run(const Vec& input, const std::vector<int32_t>& labels) {
    const size_t N = g.nodes.size();
    vals.assign(N, {});
    means.assign(N, {});
    vars.assign(N, {});
    auto in = [&](const nn::Node& n, int k) -> const Vec& { return n.inputs[size_t(k)] < 0 ? input : vals[size_t(n.inputs[size_t(k)])]; };
    for (size_t i = 0; i < N; ++i) {
      const auto& n = g.nodes[i];
      const Vec& x = in(n, 0);
      const Dims& xd = n.in_dims[0];
      switch (n.kind) {
        case OpKind::conv2d: vals[i] = ref::conv2d_forward(low(x), xd, low(p(n, "weight")), n.attrs.bias ? p(n, "bias") : Vec{}, n.attrs); break;
        case OpKind::batchnorm2d: vals[i] = ref::batchnorm_forward_train(x, xd, p(n, "weight"), p(n, "bias"), n.attrs.eps, means[i], vars[i]); break;
        case OpKind::relu: vals[i] = ref::relu_forward(x); break;
        case OpKind::maxpool2d: vals[i] = ref::maxpool_forward(x, xd, n.attrs); break;
        case OpKind::avgpool2d: vals[i] = ref::avgpool_forward(x, xd, n.attrs); break;
        case OpKind::global_avgpool: vals[i] = ref::global_avgpool_forward(x, xd); break;
        case OpKind::flatten: vals[i] = x; break;
        case OpKind::linear: vals[i] = ref::linear_forward(low(x), xd, low(p(n, "weight")), n.attrs.bias ? p(n, "bias") : Vec{}, n.attrs.out_features); break;
        case OpKind::add: vals[i] = ref::add_forward(x, in(n, 1)); break;
        default: ADD_FAILURE() << "op not covered by this test";
      }
      if (i + 1 < N) vals[i] = low(vals[i]);
    }
    const double loss = ref::softmax_cross_entropy(vals.back(), labels, g.classes, 0.1);
    dvals.assign(N, {});
    dvals.back() = ref::softmax_cross_entropy_backward(vals.back(), labels, g.classes, 0.1);
    for (size_t i = N; i-- > 0;) {
      const auto& n = g.nodes[i];
      const Vec& x = in(n, 0);
      const Dims& xd = n.in_dims[0];
      const Vec& dy = dvals[i];
      std::vector<Vec> dx(n.inputs.size());
      Vec dw, db;
      switch (n.kind) {
        case OpKind::conv2d:
          ref::conv2d_backward(low(x), xd, low(p(n, "weight")), n.attrs, low(dy), dx[0], dw, db);
          break;
        case OpKind::batchnorm2d:
          ref::batchnorm_backward(x, xd, p(n, "weight"), means[i], vars[i], n.attrs.eps, dy, dx[0], dw, db);
          break;
        case OpKind::relu: dx[0] = ref::relu_backward(x, dy); break;
        case OpKind::maxpool2d: dx[0] = ref::maxpool_backward(x, xd, n.attrs, dy); break;
        case OpKind::avgpool2d: dx[0] = ref::avgpool_backward(xd, n.attrs, dy); break;
        case OpKind::global_avgpool: dx[0] = ref::global_avgpool_backward(xd, dy); break;
        case OpKind::flatten: dx[0] = dy; break;
        case OpKind::linear:
          ref::linear_backward(low(x), xd, low(p(n, "weight")), n.attrs.out_features, low(dy), dx[0], dw, db);
          break;
        case OpKind::add: dx[0] = dy, dx[1] = dy; break;
        default: break;
      }
      if (!dw.empty()) grads[n.name + ".weight"] = dw;
      if (!db.empty() && (n.kind == OpKind::batchnorm2d || n.attrs.bias)) grads[n.name + ".bias"] = db;  // a bias-free layer's db: none
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const int src = n.inputs[k];
        if (src < 0) continue;
        Vec& acc = dvals[size_t(src)];
        if (acc.empty()) {
          acc = low(dx[k]);
        } else {
          for (size_t j = 0; j < acc.size(); ++j) acc[j] += low(dx[k])[j];
          acc = low(acc);
        }
      }
    }
    return loss;
  }
};

/// x rounded to bf16 after a relative jitter of up to +-amount/2 per element (seeded), standing
/// for the engine's fp32 arithmetic, which sums in another order than float64 does.
Vec jitter_to_bf16(const Vec& x, double amount, Rng& rng) {
  Vec w(x);
  for (double& v : w) v *= 1 + amount * (rng.uniform() - 0.5);
  return round_to_bf16(w);
}

/// Largest of each parameter's gradient error, and of the logits' (key ""), between two runs.
std::map<std::string, double> spread_between(const RefNet& a, const RefNet& b) {
  std::map<std::string, double> out;
  auto err = [](const Vec& x, const Vec& y) { return rel_err(std::vector<float>(x.begin(), x.end()), y); };
  out[""] = err(a.vals.back(), b.vals.back());
  for (const auto& [name, g] : a.grads) out[name] = err(g, b.grads.at(name));
  return out;
}

// fp32 (and f32-copies, the bf16 path's conversions in f32) matches the float64 graph to
// rounding. bf16 is checked against the float64 graph that rounds to bf16 wherever the engine
// stores bf16 (RefNet::low): bf16's own error is no tolerance to hide a mistake in, since through
// batchnorms it reaches 29% of a gradient's largest entry on this small network. But a value the
// engine computes in fp32 rounds to the other side of a bf16 midpoint now and then, and each such
// flip moves what follows by a bf16 step: the tolerance is three times how far the rounded graph
// itself moves when every value is jittered by fp32-sized errors (1e-6) before rounding, so
// the engine must be as close to it as fp32 arithmetic allows.
void check_network(const json& spec, const Dims& chw, int64_t batch, const std::string& precision = "fp32") {
  const bool bf16 = precision == "bf16";
  const double loss_tol = 1e-5, logits_tol = 1e-4, grad_tol = 2e-4;
  const auto graph = nn::build_graph(nn::parse_model_spec(spec, "test"), chw, 10, batch);
  cpu::Network net(graph, 123, /*fuse=*/true, precision);
  RefNet ref{graph, {}, {}, {}, {}, {}, {}};
  for (cpu::Param* p : net.params()) {
    auto v = cpu::to_plain(p->layout, p->dims, p->value);
    ref.params[p->name] = Vec(v.begin(), v.end());
  }
  const Vec input = random_vec(size_t(numel(graph.input)), 99, -2, 2);
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < batch; ++i) labels.push_back(int32_t((i * 7) % 10));
  std::copy(input.begin(), input.end(), net.input());
  net.forward(true);
  const auto r = net.loss(labels.data(), batch, 0.1, true);
  net.backward();
  std::vector<float> logits(net.logits(), net.logits() + batch * 10);
  std::map<std::string, double> flips;  // bf16: how far fp32-sized errors move the rounded graph
  if (bf16) {  // the bf16 path really ran: the exact graph is further off than fp32 would be
    ref.run(input, labels);
    EXPECT_GT(rel_err(logits, ref.vals.back()), 1e-4);
    ref.low = round_to_bf16;
    ref.run(input, labels);
    for (uint64_t seed : {1, 2}) {
      RefNet jittered{graph, ref.params, {}, {}, {}, {}, {}};
      Rng rng(seed);
      jittered.low = [&rng](const Vec& v) { return jitter_to_bf16(v, 1e-6, rng); };
      jittered.run(input, labels);
      for (const auto& [name, e] : spread_between(jittered, ref)) flips[name] = std::max(flips[name], e);
    }
  }
  const double ref_loss = ref.run(input, labels);
  EXPECT_NEAR(r.loss, ref_loss, std::max(loss_tol, 3 * flips[""]) * std::abs(ref_loss));
  EXPECT_LT(rel_err(logits, ref.vals.back()), std::max(logits_tol, 3 * flips[""]));
  ASSERT_EQ(ref.grads.size(), net.params().size());
  for (cpu::Param* p : net.params())
    EXPECT_LT(rel_err(cpu::to_plain(p->layout, p->dims, p->grad), ref.grads[p->name]), std::max(grad_tol, 3 * flips[p->name]))
        << p->name;
}

// Layers this small run on one thread (small_layers.h); each is also checked on all the threads.
TEST(Network, ResidualCnnMatchesReferenceGraph) {
  for (const bool one_thread : {true, false}) {
    SCOPED_TRACE(one_thread ? "small layers on one thread" : "every layer on all threads");
    const cpu::ScopedSmallLayers rule(one_thread);
    check_network(residual_cnn(), {3, 12, 12}, 4);
    check_network(residual_cnn(), {1, 12, 12}, 3);  // a 1-channel input takes other layouts
  }
}

TEST(Network, Bf16ResidualCnnTracksTheReferenceGraph) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  for (const bool one_thread : {true, false}) {
    SCOPED_TRACE(one_thread ? "small layers on one thread" : "every layer on all threads");
    const cpu::ScopedSmallLayers rule(one_thread);
    check_network(residual_cnn(), {3, 12, 12}, 4, "bf16");
    check_network(residual_cnn(), {1, 12, 12}, 3, "bf16");
  }
}

// A layer too small to share between the threads runs on one: the convolutions and linear layers
// of at most kOneThreadMaxFlops, the other layers over at most kOneThreadMaxValues. Such a
// network computes what it computes on all threads, and leaves OpenMP's thread count as it was.
TEST(Network, LayersTooSmallToShareRunOnOneThread) {
  const hw::ScopedThreads two(2);  // OpenMP forks a team of two even on one CPU
  auto graph = [](const char* model, int64_t batch) { return nn::build_graph(nn::load_model(model), {1, 28, 28}, 10, batch); };
  using Names = std::vector<std::string>;
  EXPECT_EQ(cpu::Network(graph("logreg", 16), 1).one_thread_layers(), Names{"fc"});     // 0.25 MFLOP
  EXPECT_EQ(cpu::Network(graph("logreg", 64), 1).one_thread_layers(), Names{"fc"});     // 1.0 MFLOP
  EXPECT_TRUE(cpu::Network(graph("logreg", 256), 1).one_thread_layers().empty());       // 4.0 MFLOP
  EXPECT_EQ(cpu::Network(graph("mlp", 16), 1).one_thread_layers(), (Names{"relu1", "fc2"}));  // fc1: 1.6 MFLOP
  EXPECT_EQ(cpu::Network(graph("mlp", 256), 1).one_thread_layers(), (Names{"relu1", "fc2"}));  // relu1: 32,768 values
  EXPECT_EQ(cpu::Network(graph("mlp", 512), 1).one_thread_layers(), Names{"fc2"});
  const nn::Graph medium = graph("medium", 64);  // rule alone: its network would take 80 MB
  Names medium_one;
  for (size_t i = 0; i < medium.nodes.size(); ++i)
    if (cpu::runs_on_one_thread(medium, i, 2)) medium_one.push_back(medium.nodes[i].name);
  EXPECT_EQ(medium_one, (Names{"relu4", "fc2"}));
  EXPECT_EQ(cpu::step_compute_threads(graph("logreg", 16), 2), 1);  // the loader's worker has the other core
  EXPECT_EQ(cpu::step_compute_threads(graph("mlp", 16), 2), 2);
  EXPECT_EQ(cpu::step_compute_threads(graph("logreg", 16), 1), 1);
  {
    const hw::ScopedThreads one(1);
    EXPECT_TRUE(cpu::Network(graph("logreg", 16), 1).one_thread_layers().empty()) << "one thread: no team to leave";
  }
  {
    const cpu::ScopedSmallLayers all_threads(false);
    EXPECT_TRUE(cpu::Network(graph("mlp", 16), 1).one_thread_layers().empty());
    EXPECT_EQ(cpu::step_compute_threads(graph("logreg", 16), 2), 2);
  }
  // DLPERF_CPU_SMALL_LAYERS turns the rule off for comparison, and refuses what it does not know.
  ::setenv("DLPERF_CPU_SMALL_LAYERS", "all-threads", 1);
  EXPECT_TRUE(cpu::Network(graph("mlp", 16), 1).one_thread_layers().empty());
  ::setenv("DLPERF_CPU_SMALL_LAYERS", "sometimes", 1);
  try {
    cpu::small_layers_on_one_thread();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DLPERF_CPU_SMALL_LAYERS=sometimes"), std::string::npos) << e.what();
  }
  ::unsetenv("DLPERF_CPU_SMALL_LAYERS");
  // The mlp at batch 16 on one thread per small layer and on all threads: the same step.
  auto step = [&](bool one_thread) {
    const cpu::ScopedSmallLayers rule(one_thread);
    cpu::Network net(graph("mlp", 16), 5);
    const Vec input = random_vec(16 * 28 * 28, 3, -2, 2);
    std::copy(input.begin(), input.end(), net.input());
    std::vector<int32_t> labels(16);
    for (int i = 0; i < 16; ++i) labels[size_t(i)] = i % 10;
    net.forward(true);
    const double loss = net.loss(labels.data(), 16, 0, true).loss;
    net.backward();
    EXPECT_EQ(omp_get_max_threads(), 2) << "the small layers' one thread is put back";
    std::vector<std::vector<float>> grads;
    for (cpu::Param* p : net.params()) grads.push_back(cpu::to_plain(p->layout, p->dims, p->grad));
    return std::pair{loss, grads};
  };
  const auto [loss_one, grads_one] = step(true);
  const auto [loss_all, grads_all] = step(false);
  EXPECT_NEAR(loss_one, loss_all, 1e-6 * std::abs(loss_all));
  ASSERT_EQ(grads_one.size(), grads_all.size());
  for (size_t k = 0; k < grads_one.size(); ++k) EXPECT_LT(rel_err(grads_one[k], Vec(grads_all[k].begin(), grads_all[k].end())), 1e-5) << k;
}

// On a CPU with AMX the bf16 convolutions take nhwc, where oneDNN runs them on AMX tiles
// (backend/cpu/conv2d.cpp): with 16- and 32-channel maps the network still tracks the reference
// graph, and the convolution between 16-channel maps and the hidden linear layer ran there.
TEST(Network, Bf16ResidualCnnOnAmxTilesTracksTheReferenceGraph) {
  if (!hw::cpu_info().avx512_bf16) GTEST_SKIP() << "this CPU has no AVX512-BF16; bf16 training is refused on it";
  json spec = residual_cnn();
  for (json& layer : spec["layers"])
    if (layer.value("out_channels", json()) == 8) layer["out_channels"] = 16;
  check_network(spec, {3, 12, 12}, 4, "bf16");
  const nn::Graph g = nn::build_graph(nn::parse_model_spec(spec, "test"), {3, 12, 12}, 10, 4);
  const std::vector<std::string> amx = cpu::Network(g, 1, true, "bf16").amx_layers();
  if (!cpu::has_amx_kernels()) {
    EXPECT_TRUE(amx.empty());
    GTEST_SKIP() << "the network tracked the reference; no AMX here to run it on";
  }
  for (const char* layer : {"c1", "fc1"}) EXPECT_NE(std::find(amx.begin(), amx.end(), layer), amx.end()) << layer;
  EXPECT_TRUE(cpu::Network(g, 1).amx_layers().empty()) << "fp32 runs on the FMA units";
  // With every pass of those convolutions as matrix products (conv_gemm.h; the rule keeps them
  // for resnet18's deeper layers), it tracks the reference as well.
  const cpu::ScopedConvGemm products("all");
  check_network(spec, {3, 12, 12}, 4, "bf16");
  const auto layers = cpu::Network(g, 1, true, "bf16").matrix_product_layers();
  const std::pair<std::string, std::string> stem{"stem", "forward, backward-weights"},  // nothing needs the data's gradient
      c1{"c1", "forward, backward-data, backward-weights"};
  EXPECT_NE(std::find(layers.begin(), layers.end(), stem), layers.end());
  EXPECT_NE(std::find(layers.begin(), layers.end(), c1), layers.end());
}

TEST(Network, F32CopiesResidualCnnMatchesReferenceGraph) {
  check_network(residual_cnn(), {3, 12, 12}, 4, "f32-copies");
  check_network(residual_cnn(), {1, 12, 12}, 3, "f32-copies");
}

// Convolutions run as Winograd (forced here where oneDNN has the kernel, which the rule keeps
// for larger shapes) train the graph the reference does: residual_cnn with 16-channel maps.
TEST(Network, WinogradResidualCnnMatchesReferenceGraph) {
  json spec = residual_cnn();
  for (json& layer : spec["layers"])
    if (layer.value("out_channels", json()) == 8) layer["out_channels"] = 16;
  const nn::Graph g = nn::build_graph(nn::parse_model_spec(spec, "test"), {3, 12, 12}, 10, 4);
  {
    const cpu::ScopedWinograd every(cpu::WinogradUse::every_3x3);
    check_network(spec, {3, 12, 12}, 4);
    // `down` has stride 2, which the kernel does not take (the 3-channel stem it takes, padded to 16).
    const bool kernel_here = cpu::winograd_kernel_here();
    const std::vector<std::string> winograd = {"stem", "c1"};
    EXPECT_EQ(cpu::Network(g, 1).winograd_layers(), kernel_here ? winograd : std::vector<std::string>{});
  }
  const cpu::ScopedWinograd off(cpu::WinogradUse::off);
  EXPECT_TRUE(cpu::Network(g, 1).winograd_layers().empty());
}

// Weights after `steps` SGD steps on fixed random batches, as plain floats by parameter name.
std::map<std::string, std::vector<float>> weights_after_training(const std::string& precision, int steps) {
  const auto graph = nn::build_graph(nn::parse_model_spec(residual_cnn(), "test"), {3, 12, 12}, 10, 8);
  cpu::Network net(graph, 7, /*fuse=*/true, precision);
  std::vector<nn::ParamRef> refs;
  for (cpu::Param* p : net.params()) refs.push_back({p->value.f32(), p->grad.f32(), p->floats()});
  nn::Optimizer opt(nn::OptimizerConfig{}, refs);
  std::vector<int32_t> labels(8);
  for (int s = 0; s < steps; ++s) {
    const Vec x = random_vec(size_t(numel(graph.input)), 1000 + uint64_t(s), -2, 2);
    std::copy(x.begin(), x.end(), net.input());
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i * 3 + size_t(s)) % 10);
    net.forward(true);
    net.loss(labels.data(), 8, 0, true);
    net.backward();
    opt.step(0.05);
  }
  std::map<std::string, std::vector<float>> out;
  for (cpu::Param* p : net.params()) out[p->name] = cpu::to_plain(p->layout, p->dims, p->value);
  return out;
}

// The bf16 path's master weights, refreshed copies and converted gradients, run with f32
// copies, train the weights fp32 trains: the copies follow every update.
TEST(Network, F32CopiesTrainAsFp32Does) {
  const auto fp32 = weights_after_training("fp32", 10), copies = weights_after_training("f32-copies", 10);
  ASSERT_EQ(fp32.size(), copies.size());
  for (const auto& [name, w] : fp32) {
    ASSERT_TRUE(copies.count(name)) << name;
    EXPECT_LT(rel_err(copies.at(name), Vec(w.begin(), w.end())), 1e-4) << name;
  }
  EXPECT_THROW(cpu::Network(nn::build_graph(nn::parse_model_spec(residual_cnn(), "t"), {3, 12, 12}, 10, 2), 1, true, "fp16"), Error);
}

// A flatten of the model input, or of a 2-D value, is a view: no copy runs, and the gradients
// still reach every weight (also through a value read twice after the view).
TEST(Network, FlattenViewsMatchTheReferenceGraph) {
  json spec = {{"layers",
                {{{"type", "flatten"}, {"name", "f0"}},
                 {{"type", "linear"}, {"name", "fc1"}, {"out_features", 12}},
                 {{"type", "flatten"}, {"name", "f1"}},
                 {{"type", "relu"}, {"name", "r1"}},
                 {{"type", "add"}, {"name", "sum"}, {"from", "f1"}},
                 {{"type", "linear"}, {"name", "fc2"}, {"out_features", "classes"}}}}};
  check_network(spec, {2, 3, 3}, 4);
  const auto graph = nn::build_graph(nn::parse_model_spec(spec, "test"), {2, 3, 3}, 10, 4);
  EXPECT_TRUE(plan::flatten_is_a_view_on_cpu(graph, 0));
  EXPECT_TRUE(plan::flatten_is_a_view_on_cpu(graph, 2));
  // A view runs nothing.
  cpu::Network net(graph, 1);
  net.set_timing(true);
  net.forward(true);
  EXPECT_EQ(net.node_times()[0].forward_calls, 0);
  EXPECT_EQ(net.node_times()[2].forward_calls, 0);
  EXPECT_EQ(net.node_times()[1].forward_calls, 1);
}

TEST(Network, AMapReadThroughAFlattenAndByALaterConvMatchesTheReferenceGraph) {
  check_network(flatten_branch_model(), {3, 6, 6}, 3);
}

// Random graphs (random_model, without dropout, which the reference does not run): the loss,
// logits and every parameter's gradient match the float64 graph. Some graphs are ill-conditioned:
// a batchnorm behind another, through pooling or a relu, cancels much of the first one's
// parameters' effect, so their true gradient is near 0, and 1 / std over few values amplifies
// rounding. So each tolerance is at least ten times how far the float64 graph itself moves when
// every value it stores is jittered by 1e-5 (fp32 errors after a few hundred additions; the
// engine's batchnorm statistics, which the reference keeps exact, err more where the graph is
// ill-conditioned), 5e-4 at least, and a gradient whose own entries are under a thousandth of
// the graph's largest gradient entry is measured against that. Over 5000 graphs the worst took
// 0.91 of its tolerance (seed 1036, the beta of a batchnorm of the model input; 2026-11-28).
// DLPERF_RANDOM_GRAPHS=N tries N graphs (100 take about half a second).
TEST(Network, RandomGraphsMatchTheReferenceGraph) {
  const char* env = std::getenv("DLPERF_RANDOM_GRAPHS");
  const uint64_t graphs = env ? uint64_t(std::atoi(env)) : 100;
  for (uint64_t seed = 1; seed <= graphs; ++seed) {
    const json spec = random_model(seed, /*dropout=*/false);
    SCOPED_TRACE(fmt::format("seed {}: {}", seed, spec.dump()));
    // Layers this small run on one thread (small_layers.h): every other graph on all the threads.
    const cpu::ScopedSmallLayers rule(seed % 2 == 0);
    const int64_t batch = 8;
    const auto graph = nn::build_graph(nn::parse_model_spec(spec, "random"), {3, 8, 8}, 10, batch);
    cpu::Network net(graph, 123);
    RefNet ref{graph, {}, {}, {}, {}, {}, {}};
    for (cpu::Param* p : net.params()) {
      auto v = cpu::to_plain(p->layout, p->dims, p->value);
      ref.params[p->name] = Vec(v.begin(), v.end());
    }
    const Vec input = random_vec(size_t(numel(graph.input)), 99 + seed, -2, 2);
    std::vector<int32_t> labels;
    for (int64_t i = 0; i < batch; ++i) labels.push_back(int32_t((i * 7 + int64_t(seed)) % 10));
    std::copy(input.begin(), input.end(), net.input());
    net.forward(true);
    const auto r = net.loss(labels.data(), batch, 0.1, true);
    net.backward();
    const std::vector<float> logits(net.logits(), net.logits() + batch * 10);
    const double ref_loss = ref.run(input, labels);
    // A gradient's error: its largest difference over its largest entry, or over a thousandth of
    // the largest entry of any gradient where its own is smaller (a true gradient of 0).
    double largest = 0;
    for (const auto& [name, g] : ref.grads)
      for (double v : g) largest = std::max(largest, std::abs(v));
    auto error = [&](const auto& got, const Vec& want) {
      double off = 0, own = 0;
      for (size_t i = 0; i < want.size(); ++i) off = std::max(off, std::abs(double(got[i]) - want[i])), own = std::max(own, std::abs(want[i]));
      return off / std::max(own, 1e-3 * largest);
    };
    std::map<std::string, double> spread;  // how far fp32-sized errors move the float64 graph
    for (uint64_t jitter_seed : {1, 2}) {
      RefNet jittered{graph, ref.params, {}, {}, {}, {}, {}};
      Rng rng(jitter_seed);
      jittered.low = [&rng](const Vec& v) {
        Vec w(v);
        for (double& e : w) e *= 1 + 1e-5 * (rng.uniform() - 0.5);
        return w;
      };
      jittered.run(input, labels);
      spread[""] = std::max(spread[""], rel_err(std::vector<float>(jittered.vals.back().begin(), jittered.vals.back().end()), ref.vals.back()));
      for (const auto& [name, g] : jittered.grads) spread[name] = std::max(spread[name], error(g, ref.grads.at(name)));
    }
    EXPECT_NEAR(r.loss, ref_loss, 1e-5 * std::abs(ref_loss));
    EXPECT_LT(rel_err(logits, ref.vals.back()), std::max(1e-4, 10 * spread[""]));
    ASSERT_EQ(ref.grads.size(), net.params().size());
    for (cpu::Param* p : net.params())
      EXPECT_LT(error(cpu::to_plain(p->layout, p->dims, p->grad), ref.grads[p->name]), std::max(5e-4, 10 * spread[p->name])) << p->name;
  }
}

TEST(Network, GlobalPoolHeadMatchesReferenceGraph) {
  json spec = {{"layers",
                // No bias before batchnorm: its true gradient is zero, so no relative check works.
                {{{"type", "conv2d"}, {"out_channels", 16}, {"padding", 1}, {"bias", false}},
                 {{"type", "batchnorm2d"}},
                 {{"type", "relu"}},
                 {{"type", "global_avgpool"}},
                 {{"type", "flatten"}},
                 {{"type", "linear"}, {"out_features", "classes"}}}}};
  check_network(spec, {3, 7, 7}, 5);
}

}  // namespace
}  // namespace dlperf::test

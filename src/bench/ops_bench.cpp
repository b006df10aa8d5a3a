#include "bench/ops_bench.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <utility>

#include "backend/cpu/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/timer.h"
#include "hw/cpu_info.h"
#include "nn/graph.h"

namespace dlperf::bench {

double gemm_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * double(m) * double(n) * double(k); }

namespace {

void fill(cpu::Mem& m, uint64_t seed) {  // uniform in [-1, 1), never all zero
  Rng r(seed);
  float* p = m.f32();
  // The count is asked once: asked in the loop's test, oneDNN's size query took most of the quick
  // GEMM sweep's 1.7 s.
  const size_t n = cpu::floats_in(m.desc());
  for (size_t i = 0; i < n; ++i) p[i] = 2 * r.uniform() - 1;
}

// A tensor of logical `dims` in `m`'s layout, uniform in [-1, 1); a blocked layout's padding
// stays zero, as the engine keeps it (random padding would add phantom channels to a conv).
void fill_logical(cpu::Mem& m, const Dims& dims, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(size_t(numel(dims)));
  for (auto& x : v) x = 2 * r.uniform() - 1;
  cpu::from_plain(m.desc(), dims, v.data(), m);
}

}  // namespace

double conv_max_rel_error(const Dims& xd, const ops::OpAttrs& a, const std::vector<float>& x, const std::vector<float>& w,
                  const std::vector<float>& b, const std::vector<float>& y, const std::vector<float>& dy, const std::vector<float>& dw,
                  const std::vector<float>& dx) {
  const int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], K = a.out_channels, R = a.kernel, S = a.stride, P = a.padding;
  const int64_t OH = (H + 2 * P - R) / S + 1, OW = (W + 2 * P - R) / S + 1;
  auto X = [&](int64_t n, int64_t c, int64_t h, int64_t ww) { return double(x[size_t(((n * C + c) * H + h) * W + ww)]); };
  auto Wt = [&](int64_t k, int64_t c, int64_t r, int64_t q) { return double(w[size_t(((k * C + c) * R + r) * R + q)]); };
  auto DY = [&](int64_t n, int64_t k, int64_t oh, int64_t ow) { return double(dy[size_t(((n * K + k) * OH + oh) * OW + ow)]); };
  double worst = 0;
  auto score = [&](double got, double ref, double scale) { worst = std::max(worst, std::fabs(got - ref) / std::max(scale, 1e-30)); };
  Rng pick(17);
  auto any = [&](int64_t n) { return int64_t(pick.below(uint64_t(n))); };
  for (int s = 0; s < 16; ++s) {
    {  // forward: y[n, k, oh, ow] = b[k] + sum over c, r, q of x * w
      const int64_t n = any(N), k = any(K), oh = any(OH), ow = any(OW);
      double ref = b.empty() ? 0 : double(b[size_t(k)]), scale = std::fabs(ref);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t q = 0; q < R; ++q) {
            const int64_t h = oh * S - P + r, ww = ow * S - P + q;
            if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
            const double t = X(n, c, h, ww) * Wt(k, c, r, q);
            ref += t, scale += std::fabs(t);
          }
      score(y[size_t(((n * K + k) * OH + oh) * OW + ow)], ref, scale);
    }
    {  // backward-weights: dw[k, c, r, q] = sum over n, oh, ow of dy * x
      const int64_t k = any(K), c = any(C), r = any(R), q = any(R);
      double ref = 0, scale = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t h = oh * S - P + r, ww = ow * S - P + q;
            if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
            const double t = DY(n, k, oh, ow) * X(n, c, h, ww);
            ref += t, scale += std::fabs(t);
          }
      score(dw[size_t(((k * C + c) * R + r) * R + q)], ref, scale);
    }
    if (!dx.empty()) {  // backward-data: dx[n, c, h, w] = sum over the outputs that read it of dy * w
      const int64_t n = any(N), c = any(C), h = any(H), ww = any(W);
      double ref = 0, scale = 0;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t r = 0; r < R; ++r)
          for (int64_t q = 0; q < R; ++q) {
            const int64_t th = h + P - r, tw = ww + P - q;
            if (th < 0 || tw < 0 || th % S || tw % S || th / S >= OH || tw / S >= OW) continue;
            const double t = DY(n, k, th / S, tw / S) * Wt(k, c, r, q);
            ref += t, scale += std::fabs(t);
          }
      score(dx[size_t(((n * C + c) * H + h) * W + ww)], ref, scale);
    }
  }
  return worst;
}

namespace {

// `repeats` samples of the rate of `work` units per second, after two warm-up calls.
template <class F>
std::vector<double> rates_of(int repeats, double work, F&& run) {
  std::vector<double> rates;
  for (int r = -2; r < repeats; ++r) {
    const double t0 = now_s();
    run();
    const double dt = now_s() - t0;
    if (r >= 0) rates.push_back(work / dt);
  }
  return rates;
}

// One round of GEMM shape `g`: its input copies made, `g.repeats` samples (GFLOP/s) after two
// warm-ups, sampled outputs checked against float64 (g.max_rel_error keeps the worst of the
// rounds). The copies are freed after: a sweep's shapes held together would take hundreds of MiB.
std::vector<double> gemm_round(GemmPoint& g) {
  using namespace dnnl;
  const int64_t m = g.m, n = g.n, k = g.k;
  const cpu::md a_md({m, k}, cpu::dt::f32, cpu::tag::ab), b_md({k, n}, cpu::dt::f32, cpu::tag::ab), c_md({m, n}, cpu::dt::f32, cpu::tag::ab);
  // Inputs rotate over enough copies to span twice the last-level cache, so every call reads
  // its operands from memory as a training step does, not from the cache the last call warmed.
  const double set_bytes = double(a_md.get_size() + b_md.get_size() + c_md.get_size());
  const double llc = double(std::max<int64_t>(hw::cpu_info().l3_bytes, 8 << 20));
  const int sets = g.rotated_sets = int(std::clamp(std::ceil(2 * llc / set_bytes), 1.0, 512.0));
  std::vector<cpu::Mem> as, bs, cs;
  for (int r = 0; r < sets; ++r) {
    as.emplace_back(a_md, MemCategory::workspace), bs.emplace_back(b_md, MemCategory::workspace), cs.emplace_back(c_md, MemCategory::workspace);
    fill(as.back(), 1), fill(bs.back(), 2);
    cs.back().zero();  // touched now: a first write in a timed call would pay its page faults
  }
  const cpu::Mem &a = as[0], &b = bs[0], &c = cs[0];
  auto pd = matmul::primitive_desc(matmul::desc(a_md, b_md, c_md), cpu::default_attr(), cpu::engine());
  const cpu::Prim p = cpu::Prim::of<matmul>(pd);
  const double flops = gemm_flops(m, n, k);
  const int calls = int(std::clamp(2e8 / flops, 1.0, 1000.0));  // about 1 ms or more a sample
  int next = 0;
  std::vector<double> samples = rates_of(g.repeats, flops * calls / 1e9, [&] {
    for (int i = 0; i < calls; ++i, next = (next + 1) % sets)
      cpu::run(p, {{DNNL_ARG_SRC, as[size_t(next)].mem}, {DNNL_ARG_WEIGHTS, bs[size_t(next)].mem}, {DNNL_ARG_DST, cs[size_t(next)].mem}});
  });
  // Validate the first set's output: run it once more on its own, then sampled outputs against
  // a float64 dot product.
  cpu::run(p, {{DNNL_ARG_SRC, a.mem}, {DNNL_ARG_WEIGHTS, b.mem}, {DNNL_ARG_DST, c.mem}});
  Rng pick(3);
  for (int s = 0; s < 16; ++s) {
    const int64_t i = int64_t(pick.below(uint64_t(m))), j = int64_t(pick.below(uint64_t(n)));
    double ref = 0, scale = 0;
    for (int64_t t = 0; t < k; ++t) {
      const double x = double(a.f32()[i * k + t]) * double(b.f32()[t * n + j]);
      ref += x, scale += std::abs(x);
    }
    g.max_rel_error = std::max(g.max_rel_error, std::abs(double(c.f32()[i * n + j]) - ref) / std::max(scale, 1e-30));
  }
  check(g.max_rel_error < 1e-5, fmt::format("GEMM {}x{}x{} gave wrong results (relative error {:.2g})", m, n, k, g.max_rel_error));
  return samples;
}

}  // namespace

std::vector<GemmPoint> gemm_sweep(const Options& o) {
  std::vector<GemmPoint> out;
  auto shape = [&](int64_t m, int64_t n, int64_t k) {
    out.push_back({m, n, k, {}, 0, o.quick ? 3 : 5, kRounds, 0, 1, omp_get_max_threads()});
  };
  for (int64_t s : o.quick ? std::vector<int64_t>{256, 1024} : std::vector<int64_t>{128, 256, 512, 1024, 2048}) shape(s, s, s);
  // Dense layers of training: batch x in -> out (medium fc1 and large fc1 on 1x28x28, at batch 64 and 256).
  for (int64_t b : {64, 256}) shape(b, 150, 1152), shape(b, 1500, 2304);
  // In rounds, as the memory sweep (kRounds): one round's samples of a shape lie milliseconds
  // apart, and a VM's neighbour halved all of them now and then (6 of 100 quick sweeps on the
  // Zen 4 VM had a row at 86-134 GFLOP/s, where the shapes' medians are 155-215).
  const auto rounds = in_rounds(out.size(), [&](size_t i) { return gemm_round(out[i]); });
  for (size_t i = 0; i < out.size(); ++i) std::tie(out[i].gflops, out[i].best_round_gflops) = best_round(rounds[i]);
  return out;
}

namespace {
// A layout as oneDNN's format tags name it.
std::string layout_name(const cpu::md& m, const Dims& d) {
  for (const auto& [t, name] : {std::pair{cpu::tag::nchw, "nchw"}, std::pair{cpu::tag::nhwc, "nhwc"},
                                std::pair{cpu::tag::nChw8c, "nChw8c"}, std::pair{cpu::tag::nChw16c, "nChw16c"}})
    if (m == cpu::md(cpu::to_dnnl(d), m.data_type(), t)) return name;
  return "blocked";
}
}  // namespace

namespace {

// One round's samples of a conv's timed passes: forward and backward-weights in GFLOP/s,
// backward with the data gradient too in calls per second (backward-data is derived from it).
struct ConvRound {
  std::vector<double> forward, backward_weights, backward_both;
};

// One round of conv layer `n` on the input layout training gives it (`given`): the op and its
// tensors' copies made, `c.repeats` samples of each pass after two warm-ups, the three passes
// checked against float64 (c.max_rel_error keeps the worst of the rounds), all freed after.
ConvRound conv_round(const nn::Node& n, const cpu::md& given, ConvPoint& c) {
  const bool first = !n.needs_dx;  // the first layer computes no data gradient
  // On the input layout training gives it (the previous layer's, blocked by channels): on a
  // plain one oneDNN runs other kernels (im2col and GEMM for medium's conv2 and conv3, 0.5-0.6x
  // as fast on the Zen 5).
  auto op = cpu::make_op(n.kind, n.attrs, {given}, n.in_dims, n.name, {.need_dx = !first});
  c.input_layout = layout_name(op->input_md(0), n.in_dims[0]);
  c.algorithm = op->algorithm();
  // As the GEMMs: the tensors rotate over enough copies to span twice the last-level cache,
  // so every call reads them from memory, not from the cache the last call warmed.
  const double set_bytes = double(2 * op->input_md(0).get_size() + 2 * op->output_md().get_size());
  const double llc = double(std::max<int64_t>(hw::cpu_info().l3_bytes, 8 << 20));
  const int sets = c.rotated_sets = int(std::clamp(std::ceil(2 * llc / set_bytes), 1.0, 64.0));
  std::vector<cpu::Mem> xs, ys, dys, dxs;
  for (int r = 0; r < sets; ++r) {
    xs.emplace_back(op->input_md(0), MemCategory::workspace), ys.emplace_back(op->output_md(), MemCategory::workspace);
    dys.emplace_back(op->output_md(), MemCategory::workspace), dxs.emplace_back(op->input_md(0), MemCategory::workspace);
    fill_logical(xs.back(), n.in_dims[0], 4), fill_logical(dys.back(), n.out_dims, 5);
    ys.back().zero(), dxs.back().zero();  // touched now: a first write in a timed call would pay its page faults
  }
  for (size_t k = 0; k < op->params().size(); ++k) fill_logical(op->params()[k]->value, op->params()[k]->dims, 6 + k);
  const auto& cost = n.cost;
  const int calls = int(std::clamp(2e8 / cost.forward.flops, 1.0, 1000.0));  // about 1 ms or more a sample
  auto repeat = [calls](auto&& f) {
    return [calls, &f] {
      for (int i = 0; i < calls; ++i) f();
    };
  };
  size_t next = 0;
  auto turn = [&] { return std::exchange(next, (next + 1) % size_t(sets)); };
  auto fwd = [&] {
    const size_t i = turn();
    op->forward({xs[i].mem}, ys[i].mem, true);
  };
  auto bww = [&] {
    const size_t i = turn();
    op->backward({xs[i].mem}, ys[i].mem, dys[i].mem, {dnnl::memory()});
  };
  auto bwd_both = [&] {
    const size_t i = turn();
    op->backward({xs[i].mem}, ys[i].mem, dys[i].mem, {dxs[i].mem});
  };
  ConvRound r;
  r.forward = rates_of(c.repeats, calls * cost.forward.flops / 1e9, repeat(fwd));
  // backward() runs weights then data; timing it with and without the data gradient separates them.
  r.backward_weights = rates_of(c.repeats, calls * cost.backward_weight.flops / 1e9, repeat(bww));
  if (!first) r.backward_both = rates_of(c.repeats, double(calls), repeat(bwd_both));
  // Validate set 0's three passes, run once more on their own, at sampled points.
  op->forward({xs[0].mem}, ys[0].mem, true);
  op->backward({xs[0].mem}, ys[0].mem, dys[0].mem, {first ? dnnl::memory() : dxs[0].mem});
  const auto& ps = op->params();
  auto plain = [](const cpu::Mem& m, const Dims& d) { return cpu::to_plain(m.desc(), d, m); };
  const double error = conv_max_rel_error(n.in_dims[0], n.attrs, plain(xs[0], n.in_dims[0]), plain(ps[0]->value, ps[0]->dims),
                                          ps.size() > 1 ? plain(ps[1]->value, ps[1]->dims) : std::vector<float>{},
                                          plain(ys[0], n.out_dims), plain(dys[0], n.out_dims), plain(ps[0]->grad, ps[0]->dims),
                                          first ? std::vector<float>{} : plain(dxs[0], n.in_dims[0]));
  c.max_rel_error = std::max(c.max_rel_error, error);
  check(c.max_rel_error < 1e-5, fmt::format("conv {} of {} gave wrong results (relative error {:.2g})", n.name, c.model, c.max_rel_error));
  return r;
}

}  // namespace

std::vector<ConvPoint> conv_sweep(const Options& o, const std::vector<std::string>& models, const Dims& chw, int64_t batch) {
  std::vector<ConvPoint> out;
  std::vector<nn::Graph> graphs;  // the layers below point into them
  graphs.reserve(models.size());
  std::vector<std::pair<const nn::Node*, cpu::md>> layers;  // each with the input layout training gives it
  std::set<std::string> seen;
  for (const auto& model : models) {
    const nn::Graph& g = graphs.emplace_back(nn::build_graph(nn::load_model(model), chw, 10, batch));
    const std::vector<std::vector<cpu::md>> given = cpu::given_input_layouts(g, "fp32");
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const nn::Node& n = g.nodes[i];
      if (n.kind != ops::OpKind::conv2d) continue;
      const std::string key = fmt::format("{}/{}/{}/{}/{}", dims_str(n.in_dims[0]), n.attrs.out_channels, n.attrs.kernel,
                                          n.attrs.stride, n.attrs.padding);
      if (!seen.insert(key).second) continue;  // the same shape again (ResNet blocks repeat)
      layers.emplace_back(&n, given[i][0]);
      out.push_back({.model = model, .layer = n.name, .input = n.in_dims[0], .attrs = n.attrs, .repeats = o.quick ? 3 : 4,
                     .rounds = kRounds, .threads = omp_get_max_threads()});
    }
  }
  // In rounds, as the GEMMs: a VM's neighbour slowed one round of a layer now and then (13% of
  // 150 quick sweeps of medium on the Zen 4 VM had a pass under 75% of its usual median).
  const auto rounds = in_rounds(out.size(), [&](size_t i) { return conv_round(*layers[i].first, layers[i].second, out[i]); });
  for (size_t i = 0; i < out.size(); ++i) {
    auto pass = [&](std::vector<double> ConvRound::*samples) {
      std::vector<std::vector<double>> per_round;
      for (const auto& r : rounds[i]) per_round.push_back(r.*samples);
      return best_round(per_round);
    };
    ConvPoint& c = out[i];
    std::tie(c.forward_samples, c.forward_gflops) = pass(&ConvRound::forward);
    std::tie(c.backward_weights_samples, c.backward_weights_gflops) = pass(&ConvRound::backward_weights);
    if (layers[i].first->needs_dx) {  // seconds a call with the data gradient, minus without it
      const ops::OpCost& cost = layers[i].first->cost;
      const double both_calls_per_s = pass(&ConvRound::backward_both).second;
      const double data_s = std::max(1.0 / both_calls_per_s - cost.backward_weight.flops / 1e9 / c.backward_weights_gflops, 1e-9);
      c.backward_data_gflops = cost.backward_data.flops / 1e9 / data_s;
    }
  }
  return out;
}

DispatchResult cpu_dispatch(const Options& o) {
  using namespace dnnl;
  // oneDNN forks as many threads as OpenMP's count when it executes.
  const hw::ScopedThreads scoped_threads(o.threads);
  const int threads = scoped_threads.count();
  const cpu::md desc({16, 64}, cpu::dt::f32, cpu::tag::ab);
  // Untracked buffers: the plan measures this on the spot, sometimes inside a training run (the
  // profile's ceilings), whose tracked peak memory must not grow by them.
  std::vector<float> xs(cpu::floats_in(desc)), ys(xs.size(), 0.f);
  Rng rng(7);
  for (float& v : xs) v = 2 * rng.uniform() - 1;
  const dnnl::memory x(desc, cpu::engine(), xs.data()), y(desc, cpu::engine(), ys.data());
  const cpu::Prim relu = cpu::Prim::of<eltwise_forward>(eltwise_forward::primitive_desc(
      eltwise_forward::desc(prop_kind::forward_training, algorithm::eltwise_relu, desc, 0.f), cpu::default_attr(), cpu::engine()));
  DispatchResult r{threads, {}, o.quick ? 5 : 15, o.quick ? 500 : 2000};
  std::vector<double> rates;
  for (int rep = -2; rep < r.repeats; ++rep) {  // two warm-up samples
    const double rate = calls_per_s_within(r.calls, 0.01, [&] { cpu::run(relu, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DST, y}}); });
    if (rep >= 0) rates.push_back(rate);
  }
  const Spread calls_per_s = spread_of(rates);
  r.us = {1e6 / calls_per_s.median, 1e6 / calls_per_s.max, 1e6 / calls_per_s.min};
  for (size_t i = 0; i < xs.size(); ++i) check(ys[i] == std::max(xs[i], 0.f), "the dispatch benchmark's relu gave wrong results");
  return r;
}

double cpu_call_now_us(int threads) {
  Options o;
  o.threads = threads;
  o.quick = true;
  return cpu_dispatch(o).us.min;
}

nlohmann::json to_json(const DispatchResult& r) {
  return {{"threads", r.threads}, {"us_median", r.us.median}, {"us_min", r.us.min}, {"us_max", r.us.max},
          {"repeats", r.repeats}, {"calls", r.calls}, {"primitive", "oneDNN eltwise relu forward, 16x64 f32"}};
}

nlohmann::json to_json(const GemmPoint& p) {
  return {{"m", p.m}, {"n", p.n}, {"k", p.k}, {"flops", gemm_flops(p.m, p.n, p.k)}, {"gflops_best_round", p.best_round_gflops},
          {"gflops_median", p.gflops.median}, {"gflops_min", p.gflops.min}, {"gflops_max", p.gflops.max}, {"repeats", p.repeats},
          {"rounds", p.rounds}, {"max_rel_error", p.max_rel_error},
          {"rotated_input_sets", p.rotated_sets}, {"threads", p.threads}};
}

nlohmann::json to_json(const ConvPoint& p) {
  return {{"model", p.model}, {"layer", p.layer}, {"input", p.input}, {"out_channels", p.attrs.out_channels},
          {"kernel", p.attrs.kernel}, {"stride", p.attrs.stride}, {"padding", p.attrs.padding},
          {"forward_gflops", p.forward_gflops}, {"forward_gflops_median", p.forward_samples.median},
          {"forward_gflops_min", p.forward_samples.min}, {"forward_gflops_max", p.forward_samples.max},
          {"backward_data_gflops", p.backward_data_gflops}, {"backward_weights_gflops", p.backward_weights_gflops},
          {"backward_weights_gflops_median", p.backward_weights_samples.median},
          {"backward_weights_gflops_min", p.backward_weights_samples.min},
          {"backward_weights_gflops_max", p.backward_weights_samples.max}, {"repeats", p.repeats}, {"rounds", p.rounds},
          {"max_rel_error", p.max_rel_error}, {"rotated_input_sets", p.rotated_sets}, {"threads", p.threads},
          {"input_layout", p.input_layout}, {"algorithm", p.algorithm}, {"padding_share", p.padding_share()}};
}

}  // namespace dlperf::bench

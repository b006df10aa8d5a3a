#include "backend/cpu/small_layers.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "hw/cpu_info.h"
#include "plan/memory.h"

namespace dlperf::cpu {

namespace {
int scoped = -1;  // ScopedSmallLayers's: -1 none, 0 off, 1 on
}

bool small_layers_on_one_thread() {
  if (scoped >= 0) return scoped == 1;
  const char* env = std::getenv("DLPERF_CPU_SMALL_LAYERS");
  const std::string asked = env && *env ? env : "one-thread";
  check(asked == "one-thread" || asked == "all-threads",
        fmt::format("DLPERF_CPU_SMALL_LAYERS={} is neither one-thread nor all-threads", asked),
        "unset it, or set one-thread (the rule: layers too small to share run on one thread) or all-threads (every layer on all)");
  return asked == "one-thread";
}

ScopedSmallLayers::ScopedSmallLayers(bool on_one_thread) : before_(scoped) { scoped = on_one_thread ? 1 : 0; }
ScopedSmallLayers::~ScopedSmallLayers() { scoped = before_; }

bool runs_on_one_thread(const nn::Graph& g, size_t i, int threads) {
  if (threads <= 1 || plan::relu_fused_on_cpu(g, i) || plan::flatten_is_a_view_on_cpu(g, i) || !small_layers_on_one_thread())
    return false;
  const nn::Node& n = g.nodes[i];
  if (n.kind == ops::OpKind::conv2d || n.kind == ops::OpKind::linear) return n.cost.forward.flops <= kOneThreadMaxFlops;
  int64_t values = numel(n.out_dims);
  for (const Dims& d : n.in_dims) values += numel(d);
  return values <= kOneThreadMaxValues;
}

int step_compute_threads(const nn::Graph& g, int threads) {
  if (threads <= 1) return threads;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (plan::relu_fused_on_cpu(g, i) || plan::flatten_is_a_view_on_cpu(g, i)) continue;
    if (!runs_on_one_thread(g, i, threads)) return threads;
    for (const auto& p : g.nodes[i].params)
      if (numel(p.dims) > hw::kParallelMinElements) return threads;
  }
  return 1;
}

}  // namespace dlperf::cpu

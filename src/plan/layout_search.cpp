#include "plan/layout_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace dlperf::plan {

std::vector<int64_t> divisors(int64_t n, int64_t at_most) {
  std::vector<int64_t> out;
  for (int64_t k = 1; k <= std::min(n, at_most); ++k)
    if (n % k == 0) out.push_back(k);
  return out;
}

namespace {

// The user's value where they set one, else the candidates.
std::vector<int64_t> or_fixed(int64_t fixed, std::vector<int64_t> candidates) {
  return fixed > 0 ? std::vector<int64_t>{fixed} : candidates;
}

}  // namespace

LayoutSearch search_layouts(const JobSpec& job, const Device& d, int64_t devices, const LayoutFixed& fixed, double grid, double pue) {
  check(job.transformer.has_value(), "the layout search plans Transformers");
  check(devices >= 1, "--devices must be at least 1");
  const TransformerSpec& t = *job.transformer;
  LayoutSearch out;
  out.least_memory = std::numeric_limits<double>::infinity();
  const std::vector<std::string> checkpointing =
      fixed.checkpointing.empty() ? std::vector<std::string>{"none", "selective", "full"} : std::vector<std::string>{fixed.checkpointing};
  // Megatron keeps tensor parallelism inside a node: its all-reduces come every layer.
  for (int64_t tp : or_fixed(fixed.tp, divisors(t.heads, job.node_size))) {
    for (int64_t pp : or_fixed(fixed.pp, divisors(t.layers, t.layers))) {
      if (devices % tp != 0 || (devices / tp) % pp != 0) continue;
      const int64_t dp = devices / tp / pp;
      if (job.global_batch % dp != 0) continue;  // each replica takes whole micro-batches
      const int64_t per_replica = job.global_batch / dp;
      std::vector<int64_t> mbs;
      for (int64_t mb = 1; mb <= per_replica; mb *= 2)
        if (per_replica % mb == 0) mbs.push_back(mb);
      std::vector<int64_t> vps = {1};
      if (pp > 1)
        for (int64_t v : divisors(t.layers / pp, 8))
          if (v > 1) vps.push_back(v);
      for (int64_t mb : or_fixed(fixed.micro_batch, mbs)) {
        if (per_replica % mb != 0) continue;
        for (int64_t vp : or_fixed(fixed.vp, vps)) {
          if (vp > 1 && (pp == 1 || (t.layers / pp) % vp != 0)) continue;
          for (int zero = 0; zero <= 3; ++zero) {
            if ((fixed.zero >= 0 && zero != fixed.zero) || (zero > 0 && dp == 1 && fixed.zero < 0)) continue;
            for (const std::string& ck : checkpointing) {
              JobSpec j = job;
              j.layout = Layout{dp, tp, pp, vp, zero, ck};
              j.micro_batch = mb;
              ++out.tried;
              // Memory first: estimate() looks for what would fit a layout that does not, a search of its own.
              const double bytes = transformer_memory(t, mb, j.precision, j.optimizer, j.layout, micro_batches(j)).total();
              out.least_memory = std::min(out.least_memory, bytes);
              if (bytes > kSearchMemoryShare * d.memory_gb * 1e9) continue;
              TargetEstimate e = estimate(j, d, grid, pue);
              // Not a layout's fault (a precision the device lacks): every layout would say the same.
              check(e.unsupported.empty(), fmt::format("{} cannot run this job: {}", d.id, e.unsupported),
                    "pick a --precision it has, or put another target first in --targets");
              out.fitting.push_back({j.layout, mb, std::move(e)});
            }
          }
        }
      }
    }
  }
  check(out.tried > 0,
        fmt::format("no layout of {} devices to try: the fixed degrees (tp {}, pp {}) must divide the devices, tp the {} heads "
                    "(at most {} a node), pp the {} layers, and the data-parallel rest the batch of {}",
                    devices, fixed.tp > 0 ? fmt::format("{}", fixed.tp) : "any", fixed.pp > 0 ? fmt::format("{}", fixed.pp) : "any",
                    t.heads, job.node_size, t.layers, job.global_batch),
        "pick --devices, --tp and --pp that divide each other, or a --batch-size the replicas can split");
  // At the same step the simpler layout goes first: the model does not see what ZeRO stages 1-2's
  // extra bookkeeping, checkpointing's memory traffic, more pipeline stages or a smaller
  // micro-batch (GEMMs of fewer rows) cost, and each costs something on a real cluster.
  const auto rank = [](const LayoutChoice& c) {
    const std::string& ck = c.layout.checkpointing;
    return std::tuple{c.layout.zero, ck == "none" ? 0 : ck == "selective" ? 1 : 2, c.layout.vp, c.layout.pp, c.layout.tp, -c.micro_batch,
                      c.estimate.memory};
  };
  std::stable_sort(out.fitting.begin(), out.fitting.end(), [&](const LayoutChoice& a, const LayoutChoice& b) {
    const double sa = a.estimate.step_s, sb = b.estimate.step_s;
    if (std::fabs(sa - sb) > 1e-9 * std::max(sa, sb)) return sa < sb;
    return rank(a) < rank(b);
  });
  return out;
}

}  // namespace dlperf::plan

#include "plan/grad_overlap.h"

#include <algorithm>

namespace dlperf::plan {

BucketRule ddp_buckets() {
  constexpr double kMiB = 1024.0 * 1024.0;
  return {1 * kMiB, 25 * kMiB};
}

BucketRule megatron_buckets(double dp, double gradient_bytes_per_param) {
  const double params = std::max(40e6, 1e6 * dp);
  return {params * gradient_bytes_per_param, params * gradient_bytes_per_param};
}

OverlappedReduction overlap_reduction(const std::vector<GradientReady>& ready, double backward_s, const BucketRule& rule,
                                      const std::function<double(double)>& reduce_s) {
  OverlappedReduction r;
  double stream_free_s = 0;  // when the communication stream finishes what it was given
  double filled = 0;
  const auto send = [&](double at_s) {  // the bucket so far goes out, at_s into the backward pass
    const double t = reduce_s(filled), start = std::max(stream_free_s, at_s);
    stream_free_s = start + t;
    r.hidden_s += std::clamp(backward_s - start, 0.0, t);  // summed, not subtracted: exactly 0 where nothing is hidden
    r.reduce_s += t;
    ++r.buckets;
    filled = 0;
  };
  for (const GradientReady& g : ready) {
    filled += g.bytes;
    if (filled >= (r.buckets == 0 ? rule.first_bytes : rule.bytes)) send(std::min(g.at_s, backward_s));
  }
  if (filled > 0) send(backward_s);
  r.exposed_s = r.reduce_s - r.hidden_s;
  return r;
}

}  // namespace dlperf::plan

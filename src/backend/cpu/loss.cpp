// Softmax cross-entropy with label smoothing, fused with its gradient: one pass over the
// logits (N x classes is tiny next to the network, so plain loops are enough).
#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.h"

namespace dlperf::cpu {

LossResult softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t n,
                                 int64_t classes, int64_t valid, double eps, float* dlogits) {
  LossResult r;
  std::vector<double> p(static_cast<size_t>(classes), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const float* z = logits + i * classes;
    if (i >= valid) {
      if (dlogits) std::fill_n(dlogits + i * classes, classes, 0.f);
      continue;
    }
    const int64_t arg = std::max_element(z, z + classes) - z;
    const double mx = z[arg];
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += (p[c] = std::exp(double(z[c]) - mx));
    const double log_sum = std::log(sum);
    double mean_neg_logp = 0;
    for (int64_t c = 0; c < classes; ++c) mean_neg_logp += (log_sum - (z[c] - mx)) / double(classes);
    const double nll = log_sum - (z[labels[i]] - mx);
    r.loss += (1 - eps) * nll + eps * mean_neg_logp;
    r.correct += arg == labels[i];
    if (dlogits)
      for (int64_t c = 0; c < classes; ++c) {
        const double target = (c == labels[i] ? 1 - eps : 0.0) + eps / double(classes);
        dlogits[i * classes + c] = float((p[c] / sum - target) / double(valid));
      }
  }
  r.loss /= double(std::max<int64_t>(valid, 1));
  return r;
}

}  // namespace dlperf::cpu

// The float64 reference backend: plain loops for every op, the oracle of every test.
//
// Never fast, always obvious. Tensors are dense row-major NCHW (or NC) vectors of double.
// Gradients of these functions are checked against finite differences; every other backend
// is checked against these functions.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op.h"

namespace dlperf::ref {

using Vec = std::vector<double>;

Vec conv2d_forward(const Vec& x, const Dims& xd, const Vec& w, const Vec& b, const ops::OpAttrs& a);
/// dx, dw, db are overwritten; db is left empty when the conv has no bias.
void conv2d_backward(const Vec& x, const Dims& xd, const Vec& w, const ops::OpAttrs& a,
                     const Vec& dy, Vec& dx, Vec& dw, Vec& db);

/// Training mode: normalizes with the batch's mean and biased variance (returned).
Vec batchnorm_forward_train(const Vec& x, const Dims& xd, const Vec& gamma, const Vec& beta,
                            double eps, Vec& mean, Vec& var);
Vec batchnorm_forward_eval(const Vec& x, const Dims& xd, const Vec& gamma, const Vec& beta,
                           const Vec& running_mean, const Vec& running_var, double eps);
void batchnorm_backward(const Vec& x, const Dims& xd, const Vec& gamma, const Vec& mean,
                        const Vec& var, double eps, const Vec& dy, Vec& dx, Vec& dgamma,
                        Vec& dbeta);

Vec relu_forward(const Vec& x);
Vec relu_backward(const Vec& x, const Vec& dy);

Vec maxpool_forward(const Vec& x, const Dims& xd, const ops::OpAttrs& a);
Vec maxpool_backward(const Vec& x, const Dims& xd, const ops::OpAttrs& a, const Vec& dy);
/// Average pooling counting padded zeros (PyTorch's count_include_pad=True).
Vec avgpool_forward(const Vec& x, const Dims& xd, const ops::OpAttrs& a);
Vec avgpool_backward(const Dims& xd, const ops::OpAttrs& a, const Vec& dy);
Vec global_avgpool_forward(const Vec& x, const Dims& xd);
Vec global_avgpool_backward(const Dims& xd, const Vec& dy);

/// y[N,O] = x[N,I] w[O,I]^T + b[O]
Vec linear_forward(const Vec& x, const Dims& xd, const Vec& w, const Vec& b, int64_t out);
void linear_backward(const Vec& x, const Dims& xd, const Vec& w, int64_t out, const Vec& dy,
                     Vec& dx, Vec& dw, Vec& db);

Vec add_forward(const Vec& a, const Vec& b);

/// y = x * keep / (1 - p), keep[i] in {0, 1}.
Vec dropout_forward(const Vec& x, const std::vector<uint8_t>& keep, double p);
Vec dropout_backward(const Vec& dy, const std::vector<uint8_t>& keep, double p);

/// Mean over the batch of cross-entropy with label smoothing (PyTorch's definition).
double softmax_cross_entropy(const Vec& logits, const std::vector<int32_t>& labels,
                             int64_t classes, double smoothing);
Vec softmax_cross_entropy_backward(const Vec& logits, const std::vector<int32_t>& labels,
                                   int64_t classes, double smoothing);

}  // namespace dlperf::ref

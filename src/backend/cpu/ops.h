// The CPU ops over oneDNN (and a little own code where oneDNN has no primitive). Each one is
// built for fixed shapes: it asks oneDNN for primitives once and runs them every step.
//
// `src` is the layout the producer has; an op that can take it as is (pooling, batchnorm,
// relu) keeps it, one that has a preference (conv, linear) states it via input_md().
#pragma once

#include "backend/cpu/common.h"
#include "ops/op.h"

namespace dlperf::cpu {

/// Makes the op for `kind`. `in` are the producer layouts, `dims` the logical input shapes.
/// `fuse_relu` is only valid for batchnorm2d (a following relu runs inside it).
/// `seed` drives dropout masks. Without `need_dx` an op may skip computing its input's
/// gradient (the first layer: nothing needs the gradient of the data). `compute` says what conv2d
/// and linear compute from (common.h); other ops ignore it.
std::unique_ptr<Op> make_op(ops::OpKind kind, const ops::OpAttrs& a, const std::vector<md>& in,
                            const std::vector<Dims>& dims, const std::string& name,
                            bool fuse_relu = false, uint64_t seed = 0, bool need_dx = true,
                            Compute compute = Compute::fp32);

/// Dropout's mask for one step is a function of (seed, step, element) only.
void set_dropout_step(uint64_t step);

/// Softmax cross-entropy with label smoothing over plain [N, C] logits. Rows at or past
/// `valid` (padding of a last, partial batch) count for nothing.
struct LossResult {
  double loss = 0;      ///< mean over valid rows
  int64_t correct = 0;  ///< argmax == label among valid rows
};
LossResult softmax_cross_entropy(const float* logits, const int32_t* labels, int64_t n,
                                 int64_t classes, int64_t valid, double smoothing,
                                 float* dlogits /* nullable */);

}  // namespace dlperf::cpu

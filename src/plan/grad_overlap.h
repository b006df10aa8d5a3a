// Data-parallel gradient reduction overlapped with the backward pass, as frameworks do it:
// gradients go into buckets in the order the backward pass produces them (last layer first), and
// each bucket's all-reduce starts as soon as it is full, one after another on a communication
// stream, while the backward pass goes on. The step waits only for what is still running when
// the backward pass ends: the last bucket's all-reduce, which starts about then (the first
// layer's gradients come last), and whatever the communication could not fit in before.
//
// PyTorch's DistributedDataParallel does this by default (buckets of 25 MiB, the first 1 MiB so
// that communication starts early); Megatron-LM with --overlap-grad-reduce (off by default there),
// in buckets of max(40M, 1M x dp) parameters, during the last micro-batch's backward pass.
//
// With ZeRO (Megatron's distributed optimizer) the buckets are reduce-scatters, and the
// parameters' all-gathers come after the optimizer's step, not overlapped (targets.cpp).
//
// Not modelled: the collectives' kernels share the GPU with the backward pass's and slow it
// somewhat; overlapping the parameters' gathers with the next forward pass (Megatron's
// --overlap-param-gather, FSDP's prefetching). The bucket order is the order the gradients are
// done in, as DDP's is from its second step.
#pragma once

#include <functional>
#include <vector>

namespace dlperf::plan {

/// Gradient bytes the backward pass finishes `at_s` seconds after it starts.
struct GradientReady {
  double at_s = 0, bytes = 0;
};

/// How a framework fills its buckets: the first up to `first_bytes`, the others up to `bytes`.
/// A bucket goes out once it holds at least its cap, or when the backward pass ends.
struct BucketRule {
  double first_bytes = 0, bytes = 0;
};
/// PyTorch DDP's defaults: bucket_cap_mb = 25, the first bucket 1 MiB.
BucketRule ddp_buckets();
/// Megatron-LM's default with --overlap-grad-reduce: max(40M, 1M x dp) parameters a bucket, of
/// `gradient_bytes_per_param` each.
BucketRule megatron_buckets(double dp, double gradient_bytes_per_param);

struct OverlappedReduction {
  int buckets = 0;
  double reduce_s = 0;   ///< all buckets' all-reduces, end to end (each pays its own latency)
  double hidden_s = 0;   ///< what of it runs before the backward pass ends
  double exposed_s = 0;  ///< what of it runs on after the backward pass ends: the step waits for it
};

/// The reduction of `ready` (in the order the backward pass produces them, at_s not decreasing)
/// over a backward pass of `backward_s`, each bucket reduced in `reduce_s(bytes)` seconds.
OverlappedReduction overlap_reduction(const std::vector<GradientReady>& ready, double backward_s, const BucketRule& rule,
                                      const std::function<double(double)>& reduce_s);

}  // namespace dlperf::plan

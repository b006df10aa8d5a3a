// The fastest Megatron layouts of a Transformer job on a given number of devices: every data x
// tensor x pipeline split (tensor parallelism inside a node), interleaving, micro-batch, ZeRO
// stage and activation checkpointing the job allows, planned as `estimate` plans one, those that
// fit kept, fastest first. What a user otherwise finds by trying layouts one plan at a time.
#pragma once

#include <string>
#include <vector>

#include "plan/targets.h"

namespace dlperf::plan {

/// The share of a device's memory a layout the search keeps may fill: the rest is for what the
/// plan does not count (the CUDA context, NCCL's buffers, the allocator's fragmentation), as
/// dlperf plans a CPU run on 90% of the memory available. Without it the fastest layout always
/// filled a device to its last hundreds of megabytes.
inline constexpr double kSearchMemoryShare = 0.9;

/// The dimensions the user set, which the search keeps: 0 (-1 for zero, "" for checkpointing) = searched.
struct LayoutFixed {
  int64_t tp = 0, pp = 0, vp = 0, micro_batch = 0;
  int zero = -1;
  std::string checkpointing;
};

struct LayoutChoice {
  Layout layout;
  int64_t micro_batch = 1;
  TargetEstimate estimate;
};

struct LayoutSearch {
  std::vector<LayoutChoice> fitting;  ///< the layouts that fit (kSearchMemoryShare), fastest first (the simpler first at equal steps)
  int64_t tried = 0;                  ///< layouts planned
  double least_memory = 0;            ///< bytes a device of the layout that needs the fewest (what would have to fit)
};

/// n's divisors from 1 up to at_most, smallest first (the degrees and chunk counts a layout may take).
std::vector<int64_t> divisors(int64_t n, int64_t at_most);

/// Each layout of `job` (its Transformer, global batch, precision, optimizer; its own layout is
/// ignored) over exactly `devices` devices of `d` that fits in kSearchMemoryShare of its memory: tp a divisor of the heads and at most the node
/// size, pp a divisor of the layers, dp the rest, dividing the global batch with a power-of-two
/// micro-batch; interleaving by up to 8 chunks where pp > 1; ZeRO 0-3 where dp > 1; checkpointing
/// none, selective or full. Throws Error where `fixed` leaves no layout to try.
LayoutSearch search_layouts(const JobSpec& job, const Device& d, int64_t devices, const LayoutFixed& fixed, double grid_g_per_kwh,
                            double pue);

}  // namespace dlperf::plan

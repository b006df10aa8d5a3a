// Collective-communication figures as nccl-tests defines them (doc/PERFORMANCE.md there):
// algorithm bandwidth is the message size over the time; bus bandwidth rescales it by the data
// each link must carry, so that it compares with the hardware's link speed whatever the rank
// count. For all-reduce each rank sends and receives 2(n-1)/n of the message.
#pragma once

namespace dlperf::bench {

/// GB/s (1e9 bytes) of `bytes` moved in `seconds`.
inline double algbw_gbps(double bytes, double seconds) { return bytes / seconds / 1e9; }
/// All-reduce bus bandwidth over `ranks` ranks.
inline double allreduce_busbw(double algbw, int ranks) { return ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : algbw; }

}  // namespace dlperf::bench

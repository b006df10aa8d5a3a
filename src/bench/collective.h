// Collective-communication figures as nccl-tests defines them (doc/PERFORMANCE.md there):
// algorithm bandwidth is the message size over the time; bus bandwidth rescales it by the data
// each link must carry, so that it compares with the hardware's link speed whatever the rank
// count. For all-reduce each rank sends and receives 2(n-1)/n of the message.
#pragma once

#include <unistd.h>

#include <string>

namespace dlperf::bench {

/// The command that runs the dlperf-allreduce program on `ranks` local MPI ranks. As root Open
/// MPI must be told it may run; in containers its single-copy shared-memory transport can be
/// refused, so it is turned off.
inline std::string mpirun_command(const std::string& helper, int ranks, bool quick) {
  return "OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun " +
         std::string(::geteuid() == 0 ? "--allow-run-as-root " : "") + "--oversubscribe -np " + std::to_string(ranks) +
         " '" + helper + "'" + (quick ? " --quick" : "");
}

/// GB/s (1e9 bytes) of `bytes` moved in `seconds`.
inline double algbw_gbps(double bytes, double seconds) { return bytes / seconds / 1e9; }
/// All-reduce bus bandwidth over `ranks` ranks.
inline double allreduce_busbw(double algbw, int ranks) { return ranks > 1 ? algbw * 2.0 * (ranks - 1) / ranks : algbw; }

}  // namespace dlperf::bench

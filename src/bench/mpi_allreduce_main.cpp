// dlperf-allreduce: all-reduce (sum of f32) over MPI ranks across message sizes, launched by
// `dlperf bench allreduce` through mpirun. Rank 0 prints one JSON object on stdout.
//
// Method (as nccl-tests): warm-up, then timed iterations each started after a barrier; an
// iteration's time is the slowest rank's; the median over iterations is the figure. Every
// result is checked: each rank contributes rank + 1, so every element must sum to n(n+1)/2.
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/collective.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::vector<size_t> sizes;  // bytes
  for (size_t s = 1024; s <= (size_t(64) << 20); s *= (quick ? 32 : 4)) sizes.push_back(s);
  nlohmann::json rows = nlohmann::json::array();
  bool ok = true;
  for (size_t bytes : sizes) {
    const size_t n = bytes / sizeof(float);
    std::vector<float> in(n, float(rank + 1)), out(n, 0.f);
    const int iters = quick ? 10 : (bytes >= (size_t(16) << 20) ? 20 : 50);
    std::vector<double> times;
    for (int it = -5; it < iters; ++it) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime();
      MPI_Allreduce(in.data(), out.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0, slowest = 0;
      MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (it >= 0) times.push_back(slowest);
    }
    const float expect = float(ranks) * float(ranks + 1) / 2;
    int good = std::all_of(out.begin(), out.end(), [&](float v) { return v == expect; });
    int all_good = 0;
    MPI_Allreduce(&good, &all_good, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    ok = ok && all_good;
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const double algbw = dlperf::bench::algbw_gbps(double(bytes), median);
    rows.push_back({{"bytes", bytes}, {"time_us_median", median * 1e6}, {"time_us_min", times.front() * 1e6},
                    {"time_us_max", times.back() * 1e6}, {"algbw_gbps", algbw},
                    {"busbw_gbps", dlperf::bench::allreduce_busbw(algbw, ranks)}, {"iterations", iters}, {"correct", bool(all_good)}});
  }
  if (rank == 0) std::printf("%s\n", nlohmann::json({{"ranks", ranks}, {"dtype", "f32"}, {"op", "sum"}, {"correct", ok}, {"sizes", rows}}).dump().c_str());
  MPI_Finalize();
  return ok ? 0 : 1;
}

// GPU micro-benchmarks (dlperf bench copy|launch|memory on a GPU): host<->device copies pinned
// and pageable across sizes, kernel launch latency plain and replayed from a CUDA graph, and
// device-memory bandwidth (copy, triad, read). Timed with CUDA events; warm-up, many repeats,
// median and spread; results validated. Declared in every build; without the CUDA backend or
// a GPU, `available()` is false and `why_not()` says why.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dlperf::bench::gpu {

bool available();
std::string why_not();

struct CopyPoint {
  std::string direction;  ///< "h2d" | "d2h"
  bool pinned = false;
  double bytes = 0;
  double median_gbps = 0, min_gbps = 0, max_gbps = 0;
};
/// Sizes from 4 KiB to `max_bytes`, x4 apart.
std::vector<CopyPoint> copies(int device, double max_bytes, int repeats);

struct LaunchResult {
  double plain_us = 0;  ///< per empty kernel, launched back to back and synchronized once
  double graph_us = 0;  ///< per kernel, the same kernels captured in a CUDA graph and replayed
  /// Per kernel, the graph with a timing event recorded after each kernel: graph_event_us -
  /// graph_us is what one such event costs the GPU (the profiler's span boundaries were event
  /// records until 2026-11-27; kept as the comparison for the stamps).
  double graph_event_us = 0;
  /// Per kernel, the graph with a stamp of the GPU's clock (cuda::stamp_time, a one-thread
  /// kernel) after each kernel, as a profiled step's graph has between spans: graph_stamp_us -
  /// graph_us is what profiling a step costs the GPU per span boundary.
  double graph_stamp_us = 0;
  double clock_tick_ns = 0;  ///< the smallest step of the GPU's clock (cuda::clock_tick): the stamps' resolution
  double sync_us = 0;   ///< launch plus synchronize, one at a time (what a step pays per sync)
};
LaunchResult launch_latency(int device, int kernels, int repeats);

struct DeviceBandwidth {
  std::string kernel;  ///< copy | triad | read
  double bytes = 0, median_gbps = 0, min_gbps = 0, max_gbps = 0;
};
std::vector<DeviceBandwidth> device_bandwidth(int device, double bytes, int repeats);

struct GemmPoint {
  std::string precision;  ///< fp32 | tf32 | bf16 | fp16 | fp8
  int64_t m = 0, n = 0, k = 0;
  double median_tflops = 0, min_tflops = 0, max_tflops = 0;
  double max_rel_error = 0;  ///< sampled outputs against a float64 dot product of the same inputs
  int rotated_sets = 1;      ///< input copies rotated between calls (2x the L2)
  std::string failed;        ///< why this point has no figure (cuBLASLt refused, wrong results); empty when measured
};
/// cuBLASLt GEMM for every precision the GPU supports, square sizes `sizes`. A point that fails
/// (no algorithm, wrong results) says so in `failed` and the others are still measured.
std::vector<GemmPoint> gemm(int device, const std::vector<int64_t>& sizes, int repeats);

struct ConvPoint {
  std::string model, layer, precision, algorithms;
  std::string layout;          ///< nchw | nhwc: the tensors' (filters [K, C, R, S] or [K, R, S, C])
  std::vector<int64_t> input;  ///< N, C, H, W
  int64_t out_channels = 0, kernel = 0, stride = 1, padding = 0;
  double forward_tflops = 0, backward_data_tflops = 0, backward_filter_tflops = 0;  ///< medians
  double max_rel_error = 0;  ///< sampled forward outputs against float64
  std::string failed;        ///< why this point has no figure (cuDNN refused, wrong results); empty when measured
  int rotated_sets = 1;      ///< copies of the input and output gradient the calls cycle through (2x the L2)
};
/// cuDNN forward, backward-data and backward-filter of every distinct conv layer of `models` on
/// input `chw` at `batch`, in fp32 (NCHW), and in tf32 (NCHW) and bf16 (NHWC, as training runs
/// it, and NCHW beside it) where the GPU has tensor cores for them.
/// Where the own kernels take a shape (cuda::small_conv_fits), a second point in fp32 and bf16
/// times them (forward and weight gradient; backward_data_tflops 0: cuDNN's runs that pass).
/// A point that fails says so in `failed`, as gemm()'s do.
std::vector<ConvPoint> conv(int device, const std::vector<std::string>& models, const std::vector<int64_t>& chw, int64_t batch,
                            int repeats);

struct AllReducePoint {
  double bytes = 0;
  double time_us = 0, min_us = 0, max_us = 0;  ///< median and spread
  double algbw_gbps = 0, busbw_gbps = 0;         ///< nccl-tests' definitions
};
/// f32 sum all-reduce over NCCL across every visible GPU (one process, ncclCommInitAll), sizes
/// from 1 KB to `max_bytes`, results validated. Empty with `why` set when NCCL is not there.
std::vector<AllReducePoint> nccl_allreduce(double max_bytes, int repeats, int& gpus, std::string& why);

nlohmann::json to_json(const std::vector<GemmPoint>& g);
nlohmann::json to_json(const std::vector<ConvPoint>& c);
nlohmann::json to_json(const std::vector<CopyPoint>& c);
nlohmann::json to_json(const LaunchResult& l);
nlohmann::json to_json(const std::vector<DeviceBandwidth>& b);

}  // namespace dlperf::bench::gpu

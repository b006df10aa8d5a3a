// One job on several hardware targets: memory per device, fits or what would, step time from
// a roofline over the op costs plus communication (alpha-beta ring all-reduce), scaling
// efficiency, and the job's time, cost, energy and CO2.
#pragma once

#include <optional>
#include <string>

#include "nn/graph.h"
#include "plan/catalog.h"
#include "plan/gpu_step.h"
#include "plan/step_time.h"
#include "plan/transformer.h"

namespace dlperf::plan {

struct JobSpec {
  const nn::Graph* graph = nullptr;            ///< a CNN at the per-device batch (and its spec), or
  const nn::ModelSpec* spec = nullptr;
  std::optional<TransformerSpec> transformer;  ///< a Transformer
  int64_t global_batch = 64;  ///< images or sequences per optimizer step, all devices
  int64_t micro_batch = 1;    ///< Transformer: sequences per device per micro-step
  double steps = 1;           ///< optimizer steps in the job
  std::string precision = "fp32", optimizer = "sgd";
  Layout layout;
  std::string gpu_layout = "auto";  ///< --layout of dlperf's GPU engine (auto, nchw, nhwc): which kernels its step runs
  // Assumptions for datasheet targets other than GPUs (measured ceilings replace them on this
  // CPU; a GPU's CNN step is dlperf's kernels' fit, plan/gpu_step.h) and for Transformers:
  double gemm_share = 0.6;     ///< fraction of the datasheet peak large GEMMs reach
  double bandwidth_share = 0.8;  ///< fraction of the datasheet bandwidth streaming ops reach
  double launch_s = 5e-6;      ///< per kernel
  double network_gbps = 50;    ///< per device between nodes (400 Gb/s NICs)
  double alpha_s = 10e-6;      ///< per message
  int node_size = 8;           ///< devices sharing the interconnect
  /// Data parallelism: the gradients' all-reduce runs in buckets during the backward pass
  /// (plan/grad_overlap.h), as PyTorch DDP's does, and Megatron-LM's with --overlap-grad-reduce.
  bool overlap_grad_reduce = false;
  double bucket_bytes = 0;  ///< overlapped: each bucket's size; 0 = the framework's (ddp_buckets, megatron_buckets)
};

struct TargetEstimate {
  std::string id, name;
  std::string unsupported;      ///< non-empty: why the target cannot run the job
  double devices = 1;
  double memory = 0, capacity = 0;  ///< bytes per device
  bool fits = false;
  std::string what_fits;        ///< when it does not fit: the first change that makes it fit; empty when none does
  double compute_s = 0, comm_s = 0, step_s = 0;  ///< comm_s: dp_comm_s, tp_comm_s and pp_comm_s; step_s = compute_s + comm_s - hidden_comm_s
  double dp_comm_s = 0;         ///< data parallelism's all-reduce of the gradients (and ZeRO-3's gathers) a step
  double hidden_comm_s = 0;     ///< of dp_comm_s, what runs during the backward pass (JobSpec::overlap_grad_reduce)
  int gradient_buckets = 0;     ///< the all-reduces dp_comm_s makes; 0 without data parallelism
  double tp_comm_s = 0;         ///< Transformer: tensor parallelism's all-reduces a step
  double pp_comm_s = 0;         ///< Transformer: pipeline parallelism's sends between stages a step
  std::string allreduce = "-";  ///< "ring" or "tree", whichever is faster for these bytes (overlapped: a full bucket's); "-" without data parallelism
  double efficiency = 1;        ///< compute / step
  /// Transformer: model FLOPs utilization, the standard figure of LLM training runs: the model's
  /// training FLOPs a step (6N + attention, no recomputation) over the step time x the devices'
  /// peak. What the plan's assumptions add up to, to set beside what a framework reports. -1: a CNN.
  double mfu = -1;
  double job_s = 0, cost = -1, energy_kwh = -1, co2_kg = -1;
};

/// Alpha-beta all-reduce of `bytes` over `n` devices: ring 2(n-1)/n bytes/bw + 2(n-1) alpha;
/// tree 2 log2(n) alpha + 2 bytes/bw.
double ring_allreduce_s(double bytes, double n, double gbps, double alpha_s);
double tree_allreduce_s(double bytes, double n, double gbps, double alpha_s);

/// The compute peak (FLOP/s) a job in `precision` plans with on `d`: its catalog figure; tf32 on a
/// GPU without one (tensor cores older than Ampere) runs at fp32's. 0 = none.
double peak_flops(const Device& d, const std::string& precision);

/// The precision a GPU's kernels run `precision` in: tf32 as fp32 on one without tf32 (its
/// convolutions then run on the FMA units: GpuEngineModel's fp32 shares).
std::string gpu_kernels_precision(const Device& d, const std::string& precision);

/// One pass of dlperf's GPU step and its time on a GPU.
struct GpuPassOn {
  GpuPass pass;
  GpuPassTime time;
};
/// dlperf's GPU step of the CNN `job` on GPU `d`, pass by pass with each pass's time
/// (plan/gpu_step.h), in the precision its kernels run, at `d`'s peak and bandwidth. The targets
/// table's compute time for `d` is their sum.
std::vector<GpuPassOn> gpu_passes_on(const JobSpec& job, const Device& d);

/// A Transformer job's micro-batches a pipeline in each step: global batch / (dp x micro-batch), at least 1.
double micro_batches(const JobSpec& job);

/// `host` is this machine's CPU as a target (id "cpu"), measured ceilings when present.
TargetEstimate estimate(const JobSpec& job, const Device& d, double grid_g_per_kwh, double pue);
Device host_device(const CpuCeilings& c, double watts);

}  // namespace dlperf::plan

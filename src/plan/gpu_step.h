// dlperf's GPU training step, predicted pass by pass: the kernels its GPU executor runs
// (backend/cuda/network_step.cpp), each costed as `dlperf profile` costs its rows, on a roofline whose
// shares of the datasheet peaks and whose fill time per kernel were fitted to the per-op tables
// `dlperf profile` measured on an H100 (GpuEngineModel says which, and how).
//
// The pass costs are shared with the profiler's table (profile/report.cpp), so a plan and a
// profile of the same run count the same FLOPs and bytes for every pass.
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/layout.h"  // CUDA-free
#include "nn/graph.h"
#include "ops/op.h"

namespace dlperf::plan {

/// Which of a node's costs a pass carries.
enum class Pass { forward, backward_data, backward_weight };

/// The graph nodes one layer's pass runs: node `n` and a relu fused into it (both engines run a
/// relu that only a batchnorm feeds inside that batchnorm; the GPU, `gpu`, also one that only a
/// linear layer or a residual add feeds inside that layer).
std::vector<int> nodes_run_by(const nn::Graph& g, int n, bool gpu);

/// The FLOPs and bytes of node `n`'s pass `p`, with each node's input read in `elem_bytes[node]`
/// bytes: its own cost and that of the relus it runs. On the GPU (`gpu`, activations stored in
/// `gpu_layout`) a convolution's backward-data pass that adds into its input's gradient reads that
/// gradient too, and a flatten that moves maps (NHWC to the NCHW features its reader wants, and
/// back) reads and writes them once each.
ops::PassCost pass_cost(const nn::Graph& g, int n, Pass p, bool gpu, cuda::Layout gpu_layout, const std::vector<double>& elem_bytes);

/// The bytes an optimizer step moves, as dlperf profile counts them: it streams the fp32 weights,
/// gradients and momentum, five floats a parameter.
double optimizer_step_bytes(const nn::Graph& g);
/// The loss pass (softmax cross-entropy forward and backward on the logits).
ops::PassCost loss_cost(const nn::Graph& g);

/// How close dlperf's GPU kernels come to a GPU's datasheet: a pass takes
///   fill + max(FLOPs / (share x peak), bytes / (bandwidth_share x DRAM bandwidth)),
/// the share and fill by what runs it (cuDNN's convolutions, cuBLASLt's GEMMs, dlperf's own
/// streaming kernels, whose FLOPs are not their limit) and, for the first two, whether the
/// precision runs on tensor cores (tf32, bf16, fp16) or on the fp32 FMA units.
///
/// Fitted (2026-11-28) by `scripts/gpu/fit_plan.py --fit --stamp-us 0.79
/// data/gpu-fit/h100-2026-11-28/profile-*.json` to eight per-op tables `dlperf profile` wrote on
/// an H100 SXM, in each precision's default layout: `medium` at batch 64 and 1024 and `large` at
/// 1024 in fp32; `medium` at 64 in bf16 and fp16, the Fashion-MNIST recipe at 256, `large` and
/// `resnet18` at 1024 in bf16; 380 passes. The fit minimizes the squared log error of each
/// profile's step (the sum of its passes) plus 0.3 times the mean |log error| of a pass, so that
/// it gets whole steps right without bending single passes out of shape: every profile's step
/// comes within 7%, a single pass a median 19-82% off by kind, because cuDNN's timed search picks
/// its kernels run by run. Eight training runs the fit did not see come out a median 8.9% off
/// (data/gpu-fit/h100-2026-11-28/README.md). The fp32 convolutions' share is over 1: most likely
/// cuDNN's Winograd kernels, which do fewer multiplies than the direct convolution the FLOPs count. On other
/// GPUs the same shares apply to their own datasheets: an assumption. ctest checks that these
/// are the fit of the committed tables (FitPlanScript.TheHeaderHoldsTheFit).
struct GpuEngineModel {
  double conv_share_fp32 = 1.2, conv_share_tensor_cores = 0.75;
  double gemm_share_fp32 = 0.55, gemm_share_tensor_cores = 0.1;
  double bandwidth_share = 0.55;
  double conv_fill_fp32_s = 27.5e-6, conv_fill_tensor_cores_s = 10.5e-6;
  double gemm_fill_s = 7.5e-6, streaming_fill_s = 3.5e-6;
};

/// What runs a pass, for its share of peak and its fill.
enum class GpuPassKind { conv, gemm, streaming };

/// One kernel of a GPU step: its node (-1 for the loss and the optimizer), what runs it and its cost.
struct GpuPass {
  int node = -1;
  std::string phase;  ///< forward, backward-data, backward-weight, backward, gradient-sum, loss, optimizer
  GpuPassKind kind = GpuPassKind::streaming;
  ops::PassCost cost;
};

/// The passes dlperf's GPU executor runs for one training step of `g` in `precision` with its
/// activations stored in `layout` (--layout: auto, nchw, nhwc): every layer that is not a view
/// forward and backward (a convolution's and a linear layer's backward as its backward-data and
/// backward-weight passes), the gradient sums, the loss and the optimizer. It walks the backward
/// as Network::backward does (backend/cuda/network_step.cpp, which a planner without CUDA cannot call);
/// CudaEmu.ThePlannersPassesAreTheProfilesRows keeps the two in step.
std::vector<GpuPass> gpu_step_passes(const nn::Graph& g, const std::string& precision, const std::string& layout = "auto");

/// The name `dlperf profile` gives a GPU pass's layer: its node's, joined by "+" with the relu
/// it runs ("bn1+relu1"); the phase for the loss and the optimizer.
std::string gpu_layer_name(const nn::Graph& g, const GpuPass& p);

/// A pass's time on a GPU, in its three parts.
struct GpuPassTime {
  double fill = 0, compute = 0, traffic = 0;  ///< seconds: the kernel's fill, its FLOPs at its share, its bytes at the bandwidth share
  double total() const { return fill + (compute > traffic ? compute : traffic); }
  /// What the time goes to most: "fill" (a kernel too small to fill the GPU), "compute" or "memory".
  const char* limit() const { return fill >= compute && fill >= traffic ? "fill" : compute >= traffic ? "compute" : "memory"; }
};
/// One pass on a GPU of `peak_flops` (in the run's precision) and `bandwidth` (bytes/s).
GpuPassTime gpu_pass_time(const GpuPass& p, const std::string& precision, double peak_flops, double bandwidth, const GpuEngineModel& m = {});
inline double gpu_pass_s(const GpuPass& p, const std::string& precision, double peak_flops, double bandwidth, const GpuEngineModel& m = {}) {
  return gpu_pass_time(p, precision, peak_flops, bandwidth, m).total();
}


}  // namespace dlperf::plan

// Step time predicted from the op cost model on a cache-aware roofline: every pass of every
// layer takes the longer of its FLOPs at the attainable compute rate and its bytes at the
// bandwidth of the memory level its working set fits in, plus a fixed cost per call.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <string>
#include <vector>

#include "bench/machine_profile.h"
#include "nn/graph.h"
#include "nn/optimizer.h"

namespace dlperf::plan {

/// What the CPU can do: measured by `dlperf bench` when runs/machine-profile.json is there,
/// otherwise counted (FMA peak) and assumed (bandwidths). `source` says which.
struct CpuCeilings {
  double peak_gflops = 0;              ///< FMA peak of the threads used, in the run's precision
  /// The bf16 dot-product peak `dlperf bench all` measured (machine profile's bf16_gflops); 0 =
  /// not measured, when a bf16 run's peak is taken as twice fp32's.
  double bf16_measured_gflops = 0;
  double fp32_peak_gflops = 0;  ///< peak_gflops's fp32 value while it holds bf16's (with_precision goes back by it)
  /// The AMX tiles' bf16 peak (bench::amx_peak), where oneDNN runs bf16 there (cpu::has_amx_kernels):
  /// a bf16 conv or linear pass on AMX (EngineModel::amx_conv_efficiency) computes at a share of it. 0 = none.
  double amx_gflops = 0;
  /// bf16 convolutions run on AMX where oneDNN has the kernel (cpu::conv_runs_amx), in nhwc; false
  /// for records from before 2026-11-29 (no cpu_step.amx_layers), whose bf16 convolutions ran in
  /// nChw16c on the AVX512-BF16 kernels while their linear layers ran on AMX already.
  bool amx_convolutions = true;
  double l1_gbps = 0, l2_gbps = 0, l3_gbps = 0, dram_gbps = 0;
  double l2_bytes = 0, l3_bytes = 0;   ///< capacity the threads share (L2 per core x cores)
  /// A call into the engine at these threads (bench::cpu_dispatch, measured when host_ceilings
  /// runs: it moves with the CPUs' placement), added to every layer pass; 0 = not measured
  /// (ceilings made by hand): EngineModel::call_overhead_s then.
  double call_overhead_s = 0;
  /// A call on one thread, which a layer small enough for one (cpu::runs_on_one_thread) pays in
  /// place of call_overhead_s: no team to fork (0.3-0.4 us on the VMs measured); measured by
  /// host_ceilings where threads > 1. 0 = not measured: EngineModel::one_thread_call_s then.
  double one_thread_call_overhead_s = 0;
  int threads = 1;
  /// The CPUs the process may use (hw::usable_cpus(), set by host_ceilings): with `threads` and the
  /// loader workers within them, each worker has a core of its own. 0 = unknown: they share.
  int cpus = 0;
  int loader_workers = 1;  ///< the run's loader threads (0: it loads in the training thread); not a ceiling, but how the run uses the CPU
  bool augment = false;    ///< the run's random crops and flips, which make its batches slower to fill; likewise
  std::string isa;  ///< the CPU's ("avx2+fma", "avx512", ...): which EngineModel applies
  int lanes_f32 = 0;  ///< f32 lanes of its FMA datapath (hw::CpuInfo): 16 = full-width AVX-512 (Zen 5), which has a fit of its own; 0 = unknown
  std::string precision = "fp32";  ///< "bf16": the CPU engine's bf16 (AVX512-BF16; backend/cpu/network.h)
  /// The engine runs the fp32 3x3 convolutions where it pays as Winograd (cpu::winograd_choice,
  /// backend/cpu/winograd.cpp): set by host_ceilings; false in ceilings made by hand.
  bool winograd = false;
  std::string source;
};
/// Whether the loader's workers have cores of their own: the compute threads and they fit in the
/// CPUs (then they fill batches while the step computes; EngineModel::loader_ns_per_pixel).
inline bool workers_have_own_cores(const CpuCeilings& c) {
  return c.loader_workers > 0 && c.cpus > 0 && c.threads + c.loader_workers <= c.cpus;
}
/// How many times the profile's call cost a call measured now may take before host_ceilings reads
/// it as other work holding the cores rather than the CPUs' placement (1.2 to 2.7 us, idle).
inline constexpr double kCallBusyRatio = 4;
/// This CPU's ceilings for `threads`: those `dlperf bench all` measured (runs/machine-profile.json),
/// else measured on the first call (about two seconds, then kept for the process). The cost of an
/// engine call is measured now (a few milliseconds): it moves with the CPUs' placement, up to
/// 2.3x on a VM; where it comes out over kCallBusyRatio times the profile's, other work holds the
/// cores, and the profile's figure is taken, with the reason in `source`. For
/// "bf16" the compute peak is the VDPBF16PS peak measured with them (the profile's or the one
/// measured now). Its ratio to fp32's is the CPU's: 2.0x on the Zen 4, 1.84-1.88x on the Zen 5,
/// 0.49x on an Intel Xeon VM. Where oneDNN uses AMX tiles, their peak is measured too (amx_gflops).
CpuCeilings host_ceilings(int threads, const std::string& precision = "fp32");
/// The fp32 FMA peak and the bandwidth of each cache level and DRAM that host_ceilings measures
/// where there is no machine profile (step_time.cpp says how), measured on the first call for
/// `threads` and kept for the process, and the bf16 dot-product peak where the CPU has AVX512-BF16.
/// No guesses for levels it cannot place.
bench::Ceilings ceilings_measured_now(int threads);
/// `c` for a run in `precision`: bf16's compute peak is `bf16_measured_gflops`, or twice fp32's
/// where none was measured (ceilings made by hand; a machine profile from a CPU without
/// AVX512-BF16 has none), either way once.
CpuCeilings with_precision(CpuCeilings c, const std::string& precision);
/// The bytes an element of each node's input as the CPU engine reads it (graph node order): 4, or
/// in bf16 2 where conv and linear read and from the first conv on (backend/cpu/network.h), so
/// a pass's bytes are `node.cost_at(this[i])`'s.
std::vector<double> engine_input_bytes(const nn::Graph& g, const std::string& precision);
/// The bytes an element of each node's output (and its gradient) as the CPU engine stores it.
std::vector<double> engine_value_bytes(const nn::Graph& g, const std::string& precision);
/// The inputs of node `i` whose gradient it adds into one a later reader already wrote (the CPU
/// engine's backward runs layers in reverse: a value's last reader writes its gradient, each
/// earlier one sums into it), as indices into `inputs`.
std::vector<size_t> inputs_summing_gradients(const nn::Graph& g, size_t i);


/// How close dlperf's CPU engine gets to the roofline, by op kind. Documented, with how each
/// figure was found, in docs/plan.md; fitted on `medium` at batch 64 (--layer-times) and
/// validated on every other run: these defaults on a Zen 3 (AVX2), `engine_model("avx512")`'s
/// figures on a Zen 4 (AVX-512), whose oneDNN kernels and caches differ.
struct EngineModel {
  std::string name = "the AVX2 fit (Zen 3)";  ///< which fit, in words (engine_fit_name)
  double gemm_efficiency = 0.78;   ///< conv/linear: fraction of the (measured) FMA peak on large shapes
  double short_reduction = 10;     ///< a reduction this long halves it (a 3x3 conv on 1 channel: K = 9)
  double batchnorm_passes = 2.0;   ///< training batchnorm reads its input 3 times: 2x the minimal bytes
  /// Batchnorm's passes as oneDNN's jit batchnorm runs them, in place of `batchnorm_passes`: the
  /// first read of each tensor from where it lies, the re-reads from where oneDNN's chunk of
  /// channel blocks fits, the fp32 output and input gradient stored to DRAM, backward's input
  /// from a step's traffic ago (step_time.cpp: batchnorm_passes_s). The AVX-512 fit's; the AVX2
  /// fit (Zen 3) keeps the figure above, fitted there, which it was not checked against.
  bool batchnorm_in_chunks = false;
  double backward_share = 0.9;     ///< conv/linear backward passes reach this share of forward's efficiency
  double maxpool_efficiency = 0.35;  ///< our max pool with argmax: fraction of the bandwidth (forward)
  double maxpool_backward_efficiency = 0.26;  ///< scattering gradients through the argmax
  /// 2x2 windows at stride 2 (every preset's), which have code of their own: the figures above
  /// times its measured speed-up over the general code (1.9x forward, 2.0x backward).
  double maxpool_2x2_efficiency = 0.67, maxpool_2x2_backward_efficiency = 0.52;
  double dropout_ns_per_element = 6;  ///< counter-based RNG for the mask, per element per thread
  /// Per layer pass (thread fork/join, primitive dispatch) where the ceilings carry no measured
  /// figure (CpuCeilings::call_overhead_s, which host_ceilings always measures): the Zen 5's.
  double call_overhead_s = 1.7e-6;
  /// A call on one thread where the ceilings carry no measured figure (CpuCeilings::one_thread_call_overhead_s).
  double one_thread_call_s = 0.4e-6;
  /// Per step outside the layers: the input's copy into the network, the loss and the loop's
  /// bookkeeping, each about a call (dlperf profile: 1.6, 1.4 and 1.0 us on the Zen 5, 1.7 a call).
  double step_calls = 3;
  /// Filling a batch (convert and normalize each pixel, crop and flip), which the step waits for:
  /// while compute threads take every core a loader worker gets none of its own, and fills the
  /// next batch only once the step blocks on it (dlperf profile's trace of the mlp at batch 16).
  /// A worker with a core of its own (threads + workers within the CPUs) fills it while the step
  /// computes, so the step waits only for the hand-off (`train -m mlp -b 16 --threads 1` on the
  /// 2-core Zen 4, 3 alternating rounds: 1 worker 56.1 us a step, none 59.8 us, medians).
  /// `dlperf profile -j 0` of the mlp on the Zen 5: 6.8 us a batch of 16 x 1x28x28 unaugmented.
  double loader_ns_per_pixel = 0.55;
  /// The same with random crops and flips (--augment): a shifted window pays for its padding
  /// columns, a flipped one for reversing its rows. `dlperf profile -j 0 --augment` of the same
  /// mlp: 8.8-11.0 us a batch against 5.5-5.9 unaugmented, 1.6x (`dlperf bench loader` alone: 1.7x).
  double loader_augmented_ns_per_pixel = 0.9;
  /// With loader workers, a step costs the batch's fill and this more: the hand-off between
  /// threads, and the worker's share of cores the compute threads spin on. `dlperf profile` of the
  /// mlp at batch 16 on the Zen 5, 1 worker against none, alternating 6 times: 44.5 us a step
  /// against 40.0 (medians; 39.7-54.0 against 36.4-41.7). It was 10 us while each batch woke the
  /// worker and the step slept for it (data wait 20 us a step against a 10-11 us fill); the
  /// loader now wakes a worker once per half a queue and spins a moment before it sleeps.
  double loader_handoff_s = 4.5e-6;
  /// A pass larger than L2 but within L3 streams at this share of L3's measured rate (never
  /// below DRAM's); 0: at DRAM's rate.
  double l3_share = 0;
  /// A buffer the step comes back to a step later is in the cache level the step's buffers
  /// (step_footprint_bytes) fit in, whatever the pass's own size: L2, L3 while they fill at most
  /// this share of it, else DRAM. Max pooling's backward zeroes its whole input gradient before
  /// scattering into it, so it writes that gradient, and reads the argmax the forward pass
  /// stored, at that level's rate. 0: not modelled (the AVX2 fit's pooling figures were fitted
  /// on `medium` at batch 64, with it inside them).
  double cold_step_l3_share = 0;
  /// Max pooling's backward also pays this much a thread for each image and 16-channel block
  /// (oneDNN's nChw16c on AVX-512), whatever the map's size: its setup, zeroing, and a call per
  /// block. 0: not modelled (the AVX2 fit's pooling is dlperf's own, its cost in its figures).
  double maxpool_backward_ns_per_block = 0;
  /// bf16 (CPUs with AVX512-BF16): backward-weights passes reach this share of the efficiency
  /// the others reach against the bf16 peak (oneDNN 2.6's kernel; measured 1.2-1.5x fp32's
  /// speed where forward ran 2x), and the fp32<->bf16 conversions (where fp32 meets bf16: the
  /// model input, dropout, the logits' gradient, the weights' copies) stream at this share of
  /// the bandwidth.
  double bf16_backward_weight_share = 0.68, bf16_conversion_efficiency = 0.5;
  /// oneDNN 2.6's bf16 batchnorm (bnorm_jit:avx512_core_bf16), which the engine runs where the
  /// channels are no whole vectors of 16, takes this many times what its bytes take in the model
  /// of fp32's (oneDNN's chunks, batchnorm_passes_s), forward and backward: `dlperf profile` of
  /// `medium` at batch 64 beside `plan --layers` on two Intel Xeon VMs, 7.7-8.3x and 3.4-3.7x
  /// (2026-11-28) and 5.6-6.9x and 2.8-4.1x (2026-11-29). 1: not modelled (the AVX2 fit, where no
  /// bf16 runs). Not measured on the Zens.
  double bf16_batchnorm_forward_slowdown = 1, bf16_batchnorm_backward_slowdown = 1;
  /// dlperf's own bf16 batchnorm (whole vectors of 16 channels, batchnorm_bf16.h): forward streams
  /// the tensor 3 times (the statistics, then read and write to normalize), backward 5 (the input
  /// and the output's gradient for the sums, both again and the input's gradient), at the rate of
  /// the level all of that fits in. `scripts/plan_vs_profile.py --model medium --batches 64,256
  /// --precision bf16` (3 profiles, 2026-11-29, the AMX Xeon VM): its passes took 0.71-1.30x their
  /// plan. false: not modelled (the AVX2 fit: no such code).
  bool bf16_own_batchnorm = false;
  /// A conv's or linear layer's forward output and backward input gradient are stored normally,
  /// so each store first reads its line (write-allocate): they move twice their bytes, and a
  /// pass that did not fit a cache level with them may not fit it at all. Only a memory-bound
  /// pass feels it, such as conv1's forward on a one-channel input. false: not modelled (the
  /// AVX2 and Zen 4 fits were set without it, on machines where it cannot be rechecked).
  bool output_read_first = false;
  /// A Winograd convolution (CpuCeilings::winograd) as its GEMMs: 2 x 36 x in x out channels
  /// FLOPs for each 4x4 output tile (`tiles`, the last partial ones whole) in each pass, at this
  /// share of the FMA peak x in / (in + winograd_short_channels) x tiles / (tiles +
  /// winograd_few_tiles). Its transforms' memory traffic is inside these figures. Fitted on the
  /// three passes of 40 shapes and batches the engine runs so (winograd.cpp's sweep, an Intel
  /// Xeon VM, 2026-11-28; scripts/winograd_sweep/): a median 11% off, at most 30%. Not checked on the Zens (docs/plan.md).
  double winograd_efficiency = 0.5, winograd_short_channels = 16, winograd_few_tiles = 32;
  /// A conv's or linear layer's output features are computed in blocks of this many (a vector
  /// register's floats), the last block whole: 10 outputs cost the forward and backward-weights
  /// passes what 16 do. oneDNN's inner product on AVX-512, timed alone at batches 16-1024 and
  /// 64-4096 inputs (scripts/linear_sweep/, a Xeon VM, 2026-11-28), 1 thread and 2: 10 outputs
  /// took a median 1.06x and 1.02x the time of 16 forward, 1.10x and 1.04x backward-weights;
  /// backward-data, which sums over the outputs instead, 0.84x and 0.76x. Every preset's last
  /// layer has 10. A conv's blocked layout (nChw16c) pads its channels the same way. 0: not
  /// modelled (AVX2's inner product was not swept).
  int output_block = 0;
  /// A linear layer's backward-weights pass reaches blocks / (blocks + this) of its efficiency,
  /// `blocks` its outputs rounded up to output_block: its GEMM has as many rows as outputs, too few
  /// to fill the kernel's registers. In the same sweep at batches 64-1024, 16 outputs ran at 55%
  /// of the FMA peak on 1 thread, 32 at 69%, 64 at 76%, 128 and more at 85%. Fitted there: 9
  /// (1 thread: measured / planned a median 0.93 for up to 32 outputs; 2 threads 1.22). Not the
  /// convolutions', whose kernels differ and whose figures were fitted without it. 0: not modelled.
  double linear_weight_short_outputs = 0;
  /// bf16 convolutions and linear layers on AMX tiles (CpuCeilings::amx_gflops, where the engine
  /// runs them there: cpu::conv_runs_amx, linear_runs_amx): forward, backward-data and
  /// backward-weights at these shares of the AMX peak x K / (K + amx_short_reduction) x outputs /
  /// outputs rounded up to 16 (a tile's columns), K the pass's reduction, the outputs
  /// backward-data's input channels. Fitted on oneDNN's kernels alone over the presets' 3x3 shapes
  /// at batches 16-256 and 9 linear shapes at 16-1024 (scripts/amx_sweep/, a Xeon VM, 2026-11-29, 1
  /// and 2 threads): alone, convolutions a median 13-24% off a pass at 0.48, 0.32 and 0.18, linear
  /// layers 18-50% (backward-weights at small batches the worst). In training the convolutions
  /// took longer than alone: `scripts/plan_vs_profile.py --model medium --batches 64,256
  /// --precision bf16` (3 profiles, the same VM) measured conv2's and conv3's forward passes at
  /// 1.19-1.58x those figures' plan and their backward passes at 1.44-1.95x, so the convolutions'
  /// figures are the sweep's over 1.39 and 1.71 (geometric means). One fit, whatever the CPU's
  /// other figures.
  std::array<double, 3> amx_conv_efficiency = {0.48 / 1.39, 0.32 / 1.71, 0.18 / 1.71}, amx_linear_efficiency = {0.25, 0.3, 0.16};
  double amx_short_reduction = 64;
  /// Those convolution passes the engine runs as matrix products (cpu::conv_gemm_passes: small
  /// maps and strides) at these shares of the AMX peak, the same way (the product's reduction and
  /// output columns), multiplying the padding's zeros too, plus their unfolded input written and
  /// read back (forward, backward-weights) or their fp32 input-gradient rows folded (backward-data).
  /// Fitted on resnet18's 22 such passes in training (`dlperf profile --model resnet18 --precision
  /// bf16 --train-limit 1024 --steps 10`, the Xeon VM with AMX, 2026-11-29, batch 64, 2 threads),
  /// medians of 4, 7 and 11 passes; the 3x3 ones' shares lay within 0.16-0.19, 0.19-0.25 and
  /// 0.11-0.15. The strided 1x1 shortcuts' products (small outputs, a scattered gather) ran at
  /// 0.02-0.10: planned short, by 3 ms of a 250 ms step.
  std::array<double, 3> amx_matmul_efficiency = {0.18, 0.19, 0.13};
};

/// The bytes a training step of `g` in the CPU engine comes back to every step: each value and
/// its gradient at the engine's element size (engine_value_bytes), the model input, and the
/// weights, their gradients and `opt`'s state. Not the engine's whole memory (engine_memory):
/// the scratchpad and conversions' copies are left out.
double step_footprint_bytes(const nn::Graph& g, const nn::OptimizerConfig& opt, const std::string& precision);

/// The fit for a CPU's ISA: "avx512" has its own, refitted where the datapath is full width
/// (`lanes_f32` 16, the Zen 5), everything else the AVX2 one.
EngineModel engine_model(const std::string& isa, int lanes_f32 = 0);
/// Which of those fits the plan takes for `c`, in words ("the AVX-512 fit, refitted for a
/// full-width datapath (Zen 5)"), for the tables that compare the plan with runs.
std::string engine_fit_name(const CpuCeilings& c);

struct LayerTime {
  std::string name, op;
  double forward_s = 0, backward_s = 0;
  double gradient_sum_s = 0;  ///< of backward_s: adding its input gradients into later readers' (inputs_summing_gradients)
  std::string bound;  ///< "compute" or "memory" (the forward pass)
  bool winograd = false;  ///< a conv planned as Winograd (CpuCeilings::winograd)
  bool amx = false;       ///< a bf16 conv or linear layer planned on AMX tiles (CpuCeilings::amx_gflops)
  bool one_thread = false;  ///< small enough to run on one thread (cpu::runs_on_one_thread): planned on one core's share
};

struct StepPrediction {
  double step_s = 0;     ///< forward + backward + optimizer + overhead
  double forward_s = 0, backward_s = 0, optimizer_s = 0;
  double overhead_s = 0;  ///< per step outside the layers: loading the batch, its copy, the loss, the loop
  std::vector<LayerTime> layers;
};

StepPrediction predict_step(const nn::Graph& g, const nn::OptimizerConfig& opt, const CpuCeilings& c,
                            const EngineModel& m);
/// With the model for the ceilings' ISA.
StepPrediction predict_step(const nn::Graph& g, const nn::OptimizerConfig& opt, const CpuCeilings& c);

nlohmann::json to_json(const CpuCeilings& c);

}  // namespace dlperf::plan

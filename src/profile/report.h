// The profiler's report: per-op table (like torch.profiler's key_averages, plus FLOPs, bytes and
// roofline position for every pass), the step summary, memory by category, and a Chrome Trace
// Event Format file that Perfetto and chrome://tracing open.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "backend/cuda/layout.h"  // CUDA-free
#include "hw/host_load.h"
#include "nn/graph.h"
#include "plan/step_time.h"
#include "profile/recorder.h"

namespace dlperf::profile {

struct OpRow {
  std::string name;   ///< layer ("conv2"), op type with --group-by op, or what ran ("optimizer")
  std::string op;     ///< op type; empty outside layers
  std::string phase;  ///< forward, backward, backward-data, backward-weight, gradient-sum, copy, data, loss, optimizer, step
  int64_t calls = 0;
  double self_s = 0, total_s = 0;  ///< summed over the recorded steps
  double share = 0;                ///< self time / recorded step time
  double flops = 0, bytes = 0;     ///< summed over calls, from the op cost model (0 where it has none)
  double padding_flops = 0;        ///< of flops, a convolution's multiply-adds on zero padding (ops::PassCost)
  double gflops() const { return self_s > 0 ? flops / self_s / 1e9 : 0; }
  double gflops_on_data() const { return self_s > 0 ? (flops - padding_flops) / self_s / 1e9 : 0; }
  double gbps() const { return self_s > 0 ? bytes / self_s / 1e9 : 0; }
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
  std::string bound;               ///< "compute" or "memory" against the ceilings' ridge point; "" without FLOPs
};

struct StepSummary {
  int64_t steps = 0;
  int64_t every = 1;  ///< the recording took one step in `every` (--profile-every); the others ran unrecorded
  double step_s = 0;  ///< mean
  /// The recorded steps' median, fastest and slowest: a mean well above the median says a few
  /// slow steps (the machine busy with other work) weigh in every sum of the table.
  double step_median_s = 0, step_min_s = 0, step_max_s = 0;
  double data_s = 0, copy_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0, idle_s = 0;  ///< means
  double launches = 0;  ///< kernel and primitive executions per step
  /// Where `launches` comes from: one per recorded primitive and own-kernel pass (an estimate:
  /// a library call may launch several kernels), or the exact count in the step's CUDA graph.
  std::string launches_source = "one per primitive and layer pass";
  /// A GPU profile's resolution: the smallest step of the GPU's clock its stamps read (0: a CPU
  /// profile, whose host clock resolves far finer than any span).
  double device_clock_tick_ns = 0;
  double loader_busy = 0;  ///< loader workers' busy time / the recorded steps' span, summed over workers
  int64_t loader_workers = 0;  ///< the run's loader workers (0: batches load in the training thread or on the GPU)
  /// dlperf plan's step time for the run on this CPU's ceilings (plan::predict_step); 0 where
  /// none was made (a GPU run, whose plan rests on datasheets).
  double planned_s = 0;
};

struct Report {
  std::vector<OpRow> rows;  ///< sorted by self time, largest first
  StepSummary step;
  plan::CpuCeilings ceilings;
  double recorded_s = 0;    ///< sum of the recorded steps' durations
  double flops_per_step = 0;  ///< of the layer rows, from the cost model
  bool on_gpu = false;        ///< the rows are the GPU's (stamps of its clock), not the CPU engine's
  hw::HostLoad host_load;     ///< what else the CPUs did while it recorded (Recorder::host_load)
  /// The CPU engine's convolutions that ran as Winograd (cpu::Network::winograd_layers), which do
  /// fewer multiply-adds than their FLOPs count.
  std::vector<std::string> winograd_layers;
  /// A bf16 CPU run's convolutions and linear layers that ran on AMX tiles (cpu::Network::amx_layers):
  /// their rows are read against the tiles' peak (CpuCeilings::amx_gflops), not the FMA units'.
  std::vector<std::string> amx_layers;
  /// Of those, the convolutions with passes that ran as matrix products (cpu::Network::matrix_product_layers):
  /// layer and passes ("backward-data, backward-weights").
  std::vector<std::pair<std::string, std::string>> matrix_product_layers;
  /// The CPU engine's layers too small to share between its threads, which ran on one
  /// (cpu::Network::one_thread_layers): their GFLOP/s and GB/s are one core's.
  std::vector<std::string> one_thread_layers;
};
/// Which code ran a CPU run's layers (cpu::Network's lists), for the report's fields above.
struct CpuLayers {
  std::vector<std::string> winograd, amx, one_thread;
  std::vector<std::pair<std::string, std::string>> matrix_products;
};
/// Sets `amx_layers` and files those rows compute- or memory-bound against the AMX peak.
void set_amx_layers(Report& r, std::vector<std::string> layers);
/// What the AMX rows are read against, for the console ("" without such rows).
std::string amx_note(const Report& r);
/// Which convolutions' passes ran as matrix products, for the console ("" where none did).
std::string matrix_product_note(const Report& r);
/// Which layers ran on one thread, for the console ("" where none did).
std::string one_thread_note(const Report& r);

/// Builds the report of `events` recorded while training `g` in `precision` (bf16 and fp16 move
/// 2-byte activations, which the rows' bytes count). `group_by` is "layer" or "op". `gpu_layout`:
/// how a GPU run stored its activations (which of its flattens are views, so which convolutions
/// add their input gradient into another's: plan::conv_adds_to_input_gradient_on_gpu).
Report build_report(const std::vector<Event>& events, const nn::Graph& g, const plan::CpuCeilings& c,
                    const std::string& precision, const std::string& group_by, cuda::Layout gpu_layout);

void print_report(const Report& r, size_t max_rows = 40);
/// Why CPU passes read above the FLOP/s peak where their FLOPs count a convolution's taps on
/// zero padding, which oneDNN skips; "" when none does (or on a GPU).
std::string above_peak_note(const Report& r);
/// Which convolutions ran as Winograd, and that their GFLOP/s count the direct convolution's
/// FLOPs (so they can read above the peak); "" where none did.
std::string winograd_note(const Report& r);
/// Share by which the mean step exceeds the median at which the recording reads as unsteady.
inline constexpr double kUnsteadyShare = 0.05;
/// Why the table's times should be read with care when the mean step is kUnsteadyShare or more
/// above the median, with what else the CPUs did then where the kernel saw it; "" otherwise.
std::string unsteady_note(const Report& r);
/// The same note from a report's JSON (to_json's "step" and "host_load"), for callers that hold
/// only the run's profile: `bench roofline` on a GPU.
std::string unsteady_note_from_json(const nlohmann::json& report);
/// The median step at which a recording reads as slower than the plan: dlperf plan is a median
/// 1-4% off on the VMs it was checked on, its worst runs (the tiny mlp) about 20%, while a slow
/// spell of a VM ran every step of a profile 1.2-1.6x (docs/profile.md).
inline constexpr double kSlowerThanPlan = 1.3;
/// The same on a GPU, whose plan (plan/gpu_step.h, fitted on an H100) was up to 26% off on runs
/// it had not seen: a median step 1.5x the plan's is past that.
inline constexpr double kSlowerThanGpuPlan = 1.5;
/// Why the table's times may all be slow when the median step is kSlowerThanPlan (on a GPU
/// kSlowerThanGpuPlan) or more times the planned one: a slow spell over the whole recording leaves
/// the mean at the median, so unsteady_note cannot see it; on a GPU also kernels slower than the
/// fit's; "" otherwise, or without a plan.
std::string slower_than_plan_note(const Report& r);
nlohmann::json to_json(const Report& r);

/// Chrome Trace Event Format: complete events ("X", microseconds), a track per thread, memory
/// counter tracks ("C"). Gzip-compressed when the path ends in .gz. `hint` is the error's hint
/// when it cannot be written ("check --out": the flag that chose the path).
void write_trace(const std::string& path, const std::vector<Event>& events, const std::vector<MemorySample>& memory,
                 const std::string& hint);

}  // namespace dlperf::profile

// The machine profile (runs/machine-profile.json): the ceilings `dlperf bench all` measured on
// this machine. train --layer-times, dlperf profile, bench roofline and plan read them in place
// of counted or datasheet figures, and say which they used.
//
//   {"cpu": "...", "cpu_identity": {"model": .., "isa": .., "f32_lanes": .., "l1d_bytes": ..}, "threads": 2, "isa": "...", "f32_gflops": 81.2,
//    "bandwidth_gbps": {"L1": .., "L2": .., "L3": .., "DRAM": ..}, "call_overhead_us": 1.7, "bf16_gflops": 912 (where the CPU has
//    AVX512-BF16), "amx_bf16_gflops": 6200 (where oneDNN runs bf16 on AMX tiles),
//    "cpu_kernels": {"direct_over_winograd": 1.31, "max_pool_onednn_over_dlperf": 3.8, "rounds": 7} (each where timed),
//    "quick": false, "source": "dlperf bench all", "host_load": {"others_share": .., "steal_share": ..,
//    "busy": false, ...} (hw::HostLoad, whose busy_note the ceilings' source() repeats),
//    "gpus": [{"name": "NVIDIA H100 80GB HBM3", "peak_gflops": {"fp32": .., "tf32": .., "bf16": ..},
//              "bandwidth_gbps": {"HBM": ..}, "bandwidth_kernel": "read", "quick": false}]}
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace dlperf::bench {

inline constexpr const char* kMachineProfile = "runs/machine-profile.json";
/// The measured ceilings of this CPU model at this thread count.
struct Ceilings {
  double f32_gflops = 0;         ///< 0 = none measured
  double bf16_gflops = 0;        ///< the AVX512-BF16 dot-product peak (bench::bf16_peak); 0 = none (or no such unit)
  double amx_bf16_gflops = 0;    ///< the AMX tiles' bf16 peak (bench::amx_peak); 0 = none (or no such unit)
  nlohmann::json bandwidth_gbps;  ///< {"L1": .., "L2": .., "L3": .., "DRAM": ..}
  double call_overhead_us = 0;   ///< a call into the CPU engine (bench::cpu_dispatch); 0 = none measured
  /// The engine's kernel choices as bench all timed them (cpu::time_direct_over_winograd,
  /// cpu::time_max_pool_16c: the median of its rounds), which every process here then takes in
  /// place of timing them itself: where two kernels time close, each process's single timing
  /// falls either side of the rule's threshold. 0 = not timed.
  double direct_over_winograd = 0, max_pool_onednn_over_dlperf = 0;
  int kernel_rounds = 0;  ///< how many rounds those medians are of
  bool quick = false;            ///< measured by 'dlperf bench all --quick' (fewer sizes and repeats)
  std::string busy_note;         ///< what else ran meanwhile, where that was enough to disturb them (hw::busy_note)
  bool measured_now = false;     ///< measured by this process (plan::ceilings_measured_now), not read from the profile
  /// Where they came from, as tables and notes say it: "measured by 'dlperf bench all', in
  /// runs/machine-profile.json" (with --quick where they were measured so, and the busy note),
  /// or "measured just now, quickly; ...".
  std::string source() const;
  /// How the kernel choices' ratios were timed, in words: "the median of 7 rounds of 'dlperf bench
  /// all', kept in runs/machine-profile.json".
  std::string kernels_source() const;
};
/// Reads kMachineProfile; empty Ceilings when it is missing, damaged, or for another CPU (by its
/// cpu_identity where it has one) or thread count.
Ceilings load_ceilings(const std::string& cpu_model, int threads);

/// The measured ceilings of one GPU model.
struct GpuCeilings {
  std::string name;                ///< as the driver reports it; empty = none measured
  nlohmann::json peak_gflops;      ///< per precision: {"fp32": .., "tf32": .., "bf16": .., "fp16": .., "fp8": ..}
  nlohmann::json bandwidth_gbps;   ///< {"HBM": ..}: device memory, the best of copy, triad and read
  std::string bandwidth_kernel;    ///< which of them it was
  bool quick = false;              ///< measured by bench --quick (fewer sizes and repeats)

  bool empty() const { return name.empty(); }
  /// GFLOP/s for `precision` ("fp32", "tf32", ...); 0 when it was not measured.
  double peak(const std::string& precision) const;
  double hbm_gbps() const { return bandwidth_gbps.value("HBM", 0.0); }
};

/// The ceilings a `dlperf bench` run measured: the best median TFLOP/s per precision over the
/// GEMM sizes (`gemm`: the rows `bench gemm` records) and the best median device bandwidth
/// (`memory`: the "points" `bench gpu-memory` records). Either may be missing or "skipped".
GpuCeilings gpu_ceilings_from_bench(const std::string& gpu_name, const nlohmann::json& gemm, const nlohmann::json& memory);

/// Reads kMachineProfile's entry for `gpu_name`; empty when there is none (or the file is
/// missing or damaged).
GpuCeilings load_gpu_ceilings(const std::string& gpu_name);

nlohmann::json to_json(const GpuCeilings& g);

/// Writes kMachineProfile atomically (a temporary file renamed over it), creating runs/.
void write_machine_profile(const nlohmann::json& profile);
/// Why `profile` (what 'dlperf bench all' measured) should not replace the machine profile, in
/// words; empty where it should. It should not where the profile holds the same CPU measured
///   - on an idle machine, and this run was not (HostLoad::busy): its ceilings would read low;
///   - in full, and this run was --quick: seconds of sampling would replace a minute's, no better
///     than what plan and profile measure on the spot where the profile lacks a thread count.
std::string why_machine_profile_kept(const nlohmann::json& profile);

}  // namespace dlperf::bench

// The hardware catalog (data/hardware.json, compiled in): peak FLOP/s per precision, memory,
// bandwidth, power, interconnect and price of common accelerators, each with its source; grid
// carbon intensity by region; the default PUE. Users add or replace entries with --catalog.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace dlperf::plan {

struct Device {
  std::string id, name, kind;
  std::map<std::string, double> tflops;  ///< by precision; absent = unsupported
  double memory_gb = 0, bandwidth_gbps = 0;
  double tdp_w = 0;             ///< 0 = unknown
  double interconnect_gbps = 0;  ///< as the vendor quotes it (NVLink: both directions together)
  /// What NCCL's all-reduce reaches among 8 of them in one node, as nccl-tests' bus bandwidth
  /// (its time is 2(n-1)/n x bytes / busbw); 0 = not measured: interconnect_gbps is taken.
  double allreduce_busbw_gbps = 0;
  double price_per_hour = -1;   ///< < 0 = unknown
  /// The bus bandwidth a collective inside one node plans with.
  double node_busbw_gbps() const { return allreduce_busbw_gbps > 0 ? allreduce_busbw_gbps : interconnect_gbps; }
  nlohmann::json sources;
  /// Peak TFLOP/s for `precision`, or 0 when unsupported.
  double peak_tflops(const std::string& precision) const;
};

/// A server CPU's datasheet, for reading benchmarks against (data/hardware.json, "cpus").
struct CpuSheet {
  std::string id, name, match;  ///< `match`: a piece of the model name the OS reports
  int cores = 0;                ///< one socket's
  double base_ghz = 0, boost_ghz = 0;
  double fp32_flops_per_cycle = 0;  ///< per core: FMA pipes x fp32 lanes x 2
  double dram_gbps = 0;             ///< one socket: channels x transfer rate x 8 bytes
  double tdp_w = 0;
  std::string sources;
  /// fp32 peak of `cores` of its cores at the base clock, in GFLOP/s.
  double fp32_gflops(int used_cores) const { return used_cores * base_ghz * fp32_flops_per_cycle; }
};

struct Catalog {
  std::vector<Device> devices;
  std::vector<CpuSheet> cpus;
  std::map<std::string, double> grid;  ///< gCO2e per kWh by region
  double pue = 1.1;
  nlohmann::json about;
  /// Throws Error naming the known ids when `id` is not there. Only on a catalog that outlives
  /// the reference: on a temporary (load_catalog().find(...)) it would dangle, so that does not
  /// compile.
  const Device& find(const std::string& id) const&;
  const Device& find(const std::string& id) const&& = delete;
};

/// The catalog id of a GPU from the name the CUDA driver reports ("NVIDIA H100 80GB HBM3" ->
/// "h100-sxm"), or "" when the catalog has no entry for it.
std::string catalog_id_for_gpu(const std::string& name);

/// The catalog's datasheet for the CPU the OS names `model` ("AMD EPYC 9654 96-Core
/// Processor"), or null when it has none.
const CpuSheet* cpu_sheet_for(const Catalog& c, const std::string& model);
const CpuSheet* cpu_sheet_for(const Catalog&& c, const std::string& model) = delete;  // it would point into a temporary

/// The built-in catalog, with the entries of `extra_file` (same format) added or replacing.
Catalog load_catalog(const std::string& extra_file = "");
Catalog parse_catalog(const nlohmann::json& j, const std::string& source);

}  // namespace dlperf::plan

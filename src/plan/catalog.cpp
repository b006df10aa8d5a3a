#include "plan/catalog.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"

namespace dlperf::plan {

extern const char* const kHardwareJson;  // generated from data/hardware.json by CMake

using nlohmann::json;

double Device::peak_tflops(const std::string& precision) const {
  auto it = tflops.find(precision);
  return it == tflops.end() ? 0 : it->second;
}

const Device& Catalog::find(const std::string& id) const& {
  std::string ids;
  for (const auto& d : devices) {
    if (d.id == id) return d;
    ids += (ids.empty() ? "" : ", ") + d.id;
  }
  throw Error(fmt::format("no device '{}' in the hardware catalog", id), "known: " + ids + "; add one with --catalog FILE");
}

Catalog parse_catalog(const json& j, const std::string& source) {
  Catalog c;
  try {
    for (const auto& d : j.value("devices", json::array())) {
      Device x;
      x.id = d.at("id");
      x.name = d.value("name", x.id);
      x.kind = d.value("kind", "gpu");
      const json tflops = d.value("tflops", json::object());  // items() must not outlive it
      for (const auto& [p, v] : tflops.items())
        if (v.is_number()) x.tflops[p] = v;
      x.memory_gb = d.at("memory_gb");
      x.bandwidth_gbps = d.at("bandwidth_gbps");
      x.tdp_w = d.value("tdp_w", json()).is_number() ? d["tdp_w"].get<double>() : 0;
      x.interconnect_gbps = d.value("interconnect_gbps", json()).is_number() ? d["interconnect_gbps"].get<double>() : 0;
      x.price_per_hour = d.value("price_per_hour", json()).is_number() ? d["price_per_hour"].get<double>() : -1;
      x.sources = d.value("sources", json::object());
      check(x.memory_gb > 0 && x.bandwidth_gbps > 0, fmt::format("device '{}' needs memory_gb and bandwidth_gbps above 0", x.id));
      c.devices.push_back(x);
    }
    for (const auto& d : j.value("cpus", json::array())) {
      CpuSheet x;
      x.id = d.at("id");
      x.name = d.value("name", x.id);
      x.match = d.at("match");
      x.cores = d.at("cores");
      x.base_ghz = d.at("base_ghz");
      x.boost_ghz = d.value("boost_ghz", 0.0);
      x.fp32_flops_per_cycle = d.at("fp32_flops_per_cycle");
      x.dram_gbps = d.at("dram_gbps");
      x.tdp_w = d.value("tdp_w", 0.0);
      x.sources = d.value("sources", "");
      check(!x.match.empty() && x.cores > 0 && x.base_ghz > 0 && x.fp32_flops_per_cycle > 0 && x.dram_gbps > 0,
            fmt::format("CPU '{}' needs a match, cores, base_ghz, fp32_flops_per_cycle and dram_gbps above 0", x.id));
      c.cpus.push_back(x);
    }
    if (j.contains("grid_gco2_per_kwh"))
      for (const auto& [k, v] : j["grid_gco2_per_kwh"].items())
        if (v.is_number()) c.grid[k] = v;
    if (j.contains("pue")) c.pue = j["pue"].value("default", 1.1);
    c.about = j.value("about", json());
  } catch (const json::exception& e) {
    throw Error(fmt::format("the hardware catalog {} is malformed: {}", source, e.what()),
                "follow the format of data/hardware.json (docs/plan.md)");
  }
  return c;
}

std::string catalog_id_for_gpu(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("H200")) return "h200";
  if (has("H100")) return has("PCIe") ? "h100-pcie" : "h100-sxm";
  if (has("A100")) return has("80GB") ? "a100-80gb" : "a100-40gb";
  if (has("V100")) return "v100";
  if (has("RTX 4090")) return "rtx-4090";
  if (has("L40")) return "";  // not the L4
  if (has(" L4")) return "l4";
  if (has("T4")) return "t4";
  return "";
}

const CpuSheet* cpu_sheet_for(const Catalog& c, const std::string& model) {
  for (const auto& x : c.cpus)
    if (model.find(x.match) != std::string::npos) return &x;
  return nullptr;
}

Catalog load_catalog(const std::string& extra_file) {
  Catalog c = parse_catalog(json::parse(kHardwareJson), "data/hardware.json");
  if (extra_file.empty()) return c;
  std::ifstream f(extra_file);
  check(bool(f), fmt::format("cannot read the catalog {}", extra_file), "check the path given to --catalog");
  json j;
  try {
    j = json::parse(f);
  } catch (const json::exception& e) {
    throw Error(fmt::format("the catalog {} is not valid JSON: {}", extra_file, e.what()));
  }
  // A key the catalog does not know would add nothing, silently (a "gpus" list, say).
  check(j.is_object(), fmt::format("the catalog {} is not a JSON object", extra_file), "follow the format of data/hardware.json (docs/plan.md)");
  for (const auto& [key, value] : j.items())
    check(key == "devices" || key == "cpus" || key == "grid_gco2_per_kwh" || key == "pue" || key == "about",
          fmt::format("the catalog {} has an entry '{}' that dlperf does not read", extra_file, key),
          "its entries are devices, cpus, grid_gco2_per_kwh, pue and about, as in data/hardware.json (docs/plan.md)");
  const Catalog extra = parse_catalog(j, extra_file);
  for (const auto& d : extra.devices) {
    auto it = std::find_if(c.devices.begin(), c.devices.end(), [&](const Device& x) { return x.id == d.id; });
    if (it != c.devices.end()) *it = d;
    else c.devices.push_back(d);
  }
  for (const auto& x : extra.cpus) {
    auto it = std::find_if(c.cpus.begin(), c.cpus.end(), [&](const CpuSheet& y) { return y.id == x.id; });
    if (it != c.cpus.end()) *it = x;
    else c.cpus.insert(c.cpus.begin(), x);  // ahead of the built-in ones: a user's entry matches first
  }
  for (const auto& [k, v] : extra.grid) c.grid[k] = v;
  if (j.contains("pue")) c.pue = extra.pue;
  return c;
}

}  // namespace dlperf::plan

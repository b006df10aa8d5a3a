#include "plan/catalog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "core/json_error.h"
#include "core/text.h"

namespace dlperf::plan {

extern const char* const kHardwareJson;  // generated from data/hardware.json by CMake

using nlohmann::json;

double Device::peak_tflops(const std::string& precision) const {
  auto it = tflops.find(precision);
  return it == tflops.end() ? 0 : it->second;
}

const Device& Catalog::find(const std::string& id) const& {
  std::vector<std::string> ids, variants;
  for (const auto& d : devices) {
    if (d.id == id) return d;
    ids.push_back(d.id);
    if (d.id.starts_with(id + "-")) variants.push_back(d.id);  // "h100": h100-sxm and h100-pcie
  }
  // No guess by spelling: "rtx-4080" is one edit from "rtx-4090", and another GPU.
  const std::string meant = variants.empty() ? "" : fmt::format("; did you mean {}?", fmt::join(variants, " or "));
  throw Error(fmt::format("no device '{}' in the hardware catalog{}", id, meant),
              fmt::format("known: {}; add one with --catalog FILE", fmt::join(ids, ", ")));
}

namespace {

constexpr const char* kFormatHint = "follow the format of data/hardware.json (docs/plan.md)";

// Reading one catalog entry. A value of the wrong type is refused by name: read silently as
// "not published" it would drop a device's energy, price or a precision from every plan.
struct EntryReader {
  const json& d;
  std::string where;  // "the hardware catalog x.json is malformed: device 'h100-sxm'"

  void fail(const char* key, const char* what) const {
    throw Error(fmt::format("{}: '{}' must be {}, got {}", where, key, what, d.contains(key) ? d[key].dump() : "nothing"),
                kFormatHint);
  }
  /// Refuses a key this entry does not have: a misspelt "tflop" or "price_per_hr" would otherwise
  /// be skipped, and the figure it carries read as not published.
  void only(const std::vector<std::string>& keys) const {
    for (const auto& [k, v] : d.items()) {
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
      const std::string near = closest(k, keys);
      throw Error(fmt::format("{}: unknown key '{}'{}", where, k, near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near)),
                  fmt::format("{}; known keys: {}", kFormatHint, fmt::join(keys, ", ")));
    }
  }
  /// Missing or null: `dflt` (not published).
  double number(const char* key, double dflt) const {
    if (!d.contains(key) || d[key].is_null()) return dflt;
    if (!d[key].is_number()) fail(key, "a number, or null where it is not published");
    return d[key].get<double>();
  }
  double required_number(const char* key) const {
    if (!d.contains(key) || !d[key].is_number()) fail(key, "a number");
    return d[key].get<double>();
  }
  std::string text(const char* key, const std::string& dflt) const {
    if (!d.contains(key)) return dflt;
    if (!d[key].is_string()) fail(key, "a string");
    return d[key].get<std::string>();
  }
  std::string required_text(const char* key) const {
    if (!d.contains(key) || !d[key].is_string() || d[key].get<std::string>().empty()) fail(key, "a non-empty string");
    return d[key].get<std::string>();
  }
};

EntryReader entry(const json& d, const std::string& source, const char* kind, size_t index) {
  std::string where = fmt::format("the hardware catalog {} is malformed: {} {}", source, kind, index + 1);
  check(d.is_object(), fmt::format("{} is not a JSON object", where), kFormatHint);
  if (d.contains("id") && d["id"].is_string()) where = fmt::format("the hardware catalog {} is malformed: {} '{}'", source, kind, d["id"].get<std::string>());
  return {d, where};
}

const json& list(const json& j, const char* key, const std::string& source) {
  static const json empty = json::array();
  if (!j.contains(key)) return empty;
  check(j[key].is_array(), fmt::format("the hardware catalog {} is malformed: '{}' must be a list, got {}", source, key, j[key].dump()),
        kFormatHint);
  return j[key];
}

}  // namespace

Catalog parse_catalog(const json& j, const std::string& source) {
  check(j.is_object(), fmt::format("the hardware catalog {} is not a JSON object", source), kFormatHint);
  Catalog c;
  const json& devices = list(j, "devices", source);
  for (size_t i = 0; i < devices.size(); ++i) {
    const EntryReader r = entry(devices[i], source, "device", i);
    const json& d = devices[i];
    r.only({"id", "name", "kind", "tflops", "memory_gb", "bandwidth_gbps", "tdp_w", "interconnect_gbps", "allreduce_busbw_gbps", "price_per_hour",
             "sources"});
    Device x;
    x.id = r.required_text("id");
    x.name = r.text("name", x.id);
    x.kind = r.text("kind", "gpu");
    if (d.contains("tflops")) {
      if (!d["tflops"].is_object()) r.fail("tflops", "an object of TFLOP/s by precision");
      const EntryReader peaks{d["tflops"], r.where + " tflops"};
      peaks.only({"fp32", "tf32", "bf16", "fp16", "fp8"});
      for (const auto& [p, v] : d["tflops"].items())
        if (const double t = peaks.number(p.c_str(), 0); t > 0) x.tflops[p] = t;  // null: unsupported
        else if (t < 0) peaks.fail(p.c_str(), "a peak above 0, or null where unsupported");
    }
    x.memory_gb = r.required_number("memory_gb");
    x.bandwidth_gbps = r.required_number("bandwidth_gbps");
    x.tdp_w = r.number("tdp_w", 0);
    x.interconnect_gbps = r.number("interconnect_gbps", 0);
    x.allreduce_busbw_gbps = r.number("allreduce_busbw_gbps", 0);
    // A bandwidth of 0 or less would be read as none and the next figure planned with unsaid.
    for (const char* key : {"interconnect_gbps", "allreduce_busbw_gbps"})
      if (r.number(key, 1) <= 0) r.fail(key, "a bandwidth above 0, or null where it is not published");
    x.price_per_hour = r.number("price_per_hour", -1);
    x.sources = d.value("sources", json::object());
    if (!x.sources.is_object()) r.fail("sources", "an object (\"specs\", \"price\": where the figures come from)");
    check(x.memory_gb > 0 && x.bandwidth_gbps > 0, fmt::format("device '{}' needs memory_gb and bandwidth_gbps above 0", x.id));
    c.devices.push_back(x);
  }
  const json& cpus = list(j, "cpus", source);
  for (size_t i = 0; i < cpus.size(); ++i) {
    const EntryReader r = entry(cpus[i], source, "cpu", i);
    r.only({"id", "name", "match", "cores", "base_ghz", "boost_ghz", "fp32_flops_per_cycle", "dram_gbps", "tdp_w", "sources"});
    CpuSheet x;
    x.id = r.required_text("id");
    x.name = r.text("name", x.id);
    x.match = r.required_text("match");
    x.cores = int(r.required_number("cores"));
    x.base_ghz = r.required_number("base_ghz");
    x.boost_ghz = r.number("boost_ghz", 0);
    x.fp32_flops_per_cycle = r.required_number("fp32_flops_per_cycle");
    x.dram_gbps = r.required_number("dram_gbps");
    x.tdp_w = r.number("tdp_w", 0);
    x.sources = r.text("sources", "");
    check(x.cores > 0 && x.base_ghz > 0 && x.fp32_flops_per_cycle > 0 && x.dram_gbps > 0,
          fmt::format("CPU '{}' needs a match, cores, base_ghz, fp32_flops_per_cycle and dram_gbps above 0", x.id));
    c.cpus.push_back(x);
  }
  if (j.contains("grid_gco2_per_kwh")) {
    const json& grid = j["grid_gco2_per_kwh"];
    const EntryReader r{grid, fmt::format("the hardware catalog {} is malformed: grid_gco2_per_kwh", source)};
    if (!grid.is_object()) throw Error(r.where + " must be an object of gCO2e per kWh by region", kFormatHint);
    for (const auto& [k, v] : grid.items())
      if (k != "about" && k != "sources") c.grid[k] = r.required_number(k.c_str());
  }
  if (j.contains("pue")) {
    const EntryReader r{j["pue"], fmt::format("the hardware catalog {} is malformed: pue", source)};
    if (!j["pue"].is_object()) throw Error(r.where + " must be an object with a \"default\"", kFormatHint);
    c.pue = r.number("default", 1.1);
  }
  c.about = j.value("about", json());
  return c;
}

std::string catalog_id_for_gpu(const std::string& name) {
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("B200")) return "b200";
  if (has("H200")) return "h200";
  if (has("H100")) return has("PCIe") ? "h100-pcie" : "h100-sxm";
  if (has("A100")) return has("80GB") ? "a100-80gb" : "a100-40gb";
  if (has("V100")) return "v100";
  if (has("RTX 4090")) return "rtx-4090";
  if (has("L40S")) return "l40s";
  if (has("L40")) return "";  // the L40 (no S) is not in the catalog, and not the L4
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
    throw Error(fmt::format("the catalog {} is not valid JSON: {}", extra_file, json_error_text(e)));
  }
  // A key the catalog does not know would add nothing, silently (a "gpus" list, say).
  check(j.is_object(), fmt::format("the catalog {} is not a JSON object", extra_file), kFormatHint);
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

#include "bench/machine_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/files.h"
#include "core/json_error.h"
#include "core/text.h"
#include "hw/cpu_info.h"
#include "hw/host_load.h"

namespace dlperf::bench {

namespace {

// A damaged profile counts as none, said once on stderr: the ceilings then come from elsewhere
// (measured on the spot, or the datasheet), and the user should know why they changed.
nlohmann::json damaged(const std::string& why) {
  static bool said = false;
  if (!said) std::fprintf(stderr, "note: ignoring %s: %s ('dlperf bench all' writes it again)\n", kMachineProfile, why.c_str());
  said = true;
  return {};
}

nlohmann::json read_profile() {
  std::ifstream f(kMachineProfile);
  if (!f) return {};
  nlohmann::json p;
  try {
    p = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    return damaged(fmt::format("it is not valid JSON ({})", json_error_text(e)));
  }
  if (!p.is_object()) return damaged("it is not a JSON object");
  // The fields the readers below take, with their types: value() would throw on a wrong one.
  // Measured rates are above 0 (bench writes only the levels it found): a 0 or negative one is a
  // hand-edited or damaged file, which would otherwise be replaced by a fallback without a word.
  auto is_rate = [](const nlohmann::json& v) { return v.is_number() && v.get<double>() > 0; };
  auto is_numbers = [&](const nlohmann::json& o) { return o.is_object() && std::all_of(o.begin(), o.end(), is_rate); };
  // The CPU's part may be absent (then it holds no CPU ceilings); where present it must be whole.
  if (p.contains("cpu") &&
      (!p["cpu"].is_string() || !p.value("threads", nlohmann::json()).is_number_integer() ||
       !is_rate(p.value("f32_gflops", nlohmann::json())) || !is_numbers(p.value("bandwidth_gbps", nlohmann::json::object())) ||
       (p.contains("call_overhead_us") && !is_rate(p["call_overhead_us"])) || (p.contains("bf16_gflops") && !is_rate(p["bf16_gflops"])) ||
       (p.contains("amx_bf16_gflops") && !is_rate(p["amx_bf16_gflops"]))))
    return damaged("its cpu, threads, f32_gflops, bandwidth_gbps, call_overhead_us, bf16_gflops or amx_bf16_gflops field is missing, of "
                   "the wrong type, or not above 0");
  if (!p.value("quick", nlohmann::json(false)).is_boolean() || !p.value("cpu_identity", nlohmann::json::object()).is_object())
    return damaged("its quick or cpu_identity field has the wrong type");
  if (const auto& k = p.value("cpu_kernels", nlohmann::json::object()); !is_numbers(k) || (k.contains("rounds") && !k["rounds"].is_number_integer()))
    return damaged("its cpu_kernels field is not an object of timed ratios above 0 and their rounds");
  for (const auto& g : p.value("gpus", nlohmann::json::array()))
    if (!g.is_object() || !g.value("name", nlohmann::json()).is_string() ||
        !is_numbers(g.value("peak_gflops", nlohmann::json::object())) || !is_numbers(g.value("bandwidth_gbps", nlohmann::json::object())) ||
        !g.value("bandwidth_kernel", nlohmann::json("")).is_string() || !g.value("quick", nlohmann::json(false)).is_boolean())
      return damaged("a GPU entry lacks its name, or a field has the wrong type");
  return p;
}

}  // namespace

namespace {
Ceilings ceilings_in(const nlohmann::json& p, const std::string& cpu_model, int threads) {
  // A profile that names its CPU's facts stands for this machine only where they are its facts:
  // a checkout's runs/ that moved from a Zen 3 VM to a Zen 5 one says "AMD EPYC" on both.
  if (p.is_object() && p.contains("cpu_identity") && p["cpu_identity"] != hw::cpu_identity(hw::to_json(hw::cpu_info()))) {
    static bool said = false;
    if (!said)
      std::fprintf(stderr, "note: %s was measured on another CPU, %s, than this one; its CPU ceilings are not used "
                   "('dlperf bench all' measures this one)\n", kMachineProfile, hw::cpu_facts(p["cpu_identity"]).c_str());
    said = true;
    return {};
  }
  Ceilings c;
  if (p.is_object() && p.value("cpu", "") == cpu_model && p.value("threads", 0) == threads) {
    c.f32_gflops = p.value("f32_gflops", 0.0);
    c.bf16_gflops = p.value("bf16_gflops", 0.0);
    c.amx_bf16_gflops = p.value("amx_bf16_gflops", 0.0);
    c.bandwidth_gbps = p.value("bandwidth_gbps", nlohmann::json::object());
    c.call_overhead_us = p.value("call_overhead_us", 0.0);
    const auto& kernels = p.value("cpu_kernels", nlohmann::json::object());
    c.direct_over_winograd = kernels.value("direct_over_winograd", 0.0);
    c.max_pool_onednn_over_dlperf = kernels.value("max_pool_onednn_over_dlperf", 0.0);
    c.kernel_rounds = kernels.value("rounds", 0);
    c.quick = p.value("quick", false);
    c.busy_note = hw::busy_note(hw::host_load_from_json(p.value("host_load", nlohmann::json())));
  }
  return c;
}
}  // namespace

Ceilings load_ceilings(const std::string& cpu_model, int threads) {
  try {
    return ceilings_in(read_profile(), cpu_model, threads);
  } catch (const nlohmann::json::exception& e) {  // a field read_profile does not check, of the wrong type
    damaged(json_error_text(e));
    return {};
  }
}

std::string Ceilings::source() const {
  if (measured_now)
    return fmt::format("measured just now, quickly{}; 'dlperf bench all' keeps a fuller measurement in {}",
                       busy_note.empty() ? "" : fmt::format(", while {} (they may read low)", busy_note), kMachineProfile);
  return fmt::format("measured by 'dlperf bench all{}', in {}{}", quick ? " --quick" : "", kMachineProfile,
                     busy_note.empty() ? "" : fmt::format(", while {} (they may read low: rerun it on an idle machine)", busy_note));
}

std::string Ceilings::kernels_source() const {
  const std::string by = fmt::format("'dlperf bench all{}', kept in {}", quick ? " --quick" : "", kMachineProfile);
  return kernel_rounds > 0 ? fmt::format("the median of {} of {}", counted(kernel_rounds, "round"), by) : "timed by " + by;
}

std::string why_machine_profile_kept(const nlohmann::json& profile) try {
  const auto held = read_profile();
  if (!(held.is_object() && held.contains("cpu") && held["cpu"] == profile["cpu"] &&
        held.value("cpu_identity", nlohmann::json()) == profile.value("cpu_identity", nlohmann::json())))
    return "";  // none, damaged, or another CPU's
  auto busy = [](const nlohmann::json& p) { return hw::host_load_from_json(p.value("host_load", nlohmann::json())).busy(); };
  if (busy(profile) && !busy(held))
    return "it was measured on an idle machine, this run was not ('dlperf bench all' on an idle machine replaces it; or "
           "remove it to keep this run's)";
  if (busy(held) && !busy(profile)) return "";
  if (profile.value("quick", false) && !held.value("quick", false))
    return "it holds a full measurement of this CPU, which --quick's would make coarser ('dlperf bench all' without --quick "
           "replaces it)";
  return "";
} catch (const nlohmann::json::exception&) {
  return "";  // the profile held is damaged: this run's replaces it
}

double GpuCeilings::peak(const std::string& precision) const {
  return peak_gflops.is_object() ? peak_gflops.value(precision, 0.0) : 0.0;
}

GpuCeilings gpu_ceilings_from_bench(const std::string& gpu_name, const nlohmann::json& gemm, const nlohmann::json& memory) {
  GpuCeilings g;
  g.peak_gflops = nlohmann::json::object();
  g.bandwidth_gbps = nlohmann::json::object();
  if (gemm.is_array())
    for (const auto& row : gemm) {
      const std::string p = row.value("precision", "");
      const double gflops = 1e3 * row.value("median_tflops", 0.0);
      if (!p.empty() && gflops > g.peak(p)) g.peak_gflops[p] = gflops;
    }
  if (memory.is_array())
    for (const auto& row : memory)
      if (const double gbps = row.value("median_gbps", 0.0); gbps > g.hbm_gbps()) {
        g.bandwidth_gbps["HBM"] = gbps;
        g.bandwidth_kernel = row.value("kernel", "");
      }
  if (!g.peak_gflops.empty() || !g.bandwidth_gbps.empty()) g.name = gpu_name;
  return g;
}

GpuCeilings load_gpu_ceilings(const std::string& gpu_name) {
  const auto p = read_profile();
  if (!p.is_object() || !p.contains("gpus") || !p["gpus"].is_array()) return {};
  for (const auto& e : p["gpus"])
    if (e.is_object() && e.value("name", "") == gpu_name && !gpu_name.empty()) {
      GpuCeilings g;
      g.name = gpu_name;
      g.peak_gflops = e.value("peak_gflops", nlohmann::json::object());
      g.bandwidth_gbps = e.value("bandwidth_gbps", nlohmann::json::object());
      g.bandwidth_kernel = e.value("bandwidth_kernel", "");
      g.quick = e.value("quick", false);
      return g;
    }
  return {};
}

nlohmann::json to_json(const GpuCeilings& g) {
  return {{"name", g.name}, {"peak_gflops", g.peak_gflops}, {"bandwidth_gbps", g.bandwidth_gbps},
          {"bandwidth_kernel", g.bandwidth_kernel}, {"quick", g.quick}};
}

void write_machine_profile(const nlohmann::json& profile) {
  write_file_atomically(kMachineProfile, profile.dump(2) + "\n", "check that runs/ is writable and the disk has room");
}

}  // namespace dlperf::bench

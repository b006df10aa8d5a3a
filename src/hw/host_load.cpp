#include "hw/host_load.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>

namespace dlperf::hw {

CpuTimes parse_proc_stat(const std::string& text, const std::vector<int>& cpus, double ticks_per_s) {
  CpuTimes t;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "cpu0 ..." lines only; the first line, "cpu  ...", is every CPU's sum.
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;  // steal: 0 on kernels before 2.6.11
    if (!fields && !fields.eof()) continue;
    if (std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    t.cpus += 1;
    t.busy_s += (user + nice + system + irq + softirq) / ticks_per_s;  // guest time is inside user's
    t.steal_s += steal / ticks_per_s;
    t.total_s += (user + nice + system + idle + iowait + irq + softirq + steal) / ticks_per_s;
  }
  t.known = t.cpus > 0;
  return t;
}

double parse_self_stat(const std::string& line, double ticks_per_s) {
  // "PID (comm) state ppid ...": the name may hold spaces and parentheses, so fields count from
  // the last ')'. utime is the 14th field, stime, cutime and cstime follow it.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(line.substr(close + 1));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), std::istream_iterator<std::string>()};
  if (f.size() < 15) return -1;
  double sum = 0;
  for (size_t i = 11; i <= 14; ++i) sum += std::atof(f[i].c_str());  // fields 14-17 of the whole line
  return sum / ticks_per_s;
}

CpuTimes cpu_times_now() {
  const double ticks = double(sysconf(_SC_CLK_TCK));
  cpu_set_t set;
  std::vector<int> cpus;
  if (ticks <= 0 || sched_getaffinity(0, sizeof(set), &set) != 0) return {};
  for (int i = 0; i < CPU_SETSIZE; ++i)
    if (CPU_ISSET(i, &set)) cpus.push_back(i);
  std::ifstream stat("/proc/stat");
  const std::string text{std::istreambuf_iterator<char>(stat), std::istreambuf_iterator<char>()};
  CpuTimes t = parse_proc_stat(text, cpus, ticks);
  std::ifstream self("/proc/self/stat");
  std::string line;
  std::getline(self, line);
  t.self_s = parse_self_stat(line, ticks);
  t.known = t.known && t.self_s >= 0;
  return t;
}

HostLoad host_load(const CpuTimes& begin, const CpuTimes& end) {
  HostLoad h;
  const double total = end.total_s - begin.total_s;
  if (!begin.known || !end.known || begin.cpus != end.cpus) return h;
  h.known = true;
  h.cpus = end.cpus;
  if (total <= 0) return h;  // shorter than the kernel's tick: nothing could be seen, so nothing was
  h.seconds = total / end.cpus;
  // Ticks are sampled, so this process's share and the CPUs' busy time can disagree by a tick or
  // two: a negative remainder is none.
  h.others_share = std::clamp(((end.busy_s - begin.busy_s) - (end.self_s - begin.self_s)) / total, 0.0, 1.0);
  h.steal_share = std::clamp((end.steal_s - begin.steal_s) / total, 0.0, 1.0);
  return h;
}

bool HostLoad::busy() const { return known && seconds >= kLeastJudgedSeconds && others_share + steal_share >= kBusyShare; }

HostLoad combined(const std::vector<HostLoad>& windows) {
  HostLoad all;
  for (const HostLoad& w : windows) {
    if (!w.known) continue;
    all.known = true;
    all.cpus = w.cpus;
    all.others_share += w.others_share * w.seconds;
    all.steal_share += w.steal_share * w.seconds;
    all.seconds += w.seconds;
  }
  if (all.seconds > 0) all.others_share /= all.seconds, all.steal_share /= all.seconds;
  return all;
}

HostLoad host_load_from_json(const nlohmann::json& j) {
  HostLoad h;
  auto number = [&](const char* key) { return j.contains(key) && j[key].is_number(); };
  if (!j.is_object() || j.value("known", nlohmann::json(false)) != true || !number("seconds") || !number("others_share") ||
      !number("steal_share") || !j.value("cpus", nlohmann::json()).is_number_integer())
    return h;
  h.known = true;
  h.cpus = j["cpus"];
  h.seconds = j["seconds"];
  h.others_share = j["others_share"];
  h.steal_share = j["steal_share"];
  return h;
}

nlohmann::json to_json(const HostLoad& h) {
  if (!h.known) return {{"known", false}};
  return {{"known", true},
          {"cpus", h.cpus},
          {"seconds", h.seconds},
          {"others_share", h.others_share},
          {"steal_share", h.steal_share},
          {"busy", h.busy()}};
}

std::string busy_note(const HostLoad& h) {
  if (!h.busy()) return "";
  const std::string cpus = h.cpus == 1 ? "the CPU's" : fmt::format("the {} CPUs'", h.cpus);
  if (h.steal_share < 0.01) return fmt::format("other processes used {:.0f}% of {} time", 100 * h.others_share, cpus);
  if (h.others_share < 0.01) return fmt::format("the hypervisor took {:.0f}% of {} time for other guests", 100 * h.steal_share, cpus);
  return fmt::format("other processes used {:.0f}% of {} time, and the hypervisor took {:.0f}% for other guests",
                     100 * h.others_share, cpus, 100 * h.steal_share);
}

}  // namespace dlperf::hw

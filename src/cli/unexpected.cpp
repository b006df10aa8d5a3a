// What to say about arguments a command does not take. CLI11 lists them all, last first ("The
// following arguments were not expected: 3 --epoch"); users need the first one, in their own
// order, and the flag they meant, as cargo and git say it.
#include <algorithm>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/text.h"
#include "nn/graph.h"

namespace dlperf::cli {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The word after the dashes ("--profile-skip" -> "profile-skip").
std::string bare(const std::string& flag) { return flag.substr(flag.find_first_not_of('-')); }

}  // namespace

std::string suggest_flag(const std::string& given, const std::vector<std::string>& flags) {
  const bool long_flag = given.rfind("--", 0) == 0;
  if (!long_flag || given.size() < 4) return "";  // '-x' is as near to '-h' as to anything
  // The same flag under the other command's name: train's "--profile-skip" is profile's "--skip",
  // and the other way round. Whole words only: "--out" is not "--about".
  for (const auto& f : flags)
    if (f.rfind("--", 0) == 0 && (ends_with(given, "-" + bare(f)) || ends_with(f, "-" + bare(given)))) return f;
  // A typo: one edit ("--epoch", "--target"), or two in a longer word ("--optimiser" has one, but
  // "--skip" is two from "--gzip", which no one meant).
  std::string best;
  size_t best_d = bare(given).size() >= 6 ? 3 : 2;
  for (const auto& f : flags)
    if (const size_t d = edit_distance(given, f); d < best_d) best = f, best_d = d;
  if (!best.empty()) return best;
  // The start of one flag, and of one only ("--batch" -> "--batch-size"; "--pro" starts four).
  std::vector<std::string> starts;
  for (const auto& f : flags)
    if (f.rfind(given, 0) == 0) starts.push_back(f);
  return starts.size() == 1 ? starts[0] : "";
}

std::string unexpected_arguments(const CLI::App& command, const std::string& command_name, const std::vector<std::string>& extras) {
  if (extras.empty()) return "";
  const std::string& first = extras.front();
  if (first.size() > 1 && first[0] == '-' && first.find_first_not_of("-0123456789.e") != std::string::npos) {
    const std::string flag = first.substr(0, first.find('='));
    std::vector<std::string> flags;
    for (const CLI::Option* o : command.get_options()) {
      for (const auto& n : o->get_lnames()) flags.push_back("--" + n);
      for (const auto& n : o->get_snames()) flags.push_back("-" + n);
    }
    std::string message = "'" + command_name + "' has no flag " + flag;
    if (const std::string near = suggest_flag(flag, flags); !near.empty()) message += "; did you mean " + near + "?";
    return message;
  }
  std::string message = "unexpected argument '" + first + "' after '" + command_name + "'";
  // 'dlperf train resnet18': the model is a flag's value.
  const auto presets = nn::preset_names();
  const auto options = command.get_options();
  const bool takes_model = std::any_of(options.begin(), options.end(), [](const CLI::Option* o) { return o->check_lname("model"); });
  if (takes_model && std::find(presets.begin(), presets.end(), first) != presets.end()) message += "; did you mean --model " + first + "?";
  return message;
}

}  // namespace dlperf::cli

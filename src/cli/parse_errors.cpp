// What to say when CLI11 refuses the command line, in dlperf's words. CLI11 lists unknown
// arguments all together, last first ("The following arguments were not expected: 3 --epoch"),
// and says "Could not convert: --batch-size = abc"; users need the first unknown one, in their
// order, and the flag they meant, as cargo and git say it, and what the value should have been.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "core/text.h"
#include "nn/graph.h"

namespace dlperf::cli {
namespace {

// The word after the dashes ("--profile-skip" -> "profile-skip").
std::string bare(const std::string& flag) {
  const size_t start = flag.find_first_not_of('-');
  return start == std::string::npos ? "" : flag.substr(start);
}

}  // namespace

std::string suggest_flag(const std::string& given, const std::vector<std::string>& flags) {
  const bool long_flag = given.starts_with("--");
  if (!long_flag || bare(given).size() < 2) return "";  // '-x' is as near to '-h' as to anything
  // The same flag under the other command's name: train's "--profile-skip" is profile's "--skip",
  // and the other way round. Whole words only: "--out" is not "--about".
  for (const auto& f : flags)
    if (f.starts_with("--") && (given.ends_with("-" + bare(f)) || f.ends_with("-" + bare(given)))) return f;
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
    if (f.starts_with(given)) starts.push_back(f);
  return starts.size() == 1 ? starts[0] : "";
}

std::string unexpected_arguments(const CLI::App& command, const std::string& command_name, const std::vector<std::string>& extras) {
  if (extras.empty()) return "";
  const std::string& first = extras.front();
  const bool negative_number = first.size() > 1 && first[0] == '-' && (std::isdigit(static_cast<unsigned char>(first[1])) || first[1] == '.');
  if (first[0] == '-' && !negative_number && !bare(first).empty()) {
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

namespace {

// "INT:>= 1" -> what such a value is, in words.
std::string kind_of_value(const std::string& type_name) {
  const std::string type = type_name.substr(0, type_name.find(':'));
  if (type == "INT") return "a whole number";
  if (type == "UINT") return "a whole number, 0 or more";
  if (type == "FLOAT") return "a number";
  return "";
}

// "X: rest" -> {X, rest}, where X is a flag's name; {"", ""} otherwise.
std::pair<std::string, std::string> split_at_name(const std::string& what) {
  const size_t colon = what.find(": ");
  if (colon == std::string::npos || what[0] != '-') return {};
  return {what.substr(0, colon), what.substr(colon + 2)};
}

struct RefusedChoice {
  std::string name, given;
  std::vector<std::string> choices;
};

// CLI11's IsMember refusal, "NAME: VALUE not in {A,B,C}", taken apart; an empty name otherwise.
RefusedChoice refused_choice(const std::string& what) {
  const size_t colon = what.find(": "), not_in = what.rfind(" not in {");
  if (colon == std::string::npos || not_in == std::string::npos || not_in < colon || !what.ends_with("}")) return {};
  const std::string list = what.substr(not_in + 9, what.size() - not_in - 10);  // between the braces
  return {what.substr(0, colon), what.substr(colon + 2, not_in - colon - 2), split_commas(list)};
}

}  // namespace

std::string explain_parse_error(const CLI::ParseError& e, const CLI::App& command, const std::string& command_name) {
  // An unknown flag first: the errors after it (a value taken for a positional, a missing
  // subcommand) follow from it.
  const std::vector<std::string> extras = command.remaining();
  const bool extra_flag = !extras.empty() && extras.front().size() > 1 && extras.front()[0] == '-';
  if (dynamic_cast<const CLI::ExtrasError*>(&e) || extra_flag)
    if (std::string said = unexpected_arguments(command, command_name, extras); !said.empty()) return said;
  const std::string what = e.what();
  // "Could not convert: --batch-size = abc"
  if (const std::string prefix = "Could not convert: "; what.starts_with(prefix)) {
    const std::string rest = what.substr(prefix.size());
    const size_t eq = rest.find(" = ");
    if (eq != std::string::npos) {
      const std::string name = rest.substr(0, eq), value = rest.substr(eq + 3);
      const CLI::Option* o = command.get_option_no_throw(name);
      const std::string kind = o ? kind_of_value(o->get_type_name()) : "";
      // '--epochs --runs-dir x': the next flag was taken for the value.
      if (!kind.empty() && value[0] == '-' && command.get_option_no_throw(value))
        return name + " needs a value (" + kind + ") before " + value;
      if (!kind.empty()) return name + ": '" + value + "' is not " + kind;
    }
  }
  // "model is required": a positional argument.
  if (const std::string required = " is required";
      dynamic_cast<const CLI::RequiredError*>(&e) && what[0] != '-' && !what.starts_with("A subcommand") && what.ends_with(required))
    return "'" + command_name + "' needs its " + what.substr(0, what.size() - required.size()) + " argument";
  // "benchmark: nosuch not in {memory,flops}" (a positional) or "--precision: fp8 not in
  // {fp32,tf32}": the value given, the nearest one meant, and the choices, in words.
  if (const auto [name, given, choices] = refused_choice(what); !name.empty()) {
    std::string message = name[0] == '-' ? name + ": '" + given + "' is not one of its values"
                                         : "'" + command_name + "' has no " + name + " '" + given + "'";
    if (const std::string near = closest(given, choices); !near.empty()) message += "; did you mean '" + near + "'?";
    return message + " (" + (name[0] == '-' ? "" : name + "s: ") + fmt::format("{}", fmt::join(choices, ", ")) + ")";
  }
  const auto [name, rest] = split_at_name(what);
  if (name.empty()) return what;
  // "--batch-size: At Most 1 required but received 2"
  if (const std::string at_most = "At Most 1 required but received "; rest.starts_with(at_most))
    return name + " is given " + rest.substr(at_most.size()) + " times: give it once";
  // "--epochs: 1 required INT missing"
  if (rest.find(" required ") != std::string::npos && rest.ends_with(" missing")) {
    const CLI::Option* o = command.get_option_no_throw(name);
    const std::string kind = o ? kind_of_value(o->get_type_name()) : "";
    return name + " needs a value" + (kind.empty() ? "" : " (" + kind + ")");
  }
  return what;
}

}  // namespace dlperf::cli

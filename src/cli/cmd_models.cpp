// dlperf models [show NAME [--input CxHxW] [--json]]
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/text.h"
#include "nn/graph.h"
#include "report/table.h"

namespace dlperf::cli {

namespace {

// The input and classes a spec is made for, where it names them and the user did not.
std::string made_for(const nn::ModelSpec& spec) {
  if (spec.input.empty() && spec.classes == 0) return "any";
  std::string s = spec.input.empty() ? "" : dims_str(spec.input);
  if (spec.classes > 0) s += fmt::format("{}{} classes", s.empty() ? "" : ", ", spec.classes);
  return s;
}

// `input` and `classes` empty / 0 where not given: the spec's own, else 3x32x32 and 10.
void show(const std::string& name, std::string input, int64_t classes, bool as_json) {
  const nn::ModelSpec spec = nn::load_model(name);
  const bool own = (input.empty() && !spec.input.empty()) || (classes == 0 && spec.classes > 0);
  if (input.empty()) input = spec.input.empty() ? "3x32x32" : dims_str(spec.input);
  if (classes == 0) classes = spec.classes > 0 ? spec.classes : 10;
  const nn::Graph g = nn::build_graph(spec, parse_chw(input), classes, 1);
  if (as_json) {
    std::printf("%s\n", nn::resolved_json(spec, g).dump(2).c_str());
    return;
  }
  std::printf("%s%s\ninput %s, %lld classes (per image%s)\n\n", spec.name.c_str(),
              spec.description.empty() ? "" : (": " + spec.description).c_str(), input.c_str(), (long long)classes,
              own ? fmt::format("; what {} is made for: --input and --classes show it on others", spec.name).c_str() : "");
  report::Table t({"layer", "type", "output", "params", "fwd MFLOP", "bwd MFLOP", "activation"});
  for (const auto& n : g.nodes)
    t.add({n.name, std::string(ops::to_string(n.kind)), dims_str(Dims(n.out_dims.begin() + 1, n.out_dims.end())),
           std::to_string(n.param_count()), format_decimals(n.cost.forward.flops / 1e6, 3),
           format_decimals(n.cost.total_backward().flops / 1e6, 3), format_bytes(n.cost.output_bytes)});
  t.separator();
  t.add({"total", "", "", std::to_string(g.param_count()), format_decimals(g.forward_flops() / 1e6, 3),
         format_decimals(g.backward_flops() / 1e6, 3), format_bytes(g.activation_bytes())});
  t.print();
  std::printf("\n%sM parameters (%s as f32); %s MFLOP forward + %s MFLOP backward per image\n",
              format_decimals(double(g.param_count()) / 1e6, 3).c_str(), format_bytes(double(g.param_count()) * 4).c_str(),
              format_decimals(g.forward_flops() / 1e6, 2).c_str(), format_decimals(g.backward_flops() / 1e6, 2).c_str());
}
}  // namespace

void add_models(CLI::App& app, const Command& self) {
  auto* c = app.add_subcommand(self.name, self.summary);
  c->allow_extras();  // 'dlperf models medium' reads as 'dlperf models show medium'
  auto name = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();  // empty / 0: the spec's own, else 3x32x32 and 10
  auto classes = std::make_shared<int64_t>(0);
  auto as_json = std::make_shared<bool>(false);
  auto* s = c->add_subcommand("show", "one model layer by layer: output shape, parameters, FLOPs, activation bytes");
  s->allow_extras(false);  // not inherited from 'models': 'models show medium --foo' is an error
  s->add_option("model", *name, "preset name or .json spec")->required();
  s->add_option("--input", *input, "input shape CxHxW (default: the one the model is made for, else 3x32x32)");
  s->add_option("--classes", *classes, "number of classes (default: the model's own, else 10)")->check(at_least(1));
  s->add_flag("--json", *as_json, "print the resolved spec as JSON (every inferred size filled in)");
  s->callback([=] { show(*name, *input, *classes, *as_json); });
  c->callback([c, s] {
    if (!c->get_subcommands().empty()) return;
    if (const auto extra = c->remaining(); !extra.empty()) {
      std::vector<std::string> unexpected(extra.begin() + (extra[0][0] == '-' ? 0 : 1), extra.end());  // past the model's name
      // 'dlperf models medium --json': the short form takes no flags, 'show' does.
      const bool show_flags = extra[0][0] != '-' && !unexpected.empty() && unexpected[0][0] == '-' &&
                              s->get_option_no_throw(unexpected[0].substr(0, unexpected[0].find('=')));
      check(!show_flags, fmt::format("the short form 'dlperf models NAME' takes no flags: use 'dlperf models show {}'", fmt::join(extra, " ")));
      check(unexpected.empty(), unexpected_arguments(*c, "dlperf models", unexpected),
            "use 'dlperf models' for the list, or 'dlperf models show NAME [--input CxHxW] [--classes N] [--json]' for one");
      show(extra[0], "", 0, false);
      return;
    }
    report::Table t({"model", "params (3x32x32)", "params (1x28x28)", "MFLOP/image fwd (3x32x32)", "made for", "description"});
    for (const auto& name : nn::preset_names()) {
      const auto spec = nn::load_model(name);
      const auto g32 = nn::build_graph(spec, {3, 32, 32}, 10, 1), g28 = nn::build_graph(spec, {1, 28, 28}, 10, 1);
      t.add({name, fmt::format("{:.3f}M", double(g32.param_count()) / 1e6), fmt::format("{:.3f}M", double(g28.param_count()) / 1e6),
             fmt::format("{:.2f}", g32.forward_flops() / 1e6), made_for(spec), spec.description});
    }
    t.print();
    std::printf("\n'dlperf models show NAME' prints one layer by layer; --model also takes a .json spec file.\n");
  });
}

}  // namespace dlperf::cli

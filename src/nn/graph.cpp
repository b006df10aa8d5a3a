#include "nn/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_error.h"
#include "nn/presets.h"

namespace dlperf::nn {

using nlohmann::json;
using ops::OpKind;

namespace {

struct KindInfo {
  OpKind kind;
  std::set<std::string> keys;  // allowed besides type/name/input
};

const std::map<std::string, KindInfo>& kinds() {
  static const std::map<std::string, KindInfo> k = {
      {"conv2d", {OpKind::conv2d, {"out_channels", "kernel", "stride", "padding", "bias"}}},
      {"batchnorm2d", {OpKind::batchnorm2d, {"eps", "momentum"}}},
      {"relu", {OpKind::relu, {}}},
      {"maxpool2d", {OpKind::maxpool2d, {"kernel", "stride", "padding"}}},
      {"avgpool2d", {OpKind::avgpool2d, {"kernel", "stride", "padding"}}},
      {"global_avgpool", {OpKind::global_avgpool, {}}},
      {"flatten", {OpKind::flatten, {}}},
      {"linear", {OpKind::linear, {"out_features", "bias"}}},
      {"dropout", {OpKind::dropout, {"p"}}},
      {"add", {OpKind::add, {"from"}}},
  };
  return k;
}

std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out.empty() ? "(none)" : out;
}

int64_t get_int(const json& l, const char* key, int64_t dflt, const std::string& where) {
  if (!l.contains(key)) return dflt;
  check(l[key].is_number_integer(), fmt::format("{}: '{}' must be an integer, got {}", where, key, l[key].dump()));
  return l[key].get<int64_t>();
}

double get_num(const json& l, const char* key, double dflt, const std::string& where) {
  if (!l.contains(key)) return dflt;
  check(l[key].is_number(), fmt::format("{}: '{}' must be a number, got {}", where, key, l[key].dump()));
  return l[key].get<double>();
}

bool get_bool(const json& l, const char* key, bool dflt, const std::string& where) {
  if (!l.contains(key)) return dflt;
  check(l[key].is_boolean(), fmt::format("{}: '{}' must be true or false, got {}", where, key, l[key].dump()));
  return l[key].get<bool>();
}

std::string get_string(const json& l, const char* key, const std::string& dflt, const std::string& where) {
  if (!l.contains(key)) return dflt;
  check(l[key].is_string(), fmt::format("{}: '{}' must be a string, got {}", where, key, l[key].dump()));
  return l[key].get<std::string>();
}

}  // namespace

ModelSpec parse_model_spec(const json& j, const std::string& source) {
  const std::string hint = "see docs/model-spec.md for the format";
  check(j.is_object(), fmt::format("model spec {}: expected a JSON object", source), hint);
  // What 'dlperf models show --json' adds (input, classes, parameters; per layer in_channels,
  // num_features, in_features, output_shape, parameters) is accepted, so its output loads back,
  // and recomputed from the data like any inferred size.
  for (auto& [k, v] : j.items())
    check(k == "name" || k == "description" || k == "layers" || k == "input" || k == "classes" || k == "train_images" ||
              k == "parameters",
          fmt::format("model spec {}: unknown top-level key '{}' (allowed: name, description, input, classes, train_images, layers)",
                      source, k),
          hint);
  check(j.contains("layers") && j["layers"].is_array() && !j["layers"].empty(),
        fmt::format("model spec {}: needs a non-empty 'layers' list", source), hint);
  ModelSpec spec;
  const std::string top = fmt::format("model spec {}", source);
  spec.name = get_string(j, "name", std::filesystem::path(source).stem().string(), top);
  spec.description = get_string(j, "description", "", top);
  if (j.contains("input")) {  // [C, H, W] as 'models show --json' writes it, or "CxHxW"
    const json& in = j["input"];
    const bool dims = in.is_array() && in.size() == 3 &&
                      std::all_of(in.begin(), in.end(), [](const json& v) { return v.is_number_integer() && v.get<int64_t>() > 0; });
    check(dims || in.is_string(), fmt::format("{}: 'input' must be [C, H, W] or \"CxHxW\", got {}", top, in.dump()), hint);
    spec.input = dims ? in.get<Dims>() : parse_chw(in.get<std::string>(), top + ": 'input'");
  }
  spec.classes = get_int(j, "classes", 0, top);
  check(!j.contains("classes") || spec.classes >= 1, fmt::format("{}: 'classes' must be at least 1, got {}", top, spec.classes), hint);
  spec.train_images = get_int(j, "train_images", 0, top);
  check(!j.contains("train_images") || spec.train_images >= 1,
        fmt::format("{}: 'train_images' must be at least 1, got {}", top, spec.train_images), hint);
  std::map<std::string, int> counters;
  std::set<std::string> names;
  const std::set<std::string> derived = {"in_channels", "num_features", "in_features", "output_shape", "parameters"};
  for (size_t i = 0; i < j["layers"].size(); ++i) {
    const json& l = j["layers"][i];
    std::string where = fmt::format("model spec {}: layer {}", source, i + 1);
    check(l.is_object() && l.contains("type") && l["type"].is_string(),
          where + ": needs a \"type\" string", hint);
    const std::string type = l["type"];
    auto it = kinds().find(type);
    if (it == kinds().end()) {
      std::set<std::string> all;
      for (auto& [k, _] : kinds()) all.insert(k);
      throw Error(fmt::format("{}: unknown layer type '{}' (known: {})", where, type, join(all)), hint);
    }
    LayerSpec s;
    s.kind = it->second.kind;
    s.name = l.contains("name") ? get_string(l, "name", "", where) : fmt::format("{}{}", type, ++counters[type]);
    check(!s.name.empty(), where + ": 'name' is empty", "leave it out for a generated one (" + type + "1, ...)");
    where += fmt::format(" ('{}', {})", s.name, type);
    check(names.insert(s.name).second, where + ": the name is used twice", "give each layer its own name");
    for (auto& [k, v] : l.items())
      check(k == "type" || k == "name" || k == "input" || it->second.keys.count(k) || derived.count(k),
            fmt::format("{}: unknown parameter '{}' (allowed: {})", where, k, join(it->second.keys)), hint);
    s.input = get_string(l, "input", "", where);
    // "input" names the model's input, which the first layer reads anyway (resolved specs say so).
    check(s.name != "input", where + ": 'input' names the model's input, not a layer", "give the layer another name");
    check(s.input != "input" || i == 0, where + ": only the first layer reads the model input ('input')",
          "read an earlier layer, or move this one first");
    if (s.input == "input") s.input.clear();
    auto& a = s.attrs;
    a.out_channels = get_int(l, "out_channels", 0, where);
    a.kernel = get_int(l, "kernel", s.kind == OpKind::conv2d ? 3 : 2, where);
    a.stride = get_int(l, "stride", s.kind == OpKind::conv2d ? 1 : a.kernel, where);
    a.padding = get_int(l, "padding", 0, where);
    a.bias = get_bool(l, "bias", true, where);
    a.p = get_num(l, "p", 0.5, where);
    a.eps = get_num(l, "eps", 1e-5, where);
    a.momentum = get_num(l, "momentum", 0.1, where);
    if (s.kind == OpKind::conv2d)
      check(a.out_channels > 0, where + ": needs out_channels > 0");
    if (s.kind == OpKind::linear) {
      check(l.contains("out_features"), where + ": needs out_features (a number or \"classes\")");
      if (l["out_features"] == "classes") s.out_is_classes = true;
      else a.out_features = get_int(l, "out_features", 0, where);
      check(s.out_is_classes || a.out_features > 0, where + ": out_features must be > 0 or \"classes\"");
    }
    if (s.kind == OpKind::dropout) check(a.p >= 0 && a.p < 1, where + ": p must be in [0, 1)");
    if (s.kind == OpKind::batchnorm2d) {
      // eps 0 divides by zero on a channel that is constant over the batch (a dead relu's, say).
      check(a.eps > 0 && a.eps < 1, fmt::format("{}: eps must be in (0, 1), got {}", where, a.eps));
      // The running statistics move by `momentum` of the way to the batch's (PyTorch's meaning).
      check(a.momentum >= 0 && a.momentum <= 1, fmt::format("{}: momentum must be in [0, 1], got {}", where, a.momentum));
    }
    if (s.kind == OpKind::add) {
      check(l.contains("from") && l["from"].is_string(), where + ": needs \"from\": the name of the layer to add");
      s.from = l["from"];
    }
    spec.layers.push_back(std::move(s));
  }
  return spec;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (const auto& p : presets()) n.push_back(p.name);
  return n;
}

ModelSpec load_model(const std::string& name_or_path) {
  for (const auto& p : presets())
    if (p.name == name_or_path) return parse_model_spec(json::parse(p.json), name_or_path);
  std::ifstream f(name_or_path);
  if (!f) {
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error(fmt::format("model '{}' is neither a preset nor a readable file", name_or_path),
                fmt::format("use one of: {} (see 'dlperf models'), or a path to a .json spec", names));
  }
  json j;
  try {
    j = json::parse(f);
  } catch (const json::parse_error& e) {
    throw Error(fmt::format("model spec {} is not valid JSON: {}", name_or_path, json_error_text(e)));
  }
  return parse_model_spec(j, name_or_path);
}

int64_t Node::param_count() const {
  int64_t n = 0;
  for (const auto& p : params) n += numel(p.dims);
  return n;
}

int64_t Graph::param_count() const {
  int64_t n = 0;
  for (const auto& node : nodes) n += node.param_count();
  return n;
}

double Graph::forward_flops() const {
  double f = 0;
  for (const auto& n : nodes) f += n.cost.forward.flops;
  return f;
}

double Graph::backward_flops() const {
  double f = 0;
  for (const auto& n : nodes) f += n.cost.total_backward().flops;
  return f;
}

double Graph::activation_bytes() const {
  double b = 0;
  for (const auto& n : nodes) b += n.cost.output_bytes;
  return b;
}

void check_indexable(const Node& n, const std::string& engine) {
  auto check_size = [&](const Dims& d, const std::string& what) {
    check(values_in(d) <= kMaxIndexedValues,
          fmt::format("layer '{}' ({}): its {} {} holds {:.3g} values, more than the 2^31 - 1 {} indexes", n.name,
                      ops::to_string(n.kind), what, dims_str(d), values_in(d), engine),
          "use smaller images (--input, or other --data), a smaller batch, or fewer classes, channels or features");
  };
  for (const Dims& d : n.in_dims) check_size(d, "input");
  check_size(n.out_dims, "output");
  for (const auto& p : n.params) check_size(p.dims, p.name);
}

std::vector<int> Graph::consumers(int i) const {
  std::vector<int> c;
  for (size_t j = 0; j < nodes.size(); ++j)
    for (int in : nodes[j].inputs)
      if (in == i) c.push_back(int(j));
  return c;
}

namespace {
// An activation's values per image are capped at kMaxIndexedValues here; whole tensors (the
// batch, the weights) each engine checks itself (check_indexable), so the planner still answers
// for GPUs whether a model with a larger weight fits.
Graph build_graph_at(const ModelSpec& spec, const Dims& chw, int64_t classes, int64_t batch) {
  check(batch >= 1 && double(batch) <= kMaxIndexedValues, fmt::format("batch size {} is not between 1 and 2^31 - 1", batch));
  check(classes >= 1 && double(classes) <= kMaxIndexedValues, fmt::format("{} classes is not between 1 and 2^31 - 1", classes));
  check(values_in(chw) <= kMaxIndexedValues,
        fmt::format("an image of {} holds more than 2^31 - 1 values, more than dlperf's engines index", dims_str(chw)),
        "use smaller images");
  Graph g;
  g.model = spec.name;
  g.input = {batch, chw[0], chw[1], chw[2]};
  g.classes = classes;
  std::map<std::string, int> index;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const std::string where = fmt::format("model {}: layer '{}' ({})", spec.name, l.name, ops::to_string(l.kind));
    Node n;
    n.name = l.name;
    n.kind = l.kind;
    n.attrs = l.attrs;
    if (l.out_is_classes) n.attrs.out_features = classes;
    auto resolve = [&](const std::string& ref) {
      auto it = index.find(ref);
      check(it != index.end(), fmt::format("{}: no earlier layer named '{}'", where, ref),
            "a layer can only read layers above it in the list");
      return it->second;
    };
    n.inputs.push_back(l.input.empty() ? int(i) - 1 : resolve(l.input));
    if (l.kind == OpKind::add) n.inputs.push_back(resolve(l.from));
    for (int in : n.inputs) n.in_dims.push_back(in < 0 ? g.input : g.nodes[size_t(in)].out_dims);
    try {
      n.out_dims = ops::infer_shape(n.kind, n.attrs, n.in_dims);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {} (input {})", where, e.what(), dims_str(n.in_dims[0])), e.hint());
    }
    n.params = ops::param_shapes(n.kind, n.attrs, n.in_dims[0]);
    const Dims per_image(n.out_dims.begin() + 1, n.out_dims.end());
    check(values_in(per_image) <= kMaxIndexedValues,
          fmt::format("{}: its output {} holds more than 2^31 - 1 values per image, more than dlperf's engines index", where,
                      dims_str(per_image)),
          "use smaller images (--input, or other --data), or fewer channels or features");
    const int in = n.inputs[0];
    n.needs_dx = in >= 0 && !(g.nodes[size_t(in)].kind == OpKind::flatten && g.nodes[size_t(in)].inputs[0] < 0);
    n.cost = n.cost_at(4);
    index[n.name] = int(i);
    g.nodes.push_back(std::move(n));
  }
  // A layer nothing reads (a branch that never rejoins) cannot change the loss: its gradient
  // would be zero, so it would only cost time. In a list of layers that is a slip, so say which.
  for (size_t i = 0; i + 1 < g.nodes.size(); ++i)
    check(!g.consumers(int(i)).empty(),
          fmt::format("model {}: layer '{}' ({}): nothing reads its output, so it cannot change the loss", spec.name, g.nodes[i].name,
                      ops::to_string(g.nodes[i].kind)),
          "remove it, or read it from a later layer ('input', or an add's 'from')");
  const Dims& out = g.nodes.back().out_dims;
  check(out.size() == 2 && out[1] == classes,
        fmt::format("model {} ends in shape {} but the data has {} classes", spec.name,
                    dims_str(out), classes),
        "end the model with a linear layer whose out_features is \"classes\"");
  return g;
}
}  // namespace

Graph build_graph(const ModelSpec& spec, const Dims& chw, int64_t classes, int64_t batch) {
  check(chw.size() == 3, "input shape must be CxHxW");
  try {
    return build_graph_at(spec, chw, classes, batch);
  } catch (const Error& e) {
    // Pools and strided convolutions shrink the image: where a window no longer fits, say the
    // smallest square image the model takes, since a preset's input (--input, the data) is what
    // a user can change. Graphs are cheap to build, so the search just tries each size.
    if (std::string(e.what()).find("does not fit a") == std::string::npos) throw;
    for (int64_t side = 1; side <= 4096; ++side) {
      try {
        build_graph_at(spec, {chw[0], side, side}, classes, 1);
      } catch (const Error&) {
        continue;
      }
      throw Error(e.what(), fmt::format("{} needs images of at least {}x{}, and these are {}x{}: use larger ones (--input, or "
                                        "other --data), or a smaller kernel or stride, or fewer pooling layers",
                                        spec.name, side, side, chw[1], chw[2]));
    }
    throw;
  }
}

ops::OpCost Node::cost_at(double elem_bytes) const {
  ops::OpCost c = ops::cost(kind, attrs, in_dims, elem_bytes);
  if (!needs_dx) c.backward_data = {};
  return c;
}

json resolved_json(const ModelSpec& spec, const Graph& g) {
  json layers = json::array();
  for (const auto& n : g.nodes) {
    json l{{"type", ops::to_string(n.kind)}, {"name", n.name}};
    l["input"] = n.inputs[0] < 0 ? "input" : g.nodes[size_t(n.inputs[0])].name;
    const auto& a = n.attrs;
    switch (n.kind) {
      case OpKind::conv2d:
        l.update({{"in_channels", n.in_dims[0][1]}, {"out_channels", a.out_channels}, {"kernel", a.kernel},
                  {"stride", a.stride}, {"padding", a.padding}, {"bias", a.bias}});
        break;
      case OpKind::batchnorm2d:
        l.update({{"num_features", n.in_dims[0][1]}, {"eps", a.eps}, {"momentum", a.momentum}});
        break;
      case OpKind::maxpool2d:
      case OpKind::avgpool2d:
        l.update({{"kernel", a.kernel}, {"stride", a.stride}, {"padding", a.padding}});
        break;
      case OpKind::linear:
        l.update({{"in_features", n.in_dims[0][1]}, {"out_features", a.out_features}, {"bias", a.bias}});
        break;
      case OpKind::dropout: l["p"] = a.p; break;
      case OpKind::add: l["from"] = g.nodes[size_t(n.inputs[1])].name; break;
      default: break;
    }
    Dims shape(n.out_dims.begin() + 1, n.out_dims.end());
    l["output_shape"] = shape;
    l["parameters"] = n.param_count();
    layers.push_back(std::move(l));
  }
  json out = {{"name", spec.name},
              {"description", spec.description},
              {"input", Dims(g.input.begin() + 1, g.input.end())},
              {"classes", g.classes},
              {"parameters", g.param_count()},
              {"layers", layers}};
  if (spec.train_images > 0) out["train_images"] = spec.train_images;
  return out;
}

}  // namespace dlperf::nn

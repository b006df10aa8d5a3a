// The model spec format: presets resolve for both data shapes, sizes are as documented, and
// every kind of mistake gets an error that names the layer.
#include <gtest/gtest.h>

#include "core/error.h"
#include "nn/graph.h"
#include "test_util.h"

namespace dlperf::test {
namespace {

using nlohmann::json;

nn::Graph graph_of(const json& j, Dims chw = {1, 28, 28}) {
  return nn::build_graph(nn::parse_model_spec(j, "test.json"), chw, 10, 2);
}

TEST(Presets, ResolveForBothShapesWithTheDocumentedSizes) {
  const std::map<std::string, std::pair<double, double>> expected = {  // params on 3x32x32: range
      {"small", {0.025e6, 0.04e6}},
      {"medium", {0.35e6, 0.45e6}},
      {"large", {6.4e6, 7.0e6}},
      {"resnet18", {11.1e6, 11.25e6}},
      {"resnet18-imagenet", {11.1e6, 11.25e6}},
      {"mlp", {0.19e6, 0.2e6}},
      {"logreg", {0.0307e6, 0.0308e6}}};  // 3072 x 10 weights and 10 biases
  for (const auto& name : nn::preset_names()) {
    const auto spec = nn::load_model(name);
    const auto g32 = nn::build_graph(spec, {3, 32, 32}, 10, 4);
    const auto g28 = nn::build_graph(spec, {1, 28, 28}, 10, 4);
    ASSERT_TRUE(expected.count(name)) << name;
    EXPECT_GE(double(g32.param_count()), expected.at(name).first) << name;
    EXPECT_LE(double(g32.param_count()), expected.at(name).second) << name;
    EXPECT_EQ(g28.nodes.back().out_dims, (Dims{4, 10}));
  }
  // The CIFAR ResNet-18 has 11,173,962 parameters with 10 classes (torchvision's count).
  EXPECT_EQ(nn::build_graph(nn::load_model("resnet18"), {3, 32, 32}, 10, 1).param_count(), 11173962);
  // The ImageNet one is torchvision's resnet18(): 11,689,512 parameters with 1000 classes, and
  // 1.814 GMAC a 224x224 image in its convolutions and classifier (the figure papers quote),
  // reaching the blocks at 56x56 and the classifier at 7x7.
  // It says so: models show and plan take 3x224x224 and 1000 classes unless told otherwise.
  const nn::ModelSpec imagenet = nn::load_model("resnet18-imagenet");
  EXPECT_EQ(imagenet.input, (Dims{3, 224, 224}));
  EXPECT_EQ(imagenet.classes, 1000);
  EXPECT_TRUE(nn::load_model("resnet18").input.empty());  // the others take any input
  EXPECT_EQ(nn::load_model("medium").classes, 0);
  const auto in = nn::build_graph(imagenet, {3, 224, 224}, 1000, 1);
  EXPECT_EQ(in.param_count(), 11689512);
  double macs = 0;
  for (const auto& n : in.nodes)
    if (n.kind == ops::OpKind::conv2d || n.kind == ops::OpKind::linear) macs += n.cost.forward.flops / 2;
  EXPECT_NEAR(macs / 1e9, 1.814, 0.001);
  for (const auto& n : in.nodes) {
    if (n.name == "pool1") {
      EXPECT_EQ(n.out_dims, (Dims{1, 64, 56, 56}));
    }
    if (n.name == "layer4.2.relu2") {
      EXPECT_EQ(n.out_dims, (Dims{1, 512, 7, 7}));
    }
  }
}

TEST(Spec, InfersChannelsAndFeaturesFromTheData) {
  json j = {{"layers",
             {{{"type", "conv2d"}, {"out_channels", 4}, {"kernel", 3}, {"padding", 1}},
              {{"type", "maxpool2d"}, {"kernel", 2}},
              {{"type", "flatten"}},
              {{"type", "linear"}, {"out_features", "classes"}}}}};
  auto g1 = graph_of(j, {1, 8, 8});
  auto g3 = graph_of(j, {3, 6, 6});
  EXPECT_EQ(g1.nodes[0].params[0].dims, (Dims{4, 1, 3, 3}));
  EXPECT_EQ(g3.nodes[0].params[0].dims, (Dims{4, 3, 3, 3}));
  EXPECT_EQ(g1.nodes[3].params[0].dims, (Dims{10, 4 * 4 * 4}));
  EXPECT_EQ(g3.nodes[3].params[0].dims, (Dims{10, 4 * 3 * 3}));
  // Names are made up where missing, and the resolved spec carries every inferred size.
  EXPECT_EQ(g1.nodes[0].name, "conv2d1");
  auto r = nn::resolved_json(nn::parse_model_spec(j, "t"), g3);
  EXPECT_EQ(r["layers"][0]["in_channels"], 3);
  EXPECT_EQ(r["layers"][3]["in_features"], 36);
  EXPECT_EQ(r["layers"][3]["out_features"], 10);
}

// 'dlperf models show NAME --json' writes a spec that loads back: edit it, train it. Its derived
// sizes are recomputed from the data (the resolved resnet18 trains on 1-channel images too).
TEST(Spec, TheResolvedSpecLoadsBackAndResolvesTheSame) {
  for (const auto& name : nn::preset_names()) {
    const auto spec = nn::load_model(name);
    const json r = nn::resolved_json(spec, nn::build_graph(spec, {3, 32, 32}, 10, 1));
    const nn::ModelSpec again = nn::parse_model_spec(r, "resolved.json");
    EXPECT_EQ(nn::resolved_json(again, nn::build_graph(again, {3, 32, 32}, 10, 1)), r) << name;
    EXPECT_EQ(nn::build_graph(again, {1, 28, 28}, 10, 1).param_count(), nn::build_graph(spec, {1, 28, 28}, 10, 1).param_count()) << name;
  }
  // 'input' is the model's input: the first layer may name it; no other layer, and no layer's name.
  auto err = [](const json& layers) { return error_of([&] { graph_of({{"layers", layers}}); }); };
  EXPECT_NE(err({{{"type", "relu"}}, {{"type", "relu"}, {"input", "input"}}}).find("only the first layer reads the model input"),
            std::string::npos);
  EXPECT_NE(err({{{"type", "relu"}, {"name", "input"}}}).find("'input' names the model's input, not a layer"), std::string::npos);
}

TEST(Spec, CostsMatchHandCounts) {
  json j = {{"layers", {{{"type", "conv2d"}, {"out_channels", 8}, {"kernel", 3}, {"padding", 1}, {"bias", false}},
                        {{"type", "flatten"}},
                        {{"type", "linear"}, {"out_features", 10}}}}};
  auto g = graph_of(j, {3, 5, 5});  // batch 2
  // conv: 2 images x 8 x 5 x 5 outputs, each 3*3*3 MACs
  EXPECT_DOUBLE_EQ(g.nodes[0].cost.forward.flops, 2.0 * 2 * 8 * 25 * 27);
  EXPECT_DOUBLE_EQ(g.nodes[0].cost.backward_weight.flops, 2.0 * 2 * 8 * 25 * 27);
  EXPECT_DOUBLE_EQ(g.nodes[0].cost.backward_data.flops, 0.0);  // nothing needs d(input)
  EXPECT_DOUBLE_EQ(g.nodes[2].cost.forward.flops, 2.0 * 2 * 200 * 10 + 2 * 10);
  EXPECT_DOUBLE_EQ(g.nodes[2].cost.backward_data.flops, 2.0 * 2 * 200 * 10);
}

// The taps on zero padding, counted as PyTorch's FLOP counters count them, and told apart for
// the passes' rates against a CPU's peak (oneDNN skips them).
TEST(Spec, AConvolutionsTapsOnZeroPaddingAreToldApart) {
  ops::OpAttrs a;
  a.out_channels = 4, a.kernel = 3, a.stride = 1, a.padding = 1;
  // 3x3 over 8x8 with padding 1: of each axis's 24 taps, the 2 at the edges' outside miss.
  EXPECT_DOUBLE_EQ(ops::conv_taps_on_data_share(a, {2, 3, 8, 8}), (22.0 / 24) * (22.0 / 24));
  EXPECT_DOUBLE_EQ(ops::conv_taps_on_data_share(a, {2, 3, 4, 4}), (10.0 / 12) * (10.0 / 12));  // 31% on padding
  EXPECT_DOUBLE_EQ(ops::conv_taps_on_data_share(a, {2, 3, 4, 8}), (10.0 / 12) * (22.0 / 24));  // each axis its own
  // Stride 2 over 5 wide: outputs at -1..1, 1..3, 3..5 read 2, 3 and 2 of their 3 taps.
  a.stride = 2;
  EXPECT_DOUBLE_EQ(ops::conv_taps_on_data_share(a, {1, 1, 5, 5}), (7.0 / 9) * (7.0 / 9));
  a.stride = 1, a.padding = 0;
  EXPECT_DOUBLE_EQ(ops::conv_taps_on_data_share(a, {1, 1, 8, 8}), 1.0);
  // The same share of every pass; the FLOPs themselves stay the full count.
  a.padding = 1, a.bias = false;
  const ops::OpCost c = ops::cost(ops::OpKind::conv2d, a, {{2, 3, 8, 8}});
  const double macs = 2.0 * 4 * 64 * 27, on_padding = 2 * macs * (1 - (22.0 / 24) * (22.0 / 24));
  EXPECT_DOUBLE_EQ(c.forward.flops, 2 * macs);
  for (const ops::PassCost& p : {c.forward, c.backward_data, c.backward_weight}) EXPECT_NEAR(p.padding_flops, on_padding, 1e-9 * macs);
  EXPECT_NEAR(c.total_backward().padding_flops, 2 * on_padding, 1e-9 * macs);
  EXPECT_DOUBLE_EQ(ops::cost(ops::OpKind::linear, {.out_features = 3}, {{2, 5}}).forward.padding_flops, 0.0);
}

TEST(Spec, ResidualAddNamesItsEarlierInput) {
  json j = {{"layers",
             {{{"type", "conv2d"}, {"name", "stem"}, {"out_channels", 4}, {"padding", 1}},
              {{"type", "relu"}, {"name", "a"}},
              {{"type", "conv2d"}, {"name", "c"}, {"out_channels", 4}, {"padding", 1}},
              {{"type", "add"}, {"name", "sum"}, {"from", "a"}},
              {{"type", "global_avgpool"}},
              {{"type", "flatten"}},
              {{"type", "linear"}, {"out_features", 10}}}}};
  auto g = graph_of(j);
  EXPECT_EQ(g.nodes[3].inputs, (std::vector<int>{2, 1}));
  EXPECT_EQ(g.consumers(1), (std::vector<int>{2, 3}));
}

TEST(SpecErrors, SayWhatIsWrongAndWhere) {
  auto err = [](const json& layers) { return error_of([&] { graph_of({{"layers", layers}}); }); };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(err({{{"type", "conv3d"}}}), "unknown layer type 'conv3d'"));
  EXPECT_TRUE(has(err({{{"type", "conv2d"}, {"name", "c1"}, {"out_channels", 4}, {"kernal", 3}}}),
                  "layer 1 ('c1', conv2d): unknown parameter 'kernal'"));
  EXPECT_TRUE(has(err({{{"type", "linear"}}}), "needs out_features"));
  EXPECT_TRUE(has(err({{{"type", "conv2d"}, {"out_channels", "many"}}}), "'out_channels' must be an integer"));
  EXPECT_TRUE(has(err({{{"type", "dropout"}, {"p", 1.5}}}), "p must be in [0, 1)"));
  // Mistyped keys that are not numbers get the same kind of message (they used to surface as
  // nlohmann's "[json.exception.type_error.302] type must be boolean, but is string").
  EXPECT_TRUE(has(err({{{"type", "linear"}, {"out_features", 10}, {"bias", "yes"}}}), "'bias' must be true or false, got \"yes\""));
  EXPECT_TRUE(has(err({{{"type", "relu"}, {"name", 3}}}), "layer 1: 'name' must be a string, got 3"));
  EXPECT_TRUE(has(err({{{"type", "relu"}, {"input", {"a"}}}}), "'input' must be a string"));
  EXPECT_TRUE(has(err({{{"type", "relu"}, {"name", ""}}}), "layer 1: 'name' is empty"));
  EXPECT_TRUE(has(error_of([] { nn::parse_model_spec({{"name", 1}, {"layers", {{{"type", "relu"}}}}}, "a.json"); }),
                  "model spec a.json: 'name' must be a string, got 1"));
  EXPECT_TRUE(has(error_of([] { nn::parse_model_spec({{"description", false}, {"layers", {{{"type", "relu"}}}}}, "a.json"); }),
                  "'description' must be a string"));
  // The input and classes a spec is made for: [C, H, W] or "CxHxW", and a positive count.
  auto spec_err = [](const json& top) {
    json j = top;
    j["layers"] = {{{"type", "relu"}}};
    return error_of([&] { nn::parse_model_spec(j, "a.json"); });
  };
  EXPECT_TRUE(has(spec_err({{"input", {3, 32}}}), "model spec a.json: 'input' must be [C, H, W] or \"CxHxW\", got [3,32]"));
  EXPECT_TRUE(has(spec_err({{"input", {3, 0, 32}}}), "'input' must be [C, H, W]"));
  EXPECT_TRUE(has(spec_err({{"input", "3x32"}}), "model spec a.json: 'input' '3x32' is not CxHxW"));
  EXPECT_TRUE(has(spec_err({{"classes", 0}}), "'classes' must be at least 1, got 0"));
  EXPECT_TRUE(has(spec_err({{"train_images", 0}}), "'train_images' must be at least 1, got 0"));
  EXPECT_TRUE(has(spec_err({{"inputs", "3x32x32"}}),
                  "unknown top-level key 'inputs' (allowed: name, description, input, classes, train_images, layers)"));
  json named = {{"input", "1x64x48"}, {"classes", 5}, {"train_images", 1234}, {"layers", {{{"type", "relu"}}}}};
  EXPECT_EQ(nn::parse_model_spec(named, "a.json").input, (Dims{1, 64, 48}));
  EXPECT_EQ(nn::parse_model_spec(named, "a.json").classes, 5);
  EXPECT_EQ(nn::parse_model_spec(named, "a.json").train_images, 1234);
  EXPECT_EQ(nn::parse_model_spec({{"layers", {{{"type", "relu"}}}}}, "a.json").train_images, 0);
  EXPECT_TRUE(has(err({{{"type", "batchnorm2d"}, {"eps", 0}}}), "eps must be in (0, 1), got 0"));
  EXPECT_TRUE(has(err({{{"type", "batchnorm2d"}, {"momentum", 2}}}), "momentum must be in [0, 1], got 2"));
  EXPECT_TRUE(has(err({{{"type", "batchnorm2d"}, {"momentum", -0.1}}}), "momentum must be in [0, 1], got -0.1"));
  // Shapes that do not fit name the layer and the input it got.
  std::string fit = err({{{"type", "conv2d"}, {"name", "big"}, {"out_channels", 4}, {"kernel", 40}}});
  EXPECT_TRUE(has(fit, "layer 'big' (conv2d)")) << fit;
  EXPECT_TRUE(has(fit, "does not fit a 28x28 input")) << fit;
  // A window one pixel too wide fits nowhere either (28 -> 14 -> 7 -> 3 -> 1, then a 2x2 pooling).
  json pools = json::array();
  for (int i = 0; i < 5; ++i) pools.push_back({{"type", "maxpool2d"}, {"name", fmt::format("p{}", i + 1)}, {"kernel", 2}});
  fit = err(pools);
  EXPECT_TRUE(has(fit, "layer 'p5' (maxpool2d): maxpool2d with kernel 2 stride 2 padding 0 does not fit a 1x1 input")) << fit;
  fit = err({{{"type", "conv2d"}, {"out_channels", 4}, {"kernel", 29}, {"stride", 2}}});
  EXPECT_TRUE(has(fit, "does not fit a 28x28 input")) << fit;
  EXPECT_TRUE(has(err({{{"type", "linear"}, {"name", "fc"}, {"out_features", 10}}}), "layer 'fc' (linear): linear expects a 2-D input"));
  EXPECT_TRUE(has(err({{{"type", "relu"}}, {{"type", "add"}, {"from", "nothere"}}}), "no earlier layer named 'nothere'"));
  EXPECT_TRUE(has(err({{{"type", "conv2d"}, {"out_channels", 3}}, {{"type", "flatten"}},
                       {{"type", "linear"}, {"out_features", 7}}}), "ends in shape 2x7 but the data has 10 classes"));
  EXPECT_TRUE(has(err({{{"type", "relu"}, {"name", "x"}}, {{"type", "relu"}, {"name", "x"}}}), "name is used twice"));
  // A branch that never rejoins: the conv's output reaches no later layer.
  const std::string dead = err({{{"type", "relu"}, {"name", "r"}},
                                {{"type", "conv2d"}, {"name", "c"}, {"out_channels", 4}},
                                {{"type", "flatten"}, {"input", "r"}},
                                {{"type", "linear"}, {"out_features", "classes"}}});
  EXPECT_TRUE(has(dead, "layer 'c' (conv2d): nothing reads its output, so it cannot change the loss")) << dead;
  EXPECT_TRUE(has(error_of([] { nn::parse_model_spec(json::array(), "a.json"); }), "expected a JSON object"));
  EXPECT_TRUE(has(error_of([] { nn::parse_model_spec({{"layers", json::array()}}, "a.json"); }), "non-empty 'layers'"));
  EXPECT_TRUE(has(error_of([] { nn::load_model("/no/such/model.json"); }), "neither a preset nor a readable file"));
}

}  // namespace
}  // namespace dlperf::test

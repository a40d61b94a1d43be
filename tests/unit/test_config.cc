// SPDX-License-Identifier: MIT
// config.json / joint_head_config.json / preprocessor_config.json parsing: both config forms,
// HF defaults, and one clear error per unsupported or malformed option.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json_reader.h"
#include "io/hf_config.h"
#include "test_util.h"

namespace clef {
namespace {

using nlohmann::json;
using test::error_of;

json composite() {
  return json::parse(R"({
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "tie_word_embeddings": true,
    "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053, "vision_end_token_id": 248054,
    "text_config": {"model_type": "qwen3_5_text", "hidden_size": 1024, "num_hidden_layers": 24, "intermediate_size": 3584,
      "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16,
      "linear_num_value_heads": 16, "vocab_size": 248320, "tie_word_embeddings": true,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                          "mrope_section": [11, 11, 10], "mrope_interleaved": true}},
    "vision_config": {"model_type": "qwen3_5_vision", "depth": 12, "hidden_size": 768, "num_heads": 12,
      "intermediate_size": 3072, "out_hidden_size": 1024}
  })");
}

TEST(Config, CompositeForm) {
  const ModelConfig c = parse_model_config(composite());
  EXPECT_TRUE(c.composite);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.text.hidden_size, 1024);
  EXPECT_EQ(c.text.rope_theta, 1e7);
  EXPECT_EQ(c.text.rotary_dim(), 64);
  ASSERT_EQ(c.text.layer_types.size(), 24u);  // interval rule: every 4th layer is full attention
  EXPECT_EQ(c.text.layer_types[3], LayerType::kFullAttention);
  EXPECT_EQ(c.text.layer_types[4], LayerType::kLinearAttention);
  EXPECT_EQ(c.text.count(LayerType::kFullAttention), 6);
  EXPECT_EQ(c.text.gdn_conv_dim(), 6144);
  ASSERT_TRUE(c.vision.has_value());
  EXPECT_EQ(c.vision->patch_dim(), 1536);
  EXPECT_EQ(c.vision->out_hidden_size, 1024);
}

TEST(Config, FlatTextOnlyFormAndDefaults) {
  const ModelConfig c = parse_model_config(json::parse(R"({"model_type": "qwen3_5_text"})"));
  EXPECT_FALSE(c.composite);
  EXPECT_FALSE(c.vision.has_value());
  // transformers' Qwen3_5TextConfig defaults (the 9B-style config).
  EXPECT_EQ(c.text.hidden_size, 4096);
  EXPECT_EQ(c.text.num_hidden_layers, 32);
  EXPECT_EQ(c.text.linear_num_value_heads, 32);
  EXPECT_EQ(c.text.rope_theta, 10000.0);
  EXPECT_EQ(c.text.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.text.mrope_section[0], 11);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(Config, LegacyTopLevelRopeFields) {
  json j = json::parse(R"({"model_type": "qwen3_5_text", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5,
                           "head_dim": 128, "rope_scaling": {"type": "mrope", "mrope_section": [11, 11, 10]}})");
  const ModelConfig c = parse_model_config(j);
  EXPECT_EQ(c.text.rope_theta, 1e6);
  EXPECT_EQ(c.text.rotary_dim(), 64);
}

TEST(Config, UnknownModelTypeIsUnsupported) {
  const auto msg = error_of<Unsupported>([] { parse_model_config(json::parse(R"({"model_type": "llama"})")); });
  EXPECT_NE(msg.find("config.json: model_type: unsupported model type \"llama\""), std::string::npos) << msg;
  EXPECT_THROW(parse_model_config(json::parse(R"({"model_type": "qwen3_5_moe"})")), Unsupported);
  EXPECT_THROW(parse_model_config(json::parse(R"({"architectures": []})")), ModelLoadError);
}

TEST(Config, UnknownLayerType) {
  json j = composite();
  j["text_config"]["num_hidden_layers"] = 4;
  j["text_config"]["layer_types"] = {"linear_attention", "linear_attention", "mamba", "full_attention"};
  const auto msg = error_of<ModelLoadError>([&] { parse_model_config(j); });
  EXPECT_NE(msg.find("text_config.layer_types[2]: unknown layer type \"mamba\""), std::string::npos) << msg;
  j["text_config"]["layer_types"] = {"linear_attention", "full_attention"};
  EXPECT_NE(error_of<ModelLoadError>([&] { parse_model_config(j); }).find("has 2 entries but num_hidden_layers is 4"),
            std::string::npos);
}

TEST(Config, UnsupportedOptionsNameTheField) {
  struct Case {
    const char* key;
    json value;
    const char* expect;
  } cases[] = {
      {"hidden_act", "gelu", "text_config.hidden_act"},
      {"attention_bias", true, "text_config.attention_bias"},
      {"num_experts", 64, "text_config.num_experts"},
  };
  for (const auto& c : cases) {
    json j = composite();
    j["text_config"][c.key] = c.value;
    const auto msg = error_of<Unsupported>([&] { parse_model_config(j); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
  json j = composite();
  j["text_config"]["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(error_of<Unsupported>([&] { parse_model_config(j); }).find("rope_parameters.rope_type"), std::string::npos);
  j = composite();
  j["vision_config"]["deepstack_visual_indexes"] = {8, 16};
  EXPECT_THROW(parse_model_config(j), Unsupported);
}

TEST(Config, MalformedValuesNameThePath) {
  json j = composite();
  j["text_config"]["hidden_size"] = "1024";
  EXPECT_NE(error_of<ModelLoadError>([&] {
              parse_model_config(j);
            }).find("text_config.hidden_size: expected an integer, got string \"1024\""),
            std::string::npos);
  j = composite();
  j["text_config"]["num_key_value_heads"] = 3;
  EXPECT_NE(error_of<ModelLoadError>([&] { parse_model_config(j); }).find("num_key_value_heads"), std::string::npos);
  j = composite();
  j["text_config"]["rope_parameters"]["mrope_section"] = {INT64_MAX, INT64_MAX, 10};  // must not wrap to a "valid" sum
  EXPECT_NE(error_of<ModelLoadError>([&] { parse_model_config(j); }).find("entries must be in [0, 4096]"),
            std::string::npos);
  j["text_config"]["rope_parameters"]["mrope_section"] = {10, 10, 10};
  EXPECT_NE(error_of<ModelLoadError>([&] { parse_model_config(j); }).find("must sum to rotary_dim / 2 = 32"),
            std::string::npos);
  j = composite();
  j["text_config"]["hidden_size"] = 0;
  EXPECT_NE(error_of<ModelLoadError>([&] { parse_model_config(j); }).find("out of range"), std::string::npos);
  j = composite();
  j.erase("text_config");
  EXPECT_NE(error_of<ModelLoadError>([&] { parse_model_config(j); }).find("text_config"), std::string::npos);
  EXPECT_THROW(parse_model_config(json::array()), ModelLoadError);
}

TEST(Config, JointHeadConfig) {
  const auto h = parse_joint_head_config(json::parse(
      R"({"hidden_size": 4096, "width": 1024, "routing_layers": 2, "layers": 4, "heads": 16, "feedforward": 4096})"));
  EXPECT_EQ(h.width, 1024);
  EXPECT_EQ(h.layers, 4);
  const auto unknown = error_of<ModelLoadError>([] {
    parse_joint_head_config(json::parse(
        R"({"hidden_size": 8, "width": 8, "routing_layers": 1, "layers": 1, "heads": 2, "feedforward": 8, "temp": 1})"));
  });
  EXPECT_NE(unknown.find("joint_head_config.json: temp: unknown field"), std::string::npos) << unknown;
  const auto missing =
      error_of<ModelLoadError>([] { parse_joint_head_config(json::parse(R"({"hidden_size": 8, "width": 8})")); });
  EXPECT_NE(missing.find("routing_layers: required field is missing"), std::string::npos) << missing;
  EXPECT_THROW(
      parse_joint_head_config(json::parse(
          R"({"hidden_size": 8, "width": 10, "routing_layers": 1, "layers": 1, "heads": 3, "feedforward": 8})")),
      ModelLoadError);
}

TEST(Config, PreprocessorConfig) {
  const auto p = parse_preprocessor_config(json::parse(
      R"({"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "merge_size": 2,
          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "rescale_factor": 0.00392156862745098})"));
  EXPECT_EQ(p.min_pixels, 65536);
  EXPECT_EQ(p.max_pixels, 16777216);
  EXPECT_THROW(parse_preprocessor_config(json::parse(R"({"image_mean": [0.5]})")), ModelLoadError);
  EXPECT_THROW(parse_preprocessor_config(json::parse(R"({"min_pixels": 100, "max_pixels": 10})")), ModelLoadError);
}

TEST(JsonMessage, EachRefusalHasItsKind) {
  JsonTextLimits lim;
  lim.max_depth = 4;
  lim.duplicates = DuplicateKeys::kReject;
  lim.max_root_items = 3;
  auto fault = [&](std::string_view t) { return parse_json_message(t, lim).fault; };
  EXPECT_EQ(fault(R"({"a":1,"b":[1,2,{"c":null}]})"), JsonTextFault::kNone);
  EXPECT_EQ(parse_json_message(R"({"b":1,"a":2})", lim).value.begin().key(), "b");  // insertion order kept
  // a NUL after the JSON, other trailing bytes, broken syntax
  EXPECT_EQ(fault(std::string_view("{\"a\":1}\0", 8)), JsonTextFault::kSyntax);
  EXPECT_EQ(fault(R"({"a":1} x)"), JsonTextFault::kSyntax);
  EXPECT_EQ(fault(R"({"a":1)"), JsonTextFault::kSyntax);
  // repeated keys, plainly and through an escape, at any depth
  EXPECT_EQ(fault(R"({"a":1,"a":2})"), JsonTextFault::kDuplicateKey);
  EXPECT_EQ(fault(R"({"x":{"arguments":1,"\u0061rguments":2}})"), JsonTextFault::kDuplicateKey);
  EXPECT_NE(parse_json_message(R"({"\u0061":1,"a":2})", lim).error.find("\"a\" appears twice"), std::string::npos);
  // depth 5 > 4
  EXPECT_EQ(fault("[[[[1]]]]"), JsonTextFault::kNone);
  EXPECT_EQ(fault("[[[[[1]]]]]"), JsonTextFault::kTooDeep);
  // the top-level array's items (scalars and containers alike), not nested ones
  EXPECT_EQ(fault("[1,{},[1,2,3,4]]"), JsonTextFault::kNone);
  EXPECT_EQ(fault("[1,2,3,4]"), JsonTextFault::kTooManyItems);
  EXPECT_EQ(fault("[{},{},{},{}]"), JsonTextFault::kTooManyItems);
  EXPECT_EQ(fault("[]"), JsonTextFault::kNone);
  // parse_json_text keeps its contract: last value wins unless kReject, trailing data refused
  EXPECT_EQ(parse_json_text(R"({"a":1,"a":2})", "t")["a"], 2);
  EXPECT_THROW(parse_json_text(R"({"a":1} x)", "t"), ModelLoadError);
}

}  // namespace
}  // namespace clef

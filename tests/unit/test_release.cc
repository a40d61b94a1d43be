// SPDX-License-Identifier: MIT
// The release-folder loader end to end on the embedded tiny model that `clef make-model` writes:
// it loads, its counts match the config, and each way a folder can be broken gives an error that
// names the file and the problem.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/sha256.h"
#include "models/joint_head/weights.h"
#include "io/safetensors.h"
#include "inspect_report.h"  // apps/clef
#include "runtime/engine.h"
#include "runtime/release.h"
#include "test_util.h"
#include "clef_tools/make_model.h"

namespace clef {
namespace {

namespace fs = std::filesystem;
using test::error_of;

class ReleaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeModelOptions o;
    o.out_dir = dir_.str();
    o.overwrite = true;
    make_model(o);
  }
  fs::path path(const std::string& f) const { return dir_.path() / f; }

  /// Rewrites a safetensors file of the folder after `edit` changes its tensor list.
  void rewrite(const std::string& file, const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    std::vector<TensorToWrite> ts;
    {
      SafetensorsFile f(path(file).string(), file);
      for (const auto& t : f.header().tensors) {
        auto d = f.data(t);
        ts.push_back({t.name, t.dtype, t.shape, std::vector<std::byte>(d.begin(), d.end())});
      }
    }
    edit(ts);
    write_safetensors(path(file).string(), ts);
  }

  std::string load_error() {
    return error_of<ModelLoadError>([&] { (void)open_release(dir_.str()); });
  }

  test::TempDir dir_;
};

TEST_F(ReleaseTest, TinyModelLoadsAndCountsMatchConfig) {
  const ReleaseFolder r = open_release(dir_.str());
  ASSERT_TRUE(r.random_weights.has_value());
  EXPECT_EQ(r.model_name, "clef-tiny-random");
  const TextConfig& t = r.config.text;
  ASSERT_EQ(t.layer_types.size(), 4u);
  EXPECT_EQ(t.layer_types[3], LayerType::kFullAttention);
  EXPECT_TRUE(r.model.text.tied);
  EXPECT_EQ(r.model.text.lm_head.info, r.model.text.embed_tokens.info);
  ASSERT_TRUE(r.model.vision.has_value());
  EXPECT_EQ(r.model.text.layers[0].linear_attn->a_log.dtype(), DType::kF32);  // as in official checkpoints
  EXPECT_EQ(r.model.text.layers[0].linear_attn->in_proj_qkv.dtype(), DType::kBF16);

  // Independent count from the config (docs/MODEL.md §9 formulas).
  const std::int64_t H = t.hidden_size, I = t.intermediate_size;
  const std::int64_t mlp = 3 * H * I, norms = 2 * H;
  const std::int64_t gdn = t.gdn_conv_dim() * H + t.gdn_value_dim() * H + 2 * t.linear_num_value_heads * H +
                           t.gdn_conv_dim() * t.linear_conv_kernel_dim + 2 * t.linear_num_value_heads +
                           t.linear_value_head_dim + H * t.gdn_value_dim();
  const std::int64_t attn = 2 * t.num_attention_heads * t.head_dim * H + 2 * t.num_key_value_heads * t.head_dim * H +
                            H * t.num_attention_heads * t.head_dim + 2 * t.head_dim;
  const std::int64_t want = t.vocab_size * H + 3 * (gdn + mlp + norms) + (attn + mlp + norms) + H;
  const ModelSummary s = summarize(r);
  EXPECT_EQ(s.text_params, want);
  EXPECT_EQ(s.linear_layer_params, gdn + mlp + norms);
  EXPECT_EQ(s.full_layer_params, attn + mlp + norms);
  EXPECT_EQ(s.head_params, joint_head_parameter_count(r.head_config));
  EXPECT_GT(s.vision_params, 0);
  const std::string report = cli::format_inspect_report(r, s, 512, 16384);
  EXPECT_NE(report.find("LLLF"), std::string::npos);
  EXPECT_NE(report.find("RANDOM WEIGHTS"), std::string::npos);
  EXPECT_EQ(cli::inspect_json(r, s, 512, 16384)["params"]["text"].get<std::int64_t>(), want);
}

TEST(MakeModel, DeterministicPerSeed) {
  test::TempDir a, b, c;
  make_model({"tiny", a.str(), 3, true});
  make_model({"tiny", b.str(), 3, true});
  make_model({"tiny", c.str(), 4, true});
  EXPECT_EQ(test::read_file(a.path() / "SHA256SUMS"), test::read_file(b.path() / "SHA256SUMS"));
  EXPECT_NE(sha256_file_hex((a.path() / "model.safetensors").string()),
            sha256_file_hex((c.path() / "model.safetensors").string()));
  EXPECT_THROW(make_model({"flash", a.str(), 0, true}), InvalidArgument);
  EXPECT_THROW(make_model({"tiny", a.str(), 0, false}), InvalidArgument);  // refuses a non-empty folder
}

TEST_F(ReleaseTest, BareBackboneIsRefused) {
  fs::remove(path("joint_head.safetensors"));
  fs::remove(path("joint_head_config.json"));
  EXPECT_NE(load_error().find("bare Qwen3.5 backbone, not a Clef release"), std::string::npos);
}

TEST_F(ReleaseTest, ShardedWeightsLoad) {
  std::vector<TensorToWrite> all;
  {
    SafetensorsFile f(path("model.safetensors").string(), "m");
    for (const auto& t : f.header().tensors) {
      auto d = f.data(t);
      all.push_back({t.name, t.dtype, t.shape, std::vector<std::byte>(d.begin(), d.end())});
    }
  }
  fs::remove(path("model.safetensors"));
  std::vector<TensorToWrite> s1(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2));
  std::vector<TensorToWrite> s2(all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2), all.end());
  write_safetensors(path("model-00001-of-00002.safetensors").string(), s1);
  write_safetensors(path("model-00002-of-00002.safetensors").string(), s2);
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  for (const auto& t : s1) index["weight_map"][t.name] = "model-00001-of-00002.safetensors";
  for (const auto& t : s2) index["weight_map"][t.name] = "model-00002-of-00002.safetensors";
  test::write_file(path("model.safetensors.index.json"), index.dump());
  const ReleaseFolder r = open_release(dir_.str());
  EXPECT_EQ(r.weights->files().size(), 2u);

  // A shard named in the index but missing.
  fs::rename(path("model-00002-of-00002.safetensors"), path("moved"));
  EXPECT_NE(load_error().find("shard model-00002-of-00002.safetensors (named for"), std::string::npos);
  fs::rename(path("moved"), path("model-00002-of-00002.safetensors"));
  // The index maps a tensor to a shard that does not hold it.
  index["weight_map"][s2.front().name] = "model-00001-of-00002.safetensors";
  test::write_file(path("model.safetensors.index.json"), index.dump());
  EXPECT_NE(load_error().find("which does not contain it"), std::string::npos);
  // A path-escaping shard name.
  index["weight_map"][s2.front().name] = "../evil.safetensors";
  test::write_file(path("model.safetensors.index.json"), index.dump());
  EXPECT_NE(load_error().find("must be a plain file name"), std::string::npos);
  // Malformed index JSON.
  test::write_file(path("model.safetensors.index.json"), "{\"weight_map\": ");
  EXPECT_NE(load_error().find("model.safetensors.index.json: malformed JSON"), std::string::npos);
}

TEST_F(ReleaseTest, MissingTensorIsNamed) {
  rewrite("model.safetensors", [](auto& ts) {
    std::erase_if(ts, [](const TensorToWrite& t) {
      return t.name == "model.language_model.layers.3.self_attn.q_proj.weight";
    });
  });
  const auto msg = load_error();
  EXPECT_NE(msg.find("missing tensor model.language_model.layers.3.self_attn.q_proj.weight (expected shape [512, 64])"),
            std::string::npos)
      << msg;
}

TEST_F(ReleaseTest, MisShapedTensorIsNamed) {
  rewrite("model.safetensors", [](auto& ts) {
    for (auto& t : ts) {
      if (t.name == "model.language_model.layers.0.mlp.up_proj.weight") t.shape = {64, 128};  // transposed
    }
  });
  const auto msg = load_error();
  EXPECT_NE(msg.find("model.safetensors: tensor model.language_model.layers.0.mlp.up_proj.weight has shape [64, 128], "
                     "expected [128, 64]"),
            std::string::npos)
      << msg;
}

TEST_F(ReleaseTest, UnexpectedTensorIsAnErrorButMtpIsIgnored) {
  rewrite("model.safetensors", [](auto& ts) {
    ts.push_back({"mtp.fc.weight", DType::kBF16, {2, 2}, std::vector<std::byte>(8)});
  });
  const ReleaseFolder r = open_release(dir_.str());
  EXPECT_EQ(r.model.ignored_tensors, 1u);
  rewrite("model.safetensors", [](auto& ts) {
    ts.push_back({"model.language_model.layers.0.extra.weight", DType::kF32, {2}, std::vector<std::byte>(8)});
  });
  const auto msg = load_error();
  EXPECT_NE(msg.find(
                "unexpected tensor model.language_model.layers.0.extra.weight [2] is not used by the qwen3_5 loader"),
            std::string::npos)
      << msg;
}

TEST_F(ReleaseTest, IntegerWeightIsRefused) {
  rewrite("model.safetensors", [](auto& ts) {
    for (auto& t : ts) {
      if (t.name == "model.language_model.norm.weight") t.dtype = DType::kI16;  // same byte size as BF16
    }
  });
  EXPECT_NE(load_error().find("has dtype I16; weights must be F32, BF16 or F16"), std::string::npos);
}

TEST_F(ReleaseTest, HeadTensorsAreStrict) {
  rewrite("joint_head.safetensors",
          [](auto& ts) { std::erase_if(ts, [](const TensorToWrite& t) { return t.name == "residual_gate"; }); });
  EXPECT_NE(load_error().find("missing tensor residual_gate (expected shape [])"), std::string::npos);
  SetUp();
  rewrite("joint_head.safetensors", [](auto& ts) {
    ts.push_back({"temperature", DType::kF32, {}, std::vector<std::byte>(4)});
  });
  EXPECT_NE(load_error().find("joint_head.safetensors: unexpected tensor temperature"), std::string::npos);
}

TEST_F(ReleaseTest, BrokenConfigFiles) {
  const std::string good = test::read_file(path("config.json"));
  test::write_file(path("config.json"), good.substr(0, good.size() / 2));
  EXPECT_NE(load_error().find("config.json: malformed JSON"), std::string::npos);
  auto j = nlohmann::json::parse(good);
  j["text_config"]["layer_types"][1] = "sliding_attention";
  test::write_file(path("config.json"), j.dump());
  EXPECT_NE(load_error().find("config.json: text_config.layer_types[1]: unknown layer type \"sliding_attention\""),
            std::string::npos);
  j = nlohmann::json::parse(good);
  j["image_token_id"] = 5;
  test::write_file(path("config.json"), j.dump());
  EXPECT_NE(load_error().find("config.json names token 5 as <|image_pad|>"), std::string::npos);
  j = nlohmann::json::parse(good);
  j["text_config"]["hidden_size"] = 128;
  test::write_file(path("config.json"), j.dump());
  EXPECT_NE(load_error().find("joint_head_config.json: hidden_size: 64 does not match"), std::string::npos);
  test::write_file(path("config.json"), good);
  fs::remove(path("tokenizer.json"));
  EXPECT_NE(load_error().find("tokenizer.json: missing"), std::string::npos);
}

TEST_F(ReleaseTest, VerifyManifest) {
  OpenReleaseOptions o;
  o.verify = true;
  const ReleaseFolder r = open_release(dir_.str(), o);
  EXPECT_GE(r.verified_files.size(), 8u);
  std::string tc = test::read_file(path("tokenizer_config.json"));
  tc[tc.size() - 2] = ' ';
  test::write_file(path("tokenizer_config.json"), tc);
  EXPECT_NE(error_of<ModelLoadError>([&] {
              (void)open_release(dir_.str(), o);
            }).find("tokenizer_config.json: sha256 mismatch"),
            std::string::npos);
  test::write_file(path("SHA256SUMS"), "not a manifest line\n");
  EXPECT_NE(error_of<ModelLoadError>([&] { (void)open_release(dir_.str(), o); }).find("line 1: expected"),
            std::string::npos);
  test::write_file(path("SHA256SUMS"), std::string(64, 'a') + "  config.json\n");
  EXPECT_NE(error_of<ModelLoadError>([&] { (void)open_release(dir_.str(), o); }).find("is not covered by the manifest"),
            std::string::npos);
}

// Image settings (docs/COMPATIBILITY.md "The real release folder, file by file"): the released
// folder ships processor_config.json (transformers v5) with the settings in its image_processor
// object, and no preprocessor_config.json.
TEST_F(ReleaseTest, ImageSettingsFromProcessorConfig) {
  auto pre = nlohmann::json::parse(test::read_file(path("preprocessor_config.json")));
  fs::remove(path("preprocessor_config.json"));
  auto settings = pre;
  settings["size"] = {{"longest_edge", 401408}, {"shortest_edge", 3136}};
  settings["image_mean"] = {0.25, 0.5, 0.75};
  const nlohmann::json proc = {{"image_processor", settings}, {"processor_class", "Qwen3VLProcessor"}};
  test::write_file(path("processor_config.json"), proc.dump(2));
  {
    const ReleaseFolder r = open_release(dir_.str());
    ASSERT_TRUE(r.preprocessor.has_value());
    EXPECT_EQ(r.preprocessor->min_pixels, 3136);
    EXPECT_EQ(r.preprocessor->max_pixels, 401408);
    EXPECT_EQ(r.preprocessor->image_mean[0], 0.25);
    EXPECT_EQ(r.preprocessor_source, "processor_config.json (image_processor)");
    EXPECT_NE(
        cli::format_inspect_report(r, summarize(r), 512, 4096).find("image settings   from processor_config.json"),
        std::string::npos);
  }
  // both files: they must agree, else the folder is refused naming the field
  test::write_file(path("preprocessor_config.json"), settings.dump(2));
  EXPECT_EQ(open_release(dir_.str()).preprocessor_source,
            "processor_config.json (image_processor; preprocessor_config.json agrees)");
  test::write_file(path("preprocessor_config.json"), pre.dump(2));
  const std::string err = load_error();
  EXPECT_NE(err.find("processor_config.json (image_processor) and preprocessor_config.json disagree on image_mean"),
            std::string::npos)
      << err;
  // processor_config.json without image_processor: preprocessor_config.json is read (as transformers does)
  test::write_file(path("processor_config.json"), R"({"processor_class": "Qwen3VLProcessor"})");
  EXPECT_EQ(open_release(dir_.str()).preprocessor_source, "preprocessor_config.json");
  test::write_file(path("processor_config.json"), R"({"image_processor": {"image_std": [0.5, 0, 0.5]}})");
  EXPECT_NE(load_error().find("processor_config.json: image_processor"), std::string::npos) << load_error();
  // neither: no settings (the engine refuses images, naming both files: tests/reference/test_decide_images.py)
  fs::remove(path("processor_config.json"));
  fs::remove(path("preprocessor_config.json"));
  const ReleaseFolder r = open_release(dir_.str());
  EXPECT_FALSE(r.preprocessor.has_value());
  EXPECT_NE(cli::format_inspect_report(r, summarize(r), 512, 4096).find("preprocessor none"), std::string::npos);
}

// Loading a model maps each of its files once: the release (open_release) and the engine's tokenizer
// (load_release_tokenizer) share the mappings, and moving a ReleaseFolder maps nothing.
TEST_F(ReleaseTest, EachModelFileIsMappedOncePerLoad) {
  std::uint64_t weight_files = 0;
  for (const auto& e : fs::directory_iterator(dir_.path())) weight_files += e.path().extension() == ".safetensors";
  ASSERT_GE(weight_files, 2u);  // the backbone's weights and joint_head.safetensors
  std::uint64_t before = MappedFile::files_mapped();
  {
    const Engine engine(dir_.str(), EngineOptions{});
    EXPECT_EQ(MappedFile::files_mapped() - before, weight_files);
  }
  before = MappedFile::files_mapped();
  ReleaseFolder r = open_release(dir_.str());
  const ReleaseFolder moved = std::move(r);
  EXPECT_EQ(MappedFile::files_mapped() - before, weight_files);
  EXPECT_EQ(moved.model_name, "clef-tiny-random");
}

}  // namespace
}  // namespace clef

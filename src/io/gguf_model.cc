// SPDX-License-Identifier: MIT
#include "io/gguf_model.h"

#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/unicode.h"

namespace clef {
namespace {

[[noreturn]] void bad(const GgufFile& g, const std::string& key, const std::string& msg) { g.metadata_error(key, msg); }

std::int64_t positive(const GgufFile& g, const std::string& key) { return g.get_positive_int(key); }

constexpr const char* kLayoutsRead =
    "clef reads two GGUF layouts: \"qwen35\" (llama.cpp's Qwen3.5 backbone, with the release's "
    "joint_head.safetensors beside it) and \"clef\" (llama.cpp's Clef conversion: clef.decision.* keys, the head "
    "tensors decision.* / dec.blk.* / token_types.weight inside)";

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

}  // namespace

std::string gguf_layout(const GgufFile& g) {
  const std::string& arch = g.get_string("general.architecture");
  if (arch == "qwen35moe") {
    throw Unsupported(g.label() +
                      ": general.architecture is \"qwen35moe\": Qwen3.5 mixture-of-experts models are not "
                      "supported; " +
                      kLayoutsRead);
  }
  if (arch == "qwen35") {
    std::string found;
    for (const auto& [key, v] : g.header().metadata) {
      if (starts_with(key, "qwen35.decision.") || starts_with(key, "clef.")) {
        found = "metadata key " + printable(key);
        break;
      }
    }
    if (found.empty()) {
      for (const GgufTensorInfo& t : g.header().tensors) {
        if (starts_with(t.name, "decision.") || starts_with(t.name, "dec.") || starts_with(t.name, "clef.") ||
            starts_with(t.name, "token_types.")) {
          found = "tensor " + printable(t.name);
          break;
        }
      }
    }
    if (!found.empty()) {
      throw Unsupported(g.label() + ": unknown GGUF layout: general.architecture \"qwen35\" with decision-head " +
                        found +
                        " (a Qwen3.5 backbone file has no head; a file with the head inside has architecture "
                        "\"clef\"); " +
                        kLayoutsRead);
    }
    return "qwen35";
  }
  if (arch == "clef") {
    const GgufValue* t = g.find_value("clef.decision.type");
    if (t == nullptr || t->type != GgufValueType::kString) {
      throw Unsupported(g.label() +
                        ": unknown GGUF layout: general.architecture \"clef\" without the string key "
                        "clef.decision.type; " +
                        kLayoutsRead);
    }
    const std::string& type = std::get<std::string>(t->scalar);
    if (type != "clef") {
      throw Unsupported(g.label() + ": unknown GGUF layout: clef.decision.type is \"" + printable(type) +
                        "\" (expected \"clef\"); " + kLayoutsRead);
    }
    return "clef";
  }
  if (arch == "clip") {
    // The wrong file (a projector given as the model), not an unsupported model: exit code 3, as
    // for --model naming a file that is not a .gguf.
    throw ModelLoadError(g.label() +
                         ": general.architecture is \"clip\": this is a vision projector (mmproj) file, not a model; "
                         "give the model GGUF with --model and this file with --mmproj");
  }
  throw Unsupported(g.label() + ": general.architecture is \"" + printable(arch) + "\"; " + kLayoutsRead);
}

ModelConfig model_config_from_gguf(const GgufFile& g, GgufModelInfo* info) {
  GgufModelInfo gi;
  gi.architecture = g.get_string("general.architecture");
  gi.layout = gguf_layout(g);
  const std::string a = gi.architecture + ".";
  if (const GgufValue* v = g.find_value("general.name"); v != nullptr && v->type == GgufValueType::kString) {
    gi.name = std::get<std::string>(v->scalar);
  }
  gi.block_count = positive(g, a + "block_count");
  if (g.find_value(a + "nextn_predict_layers") != nullptr) {
    gi.nextn_layers = g.get_int(a + "nextn_predict_layers");
    if (gi.nextn_layers < 0 || gi.nextn_layers >= gi.block_count) {
      bad(g, a + "nextn_predict_layers", "must be in [0, block_count), got " + std::to_string(gi.nextn_layers));
    }
  }
  const GgufTensorInfo* embd = g.find("token_embd.weight");
  if (embd == nullptr || embd->ne.size() != 2) {
    throw ModelLoadError(g.label() + ": missing tensor token_embd.weight (2-D; its rows give the vocabulary size)");
  }
  const std::int64_t hidden = positive(g, a + "embedding_length");
  const std::int64_t head_dim = positive(g, a + "attention.key_length");
  if (g.get_int(a + "attention.value_length") != head_dim) {
    bad(g, a + "attention.value_length", "must equal " + a + "attention.key_length (" + std::to_string(head_dim) + ")");
  }
  const std::int64_t hv = positive(g, a + "ssm.time_step_rank");
  const std::int64_t inner = positive(g, a + "ssm.inner_size");
  if (inner % hv != 0)
    bad(g, a + "ssm.inner_size", "must be a multiple of " + a + "ssm.time_step_rank (" + std::to_string(hv) + ")");
  const std::int64_t rope_dim = positive(g, a + "rope.dimension_count");
  const auto& sections = g.get_array(a + "rope.dimension_sections");
  std::vector<std::int64_t> sec;
  for (const GgufValue& e : sections) {
    const auto* i = std::get_if<std::int64_t>(&e.scalar);
    const auto* u = std::get_if<std::uint64_t>(&e.scalar);
    if (i == nullptr && u == nullptr) bad(g, a + "rope.dimension_sections", "must hold integers");
    sec.push_back(i != nullptr ? *i : static_cast<std::int64_t>(*u));
  }
  if (sec.size() < 3 || sec.size() > 4 || (sec.size() == 4 && sec[3] != 0)) {
    bad(g, a + "rope.dimension_sections", "expected [t, h, w] or [t, h, w, 0] (Qwen3.5 M-RoPE)");
  }

  nlohmann::json j;
  j["model_type"] = "qwen3_5_text";
  j["architectures"] = {"Qwen3_5ForCausalLM"};
  j["vocab_size"] = embd->ne[1];
  j["hidden_size"] = hidden;
  j["intermediate_size"] = positive(g, a + "feed_forward_length");
  j["num_hidden_layers"] = gi.block_count - gi.nextn_layers;
  j["num_attention_heads"] = positive(g, a + "attention.head_count");
  j["num_key_value_heads"] = positive(g, a + "attention.head_count_kv");
  j["head_dim"] = head_dim;
  j["rms_norm_eps"] = g.get_float(a + "attention.layer_norm_rms_epsilon");
  j["linear_num_key_heads"] = positive(g, a + "ssm.group_count");
  j["linear_num_value_heads"] = hv;
  j["linear_key_head_dim"] = positive(g, a + "ssm.state_size");
  j["linear_value_head_dim"] = inner / hv;
  j["linear_conv_kernel_dim"] = positive(g, a + "ssm.conv_kernel");
  j["full_attention_interval"] = positive(g, a + "full_attention_interval");
  j["max_position_embeddings"] = positive(g, a + "context_length");
  j["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", g.get_float(a + "rope.freq_base")},
                          {"partial_rotary_factor", static_cast<double>(rope_dim) / static_cast<double>(head_dim)},
                          {"mrope_section", {sec[0], sec[1], sec[2]}},
                          {"mrope_interleaved", true}};
  j["tie_word_embeddings"] = g.find("output.weight") == nullptr;
  ModelConfig c = parse_model_config(j, g.label() + " metadata (as config.json)");
  if (c.text.rotary_dim() != rope_dim) {
    bad(g, a + "rope.dimension_count", "must be an even number <= " + a + "attention.key_length");
  }
  if (const GgufValue* toks = g.find_value("tokenizer.ggml.tokens");
      toks != nullptr && static_cast<std::int64_t>(toks->elements.size()) != c.text.vocab_size) {
    bad(g, "tokenizer.ggml.tokens",
        "has " + std::to_string(toks->elements.size()) + " tokens but token_embd.weight has " +
            std::to_string(c.text.vocab_size) + " rows");
  }
  if (info != nullptr) *info = gi;
  return c;
}

namespace {

struct GgufVocab {
  nlohmann::json vocab = nlohmann::json::object();  ///< token -> id (type 1)
  nlohmann::json added = nlohmann::json::array();   ///< tokenizer.json added_tokens (types 3, 4)
  std::map<std::int64_t, std::string> added_map;
  nlohmann::json merges = nlohmann::json::array();
  std::int64_t max_id = -1;
};

GgufVocab read_gguf_vocab(const GgufFile& g) {
  const std::string& model = g.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    throw Unsupported(g.label() + ": tokenizer.ggml.model is \"" + printable(model) +
                      "\"; clef reads byte-level BPE tokenizers (\"gpt2\")");
  }
  const std::string& pre = g.get_string("tokenizer.ggml.pre");
  if (pre != "qwen35" && pre != "qwen2") {
    throw Unsupported(g.label() + ": tokenizer.ggml.pre is \"" + printable(pre) +
                      "\"; clef reproduces the Qwen3.5 (\"qwen35\") and Qwen2 (\"qwen2\", the regex the clef-flash "
                      "tokenizer.json names) pre-tokenizers only");
  }
  const auto& tokens = g.get_array("tokenizer.ggml.tokens");
  const auto& types = g.get_array("tokenizer.ggml.token_type");
  const auto& merges = g.get_array("tokenizer.ggml.merges");
  if (types.size() != tokens.size()) {
    bad(g, "tokenizer.ggml.token_type",
        "has " + std::to_string(types.size()) + " entries, tokenizer.ggml.tokens has " + std::to_string(tokens.size()));
  }
  // Token and merge strings become tokenizer.json text: each must be valid UTF-8 (a byte-level
  // BPE vocabulary is printable text by construction; a damaged byte is refused here, at load).
  auto require_utf8 = [&](const char* key, const char* what, std::size_t i, const std::string& text) {
    if (const std::size_t at = unicode::find_invalid_utf8(text); at != std::string::npos) {
      bad(g, key,
          std::string(what) + " " + std::to_string(i) + " is not valid UTF-8 (byte " + std::to_string(at) + " of \"" +
              printable(text) + "\")");
    }
  };
  GgufVocab v;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto* text = std::get_if<std::string>(&tokens[i].scalar);
    if (tokens[i].type != GgufValueType::kString || text == nullptr) {
      bad(g, "tokenizer.ggml.tokens", "entry " + std::to_string(i) + " is not a string");
    }
    require_utf8("tokenizer.ggml.tokens", "token", i, *text);
    const auto* ti = std::get_if<std::int64_t>(&types[i].scalar);
    const auto* tu = std::get_if<std::uint64_t>(&types[i].scalar);
    const std::int64_t type = ti != nullptr ? *ti : tu != nullptr ? static_cast<std::int64_t>(*tu) : -1;
    const auto id = static_cast<std::int64_t>(i);
    switch (type) {
      case 1:  // normal
        if (!v.vocab.emplace(*text, id).second) {
          bad(g, "tokenizer.ggml.tokens", "token " + std::to_string(i) + " repeats an earlier one");
        }
        v.max_id = id;
        break;
      case 3:  // control
      case 4:  // user defined
        v.added.push_back(added_token_json<nlohmann::json>(id, *text, type == 3));
        v.added_map[id] = *text;
        v.max_id = id;
        break;
      case 5:  // unused (embedding padding)
        break;
      default:
        bad(g, "tokenizer.ggml.token_type",
            "entry " + std::to_string(i) + " has type " + std::to_string(type) +
                " (clef reads 1 normal, 3 control, 4 user defined, 5 unused)");
    }
  }
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const auto* text = std::get_if<std::string>(&merges[i].scalar);
    if (merges[i].type != GgufValueType::kString || text == nullptr) {
      bad(g, "tokenizer.ggml.merges", "entry " + std::to_string(i) + " is not a string");
    }
    require_utf8("tokenizer.ggml.merges", "merge", i, *text);
    v.merges.push_back(*text);
  }
  return v;
}

}  // namespace

TokenizerSummary tokenizer_summary_from_gguf(const GgufFile& g) {
  const GgufVocab v = read_gguf_vocab(g);
  TokenizerSummary s;
  s.model_type = "BPE";
  s.vocab_entries = static_cast<std::int64_t>(v.vocab.size());
  s.merges = static_cast<std::int64_t>(v.merges.size());
  s.merges_form = "strings";
  s.normalizer = "NFC";
  s.split_regex = kSplitRegexQwen35;
  s.added_in_tokenizer_json = static_cast<std::int64_t>(v.added.size());
  s.added = v.added_map;
  s.max_id = v.max_id;
  return s;
}

std::string tokenizer_json_from_gguf(const GgufFile& g) {
  GgufVocab v = read_gguf_vocab(g);
  // tokenizer.ggml.pre names the split regex (read_gguf_vocab accepts these two; docs/TOKENIZER.md
  // "Which split regex").
  const char* const regex = g.get_string("tokenizer.ggml.pre") == "qwen2" ? kSplitRegexQwen2 : kSplitRegexQwen35;
  return byte_level_bpe_tokenizer_json<nlohmann::json>(std::move(v.added), regex, std::move(v.vocab),
                                                       std::move(v.merges))
      .dump();
}

}  // namespace clef

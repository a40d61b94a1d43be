// SPDX-License-Identifier: MIT
#include "tokenizer/tokenizer_json.h"

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace clef {
namespace {

template <class Json>
Json byte_level_json() {
  Json j = Json::object();
  j["type"] = "ByteLevel";
  j["add_prefix_space"] = false;
  j["trim_offsets"] = false;
  j["use_regex"] = false;
  return j;
}

}  // namespace

template <class Json>
Json added_token_json(std::int64_t id, std::string_view content, bool special, bool with_id) {
  Json j = Json::object();
  if (with_id) j["id"] = id;
  j["content"] = std::string(content);
  j["single_word"] = false;
  j["lstrip"] = false;
  j["rstrip"] = false;
  j["normalized"] = false;
  j["special"] = special;
  return j;
}

template <class Json>
Json byte_level_bpe_tokenizer_json(Json added_tokens, std::string_view split_regex, Json vocab, Json merges) {
  Json split = Json::object();
  split["type"] = "Split";
  split["pattern"] = Json::object();
  split["pattern"]["Regex"] = std::string(split_regex);
  split["behavior"] = "Isolated";
  split["invert"] = false;
  Json pre = Json::object();
  pre["type"] = "Sequence";
  pre["pretokenizers"] = Json::array();
  pre["pretokenizers"].push_back(std::move(split));
  pre["pretokenizers"].push_back(byte_level_json<Json>());

  Json model = Json::object();
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);

  Json j = Json::object();
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added_tokens);
  j["normalizer"] = Json::object();
  j["normalizer"]["type"] = "NFC";
  j["pre_tokenizer"] = std::move(pre);
  j["post_processor"] = byte_level_json<Json>();
  j["decoder"] = byte_level_json<Json>();
  j["model"] = std::move(model);
  return j;
}

template nlohmann::json added_token_json<nlohmann::json>(std::int64_t, std::string_view, bool, bool);
template nlohmann::ordered_json added_token_json<nlohmann::ordered_json>(std::int64_t, std::string_view, bool, bool);
template nlohmann::json byte_level_bpe_tokenizer_json<nlohmann::json>(nlohmann::json, std::string_view, nlohmann::json,
                                                                      nlohmann::json);
template nlohmann::ordered_json byte_level_bpe_tokenizer_json<nlohmann::ordered_json>(nlohmann::ordered_json,
                                                                                      std::string_view,
                                                                                      nlohmann::ordered_json,
                                                                                      nlohmann::ordered_json);

}  // namespace clef

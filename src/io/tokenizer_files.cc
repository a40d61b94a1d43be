// SPDX-License-Identifier: MIT
#include "io/tokenizer_files.h"

#include <filesystem>
#include <unordered_set>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"

namespace fs = std::filesystem;

namespace clef {
namespace {

[[noreturn]] void bad(const std::string& file, const std::string& msg) { throw ModelLoadError(file + ": " + msg); }

/// obj[key] as a string: "" when absent or null; an error naming `where` for any other type.
std::string string_field(const nlohmann::json& obj, const char* key, const std::string& file,
                         const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return "";
  if (!it->is_string()) bad(file, where + "." + key + ": expected a string, got " + describe_json(*it));
  return it->get<std::string>();
}

/// A token id: a non-negative integer that fits int32.
std::int64_t token_id(const nlohmann::json& v, const std::string& file, const std::string& where) {
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > 0x7fffffffu) {
    bad(file, where + ": token id must be an integer in [0, 2147483647], got " + describe_json(v));
  }
  return v.get<std::int64_t>();
}

std::string find_split_regex(const nlohmann::json& pre) {
  if (!pre.is_object()) return "";
  const auto t = pre.find("type");
  const std::string type = (t != pre.end() && t->is_string()) ? t->get<std::string>() : "";
  if (type == "Split") {
    auto pat = pre.find("pattern");
    if (pat != pre.end() && pat->is_object()) {
      if (auto r = pat->find("Regex"); r != pat->end() && r->is_string()) return r->get<std::string>();
      if (auto s = pat->find("String"); s != pat->end() && s->is_string()) return s->get<std::string>();
    }
    return "";
  }
  if (type == "Sequence") {
    auto list = pre.find("pretokenizers");
    if (list != pre.end() && list->is_array()) {
      for (const auto& p : *list) {
        std::string r = find_split_regex(p);
        if (!r.empty()) return r;
      }
    }
  }
  return "";
}

}  // namespace

namespace {

/// The largest token id seen so far and the file that names it (for the vocab_size check).
struct MaxId {
  std::int64_t& id;
  std::string file;
  void see(std::int64_t candidate, const std::string& in) {
    if (candidate > id) {
      id = candidate;
      file = in;
    }
  }
};

/// tokenizer.json's BPE model: type, vocabulary (ids unique), merges (one form), ignore_merges.
void read_bpe_model(const nlohmann::json& j, const std::string& tj, TokenizerSummary& s, MaxId& max_id) {
  auto model = j.find("model");
  if (model == j.end() || !model->is_object()) bad(tj, "model: missing or not an object");
  s.model_type = string_field(*model, "type", tj, "model");
  if (s.model_type != "BPE") bad(tj, "model.type: \"" + printable(s.model_type) + "\" is not supported (expected BPE)");
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object()) bad(tj, "model.vocab: missing or not an object");
  std::unordered_set<std::int64_t> ids;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const auto id = token_id(*it, tj, "model.vocab[\"" + printable(it.key()) + "\"]");
    if (!ids.insert(id).second) bad(tj, "model.vocab: id " + std::to_string(id) + " is used twice");
    max_id.see(id, tj);
  }
  s.vocab_entries = static_cast<std::int64_t>(vocab->size());
  auto merges = model->find("merges");
  if (merges == model->end() || !merges->is_array()) bad(tj, "model.merges: missing or not an array");
  s.merges = static_cast<std::int64_t>(merges->size());
  s.merges_form = merges->empty() ? "pairs" : ((*merges)[0].is_string() ? "strings" : "pairs");
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const auto& m = (*merges)[i];
    const bool ok = s.merges_form == "strings"
                        ? m.is_string()
                        : (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string());
    if (!ok) bad(tj, "model.merges[" + std::to_string(i) + "]: mixed or malformed merge entry");
  }
  if (auto im = model->find("ignore_merges"); im != model->end() && !im->is_null()) {
    if (!im->is_boolean()) bad(tj, "model.ignore_merges: expected true or false, got " + describe_json(*im));
    s.ignore_merges = im->get<bool>();
  }
}

/// tokenizer.json: the BPE model, the normalizer, the split regex and the added tokens.
void read_tokenizer_json(const std::string& path, const std::string& tj, TokenizerSummary& s, MaxId& max_id) {
  nlohmann::json j = read_json_file(path, tj);
  if (!j.is_object()) bad(tj, "expected a JSON object");
  read_bpe_model(j, tj, s, max_id);
  auto norm = j.find("normalizer");
  if (norm == j.end() || norm->is_null()) {
    s.normalizer = "none";
  } else {
    if (!norm->is_object()) bad(tj, "normalizer: expected an object or null, got " + describe_json(*norm));
    s.normalizer = string_field(*norm, "type", tj, "normalizer");
  }
  if (auto pre = j.find("pre_tokenizer"); pre != j.end()) s.split_regex = find_split_regex(*pre);
  auto added = j.find("added_tokens");
  if (added != j.end() && !added->is_null()) {
    if (!added->is_array()) bad(tj, "added_tokens: expected an array");
    for (std::size_t i = 0; i < added->size(); ++i) {
      const auto& a = (*added)[i];
      if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string()) {
        bad(tj, "added_tokens[" + std::to_string(i) + "]: needs an integer id and a string content");
      }
      const auto id = token_id(a["id"], tj, "added_tokens[" + std::to_string(i) + "].id");
      s.added[id] = a["content"].get<std::string>();
      max_id.see(id, tj);
    }
    s.added_in_tokenizer_json = static_cast<std::int64_t>(added->size());
  }
}

/// tokenizer_config.json's added_tokens_decoder: ids tokenizer.json has must agree; others are
/// counted as added in the config only.
void read_tokenizer_config(const std::string& path, const std::string& tc, TokenizerSummary& s, MaxId& max_id) {
  nlohmann::json j = read_json_file(path, tc);
  if (!j.is_object()) bad(tc, "expected a JSON object");
  auto dec = j.find("added_tokens_decoder");
  if (dec == j.end() || dec->is_null()) return;
  if (!dec->is_object()) bad(tc, "added_tokens_decoder: expected an object");
  for (auto it = dec->begin(); it != dec->end(); ++it) {
    std::int64_t id = -1;
    try {
      std::size_t pos = 0;
      id = std::stoll(it.key(), &pos);
      if (pos != it.key().size() || id < 0) id = -1;
    } catch (const std::exception&) {
      id = -1;
    }
    if (id < 0 || id > 0x7fffffff)
      bad(tc, "added_tokens_decoder: key \"" + printable(it.key()) + "\" is not a token id");
    if (!it->is_object() || !it->contains("content") || !(*it)["content"].is_string()) {
      bad(tc, "added_tokens_decoder." + printable(it.key()) + ": needs a string content");
    }
    const std::string content = (*it)["content"].get<std::string>();
    auto found = s.added.find(id);
    if (found == s.added.end()) {
      s.added[id] = content;
      ++s.added_in_config_only;
    } else if (found->second != content) {
      bad(tc, "added_tokens_decoder." + it.key() + " is \"" + printable(content) + "\" but tokenizer.json says \"" +
                  printable(found->second) + "\"");
    }
    max_id.see(id, tc);
  }
}

/// The tokenizer against config.json: every id inside the embedding table, and the special ids
/// of a composite config naming the expected tokens.
void check_against_config(const TokenizerSummary& s, const std::string& max_id_file, const std::string& tj,
                          const ModelConfig& config) {
  if (s.max_id >= config.text.vocab_size) {
    bad(max_id_file, "token id " + std::to_string(s.max_id) + " is outside the model's embedding table (vocab_size " +
                         std::to_string(config.text.vocab_size) + ")");
  }
  if (!config.composite) return;
  const std::pair<std::int64_t, const char*> expected[] = {
      {config.image_token_id, "<|image_pad|>"},
      {config.video_token_id, "<|video_pad|>"},
      {config.vision_start_token_id, "<|vision_start|>"},
      {config.vision_end_token_id, "<|vision_end|>"},
  };
  for (const auto& [id, content] : expected) {
    auto it = s.added.find(id);
    if (it == s.added.end() || it->second != content) {
      bad(tj, "config.json names token " + std::to_string(id) + " as " + content + " but the tokenizer has " +
                  (it == s.added.end() ? std::string("no added token there") : "\"" + printable(it->second) + "\""));
    }
  }
}

}  // namespace

TokenizerSummary read_tokenizer_summary(const std::string& dir, const ModelConfig& config) {
  const std::string tj = "tokenizer.json", tc = "tokenizer_config.json";
  if (!path_exists((fs::path(dir) / tj).string())) bad(tj, "missing from " + printable(dir));
  if (!path_exists((fs::path(dir) / tc).string())) bad(tc, "missing from " + printable(dir));
  TokenizerSummary s;
  MaxId max_id{s.max_id, ""};
  read_tokenizer_json((fs::path(dir) / tj).string(), tj, s, max_id);
  read_tokenizer_config((fs::path(dir) / tc).string(), tc, s, max_id);
  check_against_config(s, max_id.file, tj, config);
  return s;
}

}  // namespace clef

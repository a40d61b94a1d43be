// SPDX-License-Identifier: MIT
// Loading tokenizer.json (+ tokenizer_config.json) into Tokenizer::Impl. tokenizer.json is read
// with nlohmann's SAX interface: model.vocab and model.merges (the bulk of a 12.8 MB file) stream
// straight into flat arrays, everything else becomes a small DOM that is then validated.
#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace clef {

std::uint32_t byte_level_char(unsigned char b) noexcept {
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
  // the other 68 bytes, ascending, map to U+0100, U+0101, ...
  std::uint32_t k = 0;
  for (unsigned x = 0; x < b; ++x) {
    if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++k;
  }
  return 0x100 + k;
}

int byte_level_byte(std::uint32_t cp) noexcept {
  static const auto table = [] {
    std::vector<int> t(0x144, -1);
    for (unsigned b = 0; b < 256; ++b) t[byte_level_char(static_cast<unsigned char>(b))] = static_cast<int>(b);
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

namespace tokenizer_detail {

void AddedTrie::add(std::string_view s, std::int32_t id) {
  std::uint32_t node = 0;
  for (const char ch : s) {
    const auto b = static_cast<unsigned char>(ch);
    std::uint32_t child = 0;
    for (const auto& [c, n] : nodes[node].next) {
      if (c == b) child = n;
    }
    if (child == 0) {
      child = static_cast<std::uint32_t>(nodes.size());
      nodes[node].next.emplace_back(b, child);
      nodes.emplace_back();
    }
    node = child;
  }
  nodes[node].token = id;
  first_byte[static_cast<unsigned char>(s[0])] = true;
}

std::size_t AddedTrie::longest_at(std::string_view text, std::size_t pos, std::int32_t& id) const noexcept {
  std::uint32_t node = 0;
  std::size_t best = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    std::uint32_t child = 0;
    for (const auto& [c, n] : nodes[node].next) {
      if (c == b) {
        child = n;
        break;
      }
    }
    if (child == 0) break;
    node = child;
    if (nodes[node].token >= 0) {
      best = i + 1 - pos;
      id = nodes[node].token;
    }
  }
  return best;
}

}  // namespace tokenizer_detail

namespace {

using nlohmann::json;
using tokenizer_detail::IdKind;

struct Span {
  std::uint32_t off, len;
};

// SAX consumer: DOM for everything but model.vocab / model.merges, which are streamed.
class TokenizerSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  json root;
  std::string text;  // arena: vocab keys and merge parts
  std::vector<Span> vocab_keys;
  std::vector<std::int64_t> vocab_ids;
  std::vector<std::pair<Span, Span>> merges;
  bool saw_vocab = false, saw_merges = false;
  std::string error;

  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(number_integer_t v) {
    if (mode_ == Mode::kVocab) return fail("model.vocab[\"" + cur_key() + "\"]: id must be a non-negative integer");
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) {
    if (mode_ == Mode::kVocab) {
      if (v > static_cast<number_unsigned_t>(std::numeric_limits<std::int32_t>::max() - 1)) {
        return fail("model.vocab[\"" + cur_key() + "\"]: id " + std::to_string(v) + " is too large");
      }
      vocab_keys.push_back(pending_vocab_key_);
      vocab_ids.push_back(static_cast<std::int64_t>(v));
      return true;
    }
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) {
    if (mode_ == Mode::kVocab) return fail("model.vocab[\"" + cur_key() + "\"]: id must be a non-negative integer");
    return value(json(v));
  }
  bool binary(binary_t&) { return fail("unexpected binary value"); }
  bool string(string_t& s) {
    switch (mode_) {
      case Mode::kVocab: return fail("model.vocab[\"" + cur_key() + "\"]: id must be a non-negative integer");
      case Mode::kMerges: {  // legacy "a b" form
        const auto sp = s.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos) {
          return fail("model.merges[" + std::to_string(merges.size()) + "]: \"" + s +
                      "\" is not of the form \"left right\"");
        }
        if (legacy_ == 0) return fail("model.merges: mixed merge forms");
        legacy_ = 1;
        merges.emplace_back(store(std::string_view(s).substr(0, sp)), store(std::string_view(s).substr(sp + 1)));
        return true;
      }
      case Mode::kMergePair:
        if (pair_n_ >= 2) return fail("model.merges[" + std::to_string(merges.size()) + "]: expected 2 strings");
        pair_[pair_n_++] = store(s);
        return true;
      case Mode::kDom: break;
    }
    return value(json(std::move(s)));
  }
  bool start_object(std::size_t) {
    if (mode_ != Mode::kDom)
      return fail("model." + std::string(mode_ == Mode::kVocab ? "vocab" : "merges") + ": unexpected object");
    if (at_model_child("vocab")) {
      if (saw_vocab) return fail("model.vocab: given twice");
      saw_vocab = true;
      mode_ = Mode::kVocab;
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) {
    if (mode_ == Mode::kVocab) {
      pending_vocab_key_ = store(k);
      return true;
    }
    pending_key_ = std::move(k);
    return true;
  }
  bool end_object() {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) {
    if (mode_ == Mode::kVocab) return fail("model.vocab: unexpected array");
    if (mode_ == Mode::kMergePair) return fail("model.merges[" + std::to_string(merges.size()) + "]: nested array");
    if (mode_ == Mode::kMerges) {
      if (legacy_ == 1) return fail("model.merges: mixed merge forms");
      legacy_ = 0;
      mode_ = Mode::kMergePair;
      pair_n_ = 0;
      return true;
    }
    if (at_model_child("merges")) {
      if (saw_merges) return fail("model.merges: given twice");
      saw_merges = true;
      mode_ = Mode::kMerges;
      return true;
    }
    return open(json::array());
  }
  bool end_array() {
    if (mode_ == Mode::kMergePair) {
      if (pair_n_ != 2) return fail("model.merges[" + std::to_string(merges.size()) + "]: expected 2 strings");
      merges.emplace_back(pair_[0], pair_[1]);
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    error = "malformed JSON near byte " + std::to_string(pos) + ": " + json_library_message(e);
    return false;
  }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };

  bool fail(std::string m) {
    if (error.empty()) error = std::move(m);
    return false;
  }
  std::string cur_key() const { return std::string(text.substr(pending_vocab_key_.off, pending_vocab_key_.len)); }
  Span store(std::string_view s) {
    const Span sp{static_cast<std::uint32_t>(text.size()), static_cast<std::uint32_t>(s.size())};
    text.append(s);
    return sp;
  }
  bool at_model_child(const char* name) const {
    return stack_.size() == 2 && keys_.size() == 2 && keys_[1] == "model" && stack_[1]->is_object() &&
           pending_key_ == name;
  }
  json* place(json v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[pending_key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(json v) {
    place(std::move(v));
    return true;
  }
  bool open(json v) {
    const std::string k = stack_.empty() || stack_.back()->is_array() ? std::string() : pending_key_;
    json* p = place(std::move(v));
    stack_.push_back(p);
    keys_.push_back(k);
    return true;
  }
  bool close() {
    if (stack_.empty()) return fail("unbalanced JSON");
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  Mode mode_ = Mode::kDom;
  std::vector<json*> stack_;
  std::vector<std::string> keys_;  // key under which each open container was placed
  std::string pending_key_;
  Span pending_vocab_key_{0, 0};
  Span pair_[2]{};
  int pair_n_ = 0;
  int legacy_ = -1;  // -1 unknown, 0 pair form, 1 "a b" form
};

[[noreturn]] void bad(const std::string& file, const std::string& msg) { throw ModelLoadError(file + ": " + msg); }
[[noreturn]] void unsupported(const std::string& file, const std::string& msg) {
  throw Unsupported(file + ": " + msg +
                    " (this tokenizer reproduces only the Qwen2/Qwen3/Qwen3.5 byte-level BPE pipeline)");
}

std::string short_dump(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 200) s = s.substr(0, 197) + "...";
  return s;
}

bool is_false_or_absent(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_boolean() && !it->get<bool>());
}
bool is_null_or_absent(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null();
}
bool is_empty_string_or_absent(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty());
}

void check_byte_level(const std::string& file, const json& j, const std::string& where) {
  if (!j.is_object() || j.value("type", std::string()) != "ByteLevel") {
    unsupported(file, where + ": expected {\"type\": \"ByteLevel\"}, got " + short_dump(j));
  }
}

SplitPattern check_pre_tokenizer(const std::string& file, const json& root) {
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || !it->is_object()) unsupported(file, "pre_tokenizer: missing or not an object");
  const json& pre = *it;
  if (pre.value("type", std::string()) != "Sequence" || !pre.contains("pretokenizers") ||
      !pre["pretokenizers"].is_array() || pre["pretokenizers"].size() != 2) {
    unsupported(file, "pre_tokenizer: expected Sequence[Split, ByteLevel], got " + short_dump(pre));
  }
  const json& split = pre["pretokenizers"][0];
  const json& bl = pre["pretokenizers"][1];
  if (!split.is_object() || split.value("type", std::string()) != "Split") {
    unsupported(file, "pre_tokenizer.pretokenizers[0]: expected Split, got " + short_dump(split));
  }
  if (split.value("behavior", std::string()) != "Isolated") {
    unsupported(file, "pre_tokenizer.pretokenizers[0].behavior: only \"Isolated\" is supported, got " +
                          short_dump(split.value("behavior", json())));
  }
  if (!is_false_or_absent(split, "invert")) unsupported(file, "pre_tokenizer.pretokenizers[0].invert: must be false");
  auto pat = split.find("pattern");
  if (pat == split.end() || !pat->is_object() || !pat->contains("Regex") || !(*pat)["Regex"].is_string()) {
    unsupported(file, "pre_tokenizer.pretokenizers[0].pattern: expected {\"Regex\": ...}, got " +
                          (pat == split.end() ? std::string("nothing") : short_dump(*pat)));
  }
  const std::string regex = (*pat)["Regex"].get<std::string>();
  const auto p = split_pattern_from_regex(regex);
  if (!p) {
    unsupported(file, "pre_tokenizer.pretokenizers[0].pattern.Regex: the split regex " + short_dump(json(regex)) +
                          " is not one the scanner implements (known: the Qwen2/Qwen3 and Qwen3.5/Qwen3.6 "
                          "patterns of docs/TOKENIZER.md §1.2); refusing rather than tokenizing differently");
  }
  check_byte_level(file, bl, "pre_tokenizer.pretokenizers[1]");
  if (!is_false_or_absent(bl, "add_prefix_space")) {
    unsupported(file, "pre_tokenizer.pretokenizers[1].add_prefix_space: must be false");
  }
  if (!is_false_or_absent(bl, "use_regex"))
    unsupported(file, "pre_tokenizer.pretokenizers[1].use_regex: must be false");
  return *p;
}

struct AddedSpec {
  std::int64_t id;
  std::string content;
  bool special;
  bool in_tokenizer_json;
};

AddedSpec read_added(const std::string& file, const json& a, const std::string& where, std::int64_t id) {
  if (!a.is_object()) bad(file, where + ": expected an object");
  auto c = a.find("content");
  if (c == a.end() || !c->is_string() || c->get<std::string>().empty()) {
    bad(file, where + ".content: expected a non-empty string");
  }
  for (const char* flag : {"lstrip", "rstrip", "single_word"}) {
    if (!is_false_or_absent(a, flag)) unsupported(file, where + "." + flag + ": true is not supported");
  }
  auto norm = a.find("normalized");
  if (norm != a.end() && !norm->is_null() && !(norm->is_boolean() && !norm->get<bool>())) {
    unsupported(file, where + ".normalized: true is not supported (Qwen's added tokens match raw text)");
  }
  auto sp = a.find("special");
  const bool special = sp != a.end() && sp->is_boolean() && sp->get<bool>();
  const std::string content = c->get<std::string>();
  if (unicode::find_invalid_utf8(content) != std::string_view::npos) bad(file, where + ".content: invalid UTF-8");
  return AddedSpec{id, content, special, true};
}

// Decoded bytes of a token string under the HF ByteLevel decoder: every character through the
// inverse byte table; if any character is outside the table, the token's own UTF-8 bytes.
bool byte_level_decode(std::string_view s, std::string& out) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len;
    const std::uint32_t cp = unicode::decode_utf8(p + i, len);
    const int b = byte_level_byte(cp);
    if (b < 0) {
      out.assign(s);
      return false;
    }
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return true;
}

std::atomic<std::uint64_t> g_serial{0};

/// The pipeline checks of tokenizer.json (docs/TOKENIZER.md §1.1, "Refused at load"): truncation,
/// padding, normalizer, pre-tokenizer (the split pattern), post-processor, decoder and the BPE
/// model's settings.
void check_pipeline(const std::string& file, const json& root, const TokenizerSax& sax,
                    const TokenizerLoadOptions& options, Tokenizer::Impl& impl) {
  for (const char* k : {"truncation", "padding"}) {
    if (!is_null_or_absent(root, k)) unsupported(file, std::string(k) + ": must be null");
  }
  {
    auto n = root.find("normalizer");
    if (n == root.end() || n->is_null()) {
      impl.nfc = false;
    } else if (n->is_object() && n->value("type", std::string()) == "NFC") {
      impl.nfc = true;
    } else {
      unsupported(file, "normalizer: only NFC or null is supported, got " + short_dump(*n));
    }
  }
  impl.pattern = check_pre_tokenizer(file, root);
  impl.file_pattern = impl.pattern;
  if (options.split_override) impl.pattern = *options.split_override;
  if (auto pp = root.find("post_processor"); pp != root.end() && !pp->is_null()) {
    check_byte_level(file, *pp, "post_processor");
  }
  {
    auto d = root.find("decoder");
    if (d == root.end() || d->is_null()) unsupported(file, "decoder: missing (expected ByteLevel)");
    check_byte_level(file, *d, "decoder");
  }
  auto mit = root.find("model");
  if (mit == root.end() || !mit->is_object()) bad(file, "model: missing or not an object");
  const json& model = *mit;
  if (model.value("type", std::string("BPE")) != "BPE") {
    unsupported(file, "model.type: " + short_dump(model["type"]) + " (expected BPE)");
  }
  if (!is_null_or_absent(model, "dropout")) unsupported(file, "model.dropout: must be null");
  if (!is_null_or_absent(model, "unk_token")) unsupported(file, "model.unk_token: must be null");
  if (!is_false_or_absent(model, "byte_fallback")) unsupported(file, "model.byte_fallback: must be false");
  if (!is_empty_string_or_absent(model, "continuing_subword_prefix")) {
    unsupported(file, "model.continuing_subword_prefix: must be empty");
  }
  if (!is_empty_string_or_absent(model, "end_of_word_suffix"))
    unsupported(file, "model.end_of_word_suffix: must be empty");
  if (auto im = model.find("ignore_merges"); im != model.end() && !im->is_null()) {
    if (!im->is_boolean()) bad(file, "model.ignore_merges: expected a boolean");
    impl.ignore_merges = im->get<bool>();
  }
  if (!sax.saw_vocab) bad(file, "model.vocab: missing or not an object");
  if (!sax.saw_merges) bad(file, "model.merges: missing or not an array");
}

/// Merges tokenizer_config.json's added_tokens_decoder into `added`: an id tokenizer.json has must
/// name the same content; another is added when options.merge_config_added_tokens.
void merge_config_added_tokens(std::string_view config_json, const TokenizerLoadOptions& options,
                               std::vector<AddedSpec>& added) {
  const std::string cfile = "tokenizer_config.json";
  json cfg;
  try {
    cfg = json::parse(config_json);
  } catch (const json::exception& e) {
    bad(cfile, "malformed JSON: " + json_library_message(e));
  }
  if (!cfg.is_object()) bad(cfile, "expected a JSON object at the top level");
  if (auto sst = cfg.find("split_special_tokens"); sst != cfg.end() && sst->is_boolean() && sst->get<bool>()) {
    unsupported(cfile, "split_special_tokens: true is not supported (special tokens are always recognized)");
  }
  auto dec = cfg.find("added_tokens_decoder");
  if (dec != cfg.end() && !dec->is_null()) {
    if (!dec->is_object()) bad(cfile, "added_tokens_decoder: expected an object");
    for (auto it = dec->begin(); it != dec->end(); ++it) {
      const std::string where = "added_tokens_decoder[\"" + it.key() + "\"]";
      std::int64_t id = -1;
      try {
        std::size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0 || id > std::numeric_limits<std::int32_t>::max() - 1) bad(cfile, where + ": key is not a token id");
      AddedSpec spec = read_added(cfile, it.value(), where, id);
      spec.in_tokenizer_json = false;
      bool known = false;
      for (const auto& a : added) {
        if (a.id == id) {
          if (a.content != spec.content) {
            bad(cfile,
                where + ": content \"" + spec.content + "\" disagrees with tokenizer.json (\"" + a.content + "\")");
          }
          known = true;
        }
      }
      if (!known && options.merge_config_added_tokens) added.push_back(std::move(spec));
    }
  }
}

/// The added tokens: tokenizer.json's, then tokenizer_config.json's added_tokens_decoder; sorted
/// by id, each id once.
std::vector<AddedSpec> read_added_tokens(const std::string& file, const json& root, std::string_view config_json,
                                         const TokenizerLoadOptions& options) {
  std::vector<AddedSpec> added;
  if (auto at = root.find("added_tokens"); at != root.end() && !at->is_null()) {
    if (!at->is_array()) bad(file, "added_tokens: expected an array");
    for (std::size_t i = 0; i < at->size(); ++i) {
      const json& a = (*at)[i];
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned()) {
        bad(file, where + ".id: expected a non-negative integer");
      }
      const auto id = a["id"].get<std::int64_t>();
      if (id > std::numeric_limits<std::int32_t>::max() - 1) bad(file, where + ".id: too large");
      added.push_back(read_added(file, a, where, id));
    }
  }
  if (!config_json.empty()) merge_config_added_tokens(config_json, options, added);
  std::sort(added.begin(), added.end(), [](const AddedSpec& a, const AddedSpec& b) { return a.id < b.id; });
  for (std::size_t i = 1; i < added.size(); ++i) {
    if (added[i].id == added[i - 1].id) bad(file, "added_tokens: id " + std::to_string(added[i].id) + " is used twice");
  }
  return added;
}

/// The vocabulary: token strings stay in the SAX arena, which becomes impl.strings (the added
/// tokens' strings appended; their spans are returned); ids get their kind and string; the table
/// by string. Sizes the per-id arrays to the largest id + 1.
std::vector<Span> build_vocabulary(const std::string& file, TokenizerSax& sax, const std::vector<AddedSpec>& added,
                                   Tokenizer::Impl& impl) {
  const std::size_t nv = sax.vocab_keys.size();
  impl.vocab_entries = nv;
  std::int64_t max_id = -1;
  for (const auto id : sax.vocab_ids) max_id = std::max(max_id, id);
  for (const auto& a : added) max_id = std::max(max_id, a.id);
  const auto limit = static_cast<std::size_t>(max_id + 1);
  if (limit > nv + added.size() + (1u << 20)) {
    bad(file, "ids are sparse: largest id " + std::to_string(max_id) + " for " + std::to_string(nv) + " vocab entries");
  }
  std::vector<Span> added_span;
  for (const auto& a : added) {
    added_span.push_back(
        Span{static_cast<std::uint32_t>(sax.text.size()), static_cast<std::uint32_t>(a.content.size())});
    sax.text += a.content;
  }
  if (sax.text.size() > std::numeric_limits<std::uint32_t>::max() / 2) bad(file, "vocabulary too large");
  impl.strings = std::move(sax.text);
  const std::string_view arena(impl.strings);
  impl.kind.assign(limit, IdKind::kUnknown);
  impl.str_off.assign(limit, 0);
  impl.str_len.assign(limit, 0);
  impl.by_string.reserve(nv + added.size(), impl.strings.data());
  {
    constexpr std::size_t kBlock = 32;  // hash and prefetch a block of keys, then insert them
    std::uint64_t h[kBlock];
    for (std::size_t first = 0; first < nv; first += kBlock) {
      const std::size_t n = std::min(kBlock, nv - first);
      for (std::size_t k = 0; k < n; ++k) {
        const Span key = sax.vocab_keys[first + k];
        h[k] = tokenizer_detail::hash_bytes(arena.data() + key.off, key.len);
        impl.by_string.prefetch(h[k]);
      }
      for (std::size_t k = 0; k < n; ++k) {
        const auto id = static_cast<std::size_t>(sax.vocab_ids[first + k]);
        const Span key = sax.vocab_keys[first + k];
        if (impl.kind[id] != IdKind::kUnknown) bad(file, "model.vocab: id " + std::to_string(id) + " is used twice");
        impl.kind[id] = IdKind::kVocab;
        impl.str_off[id] = key.off;
        impl.str_len[id] = key.len;
        if (impl.by_string.insert(key.off, key.len, static_cast<std::int32_t>(id), h[k], false) >= 0) {
          bad(file, "model.vocab: token \"" + std::string(arena.substr(key.off, key.len)) + "\" appears twice");
        }
      }
    }
  }
  return added_span;
}

/// The merges, resolved against the model vocabulary only (added tokens are inserted later).
void resolve_merges(const std::string& file, const TokenizerSax& sax, Tokenizer::Impl& impl) {
  const std::string_view arena(impl.strings);
  impl.merges.reserve(sax.merges.size());
  {
    // Blocks of merges: hash and prefetch all lookups of a block first, then resolve them (the
    // vocabulary table is far larger than the caches; this hides most of the misses).
    constexpr std::size_t kBlock = 32;
    std::string concat;
    std::vector<std::uint32_t> cat_off(kBlock + 1);
    std::uint64_t ha[kBlock], hb[kBlock], hc[kBlock];
    std::array<std::int32_t, 3> ids[kBlock];
    for (std::size_t first = 0; first < sax.merges.size(); first += kBlock) {
      const std::size_t n = std::min(kBlock, sax.merges.size() - first);
      concat.clear();
      for (std::size_t k = 0; k < n; ++k) {
        const auto& [sa, sb] = sax.merges[first + k];
        const std::string_view a = arena.substr(sa.off, sa.len), b = arena.substr(sb.off, sb.len);
        cat_off[k] = static_cast<std::uint32_t>(concat.size());
        concat.append(a).append(b);
        ha[k] = tokenizer_detail::hash_bytes(a.data(), a.size());
        hb[k] = tokenizer_detail::hash_bytes(b.data(), b.size());
        hc[k] = tokenizer_detail::hash_bytes(concat.data() + cat_off[k], a.size() + b.size());
        impl.by_string.prefetch(ha[k]);
        impl.by_string.prefetch(hb[k]);
        impl.by_string.prefetch(hc[k]);
      }
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t i = first + k;
        const auto& [sa, sb] = sax.merges[i];
        const std::string_view a = arena.substr(sa.off, sa.len), b = arena.substr(sb.off, sb.len);
        const std::string_view ab = std::string_view(concat).substr(cat_off[k], a.size() + b.size());
        const std::int32_t ia = impl.by_string.find(a, ha[k]), ib = impl.by_string.find(b, hb[k]);
        const std::int32_t iab = impl.by_string.find(ab, hc[k]);
        if (ia < 0 || ib < 0 || iab < 0) {
          const std::string missing(ia < 0 ? a : ib < 0 ? b : ab);
          bad(file, "model.merges[" + std::to_string(i) + "]: \"" + std::string(a) + " " + std::string(b) +
                        "\": token \"" + missing + "\" is not in the vocabulary");
        }
        ids[k] = {ia, ib, iab};
        impl.merges.prefetch(ia, ib);
      }
      for (std::size_t k = 0; k < n; ++k) {
        impl.merges.put(ids[k][0], ids[k][1], {static_cast<std::uint32_t>(first + k), ids[k][2]});
      }
    }
  }
}

/// The byte-level ids of the 256 bytes, then the added tokens, which override ids and strings
/// (HF looks at added tokens first both ways).
void add_byte_ids_and_added_tokens(const std::vector<AddedSpec>& added, const std::vector<Span>& added_span,
                                   Tokenizer::Impl& impl) {
  std::string tmp;
  for (unsigned b = 0; b < 256; ++b) {
    tmp.clear();
    unicode::append_utf8(byte_level_char(static_cast<unsigned char>(b)), tmp);
    impl.byte_id[b] = impl.by_string.find(tmp);
  }

  for (std::size_t k = 0; k < added.size(); ++k) {
    const auto& a = added[k];
    const auto id = static_cast<std::size_t>(a.id);
    impl.kind[id] = a.special ? IdKind::kAddedSpecial : IdKind::kAdded;
    impl.str_off[id] = added_span[k].off;
    impl.str_len[id] = added_span[k].len;
    impl.by_string.insert(added_span[k].off, added_span[k].len, static_cast<std::int32_t>(a.id), true);
    impl.added.push_back(AddedTokenInfo{static_cast<std::int32_t>(a.id), a.content, a.special, a.in_tokenizer_json});
  }
  for (const auto& a : impl.added) impl.trie.add(a.content, a.id);
}

/// The decoded bytes of every id, the longest vocabulary token, and with ignore_merges the table
/// of vocabulary tokens by their bytes.
void decode_id_bytes(Tokenizer::Impl& impl) {
  const std::size_t limit = impl.kind.size();
  const std::size_t nv = impl.vocab_entries;
  std::string tmp;
  impl.bytes.reserve(impl.strings.size());
  impl.bytes_off.resize(limit + 1);
  std::vector<std::uint8_t> byte_level_ok(limit, 0);
  for (std::size_t id = 0; id < limit; ++id) {
    impl.bytes_off[id] = static_cast<std::uint32_t>(impl.bytes.size());
    byte_level_ok[id] = byte_level_decode(impl.string_of(static_cast<std::int32_t>(id)), tmp) ? 1 : 0;
    impl.bytes.append(tmp);
  }
  impl.bytes_off[limit] = static_cast<std::uint32_t>(impl.bytes.size());
  if (std::all_of(std::begin(impl.byte_id), std::end(impl.byte_id), [](std::int32_t id) { return id >= 0; })) {
    for (std::size_t id = 0; id < limit; ++id) {
      if (impl.kind[id] == IdKind::kVocab)
        impl.max_token_bytes = std::max<std::size_t>(impl.max_token_bytes, impl.str_len[id]);
    }
  }
  if (impl.ignore_merges) {
    impl.by_bytes.reserve(nv, impl.bytes.data());
    for (std::size_t id = 0; id < limit; ++id) {
      if (impl.kind[id] == IdKind::kVocab && byte_level_ok[id]) {
        impl.by_bytes.insert(impl.bytes_off[id], impl.bytes_off[id + 1] - impl.bytes_off[id],
                             static_cast<std::int32_t>(id));
      }
    }
  }
}

}  // namespace

std::unique_ptr<Tokenizer::Impl> load_tokenizer_impl(std::string_view tokenizer_json, std::string_view config_json,
                                                     const TokenizerLoadOptions& options, const std::string& label) {
  const std::string& file = label;
  TokenizerSax sax;
  sax.text.reserve(tokenizer_json.size() / 2);
  const bool ok = json::sax_parse(tokenizer_json.begin(), tokenizer_json.end(), &sax, json::input_format_t::json, true);
  if (!ok || !sax.error.empty()) bad(file, sax.error.empty() ? "malformed JSON" : sax.error);
  const json& root = sax.root;
  if (!root.is_object()) bad(file, "expected a JSON object at the top level");

  auto impl = std::make_unique<Tokenizer::Impl>();
  impl->options = options;
  impl->serial = ++g_serial;
  check_pipeline(file, root, sax, options, *impl);
  const std::vector<AddedSpec> added = read_added_tokens(file, root, config_json, options);
  const std::vector<Span> added_span = build_vocabulary(file, sax, added, *impl);
  resolve_merges(file, sax, *impl);
  add_byte_ids_and_added_tokens(added, added_span, *impl);
  decode_id_bytes(*impl);
  return impl;
}

}  // namespace clef

// SPDX-License-Identifier: MIT
#include "clef_tools/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numbers>
#include <set>
#include <string_view>
#include <vector>

#include <unistd.h>

#include <atomic>
#include <chrono>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"
#include "core/sha256.h"
#include "io/safetensors.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_json.h"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace clef {

namespace {

// ---------------------------------------------------------------------------------------------
// Deterministic random numbers: SplitMix64, one stream per tensor (seeded by seed and name), so a
// tensor's values do not depend on the order tensors are generated in.

class Rng {
 public:
  explicit Rng(std::uint64_t s) : state_(s) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {                                                           // Box-Muller
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::uint64_t state_;
};

std::uint64_t name_seed(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

enum class Init { kNormal, kOffsetNorm, kUnitNorm, kALog, kConst };

struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
  DType dtype;
  Init init;
  double scale;  ///< std for kNormal/kOffsetNorm/kUnitNorm, value for kConst
};

TensorToWrite generate(const Spec& s, std::uint64_t seed) {
  Rng rng(name_seed(seed, s.name));
  std::uint64_t numel = 1;
  for (auto d : s.shape) numel *= static_cast<std::uint64_t>(d);
  TensorToWrite t{s.name, s.dtype, s.shape, std::vector<std::byte>(numel * dtype_size(s.dtype))};
  for (std::uint64_t i = 0; i < numel; ++i) {
    double v = 0.0;
    switch (s.init) {
      case Init::kNormal: v = s.scale * rng.normal(); break;
      case Init::kOffsetNorm: v = s.scale * rng.normal(); break;          // stored offset, used as 1 + w
      case Init::kUnitNorm: v = 1.0 + s.scale * rng.normal(); break;      // used directly
      case Init::kALog: v = std::log(1.0 + 15.0 * rng.uniform()); break;  // A in [1, 16)
      case Init::kConst: v = s.scale; break;
    }
    const auto f = static_cast<float>(v);
    if (s.dtype == DType::kBF16) {
      const std::uint16_t b = f32_to_bf16(f);
      std::memcpy(t.bytes.data() + 2 * i, &b, 2);
    } else {
      std::memcpy(t.bytes.data() + 4 * i, &f, 4);
    }
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Stand-in tokenizer: byte-level BPE trained on embedded text.

constexpr const char* kTrainingText =
    "<|im_start|>system\nRead the complete state and schema. Decide every field jointly. Each answer must be "
    "exactly one of that field's allowed options.<|im_end|>\n<|im_start|>user\nSTATE:\n"
    "\n\nSCHEMA FIELDS:\n\nFIELD 1\nID: question\nTYPE: noul\nINSTRUCTION: Is the customer asking for a refund?\n"
    "ALLOWED OPTIONS:\nOPTION 1: {\"description\":\"The proposition is true or the answer is "
    "yes.\",\"option_id\":\"true\"}\n"
    "OPTION 2: {\"description\":\"The proposition is false or the answer is no.\",\"option_id\":\"false\"}\n"
    "END FIELD\n\nFIELD 2\nID: priority\nTYPE: choice\nINSTRUCTION: How urgent is this ticket?\n"
    "END FIELD\n\nFIELD 3\nID: severity\nTYPE: score\nINSTRUCTION: Rate the severity of the incident.\n"
    "END FIELD\n\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:"
    "The customer wrote that the order arrived damaged and asked for a refund or a replacement. "
    "The support agent answered within the hour. The alert fired because the error rate of the payment "
    "service rose above the threshold for five minutes. Is the invoice total correct? Does the message "
    "contain personal information? Which team should handle the request: billing, shipping, security or "
    "product? Rate how satisfied the user is, from very unhappy to very happy. The document describes a "
    "contract between two companies, the start date, the price and the terms of renewal. Please review the "
    "state and decide whether the statement is true or false, and choose the best option for every question.";

/// GPT-2 byte -> unicode code point table (docs/TOKENIZER.md §1.3).
std::vector<std::string> byte_to_unicode() {
  std::vector<int> cps(256, -1);
  for (int b = 0; b < 256; ++b) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))
      cps[static_cast<std::size_t>(b)] = b;
  }
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    if (cps[static_cast<std::size_t>(b)] < 0) cps[static_cast<std::size_t>(b)] = next++;
  }
  std::vector<std::string> out(256);
  for (int b = 0; b < 256; ++b) {
    const auto cp = static_cast<unsigned>(cps[static_cast<std::size_t>(b)]);
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
    out[static_cast<std::size_t>(b)] = s;
  }
  return out;
}

/// The byte order of the Qwen base vocabulary: printable bytes first, then the remapped ones.
std::vector<int> qwen_byte_order() {
  std::vector<int> order;
  for (int b = 0; b < 256; ++b) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) order.push_back(b);
  }
  for (int b = 0; b < 256; ++b) {
    if (!((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff))) order.push_back(b);
  }
  return order;
}

/// Rough ASCII pre-tokenization for training only: optional space + letters, single digits,
/// punctuation runs, whitespace runs. Special-token markup is removed first.
std::vector<std::string> training_words(std::string text) {
  for (const char* marker : {"<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
    for (std::size_t p; (p = text.find(marker)) != std::string::npos;) text.erase(p, std::string_view(marker).size());
  }
  std::vector<std::string> words;
  std::size_t i = 0;
  auto alpha = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  while (i < text.size()) {
    std::size_t j = i;
    if (text[j] == ' ' && j + 1 < text.size() && alpha(text[j + 1])) ++j;
    if (alpha(text[j])) {
      while (j < text.size() && alpha(text[j])) ++j;
    } else if (std::isdigit(static_cast<unsigned char>(text[j]))) {
      ++j;
    } else if (std::isspace(static_cast<unsigned char>(text[j]))) {
      while (j < text.size() && std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    } else {
      if (text[j] == ' ') ++j;
      while (j < text.size() && !alpha(text[j]) && !std::isspace(static_cast<unsigned char>(text[j])) &&
             !std::isdigit(static_cast<unsigned char>(text[j]))) {
        ++j;
      }
      if (j == i) ++j;
    }
    words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

struct StandInTokenizer {
  std::vector<std::string> vocab;  ///< id -> byte-level string
  std::vector<std::pair<std::string, std::string>> merges;
};

StandInTokenizer train_stand_in(std::size_t max_merges) {
  const auto b2u = byte_to_unicode();
  StandInTokenizer tok;
  for (int b : qwen_byte_order()) tok.vocab.push_back(b2u[static_cast<std::size_t>(b)]);
  std::map<std::vector<std::string>, long> words;  // word as symbol sequence -> count
  for (const auto& w : training_words(kTrainingText)) {
    std::vector<std::string> syms;
    for (char c : w) syms.push_back(b2u[static_cast<unsigned char>(c)]);
    ++words[syms];
  }
  std::set<std::string> known(tok.vocab.begin(), tok.vocab.end());
  while (tok.merges.size() < max_merges) {
    std::map<std::pair<std::string, std::string>, long> counts;
    for (const auto& [syms, c] : words) {
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) counts[{syms[i], syms[i + 1]}] += c;
    }
    // Most frequent pair; ties go to the smallest pair (std::map order) for determinism.
    const std::pair<const std::pair<std::string, std::string>, long>* best = nullptr;
    for (const auto& e : counts) {
      if (known.count(e.first.first + e.first.second)) continue;
      if (best == nullptr || e.second > best->second) best = &e;
    }
    if (best == nullptr || best->second < 2) break;
    const auto [a, b] = best->first;
    tok.merges.emplace_back(a, b);
    tok.vocab.push_back(a + b);
    known.insert(a + b);
    std::map<std::vector<std::string>, long> next;
    for (const auto& [syms, c] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          out.push_back(a + b);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      next[out] += c;
    }
    words = std::move(next);
  }
  return tok;
}

struct AddedToken {
  const char* content;
  bool special;
  bool in_tokenizer_json;  ///< false: only in tokenizer_config.json (docs/TOKENIZER.md §1.5)
};

// The Qwen3.5 added tokens in id order (docs/TOKENIZER.md §1.5), offset to follow the
// stand-in vocab.
constexpr AddedToken kAddedTokens[] = {
    {"<|endoftext|>", true, true},      {"<|im_start|>", true, true},
    {"<|im_end|>", true, true},         {"<|object_ref_start|>", true, true},
    {"<|object_ref_end|>", true, true}, {"<|box_start|>", true, true},
    {"<|box_end|>", true, true},        {"<|quad_start|>", true, true},
    {"<|quad_end|>", true, true},       {"<|vision_start|>", true, true},
    {"<|vision_end|>", true, true},     {"<|vision_pad|>", true, true},
    {"<|image_pad|>", true, true},      {"<|video_pad|>", true, true},
    {"<tool_call>", false, true},       {"</tool_call>", false, true},
    {"<|fim_prefix|>", false, true},    {"<|fim_middle|>", false, true},
    {"<|fim_suffix|>", false, true},    {"<|fim_pad|>", false, true},
    {"<|repo_name|>", false, true},     {"<|file_sep|>", false, true},
    {"<tool_response>", false, true},   {"</tool_response>", false, true},
    {"<think>", false, true},           {"</think>", false, true},
    {"<|audio_start|>", true, false},   {"<|audio_end|>", true, false},
    {"<tts_pad>", true, false},         {"<tts_text_bos>", true, false},
    {"<tts_text_eod>", true, false},    {"<tts_text_bos_single>", true, false},
    {"<|audio_pad|>", true, false},
};

// ---------------------------------------------------------------------------------------------

/// Writes a file of the staging folder (the folder is published atomically as a whole).
void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  if (!out) throw IoError(p.string() + ": cannot create");
  out << text;
  if (!out.flush()) throw IoError(p.string() + ": write failed");
}

struct TinyDims {
  std::int64_t hidden = 64, layers = 4, heads = 4, kv_heads = 2, head_dim = 64, inter = 128;
  std::int64_t lk_heads = 2, lv_heads = 4, lk_dim = 32, lv_dim = 32, conv = 4;
  std::int64_t v_depth = 2, v_hidden = 32, v_heads = 2, v_inter = 64, v_out = 64, v_pos = 2304;
  std::int64_t h_width = 32, h_routing = 2, h_layers = 2, h_heads = 4, h_ff = 64;
};

std::vector<Spec> backbone_specs(const TinyDims& d, std::int64_t vocab) {
  std::vector<Spec> s;
  const auto bf = DType::kBF16;
  const auto lin = [&](const std::string& n, std::int64_t out, std::int64_t in) {
    s.push_back({n, {out, in}, bf, Init::kNormal, 1.0 / std::sqrt(static_cast<double>(in))});
  };
  const std::string p = "model.language_model.";
  s.push_back({p + "embed_tokens.weight", {vocab, d.hidden}, bf, Init::kNormal, 1.0});
  const std::int64_t key_dim = d.lk_heads * d.lk_dim, value_dim = d.lv_heads * d.lv_dim;
  const std::int64_t conv_dim = 2 * key_dim + value_dim;
  for (std::int64_t i = 0; i < d.layers; ++i) {
    const std::string q = p + "layers." + std::to_string(i) + ".";
    const bool full = (i + 1) % 4 == 0;
    s.push_back({q + "input_layernorm.weight", {d.hidden}, bf, Init::kOffsetNorm, 0.1});
    s.push_back({q + "post_attention_layernorm.weight", {d.hidden}, bf, Init::kOffsetNorm, 0.1});
    lin(q + "mlp.gate_proj.weight", d.inter, d.hidden);
    lin(q + "mlp.up_proj.weight", d.inter, d.hidden);
    lin(q + "mlp.down_proj.weight", d.hidden, d.inter);
    if (full) {
      lin(q + "self_attn.q_proj.weight", 2 * d.heads * d.head_dim, d.hidden);
      lin(q + "self_attn.k_proj.weight", d.kv_heads * d.head_dim, d.hidden);
      lin(q + "self_attn.v_proj.weight", d.kv_heads * d.head_dim, d.hidden);
      lin(q + "self_attn.o_proj.weight", d.hidden, d.heads * d.head_dim);
      s.push_back({q + "self_attn.q_norm.weight", {d.head_dim}, bf, Init::kOffsetNorm, 0.1});
      s.push_back({q + "self_attn.k_norm.weight", {d.head_dim}, bf, Init::kOffsetNorm, 0.1});
    } else {
      const std::string a = q + "linear_attn.";
      lin(a + "in_proj_qkv.weight", conv_dim, d.hidden);
      lin(a + "in_proj_z.weight", value_dim, d.hidden);
      lin(a + "in_proj_b.weight", d.lv_heads, d.hidden);
      lin(a + "in_proj_a.weight", d.lv_heads, d.hidden);
      s.push_back({a + "conv1d.weight", {conv_dim, 1, d.conv}, bf, Init::kNormal, 0.5});
      s.push_back({a + "dt_bias", {d.lv_heads}, bf, Init::kNormal, 0.5});
      s.push_back({a + "A_log", {d.lv_heads}, DType::kF32, Init::kALog, 0.0});
      s.push_back({a + "norm.weight", {d.lv_dim}, DType::kF32, Init::kUnitNorm, 0.1});
      lin(a + "out_proj.weight", d.hidden, value_dim);
    }
  }
  s.push_back({p + "norm.weight", {d.hidden}, bf, Init::kOffsetNorm, 0.1});

  const std::string v = "model.visual.";
  const std::int64_t D = d.v_hidden, m = 4 * D;
  s.push_back({v + "patch_embed.proj.weight", {D, 3, 2, 16, 16}, bf, Init::kNormal, 1.0 / std::sqrt(1536.0)});
  s.push_back({v + "patch_embed.proj.bias", {D}, bf, Init::kNormal, 0.02});
  s.push_back({v + "pos_embed.weight", {d.v_pos, D}, bf, Init::kNormal, 0.5});
  for (std::int64_t b = 0; b < d.v_depth; ++b) {
    const std::string q = v + "blocks." + std::to_string(b) + ".";
    for (const char* ln : {"norm1", "norm2"}) {
      s.push_back({q + ln + ".weight", {D}, bf, Init::kUnitNorm, 0.1});
      s.push_back({q + ln + ".bias", {D}, bf, Init::kNormal, 0.02});
    }
    lin(q + "attn.qkv.weight", 3 * D, D);
    s.push_back({q + "attn.qkv.bias", {3 * D}, bf, Init::kNormal, 0.02});
    lin(q + "attn.proj.weight", D, D);
    s.push_back({q + "attn.proj.bias", {D}, bf, Init::kNormal, 0.02});
    lin(q + "mlp.linear_fc1.weight", d.v_inter, D);
    s.push_back({q + "mlp.linear_fc1.bias", {d.v_inter}, bf, Init::kNormal, 0.02});
    lin(q + "mlp.linear_fc2.weight", D, d.v_inter);
    s.push_back({q + "mlp.linear_fc2.bias", {D}, bf, Init::kNormal, 0.02});
  }
  s.push_back({v + "merger.norm.weight", {D}, bf, Init::kUnitNorm, 0.1});
  s.push_back({v + "merger.norm.bias", {D}, bf, Init::kNormal, 0.02});
  lin(v + "merger.linear_fc1.weight", m, m);
  s.push_back({v + "merger.linear_fc1.bias", {m}, bf, Init::kNormal, 0.02});
  lin(v + "merger.linear_fc2.weight", d.v_out, m);
  s.push_back({v + "merger.linear_fc2.bias", {d.v_out}, bf, Init::kNormal, 0.02});
  return s;
}

std::vector<Spec> head_specs(const TinyDims& d) {
  std::vector<Spec> s;
  const auto f32 = DType::kF32;
  const std::int64_t h = d.hidden, w = d.h_width, ff = d.h_ff;
  const auto lin = [&](const std::string& n, std::int64_t out, std::int64_t in, bool bias) {
    s.push_back({n + ".weight", {out, in}, f32, Init::kNormal, 1.0 / std::sqrt(static_cast<double>(in))});
    if (bias) s.push_back({n + ".bias", {out}, f32, Init::kNormal, 0.02});
  };
  const auto ln = [&](const std::string& n, std::int64_t width) {
    s.push_back({n + ".weight", {width}, f32, Init::kUnitNorm, 0.1});
    s.push_back({n + ".bias", {width}, f32, Init::kNormal, 0.02});
  };
  const auto mha = [&](const std::string& n) {
    s.push_back({n + ".in_proj_weight", {3 * w, w}, f32, Init::kNormal, 1.0 / std::sqrt(static_cast<double>(w))});
    s.push_back({n + ".in_proj_bias", {3 * w}, f32, Init::kNormal, 0.02});
    lin(n + ".out_proj", w, w, true);
  };
  ln("hidden_norm", h);
  for (const char* p : {"memory_projection", "question_projection", "option_question_projection", "global_projection",
                        "option_context_projection", "option_lexical_projection"}) {
    lin(p, w, h, false);
  }
  s.push_back({"type_embedding.weight", {3, w}, f32, Init::kNormal, 1.0});
  for (std::int64_t i = 0; i < d.h_routing; ++i) {
    const std::string p = "evidence_layers." + std::to_string(i) + ".";
    ln(p + "query_norm", w);
    ln(p + "memory_norm", w);
    mha(p + "attention");
    ln(p + "feedforward_norm", w);
    lin(p + "feedforward.0", ff, w, true);
    lin(p + "feedforward.3", w, ff, true);
  }
  ln("option_summary_norm", w);
  for (std::int64_t i = 0; i < d.h_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    mha(p + "self_attn");
    mha(p + "multihead_attn");
    lin(p + "linear1", ff, w, true);
    lin(p + "linear2", w, ff, true);
    ln(p + "norm1", w);
    ln(p + "norm2", w);
    ln(p + "norm3", w);
  }
  ln("field_norm", w);
  ln("option_norm", w);
  lin("residual_scorer.0", w, 4 * w, true);
  lin("residual_scorer.3", 1, w, true);
  s.push_back({"prior_logit_scale", {}, f32, Init::kConst, std::log(10.0)});
  s.push_back({"joint_logit_scale", {}, f32, Init::kConst, std::log(10.0)});
  s.push_back({"residual_gate", {}, f32, Init::kConst, 0.0});
  return s;
}

}  // namespace

namespace {

/// The release's tokenizer: the stand-in vocabulary and merges, then the Qwen3.5 added tokens
/// from id `tok.vocab.size()` on.
struct TinyVocab {
  StandInTokenizer tok;
  std::int64_t first_added = 0;  ///< id of kAddedTokens[0]
  std::int64_t vocab_size = 0;   ///< embedding rows: every id, rounded up to a multiple of 64

  /// The id of an added token by its content.
  std::int64_t id_of(std::string_view content) const {
    for (std::size_t i = 0; i < std::size(kAddedTokens); ++i) {
      if (content == kAddedTokens[i].content) return first_added + static_cast<std::int64_t>(i);
    }
    throw InternalError("stand-in tokenizer lacks " + std::string(content));
  }
};

TinyVocab make_tiny_vocab() {
  TinyVocab v;
  v.tok = train_stand_in(700);
  v.first_added = static_cast<std::int64_t>(v.tok.vocab.size());
  const std::int64_t n_added = static_cast<std::int64_t>(std::size(kAddedTokens));
  v.vocab_size = (v.first_added + n_added + 63) / 64 * 64;
  return v;
}

/// tokenizer.json and tokenizer_config.json.
void write_tokenizer_files(const fs::path& dir, const TinyVocab& v) {
  const StandInTokenizer& tok = v.tok;
  const std::int64_t first_added = v.first_added;
  const std::int64_t n_added = static_cast<std::int64_t>(std::size(kAddedTokens));
  ojson added = ojson::array();
  ojson decoder = ojson::object();
  for (std::int64_t i = 0; i < n_added; ++i) {
    const AddedToken& a = kAddedTokens[i];
    if (a.in_tokenizer_json) added.push_back(added_token_json<ojson>(first_added + i, a.content, a.special));
    decoder[std::to_string(first_added + i)] = added_token_json<ojson>(first_added + i, a.content, a.special, false);
  }
  ojson vocab = ojson::object();
  for (std::size_t i = 0; i < tok.vocab.size(); ++i) vocab[tok.vocab[i]] = i;
  ojson merges = ojson::array();
  for (const auto& [a, b] : tok.merges) merges.push_back({a, b});
  const ojson tj =
      byte_level_bpe_tokenizer_json<ojson>(std::move(added), kSplitRegexQwen35, std::move(vocab), std::move(merges));
  write_text(dir / "tokenizer.json", tj.dump(2) + "\n");
  ojson tc;
  tc["add_bos_token"] = false;
  tc["add_prefix_space"] = false;
  tc["added_tokens_decoder"] = decoder;
  tc["bos_token"] = nullptr;
  tc["clean_up_tokenization_spaces"] = false;
  tc["eos_token"] = "<|im_end|>";
  tc["errors"] = "replace";
  tc["model_max_length"] = 262144;
  tc["pad_token"] = "<|endoftext|>";
  tc["split_special_tokens"] = false;
  tc["tokenizer_class"] = "Qwen2Tokenizer";
  tc["unk_token"] = nullptr;
  write_text(dir / "tokenizer_config.json", tc.dump(2) + "\n");
}

/// config.json, in the composite form transformers writes for Qwen3_5Config.
void write_model_config(const fs::path& dir, const TinyDims& d, const TinyVocab& v) {
  const std::int64_t vocab_size = v.vocab_size;
  const auto id_of = [&v](std::string_view content) { return v.id_of(content); };
  ojson layer_types = ojson::array();
  for (std::int64_t i = 0; i < d.layers; ++i)
    layer_types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  ojson text;
  text["attention_bias"] = false;
  text["attention_dropout"] = 0.0;
  text["dtype"] = "bfloat16";
  text["eos_token_id"] = id_of("<|endoftext|>");
  text["head_dim"] = d.head_dim;
  text["hidden_act"] = "silu";
  text["hidden_size"] = d.hidden;
  text["initializer_range"] = 0.02;
  text["intermediate_size"] = d.inter;
  text["layer_types"] = layer_types;
  text["linear_conv_kernel_dim"] = d.conv;
  text["linear_key_head_dim"] = d.lk_dim;
  text["linear_num_key_heads"] = d.lk_heads;
  text["linear_num_value_heads"] = d.lv_heads;
  text["linear_value_head_dim"] = d.lv_dim;
  text["max_position_embeddings"] = 262144;
  text["model_type"] = "qwen3_5_text";
  text["num_attention_heads"] = d.heads;
  text["num_hidden_layers"] = d.layers;
  text["num_key_value_heads"] = d.kv_heads;
  text["pad_token_id"] = nullptr;
  text["rms_norm_eps"] = 1e-06;
  text["rope_parameters"] = {{"mrope_interleaved", true},
                             {"mrope_section", {3, 3, 2}},
                             {"partial_rotary_factor", 0.25},
                             {"rope_theta", 10000000.0},
                             {"rope_type", "default"}};
  text["tie_word_embeddings"] = true;
  text["use_cache"] = true;
  text["vocab_size"] = vocab_size;
  ojson vision;
  vision["depth"] = d.v_depth;
  vision["hidden_act"] = "gelu_pytorch_tanh";
  vision["hidden_size"] = d.v_hidden;
  vision["in_channels"] = 3;
  vision["initializer_range"] = 0.02;
  vision["intermediate_size"] = d.v_inter;
  vision["model_type"] = "qwen3_5_vision";
  vision["num_heads"] = d.v_heads;
  vision["num_position_embeddings"] = d.v_pos;
  vision["out_hidden_size"] = d.v_out;
  vision["patch_size"] = 16;
  vision["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "axial"}};
  vision["spatial_merge_size"] = 2;
  vision["temporal_patch_size"] = 2;
  ojson cfg;
  cfg["architectures"] = {"Qwen3_5ForConditionalGeneration"};
  cfg["dtype"] = "bfloat16";
  cfg["image_token_id"] = id_of("<|image_pad|>");
  cfg["model_type"] = "qwen3_5";
  cfg["text_config"] = text;
  cfg["tie_word_embeddings"] = true;
  cfg["video_token_id"] = id_of("<|video_pad|>");
  cfg["vision_config"] = vision;
  cfg["vision_end_token_id"] = id_of("<|vision_end|>");
  cfg["vision_start_token_id"] = id_of("<|vision_start|>");
  write_text(dir / "config.json", cfg.dump(2) + "\n");
}

/// preprocessor_config.json (Qwen2VLImageProcessor's settings).
void write_preprocessor_config(const fs::path& dir) {
  ojson pre;
  pre["do_convert_rgb"] = true;
  pre["do_normalize"] = true;
  pre["do_rescale"] = true;
  pre["do_resize"] = true;
  pre["image_mean"] = {0.5, 0.5, 0.5};
  pre["image_processor_type"] = "Qwen2VLImageProcessor";
  pre["image_std"] = {0.5, 0.5, 0.5};
  pre["merge_size"] = 2;
  pre["patch_size"] = 16;
  pre["resample"] = 3;
  pre["rescale_factor"] = 1.0 / 255.0;
  pre["size"] = {{"longest_edge", 16777216}, {"shortest_edge", 65536}};
  pre["temporal_patch_size"] = 2;
  write_text(dir / "preprocessor_config.json", pre.dump(2) + "\n");
}

/// joint_head_config.json, model.safetensors and joint_head.safetensors.
void write_weights(const fs::path& dir, const TinyDims& d, std::int64_t vocab_size, std::uint64_t seed) {
  ojson head_cfg = {{"hidden_size", d.hidden}, {"width", d.h_width}, {"routing_layers", d.h_routing},
                    {"layers", d.h_layers},    {"heads", d.h_heads}, {"feedforward", d.h_ff}};
  write_text(dir / "joint_head_config.json", head_cfg.dump(2) + "\n");

  std::vector<TensorToWrite> tensors;
  for (const auto& s : backbone_specs(d, vocab_size)) tensors.push_back(generate(s, seed));
  write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  tensors.clear();
  for (const auto& s : head_specs(d)) tensors.push_back(generate(s, seed));
  write_safetensors((dir / "joint_head.safetensors").string(), tensors, {{"format", "pt"}});
}

/// random_weights.json: what generated the folder.
void write_random_weights_note(const fs::path& dir, const MakeModelOptions& o, const StandInTokenizer& tok) {
  ojson rw;
  rw["model_name"] = "clef-tiny-random";
  rw["preset"] = "tiny";
  rw["seed"] = o.seed;
  rw["generator"] = "clef make-model (C++)";
  rw["tokenizer"] = "stand-in byte-level BPE with the Qwen3.5 structure (" + std::to_string(tok.merges.size()) +
                    " merges trained on embedded text, Qwen3.5 added-token names); not the real Qwen3.5 vocabulary";
  write_text(dir / "random_weights.json", rw.dump(2) + "\n");
}

/// SHA256SUMS last, over every other file (coreutils format, sorted by name).
void write_sha256sums(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && n != "SHA256SUMS" && n.find(".tmp") == std::string::npos) names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  std::string sums;
  for (const auto& n : names) sums += sha256_file_hex((dir / n).string()) + "  " + n + "\n";
  write_text(dir / "SHA256SUMS", sums);
}

/// Writes every file of the tiny release into the existing, empty folder `dir`.
void write_release_files(const fs::path& dir, const MakeModelOptions& o) {
  const TinyDims d;
  const TinyVocab v = make_tiny_vocab();
  write_tokenizer_files(dir, v);
  write_model_config(dir, d, v);
  write_preprocessor_config(dir);
  write_weights(dir, d, v.vocab_size, o.seed);
  write_random_weights_note(dir, o, v.tok);
  write_sha256sums(dir);
}

bool looks_like_release(const fs::path& dir) {
  for (const char* f : {"config.json", "random_weights.json", "SHA256SUMS", "joint_head_config.json"}) {
    if (path_exists((dir / f).string())) return true;
  }
  return false;
}

bool is_empty_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_empty(dir, ec) && !ec;
}

std::string unique_suffix();

/// parent / ".<name>.<tag>-<unique>" (built by appending: GCC 12 warns falsely on literal + string chains).
fs::path sibling(const fs::path& parent, const fs::path& dir, const char* tag) {
  std::string n(".");
  n += dir.filename().string();
  n += tag;
  n += unique_suffix();
  return parent / n;
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  return std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

void make_model(const MakeModelOptions& o) {
  if (o.preset != "tiny") {
    throw InvalidArgument(
        "make-model: unknown preset \"" + o.preset +
        "\" (the C++ generator makes \"tiny\"; use tools/reference/make_model.py for 0.8b and flash)");
  }
  if (o.out_dir.empty()) throw InvalidArgument("make-model: --out must not be empty");
  fs::path dir = fs::path(o.out_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "out/" -> "out"
  const std::string shown = printable(dir.string());
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  const bool exists = st.type() != fs::file_type::not_found && path_exists(dir.string());
  if (exists && st.type() != fs::file_type::directory)
    throw InvalidArgument("make-model: " + shown + " is not a directory");
  if (exists && !is_empty_dir(dir)) {
    if (!o.overwrite)
      throw InvalidArgument("make-model: " + shown + " exists and is not empty (pass --force to replace it)");
    if (!looks_like_release(dir)) {
      throw InvalidArgument("make-model: " + shown + " is not a release folder; refusing to replace its contents");
    }
  }
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec) throw IoError("make-model: cannot create " + printable(parent.string()) + ": " + ec.message());

  // Write everything into a private staging folder, then publish it with one rename, so readers
  // and concurrent writers only ever see a complete folder.
  const fs::path staging = sibling(parent, dir, ".tmp-");
  if (!fs::create_directory(staging, ec) || ec) {
    throw IoError("make-model: cannot create " + printable(staging.string()) + ": " + ec.message());
  }
  try {
    write_release_files(staging, o);
    fs::rename(staging, dir, ec);  // succeeds when `dir` is absent or an empty directory
    if (ec) {
      if (!o.overwrite) {
        throw InvalidArgument("make-model: " + shown + " exists and is not empty (pass --force to replace it)");
      }
      // Replace the old folder: move it aside, move ours in, delete the old one.
      const fs::path old = sibling(parent, dir, ".old-");
      fs::rename(dir, old, ec);
      if (ec && path_exists(dir.string()))
        throw IoError("make-model: cannot move " + shown + " aside: " + ec.message());
      fs::rename(staging, dir, ec);
      if (ec) throw IoError("make-model: cannot publish " + shown + ": " + ec.message());
      fs::remove_all(old, ec);
    }
  } catch (...) {
    fs::remove_all(staging, ec);
    throw;
  }
}

std::string default_model_dir() {
  if (const char* h = std::getenv("CLEF_HOME"); h && *h) return (fs::path(h) / "default-model").string();
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "clef" / "default-model").string();
  if (const char* home = std::getenv("HOME"); home && *home) {
    return (fs::path(home) / ".cache" / "clef" / "default-model").string();
  }
  return (fs::temp_directory_path() / "clef-default-model").string();
}

std::string ensure_default_model() {
  const std::string dir = default_model_dir();
  if (!path_exists((fs::path(dir) / "SHA256SUMS").string())) {
    MakeModelOptions o;
    o.out_dir = dir;
    o.overwrite = true;  // an incomplete earlier folder is replaced; concurrent first uses each publish a complete one
    make_model(o);
  }
  return dir;
}

}  // namespace clef

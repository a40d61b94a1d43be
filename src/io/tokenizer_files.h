// SPDX-License-Identifier: MIT
// A structural summary of tokenizer.json + tokenizer_config.json, read at load time so that a
// release folder with a broken or foreign tokenizer is refused early. The tokenizer itself
// (encoding) lives elsewhere; this only checks the files and reports what they contain.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "io/hf_config.h"

namespace clef {

/// What tokenizer.json and tokenizer_config.json declare (docs/TOKENIZER.md §1.1, §1.5).
struct TokenizerSummary {
  std::string model_type;          ///< "BPE"
  std::int64_t vocab_entries = 0;  ///< model.vocab size (base vocabulary)
  std::int64_t merges = 0;
  std::string merges_form;  ///< "pairs" (["a", "b"]) or "strings" ("a b")
  std::string normalizer;   ///< e.g. "NFC" or "none"
  std::string split_regex;  ///< the pre-tokenizer's Split pattern ("" when none)
  bool ignore_merges = false;
  std::int64_t added_in_tokenizer_json = 0;   ///< tokenizer.json added_tokens
  std::int64_t added_in_config_only = 0;      ///< added_tokens_decoder ids not in tokenizer.json
  std::map<std::int64_t, std::string> added;  ///< union of both files: id -> content
  std::int64_t max_id = -1;                   ///< largest id of vocab or added tokens
};

/// Reads DIR/tokenizer.json and DIR/tokenizer_config.json. Checks: a BPE model with a vocab
/// object of unique non-negative ids, merges in either stored form, added tokens with integer
/// ids, the two files agreeing on every id they both name, every id < config.text.vocab_size,
/// and, for the composite form, that image/video/vision start/end ids name the expected
/// special tokens. Throws ModelLoadError naming the file and entry.
TokenizerSummary read_tokenizer_summary(const std::string& dir, const ModelConfig& config);

}  // namespace clef

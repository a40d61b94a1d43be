// SPDX-License-Identifier: MIT
// clef's byte-exact reimplementation of the Hugging Face `tokenizers` pipeline used by Qwen3.5
// (and Qwen2/Qwen3): added-token extraction on raw text (leftmost-longest), NFC, the Qwen split
// regex (hand-written scanner), byte-level mapping, byte-level BPE with pair-keyed merges, and the
// ByteLevel decoder. Spec: docs/TOKENIZER.md §1 (pipeline), §1.8 (steps), §1.9 (edge cases).
//
// Thread safety: a loaded Tokenizer is immutable; encode/decode may run concurrently. Each thread
// keeps its own BPE cache (a TokenizerWorkspace), or callers pass one explicitly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pretokenizer.h"

namespace clef {

/// One added token (tokenizer.json `added_tokens` ∪ tokenizer_config.json `added_tokens_decoder`).
struct AddedTokenInfo {
  std::int32_t id = 0;
  std::string content;
  bool special = false;
  bool in_tokenizer_json = true;  ///< false: only in tokenizer_config.json (docs/TOKENIZER.md §1.5)
};

/// Reusable per-thread working memory for encode: the BPE cache and scratch buffers. Reusing one
/// avoids all allocations on the hot path once its buffers have grown. Not thread-safe itself.
class TokenizerWorkspace {
 public:
  TokenizerWorkspace();
  ~TokenizerWorkspace();
  TokenizerWorkspace(const TokenizerWorkspace&) = delete;
  TokenizerWorkspace& operator=(const TokenizerWorkspace&) = delete;

  /// Drops every cached piece (keeps the buffers' capacity).
  void clear_cache();
  /// Number of pieces currently cached.
  std::size_t cached_pieces() const noexcept;

  struct State;
  State& state() noexcept { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

/// Load options.
struct TokenizerLoadOptions {
  /// Add tokenizer_config.json's added_tokens_decoder entries missing from tokenizer.json, as
  /// transformers' AutoTokenizer does (docs/TOKENIZER.md §1.5). Default true.
  bool merge_config_added_tokens = true;
  /// Maximum BPE cache entries per workspace; the cache is emptied when full. 0 disables it.
  std::size_t cache_capacity = 1u << 16;
  /// The split regex to apply. nullopt (default): the one tokenizer.json names, as HF `tokenizers`
  /// and transformers up to 5.17 apply it (for the clef-flash release: Qwen2's). kQwen35: Qwen3.5's
  /// own regex whatever the file names, as transformers 5.18+ AutoTokenizer applies it to a
  /// qwen3_5 folder (docs/TOKENIZER.md "Which split regex"). The file must still name one of the
  /// two known patterns (anything else is refused either way).
  std::optional<SplitPattern> split_override;
};

/// A loaded byte-level BPE tokenizer with the Qwen structure.
class Tokenizer {
 public:
  /// Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json.
  /// Throws ModelLoadError (file malformed, inconsistent, merge naming an unknown token, ...) or
  /// Unsupported (a normalizer, pre-tokenizer, split pattern, model option, post-processor,
  /// decoder or added-token flag this implementation does not reproduce exactly), naming the file
  /// and the JSON path. IoError when a file cannot be read.
  static Tokenizer load(const std::string& dir, const TokenizerLoadOptions& options = {});

  /// Same from file contents. `config_json` may be empty (no tokenizer_config.json). `label` names
  /// the source in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json,
                             const TokenizerLoadOptions& options = {}, const std::string& label = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Encodes UTF-8 `text` to token ids exactly as HF `Tokenizer.encode(text,
  /// add_special_tokens=False)` (Qwen adds no BOS/EOS either way). Added tokens, special or not,
  /// are recognized in the raw text. Throws InvalidArgument("invalid UTF-8 at byte offset N") on
  /// malformed input (the documented policy: reject, never repair). Uses a thread-local workspace.
  std::vector<std::int32_t> encode(std::string_view text) const;

  /// Appends the ids of `text` to `ids`, using `ws` (no allocation once buffers are warm).
  void encode(std::string_view text, std::vector<std::int32_t>& ids, TokenizerWorkspace& ws) const;

  /// encode() that stops early: appends the ids of `text` to `ids` and returns true when the text
  /// is done with ids.size() <= max_ids (then `ids` is exactly what encode() appends); returns false
  /// as soon as ids.size() would pass max_ids, with a prefix of encode()'s ids in `ids`. The text is
  /// split into pieces a few thousand at a time, and a piece longer than the remaining room times
  /// the longest vocabulary token (in bytes) is not encoded (it alone would pass the limit), so the
  /// memory used beyond the input text and its NFC form is bounded by max_ids, not by the text's
  /// size (docs/TOKENIZER.md "Counting with a limit"). Throws like encode.
  bool encode_bounded(std::string_view text, std::size_t max_ids, std::vector<std::int32_t>& ids,
                      TokenizerWorkspace& ws) const;

  /// The pre-tokenization (HF `pre_tokenize` view): added tokens and split pieces, in order, as UTF-8
  /// strings of the NORMALIZED text. For tests and `clef tokenize --pieces`. Throws like encode.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  /// Allocation-light form of pre_tokenize: appends the END byte offset of every added token and
  /// split piece to `ends`, as offsets into the concatenation of the normalized segments (equal to
  /// the input when the normalizer is null or the text is already NFC). Throws like encode.
  void pre_tokenize_ends(std::string_view text, std::vector<std::uint32_t>& ends, TokenizerWorkspace& ws) const;

  /// Decodes ids like HF `decode(ids, skip_special_tokens)`: unknown ids (including embedding
  /// padding) are dropped, tokens map back to bytes through the byte-level table, and the bytes
  /// are decoded as lossy UTF-8 (each maximal invalid subpart becomes U+FFFD).
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;

  /// Raw bytes a single id stands for ("" for unknown ids). Never lossy.
  std::string token_bytes(std::int32_t id) const;

  /// HF token string of an id (vocab key in byte-level form, e.g. "Ġhello", or the added token's
  /// content); "" for unknown ids.
  std::string token_string(std::int32_t id) const;

  /// Id of a token given its HF token string (vocab key or added-token content); -1 when unknown.
  std::int32_t token_to_id(std::string_view token_string) const;

  /// Number of base vocabulary entries (model.vocab).
  std::size_t vocab_entries() const noexcept;
  /// Number of merges after de-duplication (later duplicates win).
  std::size_t merge_count() const noexcept;
  /// Largest id known (vocab or added) + 1.
  std::int32_t id_limit() const noexcept;
  /// The added tokens (union), by ascending id.
  const std::vector<AddedTokenInfo>& added_tokens() const noexcept;
  /// The split regex variant applied (the file's unless TokenizerLoadOptions::split_override).
  SplitPattern split_pattern() const noexcept;
  /// The split regex variant tokenizer.json names.
  SplitPattern file_split_pattern() const noexcept;
  /// Whether the normalizer is NFC (false: no normalizer).
  bool normalizes_nfc() const noexcept;
  /// model.ignore_merges.
  bool ignore_merges() const noexcept;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace clef

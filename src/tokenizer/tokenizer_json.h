// SPDX-License-Identifier: MIT
// The one builder of a byte-level BPE tokenizer.json with the Qwen3.5 structure (docs/TOKENIZER.md
// §1): NFC normalizer, a Split pre-tokenizer on the given regex followed by ByteLevel, ByteLevel
// post-processor and decoder, and a BPE model. `clef make-model` writes its stand-in tokenizer
// with it and a GGUF model's tokenizer.ggml.* arrays become tokenizer.json text through it
// (io/gguf_model.h), so the two cannot drift apart.
//
// Json is nlohmann::ordered_json (members in the order HF writes them, as make-model's files) or
// nlohmann::json (members sorted by name, as the GGUF reader's in-memory text); both are
// instantiated. The members are inserted in HF's order either way.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace clef {

/// One entry of "added_tokens" (with_id) or of tokenizer_config.json's "added_tokens_decoder"
/// (without the id, which is the entry's key there): {"id", "content", "single_word": false,
/// "lstrip": false, "rstrip": false, "normalized": false, "special"}.
template <class Json>
Json added_token_json(std::int64_t id, std::string_view content, bool special, bool with_id = true);

/// The whole tokenizer.json object: "version" "1.0", "truncation" and "padding" null,
/// `added_tokens` (an array of added_token_json entries), the pipeline around `split_regex`, and
/// the "model": {"type": "BPE", no dropout, unk token, prefix, suffix, fuse_unk, byte_fallback or
/// ignore_merges, "vocab": `vocab` (token -> id object), "merges": `merges` (array of "a b"
/// strings or of [a, b] pairs, as given)}.
template <class Json>
Json byte_level_bpe_tokenizer_json(Json added_tokens, std::string_view split_regex, Json vocab, Json merges);

}  // namespace clef

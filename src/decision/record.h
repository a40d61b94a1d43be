// SPDX-License-Identifier: MIT
// encode_record (docs/PROTOCOL.md §3): a validated SystemOne request -> the exact prompt token ids
// and the question/option spans the joint head reads. Every piece is tokenized on its own (no
// special-token insertion; added tokens inside any piece are still recognised) and the id lists
// are concatenated: prefix ‖ state ‖ schema ‖ suffix.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "decision/request.h"
#include "tokenizer/tokenizer.h"

namespace clef {

/// Half-open token range [begin, end) inside a record.
struct TokenSpan {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const noexcept { return end - begin; }
};

/// One question of a record as the head sees it (docs/PROTOCOL.md §4.3).
struct HeadQuestion {
  int type_id = 0;                 ///< 0 noul, 1 choice, 2 score (rows of type_embedding)
  TokenSpan span;                  ///< tokens of render(instructions or id)
  std::vector<TokenSpan> options;  ///< tokens of render({option_id, description}), model order
};

/// The fixed prompt strings (docs/PROTOCOL.md §3.1; docs/MODEL.md §14).
inline constexpr const char* kSystemPrompt =
    "Read the complete state and schema. Decide every field jointly. Each answer must be exactly one of that "
    "field's allowed options.";
inline constexpr const char* kSchemaHead = "\n\nSCHEMA FIELDS:\n";
inline constexpr const char* kAllowedOptions = "\nALLOWED OPTIONS:\n";
inline constexpr const char* kEndField = "END FIELD\n";
inline constexpr const char* kSuffix =
    "\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nJOINT SCHEMA DECISIONS:";
/// PREFIX = "<|im_start|>system\n" + SYSTEM_PROMPT + "<|im_end|>\n<|im_start|>user\nSTATE:\n".
std::string record_prefix();

/// What to do with a record longer than the budget.
enum class OverflowPolicy : std::uint8_t {
  kRefuse,         ///< default: a RequestError (code input_too_long) giving the token counts
  kTruncateState,  ///< the reference's behaviour: keep the first state tokens that fit, report how many were dropped
};

struct RecordOptions {
  std::int64_t max_length = 16384;  ///< token budget of the whole record (the training length)
  OverflowPolicy overflow = OverflowPolicy::kRefuse;
};

/// One encoded record.
struct EncodedRecord {
  std::vector<std::int32_t> input_ids;  ///< [T]
  std::vector<HeadQuestion> questions;  ///< request order; spans absolute in input_ids
  std::int64_t prefix_len = 0;          ///< prefix tokens incl. the media block (36 + media_len)
  std::int64_t media_len = 0;           ///< image-block tokens at the end of the prefix (0 without images)
  std::int64_t state_len = 0;           ///< state tokens kept
  std::int64_t state_len_full = 0;      ///< state tokens before truncation
  std::int64_t schema_len = 0;
  std::int64_t suffix_len = 0;  ///< 18 with the Qwen3.5 tokenizer
  std::int64_t state_tokens_dropped() const noexcept { return state_len_full - state_len; }
  /// Tokens [0, state_end()) depend only on the state: the boundary for state reuse.
  std::int64_t state_end() const noexcept { return prefix_len + state_len; }
};

/// Encodes `request` (docs/PROTOCOL.md §3.2 steps 1-8, text only). Throws RequestError:
/// input_too_long (path `state`) when prefix + state + schema + suffix exceeds max_length under
/// kRefuse (the state is tokenized only until it passes the room left, Tokenizer::encode_bounded,
/// so the message gives a lower bound, and refusing a long state costs memory bounded by
/// max_length, not by the state's size), or when the fixed part alone does ("schema requires N tokens before state;
/// maximum is M", path `questions`), and empty_span (path `questions.<id>`) when an instruction or option renders to
/// zero tokens (the reference would average zero rows: NaN).
///
/// Images (§3.2 step 2, §3.6): `image_token_counts[i]` is image i's merged-token count (H·W of its
/// merged grid, vision/preprocess.h); the media piece
/// "<|vision_start|>" + N·"<|image_pad|>" + "<|vision_end|>" per image, then "\n", is tokenized as
/// one piece and appended to the prefix (so it counts toward the fixed part and is never
/// truncated: input_too_long at path `images` when it alone breaks the budget). With images, a
/// `<|vision_start|>`, `<|image_pad|>` or `<|vision_end|>` token inside the state or the schema is
/// refused (image_token_in_text at `state` / `questions`): it would be taken for an image slot.
EncodedRecord encode_record(const SystemOneRequest& request, const Tokenizer& tokenizer, const RecordOptions& options,
                            std::span<const std::int64_t> image_token_counts = {});

}  // namespace clef

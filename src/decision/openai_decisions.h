// SPDX-License-Identifier: MIT
// OpenAI's Decisions contract (`POST /v1/decisions`, docs/PROTOCOL.md §7): the translation of its
// request onto a SystemOneRequest, and of the head's probabilities back into its answer body.
//
// One translation layer, used by the server, `clef decide` and `clef mcp` alike: an OpenAI body
// becomes the very SystemOneRequest its System One counterpart would give (predicate -> noul with
// the default criteria, choice -> choice, score -> score; docs/PROTOCOL.md §7.2), so both answer
// with the same tokens and the same probabilities, bit for bit. What the contract allows but Clef
// cannot represent is refused with a RequestError naming the field (§7.5); answers never carry a
// refusal (§7.4).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "decision/answers.h"
#include "decision/request.h"

namespace clef {

/// Limits of OpenAI's contract (the `openai` SDK's request types and OpenAI's reference).
inline constexpr std::size_t kOpenAIMaxQuestions = 400;
inline constexpr std::size_t kOpenAIMaxPromptCacheKeyBytes = 64;

/// What an OpenAI-contract request carries besides its SystemOneRequest.
struct OpenAIQuestion {
  std::optional<std::string> name;  ///< the question's `name`; nullopt when unnamed (answered as null)
  /// choice: the request's typed value (a string or a boolean) of each option, in model order
  /// (the order of RequestQuestion::options); empty for other types.
  std::vector<JsonValue> values;
  /// score: each level's `label`, lowest first; empty for other types.
  std::vector<std::string> labels;
};

struct OpenAIContract {
  std::vector<OpenAIQuestion> questions;  ///< request order, parallel to SystemOneRequest::questions
  /// The request field each image of SystemOneRequest::images came from
  /// (`input.0.content.2.image_url`), so that image errors name the field that was sent.
  std::vector<JsonPath> image_params;
  /// `prompt_cache_key`: scopes the state cache (an entry is reused only by requests with the same
  /// key, or by requests without one when it was stored without one). nullopt when absent or null.
  std::optional<std::string> prompt_cache_key;
  /// `prompt_cache_options.mode` "explicit" with no `prompt_cache_breakpoint` anywhere: OpenAI then
  /// uses no prompt cache, and neither does Clef (no lookup, nothing stored).
  bool cache_disabled = false;
};

/// Whether a body is read as OpenAI's contract where both contracts are accepted (the
/// `/v1/decisions` route, `clef decide`, `clef mcp`; docs/PROTOCOL.md §7.1): a JSON object without
/// `state` that has `input` or whose `questions` is an array. Every other body (any body with
/// `state`, or one that is not a JSON object) is System One's, so a System One body keeps its own
/// answers and errors.
bool is_openai_body(const JsonValue& body) noexcept;

/// The rendering of OpenAI's `input` into Clef's state and images (docs/PROTOCOL.md §7.3):
///  * a string is the state, verbatim;
///  * an array holding one user message is that message's content text;
///  * any other array is a JSON array with one object per item ({"role", "content"} for messages,
///    {"type", "call_id", "name", "arguments"} / {"type", "call_id", "output"} /
///    {"type", "call_id", "name", "input"} for tool calls and outputs, "namespace" when given),
///    rendered like any JSON state;
///  * a content text is a string content as is, or its parts joined by "\n": `input_text` /
///    `output_text` their text, `refusal` its refusal text, `input_json` render(data);
///    `input_image` parts are taken out, in order, as the request's images (base64 data URLs
///    only; a URL is refused, never fetched).
/// Throws RequestError naming the field (paths under `input`) for an item or part the contract
/// does not allow, a tool output without an earlier call of that `call_id`, or a URL image.
/// `images` receives the data URLs and `image_params` where each came from.
JsonValue render_openai_input(const JsonValue& input, std::vector<JsonValue>& images,
                              std::vector<JsonPath>& image_params);

/// Validates an OpenAI-contract body and translates it (docs/PROTOCOL.md §7.2-§7.5). The result's
/// `openai` is set. Limits: 1..kOpenAIMaxQuestions questions; choice options and score levels
/// within `limits` (2..255 and 2..10 by default); `limits.accept_images` for image parts. Throws
/// RequestError with an OpenAI path (`questions.3.choices`) for every refusal.
SystemOneRequest translate_openai_request(const JsonValue& body, const RequestLimits& limits,
                                          const ServedModel& served);

/// Token counts of the state cache for `usage.input_tokens_details`.
struct OpenAICacheUsage {
  std::int64_t cached_tokens = 0;       ///< prefix + state tokens restored from the state cache
  std::int64_t cache_write_tokens = 0;  ///< prefix + state tokens this request stored in it
};

/// The OpenAI answer body (docs/PROTOCOL.md §7.4) as compact JSON:
/// {"model", "answers": [...], "usage": {"input_tokens", "input_tokens_details": {"cached_tokens",
/// "cache_write_tokens"}, "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
/// "total_tokens"}}. Probabilities, confidences and scores are System One's, rounded the same way
/// (answer_question()); `extra_usage` (JSON members) is appended inside "usage" when non-empty.
/// Requires request.openai (InternalError otherwise).
std::string build_openai_response_json(const SystemOneRequest& request, const std::string& model,
                                       std::span<const float> logits, std::int64_t input_tokens,
                                       const AnswerOptions& options, const OpenAICacheUsage& cache,
                                       const std::string& extra_usage = "");

/// A RequestError raised after translation (image decoding, encode_record) with its System One path
/// (`images.1`, `state`, `questions.<id>.instructions`) turned into the OpenAI field that was sent
/// (`input.0.content.2.image_url`, `input`, `questions.<index>.instructions`); other paths unchanged.
RequestError to_openai_error(const RequestError& error, const SystemOneRequest& request);

/// OpenAI's spelling of a request field for `error.param`: `questions[3].choices[0].value`.
std::string openai_param(const JsonPath& path);

}  // namespace clef

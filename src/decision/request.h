// SPDX-License-Identifier: MIT
// The SystemOne request model and its validation (docs/PROTOCOL.md §1, §5.3, §6).
//
// validate_request() (a parsed body) and parse_request() (decision/dialects.h: the body's bytes, in
// any of the routes' dialects) turn a request into typed questions with their options in model order
// (§3.4), or throws a RequestError naming a machine-readable code and the JSON path of the
// offending value. It accepts what the reference accepts except where the reference crashes or
// silently computes garbage (§5.3 items 5-6, §6 items 6-8), which become RequestErrors; see
// docs/DIFFERENCES.md for each deliberate difference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "decision/json_value.h"
#include "decision/request_error.h"

namespace clef {

/// Question type; the value is the reference's type id, the row of `type_embedding` (§1.2).
enum class QuestionType : std::uint8_t { kNoul = 0, kChoice = 1, kScore = 2 };

/// "noul", "choice" or "score".
const char* question_type_name(QuestionType type) noexcept;

/// Wire dialect the body arrived in (docs/PROTOCOL.md §2.4). The first three share the SystemOne
/// body; the OpenRouter form may also carry image parts inside a `state` array (§1.5). kOpenAI is
/// OpenAI's Decisions contract (§7); kDecisions is a place that accepts both contracts (the
/// `/v1/decisions` route, `clef decide`, `clef mcp`): the body's shape selects kOpenAI or
/// kSystemOne (is_openai_body(), §7.1), and an error found before the body is read uses OpenAI's.
enum class Dialect : std::uint8_t {
  kSystemOne,   ///< TypeSafe / Jev `POST /v1/systemone`
  kCloudflare,  ///< Workers AI `/ai/run/@cf/cloudflare/<model>` (the envelope is the server's job)
  kOpenRouter,  ///< OpenRouter `POST /api/alpha/decisions`
  kOpenAI,      ///< OpenAI's Decisions contract (decision/openai_decisions.h)
  kDecisions,   ///< OpenAI's or System One's, by the body's shape
};

struct OpenAIContract;  // decision/openai_decisions.h

/// Limits applied by validation (docs/PROTOCOL.md §1.3); every count is inclusive.
struct RequestLimits {
  std::size_t min_questions = 1;
  std::size_t max_questions = 64;
  std::size_t min_choice_options = 2;
  std::size_t max_choice_options = 255;
  std::size_t min_score_levels = 2;
  std::size_t max_score_levels = 10;
  std::size_t max_question_id_bytes = 1024;  ///< UTF-8 bytes of one question id
  /// Whether a non-empty top-level `images` array is kept for the engine (which decodes and checks
  /// it: vision/request_images.h) instead of being refused with images_unsupported.
  bool accept_images = false;
  /// With accept_images false: the message of the images_unsupported error when set (why this
  /// model refuses images), else the generic one.
  std::string images_refused_because;
  JsonParseOptions json;  ///< nesting depth, integer digits
};

/// Which `model` values a request may name (docs/PROTOCOL.md §1.1, §2.4). A request may omit
/// `model`, or name "jev-latest" (the TypeSafe SDK default), `name`, one of `aliases`, or either of
/// those as a Workers AI path "@cf/cloudflare/<name>" or an OpenRouter slug "cloudflare/<name>"
/// (any dialect).
struct ServedModel {
  std::string name;                  ///< the served model's name, echoed when the request has none
  std::vector<std::string> aliases;  ///< further accepted names (e.g. "clef-flash")
  bool accept_any = false;           ///< reference behaviour: any string is accepted and echoed
};

/// Where a model name was read from: the request body's `model` (any route), or the {model}
/// segment of a Cloudflare path (/ai/run/@cf/cloudflare/{model}, docs/COMPATIBILITY.md "Model names").
enum class ModelNameSource : unsigned char { kBody, kCloudflarePath };

/// The one rule that decides whether a model name names the served model.
///  * kBody: any name when `accept_any` (the default, like `clef decide`); else "jev-latest",
///    `name` or an alias, each also as "@cf/cloudflare/<name>" or "cloudflare/<name>".
///  * kCloudflarePath (checked whatever `accept_any` says, since the path selects the model):
///    the Workers AI names "clef" and "clef-flash", `name` or an alias, exactly.
bool serves_model(std::string_view model, const ServedModel& served, ModelNameSource source);

/// One option of a question, in model order.
struct RequestOption {
  std::string id;  ///< "true"/"false" (noul), the criteria key (choice), "0".."n-1" (score)
  /// The description as sent (any JSON value); nullopt when it was `null`, in which case the option
  /// semantics carry no "description" key (reference behaviour, §3.4).
  std::optional<JsonValue> description;
};

/// The option semantics object of §3.4: {"option_id": id} plus "description" when there is one.
/// render() of it is the option span text.
JsonValue option_semantics(const RequestOption& option);

/// One validated question.
struct RequestQuestion {
  std::string id;  ///< non-empty UTF-8, at most max_question_id_bytes
  QuestionType type = QuestionType::kNoul;
  /// The value whose render() is the question span text: `instructions` as sent, or the question
  /// id (a string) when `instructions` is missing, null or "" (§1.2).
  JsonValue instructions;
  bool instructions_from_id = false;   ///< true when the id fallback applied
  std::vector<RequestOption> options;  ///< model order (§3.4): noul true,false; choice sorted; score 0..n-1
  /// request_order[k] = index into `options` of the k-th option in request order (choice: criteria
  /// key order; noul and score: identity). Answers list choice probabilities in this order (§2.1).
  std::vector<std::size_t> request_order;
  JsonValue criteria;  ///< criteria exactly as sent (null when absent); score legend
};

/// A validated SystemOne request.
struct SystemOneRequest {
  std::string model;                       ///< `model` as sent, or ServedModel::name when absent
  bool model_given = false;                ///< the request named a model
  JsonValue state;                         ///< any JSON value (null included)
  std::vector<RequestQuestion> questions;  ///< request order
  /// The top-level `images` value as sent when it is non-empty and RequestLimits::accept_images
  /// holds (not yet decoded or checked); null otherwise. OpenAI's contract: its image parts' URLs.
  JsonValue images;
  /// Set when the body was OpenAI's contract (names, typed choice values, level labels, cache
  /// options); null for System One bodies.
  std::shared_ptr<const OpenAIContract> openai;
};

/// One question from its SystemOne form: what validate_request() does for `questions.<id>`
/// (limits, criteria, model order, the instructions fallback). Throws RequestError with the
/// SystemOne path. The OpenAI translation builds its questions through it, so both contracts give
/// the same question for the same content.
RequestQuestion build_systemone_question(const std::string& id, const JsonValue& question, const RequestLimits& limits);

/// Validates an already parsed body (docs/PROTOCOL.md §1, §5.3). Rules, in order:
///  * body an object (invalid_type at the root);
///  * `model` absent or a string (invalid_type `model`) naming a served model (unknown_model `model`);
///  * `state` present, any value (missing_field `state`); OpenRouter: image parts
///    {"type": "image_url", "image_url": {"url": ...}} inside a state array become `images` (in
///    order; the other items stay the state array) when limits.accept_images, else
///    images_unsupported `state.<i>`; a part without a string url is invalid_type
///    `state.<i>.image_url.url`;
///  * `questions` present (missing_field), an object (invalid_type), non-empty (empty_questions),
///    within [min_questions, max_questions] (too_few_questions / too_many_questions);
///  * per question, in request order: id non-empty (empty_question_id `questions[""]`) and at most
///    max_question_id_bytes (question_id_too_long); the question an object (invalid_type
///    `questions.<id>`); `type` present (missing_field `questions.<id>.type`) and one of noul,
///    choice, score (invalid_question_type); criteria (`questions.<id>.criteria`): noul absent,
///    null or an object (invalid_type); choice a non-empty object (empty_criteria when missing,
///    null, {} or []; invalid_type otherwise) with [min,max] options (too_few_options /
///    too_many_options); score a non-empty array (empty_criteria / invalid_type) with [min,max]
///    levels (too_few_levels / too_many_levels);
///  * `images` absent, null or [] unless limits.accept_images (then kept in
///    SystemOneRequest::images for the engine; images_unsupported `images` otherwise, and always
///    for OpenRouter, whose images travel inside `state`), `videos` absent, null or []
///    (videos_unsupported `videos`).
/// Unknown fields anywhere are ignored. Messages name the refused value (JsonValue::describe()); a
/// missing or empty required field (state, questions, type, choice/score criteria) names a
/// look-alike unknown key of the same object ("criterias": did you mean "criteria"?).
SystemOneRequest validate_request(const JsonValue& body, const RequestLimits& limits, Dialect dialect,
                                  const ServedModel& served);

}  // namespace clef

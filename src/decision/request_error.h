// SPDX-License-Identifier: MIT
// Typed rejection of a SystemOne request: a machine-readable code, the JSON path of the offending
// value and (for syntax errors) the byte offset in the body (docs/PROTOCOL.md §2.5, §5.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/error.h"

namespace clef {

/// Location of a value inside a JSON document: a list of object keys and array indices from the
/// root. Printed as `questions.reason_code.criteria`, `state.items.3`, or with a quoted key where
/// the key is not a plain identifier: `questions["q.2"].criteria`, `questions[""]`.
class JsonPath {
 public:
  using Segment = std::variant<std::string, std::size_t>;  ///< object key (UTF-8) or array index

  JsonPath() = default;
  /// A copy with one more object key appended.
  JsonPath key(std::string_view k) const;
  /// A copy with one more array index appended.
  JsonPath index(std::size_t i) const;

  const std::vector<Segment>& segments() const noexcept { return segments_; }
  bool empty() const noexcept { return segments_.empty(); }
  /// Human/machine form described above; "" for the root (the whole body).
  std::string str() const;

 private:
  std::vector<Segment> segments_;
};

/// Machine-readable reason of a RequestError. The string form (request_error_code_name) is the
/// stable wire name; docs/DIFFERENCES.md lists each code with its paths.
enum class RequestErrorCode : std::uint8_t {
  kInvalidJson,          ///< "invalid_json": not JSON (syntax, bad UTF-8, raw control character)
  kLoneSurrogate,        ///< "lone_surrogate": a UTF-16 surrogate that is not part of a pair
  kNonFiniteNumber,      ///< "non_finite_number": NaN/Infinity literal or a float overflowing double
  kNumberOutOfRange,     ///< "number_out_of_range": integer longer than Python's 4300-digit limit
  kNestingTooDeep,       ///< "nesting_too_deep": arrays/objects nested deeper than the limit
  kInvalidType,          ///< "invalid_type": a field holds the wrong JSON type
  kMissingField,         ///< "missing_field": a required field is absent
  kUnknownModel,         ///< "unknown_model": `model` names a model this server does not serve
  kEmptyQuestions,       ///< "empty_questions": `questions` is `{}`
  kTooFewQuestions,      ///< "too_few_questions": fewer than RequestLimits::min_questions
  kTooManyQuestions,     ///< "too_many_questions": more than RequestLimits::max_questions
  kEmptyQuestionId,      ///< "empty_question_id": question id `""`
  kQuestionIdTooLong,    ///< "question_id_too_long": id longer than max_question_id_bytes
  kInvalidQuestionType,  ///< "invalid_question_type": `type` not one of noul, choice, score
  kEmptyCriteria,        ///< "empty_criteria": choice/score criteria missing, null, {} or []
  kTooFewOptions,        ///< "too_few_options": choice with fewer options than the limit
  kTooManyOptions,       ///< "too_many_options": choice with more options than the limit
  kTooFewLevels,         ///< "too_few_levels": score with fewer levels than the limit
  kTooManyLevels,        ///< "too_many_levels": score with more levels than the limit
  kImagesUnsupported,    ///< "images_unsupported": images sent to this text-only build
  kVideosUnsupported,    ///< "videos_unsupported": videos are not supported
  // Raised while decoding `images` (vision/image.h, vision/preprocess.h), path `images.<i>`:
  kTooManyImages,         ///< "too_many_images": more than ImageLimits::max_images (path of the first extra one)
  kImageUrlUnsupported,   ///< "image_url_unsupported": not a base64 data URL (http(s), file:, bare base64)
  kImageTypeUnsupported,  ///< "image_type_unsupported": data URL type other than image/png|jpeg|jpg|webp
  kInvalidBase64,         ///< "invalid_base64": the payload is not strict base64 (message names the offset)
  kImageInvalid,          ///< "image_invalid": not PNG/JPEG/WebP, corrupt, truncated or 0-sized
  kImageTooLarge,         ///< "image_too_large": file bytes or decoded pixels over ImageLimits
  kImageAspectRatio,      ///< "image_aspect_ratio": longer side more than 200x the shorter (processor limit)
  kImageOverPixelLimit,  ///< "image_over_pixel_limit": more pixels after the processor's resize than --max-image-pixels
  kImageTooManyScans,  ///< "image_too_many_scans": a progressive JPEG with more scans than ImageLimits::max_jpeg_scans
  // Raised by encode_record (decision/record.h), after validation:
  kInputTooLong,      ///< "input_too_long": the record exceeds the token budget (never truncated silently)
  kImageTokenInText,  ///< "image_token_in_text": a vision token inside the text of a request with images
  kEmptySpan,         ///< "empty_span": an instruction or option tokenizes to nothing (would be NaN)
  // OpenAI's Decisions contract (decision/openai_decisions.h, docs/PROTOCOL.md §7.5):
  kInvalidValue,       ///< "invalid_value": a value the contract does not allow (unknown item or part type, role, "")
  kDuplicateChoice,    ///< "duplicate_choice": two choices with the same typed value
  kIndistinctChoices,  ///< "indistinct_choices": a boolean and a string of the same text (one Clef option id)
  kUnmatchedCallId,    ///< "unmatched_call_id": a tool output without an earlier call of its call_id
  kUnsupportedPart,    ///< "unsupported_part": a part Clef cannot place (an image inside instructions)
};

/// Stable wire name of a code, e.g. "empty_criteria".
const char* request_error_code_name(RequestErrorCode code) noexcept;

/// A request clef.cpp refuses (an HTTP 4xx, never a 5xx). what() is one line:
/// "<path>: <message>" (or "<message>" for the root), plus " (at byte N)" for syntax errors.
class RequestError : public InvalidArgument {
 public:
  /// `message` names the problem in words (without the path); `offset` is the 0-based byte offset
  /// in the body for errors found while parsing.
  RequestError(RequestErrorCode code, JsonPath path, const std::string& message,
               std::optional<std::size_t> offset = std::nullopt);

  RequestErrorCode code() const noexcept { return code_; }
  const char* code_name() const noexcept { return request_error_code_name(code_); }
  const JsonPath& path() const noexcept { return path_; }
  const std::string& message() const noexcept { return message_; }
  std::optional<std::size_t> offset() const noexcept { return offset_; }

 private:
  RequestErrorCode code_;
  JsonPath path_;
  std::string message_;
  std::optional<std::size_t> offset_;
};

}  // namespace clef

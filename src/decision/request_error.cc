// SPDX-License-Identifier: MIT
#include "decision/request_error.h"

#include "core/json_text.h"

namespace clef {

JsonPath JsonPath::key(std::string_view k) const {
  JsonPath p = *this;
  p.segments_.emplace_back(std::string(k));
  return p;
}

JsonPath JsonPath::index(std::size_t i) const {
  JsonPath p = *this;
  p.segments_.emplace_back(i);
  return p;
}

namespace {

bool plain_key(std::string_view k) {
  if (k.empty()) return false;
  for (const char c : k) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

std::string JsonPath::str() const {
  std::string out;
  for (const Segment& s : segments_) {
    if (const auto* k = std::get_if<std::string>(&s)) {
      if (plain_key(*k)) {
        if (!out.empty()) out.push_back('.');
        out += *k;
      } else {
        out.push_back('[');
        append_json_string(out, *k);
        out.push_back(']');
      }
    } else {
      if (!out.empty()) out.push_back('.');
      out += std::to_string(std::get<std::size_t>(s));
    }
  }
  return out;
}

const char* request_error_code_name(RequestErrorCode code) noexcept {
  switch (code) {
    case RequestErrorCode::kInvalidJson: return "invalid_json";
    case RequestErrorCode::kLoneSurrogate: return "lone_surrogate";
    case RequestErrorCode::kNonFiniteNumber: return "non_finite_number";
    case RequestErrorCode::kNumberOutOfRange: return "number_out_of_range";
    case RequestErrorCode::kNestingTooDeep: return "nesting_too_deep";
    case RequestErrorCode::kInvalidType: return "invalid_type";
    case RequestErrorCode::kMissingField: return "missing_field";
    case RequestErrorCode::kUnknownModel: return "unknown_model";
    case RequestErrorCode::kEmptyQuestions: return "empty_questions";
    case RequestErrorCode::kTooFewQuestions: return "too_few_questions";
    case RequestErrorCode::kTooManyQuestions: return "too_many_questions";
    case RequestErrorCode::kEmptyQuestionId: return "empty_question_id";
    case RequestErrorCode::kQuestionIdTooLong: return "question_id_too_long";
    case RequestErrorCode::kInvalidQuestionType: return "invalid_question_type";
    case RequestErrorCode::kEmptyCriteria: return "empty_criteria";
    case RequestErrorCode::kTooFewOptions: return "too_few_options";
    case RequestErrorCode::kTooManyOptions: return "too_many_options";
    case RequestErrorCode::kTooFewLevels: return "too_few_levels";
    case RequestErrorCode::kTooManyLevels: return "too_many_levels";
    case RequestErrorCode::kImagesUnsupported: return "images_unsupported";
    case RequestErrorCode::kVideosUnsupported: return "videos_unsupported";
    case RequestErrorCode::kTooManyImages: return "too_many_images";
    case RequestErrorCode::kImageUrlUnsupported: return "image_url_unsupported";
    case RequestErrorCode::kImageTypeUnsupported: return "image_type_unsupported";
    case RequestErrorCode::kInvalidBase64: return "invalid_base64";
    case RequestErrorCode::kImageInvalid: return "image_invalid";
    case RequestErrorCode::kImageTooLarge: return "image_too_large";
    case RequestErrorCode::kImageAspectRatio: return "image_aspect_ratio";
    case RequestErrorCode::kImageOverPixelLimit: return "image_over_pixel_limit";
    case RequestErrorCode::kImageTooManyScans: return "image_too_many_scans";
    case RequestErrorCode::kImageTokenInText: return "image_token_in_text";
    case RequestErrorCode::kInputTooLong: return "input_too_long";
    case RequestErrorCode::kEmptySpan: return "empty_span";
    case RequestErrorCode::kInvalidValue: return "invalid_value";
    case RequestErrorCode::kDuplicateChoice: return "duplicate_choice";
    case RequestErrorCode::kIndistinctChoices: return "indistinct_choices";
    case RequestErrorCode::kUnmatchedCallId: return "unmatched_call_id";
    case RequestErrorCode::kUnsupportedPart: return "unsupported_part";
  }
  return "unknown";
}

namespace {

std::string what_text(const JsonPath& path, const std::string& message, std::optional<std::size_t> offset) {
  std::string s = path.empty() ? message : path.str() + ": " + message;
  if (offset) s += " (at byte " + std::to_string(*offset) + ")";
  return s;
}

}  // namespace

RequestError::RequestError(RequestErrorCode code, JsonPath path, const std::string& message,
                           std::optional<std::size_t> offset)
    : InvalidArgument(what_text(path, message, offset)),
      code_(code),
      path_(std::move(path)),
      message_(message),
      offset_(offset) {}

}  // namespace clef

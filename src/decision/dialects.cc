// SPDX-License-Identifier: MIT
#include "decision/dialects.h"

#include "core/json_text.h"
#include "decision/openai_decisions.h"

namespace clef {
namespace {

bool is_json_syntax(RequestErrorCode c) {
  return c == RequestErrorCode::kInvalidJson || c == RequestErrorCode::kLoneSurrogate ||
         c == RequestErrorCode::kNonFiniteNumber || c == RequestErrorCode::kNumberOutOfRange ||
         c == RequestErrorCode::kNestingTooDeep;
}

CloudflareCode cloudflare_code(RequestErrorCode c) {
  if (is_json_syntax(c)) return CloudflareCode::kUnreadable;
  switch (c) {
    case RequestErrorCode::kEmptyQuestions:
    case RequestErrorCode::kTooFewQuestions:
    case RequestErrorCode::kInvalidQuestionType: return CloudflareCode::kBadInput;
    case RequestErrorCode::kUnknownModel: return CloudflareCode::kNoRoute;
    case RequestErrorCode::kInputTooLong: return CloudflareCode::kTooLarge;
    default: return CloudflareCode::kInvalidRequest;
  }
}

/// The FastAPI `loc` list: "body" then the path's keys and indices.
std::string loc_list(const JsonPath& path, const RequestError& e) {
  std::string out = "[\"body\"";
  for (const auto& seg : path.segments()) {
    out += ',';
    if (const auto* key = std::get_if<std::string>(&seg)) {
      out += json_string(*key);
    } else {
      out += std::to_string(std::get<std::size_t>(seg));
    }
  }
  if (path.empty() && e.offset()) out += "," + std::to_string(*e.offset());  // FastAPI: ["body", pos]
  return out + "]";
}

/// OpenAI's error body: {"error": {"message", "type", "param", "code"}} (null param / code when absent).
std::string openai_error(std::string_view message, std::string_view type, const std::string* param, const char* code) {
  return "{\"error\":{\"message\":" + json_string(message) + ",\"type\":" + json_string(type) +
         ",\"param\":" + (param ? json_string(*param) : std::string("null")) +
         ",\"code\":" + (code ? json_string(code) : std::string("null")) + "}}";
}

}  // namespace

std::string error_envelope(Dialect dialect, int status, std::string_view type, CloudflareCode cf_code,
                           std::string_view message, const std::string* openrouter_path) {
  switch (dialect) {
    case Dialect::kCloudflare:
      return "{\"result\":null,\"success\":false,\"errors\":[{\"code\":" + std::to_string(static_cast<int>(cf_code)) +
             ",\"message\":" + json_string(message) + "}],\"messages\":[]}";
    case Dialect::kOpenRouter:
      return "{\"error\":{\"code\":" + std::to_string(status) + ",\"message\":" + json_string(message) +
             ",\"metadata\":{\"type\":" + json_string(type) +
             (openrouter_path ? ",\"path\":" + json_string(*openrouter_path) : std::string()) + "}}}";
    case Dialect::kOpenAI:
    case Dialect::kDecisions: return openai_error(message, type, nullptr, nullptr);
    case Dialect::kSystemOne: break;
  }
  return "{\"detail\":{\"error_type\":" + json_string(type) + ",\"message\":" + json_string(message) + "}}";
}

int wire_error_status(RequestErrorCode code, Dialect dialect) noexcept {
  switch (dialect) {
    case Dialect::kSystemOne: return code == RequestErrorCode::kUnknownModel ? 400 : 422;
    case Dialect::kCloudflare: {
      const CloudflareCode cf = cloudflare_code(code);
      return cf == CloudflareCode::kInvalidRequest ? 422 : cf == CloudflareCode::kTooLarge ? 413 : 400;
    }
    case Dialect::kOpenRouter: return is_json_syntax(code) ? 400 : code == RequestErrorCode::kInputTooLong ? 413 : 422;
    case Dialect::kOpenAI:
    case Dialect::kDecisions: return code == RequestErrorCode::kUnknownModel ? 404 : 400;
  }
  return 422;
}

WireReply wire_success(const std::string& response_body, Dialect dialect) {
  if (dialect == Dialect::kCloudflare) {
    return {200, "{\"result\":" + response_body + ",\"success\":true,\"errors\":[],\"messages\":[]}"};
  }
  return {200, response_body};
}

WireReply wire_error(const RequestError& e, Dialect dialect) {
  const int status = wire_error_status(e.code(), dialect);
  switch (dialect) {
    case Dialect::kSystemOne:
      if (e.code() == RequestErrorCode::kUnknownModel) {
        return {status, error_envelope(dialect, status, "api_usage_error", CloudflareCode::kNoRoute, e.what())};
      }
      return {status, "{\"detail\":[{\"loc\":" + loc_list(e.path(), e) + ",\"msg\":" + json_string(e.what()) +
                          ",\"type\":" + json_string(e.code_name()) + "}]}"};
    case Dialect::kCloudflare:
      return {status, error_envelope(dialect, status, e.code_name(), cloudflare_code(e.code()), e.what())};
    case Dialect::kOpenRouter: {
      const std::string path = e.path().str();
      return {status, error_envelope(dialect, status, e.code_name(), cloudflare_code(e.code()), e.what(), &path)};
    }
    case Dialect::kOpenAI:
    case Dialect::kDecisions: {
      const std::string param = openai_param(e.path());
      return {status, openai_error(e.what(), "invalid_request_error", param.empty() ? nullptr : &param, e.code_name())};
    }
  }
  return {422, "{}"};
}

SystemOneRequest parse_request(std::string_view body, const RequestLimits& limits, Dialect dialect,
                               const ServedModel& served, Dialect* contract, std::vector<JsonMemberText>* top_members) {
  // A body that is not JSON has no shape: where both contracts are accepted it is System One's.
  if (contract != nullptr) *contract = dialect == Dialect::kDecisions ? Dialect::kSystemOne : dialect;
  const JsonValue json = parse_json(body, limits.json, top_members);
  if (dialect == Dialect::kDecisions) dialect = is_openai_body(json) ? Dialect::kOpenAI : Dialect::kSystemOne;
  if (contract != nullptr) *contract = dialect;
  if (dialect == Dialect::kOpenAI) return translate_openai_request(json, limits, served);
  return validate_request(json, limits, dialect, served);
}

}  // namespace clef

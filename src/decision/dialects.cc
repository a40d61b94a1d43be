#include "decision/dialects.h"

#include "decision/render.h"

namespace clef {
namespace {

bool is_json_syntax(RequestErrorCode c) {
  return c == RequestErrorCode::kInvalidJson || c == RequestErrorCode::kLoneSurrogate ||
         c == RequestErrorCode::kNonFiniteNumber || c == RequestErrorCode::kNumberOutOfRange ||
         c == RequestErrorCode::kNestingTooDeep;
}

int cloudflare_code(RequestErrorCode c) {
  if (is_json_syntax(c)) return 6003;
  switch (c) {
    case RequestErrorCode::kEmptyQuestions:
    case RequestErrorCode::kTooFewQuestions:
    case RequestErrorCode::kInvalidQuestionType:
      return 5006;
    case RequestErrorCode::kUnknownModel:
      return 7000;
    case RequestErrorCode::kInputTooLong:
      return 5021;
    default:
      return 5012;
  }
}

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
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

}  // namespace

int wire_error_status(RequestErrorCode code, Dialect dialect) noexcept {
  switch (dialect) {
    case Dialect::kSystemOne:
      return code == RequestErrorCode::kUnknownModel ? 400 : 422;
    case Dialect::kCloudflare: {
      const int cf = cloudflare_code(code);
      return cf == 5012 ? 422 : cf == 5021 ? 413 : 400;
    }
    case Dialect::kOpenRouter:
      return is_json_syntax(code) ? 400 : code == RequestErrorCode::kInputTooLong ? 413 : 422;
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
  const std::string msg = json_string(e.what());
  const std::string type = json_string(e.code_name());
  switch (dialect) {
    case Dialect::kSystemOne:
      if (e.code() == RequestErrorCode::kUnknownModel) {
        return {status, "{\"detail\":{\"error_type\":\"api_usage_error\",\"message\":" + msg + "}}"};
      }
      return {status, "{\"detail\":[{\"loc\":" + loc_list(e.path(), e) + ",\"msg\":" + msg + ",\"type\":" + type + "}]}"};
    case Dialect::kCloudflare:
      return {status, "{\"result\":null,\"success\":false,\"errors\":[{\"code\":" +
                          std::to_string(cloudflare_code(e.code())) + ",\"message\":" + msg + "}],\"messages\":[]}"};
    case Dialect::kOpenRouter:
      return {status, "{\"error\":{\"code\":" + std::to_string(status) + ",\"message\":" + msg +
                          ",\"metadata\":{\"type\":" + type + ",\"path\":" + json_string(e.path().str()) + "}}}"};
  }
  return {422, "{}"};
}

}  // namespace clef

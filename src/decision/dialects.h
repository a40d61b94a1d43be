// SPDX-License-Identifier: MIT
// The wire dialects of a decision (docs/PROTOCOL.md §2.4, §2.5, §7): how a body of any dialect is
// read (parse_request: parse, then validate or translate OpenAI's contract), how a SystemOne
// response body is wrapped, and how a refused request is reported (HTTP status + body in the
// dialect's shape). The HTTP server picks the dialect from the route and sends what this returns;
// nothing here knows about sockets or tensors.
#pragma once

#include <string>

#include "decision/request.h"
#include "decision/request_error.h"

namespace clef {

/// Workers AI error codes: the `code` of a Cloudflare envelope's `errors[]` (docs/PROTOCOL.md
/// §2.5).
enum class CloudflareCode : int {
  kUnassigned = 0,         ///< an HTTP-layer error Workers AI has no code for (framing, Host, timeouts)
  kOverloaded = 3040,      ///< capacity: queue full, queue deadline, body budget, connections
  kBadInput = 5006,        ///< no questions, too few questions, unknown question type
  kInvalidRequest = 5012,  ///< every other validation error; also an engine fault (500)
  kTooLarge = 5021,        ///< input too long; body over --max-body
  kUnreadable = 6003,      ///< the body is not JSON, cannot be read or decoded, or has no length
  kNoRoute = 7000,         ///< unknown model, unknown path, wrong method
  kUnauthorized = 10000,   ///< missing or wrong API key
};

/// The one builder of every error body of every dialect (the HTTP layer's refusals and the
/// validation errors alike), so each envelope has one shape:
///  * SystemOne: {"detail": {"error_type": type, "message": message}};
///  * Cloudflare: {"result": null, "success": false, "errors": [{"code": cf_code, "message"}],
///    "messages": []};
///  * OpenRouter: {"error": {"code": status, "message", "metadata": {"type": type}}}, with
///    "path": `openrouter_path` inside "metadata" when it is non-null;
///  * OpenAI (kOpenAI, kDecisions): {"error": {"message", "type": type, "param": null, "code": null}}.
/// `message` and `type` are JSON-escaped here. (The SystemOne list shape of a validation error,
/// {"detail": [{"loc", "msg", "type"}]}, is wire_error's own.)
std::string error_envelope(Dialect dialect, int status, std::string_view type, CloudflareCode cf_code,
                           std::string_view message, const std::string* openrouter_path = nullptr);

/// An HTTP status and a JSON body.
struct WireReply {
  int status = 200;
  std::string body;
};

/// A success reply: SystemOne, OpenRouter and OpenAI send the body as is; Cloudflare wraps it in
/// {"result": body, "success": true, "errors": [], "messages": []}.
WireReply wire_success(const std::string& response_body, Dialect dialect);

/// A refused request in the dialect's error shape (never a 5xx):
///  * SystemOne (TypeSafe/Jev, FastAPI shape): 422 {"detail": [{"loc": ["body", ...path], "msg",
///    "type": code}]}; unknown_model is 400 {"detail": {"error_type": "api_usage_error", "message"}}.
///  * Cloudflare: {"result": null, "success": false, "errors": [{"code", "message"}], "messages": []}
///    with 400/6003 (not JSON), 400/5006 (no questions, unknown question type), 400/7000 (unknown
///    model), 413/5021 (input too long), 422/5012 (every other validation error).
///  * OpenRouter: {"error": {"code": status, "message", "metadata": {"type": code, "path"}}} with 400
///    for bodies that are not JSON, 413 for input too long, 422 otherwise.
///  * OpenAI (kOpenAI, kDecisions): {"error": {"message", "type": "invalid_request_error", "param":
///    openai_param(path) or null for the whole body, "code": code}} with 404 for unknown_model and 400
///    for everything else (docs/PROTOCOL.md §7.5).
WireReply wire_error(const RequestError& error, Dialect dialect);

/// HTTP status of a refused request in a dialect (what wire_error() uses).
int wire_error_status(RequestErrorCode code, Dialect dialect) noexcept;

/// Parses and validates a request body (UTF-8 JSON text).
///
/// Args: `body` the HTTP body; `limits` the counts of §1.3; `dialect` the route's wire form
/// (kOpenAI: translate_openai_request(); kDecisions: the body's shape chooses, §7.1); `served`
/// the model names this server answers to; `contract`, when given, receives the dialect the body
/// is read in (kDecisions resolved to kOpenAI or kSystemOne; a body that is not JSON is System
/// One's), set before any RequestError is thrown; `top_members`, when given, the body's top-level
/// members as sent (parse_json(), views into `body`).
/// Returns the typed request. Throws RequestError (code + JSON path) for every rejection:
///   parse_json's codes (invalid_json, lone_surrogate, non_finite_number, number_out_of_range,
///   nesting_too_deep), then validate_request's.
SystemOneRequest parse_request(std::string_view body, const RequestLimits& limits, Dialect dialect,
                               const ServedModel& served, Dialect* contract = nullptr,
                               std::vector<JsonMemberText>* top_members = nullptr);

}  // namespace clef

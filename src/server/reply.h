// SPDX-License-Identifier: MIT
// One answer of `clef serve` before it is written, the named HTTP-layer errors and the one
// serializer of status lines and headers. Pure string building (no socket, no HTTP library types).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "decision/dialects.h"

namespace clef::server {

/// The Content-Type of every JSON answer.
inline constexpr const char* kJsonType = "application/json";
/// Seconds a client is told to wait after a 503 (queue full, queue deadline, body budget,
/// too many connections): the `Retry-After` of docs/COMPATIBILITY.md "Overload".
inline constexpr int kRetryAfterSeconds = 1;

/// One answer.
struct Reply {
  int status = 200;
  std::string body;
  const char* content_type = kJsonType;
  std::string headers;  ///< extra header lines, each ending in "\r\n"
};

/// An error the HTTP layer answers itself: status, `error_type` and Workers AI code (the shapes
/// are decision/dialects.h error_envelope()).
struct HttpError {
  int status;
  const char* type;
  CloudflareCode cf_code;
};

/// The HTTP layer's errors (docs/COMPATIBILITY.md "Other errors").
namespace http_error {
inline constexpr HttpError kMalformed{400, "invalid_request_error", CloudflareCode::kUnassigned};
inline constexpr HttpError kUnreadableBody{400, "invalid_request_error", CloudflareCode::kUnreadable};
inline constexpr HttpError kUnknownModel{400, "unknown_model", CloudflareCode::kNoRoute};
inline constexpr HttpError kUnauthorized{401, "authentication_error", CloudflareCode::kUnauthorized};
inline constexpr HttpError kNotFound{404, "not_found_error", CloudflareCode::kNoRoute};
inline constexpr HttpError kMethodNotAllowed{405, "method_not_allowed", CloudflareCode::kNoRoute};
inline constexpr HttpError kTimeout{408, "request_timeout", CloudflareCode::kUnassigned};
inline constexpr HttpError kLengthRequired{411, "length_required", CloudflareCode::kUnreadable};
inline constexpr HttpError kTooLarge{413, "request_too_large", CloudflareCode::kTooLarge};
inline constexpr HttpError kUnsupportedMedia{415, "unsupported_media_type", CloudflareCode::kUnreadable};
inline constexpr HttpError kMisdirected{421, "misdirected_request", CloudflareCode::kUnassigned};
inline constexpr HttpError kHeadersTooLarge{431, "request_header_fields_too_large", CloudflareCode::kUnassigned};
inline constexpr HttpError kEngineFault{500, "api_error", CloudflareCode::kInvalidRequest};
inline constexpr HttpError kOverloaded{503, "overloaded_error", CloudflareCode::kOverloaded};
inline constexpr HttpError kVersion{505, "invalid_request_error", CloudflareCode::kUnassigned};
}  // namespace http_error

/// The error answer in `dialect`'s envelope. A 401 carries `WWW-Authenticate: Bearer` (RFC 9110
/// §11.6.1), a 503 `Retry-After: kRetryAfterSeconds`.
Reply error_reply(const HttpError& error, Dialect dialect, std::string_view message);

/// The "Retry-After: N\r\n" header line.
const std::string& retry_after_header();

/// The reason phrase of a status ("Unknown" for one the server never sends).
const char* reason_phrase(int status) noexcept;

/// Status line, Content-Type, Content-Length, the extra headers, `Connection: close` when
/// `close` (or `Connection: keep-alive` for an HTTP/1.0 client kept open), a blank line and the
/// body (none for HEAD). Always "HTTP/1.1" (RFC 9110 §6.2).
std::string serialize(const Reply& reply, bool close, bool http11, bool head);

/// "0.5", "10", "30" (seconds in messages).
std::string seconds_text(double seconds);

}  // namespace clef::server

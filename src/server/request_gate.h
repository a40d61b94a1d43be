// SPDX-License-Identifier: MIT
// The request gate of `clef serve`: the header rules that decide, from the request line and the
// header fields alone, whether a request is refused (and how) or which route reads it and how
// its body is read. Pure (no socket, no HTTP library types), so every rule is unit-tested; the
// connection (server/connection.h) only carries out the verdict. The rules are those of
// docs/COMPATIBILITY.md "limits and guards", checked in this order: HTTP version, field count,
// framing, Host (or the absolute-form authority), Authorization fields, the API key, the route,
// the method, then a decision's length, Content-Encoding and Content-Type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/body_decoder.h"
#include "server/http_rules.h"
#include "server/reply.h"
#include "server/routes.h"

namespace clef::server {

/// Header fields per request (more: 431).
inline constexpr std::size_t kMaxHeaderFields = 100;
/// Largest body of a GET/HEAD (or other refused request) that is read and dropped to keep the
/// connection; a larger one ends the connection after the answer.
inline constexpr std::uint64_t kDiscardLimit = 64 * 1024;

/// What the gate reads of a request whose header block was parsed.
struct RequestHead {
  std::string_view method;
  unsigned version = 11;  ///< 10 for HTTP/1.0, 11 for HTTP/1.1 (others are refused)
  std::string_view target;
  /// Every field as received (name as sent, value without surrounding blanks), in order.
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  bool chunked = false;             ///< the parser found Transfer-Encoding ending in chunked
  bool has_content_length = false;  ///< the parser found a Content-Length
};

/// What the gate needs of the server.
struct GateConfig {
  const HostPolicy* hosts = nullptr;
  std::string_view local_address;  ///< the address the connection arrived on
  std::string_view api_key;        ///< "" when the server is open
  std::size_t max_body_bytes = 0;  ///< --max-body
};

/// What the connection does next.
enum class GateAction : unsigned char {
  kRefuse,            ///< answer `refusal` (then close when `close`), reading no body
  kDropBody,          ///< read a small body (or none) and drop it, then answer the route
  kAnswerThenClose,   ///< answer the route without reading the (large) body, then close
  kReadDecisionBody,  ///< read and decode the body (`encoding`) for a decision
};

/// The gate's verdict.
struct GateVerdict {
  GateAction action = GateAction::kRefuse;
  std::string method_label = "-";  ///< the method for logs ("-" unless GET/HEAD/POST/PUT/PATCH/DELETE/OPTIONS)
  bool head = false;               ///< a HEAD request (no body in the answer)
  RouteMatch route;                ///< the route (kNone before the route is known)
  bool has_body = false;           ///< a body follows (chunked or Content-Length > 0)
  // kRefuse:
  const HttpError* error = nullptr;
  std::string message;
  bool close = true;
  Dialect dialect = Dialect::kSystemOne;
  // kReadDecisionBody:
  BodyEncoding encoding = BodyEncoding::kIdentity;
};

/// Decides a request from its head. Never throws except std::bad_alloc.
GateVerdict gate_request(const RequestHead& head, const GateConfig& config);

/// Why the HTTP parser refused a request before the gate saw it.
enum class ParseFailure : unsigned char {
  kHeaderTooLarge,    ///< the request line + header block exceed kHeaderLimit
  kBadContentLength,  ///< a Content-Length the parser could not read
  kOther,             ///< any other malformed request line or header
};

/// The refusal of a request the parser refused: 431 for a too-large header block; 413 for one
/// all-digit Content-Length too large for any body (found in the raw header bytes `raw`); else
/// 400 naming `parser_message`. All close the connection.
GateVerdict gate_parse_error(ParseFailure failure, std::string_view parser_message, std::string_view raw,
                             std::size_t max_body_bytes);

/// The request line + header block limit in bytes (more: 431, checked while reading).
inline constexpr std::uint32_t kHeaderLimit = 16 * 1024;

}  // namespace clef::server

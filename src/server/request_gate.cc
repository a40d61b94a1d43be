// SPDX-License-Identifier: MIT
#include "server/request_gate.h"

#include <algorithm>
#include <cctype>
#include <optional>

namespace clef::server {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

/// Constant-time comparison (the time taken does not reveal how much of the key matched).
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

/// "Bearer <key>" with the server's key: the scheme is case-insensitive and one or more spaces separate it from
/// the credentials (RFC 9110 §11.4: `auth-scheme [ 1*SP ( token68 / ... ) ]`).
bool bearer_matches(std::string_view header, std::string_view key) {
  constexpr std::string_view kBearer = "bearer";
  if (header.size() <= kBearer.size()) return false;
  for (std::size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kBearer[i]) return false;
  }
  const std::size_t credentials = header.find_first_not_of(' ', kBearer.size());
  if (credentials == kBearer.size() || credentials == std::string_view::npos) return false;
  return same_secret(header.substr(credentials), key);
}

GateVerdict refuse(GateVerdict v, const HttpError& error, std::string message, bool close,
                   Dialect dialect = Dialect::kSystemOne) {
  v.action = GateAction::kRefuse;
  v.error = &error;
  v.message = std::move(message);
  v.close = close;
  v.dialect = dialect;
  return v;
}

std::string too_large_message(std::size_t max_body_bytes) {
  return "the request body exceeds " + std::to_string(max_body_bytes) + " bytes (--max-body)";
}

}  // namespace

namespace {

/// What gate_request needs of the header fields: how often each field it checks occurs and the
/// first value of each.
struct HeaderFacts {
  std::size_t lengths = 0;
  std::size_t encodings = 0;
  std::size_t hosts = 0;
  std::size_t codings = 0;  // Content-Encoding fields (RFC 9110 §5.3: several fields form one list)
  std::size_t authorizations = 0;
  std::size_t content_types = 0;
  bool bad_length = false;
  bool length_overflow = false;
  bool bad_encoding = false;
  std::uint64_t length = 0;
  std::string_view host;
  std::string_view authorization;
  std::string_view content_encoding;
  std::string_view content_type;
};

HeaderFacts scan_fields(const RequestHead& head) {
  HeaderFacts f;
  for (const auto& [name, value] : head.fields) {
    if (iequals(name, "content-length")) {
      ++f.lengths;
      const LengthParse p = parse_content_length(value, f.length);
      if (p != LengthParse::kOk) f.bad_length = true;
      if (p == LengthParse::kOverflow) f.length_overflow = true;
    } else if (iequals(name, "transfer-encoding")) {
      ++f.encodings;
      if (!transfer_encoding_is_chunked(value)) f.bad_encoding = true;
    } else if (iequals(name, "host")) {
      if (++f.hosts == 1) f.host = value;
    } else if (iequals(name, "content-encoding")) {
      if (++f.codings == 1) f.content_encoding = value;
    } else if (iequals(name, "content-type")) {
      if (++f.content_types == 1) f.content_type = value;
    } else if (iequals(name, "authorization")) {
      if (++f.authorizations == 1) f.authorization = value;
    }
  }
  return f;
}

/// The refusal of a head whose framing, Host or credentials are faulty (each ends the connection),
/// or nullopt when they are sound.
std::optional<GateVerdict> refuse_bad_head(GateVerdict& v, const RequestHead& head, const HeaderFacts& f,
                                           const GateConfig& config) {
  const bool http11 = head.version == 11;
  if (head.fields.size() > kMaxHeaderFields) {
    return refuse(std::move(v), http_error::kHeadersTooLarge,
                  "more than " + std::to_string(kMaxHeaderFields) + " header fields", true);
  }
  // One all-digit length too large for any body is an over-limit length (413), not bad framing.
  if (f.lengths == 1 && f.length_overflow && f.encodings == 0) {
    return refuse(std::move(v), http_error::kTooLarge, too_large_message(config.max_body_bytes), true);
  }
  // Transfer-Encoding in an HTTP/1.0 request is faulty framing (RFC 9112 §6.1).
  if (f.lengths > 1 || f.bad_length || f.encodings > 1 || f.bad_encoding || (f.lengths > 0 && f.encodings > 0) ||
      (f.encodings > 0 && !head.chunked) || (f.encodings > 0 && !http11)) {
    return refuse(std::move(v), http_error::kMalformed,
                  "malformed HTTP request (Content-Length must be one decimal number; Transfer-Encoding only "
                  "\"chunked\", never with Content-Length)",
                  true);
  }
  if ((http11 && f.hosts != 1) || f.hosts > 1) {
    return refuse(std::move(v), http_error::kMalformed,
                  "malformed HTTP request (HTTP/1.1 needs exactly one Host header)", true);
  }
  // An absolute-form target's authority replaces Host (RFC 9112 §3.2.2); only http and https.
  std::string authority;
  const TargetForm form = parse_target(head.target, authority);
  if (form == TargetForm::kBadScheme) {
    return refuse(std::move(v), http_error::kMalformed,
                  "malformed HTTP request (an absolute request target must use http or https)", true);
  }
  const bool check_host = form == TargetForm::kAbsolute || f.hosts == 1;
  if (check_host && !host_allowed(form == TargetForm::kAbsolute ? std::string_view(authority) : f.host, *config.hosts,
                                  config.local_address)) {
    return refuse(std::move(v), http_error::kMisdirected,
                  "the Host header does not name this server (loopback names and the bound address are accepted; "
                  "see --allow-host)",
                  true);
  }
  // Two credentials are ambiguous (RFC 9110 §11.6.2 allows one field).
  if (f.authorizations > 1) {
    return refuse(std::move(v), http_error::kMalformed, "malformed HTTP request (more than one Authorization header)",
                  true);
  }
  return std::nullopt;
}

/// A decision POST: its body must be framed, within --max-body, in one accepted coding and JSON.
GateVerdict gate_decision_post(GateVerdict v, const RequestHead& head, const HeaderFacts& f, const GateConfig& config) {
  const bool chunked = head.chunked;
  const Dialect dialect = v.route.dialect;
  if (!chunked && !head.has_content_length) {
    return refuse(std::move(v), http_error::kLengthRequired,
                  "a request body needs Content-Length or Transfer-Encoding: chunked", true, dialect);
  }
  if (!chunked && f.length > config.max_body_bytes) {
    return refuse(std::move(v), http_error::kTooLarge, too_large_message(config.max_body_bytes), true, dialect);
  }
  // One coding at most: a list ("gzip, gzip") or several fields (which form a list) are refused.
  if (f.codings > 1 || !parse_body_encoding(f.content_encoding, v.encoding)) {
    const bool has_body = v.has_body;
    return refuse(std::move(v), http_error::kUnsupportedMedia,
                  "unsupported Content-Encoding (accepted: identity, gzip, deflate, br)", has_body, dialect);
  }
  if (!is_json_media_type(f.content_type)) {
    const bool has_body = v.has_body;
    return refuse(std::move(v), http_error::kUnsupportedMedia,
                  "the request body must be JSON (Content-Type: application/json or application/*+json)", has_body,
                  dialect);
  }
  v.action = GateAction::kReadDecisionBody;
  return v;
}

}  // namespace

GateVerdict gate_request(const RequestHead& head, const GateConfig& config) {
  GateVerdict v;
  const std::string_view m = head.method;
  // Method names are from a fixed set once logged; anything else is logged as "-".
  const bool known =
      m == "GET" || m == "HEAD" || m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE" || m == "OPTIONS";
  v.method_label = known ? std::string(m) : "-";
  v.head = m == "HEAD";
  if (head.version != 11 && head.version != 10) {
    return refuse(std::move(v), http_error::kVersion, "only HTTP/1.0 and HTTP/1.1 are served", true);
  }

  // Strict framing (RFC 9112 §6): one plain Content-Length, or Transfer-Encoding exactly "chunked"
  // (never both); a bad header set ends the connection after a 400.
  const HeaderFacts f = scan_fields(head);
  if (auto refused = refuse_bad_head(v, head, f, config)) return std::move(*refused);

  const bool chunked = head.chunked;
  v.has_body = chunked || f.length > 0;
  v.route = match_route(target_path(head.target));
  const RouteMatch& route = v.route;
  const bool body_method = m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE";
  const bool small_body = !v.has_body || (!chunked && f.length <= kDiscardLimit);
  // /health (liveness) and /ready (readiness) are the balancer's checks: no key.
  const bool want_auth = route.needs_key && !config.api_key.empty() &&
                         (f.authorizations == 0 || !bearer_matches(f.authorization, config.api_key));

  // Refusals decided from the headers alone. Auth comes first (no route or method is revealed to
  // a client without the key); /health stays open.
  if (want_auth) {
    return refuse(std::move(v), http_error::kUnauthorized, "missing or invalid API key", v.has_body,
                  body_method ? route.dialect : Dialect::kSystemOne);
  }
  if (route.endpoint == Endpoint::kNone) {
    if (small_body) {
      v.action = GateAction::kDropBody;
      return v;
    }
    return refuse(std::move(v), http_error::kNotFound, "no route for this path", true);
  }
  if (!route.allows(m) || !route.decision()) {
    // GET routes (and every 405): read a small body and drop it, then answer.
    v.action = small_body ? GateAction::kDropBody : GateAction::kAnswerThenClose;
    return v;
  }
  return gate_decision_post(std::move(v), head, f, config);
}

GateVerdict gate_parse_error(ParseFailure failure, std::string_view parser_message, std::string_view raw,
                             std::size_t max_body_bytes) {
  GateVerdict v;
  if (failure == ParseFailure::kHeaderTooLarge) {
    return refuse(std::move(v), http_error::kHeadersTooLarge,
                  "the request line and headers exceed " + std::to_string(kHeaderLimit) + " bytes", true);
  }
  if (failure == ParseFailure::kBadContentLength) {
    // An all-digit length too large for any body is an over-limit length (413); anything else
    // (a sign, a list, two fields) is malformed framing (400). The parser has consumed the fields
    // before the failing one: `raw` may start with it.
    std::string lower = "\n" + std::string(raw.substr(0, std::min<std::size_t>(raw.size(), kHeaderLimit)));
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::size_t fields = 0;
    bool overflow = false;
    for (std::size_t at = lower.find("\ncontent-length:"); at != std::string::npos;
         at = lower.find("\ncontent-length:", at + 1)) {
      ++fields;
      const std::size_t start = at + 16;
      const std::size_t end = lower.find('\r', start);
      std::uint64_t n = 0;
      overflow = parse_content_length(std::string_view(lower).substr(start, end - start), n) == LengthParse::kOverflow;
    }
    if (fields == 1 && overflow) {
      return refuse(std::move(v), http_error::kTooLarge, too_large_message(max_body_bytes), true);
    }
  }
  return refuse(std::move(v), http_error::kMalformed, "malformed HTTP request (" + std::string(parser_message) + ")",
                true);
}

}  // namespace clef::server

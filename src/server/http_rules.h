// SPDX-License-Identifier: MIT
// Pure checks of the HTTP layer of `clef serve` on header values (no socket, no HTTP library
// types), so that each rule is unit-tested on its own: strict RFC 9112 Content-Length and
// Transfer-Encoding, the Host allow-list (DNS rebinding), JSON media types, path decoding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace clef::server {

/// Result of parsing one Content-Length field value.
enum class LengthParse : unsigned char {
  kOk,        ///< one decimal number (RFC 9112 §6.3: 1*DIGIT)
  kOverflow,  ///< only digits, but above 2^63 - 1 (an impossible length: 413)
  kInvalid,   ///< anything else: a sign, a list ("67, 67"), letters, blanks inside, empty (400)
};

/// Parses a Content-Length value (surrounding blanks allowed, nothing else). `n` is set on kOk.
LengthParse parse_content_length(std::string_view value, std::uint64_t& n);

/// True when a Transfer-Encoding value is exactly the one coding "chunked" (case-insensitive,
/// surrounding blanks allowed). Lists ("chunked, identity", "gzip, chunked") and other codings are
/// refused: the server decodes no transfer coding but chunked.
bool transfer_encoding_is_chunked(std::string_view value);

/// The hosts a server accepts in the Host header.
struct HostPolicy {
  /// Names and addresses besides the loopback ones (localhost, 127.0.0.1, ::1): the bound
  /// address and every --allow-host. Compared case-insensitively; IPv6 without brackets.
  std::vector<std::string> names;
  bool any = false;  ///< --allow-host '*': every Host is accepted
};

/// True when a Host header value (`name`, `name:port`, `[v6]` or `[v6]:port`; any port from 0 to
/// 65535) names
/// this server: a loopback name, one of `policy.names`, or `local_address` (the address the
/// connection arrived on, so that clients of a 0.0.0.0 bind may use the server's IP). An empty
/// or malformed value is refused.
bool host_allowed(std::string_view host_header, const HostPolicy& policy, std::string_view local_address);

/// True for a JSON media type: application/json or application/<anything>+json, parameters
/// allowed ("application/json; charset=utf-8"), case-insensitive. False for a missing value.
bool is_json_media_type(std::string_view content_type);

/// The form of a request target (RFC 9112 §3.2).
enum class TargetForm : unsigned char {
  kOrigin,     ///< "/path?query" (or empty)
  kAbsolute,   ///< "http://authority/path" or "https://...": the authority replaces Host (§3.2.2)
  kBadScheme,  ///< "scheme://..." with a scheme other than http and https (400)
  kOther,      ///< "*" or an authority-form: matches no route (404)
};

/// Classifies a request target; for kAbsolute, `authority` is set to its authority (the text
/// between "://" and the next '/', '?' or '#'), else cleared.
TargetForm parse_target(std::string_view target, std::string& authority);

/// The path of a request target: the part before '?' or '#'. Only escapes of the reserved
/// characters a path segment may hold literally (":@!$&'()*+,;=") are decoded ("%40cf" is "@cf");
/// every other escape is kept as it is, so that an escaped letter or '/' never reaches a route
/// a proxy rule blocks by its exact path (docs/COMPATIBILITY.md "limits and guards"). An
/// absolute-form target ("http://host/path") yields its path.
std::string target_path(std::string_view target);

}  // namespace clef::server

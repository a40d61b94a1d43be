// SPDX-License-Identifier: MIT
#include "server/http_rules.h"

#include <cctype>

namespace clef::server {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

LengthParse parse_content_length(std::string_view value, std::uint64_t& n) {
  value = trim(value);
  if (value.empty()) return LengthParse::kInvalid;
  std::uint64_t v = 0;
  bool overflow = false;
  for (const char c : value) {
    if (c < '0' || c > '9') return LengthParse::kInvalid;
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (v > (std::uint64_t{INT64_MAX} - d) / 10) overflow = true;
    if (!overflow) v = v * 10 + d;
  }
  if (overflow) return LengthParse::kOverflow;
  n = v;
  return LengthParse::kOk;
}

bool transfer_encoding_is_chunked(std::string_view value) { return lower(trim(value)) == "chunked"; }

bool host_allowed(std::string_view host_header, const HostPolicy& policy, std::string_view local_address) {
  std::string_view h = trim(host_header);
  if (h.empty()) return false;
  std::string_view name;
  std::string_view port;
  if (h.front() == '[') {
    const std::size_t close = h.find(']');
    if (close == std::string_view::npos) return false;
    name = h.substr(1, close - 1);
    const std::string_view rest = h.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      if (port.empty()) return false;
    }
  } else {
    const std::size_t colon = h.find(':');
    name = h.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = h.substr(colon + 1);
      if (port.empty()) return false;
    }
  }
  std::uint32_t port_number = 0;
  for (const char c : port) {
    if (c < '0' || c > '9') return false;
    if (port_number <= 65535) port_number = port_number * 10 + static_cast<std::uint32_t>(c - '0');
  }
  if (port_number > 65535) return false;  // a TCP port is 16 bits (RFC 9110 §4.2.1 authority)
  if (name.empty()) return false;
  for (const char c : name) {
    // Hosts are reg-names or IP literals: no blanks, controls, '@', '/', ...
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '@' || c == '/' || c == '\\' || c == '?' || c == '#') return false;
  }
  if (policy.any) return true;
  std::string n = lower(name);
  if (!n.empty() && n.back() == '.') n.pop_back();  // "localhost." is localhost
  if (n == "localhost" || n == "127.0.0.1" || n == "::1") return true;
  if (!local_address.empty() && n == lower(local_address)) return true;
  for (const std::string& allowed : policy.names) {
    if (n == lower(allowed)) return true;
  }
  return false;
}

bool is_json_media_type(std::string_view content_type) {
  std::string_view t = content_type.substr(0, content_type.find(';'));
  const std::string v = lower(trim(t));
  constexpr std::string_view kApp = "application/";
  if (v.compare(0, kApp.size(), kApp) != 0) return false;
  const std::string_view sub = std::string_view(v).substr(kApp.size());
  if (sub == "json") return true;
  return sub.size() > 5 && sub.substr(sub.size() - 5) == "+json" && sub.find_first_of(" \t/") == std::string_view::npos;
}

TargetForm parse_target(std::string_view target, std::string& authority) {
  authority.clear();
  if (target.empty() || target.front() == '/') return TargetForm::kOrigin;
  const std::size_t scheme_end = target.find("://");
  if (scheme_end == std::string_view::npos) return TargetForm::kOther;
  const std::string scheme = lower(target.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") return TargetForm::kBadScheme;
  const std::string_view rest = target.substr(scheme_end + 3);
  authority = std::string(rest.substr(0, rest.find_first_of("/?#")));
  return TargetForm::kAbsolute;
}

namespace {

/// Reserved characters that may stand literally in a path segment (RFC 3986 §3.3 pchar minus
/// unreserved): their escapes are decoded. Escapes of letters, digits, "-._~" (which a client
/// should never escape, RFC 3986 §2.3), of '/', '?', '#', '%' and of any other byte are kept,
/// so "/%6detrics" or "/v1%2Fsystemone" match no route instead of slipping past a proxy rule.
bool decodable(int byte) {
  constexpr std::string_view kSafe = ":@!$&'()*+,;=";
  return byte > 0 && kSafe.find(static_cast<char>(byte)) != std::string_view::npos;
}

}  // namespace

std::string target_path(std::string_view target) {
  if (!target.empty() && target.front() != '/') {
    // absolute-form: scheme "://" authority path
    const std::size_t scheme = target.find("://");
    if (scheme != std::string_view::npos) {
      const std::size_t slash = target.find('/', scheme + 3);
      target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
    }
  }
  target = target.substr(0, target.find_first_of("?#"));
  std::string out;
  out.reserve(target.size());
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size()) {
      const int hi = hex_value(target[i + 1]);
      const int lo = hex_value(target[i + 2]);
      if (hi >= 0 && lo >= 0 && decodable(hi * 16 + lo)) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(target[i]);
  }
  return out;
}

}  // namespace clef::server

// SPDX-License-Identifier: MIT
#include "server/reply.h"

#include <cstdio>

namespace clef::server {

Reply error_reply(const HttpError& error, Dialect dialect, std::string_view message) {
  Reply r;
  r.status = error.status;
  r.body = error_envelope(dialect, error.status, error.type, error.cf_code, message);
  if (error.status == 401) r.headers = "WWW-Authenticate: Bearer\r\n";
  if (error.status == 503) r.headers = retry_after_header();
  return r;
}

const std::string& retry_after_header() {
  static const std::string kHeader = "Retry-After: " + std::to_string(kRetryAfterSeconds) + "\r\n";
  return kHeader;
}

const char* reason_phrase(int status) noexcept {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Entity";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string serialize(const Reply& reply, bool close, bool http11, bool head) {
  std::string out;
  out.reserve(128 + reply.headers.size() + (head ? 0 : reply.body.size()));
  out += "HTTP/1.1 " + std::to_string(reply.status) + " " + reason_phrase(reply.status) + "\r\n";
  out += "Content-Type: " + std::string(reply.content_type) + "\r\n";
  out += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n";
  out += reply.headers;
  if (close) {
    out += "Connection: close\r\n";
  } else if (!http11) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  if (!head) out += reply.body;
  return out;
}

std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", seconds);
  return buf;
}

}  // namespace clef::server

// The hub's HTTP client (libcurl) and the text helpers of URLs and headers, for hub/pull.cc; not
// a public interface of the hub layer.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace clef::hub::net {

/// `s` without leading and trailing white space.
std::string trim(std::string s);

/// `s` in ASCII lower case.
std::string lower(std::string s);

/// Percent-encodes a path segment (RFC 3986 unreserved characters kept; '/' kept when `keep_slash`).
std::string url_encode(const std::string& s, bool keep_slash);

/// scheme://host:port of an absolute URL ("" when `url` is not absolute), lower case.
std::string origin_of(const std::string& url);

/// One HTTP exchange as libcurl finished it.
struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  ///< lower-case names; the last response's
  std::string body;
  CURLcode code = CURLE_OK;
  std::string error;  ///< curl's message when code != CURLE_OK
};

/// Where a GET body goes: a string (body) or a file (with a byte counter).
struct Sink {
  std::string* text = nullptr;
  std::size_t text_limit = std::size_t{64} << 20;
  std::FILE* file = nullptr;
  std::atomic<std::int64_t>* counter = nullptr;
  std::atomic<std::int64_t>* total_counter = nullptr;
  int write_errno = 0;
  long status = 0;  ///< set by the header callback: only a 2xx body is written to the file
};

/// What to send.
struct Request {
  std::string method = "GET";  ///< GET or HEAD
  std::string url;
  std::vector<std::string> headers;
  bool follow = false;
  std::int64_t range_from = -1;  ///< >= 0: "Range: bytes=N-"
};

/// Runs one request (no retries). Transport failures are reported in HttpResponse::code/error,
/// not thrown; IoError only when libcurl cannot be initialised. The body goes to `sink`.
HttpResponse http(const Request& req, Sink& sink);

}  // namespace clef::hub::net

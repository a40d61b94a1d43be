// SPDX-License-Identifier: MIT
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
  std::string error;                ///< curl's message when code != CURLE_OK
  std::int64_t retry_after_s = -1;  ///< the last response's Retry-After in seconds (-1: none)
};

/// Where a GET body goes: a string (`text`, at most `text_limit` bytes) or a file (`file_path`).
/// A file is opened at the first byte of a 2xx body, so a request that fails before (an error
/// page, a redirect loop, a refused connection) creates nothing; an error page is never written.
struct Sink {
  std::string* text = nullptr;
  std::size_t text_limit = std::size_t{16} << 20;
  bool text_over_limit = false;  ///< the body passed text_limit: the transfer was aborted there

  std::string file_path;       ///< "" = no file
  std::int64_t have = 0;       ///< bytes already in file_path (the Range start): a 206 appends, a 200 replaces them
  std::int64_t declared = -1;  ///< the whole file's size (-1: unbounded): a body that would pass it aborts the transfer
  std::atomic<std::int64_t>* counter = nullptr;        ///< bytes of the file present (reset by a 200)
  std::atomic<std::int64_t>* total_counter = nullptr;  ///< bytes received, all files
  int write_errno = 0;                                 ///< the file system's refusal (the transfer was aborted)
  bool over_declared = false;   ///< the body would pass `declared`: aborted before those bytes were written
  std::int64_t announced = -1;  ///< over_declared by a Content-Length: its value
  std::int64_t received = 0;    ///< bytes of the 2xx body received (written or not)
  std::int64_t written = 0;     ///< bytes of it written to the file
  long status = 0;              ///< set by the header callback: only a 2xx body is written to the file

  std::FILE* file = nullptr;  ///< open while the transfer runs (http() closes it)
};

/// What to send.
struct Request {
  std::string method = "GET";  ///< GET or HEAD
  std::string url;
  std::vector<std::string> headers;
  bool follow = false;
  std::int64_t range_from = -1;  ///< >= 0: "Range: bytes=N-"
  std::int64_t timeout_ms = 0;   ///< the whole exchange's limit (0: none)
  long stall_s = 30;             ///< slower than min_rate bytes/s for this long: aborted (CURLE_OPERATION_TIMEDOUT)
  long min_rate = 1024;
};

/// Runs one request (no retries). Transport failures are reported in HttpResponse::code/error,
/// not thrown; IoError only when libcurl cannot be initialised. The body goes to `sink`; a file
/// sink's file is closed before returning (a close error lands in sink.write_errno).
HttpResponse http(const Request& req, Sink& sink);

}  // namespace clef::hub::net

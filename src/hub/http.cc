// SPDX-License-Identifier: MIT
// The hub's HTTP client through libcurl (hub/http.h).
#include "hub/http.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/version.h"

namespace clef::hub::net {

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// Percent-encodes a path segment (RFC 3986 unreserved characters kept; '/' kept when `keep_slash`).
std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// scheme://host:port of an absolute URL ("" when `url` is not absolute).
std::string origin_of(const std::string& url) {
  const auto scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const auto path = url.find('/', scheme + 3);
  return lower(url.substr(0, path));
}

namespace {

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
  ~CurlGlobal() { curl_global_cleanup(); }
};

void ensure_curl() { static CurlGlobal global; }

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* s) const { curl_slist_free_all(s); }
};

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* r = static_cast<std::pair<HttpResponse*, Sink*>*>(user);
  Sink& sink = *r->second;
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    r->first->headers.clear();  // a new response (after a redirect or 100 Continue)
    const auto sp = line.find(' ');
    if (sp != std::string::npos) sink.status = std::strtol(line.c_str() + sp + 1, nullptr, 10);
  } else if (const auto colon = line.find(':'); colon != std::string::npos) {
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string value = trim(line.substr(colon + 1));
    r->first->headers[name] = value;
    // A file body announced longer than the file: refused before its first byte.
    if (name == "content-length" && !sink.file_path.empty() && sink.declared >= 0 && sink.status >= 200 &&
        sink.status < 300) {
      const std::int64_t allowed = sink.status == 206 ? sink.declared - sink.have : sink.declared;
      const long long announced = std::strtoll(value.c_str(), nullptr, 10);
      if (announced > allowed) {
        sink.over_declared = true;
        sink.announced = announced;
        return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
      }
    }
  }
  return size * n;
}

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const std::size_t bytes = size * n;
  if (!s->file_path.empty()) {
    if (s->status < 200 || s->status >= 300) return bytes;  // an error page: not file content
    if (s->file == nullptr) {
      // The first byte: a 206 continues the bytes there, any other 2xx is the whole file.
      const bool whole = s->status != 206;
      if (whole) {
        s->have = 0;
        if (s->counter != nullptr) *s->counter = 0;
      }
      s->file = std::fopen(s->file_path.c_str(), whole ? "wb" : "ab");
      if (s->file == nullptr) {
        s->write_errno = errno != 0 ? errno : EIO;
        return 0;
      }
    }
    s->received += static_cast<std::int64_t>(bytes);
    if (s->declared >= 0 && s->have + s->written + static_cast<std::int64_t>(bytes) > s->declared) {
      s->over_declared = true;  // nothing past the declared size is written
      return 0;
    }
    if (std::fwrite(data, 1, bytes, s->file) != bytes || std::fflush(s->file) != 0) {
      s->write_errno = errno != 0 ? errno : EIO;
      return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
    }
    s->written += static_cast<std::int64_t>(bytes);
    if (s->counter != nullptr) *s->counter += static_cast<std::int64_t>(bytes);
    if (s->total_counter != nullptr) *s->total_counter += static_cast<std::int64_t>(bytes);
    return bytes;
  }
  if (s->text != nullptr) {
    if (s->text->size() + bytes > s->text_limit) {
      s->text_over_limit = true;
      return 0;
    }
    s->text->append(data, bytes);
  }
  return bytes;
}

}  // namespace

HttpResponse http(const Request& req, Sink& sink) {
  ensure_curl();
  HttpResponse resp;
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) throw IoError("cannot initialise libcurl");
  std::unique_ptr<curl_slist, SlistDeleter> list;
  auto add = [&](const std::string& h) { list.reset(curl_slist_append(list.release(), h.c_str())); };
  for (const auto& h : req.headers) add(h);
  add("Accept-Encoding: identity");  // the real size; no transparent decompression
  if (req.range_from >= 0) add("Range: bytes=" + std::to_string(req.range_from) + "-");
  char err[CURL_ERROR_SIZE] = {0};
  std::pair<HttpResponse*, Sink*> hdr_ctx{&resp, &sink};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list.get());
  const std::string user_agent = std::string("clef/") + kVersion;  // curl copies it
  curl_easy_setopt(c, CURLOPT_USERAGENT, user_agent.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  long connect_ms = 15000;
  if (req.timeout_ms > 0) {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(req.timeout_ms));
    connect_ms = std::min<long>(connect_ms, static_cast<long>(req.timeout_ms));
  }
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
  // A dripping or dead connection: fewer than min_rate bytes/s over stall_s seconds.
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, req.min_rate);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, req.stall_s);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &hdr_ctx);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  if (req.follow) {
    // Custom Authorization headers are not sent to another host after a redirect (libcurl >= 7.58).
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  }
  if (req.method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  resp.code = curl_easy_perform(c);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &resp.status);
  curl_off_t retry_after = 0;
  if (resp.headers.count("retry-after") != 0 && curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK)
    resp.retry_after_s = std::max<std::int64_t>(0, static_cast<std::int64_t>(retry_after));
  if (sink.file != nullptr) {
    if (std::fclose(sink.file) != 0 && sink.write_errno == 0) sink.write_errno = errno != 0 ? errno : EIO;
    sink.file = nullptr;
  }
  if (resp.code != CURLE_OK) resp.error = err[0] != 0 ? std::string(err) : curl_easy_strerror(resp.code);
  return resp;
}

}  // namespace clef::hub::net

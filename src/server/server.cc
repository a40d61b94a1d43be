#include "server/server.h"

#include "ops/isa.h"

#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/json_reader.h"
#include "decision/dialects.h"
#include "decision/render.h"
#include "decision/request_error.h"
#include "server/body_decoder.h"
#include "server/http_rules.h"
#include "server/metrics.h"
#include "server/readiness.h"
#include "server/routes.h"
#include "server/scheduler.h"

namespace clef::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";
/// Seconds a client is told to wait after a 503 (queue full, queue deadline, too many connections).
constexpr int kRetryAfterSeconds = 1;
/// The header line of those 503s.
const std::string kRetryAfterHeader = "Retry-After: " + std::to_string(kRetryAfterSeconds) + "\r\n";
/// Request line + header block limit in bytes (more: 431, checked while reading).
constexpr std::uint32_t kHeaderLimit = 16 * 1024;
/// Header fields per request (more: 431).
constexpr std::size_t kMaxHeaderFields = 100;
/// Bytes read from the socket per body read (the one per-connection body buffer; freed after).
constexpr std::size_t kBodyChunk = 64 * 1024;
/// Largest body of a GET/HEAD (or other refused request) that is read and dropped to keep the
/// connection; a larger one ends the connection after the answer.
constexpr std::uint64_t kDiscardLimit = 64 * 1024;
/// Requests per connection; the last answer carries Connection: close.
constexpr int kKeepAliveMax = 100;
/// Lingering close (RFC 9112 §9.6): after the last answer of a connection the server half-closes
/// and reads (and drops) what the client still sends, for at most this long / this many bytes, so
/// that unread pipelined bytes do not make the kernel reset the connection and destroy answers the
/// client has not read yet.
constexpr double kLingerSeconds = 2;
constexpr std::size_t kLingerBytes = std::size_t{1} << 20;
constexpr std::size_t kDrainChunk = 4096;
/// Idle seconds between requests on a keep-alive connection.
constexpr double kKeepAliveSeconds = 5;
/// Seconds an answer may take to be written.
constexpr double kWriteSeconds = 30;
/// Interval of the disconnect / queue-deadline check of a queued decision.
constexpr auto kPollInterval = std::chrono::milliseconds(50);
/// Bodies at least this large are followed by malloc_trim(0) once freed (see docs/PERFORMANCE.md).
constexpr std::size_t kTrimAfterBytes = 1 << 20;

/// "0.5", "10", "30" (seconds in messages).
std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

/// An error that is not a request validation error (auth, 404, 405, 408, 411, 413, 415, 421, 431,
/// 503, 500) in the dialect's shape: SystemOne {"detail":{"error_type","message"}}; Cloudflare
/// envelope with `cf_code`; OpenRouter {"error":{"code","message","metadata":{"type"}}}.
std::string error_body(Dialect dialect, int status, const char* error_type, int cf_code, const std::string& message) {
  switch (dialect) {
    case Dialect::kCloudflare:
      return "{\"result\":null,\"success\":false,\"errors\":[{\"code\":" + std::to_string(cf_code) +
             ",\"message\":" + json_string(message) + "}],\"messages\":[]}";
    case Dialect::kOpenRouter:
      return "{\"error\":{\"code\":" + std::to_string(status) + ",\"message\":" + json_string(message) +
             ",\"metadata\":{\"type\":" + json_string(error_type) + "}}}";
    case Dialect::kSystemOne:
      break;
  }
  return "{\"detail\":{\"error_type\":" + json_string(error_type) + ",\"message\":" + json_string(message) + "}}";
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

const char* reason_phrase(int status) {
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

/// One answer before serialization.
struct Reply {
  int status = 200;
  std::string body;
  const char* content_type = kJson;
  std::string headers;  ///< extra header lines, each ending in "\r\n"
};

/// The headers a decision answer carries besides the body (exact state reuse, issue 7). Adding
/// a header computed engine-side into Decision is one line here.
std::string decision_headers(const Decision& d) {
  std::string h;
  h += "X-Clef-State-Cache: " + std::string(state_cache_use_name(d.state_cache)) + "\r\n";
  h += "X-Clef-Reused-Tokens: " + std::to_string(d.reused_tokens) + "\r\n";
  // The routing key (issue 15, docs/DEPLOYMENT.md); a request's own X-Clef-State-Key is never read.
  h += "X-Clef-State-Key: " + d.state_key + "\r\n";
  return h;
}

class HttpServer;

/// One TCP connection: reads requests one after the other (pipelined bytes wait in the buffer and
/// are answered in order), answers each, and ends at the first framing error, deadline, refusal of
/// an unread body, keep-alive limit or shutdown. Every handler runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(HttpServer& server, tcp::socket socket);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Registers the connection and starts reading its first request (on its strand).
  void launch();
  /// Asks the connection (from any thread) to end if it is between requests or still reading
  /// headers; one with a request in flight ends after its answer (Connection: close).
  void shutdown_async();

 private:
  enum class Phase : unsigned char { kIdle, kHeader, kBody, kWork, kWrite, kLinger, kClosed };

  void start();
  void on_shutdown();
  void read_request();
  void read_header();
  void on_header(beast::error_code ec);
  void handle_header();
  void read_body();
  void on_body(beast::error_code ec);
  void body_done();
  void answer_without_body();
  void decide();
  void submit();
  void poll_job();
  void on_job_done();
  bool peer_gone();
  bool authorized() const;
  /// The error reply in the current route's dialect.
  void fail(int status, const char* type, int cf_code, const std::string& message, bool close,
            Dialect dialect = Dialect::kSystemOne);
  void send(Reply reply, bool close, std::int64_t tokens = 0);
  void on_write(beast::error_code ec);
  void arm(double seconds);
  void disarm();
  void close();
  /// Half-closes, drains what the client still sends (bounded by kLingerSeconds / kLingerBytes),
  /// then closes: the end of a connection after its last answer.
  void linger_close();
  void drain();
  void reset_request();

  HttpServer& srv_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  asio::steady_timer poll_timer_;
  std::uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  Phase phase_ = Phase::kHeader;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::buffer_body>> parser_;
  std::unique_ptr<char[]> chunk_;
  int served_ = 0;
  std::string local_address_;
  std::list<std::weak_ptr<Session>>::iterator registered_;

  // The request being handled.
  Clock::time_point t0_;
  std::string method_ = "-";
  bool head_ = false;
  bool keep_alive_ = false;
  bool http11_ = true;
  std::unique_ptr<char[]> drain_;  ///< kDrainChunk bytes while lingering, else null
  std::size_t lingered_ = 0;       ///< bytes dropped while lingering
  RouteMatch route_;
  bool keep_body_ = false;       ///< a decision body (decoded and kept) vs one read only to drop it
  std::uint64_t raw_seen_ = 0;   ///< body bytes received (before decoding)
  std::unique_ptr<BodyDecoder> decoder_;
  std::string body_;
  std::size_t body_size_ = 0;    ///< decoded size of the last body (for malloc_trim)
  std::shared_ptr<Job> job_;
  Clock::time_point job_deadline_;
  bool probed_ = false;
  std::atomic<bool> gone_{false};  ///< read by the scheduler thread (still_wanted)
  std::string out_;                ///< the answer being written
  bool close_after_write_ = false;
};

/// The HTTP layer: an acceptor and a few I/O threads (Boost.Asio), one Session per connection,
/// one Scheduler for decisions (see server.h and docs/ARCHITECTURE.md "The HTTP server").
class HttpServer {
 public:
  HttpServer(Engine& engine, const ServeOptions& options);
  int run();

  Engine& engine_;
  const ServeOptions& options_;
  Scheduler scheduler_;
  Metrics metrics_;
  HostPolicy hosts_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;  ///< on the acceptor's strand
  asio::thread_pool validators_{1};  ///< parses + validates decision bodies off the I/O threads
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> open_{0};
  /// Keeps the I/O threads running until shutdown has begun and the last connection ended.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  std::mutex sessions_mutex_;
  std::list<std::weak_ptr<Session>> sessions_;
  std::mutex log_mutex_;

  /// Counts one answer and writes its access log line ("clef serve: POST /v1/systemone 200 3.1 ms 42 tokens").
  void log_request(const std::string& method, const char* label, int status, Clock::time_point t0,
                   std::int64_t tokens);
  std::string models_body() const;
  std::list<std::weak_ptr<Session>>::iterator add_session(const std::shared_ptr<Session>& s);
  void remove_session(std::list<std::weak_ptr<Session>>::iterator it);
  /// Called when a connection ended: the last one after shutdown lets the I/O threads return.
  void connection_ended();
  /// Frees the heap's unused top and holes after a large body was released.
  static void trim_heap(std::size_t freed_bytes) {
    if (freed_bytes >= kTrimAfterBytes) malloc_trim(0);
  }

 private:
  void accept();
  void refuse(tcp::socket& socket);
  void begin_shutdown();
};

// ---------------------------------------------------------------------------------------------
// Session

Session::Session(HttpServer& server, tcp::socket socket)
    : srv_(server),
      socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      poll_timer_(socket_.get_executor()),
      buffer_(kHeaderLimit + kBodyChunk) {
  beast::error_code ec;
  const auto local = socket_.local_endpoint(ec);
  if (!ec) local_address_ = local.address().to_string();
  socket_.set_option(tcp::no_delay(true), ec);
}

Session::~Session() {
  HttpServer::trim_heap(body_size_);
  srv_.remove_session(registered_);
  srv_.connection_ended();
}

void Session::launch() {
  registered_ = srv_.add_session(shared_from_this());
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->start(); });
}

void Session::shutdown_async() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->on_shutdown(); });
}

void Session::start() { read_request(); }

void Session::arm(double seconds) {
  const std::uint64_t gen = ++timer_gen_;
  timed_out_ = false;
  deadline_.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
  deadline_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->timer_gen_ || self->phase_ == Phase::kClosed) return;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->socket_.cancel(ignored);
  });
}

void Session::disarm() {
  ++timer_gen_;
  deadline_.cancel();
}

void Session::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  gone_.store(true);
  disarm();
  poll_timer_.cancel();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  chunk_.reset();
}

void Session::on_shutdown() {
  // A connection still sending a body is ended too: its request was not started (nothing is lost;
  // a balancer or client retries it), and a slow uploader must not hold the shutdown for up to
  // --body-timeout. Requests already validated, queued or running are answered.
  if (phase_ == Phase::kIdle || phase_ == Phase::kHeader || phase_ == Phase::kBody) close();
}

void Session::linger_close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kLinger;
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) {
    close();
    return;
  }
  drain_ = std::make_unique<char[]>(kDrainChunk);
  arm(kLingerSeconds);
  drain();
}

void Session::drain() {
  socket_.async_read_some(asio::buffer(drain_.get(), kDrainChunk),
                          [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                            if (self->phase_ == Phase::kClosed) return;
                            self->lingered_ += n;
                            if (ec || self->timed_out_ || self->lingered_ > kLingerBytes) {
                              self->close();
                              return;
                            }
                            self->drain();
                          });
}

void Session::reset_request() {
  method_ = "-";
  head_ = false;
  route_ = RouteMatch{};
  keep_body_ = false;
  raw_seen_ = 0;
  decoder_.reset();
  std::string().swap(body_);
  job_.reset();
  probed_ = false;
  close_after_write_ = false;
}

void Session::read_request() {
  reset_request();
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // counted here, after decoding
  if (srv_.stopping_.load() && served_ > 0 && buffer_.size() == 0) {
    close();
    return;
  }
  if (served_ == 0 || buffer_.size() > 0) {
    read_header();
    return;
  }
  // Between requests: wait for the first byte of the next one (keep-alive idle timeout).
  phase_ = Phase::kIdle;
  buffer_.shrink_to_fit();
  arm(kKeepAliveSeconds);
  socket_.async_read_some(buffer_.prepare(1024), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
    if (self->phase_ == Phase::kClosed) return;
    if (ec) {
      self->close();
      return;
    }
    self->buffer_.commit(n);
    self->read_header();
  });
}

void Session::read_header() {
  phase_ = Phase::kHeader;
  t0_ = Clock::now();
  arm(srv_.options_.header_timeout_seconds);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

void Session::on_header(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  disarm();
  if (!ec) {
    handle_header();
    return;
  }
  if (timed_out_) {
    if (buffer_.size() == 0) {
      close();  // nothing sent: no answer owed
      return;
    }
    fail(408, "request_timeout", 0,
         "the request line and headers did not arrive within " +
             seconds_text(srv_.options_.header_timeout_seconds) + " s (--header-timeout)",
         true);
    return;
  }
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::operation_aborted || ec == asio::error::broken_pipe) {
    close();  // the client left (or shutdown closed an idle connection)
    return;
  }
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    fail(431, "request_header_fields_too_large", 0,
         "the request line and headers exceed " + std::to_string(kHeaderLimit) + " bytes", true);
    return;
  }
  if (ec == http::error::bad_content_length) {
    // An all-digit length too large for any body is an over-limit length (413); anything else
    // (a sign, a list, two fields) is malformed framing (400).
    const std::string_view raw(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    // The parser has consumed the fields before the failing one: it may start the buffer.
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
      fail(413, "request_too_large", 5021,
           "the request body exceeds " + std::to_string(srv_.options_.max_body_bytes) + " bytes (--max-body)", true);
      return;
    }
  }
  fail(400, "invalid_request_error", 0, std::string("malformed HTTP request (") + ec.message() + ")", true);
}

bool Session::authorized() const {
  if (srv_.options_.api_key.empty()) return true;
  const auto& req = parser_->get();
  const auto it = req.find(http::field::authorization);
  if (it == req.end()) return false;
  const std::string_view h(it->value().data(), it->value().size());
  // The auth scheme is case-insensitive (RFC 7235 §2.1): "Bearer", "bearer", "BEARER".
  constexpr std::string_view kBearer = "bearer ";
  if (h.size() <= kBearer.size()) return false;
  for (std::size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(h[i])) != kBearer[i]) return false;
  }
  return same_secret(h.substr(kBearer.size()), srv_.options_.api_key);
}

void Session::handle_header() {
  auto& req = parser_->get();
  const std::string_view m(req.method_string().data(), req.method_string().size());
  // Method names are from a fixed set once logged; anything else is logged as "-".
  const bool known = m == "GET" || m == "HEAD" || m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE" ||
                     m == "OPTIONS";
  method_ = known ? std::string(m) : "-";
  head_ = m == "HEAD";
  http11_ = req.version() == 11;
  if (req.version() != 11 && req.version() != 10) {
    fail(505, "invalid_request_error", 0, "only HTTP/1.0 and HTTP/1.1 are served", true);
    return;
  }

  // Strict framing (RFC 9112 §6): one plain Content-Length, or Transfer-Encoding exactly "chunked"
  // (never both); a bad header set ends the connection after a 400.
  std::size_t fields = 0;
  std::size_t lengths = 0;
  std::size_t encodings = 0;
  std::size_t hosts = 0;
  std::size_t codings = 0;  // Content-Encoding fields (RFC 9110 §5.3: several fields form one list)
  bool bad_length = false;
  bool bad_encoding = false;
  std::uint64_t length = 0;
  for (const auto& f : req) {
    ++fields;
    const std::string_view v(f.value().data(), f.value().size());
    if (f.name() == http::field::content_length) {
      ++lengths;
      if (parse_content_length(v, length) != LengthParse::kOk) bad_length = true;
    } else if (f.name() == http::field::transfer_encoding) {
      ++encodings;
      if (!transfer_encoding_is_chunked(v)) bad_encoding = true;
    } else if (f.name() == http::field::host) {
      ++hosts;
    } else if (f.name() == http::field::content_encoding) {
      ++codings;
    }
  }
  if (fields > kMaxHeaderFields) {
    fail(431, "request_header_fields_too_large", 0,
         "more than " + std::to_string(kMaxHeaderFields) + " header fields", true);
    return;
  }
  // Transfer-Encoding in an HTTP/1.0 request is faulty framing (RFC 9112 §6.1).
  if (lengths > 1 || bad_length || encodings > 1 || bad_encoding || (lengths > 0 && encodings > 0) ||
      (encodings > 0 && !parser_->chunked()) || (encodings > 0 && !http11_)) {
    fail(400, "invalid_request_error", 0,
         "malformed HTTP request (Content-Length must be one decimal number; Transfer-Encoding only "
         "\"chunked\", never with Content-Length)",
         true);
    return;
  }
  if ((http11_ && hosts != 1) || hosts > 1) {
    fail(400, "invalid_request_error", 0, "malformed HTTP request (HTTP/1.1 needs exactly one Host header)", true);
    return;
  }
  if (hosts == 1) {
    const auto& h = req[http::field::host];
    if (!host_allowed(std::string_view(h.data(), h.size()), srv_.hosts_, local_address_)) {
      fail(421, "misdirected_request", 0,
           "the Host header does not name this server (loopback names and the bound address are accepted; "
           "see --allow-host)",
           true);
      return;
    }
  }

  const bool chunked = parser_->chunked();
  const bool has_body = chunked || length > 0;
  keep_alive_ = req.keep_alive() && served_ + 1 < kKeepAliveMax && !srv_.stopping_.load();

  const auto target = req.target();
  route_ = match_route(target_path(std::string_view(target.data(), target.size())));
  const bool body_method = m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE";
  const bool get = m == "GET" || head_;
  // /health (liveness) and /ready (readiness) are the balancer's checks: no key.
  const bool want_auth = route_.endpoint != Endpoint::kHealth && route_.endpoint != Endpoint::kReady && !authorized();

  // Refusals decided from the headers alone. Auth comes first (no route or method is revealed to
  // a client without the key); /health stays open.
  if (want_auth) {
    fail(401, "authentication_error", 10000, "missing or invalid API key", has_body,
         body_method ? route_.dialect : Dialect::kSystemOne);
    return;
  }
  if (route_.endpoint == Endpoint::kNone) {
    if (!has_body || (!chunked && length <= kDiscardLimit)) {
      keep_body_ = false;
      read_body();
      return;
    }
    fail(404, "not_found_error", 7000, "no route for this path", true);
    return;
  }
  const bool method_ok = route_.decision() ? m == "POST" : get;
  if (!method_ok || !route_.decision()) {
    // GET routes (and every 405): read a small body and drop it, then answer.
    if (!has_body || (!chunked && length <= kDiscardLimit)) {
      keep_body_ = false;
      read_body();
      return;
    }
    answer_without_body();
    close_after_write_ = true;
    return;
  }

  // A decision POST.
  if (!chunked && parser_->content_length() == boost::none) {
    fail(411, "length_required", 6003, "a request body needs Content-Length or Transfer-Encoding: chunked", true,
         route_.dialect);
    return;
  }
  if (!chunked && length > srv_.options_.max_body_bytes) {
    fail(413, "request_too_large", 5021,
         "the request body exceeds " + std::to_string(srv_.options_.max_body_bytes) + " bytes (--max-body)", true,
         route_.dialect);
    return;
  }
  BodyEncoding encoding = BodyEncoding::kIdentity;
  const auto ce = req[http::field::content_encoding];
  // One coding at most: a list ("gzip, gzip") or several fields (which form a list) are refused.
  if (codings > 1 || !parse_body_encoding(std::string_view(ce.data(), ce.size()), encoding)) {
    fail(415, "unsupported_media_type", 6003, "unsupported Content-Encoding (accepted: identity, gzip, deflate, br)",
         has_body, route_.dialect);
    return;
  }
  const auto ct = req[http::field::content_type];
  if (!is_json_media_type(std::string_view(ct.data(), ct.size()))) {
    fail(415, "unsupported_media_type", 6003,
         "the request body must be JSON (Content-Type: application/json or application/*+json)", has_body,
         route_.dialect);
    return;
  }
  try {
    decoder_ = std::make_unique<BodyDecoder>(encoding, srv_.options_.max_body_bytes);
  } catch (const std::bad_alloc&) {
    fail(503, "overloaded_error", 3040, "out of memory for the request body; retry later", true, route_.dialect);
    return;
  }
  keep_body_ = true;
  read_body();
}

void Session::read_body() {
  phase_ = Phase::kBody;
  if (parser_->is_done()) {
    body_done();
    return;
  }
  auto& req = parser_->get();
  const auto expect = req[http::field::expect];
  if (http11_ && beast::iequals(expect, "100-continue")) {
    // The client waits for this before it sends the body (curl does for large ones).
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    beast::error_code ec;
    asio::write(socket_, asio::buffer(kContinue.data(), kContinue.size()), ec);
    if (ec) {
      close();
      return;
    }
  }
  if (!chunk_) chunk_ = std::make_unique<char[]>(kBodyChunk);
  arm(srv_.options_.body_timeout_seconds);
  req.body().data = chunk_.get();
  req.body().size = kBodyChunk;
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
}

void Session::on_body(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  auto& req = parser_->get();
  const std::size_t n = kBodyChunk - req.body().size;
  if (ec == http::error::need_buffer) ec = {};
  if (n > 0) {
    raw_seen_ += n;
    if (keep_body_) {
      const DecodeStatus st = decoder_->feed(std::string_view(chunk_.get(), n), body_);
      if (st == DecodeStatus::kTooLarge || raw_seen_ > srv_.options_.max_body_bytes) {
        disarm();
        body_size_ = std::max(body_size_, body_.size());
        fail(413, "request_too_large", 5021,
             "the request body exceeds " + std::to_string(srv_.options_.max_body_bytes) + " bytes (--max-body)",
             true, route_.dialect);
        return;
      }
      if (st == DecodeStatus::kCorrupt) {
        disarm();
        fail(400, "invalid_request_error", 6003,
             "the request body could not be read (malformed chunked encoding, bad compression or a timeout)", true,
             route_.dialect);
        return;
      }
    } else if (raw_seen_ > kDiscardLimit) {
      disarm();
      answer_without_body();
      close_after_write_ = true;
      return;
    }
  }
  if (ec) {
    disarm();
    if (timed_out_) {
      fail(408, "request_timeout", 0,
           "the request body did not arrive within " +
               seconds_text(srv_.options_.body_timeout_seconds) + " s (--body-timeout)",
           true, keep_body_ ? route_.dialect : Dialect::kSystemOne);
      return;
    }
    if (ec == http::error::partial_message || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == asio::error::broken_pipe) {
      close();  // the client left mid-body
      return;
    }
    fail(400, "invalid_request_error", 6003,
         "the request body could not be read (malformed chunked encoding, bad compression or a timeout)", true,
         keep_body_ ? route_.dialect : Dialect::kSystemOne);
    return;
  }
  if (!parser_->is_done()) {
    req.body().data = chunk_.get();
    req.body().size = kBodyChunk;
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code e, std::size_t) { self->on_body(e); });
    return;
  }
  disarm();
  body_done();
}

void Session::body_done() {
  chunk_.reset();
  if (!keep_body_) {
    answer_without_body();
    return;
  }
  if (decoder_->finish() != DecodeStatus::kOk) {
    fail(400, "invalid_request_error", 6003,
         "the request body could not be read (malformed chunked encoding, bad compression or a timeout)", true,
         route_.dialect);
    return;
  }
  decoder_.reset();
  body_size_ = std::max(body_size_, body_.size());
  decide();
}

void Session::answer_without_body() {
  const auto& opt = srv_.options_;
  const std::string_view m = method_;
  const bool get = m == "GET" || head_;
  if (route_.endpoint == Endpoint::kNone) {
    fail(404, "not_found_error", 7000, "no route for this path", false);
    return;
  }
  const bool method_ok = route_.decision() ? m == "POST" : get;
  if (!method_ok) {
    Reply r;
    r.status = 405;
    r.body = error_body(route_.dialect, 405, "method_not_allowed", 7000,
                        std::string("this route allows ") + route_.method + " only");
    r.headers = std::string("Allow: ") + (std::string_view(route_.method) == "GET" ? "GET, HEAD" : route_.method) +
                "\r\n";
    send(std::move(r), false);
    return;
  }
  Reply r;
  if (route_.endpoint == Endpoint::kHealth) {
    r.body = "{\"status\":\"ok\",\"model\":" + json_string(srv_.engine_.model_name()) + ",\"loaded\":true}";
  } else if (route_.endpoint == Endpoint::kReady) {
    const Scheduler& q = srv_.scheduler_;
    const ReadinessReply ready =
        readiness({true, q.closed(), q.depth(), q.capacity(), q.running()}, srv_.engine_.model_name());
    r.status = ready.status;
    r.body = ready.body;
    if (r.status != 200) r.headers = kRetryAfterHeader;
  } else if (route_.endpoint == Endpoint::kModels) {
    r.body = srv_.models_body();
  } else if (route_.endpoint == Endpoint::kMetrics) {
    QueueGauges g;
    g.depth = srv_.scheduler_.depth();
    g.capacity = opt.queue;
    g.running = srv_.scheduler_.running();
    g.cancelled = srv_.scheduler_.cancelled();
    r.body = srv_.metrics_.render(g, srv_.engine_.state_cache_stats());
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  }
  send(std::move(r), false);
}

void Session::decide() {
  phase_ = Phase::kWork;
  if (route_.endpoint == Endpoint::kCloudflare) {
    const std::string& m = route_.model;
    const auto& aliases = srv_.options_.aliases;
    const bool known = m == "clef" || m == "clef-flash" || m == srv_.engine_.model_name() ||
                       std::find(aliases.begin(), aliases.end(), m) != aliases.end();
    if (!known) {
      fail(400, "unknown_model", 7000, "No route for that URI: unknown model", false, Dialect::kCloudflare);
      return;
    }
  }
  // Parse + validate off the I/O threads, before the body takes a queue slot: a refused body is
  // answered at once, with the bytes the engine would answer.
  asio::post(srv_.validators_, [self = shared_from_this()] {
    std::optional<WireReply> refused;
    try {
      self->srv_.engine_.validate(self->body_, self->route_.dialect);
    } catch (const RequestError& e) {
      refused = wire_error(e, self->route_.dialect);
    } catch (const std::exception&) {
      // Not a client error: the engine sees the body and reports its own fault.
    }
    asio::post(self->socket_.get_executor(), [self, refused = std::move(refused)]() mutable {
      if (self->phase_ == Phase::kClosed) return;
      if (refused) {
        Reply r;
        r.status = refused->status;
        r.body = std::move(refused->body);
        self->send(std::move(r), false);
        return;
      }
      self->submit();
    });
  });
}

void Session::submit() {
  std::weak_ptr<Session> weak = weak_from_this();
  const int fd = socket_.native_handle();
  auto still_wanted = [weak, fd] {
    const auto self = weak.lock();
    if (!self || self->gone_.load()) return false;
    pollfd p{};
    p.fd = fd;
    p.events = POLLIN;
    // A reset (or a full close seen after the probe) reads as POLLERR / POLLHUP.
    return !(poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0);
  };
  // Holds the connection until the job is over (the reference cycle job -> callback -> session
  // -> job ends when on_job_done or a cancel drops the session's reference).
  auto on_finished = [s = shared_from_this()] { asio::post(s->socket_.get_executor(), [s] { s->on_job_done(); }); };
  job_ = srv_.scheduler_.submit(std::move(body_), route_.dialect, std::move(still_wanted), std::move(on_finished));
  std::string().swap(body_);
  if (!job_) {
    srv_.metrics_.count_overload("queue_full");
    Reply r;
    r.status = 503;
    r.body = error_body(route_.dialect, 503, "overloaded_error", 3040, "the decision queue is full; retry later");
    r.headers = kRetryAfterHeader;
    send(std::move(r), false);
    return;
  }
  job_deadline_ = job_->enqueued + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(srv_.options_.timeout_seconds));
  poll_job();
}

bool Session::peer_gone() {
  if (gone_.load()) return true;
  pollfd p{};
  p.fd = socket_.native_handle();
  p.events = POLLIN | POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
    gone_.store(true);
    return true;
  }
  if ((p.revents & POLLRDHUP) != 0 && !probed_ && http11_) {
    // The client stopped sending: a half-close (it still reads) or a full close. An interim
    // 100 answer (which HTTP/1.1 clients skip) tells them apart: a closed socket answers it
    // with a reset, seen at the next check.
    probed_ = true;
    static constexpr std::string_view kProbe = "HTTP/1.1 100 Continue\r\n\r\n";
    if (::send(p.fd, kProbe.data(), kProbe.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
      gone_.store(true);
      return true;
    }
  }
  return false;
}

void Session::poll_job() {
  if (!job_ || phase_ == Phase::kClosed) return;
  const JobState st = srv_.scheduler_.state(job_);
  if (st == JobState::kQueued) {
    const bool expired = Clock::now() >= job_deadline_;
    const bool gone = !expired && peer_gone();
    if ((expired || gone) && srv_.scheduler_.cancel(job_)) {
      job_.reset();
      Reply r;
      if (gone) {
        // Logged and counted as 499 (the client closed the request), not as an overload 503.
        srv_.log_request(method_, route_.label, 499, t0_, 0);
        close();
        return;
      }
      srv_.metrics_.count_overload("queue_timeout");
      r.status = 503;
      r.body = error_body(route_.dialect, 503, "overloaded_error", 3040,
                          "the request waited longer than the queue timeout (--timeout); retry later");
      r.headers = kRetryAfterHeader;
      send(std::move(r), false);
      return;
    }
  }
  if (st == JobState::kDone || st == JobState::kCancelled) return;  // on_job_done follows
  poll_timer_.expires_after(kPollInterval);
  poll_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->poll_job();
  });
}

void Session::on_job_done() {
  if (phase_ == Phase::kClosed) job_.reset();
  if (!job_) return;
  poll_timer_.cancel();
  const std::shared_ptr<Job> job = std::move(job_);
  job_.reset();
  HttpServer::trim_heap(body_size_);
  body_size_ = 0;
  if (job->state == JobState::kCancelled) {
    // Dropped by the scheduler: the client was gone when its turn came.
    srv_.log_request(method_, route_.label, 499, t0_, 0);
    close();
    return;
  }
  Reply r;
  if (job->decision) {
    const Decision& d = *job->decision;
    srv_.metrics_.observe_decision(d.timings, d.input_tokens, job->queue_seconds, d.reused_tokens);
    // Exact state reuse (issue 7) is reported in headers, never in the strict SystemOne body.
    r.headers = decision_headers(d);
    const WireReply w = wire_success(d.body, route_.dialect);
    r.status = w.status;
    r.body = w.body;
    send(std::move(r), false, d.input_tokens);
    return;
  }
  try {
    std::rethrow_exception(job->error);
  } catch (const RequestError& e) {
    const WireReply w = wire_error(e, route_.dialect);
    r.status = w.status;
    r.body = w.body;
  } catch (const std::exception& e) {
    // An engine fault, not the client's mistake. The message is not logged: it could quote the request.
    const Error* ce = dynamic_cast<const Error*>(&e);
    {
      std::lock_guard<std::mutex> lock(srv_.log_mutex_);
      std::fprintf(stderr, "clef serve: engine fault (%s) on %s\n", ce ? error_kind_name(ce->kind()) : "exception",
                   route_.label);
    }
    r.status = 500;
    r.body = error_body(route_.dialect, 500, "api_error", 5012, "the engine failed on this request");
  }
  send(std::move(r), false);
}

void Session::fail(int status, const char* type, int cf_code, const std::string& message, bool close_after,
                   Dialect dialect) {
  // A refused body is released before the answer goes out (a 413 may have buffered up to --max-body).
  const std::size_t held = body_.capacity();
  std::string().swap(body_);
  decoder_.reset();
  chunk_.reset();
  HttpServer::trim_heap(held);
  if (held >= body_size_) body_size_ = 0;
  Reply r;
  r.status = status;
  r.body = error_body(dialect, status, type, cf_code, message);
  // RFC 9110 §11.6.1: a 401 names the scheme it wants.
  if (status == 401) r.headers = "WWW-Authenticate: Bearer\r\n";
  send(std::move(r), close_after);
}

void Session::send(Reply reply, bool close_after, std::int64_t tokens) {
  close_after = close_after || close_after_write_ || !keep_alive_ || srv_.stopping_.load();
  srv_.log_request(method_, route_.label, reply.status, t0_, tokens);
  out_.clear();
  out_ += "HTTP/1.1 " + std::to_string(reply.status) + " " + reason_phrase(reply.status) + "\r\n";
  out_ += "Content-Type: " + std::string(reply.content_type) + "\r\n";
  out_ += "Content-Length: " + std::to_string(reply.body.size()) + "\r\n";
  out_ += reply.headers;
  if (close_after) {
    out_ += "Connection: close\r\n";
  } else if (!http11_) {
    out_ += "Connection: keep-alive\r\n";
  }
  out_ += "\r\n";
  if (!head_) out_ += reply.body;
  close_after_write_ = close_after;
  phase_ = Phase::kWrite;
  arm(kWriteSeconds);
  asio::async_write(socket_, asio::buffer(out_),
                    [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_write(ec); });
}

void Session::on_write(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  disarm();
  std::string().swap(out_);
  ++served_;
  if (ec) {
    close();
    return;
  }
  if (close_after_write_) {
    linger_close();
    return;
  }
  read_request();
}

// ---------------------------------------------------------------------------------------------
// HttpServer

HttpServer::HttpServer(Engine& engine, const ServeOptions& options)
    : engine_(engine), options_(options), scheduler_(engine, options.queue),
      acceptor_(asio::make_strand(ioc_)),
      accept_retry_(acceptor_.get_executor()) {
  hosts_.names.push_back(options.host);
  for (const std::string& h : options.allow_hosts) {
    if (h == "*") {
      hosts_.any = true;
    } else {
      hosts_.names.push_back(h);
    }
  }
}

void HttpServer::log_request(const std::string& method, const char* label, int status, Clock::time_point t0,
                             std::int64_t tokens) {
  metrics_.count_request(label, status);
  if (options_.quiet) return;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(log_mutex_);
  std::fprintf(stderr, "clef serve: %s %s %d %.1f ms %lld tokens\n", method.c_str(), label, status, ms,
               static_cast<long long>(tokens));
}

std::string HttpServer::models_body() const {
  std::string desc = options_.description;
  if (desc.empty()) {
    desc = engine_.random_weights() ? "Clef decision model with RANDOM WEIGHTS (answers are meaningless), served by clef.cpp"
                                    : "Clef decision model served by clef.cpp";
  }
  // A release folder carries no date. TypeSafe documents YYYY-MM-DD but types the field as a plain
  // string (typesafe-sdk parses ""), so the field is present and empty, as mlx-decision does.
  return "{\"models\":[{\"name\":" + json_string(engine_.model_name()) + ",\"description\":" + json_string(desc) +
         ",\"release_date\":\"\"}]}";
}

std::list<std::weak_ptr<Session>>::iterator HttpServer::add_session(const std::shared_ptr<Session>& s) {
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  return sessions_.insert(sessions_.end(), s);
}

void HttpServer::remove_session(std::list<std::weak_ptr<Session>>::iterator it) {
  std::lock_guard<std::mutex> lock(sessions_mutex_);
  sessions_.erase(it);
}

void HttpServer::refuse(tcp::socket& socket) {
  // Beyond --max-connections: a short 503 written straight into the new socket's empty send
  // buffer (it never blocks), then the connection ends. No state is kept for it.
  metrics_.count_overload("connections");
  metrics_.count_request("unmatched", 503);
  static const std::string kRefusal = [] {
    const std::string body = error_body(Dialect::kSystemOne, 503, "overloaded_error", 3040,
                                        "too many open connections (--max-connections); retry later");
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n" + kRetryAfterHeader + "Connection: close\r\n\r\n" + body;
  }();
  beast::error_code ec;
  socket.non_blocking(true, ec);
  socket.send(asio::buffer(kRefusal), 0, ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
}

void HttpServer::accept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      if (stopping_.load()) {
        beast::error_code ignored;
        socket.close(ignored);
      } else if (open_.load() >= options_.max_connections) {
        refuse(socket);
      } else {
        open_.fetch_add(1);
        std::make_shared<Session>(*this, std::move(socket))->launch();
      }
    } else if (ec == asio::error::no_descriptors) {
      // Out of file descriptors: try again a little later instead of spinning on accept (the
      // I/O threads keep serving meanwhile).
      accept_retry_.expires_after(std::chrono::milliseconds(10));
      accept_retry_.async_wait([this](beast::error_code e) {
        if (!e && acceptor_.is_open()) accept();
      });
      return;
    }
    accept();
  });
}

void HttpServer::connection_ended() {
  if (open_.fetch_sub(1) == 1 && stopping_.load()) {
    asio::post(acceptor_.get_executor(), [this] { guard_.reset(); });
  }
}

void HttpServer::begin_shutdown() {
  stopping_.store(true);
  scheduler_.close();
  beast::error_code ec;
  acceptor_.close(ec);
  accept_retry_.cancel();
  // The references are taken under the lock but used (and dropped) after it: dropping the last
  // one runs ~Session, which takes the lock to deregister.
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex_);
    live.reserve(sessions_.size());
    for (const auto& w : sessions_) {
      if (auto s = w.lock()) live.push_back(std::move(s));
    }
  }
  for (const auto& s : live) s->shutdown_async();
  live.clear();
  if (open_.load() == 0) guard_.reset();
}

int HttpServer::run() {
  // Large bodies go straight to mmap and back to the system when freed (no dynamic threshold
  // growth that would keep a freed 64 MiB body on the heap).
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kTrimAfterBytes));
  // Connections need descriptors: use the hard limit.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  beast::error_code ec;
  asio::ip::address addr = asio::ip::make_address(options_.host, ec);
  if (ec) {
    tcp::resolver resolver(ioc_);
    const auto results = resolver.resolve(options_.host, "", ec);
    if (ec || results.empty()) throw IoError("cannot bind " + options_.host + ": unknown host");
    addr = results.begin()->endpoint().address();
  }
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  acceptor_.open(addr.is_v6() ? tcp::v6() : tcp::v4(), ec);
  if (ec) throw IoError("cannot bind " + where + " (" + ec.message() + ")");
  // SO_REUSEADDR only (restart without TIME_WAIT trouble); never SO_REUSEPORT, which would let a
  // second server share the port and silently take half the connections.
  acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  acceptor_.bind(tcp::endpoint(addr, static_cast<unsigned short>(options_.port)), ec);
  if (ec) {
    throw IoError("cannot bind " + where + " (address in use, not local, or a privileged port)");
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw IoError("cannot listen on " + where + " (" + ec.message() + ")");
  const int port = acceptor_.local_endpoint().port();
  std::fprintf(stderr, "clef serve: listening on http://%s:%d (model %s, queue %zu, kernels %s)\n",
               options_.host.find(':') != std::string::npos ? ("[" + options_.host + "]").c_str() : options_.host.c_str(),
               port, printable(engine_.model_name()).c_str(), options_.queue, ops::isa_name(ops::active_isa()));
  std::fflush(stderr);

  // The signal thread: the first SIGINT/SIGTERM stops accepting (in-flight and queued requests
  // finish, their answers carry Connection: close); a second one exits at once with status 130.
  std::atomic<bool> done{false};
  std::thread signals([this, &done] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);  // sent by run() itself to end this thread
    int stops = 0;
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (sig == SIGUSR1 && done.load()) return;
      if (sig == SIGUSR1) continue;
      if (++stops == 1) {
        std::fprintf(stderr, "clef serve: shutting down (finishing requests in flight; signal again to quit now)\n");
        asio::post(acceptor_.get_executor(), [this] { begin_shutdown(); });
      } else {
        std::_Exit(130);
      }
    }
  });

  guard_.emplace(ioc_.get_executor());
  accept();
  std::vector<std::thread> io;
  const std::size_t n = std::max<std::size_t>(1, options_.io_threads);
  for (std::size_t i = 1; i < n; ++i) io.emplace_back([this] { ioc_.run(); });
  ioc_.run();
  for (auto& t : io) t.join();
  validators_.join();
  done.store(true);
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  std::fprintf(stderr, "clef serve: stopped\n");
  return 0;
}

}  // namespace

void block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A peer that closes early must not kill the process when the answer is written.
  signal(SIGPIPE, SIG_IGN);
}

int serve(Engine& engine, const ServeOptions& options) {
  HttpServer server(engine, options);
  return server.run();
}

}  // namespace clef::server

#include "server/server.h"

#include "ops/isa.h"

#include <cctype>

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/json_reader.h"
#include "decision/dialects.h"
#include "decision/render.h"
#include "decision/request_error.h"
#include "server/metrics.h"
#include "server/readiness.h"
#include "server/routes.h"
#include "server/scheduler.h"

namespace clef::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";
/// Seconds a client is told to wait after a 503 (queue full or queue deadline passed).
constexpr int kRetryAfterSeconds = 1;
/// Spare HTTP threads beyond queue + 1, for /health, /metrics and fast refusals.
constexpr std::size_t kSpareThreads = 8;

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

/// An error that is not a request validation error (auth, 404, 405, 413, 415, 503, 500) in the
/// dialect's shape: SystemOne {"detail":{"error_type","message"}}; Cloudflare envelope with
/// `cf_code`; OpenRouter {"error":{"code","message","metadata":{"type"}}}.
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
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

/// Numeric host and port of a socket address, formatted as cpp-httplib formats Request's
/// remote_addr / local_addr.
bool numeric_address(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST];
  char s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  host = h;
  port = std::atoi(s);
  return true;
}

/// The socket of the connection a request arrived on, or -1.
///
/// cpp-httplib 0.11.4 gives handlers no access to their connection, so it is found by its
/// address pair: among this process's sockets, the one whose local and peer addresses are the
/// request's. A TCP connection's address pair is unique while it is open, and the connection
/// stays open while its handler runs, so the answer cannot name another connection.
int connection_socket(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0 || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof local, plen = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    std::string lhost, phost;
    int lport = -1, pport = -1;
    if (!numeric_address(local, llen, lhost, lport) || !numeric_address(peer, plen, phost, pport)) continue;
    if (lport == req.local_port && pport == req.remote_port && lhost == req.local_addr && phost == req.remote_addr) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

/// False when the peer closed (or reset) the connection. A peer that only half-closed its sending
/// side also reads as gone (HTTP clients do not do that while waiting for an answer).
bool peer_connected(int fd) {
  if (fd < 0) return true;  // unknown: assume the client waits
  pollfd p{};
  p.fd = fd;
  p.events = POLLIN | POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return true;
  if ((p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) != 0) return false;
  if ((p.revents & POLLIN) != 0) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n != 0;  // 0 = orderly shutdown; > 0 = pipelined bytes; < 0 = EAGAIN and the like
  }
  return true;
}

/// The connection socket to shut down after the current answer is written (this thread's
/// connection), or -1. Reset at the start of every request.
thread_local int t_close_after_write = -1;

/// The HTTP layer: cpp-httplib handlers around one Scheduler (see server.h and
/// docs/ARCHITECTURE.md "The HTTP server"). One instance per serve() call.
class HttpServer {
 public:
  HttpServer(Engine& engine, const ServeOptions& options)
      : engine_(engine), options_(options), scheduler_(engine, options.queue) {}

  int run();

 private:
  void install_routes();
  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res);
  void body_route(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader);
  void decide(const httplib::Request& req, httplib::Response& res, const RouteMatch& route, std::string body,
              std::int64_t& tokens);
  bool authorized(const httplib::Request& req) const;
  void reply(httplib::Response& res, int status, std::string body) const;
  void reply_error(httplib::Response& res, Dialect dialect, int status, const char* type, int cf_code,
                   const std::string& message) const;
  void finish(const httplib::Request& req, const httplib::Response& res, const char* label, Clock::time_point t0,
              std::int64_t tokens);
  std::string models_body() const;

  Engine& engine_;
  const ServeOptions& options_;
  Scheduler scheduler_;
  Metrics metrics_;
  httplib::Server http_;
  std::mutex log_mutex_;
};

void HttpServer::reply(httplib::Response& res, int status, std::string body) const {
  res.status = status;
  res.set_content(std::move(body), kJson);
}

void HttpServer::reply_error(httplib::Response& res, Dialect dialect, int status, const char* type, int cf_code,
                             const std::string& message) const {
  reply(res, status, error_body(dialect, status, type, cf_code, message));
}

bool HttpServer::authorized(const httplib::Request& req) const {
  if (options_.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  // The auth scheme is case-insensitive (RFC 7235 §2.1): "Bearer", "bearer", "BEARER".
  constexpr std::string_view kBearer = "bearer ";
  if (h.size() <= kBearer.size()) return false;
  for (std::size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(h[i])) != kBearer[i]) return false;
  }
  return same_secret(h.substr(kBearer.size()), options_.api_key);
}

void HttpServer::finish(const httplib::Request& req, const httplib::Response& res, const char* label,
                        Clock::time_point t0, std::int64_t tokens) {
  metrics_.count_request(label, res.status);
  if (options_.quiet) return;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  // Method names are from a fixed set once routed; anything else is logged as "-".
  const bool known_method = req.method == "GET" || req.method == "HEAD" || req.method == "POST" ||
                            req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE" ||
                            req.method == "OPTIONS";
  std::lock_guard<std::mutex> lock(log_mutex_);
  std::fprintf(stderr, "clef serve: %s %s %d %.1f ms %lld tokens\n", known_method ? req.method.c_str() : "-", label,
               res.status, ms, static_cast<long long>(tokens));
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

httplib::Server::HandlerResponse HttpServer::pre_route(const httplib::Request& req, httplib::Response& res) {
  t_close_after_write = -1;
  // Methods that carry a body are answered by body_route() after the body is read (bounded).
  if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE") {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  const auto t0 = Clock::now();
  const RouteMatch route = match_route(req.path);
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (route.endpoint == Endpoint::kNone) {
    reply_error(res, Dialect::kSystemOne, 404, "not_found_error", 7000, "no route for this path");
  } else if (!get || std::string_view(route.method) != "GET") {
    res.set_header("Allow", std::string_view(route.method) == "GET" ? "GET, HEAD" : route.method);
    reply_error(res, route.dialect, 405, "method_not_allowed", 7000,
                std::string("this route allows ") + route.method + " only");
  } else if (route.endpoint == Endpoint::kHealth) {
    reply(res, 200, "{\"status\":\"ok\",\"model\":" + json_string(engine_.model_name()) + ",\"loaded\":true}");
  } else if (route.endpoint == Endpoint::kReady) {  // unauthenticated like /health: the balancer's check
    const ReadinessReply r = readiness({true, scheduler_.closed(), scheduler_.depth(), scheduler_.capacity(),
                                        scheduler_.running()}, engine_.model_name());
    if (r.status != 200) res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
    reply(res, r.status, r.body);
  } else if (!authorized(req)) {
    reply_error(res, Dialect::kSystemOne, 401, "authentication_error", 10000, "missing or invalid API key");
  } else if (route.endpoint == Endpoint::kModels) {
    reply(res, 200, models_body());
  } else if (route.endpoint == Endpoint::kMetrics) {
    QueueGauges g;
    g.depth = scheduler_.depth();
    g.capacity = options_.queue;
    g.running = scheduler_.running();
    g.cancelled = scheduler_.cancelled();
    res.status = 200;
    res.set_content(metrics_.render(g, engine_.state_cache_stats()), "text/plain; version=0.0.4; charset=utf-8");
  }
  finish(req, res, route.label, t0, 0);
  return httplib::Server::HandlerResponse::Handled;
}

void HttpServer::body_route(const httplib::Request& req, httplib::Response& res,
                            const httplib::ContentReader& reader) {
  const auto t0 = Clock::now();
  const RouteMatch route = match_route(req.path);
  const bool wanted = route.decision() && req.method == "POST";
  std::int64_t tokens = 0;

  // Content-Encoding: cpp-httplib decodes gzip, deflate and br; anything else is refused before
  // the body is read.
  const std::string encoding = req.get_header_value("Content-Encoding");
  const bool encoding_ok = encoding.empty() || encoding == "identity" || encoding == "gzip" ||
                           encoding == "deflate" || encoding == "br";

  // Read (or, for refused requests, drain) the body, never holding more than max_body_bytes.
  std::string body;
  std::size_t seen = 0;
  bool too_large = false;
  const bool keep = wanted && encoding_ok;
  const bool read_ok = reader([&](const char* data, std::size_t n) {
    if (seen + n > options_.max_body_bytes) {
      too_large = true;
      return false;
    }
    seen += n;
    if (keep) body.append(data, n);
    return true;
  });
  const bool drained = res.status == 413;  // cpp-httplib skipped an over-long Content-Length body
  too_large = too_large || drained;
  if (!read_ok && !drained) {
    // Unread bytes of this body would be parsed as the next request: end the connection once the
    // answer is written (the logger hook runs right after the write, on this thread).
    t_close_after_write = connection_socket(req);
  }

  if (route.endpoint == Endpoint::kNone) {
    reply_error(res, Dialect::kSystemOne, 404, "not_found_error", 7000, "no route for this path");
  } else if (!route.decision() || req.method != "POST") {
    res.set_header("Allow", std::string_view(route.method) == "GET" ? "GET, HEAD" : route.method);
    reply_error(res, route.dialect, 405, "method_not_allowed", 7000,
                std::string("this route allows ") + route.method + " only");
  } else if (!authorized(req)) {
    reply_error(res, route.dialect, 401, "authentication_error", 10000, "missing or invalid API key");
  } else if (too_large) {
    reply_error(res, route.dialect, 413, "request_too_large", 5021,
                "the request body exceeds " + std::to_string(options_.max_body_bytes) + " bytes (--max-body)");
  } else if (!read_ok) {
    reply_error(res, route.dialect, 400, "invalid_request_error", 6003,
                "the request body could not be read (malformed chunked encoding, bad compression or a timeout)");
  } else if (!encoding_ok) {
    reply_error(res, route.dialect, 415, "unsupported_media_type", 6003,
                "unsupported Content-Encoding (accepted: identity, gzip, deflate, br)");
  } else {
    decide(req, res, route, std::move(body), tokens);
  }
  finish(req, res, route.label, t0, tokens);
}

void HttpServer::decide(const httplib::Request& req, httplib::Response& res, const RouteMatch& route, std::string body,
                        std::int64_t& tokens) {
  if (route.endpoint == Endpoint::kCloudflare) {
    const std::string& m = route.model;
    const bool known = m == "clef" || m == "clef-flash" || m == engine_.model_name() ||
                       std::find(options_.aliases.begin(), options_.aliases.end(), m) != options_.aliases.end();
    if (!known) {
      reply_error(res, Dialect::kCloudflare, 400, "unknown_model", 7000, "No route for that URI: unknown model");
      return;
    }
  }
  const int fd = connection_socket(req);
  auto job = scheduler_.submit(std::move(body), route.dialect, [fd] { return peer_connected(fd); });
  if (!job) {
    metrics_.count_overload("queue_full");
    res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
    reply_error(res, route.dialect, 503, "overloaded_error", 3040, "the decision queue is full; retry later");
    return;
  }
  const auto deadline = job->enqueued + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(options_.timeout_seconds));
  const JobState state =
      scheduler_.wait(job, deadline, [fd] { return peer_connected(fd); }, std::chrono::milliseconds(50));
  if (state == JobState::kCancelled) {
    // Either the client is gone (nobody reads this answer) or the queue deadline passed.
    if (Clock::now() < deadline && !peer_connected(fd)) {
      // Logged and counted as 499 (the client closed the request), not as an overload 503.
      reply_error(res, route.dialect, 499, "client_closed_request", 3040, "the client disconnected while queued");
      return;
    }
    metrics_.count_overload("queue_timeout");
    res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
    reply_error(res, route.dialect, 503, "overloaded_error", 3040,
                "the request waited longer than the queue timeout (--timeout); retry later");
    return;
  }
  if (job->decision) {
    const Decision& d = *job->decision;
    tokens = d.input_tokens;
    metrics_.observe_decision(d.timings, d.input_tokens, job->queue_seconds, d.reused_tokens);
    // Exact state reuse (issue 7) is reported in headers, never in the strict SystemOne body.
    res.set_header("X-Clef-State-Cache", state_cache_use_name(d.state_cache));
    res.set_header("X-Clef-Reused-Tokens", std::to_string(d.reused_tokens));
    res.set_header("X-Clef-State-Key", d.state_key);  // routing key (issue 15); a request's own is never read
    const WireReply w = wire_success(d.body, route.dialect);
    reply(res, w.status, w.body);
    return;
  }
  try {
    std::rethrow_exception(job->error);
  } catch (const RequestError& e) {
    const WireReply w = wire_error(e, route.dialect);
    reply(res, w.status, w.body);
  } catch (const std::exception& e) {
    // An engine fault, not the client's mistake. The message is not logged: it could quote the request.
    const Error* ce = dynamic_cast<const Error*>(&e);
    {
      std::lock_guard<std::mutex> lock(log_mutex_);
      std::fprintf(stderr, "clef serve: engine fault (%s) on %s\n", ce ? error_kind_name(ce->kind()) : "exception",
                   route.label);
    }
    reply_error(res, route.dialect, 500, "api_error", 5012, "the engine failed on this request");
  }
}

void HttpServer::install_routes() {
  http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return pre_route(req, res);
  });
  const auto body_handler = [this](const httplib::Request& req, httplib::Response& res,
                                   const httplib::ContentReader& reader) { body_route(req, res, reader); };
  http_.Post(".*", body_handler);
  http_.Put(".*", body_handler);
  http_.Patch(".*", body_handler);
  http_.Delete(".*", body_handler);
  // Statuses cpp-httplib produces itself (malformed request line or headers, URI too long, a
  // handler exception) get a JSON body too. Our own answers already have one.
  http_.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                         httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const int status = res.status;
    const char* type = status == 413 ? "request_too_large" : status >= 500 ? "api_error" : "invalid_request_error";
    reply_error(res, Dialect::kSystemOne, status, type, 0, "malformed HTTP request");
    res.status = status;
    finish(req, res, "unmatched", Clock::now(), 0);
    return httplib::Server::HandlerResponse::Handled;
  }));
  // Called by cpp-httplib right after an answer is written.
  // A connection marked by body_route() ends here: no more writes (the next request on it fails),
  // and its close resets the connection, so that a client still sending a refused body is told
  // at once instead of blocking on a zero receive window.
  http_.set_logger([](const httplib::Request&, const httplib::Response&) {
    if (t_close_after_write >= 0) {
      const linger reset{1, 0};
      setsockopt(t_close_after_write, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
      shutdown(t_close_after_write, SHUT_RDWR);
      t_close_after_write = -1;
    }
  });
  http_.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr) {
    {
      std::lock_guard<std::mutex> lock(log_mutex_);
      std::fprintf(stderr, "clef serve: internal error in a handler\n");
    }
    const RouteMatch route = match_route(req.path);
    reply_error(res, route.dialect, 500, "api_error", 5012, "internal server error");
  });
}

int HttpServer::run() {
  install_routes();
  const std::size_t threads = options_.queue + 1 + kSpareThreads;
  http_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // cpp-httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and
  // silently take half the connections. SO_REUSEADDR only: restart without TIME_WAIT trouble, but
  // an address in use is an error.
  http_.set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http_.set_payload_max_length(options_.max_body_bytes);
  // Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm holds the
  // body until the client's delayed ACK (~40 ms per answer on Linux).
  http_.set_tcp_nodelay(true);
  http_.set_keep_alive_timeout(5);
  http_.set_keep_alive_max_count(100);
  http_.set_read_timeout(30, 0);
  http_.set_write_timeout(30, 0);

  int port = options_.port;
  if (port == 0) {
    port = http_.bind_to_any_port(options_.host);
    if (port < 0) throw IoError("cannot bind " + options_.host + " on any port");
  } else if (!http_.bind_to_port(options_.host, port)) {
    throw IoError("cannot bind " + options_.host + ":" + std::to_string(port) +
                  " (address in use, not local, or a privileged port)");
  }
  std::fprintf(stderr, "clef serve: listening on http://%s:%d (model %s, queue %zu, kernels %s)\n",
               options_.host.find(':') != std::string::npos ? ("[" + options_.host + "]").c_str() : options_.host.c_str(),
               port, printable(engine_.model_name()).c_str(), options_.queue, ops::isa_name(ops::active_isa()));
  std::fflush(stderr);

  // The signal thread: the first SIGINT/SIGTERM stops accepting (in-flight and queued requests
  // finish); a second one exits at once with status 130.
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
        scheduler_.close();
        http_.stop();
      } else {
        std::_Exit(130);
      }
    }
  });
  const bool ok = http_.listen_after_bind();
  done.store(true);
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  std::fprintf(stderr, "clef serve: stopped\n");
  return ok ? 0 : 5;
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

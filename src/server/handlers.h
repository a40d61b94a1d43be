// SPDX-License-Identifier: MIT
// The endpoint handlers of `clef serve`: each turns a request (its route, and for a decision its
// finished job) into a Reply. No sockets and no HTTP library types; the connection
// (server/connection.h) reads requests and writes what these return. Routes: docs/COMPATIBILITY.md
// "Routes"; a new route is a row of the route table (server/routes.cc), a GET route's reply here.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "decision/request.h"
#include "decision/request_error.h"
#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/reply.h"
#include "server/routes.h"
#include "server/scheduler.h"
#include "server/serve_options.h"

namespace clef::server {

/// The access log (stderr, one line per answer) and the request counters.
class AccessLog {
 public:
  AccessLog(Metrics& metrics, bool quiet) : metrics_(metrics), quiet_(quiet) {}
  /// Counts one answer and writes its line ("clef serve: POST /v1/systemone 200 3.1 ms 42 tokens").
  /// `method` is a GateVerdict::method_label, `route` a route label: never client-chosen text.
  void request(std::string_view method, const char* route, int status, std::chrono::steady_clock::time_point t0,
               std::int64_t tokens);
  /// A line about the server itself ("clef serve: " + text), never request content.
  void note(const std::string& text);

 private:
  Metrics& metrics_;
  bool quiet_;
  std::mutex mutex_;
};

/// What the handlers read of the server.
struct HandlerContext {
  const Engine& engine;
  const Scheduler& scheduler;
  const Metrics& metrics;
  const ServeOptions& options;
  ServedModel served;  ///< the engine's name and the --alias names (decision/request.h serves_model())
  AccessLog& log;
};

/// The answer of a request that needs no body: 404 for no route, 405 (with `Allow`) for a wrong
/// method, else GET /health, /ready, /v1/models or /metrics.
Reply route_reply(const RouteMatch& route, std::string_view method, const HandlerContext& ctx);

/// The 400 unknown_model answer when a Cloudflare path's {model} is not served, else nullopt.
std::optional<Reply> refuse_path_model(const RouteMatch& route, const HandlerContext& ctx);

/// A body the validator refused: the engine's exact 4xx in the route's dialect.
Reply validation_reply(const RequestError& error, Dialect dialect);

/// 503 + Retry-After: the decision queue is full (--queue).
Reply queue_full_reply(Dialect dialect);
/// 503 + Retry-After: the request waited in the queue past --timeout.
Reply queue_timeout_reply(Dialect dialect);

/// The answer of a finished decision job (state kDone): the decision in the dialect's shape
/// with its X-Clef-* headers (`route_key`: server/route_key.h, omitted when ""), the engine's
/// 4xx for a refused body, or 500 for an engine fault (logged by kind, never with the request's
/// text). `tokens` is set to the input tokens.
Reply decision_reply(const Job& job, Dialect dialect, const char* route_label, const std::string& route_key,
                     const HandlerContext& ctx, std::int64_t& tokens);

/// The answer of a decision that threw `error` (Engine::prepare or Engine::decide): the engine's
/// 4xx for a RequestError, else 500 for an engine fault (logged by kind, never with the request's
/// text).
Reply failure_reply(const std::exception_ptr& error, Dialect dialect, const char* route_label,
                    const HandlerContext& ctx);

}  // namespace clef::server

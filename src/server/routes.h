// SPDX-License-Identifier: MIT
// The route table of `clef serve` (docs/PROTOCOL.md §2.4): one row per route with its path, its
// method, the wire dialect of its answers, whether it needs the API key and what answers it. A
// new route is one row in routes.cc (and, for a GET route, its handler in handlers.cc). Pure string
// matching; no HTTP library types.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "decision/request.h"

namespace clef::server {

struct HandlerContext;  // server/handlers.h
struct Reply;           // server/reply.h

/// The endpoints.
enum class Endpoint : unsigned char {
  kNone,        ///< no such path
  kSystemOne,   ///< POST /v1/systemone (also /systemone)
  kDecisions,   ///< POST /v1/decisions: OpenAI's Decisions contract, or a System One body (by its shape)
  kCloudflare,  ///< POST /ai/run/@cf/cloudflare/{model}, /client/v4/accounts/{id}/ai/run/@cf/cloudflare/{model}
  kOpenRouter,  ///< POST /api/alpha/decisions
  kModels,      ///< GET /v1/models
  kHealth,      ///< GET /health (liveness)
  kReady,       ///< GET /ready (readiness: 503 while the decision queue is full)
  kMetrics,     ///< GET /metrics
};

/// The answer of a GET route (handlers.cc); a decision route has none: its body goes to the scheduler.
using RouteHandler = Reply (*)(const HandlerContext&);

/// GET /health: liveness and the model's name.
Reply health_reply(const HandlerContext& ctx);
/// GET /ready: readiness (readiness.h).
Reply ready_reply(const HandlerContext& ctx);
/// GET /v1/models: TypeSafe's and OpenAI's model list in one body.
Reply models_reply(const HandlerContext& ctx);
/// GET /metrics: the Prometheus text (metrics.h).
Reply metrics_reply(const HandlerContext& ctx);

/// One row of the route table.
struct Route {
  /// The path, or its template with `{name}` segments that match one non-empty segment
  /// ("/ai/run/@cf/cloudflare/{model}"); also the label in logs and metric labels, so no
  /// client-chosen text reaches them.
  const char* path;
  const char* method;  ///< the one allowed method: "POST", or "GET" (HEAD too)
  /// Wire dialect of answers and errors; /v1/decisions has kDecisions until its body is read, then
  /// the connection sets the body's contract (kOpenAI or kSystemOne).
  Dialect dialect;
  Endpoint endpoint;
  bool needs_key;        ///< false: answered without the API key (the balancer's checks)
  RouteHandler handler;  ///< the GET routes' answer; nullptr for a decision
};

/// The route table, in match order.
std::span<const Route> route_table() noexcept;

/// A resolved path.
struct RouteMatch {
  Endpoint endpoint = Endpoint::kNone;
  /// The row's path or template ("/v1/systemone", "/ai/run/@cf/cloudflare/{model}"), "unmatched"
  /// for no route: the label of logs and metrics.
  const char* label = "unmatched";
  const char* method = "";                ///< the one allowed method ("POST" or "GET"; HEAD too for GET)
  Dialect dialect = Dialect::kSystemOne;  ///< see Route::dialect
  bool needs_key = true;                  ///< see Route::needs_key
  RouteHandler handler = nullptr;         ///< see Route::handler
  std::string model;                      ///< templates with {model}: that path segment
  bool decision() const noexcept { return endpoint != Endpoint::kNone && handler == nullptr; }
  /// The route takes `m` ("GET" routes take "HEAD" too); false for no route.
  bool allows(std::string_view m) const noexcept {
    return endpoint != Endpoint::kNone && (m == method || (m == "HEAD" && std::string_view(method) == "GET"));
  }
};

/// Resolves a URL path (already percent-decoded, without the query string) through route_table().
RouteMatch match_route(std::string_view path);

}  // namespace clef::server

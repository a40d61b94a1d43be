// The route table of `clef serve` (docs/PROTOCOL.md §2.4): which path is which endpoint, which wire
// dialect it speaks and which methods it allows. Pure string matching; no HTTP library types.
#pragma once

#include <string>
#include <string_view>

#include "decision/request.h"

namespace clef::server {

/// The endpoints.
enum class Endpoint : unsigned char {
  kNone,        ///< no such path
  kSystemOne,   ///< POST /v1/systemone (also /v1/decisions, /systemone)
  kCloudflare,  ///< POST /ai/run/@cf/cloudflare/{model}, /client/v4/accounts/{id}/ai/run/@cf/cloudflare/{model}
  kOpenRouter,  ///< POST /api/alpha/decisions
  kModels,      ///< GET /v1/models
  kHealth,      ///< GET /health (liveness)
  kReady,       ///< GET /ready (readiness: 503 while the decision queue is full)
  kMetrics,     ///< GET /metrics
};

/// A resolved path.
struct RouteMatch {
  Endpoint endpoint = Endpoint::kNone;
  /// Route template used in logs and metric labels ("/v1/systemone", "unmatched"); never the raw
  /// path, so no client-chosen text reaches the logs.
  const char* label = "unmatched";
  const char* method = "";                ///< the one allowed method ("POST" or "GET"; HEAD too for GET)
  Dialect dialect = Dialect::kSystemOne;  ///< wire dialect of answers and errors
  std::string model;                      ///< Cloudflare routes: the {model} path segment
  bool decision() const noexcept {
    return endpoint == Endpoint::kSystemOne || endpoint == Endpoint::kCloudflare || endpoint == Endpoint::kOpenRouter;
  }
};

/// Resolves a URL path (already percent-decoded, without the query string).
RouteMatch match_route(std::string_view path);

}  // namespace clef::server

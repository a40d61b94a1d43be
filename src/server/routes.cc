// SPDX-License-Identifier: MIT
#include "server/routes.h"

#include <array>

namespace clef::server {
namespace {

constexpr std::array kRoutes{
    Route{"/v1/systemone", "POST", Dialect::kSystemOne, Endpoint::kSystemOne, true, nullptr},
    Route{"/v1/decisions", "POST", Dialect::kDecisions, Endpoint::kDecisions, true, nullptr},
    Route{"/systemone", "POST", Dialect::kSystemOne, Endpoint::kSystemOne, true, nullptr},
    Route{"/api/alpha/decisions", "POST", Dialect::kOpenRouter, Endpoint::kOpenRouter, true, nullptr},
    Route{"/ai/run/@cf/cloudflare/{model}", "POST", Dialect::kCloudflare, Endpoint::kCloudflare, true, nullptr},
    Route{"/client/v4/accounts/{id}/ai/run/@cf/cloudflare/{model}", "POST", Dialect::kCloudflare, Endpoint::kCloudflare,
          true, nullptr},
    Route{"/v1/models", "GET", Dialect::kSystemOne, Endpoint::kModels, true, &models_reply},
    Route{"/health", "GET", Dialect::kSystemOne, Endpoint::kHealth, false, &health_reply},
    Route{"/ready", "GET", Dialect::kSystemOne, Endpoint::kReady, false, &ready_reply},
    Route{"/metrics", "GET", Dialect::kSystemOne, Endpoint::kMetrics, true, &metrics_reply},
};

/// Matches `path` against a row's path or template: literal text byte for byte, a `{name}` one
/// non-empty segment (up to the next '/'); the {model} segment goes to `model`.
bool match_template(std::string_view tmpl, std::string_view path, std::string& model) {
  while (!tmpl.empty()) {
    if (tmpl.front() != '{') {
      if (path.empty() || path.front() != tmpl.front()) return false;
      tmpl.remove_prefix(1);
      path.remove_prefix(1);
      continue;
    }
    const std::size_t close = tmpl.find('}');
    const std::string_view name = tmpl.substr(1, close - 1);
    tmpl.remove_prefix(close + 1);
    const std::size_t slash = path.find('/');
    const std::string_view segment = path.substr(0, slash);
    if (segment.empty()) return false;
    if (name == "model") model = std::string(segment);
    path.remove_prefix(segment.size());
  }
  return path.empty();
}

}  // namespace

std::span<const Route> route_table() noexcept { return kRoutes; }

RouteMatch match_route(std::string_view path) {
  for (const Route& r : kRoutes) {
    RouteMatch m;
    if (!match_template(r.path, path, m.model)) continue;
    m.endpoint = r.endpoint;
    m.label = r.path;
    m.method = r.method;
    m.dialect = r.dialect;
    m.needs_key = r.needs_key;
    m.handler = r.handler;
    return m;
  }
  return {};
}

}  // namespace clef::server

#include "server/routes.h"

namespace clef::server {
namespace {

/// The {segment} at the start of `rest` up to the next '/', or "" when empty.
std::string_view take_segment(std::string_view& rest) {
  const std::size_t slash = rest.find('/');
  const std::string_view seg = rest.substr(0, slash);
  rest.remove_prefix(slash == std::string_view::npos ? rest.size() : slash);
  return seg;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

RouteMatch make(Endpoint e, const char* label, const char* method, Dialect d) {
  RouteMatch m;
  m.endpoint = e;
  m.label = label;
  m.method = method;
  m.dialect = d;
  return m;
}

}  // namespace

RouteMatch match_route(std::string_view path) {
  if (path == "/v1/systemone") return make(Endpoint::kSystemOne, "/v1/systemone", "POST", Dialect::kSystemOne);
  if (path == "/v1/decisions") return make(Endpoint::kSystemOne, "/v1/decisions", "POST", Dialect::kSystemOne);
  if (path == "/systemone") return make(Endpoint::kSystemOne, "/systemone", "POST", Dialect::kSystemOne);
  if (path == "/api/alpha/decisions") {
    return make(Endpoint::kOpenRouter, "/api/alpha/decisions", "POST", Dialect::kOpenRouter);
  }
  if (path == "/v1/models") return make(Endpoint::kModels, "/v1/models", "GET", Dialect::kSystemOne);
  if (path == "/health") return make(Endpoint::kHealth, "/health", "GET", Dialect::kSystemOne);
  if (path == "/ready") return make(Endpoint::kReady, "/ready", "GET", Dialect::kSystemOne);
  if (path == "/metrics") return make(Endpoint::kMetrics, "/metrics", "GET", Dialect::kSystemOne);

  constexpr std::string_view kRun = "/ai/run/@cf/cloudflare/";
  constexpr std::string_view kAccounts = "/client/v4/accounts/";
  std::string_view rest = path;
  const char* label = "/ai/run/@cf/cloudflare/{model}";
  if (starts_with(rest, kAccounts)) {
    rest.remove_prefix(kAccounts.size());
    if (take_segment(rest).empty()) return {};
    label = "/client/v4/accounts/{id}/ai/run/@cf/cloudflare/{model}";
  }
  if (!starts_with(rest, kRun)) return {};
  rest.remove_prefix(kRun.size());
  const std::string_view model = take_segment(rest);
  if (model.empty() || !rest.empty()) return {};
  RouteMatch m = make(Endpoint::kCloudflare, label, "POST", Dialect::kCloudflare);
  m.model = std::string(model);
  return m;
}

}  // namespace clef::server

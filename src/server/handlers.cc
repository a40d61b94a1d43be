// SPDX-License-Identifier: MIT
#include "server/handlers.h"

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/json_text.h"
#include "core/mapped_file.h"
#include "decision/dialects.h"
#include "decision/json_value.h"
#include "decision/render.h"
#include "server/readiness.h"

namespace clef::server {
namespace {

/// The headers a decision answer carries besides the body (exact state reuse:
/// docs/ARCHITECTURE.md "Exact state reuse"). Adding a header computed engine-side into Decision is one line here.
std::string decision_headers(const Decision& d, const std::string& route_key) {
  std::string h;
  h += "X-Clef-State-Cache: " + std::string(state_cache_use_name(d.state_cache)) + "\r\n";
  h += "X-Clef-Reused-Tokens: " + std::to_string(d.reused_tokens) + "\r\n";
  // The state cache's key (docs/DEPLOYMENT.md); a request's own X-Clef-State-Key is never read.
  h += "X-Clef-State-Key: " + d.state_key + "\r\n";
  // The balancer's routing key, the same string its body route hashes (server/route_key.h).
  if (!route_key.empty()) h += "X-Clef-Route-Key: " + route_key + "\r\n";
  return h;
}

}  // namespace

Reply health_reply(const HandlerContext& ctx) {
  Reply r;
  r.body = "{\"status\":\"ok\",\"model\":" + json_string(ctx.engine.model_name()) + ",\"loaded\":true}";
  return r;
}

Reply ready_reply(const HandlerContext& ctx) {
  const Scheduler& q = ctx.scheduler;
  const ReadinessReply ready =
      readiness({true, q.closed(), q.depth(), q.capacity(), q.running(), q.options().max_running},
                ctx.engine.model_name());
  Reply r;
  r.status = ready.status;
  r.body = ready.body;
  if (r.status != 200) r.headers = retry_after_header();
  return r;
}

Reply models_reply(const HandlerContext& ctx) {
  std::string desc = ctx.options.description;
  if (desc.empty()) {
    desc = ctx.engine.random_weights()
               ? "Clef decision model with RANDOM WEIGHTS (answers are meaningless), served by clef.cpp"
               : "Clef decision model served by clef.cpp";
  }
  // A release folder carries no date. TypeSafe documents YYYY-MM-DD but types the field as a plain
  // string (typesafe-sdk parses ""), so the field is present and empty, as mlx-decision does.
  // One body for both clients (docs/PROTOCOL.md §7.1): TypeSafe's `models` list and OpenAI's list
  // object (`object`, `data` with the model's `id`), which the `openai` SDK's models.list() reads.
  const std::string name = json_string(ctx.engine.model_name());
  Reply r;
  r.body = "{\"models\":[{\"name\":" + name + ",\"description\":" + json_string(desc) +
           ",\"release_date\":\"\"}],\"object\":\"list\",\"data\":[{\"id\":" + name +
           ",\"object\":\"model\",\"created\":0,\"owned_by\":\"clef.cpp\"}]}";
  return r;
}

Reply metrics_reply(const HandlerContext& ctx) {
  QueueGauges g;
  g.depth = ctx.scheduler.depth();
  g.capacity = ctx.options.queue;
  g.running = ctx.scheduler.running();
  g.cancelled = ctx.scheduler.cancelled();
  g.max_running = ctx.scheduler.options().max_running;
  g.reserved_bytes = ctx.scheduler.reserved_bytes();
  g.memory_budget = ctx.scheduler.options().memory_budget;
  g.json_texts_parsed = json_texts_parsed();
  g.files_mapped = MappedFile::files_mapped();
  Reply r;
  r.body = ctx.metrics.render(g, ctx.engine.state_cache_stats());
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  return r;
}

void AccessLog::request(std::string_view method, const char* route, int status,
                        std::chrono::steady_clock::time_point t0, std::int64_t tokens) {
  metrics_.count_request(route, status);
  if (quiet_) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(stderr, "clef serve: %.*s %s %d %.1f ms %lld tokens\n", static_cast<int>(method.size()), method.data(),
               route, status, ms, static_cast<long long>(tokens));
}

void AccessLog::note(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::fprintf(stderr, "clef serve: %s\n", text.c_str());
}

Reply route_reply(const RouteMatch& route, std::string_view method, const HandlerContext& ctx) {
  if (route.endpoint == Endpoint::kNone)
    return error_reply(http_error::kNotFound, Dialect::kSystemOne, "no route for this path");
  if (!route.allows(method)) {
    Reply r = error_reply(http_error::kMethodNotAllowed, route.dialect,
                          std::string("this route allows ") + route.method + " only");
    r.headers =
        std::string("Allow: ") + (std::string_view(route.method) == "GET" ? "GET, HEAD" : route.method) + "\r\n";
    return r;
  }
  return route.handler != nullptr ? route.handler(ctx) : Reply{};  // decisions: decision_reply()
}

std::optional<Reply> refuse_path_model(const RouteMatch& route, const HandlerContext& ctx) {
  if (route.endpoint != Endpoint::kCloudflare ||
      serves_model(route.model, ctx.served, ModelNameSource::kCloudflarePath)) {
    return std::nullopt;
  }
  return error_reply(http_error::kUnknownModel, Dialect::kCloudflare, "No route for that URI: unknown model");
}

Reply validation_reply(const RequestError& error, Dialect dialect) {
  const WireReply w = wire_error(error, dialect);
  Reply r;
  r.status = w.status;
  r.body = w.body;
  return r;
}

Reply queue_full_reply(Dialect dialect) {
  return error_reply(http_error::kOverloaded, dialect, "the decision queue is full; retry later");
}

Reply queue_timeout_reply(Dialect dialect) {
  return error_reply(http_error::kOverloaded, dialect,
                     "the request waited longer than the queue timeout (--timeout); retry later");
}

Reply decision_reply(const Job& job, Dialect dialect, const char* route_label, const std::string& route_key,
                     const HandlerContext& ctx, std::int64_t& tokens) {
  tokens = 0;
  if (job.decision) {
    const Decision& d = *job.decision;
    Reply r;
    // Exact state reuse is reported in headers, never in the strict SystemOne body.
    r.headers = decision_headers(d, route_key);
    const WireReply w = wire_success(d.body, dialect);
    r.status = w.status;
    r.body = w.body;
    tokens = d.input_tokens;
    return r;
  }
  return failure_reply(job.error, dialect, route_label, ctx);
}

Reply failure_reply(const std::exception_ptr& error, Dialect dialect, const char* route_label,
                    const HandlerContext& ctx) {
  try {
    std::rethrow_exception(error);
  } catch (const RequestError& e) {
    return validation_reply(e, dialect);
  } catch (const std::exception& e) {
    // An engine fault, not the client's mistake. The message is not logged: it could quote the request.
    const Error* ce = dynamic_cast<const Error*>(&e);
    ctx.log.note(std::string("engine fault (") + (ce ? error_kind_name(ce->kind()) : "exception") + ") on " +
                 route_label);
  }
  return error_reply(http_error::kEngineFault, dialect, "the engine failed on this request");
}

}  // namespace clef::server

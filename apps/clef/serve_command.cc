// SPDX-License-Identifier: MIT
// `clef serve`: parses the flags, loads the engine and hands it to server::serve().
#include "commands.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "engine_flags.h"
#include "runtime/engine.h"
#include "server/server.h"

namespace clef::cli {

namespace {

constexpr const char* kServeFooter =
    "Routes: POST /v1/systemone (SystemOne), /v1/decisions (OpenAI's Decisions contract; a body with `state` is\n"
    "answered as SystemOne); POST /ai/run/@cf/cloudflare/{model} and\n"
    "/client/v4/accounts/{id}/ai/run/@cf/cloudflare/{model} (Cloudflare envelope); POST /api/alpha/decisions\n"
    "(OpenRouter); GET /v1/models, /health (liveness), /ready (readiness: 503 while the queue is full),\n"
    "/metrics (Prometheus). Overload (queue full, queued past --timeout, --body-budget spent): 503 with\n"
    "Retry-After. A decision answer carries X-Clef-State-Key (its state's cache key) and X-Clef-Route-Key (the\n"
    "routing key a balancer hashes; docs/DEPLOYMENT.md).\n"
    "Authentication: --api-key or CLEF_API_KEY (an empty one is refused); the start-up line says \"auth on\" or\n"
    "\"auth off\" and the bound address, and a non-loopback --host without a key prints a warning.\n"
    "See docs/CLI.md \"clef serve\".\n"
    "Exit codes: 0 stopped by SIGINT/SIGTERM after finishing the requests in flight; 2 invalid argument or\n"
    "usage; 3 model folder malformed, missing or inconsistent; 4 unsupported model option; 5 I/O error\n"
    "(e.g. the address cannot be bound); 70 internal error; 130 a second signal during shutdown.";

struct ServeFlags {
  EngineFlags flags;
  server::ServeOptions so;
  std::int64_t queue = 64;
  std::int64_t max_body = std::int64_t{64} << 20;
  bool strict = false;
  std::int64_t max_connections = 1024;
  std::int64_t body_budget_mb = 256;
  std::int64_t state_cache_mb = EngineOptions::kDefaultStateCacheMb;
  std::string scheduler = "batch";
  std::int64_t max_running = 16;
  std::int64_t max_batch_tokens = 0;
  std::int64_t batch_memory_mb = 0;
  CLI::Option* model_opt = nullptr;
  CLI::Option* api_key_opt = nullptr;
  CLI::Option* max_running_opt = nullptr;
  CLI::Option* max_batch_tokens_opt = nullptr;
  CLI::Option* batch_memory_opt = nullptr;
};

/// Refuses an API key that would not protect anything: empty (a flag or variable that expanded to
/// nothing would otherwise turn authentication off without a word), or with whitespace at its ends
/// or control characters (no client can send it in a header, so every request would get 401).
/// `what` names where the key came from.
void check_api_key(const std::string& key, const std::string& what) {
  if (key.empty()) {
    throw InvalidArgument(what +
                          " is empty: give a key, or leave out both --api-key and CLEF_API_KEY to run "
                          "without authentication");
  }
  const auto bad = [](unsigned char c) { return c < 0x20 || c == 0x7f; };
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  if (space(key.front()) || space(key.back()) || std::any_of(key.begin(), key.end(), bad)) {
    throw InvalidArgument(what +
                          " has whitespace at an end or a control character: no client could send it in an "
                          "Authorization header");
  }
}

int run_serve(ServeFlags& f) {
  auto& so = f.so;
  auto& flags = f.flags;
  // CLI11 fills --api-key from CLEF_API_KEY only when the variable is non-empty: an empty value
  // here came from the flag, and a set variable that left the option unset is empty.
  if (f.api_key_opt->count() > 0) {
    check_api_key(so.api_key, so.api_key.empty() ? "--api-key" : "the API key (--api-key or CLEF_API_KEY)");
  } else if (std::getenv("CLEF_API_KEY") != nullptr) {
    check_api_key("", "CLEF_API_KEY");
  }
  so.queue = static_cast<std::size_t>(f.queue);
  so.max_body_bytes = static_cast<std::size_t>(f.max_body);
  so.max_connections = static_cast<std::size_t>(f.max_connections);
  so.body_budget_bytes = static_cast<std::size_t>(f.body_budget_mb) << 20;
  flags.model_given = f.model_opt->count() > 0;
  // A hub name resolves (and with --pull downloads, Ctrl-C still stopping it) first; its threads
  // are all joined when it returns.
  bool is_default = false;
  const std::string dir =
      resolve_model_arg(flags.model_dir, flags.model_given, flags.revision, flags.pull, &is_default);
  // Before any engine thread exists: the engine's pool must not take SIGINT/SIGTERM (server/server.h).
  server::block_shutdown_signals();
  EngineOptions eo = engine_options(flags);
  eo.accept_any_model = !f.strict;
  eo.state_cache_mb = f.state_cache_mb;
  eo.aliases = so.aliases;
  // Continuous batching (docs/ARCHITECTURE.md "Continuous batching"), or one decision at a time.
  eo.batching = f.scheduler == "batch";
  for (const CLI::Option* o : {f.max_running_opt, f.max_batch_tokens_opt, f.batch_memory_opt}) {
    if (!eo.batching && o->count() > 0) {
      throw InvalidArgument(o->get_name() + " applies to --scheduler batch, not --scheduler serial");
    }
  }
  eo.batch.max_step_tokens = f.max_batch_tokens;
  so.max_running = eo.batching ? static_cast<std::size_t>(f.max_running) : 1;
  so.batch_memory_bytes = !eo.batching            ? 0
                          : f.batch_memory_mb > 0 ? static_cast<std::size_t>(f.batch_memory_mb) << 20
                                                  : static_cast<std::size_t>(usable_memory_bytes() / 4);
  const auto engine = with_default_hint(dir, is_default, [&] { return std::make_unique<Engine>(dir, eo); });
  return server::serve(*engine, so);
}

}  // namespace

Command add_serve_command(CLI::App& parent) {
  auto f = std::make_shared<ServeFlags>();
  auto* app = parent.add_subcommand(
      "serve", "Serve a Clef model over HTTP (Jev/SystemOne, OpenAI Decisions, Cloudflare and OpenRouter routes).");
  server::ServeOptions& so = f->so;
  app->footer(kServeFooter);
  app->allow_extras(false);
  f->model_opt = add_engine_flags(*app, f->flags);
  app->add_option("--host", so.host, "Address to bind (default loopback; 0.0.0.0 exposes the server)")
      ->capture_default_str();
  app->add_option("--port", so.port, "TCP port (0: any free port, printed at startup)")
      ->check(clef::cli::in_range(0, 65535))
      ->capture_default_str();
  app->add_option("--queue", f->queue, "Decision requests that may wait for the engine; more get 503 + Retry-After")
      ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{4096}))
      ->capture_default_str();
  app->add_option("--timeout", so.timeout_seconds,
                  "Seconds a request may wait in the queue; then 503 + Retry-After (a started decision runs until it "
                  "ends or its "
                  "client disconnects: 499)")
      ->check(clef::cli::in_range(0.001, 86400.0))
      ->capture_default_str();
  app->add_option("--max-body", f->max_body,
                  "Largest request body in bytes, after Content-Encoding decoding (more: 413)")
      ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{1} << 34))
      ->capture_default_str();
  f->api_key_opt = app->add_option("--api-key", so.api_key,
                                   "Require \"Authorization: Bearer KEY\" on every route but /health and /ready "
                                   "(default: $CLEF_API_KEY; an empty key is an error; neither given: no "
                                   "authentication, and a warning when --host is not loopback)")
                       ->envname("CLEF_API_KEY");
  app->add_option("--alias", so.aliases,
                  "Another model name requests may use (repeatable); with --strict-model, the only other names "
                  "accepted besides the folder's name and jev-latest");
  app->add_flag("--strict-model", f->strict,
                "Refuse requests naming a model other than the served name, an --alias or jev-latest (400 "
                "unknown_model); default: any name is accepted and echoed, like clef decide and the reference");
  app->add_option("--description", so.description, "Model description reported by GET /v1/models");
  app->add_flag("--quiet,-q", so.quiet, "No access log on stderr");
  app->add_option("--allow-host", so.allow_hosts,
                  "A Host header name to accept besides localhost, 127.0.0.1, [::1] and the --host address "
                  "(repeatable; '*' accepts any: only behind a proxy that checks Host). Other Hosts get 421 "
                  "(DNS rebinding guard); with --host 0.0.0.0 the address a client connected to is accepted too");
  app->add_option("--header-timeout", so.header_timeout_seconds,
                  "Seconds the request line and headers may take to arrive; then 408 and the connection ends")
      ->check(clef::cli::in_range(0.01, 3600.0))
      ->capture_default_str();
  app->add_option("--body-timeout", so.body_timeout_seconds,
                  "Seconds a request body may take to arrive; then 408 and the connection ends")
      ->check(clef::cli::in_range(0.01, 3600.0))
      ->capture_default_str();
  app->add_option("--max-connections", f->max_connections,
                  "Open connections at most; at the limit the connection that has waited longest for its request "
                  "(idle, or still sending headers) is closed to admit a new one; when none waits, the new one is "
                  "answered 503 + Connection: close")
      ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  app->add_option("--body-budget", f->body_budget_mb,
                  "MiB of decoded request bodies all connections may hold at once (at least --max-body); a body "
                  "beyond it is answered 503 + Retry-After")
      ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{1} << 24))
      ->capture_default_str();
  app->add_option("--state-cache-mb", f->state_cache_mb,
                  "Memory budget of the exact state cache in MiB (0: off): requests that share a prefix + images + "
                  "state reuse its computation, bit-identically (docs/ARCHITECTURE.md \"Exact state reuse\")")
      ->check(clef::cli::in_range(std::int64_t{0}, std::int64_t{1} << 30))
      ->capture_default_str();
  app->add_option("--scheduler", f->scheduler,
                  "batch: decisions run together, their prefill chunks batched into shared steps (answers "
                  "bit-identical to one at a time); serial: one decision at a time (docs/ARCHITECTURE.md "
                  "\"Continuous batching\")")
      ->check(CLI::IsMember({"batch", "serial"}))
      ->capture_default_str();
  f->max_running_opt = app->add_option("--max-running", f->max_running,
                                       "With --scheduler batch: decisions running at once; more wait in the queue")
                           ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{1024}))
                           ->capture_default_str();
  f->max_batch_tokens_opt =
      app->add_option(
             "--max-batch-tokens", f->max_batch_tokens,
             "With --scheduler batch: new tokens per step, whole chunks only, a longer chunk alone (0: --chunk); "
             "bounds a step's latency and activation memory")
          ->check(clef::cli::in_range(std::int64_t{0}, std::int64_t{1} << 20))
          ->capture_default_str();
  f->batch_memory_opt =
      app->add_option("--batch-memory", f->batch_memory_mb,
                      "With --scheduler batch: MiB the running decisions may hold together (states, head rows, images; "
                      "a decision larger than it runs alone); 0: a quarter of the memory this process may use")
          ->check(clef::cli::in_range(std::int64_t{0}, std::int64_t{1} << 30))
          ->capture_default_str();

  return {app, "clef serve --help", [f] { return run_serve(*f); }};
}

}  // namespace clef::cli

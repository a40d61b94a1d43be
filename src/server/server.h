// `clef serve`: a Jev/SystemOne-compatible HTTP server around one Engine (docs/PROTOCOL.md §2.4,
// §2.5). The HTTP layer (Boost.Beast on Boost.Asio: a few event-driven I/O threads, one strand per
// connection) reads bodies, routes, authenticates, validates and answers; decisions run on one
// scheduler thread (server/scheduler.h). The engine never sees sockets and this layer never sees
// tensors. By role: server.cc listens and accepts, connection.cc reads and writes one connection,
// request_gate.cc decides from the headers, handlers.cc builds the answers, reply.cc writes them
// (docs/ARCHITECTURE.md "The HTTP server").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace clef::server {

/// Settings of the HTTP layer (the engine's own come in EngineOptions).
struct ServeOptions {
  std::string host = "127.0.0.1";                      ///< address to bind (loopback by default)
  int port = 8000;                                     ///< TCP port; 0 = any free port (printed at startup)
  std::size_t queue = 64;                              ///< decision jobs that may wait; beyond that 503 + Retry-After
  double timeout_seconds = 120;                        ///< longest queue wait of a job; then 503 + Retry-After
  std::size_t max_body_bytes = std::size_t{64} << 20;  ///< larger bodies (after decoding) get 413
  std::string api_key;                                 ///< when non-empty, every route but /health needs "Bearer <key>"
  bool quiet = false;                                  ///< no access log
  /// Extra Cloudflare path models accepted besides "clef", "clef-flash" and the served name.
  std::vector<std::string> aliases;
  std::string description;  ///< GET /v1/models description of the model
  /// Host header names accepted besides the loopback names and `host` ("*": any Host).
  std::vector<std::string> allow_hosts;
  double header_timeout_seconds = 10;  ///< request line + headers must arrive within this (408 after)
  double body_timeout_seconds = 30;    ///< the whole body must arrive within this (408 after)
  /// Open connections; at the limit the one that has waited longest for its request (idle or
  /// still sending headers) is closed to admit a new one, and only when none waits is the new
  /// one answered 503 + Connection: close.
  std::size_t max_connections = 1024;
  /// Decoded request-body bytes held at once by all connections together (at least
  /// max_body_bytes); beyond it a body is answered 503 + Retry-After.
  std::size_t body_budget_bytes = std::size_t{256} << 20;
  std::size_t io_threads = 2;  ///< threads running the sockets (decisions run on their own)
};

/// Blocks SIGINT and SIGTERM in the calling thread (and every thread it creates afterwards), so that
/// serve() can wait for them on its own thread. Call before loading the engine, whose thread pool
/// would otherwise inherit the default (process-killing) disposition.
void block_shutdown_signals();

/// Binds, prints "clef serve: listening on http://HOST:PORT" to stderr, and serves until SIGINT or
/// SIGTERM; then stops accepting, finishes the requests in flight and queued, and returns 0.
/// Throws IoError when the address cannot be bound (or resolved).
int serve(Engine& engine, const ServeOptions& options);

}  // namespace clef::server

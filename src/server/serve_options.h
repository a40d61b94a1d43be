// SPDX-License-Identifier: MIT
// The settings of `clef serve`'s HTTP layer (the engine's own come in EngineOptions): the listener,
// the connections, the handlers and apps/clef's flags read them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace clef::server {

/// Settings of the HTTP layer (the engine's own come in EngineOptions).
struct ServeOptions {
  std::string host = "127.0.0.1";                      ///< address to bind (loopback by default)
  int port = 8000;                                     ///< TCP port; 0 = any free port (printed at startup)
  std::size_t queue = 64;                              ///< decision jobs that may wait; beyond that 503 + Retry-After
  double timeout_seconds = 120;                        ///< longest queue wait of a job; then 503 + Retry-After
  std::size_t max_body_bytes = std::size_t{64} << 20;  ///< larger bodies (after decoding) get 413
  /// When non-empty, every route but /health and /ready needs "Bearer <key>" (clef serve refuses an
  /// empty --api-key or CLEF_API_KEY: only leaving both out runs without authentication).
  std::string api_key;
  bool quiet = false;  ///< no access log
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
  /// Decisions running at once (--max-running); more than 1 needs the engine built with
  /// EngineOptions::batching (`--scheduler batch`, the default).
  std::size_t max_running = 1;
  /// Memory the running decisions may hold together, bytes (--batch-memory); 0 = unbounded.
  std::size_t batch_memory_bytes = 0;
};

}  // namespace clef::server

// SPDX-License-Identifier: MIT
// `clef serve`: a Jev/SystemOne-compatible HTTP server around one Engine (docs/PROTOCOL.md §2.4,
// §2.5). The HTTP layer (Boost.Beast on Boost.Asio: a few event-driven I/O threads, one strand per
// connection) reads bodies, routes, authenticates, validates and answers; decisions run on one
// scheduler thread (server/scheduler.h). The engine never sees sockets and this layer never sees
// tensors. By role: server.cc listens and accepts, connection.cc reads and writes one connection,
// request_gate.cc decides from the headers, handlers.cc builds the answers, reply.cc writes them
// (docs/ARCHITECTURE.md "The HTTP server").
#pragma once

#include "runtime/engine.h"
#include "server/serve_options.h"

namespace clef::server {

/// Blocks SIGINT and SIGTERM in the calling thread (and every thread it creates afterwards), so that
/// serve() can wait for them on its own thread. Call before loading the engine, whose thread pool
/// would otherwise inherit the default (process-killing) disposition.
void block_shutdown_signals();

/// Binds, prints "clef serve: listening on http://ADDRESS:PORT (auth on|off, ...)" to stderr with
/// the bound address (preceded by a warning line when that address is not loopback and no API key
/// is set), and serves until SIGINT or SIGTERM; then stops accepting, finishes the requests in
/// flight and queued, and returns 0.
/// Throws IoError when the address cannot be bound (or resolved).
int serve(Engine& engine, const ServeOptions& options);

}  // namespace clef::server

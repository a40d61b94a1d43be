// SPDX-License-Identifier: MIT
// One TCP connection of `clef serve` (Boost.Beast on Boost.Asio): socket I/O, deadlines, the
// interim 100 answers, body reading and decoding, the decision job's wait and lingering close.
// What to answer is decided elsewhere: the request gate (server/request_gate.h) from the headers,
// the handlers (server/handlers.h) from the route or the finished job. No operation here ever
// blocks an I/O thread: every read and write is asynchronous and under a deadline
// (docs/COMPATIBILITY.md "limits and guards", docs/ARCHITECTURE.md "The HTTP server").
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/thread_pool.hpp>

#include "server/body_decoder.h"
#include "server/handlers.h"
#include "server/http_rules.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "server/serve_options.h"

namespace clef::server {

class Connection;

/// The open connections: a registry for shutdown, and the choice of the connection to shed when
/// the server is full. Thread-safe.
class Connections {
 public:
  /// One registered connection. `waiting_since` is the steady-clock time (ns, > 0) at which it
  /// began to wait for a request (idle between requests, or reading the request line and
  /// headers), 0 while it has a request in hand; only waiting connections may be shed.
  struct Slot {
    std::weak_ptr<Connection> connection;
    std::atomic<std::int64_t> waiting_since{0};
    std::atomic<bool> shed{false};
  };
  using Handle = std::list<Slot>::iterator;

  Handle add(const std::shared_ptr<Connection>& c);
  void remove(Handle h);
  /// Every live connection (references taken under the lock, handed out after it).
  std::vector<std::shared_ptr<Connection>> live();
  /// Closes (on its strand) the connection that has waited longest for its request, so that a
  /// new one can be served instead of refused (docs/COMPATIBILITY.md "limits and guards":
  /// shedding). Returns false when no connection is waiting.
  bool shed_oldest_waiting();

 private:
  std::mutex mutex_;
  std::list<Slot> slots_;
};

/// What a connection needs of the server (and nothing else of it).
struct ConnectionContext {
  const ServeOptions& options;
  const HostPolicy& hosts;
  const HandlerContext& handlers;
  Scheduler& scheduler;
  Metrics& metrics;
  AccessLog& log;
  BodyBudget& body_budget;
  boost::asio::thread_pool& validators;  ///< parses + validates decision bodies off the I/O threads
  const std::atomic<bool>& stopping;     ///< shutdown has begun
  Connections& registry;
  /// Called once per connection when it is destroyed (the server counts open connections).
  std::function<void()> ended;
};

/// Starts serving an accepted socket: registers it and reads its first request on its strand.
/// The connection keeps itself alive until it ends.
void start_connection(ConnectionContext& ctx, boost::asio::ip::tcp::socket socket);

/// Asks a connection (from any thread) to end if it is between requests, still reading headers,
/// or still reading a body; one with a validated request ends after its answer.
void shutdown_connection(const std::shared_ptr<Connection>& c);

}  // namespace clef::server

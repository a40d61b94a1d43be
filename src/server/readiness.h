// SPDX-License-Identifier: MIT
// Readiness of `clef serve` for a load balancer's health checks (GET /ready): whether a
// decision request sent now would be queued. HTTP-free: the HTTP layer passes the scheduler's
// gauges in and sends the status and body it gets back.
#pragma once

#include <cstddef>
#include <string>

namespace clef::server {

/// What the scheduler and engine look like at one instant.
struct ReadinessInput {
  bool model_loaded = false;    ///< the engine is constructed (weights bound, tokenizer loaded)
  bool closed = false;          ///< the scheduler stopped accepting (shutdown in progress)
  std::size_t depth = 0;        ///< decisions waiting (the running one not included)
  std::size_t capacity = 0;     ///< --queue: decisions that may wait
  int running = 0;              ///< decisions running now
  std::size_t max_running = 1;  ///< decisions that may run at once (--max-running)
};

/// A /ready answer: HTTP status and JSON body.
struct ReadinessReply {
  int status = 200;  ///< 200 ready, 503 not ready
  std::string body;  ///< {"status":"ready"|"not_ready","reason":...,"model":...,"queue_depth":...}
};

/// 200 when the model is loaded, the scheduler accepts and the queue has room (a decision sent now
/// is queued or starts, not refused with 503; the body says how many run of how many may); else 503 whose body's
/// "reason" is "model_not_loaded", "shutting_down" or "queue_full" (checked in that order). `model` is the served model
/// name (JSON-escaped here). Never throws except std::bad_alloc.
ReadinessReply readiness(const ReadinessInput& in, const std::string& model);

}  // namespace clef::server

// SPDX-License-Identifier: MIT
// Counters and latency histograms of `clef serve`, rendered in the Prometheus text exposition
// format (version 0.0.4). Thread-safe; no request content is ever recorded (labels are route
// templates and status codes only).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace clef::server {

/// A fixed-bucket histogram of seconds (cumulative buckets are computed when rendering).
struct Histogram {
  /// Upper bounds in seconds; +Inf is implicit.
  static constexpr std::array<double, 16> kBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,   0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
  std::array<std::uint64_t, kBounds.size() + 1> counts{};  ///< per bucket (last = above every bound)
  double sum = 0;
  std::uint64_t count = 0;

  /// Adds one observation (negative values count as 0).
  void observe(double seconds);
};

/// A fixed-bucket histogram of counts (sequences or tokens per batched step).
struct CountHistogram {
  std::vector<double> bounds;  ///< upper bounds, increasing; +Inf is implicit
  std::vector<std::uint64_t> counts = std::vector<std::uint64_t>(bounds.size() + 1);
  double sum = 0;
  std::uint64_t count = 0;
  void observe(double v);
};

/// Snapshot of the scheduler's gauges, passed in when rendering.
struct QueueGauges {
  std::uint64_t depth = 0;              ///< jobs waiting
  std::uint64_t capacity = 0;           ///< --queue
  int running = 0;                      ///< decisions running now
  std::uint64_t max_running = 1;        ///< --max-running (1: the serial scheduler)
  std::uint64_t reserved_bytes = 0;     ///< memory the running decisions were admitted with
  std::uint64_t memory_budget = 0;      ///< --batch-memory in bytes (0: unbounded)
  std::uint64_t cancelled = 0;          ///< jobs dropped (client gone, queue deadline)
  std::uint64_t json_texts_parsed = 0;  ///< decision/json_value.h json_texts_parsed(): one per decision body
  std::uint64_t files_mapped = 0;       ///< core/mapped_file.h MappedFile::files_mapped(): one per model file
};

/// The server's metrics.
class Metrics {
 public:
  /// Counts one answered HTTP request. `route` is a route template ("/v1/systemone", "unmatched").
  void count_request(const std::string& route, int status);
  /// Records one decision the engine finished (successful or refused with a 4xx after parsing
  /// started is not recorded: only decisions with a body). `queue_seconds` is its wait.
  /// `reused_tokens`: tokens the state cache restored (Decision::reused_tokens).
  void observe_decision(const DecisionTimings& timings, std::int64_t input_tokens, double queue_seconds,
                        std::int64_t reused_tokens = 0);
  /// Records one batched prefill step (the batching scheduler's engine).
  void observe_step(const StepStats& step);
  /// Counts a refusal for lack of room: "queue_full", "queue_timeout", "body_budget" (503s),
  /// "connections" (a connection beyond --max-connections refused) or "shed" (a connection
  /// waiting for its request closed to admit a new one).
  void count_overload(const char* reason);
  /// The whole exposition (Content-Type: text/plain; version=0.0.4).
  /// `cache`: the engine's state cache counters (docs/ARCHITECTURE.md "Exact state reuse").
  std::string render(const QueueGauges& gauges, const StateCacheStats& cache) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::string, std::uint64_t> overloads_;
  std::uint64_t decisions_ = 0;
  std::uint64_t input_tokens_ = 0;
  Histogram queue_, tokenize_, vision_, prefill_, head_, total_, first_step_, step_seconds_;
  CountHistogram step_sequences_{{1, 2, 4, 8, 16, 32, 64, 128, 256}};
  CountHistogram step_tokens_{{16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}};
  std::uint64_t reused_tokens_ = 0;
};

}  // namespace clef::server

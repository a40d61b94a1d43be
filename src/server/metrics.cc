// SPDX-License-Identifier: MIT
#include "server/metrics.h"

#include <charconv>

namespace clef::server {
namespace {

/// A Prometheus sample value or bucket bound: the shortest fixed-point decimal that reads back as `v`.
std::string number(double v) {
  char buf[400];  // fixed notation of any finite double fits
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  return std::string(buf, r.ptr);
}

/// One unlabelled sample with its HELP and TYPE lines.
void append_scalar(std::string& out, const char* name, const char* help, const char* type, std::uint64_t value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         std::to_string(value) + "\n";
}

void render_histogram(std::string& out, const char* stage, const Histogram& h) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < Histogram::kBounds.size(); ++i) {
    cumulative += h.counts[i];
    out += "clef_stage_seconds_bucket{stage=\"" + std::string(stage) + "\",le=\"" + number(Histogram::kBounds[i]) +
           "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += h.counts.back();
  out += "clef_stage_seconds_bucket{stage=\"" + std::string(stage) + "\",le=\"+Inf\"} " + std::to_string(cumulative) +
         "\n";
  out += "clef_stage_seconds_sum{stage=\"" + std::string(stage) + "\"} " + number(h.sum) + "\n";
  out += "clef_stage_seconds_count{stage=\"" + std::string(stage) + "\"} " + std::to_string(h.count) + "\n";
}

}  // namespace

void Histogram::observe(double seconds) {
  if (!(seconds > 0)) seconds = 0;
  std::size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  ++counts[i];
  sum += seconds;
  ++count;
}

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{route, status}];
}

void Metrics::observe_decision(const DecisionTimings& t, std::int64_t input_tokens, double queue_seconds,
                               std::int64_t reused_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++decisions_;
  reused_tokens_ += static_cast<std::uint64_t>(reused_tokens > 0 ? reused_tokens : 0);
  vision_.observe(t.vision);
  input_tokens_ += static_cast<std::uint64_t>(input_tokens > 0 ? input_tokens : 0);
  queue_.observe(queue_seconds);
  tokenize_.observe(t.tokenize);
  prefill_.observe(t.prefill);
  head_.observe(t.head);
  total_.observe(t.total);
}

void Metrics::count_overload(const char* reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++overloads_[reason];
}

std::string Metrics::render(const QueueGauges& g, const StateCacheStats& c) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out += "# HELP clef_requests_total HTTP requests answered, by route template and status code.\n";
  out += "# TYPE clef_requests_total counter\n";
  for (const auto& [key, n] : requests_) {
    out += "clef_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(n) + "\n";
  }
  out +=
      "# HELP clef_overload_total Requests refused with 503: decision queue full, queue deadline passed, "
      "connection limit (--max-connections) reached with no connection waiting, or body budget (--body-budget) "
      "spent.\n";
  out += "# TYPE clef_overload_total counter\n";
  const auto overloads = [this](const char* reason) {
    const auto it = overloads_.find(reason);
    return it == overloads_.end() ? std::uint64_t{0} : it->second;
  };
  for (const char* reason : {"queue_full", "queue_timeout", "connections", "body_budget"}) {
    out += "clef_overload_total{reason=\"" + std::string(reason) + "\"} " + std::to_string(overloads(reason)) + "\n";
  }
  append_scalar(out, "clef_connections_shed_total",
                "Connections waiting for a request closed at --max-connections to admit a new one.", "counter",
                overloads("shed"));
  append_scalar(out, "clef_queue_depth", "Decision jobs waiting for the engine.", "gauge", g.depth);
  append_scalar(out, "clef_queue_capacity", "Decision jobs that may wait (--queue).", "gauge", g.capacity);
  append_scalar(out, "clef_decisions_running", "Decisions the engine is computing (0 or 1).", "gauge",
                static_cast<std::uint64_t>(g.running));
  append_scalar(
      out, "clef_jobs_cancelled_total",
      "Jobs given up: dropped while queued (client gone or queue deadline) or stopped while running (client gone).",
      "counter", g.cancelled);
  append_scalar(out, "clef_json_texts_parsed_total",
                "JSON texts parsed; each decision body is parsed once (validation, route key and decision read "
                "that one parse).",
                "counter", g.json_texts_parsed);
  append_scalar(out, "clef_files_mapped_total",
                "Files memory-mapped by this process; loading a model maps each of its files once.", "counter",
                g.files_mapped);
  append_scalar(out, "clef_decisions_total", "Decisions the engine answered.", "counter", decisions_);
  append_scalar(out, "clef_input_tokens_total", "Model input tokens processed (usage.input_tokens summed).", "counter",
                input_tokens_);
  out +=
      "# HELP clef_stage_seconds Wall-clock seconds per decision stage (queue wait, tokenize, prefill, head, "
      "total = tokenize to answer).\n";
  out += "# TYPE clef_stage_seconds histogram\n";
  render_histogram(out, "queue", queue_);
  render_histogram(out, "tokenize", tokenize_);
  render_histogram(out, "vision", vision_);
  render_histogram(out, "prefill", prefill_);
  render_histogram(out, "head", head_);
  render_histogram(out, "total", total_);
  out += "# HELP clef_state_cache_lookups_total State cache lookups (exact state reuse), by result.\n";
  out += "# TYPE clef_state_cache_lookups_total counter\n";
  out += "clef_state_cache_lookups_total{result=\"hit\"} " + std::to_string(c.hits) + "\n";
  out += "clef_state_cache_lookups_total{result=\"miss\"} " + std::to_string(c.misses) + "\n";
  append_scalar(out, "clef_state_cache_evictions_total", "Entries dropped to stay within the budget.", "counter",
                c.evictions);
  append_scalar(out, "clef_state_cache_bytes", "Bytes held by the state cache.", "gauge", c.bytes);
  append_scalar(out, "clef_state_cache_entries", "Entries held by the state cache.", "gauge", c.entries);
  append_scalar(out, "clef_state_cache_budget_bytes", "The state cache's byte budget (--state-cache-mb; 0: off).",
                "gauge", c.budget);
  append_scalar(out, "clef_state_cache_reused_tokens_total",
                "Input tokens restored from the state cache instead of computed.", "counter", reused_tokens_);
  return out;
}

}  // namespace clef::server

// SPDX-License-Identifier: MIT
#include "server/metrics.h"

#include <charconv>
#include <span>

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

/// The samples of one histogram of family `name`; `label` is "" or `key="value",` (with the comma).
void render_buckets(std::string& out, const std::string& name, const std::string& label, std::span<const double> bounds,
                    std::span<const std::uint64_t> counts, double sum, std::uint64_t count) {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    out += name + "_bucket{" + label + "le=\"" + number(bounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  cumulative += counts.back();
  out += name + "_bucket{" + label + "le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
  const std::string bare = label.empty() ? "" : "{" + label.substr(0, label.size() - 1) + "}";
  out += name + "_sum" + bare + " " + number(sum) + "\n";
  out += name + "_count" + bare + " " + std::to_string(count) + "\n";
}

void render_histogram(std::string& out, const char* stage, const Histogram& h) {
  render_buckets(out, "clef_stage_seconds", "stage=\"" + std::string(stage) + "\",", Histogram::kBounds, h.counts,
                 h.sum, h.count);
}

/// Adds `v` (negative or NaN counts as 0) to the bucket of the first bound >= v (the last: above all).
void observe_into(std::span<const double> bounds, std::span<std::uint64_t> counts, double& sum, std::uint64_t& count,
                  double v) {
  if (!(v > 0)) v = 0;
  std::size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

}  // namespace

void Histogram::observe(double seconds) { observe_into(kBounds, counts, sum, count, seconds); }

void CountHistogram::observe(double v) { observe_into(bounds, counts, sum, count, v); }

void Metrics::observe_step(const StepStats& step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_sequences_.observe(step.sequences);
  step_tokens_.observe(static_cast<double>(step.tokens));
  step_seconds_.observe(step.seconds);
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
  if (t.first_step > 0) first_step_.observe(queue_seconds + t.first_step);
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
  append_scalar(out, "clef_decisions_running", "Decisions the engine is computing.", "gauge",
                static_cast<std::uint64_t>(g.running));
  append_scalar(out, "clef_decisions_running_max",
                "Decisions that may run at once (--max-running; 1 with --scheduler serial).", "gauge", g.max_running);
  append_scalar(out, "clef_batch_memory_reserved_bytes",
                "Memory the running decisions were admitted with (states, head rows, images).", "gauge",
                g.reserved_bytes);
  append_scalar(out, "clef_batch_memory_budget_bytes", "The running decisions' memory budget (--batch-memory).",
                "gauge", g.memory_budget);
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
      "# HELP clef_stage_seconds Wall-clock seconds per decision stage (queue wait, tokenize, vision, prefill, head, "
      "total = tokenize to answer = the engine's time for it; first_step = queue wait to its first prefill step's "
      "end).\n";
  out += "# TYPE clef_stage_seconds histogram\n";
  render_histogram(out, "queue", queue_);
  render_histogram(out, "tokenize", tokenize_);
  render_histogram(out, "vision", vision_);
  render_histogram(out, "prefill", prefill_);
  render_histogram(out, "head", head_);
  render_histogram(out, "total", total_);
  render_histogram(out, "first_step", first_step_);
  out += "# HELP clef_batch_step_seconds Wall-clock seconds of each batched prefill step.\n";
  out += "# TYPE clef_batch_step_seconds histogram\n";
  render_buckets(out, "clef_batch_step_seconds", "", Histogram::kBounds, step_seconds_.counts, step_seconds_.sum,
                 step_seconds_.count);
  out += "# HELP clef_batch_step_sequences Sequences (decisions) whose chunks shared a prefill step.\n";
  out += "# TYPE clef_batch_step_sequences histogram\n";
  render_buckets(out, "clef_batch_step_sequences", "", step_sequences_.bounds, step_sequences_.counts,
                 step_sequences_.sum, step_sequences_.count);
  out += "# HELP clef_batch_step_tokens New tokens per prefill step (--max-batch-tokens bounds it).\n";
  out += "# TYPE clef_batch_step_tokens histogram\n";
  render_buckets(out, "clef_batch_step_tokens", "", step_tokens_.bounds, step_tokens_.counts, step_tokens_.sum,
                 step_tokens_.count);
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

// SPDX-License-Identifier: MIT
// Test driver of the exact state cache (tests/reference/test_state_cache.py): runs many
// requests through ONE Engine, so later requests can reuse earlier states.
//   clef_cache_driver MODEL_DIR [--state-cache-mb N] [--threads N] [--chunk N] [--max-tokens N]
//                     [--precision f32|bf16|int8] [--parallel N [--max-batch-tokens N]]
//       < requests.jsonl
// Reads one SystemOne request body per line and prints one JSON line per request:
//   {"body": <the response, parsed>, "cache": "hit"|"miss"|"off", "reused_tokens": n,
//    "input_tokens": n, "logits": [...], "timings": {seconds per stage}, "option_counts": [options of each question,
//    request order], "stats": {"hits", "misses", "bytes", "entries", "evictions", "budget"}}
// or {"error": "<code>", "path": "<json path>"} for a refused request. Exit 2 on bad arguments.
// With CLEF_PROFILE set, the op profile (docs/PERFORMANCE.md) goes to stderr after each request.
// --parallel N (N > 1): a batching engine (EngineOptions::batching, steps of --max-batch-tokens) and
// N threads deciding the lines at once, in the order of the lines but finishing as they may; the
// lines are printed in input order with "body", "cache", "input_tokens" and "logits" only
// (tests/reference/test_batching.py compares them with a one-at-a-time run).
#include <cstdlib>
#include <iostream>
#include <string>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "decision/dialects.h"
#include "decision/record.h"
#include "decision/request.h"
#include "decision/request_error.h"
#include "ops/gemm.h"
#include "ops/profile.h"
#include "runtime/engine.h"

namespace {

int usage() {
  std::cerr << "usage: clef_cache_driver MODEL_DIR [--state-cache-mb N] [--threads N] [--chunk N] "
               "[--max-tokens N] [--precision f32|bf16|int8] [--parallel N [--max-batch-tokens N]] < requests.jsonl\n";
  return 2;
}

/// --parallel: every line decided by one of `parallel` threads at once; printed in input order.
int run_parallel(clef::Engine& engine, int parallel) {
  std::vector<std::string> lines;
  for (std::string line; std::getline(std::cin, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  std::vector<nlohmann::ordered_json> outs(lines.size());
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> threads;
  std::exception_ptr fault;
  std::mutex mu;
  for (int t = 0; t < parallel; ++t) {
    threads.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < lines.size();) {
        nlohmann::ordered_json& out = outs[i];
        try {
          const clef::Decision d = engine.decide(engine.prepare(lines[i]));
          out["body"] = nlohmann::ordered_json::parse(d.body);
          out["cache"] = clef::state_cache_use_name(d.state_cache);
          out["input_tokens"] = d.input_tokens;
          out["logits"] = d.logits;
        } catch (const clef::RequestError& e) {
          out = {{"error", e.code_name()}, {"path", e.path().str()}};
        } catch (...) {
          const std::lock_guard<std::mutex> lock(mu);
          fault = std::current_exception();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (fault) std::rethrow_exception(fault);
  for (const auto& out : outs)
    std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  clef::EngineOptions eo;
  eo.accept_any_model = true;
  eo.backbone.threads = 1;
  int parallel = 1;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--state-cache-mb") {
      eo.state_cache_mb = std::stoll(v);
    } else if (a == "--threads") {
      eo.backbone.threads = std::stoi(v);
    } else if (a == "--max-tokens") {
      eo.record.max_length = std::stoll(v);
    } else if (a == "--chunk") {
      eo.backbone.chunk_size = std::stoll(v);
    } else if (a == "--precision" && clef::ops::precision_from_name(v)) {
      eo.backbone.precision = *clef::ops::precision_from_name(v);
    } else if (a == "--parallel") {
      parallel = std::stoi(v);
    } else if (a == "--max-batch-tokens") {
      eo.batch.max_step_tokens = std::stoll(v);
    } else {
      return usage();
    }
  }
  if (parallel < 1) return usage();
  try {
    eo.batching = parallel > 1;
    clef::Engine engine(argv[1], eo);
    if (parallel > 1) return run_parallel(engine, parallel);
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      nlohmann::ordered_json out;
      try {
        const clef::Decision d = engine.decide(line);
        out["body"] = nlohmann::ordered_json::parse(d.body);
        out["cache"] = clef::state_cache_use_name(d.state_cache);
        out["reused_tokens"] = d.reused_tokens;
        out["input_tokens"] = d.input_tokens;
        out["logits"] = d.logits;
        out["timings"] = {{"tokenize", d.timings.tokenize},
                          {"prefill", d.timings.prefill},
                          {"head", d.timings.head},
                          {"state_restore", d.timings.state_restore},
                          {"total", d.timings.total}};
        // The per-question grouping of the logits (to compare probabilities), from the same encoder.
        // The images do not change the questions' options: parsed (as the engine accepts them) and left out.
        clef::ServedModel any;
        any.accept_any = true;
        clef::RequestLimits limits;
        limits.accept_images = true;
        clef::SystemOneRequest req = clef::parse_request(line, limits, clef::Dialect::kSystemOne, any);
        req.images = clef::JsonValue();
        const clef::EncodedRecord rec = clef::encode_record(req, engine.tokenizer(), eo.record);
        out["option_counts"] = nlohmann::ordered_json::array();
        for (const auto& q : rec.questions) out["option_counts"].push_back(q.options.size());
      } catch (const clef::RequestError& e) {
        out = {{"error", e.code_name()}, {"path", e.path().str()}};
      }
      const clef::StateCacheStats s = engine.state_cache_stats();
      out["stats"] = {{"hits", s.hits},       {"misses", s.misses},       {"bytes", s.bytes},
                      {"entries", s.entries}, {"evictions", s.evictions}, {"budget", s.budget}};
      std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n" << std::flush;
      // With CLEF_PROFILE set, one op table per request (cold and warm requests apart).
      if (clef::ops::prof::enabled()) clef::ops::prof::report();
    }
  } catch (const clef::Error& e) {
    std::cerr << "clef_cache_driver: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

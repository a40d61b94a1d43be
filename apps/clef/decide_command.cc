// SPDX-License-Identifier: MIT
// `clef decide`: answer one SystemOne request (a file, a pipe or standard input) and print the
// response, or a file of requests (--jsonl, decide_jsonl.h), one answer line per request line.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/paths.h"
#include "decide_jsonl.h"
#include "engine_flags.h"
#include "output.h"
#include "runtime/engine.h"

namespace clef::cli {

namespace {

/// Largest request body `clef decide` reads (a SystemOne body is kilobytes to a few megabytes).
constexpr std::size_t kMaxRequestBytes = std::size_t{64} << 20;

/// Reads a request body from a file, a pipe or FIFO (`<(...)`, mkfifo) or standard input ("-"),
/// refusing directories, devices (that may never end) and bodies over kMaxRequestBytes without
/// reading them whole.
std::string read_request(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (!std::filesystem::is_regular_file(st) && !std::filesystem::is_fifo(st)) {
      throw InvalidArgument("the request " + printable(path) + " is not a readable regular file or pipe");
    }
    file.open(path, std::ios::binary);
    if (!file) throw InvalidArgument("cannot read the request file " + printable(path));
    in = &file;
  }
  std::string body;
  char buf[1 << 16];
  while (in->read(buf, sizeof buf) || in->gcount() > 0) {
    body.append(buf, static_cast<std::size_t>(in->gcount()));
    if (body.size() > kMaxRequestBytes) {
      throw InvalidArgument("the request body exceeds " + std::to_string(kMaxRequestBytes >> 20) + " MiB");
    }
  }
  return body;
}

struct DecideFlags {
  std::string request_path = "-";
  EngineFlags engine;
  bool timings = false, no_progress = false;
  JsonlRunOptions jsonl;
  std::int64_t state_cache_mb = EngineOptions::kDefaultStateCacheMb;
  std::int64_t parallel = 8;
  std::int64_t batch_memory_mb = 0;
  CLI::Option* model = nullptr;
  CLI::Option* jsonl_opt = nullptr;
  CLI::Option* cache_opt = nullptr;
};

int run_decide(DecideFlags& f) {
  bool is_default = false;
  const std::string dir =
      resolve_model_arg(f.engine.model_dir, f.model->count() > 0, f.engine.revision, f.engine.pull, &is_default);
  const bool batch = f.jsonl_opt->count() > 0;
  const std::string body = batch ? std::string() : read_request(f.request_path);
  // A batch stops on SIGINT/SIGTERM with a resume hint and 128 + the signal; blocked before the engine's threads exist.
  if (batch) watch_jsonl_interrupts();
  EngineOptions eo = engine_options(f.engine);
  // One request cannot hit its own entry; building one would only copy the state (memory x2).
  eo.state_cache_mb = batch || f.cache_opt->count() > 0 ? f.state_cache_mb : 0;
  eo.accept_any_model = true;  // the folder chooses the model; echo the request's name like the reference
  // Lines decided at once share prefill steps (docs/ARCHITECTURE.md "Continuous batching").
  eo.batching = batch && f.parallel > 1;
  f.jsonl.parallel = static_cast<std::size_t>(f.parallel);
  f.jsonl.memory_budget = f.batch_memory_mb > 0 ? static_cast<std::size_t>(f.batch_memory_mb) << 20
                                                : static_cast<std::size_t>(usable_memory_bytes() / 4);
  const auto engine = with_default_hint(dir, is_default, [&] { return std::make_unique<Engine>(dir, eo); });
  if (batch) {
    f.jsonl.progress = !f.no_progress;
    f.jsonl.timings = f.timings;
    const JsonlRunSummary sum = run_decide_jsonl(*engine, f.jsonl);
    return sum.refused > 0 ? 1 : 0;
  }
  const Decision d = engine->decide(body, Dialect::kDecisions);  // either contract, by the body's shape
  write_stdout(d.body + "\n");
  if (f.timings) {
    std::fprintf(stderr,
                 "clef: %lld tokens: tokenize %.3f s, prefill %.3f s (%.1f tokens/s), head %.3f s, total %.3f s; "
                 "state cache %s (%lld tokens reused, restore %.3f s)\n",
                 static_cast<long long>(d.input_tokens), d.timings.tokenize, d.timings.prefill,
                 d.timings.prefill > 0 ? static_cast<double>(d.input_tokens - d.reused_tokens) / d.timings.prefill
                                       : 0.0,
                 d.timings.head, d.timings.total, state_cache_use_name(d.state_cache),
                 static_cast<long long>(d.reused_tokens), d.timings.state_restore);
  }
  return 0;
}

}  // namespace

Command add_decide_command(CLI::App& app) {
  auto f = std::make_shared<DecideFlags>();
  auto* decide = app.add_subcommand(
      "decide",
      "Answer one request (JSON file or - for stdin) and print the response, or a file of requests (--jsonl), one "
      "answer line per request line. A request is a SystemOne body, or OpenAI's Decisions body (no state; input, or "
      "questions as an array), answered in its own contract (docs/PROTOCOL.md section 7).");
  auto* request_opt = decide->add_option("REQUEST", f->request_path, "Request JSON file, or - for standard input")
                          ->capture_default_str();
  f->jsonl_opt = decide->add_option(
      "--jsonl", f->jsonl.input,
      "File of requests, one JSON body per line (- for stdin). Writes one line per input line: the response, or "
      "{\"error\":{\"code\",\"message\",\"path\"},\"line\":N}; keeps going past refused lines");
  f->jsonl_opt->excludes(request_opt);
  decide
      ->add_option("--out,-o", f->jsonl.output,
                   "With --jsonl: answer file (default stdout). An existing file is resumed: its complete lines "
                   "are kept and the matching input lines skipped (SIGINT/SIGTERM stop a run with exit 130/143 and "
                   "say how far it got)")
      ->needs(f->jsonl_opt);
  decide->add_flag("--restart", f->jsonl.restart, "With --jsonl --out: start over instead of resuming")
      ->needs(f->jsonl_opt);
  decide->add_flag("--no-progress", f->no_progress, "With --jsonl: no progress line on stderr")->needs(f->jsonl_opt);
  decide
      ->add_option("--parallel", f->parallel,
                   "With --jsonl: lines decided at once, their prefill chunks batched into shared steps (answers "
                   "identical, written in input order; 1: one at a time)")
      ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{1024}))
      ->capture_default_str()
      ->needs(f->jsonl_opt);
  decide
      ->add_option("--batch-memory", f->batch_memory_mb,
                   "With --jsonl: MiB the lines decided at once may hold together (a larger line runs alone); 0: a "
                   "quarter of the memory this process may use")
      ->check(clef::cli::in_range(std::int64_t{0}, std::int64_t{1} << 30))
      ->capture_default_str()
      ->needs(f->jsonl_opt);
  f->model = add_engine_flags(*decide, f->engine);
  decide->add_flag("--timings", f->timings, "Print per-stage timings (and the state cache's hit/miss) to stderr");
  f->cache_opt =
      decide
          ->add_option("--state-cache-mb", f->state_cache_mb,
                       "Memory budget of the exact state cache in MiB (0: off); requests of a --jsonl run that share a "
                       "state reuse "
                       "it (a single request has nothing to reuse: the cache is off then unless this is given)")
          ->check(clef::cli::in_range(std::int64_t{0}, std::int64_t{1} << 30))
          ->capture_default_str();
  return {decide, "clef decide --help", [f] { return run_decide(*f); }};
}

}  // namespace clef::cli

// SPDX-License-Identifier: MIT
// `clef decide --jsonl IN [--out OUT]`: a file of SystemOne requests, one per line, answered in
// order with one output line per input line (the response body, or an error object), a progress
// line on stderr, and resumption of an interrupted run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "runtime/engine.h"

namespace clef::cli {

/// What run_decide_jsonl() is asked to do.
struct JsonlRunOptions {
  std::string input;     ///< request file (one JSON body per line), or "-" for standard input
  std::string output;    ///< answer file; "" writes to standard output (no resumption then)
  bool restart = false;  ///< ignore (truncate) an existing output file instead of resuming it
  bool progress = true;  ///< progress line on stderr (records, tokens/s, ETA)
  bool timings = false;  ///< one timing line per record on stderr
  /// Lines decided at once (--parallel; > 1 needs a batching engine, EngineOptions::batching):
  /// their prefill chunks share steps; answers are the same and written in input order.
  std::size_t parallel = 1;
  /// Memory the lines decided at once may hold together, bytes (Engine::decision_bytes); 0 = no
  /// bound but `parallel`. A line larger than it is decided alone.
  std::size_t memory_budget = 0;
};

/// Outcome of a run (what the exit code is made of).
struct JsonlRunSummary {
  std::int64_t lines = 0;     ///< input lines seen (including resumed ones)
  std::int64_t resumed = 0;   ///< lines already answered in the output file, skipped
  std::int64_t answered = 0;  ///< lines answered with a response (this run and resumed ones)
  std::int64_t refused = 0;   ///< lines answered with an error object (this run and resumed ones)
  std::int64_t tokens = 0;    ///< input tokens decided in this run
  double seconds = 0;         ///< wall time of this run
};

/// Longest request line answered (the same cap as a single `clef decide` body); a longer line is
/// refused with code "request_too_large" without being held in memory.
inline constexpr std::size_t kMaxRequestLineBytes = std::size_t{64} << 20;

/// The output line (without its '\n') for request line `line_no` (1-based) of a --jsonl run, also
/// what the Python package's Model.decide_many yields (docs/PYTHON.md): the compact response, or
///   {"error":{"code":<wire code>,"message":<text>,"path":<JSON path>},"line":<line_no>}
/// for a line the engine refuses (a RequestError) or one marked `too_long` (over
/// kMaxRequestLineBytes; `line` is then ignored). The request is SystemOne or OpenAI's Decisions
/// contract, by its shape. `decision`, when given, receives an answered line's Decision (left empty
/// for a refused one). Any other exception is an engine fault and is rethrown.
std::string answer_request_line(Engine& engine, std::string_view line, std::int64_t line_no, bool too_long,
                                std::optional<Decision>* decision = nullptr);

/// One answered line: the output text and, for an answered (not refused) line, its Decision.
struct LineAnswer {
  std::string text;
  std::optional<Decision> decision;
};

/// Decides request lines several at once on a batching engine (runtime/step_batcher.h) and hands
/// the answers back in the order the lines came (what `clef decide --jsonl --parallel N` and the
/// Python package's decide_many run on). push() parses and tokenizes the line on the calling
/// thread (Engine::prepare), then waits until fewer than `parallel` lines are being decided and
/// the memory budget has room for it (a line larger than the whole budget waits until none is),
/// and starts its decision on a thread of its own. pop() returns the oldest line's answer, waiting
/// for it. An engine fault (anything but a RequestError) is rethrown by pop() for its line, in
/// order. The destructor waits for the decisions in flight.
class LinePipeline {
 public:
  /// Throws InvalidArgument for parallel > 1 without a batching engine. `engine` must outlive this.
  LinePipeline(Engine& engine, std::size_t parallel, std::size_t memory_budget);
  ~LinePipeline();
  LinePipeline(const LinePipeline&) = delete;
  LinePipeline& operator=(const LinePipeline&) = delete;

  /// Starts line `line_no` (1-based; `too_long` as answer_request_line).
  void push(std::string line, std::int64_t line_no, bool too_long);
  /// The oldest pushed line's answer (waits for it). Throws std::logic_error when none is pending.
  LineAnswer pop();
  /// Lines pushed and not popped.
  std::size_t pending() const;
  /// Whether pop() would return without waiting.
  bool front_ready() const;

 private:
  struct Slot;
  Engine& engine_;
  const std::size_t parallel_;
  const std::size_t budget_;
  mutable std::mutex mu_;
  std::condition_variable cv_;  ///< a decision ended
  std::size_t running_ = 0;
  std::size_t reserved_ = 0;
  std::deque<std::shared_ptr<Slot>> slots_;
};

/// Runs every line of `options.input` through `engine`, writing for line N (1-based) exactly one
/// output line: the compact SystemOne response, or
///   {"error":{"code":<wire code>,"message":<text>,"path":<JSON path>},"line":N}
/// for a line the engine refuses (RequestError: bad JSON, failed validation, too long) or a line
/// longer than 64 MiB (code "request_too_large", the line is skipped without being held in memory).
/// Every output line is flushed as soon as it is written. With an output file that already holds
/// K complete lines (and restart == false), the first K input lines are skipped and the run
/// continues after them; a partial last line (an interrupted write) is cut off first.
/// Throws InvalidArgument (unreadable input, output = input, an output with more lines than the
/// input), IoError (a failed write); an engine fault (not a RequestError) is rethrown after the
/// lines before it were written, so a rerun resumes at the failing line.
JsonlRunSummary run_decide_jsonl(Engine& engine, const JsonlRunOptions& options);

/// Makes SIGINT and SIGTERM end a --jsonl run with exit status 130 and one line on stderr:
///   clef: interrupted after N of M requests; rerun the same command to resume
/// (N: output lines complete, resumed ones included; M: the input's lines, left out when the input
/// is a pipe; without --out the line says that only --out makes a run resumable). The signals are
/// blocked in the calling thread, so call this before the engine (and its threads) exists; a
/// thread then waits for them. A signal never lands inside an answer's write (it waits up to 2 s
/// for the write in progress), and the next run resumes after line N (run_decide_jsonl above).
/// docs/CLI.md "Exit codes".
void watch_jsonl_interrupts();

}  // namespace clef::cli

// SPDX-License-Identifier: MIT
#include "decide_jsonl.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <condition_variable>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"
#include "decision/request_error.h"
#include "line_reader.h"

namespace clef::cli {
namespace {

constexpr std::size_t kMaxLineBytes = kMaxRequestLineBytes;

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f != nullptr && f != stdin && f != stdout) std::fclose(f);
  }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

/// Complete lines of an existing output file (cutting a partial last line off) and how many of
/// them are error objects.
struct ExistingOutput {
  std::int64_t lines = 0, errors = 0;
};

/// Whether `line` is one this command writes: a compact response object or an error object.
bool is_answer_line(std::string_view line) {
  return (line.starts_with("{\"model\":") || line.starts_with("{\"error\":")) && line.ends_with("}");
}

/// Validates an existing output file for resumption: every complete line must be an answer this
/// command writes; a last line without '\n' that starts like one is a torn write and is cut off.
/// Anything else (a user's notes, blank lines, stray stderr text) is refused, never overwritten.
ExistingOutput prepare_resume(std::FILE* f, const std::string& path) {
  ExistingOutput out;
  LineReader reader(f, kMaxLineBytes);
  std::string line;
  bool too_long = false;
  std::uint64_t complete_bytes = 0;
  while (reader.next(line, too_long)) {
    if (!reader.terminated()) {
      if (!line.starts_with("{\"")) {
        throw InvalidArgument("--out " + printable(path) +
                              ": its last line is not an answer written by clef decide "
                              "(use --restart to overwrite it, or another --out)");
      }
      break;  // torn write
    }
    if (too_long || !is_answer_line(line)) {
      throw InvalidArgument(
          "--out " + printable(path) + ": line " + std::to_string(out.lines + 1) +
          " is not an answer written by clef decide (use --restart to overwrite it, or another --out)");
    }
    complete_bytes = reader.bytes_read();
    ++out.lines;
    if (line.starts_with("{\"error\":")) ++out.errors;
  }
  if (complete_bytes < reader.bytes_read() && ::ftruncate(::fileno(f), static_cast<off_t>(complete_bytes)) != 0) {
    throw IoError("cannot cut the torn last line of " + printable(path) + ": " + std::strerror(errno));
  }
  return out;
}

/// Number of '\n'-separated lines of a regular file (a last line without '\n' counts).
std::int64_t count_lines(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return -1;
  LineReader reader(f.get(), kMaxLineBytes);
  std::string line;
  bool too_long = false;
  std::int64_t n = 0;
  while (reader.next(line, too_long)) ++n;
  return n;
}

std::string error_line(std::string_view code, const std::string& message, const std::string& path, std::int64_t line) {
  nlohmann::ordered_json j;
  j["error"]["code"] = code;
  j["error"]["message"] = message;
  j["error"]["path"] = path;
  j["line"] = line;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string format_duration(double s) {
  if (!(s >= 0) || s > 360000) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

/// What the interrupt watcher (watch_jsonl_interrupts) reports. `write` is held while an answer
/// line is written and counted, so the count it reads is the file's.
struct InterruptState {
  std::timed_mutex write;
  std::atomic<bool> running{false};     ///< run_decide_jsonl has opened its input and output
  std::atomic<bool> resumable{false};   ///< the answers go to an --out file
  std::atomic<std::int64_t> done{0};    ///< complete output lines (resumed ones included)
  std::atomic<std::int64_t> total{-1};  ///< input lines; -1 when unknown (a pipe)
};

/// One for the process, never destroyed (the watcher may read it while the process exits).
InterruptState& interrupt_state() {
  static auto* state = new InterruptState;
  return *state;
}

std::string interrupt_message(const InterruptState& st) {
  if (!st.running.load()) return "clef: interrupted before the first request was read\n";
  const std::int64_t done = st.done.load(), total = st.total.load();
  std::string s = "clef: interrupted after " + std::to_string(done);
  if (total >= 0) s += " of " + std::to_string(total);
  s += (total >= 0 ? total : done) == 1 ? " request" : " requests";
  s += st.resumable.load() ? "; rerun the same command to resume\n"
                           : " (answers on standard output; with --out FILE a rerun resumes instead)\n";
  return s;
}

}  // namespace

void watch_jsonl_interrupts() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    InterruptState& st = interrupt_state();
    // Wait for an answer being written; a write stuck on a full pipe does not hold the exit.
    const bool locked = st.write.try_lock_for(std::chrono::seconds(2));
    (void)locked;  // the process ends below either way
    std::string line = interrupt_message(st);
    if (::isatty(STDERR_FILENO) == 1) line = "\r\x1b[K" + line;  // over the live progress line
    const ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    (void)written;
    std::_Exit(128 + sig);  // 130 on SIGINT, 143 on SIGTERM (the shell's convention)
  }).detach();
}

namespace {

/// The input of a run: a regular file (size known: ETA), standard input, or a pipe; never a directory.
struct JsonlInput {
  File file;
  std::uint64_t size = 0;   ///< bytes of a regular file; 0 when unknown
  std::int64_t lines = -1;  ///< lines of a regular file; -1 when unknown
};

JsonlInput open_input(const JsonlRunOptions& options) {
  JsonlInput in;
  if (options.input == "-") {
    in.file.reset(stdin);
    return in;
  }
  std::error_code ec;
  const auto st = std::filesystem::status(options.input, ec);
  if (ec || !std::filesystem::exists(st) || std::filesystem::is_directory(st)) {
    throw InvalidArgument("--jsonl: " + printable(options.input) + " is not a readable file" +
                          (ec ? std::string(" (") + ec.message() + ")" : std::string()));
  }
  if (std::filesystem::is_regular_file(st)) {
    in.size = std::filesystem::file_size(options.input, ec);
    in.lines = count_lines(options.input);
  }
  in.file.reset(std::fopen(options.input.c_str(), "rb"));
  if (!in.file) {
    throw InvalidArgument("--jsonl: cannot open " + printable(options.input) + " (" + std::strerror(errno) + ")");
  }
  return in;
}

/// Refuses an --out file with more answers than its input has lines: it belongs to another input.
[[noreturn]] void refuse_foreign_output(const std::string& output, std::int64_t answers, std::int64_t input_lines) {
  throw InvalidArgument("--out " + printable(output) + " holds " + std::to_string(answers) +
                        " answers but the input has only " + std::to_string(input_lines) +
                        " lines: it belongs to another input (use --restart)");
}

/// Opens --out into `out`: read/write without truncation (resumption needs the old lines), one
/// writer at a time (flock), never the input file; truncated with --restart, else validated for
/// resumption (prepare_resume); positioned at its end. Returns the answers it already holds.
ExistingOutput open_output(const JsonlRunOptions& options, const JsonlInput& in, File& out) {
  ExistingOutput existing;
  std::error_code ec;
  if (std::filesystem::exists(options.output, ec) && !std::filesystem::is_regular_file(options.output, ec)) {
    throw InvalidArgument("--out: " + printable(options.output) + " exists and is not a regular file");
  }
  const int fd = ::open(options.output.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw IoError("cannot open the output file " + printable(options.output) + ": " + std::strerror(errno));
  }
  out.reset(::fdopen(fd, "r+b"));
  if (!out) {
    ::close(fd);
    throw IoError("cannot open the output file " + printable(options.output) + ": " + std::strerror(errno));
  }
  struct stat so {
  }, si{};
  if (::fstat(fd, &so) == 0 && ::fstat(::fileno(in.file.get()), &si) == 0 && so.st_dev == si.st_dev &&
      so.st_ino == si.st_ino) {
    throw InvalidArgument("--out names the input file " +
                          printable(options.input == "-" ? std::string("(standard input)") : options.input));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    throw InvalidArgument("--out " + printable(options.output) + " is being written by another clef decide");
  }
  if (options.restart) {
    if (::ftruncate(fd, 0) != 0) {
      throw IoError("cannot truncate " + printable(options.output) + ": " + std::strerror(errno));
    }
  } else {
    existing = prepare_resume(out.get(), options.output);
  }
  if (in.lines >= 0 && existing.lines > in.lines) refuse_foreign_output(options.output, existing.lines, in.lines);
  if (std::fseek(out.get(), 0, SEEK_END) != 0) {
    throw IoError("cannot seek in " + printable(options.output) + ": " + std::strerror(errno));
  }
  return existing;
}

/// The progress line: "records done, tokens, tokens/s, ETA"; live (redrawn) on a terminal.
void print_progress(const JsonlRunSummary& sum, double s, const std::string& eta, bool tty, bool final_line) {
  std::fprintf(stderr, "%sclef: %lld record(s) done (%lld refused), %lld tokens, %.1f tokens/s, elapsed %s, ETA %s%s",
               tty ? "\r" : "", static_cast<long long>(sum.answered + sum.refused), static_cast<long long>(sum.refused),
               static_cast<long long>(sum.tokens), s > 0 ? static_cast<double>(sum.tokens) / s : 0.0,
               format_duration(s).c_str(), eta.c_str(), tty && !final_line ? "\x1b[K" : "\n");
  std::fflush(stderr);
}

/// --timings: one line per answered request on stderr.
void print_timings(std::int64_t line, const Decision& d, const char* prefix) {
  std::fprintf(stderr,
               "%sclef: line %lld: %lld tokens: tokenize %.3f s, prefill %.3f s, head %.3f s, total %.3f s; "
               "state cache %s (%lld tokens reused, restore %.3f s)\n",
               prefix, static_cast<long long>(line), static_cast<long long>(d.input_tokens), d.timings.tokenize,
               d.timings.prefill, d.timings.head, d.timings.total, state_cache_use_name(d.state_cache),
               static_cast<long long>(d.reused_tokens), d.timings.state_restore);
}

}  // namespace

namespace {

std::string too_long_line(std::int64_t line_no) {
  return error_line("request_too_large", "the line is longer than " + std::to_string(kMaxLineBytes >> 20) + " MiB", "",
                    line_no);
}

std::string refusal_line(const RequestError& e, std::int64_t line_no) {
  const std::string at = e.offset() ? " (at byte " + std::to_string(*e.offset()) + ")" : std::string();
  return error_line(e.code_name(), e.message() + at, e.path().str(), line_no);
}

}  // namespace

/// The hand-over between run_decide_jsonl's reader (the calling thread) and its writer thread:
/// lines pushed, the end of the input, and the writer's failure. The destructor ends and joins the
/// writer.
class LineFlow {
 public:
  LineFlow() = default;
  LineFlow(const LineFlow&) = delete;
  LineFlow& operator=(const LineFlow&) = delete;
  ~LineFlow() { finish_and_join(); }
  /// Starts the writer thread: it calls `write_next` once per pushed line, in order, until
  /// finish_and_join() and every pushed line is written; an exception ends it and is kept for rethrow().
  void start(std::function<void()> write_next) {
    writer_ = std::thread([this, w = std::move(write_next)] { write_all(w); });
  }
  /// Reader: waits until `room()` holds; false when the writer failed (stop reading).
  bool wait_for_room(const std::function<bool()>& room) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return error_ != nullptr || room(); });
    return error_ == nullptr;
  }
  void pushed_one() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      ++pushed_;
    }
    cv_.notify_all();
  }
  /// No more lines: the writer ends after the pushed ones; waits for it.
  void finish_and_join() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void write_all(const std::function<void()>& write_next) {
    try {
      for (std::int64_t n = 0;; ++n) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return pushed_ > n || done_; });
          if (pushed_ == n) return;
        }
        write_next();
        cv_.notify_all();  // room for the reader
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t pushed_ = 0;
  bool done_ = false;
  std::exception_ptr error_;
  std::thread writer_;
};

std::string answer_request_line(Engine& engine, std::string_view line, std::int64_t line_no, bool too_long,
                                std::optional<Decision>* decision) {
  if (too_long) return too_long_line(line_no);
  try {
    Decision d = engine.decide(line, Dialect::kDecisions);  // either contract, by the line's shape
    std::string text = d.body;
    if (decision != nullptr) *decision = std::move(d);
    return text;
  } catch (const RequestError& e) {
    return refusal_line(e, line_no);
  }
}

/// One line in a LinePipeline: its answer once known (or the engine fault to rethrow).
struct LinePipeline::Slot {
  bool done = false;
  LineAnswer answer;
  std::exception_ptr fault;
  std::thread worker;  ///< the line's decision (joined by pop() or the destructor)
};

LinePipeline::LinePipeline(Engine& engine, std::size_t parallel, std::size_t memory_budget)
    : engine_(engine), parallel_(std::max<std::size_t>(1, parallel)), budget_(memory_budget) {
  if (parallel_ > 1 && engine.batcher() == nullptr) {
    throw InvalidArgument("deciding " + std::to_string(parallel_) + " lines at once needs a batching engine");
  }
}

LinePipeline::~LinePipeline() {
  for (const std::shared_ptr<Slot>& slot : slots_) {
    if (slot->worker.joinable()) slot->worker.join();
  }
}

void LinePipeline::push(std::string line, std::int64_t line_no, bool too_long) {
  auto slot = std::make_shared<Slot>();
  std::optional<PreparedRequest> prepared;
  if (too_long) {
    slot->answer.text = too_long_line(line_no);
  } else {
    try {
      prepared = engine_.prepare(line, Dialect::kDecisions);  // either contract, by the line's shape
    } catch (const RequestError& e) {
      slot->answer.text = refusal_line(e, line_no);
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  slots_.push_back(slot);
  if (!prepared) {
    slot->done = true;
    return;
  }
  const std::size_t bytes = engine_.decision_bytes(*prepared);
  cv_.wait(lock,
           [&] { return running_ == 0 || (running_ < parallel_ && (budget_ == 0 || reserved_ + bytes <= budget_)); });
  ++running_;
  reserved_ += bytes;
  slot->worker = std::thread([this, slot, bytes, line_no, p = std::move(*prepared)]() mutable {
    LineAnswer a;
    std::exception_ptr fault;
    try {
      Decision d = engine_.decide(std::move(p));
      a.text = d.body;
      a.decision = std::move(d);
    } catch (const RequestError& e) {
      a.text = refusal_line(e, line_no);
    } catch (...) {
      fault = std::current_exception();
    }
    {
      const std::lock_guard<std::mutex> g(mu_);
      slot->answer = std::move(a);
      slot->fault = fault;
      slot->done = true;
      --running_;
      reserved_ -= bytes;
    }
    cv_.notify_all();
  });
}

LineAnswer LinePipeline::pop() {
  std::unique_lock<std::mutex> lock(mu_);
  if (slots_.empty()) throw std::logic_error("LinePipeline::pop: no line pending");
  const std::shared_ptr<Slot> slot = slots_.front();
  cv_.wait(lock, [&] { return slot->done; });
  slots_.pop_front();
  lock.unlock();
  if (slot->worker.joinable()) slot->worker.join();  // it ends right after reporting
  if (slot->fault) std::rethrow_exception(slot->fault);
  return std::move(slot->answer);
}

std::size_t LinePipeline::pending() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return slots_.size();
}

bool LinePipeline::front_ready() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return !slots_.empty() && slots_.front()->done;
}

JsonlRunSummary run_decide_jsonl(Engine& engine, const JsonlRunOptions& options) {
  const bool to_file = !options.output.empty() && options.output != "-";
  if (options.restart && !to_file) throw InvalidArgument("--restart needs --out FILE");
  const JsonlInput in = open_input(options);
  ExistingOutput existing;
  File out(to_file ? nullptr : stdout);
  if (to_file) existing = open_output(options, in, out);

  InterruptState& interrupted = interrupt_state();
  interrupted.done = existing.lines;
  interrupted.total = in.lines;
  interrupted.resumable = to_file;
  interrupted.running = true;

  JsonlRunSummary sum;
  sum.resumed = existing.lines;
  sum.refused = existing.errors;
  sum.answered = existing.lines - existing.errors;
  if (existing.lines > 0) {
    std::fprintf(stderr, "clef: resuming: %lld line(s) already answered in %s (--restart starts over)\n",
                 static_cast<long long>(existing.lines), printable(options.output).c_str());
  }

  LineReader reader(in.file.get(), kMaxLineBytes);
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  double last_report = 0;
  std::uint64_t resumed_bytes = 0;           // input bytes of the skipped lines (not part of this run's speed)
  std::atomic<std::uint64_t> bytes_read{0};  // input bytes read so far (the writer thread reports progress)
  // The ETA comes from this run's input bytes per second.
  auto report = [&](bool final_line) {
    const double s = elapsed();
    std::string eta = final_line ? "0:00:00" : "?";
    if (!final_line && in.size > 0) {
      const auto read = static_cast<double>(bytes_read.load(std::memory_order_relaxed));
      const double processed = read - static_cast<double>(resumed_bytes);
      const double remaining = static_cast<double>(in.size) - read;
      if (processed > 0 && s > 0) eta = format_duration(remaining / (processed / s));
    }
    print_progress(sum, s, eta, tty, final_line);
  };

  // Answers on the same terminal as the live progress line: clear that line first.
  const bool clear_before_write = tty && options.progress && !to_file && ::isatty(STDOUT_FILENO) == 1;
  // Writes the answer of input line `line_no`; an interrupt waits for it (watch_jsonl_interrupts).
  auto write_line = [&](const std::string& text, std::int64_t line_no) {
    const std::lock_guard<std::timed_mutex> lock(interrupted.write);
    if (clear_before_write) std::fputs("\r\x1b[K", stderr);
    errno = 0;
    if (std::fwrite(text.data(), 1, text.size(), out.get()) != text.size() || std::fputc('\n', out.get()) == EOF ||
        std::fflush(out.get()) != 0) {
      throw IoError("cannot write the answers to " +
                    (to_file ? printable(options.output) : std::string("standard output")) +
                    (errno ? std::string(": ") + std::strerror(errno) : std::string()));
    }
    interrupted.done = line_no;
  };

  // Writes the oldest pending answer (input line `written + 1`).
  std::int64_t written = existing.lines;
  LinePipeline pipeline(engine, options.parallel, options.memory_budget);
  auto write_next = [&] {
    const LineAnswer a = pipeline.pop();
    ++written;
    write_line(a.text, written);
    if (a.decision) {
      ++sum.answered;
      sum.tokens += a.decision->input_tokens;
      if (options.timings) print_timings(written, *a.decision, tty && options.progress ? "\r\x1b[K" : "");
    } else {
      ++sum.refused;
    }
    // A live line on a terminal; a line every 10 s in a log.
    const double s = elapsed();
    if (options.progress && (tty || s - last_report >= 10.0)) {
      report(false);
      last_report = s;
    }
  };
  // With --parallel > 1 a writer thread writes the answers in order as they come while this thread
  // reads (a line on a pipe is answered when it is decided, not when the next line arrives), at
  // most 2 x parallel lines ahead of it.
  LineFlow flow;
  if (options.parallel > 1) flow.start(write_next);
  std::string line;
  bool too_long = false;
  while (reader.next(line, too_long)) {
    ++sum.lines;
    bytes_read.store(reader.bytes_read(), std::memory_order_relaxed);
    if (sum.lines <= existing.lines) {
      resumed_bytes = reader.bytes_read();
      continue;
    }
    if (options.parallel == 1) {
      pipeline.push(std::move(line), sum.lines, too_long);
      write_next();
    } else {
      if (!flow.wait_for_room([&] { return pipeline.pending() < 2 * options.parallel; })) break;
      pipeline.push(std::move(line), sum.lines, too_long);
      flow.pushed_one();
    }
    line.clear();
  }
  flow.finish_and_join();
  flow.rethrow();
  if (existing.lines > sum.lines) refuse_foreign_output(options.output, existing.lines, sum.lines);
  sum.seconds = elapsed();
  if (options.progress) report(true);
  return sum;
}

}  // namespace clef::cli

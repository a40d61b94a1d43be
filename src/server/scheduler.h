// SPDX-License-Identifier: MIT
// The decision scheduler of `clef serve`: a bounded FIFO of decision jobs and the worker threads
// that run them on the one Engine. With a batching engine (EngineOptions::batching) up to
// `max_running` decisions run at once, their prefill chunks batched into shared steps
// (runtime/step_batcher.h), admitted in FIFO order while their memory (Engine::decision_bytes)
// fits the budget; with the serial one, one at a time. HTTP-free: the HTTP layer submits a
// prepared request and waits for the job; the scheduler never sees sockets.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"

namespace clef::server {

/// What became of a submitted job.
enum class JobState : std::uint8_t {
  kQueued,     ///< waiting for the scheduler
  kRunning,    ///< the engine is deciding it (cancel() stops it at the next step boundary)
  kDone,       ///< finished: `decision` or `error` is set
  kCancelled,  ///< given up: its submitter cancelled it (client gone or queue deadline passed) while
               ///< queued, or its client was gone when its turn came, or it was stopped while running
};

/// One decision job. The submitter owns one reference, the queue another.
struct Job {
  /// The request parsed, validated and its images decoded off the engine thread (Engine::prepare,
  /// the body's one parse); the worker runs Engine::decide(prepared) on it. Released when the job
  /// ends.
  std::optional<PreparedRequest> prepared;
  std::chrono::steady_clock::time_point enqueued;
  /// Called by the scheduler thread right before running the job; false = the client is gone and
  /// the job is dropped (state kCancelled). May be empty.
  std::function<bool()> still_wanted;
  /// Called by the scheduler thread (outside its lock) after the job became kDone, or kCancelled
  /// by the scheduler itself (still_wanted said no). Not called when the submitter cancels the job
  /// (cancel() returning true, or wait()). May be empty. Must not block.
  std::function<void()> on_finished;

  // Written by the scheduler under Scheduler's mutex, read by the submitter under it.
  JobState state = JobState::kQueued;
  std::optional<Decision> decision;  ///< set when the engine answered
  std::exception_ptr error;          ///< set when decide() threw (RequestError or an engine fault)
  /// Set by Scheduler::cancel() while the job runs: Engine::decide stops at its next step
  /// boundary (one prefill chunk at most) and the job ends kCancelled.
  std::atomic<bool> stop{false};
  double queue_seconds = 0;        ///< time spent queued before running
  std::size_t reserved_bytes = 0;  ///< memory admission counted for it while it runs (Engine::decision_bytes)
};

struct SchedulerOptions {
  std::size_t capacity = 64;  ///< jobs that may wait (the running ones not included), >= 1
  /// Decisions running at once, >= 1; more than 1 needs a batching engine (Engine::batcher()).
  std::size_t max_running = 1;
  /// Memory the running decisions may hold together (Engine::decision_bytes), bytes; 0 = no bound
  /// but max_running. A job that alone exceeds it runs when nothing else does.
  std::size_t memory_budget = 0;
};

/// Bounded FIFO + max_running worker threads around an Engine.
///
/// Thread safety: submit/wait/cancel/depth may be called from any thread. The Engine is only ever
/// called from the worker thread.
class Scheduler {
 public:
  /// `engine` must outlive the Scheduler. Throws InvalidArgument for max_running > 1 without a
  /// batching engine.
  Scheduler(Engine& engine, const SchedulerOptions& options);
  /// Runs every queued job to completion, then joins the worker.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a request Engine::prepare() parsed and whose images it decoded. Returns nullptr when
  /// the queue is full or closed (the caller answers 503).
  std::shared_ptr<Job> submit(PreparedRequest prepared, std::function<bool()> still_wanted,
                              std::function<void()> on_finished = {});

  /// Removes a job that is still queued (state kCancelled, counted as cancelled) and returns true.
  /// Returns false when the worker already took it: its on_finished callback will follow; a
  /// running job is told to stop (Job::stop), ends kCancelled within one prefill chunk and is
  /// counted as cancelled then.
  bool cancel(const std::shared_ptr<Job>& job);

  /// The job's current state (read under the scheduler's lock).
  JobState state(const std::shared_ptr<Job>& job) const;

  /// Waits until the job is done or cancelled, or until `until` passes while it is still queued
  /// (then it is cancelled here). `poll` (called about every `poll_interval` while the job is
  /// queued or running) returns false when the client went away; the job is then cancelled (a
  /// running one stops at its next prefill chunk). Returns the final state (kDone or kCancelled).
  JobState wait(const std::shared_ptr<Job>& job, std::chrono::steady_clock::time_point until,
                const std::function<bool()>& poll, std::chrono::milliseconds poll_interval);

  /// Jobs waiting (not counting the running one).
  std::size_t depth() const;
  /// Decisions running now.
  int running() const;
  /// Bytes the running decisions were admitted with (Engine::decision_bytes).
  std::size_t reserved_bytes() const;
  const SchedulerOptions& options() const noexcept { return options_; }
  /// Jobs dropped because their client went away or their queue deadline passed, and running jobs
  /// stopped because their client went away.
  std::uint64_t cancelled() const;
  /// Stops accepting new jobs (submit returns nullptr); queued jobs still run.
  void close();
  /// True once close() was called (or the scheduler is being destroyed).
  bool closed() const;
  /// The number of jobs that may wait (the constructor's capacity, at least 1).
  std::size_t capacity() const noexcept { return options_.capacity; }

 private:
  void run();
  std::shared_ptr<Job> enqueue(std::shared_ptr<Job> job);
  /// Whether the job at the queue's front may start now (under the lock).
  bool can_admit() const;
  /// Runs one admitted job on this worker thread and reports it.
  void execute(const std::shared_ptr<Job>& job);

  Engine& engine_;
  SchedulerOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable work_cv_;  ///< a job arrived or stopping
  std::condition_variable done_cv_;  ///< a job changed state
  std::deque<std::shared_ptr<Job>> queue_;
  bool closed_ = false;
  bool stopping_ = false;
  int running_ = 0;
  std::size_t reserved_ = 0;
  std::uint64_t cancelled_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace clef::server

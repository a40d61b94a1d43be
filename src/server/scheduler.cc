// SPDX-License-Identifier: MIT
#include "server/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace clef::server {

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options) : engine_(engine), options_(options) {
  options_.capacity = std::max<std::size_t>(1, options_.capacity);
  options_.max_running = std::max<std::size_t>(1, options_.max_running);
  if (options_.max_running > 1 && engine.batcher() == nullptr) {
    throw InvalidArgument("scheduler: " + std::to_string(options_.max_running) +
                          " decisions at once need a batching engine");
  }
  for (std::size_t i = 0; i < options_.max_running; ++i) workers_.emplace_back([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& w : workers_) w.join();
}

std::shared_ptr<Job> Scheduler::submit(PreparedRequest prepared, std::function<bool()> still_wanted,
                                       std::function<void()> on_finished) {
  auto job = std::make_shared<Job>();
  job->reserved_bytes = engine_.decision_bytes(prepared);
  job->prepared = std::move(prepared);
  job->still_wanted = std::move(still_wanted);
  job->on_finished = std::move(on_finished);
  return enqueue(std::move(job));
}

std::shared_ptr<Job> Scheduler::enqueue(std::shared_ptr<Job> job) {
  job->enqueued = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_ || queue_.size() >= options_.capacity) return nullptr;
    queue_.push_back(job);
  }
  work_cv_.notify_one();
  return job;
}

JobState Scheduler::wait(const std::shared_ptr<Job>& job, std::chrono::steady_clock::time_point until,
                         const std::function<bool()>& poll, std::chrono::milliseconds poll_interval) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (job->state == JobState::kDone || job->state == JobState::kCancelled) return job->state;
    if (job->state == JobState::kQueued) {
      const bool expired = std::chrono::steady_clock::now() >= until;
      bool gone = false;
      if (!expired && poll) {
        lock.unlock();
        gone = !poll();
        lock.lock();
        if (job->state != JobState::kQueued) continue;
      }
      if (expired || gone) {
        const auto it = std::find(queue_.begin(), queue_.end(), job);
        if (it != queue_.end()) {
          queue_.erase(it);
          job->state = JobState::kCancelled;
          ++cancelled_;
          return job->state;
        }
        // Already taken by the worker (about to run or be dropped): wait for its verdict.
        done_cv_.wait(lock, [&] { return job->state != JobState::kQueued; });
        continue;
      }
      done_cv_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(poll_interval,
                                                                            until - std::chrono::steady_clock::now()));
    } else {  // running: a client gone (poll) stops it at the engine's next prefill chunk
      if (poll && !job->stop.load()) {
        lock.unlock();
        const bool gone = !poll();
        lock.lock();
        if (gone) job->stop.store(true);
        if (job->state != JobState::kRunning) continue;
      }
      done_cv_.wait_for(lock, poll_interval);
    }
  }
}

bool Scheduler::cancel(const std::shared_ptr<Job>& job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (job->state == JobState::kRunning) job->stop.store(true);
  if (job->state != JobState::kQueued) return false;
  const auto it = std::find(queue_.begin(), queue_.end(), job);
  if (it == queue_.end()) return false;  // taken by the worker: it decides (or drops) and reports
  queue_.erase(it);
  job->state = JobState::kCancelled;
  ++cancelled_;
  return true;
}

JobState Scheduler::state(const std::shared_ptr<Job>& job) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return job->state;
}

std::size_t Scheduler::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

int Scheduler::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_;
}

std::size_t Scheduler::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}

std::uint64_t Scheduler::cancelled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cancelled_;
}

void Scheduler::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_ = true;
}

bool Scheduler::closed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

bool Scheduler::can_admit() const {
  if (queue_.empty() || running_ >= static_cast<int>(options_.max_running)) return false;
  if (running_ == 0 || options_.memory_budget == 0) return true;
  return reserved_ + queue_.front()->reserved_bytes <= options_.memory_budget;
}

void Scheduler::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // FIFO: the front job starts when a worker is free and its memory fits beside the running
      // ones' (a job larger than the whole budget runs alone).
      work_cv_.wait(lock, [&] { return can_admit() || (stopping_ && queue_.empty()); });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      reserved_ += job->reserved_bytes;
      ++running_;  // counted from here so that no other worker admits past the budget meanwhile
    }
    execute(job);
    work_cv_.notify_all();  // memory and a worker were freed
  }
}

void Scheduler::execute(const std::shared_ptr<Job>& job) {
  // Outside the lock: checking the client may take a system call.
  const bool wanted = !job->still_wanted || job->still_wanted();
  if (wanted) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job->state = JobState::kRunning;
      job->queue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - job->enqueued).count();
    }
    done_cv_.notify_all();
    std::optional<Decision> decision;
    std::exception_ptr error;
    bool stopped = false;
    try {
      decision = engine_.decide(std::move(*job->prepared), &job->stop);
    } catch (const DecisionStopped&) {
      stopped = true;
    } catch (...) {
      error = std::current_exception();
    }
    job->prepared.reset();  // free the prepared images early
    std::lock_guard<std::mutex> lock(mutex_);
    job->decision = std::move(decision);
    job->error = error;
    job->state = stopped ? JobState::kCancelled : JobState::kDone;
    if (stopped) ++cancelled_;
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    job->state = JobState::kCancelled;
    ++cancelled_;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
    reserved_ -= job->reserved_bytes;
  }
  done_cv_.notify_all();
  if (job->on_finished) job->on_finished();
}

}  // namespace clef::server

// SPDX-License-Identifier: MIT
#include "server/scheduler.h"

#include <algorithm>
#include <utility>

namespace clef::server {

Scheduler::Scheduler(Engine& engine, std::size_t capacity)
    : engine_(engine), capacity_(std::max<std::size_t>(1, capacity)) {
  worker_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Job> Scheduler::submit(PreparedRequest prepared, std::function<bool()> still_wanted,
                                       std::function<void()> on_finished) {
  auto job = std::make_shared<Job>();
  job->prepared = std::move(prepared);
  job->still_wanted = std::move(still_wanted);
  job->on_finished = std::move(on_finished);
  return enqueue(std::move(job));
}

std::shared_ptr<Job> Scheduler::enqueue(std::shared_ptr<Job> job) {
  job->enqueued = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_ || queue_.size() >= capacity_) return nullptr;
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

void Scheduler::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // Outside the lock: checking the client may take a system call.
    const bool wanted = !job->still_wanted || job->still_wanted();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!wanted) {
        job->state = JobState::kCancelled;
        ++cancelled_;
      } else {
        job->state = JobState::kRunning;
        job->queue_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - job->enqueued).count();
        running_ = 1;
      }
    }
    if (wanted) {
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
      running_ = 0;
    }
    done_cv_.notify_all();
    if (job->on_finished) job->on_finished();
  }
}

}  // namespace clef::server

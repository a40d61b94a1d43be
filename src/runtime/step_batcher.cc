// SPDX-License-Identifier: MIT
#include "runtime/step_batcher.h"

#include <algorithm>
#include <string>
#include <tuple>

#include "core/error.h"
#include "ops/parallel.h"

namespace clef {
namespace {

/// Steps a waiting chunk may be left out of (for shorter ones) before it goes first: a short
/// request's state part and schema part, and the head's work between them, fit in before a long
/// request's next chunk.
constexpr int kMaxSkips = 3;

}  // namespace

/// One piece of work handed in: a chunk for the next step, or a function to run between steps.
/// Lives on the submitting thread's stack until it is done.
struct StepBatcher::Item {
  const qwen35::SequenceChunk* chunk = nullptr;  ///< null: a function
  const RowsConsumer* consume = nullptr;
  const std::function<void()>* fn = nullptr;
  const std::atomic<bool>* stop = nullptr;
  std::uint64_t seq = 0;  ///< arrival order
  std::chrono::steady_clock::time_point arrived;
  int skips = 0;  ///< steps that ran without this chunk while it waited
  bool done = false;
  bool withdrawn = false;  ///< its stop flag was set before it entered a step
  std::exception_ptr error;
  std::int64_t tokens() const noexcept { return chunk != nullptr ? static_cast<std::int64_t>(chunk->ids.size()) : 0; }
};

StepBatcher::StepBatcher(const qwen35::TextModel& model, const StepBatcherOptions& options)
    : model_(model), options_(options) {
  if (options.max_step_tokens < 1) {
    throw InvalidArgument("step batcher: max_step_tokens must be >= 1, got " + std::to_string(options.max_step_tokens));
  }
  thread_ = std::thread([this] { loop(); });
}

StepBatcher::~StepBatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

StepBatcher::Participant::Participant(StepBatcher& b) : b_(b) {
  std::lock_guard<std::mutex> lock(b_.mu_);
  ++b_.participants_;
}

StepBatcher::Participant::~Participant() {
  {
    std::lock_guard<std::mutex> lock(b_.mu_);
    --b_.participants_;
  }
  b_.work_cv_.notify_all();  // a gathering step may now have everyone it waits for
}

void StepBatcher::set_step_observer(std::function<void(const StepStats&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);  // the compute thread calls it holding mu_
  observer_ = std::move(fn);
}

std::uint64_t StepBatcher::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

bool StepBatcher::forward(const qwen35::SequenceChunk& chunk, const RowsConsumer& consume,
                          const std::atomic<bool>* stop) {
  if (chunk.ids.empty() || chunk.state == nullptr)
    throw InvalidArgument("step batcher: a chunk with no tokens or state");
  // Checked here, on the caller's thread, so that one bad chunk cannot fail a step it shares.
  const std::int64_t vocab = model_.vocab_rows();
  for (const std::int32_t id : chunk.ids) {
    if (id < 0 || id >= vocab) {
      throw InvalidArgument("token id " + std::to_string(id) + " is outside the embedding table [0, " +
                            std::to_string(vocab) + ")");
    }
  }
  Item item;
  item.chunk = &chunk;
  item.consume = &consume;
  item.stop = stop;
  submit_and_wait(item);
  return !item.withdrawn;
}

void StepBatcher::run(const std::function<void()>& fn) {
  Item item;
  item.fn = &fn;
  submit_and_wait(item);
}

void StepBatcher::submit_and_wait(Item& item) {
  std::unique_lock<std::mutex> lock(mu_);
  item.seq = next_seq_++;
  item.arrived = std::chrono::steady_clock::now();
  pending_.push_back(&item);
  work_cv_.notify_all();
  done_cv_.wait(lock, [&] { return item.done; });
  if (item.error) std::rethrow_exception(item.error);
}

void StepBatcher::between_layers(std::int64_t outer_tokens) {
  std::vector<Item*> fns, batch;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (pending_.empty()) return;
    std::vector<Item*> chunks;
    take_pending(fns, chunks);
    // Chunks at most half the running step's size, shortest first, up to that half together; the
    // rest wait for the next step.
    std::sort(chunks.begin(), chunks.end(), [](const Item* a, const Item* b) {
      return std::make_tuple(a->tokens(), a->seq) < std::make_tuple(b->tokens(), b->seq);
    });
    const std::int64_t limit = outer_tokens / 2;
    std::int64_t tokens = 0;
    for (Item* it : chunks) {
      if (tokens + it->tokens() <= limit) {
        batch.push_back(it);
        tokens += it->tokens();
      } else {
        pending_.push_back(it);
      }
    }
  }
  done_cv_.notify_all();  // the withdrawn ones
  run_fns(fns);
  if (!batch.empty()) run_step(batch, true);
  {
    const std::lock_guard<std::mutex> lock(mu_);
    for (Item* it : batch) it->done = true;
    if (!batch.empty()) ++steps_;
  }
  done_cv_.notify_all();
}

void StepBatcher::take_pending(std::vector<Item*>& fns, std::vector<Item*>& chunks) {
  for (Item* it : pending_) {
    if (it->chunk == nullptr) {
      fns.push_back(it);
    } else if (it->stop != nullptr && it->stop->load(std::memory_order_relaxed)) {
      it->withdrawn = true;
      it->done = true;
    } else {
      chunks.push_back(it);
    }
  }
  pending_.clear();
}

void StepBatcher::run_fns(const std::vector<Item*>& fns) {
  for (Item* it : fns) {
    try {
      (*it->fn)();
    } catch (...) {
      it->error = std::current_exception();
    }
  }
  {
    const std::lock_guard<std::mutex> lock(mu_);
    for (Item* it : fns) it->done = true;
  }
  if (!fns.empty()) done_cv_.notify_all();
}

void StepBatcher::run_step(const std::vector<Item*>& batch, bool nested) {
  std::vector<qwen35::SequenceChunk> chunks;
  std::int64_t m = 0;
  for (const Item* it : batch) {
    chunks.push_back(*it->chunk);
    m += it->tokens();
  }
  const std::int64_t H = model_.hidden_size();
  const auto t0 = std::chrono::steady_clock::now();
  qwen35::TextActivations& act = nested ? nested_act_ : act_;
  std::vector<float>& out = nested ? nested_out_ : out_;
  try {
    if (act.rows < m) act = model_.activations(std::max(m, nested ? m : options_.max_step_tokens));
    out.resize(static_cast<std::size_t>(m * H));
    std::int64_t longest = 0;
    for (const Item* it : batch) longest = std::max(longest, it->tokens());
    if (nested || 2 * longest <= options_.max_step_tokens) {
      model_.forward_batch(chunks, out.data(), act);
    } else {
      // A step with a long chunk (over half the budget: a long prefill's) lets shorter chunks that
      // arrived meanwhile run a step of their own between its layers. Steps of short chunks only
      // are short themselves, and the chunks waiting batch better in the next one.
      model_.forward_batch(chunks, out.data(), act, [this, m] { between_layers(m); });
    }
  } catch (...) {
    for (Item* it : batch) it->error = std::current_exception();
    return;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::int64_t row0 = 0;
  for (Item* it : batch) {
    try {
      (*it->consume)(out.data() + row0 * H, it->tokens(), H);
    } catch (...) {
      it->error = std::current_exception();
    }
    row0 += it->tokens();
  }
  const std::lock_guard<std::mutex> lock(mu_);
  if (observer_) observer_(StepStats{static_cast<int>(batch.size()), m, seconds, nested});
}

void StepBatcher::loop() {
  ops::set_num_threads(options_.threads);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, nothing left
    // Gather: give the decisions in flight that are between chunks a moment to hand theirs in.
    for (;;) {
      if (stopping_ || static_cast<int>(pending_.size()) >= participants_) break;
      const auto first = std::min_element(pending_.begin(), pending_.end(),
                                          [](const Item* a, const Item* b) { return a->arrived < b->arrived; });
      const auto until = std::max((*first)->arrived, last_step_end_) + options_.gather;
      if (std::chrono::steady_clock::now() >= until) break;
      work_cv_.wait_until(lock, until);
    }
    // Chunks whose decision was stopped leave without running; functions run next, in order.
    std::vector<Item*> fns, chunks;
    take_pending(fns, chunks);
    if (!fns.empty()) {
      // The chunks wait for the next round (their decisions' gather is then complete anyway).
      pending_.assign(chunks.begin(), chunks.end());
      lock.unlock();
      done_cv_.notify_all();  // the withdrawn ones
      run_fns(fns);
      lock.lock();
      // Their decisions go on to hand in chunks: the next step's gathering counts from now.
      last_step_end_ = std::chrono::steady_clock::now();
      continue;
    }
    done_cv_.notify_all();  // the withdrawn ones
    if (chunks.empty()) continue;
    // The step: chunks skipped in kMaxSkips steps first (no decision starves), then the shortest (a
    // short request, whose two or three chunks then run back to back, overtakes a long one's
    // chunks), then arrival order; whole chunks up to the token budget, the first always.
    std::sort(chunks.begin(), chunks.end(), [](const Item* a, const Item* b) {
      return std::make_tuple(a->skips < kMaxSkips, a->tokens(), a->seq) <
             std::make_tuple(b->skips < kMaxSkips, b->tokens(), b->seq);
    });
    std::vector<Item*> batch;
    std::int64_t tokens = 0;
    for (Item* it : chunks) {
      if (batch.empty() || tokens + it->tokens() <= options_.max_step_tokens) {
        batch.push_back(it);
        tokens += it->tokens();
      } else {
        ++it->skips;
        pending_.push_back(it);
      }
    }
    lock.unlock();
    run_step(batch, false);
    lock.lock();
    for (Item* it : batch) it->done = true;
    ++steps_;
    last_step_end_ = std::chrono::steady_clock::now();
    done_cv_.notify_all();
  }
}

}  // namespace clef

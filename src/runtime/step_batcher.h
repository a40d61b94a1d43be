// SPDX-License-Identifier: MIT
// Continuous batching of prefills (docs/ARCHITECTURE.md "Continuous batching"): the engine's one
// compute thread. Every decision in flight runs on its own thread and hands its backbone chunks
// here; the compute thread gathers the chunks that are ready into a step — at most
// `max_step_tokens` new tokens, whole chunks only — and runs them as one
// qwen35::TextModel::forward_batch, then hands each sequence its hidden rows. Other work that uses
// the thread pool (the joint head, the vision tower) is run here too, between steps, so only this
// thread ever starts a parallel region.
//
// Exactness: a sequence's chunks are the ones it would run alone (the caller chunks; the batcher
// never splits or merges a sequence's tokens), and forward_batch gives every row the bits it gets
// alone (docs/ARCHITECTURE.md "Batched prefill"), so a decision's answer does not depend on which
// other decisions shared its steps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "models/qwen35/text_model.h"

namespace clef {

struct StepBatcherOptions {
  /// New tokens per step (>= 1): the sum of the chunk lengths one step runs. A chunk longer than
  /// the budget runs in a step of its own. Bounds a step's latency and its activation memory
  /// (TextModel::activations of that many rows).
  std::int64_t max_step_tokens = 512;
  /// How long a step waits for decisions in flight that have not handed in their next chunk yet
  /// (they are between chunks, tokenizing, or waiting on the state cache), counted from the
  /// later of the first waiting chunk's arrival and the end of the previous step.
  std::chrono::microseconds gather{2000};
  /// Threads of the compute thread's pool (ops::set_num_threads; <= 0: all usable CPUs). OpenMP
  /// keeps the pool size per calling thread, and the engine's kernels may split work by it, so a
  /// batching engine sets the size its backbone was built with (BackboneOptions::threads).
  int threads = 0;
};

/// What one step ran (StepBatcher's step observer, for metrics).
struct StepStats {
  int sequences = 0;        ///< chunks in the step
  std::int64_t tokens = 0;  ///< their total length
  double seconds = 0;       ///< forward_batch wall time
  bool nested = false;      ///< run between the layers of another step (StepBatcher::between_layers)
};

/// The compute thread of a batching engine. Thread-safe: any number of threads may call forward()
/// and run() at once (each waits for its own work). Every parallel region of the model runs on the
/// compute thread.
class StepBatcher {
 public:
  /// `model` must outlive the batcher. Throws InvalidArgument for max_step_tokens < 1.
  StepBatcher(const qwen35::TextModel& model, const StepBatcherOptions& options);
  /// Finishes the work handed in, then joins the compute thread. Callers must have returned.
  ~StepBatcher();
  StepBatcher(const StepBatcher&) = delete;
  StepBatcher& operator=(const StepBatcher&) = delete;

  /// Receives a chunk's hidden rows on the compute thread: [n, H] fp32 final-norm rows, valid
  /// during the call. May throw; the exception reaches forward()'s caller.
  using RowsConsumer = std::function<void(const float* rows, std::int64_t n, std::int64_t hidden)>;

  /// Runs `chunk` (its ids, optional positions and embeddings; its state is updated) in the next
  /// step it fits in, then `consume` with its rows, and returns. Returns false without running it
  /// when `*stop` (if given) became true before the chunk entered a step. Throws what
  /// forward_batch or `consume` threw (the chunk's state is then unspecified), InvalidArgument
  /// for an empty chunk or an id outside the embedding table.
  bool forward(const qwen35::SequenceChunk& chunk, const RowsConsumer& consume,
               const std::atomic<bool>* stop = nullptr);
  /// Runs `fn` on the compute thread between steps and returns (rethrowing what it threw).
  void run(const std::function<void()>& fn);

  /// A decision in flight, for the gathering rule: while one is registered and has not handed in
  /// work, a step waits up to StepBatcherOptions::gather for it. Hold one for the length of a
  /// decision (RAII).
  class Participant {
   public:
    explicit Participant(StepBatcher& b);
    ~Participant();
    Participant(const Participant&) = delete;
    Participant& operator=(const Participant&) = delete;

   private:
    StepBatcher& b_;
  };

  /// Called on the compute thread after every step (for metrics); empty: none. Takes effect from the
  /// next step; once it returns, the previous observer is not called again.
  void set_step_observer(std::function<void(const StepStats&)> fn);
  const StepBatcherOptions& options() const noexcept { return options_; }
  /// Steps run so far.
  std::uint64_t steps() const;

 private:
  struct Item;
  void loop();
  /// Blocks until `item` is done; rethrows its error.
  void submit_and_wait(Item& item);
  /// Runs the chunks `batch` as one step (compute thread, no lock held); a nested step (run between
  /// the layers of another) uses the second activation set and is not interrupted itself.
  void run_step(const std::vector<Item*>& batch, bool nested);
  /// Called between the layers of a step of `outer_tokens` tokens that holds a chunk of more than
  /// half the step budget (compute thread, no lock held):
  /// runs the functions waiting and, as a nested step, the waiting chunks of at most half that
  /// size, shortest first, up to half of it together. So a short request does not wait for a long
  /// request's whole step: only for one of its layers.
  void between_layers(std::int64_t outer_tokens);
  /// Under mu_: empties pending_ into the functions and the chunks to consider; a chunk whose stop
  /// flag is set is withdrawn (marked done) instead.
  void take_pending(std::vector<Item*>& fns, std::vector<Item*>& chunks);
  /// Runs `fns` in order (no lock held) and marks them done.
  void run_fns(const std::vector<Item*>& fns);

  const qwen35::TextModel& model_;
  const StepBatcherOptions options_;
  std::function<void(const StepStats&)> observer_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  ///< work handed in, a participant left, or stopping
  std::condition_variable done_cv_;  ///< an item finished
  std::deque<Item*> pending_;        ///< handed in, not started
  int participants_ = 0;
  bool stopping_ = false;
  std::uint64_t steps_ = 0;
  std::uint64_t next_seq_ = 0;
  std::chrono::steady_clock::time_point last_step_end_{};
  qwen35::TextActivations act_;         ///< compute thread only
  std::vector<float> out_;              ///< compute thread only: [step rows, H]
  qwen35::TextActivations nested_act_;  ///< compute thread only: a nested step's (between_layers)
  std::vector<float> nested_out_;
  std::thread thread_;
};

}  // namespace clef

// SPDX-License-Identifier: MIT
// Exact state reuse. A Clef prompt is prefix ‖ [images] ‖ state ‖ schema ‖ suffix
// (docs/PROTOCOL.md §3) and the backbone is causal, so everything the engine computes for the rows
// [0, state_end) depends only on those tokens (and the model). The engine computes that part
// once, publishes it here as an immutable entry keyed by a SHA-256 of the exact token ids (plus
// image bytes and the model identity), and later requests with the same prefix + state go on
// from it (StateLoan: the entry's KV buffers are lent, not copied) and run only their schema +
// suffix tokens.
//
// The cache is an LRU bounded by a byte budget. Entries are immutable once published
// (shared_ptr<const StateCacheEntry>: an evicted entry stays alive while a request still reads
// it); the one exception, a StateLoan, gives the buffers back with the same bits. Every member
// function is thread-safe; concurrent requests for the same key compute it
// once (the others wait on an in-flight marker and then read the published entry).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "models/joint_head/joint_head.h"
#include "runtime/state.h"

namespace clef {

/// What a cached prefix holds: the backbone state after the rows [0, rows) and the joint head's
/// per-row work on those rows: the attention keys and values of every routing and field-decoder
/// layer over their memory rows (docs/PROTOCOL.md §4.4 steps 7 and 11; HeadMemoryPrefix).
/// The head keeps nothing else per row before state_end (every question / option span and the
/// global row lie after it), and needs nothing else of those rows, so a warm request reads them
/// and never recomputes them.
struct StateCacheEntry {
  /// KV caches + GDN conv/recurrent states after `rows` tokens. Mutable for one purpose only: a
  /// StateLoan moves the KV buffers out for the length of one request, holding `loan_mu`, and gives
  /// them back holding exactly the rows [0, rows) they held (and the same capacity).
  mutable SequenceState state;
  std::shared_ptr<const HeadMemoryPrefix> head;  ///< the head's keys/values over rows [0, rows); may be null
  std::int64_t rows = 0;                         ///< tokens covered (== state.n_tokens)
  mutable std::mutex loan_mu;                    ///< held while `state`'s KV buffers are lent or copied

  /// Bytes this entry holds (state with its KV buffers' reserved capacity + the head's key/value
  /// rows + a fixed bookkeeping estimate): what the budget counts.
  std::size_t bytes() const noexcept;
};

/// The working backbone state of one request that goes on from a cache entry (docs/ARCHITECTURE.md
/// "Exact state reuse": restoring without copying the cache). When every KV cache of the entry has
/// room for the request's `extra_tokens` more rows (the engine reserves room when it computes an
/// entry), the entry's KV buffers are *lent*: moved into state(), where the request appends its rows
/// past the snapshot's length (attention reads one contiguous cache as before), and moved back by
/// the destructor truncated to the snapshot (KvCache::truncate), so rows [0, entry.rows) are never
/// written and the next request sees the same bits. Otherwise state() is a deep copy, as before.
/// Either way the GDN conv and recurrent states (a few MiB, overwritten by the new tokens) and the
/// counters are copied, and the result is the same state bit for bit.
///
/// The entry's `loan_mu` is held while its buffers are lent, so a second request on the same entry
/// waits for the first to end. With `lend` false the state is always a copy, taken under the lock
/// for the copy's length only: a batching engine, whose concurrent decisions may go on from one
/// entry, copies (docs/ARCHITECTURE.md "Continuous batching"). The state must only grow by appending (shortening
/// or replacing state() makes the destructor terminate the process), and by at most `extra_tokens`
/// rows if the buffers are to stay where they are (more rows reallocate: still correct, the entry then
/// holds the larger buffers, which its budget entry does not count). The constructor gives the entry
/// back untouched if it throws (std::bad_alloc copying the GDN states).
class StateLoan {
 public:
  /// Throws InvalidArgument if `entry` is null or `extra_tokens` < 0.
  StateLoan(std::shared_ptr<const StateCacheEntry> entry, std::int64_t extra_tokens, bool lend = true);
  ~StateLoan();
  StateLoan(const StateLoan&) = delete;
  StateLoan& operator=(const StateLoan&) = delete;

  SequenceState& state() noexcept { return state_; }
  /// true: the entry's KV buffers are in state() until the destructor runs; false: state() is a copy.
  bool lent() const noexcept { return lock_.owns_lock(); }

 private:
  std::shared_ptr<const StateCacheEntry> entry_;
  std::unique_lock<std::mutex> lock_;
  SequenceState state_;
};

/// Counters of one cache (monotonic except bytes / entries).
struct StateCacheStats {
  std::uint64_t hits = 0;       ///< lookups answered by a published entry
  std::uint64_t misses = 0;     ///< lookups that computed the entry
  std::uint64_t evictions = 0;  ///< entries dropped to stay within the budget
  std::size_t bytes = 0;        ///< bytes of the entries held now
  std::size_t entries = 0;      ///< entries held now
  std::size_t budget = 0;       ///< the byte budget (0: the cache is off)
};

/// Builds a cache key: the lower-case hex SHA-256 of a versioned, length-prefixed encoding of
/// (model identity, token ids [0, n) as int32 little-endian, image bytes). Different inputs give
/// different byte strings (every field is length-prefixed), so equal keys mean equal inputs up to
/// SHA-256 collisions. `image_bytes` is the concatenation of the record's image files as given
/// (empty for a text-only record); a vision front-end must add here every byte that changes the
/// image embeddings.
std::string state_cache_key(std::string_view model_identity, std::span<const std::int32_t> ids,
                            std::span<const std::byte> image_bytes = {});

/// A thread-safe LRU of immutable state entries bounded by `budget_bytes`.
class StateCache {
 public:
  using EntryPtr = std::shared_ptr<const StateCacheEntry>;
  /// Computes the entry of a missing key (may throw; the in-flight marker is then cleared and one
  /// of the waiters computes instead).
  using Compute = std::function<EntryPtr()>;

  /// `budget_bytes` 0 disables storing (get_or_compute then always computes, counting a miss).
  explicit StateCache(std::size_t budget_bytes) : budget_(budget_bytes) {}
  StateCache(const StateCache&) = delete;
  StateCache& operator=(const StateCache&) = delete;

  struct Result {
    EntryPtr entry;       ///< never null
    bool hit = false;     ///< true when a published entry answered
    bool stored = false;  ///< true when this call computed the entry and the cache kept it
  };

  /// Returns the entry of `key`, marking it most recently used; if absent, and nobody is
  /// computing it, calls `compute` (without holding the lock), publishes its result (evicting
  /// least recently used entries to fit; an entry larger than the whole budget is returned but
  /// not kept) and returns it. If another thread is computing `key`, waits for it. Rethrows what
  /// `compute` throws. Throws InvalidArgument if `compute` returns null.
  Result get_or_compute(const std::string& key, const Compute& compute);

  /// The entry of `key` (marking it most recently used), or null. Counts nothing.
  EntryPtr find(const std::string& key);

  /// Publishes `entry` under `key` (replacing nothing: a present key keeps its entry), evicting
  /// least recently used entries to fit. Returns false when the entry was not kept (larger than
  /// the budget, or the key was present).
  bool insert(const std::string& key, EntryPtr entry);

  StateCacheStats stats() const;
  std::size_t budget() const noexcept { return budget_; }

 private:
  struct Slot {
    EntryPtr entry;
    std::size_t bytes = 0;
    std::list<std::string>::iterator lru;  ///< position in lru_ (front = most recent)
  };
  bool insert_locked(const std::string& key, EntryPtr entry);

  const std::size_t budget_;
  mutable std::mutex mu_;
  std::condition_variable done_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, Slot> map_;
  std::unordered_set<std::string> in_flight_;
  std::size_t bytes_ = 0;
  std::uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace clef

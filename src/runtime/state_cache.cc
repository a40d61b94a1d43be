// SPDX-License-Identifier: MIT
#include "runtime/state_cache.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "core/sha256.h"

namespace clef {
namespace {

/// Bookkeeping per entry that the vectors do not show (key, list node, map slot, vector headers).
constexpr std::size_t kEntryOverheadBytes = 1024;

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xffu));
}

}  // namespace

std::size_t StateCacheEntry::bytes() const noexcept {
  return state.capacity_bytes() + (head ? head->bytes() : 0) + kEntryOverheadBytes;
}

StateLoan::StateLoan(std::shared_ptr<const StateCacheEntry> entry, std::int64_t extra_tokens, bool lend)
    : entry_(std::move(entry)) {
  if (!entry_) throw InvalidArgument("state loan: no cache entry");
  if (extra_tokens < 0) throw InvalidArgument("state loan: " + std::to_string(extra_tokens) + " extra tokens");
  std::unique_lock<std::mutex> lock(entry_->loan_mu);
  SequenceState& src = entry_->state;
  if (!lend || !src.kv_has_room(extra_tokens)) {
    state_ = src.clone(extra_tokens);  // under the lock: another loan may not hold the buffers now
    return;
  }
  // Everything that can throw (the GDN copies) first: once a buffer is swapped out, nothing may
  // throw before the loan owns the lock, or state_'s destructor would free the entry's buffers.
  state_.layers.resize(src.layers.size());
  for (std::size_t i = 0; i < src.layers.size(); ++i) state_.layers[i].gdn = src.layers[i].gdn;
  for (std::size_t i = 0; i < src.layers.size(); ++i) {
    nn::LayerState& from = src.layers[i];
    nn::LayerState& to = state_.layers[i];
    to.kv.width = from.kv.width;
    to.kv.length = from.kv.length;
    to.kv.bf16 = from.kv.bf16;
    to.kv.swap_buffers(from.kv);
  }
  state_.n_tokens = src.n_tokens;
  state_.next_position = src.next_position;
  lock_ = std::move(lock);
}

StateLoan::~StateLoan() {
  if (!lock_.owns_lock()) return;
  SequenceState& dst = entry_->state;
  for (std::size_t i = 0; i < dst.layers.size(); ++i) {
    nn::KvCache& from = state_.layers[i].kv;
    nn::KvCache& to = dst.layers[i].kv;
    // The request only appended (to.length <= from.length), so this cannot throw; a state()
    // shortened or replaced by its user breaks the contract and ends the process (noexcept)
    // rather than give the entry back wrong.
    from.truncate(to.length);
    to.swap_buffers(from);
  }
}

std::string state_cache_key(std::string_view model_identity, std::span<const std::int32_t> ids,
                            std::span<const std::byte> image_bytes) {
  static constexpr std::string_view kVersion = "clef-state-cache-v1";
  std::vector<std::byte> buf;
  buf.reserve(64 + model_identity.size() + ids.size() * 4 + image_bytes.size());
  auto put_bytes = [&](const void* p, std::size_t n) {
    put_u64(buf, n);
    const auto* b = static_cast<const std::byte*>(p);
    buf.insert(buf.end(), b, b + n);
  };
  put_bytes(kVersion.data(), kVersion.size());
  put_bytes(model_identity.data(), model_identity.size());
  put_u64(buf, ids.size());
  for (const std::int32_t id : ids) {
    const auto u = static_cast<std::uint32_t>(id);
    for (int i = 0; i < 4; ++i) buf.push_back(static_cast<std::byte>((u >> (8 * i)) & 0xffu));
  }
  put_bytes(image_bytes.data(), image_bytes.size());
  return sha256_hex(buf);
}

StateCache::EntryPtr StateCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lk(mu_);
  const auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

bool StateCache::insert_locked(const std::string& key, EntryPtr entry) {
  const std::size_t b = entry->bytes();
  if (b > budget_ || map_.count(key) != 0) return false;
  while (bytes_ + b > budget_ && !lru_.empty()) {
    const auto victim = map_.find(lru_.back());
    bytes_ -= victim->second.bytes;
    map_.erase(victim);
    lru_.pop_back();
    ++evictions_;
  }
  lru_.push_front(key);
  map_.emplace(key, Slot{std::move(entry), b, lru_.begin()});
  bytes_ += b;
  return true;
}

bool StateCache::insert(const std::string& key, EntryPtr entry) {
  if (!entry) throw InvalidArgument("state cache: cannot insert a null entry");
  std::lock_guard<std::mutex> lk(mu_);
  return insert_locked(key, std::move(entry));
}

StateCache::Result StateCache::get_or_compute(const std::string& key, const Compute& compute) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    const auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      ++hits_;
      return {it->second.entry, true, false};
    }
    if (in_flight_.count(key) == 0) break;
    done_.wait(lk, [&] { return in_flight_.count(key) == 0; });
  }
  in_flight_.insert(key);
  ++misses_;
  lk.unlock();
  EntryPtr entry;
  try {
    entry = compute();
    if (!entry) throw InvalidArgument("state cache: the compute function returned no entry");
  } catch (...) {
    lk.lock();
    in_flight_.erase(key);
    lk.unlock();
    done_.notify_all();
    throw;
  }
  lk.lock();
  const bool stored = budget_ > 0 && insert_locked(key, entry);
  in_flight_.erase(key);
  lk.unlock();
  done_.notify_all();
  return {std::move(entry), false, stored};
}

StateCacheStats StateCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  StateCacheStats s;
  s.hits = hits_;
  s.misses = misses_;
  s.evictions = evictions_;
  s.bytes = bytes_;
  s.entries = map_.size();
  s.budget = budget_;
  return s;
}

}  // namespace clef

// SPDX-License-Identifier: MIT
// Exact state reuse: the cache key, the LRU (budget, eviction order, immutability,
// compute-once under concurrency, a failing compute), the head's restore_prefix checks, and the
// engine's hit/miss/off paths on the embedded tiny model (bit-identical logits; the corpus-wide
// comparison is tests/reference/test_state_cache.py).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/huge_pages.h"
#include "nn/state.h"
#include "models/joint_head/joint_head.h"
#include "ops/parallel.h"
#include "runtime/engine.h"
#include "runtime/release.h"
#include "runtime/state_cache.h"
#include "test_util.h"
#include "clef_tools/make_model.h"

namespace clef {
namespace {

/// An entry whose bytes() is exactly `kib` KiB plus the fixed overhead, tagged by its first float.
StateCache::EntryPtr entry_of(std::size_t kib, float tag) {
  auto h = std::make_shared<HeadMemoryPrefix>();
  h->keys.emplace_back(kib * 256, tag);
  h->rows = static_cast<std::int64_t>(kib);
  h->width = 256;
  auto e = std::make_shared<StateCacheEntry>();
  e->head = h;
  e->rows = static_cast<std::int64_t>(kib);
  return e;
}

std::size_t bytes_of(std::size_t kib) { return entry_of(kib, 0)->bytes(); }

TEST(KvCache, Bf16RowsOnHugePages) {
  // bf16 mode keeps only the pair words (ops::kv_bf16_store layouts), appended in any split; buffers
  // of 2 MiB and more sit on 2 MiB boundaries (core/huge_pages.h); clone copies the words and
  // reserves the extra rows; ModelState::bytes counts 4 bytes per word.
  nn::KvCache c;
  c.width = 512;
  c.bf16 = true;
  const std::int64_t rows = 3001;  // odd: the last value word holds one row
  const std::vector<float> k(static_cast<std::size_t>(rows * c.width), 0.5f),
      v(static_cast<std::size_t>(rows * c.width), -0.25f);
  c.append(k.data(), v.data(), 1001);
  c.append(k.data() + 1001 * c.width, v.data() + 1001 * c.width, rows - 1001);
  EXPECT_EQ(c.length, rows);
  EXPECT_TRUE(c.k.empty());
  ASSERT_EQ(c.kw.size(), static_cast<std::size_t>(rows * c.width / 2));
  ASSERT_EQ(c.vw.size(), static_cast<std::size_t>((rows + 1) / 2 * c.width));
  EXPECT_EQ(c.kw[0], 0x3F003F00u);                // bf16(0.5) twice
  EXPECT_EQ(c.vw[0], 0xBE80BE80u);                // bf16(-0.25), rows 0 and 1
  EXPECT_EQ(c.vw[c.vw.size() - 1], 0x0000BE80u);  // row 3000 alone
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.kw.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c.vw.data()) % kHugePageBytes, 0u);
  const nn::KvCache d = c.clone(10);
  EXPECT_TRUE(d.bf16);
  EXPECT_EQ(d.length, rows);
  EXPECT_TRUE(d.kw == c.kw);
  EXPECT_TRUE(d.vw == c.vw);
  EXPECT_GE(d.kw.capacity(), static_cast<std::size_t>((rows + 10) * c.width / 2));
  nn::ModelState st;
  st.layers.resize(1);
  st.layers[0].kv = d;
  EXPECT_EQ(st.bytes(), (c.kw.size() + c.vw.size()) * sizeof(std::uint32_t));
}

TEST(StateCacheEntry, BytesCountTheStateAndTheHeadKeysValues) {
  StateCacheEntry e;
  e.state.layers.resize(2);
  e.state.layers[0].kv.k.assign(100, 0.0f);
  e.state.layers[0].kv.v.assign(100, 0.0f);
  e.state.layers[1].gdn.rec.assign(50, 0.0f);
  const std::size_t without_head = e.bytes();
  EXPECT_GE(without_head, e.state.bytes());
  auto h = std::make_shared<HeadMemoryPrefix>();
  h->rows = 3;
  h->width = 4;
  h->keys.assign(2, std::vector<float>(12, 1.0f));
  h->values.assign(2, std::vector<float>(12, 2.0f));
  EXPECT_EQ(h->bytes(), 4u * 12u * sizeof(float));
  e.head = h;
  EXPECT_EQ(e.bytes(), without_head + h->bytes());
}

/// A one-layer-of-each state: GDN conv/rec filled with `seed`-dependent values, and a KV cache
/// (width 8, `bf16` or fp32) of `rows` appended rows with room for `room` more.
void fill_state(nn::ModelState& st, bool bf16, std::int64_t rows, std::int64_t room, float seed) {
  st.layers.resize(2);
  st.layers[0].gdn.conv.assign(12, seed);
  st.layers[0].gdn.rec.assign(32, -seed);
  nn::KvCache& kv = st.layers[1].kv;
  kv.width = 8;
  kv.bf16 = bf16;
  kv.reserve(rows + room);
  std::vector<float> k(static_cast<std::size_t>(rows * kv.width)), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) {
    k[i] = seed + 0.37f * static_cast<float>(i);
    v[i] = seed - 1.13f * static_cast<float>(i);
  }
  kv.append(k.data(), v.data(), rows);
  st.n_tokens = rows;
  st.next_position = rows + 3;
}

/// Appends `n` rows (distinct, non-zero values) to every KV cache of `st`, advancing its counters,
/// and overwrites its GDN states, as a prefill would.
void go_on(nn::ModelState& st, std::int64_t n) {
  for (nn::LayerState& l : st.layers) {
    for (float& x : l.gdn.conv) x += 1.0f;
    for (float& x : l.gdn.rec) x *= 0.5f;
    if (l.kv.width == 0) continue;
    std::vector<float> k(static_cast<std::size_t>(n * l.kv.width), 3.5f), v(k.size(), -7.25f);
    l.kv.append(k.data(), v.data(), n);
  }
  st.n_tokens += n;
  st.next_position += n;
}

bool same_state(const nn::ModelState& a, const nn::ModelState& b) {
  if (a.layers.size() != b.layers.size() || a.n_tokens != b.n_tokens || a.next_position != b.next_position) {
    return false;
  }
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const nn::LayerState &x = a.layers[i], &y = b.layers[i];
    if (x.gdn.conv != y.gdn.conv || x.gdn.rec != y.gdn.rec || x.kv.length != y.kv.length || x.kv.width != y.kv.width ||
        x.kv.bf16 != y.kv.bf16 || !(x.kv.k == y.kv.k) || !(x.kv.v == y.kv.v) || !(x.kv.kw == y.kv.kw) ||
        !(x.kv.vw == y.kv.vw)) {
      return false;
    }
  }
  return true;
}

TEST(StateLoan, LendsTheKvBuffersAndGivesBackTheSnapshotBitForBit) {
  // Both KV layouts, odd and even snapshot lengths (bf16: an odd one shares its last value word
  // with the first new row), lent twice in a row: the request's state equals a deep copy that went on
  // the same way, and the entry afterwards equals its snapshot, in the same buffers.
  for (const bool bf16 : {true, false}) {
    for (const std::int64_t rows : {5, 6}) {
      SCOPED_TRACE(testing::Message() << (bf16 ? "bf16" : "fp32") << ", " << rows << " rows");
      auto e = std::make_shared<StateCacheEntry>();
      fill_state(e->state, bf16, rows, /*room=*/4, 0.75f);
      e->rows = rows;
      const nn::ModelState snapshot = e->state.clone(0);
      const nn::KvCache& held = e->state.layers[1].kv;
      const void* buffer = bf16 ? static_cast<const void*>(held.vw.data()) : static_cast<const void*>(held.v.data());
      const std::size_t capacity = held.capacity_bytes(), entry_bytes = e->bytes();
      const StateCacheEntry empty;
      EXPECT_GT(e->state.capacity_bytes(), e->state.bytes());
      EXPECT_EQ(entry_bytes, e->state.capacity_bytes() + empty.bytes());  // the budget counts the room
      for (int round = 0; round < 2; ++round) {
        nn::ModelState want = snapshot.clone(3);
        go_on(want, 3);
        {
          StateLoan loan(e, 3);
          EXPECT_TRUE(loan.lent());
          const nn::KvCache& lent = loan.state().layers[1].kv;
          EXPECT_EQ(bf16 ? static_cast<const void*>(lent.vw.data()) : static_cast<const void*>(lent.v.data()), buffer);
          go_on(loan.state(), 3);
          EXPECT_TRUE(same_state(loan.state(), want));
          EXPECT_EQ(bf16 ? static_cast<const void*>(lent.vw.data()) : static_cast<const void*>(lent.v.data()), buffer);
          EXPECT_EQ(e->state.layers[0].gdn.conv, snapshot.layers[0].gdn.conv);  // copied, not lent
        }
        EXPECT_TRUE(same_state(e->state, snapshot));
        EXPECT_EQ(bf16 ? static_cast<const void*>(held.vw.data()) : static_cast<const void*>(held.v.data()), buffer);
        EXPECT_EQ(held.capacity_bytes(), capacity);
        EXPECT_EQ(e->bytes(), entry_bytes);
      }
      // More new rows than the room: a deep copy that goes on the same way; the entry is untouched.
      nn::ModelState want = snapshot.clone(5);
      go_on(want, 5);
      {
        StateLoan loan(e, 5);
        EXPECT_FALSE(loan.lent());
        go_on(loan.state(), 5);
        EXPECT_TRUE(same_state(loan.state(), want));
        EXPECT_TRUE(same_state(e->state, snapshot));
      }
      EXPECT_TRUE(same_state(e->state, snapshot));
    }
  }
  EXPECT_THROW(StateLoan(nullptr, 1), InvalidArgument);
  EXPECT_THROW(StateLoan(std::make_shared<StateCacheEntry>(), -1), InvalidArgument);
  nn::KvCache c;
  c.width = 4;
  EXPECT_THROW(c.truncate(1), InvalidArgument);  // past its length
  EXPECT_THROW(c.reserve(-1), InvalidArgument);
}

TEST(StateCacheKey, DeterministicAndSensitiveToEveryInput) {
  const std::vector<std::int32_t> ids = {1, 2, 3, 248044};
  const std::string k = state_cache_key("model-a", ids);
  EXPECT_EQ(k.size(), 64u);
  EXPECT_EQ(k, state_cache_key("model-a", ids));
  std::vector<std::int32_t> other = ids;
  other[2] = 4;
  EXPECT_NE(k, state_cache_key("model-a", other));
  EXPECT_NE(k, state_cache_key("model-b", ids));
  EXPECT_NE(k, state_cache_key("model-a", std::span<const std::int32_t>(ids).first(3)));
  const std::byte img[2] = {std::byte{0}, std::byte{1}};
  EXPECT_NE(k, state_cache_key("model-a", ids, img));
  // Length prefixes: moving a byte between the identity and the ids must change the key.
  EXPECT_NE(state_cache_key("ab", {}), state_cache_key("a", {}, std::as_bytes(std::span<const char>("b", 1))));
}

TEST(StateCache, ZeroBudgetComputesEveryTimeAndKeepsNothing) {
  StateCache c(0);
  int calls = 0;
  for (int i = 0; i < 3; ++i) {
    const auto r = c.get_or_compute("k", [&] {
      ++calls;
      return entry_of(1, 1.0f);
    });
    EXPECT_FALSE(r.hit);
    ASSERT_NE(r.entry, nullptr);
  }
  EXPECT_EQ(calls, 3);
  const StateCacheStats s = c.stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
}

TEST(StateCache, LeastRecentlyUsedIsEvictedFirstWithinTheBudget) {
  StateCache c(3 * bytes_of(4));  // room for exactly three 4-KiB entries
  for (const char* k : {"a", "b", "c"}) EXPECT_TRUE(c.insert(k, entry_of(4, static_cast<float>(k[0]))));
  EXPECT_EQ(c.stats().bytes, 3 * bytes_of(4));
  ASSERT_NE(c.find("a"), nullptr);  // a becomes the most recent: b is now the oldest
  EXPECT_TRUE(c.insert("d", entry_of(4, 'd')));
  EXPECT_EQ(c.find("b"), nullptr);
  EXPECT_NE(c.find("a"), nullptr);
  EXPECT_NE(c.find("c"), nullptr);
  EXPECT_NE(c.find("d"), nullptr);
  StateCacheStats s = c.stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 3 * bytes_of(4));
  // An 8-KiB entry needs two slots: the two least recent (a, c: d, c, a were just touched in
  // order a, c, d) go.
  EXPECT_TRUE(c.insert("big", entry_of(8, 'B')));
  EXPECT_EQ(c.find("a"), nullptr);
  EXPECT_EQ(c.find("c"), nullptr);
  EXPECT_NE(c.find("d"), nullptr);
  s = c.stats();
  EXPECT_EQ(s.evictions, 3u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_LE(s.bytes, s.budget);
  // Larger than the whole budget: not kept, nothing evicted; get_or_compute still returns it.
  EXPECT_FALSE(c.insert("huge", entry_of(64, 'H')));
  const auto r = c.get_or_compute("huge", [] { return entry_of(64, 'H'); });
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.entry->head->keys[0][0], 'H');
  EXPECT_EQ(c.stats().entries, 2u);
  EXPECT_EQ(c.stats().evictions, 3u);
  // A present key keeps its first entry.
  EXPECT_FALSE(c.insert("d", entry_of(4, 'X')));
  EXPECT_EQ(c.find("d")->head->keys[0][0], 'd');
}

TEST(StateCache, EntriesAreImmutableAndOutliveEviction) {
  static_assert(std::is_const_v<StateCache::EntryPtr::element_type>, "published entries must be read-only");
  StateCache c(bytes_of(4));
  const auto first = c.get_or_compute("a", [] { return entry_of(4, 7.0f); }).entry;
  EXPECT_TRUE(c.get_or_compute("a", [] { return entry_of(4, 8.0f); }).hit);
  c.insert("b", entry_of(4, 9.0f));  // evicts a while `first` still points at it
  EXPECT_EQ(c.find("a"), nullptr);
  ASSERT_EQ(first->head->keys[0].size(), 4u * 256u);
  for (const float v : first->head->keys[0]) ASSERT_EQ(v, 7.0f);
  const auto again = c.get_or_compute("a", [] { return entry_of(4, 10.0f); });
  EXPECT_FALSE(again.hit);  // re-inserted after eviction: computed anew
  EXPECT_EQ(again.entry->head->keys[0][0], 10.0f);
  EXPECT_EQ(c.stats().hits, 1u);
  EXPECT_EQ(c.stats().misses, 2u);
}

TEST(StateCache, ConcurrentRequestsForOneKeyComputeItOnce) {
  StateCache c(std::size_t{1} << 20);
  constexpr int kThreads = 8;
  std::atomic<int> computes{0}, started{0};
  std::vector<StateCache::EntryPtr> got(kThreads);
  std::vector<int> hit(kThreads, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ++started;
      while (started.load() < kThreads) std::this_thread::yield();
      const auto r = c.get_or_compute("same", [&] {
        ++computes;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the others arrive meanwhile
        return entry_of(4, 3.0f);
      });
      got[static_cast<std::size_t>(t)] = r.entry;
      hit[static_cast<std::size_t>(t)] = r.hit ? 1 : 0;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(computes.load(), 1);
  int misses = 0;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(got[static_cast<std::size_t>(t)], got[0]) << "thread " << t << " got another object";
    misses += hit[static_cast<std::size_t>(t)] == 0 ? 1 : 0;
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(c.stats().misses, 1u);
  EXPECT_EQ(c.stats().hits, static_cast<std::uint64_t>(kThreads - 1));
}

TEST(StateCache, DifferentKeysComputeInParallel) {
  // Each compute waits until both are running: a cache that serialised computes would time out.
  StateCache c(std::size_t{1} << 20);
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  std::atomic<int> saw_both{0};
  auto compute = [&] {
    std::unique_lock<std::mutex> lk(mu);
    ++running;
    cv.notify_all();
    if (cv.wait_for(lk, std::chrono::seconds(10), [&] { return running == 2; })) ++saw_both;
    return entry_of(1, 1.0f);
  };
  std::thread a([&] { c.get_or_compute("x", compute); });
  std::thread b([&] { c.get_or_compute("y", compute); });
  a.join();
  b.join();
  EXPECT_EQ(saw_both.load(), 2);
  EXPECT_EQ(c.stats().entries, 2u);
}

TEST(StateCache, AFailedComputeLetsAWaiterComputeInstead) {
  StateCache c(std::size_t{1} << 20);
  std::atomic<int> computes{0};
  std::atomic<bool> first_inside{false};
  std::thread failing([&] {
    EXPECT_THROW(c.get_or_compute("k",
                                  [&]() -> StateCache::EntryPtr {
                                    ++computes;
                                    first_inside = true;
                                    std::this_thread::sleep_for(std::chrono::milliseconds(100));
                                    throw std::runtime_error("compute failed");
                                  }),
                 std::runtime_error);
  });
  while (!first_inside.load()) std::this_thread::yield();
  const auto r = c.get_or_compute("k", [&] {
    ++computes;
    return entry_of(1, 5.0f);
  });
  failing.join();
  EXPECT_EQ(computes.load(), 2);
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.entry->head->keys[0][0], 5.0f);
  EXPECT_EQ(c.stats().entries, 1u);
  EXPECT_THROW(c.get_or_compute("n", [] { return StateCache::EntryPtr(); }), InvalidArgument);
  EXPECT_THROW(c.insert("n", nullptr), InvalidArgument);
}

// ---- the engine on the embedded tiny model ----

class EngineStateCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    model_ = new std::string(test::make_tiny_model(*dir_));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
  }
  static EngineOptions options(std::int64_t mb) {
    EngineOptions o;
    o.accept_any_model = true;
    o.backbone.threads = 1;
    o.backbone.chunk_size = 7;  // several chunks on both sides of state_end
    o.state_cache_mb = mb;
    return o;
  }
  static std::string request(const std::string& state, const std::string& question) {
    return R"({"model":"clef","state":")" + state + R"(","questions":{"q":{"type":"choice","instructions":")" +
           question + R"(","criteria":{"yes":"it is","no":"it is not","maybe":"unclear"}}}})";
  }
  static inline test::TempDir* dir_ = nullptr;
  static inline std::string* model_ = nullptr;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(EngineStateCacheTest, HeadRestorePrefixEqualsFeedingTheRows) {
  const ReleaseFolder r = open_release(*model_);
  const JointHead head(r.head, r.head_config, r.model.text.lm_head);
  const std::int64_t T = 12, H = r.head_config.hidden_size;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) ids[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(100 + 37 * t);
  std::vector<float> hidden(static_cast<std::size_t>(T * H));
  for (std::size_t i = 0; i < hidden.size(); ++i) hidden[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;
  HeadQuestion q;
  q.type_id = 1;
  q.span = {6, 8};
  q.options = {{8, 9}, {9, 11}};
  const auto rows = [&](std::int64_t a, std::int64_t b) {
    return std::span<const float>(hidden).subspan(static_cast<std::size_t>(a * H),
                                                  static_cast<std::size_t>((b - a) * H));
  };
  // The plain path: a record that computes everything from the hidden rows, its memory keys/values
  // split at row 6 like a warm record's.
  JointHeadRecord fed(head, {q}, ids, /*memory_split=*/6);
  fed.feed(rows(0, 4));
  fed.feed(rows(4, T));
  const std::shared_ptr<const HeadMemoryPrefix> prefix = head.memory_prefix(head.project_memory(rows(0, 6)));
  EXPECT_EQ(prefix->rows, 6);
  EXPECT_EQ(prefix->keys.size(), static_cast<std::size_t>(r.head_config.routing_layers + r.head_config.layers));
  EXPECT_EQ(prefix->bytes(),
            2u * prefix->keys.size() * 6u * static_cast<std::size_t>(r.head_config.width) * sizeof(float));
  JointHeadRecord restored(head, {q}, ids, 6);
  restored.restore_prefix(prefix);  // up to the question span
  EXPECT_EQ(restored.rows_fed(), 6);
  restored.feed(rows(6, T));
  const std::vector<float> want = fed.logits();
  EXPECT_TRUE(same_bits(want, restored.logits()));
  JointHeadRecord restored_any(head, {q}, ids);  // no split given: the prefix sets it
  restored_any.restore_prefix(prefix);
  restored_any.feed(rows(6, T));
  EXPECT_TRUE(same_bits(want, restored_any.logits()));
  // Unsplit keys/values (one GEMM over all rows) differ from the split ones by GEMM rounding only.
  JointHeadRecord unsplit(head, {q}, ids);
  unsplit.feed(rows(0, T));
  const std::vector<float> plain = unsplit.logits();
  ASSERT_EQ(plain.size(), want.size());
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(plain[i], want[i], 1e-5f * (1.0f + std::fabs(plain[i])));

  JointHeadRecord bad(head, {q}, ids);
  EXPECT_THROW(bad.restore_prefix(head.memory_prefix(head.project_memory(rows(0, 7)))),
               InvalidArgument);  // covers the question span
  EXPECT_THROW(bad.restore_prefix(nullptr), InvalidArgument);
  EXPECT_THROW(JointHeadRecord(head, {q}, ids, 7), InvalidArgument);  // a split inside the question span
  EXPECT_THROW(JointHeadRecord(head, {q}, ids, T), InvalidArgument);  // a split at or past the last row
  JointHeadRecord other_split(head, {q}, ids, 5);
  EXPECT_THROW(other_split.restore_prefix(prefix), InvalidArgument);  // prefix of 6 rows, split at 5
  const std::vector<float> m = head.project_memory(rows(0, 3));
  EXPECT_THROW(head.memory_prefix(std::span<const float>(m).first(m.size() - 1)), InvalidArgument);  // partial row
  bad.feed(rows(0, 1));
  EXPECT_THROW(bad.restore_prefix(head.memory_prefix(m)), InvalidArgument);  // rows were already fed
  EXPECT_THROW(head.project_memory(std::span<const float>(hidden).first(static_cast<std::size_t>(H - 1))),
               InvalidArgument);
}

TEST_F(EngineStateCacheTest, HitMissAndOffGiveBitIdenticalLogits) {
  Engine on(*model_, options(64));
  Engine off(*model_, options(0));
  const std::string s1 = "The invoice was paid twice on Nov 3rd; order A-55120 needs a refund.";
  const std::string s2 = "The invoice was paid twice on Nov 3rd; order A-55121 needs a refund.";  // one character
  const Decision cold = on.decide(request(s1, "Is a refund due?"));
  EXPECT_EQ(cold.state_cache, StateCacheUse::kMiss);
  EXPECT_EQ(cold.reused_tokens, 0);
  const Decision warm = on.decide(request(s1, "Is a refund due?"));
  EXPECT_EQ(warm.state_cache, StateCacheUse::kHit);
  EXPECT_GT(warm.reused_tokens, 36);  // prefix (36) + state
  EXPECT_LT(warm.reused_tokens, warm.input_tokens);
  const Decision ref = off.decide(request(s1, "Is a refund due?"));
  EXPECT_EQ(ref.state_cache, StateCacheUse::kOff);
  EXPECT_TRUE(same_bits(cold.logits, warm.logits));
  EXPECT_TRUE(same_bits(cold.logits, ref.logits));
  EXPECT_EQ(cold.body, warm.body);
  EXPECT_EQ(cold.body, ref.body);
  // Another question on the same state hits; the same question on a state one character apart misses.
  const Decision other_q = on.decide(request(s1, "Should a human look at it?"));
  EXPECT_EQ(other_q.state_cache, StateCacheUse::kHit);
  EXPECT_EQ(other_q.reused_tokens, warm.reused_tokens);
  EXPECT_TRUE(same_bits(other_q.logits, off.decide(request(s1, "Should a human look at it?")).logits));
  const Decision other_s = on.decide(request(s2, "Is a refund due?"));
  EXPECT_EQ(other_s.state_cache, StateCacheUse::kMiss);
  EXPECT_TRUE(same_bits(other_s.logits, off.decide(request(s2, "Is a refund due?")).logits));
  const StateCacheStats st = on.state_cache_stats();
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.misses, 2u);
  EXPECT_EQ(st.entries, 2u);
  EXPECT_EQ(st.budget, std::size_t{64} << 20);
  // The budget counts the head's cached keys/values: 2 (K, V) x (routing + field layers)
  // x W floats per state row, for both entries (s2 differs by one digit: as many tokens as s1).
  const JointHeadConfig hc = open_release(*model_).head_config;
  const auto kv_per_row = static_cast<std::size_t>(2 * (hc.routing_layers + hc.layers) * hc.width) * sizeof(float);
  EXPECT_GE(st.bytes, 2 * kv_per_row * static_cast<std::size_t>(warm.reused_tokens));
  const StateCacheStats none = off.state_cache_stats();
  EXPECT_EQ(none.budget, 0u);
  EXPECT_EQ(none.misses, 0u);
}

// Decision::state_key: the balancer's routing key covers the model and the prefix +
// state only, never the questions, and no replica-local setting (path, mtime, threads, chunk,
// cache budget, padded readout).
TEST_F(EngineStateCacheTest, LentAndCopiedRestoresGiveTheColdLogitsInBothPrecisions) {
  // Warm requests on states of odd and even length, in fp32 and bf16 (bf16 pair words), each
  // asked twice (the second sees the buffers the first gave back), and, on the first state of each
  // precision, one whose question adds more rows than the entry reserved (the copying restore; about
  // 300 rows, over three times the ~90-row state's room): all bit-identical to a cache-off engine.
  std::string long_question = "Is a refund due";
  for (int i = 0; i < 30; ++i) long_question += ", and is order A-" + std::to_string(55000 + i) + " affected";
  long_question += "?";
  for (const ops::Precision precision : {ops::Precision::kF32, ops::Precision::kBF16}) {
    EngineOptions o = options(64);
    o.backbone.precision = precision;
    Engine on(*model_, o);
    o.state_cache_mb = 0;
    Engine off(*model_, o);
    bool parity_seen[2] = {false, false};
    // States longer than the questions' rows (an entry never reserves more rows than its state has).
    std::string history;
    for (int i = 0; i < 8; ++i) history += "Ticket " + std::to_string(900 + i) + ": the customer wrote again. ";
    bool first_state = true;
    std::vector<const char*> tails = {"Order A-55120 was charged twice.", "Order A-55120 was charged twice!!",
                                      "Two charges on order A-55120, one refund.", "Charged twice."};
#if defined(__SANITIZE_ADDRESS__)
    tails.resize(2);  // one odd and one even state: the memory paths, at half the sanitizer's time
#endif
    for (const char* tail : tails) {
      const std::string state = history + tail;
      SCOPED_TRACE(tail);
      const Decision cold = on.decide(request(state, "Is a refund due?"));
      ASSERT_EQ(cold.state_cache, StateCacheUse::kMiss);
      EXPECT_TRUE(cold.state_lent);  // the entry it just computed, with room for twice its rows
      std::vector<std::string> questions = {"Should a human look at it?", "Is a refund due?"};
      if (first_state) questions.push_back(long_question);
      first_state = false;
      for (const std::string& q : questions) {
        const Decision warm = on.decide(request(state, q));
        ASSERT_EQ(warm.state_cache, StateCacheUse::kHit);
        parity_seen[warm.reused_tokens % 2] = true;
        EXPECT_EQ(warm.state_lent, q != long_question);  // ~300 new rows: more than the room
        EXPECT_TRUE(same_bits(warm.logits, off.decide(request(state, q)).logits)) << q.substr(0, 40);
      }
    }
    EXPECT_TRUE(parity_seen[0] && parity_seen[1]) << "states of odd and even token counts";
  }
}

TEST_F(EngineStateCacheTest, StateKeyCoversTheStateAndNotTheReplica) {
  Engine on(*model_, options(64));
  const std::string s1 = "Order A-55120 was charged twice.";
  const Decision a = on.decide(request(s1, "Is a refund due?"));
  ASSERT_EQ(a.state_key.size(), 64u);
  EXPECT_EQ(a.state_key.find_first_not_of("0123456789abcdef"), std::string::npos) << a.state_key;
  const Decision b = on.decide(request(s1, "Should a human look at it?"));  // a hit
  EXPECT_EQ(b.state_cache, StateCacheUse::kHit);
  EXPECT_EQ(a.state_key, b.state_key);
  EXPECT_NE(on.decide(request("Order A-55121 was charged twice.", "Is a refund due?")).state_key, a.state_key);
  EXPECT_EQ(on.routing_identity().size(), 64u);
  EXPECT_NE(on.routing_identity(), on.model_identity());
  // Another replica: a copy of the folder elsewhere (new path and mtimes), cache off, other chunk
  // and thread count, the padded readout.
  const std::filesystem::path copy = dir_->path() / "replica-copy";
  std::filesystem::copy(*model_, copy, std::filesystem::copy_options::recursive);
  EngineOptions o = options(0);
  o.backbone.chunk_size = 64;
  o.backbone.threads = 2;
  Engine other(copy.string(), o);
  EXPECT_NE(other.model_identity(), on.model_identity());
  EXPECT_EQ(other.routing_identity(), on.routing_identity());
  const Decision c = other.decide(request(s1, "Is a refund due?"));
  EXPECT_EQ(c.state_cache, StateCacheUse::kOff);
  EXPECT_EQ(c.state_key, a.state_key);
  EngineOptions p = options(64);
  p.backbone.padded_readout = true;
  EXPECT_EQ(Engine(*model_, p).decide(request(s1, "Is it?")).state_key, a.state_key);
  // A different release keys differently: one more file, or one byte of a file changed in place
  // (same name, same size).
  { std::ofstream(copy / "NOTES.txt") << "x"; }
  const std::string with_notes = Engine(copy.string(), o).decide(request(s1, "Is a refund due?")).state_key;
  EXPECT_NE(with_notes, a.state_key);
  { std::ofstream(copy / "NOTES.txt") << "y"; }
  EXPECT_NE(Engine(copy.string(), o).decide(request(s1, "Is a refund due?")).state_key, with_notes);
}

TEST_F(EngineStateCacheTest, PaddedReadoutTurnsTheCacheOff) {
  EngineOptions o = options(64);
  o.backbone.padded_readout = true;
  Engine e(*model_, o);
  const Decision d = e.decide(request("short state", "Is it?"));
  EXPECT_EQ(d.state_cache, StateCacheUse::kOff);
  EXPECT_EQ(e.state_cache_stats().budget, 0u);
}

TEST_F(EngineStateCacheTest, RejectsANegativeBudget) { EXPECT_THROW(Engine(*model_, options(-1)), InvalidArgument); }

}  // namespace
}  // namespace clef

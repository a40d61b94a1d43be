// Exact state reuse (issue 7): the cache key, the LRU (budget, eviction order, immutability,
// compute-once under concurrency, a failing compute), the head's restore_prefix checks, and the
// engine's hit/miss/off paths on the embedded tiny model (bit-identical logits; the corpus-wide
// comparison is tests/reference/test_state_cache.py).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "decision/joint_head.h"
#include "runtime/engine.h"
#include "runtime/release.h"
#include "runtime/state_cache.h"
#include "test_util.h"
#include "tools/make_model.h"

namespace clef {
namespace {

/// An entry whose bytes() is exactly `kib` KiB plus the fixed overhead, tagged by its first float.
StateCache::EntryPtr entry_of(std::size_t kib, float tag) {
  auto e = std::make_shared<StateCacheEntry>();
  e->head_memory.assign(kib * 256, tag);
  e->rows = static_cast<std::int64_t>(kib);
  e->head_width = 256;
  return e;
}

std::size_t bytes_of(std::size_t kib) { return entry_of(kib, 0)->bytes(); }

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
    const auto r = c.get_or_compute("k", [&] { ++calls; return entry_of(1, 1.0f); });
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
  EXPECT_EQ(r.entry->head_memory[0], 'H');
  EXPECT_EQ(c.stats().entries, 2u);
  EXPECT_EQ(c.stats().evictions, 3u);
  // A present key keeps its first entry.
  EXPECT_FALSE(c.insert("d", entry_of(4, 'X')));
  EXPECT_EQ(c.find("d")->head_memory[0], 'd');
}

TEST(StateCache, EntriesAreImmutableAndOutliveEviction) {
  static_assert(std::is_const_v<StateCache::EntryPtr::element_type>, "published entries must be read-only");
  StateCache c(bytes_of(4));
  const auto first = c.get_or_compute("a", [] { return entry_of(4, 7.0f); }).entry;
  EXPECT_TRUE(c.get_or_compute("a", [] { return entry_of(4, 8.0f); }).hit);
  c.insert("b", entry_of(4, 9.0f));  // evicts a while `first` still points at it
  EXPECT_EQ(c.find("a"), nullptr);
  ASSERT_EQ(first->head_memory.size(), 4u * 256u);
  for (const float v : first->head_memory) ASSERT_EQ(v, 7.0f);
  const auto again = c.get_or_compute("a", [] { return entry_of(4, 10.0f); });
  EXPECT_FALSE(again.hit);  // re-inserted after eviction: computed anew
  EXPECT_EQ(again.entry->head_memory[0], 10.0f);
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
  EXPECT_EQ(r.entry->head_memory[0], 5.0f);
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
    return std::span<const float>(hidden).subspan(static_cast<std::size_t>(a * H), static_cast<std::size_t>((b - a) * H));
  };
  JointHeadRecord fed(head, {q}, ids);
  fed.feed(rows(0, 4));
  fed.feed(rows(4, T));
  JointHeadRecord restored(head, {q}, ids);
  restored.restore_prefix(head.project_memory(rows(0, 6)));  // up to the question span
  EXPECT_EQ(restored.rows_fed(), 6);
  restored.feed(rows(6, T));
  EXPECT_TRUE(same_bits(fed.logits(), restored.logits()));

  JointHeadRecord bad(head, {q}, ids);
  EXPECT_THROW(bad.restore_prefix(head.project_memory(rows(0, 7))), InvalidArgument);  // covers the question span
  const std::vector<float> m = head.project_memory(rows(0, 3));
  EXPECT_THROW(bad.restore_prefix(std::span<const float>(m).first(m.size() - 1)), InvalidArgument);  // partial row
  bad.feed(rows(0, 1));
  EXPECT_THROW(bad.restore_prefix(m), InvalidArgument);  // rows were already fed
  EXPECT_THROW(head.project_memory(std::span<const float>(hidden).first(static_cast<std::size_t>(H - 1))), InvalidArgument);
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
  EXPECT_GT(st.bytes, 0u);
  const StateCacheStats none = off.state_cache_stats();
  EXPECT_EQ(none.budget, 0u);
  EXPECT_EQ(none.misses, 0u);
}

TEST_F(EngineStateCacheTest, PaddedReadoutTurnsTheCacheOff) {
  EngineOptions o = options(64);
  o.backbone.padded_readout = true;
  Engine e(*model_, o);
  const Decision d = e.decide(request("short state", "Is it?"));
  EXPECT_EQ(d.state_cache, StateCacheUse::kOff);
  EXPECT_EQ(e.state_cache_stats().budget, 0u);
}

TEST_F(EngineStateCacheTest, RejectsANegativeBudget) {
  EXPECT_THROW(Engine(*model_, options(-1)), InvalidArgument);
}

}  // namespace
}  // namespace clef

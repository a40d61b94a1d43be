// SPDX-License-Identifier: MIT
// Continuous batching (docs/ARCHITECTURE.md "Continuous batching"): a batching engine's answers
// are bit-identical to a one-at-a-time engine's for every corpus request, whichever requests share
// its steps (random orders, cold and warm mixed, fp32 / bf16 / int8); a stopped decision's chunks
// leave the batch without running; and the scheduler admits decisions within its memory budget and
// gives their memory back when they end or are cancelled.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/engine.h"
#include "server/scheduler.h"
#include "test_util.h"

namespace clef {
namespace {

/// The request bodies of tests/data/requests/corpus.jsonl under 8,000 bytes: every shape of request
/// (the 64-question one spans many 64-token chunks) less the 255-option and 20 KB-state ones, which
/// are two thirds of the corpus' tokens and add no step mix the others lack. Under AddressSanitizer
/// (what that build looks for is memory errors in the batching paths, not other bits) the first 6
/// requests under 4,000 bytes.
std::vector<std::string> corpus() {
  std::ifstream in(std::string(CLEF_SOURCE_DIR) + "/tests/data/requests/corpus.jsonl");
  std::vector<std::string> bodies;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::string body = nlohmann::json::parse(line).at("request").dump();
#if defined(__SANITIZE_ADDRESS__)
    if (body.size() > 4000 || bodies.size() == 6) continue;
#else
    if (body.size() > 8000) continue;
#endif
    bodies.push_back(std::move(body));
  }
  return bodies;
}

class BatchingTest : public ::testing::TestWithParam<ops::Precision> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    model_ = test::make_tiny_model(*dir_);
  }
  static void TearDownTestSuite() { delete dir_; }
  /// Short chunks and a small step budget, so that requests span several chunks and steps mix
  /// sequences, skip chunks and run some alone.
  static EngineOptions options(bool batching) {
    EngineOptions eo;
    // One thread in fp32: the compute thread must run the pool size the engine was built with.
    eo.backbone.threads = GetParam() == ops::Precision::kF32 ? 1 : 2;
    eo.backbone.chunk_size = 64;
    eo.backbone.precision = GetParam();
    eo.accept_any_model = true;
    eo.batching = batching;
    eo.batch.max_step_tokens = 96;
    return eo;
  }
  static inline test::TempDir* dir_ = nullptr;
  static inline std::string model_;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Under AddressSanitizer the scheduling tests (a stop, nested steps) run in fp32 only: their memory
// paths are the same in every precision, which AnswersAreBitIdenticalToOneAtATime covers (all three).
#if defined(__SANITIZE_ADDRESS__)
#define CLEF_ASAN_FP32_ONLY() \
  if (GetParam() != ops::Precision::kF32) GTEST_SKIP() << "under ASan this test runs in fp32 only"
#else
#define CLEF_ASAN_FP32_ONLY() static_cast<void>(0)
#endif

TEST_P(BatchingTest, AnswersAreBitIdenticalToOneAtATime) {
  const std::vector<std::string> bodies = corpus();
  ASSERT_GE(bodies.size(), 6u);
  std::vector<Decision> want;
  {
    Engine solo(model_, options(false));
    for (const std::string& b : bodies) want.push_back(solo.decide(b));
  }
  Engine engine(model_, options(true));
  std::mutex mu;
  int widest = 0;  // most sequences in one step
  engine.batcher()->set_step_observer([&](const StepStats& s) {
    const std::lock_guard<std::mutex> lock(mu);
    widest = std::max(widest, s.sequences);
  });
  // Each request twice (the second usually warm, on the state the first published, or both cold
  // when they run side by side), in a random order, 8 threads deciding at once.
  std::mt19937 rng(7);
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < bodies.size(); ++i) order.insert(order.end(), {i, i});
  std::shuffle(order.begin(), order.end(), rng);
  std::atomic<std::size_t> next{0};
  std::vector<std::string> failures;
  std::vector<StateCacheUse> uses(order.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (std::size_t k; (k = next.fetch_add(1)) < order.size();) {
        const std::size_t i = order[k];
        const Decision d = engine.decide(engine.prepare(bodies[i]));
        uses[k] = d.state_cache;
        if (d.body != want[i].body || !same_bits(d.logits, want[i].logits)) {
          const std::lock_guard<std::mutex> lock(mu);
          failures.push_back("request " + std::to_string(i) + " (" + state_cache_use_name(d.state_cache) + ")");
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " answers differ, first: " << failures.front();
  EXPECT_GT(std::count(uses.begin(), uses.end(), StateCacheUse::kHit), 0) << "no warm request ran";
  EXPECT_GT(std::count(uses.begin(), uses.end(), StateCacheUse::kMiss), 0) << "no cold request ran";
  engine.batcher()->set_step_observer({});
  EXPECT_GE(widest, 2) << "the decisions never shared a step: nothing was batched";
}

// A decision whose stop flag is set while it runs ends DecisionStopped (a chunk of it waiting for a
// step leaves without running) while another decision sharing its steps goes on to the answer it
// gets alone.
TEST_P(BatchingTest, StoppedDecisionLeavesTheOthersExact) {
  CLEF_ASAN_FP32_ONLY();
  std::string state;
  for (int i = 0; i < 150; ++i) state += "case " + std::to_string(i) + ", ";
  const std::string long_body = "{\"state\":\"" + state + "\",\"questions\":{\"q\":{\"type\":\"noul\"}}}";
  const std::string other = "{\"state\":\"" + state + " other\",\"questions\":{\"q\":{\"type\":\"noul\"}}}";
  EngineOptions eo = options(true);
  eo.state_cache_mb = 0;
  Engine engine(model_, eo);
  const Decision want = [&] {
    Engine solo(model_, [&] {
      EngineOptions o = options(false);
      o.state_cache_mb = 0;
      return o;
    }());
    return solo.decide(other);
  }();
  std::atomic<bool> stop{false};
  PreparedRequest p = engine.prepare(long_body);
  ASSERT_GT(p.record->input_ids.size(), 10u * 64) << "the request must span many chunks";
  bool stopped = false;
  std::thread victim([&] {
    try {
      (void)engine.decide(std::move(p), &stop);
    } catch (const DecisionStopped&) {
      stopped = true;
    }
  });
  Decision got;
  std::thread survivor([&] { got = engine.decide(engine.prepare(other)); });
  while (engine.batcher()->steps() < 8) std::this_thread::yield();
  stop = true;
  victim.join();
  survivor.join();
  EXPECT_TRUE(stopped);
  EXPECT_EQ(got.body, want.body);
  EXPECT_TRUE(same_bits(got.logits, want.logits));
}

// Short requests sent while a long one prefills run their chunks between the layers of the long
// one's steps (nested steps), and every answer is still the one it gets alone. The long request is
// re-sent until a nested step has been seen (on two CPUs, in the first few).
TEST_P(BatchingTest, ShortRequestsRunBetweenTheLayersOfALongOne) {
  CLEF_ASAN_FP32_ONLY();
  std::string state;
#if defined(__SANITIZE_ADDRESS__)
  constexpr int kEntries = 150;  // two chunks: enough to nest in, at a fraction of the ASan time
#else
  constexpr int kEntries = 400;
#endif
  for (int i = 0; i < kEntries; ++i) state += "entry " + std::to_string(i) + ", ";
  const auto body = [&](const std::string& s) {
    return "{\"state\":\"" + s + "\",\"questions\":{\"q\":{\"type\":\"noul\"}}}";
  };
  EngineOptions eo = options(true);
  eo.backbone.chunk_size = 512;
  eo.batch.max_step_tokens = 512;
  eo.state_cache_mb = 0;
  Engine engine(model_, eo);
  EngineOptions so = eo;
  so.batching = false;
  Engine solo(model_, so);
  std::atomic<int> nested{0};
  engine.batcher()->set_step_observer([&](const StepStats& s) { nested += s.nested ? 1 : 0; });
  const Decision want_long = solo.decide(body(state));
  std::vector<Decision> want_short;
  for (int k = 0; k < 4; ++k) want_short.push_back(solo.decide(body("short " + std::to_string(k))));
  for (int round = 0; round < 20 && nested.load() == 0; ++round) {
    std::atomic<bool> long_done{false};
    std::thread long_one([&] {
      const Decision d = engine.decide(engine.prepare(body(state)));
      EXPECT_TRUE(d.body == want_long.body && same_bits(d.logits, want_long.logits)) << "round " << round;
      long_done = true;
    });
    for (int k = 0; !long_done.load(); k = (k + 1) % 4) {
      const Decision d = engine.decide(engine.prepare(body("short " + std::to_string(k))));
      EXPECT_TRUE(d.body == want_short[static_cast<std::size_t>(k)].body &&
                  same_bits(d.logits, want_short[static_cast<std::size_t>(k)].logits));
    }
    long_one.join();
  }
  engine.batcher()->set_step_observer({});
  EXPECT_GT(nested.load(), 0) << "no short chunk ran between the layers of the long request's steps";
}

INSTANTIATE_TEST_SUITE_P(Precisions, BatchingTest,
                         ::testing::Values(ops::Precision::kF32, ops::Precision::kBF16, ops::Precision::kInt8),
                         [](const auto& p) { return std::string(ops::precision_name(p.param)); });

// Admission: with a memory budget of two and a half large decisions, at most two run at once
// (the reserved bytes never pass the budget), small ones fill in behind them in FIFO order, and
// every byte is given back when the jobs end or are cancelled.
TEST(BatchingScheduler, AdmitsWithinTheMemoryBudgetAndGivesItBack) {
  test::TempDir dir;
  const std::string model = test::make_tiny_model(dir);
  EngineOptions eo;
  eo.backbone.threads = 2;
  eo.backbone.chunk_size = 32;
  eo.accept_any_model = true;
  eo.batching = true;
  Engine engine(model, eo);
  std::string state;
  for (int i = 0; i < 120; ++i) state += "line " + std::to_string(i) + ", ";
  const auto big = [&](int i) {
    return "{\"state\":\"" + state + std::to_string(i) + "\",\"questions\":{\"q\":{\"type\":\"noul\"}}}";
  };
  const std::size_t big_bytes = engine.decision_bytes(engine.prepare(big(0)));
  const std::size_t small_bytes =
      engine.decision_bytes(engine.prepare("{\"state\":\"x\",\"questions\":{\"q\":{\"type\":\"noul\"}}}"));
  ASSERT_GT(big_bytes, 4 * small_bytes);
  server::SchedulerOptions so;
  so.capacity = 64;
  so.max_running = 8;
  so.memory_budget = big_bytes * 5 / 2;
  server::Scheduler s(engine, so);
  std::atomic<bool> done{false};
  std::size_t most_reserved = 0;
  int most_running = 0;
  std::thread watch([&] {
    while (!done.load()) {
      most_reserved = std::max(most_reserved, s.reserved_bytes());
      most_running = std::max(most_running, s.running());
      // A sample every 100 us (a decision runs for milliseconds): a spinning watcher would take one
      // of the two CPUs from the engine's threads (under ASan it made this test 50x slower).
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  std::vector<std::shared_ptr<server::Job>> jobs;
  for (int i = 0; i < 12; ++i) jobs.push_back(s.submit(engine.prepare(big(i)), nullptr));
  for (const auto& j : jobs) ASSERT_NE(j, nullptr);
  // Cancel four queued ones: they never run and hold nothing.
  int cancelled = 0;
  for (int i = 8; i < 12; ++i) cancelled += s.cancel(jobs[static_cast<std::size_t>(i)]) ? 1 : 0;
  for (const auto& j : jobs) {
    const server::JobState st =
        s.wait(j, std::chrono::steady_clock::now() + std::chrono::hours(1), nullptr, std::chrono::milliseconds(5));
    EXPECT_TRUE(st == server::JobState::kDone || st == server::JobState::kCancelled);
  }
  done = true;
  watch.join();
  EXPECT_GT(cancelled, 0);
  EXPECT_LE(most_reserved, so.memory_budget);
  EXPECT_EQ(most_running, 2) << "two large decisions fit the budget at once, never three";
  EXPECT_EQ(s.reserved_bytes(), 0u);
  EXPECT_EQ(s.running(), 0);
}

// A job larger than the whole budget still runs (alone), rather than waiting forever.
TEST(BatchingScheduler, AJobLargerThanTheBudgetRunsAlone) {
  test::TempDir dir;
  const std::string model = test::make_tiny_model(dir);
  EngineOptions eo;
  eo.backbone.threads = 1;
  eo.accept_any_model = true;
  eo.batching = true;
  Engine engine(model, eo);
  server::SchedulerOptions so;
  so.max_running = 4;
  so.memory_budget = 1;
  server::Scheduler s(engine, so);
  auto job = s.submit(engine.prepare("{\"state\":\"x\",\"questions\":{\"q\":{\"type\":\"noul\"}}}"), nullptr);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(s.wait(job, std::chrono::steady_clock::now() + std::chrono::hours(1), nullptr,
                   std::chrono::milliseconds(5)),
            server::JobState::kDone);
  EXPECT_TRUE(job->decision.has_value());
}

// More than one decision at a time needs the batching engine (the serial one is not thread-safe).
TEST(BatchingScheduler, SeveralRunningNeedABatchingEngine) {
  test::TempDir dir;
  const std::string model = test::make_tiny_model(dir);
  EngineOptions eo;
  eo.backbone.threads = 1;
  Engine engine(model, eo);
  server::SchedulerOptions so;
  so.max_running = 2;
  EXPECT_THROW(server::Scheduler(engine, so), InvalidArgument);
}

}  // namespace
}  // namespace clef

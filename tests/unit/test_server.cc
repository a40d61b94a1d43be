// SPDX-License-Identifier: MIT
// Unit tests of the HTTP-free parts of `clef serve`: the route table (docs/PROTOCOL.md §2.4), the
// Prometheus exposition, and the scheduler's queue bound, cancellation and ordering on the tiny
// random model (answers compared with Engine::decide called directly).
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "decision/json_value.h"
#include "decision/request_error.h"
#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/readiness.h"
#include "server/routes.h"
#include "server/scheduler.h"
#include "test_util.h"
#include "clef_tools/make_model.h"

namespace clef::server {
namespace {

TEST(ServerRoutes, KnownPaths) {
  EXPECT_EQ(match_route("/v1/systemone").endpoint, Endpoint::kSystemOne);
  EXPECT_EQ(match_route("/v1/decisions").endpoint, Endpoint::kDecisions);
  EXPECT_EQ(match_route("/v1/decisions").dialect, Dialect::kDecisions);
  EXPECT_STREQ(match_route("/v1/decisions").label, "/v1/decisions");
  EXPECT_EQ(match_route("/api/alpha/decisions").dialect, Dialect::kOpenRouter);
  EXPECT_STREQ(match_route("/v1/models").method, "GET");
  EXPECT_EQ(match_route("/health").endpoint, Endpoint::kHealth);
  EXPECT_EQ(match_route("/metrics").endpoint, Endpoint::kMetrics);
  EXPECT_EQ(match_route("/ready").endpoint, Endpoint::kReady);
  EXPECT_STREQ(match_route("/ready").method, "GET");
  EXPECT_STREQ(match_route("/ready").label, "/ready");
  EXPECT_FALSE(match_route("/ready").decision());
  const RouteMatch cf = match_route("/ai/run/@cf/cloudflare/clef-flash");
  EXPECT_EQ(cf.endpoint, Endpoint::kCloudflare);
  EXPECT_EQ(cf.dialect, Dialect::kCloudflare);
  EXPECT_EQ(cf.model, "clef-flash");
  EXPECT_TRUE(cf.decision());
  const RouteMatch acct = match_route("/client/v4/accounts/abc123/ai/run/@cf/cloudflare/clef");
  EXPECT_EQ(acct.endpoint, Endpoint::kCloudflare);
  EXPECT_EQ(acct.model, "clef");
  EXPECT_STREQ(acct.label, "/client/v4/accounts/{id}/ai/run/@cf/cloudflare/{model}");
}

// The table is the one place a route is declared: each row resolves to itself (a template's
// {segments} filled in), GET rows carry their handler and decision rows none, and only the
// balancer's checks are open without the API key.
TEST(ServerRoutes, EveryRowResolvesToItself) {
  std::size_t open = 0;
  for (const Route& r : route_table()) {
    std::string path = r.path;
    for (std::size_t b = path.find('{'); b != std::string::npos; b = path.find('{')) {
      path.replace(b, path.find('}', b) - b + 1, "x");
    }
    const RouteMatch m = match_route(path);
    EXPECT_STREQ(m.label, r.path) << path;
    EXPECT_EQ(m.endpoint, r.endpoint) << path;
    EXPECT_EQ(m.dialect, r.dialect) << path;
    EXPECT_EQ(m.decision(), std::string_view(r.method) == "POST") << path;
    EXPECT_EQ(r.handler != nullptr, std::string_view(r.method) == "GET") << path;
    EXPECT_TRUE(m.allows(r.method)) << path;
    EXPECT_EQ(m.allows("HEAD"), std::string_view(r.method) == "GET") << path;
    if (!r.needs_key) ++open;
  }
  EXPECT_FALSE(match_route("/health").needs_key);
  EXPECT_FALSE(match_route("/ready").needs_key);
  EXPECT_EQ(open, 2u);
  EXPECT_TRUE(match_route("/nope").needs_key);
  EXPECT_FALSE(match_route("/nope").allows("GET"));
}

TEST(ServerRoutes, UnknownPaths) {
  for (const char* p : {"", "/", "/v1/systemone/", "/V1/systemone", "/v1/systemonex", "/ai/run/@cf/cloudflare/",
                        "/ai/run/@cf/cloudflare/clef/x", "/client/v4/accounts//ai/run/@cf/cloudflare/clef",
                        "/client/v4/accounts/a/b/ai/run/@cf/cloudflare/clef", "/ai/run/@cf/meta/llama"}) {
    const RouteMatch m = match_route(p);
    EXPECT_EQ(m.endpoint, Endpoint::kNone) << p;
    EXPECT_STREQ(m.label, "unmatched") << p;
    EXPECT_FALSE(m.decision()) << p;
  }
}

// GET /ready (balancer readiness): 200 only while a decision sent now would be queued.
TEST(ServerReadiness, ReadyUntilTheQueueIsFull) {
  ReadinessInput in{true, false, 0, 2, 1, 4};
  ReadinessReply r = readiness(in, "m\"x");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(
      r.body,
      R"({"status":"ready","model":"m\"x","loaded":true,"queue_depth":0,"queue_capacity":2,"running":1,"max_running":4})");
  in.depth = 1;
  EXPECT_EQ(readiness(in, "m").status, 200);
  in.depth = 2;
  r = readiness(in, "m");
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find(R"("status":"not_ready","reason":"queue_full")"), std::string::npos) << r.body;
  in.closed = true;
  EXPECT_NE(readiness(in, "m").body.find(R"("reason":"shutting_down")"), std::string::npos);
  in.model_loaded = false;
  r = readiness(in, "m");
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find(R"("reason":"model_not_loaded")"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find(R"("loaded":false)"), std::string::npos) << r.body;
}

/// The samples of an exposition as name{labels} -> value.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

TEST(ServerMetrics, HistogramBucketsAreCumulative) {
  Histogram h;
  h.observe(0.0004);  // first bucket
  h.observe(0.001);   // le="0.001" (bounds are inclusive)
  h.observe(0.3);
  h.observe(1000);  // above every bound
  h.observe(-1);    // counted as 0
  EXPECT_EQ(h.count, 5u);
  EXPECT_DOUBLE_EQ(h.sum, 0.0004 + 0.001 + 0.3 + 1000);
  Metrics m;
  DecisionTimings t;
  t.tokenize = 0.0004;
  t.prefill = 0.3;
  t.head = 0.001;
  t.total = 1000;
  m.observe_decision(t, 17, 0.02);
  m.observe_decision(t, 3, 0.02, 40);
  m.count_request("/v1/systemone", 200);
  m.count_request("/v1/systemone", 200);
  m.count_request("unmatched", 404);
  m.count_overload("queue_full");
  QueueGauges g;
  g.depth = 2;
  g.capacity = 64;
  g.running = 1;
  g.cancelled = 5;
  StateCacheStats c;
  c.hits = 7;
  c.misses = 3;
  c.evictions = 1;
  c.bytes = 4096;
  c.entries = 2;
  c.budget = 1 << 20;
  const std::string text = m.render(g, c);
  const auto s = samples(text);
  EXPECT_EQ(s.at("clef_state_cache_lookups_total{result=\"hit\"}"), 7);
  EXPECT_EQ(s.at("clef_state_cache_lookups_total{result=\"miss\"}"), 3);
  EXPECT_EQ(s.at("clef_state_cache_evictions_total"), 1);
  EXPECT_EQ(s.at("clef_state_cache_bytes"), 4096);
  EXPECT_EQ(s.at("clef_state_cache_entries"), 2);
  EXPECT_EQ(s.at("clef_state_cache_budget_bytes"), 1 << 20);
  EXPECT_EQ(s.at("clef_state_cache_reused_tokens_total"), 40);
  EXPECT_EQ(s.at("clef_requests_total{route=\"/v1/systemone\",status=\"200\"}"), 2);
  EXPECT_EQ(s.at("clef_requests_total{route=\"unmatched\",status=\"404\"}"), 1);
  EXPECT_EQ(s.at("clef_overload_total{reason=\"queue_full\"}"), 1);
  EXPECT_EQ(s.at("clef_overload_total{reason=\"queue_timeout\"}"), 0);
  EXPECT_EQ(s.at("clef_input_tokens_total"), 20);
  EXPECT_EQ(s.at("clef_decisions_total"), 2);
  EXPECT_EQ(s.at("clef_queue_depth"), 2);
  EXPECT_EQ(s.at("clef_decisions_running"), 1);
  EXPECT_EQ(s.at("clef_jobs_cancelled_total"), 5);
  EXPECT_EQ(s.at("clef_stage_seconds_bucket{stage=\"tokenize\",le=\"0.0005\"}"), 2);
  EXPECT_EQ(s.at("clef_stage_seconds_bucket{stage=\"prefill\",le=\"0.25\"}"), 0);
  EXPECT_EQ(s.at("clef_stage_seconds_bucket{stage=\"prefill\",le=\"0.5\"}"), 2);
  EXPECT_EQ(s.at("clef_stage_seconds_bucket{stage=\"head\",le=\"0.001\"}"), 2);
  EXPECT_EQ(s.at("clef_stage_seconds_bucket{stage=\"total\",le=\"60\"}"), 0);
  EXPECT_EQ(s.at("clef_stage_seconds_bucket{stage=\"total\",le=\"+Inf\"}"), 2);
  EXPECT_EQ(s.at("clef_stage_seconds_count{stage=\"queue\"}"), 2);
  EXPECT_DOUBLE_EQ(s.at("clef_stage_seconds_sum{stage=\"total\"}"), 2000);
  // Every sample has HELP and TYPE lines for its family.
  for (const char* family :
       {"clef_requests_total", "clef_queue_depth", "clef_stage_seconds", "clef_input_tokens_total"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + family + " "), std::string::npos) << family;
    EXPECT_NE(text.find(std::string("# HELP ") + family + " "), std::string::npos) << family;
  }
}

class SchedulerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    MakeModelOptions mo;
    mo.out_dir = (dir_->path() / "tiny").string();
    make_model(mo);
    EngineOptions eo;
    eo.backbone.threads = 1;
    eo.accept_any_model = true;
    engine_ = new Engine(mo.out_dir, eo);
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete dir_;
  }
  static std::string body(int i) {
    return "{\"state\":\"ticket " + std::to_string(i) +
           "\",\"questions\":{\"q\":{\"type\":\"choice\",\"criteria\":{\"a\":1,\"b\":2,\"c\":null}}}}";
  }
  /// A 1x1 PNG as a data URL.
  static std::string png1x1() {
    return "data:image/"
           "png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg="
           "=";
  }
  static inline test::TempDir* dir_ = nullptr;
  static inline Engine* engine_ = nullptr;
};

constexpr auto kForever = std::chrono::hours(1);

TEST_F(SchedulerTest, AnswersEqualDirectDecisions) {
  std::vector<std::string> want;
  for (int i = 0; i < 6; ++i) want.push_back(engine_->decide(body(i)).body);
  Scheduler s(*engine_, SchedulerOptions{8});
  std::vector<std::shared_ptr<Job>> jobs;
  for (int i = 0; i < 6; ++i) jobs.push_back(s.submit(engine_->prepare(body(i)), nullptr));
  for (int i = 0; i < 6; ++i) {
    ASSERT_NE(jobs[static_cast<std::size_t>(i)], nullptr);
    const auto& job = jobs[static_cast<std::size_t>(i)];
    EXPECT_EQ(s.wait(job, std::chrono::steady_clock::now() + kForever, nullptr, std::chrono::milliseconds(10)),
              JobState::kDone);
    ASSERT_TRUE(job->decision.has_value());
    EXPECT_EQ(job->decision->body, want[static_cast<std::size_t>(i)]);
  }
  EXPECT_EQ(s.depth(), 0u);
}

// The record's refusals (here a vision token in the state of a request with images) come from
// prepare(), which encodes the record, so such a request is answered before it ever queues.
TEST_F(SchedulerTest, RecordRefusalComesFromPrepare) {
  try {
    (void)engine_->prepare("{\"state\":\"<|image_pad|>\",\"images\":[\"" + png1x1() +
                           "\"],\"questions\":{\"q\":{\"type\":\"noul\"}}}");
    FAIL() << "prepare() accepted a vision token in the state";
  } catch (const RequestError& e) {
    EXPECT_STREQ(e.code_name(), "image_token_in_text");
  }
}

TEST_F(SchedulerTest, QueueBoundCancellationAndDeadline) {
  Scheduler s(*engine_, SchedulerOptions{2});
  // Hold the worker: the first job's still_wanted blocks until released.
  std::atomic<bool> release{false};
  auto blocker = s.submit(engine_->prepare(body(0)), [&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  });
  ASSERT_NE(blocker, nullptr);
  while (s.depth() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // taken by the worker
  auto a = s.submit(engine_->prepare(body(1)), nullptr);
  auto b = s.submit(engine_->prepare(body(2)), [] { return false; });  // client gone when it is its turn
  auto c = s.submit(engine_->prepare(body(3)), nullptr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(c, nullptr) << "the queue holds 2";
  EXPECT_EQ(s.depth(), 2u);
  // A queued job whose deadline passed is removed by its waiter.
  EXPECT_EQ(s.wait(a, std::chrono::steady_clock::now(), nullptr, std::chrono::milliseconds(1)), JobState::kCancelled);
  EXPECT_EQ(s.depth(), 1u);
  // A waiter whose poll says the client left cancels too; here b stays queued and the worker drops it.
  release = true;
  EXPECT_EQ(s.wait(blocker, std::chrono::steady_clock::now() + kForever, nullptr, std::chrono::milliseconds(1)),
            JobState::kDone);
  EXPECT_EQ(s.wait(b, std::chrono::steady_clock::now() + kForever, nullptr, std::chrono::milliseconds(1)),
            JobState::kCancelled);
  EXPECT_EQ(s.cancelled(), 2u);
  // A waiter whose poll reports the client gone removes its queued job (the worker is held again).
  release = false;
  auto blocker2 = s.submit(engine_->prepare(body(0)), [&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  });
  ASSERT_NE(blocker2, nullptr);
  while (s.depth() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto d = s.submit(engine_->prepare(body(4)), nullptr);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(s.wait(
                d, std::chrono::steady_clock::now() + kForever, [] { return false; }, std::chrono::milliseconds(1)),
            JobState::kCancelled);
  EXPECT_FALSE(d->decision.has_value());
  EXPECT_EQ(s.cancelled(), 3u);
  release = true;
  s.close();
  EXPECT_EQ(s.submit(engine_->prepare(body(5)), nullptr), nullptr) << "closed";
}

// A client that leaves while its decision runs stops it at the engine's next prefill chunk: the
// job ends cancelled (counted, no answer, no error), nothing reaches the state cache, and the
// engine answers the same request afterwards exactly as it does directly. The engine here prefills
// in 16-token chunks and the request spans over 100 of them (checked below), and the waiter polls
// every millisecond, so only a stop inside the prefill can end it cancelled (a decision run to its end
// would be kDone). Short chunks rather than a long request keep the test cheap under ASan at -O0 (a
// 12,588-token request in 512-token chunks took 115 s there).
TEST_F(SchedulerTest, RunningJobStopsWhenItsClientLeaves) {
  EngineOptions eo;
  eo.backbone.threads = 1;
  eo.backbone.chunk_size = 16;
  eo.accept_any_model = true;
  Engine engine((dir_->path() / "tiny").string(), eo);
  std::string state;
  for (int i = 0; i < 200; ++i) state += "case " + std::to_string(i) + ", ";
  const std::string body = "{\"state\":\"" + state + "\",\"questions\":{\"q\":{\"type\":\"noul\"}}}";
  const StateCacheStats before = engine.state_cache_stats();
  Scheduler s(engine, SchedulerOptions{2});
  std::atomic<int> finished{0};
  auto job = s.submit(engine.prepare(body), nullptr, [&] { finished.fetch_add(1); });
  ASSERT_NE(job, nullptr);
  const auto gone_once_running = [&] { return s.state(job) != JobState::kRunning; };
  EXPECT_EQ(s.wait(job, std::chrono::steady_clock::now() + kForever, gone_once_running, std::chrono::milliseconds(1)),
            JobState::kCancelled);
  EXPECT_TRUE(job->stop.load());
  EXPECT_FALSE(job->decision.has_value());
  EXPECT_FALSE(job->error);
  EXPECT_EQ(s.cancelled(), 1u);
  for (int waited = 0; finished.load() == 0 && waited < 10000; ++waited)  // it runs after the state is set
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(finished.load(), 1) << "on_finished runs for a stopped job";
  EXPECT_EQ(engine.state_cache_stats().entries, before.entries) << "a stopped decision publishes nothing";
  auto again = s.submit(engine.prepare(body), nullptr);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(s.wait(again, std::chrono::steady_clock::now() + kForever, nullptr, std::chrono::milliseconds(10)),
            JobState::kDone);
  ASSERT_TRUE(again->decision.has_value());
  EXPECT_GT(again->decision->input_tokens, 100 * 16) << "the request spans at least 100 prefill chunks";
  EXPECT_EQ(again->decision->body, engine.decide(body).body);
  // A stop flag already set ends a direct decision before any work.
  const std::atomic<bool> stop{true};
  EXPECT_THROW(engine.decide(engine.prepare(body), &stop), DecisionStopped);
}

TEST_F(SchedulerTest, CancelAndCompletionCallbacks) {
  Scheduler s(*engine_, SchedulerOptions{4});
  std::atomic<bool> release{false};
  std::atomic<int> finished{0};
  auto blocker = s.submit(
      engine_->prepare(body(0)),
      [&] {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return true;
      },
      [&] { finished.fetch_add(1); });
  ASSERT_NE(blocker, nullptr);
  while (s.depth() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // taken by the worker
  EXPECT_FALSE(s.cancel(blocker)) << "a job the worker took is not cancelled here";
  auto queued = s.submit(engine_->prepare(body(1)), nullptr, [&] { finished.fetch_add(100); });
  auto dropped = s.submit(
      engine_->prepare(body(2)), [] { return false; }, [&] { finished.fetch_add(10); });
  ASSERT_NE(queued, nullptr);
  ASSERT_NE(dropped, nullptr);
  EXPECT_EQ(s.state(queued), JobState::kQueued);
  EXPECT_TRUE(s.cancel(queued));
  EXPECT_EQ(s.state(queued), JobState::kCancelled);
  EXPECT_FALSE(s.cancel(queued));
  release = true;
  // The worker reports the blocker (done) and the dropped job (cancelled by still_wanted); the job
  // cancelled by its submitter gets no callback.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (finished.load() != 11 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(finished.load(), 11);
  EXPECT_EQ(s.state(blocker), JobState::kDone);
  EXPECT_EQ(s.state(dropped), JobState::kCancelled);
  EXPECT_EQ(s.cancelled(), 2u);
}

// prepare() refuses what decide() refuses, with the same code and message, and each body is
// parsed once: decide(body) is decide(prepare(body)), and decide(prepared) parses nothing.
TEST_F(SchedulerTest, PrepareThrowsWhatDecideThrowsAndBodiesAreParsedOnce) {
  const std::string bad[] = {"{", "[]", "{\"state\":1}", "{\"state\":1,\"questions\":{}}",
                             "{\"state\":1,\"questions\":{\"q\":{\"type\":\"nope\"}}}"};
  for (const std::string& b : bad) {
    std::string from_decide;
    std::string from_prepare;
    const std::uint64_t before = json_texts_parsed();
    try {
      engine_->decide(b);
    } catch (const RequestError& e) {
      from_decide = std::string(e.code_name()) + " " + e.what();
    }
    EXPECT_EQ(json_texts_parsed() - before, 1u) << b;
    try {
      (void)engine_->prepare(b);
    } catch (const RequestError& e) {
      from_prepare = std::string(e.code_name()) + " " + e.what();
    }
    EXPECT_FALSE(from_decide.empty()) << b;
    EXPECT_EQ(from_prepare, from_decide) << b;
  }
  std::uint64_t before = json_texts_parsed();
  (void)engine_->decide(body(1));
  EXPECT_EQ(json_texts_parsed() - before, 1u);
  PreparedRequest prepared = engine_->prepare(body(1));
  before = json_texts_parsed();
  (void)engine_->decide(std::move(prepared));
  EXPECT_EQ(json_texts_parsed(), before);
}

// A request prepared off the engine thread (Engine::prepare: parse + image decoding) answers as its
// body does, and prepare refuses what decide refuses, images included.
TEST_F(SchedulerTest, PreparedJobsAnswerAsTheirBodies) {
  const std::string png1x1 = SchedulerTest::png1x1();
  const std::string with_image =
      "{\"state\":\"photo\",\"images\":[\"" + png1x1 + "\"],\"questions\":{\"q\":{\"type\":\"noul\"}}}";
  const std::string bodies[] = {body(7), with_image};
  Scheduler s(*engine_, SchedulerOptions{4});
  for (const std::string& b : bodies) {
    const std::string want = engine_->decide(b).body;
    PreparedRequest prepared = engine_->prepare(b);
    EXPECT_EQ(prepared.images.size(), b == with_image ? 1u : 0u);
    auto job = s.submit(std::move(prepared), nullptr);
    ASSERT_NE(job, nullptr);
    EXPECT_EQ(s.wait(job, std::chrono::steady_clock::now() + kForever, nullptr, std::chrono::milliseconds(10)),
              JobState::kDone);
    ASSERT_TRUE(job->decision.has_value());
    EXPECT_EQ(job->decision->body, want);
    EXPECT_FALSE(job->prepared.has_value());  // the pixel values are released with the job
  }
  const std::string bad[] = {
      "{\"state\":1,\"images\":[\"data:image/png;base64,AAAA\"],\"questions\":{\"q\":{\"type\":\"noul\"}}}",
      "{\"state\":1,\"images\":[\"https://x/a.png\"],\"questions\":{\"q\":{\"type\":\"noul\"}}}"};
  for (const std::string& b : bad) {
    std::string from_decide;
    std::string from_prepare;
    try {
      engine_->decide(b);
    } catch (const RequestError& e) {
      from_decide = std::string(e.code_name()) + " " + e.what();
    }
    try {
      (void)engine_->prepare(b);
    } catch (const RequestError& e) {
      from_prepare = std::string(e.code_name()) + " " + e.what();
    }
    EXPECT_FALSE(from_decide.empty()) << b;
    EXPECT_EQ(from_prepare, from_decide) << b;
  }
}

}  // namespace
}  // namespace clef::server

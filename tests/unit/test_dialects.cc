// SPDX-License-Identifier: MIT
// Dialect wrapping and error shapes (docs/PROTOCOL.md §2.4, §2.5), and answer edge cases that the
// live response parity test cannot reach (non-finite logits, count mismatches, the Jev modes).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "decision/answers.h"
#include "decision/dialects.h"
#include "decision/request.h"
#include "decision/request_error.h"

namespace clef {
namespace {

using nlohmann::json;

ServedModel served() {
  ServedModel m;
  m.name = "clef-flash";
  return m;
}

RequestError error_for(const std::string& body) {
  try {
    (void)parse_request(body, RequestLimits{}, Dialect::kSystemOne, served());
  } catch (const RequestError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return RequestError(RequestErrorCode::kInvalidJson, JsonPath(), "unreachable");
}

TEST(Dialects, SuccessWrapping) {
  const std::string body = R"({"model":"clef-flash","answers":{},"usage":{"input_tokens":1,"output_tokens":0}})";
  EXPECT_EQ(wire_success(body, Dialect::kSystemOne).body, body);
  EXPECT_EQ(wire_success(body, Dialect::kOpenRouter).body, body);
  const json cf = json::parse(wire_success(body, Dialect::kCloudflare).body);
  EXPECT_EQ(cf["success"], true);
  EXPECT_EQ(cf["result"], json::parse(body));
  EXPECT_TRUE(cf["errors"].empty() && cf["messages"].empty());
}

TEST(Dialects, ValidationErrorShapes) {
  const RequestError e = error_for(R"({"state": "x", "questions": {"q": {"type": "choice", "criteria": []}}})");
  const WireReply s1 = wire_error(e, Dialect::kSystemOne);
  EXPECT_EQ(s1.status, 422);
  const json d = json::parse(s1.body)["detail"][0];
  EXPECT_EQ(d["loc"], json::parse(R"(["body", "questions", "q", "criteria"])"));
  EXPECT_EQ(d["type"], "empty_criteria");
  const WireReply cf = wire_error(e, Dialect::kCloudflare);
  EXPECT_EQ(cf.status, 422);
  const json c = json::parse(cf.body);
  EXPECT_EQ(c["success"], false);
  EXPECT_EQ(c["errors"][0]["code"], 5012);
  const WireReply orr = wire_error(e, Dialect::kOpenRouter);
  EXPECT_EQ(orr.status, 422);
  EXPECT_EQ(json::parse(orr.body)["error"]["metadata"]["path"], "questions.q.criteria");
}

TEST(Dialects, NotJsonAndUnknownModel) {
  const RequestError bad = error_for(R"({"state": "x", "questions": {)");
  const json d = json::parse(wire_error(bad, Dialect::kSystemOne).body)["detail"][0];
  EXPECT_EQ(d["type"], "invalid_json");
  EXPECT_EQ(d["loc"][0], "body");
  EXPECT_EQ(wire_error(bad, Dialect::kCloudflare).status, 400);
  EXPECT_EQ(json::parse(wire_error(bad, Dialect::kCloudflare).body)["errors"][0]["code"], 6003);
  EXPECT_EQ(wire_error(bad, Dialect::kOpenRouter).status, 400);
  const RequestError model = error_for(R"({"model": "gpt-4o", "state": "x", "questions": {"q": {"type": "noul"}}})");
  const WireReply m = wire_error(model, Dialect::kSystemOne);
  EXPECT_EQ(m.status, 400);
  EXPECT_EQ(json::parse(m.body)["detail"]["error_type"], "api_usage_error");
  EXPECT_EQ(json::parse(wire_error(model, Dialect::kCloudflare).body)["errors"][0]["code"], 7000);
  const RequestError type = error_for(R"({"state": "x", "questions": {"q": {"type": "boolean"}}})");
  EXPECT_EQ(wire_error(type, Dialect::kCloudflare).status, 400);
  EXPECT_EQ(json::parse(wire_error(type, Dialect::kCloudflare).body)["errors"][0]["code"], 5006);
}

TEST(Dialects, NeverA5xx) {
  for (int c = 0; c <= static_cast<int>(RequestErrorCode::kUnsupportedPart); ++c) {
    for (Dialect d : {Dialect::kSystemOne, Dialect::kCloudflare, Dialect::kOpenRouter, Dialect::kOpenAI}) {
      const int status = wire_error_status(static_cast<RequestErrorCode>(c), d);
      EXPECT_GE(status, 400);
      EXPECT_LT(status, 500);
    }
  }
}

// The full comparison against Python's round() runs live in tests/reference/test_record_parity.py.
TEST(Answers, RoundingFollowsPython) {
  EXPECT_EQ(python_round4(0.03125), 0.0312);  // exact tie: half to even (docs/PROTOCOL.md §2.1)
  EXPECT_EQ(python_round4(1.0), 1.0);
  EXPECT_THROW(python_round4(NAN), InternalError);
}

TEST(Answers, NonFiniteLogitsAndCountsAreErrors) {
  const SystemOneRequest req = parse_request(R"({"state": "x", "questions": {"q": {"type": "noul"}}})", RequestLimits{},
                                             Dialect::kSystemOne, served());
  const float nan_logits[2] = {NAN, 0.0f};
  EXPECT_THROW(build_response_json(req, "m", nan_logits, 10), InternalError);
  const float three[3] = {0.0f, 0.0f, 0.0f};
  EXPECT_THROW(build_response_json(req, "m", three, 10), InvalidArgument);
}

TEST(Answers, JevConfidenceAndLegend) {
  const SystemOneRequest req = parse_request(
      R"({"state": "x", "questions": {"c": {"type": "choice", "criteria": {"a": null, "b": null}},
          "s": {"type": "score", "criteria": ["low", null, "high"]}}})",
      RequestLimits{}, Dialect::kSystemOne, served());
  const float logits[5] = {std::log(3.0f), 0.0f, 0.0f, 0.0f, 0.0f};  // choice p = (0.75, 0.25); score uniform
  const json ref = json::parse(build_response_json(req, "m", logits, 7));
  EXPECT_EQ(ref["answers"]["c"]["choice"], "a");
  EXPECT_DOUBLE_EQ(ref["answers"]["c"]["confidence"].get<double>(), 0.75);
  EXPECT_TRUE(ref["answers"]["s"]["legend"]["1"].is_null());  // the reference echoes null
  AnswerOptions jev;
  jev.confidence = ConfidenceMode::kJev;
  jev.jev_legend = true;
  const json j = json::parse(build_response_json(req, "m", logits, 7, jev));
  EXPECT_DOUBLE_EQ(j["answers"]["c"]["confidence"].get<double>(), 0.5);  // (0.75 - 1/2) / (1 - 1/2)
  EXPECT_EQ(j["answers"]["s"]["legend"]["1"], "");                       // SDK-safe legend
  // Uniform 3-level score: mode 0, sum p|i-0| = 1, D = (1 + 0 + 1)/3 -> max(0, 1 - 1.5) = 0.
  EXPECT_DOUBLE_EQ(j["answers"]["s"]["confidence"].get<double>(), 0.0);
  EXPECT_EQ(j["usage"]["output_tokens"], 0);
  EXPECT_EQ(json::parse(build_response_json(req, "m", logits, 7, {},
                                            "\"state_tokens_dropped\":12"))["usage"]["state_tokens_dropped"],
            12);
}

}  // namespace
}  // namespace clef

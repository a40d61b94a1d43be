// SPDX-License-Identifier: MIT
// OpenAI's Decisions contract (docs/PROTOCOL.md §7): which bodies are read as OpenAI's, the
// translation onto System One questions (the same question as its System One twin), the input
// rendering rule, the refusals with their `param`, and the answer body. The live tests with the
// official SDKs are tests/server/test_openai_decisions.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "decision/dialects.h"
#include "decision/openai_decisions.h"
#include "decision/render.h"
#include "decision/request.h"

namespace clef {
namespace {

using nlohmann::json;

ServedModel served() {
  ServedModel m;
  m.name = "clef-flash";
  return m;
}

RequestLimits with_images() {
  RequestLimits l;
  l.accept_images = true;
  return l;
}

SystemOneRequest openai(const json& body, const RequestLimits& limits = {}) {
  Dialect contract = Dialect::kSystemOne;
  SystemOneRequest r = parse_request(body.dump(), limits, Dialect::kDecisions, served(), &contract);
  EXPECT_EQ(contract, Dialect::kOpenAI);
  return r;
}

/// The refusal of an OpenAI body: its HTTP status, `error.param` and `error.code`.
struct Refusal {
  int status = 0;
  std::string param, code;
};

Refusal refusal(const json& body, const RequestLimits& limits = {}) {
  try {
    (void)parse_request(body.dump(), limits, Dialect::kOpenAI, served());
  } catch (const RequestError& e) {
    const WireReply w = wire_error(e, Dialect::kOpenAI);
    const json err = json::parse(w.body)["error"];
    EXPECT_EQ(err["type"], "invalid_request_error");
    EXPECT_FALSE(err["message"].get<std::string>().empty());
    return {w.status, err["param"].is_null() ? "" : err["param"].get<std::string>(), err["code"].get<std::string>()};
  }
  ADD_FAILURE() << "accepted: " << body.dump();
  return {};
}

/// What the prompt sees of a question: id, type, instructions text and each option's JSON.
std::string prompt_view(const RequestQuestion& q) {
  std::string s = q.id + "|" + question_type_name(q.type) + "|" + render(q.instructions);
  for (const RequestOption& o : q.options) s += "|" + render(option_semantics(o));
  return s;
}

json base(json questions, json input = "The invoice was paid twice.") {
  return {{"model", "clef-flash"}, {"input", std::move(input)}, {"questions", std::move(questions)}};
}

TEST(OpenAIDecisions, BodyShapeSelectsTheContract) {
  EXPECT_TRUE(is_openai_body(parse_json(R"({"questions": []})")));
  EXPECT_TRUE(is_openai_body(parse_json(R"({"input": "x"})")));
  EXPECT_FALSE(is_openai_body(parse_json(R"({"input": "x", "state": "y", "questions": []})")));
  EXPECT_FALSE(is_openai_body(parse_json(R"({"state": "y", "questions": []})")));  // System One's error
  EXPECT_FALSE(is_openai_body(parse_json(R"({"state": "x", "questions": {}})")));
  EXPECT_FALSE(is_openai_body(parse_json(R"({"input": "x", "state": "y"})")));
  EXPECT_FALSE(is_openai_body(parse_json(R"({})")));
  EXPECT_FALSE(is_openai_body(parse_json(R"([])")));
  Dialect contract = Dialect::kOpenAI;
  EXPECT_THROW(parse_request("{", RequestLimits{}, Dialect::kDecisions, served(), &contract), RequestError);
  EXPECT_EQ(contract, Dialect::kSystemOne);  // not JSON: System One's error shape
}

TEST(OpenAIDecisions, SameQuestionsAsTheSystemOneTwin) {
  const SystemOneRequest o = openai(base(json::array(
      {{{"type", "predicate"}, {"name", "refund"}, {"instructions", "Is a refund due?"}},
       {{"type", "choice"},
        {"instructions", json::array({{{"type", "input_text"}, {"text", "Which team?"}},
                                      {{"type", "input_json"}, {"data", {{"b", 1.50}, {"a", 2}}}}})},
        {"choices", json::array({{{"value", "tech"}},
                                 {{"value", true}, {"description", "yes"}},
                                 {{"value", "billing"}, {"description", "Payments"}}})}},
       {{"type", "score"},
        {"name", "mood"},
        {"instructions", "How upset?"},
        {"levels", json::array({{{"label", "calm"}}, {{"label", "angry"}, {"description", "shouting"}}})}}})));
  const SystemOneRequest s = parse_request(
      R"({"model": "clef-flash", "state": "The invoice was paid twice.", "questions": {
          "refund": {"type": "noul", "instructions": "Is a refund due?"},
          "2": {"type": "choice", "instructions": "Which team?\n{\"a\":2,\"b\":1.5}",
                "criteria": {"tech": null, "true": "yes", "billing": "Payments"}},
          "mood": {"type": "score", "instructions": "How upset?",
                   "criteria": ["calm", {"label": "angry", "description": "shouting"}]}}})",
      RequestLimits{}, Dialect::kSystemOne, served());
  ASSERT_EQ(o.questions.size(), 3u);
  EXPECT_EQ(render(o.state), render(s.state));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(prompt_view(o.questions[i]), prompt_view(s.questions[i])) << i;
    EXPECT_EQ(o.questions[i].request_order, s.questions[i].request_order) << i;
  }
  // Typed values follow Clef's option order (by id): billing, tech, true.
  const OpenAIQuestion& c = o.openai->questions[1];
  EXPECT_FALSE(c.name.has_value());
  ASSERT_EQ(c.values.size(), 3u);
  EXPECT_EQ(c.values[0].as_string(), "billing");
  EXPECT_EQ(c.values[1].as_string(), "tech");
  EXPECT_TRUE(c.values[2].is_bool());
  EXPECT_EQ(o.openai->questions[2].labels, (std::vector<std::string>{"calm", "angry"}));
}

TEST(OpenAIDecisions, InputRenderingRule) {
  const std::string png = "data:image/png;base64,iVBORw0KGgo=";
  // One user message: its content text; parts joined by "\n"; JSON rendered; images taken out.
  const SystemOneRequest one =
      openai(base(json::array({{{"type", "predicate"}, {"instructions", "ok?"}}}),
                  json::array(
                      {{{"role", "user"},
                        {"content", json::array({{{"type", "input_text"}, {"text", "Ticket:"}},
                                                 {{"type", "input_image"}, {"image_url", png}},
                                                 {{"type", "input_json"}, {"data", {{"z", 1}, {"a", "x"}}}}})}}})),
             with_images());
  EXPECT_EQ(one.state.as_string(), "Ticket:\n{\"a\":\"x\",\"z\":1}");
  ASSERT_EQ(one.images.size(), 1u);
  EXPECT_EQ(one.images.items()[0].as_string(), png);
  EXPECT_EQ(openai_param(one.openai->image_params[0]), "input[0].content[1].image_url");
  // Several items: a JSON array, one object per item, rendered like any JSON state.
  const SystemOneRequest many =
      openai(base(json::array({{{"type", "predicate"}, {"instructions", "ok?"}}}),
                  json::array({{{"role", "system"}, {"content", "Be strict."}},
                               {{"type", "message"}, {"role", "user"}, {"content", "Refund?"}},
                               {{"type", "function_call"},
                                {"call_id", "c1"},
                                {"name", "lookup"},
                                {"arguments", "{}"},
                                {"status", "completed"}},
                               {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "paid twice"}},
                               {{"role", "assistant"},
                                {"content", json::array({{{"type", "output_text"}, {"text", "Yes."}}})}}})));
  EXPECT_EQ(render(many.state), R"([{"content":"Be strict.","role":"system"},{"content":"Refund?","role":"user"},)"
                                R"({"arguments":"{}","call_id":"c1","name":"lookup","type":"function_call"},)"
                                R"({"call_id":"c1","output":"paid twice","type":"function_call_output"},)"
                                R"({"content":"Yes.","role":"assistant"}])");
}

TEST(OpenAIDecisions, RefusalsNameTheField) {
  const json p = {{"type", "predicate"}, {"instructions", "ok?"}};
  auto choices = [](int n) {
    json c = json::array();
    for (int i = 0; i < n; ++i) c.push_back({{"value", "v" + std::to_string(i)}});
    return c;
  };
  auto choice = [](json c) { return json{{"type", "choice"}, {"instructions", "which?"}, {"choices", std::move(c)}}; };
  struct Case {
    json body;
    std::string param, code;
    int status;
  };
  json q401 = json::array();
  for (int i = 0; i < 401; ++i) q401.push_back(p);
  const std::vector<Case> cases = {
      {base(json::array()), "questions", "empty_questions", 400},
      {base(q401), "questions", "too_many_questions", 400},
      {base(json::array({choice(choices(1))})), "questions[0].choices", "too_few_options", 400},
      {base(json::array({p, choice(choices(256))})), "questions[1].choices", "too_many_options", 400},
      {base(json::array({choice(json::array({{{"value", "a"}}, {{"value", "a"}}}))})), "questions[0].choices[1].value",
       "duplicate_choice", 400},
      {base(json::array({choice(json::array({{{"value", true}}, {{"value", "true"}}}))})),
       "questions[0].choices[1].value", "indistinct_choices", 400},
      {base(json::array({{{"type", "score"}, {"instructions", "how?"}, {"levels", json::array()}}})),
       "questions[0].levels", "too_few_levels", 400},
      {base(json::array({{{"type", "boolean"}, {"instructions", "x"}}})), "questions[0].type", "invalid_question_type",
       400},
      {base(json::array({{{"type", "predicate"},
                          {"instructions", json::array({{{"type", "input_image"}, {"image_url", "data:,"}}})}}})),
       "questions[0].instructions[0]", "unsupported_part", 400},
      {base(json::array({p}), json::array({{{"type", "reasoning"}}})), "input[0].type", "invalid_value", 400},
      {base(json::array({p}),
            json::array(
                {{{"role", "user"},
                  {"content", json::array({{{"type", "input_image"}, {"image_url", "https://example.com/a.png"}}})}}})),
       "input[0].content[0].image_url", "image_url_unsupported", 400},
      {base(json::array({p}), json::array({{{"type", "function_call_output"}, {"call_id", "c9"}, {"output", "x"}}})),
       "input[0].call_id", "unmatched_call_id", 400},
      {{{"model", "gpt-6-luna"}, {"input", "x"}, {"questions", json::array({p})}}, "model", "unknown_model", 404},
      {{{"input", "x"}, {"questions", json::array({p})}}, "model", "missing_field", 400},
  };
  for (const Case& c : cases) {
    const Refusal r = refusal(c.body, with_images());
    EXPECT_EQ(r.param, c.param) << c.code;
    EXPECT_EQ(r.code, c.code) << c.param;
    EXPECT_EQ(r.status, c.status) << c.code;
  }
  // A text-only model refuses image parts, naming the part.
  const Refusal img =
      refusal(base(json::array({p}),
                   json::array({{{"role", "user"},
                                 {"content", json::array({{{"type", "input_image"}, {"image_url", "data:,"}}})}}})));
  EXPECT_EQ(img.param, "input[0].content[0].image_url");
  EXPECT_EQ(img.code, "images_unsupported");
}

TEST(OpenAIDecisions, AnswerBody) {
  const SystemOneRequest r =
      openai(base(json::array({{{"type", "predicate"}, {"name", "p"}, {"instructions", "ok?"}},
                               {{"type", "choice"},
                                {"instructions", "which?"},
                                {"choices", json::array({{{"value", "b"}}, {{"value", false}}})}},
                               {{"type", "score"},
                                {"name", "s"},
                                {"instructions", "how?"},
                                {"levels", json::array({{{"label", "lo"}}, {{"label", "hi"}}})}}})));
  // Model order: (true, false); choice ids sorted "b" < "false"; score 0, 1.
  const float logits[6] = {0.0f, 0.0f, 0.0f, 2.0f, 1.0f, 0.0f};
  const json a = json::parse(build_openai_response_json(r, "clef-flash", logits, 42, AnswerOptions{}, {30, 7}));
  EXPECT_EQ(a["answers"][0], json::parse(R"({"type":"predicate","name":"p","probability":0.5})"));
  EXPECT_EQ(a["answers"][1]["name"], nullptr);
  EXPECT_EQ(a["answers"][1]["choice"], false);                   // a boolean value comes back a boolean
  EXPECT_EQ(a["answers"][1]["probabilities"][0]["value"], "b");  // request order
  EXPECT_EQ(a["answers"][1]["probabilities"][1]["value"], false);
  EXPECT_EQ(a["answers"][1]["probabilities"][1]["probability"], 0.8808);
  EXPECT_EQ(a["answers"][2]["probabilities"][1], json::parse(R"({"value":1,"label":"hi","probability":0.2689})"));
  EXPECT_EQ(a["answers"][2]["score"], 0.2689);
  EXPECT_EQ(a["usage"], json::parse(R"({"input_tokens":42,"input_tokens_details":{"cached_tokens":30,
      "cache_write_tokens":7},"output_tokens":0,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":42})"));
}

TEST(OpenAIDecisions, LaterErrorsNameTheOpenAIField) {
  const std::string png = "data:image/png;base64,AAAA";
  const SystemOneRequest r =
      openai(base(json::array({{{"type", "predicate"}, {"instructions", "ok?"}},
                               {{"type", "predicate"}, {"name", "n"}, {"instructions", "ok?"}}}),
                  json::array({{{"role", "user"}, {"content", "a"}},
                               {{"role", "user"},
                                {"content", json::array({{{"type", "input_image"}, {"image_url", png}},
                                                         {{"type", "input_image"}, {"image_url", png}}})}}})),
             with_images());
  auto param = [&](const JsonPath& p) {
    return openai_param(to_openai_error(RequestError(RequestErrorCode::kImageInvalid, p, "x"), r).path());
  };
  EXPECT_EQ(param(JsonPath().key("images").index(1)), "input[1].content[1].image_url");
  EXPECT_EQ(param(JsonPath().key("state")), "input");
  EXPECT_EQ(param(JsonPath().key("questions").key("n").key("instructions")), "questions[1].instructions");
  EXPECT_EQ(param(JsonPath().key("questions")), "questions");
}

TEST(OpenAIDecisions, CacheOptions) {
  json b = base(json::array({{{"type", "predicate"}, {"instructions", "ok?"}}}));
  b["prompt_cache_key"] = "tenant-7";
  b["prompt_cache_options"] = {{"mode", "explicit"}};
  const SystemOneRequest r = openai(b);
  EXPECT_EQ(r.openai->prompt_cache_key, "tenant-7");
  EXPECT_TRUE(r.openai->cache_disabled);  // explicit mode without a breakpoint: no prompt cache
  b["input"] = json::array({{{"role", "user"},
                             {"content", json::array({{{"type", "input_text"},
                                                       {"text", "x"},
                                                       {"prompt_cache_breakpoint", {{"mode", "explicit"}}}}})}}});
  EXPECT_FALSE(openai(b).openai->cache_disabled);
  b["prompt_cache_key"] = std::string(65, 'k');
  EXPECT_EQ(refusal(b).param, "prompt_cache_key");
}

}  // namespace
}  // namespace clef

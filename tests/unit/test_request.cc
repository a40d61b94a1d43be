// SPDX-License-Identifier: MIT
// parse_request(): the SystemOne request model and every rejection rule (docs/PROTOCOL.md §1, §5.3,
// §6), each with its code and JSON path. The live comparison with the toolkit's validator over
// tests/data/requests is tests/reference/test_request_parity.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "decide_tool.h"
#include "decision/dialects.h"
#include "decision/render.h"
#include "decision/request.h"

namespace clef {
namespace {

const ServedModel kServed{"clef-flash", {"clef"}, false};

SystemOneRequest parse(std::string_view body, const RequestLimits& limits = {}, Dialect dialect = Dialect::kSystemOne,
                       const ServedModel& served = kServed) {
  return parse_request(body, limits, dialect, served);
}

// Body with the given questions object (JSON text) and state "x".
std::string body_with(const std::string& questions, const std::string& extra = "") {
  return R"({"model": "clef-flash", "state": "x", "questions": )" + questions + extra + "}";
}

struct Rejection {
  std::string code, path, what;
};

Rejection rejection(std::string_view body, const RequestLimits& limits = {}, Dialect dialect = Dialect::kSystemOne,
                    const ServedModel& served = kServed) {
  try {
    (void)parse_request(body, limits, dialect, served);
  } catch (const RequestError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return {e.code_name(), e.path().str(), e.what()};
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

void expect_rejected(std::string_view body, const std::string& code, const std::string& path,
                     const RequestLimits& limits = {}, Dialect dialect = Dialect::kSystemOne) {
  const Rejection r = rejection(body, limits, dialect);
  EXPECT_EQ(r.code, code) << body << "\n" << r.what;
  EXPECT_EQ(r.path, path) << body << "\n" << r.what;
}

std::vector<std::string> option_texts(const RequestQuestion& q) {
  std::vector<std::string> out;
  for (const auto& o : q.options) out.push_back(render(option_semantics(o)));
  return out;
}

TEST(Request, ParsesTypedQuestionsInRequestOrder) {
  const auto r = parse(R"({"model": "clef-flash", "state": {"b": 1.0, "a": [1, 2]}, "x_trace_id": "t",
    "questions": {
      "sentiment": {"type": "score", "instructions": "How upset?", "criteria": ["calm", null, {"k": 1}]},
      "team": {"type": "choice", "criteria": {"10": "ten", "2": null, "1": "one", "20": "twenty"}},
      "refund": {"type": "noul", "instructions": {"ask": "money back?"}, "extra": 1}
    }})");
  EXPECT_EQ(r.model, "clef-flash");
  EXPECT_TRUE(r.model_given);
  EXPECT_EQ(render(r.state), R"({"a":[1,2],"b":1.0})");
  ASSERT_EQ(r.questions.size(), 3u);

  const auto& s = r.questions[0];
  EXPECT_EQ(s.id, "sentiment");
  EXPECT_EQ(s.type, QuestionType::kScore);
  EXPECT_EQ(render(s.instructions), "How upset?");
  EXPECT_FALSE(s.instructions_from_id);
  EXPECT_EQ(option_texts(s),
            (std::vector<std::string>{R"({"description":"calm","option_id":"0"})", R"({"option_id":"1"})",
                                      R"({"description":{"k":1},"option_id":"2"})"}));
  EXPECT_EQ(s.request_order, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(dump_json(s.criteria), R"(["calm",null,{"k":1}])");

  const auto& c = r.questions[1];
  EXPECT_EQ(c.type, QuestionType::kChoice);
  EXPECT_EQ(render(c.instructions), "team");  // missing instructions -> question id (§1.2)
  EXPECT_TRUE(c.instructions_from_id);
  ASSERT_EQ(c.options.size(), 4u);
  EXPECT_EQ(c.options[0].id, "1");  // model order: sorted by id string (§3.4)
  EXPECT_EQ(c.options[1].id, "10");
  EXPECT_EQ(c.options[2].id, "2");
  EXPECT_EQ(c.options[3].id, "20");
  EXPECT_FALSE(c.options[2].description.has_value());
  EXPECT_EQ(option_texts(c)[2], R"({"option_id":"2"})");
  // request order 10, 2, 1, 20 -> model indices 1, 2, 0, 3
  EXPECT_EQ(c.request_order, (std::vector<std::size_t>{1, 2, 0, 3}));

  const auto& n = r.questions[2];
  EXPECT_EQ(n.type, QuestionType::kNoul);
  EXPECT_EQ(render(n.instructions), R"({"ask":"money back?"})");
  EXPECT_EQ(option_texts(n),
            (std::vector<std::string>{
                R"({"description":"The proposition is true or the answer is yes.","option_id":"true"})",
                R"({"description":"The proposition is false or the answer is no.","option_id":"false"})"}));
}

TEST(Request, NoulCriteriaMergeOverDefaults) {
  const auto r = parse(body_with(R"({
      "a": {"type": "noul", "criteria": {"true": "yes it is"}},
      "b": {"type": "noul", "criteria": {"false": null, "maybe": "ignored"}},
      "c": {"type": "noul", "criteria": null},
      "d": {"type": "noul", "criteria": {}}})"));
  EXPECT_EQ(option_texts(r.questions[0])[0], R"({"description":"yes it is","option_id":"true"})");
  EXPECT_EQ(option_texts(r.questions[0])[1],
            R"({"description":"The proposition is false or the answer is no.","option_id":"false"})");
  EXPECT_EQ(option_texts(r.questions[1])[1], R"({"option_id":"false"})");
  EXPECT_EQ(r.questions[2].options[0].description->as_string(), "The proposition is true or the answer is yes.");
  EXPECT_EQ(r.questions[3].options[1].description->as_string(), "The proposition is false or the answer is no.");
}

TEST(Request, InstructionFallbackOnlyForMissingNullOrEmpty) {
  const auto r = parse(body_with(R"({
      "q1": {"type": "noul", "instructions": ""},
      "q2": {"type": "noul", "instructions": null},
      "q3": {"type": "noul", "instructions": " "},
      "q4": {"type": "noul", "instructions": 0},
      "q5": {"type": "noul", "instructions": false},
      "q6": {"type": "noul", "instructions": []}})"));
  EXPECT_EQ(render(r.questions[0].instructions), "q1");
  EXPECT_EQ(render(r.questions[1].instructions), "q2");
  EXPECT_EQ(render(r.questions[2].instructions), " ");  // whitespace is not replaced
  EXPECT_EQ(render(r.questions[3].instructions), "0");
  EXPECT_EQ(render(r.questions[4].instructions), "false");
  EXPECT_EQ(render(r.questions[5].instructions), "[]");
}

TEST(Request, ModelHandling) {
  const std::string q = R"("questions": {"q": {"type": "noul"}})";
  auto r = parse(R"({"state": null, )" + q + "}");
  EXPECT_EQ(r.model, "clef-flash");
  EXPECT_FALSE(r.model_given);
  EXPECT_TRUE(r.state.is_null());
  for (const char* m : {"jev-latest", "clef-flash", "clef", "@cf/cloudflare/clef-flash", "@cf/cloudflare/clef",
                        "cloudflare/clef-flash"}) {
    r = parse(std::string(R"({"model": ")") + m + R"(", "state": "s", )" + q + "}");
    EXPECT_EQ(r.model, m);  // echoed as sent
    EXPECT_TRUE(r.model_given);
  }
  expect_rejected(R"({"model": "gpt-4o", "state": "s", )" + q + "}", "unknown_model", "model");
  expect_rejected(R"({"model": "@cf/cloudflare/other", "state": "s", )" + q + "}", "unknown_model", "model");
  expect_rejected(R"({"model": "@cf/cloudflare/jev-latest", "state": "s", )" + q + "}", "unknown_model", "model");
  expect_rejected(R"({"model": "cloudflare/@cf/cloudflare/clef", "state": "s", )" + q + "}", "unknown_model", "model");
  expect_rejected(R"({"model": "Clef-Flash", "state": "s", )" + q + "}", "unknown_model", "model");
  expect_rejected(R"({"model": 5, "state": "s", )" + q + "}", "invalid_type", "model");
  expect_rejected(R"({"model": null, "state": "s", )" + q + "}", "invalid_type", "model");
  const ServedModel any{"clef-flash", {}, true};
  EXPECT_EQ(parse(R"({"model": "whatever", "state": "s", )" + q + "}", {}, Dialect::kSystemOne, any).model, "whatever");
}

TEST(Request, BadCorpusCases) {
  // tests/data/requests/bad.jsonl, one case each (the live test reads the file itself).
  expect_rejected(R"({"model": "clef-flash", "state": "x", "questions": {)", "invalid_json", "questions");
  expect_rejected(body_with("{}"), "empty_questions", "questions");
  expect_rejected(body_with(R"([{"type": "noul"}])"), "invalid_type", "questions");
  expect_rejected(body_with(R"({"q": {"type": "boolean", "instructions": "?"}})"), "invalid_question_type",
                  "questions.q.type");
  expect_rejected(body_with(R"({"q": {"type": "choice", "instructions": "?", "criteria": ["a", "b"]}})"),
                  "invalid_type", "questions.q.criteria");
  expect_rejected(body_with(R"({"q": {"type": "choice", "instructions": "?", "criteria": {"a": null}}})"),
                  "too_few_options", "questions.q.criteria");
  expect_rejected(body_with(R"({"q": {"type": "score", "instructions": "?", "criteria": {"low": 1, "high": 2}}})"),
                  "invalid_type", "questions.q.criteria");
  expect_rejected(
      body_with(
          R"({"q": {"type": "score", "instructions": "?", "criteria": ["0","1","2","3","4","5","6","7","8","9","10"]}})"),
      "too_many_levels", "questions.q.criteria");
  expect_rejected(R"({"model": "clef-flash", "questions": {"q": {"type": "noul", "instructions": "?"}}})",
                  "missing_field", "state");
  expect_rejected(body_with(R"({"q": {"type": "noul", "instructions": "cat?"}})",
                            R"(, "images": ["https://example.com/cat.png"])"),
                  "images_unsupported", "images");
  expect_rejected(body_with(R"({"q": {"type": "noul", "instructions": "?"}})",
                            R"(, "videos": [["data:image/png;base64,AAAA"]])"),
                  "videos_unsupported", "videos");
  expect_rejected(body_with(R"({"q": "is it?"})"), "invalid_type", "questions.q");
}

TEST(Request, TopLevelRules) {
  expect_rejected("[]", "invalid_type", "");
  expect_rejected("\"text\"", "invalid_type", "");
  expect_rejected(R"({"model": "clef-flash", "state": "x"})", "missing_field", "questions");
  expect_rejected(R"({"model": "clef-flash", "state": "x", "questions": null})", "invalid_type", "questions");
  expect_rejected(R"({"model": "clef-flash", "state": "x", "questions": "q"})", "invalid_type", "questions");
  // images / videos: absent, null and [] are fine (the reference only reads truthy lists)
  EXPECT_NO_THROW(parse(body_with(R"({"q": {"type": "noul"}})", R"(, "images": [], "videos": null)")));
  expect_rejected(body_with(R"({"q": {"type": "noul"}})", R"(, "images": ["data:image/png;base64,AAAA"])"),
                  "images_unsupported", "images");
  expect_rejected(body_with(R"({"q": {"type": "noul"}})", R"(, "images": "data:image/png;base64,AAAA")"),
                  "images_unsupported", "images");
  // unknown fields are ignored, media_kwargs included (never honoured)
  EXPECT_NO_THROW(parse(body_with(R"({"q": {"type": "noul"}})", R"(, "seed": 1, "media_kwargs": {"x": 1}, "id": 7)")));
  // syntax-level rejections reach the caller with their codes
  expect_rejected(body_with(R"({"q": {"type": "noul", "instructions": NaN}})"), "non_finite_number",
                  "questions.q.instructions");
  expect_rejected(R"({"model": "clef-flash", "state": "\ud800", "questions": {"q": {"type": "noul"}}})",
                  "lone_surrogate", "state");
}

TEST(Request, QuestionCountLimits) {
  std::string qs = "{";
  for (int i = 0; i < 65; ++i) {
    if (i) qs += ",";
    qs += "\"q";
    qs += std::to_string(i);
    qs += R"(": {"type": "noul"})";
  }
  qs += "}";
  expect_rejected(body_with(qs), "too_many_questions", "questions");
  RequestLimits wide;
  wide.max_questions = 65;
  EXPECT_EQ(parse(body_with(qs), wide).questions.size(), 65u);
  RequestLimits two;
  two.min_questions = 2;
  expect_rejected(body_with(R"({"q": {"type": "noul"}})"), "too_few_questions", "questions", two);
}

TEST(Request, QuestionRules) {
  expect_rejected(body_with(R"({"": {"type": "noul"}})"), "empty_question_id", R"(questions[""])");
  expect_rejected(body_with(R"({"": {"type": "noul", "instructions": "has some"}})"), "empty_question_id",
                  R"(questions[""])");
  const std::string long_id(1025, 'a');
  expect_rejected(body_with("{\"" + long_id + R"(": {"type": "noul"}})"), "question_id_too_long", "questions");
  EXPECT_NO_THROW(parse(body_with("{\"" + std::string(1024, 'a') + R"(": {"type": "noul"}})")));
  expect_rejected(body_with(R"({"q": 1})"), "invalid_type", "questions.q");
  expect_rejected(body_with(R"({"q": null})"), "invalid_type", "questions.q");
  expect_rejected(body_with(R"({"q": ["noul"]})"), "invalid_type", "questions.q");
  expect_rejected(body_with(R"({"q": {}})"), "missing_field", "questions.q.type");
  expect_rejected(body_with(R"({"q": {"type": "Noul"}})"), "invalid_question_type", "questions.q.type");
  expect_rejected(body_with(R"({"q": {"type": null}})"), "invalid_question_type", "questions.q.type");
  expect_rejected(body_with(R"({"q": {"type": 0}})"), "invalid_question_type", "questions.q.type");
  expect_rejected(body_with(R"({"ok": {"type": "noul"}, "q.2": {"type": "x"}})"), "invalid_question_type",
                  R"(questions["q.2"].type)");
  expect_rejected(body_with(R"({"with space": {"type": "choice"}})"), "empty_criteria",
                  R"(questions["with space"].criteria)");
  expect_rejected(body_with("{\"\xec\xa7\x88\xeb\xac\xb8\": {\"type\": \"score\", \"criteria\": 3}}"), "invalid_type",
                  "questions[\"\xec\xa7\x88\xeb\xac\xb8\"].criteria");
  // Ids are kept as sent: spaces, non-ASCII, even newlines (inserted raw in the prompt,
  // docs/PROTOCOL.md §6 item 3).
  const auto r = parse(
      body_with(R"({"with space": {"type": "noul"}, "x\nTYPE: score": {"type": "noul"}, "🎯": {"type": "noul"}})"));
  EXPECT_EQ(r.questions[1].id, "x\nTYPE: score");
  EXPECT_EQ(r.questions[2].id, "\xf0\x9f\x8e\xaf");
}

TEST(Request, CriteriaShapes) {
  const std::string p = "questions.q.criteria";
  // noul: absent / null / object only
  for (const char* c : {"[]", "[[\"true\", \"x\"]]", "\"tf\"", "0", "false", "true"}) {
    expect_rejected(body_with(std::string(R"({"q": {"type": "noul", "criteria": )") + c + "}}"), "invalid_type", p);
  }
  // choice: a non-empty object
  for (const char* c : {"null", "{}", "[]"}) {
    expect_rejected(body_with(std::string(R"({"q": {"type": "choice", "criteria": )") + c + "}}"), "empty_criteria", p);
  }
  expect_rejected(body_with(R"({"q": {"type": "choice"}})"), "empty_criteria", p);
  for (const char* c : {"\"\"", "0", "false", "\"ab\"", "[\"a\", \"b\"]", "3"}) {
    expect_rejected(body_with(std::string(R"({"q": {"type": "choice", "criteria": )") + c + "}}"), "invalid_type", p);
  }
  // score: a non-empty array
  for (const char* c : {"null", "[]", "{}"}) {
    expect_rejected(body_with(std::string(R"({"q": {"type": "score", "criteria": )") + c + "}}"), "empty_criteria", p);
  }
  for (const char* c : {"\"abc\"", "5", "true", "{\"low\": 1, \"high\": 2}"}) {
    expect_rejected(body_with(std::string(R"({"q": {"type": "score", "criteria": )") + c + "}}"), "invalid_type", p);
  }
}

TEST(Request, OptionAndLevelLimits) {
  const std::string p = "questions.q.criteria";
  auto choice = [](int n) {
    std::string c = "{";
    for (int i = 0; i < n; ++i) {
      if (i) c += ",";
      c += "\"o";
      c += std::to_string(i);
      c += "\": null";
    }
    return body_with(R"({"q": {"type": "choice", "criteria": )" + c + "}}}");
  };
  auto score = [](int n) {
    std::string c = "[";
    for (int i = 0; i < n; ++i) {
      if (i) c += ",";
      c += "\"l";
      c += std::to_string(i);
      c += "\"";
    }
    return body_with(R"({"q": {"type": "score", "criteria": )" + c + "]}}");
  };
  expect_rejected(choice(1), "too_few_options", p);
  EXPECT_EQ(parse(choice(2)).questions[0].options.size(), 2u);
  EXPECT_EQ(parse(choice(255)).questions[0].options.size(), 255u);
  expect_rejected(choice(256), "too_many_options", p);
  expect_rejected(score(1), "too_few_levels", p);
  EXPECT_EQ(parse(score(2)).questions[0].options.size(), 2u);
  EXPECT_EQ(parse(score(10)).questions[0].options.size(), 10u);
  expect_rejected(score(11), "too_many_levels", p);
  RequestLimits loose;
  loose.min_choice_options = 1;
  loose.max_score_levels = 11;
  EXPECT_EQ(parse(choice(1), loose).questions[0].options.size(), 1u);
  EXPECT_EQ(parse(score(11), loose).questions[0].options[10].id, "10");
  // duplicate choice keys collapse like a Python dict (first position, last value)
  const auto r = parse(body_with(R"({"q": {"type": "choice", "criteria": {"b": 1, "a": 2, "b": 3}}})"));
  EXPECT_EQ(option_texts(r.questions[0]),
            (std::vector<std::string>{R"({"description":2,"option_id":"a"})", R"({"description":3,"option_id":"b"})"}));
  EXPECT_EQ(r.questions[0].request_order, (std::vector<std::size_t>{1, 0}));
}

TEST(Request, OpenRouterImagePartsRefused) {
  const std::string q = R"("questions": {"q": {"type": "noul"}})";
  const std::string with_image =
      R"({"model": "clef-flash", "state": ["a text", {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}], )" +
      q + "}";
  expect_rejected(with_image, "images_unsupported", "state.1", {}, Dialect::kOpenRouter);
  // In the SystemOne dialect the same state is just JSON data (rendered, images never read from it).
  EXPECT_EQ(render(parse(with_image).state),
            R"(["a text",{"image_url":{"url":"data:image/png;base64,AAAA"},"type":"image_url"}])");
  // Text-only OpenRouter state arrays pass through as JSON (how text items combine is unspecified).
  EXPECT_EQ(render(parse(R"({"state": ["a", "b"], )" + q + "}", {}, Dialect::kOpenRouter).state), R"(["a","b"])");
  expect_rejected(R"({"state": "x", "images": ["data:image/png;base64,AAAA"], )" + q + "}", "images_unsupported",
                  "images", {}, Dialect::kOpenRouter);
}

TEST(Request, ErrorMessageIsOneLineWithPath) {
  const Rejection r = rejection(body_with(R"({"q": {"type": "score", "criteria": "abc"}})"));
  EXPECT_NE(r.what.find("questions.q.criteria: score criteria must be an array"), std::string::npos) << r.what;
  EXPECT_NE(r.what.find("each character"), std::string::npos) << r.what;
  EXPECT_EQ(r.what.find('\n'), std::string::npos);
  const Rejection j = rejection("{\"a\": }");
  EXPECT_NE(j.what.find("(at byte 6)"), std::string::npos) << j.what;
}

TEST(Request, MessagesNameTheBadValueAndKeepTheirCodes) {
  // A wrong type names what it got and, when a type is one typo or a letter case away, suggests it.
  Rejection r = rejection(body_with(R"({"q": {"type": "Choice", "criteria": {"a": 1, "b": 2}}})"));
  EXPECT_EQ(r.code, "invalid_question_type");
  EXPECT_EQ(r.path, "questions.q.type");
  EXPECT_NE(r.what.find(R"(type must be noul, choice, or score, got "Choice"; did you mean "choice"? (types are)"),
            std::string::npos)
      << r.what;
  r = rejection(body_with(R"({"q": {"type": "scroe", "criteria": ["a", "b"]}})"));
  EXPECT_NE(r.what.find(R"(got "scroe"; did you mean "score"?)"), std::string::npos) << r.what;
  r = rejection(body_with(R"({"q": {"type": "maybe"}})"));
  EXPECT_NE(r.what.find(R"(got "maybe")"), std::string::npos) << r.what;
  EXPECT_EQ(r.what.find("did you mean"), std::string::npos) << r.what;
  r = rejection(body_with(R"({"q": {"type": 2}})"));
  EXPECT_EQ(r.code, "invalid_question_type");
  EXPECT_NE(r.what.find("got 2"), std::string::npos) << r.what;
  // Containers are shown as compact JSON; long values are cut after 40 code points and say their size.
  r = rejection(body_with(R"({"q": {"type": "choice", "criteria": ["yes", "no"]}})"));
  EXPECT_EQ(r.code, "invalid_type");
  EXPECT_NE(r.what.find(R"(got the array ["yes","no"])"), std::string::npos) << r.what;
  r = rejection(R"({"model": 7, "state": null, "questions": {"q": {"type": "noul"}}})");
  EXPECT_EQ(r.code, "invalid_type");
  EXPECT_NE(r.what.find("model must be a string, got 7"), std::string::npos) << r.what;
  r = rejection(body_with(R"({"q": {"type": "noul", "criteria": ")" + std::string(300, 'x') + R"("}})"));
  EXPECT_NE(r.what.find("got \"" + std::string(39, 'x') + "... (a string of 300 bytes)"), std::string::npos) << r.what;
}

TEST(Request, ProtocolFieldTableIsGenerated) {
  // docs/PROTOCOL.md §1.6 is request_fields_markdown()'s text, the source of the MCP decide tool's
  // descriptions too (apps/clef/decide_tool.h).
  std::ifstream file(std::string(CLEF_SOURCE_DIR) + "/docs/PROTOCOL.md");
  ASSERT_TRUE(file) << "docs/PROTOCOL.md";
  std::stringstream text;
  text << file.rdbuf();
  const std::string doc = text.str();
  const std::string begin = "<!-- generated: request_fields_markdown(), apps/clef/decide_tool.cc -->\n";
  const std::string end = "<!-- end of generated text -->";
  const std::size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  const std::string want = cli::request_fields_markdown(RequestLimits{});
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), want)
      << "docs/PROTOCOL.md section 1.6 must be (between its markers):\n"
      << want;
}

TEST(Request, MissingFieldNamesItsMisspeltLookAlike) {
  // Unknown keys stay ignored (docs/PROTOCOL.md §1.1): a misspelt optional field is accepted...
  EXPECT_NO_THROW(parse(body_with(R"({"q": {"type": "noul", "criterias": {"true": "t"}}})")));
  // ...and a required one that is then missing or empty names the look-alike, with the same code.
  Rejection r = rejection(body_with(R"({"q": {"type": "choice", "criterias": {"a": 1, "b": 2}}})"));
  EXPECT_EQ(r.code, "empty_criteria");
  EXPECT_EQ(r.path, "questions.q.criteria");
  EXPECT_NE(r.what.find(R"(must not be empty (an object of option ids); the question has "criterias": did you mean )"
                        R"("criteria"?)"),
            std::string::npos)
      << r.what;
  r = rejection(body_with(R"({"q": {"type": "score", "criteria": [], "Criteria": ["a", "b"]}})"));
  EXPECT_EQ(r.code, "empty_criteria");
  EXPECT_NE(r.what.find(R"(has "Criteria": did you mean "criteria"?)"), std::string::npos) << r.what;
  r = rejection(body_with(R"({"q": {"tpye": "noul"}})"));
  EXPECT_EQ(r.code, "missing_field");
  EXPECT_NE(r.what.find(R"(has "tpye": did you mean "type"?)"), std::string::npos) << r.what;
  r = rejection(R"({"stat": "x", "questions": {"q": {"type": "noul"}}})");
  EXPECT_EQ(r.code, "missing_field");
  EXPECT_NE(r.what.find(R"(the request has "stat": did you mean "state"?)"), std::string::npos) << r.what;
  r = rejection(R"({"state": "x", "question": {"q": {"type": "noul"}}})");
  EXPECT_EQ(r.code, "missing_field");
  EXPECT_NE(r.what.find(R"(has "question": did you mean "questions"?)"), std::string::npos) << r.what;
  // Keys that are far from the field, or are the object's own fields, are not suggested.
  r = rejection(body_with(R"({"q": {"type": "choice", "options": {"a": 1, "b": 2}, "instructions": "?"}})"));
  EXPECT_EQ(r.what.find("did you mean"), std::string::npos) << r.what;
  r = rejection(R"({"model": "clef", "images": [], "questions": {"q": {"type": "noul"}}})");
  EXPECT_EQ(r.what.find("did you mean"), std::string::npos) << r.what;
}

}  // namespace
}  // namespace clef

namespace clef {
namespace {

TEST(Request, ImagesKeptOnlyWhenAccepted) {
  const std::string q = R"({"q": {"type": "noul"}})";
  const std::string body = body_with(q, R"(, "images": ["data:image/png;base64,AAAA"])");
  expect_rejected(body, "images_unsupported", "images");
  RequestLimits on;
  on.accept_images = true;
  const SystemOneRequest r = parse(body, on);
  ASSERT_TRUE(r.images.is_array());
  EXPECT_EQ(r.images.items().at(0).as_string(), "data:image/png;base64,AAAA");
  EXPECT_TRUE(parse(body_with(q, R"(, "images": [])"), on).images.is_null());
  EXPECT_TRUE(parse(body_with(q), on).images.is_null());
  // OpenRouter carries images inside the state array; a top-level images field is refused.
  expect_rejected(body, "images_unsupported", "images", on, Dialect::kOpenRouter);
}

TEST(Request, OpenRouterImagePartsBecomeImages) {
  const std::string body =
      R"({"model": "clef-flash", "questions": {"q": {"type": "noul"}}, "state": ["look:",)"
      R"( {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}}, "and",)"
      R"( {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,BBBB"}}]})";
  expect_rejected(body, "images_unsupported", "state.1", {}, Dialect::kOpenRouter);
  RequestLimits on;
  on.accept_images = true;
  const SystemOneRequest r = parse(body, on, Dialect::kOpenRouter);
  ASSERT_EQ(r.images.items().size(), 2u);
  EXPECT_EQ(r.images.items()[1].as_string(), "data:image/jpeg;base64,BBBB");
  EXPECT_EQ(render(r.state), R"(["look:","and"])");
  // Other dialects keep such a state as plain data (reference behaviour).
  EXPECT_TRUE(parse(body, on).images.is_null());
  expect_rejected(R"({"model": "clef-flash", "questions": {"q": {"type": "noul"}}, "state": [{"type": "image_url"}]})",
                  "invalid_type", "state.0.image_url.url", on, Dialect::kOpenRouter);
}

}  // namespace
}  // namespace clef

// SPDX-License-Identifier: MIT
#include "decide_tool.h"

#include <string_view>

#include "core/error.h"
#include "vision/image.h"

namespace clef::cli {

namespace {

using Json = nlohmann::ordered_json;

std::string range_text(std::size_t lo, std::size_t hi) { return std::to_string(lo) + " to " + std::to_string(hi); }

}  // namespace

std::vector<RequestFieldDoc> request_field_docs(const RequestLimits& lim) {
  const std::size_t max_images = ImageLimits{}.max_images;
  return {
      {"request", "model", "string", false,
       "The name the response echoes as its model. It never enters the prompt and does not change any answer; "
       "the loaded model answers whatever it says (clef serve --strict-model refuses names it does not serve)."},
      {"request", "state", "any JSON (null too)", true,
       "What the questions are about. A string goes into the prompt as it is; any other value is written as "
       "compact JSON with sorted keys. Every answer depends on it. A record longer than the token budget "
       "(--max-tokens) is refused with input_too_long; --overflow truncate cuts the state's end instead and "
       "reports usage.state_tokens_dropped."},
      {"request", "questions", "object", true,
       "Question id to question, " + range_text(lim.min_questions, lim.max_questions) +
           " of them; the answers come back under the same ids, in the same order. All questions are decided "
           "together in one pass and each id is written into the prompt, so renaming, adding, removing or "
           "reordering questions can change every answer. An id is a non-empty string of at most " +
           std::to_string(lim.max_question_id_bytes) + " bytes."},
      {"request", "images", "array of strings, or null", false,
       "At most " + std::to_string(max_images) +
           " images as base64 data URLs (data:image/png;base64,..., also jpeg and webp; remote URLs are refused), "
           "placed in the prompt before the state, in order. Only a model with a vision tower takes them; a "
           "text-only model refuses a non-empty list with images_unsupported."},
      {"question", "type", "string", true,
       "noul, choice or score, in lower case (anything else is refused with invalid_question_type). It chooses "
       "what criteria means and the form of the answer, and is written into the prompt."},
      {"question", "instructions", "any JSON", false,
       "The question in words, e.g. \"Is this message spam?\". A string is used as it is, any other value as "
       "compact JSON. It is written into the prompt and changes the answer. Missing, null or \"\": the question "
       "id is used instead."},
      {"noul", "criteria", "object, or null", false,
       "What a true and a false answer mean: {\"true\": ..., \"false\": ...}. Each side given replaces its "
       "default description (\"The proposition is true or the answer is yes.\" and \"The proposition is false "
       "or the answer is no.\"); keys other than true and false are not read. The descriptions are written into the "
       "prompt, so they "
       "change the probability."},
      {"noul", "criteria.true", "any JSON", false,
       "What a true (yes) answer means; replaces the default description; null leaves the option without one."},
      {"noul", "criteria.false", "any JSON", false,
       "What a false (no) answer means; replaces the default description; null leaves the option without one."},
      {"choice", "criteria", "object", true,
       "Option id to its description, " + range_text(lim.min_choice_options, lim.max_choice_options) +
           " options; a description is usually a string (any JSON; null: none). Every id and description is "
           "written into the prompt (options sorted by id), so both change the answer, which is one of these "
           "ids."},
      {"score", "criteria", "array", true,
       "The levels' descriptions, lowest level first, " + range_text(lim.min_score_levels, lim.max_score_levels) +
           " levels (usually strings; any JSON). Level i is named \"i\" (from 0). The descriptions are written "
           "into the prompt and change the answer; the answer's legend echoes them."},
  };
}

std::vector<QuestionTypeDoc> question_type_docs() {
  return {
      {"noul", "whether a statement is true (a yes/no question)",
       "noul: one number, the probability (0 to 1, 4 decimals) that the statement is true, i.e. that the answer is "
       "yes; 1 minus it is the probability of false. No confidence and no per-option probabilities."},
      {"choice", "which one of the named options applies",
       "choice: the option id with the largest probability (the first in request order on a tie); confidence: its "
       "probability (--confidence jev: TypeSafe's formula instead, docs/PROTOCOL.md section 2.2); probabilities: every "
       "option's probability, in request order (they sum to about 1)."},
      {"score", "where the state lies on a graded scale of levels",
       "score: the expected level, the sum of i times p_i, a number from 0 to n-1 that need not be whole; "
       "confidence: the largest level probability (--confidence jev: TypeSafe's formula instead); probabilities: each "
       "level's, by level name \"0\"..\"n-1\"; "
       "legend: the criteria as sent."},
  };
}

std::string decide_tool_description() {
  std::string s =
      "Answer typed questions about a JSON state with the loaded Clef decision model, all questions in one "
      "forward pass. The arguments are a SystemOne request {state, questions}; the result is the SystemOne "
      "response, with one answer per question id:";
  for (const QuestionTypeDoc& t : question_type_docs()) s += " a " + t.name + " question answers with " + t.answer;
  s += " Every part of a question (its id, type, instructions and criteria) and the state are written into the "
       "prompt, so changing any of them can change the answers. OpenAI's Decisions body {model, input, "
       "questions: [...]} is accepted too and answered in OpenAI's shape (docs/PROTOCOL.md §7). A refused "
       "request is a tool error whose JSON "
       "carries error.code, error.message (naming the offending value) and error.path (the JSON path of the "
       "offending field).";
  return s;
}

namespace {

const RequestFieldDoc& find_doc(const std::vector<RequestFieldDoc>& docs, std::string_view scope,
                                std::string_view name) {
  for (const RequestFieldDoc& d : docs) {
    if (d.scope == scope && d.name == name) return d;
  }
  throw InternalError("decide_tool: no field doc for " + std::string(scope) + "." + std::string(name));
}

const QuestionTypeDoc& find_type(std::string_view name) {
  static const std::vector<QuestionTypeDoc> types = question_type_docs();
  for (const QuestionTypeDoc& t : types) {
    if (t.name == name) return t;
  }
  throw InternalError("decide_tool: no type doc for " + std::string(name));
}

/// One branch of the questions' oneOf: the question object of type `name` with its criteria.
Json question_schema(const std::vector<RequestFieldDoc>& docs, const std::string& name, Json criteria) {
  const QuestionTypeDoc& t = find_type(name);
  criteria["description"] = find_doc(docs, name, "criteria").text;
  Json q = {{"type", "object"},
            {"description", "A " + name + " question: asks " + t.asks + ". Its answer: " + t.answer},
            {"properties",
             {{"type", {{"type", "string"}, {"const", name}, {"description", find_doc(docs, "question", "type").text}}},
              {"instructions", {{"description", find_doc(docs, "question", "instructions").text}}},
              {"criteria", std::move(criteria)}}},
            {"required",
             find_doc(docs, name, "criteria").required ? Json::array({"type", "criteria"}) : Json::array({"type"})}};
  return q;
}

}  // namespace

Json decide_tool_schema(const RequestLimits& lim) {
  const std::vector<RequestFieldDoc> docs = request_field_docs(lim);
  const Json noul = question_schema(docs, "noul",
                                    {{"type", {"object", "null"}},
                                     {"properties",
                                      {{"true", {{"description", find_doc(docs, "noul", "criteria.true").text}}},
                                       {"false", {{"description", find_doc(docs, "noul", "criteria.false").text}}}}}});
  const Json choice = question_schema(docs, "choice",
                                      {{"type", "object"},
                                       {"minProperties", lim.min_choice_options},
                                       {"maxProperties", lim.max_choice_options},
                                       {"additionalProperties", {{"description", "The option's description"}}}});
  const Json score = question_schema(docs, "score",
                                     {{"type", "array"},
                                      {"minItems", lim.min_score_levels},
                                      {"maxItems", lim.max_score_levels},
                                      {"items", {{"description", "A level's description"}}}});
  Json required = Json::array();
  for (const RequestFieldDoc& d : docs) {
    if (d.scope == "request" && d.required) required.push_back(d.name);
  }
  return {{"type", "object"},
          {"description", "A SystemOne decision request (docs/PROTOCOL.md section 1)"},
          {"properties",
           {{"model", {{"type", "string"}, {"description", find_doc(docs, "request", "model").text}}},
            {"state", {{"description", find_doc(docs, "request", "state").text}}},
            {"questions",
             {{"type", "object"},
              {"minProperties", lim.min_questions},
              {"maxProperties", lim.max_questions},
              {"propertyNames", {{"minLength", 1}}},
              {"description", find_doc(docs, "request", "questions").text},
              {"additionalProperties", {{"oneOf", {noul, choice, score}}}}}},
            {"images",
             {{"type", {"array", "null"}},
              {"maxItems", ImageLimits{}.max_images},
              {"items", {{"type", "string"}, {"description", "A base64 data URL: data:image/png;base64,..."}}},
              {"description", find_doc(docs, "request", "images").text}}}}},
          {"required", std::move(required)}};
}

std::string request_fields_markdown(const RequestLimits& lim) {
  auto cell = [](std::string_view text) {
    std::string out;
    for (const char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  };
  std::string md =
      "| field | in | JSON type | required | what it is and what it changes |\n"
      "|---|---|---|---|---|\n";
  for (const RequestFieldDoc& d : request_field_docs(lim)) {
    md += "| `" + d.name + "` | " + d.scope + " | " + cell(d.type) + " | " + (d.required ? "yes" : "no") + " | " +
          cell(d.text) + " |\n";
  }
  md +=
      "\n"
      "| type | asks | the answer |\n"
      "|---|---|---|\n";
  for (const QuestionTypeDoc& t : question_type_docs()) {
    md += "| `" + t.name + "` | " + cell(t.asks) + " | " + cell(t.answer) + " |\n";
  }
  return md;
}

}  // namespace clef::cli

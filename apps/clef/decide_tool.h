// SPDX-License-Identifier: MIT
// What a SystemOne request's fields are and what each one changes, written once: the MCP `decide`
// tool's description and input schema (mcp_command.cc) and the generated field table of
// docs/PROTOCOL.md §1.6 are both built from the tables in decide_tool.cc (tests/unit/test_request.cc
// checks that the docs section is the generated text). The semantics are docs/PROTOCOL.md §1-§3;
// the validator that the schema mirrors is decision/request.h validate_request().
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decision/request.h"

namespace clef::cli {

/// One field of a request or of a question.
struct RequestFieldDoc {
  std::string scope;  ///< "request", "question" (any type), "noul", "choice", "score", "noul criteria"
  std::string name;   ///< the key
  std::string type;   ///< the JSON type(s) accepted, in words ("any JSON", "object", ...)
  bool required = false;
  std::string text;  ///< what the field is and what it changes (limits filled in from RequestLimits)
};

/// One question type: what it asks and the form of its answer (docs/PROTOCOL.md §2.1).
struct QuestionTypeDoc {
  std::string name;    ///< "noul", "choice" or "score"
  std::string asks;    ///< what the question asks
  std::string answer;  ///< the answer's fields and what they mean
};

/// The fields of a request, in the order the docs list them; limits from `limits`.
std::vector<RequestFieldDoc> request_field_docs(const RequestLimits& limits);

/// The three question types, noul, choice, score.
std::vector<QuestionTypeDoc> question_type_docs();

/// The decide tool's description (tools/list): what it does, the answer per type, what changes
/// the answers, how a refusal looks.
std::string decide_tool_description();

/// The decide tool's input schema (JSON Schema, draft 2020-12 keywords): every property carries
/// its RequestFieldDoc text; types, required keys and counts are what validate_request() accepts
/// under `limits` (unknown keys are allowed, as the protocol ignores them). Images are described
/// but not checked against the model (a text-only model refuses them when called).
nlohmann::ordered_json decide_tool_schema(const RequestLimits& limits);

/// The Markdown of docs/PROTOCOL.md §1.6 (between its "generated" markers): the field table and
/// the type table under `limits`, ending in a newline.
std::string request_fields_markdown(const RequestLimits& limits);

}  // namespace clef::cli

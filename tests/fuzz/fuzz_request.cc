// SPDX-License-Identifier: MIT
// libFuzzer target: parse_request (JSON parser + SystemOne validation, docs/PROTOCOL.md §1, §3.3,
// §5.3; OpenAI's Decisions translation, §7) must accept or reject any byte string with a RequestError, never crash,
// hang, read out of bounds (ASan/UBSan watch) or throw anything else. Accepted requests must satisfy the validator's
// promises, and render() must be a fixed point: parse_json(dump_json(v)) dumps to the same bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "decision/dialects.h"
#include "decision/json_value.h"
#include "decision/openai_decisions.h"
#include "decision/render.h"
#include "decision/request.h"

namespace {

void check_round_trip(const clef::JsonValue& v) {
  const std::string once = clef::dump_json(v);
  const std::string twice = clef::dump_json(clef::parse_json(once));
  if (once != twice) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  clef::RequestLimits limits;
  limits.json.max_depth = 64;  // keeps each input fast; depth handling is the same code
  const clef::ServedModel served{"clef-flash", {"clef"}, false};
  try {
    check_round_trip(clef::parse_json(body, limits.json));
  } catch (const clef::RequestError&) {
  }
  for (const clef::Dialect dialect :
       {clef::Dialect::kSystemOne, clef::Dialect::kOpenRouter, clef::Dialect::kDecisions}) {
    try {
      const clef::SystemOneRequest r = clef::parse_request(body, limits, dialect, served);
      const std::size_t max_questions = r.openai ? clef::kOpenAIMaxQuestions : limits.max_questions;
      if (r.questions.empty() || r.questions.size() > max_questions) __builtin_trap();
      if (r.openai && r.openai->questions.size() != r.questions.size()) __builtin_trap();
      check_round_trip(r.state);
      for (const auto& q : r.questions) {
        if (q.id.empty() || q.id.size() > limits.max_question_id_bytes) __builtin_trap();
        if (clef::render(q.instructions).empty()) __builtin_trap();  // never an empty question span
        if (q.request_order.size() != q.options.size()) __builtin_trap();
        for (std::size_t k = 0; k < q.options.size(); ++k) {
          if (q.request_order[k] >= q.options.size()) __builtin_trap();
          if (k > 0 && q.type == clef::QuestionType::kChoice && !(q.options[k - 1].id < q.options[k].id)) {
            __builtin_trap();
          }
          check_round_trip(clef::option_semantics(q.options[k]));
        }
        check_round_trip(q.instructions);
      }
      for (std::size_t i = 0; r.openai && i < r.questions.size(); ++i) {  // typed values / labels per option
        const auto& oq = r.openai->questions[i];
        const auto& q = r.questions[i];
        if (q.type == clef::QuestionType::kChoice && oq.values.size() != q.options.size()) __builtin_trap();
        if (q.type == clef::QuestionType::kScore && oq.labels.size() != q.options.size()) __builtin_trap();
      }
    } catch (const clef::RequestError&) {
    }
  }
  return 0;
}

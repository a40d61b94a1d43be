// SPDX-License-Identifier: MIT
// Test driver for the live comparisons of the decision chain against the Python toolkit
// (tests/reference/test_record_parity.py):
//   clef_decision_driver encode MODEL [MAX_LENGTH [truncate]] < requests.jsonl
//     (MODEL: a release folder or a GGUF model, runtime/release.h load_model_tokenizer)
//     (a request member "x_image_token_counts": [N, ...] adds image blocks of those sizes)
//       one JSON line per request: {"input_ids": [...], "prefix_len", "state_len", "state_len_full",
//       "schema_len", "suffix_len", "questions": [{"type_id", "span": [a, b], "options": [[s, e], ...]}]}
//       or {"error": "<code>", "path": "<json path>", "message": "..."} for a refused request.
//   clef_decision_driver respond MODEL_NAME REQUEST.json LOGITS.npy INPUT_TOKENS [jev]
//       prints the SystemOne response body for the given option logits (model order).
//   clef_decision_driver tokenize MODEL < texts.jsonl
//       for each line (a JSON string), prints the token ids as a JSON array (tests/reference/test_gguf_model.py).
//   clef_decision_driver round4 < doubles.txt
//       for each line (a double in Python repr), prints python_float_repr(python_round4(x)).
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_text.h"
#include "decision/answers.h"
#include "decision/dialects.h"
#include "decision/record.h"
#include "decision/request.h"
#include "decision/request_error.h"
#include "io/npy.h"
#include "runtime/release.h"
#include "tokenizer/tokenizer.h"

namespace {

clef::ServedModel any_model() {
  clef::ServedModel m;
  m.name = "clef";
  m.accept_any = true;  // the reference echoes any model string
  return m;
}

int encode(int argc, char** argv) {
  const clef::Tokenizer tok = clef::load_model_tokenizer(argv[2]);
  clef::RecordOptions opt;
  if (argc > 3) opt.max_length = std::stoll(argv[3]);
  if (argc > 4 && std::string(argv[4]) == "truncate") opt.overflow = clef::OverflowPolicy::kTruncateState;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    nlohmann::ordered_json out;
    try {
      const clef::SystemOneRequest req =
          clef::parse_request(line, clef::RequestLimits{}, clef::Dialect::kSystemOne, any_model());
      // Test hook: "x_image_token_counts": [N, ...] encodes the request as if it carried images
      // with these merged-token counts (the media block of docs/PROTOCOL.md §3.2 step 2).
      std::vector<std::int64_t> counts;
      const auto raw = nlohmann::json::parse(line, nullptr, false);
      if (raw.is_object() && raw.contains("x_image_token_counts")) {
        counts = raw["x_image_token_counts"].get<std::vector<std::int64_t>>();
      }
      const clef::EncodedRecord r = clef::encode_record(req, tok, opt, counts);
      out["input_ids"] = r.input_ids;
      out["prefix_len"] = r.prefix_len;
      out["state_len"] = r.state_len;
      out["state_len_full"] = r.state_len_full;
      out["schema_len"] = r.schema_len;
      out["suffix_len"] = r.suffix_len;
      out["questions"] = nlohmann::ordered_json::array();
      for (const auto& q : r.questions) {
        nlohmann::ordered_json jq;
        jq["type_id"] = q.type_id;
        jq["span"] = {q.span.begin, q.span.end};
        jq["options"] = nlohmann::ordered_json::array();
        for (const auto& o : q.options) jq["options"].push_back({o.begin, o.end});
        out["questions"].push_back(jq);
      }
    } catch (const clef::RequestError& e) {
      out = {{"error", e.code_name()}, {"path", e.path().str()}, {"message", e.message()}};
    }
    std::cout << out.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  }
  return 0;
}

int respond(char** argv) {
  std::ifstream in(argv[3], std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  const clef::SystemOneRequest req =
      clef::parse_request(ss.str(), clef::RequestLimits{}, clef::Dialect::kSystemOne, any_model());
  const clef::NpyArray logits = clef::read_npy(argv[4]);
  clef::AnswerOptions opt;
  if (argv[6] != nullptr && std::string(argv[6]) == "jev") {
    opt.confidence = clef::ConfidenceMode::kJev;
    opt.jev_legend = true;
  }
  std::cout << clef::build_response_json(req, argv[2], logits.f32, std::stoll(argv[5]), opt) << "\n";
  return 0;
}

}  // namespace

int round4() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::cout << clef::python_float_repr(clef::python_round4(std::strtod(line.c_str(), nullptr))) << "\n";
  }
  return 0;
}

int tokenize(char** argv) {
  const clef::Tokenizer tok = clef::load_model_tokenizer(argv[2]);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::cout << nlohmann::json(tok.encode(nlohmann::json::parse(line).get<std::string>())).dump() << "\n";
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && std::string(argv[1]) == "round4") return round4();
    if (argc >= 3 && std::string(argv[1]) == "encode") return encode(argc, argv);
    if (argc >= 3 && std::string(argv[1]) == "tokenize") return tokenize(argv);
    if (argc >= 6 && std::string(argv[1]) == "respond") return respond(argv);
    std::cerr << "usage: clef_decision_driver encode MODEL_DIR [MAX_LENGTH [truncate]] < requests.jsonl\n"
                 "       clef_decision_driver respond MODEL_NAME REQUEST.json LOGITS.npy INPUT_TOKENS [jev]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "clef_decision_driver: " << e.what() << "\n";
    return 1;
  }
}

// SPDX-License-Identifier: MIT
// Every request value a response echoes (model, question ids, choice option ids, score
// legends) comes back as the reference returns it, byte for byte. The expected bodies are NOT typed
// here: tools/reference/response_echo_golden.py runs the reference behaviour (the Python toolkit's
// validate -> encode_record -> build_response, json.dumps compact) and wrote
// tests/reference/golden/response_echo.jsonl; tests/reference/test_response_echo.py regenerates it
// and checks it equals the committed file.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decision/answers.h"
#include "decision/dialects.h"
#include "decision/json_value.h"
#include "decision/render.h"
#include "decision/request.h"

namespace clef {
namespace {

using nlohmann::json;

std::vector<json> golden_cases() {
  const std::string path = std::string(CLEF_SOURCE_DIR) + "/tests/reference/golden/response_echo.jsonl";
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

TEST(ResponseEcho, BodiesMatchTheReferenceBytes) {
  const std::vector<json> cases = golden_cases();
  ASSERT_GE(cases.size(), 6u) << "tests/reference/golden/response_echo.jsonl missing or short";
  ServedModel any;
  any.name = "clef";
  any.accept_any = true;  // the reference echoes any model string
  for (const json& c : cases) {
    const SystemOneRequest req =
        parse_request(c.at("request").get<std::string>(), RequestLimits{}, Dialect::kSystemOne, any);
    std::vector<float> logits;
    for (const json& v : c.at("logits")) logits.push_back(static_cast<float>(v.get<double>()));
    const std::string body = build_response_json(req, req.model, logits, c.at("input_tokens").get<std::int64_t>());
    EXPECT_EQ(body, c.at("body").get<std::string>()) << c.at("name");
  }
}

TEST(ResponseEcho, EchoKeepsOrderWhileRenderSorts) {
  // The same value, two writers: the prompt sorts keys at every depth, the echo never does.
  const JsonValue v = parse_json(R"({"b":[{"d":1,"c":2}],"a":{"z":0,"y":1},"b":[{"f":1,"e":2}]})");
  std::string echo;
  append_echo_json(echo, v);
  EXPECT_EQ(echo, R"({"b":[{"f":1,"e":2}],"a":{"z":0,"y":1}})");
  EXPECT_EQ(dump_json(v), R"({"a":{"y":1,"z":0},"b":[{"e":2,"f":1}]})");
}

}  // namespace
}  // namespace clef

// SPDX-License-Identifier: MIT
// Batch driver for the live parity tests of the request model and render()
// (tests/reference/test_render_parity.py, test_request_parity.py). Reads one JSON text per stdin
// line and answers each line with
//   "OK <n>\n<n bytes>\n"            on success, or
//   "ERR <code>\t<path>\t<message>\n" on a RequestError (tabs and newlines in path/message become spaces).
// Modes:
//   dump     <n bytes> = dump_json(parse_json(line))   (Python json.dumps, sort_keys, compact)
//   render   <n bytes> = render(parse_json(line))      (strings verbatim)
//   request  [--model NAME] [--alias NAME]... [--accept-any-model]
//            [--dialect systemone|cloudflare|openrouter] [--max-questions N] [--max-depth N]
//            <n bytes> = a JSON summary of parse_request(line):
//            {"model","model_given","state": render(state), "questions": [{"id","type","type_id",
//             "instruction": render(instructions), "instructions_from_id",
//             "options": [{"id", "semantics": render(option_semantics)}], "request_order": [...]}]}
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include "decision/dialects.h"
#include "decision/json_value.h"
#include "decision/render.h"
#include "decision/request.h"

namespace {

using clef::JsonValue;

JsonValue str(std::string s) { return JsonValue::string(std::move(s)); }

JsonValue summary(const clef::SystemOneRequest& r) {
  JsonValue::Array questions;
  for (const auto& q : r.questions) {
    JsonValue::Array options;
    for (const auto& o : q.options) {
      options.push_back(
          JsonValue::object({{"id", str(o.id)}, {"semantics", str(clef::render(clef::option_semantics(o)))}}));
    }
    JsonValue::Array order;
    for (std::size_t k : q.request_order) order.push_back(JsonValue::integer(static_cast<std::int64_t>(k)));
    questions.push_back(JsonValue::object({
        {"id", str(q.id)},
        {"type", str(clef::question_type_name(q.type))},
        {"type_id", JsonValue::integer(static_cast<std::int64_t>(q.type))},
        {"instruction", str(clef::render(q.instructions))},
        {"instructions_from_id", JsonValue::boolean(q.instructions_from_id)},
        {"options", JsonValue::array(std::move(options))},
        {"request_order", JsonValue::array(std::move(order))},
    }));
  }
  return JsonValue::object({
      {"model", str(r.model)},
      {"model_given", JsonValue::boolean(r.model_given)},
      {"state", str(clef::render(r.state))},
      {"questions", JsonValue::array(std::move(questions))},
  });
}

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s;
}

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: clef_render_driver dump|render|request [options] < lines\n");
  std::exit(2);
}

std::size_t to_size(const char* s) { return static_cast<std::size_t>(std::strtoull(s, nullptr, 10)); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage();
  const std::string_view mode = argv[1];
  if (mode != "dump" && mode != "render" && mode != "request") usage();
  clef::RequestLimits limits;
  clef::ServedModel served{"clef-flash", {}, false};
  clef::Dialect dialect = clef::Dialect::kSystemOne;
  for (int i = 2; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage();
      return argv[++i];
    };
    if (a == "--model") {
      served.name = next();
    } else if (a == "--alias") {
      served.aliases.emplace_back(next());
    } else if (a == "--accept-any-model") {
      served.accept_any = true;
    } else if (a == "--dialect") {
      const std::string_view d = next();
      if (d == "systemone") {
        dialect = clef::Dialect::kSystemOne;
      } else if (d == "cloudflare") {
        dialect = clef::Dialect::kCloudflare;
      } else if (d == "openrouter") {
        dialect = clef::Dialect::kOpenRouter;
      } else {
        usage();
      }
    } else if (a == "--max-questions") {
      limits.max_questions = to_size(next());
    } else if (a == "--max-depth") {
      limits.json.max_depth = to_size(next());
    } else {
      usage();
    }
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  std::string out;
  while (std::getline(std::cin, line)) {
    try {
      std::string text;
      if (mode == "request") {
        text = clef::dump_json(summary(clef::parse_request(line, limits, dialect, served)));
      } else {
        const JsonValue v = clef::parse_json(line, limits.json);
        text = mode == "dump" ? clef::dump_json(v) : clef::render(v);
      }
      out += "OK " + std::to_string(text.size()) + "\n";
      out += text;
      out += "\n";
    } catch (const clef::RequestError& e) {
      out += std::string("ERR ") + e.code_name() + "\t" + one_line(e.path().str()) + "\t" + one_line(e.what()) + "\n";
    }
    if (out.size() > (1u << 20)) {
      std::cout << out;
      out.clear();
    }
  }
  std::cout << out;
  std::cout.flush();
  return 0;
}

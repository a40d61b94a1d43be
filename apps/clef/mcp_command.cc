// SPDX-License-Identifier: MIT
// `clef mcp`: the Model Context Protocol over stdio, written here on nlohmann_json (no SDK).
// Transport: one JSON-RPC 2.0 message per line on stdin / stdout (MCP "stdio" transport); logs go
// to stderr. Methods: initialize, ping, tools/list, tools/call (decide, model_info); notifications
// are accepted and need no answer. docs/MODELS.md "clef mcp" describes the tools.
#include "commands.h"

#include <algorithm>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"
#include "core/version.h"
#include "decide_tool.h"
#include "decision/request_error.h"
#include "engine_flags.h"
#include "ops/gemm.h"
#include "ops/isa.h"
#include "runtime/engine.h"
#include "inspect_report.h"
#include "line_reader.h"

namespace clef::cli {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kMcpFooter =
    "Speaks MCP (JSON-RPC 2.0, one message per line) on stdin/stdout, as agent clients start local servers;\n"
    "protocol versions 2024-11-05 to 2025-11-25. Tools: decide (a SystemOne request in, the SystemOne\n"
    "response out; OpenAI's Decisions body is accepted too and answered in its contract, by its shape:\n"
    "docs/PROTOCOL.md section 7; a refused request is a tool error carrying its code and JSON path) and model_info "
    "(what\n"
    "clef inspect --json reports, plus precision and CPU kernel level). One engine serves the whole session\n"
    "(its state cache reuses a shared prefix + state across calls). Logs go to stderr; stdout carries only\n"
    "protocol messages. A message (one line) longer than --max-message bytes (default 64 MiB) is skipped\n"
    "without being stored and answered with error -32600 (id null); the session goes on. A batch of more\n"
    "than --max-batch messages (default 128), an empty batch or a message with a repeated key (escaped or\n"
    "not) is answered with one -32600 error (id null); bytes after the JSON (a NUL included) are a -32700\n"
    "parse error. Client configuration: README.md \"Agents (MCP)\".\n"
    "Exit codes: 0 end of input; 2 invalid argument; 3 model malformed or missing; 4 unsupported option;\n"
    "5 I/O error.";

/// Default --max-message: 64 MiB, as clef serve's --max-body and a clef decide --jsonl line.
constexpr std::int64_t kDefaultMaxMessage = std::int64_t{64} << 20;

/// Default --max-batch: the most messages one JSON-RPC batch may hold. Each message of a batch is
/// answered (an empty object gets an ~80-byte error), so the cap bounds the answer line and the
/// parsed batch; agent clients send one message at a time (batches were dropped from MCP in
/// 2025-06-18).
constexpr std::int64_t kDefaultMaxBatch = 128;

constexpr const char* kVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"};

Json tools_list(const RequestLimits& lim) {
  Json tools = Json::array();
  tools.push_back({{"name", "decide"},
                   {"title", "Decide (SystemOne)"},
                   {"description", decide_tool_description()},
                   {"inputSchema", decide_tool_schema(lim)}});
  tools.push_back(
      {{"name", "model_info"},
       {"title", "Model information"},
       {"description",
        "Describe the loaded model: name, architecture, layers, head limits, parameter counts, tokenizer, "
        "memory needs (as clef inspect --json), plus the backbone precision and the CPU kernel level."},
       {"inputSchema", {{"type", "object"}, {"properties", Json::object()}, {"additionalProperties", false}}}});
  return tools;
}

// Raw JSON spans. A request's own bytes go to the engine (not a re-serialization): numbers keep
// their text (big integers, -0.0, exponents), which the Python-exact rendering depends on. The
// text was already parsed by nlohmann_json, so it is valid JSON here.

std::size_t skip_ws(std::string_view t, std::size_t i) {
  while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) ++i;
  return i;
}

/// Deepest nesting of arrays and objects a message may have: copying or serializing a value
/// recurses once per level, so deeper messages are refused while they are parsed.
constexpr std::size_t kMaxMessageDepth = 1024;

/// Index just past the JSON value starting at `i`.
std::size_t skip_value(std::string_view t, std::size_t i) {
  if (i >= t.size()) return i;
  if (t[i] == '"') {
    for (++i; i < t.size() && t[i] != '"'; ++i) {
      if (t[i] == '\\') ++i;
    }
    return i + 1;
  }
  if (t[i] == '{' || t[i] == '[') {
    int depth = 0;
    for (; i < t.size(); ++i) {
      const char c = t[i];
      if (c == '"') {
        i = skip_value(t, i) - 1;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
    }
    return i;
  }
  while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && t[i] != ' ' && t[i] != '\t' && t[i] != '\n' &&
         t[i] != '\r') {
    ++i;
  }
  return i;
}

/// The key a JSON string literal `lit` (quotes included) stands for: escapes decoded, so
/// "\u0061rguments" is "arguments". The text was already parsed, so the literal is valid.
std::string decoded_key(std::string_view lit) {
  if (lit.find('\\') == std::string_view::npos) return std::string(lit.substr(1, lit.size() - 2));
  return Json::parse(lit).get<std::string>();
}

/// The raw text of member `key` of the JSON object `t`; "" when absent. Keys are compared decoded
/// (escapes included), as the parser compares them, and a message with a repeated key was refused
/// before (parse_json_message), so this is the very member the parsed message holds.
std::string_view raw_member(std::string_view t, std::string_view key) {
  std::string_view found;
  std::size_t i = skip_ws(t, 0);
  if (i >= t.size() || t[i] != '{') return found;
  i = skip_ws(t, i + 1);
  while (i < t.size() && t[i] == '"') {
    const std::size_t kend = skip_value(t, i);
    const std::string_view k = t.substr(i, kend - i);
    i = skip_ws(t, kend);
    if (i >= t.size() || t[i] != ':') break;
    i = skip_ws(t, i + 1);
    const std::size_t vend = skip_value(t, i);
    if (decoded_key(k) == key) found = t.substr(i, vend - i);
    i = skip_ws(t, vend);
    if (i < t.size() && t[i] == ',') i = skip_ws(t, i + 1);
  }
  return found;
}

/// The raw texts of the items of the JSON array `t`.
std::vector<std::string_view> raw_items(std::string_view t) {
  std::vector<std::string_view> out;
  std::size_t i = skip_ws(t, 0);
  if (i >= t.size() || t[i] != '[') return out;
  i = skip_ws(t, i + 1);
  while (i < t.size() && t[i] != ']') {
    const std::size_t end = skip_value(t, i);
    out.push_back(t.substr(i, end - i));
    i = skip_ws(t, end);
    if (i < t.size() && t[i] == ',') i = skip_ws(t, i + 1);
  }
  return out;
}

Json text_result(const std::string& text, Json structured, bool is_error) {
  Json r = {{"content", Json::array({{{"type", "text"}, {"text", text}}})}};
  if (!structured.is_null()) r["structuredContent"] = std::move(structured);
  r["isError"] = is_error;
  return r;
}

Json tool_error(const std::string& code, const std::string& message, const std::string& path) {
  Json e = {{"error", {{"code", code}, {"message", message}, {"path", path}}}};
  return text_result(e.dump(-1, ' ', false, Json::error_handler_t::replace), e, true);
}

struct Session {
  Engine* engine = nullptr;
  std::string model_path;
  std::string precision;
  std::int64_t chunk = 512, context = 16384;

  /// `raw_args`: the arguments' own text ("" when unknown: they are serialized again).
  Json call_tool(const std::string& name, const Json& args, std::string_view raw_args) {
    if (name == "decide") {
      if (!args.is_object()) return tool_error("invalid_type", "the arguments must be a SystemOne request object", "");
      const std::string body =
          raw_args.empty() ? args.dump(-1, ' ', false, Json::error_handler_t::strict) : std::string(raw_args);
      try {
        const Decision d = engine->decide(body, Dialect::kDecisions);  // either contract, by the shape
        Json structured = Json::parse(d.body);
        return text_result(d.body, std::move(structured), false);
      } catch (const RequestError& e) {
        return tool_error(e.code_name(), e.message(), e.path().str());
      } catch (const Error& e) {
        return tool_error(e.kind() == ErrorKind::kInvalidArgument ? "invalid_request" : "engine_error", e.what(), "");
      }
    }
    // model_info
    const ModelSummary s = summarize(engine->release());
    Json info = inspect_json(engine->release(), s, chunk, context);
    info["precision"] = precision;
    info["kernel_level"] = ops::isa_description();
    info["gemm"] = ops::gemm_backend_name();
    info["model_path"] = model_path;
    // The session's one engine: its state cache across calls (a hit reused a prefix + state).
    const StateCacheStats st = engine->state_cache_stats();
    info["state_cache"] = {{"budget_bytes", st.budget}, {"entries", st.entries}, {"bytes", st.bytes},
                           {"hits", st.hits},           {"misses", st.misses},   {"evictions", st.evictions}};
    return text_result(info.dump(2, ' ', false, Json::error_handler_t::replace), info, false);
  }

  /// The answer to one request (null for a notification or a response).
  Json handle(const Json& msg, std::string_view raw) {
    if (!msg.is_object() || msg.value("jsonrpc", "") != "2.0") {
      return {{"jsonrpc", "2.0"},
              {"id", nullptr},
              {"error", {{"code", -32600}, {"message", "not a JSON-RPC 2.0 message"}}}};
    }
    const bool has_id = msg.contains("id");
    if (!msg.contains("method")) return nullptr;  // a response to us: nothing to do
    if (!msg["method"].is_string()) {
      return {{"jsonrpc", "2.0"},
              {"id", has_id ? msg["id"] : Json()},
              {"error", {{"code", -32600}, {"message", "method must be a string"}}}};
    }
    const std::string method = msg["method"].get<std::string>();
    if (!has_id) return nullptr;  // notifications: initialized, cancelled, ... need no answer
    const Json& id = msg["id"];
    const Json params = msg.contains("params") && msg["params"].is_object() ? msg["params"] : Json::object();
    auto ok = [&](Json result) { return Json{{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}; };
    auto fail = [&](int code, const std::string& message) {
      return Json{{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
    };
    if (method == "initialize") {
      std::string version = kVersions[0];
      if (params.contains("protocolVersion") && params["protocolVersion"].is_string()) {
        for (const char* v : kVersions) {
          if (params["protocolVersion"].get<std::string>() == v) version = v;
        }
      }
      return ok({{"protocolVersion", version},
                 {"capabilities", {{"tools", {{"listChanged", false}}}}},
                 {"serverInfo", {{"name", "clef"}, {"title", "clef.cpp decision models"}, {"version", clef::kVersion}}},
                 {"instructions",
                  "Use decide to ask typed questions about a JSON state (noul: the probability that a statement is "
                  "true; choice: which one of named options applies; score: the expected level on a graded scale); "
                  "model_info describes the loaded model. Model: " +
                      engine->model_name()}});
    }
    if (method == "ping") return ok(Json::object());
    if (method == "tools/list") return ok({{"tools", tools_list(RequestLimits{})}});
    if (method == "tools/call") {
      if (!params.contains("name") || !params["name"].is_string()) return fail(-32602, "tools/call needs params.name");
      const std::string name = params["name"].get<std::string>();
      if (name != "decide" && name != "model_info") return fail(-32602, "unknown tool: " + name);
      const Json args = params.contains("arguments") ? params["arguments"] : Json::object();
      return ok(call_tool(name, args, raw_member(raw_member(raw, "params"), "arguments")));
    }
    return fail(-32601, "method not found: " + method);
  }
};

struct McpFlags {
  EngineFlags flags;
  std::int64_t state_cache_mb = EngineOptions::kDefaultStateCacheMb;
  std::int64_t max_message = kDefaultMaxMessage;
  std::int64_t max_batch = kDefaultMaxBatch;
  CLI::Option* model_opt = nullptr;
};

int run_mcp(McpFlags& f) {
  EngineFlags& flags = f.flags;
  const CLI::Option* model_opt = f.model_opt;
  const std::int64_t state_cache_mb = f.state_cache_mb;
  // Protocol messages get their own descriptor; anything else written to stdout goes to stderr.
  std::fflush(stdout);
  std::cout.flush();
  const int proto_fd = ::dup(1);
  if (proto_fd < 0 || ::dup2(2, 1) < 0) throw IoError("cannot set up standard output for the protocol");
  std::FILE* proto = ::fdopen(proto_fd, "w");
  if (proto == nullptr) throw IoError("cannot set up standard output for the protocol");

  flags.model_given = model_opt->count() > 0;
  bool is_default = false;
  const std::string dir =
      resolve_model_arg(flags.model_dir, flags.model_given, flags.revision, flags.pull, &is_default);
  EngineOptions eo = engine_options(flags);
  eo.accept_any_model = true;
  eo.state_cache_mb = state_cache_mb;
  const auto engine = with_default_hint(dir, is_default, [&] { return std::make_unique<Engine>(dir, eo); });
  Session session;
  session.engine = engine.get();
  session.model_path = dir;
  session.precision = flags.precision == "f32" ? "fp32" : flags.precision;
  session.chunk = flags.chunk;
  session.context = flags.max_tokens;
  std::cerr << "clef mcp: serving " << printable(engine->model_name()) << " on stdio\n";

  auto send = [&](const Json& j) {
    const std::string line = j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    if (std::fwrite(line.data(), 1, line.size(), proto) != line.size() || std::fflush(proto) != 0) {
      throw IoError("cannot write to standard output (the client went away)");
    }
  };
  // Messages are read with a cap (--max-message): a longer line is skipped up to its newline
  // without being stored and answered with -32600; the session goes on.
  LineReader reader(stdin, static_cast<std::size_t>(f.max_message));
  std::string line;
  bool too_long = false;
  while (reader.next(line, too_long, "standard input")) {
    if (too_long) {
      send({{"jsonrpc", "2.0"},
            {"id", nullptr},
            {"error",
             {{"code", -32600},
              {"message", "invalid request: the message is larger than " + std::to_string(f.max_message) +
                              " bytes (the --max-message limit); it was discarded"}}}});
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // One parse of the whole line: repeated keys (escaped or not), a NUL byte, trailing bytes and a
    // batch longer than --max-batch are refused here, before anything is answered or built.
    JsonTextLimits limits;
    limits.max_depth = kMaxMessageDepth;
    limits.duplicates = DuplicateKeys::kReject;
    limits.max_root_items = static_cast<std::size_t>(f.max_batch);
    JsonMessage parsed = parse_json_message(line, limits);
    if (parsed.fault != JsonTextFault::kNone) {
      std::string message;
      switch (parsed.fault) {
        case JsonTextFault::kTooDeep:
          message = "invalid request: nested deeper than " + std::to_string(kMaxMessageDepth) + " levels";
          break;
        case JsonTextFault::kDuplicateKey: message = "invalid request: " + parsed.error; break;
        case JsonTextFault::kTooManyItems:
          message = "invalid request: a batch of more than " + std::to_string(f.max_batch) +
                    " messages (the --max-batch limit); none was run";
          break;
        default: message = "parse error: " + parsed.error; break;
      }
      const int code = parsed.fault == JsonTextFault::kSyntax ? -32700 : -32600;
      send({{"jsonrpc", "2.0"}, {"id", nullptr}, {"error", {{"code", code}, {"message", message}}}});
      continue;
    }
    const Json& msg = parsed.value;
    if (msg.is_array()) {  // a batch (protocol 2025-03-26)
      if (msg.empty()) {   // JSON-RPC 2.0: an empty batch is answered with one Invalid Request error
        send({{"jsonrpc", "2.0"},
              {"id", nullptr},
              {"error", {{"code", -32600}, {"message", "invalid request: an empty batch"}}}});
        continue;
      }
      Json answers = Json::array();
      const std::vector<std::string_view> raws = raw_items(line);
      for (std::size_t i = 0; i < msg.size(); ++i) {
        Json a = session.handle(msg[i], i < raws.size() ? raws[i] : std::string_view());
        if (!a.is_null()) answers.push_back(std::move(a));
      }
      if (!answers.empty()) send(answers);
      continue;
    }
    Json answer = session.handle(msg, line);
    if (!answer.is_null()) send(answer);
  }
  std::fclose(proto);
  return 0;
}

}  // namespace

Command add_mcp_command(CLI::App& parent) {
  auto f = std::make_shared<McpFlags>();
  auto* app = parent.add_subcommand(
      "mcp", "Model Context Protocol server on stdio: tools decide and model_info over one loaded model.");
  app->footer(kMcpFooter);
  app->allow_extras(false);
  f->model_opt = add_engine_flags(*app, f->flags);
  app->add_option("--state-cache-mb", f->state_cache_mb,
                  "Memory budget of the exact state cache in MiB (0: off): calls sharing a prefix + state reuse it")
      ->check(clef::cli::in_range(std::int64_t{0}, std::int64_t{1} << 30))
      ->capture_default_str();
  app->add_option(
         "--max-message", f->max_message,
         "Largest message in bytes (one line of stdin, without its newline); a longer one is skipped to its newline "
         "without being stored and answered with a -32600 error (id null); the session goes on")
      ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{1} << 34))
      ->capture_default_str();
  app->add_option("--max-batch", f->max_batch,
                  "Most messages in one JSON-RPC batch (a JSON array line); a longer batch is refused whole with "
                  "one -32600 error (id null), counted while it is parsed, so it is never built")
      ->check(clef::cli::in_range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  return {app, "clef mcp --help", [f] { return run_mcp(*f); }};
}

}  // namespace clef::cli

// SPDX-License-Identifier: MIT
#include "decision/openai_decisions.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/json_text.h"
#include "decision/render.h"

namespace clef {
namespace {

[[noreturn]] void reject(RequestErrorCode code, const JsonPath& path, const std::string& message) {
  throw RequestError(code, path, message);
}

const std::string& need_string(const JsonValue& parent, std::string_view key, const JsonPath& path) {
  const JsonValue* v = parent.find(key);
  if (v == nullptr) reject(RequestErrorCode::kMissingField, path.key(key), std::string(key) + " is required");
  if (!v->is_string()) {
    reject(RequestErrorCode::kInvalidType, path.key(key), std::string(key) + " must be a string, got " + v->describe());
  }
  return v->as_string();
}

/// An optional string member: nullopt when absent or null.
std::optional<std::string> opt_string(const JsonValue& parent, std::string_view key, const JsonPath& path) {
  const JsonValue* v = parent.find(key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_string()) {
    reject(RequestErrorCode::kInvalidType, path.key(key), std::string(key) + " must be a string, got " + v->describe());
  }
  return v->as_string();
}

const JsonValue& need_object(const JsonValue& v, const JsonPath& path, const char* what) {
  if (!v.is_object())
    reject(RequestErrorCode::kInvalidType, path, std::string(what) + " must be an object, got " + v.describe());
  return v;
}

/// The `type` of a part or item (required for parts).
std::string_view type_of(const JsonValue& v, const JsonPath& path, bool required) {
  const JsonValue* t = v.find("type");
  if (t == nullptr) {
    if (required) reject(RequestErrorCode::kMissingField, path.key("type"), "type is required");
    return {};
  }
  if (!t->is_string())
    reject(RequestErrorCode::kInvalidType, path.key("type"), "type must be a string, got " + t->describe());
  return t->as_string();
}

bool has_breakpoint(const JsonValue& part) {
  const JsonValue* b = part.find("prompt_cache_breakpoint");
  return b != nullptr && !b->is_null();
}

/// Which parts a content array may hold (the contract's part unions).
enum class PartSet { kUser, kTextOnly, kAssistant, kToolOutput };

const char* allowed_parts(PartSet set) {
  switch (set) {
    case PartSet::kUser: return "input_text, input_image or input_json";
    case PartSet::kTextOnly: return "input_text";
    case PartSet::kAssistant: return "output_text or refusal";
    case PartSet::kToolOutput: return "input_text or input_image";
  }
  return "";
}

struct InputReader {
  std::vector<JsonValue>& images;
  std::vector<JsonPath>& image_params;

  /// A content (a string, or an array of parts) as text (docs/PROTOCOL.md §7.3).
  std::string content_text(const JsonValue& content, const JsonPath& path, PartSet set) {
    if (content.is_string()) return content.as_string();
    if (!content.is_array()) {
      reject(RequestErrorCode::kInvalidType, path, "must be a string or an array of parts, got " + content.describe());
    }
    std::string text;
    bool first = true;
    for (std::size_t j = 0; j < content.items().size(); ++j) {
      const JsonValue& part = content.items()[j];
      const JsonPath pp = path.index(j);
      need_object(part, pp, "a content part");
      const std::string_view t = type_of(part, pp, true);
      std::string piece;
      if (t == "input_text" && set != PartSet::kAssistant) {
        piece = need_string(part, "text", pp);
      } else if (t == "output_text" && set == PartSet::kAssistant) {
        piece = need_string(part, "text", pp);
      } else if (t == "refusal" && set == PartSet::kAssistant) {
        piece = need_string(part, "refusal", pp);
      } else if (t == "input_json" && set == PartSet::kUser) {
        const JsonValue* data = part.find("data");
        if (data == nullptr) reject(RequestErrorCode::kMissingField, pp.key("data"), "data is required");
        const bool objects =
            data->is_object() || (data->is_array() && std::all_of(data->items().begin(), data->items().end(),
                                                                  [](const JsonValue& x) { return x.is_object(); }));
        if (!objects) {
          reject(RequestErrorCode::kInvalidType, pp.key("data"),
                 "data must be an object or an array of objects, got " + data->describe());
        }
        piece = render(*data);
      } else if (t == "input_image" && (set == PartSet::kUser || set == PartSet::kToolOutput)) {
        const std::string& url = need_string(part, "image_url", pp);
        if (url.compare(0, 5, "data:") != 0) {
          reject(RequestErrorCode::kImageUrlUnsupported, pp.key("image_url"),
                 "only base64 data URLs (data:image/png;base64,...) are accepted; image URLs are never fetched");
        }
        images.push_back(JsonValue::string(url));
        image_params.push_back(pp.key("image_url"));
        continue;  // images go to the vision path, before the state (docs/PROTOCOL.md §3.6)
      } else {
        reject(RequestErrorCode::kInvalidValue, pp.key("type"),
               "a part here must be " + std::string(allowed_parts(set)) + ", got \"" + std::string(t) + "\"");
      }
      if (!first) text += '\n';
      text += piece;
      first = false;
    }
    return text;
  }

  /// A tool output: a string or text/image parts.
  std::string output_text(const JsonValue& item, const JsonPath& path) {
    const JsonValue* out = item.find("output");
    if (out == nullptr) reject(RequestErrorCode::kMissingField, path.key("output"), "output is required");
    return content_text(*out, path.key("output"), PartSet::kToolOutput);
  }
};

PartSet parts_of_role(std::string_view role) {
  if (role == "user") return PartSet::kUser;
  if (role == "assistant") return PartSet::kAssistant;
  return PartSet::kTextOnly;
}

JsonValue str(std::string s) { return JsonValue::string(std::move(s)); }

/// The instructions of a question: a string, or text/JSON parts joined by "\n" (§7.2).
std::string instructions_text(const JsonValue& q, const JsonPath& path) {
  const JsonValue* v = q.find("instructions");
  const JsonPath ip = path.key("instructions");
  if (v == nullptr) reject(RequestErrorCode::kMissingField, ip, "instructions is required");
  std::string text;
  if (v->is_string()) {
    text = v->as_string();
  } else if (v->is_array()) {
    for (std::size_t j = 0; j < v->items().size(); ++j) {
      const JsonValue& part = v->items()[j];
      const JsonPath pp = ip.index(j);
      need_object(part, pp, "an instructions part");
      const std::string_view t = type_of(part, pp, true);
      if (j) text += '\n';
      if (t == "input_text") {
        text += need_string(part, "text", pp);
      } else if (t == "input_json") {
        const JsonValue* data = part.find("data");
        if (data == nullptr) reject(RequestErrorCode::kMissingField, pp.key("data"), "data is required");
        if (!data->is_object() && !data->is_array()) {
          reject(RequestErrorCode::kInvalidType, pp.key("data"),
                 "data must be an object or an array of objects, got " + data->describe());
        }
        text += render(*data);
      } else if (t == "input_image") {
        reject(RequestErrorCode::kUnsupportedPart, pp,
               "Clef reads a question's instructions as text only; put images in input (they are placed before the "
               "state)");
      } else {
        reject(RequestErrorCode::kInvalidValue, pp.key("type"),
               "an instructions part must be input_text, input_json or input_image, got \"" + std::string(t) + "\"");
      }
    }
  } else {
    reject(RequestErrorCode::kInvalidType, ip,
           "instructions must be a string or an array of parts, got " + v->describe());
  }
  if (text.empty()) reject(RequestErrorCode::kInvalidValue, ip, "instructions must not be empty");
  return text;
}

/// A choice value's Clef option id: the string itself, or "true" / "false" (the ids noul uses).
std::string option_id_of(const JsonValue& value) {
  if (value.is_bool()) return value.as_bool() ? "true" : "false";
  return value.as_string();
}

std::string value_text(const JsonValue& v) { return v.is_bool() ? (v.as_bool() ? "true" : "false") : dump_json(v); }

}  // namespace

bool is_openai_body(const JsonValue& body) noexcept {
  if (!body.is_object() || body.find("state") != nullptr) return false;  // `state` marks System One
  const JsonValue* q = body.find("questions");
  return body.find("input") != nullptr || (q != nullptr && q->is_array());
}

JsonValue render_openai_input(const JsonValue& input, std::vector<JsonValue>& images,
                              std::vector<JsonPath>& image_params) {
  InputReader reader{images, image_params};
  const JsonPath path = JsonPath().key("input");
  if (input.is_string()) return input;
  if (!input.is_array()) {
    reject(RequestErrorCode::kInvalidType, path,
           "input must be a string or an array of items, got " + input.describe());
  }
  if (input.size() == 0) reject(RequestErrorCode::kInvalidValue, path, "input must not be an empty array");
  JsonValue::Array items;
  std::set<std::string> function_calls, custom_calls;
  std::optional<std::string> lone_user;  // the content text when input is one user message
  for (std::size_t i = 0; i < input.items().size(); ++i) {
    const JsonValue& item = input.items()[i];
    const JsonPath ip = path.index(i);
    need_object(item, ip, "an input item");
    const std::string_view t = type_of(item, ip, false);
    JsonValue::Object out;
    if (t.empty() || t == "message") {
      const std::string& role = need_string(item, "role", ip);
      if (role != "user" && role != "developer" && role != "system" && role != "assistant") {
        reject(RequestErrorCode::kInvalidValue, ip.key("role"),
               "role must be user, developer, system or assistant, got \"" + role + "\"");
      }
      const JsonValue* content = item.find("content");
      if (content == nullptr) reject(RequestErrorCode::kMissingField, ip.key("content"), "content is required");
      std::string text = reader.content_text(*content, ip.key("content"), parts_of_role(role));
      if (input.size() == 1 && role == "user") lone_user = text;
      out.emplace_back("role", str(role));
      out.emplace_back("content", str(std::move(text)));
    } else if (t == "function_call" || t == "custom_tool_call") {
      const std::string& call_id = need_string(item, "call_id", ip);
      out.emplace_back("type", str(std::string(t)));
      out.emplace_back("call_id", str(call_id));
      out.emplace_back("name", str(need_string(item, "name", ip)));
      if (t == "function_call") {
        out.emplace_back("arguments", str(need_string(item, "arguments", ip)));
        function_calls.insert(call_id);
      } else {
        out.emplace_back("input", str(need_string(item, "input", ip)));
        custom_calls.insert(call_id);
      }
      if (auto ns = opt_string(item, "namespace", ip)) out.emplace_back("namespace", str(*ns));
    } else if (t == "function_call_output" || t == "custom_tool_call_output") {
      const std::string& call_id = need_string(item, "call_id", ip);
      const std::set<std::string>& calls = t == "function_call_output" ? function_calls : custom_calls;
      if (calls.count(call_id) == 0) {
        reject(RequestErrorCode::kUnmatchedCallId, ip.key("call_id"),
               "no earlier " + std::string(t == "function_call_output" ? "function_call" : "custom_tool_call") +
                   " item has this call_id");
      }
      out.emplace_back("type", str(std::string(t)));
      out.emplace_back("call_id", str(call_id));
      out.emplace_back("output", str(reader.output_text(item, ip)));
    } else {
      reject(RequestErrorCode::kInvalidValue, ip.key("type"),
             "an input item must be a message, function_call, function_call_output, custom_tool_call or "
             "custom_tool_call_output, got \"" +
                 std::string(t) + "\"");
    }
    items.push_back(JsonValue::object(std::move(out)));
  }
  if (lone_user) return str(std::move(*lone_user));
  return JsonValue::array(std::move(items));
}

namespace {

/// The array `key` of a question at `qp` with between `min` and `max` items (docs/PROTOCOL.md §7.2):
/// missing -> missing_field, not an array -> invalid_type, too few / too many -> `too_few` / `too_many`,
/// whose messages read "<type> needs at least MIN <key>, got K" and "<many_prefix> MAX <key>, got K".
const JsonValue& sized_array(const JsonValue& q, const JsonPath& qp, const char* key, const char* type, std::size_t min,
                             std::size_t max, RequestErrorCode too_few, RequestErrorCode too_many,
                             const char* many_prefix) {
  const JsonPath ap = qp.key(key);
  const JsonValue* a = q.find(key);
  if (a == nullptr) reject(RequestErrorCode::kMissingField, ap, std::string(key) + " is required");
  if (!a->is_array())
    reject(RequestErrorCode::kInvalidType, ap, std::string(key) + " must be an array, got " + a->describe());
  const std::size_t k = a->size();
  if (k < min) {
    reject(too_few, ap,
           std::string(type) + " needs at least " + std::to_string(min) + " " + key + ", got " + std::to_string(k));
  }
  if (k > max)
    reject(too_many, ap,
           std::string(many_prefix) + " " + std::to_string(max) + " " + key + ", got " + std::to_string(k));
  return *a;
}

/// A choice question's `choices` -> the System One question's criteria (option id -> description) and
/// `oq.values`, the typed values in model order (docs/PROTOCOL.md §7.2).
void translate_choice(const JsonValue& q, const JsonPath& p, const RequestLimits& limits, JsonValue::Object& sq,
                      OpenAIQuestion& oq) {
  const JsonPath cp = p.key("choices");
  const JsonValue& choices =
      sized_array(q, p, "choices", "choice", limits.min_choice_options, limits.max_choice_options,
                  RequestErrorCode::kTooFewOptions, RequestErrorCode::kTooManyOptions, "choice allows at most");
  const std::size_t k = choices.size();
  JsonValue::Object criteria;
  std::vector<std::pair<std::string, JsonValue>> by_id;  // option id -> typed value
  for (std::size_t j = 0; j < k; ++j) {
    const JsonValue& c = choices.items()[j];
    const JsonPath vp = cp.index(j);
    need_object(c, vp, "a choice");
    const JsonValue* value = c.find("value");
    if (value == nullptr) reject(RequestErrorCode::kMissingField, vp.key("value"), "value is required");
    if (!value->is_string() && !value->is_bool()) {
      reject(RequestErrorCode::kInvalidType, vp.key("value"),
             "value must be a string or a boolean, got " + value->describe());
    }
    const std::string oid = option_id_of(*value);
    for (const auto& [seen_id, seen] : by_id) {
      if (seen_id != oid) continue;
      if (seen.kind() == value->kind()) {
        reject(RequestErrorCode::kDuplicateChoice, vp.key("value"),
               "choice values must be unique; " + value_text(*value) + " appears twice");
      }
      reject(RequestErrorCode::kIndistinctChoices, vp.key("value"),
             "the boolean and the string \"" + oid +
                 "\" are distinct values in this contract, but Clef's prompt names both option \"" + oid +
                 "\"; it cannot tell them apart");
    }
    by_id.emplace_back(oid, *value);
    const std::optional<std::string> desc = opt_string(c, "description", vp);
    criteria.emplace_back(oid, desc ? str(*desc) : JsonValue());
  }
  sq.emplace_back("type", str("choice"));
  sq.emplace_back("criteria", JsonValue::object(std::move(criteria)));
  // Model order is by option id (§3.4): the typed values follow it.
  std::sort(by_id.begin(), by_id.end(),
            [](const auto& a, const auto& b) { return std::string_view(a.first) < std::string_view(b.first); });
  for (auto& [oid, v] : by_id) oq.values.push_back(v);
}

/// A score question's `levels` -> the System One question's criteria (label, or {label, description})
/// and `oq.labels`, lowest first (docs/PROTOCOL.md §7.2).
void translate_score(const JsonValue& q, const JsonPath& p, const RequestLimits& limits, JsonValue::Object& sq,
                     OpenAIQuestion& oq) {
  const JsonPath lp = p.key("levels");
  const JsonValue& levels =
      sized_array(q, p, "levels", "score", limits.min_score_levels, limits.max_score_levels,
                  RequestErrorCode::kTooFewLevels, RequestErrorCode::kTooManyLevels, "Clef's score head takes at most");
  const std::size_t k = levels.size();
  JsonValue::Array criteria;
  for (std::size_t j = 0; j < k; ++j) {
    const JsonValue& l = levels.items()[j];
    const JsonPath vp = lp.index(j);
    need_object(l, vp, "a level");
    std::string label = need_string(l, "label", vp);
    const std::optional<std::string> desc = opt_string(l, "description", vp);
    // The level's legend value: its label, or {"description", "label"} when it has a description.
    if (desc) {
      criteria.push_back(JsonValue::object({{"label", str(label)}, {"description", str(*desc)}}));
    } else {
      criteria.push_back(str(label));
    }
    oq.labels.push_back(std::move(label));
  }
  sq.emplace_back("type", str("score"));
  sq.emplace_back("criteria", JsonValue::array(std::move(criteria)));
}

/// Question i of `questions` (at `p`) -> its System One question (appended to req.questions) and its
/// contract record (appended to contract.questions).
void translate_question(const JsonValue& q, const JsonPath& p, std::size_t i, const RequestLimits& limits,
                        SystemOneRequest& req, OpenAIContract& contract) {
  need_object(q, p, "a question");
  OpenAIQuestion oq;
  oq.name = opt_string(q, "name", p);
  if (oq.name && oq.name->empty()) reject(RequestErrorCode::kEmptyQuestionId, p.key("name"), "name must not be empty");
  if (oq.name && oq.name->size() > limits.max_question_id_bytes) {
    reject(RequestErrorCode::kQuestionIdTooLong, p.key("name"),
           "name of " + std::to_string(oq.name->size()) + " bytes exceeds the limit of " +
               std::to_string(limits.max_question_id_bytes) + " bytes");
  }
  // The prompt's ID line: the name, or the question's 1-based position when unnamed (§7.2).
  const std::string id = oq.name ? *oq.name : std::to_string(i + 1);
  const std::string_view type = type_of(q, p, true);
  const std::string instructions = instructions_text(q, p);
  JsonValue::Object sq;  // the System One question
  sq.emplace_back("instructions", str(instructions));
  if (type == "predicate") {
    sq.emplace_back("type", str("noul"));  // default criteria
  } else if (type == "choice") {
    translate_choice(q, p, limits, sq, oq);
  } else if (type == "score") {
    translate_score(q, p, limits, sq, oq);
  } else {
    reject(RequestErrorCode::kInvalidQuestionType, p.key("type"),
           "type must be predicate, choice or score, got \"" + std::string(type) + "\"");
  }
  try {
    req.questions.push_back(build_systemone_question(id, JsonValue::object(std::move(sq)), limits));
  } catch (const RequestError& e) {
    throw RequestError(e.code(), p, e.message());  // a rule the checks above missed: name the question
  }
  contract.questions.push_back(std::move(oq));
}

/// The caching options (docs/PROTOCOL.md §7.6) into `contract`; the ignored safety_identifier is
/// only type-checked. `input` is the request's input (its parts may carry cache breakpoints).
void read_cache_options(const JsonValue& body, const JsonValue& input, OpenAIContract& contract) {
  const JsonPath kpath = JsonPath().key("prompt_cache_key");
  contract.prompt_cache_key = opt_string(body, "prompt_cache_key", JsonPath());
  if (contract.prompt_cache_key && contract.prompt_cache_key->size() > kOpenAIMaxPromptCacheKeyBytes) {
    reject(RequestErrorCode::kInvalidValue, kpath,
           "prompt_cache_key allows at most " + std::to_string(kOpenAIMaxPromptCacheKeyBytes) + " characters");
  }
  (void)opt_string(body, "safety_identifier", JsonPath());
  if (const JsonValue* o = body.find("prompt_cache_options"); o != nullptr && !o->is_null()) {
    const JsonPath op = JsonPath().key("prompt_cache_options");
    need_object(*o, op, "prompt_cache_options");
    const std::optional<std::string> mode = opt_string(*o, "mode", op);
    if (mode && *mode != "implicit" && *mode != "explicit") {
      reject(RequestErrorCode::kInvalidValue, op.key("mode"),
             "mode must be implicit or explicit, got \"" + *mode + "\"");
    }
    const std::optional<std::string> ttl = opt_string(*o, "ttl", op);
    if (ttl && *ttl != "30m") reject(RequestErrorCode::kInvalidValue, op.key("ttl"), "ttl must be \"30m\"");
    bool breakpoints = false;
    if (input.is_array()) {
      for (const JsonValue& item : input.items()) {
        for (const char* k : {"content", "output"}) {
          const JsonValue* c = item.find(k);
          if (c == nullptr || !c->is_array()) continue;
          for (const JsonValue& part : c->items()) breakpoints = breakpoints || has_breakpoint(part);
        }
      }
    }
    contract.cache_disabled = mode && *mode == "explicit" && !breakpoints;
  }
}

}  // namespace

SystemOneRequest translate_openai_request(const JsonValue& body, const RequestLimits& limits,
                                          const ServedModel& served) {
  if (!body.is_object()) {
    reject(RequestErrorCode::kInvalidType, JsonPath(),
           "the request body must be a JSON object, got " + body.describe());
  }
  auto contract = std::make_shared<OpenAIContract>();
  SystemOneRequest req;

  // model: required by the contract; any served name (decision/request.h serves_model()).
  const JsonPath mpath = JsonPath().key("model");
  const std::string& model = need_string(body, "model", JsonPath());
  if (!serves_model(model, served, ModelNameSource::kBody)) {
    reject(RequestErrorCode::kUnknownModel, mpath,
           "the model " + dump_json(JsonValue::string(model)) + " does not exist on this server; it serves " +
               dump_json(JsonValue::string(served.name)));
  }
  req.model = model;
  req.model_given = true;

  // input -> state and images.
  const JsonValue* input = body.find("input");
  if (input == nullptr) reject(RequestErrorCode::kMissingField, JsonPath().key("input"), "input is required");
  std::vector<JsonValue> images;
  req.state = render_openai_input(*input, images, contract->image_params);
  if (!images.empty()) {
    if (!limits.accept_images) {
      reject(RequestErrorCode::kImagesUnsupported, contract->image_params.front(),
             limits.images_refused_because.empty() ? "image parts are not supported by this model (no vision tower)"
                                                   : "image parts are refused: " + limits.images_refused_because);
    }
    req.images = JsonValue::array(std::move(images));
  }

  // questions, in request order.
  const JsonPath qpath = JsonPath().key("questions");
  const JsonValue* questions = body.find("questions");
  if (questions == nullptr) reject(RequestErrorCode::kMissingField, qpath, "questions is required");
  if (!questions->is_array()) {
    reject(RequestErrorCode::kInvalidType, qpath, "questions must be an array, got " + questions->describe());
  }
  const std::size_t n = questions->size();
  if (n == 0) reject(RequestErrorCode::kEmptyQuestions, qpath, "at least one question is required");
  if (n > kOpenAIMaxQuestions) {
    reject(RequestErrorCode::kTooManyQuestions, qpath,
           "at most " + std::to_string(kOpenAIMaxQuestions) + " questions are allowed, got " + std::to_string(n));
  }
  for (std::size_t i = 0; i < n; ++i)
    translate_question(questions->items()[i], qpath.index(i), i, limits, req, *contract);

  read_cache_options(body, *input, *contract);
  req.openai = std::move(contract);
  return req;
}

namespace {

void append_number(std::string& out, double v) { out += python_float_repr(python_round4(v)); }

}  // namespace

std::string build_openai_response_json(const SystemOneRequest& request, const std::string& model,
                                       std::span<const float> logits, std::int64_t input_tokens,
                                       const AnswerOptions& options, const OpenAICacheUsage& cache,
                                       const std::string& extra_usage) {
  if (!request.openai || request.openai->questions.size() != request.questions.size()) {
    throw InternalError("build_openai_response_json: the request has no OpenAI contract");
  }
  const std::vector<float> probs = question_probabilities(request, logits);
  std::string out = "{\"model\":";
  append_json_string(out, model);
  out += ",\"answers\":[";
  std::size_t base = 0;
  for (std::size_t qi = 0; qi < request.questions.size(); ++qi) {
    const RequestQuestion& q = request.questions[qi];
    const OpenAIQuestion& oq = request.openai->questions[qi];
    const QuestionAnswer a =
        answer_question(q, std::span<const float>(probs).subspan(base, q.options.size()), options.confidence);
    base += q.options.size();
    if (qi) out += ',';
    out += "{\"type\":";
    out += q.type == QuestionType::kNoul     ? "\"predicate\""
           : q.type == QuestionType::kChoice ? "\"choice\""
                                             : "\"score\"";
    out += ",\"name\":";
    if (oq.name) {
      append_json_string(out, *oq.name);
    } else {
      out += "null";
    }
    if (q.type == QuestionType::kNoul) {
      out += ",\"probability\":";
      append_number(out, a.p[0]);  // model order is (true, false)
    } else if (q.type == QuestionType::kChoice) {
      out += ",\"choice\":";
      append_dump_json(out, oq.values[a.best]);
      out += ",\"confidence\":";
      append_number(out, a.confidence);
      out += ",\"probabilities\":[";
      for (std::size_t k = 0; k < q.request_order.size(); ++k) {
        const std::size_t j = q.request_order[k];
        if (k) out += ',';
        out += "{\"value\":";
        append_dump_json(out, oq.values[j]);
        out += ",\"probability\":";
        append_number(out, a.p[j]);
        out += '}';
      }
      out += ']';
    } else {
      out += ",\"score\":";
      append_number(out, a.score);
      out += ",\"confidence\":";
      append_number(out, a.confidence);
      out += ",\"probabilities\":[";
      for (std::size_t i = 0; i < a.p.size(); ++i) {
        if (i) out += ',';
        out += "{\"value\":" + std::to_string(i) + ",\"label\":";
        append_json_string(out, oq.labels[i]);
        out += ",\"probability\":";
        append_number(out, a.p[i]);
        out += '}';
      }
      out += ']';
    }
    out += '}';
  }
  out += "],\"usage\":{\"input_tokens\":" + std::to_string(input_tokens) +
         ",\"input_tokens_details\":{\"cached_tokens\":" + std::to_string(cache.cached_tokens) +
         ",\"cache_write_tokens\":" + std::to_string(cache.cache_write_tokens) +
         "},\"output_tokens\":0,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":" +
         std::to_string(input_tokens);
  if (!extra_usage.empty()) out += "," + extra_usage;
  out += "}}";
  return out;
}

RequestError to_openai_error(const RequestError& e, const SystemOneRequest& request) {
  const auto& segs = e.path().segments();
  const auto* head = segs.empty() ? nullptr : std::get_if<std::string>(&segs[0]);
  if (head == nullptr || !request.openai) return e;
  JsonPath path = e.path();
  if (*head == "images" && segs.size() >= 2 && std::holds_alternative<std::size_t>(segs[1]) &&
      std::get<std::size_t>(segs[1]) < request.openai->image_params.size()) {
    path = request.openai->image_params[std::get<std::size_t>(segs[1])];
  } else if (*head == "images" || *head == "state") {
    path = JsonPath().key("input");
  } else if (*head == "questions" && segs.size() >= 2 && std::holds_alternative<std::string>(segs[1])) {
    const std::string& id = std::get<std::string>(segs[1]);
    for (std::size_t i = 0; i < request.questions.size(); ++i) {
      if (request.questions[i].id != id) continue;
      path = JsonPath().key("questions").index(i);
      if (segs.size() >= 3 && std::holds_alternative<std::string>(segs[2]) &&
          std::get<std::string>(segs[2]) == "instructions") {
        path = path.key("instructions");
      }
      break;
    }
  }
  return RequestError(e.code(), path, e.message(), e.offset());
}

std::string openai_param(const JsonPath& path) {
  std::string out;
  for (const JsonPath::Segment& s : path.segments()) {
    if (const auto* k = std::get_if<std::string>(&s)) {
      if (!out.empty()) out += '.';
      out += *k;
    } else {
      out += "[" + std::to_string(std::get<std::size_t>(s)) + "]";
    }
  }
  return out;
}

}  // namespace clef

// SPDX-License-Identifier: MIT
#include "decision/request.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <span>

#include "core/json_text.h"

namespace clef {

namespace {

constexpr std::string_view kDefaultTrue = "The proposition is true or the answer is yes.";
constexpr std::string_view kDefaultFalse = "The proposition is false or the answer is no.";
constexpr std::string_view kJevAlias = "jev-latest";
constexpr std::string_view kCloudflarePrefix = "@cf/cloudflare/";  // Workers AI model path
constexpr std::string_view kOpenRouterPrefix = "cloudflare/";      // OpenRouter model slug

[[noreturn]] void reject(RequestErrorCode code, const JsonPath& path, const std::string& message) {
  throw RequestError(code, path, message);
}

/// Restricted Damerau-Levenshtein distance (insertions, deletions, substitutions and swaps of two
/// neighbours, each 1) between `a` and `b`, compared ASCII-case-insensitively.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  const std::size_t n = a.size(), m = b.size();
  // Three rows of the (n+1) x (m+1) table: i-2, i-1, i.
  std::vector<std::size_t> before(m + 1), prev(m + 1), cur(m + 1);
  std::iota(prev.begin(), prev.end(), std::size_t{0});
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        cur[j] = std::min(cur[j], before[j - 2] + 1);
      }
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

/// Whether `key` looks like a misspelling of `field`: equal but for letter case, or at most 1 edit
/// away (2 for fields of 8 or more letters: "criterias", "critera", "questons").
bool near_miss(std::string_view key, std::string_view field) {
  if (key == field || key.size() > 2 * field.size()) return false;
  return edit_distance(key, field) <= (field.size() >= 8 ? 2u : 1u);
}

/// The hint added to an error about a missing or empty `field` of the object `obj` when `obj` has
/// an unknown key that looks like a misspelling of it: `; the question has "criterias": did you
/// mean "criteria"?` (the closest such key), else "". Unknown keys are ignored by the protocol
/// (docs/PROTOCOL.md §1.1, §1.2), so a misspelt optional field cannot be refused; a required one
/// names its look-alike here. `known`: the object's own field names, never suggested against.
std::string misspelt_key_hint(const JsonValue& obj, std::string_view field, std::string_view where,
                              std::span<const std::string_view> known) {
  if (!obj.is_object()) return {};
  const std::string* best = nullptr;
  std::size_t best_distance = 0;
  for (const auto& [key, value] : obj.members()) {
    if (std::find(known.begin(), known.end(), key) != known.end() || !near_miss(key, field)) continue;
    const std::size_t d = edit_distance(key, field);
    if (best == nullptr || d < best_distance) {
      best = &key;
      best_distance = d;
    }
  }
  if (best == nullptr) return {};
  std::string hint = "; the " + std::string(where) + " has ";
  append_json_string(hint, *best);
  hint += ": did you mean ";
  append_json_string(hint, field);
  hint += "?";
  return hint;
}

/// The fields the protocol reads (docs/PROTOCOL.md §1.1, §1.2).
constexpr std::array<std::string_view, 7> kBodyFields = {"model",  "state",        "questions", "images",
                                                         "videos", "media_kwargs", "id"};
constexpr std::array<std::string_view, 3> kQuestionFields = {"type", "instructions", "criteria"};

}  // namespace

bool serves_model(std::string_view model, const ServedModel& served, ModelNameSource source) {
  if (source == ModelNameSource::kCloudflarePath) {
    if (model == "clef" || model == "clef-flash") return true;
  } else {
    if (served.accept_any || model == kJevAlias) return true;
    if (model.substr(0, kCloudflarePrefix.size()) == kCloudflarePrefix) {
      model.remove_prefix(kCloudflarePrefix.size());
    } else if (model.substr(0, kOpenRouterPrefix.size()) == kOpenRouterPrefix) {
      model.remove_prefix(kOpenRouterPrefix.size());
    }
  }
  if (model == served.name) return true;
  return std::find(served.aliases.begin(), served.aliases.end(), model) != served.aliases.end();
}

namespace {

std::string accepted_models(const ServedModel& served) {
  std::string s;
  append_json_string(s, kJevAlias);
  if (!served.name.empty()) {
    s += ", ";
    append_json_string(s, served.name);
  }
  for (const auto& a : served.aliases) {
    s += ", ";
    append_json_string(s, a);
  }
  return s;
}

std::string count_text(std::size_t n, const char* what) { return std::to_string(n) + " " + what; }

// OpenRouter image part: {"type": "image_url", "image_url": {...}} (docs/PROTOCOL.md §1.5).
bool is_image_part(const JsonValue& item) {
  if (!item.is_object()) return false;
  const JsonValue* t = item.find("type");
  return (t != nullptr && t->is_string() && (t->as_string() == "image_url" || t->as_string() == "image")) ||
         item.find("image_url") != nullptr;
}

void check_model(const JsonValue& body, const ServedModel& served, SystemOneRequest& req) {
  const JsonPath path = JsonPath().key("model");
  const JsonValue* m = body.find("model");
  if (m == nullptr) {
    req.model = served.name;
    req.model_given = false;
    return;
  }
  if (!m->is_string()) reject(RequestErrorCode::kInvalidType, path, "model must be a string, got " + m->describe());
  if (!serves_model(m->as_string(), served, ModelNameSource::kBody)) {
    reject(RequestErrorCode::kUnknownModel, path,
           "this server does not serve " + m->describe() + "; accepted: " + accepted_models(served) +
               " (or omit model)");
  }
  req.model = m->as_string();
  req.model_given = true;
}

void check_state(const JsonValue& body, Dialect dialect, const RequestLimits& limits, SystemOneRequest& req) {
  const JsonValue* s = body.find("state");
  if (s == nullptr) {
    reject(RequestErrorCode::kMissingField, JsonPath().key("state"),
           "state is required (it may be null)" + misspelt_key_hint(body, "state", "request", kBodyFields));
  }
  req.state = *s;
  if (dialect != Dialect::kOpenRouter || !s->is_array()) return;
  // OpenRouter (docs/PROTOCOL.md §1.5): image parts inside the state array become the request's
  // images, in order; the other items stay the state (an array, order kept).
  JsonValue::Array text_items, urls;
  for (std::size_t i = 0; i < s->items().size(); ++i) {
    const JsonValue& item = s->items()[i];
    if (!is_image_part(item)) {
      text_items.push_back(item);
      continue;
    }
    const JsonPath path = JsonPath().key("state").index(i);
    if (!limits.accept_images) {
      reject(RequestErrorCode::kImagesUnsupported, path,
             limits.images_refused_because.empty() ? "image parts are not supported by this model (no vision tower)"
                                                   : "image parts are refused: " + limits.images_refused_because);
    }
    const JsonValue* iu = item.find("image_url");
    const JsonValue* url = iu != nullptr && iu->is_object() ? iu->find("url") : nullptr;
    if (url == nullptr || !url->is_string()) {
      reject(RequestErrorCode::kInvalidType, path.key("image_url").key("url"),
             "an image part needs {\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/...;base64,...\"}}");
    }
    urls.push_back(*url);
  }
  if (!urls.empty()) {
    req.state = JsonValue::array(std::move(text_items));
    req.images = JsonValue::array(std::move(urls));
  }
}

void check_videos(const JsonValue& body) {
  const JsonValue* videos = body.find("videos");
  if (videos != nullptr && !videos->is_null() && !(videos->is_array() && videos->size() == 0)) {
    reject(RequestErrorCode::kVideosUnsupported, JsonPath().key("videos"), "videos are not supported");
  }
}

void check_media(const JsonValue& body, Dialect dialect, const RequestLimits& limits, SystemOneRequest& req) {
  const JsonValue* images = body.find("images");
  if (images != nullptr && !images->is_null() && !(images->is_array() && images->size() == 0)) {
    if (limits.accept_images && dialect != Dialect::kOpenRouter) {
      req.images = *images;
      return check_videos(body);
    }
    reject(RequestErrorCode::kImagesUnsupported, JsonPath().key("images"),
           dialect == Dialect::kOpenRouter
               ? "OpenRouter requests carry images as image_url parts inside the state array, not in images"
           : !limits.images_refused_because.empty()
               ? "images are refused: " + limits.images_refused_because
               : "images are not supported by this model (no vision tower) or were turned off");
  }
  check_videos(body);
}

std::optional<JsonValue> description_of(const JsonValue& v) {
  if (v.is_null()) return std::nullopt;
  return v;
}

void build_noul(const JsonValue* criteria, const JsonPath& path, RequestQuestion& q) {
  std::optional<JsonValue> d_true = JsonValue::string(std::string(kDefaultTrue));
  std::optional<JsonValue> d_false = JsonValue::string(std::string(kDefaultFalse));
  if (criteria != nullptr && !criteria->is_null()) {
    if (!criteria->is_object()) {
      reject(RequestErrorCode::kInvalidType, path,
             "noul criteria must be an object {\"true\": ..., \"false\": ...}, got " + criteria->describe());
    }
    // The reference merges the criteria over the defaults (dict.update): other keys are ignored,
    // and a side given as null has no description.
    if (const JsonValue* t = criteria->find("true")) d_true = description_of(*t);
    if (const JsonValue* f = criteria->find("false")) d_false = description_of(*f);
  }
  q.options.push_back(RequestOption{"true", std::move(d_true)});
  q.options.push_back(RequestOption{"false", std::move(d_false)});
  q.request_order = {0, 1};
}

bool is_empty_criteria(const JsonValue* c) {
  return c == nullptr || c->is_null() || ((c->is_object() || c->is_array()) && c->size() == 0);
}

void build_choice(const JsonValue& question, const JsonValue* criteria, const JsonPath& path,
                  const RequestLimits& limits, RequestQuestion& q) {
  if (is_empty_criteria(criteria)) {
    reject(RequestErrorCode::kEmptyCriteria, path,
           "choice criteria must not be empty (an object of option ids)" +
               misspelt_key_hint(question, "criteria", "question", kQuestionFields));
  }
  if (!criteria->is_object()) {
    reject(RequestErrorCode::kInvalidType, path,
           "choice criteria must be an object mapping option ids to descriptions, got " + criteria->describe());
  }
  const std::size_t n = criteria->size();
  if (n < limits.min_choice_options) {
    reject(RequestErrorCode::kTooFewOptions, path,
           "choice needs at least " + count_text(limits.min_choice_options, "options") + ", got " + std::to_string(n));
  }
  if (n > limits.max_choice_options) {
    reject(RequestErrorCode::kTooManyOptions, path,
           "choice allows at most " + count_text(limits.max_choice_options, "options") + ", got " + std::to_string(n));
  }
  // Model order: sorted by option id in code point order (= UTF-8 byte order) (§3.4).
  const auto& members = criteria->members();
  std::vector<std::size_t> by_id(n);
  std::iota(by_id.begin(), by_id.end(), std::size_t{0});
  std::sort(by_id.begin(), by_id.end(), [&](std::size_t a, std::size_t b) {
    return std::string_view(members[a].first) < std::string_view(members[b].first);
  });
  q.options.reserve(n);
  q.request_order.assign(n, 0);
  for (std::size_t m = 0; m < n; ++m) {
    const auto& member = members[by_id[m]];
    q.options.push_back(RequestOption{member.first, description_of(member.second)});
    q.request_order[by_id[m]] = m;
  }
}

void build_score(const JsonValue& question, const JsonValue* criteria, const JsonPath& path,
                 const RequestLimits& limits, RequestQuestion& q) {
  if (is_empty_criteria(criteria)) {
    reject(RequestErrorCode::kEmptyCriteria, path,
           "score criteria must not be empty (an array of level descriptions)" +
               misspelt_key_hint(question, "criteria", "question", kQuestionFields));
  }
  if (!criteria->is_array()) {
    std::string why;
    if (criteria->is_object()) why = " (the reference would silently use the object's keys as levels)";
    if (criteria->is_string()) why = " (the reference would silently use each character as a level)";
    reject(RequestErrorCode::kInvalidType, path,
           "score criteria must be an array of level descriptions, lowest first, got " + criteria->describe() + why);
  }
  const std::size_t n = criteria->size();
  if (n < limits.min_score_levels) {
    reject(RequestErrorCode::kTooFewLevels, path,
           "score needs at least " + count_text(limits.min_score_levels, "levels") + ", got " + std::to_string(n));
  }
  if (n > limits.max_score_levels) {
    reject(RequestErrorCode::kTooManyLevels, path,
           "score allows at most " + count_text(limits.max_score_levels, "levels") + ", got " + std::to_string(n));
  }
  q.options.reserve(n);
  q.request_order.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    q.options.push_back(RequestOption{std::to_string(i), description_of(criteria->items()[i])});
    q.request_order[i] = i;
  }
}

}  // namespace

RequestQuestion build_systemone_question(const std::string& id, const JsonValue& value, const RequestLimits& limits) {
  const JsonPath path = JsonPath().key("questions").key(id);
  if (id.empty()) {
    reject(RequestErrorCode::kEmptyQuestionId, path,
           "question ids must not be empty (the reference computes NaN for an empty id without instructions)");
  }
  if (id.size() > limits.max_question_id_bytes) {
    reject(RequestErrorCode::kQuestionIdTooLong, JsonPath().key("questions"),
           "question id of " + std::to_string(id.size()) + " bytes exceeds the limit of " +
               std::to_string(limits.max_question_id_bytes) + " bytes");
  }
  if (!value.is_object()) {
    reject(RequestErrorCode::kInvalidType, path,
           "a question must be an object {\"type\", \"instructions\", \"criteria\"}, got " + value.describe());
  }
  RequestQuestion q;
  q.id = id;
  const JsonValue* type = value.find("type");
  if (type == nullptr) {
    reject(RequestErrorCode::kMissingField, path.key("type"),
           "type is required (noul, choice or score)" + misspelt_key_hint(value, "type", "question", kQuestionFields));
  }
  const std::string_view t = type->is_string() ? std::string_view(type->as_string()) : std::string_view();
  if (type->is_string() && t == "noul") {
    q.type = QuestionType::kNoul;
  } else if (type->is_string() && t == "choice") {
    q.type = QuestionType::kChoice;
  } else if (type->is_string() && t == "score") {
    q.type = QuestionType::kScore;
  } else {
    std::string hint;
    for (const QuestionType known : {QuestionType::kNoul, QuestionType::kChoice, QuestionType::kScore}) {
      const std::string_view name = question_type_name(known);
      if (hint.empty() && type->is_string() && near_miss(t, name)) {
        hint = "; did you mean ";
        append_json_string(hint, name);
        hint += edit_distance(t, name) == 0 ? "? (types are case-sensitive)" : "?";
      }
    }
    reject(RequestErrorCode::kInvalidQuestionType, path.key("type"),
           "type must be noul, choice, or score, got " + type->describe() + hint);
  }
  const JsonValue* criteria = value.find("criteria");
  const JsonPath cpath = path.key("criteria");
  switch (q.type) {
    case QuestionType::kNoul: build_noul(criteria, cpath, q); break;
    case QuestionType::kChoice: build_choice(value, criteria, cpath, limits, q); break;
    case QuestionType::kScore: build_score(value, criteria, cpath, limits, q); break;
  }
  if (criteria != nullptr) q.criteria = *criteria;
  // §1.2: missing, null or "" instructions fall back to the question id (non-empty here, so the
  // question span is never empty).
  const JsonValue* instr = value.find("instructions");
  if (instr == nullptr || instr->is_null() || (instr->is_string() && instr->as_string().empty())) {
    q.instructions = JsonValue::string(id);
    q.instructions_from_id = true;
  } else {
    q.instructions = *instr;
  }
  return q;
}

const char* question_type_name(QuestionType type) noexcept {
  switch (type) {
    case QuestionType::kNoul: return "noul";
    case QuestionType::kChoice: return "choice";
    case QuestionType::kScore: return "score";
  }
  return "?";
}

JsonValue option_semantics(const RequestOption& option) {
  JsonValue::Object members;
  members.emplace_back("option_id", JsonValue::string(option.id));
  if (option.description) members.emplace_back("description", *option.description);
  return JsonValue::object(std::move(members));
}

SystemOneRequest validate_request(const JsonValue& body, const RequestLimits& limits, Dialect dialect,
                                  const ServedModel& served) {
  if (!body.is_object()) {
    reject(RequestErrorCode::kInvalidType, JsonPath(),
           "the request body must be a JSON object, got " + body.describe());
  }
  SystemOneRequest req;
  check_model(body, served, req);
  check_state(body, dialect, limits, req);

  const JsonPath qpath = JsonPath().key("questions");
  const JsonValue* questions = body.find("questions");
  if (questions == nullptr) {
    reject(RequestErrorCode::kMissingField, qpath,
           "questions is required" + misspelt_key_hint(body, "questions", "request", kBodyFields));
  }
  if (!questions->is_object()) {
    reject(RequestErrorCode::kInvalidType, qpath,
           "questions must be an object mapping question ids to questions, got " + questions->describe());
  }
  const std::size_t n = questions->size();
  if (n == 0) reject(RequestErrorCode::kEmptyQuestions, qpath, "at least one question is required");
  if (n < limits.min_questions) {
    reject(RequestErrorCode::kTooFewQuestions, qpath,
           "at least " + count_text(limits.min_questions, "questions") + " are required, got " + std::to_string(n));
  }
  if (n > limits.max_questions) {
    reject(RequestErrorCode::kTooManyQuestions, qpath,
           "at most " + count_text(limits.max_questions, "questions") + " are allowed, got " + std::to_string(n));
  }
  req.questions.reserve(n);
  for (const auto& [id, value] : questions->members())
    req.questions.push_back(build_systemone_question(id, value, limits));

  check_media(body, dialect, limits, req);
  return req;
}

}  // namespace clef

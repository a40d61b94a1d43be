// SPDX-License-Identifier: MIT
#include "core/json_reader.h"

#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/paths.h"

namespace clef {

namespace {

/// Builds a nlohmann DOM (json or ordered_json) from SAX events on an explicit stack (no recursion).
template <class Json>
class DomBuilder {
 public:
  using json = Json;
  explicit DomBuilder(const JsonTextLimits& limits) : limits_(limits) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(typename json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(typename json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(typename json::number_float_t v, const typename json::string_t&) { return put(json(v)); }
  bool string(typename json::string_t& v) { return put(json(std::move(v))); }
  bool binary(typename json::binary_t&) { return fail(JsonTextFault::kSyntax, "binary values are not JSON"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(typename json::string_t& k) {
    if (limits_.duplicates == DuplicateKeys::kReject && stack_.back()->contains(k)) {
      return fail(JsonTextFault::kDuplicateKey, "key \"" + printable(k) + "\" appears twice in one object");
    }
    keys_.back() = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    return fail(JsonTextFault::kSyntax, json_library_message(ex));
  }

  json take() { return std::move(root_); }
  const std::string& error() const { return error_; }
  JsonTextFault fault() const { return fault_; }

 private:
  bool fail(JsonTextFault f, const std::string& m) {
    if (error_.empty()) {
      error_ = m;
      fault_ = f;
    }
    return false;
  }
  json* insert(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[keys_.back()];  // a repeated key overwrites: the last value wins, like Python
    slot = std::move(v);
    return &slot;
  }
  /// False (and the fault recorded) when one more item would pass max_root_items.
  bool room_for_item() {
    if (stack_.size() == 1 && stack_.back()->is_array() && stack_.back()->size() >= limits_.max_root_items) {
      return fail(JsonTextFault::kTooManyItems,
                  "an array of more than " + std::to_string(limits_.max_root_items) + " items");
    }
    return true;
  }
  bool put(json v) {
    if (!room_for_item()) return false;
    insert(std::move(v));
    return true;
  }
  bool open(json v) {
    if (stack_.size() + 1 > limits_.max_depth) {
      return fail(JsonTextFault::kTooDeep, "nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
    if (!room_for_item()) return false;
    stack_.push_back(insert(std::move(v)));
    keys_.emplace_back();
    return true;
  }
  bool close() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }

  const JsonTextLimits& limits_;
  json root_;
  std::vector<json*> stack_;  // open containers; a child is closed before its parent grows again
  std::vector<std::string> keys_;
  std::string error_;
  JsonTextFault fault_ = JsonTextFault::kNone;
};
}  // namespace

std::string json_library_message(const nlohmann::detail::exception& e) {
  std::string_view w = e.what();
  if (!w.empty() && w.front() == '[') {
    if (const auto end = w.find("] "); end != std::string_view::npos) w.remove_prefix(end + 2);
  }
  return std::string(w);
}

nlohmann::json parse_json_text(std::string_view text, const std::string& label, const JsonTextLimits& limits) {
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw ModelLoadError(label + ": malformed JSON: NUL byte at offset " + std::to_string(nul));
  }
  DomBuilder<nlohmann::json> b(limits);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &b, nlohmann::json::input_format_t::json, true);
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(label + ": malformed JSON: " + json_library_message(e));
  }
  if (!ok) throw ModelLoadError(label + ": malformed JSON: " + (b.error().empty() ? "parse error" : b.error()));
  return b.take();
}

JsonMessage parse_json_message(std::string_view text, const JsonTextLimits& limits) {
  JsonMessage m;
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    m.fault = JsonTextFault::kSyntax;
    m.error = "NUL byte at offset " + std::to_string(nul);
    return m;
  }
  DomBuilder<nlohmann::ordered_json> b(limits);
  bool ok = false;
  try {
    ok = nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &b, nlohmann::json::input_format_t::json, true);
  } catch (const nlohmann::json::exception& e) {
    m.fault = JsonTextFault::kSyntax;
    m.error = json_library_message(e);
    return m;
  }
  if (!ok) {
    m.fault = b.fault() == JsonTextFault::kNone ? JsonTextFault::kSyntax : b.fault();
    m.error = b.error().empty() ? "parse error" : b.error();
    return m;
  }
  m.value = b.take();
  return m;
}

nlohmann::json read_json_file(const std::string& path, const std::string& label, const JsonTextLimits& limits) {
  require_regular_file(path, label);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(label + ": cannot open " + path + ": " + errno_message(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(label + ": read error on " + path);
  return parse_json_text(ss.str(), label, limits);
}

std::string describe_json(const nlohmann::json& v) {
  // Containers are summarised, never dumped: dumping recurses and a hostile value can be deep.
  if (v.is_array()) return "array of " + std::to_string(v.size()) + " items";
  if (v.is_object()) return "object of " + std::to_string(v.size()) + " members";
  if (v.is_string()) {
    std::string s = printable(v.get<std::string>());
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return "string \"" + s + "\"";
  }
  return std::string(v.type_name()) + " " + v.dump();
}

JsonObjectReader::JsonObjectReader(const nlohmann::json& obj, std::string file, std::string path)
    : obj_(&obj), file_(std::move(file)), path_(std::move(path)) {
  if (!obj.is_object()) {
    throw ModelLoadError(file_ + ": " + (path_.empty() ? std::string("top level") : path_) +
                         ": expected a JSON object, got " + describe_json(obj));
  }
}

std::string JsonObjectReader::path_of(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void JsonObjectReader::fail(std::string_view key, const std::string& message) const {
  throw ModelLoadError(file_ + ": " + path_of(key) + ": " + message);
}

const nlohmann::json* JsonObjectReader::raw(std::string_view key) const {
  seen_.emplace(key);
  auto it = obj_->find(key);
  return it == obj_->end() ? nullptr : &*it;
}

bool JsonObjectReader::has(std::string_view key) const {
  const auto* v = raw(key);
  return v != nullptr && !v->is_null();
}

const nlohmann::json& JsonObjectReader::value(std::string_view key) const {
  const auto* v = raw(key);
  if (v == nullptr) fail(key, "required field is missing");
  if (v->is_null()) fail(key, "must not be null");
  return *v;
}

bool JsonObjectReader::use_default(std::string_view key) const {
  const auto* v = raw(key);
  return v == nullptr || (v->is_null() && null_is_absent_);
}

static bool as_int(const nlohmann::json& v, std::int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return false;
    }
    *out = v.get<std::int64_t>();
    return true;
  }
  return false;
}

std::int64_t JsonObjectReader::get_int(std::string_view key) const {
  const auto& v = value(key);
  std::int64_t r = 0;
  if (!as_int(v, &r)) fail(key, "expected an integer, got " + describe_json(v));
  return r;
}

std::int64_t JsonObjectReader::get_int(std::string_view key, std::int64_t def) const {
  return use_default(key) ? def : get_int(key);
}

std::int64_t JsonObjectReader::get_int_in(std::string_view key, std::int64_t lo, std::int64_t hi) const {
  (void)get_int(key);  // throws "required field is missing" / type errors
  return get_int_in(key, 0, lo, hi);
}

std::int64_t JsonObjectReader::get_int_in(std::string_view key, std::int64_t def, std::int64_t lo,
                                          std::int64_t hi) const {
  const std::int64_t v = get_int(key, def);
  if (v < lo || v > hi) {
    fail(key,
         "value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

double JsonObjectReader::get_number(std::string_view key, double def) const {
  if (use_default(key)) return def;
  const auto& v = value(key);
  if (!v.is_number()) fail(key, "expected a number, got " + describe_json(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, "expected a finite number");
  return d;
}

bool JsonObjectReader::get_bool(std::string_view key, bool def) const {
  if (use_default(key)) return def;
  const auto& v = value(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + describe_json(v));
  return v.get<bool>();
}

std::string JsonObjectReader::get_string(std::string_view key) const {
  const auto& v = value(key);
  if (!v.is_string()) fail(key, "expected a string, got " + describe_json(v));
  return v.get<std::string>();
}

std::string JsonObjectReader::get_string(std::string_view key, const std::string& def) const {
  return use_default(key) ? def : get_string(key);
}

std::vector<std::int64_t> JsonObjectReader::get_int_list(std::string_view key, std::vector<std::int64_t> def) const {
  if (use_default(key)) return def;
  const auto& v = value(key);
  if (!v.is_array()) fail(key, "expected an array of integers, got " + describe_json(v));
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::int64_t x = 0;
    if (!as_int(v[i], &x)) {
      fail(key, "element " + std::to_string(i) + ": expected an integer, got " + describe_json(v[i]));
    }
    out.push_back(x);
  }
  return out;
}

std::vector<double> JsonObjectReader::get_number_list(std::string_view key, std::vector<double> def) const {
  if (use_default(key)) return def;
  const auto& v = value(key);
  if (!v.is_array()) fail(key, "expected an array of numbers, got " + describe_json(v));
  std::vector<double> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) {
      fail(key, "element " + std::to_string(i) + ": expected a number, got " + describe_json(v[i]));
    }
    out.push_back(v[i].get<double>());
  }
  return out;
}

std::vector<std::string> JsonObjectReader::get_string_list(std::string_view key) const {
  const auto& v = value(key);
  if (!v.is_array()) fail(key, "expected an array of strings, got " + describe_json(v));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      fail(key, "element " + std::to_string(i) + ": expected a string, got " + describe_json(v[i]));
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::optional<JsonObjectReader> JsonObjectReader::get_object(std::string_view key) const {
  if (!has(key)) return std::nullopt;
  const auto& v = value(key);
  if (!v.is_object()) fail(key, "expected an object, got " + describe_json(v));
  return JsonObjectReader(v, file_, path_of(key));
}

void JsonObjectReader::reject_unknown_keys(const std::set<std::string>& also_allowed) const {
  for (auto it = obj_->begin(); it != obj_->end(); ++it) {
    if (seen_.count(it.key()) == 0 && also_allowed.count(it.key()) == 0) {
      fail(it.key(), "unknown field");
    }
  }
}

}  // namespace clef

#include "core/json_reader.h"

#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace clef {

nlohmann::json read_json_file(const std::string& path, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(label + ": cannot open " + path + ": " + errno_message(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(label + ": read error on " + path);
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(label + ": malformed JSON: " + e.what());
  }
}

std::string describe_json(const nlohmann::json& v) {
  std::string text = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return std::string(v.type_name()) + " " + text;
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
  if (v == nullptr || v->is_null()) fail(key, "required field is missing");
  return *v;
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
  return has(key) ? get_int(key) : def;
}

std::int64_t JsonObjectReader::get_int_in(std::string_view key, std::int64_t lo, std::int64_t hi) const {
  (void)get_int(key);  // throws "required field is missing" / type errors
  return get_int_in(key, 0, lo, hi);
}

std::int64_t JsonObjectReader::get_int_in(std::string_view key, std::int64_t def, std::int64_t lo,
                                          std::int64_t hi) const {
  const std::int64_t v = get_int(key, def);
  if (v < lo || v > hi) {
    fail(key, "value " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
  }
  return v;
}

double JsonObjectReader::get_number(std::string_view key, double def) const {
  if (!has(key)) return def;
  const auto& v = value(key);
  if (!v.is_number()) fail(key, "expected a number, got " + describe_json(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, "expected a finite number");
  return d;
}

bool JsonObjectReader::get_bool(std::string_view key, bool def) const {
  if (!has(key)) return def;
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
  return has(key) ? get_string(key) : def;
}

std::vector<std::int64_t> JsonObjectReader::get_int_list(std::string_view key,
                                                         std::vector<std::int64_t> def) const {
  if (!has(key)) return def;
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
  if (!has(key)) return def;
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

#include "core/json_reader.h"

#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <filesystem>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace clef {

namespace {

/// Builds a nlohmann DOM from SAX events on an explicit stack (no recursion).
class DomBuilder {
 public:
  using json = nlohmann::json;
  explicit DomBuilder(const JsonTextLimits& limits) : limits_(limits) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t&) { return fail("binary values are not JSON"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (limits_.duplicates == DuplicateKeys::kReject && stack_.back()->contains(k)) {
      return fail("key \"" + printable(k) + "\" appears twice in one object");
    }
    keys_.back() = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) { return fail(ex.what()); }

  json take() { return std::move(root_); }
  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& m) {
    if (error_.empty()) error_ = m;
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
  bool put(json v) {
    insert(std::move(v));
    return true;
  }
  bool open(json v) {
    if (stack_.size() + 1 > limits_.max_depth) {
      return fail("nesting deeper than " + std::to_string(limits_.max_depth) + " levels");
    }
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
};

}  // namespace

nlohmann::json parse_json_text(std::string_view text, const std::string& label, const JsonTextLimits& limits) {
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    throw ModelLoadError(label + ": malformed JSON: NUL byte at offset " + std::to_string(nul));
  }
  DomBuilder b(limits);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(text.begin(), text.end(), &b, nlohmann::json::input_format_t::json, true);
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(label + ": malformed JSON: " + e.what());
  }
  if (!ok) throw ModelLoadError(label + ": malformed JSON: " + (b.error().empty() ? "parse error" : b.error()));
  return b.take();
}

bool path_exists(const std::string& path) noexcept {
  std::error_code ec;
  const auto st = std::filesystem::symlink_status(path, ec);
  return !ec && st.type() != std::filesystem::file_type::not_found;
}

void require_regular_file(const std::string& path, const std::string& label) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found && !path_exists(path)) {
    throw ModelLoadError(label + ": missing (" + path + ")");
  }
  if (ec) throw ModelLoadError(label + ": cannot stat " + path + ": " + ec.message());
  if (st.type() != std::filesystem::file_type::regular) {
    throw ModelLoadError(label + ": not a regular file (" + path + ")");
  }
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

std::string printable(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok && len == 1 && (c < 0x20 || c == 0x7f)) ok = false;
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
      ++i;
    }
  }
  return out;
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

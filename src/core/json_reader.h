// Typed, path-aware reading of JSON objects (nlohmann::json underneath). Every error names the
// file and the JSON path of the offending value, e.g.
//   "config.json: text_config.hidden_size: expected a positive integer, got \"64\"".
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace clef {

/// Parses a whole JSON file (the text is read, not mmapped). Throws IoError when it cannot be
/// read and ModelLoadError("<label>: malformed JSON: ...") when it does not parse.
nlohmann::json read_json_file(const std::string& path, const std::string& label);

/// Reads fields of one JSON object. Errors are ModelLoadError with "<file>: <path>.<key>: ...".
/// Records the keys it was asked for, so callers may reject unknown keys.
class JsonObjectReader {
 public:
  /// `obj` must outlive the reader. Throws ModelLoadError if `obj` is not an object.
  JsonObjectReader(const nlohmann::json& obj, std::string file, std::string path);

  bool has(std::string_view key) const;  ///< present and not null
  std::string path_of(std::string_view key) const;
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;

  std::int64_t get_int(std::string_view key) const;
  std::int64_t get_int(std::string_view key, std::int64_t def) const;
  /// Required integer in [lo, hi].
  std::int64_t get_int_in(std::string_view key, std::int64_t lo, std::int64_t hi) const;
  /// Integer in [lo, hi], `def` when absent.
  std::int64_t get_int_in(std::string_view key, std::int64_t def, std::int64_t lo, std::int64_t hi) const;
  double get_number(std::string_view key, double def) const;
  bool get_bool(std::string_view key, bool def) const;
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, const std::string& def) const;
  std::vector<std::int64_t> get_int_list(std::string_view key, std::vector<std::int64_t> def) const;
  std::vector<double> get_number_list(std::string_view key, std::vector<double> def) const;
  std::vector<std::string> get_string_list(std::string_view key) const;
  /// Sub-object reader; nullopt when absent or null.
  std::optional<JsonObjectReader> get_object(std::string_view key) const;
  const nlohmann::json* raw(std::string_view key) const;  ///< nullptr when absent

  /// Throws naming the first key that was never asked for and is not in `also_allowed`.
  void reject_unknown_keys(const std::set<std::string>& also_allowed = {}) const;
  const std::string& file() const noexcept { return file_; }
  const std::string& path() const noexcept { return path_; }

 private:
  const nlohmann::json& value(std::string_view key) const;
  const nlohmann::json* obj_;
  std::string file_;
  std::string path_;
  mutable std::set<std::string, std::less<>> seen_;
};

/// Short human description of a JSON value for error messages (type and truncated text).
std::string describe_json(const nlohmann::json& v);

}  // namespace clef

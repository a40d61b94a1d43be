// SPDX-License-Identifier: MIT
// Typed, path-aware reading of JSON objects (nlohmann::json underneath). Every error names the
// file and the JSON path of the offending value, e.g.
//   "config.json: text_config.hidden_size: expected a positive integer, got \"64\"".
#pragma once

#include <cstdint>
#include <optional>
#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace clef {

/// What parse_json_text does with a key that appears twice in one object.
enum class DuplicateKeys : std::uint8_t {
  kLastWins,  ///< Python's json.loads behaviour (config files)
  kReject,    ///< the safetensors library's behaviour (headers)
};

/// Limits of parse_json_text.
struct JsonTextLimits {
  std::size_t max_depth = 128;  ///< nested arrays/objects (the top-level container is depth 1)
  DuplicateKeys duplicates = DuplicateKeys::kLastWins;
  /// Items of a top-level array: parsing stops at the first one past the limit, so a longer array
  /// is refused without being built (no limit by default).
  std::size_t max_root_items = SIZE_MAX;
};

/// Why parse_json_message refused a text.
enum class JsonTextFault : std::uint8_t {
  kNone,          ///< parsed
  kSyntax,        ///< not one JSON text: syntax, invalid UTF-8, a NUL byte, trailing data
  kTooDeep,       ///< nested deeper than max_depth
  kDuplicateKey,  ///< a key repeated in one object (kReject; keys compared decoded, escapes included)
  kTooManyItems,  ///< a top-level array longer than max_root_items
};

/// What parse_json_message read: the value, or the fault and a one-line reason.
struct JsonMessage {
  nlohmann::ordered_json value;  ///< null unless fault is kNone
  JsonTextFault fault = JsonTextFault::kNone;
  std::string error;  ///< e.g. "key \"arguments\" appears twice in one object"
};

/// Parses one complete protocol message (a JSON-RPC line) like parse_json_text (no recursion; NUL
/// bytes and trailing data refused) into an insertion-ordered DOM, without throwing: a refused
/// text says why, so the caller can answer each kind with its own protocol error. Never throws for
/// any input except std::bad_alloc.
JsonMessage parse_json_message(std::string_view text, const JsonTextLimits& limits);

/// Parses a complete JSON text without recursion (nlohmann's SAX parser building the DOM on an
/// explicit stack), so hostile nesting cannot overflow the stack. Throws ModelLoadError
/// "<label>: malformed JSON: ..." for syntax errors, trailing data, a NUL byte, nesting deeper
/// than `limits.max_depth` or (kReject) a repeated key, naming the key.
nlohmann::json parse_json_text(std::string_view text, const std::string& label, const JsonTextLimits& limits = {});

/// Parses a whole JSON file with parse_json_text. Throws ModelLoadError when it is not a regular
/// file (require_regular_file, core/paths.h) or does not parse, IoError when it cannot be read.
nlohmann::json read_json_file(const std::string& path, const std::string& label, const JsonTextLimits& limits = {});

/// Reads fields of one JSON object. Errors are ModelLoadError with "<file>: <path>.<key>: ...".
/// Records the keys it was asked for, so callers may reject unknown keys.
class JsonObjectReader {
 public:
  /// `obj` must outlive the reader. Throws ModelLoadError if `obj` is not an object.
  JsonObjectReader(const nlohmann::json& obj, std::string file, std::string path);

  bool has(std::string_view key) const;  ///< present and not null
  /// By default an explicit `null` for a scalar field with a default is an error ("must not be
  /// null"), not the default: a config that says hidden_size: null is broken. Readers of files
  /// where null means "unset" (preprocessor_config.json) turn this on.
  void set_null_is_absent(bool v) noexcept { null_is_absent_ = v; }
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
  bool null_is_absent_ = false;
  /// True when the field is absent (or null and null_is_absent_): the caller uses its default.
  bool use_default(std::string_view key) const;
};

/// Short human description of a JSON value for error messages (type and truncated text).
std::string describe_json(const nlohmann::json& v);

/// The message of one of nlohmann's exceptions (a parse error: "parse error at line L, column C: ...") without
/// its "[json.exception.parse_error.101] " prefix, which names the library's exception type rather than anything
/// about the user's text. Used wherever such a message reaches a user.
std::string json_library_message(const nlohmann::detail::exception& e);

}  // namespace clef

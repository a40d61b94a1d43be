// SPDX-License-Identifier: MIT
// An immutable JSON value that keeps what Python's json.loads keeps and render() needs
// (docs/PROTOCOL.md §3.3): object members in the order sent (a duplicate key keeps its first
// position and its last value, like a Python dict), integer vs float, the exact double of a float,
// the decimal digits of integers of any size, and strings as valid UTF-8 without lone surrogates.
// parse_json() reads request bodies into it with byte-offset errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace clef {

/// Immutable JSON value; copies share their payload (cheap to copy, safe to share across threads).
class JsonValue {
 public:
  enum class Kind : std::uint8_t { kNull, kBool, kInt, kFloat, kString, kArray, kObject };
  using Array = std::vector<JsonValue>;
  using Member = std::pair<std::string, JsonValue>;
  using Object = std::vector<Member>;

  /// `null`.
  JsonValue() noexcept = default;

  static JsonValue boolean(bool b);
  /// An integer that fits 64 bits.
  static JsonValue integer(std::int64_t v);
  /// An integer of any size from its decimal text `-?(0|[1-9][0-9]*)`; "-0" becomes "0" (Python
  /// int). Throws InvalidArgument on any other text.
  static JsonValue integer_text(std::string_view digits);
  /// A float (Python float). Throws InvalidArgument when `v` is NaN or infinite (never rendered).
  static JsonValue number(double v);
  /// A string; `utf8` must be valid UTF-8 without encoded surrogates (throws InvalidArgument).
  static JsonValue string(std::string utf8);
  static JsonValue array(Array items);
  /// An object from members in order; a repeated key keeps its first position and last value.
  static JsonValue object(Object members);

  Kind kind() const noexcept { return kind_; }
  bool is_null() const noexcept { return kind_ == Kind::kNull; }
  bool is_bool() const noexcept { return kind_ == Kind::kBool; }
  bool is_int() const noexcept { return kind_ == Kind::kInt; }
  bool is_float() const noexcept { return kind_ == Kind::kFloat; }
  bool is_number() const noexcept { return is_int() || is_float(); }
  bool is_string() const noexcept { return kind_ == Kind::kString; }
  bool is_array() const noexcept { return kind_ == Kind::kArray; }
  bool is_object() const noexcept { return kind_ == Kind::kObject; }

  /// The boolean; throws InternalError unless is_bool().
  bool as_bool() const;
  /// The double of a float; throws InternalError unless is_float().
  double as_float() const;
  /// Canonical decimal text of an integer (no "+", no leading zeros, never "-0"); InternalError
  /// unless is_int().
  const std::string& int_text() const;
  /// The integer when it fits int64, else nullopt; InternalError unless is_int().
  std::optional<std::int64_t> as_int64() const;
  /// The UTF-8 string; InternalError unless is_string().
  const std::string& as_string() const;
  /// Items of an array; InternalError unless is_array().
  const Array& items() const;
  /// Members of an object in order (keys unique); InternalError unless is_object().
  const Object& members() const;
  /// Number of items / members (0 for scalars).
  std::size_t size() const noexcept;
  /// Member value by key (nullptr when absent or when this is not an object).
  const JsonValue* find(std::string_view key) const noexcept;

  /// The value for error messages, as compact JSON (members in the order sent) cut after 40 code
  /// points: `"Choice"`, `7`, `2.5`, `null`, `the array ["yes","no"]`, `the object {"a":1}`; a cut
  /// value ends in "..." and says its size (`"Lorem ipsum dolor sit amet, consectetu... (a string of
  /// 812 bytes)`). Never throws for a valid JsonValue; the work is bounded whatever the value's size.
  std::string describe() const;

  /// Short JSON type name: "null", "boolean", "integer", "float", "string", "array", "object".
  static const char* kind_name(Kind kind) noexcept;

 private:
  friend class JsonBuilder;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  double number_ = 0.0;
  std::shared_ptr<const std::string> text_;  // string contents or integer digits
  std::shared_ptr<const Array> array_;
  std::shared_ptr<const Object> object_;
};

/// Limits of parse_json. Defaults follow Python: integers up to 4300 digits (sys.int_info's
/// default_max_str_digits; json.loads raises beyond it). Depth 512 stays below Python's
/// RecursionError (~990 nested containers at the default recursion limit).
struct JsonParseOptions {
  std::size_t max_depth = 512;        ///< nested arrays/objects; the top-level container is 1
  std::size_t max_int_digits = 4300;  ///< decimal digits of one integer literal
};

/// A member of the top-level object of a JSON text, as sent: views into that text.
struct JsonMemberText {
  std::string_view key;    ///< the key's string literal, quotes and escapes as sent (`"state"`)
  std::string_view value;  ///< the value's text from its first to its last character (inner spacing kept)
};

/// Parses a complete JSON text (RFC 8259, UTF-8, optional leading UTF-8 BOM, whitespace
/// " \t\n\r") into a JsonValue, with Python json.loads semantics for what it accepts.
///
/// Differences from json.loads, all rejections: NaN / Infinity / -Infinity literals and floats that
/// overflow double (Python: inf) -> non_finite_number; lone surrogates, escaped or UTF-8-encoded
/// (Python: a str that cannot be encoded) -> lone_surrogate; nesting deeper than max_depth ->
/// nesting_too_deep. Integers beyond max_int_digits -> number_out_of_range (Python raises too).
///
/// Throws RequestError (request_error.h) with code invalid_json (syntax, invalid UTF-8, raw control
/// characters in strings, trailing data), lone_surrogate, non_finite_number, number_out_of_range or
/// nesting_too_deep, the JSON path of the value being read and the 0-based byte offset.
///
/// `top_members`, when given, is cleared and receives every member of a top-level object in the
/// order sent, repeated keys included (views into `text`: valid while `text` is), so that a caller
/// that needs a member's bytes as sent (the balancer's route key, server/route_key.h) reads them
/// from this one parse instead of scanning the text again. Empty for any other top-level value.
JsonValue parse_json(std::string_view text, const JsonParseOptions& options = {},
                     std::vector<JsonMemberText>* top_members = nullptr);

/// How many texts parse_json() has been asked to parse in this process (relaxed atomic counter;
/// `clef serve` reports it in /metrics so that a test can see that each body is parsed once).
std::uint64_t json_texts_parsed() noexcept;

}  // namespace clef

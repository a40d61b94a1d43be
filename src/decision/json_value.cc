// SPDX-License-Identifier: MIT
#include "decision/json_value.h"

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <unordered_map>

#include "core/error.h"
#include "core/json_text.h"
#include "decision/request_error.h"

namespace clef {

namespace {

/// std::from_chars of a double where the standard library has it (__cpp_lib_to_chars: libstdc++
/// 11 and later, the Linux builds). libc++ before LLVM 20, Apple's included, has no floating-point
/// from_chars; there strtod reads the token (already checked to be a JSON number, so the locale's
/// decimal point is never in play: clef never calls setlocale for LC_NUMERIC) and, as from_chars
/// does, only a result of zero or infinity counts as out of range (a subnormal is a value).
[[maybe_unused]] std::from_chars_result parse_double(std::string_view tok, double& d) {
#if defined(__cpp_lib_to_chars)
  return std::from_chars(tok.data(), tok.data() + tok.size(), d);
#else
  const std::string text(tok);
  char* end = nullptr;
  errno = 0;
  d = std::strtod(text.c_str(), &end);
  std::from_chars_result r{tok.data() + (end - text.c_str()), std::errc()};
  if (end == text.c_str()) {
    r.ec = std::errc::invalid_argument;
  } else if (errno == ERANGE && (d == 0.0 || std::isinf(d))) {
    r.ec = std::errc::result_out_of_range;
  }
  return r;
#endif
}

enum class Utf8Status { kOk, kInvalid, kSurrogate };

// Length of the UTF-8 sequence starting at s[i] (1..4) when it is well formed (RFC 3629 table),
// else 0 with `status` set to kInvalid, or kSurrogate for an encoded U+D800..U+DFFF.
std::size_t utf8_sequence(std::string_view s, std::size_t i, Utf8Status& status) {
  auto byte = [&](std::size_t k) -> unsigned {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100u;
  };
  auto cont = [&](std::size_t k, unsigned lo, unsigned hi) {
    const unsigned b = byte(k);
    return b >= lo && b <= hi;
  };
  const unsigned b0 = byte(0);
  status = Utf8Status::kOk;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    if (cont(1, 0x80, 0xBF)) return 2;
  } else if (b0 == 0xE0) {
    if (cont(1, 0xA0, 0xBF) && cont(2, 0x80, 0xBF)) return 3;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    if (cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF)) return 3;
  } else if (b0 == 0xED) {
    if (cont(1, 0x80, 0x9F) && cont(2, 0x80, 0xBF)) return 3;
    if (cont(1, 0xA0, 0xBF) && cont(2, 0x80, 0xBF)) {
      status = Utf8Status::kSurrogate;
      return 0;
    }
  } else if (b0 == 0xF0) {
    if (cont(1, 0x90, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF)) return 4;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    if (cont(1, 0x80, 0xBF) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF)) return 4;
  } else if (b0 == 0xF4) {
    if (cont(1, 0x80, 0x8F) && cont(2, 0x80, 0xBF) && cont(3, 0x80, 0xBF)) return 4;
  }
  status = Utf8Status::kInvalid;
  return 0;
}

Utf8Status check_utf8(std::string_view s) {
  Utf8Status st = Utf8Status::kOk;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i, st);
    if (n == 0) return st;
    i += n;
  }
  return Utf8Status::kOk;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0u | (cp >> 6)));
    out.push_back(static_cast<char>(0x80u | (cp & 0x3Fu)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0u | (cp >> 12)));
    out.push_back(static_cast<char>(0x80u | ((cp >> 6) & 0x3Fu)));
    out.push_back(static_cast<char>(0x80u | (cp & 0x3Fu)));
  } else {
    out.push_back(static_cast<char>(0xF0u | (cp >> 18)));
    out.push_back(static_cast<char>(0x80u | ((cp >> 12) & 0x3Fu)));
    out.push_back(static_cast<char>(0x80u | ((cp >> 6) & 0x3Fu)));
    out.push_back(static_cast<char>(0x80u | (cp & 0x3Fu)));
  }
}

bool is_canonical_int(std::string_view d) {
  std::size_t i = 0;
  if (i < d.size() && d[i] == '-') ++i;
  if (i >= d.size()) return false;
  if (d[i] == '0') return i + 1 == d.size();
  for (; i < d.size(); ++i) {
    if (d[i] < '0' || d[i] > '9') return false;
  }
  return true;
}

}  // namespace

// Builds JsonValues without re-validating what the parser already checked.
class JsonBuilder {
 public:
  static JsonValue int_text(std::string digits) {
    JsonValue v;
    v.kind_ = JsonValue::Kind::kInt;
    if (digits == "-0") digits = "0";
    v.text_ = std::make_shared<const std::string>(std::move(digits));
    return v;
  }
  static JsonValue number(double d) {
    JsonValue v;
    v.kind_ = JsonValue::Kind::kFloat;
    v.number_ = d;
    return v;
  }
  static JsonValue string(std::string s) {
    JsonValue v;
    v.kind_ = JsonValue::Kind::kString;
    v.text_ = std::make_shared<const std::string>(std::move(s));
    return v;
  }
  static JsonValue array(JsonValue::Array items) {
    JsonValue v;
    v.kind_ = JsonValue::Kind::kArray;
    v.array_ = std::make_shared<const JsonValue::Array>(std::move(items));
    return v;
  }
  // `members` must have unique keys.
  static JsonValue object(JsonValue::Object members) {
    JsonValue v;
    v.kind_ = JsonValue::Kind::kObject;
    v.object_ = std::make_shared<const JsonValue::Object>(std::move(members));
    return v;
  }
};

// ---- JsonValue --------------------------------------------------------------------------------

JsonValue JsonValue::boolean(bool b) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::integer(std::int64_t i) { return JsonBuilder::int_text(std::to_string(i)); }

JsonValue JsonValue::integer_text(std::string_view digits) {
  if (!is_canonical_int(digits)) {
    throw InvalidArgument("JsonValue::integer_text: not a JSON integer: \"" + std::string(digits) + "\"");
  }
  return JsonBuilder::int_text(std::string(digits));
}

JsonValue JsonValue::number(double d) {
  if (!std::isfinite(d)) throw InvalidArgument("JsonValue::number: NaN and infinities are not JSON values");
  return JsonBuilder::number(d);
}

JsonValue JsonValue::string(std::string utf8) {
  const Utf8Status st = check_utf8(utf8);
  if (st == Utf8Status::kInvalid) throw InvalidArgument("JsonValue::string: invalid UTF-8");
  if (st == Utf8Status::kSurrogate) throw InvalidArgument("JsonValue::string: encoded UTF-16 surrogate");
  return JsonBuilder::string(std::move(utf8));
}

JsonValue JsonValue::array(Array items) { return JsonBuilder::array(std::move(items)); }

JsonValue JsonValue::object(Object members) {
  for (const auto& m : members) {
    if (check_utf8(m.first) != Utf8Status::kOk) {
      throw InvalidArgument("JsonValue::object: key is not valid UTF-8 without surrogates");
    }
  }
  Object unique;
  unique.reserve(members.size());
  std::unordered_map<std::string, std::size_t> index;
  for (auto& m : members) {
    auto [it, inserted] = index.emplace(m.first, unique.size());
    if (inserted) {
      unique.push_back(std::move(m));
    } else {
      unique[it->second].second = std::move(m.second);
    }
  }
  return JsonBuilder::object(std::move(unique));
}

bool JsonValue::as_bool() const {
  CLEF_ASSERT(is_bool());
  return bool_;
}

double JsonValue::as_float() const {
  CLEF_ASSERT(is_float());
  return number_;
}

const std::string& JsonValue::int_text() const {
  CLEF_ASSERT(is_int());
  return *text_;
}

std::optional<std::int64_t> JsonValue::as_int64() const {
  CLEF_ASSERT(is_int());
  std::int64_t v = 0;
  const std::string& t = *text_;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return std::nullopt;
  return v;
}

const std::string& JsonValue::as_string() const {
  CLEF_ASSERT(is_string());
  return *text_;
}

const JsonValue::Array& JsonValue::items() const {
  CLEF_ASSERT(is_array());
  return *array_;
}

const JsonValue::Object& JsonValue::members() const {
  CLEF_ASSERT(is_object());
  return *object_;
}

std::size_t JsonValue::size() const noexcept {
  if (is_array()) return array_->size();
  if (is_object()) return object_->size();
  return 0;
}

const JsonValue* JsonValue::find(std::string_view key) const noexcept {
  if (!is_object()) return nullptr;
  for (const auto& m : *object_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

const char* JsonValue::kind_name(Kind kind) noexcept {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "array";
    case Kind::kObject: return "object";
  }
  return "?";
}

namespace {

/// Code points of a preview (JsonValue::describe()); longer values are cut there.
constexpr std::size_t kPreviewCodePoints = 40;
/// Bytes of compact JSON written before the cut: 4 bytes per code point, and a margin.
constexpr std::size_t kPreviewBytes = 4 * kPreviewCodePoints + 16;

/// The first `n` code points of the valid UTF-8 text `s` (all of it when shorter).
std::string_view utf8_prefix(std::string_view s, std::size_t n) {
  std::size_t i = 0;
  for (std::size_t cp = 0; i < s.size() && cp < n; ++cp) {
    ++i;
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0u) == 0x80u) ++i;
  }
  return s.substr(0, i);
}

/// Appends compact JSON of `v` (members in the order sent) to `out`, stopping once `out` holds
/// more than kPreviewBytes: the caller cuts the text there, so only the start has to be right.
/// Each level writes at least one byte before descending, so the recursion is bounded too.
void append_preview(std::string& out, const JsonValue& v) {
  if (out.size() > kPreviewBytes) return;
  switch (v.kind()) {
    case JsonValue::Kind::kString:
      // One code point more than is shown, so that a cut string is always seen as cut.
      append_json_string(out, utf8_prefix(v.as_string(), kPreviewCodePoints + 1));
      return;
    case JsonValue::Kind::kArray:
      out.push_back('[');
      for (std::size_t i = 0; i < v.items().size() && out.size() <= kPreviewBytes; ++i) {
        if (i > 0) out.push_back(',');
        append_preview(out, v.items()[i]);
      }
      out.push_back(']');
      return;
    case JsonValue::Kind::kObject:
      out.push_back('{');
      for (std::size_t i = 0; i < v.members().size() && out.size() <= kPreviewBytes; ++i) {
        if (i > 0) out.push_back(',');
        append_json_string(out, utf8_prefix(v.members()[i].first, kPreviewCodePoints + 1));
        out.push_back(':');
        append_preview(out, v.members()[i].second);
      }
      out.push_back('}');
      return;
    case JsonValue::Kind::kInt: out.append(utf8_prefix(v.int_text(), kPreviewBytes)); return;
    case JsonValue::Kind::kFloat: out += python_float_repr(v.as_float()); return;  // as dump_json writes it
    case JsonValue::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case JsonValue::Kind::kNull: out += "null"; return;
  }
}

}  // namespace

std::string JsonValue::describe() const {
  // The value itself, shortened: a request error goes back to the client that sent the value
  // (the server logs no request content), and a message that names the bad value is what lets
  // that client see its mistake ("Choice" for "choice").
  std::string text;
  append_preview(text, *this);
  const std::string_view shown = utf8_prefix(text, kPreviewCodePoints);
  const bool cut = shown.size() < text.size();
  std::string out;
  if (kind_ == Kind::kArray) out = "the array ";
  if (kind_ == Kind::kObject) out = "the object ";
  out += shown;
  if (!cut) return out;
  out += "...";
  switch (kind_) {
    case Kind::kString: return out + " (a string of " + std::to_string(text_->size()) + " bytes)";
    case Kind::kArray: return out + " (" + std::to_string(size()) + (size() == 1 ? " item)" : " items)");
    case Kind::kObject: return out + " (" + std::to_string(size()) + (size() == 1 ? " member)" : " members)");
    case Kind::kInt: return out + " (an integer of " + std::to_string(text_->size()) + " characters)";
    default: return out;
  }
}

// ---- parser -----------------------------------------------------------------------------------

namespace {

class Parser {
 public:
  Parser(std::string_view text, const JsonParseOptions& opt, std::vector<JsonMemberText>* top_members)
      : s_(text), opt_(opt), top_members_(top_members) {}

  JsonValue run() {
    if (s_.size() >= 3 && s_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;
    for (;;) {
      JsonValue v;
      skip_ws();
      if (stack_.size() == 1) value_start_ = pos_;  // a top-level member's value starts here
      const int c = peek();
      if (c == '{' || c == '[') {
        if (stack_.size() + 1 > opt_.max_depth) {
          fail(RequestErrorCode::kNestingTooDeep,
               "arrays/objects nested deeper than " + std::to_string(opt_.max_depth) + " levels");
        }
        ++pos_;
        skip_ws();
        if (c == '{') {
          if (peek() == '}') {
            ++pos_;
            v = JsonBuilder::object({});
          } else {
            stack_.push_back(Frame{true, {}, {}, {}, {}, false});
            read_key();
            continue;
          }
        } else {
          if (peek() == ']') {
            ++pos_;
            v = JsonBuilder::array({});
          } else {
            stack_.push_back(Frame{false, {}, {}, {}, {}, true});
            continue;
          }
        }
      } else {
        v = scalar();
      }
      // `v` is complete: attach it, closing every container that ends here.
      for (;;) {
        if (stack_.empty()) {
          skip_ws();
          if (pos_ != s_.size()) syntax("unexpected data after the JSON value");
          return v;
        }
        Frame& f = stack_.back();
        f.in_value = false;
        if (f.is_object && top_members_ != nullptr && stack_.size() == 1) {
          top_members_->push_back(JsonMemberText{key_text_, s_.substr(value_start_, pos_ - value_start_)});
        }
        if (f.is_object) {
          auto [it, inserted] = f.index.emplace(f.key, f.members.size());
          if (inserted) {
            f.members.emplace_back(std::move(f.key), std::move(v));
          } else {
            f.members[it->second].second = std::move(v);  // Python dict: last value, first position
          }
          f.key.clear();
        } else {
          f.items.push_back(std::move(v));
        }
        skip_ws();
        const int d = peek();
        if (d == ',') {
          ++pos_;
          if (f.is_object) {
            skip_ws();
            read_key();
          } else {
            f.in_value = true;
          }
          break;
        }
        if (f.is_object && d == '}') {
          ++pos_;
          v = JsonBuilder::object(std::move(f.members));
        } else if (!f.is_object && d == ']') {
          ++pos_;
          v = JsonBuilder::array(std::move(f.items));
        } else {
          syntax(f.is_object ? "expected ',' or '}' after an object member"
                             : "expected ',' or ']' after an array item");
        }
        stack_.pop_back();
      }
    }
  }

 private:
  struct Frame {
    bool is_object;
    JsonValue::Array items;
    JsonValue::Object members;
    std::unordered_map<std::string, std::size_t> index;
    std::string key;        // key of the member being read (objects)
    bool in_value = false;  // a member value / an item is being read (for error paths)
  };

  int peek() const { return pos_ < s_.size() ? static_cast<unsigned char>(s_[pos_]) : -1; }

  void skip_ws() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  JsonPath path() const {
    JsonPath p;
    for (const Frame& f : stack_) {
      if (!f.in_value) break;
      p = f.is_object ? p.key(f.key) : p.index(f.items.size());
    }
    return p;
  }

  [[noreturn]] void fail(RequestErrorCode code, const std::string& message) const { fail_at(code, message, pos_); }

  [[noreturn]] void fail_at(RequestErrorCode code, const std::string& message, std::size_t at) const {
    throw RequestError(code, path(), message, at);
  }

  [[noreturn]] void syntax(const std::string& what) const {
    if (pos_ >= s_.size()) fail(RequestErrorCode::kInvalidJson, "invalid JSON: " + what + " (end of input)");
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    std::string shown;
    if (c >= 0x20 && c < 0x7F) {
      shown = std::string("'") + static_cast<char>(c) + "'";
    } else {
      static const char* hex = "0123456789abcdef";
      shown = std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
    }
    fail(RequestErrorCode::kInvalidJson, "invalid JSON: " + what + ", found " + shown);
  }

  void read_key() {
    if (peek() != '"') syntax("expected a string key");
    // The path of an error inside the key or before its value names the object itself.
    const std::size_t key_start = pos_;
    std::string key = read_string();
    if (stack_.size() == 1) key_text_ = s_.substr(key_start, pos_ - key_start);
    skip_ws();
    if (peek() != ':') syntax("expected ':' after an object key");
    ++pos_;
    Frame& f = stack_.back();
    f.key = std::move(key);
    f.in_value = true;
  }

  bool match(std::string_view lit) const { return s_.substr(pos_, lit.size()) == lit; }

  JsonValue scalar() {
    const int c = peek();
    if (c == '"') return JsonBuilder::string(read_string());
    if (c == '-' || (c >= '0' && c <= '9')) {
      if (match("-Infinity")) non_finite("-Infinity");
      return read_number();
    }
    if (match("true")) {
      pos_ += 4;
      return JsonValue::boolean(true);
    }
    if (match("false")) {
      pos_ += 5;
      return JsonValue::boolean(false);
    }
    if (match("null")) {
      pos_ += 4;
      return JsonValue();
    }
    if (match("NaN")) non_finite("NaN");
    if (match("Infinity")) non_finite("Infinity");
    syntax("expected a JSON value");
  }

  [[noreturn]] void non_finite(const char* lit) const {
    fail(RequestErrorCode::kNonFiniteNumber,
         std::string(lit) + " is not a JSON number (NaN and infinities are refused)");
  }

  JsonValue read_number() {
    const std::size_t start = pos_;
    auto digits = [&] {
      const std::size_t b = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - b;
    };
    if (peek() == '-') ++pos_;
    const std::size_t int_start = pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      syntax("expected a digit");
    }
    const std::size_t int_digits = pos_ - int_start;
    bool is_float = false;
    if (peek() == '.') {
      ++pos_;
      if (digits() == 0) syntax("expected a digit after the decimal point");
      is_float = true;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) syntax("expected a digit in the exponent");
      is_float = true;
    }
    const std::string_view tok = s_.substr(start, pos_ - start);
    if (!is_float) {
      if (int_digits > opt_.max_int_digits) {
        fail_at(RequestErrorCode::kNumberOutOfRange,
                "integer with " + std::to_string(int_digits) + " digits exceeds the limit of " +
                    std::to_string(opt_.max_int_digits) + " digits",
                start);
      }
      return JsonBuilder::int_text(std::string(tok));
    }
    double d = 0.0;
    const auto r = parse_double(tok, d);
    if (r.ec == std::errc::result_out_of_range) {
      if (overflows(tok)) {
        std::string shown(tok.substr(0, 40));
        if (tok.size() > 40) shown += "...";
        fail_at(RequestErrorCode::kNonFiniteNumber, "number " + shown + " overflows a double (Infinity)", start);
      }
      d = tok[0] == '-' ? -0.0 : 0.0;  // underflow: Python float() gives a signed zero
    } else if (r.ec != std::errc() || r.ptr != tok.data() + tok.size()) {
      fail_at(RequestErrorCode::kInvalidJson, "invalid JSON: malformed number", start);
    }
    return JsonBuilder::number(d);
  }

  // For a float literal out of double's range: true when its magnitude is huge (decimal exponent of
  // the leading significant digit > 0), false when tiny.
  static bool overflows(std::string_view tok) {
    std::size_t i = tok[0] == '-' ? 1 : 0;
    long long lead = 0;  // position of the first significant digit relative to the decimal point
    bool found = false;
    long long seen_int = 0;
    for (; i < tok.size() && tok[i] >= '0' && tok[i] <= '9'; ++i) {
      if (!found && tok[i] != '0') found = true;
      if (found) ++seen_int;
    }
    if (found) {
      lead = seen_int;
    } else if (i < tok.size() && tok[i] == '.') {
      ++i;
      long long zeros = 0;
      for (; i < tok.size() && tok[i] == '0'; ++i) ++zeros;
      lead = -zeros;
    }
    while (i < tok.size() && tok[i] != 'e' && tok[i] != 'E') ++i;
    long long exp = 0;
    if (i < tok.size()) {
      ++i;
      bool neg = false;
      if (tok[i] == '+' || tok[i] == '-') neg = tok[i++] == '-';
      for (; i < tok.size(); ++i) {
        if (exp < 1000000000LL) exp = exp * 10 + (tok[i] - '0');
      }
      if (neg) exp = -exp;
    }
    return lead + exp > 0;
  }

  static int hex_value(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Reads 4 hex digits after "\u" at pos_ (pos_ points at the 'u').
  std::uint32_t read_u4() {
    std::uint32_t v = 0;
    for (std::size_t k = 1; k <= 4; ++k) {
      const int h = pos_ + k < s_.size() ? hex_value(static_cast<unsigned char>(s_[pos_ + k])) : -1;
      if (h < 0) {
        pos_ += k;
        syntax("expected 4 hex digits after \\u");
      }
      v = v * 16 + static_cast<std::uint32_t>(h);
    }
    pos_ += 5;
    return v;
  }

  std::string read_string() {
    const std::size_t open = pos_;
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (pos_ >= s_.size()) {
        fail_at(RequestErrorCode::kInvalidJson,
                "invalid JSON: unterminated string starting at byte " + std::to_string(open), s_.size());
      }
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) {
        fail(RequestErrorCode::kInvalidJson,
             "invalid JSON: raw control character U+00" + std::string(1, "0123456789ABCDEF"[c >> 4]) +
                 std::string(1, "0123456789ABCDEF"[c & 15]) + " in a string (write it as an escape)");
      }
      if (c == '\\') {
        const std::size_t esc = pos_;
        ++pos_;
        const int e = peek();
        switch (e) {
          case '"':
            out.push_back('"');
            ++pos_;
            break;
          case '\\':
            out.push_back('\\');
            ++pos_;
            break;
          case '/':
            out.push_back('/');
            ++pos_;
            break;
          case 'b':
            out.push_back('\b');
            ++pos_;
            break;
          case 'f':
            out.push_back('\f');
            ++pos_;
            break;
          case 'n':
            out.push_back('\n');
            ++pos_;
            break;
          case 'r':
            out.push_back('\r');
            ++pos_;
            break;
          case 't':
            out.push_back('\t');
            ++pos_;
            break;
          case 'u': {
            std::uint32_t cp = read_u4();
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
              fail_at(RequestErrorCode::kLoneSurrogate,
                      "lone UTF-16 surrogate \\u" + hex4(cp) + " in a string (no high surrogate before it)", esc);
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              // A text that ends inside the pair is a syntax error (as in Python), not a lone
              // surrogate: only a complete following character decides.
              if (pos_ >= s_.size() || (s_[pos_] == '\\' && pos_ + 1 >= s_.size())) {
                fail_at(RequestErrorCode::kInvalidJson,
                        "invalid JSON: unterminated string starting at byte " + std::to_string(open), s_.size());
              }
              std::uint32_t lo = 0;
              if (match("\\u")) {
                ++pos_;
                lo = read_u4();  // syntax error when the 4 hex digits are missing
                if (lo < 0xDC00 || lo > 0xDFFF) lo = 0;
              }
              if (lo == 0) {
                fail_at(RequestErrorCode::kLoneSurrogate,
                        "lone UTF-16 surrogate \\u" + hex4(cp) + " in a string (no low surrogate after it)", esc);
              }
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            append_utf8(out, cp);
            break;
          }
          default: syntax("invalid escape in a string");
        }
        continue;
      }
      if (c < 0x80) {
        // Fast path over plain ASCII.
        std::size_t end = pos_ + 1;
        while (end < s_.size()) {
          const unsigned char d = static_cast<unsigned char>(s_[end]);
          if (d < 0x20 || d >= 0x80 || d == '"' || d == '\\') break;
          ++end;
        }
        out.append(s_.data() + pos_, end - pos_);
        pos_ = end;
        continue;
      }
      Utf8Status st = Utf8Status::kOk;
      const std::size_t n = utf8_sequence(s_, pos_, st);
      if (n == 0) {
        if (st == Utf8Status::kSurrogate) {
          fail(RequestErrorCode::kLoneSurrogate, "UTF-8-encoded UTF-16 surrogate in a string");
        }
        fail(RequestErrorCode::kInvalidJson, "invalid JSON: invalid UTF-8 in a string");
      }
      out.append(s_.data() + pos_, n);
      pos_ += n;
    }
  }

  static std::string hex4(std::uint32_t v) {
    static const char* hex = "0123456789abcdef";
    std::string s(4, '0');
    for (int k = 3; k >= 0; --k) {
      s[static_cast<std::size_t>(k)] = hex[v & 15u];
      v >>= 4;
    }
    return s;
  }

  std::string_view s_;
  const JsonParseOptions& opt_;
  std::vector<JsonMemberText>* top_members_;  // null: not recorded
  std::size_t pos_ = 0;
  std::vector<Frame> stack_;
  std::string_view key_text_;    // the literal of the top-level key being read
  std::size_t value_start_ = 0;  // where the top-level member's value being read starts
};

std::atomic<std::uint64_t> g_texts_parsed{0};

}  // namespace

JsonValue parse_json(std::string_view text, const JsonParseOptions& options, std::vector<JsonMemberText>* top_members) {
  g_texts_parsed.fetch_add(1, std::memory_order_relaxed);
  if (top_members != nullptr) top_members->clear();
  return Parser(text, options, top_members).run();
}

std::uint64_t json_texts_parsed() noexcept { return g_texts_parsed.load(std::memory_order_relaxed); }

}  // namespace clef

#include "server/route_key.h"

#include <cstddef>
#include <span>

#include "core/sha256.h"

namespace clef::server {
namespace {

constexpr std::size_t kNone = std::string_view::npos;

/// Index just past the JSON string that starts at s[i] == '"', or kNone when unterminated.
std::size_t skip_string(std::string_view s, std::size_t i) {
  std::size_t j = i + 1;
  for (;;) {
    const std::size_t k = s.find_first_of("\"\\", j);
    if (k == kNone) return kNone;
    if (s[k] == '"') return k + 1;
    j = k + 2;  // a backslash and the character it escapes
  }
}

/// Index of the first non-blank character at or after i (s.size() when none).
std::size_t skip_blank(std::string_view s, std::size_t i) {
  const std::size_t k = s.find_first_not_of(" \t\r\n", std::min(i, s.size()));
  return k == kNone ? s.size() : k;
}

/// Index just past the JSON value that starts at s[i], or kNone when it is malformed or cut short.
std::size_t skip_value(std::string_view s, std::size_t i) {
  if (i >= s.size()) return kNone;
  const char c = s[i];
  if (c == '"') return skip_string(s, i);
  if (c == '{' || c == '[') {
    int depth = 0;
    std::size_t j = i;
    for (;;) {
      const std::size_t k = s.find_first_of("\"{}[]", j);
      if (k == kNone) return kNone;
      if (s[k] == '"') {
        j = skip_string(s, k);
        if (j == kNone) return kNone;
        continue;
      }
      depth += s[k] == '{' || s[k] == '[' ? 1 : -1;
      j = k + 1;
      if (depth == 0) return j;
    }
  }
  // A number, true, false or null: up to the next delimiter.
  const std::size_t k = s.find_first_of(",}] \t\r\n", i);
  return k == kNone ? kNone : k;
}

char at(std::string_view s, std::size_t i) { return i < s.size() ? s[i] : '\0'; }

}  // namespace

std::optional<std::string> route_text(std::string_view body) {
  std::size_t i = skip_blank(body, 0);
  if (at(body, i) != '{') return std::nullopt;
  i = skip_blank(body, i + 1);
  if (at(body, i) == '}') return std::nullopt;
  std::optional<std::string_view> state;
  std::string_view images;
  for (;;) {
    if (at(body, i) != '"') return std::nullopt;
    const std::size_t key_end = skip_string(body, i);
    if (key_end == kNone) return std::nullopt;
    const std::string_view key = body.substr(i + 1, key_end - i - 2);
    i = skip_blank(body, key_end);
    if (at(body, i) != ':') return std::nullopt;
    i = skip_blank(body, i + 1);
    const std::size_t value_end = skip_value(body, i);
    if (value_end == kNone) return std::nullopt;
    if (key == "state") {
      state = body.substr(i, value_end - i);
    } else if (key == "images") {
      images = body.substr(i, value_end - i);
    }
    i = skip_blank(body, value_end);
    const char c = at(body, i);
    if (c == '}') break;
    if (c != ',') return std::nullopt;
    i = skip_blank(body, i + 1);
  }
  if (!state) return std::nullopt;
  return "state=" + std::string(*state) + "\nimages=" + std::string(images);
}

std::string route_key(std::string_view body) {
  const std::optional<std::string> text = route_text(body);
  if (!text) return {};
  return sha256_hex(std::as_bytes(std::span<const char>(text->data(), text->size())));
}

}  // namespace clef::server

// SPDX-License-Identifier: MIT
#include "server/route_key.h"

#include <cstddef>

#include "core/sha256.h"

namespace clef::server {

std::optional<std::string> route_text(std::string_view body, std::span<const JsonMemberText> members) {
  if (body.substr(0, 3) == "\xEF\xBB\xBF") return std::nullopt;
  std::optional<std::string_view> state;
  std::string_view images;
  for (const JsonMemberText& m : members) {
    if (m.key == "\"state\"") state = m.value;
    if (m.key == "\"images\"") images = m.value;
  }
  if (!state) return std::nullopt;
  return "state=" + std::string(*state) + "\nimages=" + std::string(images);
}

std::string route_key(std::string_view body, std::span<const JsonMemberText> members) {
  const std::optional<std::string> text = route_text(body, members);
  if (!text) return {};
  return sha256_hex(std::as_bytes(std::span<const char>(text->data(), text->size())));
}

}  // namespace clef::server

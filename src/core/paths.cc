// SPDX-License-Identifier: MIT
#include "core/paths.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace clef {

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

}  // namespace clef

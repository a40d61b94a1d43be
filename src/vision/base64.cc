// SPDX-License-Identifier: MIT
#include "vision/base64.h"

#include <openssl/evp.h>

#include <algorithm>

namespace clef {
namespace {

// 0..63 for a symbol of the standard alphabet, -1 otherwise.
int symbol_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::optional<Base64Problem> check_base64_strict(std::string_view text) {
  const std::size_t n = text.size();
  // Count the trailing padding first, so that a '=' anywhere else is named as misplaced.
  std::size_t pad = 0;
  while (pad < n && pad < 2 && text[n - 1 - pad] == '=') ++pad;
  for (std::size_t i = 0; i < n - pad; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '=') return Base64Problem{i, "misplaced '=' padding"};
    if (symbol_value(c) < 0) {
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') return Base64Problem{i, "whitespace is not allowed"};
      if (c == '-' || c == '_') return Base64Problem{i, "URL-safe base64 character (expected the standard alphabet)"};
      return Base64Problem{i, "invalid character"};
    }
  }
  if (n % 4 != 0) {
    return Base64Problem{n, "length is not a multiple of 4 (missing '=' padding?)"};
  }
  if (pad > 0) {
    // The last symbol before the padding carries 4 (one '=') or 2 (two '=') unused low bits.
    const std::size_t last = n - pad - 1;
    const int v = symbol_value(static_cast<unsigned char>(text[last]));
    const int unused_mask = pad == 1 ? 0x3 : 0xF;
    if ((v & unused_mask) != 0) return Base64Problem{last, "non-canonical final symbol (unused bits set)"};
  }
  return std::nullopt;
}

std::optional<std::vector<std::uint8_t>> decode_base64_strict(std::string_view text, Base64Problem* problem) {
  if (auto p = check_base64_strict(text)) {
    if (problem != nullptr) *problem = *p;
    return std::nullopt;
  }
  std::vector<std::uint8_t> out;
  if (text.empty()) return out;
  std::size_t pad = 0;
  if (text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
  out.resize(text.size() / 4 * 3);
  // EVP_DecodeBlock takes an int length: decode in 4-aligned pieces of at most 1 GiB.
  constexpr std::size_t kPiece = std::size_t{1} << 30;
  std::size_t done_in = 0, done_out = 0;
  while (done_in < text.size()) {
    const std::size_t len = std::min(kPiece, text.size() - done_in);
    const int got =
        EVP_DecodeBlock(out.data() + done_out, reinterpret_cast<const unsigned char*>(text.data() + done_in),
                        static_cast<int>(len));
    if (got < 0 || static_cast<std::size_t>(got) != len / 4 * 3) {
      if (problem != nullptr) *problem = Base64Problem{done_in, "base64 decoder refused the text"};
      return std::nullopt;
    }
    done_in += len;
    done_out += static_cast<std::size_t>(got);
  }
  out.resize(out.size() - pad);  // EVP_DecodeBlock writes zero bytes for the padding
  return out;
}

}  // namespace clef

// SPDX-License-Identifier: MIT
// Strict RFC 4648 base64 (standard alphabet, '=' padding), as used by image data URLs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace clef {

/// Why a base64 text was refused: `offset` is the 0-based index of the offending character in the
/// text given to decode_base64_strict (or the text length for a length problem), `reason` a short
/// phrase ("invalid character", "misplaced '=' padding", ...).
struct Base64Problem {
  std::size_t offset = 0;
  std::string reason;
};

/// Checks `text` against strict base64: only A-Z a-z 0-9 + /, length a multiple of 4, at most two
/// '=' and only at the very end, no whitespace, and the unused low bits of the last symbol before
/// the padding equal to zero (canonical encoding). Returns the first problem, or nullopt.
std::optional<Base64Problem> check_base64_strict(std::string_view text);

/// Decodes strict base64 (see check_base64_strict) into bytes with OpenSSL's EVP_DecodeBlock.
/// Returns nullopt and fills `problem` when the text is not strict base64. An empty text decodes
/// to no bytes.
std::optional<std::vector<std::uint8_t>> decode_base64_strict(std::string_view text, Base64Problem* problem);

}  // namespace clef

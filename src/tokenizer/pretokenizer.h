// SPDX-License-Identifier: MIT
// The Qwen split pre-tokenizer: a hand-written scanner equivalent to the Oniguruma regexes of
// Qwen2/Qwen2.5/Qwen3 and Qwen3.5/Qwen3.6 (docs/TOKENIZER.md §1.2), driven by the generated
// Unicode 16.0 tables. Leftmost-first alternation, behaviour "Isolated": every character of the
// input lands in exactly one piece.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace clef {

/// Split regex variants the scanner implements.
enum class SplitPattern {
  kQwen2,   ///< Qwen2 / Qwen2.5 / Qwen3 / Qwen3-Next (no \p{M})
  kQwen35,  ///< Qwen3.5 / Qwen3.6 ([\p{L}\p{M}]+ word run, marks excluded from punctuation)
};

/// The exact pattern strings, byte for byte as in tokenizer.json (docs/TOKENIZER.md §1.2).
extern const char* const kSplitRegexQwen2;
extern const char* const kSplitRegexQwen35;

/// Recognizes a Split pattern string. nullopt for any pattern the scanner does not implement
/// (callers must refuse such a tokenizer, never fall back).
std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) noexcept;

/// Name of a variant ("qwen2", "qwen3.5").
const char* split_pattern_name(SplitPattern p) noexcept;

/// Parses a variant name as the command lines spell it: "qwen2" or "qwen35" (also "qwen3.5").
/// nullopt for anything else.
std::optional<SplitPattern> split_pattern_from_name(std::string_view name) noexcept;

/// Splits VALID UTF-8 `text` into pieces. Appends each piece's end byte offset to `ends`
/// (pieces are [previous end, end), the first starts at 0; ends are strictly increasing and the
/// last equals text.size(); nothing is appended for empty text). No allocation beyond `ends`.
void split_pieces(std::string_view text, SplitPattern pattern, std::vector<std::uint32_t>& ends);

/// split_pieces in steps: splits VALID UTF-8 `text` from byte `start` (0 or an end an earlier call
/// appended: the scanner's only state is its position, so the pieces are exactly split_pieces')
/// and stops after `max_pieces` pieces. Appends their ends (offsets into `text`) and returns the
/// offset where it stopped (text.size() once the text is done).
std::size_t split_pieces_from(std::string_view text, SplitPattern pattern, std::size_t start, std::size_t max_pieces,
                              std::vector<std::uint32_t>& ends);

}  // namespace clef

// SPDX-License-Identifier: MIT
#include "tokenizer/pretokenizer.h"

#include "tokenizer/unicode.h"

namespace clef {

const char* const kSplitRegexQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kSplitRegexQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) noexcept {
  if (regex == kSplitRegexQwen35) return SplitPattern::kQwen35;
  if (regex == kSplitRegexQwen2) return SplitPattern::kQwen2;
  return std::nullopt;
}

const char* split_pattern_name(SplitPattern p) noexcept { return p == SplitPattern::kQwen35 ? "qwen3.5" : "qwen2"; }

std::optional<SplitPattern> split_pattern_from_name(std::string_view name) noexcept {
  if (name == "qwen2") return SplitPattern::kQwen2;
  if (name == "qwen35" || name == "qwen3.5") return SplitPattern::kQwen35;
  return std::nullopt;
}

namespace {

// Property bits of ASCII, looked up without the two-stage table.
struct AsciiProps {
  std::uint8_t v[128];
  AsciiProps() : v{} {
    for (std::uint32_t c = 0; c < 128; ++c) v[c] = unicode::props(c);
  }
};
const AsciiProps kAscii;

struct Cursor {
  const unsigned char* p;
  std::size_t n;
  // Decodes the code point at i: returns its props, sets cp and len. i < n.
  std::uint8_t at(std::size_t i, std::uint32_t& cp, std::size_t& len) const noexcept {
    const unsigned char b = p[i];
    if (b < 0x80) {
      cp = b;
      len = 1;
      return kAscii.v[b];
    }
    cp = unicode::decode_utf8(p + i, len);
    return unicode::props(cp);
  }
};

inline bool is_crlf(std::uint32_t cp) noexcept { return cp == '\r' || cp == '\n'; }
inline unsigned char lower_ascii(unsigned char c) noexcept {
  return (c >= 'A' && c <= 'Z') ? static_cast<unsigned char>(c + 32) : c;
}

// Length of a contraction starting at the apostrophe at i ((?i:'s|'t|'re|'ve|'m|'ll|'d)), or 0.
// Case folding: ASCII case plus U+017F LATIN SMALL LETTER LONG S == s (docs/TOKENIZER.md §1.2).
std::size_t contraction(const Cursor& c, std::size_t i) noexcept {
  if (i + 1 >= c.n) return 0;
  const unsigned char a = lower_ascii(c.p[i + 1]);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (c.p[i + 1] == 0xC5 && i + 2 < c.n && c.p[i + 2] == 0xBF) return 3;  // U+017F
  if (i + 2 >= c.n) return 0;
  const unsigned char b = lower_ascii(c.p[i + 2]);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

template <bool kMarks>
std::size_t split_impl(std::string_view text, std::size_t start, std::size_t max_pieces,
                       std::vector<std::uint32_t>& ends) {
  using namespace unicode;
  constexpr std::uint8_t kWord = kMarks ? (kLetter | kMark) : kLetter;  // word run class
  constexpr std::uint8_t kNotPunct = kMarks ? (kSpace | kLetter | kMark | kNumber) : (kSpace | kLetter | kNumber);
  const Cursor c{reinterpret_cast<const unsigned char*>(text.data()), text.size()};
  const std::size_t n = text.size();
  std::size_t i = start, emitted = 0;
  auto emit = [&](std::size_t end) {
    ends.push_back(static_cast<std::uint32_t>(end));
    i = end;
    ++emitted;
  };
  // end of the maximal run of characters whose props satisfy pred, starting at j
  auto run = [&](std::size_t j, auto pred) {
    while (j < n) {
      std::uint32_t cp = 0;
      std::size_t len = 0;
      const std::uint8_t pr = c.at(j, cp, len);  // sets cp: evaluate before calling pred
      if (!pred(pr, cp)) break;
      j += len;
    }
    return j;
  };
  auto is_word = [](std::uint8_t pr, std::uint32_t) { return (pr & kWord) != 0; };
  auto is_punct = [](std::uint8_t pr, std::uint32_t) { return (pr & kNotPunct) == 0; };
  auto is_crlf_p = [](std::uint8_t, std::uint32_t cp) { return is_crlf(cp); };
  while (i < n && emitted < max_pieces) {
    std::uint32_t cp = 0;
    std::size_t len = 0;
    const std::uint8_t pr = c.at(i, cp, len);
    // 1. contractions
    if (cp == '\'') {
      if (const std::size_t k = contraction(c, i)) {
        emit(i + k);
        continue;
      }
    }
    const std::size_t next = i + len;
    std::uint32_t ncp = 0;
    std::size_t nlen = 0;
    const std::uint8_t npr = next < n ? c.at(next, ncp, nlen) : 0;
    // 2. [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+  (Qwen2: [^\r\n\p{L}\p{N}]?\p{L}+)
    if (!is_crlf(cp) && (pr & (kLetter | kNumber)) == 0 && next < n && (npr & kWord)) {
      emit(run(next + nlen, is_word));
      continue;
    }
    if (pr & kWord) {
      emit(run(next, is_word));
      continue;
    }
    // 3. \p{N}
    if (pr & kNumber) {
      emit(next);
      continue;
    }
    // 4.  ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*
    if (cp == ' ' && next < n && (npr & kNotPunct) == 0) {
      emit(run(run(next + nlen, is_punct), is_crlf_p));
      continue;
    }
    if ((pr & kNotPunct) == 0) {
      emit(run(run(next, is_punct), is_crlf_p));
      continue;
    }
    // Here cp is whitespace. Scan the whitespace run, noting the end of its last CR/LF.
    std::size_t j = i, last_nl_end = 0, last_start = i, count = 0;
    while (j < n) {
      std::uint32_t wcp = 0;
      std::size_t wlen = 0;
      if ((c.at(j, wcp, wlen) & kSpace) == 0) break;
      last_start = j;
      j += wlen;
      ++count;
      if (is_crlf(wcp)) last_nl_end = j;
    }
    if (count == 0) {  // unreachable: every character is word, number, punctuation or space
      emit(next);
    } else if (last_nl_end != 0) {  // 5. \s*[\r\n]+
      emit(last_nl_end);
    } else if (j == n || count == 1) {  // 6. \s+(?!\S) at end of text; 7. \s+ single char
      emit(j);
    } else {  // 6. \s+(?!\S): leave the last whitespace character for the next piece
      emit(last_start);
    }
  }
  return i;
}

}  // namespace

void split_pieces(std::string_view text, SplitPattern pattern, std::vector<std::uint32_t>& ends) {
  split_pieces_from(text, pattern, 0, SIZE_MAX, ends);
}

std::size_t split_pieces_from(std::string_view text, SplitPattern pattern, std::size_t start, std::size_t max_pieces,
                              std::vector<std::uint32_t>& ends) {
  return pattern == SplitPattern::kQwen35 ? split_impl<true>(text, start, max_pieces, ends)
                                          : split_impl<false>(text, start, max_pieces, ends);
}

}  // namespace clef

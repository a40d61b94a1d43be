// SPDX-License-Identifier: MIT
#include "tokenizer/unicode.h"

#include <algorithm>
#include <cstring>

namespace clef::unicode {
namespace {

#include "tokenizer/unicode_data.inc"

constexpr std::uint32_t kMaxCp = 0x110000;
constexpr std::uint32_t kBlockMask = (1u << kBlockShift) - 1;

// Hangul syllable constants (Unicode §3.12).
constexpr std::uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr std::uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr std::uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// Length of the valid UTF-8 sequence at p (n bytes available), or 0 when invalid; on 0,
// `bad` is the length of the maximal subpart to replace (>= 1), as Unicode §3.9 / Rust define it.
std::size_t utf8_sequence(const unsigned char* p, std::size_t n, std::size_t& bad) noexcept {
  const unsigned char b = p[0];
  bad = 1;
  if (b < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t i = 1; i < need; ++i) {
    if (i >= n) return 0;
    const unsigned char c = p[i];
    const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (c < l || c > h) return 0;
    bad = i + 1;
  }
  return need;
}

std::uint32_t hangul_or_pair(std::uint32_t a, std::uint32_t b) noexcept {
  // L + V -> LV
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  // LV + T -> LVT
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const std::uint64_t key = (static_cast<std::uint64_t>(a) << 21) | b;
  const auto* end = kComp + std::size(kComp);
  const auto* it = std::lower_bound(kComp, end, key, [](const CompEntry& e, std::uint64_t k) { return e.key < k; });
  if (it != end && it->key == key) return it->composite;
  return 0;
}

void decompose_into(std::uint32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const std::uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = kDecomp + std::size(kDecomp);
  const auto* it = std::lower_bound(kDecomp, end, cp, [](const DecompEntry& e, std::uint32_t c) { return e.cp < c; });
  if (it != end && it->cp == cp) {
    out.append(kDecompData + it->offset, kDecompData + it->offset + it->length);
  } else {
    out.push_back(cp);
  }
}

}  // namespace

const char* props_unicode_version() noexcept { return kGeneratedPropsUnicodeVersion; }
const char* nfc_unicode_version() noexcept { return kGeneratedNfcUnicodeVersion; }

std::uint8_t props(std::uint32_t cp) noexcept {
  if (cp >= kMaxCp) return 0;
  return kPropsBlocks[(static_cast<std::uint32_t>(kPropsIndex[cp >> kBlockShift]) << kBlockShift) | (cp & kBlockMask)];
}

std::uint8_t combining_class(std::uint32_t cp) noexcept {
  if (cp >= kMaxCp) return 0;
  return kCccBlocks[(static_cast<std::uint32_t>(kCccIndex[cp >> kBlockShift]) << kBlockShift) | (cp & kBlockMask)];
}

std::size_t find_invalid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // 8 ASCII bytes at a time
    while (i + 8 <= n) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    std::size_t bad;
    const std::size_t len = utf8_sequence(p + i, n - i, bad);
    if (len == 0) return i;
    i += len;
  }
  return std::string_view::npos;
}

void append_utf8(std::uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool nfc_quick_check(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    std::size_t len;
    const std::uint32_t cp = decode_utf8(p + i, len);
    if (props(cp) & kNfcCheck) return false;
    i += len;
  }
  return true;
}

void nfc_normalize(std::string_view s, std::string& out, std::u32string& scratch) {
  out.clear();
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  // Copy the prefix before the first code point that needs work, back to its preceding starter.
  std::size_t i = 0, last_starter = 0;
  while (i < n) {
    std::size_t len = 1;
    const std::uint32_t cp = p[i] < 0x80 ? p[i] : decode_utf8(p + i, len);
    if (props(cp) & kNfcCheck) break;
    last_starter = i;  // every code point without kNfcCheck is a starter (ccc 0)
    i += len;
  }
  if (i >= n) {
    out.assign(s);
    return;
  }
  // The starter just before i may compose with what follows: restart from it.
  std::size_t start = i;
  if (i > 0) start = last_starter;
  out.assign(s.substr(0, start));
  // 1. full canonical decomposition of the rest
  scratch.clear();
  for (std::size_t j = start; j < n;) {
    std::size_t len;
    const std::uint32_t cp = decode_utf8(p + j, len);
    j += len;
    decompose_into(cp, scratch);
  }
  // 2. canonical ordering: stable sort of each run of nonzero combining classes
  const std::size_t m = scratch.size();
  for (std::size_t a = 0; a < m;) {
    if (combining_class(scratch[a]) == 0) {
      ++a;
      continue;
    }
    std::size_t b = a;
    while (b < m && combining_class(scratch[b]) != 0) ++b;
    if (b - a > 1) {
      std::stable_sort(scratch.begin() + static_cast<std::ptrdiff_t>(a),
                       scratch.begin() + static_cast<std::ptrdiff_t>(b),
                       [](char32_t x, char32_t y) { return combining_class(x) < combining_class(y); });
    }
    a = b;
  }
  // 3. canonical composition (in place)
  std::size_t starter = 0;
  bool have_starter = false;
  int last_ccc = -1;  // ccc of the last kept character after the starter (-1: none)
  std::size_t w = 0;
  for (std::size_t r = 0; r < m; ++r) {
    const std::uint32_t cp = scratch[r];
    const int c = combining_class(cp);
    if (have_starter) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= c);
      if (!blocked) {
        const std::uint32_t comp = hangul_or_pair(scratch[starter], cp);
        if (comp != 0) {
          scratch[starter] = comp;
          continue;
        }
      }
    }
    if (c == 0) {
      starter = w;
      have_starter = true;
      last_ccc = -1;
    } else {
      last_ccc = c;
    }
    scratch[w++] = cp;
  }
  for (std::size_t k = 0; k < w; ++k) append_utf8(scratch[k], out);
}

std::string nfc(std::string_view s) {
  std::string out;
  std::u32string scratch;
  nfc_normalize(s, out, scratch);
  return out;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::size_t n = bytes.size();
  std::size_t i = 0;
  while (i < n) {
    std::size_t bad;
    const std::size_t len = utf8_sequence(p + i, n - i, bad);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      i += bad;
    } else {
      out.append(bytes.substr(i, len));
      i += len;
    }
  }
  return out;
}

}  // namespace clef::unicode

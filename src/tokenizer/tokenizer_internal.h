// SPDX-License-Identifier: MIT
// Internal data structures of the tokenizer (not part of the public API).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace clef::tokenizer_detail {

/// 64-bit hash of a byte string (8 bytes per step, multiply-xorshift mixing). Not cryptographic.
inline std::uint64_t hash_bytes(const char* p, std::size_t n) noexcept {
  constexpr std::uint64_t kMul = 0x9E3779B97F4A7C15ull;
  std::uint64_t h = 0x243F6A8885A308D3ull ^ (n * kMul);
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w ^ (static_cast<std::uint64_t>(n) << 59)) * kMul;
    h ^= h >> 29;
  }
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return h;
}

inline std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

inline std::size_t table_size_for(std::size_t count) noexcept {
  std::size_t cap = 16;
  while (cap < count * 2) cap <<= 1;
  return cap;
}

/// Merge table: (left id, right id) -> (rank, merged id). Open addressing, linear probing.
class PairMap {
 public:
  struct Value {
    std::uint32_t rank;
    std::int32_t id;
  };
  void reserve(std::size_t count) {
    slots_.assign(table_size_for(count), Slot{kEmpty, {0, 0}});
    mask_ = slots_.size() - 1;
  }
  /// Inserts or overwrites (a later duplicate merge wins, docs/TOKENIZER.md §1.4).
  /// Returns true if new.
  bool put(std::int32_t a, std::int32_t b, Value v) {
    const std::uint64_t key = make_key(a, b);
    std::size_t i = mix64(key) & mask_;
    while (slots_[i].key != kEmpty) {
      if (slots_[i].key == key) {
        slots_[i].value = v;
        return false;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{key, v};
    ++size_;
    return true;
  }
  /// Hints the cache about the first slot of pair (a, b).
  void prefetch(std::int32_t a, std::int32_t b) const noexcept {
    __builtin_prefetch(&slots_[mix64(make_key(a, b)) & mask_]);
  }
  /// Rank and id of the merge of (a, b); nullptr when the pair does not merge.
  const Value* find(std::int32_t a, std::int32_t b) const noexcept {
    const std::uint64_t key = make_key(a, b);
    std::size_t i = mix64(key) & mask_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s.value;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  std::size_t size() const noexcept { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~0ull;
  static std::uint64_t make_key(std::int32_t a, std::int32_t b) noexcept {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  struct Slot {
    std::uint64_t key;
    Value value;
  };
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

/// Map from byte strings to ids. Keys live in one arena (`base`) that must outlive the map and
/// not move; slots are 16 bytes (hash, id, offset, length) to keep probes cache-friendly.
class StringIdMap {
 public:
  void reserve(std::size_t count, const char* base) {
    slots_.assign(table_size_for(count), Slot{});
    mask_ = slots_.size() - 1;
    base_ = base;
  }
  /// Inserts base[off, off+len) -> id. If the key is present: keeps the old id when `overwrite`
  /// is false, else replaces it. Returns the id stored before the call, or -1 if the key was new.
  std::int32_t insert(std::uint32_t off, std::uint32_t len, std::int32_t id, bool overwrite = false) {
    return insert(off, len, id, hash_bytes(base_ + off, len), overwrite);
  }
  /// insert() with the key's precomputed hash_bytes().
  std::int32_t insert(std::uint32_t off, std::uint32_t len, std::int32_t id, std::uint64_t h, bool overwrite) {
    const std::string_view key(base_ + off, len);
    const auto h32 = static_cast<std::uint32_t>(h >> 32);
    std::size_t i = h & mask_;
    while (slots_[i].id >= 0) {
      Slot& s = slots_[i];
      if (s.hash == h32 && s.len == len && std::memcmp(base_ + s.off, key.data(), len) == 0) {
        const std::int32_t old = s.id;
        if (overwrite) s = Slot{h32, id, off, len};
        return old;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{h32, id, off, len};
    return -1;
  }
  std::int32_t find(std::string_view key) const noexcept {
    if (slots_.empty()) return -1;
    return find(key, hash_bytes(key.data(), key.size()));
  }
  /// Hints the cache about the first slot of hash h (see find(key, h)).
  void prefetch(std::uint64_t h) const noexcept { __builtin_prefetch(&slots_[h & mask_]); }
  /// find() with the key's precomputed hash_bytes(); the map must not be empty.
  std::int32_t find(std::string_view key, std::uint64_t h) const noexcept {
    const auto h32 = static_cast<std::uint32_t>(h >> 32);
    std::size_t i = h & mask_;
    while (slots_[i].id >= 0) {
      const Slot& s = slots_[i];
      if (s.hash == h32 && s.len == key.size() && std::memcmp(base_ + s.off, key.data(), key.size()) == 0) return s.id;
      i = (i + 1) & mask_;
    }
    return -1;
  }

 private:
  struct Slot {
    std::uint32_t hash = 0;
    std::int32_t id = -1;
    std::uint32_t off = 0, len = 0;
  };
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  const char* base_ = nullptr;
};

/// Byte trie over added-token contents for leftmost-longest matching on raw text.
struct AddedTrie {
  struct Node {
    std::int32_t token = -1;  ///< id of the added token ending here, -1 if none
    std::vector<std::pair<unsigned char, std::uint32_t>> next;
  };
  std::vector<Node> nodes{Node{}};
  bool first_byte[256] = {};

  void add(std::string_view s, std::int32_t id);
  /// Longest added token starting at text[pos]: returns its length (0 if none) and sets id.
  std::size_t longest_at(std::string_view text, std::size_t pos, std::int32_t& id) const noexcept;
};

/// Kind of an id (decode, token_string).
enum class IdKind : std::uint8_t { kUnknown = 0, kVocab = 1, kAdded = 2, kAddedSpecial = 3 };

}  // namespace clef::tokenizer_detail

namespace clef {

struct Tokenizer::Impl {
  SplitPattern pattern = SplitPattern::kQwen35;       ///< the pattern applied
  SplitPattern file_pattern = SplitPattern::kQwen35;  ///< the pattern tokenizer.json names
  bool nfc = true;
  bool ignore_merges = false;
  TokenizerLoadOptions options;
  std::uint64_t serial = 0;  ///< unique per loaded tokenizer (workspace cache ownership)

  std::int32_t byte_id[256];  ///< id of each single byte's byte-level character; -1 if absent
  tokenizer_detail::PairMap merges;
  std::size_t vocab_entries = 0;

  // Per id (0 .. id_limit-1): kind, HF token string, and decoded bytes (HF ByteLevel decoder rule).
  std::vector<tokenizer_detail::IdKind> kind;
  std::string strings;                 ///< arena of token strings (vocab keys, added contents)
  std::vector<std::uint32_t> str_off;  ///< id -> offset of its token string in `strings`
  std::vector<std::uint32_t> str_len;  ///< id -> length of its token string
  std::string bytes;                   ///< arena of decoded bytes
  std::vector<std::uint32_t> bytes_off;

  tokenizer_detail::StringIdMap by_string;  ///< HF token string -> id (vocab and added)
  tokenizer_detail::StringIdMap by_bytes;   ///< raw bytes -> vocab id (byte-level tokens only)

  std::vector<AddedTokenInfo> added;
  tokenizer_detail::AddedTrie trie;

  /// The most bytes of a split piece one vocabulary token covers (the longest vocabulary token
  /// string, in UTF-8 bytes: each byte-level character stands for one byte and is at least one),
  /// so a piece of L bytes encodes to at least ceil(L / max_token_bytes) ids. 0 when some byte has
  /// no token (such a byte is dropped, and no lower bound holds).
  std::size_t max_token_bytes = 0;

  std::string_view string_of(std::int32_t id) const noexcept {
    const auto i = static_cast<std::size_t>(id);
    return std::string_view(strings).substr(str_off[i], str_len[i]);
  }
  std::string_view bytes_of(std::int32_t id) const noexcept {
    const auto i = static_cast<std::size_t>(id);
    return std::string_view(bytes).substr(bytes_off[i], bytes_off[i + 1] - bytes_off[i]);
  }
  std::int32_t id_limit() const noexcept { return static_cast<std::int32_t>(kind.size()); }
};

/// Loader entry point (tokenizer_load.cc).
std::unique_ptr<Tokenizer::Impl> load_tokenizer_impl(std::string_view tokenizer_json, std::string_view config_json,
                                                     const TokenizerLoadOptions& options, const std::string& label);

/// GPT-2 byte -> code point table (docs/TOKENIZER.md §1.3).
std::uint32_t byte_level_char(unsigned char b) noexcept;
/// Inverse: code point -> byte, or -1 when the code point is not in the table.
int byte_level_byte(std::uint32_t cp) noexcept;

}  // namespace clef

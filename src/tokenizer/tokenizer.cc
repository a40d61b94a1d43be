// SPDX-License-Identifier: MIT
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

namespace clef {

using tokenizer_detail::IdKind;

// ---------------------------------------------------------------------------------------------
// Workspace: BPE cache (piece bytes -> ids) and scratch buffers.

struct TokenizerWorkspace::State {
  std::uint64_t owner = 0;  ///< serial of the tokenizer the cache belongs to
  // cache: open addressing over `slots`; keys and values live in arenas
  struct Slot {
    std::uint64_t hash;
    std::uint32_t key_off, key_len, val_off, val_len;  // key_len == UINT32_MAX: empty
  };
  std::vector<Slot> slots;
  std::string keys;
  std::vector<std::int32_t> vals;
  std::size_t entries = 0;
  std::size_t capacity = 0;
  // scratch
  std::string normalized;
  std::u32string nfc_scratch;
  std::vector<std::uint32_t> ends;
  std::vector<std::int32_t> sym;
  std::vector<std::uint32_t> rank;
  std::vector<std::int32_t> prev, next;
  struct HeapItem {
    std::uint32_t rank, pos;
    std::int32_t left, right;
    bool operator>(const HeapItem& o) const noexcept { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<HeapItem> heap;

  void reset_cache(std::size_t cap) {
    capacity = cap;
    std::size_t n = 16;
    while (n < cap * 2) n <<= 1;
    slots.assign(cap == 0 ? 0 : n, Slot{0, 0, std::numeric_limits<std::uint32_t>::max(), 0, 0});
    keys.clear();
    vals.clear();
    entries = 0;
  }
  const Slot* find(std::string_view key, std::uint64_t h) const noexcept {
    const std::size_t mask = slots.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.key_len == std::numeric_limits<std::uint32_t>::max()) return nullptr;
      if (s.hash == h && s.key_len == key.size() && std::memcmp(keys.data() + s.key_off, key.data(), key.size()) == 0) {
        return &s;
      }
    }
  }
  void insert(std::string_view key, std::uint64_t h, const std::int32_t* ids, std::size_t n) {
    if (entries >= capacity || keys.size() + key.size() > (1u << 30)) reset_cache(capacity);
    const std::size_t mask = slots.size() - 1;
    std::size_t i = h & mask;
    while (slots[i].key_len != std::numeric_limits<std::uint32_t>::max()) i = (i + 1) & mask;
    slots[i] = Slot{h, static_cast<std::uint32_t>(keys.size()), static_cast<std::uint32_t>(key.size()),
                    static_cast<std::uint32_t>(vals.size()), static_cast<std::uint32_t>(n)};
    keys.append(key);
    vals.insert(vals.end(), ids, ids + n);
    ++entries;
  }
};

TokenizerWorkspace::TokenizerWorkspace() : state_(std::make_unique<State>()) {}
TokenizerWorkspace::~TokenizerWorkspace() = default;
void TokenizerWorkspace::clear_cache() { state_->reset_cache(state_->capacity); }
std::size_t TokenizerWorkspace::cached_pieces() const noexcept { return state_->entries; }

namespace {

constexpr std::size_t kMaxCachedPiece = 256;  // bytes; as HF, longer pieces are not cached
constexpr std::size_t kSmallPiece = 64;       // symbols; above, the heap algorithm is used

// Byte-level BPE of one piece (docs/TOKENIZER.md §1.4): repeatedly merge the adjacent pair with the
// lowest rank, leftmost on ties. Appends the resulting ids to `out`.
void bpe_piece(const Tokenizer::Impl& t, std::string_view piece, TokenizerWorkspace::State& ws,
               std::vector<std::int32_t>& out) {
  auto& sym = ws.sym;
  sym.clear();
  for (const char ch : piece) {
    const std::int32_t id = t.byte_id[static_cast<unsigned char>(ch)];
    if (id >= 0) sym.push_back(id);  // a byte without a vocab entry is dropped, as HF does
  }
  std::size_t n = sym.size();
  if (n <= 1) {
    out.insert(out.end(), sym.begin(), sym.end());
    return;
  }
  constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();
  auto pair_rank = [&](std::int32_t a, std::int32_t b, std::int32_t& id) -> std::uint32_t {
    const auto* v = t.merges.find(a, b);
    if (!v) return kNone;
    id = v->id;
    return v->rank;
  };
  if (n <= kSmallPiece) {
    auto& rank = ws.rank;
    rank.resize(n);
    std::int32_t dummy;
    for (std::size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(sym[i], sym[i + 1], dummy);
    rank[n - 1] = kNone;
    while (true) {
      std::size_t best = 0;
      std::uint32_t best_rank = kNone;
      for (std::size_t i = 0; i + 1 < n; ++i) {
        if (rank[i] < best_rank) {
          best_rank = rank[i];
          best = i;
        }
      }
      if (best_rank == kNone) break;
      std::int32_t merged = 0;
      pair_rank(sym[best], sym[best + 1], merged);
      sym[best] = merged;
      for (std::size_t i = best + 1; i + 1 < n; ++i) {
        sym[i] = sym[i + 1];
        rank[i] = rank[i + 1];
      }
      --n;
      rank[n - 1] = kNone;
      if (best + 1 < n) rank[best] = pair_rank(sym[best], sym[best + 1], dummy);
      if (best > 0) rank[best - 1] = pair_rank(sym[best - 1], sym[best], dummy);
    }
    out.insert(out.end(), sym.begin(), sym.begin() + static_cast<std::ptrdiff_t>(n));
    return;
  }
  // Long piece: linked list + min-heap on (rank, position) with lazy invalidation.
  auto& prev = ws.prev;
  auto& next = ws.next;
  prev.resize(n);
  next.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<std::int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<std::int32_t>(i + 1) : -1;
  }
  auto& heap = ws.heap;
  heap.clear();
  const auto cmp = [](const TokenizerWorkspace::State::HeapItem& a, const TokenizerWorkspace::State::HeapItem& b) {
    return a > b;
  };
  auto push = [&](std::int32_t pos) {
    const std::int32_t nx = next[static_cast<std::size_t>(pos)];
    if (nx < 0) return;
    std::int32_t merged;
    const std::uint32_t r = pair_rank(sym[static_cast<std::size_t>(pos)], sym[static_cast<std::size_t>(nx)], merged);
    if (r == kNone) return;
    heap.push_back(
        {r, static_cast<std::uint32_t>(pos), sym[static_cast<std::size_t>(pos)], sym[static_cast<std::size_t>(nx)]});
    std::push_heap(heap.begin(), heap.end(), cmp);
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(static_cast<std::int32_t>(i));
  std::vector<std::int32_t>& alive = ws.sym;  // sym[i] < 0 marks a removed symbol
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    const auto item = heap.back();
    heap.pop_back();
    const auto pos = static_cast<std::size_t>(item.pos);
    if (alive[pos] != item.left) continue;
    const std::int32_t nx = next[pos];
    if (nx < 0 || sym[static_cast<std::size_t>(nx)] != item.right) continue;
    std::int32_t merged = 0;
    pair_rank(item.left, item.right, merged);
    sym[pos] = merged;
    const auto nxs = static_cast<std::size_t>(nx);
    sym[nxs] = -1;
    next[pos] = next[nxs];
    if (next[nxs] >= 0) prev[static_cast<std::size_t>(next[nxs])] = static_cast<std::int32_t>(pos);
    if (prev[pos] >= 0) push(prev[pos]);
    push(static_cast<std::int32_t>(pos));
  }
  for (std::int32_t i = 0; i >= 0; i = next[static_cast<std::size_t>(i)])
    out.push_back(sym[static_cast<std::size_t>(i)]);
}

// Encodes one piece with the cache.
void encode_piece(const Tokenizer::Impl& t, std::string_view piece, TokenizerWorkspace::State& ws,
                  std::vector<std::int32_t>& out) {
  if (t.ignore_merges) {
    const std::int32_t id = t.by_bytes.find(piece);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (piece.size() == 1) {
    const std::int32_t id = t.byte_id[static_cast<unsigned char>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  const bool cacheable = ws.capacity > 0 && piece.size() < kMaxCachedPiece;
  std::uint64_t h = 0;
  if (cacheable) {
    h = tokenizer_detail::hash_bytes(piece.data(), piece.size());
    if (const auto* s = ws.find(piece, h)) {
      out.insert(out.end(), ws.vals.begin() + s->val_off, ws.vals.begin() + s->val_off + s->val_len);
      return;
    }
  }
  const std::size_t before = out.size();
  bpe_piece(t, piece, ws, out);
  if (cacheable) ws.insert(piece, h, out.data() + before, out.size() - before);
}

void prepare(const Tokenizer::Impl& t, TokenizerWorkspace::State& ws) {
  if (ws.owner != t.serial) {
    ws.owner = t.serial;
    ws.reset_cache(t.options.cache_capacity);
  }
}

void check_utf8(std::string_view text) {
  if (text.size() >= std::numeric_limits<std::uint32_t>::max()) {
    throw InvalidArgument("tokenizer input: " + std::to_string(text.size()) + " bytes is too long (limit 4 GiB)");
  }
  const std::size_t bad = unicode::find_invalid_utf8(text);
  if (bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(text[bad])));
    throw InvalidArgument("tokenizer input: invalid UTF-8 at byte offset " + std::to_string(bad) + " (byte " + hex +
                          ")");
  }
}

// Walks the text: calls on_added(id, content) for every added token (leftmost-longest on the raw
// text, docs/TOKENIZER.md §1.5) and on_segment(view) for each text run between them.
template <class OnAdded, class OnSegment>
void walk_added(const Tokenizer::Impl& t, std::string_view text, OnAdded&& on_added, OnSegment&& on_segment) {
  std::size_t seg = 0, i = 0;
  const std::size_t n = text.size();
  if (t.added.empty()) {
    if (n) on_segment(text);
    return;
  }
  while (i < n) {
    if (!t.trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    std::int32_t id = -1;
    const std::size_t len = t.trie.longest_at(text, i, id);
    if (len == 0) {
      ++i;
      continue;
    }
    if (i > seg) on_segment(text.substr(seg, i - seg));
    on_added(id);
    i += len;
    seg = i;
  }
  if (seg < n) on_segment(text.substr(seg));
}

std::string read_file(const std::string& path, const std::string& label) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(label + ": cannot open " + path + ": " + errno_message(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(label + ": read error on " + path);
  return std::move(ss).str();
}

TokenizerWorkspace& thread_workspace() {
  thread_local TokenizerWorkspace ws;
  return ws;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& dir, const TokenizerLoadOptions& options) {
  namespace fs = std::filesystem;
  const fs::path tj = fs::path(dir) / "tokenizer.json";
  const fs::path tc = fs::path(dir) / "tokenizer_config.json";
  if (!fs::exists(tj)) throw ModelLoadError("tokenizer.json: missing from " + dir);
  const std::string json_text = read_file(tj.string(), "tokenizer.json");
  const std::string config_text = fs::exists(tc) ? read_file(tc.string(), "tokenizer_config.json") : std::string();
  return from_json(json_text, config_text, options, "tokenizer.json");
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const TokenizerLoadOptions& options, const std::string& label) {
  return Tokenizer(load_tokenizer_impl(tokenizer_json, config_json, options, label));
}

void Tokenizer::encode(std::string_view text, std::vector<std::int32_t>& ids, TokenizerWorkspace& workspace) const {
  check_utf8(text);
  const Impl& t = *impl_;
  auto& ws = workspace.state();
  prepare(t, ws);
  walk_added(
      t, text, [&](std::int32_t id) { ids.push_back(id); },
      [&](std::string_view seg) {
        std::string_view norm = seg;
        if (t.nfc && !unicode::nfc_quick_check(seg)) {
          unicode::nfc_normalize(seg, ws.normalized, ws.nfc_scratch);
          norm = ws.normalized;
        }
        ws.ends.clear();
        split_pieces(norm, t.pattern, ws.ends);
        std::size_t start = 0;
        for (const std::uint32_t end : ws.ends) {
          encode_piece(t, norm.substr(start, end - start), ws, ids);
          start = end;
        }
      });
}

bool Tokenizer::encode_bounded(std::string_view text, std::size_t max_ids, std::vector<std::int32_t>& ids,
                               TokenizerWorkspace& workspace) const {
  constexpr std::size_t kPiecesPerStep = 4096;  // split_pieces_from's step: 16 KiB of ends
  check_utf8(text);
  const Impl& t = *impl_;
  auto& ws = workspace.state();
  prepare(t, ws);
  bool over = ids.size() > max_ids;
  walk_added(
      t, text,
      [&](std::int32_t id) {
        if (over) return;
        ids.push_back(id);
        over = ids.size() > max_ids;
      },
      [&](std::string_view seg) {
        if (over) return;
        std::string_view norm = seg;
        if (t.nfc && !unicode::nfc_quick_check(seg)) {
          unicode::nfc_normalize(seg, ws.normalized, ws.nfc_scratch);
          norm = ws.normalized;
        }
        std::size_t start = 0;
        while (start < norm.size() && !over) {
          ws.ends.clear();
          split_pieces_from(norm, t.pattern, start, kPiecesPerStep, ws.ends);
          for (const std::uint32_t end : ws.ends) {
            const std::string_view piece = norm.substr(start, end - start);
            const std::size_t room = max_ids - ids.size();
            // The piece encodes to at least ceil(size / max_token_bytes) ids: more than the room
            // left means the limit is passed without running BPE over it.
            if (t.max_token_bytes > 0 && room <= SIZE_MAX / t.max_token_bytes &&
                piece.size() > room * t.max_token_bytes) {
              over = true;
              break;
            }
            encode_piece(t, piece, ws, ids);
            start = end;
            if (ids.size() > max_ids) {
              over = true;
              break;
            }
          }
        }
      });
  return !over;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode(text, ids, thread_workspace());
  return ids;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  check_utf8(text);
  const Impl& t = *impl_;
  std::vector<std::string> out;
  walk_added(
      t, text, [&](std::int32_t id) { out.emplace_back(t.string_of(id)); },
      [&](std::string_view seg) {
        const std::string norm = t.nfc ? unicode::nfc(seg) : std::string(seg);
        std::vector<std::uint32_t> ends;
        split_pieces(norm, t.pattern, ends);
        std::size_t start = 0;
        for (const std::uint32_t end : ends) {
          out.push_back(norm.substr(start, end - start));
          start = end;
        }
      });
  return out;
}

void Tokenizer::pre_tokenize_ends(std::string_view text, std::vector<std::uint32_t>& ends,
                                  TokenizerWorkspace& workspace) const {
  check_utf8(text);
  const Impl& t = *impl_;
  auto& ws = workspace.state();
  std::size_t base = 0;
  walk_added(
      t, text,
      [&](std::int32_t id) {
        base += t.string_of(id).size();
        ends.push_back(static_cast<std::uint32_t>(base));
      },
      [&](std::string_view seg) {
        std::string_view norm = seg;
        if (t.nfc && !unicode::nfc_quick_check(seg)) {
          unicode::nfc_normalize(seg, ws.normalized, ws.nfc_scratch);
          norm = ws.normalized;
        }
        ws.ends.clear();
        split_pieces(norm, t.pattern, ws.ends);
        for (const std::uint32_t e : ws.ends) ends.push_back(static_cast<std::uint32_t>(base + e));
        base += norm.size();
      });
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::string bytes;
  for (const std::int32_t id : ids) {
    if (id < 0 || id >= t.id_limit()) continue;
    const IdKind k = t.kind[static_cast<std::size_t>(id)];
    if (k == IdKind::kUnknown || (skip_special_tokens && k == IdKind::kAddedSpecial)) continue;
    bytes.append(t.bytes_of(id));
  }
  return unicode::utf8_lossy(bytes);
}

std::string Tokenizer::token_bytes(std::int32_t id) const {
  if (id < 0 || id >= impl_->id_limit()) return {};
  return std::string(impl_->bytes_of(id));
}

std::string Tokenizer::token_string(std::int32_t id) const {
  if (id < 0 || id >= impl_->id_limit()) return {};
  return std::string(impl_->string_of(id));
}

std::int32_t Tokenizer::token_to_id(std::string_view token_string) const { return impl_->by_string.find(token_string); }

std::size_t Tokenizer::vocab_entries() const noexcept { return impl_->vocab_entries; }
std::size_t Tokenizer::merge_count() const noexcept { return impl_->merges.size(); }
std::int32_t Tokenizer::id_limit() const noexcept { return impl_->id_limit(); }
const std::vector<AddedTokenInfo>& Tokenizer::added_tokens() const noexcept { return impl_->added; }
SplitPattern Tokenizer::split_pattern() const noexcept { return impl_->pattern; }
SplitPattern Tokenizer::file_split_pattern() const noexcept { return impl_->file_pattern; }
bool Tokenizer::normalizes_nfc() const noexcept { return impl_->nfc; }
bool Tokenizer::ignore_merges() const noexcept { return impl_->ignore_merges; }

}  // namespace clef

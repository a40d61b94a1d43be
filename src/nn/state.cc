#include "nn/state.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "ops/ops.h"

namespace clef::nn {

namespace {

/// Grows `buf` to `size` elements, the capacity at least doubling (amortized appends).
template <class V>
void grow(V& buf, std::size_t size) {
  if (buf.capacity() < size) buf.reserve(std::max(size, 2 * buf.capacity()));
  buf.resize(size);
}

}  // namespace

void KvCache::append(const float* k_rows, const float* v_rows, std::int64_t n) {
  if (bf16) {
    grow(kw, static_cast<std::size_t>((length + n) * (width / 2)));
    grow(vw, static_cast<std::size_t>((length + n + 1) / 2 * width));
    ops::kv_bf16_store(k_rows, v_rows, length, n, width, kw.data(), vw.data());
  } else {
    const auto add = static_cast<std::size_t>(n * width);
    if (k.capacity() < k.size() + add) {
      const std::size_t cap = std::max(k.size() + add, 2 * k.capacity());
      k.reserve(cap);
      v.reserve(cap);
    }
    k.insert(k.end(), k_rows, k_rows + add);
    v.insert(v.end(), v_rows, v_rows + add);
  }
  length += n;
}

KvCache KvCache::clone(std::int64_t extra_rows) const {
  // Member by member: a new member of KvCache must be copied here too.
  static_assert(sizeof(KvCache) ==
                3 * sizeof(std::int64_t) + 2 * sizeof(Rows<float>) + 2 * sizeof(Rows<std::uint32_t>));
  KvCache c;
  c.width = width;
  c.length = length;
  c.bf16 = bf16;
  const std::int64_t rows = length + extra_rows;
  if (bf16) {
    c.kw.reserve(static_cast<std::size_t>(rows * (width / 2)));
    c.vw.reserve(static_cast<std::size_t>((rows + 1) / 2 * width));
    c.kw.assign(kw.begin(), kw.end());
    c.vw.assign(vw.begin(), vw.end());
  } else {
    c.k.reserve(static_cast<std::size_t>(rows * width));
    c.v.reserve(static_cast<std::size_t>(rows * width));
    c.k.assign(k.begin(), k.end());
    c.v.assign(v.begin(), v.end());
  }
  return c;
}

void KvCache::reserve(std::int64_t rows) {
  if (rows < 0) throw InvalidArgument("KV cache: cannot reserve " + std::to_string(rows) + " rows");
  if (bf16) {
    kw.reserve(static_cast<std::size_t>(rows * (width / 2)));
    vw.reserve(static_cast<std::size_t>((rows + 1) / 2 * width));
  } else {
    k.reserve(static_cast<std::size_t>(rows * width));
    v.reserve(static_cast<std::size_t>(rows * width));
  }
}

bool KvCache::has_room(std::int64_t extra_rows) const noexcept {
  const std::int64_t rows = length + extra_rows;
  if (bf16) {
    return kw.capacity() >= static_cast<std::size_t>(rows * (width / 2)) &&
           vw.capacity() >= static_cast<std::size_t>((rows + 1) / 2 * width);
  }
  return k.capacity() >= static_cast<std::size_t>(rows * width) &&
         v.capacity() >= static_cast<std::size_t>(rows * width);
}

void KvCache::truncate(std::int64_t rows) {
  if (rows < 0 || rows > length) {
    throw InvalidArgument("KV cache: cannot truncate " + std::to_string(length) + " rows to " + std::to_string(rows));
  }
  if (bf16) {
    kw.resize(static_cast<std::size_t>(rows * (width / 2)));
    vw.resize(static_cast<std::size_t>((rows + 1) / 2 * width));
    if (rows % 2 == 1) {
      for (auto it = vw.end() - width; it != vw.end(); ++it) *it &= 0xFFFFu;  // row `rows` is not held
    }
  } else {
    k.resize(static_cast<std::size_t>(rows * width));
    v.resize(static_cast<std::size_t>(rows * width));
  }
  length = rows;
}

std::size_t KvCache::capacity_bytes() const noexcept {
  return (k.capacity() + v.capacity()) * sizeof(float) + (kw.capacity() + vw.capacity()) * sizeof(std::uint32_t);
}

void ModelState::reserve_kv(std::int64_t tokens) {
  for (LayerState& l : layers) l.kv.reserve(tokens);
}

bool ModelState::kv_has_room(std::int64_t extra_tokens) const noexcept {
  return std::all_of(layers.begin(), layers.end(), [&](const LayerState& l) { return l.kv.has_room(extra_tokens); });
}

std::size_t ModelState::capacity_bytes() const noexcept {
  std::size_t b = 0;
  for (const LayerState& l : layers) {
    b += (l.gdn.conv.capacity() + l.gdn.rec.capacity()) * sizeof(float) + l.kv.capacity_bytes();
  }
  return b;
}

ModelState ModelState::clone(std::int64_t extra_tokens) const {
  static_assert(sizeof(LayerState) == sizeof(GdnState) + sizeof(KvCache));
  static_assert(sizeof(ModelState) == sizeof(std::vector<LayerState>) + 2 * sizeof(std::int64_t));
  ModelState s;
  s.layers.reserve(layers.size());
  for (const LayerState& l : layers) s.layers.push_back(LayerState{l.gdn, l.kv.clone(extra_tokens)});
  s.n_tokens = n_tokens;
  s.next_position = next_position;
  return s;
}

std::size_t ModelState::bytes() const noexcept {
  std::size_t b = 0;
  for (const LayerState& l : layers) {
    b += (l.gdn.conv.size() + l.gdn.rec.size() + l.kv.k.size() + l.kv.v.size()) * sizeof(float) +
         (l.kv.kw.size() + l.kv.vw.size()) * sizeof(std::uint32_t);
  }
  return b;
}

}  // namespace clef::nn

// SPDX-License-Identifier: MIT
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
    grow(kw, key_elems(length + n));
    grow(vw, value_elems(length + n));
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
  c.reserve(length + extra_rows);
  c.k.assign(k.begin(), k.end());
  c.v.assign(v.begin(), v.end());
  c.kw.assign(kw.begin(), kw.end());
  c.vw.assign(vw.begin(), vw.end());
  return c;
}

std::size_t KvCache::key_elems(std::int64_t rows) const noexcept {
  return static_cast<std::size_t>(bf16 ? rows * (width / 2) : rows * width);
}

std::size_t KvCache::value_elems(std::int64_t rows) const noexcept {
  return static_cast<std::size_t>(bf16 ? (rows + 1) / 2 * width : rows * width);
}

void KvCache::reserve(std::int64_t rows) {
  if (rows < 0) throw InvalidArgument("KV cache: cannot reserve " + std::to_string(rows) + " rows");
  if (bf16) {
    kw.reserve(key_elems(rows));
    vw.reserve(value_elems(rows));
  } else {
    k.reserve(key_elems(rows));
    v.reserve(value_elems(rows));
  }
}

bool KvCache::has_room(std::int64_t extra_rows) const noexcept {
  const std::int64_t rows = length + extra_rows;
  return bf16 ? kw.capacity() >= key_elems(rows) && vw.capacity() >= value_elems(rows)
              : k.capacity() >= key_elems(rows) && v.capacity() >= value_elems(rows);
}

void KvCache::swap_buffers(KvCache& other) noexcept {
  k.swap(other.k);
  v.swap(other.v);
  kw.swap(other.kw);
  vw.swap(other.vw);
}

void KvCache::truncate(std::int64_t rows) {
  if (rows < 0 || rows > length) {
    throw InvalidArgument("KV cache: cannot truncate " + std::to_string(length) + " rows to " + std::to_string(rows));
  }
  if (bf16) {
    kw.resize(key_elems(rows));
    vw.resize(value_elems(rows));
    if (rows % 2 == 1) {
      for (auto it = vw.end() - width; it != vw.end(); ++it) *it &= 0xFFFFu;  // row `rows` is not held
    }
  } else {
    k.resize(key_elems(rows));
    v.resize(value_elems(rows));
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

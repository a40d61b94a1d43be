// SPDX-License-Identifier: MIT
// Per-sequence state of a hybrid (Gated DeltaNet + full attention) decoder, carried between
// prefill chunks (docs/MODEL.md §13). Plain values: copying a ModelState is a deep
// copy, which is exactly "fork"; assigning one back is "restore".
#pragma once

#include <cstdint>
#include <vector>

#include "core/huge_pages.h"

namespace clef::nn {

/// Gated DeltaNet layer state.
struct GdnState {
  std::vector<float> conv;  ///< [K-1, conv_dim]: the last K-1 pre-conv input rows, oldest first
  std::vector<float> rec;   ///< [Hv, dk, dv]: the recurrent state S of every value head, fp32
};

/// Key/value cache of one full-attention layer: rotated K and V of every past token.
struct KvCache {
  std::int64_t width = 0;   ///< floats per token row: nkv * head_dim
  std::int64_t length = 0;  ///< tokens held
  /// bf16 mode: rows are rounded to bf16 once, when appended, and kept in kw/vw only (layouts of
  /// ops::kv_bf16_store, docs/NUMERICS.md "bf16 KV cache"); k and v stay empty. Otherwise fp32 rows.
  bool bf16 = false;
  /// Buffers on 2 MiB pages where large (core/huge_pages.h): attention streams them, and a copy
  /// (a fork, or a restore without room) writes them whole.
  template <class T>
  using Rows = std::vector<T, HugePageAllocator<T>>;
  Rows<float> k;           ///< [length, nkv, head_dim] (rotated keys), fp32 mode
  Rows<float> v;           ///< [length, nkv, head_dim], fp32 mode
  Rows<std::uint32_t> kw;  ///< [length, width / 2] bf16 key pair words, bf16 mode
  Rows<std::uint32_t> vw;  ///< [ceil(length / 2), width] bf16 value pair words, bf16 mode

  /// Appends n rows of k and v ([n, width] each). Storage grows geometrically.
  void append(const float* k_rows, const float* v_rows, std::int64_t n);

  /// A deep copy with capacity reserved for `extra_rows` more rows (>= 0), so that appending them
  /// does not reallocate (and copy the rows again).
  KvCache clone(std::int64_t extra_rows) const;

  /// Reserves room for `rows` tokens in all (a no-op below the current capacity), so that
  /// appending up to that many does not reallocate.
  void reserve(std::int64_t rows);

  /// Whether `extra_rows` (>= 0) more rows fit in the reserved capacity: appending them keeps
  /// every buffer where it is.
  bool has_room(std::int64_t extra_rows) const noexcept;

  /// Drops the rows past the first `rows` (0 <= rows <= length; throws InvalidArgument otherwise),
  /// keeping the capacity. The words of rows [0, rows) are left as they are, and in bf16 mode the
  /// high half of the last value word row is zeroed when `rows` is odd (kv_bf16_store's layout), so
  /// the cache is exactly what appending its first `rows` rows gives.
  void truncate(std::int64_t rows);

  /// Bytes reserved (capacity, not only the rows in use).
  std::size_t capacity_bytes() const noexcept;

  /// Swaps the row buffers (k, v, kw, vw) with `other`'s, not the counters or the layout flags.
  void swap_buffers(KvCache& other) noexcept;

  /// Elements of the key (k or kw) and value (v or vw) buffers that `rows` rows take in this
  /// cache's mode: fp32 rows x width floats each; bf16 rows x width / 2 key words and
  /// ceil(rows / 2) x width value words (ops::kv_bf16_store).
  std::size_t key_elems(std::int64_t rows) const noexcept;
  std::size_t value_elems(std::int64_t rows) const noexcept;
};

/// State of one decoder layer (only the member matching the layer type is used).
struct LayerState {
  GdnState gdn;
  KvCache kv;
};

/// State of the whole decoder for one sequence.
struct ModelState {
  std::vector<LayerState> layers;
  std::int64_t n_tokens = 0;       ///< tokens consumed so far (sequence index of the next one)
  std::int64_t next_position = 0;  ///< rotary position of the next text token (== n_tokens for text)

  /// Bytes held by the caches (conv + recurrent states, KV rows in use).
  std::size_t bytes() const noexcept;

  /// A deep copy (as the copy constructor makes) whose KV caches have room for `extra_tokens` more
  /// tokens (>= 0), for a restored state that goes on with that many tokens.
  ModelState clone(std::int64_t extra_tokens) const;

  /// Reserves room for `tokens` tokens in all in every KV cache (KvCache::reserve).
  void reserve_kv(std::int64_t tokens);

  /// Whether every KV cache has room for `extra_tokens` more tokens (KvCache::has_room).
  bool kv_has_room(std::int64_t extra_tokens) const noexcept;

  /// Bytes reserved by the caches: conv + recurrent states and the KV buffers' capacity.
  std::size_t capacity_bytes() const noexcept;
};

}  // namespace clef::nn

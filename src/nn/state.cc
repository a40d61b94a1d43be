#include "nn/state.h"

#include <algorithm>

namespace clef::nn {

void KvCache::append(const float* k_rows, const float* v_rows, std::int64_t n) {
  const auto add = static_cast<std::size_t>(n * width);
  const std::size_t need = k.size() + add;
  if (k.capacity() < need) {
    const std::size_t cap = std::max(need, 2 * k.capacity());
    k.reserve(cap);
    v.reserve(cap);
  }
  k.insert(k.end(), k_rows, k_rows + add);
  v.insert(v.end(), v_rows, v_rows + add);
  length += n;
}

KvCache KvCache::clone(std::int64_t extra_rows) const {
  // Member by member: a new member of KvCache must be copied here too.
  static_assert(sizeof(KvCache) == 2 * sizeof(std::int64_t) + 2 * sizeof(std::vector<float>));
  KvCache c;
  c.width = width;
  c.length = length;
  if (width > 0) {
    const std::size_t room = k.size() + static_cast<std::size_t>(extra_rows * width);
    c.k.reserve(room);
    c.v.reserve(room);
  }
  c.k.assign(k.begin(), k.end());
  c.v.assign(v.begin(), v.end());
  return c;
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
    b += (l.gdn.conv.size() + l.gdn.rec.size() + l.kv.k.size() + l.kv.v.size()) * sizeof(float);
  }
  return b;
}

}  // namespace clef::nn

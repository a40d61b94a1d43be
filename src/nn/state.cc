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

std::size_t ModelState::bytes() const noexcept {
  std::size_t b = 0;
  for (const LayerState& l : layers) {
    b += (l.gdn.conv.size() + l.gdn.rec.size() + l.kv.k.size() + l.kv.v.size()) * sizeof(float);
  }
  return b;
}

}  // namespace clef::nn

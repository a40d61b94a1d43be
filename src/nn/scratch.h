// Reusable activation buffers for one forward chunk. Every block asks for its buffers by slot;
// a slot grows to the largest request and is then reused, so activation memory is O(chunk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace clef::nn {

class Scratch {
 public:
  /// A buffer of at least n floats for `slot` (contents unspecified). Pointers stay valid until
  /// the same slot is requested again with a larger n.
  float* get(std::size_t slot, std::int64_t n) {
    if (bufs_.size() <= slot) bufs_.resize(slot + 1);
    std::vector<float>& b = bufs_[slot];
    if (b.size() < static_cast<std::size_t>(n)) b.resize(static_cast<std::size_t>(n));
    return b.data();
  }
  /// Total floats held.
  std::size_t floats() const noexcept {
    std::size_t s = 0;
    for (const auto& b : bufs_) s += b.size();
    return s;
  }

 private:
  std::vector<std::vector<float>> bufs_;
};

}  // namespace clef::nn

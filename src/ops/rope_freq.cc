// SPDX-License-Identifier: MIT
#include "ops/rope_freq.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace clef::ops {
namespace {

void validate(const RopeDims& r) {
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 != 0) {
    throw InvalidArgument("rope: rotary_dim must be positive and even, got " + std::to_string(r.rotary_dim));
  }
  if (r.section[0] + r.section[1] + r.section[2] != r.rotary_dim / 2) {
    throw InvalidArgument("rope: mrope_section must sum to rotary_dim / 2 = " + std::to_string(r.rotary_dim / 2));
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const RopeDims& r) {
  validate(r);
  const std::int64_t half = r.rotary_dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const float expo = static_cast<float>(2 * i) / static_cast<float>(r.rotary_dim);
    const float pw = static_cast<float>(std::pow(r.theta, static_cast<double>(expo)));
    inv[static_cast<std::size_t>(i)] = 1.0f / pw;
  }
  return inv;
}

std::vector<int> rope_streams(const RopeDims& r) {
  validate(r);
  const std::int64_t half = r.rotary_dim / 2;
  std::vector<int> s(static_cast<std::size_t>(half), 0);
  for (std::int64_t i = 0; i < half; ++i) {
    int v = 0;
    if (r.interleaved) {
      if (i % 3 == 1 && i < 3 * r.section[1]) v = 1;
      else if (i % 3 == 2 && i < 3 * r.section[2]) v = 2;
    } else {
      v = i < r.section[0] ? 0 : (i < r.section[0] + r.section[1] ? 1 : 2);
    }
    s[static_cast<std::size_t>(i)] = v;
  }
  return s;
}

}  // namespace clef::ops

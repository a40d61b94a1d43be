// SPDX-License-Identifier: MIT
#include "models/qwen35/mrope_positions.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"

namespace clef::qwen35 {
namespace {

constexpr std::int64_t kMaxPos = std::numeric_limits<std::int32_t>::max();

std::int32_t narrow_pos(std::int64_t p, std::int64_t index) {
  if (p < 0 || p > kMaxPos) {
    throw InvalidArgument("M-RoPE position " + std::to_string(p) + " of token " + std::to_string(index) +
                          " does not fit in int32");
  }
  return static_cast<std::int32_t>(p);
}

void finish(MropePositions& r) {
  std::int64_t mx = -1;
  for (std::int32_t p : r.pos) mx = std::max<std::int64_t>(mx, p);
  r.rope_delta = r.tokens == 0 ? 0 : mx + 1 - r.tokens;
}

}  // namespace

MropePositions mrope_positions(std::span<const std::int32_t> ids, std::int32_t image_token_id,
                               std::span<const ImageGrid> grids, std::int64_t spatial_merge_size) {
  const auto T = static_cast<std::int64_t>(ids.size());
  const std::int64_t m = spatial_merge_size;
  if (m <= 0) throw InvalidArgument("mrope_positions: spatial_merge_size must be positive");
  MropePositions r;
  r.tokens = T;
  r.pos.assign(static_cast<std::size_t>(3 * T), 0);
  auto set = [&](std::int64_t i, std::int64_t pt, std::int64_t ph, std::int64_t pw) {
    r.pos[static_cast<std::size_t>(i)] = narrow_pos(pt, i);
    r.pos[static_cast<std::size_t>(T + i)] = narrow_pos(ph, i);
    r.pos[static_cast<std::size_t>(2 * T + i)] = narrow_pos(pw, i);
  };
  std::int64_t cur = 0;
  std::size_t image = 0;
  std::int64_t i = 0;
  while (i < T) {
    const bool is_image = ids[static_cast<std::size_t>(i)] == image_token_id;
    std::int64_t end = i;
    while (end < T && (ids[static_cast<std::size_t>(end)] == image_token_id) == is_image) ++end;
    if (!is_image) {
      for (std::int64_t j = i; j < end; ++j) set(j, cur + (j - i), cur + (j - i), cur + (j - i));
      cur += end - i;
    } else {
      if (image >= grids.size()) {
        throw InvalidArgument("mrope_positions: image run at token " + std::to_string(i) + " but only " +
                              std::to_string(grids.size()) + " image grid(s) given");
      }
      const ImageGrid& g = grids[image];
      if (g.t < 1 || g.h < m || g.w < m || g.h % m != 0 || g.w % m != 0) {
        throw InvalidArgument("mrope_positions: image " + std::to_string(image) + " grid (" + std::to_string(g.t) +
                              ", " + std::to_string(g.h) + ", " + std::to_string(g.w) +
                              ") is not positive multiples of the merge size " + std::to_string(m));
      }
      const std::int64_t H = g.h / m, W = g.w / m;
      const std::int64_t n = g.t * H * W;
      if (end - i != n) {
        throw InvalidArgument("mrope_positions: image " + std::to_string(image) + " at token " + std::to_string(i) +
                              " has " + std::to_string(end - i) + " pad tokens, its grid needs " + std::to_string(n));
      }
      std::int64_t j = i;
      for (std::int64_t f = 0; f < g.t; ++f) {
        for (std::int64_t a = 0; a < H; ++a) {
          for (std::int64_t b = 0; b < W; ++b, ++j) set(j, cur + f, cur + a, cur + b);
        }
      }
      cur += std::max(H, W);  // not += n (docs/MODEL.md §7.1)
      ++image;
    }
    i = end;
  }
  if (image != grids.size()) {
    throw InvalidArgument("mrope_positions: " + std::to_string(grids.size()) +
                          " image grid(s) given but the ids hold " + std::to_string(image) + " image run(s)");
  }
  finish(r);
  return r;
}

RopeShiftInputs rope_shift_inputs(std::int64_t merged_h, std::int64_t merged_w, std::int64_t first_pad) {
  RopeShiftInputs in;
  in.first_pad = first_pad;
  if (merged_h == 0 && merged_w == 0) return in;  // text only: 2^30, 0
  if (merged_h < 1 || merged_w < 1 || first_pad < 0 || merged_h * merged_w > kMaxPos / 2) {
    throw InvalidArgument("rope_shift_inputs: bad merged grid " + std::to_string(merged_h) + " x " +
                          std::to_string(merged_w));
  }
  const std::int64_t n = merged_h * merged_w;
  in.image_rc.resize(static_cast<std::size_t>(2 * n));
  for (std::int64_t k = 0; k < n; ++k) {
    in.image_rc[static_cast<std::size_t>(2 * k)] = static_cast<std::int32_t>(k / merged_w);
    in.image_rc[static_cast<std::size_t>(2 * k + 1)] = static_cast<std::int32_t>(k % merged_w);
  }
  in.rope_shift_start = first_pad + n;
  in.rope_shift_amount = n - std::max(merged_h, merged_w);
  return in;
}

MropePositions rope_shift_positions(std::int64_t tokens, const RopeShiftInputs& in) {
  const std::int64_t n = static_cast<std::int64_t>(in.image_rc.size() / 2);
  if (tokens < 0 || (n > 0 && in.first_pad + n > tokens)) {
    throw InvalidArgument("rope_shift_positions: the image block [" + std::to_string(in.first_pad) + ", " +
                          std::to_string(in.first_pad + n) + ") does not fit in " + std::to_string(tokens) + " tokens");
  }
  MropePositions r;
  r.tokens = tokens;
  r.pos.assign(static_cast<std::size_t>(3 * tokens), 0);
  for (std::int64_t p = 0; p < tokens; ++p) {
    std::int64_t pt, ph, pw;
    const std::int64_t k = p - in.first_pad;
    if (n > 0 && k >= 0 && k < n) {
      pt = in.first_pad;  // = p - k
      ph = in.first_pad + in.image_rc[static_cast<std::size_t>(2 * k)];
      pw = in.first_pad + in.image_rc[static_cast<std::size_t>(2 * k + 1)];
    } else {
      pt = ph = pw = p - (p >= in.rope_shift_start ? in.rope_shift_amount : 0);
    }
    r.pos[static_cast<std::size_t>(p)] = narrow_pos(pt, p);
    r.pos[static_cast<std::size_t>(tokens + p)] = narrow_pos(ph, p);
    r.pos[static_cast<std::size_t>(2 * tokens + p)] = narrow_pos(pw, p);
  }
  finish(r);
  return r;
}

}  // namespace clef::qwen35

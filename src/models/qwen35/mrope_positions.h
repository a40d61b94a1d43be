// SPDX-License-Identifier: MIT
// 3-D M-RoPE position ids of a Qwen3.5 token sequence with image blocks (docs/MODEL.md §7.1,
// §7.4): the (temporal, height, width) position streams the text backbone's full-attention
// rotary consumes (TextModel::forward_chunk's `positions` argument).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/qwen35/vision_tower.h"

namespace clef::qwen35 {

/// Positions of a whole sequence.
struct MropePositions {
  std::int64_t tokens = 0;        ///< T
  std::vector<std::int32_t> pos;  ///< [3, T]: pos[s * T + i], s = 0 temporal, 1 height, 2 width
  /// max(pos) + 1 - T (HF `mrope_position_deltas`): the position of a token appended after the
  /// sequence at index T + j is T + j + rope_delta on all three streams. 0 for text only.
  std::int64_t rope_delta = 0;
};

/// transformers' Qwen3_5Model.get_rope_index for one unpadded sequence (§7.1). Every maximal run
/// of `image_token_id` in `ids` is one image and takes the next grid of `grids` (patches, as
/// the processor's image_grid_thw); all other tokens (including <|vision_start|>/<|vision_end|>)
/// are text. Text runs get cur, cur+1, ... on all three streams; an image run of
/// t * (h/m) * (w/m) tokens gets (cur + frame, cur + merged row, cur + merged col) in
/// frame-major, row-major order, then cur += max(h, w) / m.
/// Throws InvalidArgument (naming the image and the token index) when a run's length does not
/// equal its grid's token count, when there are more runs than grids or grids left unused, for a
/// grid that is not a positive multiple of `spatial_merge_size`, or when a position would not
/// fit in int32. Video pads are not handled (no video input in clef: they count as text). Unlike HF (which would merge
/// them into one run), two images must be separated by at least one text token, as the processor's
/// <|vision_end|><|vision_start|> always does.
MropePositions mrope_positions(std::span<const std::int32_t> ids, std::int32_t image_token_id,
                               std::span<const ImageGrid> grids, std::int64_t spatial_merge_size);

/// The fixed-layout "rope shift" inputs of the Core AI port (docs/MODEL.md §14, §7.4)
/// for one image of merged grid H x W whose N = H*W pads start at sequence index `first_pad`
/// (Clef's layout: 37, right after the 36-token prefix and <|vision_start|>).
struct RopeShiftInputs {
  std::vector<std::int32_t> image_rc;       ///< [N, 2]: (k / W, k % W) of pad k
  std::int64_t first_pad = 37;              ///< index of pad 0
  std::int64_t rope_shift_start = 1 << 30;  ///< first_pad + N (the <|vision_end|> index); 2^30 text-only
  std::int64_t rope_shift_amount = 0;       ///< N - max(H, W); 0 text-only
};

/// The inputs of §7.4 for a merged grid H x W (H, W >= 1), or the text-only form when H == W == 0.
/// Throws InvalidArgument for a negative or half-empty grid.
RopeShiftInputs rope_shift_inputs(std::int64_t merged_h, std::int64_t merged_w, std::int64_t first_pad = 37);

/// Positions [3, T] from the §7.4 formulation: pad k (index first_pad + k, k < N) gets
/// (first_pad, first_pad + image_rc[k].row, first_pad + image_rc[k].col); any other index p gets
/// p - (p >= rope_shift_start ? rope_shift_amount : 0) on all three streams. Equal to
/// mrope_positions() for the single-image Clef layout (proof in §7.4; tested).
/// Throws InvalidArgument when the image block does not fit in T tokens.
MropePositions rope_shift_positions(std::int64_t tokens, const RopeShiftInputs& in);

}  // namespace clef::qwen35

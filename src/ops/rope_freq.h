// SPDX-License-Identifier: MIT
// M-RoPE frequency table and stream selector (docs/MODEL.md §7.2), shared by the reference and
// the optimized rope_tables so both define the angles identically.
#pragma once

#include <vector>

#include "ops/ops.h"

namespace clef::ops {

/// inv_freq_i = 1 / theta^(float(2i) / rotary_dim), i < rotary_dim/2, as fp32 the way HF forms
/// it (exponent in fp32, power rounded to fp32, fp32 reciprocal). Throws InvalidArgument when
/// rotary_dim is not positive and even or the sections do not sum to rotary_dim/2.
std::vector<float> rope_inv_freq(const RopeDims& r);

/// Position stream (0 = temporal, 1 = height, 2 = width) of each frequency. Interleaved
/// (Qwen3.5): H for i % 3 == 1 and i < 3*section[1], W for i % 3 == 2 and i < 3*section[2], T
/// otherwise. Sectioned (Qwen2-VL): the first section[0] frequencies T, the next section[1] H,
/// the rest W.
std::vector<int> rope_streams(const RopeDims& r);

}  // namespace clef::ops

// SPDX-License-Identifier: MIT
// The ARM64 int8 (Q8_0) kernels of cpu/int8_gemm.cc, included inside its anonymous namespace after
// Job and store_tile (not a header of its own).
//
// Three kernels, one per ARM dot-product generation, all on the packed layout of Int8Weight
// ([panel][block][group of 4 k][16 columns][4]; one 16-byte vector = 4 columns × 4 k):
//   neon          Advanced SIMD only (Cortex-A72 class): SMULL/SMULL2 of a weight vector by the
//                 row's 4 activation bytes broadcast, SADALP into int32 pairs, ADDP at block end.
//   neon-dotprod  SDOT by element (FEAT_DotProd): one instruction gives 4 columns' 4-k dot
//                 products; the row's 16 activation bytes (4 groups) are loaded once, each group
//                 picked by the lane index.
//   neon-i8mm     SMMLA (FEAT_I8MM): a 2-row × 8-k activation vector times a 2-column × 8-k weight
//                 vector gives a 2 × 2 int32 tile. The column pairs come from the packed layout
//                 with one ZIP1/ZIP2 of two groups' vectors (no second weight copy).
// Each forms the exact int32 block sums (|Σ| ≤ 32 · 127² < 2³¹, no intermediate can overflow:
// SMULL's int16 products are ≤ 127² and SADALP widens before adding) and folds them with the
// reference's fp32 steps, acc = fma(float(isum), dw · da, acc), so every kernel gives the bits of
// ref::int8_linear (ops/int8_gemm.h).
#if defined(CLEF_INT8_ARM)

/// Folds one block's int32 sums (MR rows × 16 columns, 4 vectors per row) into the fp32
/// accumulators. `da_b` is row 0's activation scale of the block; rows are `nb` apart.
template <int MR>
inline void fold_block_neon(const std::uint16_t* dw, const float* da_b, std::int64_t nb, const int32x4_t (&is)[MR][4],
                            float32x4_t (&acc)[MR][4]) {
  float32x4_t d[4];
  for (int q = 0; q < 4; ++q) d[q] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(dw + 4 * q)));
  for (int r = 0; r < MR; ++r) {
    const float s = da_b[r * nb];
    for (int q = 0; q < 4; ++q) acc[r][q] = vfmaq_f32(acc[r][q], vcvtq_f32_s32(is[r][q]), vmulq_n_f32(d[q], s));
  }
}

/// Writes the MR × 16 fp32 tile to y (store_tile drops the columns past n).
template <int MR>
inline void store_tile_neon(const Job& j, std::int64_t r0, int mr, std::int64_t p0, const float32x4_t (&acc)[MR][4]) {
  float out[MR * kInt8PanelCols];
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < 4; ++q) vst1q_f32(out + r * kInt8PanelCols + 4 * q, acc[r][q]);
  store_tile(j, r0, mr, p0, 1, out, kInt8PanelCols);
}

/// Advanced SIMD without dot products: MR rows × one panel.
template <int MR>
void tile_neon(const Job& j, std::int64_t r0, std::int64_t p0) {
  const std::int64_t nb = j.w->blocks();
  float32x4_t acc[MR][4];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.0f);
  const std::int8_t* qa[MR];
  for (int r = 0; r < MR; ++r) qa[r] = j.a->q.data() + static_cast<std::size_t>((r0 + r) * nb * kInt8Block);
  const float* da = j.a->d.data() + static_cast<std::size_t>(r0 * nb);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* qw = j.w->q_block(p0, b);
    int32x4_t pair[MR][8];  // per column quad q: [2q] columns 4q, 4q+1 and [2q+1] 4q+2, 4q+3, as k pairs
    for (auto& row : pair)
      for (auto& v : row) v = vdupq_n_s32(0);
    for (int g = 0; g < kInt8Block / 4; ++g) {
      int8x16_t w[4];
      for (int q = 0; q < 4; ++q) w[q] = vld1q_s8(qw + g * 64 + 16 * q);
      for (int r = 0; r < MR; ++r) {
        std::int32_t a4;
        std::memcpy(&a4, qa[r] + b * kInt8Block + g * 4, 4);
        const int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(a4));
        for (int q = 0; q < 4; ++q) {
          pair[r][2 * q] = vpadalq_s16(pair[r][2 * q], vmull_s8(vget_low_s8(w[q]), vget_low_s8(a)));
          pair[r][2 * q + 1] = vpadalq_s16(pair[r][2 * q + 1], vmull_high_s8(w[q], a));
        }
      }
    }
    int32x4_t is[MR][4];
    for (int r = 0; r < MR; ++r)
      for (int q = 0; q < 4; ++q) is[r][q] = vpaddq_s32(pair[r][2 * q], pair[r][2 * q + 1]);
    fold_block_neon<MR>(j.w->d_block(p0, b), da + b, nb, is, acc);
  }
  store_tile_neon<MR>(j, r0, MR, p0, acc);
}

/// SDOT step for group L (0..3) of a 16-byte activation load: NQ column quads from quad q0, MR rows.
template <int MR, int NQ, int L>
__attribute__((target("arch=armv8.2-a+dotprod"), always_inline)) inline void dot_group(const std::int8_t* qw_g,
                                                                                       const int8x16_t (&a)[MR],
                                                                                       int32x4_t (&is)[MR][NQ]) {
  int8x16_t w[NQ];
  for (int q = 0; q < NQ; ++q) w[q] = vld1q_s8(qw_g + L * 64 + 16 * q);
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < NQ; ++q) is[r][q] = vdotq_laneq_s32(is[r][q], w[q], a[r], L);
}

/// FEAT_DotProd: MR rows × NQ column quads (from quad q0) of one panel. 4 rows × 2 quads keep
/// their 8 int32 sums, 8 fp32 sums, 4 activation and 2 weight vectors in registers (4 × 4 would
/// need 40 of the 32, and the spills cost more than reading the activations twice).
template <int MR, int NQ>
__attribute__((target("arch=armv8.2-a+dotprod"))) void tile_neon_dot(const Job& j, std::int64_t r0, std::int64_t p0,
                                                                     int q0) {
  const std::int64_t nb = j.w->blocks();
  float32x4_t acc[MR][NQ];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.0f);
  const std::int8_t* qa[MR];
  for (int r = 0; r < MR; ++r) qa[r] = j.a->q.data() + static_cast<std::size_t>((r0 + r) * nb * kInt8Block);
  const float* da = j.a->d.data() + static_cast<std::size_t>(r0 * nb);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* qw = j.w->q_block(p0, b) + 16 * q0;
    int32x4_t is[MR][NQ];
    for (auto& row : is)
      for (auto& v : row) v = vdupq_n_s32(0);
    for (int h = 0; h < 2; ++h) {  // 16 k = 4 groups per activation load
      int8x16_t a[MR];
      for (int r = 0; r < MR; ++r) a[r] = vld1q_s8(qa[r] + b * kInt8Block + 16 * h);
      const std::int8_t* qw_h = qw + h * 4 * 64;
      dot_group<MR, NQ, 0>(qw_h, a, is);
      dot_group<MR, NQ, 1>(qw_h, a, is);
      dot_group<MR, NQ, 2>(qw_h, a, is);
      dot_group<MR, NQ, 3>(qw_h, a, is);
    }
    const std::uint16_t* dw = j.w->d_block(p0, b) + 4 * q0;
    float32x4_t d[NQ];
    for (int q = 0; q < NQ; ++q) d[q] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(dw + 4 * q)));
    for (int r = 0; r < MR; ++r) {
      const float s = da[r * nb + b];
      for (int q = 0; q < NQ; ++q) acc[r][q] = vfmaq_f32(acc[r][q], vcvtq_f32_s32(is[r][q]), vmulq_n_f32(d[q], s));
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* yr = j.y + (r0 + r) * j.n;
    for (int q = 0; q < NQ; ++q) {
      float out[4];
      vst1q_f32(out, acc[r][q]);
      for (int c = 0; c < 4; ++c) {
        const std::int64_t col = p0 * kInt8PanelCols + 4 * (q0 + q) + c;
        if (col >= j.n) break;
        yr[col] = j.accumulate ? yr[col] + out[c] : out[c];
      }
    }
  }
}

/// FEAT_I8MM: MR (2 or 4) rows × 2 column quads (from quad q0) of one panel; rows past `mr`
/// multiply zeros and are not stored. The sums stay in SMMLA's 2 × 2 order [r0c0, r0c1, r1c0,
/// r1c1] through the fp32 fold too (its scale vector is built in that order, dw · da per lane), so
/// only the final store reorders.
template <int MR>
__attribute__((target("arch=armv8.2-a+i8mm"))) void tile_neon_i8mm(const Job& j, std::int64_t r0, int mr,
                                                                   std::int64_t p0, int q0) {
  static_assert(MR % 2 == 0, "row pairs");
  constexpr int RP = MR / 2, CP = 4;  // row pairs; column pairs (8 columns)
  const std::int64_t nb = j.w->blocks();
  float32x4_t acc[RP][CP];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.0f);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* qa[RP];  // row pair p's block b: [k8][row 2p: 8 bytes, row 2p+1: 8 bytes]
    for (int p = 0; p < RP; ++p) qa[p] = j.pairs + static_cast<std::size_t>(((r0 / 2 + p) * nb + b) * 2 * kInt8Block);
    float da[MR];
    for (int r = 0; r < MR; ++r) da[r] = r < mr ? j.a->d[static_cast<std::size_t>((r0 + r) * nb + b)] : 0.0f;
    const std::int8_t* qw = j.w->q_block(p0, b) + 16 * q0;
    int32x4_t t[RP][CP];
    for (auto& row : t)
      for (auto& v : row) v = vdupq_n_s32(0);
    for (int k8 = 0; k8 < kInt8Block / 8; ++k8) {
      int8x16_t a[RP];
      for (int p = 0; p < RP; ++p) a[p] = vld1q_s8(qa[p] + 16 * k8);
      for (int q = 0; q < 2; ++q) {
        const int32x4_t g0 = vreinterpretq_s32_s8(vld1q_s8(qw + (2 * k8) * 64 + 16 * q));
        const int32x4_t g1 = vreinterpretq_s32_s8(vld1q_s8(qw + (2 * k8 + 1) * 64 + 16 * q));
        const int8x16_t c01 = vreinterpretq_s8_s32(vzip1q_s32(g0, g1));  // columns 4q, 4q+1 × 8 k
        const int8x16_t c23 = vreinterpretq_s8_s32(vzip2q_s32(g0, g1));  // columns 4q+2, 4q+3
        for (int p = 0; p < RP; ++p) {
          t[p][2 * q] = vmmlaq_s32(t[p][2 * q], a[p], c01);
          t[p][2 * q + 1] = vmmlaq_s32(t[p][2 * q + 1], a[p], c23);
        }
      }
    }
    // Column pair c: its two fp16 scales as fp32, twice: [dw_c0, dw_c1, dw_c0, dw_c1].
    const float32x4_t d8_lo = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(j.w->d_block(p0, b) + 4 * q0)));
    const float32x4_t d8_hi = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(j.w->d_block(p0, b) + 4 * q0 + 4)));
    const float32x2_t dcp[CP] = {vget_low_f32(d8_lo), vget_high_f32(d8_lo), vget_low_f32(d8_hi), vget_high_f32(d8_hi)};
    for (int p = 0; p < RP; ++p) {
      const float32x4_t dap = vcombine_f32(vdup_n_f32(da[2 * p]), vdup_n_f32(da[2 * p + 1]));
      for (int c = 0; c < CP; ++c) {
        const float32x4_t s = vmulq_f32(vcombine_f32(dcp[c], dcp[c]), dap);  // dw · da per lane
        acc[p][c] = vfmaq_f32(acc[p][c], vcvtq_f32_s32(t[p][c]), s);
      }
    }
  }
  for (int p = 0; p < RP; ++p) {
    for (int c = 0; c < CP; ++c) {
      float out[4];  // [r0c0, r0c1, r1c0, r1c1]
      vst1q_f32(out, acc[p][c]);
      for (int rr = 0; rr < 2; ++rr) {
        const int r = 2 * p + rr;
        if (r >= mr) break;
        float* yr = j.y + (r0 + r) * j.n;
        for (int cc = 0; cc < 2; ++cc) {
          const std::int64_t col = p0 * kInt8PanelCols + 4 * q0 + 2 * c + cc;
          if (col < j.n) yr[col] = j.accumulate ? yr[col] + out[2 * rr + cc] : out[2 * rr + cc];
        }
      }
    }
  }
}

void tiles_neon(const Job& j, std::int64_t p0, std::int64_t m) {
  std::int64_t r = 0;
  for (; r + 2 <= m; r += 2) tile_neon<2>(j, r, p0);
  if (r < m) tile_neon<1>(j, r, p0);
}

void tiles_neon_dot(const Job& j, std::int64_t p0, std::int64_t m) {
  for (int q0 = 0; q0 < 4; q0 += 2) {
    std::int64_t r = 0;
    for (; r + 4 <= m; r += 4) tile_neon_dot<4, 2>(j, r, p0, q0);
    switch (m - r) {
      case 3: tile_neon_dot<3, 2>(j, r, p0, q0); break;
      case 2: tile_neon_dot<2, 2>(j, r, p0, q0); break;
      case 1: tile_neon_dot<1, 2>(j, r, p0, q0); break;
      default: break;
    }
  }
}

/// The activations as SMMLA reads them: per row pair and block, [k8][8 bytes of the even row,
/// 8 of the odd row] (a missing last odd row is zeros). Built once per call.
void pair_rows(const Int8Activations& a, std::vector<std::int8_t>& out) {
  const std::int64_t pairs = (a.m + 1) / 2, nb = a.blocks;
  out.resize(static_cast<std::size_t>(pairs * nb * 2 * kInt8Block));
  for (std::int64_t p = 0; p < pairs; ++p) {
    for (std::int64_t b = 0; b < nb; ++b) {
      std::int8_t* dst = out.data() + static_cast<std::size_t>((p * nb + b) * 2 * kInt8Block);
      for (int rr = 0; rr < 2; ++rr) {
        const std::int64_t r = 2 * p + rr;
        for (int k8 = 0; k8 < kInt8Block / 8; ++k8) {
          std::int8_t* d8 = dst + 16 * k8 + 8 * rr;
          if (r < a.m) {
            std::memcpy(d8, a.q.data() + static_cast<std::size_t>((r * nb + b) * kInt8Block + 8 * k8), 8);
          } else {
            std::memset(d8, 0, 8);
          }
        }
      }
    }
  }
}

void tiles_neon_i8mm(const Job& j, std::int64_t p0, std::int64_t m) {
  for (int q0 = 0; q0 < 4; q0 += 2) {
    std::int64_t r = 0;
    for (; r + 4 <= m; r += 4) tile_neon_i8mm<4>(j, r, 4, p0, q0);
    if (m - r > 2) {
      tile_neon_i8mm<4>(j, r, static_cast<int>(m - r), p0, q0);
    } else if (m - r > 0) {
      tile_neon_i8mm<2>(j, r, static_cast<int>(m - r), p0, q0);
    }
  }
}

#endif  // CLEF_INT8_ARM

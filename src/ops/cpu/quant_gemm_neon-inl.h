// SPDX-License-Identifier: MIT
// The ARM64 kernels of the block-quantized linear layer (cpu/quant_gemm.cc), included inside its
// anonymous namespace after QJob, store_tile and panel_scalar (not a header of its own).
//
// Per call and thread, a panel of 16 columns is unpacked once into the buffer of
// cpu/quant_layout.h, straight from the packed records (unpack_panel_arm: the bytes the scalar
// kernel's accessor-based unpack writes). Its values are unsigned (0..63), so they are valid
// signed bytes, and the buffer's [group of 4 k][16 columns][4] order is the int8 kernels' layout:
//   neon-dotprod  SDOT by element: the row's 16 activation bytes of a half block (4 groups) are
//                 loaded once; Slo and Shi are one half each.
//   neon-i8mm     SMMLA: 2 rows × 8 k by 2 columns × 8 k (columns paired with ZIP1/ZIP2 of two
//                 groups), two 8-k steps per half block.
//   neon          SMULL/SMULL2 + SADALP, ADDP per half block (cores without dot products).
// Then the integer and fp32 steps of ops/quant_gemm.h, lane for lane:
//   I = sc_lo · Slo + sc_hi · Shi − (off·sc_lo · σlo + off·sc_hi · σhi)      (exact int32)
//   u = fma(float(I), D, −(M·mb · float(σlo + σhi)))  or  float(I) · D;  acc = fma(u, da, acc)
// so every kernel gives the bits of ref::quant_linear.
#if defined(CLEF_QUANT_ARM)

/// Unpacks panel p of w into `buf` (w.blocks() × kUnpackedBlock bytes, cpu/quant_layout.h) from the
/// records (QuantWeight's layout, ops/quant_gemm.h); the same bytes as unpack_panel_scalar.
void unpack_panel_arm(const QuantWeight& w, std::int64_t p, std::uint8_t* buf) {
  constexpr std::size_t kQ = quant_detail::kUnpackedQ;
  const Layout L = layout_of(w.type());
  const auto group = static_cast<std::int64_t>(L.group);
  for (std::int64_t s = 0; s < w.superblocks(); ++s) {
    const std::uint8_t* rec = w.record(p, s);
    float dcol[kQuantPanelCols], mcol[kQuantPanelCols];
    for (int c = 0; c < kQuantPanelCols; ++c) {
      std::uint16_t h;
      std::memcpy(&h, rec + L.d_off + 2 * c, 2);
      dcol[c] = f16_to_f32(h);
      h = 0;
      if (L.has_min) std::memcpy(&h, rec + L.m_off + 2 * c, 2);
      mcol[c] = f16_to_f32(h);
    }
    for (std::int64_t g = 0; g < group; ++g) {
      std::uint8_t* dst = buf + static_cast<std::size_t>(s * group + g) * quant_detail::kUnpackedBlock;
      const std::uint8_t* qd = rec + static_cast<std::size_t>(g) * L.qbytes;
      for (int e = 0; e < 256; ++e) {
        dst[e] = static_cast<std::uint8_t>(qd[e] & 15);        // groups 0-3: k 0..15
        dst[256 + e] = static_cast<std::uint8_t>(qd[e] >> 4);  // groups 4-7: k 16..31
      }
      for (int u = 0; u < 8; ++u) {
        std::uint8_t* d8 = dst + 64 * u;
        if (L.five) {
          for (int e = 0; e < 64; ++e) d8[e] = static_cast<std::uint8_t>(d8[e] | ((qd[256 + e] >> u) & 1) << 4);
        } else if (L.six) {
          const std::uint8_t* plane = qd + 256 + 64 * (u / 4);
          for (int e = 0; e < 64; ++e) {
            d8[e] = static_cast<std::uint8_t>(d8[e] | ((plane[e] >> (2 * (u % 4))) & 3) << 4);
          }
        }
      }
      const auto gi = static_cast<std::size_t>(g);
      for (int c = 0; c < kQuantPanelCols; ++c) {
        const auto cc = static_cast<std::size_t>(c);
        std::int32_t lo = 1, hi = 1;
        float mb = L.has_min ? 1.0f : 0.0f;
        if (L.kscale) {
          lo = hi = static_cast<std::int8_t>(rec[L.sc_off + 16 * gi + cc]);
          mb = static_cast<float>(rec[L.sc_off + 16 * (static_cast<std::size_t>(group) + gi) + cc]);
        } else if (L.q6) {
          lo = static_cast<std::int8_t>(rec[L.sc_off + 32 * gi + cc]);
          hi = static_cast<std::int8_t>(rec[L.sc_off + 32 * gi + 16 + cc]);
        }
        const auto dup = [](std::int32_t v) {
          const auto u = static_cast<std::uint32_t>(v) & 0xFFFFu;
          return static_cast<std::int32_t>(u | u << 16);
        };
        const std::int32_t v[3] = {dup(lo), dup(hi),
                                   static_cast<std::int32_t>((static_cast<std::uint32_t>(L.off * lo) & 0xFFFFu) |
                                                             static_cast<std::uint32_t>(L.off * hi) << 16)};
        const float f[2] = {dcol[c], mcol[c] * mb};
        for (int t = 0; t < 3; ++t) std::memcpy(dst + kQ + 64 * t + 4 * c, &v[t], 4);
        for (int t = 0; t < 2; ++t) std::memcpy(dst + kQ + 64 * (3 + t) + 4 * c, &f[t], 4);
      }
    }
  }
}

/// The integer and fp32 steps of one block for MR rows × NQ column quads from quad q0. `r0` is the
/// tile's first row; rows past `mr` are skipped. `has_min`: j.w->has_min(), asked once per tile (it
/// is a call). kSplit: S[r][h][q] holds row r's half-h sums of column quad q0 + q, and
///   I = sc_lo · Slo + sc_hi · Shi − (off·sc_lo · σlo + off·sc_hi · σhi);
/// otherwise (a type whose halves share their scale: every type but Q6_K) S[r][0][q] holds the
/// whole block's sum Slo + Shi, and I = sc · S − off·sc · (σlo + σhi), the same integer.
template <int MR, int NQ, bool kSplit>
__attribute__((always_inline)) inline void fold_quant_block(const QJob& j, bool has_min, const std::uint8_t* bb,
                                                            std::int64_t b, std::int64_t r0, int mr, int q0,
                                                            const int32x4_t (&S)[MR][2][NQ],
                                                            float32x4_t (&acc)[MR][NQ]) {
  constexpr std::size_t kQ = quant_detail::kUnpackedQ;
  const std::int64_t nb = j.w->blocks();
#pragma GCC unroll 4
  for (int q = 0; q < NQ; ++q) {
    const std::size_t at_q = kQ + 16 * static_cast<std::size_t>(q0 + q);
    const int32x4_t v0 = vld1q_s32(reinterpret_cast<const std::int32_t*>(bb + at_q));
    const int32x4_t v1 = vld1q_s32(reinterpret_cast<const std::int32_t*>(bb + at_q + 64));
    const int32x4_t v2 = vld1q_s32(reinterpret_cast<const std::int32_t*>(bb + at_q + 128));
    const int32x4_t sc_lo = vshrq_n_s32(vshlq_n_s32(v0, 16), 16), sc_hi = vshrq_n_s32(vshlq_n_s32(v1, 16), 16);
    const int32x4_t off_lo = vshrq_n_s32(vshlq_n_s32(v2, 16), 16), off_hi = vshrq_n_s32(v2, 16);
    const float32x4_t dq = vld1q_f32(reinterpret_cast<const float*>(bb + at_q + 192));
    const float32x4_t mq = vld1q_f32(reinterpret_cast<const float*>(bb + at_q + 256));
#pragma GCC unroll 4
    for (int r = 0; r < MR && r < mr; ++r) {
      const std::int64_t at = (r0 + r) * nb + b;
      const std::int32_t sp = j.spair[at];
      const std::int32_t slo = static_cast<std::int16_t>(sp & 0xFFFF), shi = sp >> 16;
      int32x4_t isum;
      if constexpr (kSplit) {
        isum = vmlaq_s32(vmulq_s32(sc_lo, S[r][0][q]), sc_hi, S[r][1][q]);
        isum = vsubq_s32(isum, vmlaq_n_s32(vmulq_n_s32(off_lo, slo), off_hi, shi));
      } else {
        isum = vmlsq_n_s32(vmulq_s32(sc_lo, S[r][0][q]), off_lo, slo + shi);
      }
      const float32x4_t fi = vcvtq_f32_s32(isum);
      const float32x4_t u = has_min ? vfmaq_f32(vnegq_f32(vmulq_n_f32(mq, j.sf[at])), fi, dq) : vmulq_f32(fi, dq);
      acc[r][q] = vfmaq_n_f32(acc[r][q], u, j.da[at]);
    }
  }
}

/// Writes the tile (rows < mr; NQ column quads from quad q0) to y.
template <int MR, int NQ = 4>
inline void store_quant_tile(const QJob& j, std::int64_t r0, int mr, std::int64_t p0, int q0,
                             const float32x4_t (&acc)[MR][NQ]) {
  for (int r = 0; r < MR && r < mr; ++r) {
    float* yr = j.y + (r0 + r) * j.n;
    for (int q = 0; q < NQ; ++q) {
      float out[4];
      vst1q_f32(out, acc[r][q]);
      for (int c = 0; c < 4; ++c) {
        const std::int64_t col = p0 * kQuantPanelCols + 4 * (q0 + q) + c;
        if (col >= j.n) break;
        yr[col] = j.accumulate ? yr[col] + out[c] : out[c];
      }
    }
  }
}

/// SDOT of group L (0..3 of a half block) for MR rows × NQ column quads.
template <int MR, int NQ, int L>
__attribute__((target("arch=armv8.2-a+dotprod"), always_inline)) inline void quant_dot_group(const std::uint8_t* q_h,
                                                                                             const int8x16_t (&a)[MR],
                                                                                             int32x4_t (&s)[MR][NQ]) {
  int8x16_t w[NQ];
  for (int q = 0; q < NQ; ++q) w[q] = vreinterpretq_s8_u8(vld1q_u8(q_h + L * 64 + 16 * q));
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < NQ; ++q) s[r][q] = vdotq_laneq_s32(s[r][q], w[q], a[r], L);
}

/// FEAT_DotProd: MR rows × 2 column quads (from quad q0) of the unpacked panel (4 × 16 would hold
/// more sums than the 32 registers). kSplit: the halves of a block have different scales (Q6_K),
/// so Slo and Shi are summed apart; every other type has sc_lo = sc_hi, and then
/// I = sc · (Slo + Shi) − off·sc · (σlo + σhi) is the same integer from one sum per block (half the
/// registers and half the fold).
template <int MR, bool kSplit>
__attribute__((target("arch=armv8.2-a+dotprod"))) void quant_tile_dot(const QJob& j, const std::uint8_t* buf,
                                                                      std::int64_t r0, std::int64_t p0, int q0) {
  constexpr int NQ = 2;
  const std::int64_t nb = j.w->blocks();
  const bool has_min = j.w->has_min();
  float32x4_t acc[MR][NQ];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.0f);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* bb = buf + static_cast<std::size_t>(b) * quant_detail::kUnpackedBlock;
    int32x4_t S[MR][2][NQ];
    int32x4_t s[MR][NQ];
    for (auto& row : s)
      for (auto& v : row) v = vdupq_n_s32(0);
    for (int h = 0; h < 2; ++h) {
      int8x16_t a[MR];
      for (int r = 0; r < MR; ++r) a[r] = vld1q_s8(j.qa + ((r0 + r) * nb + b) * 32 + 16 * h);
      const std::uint8_t* q_h = bb + 256 * h + 16 * q0;
      quant_dot_group<MR, NQ, 0>(q_h, a, s);
      quant_dot_group<MR, NQ, 1>(q_h, a, s);
      quant_dot_group<MR, NQ, 2>(q_h, a, s);
      quant_dot_group<MR, NQ, 3>(q_h, a, s);
      if (kSplit || h == 1) {
        for (int r = 0; r < MR; ++r) {
          for (int q = 0; q < NQ; ++q) {
            S[r][kSplit ? h : 0][q] = s[r][q];
            if (kSplit) s[r][q] = vdupq_n_s32(0);
          }
        }
      }
    }
    fold_quant_block<MR, NQ, kSplit>(j, has_min, bb, b, r0, MR, q0, S, acc);
  }
  store_quant_tile<MR, NQ>(j, r0, MR, p0, q0, acc);
}

/// FEAT_I8MM: MR (2 or 4) rows × the unpacked panel; rows past `mr` multiply zeros, never stored.
/// kSplit as in quant_tile_dot: without it one sum runs over the whole block.
template <int MR, bool kSplit>
__attribute__((target("arch=armv8.2-a+i8mm"))) void quant_tile_i8mm(const QJob& j, const std::uint8_t* buf,
                                                                    std::int64_t r0, int mr, std::int64_t p0) {
  static_assert(MR % 2 == 0, "row pairs");
  constexpr int RP = MR / 2;
  static const std::int8_t kZeros[32] = {};
  const std::int64_t nb = j.w->blocks();
  const bool has_min = j.w->has_min();
  float32x4_t acc[MR][4];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.0f);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* bb = buf + static_cast<std::size_t>(b) * quant_detail::kUnpackedBlock;
    const std::int8_t* qa[MR];
    for (int r = 0; r < MR; ++r) qa[r] = r < mr ? j.qa + ((r0 + r) * nb + b) * 32 : kZeros;
    int32x4_t S[MR][2][4];
    int32x4_t t[RP][8];  // row pair × column pair: [r0c0, r0c1, r1c0, r1c1]
    for (auto& row : t)
      for (auto& v : row) v = vdupq_n_s32(0);
    for (int h = 0; h < 2; ++h) {
      for (int k8 = 2 * h; k8 < 2 * h + 2; ++k8) {
        int8x16_t a[RP];
        for (int p = 0; p < RP; ++p) a[p] = vcombine_s8(vld1_s8(qa[2 * p] + 8 * k8), vld1_s8(qa[2 * p + 1] + 8 * k8));
        for (int q = 0; q < 4; ++q) {
          const int32x4_t g0 = vreinterpretq_s32_u8(vld1q_u8(bb + (2 * k8) * 64 + 16 * q));
          const int32x4_t g1 = vreinterpretq_s32_u8(vld1q_u8(bb + (2 * k8 + 1) * 64 + 16 * q));
          const int8x16_t c01 = vreinterpretq_s8_s32(vzip1q_s32(g0, g1));
          const int8x16_t c23 = vreinterpretq_s8_s32(vzip2q_s32(g0, g1));
          for (int p = 0; p < RP; ++p) {
            t[p][2 * q] = vmmlaq_s32(t[p][2 * q], a[p], c01);
            t[p][2 * q + 1] = vmmlaq_s32(t[p][2 * q + 1], a[p], c23);
          }
        }
      }
      if (!kSplit && h == 0) continue;  // one sum over both halves
      for (int p = 0; p < RP; ++p) {
        for (int q = 0; q < 4; ++q) {
          const int64x2_t lo = vreinterpretq_s64_s32(t[p][2 * q]), hi = vreinterpretq_s64_s32(t[p][2 * q + 1]);
          S[2 * p][kSplit ? h : 0][q] = vreinterpretq_s32_s64(vzip1q_s64(lo, hi));
          S[2 * p + 1][kSplit ? h : 0][q] = vreinterpretq_s32_s64(vzip2q_s64(lo, hi));
          if (kSplit) t[p][2 * q] = t[p][2 * q + 1] = vdupq_n_s32(0);
        }
      }
    }
    fold_quant_block<MR, 4, kSplit>(j, has_min, bb, b, r0, mr, 0, S, acc);
  }
  store_quant_tile<MR>(j, r0, mr, p0, 0, acc);
}

/// Advanced SIMD without dot products: MR rows × the unpacked panel.
template <int MR>
void quant_tile_neon(const QJob& j, const std::uint8_t* buf, std::int64_t r0, std::int64_t p0) {
  const std::int64_t nb = j.w->blocks();
  const bool has_min = j.w->has_min();
  float32x4_t acc[MR][4];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.0f);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* bb = buf + static_cast<std::size_t>(b) * quant_detail::kUnpackedBlock;
    int32x4_t S[MR][2][4];
    for (int h = 0; h < 2; ++h) {
      int32x4_t pair[MR][8];
      for (auto& row : pair)
        for (auto& v : row) v = vdupq_n_s32(0);
      for (int g = 4 * h; g < 4 * h + 4; ++g) {
        int8x16_t w[4];
        for (int q = 0; q < 4; ++q) w[q] = vreinterpretq_s8_u8(vld1q_u8(bb + g * 64 + 16 * q));
        for (int r = 0; r < MR; ++r) {
          std::int32_t a4;
          std::memcpy(&a4, j.qa + ((r0 + r) * nb + b) * 32 + 4 * g, 4);
          const int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(a4));
          for (int q = 0; q < 4; ++q) {
            pair[r][2 * q] = vpadalq_s16(pair[r][2 * q], vmull_s8(vget_low_s8(w[q]), vget_low_s8(a)));
            pair[r][2 * q + 1] = vpadalq_s16(pair[r][2 * q + 1], vmull_high_s8(w[q], a));
          }
        }
      }
      for (int r = 0; r < MR; ++r)
        for (int q = 0; q < 4; ++q) S[r][h][q] = vpaddq_s32(pair[r][2 * q], pair[r][2 * q + 1]);
    }
    fold_quant_block<MR, 4, true>(j, has_min, bb, b, r0, MR, 0, S, acc);
  }
  store_quant_tile<MR>(j, r0, MR, p0, 0, acc);
}

/// Every row tile of panel p0 with the SDOT kernel.
template <bool kSplit>
void run_dot_tiles(const QJob& j, const std::uint8_t* buf, std::int64_t p0, std::int64_t m) {
  for (int q0 = 0; q0 < 4; q0 += 2) {
    std::int64_t r = 0;
    for (; r + 4 <= m; r += 4) quant_tile_dot<4, kSplit>(j, buf, r, p0, q0);
    for (; r < m; ++r) quant_tile_dot<1, kSplit>(j, buf, r, p0, q0);
  }
}

/// Every row tile of panel p0 with the SMMLA kernel.
template <bool kSplit>
void run_i8mm_tiles(const QJob& j, const std::uint8_t* buf, std::int64_t p0, std::int64_t m) {
  std::int64_t r = 0;
  for (; r + 4 <= m; r += 4) quant_tile_i8mm<4, kSplit>(j, buf, r, 4, p0);
  if (m - r > 2) {
    quant_tile_i8mm<4, kSplit>(j, buf, r, static_cast<int>(m - r), p0);
  } else if (m - r > 0) {
    quant_tile_i8mm<2, kSplit>(j, buf, r, static_cast<int>(m - r), p0);
  }
}

/// Runs panel p0 with the chosen ARM kernel.
void run_panel_arm(QuantKernel kernel, const QJob& j, std::int64_t p0, std::int64_t m, std::uint8_t* buf) {
  unpack_panel_arm(*j.w, p0, buf);
  std::int64_t r = 0;
  switch (kernel) {
    case QuantKernel::kNeonI8mm:
      if (j.w->type() == QuantType::kQ6_K) {
        run_i8mm_tiles<true>(j, buf, p0, m);
      } else {
        run_i8mm_tiles<false>(j, buf, p0, m);
      }
      break;
    case QuantKernel::kNeonDot:
      if (j.w->type() == QuantType::kQ6_K) {
        run_dot_tiles<true>(j, buf, p0, m);
      } else {
        run_dot_tiles<false>(j, buf, p0, m);
      }
      break;
    default:
      for (; r + 2 <= m; r += 2) quant_tile_neon<2>(j, buf, r, p0);
      if (r < m) quant_tile_neon<1>(j, buf, r, p0);
      break;
  }
}

#endif  // CLEF_QUANT_ARM

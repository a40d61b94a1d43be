// SPDX-License-Identifier: MIT
// bf16 matrix product on vdpbf16ps with fixed row arithmetic (cpu/bf16_gemm_x86.h). x86-64 only.
//
// Register tile: up to 4 rows of x times up to 6 rows of W (output columns), 24 accumulators of
// 16 lanes, each the dot product of one (row, column) pair in 16 partial sums; per 32 elements of
// k the tile loads 4 + 6 vectors and runs 24 vdpbf16ps. The W rows of a tile's columns stay in L1
// while the tile walks down a block of 192 rows of x (in L2). Tasks are (row block, column group)
// pairs split statically over the engine's threads. None of this blocking changes the arithmetic
// of an element (header comment), only where its operands come from.
#include "ops/cpu/bf16_gemm_x86.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/isa.h"
#include "ops/profile.h"

namespace clef::ops::cpu {
namespace {

#define CLEF_DPBF16_ATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))

constexpr int kTileRows = 4;             ///< rows of x per register tile
constexpr int kTileCols = 6;             ///< rows of W (output columns) per register tile
constexpr std::int64_t kRowBlock = 192;  ///< rows of x per task (a multiple of kTileRows)
constexpr std::int64_t kBlock = 32;      ///< elements of k per vdpbf16ps (16 pairs)

/// The bits of one vector as another vector type of the same size (no instruction once optimized;
/// memcpy rather than bit_cast for GCC 12's UBSan at -O0, as in cpu/microgemm-inl.h).
template <class To, class From>
CLEF_DPBF16_ATTR inline To vec_bits(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

/// The 16 lanes added in the fixed tree of the header comment: l + (l + 8), then + 4, + 2, + 1.
CLEF_DPBF16_ATTR inline float lane_sum(__m512 v) {
  const __m512 s8 = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));     // lane i: i + (i + 8)
  const __m512 s4 = _mm512_add_ps(s8, _mm512_shuffle_f32x4(s8, s8, _MM_SHUFFLE(2, 3, 0, 1)));  // + 4
  const __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4, _MM_SHUFFLE(1, 0, 3, 2)));         // + 2
  const __m512 s1 = _mm512_add_ps(s2, _mm512_permute_ps(s2, _MM_SHUFFLE(2, 3, 0, 1)));         // + 1
  return _mm512_cvtss_f32(s1);
}

/// Rows [0, MR) of x (row stride k) times rows [0, NC) of W (row stride k) into y (row stride n):
/// `blocks` blocks of 32 elements, the last one masked to its `tail` elements.
template <int MR, int NC>
CLEF_DPBF16_ATTR void tile(const std::uint16_t* x, const std::uint16_t* w, std::int64_t k, std::int64_t blocks,
                           __mmask32 tail, float* y, std::int64_t n, bool accumulate) {
  __m512 acc[MR][NC];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 6
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const std::int64_t full = tail == ~__mmask32{0} ? blocks : blocks - 1;
  for (std::int64_t b = 0; b < full; ++b) {
    __m512bh xv[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) xv[r] = vec_bits<__m512bh>(_mm512_loadu_si512(x + r * k + kBlock * b));
#pragma GCC unroll 6
    for (int c = 0; c < NC; ++c) {
      const __m512bh wv = vec_bits<__m512bh>(_mm512_loadu_si512(w + c * k + kBlock * b));
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
  }
  if (full < blocks) {  // the last, partial block: masked loads read zeros past k
    const std::int64_t at = kBlock * full;
    __m512bh xv[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) xv[r] = vec_bits<__m512bh>(_mm512_maskz_loadu_epi16(tail, x + r * k + at));
#pragma GCC unroll 6
    for (int c = 0; c < NC; ++c) {
      const __m512bh wv = vec_bits<__m512bh>(_mm512_maskz_loadu_epi16(tail, w + c * k + at));
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv[r], wv);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 6
    for (int c = 0; c < NC; ++c) {
      const float s = lane_sum(acc[r][c]);
      float& out = y[r * n + c];
      out = accumulate ? out + s : s;
    }
  }
}

using TileFn = void (*)(const std::uint16_t*, const std::uint16_t*, std::int64_t, std::int64_t, __mmask32, float*,
                        std::int64_t, bool);

template <int MR, std::size_t... C>
constexpr std::array<TileFn, kTileCols> tiles_of_rows(std::index_sequence<C...>) {
  return {&tile<MR, static_cast<int>(C) + 1>...};
}

/// kTiles[MR - 1][NC - 1]: the tile of MR rows and NC columns.
constexpr std::array<std::array<TileFn, kTileCols>, kTileRows> kTiles = {
    tiles_of_rows<1>(std::make_index_sequence<kTileCols>{}), tiles_of_rows<2>(std::make_index_sequence<kTileCols>{}),
    tiles_of_rows<3>(std::make_index_sequence<kTileCols>{}), tiles_of_rows<4>(std::make_index_sequence<kTileCols>{})};

/// bf16 bits as fp32, subnormals read as zero (vdpbf16ps's DAZ).
float bf16_daz(std::uint16_t bits) {
  const float v = bf16_to_f32(bits);
  return std::fabs(v) < FLT_MIN ? std::copysign(0.0f, v) : v;
}

/// One product added as vdpbf16ps adds it: exact product, one rounding, subnormal results flushed.
float dp_step(float acc, std::uint16_t a, std::uint16_t b) {
  const float r = std::fma(bf16_daz(a), bf16_daz(b), acc);
  return std::fabs(r) < FLT_MIN ? std::copysign(0.0f, r) : r;
}

}  // namespace

bool dpbf16_gemm_available() noexcept {
  static const bool has_bf16 = __builtin_cpu_supports("avx512bf16") != 0;
  if (!has_bf16) return false;
  try {
    return active_isa() == IsaLevel::kAvx512Bf16;
  } catch (...) {  // a bad CLEF_ISA: reported by init_isa() to whoever calls it first
    return false;
  }
}

void dpbf16_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate) {
  if (!dpbf16_gemm_available()) throw Unsupported("dpbf16_gemm: this CPU or level has no AVX512-BF16");
  if (m <= 0 || n <= 0 || k <= 0) throw InvalidArgument("dpbf16_gemm: empty shape");
  const std::int64_t blocks = (k + kBlock - 1) / kBlock, rem = k - kBlock * (blocks - 1);
  const auto tail = rem == kBlock ? ~__mmask32{0} : static_cast<__mmask32>((1u << static_cast<unsigned>(rem)) - 1u);
  const std::int64_t groups = (n + kTileCols - 1) / kTileCols, row_blocks = (m + kRowBlock - 1) / kRowBlock;
  const std::int64_t tasks = groups * row_blocks;
  CLEF_PROF_SCOPE(">linear.dpbf16_gemm");
#pragma omp parallel for schedule(static) if (tasks > 1 && m * n * k > (1 << 18))
  for (std::int64_t t = 0; t < tasks; ++t) {
    const std::int64_t rb = t % row_blocks, c0 = (t / row_blocks) * kTileCols;
    const std::int64_t nc = std::min<std::int64_t>(kTileCols, n - c0), r_end = std::min(m, (rb + 1) * kRowBlock);
    for (std::int64_t r0 = rb * kRowBlock; r0 < r_end; r0 += kTileRows) {
      const std::int64_t mr = std::min<std::int64_t>(kTileRows, r_end - r0);
      kTiles[static_cast<std::size_t>(mr - 1)][static_cast<std::size_t>(nc - 1)](x + r0 * k, w + c0 * k, k, blocks,
                                                                                 tail, y + r0 * n + c0, n, accumulate);
    }
  }
}

void dpbf16_gemm_reference(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x,
                           const std::uint16_t* w, float* y, bool accumulate) {
  if (m <= 0 || n <= 0 || k <= 0) throw InvalidArgument("dpbf16_gemm_reference: empty shape");
  const std::int64_t pairs = (k + 1) / 2;
  for (std::int64_t r = 0; r < m; ++r) {
    const std::uint16_t* xr = x + r * k;
    for (std::int64_t c = 0; c < n; ++c) {
      const std::uint16_t* wc = w + c * k;
      float lane[16] = {};
      for (std::int64_t p = 0; p < pairs; ++p) {
        const std::int64_t e = 2 * p, o = 2 * p + 1;  // the even and the odd element of pair p
        float& l = lane[p % 16];
        l = dp_step(l, o < k ? xr[o] : std::uint16_t{0}, o < k ? wc[o] : std::uint16_t{0});  // odd first
        l = dp_step(l, xr[e], wc[e]);
      }
      float s8[8], s4[4];
      for (int i = 0; i < 8; ++i) s8[i] = lane[i] + lane[i + 8];
      for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
      const float s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
      float& out = y[r * n + c];
      out = accumulate ? out + s : s;
    }
  }
}

}  // namespace clef::ops::cpu

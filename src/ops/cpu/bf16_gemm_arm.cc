// SPDX-License-Identifier: MIT
// bf16 matrix product on BFMMLA (cpu/bf16_gemm_arm.h). aarch64 only.
#include "ops/cpu/bf16_gemm_arm.h"

#include <arm_neon.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/cpu/arm_features.h"
#include "ops/isa.h"
#include "ops/profile.h"

namespace clef::ops::cpu {
namespace {

constexpr std::int64_t kPanelCols = 16;  ///< columns per packed weight panel (8 column pairs)
constexpr int kColPairs = 8;
constexpr int kTilePairs = 3;  ///< row pairs per register tile: 3 × 8 = 24 accumulators

/// x [m, k] into row pairs: [pair][k4][row 0: 4 k, row 1: 4 k] (zeros past m and k).
void pack_rows(const std::uint16_t* x, std::int64_t m, std::int64_t k, std::int64_t k4, std::uint16_t* out) {
  const std::int64_t pairs = (m + 1) / 2;
#pragma omp parallel for schedule(static) if (m * k > (1 << 16))
  for (std::int64_t p = 0; p < pairs; ++p) {
    for (int rr = 0; rr < 2; ++rr) {
      const std::int64_t r = 2 * p + rr;
      for (std::int64_t g = 0; g < k4; ++g) {
        std::uint16_t* dst = out + ((p * k4 + g) * 2 + rr) * 4;
        for (int i = 0; i < 4; ++i) {
          const std::int64_t kk = 4 * g + i;
          dst[i] = r < m && kk < k ? x[r * k + kk] : std::uint16_t{0};
        }
      }
    }
  }
}

/// Columns [j0, j0 + 16) of W [n, k] into column pairs: [k4][pair][column 0: 4 k, column 1: 4 k].
void pack_panel(const std::uint16_t* w, std::int64_t n, std::int64_t k, std::int64_t k4, std::int64_t j0,
                std::uint16_t* out) {
  for (int cp = 0; cp < kColPairs; ++cp) {
    for (int cc = 0; cc < 2; ++cc) {
      const std::int64_t col = j0 + 2 * cp + cc;
      for (std::int64_t g = 0; g < k4; ++g) {
        std::uint16_t* dst = out + ((g * kColPairs + cp) * 2 + cc) * 4;
        for (int i = 0; i < 4; ++i) {
          const std::int64_t kk = 4 * g + i;
          dst[i] = col < n && kk < k ? w[col * k + kk] : std::uint16_t{0};
        }
      }
    }
  }
}

/// RP row pairs × 16 columns over all of k: out[p][c] = [r0c0, r0c1, r1c0, r1c1] of row pair p,
/// column pair c. The sums live in a local array (registers) and are written once at the end: on
/// `out` itself GCC stored every accumulator after each step (llvm-mca: store-bound at 50%).
template <int RP>
__attribute__((target("arch=armv8.2-a+bf16"))) void tile(const std::uint16_t* a, const std::uint16_t* b,
                                                         std::int64_t k4, float32x4_t (&out)[RP][kColPairs]) {
  float32x4_t acc[RP][kColPairs];
  for (auto& row : acc)
    for (auto& v : row) v = vdupq_n_f32(0.0f);
  for (std::int64_t g = 0; g < k4; ++g) {
    bfloat16x8_t av[RP];
    for (int p = 0; p < RP; ++p) av[p] = vreinterpretq_bf16_u16(vld1q_u16(a + (p * k4 + g) * 8));
    const std::uint16_t* bg = b + g * kColPairs * 8;
    for (int c = 0; c < kColPairs; ++c) {
      const bfloat16x8_t bv = vreinterpretq_bf16_u16(vld1q_u16(bg + 8 * c));
      for (int p = 0; p < RP; ++p) acc[p][c] = vbfmmlaq_f32(acc[p][c], av[p], bv);
    }
  }
  for (int p = 0; p < RP; ++p)
    for (int c = 0; c < kColPairs; ++c) out[p][c] = acc[p][c];
}

/// Writes rows [r0, r0 + 2·RP) ∩ [0, m) and columns [j0, j0 + 16) ∩ [0, n) of the tile to y.
template <int RP>
void store(const float32x4_t (&acc)[RP][kColPairs], std::int64_t r0, std::int64_t m, std::int64_t j0, std::int64_t n,
           float* y, bool accumulate) {
  for (int p = 0; p < RP; ++p) {
    for (int c = 0; c < kColPairs; ++c) {
      float v[4];
      vst1q_f32(v, acc[p][c]);
      for (int rr = 0; rr < 2; ++rr) {
        const std::int64_t r = r0 + 2 * p + rr;
        if (r >= m) break;
        for (int cc = 0; cc < 2; ++cc) {
          const std::int64_t col = j0 + 2 * c + cc;
          if (col >= n) break;
          float& out = y[r * n + col];
          out = accumulate ? out + v[2 * rr + cc] : v[2 * rr + cc];
        }
      }
    }
  }
}

template <int RP>
void run_tile(const std::uint16_t* ap, const std::uint16_t* bp, std::int64_t k4, std::int64_t pair0, std::int64_t m,
              std::int64_t j0, std::int64_t n, float* y, bool accumulate) {
  float32x4_t acc[RP][kColPairs];
  tile<RP>(ap + pair0 * k4 * 8, bp, k4, acc);
  store<RP>(acc, 2 * pair0, m, j0, n, y, accumulate);
}

}  // namespace

bool bfmmla_gemm_available() noexcept {
  static const bool has_bf16 = arm_features().bf16;
  if (!has_bf16) return false;
  try {
    return active_isa() >= IsaLevel::kNeonI8mm;
  } catch (...) {  // a bad CLEF_ISA: reported by init_isa() to whoever calls it first
    return false;
  }
}

void bfmmla_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate) {
  if (!bfmmla_gemm_available()) throw Unsupported("bfmmla_gemm: this CPU or level has no BFMMLA (FEAT_BF16)");
  if (m <= 0 || n <= 0 || k <= 0) throw InvalidArgument("bfmmla_gemm: empty shape");
  const std::int64_t k4 = (k + 3) / 4, pairs = (m + 1) / 2;
  thread_local std::vector<std::uint16_t> ap;
  ap.resize(static_cast<std::size_t>(pairs * k4 * 8));
  {
    CLEF_PROF_SCOPE(">linear.pack_x");
    pack_rows(x, m, k, k4, ap.data());
  }
  const std::uint16_t* a = ap.data();
  const std::int64_t panels = (n + kPanelCols - 1) / kPanelCols;
  CLEF_PROF_SCOPE(">linear.bfmmla_gemm");
#pragma omp parallel if (panels > 1 && m * n * k > (1 << 18))
  {
    thread_local std::vector<std::uint16_t> bp;
    bp.resize(static_cast<std::size_t>(k4 * kColPairs * 8));
#pragma omp for schedule(static)
    for (std::int64_t panel = 0; panel < panels; ++panel) {
      const std::int64_t j0 = panel * kPanelCols;
      pack_panel(w, n, k, k4, j0, bp.data());
      std::int64_t p = 0;
      for (; p + kTilePairs <= pairs; p += kTilePairs)
        run_tile<kTilePairs>(a, bp.data(), k4, p, m, j0, n, y, accumulate);
      if (pairs - p == 2) run_tile<2>(a, bp.data(), k4, p, m, j0, n, y, accumulate);
      if (pairs - p == 1) run_tile<1>(a, bp.data(), k4, p, m, j0, n, y, accumulate);
    }
  }
}

}  // namespace clef::ops::cpu

// SPDX-License-Identifier: MIT
// fp32 matrix product on AVX2 FMA with a fixed order per element (cpu/fma_gemm_x86.h). x86-64 only.
//
// Blocking (the classic packed GEMM): x is packed once per slab (equal slabs of at most 1,152 rows)
// into micro-panels of 6 rows, [k][6] per KC block (by all threads, shared, and by all the weights of
// a shared call: fma_gemm_shared); W is packed KC x NC at a time by each thread for its own columns
// into micro-panels of 16 output columns, [k][16] (widened from bf16 / fp16 as it is copied; 256 KiB,
// in L2: 2-3% faster than 1 MiB blocks in L3 on Zen 3). The 6 x 16 register tile (12 ymm
// accumulators, two ymm of W, one broadcast of x) walks an MC-row block of x (in L2) under one W
// micro-panel (16 KiB, in L1), and asks for its 6 rows of y as it starts.
// Each element is summed per KC block of k (one FMA chain from +0 in k order), and the block sums are
// added to y in block order (the first one stored as it is unless accumulating), so the blocking by
// rows, columns and threads moves operands, never the order of the additions. Threads take contiguous
// ranges of the column panels of all the weights, one weight after the other (row tiles when there are
// fewer panels than threads).
#include "ops/cpu/fma_gemm_x86.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "ops/cpu/transpose_x86.h"
#include "ops/isa.h"
#include "ops/profile.h"

namespace clef::ops::cpu {
namespace {

#define CLEF_FMA_ATTR __attribute__((target("avx2,fma,f16c")))

constexpr int kMR = 6;                      ///< rows of x per register tile
constexpr int kNR = 16;                     ///< output columns per register tile (two ymm)
constexpr std::int64_t kKC = 256;           ///< elements of k per packed block
constexpr std::int64_t kMC = 144;           ///< rows of x per packed block (a multiple of kMR)
constexpr std::int64_t kNC = 256;           ///< output columns per packed W block (a multiple of kNR)
constexpr std::int64_t kMS = 1152;          ///< most rows of x packed at once
constexpr std::int64_t kMinWork = 1 << 18;  ///< m·n·k below which one thread runs the product

/// One weight value of dtype T widened to fp32 (exact for every supported dtype).
template <DType T>
float weight_at(const void* w, std::int64_t i) {
  if constexpr (T == DType::kF32) {
    float v;
    std::memcpy(&v, static_cast<const std::byte*>(w) + i * 4, 4);
    return v;
  } else {
    std::uint16_t b;
    std::memcpy(&b, static_cast<const std::byte*>(w) + i * 2, 2);
    return T == DType::kBF16 ? bf16_to_f32(b) : f16_to_f32(b);
  }
}

/// weight_at for a dtype known at run time (the scalar oracle's).
float weight_at(DType t, const void* w, std::int64_t i) {
  switch (t) {
    case DType::kF32: return weight_at<DType::kF32>(w, i);
    case DType::kBF16: return weight_at<DType::kBF16>(w, i);
    case DType::kF16: return weight_at<DType::kF16>(w, i);
    default: return 0.0f;  // unreachable: fma_gemm_takes() is checked first
  }
}

/// Eight consecutive weight values of dtype T at element i, widened to fp32.
template <DType T>
CLEF_FMA_ATTR inline __m256 load8(const std::byte* w, std::int64_t i) {
  if constexpr (T == DType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w + i * 4));
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i * 2));
    if constexpr (T == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

/// v rounded to the nearest bf16 value, kept as fp32: bf16_to_f32(f32_to_bf16(v)) lane by lane
/// (round to nearest even; a NaN stays a NaN with the quiet bit set, as f32_to_bf16 does).
CLEF_FMA_ATTR inline __m256 round_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), hi);
  const __m256i nan = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x00400000)), hi);
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, nan, is_nan));
}

/// x's value as the product reads it: itself, or rounded to bf16 (x_bf16).
inline float x_value(float v, bool x_bf16) { return x_bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

/// Packs W rows [j0, j0 + nc) (rows >= n read as zero) and elements [p0, p0 + kc) into micro-panels
/// of kNR rows: panel q at bp + q·kc·kNR, element (i, j) at [i·kNR + j]. W of dtype T.
template <DType T>
CLEF_FMA_ATTR void pack_w_as(const void* w, std::int64_t n, std::int64_t k, std::int64_t j0, std::int64_t nc,
                             std::int64_t p0, std::int64_t kc, float* bp) {
  const auto* wb = static_cast<const std::byte*>(w);
  const std::size_t es = dtype_size(T);
  for (std::int64_t q = 0; q * kNR < nc; ++q) {
    float* panel = bp + q * kc * kNR;
    for (int half = 0; half < 2; ++half) {
      const std::int64_t jb = j0 + q * kNR + half * 8;
      const std::int64_t rows = std::clamp<std::int64_t>(n - jb, 0, 8);
      std::int64_t i = 0;
      if (rows == 8) {
        for (; i + 8 <= kc; i += 8) {
          __m256 r[8];
          for (int l = 0; l < 8; ++l) r[l] = load8<T>(wb + static_cast<std::size_t>((jb + l) * k) * es, p0 + i);
          transpose8x8(r);
          for (int l = 0; l < 8; ++l) _mm256_store_ps(panel + (i + l) * kNR + half * 8, r[l]);
        }
      }
      for (; i < kc; ++i)
        for (std::int64_t l = 0; l < 8; ++l)
          panel[i * kNR + half * 8 + l] = l < rows ? weight_at<T>(w, (jb + l) * k + p0 + i) : 0.0f;
    }
  }
}

/// pack_w_as for the weight's dtype (F32, BF16 or F16).
void pack_w(DType t, const void* w, std::int64_t n, std::int64_t k, std::int64_t j0, std::int64_t nc, std::int64_t p0,
            std::int64_t kc, float* bp) {
  switch (t) {
    case DType::kF32: pack_w_as<DType::kF32>(w, n, k, j0, nc, p0, kc, bp); break;
    case DType::kBF16: pack_w_as<DType::kBF16>(w, n, k, j0, nc, p0, kc, bp); break;
    default: pack_w_as<DType::kF16>(w, n, k, j0, nc, p0, kc, bp); break;  // fma_gemm_takes() checked first
  }
}

/// Packs x rows [r0, r0 + rows) (rows past them as zero) and elements [p0, p0 + kc) into one
/// micro-panel of kMR rows: element (i, r) at ap[i·kMR + r], rounded to bf16 values when x_bf16.
/// Writes only ap[0, kc·kMR).
CLEF_FMA_ATTR void pack_x(const float* x, std::int64_t k, std::int64_t r0, std::int64_t rows, std::int64_t p0,
                          std::int64_t kc, bool x_bf16, float* ap) {
  const __m256i six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
  std::int64_t i = 0;
  for (; i + 8 <= kc; i += 8) {
    __m256 r[8];
    for (int l = 0; l < 8; ++l) r[l] = l < rows ? _mm256_loadu_ps(x + (r0 + l) * k + p0 + i) : _mm256_setzero_ps();
    if (x_bf16)
      for (int l = 0; l < 8; ++l) r[l] = round_bf16(r[l]);
    transpose8x8(r);
    // Whole 8-lane stores in k order: lanes 6 and 7 land on the next element's first two rows, which
    // the next store writes over. Only the panel's last element takes the masked store (the masked
    // stores were two thirds of this function's perf samples on Zen 3).
    for (int l = 0; l < 7; ++l) _mm256_storeu_ps(ap + (i + l) * kMR, r[l]);
    if (i + 8 < kc) _mm256_storeu_ps(ap + (i + 7) * kMR, r[7]);
    else _mm256_maskstore_ps(ap + (i + 7) * kMR, six, r[7]);
  }
  for (; i < kc; ++i)
    for (std::int64_t l = 0; l < kMR; ++l)
      ap[i * kMR + l] = l < rows ? x_value(x[(r0 + l) * k + p0 + i], x_bf16) : 0.0f;
}

/// The 6 x 16 tile: the block sum p[r][j] = Σ ap[i][r] · bp[i][j], one FMA per step in i order from
/// +0, then c[r][j] = (add ? c[r][j] + p[r][j] : p[r][j]), one rounded addition.
CLEF_FMA_ATTR void tile(std::int64_t kc, const float* ap, const float* bp, float* c, std::int64_t ldc, bool add) {
  // The C rows this tile reads and writes, asked for now: last touched one W block ago (out of L1 and
  // L2 by then), their latency at the tile's end stalled every tile (5-6% of the GEMM on Zen 3); the
  // k loop below hides it.
  for (int r = 0; r < kMR; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + kNR - 1), _MM_HINT_T0);
  }
  __m256 acc[kMR][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
  for (std::int64_t i = 0; i < kc; ++i) {
    const __m256 b0 = _mm256_load_ps(bp + i * kNR), b1 = _mm256_load_ps(bp + i * kNR + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMR; ++r) {
      const __m256 a = _mm256_broadcast_ss(ap + i * kMR + r);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    if (add) {
      acc[r][0] = _mm256_add_ps(_mm256_loadu_ps(c + r * ldc), acc[r][0]);
      acc[r][1] = _mm256_add_ps(_mm256_loadu_ps(c + r * ldc + 8), acc[r][1]);
    }
    _mm256_storeu_ps(c + r * ldc, acc[r][0]);
    _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
  }
}

/// A tile of mr <= 6 rows and nr <= 16 columns through a 6 x 16 buffer (same arithmetic).
CLEF_FMA_ATTR void edge_tile(std::int64_t kc, const float* ap, const float* bp, float* c, std::int64_t ldc, bool add,
                             std::int64_t mr, std::int64_t nr) {
  alignas(32) float buf[kMR * kNR] = {};
  if (add)
    for (std::int64_t r = 0; r < mr; ++r) std::memcpy(buf + r * kNR, c + r * ldc, static_cast<std::size_t>(nr) * 4);
  tile(kc, ap, bp, buf, kNR, add);
  for (std::int64_t r = 0; r < mr; ++r) std::memcpy(c + r * ldc, buf + r * kNR, static_cast<std::size_t>(nr) * 4);
}

/// 32-byte aligned scratch of at least n floats, kept per thread.
float* scratch(std::unique_ptr<float[]>& buf, std::int64_t& cap, std::int64_t n) {
  if (cap < n) {
    buf.reset(new float[static_cast<std::size_t>(n + 8)]);
    cap = n;
  }
  const auto a = reinterpret_cast<std::uintptr_t>(buf.get());
  return reinterpret_cast<float*>((a + 31) & ~std::uintptr_t{31});
}

/// x rows [r0, r0 + rows) packed for every KC block: block b (elements [b·kKC, b·kKC + kc)) at
/// xp + b·kKC·rows_p, its micro-panel q at + q·kc·kMR (rows_p = rows rounded up to kMR). The panels
/// are split over the threads of the enclosing parallel region (omp for, with its barrier).
CLEF_FMA_ATTR void pack_x_all(const float* x, std::int64_t k, std::int64_t r0, std::int64_t rows, bool x_bf16,
                              float* xp) {
  const std::int64_t panels = (rows + kMR - 1) / kMR, blocks = (k + kKC - 1) / kKC, rows_p = panels * kMR;
#pragma omp for schedule(static)
  for (std::int64_t t = 0; t < panels * blocks; ++t) {
    const std::int64_t b = t / panels, q = t % panels, kc = std::min(kKC, k - b * kKC);
    pack_x(x, k, r0 + q * kMR, std::min<std::int64_t>(kMR, rows - q * kMR), b * kKC, kc, x_bf16,
           xp + b * kKC * rows_p + q * kc * kMR);
  }
}

/// Software prefetch (into L2) of the weight rows the next pack_w will read: W (row-major [n, k], es bytes
/// per element) rows [j0, j0 + nc) (rows >= n skipped), elements [p0, p0 + kc), issued a few cache lines
/// at a time while the tiles of the current block run. Each W row of a block is only kc elements (8 or
/// 16 cache lines), too short a stream for the hardware prefetchers: pack_w otherwise waits on memory
/// for most of its loads.
class WeightPrefetch {
 public:
  WeightPrefetch(const void* w, std::int64_t es, std::int64_t n, std::int64_t k, std::int64_t j0, std::int64_t nc,
                 std::int64_t p0, std::int64_t kc)
      : base_(static_cast<const char*>(w)),
        es_(es),
        k_(k),
        j0_(j0),
        p0_(p0),
        bytes_(kc * es),
        per_row_((kc * es + 126) / 64),  // the most lines kc * es bytes can touch at any offset in a line
        total_(std::max<std::int64_t>(0, std::min(nc, n - j0)) * per_row_) {}
  /// Lines issued per call so that `calls` calls cover the block.
  void spread_over(std::int64_t calls) { step_ = (total_ + calls - 1) / std::max<std::int64_t>(calls, 1); }
  /// The next step_ lines (a row's lines past its last byte are skipped).
  void issue() {
    for (const std::int64_t end = std::min(total_, next_ + step_); next_ < end; ++next_) {
      const std::int64_t row = next_ / per_row_, line = next_ % per_row_;
      const auto at =
          reinterpret_cast<std::uintptr_t>(base_ + static_cast<std::size_t>(((j0_ + row) * k_ + p0_) * es_));
      if (line * 64 >= static_cast<std::int64_t>(at & 63) + bytes_) continue;
      _mm_prefetch(reinterpret_cast<const char*>((at & ~std::uintptr_t{63}) + static_cast<std::uintptr_t>(line) * 64),
                   _MM_HINT_T1);
    }
  }

 private:
  const char* base_;
  std::int64_t es_, k_, j0_, p0_, bytes_, per_row_, total_, step_ = 0, next_ = 0;
};

/// y[r0:r1, c0:c1] of the product on the calling thread, x rows [xr0, ...) packed in xp
/// (pack_x_all; r0 - xr0 a multiple of kMR).
CLEF_FMA_ATTR void run_block(std::int64_t r0, std::int64_t r1, std::int64_t c0, std::int64_t c1, std::int64_t xr0,
                             std::int64_t rows_p, std::int64_t n, std::int64_t k, const float* xp, DType t,
                             const void* w, float* y, bool accumulate) {
  thread_local std::unique_ptr<float[]> bbuf;
  thread_local std::int64_t bcap = 0;
  float* bp = scratch(bbuf, bcap, kNC * kKC);
  for (std::int64_t jc = c0; jc < c1; jc += kNC) {
    const std::int64_t nc = std::min(kNC, c1 - jc);
    for (std::int64_t pc = 0; pc < k; pc += kKC) {
      const std::int64_t kc = std::min(kKC, k - pc);
      const bool add = pc > 0 || accumulate;  // this block's sums go onto y
      pack_w(t, w, n, k, jc, nc, pc, kc, bp);
      // The next block's W rows, fetched during this block's last row block.
      const bool last_k = pc + kKC >= k;
      const std::int64_t jn = last_k ? jc + kNC : jc, pn = last_k ? 0 : pc + kKC;
      WeightPrefetch next(w, static_cast<std::int64_t>(dtype_size(t)), n, k, jn, jn < c1 ? std::min(kNC, c1 - jn) : 0,
                          pn, std::min(kKC, k - pn));
      const float* xblock = xp + pc * rows_p;
      for (std::int64_t ic = r0; ic < r1; ic += kMC) {
        const std::int64_t mc = std::min(kMC, r1 - ic);
        const bool last_ic = ic + kMC >= r1;
        if (last_ic) next.spread_over(((mc + kMR - 1) / kMR) * ((nc + kNR - 1) / kNR));
        for (std::int64_t jr = 0; jr < nc; jr += kNR) {
          const std::int64_t nr = std::min<std::int64_t>(kNR, nc - jr);
          const float* bpanel = bp + (jr / kNR) * kc * kNR;
          for (std::int64_t ir = 0; ir < mc; ir += kMR) {
            const std::int64_t mr = std::min<std::int64_t>(kMR, mc - ir);
            float* c = y + (ic + ir) * n + jc + jr;
            const float* apanel = xblock + ((ic + ir - xr0) / kMR) * kc * kMR;
            if (last_ic) next.issue();
            if (mr == kMR && nr == kNR) tile(kc, apanel, bpanel, c, n, add);
            else edge_tile(kc, apanel, bpanel, c, n, add, mr, nr);
          }
        }
      }
    }
  }
}

}  // namespace

bool fma_gemm_available() noexcept {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!has) return false;
  try {
    return active_isa() == IsaLevel::kAvx2;
  } catch (...) {  // a bad CLEF_ISA: reported by init_isa() to whoever calls it first
    return false;
  }
}

bool fma_gemm_takes(DType w_dtype) noexcept {
  return w_dtype == DType::kF32 || w_dtype == DType::kBF16 || w_dtype == DType::kF16;
}

void fma_gemm(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, bool x_bf16, DType w_dtype, const void* w,
              float* y, bool accumulate) {
  const FmaGemmOut out{w_dtype, w, n, y, accumulate};
  fma_gemm_shared(m, k, x, x_bf16, std::span<const FmaGemmOut>(&out, 1));
}

void fma_gemm_shared(std::int64_t m, std::int64_t k, const float* x, bool x_bf16, std::span<const FmaGemmOut> outs) {
  if (!fma_gemm_available()) throw Unsupported("fma_gemm: this CPU or level is not AVX2 with FMA");
  if (m <= 0 || k <= 0 || outs.empty()) throw InvalidArgument("fma_gemm: empty shape");
  std::int64_t panels = 0, n_all = 0;  // column panels and columns of all the weights
  for (std::size_t o = 0; o < outs.size(); ++o) {
    const FmaGemmOut& out = outs[o];
    if (!fma_gemm_takes(out.w_dtype)) throw InvalidArgument("fma_gemm: weights must be F32, BF16 or F16");
    if (out.n <= 0 || out.w == nullptr || out.y == nullptr) throw InvalidArgument("fma_gemm: empty shape");
    for (std::size_t p = 0; p < o; ++p) {
      if (std::less<>{}(out.y, outs[p].y + m * outs[p].n) && std::less<>{}(outs[p].y, out.y + m * out.n))
        throw InvalidArgument("fma_gemm: outputs " + std::to_string(p) + " and " + std::to_string(o) + " overlap");
    }
    panels += (out.n + kNR - 1) / kNR;
    n_all += out.n;
  }
  CLEF_PROF_SCOPE(">linear.fma_gemm");
  thread_local std::unique_ptr<float[]> xbuf;
  thread_local std::int64_t xcap = 0;
  // Row slabs bound the packed copy of x; equal ones, so that no slab is a short tail that packs
  // every W block again for a few rows.
  const std::int64_t slabs = (m + kMS - 1) / kMS;
  const std::int64_t slab_rows = ((m + slabs - 1) / slabs + kMR - 1) / kMR * kMR;
  for (std::int64_t s0 = 0; s0 < m; s0 += slab_rows) {
    const std::int64_t rows = std::min(slab_rows, m - s0), row_tiles = (rows + kMR - 1) / kMR;
    const std::int64_t rows_p = row_tiles * kMR;
    float* xp = scratch(xbuf, xcap, rows_p * k);
#pragma omp parallel if (rows * n_all * k >= kMinWork)
    {
      pack_x_all(x, k, s0, rows, x_bf16, xp);
      const std::int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      if (panels >= nt) {  // contiguous ranges of the weights' column panels, taken in order
        const std::int64_t p0 = panels * t / nt, p1 = panels * (t + 1) / nt;
        std::int64_t first = 0;  // the first panel of outs[o]
        for (const FmaGemmOut& out : outs) {
          const std::int64_t own = (out.n + kNR - 1) / kNR;
          const std::int64_t c0 = (std::max(p0, first) - first) * kNR;
          const std::int64_t c1 = std::min(out.n, (std::min(p1, first + own) - first) * kNR);
          if (c0 < c1)
            run_block(s0, s0 + rows, c0, c1, s0, rows_p, out.n, k, xp, out.w_dtype, out.w, out.y, out.accumulate);
          first += own;
        }
      } else {  // narrow: each weight's contiguous ranges of row tiles
        const std::int64_t r0 = s0 + row_tiles * t / nt * kMR;
        const std::int64_t r1 = std::min(s0 + rows, s0 + row_tiles * (t + 1) / nt * kMR);
        if (r0 < r1)
          for (const FmaGemmOut& out : outs)
            run_block(r0, r1, 0, out.n, s0, rows_p, out.n, k, xp, out.w_dtype, out.w, out.y, out.accumulate);
      }
    }
  }
}

void fma_gemm_reference(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, bool x_bf16, DType w_dtype,
                        const void* w, float* y, bool accumulate) {
  if (!fma_gemm_takes(w_dtype)) throw InvalidArgument("fma_gemm_reference: weights must be F32, BF16 or F16");
  if (m <= 0 || n <= 0 || k <= 0) throw InvalidArgument("fma_gemm_reference: empty shape");
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = accumulate ? y[r * n + j] : 0.0f;
      for (std::int64_t p0 = 0; p0 < k; p0 += kKC) {  // KC blocks, each its own chain from +0
        float part = 0.0f;
        for (std::int64_t i = p0; i < std::min(k, p0 + kKC); ++i)
          part = std::fma(x_value(x[r * k + i], x_bf16), weight_at(w_dtype, w, j * k + i), part);
        acc = p0 > 0 || accumulate ? acc + part : part;
      }
      y[r * n + j] = acc;
    }
  }
}

}  // namespace clef::ops::cpu

// SPDX-License-Identifier: MIT
// Optimized causal GQA attention (docs/MODEL.md §3.5): flash-style blocks with an online
// softmax, fp32 throughout. A work item is (kv head j, block of nq queries); it serves all
// `group` query heads that read kv head j at once, so each key/value block is loaded once for
// group x nq query columns. The item works in the transposed ("key rows, query columns") layout,
// which needs no per-block transposes of the cache:
//   Qt  [hd, ncol]   the item's queries, transposed once, pre-multiplied by hd^-0.5
//   St  [nk, ncol] = K_blk · Qt                 (K rows straight from the cache)
//   online softmax per column:  m' = max(m, colmax St);  Pt = e^{St - m'} (masked by index);
//                               l' = l e^{m - m'} + colsum Pt;  Ot = Ot e^{m - m'} + V_blkᵀ Pt
//   out = Otᵀ / l
// Column c = hh * nq + i is query i of head j * group + hh. Memory is O(block), never [t, tk].
//
// bf16 mode: on the avx512bf16 level the products run on bf16 pair words with vdpbf16ps; on every
// other level the same operands (scaled q, k, v, probabilities) are rounded to bf16 values and
// multiplied by the fp32 kernels (exact products, fp32 sums): the same numerics contract, only
// the summation order differs. Compiled once per SIMD target (Highway, ops/isa.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/dtype.h"
#include "ops/convert.h"
#include "ops/cpu/microgemm-inl.h"
#include "ops/cpu/vmath-inl.h"
#include "ops/isa.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/vision_ops.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;
namespace {

/// Side of the square tiles the query / output transposes move through (16 x 16 floats: both the
/// rows read and the rows written stay in L1; one query column at a time would touch hd lines of
/// a 128 KiB Qt per query).
constexpr std::int64_t kTile = 16;

/// Calls fn(hh, i, e0, e1) for every query row i < nq of every head hh < group and every kTile-wide
/// slice [e0, e1) of its hd elements, tile by tile (kTile rows x kTile elements), so that a transpose
/// between [rows, hd] and [hd, columns] touches at most kTile lines on each side at a time.
template <class Fn>
inline void for_each_tile(std::int64_t group, std::int64_t nq, std::int64_t hd, const Fn& fn) {
  for (std::int64_t hh = 0; hh < group; ++hh) {
    for (std::int64_t ib = 0; ib < nq; ib += kTile) {
      const std::int64_t iend = std::min(nq, ib + kTile);
      for (std::int64_t eb = 0; eb < hd; eb += kTile) {
        const std::int64_t eend = std::min(hd, eb + kTile);
        for (std::int64_t i = ib; i < iend; ++i) fn(hh, i, eb, eend);
      }
    }
  }
}

/// Qt [hd, group * nq] (row stride ld floats) of one work item: column hh * nq + i = query row i of
/// head hh of the group (q points at query row 0 of the group's first head, row stride ldq), times
/// `scale`.
inline void load_queries(const float* q, std::int64_t ldq, std::int64_t group, std::int64_t nq, std::int64_t hd,
                         float scale, float* Qt, std::int64_t ld) {
  for_each_tile(group, nq, hd, [&](std::int64_t hh, std::int64_t i, std::int64_t e0, std::int64_t e1) {
    const float* qi = q + i * ldq + hh * hd;
    float* col = Qt + hh * nq + i;
    for (std::int64_t e = e0; e < e1; ++e) col[e * ld] = qi[e] * scale;
  });
}

/// Final step of one work item of the blocked attention: o rows (query i of head hh of the group,
/// stride ldq, head hd columns) = Oᵀ column (hh * nq + i) / l (the softmax denominator); Ot is
/// [hd, ncol] with row stride ld floats. `corr` is scratch of ncol floats. Tiled like load_queries.
inline void write_output(const float* Ot, std::int64_t ld, const float* l, float* corr, std::int64_t ncol,
                         std::int64_t group, std::int64_t nq, std::int64_t hd, float* o, std::int64_t ldq) {
  for (std::int64_t c = 0; c < ncol; ++c) corr[c] = 1.0f / l[c];
  for_each_tile(group, nq, hd, [&](std::int64_t hh, std::int64_t i, std::int64_t e0, std::int64_t e1) {
    float* oi = o + hh * hd + i * ldq;
    const std::int64_t c = hh * nq + i;
    const float inv = corr[c];
    for (std::int64_t e = e0; e < e1; ++e) oi[e] = Ot[e * ld + c] * inv;
  });
}

constexpr std::int64_t kKBlock = 64;
constexpr std::int64_t kCols = 128;           // target query columns per item (group x nq)
constexpr std::int64_t kMaxQBlock = 128;      // query cap per item (binds only for group 1: the vision tower)
constexpr std::int64_t kWideCols = 512;       // widest item (columns) over any cache
constexpr std::int64_t kLongWideCols = 1024;  // widest item over a cache of >= kLongCache x t keys (512-bit levels)
constexpr std::int64_t kLongCache = 8;        // keys per query from which an item's causal waste is <= 1/16

struct AttnScratch {
  std::vector<float> qt, st, ot, m, l, corr;
  void ensure(std::int64_t hd, std::int64_t ncol) {
    auto sz = [](std::int64_t n) { return static_cast<std::size_t>(n); };
    qt.resize(sz(hd * cpu::odd_lines_ld(ncol)));
    st.resize(sz(kKBlock * cpu::odd_lines_ld(ncol)));
    ot.resize(sz(hd * cpu::odd_lines_ld(ncol)));
    m.resize(sz(ncol));
    l.resize(sz(ncol));
    corr.resize(sz(ncol));
  }
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Queries per work item. A few queries over a long cache (a warm request: t * group <= kWideCols,
/// or <= kLongWideCols when tk >= kLongCache * t, so that computing every query block up to its
/// last query wastes at most t / (2 tk) of the work) make one item per kv head, so each layer reads
/// the cache once instead of once per query block, when the kv heads alone keep every thread busy
/// (131 queries of group 4 over 16k keys: 5 reads of the cache -> 1, fp32 72-74% -> 84-85% of the
/// peak on a Zen 4, docs/PERFORMANCE.md). The wider items only pay with 512-bit vectors: at AVX2 the
/// 1,024-column item's output tile (1 MiB) ran 10% slower than blocks, so narrower levels keep
/// kWideCols. Otherwise at most kCols / group (kMaxQBlock), the
/// t queries split into blocks of near-equal size (129 queries of group 4: 5 x 26, not 4 x 32 + 1),
/// so that no item streams the whole cache for a few columns. Each column's arithmetic does not
/// depend on its block, so the choice changes no bit (and may depend on the thread count).
std::int64_t query_block(std::int64_t t, std::int64_t tk, std::int64_t group, std::int64_t nkv) {
  const std::int64_t widest = tk >= kLongCache * t && cpu::lanes() >= 16 ? kLongWideCols : kWideCols;
  if (t * group <= widest && nkv >= ::clef::ops::num_threads()) return std::max<std::int64_t>(1, t);
  const std::int64_t most = std::max<std::int64_t>(1, std::min<std::int64_t>(kCols / group, kMaxQBlock));
  const std::int64_t blocks = (t + most - 1) / most;
  return (t + blocks - 1) / blocks;
}

/// Online-softmax step for one key block: St [nk, ncol] (row stride lds floats) holds scaled scores; key row p
/// (sequence index p0 + p) is visible to column c when p0 + p <= first_pos + c % nq. Updates m and l, writes corr =
/// e^{m_old - m_new} and turns St into the masked probabilities (exact zeros where masked). Two passes over St: the
/// column maxima, then e^{s - m} row by row with l summed as each row is written (l is scaled by corr first, then adds
/// the rows in order p = 0, 1, ...). Block 0 is always processed first and every query sees key 0, so m is finite after
/// it (no -inf - -inf).
void softmax_block(float* St, std::int64_t lds, std::int64_t nk, std::int64_t ncol, std::int64_t nq, std::int64_t p0,
                   std::int64_t first_pos, float* m, float* l, float* corr) {
  namespace hn = hwy::HWY_NAMESPACE;
  const cpu::DF df;
  const std::int64_t N = cpu::lanes();
  const std::int64_t group = ncol / nq;
  const bool diagonal = p0 + nk - 1 > first_pos;  // some rows are hidden from some columns
  // Columns i < hidden(p) of each head are hidden from key row p.
  auto hidden = [&](std::int64_t p) { return diagonal ? std::min(nq, p0 + p - first_pos) : std::int64_t{0}; };
  for (std::int64_t p = 0; p < nk; ++p) {
    const std::int64_t h = hidden(p);
    for (std::int64_t hh = 0; hh < group && h > 0; ++hh) {
      float* sp = St + p * lds + hh * nq;
      for (std::int64_t i = 0; i < h; ++i) sp[i] = kNegInf;
    }
  }
  for (std::int64_t c = 0; c < ncol; ++c) corr[c] = m[c];  // corr = m_new for now
  for (std::int64_t p = 0; p < nk; ++p) {
    const float* sp = St + p * lds;
    for (std::int64_t c = 0; c < ncol; ++c) corr[c] = std::max(corr[c], sp[c]);
  }
  for (std::int64_t c = 0; c < ncol; ++c) {
    const float mn = corr[c];
    const float cr = m[c] == kNegInf ? 0.0f : std::exp(m[c] - mn);
    l[c] *= cr;
    m[c] = mn;
    corr[c] = cr;
  }
  for (std::int64_t p = 0; p < nk; ++p) {
    float* sp = St + p * lds;
    const std::int64_t h = hidden(p);
    if (h <= 0) {  // e^{s - m} and l += the row, one pass
      std::int64_t c = 0;
      for (; c + N <= ncol; c += N) {
        const auto e = cpu::Exp(df, hn::Sub(hn::LoadU(df, sp + c), hn::LoadU(df, m + c)));
        hn::StoreU(e, df, sp + c);
        hn::StoreU(hn::Add(hn::LoadU(df, l + c), e), df, l + c);
      }
      if (c < ncol) {
        const auto t = static_cast<std::size_t>(ncol - c);
        const auto k = hn::FirstN(df, t);
        const auto e = cpu::Exp(df, hn::Sub(cpu::LoadTail(k, df, sp + c, t), cpu::LoadTail(k, df, m + c, t)));
        cpu::StoreTail(e, k, df, sp + c, t);
        cpu::StoreTail(hn::Add(cpu::LoadTail(k, df, l + c, t), e), k, df, l + c, t);
      }
      continue;
    }
    // A row with hidden entries: e^{-inf - m} comes out as 0 or the least subnormal, so the
    // hidden entries are zeroed before the row joins l.
    for (std::int64_t c = 0; c < ncol; ++c) sp[c] -= m[c];
    cpu::exp_n(sp, sp, ncol);
    for (std::int64_t hh = 0; hh < group; ++hh) {
      float* sh = sp + hh * nq;
      for (std::int64_t i = 0; i < h; ++i) sh[i] = 0.0f;
    }
    for (std::int64_t c = 0; c < ncol; ++c) l[c] += sp[c];
  }
}

// causal: query i sees keys 0..tk-t+i; otherwise every query sees all tk keys (no masking:
// with first_pos = tk no key row is ever past a query column). round_bf16: the scaled queries and
// the probabilities are rounded to bf16 values before their products (the caller passes kc, vc
// already rounded): the bf16 mode on targets without a bf16 dot product.
void attention_impl(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
                    const float* vc, float* o, bool causal, bool round_bf16 = false) {
  const std::int64_t hd = d.hd, group = d.nh / d.nkv;
  const std::int64_t ldq = d.nh * hd, ldk = d.nkv * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::int64_t qblock = query_block(t, tk, group, d.nkv);
  const std::int64_t qblocks = (t + qblock - 1) / qblock;
  const std::int64_t items = d.nkv * qblocks;
  const std::int64_t offset = tk - t;  // sequence index of query 0
#pragma omp parallel
  {
    thread_local AttnScratch sc;
    sc.ensure(hd, group * qblock);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      // Later query blocks have more keys: hand them out first.
      const std::int64_t qb = qblocks - 1 - item / d.nkv;
      const std::int64_t j = item % d.nkv;
      const std::int64_t i0 = qb * qblock;
      const std::int64_t nq = std::min(qblock, t - i0);
      const std::int64_t ncol = group * nq;
      float* Qt = sc.qt.data();
      float* St = sc.st.data();
      float* Ot = sc.ot.data();
      float* m = sc.m.data();
      float* l = sc.l.data();
      float* corr = sc.corr.data();
      // Qt [hd, ncol], column hh * nq + i = query i of head j * group + hh, scaled.
      // Row stride of Qt, St and Ot (the GEMMs read Qt's and St's column panels down their rows): an odd
      // number of cache lines; at ncol floats the usual 128 columns put an AVX2 panel on 8 of L1's 64
      // sets (in-process A/B at AVX2, Zen 3: the kernel 9-11% faster; same bits).
      const std::int64_t ld = cpu::odd_lines_ld(ncol);
      load_queries(q + i0 * ldq + j * group * hd, ldq, group, nq, hd, scale, Qt, ld);
      if (round_bf16) cpu::round_to_bf16(Qt, hd * ld, Qt);
      for (std::int64_t c = 0; c < ncol; ++c) {
        m[c] = kNegInf;
        l[c] = 0.0f;
      }
      const std::int64_t first_pos = causal ? offset + i0 : tk;  // sequence index of query i0
      const std::int64_t kend = causal ? first_pos + nq : tk;    // keys [0, kend) visible to some query
      for (std::int64_t p0 = 0; p0 < kend; p0 += kKBlock) {
        const std::int64_t nk = std::min(kKBlock, kend - p0);
        const float* Kb = kc + p0 * ldk + j * hd;
        const float* Vb = vc + p0 * ldk + j * hd;
        cpu::small_gemm(nk, ncol, hd, Kb, ldk, Qt, ld, St, ld);
        softmax_block(St, ld, nk, ncol, nq, p0, first_pos, m, l, corr);
        if (round_bf16) cpu::round_to_bf16(St, nk * ld, St);
        if (p0 == 0) {
          cpu::small_gemm_at(hd, ncol, nk, Vb, ldk, St, ld, Ot, ld);
        } else {
          cpu::small_gemm_at_rescaled(hd, ncol, nk, Vb, ldk, St, ld, Ot, ld, corr);
        }
      }
      write_output(Ot, ld, l, corr, ncol, group, nq, hd, o + i0 * ldq + j * group * hd, ldq);
    }
  }
}

#if defined(CLEF_HAVE_BF16_DOT)
/// The vdpbf16ps attention over a cache in the kv_bf16_store layouts (hd even): K words [tk, ldk / 2]
/// pair along the head dim, V words [ceil(tk / 2), ldk] pair along the keys.
CLEF_BF16_ATTR void attention_bf16_dot(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q,
                                       const std::uint32_t* kbp, const std::uint32_t* vpp, float* o, bool causal) {
  const std::int64_t hd = d.hd, hd2 = hd / 2, group = d.nh / d.nkv;
  const std::int64_t ldq = d.nh * hd, ldk = d.nkv * hd, ldk2 = ldk / 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::int64_t qblock = query_block(t, tk, group, d.nkv);
  const std::int64_t qblocks = (t + qblock - 1) / qblock;
  const std::int64_t items = d.nkv * qblocks;
  const std::int64_t offset = tk - t;
  const std::int64_t maxcol = group * qblock;
  thread_local std::vector<float> zeros;
  zeros.assign(static_cast<std::size_t>(maxcol), 0.0f);
  const float* zf = zeros.data();
#pragma omp parallel
  {
    thread_local AttnScratch sc;
    thread_local std::vector<std::uint32_t> qp, pp_buf;
    sc.ensure(hd, maxcol);
    qp.resize(static_cast<std::size_t>(hd2 * maxcol));
    pp_buf.resize(static_cast<std::size_t>((kKBlock / 2) * maxcol));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const std::int64_t qb = qblocks - 1 - item / d.nkv;
      const std::int64_t j = item % d.nkv;
      const std::int64_t i0 = qb * qblock;
      const std::int64_t nq = std::min(qblock, t - i0);
      const std::int64_t ncol = group * nq;
      std::uint32_t* Qp = qp.data();
      std::uint32_t* Pp = pp_buf.data();
      float* St = sc.st.data();
      float* Ot = sc.ot.data();
      float* m = sc.m.data();
      float* l = sc.l.data();
      float* corr = sc.corr.data();
      // Qp [hd/2, ncol]: pair words of the scaled queries (rows 2p and 2p + 1 of Qt), column hh * nq + i.
      float* Qt = sc.qt.data();
      load_queries(q + i0 * ldq + j * group * hd, ldq, group, nq, hd, scale, Qt, ncol);
      for (std::int64_t p = 0; p < hd2; ++p)
        cpu::pack_pairs<true>(Qt + 2 * p * ncol, Qt + (2 * p + 1) * ncol, ncol, Qp + p * ncol);
      for (std::int64_t c = 0; c < ncol; ++c) {
        m[c] = kNegInf;
        l[c] = 0.0f;
      }
      const std::int64_t first_pos = causal ? offset + i0 : tk;
      const std::int64_t kend = causal ? first_pos + nq : tk;
      for (std::int64_t p0 = 0; p0 < kend; p0 += kKBlock) {
        const std::int64_t nk = std::min(kKBlock, kend - p0);
        cpu::bf16_gemm(nk, ncol, hd2, kbp + p0 * ldk2 + j * hd2, ldk2, Qp, ncol, St, ncol, false);
        softmax_block(St, ncol, nk, ncol, nq, p0, first_pos, m, l, corr);
        const std::int64_t npp = (nk + 1) / 2;
        for (std::int64_t p = 0; p < npp; ++p) {
          const float* lo = St + 2 * p * ncol;
          cpu::pack_pairs(lo, 2 * p + 1 < nk ? lo + ncol : zf, ncol, Pp + p * ncol);
        }
        // p0 is a multiple of kKBlock (even), so its pairs start at word row p0 / 2.
        const std::uint32_t* Vp = vpp + (p0 / 2) * ldk + j * hd;
        if (p0 == 0) cpu::bf16_gemm_at(hd, ncol, npp, Vp, ldk, Pp, ncol, Ot, ncol, false);
        else cpu::bf16_gemm_at_rescaled(hd, ncol, npp, Vp, ldk, Pp, ncol, Ot, ncol, corr);
      }
      write_output(Ot, ncol, l, corr, ncol, group, nq, hd, o + i0 * ldq + j * group * hd, ldq);
    }
  }
}
#endif  // CLEF_HAVE_BF16_DOT

/// bf16 attention without a bf16 dot product: k and v rounded to bf16 values once, then the
/// fp32 kernel with the queries and probabilities rounded as well.
void attention_bf16_emulated(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
                             const float* vc, float* o, bool causal) {
  const std::int64_t n = tk * d.nkv * d.hd;
  thread_local std::vector<float> kr, vr;
  kr.resize(static_cast<std::size_t>(n));
  vr.resize(static_cast<std::size_t>(n));
  float* kp = kr.data();
  float* vp = vr.data();
  constexpr std::int64_t kBlock = 1 << 14;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t s0 = b * kBlock, len = std::min(kBlock, n - s0);
    cpu::round_to_bf16(kc + s0, len, kp + s0);
    cpu::round_to_bf16(vc + s0, len, vp + s0);
  }
  attention_impl(d, t, tk, q, kp, vp, o, causal, true);
}

/// The emulated bf16 attention over a kv_bf16_store cache: its rows widened back to fp32 (exact,
/// so the same values attention_bf16_emulated rounds to), then the fp32 kernel as above.
void attention_bf16_emulated_kv(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q,
                                const std::uint32_t* kp, const std::uint32_t* vp, float* o, bool causal) {
  const std::int64_t w = d.nkv * d.hd, w2 = w / 2;
  thread_local std::vector<float> kr, vr;
  kr.resize(static_cast<std::size_t>(tk * w));
  vr.resize(static_cast<std::size_t>(tk * w));
  float* kf = kr.data();
  float* vf = vr.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < tk; ++r) {
    const std::uint32_t* kw = kp + r * w2;
    float* kd = kf + r * w;
    for (std::int64_t c = 0; c < w2; ++c) {
      kd[2 * c] = std::bit_cast<float>(kw[c] << 16);
      kd[2 * c + 1] = std::bit_cast<float>(kw[c] & 0xFFFF0000u);
    }
    const std::uint32_t* vw = vp + (r / 2) * w;
    float* vd = vf + r * w;
    if (r % 2 == 0) {
      for (std::int64_t c = 0; c < w; ++c) vd[c] = std::bit_cast<float>(vw[c] << 16);
    } else {
      for (std::int64_t c = 0; c < w; ++c) vd[c] = std::bit_cast<float>(vw[c] & 0xFFFF0000u);
    }
  }
  attention_impl(d, t, tk, q, kf, vf, o, causal, true);
}

}  // namespace

void AttentionImpl(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
                   const float* vc, float* o, bool causal) {
  attention_impl(d, t, tk, q, kc, vc, o, causal);
}

void AttentionBf16KvImpl(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q,
                         const std::uint32_t* kp, const std::uint32_t* vp, float* o, bool causal) {
#if defined(CLEF_HAVE_BF16_DOT)
  attention_bf16_dot(d, t, tk, q, kp, vp, o, causal);
#else
  attention_bf16_emulated_kv(d, t, tk, q, kp, vp, o, causal);
#endif
}

void AttentionBf16Impl(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
                       const float* vc, float* o, bool causal) {
#if defined(CLEF_HAVE_BF16_DOT)
  if (d.hd % 2 == 0) {  // pairs along hd: an odd head dim takes the emulated path
    // The rows in the kv_bf16_store layouts, in even row blocks (a V word holds two rows).
    const std::int64_t w = d.nkv * d.hd;
    thread_local std::vector<std::uint32_t> kb, vb;
    kb.resize(static_cast<std::size_t>(tk * w / 2));
    vb.resize(static_cast<std::size_t>((tk + 1) / 2 * w));
    std::uint32_t* kbp = kb.data();
    std::uint32_t* vbp = vb.data();
    constexpr std::int64_t kRows = 64;
#pragma omp parallel for schedule(static)
    for (std::int64_t r0 = 0; r0 < tk; r0 += kRows) {
      kv_bf16_store(kc + r0 * w, vc + r0 * w, r0, std::min(kRows, tk - r0), w, kbp, vbp);
    }
    attention_bf16_dot(d, t, tk, q, kbp, vbp, o, causal);
    return;
  }
#endif
  attention_bf16_emulated(d, t, tk, q, kc, vc, o, causal);
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(AttentionImpl);
HWY_EXPORT(AttentionBf16Impl);
HWY_EXPORT(AttentionBf16KvImpl);

namespace {
void check_shapes(const char* what, const AttentionDims& d, std::int64_t t, std::int64_t tk) {
  if (d.nh <= 0 || d.nkv <= 0 || d.hd <= 0 || d.nh % d.nkv != 0 || tk < t) {
    throw InvalidArgument(std::string(what) + ": bad shapes nh=" + std::to_string(d.nh) +
                          " nkv=" + std::to_string(d.nkv) + " t=" + std::to_string(t) + " tk=" + std::to_string(tk));
  }
}
}  // namespace

void attention(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
               const float* vc, float* o) {
  check_shapes("attention", d, t, tk);
  if (t > 0) CLEF_DISPATCH(AttentionImpl)(d, t, tk, q, kc, vc, o, true);
}

void attention_bf16(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
                    const float* vc, float* o) {
  check_shapes("attention_bf16", d, t, tk);
  if (t > 0) CLEF_DISPATCH(AttentionBf16Impl)(d, t, tk, q, kc, vc, o, true);
}

void attention_bf16_kv(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const std::uint32_t* kp,
                       const std::uint32_t* vp, float* o) {
  check_shapes("attention_bf16_kv", d, t, tk);
  if (d.hd % 2 != 0) throw InvalidArgument("attention_bf16_kv: odd head dim " + std::to_string(d.hd));
  if (t > 0) CLEF_DISPATCH(AttentionBf16KvImpl)(d, t, tk, q, kp, vp, o, true);
}

void kv_bf16_store(const float* k_rows, const float* v_rows, std::int64_t r0, std::int64_t n, std::int64_t width,
                   std::uint32_t* kp, std::uint32_t* vp) {
  if (width % 2 != 0) throw InvalidArgument("kv_bf16_store: odd row width " + std::to_string(width));
  thread_local std::vector<std::uint16_t> row;
  row.resize(static_cast<std::size_t>(width));
  std::uint16_t* b = row.data();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = r0 + i;
    f32_to_bf16_n(k_rows + i * width, width, b);
    std::uint32_t* kw = kp + r * (width / 2);
    for (std::int64_t c = 0; c < width / 2; ++c)
      kw[c] = static_cast<std::uint32_t>(b[2 * c]) | static_cast<std::uint32_t>(b[2 * c + 1]) << 16;
    f32_to_bf16_n(v_rows + i * width, width, b);
    std::uint32_t* vw = vp + (r / 2) * width;
    if (r % 2 == 0) {
      for (std::int64_t c = 0; c < width; ++c) vw[c] = b[c];
    } else {
      for (std::int64_t c = 0; c < width; ++c) vw[c] = (vw[c] & 0xFFFFu) | static_cast<std::uint32_t>(b[c]) << 16;
    }
  }
}

void attention_full(const AttentionDims& d, std::int64_t t, const float* q, const float* k, const float* v, float* o) {
  check_shapes("attention_full", d, t, t);
  if (t > 0) CLEF_DISPATCH(AttentionImpl)(d, t, t, q, k, v, o, false);
}

void attention_full_bf16(const AttentionDims& d, std::int64_t t, const float* q, const float* k, const float* v,
                         float* o) {
  check_shapes("attention_full_bf16", d, t, t);
  if (t > 0) CLEF_DISPATCH(AttentionBf16Impl)(d, t, t, q, k, v, o, false);
}

}  // namespace clef::ops
#endif  // HWY_ONCE

// Optimized causal GQA attention (architecture.md §3.5): flash-style blocks with an online
// softmax. Work items are (query head, block of up to 32 queries); each walks key blocks of 64
// up to its causal limit, so memory is O(block), never [t, tk].
//   S = (Q Kᵀ) · hd^-0.5 (masked above the diagonal by sequence index)
//   m' = max(m, rowmax S);  l' = l e^{m-m'} + Σ e^{S-m'};  O' = O e^{m-m'} + e^{S-m'} V
//   out = O / l
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/microgemm.h"
#include "ops/cpu/vmath.h"
#include "ops/ops.h"

namespace clef::ops {
namespace {

constexpr std::int64_t kQBlock = 32;
constexpr std::int64_t kKBlock = 64;

struct AttnScratch {
  std::vector<float> kt, s, acc, m, l, corr;
  void ensure(std::int64_t hd) {
    kt.resize(static_cast<std::size_t>(hd * kKBlock));
    s.resize(static_cast<std::size_t>(kQBlock * kKBlock));
    acc.resize(static_cast<std::size_t>(kQBlock * hd));
    m.resize(static_cast<std::size_t>(kQBlock));
    l.resize(static_cast<std::size_t>(kQBlock));
    corr.resize(static_cast<std::size_t>(kQBlock));
  }
};

}  // namespace

void attention(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q,
               const float* kc, const float* vc, float* o) {
  if (d.nh <= 0 || d.nkv <= 0 || d.hd <= 0 || d.nh % d.nkv != 0 || tk < t) {
    throw InvalidArgument("attention: bad shapes nh=" + std::to_string(d.nh) + " nkv=" +
                          std::to_string(d.nkv) + " t=" + std::to_string(t) + " tk=" + std::to_string(tk));
  }
  if (t <= 0) return;
  const std::int64_t hd = d.hd, group = d.nh / d.nkv;
  const std::int64_t ldq = d.nh * hd, ldk = d.nkv * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const std::int64_t qblocks = (t + kQBlock - 1) / kQBlock;
  const std::int64_t items = d.nh * qblocks;
  const std::int64_t offset = tk - t;  // sequence index of query 0
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel
  {
    thread_local AttnScratch sc;
    sc.ensure(hd);
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      // Later query blocks have more keys: hand them out first.
      const std::int64_t qb = qblocks - 1 - item / d.nh;
      const std::int64_t h = item % d.nh;
      const std::int64_t j = h / group;
      const std::int64_t i0 = qb * kQBlock;
      const std::int64_t nq = std::min(kQBlock, t - i0);
      const float* Q = q + i0 * ldq + h * hd;
      float* acc = sc.acc.data();
      float* m = sc.m.data();
      float* l = sc.l.data();
      for (std::int64_t i = 0; i < nq; ++i) {
        m[i] = kNegInf;
        l[i] = 0.0f;
      }
      for (std::int64_t e = 0; e < nq * hd; ++e) acc[e] = 0.0f;
      const std::int64_t kend = offset + i0 + nq;  // keys [0, kend) are visible to some row
      for (std::int64_t p0 = 0; p0 < kend; p0 += kKBlock) {
        const std::int64_t nk = std::min(kKBlock, kend - p0);
        // Kt [hd, nk] for this key block and kv head
        cpu::transpose(nk, hd, kc + p0 * ldk + j * hd, ldk, sc.kt.data(), nk);
        float* S = sc.s.data();
        cpu::small_gemm(nq, nk, hd, Q, ldq, sc.kt.data(), nk, S, nk, scale);
        for (std::int64_t i = 0; i < nq; ++i) {
          float* si = S + i * nk;
          const std::int64_t last = offset + i0 + i;  // last visible key index of row i
          const std::int64_t valid = std::max<std::int64_t>(0, std::min(nk, last - p0 + 1));
          float mx = m[i];
          for (std::int64_t c = 0; c < valid; ++c) mx = std::max(mx, si[c]);
          for (std::int64_t c = 0; c < valid; ++c) si[c] -= mx;
          cpu::exp_n(si, si, valid);
          for (std::int64_t c = valid; c < nk; ++c) si[c] = 0.0f;
          float sum = 0.0f;
          for (std::int64_t c = 0; c < valid; ++c) sum += si[c];
          const float corr = m[i] == kNegInf ? 0.0f : std::exp(m[i] - mx);
          l[i] = l[i] * corr + sum;
          m[i] = mx;
          if (corr != 1.0f) {
            float* ai = acc + i * hd;
            for (std::int64_t e = 0; e < hd; ++e) ai[e] *= corr;
          }
        }
        cpu::small_gemm(nq, hd, nk, S, nk, vc + p0 * ldk + j * hd, ldk, acc, hd, 1.0f, true);
      }
      for (std::int64_t i = 0; i < nq; ++i) {
        float* oi = o + (i0 + i) * ldq + h * hd;
        const float inv = 1.0f / l[i];
        for (std::int64_t e = 0; e < hd; ++e) oi[e] = acc[i * hd + e] * inv;
      }
    }
  }
}

}  // namespace clef::ops

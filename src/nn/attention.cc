// SPDX-License-Identifier: MIT
#include "nn/attention.h"

#include <algorithm>

#include "core/error.h"
#include "nn/linear.h"
#include "ops/profile.h"

namespace clef::nn {

GatedAttention::GatedAttention(const AttentionConfig& cfg, const AttentionWeights& w, ops::Precision p,
                               const std::string& name)
    : cfg_(cfg),
      precision_(p),
      q_(linear_weight(w.q_proj, p, name + ".q_proj")),
      k_(linear_weight(w.k_proj, p, name + ".k_proj")),
      v_(linear_weight(w.v_proj, p, name + ".v_proj")),
      o_(linear_weight(w.o_proj, p, name + ".o_proj")),
      q_norm_(offset_norm_f32(w.q_norm, name + ".q_norm")),
      k_norm_(offset_norm_f32(w.k_norm, name + ".k_norm")) {
  const ops::AttentionDims& d = cfg.dims;
  if (q_.n() != 2 * d.nh * d.hd || k_.n() != d.nkv * d.hd || o_.k() != d.nh * d.hd || cfg.rotary_dim > d.hd ||
      cfg.rotary_dim % 2 != 0) {
    throw ModelLoadError(name + ": tensor shapes disagree with the attention config");
  }
}

KvCache GatedAttention::new_cache() const {
  KvCache c;
  c.width = cfg_.dims.nkv * cfg_.dims.hd;
  c.bf16 = bf16_core() && cfg_.dims.hd % 2 == 0;
  return c;
}

AttentionActivations::AttentionActivations(const AttentionConfig& c, std::int64_t n)
    : rows(n),
      q_gate(static_cast<std::size_t>(n * 2 * c.dims.nh * c.dims.hd)),
      q(static_cast<std::size_t>(n * c.dims.nh * c.dims.hd)),
      k(static_cast<std::size_t>(n * c.dims.nkv * c.dims.hd)),
      v(k.size()),
      core(q.size()) {}

std::size_t AttentionActivations::floats() const noexcept {
  return q_gate.size() + q.size() + k.size() + v.size() + core.size();
}

void GatedAttention::forward(const float* x, std::int64_t n, const float* cos, const float* sin, KvCache& kv, float* h,
                             AttentionActivations& act) const {
  const AttentionSegment one{0, n, &kv};
  forward_batch(x, std::span<const AttentionSegment>(&one, 1), cos, sin, h, act);
}

void GatedAttention::forward_batch(const float* x, std::span<const AttentionSegment> segs, const float* cos,
                                   const float* sin, float* h, AttentionActivations& act) const {
  const ops::AttentionDims& d = cfg_.dims;
  const std::int64_t qw = d.nh * d.hd, kvw = d.nkv * d.hd;
  thread_local std::vector<RowRange> rows;
  const std::int64_t n = row_ranges(segs, act.rows, "attention", rows);
  float* qg = act.q_gate.data();
  float* q = act.q.data();
  float* k = act.k.data();
  float* v = act.v.data();
  float* o = act.core.data();

  {
    CLEF_PROF_SCOPE("attn.qkv_proj");
    const ops::LinearOut outs[] = {{&q_, qg}, {&k_, k}, {&v_, v}};
    linear_shared_rows(x, n, rows, outs);
  }
  {
    CLEF_PROF_SCOPE("attn.norm+rope+cache");
    // Per-head interleaved split (pitfall 2): head j = qg[:, j, 0:hd] query, [hd:2hd] gate. The
    // query halves are normalized straight into q; the gate halves stay in qg for attn.gate.
    ops::rms_norm_offset_strided(qg, 2 * d.hd, n * d.nh, d.hd, q_norm_.data(), cfg_.eps, q);
    ops::rms_norm_offset(k, n * d.nkv, d.hd, k_norm_.data(), cfg_.eps, k);
    ops::apply_rope(q, n, d.nh, d.hd, qw, cfg_.rotary_dim, cos, sin);
    ops::apply_rope(k, n, d.nkv, d.hd, kvw, cfg_.rotary_dim, cos, sin);
    for (const AttentionSegment& sg : segs) sg.kv->append(k + sg.row0 * kvw, v + sg.row0 * kvw, sg.n);
  }
  {
    CLEF_PROF_SCOPE("attn.core");
    for (const AttentionSegment& sg : segs) {
      const KvCache& kv = *sg.kv;
      const float* qs = q + sg.row0 * qw;
      float* os = o + sg.row0 * qw;
      if (kv.bf16) {
        ops::attention_bf16_kv(d, sg.n, kv.length, qs, kv.kw.data(), kv.vw.data(), os);
      } else if (bf16_core()) {
        ops::attention_bf16(d, sg.n, kv.length, qs, kv.k.data(), kv.v.data(), os);
      } else {
        ops::attention(d, sg.n, kv.length, qs, kv.k.data(), kv.v.data(), os);
      }
    }
  }
  {
    CLEF_PROF_SCOPE("attn.gate");
    ops::sigmoid_mul_rows(o, n * d.nh, d.hd, qg + d.hd, 2 * d.hd);  // o *= sigmoid(gate), per head row
  }
  CLEF_PROF_SCOPE("attn.o_proj");
  const ops::LinearOut out{&o_, h, /*accumulate=*/true};
  linear_shared_rows(o, n, rows, std::span<const ops::LinearOut>(&out, 1));
}

}  // namespace clef::nn

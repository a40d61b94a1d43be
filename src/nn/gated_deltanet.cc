#include "nn/gated_deltanet.h"

#include <cmath>

#include "core/error.h"
#include "nn/linear.h"
#include "ops/profile.h"

namespace clef::nn {

GatedDeltaNet::GatedDeltaNet(const GdnConfig& cfg, const GdnWeights& w, ops::Precision p,
                             const std::string& name)
    : cfg_(cfg),
      qkv_(linear_weight(w.in_proj_qkv, p, name + ".in_proj_qkv")),
      z_(linear_weight(w.in_proj_z, p, name + ".in_proj_z")),
      b_(linear_weight(w.in_proj_b, p, name + ".in_proj_b")),
      a_(linear_weight(w.in_proj_a, p, name + ".in_proj_a")),
      out_(linear_weight(w.out_proj, p, name + ".out_proj")),
      conv_w_(small_f32(w.conv1d, name + ".conv1d")),  // [C, 1, K] == [C, K]
      dt_bias_(small_f32(w.dt_bias, name + ".dt_bias")),
      a_log_(small_f32(w.a_log, name + ".A_log")),
      norm_w_(small_f32(w.norm, name + ".norm")) {
  if (static_cast<std::int64_t>(conv_w_.size()) != cfg.conv_dim() * cfg.conv_k ||
      qkv_.n() != cfg.conv_dim() || out_.k() != cfg.value_dim()) {
    throw ModelLoadError(name + ": tensor shapes disagree with the GDN config");
  }
}

GdnState GatedDeltaNet::new_state() const {
  GdnState s;
  s.conv.assign(static_cast<std::size_t>((cfg_.conv_k - 1) * cfg_.conv_dim()), 0.0f);
  s.rec.assign(static_cast<std::size_t>(cfg_.dims.hv * cfg_.dims.dk * cfg_.dims.dv), 0.0f);
  return s;
}

void GatedDeltaNet::forward(const float* x, std::int64_t n, GdnState& st, float* h, Scratch& s) const {
  const ops::GdnDims& d = cfg_.dims;
  const std::int64_t cd = cfg_.conv_dim(), kd = cfg_.key_dim(), vd = cfg_.value_dim();
  float* mixed = s.get(kSlotBase + 0, n * cd);  // [n, conv_dim] = [q | k | v] pre-conv
  float* u = s.get(kSlotBase + 1, n * cd);      // [n, conv_dim] post conv + SiLU
  float* z = s.get(kSlotBase + 2, n * vd);      // [n, Hv, dv] output gate
  float* bg = s.get(kSlotBase + 3, 4 * n * d.hv);  // b, a, beta, g: [n, Hv] each
  float* o = s.get(kSlotBase + 4, n * vd);      // [n, Hv, dv] delta-rule output
  float* b = bg;
  float* a = bg + n * d.hv;
  float* beta = bg + 2 * n * d.hv;
  float* g = bg + 3 * n * d.hv;

  {
    CLEF_PROF_SCOPE("gdn.in_proj(qkv,z,b,a)");
    ops::linear(x, n, qkv_, mixed);
    ops::linear(x, n, z_, z);
    ops::linear(x, n, b_, b);
    ops::linear(x, n, a_, a);
  }
  {
    CLEF_PROF_SCOPE("gdn.conv+l2norm+gates");
    ops::causal_conv1d_silu(mixed, n, cd, conv_w_.data(), cfg_.conv_k, st.conv.data(), u);
    // q, k L2 norm per (token, k-head); q also scaled by dk^-0.5 (after the norm, pitfall 8).
    const float qscale = 1.0f / std::sqrt(static_cast<float>(d.dk));
    // Token by token (the heads of one token are contiguous): each call is below the ops'
    // parallel threshold, so this is one cache-friendly pass instead of 2·Hk strided parallel loops.
    for (std::int64_t i = 0; i < n; ++i) {
      ops::l2norm_rows(u + i * cd, d.hk, d.dk, d.dk, 1e-6f, qscale);
      ops::l2norm_rows(u + i * cd + kd, d.hk, d.dk, d.dk, 1e-6f, 1.0f);
    }
    ops::gdn_gates(b, a, n, d.hv, a_log_.data(), dt_bias_.data(), beta, g);
  }
  {
    CLEF_PROF_SCOPE("gdn.delta_rule");
    ops::gated_delta_rule(d, n, u, u + kd, cd, u + 2 * kd, cd, g, beta, st.rec.data(), o);
  }
  {
    CLEF_PROF_SCOPE("gdn.gated_norm");
    ops::gated_rms_norm(o, z, n * d.hv, d.dv, norm_w_.data(), cfg_.eps, o);  // per head
  }
  CLEF_PROF_SCOPE("gdn.out_proj");
  ops::linear(o, n, out_, h, /*accumulate=*/true);
}

}  // namespace clef::nn

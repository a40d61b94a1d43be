// Gated DeltaNet mixer (architecture.md §4): projections, causal conv with carried state, q/k L2
// norm, gates, the delta rule (chunked form), per-head gated RMSNorm, output projection.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/weight_store.h"
#include "nn/scratch.h"
#include "nn/state.h"
#include "ops/gemm.h"
#include "ops/ops.h"

namespace clef::nn {

/// Shapes of one GDN layer.
struct GdnConfig {
  std::int64_t hidden = 0;  ///< H
  ops::GdnDims dims;        ///< Hk, Hv, dk, dv
  std::int64_t conv_k = 4;  ///< causal conv width K
  float eps = 1e-6f;        ///< gated RMSNorm epsilon (rms_norm_eps)
  std::int64_t key_dim() const noexcept { return dims.hk * dims.dk; }
  std::int64_t value_dim() const noexcept { return dims.hv * dims.dv; }
  std::int64_t conv_dim() const noexcept { return 2 * key_dim() + value_dim(); }
};

/// The checkpoint tensors of one GDN layer (shapes in models/qwen35/weights.h).
struct GdnWeights {
  WeightView in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d, dt_bias, a_log, norm, out_proj;
};

class GatedDeltaNet {
 public:
  GatedDeltaNet() = default;
  GatedDeltaNet(const GdnConfig& cfg, const GdnWeights& w, ops::Precision p, const std::string& name);

  /// A zeroed state for a new sequence.
  GdnState new_state() const;

  /// x [n, H] (input_layernorm output); st carried in/out; h [n, H] residual, h += mixer(x).
  /// Uses scratch slots kSlotBase..kSlotBase+5.
  void forward(const float* x, std::int64_t n, GdnState& st, float* h, Scratch& s) const;

  static constexpr std::size_t kSlotBase = 0;

 private:
  GdnConfig cfg_;
  ops::GemmWeight qkv_, z_, b_, a_, out_;
  std::vector<float> conv_w_;  ///< [conv_dim, K]
  std::vector<float> dt_bias_, a_log_, norm_w_;
};

}  // namespace clef::nn

// SPDX-License-Identifier: MIT
// Gated full attention (docs/MODEL.md §3): q/gate projection (per-head interleaved), k/v
// projections, per-head offset q/k RMSNorm, partial M-RoPE, KV-cache append, causal GQA
// attention, sigmoid output gate, output projection.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/weight_store.h"
#include "nn/state.h"
#include "ops/gemm.h"
#include "ops/ops.h"

namespace clef::nn {

struct AttentionConfig {
  std::int64_t hidden = 0;      ///< H
  ops::AttentionDims dims;      ///< nh, nkv, hd
  std::int64_t rotary_dim = 0;  ///< rotated dims per head
  float eps = 1e-6f;            ///< q/k RMSNorm epsilon
};

struct AttentionWeights {
  WeightView q_proj, k_proj, v_proj, o_proj, q_norm, k_norm;
};

/// The activation buffers of GatedAttention::forward for chunks of up to `rows` tokens, sized from
/// the layer config (shared by every full-attention layer of a model).
struct AttentionActivations {
  std::int64_t rows = 0;      ///< capacity in tokens
  std::vector<float> q_gate;  ///< [rows, nh, 2·hd]: per head [query | gate] (q_proj output; the gate read in place)
  std::vector<float> q;       ///< [rows, nh, hd]
  std::vector<float> k, v;    ///< [rows, nkv, hd] each: the chunk's new keys/values
  std::vector<float> core;    ///< [rows, nh, hd]: attention output before the gate

  AttentionActivations() = default;
  AttentionActivations(const AttentionConfig& c, std::int64_t rows);
  std::size_t floats() const noexcept;
};

/// One sequence of a batched chunk (GatedAttention::forward_batch): its rows [row0, row0 + n) and
/// its KV cache.
struct AttentionSegment {
  std::int64_t row0 = 0;
  std::int64_t n = 0;
  KvCache* kv = nullptr;
};

class GatedAttention {
 public:
  GatedAttention() = default;
  GatedAttention(const AttentionConfig& cfg, const AttentionWeights& w, ops::Precision p, const std::string& name);

  /// An empty cache for a new sequence.
  KvCache new_cache() const;

  /// x [n, H] normalized input; cos/sin [n, rotary_dim/2] rotary tables of the n new tokens;
  /// the n new tokens are appended to `kv`; h [n, H] residual, h += attention(x). In kBF16 and kInt8
  /// the attention core multiplies bf16-rounded q/k/v/probabilities (ops::attention_bf16_kv).
  /// `act` holds the intermediates; throws InvalidArgument when n exceeds act.rows.
  void forward(const float* x, std::int64_t n, const float* cos, const float* sin, KvCache& kv, float* h,
               AttentionActivations& act) const;

  /// forward() for several sequences at once (docs/ARCHITECTURE.md "Batched prefill"): x, h [m, H]
  /// and cos/sin [m, rotary_dim/2] stack the segments' rows (consecutive ranges covering [0, m) in
  /// order; each row's rotary table is its own sequence's position). The projections run on all m
  /// rows where their kernels compute rows independently (nn::linear_shared_rows), else per segment;
  /// each segment appends to its own KV cache and attends over it alone. Each segment's rows and
  /// cache get exactly the bits forward() gives them alone. Throws InvalidArgument when m exceeds
  /// act.rows or the segments do not tile [0, m).
  void forward_batch(const float* x, std::span<const AttentionSegment> segs, const float* cos, const float* sin,
                     float* h, AttentionActivations& act) const;

 private:
  AttentionConfig cfg_;
  ops::Precision precision_ = ops::Precision::kF32;
  /// The bf16 and int8 modes run the core on bf16 operands (ops::attention_bf16[_kv], docs/NUMERICS.md
  /// "Precision modes"): vdpbf16ps where the level has it, the same rounded operands through the fp32
  /// kernel elsewhere (same operands, another summation order: results differ slightly between levels);
  /// fp32 mode runs ops::attention.
  bool bf16_core() const noexcept { return precision_ == ops::Precision::kBF16 || precision_ == ops::Precision::kInt8; }
  ops::GemmWeight q_, k_, v_, o_;
  std::vector<float> q_norm_, k_norm_;
};

}  // namespace clef::nn

// SPDX-License-Identifier: MIT
// Gated DeltaNet mixer (docs/MODEL.md §4): projections, causal conv with carried state, q/k L2
// norm, gates, the delta rule (chunked form), per-head gated RMSNorm, output projection.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/weight_store.h"
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
  /// The checkpoint stores the V heads in llama.cpp's tiled order (GGUF with Hk != Hv): stored
  /// head t = j*Hk + kh holds grouped head h = kh*r + j (r = Hv/Hk; grouped: v-head h reads
  /// k-head h / r). The layer restores the grouped order: the small tensors (conv V channels,
  /// dt_bias, A) are permuted at load, the qkv V rows, z, b and a projection outputs are permuted
  /// per token right after their GEMMs (each output element is the same dot product wherever its
  /// row sits), and out_proj's columns are copied once in grouped order (so its reduction over
  /// Hv*dv runs in the folder's order). Results equal the grouped checkpoint's bit for bit.
  bool v_heads_tiled = false;
  std::int64_t key_dim() const noexcept { return dims.hk * dims.dk; }
  std::int64_t value_dim() const noexcept { return dims.hv * dims.dv; }
  std::int64_t conv_dim() const noexcept { return 2 * key_dim() + value_dim(); }
};

/// The checkpoint tensors of one GDN layer (shapes in models/qwen35/weights.h; conv1d may also
/// be [conv_dim, K], as GGUF stores it). a_log is A_log, or A itself when a_log.stored is kNegExp.
struct GdnWeights {
  WeightView in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d, dt_bias, a_log, norm, out_proj;
};

/// The activation buffers of GatedDeltaNet::forward for chunks of up to `rows` tokens, sized from
/// the layer config (every GDN layer of a model has the same shapes and shares one set).
struct GdnActivations {
  std::int64_t rows = 0;          ///< capacity in tokens
  std::vector<float> mixed;       ///< [rows, conv_dim]: q | k | v before the conv
  std::vector<float> conv;        ///< [rows, conv_dim]: after the causal conv + SiLU
  std::vector<float> z;           ///< [rows, Hv, dv]: output gate
  std::vector<float> gates;       ///< 4 blocks of [n, Hv] for a chunk of n: b, a, beta, g
  std::vector<float> core;        ///< [rows, Hv, dv]: delta-rule output
  std::vector<float> head_order;  ///< [Hv, dv]: one token's V heads while reordering (tiled checkpoints)

  GdnActivations() = default;
  GdnActivations(const GdnConfig& c, std::int64_t rows);
  std::size_t floats() const noexcept;
};

/// One sequence of a batched chunk (GatedDeltaNet::forward_batch): its rows [row0, row0 + n) and
/// its state.
struct GdnSegment {
  std::int64_t row0 = 0;
  std::int64_t n = 0;
  GdnState* state = nullptr;
};

class GatedDeltaNet {
 public:
  GatedDeltaNet() = default;
  GatedDeltaNet(const GdnConfig& cfg, const GdnWeights& w, ops::Precision p, const std::string& name);

  /// A zeroed state for a new sequence.
  GdnState new_state() const;

  /// x [n, H] (input_layernorm output); st carried in/out; h [n, H] residual, h += mixer(x).
  /// `act` holds the intermediates (sized for this layer's config). Throws InvalidArgument when n
  /// exceeds act.rows.
  void forward(const float* x, std::int64_t n, GdnState& st, float* h, GdnActivations& act) const;

  /// forward() for several sequences at once (docs/ARCHITECTURE.md "Batched prefill"): x [m, H]
  /// and h [m, H] stack the segments' rows (consecutive ranges covering [0, m) in order), each
  /// segment carrying its own state. The projections run on all m rows where their kernels compute
  /// rows independently (nn::linear_shared_rows), else per segment; the conv and the delta rule run
  /// per segment. Each segment's rows and state get exactly the bits forward() gives them alone.
  /// Throws InvalidArgument when m exceeds act.rows or the segments do not tile [0, m).
  void forward_batch(const float* x, std::span<const GdnSegment> segs, float* h, GdnActivations& act) const;

 private:
  GdnConfig cfg_;
  /// Stored (tiled) V-head position of grouped head h, h in [0, Hv) (identity when not tiled).
  std::int64_t stored_head(std::int64_t h) const noexcept;
  /// x [rows, stride]: the Hv blocks of `width` floats at `offset` of each row, from stored to
  /// grouped order (tmp: Hv*width floats).
  void to_grouped(float* x, std::int64_t rows, std::int64_t stride, std::int64_t offset, std::int64_t width,
                  float* tmp) const;

  /// x [rows, stride]: the Hv blocks of `width` floats at the start of each row, from grouped to
  /// stored order (the inverse of to_grouped; tmp: Hv*width floats).
  void to_stored(float* x, std::int64_t rows, std::int64_t stride, std::int64_t width, float* tmp) const;

  /// out_proj with its columns in grouped order (tiled checkpoints whose V heads are whole blocks of
  /// the dtype); null otherwise, and for tiled block-quantized weights whose blocks span V heads
  /// (a K-quant's 256 columns over dv = 128), forward moves the delta-rule output to the stored order.
  std::shared_ptr<const std::vector<std::byte>> out_grouped_;
  ops::GemmWeight qkv_, z_, b_, a_, out_;
  std::vector<float> conv_w_;                    ///< [conv_dim, K]
  std::vector<float> conv_taps_;                 ///< conv_w_ transposed, [K, conv_dim] (ops::GdnInputStage)
  std::vector<float> dt_bias_, neg_a_, norm_w_;  ///< neg_a_: A = -exp(A_log), [Hv]
  bool bf16_delta_ = false;  ///< bf16 and int8 mode: ops::gated_delta_rule_bf16 (docs/NUMERICS.md "Precision modes")
};

}  // namespace clef::nn

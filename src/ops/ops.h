// Device-agnostic op functions of the Qwen3.5 backbone (architecture.md §2-§7).
//
// Every op exists twice with the same signature:
//   clef::ops::ref::NAME   plain scalar reference, written as the formula reads; the test oracle,
//                          kept forever (src/ops/ref/*.cc);
//   clef::ops::NAME        the optimized CPU implementation (src/ops/cpu/*.cc), vectorized and
//                          parallelized over the engine's one OpenMP pool (ops/parallel.h).
// tests/unit/test_ops.cc compares the two on random inputs with odd shapes.
//
// Conventions: all activations are float32, row-major, contiguous unless a stride is given;
// shapes are written [rows, cols]. Sizes are std::int64_t. The ops do not allocate on the hot
// path except for small per-thread scratch. Invalid sizes throw InvalidArgument.
// The GEMM lives in ops/gemm.h.
#pragma once

#include <cstdint>
#include <span>

namespace clef::ops {

/// Shapes of one Gated DeltaNet layer's recurrence (architecture.md §4).
struct GdnDims {
  std::int64_t hk = 0;  ///< q/k heads Hk
  std::int64_t hv = 0;  ///< value heads Hv (multiple of hk; v-head h reads k-head h / (hv/hk))
  std::int64_t dk = 0;  ///< key head dim
  std::int64_t dv = 0;  ///< value head dim
};

/// Shapes of the gated full-attention core (architecture.md §3).
struct AttentionDims {
  std::int64_t nh = 0;   ///< query heads
  std::int64_t nkv = 0;  ///< key/value heads (nh multiple of nkv, contiguous groups)
  std::int64_t hd = 0;   ///< head dim
};

/// Multimodal rotary configuration (architecture.md §7.2).
struct RopeDims {
  std::int64_t rotary_dim = 0;       ///< rotated dims per head (even); rotary_dim/2 frequencies
  double theta = 1e7;                ///< rope_theta
  std::int64_t section[3] = {0, 0, 0};  ///< mrope_section (t, h, w), sums to rotary_dim/2
  bool interleaved = true;           ///< interleaved (stride-3) vs sectioned layout
};

#define CLEF_OPS_DECLARE_ALL                                                                       \
  /** Offset RMSNorm (§2.2a): y = x * rsqrt(mean(x^2) + eps) * (1 + w). x, y [rows, n] (may     \
      alias), w [n] is the stored offset weight. */                                              \
  void rms_norm_offset(const float* x, std::int64_t rows, std::int64_t n, const float* w,       \
                       float eps, float* y);                                                     \
  /** Gated RMSNorm (§2.2b), per head: y = (w * (o * rsqrt(mean(o^2) + eps))) * silu(z).         \
      o, z, y [rows, n] (y may alias o), w [n] used directly (no +1). */                         \
  void gated_rms_norm(const float* o, const float* z, std::int64_t rows, std::int64_t n,        \
                      const float* w, float eps, float* y);                                      \
  /** SwiGLU (§5): out = silu(gate) * up, elementwise over n (out may alias either). */          \
  void silu_mul(const float* gate, const float* up, std::int64_t n, float* out);                 \
  /** Residual add: h += x over n elements. */                                                   \
  void add_inplace(float* h, const float* x, std::int64_t n);                                    \
  /** FLA L2 norm (§4.4) on each row of x [rows, n], in place:                                  \
      x = x * rsqrt(sum(x^2) + eps) * scale. Rows are `stride` floats apart. */                  \
  void l2norm_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t stride, float eps,  \
                   float scale);                                                                 \
  /** Causal depthwise conv1d + SiLU with carried state (§4.2). x [T, C] pre-conv input, w [C, K] \
      taps (tap K-1 multiplies the current row), state [K-1, C] = the previous K-1 input rows     \
      (oldest first; zeros at sequence start), updated to the last K-1 rows of (state ++ x).       \
      y [T, C] = silu(conv). y must not alias x. */                                              \
  void causal_conv1d_silu(const float* x, std::int64_t t, std::int64_t c, const float* w,       \
                          std::int64_t k, float* state, float* y);                               \
  /** GDN gates (§4.3): beta = sigmoid(b), g = -exp(a_log) * softplus(a + dt_bias). b, a, beta,  \
      g [T, Hv]; a_log, dt_bias [Hv]. */                                                         \
  void gdn_gates(const float* b, const float* a, std::int64_t t, std::int64_t hv,               \
                 const float* a_log, const float* dt_bias, float* beta, float* g);               \
  /** Gated delta rule (§4.5/§4.6) over T tokens with carried state. q, k [T, Hk, dk] already   \
      L2-normalized (q also scaled by dk^-0.5), rows `qk_stride` floats apart; v [T, Hv, dv] rows \
      `v_stride` apart; g, beta [T, Hv]; state [Hv, dk, dv] fp32 (zero at sequence start),       \
      updated in place; o [T, Hv, dv] contiguous. ref: exact per-token recurrence; cpu: chunked  \
      form with chunk 64 (same math up to fp32 rounding). */                                     \
  void gated_delta_rule(const GdnDims& d, std::int64_t t, const float* q, const float* k,       \
                        std::int64_t qk_stride, const float* v, std::int64_t v_stride,           \
                        const float* g, const float* beta, float* state, float* o);              \
  /** M-RoPE tables (§7.2): pos [3, T] (t, h, w streams), cos/sin [T, rotary_dim/2] computed from \
      the fp32 angle pos * inv_freq, evaluated in double and rounded. */                         \
  void rope_tables(const RopeDims& r, const std::int32_t* pos, std::int64_t t, float* cos,      \
                   float* sin);                                                                  \
  /** NeoX half rotation of the first rotary_dim dims of every head (§7.3), in place.            \
      x [T, heads, head_dim] with rows `row_stride` floats apart and heads `head_dim` apart.      \
      cos/sin [T, rotary_dim/2]. */                                                              \
  void apply_rope(float* x, std::int64_t t, std::int64_t heads, std::int64_t head_dim,          \
                  std::int64_t row_stride, std::int64_t rotary_dim, const float* cos,            \
                  const float* sin);                                                             \
  /** Causal GQA attention (§3.5) of T new queries against a cache of `tk` keys whose last T     \
      rows are the new tokens (query i sits at sequence index tk - T + i and sees keys 0..that).  \
      q [T, nh, hd]; kc, vc [tk, nkv, hd]; o [T, nh, hd]. Softmax scale hd^-0.5, fp32.          \
      Blocked, no [T, tk] matrix. */                                                            \
  void attention(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q,       \
                 const float* kc, const float* vc, float* o);                                    \
  /** Output gate (§3.6): o *= sigmoid(gate) over n elements. */                                 \
  void sigmoid_mul(float* o, const float* gate, std::int64_t n);

namespace ref {
CLEF_OPS_DECLARE_ALL
}  // namespace ref

CLEF_OPS_DECLARE_ALL

#undef CLEF_OPS_DECLARE_ALL

/// Embedding gather (§2.3), dtype-generic table: out [n, H] = table[ids[i]] as float.
/// `table` holds `rows` x `h` elements of `dtype` (F32/BF16/F16). Throws InvalidArgument for an
/// id outside [0, rows).
void embedding_gather(int dtype, const void* table, std::int64_t rows, std::int64_t h,
                      std::span<const std::int32_t> ids, float* out);

}  // namespace clef::ops

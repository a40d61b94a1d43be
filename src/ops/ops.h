// SPDX-License-Identifier: MIT
// Device-agnostic op functions of the Qwen3.5 backbone (docs/MODEL.md §2-§7).
//
// Every op exists twice with the same signature and contract:
//   clef::ops::ref::NAME   plain scalar reference, written as the formula reads; the test oracle,
//                          kept forever (src/ops/ref/*.cc);
//   clef::ops::NAME        the optimized CPU implementation (src/ops/cpu/*.cc), vectorized and
//                          parallelized over the engine's one OpenMP pool (ops/parallel.h).
// tests/unit/test_ops.cc compares the two on random inputs with odd shapes.
//
// Conventions: activations are float32, row-major; shapes are written [rows, cols]; sizes are
// std::int64_t. The GEMM (linear layers) lives in ops/gemm.h. Docs are on the optimized
// declarations; the ref declarations at the bottom share them.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace clef::ops {

/// Shapes of one Gated DeltaNet layer's recurrence (docs/MODEL.md §4).
struct GdnDims {
  std::int64_t hk = 0;  ///< q/k heads Hk
  std::int64_t hv = 0;  ///< value heads Hv (multiple of hk; v-head h reads k-head h / (hv/hk))
  std::int64_t dk = 0;  ///< key head dim
  std::int64_t dv = 0;  ///< value head dim
};

/// Shapes of the gated full-attention core (docs/MODEL.md §3).
struct AttentionDims {
  std::int64_t nh = 0;   ///< query heads
  std::int64_t nkv = 0;  ///< key/value heads (nh a multiple of nkv, contiguous groups)
  std::int64_t hd = 0;   ///< head dim
};

/// Multimodal rotary configuration (docs/MODEL.md §7.2).
struct RopeDims {
  std::int64_t rotary_dim = 0;          ///< rotated dims per head (even); rotary_dim/2 frequencies
  double theta = 1e7;                   ///< rope_theta
  std::int64_t section[3] = {0, 0, 0};  ///< mrope_section (t, h, w), sums to rotary_dim/2
  bool interleaved = true;              ///< interleaved (stride-3) vs sectioned (Qwen2-VL) layout
};

/// Embedding gather (§2.3): out [n, h] = float(table[ids[i], :]). `table` holds rows x h
/// elements of `dtype` (F32, BF16, F16, or a ggml block type with h whole blocks: Q8_0 rows as
/// d * q, the others through core/quant_blocks.h, docs/GGUF.md "Block types"). Throws
/// InvalidArgument for an id outside [0, rows), Unsupported for another dtype or partial blocks.
void embedding_gather(DType dtype, const void* table, std::int64_t rows, std::int64_t h,
                      std::span<const std::int32_t> ids, float* out);

/// Offset RMSNorm (§2.2a), per row: y = (x * rsqrt(mean(x^2) + eps)) * (1 + w).
/// x, y [rows, n] (y may alias x); w [n] is the stored offset weight as float.
void rms_norm_offset(const float* x, std::int64_t rows, std::int64_t n, const float* w, float eps, float* y);

/// rms_norm_offset on rows of x that lie x_stride >= n floats apart (e.g. the query half of each
/// head row of gated attention's [query | gate] projection), written to y [rows, n] contiguous
/// (y must not overlap x unless x_stride == n). Per row the same operations as rms_norm_offset:
/// the same bits.
void rms_norm_offset_strided(const float* x, std::int64_t x_stride, std::int64_t rows, std::int64_t n, const float* w,
                             float eps, float* y);

/// Gated RMSNorm (§2.2b, §4.7), per row (one GDN value head):
/// y = (w * (o * rsqrt(mean(o^2) + eps))) * silu(z). o, z, y [rows, n] (y may alias o);
/// w [n] used directly (no +1).
void gated_rms_norm(const float* o, const float* z, std::int64_t rows, std::int64_t n, const float* w, float eps,
                    float* y);

/// SwiGLU (§5): out = silu(gate) * up over n elements (out may alias gate or up).
void silu_mul(const float* gate, const float* up, std::int64_t n, float* out);

struct Int8Activations;  // ops/int8_gemm.h

/// silu_mul over m rows of k (out may alias gate or up), each row then quantized into q for the
/// int8 GEMMs while it is in cache: q holds what quantize_activations(out, m, k, q) would (same
/// bits; docs/NUMERICS.md "int8 mode"). Throws InvalidArgument when m or k is not positive.
void silu_mul_quantize(const float* gate, const float* up, std::int64_t m, std::int64_t k, float* out,
                       Int8Activations& q);

/// gated_rms_norm over tokens · heads head rows of n, then q = quantize_activations(y, tokens,
/// heads · n): each head row is whole blocks of 32 of its token's row, quantized as soon as it is
/// written (same bits). Throws InvalidArgument unless n is a positive multiple of 32.
void gated_rms_norm_quantize(const float* o, const float* z, std::int64_t tokens, std::int64_t heads, std::int64_t n,
                             const float* w, float eps, float* y, Int8Activations& q);

/// Residual add: h += x over n elements.
void add_inplace(float* h, const float* x, std::int64_t n);

/// Output gate (§3.6): o *= sigmoid(gate) over n elements.
void sigmoid_mul(float* o, const float* gate, std::int64_t n);

/// sigmoid_mul per row: o [rows, n] contiguous, row r times sigmoid of the n gate values at
/// gate + r * gate_stride (gate_stride >= n; the gate halves of gated attention's projection,
/// read where they are). The same bits as sigmoid_mul on the gates copied together.
void sigmoid_mul_rows(float* o, std::int64_t rows, std::int64_t n, const float* gate, std::int64_t gate_stride);

/// FLA L2 norm (§4.4), in place on each of `rows` rows of n floats, rows `stride` floats apart:
/// x = x * rsqrt(sum(x^2) + eps) * scale (eps added to the SUM; scale = dk^-0.5 for q, 1 for k).
void l2norm_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t stride, float eps, float scale);

/// Causal depthwise conv1d + SiLU with carried state (§4.2).
/// x [t, c] pre-conv input; w [c, k] taps (tap k-1 multiplies the current row, not flipped);
/// state [k-1, c] = the k-1 input rows before x (oldest first; zeros at sequence start), replaced
/// by the last k-1 rows of (state ++ x). y [t, c] = silu(conv); y must not alias x.
void causal_conv1d_silu(const float* x, std::int64_t t, std::int64_t c, const float* w, std::int64_t k, float* state,
                        float* y);

/// The conv taps w [c, k] (causal_conv1d_silu's layout) transposed into taps [k, c] (tap j of channel
/// ch at j * c + ch): the layout the conv kernels multiply-add over channels, and
/// GdnInputStage::conv_taps. taps must not alias w.
void transpose_conv_taps(const float* w, std::int64_t c, std::int64_t k, float* taps);

/// Shapes and parameters of the fused GDN input stage (gdn_input_stage). conv_w [channels, conv_k]
/// taps (as causal_conv1d_silu); the first 2·hk·dk channels are the q heads then the k heads, dk
/// floats each; neg_a, dt_bias [hv] (as gdn_gates).
struct GdnInputStage {
  std::int64_t channels = 0, conv_k = 0;
  const float* conv_w = nullptr;
  /// Optional: the same taps transposed, [conv_k, channels] (tap j of channel ch at j * channels +
  /// ch); when set the stage reads them as they are instead of transposing conv_w on every call.
  const float* conv_taps = nullptr;
  std::int64_t hk = 0, dk = 0;
  float eps = 1e-6f, qscale = 1.0f;
  std::int64_t hv = 0;
  const float* neg_a = nullptr;
  const float* dt_bias = nullptr;
};

/// The GDN input stage in one pass over the chunk (§4.2-4.4), per token row i:
///   u[i] = silu(causal depthwise conv1d of x) with carried state (causal_conv1d_silu),
///   then l2norm_rows on its q heads (scale qscale) and k heads (scale 1), eps on the sum,
///   and beta[i], g[i] from b[i], a[i] (gdn_gates).
/// x, u [t, channels] (u must not alias x); state [conv_k-1, channels] carried as in
/// causal_conv1d_silu; b, a, beta, g [t, hv]. The same bits as the three ops run one after the
/// other at the same level. Throws InvalidArgument on bad shapes.
void gdn_input_stage(const GdnInputStage& s, std::int64_t t, const float* x, float* state, float* u, const float* b,
                     const float* a, float* beta, float* g);

/// GDN gates (§4.3): beta = sigmoid(b); g = neg_a * softplus(a + dt_bias) with PyTorch's
/// softplus (threshold 20), where neg_a = A = -exp(A_log) is computed once at load by the caller
/// (nn::neg_exp_a: from A_log in a release folder, read as stored from a GGUF's ssm_a).
/// b, a, beta, g [t, hv]; neg_a, dt_bias [hv].
void gdn_gates(const float* b, const float* a, std::int64_t t, std::int64_t hv, const float* neg_a,
               const float* dt_bias, float* beta, float* g);

/// Gated delta rule (§4.5 / §4.6) over t tokens with carried state.
/// q, k [t, hk, dk], rows `qk_stride` floats apart, already L2-normalized (q also scaled by
/// dk^-0.5); v [t, hv, dv], rows `v_stride` apart; g, beta [t, hv]; state [hv, dk, dv] fp32
/// (zero at sequence start), updated in place; o [t, hv, dv] contiguous.
/// ref: the exact per-token recurrence; optimized: the chunked form with chunk kGdnChunk (same
/// math, fp32 rounding differs).
void gated_delta_rule(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                      const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state, float* o);

/// Tokens per chunk of the optimized gated delta rules (docs/MODEL.md §4.6). Chunks start at
/// token 0 of each call, so a sequence split into calls at multiples of kGdnChunk (the state
/// carried between them) runs the very same chunks: the same bits as one call.
inline constexpr std::int64_t kGdnChunk = 64;

/// gated_delta_rule() for the bf16 mode (docs/NUMERICS.md "Precision modes"): the same chunked
/// form, with the operands of its matrix products (K, Q, the state S as read, (I + A)^-1, the
/// decay-scaled K and Q, X, V', P) rounded to bf16 and multiplied with fp32 sums (vdpbf16ps on
/// avx512bf16, the fp32 kernels on the rounded values elsewhere); the decay masks, the inverse
/// itself and the state S stay fp32 (S is updated in fp32, only its reads are rounded).
/// Same shapes and contract as gated_delta_rule; error ~ bf16 rounding of the operands.
void gated_delta_rule_bf16(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                           const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state,
                           float* o);

/// M-RoPE tables (§7.2): pos [3, t] (temporal, height, width streams; equal for text);
/// cos, sin [t, rotary_dim/2] of the fp32 angle pos * inv_freq, evaluated in double, rounded.
void rope_tables(const RopeDims& r, const std::int32_t* pos, std::int64_t t, float* cos, float* sin);

/// NeoX half rotation of the first rotary_dim dims of every head (§7.3), in place:
/// x'_i = x_i cos - x_{i+r/2} sin, x'_{i+r/2} = x_{i+r/2} cos + x_i sin; other dims unchanged.
/// x [t, heads, head_dim] with rows `row_stride` floats apart; cos, sin [t, rotary_dim/2].
void apply_rope(float* x, std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride,
                std::int64_t rotary_dim, const float* cos, const float* sin);

/// Causal GQA attention (§3.5) of t new queries against a cache of tk >= t keys whose last t rows
/// belong to the new tokens: query i sits at sequence index tk - t + i and sees keys 0..that
/// (causal by index). Query head h reads kv head h / (nh / nkv). Scale hd^-0.5, fp32 softmax.
/// q [t, nh, hd]; kc, vc [tk, nkv, hd]; o [t, nh, hd]. The optimized form is blocked with an
/// online softmax and never holds a [t, tk] matrix.
void attention(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
               const float* vc, float* o);

/// attention() for the bf16 precision mode: q (pre-scaled by hd^-0.5), k, v and the softmax
/// probabilities are rounded to bf16 and multiplied with vdpbf16ps, fp32 accumulation; the online
/// softmax (max, exp, sums) stays fp32. About twice the fp32 throughput; error ~ bf16 rounding of
/// the operands (tested against ref::attention). Without a bf16 dot product (or for an odd hd) the
/// same bf16-rounded operands are multiplied by the fp32 kernel.
void attention_bf16(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
                    const float* vc, float* o);

/// The bf16 mode's KV cache (docs/NUMERICS.md "bf16 KV cache"): each key and value row is rounded
/// to bf16 once, when it is appended (f32_to_bf16 of core/dtype.h: nearest even), and kept as
/// 32-bit pair words in the layouts the vdpbf16ps products read:
///   kp [rows, width / 2]          word (r, c) = bf16 k[r][2c] | bf16 k[r][2c + 1] << 16
///   vp [ceil(rows / 2), width]    word (p, c) = bf16 v[2p][c] | bf16 v[2p + 1][c] << 16
/// (keys pair along the head dim, values along the sequence); the high half of vp's last row of
/// words is zero while `rows` is odd. width = nkv * hd with hd even.
/// kv_bf16_store writes rows r0 .. r0 + n - 1 from k_rows, v_rows ([n, width] fp32) into kp, vp,
/// which hold room for r0 + n rows; rows before r0 are kept (vp's word row r0 / 2 is completed
/// when r0 is odd). Appending in any split gives the same words as one store.
void kv_bf16_store(const float* k_rows, const float* v_rows, std::int64_t r0, std::int64_t n, std::int64_t width,
                   std::uint32_t* kp, std::uint32_t* vp);

/// attention_bf16() reading a cache stored by kv_bf16_store (tk rows, width = nkv * hd, hd even):
/// the same result bit for bit as attention_bf16() on the fp32 rows, without rounding the whole
/// cache again on every call.
void attention_bf16_kv(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const std::uint32_t* kp,
                       const std::uint32_t* vp, float* o);

/// Scalar reference implementations (the test oracle): same signatures and contracts as above;
/// ref::gated_delta_rule is the exact per-token recurrence of §4.5.
namespace ref {
void embedding_gather(DType dtype, const void* table, std::int64_t rows, std::int64_t h,
                      std::span<const std::int32_t> ids, float* out);
void rms_norm_offset(const float* x, std::int64_t rows, std::int64_t n, const float* w, float eps, float* y);
void gated_rms_norm(const float* o, const float* z, std::int64_t rows, std::int64_t n, const float* w, float eps,
                    float* y);
void silu_mul(const float* gate, const float* up, std::int64_t n, float* out);
void add_inplace(float* h, const float* x, std::int64_t n);
void sigmoid_mul(float* o, const float* gate, std::int64_t n);
void l2norm_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t stride, float eps, float scale);
void causal_conv1d_silu(const float* x, std::int64_t t, std::int64_t c, const float* w, std::int64_t k, float* state,
                        float* y);
void gdn_gates(const float* b, const float* a, std::int64_t t, std::int64_t hv, const float* neg_a,
               const float* dt_bias, float* beta, float* g);
void gated_delta_rule(const GdnDims& d, std::int64_t t, const float* q, const float* k, std::int64_t qk_stride,
                      const float* v, std::int64_t v_stride, const float* g, const float* beta, float* state, float* o);
/// The chunked form of §4.6 written literally (explicit (I + A)^-1 by forward substitution),
/// chunk size `chunk`: a second oracle proving the chunked algebra against the recurrence.
void gated_delta_rule_chunked(const GdnDims& d, std::int64_t t, std::int64_t chunk, const float* q, const float* k,
                              std::int64_t qk_stride, const float* v, std::int64_t v_stride, const float* g,
                              const float* beta, float* state, float* o);
void rope_tables(const RopeDims& r, const std::int32_t* pos, std::int64_t t, float* cos, float* sin);
void apply_rope(float* x, std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride,
                std::int64_t rotary_dim, const float* cos, const float* sin);
void attention(const AttentionDims& d, std::int64_t t, std::int64_t tk, const float* q, const float* kc,
               const float* vc, float* o);
}  // namespace ref

}  // namespace clef::ops

// SPDX-License-Identifier: MIT
// Ops of the Qwen3.5 vision tower (docs/MODEL.md §6) that the text backbone does not need:
// LayerNorm with bias, bias add, the two GELUs, and bidirectional (non-causal) attention.
// Same two-implementation contract as ops/ops.h: clef::ops::NAME is the optimized CPU kernel,
// clef::ops::ref::NAME the scalar oracle (src/ops/ref/vision_ops.cc) that
// tests/unit/test_vision_ops.cc compares it with. Activations are fp32, row-major.
#pragma once

#include <cstdint>

#include "ops/ops.h"

namespace clef::ops {

/// LayerNorm with weight and bias (§6.6), per row: y = (x - mean) / sqrt(var + eps) * w + b,
/// var the biased variance (PyTorch nn.LayerNorm). x, y [rows, n] (y may alias x); w, b [n].
void layer_norm(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps, float* y);

/// y[r, :] += b for each of `rows` rows of n floats (the bias of a linear layer).
void add_bias(float* y, std::int64_t rows, std::int64_t n, const float* b);

/// tanh-approximated GELU (§6.6, PyTorch gelu(approximate="tanh")) over n elements:
/// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). y may alias x.
void gelu_tanh(const float* x, std::int64_t n, float* y);

/// Exact GELU (§6.7, PyTorch nn.GELU()) over n elements: y = 0.5 x (1 + erf(x / sqrt(2))).
/// y may alias x.
void gelu_erf(const float* x, std::int64_t n, float* y);

/// Bidirectional (non-causal) multi-head attention within one segment of t tokens (§6.6): every
/// query sees all t keys; scale hd^-0.5, fp32 softmax. q, k, v, o [t, nh, hd] contiguous
/// (d.nkv == d.nh for the vision tower; GQA grouping as in attention()). Same blocked online
/// softmax kernel as attention(), never holds a [t, t] matrix. Throws InvalidArgument on bad dims.
void attention_full(const AttentionDims& d, std::int64_t t, const float* q, const float* k, const float* v, float* o);

/// attention_full() with bf16 operands (q, k, v and probabilities rounded to bf16, fp32
/// accumulation), the vision tower's kBF16 mode; as attention_bf16().
void attention_full_bf16(const AttentionDims& d, std::int64_t t, const float* q, const float* k, const float* v,
                         float* o);

namespace ref {
void layer_norm(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps, float* y);
void add_bias(float* y, std::int64_t rows, std::int64_t n, const float* b);
void gelu_tanh(const float* x, std::int64_t n, float* y);
void gelu_erf(const float* x, std::int64_t n, float* y);
/// Scalar oracle: explicit [t] score row per query, double accumulation.
void attention_full(const AttentionDims& d, std::int64_t t, const float* q, const float* k, const float* v, float* o);
}  // namespace ref

}  // namespace clef::ops

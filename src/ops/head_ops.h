// SPDX-License-Identifier: MIT
// Ops of the joint schema head (docs/PROTOCOL.md §4.4): the head's fp32 linear layers, its LayerNorm,
// its L2 normalization and its attention core over runs of projected memory rows.
// Same two-implementation contract as ops/ops.h: clef::ops::NAME is the CPU kernel (Highway, one
// copy per SIMD level, ops/isa.h), clef::ops::ref::NAME the scalar oracle (src/ops/ref/head_ops.cc)
// that tests/unit/test_head_ops.cc compares it with at every level. Activations are fp32,
// row-major.
//
// Unlike the backbone's ops, these fix their summation order as part of the contract
// (docs/NUMERICS.md "The joint head's kernels"): every sum below is the one the head has always
// computed, no multiply-add is fused on any level (the kernel and oracle files are compiled with
// -ffp-contract=off), so every level and every thread count gives the oracle's bits, and a cached
// and an uncached record give the same answer. Errors: none are checked here (the head validates
// its shapes); sizes must be >= 0 and pointers valid for the sizes given.
#pragma once

#include <cstdint>
#include <span>

namespace clef::ops {

/// The 16-lane dot product of a[0..n) and b[0..n): 16 fp32 partial sums, lane j summing
/// a[i]·b[i] over i ≡ j (mod 16) for i < 16·⌊n/16⌋ in ascending i; then s = Σ of the tail
/// products (ascending i) and s += lane 0, 1, ..., 15 in that order. Products and sums are
/// separately rounded fp32 operations.
float dot16(const float* a, const float* b, std::int64_t n);

/// y[r, o] = dot16(x_r, w_o, in) + b[o] for x [rows, in], w [out, in] (PyTorch nn.Linear
/// layout), y [rows, out] (must not alias x or w); b [out], or null for no bias, which adds 0.0f
/// (one fp32 addition either way, so a -0 dot comes out +0). Register-tiled and parallel over
/// panels of 64 rows; neither changes any element, which is always exactly that expression.
void linear_dot16(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out, const float* b,
                  float* y);

/// LayerNorm with weight and bias (PyTorch nn.LayerNorm, biased variance) whose row statistics are
/// accumulated in double: mean = Σx / n and var = Σ(x - mean)² / n in double (ascending order),
/// inv = float(1 / sqrt(var + eps)) and m = float(mean), then y = (x - m) · inv · w + b in fp32,
/// left to right. x, y [rows, n] (y may alias x); w, b [n].
void layer_norm_f64stats(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                         float* y);

/// y = x / max(‖x‖₂, 1e-12) (torch.nn.functional.normalize) over n floats, with Σx² accumulated
/// in double (ascending) and the quotient formed in double, then rounded. y may alias x.
void l2_normalize_f64(const float* x, std::int64_t n, float* y);

/// One run of projected key/value rows: k, v [rows, width] fp32 row-major each.
struct KvRun {
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t rows = 0;
};

/// The attention core of nn.MultiheadAttention without a mask (docs/PROTOCOL.md §4.4 step 7): q
/// [nq, width] holds the projected queries of `heads` heads of size d = width / heads (width must
/// be a multiple of heads); the keys/values are the rows of all `runs` concatenated in order
/// (nk rows in all). For each head h and query i: s_ij = dot16(q_i,h, k_j,h, d) · (1/√d) in fp32
/// (1/√d = 1 / sqrtf(d)), m = max_j s_ij, e_ij = expf(s_ij - m), S = Σ_j e_ij in double (ascending
/// j), p_ij = float(e_ij / S), and ctx_i,h = Σ_j p_ij v_j,h accumulated in fp32 over ascending j from
/// 0. ctx [nq, width] (fully written; must not alias the inputs). Tasks of one head × up to 16
/// queries run in parallel, keys are visited in blocks of 128 rows; neither changes a sum, so the
/// result does not depend on the thread count or on where the runs are cut.
void attention_runs(const float* q, std::int64_t nq, std::int64_t width, std::int64_t heads,
                    std::span<const KvRun> runs, float* ctx);

namespace ref {
/// The scalar oracles: the orders above written as plain loops, one element at a time.
float dot16(const float* a, const float* b, std::int64_t n);
void linear_dot16(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out, const float* b,
                  float* y);
void layer_norm_f64stats(const float* x, std::int64_t rows, std::int64_t n, const float* w, const float* b, float eps,
                         float* y);
void l2_normalize_f64(const float* x, std::int64_t n, float* y);
/// One thread, one query at a time over the concatenated rows k, v [nk, width].
void attention_runs(const float* q, std::int64_t nq, std::int64_t width, std::int64_t heads, const float* k,
                    const float* v, std::int64_t nk, float* ctx);
}  // namespace ref

}  // namespace clef::ops

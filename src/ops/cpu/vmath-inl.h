// SPDX-License-Identifier: MIT
// Vectorized transcendental helpers for the CPU kernels, one copy per SIMD target (Google Highway
// multi-target "-inl" header: include it after hwy/highway.h inside a foreach_target TU; see
// ops/isa.h). Internal to src/ops/cpu.
//
// exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, degree-6 Taylor polynomial
// (truncation error < 1.3e-7 relative, i.e. ~1-2 ulp), then p * 2^n. 2^n is applied as two exact
// power-of-two factors 2^floor(n/2) * 2^(n - floor(n/2)), each a normal float for the clamped
// range, so the only rounding is the final one (the same value AVX-512's vscalefps gives). The
// ops tests compare every kernel that uses these against the std::exp references.

// Per-target include guard (Highway's toggle convention).
#if defined(CLEF_OPS_CPU_VMATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CLEF_OPS_CPU_VMATH_INL_H_
#undef CLEF_OPS_CPU_VMATH_INL_H_
#else
#define CLEF_OPS_CPU_VMATH_INL_H_
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

/// Lanes of one float vector on this target (1 scalar, 4 SSE4/NEON, 8 AVX2, 16 AVX-512).
HWY_INLINE std::int64_t lanes() { return static_cast<std::int64_t>(hn::Lanes(DF())); }

// Vector tails: the first `count` lanes of a vector (m = FirstN(d, count), count <= Lanes(d)) are
// read or written, and no byte past them is touched (a tail may end a buffer or meet another
// thread's row). On x86 (AVX2, AVX-512) and SVE these are Highway's masked loads and stores, which
// honour the mask in memory. Highway 1.0.3's NEON MaskedLoad / BlendedStore load and store the
// whole 16-byte vector, so on NEON the lanes go through a stack copy instead (docs/ARM64.md).

/// Lanes [0, count) from p, zero above: MaskedLoad(m, d, p) that reads only count elements.
template <class D, class M>
HWY_INLINE hn::VFromD<D> LoadTail(M m, D d, const hn::TFromD<D>* p, std::size_t count) {
#if HWY_TARGET == HWY_NEON
  (void)m;
  alignas(16) hn::TFromD<D> buf[16 / sizeof(hn::TFromD<D>)] = {};
  std::memcpy(buf, p, count * sizeof(hn::TFromD<D>));
  return hn::Load(d, buf);
#else
  (void)count;
  return hn::MaskedLoad(m, d, p);
#endif
}

/// Lanes [0, count) of v to p: BlendedStore(v, m, d, p) that writes only count elements.
template <class D, class M>
HWY_INLINE void StoreTail(hn::VFromD<D> v, M m, D d, hn::TFromD<D>* p, std::size_t count) {
#if HWY_TARGET == HWY_NEON
  (void)m;
  alignas(16) hn::TFromD<D> buf[16 / sizeof(hn::TFromD<D>)];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, count * sizeof(hn::TFromD<D>));
#else
  (void)count;
  hn::BlendedStore(v, m, d, p);
#endif
}

/// e^x per lane (inputs clamped to [-104, 88.7]: below underflows to 0, above stays finite).
HWY_INLINE VF Exp(DF d, VF x) {
  const hn::RebindToSigned<DF> di;
  x = hn::Min(hn::Max(x, hn::Set(d, -104.0f)), hn::Set(d, 88.7f));
  const VF n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  VF r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  VF p = hn::Set(d, 1.0f / 720.0f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  // n in [-150, 128]: n1 = floor(n / 2), n2 = n - n1, both in [-75, 64] (normal powers of two).
  const auto ni = hn::ConvertTo(di, n);
  const auto n1 = hn::ShiftRight<1>(ni);
  const auto n2 = hn::Sub(ni, n1);
  const auto bias = hn::Set(di, 127);
  const VF s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const VF s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  return hn::Mul(hn::Mul(p, s1), s2);
}

/// 1 / (1 + e^-x) per lane.
HWY_INLINE VF Sigmoid(DF d, VF x) {
  const VF one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, Exp(d, hn::Neg(x))));
}

/// y[i] = sigmoid(x[i]) * m[i] (m == nullptr: y = sigmoid(x)); y may alias x or m.
HWY_INLINE void sigmoid_times(const float* x, const float* m, float* y, std::int64_t n) {
  const DF d;
  const std::int64_t N = lanes();
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    VF s = Sigmoid(d, hn::LoadU(d, x + i));
    if (m != nullptr) s = hn::Mul(s, hn::LoadU(d, m + i));
    hn::StoreU(s, d, y + i);
  }
  if (i < n) {
    const auto t = static_cast<std::size_t>(n - i);
    const auto k = hn::FirstN(d, t);
    VF s = Sigmoid(d, LoadTail(k, d, x + i, t));
    if (m != nullptr) s = hn::Mul(s, LoadTail(k, d, m + i, t));
    StoreTail(s, k, d, y + i, t);
  }
}

/// y[i] = silu(x[i]) * m[i] (m == nullptr: y = silu(x)); silu(x) = x * sigmoid(x). y may alias.
HWY_INLINE void silu_times(const float* x, const float* m, float* y, std::int64_t n) {
  const DF d;
  const std::int64_t N = lanes();
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(d, x + i);
    VF s = hn::Mul(v, Sigmoid(d, v));
    if (m != nullptr) s = hn::Mul(s, hn::LoadU(d, m + i));
    hn::StoreU(s, d, y + i);
  }
  if (i < n) {
    const auto t = static_cast<std::size_t>(n - i);
    const auto k = hn::FirstN(d, t);
    const VF v = LoadTail(k, d, x + i, t);
    VF s = hn::Mul(v, Sigmoid(d, v));
    if (m != nullptr) s = hn::Mul(s, LoadTail(k, d, m + i, t));
    StoreTail(s, k, d, y + i, t);
  }
}

/// y[i] = exp(x[i]) (y may alias x).
HWY_INLINE void exp_n(const float* x, float* y, std::int64_t n) {
  const DF d;
  const std::int64_t N = lanes();
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Exp(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) {
    const auto t = static_cast<std::size_t>(n - i);
    const auto k = hn::FirstN(d, t);
    StoreTail(Exp(d, LoadTail(k, d, x + i, t)), k, d, y + i, t);
  }
}

/// Sum of squares of n floats: 16 independent partial sums in a fixed order (the same result on
/// every target up to FMA contraction), vectorized by the compiler for the target.
HWY_INLINE float sum_squares(const float* x, std::int64_t n) {
  float acc[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += x[i + j] * x[i + j];
  }
  for (; i < n; ++i) acc[0] += x[i] * x[i];
  float s = 0.0f;
  for (int j = 0; j < 16; ++j) s += acc[j];
  return s;
}

/// Scalar sigmoid, as PyTorch computes it: 1 / (1 + exp(-x)).
HWY_INLINE float sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/// y[0..n) *= s (vectorizable).
HWY_INLINE void scale_inplace(std::int64_t n, float s, float* __restrict y) {
  for (std::int64_t i = 0; i < n; ++i) y[i] *= s;
}

/// The bf16 bits (u32 lanes, upper half zero) of each float: round to nearest even, NaN kept a
/// (quiet) NaN; lane by lane what f32_to_bf16 of core/dtype.h does.
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> bf16_bits(VF v) {
  const hn::RebindToUnsigned<DF> du;
  const auto u = hn::BitCast(du, v);
  const auto is_nan = hn::Gt(hn::And(u, hn::Set(du, 0x7fffffffu)), hn::Set(du, 0x7f800000u));
  // The add may carry into the sign bit; the logical shift takes it as the scalar code's unsigned
  // arithmetic does.
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(hn::Set(du, 0x7fffu), lsb)));
  const auto nan = hn::Or(hn::ShiftRight<16>(u), hn::Set(du, 0x40u));
  return hn::IfThenElse(is_nan, nan, rounded);
}

/// dst[i] = src[i] rounded to the nearest bf16 value, kept as float (bit-identical to
/// bf16_to_f32(f32_to_bf16(src[i]))); dst may equal src.
HWY_INLINE void round_to_bf16(const float* src, std::int64_t n, float* dst) {
  const DF d;
  const std::int64_t N = lanes();
  auto round = [&](VF v) { return hn::BitCast(d, hn::ShiftLeft<16>(bf16_bits(v))); };
  std::int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(round(hn::LoadU(d, src + i)), d, dst + i);
  if (i < n) {
    const auto t = static_cast<std::size_t>(n - i);
    const auto k = hn::FirstN(d, t);
    StoreTail(round(LoadTail(k, d, src + i, t)), k, d, dst + i, t);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops::cpu
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard

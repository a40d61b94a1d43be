// SPDX-License-Identifier: MIT
// Optimized CPU elementwise, norm, gate and rotary ops (contracts in ops/ops.h), compiled once
// per SIMD target (Highway foreach_target; the level is chosen at run time, ops/isa.h). Plain loops
// here are vectorized by the compiler for each target; exp/sigmoid/SiLU use vmath-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "ops/cpu/vmath-inl.h"
#include "ops/convert.h"
#include "ops/int8_gemm.h"
#include "ops/isa.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/rope_freq.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;

void RmsNormOffsetImpl(const float* x, std::int64_t x_stride, std::int64_t rows, std::int64_t n, const float* w,
                       float eps, float* y) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * n;
    const float inv = 1.0f / std::sqrt(cpu::sum_squares(xr, n) / static_cast<float>(n) + eps);
    for (std::int64_t j = 0; j < n; ++j) yr[j] = (xr[j] * inv) * (1.0f + w[j]);
  }
}

/// One head row of gated_rms_norm.
inline void gated_rms_norm_row(const float* orow, const float* zrow, std::int64_t n, const float* w, float eps,
                               float* yr) {
  const float inv = 1.0f / std::sqrt(cpu::sum_squares(orow, n) / static_cast<float>(n) + eps);
  for (std::int64_t j = 0; j < n; ++j) yr[j] = w[j] * (orow[j] * inv);
  cpu::silu_times(zrow, yr, yr, n);  // y = silu(z) * y
}

void GatedRmsNormImpl(const float* o, const float* z, std::int64_t rows, std::int64_t n, const float* w, float eps,
                      float* y) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) gated_rms_norm_row(o + r * n, z + r * n, n, w, eps, y + r * n);
}

void GatedRmsNormQuantizeImpl(const float* o, const float* z, std::int64_t tokens, std::int64_t heads, std::int64_t n,
                              const float* w, float eps, float* y, Int8Activations* q) {
  const std::int64_t rows = tokens * heads, blocks_per_head = n / kInt8Block;
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) {
    gated_rms_norm_row(o + r * n, z + r * n, n, w, eps, y + r * n);
    quantize_activation_span(y + r * n, n, r / heads, (r % heads) * blocks_per_head, *q);
  }
}

void SiluMulImpl(const float* gate, const float* up, std::int64_t n, float* out) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t s = b * kBlock, e = std::min(n, s + kBlock);
    cpu::silu_times(gate + s, up + s, out + s, e - s);
  }
}

void SiluMulQuantizeImpl(const float* gate, const float* up, std::int64_t m, std::int64_t k, float* out,
                         Int8Activations* q) {
#pragma omp parallel for schedule(static) if (m * k >= kParallelMin)
  for (std::int64_t r = 0; r < m; ++r) {
    cpu::silu_times(gate + r * k, up + r * k, out + r * k, k);
    quantize_activation_span(out + r * k, k, r, 0, *q);
  }
}

void AddInplaceImpl(float* h, const float* x, std::int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 4 * kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) h[i] += x[i];
}

void SigmoidMulImpl(float* o, const float* gate, std::int64_t n) {
  constexpr std::int64_t kBlock = 4096;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t s = b * kBlock, e = std::min(n, s + kBlock);
    cpu::sigmoid_times(gate + s, o + s, o + s, e - s);
  }
}

void SigmoidMulRowsImpl(float* o, std::int64_t rows, std::int64_t n, const float* gate, std::int64_t gate_stride) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) cpu::sigmoid_times(gate + r * gate_stride, o + r * n, o + r * n, n);
}

void L2normRowsImpl(float* x, std::int64_t rows, std::int64_t n, std::int64_t stride, float eps, float scale) {
#pragma omp parallel for schedule(static) if (rows * n >= kParallelMin)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * stride;
    const float inv = 1.0f / std::sqrt(cpu::sum_squares(xr, n) + eps);
    for (std::int64_t j = 0; j < n; ++j) xr[j] = (xr[j] * inv) * scale;
  }
}

void GdnGatesImpl(const float* b, const float* a, std::int64_t t, std::int64_t hv, const float* neg_a,
                  const float* dt_bias, float* beta, float* g) {
  cpu::sigmoid_times(b, nullptr, beta, t * hv);
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t h = 0; h < hv; ++h) {
      const float xs = a[i * hv + h] + dt_bias[h];
      const float sp = xs > 20.0f ? xs : std::log1p(std::exp(xs));
      g[i * hv + h] = neg_a[h] * sp;
    }
  }
}

void ApplyRopeImpl(float* x, std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride,
                   std::int64_t rotary_dim, const float* cos, const float* sin) {
  const std::int64_t half = rotary_dim / 2;
#pragma omp parallel for schedule(static) if (t * heads * rotary_dim >= kParallelMin)
  for (std::int64_t i = 0; i < t; ++i) {
    const float* c = cos + i * half;
    const float* s = sin + i * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      float* __restrict lo = x + i * row_stride + h * head_dim;
      float* __restrict hi = lo + half;
      for (std::int64_t f = 0; f < half; ++f) {
        const float a = lo[f], b = hi[f];
        lo[f] = a * c[f] - b * s[f];
        hi[f] = b * c[f] + a * s[f];
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(RmsNormOffsetImpl);
HWY_EXPORT(GatedRmsNormImpl);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(SiluMulQuantizeImpl);
HWY_EXPORT(GatedRmsNormQuantizeImpl);
HWY_EXPORT(AddInplaceImpl);
HWY_EXPORT(SigmoidMulImpl);
HWY_EXPORT(SigmoidMulRowsImpl);
HWY_EXPORT(L2normRowsImpl);
HWY_EXPORT(GdnGatesImpl);
HWY_EXPORT(ApplyRopeImpl);

void embedding_gather(DType dtype, const void* table, std::int64_t rows, std::int64_t h,
                      std::span<const std::int32_t> ids, float* out) {
  const auto n = static_cast<std::int64_t>(ids.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t id = ids[static_cast<std::size_t>(i)];
    if (id < 0 || id >= rows) {
      throw InvalidArgument("embedding_gather: token id " + std::to_string(id) + " outside [0, " +
                            std::to_string(rows) + ")");
    }
  }
  const auto* bytes = static_cast<const std::byte*>(table);
  std::uint64_t block_elems = 1, block_bytes = 0;
  const bool blocks = dtype_block(dtype, block_elems, block_bytes);
  if ((!blocks && dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) ||
      (blocks && static_cast<std::uint64_t>(h) % block_elems != 0)) {
    throw Unsupported("embedding_gather: table dtype " + std::string(dtype_name(dtype)) + " with rows of " +
                      std::to_string(h));
  }
  const std::size_t row_bytes = dtype_bytes(dtype, static_cast<std::uint64_t>(h));  // blocks: whole ones
  // Q8_0 rows widen as d·q (widen_to_f32_n); the other block types through their dequantizers
  // (core/quant_blocks.h), bit for bit gguf-py's values.
  const bool generic = blocks && dtype != DType::kQ8_0;
#pragma omp parallel for schedule(static) if (n * h >= kParallelMin)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t id = ids[static_cast<std::size_t>(i)];
    const std::byte* row = bytes + static_cast<std::size_t>(id) * row_bytes;
    if (generic) {
      convert_to_f32(dtype, row, static_cast<std::size_t>(h), out + i * h);
    } else {
      widen_to_f32_n(dtype, row, h, out + i * h);
    }
  }
}

void rms_norm_offset(const float* x, std::int64_t rows, std::int64_t n, const float* w, float eps, float* y) {
  CLEF_DISPATCH(RmsNormOffsetImpl)(x, n, rows, n, w, eps, y);
}

void rms_norm_offset_strided(const float* x, std::int64_t x_stride, std::int64_t rows, std::int64_t n, const float* w,
                             float eps, float* y) {
  if (x_stride < n) throw InvalidArgument("rms_norm_offset_strided: row stride below the row length");
  CLEF_DISPATCH(RmsNormOffsetImpl)(x, x_stride, rows, n, w, eps, y);
}

void gated_rms_norm(const float* o, const float* z, std::int64_t rows, std::int64_t n, const float* w, float eps,
                    float* y) {
  CLEF_DISPATCH(GatedRmsNormImpl)(o, z, rows, n, w, eps, y);
}

void silu_mul(const float* gate, const float* up, std::int64_t n, float* out) {
  CLEF_DISPATCH(SiluMulImpl)(gate, up, n, out);
}

void silu_mul_quantize(const float* gate, const float* up, std::int64_t m, std::int64_t k, float* out,
                       Int8Activations& q) {
  if (m <= 0 || k <= 0) throw InvalidArgument("silu_mul_quantize: m, k must be positive");
  prepare_activations(m, k, q);
  CLEF_DISPATCH(SiluMulQuantizeImpl)(gate, up, m, k, out, &q);
}

void gated_rms_norm_quantize(const float* o, const float* z, std::int64_t tokens, std::int64_t heads, std::int64_t n,
                             const float* w, float eps, float* y, Int8Activations& q) {
  if (tokens <= 0 || heads <= 0 || n <= 0 || n % kInt8Block != 0) {
    throw InvalidArgument("gated_rms_norm_quantize: head rows of " + std::to_string(n) +
                          " (must be a positive multiple of 32), tokens " + std::to_string(tokens));
  }
  prepare_activations(tokens, heads * n, q);
  CLEF_DISPATCH(GatedRmsNormQuantizeImpl)(o, z, tokens, heads, n, w, eps, y, &q);
}

void add_inplace(float* h, const float* x, std::int64_t n) { CLEF_DISPATCH(AddInplaceImpl)(h, x, n); }

void sigmoid_mul(float* o, const float* gate, std::int64_t n) { CLEF_DISPATCH(SigmoidMulImpl)(o, gate, n); }

void sigmoid_mul_rows(float* o, std::int64_t rows, std::int64_t n, const float* gate, std::int64_t gate_stride) {
  if (gate_stride < n) throw InvalidArgument("sigmoid_mul_rows: gate row stride below the row length");
  CLEF_DISPATCH(SigmoidMulRowsImpl)(o, rows, n, gate, gate_stride);
}

void l2norm_rows(float* x, std::int64_t rows, std::int64_t n, std::int64_t stride, float eps, float scale) {
  CLEF_DISPATCH(L2normRowsImpl)(x, rows, n, stride, eps, scale);
}

void gdn_gates(const float* b, const float* a, std::int64_t t, std::int64_t hv, const float* neg_a,
               const float* dt_bias, float* beta, float* g) {
  CLEF_DISPATCH(GdnGatesImpl)(b, a, t, hv, neg_a, dt_bias, beta, g);
}

void apply_rope(float* x, std::int64_t t, std::int64_t heads, std::int64_t head_dim, std::int64_t row_stride,
                std::int64_t rotary_dim, const float* cos, const float* sin) {
  CLEF_DISPATCH(ApplyRopeImpl)(x, t, heads, head_dim, row_stride, rotary_dim, cos, sin);
}

void rope_tables(const RopeDims& r, const std::int32_t* pos, std::int64_t t, float* cos, float* sin) {
  const std::int64_t half = r.rotary_dim / 2;
  const std::vector<float> inv = rope_inv_freq(r);
  const std::vector<int> stream = rope_streams(r);
#pragma omp parallel for schedule(static) if (t * half >= 4096)
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t f = 0; f < half; ++f) {
      const float p = static_cast<float>(pos[stream[static_cast<std::size_t>(f)] * t + i]);
      const double angle = static_cast<double>(p * inv[static_cast<std::size_t>(f)]);
      cos[i * half + f] = static_cast<float>(std::cos(angle));
      sin[i * half + f] = static_cast<float>(std::sin(angle));
    }
  }
}

}  // namespace clef::ops
#endif  // HWY_ONCE

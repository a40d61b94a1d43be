// SPDX-License-Identifier: MIT
// Block-quantized (Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0, Q5_1) linear layers: repacking, kernel
// selection and the kernels of ops/quant_gemm.h.
//
// Per call and thread, a panel of 16 output columns is unpacked once into an L2-resident buffer
// (cpu/quant_layout.h: the values as bytes in the int8 kernels' [group of 4 k][column][4] order,
// the per-block scale vectors), then every tile of 4 rows runs over it: vpmaddubsw (unsigned
// weight bytes × signed activation bytes) into int16, vpaddw over up to 4 groups, vpmaddwd with
// the int16 scales into int32 per block, then the fp32 fold of the expression of ops/quant_gemm.h.
// The scalar kernel (the baseline level) does the same in plain C++. Every SIMD function carries a
// target attribute and is only called after a CPUID check, so the binary stays portable.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#if defined(__x86_64__) && !defined(CLEF_INT8_SCALAR_ONLY)
#include <immintrin.h>

#include "ops/cpu/tile_output.h"
#define CLEF_QUANT_X86 1
#endif
#if defined(__aarch64__) && !defined(CLEF_INT8_SCALAR_ONLY)
#include <arm_neon.h>

#include "ops/cpu/arm_features.h"
#define CLEF_QUANT_ARM 1
#endif

#include "core/error.h"
#include "ops/cpu/quant_layout.h"
#include "ops/int8_gemm.h"
#include "ops/isa.h"
#include "ops/peak.h"
#include "ops/profile.h"
#include "ops/quant_gemm.h"

namespace clef::ops {

namespace quant_detail {

Layout layout_of(QuantType t) noexcept {
  Layout L;
  L.five = t == QuantType::kQ5_K || t == QuantType::kQ5_0 || t == QuantType::kQ5_1;
  L.six = t == QuantType::kQ6_K;
  L.has_min = t == QuantType::kQ4_K || t == QuantType::kQ5_K || t == QuantType::kQ4_1 || t == QuantType::kQ5_1;
  L.kscale = t == QuantType::kQ4_K || t == QuantType::kQ5_K;
  L.q6 = L.six;
  L.group = static_cast<int>(quant_block_elems(t) / 32);
  L.off = t == QuantType::kQ6_K ? 32 : t == QuantType::kQ4_0 ? 8 : t == QuantType::kQ5_0 ? 16 : 0;
  L.qbytes = 256 + (L.five ? 64 : 0) + (L.six ? 128 : 0);
  const auto g = static_cast<std::size_t>(L.group);
  L.d_off = g * L.qbytes;
  L.m_off = L.d_off + 32;
  L.sc_off = L.d_off + (L.has_min ? 64 : 32);
  L.bytes = L.sc_off + (L.kscale || L.q6 ? g * 32 : 0);
  return L;
}

}  // namespace quant_detail

using quant_detail::Layout;
using quant_detail::layout_of;

// ---------------------------------------------------------------------------------------------
// QuantWeight

QuantWeight QuantWeight::from_blocks(QuantType t, const void* blocks, std::int64_t n, std::int64_t k) {
  const std::int64_t be = quant_block_elems(t), bb = quant_block_bytes(t);
  if (n <= 0 || k <= 0 || k % be != 0) {
    throw InvalidArgument("QuantWeight: shape [" + std::to_string(n) + ", " + std::to_string(k) + "] is not whole " +
                          quant_type_name(t) + " blocks of " + std::to_string(be) + " along k");
  }
  if (blocks == nullptr) throw InvalidArgument("QuantWeight: null weight");
  const Layout L = layout_of(t);
  QuantWeight w;
  w.type_ = t;
  w.n_ = n;
  w.k_ = k;
  w.nsb_ = k / be;
  w.group_ = L.group;
  w.np_ = (n + kQuantPanelCols - 1) / kQuantPanelCols;
  w.rec_ = L.bytes;
  w.data_.assign(static_cast<std::size_t>(w.np_ * w.nsb_) * w.rec_, 0);
  const auto* src = static_cast<const std::byte*>(blocks);
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t p = j / kQuantPanelCols;
    const int c = static_cast<int>(j % kQuantPanelCols);
    DecodedQuantBlock d;
    for (std::int64_t s = 0; s < w.nsb_; ++s) {
      decode_quant_block(t, src + static_cast<std::size_t>((j * w.nsb_ + s) * bb), d);
      std::uint8_t* rec = w.data_.data() + static_cast<std::size_t>(p * w.nsb_ + s) * w.rec_;
      for (int g = 0; g < L.group; ++g) {
        std::uint8_t* qd = rec + static_cast<std::size_t>(g) * L.qbytes;
        const std::uint8_t* q = d.q + 32 * g;
        for (int u = 0; u < 4; ++u) {
          for (int i = 0; i < 4; ++i) {
            qd[(u * 16 + c) * 4 + i] = static_cast<std::uint8_t>((q[4 * u + i] & 15) | (q[16 + 4 * u + i] & 15) << 4);
          }
        }
        for (int i = 0; i < 4; ++i) {
          for (int u = 0; u < 8; ++u) {
            const int bits = q[4 * u + i] >> 4;
            if (L.five) qd[256 + c * 4 + i] = static_cast<std::uint8_t>(qd[256 + c * 4 + i] | (bits & 1) << u);
            if (L.six) {
              std::uint8_t& plane = qd[256 + 64 * (u / 4) + c * 4 + i];
              plane = static_cast<std::uint8_t>(plane | (bits & 3) << (2 * (u % 4)));
            }
          }
        }
        if (L.kscale) {
          rec[L.sc_off + static_cast<std::size_t>(16 * g + c)] = static_cast<std::uint8_t>(d.sc[2 * g]);
          rec[L.sc_off + static_cast<std::size_t>(16 * (L.group + g) + c)] = d.mb[g];
        } else if (L.q6) {
          rec[L.sc_off + static_cast<std::size_t>(32 * g + c)] = static_cast<std::uint8_t>(d.sc[2 * g]);
          rec[L.sc_off + static_cast<std::size_t>(32 * g + 16 + c)] = static_cast<std::uint8_t>(d.sc[2 * g + 1]);
        }
      }
      std::memcpy(rec + L.d_off + 2 * c, &d.d, 2);
      if (L.has_min) std::memcpy(rec + L.m_off + 2 * c, &d.mn, 2);
    }
  }
  return w;
}

std::uint8_t QuantWeight::q_at(std::int64_t j, std::int64_t b, int i) const noexcept {
  const Layout L = layout_of(type_);
  const std::uint8_t* rec = record(j / kQuantPanelCols, b / group_);
  const std::uint8_t* qd = rec + static_cast<std::size_t>(b % group_) * L.qbytes;
  const int c = static_cast<int>(j % kQuantPanelCols), u = (i % 16) / 4, ii = i % 4, g = i / 4;
  int q = (qd[(u * 16 + c) * 4 + ii] >> (i < 16 ? 0 : 4)) & 15;
  if (L.five) q |= ((qd[256 + c * 4 + ii] >> g) & 1) << 4;
  if (L.six) q |= ((qd[256 + 64 * (g / 4) + c * 4 + ii] >> (2 * (g % 4))) & 3) << 4;
  return static_cast<std::uint8_t>(q);
}

std::int8_t QuantWeight::sc_at(std::int64_t j, std::int64_t b, int h) const noexcept {
  const Layout L = layout_of(type_);
  const std::uint8_t* rec = record(j / kQuantPanelCols, b / group_);
  const auto g = static_cast<std::size_t>(b % group_), c = static_cast<std::size_t>(j % kQuantPanelCols);
  if (L.kscale) return static_cast<std::int8_t>(rec[L.sc_off + 16 * g + c]);
  if (L.q6) return static_cast<std::int8_t>(rec[L.sc_off + 32 * g + 16 * static_cast<std::size_t>(h) + c]);
  return 1;
}

std::uint8_t QuantWeight::mb_at(std::int64_t j, std::int64_t b) const noexcept {
  const Layout L = layout_of(type_);
  if (L.kscale) {
    const std::uint8_t* rec = record(j / kQuantPanelCols, b / group_);
    return rec[L.sc_off + static_cast<std::size_t>(16 * (group_ + b % group_) + j % kQuantPanelCols)];
  }
  return L.has_min ? 1 : 0;
}

std::uint16_t QuantWeight::d_at(std::int64_t j, std::int64_t b) const noexcept {
  std::uint16_t v;
  std::memcpy(&v, record(j / kQuantPanelCols, b / group_) + layout_of(type_).d_off + 2 * (j % kQuantPanelCols), 2);
  return v;
}

std::uint16_t QuantWeight::m_at(std::int64_t j, std::int64_t b) const noexcept {
  const Layout L = layout_of(type_);
  if (!L.has_min) return 0;
  std::uint16_t v;
  std::memcpy(&v, record(j / kQuantPanelCols, b / group_) + L.m_off + 2 * (j % kQuantPanelCols), 2);
  return v;
}

int QuantWeight::offset() const noexcept { return layout_of(type_).off; }
bool QuantWeight::has_min() const noexcept { return layout_of(type_).has_min; }

float QuantWeight::value_at(std::int64_t j, std::int64_t kk) const noexcept {
  const std::int64_t b = kk / 32;
  const int i = static_cast<int>(kk % 32);
  const float a = f16_to_f32(d_at(j, b)) * static_cast<float>(sc_at(j, b, i / 16));
  const float mt = f16_to_f32(m_at(j, b)) * static_cast<float>(mb_at(j, b));
  return a * static_cast<float>(static_cast<int>(q_at(j, b, i)) - offset()) - mt;
}

// ---------------------------------------------------------------------------------------------
// Kernel selection

const char* quant_kernel_name(QuantKernel k) noexcept {
  switch (k) {
    case QuantKernel::kAvx2: return "avx2";
    case QuantKernel::kAvx512: return "avx512";
    case QuantKernel::kAvxVnni: return "avxvnni";
    case QuantKernel::kAvx512Vnni: return "avx512vnni";
    case QuantKernel::kNeon: return "neon";
    case QuantKernel::kNeonDot: return "neon-dotprod";
    case QuantKernel::kNeonI8mm: return "neon-i8mm";
    case QuantKernel::kScalar: break;
  }
  return "scalar";
}

namespace {

#ifdef CLEF_QUANT_X86
bool int8_has(Int8Kernel k) {
  static const std::vector<Int8Kernel> have = int8_kernels_supported();
  return std::find(have.begin(), have.end(), k) != have.end();
}
#endif

bool cpu_has(QuantKernel k) {
#ifdef CLEF_QUANT_X86
  const IsaLevel best = best_supported_isa();
  switch (k) {
    case QuantKernel::kScalar: return true;
    case QuantKernel::kAvx2: return best >= IsaLevel::kAvx2 && __builtin_cpu_supports("f16c");
    case QuantKernel::kAvx512: return best >= IsaLevel::kAvx512 && __builtin_cpu_supports("avx512bw");
    // The VNNI probes of the int8 kernels (one CPUID reading for both families).
    case QuantKernel::kAvxVnni: return cpu_has(QuantKernel::kAvx2) && int8_has(Int8Kernel::kAvxVnni);
    case QuantKernel::kAvx512Vnni: return cpu_has(QuantKernel::kAvx512) && int8_has(Int8Kernel::kAvx512Vnni);
    default: return false;  // the ARM64 kernels
  }
#elif defined(CLEF_QUANT_ARM)
  const cpu::ArmFeatures f = cpu::arm_features();
  switch (k) {
    case QuantKernel::kScalar: return true;
    case QuantKernel::kNeon: return f.asimd;
    case QuantKernel::kNeonDot: return f.asimd && f.dotprod;
    case QuantKernel::kNeonI8mm: return f.asimd && f.i8mm;
    default: return false;
  }
#else
  return k == QuantKernel::kScalar;
#endif
}

}  // namespace

std::vector<QuantKernel> quant_kernels_supported() {
  std::vector<QuantKernel> out;
  for (QuantKernel k : {QuantKernel::kScalar, QuantKernel::kAvx2, QuantKernel::kAvxVnni, QuantKernel::kAvx512,
                        QuantKernel::kAvx512Vnni, QuantKernel::kNeon, QuantKernel::kNeonDot, QuantKernel::kNeonI8mm}) {
    if (cpu_has(k)) out.push_back(k);
  }
  return out;
}

namespace {

#ifdef CLEF_QUANT_X86
// The block kernels' inner step (cpu/quant_gemm_simd-inl.h tile): two weight vectors, four rows
// whose activation words are broadcast from memory each step, eight int16 chains of vpaddw on
// vpmaddubsw, in named variables (GCC keeps an array of chains on the stack, and the chains then
// run at the store-forwarding latency). The empty asm makes the weights and the activation pointer
// opaque every iteration, so the products stay inside the loop and the chains stay apart.
#define CLEF_MADDUBS_PEAK_BODY(V, SET8, SET32, MADDUBS, ADD16, CONSTRAINT)                                         \
  static const std::int32_t act[4] = {0x01fd037f, 0x7f02fe05, 0x71017f03, 0x02fe0102};                             \
  const std::int32_t* ap = act;                                                                                    \
  V w0 = SET8(3), w1 = SET8(12);                                                                                   \
  V c00 = SET8(0), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;                    \
  for (std::int64_t i = 0; i < iters; ++i) {                                                                       \
    asm volatile("" : "+" CONSTRAINT(w0), "+" CONSTRAINT(w1), "+r"(ap));                                           \
    const V a0 = SET32(ap[0]), a1 = SET32(ap[1]), a2 = SET32(ap[2]), a3 = SET32(ap[3]);                            \
    c00 = ADD16(c00, MADDUBS(w0, a0));                                                                             \
    c01 = ADD16(c01, MADDUBS(w1, a0));                                                                             \
    c10 = ADD16(c10, MADDUBS(w0, a1));                                                                             \
    c11 = ADD16(c11, MADDUBS(w1, a1));                                                                             \
    c20 = ADD16(c20, MADDUBS(w0, a2));                                                                             \
    c21 = ADD16(c21, MADDUBS(w1, a2));                                                                             \
    c30 = ADD16(c30, MADDUBS(w0, a3));                                                                             \
    c31 = ADD16(c31, MADDUBS(w1, a3));                                                                             \
    asm(""                                                                                                         \
        : "+" CONSTRAINT(c00), "+" CONSTRAINT(c01), "+" CONSTRAINT(c10), "+" CONSTRAINT(c11), "+" CONSTRAINT(c20), \
          "+" CONSTRAINT(c21), "+" CONSTRAINT(c30), "+" CONSTRAINT(c31));                                          \
  }                                                                                                                \
  const V sum = ADD16(ADD16(ADD16(c00, c01), ADD16(c10, c11)), ADD16(ADD16(c20, c21), ADD16(c30, c31)))

__attribute__((target("avx2"))) double peak_maddubs_256(std::int64_t iters) {
  CLEF_MADDUBS_PEAK_BODY(__m256i, _mm256_set1_epi8, _mm256_set1_epi32, _mm256_maddubs_epi16, _mm256_add_epi16, "x");
  return _mm256_extract_epi16(sum, 0) == 12345 ? 0.0 : 8 * 32.0;  // multiply-adds per iteration
}

/// The same on 512 bits (the avx512 kernel: AVX512BW without VNNI).
__attribute__((target("avx512f,avx512bw"))) double peak_maddubs_512(std::int64_t iters) {
  CLEF_MADDUBS_PEAK_BODY(__m512i, _mm512_set1_epi8, _mm512_set1_epi32, _mm512_maddubs_epi16, _mm512_add_epi16, "v");
  std::int16_t lanes[32];
  _mm512_storeu_si512(lanes, sum);
  return lanes[0] == 12345 ? 0.0 : 8 * 64.0;
}
#undef CLEF_MADDUBS_PEAK_BODY
#endif

}  // namespace

double measure_quant_peak_gops(QuantKernel k, int threads, int repeats, std::int64_t iters) {
  if (!cpu_has(k)) return 0.0;
  switch (k) {
#ifdef CLEF_QUANT_X86
    case QuantKernel::kAvx2: return best_chain_rate_gops(threads, repeats, iters, peak_maddubs_256);
    case QuantKernel::kAvx512: return best_chain_rate_gops(threads, repeats, iters, peak_maddubs_512);
    case QuantKernel::kAvxVnni: return measure_int8_peak_gops(Int8Kernel::kAvxVnni, threads, repeats, iters);
    case QuantKernel::kAvx512Vnni: return measure_int8_peak_gops(Int8Kernel::kAvx512Vnni, threads, repeats, iters);
#endif
#ifdef CLEF_QUANT_ARM
    case QuantKernel::kNeonDot: return measure_int8_peak_gops(Int8Kernel::kNeonDot, threads, repeats, iters);
    case QuantKernel::kNeonI8mm: return measure_int8_peak_gops(Int8Kernel::kNeonI8mm, threads, repeats, iters);
#endif
    default: return 0.0;
  }
}

namespace {

/// The kernel CLEF_QUANT_KERNEL names (benchmarks' A/B), nullopt when unset. Throws
/// InvalidArgument on an unknown name and Unsupported on a kernel this CPU lacks.
std::optional<QuantKernel> forced_quant_kernel() {
  const char* env = std::getenv("CLEF_QUANT_KERNEL");
  if (env == nullptr || *env == '\0') return std::nullopt;
  const std::string s(env);
  for (QuantKernel k : {QuantKernel::kScalar, QuantKernel::kAvx2, QuantKernel::kAvxVnni, QuantKernel::kAvx512,
                        QuantKernel::kAvx512Vnni, QuantKernel::kNeon, QuantKernel::kNeonDot, QuantKernel::kNeonI8mm}) {
    if (s == quant_kernel_name(k)) {
      if (!cpu_has(k)) throw Unsupported("CLEF_QUANT_KERNEL=" + s + ": this CPU cannot run that kernel");
      return k;
    }
  }
  throw InvalidArgument(
      "CLEF_QUANT_KERNEL must be scalar, avx2, avxvnni, avx512, avx512vnni, neon, neon-dotprod or neon-i8mm (got '" +
      s.substr(0, 40) + "')");
}

}  // namespace

QuantKernel active_quant_kernel() {
  if (const auto forced = forced_quant_kernel()) return *forced;
#if defined(__aarch64__)
  // As the int8 kernels (ops/int8_gemm.h): the level's dot product; the SVE levels the best one.
  switch (active_isa()) {
    case IsaLevel::kBaseline: return QuantKernel::kScalar;
    case IsaLevel::kNeon: return cpu_has(QuantKernel::kNeon) ? QuantKernel::kNeon : QuantKernel::kScalar;
    case IsaLevel::kNeonDotprod: return cpu_has(QuantKernel::kNeonDot) ? QuantKernel::kNeonDot : QuantKernel::kNeon;
    default: break;
  }
  if (cpu_has(QuantKernel::kNeonI8mm)) return QuantKernel::kNeonI8mm;
  return cpu_has(QuantKernel::kNeonDot) ? QuantKernel::kNeonDot : QuantKernel::kNeon;
#else
  // The dot product the int8 kernels use at this level (ops/int8_gemm.h): AVX512-VNNI at the
  // AVX-512 levels, AVX-VNNI at avx2 on a CPU whose best level is avx2.
  const IsaLevel level = active_isa();
  if (level >= IsaLevel::kAvx512 && cpu_has(QuantKernel::kAvx512Vnni)) return QuantKernel::kAvx512Vnni;
  if (level >= IsaLevel::kAvx512 && cpu_has(QuantKernel::kAvx512)) return QuantKernel::kAvx512;
  if (level >= IsaLevel::kAvx2 && best_supported_isa() == IsaLevel::kAvx2 && cpu_has(QuantKernel::kAvxVnni)) {
    return QuantKernel::kAvxVnni;
  }
  if (level >= IsaLevel::kAvx2 && cpu_has(QuantKernel::kAvx2)) return QuantKernel::kAvx2;
  return QuantKernel::kScalar;
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernels

namespace {

struct QJob {
  const QuantWeight* w;
  const std::int8_t* qa;      ///< [m, blocks · 32]
  const float* da;            ///< [m, blocks]
  const std::int32_t* spair;  ///< [m, blocks]: σlo | σhi << 16 (int16 halves)
  const float* sf;            ///< [m, blocks]: float(σlo + σhi)
  float* y;
  std::int64_t n;
  bool accumulate;
  /// The AVX2 and AVX512-VNNI tiles' interleaved activations (cpu/quant_layout.h).
  const std::uint8_t* tiles = nullptr;
};

/// Writes the fp32 tile acc [mr][16] to y (columns < n), adding when accumulating.
void store_tile(const QJob& j, std::int64_t r0, int mr, std::int64_t p0, const float* acc) {
  for (int r = 0; r < mr; ++r) {
    float* yr = j.y + (r0 + r) * j.n;
    for (int c = 0; c < kQuantPanelCols; ++c) {
      const std::int64_t col = p0 * kQuantPanelCols + c;
      if (col >= j.n) break;
      yr[col] = j.accumulate ? yr[col] + acc[r * kQuantPanelCols + c] : acc[r * kQuantPanelCols + c];
    }
  }
}

/// Plain C++ unpack of panel p into the buffer layout of cpu/quant_layout.h.
void unpack_panel_scalar(const QuantWeight& w, std::int64_t p, std::uint8_t* buf) {
  constexpr std::size_t kQ = quant_detail::kUnpackedQ;
  const int off = w.offset();
  for (std::int64_t b = 0; b < w.blocks(); ++b) {
    std::uint8_t* dst = buf + static_cast<std::size_t>(b) * quant_detail::kUnpackedBlock;
    for (int c = 0; c < kQuantPanelCols; ++c) {
      // Columns past n (last panel) are zero in the record and read through the same accessors.
      const std::int64_t jj = p * kQuantPanelCols + c;
      for (int i = 0; i < 32; ++i) dst[((i / 4) * 16 + c) * 4 + i % 4] = w.q_at(jj, b, i);
      const std::int32_t lo = w.sc_at(jj, b, 0), hi = w.sc_at(jj, b, 1);
      const auto dup = [](std::int32_t s) {
        const auto u = static_cast<std::uint32_t>(s) & 0xFFFFu;
        return static_cast<std::int32_t>(u | u << 16);
      };
      const std::int32_t v[3] = {dup(lo), dup(hi),
                                 static_cast<std::int32_t>((static_cast<std::uint32_t>(off * lo) & 0xFFFFu) |
                                                           static_cast<std::uint32_t>(off * hi) << 16)};
      const float f[2] = {f16_to_f32(w.d_at(jj, b)), f16_to_f32(w.m_at(jj, b)) * static_cast<float>(w.mb_at(jj, b))};
      for (int s = 0; s < 3; ++s) std::memcpy(dst + kQ + 64 * s + 4 * c, &v[s], 4);
      for (int s = 0; s < 2; ++s) std::memcpy(dst + kQ + 64 * (3 + s) + 4 * c, &f[s], 4);
    }
  }
}

void panel_scalar(const QJob& j, std::int64_t p0, std::int64_t m, std::uint8_t* buf) {
  unpack_panel_scalar(*j.w, p0, buf);
  constexpr std::size_t kQ = quant_detail::kUnpackedQ;
  const std::int64_t nb = j.w->blocks();
  const bool has_min = j.w->has_min();
  float acc[kQuantPanelCols];
  for (std::int64_t r = 0; r < m; ++r) {
    std::fill(acc, acc + kQuantPanelCols, 0.0f);
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::uint8_t* bb = buf + static_cast<std::size_t>(b) * quant_detail::kUnpackedBlock;
      const std::int8_t* qa = j.qa + (r * nb + b) * 32;
      const std::int32_t sp = j.spair[r * nb + b];
      const auto slo = static_cast<std::int16_t>(sp & 0xFFFF), shi = static_cast<std::int16_t>(sp >> 16);
      for (int c = 0; c < kQuantPanelCols; ++c) {
        std::int32_t s[2] = {0, 0};
        for (int i = 0; i < 32; ++i) s[i / 16] += bb[((i / 4) * 16 + c) * 4 + i % 4] * qa[i];
        std::int32_t v[3];
        float f[2];
        for (int t = 0; t < 3; ++t) std::memcpy(&v[t], bb + kQ + 64 * t + 4 * c, 4);
        for (int t = 0; t < 2; ++t) std::memcpy(&f[t], bb + kQ + 64 * (3 + t) + 4 * c, 4);
        const auto lo16 = [](std::int32_t x) {
          return static_cast<std::int32_t>(static_cast<std::int16_t>(x & 0xFFFF));
        };
        const std::int32_t isum = lo16(v[0]) * s[0] + lo16(v[1]) * s[1] - (lo16(v[2]) * slo + (v[2] >> 16) * shi);
        const float u = has_min ? std::fma(static_cast<float>(isum), f[0], -(f[1] * j.sf[r * nb + b]))
                                : static_cast<float>(isum) * f[0];
        acc[c] = std::fma(u, j.da[r * nb + b], acc[c]);
      }
    }
    store_tile(j, r, 1, p0, acc);
  }
}

#ifdef CLEF_QUANT_X86
// The SIMD kernels: one source, four copies (the widths and their dot-product instructions).
#define QG_NS avx2
#define QG_TARGET "avx2,fma,f16c"
#define QG_512 0
#define QG_VNNI 0
#include "ops/cpu/quant_gemm_simd-inl.h"  // NOLINT(build/include)
#undef QG_NS
#undef QG_TARGET
#undef QG_512
#undef QG_VNNI
#define QG_NS avxvnni
#define QG_TARGET "avx2,fma,f16c,avxvnni"
#define QG_512 0
#define QG_VNNI 1
#include "ops/cpu/quant_gemm_simd-inl.h"  // NOLINT(build/include)
#undef QG_NS
#undef QG_TARGET
#undef QG_512
#undef QG_VNNI
#define QG_NS avx512
#define QG_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl"
#define QG_512 1
#define QG_VNNI 0
#include "ops/cpu/quant_gemm_simd-inl.h"  // NOLINT(build/include)
#undef QG_NS
#undef QG_TARGET
#undef QG_512
#undef QG_VNNI
#define QG_NS avx512vnni
#define QG_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define QG_512 1
#define QG_VNNI 1
#include "ops/cpu/quant_gemm_simd-inl.h"  // NOLINT(build/include)
#undef QG_NS
#undef QG_TARGET
#undef QG_512
#undef QG_VNNI
#endif

#include "ops/cpu/quant_gemm_neon-inl.h"  // ARM64 kernels, inside this namespace

/// Fills the half-block sums of act (Int8Activations::half_sums) unless they are current: from
/// each block's first 16 values σlo and its sum σ = sum128 / 128, σhi = σ − σlo.
void ensure_half_sums(Int8Activations& a) {
  if (a.half_sums_ready) return;
  const auto need = static_cast<std::size_t>(a.m * a.blocks);
  if (a.half_sums.size() < need) a.half_sums.resize(need);
  if (a.block_sums.size() < need) a.block_sums.resize(need);
  for (std::size_t i = 0; i < need; ++i) {
    const std::int8_t* q = a.q.data() + i * 32;
    std::int32_t lo = 0;
    for (int t = 0; t < 16; ++t) lo += q[t];
    const std::int32_t all = a.sum128[i] / 128, hi = all - lo;
    a.half_sums[i] =
        static_cast<std::int32_t>((static_cast<std::uint32_t>(lo) & 0xFFFFu) | static_cast<std::uint32_t>(hi) << 16);
    a.block_sums[i] = static_cast<float>(all);
  }
  a.half_sums_ready = true;
}

#ifdef CLEF_QUANT_X86
/// Interleaves act's rows in tiles of kTileRows (the record of cpu/quant_layout.h) into
/// act.interleaved, unless it holds them already; after ensure_half_sums.
void ensure_tiles(Int8Activations& a) {
  if (a.interleaved_for == Interleaved::kQuantTiles) return;
  CLEF_PROF_SCOPE(">linear.interleave_x");
  constexpr std::int64_t R = quant_detail::kTileRows;
  const std::int64_t nb = a.blocks, tiles = (a.m + R - 1) / R;
  // Every record is written whole below, so a buffer already large enough is not cleared first (a
  // pass over it as long as the interleave itself); only the last tile's records are zeroed, for
  // its rows past m.
  const auto bytes = static_cast<std::size_t>(tiles * nb * quant_detail::kTileRecord);
  if (a.interleaved.size() < bytes) a.interleaved.resize(bytes);
  std::uint8_t* out = a.interleaved.data();
#pragma omp parallel for schedule(static) if (tiles * nb > 256)
  for (std::int64_t t = 0; t < tiles; ++t) {
    for (std::int64_t b = 0; b < nb; ++b) {
      std::uint8_t* rec = out + static_cast<std::size_t>((t * nb + b) * quant_detail::kTileRecord);
      if ((t + 1) * R > a.m) std::memset(rec, 0, quant_detail::kTileRecord);
      for (std::int64_t r = 0; r < R && t * R + r < a.m; ++r) {
        const auto ab = static_cast<std::size_t>((t * R + r) * nb + b);
        for (int g = 0; g < 8; ++g) std::memcpy(rec + (g * R + r) * 4, a.q.data() + ab * 32 + 4 * g, 4);
        std::memcpy(rec + quant_detail::kTileDa + 4 * r, &a.d[ab], 4);
        std::memcpy(rec + quant_detail::kTileSf + 4 * r, &a.block_sums[ab], 4);
        std::memcpy(rec + quant_detail::kTileSpair + 4 * r, &a.half_sums[ab], 4);
        // σlo and σhi are the pair's int16 halves (ensure_half_sums); Q6_K's offset is 32.
        constexpr std::int32_t kOff6 = quant_detail::Traits<QuantType::kQ6_K>::kOff;
        const auto pair = static_cast<std::uint32_t>(a.half_sums[ab]);
        const std::int32_t off[2] = {-kOff6 * static_cast<std::int16_t>(pair & 0xFFFFu),
                                     -kOff6 * static_cast<std::int16_t>(pair >> 16)};
        std::memcpy(rec + quant_detail::kTileQ6Off + 8 * r, off, 8);
      }
    }
  }
  a.interleaved_for = Interleaved::kQuantTiles;
}
#endif

void run_quant(QuantKernel kernel, Int8Activations& act, const QuantWeight& w, float* y, bool accumulate) {
  const std::int64_t m = act.m;
  ensure_half_sums(act);
  QJob job{&w, act.q.data(), act.d.data(), act.half_sums.data(), act.block_sums.data(), y, w.n(), accumulate};
#ifdef CLEF_QUANT_X86
  // The row tiles of the AVX2 and AVX512-VNNI kernels read the interleaved records; m <= 2:
  // tile_direct, on the row-major arrays.
  if ((kernel == QuantKernel::kAvx2 || kernel == QuantKernel::kAvx512Vnni) && m > 2) {
    ensure_tiles(act);
    job.tiles = act.interleaved.data();
  }
#endif
  const std::int64_t units = w.panels();
  const std::size_t buf_bytes = static_cast<std::size_t>(w.blocks()) * quant_detail::kUnpackedBlock;
  CLEF_PROF_SCOPE(">linear.quant_gemm");
#pragma omp parallel if (units > 1 && m * w.n() * w.k() > (1 << 18))
  {
    thread_local std::vector<std::uint8_t> buf;
    if (buf.size() < buf_bytes) buf.resize(buf_bytes);
#pragma omp for schedule(static)
    for (std::int64_t p = 0; p < units; ++p) {
      switch (kernel) {
#ifdef CLEF_QUANT_X86
        case QuantKernel::kAvx2: avx2::run_panel(job, p, m, buf.data()); break;
        case QuantKernel::kAvx512: avx512::run_panel(job, p, m, buf.data()); break;
        case QuantKernel::kAvxVnni: avxvnni::run_panel(job, p, m, buf.data()); break;
        case QuantKernel::kAvx512Vnni: avx512vnni::run_panel(job, p, m, buf.data()); break;
#endif
#ifdef CLEF_QUANT_ARM
        case QuantKernel::kNeon:
        case QuantKernel::kNeonDot:
        case QuantKernel::kNeonI8mm: run_panel_arm(kernel, job, p, m, buf.data()); break;
#endif
        default: panel_scalar(job, p, m, buf.data()); break;
      }
    }
  }
}

}  // namespace

void quant_linear_with(QuantKernel kernel, const float* x, std::int64_t m, const QuantWeight& w, float* y,
                       bool accumulate) {
  if (!w.valid() || m <= 0) throw InvalidArgument("quant_linear: empty weight or m <= 0");
  if (!cpu_has(kernel)) {
    throw Unsupported(std::string("quant_linear: this CPU cannot run the ") + quant_kernel_name(kernel) + " kernel");
  }
  thread_local Int8Activations act;
  {
    CLEF_PROF_SCOPE(">linear.quantize_x");
    quantize_activations(x, m, w.k(), act);
  }
  run_quant(kernel, act, w, y, accumulate);
}

void quant_linear_quantized(Int8Activations& act, const QuantWeight& w, float* y, bool accumulate) {
  if (!w.valid() || act.m <= 0) throw InvalidArgument("quant_linear_quantized: empty weight or m <= 0");
  if (act.k != w.k()) {
    throw InvalidArgument("quant_linear_quantized: activations of k = " + std::to_string(act.k) +
                          ", weight of k = " + std::to_string(w.k()));
  }
  run_quant(active_quant_kernel(), act, w, y, accumulate);
}

void quant_linear(const float* x, std::int64_t m, const QuantWeight& w, float* y, bool accumulate) {
  quant_linear_with(active_quant_kernel(), x, m, w, y, accumulate);
}

}  // namespace clef::ops

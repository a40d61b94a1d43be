// SPDX-License-Identifier: MIT
// int8 (Q8_0) linear layers: packing, activation quantization and the kernels of ops/int8_gemm.h.
//
// Register tiles: a micro-kernel keeps MR rows × (16 · NP) columns of int32 block sums in registers
// for one block of 32 k, then folds them into fp32 accumulators with one FMA per element:
// acc = fma(float(isum), dw · da, acc), the order of ref::int8_linear. Loop order per thread: a
// range of panels (the weights of a panel, 16 · k bytes, stay in L2 while every row tile passes),
// row tiles inside. The AVX2 kernel reads the activations of each tile of 4 rows interleaved into one
// record per block (interleave_quads, once per set of activations, shared by the weights that read
// it: Int8Activations::interleaved): one contiguous stream per tile instead of 8
// (the 4 rows' qa and |qa|), +5% on the 0.8b k = 1024 shapes at m = 512 (Zen 3, in-process A/B, same
// bits). Each kernel is compiled with a target attribute and only called after a CPUID
// check, so the binary stays portable.
//
// Performance notes (2 vCPUs, see docs/PERFORMANCE.md): per 32 multiply-adds the AVX2 kernel spends
// vpsignb + vpmaddubsw + vpmaddwd + vpaddd (the sign trick; no VNNI), the VNNI kernels one
// vpdpbusd; per block and 16 columns, one cvt + mul + fma per row.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#if defined(__x86_64__) && !defined(CLEF_INT8_SCALAR_ONLY)
#include <cpuid.h>
#include <immintrin.h>

#include "ops/cpu/tile_output.h"
#include "ops/cpu/transpose_x86.h"
#define CLEF_INT8_X86 1
#endif
#if defined(__aarch64__) && !defined(CLEF_INT8_SCALAR_ONLY)
#include <arm_neon.h>

#include "ops/cpu/arm_features.h"
#define CLEF_INT8_ARM 1
#endif

#include "core/error.h"
#include "core/quant_blocks.h"
#include "ops/int8_gemm.h"
#include "ops/isa.h"
#include "ops/parallel.h"
#include "ops/peak.h"
#include "ops/profile.h"

namespace clef::ops {

// ---------------------------------------------------------------------------------------------
// Int8Weight

void Int8Weight::allocate(std::int64_t n, std::int64_t k) {
  if (n <= 0 || k <= 0) {
    throw InvalidArgument("Int8Weight: bad shape [" + std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  n_ = n;
  k_ = k;
  nb_ = (k + kInt8Block - 1) / kInt8Block;
  np_ = (n + kInt8PanelCols - 1) / kInt8PanelCols;
  q_.assign(static_cast<std::size_t>(np_ * nb_ * kInt8PanelCols * kInt8Block), 0);
  d_.assign(static_cast<std::size_t>(np_ * nb_ * kInt8PanelCols), 0);
}

void Int8Weight::set_block(std::int64_t j, std::int64_t b, const std::int8_t* q32, std::uint16_t d) noexcept {
  const std::int64_t p = j / kInt8PanelCols, c = j % kInt8PanelCols;
  std::int8_t* dst = q_.data() + static_cast<std::size_t>((p * nb_ + b) * kInt8PanelCols * kInt8Block);
  for (std::int64_t g = 0; g < kInt8Block / 4; ++g) {
    std::memcpy(dst + (g * kInt8PanelCols + c) * 4, q32 + g * 4, 4);
  }
  d_[static_cast<std::size_t>((p * nb_ + b) * kInt8PanelCols + c)] = d;
}

std::int8_t Int8Weight::q_at(std::int64_t j, std::int64_t kk) const noexcept {
  if (j < 0 || j >= n_ || kk < 0 || kk >= nb_ * kInt8Block) return 0;
  const std::int64_t p = j / kInt8PanelCols, c = j % kInt8PanelCols;
  const std::int64_t b = kk / kInt8Block, i = kk % kInt8Block;
  return q_block(p, b)[((i / 4) * kInt8PanelCols + c) * 4 + i % 4];
}

std::uint16_t Int8Weight::d_at(std::int64_t j, std::int64_t b) const noexcept {
  if (j < 0 || j >= n_ || b < 0 || b >= nb_) return 0;
  return d_block(j / kInt8PanelCols, b)[j % kInt8PanelCols];
}

float Int8Weight::value_at(std::int64_t j, std::int64_t kk) const noexcept {
  return f16_to_f32(d_at(j, kk / kInt8Block)) * static_cast<float>(q_at(j, kk));
}

Int8Weight Int8Weight::quantize(DType dtype, const void* data, std::int64_t n, std::int64_t k) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    throw Unsupported("Int8Weight: cannot quantize weights of dtype " + std::string(dtype_name(dtype)) +
                      " (F32, BF16, F16)");
  }
  if (data == nullptr) throw InvalidArgument("Int8Weight: null weight");
  Int8Weight w;
  w.allocate(n, k);
  const auto* bytes = static_cast<const std::byte*>(data);
  const std::size_t es = dtype_size(dtype);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<std::size_t>(k));
    std::int8_t q32[kInt8Block];
#pragma omp for schedule(static)
    for (std::int64_t j = 0; j < n; ++j) {
      convert_to_f32(dtype, bytes + static_cast<std::size_t>(j * k) * es, row.size(), row.data());
      for (std::int64_t b = 0; b < w.nb_; ++b) {
        const std::int64_t c0 = b * kInt8Block;
        const std::uint16_t d = ref::quantize_q8_0_block(row.data() + c0, std::min(kInt8Block, k - c0), q32);
        w.set_block(j, b, q32, d);
      }
    }
  }
  return w;
}

Int8Weight Int8Weight::from_q8_0(const void* blocks, std::int64_t n, std::int64_t k) {
  if (k % kInt8Block != 0) {
    throw InvalidArgument("Int8Weight: a Q8_0 row of " + std::to_string(k) + " elements is not whole blocks of 32");
  }
  if (blocks == nullptr) throw InvalidArgument("Int8Weight: null weight");
  Int8Weight w;
  w.allocate(n, k);
  const auto* src = static_cast<const std::byte*>(blocks);
#pragma omp parallel for schedule(static)
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t b = 0; b < w.nb_; ++b) {
      const std::byte* blk = src + static_cast<std::size_t>((j * w.nb_ + b) * kQ8_0BlockBytes);
      std::uint16_t d;
      std::memcpy(&d, blk, 2);  // little-endian fp16 (x86-64 / ARM64 hosts)
      std::int8_t q32[kInt8Block];
      std::memcpy(q32, blk + 2, kInt8Block);
      w.set_block(j, b, q32, d);
    }
  }
  return w;
}

// ---------------------------------------------------------------------------------------------
// Kernel selection

const char* int8_kernel_name(Int8Kernel k) noexcept {
  switch (k) {
    case Int8Kernel::kAvx2: return "avx2";
    case Int8Kernel::kAvxVnni: return "avxvnni";
    case Int8Kernel::kAvx512Vnni: return "avx512vnni";
    case Int8Kernel::kNeon: return "neon";
    case Int8Kernel::kNeonDot: return "neon-dotprod";
    case Int8Kernel::kNeonI8mm: return "neon-i8mm";
    case Int8Kernel::kScalar: break;
  }
  return "scalar";
}

namespace {

#ifdef CLEF_INT8_X86
/// CPUID bit `bit` of register `reg` (0 eax, 1 ebx, 2 ecx, 3 edx) of leaf/subleaf. For features whose
/// names not every compiler's __builtin_cpu_supports knows (f16c, avxvnni, avx512vnni); their
/// register state is the AVX/AVX-512 state already checked through avx2/avx512f.
bool cpuid_bit(unsigned leaf, unsigned subleaf, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (__get_cpuid_count(leaf, subleaf, &r[0], &r[1], &r[2], &r[3]) == 0) return false;
  return ((r[reg] >> bit) & 1u) != 0;
}
#endif

/// What the CPU runs, asked once per kernel (CPUID traps to the hypervisor in a VM: not per call).
bool probe_cpu(Int8Kernel k) {
#ifdef CLEF_INT8_X86
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_bit(1, 0, 2, 29);
  switch (k) {
    case Int8Kernel::kScalar: return true;
    case Int8Kernel::kAvx2: return avx2;
    case Int8Kernel::kAvxVnni: return avx2 && cpuid_bit(7, 1, 0, 4);
    case Int8Kernel::kAvx512Vnni:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && cpuid_bit(7, 0, 2, 11);
    default: return false;  // the ARM64 kernels
  }
#elif defined(CLEF_INT8_ARM)
  const cpu::ArmFeatures f = cpu::arm_features();
  switch (k) {
    case Int8Kernel::kScalar: return true;
    case Int8Kernel::kNeon: return f.asimd;
    case Int8Kernel::kNeonDot: return f.asimd && f.dotprod;
    case Int8Kernel::kNeonI8mm: return f.asimd && f.i8mm;
    default: return false;
  }
#else
  return k == Int8Kernel::kScalar;
#endif
}

constexpr Int8Kernel kAllKernels[] = {Int8Kernel::kScalar,     Int8Kernel::kAvx2, Int8Kernel::kAvxVnni,
                                      Int8Kernel::kAvx512Vnni, Int8Kernel::kNeon, Int8Kernel::kNeonDot,
                                      Int8Kernel::kNeonI8mm};

bool cpu_has(Int8Kernel k) {
  static const std::array<bool, std::size(kAllKernels)> has = [] {
    std::array<bool, std::size(kAllKernels)> h{};
    for (Int8Kernel c : kAllKernels) h[static_cast<std::size_t>(c)] = probe_cpu(c);
    return h;
  }();
  return has[static_cast<std::size_t>(k)];
}

Int8Kernel kernel_for_level(IsaLevel level) {
#if defined(__aarch64__)
  // The level's own instructions; the SVE levels take the best dot product the CPU has (every SVE
  // core has SDOT; Neoverse V1/V2/N2 also SMMLA). All kernels give the same bits (ops/int8_gemm.h).
  const auto best_dot = [] {
    if (cpu_has(Int8Kernel::kNeonI8mm)) return Int8Kernel::kNeonI8mm;
    return cpu_has(Int8Kernel::kNeonDot) ? Int8Kernel::kNeonDot : Int8Kernel::kNeon;
  };
  switch (level) {
    case IsaLevel::kBaseline: return Int8Kernel::kScalar;
    case IsaLevel::kNeon: return cpu_has(Int8Kernel::kNeon) ? Int8Kernel::kNeon : Int8Kernel::kScalar;
    case IsaLevel::kNeonDotprod: return cpu_has(Int8Kernel::kNeonDot) ? Int8Kernel::kNeonDot : Int8Kernel::kNeon;
    case IsaLevel::kNeonI8mm:
    case IsaLevel::kSve256:
    case IsaLevel::kSve2_128: return best_dot();
  }
  return Int8Kernel::kScalar;
#else
  switch (level) {
    case IsaLevel::kBaseline: return Int8Kernel::kScalar;
    case IsaLevel::kAvx2:
      // An AVX2-class CPU with AVX-VNNI and no AVX-512 (Alder Lake and later client cores).
      if (best_supported_isa() == IsaLevel::kAvx2 && cpu_has(Int8Kernel::kAvxVnni)) return Int8Kernel::kAvxVnni;
      return cpu_has(Int8Kernel::kAvx2) ? Int8Kernel::kAvx2 : Int8Kernel::kScalar;
    case IsaLevel::kAvx512:
    case IsaLevel::kAvx512Bf16:
      if (cpu_has(Int8Kernel::kAvx512Vnni)) return Int8Kernel::kAvx512Vnni;
      return cpu_has(Int8Kernel::kAvx2) ? Int8Kernel::kAvx2 : Int8Kernel::kScalar;
  }
  return Int8Kernel::kScalar;
#endif
}

Int8Kernel choose_kernel() {
  const char* env = std::getenv("CLEF_INT8_KERNEL");
  if (env != nullptr && *env != '\0') {
    const std::string s(env);
    for (Int8Kernel k : kAllKernels) {
      if (s == int8_kernel_name(k)) {
        if (!cpu_has(k)) {
          throw Unsupported("CLEF_INT8_KERNEL=" + s + ": this CPU cannot run that kernel");
        }
        return k;
      }
    }
    throw InvalidArgument(
        "CLEF_INT8_KERNEL must be scalar, avx2, avxvnni, avx512vnni, neon, neon-dotprod or neon-i8mm (got '" +
        s.substr(0, 40) + "')");
  }
  return kernel_for_level(active_isa());
}

}  // namespace

std::vector<Int8Kernel> int8_kernels_supported() {
  std::vector<Int8Kernel> out;
  for (Int8Kernel k : kAllKernels) {
    if (cpu_has(k)) out.push_back(k);
  }
  return out;
}

Int8Kernel active_int8_kernel() {
  // Follows set_isa_for_testing: recomputed from the level in use each time (cheap).
  return choose_kernel();
}

// ---------------------------------------------------------------------------------------------
// Peak of each kernel's dot-product sequence (ops/int8_gemm.h)

namespace {

#ifdef CLEF_INT8_X86
constexpr int kPeakChains = 8;

// Six chains in named variables (six accumulators, six weights and three constants fit the 16 ymm
// registers; arrays or more chains would go through the stack). The empty asm makes each weight
// vector opaque every iteration, so the compiler cannot hoist the chain's vpsignb/vpmaddubsw/
// vpmaddwd out of the loop (in the kernels they take new weights each time).
// The AVX2 kernel's inner step as tile_avx2 runs it: two weight vectors, four rows whose
// activation words (signed, and their magnitudes) are broadcast from memory each step, eight
// accumulator chains. (A first version kept six chains of one register-resident activation; GCC
// spilled its accumulators to the stack, the chains then ran at the store-forwarding latency, and
// the real GEMM measured 106-121% of that "peak".)
__attribute__((target("avx2"))) double peak_avx2(std::int64_t iters) {
  static const std::int32_t act[8] = {0x01fd037f, 0x7f02fe05, 0x71017f03, 0x02fe0102,
                                      0x01030381, 0x7f020205, 0x7f017f03, 0x02020102};
  const std::int32_t* ap = act;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i w0 = _mm256_set1_epi8(-3), w1 = _mm256_set1_epi8(2);
  __m256i c[4][2];
  for (auto& r : c) r[0] = r[1] = _mm256_setzero_si256();
  for (std::int64_t i = 0; i < iters; ++i) {
    // Opaque to the compiler: the weights and the activation pointer may change every step, so
    // the sign/multiply sequence and the broadcasts stay inside the loop, as in the kernel.
    asm volatile("" : "+x"(w0), "+x"(w1), "+r"(ap));
    for (int r = 0; r < 4; ++r) {
      const __m256i a = _mm256_set1_epi32(ap[r]);
      const __m256i ua = _mm256_set1_epi32(ap[r + 4]);
      c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(w0, a)), ones));
      c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(ua, _mm256_sign_epi8(w1, a)), ones));
    }
  }
  __m256i sum = _mm256_setzero_si256();
  for (auto& r : c) sum = _mm256_add_epi32(sum, _mm256_add_epi32(r[0], r[1]));
  return _mm256_extract_epi32(sum, 0) == 12345 ? 0.0 : 8 * 32.0;  // multiply-adds per iteration
}

__attribute__((target("avx2,avxvnni"))) double peak_avxvnni(std::int64_t iters) {
  __m256i acc[kPeakChains];
  const __m256i a = _mm256_set1_epi8(3), w = _mm256_set1_epi8(5);
  for (auto& v : acc) v = _mm256_setzero_si256();
  for (std::int64_t i = 0; i < iters; ++i) {
    for (auto& v : acc) v = _mm256_dpbusd_avx_epi32(v, w, a);
  }
  std::int32_t sink = 0;
  for (const __m256i& v : acc) sink += _mm256_extract_epi32(v, 0);
  return sink == 12345 ? 0.0 : kPeakChains * 32.0;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) double peak_avx512vnni(std::int64_t iters) {
  __m512i acc[kPeakChains];
  const __m512i a = _mm512_set1_epi8(3), w = _mm512_set1_epi8(5);
  for (auto& v : acc) v = _mm512_setzero_si512();
  for (std::int64_t i = 0; i < iters; ++i) {
    for (auto& v : acc) v = _mm512_dpbusd_epi32(v, w, a);
  }
  std::int32_t sink = 0;
  for (const __m512i& v : acc) {
    std::int32_t lanes[16];
    _mm512_storeu_si512(lanes, v);
    sink += lanes[0];
  }
  return sink == 12345 ? 0.0 : kPeakChains * 64.0;
}
#endif

}  // namespace

double measure_int8_peak_gops(Int8Kernel k, int threads, int repeats, std::int64_t iters) {
#ifdef CLEF_INT8_X86
  const std::vector<Int8Kernel> have = int8_kernels_supported();
  if (k == Int8Kernel::kScalar || std::find(have.begin(), have.end(), k) == have.end()) return 0.0;
  return best_chain_rate_gops(threads, repeats, iters,
                              k == Int8Kernel::kAvx2      ? peak_avx2
                              : k == Int8Kernel::kAvxVnni ? peak_avxvnni
                                                          : peak_avx512vnni);
#elif defined(CLEF_INT8_ARM)
  // The ARM kernels' instructions: SDOT (neon-dotprod) and SMMLA (neon-i8mm), ops/peak.h.
  if (!cpu_has(k)) return 0.0;
  if (k == Int8Kernel::kNeonDot) return measure_arm_peak(ArmPeak::kSdot, threads, repeats, iters);
  if (k == Int8Kernel::kNeonI8mm) return measure_arm_peak(ArmPeak::kSmmla, threads, repeats, iters);
  return 0.0;
#else
  (void)k, (void)threads, (void)repeats, (void)iters;
  return 0.0;
#endif
}

// ---------------------------------------------------------------------------------------------
// Activation quantization

namespace {

/// A quantized block's |q| into aq32; returns Σ q (the plain form of the AVX2 quantizer's tail).
std::int32_t block_abs_and_sum(const std::int8_t* q32, std::uint8_t* aq32) {
  std::int32_t s = 0;
  for (std::int64_t i = 0; i < kInt8Block; ++i) {
    s += q32[i];
    aq32[i] = static_cast<std::uint8_t>(q32[i] < 0 ? -q32[i] : q32[i]);
  }
  return s;
}

#ifdef CLEF_INT8_X86
/// AVX2 version of ref::quantize_activation_block for full blocks: same operations per element
/// (|x| max, d = amax / 127, id = 1 / d, cvtps (round to nearest even, as nearbyint), clamp).
/// Also writes the block's |q| (aq32) and Σ q (*sum), as block_abs_and_sum does.
__attribute__((target("avx2,fma"))) float quantize_block_avx2(const float* x, std::int8_t* q32, std::uint8_t* aq32,
                                                              std::int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  // NaN/inf anywhere: the scalar path decides (returns NaN).
  __m256 fin = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i)
    fin = _mm256_or_ps(fin, _mm256_cmp_ps(_mm256_andnot_ps(sign, v[i]), _mm256_set1_ps(INFINITY), _CMP_NLT_UQ));
  if (_mm256_movemask_ps(fin) != 0) {
    const float d = ref::quantize_activation_block(x, kInt8Block, q32);
    *sum = block_abs_and_sum(q32, aq32);
    return d;
  }
  __m128 hi = _mm256_extractf128_ps(amax, 1);
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), hi);
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float am = _mm_cvtss_f32(m4);
  const float d = am / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256 lo = _mm256_set1_ps(-127.0f), up = _mm256_set1_ps(127.0f);
  __m256i qi[4];
  for (int i = 0; i < 4; ++i) {
    __m256 t = _mm256_mul_ps(v[i], vid);
    t = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    t = _mm256_min_ps(up, _mm256_max_ps(lo, t));
    qi[i] = _mm256_cvtps_epi32(t);
  }
  // int32 -> int16 -> int8 with lane fix-ups (packs work per 128-bit lane).
  const __m256i p01 = _mm256_packs_epi32(qi[0], qi[1]);
  const __m256i p23 = _mm256_packs_epi32(qi[2], qi[3]);
  __m256i b = _mm256_packs_epi16(p01, p23);
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q32), b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(aq32), _mm256_abs_epi8(b));  // |q| <= 127: no overflow
  // Σ q: byte pairs (1 * q) to int16, int16 pairs to int32, then the eight int32 lanes.
  const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), b);
  const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  *sum = _mm_cvtsi128_si32(t);
  return d;
}
#endif

#ifdef CLEF_INT8_ARM
/// ref::quantize_activation_block for a full block on Advanced SIMD (the same operations per
/// element: |x| max, d = amax / 127, id = 1 / d, x · id rounded to nearest even (FRINTN, as
/// nearbyint), clamp); also |q| and Σ q as block_abs_and_sum. A block with a NaN or infinity goes
/// to the scalar code (which returns NaN).
inline float quantize_block_neon(const float* x, std::int8_t* q32, std::uint8_t* aq32, std::int32_t* sum) {
  float32x4_t v[8];
  float32x4_t amax = vdupq_n_f32(0.0f);
  uint32x4_t finite = vdupq_n_u32(~0u);
  const float32x4_t inf = vdupq_n_f32(INFINITY);
  for (int i = 0; i < 8; ++i) {
    v[i] = vld1q_f32(x + 4 * i);
    const float32x4_t a = vabsq_f32(v[i]);
    finite = vandq_u32(finite, vcltq_f32(a, inf));  // false for NaN and ±inf
    amax = vmaxq_f32(amax, a);
  }
  if (vminvq_u32(finite) == 0) {
    const float d = ref::quantize_activation_block(x, kInt8Block, q32);
    *sum = block_abs_and_sum(q32, aq32);
    return d;
  }
  const float d = vmaxvq_f32(amax) / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  const float32x4_t lo = vdupq_n_f32(-127.0f), up = vdupq_n_f32(127.0f);
  int16x8_t h[4];
  for (int i = 0; i < 4; ++i) {
    int32x4_t qi[2];
    for (int u = 0; u < 2; ++u) {
      const float32x4_t t = vminq_f32(up, vmaxq_f32(lo, vrndnq_f32(vmulq_n_f32(v[2 * i + u], id))));
      qi[u] = vcvtq_s32_f32(t);  // integral already: exact
    }
    h[i] = vcombine_s16(vmovn_s32(qi[0]), vmovn_s32(qi[1]));
  }
  const int8x16_t q0 = vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1]));
  const int8x16_t q1 = vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3]));
  vst1q_s8(q32, q0);
  vst1q_s8(q32 + 16, q1);
  vst1q_u8(aq32, vreinterpretq_u8_s8(vabsq_s8(q0)));  // |q| ≤ 127: no overflow
  vst1q_u8(aq32 + 16, vreinterpretq_u8_s8(vabsq_s8(q1)));
  *sum = static_cast<std::int32_t>(vaddlvq_s8(q0)) + static_cast<std::int32_t>(vaddlvq_s8(q1));
  return d;
}

#endif

}  // namespace

void prepare_activations(std::int64_t m, std::int64_t k, Int8Activations& out) {
  const std::int64_t nb = (k + kInt8Block - 1) / kInt8Block;
  out.m = m;
  out.k = k;
  out.blocks = nb;
  const auto need = static_cast<std::size_t>(m * nb);
  if (out.q.size() < need * kInt8Block) out.q.resize(need * kInt8Block);
  if (out.absq.size() < need * kInt8Block) out.absq.resize(need * kInt8Block);
  if (out.d.size() < need) out.d.resize(need);
  if (out.sum128.size() < need) out.sum128.resize(need);
  out.half_sums_ready = false;
  out.interleaved_for = Interleaved::kNone;
#if defined(CLEF_INT8_X86) || defined(CLEF_INT8_ARM)
  out.simd = active_int8_kernel() != Int8Kernel::kScalar;  // once per call, not per row
#else
  out.simd = false;
#endif
}

void quantize_activation_span(const float* x, std::int64_t count, std::int64_t row, std::int64_t block0,
                              Int8Activations& out) {
  const bool simd = out.simd;
  const std::int64_t nb = out.blocks;
  for (std::int64_t c0 = 0, b = block0; c0 < count; c0 += kInt8Block, ++b) {
    const std::int64_t cnt = std::min(kInt8Block, count - c0);
    const auto at = static_cast<std::size_t>(row * nb + b);
    std::int8_t* q = out.q.data() + at * kInt8Block;
    std::uint8_t* aq = out.absq.data() + at * kInt8Block;
    float d;
    std::int32_t s = 0;
#ifdef CLEF_INT8_X86
    if (simd && cnt == kInt8Block) {
      d = quantize_block_avx2(x + c0, q, aq, &s);
    } else
#elif defined(CLEF_INT8_ARM)
    if (simd && cnt == kInt8Block) {
      d = quantize_block_neon(x + c0, q, aq, &s);
    } else
#endif
    {
      (void)simd;
      d = ref::quantize_activation_block(x + c0, cnt, q);
      s = block_abs_and_sum(q, aq);
    }
    out.d[at] = d;
    out.sum128[at] = 128 * s;
  }
}

void quantize_activations(const float* x, std::int64_t m, std::int64_t k, Int8Activations& out) {
  prepare_activations(m, k, out);
  // Row-independent element-wise work, so the element-wise kernels' threshold (ops/parallel.h).
#pragma omp parallel for schedule(static) if (m * k > kParallelMin)
  for (std::int64_t r = 0; r < m; ++r) quantize_activation_span(x + r * k, k, r, 0, out);
}

// ---------------------------------------------------------------------------------------------
// Kernels. Each computes rows [r0, r0 + mr) × panels [p0, p0 + np) of y.

namespace {

struct Job {
  const Int8Activations* a;
  const Int8Weight* w;
  float* y;
  std::int64_t n;  ///< row stride of y
  bool accumulate;
  const std::int8_t* pairs = nullptr;   ///< the neon-i8mm kernel's row-paired activations (pair_rows)
  const std::uint8_t* quads = nullptr;  ///< the AVX2 kernel's row-interleaved activations (interleave_quads)
};

/// Writes the fp32 tile acc [mr][16·np] to y (only columns < n), adding when accumulating.
inline void store_tile(const Job& j, std::int64_t r0, int mr, std::int64_t p0, int np, const float* acc, int ld) {
  for (int r = 0; r < mr; ++r) {
    float* yr = j.y + (r0 + r) * j.n;
    for (int c = 0; c < np * kInt8PanelCols; ++c) {
      const std::int64_t col = p0 * kInt8PanelCols + c;
      if (col >= j.n) break;
      yr[col] = j.accumulate ? yr[col] + acc[r * ld + c] : acc[r * ld + c];
    }
  }
}

/// Plain C++ tile (the baseline level): the reference expression on the packed layout.
void tile_scalar(const Job& j, std::int64_t r0, int mr, std::int64_t p0) {
  const std::int64_t nb = j.w->blocks();
  float acc[4 * kInt8PanelCols] = {};
  for (int r = 0; r < mr; ++r) {
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int8_t* qa = j.a->q.data() + static_cast<std::size_t>(((r0 + r) * nb + b) * kInt8Block);
      const float da = j.a->d[static_cast<std::size_t>((r0 + r) * nb + b)];
      const std::int8_t* qw = j.w->q_block(p0, b);
      const std::uint16_t* dw = j.w->d_block(p0, b);
      std::int32_t dot[kInt8PanelCols] = {};
      for (int g = 0; g < kInt8Block / 4; ++g) {
        for (int c = 0; c < kInt8PanelCols; ++c) {
          for (int i = 0; i < 4; ++i) dot[c] += qa[g * 4 + i] * qw[(g * kInt8PanelCols + c) * 4 + i];
        }
      }
      for (int c = 0; c < kInt8PanelCols; ++c) {
        acc[r * kInt8PanelCols + c] =
            std::fma(static_cast<float>(dot[c]), f16_to_f32(dw[c]) * da, acc[r * kInt8PanelCols + c]);
      }
    }
  }
  store_tile(j, r0, mr, p0, 1, acc, kInt8PanelCols);
}

#ifdef CLEF_INT8_X86

/// 256-bit kernels: folds one block's int32 sums (MR rows × 16 columns, two vectors per row) into
/// the fp32 accumulators: acc = fma(float(isum), dw · da, acc). `da_b` is row 0's scale of the
/// block, rows `nb` apart.
template <int MR>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void fold_block_256(const std::uint16_t* dw,
                                                                                   const float* da_b, std::int64_t nb,
                                                                                   const __m256i (&is)[MR][2],
                                                                                   __m256 (&acc)[MR][2]) {
  const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dw)));
  const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dw + 8)));
  for (int r = 0; r < MR; ++r) {
    const __m256 s = _mm256_set1_ps(da_b[r * nb]);
    acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][0]), _mm256_mul_ps(d0, s), acc[r][0]);
    acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][1]), _mm256_mul_ps(d1, s), acc[r][1]);
  }
}

/// 256-bit kernels: writes the MR × 16 fp32 tile to y: vector loads and stores when the panel lies
/// inside n, store_tile's scalar loop for the last, partial panel (the same fp32 add per element
/// when accumulating, so the same bits). Alone they had measured ±1%; with the output lines
/// prefetched (cpu/tile_output.h) the stores are no longer waiting on misses and the scalar loop's
/// compare, branch and add per value shows (docs/PERFORMANCE.md).
template <int MR>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void store_tile_256(const Job& j, std::int64_t r0,
                                                                                   std::int64_t p0,
                                                                                   const __m256 (&acc)[MR][2]) {
  const std::int64_t c0 = p0 * kInt8PanelCols;
  if (c0 + kInt8PanelCols > j.n) {
    float out[MR * kInt8PanelCols];
    for (int r = 0; r < MR; ++r) {
      _mm256_storeu_ps(out + r * kInt8PanelCols, acc[r][0]);
      _mm256_storeu_ps(out + r * kInt8PanelCols + 8, acc[r][1]);
    }
    store_tile(j, r0, MR, p0, 1, out, kInt8PanelCols);
    return;
  }
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < 2; ++h) {
      float* yr = j.y + (r0 + r) * j.n + c0 + 8 * h;
      _mm256_storeu_ps(yr, j.accumulate ? _mm256_add_ps(_mm256_loadu_ps(yr), acc[r][h]) : acc[r][h]);
    }
}

/// Bytes of one record of interleave_quads: per group of 4 k, the 4 rows' 4 qa bytes then their 4
/// |qa| bytes (32 bytes), then the 4 rows' da (fp32) and 16 bytes of zeros.
constexpr std::int64_t kQuadDa = kInt8Block / 4 * 32;  ///< byte offset of the 4 rows' da
constexpr std::int64_t kQuadRecord = kQuadDa + 32;

/// One record of interleave_quads for 4 rows that all exist: the 4 rows' qa and |qa| as 8 rows of 8
/// dwords (one dword per group of 4 k), transposed, are the record's 8 groups.
__attribute__((target("avx2"))) inline void quad_record(const Int8Activations& a, std::int64_t row0, std::int64_t b,
                                                        std::uint8_t* dst) {
  const std::int64_t nb = a.blocks;
  __m256 v[8];
  float da[8] = {};
  for (int rr = 0; rr < 4; ++rr) {
    const auto at = static_cast<std::size_t>((row0 + rr) * nb + b);
    v[rr] = _mm256_loadu_ps(reinterpret_cast<const float*>(a.q.data() + at * kInt8Block));
    v[4 + rr] = _mm256_loadu_ps(reinterpret_cast<const float*>(a.absq.data() + at * kInt8Block));
    da[rr] = a.d[at];
  }
  cpu::transpose8x8(v);  // moves bits only: no lane is read as a float
  for (int g = 0; g < kInt8Block / 4; ++g) _mm256_storeu_ps(reinterpret_cast<float*>(dst + g * 32), v[g]);
  _mm256_storeu_ps(reinterpret_cast<float*>(dst + kQuadDa), _mm256_loadu_ps(da));
}

/// The AVX2 kernel's activations, one record per tile of 4 rows and block (kQuadRecord bytes, rows
/// past m zero): a tile reads one contiguous stream instead of 8 rows' worth of streams.
void interleave_quads(const Int8Activations& a, std::vector<std::uint8_t>& out) {
  const std::int64_t quads = (a.m + 3) / 4, nb = a.blocks;
  out.resize(static_cast<std::size_t>(quads * nb * kQuadRecord));
#pragma omp parallel for schedule(static) if (quads * nb > 256)
  for (std::int64_t t = 0; t < quads; ++t) {
    for (std::int64_t b = 0; b < nb; ++b) {
      std::uint8_t* dst = out.data() + static_cast<std::size_t>((t * nb + b) * kQuadRecord);
      if (4 * t + 4 <= a.m) {
        quad_record(a, 4 * t, b, dst);
        continue;
      }
      std::memset(dst, 0, static_cast<std::size_t>(kQuadRecord));
      for (int rr = 0; rr < 4 && 4 * t + rr < a.m; ++rr) {
        const auto at = static_cast<std::size_t>((4 * t + rr) * nb + b);
        for (int g = 0; g < kInt8Block / 4; ++g) {
          std::memcpy(dst + g * 32 + 4 * rr, a.q.data() + at * kInt8Block + 4 * g, 4);
          std::memcpy(dst + g * 32 + 16 + 4 * rr, a.absq.data() + at * kInt8Block + 4 * g, 4);
        }
        std::memcpy(dst + kQuadDa + 4 * rr, &a.d[at], 4);
      }
    }
  }
}

/// AVX2: MR rows × one panel (2 ymm of 8 columns), sign trick, on interleave_quads' records (r0 a
/// multiple of 4).
template <int MR>
__attribute__((target("avx2,fma,f16c"))) void tile_avx2(const Job& j, std::int64_t r0, std::int64_t p0) {
  const std::int64_t nb = j.w->blocks();
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const std::uint8_t* rec = j.quads + static_cast<std::size_t>((r0 / 4) * nb * kQuadRecord);
  for (std::int64_t b = 0; b < nb; ++b, rec += kQuadRecord) {
    const std::int8_t* qw = j.w->q_block(p0, b);
    __m256i is[MR][2];
    for (int r = 0; r < MR; ++r) is[r][0] = is[r][1] = _mm256_setzero_si256();
      // The 8 groups of a block unrolled: as a loop, GCC 12 kept the sums' chains in rotating registers and
      // copied 4-5 of them back at every iteration (vmovdqa); unrolled they stay put (in-process A/B on the
      // 0.8b shapes, m = 512, Zen 3: +1.6-2.3% on most shapes, same bits).
#pragma GCC unroll 8
    for (int g = 0; g < kInt8Block / 4; ++g) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + g * 64));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + g * 64 + 32));
      for (int r = 0; r < MR; ++r) {
        std::int32_t a4, u4;
        std::memcpy(&a4, rec + g * 32 + 4 * r, 4);
        std::memcpy(&u4, rec + g * 32 + 16 + 4 * r, 4);
        const __m256i a = _mm256_set1_epi32(a4);
        const __m256i ua = _mm256_set1_epi32(u4);
        const __m256i p0v = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(w0, a));
        const __m256i p1v = _mm256_maddubs_epi16(ua, _mm256_sign_epi8(w1, a));
        is[r][0] = _mm256_add_epi32(is[r][0], _mm256_madd_epi16(p0v, ones));
        is[r][1] = _mm256_add_epi32(is[r][1], _mm256_madd_epi16(p1v, ones));
        // No instruction: keeps each int32 sum a register-held chain (without it GCC spilled 3 of the 8
        // sums of the 4-row tile and reloaded them every group; in-process A/B +0-7%, same bits).
        asm("" : "+x"(is[r][0]), "+x"(is[r][1]));
      }
    }
    fold_block_256<MR>(j.w->d_block(p0, b), reinterpret_cast<const float*>(rec + kQuadDa), 1, is, acc);
  }
  store_tile_256<MR>(j, r0, p0, acc);
}

/// AVX-VNNI: MR rows × one panel, vpdpbusd on (qw + 128) and qa, minus 128 · Σ qa per block.
template <int MR>
__attribute__((target("avx2,fma,f16c,avxvnni"))) void tile_avxvnni(const Job& j, std::int64_t r0, std::int64_t p0) {
  const std::int64_t nb = j.w->blocks();
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const std::int8_t* qa[MR];
  for (int r = 0; r < MR; ++r) qa[r] = j.a->q.data() + static_cast<std::size_t>((r0 + r) * nb * kInt8Block);
  const float* da = j.a->d.data() + static_cast<std::size_t>(r0 * nb);
  const std::int32_t* s128 = j.a->sum128.data() + static_cast<std::size_t>(r0 * nb);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* qw = j.w->q_block(p0, b);
    __m256i is[MR][2];
    for (int r = 0; r < MR; ++r) is[r][0] = is[r][1] = _mm256_set1_epi32(-s128[r * nb + b]);
    for (int g = 0; g < kInt8Block / 4; ++g) {
      const __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + g * 64)), flip);
      const __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + g * 64 + 32)), flip);
      for (int r = 0; r < MR; ++r) {
        std::int32_t a4;
        std::memcpy(&a4, qa[r] + b * kInt8Block + g * 4, 4);
        const __m256i a = _mm256_set1_epi32(a4);
        is[r][0] = _mm256_dpbusd_avx_epi32(is[r][0], w0, a);
        is[r][1] = _mm256_dpbusd_avx_epi32(is[r][1], w1, a);
      }
    }
    fold_block_256<MR>(j.w->d_block(p0, b), da + b, nb, is, acc);
  }
  store_tile_256<MR>(j, r0, p0, acc);
}

/// The AVX512-VNNI counterpart of store_tile_256: the MR × (NP × 16) fp32 tile to y, vector loads and
/// stores when its panels lie inside n, store_tile's scalar loop when they reach past it (the same
/// fp32 add per element when accumulating, so the same bits).
template <int MR, int NP>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void store_tile_512(
    const Job& j, std::int64_t r0, std::int64_t p0, const __m512 (&acc)[MR][NP]) {
  const std::int64_t c0 = p0 * kInt8PanelCols;
  if (c0 + NP * kInt8PanelCols > j.n) {  // the last panels: store_tile drops the columns past n
    float out[MR * NP * kInt8PanelCols];
    for (int r = 0; r < MR; ++r)
      for (int p = 0; p < NP; ++p) _mm512_storeu_ps(out + (r * NP + p) * kInt8PanelCols, acc[r][p]);
    store_tile(j, r0, MR, p0, NP, out, NP * static_cast<int>(kInt8PanelCols));
    return;
  }
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) {
      float* yr = j.y + (r0 + r) * j.n + c0 + p * kInt8PanelCols;
      _mm512_storeu_ps(yr, j.accumulate ? _mm512_add_ps(_mm512_loadu_ps(yr), acc[r][p]) : acc[r][p]);
    }
}

/// AVX512-VNNI: MR rows × NP panels (one zmm of 16 columns each).
template <int MR, int NP>
__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))) void tile_avx512vnni(const Job& j,
                                                                                                   std::int64_t r0,
                                                                                                   std::int64_t p0) {
  const std::int64_t nb = j.w->blocks();
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[MR][NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  const std::int8_t* qa[MR];
  for (int r = 0; r < MR; ++r) qa[r] = j.a->q.data() + static_cast<std::size_t>((r0 + r) * nb * kInt8Block);
  const float* da = j.a->d.data() + static_cast<std::size_t>(r0 * nb);
  const std::int32_t* s128 = j.a->sum128.data() + static_cast<std::size_t>(r0 * nb);
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* qw[NP];
    for (int p = 0; p < NP; ++p) qw[p] = j.w->q_block(p0 + p, b);
    __m512i is[MR][NP];
    for (int r = 0; r < MR; ++r) {
      const __m512i c = _mm512_set1_epi32(-s128[r * nb + b]);
      for (int p = 0; p < NP; ++p) is[r][p] = c;
    }
    for (int g = 0; g < kInt8Block / 4; ++g) {
      __m512i w[NP];
      for (int p = 0; p < NP; ++p) w[p] = _mm512_xor_si512(_mm512_loadu_si512(qw[p] + g * 64), flip);
      for (int r = 0; r < MR; ++r) {
        std::int32_t a4;
        std::memcpy(&a4, qa[r] + b * kInt8Block + g * 4, 4);
        const __m512i a = _mm512_set1_epi32(a4);
        for (int p = 0; p < NP; ++p) is[r][p] = _mm512_dpbusd_epi32(is[r][p], w[p], a);
      }
    }
    __m512 d[NP];
    for (int p = 0; p < NP; ++p) {
      d[p] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(j.w->d_block(p0 + p, b))));
    }
    for (int r = 0; r < MR; ++r) {
      const __m512 s = _mm512_set1_ps(da[r * nb + b]);
      for (int p = 0; p < NP; ++p) {
        acc[r][p] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r][p]), _mm512_mul_ps(d[p], s), acc[r][p]);
      }
    }
  }
  store_tile_512<MR, NP>(j, r0, p0, acc);
}

void tiles_avx2(const Job& j, std::int64_t p0, std::int64_t m) {
  std::int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    cpu::prefetch_output_tile(j.y, j.n, r, 4, p0 * kInt8PanelCols, kInt8PanelCols);
    tile_avx2<4>(j, r, p0);
  }
  switch (m - r) {
    case 3: tile_avx2<3>(j, r, p0); break;
    case 2: tile_avx2<2>(j, r, p0); break;
    case 1: tile_avx2<1>(j, r, p0); break;
    default: break;
  }
}

void tiles_avxvnni(const Job& j, std::int64_t p0, std::int64_t m) {
  std::int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    cpu::prefetch_output_tile(j.y, j.n, r, 4, p0 * kInt8PanelCols, kInt8PanelCols);
    tile_avxvnni<4>(j, r, p0);
  }
  switch (m - r) {
    case 3: tile_avxvnni<3>(j, r, p0); break;
    case 2: tile_avxvnni<2>(j, r, p0); break;
    case 1: tile_avxvnni<1>(j, r, p0); break;
    default: break;
  }
}

template <int NP>
void tiles_avx512vnni(const Job& j, std::int64_t p0, std::int64_t m) {
  std::int64_t r = 0;
  for (; r + 6 <= m; r += 6) {
    cpu::prefetch_output_tile(j.y, j.n, r, 6, p0 * kInt8PanelCols, NP * kInt8PanelCols);
    tile_avx512vnni<6, NP>(j, r, p0);
  }
  switch (m - r) {
    case 5: tile_avx512vnni<5, NP>(j, r, p0); break;
    case 4: tile_avx512vnni<4, NP>(j, r, p0); break;
    case 3: tile_avx512vnni<3, NP>(j, r, p0); break;
    case 2: tile_avx512vnni<2, NP>(j, r, p0); break;
    case 1: tile_avx512vnni<1, NP>(j, r, p0); break;
    default: break;
  }
}

#endif  // CLEF_INT8_X86

#include "ops/cpu/int8_gemm_neon-inl.h"  // NOLINT(build/include): ARM64 kernels, inside this namespace

void tiles_scalar(const Job& j, std::int64_t p0, std::int64_t m) {
  for (std::int64_t r = 0; r < m; r += 4) tile_scalar(j, r, static_cast<int>(std::min<std::int64_t>(4, m - r)), p0);
}

}  // namespace

namespace {
/// The GEMM of one call on quantized activations, with a chosen kernel the CPU has.
void run_int8(Int8Kernel kernel, Int8Activations& act, const Int8Weight& w, float* y, bool accumulate) {
  const std::int64_t m = act.m;
  Job job{&act, &w, y, w.n(), accumulate};
#ifdef CLEF_INT8_ARM
  if (kernel == Int8Kernel::kNeonI8mm) {
    thread_local std::vector<std::int8_t> pairs;
    pair_rows(act, pairs);
    job.pairs = pairs.data();
  }
#endif
#ifdef CLEF_INT8_X86
  if (kernel == Int8Kernel::kAvx2) {
    if (act.interleaved_for != Interleaved::kInt8Avx2) {
      CLEF_PROF_SCOPE(">linear.interleave_x");
      interleave_quads(act, act.interleaved);
      act.interleaved_for = Interleaved::kInt8Avx2;
    }
    job.quads = act.interleaved.data();
  }
#endif
  // Units of work: panels (pairs of panels for the 512-bit kernel), split over the threads.
  const std::int64_t step = kernel == Int8Kernel::kAvx512Vnni ? 2 : 1;
  const std::int64_t units = (w.panels() + step - 1) / step;
  CLEF_PROF_SCOPE(">linear.int8_gemm");
#pragma omp parallel for schedule(static) if (units > 1 && m * w.n() * w.k() > (1 << 18))
  for (std::int64_t u = 0; u < units; ++u) {
    const std::int64_t p0 = u * step;
    switch (kernel) {
#ifdef CLEF_INT8_X86
      case Int8Kernel::kAvx2: tiles_avx2(job, p0, m); break;
      case Int8Kernel::kAvxVnni: tiles_avxvnni(job, p0, m); break;
      case Int8Kernel::kAvx512Vnni:
        if (p0 + 1 < w.panels()) {
          tiles_avx512vnni<2>(job, p0, m);
        } else {
          tiles_avx512vnni<1>(job, p0, m);
        }
        break;
#endif
#ifdef CLEF_INT8_ARM
      case Int8Kernel::kNeon: tiles_neon(job, p0, m); break;
      case Int8Kernel::kNeonDot: tiles_neon_dot(job, p0, m); break;
      case Int8Kernel::kNeonI8mm: tiles_neon_i8mm(job, p0, m); break;
#endif
      default: tiles_scalar(job, p0, m); break;
    }
  }
}
}  // namespace

void int8_linear_with(Int8Kernel kernel, const float* x, std::int64_t m, const Int8Weight& w, float* y,
                      bool accumulate) {
  if (!w.valid() || m <= 0) throw InvalidArgument("int8_linear: empty weight or m <= 0");
  if (!cpu_has(kernel)) {
    throw Unsupported(std::string("int8_linear: this CPU cannot run the ") + int8_kernel_name(kernel) + " kernel");
  }
  thread_local Int8Activations act;
  {
    CLEF_PROF_SCOPE(">linear.quantize_x");
    quantize_activations(x, m, w.k(), act);
  }
  run_int8(kernel, act, w, y, accumulate);
}

void int8_linear_quantized(Int8Activations& act, const Int8Weight& w, float* y, bool accumulate) {
  if (!w.valid() || act.m <= 0) throw InvalidArgument("int8_linear_quantized: empty weight or m <= 0");
  if (act.k != w.k()) {
    throw InvalidArgument("int8_linear_quantized: activations of k = " + std::to_string(act.k) +
                          ", weight of k = " + std::to_string(w.k()));
  }
  run_int8(active_int8_kernel(), act, w, y, accumulate);
}

void int8_linear(const float* x, std::int64_t m, const Int8Weight& w, float* y, bool accumulate) {
  int8_linear_with(active_int8_kernel(), x, m, w, y, accumulate);
}

}  // namespace clef::ops

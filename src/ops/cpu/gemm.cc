// SPDX-License-Identifier: MIT
// The library-independent part of ops/gemm.h: weights prepared per precision, linear() and
// linear_shared() routing each weight to its path (int8, block-quantized, bf16 matmul, fp32 matmul),
// and the bf16 fallback. The matrix products themselves go to the GEMM library of the architecture
// (cpu/gemm_backend.h: oneDNN on x86-64, OpenBLAS on ARM64).
//
// bf16 where the library has no bf16 matmul (Debian's oneDNN 2.6 below AVX-512, a level capped by
// CLEF_ISA, and OpenBLAS, which Debian builds without its bf16 GEMM): the same numerics contract
// through the fp32 matmul. The activations are rounded to bf16 values (kept as fp32) and the bf16
// weights widened to fp32 (exact), so every product is the exact product of two bf16 values and the
// sums are fp32, as in oneDNN's bf16 kernel; only the summation order differs. The widened weight
// goes to per-call scratch, as in the fp32 mode.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/quant_blocks.h"
#include "ops/convert.h"
#include "ops/cpu/gemm_backend.h"
#if !defined(__aarch64__)
#include "ops/cpu/bf16_gemm_x86.h"
#include "ops/cpu/fma_gemm_x86.h"
#endif
#include "ops/gemm.h"
#include "ops/isa.h"
#include "ops/profile.h"

namespace clef::ops {
namespace {

/// A GEMM choice from the environment variable `name`: "clef" true, "library" false, unset or empty
/// `default_clef`; anything else InvalidArgument naming the variable.
[[maybe_unused]] bool gemm_choice_from_env(const char* name, bool default_clef) {
  const char* v = std::getenv(name);
  const std::string s = v == nullptr ? "" : v;
  if (s.empty()) return default_clef;
  if (s == "clef" || s == "library") return s == "clef";
  throw InvalidArgument(std::string(name) + ": unknown value \"" + s + "\"; expected clef or library");
}

/// set_own_bf16_gemm's setting: -1 = not set, the environment decides (CLEF_BF16_GEMM).
std::atomic<int> g_own_bf16{-1};

/// Whether bf16 linear layers take clef's own vdpbf16ps GEMM (ops/gemm.h own_bf16_gemm_active).
bool own_bf16_gemm() {
#if defined(__aarch64__)
  return false;
#else
  int on = g_own_bf16.load(std::memory_order_relaxed);
  if (on < 0) {
    static const bool from_env = gemm_choice_from_env("CLEF_BF16_GEMM", false);
    on = from_env ? 1 : 0;
  }
  return on == 1 && cpu::dpbf16_gemm_available();
#endif
}

/// set_own_fp32_gemm's setting: -1 = not set, the environment decides (CLEF_FP32_GEMM).
std::atomic<int> g_own_fp32{-1};

/// Whether fp32 products take clef's own AVX2 FMA GEMM (ops/gemm.h own_fp32_gemm_active).
bool own_fp32_gemm() {
#if defined(__aarch64__)
  return false;
#else
  int on = g_own_fp32.load(std::memory_order_relaxed);
  if (on < 0) {
    static const bool from_env = gemm_choice_from_env("CLEF_FP32_GEMM", true);
    on = from_env ? 1 : 0;
  }
  return on == 1 && cpu::fma_gemm_available();
#endif
}

std::atomic<bool> g_fp32_resident{false};
/// set_bf16_pack_after_calls' setting: -1 = not set, the environment decides (CLEF_BF16_PACK).
std::atomic<int> g_bf16_pack_after{-1};
constexpr int kBf16PackAfterCallsMax = 1000000;

/// Grows a thread-local scratch buffer to `n` elements and returns it.
template <typename T>
T* scratch(std::vector<T>& buf, std::size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

void widen_to_f32(DType dtype, const void* src, std::int64_t rows, std::int64_t cols, float* dst) {
  const auto* bytes = static_cast<const std::byte*>(src);
  const std::size_t es = dtype_size(dtype);
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::size_t off = static_cast<std::size_t>(r * cols);
    widen_to_f32_n(dtype, bytes + off * es, cols, dst + off);
  }
}

/// Splits [0, total) into blocks over the engine's threads.
template <typename Fn>
void parallel_blocks(std::int64_t total, Fn&& fn) {
  constexpr std::int64_t kBlock = 1 << 14;
  const std::int64_t blocks = (total + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t s = b * kBlock;
    fn(s, std::min(kBlock, total - s));
  }
}

}  // namespace

void set_fp32_resident_weights(bool resident) noexcept { g_fp32_resident.store(resident); }
bool fp32_resident_weights() noexcept { return g_fp32_resident.load(); }
void set_bf16_pack_after_calls(int calls) {
  if (calls < 0 || calls > kBf16PackAfterCallsMax) {
    throw InvalidArgument("bf16 packing: the call that packs a weight must be 0 (never) to " +
                          std::to_string(kBf16PackAfterCallsMax) + ", got " + std::to_string(calls));
  }
  g_bf16_pack_after.store(calls);
}
int bf16_pack_after_calls() {
  const int set = g_bf16_pack_after.load(std::memory_order_relaxed);
  if (set >= 0) return set;
  static const int from_env = [] {
    const char* v = std::getenv("CLEF_BF16_PACK");
    const std::string s = v == nullptr ? "" : v;
    if (s.empty()) return kBf16PackAfterCallsDefault;
    // Decimal digits only (from_chars takes no sign or space; leading zeros are fine), at most the maximum.
    std::uint64_t n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc() || end != s.data() + s.size() || n > kBf16PackAfterCallsMax) {
      throw InvalidArgument("CLEF_BF16_PACK: invalid value \"" + s +
                            "\"; expected 0 (never pack bf16 weights) or the call of a weight that packs it, 1 to " +
                            std::to_string(kBf16PackAfterCallsMax) +
                            " (unset or empty: " + std::to_string(kBf16PackAfterCallsDefault) + ")");
    }
    return static_cast<int>(n);
  }();
  return from_env;
}

const char* precision_name(Precision p) noexcept {
  switch (p) {
    case Precision::kBF16: return "bf16";
    case Precision::kInt8: return "int8";
    case Precision::kF32: break;
  }
  return "fp32";
}

std::optional<Precision> precision_from_name(std::string_view s) noexcept {
  if (s == "fp32" || s == "f32" || s == "float32") return Precision::kF32;
  if (s == "bf16" || s == "bfloat16") return Precision::kBF16;
  if (s == "int8" || s == "q8_0") return Precision::kInt8;
  return std::nullopt;
}

GemmWeight::GemmWeight(DType dtype, const void* data, std::int64_t n, std::int64_t k, Precision p)
    : dtype_(dtype), data_(data), n_(n), k_(k), precision_(p) {
  if (n <= 0 || k <= 0 || data == nullptr) {
    throw InvalidArgument("GemmWeight: bad shape [" + std::to_string(n) + ", " + std::to_string(k) + "]");
  }
  if (const auto qt = quant_type_of(dtype)) {
    // A block-quantized weight chooses its own path whatever the precision: no wider copy is made.
    quant_ = std::make_unique<QuantWeight>(QuantWeight::from_blocks(*qt, data, n, k));
    (void)MappedFile::drop_pages(data, static_cast<std::size_t>(dtype_bytes(dtype, static_cast<std::uint64_t>(n * k))));
    return;
  }
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kQ8_0) {
    throw Unsupported(std::string("GemmWeight: weights of dtype ") + std::string(dtype_name(dtype)) +
                      " are not supported (F32, BF16, F16; Q8_0 in int8 precision; Q4_K, Q5_K, Q6_K, Q4_0, "
                      "Q4_1, Q5_0, Q5_1)");
  }
  if (p == Precision::kInt8 || dtype == DType::kQ8_0) {
    // Q8_0 blocks run on the int8 kernels at every precision, as the other block types run on theirs.
    int8_ = std::make_unique<Int8Weight>(dtype == DType::kQ8_0 ? Int8Weight::from_q8_0(data, n, k)
                                                               : Int8Weight::quantize(dtype, data, n, k));
    (void)MappedFile::drop_pages(data, static_cast<std::size_t>(dtype_bytes(dtype, static_cast<std::uint64_t>(n * k))));
    return;
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(data);
  if (p == Precision::kBF16) {
    if (dtype == DType::kBF16 && addr % alignof(std::uint16_t) == 0) {
      operand_ = data;
    } else {
      const std::size_t count = static_cast<std::size_t>(n * k);
      owned_.resize(count);
      std::vector<float> row(static_cast<std::size_t>(k));
      const auto* bytes = static_cast<const std::byte*>(data);
      const std::size_t es = dtype_size(dtype);
      for (std::int64_t r = 0; r < n; ++r) {
        const std::size_t off = static_cast<std::size_t>(r * k);
        convert_to_f32(dtype, bytes + off * es, row.size(), row.data());
        for (std::size_t c = 0; c < row.size(); ++c) owned_[off + c] = f32_to_bf16(row[c]);
      }
      operand_ = owned_.data();
    }
    // Packed by a later library call (use_packed_bf16), where the operand is the checkpoint's own bytes (whose pages
    // are dropped then): an owned bf16 copy (an F16 / F32 checkpoint) would stay beside its packed one.
    if (const int at = bf16_pack_after_calls(); operand_ == data_ && at > 0) packed_ = std::make_unique<PackedCopy>(at);
  } else if (dtype == DType::kF32 && addr % alignof(float) == 0) {
    operand_ = data;
  } else if (fp32_resident_weights()) {
    fp32_copy_ = std::make_unique<Fp32Copy>();  // made by the first linear() (resident_f32)
  }
}

std::size_t GemmWeight::owned_bytes() const noexcept {
  std::size_t bytes = owned_.size() * sizeof(std::uint16_t);
  if (int8_) bytes += int8_->bytes();
  if (quant_) bytes += quant_->bytes();
  if (fp32_copy_ && fp32_copy_->made.load()) bytes += static_cast<std::size_t>(n_ * k_) * sizeof(float);
  if (packed_ && packed_->made.load() && packed_->data) bytes += packed_->data->bytes();
  return bytes;
}

const gemm_backend::PackedBf16* GemmWeight::packed_bf16() const {
  return packed_ && packed_->made.load() ? packed_->data.get() : nullptr;
}

const gemm_backend::PackedBf16* GemmWeight::use_packed_bf16() const {
  if (!packed_) return nullptr;
  PackedCopy& c = *packed_;
  if (!c.made.load() && c.calls.fetch_add(1) + 1 < c.pack_at) return nullptr;  // the library copies W itself
  std::call_once(c.once, [&] {
    c.data = gemm_backend::pack_bf16(n_, k_, static_cast<const std::uint16_t*>(operand_));
    // The kernels read the copy from now on: the checkpoint's pages can go (a fallback faults them back).
    if (c.data && operand_ == data_) (void)MappedFile::drop_pages(data_, static_cast<std::size_t>(n_ * k_) * 2);
    c.made.store(true);
  });
  return c.data.get();
}

const float* GemmWeight::resident_f32() const {
  if (!fp32_copy_) return nullptr;
  Fp32Copy& c = *fp32_copy_;
  std::call_once(c.once, [&] {
    c.data.reset(new float[static_cast<std::size_t>(n_ * k_)]);
    widen_to_f32(dtype_, data_, n_, k_, c.data.get());
    c.made.store(true);
  });
  return c.data.get();
}

/// Rows of W widened per panel when the weight is not stored in the dtype the matmul reads:
/// about 2 MiB of fp32, so the widened panel stays in L2/L3 between its conversion and its GEMM
/// instead of making a round trip through DRAM (a whole widened weight would: 8 extra bytes of
/// traffic per parameter and call). A multiple of 16 rows, at least 16.
std::int64_t widen_panel_rows(std::int64_t n, std::int64_t k) {
  constexpr std::int64_t kPanelBytes = std::int64_t{2} << 20;
  std::int64_t rows = kPanelBytes / (4 * k) / 16 * 16;
  rows = std::max<std::int64_t>(16, rows);
  return std::min(rows, n);
}

namespace {
#if !defined(__aarch64__)
/// The weight as linear_shared hands it to clef's FMA GEMM: the fp32 operand or resident copy, else
/// the bf16 operand in bf16 mode, else the stored weight; with its dtype.
std::pair<DType, const void*> fma_operand(const GemmWeight& w) {
  const bool bf16 = w.precision() == Precision::kBF16;
  const void* f32 = bf16 ? nullptr : w.operand() != nullptr ? w.operand() : w.resident_f32();
  if (f32 != nullptr) return {DType::kF32, f32};
  if (bf16) return {DType::kBF16, w.operand()};
  return {w.stored_dtype(), w.stored_data()};
}
#endif

/// linear() for the weights with nothing to share between outputs: fp32 weights, and bf16 where the
/// library has no bf16 matmul (x rounded to bf16 values through the fp32 matmul), on the library.
/// int8 and block-quantized weights, oneDNN's bf16 matmul and clef's FMA GEMM are linear_shared's own
/// branches.
void linear_unshared(const float* x, std::int64_t m, const GemmWeight& w, float* y, bool accumulate) {
  const std::int64_t n = w.n(), k = w.k();
  thread_local std::vector<float> wide, xr;
  const bool bf16 = w.precision() == Precision::kBF16;
  const float* xptr = x;
  if (bf16) {  // no bf16 matmul here: bf16 values through the fp32 matmul (file comment)
    CLEF_PROF_SCOPE(">linear.x_to_bf16");
    float* buf = scratch(xr, static_cast<std::size_t>(m * k));
    parallel_blocks(m * k, [&](std::int64_t s, std::int64_t len) { round_to_bf16_n(x + s, len, buf + s); });
    xptr = buf;
  }
  const void* fp32_operand = bf16 ? nullptr : w.operand() != nullptr ? w.operand() : w.resident_f32();
  if (fp32_operand != nullptr) {  // fp32 weight in place, or its resident fp32 copy
    gemm_backend::matmul_f32(m, n, k, xptr, static_cast<const float*>(fp32_operand), y, n, accumulate);
    return;
  }
  // Widen W to fp32 panel by panel: the stored weight (fp32 mode) or the bf16 operand (bf16 on a
  // level without a bf16 matmul), then y[:, j0:j0+rows] (+)= x · W[j0:j0+rows]ᵀ.
  const DType src_t = bf16 ? DType::kBF16 : w.stored_dtype();
  const auto* src = static_cast<const std::byte*>(bf16 ? w.operand() : w.stored_data());
  const std::size_t es = dtype_size(src_t);
  const std::int64_t rows = widen_panel_rows(n, k);
  float* buf = scratch(wide, static_cast<std::size_t>(rows * k));
  for (std::int64_t j0 = 0; j0 < n; j0 += rows) {
    const std::int64_t nr = std::min(rows, n - j0);
    {
      CLEF_PROF_SCOPE(">linear.widen_weight");
      widen_to_f32(src_t, src + static_cast<std::size_t>(j0 * k) * es, nr, k, buf);
    }
    gemm_backend::matmul_f32(m, nr, k, xptr, buf, y + j0, n, accumulate);
  }
}

}  // namespace

void linear(const float* x, std::int64_t m, const GemmWeight& w, float* y, bool accumulate) {
  if (!w.valid() || m <= 0) throw InvalidArgument("linear: empty weight or m <= 0");
  const LinearOut out{&w, y, accumulate};
  linear_shared(x, m, std::span<const LinearOut>(&out, 1));
}

void linear_shared(const float* x, std::int64_t m, std::span<const LinearOut> outs) {
  if (outs.empty()) return;
  for (const LinearOut& o : outs) {
    if (o.w == nullptr || !o.w->valid() || o.y == nullptr || m <= 0)
      throw InvalidArgument("linear_shared: empty weight or output, or m <= 0");
  }
  const std::int64_t k = outs[0].w->k();
  for (const LinearOut& o : outs) {
    if (o.w->k() != k) {
      throw InvalidArgument("linear_shared: weights of k = " + std::to_string(k) + " and " + std::to_string(o.w->k()) +
                            " read one x");
    }
  }
  for (std::size_t o = 0; o < outs.size(); ++o) {
    for (std::size_t p = 0; p < o; ++p) {
      if (std::less<>{}(outs[o].y, outs[p].y + m * outs[p].w->n()) &&
          std::less<>{}(outs[p].y, outs[o].y + m * outs[o].w->n()))
        throw InvalidArgument("linear_shared: outputs " + std::to_string(p) + " and " + std::to_string(o) + " overlap");
    }
  }
  thread_local Int8Activations act;
  thread_local std::vector<std::uint16_t> xb;
#if !defined(__aarch64__)
  // The weights on clef's FMA GEMM, by whether x is rounded to bf16 (bf16 mode): one shared call each.
  thread_local std::vector<cpu::FmaGemmOut> fma_outs[2];
  fma_outs[0].clear();
  fma_outs[1].clear();
#endif
  bool quantized = false, converted = false;
  for (const LinearOut& o : outs) {
    const GemmWeight& w = *o.w;
    if (linear_takes_quantized(w)) {  // int8 and block-quantized weights: x quantized once
      if (!quantized) {
        CLEF_PROF_SCOPE(">linear.quantize_x");
        quantize_activations(x, m, k, act);
        quantized = true;
      }
      linear_quantized(act, w, o.y, o.accumulate);
      continue;
    }
    const bool bf16 = w.quant() == nullptr && w.precision() == Precision::kBF16;
    const bool own = bf16 && own_bf16_gemm();
    if (own || (bf16 && gemm_backend::bf16_matmul_possible())) {
      // clef's or the library's bf16 matmul on the bf16 weight in place, x converted once.
      std::uint16_t* buf = scratch(xb, static_cast<std::size_t>(m * k));
      if (!converted) {  // the scope names the conversion only, not the matmul after it
        CLEF_PROF_SCOPE(">linear.x_to_bf16");
        parallel_blocks(m * k, [&](std::int64_t s, std::int64_t len) { f32_to_bf16_n(x + s, len, buf + s); });
        converted = true;
      }
      const auto* wb = static_cast<const std::uint16_t*>(w.operand());
#if !defined(__aarch64__)
      if (own) {
        cpu::dpbf16_gemm(m, w.n(), k, buf, wb, o.y, o.accumulate);
        continue;
      }
#endif
      if (const gemm_backend::PackedBf16* packed = w.use_packed_bf16();
          packed != nullptr && gemm_backend::matmul_bf16_packed(m, *packed, buf, o.y, o.accumulate))
        continue;
      if (gemm_backend::matmul_bf16(m, w.n(), k, buf, wb, o.y, o.accumulate)) continue;
    }
#if !defined(__aarch64__)
    if (own_fp32_gemm()) {  // clef's AVX2 FMA GEMM: rounds x to bf16 and widens bf16 / fp16 weights as it packs them
      const auto [t, src] = fma_operand(w);
      if (cpu::fma_gemm_takes(t)) {
        fma_outs[bf16 ? 1 : 0].push_back({t, src, w.n(), o.y, o.accumulate});
        continue;
      }
    }
#endif
    linear_unshared(x, m, w, o.y, o.accumulate);
  }
#if !defined(__aarch64__)
  for (int b = 0; b < 2; ++b)
    if (!fma_outs[b].empty()) cpu::fma_gemm_shared(m, k, x, b == 1, fma_outs[b]);
#endif
}

bool linear_takes_quantized(const GemmWeight& w) { return w.int8() != nullptr || w.quant() != nullptr; }

void linear_quantized(Int8Activations& act, const GemmWeight& w, float* y, bool accumulate) {
  if (w.int8() != nullptr) {
    int8_linear_quantized(act, *w.int8(), y, accumulate);
  } else if (w.quant() != nullptr) {
    quant_linear_quantized(act, *w.quant(), y, accumulate);
  } else {
    throw InvalidArgument("linear_quantized: the weight does not run on quantized activations");
  }
}

void set_own_bf16_gemm(bool on) noexcept { g_own_bf16.store(on ? 1 : 0, std::memory_order_relaxed); }

bool own_bf16_gemm_active() { return own_bf16_gemm(); }

void set_own_fp32_gemm(bool on) noexcept { g_own_fp32.store(on ? 1 : 0, std::memory_order_relaxed); }

bool own_fp32_gemm_active() { return own_fp32_gemm(); }

bool linear_rows_independent(const GemmWeight& w) {
  if (w.int8() != nullptr || w.quant() != nullptr) return true;
  const bool bf16 = w.precision() == Precision::kBF16;
  if (bf16 && own_bf16_gemm()) return true;
#if defined(__aarch64__)
  return false;
#else
  // linear_unshared's weights (fp32, and bf16 where the library has no bf16 matmul) on clef's FMA GEMM
  return own_fp32_gemm() && (!bf16 || gemm_backend::bf16_matmul_emulated()) &&
         cpu::fma_gemm_takes(fma_operand(w).first);
#endif
}

bool bf16_gemm_emulated() { return gemm_backend::bf16_matmul_emulated(); }

std::string gemm_backend_name() {
  init_isa();  // the level (and oneDNN's cap) must be set before the library's first kernel
  const std::string library = gemm_backend::library_description();
  const bool emulated = bf16_gemm_emulated();
  const std::string bf16 = own_bf16_gemm() ? "; bf16: clef vdpbf16ps GEMM (CLEF_BF16_GEMM=clef)"
                           : emulated      ? "; bf16 via fp32 matmul on bf16 values"
                                           : "";
  const std::string fp32 = own_fp32_gemm() ? "; fp32 products: clef FMA GEMM" : "";
  return library + bf16 + fp32 + "); int8: clef " + int8_kernel_name(active_int8_kernel()) +
         " kernel; Q4_K..Q6_K, Q4_0..Q5_1: clef " + quant_kernel_name(active_quant_kernel()) + " kernel";
}

}  // namespace clef::ops

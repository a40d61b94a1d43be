// GEMM backend: oneDNN matmul (Debian libdnnl 2.6, OpenMP runtime shared with our loops).
//
// The weight W [n, k] row-major is handed to oneDNN as the matrix B = Wᵀ [k, n] with strides
// (1, k) ("ba"), so the mmapped checkpoint bytes are used in place. Primitives are created once
// per (m, n, k, precision, accumulate) and cached here (oneDNN also caches internally).
//
// bf16 where oneDNN has no bf16 matmul (Debian's oneDNN 2.6 below AVX-512, or a level capped by
// CLEF_ISA): the same numerics contract through the fp32 matmul. The activations are rounded to
// bf16 values (kept as fp32) and the bf16 weights widened to fp32 (exact), so every product is the
// exact product of two bf16 values and the sums are fp32, as in oneDNN's bf16 kernel; only the
// summation order differs. The widened weight goes to per-call scratch, as in the fp32 mode.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "ops/convert.h"
#include "ops/gemm.h"
#include "ops/isa.h"
#include "ops/profile.h"

namespace clef::ops {
namespace {

using dt = dnnl::memory::data_type;

struct Backend {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::mutex mu;
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int, bool, std::int64_t>, dnnl::matmul> cache;
};

Backend& backend() {
  static const IsaLevel level = init_isa();  // caps oneDNN's ISA before its first primitive
  (void)level;
  static Backend b;
  return b;
}

std::atomic<bool> g_fp32_resident{false};

/// Set once a bf16 primitive could not be created: from then on bf16 runs the fp32 fallback.
std::atomic<bool> g_bf16_emulated{false};

/// (m, n, k, bf16, accumulate, ldc): ldc is the row stride of y (n, or the full width when a
/// column panel of y is computed).
using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, bool, std::int64_t>;

dnnl::matmul create_primitive(Backend& b, const Key& key) {
  const auto [m, n, k, bf16i, acc, ldc] = key;
  const dt in_t = bf16i != 0 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc src_md({m, k}, in_t, dnnl::memory::dims{k, 1});
  const dnnl::memory::desc wei_md({k, n}, in_t, dnnl::memory::dims{1, k});
  const dnnl::memory::desc dst_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (acc) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::desc desc(src_md, wei_md, dst_md);
  const dnnl::matmul::primitive_desc pd(desc, attr, b.engine);
  dnnl::matmul prim(pd);
  if (b.cache.size() > 4096) b.cache.clear();  // bound the cache; recreation is cheap-ish
  b.cache.emplace(key, prim);
  return prim;
}

/// The cached primitive, or an empty one when oneDNN has no bf16 matmul at this level (then
/// g_bf16_emulated is set and the caller takes the fp32 fallback).
dnnl::matmul get_primitive(std::int64_t m, std::int64_t n, std::int64_t k, bool bf16, bool acc, std::int64_t ldc = 0) {
  Backend& b = backend();
  std::lock_guard<std::mutex> lock(b.mu);
  const Key key = std::make_tuple(m, n, k, bf16 ? 1 : 0, acc, ldc > 0 ? ldc : n);
  auto it = b.cache.find(key);
  if (it != b.cache.end()) return it->second;
  if (!bf16) return create_primitive(b, key);
  try {
    return create_primitive(b, key);
  } catch (const dnnl::error&) {
    g_bf16_emulated.store(true);
    return {};
  }
}

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
  return bytes;
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

void execute(dnnl::matmul& prim, dt in_t, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t ldc,
             const void* x, const void* w, float* y) {
  Backend& b = backend();
  dnnl::memory src({{m, k}, in_t, dnnl::memory::dims{k, 1}}, b.engine, const_cast<void*>(x));
  dnnl::memory wei({{k, n}, in_t, dnnl::memory::dims{1, k}}, b.engine, const_cast<void*>(w));
  dnnl::memory dst({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, b.engine, y);
  prim.execute(b.stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
  b.stream.wait();
}

namespace {
/// linear() for the weights with nothing to share between outputs: block-quantized weights
/// (quant_linear quantizes x its own way per type), fp32 weights, and bf16 where the library has
/// no bf16 matmul (x rounded to bf16 values through the fp32 matmul). int8 weights and oneDNN's
/// bf16 matmul are linear_shared's own branches.
void linear_unshared(const float* x, std::int64_t m, const GemmWeight& w, float* y, bool accumulate) {
  if (w.quant() != nullptr) {
    quant_linear(x, m, *w.quant(), y, accumulate);
    return;
  }
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
    dnnl::matmul prim = get_primitive(m, n, k, false, accumulate);
    execute(prim, dt::f32, m, n, k, n, xptr, fp32_operand, y);
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
    dnnl::matmul p = get_primitive(m, nr, k, false, accumulate, n);
    execute(p, dt::f32, m, nr, k, n, xptr, buf, y + j0);
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
  thread_local Int8Activations act;
  thread_local std::vector<std::uint16_t> xb;
  bool quantized = false, converted = false;
  for (const LinearOut& o : outs) {
    const GemmWeight& w = *o.w;
    if (w.int8() != nullptr) {  // int8_linear, x quantized once
      if (!quantized) {
        CLEF_PROF_SCOPE(">linear.quantize_x");
        quantize_activations(x, m, k, act);
        quantized = true;
      }
      int8_linear_quantized(act, *w.int8(), o.y, o.accumulate);
      continue;
    }
    if (w.quant() == nullptr && w.precision() == Precision::kBF16 && !g_bf16_emulated.load(std::memory_order_relaxed)) {
      dnnl::matmul prim = get_primitive(m, w.n(), k, true, o.accumulate);
      if (prim) {  // oneDNN's bf16 matmul on the bf16 weight in place, x converted once
        std::uint16_t* buf = scratch(xb, static_cast<std::size_t>(m * k));
        if (!converted) {  // the scope names the conversion only, not the matmul after it
          CLEF_PROF_SCOPE(">linear.x_to_bf16");
          parallel_blocks(m * k, [&](std::int64_t s, std::int64_t len) { f32_to_bf16_n(x + s, len, buf + s); });
          converted = true;
        }
        execute(prim, dt::bf16, m, w.n(), k, w.n(), buf, w.operand(), o.y);
        continue;
      }
    }
    linear_unshared(x, m, w, o.y, o.accumulate);
  }
}

bool bf16_gemm_emulated() {
  if (!g_bf16_emulated.load()) {
    try {  // probe once with a tiny shape so the answer is known before the first real call
      (void)get_primitive(1, 16, 16, true, false);
    } catch (const dnnl::error&) {
      g_bf16_emulated.store(true);
    }
  }
  return g_bf16_emulated.load();
}

std::string gemm_backend_name() {
  init_isa();  // the oneDNN cap must be set before the first primitive
  const dnnl_version_t* v = dnnl_version();
  std::string isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: isa = "avx512_core_amx"; break;
    case dnnl::cpu_isa::avx512_core_bf16: isa = "avx512_core_bf16"; break;
    case dnnl::cpu_isa::avx512_core_vnni: isa = "avx512_core_vnni"; break;
    case dnnl::cpu_isa::avx512_core: isa = "avx512_core"; break;
    case dnnl::cpu_isa::avx2_vnni: isa = "avx2_vnni"; break;
    case dnnl::cpu_isa::avx2: isa = "avx2"; break;
    case dnnl::cpu_isa::avx: isa = "avx"; break;
    case dnnl::cpu_isa::sse41: isa = "sse41"; break;
    default: isa = "other"; break;
  }
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (OpenMP, " + isa + ", " + std::to_string(omp_get_max_threads()) + " threads" +
         (bf16_gemm_emulated() ? "; bf16 via fp32 matmul on bf16 values" : "") + "); int8: clef " +
         int8_kernel_name(active_int8_kernel()) + " kernel; Q4_K..Q6_K, Q4_0..Q5_1: clef " +
         quant_kernel_name(active_quant_kernel()) + " kernel";
}

}  // namespace clef::ops

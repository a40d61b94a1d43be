// SPDX-License-Identifier: MIT
// GEMM library on x86-64 (cpu/gemm_backend.h): oneDNN matmul (Debian libdnnl 2.6, OpenMP runtime
// shared with our loops).
//
// The weight W [n, k] row-major is handed to oneDNN as the matrix B = Wᵀ [k, n] with strides
// (1, k) ("ba"), so the mmapped checkpoint bytes are used in place. Its brgemm kernels then copy
// each block of B into their own blocked layout at every call; a bf16 weight packed once into that
// layout (pack_bf16: the layout oneDNN chooses for B given "any", which on these kernels does not
// depend on m) skips the copy, with the same kernels and bits: 1.03-1.08x at m = 512, 1.3-1.4x at
// m = 32 and 3-4x at m = 1 on the 0.8b shapes (Zen 4, docs/PERFORMANCE.md). Primitives are created
// once per (m, n, k, precision, accumulate, ldc, packed) and cached here (oneDNN also caches
// internally).
//
// Concurrency: several engines may run GEMMs at once from different threads (two Models in one
// Python process, one engine per NUMA node). A oneDNN primitive with its default library-managed
// scratchpad owns one work buffer that every execution of it shares, and oneDNN's own cache hands
// the same primitive to identical descriptors, so two concurrent executions of one shape would
// write each other's partial sums. Every primitive here therefore uses a user-managed scratchpad:
// each calling thread passes its own (thread_local) buffer, and each calling thread has its own
// stream. The engine object and the primitive cache (under its mutex) are shared.
#include <omp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ops/cpu/gemm_backend.h"
#include "ops/isa.h"

namespace clef::ops::gemm_backend {
namespace {

using dt = dnnl::memory::data_type;

/// (m, n, k, bf16, accumulate, ldc, packed): ldc is the row stride of y (n, or the full width when a
/// column panel of y is computed); packed: B in the layout of packed_layout(n, k), else "ba".
using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, bool, std::int64_t, bool>;

/// Rows of the matmul whose chosen B layout pack_bf16 takes (any m: the brgemm kernels' layout
/// depends on n, k and the ISA only).
constexpr std::int64_t kPackRows = 512;

/// A created matmul and the scratchpad one execution of it needs (empty when none).
struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;
};

struct Backend {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mu;
  std::map<Key, Primitive> cache;
  std::map<std::pair<std::int64_t, std::int64_t>, dnnl::memory::desc> packed_layouts;  ///< bf16 B per (n, k)
};

/// The packed bf16 weight of pack_bf16: B [k, n] in oneDNN's layout, in memory oneDNN allocated.
class OneDnnPackedBf16 final : public PackedBf16 {
 public:
  OneDnnPackedBf16(std::int64_t n, std::int64_t k, dnnl::memory mem) : n_(n), k_(k), mem_(std::move(mem)) {}
  std::int64_t n() const noexcept override { return n_; }
  std::int64_t k() const noexcept override { return k_; }
  std::size_t bytes() const noexcept override { return mem_.get_desc().get_size(); }
  const dnnl::memory& memory() const noexcept { return mem_; }

 private:
  std::int64_t n_, k_;
  dnnl::memory mem_;
};

Backend& backend() {
  static const IsaLevel level = init_isa();  // caps oneDNN's ISA before its first primitive
  (void)level;
  static Backend b;
  return b;
}

/// Set once a bf16 primitive could not be created: from then on bf16 runs the fp32 fallback.
std::atomic<bool> g_bf16_emulated{false};

/// W [n, k] row-major (in_t) as oneDNN's B = Wᵀ [k, n]: strides (1, k), "ba".
dnnl::memory::desc plain_b(dt in_t, std::int64_t n, std::int64_t k) {
  return dnnl::memory::desc({k, n}, in_t, dnnl::memory::dims{1, k});
}

/// Caches `prim` under `key` (the caller holds b.mu), bounding the cache: recreation is cheap-ish.
const Primitive& remember(Backend& b, const Key& key, Primitive prim) {
  if (b.cache.size() > 4096) b.cache.clear();
  return b.cache.insert_or_assign(key, std::move(prim)).first->second;
}

/// The layout oneDNN's bf16 matmul chooses for B [k, n] ("any"), cached per (n, k); the caller holds
/// b.mu. Throws dnnl::error when there is no bf16 matmul at this level.
dnnl::memory::desc packed_layout(Backend& b, std::int64_t n, std::int64_t k) {
  const auto key = std::make_pair(n, k);
  auto it = b.packed_layouts.find(key);
  if (it != b.packed_layouts.end()) return it->second;
  const dnnl::memory::desc src_md({kPackRows, k}, dt::bf16, dnnl::memory::dims{k, 1});
  const dnnl::memory::desc wei_md({k, n}, dt::bf16, dnnl::memory::format_tag::any);
  const dnnl::memory::desc dst_md({kPackRows, n}, dt::f32, dnnl::memory::dims{n, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), b.engine);
  return b.packed_layouts.emplace(key, pd.weights_desc()).first->second;
}

Primitive create_primitive(Backend& b, const Key& key) {
  const auto [m, n, k, bf16i, acc, ldc, packed] = key;
  const dt in_t = bf16i != 0 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc src_md({m, k}, in_t, dnnl::memory::dims{k, 1});
  const dnnl::memory::desc wei_md = packed ? packed_layout(b, n, k) : plain_b(in_t, n, k);
  const dnnl::memory::desc dst_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // per-call buffers: see the file comment
  if (acc) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const dnnl::matmul::desc desc(src_md, wei_md, dst_md);
  const dnnl::matmul::primitive_desc pd(desc, attr, b.engine);
  if (packed) {
    // The packed layout must reach the kernel the plain one does (which then reads the same blocks
    // it would have copied); another implementation (oneDNN's reference matmul takes any layout)
    // would sum in another order: then this shape keeps the plain layout (an empty primitive,
    // cached, so the check runs once per shape).
    const dnnl::matmul::primitive_desc plain(dnnl::matmul::desc(src_md, plain_b(in_t, n, k), dst_md), attr, b.engine);
    if (std::string(pd.impl_info_str()) != plain.impl_info_str()) return remember(b, key, Primitive{});
  }
  return remember(b, key, Primitive{dnnl::matmul(pd), pd.scratchpad_desc()});
}

/// The cached primitive, or an empty one when oneDNN has no bf16 matmul at this level (then
/// g_bf16_emulated is set and the caller takes the fp32 fallback) or, for `packed`, none on the
/// packed layout (nothing is set: the caller takes the plain layout).
Primitive get_primitive(std::int64_t m, std::int64_t n, std::int64_t k, bool bf16, bool acc, std::int64_t ldc = 0,
                        bool packed = false) {
  Backend& b = backend();
  std::lock_guard<std::mutex> lock(b.mu);
  const Key key = std::make_tuple(m, n, k, bf16 ? 1 : 0, acc, ldc > 0 ? ldc : n, packed);
  auto it = b.cache.find(key);
  if (it != b.cache.end()) return it->second;
  if (!bf16) return create_primitive(b, key);
  try {
    return create_primitive(b, key);
  } catch (const dnnl::error&) {
    if (!packed) {
      g_bf16_emulated.store(true);
      return {};
    }
    return remember(b, key, Primitive{});  // this shape keeps the plain layout
  }
}

/// This thread's stream on the engine (each calling thread has its own: file comment).
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(backend().engine);
  return stream;
}

/// Runs `prim` on x [m, k] (in_t), the weight `wei` (B as the primitive was created for it) and
/// y [m, n] fp32 with row stride ldc, on this thread's stream and scratchpad.
void execute(const Primitive& prim, dt in_t, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t ldc,
             const void* x, const dnnl::memory& wei, float* y) {
  Backend& b = backend();
  dnnl::stream& stream = thread_stream();
  thread_local std::vector<std::byte> scratch;  // this thread's scratchpad, grown to the largest need
  constexpr std::size_t kAlign = 64;            // a cache line, as oneDNN's own allocations
  if (scratch.size() < prim.scratchpad.get_size() + kAlign) scratch.resize(prim.scratchpad.get_size() + kAlign);
  const auto at = reinterpret_cast<std::uintptr_t>(scratch.data());
  void* const pad_at = scratch.data() + ((kAlign - at % kAlign) % kAlign);
  dnnl::memory src({{m, k}, in_t, dnnl::memory::dims{k, 1}}, b.engine, const_cast<void*>(x));
  dnnl::memory dst({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, b.engine, y);
  dnnl::memory pad(prim.scratchpad, b.engine, pad_at);
  prim.matmul.execute(stream,
                      {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad}});
  stream.wait();
}

/// W [n, k] row-major (in_t) as oneDNN's B, in place.
dnnl::memory plain_weight(dt in_t, std::int64_t n, std::int64_t k, const void* w) {
  return dnnl::memory(plain_b(in_t, n, k), backend().engine, const_cast<void*>(w));
}

}  // namespace

void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* w, float* y,
                std::int64_t ldc, bool accumulate) {
  const Primitive prim = get_primitive(m, n, k, false, accumulate, ldc);
  execute(prim, dt::f32, m, n, k, ldc, x, plain_weight(dt::f32, n, k, w), y);
}

bool bf16_matmul_possible() noexcept { return !g_bf16_emulated.load(std::memory_order_relaxed); }

bool matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate) {
  const Primitive prim = get_primitive(m, n, k, true, accumulate);
  if (!prim.matmul) return false;
  execute(prim, dt::bf16, m, n, k, n, x, plain_weight(dt::bf16, n, k, w), y);
  return true;
}

std::unique_ptr<PackedBf16> pack_bf16(std::int64_t n, std::int64_t k, const std::uint16_t* w) {
  if (g_bf16_emulated.load()) return nullptr;
  Backend& b = backend();
  dnnl::memory::desc layout;
  try {
    std::lock_guard<std::mutex> lock(b.mu);
    layout = packed_layout(b, n, k);
  } catch (const dnnl::error&) {
    return nullptr;  // no bf16 matmul at this level: matmul_bf16 says so on its first call
  }
  // Only a blocked layout (the brgemm kernels', which read the same blocks from their per-call copy
  // of a plain W) is taken. A plain one (the gemm:jit kernels below avx512_core_bf16 ask for B
  // untransposed, "ab") would only move W and send small m through another kernel path, with other
  // sums (m = 1 at CLEF_ISA=avx512 differed).
  if (layout.data.format_kind != dnnl_blocked || layout.data.format_desc.blocking.inner_nblks == 0) return nullptr;
  try {
    dnnl::memory plain = plain_weight(dt::bf16, n, k, w);
    dnnl::memory packed(layout, b.engine);  // oneDNN allocates it (padded to its blocks)
    dnnl::stream& stream = thread_stream();
    dnnl::reorder(plain, packed).execute(stream, plain, packed);
    stream.wait();
    return std::make_unique<OneDnnPackedBf16>(n, k, std::move(packed));
  } catch (const dnnl::error&) {
    return nullptr;  // no memory for the copy, or no reorder: the plain W serves
  }
}

bool matmul_bf16_packed(std::int64_t m, const PackedBf16& w, const std::uint16_t* x, float* y, bool accumulate) {
  const auto& pw = static_cast<const OneDnnPackedBf16&>(w);
  const Primitive prim = get_primitive(m, pw.n(), pw.k(), true, accumulate, 0, /*packed=*/true);
  if (!prim.matmul) return false;
  // The weight's own memory object, shared by every call: a new one on the same buffer would zero
  // its padding again, a write while another thread's kernel reads it.
  execute(prim, dt::bf16, m, pw.n(), pw.k(), pw.n(), x, pw.memory(), y);
  return true;
}

bool bf16_matmul_emulated() {
  if (!g_bf16_emulated.load()) {
    try {  // probe once with a tiny shape so the answer is known before the first real call
      (void)get_primitive(1, 16, 16, true, false);
    } catch (const dnnl::error&) {
      g_bf16_emulated.store(true);
    }
  }
  return g_bf16_emulated.load();
}

std::string library_description() {
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
         " (OpenMP, " + isa + ", " + std::to_string(omp_get_max_threads()) + " threads";
}

}  // namespace clef::ops::gemm_backend

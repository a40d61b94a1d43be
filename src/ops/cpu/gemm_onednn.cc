// SPDX-License-Identifier: MIT
// GEMM library on x86-64 (cpu/gemm_backend.h): oneDNN matmul (Debian libdnnl 2.6, OpenMP runtime
// shared with our loops).
//
// The weight W [n, k] row-major is handed to oneDNN as the matrix B = Wᵀ [k, n] with strides
// (1, k) ("ba"), so the mmapped checkpoint bytes are used in place. Primitives are created once
// per (m, n, k, precision, accumulate, ldc) and cached here (oneDNN also caches internally).
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
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "ops/cpu/gemm_backend.h"
#include "ops/isa.h"

namespace clef::ops::gemm_backend {
namespace {

using dt = dnnl::memory::data_type;

/// (m, n, k, bf16, accumulate, ldc): ldc is the row stride of y (n, or the full width when a
/// column panel of y is computed).
using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, int, bool, std::int64_t>;

/// A created matmul and the scratchpad one execution of it needs (empty when none).
struct Primitive {
  dnnl::matmul matmul;
  dnnl::memory::desc scratchpad;
};

struct Backend {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  std::mutex mu;
  std::map<Key, Primitive> cache;
};

Backend& backend() {
  static const IsaLevel level = init_isa();  // caps oneDNN's ISA before its first primitive
  (void)level;
  static Backend b;
  return b;
}

/// Set once a bf16 primitive could not be created: from then on bf16 runs the fp32 fallback.
std::atomic<bool> g_bf16_emulated{false};

Primitive create_primitive(Backend& b, const Key& key) {
  const auto [m, n, k, bf16i, acc, ldc] = key;
  const dt in_t = bf16i != 0 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc src_md({m, k}, in_t, dnnl::memory::dims{k, 1});
  const dnnl::memory::desc wei_md({k, n}, in_t, dnnl::memory::dims{1, k});
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
  Primitive prim{dnnl::matmul(pd), pd.scratchpad_desc()};
  if (b.cache.size() > 4096) b.cache.clear();  // bound the cache; recreation is cheap-ish
  b.cache.emplace(key, prim);
  return prim;
}

/// The cached primitive, or an empty one when oneDNN has no bf16 matmul at this level (then
/// g_bf16_emulated is set and the caller takes the fp32 fallback).
Primitive get_primitive(std::int64_t m, std::int64_t n, std::int64_t k, bool bf16, bool acc, std::int64_t ldc = 0) {
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

void execute(const Primitive& prim, dt in_t, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t ldc,
             const void* x, const void* w, float* y) {
  Backend& b = backend();
  thread_local dnnl::stream stream(b.engine);
  thread_local std::vector<std::byte> scratch;  // this thread's scratchpad, grown to the largest need
  constexpr std::size_t kAlign = 64;            // a cache line, as oneDNN's own allocations
  if (scratch.size() < prim.scratchpad.get_size() + kAlign) scratch.resize(prim.scratchpad.get_size() + kAlign);
  const auto at = reinterpret_cast<std::uintptr_t>(scratch.data());
  void* const pad_at = scratch.data() + ((kAlign - at % kAlign) % kAlign);
  dnnl::memory src({{m, k}, in_t, dnnl::memory::dims{k, 1}}, b.engine, const_cast<void*>(x));
  dnnl::memory wei({{k, n}, in_t, dnnl::memory::dims{1, k}}, b.engine, const_cast<void*>(w));
  dnnl::memory dst({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, b.engine, y);
  dnnl::memory pad(prim.scratchpad, b.engine, pad_at);
  prim.matmul.execute(stream,
                      {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, pad}});
  stream.wait();
}

}  // namespace

void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const float* w, float* y,
                std::int64_t ldc, bool accumulate) {
  const Primitive prim = get_primitive(m, n, k, false, accumulate, ldc);
  execute(prim, dt::f32, m, n, k, ldc, x, w, y);
}

bool bf16_matmul_possible() noexcept { return !g_bf16_emulated.load(std::memory_order_relaxed); }

bool matmul_bf16(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* x, const std::uint16_t* w,
                 float* y, bool accumulate) {
  const Primitive prim = get_primitive(m, n, k, true, accumulate);
  if (!prim.matmul) return false;
  execute(prim, dt::bf16, m, n, k, n, x, w, y);
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

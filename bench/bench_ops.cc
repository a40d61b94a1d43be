// SPDX-License-Identifier: MIT
// Op micro-benchmarks (kernel speed vs the machine's peak): the measured peak of the kernel level
// in use (fp32 FMA and bf16 vdpbf16ps kernels, ops/peak.h; CLEF_ISA forces a level), the GEMM
// libraries on the 0.8b / flash linear-layer shapes (oneDNN fp32, oneDNN bf16, OpenBLAS sgemm; all
// in the same run so the ratios are comparable on a noisy machine), and the chunked gated delta
// rule and blocked attention kernels; then the block-quantized GGUF kernels (ops/quant_gemm.h:
// Q4_K, Q5_K, Q6_K, Q4_0) against the int8 Q8_0 path at M = --qm rows and at M = 1 (decode).
// On ARM64 the peaks add each ARM instruction class's (fp32 FMLA, SDOT, SMMLA, BFMMLA; 0 where the
// CPU lacks it). Prints tables; not a timed test. A bad CLEF_ISA or a shape too large for memory is
// an error message and a non-zero exit (2 invalid argument, 4 unsupported level, 5 out of memory).
//
//   clef_bench_ops [--threads N] [--m 1024] [--qm 512] [--reps 5] [--peak-iters 20000000] [--quick]
//                  [--peak-only | --quant-only | --attn-only | --gdn-only | --bf16-gemm-only]
#include <cblas.h>
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/convert.h"
#include "ops/gemm.h"
#if !defined(__aarch64__)
#include "ops/cpu/bf16_gemm_x86.h"
#include "ops/cpu/fma_gemm_x86.h"
#endif
#include "ops/int8_gemm.h"
#include "ops/isa.h"
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/peak.h"
#include "ops/quant_gemm.h"

extern "C" void openblas_set_num_threads(int);

namespace {

using clock_type = std::chrono::steady_clock;

double best_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up (JIT, page faults)
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return best;
}

std::vector<float> randv(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

struct Shape {
  const char* name;
  std::int64_t n, k;
};

/// n rows of random ggml blocks of type t (random quant bytes, fp16 scales in [1e-4, 1e-2)).
std::vector<std::uint8_t> random_quant_blocks(clef::ops::QuantType t, std::int64_t n, std::int64_t k) {
  const std::int64_t be = clef::ops::quant_block_elems(t), bb = clef::ops::quant_block_bytes(t);
  std::mt19937 g(3);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n * k / be * bb));
  for (auto& b : out) b = static_cast<std::uint8_t>(g() & 0xFF);
  std::uniform_real_distribution<float> mag(1e-4f, 1e-2f);
  for (std::int64_t i = 0; i < n * k / be; ++i) {
    std::uint8_t* blk = out.data() + i * bb;
    const std::uint16_t h1 = clef::f32_to_f16(mag(g)), h2 = clef::f32_to_f16(mag(g));
    const std::size_t at = t == clef::ops::QuantType::kQ6_K ? 208 : 0;
    std::memcpy(blk + at, &h1, 2);
    if (t == clef::ops::QuantType::kQ4_K || t == clef::ops::QuantType::kQ5_K) std::memcpy(blk + 2, &h2, 2);
  }
  return out;
}

/// GOP/s (2·m·n·k per call) of int8 (Q8_0) and the block-quantized types on the given shapes.
#if !defined(__aarch64__)
/// bf16 linear layers: the GEMM library's bf16 matmul (ops::linear, x converted to bf16 inside) against
/// clef's own vdpbf16ps GEMM (cpu/bf16_gemm_x86.h: rows independent of each other, what batching
/// needs) on the same converted x, at several row counts; GFLOP/s and % of the measured bf16 peak.
void bench_bf16_gemm(const std::vector<Shape>& shapes, const std::vector<std::int64_t>& ms, int reps, double pb) {
  if (!clef::ops::cpu::dpbf16_gemm_available()) {
    std::printf("bf16 GEMM: clef's vdpbf16ps GEMM needs the avx512bf16 level (this run: %s)\n\n",
                clef::ops::isa_name(clef::ops::active_isa()));
    return;
  }
  std::printf("bf16 GEMM, library vs clef vdpbf16ps (GFLOP/s, %% of the measured bf16 peak %.1f), best of %d\n", pb,
              reps);
  std::printf("%-22s %6s %6s %6s | %15s %15s | %s\n", "shape", "m", "n", "k", "library", "clef vdpbf16ps",
              "clef / library");
  double tot_flop = 0, tot_lib = 0, tot_own = 0;
  for (const Shape& s : shapes) {
    const std::vector<float> wf = randv(static_cast<std::size_t>(s.n * s.k), 2);
    std::vector<std::uint16_t> wb(wf.size());
    for (std::size_t i = 0; i < wf.size(); ++i) wb[i] = clef::f32_to_bf16(wf[i]);
    const clef::ops::GemmWeight g16(clef::DType::kBF16, wb.data(), s.n, s.k, clef::ops::Precision::kBF16);
    for (const std::int64_t m : ms) {
      const std::vector<float> x = randv(static_cast<std::size_t>(m * s.k), 1);
      std::vector<std::uint16_t> xb(x.size());
      std::vector<float> y(static_cast<std::size_t>(m * s.n));
      const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(s.n) * static_cast<double>(s.k);
      const double tl = best_seconds(reps, [&] { clef::ops::linear(x.data(), m, g16, y.data()); });
      const double to = best_seconds(reps, [&] {
        clef::ops::f32_to_bf16_n(x.data(), m * s.k, xb.data());
        clef::ops::cpu::dpbf16_gemm(m, s.n, s.k, xb.data(), wb.data(), y.data(), false);
      });
      tot_flop += flop;
      tot_lib += tl;
      tot_own += to;
      std::printf("%-22s %6lld %6lld %6lld | %7.1f (%3.0f%%) %7.1f (%3.0f%%) | %.2fx\n", s.name,
                  static_cast<long long>(m), static_cast<long long>(s.n), static_cast<long long>(s.k), flop / tl / 1e9,
                  100.0 * flop / tl / 1e9 / pb, flop / to / 1e9, 100.0 * flop / to / 1e9 / pb, tl / to);
    }
  }
  std::printf("%-22s %20s | %15.1f %15.1f | %.2fx\n\n", "all (time-weighted)", "", tot_flop / tot_lib / 1e9,
              tot_flop / tot_own / 1e9, tot_lib / tot_own);
}
/// fp32 products at the avx2 level: the GEMM library's fp32 matmul against clef's AVX2 FMA GEMM
/// (cpu/fma_gemm_x86.h), both through ops::linear (so bf16 weights are widened and x rounded to bf16
/// values by the same code), for bf16 and fp32 weights at several row counts; GFLOP/s and % of the
/// measured fp32 peak.
void bench_fma_gemm(const std::vector<Shape>& shapes, const std::vector<std::int64_t>& ms, int reps, double pf) {
  if (!clef::ops::cpu::fma_gemm_available()) {
    std::printf("fp32 GEMM: clef's FMA GEMM is the avx2 level's (this run: %s)\n\n",
                clef::ops::isa_name(clef::ops::active_isa()));
    return;
  }
  std::printf("fp32 products, library vs clef FMA (GFLOP/s, %% of the measured fp32 peak %.1f), best of %d\n", pf,
              reps);
  std::printf("%-22s %4s %6s %6s %6s | %15s %15s | %s\n", "shape", "W", "m", "n", "k", "library", "clef FMA",
              "clef / library");
  for (const clef::ops::Precision p : {clef::ops::Precision::kBF16, clef::ops::Precision::kF32}) {
    double tot_flop = 0, tot_lib = 0, tot_own = 0;
    for (const Shape& s : shapes) {
      const std::vector<float> wf = randv(static_cast<std::size_t>(s.n * s.k), 2);
      std::vector<std::uint16_t> wb(wf.size());
      for (std::size_t i = 0; i < wf.size(); ++i) wb[i] = clef::f32_to_bf16(wf[i]);
      const clef::ops::GemmWeight g = p == clef::ops::Precision::kBF16
                                          ? clef::ops::GemmWeight(clef::DType::kBF16, wb.data(), s.n, s.k, p)
                                          : clef::ops::GemmWeight(clef::DType::kF32, wf.data(), s.n, s.k, p);
      for (const std::int64_t m : ms) {
        const std::vector<float> x = randv(static_cast<std::size_t>(m * s.k), 1);
        std::vector<float> y(static_cast<std::size_t>(m * s.n));
        const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(s.n) * static_cast<double>(s.k);
        clef::ops::set_own_fp32_gemm(false);
        const double tl = best_seconds(reps, [&] { clef::ops::linear(x.data(), m, g, y.data()); });
        clef::ops::set_own_fp32_gemm(true);
        const double to = best_seconds(reps, [&] { clef::ops::linear(x.data(), m, g, y.data()); });
        tot_flop += flop;
        tot_lib += tl;
        tot_own += to;
        std::printf("%-22s %4s %6lld %6lld %6lld | %7.1f (%3.0f%%) %7.1f (%3.0f%%) | %.2fx\n", s.name,
                    p == clef::ops::Precision::kBF16 ? "bf16" : "fp32", static_cast<long long>(m),
                    static_cast<long long>(s.n), static_cast<long long>(s.k), flop / tl / 1e9,
                    100.0 * flop / tl / 1e9 / pf, flop / to / 1e9, 100.0 * flop / to / 1e9 / pf, tl / to);
      }
    }
    std::printf("%-22s %4s %20s | %15.1f %15.1f | %.2fx\n", "all (time-weighted)",
                p == clef::ops::Precision::kBF16 ? "bf16" : "fp32", "", tot_flop / tot_lib / 1e9,
                tot_flop / tot_own / 1e9, tot_lib / tot_own);
  }
  std::printf("\n");
}
#endif

void bench_quant(const std::vector<Shape>& shapes, std::int64_t m, int reps) {
  using clef::ops::QuantType;
  const QuantType types[] = {QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kQ4_0};
  std::printf("block-quantized GEMM, m = %lld rows, best of %d (GOP/s; kernels: int8 %s, quant %s)\n",
              static_cast<long long>(m), reps, clef::ops::int8_kernel_name(clef::ops::active_int8_kernel()),
              clef::ops::quant_kernel_name(clef::ops::active_quant_kernel()));
  std::printf("%-22s %6s %6s | %9s %9s %9s %9s %9s\n", "shape", "n", "k", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "Q4_0");
  for (const Shape& s : shapes) {
    const std::vector<float> x = randv(static_cast<std::size_t>(m * s.k), 1);
    const std::vector<float> wf = randv(static_cast<std::size_t>(s.n * s.k), 2);
    std::vector<float> y(static_cast<std::size_t>(m * s.n));
    const double op = 2.0 * static_cast<double>(m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const clef::ops::GemmWeight g8(clef::DType::kF32, wf.data(), s.n, s.k, clef::ops::Precision::kInt8);
    std::printf("%-22s %6lld %6lld | %9.1f", s.name, static_cast<long long>(s.n), static_cast<long long>(s.k),
                op / best_seconds(reps, [&] { clef::ops::linear(x.data(), m, g8, y.data()); }) / 1e9);
    for (const QuantType t : types) {
      const auto blocks = random_quant_blocks(t, s.n, s.k);
      const auto w = clef::ops::QuantWeight::from_blocks(t, blocks.data(), s.n, s.k);
      std::printf(" %9.1f",
                  op / best_seconds(reps, [&] { clef::ops::quant_linear(x.data(), m, w, y.data(), false); }) / 1e9);
    }
    std::printf("\n");
  }
  std::printf("\n");
}

/// Blocked causal attention, 0.8b dims (8 query heads, 2 kv heads, head dim 256), one layer: a
/// chunk of t queries at the end of a cache of tk keys (t = tk: a whole prefill in one chunk;
/// t < tk: the last prefill chunk of a long input), fp32 and bf16 kernels, against the level's
/// fp32 and bf16 peaks. FLOP = 4 nh hd (keys visible to each query, summed): docs/MODEL.md §9.
void bench_attention(bool quick, int reps, double pf, double pb) {
  const clef::ops::AttentionDims d{8, 2, 256};
  struct Case {
    std::int64_t t, tk;
  };
  const std::vector<Case> cases =
      quick ? std::vector<Case>{{256, 256}, {128, 1024}}
            : std::vector<Case>{{1024, 1024}, {512, 4096}, {512, 16384}, {256, 16384}, {131, 16384}, {72, 16384}};
  std::printf(
      "attention, 0.8b layer (nh 8, nkv 2, hd 256), causal, best of %d (GFLOP/s; %% of the level's peak; "
      "bf16 over a stored bf16 KV cache; 256, 131 and 72 queries over 16k keys: warm requests)\n",
      reps);
  std::printf("%-8s %-8s | %18s %18s\n", "queries", "keys", "fp32", "bf16");
  for (const Case& c : cases) {
    const std::vector<float> q = randv(static_cast<std::size_t>(c.t * d.nh * d.hd), 6);
    const std::vector<float> kc = randv(static_cast<std::size_t>(c.tk * d.nkv * d.hd), 7), vc = randv(kc.size(), 8);
    std::vector<float> o(q.size());
    const double visible = static_cast<double>(c.t) * static_cast<double>(c.tk - c.t) +
                           static_cast<double>(c.t) * static_cast<double>(c.t + 1) / 2.0;
    const double flop = 4.0 * static_cast<double>(d.nh * d.hd) * visible;
    const double s32 =
        best_seconds(reps, [&] { clef::ops::attention(d, c.t, c.tk, q.data(), kc.data(), vc.data(), o.data()); });
    // bf16: over the cache as the engine keeps it (rows stored as bf16 words once, ops::kv_bf16_store).
    const std::int64_t w = d.nkv * d.hd;
    std::vector<std::uint32_t> kw(static_cast<std::size_t>(c.tk * w / 2)),
        vw(static_cast<std::size_t>((c.tk + 1) / 2 * w));
    clef::ops::kv_bf16_store(kc.data(), vc.data(), 0, c.tk, w, kw.data(), vw.data());
    const double s16 = best_seconds(reps, [&] {
      clef::ops::attention_bf16_kv(d, c.t, c.tk, q.data(), kw.data(), vw.data(), o.data());
    });
    const double g32 = flop / s32 / 1e9, g16 = flop / s16 / 1e9;
    std::printf("%-8lld %-8lld | %8.1f (%4.0f%%)   %8.1f (%4.0f%%)\n", static_cast<long long>(c.t),
                static_cast<long long>(c.tk), g32, pf > 0 ? 100.0 * g32 / pf : 0.0, g16,
                pb > 0 ? 100.0 * g16 / pb : 0.0);
  }
  std::printf("\n");
}

}  // namespace

/// The chunked gated delta rule of one 0.8b layer over t tokens, fp32 and bf16 (ops::gated_delta_rule,
/// ops::gated_delta_rule_bf16), against the level's fp32 / bf16 peaks (GFLOP/s).
void bench_delta_rule(std::int64_t t, int reps, double pf, double pb) {
  const clef::ops::GdnDims d{16, 16, 128, 128};
  const std::int64_t st = d.hk * d.dk;
  std::vector<float> q = randv(static_cast<std::size_t>(t * st), 3), k = randv(q.size(), 4);
  clef::ops::l2norm_rows(q.data(), t * d.hk, d.dk, d.dk, 1e-6f, 1.0f / std::sqrt(128.0f));
  clef::ops::l2norm_rows(k.data(), t * d.hk, d.dk, d.dk, 1e-6f, 1.0f);
  const std::vector<float> v = randv(static_cast<std::size_t>(t * d.hv * d.dv), 5);
  std::vector<float> g(static_cast<std::size_t>(t * d.hv), -0.1f), beta(g.size(), 0.5f);
  std::vector<float> s(static_cast<std::size_t>(d.hv * d.dk * d.dv)), o(v.size());
  const double flop = 47.2e6 / 18.0 * static_cast<double>(t);  // docs/MODEL.md §9, per layer
  for (const bool bf16 : {false, true}) {
    const double sec = best_seconds(reps, [&] {
      std::fill(s.begin(), s.end(), 0.0f);
      (bf16 ? clef::ops::gated_delta_rule_bf16 : clef::ops::gated_delta_rule)(d, t, q.data(), k.data(), st, v.data(),
                                                                              d.hv * d.dv, g.data(), beta.data(),
                                                                              s.data(), o.data());
    });
    const double peak = bf16 ? pb : pf;
    std::printf(
        "gated_delta_rule %s (0.8b layer, T=%lld): %.2f ms, %.0f tokens/s/layer, ~%.1f GFLOP/s (%.0f%% of the "
        "%s peak)\n",
        bf16 ? "bf16" : "fp32", static_cast<long long>(t), sec * 1e3, static_cast<double>(t) / sec, flop / sec / 1e9,
        peak > 0 ? 100.0 * flop / sec / 1e9 / peak : 0.0, bf16 ? "bf16" : "fp32");
  }
}

/// The GDN layer's middle as nn::GatedDeltaNet runs it on one 512-row chunk of the 0.8b layer: the
/// input stage then the bf16 delta rule, one kGdnChunk slab at a time, the in_proj output (x)
/// rewritten before every repetition as the GEMM before it leaves it (in cache as far as it fits).
void bench_gdn_slabs(int reps) {
  const std::int64_t t = 512, hk = 16, dk = 128, hv = 16, dv = 128, c = 2 * hk * dk + hv * dv, K = 4;
  const clef::ops::GdnDims d{hk, hv, dk, dv};
  const std::vector<float> src = randv(static_cast<std::size_t>(t * c), 9),
                           w = randv(static_cast<std::size_t>(c * K), 10);
  const std::vector<float> b = randv(static_cast<std::size_t>(t * hv), 11), a = randv(b.size(), 12);
  const std::vector<float> na(static_cast<std::size_t>(hv), -0.5f), db(static_cast<std::size_t>(hv), 0.1f);
  std::vector<float> x(src.size()), u(src.size()), taps(w.size()), beta(b.size()), g(b.size());
  std::vector<float> state(static_cast<std::size_t>((K - 1) * c)), rec(static_cast<std::size_t>(hv * dk * dv)),
      o(static_cast<std::size_t>(t * hv * dv));
  clef::ops::transpose_conv_taps(w.data(), c, K, taps.data());
  const clef::ops::GdnInputStage gs{.channels = c,
                                    .conv_k = K,
                                    .conv_w = w.data(),
                                    .conv_taps = taps.data(),
                                    .hk = hk,
                                    .dk = dk,
                                    .qscale = 1.0f / std::sqrt(static_cast<float>(dk)),
                                    .hv = hv,
                                    .neg_a = na.data(),
                                    .dt_bias = db.data()};
  double stage = 1e300, rule = 1e300, both = 1e300;
  for (int r = 0; r <= reps; ++r) {
    std::copy(src.begin(), src.end(), x.begin());
    std::fill(rec.begin(), rec.end(), 0.0f);
    std::fill(state.begin(), state.end(), 0.0f);
    double ts = 0, tr = 0;
    for (std::int64_t r0 = 0; r0 < t; r0 += clef::ops::kGdnChunk) {
      const std::int64_t len = std::min(clef::ops::kGdnChunk, t - r0);
      float* ur = u.data() + r0 * c;
      const auto t0 = clock_type::now();
      clef::ops::gdn_input_stage(gs, len, x.data() + r0 * c, state.data(), ur, b.data() + r0 * hv, a.data() + r0 * hv,
                                 beta.data() + r0 * hv, g.data() + r0 * hv);
      const auto t1 = clock_type::now();
      clef::ops::gated_delta_rule_bf16(d, len, ur, ur + hk * dk, c, ur + 2 * hk * dk, c, g.data() + r0 * hv,
                                       beta.data() + r0 * hv, rec.data(), o.data() + r0 * hv * dv);
      const auto t2 = clock_type::now();
      ts += std::chrono::duration<double>(t1 - t0).count();
      tr += std::chrono::duration<double>(t2 - t1).count();
    }
    if (r == 0) continue;  // warm-up
    stage = std::min(stage, ts);
    rule = std::min(rule, tr);
    both = std::min(both, ts + tr);
  }
  std::printf(
      "gdn layer middle (0.8b, one 512-row chunk in %lld-row slabs, best of %d): input stage %.3f ms, delta rule "
      "bf16 %.3f ms, together %.3f ms\n",
      static_cast<long long>(clef::ops::kGdnChunk), reps, stage * 1e3, rule * 1e3, both * 1e3);
}

#if defined(__aarch64__)
/// The ARM instruction classes' measured peaks (ops/peak.h measure_arm_peak): 0 where the CPU lacks
/// the instruction. Under qemu these numbers are the emulator's speed, not the CPU's.
void print_arm_peaks(int threads, std::int64_t iters) {
  using clef::ops::ArmPeak;
  std::printf("measured ARM peaks (%d threads; 2 OP per multiply-add):\n", threads);
  for (const ArmPeak p : {ArmPeak::kFp32Fmla, ArmPeak::kSdot, ArmPeak::kSmmla, ArmPeak::kBfmmla}) {
    const double g = clef::ops::measure_arm_peak(p, threads, 3, iters);
    const bool fp = p == ArmPeak::kFp32Fmla || p == ArmPeak::kBfmmla;
    if (g > 0) {
      std::printf("  %-12s %10.1f %s\n", clef::ops::arm_peak_name(p), g, fp ? "GFLOP/s" : "GOP/s");
    } else {
      std::printf("  %-12s %10.1f (not supported by this CPU)\n", clef::ops::arm_peak_name(p), 0.0);
    }
  }
  std::printf("\n");
}
#endif

int main(int argc, char** argv) try {
  int threads = 0, reps = 5;
  std::int64_t m = 1024, qm = 512, peak_iters = 20'000'000;
  bool quick = false, peak_only = false, quant_only = false, attn_only = false, gdn_only = false,
       bf16_gemm_only = false;
  CLI::App app{
      "Op micro-benchmarks: the measured peaks of the kernel level (CLEF_ISA forces one), the GEMM "
      "libraries on the model's linear-layer shapes, the gated delta rule and attention kernels, the "
      "block-quantized GEMMs. Prints tables; not a timed test.",
      "clef_bench_ops"};
  app.add_option("--threads", threads, "threads (0: the machine's CPUs; more than the CPUs run as many as the CPUs)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app.add_option("--m", m, "rows (tokens) of the GEMM table, and T of the gated delta rule without --quick")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--qm", qm, "rows of the block-quantized GEMM table (a second table has 1 row)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions per cell, best of (4x in the 1-row quantized table)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--peak-iters", peak_iters, "iterations of each peak measurement's chain loop (fewer under qemu)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  app.add_flag("--quick", quick, "fewer shapes (every table)");
  auto* peak_opt = app.add_flag("--peak-only", peak_only, "only the measured peaks");
  auto* quant_opt = app.add_flag("--quant-only", quant_only, "only the block-quantized GEMMs (no peaks)");
  auto* attn_opt = app.add_flag("--attn-only", attn_only, "only the peaks and the attention kernel");
  auto* gdn_opt = app.add_flag(
      "--gdn-only", gdn_only,
      "only the peaks, the GDN layer's input stage + bf16 delta rule in 64-row slabs, and the gated delta rule");
  auto* bf16_opt = app.add_flag("--bf16-gemm-only", bf16_gemm_only,
                                "only the peaks and the bf16 GEMMs (library vs clef's vdpbf16ps; at the avx2 level "
                                "library vs clef's FMA GEMM, bf16 and fp32 weights) at 32, 128, 512 and --m rows "
                                "(x86-64)");
  peak_opt->excludes(quant_opt)->excludes(attn_opt)->excludes(gdn_opt)->excludes(bf16_opt);
  quant_opt->excludes(attn_opt)->excludes(gdn_opt)->excludes(bf16_opt);
  attn_opt->excludes(gdn_opt)->excludes(bf16_opt);
  gdn_opt->excludes(bf16_opt);
  CLI11_PARSE(app, argc, argv);
  clef::ops::init_isa();  // a bad CLEF_ISA is reported before any work
  threads = clef::ops::set_num_threads(threads);
  openblas_set_num_threads(threads);
  std::printf("threads %d, kernels %s, GEMM backend %s\n\n", threads, clef::ops::isa_description().c_str(),
              clef::ops::gemm_backend_name().c_str());
  const std::vector<Shape> quant_shapes = {
      {"square", 1024, 1024},
      {"0.8b gdn in_proj_qkv", 6144, 1024},
      {"0.8b gdn in_proj_z", 2048, 1024},
      {"0.8b gdn out_proj", 1024, 2048},
      {"0.8b attn q_proj", 4096, 1024},
      {"0.8b attn k_proj", 512, 1024},
      {"0.8b mlp gate/up", 3584, 1024},
      {"0.8b mlp down", 1024, 3584},
  };
  const std::vector<Shape> quant_run =
      quick ? std::vector<Shape>(quant_shapes.begin(), quant_shapes.begin() + 2) : quant_shapes;
  if (quant_only) {
    bench_quant(quant_run, qm, reps);
    bench_quant(quant_run, 1, reps * 4);
    return 0;
  }

  const clef::ops::PeakGflops measured = clef::ops::measure_peak_gflops(threads, 3, peak_iters);  // best of 3
  const double pf = measured.fp32, pb = measured.bf16;
  const clef::ops::Int8Kernel i8k = clef::ops::active_int8_kernel();
  const double p8 = clef::ops::measure_int8_peak_gops(i8k, threads, 3, peak_iters);
  const clef::ops::QuantKernel qk = clef::ops::active_quant_kernel();
  const double pq = clef::ops::measure_quant_peak_gops(qk, threads, 3, peak_iters);
  std::printf(
      "measured peak: fp32 FMA %.1f GFLOP/s, bf16 %.1f GFLOP/s (%s), int8 %.1f GOP/s (%s kernel's sequence), "
      "block-quantized %.1f GOP/s (%s kernel's sequence)\n\n",
      pf, pb,
      measured.bf16_dot ? "vdpbf16ps"
#if defined(__aarch64__)
                        : "fp32 FMA on bf16 values; the BFMMLA peak, where the CPU has it, is in the ARM table below",
#else
                        : "fp32 FMA on bf16 values: no bf16 dot product at this level",
#endif
      p8, clef::ops::int8_kernel_name(i8k), pq, clef::ops::quant_kernel_name(qk));
#if defined(__aarch64__)
  print_arm_peaks(threads, peak_iters);
#endif
  if (peak_only) return 0;
  if (bf16_gemm_only) {
#if defined(__aarch64__)
    std::printf("--bf16-gemm-only: clef's vdpbf16ps GEMM is x86-64's (ARM64's bf16 GEMM is BFMMLA)\n");
#else
    const std::vector<Shape> bf16_shapes = {
        {"0.8b gdn in_proj_qkv", 6144, 1024},
        {"0.8b gdn out_proj", 1024, 2048},
        {"0.8b mlp gate/up", 3584, 1024},
        {"0.8b mlp down", 1024, 3584},
    };
    std::vector<std::int64_t> ms = {32, 128, 512};
    if (std::find(ms.begin(), ms.end(), m) == ms.end()) ms.push_back(m);
    const std::vector<Shape> run_shapes =
        quick ? std::vector<Shape>(bf16_shapes.begin(), bf16_shapes.begin() + 1) : bf16_shapes;
    if (clef::ops::cpu::fma_gemm_available()) bench_fma_gemm(run_shapes, ms, reps, pf);
    else bench_bf16_gemm(run_shapes, ms, reps, pb);
#endif
    return 0;
  }
  if (attn_only) {
    bench_attention(quick, reps, pf, pb);
    return 0;
  }
  if (gdn_only) {
    bench_gdn_slabs(reps);
    bench_delta_rule(quick ? 256 : m, reps, pf, pb);
    return 0;
  }

  // Linear-layer shapes of the 0.8b preset (and one flash MLP shape), y [m, n] = x [m, k] W^T.
  std::vector<Shape> shapes = {
      {"0.8b gdn in_proj_qkv", 6144, 1024}, {"0.8b gdn in_proj_z", 2048, 1024}, {"0.8b gdn out_proj", 1024, 2048},
      {"0.8b attn q_proj", 4096, 1024},     {"0.8b attn k_proj", 512, 1024},    {"0.8b mlp gate/up", 3584, 1024},
      {"0.8b mlp down", 1024, 3584},        {"flash mlp gate/up", 12288, 4096},
  };
  if (quick) shapes.resize(3);
  std::printf("GEMM, m = %lld rows, best of %d (GFLOP/s; %% of the matching measured peak)\n",
              static_cast<long long>(m), reps);
  const std::string i8name = std::string("int8 ") + clef::ops::int8_kernel_name(clef::ops::active_int8_kernel());
  std::printf("%-22s %6s %6s | %15s %15s %15s %15s | %s\n", "shape", "n", "k", "oneDNN fp32", "oneDNN bf16",
              "OpenBLAS sgemm", i8name.c_str(), "bf16, int8 / best fp32");
  double tot_flop = 0, tot_f32 = 0, tot_b16 = 0, tot_blas = 0, tot_i8 = 0;
  for (const Shape& s : shapes) {
    const std::vector<float> x = randv(static_cast<std::size_t>(m * s.k), 1);
    const std::vector<float> wf = randv(static_cast<std::size_t>(s.n * s.k), 2);
    std::vector<std::uint16_t> wb(wf.size());
    for (std::size_t i = 0; i < wf.size(); ++i) wb[i] = clef::f32_to_bf16(wf[i]);
    std::vector<float> y(static_cast<std::size_t>(m * s.n));
    const clef::ops::GemmWeight g32(clef::DType::kF32, wf.data(), s.n, s.k, clef::ops::Precision::kF32);
    const clef::ops::GemmWeight g16(clef::DType::kBF16, wb.data(), s.n, s.k, clef::ops::Precision::kBF16);
    const clef::ops::GemmWeight g8(clef::DType::kF32, wf.data(), s.n, s.k, clef::ops::Precision::kInt8);
    const double flop = 2.0 * static_cast<double>(m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const double t32 = best_seconds(reps, [&] { clef::ops::linear(x.data(), m, g32, y.data()); });
    const double t16 = best_seconds(reps, [&] { clef::ops::linear(x.data(), m, g16, y.data()); });
    const double t8 = best_seconds(reps, [&] { clef::ops::linear(x.data(), m, g8, y.data()); });
    const double tbl = best_seconds(reps, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(s.n),
                  static_cast<int>(s.k), 1.0f, x.data(), static_cast<int>(s.k), wf.data(), static_cast<int>(s.k), 0.0f,
                  y.data(), static_cast<int>(s.n));
    });
    tot_flop += flop;
    tot_f32 += t32;
    tot_b16 += t16;
    tot_blas += tbl;
    tot_i8 += t8;
    auto cell = [&](double t, double peak) {
      static char buf[64];
      std::snprintf(buf, sizeof buf, "%7.1f (%3.0f%%)", flop / t / 1e9, peak > 0 ? 100.0 * flop / t / 1e9 / peak : 0.0);
      return std::string(buf);
    };
    const std::string c32 = cell(t32, pf), c16 = cell(t16, pb), cbl = cell(tbl, pf), c8 = cell(t8, p8);
    std::printf("%-22s %6lld %6lld | %15s %15s %15s %15s | %.2fx, %.2fx\n", s.name, static_cast<long long>(s.n),
                static_cast<long long>(s.k), c32.c_str(), c16.c_str(), cbl.c_str(), c8.c_str(),
                std::min(t32, tbl) / t16, std::min(t32, tbl) / t8);
  }
  std::printf("%-22s %13s | %15.1f %15.1f %15.1f %15.1f | %.2fx, %.2fx\n\n", "all shapes (time-weighted)", "",
              tot_flop / tot_f32 / 1e9, tot_flop / tot_b16 / 1e9, tot_flop / tot_blas / 1e9, tot_flop / tot_i8 / 1e9,
              std::min(tot_f32, tot_blas) / tot_b16, std::min(tot_f32, tot_blas) / tot_i8);

  bench_quant(quant_run, qm, reps);
  bench_quant(quant_run, 1, reps * 4);

  // GDN input stage, 0.8b dims: conv + SiLU, q/k L2 norm, gates as three ops and fused.
  {
    const std::int64_t t = quick ? 256 : 512, c = 6144, k = 4, hv = 16;
    const std::vector<float> x = randv(static_cast<std::size_t>(t * c), 9),
                             w = randv(static_cast<std::size_t>(c * k), 10);
    const std::vector<float> b = randv(static_cast<std::size_t>(t * hv), 11), a = randv(b.size(), 12);
    const std::vector<float> na(static_cast<std::size_t>(hv), -0.5f), db(static_cast<std::size_t>(hv), 0.1f);
    std::vector<float> u(x.size()), state(static_cast<std::size_t>((k - 1) * c)), beta(b.size()), g(b.size());
    const clef::ops::GdnInputStage gs{.channels = c,
                                      .conv_k = k,
                                      .conv_w = w.data(),
                                      .hk = 16,
                                      .dk = 128,
                                      .qscale = 1.0f / std::sqrt(128.0f),
                                      .hv = hv,
                                      .neg_a = na.data(),
                                      .dt_bias = db.data()};
    const double split = best_seconds(reps, [&] {
      clef::ops::causal_conv1d_silu(x.data(), t, c, w.data(), k, state.data(), u.data());
      for (std::int64_t i = 0; i < t; ++i) {
        clef::ops::l2norm_rows(u.data() + i * c, 16, 128, 128, 1e-6f, gs.qscale);
        clef::ops::l2norm_rows(u.data() + i * c + 2048, 16, 128, 128, 1e-6f, 1.0f);
      }
      clef::ops::gdn_gates(b.data(), a.data(), t, hv, na.data(), db.data(), beta.data(), g.data());
    });
    const double fused = best_seconds(reps, [&] {
      clef::ops::gdn_input_stage(gs, t, x.data(), state.data(), u.data(), b.data(), a.data(), beta.data(), g.data());
    });
    const double bytes = 2.0 * static_cast<double>(t * c) * 4.0;  // x read once, u written once
    std::printf("gdn input stage (0.8b layer, T=%lld): three ops %.3f ms, fused %.3f ms (%.1f GB/s of x + u)\n",
                static_cast<long long>(t), split * 1e3, fused * 1e3, bytes / fused / 1e9);
  }
  bench_delta_rule(quick ? 256 : m, reps, pf, pb);
  bench_attention(quick, reps, pf, pb);
  return 0;
} catch (const clef::Error& e) {  // CLEF_ISA unknown or above the CPU's level
  std::cerr << "clef_bench_ops: error: " << e.what() << "\n";
  return clef::exit_code_for(e.kind());
} catch (const std::bad_alloc&) {
  std::cerr << "clef_bench_ops: error: out of memory (lower --m or --qm)\n";
  return clef::exit_code_for(clef::ErrorKind::kIo);
}

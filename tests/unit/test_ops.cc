// SPDX-License-Identifier: MIT
// Op harness: every optimized CPU op against its scalar reference (src/ops/ref) on random inputs
// with odd shapes (1, 17, non-multiples of 16), per-op tolerances. A failure names the op, the
// shapes, the first bad index with both values, and how many elements are off.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/convert.h"
#include "ops/gemm.h"
#include "ops/int8_gemm.h"
#include "ops/isa.h"
#include "isa_levels.h"
#if defined(__aarch64__)
#include "ops/cpu/bf16_gemm_arm.h"
#else
#include "ops/cpu/bf16_gemm_x86.h"
#include "ops/cpu/fma_gemm_x86.h"
#include "ops/cpu/gemm_backend.h"
#endif
#include "ops/ops.h"
#include "ops/parallel.h"
#include "ops/profile.h"
#include "ops/rope_freq.h"

namespace clef {
namespace {

class OpsAtLevel : public test::AtIsaLevel {};

using Vec = std::vector<float>;
using ops::AttentionDims;
using ops::GdnDims;
using ops::Precision;
using ops::RopeDims;

/// The bf16 bits (f32_to_bf16) of each value.
std::vector<std::uint16_t> bf16_words(const Vec& f) {
  std::vector<std::uint16_t> b(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) b[i] = f32_to_bf16(f[i]);
  return b;
}

/// Tolerance: |got - want| <= atol + rtol * |want| elementwise.
struct Tol {
  double atol;
  double rtol;
};

::testing::AssertionResult close(const std::string& op, const std::string& shapes, const Vec& want, const Vec& got,
                                 Tol tol) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << op << " " << shapes << ": size " << got.size() << " != " << want.size();
  }
  std::size_t bad = 0, first = want.size();
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = want[i], g = got[i];
    const double err = std::fabs(g - w);
    const bool ok = (std::isnan(w) && std::isnan(g)) || err <= tol.atol + tol.rtol * std::fabs(w);
    worst = std::max(worst, std::isnan(err) ? std::numeric_limits<double>::infinity() : err);
    if (!ok) {
      if (first == want.size()) first = i;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "op " << op << " shapes " << shapes << ": " << bad << "/" << want.size()
                                       << " elements off; first bad index " << first << " want " << want[first]
                                       << " got " << got[first] << " (atol " << tol.atol << ", rtol " << tol.rtol
                                       << ", max err " << worst << ")";
}

class Rng {
 public:
  explicit Rng(std::uint32_t seed) : gen_(seed) {}
  Vec uniform(std::int64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    Vec v(static_cast<std::size_t>(n));
    for (float& x : v) x = d(gen_);
    return v;
  }
  std::int32_t integer(std::int32_t lo, std::int32_t hi) {
    return std::uniform_int_distribution<std::int32_t>(lo, hi)(gen_);
  }

 private:
  std::mt19937 gen_;
};

std::string dims(std::initializer_list<std::int64_t> d) {
  std::ostringstream s;
  s << "[";
  bool first = true;
  for (auto x : d) {
    s << (first ? "" : ", ") << x;
    first = false;
  }
  s << "]";
  return s.str();
}

const std::int64_t kOdd[] = {1, 17, 64, 100};

// ---------------------------------------------------------------------------------------------

TEST(Ops, EmbeddingGatherAllDtypes) {
  Rng rng(1);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (std::int64_t h : {1, 17, 64}) {
      const std::int64_t rows = 37;
      const Vec src = rng.uniform(rows * h, -4.0f, 4.0f);
      std::vector<std::byte> table(static_cast<std::size_t>(rows * h) * dtype_size(dt));
      for (std::size_t i = 0; i < src.size(); ++i) {
        if (dt == DType::kF32) std::memcpy(table.data() + 4 * i, &src[i], 4);
        if (dt == DType::kBF16) {
          const std::uint16_t b = f32_to_bf16(src[i]);
          std::memcpy(table.data() + 2 * i, &b, 2);
        }
        if (dt == DType::kF16) {
          const std::uint16_t b = f32_to_f16(src[i]);
          std::memcpy(table.data() + 2 * i, &b, 2);
        }
      }
      std::vector<std::int32_t> ids = {0, 36, 5, 5, 17};
      Vec want(ids.size() * static_cast<std::size_t>(h)), got(want.size());
      ops::ref::embedding_gather(dt, table.data(), rows, h, ids, want.data());
      ops::embedding_gather(dt, table.data(), rows, h, ids, got.data());
      EXPECT_TRUE(close("embedding_gather", std::string(dtype_name(dt)) + " " + dims({rows, h}), want, got, {0, 0}));
      std::vector<std::int32_t> badid = {int(rows)};
      EXPECT_THROW(ops::embedding_gather(dt, table.data(), rows, h, badid, got.data()), InvalidArgument);
      std::vector<std::int32_t> neg = {-1};
      EXPECT_THROW(ops::embedding_gather(dt, table.data(), rows, h, neg, got.data()), InvalidArgument);
    }
  }
}

// Block-quantized tables (GGUF token_embd in Q8_0, Q4_K, Q6_K, ...): random block bytes with finite
// fp16 scales, rows of whole blocks; the rows equal the reference's dequantized rows bit for bit, and
// a row that is not whole blocks is refused.
TEST(Ops, EmbeddingGatherBlockTypes) {
  Rng rng(2);
  for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    std::uint64_t be = 0, bb = 0;
    ASSERT_TRUE(dtype_block(dt, be, bb));
    const std::int64_t h = 2 * static_cast<std::int64_t>(be), rows = 9;
    std::vector<std::byte> table(static_cast<std::size_t>(rows) * 2 * bb);
    for (auto& b : table)
      b = static_cast<std::byte>(rng.integer(0, 255) & 0x3B);  // every byte <= 0x3B: no fp16 inf/NaN
    const std::vector<std::int32_t> ids = {0, 8, 3, 3};
    Vec want(ids.size() * static_cast<std::size_t>(h)), got(want.size());
    ops::ref::embedding_gather(dt, table.data(), rows, h, ids, want.data());
    ops::embedding_gather(dt, table.data(), rows, h, ids, got.data());
    EXPECT_TRUE(close("embedding_gather", std::string(dtype_name(dt)) + " " + dims({rows, h}), want, got, {0, 0}));
    EXPECT_THROW(ops::embedding_gather(dt, table.data(), rows, h - 1, ids, got.data()), Unsupported);
  }
}

// The level names CLEF_ISA takes round-trip, "native" and unknown names are not levels, and the
// levels this CPU supports include the baseline and the best one.
TEST(IsaLevels, NamesRoundTripAndTheBestLevelIsSupported) {
  for (const ops::IsaLevel level : ops::isa_levels()) {
    const auto back = ops::isa_from_name(ops::isa_name(level));
    ASSERT_TRUE(back.has_value()) << ops::isa_name(level);
    EXPECT_EQ(*back, level);
  }
  bool native = false;
  EXPECT_FALSE(ops::isa_from_name("native", &native).has_value());
  EXPECT_TRUE(native);
  EXPECT_FALSE(ops::isa_from_name("sse4").has_value());
  EXPECT_FALSE(ops::isa_from_name("").has_value());
  EXPECT_TRUE(ops::isa_supported(ops::IsaLevel::kBaseline));
  EXPECT_TRUE(ops::isa_supported(ops::best_supported_isa()));
}

// Switching to a level points every kernel at that level's Highway target (e.g. ARM64's
// neon-dotprod at NEON, sve256 at SVE_256), read back from a kernel file's own copy.
TEST_P(OpsAtLevel, KernelsRunTheLevelsHighwayTarget) {
  EXPECT_STREQ(ops::dispatched_hwy_target(), ops::isa_hwy_target(GetParam())) << ops::isa_name(GetParam());
}

// Bulk conversions equal the scalar ones of core/dtype.h bit for bit: random values, ties, NaN,
// infinities, subnormals, values that round up to infinity; odd lengths (vector tails).
TEST_P(OpsAtLevel, ConversionsMatchScalarBitForBit) {
  Rng rng(91);
  Vec x = rng.uniform(1037, -3.0f, 3.0f);
  const std::uint32_t specials[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u, 0xff800000u, 0x00000001u,
                                    0x80000001u, 0x007fffffu, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu,
                                    0x00000000u, 0x80000000u, 0x3f80ffffu, 0x7f7f8000u};
  for (std::size_t i = 0; i < std::size(specials); ++i) std::memcpy(&x[i * 61], &specials[i], 4);
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{16}, std::int64_t{1037}}) {
    std::vector<std::uint16_t> b(static_cast<std::size_t>(n));
    ops::f32_to_bf16_n(x.data(), n, b.data());
    Vec r(static_cast<std::size_t>(n)), w(static_cast<std::size_t>(n));
    ops::round_to_bf16_n(x.data(), n, r.data());
    ops::bf16_to_f32_n(b.data(), n, w.data());
    for (std::int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<std::size_t>(i);
      const std::uint16_t want = f32_to_bf16(x[u]);
      ASSERT_EQ(b[u], want) << "f32_to_bf16_n n=" << n << " i=" << i;
      const float wf = bf16_to_f32(want);
      ASSERT_EQ(std::memcmp(&r[u], &wf, 4), 0) << "round_to_bf16_n n=" << n << " i=" << i;
      ASSERT_EQ(std::memcmp(&w[u], &wf, 4), 0) << "bf16_to_f32_n n=" << n << " i=" << i;
    }
  }
}

TEST_P(OpsAtLevel, RmsNormOffset) {
  Rng rng(2);
  for (std::int64_t rows : {1, 3, 17}) {
    for (std::int64_t n : kOdd) {
      const Vec x = rng.uniform(rows * n, -3.0f, 3.0f), w = rng.uniform(n, -0.5f, 0.5f);
      Vec want(x.size()), got(x.size());
      ops::ref::rms_norm_offset(x.data(), rows, n, w.data(), 1e-6f, want.data());
      ops::rms_norm_offset(x.data(), rows, n, w.data(), 1e-6f, got.data());
      EXPECT_TRUE(close("rms_norm_offset", dims({rows, n}), want, got, {1e-6, 2e-6}));
      // in place
      Vec inplace = x;
      ops::rms_norm_offset(inplace.data(), rows, n, w.data(), 1e-6f, inplace.data());
      EXPECT_TRUE(close("rms_norm_offset(in place)", dims({rows, n}), want, inplace, {1e-6, 2e-6}));
    }
  }
  // The weight is an offset: w = 0 means scale 1 (pitfall 1).
  const Vec x = {3.0f, 4.0f}, w = {0.0f, 0.0f};
  Vec y(2);
  ops::rms_norm_offset(x.data(), 1, 2, w.data(), 0.0f, y.data());
  EXPECT_NEAR(y[0], 3.0f / std::sqrt(12.5f), 1e-6);
}

TEST_P(OpsAtLevel, StridedNormAndGateAreTheContiguousOpsBitForBit) {
  // Gated attention reads the query and gate halves of its [query | gate] head rows in place:
  // rms_norm_offset_strided and sigmoid_mul_rows against the contiguous ops on the halves copied
  // out, bit for bit (the contiguous ops have their reference tests above). rows * n = 130 * 256
  // runs threaded (kParallelMin); n = 37 has vector tails; a wrong stride or offset moves values by O(1).
  Rng rng(23);
  for (const auto& [rows, n] : {std::pair<std::int64_t, std::int64_t>{1, 37}, {5, 37}, {130, 256}}) {
    const Vec qg = rng.uniform(rows * 2 * n, -3.0f, 3.0f), w = rng.uniform(n, -0.5f, 0.5f);
    const Vec o0 = rng.uniform(rows * n, -2.0f, 2.0f);
    Vec q(static_cast<std::size_t>(rows * n)), gate(q.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      std::copy_n(qg.begin() + r * 2 * n, n, q.begin() + r * n);
      std::copy_n(qg.begin() + r * 2 * n + n, n, gate.begin() + r * n);
    }
    Vec want(q.size()), got(q.size());
    ops::rms_norm_offset(q.data(), rows, n, w.data(), 1e-6f, want.data());
    ops::rms_norm_offset_strided(qg.data(), 2 * n, rows, n, w.data(), 1e-6f, got.data());
    EXPECT_TRUE(close("rms_norm_offset_strided", dims({rows, n}), want, got, {0, 0}));
    Vec ow = o0, og = o0;
    ops::sigmoid_mul(ow.data(), gate.data(), rows * n);
    ops::sigmoid_mul_rows(og.data(), rows, n, qg.data() + n, 2 * n);
    EXPECT_TRUE(close("sigmoid_mul_rows", dims({rows, n}), ow, og, {0, 0}));
  }
  Vec x(8), y(8);
  EXPECT_THROW(ops::rms_norm_offset_strided(x.data(), 3, 1, 4, x.data(), 1e-6f, y.data()), InvalidArgument);
  EXPECT_THROW(ops::sigmoid_mul_rows(y.data(), 1, 4, x.data(), 3), InvalidArgument);
}

TEST_P(OpsAtLevel, GatedRmsNorm) {
  Rng rng(3);
  for (std::int64_t rows : {1, 4, 17}) {
    for (std::int64_t n : kOdd) {
      const Vec o = rng.uniform(rows * n, -2.0f, 2.0f), z = rng.uniform(rows * n, -12.0f, 12.0f);
      const Vec w = rng.uniform(n, 0.5f, 1.5f);
      Vec want(o.size()), got(o.size());
      ops::ref::gated_rms_norm(o.data(), z.data(), rows, n, w.data(), 1e-6f, want.data());
      ops::gated_rms_norm(o.data(), z.data(), rows, n, w.data(), 1e-6f, got.data());
      EXPECT_TRUE(close("gated_rms_norm", dims({rows, n}), want, got, {1e-6, 4e-6}));
    }
  }
}

/// n floats that end exactly where an inaccessible page begins: a kernel that reads or writes
/// past the last element faults (the test process dies) instead of passing by luck.
class GuardedFloats {
 public:
  explicit GuardedFloats(std::int64_t n) : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
    span_ = (bytes + page_ - 1) / page_ * page_ + page_;
    void* m = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error("GuardedFloats: mmap failed");
    base_ = static_cast<std::byte*>(m);
    if (mprotect(base_ + span_ - page_, page_, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
    data_ = reinterpret_cast<float*>(base_ + span_ - page_ - bytes);
  }
  ~GuardedFloats() { munmap(base_, span_); }
  GuardedFloats(const GuardedFloats&) = delete;
  GuardedFloats& operator=(const GuardedFloats&) = delete;
  float* data() { return data_; }

 private:
  std::size_t page_, span_ = 0;
  std::byte* base_ = nullptr;
  float* data_ = nullptr;
};

// Vector tails touch nothing past their buffers: every input and output of these ops ends at an
// inaccessible page, for every length up to two AVX-512 vectors. (Highway 1.0.3's NEON masked
// loads and stores read and write the whole vector; the kernels' tails must not use them there.)
TEST_P(OpsAtLevel, VectorTailsTouchNothingPastTheirBuffers) {
  Rng rng(12);
  for (std::int64_t n = 1; n <= 33; ++n) {
    const Vec a = rng.uniform(n, -8.0f, 8.0f), b = rng.uniform(n, -2.0f, 2.0f);
    GuardedFloats ga(n), gb(n), out(n);
    std::copy(a.begin(), a.end(), ga.data());
    std::copy(b.begin(), b.end(), gb.data());
    Vec want(a.size());
    ops::ref::silu_mul(a.data(), b.data(), n, want.data());
    ops::silu_mul(ga.data(), gb.data(), n, out.data());
    EXPECT_TRUE(close("silu_mul", dims({n}), want, Vec(out.data(), out.data() + n), {1e-7, 4e-6}));
    want = b;
    ops::ref::sigmoid_mul(want.data(), a.data(), n);
    ops::sigmoid_mul(gb.data(), ga.data(), n);
    EXPECT_TRUE(close("sigmoid_mul", dims({n}), want, Vec(gb.data(), gb.data() + n), {1e-7, 4e-6}));
    for (std::int64_t i = 0; i < n; ++i)
      want[static_cast<std::size_t>(i)] = bf16_to_f32(f32_to_bf16(a[static_cast<std::size_t>(i)]));
    ops::round_to_bf16_n(ga.data(), n, out.data());
    EXPECT_TRUE(close("round_to_bf16_n", dims({n}), want, Vec(out.data(), out.data() + n), {0, 0}));
  }
}

TEST_P(OpsAtLevel, ElementwiseSiluSigmoidAdd) {
  Rng rng(4);
  for (std::int64_t n : {1, 17, 100, 4097, 40000}) {
    const Vec a = rng.uniform(n, -30.0f, 30.0f), b = rng.uniform(n, -2.0f, 2.0f);
    Vec want(a.size()), got(a.size());
    ops::ref::silu_mul(a.data(), b.data(), n, want.data());
    ops::silu_mul(a.data(), b.data(), n, got.data());
    EXPECT_TRUE(close("silu_mul", dims({n}), want, got, {1e-7, 4e-6}));
    want = b;
    got = b;
    ops::ref::sigmoid_mul(want.data(), a.data(), n);
    ops::sigmoid_mul(got.data(), a.data(), n);
    EXPECT_TRUE(close("sigmoid_mul", dims({n}), want, got, {1e-7, 4e-6}));
    want = b;
    got = b;
    ops::ref::add_inplace(want.data(), a.data(), n);
    ops::add_inplace(got.data(), a.data(), n);
    EXPECT_TRUE(close("add_inplace", dims({n}), want, got, {0, 0}));
  }
  // Extremes: no NaN from exp overflow/underflow.
  const Vec ext = {-1000.0f, -100.0f, -88.0f, 0.0f, 88.0f, 100.0f, 1000.0f};
  const Vec one(ext.size(), 1.0f);
  Vec want(ext.size()), got(ext.size());
  ops::ref::silu_mul(ext.data(), one.data(), 7, want.data());
  ops::silu_mul(ext.data(), one.data(), 7, got.data());
  EXPECT_TRUE(close("silu_mul(extremes)", dims({7}), want, got, {1e-30, 4e-6}));
}

TEST_P(OpsAtLevel, L2NormRowsStrided) {
  Rng rng(5);
  for (std::int64_t rows : {1, 6, 17}) {
    for (std::int64_t n : {1, 17, 32, 128}) {
      const std::int64_t stride = n + 3;
      const Vec x = rng.uniform(rows * stride, -2.0f, 2.0f);
      Vec want = x, got = x;
      const float scale = 1.0f / std::sqrt(static_cast<float>(n));
      ops::ref::l2norm_rows(want.data(), rows, n, stride, 1e-6f, scale);
      ops::l2norm_rows(got.data(), rows, n, stride, 1e-6f, scale);
      EXPECT_TRUE(close("l2norm_rows", dims({rows, n, stride}), want, got, {1e-7, 2e-6}));
      // untouched padding columns
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = n; c < stride; ++c)
          EXPECT_EQ(got[static_cast<std::size_t>(r * stride + c)], x[static_cast<std::size_t>(r * stride + c)]);
      }
    }
  }
  // FLA form: eps is added to the SUM (pitfall 7): a zero row stays zero, a tiny row is damped.
  Vec z = {1e-4f, 0.0f};
  ops::l2norm_rows(z.data(), 1, 2, 2, 1e-6f, 1.0f);
  EXPECT_NEAR(z[0], 1e-4 / std::sqrt(1e-8 + 1e-6), 1e-6);
}

TEST_P(OpsAtLevel, CausalConv1dWithState) {
  Rng rng(6);
  for (std::int64_t k : {1, 2, 4}) {
    for (std::int64_t c : {1, 17, 300}) {
      for (std::int64_t t : {1, 2, 5, 17}) {
        const Vec x = rng.uniform(t * c, -2.0f, 2.0f), w = rng.uniform(c * k, -1.0f, 1.0f);
        const Vec st0 = rng.uniform((k - 1) * c, -1.0f, 1.0f);
        Vec sw = st0, sg = st0, want(x.size()), got(x.size());
        ops::ref::causal_conv1d_silu(x.data(), t, c, w.data(), k, sw.data(), want.data());
        ops::causal_conv1d_silu(x.data(), t, c, w.data(), k, sg.data(), got.data());
        const std::string sh = "T,C,K=" + dims({t, c, k});
        EXPECT_TRUE(close("causal_conv1d_silu", sh, want, got, {1e-6, 4e-6}));
        EXPECT_TRUE(close("causal_conv1d_silu(state)", sh, sw, sg, {0, 0}));
        // Split into two calls == one call.
        if (t >= 2) {
          const std::int64_t t1 = t / 2;
          Vec s2 = st0, split(x.size());
          ops::causal_conv1d_silu(x.data(), t1, c, w.data(), k, s2.data(), split.data());
          ops::causal_conv1d_silu(x.data() + t1 * c, t - t1, c, w.data(), k, s2.data(), split.data() + t1 * c);
          EXPECT_TRUE(close("causal_conv1d_silu(split)", sh, got, split, {0, 0}));
          EXPECT_TRUE(close("causal_conv1d_silu(split state)", sh, sg, s2, {0, 0}));
        }
      }
    }
  }
}

// The int8 producers (SwiGLU and the GDN gated norm quantizing the rows they write) against the
// op followed by quantize_activations at the same level: equal floats and equal int8 blocks
// (values, |q|, scales, sums), including a row that ends in a partial block and threaded sizes.
TEST_P(OpsAtLevel, QuantizingProducersAreTheOpThenQuantizeBitForBit) {
  Rng rng(31);
  auto same_blocks = [](const std::string& what, const ops::Int8Activations& a, const ops::Int8Activations& b) {
    const auto nb = static_cast<std::size_t>(a.m * a.blocks);
    EXPECT_EQ(a.m, b.m) << what;
    EXPECT_EQ(a.blocks, b.blocks) << what;
    EXPECT_EQ(0, std::memcmp(a.q.data(), b.q.data(), nb * 32)) << what << ": q";
    EXPECT_EQ(0, std::memcmp(a.absq.data(), b.absq.data(), nb * 32)) << what << ": |q|";
    EXPECT_EQ(0, std::memcmp(a.d.data(), b.d.data(), nb * sizeof(float))) << what << ": scales";
    EXPECT_EQ(0, std::memcmp(a.sum128.data(), b.sum128.data(), nb * sizeof(std::int32_t))) << what << ": sums";
  };
  for (const auto& [m, k] : {std::pair<std::int64_t, std::int64_t>{1, 32}, {5, 50}, {40, 3584}}) {
    const Vec g = rng.uniform(m * k, -6.0f, 6.0f), u = rng.uniform(m * k, -3.0f, 3.0f);
    Vec want(g.size()), got = g;
    ops::silu_mul(g.data(), u.data(), m * k, want.data());
    ops::Int8Activations qw, qg;
    ops::quantize_activations(want.data(), m, k, qw);
    ops::silu_mul_quantize(got.data(), u.data(), m, k, got.data(), qg);  // in place, as the MLP runs it
    const std::string sh = "M,K=" + dims({m, k});
    EXPECT_TRUE(close("silu_mul_quantize(out)", sh, want, got, {0, 0}));
    same_blocks("silu_mul_quantize " + sh, qw, qg);
  }
  for (const auto& [t, heads, n] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 32}, {5, 3, 64}, {40, 16, 128}}) {
    const Vec o = rng.uniform(t * heads * n, -2.0f, 2.0f), z = rng.uniform(t * heads * n, -4.0f, 4.0f);
    const Vec w = rng.uniform(n, 0.5f, 1.5f);
    Vec want(o.size()), got = o;
    ops::gated_rms_norm(o.data(), z.data(), t * heads, n, w.data(), 1e-6f, want.data());
    ops::Int8Activations qw, qg;
    ops::quantize_activations(want.data(), t, heads * n, qw);
    ops::gated_rms_norm_quantize(got.data(), z.data(), t, heads, n, w.data(), 1e-6f, got.data(), qg);
    const std::string sh = "T,heads,N=" + dims({t, heads, n});
    EXPECT_TRUE(close("gated_rms_norm_quantize(y)", sh, want, got, {0, 0}));
    same_blocks("gated_rms_norm_quantize " + sh, qw, qg);
  }
  ops::Int8Activations q;
  Vec o(48, 1.0f);
  EXPECT_THROW(ops::gated_rms_norm_quantize(o.data(), o.data(), 1, 1, 48, o.data(), 1e-6f, o.data(), q),
               InvalidArgument);  // a head row of 48 is not whole blocks
}

TEST_P(OpsAtLevel, GdnInputStageIsTheThreeOpsBitForBit) {
  // The fused stage (one pass per token row) against conv + SiLU, L2 norm and gates run one after
  // the other at the same level (each of those has its own reference test above): equal bits,
  // state included, also when the chunk is split in two (the taps then given transposed). Channels past the q/k heads
  // (v) and a channel count that is not a multiple of the conv block are covered; t = 40 runs threaded.
  Rng rng(14);
  for (std::int64_t k : {1, 4}) {
    for (const auto& [hk, dk, extra] :
         {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 3, 0}, {2, 16, 40}, {3, 128, 300}}) {
      const std::int64_t c = 2 * hk * dk + extra, hv = 3;
      for (std::int64_t t : {1, 5, 40}) {
        const Vec x = rng.uniform(t * c, -2.0f, 2.0f), w = rng.uniform(c * k, -1.0f, 1.0f);
        const Vec st0 = rng.uniform((k - 1) * c, -1.0f, 1.0f);
        const Vec b = rng.uniform(t * hv, -8.0f, 8.0f), a = rng.uniform(t * hv, -25.0f, 25.0f);
        const Vec neg_a = rng.uniform(hv, -3.0f, -0.1f), dtb = rng.uniform(hv, -1.0f, 1.0f);
        ops::GdnInputStage s;
        s.channels = c;
        s.conv_k = k;
        s.conv_w = w.data();
        s.hk = hk;
        s.dk = dk;
        s.qscale = 1.0f / std::sqrt(static_cast<float>(dk));
        s.hv = hv;
        s.neg_a = neg_a.data();
        s.dt_bias = dtb.data();
        Vec sw = st0, uw(x.size()), bw(b.size()), gw(b.size());
        ops::causal_conv1d_silu(x.data(), t, c, w.data(), k, sw.data(), uw.data());
        for (std::int64_t i = 0; i < t; ++i) {
          ops::l2norm_rows(uw.data() + i * c, hk, dk, dk, s.eps, s.qscale);
          ops::l2norm_rows(uw.data() + i * c + hk * dk, hk, dk, dk, s.eps, 1.0f);
        }
        ops::gdn_gates(b.data(), a.data(), t, hv, neg_a.data(), dtb.data(), bw.data(), gw.data());
        Vec sg = st0, ug(x.size()), bg(b.size()), gg(b.size());
        ops::gdn_input_stage(s, t, x.data(), sg.data(), ug.data(), b.data(), a.data(), bg.data(), gg.data());
        const std::string sh = "T,C,K,Hk,Dk=" + dims({t, c, k, hk, dk});
        EXPECT_TRUE(close("gdn_input_stage(u)", sh, uw, ug, {0, 0}));
        EXPECT_TRUE(close("gdn_input_stage(state)", sh, sw, sg, {0, 0}));
        EXPECT_TRUE(close("gdn_input_stage(beta)", sh, bw, bg, {0, 0}));
        EXPECT_TRUE(close("gdn_input_stage(g)", sh, gw, gg, {0, 0}));
        if (t >= 2) {  // split in two, the taps handed over transposed (conv_taps)
          Vec taps(w.size());
          ops::transpose_conv_taps(w.data(), c, k, taps.data());
          s.conv_taps = taps.data();
          const std::int64_t t1 = t / 2;
          Vec s2 = st0, u2(x.size()), b2(b.size()), g2(b.size());
          ops::gdn_input_stage(s, t1, x.data(), s2.data(), u2.data(), b.data(), a.data(), b2.data(), g2.data());
          ops::gdn_input_stage(s, t - t1, x.data() + t1 * c, s2.data(), u2.data() + t1 * c, b.data() + t1 * hv,
                               a.data() + t1 * hv, b2.data() + t1 * hv, g2.data() + t1 * hv);
          EXPECT_TRUE(close("gdn_input_stage(split)", sh, ug, u2, {0, 0}));
          EXPECT_TRUE(close("gdn_input_stage(split state)", sh, sg, s2, {0, 0}));
        }
      }
    }
  }
  ops::GdnInputStage bad;
  bad.channels = 4;
  bad.conv_k = 2;
  bad.hk = 1;
  bad.dk = 3;  // 2 * 1 * 3 > 4 channels
  float dummy[16] = {};
  EXPECT_THROW(ops::gdn_input_stage(bad, 1, dummy, dummy, dummy, dummy, dummy, dummy, dummy), InvalidArgument);
}

TEST_P(OpsAtLevel, GdnGates) {
  Rng rng(7);
  for (std::int64_t t : {1, 17}) {
    for (std::int64_t hv : {1, 4, 17}) {
      const Vec b = rng.uniform(t * hv, -8.0f, 8.0f), a = rng.uniform(t * hv, -25.0f, 25.0f);
      const Vec alog = rng.uniform(hv, -1.0f, 2.0f), dtb = rng.uniform(hv, -1.0f, 1.0f);
      Vec bw(b.size()), gw(b.size()), bg(b.size()), gg(b.size()), neg_a(alog.size());
      for (std::size_t h = 0; h < alog.size(); ++h) neg_a[h] = -std::exp(alog[h]);
      ops::ref::gdn_gates(b.data(), a.data(), t, hv, neg_a.data(), dtb.data(), bw.data(), gw.data());
      ops::gdn_gates(b.data(), a.data(), t, hv, neg_a.data(), dtb.data(), bg.data(), gg.data());
      EXPECT_TRUE(close("gdn_gates(beta)", dims({t, hv}), bw, bg, {1e-7, 4e-6}));
      EXPECT_TRUE(close("gdn_gates(g)", dims({t, hv}), gw, gg, {1e-7, 4e-6}));
      for (float g : gg) EXPECT_LE(g, 0.0f);
    }
  }
}

struct GdnCase {
  GdnDims d;
  std::int64_t t;
};

void gdn_inputs(Rng& rng, const GdnDims& d, std::int64_t t, std::int64_t qk_stride, Vec& q, Vec& k, Vec& v, Vec& g,
                Vec& beta, Vec& s0) {
  q = rng.uniform(t * qk_stride);
  k = rng.uniform(t * qk_stride);
  ops::ref::l2norm_rows(q.data(), t * d.hk, d.dk, d.dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(d.dk)));
  ops::ref::l2norm_rows(k.data(), t * d.hk, d.dk, d.dk, 1e-6f, 1.0f);
  v = rng.uniform(t * d.hv * d.dv, -2.0f, 2.0f);
  g = rng.uniform(t * d.hv, -3.0f, 0.0f);
  beta = rng.uniform(t * d.hv, 0.0f, 1.0f);
  s0 = rng.uniform(d.hv * d.dk * d.dv, -0.5f, 0.5f);
}

TEST_P(OpsAtLevel, GatedDeltaRuleChunkedVsRecurrent) {
  Rng rng(8);
  const GdnCase cases[] = {
      {{2, 4, 32, 32}, 1},  {{2, 4, 32, 32}, 17},  {{2, 4, 32, 32}, 64},   {{2, 4, 32, 32}, 65},
      {{1, 1, 17, 5}, 150}, {{2, 2, 16, 48}, 130}, {{1, 2, 128, 128}, 70},
  };
  for (const GdnCase& c : cases) {
    const GdnDims& d = c.d;
    const std::int64_t t = c.t, qk_stride = d.hk * d.dk;
    Vec q, k, v, g, beta, s0;
    gdn_inputs(rng, d, t, qk_stride, q, k, v, g, beta, s0);
    Vec sw = s0, sg = s0, sc = s0;
    Vec want(static_cast<std::size_t>(t * d.hv * d.dv)), got(want.size()), chk(want.size());
    ops::ref::gated_delta_rule(d, t, q.data(), k.data(), qk_stride, v.data(), d.hv * d.dv, g.data(), beta.data(),
                               sw.data(), want.data());
    ops::gated_delta_rule(d, t, q.data(), k.data(), qk_stride, v.data(), d.hv * d.dv, g.data(), beta.data(), sg.data(),
                          got.data());
    ops::ref::gated_delta_rule_chunked(d, t, 64, q.data(), k.data(), qk_stride, v.data(), d.hv * d.dv, g.data(),
                                       beta.data(), sc.data(), chk.data());
    const std::string sh = "Hk,Hv,dk,dv,T=" + dims({d.hk, d.hv, d.dk, d.dv, t});
    EXPECT_TRUE(close("gated_delta_rule(o)", sh, want, got, {2e-5, 1e-4}));
    EXPECT_TRUE(close("gated_delta_rule(state)", sh, sw, sg, {2e-5, 1e-4}));
    EXPECT_TRUE(close("ref::gated_delta_rule_chunked(o)", sh, want, chk, {2e-5, 1e-4}));
    EXPECT_TRUE(close("ref::gated_delta_rule_chunked(state)", sh, sw, sc, {2e-5, 1e-4}));
    // Split calls (carried state) equal one call.
    if (t >= 3) {
      const std::int64_t t1 = t / 3;
      Vec s2 = s0, split(want.size());
      ops::gated_delta_rule(d, t1, q.data(), k.data(), qk_stride, v.data(), d.hv * d.dv, g.data(), beta.data(),
                            s2.data(), split.data());
      ops::gated_delta_rule(d, t - t1, q.data() + t1 * qk_stride, k.data() + t1 * qk_stride, qk_stride,
                            v.data() + t1 * d.hv * d.dv, d.hv * d.dv, g.data() + t1 * d.hv, beta.data() + t1 * d.hv,
                            s2.data(), split.data() + t1 * d.hv * d.dv);
      EXPECT_TRUE(close("gated_delta_rule(split)", sh, want, split, {2e-5, 1e-4}));
    }
  }
}

TEST_P(OpsAtLevel, GatedDeltaRuleBf16VsRecurrent) {
  // The bf16 mode's delta rule against the fp32 recurrence. Every product operand carries one bf16
  // rounding (relative 2^-9); a product sums dk (or C) such terms into fp32, and V' feeds both the
  // output and the next chunk's state, so an element's error is a few times 2^-9 of the magnitudes
  // summed (|o| and |S| ~ 1 here): 1.5e-2 absolute + 1e-2 relative; measured max 3.1e-3 (the state after
  // 65 tokens, every level).
  // A wrong word layout or a dropped half moves elements by O(1).
  Rng rng(18);
  const GdnCase cases[] = {
      {{2, 4, 32, 32}, 1},   {{2, 4, 32, 32}, 65},    {{1, 1, 17, 5}, 150},
      {{2, 2, 16, 48}, 130}, {{1, 2, 128, 128}, 129}, {{1, 2, 20, 24}, 75},  // dk/2 = 10, C = 11: K's transpose edges
  };
  for (const GdnCase& c : cases) {
    const GdnDims& d = c.d;
    const std::int64_t t = c.t, qk_stride = d.hk * d.dk;
    Vec q, k, v, g, beta, s0;
    gdn_inputs(rng, d, t, qk_stride, q, k, v, g, beta, s0);
    Vec sw = s0, sg = s0;
    Vec want(static_cast<std::size_t>(t * d.hv * d.dv)), got(want.size());
    ops::ref::gated_delta_rule(d, t, q.data(), k.data(), qk_stride, v.data(), d.hv * d.dv, g.data(), beta.data(),
                               sw.data(), want.data());
    ops::gated_delta_rule_bf16(d, t, q.data(), k.data(), qk_stride, v.data(), d.hv * d.dv, g.data(), beta.data(),
                               sg.data(), got.data());
    const std::string sh = "Hk,Hv,dk,dv,T=" + dims({d.hk, d.hv, d.dk, d.dv, t});
    EXPECT_TRUE(close("gated_delta_rule_bf16(o)", sh, want, got, {1.5e-2, 1e-2}));
    EXPECT_TRUE(close("gated_delta_rule_bf16(state)", sh, sw, sg, {1.5e-2, 1e-2}));
    if (t >= 3) {  // split calls carry the state
      const std::int64_t t1 = t / 3;
      Vec s2 = s0, split(want.size());
      ops::gated_delta_rule_bf16(d, t1, q.data(), k.data(), qk_stride, v.data(), d.hv * d.dv, g.data(), beta.data(),
                                 s2.data(), split.data());
      ops::gated_delta_rule_bf16(d, t - t1, q.data() + t1 * qk_stride, k.data() + t1 * qk_stride, qk_stride,
                                 v.data() + t1 * d.hv * d.dv, d.hv * d.dv, g.data() + t1 * d.hv,
                                 beta.data() + t1 * d.hv, s2.data(), split.data() + t1 * d.hv * d.dv);
      EXPECT_TRUE(close("gated_delta_rule_bf16(split)", sh, want, split, {1.5e-2, 1e-2}));
    }
  }
}

TEST_P(OpsAtLevel, GatedDeltaRuleSameBitsOnAnyThreadCount) {
  // The chunked delta rule runs chunks outside and heads inside with no barrier between chunks: a
  // head's chunks must stay in order on one thread. Any thread count gives the 1-thread bits; Hv = 6
  // does not divide among 4 threads, T = 200 is four chunks (the last short). A head whose chunks
  // raced or ran out of order would carry another state into its next chunk.
  const GdnDims d{3, 6, 32, 24};
  Rng rng(19);
  const std::int64_t t = 200, st = d.hk * d.dk;
  Vec q, k, v, g, beta, s0;
  gdn_inputs(rng, d, t, st, q, k, v, g, beta, s0);
  const int threads = ops::num_threads();
  for (const bool bf16 : {false, true}) {
    const auto run = bf16 ? &ops::gated_delta_rule_bf16 : &ops::gated_delta_rule;
    Vec o1(static_cast<std::size_t>(t * d.hv * d.dv)), s1 = s0;
    omp_set_num_threads(1);
    run(d, t, q.data(), k.data(), st, v.data(), d.hv * d.dv, g.data(), beta.data(), s1.data(), o1.data());
    for (const int nt : {2, 3, 4}) {
      omp_set_num_threads(nt);  // more than the CPUs is fine: only the split is tested
      Vec o(o1.size()), s = s0;
      run(d, t, q.data(), k.data(), st, v.data(), d.hv * d.dv, g.data(), beta.data(), s.data(), o.data());
      EXPECT_TRUE(std::memcmp(o.data(), o1.data(), o.size() * sizeof(float)) == 0) << "bf16 " << bf16 << ", " << nt;
      EXPECT_TRUE(std::memcmp(s.data(), s1.data(), s.size() * sizeof(float)) == 0) << "bf16 " << bf16 << ", " << nt;
    }
  }
  omp_set_num_threads(threads);
}

TEST_P(OpsAtLevel, GatedDeltaRuleSplitAtChunkMultiplesIsOneCall) {
  // nn::GatedDeltaNet runs a sequence kGdnChunk rows at a time (the input stage, then the rule):
  // calls split at multiples of kGdnChunk, the state carried, must give one call's bits, state
  // included; T = 200 ends in a short chunk. A split elsewhere (t1 = 70) runs other chunks, so its
  // bits differ: the check can fail.
  const GdnDims d{2, 4, 32, 24};
  Rng rng(21);
  const std::int64_t t = 200, st = d.hk * d.dk, ld = d.hv * d.dv;
  Vec q, k, v, g, beta, s0;
  gdn_inputs(rng, d, t, st, q, k, v, g, beta, s0);
  for (const bool bf16 : {false, true}) {
    const auto run = bf16 ? &ops::gated_delta_rule_bf16 : &ops::gated_delta_rule;
    Vec o1(static_cast<std::size_t>(t * ld)), s1 = s0;
    run(d, t, q.data(), k.data(), st, v.data(), ld, g.data(), beta.data(), s1.data(), o1.data());
    auto split = [&](std::initializer_list<std::int64_t> lens, Vec& o, Vec& s) {
      std::int64_t r = 0;
      for (const std::int64_t n : lens) {
        run(d, n, q.data() + r * st, k.data() + r * st, st, v.data() + r * ld, ld, g.data() + r * d.hv,
            beta.data() + r * d.hv, s.data(), o.data() + r * ld);
        r += n;
      }
    };
    Vec o(o1.size()), s = s0;
    split({ops::kGdnChunk, 2 * ops::kGdnChunk, t - 3 * ops::kGdnChunk}, o, s);
    EXPECT_TRUE(std::memcmp(o.data(), o1.data(), o.size() * sizeof(float)) == 0) << "bf16 " << bf16;
    EXPECT_TRUE(std::memcmp(s.data(), s1.data(), s.size() * sizeof(float)) == 0) << "bf16 " << bf16;
    Vec o70(o1.size()), s70 = s0;
    split({70, t - 70}, o70, s70);
    EXPECT_FALSE(std::memcmp(o70.data(), o1.data(), o.size() * sizeof(float)) == 0) << "bf16 " << bf16;
  }
}

TEST_P(OpsAtLevel, GatedDeltaRuleGroupedHeadMapping) {
  // Value head h must read k-head h / (Hv/Hk) (grouped, pitfall 9): with Hk = 2, Hv = 4, zeroing
  // k-head 1 must leave v-heads 0,1 untouched and change only v-heads 2,3.
  const GdnDims d{2, 4, 8, 8};
  Rng rng(9);
  const std::int64_t t = 5, st = d.hk * d.dk;
  Vec q, k, v, g, beta, s0;
  gdn_inputs(rng, d, t, st, q, k, v, g, beta, s0);
  Vec a(static_cast<std::size_t>(t * d.hv * d.dv)), b(a.size());
  Vec sa(s0.size(), 0.0f), sb(s0.size(), 0.0f);
  ops::gated_delta_rule(d, t, q.data(), k.data(), st, v.data(), d.hv * d.dv, g.data(), beta.data(), sa.data(),
                        a.data());
  Vec k2 = k;
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t e = 0; e < d.dk; ++e) k2[static_cast<std::size_t>(i * st + d.dk + e)] *= -1.0f;
  }
  ops::gated_delta_rule(d, t, q.data(), k2.data(), st, v.data(), d.hv * d.dv, g.data(), beta.data(), sb.data(),
                        b.data());
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t h = 0; h < d.hv; ++h) {
      for (std::int64_t e = 0; e < d.dv; ++e) {
        const std::size_t j = static_cast<std::size_t>((i * d.hv + h) * d.dv + e);
        if (h < 2) {
          EXPECT_EQ(a[j], b[j]) << "v-head " << h;
        }
      }
    }
  }
  EXPECT_NE(a[static_cast<std::size_t>((1 * d.hv + 2) * d.dv)], b[static_cast<std::size_t>((1 * d.hv + 2) * d.dv)]);
}

TEST_P(OpsAtLevel, RopeTablesAndRotation) {
  // Interleaved section map of the real models (docs/MODEL.md §7.2):
  // H at 1,4,..,31, W at 2,5,..,29.
  RopeDims big;
  big.rotary_dim = 64;
  big.section[0] = 11;
  big.section[1] = 11;
  big.section[2] = 10;
  const std::vector<int> s = ops::rope_streams(big);
  for (int i = 0; i < 32; ++i) {
    const int want = (i % 3 == 1) ? 1 : (i % 3 == 2 && i < 30) ? 2 : 0;
    EXPECT_EQ(s[static_cast<std::size_t>(i)], want) << "frequency " << i;
  }
  RopeDims tiny;
  tiny.rotary_dim = 16;
  tiny.section[0] = 3;
  tiny.section[1] = 3;
  tiny.section[2] = 2;
  Rng rng(10);
  for (const RopeDims& r : {tiny, big}) {
    for (std::int64_t t : {1, 17, 70}) {
      std::vector<std::int32_t> pos(static_cast<std::size_t>(3 * t));
      for (auto& p : pos) p = rng.integer(0, 70000);
      const std::int64_t half = r.rotary_dim / 2;
      Vec cw(static_cast<std::size_t>(t * half)), sw(cw.size()), cg(cw.size()), sg(cw.size());
      ops::ref::rope_tables(r, pos.data(), t, cw.data(), sw.data());
      ops::rope_tables(r, pos.data(), t, cg.data(), sg.data());
      EXPECT_TRUE(close("rope_tables(cos)", dims({t, r.rotary_dim}), cw, cg, {0, 0}));
      EXPECT_TRUE(close("rope_tables(sin)", dims({t, r.rotary_dim}), sw, sg, {0, 0}));
      for (std::int64_t heads : {1, 3}) {
        for (std::int64_t hd : {r.rotary_dim, r.rotary_dim + 17}) {
          const std::int64_t stride = heads * hd + 5;
          const Vec x = rng.uniform(t * stride);
          Vec want = x, got = x;
          ops::ref::apply_rope(want.data(), t, heads, hd, stride, r.rotary_dim, cw.data(), sw.data());
          ops::apply_rope(got.data(), t, heads, hd, stride, r.rotary_dim, cw.data(), sw.data());
          EXPECT_TRUE(close("apply_rope", dims({t, heads, hd, r.rotary_dim}), want, got, {1e-7, 1e-6}));
        }
      }
    }
  }
  // Position 0 is the identity.
  std::vector<std::int32_t> zero(3, 0);
  Vec c(8), sn(8);
  ops::rope_tables(tiny, zero.data(), 1, c.data(), sn.data());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(c[static_cast<std::size_t>(i)], 1.0f);
    EXPECT_EQ(sn[static_cast<std::size_t>(i)], 0.0f);
  }
}

TEST_P(OpsAtLevel, AttentionBlockedVsReference) {
  // hd 256 with 4 query heads per kv head is the 0.8b model's; 129 queries span several query blocks.
  Rng rng(11);
  for (const AttentionDims& d :
       {AttentionDims{8, 2, 256}, AttentionDims{4, 2, 64}, AttentionDims{2, 1, 17}, AttentionDims{3, 3, 40}}) {
    for (std::int64_t t : {1, 7, 33, 70, 129}) {
      for (std::int64_t past : {0, 5, 64}) {
        const std::int64_t tk = t + past;
        const Vec q = rng.uniform(t * d.nh * d.hd, -2.0f, 2.0f);
        const Vec kc = rng.uniform(tk * d.nkv * d.hd, -2.0f, 2.0f);
        const Vec vc = rng.uniform(tk * d.nkv * d.hd, -2.0f, 2.0f);
        Vec want(q.size()), got(q.size());
        ops::ref::attention(d, t, tk, q.data(), kc.data(), vc.data(), want.data());
        ops::attention(d, t, tk, q.data(), kc.data(), vc.data(), got.data());
        EXPECT_TRUE(close("attention", "nh,nkv,hd,T,Tk=" + dims({d.nh, d.nkv, d.hd, t, tk}), want, got, {2e-6, 2e-5}));
      }
    }
  }
}

/// A warm request's shape, scaled down: 80 queries of 8 heads per kv head (640 columns) over 720 keys
/// (>= 8 keys per query): one work item per kv head at the 512-bit levels (the widest items of
/// ops/cpu/attention.cc), query blocks at the others.
constexpr AttentionDims kWarmDims{16, 2, 32};
constexpr std::int64_t kWarmT = 80, kWarmTk = 720;

TEST_P(OpsAtLevel, AttentionWarmShapeVsReference) {
  const int threads = ops::num_threads();
  ops::set_num_threads(2);  // no more threads than kv heads: the one-item-per-kv-head path
  Rng rng(12);
  const AttentionDims d = kWarmDims;
  const Vec q = rng.uniform(kWarmT * d.nh * d.hd, -2.0f, 2.0f);
  const Vec kc = rng.uniform(kWarmTk * d.nkv * d.hd, -2.0f, 2.0f),
            vc = rng.uniform(kWarmTk * d.nkv * d.hd, -2.0f, 2.0f);
  Vec want(q.size()), got(q.size());
  ops::ref::attention(d, kWarmT, kWarmTk, q.data(), kc.data(), vc.data(), want.data());
  ops::attention(d, kWarmT, kWarmTk, q.data(), kc.data(), vc.data(), got.data());
  EXPECT_TRUE(close("attention", "warm shape", want, got, {2e-6, 2e-5}));
  // bf16 (q, k rounded as the kernel does; v and the probabilities at the bf16 tolerance below).
  Vec qr = q, kr = kc;
  for (float& x : qr) x = bf16_to_f32(f32_to_bf16(x));
  for (float& x : kr) x = bf16_to_f32(f32_to_bf16(x));
  ops::ref::attention(d, kWarmT, kWarmTk, qr.data(), kr.data(), vc.data(), want.data());
  ops::attention_bf16(d, kWarmT, kWarmTk, qr.data(), kr.data(), vc.data(), got.data());
  EXPECT_TRUE(close("attention_bf16", "warm shape", want, got, {1.5e-2, 1e-2}));
  ops::set_num_threads(threads);
}

TEST(Ops, ThreadCountIsCappedAtTheMachine) {
  // An oversized --threads must not oversubscribe the spinning OpenMP pool.
  const int before = ops::num_threads();
  EXPECT_EQ(ops::set_num_threads(1 << 20), ops::hardware_threads());
  EXPECT_EQ(ops::num_threads(), ops::hardware_threads());
  EXPECT_EQ(ops::set_num_threads(1), 1);
  ops::set_num_threads(before);
}

TEST_P(OpsAtLevel, AttentionBf16VsReference) {
  // bf16 path: q, k, v and the probabilities are rounded to bf16 (fp32 accumulation), so compare
  // with the reference on bf16-rounded q/k/v at a bf16-sized tolerance; odd hd falls back to fp32.
  Rng rng(13);
  auto round_bf16 = [](Vec v) {
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
  };
  for (const AttentionDims& d :
       {AttentionDims{8, 2, 256}, AttentionDims{4, 2, 64}, AttentionDims{2, 1, 17}, AttentionDims{3, 3, 40}}) {
    for (std::int64_t t : {1, 7, 33, 70, 129}) {
      for (std::int64_t past : {0, 5, 64}) {
        const std::int64_t tk = t + past;
        const Vec q = round_bf16(rng.uniform(t * d.nh * d.hd, -2.0f, 2.0f));
        const Vec kc = round_bf16(rng.uniform(tk * d.nkv * d.hd, -2.0f, 2.0f));
        const Vec vc = rng.uniform(tk * d.nkv * d.hd);
        Vec want(q.size()), got(q.size());
        ops::ref::attention(d, t, tk, q.data(), kc.data(), vc.data(), want.data());
        ops::attention_bf16(d, t, tk, q.data(), kc.data(), vc.data(), got.data());
        EXPECT_TRUE(
            close("attention_bf16", "nh,nkv,hd,T,Tk=" + dims({d.nh, d.nkv, d.hd, t, tk}), want, got, {1.5e-2, 1e-2}));
      }
    }
  }
}

TEST_P(OpsAtLevel, AttentionBf16RoundsScaledQueriesAsF32ToBf16) {
  // The bf16 path rounds q x hd^-0.5 by f32_to_bf16 at every level, subnormals included: a scaled
  // query just below the smallest normal (0x007FC000) rounds up to it (0x00800000), where
  // vcvtneps2bf16 would flush it to zero. With keys of +-1e38 the scores are then +-4.7, not 0, so the
  // answer is the reference's on the rounded query (0x01000000 scales exactly to 0x00800000).
  const AttentionDims d{1, 1, 4};
  const Vec q(4, std::bit_cast<float>(0x00FFC000u)), q_rounded(4, std::bit_cast<float>(0x01000000u));
  const Vec kc = {1e38f, 1e38f, 1e38f, 1e38f, -1e38f, -1e38f, -1e38f, -1e38f, 0, 0, 0, 0};
  const Vec vc = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  Vec kr = kc;
  for (float& x : kr) x = bf16_to_f32(f32_to_bf16(x));
  Vec want(4), got(4);
  ops::ref::attention(d, 1, 3, q_rounded.data(), kr.data(), vc.data(), want.data());
  ops::attention_bf16(d, 1, 3, q.data(), kc.data(), vc.data(), got.data());
  ASSERT_GT(want[0], 0.98f);  // the scores are +-4.7: not a uniform answer
  EXPECT_TRUE(close("attention_bf16 (subnormal scaled queries)", "nh,nkv,hd,T,Tk=1,1,4,1,3", want, got, {1e-2, 1e-2}));
}

TEST_P(OpsAtLevel, KvBf16StoreInAnySplitIsOneStore) {
  // The bf16 KV cache layouts (ops.h): appends of odd and even sizes give the words of one store,
  // every half is f32_to_bf16 of its element, and the unused half of an odd tail is zero.
  Rng rng(21);
  const std::int64_t w = 2 * 6, rows = 37;
  const Vec k = rng.uniform(rows * w, -3.0f, 3.0f), v = rng.uniform(rows * w, -3.0f, 3.0f);
  const auto words = [&](std::int64_t n) {
    return std::pair{std::vector<std::uint32_t>(static_cast<std::size_t>(n * w / 2)),
                     std::vector<std::uint32_t>(static_cast<std::size_t>((n + 1) / 2 * w))};
  };
  auto [k1, v1] = words(rows);
  ops::kv_bf16_store(k.data(), v.data(), 0, rows, w, k1.data(), v1.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < w; ++c) {
      const auto at = static_cast<std::size_t>(r * w + c);
      const std::uint32_t kword = k1[static_cast<std::size_t>(r * w / 2 + c / 2)];
      const std::uint32_t vword = v1[static_cast<std::size_t>(r / 2 * w + c)];
      ASSERT_EQ(c % 2 == 0 ? kword & 0xFFFFu : kword >> 16, f32_to_bf16(k[at])) << r << "," << c;
      ASSERT_EQ(r % 2 == 0 ? vword & 0xFFFFu : vword >> 16, f32_to_bf16(v[at])) << r << "," << c;
    }
  }
  for (std::int64_t c = 0; c < w; ++c) ASSERT_EQ(v1[static_cast<std::size_t>(rows / 2 * w + c)] >> 16, 0u) << c;
  auto [k2, v2] = words(rows);
  std::int64_t r0 = 0;
  for (const std::int64_t n : {1, 2, 5, 3, 8, 1, 17}) {
    ops::kv_bf16_store(k.data() + r0 * w, v.data() + r0 * w, r0, n, w, k2.data(), v2.data());
    r0 += n;
  }
  ASSERT_EQ(r0, rows);
  EXPECT_EQ(k1, k2);
  EXPECT_EQ(v1, v2);
}

TEST_P(OpsAtLevel, AttentionBf16KvIsAttentionBf16BitForBit) {
  // The cached form reads the rows rounded at append time; the result must be the fp32-row
  // form's bit for bit (which AttentionBf16VsReference checks against the oracle).
  Rng rng(22);
  for (const AttentionDims& d : {AttentionDims{8, 2, 256}, AttentionDims{4, 2, 64}, AttentionDims{3, 3, 40}}) {
    for (const auto& [t, past] : {std::pair<std::int64_t, std::int64_t>{1, 0}, {7, 64}, {70, 5}, {129, 131}}) {
      const std::int64_t tk = t + past, w = d.nkv * d.hd;
      const Vec q = rng.uniform(t * d.nh * d.hd, -2.0f, 2.0f);
      const Vec kc = rng.uniform(tk * w, -2.0f, 2.0f), vc = rng.uniform(tk * w);
      std::vector<std::uint32_t> kp(static_cast<std::size_t>(tk * w / 2)),
          vp(static_cast<std::size_t>((tk + 1) / 2 * w));
      ops::kv_bf16_store(kc.data(), vc.data(), 0, past, w, kp.data(), vp.data());
      ops::kv_bf16_store(kc.data() + past * w, vc.data() + past * w, past, t, w, kp.data(), vp.data());
      Vec want(q.size()), got(q.size());
      ops::attention_bf16(d, t, tk, q.data(), kc.data(), vc.data(), want.data());
      ops::attention_bf16_kv(d, t, tk, q.data(), kp.data(), vp.data(), got.data());
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(want[i]), std::bit_cast<std::uint32_t>(got[i]))
            << "nh,nkv,hd,T,Tk=" << dims({d.nh, d.nkv, d.hd, t, tk}) << " at " << i;
      }
    }
  }
  const AttentionDims odd{2, 1, 17};
  EXPECT_THROW(ops::attention_bf16_kv(odd, 1, 1, nullptr, nullptr, nullptr, nullptr), InvalidArgument);
}

TEST_P(OpsAtLevel, AttentionIsCausalByIndex) {
  // Changing a future key/value must not change earlier outputs.
  const AttentionDims d{2, 1, 16};
  Rng rng(12);
  const std::int64_t t = 40;
  const Vec q = rng.uniform(t * d.nh * d.hd);
  Vec kc = rng.uniform(t * d.hd), vc = rng.uniform(t * d.hd);
  Vec a(q.size()), b(q.size());
  ops::attention(d, t, t, q.data(), kc.data(), vc.data(), a.data());
  for (std::int64_t e = 0; e < d.hd; ++e) {
    kc[static_cast<std::size_t>(30 * d.hd + e)] = 9.0f;
    vc[static_cast<std::size_t>(30 * d.hd + e)] = -9.0f;
  }
  ops::attention(d, t, t, q.data(), kc.data(), vc.data(), b.data());
  for (std::size_t i = 0; i < static_cast<std::size_t>(30 * d.nh * d.hd); ++i) ASSERT_EQ(a[i], b[i]) << i;
  EXPECT_NE(a[static_cast<std::size_t>(35 * d.nh * d.hd)], b[static_cast<std::size_t>(35 * d.nh * d.hd)]);
}

std::vector<std::byte> encode(DType dt, const Vec& v) {
  std::vector<std::byte> out(v.size() * dtype_size(dt));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::kF32) std::memcpy(out.data() + 4 * i, &v[i], 4);
    if (dt == DType::kBF16) {
      const std::uint16_t b = f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
    if (dt == DType::kF16) {
      const std::uint16_t b = f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

TEST(Ops, LinearAllDtypesAndPrecisions) {
  Rng rng(13);
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (std::int64_t m : {1, 17, 64}) {
        for (std::int64_t n : {1, 17, 48}) {
          for (std::int64_t k : {1, 17, 100}) {
            const Vec x = rng.uniform(m * k), wf = rng.uniform(n * k);
            const std::vector<std::byte> w = encode(dt, wf);
            const ops::GemmWeight gw(dt, w.data(), n, k, p);
            for (bool acc : {false, true}) {
              Vec want = rng.uniform(m * n), got = want;
              ops::ref::linear(x.data(), m, dt, w.data(), n, k, want.data(), acc, p);
              ops::linear(x.data(), m, gw, got.data(), acc);
              const double tol = 2e-6 * std::sqrt(static_cast<double>(k));
              EXPECT_TRUE(close(std::string("linear ") + ops::precision_name(p) + " W=" + std::string(dtype_name(dt)) +
                                    (acc ? " accumulate" : ""),
                                "m,n,k=" + dims({m, n, k}), want, got, {tol, 1e-5}));
            }
          }
        }
      }
    }
  }
}

/// Row r of x [m, k] times row j of W [n, k] (bf16 bits) in double: the exact sum of the products (each
/// exact) and the sum of their magnitudes, for the bf16 GEMMs' error bounds.
std::pair<double, double> exact_bf16_dot(const std::vector<std::uint16_t>& xb, const std::vector<std::uint16_t>& wb,
                                         std::int64_t r, std::int64_t j, std::int64_t k) {
  double exact = 0, mag = 0;
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const double p = static_cast<double>(bf16_to_f32(xb[static_cast<std::size_t>(r * k + kk)])) *
                     static_cast<double>(bf16_to_f32(wb[static_cast<std::size_t>(j * k + kk)]));
    exact += p;
    mag += std::fabs(p);
  }
  return {exact, mag};
}

#if defined(__aarch64__)
// The BFMMLA kernel against its error bound (ops/cpu/bf16_gemm_arm.h): products of bf16 values
// exact, at most k additions rounded to odd (2^-23 relative each), so |y - exact| <=
// k * 2^-23 * sum |x w|; one more fp32 rounding (2^-24) when adding to y. Exact = double sums of the
// same bf16 values. Shapes cover every tile tail (row pairs 1-3, odd rows, 1-17 columns of a panel)
// and k not a multiple of 4.
TEST(Bf16Bfmmla, WithinItsErrorBound) {
  if (!ops::cpu::bfmmla_gemm_available()) GTEST_SKIP() << "no FEAT_BF16 at level " << ops::isa_name(ops::active_isa());
  Rng rng(21);
  for (std::int64_t m : {1, 2, 3, 5, 6, 7, 13, 40}) {
    for (std::int64_t n : {1, 15, 16, 17, 33}) {
      for (std::int64_t k : {1, 3, 4, 5, 64, 100}) {
        const Vec xf = rng.uniform(m * k, -2.0f, 2.0f), wf = rng.uniform(n * k, -2.0f, 2.0f);
        const std::vector<std::uint16_t> xb = bf16_words(xf), wb = bf16_words(wf);
        for (bool acc : {false, true}) {
          const Vec y0 = rng.uniform(m * n);
          Vec got = y0;
          ops::cpu::bfmmla_gemm(m, n, k, xb.data(), wb.data(), got.data(), acc);
          for (std::int64_t r = 0; r < m; ++r) {
            for (std::int64_t j = 0; j < n; ++j) {
              const auto [exact, mag] = exact_bf16_dot(xb, wb, r, j, k);
              const auto at = static_cast<std::size_t>(r * n + j);
              const double want = acc ? static_cast<double>(y0[at]) + exact : exact;
              const double bound =
                  static_cast<double>(k) * 0x1p-23 * mag * (1 + 1e-6) + (acc ? 0x1p-24 * (std::fabs(want) + mag) : 0.0);
              ASSERT_LE(std::fabs(static_cast<double>(got[at]) - want), bound)
                  << "m,n,k=" << dims({m, n, k}) << " acc=" << acc << " r=" << r << " j=" << j;
            }
          }
        }
      }
    }
  }
}
#else
/// bf16 bits of uniform values in [-2, 2] (normal values: no flush in the products or sums).
std::vector<std::uint16_t> random_bf16(Rng& rng, std::int64_t count) {
  return bf16_words(rng.uniform(count, -2.0f, 2.0f));
}

// The vdpbf16ps kernel (ops/cpu/bf16_gemm_x86.h) gives its scalar oracle's bits, which follow the
// instruction's specification (two FMAs per pair, odd element first, lanes summed in a fixed
// tree). Shapes cover every tile tail (1-4 rows, 1-6 columns), k not a multiple of 32 or odd, and
// more rows than one 192-row block.
TEST(Bf16Dpbf16, BitIdenticalToItsScalarOracle) {
  if (!ops::cpu::dpbf16_gemm_available())
    GTEST_SKIP() << "no AVX512-BF16 at level " << ops::isa_name(ops::active_isa());
  Rng rng(22);
  for (std::int64_t m : {1, 2, 3, 4, 5, 7, 197}) {
    for (std::int64_t n : {1, 5, 6, 7, 13}) {
      for (std::int64_t k : {1, 2, 31, 32, 33, 100}) {
        const std::vector<std::uint16_t> xb = random_bf16(rng, m * k), wb = random_bf16(rng, n * k);
        for (bool acc : {false, true}) {
          const Vec y0 = rng.uniform(m * n);
          Vec got = y0, want = y0;
          ops::cpu::dpbf16_gemm(m, n, k, xb.data(), wb.data(), got.data(), acc);
          ops::cpu::dpbf16_gemm_reference(m, n, k, xb.data(), wb.data(), want.data(), acc);
          for (std::size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
                << "m,n,k=" << dims({m, n, k}) << " acc=" << acc << " at " << i << ": " << got[i] << " vs " << want[i];
          }
        }
      }
    }
  }
}

// The oracle itself against the exact sum (double) of the same bf16 products: k + 16 roundings of
// at most 2^-24 relative (header comment), one more when adding to y.
TEST(Bf16Dpbf16, OracleWithinItsErrorBound) {
  Rng rng(23);
  for (std::int64_t k : {1, 33, 1000}) {
    const std::int64_t m = 3, n = 5;
    const std::vector<std::uint16_t> xb = random_bf16(rng, m * k), wb = random_bf16(rng, n * k);
    for (bool acc : {false, true}) {
      const Vec y0 = rng.uniform(m * n);
      Vec got = y0;
      ops::cpu::dpbf16_gemm_reference(m, n, k, xb.data(), wb.data(), got.data(), acc);
      for (std::int64_t r = 0; r < m; ++r) {
        for (std::int64_t j = 0; j < n; ++j) {
          const auto [exact, mag] = exact_bf16_dot(xb, wb, r, j, k);
          const auto at = static_cast<std::size_t>(r * n + j);
          const double want = acc ? static_cast<double>(y0[at]) + exact : exact;
          const double bound = static_cast<double>(k + 16) * 0x1p-24 * mag * (1 + 1e-6) +
                               (acc ? 0x1p-24 * (std::fabs(want) + mag) : 0.0);
          ASSERT_LE(std::fabs(static_cast<double>(got[at]) - want), bound) << "k=" << k << " r=" << r << " j=" << j;
        }
      }
    }
  }
}

// What continuous batching needs: a row's bits do not depend on the other rows of the call (how
// many there are, where the row sits among them) nor on the thread count.
TEST(Bf16Dpbf16, ARowsBitsDoNotDependOnTheOtherRows) {
  if (!ops::cpu::dpbf16_gemm_available())
    GTEST_SKIP() << "no AVX512-BF16 at level " << ops::isa_name(ops::active_isa());
  Rng rng(24);
  const std::int64_t m = 301, n = 70, k = 96;
  const std::vector<std::uint16_t> xb = random_bf16(rng, m * k), wb = random_bf16(rng, n * k);
  Vec all(static_cast<std::size_t>(m * n));
  ops::cpu::dpbf16_gemm(m, n, k, xb.data(), wb.data(), all.data(), false);
  const int threads = ops::num_threads();
  for (int t : {1, threads}) {
    ops::set_num_threads(t);
    for (const auto& [r0, rows] :
         std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}, {5, 1}, {7, 37}, {190, 9}, {300, 1}}) {
      Vec part(static_cast<std::size_t>(rows * n));
      ops::cpu::dpbf16_gemm(rows, n, k, xb.data() + r0 * k, wb.data(), part.data(), false);
      for (std::int64_t i = 0; i < rows * n; ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(part[static_cast<std::size_t>(i)]),
                  std::bit_cast<std::uint32_t>(all[static_cast<std::size_t>(r0 * n + i)]))
            << "rows [" << r0 << ", " << r0 + rows << ") on " << t << " threads, element " << i;
      }
    }
  }
  ops::set_num_threads(threads);
}

/// n·k weight values of `t` (F32, BF16, F16) from uniform fp32 values in [-2, 2], as raw bytes.
std::vector<std::byte> random_weights(Rng& rng, DType t, std::int64_t count) {
  const Vec f = rng.uniform(count, -2.0f, 2.0f);
  std::vector<std::byte> out(static_cast<std::size_t>(count) * dtype_size(t));
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (t == DType::kF32) {
      std::memcpy(out.data() + 4 * i, &f[i], 4);
    } else {
      const std::uint16_t b = t == DType::kBF16 ? f32_to_bf16(f[i]) : f32_to_f16(f[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}

// The AVX2 FMA kernel (ops/cpu/fma_gemm_x86.h) gives its scalar oracle's bits (an fma chain per
// 256-k block, the block sums added in order) for every weight dtype it packs. Shapes cover the 6 x 16 tile's row and
// column tails, k inside one 256 block, across blocks and with a tail, and (last case) more rows than one 144-row block
// and more columns than one 1024-column block.
class FmaGemm : public test::AtIsaLevel {
 protected:
  void SetUp() override {
    test::AtIsaLevel::SetUp();
    if (!IsSkipped() && !ops::cpu::fma_gemm_available())
      GTEST_SKIP() << "the FMA GEMM is the avx2 level's, not " << ops::isa_name(GetParam()) << "'s";
  }
};
CLEF_INSTANTIATE_AT_ISA_LEVELS(FmaGemm);

TEST_P(FmaGemm, BitIdenticalToItsScalarOracle) {
  Rng rng(25);
  std::vector<std::array<std::int64_t, 3>> shapes;
  for (std::int64_t m : {1, 5, 6, 7, 13})
    for (std::int64_t n : {1, 7, 16, 17, 33})
      for (std::int64_t k : {1, 9, 257}) shapes.push_back({m, n, k});
  shapes.push_back({151, 1040, 300});
  for (const DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const auto& [m, n, k] : shapes) {
      if (m * n * k > 100000 && t != DType::kBF16) continue;  // the large case once
      Vec x = rng.uniform(m * k, -2.0f, 2.0f);
      x[0] = std::numeric_limits<float>::quiet_NaN();       // rounded to bf16 as f32_to_bf16 does
      x[x.size() - 1] = std::bit_cast<float>(0x3f808000u);  // a tie: rounds to even (down)
      const std::vector<std::byte> w = random_weights(rng, t, n * k);
      for (bool acc : {false, true}) {
        for (bool x_bf16 : {false, true}) {
          if (x_bf16 && t != DType::kBF16) continue;  // bf16 mode: bf16 values times bf16 weights
          const Vec y0 = rng.uniform(m * n);
          Vec got = y0, want = y0;
          ops::cpu::fma_gemm(m, n, k, x.data(), x_bf16, t, w.data(), got.data(), acc);
          ops::cpu::fma_gemm_reference(m, n, k, x.data(), x_bf16, t, w.data(), want.data(), acc);
          for (std::size_t i = 0; i < got.size(); ++i) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
                << dtype_name(t) << " m,n,k=" << dims({m, n, k}) << " acc=" << acc << " x_bf16=" << x_bf16 << " at "
                << i << ": " << got[i] << " vs " << want[i];
          }
        }
      }
    }
  }
}

// One shared call (x packed once, the weights' column panels split over the threads together) gives
// every weight the oracle's bits for it alone: weights of each dtype, wide and one-panel; on 1, 2 and
// 3 threads, so that a thread's panel range starts at a weight's first panel (2) and inside one (3), and
// weights with fewer panels than threads take the row-tile path alone ({13} on 2) and together ({5, 3}
// on 3); m over one slab (two, the second not a multiple of 6 rows), with and without accumulation, x
// with a rounding tie and (second pass) a NaN inside the packed 8 x 8 groups.
TEST_P(FmaGemm, SharedCallGivesEveryWeightItsOwnBits) {
  Rng rng(28);
  const std::int64_t m = 1160, k = 40;
  Vec x = rng.uniform(m * k, -2.0f, 2.0f);
  x[static_cast<std::size_t>(3 * k + 11)] = std::bit_cast<float>(0x3f808000u);  // a tie: rounds to even (down)
  const DType types[] = {DType::kBF16, DType::kF32, DType::kF16, DType::kBF16};
  const int threads = ops::num_threads();
  for (const int nt : {1, 2, 3}) {
    omp_set_num_threads(nt);  // 3 may be more than the CPUs: only the split is tested
    for (const std::vector<std::int64_t>& ns : {std::vector<std::int64_t>{40, 1, 17, 16}, {13}, {5, 3}}) {
      for (bool x_bf16 : {false, true}) {
        std::vector<std::vector<std::byte>> ws;
        std::vector<Vec> got, want;
        std::vector<ops::cpu::FmaGemmOut> outs;
        for (std::size_t i = 0; i < ns.size(); ++i) {
          ws.push_back(random_weights(rng, types[i], ns[i] * k));
          want.push_back(rng.uniform(m * ns[i]));
          got.push_back(want.back());
          ops::cpu::fma_gemm_reference(m, ns[i], k, x.data(), x_bf16, types[i], ws[i].data(), want[i].data(),
                                       i % 2 == 1);
          outs.push_back({types[i], ws[i].data(), ns[i], got[i].data(), i % 2 == 1});
        }
        ops::cpu::fma_gemm_shared(m, k, x.data(), x_bf16, outs);
        for (std::size_t i = 0; i < ns.size(); ++i) {
          for (std::size_t e = 0; e < got[i].size(); ++e) {
            ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i][e]), std::bit_cast<std::uint32_t>(want[i][e]))
                << "weight " << i << " of " << ns.size() << " (n = " << ns[i] << ") on " << nt
                << " threads, x_bf16=" << x_bf16 << " at " << e;
          }
        }
      }
    }
    x[static_cast<std::size_t>(700 * k + 21)] = std::numeric_limits<float>::quiet_NaN();  // from the second pass on
  }
  ops::set_num_threads(threads);
  Vec y(static_cast<std::size_t>(m * 20));
  const std::vector<std::byte> w = random_weights(rng, DType::kF32, 16 * k);
  const ops::cpu::FmaGemmOut overlapping[] = {{DType::kF32, w.data(), 16, y.data(), false},
                                              {DType::kF32, w.data(), 4, y.data() + 16, false}};
  EXPECT_THROW(ops::cpu::fma_gemm_shared(m, k, x.data(), false, overlapping), InvalidArgument);
}

// The oracle against the exact (double) sum of the same products: at most 256 roundings inside a
// 256-k block and one per block after it, of at most 2^-24 relative, bounded by |y0| + sum |x w|
// (header comment).
TEST(FmaGemmOracle, WithinItsErrorBound) {
  Rng rng(26);
  for (std::int64_t k : {1, 33, 3000}) {
    const std::int64_t m = 3, n = 4;
    const Vec x = rng.uniform(m * k, -2.0f, 2.0f);
    const std::vector<std::byte> w = random_weights(rng, DType::kBF16, n * k);
    for (bool acc : {false, true}) {
      const Vec y0 = rng.uniform(m * n);
      Vec got = y0;
      ops::cpu::fma_gemm_reference(m, n, k, x.data(), false, DType::kBF16, w.data(), got.data(), acc);
      for (std::int64_t r = 0; r < m; ++r) {
        for (std::int64_t j = 0; j < n; ++j) {
          double exact = 0, mag = 0;
          for (std::int64_t i = 0; i < k; ++i) {
            std::uint16_t b;
            std::memcpy(&b, w.data() + 2 * (j * k + i), 2);
            const double p =
                static_cast<double>(x[static_cast<std::size_t>(r * k + i)]) * static_cast<double>(bf16_to_f32(b));
            exact += p;
            mag += std::fabs(p);
          }
          const auto at = static_cast<std::size_t>(r * n + j);
          const double y = acc ? static_cast<double>(y0[at]) : 0.0;
          const double roundings = static_cast<double>(std::min<std::int64_t>(k, 256) + (k + 255) / 256);
          const double bound = roundings * 0x1p-24 * (std::fabs(y) + mag) * (1 + 1e-6);
          ASSERT_LE(std::fabs(static_cast<double>(got[at]) - (y + exact)), bound) << "k=" << k << " r=" << r;
        }
      }
    }
  }
}

// A row's bits do not depend on the other rows of the call nor on the thread count (the fixed
// chain), so the AVX2 level's fp32 and bf16 linear layers are row-independent too.
TEST_P(FmaGemm, ARowsBitsDoNotDependOnTheOtherRows) {
  Rng rng(27);
  const std::int64_t m = 301, n = 70, k = 300;
  const Vec x = rng.uniform(m * k, -2.0f, 2.0f);
  const std::vector<std::byte> w = random_weights(rng, DType::kF32, n * k);
  Vec all(static_cast<std::size_t>(m * n));
  ops::cpu::fma_gemm(m, n, k, x.data(), false, DType::kF32, w.data(), all.data(), false);
  const int threads = ops::num_threads();
  for (int t : {1, threads}) {
    ops::set_num_threads(t);
    for (const auto& [r0, rows] :
         std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1}, {5, 1}, {7, 37}, {140, 9}, {300, 1}}) {
      Vec part(static_cast<std::size_t>(rows * n));
      ops::cpu::fma_gemm(rows, n, k, x.data() + r0 * k, false, DType::kF32, w.data(), part.data(), false);
      for (std::int64_t i = 0; i < rows * n; ++i) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(part[static_cast<std::size_t>(i)]),
                  std::bit_cast<std::uint32_t>(all[static_cast<std::size_t>(r0 * n + i)]))
            << "rows [" << r0 << ", " << r0 + rows << ") on " << t << " threads, element " << i;
      }
    }
  }
  ops::set_num_threads(threads);
}
#endif

TEST(Ops, LinearSharedIsOneLinearPerOutputBitForBit) {
  // Several weights reading one x (fp32, bf16 and int8 precisions, mixed in one group, with and
  // without accumulation): the same bits as a linear() call per output; each linear() precision
  // has its own reference test above (int8: test_int8_gemm.cc).
  Rng rng(15);
  for (std::int64_t m : {1, 9, 64}) {
    for (std::int64_t k : {17, 96}) {
      const Vec x = rng.uniform(m * k, -2.0f, 2.0f);
      std::vector<std::vector<std::byte>> store;
      std::vector<ops::GemmWeight> ws;
      const std::int64_t ns[] = {33, 5, 48, 16, 40};
      const Precision ps[] = {Precision::kBF16, Precision::kInt8, Precision::kF32, Precision::kInt8, Precision::kBF16};
      for (int i = 0; i < 5; ++i) store.push_back(encode(DType::kBF16, rng.uniform(ns[i] * k)));
      for (int i = 0; i < 5; ++i)
        ws.emplace_back(DType::kBF16, store[static_cast<std::size_t>(i)].data(), ns[i], k, ps[i]);
      std::vector<Vec> want, got;
      std::vector<ops::LinearOut> outs;
      for (int i = 0; i < 5; ++i) {
        want.push_back(rng.uniform(m * ns[i]));
        got.push_back(want.back());
      }
      for (int i = 0; i < 5; ++i) {
        const bool acc = i % 2 == 1;
        ops::linear(x.data(), m, ws[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)].data(), acc);
        outs.push_back({&ws[static_cast<std::size_t>(i)], got[static_cast<std::size_t>(i)].data(), acc});
      }
      ops::linear_shared(x.data(), m, outs);
      for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(close(std::string("linear_shared ") + ops::precision_name(ps[i]), "m,n,k=" + dims({m, ns[i], k}),
                          want[static_cast<std::size_t>(i)], got[static_cast<std::size_t>(i)], {0, 0}));
      }
    }
  }
  const Vec x(12, 1.0f);
  const std::vector<std::byte> w1 = encode(DType::kBF16, Vec(12, 0.5f)), w2 = encode(DType::kBF16, Vec(8, 0.5f));
  const ops::GemmWeight a(DType::kBF16, w1.data(), 2, 6, Precision::kBF16),
      b(DType::kBF16, w2.data(), 2, 4, Precision::kBF16);
  Vec ya(4), yb(4);
  const ops::LinearOut mixed[] = {{&a, ya.data()}, {&b, yb.data()}};
  EXPECT_THROW(ops::linear_shared(x.data(), 2, mixed), InvalidArgument);  // k = 6 and k = 4
  Vec y2(6);                                                              // y [2, 2] at y2 and y2 + 2 share a row
  const ops::LinearOut overlapping[] = {{&a, y2.data()}, {&a, y2.data() + 2}};
  EXPECT_THROW(ops::linear_shared(x.data(), 2, overlapping), InvalidArgument);
}

// Two engines in one process (two Python Models, an engine per NUMA node) run GEMMs from different
// threads at the same time: every caller gets the bits it gets alone, for every precision, with the
// same shape at once (one cached library primitive executed concurrently) and different shapes.
TEST(Ops, LinearFromConcurrentThreadsEqualsSolo) {
  Rng rng(31);
  constexpr std::int64_t kK = 512;
  const std::int64_t ms[] = {96, 96, 40};  // two callers share a shape, the third differs
  const Precision ps[] = {Precision::kF32, Precision::kBF16, Precision::kInt8};
  const std::vector<std::byte> wb = encode(DType::kBF16, rng.uniform(384 * kK));
  for (const Precision p : ps) {
    const ops::GemmWeight w(DType::kBF16, wb.data(), 384, kK, p);
    std::vector<Vec> xs, want;
    for (const std::int64_t m : ms) {
      xs.push_back(rng.uniform(m * kK, -2.0f, 2.0f));
      want.emplace_back(static_cast<std::size_t>(m * 384));
      ops::linear(xs.back().data(), m, w, want.back().data());
    }
    std::vector<int> mismatches(std::size(ms), 0);
    std::vector<std::thread> callers;
    for (std::size_t c = 0; c < std::size(ms); ++c) {
      callers.emplace_back([&, c] {
        Vec y(want[c].size());
        for (int round = 0; round < 12; ++round) {
          ops::linear(xs[c].data(), ms[c], w, y.data());
          if (std::memcmp(y.data(), want[c].data(), y.size() * sizeof(float)) != 0) ++mismatches[c];
        }
      });
    }
    for (std::thread& t : callers) t.join();
    for (std::size_t c = 0; c < std::size(ms); ++c)
      EXPECT_EQ(mismatches[c], 0) << ops::precision_name(p) << " caller " << c << " (m = " << ms[c] << ")";
  }
}

// fp32 mode on a bf16 checkpoint: resident fp32 copies and per-call widening (in 2 MiB panels) are
// the same exact weights through the same fp32 matmul; outputs within fp32 summation-order error
// (the panel GEMMs have fewer columns, which the library may block differently).
TEST(Ops, LinearResidentFp32WeightsMatchStreamed) {
  Rng rng(77);
  for (const auto& [m, n, k] :
       std::vector<std::array<std::int64_t, 3>>{{5, 1040, 1024}, {64, 3, 17}, {33, 700, 3000}}) {
    const Vec wf = rng.uniform(n * k), x = rng.uniform(m * k);
    const std::vector<std::uint16_t> wb = bf16_words(wf);
    ops::set_fp32_resident_weights(false);
    const ops::GemmWeight streamed(DType::kBF16, wb.data(), n, k, Precision::kF32);
    ops::set_fp32_resident_weights(true);
    const ops::GemmWeight resident(DType::kBF16, wb.data(), n, k, Precision::kF32);
    ops::set_fp32_resident_weights(false);
    EXPECT_EQ(streamed.owned_bytes(), 0u);
    EXPECT_EQ(resident.owned_bytes(), 0u);  // the copy is made by the first call
    EXPECT_EQ(streamed.resident_f32(), nullptr);
    Vec a(static_cast<std::size_t>(m * n)), b(a.size()), b2(a.size()), want(a.size());
    ops::linear(x.data(), m, streamed, a.data());
    ops::linear(x.data(), m, resident, b.data());
    EXPECT_EQ(resident.owned_bytes(), static_cast<std::size_t>(n * k) * sizeof(float));
    EXPECT_EQ(streamed.owned_bytes(), 0u);
    for (std::int64_t i = 0; i < n * k; ++i)
      ASSERT_EQ(resident.resident_f32()[i], bf16_to_f32(wb[static_cast<std::size_t>(i)]));
    ops::linear(x.data(), m, resident, b2.data());  // the kept copy: the same bits again
    EXPECT_EQ(b, b2);
    ops::ref::linear(x.data(), m, DType::kBF16, wb.data(), n, k, want.data(), false, Precision::kF32);
    const double tol = 2e-6 * std::sqrt(static_cast<double>(k));
    EXPECT_TRUE(close("linear(streamed)", "m,n,k=" + dims({m, n, k}), want, a, {tol, 1e-5}));
    EXPECT_TRUE(close("linear(resident)", "m,n,k=" + dims({m, n, k}), want, b, {tol, 1e-5}));
  }
}

// bf16 mode on the library's bf16 matmul: a weight packed once into the library's own layout
// (GemmWeight::use_packed_bf16) runs the same kernels and sums as the weight handed over as it is,
// so every output is bit-identical: at m = 1 to 300 (small m take other blockings than large), with
// and without the fused residual add, n and k not multiples of the library's blocks (k odd: the
// last pair along k padded). The weight is packed by its third call here: two warm-up calls run on W
// as it is (nothing copied yet), and at avx512bf16 (oneDNN's brgemm kernels, whose blocked layout is
// what gets packed) the copy must exist right after the third and every m after it, m = 1 included,
// runs on it; the library must also run the product on it directly (not fall back to the plain W),
// so the comparison cannot pass without exercising it. Below, oneDNN 2.6's bf16 matmul asks for a
// plain layout and nothing is packed.
TEST(Ops, LinearBf16PackedWeightsBitIdenticalToPlain) {
  EXPECT_THROW(ops::set_bf16_pack_after_calls(-1), InvalidArgument);
  EXPECT_THROW(ops::set_bf16_pack_after_calls(1000001), InvalidArgument);
  Rng rng(91);
#if !defined(__aarch64__)
  const bool packs = ops::active_isa() == ops::IsaLevel::kAvx512Bf16 && !ops::own_bf16_gemm_active();
#else
  const bool packs = false;
#endif
  for (const auto& [n, k] : std::vector<std::array<std::int64_t, 2>>{{1040, 256}, {16, 512}, {70, 301}}) {
    const std::vector<std::uint16_t> wb = bf16_words(rng.uniform(n * k));
    ops::set_bf16_pack_after_calls(0);
    const ops::GemmWeight plain(DType::kBF16, wb.data(), n, k, Precision::kBF16);
    ops::set_bf16_pack_after_calls(3);
    const ops::GemmWeight packed(DType::kBF16, wb.data(), n, k, Precision::kBF16);
    ops::set_bf16_pack_after_calls(ops::kBf16PackAfterCallsDefault);
    auto same = [&](std::int64_t m, bool acc) {
      const Vec x = rng.uniform(m * k, -2.0f, 2.0f), y0 = rng.uniform(m * n);
      Vec a = y0, b = y0;
      ops::linear(x.data(), m, plain, a.data(), acc);
      ops::linear(x.data(), m, packed, b.data(), acc);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "m,n,k=" << dims({m, n, k}) << " accumulate " << acc;
    };
    for (int call = 1; call <= 2; ++call) {  // the warm-up calls: W as it is, nothing copied
      same(3, call == 2);
      EXPECT_EQ(packed.packed_bf16(), nullptr) << "call " << call;
      EXPECT_EQ(packed.owned_bytes(), 0U) << "call " << call;
    }
    for (const std::int64_t m : {1, 7, 45, 300}) {
      for (const bool acc : {false, true}) {
        same(m, acc);
        if (packs) {
          ASSERT_NE(packed.packed_bf16(), nullptr) << "packed by its third call, n,k=" << dims({n, k});
        }
      }
    }
    EXPECT_EQ(plain.packed_bf16(), nullptr);
    if (!packs) {
      EXPECT_EQ(packed.packed_bf16(), nullptr);
      continue;
    }
#if !defined(__aarch64__)  // gemm_backend.h is included on x86-64 only (above)
    EXPECT_GE(packed.owned_bytes(), static_cast<std::size_t>(n * k) * sizeof(std::uint16_t));
    const std::int64_t m = 7;
    std::vector<std::uint16_t> xb(static_cast<std::size_t>(m * k));
    const Vec x = rng.uniform(m * k, -2.0f, 2.0f);
    ops::f32_to_bf16_n(x.data(), m * k, xb.data());
    Vec a(static_cast<std::size_t>(m * n)), b(a.size());
    ASSERT_TRUE(ops::gemm_backend::matmul_bf16(m, n, k, xb.data(), wb.data(), a.data(), false));
    ASSERT_TRUE(ops::gemm_backend::matmul_bf16_packed(m, *packed.packed_bf16(), xb.data(), b.data(), false))
        << "the library fell back to the plain W, n,k=" << dims({n, k});
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "n,k=" << dims({n, k});
#endif
  }
}

// A nested profile scope times only what it names: ">linear.x_to_bf16" covers the conversion of x
// (m·k elements), not the matmul after it (m·n·k multiply-adds). With n = 4096 the matmul is ~4000x
// the conversion's work, so even a slow conversion stays far below a third of the whole call; a
// scope that also covered the matmul would report ~100%. On clef's AVX2 FMA GEMM x is rounded as it
// is packed, inside the matmul: no conversion pass, no scope.
TEST(Ops, ProfileScopeOfTheBf16ConversionExcludesTheMatmul) {
  Rng rng(5);
  const std::int64_t m = 64, n = 4096, k = 256;
  const Vec wf = rng.uniform(n * k), x = rng.uniform(m * k);
  const std::vector<std::uint16_t> wb = bf16_words(wf);
  const ops::GemmWeight w(DType::kBF16, wb.data(), n, k, Precision::kBF16);
  Vec y(static_cast<std::size_t>(m * n));
  ops::linear(x.data(), m, w, y.data());  // primitives made before timing
  const bool was = ops::prof::enabled();
  ops::prof::set_enabled(true);
  const ops::prof::Totals conv0 = ops::prof::totals(">linear.x_to_bf16");
  const ops::prof::Totals all0 = ops::prof::totals("test.linear_bf16");
  for (int r = 0; r < 5; ++r) {
    CLEF_PROF_SCOPE("test.linear_bf16");
    ops::linear(x.data(), m, w, y.data());
  }
  ops::prof::set_enabled(was);
  const double conv = ops::prof::totals(">linear.x_to_bf16").seconds - conv0.seconds;
  const double all = ops::prof::totals("test.linear_bf16").seconds - all0.seconds;
  const bool fused = ops::bf16_gemm_emulated() && ops::own_fp32_gemm_active();
  EXPECT_EQ(ops::prof::totals(">linear.x_to_bf16").calls - conv0.calls, fused ? 0 : 5);
  ASSERT_GT(all, 0.0);
  EXPECT_LT(conv, all / 3) << "the conversion scope took " << conv << " s of " << all << " s";
}

TEST(Ops, LinearZeroCopyBf16AndRejects) {
  Vec wf(6, 0.5f);
  const std::vector<std::byte> w = encode(DType::kBF16, wf);
  const ops::GemmWeight bf(DType::kBF16, w.data(), 2, 3, Precision::kBF16);
  EXPECT_EQ(bf.owned_bytes(), 0u);
  EXPECT_EQ(bf.operand(), static_cast<const void*>(w.data()));
  EXPECT_THROW(ops::GemmWeight(DType::kI32, w.data(), 2, 3, Precision::kF32), Unsupported);
  EXPECT_THROW(ops::GemmWeight(DType::kBF16, w.data(), 0, 3, Precision::kF32), InvalidArgument);
  EXPECT_FALSE(ops::gemm_backend_name().empty());
}

#if defined(__aarch64__)
TEST_P(OpsAtLevel, Bf16RunsBfmmlaFromNeonI8mmUp) {
  // bf16 linear layers run the BFMMLA kernel at neon-i8mm and above on a CPU with FEAT_BF16 (every
  // level from neon-i8mm up requires it), the fp32 matmul on bf16 values below (ops/gemm.h).
  EXPECT_EQ(ops::bf16_gemm_emulated(), GetParam() < ops::IsaLevel::kNeonI8mm) << ops::isa_name(GetParam());
}
#endif

CLEF_INSTANTIATE_AT_ISA_LEVELS(OpsAtLevel);

}  // namespace
}  // namespace clef

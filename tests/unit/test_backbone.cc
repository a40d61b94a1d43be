// SPDX-License-Identifier: MIT
// Backbone runtime tests on the embedded tiny random model: chunk-size independence, the seed's
// padded 64-call readout, chunk-by-chunk delivery to the consumer, state fork/restore, errors.
// (Parity against transformers is tests/reference/test_backbone.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "ops/gemm.h"
#include "ops/parallel.h"
#include "runtime/backbone.h"
#include "runtime/release.h"
#include "test_util.h"
#include "clef_tools/make_model.h"

namespace clef {
namespace {

class BackboneTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    release_ = new ReleaseFolder(open_release(test::make_tiny_model(*dir_)));
  }
  static void TearDownTestSuite() {
    delete release_;
    delete dir_;
  }
  static std::vector<std::int32_t> ids(std::int64_t t, unsigned seed) {
    std::mt19937 g(seed);
    std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(release_->config.text.vocab_size - 1));
    std::vector<std::int32_t> v(static_cast<std::size_t>(t));
    for (auto& x : v) x = d(g);
    return v;
  }
  static BackboneOptions opts(std::int64_t chunk) {
    BackboneOptions o;
    o.chunk_size = chunk;
    o.threads = 1;
    return o;
  }
  /// max_i |a_i - b_i| / max_i |b_i|
  static double rel(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0.0, den = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
      den = std::max(den, static_cast<double>(std::fabs(b[i])));
    }
    return num / den;
  }
  static test::TempDir* dir_;
  static ReleaseFolder* release_;
};

test::TempDir* BackboneTest::dir_ = nullptr;
ReleaseFolder* BackboneTest::release_ = nullptr;

TEST_F(BackboneTest, ChunkSizeDoesNotChangeHiddenRows) {
  const auto x = ids(150, 1);
  Backbone whole(*release_, opts(4096));
  const std::vector<float> ref = whole.hidden_states(x);
  ASSERT_EQ(ref.size(), x.size() * static_cast<std::size_t>(whole.hidden_size()));
  for (std::int64_t c : {1, 7, 16, 64, 65}) {
    Backbone bb(*release_, opts(c));
    EXPECT_LE(rel(bb.hidden_states(x), ref), 1e-5) << "chunk " << c;
  }
}

/// Whether the first `count` elements of two buffers hold the same bits (both must have them).
template <class A>
bool same_prefix(const A& x, const A& y, std::size_t count) {
  if (x.size() < count || y.size() < count) return false;
  return count == 0 || std::memcmp(x.data(), y.data(), count * sizeof(x[0])) == 0;  // no memcmp on empty (null) buffers
}

/// Whether two sequence states hold the same bits: counters, conv and recurrent states, and the KV
/// rows in use (fp32 rows, or the bf16 words of nn/state.h's layouts).
bool same_state(const nn::ModelState& a, const nn::ModelState& b) {
  if (a.n_tokens != b.n_tokens || a.next_position != b.next_position || a.layers.size() != b.layers.size())
    return false;
  for (std::size_t i = 0; i < a.layers.size(); ++i) {
    const nn::LayerState& p = a.layers[i];
    const nn::LayerState& q = b.layers[i];
    if (p.gdn.conv != q.gdn.conv || p.gdn.rec != q.gdn.rec) return false;
    if (p.kv.length != q.kv.length || p.kv.bf16 != q.kv.bf16) return false;
    const auto len = static_cast<std::size_t>(p.kv.length), w = static_cast<std::size_t>(p.kv.width);
    const bool kv_same =
        p.kv.bf16 ? same_prefix(p.kv.kw, q.kv.kw, len * w / 2) && same_prefix(p.kv.vw, q.kv.vw, (len + 1) / 2 * w)
                  : same_prefix(p.kv.k, q.kv.k, len * w) && same_prefix(p.kv.v, q.kv.v, len * w);
    if (!kv_same) return false;
  }
  return true;
}

// Continuous batching's promise (qwen35::TextModel::forward_batch): sequences whose new tokens share
// one forward pass, each continuing its own state (some fresh, some after a prefix), get the hidden
// rows and states they get alone, bit for bit, in every precision: the GEMMs whose kernels compute rows
// independently (int8, clef's vdpbf16ps bf16 GEMM) take all rows at once, the library's (fp32, bf16)
// one sequence at a time. Two orders of the same sequences.
TEST_F(BackboneTest, BatchedSequencesGetTheBitsTheyGetAlone) {
  struct Mode {
    ops::Precision precision;
    bool own_bf16;
  };
  std::vector<Mode> modes = {{ops::Precision::kF32, false},
                             {ops::Precision::kBF16, false},
                             {ops::Precision::kInt8, false}};
  ops::set_own_bf16_gemm(true);
  if (ops::own_bf16_gemm_active()) modes.push_back({ops::Precision::kBF16, true});
  const std::vector<std::int64_t> prefix = {0, 20, 0, 70}, fresh = {37, 1, 100, 64};
  for (const Mode& mode : modes) {
    ops::set_own_bf16_gemm(mode.own_bf16);
    BackboneOptions o = opts(512);
    o.precision = mode.precision;
    o.threads = 2;
    Backbone bb(*release_, o);
    const qwen35::TextModel& model = bb.model();
    const std::int64_t H = model.hidden_size();
    qwen35::TextActivations act = model.activations(512);
    std::vector<nn::ModelState> alone, batched;
    std::vector<std::vector<std::int32_t>> tokens;
    std::vector<std::vector<float>> want;
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      const std::vector<std::int32_t> before = ids(prefix[i], 10 + static_cast<unsigned>(i));
      tokens.push_back(ids(fresh[i], 20 + static_cast<unsigned>(i)));
      nn::ModelState st = model.new_state();
      if (!before.empty())
        model.forward_chunk(before, {}, st, std::vector<float>(before.size() * static_cast<std::size_t>(H)).data(),
                            act);
      batched.push_back(st);
      want.emplace_back(tokens[i].size() * static_cast<std::size_t>(H));
      model.forward_chunk(tokens[i], {}, st, want[i].data(), act);
      alone.push_back(std::move(st));
    }
    for (const std::vector<std::size_t>& order :
         {std::vector<std::size_t>{0, 1, 2, 3}, std::vector<std::size_t>{3, 1, 0, 2}}) {
      std::vector<nn::ModelState> states = batched;
      std::vector<qwen35::SequenceChunk> seqs;
      std::int64_t m = 0;
      for (std::size_t i : order) {
        seqs.push_back({tokens[i], {}, &states[i], nullptr});
        m += fresh[i];
      }
      std::vector<float> out(static_cast<std::size_t>(m * H));
      model.forward_batch(seqs, out.data(), act);
      std::int64_t row0 = 0;
      for (std::size_t i : order) {
        const std::string what = std::string(ops::precision_name(mode.precision)) +
                                 (mode.own_bf16 ? " (clef GEMM)" : "") + ", sequence " + std::to_string(i) +
                                 " at row " + std::to_string(row0);
        EXPECT_EQ(std::memcmp(out.data() + row0 * H, want[i].data(), want[i].size() * sizeof(float)), 0) << what;
        EXPECT_TRUE(same_state(states[i], alone[i])) << what;
        row0 += fresh[i];
      }
    }
  }
  ops::set_own_bf16_gemm(false);
}

TEST_F(BackboneTest, PaddedReadoutEqualsUnpadded) {
  for (std::int64_t t : {1, 63, 64, 65, 130}) {
    const auto x = ids(t, 2);
    Backbone plain(*release_, opts(64));
    BackboneOptions po = opts(64);
    po.padded_readout = true;
    Backbone padded(*release_, po);
    EXPECT_EQ(padded.pad_id(), 436);  // the tiny tokenizer's <|endoftext|>
    // The padded call runs every GEMM with m = 64 instead of m = T: the same math, but the GEMM
    // library may block the k-sum differently per m and per ISA level (AVX2 vs AVX-512 register
    // tiles), so rows agree to fp32 summation-order error, not bit for bit; the same bound as
    // ChunkSizeDoesNotChangeHiddenRows, which differs from it in the same way (measured 1.26e-6
    // on Zen 3 AVX2, below 1e-6 on AVX-512).
    EXPECT_LE(rel(padded.hidden_states(x), plain.hidden_states(x)), 1e-5) << "T=" << t;
    // Every call is exactly 64 positions: the state holds ceil(T/64)*64 tokens afterwards.
    SequenceState st = padded.new_state();
    padded.prefill(x, st, {});
    EXPECT_EQ(st.n_tokens, (t + 63) / 64 * 64);
  }
}

TEST_F(BackboneTest, ConsumerGetsRowsChunkByChunk) {
  const auto x = ids(100, 3);
  Backbone bb(*release_, opts(32));
  SequenceState st = bb.new_state();
  std::vector<std::pair<std::int64_t, std::int64_t>> calls;
  bb.prefill(x, st, [&](std::int64_t first, const float* rows, std::int64_t count, std::int64_t h) {
    EXPECT_EQ(h, bb.hidden_size());
    EXPECT_NE(rows, nullptr);
    calls.emplace_back(first, count);
  });
  const std::vector<std::pair<std::int64_t, std::int64_t>> want = {{0, 32}, {32, 32}, {64, 32}, {96, 4}};
  EXPECT_EQ(calls, want);
  EXPECT_EQ(st.n_tokens, 100);
  EXPECT_EQ(st.next_position, 100);
  // Activation buffers are O(chunk): far below T * H * layers.
  EXPECT_LT(bb.activation_floats(), static_cast<std::size_t>(32 * 4096));
}

TEST_F(BackboneTest, ForkAndRestoreState) {
  const auto x = ids(120, 4);
  const std::int64_t H = release_->config.text.hidden_size;
  Backbone bb(*release_, opts(16));
  const std::vector<float> ref = bb.hidden_states(x);
  const std::span<const std::int32_t> all(x);
  // The split point is a multiple of the chunk size, so every chunk boundary matches the
  // one-shot run and the rows must be bit-identical.
  SequenceState st = bb.new_state();
  bb.prefill(all.first(48), st, {});
  const SequenceState snap = fork_state(st);
  EXPECT_GT(snap.bytes(), 0u);

  auto collect = [&](SequenceState& s, std::span<const std::int32_t> part) {
    std::vector<float> out;
    bb.prefill(part, s, [&](std::int64_t first, const float* rows, std::int64_t count, std::int64_t) {
      EXPECT_EQ(first, 48 + static_cast<std::int64_t>(out.size()) / H);
      out.insert(out.end(), rows, rows + count * H);
    });
    return out;
  };
  const std::vector<float> tail(ref.begin() + 48 * H, ref.end());
  SequenceState branch = fork_state(snap);
  EXPECT_EQ(collect(branch, all.subspan(48)), tail);  // the fork continues exactly
  // A different continuation on the original does not disturb the snapshot.
  const auto other = ids(30, 5);
  collect(st, other);
  EXPECT_EQ(st.n_tokens, 78);
  restore_state(st, snap);
  EXPECT_EQ(st.n_tokens, 48);
  EXPECT_EQ(collect(st, all.subspan(48)), tail);
}

TEST_F(BackboneTest, Bf16ModeIsCloseToFp32) {
  const auto x = ids(64, 6);
  Backbone f32(*release_, opts(64));
  BackboneOptions bo = opts(64);
  bo.precision = ops::Precision::kBF16;
  Backbone b16(*release_, bo);
  EXPECT_LE(rel(b16.hidden_states(x), f32.hidden_states(x)), 0.1);
}

TEST_F(BackboneTest, RejectsBadInput) {
  Backbone bb(*release_, opts(8));
  SequenceState st = bb.new_state();
  const std::vector<std::int32_t> bad = {1, static_cast<std::int32_t>(release_->config.text.vocab_size)};
  EXPECT_THROW(bb.prefill(bad, st, {}), InvalidArgument);
  EXPECT_THROW(Backbone(*release_, opts(0)), InvalidArgument);
  SequenceState empty;
  const std::vector<std::int32_t> one = {1};
  EXPECT_THROW(bb.prefill(one, empty, {}), InvalidArgument);  // state of another model
}

TEST_F(BackboneTest, Fp32CopyBytesFollowTheArchitecture) {
  // docs/MODEL.md §9 linear layers: per GDN layer (conv_dim + Hv*dv + 2*Hv) x H + H x Hv*dv,
  // per attention layer (2*nh*hd + 2*nkv*hd) x H + H x nh*hd, per layer 3 x I x H (SwiGLU).
  const auto& c = release_->config.text;
  const std::int64_t H = c.hidden_size;
  const std::int64_t gdn =
      (c.gdn_conv_dim() + c.gdn_value_dim() + 2 * c.linear_num_value_heads) * H + H * c.gdn_value_dim();
  const std::int64_t attn = (2 * c.num_attention_heads * c.head_dim + 2 * c.num_key_value_heads * c.head_dim) * H +
                            H * c.num_attention_heads * c.head_dim;
  const std::int64_t params = c.count(LayerType::kLinearAttention) * gdn + c.count(LayerType::kFullAttention) * attn +
                              c.num_hidden_layers * 3 * c.intermediate_size * H;
  ASSERT_NE(release_->model.text.layers.at(0).gate_proj.dtype(), DType::kF32);  // the tiny model is bf16
  EXPECT_EQ(fp32_copy_bytes(release_->model.text), static_cast<std::uint64_t>(4 * params));
}

TEST_F(BackboneTest, Fp32WeightsPolicy) {
  using ops::Precision;
  constexpr std::uint64_t GiB = std::uint64_t{1} << 30;
  EXPECT_TRUE(fp32_weights_resident(Fp32Weights::kResident, Precision::kF32, 40 * GiB, 8 * GiB));
  EXPECT_FALSE(fp32_weights_resident(Fp32Weights::kStream, Precision::kF32, 1, 64 * GiB));
  EXPECT_TRUE(fp32_weights_resident(Fp32Weights::kAuto, Precision::kF32, 2 * GiB, 8 * GiB));  // 0.8b, 8 GB
  EXPECT_FALSE(fp32_weights_resident(Fp32Weights::kAuto, Precision::kF32, 2 * GiB + 1, 8 * GiB));
  EXPECT_FALSE(fp32_weights_resident(Fp32Weights::kAuto, Precision::kF32, 32 * GiB, 24 * GiB));  // flash
  EXPECT_FALSE(fp32_weights_resident(Fp32Weights::kAuto, Precision::kF32, 0, 24 * GiB));         // F32 checkpoint
  EXPECT_FALSE(fp32_weights_resident(Fp32Weights::kAuto, Precision::kBF16, 1, 24 * GiB));        // bf16 reads bf16
  EXPECT_GT(usable_memory_bytes(), std::uint64_t{0});
}

TEST_F(BackboneTest, ThreadsOptionSizesThePool) {
  BackboneOptions o = opts(8);
  o.threads = 1;
  Backbone bb(*release_, o);
  EXPECT_EQ(ops::num_threads(), 1);
  EXPECT_GE(ops::hardware_threads(), 1);
}

}  // namespace
}  // namespace clef

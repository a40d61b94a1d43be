// SPDX-License-Identifier: MIT
#include "models/qwen35/vision_tower.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "nn/linear.h"
#include "ops/ops.h"
#include "ops/profile.h"
#include "ops/vision_ops.h"

namespace clef::qwen35 {
namespace {

constexpr float kLayerNormEps = 1e-6f;  // every vision LayerNorm (docs/MODEL.md §6.6, §6.7)
constexpr std::int64_t kMaxFramePatches = std::int64_t{1} << 20;

std::vector<float> vec(const WeightView& w, const std::string& name, std::int64_t n) {
  std::vector<float> v = nn::small_f32(w, name);
  if (static_cast<std::int64_t>(v.size()) != n) {
    throw ModelLoadError("vision tensor " + name + ": " + std::to_string(v.size()) + " values, expected " +
                         std::to_string(n));
  }
  return v;
}

// Conv3d weight [D, C, T, P, P] seen as the [D, C*T*P*P] matrix of a linear layer
// (docs/MODEL.md §6.3).
ops::GemmWeight patch_weight(const WeightView& w, std::int64_t d, std::int64_t k, ops::Precision p) {
  if (!w.valid() || static_cast<std::int64_t>(w.numel()) != d * k) {
    throw ModelLoadError("vision tensor model.visual.patch_embed.proj.weight is missing or not " + std::to_string(d) +
                         " x " + std::to_string(k) + " values");
  }
  return ops::GemmWeight(w.dtype(), w.bytes.data(), d, k, p);
}

}  // namespace

VisionTower::VisionTower(const VisionConfig& cfg, const VisionWeights& w, const VisionTowerOptions& opt)
    : cfg_(cfg), opt_(opt) {
  const std::int64_t D = cfg.hidden_size;
  if (D <= 0 || cfg.num_heads <= 0 || D % cfg.num_heads != 0) {
    throw ModelLoadError("vision_config: hidden_size " + std::to_string(D) + " is not a multiple of num_heads " +
                         std::to_string(cfg.num_heads));
  }
  head_dim_ = D / cfg.num_heads;
  if (head_dim_ % 4 != 0) {
    throw Unsupported("vision tower: head size " + std::to_string(head_dim_) +
                      " is not a multiple of 4 (axial rotary, docs/MODEL.md §6.5)");
  }
  side_ = static_cast<std::int64_t>(std::llround(std::sqrt(static_cast<double>(cfg.num_position_embeddings))));
  if (side_ < 2 || side_ * side_ != cfg.num_position_embeddings) {
    throw Unsupported("vision tower: num_position_embeddings " + std::to_string(cfg.num_position_embeddings) +
                      " is not a square grid of side >= 2");
  }
  if (cfg.spatial_merge_size <= 0) throw ModelLoadError("vision_config: spatial_merge_size must be positive");
  if (static_cast<std::int64_t>(w.blocks.size()) != cfg.depth) {
    throw ModelLoadError("vision tower: " + std::to_string(w.blocks.size()) + " bound blocks, config depth " +
                         std::to_string(cfg.depth));
  }
  const ops::Precision p = opt.precision;
  const std::string pre = "model.visual.";
  patch_ = patch_weight(w.patch_embed_weight, D, cfg.patch_dim(), p);
  patch_b_ = vec(w.patch_embed_bias, pre + "patch_embed.proj.bias", D);
  pos_table_ = vec(w.pos_embed, pre + "pos_embed.weight", cfg.num_position_embeddings * D);

  // inv_freq_j = 1 / theta^(float(2j) / (hd/2)), j < hd/4, formed in fp32 like HF
  // (Qwen3_5VisionRotaryEmbedding.compute_axial_rope_parameters).
  const std::int64_t spatial = head_dim_ / 2;
  for (std::int64_t j = 0; j < spatial / 2; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(spatial);
    const auto pw = static_cast<float>(std::pow(cfg.rope_theta, static_cast<double>(e)));
    inv_freq_.push_back(1.0f / pw);
  }

  blocks_.resize(w.blocks.size());
  for (std::size_t i = 0; i < w.blocks.size(); ++i) {
    const VisionBlockWeights& bw = w.blocks[i];
    Block& b = blocks_[i];
    const std::string n = pre + "blocks." + std::to_string(i) + ".";
    b.norm1_w = vec(bw.norm1_weight, n + "norm1.weight", D);
    b.norm1_b = vec(bw.norm1_bias, n + "norm1.bias", D);
    b.norm2_w = vec(bw.norm2_weight, n + "norm2.weight", D);
    b.norm2_b = vec(bw.norm2_bias, n + "norm2.bias", D);
    b.qkv = nn::linear_weight(bw.qkv_weight, p, n + "attn.qkv.weight");
    b.qkv_b = vec(bw.qkv_bias, n + "attn.qkv.bias", 3 * D);
    b.proj = nn::linear_weight(bw.proj_weight, p, n + "attn.proj.weight");
    b.proj_b = vec(bw.proj_bias, n + "attn.proj.bias", D);
    b.fc1 = nn::linear_weight(bw.fc1_weight, p, n + "mlp.linear_fc1.weight");
    b.fc1_b = vec(bw.fc1_bias, n + "mlp.linear_fc1.bias", cfg.intermediate_size);
    b.fc2 = nn::linear_weight(bw.fc2_weight, p, n + "mlp.linear_fc2.weight");
    b.fc2_b = vec(bw.fc2_bias, n + "mlp.linear_fc2.bias", D);
  }
  const std::int64_t m2 = cfg.spatial_merge_size * cfg.spatial_merge_size;
  merger_norm_w_ = vec(w.merger_norm_weight, pre + "merger.norm.weight", D);
  merger_norm_b_ = vec(w.merger_norm_bias, pre + "merger.norm.bias", D);
  merger_fc1_ = nn::linear_weight(w.merger_fc1_weight, p, pre + "merger.linear_fc1.weight");
  merger_fc1_b_ = vec(w.merger_fc1_bias, pre + "merger.linear_fc1.bias", m2 * D);
  merger_fc2_ = nn::linear_weight(w.merger_fc2_weight, p, pre + "merger.linear_fc2.weight");
  merger_fc2_b_ = vec(w.merger_fc2_bias, pre + "merger.linear_fc2.bias", cfg.out_hidden_size);
}

void VisionTower::check_grid(const ImageGrid& g, const std::string& what) const {
  const std::int64_t m = cfg_.spatial_merge_size;
  const bool ok = g.t >= 1 && g.h >= m && g.w >= m && g.h % m == 0 && g.w % m == 0 && g.h <= kMaxFramePatches &&
                  g.w <= kMaxFramePatches && g.h * g.w <= kMaxFramePatches && g.t <= kMaxFramePatches;
  if (!ok) {
    throw InvalidArgument(what + ": grid (t, h, w) = (" + std::to_string(g.t) + ", " + std::to_string(g.h) + ", " +
                          std::to_string(g.w) + ") patches is invalid: need t >= 1 and h, w positive multiples of " +
                          std::to_string(m) + " with h*w <= " + std::to_string(kMaxFramePatches));
  }
}

std::int64_t VisionTower::merged_tokens(const ImageGrid& g) const noexcept {
  const std::int64_t m = cfg_.spatial_merge_size;
  return g.t * (g.h / m) * (g.w / m);
}

namespace {

// (row, col) patch coordinates of the k-th patch of a frame in the processor's merge-block-major
// order (§6.2): blocks row-major over the (h/m) x (w/m) merged grid, then the m x m patches.
struct PatchRc {
  std::int64_t row, col;
};
PatchRc patch_rc(std::int64_t k, std::int64_t w, std::int64_t m) {
  const std::int64_t in_col = k % m;
  const std::int64_t in_row = (k / m) % m;
  const std::int64_t block = k / (m * m);
  const std::int64_t bw = w / m;
  return {(block / bw) * m + in_row, (block % bw) * m + in_col};
}

// One axis of the align_corners bilinear resampling, in HF's fp32 arithmetic
// (vision_utils._interpolation_axis_taps_weights): src = float(i) * (side-1) / max(n-1, 1),
// taps floor(src) and floor(src)+1 (clamped), weights 1 - |src - floor - offset|.
struct AxisTaps {
  std::int64_t tap[2];
  float weight[2];
};
AxisTaps axis_taps(std::int64_t i, std::int64_t n, std::int64_t side) {
  const float num = static_cast<float>(i) * static_cast<float>(side - 1);
  const float src = num / static_cast<float>(std::max<std::int64_t>(n - 1, 1));
  const float fl = std::floor(src);
  AxisTaps a{};
  const float frac = src - fl;
  for (int o = 0; o < 2; ++o) {
    a.tap[o] = std::clamp<std::int64_t>(static_cast<std::int64_t>(fl) + o, 0, side - 1);
    const float dist = std::fabs(frac - static_cast<float>(o));
    a.weight[o] = std::max(1.0f - dist, 0.0f);
  }
  return a;
}

}  // namespace

void VisionTower::position_embeddings(const ImageGrid& g, std::vector<float>& out) const {
  const std::int64_t D = cfg_.hidden_size, m = cfg_.spatial_merge_size;
  const std::int64_t n = g.h * g.w;
  const std::size_t base = out.size();
  out.resize(base + static_cast<std::size_t>(n * D));
  float* dst = out.data() + base;
  for (std::int64_t k = 0; k < n; ++k) {
    const PatchRc rc = patch_rc(k, g.w, m);
    const AxisTaps ty = axis_taps(rc.row, g.h, side_);
    const AxisTaps tx = axis_taps(rc.col, g.w, side_);
    const float* rows[4];
    float wts[4];
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        rows[2 * a + b] = pos_table_.data() + (ty.tap[a] * side_ + tx.tap[b]) * D;
        wts[2 * a + b] = ty.weight[a] * tx.weight[b];
      }
    }
    float* o = dst + k * D;
    // ((t0 + t1) + t2) + t3, each term rounded to fp32 like the reference's weighted gather.
    for (std::int64_t e = 0; e < D; ++e) {
      float acc = rows[0][e] * wts[0];
      acc += rows[1][e] * wts[1];
      acc += rows[2][e] * wts[2];
      acc += rows[3][e] * wts[3];
      o[e] = acc;
    }
  }
}

void VisionTower::rotary_tables(const ImageGrid& g, std::vector<float>& cos, std::vector<float>& sin) const {
  const std::int64_t m = cfg_.spatial_merge_size;
  const std::int64_t n = g.h * g.w, half = head_dim_ / 2, f = head_dim_ / 4;
  const std::size_t base = cos.size();
  cos.resize(base + static_cast<std::size_t>(n * half));
  sin.resize(base + static_cast<std::size_t>(n * half));
  for (std::int64_t k = 0; k < n; ++k) {
    const PatchRc rc = patch_rc(k, g.w, m);
    float* c = cos.data() + base + k * half;
    float* s = sin.data() + base + k * half;
    for (std::int64_t j = 0; j < half; ++j) {
      // fp32 angle (one multiply), evaluated in double and rounded (docs/MODEL.md §11).
      const float pos = static_cast<float>(j < f ? rc.row : rc.col);
      const float ang = pos * inv_freq_[static_cast<std::size_t>(j < f ? j : j - f)];
      c[j] = static_cast<float>(std::cos(static_cast<double>(ang)));
      s[j] = static_cast<float>(std::sin(static_cast<double>(ang)));
    }
  }
}

void VisionTower::forward(const float* pixel_values, std::int64_t num_patches, std::span<const ImageGrid> grids,
                          float* out, VisionActivations& act) const {
  if (grids.empty()) throw InvalidArgument("vision tower: no image grids given");
  std::int64_t total = 0;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    check_grid(grids[i], "image " + std::to_string(i));
    total += grids[i].patches();
  }
  if (total != num_patches) {
    throw InvalidArgument("vision tower: pixel_values has " + std::to_string(num_patches) +
                          " patch rows but the grids need " + std::to_string(total));
  }
  const std::int64_t N = num_patches, D = cfg_.hidden_size, K = cfg_.patch_dim();
  const std::int64_t I = cfg_.intermediate_size, nh = cfg_.num_heads, hd = head_dim_;
  const std::int64_t m2 = cfg_.spatial_merge_size * cfg_.spatial_merge_size;
  for (std::int64_t r = 0; r < N; ++r) {
    const float* row = pixel_values + r * K;
    for (std::int64_t j = 0; j < K; ++j) {
      if (!std::isfinite(row[j])) {
        throw InvalidArgument("vision tower: pixel_values row " + std::to_string(r) + " column " + std::to_string(j) +
                              " is not finite");
      }
    }
  }

  // Per-patch position embeddings and rotary tables, each frame of each image (§6.4, §6.5).
  std::vector<float> pos, cos, sin;
  pos.reserve(static_cast<std::size_t>(N * D));
  cos.reserve(static_cast<std::size_t>(N * hd / 2));
  sin.reserve(static_cast<std::size_t>(N * hd / 2));
  std::vector<std::int64_t> seg;  // frame boundaries (cu_seqlens)
  seg.push_back(0);
  {
    CLEF_PROF_SCOPE("vision_tables");
    for (const ImageGrid& g : grids) {
      std::vector<float> p1, c1, s1;
      position_embeddings(g, p1);
      rotary_tables(g, c1, s1);
      for (std::int64_t t = 0; t < g.t; ++t) {
        pos.insert(pos.end(), p1.begin(), p1.end());
        cos.insert(cos.end(), c1.begin(), c1.end());
        sin.insert(sin.end(), s1.begin(), s1.end());
        seg.push_back(seg.back() + g.h * g.w);
      }
    }
  }

  if (act.patches < N) {
    act.patches = N;
    const auto nd = static_cast<std::size_t>(N * D);
    for (std::vector<float>* b : {&act.x, &act.normed, &act.q, &act.k, &act.v, &act.core, &act.merged}) b->resize(nd);
    act.qkv.resize(3 * nd);
    act.mlp.resize(static_cast<std::size_t>(N * I));
  }
  float* x = act.x.data();
  float* a = act.normed.data();
  // Patch embedding (§6.3) + position embedding (§6.4).
  ops::linear(pixel_values, N, patch_, x);
  ops::add_bias(x, N, D, patch_b_.data());
  ops::add_inplace(x, pos.data(), N * D);

  float* qkv = act.qkv.data();
  float* q = act.q.data();
  float* k = act.k.data();
  float* v = act.v.data();
  float* o = act.core.data();
  float* mlp = act.mlp.data();
  const ops::AttentionDims ad{nh, nh, hd};
  const bool bf16 = opt_.precision == ops::Precision::kBF16;
  for (const Block& b : blocks_) {
    // x = x + proj(attn(rope(qkv(LN1(x)))))   (§6.6)
    ops::layer_norm(x, N, D, b.norm1_w.data(), b.norm1_b.data(), kLayerNormEps, a);
    ops::linear(a, N, b.qkv, qkv);
    ops::add_bias(qkv, N, 3 * D, b.qkv_b.data());
    ops::apply_rope(qkv, N, nh, hd, 3 * D, hd, cos.data(), sin.data());
    ops::apply_rope(qkv + D, N, nh, hd, 3 * D, hd, cos.data(), sin.data());
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < N; ++r) {
      const float* src = qkv + r * 3 * D;
      std::copy(src, src + D, q + r * D);
      std::copy(src + D, src + 2 * D, k + r * D);
      std::copy(src + 2 * D, src + 3 * D, v + r * D);
    }
    {
      CLEF_PROF_SCOPE("vision_attention");
      for (std::size_t f = 0; f + 1 < seg.size(); ++f) {
        const std::int64_t r0 = seg[f], len = seg[f + 1] - seg[f];
        if (bf16) {
          ops::attention_full_bf16(ad, len, q + r0 * D, k + r0 * D, v + r0 * D, o + r0 * D);
        } else {
          ops::attention_full(ad, len, q + r0 * D, k + r0 * D, v + r0 * D, o + r0 * D);
        }
      }
    }
    ops::linear(o, N, b.proj, x, /*accumulate=*/true);
    ops::add_bias(x, N, D, b.proj_b.data());
    // x = x + fc2(gelu_tanh(fc1(LN2(x))))
    ops::layer_norm(x, N, D, b.norm2_w.data(), b.norm2_b.data(), kLayerNormEps, a);
    ops::linear(a, N, b.fc1, mlp);
    ops::add_bias(mlp, N, I, b.fc1_b.data());
    ops::gelu_tanh(mlp, N * I, mlp);
    ops::linear(mlp, N, b.fc2, x, /*accumulate=*/true);
    ops::add_bias(x, N, D, b.fc2_b.data());
  }

  // Patch merger (§6.7): LN per patch, groups of m*m consecutive rows, fc1, erf-GELU, fc2.
  const std::int64_t nm = N / m2;
  ops::layer_norm(x, N, D, merger_norm_w_.data(), merger_norm_b_.data(), kLayerNormEps, a);
  float* hmid = act.merged.data();  // nm · m² · D <= N · D
  ops::linear(a, nm, merger_fc1_, hmid);
  ops::add_bias(hmid, nm, m2 * D, merger_fc1_b_.data());
  ops::gelu_erf(hmid, nm * m2 * D, hmid);
  ops::linear(hmid, nm, merger_fc2_, out);
  ops::add_bias(out, nm, cfg_.out_hidden_size, merger_fc2_b_.data());
}

std::size_t VisionActivations::floats() const noexcept {
  return x.size() + normed.size() + qkv.size() + q.size() + k.size() + v.size() + core.size() + mlp.size() +
         merged.size();
}

std::vector<float> VisionTower::forward(const float* pixel_values, std::int64_t num_patches,
                                        std::span<const ImageGrid> grids) const {
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    check_grid(grids[i], "image " + std::to_string(i));
    rows += merged_tokens(grids[i]);
  }
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(rows, 0) * cfg_.out_hidden_size));
  VisionActivations act;
  forward(pixel_values, num_patches, grids, out.data(), act);
  return out;
}

}  // namespace clef::qwen35

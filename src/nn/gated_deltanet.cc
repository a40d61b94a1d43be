// SPDX-License-Identifier: MIT
#include "nn/gated_deltanet.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "nn/linear.h"
#include "ops/int8_gemm.h"
#include "ops/profile.h"

namespace clef::nn {
namespace {

bool tiled(const GdnConfig& c) { return c.v_heads_tiled && c.dims.hv != c.dims.hk; }

/// True when out_proj's columns can be moved per V head: dv whole blocks of its dtype (every
/// unquantized dtype; Q8_0 and the 32-element types for dv a multiple of 32; K-quants need 256).
bool head_columns_movable(const GdnConfig& c, const WeightView& w) {
  std::uint64_t block_elems = 1, block_bytes = 0;
  return !dtype_block(w.dtype(), block_elems, block_bytes) || c.dims.dv % static_cast<std::int64_t>(block_elems) == 0;
}

/// out_proj [H, Hv*dv] with its column blocks (one per V head, dv wide) moved from the stored
/// tiled order to the grouped order; bytes in the stored dtype. nullptr when not tiled, or when a
/// V head is not whole blocks of the dtype (then forward moves the activations instead).
std::shared_ptr<const std::vector<std::byte>> grouped_out_proj(const GdnConfig& c, const WeightView& w,
                                                               const std::string& name) {
  if (!tiled(c)) return nullptr;
  if (!w.valid() || w.shape().size() != 2 || w.shape()[1] != c.value_dim()) {
    throw ModelLoadError("linear weight " + name + " is missing or not [H, Hv*dv]");
  }
  if (!head_columns_movable(c, w)) return nullptr;
  const std::int64_t hk = c.dims.hk, hv = c.dims.hv, r = hv / hk;
  const std::size_t head = dtype_bytes(w.dtype(), static_cast<std::uint64_t>(c.dims.dv));
  const std::size_t row = head * static_cast<std::size_t>(hv);
  const std::size_t rows = static_cast<std::size_t>(w.shape()[0]);
  auto out = std::make_shared<std::vector<std::byte>>(rows * row);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::int64_t h = 0; h < hv; ++h) {
      const std::int64_t t = (h % r) * hk + h / r;
      std::copy_n(w.bytes.data() + i * row + static_cast<std::size_t>(t) * head, head,
                  out->data() + i * row + static_cast<std::size_t>(h) * head);
    }
  }
  return out;
}

}  // namespace

std::int64_t GatedDeltaNet::stored_head(std::int64_t h) const noexcept {
  if (!tiled(cfg_)) return h;
  const std::int64_t r = cfg_.dims.hv / cfg_.dims.hk;
  return (h % r) * cfg_.dims.hk + h / r;
}

void GatedDeltaNet::to_grouped(float* x, std::int64_t rows, std::int64_t stride, std::int64_t offset,
                               std::int64_t width, float* tmp) const {
  const std::int64_t hv = cfg_.dims.hv;
  for (std::int64_t i = 0; i < rows; ++i) {
    float* row = x + i * stride + offset;
    for (std::int64_t h = 0; h < hv; ++h) std::copy_n(row + stored_head(h) * width, width, tmp + h * width);
    std::copy_n(tmp, hv * width, row);
  }
}

void GatedDeltaNet::to_stored(float* x, std::int64_t rows, std::int64_t stride, std::int64_t width, float* tmp) const {
  const std::int64_t hv = cfg_.dims.hv;
  for (std::int64_t i = 0; i < rows; ++i) {
    float* row = x + i * stride;
    for (std::int64_t h = 0; h < hv; ++h) std::copy_n(row + h * width, width, tmp + stored_head(h) * width);
    std::copy_n(tmp, hv * width, row);
  }
}

GatedDeltaNet::GatedDeltaNet(const GdnConfig& cfg, const GdnWeights& w, ops::Precision p, const std::string& name)
    : cfg_(cfg),
      out_grouped_(grouped_out_proj(cfg, w.out_proj, name + ".out_proj")),
      qkv_(linear_weight(w.in_proj_qkv, p, name + ".in_proj_qkv")),
      z_(linear_weight(w.in_proj_z, p, name + ".in_proj_z")),
      b_(linear_weight(w.in_proj_b, p, name + ".in_proj_b")),
      a_(linear_weight(w.in_proj_a, p, name + ".in_proj_a")),
      out_(out_grouped_ ? ops::GemmWeight(w.out_proj.dtype(), out_grouped_->data(), w.out_proj.shape()[0],
                                          w.out_proj.shape()[1], p)
                        : linear_weight(w.out_proj, p, name + ".out_proj")),
      conv_w_(small_f32(w.conv1d, name + ".conv1d")),  // [C, 1, K] == [C, K]
      dt_bias_(small_f32(w.dt_bias, name + ".dt_bias")),
      neg_a_(neg_exp_a(w.a_log, name + ".A_log")),
      norm_w_(small_f32(w.norm, name + ".norm")),
      bf16_delta_(p == ops::Precision::kBF16 || p == ops::Precision::kInt8) {
  if (static_cast<std::int64_t>(conv_w_.size()) != cfg.conv_dim() * cfg.conv_k || qkv_.n() != cfg.conv_dim() ||
      out_.k() != cfg.value_dim() || static_cast<std::int64_t>(dt_bias_.size()) != cfg.dims.hv ||
      static_cast<std::int64_t>(neg_a_.size()) != cfg.dims.hv) {
    throw ModelLoadError(name + ": tensor shapes disagree with the GDN config");
  }
  if (tiled(cfg)) {
    if (cfg.dims.hv % cfg.dims.hk != 0) throw ModelLoadError(name + ": Hv is not a multiple of Hk");
    // Small tensors: conv V channels (rows of K taps), dt_bias and A to grouped order.
    const std::int64_t K = cfg.conv_k, dv = cfg.dims.dv;
    std::vector<float> tmp(static_cast<std::size_t>(cfg.value_dim() * K));
    to_grouped(conv_w_.data(), 1, 0, 2 * cfg.key_dim() * K, dv * K, tmp.data());
    to_grouped(dt_bias_.data(), 1, 0, 0, 1, tmp.data());
    to_grouped(neg_a_.data(), 1, 0, 0, 1, tmp.data());
  }
  const std::int64_t C = cfg.conv_dim(), K = cfg.conv_k;
  conv_taps_.resize(conv_w_.size());
  ops::transpose_conv_taps(conv_w_.data(), C, K, conv_taps_.data());
}

GdnState GatedDeltaNet::new_state() const {
  GdnState s;
  s.conv.assign(static_cast<std::size_t>((cfg_.conv_k - 1) * cfg_.conv_dim()), 0.0f);
  s.rec.assign(static_cast<std::size_t>(cfg_.dims.hv * cfg_.dims.dk * cfg_.dims.dv), 0.0f);
  return s;
}

GdnActivations::GdnActivations(const GdnConfig& c, std::int64_t n)
    : rows(n),
      mixed(static_cast<std::size_t>(n * c.conv_dim())),
      conv(mixed.size()),
      z(static_cast<std::size_t>(n * c.value_dim())),
      gates(static_cast<std::size_t>(4 * n * c.dims.hv)),
      core(z.size()),
      head_order(static_cast<std::size_t>(c.value_dim())) {}

std::size_t GdnActivations::floats() const noexcept {
  return mixed.size() + conv.size() + z.size() + gates.size() + core.size() + head_order.size();
}

void GatedDeltaNet::forward(const float* x, std::int64_t n, GdnState& st, float* h, GdnActivations& act) const {
  const GdnSegment one{0, n, &st};
  forward_batch(x, std::span<const GdnSegment>(&one, 1), h, act);
}

void GatedDeltaNet::forward_batch(const float* x, std::span<const GdnSegment> segs, float* h,
                                  GdnActivations& act) const {
  const ops::GdnDims& d = cfg_.dims;
  const std::int64_t cd = cfg_.conv_dim(), kd = cfg_.key_dim(), vd = cfg_.value_dim();
  thread_local std::vector<RowRange> rows;
  const std::int64_t n = row_ranges(segs, act.rows, "gated deltanet", rows);
  float* mixed = act.mixed.data();
  float* u = act.conv.data();
  float* z = act.z.data();
  float* bg = act.gates.data();
  float* o = act.core.data();
  float* b = bg;
  float* a = bg + n * d.hv;
  float* beta = bg + 2 * n * d.hv;
  float* g = bg + 3 * n * d.hv;

  {
    CLEF_PROF_SCOPE("gdn.in_proj(qkv,z,b,a)");
    const ops::LinearOut outs[] = {{&qkv_, mixed}, {&z_, z}, {&b_, b}, {&a_, a}};
    linear_shared_rows(x, n, rows, outs);
    if (tiled(cfg_)) {  // stored (tiled) V-head order -> grouped, per token (see GdnConfig)
      float* tmp = act.head_order.data();
      to_grouped(mixed, n, cd, 2 * kd, d.dv, tmp);
      to_grouped(z, n, vd, 0, d.dv, tmp);
      to_grouped(b, n, d.hv, 0, 1, tmp);
      to_grouped(a, n, d.hv, 0, 1, tmp);
    }
  }
  // conv + SiLU, then the q, k L2 norm per (token, k-head), q also scaled by dk^-0.5 (after the
  // norm, pitfall 8), then the gates (ops::gdn_input_stage, continuing the sequence's conv state);
  // then the delta rule on those rows. Both run one kGdnChunk slab of a sequence at a time, so the
  // delta rule reads the q, k, v rows the stage has just written from L2 rather than from L3
  // after a pass over all rows (the rule's first reads of them were most of its time outside its
  // products); a split at a multiple of kGdnChunk runs the same chunks, so the bits are the
  // same as one pass (docs/PERFORMANCE.md).
  ops::GdnInputStage s;
  s.channels = cd;
  s.conv_k = cfg_.conv_k;
  s.conv_w = conv_w_.data();
  s.conv_taps = conv_taps_.data();
  s.hk = d.hk;
  s.dk = d.dk;
  s.eps = 1e-6f;
  s.qscale = 1.0f / std::sqrt(static_cast<float>(d.dk));
  s.hv = d.hv;
  s.neg_a = neg_a_.data();
  s.dt_bias = dt_bias_.data();
  for (const GdnSegment& sg : segs) {
    for (std::int64_t s0 = 0; s0 < sg.n; s0 += ops::kGdnChunk) {
      const std::int64_t r = sg.row0 + s0, len = std::min(ops::kGdnChunk, sg.n - s0);
      {
        CLEF_PROF_SCOPE("gdn.conv+l2norm+gates");
        ops::gdn_input_stage(s, len, mixed + r * cd, sg.state->conv.data(), u + r * cd, b + r * d.hv, a + r * d.hv,
                             beta + r * d.hv, g + r * d.hv);
      }
      CLEF_PROF_SCOPE("gdn.delta_rule");
      const float* ur = u + r * cd;
      if (bf16_delta_) {
        ops::gated_delta_rule_bf16(d, len, ur, ur + kd, cd, ur + 2 * kd, cd, g + r * d.hv, beta + r * d.hv,
                                   sg.state->rec.data(), o + r * vd);
      } else {
        ops::gated_delta_rule(d, len, ur, ur + kd, cd, ur + 2 * kd, cd, g + r * d.hv, beta + r * d.hv,
                              sg.state->rec.data(), o + r * vd);
      }
    }
  }
  if (ops::linear_takes_quantized(out_) && d.dv % ops::kInt8Block == 0 && !(tiled(cfg_) && !out_grouped_)) {
    // int8 / block-quantized: the gated norm quantizes each head row for out_proj as it writes it
    // (per row; these kernels compute rows independently, so all sequences' rows share the call).
    thread_local ops::Int8Activations q;
    {
      CLEF_PROF_SCOPE("gdn.gated_norm+quantize");
      ops::gated_rms_norm_quantize(o, z, n, d.hv, d.dv, norm_w_.data(), cfg_.eps, o, q);
    }
    CLEF_PROF_SCOPE("gdn.out_proj");
    ops::linear_quantized(q, out_, h, /*accumulate=*/true);  // h += out_proj(...), as ops::linear
    return;
  }
  {
    CLEF_PROF_SCOPE("gdn.gated_norm");
    ops::gated_rms_norm(o, z, n * d.hv, d.dv, norm_w_.data(), cfg_.eps, o);  // per head
  }
  CLEF_PROF_SCOPE("gdn.out_proj");
  if (tiled(cfg_) && !out_grouped_) to_stored(o, n, vd, d.dv, act.head_order.data());  // weight kept tiled
  const ops::LinearOut out{&out_, h, /*accumulate=*/true};
  linear_shared_rows(o, n, rows, std::span<const ops::LinearOut>(&out, 1));
}

}  // namespace clef::nn

// SPDX-License-Identifier: MIT
#include "nn/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/json_reader.h"
#include "core/error.h"

namespace clef::nn {

void linear_shared_rows(const float* x, std::int64_t m, std::span<const RowRange> rows,
                        std::span<const ops::LinearOut> outs) {
  const bool together = rows.size() <= 1 || std::all_of(outs.begin(), outs.end(), [](const ops::LinearOut& o) {
                          return o.w != nullptr && ops::linear_rows_independent(*o.w);
                        });
  if (together) {
    ops::linear_shared(x, m, outs);
    return;
  }
  const std::int64_t k = outs.empty() || outs[0].w == nullptr ? 0 : outs[0].w->k();
  std::vector<ops::LinearOut> part(outs.begin(), outs.end());
  for (const RowRange& r : rows) {
    for (std::size_t i = 0; i < outs.size(); ++i) part[i].y = outs[i].y + r.row0 * outs[i].w->n();
    ops::linear_shared(x + r.row0 * k, r.n, part);
  }
}

ops::GemmWeight linear_weight(const WeightView& w, ops::Precision p, const std::string& name) {
  if (!w.valid() || w.shape().size() != 2) {
    throw ModelLoadError("linear weight " + name + " is missing or not 2-D");
  }
  if (is_block_quantized(w.dtype()) && w.dtype() != DType::kQ8_0 && !ops::quant_type_of(w.dtype())) {
    throw Unsupported(*w.file + ": tensor " + w.info->name + " (" + name + ") has block type " +
                      std::string(dtype_name(w.dtype())) + ", which clef's linear layers do not run");
  }
  if (ops::quant_type_of(w.dtype())) {
    const std::int64_t be = ops::quant_block_elems(*ops::quant_type_of(w.dtype()));
    if (w.shape()[1] % be != 0) {
      throw ModelLoadError(*w.file + ": tensor " + w.info->name + " (" + name + ") is " +
                           std::string(dtype_name(w.dtype())) + " with rows of " + std::to_string(w.shape()[1]) +
                           " elements, not whole blocks of " + std::to_string(be));
    }
  }
  return ops::GemmWeight(w.dtype(), w.bytes.data(), w.shape()[0], w.shape()[1], p);
}

std::vector<float> small_f32(const WeightView& w, const std::string& name) {
  if (!w.valid()) throw ModelLoadError("tensor " + name + " is missing");
  if (w.stored != StoredAs::kParameter) {
    throw InternalError("tensor " + name +
                        " is stored as a function of its parameter; small_f32 reads parameters only");
  }
  return w.to_f32();
}

std::vector<float> offset_norm_f32(const WeightView& w, const std::string& name) {
  if (!w.valid()) throw ModelLoadError("tensor " + name + " is missing");
  std::vector<float> v = w.to_f32();
  if (w.stored == StoredAs::kParameter) return v;
  if (w.stored != StoredAs::kOnePlus) throw InternalError("tensor " + name + ": not an offset RMSNorm weight");
  for (std::size_t j = 0; j < v.size(); ++j) {
    const float u = v[j];
    const float c = u - 1.0f;
    float found = c;
    bool ok = std::isfinite(u) && 1.0f + c == u;
    for (const float cand : {std::nextafter(c, -INFINITY), std::nextafter(c, INFINITY)}) {
      if (!ok && std::isfinite(u) && 1.0f + cand == u) {
        found = cand;
        ok = true;
      }
    }
    if (!ok) {
      throw ModelLoadError(*w.file + ": tensor " + name + "[" + std::to_string(j) + "] = " + std::to_string(u) +
                           " is not 1 + w for any float w (GGUF stores offset RMSNorm weights as 1 + w)");
    }
    v[j] = found;
  }
  return v;
}

float snap_neg_exp_to_bf16_log(float a) {
  if (!(a < 0.0f) || !std::isfinite(a)) return a;
  std::uint32_t abits;
  std::memcpy(&abits, &a, sizeof abits);
  const std::uint16_t b0 = f32_to_bf16(std::log(-a));
  float best = a;
  std::uint32_t best_dist = 2;  // more than one ulp: keep the stored value
  for (const int step : {-1, 0, 1}) {
    const auto b = static_cast<std::uint16_t>(b0 + step);
    const float cand = -std::exp(bf16_to_f32(b));
    if (!std::isfinite(cand) || !(cand < 0.0f)) continue;
    std::uint32_t cbits;
    std::memcpy(&cbits, &cand, sizeof cbits);
    const std::uint32_t dist = cbits > abits ? cbits - abits : abits - cbits;  // both negative: ulps apart
    if (dist < best_dist) {
      best = cand;
      best_dist = dist;
    }
  }
  return best;
}

namespace {

// True when a == -std::exp(b) exactly for a bf16 b near log(-a) (a < 0).
bool is_neg_exp_of_bf16(float a) {
  if (!(a < 0.0f) || !std::isfinite(a)) return false;
  const std::uint16_t b0 = f32_to_bf16(std::log(-a));
  for (const int step : {-1, 0, 1}) {
    if (-std::exp(bf16_to_f32(static_cast<std::uint16_t>(b0 + step))) == a) return true;
  }
  return false;
}

}  // namespace

std::vector<float> neg_exp_a(const WeightView& w, const std::string& name) {
  if (!w.valid()) throw ModelLoadError("tensor " + name + " is missing");
  std::vector<float> v = w.to_f32();
  if (w.stored == StoredAs::kParameter) {
    for (float& x : v) x = -std::exp(x);
    return v;
  }
  if (w.stored != StoredAs::kNegExp) throw InternalError("tensor " + name + ": not a GDN decay");
  std::vector<float> snapped(v.size());
  bool every_one_explained = true;
  for (std::size_t j = 0; j < v.size(); ++j) {
    if (!(v[j] <= 0.0f) || !std::isfinite(v[j])) {
      throw ModelLoadError(*w.file + ": tensor " + name + "[" + std::to_string(j) + "] = " + std::to_string(v[j]) +
                           " is not a decay A = -exp(A_log) (must be <= 0 and finite)");
    }
    snapped[j] = snap_neg_exp_to_bf16_log(v[j]);
    // Explained: within one ulp of -expf of a bf16 A_log (the snap moved it, or it already equals one).
    every_one_explained = every_one_explained && (snapped[j] != v[j] || is_neg_exp_of_bf16(v[j]));
  }
  // Only a tensor whose every decay comes from a bf16 A_log is moved: for an fp32 A_log an element can
  // lie within an ulp of such a value by chance, and moving it alone would change a correct A.
  return every_one_explained ? snapped : v;
}

}  // namespace clef::nn

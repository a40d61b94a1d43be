// SPDX-License-Identifier: MIT
// Helpers that turn checkpoint WeightViews into what the ops consume.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/weight_store.h"
#include "ops/gemm.h"

namespace clef::nn {

/// Rows [row0, row0 + n) of a batched chunk: one sequence's new tokens among the rows of several
/// sequences stacked in one activation buffer (docs/ARCHITECTURE.md "Batched prefill").
struct RowRange {
  std::int64_t row0 = 0;
  std::int64_t n = 0;
};

/// The row ranges of a batched chunk's segments (anything with row0 and n), checked to tile [0, m)
/// in order (each n >= 1) with m <= capacity (the activations' rows); returns m. Throws
/// InvalidArgument naming `what` otherwise.
template <class Segment>
std::int64_t row_ranges(std::span<const Segment> segs, std::int64_t capacity, const char* what,
                        std::vector<RowRange>& out) {
  out.clear();
  std::int64_t m = 0;
  for (const Segment& s : segs) {
    if (s.row0 != m || s.n < 1) {
      throw InvalidArgument(std::string(what) + ": segment at row " + std::to_string(s.row0) + " of " +
                            std::to_string(s.n) + " rows does not follow the previous ones (next row " +
                            std::to_string(m) + ")");
    }
    out.push_back({s.row0, s.n});
    m += s.n;
  }
  if (m < 1 || m > capacity) {
    throw InvalidArgument(std::string(what) + ": a chunk of " + std::to_string(m) + " rows, activations for " +
                          std::to_string(capacity));
  }
  return m;
}

/// ops::linear_shared over x [m, k] whose rows belong to the sequences `rows` (consecutive ranges
/// covering [0, m) in order), each y [m, w->n()] row-major: one call on all m rows when every weight
/// computes rows independently of each other (ops::linear_rows_independent), else one call per
/// range, so that each row gets exactly the bits its sequence's rows alone would get. Throws as
/// ops::linear_shared does.
void linear_shared_rows(const float* x, std::int64_t m, std::span<const RowRange> rows,
                        std::span<const ops::LinearOut> outs);

/// GemmWeight over a 2-D checkpoint tensor [out, in] (zero-copy where the precision allows).
/// A block-quantized weight in Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0 or Q5_1 runs its own kernels
/// (ops/quant_gemm.h) whatever `p` says: a quantized file chooses its path.
/// Throws ModelLoadError when the view is absent or not 2-D (or a block type's rows are not whole
/// blocks), Unsupported for a Q8_0 weight with a precision other than kInt8 (naming the file and
/// tensor, telling to use --precision int8) and for another block type (naming tensor and type).
ops::GemmWeight linear_weight(const WeightView& w, ops::Precision p, const std::string& name);

/// The tensor's elements as float (small tensors: norms, A_log, dt_bias, conv taps).
/// Throws ModelLoadError when absent or when it is not stored as the parameter itself
/// (w.stored != kParameter: use offset_norm_f32 / neg_exp_a).
std::vector<float> small_f32(const WeightView& w, const std::string& name);

/// The weight w of an offset RMSNorm (docs/MODEL.md §2.2: y = x̂ · (1 + w), the kernels compute
/// 1.0f + w[j] in fp32), [n] fp32. kParameter: w as stored. kOnePlus (GGUF: u = fp32(1 + w)
/// stored): a v with fp32(1.0f + v) == u bit for bit, so the kernel's factor equals the stored u
/// and a GGUF made from a folder gives the folder's numbers exactly. v = u - 1 (exact for every u
/// that is a rounded 1 + w except -2^24, checked over all 2^32 floats), else the neighbour of v
/// that rounds back. Throws ModelLoadError naming the tensor when no float v does (u not of the
/// form fp32(1 + w)), or when absent.
std::vector<float> offset_norm_f32(const WeightView& w, const std::string& name);

/// A = -exp(A_log) of a GDN layer, [Hv] fp32, as ops::gdn_gates consumes it. kParameter (A_log
/// stored): -std::exp(float) per element, what the CPU kernels computed from A_log before
/// this was hoisted to load time. kNegExp (GGUF ssm_a): each stored A through
/// snap_neg_exp_to_bf16_log when every element of the tensor is within one ulp of -expf of a bf16
/// value (else the stored A unchanged), so a GGUF converted from a folder with bf16 A_log gives the
/// folder's A bit for bit although the converter's exp (torch, fp32) differs from expf by one ulp for
/// some inputs. Throws ModelLoadError when absent, or when a stored A is not <= 0 and finite (naming
/// the tensor and the index).
std::vector<float> neg_exp_a(const WeightView& w, const std::string& name);

/// The A a folder computes, -std::exp(b), when the stored decay `a` is within one ulp of
/// -expf(b) for a bfloat16 b (the three bf16 values around log(-a) are tried; the closest wins):
/// the converter computed a from that bf16 A_log with an exp that may round differently. Otherwise
/// (a >= 0, or no bf16 A_log explains it: an fp32 A_log) `a` itself. docs/GGUF.md "Bit-identical
/// answers".
float snap_neg_exp_to_bf16_log(float a);

}  // namespace clef::nn

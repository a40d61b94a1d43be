// SPDX-License-Identifier: MIT
// SwiGLU MLP block (docs/MODEL.md §5): h += down( silu(gate(x)) * up(x) ).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/weight_store.h"
#include "nn/linear.h"
#include "ops/gemm.h"

namespace clef::nn {

/// The activation buffers of SwiGluMlp::forward for chunks of up to `rows` tokens (shared by every
/// MLP of a model).
struct MlpActivations {
  std::int64_t rows = 0;    ///< capacity in tokens
  std::vector<float> gate;  ///< [rows, I]: gate_proj output, then silu(gate) · up
  std::vector<float> up;    ///< [rows, I]: up_proj output

  MlpActivations() = default;
  MlpActivations(std::int64_t intermediate, std::int64_t rows);
  std::size_t floats() const noexcept { return gate.size() + up.size(); }
};

class SwiGluMlp {
 public:
  SwiGluMlp() = default;
  /// gate, up [I, H]; down [H, I]. `name` prefixes error messages.
  SwiGluMlp(const WeightView& gate, const WeightView& up, const WeightView& down, ops::Precision p,
            const std::string& name);
  /// x [n, H] (normalized input); h [n, H] residual stream, h += MLP(x). `act` holds the
  /// intermediates; throws InvalidArgument when n exceeds act.rows or act is sized for another I.
  void forward(const float* x, std::int64_t n, float* h, MlpActivations& act) const;

  /// forward() over the rows of several sequences stacked in x, h [m, H] (`rows`: consecutive ranges
  /// covering [0, m) in order): the MLP is per row, so only the GEMMs see the ranges
  /// (nn::linear_shared_rows). Each row gets exactly the bits forward() gives it with its sequence's
  /// rows alone. Throws InvalidArgument when m exceeds act.rows or the ranges do not tile [0, m).
  void forward_batch(const float* x, std::span<const RowRange> rows, float* h, MlpActivations& act) const;

 private:
  ops::GemmWeight gate_, up_, down_;
  std::int64_t inter_ = 0;
};

}  // namespace clef::nn

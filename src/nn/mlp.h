// SwiGLU MLP block (docs/MODEL.md §5): h += down( silu(gate(x)) * up(x) ).
#pragma once

#include <cstdint>
#include <string>

#include "io/weight_store.h"
#include "nn/scratch.h"
#include "ops/gemm.h"

namespace clef::nn {

class SwiGluMlp {
 public:
  SwiGluMlp() = default;
  /// gate, up [I, H]; down [H, I]. `name` prefixes error messages.
  SwiGluMlp(const WeightView& gate, const WeightView& up, const WeightView& down, ops::Precision p,
            const std::string& name);
  /// x [n, H] (normalized input); h [n, H] residual stream, h += MLP(x). Uses scratch slots
  /// kSlotBase.. kSlotBase+1.
  void forward(const float* x, std::int64_t n, float* h, Scratch& s) const;

  static constexpr std::size_t kSlotBase = 20;

 private:
  ops::GemmWeight gate_, up_, down_;
  std::int64_t inter_ = 0;
};

}  // namespace clef::nn

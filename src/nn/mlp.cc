// SPDX-License-Identifier: MIT
#include "nn/mlp.h"

#include <string>

#include "core/error.h"
#include "nn/linear.h"
#include "ops/int8_gemm.h"
#include "ops/ops.h"
#include "ops/profile.h"

namespace clef::nn {

SwiGluMlp::SwiGluMlp(const WeightView& gate, const WeightView& up, const WeightView& down, ops::Precision p,
                     const std::string& name)
    : gate_(linear_weight(gate, p, name + ".gate_proj")),
      up_(linear_weight(up, p, name + ".up_proj")),
      down_(linear_weight(down, p, name + ".down_proj")),
      inter_(gate_.n()) {}

MlpActivations::MlpActivations(std::int64_t intermediate, std::int64_t n)
    : rows(n), gate(static_cast<std::size_t>(n * intermediate)), up(gate.size()) {}

void SwiGluMlp::forward(const float* x, std::int64_t n, float* h, MlpActivations& act) const {
  const RowRange one{0, n};
  forward_batch(x, std::span<const RowRange>(&one, 1), h, act);
}

void SwiGluMlp::forward_batch(const float* x, std::span<const RowRange> rows, float* h, MlpActivations& act) const {
  thread_local std::vector<RowRange> checked;
  const std::int64_t n = row_ranges(rows, act.rows, "mlp", checked);
  if (act.gate.size() < static_cast<std::size_t>(act.rows * inter_)) {
    throw InvalidArgument("mlp: activations sized for another layer");
  }
  float* g = act.gate.data();
  float* u = act.up.data();
  {
    CLEF_PROF_SCOPE("mlp.gate_up");
    const ops::LinearOut outs[] = {{&gate_, g}, {&up_, u}};
    linear_shared_rows(x, n, rows, outs);
  }
  if (ops::linear_takes_quantized(down_)) {  // int8 / block-quantized: SwiGLU quantizes its rows for down_proj
    thread_local ops::Int8Activations q;
    {
      CLEF_PROF_SCOPE("mlp.silu_mul+quantize");
      ops::silu_mul_quantize(g, u, n, inter_, g, q);
    }
    CLEF_PROF_SCOPE("mlp.down");
    ops::linear_quantized(q, down_, h, /*accumulate=*/true);  // h += down(...), as ops::linear
    return;
  }
  {
    CLEF_PROF_SCOPE("mlp.silu_mul");
    ops::silu_mul(g, u, n * inter_, g);
  }
  CLEF_PROF_SCOPE("mlp.down");
  const ops::LinearOut out{&down_, h, /*accumulate=*/true};  // h += down(...)
  linear_shared_rows(g, n, rows, std::span<const ops::LinearOut>(&out, 1));
}

}  // namespace clef::nn

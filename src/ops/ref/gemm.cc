// SPDX-License-Identifier: MIT
// Scalar reference of linear(): y = x W^T with double accumulation.
#include <vector>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "ops/gemm.h"

namespace clef::ops::ref {

void linear(const float* x, std::int64_t m, DType dtype, const void* w, std::int64_t n, std::int64_t k, float* y,
            bool accumulate, Precision p) {
  if (m <= 0 || n <= 0 || k <= 0) throw InvalidArgument("ref::linear: sizes must be positive");
  const auto* bytes = static_cast<const std::byte*>(w);
  const std::size_t es = dtype_size(dtype);
  auto round = [p](float f) { return p == Precision::kBF16 ? bf16_to_f32(f32_to_bf16(f)) : f; };
  std::vector<float> row(static_cast<std::size_t>(k));
  for (std::int64_t j = 0; j < n; ++j) {
    convert_to_f32(dtype, bytes + static_cast<std::size_t>(j * k) * es, row.size(), row.data());
    for (float& f : row) f = round(f);
    for (std::int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (std::int64_t e = 0; e < k; ++e) {
        acc += static_cast<double>(round(x[i * k + e])) * static_cast<double>(row[static_cast<std::size_t>(e)]);
      }
      float& out = y[i * n + j];
      out = accumulate ? out + static_cast<float>(acc) : static_cast<float>(acc);
    }
  }
}

}  // namespace clef::ops::ref

// Helpers that turn checkpoint WeightViews into what the ops consume.
#pragma once

#include <string>
#include <vector>

#include "io/weight_store.h"
#include "ops/gemm.h"

namespace clef::nn {

/// GemmWeight over a 2-D checkpoint tensor [out, in] (zero-copy where the precision allows).
/// Throws ModelLoadError when the view is absent or not 2-D.
ops::GemmWeight linear_weight(const WeightView& w, ops::Precision p, const std::string& name);

/// The tensor's elements as float (small tensors: norms, A_log, dt_bias, conv taps).
/// Throws ModelLoadError when absent.
std::vector<float> small_f32(const WeightView& w, const std::string& name);

}  // namespace clef::nn

#include "nn/linear.h"

#include "core/error.h"

namespace clef::nn {

ops::GemmWeight linear_weight(const WeightView& w, ops::Precision p, const std::string& name) {
  if (!w.valid() || w.shape().size() != 2) {
    throw ModelLoadError("linear weight " + name + " is missing or not 2-D");
  }
  return ops::GemmWeight(w.dtype(), w.bytes.data(), w.shape()[0], w.shape()[1], p);
}

std::vector<float> small_f32(const WeightView& w, const std::string& name) {
  if (!w.valid()) throw ModelLoadError("tensor " + name + " is missing");
  return w.to_f32();
}

}  // namespace clef::nn

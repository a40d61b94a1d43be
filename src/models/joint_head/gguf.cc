// SPDX-License-Identifier: MIT
#include "models/joint_head/gguf.h"

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"

namespace clef {
namespace {

/// Moves head tensors from the GGUF store into the fp32 head store under new names.
class HeadCopier {
 public:
  HeadCopier(WeightStore& gguf, WeightStore& head) : gguf_(gguf), head_(head), file_(gguf.label()) {}

  std::vector<float> read(const std::string& name, const std::vector<std::int64_t>& shape) {
    return gguf_.take_dequantizable(name, shape).to_f32();
  }
  void copy(const std::string& from, const std::string& to, const std::vector<std::int64_t>& shape) {
    head_.add_owned_f32(to, shape, read(from, shape), file_);
  }
  void layer_norm(const std::string& from, const std::string& to, std::int64_t n) {
    copy(from + ".weight", to + ".weight", {n});
    copy(from + ".bias", to + ".bias", {n});
  }
  /// GGUF `<p>q`, `<p>k`, `<p>v` (.weight [W, W], .bias [W]) and `<p>o` -> nn.MultiheadAttention `to`.
  void attention(const std::string& p, const std::string& to, std::int64_t w) {
    std::vector<float> weight, bias;
    for (const char* x : {"q", "k", "v"}) {
      const std::vector<float> a = read(p + x + ".weight", {w, w});
      const std::vector<float> b = read(p + x + ".bias", {w});
      weight.insert(weight.end(), a.begin(), a.end());
      bias.insert(bias.end(), b.begin(), b.end());
    }
    head_.add_owned_f32(to + ".in_proj_weight", {3 * w, w}, std::move(weight), file_);
    head_.add_owned_f32(to + ".in_proj_bias", {3 * w}, std::move(bias), file_);
    copy(p + "o.weight", to + ".out_proj.weight", {w, w});
    copy(p + "o.bias", to + ".out_proj.bias", {w});
  }
  void linear(const std::string& from, const std::string& to, std::int64_t out, std::int64_t in) {
    copy(from + ".weight", to + ".weight", {out, in});
    copy(from + ".bias", to + ".bias", {out});
  }

 private:
  WeightStore& gguf_;
  WeightStore& head_;
  std::string file_;
};

}  // namespace

JointHeadConfig joint_head_config_from_gguf(const GgufFile& g, std::int64_t hidden_size) {
  const std::int64_t routing = g.get_int("clef.decision.routing_block_count");
  const std::int64_t layers = g.get_int("clef.decision.block_count");
  const std::int64_t heads = g.get_int("clef.decision.head_count");
  if (g.find_value("clef.attention.layer_norm_epsilon") != nullptr) {
    const double eps = g.get_float("clef.attention.layer_norm_epsilon");
    if (std::abs(eps - 1e-5) > 1e-12) {
      throw ModelLoadError(g.label() +
                           ": metadata \"clef.attention.layer_norm_epsilon\": the head's LayerNorm eps is " +
                           std::to_string(eps) + "; clef's joint head uses 1e-5 (torch.nn.LayerNorm's default)");
    }
  }
  const std::string why = "the clef layout's head sizes come from its shape";
  const GgufTensorInfo& mem = g.need_tensor("decision.proj_memory.weight", 2, why);
  const GgufTensorInfo& up = g.need_tensor("dec.blk.0.ffn_up.weight", 2, why);
  if (mem.ne[0] != hidden_size) {
    throw ModelLoadError(g.label() + ": tensor decision.proj_memory.weight reads " + std::to_string(mem.ne[0]) +
                         " features but the backbone's embedding_length is " + std::to_string(hidden_size));
  }
  nlohmann::json j = {{"hidden_size", hidden_size}, {"width", mem.ne[1]}, {"routing_layers", routing},
                      {"layers", layers},           {"heads", heads},     {"feedforward", up.ne[1]}};
  return parse_joint_head_config(j, g.label() + " clef.decision.* metadata and head tensor shapes");
}

std::unique_ptr<WeightStore> gguf_joint_head_store(WeightStore& gguf, const JointHeadConfig& c) {
  auto head = std::make_unique<WeightStore>();
  HeadCopier h(gguf, *head);
  const std::int64_t H = c.hidden_size, W = c.width, F = c.feedforward, R = c.routing_layers;
  h.layer_norm("decision.hidden_norm", "hidden_norm", H);
  for (const char* x : {"memory", "question", "option_question", "global", "option_context", "option_lexical"}) {
    h.copy(std::string("decision.proj_") + x + ".weight", std::string(x) + "_projection.weight", {W, H});
  }
  h.copy("token_types.weight", "type_embedding.weight", {3, W});
  for (std::int64_t i = 0; i < R; ++i) {
    const std::string p = "dec.blk." + std::to_string(i) + ".", to = "evidence_layers." + std::to_string(i) + ".";
    h.layer_norm(p + "cross_attn_norm", to + "query_norm", W);
    h.layer_norm(p + "cross_attn_norm_kv", to + "memory_norm", W);
    h.attention(p + "cross_attn_", to + "attention", W);
    h.layer_norm(p + "ffn_norm", to + "feedforward_norm", W);
    h.linear(p + "ffn_up", to + "feedforward.0", F, W);
    h.linear(p + "ffn_down", to + "feedforward.3", W, F);
  }
  for (std::int64_t j = 0; j < c.layers; ++j) {
    const std::string p = "dec.blk." + std::to_string(R + j) + ".", to = "layers." + std::to_string(j) + ".";
    h.layer_norm(p + "attn_norm", to + "norm1", W);
    h.layer_norm(p + "cross_attn_norm", to + "norm2", W);
    h.layer_norm(p + "ffn_norm", to + "norm3", W);
    h.attention(p + "attn_", to + "self_attn", W);
    h.attention(p + "cross_attn_", to + "multihead_attn", W);
    h.linear(p + "ffn_up", to + "linear1", F, W);
    h.linear(p + "ffn_down", to + "linear2", W, F);
  }
  for (const char* n : {"option_summary_norm", "field_norm", "option_norm"})
    h.layer_norm(std::string("decision.") + n, n, W);
  h.linear("decision.scorer", "residual_scorer.0", W, 4 * W);
  // The scorer's output row: declared [W, 1] in ggml order ([1, W] in PyTorch's), written 1-D [W]
  // by converters that drop the trailing 1.
  const TensorInfo* out = gguf.find("decision.scorer_out.weight");
  const bool flat = out != nullptr && out->shape.size() == 1;
  head->add_owned_f32("residual_scorer.3.weight", {1, W},
                      h.read("decision.scorer_out.weight",
                             flat ? std::vector<std::int64_t>{W} : std::vector<std::int64_t>{1, W}),
                      gguf.label());
  h.copy("decision.scorer_out.bias", "residual_scorer.3.bias", {1});
  h.copy("decision.scales", "decision.scales", {3});
  return head;
}

}  // namespace clef

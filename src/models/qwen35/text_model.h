// SPDX-License-Identifier: MIT
// The Qwen3.5 text backbone (docs/MODEL.md §2.1): embedding, L decoder layers (Gated DeltaNet
// or gated full attention, each followed by a SwiGLU MLP, pre-norm with offset RMSNorm), final
// norm. forward_chunk() runs one chunk of tokens against a carried ModelState and writes the
// final-norm hidden rows of that chunk.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "io/hf_config.h"
#include "models/qwen35/weights.h"
#include "nn/attention.h"
#include "nn/gated_deltanet.h"
#include "nn/mlp.h"
#include "nn/state.h"
#include "ops/gemm.h"

namespace clef::qwen35 {

struct TextModelOptions {
  ops::Precision precision = ops::Precision::kF32;
};

/// The activation buffers of TextModel::forward_chunk for chunks of up to `rows` tokens, sized once
/// from the config by TextModel::activations(): the residual stream, the normed input of the
/// current block, the chunk's rotary tables, and one set per block kind (the layers of a kind run
/// one after another and share it). O(rows); only the state grows with the sequence.
struct TextActivations {
  std::int64_t rows = 0;               ///< capacity in tokens
  std::vector<float> hidden;           ///< [rows, H] residual stream
  std::vector<float> normed;           ///< [rows, H] normalized input of the current block
  std::vector<float> rope;             ///< cos then sin, [n, rotary_dim/2] each for a chunk of n
  nn::GdnActivations gdn;              ///< Gated DeltaNet layers
  nn::AttentionActivations attention;  ///< full-attention layers
  nn::MlpActivations mlp;              ///< every layer's MLP

  /// Floats held by all the buffers.
  std::size_t floats() const noexcept;
};

class TextModel {
 public:
  /// Binds the layers to `w` (views into the release's mmapped files, which must outlive this
  /// object). Throws ModelLoadError / Unsupported for inconsistent configs or tensors.
  TextModel(const TextConfig& cfg, const TextWeights& w, const TextModelOptions& opt);

  /// A fresh state (zero conv/recurrent states, empty KV caches, position 0).
  nn::ModelState new_state() const;

  /// Activation buffers for chunks of up to `rows` (>= 1) tokens.
  TextActivations activations(std::int64_t rows) const;

  /// Runs n = ids.size() >= 1 tokens that follow the tokens already in `st`, updating it, with
  /// intermediates in `act` (activations(r) for some r >= n; InvalidArgument otherwise).
  /// positions: optional [3, n] M-RoPE positions (t, h, w streams); when empty, text positions
  /// st.next_position + i on all three streams. out [n, H]: final-norm hidden rows (fp32).
  /// Throws InvalidArgument for an id outside the vocabulary or a bad positions size.
  /// embeds: optional [n, H] fp32 input rows used instead of the embedding rows of `ids` (the
  /// multimodal path: text rows gathered with embed() and image rows scattered in, §6.9); `ids`
  /// still gives n.
  void forward_chunk(std::span<const std::int32_t> ids, std::span<const std::int32_t> positions, nn::ModelState& st,
                     float* out, TextActivations& act, const float* embeds = nullptr) const;

  /// The embedding rows of `ids`: out [n, H] fp32. Throws InvalidArgument for an id outside the
  /// vocabulary.
  void embed(std::span<const std::int32_t> ids, float* out) const;

  const TextConfig& config() const noexcept { return cfg_; }
  std::int64_t hidden_size() const noexcept { return cfg_.hidden_size; }
  ops::Precision precision() const noexcept { return opt_.precision; }

 private:
  struct Layer {
    LayerType type = LayerType::kLinearAttention;
    std::vector<float> input_norm, post_norm;  ///< offset weights [H]
    nn::GatedDeltaNet gdn;
    nn::GatedAttention attn;
    nn::SwiGluMlp mlp;
  };
  TextConfig cfg_;
  TextModelOptions opt_;
  nn::GdnConfig gdn_cfg_;         ///< shapes of every GDN layer (v_heads_tiled aside)
  nn::AttentionConfig attn_cfg_;  ///< shapes of every full-attention layer
  WeightView embed_;
  std::vector<Layer> layers_;
  std::vector<float> final_norm_;
  ops::RopeDims rope_;
};

}  // namespace clef::qwen35

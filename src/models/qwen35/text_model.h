// SPDX-License-Identifier: MIT
// The Qwen3.5 text backbone (docs/MODEL.md §2.1): embedding, L decoder layers (Gated DeltaNet
// or gated full attention, each followed by a SwiGLU MLP, pre-norm with offset RMSNorm), final
// norm. forward_chunk() runs one chunk of tokens against a carried ModelState and writes the
// final-norm hidden rows of that chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "io/hf_config.h"
#include "models/qwen35/weights.h"
#include "nn/attention.h"
#include "nn/gated_deltanet.h"
#include "nn/linear.h"
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

/// One sequence's new tokens in a batched chunk (TextModel::forward_batch).
struct SequenceChunk {
  std::span<const std::int32_t> ids;        ///< n >= 1 tokens that follow those already in `state`
  std::span<const std::int32_t> positions;  ///< optional [3, n] M-RoPE positions (empty: text positions)
  nn::ModelState* state = nullptr;          ///< this sequence's state, updated
  const float* embeds = nullptr;            ///< optional [n, H] input rows (the multimodal path)
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

  /// forward_chunk() for several sequences at once (continuous batching; docs/ARCHITECTURE.md
  /// "Batched prefill"): their tokens are stacked into one chunk of m = Σ n rows (act.rows >= m), the
  /// per-row work (embedding, norms, rotary, MLP, and every GEMM whose kernel computes rows
  /// independently: ops::linear_rows_independent) runs once on all rows, the conv, the delta rule
  /// and attention per sequence on its own state. out [m, H]: the sequences' final-norm rows in the
  /// order given. Each sequence's rows and state are bit-identical to what forward_chunk gives it
  /// alone (the GEMMs that do not compute rows independently run per sequence). The states must be
  /// distinct. Throws as forward_chunk, per sequence, before any state changes.
  /// `between_layers`, when given, is called after each decoder layer but the last, outside every
  /// parallel region (the batcher runs other sequences' short steps there, with other activations;
  /// it must not touch these sequences' states or `act`).
  void forward_batch(std::span<const SequenceChunk> seqs, float* out, TextActivations& act,
                     const std::function<void()>& between_layers = {}) const;

  /// The embedding rows of `ids`: out [n, H] fp32. Throws InvalidArgument for an id outside the
  /// vocabulary.
  void embed(std::span<const std::int32_t> ids, float* out) const;

  const TextConfig& config() const noexcept { return cfg_; }
  std::int64_t hidden_size() const noexcept { return cfg_.hidden_size; }
  /// Rows of the embedding table: the ids forward_batch accepts are [0, vocab_rows()).
  std::int64_t vocab_rows() const noexcept { return embed_.shape()[0]; }
  ops::Precision precision() const noexcept { return opt_.precision; }

 private:
  struct Layer {
    LayerType type = LayerType::kLinearAttention;
    std::vector<float> input_norm, post_norm;  ///< offset weights [H]
    nn::GatedDeltaNet gdn;
    nn::GatedAttention attn;
    nn::SwiGluMlp mlp;
  };
  /// The decoder layers and the final norm over the stacked rows of forward_batch (rows: each
  /// sequence's range), the input rows and rotary tables already in `act`.
  void run_layers(std::span<const SequenceChunk> seqs, std::span<const nn::RowRange> rows, std::int64_t m, float* out,
                  TextActivations& act, const std::function<void()>& between_layers) const;
  /// A sequence's token count and next position after its chunk.
  static void advance_state(const SequenceChunk& s);
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

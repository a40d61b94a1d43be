// SPDX-License-Identifier: MIT
// The backbone runtime: a Qwen3.5 text model bound to a release folder, run as a
// chunked prefill over a per-sequence state, delivering final-norm hidden rows chunk by chunk.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "models/qwen35/text_model.h"
#include "ops/gemm.h"
#include "runtime/release.h"
#include "runtime/state.h"
#include "runtime/step_batcher.h"

namespace clef {

/// `<|endoftext|>`, the pad id of the seed's static-shape readout.
inline constexpr std::int32_t kEndOfTextId = 248044;
/// Rows per call of the seed's static-shape readout (docs/MODEL.md §14, readout).
inline constexpr std::int64_t kStaticReadoutRows = 64;

/// Where fp32 mode reads the linear weights of a BF16/F16 checkpoint from (`--fp32-weights`).
enum class Fp32Weights {
  /// kResident when the fp32 copies take at most a quarter of the machine's memory
  /// (fp32_weights_resident()), else kStream. The default.
  kAuto,
  /// Widen each weight to fp32 per call, panel by panel (memory = the mmapped file).
  kStream,
  /// Keep fp32 copies (4 bytes per parameter; faster prefill, same results).
  kResident,
};

struct BackboneOptions {
  /// Numeric mode: kF32 (parity) or kBF16 (bf16 weights and GEMM inputs, fp32 accumulation,
  /// fp32 norms / states / residual stream).
  ops::Precision precision = ops::Precision::kF32;
  /// fp32 mode on a BF16/F16 checkpoint: fp32 copies of the linear weights or widening per call
  /// (ops::set_fp32_resident_weights); answers are identical either way.
  Fp32Weights fp32_weights = Fp32Weights::kAuto;
  /// Tokens per prefill chunk (>= 1). Activation memory is O(chunk_size).
  std::int64_t chunk_size = 512;
  /// Seed-000 static-shape readout: run ceil(T/64) calls of exactly 64 positions, the last one
  /// padded with <|endoftext|>, discarding padded rows. Overrides chunk_size. The pads stay in
  /// the state afterwards (as in the Apple export); fork before if the state is reused.
  bool padded_readout = false;
  /// Pad id of the static-shape readout; -1 = the release tokenizer's `<|endoftext|>` id, else
  /// kEndOfTextId (248044).
  std::int32_t pad_id = -1;
  /// Threads of the one engine pool (OpenMP, shared with oneDNN); <= 0 = all available CPUs.
  int threads = 0;
};

/// Receives hidden rows as they are produced: rows [count, hidden] for sequence indices
/// first_row .. first_row + count - 1 (indices count from the start of the state's sequence).
/// `rows` is only valid during the call.
using HiddenConsumer =
    std::function<void(std::int64_t first_row, const float* rows, std::int64_t count, std::int64_t hidden)>;

/// Multimodal inputs of one prefill call (docs/MODEL.md §6.9, §7.1), for exactly the ids of that
/// call.
struct PrefillMedia {
  /// [3, n] M-RoPE positions (t, h, w planes, plane-major: positions[r * n + i]) of the call's n ids.
  std::span<const std::int32_t> positions;
  /// The `<|image_pad|>` id whose embedding rows are replaced.
  std::int32_t image_token_id = -1;
  /// [count, H] fp32 rows replacing, in order, the call's `<|image_pad|>` rows (count must equal
  /// the number of pads among the ids).
  std::span<const float> image_rows;
};

/// Bytes fp32 copies of the text model's non-F32 linear weights (the GEMM operands of every
/// decoder layer) would take: 4 per element; 0 for an F32 checkpoint.
std::uint64_t fp32_copy_bytes(const qwen35::TextWeights& w);

/// Resolves the fp32-weights policy: kResident → true, kStream → false, kAuto → true iff
/// `precision` is fp32 and 0 < copy_bytes <= memory_bytes / 4 (so the 0.8b preset, 2.0 GB of
/// copies, is resident on an 8 GB machine and flash, about 32 GB, streams on every common one).
/// `memory_bytes` is usable_memory_bytes() in the engine.
bool fp32_weights_resident(Fp32Weights policy, ops::Precision precision, std::uint64_t copy_bytes,
                           std::uint64_t memory_bytes) noexcept;

/// Memory this process may use, in bytes: the physical memory, or the smallest memory limit of
/// this process's cgroup and its ancestors when that is smaller (core/platform.h:
/// physical_memory_bytes, memory_limit_bytes).
std::uint64_t usable_memory_bytes();

class Backbone {
 public:
  /// Binds the release's text weights (zero-copy views; `release` must outlive this object) and
  /// sizes the thread pool. Throws InvalidArgument for bad options, ModelLoadError/Unsupported
  /// for a model this engine cannot run.
  Backbone(const ReleaseFolder& release, const BackboneOptions& options);

  /// A fresh state for a new sequence.
  SequenceState new_state() const { return model_.new_state(); }

  /// Appends `ids` to the sequence in `st` (chunked prefill) and hands the final-norm hidden row
  /// of every new token to `consumer`, chunk by chunk. Throws InvalidArgument for a bad id.
  void prefill(std::span<const std::int32_t> ids, SequenceState& st, const HiddenConsumer& consumer);

  /// The same with images: `media` gives the call's positions and the rows that replace its
  /// `<|image_pad|>` embeddings. Throws InvalidArgument when positions are not [3, n] or the pad
  /// count does not match the rows; Unsupported under the static-shape readout.
  void prefill(std::span<const std::int32_t> ids, SequenceState& st, const HiddenConsumer& consumer,
               const PrefillMedia& media);

  /// The general form: `media` may be null (text positions); with `batcher` the chunks run in its
  /// steps, batched with other sequences' (same chunks, same bits: runtime/step_batcher.h), else
  /// here. Returns false, having run only the chunks before it, when `*stop` (if given) was set
  /// before a chunk started; the consumer may also throw to stop. Thread-safe with a batcher (the
  /// buffers are the call's own); without one, one call at a time.
  bool prefill(std::span<const std::int32_t> ids, SequenceState& st, const HiddenConsumer& consumer,
               const PrefillMedia* media, StepBatcher* batcher, const std::atomic<bool>* stop);

  /// Convenience: all hidden rows [T, H] of `ids` from a fresh state.
  std::vector<float> hidden_states(std::span<const std::int32_t> ids);

  const BackboneOptions& options() const noexcept { return options_; }
  /// The pad id the static-shape readout uses.
  std::int32_t pad_id() const noexcept { return pad_id_; }
  std::int64_t hidden_size() const noexcept { return model_.hidden_size(); }
  const qwen35::TextModel& model() const noexcept { return model_; }
  /// Floats held by the activation buffers (O(chunk)).
  std::size_t activation_floats() const noexcept { return act_.floats(); }

 private:
  BackboneOptions options_;
  qwen35::TextModel model_;
  std::int32_t pad_id_ = kEndOfTextId;
  /// Sized from the config for the largest chunk run so far (at most chunk_size, or the 64 rows of
  /// the static-shape readout).
  qwen35::TextActivations act_;
  /// Makes act_ hold chunks of `rows` tokens.
  void reserve_activations(std::int64_t rows);
  /// One chunk of prefill() whose first `real` rows go to the consumer (the rest are the padded
  /// readout's pads); false when withdrawn by `stop`.
  bool run_chunk(const qwen35::SequenceChunk& chunk, std::int64_t real, const HiddenConsumer& consumer,
                 StepBatcher* batcher, const std::atomic<bool>* stop);
  /// Throws InvalidArgument unless `media` fits `ids` (positions [3, n], one image row per pad).
  void check_media(const PrefillMedia& media, std::span<const std::int32_t> ids) const;
  std::vector<float> out_;  ///< the chunk's rows without a batcher
};

}  // namespace clef

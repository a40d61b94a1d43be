// SPDX-License-Identifier: MIT
#include "runtime/backbone.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/platform.h"
#include "ops/parallel.h"

namespace clef {
namespace {

qwen35::TextModelOptions model_options(const ReleaseFolder& release, const BackboneOptions& o) {
  if (o.chunk_size < 1) {
    throw InvalidArgument("backbone: chunk size must be >= 1, got " + std::to_string(o.chunk_size));
  }
  qwen35::TextModelOptions m;
  m.precision = o.precision;
  // Before the model binds its weights (GemmWeight reads the flag when it is made).
  ops::set_fp32_resident_weights(
      fp32_weights_resident(o.fp32_weights, o.precision, fp32_copy_bytes(release.model.text), usable_memory_bytes()));
  return m;
}

void add_copy_bytes(const WeightView& w, std::uint64_t& total) {
  if (w.valid() && w.dtype() != DType::kF32) total += 4 * w.numel();
}

}  // namespace

std::uint64_t fp32_copy_bytes(const qwen35::TextWeights& w) {
  std::uint64_t total = 0;
  for (const auto& layer : w.layers) {
    for (const WeightView* v : {&layer.gate_proj, &layer.up_proj, &layer.down_proj}) add_copy_bytes(*v, total);
    if (layer.linear_attn) {
      const auto& a = *layer.linear_attn;
      for (const WeightView* v : {&a.in_proj_qkv, &a.in_proj_z, &a.in_proj_b, &a.in_proj_a, &a.out_proj}) {
        add_copy_bytes(*v, total);
      }
    }
    if (layer.self_attn) {
      const auto& a = *layer.self_attn;
      for (const WeightView* v : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj}) add_copy_bytes(*v, total);
    }
  }
  return total;
}

bool fp32_weights_resident(Fp32Weights policy, ops::Precision precision, std::uint64_t copy_bytes,
                           std::uint64_t memory_bytes) noexcept {
  switch (policy) {
    case Fp32Weights::kResident: return true;
    case Fp32Weights::kStream: return false;
    case Fp32Weights::kAuto: break;
  }
  return precision == ops::Precision::kF32 && copy_bytes > 0 && copy_bytes <= memory_bytes / 4;
}

std::uint64_t usable_memory_bytes() {
  std::uint64_t bytes = physical_memory_bytes();
  if (const auto limit = memory_limit_bytes(); limit && *limit > 0 && (bytes == 0 || *limit < bytes)) bytes = *limit;
  return bytes;
}

Backbone::Backbone(const ReleaseFolder& release, const BackboneOptions& options)
    : options_(options), model_(release.config.text, release.model.text, model_options(release, options)) {
  ops::set_num_threads(options.threads);
  if (options.pad_id >= 0) {
    pad_id_ = options.pad_id;
  } else {
    for (const auto& [id, content] : release.tokenizer.added) {
      if (content == "<|endoftext|>") pad_id_ = static_cast<std::int32_t>(id);
    }
  }
}

void Backbone::reserve_activations(std::int64_t rows) {
  if (act_.rows < rows) act_ = model_.activations(rows);
}

void Backbone::prefill(std::span<const std::int32_t> ids, SequenceState& st, const HiddenConsumer& consumer) {
  prefill(ids, st, consumer, nullptr, nullptr, nullptr);
}

void Backbone::prefill(std::span<const std::int32_t> ids, SequenceState& st, const HiddenConsumer& consumer,
                       const PrefillMedia& media) {
  prefill(ids, st, consumer, &media, nullptr, nullptr);
}

bool Backbone::run_chunk(const qwen35::SequenceChunk& chunk, std::int64_t real, const HiddenConsumer& consumer,
                         StepBatcher* batcher, const std::atomic<bool>* stop) {
  const std::int64_t first = chunk.state->n_tokens;
  if (batcher != nullptr) {
    return batcher->forward(
        chunk,
        [&](const float* rows, std::int64_t, std::int64_t hidden) {
          if (consumer) consumer(first, rows, real, hidden);
        },
        stop);
  }
  if (stop != nullptr && stop->load(std::memory_order_relaxed)) return false;
  const auto n = static_cast<std::int64_t>(chunk.ids.size());
  const std::int64_t H = model_.hidden_size();
  if (static_cast<std::int64_t>(out_.size()) < n * H) out_.resize(static_cast<std::size_t>(n * H));
  reserve_activations(n);
  model_.forward_chunk(chunk.ids, chunk.positions, *chunk.state, out_.data(), act_, chunk.embeds);
  if (consumer) consumer(first, out_.data(), real, H);
  return true;
}

bool Backbone::prefill(std::span<const std::int32_t> ids, SequenceState& st, const HiddenConsumer& consumer,
                       const PrefillMedia* media, StepBatcher* batcher, const std::atomic<bool>* stop) {
  const auto total = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = model_.hidden_size();
  if (media != nullptr) check_media(*media, ids);
  if (options_.padded_readout) {
    if (media != nullptr) throw Unsupported("prefill: images are not supported with the static-shape (padded) readout");
    std::vector<std::int32_t> call(static_cast<std::size_t>(kStaticReadoutRows));
    for (std::int64_t c0 = 0; c0 < total; c0 += kStaticReadoutRows) {
      const std::int64_t real = std::min(kStaticReadoutRows, total - c0);
      std::copy(ids.begin() + c0, ids.begin() + c0 + real, call.begin());
      std::fill(call.begin() + real, call.end(), pad_id_);
      // The padded rows' hidden states are discarded (the consumer gets the real ones).
      if (!run_chunk(qwen35::SequenceChunk{call, {}, &st, nullptr}, real, consumer, batcher, stop)) return false;
    }
    return true;
  }
  const std::int64_t chunk = options_.chunk_size;
  const std::int64_t cap = std::min(chunk, std::max<std::int64_t>(total, 1));
  std::vector<float> embeds;
  std::vector<std::int32_t> pos;
  if (media != nullptr) {
    embeds.resize(static_cast<std::size_t>(cap * H));
    pos.resize(static_cast<std::size_t>(3 * cap));
  }
  const float* next_image_row = media != nullptr ? media->image_rows.data() : nullptr;
  for (std::int64_t c0 = 0; c0 < total; c0 += chunk) {
    const std::int64_t n = std::min(chunk, total - c0);
    const auto call = ids.subspan(static_cast<std::size_t>(c0), static_cast<std::size_t>(n));
    qwen35::SequenceChunk sc{call, {}, &st, nullptr};
    if (media != nullptr) {
      for (std::int64_t r = 0; r < 3; ++r) {
        std::copy_n(media->positions.begin() + r * total + c0, n, pos.begin() + r * n);
      }
      model_.embed(call, embeds.data());
      // Pad rows are replaced by tower rows, not added to (docs/MODEL.md §6.9).
      for (std::int64_t i = 0; i < n; ++i) {
        if (call[static_cast<std::size_t>(i)] == media->image_token_id) {
          std::copy(next_image_row, next_image_row + H, embeds.begin() + i * H);
          next_image_row += H;
        }
      }
      sc.positions = std::span<const std::int32_t>(pos.data(), static_cast<std::size_t>(3 * n));
      sc.embeds = embeds.data();
    }
    if (!run_chunk(sc, n, consumer, batcher, stop)) return false;
  }
  return true;
}

void Backbone::check_media(const PrefillMedia& media, std::span<const std::int32_t> ids) const {
  const auto total = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = model_.hidden_size();
  if (static_cast<std::int64_t>(media.positions.size()) != 3 * total) {
    throw InvalidArgument("prefill: positions must be [3, " + std::to_string(total) + "], got " +
                          std::to_string(media.positions.size()) + " values");
  }
  const std::int64_t pads = std::count(ids.begin(), ids.end(), media.image_token_id);
  if (media.image_rows.size() != static_cast<std::size_t>(pads * H)) {
    throw InvalidArgument("prefill: " + std::to_string(pads) + " image pad tokens but " +
                          std::to_string(media.image_rows.size() / static_cast<std::size_t>(H)) + " image rows");
  }
}

std::vector<float> Backbone::hidden_states(std::span<const std::int32_t> ids) {
  const std::int64_t H = model_.hidden_size();
  std::vector<float> all(ids.size() * static_cast<std::size_t>(H));
  SequenceState st = new_state();
  prefill(ids, st, [&](std::int64_t first, const float* rows, std::int64_t count, std::int64_t) {
    std::copy(rows, rows + count * H, all.begin() + first * H);
  });
  return all;
}

}  // namespace clef

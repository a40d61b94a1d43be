// SPDX-License-Identifier: MIT
#include "runtime/backbone.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>

#include "core/error.h"
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

namespace {

/// The number in a cgroup limit file ("max" or anything else unreadable: none).
std::optional<std::uint64_t> read_limit(const std::string& path) {
  std::ifstream f(path);
  std::string limit;
  if (!(f >> limit) || limit.empty() || limit.size() >= 20 ||
      !std::all_of(limit.begin(), limit.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoull(limit);
}

/// The smallest limit named `file` in `root`/`path` and each of its ancestors up to `root`.
std::optional<std::uint64_t> chain_limit(const std::string& root, std::string path, const char* file) {
  std::optional<std::uint64_t> best;
  for (;;) {
    if (auto v = read_limit(root + path + (path.empty() || path.back() != '/' ? "/" : "") + file)) {
      if (*v > 0 && (!best || *v < *best)) best = v;
    }
    if (path.empty() || path == "/") break;
    const auto slash = path.find_last_of('/');
    path = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

std::uint64_t usable_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  std::uint64_t bytes =
      pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
  auto take = [&](std::optional<std::uint64_t> v) {
    if (v && *v > 0 && (bytes == 0 || *v < bytes)) bytes = *v;
  };
  // This process's cgroup: "0::/path" (v2) and/or "N:...memory...:/path" (v1), /proc/self/cgroup.
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      take(chain_limit("/sys/fs/cgroup", path, "memory.max"));
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      take(chain_limit("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes"));  // "unlimited" is huge
    }
  }
  take(read_limit("/sys/fs/cgroup/memory.max"));  // a private cgroup namespace's root
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
  const auto total = static_cast<std::int64_t>(ids.size());
  const std::int64_t H = model_.hidden_size();
  if (options_.padded_readout) {
    std::vector<std::int32_t> call(static_cast<std::size_t>(kStaticReadoutRows));
    out_.resize(static_cast<std::size_t>(kStaticReadoutRows * H));
    reserve_activations(kStaticReadoutRows);
    for (std::int64_t c0 = 0; c0 < total; c0 += kStaticReadoutRows) {
      const std::int64_t real = std::min(kStaticReadoutRows, total - c0);
      std::copy(ids.begin() + c0, ids.begin() + c0 + real, call.begin());
      std::fill(call.begin() + real, call.end(), pad_id_);
      const std::int64_t first = st.n_tokens;
      model_.forward_chunk(call, {}, st, out_.data(), act_);
      if (consumer) consumer(first, out_.data(), real, H);  // padded rows discarded
    }
    return;
  }
  const std::int64_t chunk = options_.chunk_size;
  out_.resize(static_cast<std::size_t>(std::min(chunk, std::max<std::int64_t>(total, 1)) * H));
  reserve_activations(std::min(chunk, std::max<std::int64_t>(total, 1)));
  for (std::int64_t c0 = 0; c0 < total; c0 += chunk) {
    const std::int64_t n = std::min(chunk, total - c0);
    const std::int64_t first = st.n_tokens;
    model_.forward_chunk(ids.subspan(static_cast<std::size_t>(c0), static_cast<std::size_t>(n)), {}, st, out_.data(),
                         act_);
    if (consumer) consumer(first, out_.data(), n, H);
  }
}

void Backbone::prefill(std::span<const std::int32_t> ids, SequenceState& st, const HiddenConsumer& consumer,
                       const PrefillMedia& media) {
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
  if (options_.padded_readout) {
    throw Unsupported("prefill: images are not supported with the static-shape (padded) readout");
  }
  const std::int64_t chunk = options_.chunk_size;
  const std::int64_t cap = std::min(chunk, std::max<std::int64_t>(total, 1));
  out_.resize(static_cast<std::size_t>(cap * H));
  embeds_.resize(static_cast<std::size_t>(cap * H));
  reserve_activations(cap);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(3 * cap));
  const float* next_image_row = media.image_rows.data();
  for (std::int64_t c0 = 0; c0 < total; c0 += chunk) {
    const std::int64_t n = std::min(chunk, total - c0);
    const auto call = ids.subspan(static_cast<std::size_t>(c0), static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < 3; ++r) {
      std::copy_n(media.positions.begin() + r * total + c0, n, pos.begin() + r * n);
    }
    model_.embed(call, embeds_.data());
    // Pad rows are replaced by tower rows, not added to (docs/MODEL.md §6.9).
    for (std::int64_t i = 0; i < n; ++i) {
      if (call[static_cast<std::size_t>(i)] == media.image_token_id) {
        std::copy(next_image_row, next_image_row + H, embeds_.begin() + i * H);
        next_image_row += H;
      }
    }
    const std::int64_t first = st.n_tokens;
    model_.forward_chunk(call, std::span<const std::int32_t>(pos.data(), static_cast<std::size_t>(3 * n)), st,
                         out_.data(), act_, embeds_.data());
    if (consumer) consumer(first, out_.data(), n, H);
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

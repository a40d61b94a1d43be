// SPDX-License-Identifier: MIT
// What a release folder contains, how many parameters each block has, and how much memory running
// it will take (`clef inspect` prints it: apps/clef/inspect_report.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/release.h"

namespace clef {

/// Parameter counts (elements, not bytes) and memory estimates of a loaded release.
struct ModelSummary {
  std::vector<std::pair<std::string, std::int64_t>> text_blocks;  ///< name -> params
  std::vector<std::pair<std::string, std::int64_t>> vision_blocks;
  std::vector<std::pair<std::string, std::int64_t>> head_blocks;
  std::int64_t text_params = 0;  ///< embedding + layers + final norm (+ lm_head when untied)
  std::int64_t vision_params = 0;
  std::int64_t head_params = 0;
  std::int64_t linear_layer_params = 0;  ///< params of one Gated DeltaNet layer (mixer + MLP + norms)
  std::int64_t full_layer_params = 0;    ///< params of one full-attention layer
  std::uint64_t weight_file_bytes = 0;   ///< backbone/vision safetensors or GGUF (+ the --mmproj projector), mmapped
  std::uint64_t head_file_bytes = 0;
  std::uint64_t state_fixed_bytes = 0;                 ///< per sequence, fp32: conv + recurrent state of all GDN layers
  std::uint64_t state_bytes_per_token = 0;             ///< fp32 KV cache of the full layers + head rows per token
  std::uint64_t activation_bytes_per_chunk_token = 0;  ///< fp32 scratch per token of a prefill chunk
};

/// Counts parameters from the bound tensors and derives the memory estimates (docs/MODEL.md §9).
ModelSummary summarize(const ReleaseFolder& release);

}  // namespace clef

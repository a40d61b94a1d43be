// SPDX-License-Identifier: MIT
// `clef make-model`: writes a complete random-weight Clef release folder in the published format
// (config.json, model.safetensors, joint_head.*, tokenizer.json, tokenizer_config.json,
// preprocessor_config.json, random_weights.json, SHA256SUMS), with no Python and nothing
// downloaded. This is the embedded default model: it makes the first README command work
// offline. Its tokenizer is a small stand-in byte-level BPE with the Qwen3.5 structure (same
// normalizer, split regex, byte-level mapping, added-token names and flags) and a small
// vocabulary trained here on embedded text; the tensors have the authentic Qwen3.5 names,
// shapes and dtypes (docs/MODEL.md §8, docs/PROTOCOL.md §4.2).
#pragma once

#include <cstdint>
#include <string>

namespace clef {

struct MakeModelOptions {
  std::string preset = "tiny";  ///< only "tiny" is generated in C++ (use tools/reference for larger)
  std::string out_dir;
  std::uint64_t seed = 0;
  bool overwrite = false;  ///< replace an existing folder's files
};

/// Writes the folder. Throws InvalidArgument (unknown preset, existing non-empty folder without
/// `overwrite`) or IoError. Deterministic: the same options give byte-identical files.
void make_model(const MakeModelOptions& options);

/// The default location of the embedded model, used when a command gets no --model:
/// $CLEF_HOME/default-model, else $XDG_CACHE_HOME/clef/default-model, else ~/.cache/clef/default-model.
std::string default_model_dir();

/// Creates the embedded default model at default_model_dir() if it is not there yet (seed 0);
/// returns its path.
std::string ensure_default_model();

}  // namespace clef

// A Clef release folder as published on the Hugging Face hub (protocol.md §5.1):
//   config.json, model.safetensors | model.safetensors.index.json + shards,
//   joint_head.safetensors, joint_head_config.json, tokenizer.json, tokenizer_config.json,
//   preprocessor_config.json (optional), SHA256SUMS (optional manifest, for --verify),
//   random_weights.json (present only in random-weight folders made by make-model).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decision/joint_head_weights.h"
#include "io/hf_config.h"
#include "io/tokenizer_files.h"
#include "io/weight_store.h"
#include "models/qwen35/weights.h"

namespace clef {

/// Options of open_release().
struct OpenReleaseOptions {
  /// Check the sha256 of every file against a manifest before loading (slow for large models).
  bool verify = false;
  /// Manifest path for `verify`; default DIR/SHA256SUMS (coreutils `sha256sum` format).
  std::string manifest;
};

/// Marker of a random-weight model (random_weights.json).
struct RandomWeightsInfo {
  std::string model_name;  ///< ends in "-random"
  std::string preset;
  std::string generator;
  std::string tokenizer;   ///< provenance of the tokenizer files
};

/// A loaded release folder. Weights stay memory-mapped; every view points into the mappings
/// owned here, so a ReleaseFolder must outlive anything that reads its weights. Move-only.
struct ReleaseFolder {
  std::string dir;
  std::string model_name;  ///< random_weights.json's name, else the folder's base name
  ModelConfig config;
  JointHeadConfig head_config;
  std::optional<PreprocessorConfig> preprocessor;
  TokenizerSummary tokenizer;
  std::optional<RandomWeightsInfo> random_weights;
  std::unique_ptr<WeightStore> weights;       ///< backbone + vision tower files
  std::unique_ptr<WeightStore> head_weights;  ///< joint_head.safetensors
  qwen35::ModelWeights model;
  JointHeadWeights head;
  std::vector<std::string> verified_files;    ///< filled when options.verify
};

/// Opens and validates a release folder: configs, tokenizer files, weights (mmapped, zero-copy),
/// strict tensor binding of the backbone and the head. A folder without joint_head.* is refused
/// as a bare backbone. Throws ModelLoadError / Unsupported / IoError with a one-line message
/// naming the file and the problem.
ReleaseFolder open_release(const std::string& dir, const OpenReleaseOptions& options = {});

/// Checks the files named in a coreutils-format manifest (`<sha256>  <name>` lines) and that
/// every file the loader reads is covered. Returns the names checked. Throws ModelLoadError on a
/// mismatch, a malformed line (naming its number) or an uncovered file.
std::vector<std::string> verify_manifest(const std::string& dir, const std::string& manifest_path);

}  // namespace clef

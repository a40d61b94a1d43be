// SPDX-License-Identifier: MIT
// A Clef release folder as published on the Hugging Face hub (docs/PROTOCOL.md §5.1):
//   config.json, model.safetensors | model.safetensors.index.json + shards,
//   joint_head.safetensors, joint_head_config.json, tokenizer.json, tokenizer_config.json,
//   preprocessor_config.json (optional), SHA256SUMS (optional manifest, for --verify),
//   random_weights.json (present only in random-weight folders made by make-model).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/joint_head/weights.h"
#include "io/gguf_model.h"
#include "io/hf_config.h"
#include "io/tokenizer_files.h"
#include "io/weight_store.h"
#include "models/qwen35/mmproj.h"
#include "models/qwen35/weights.h"
#include "tokenizer/tokenizer.h"

namespace clef {

/// Options of open_release().
struct OpenReleaseOptions {
  /// Check the sha256 of every file against a manifest before loading (slow for large models).
  bool verify = false;
  /// Manifest path for `verify`; default DIR/SHA256SUMS (coreutils `sha256sum` format).
  std::string manifest;
  /// A projector GGUF (llama.cpp's mmproj of a Qwen3.5 model, e.g. mmproj-Clef-Flash-Q8_0.gguf) that
  /// gives a GGUF model its vision tower (docs/GGUF.md "The projector file"); "" = none (a GGUF model
  /// then refuses images). With a release folder it is an InvalidArgument: the folder's tower is in
  /// its own weights (model.visual.*).
  std::string mmproj;
};

/// Marker of a random-weight model (random_weights.json).
struct RandomWeightsInfo {
  std::string model_name;  ///< ends in "-random"
  std::string preset;
  std::string generator;
  std::string tokenizer;  ///< provenance of the tokenizer files
};

/// ReleaseFolder::tokenizer_source's two values (also what `clef inspect` prints).
inline constexpr const char* kTokenizerFromJson = "tokenizer.json";
inline constexpr const char* kTokenizerFromGguf = "GGUF metadata";

/// A loaded release folder. Weights stay memory-mapped; every view points into the mappings
/// owned here, so a ReleaseFolder must outlive anything that reads its weights. Move-only.
struct ReleaseFolder {
  std::string dir;          ///< the release folder; for a GGUF model, the folder holding the .gguf
  std::string gguf;         ///< the GGUF file's path when the backbone comes from one, else ""
  GgufModelInfo gguf_info;  ///< its general.* / block metadata (gguf only)
  /// Where the tokenizer comes from: kTokenizerFromJson (the folder's, or the one beside the GGUF)
  /// or kTokenizerFromGguf (a GGUF with no tokenizer.json beside it).
  std::string tokenizer_source = kTokenizerFromJson;
  std::string model_name;  ///< random_weights.json's name, else the folder's base name
  ModelConfig config;
  JointHeadConfig head_config;
  /// The image settings; empty when the folder has neither processor_config.json (with an
  /// `image_processor` object) nor preprocessor_config.json (images are then refused).
  std::optional<PreprocessorConfig> preprocessor;
  /// Which file `preprocessor` came from, as `clef inspect` prints it; "" when empty.
  std::string preprocessor_source;
  TokenizerSummary tokenizer;
  std::optional<RandomWeightsInfo> random_weights;
  std::unique_ptr<WeightStore> weights;           ///< backbone + vision tower files
  std::unique_ptr<WeightStore> head_weights;      ///< joint_head.safetensors (clef GGUF: its head, fp32)
  std::string mmproj;                             ///< the projector GGUF's path (OpenReleaseOptions::mmproj), else ""
  std::optional<qwen35::MmprojInfo> mmproj_info;  ///< its metadata (mmproj only)
  /// The projector's tensors (mmproj only): views into the mapped file, plus fp32 copies of the
  /// patch embedding and of any block-quantized tensor.
  std::unique_ptr<WeightStore> vision_weights;
  qwen35::ModelWeights model;
  JointHeadWeights head;
  std::vector<std::string> verified_files;  ///< filled when options.verify
};

/// Opens and validates a release folder: configs, tokenizer files, weights (mmapped, zero-copy),
/// strict tensor binding of the backbone and the head. A folder without joint_head.* is refused
/// as a bare backbone. Throws ModelLoadError / Unsupported / IoError with a one-line message
/// naming the file and the problem; a path that is no model at all (missing, a FIFO, a device, a
/// directory with no config.json, safetensors or .gguf, e.g. one named x.gguf) is refused saying
/// what it is and what a model path may be, found by stat(2) without opening it.
/// `dir` may also name a GGUF model (find_gguf_model): the backbone, its configuration and (when
/// no tokenizer.json is beside it) the tokenizer come from the GGUF (model_config_from_gguf,
/// qwen35::bind_gguf_model_weights). Layout "qwen35" (gguf_layout): joint_head.safetensors +
/// joint_head_config.json must be beside it (llama.cpp's Qwen3.5 converter does not write the Clef
/// head); layout "clef": the head comes from the file itself (joint_head_config_from_gguf,
/// gguf_joint_head_store: dequantized to fp32 in `head_weights`) and head files beside it are not
/// read. random_weights.json beside it is read as in a folder. The model is text-only (no vision
/// tower in a llama.cpp text GGUF) unless options.mmproj names its projector GGUF: then
/// qwen35::mmproj_info / bind_mmproj_weights give config.vision and model.vision, the image-token
/// ids come from the tokenizer (`<|image_pad|>` must exist; `<|video_pad|>`, `<|vision_start|>`,
/// `<|vision_end|>` when present), and the image settings from processor_config.json /
/// preprocessor_config.json beside the GGUF when there is one (its image_mean and image_std must
/// equal the projector's as float), else from the projector (mean, std, patch and merge size) with
/// the Qwen3.5 processor's pixel bounds [65536, 16777216] and rescale 1/255.
/// Its name is random_weights.json's, else the GGUF file's stem.
ReleaseFolder open_release(const std::string& dir, const OpenReleaseOptions& options = {});

/// A GGUF model path: `path` itself when it is a regular file whose name ends in ".gguf" (any
/// case), or the single *.gguf of a folder without model.safetensors / model.safetensors.index.json,
/// not counting projector files (names starting with "mmproj", any case);
/// nullopt for a release folder (or a path that does not exist: open_release reports it). Throws
/// ModelLoadError for a folder with several .gguf files or with both safetensors weights and a
/// .gguf (naming them), and for a regular file that is not a .gguf.
std::optional<std::string> find_gguf_model(const std::string& path);

/// The tokenizer of the model at `path` (a release folder or a GGUF model, see find_gguf_model):
/// tokenizer.json (+ tokenizer_config.json) of the folder, or beside the GGUF when present (it
/// wins: it is the release's own file), else the GGUF's tokenizer.ggml.* metadata
/// (tokenizer_json_from_gguf). `source` receives kTokenizerFromJson or kTokenizerFromGguf.
/// Throws what Tokenizer::load / tokenizer_json_from_gguf throw.
/// `options` go to Tokenizer::load / from_json (the split regex override, the config union).
Tokenizer load_model_tokenizer(const std::string& path, std::string* source = nullptr,
                               const TokenizerLoadOptions& options = {});

/// The tokenizer of an opened release `r`, from the source open_release chose
/// (r.tokenizer_source, the same rule as load_model_tokenizer): tokenizer.json of r.dir, or the
/// metadata of the GGUF r already holds mapped, so loading a model maps each file once
/// (MappedFile::files_mapped). Throws what load_model_tokenizer throws.
Tokenizer load_release_tokenizer(const ReleaseFolder& r, const TokenizerLoadOptions& options = {});

/// Checks the files named in a coreutils-format manifest (`<sha256>  <name>` lines) and that
/// every file the loader reads is covered. Returns the names checked. Throws ModelLoadError on a
/// mismatch, a malformed line (naming its number) or an uncovered file.
std::vector<std::string> verify_manifest(const std::string& dir, const std::string& manifest_path);

}  // namespace clef

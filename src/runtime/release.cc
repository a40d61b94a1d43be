// SPDX-License-Identifier: MIT
#include "runtime/release.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"
#include "core/sha256.h"
#include "models/joint_head/gguf.h"

namespace fs = std::filesystem;

namespace clef {

void read_image_settings(ReleaseFolder& r, const fs::path& d);

namespace {

bool is_hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))) return false;
  }
  return true;
}

/// The files the loader reads from `dir` (those that exist), including every shard the index names.
std::vector<std::string> loaded_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* f : {"config.json", "joint_head.safetensors", "joint_head_config.json", "tokenizer.json",
                        "tokenizer_config.json", "preprocessor_config.json", "processor_config.json",
                        "model.safetensors", "model.safetensors.index.json", "random_weights.json"}) {
    if (path_exists((fs::path(dir) / f).string())) out.emplace_back(f);
  }
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (path_exists(index.string())) {
    const nlohmann::json j = read_json_file(index.string(), "model.safetensors.index.json");
    std::set<std::string> shards;
    if (j.is_object() && j.contains("weight_map") && j["weight_map"].is_object()) {
      for (const auto& [name, file] : j["weight_map"].items()) {
        if (file.is_string()) shards.insert(file.get<std::string>());
      }
    }
    out.insert(out.end(), shards.begin(), shards.end());
  }
  return out;
}

/// What a model path may be, for messages about a path that is none of these.
constexpr const char* kModelKinds = "a Clef release folder, a .gguf file, or a folder holding one .gguf";

/// What is at `path`, in words ("no such file or directory", "a FIFO (named pipe)", ...), from
/// stat(2) alone: nothing is opened, so a FIFO without a writer never blocks.
std::string what_is_at(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  switch (st.type()) {
    case fs::file_type::not_found:
      return path_exists(path) ? "a symbolic link to nothing" : "no such file or directory";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::socket: return "a socket";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    default: break;
  }
  return ec ? "cannot be examined (" + ec.message() + ")" : "neither a file nor a directory";
}

bool ends_with_gguf(const std::string& name) {
  if (name.size() < 5) return false;
  std::string tail = name.substr(name.size() - 5);
  for (auto& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return tail == ".gguf";
}

/// Refuses the directory `dir` (which holds no model .gguf: find_gguf_model) when it holds no
/// config.json and no safetensors weights either, so it is no model at all, saying what it is; a
/// directory named like a GGUF file (x.gguf/) is said to be a directory, not the file.
void not_a_model_folder(const std::string& dir) {
  const fs::path d(dir);
  if (path_exists((d / "config.json").string()) || path_exists((d / "model.safetensors").string()) ||
      path_exists((d / "model.safetensors.index.json").string())) {
    return;
  }
  std::string name = dir;
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  const std::string what =
      ends_with_gguf(name) ? "a directory, not a .gguf file" : "a directory but not a model folder";
  throw ModelLoadError(printable(dir) + ": " + what + ": it holds no config.json and no .gguf file (expected " +
                       kModelKinds + ")");
}

/// A projector file's name (mmproj*.gguf, any case), as llama.cpp's converter and the hub name them.
bool is_projector_name(const std::string& name) {
  if (!ends_with_gguf(name) || name.size() < 6) return false;
  std::string head = name.substr(0, 6);
  for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return head == "mmproj";
}

/// The projector GGUF `path` (OpenReleaseOptions::mmproj) as the vision tower of the GGUF model `r`
/// (open_release's comment says what is read from where).
void open_mmproj(ReleaseFolder& r, const std::string& path) {
  const std::string label = printable(fs::path(path).filename().string());
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw ModelLoadError(printable(path) + ": --mmproj: not a file (the projector GGUF, e.g. " +
                         "mmproj-Clef-Flash-Q8_0.gguf)");
  }
  r.mmproj = path;
  r.vision_weights = std::make_unique<WeightStore>(WeightStore::open_gguf(path, label));
  const GgufFile& g = *r.vision_weights->gguf();
  r.mmproj_info = qwen35::mmproj_info(g, r.config.text.hidden_size);
  r.config.vision = r.mmproj_info->vision;
  r.model.vision = qwen35::bind_mmproj_weights(*r.vision_weights, *r.config.vision);

  // The image-token ids: a GGUF's configuration has none, the tokenizer names them.
  const auto id_of = [&r](const std::string& content) -> std::int64_t {
    for (const auto& [id, text] : r.tokenizer.added) {
      if (text == content) return id;
    }
    return -1;
  };
  const std::int64_t pad = id_of("<|image_pad|>");
  if (pad < 0) {
    throw ModelLoadError(label + ": the model's tokenizer (" + r.tokenizer_source +
                         ") has no <|image_pad|> token, so images cannot be placed in the prompt");
  }
  r.config.image_token_id = pad;
  if (const std::int64_t id = id_of("<|video_pad|>"); id >= 0) r.config.video_token_id = id;
  if (const std::int64_t id = id_of("<|vision_start|>"); id >= 0) r.config.vision_start_token_id = id;
  if (const std::int64_t id = id_of("<|vision_end|>"); id >= 0) r.config.vision_end_token_id = id;

  // The image settings: the release's processor files beside the GGUF when there are any (they hold
  // the pixel bounds, which a projector does not), else the projector's own values.
  const qwen35::MmprojInfo& m = *r.mmproj_info;
  read_image_settings(r, fs::path(r.dir));
  if (r.preprocessor) {
    for (std::size_t i = 0; i < 3; ++i) {
      if (static_cast<float>(r.preprocessor->image_mean[i]) != m.image_mean[i] ||
          static_cast<float>(r.preprocessor->image_std[i]) != m.image_std[i]) {
        throw ModelLoadError(r.preprocessor_source + " and " + label +
                             " (clip.vision.image_mean / image_std) disagree on the image normalization; refusing to "
                             "guess which the model was used with");
      }
    }
    r.preprocessor_source += " beside the GGUF (agrees with " + label + ")";
    return;
  }
  PreprocessorConfig p;  // the Qwen3.5 processor's defaults: pixel bounds, rescale, resample
  p.image_processor_type = "Qwen2VLImageProcessor";
  for (std::size_t i = 0; i < 3; ++i) {
    p.image_mean[i] = static_cast<double>(m.image_mean[i]);
    p.image_std[i] = static_cast<double>(m.image_std[i]);
  }
  p.patch_size = m.vision.patch_size;
  p.merge_size = m.vision.spatial_merge_size;
  p.temporal_patch_size = m.vision.temporal_patch_size;
  r.preprocessor = p;
  r.preprocessor_source = label + " (clip.vision.image_mean, image_std, patch_size, spatial_merge_size; pixels [" +
                          std::to_string(p.min_pixels) + ", " + std::to_string(p.max_pixels) +
                          "] and rescale 1/255: the Qwen3.5 processor's defaults)";
}

/// joint_head.safetensors + joint_head_config.json of `dir` (folder or beside a GGUF).
void open_head(ReleaseFolder& r, const fs::path& d, const std::string& what) {
  const bool has_head = path_exists((d / "joint_head.safetensors").string());
  const bool has_head_cfg = path_exists((d / "joint_head_config.json").string());
  if (!has_head || !has_head_cfg) {
    const std::string missing = has_head       ? "joint_head_config.json"
                                : has_head_cfg ? "joint_head.safetensors"
                                               : "joint_head.safetensors and joint_head_config.json";
    if (!r.gguf.empty()) {
      throw ModelLoadError(
          printable(r.gguf) + ": " + missing +
          " missing beside it: a GGUF holds only the Qwen3.5 "
          "backbone (llama.cpp's converter does not write the Clef joint schema head); put the release's "
          "joint_head.safetensors and joint_head_config.json in " +
          printable(r.dir));
    }
    throw ModelLoadError(what + ": " + missing +
                         " missing: this is a bare Qwen3.5 backbone, not a Clef release (a Clef release ships the "
                         "joint schema head next to the backbone)");
  }
  r.head_config =
      parse_joint_head_config(read_json_file((d / "joint_head_config.json").string(), "joint_head_config.json"));
  if (r.head_config.hidden_size != r.config.text.hidden_size) {
    throw ModelLoadError("joint_head_config.json: hidden_size: " + std::to_string(r.head_config.hidden_size) +
                         " does not match the backbone's hidden_size " + std::to_string(r.config.text.hidden_size));
  }
}

/// random_weights.json of `d` (when present) and the model name.
void read_name(ReleaseFolder& r, const fs::path& d, const std::string& fallback_path) {
  std::error_code ec;
  if (path_exists((d / "random_weights.json").string())) {
    const auto j = read_json_file((d / "random_weights.json").string(), "random_weights.json");
    JsonObjectReader rr(j, "random_weights.json", "");
    RandomWeightsInfo info;
    info.model_name = printable(rr.get_string("model_name"));
    info.preset = rr.get_string("preset", "");
    info.generator = rr.get_string("generator", "");
    info.tokenizer = rr.get_string("tokenizer", "");
    const std::string suffix = "-random";
    if (info.model_name.size() < suffix.size() ||
        info.model_name.compare(info.model_name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      rr.fail("model_name", "a random-weight model's name must end in \"-random\"");
    }
    r.random_weights = info;
    r.model_name = info.model_name;
  } else if (!r.gguf.empty()) {
    r.model_name = printable(fs::path(r.gguf).stem().string());
    if (r.model_name.empty()) r.model_name = "model";
  } else {
    // The folder's own name ("." and trailing slashes resolved), made printable.
    const fs::path canon = fs::weakly_canonical(fs::path(fallback_path), ec);
    r.model_name = printable((ec ? fs::path(fallback_path).lexically_normal() : canon).filename().string());
    if (r.model_name.empty()) r.model_name = "model";
  }
}

/// The folder holding a GGUF file ("." for a bare file name).
std::string folder_of(const std::string& gguf) {
  const fs::path parent = fs::path(gguf).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

/// The one rule for where a model's tokenizer comes from (docs/GGUF.md): a release folder's own
/// tokenizer.json; for a GGUF model (`gguf` non-empty, in folder `dir`) the tokenizer.json beside
/// it when there is one (the release's own file wins), else the GGUF's tokenizer.ggml.* metadata.
const char* tokenizer_source_of(const std::string& gguf, const std::string& dir) {
  if (gguf.empty() || path_exists((fs::path(dir) / "tokenizer.json").string())) return kTokenizerFromJson;
  return kTokenizerFromGguf;
}

/// The tokenizer a GGUF's metadata describes, from an already-open file (nothing is mapped again).
Tokenizer tokenizer_from_gguf(const GgufFile& g, const TokenizerLoadOptions& options) {
  return Tokenizer::from_json(tokenizer_json_from_gguf(g), "", options, g.label() + " tokenizer.ggml.*");
}

ReleaseFolder open_gguf_release(const std::string& gguf, const OpenReleaseOptions& options) {
  ReleaseFolder r;
  r.gguf = gguf;
  r.dir = folder_of(gguf);
  const fs::path d(r.dir);
  if (options.verify) {
    r.verified_files =
        verify_manifest(r.dir, options.manifest.empty() ? (d / "SHA256SUMS").string() : options.manifest);
    const std::string name = fs::path(gguf).filename().string();
    if (std::find(r.verified_files.begin(), r.verified_files.end(), name) == r.verified_files.end()) {
      throw ModelLoadError((options.manifest.empty() ? (d / "SHA256SUMS").string() : options.manifest) + ": " +
                           printable(name) + " is not covered by the manifest");
    }
  }
  const std::string label = printable(fs::path(gguf).filename().string());
  r.weights = std::make_unique<WeightStore>(WeightStore::open_gguf(gguf, label));
  r.config = model_config_from_gguf(*r.weights->gguf(), &r.gguf_info);
  const bool head_inside = r.gguf_info.layout == "clef";
  if (head_inside) {
    // The head is in the file (llama.cpp's Clef conversion): its tensors are dequantized to fp32
    // and taken out of the backbone store before the backbone's strict binding.
    r.head_config = joint_head_config_from_gguf(*r.weights->gguf(), r.config.text.hidden_size);
    r.head_weights = gguf_joint_head_store(*r.weights, r.head_config);
  } else {
    open_head(r, d, r.dir);
  }
  r.tokenizer_source = tokenizer_source_of(gguf, r.dir);
  r.tokenizer = r.tokenizer_source == kTokenizerFromJson ? read_tokenizer_summary(r.dir, r.config)
                                                         : tokenizer_summary_from_gguf(*r.weights->gguf());
  read_name(r, d, r.dir);
  try {
    r.model = qwen35::bind_gguf_model_weights(*r.weights, r.config);
  } catch (const ModelLoadError& e) {
    throw ModelLoadError(std::string(e.what()) + " (expected shapes follow from the " + r.gguf_info.architecture +
                         ".* metadata of " + label + ")");
  }
  if (!head_inside) {
    r.head_weights = std::make_unique<WeightStore>(
        WeightStore::open_file((d / "joint_head.safetensors").string(), "joint_head.safetensors"));
  }
  r.head = bind_joint_head_weights(*r.head_weights, r.head_config);
  if (!options.mmproj.empty()) open_mmproj(r, options.mmproj);
  return r;
}

}  // namespace

std::optional<std::string> find_gguf_model(const std::string& path) {
  std::error_code ec;
  if (path.empty()) return std::nullopt;
  if (fs::is_regular_file(path, ec)) {
    if (ends_with_gguf(path)) return path;
    throw ModelLoadError(printable(path) + ": not a folder or a .gguf file (--model takes " + kModelKinds + ")");
  }
  if (!fs::is_directory(path, ec)) return std::nullopt;
  std::vector<std::string> ggufs;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(fe) && !fe && ends_with_gguf(name) && !is_projector_name(name)) {
      ggufs.push_back(name);
    }
  }
  if (ggufs.empty()) return std::nullopt;
  std::sort(ggufs.begin(), ggufs.end());
  const fs::path d(path);
  const bool safetensors =
      path_exists((d / "model.safetensors").string()) || path_exists((d / "model.safetensors.index.json").string());
  if (safetensors) {
    throw ModelLoadError(printable(path) + ": holds both safetensors weights and " + printable(ggufs.front()) +
                         "; it is ambiguous which to load (pass the .gguf file itself to use it)");
  }
  if (ggufs.size() > 1) {
    throw ModelLoadError(printable(path) + ": holds " + std::to_string(ggufs.size()) + " .gguf files (" +
                         printable(ggufs[0]) + ", " + printable(ggufs[1]) + (ggufs.size() > 2 ? ", ..." : "") +
                         "); pass the one to load as --model FILE.gguf");
  }
  return (d / ggufs.front()).string();
}

Tokenizer load_model_tokenizer(const std::string& path, std::string* source, const TokenizerLoadOptions& options) {
  const std::optional<std::string> gguf = find_gguf_model(path);
  const std::string dir = gguf ? folder_of(*gguf) : path;
  const std::string_view from = tokenizer_source_of(gguf.value_or(""), dir);
  if (source != nullptr) *source = std::string(from);
  if (from == kTokenizerFromJson) return Tokenizer::load(dir, options);
  const GgufFile g(*gguf, printable(fs::path(*gguf).filename().string()));
  return tokenizer_from_gguf(g, options);
}

Tokenizer load_release_tokenizer(const ReleaseFolder& r, const TokenizerLoadOptions& options) {
  if (r.tokenizer_source == kTokenizerFromJson) return Tokenizer::load(r.dir, options);
  return tokenizer_from_gguf(*r.weights->gguf(), options);
}

std::vector<std::string> verify_manifest(const std::string& dir, const std::string& manifest_path) {
  require_regular_file(manifest_path, "sha256 manifest");
  std::ifstream in(manifest_path);
  if (!in) throw ModelLoadError(manifest_path + ": cannot open the sha256 manifest");
  std::map<std::string, std::string> want;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF manifests, as sha256sum -c accepts
    if (line.empty()) continue;
    // coreutils format: 64 hex digits, a space, then ' ' (text) or '*' (binary), then the name.
    if (line.size() < 67 || !is_hex64(line.substr(0, 64)) || line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) {
      throw ModelLoadError(manifest_path + ": line " + std::to_string(lineno) +
                           ": expected '<64 hex digits>  <file name>'");
    }
    std::string name = line.substr(66);
    if (name.find('/') != std::string::npos || name == ".." || name == ".") {
      throw ModelLoadError(manifest_path + ": line " + std::to_string(lineno) + ": \"" + printable(name) +
                           "\" is not a plain file name inside the folder");
    }
    std::string hex = line.substr(0, 64);
    for (auto& c : hex) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto [it, inserted] = want.emplace(name, hex);
    if (!inserted && it->second != hex) {
      throw ModelLoadError(manifest_path + ": line " + std::to_string(lineno) + ": " + printable(name) +
                           " is listed twice with different hashes");
    }
  }
  if (want.empty()) throw ModelLoadError(manifest_path + ": the manifest lists no files");
  for (const auto& f : loaded_files(dir)) {
    if (want.count(f) == 0) throw ModelLoadError(manifest_path + ": " + f + " is not covered by the manifest");
  }
  std::vector<std::string> checked;
  for (const auto& [name, hex] : want) {
    const fs::path p = fs::path(dir) / name;
    require_regular_file(p.string(), printable(name));
    const std::string got = sha256_file_hex(p.string());
    if (got != hex) throw ModelLoadError(name + ": sha256 mismatch: manifest says " + hex + ", file has " + got);
    checked.push_back(name);
  }
  return checked;
}

/// The image settings (docs/COMPATIBILITY.md "The real release folder, file by file"): the
/// `image_processor` object of processor_config.json (transformers v5; what transformers reads
/// first) and/or preprocessor_config.json. Both: they must agree on every setting that changes
/// numbers, else ModelLoadError naming the field. Neither: r.preprocessor stays empty and the
/// engine refuses images (Engine: images_unsupported naming the two files).
void read_image_settings(ReleaseFolder& r, const fs::path& d) {
  std::optional<PreprocessorConfig> nested, legacy;
  if (path_exists((d / "processor_config.json").string())) {
    const nlohmann::json j = read_json_file((d / "processor_config.json").string(), "processor_config.json");
    if (!j.is_object()) throw ModelLoadError("processor_config.json: expected a JSON object");
    auto ip = j.find("image_processor");
    if (ip != j.end() && !ip->is_null()) {
      if (!ip->is_object()) throw ModelLoadError("processor_config.json: image_processor: expected an object");
      nested = parse_preprocessor_config(*ip, "processor_config.json: image_processor");
    }
  }
  if (path_exists((d / "preprocessor_config.json").string())) {
    legacy = parse_preprocessor_config(
        read_json_file((d / "preprocessor_config.json").string(), "preprocessor_config.json"));
  }
  if (nested && legacy) {
    if (const std::optional<std::string> field = preprocessor_config_difference(*nested, *legacy)) {
      throw ModelLoadError("processor_config.json (image_processor) and preprocessor_config.json disagree on " +
                           *field + "; refusing to guess which image settings the model was used with");
    }
    r.preprocessor_source = "processor_config.json (image_processor; preprocessor_config.json agrees)";
  } else if (nested) {
    r.preprocessor_source = "processor_config.json (image_processor)";
  } else if (legacy) {
    r.preprocessor_source = "preprocessor_config.json";
  }
  r.preprocessor = nested ? nested : legacy;
  if (r.preprocessor && r.config.vision) {
    const auto& v = *r.config.vision;
    if (r.preprocessor->patch_size != v.patch_size || r.preprocessor->merge_size != v.spatial_merge_size ||
        r.preprocessor->temporal_patch_size != v.temporal_patch_size) {
      const std::string file = nested ? "processor_config.json: image_processor" : "preprocessor_config.json";
      throw ModelLoadError(
          file + ": patch_size/merge_size/temporal_patch_size (" + std::to_string(r.preprocessor->patch_size) + "/" +
          std::to_string(r.preprocessor->merge_size) + "/" + std::to_string(r.preprocessor->temporal_patch_size) +
          ") disagree with config.json vision_config");
    }
  }
}

ReleaseFolder open_release(const std::string& dir, const OpenReleaseOptions& options) {
  std::error_code ec;
  if (dir.empty()) throw InvalidArgument("empty model folder path");
  if (const std::optional<std::string> gguf = find_gguf_model(dir)) return open_gguf_release(*gguf, options);
  if (!fs::is_directory(dir, ec)) {
    const std::string what = what_is_at(dir);
    throw ModelLoadError(printable(dir) + ": " + what + (path_exists(dir) ? ", not a model" : "") + " (expected " +
                         kModelKinds + ")");
  }
  not_a_model_folder(dir);
  if (!options.mmproj.empty()) {
    throw InvalidArgument("--mmproj " + printable(options.mmproj) + " applies to a GGUF model; " + printable(dir) +
                          " is a release folder, whose vision tower is in its own weights (model.visual.*)");
  }
  ReleaseFolder r;
  r.dir = dir;
  if (options.verify) {
    r.verified_files =
        verify_manifest(dir, options.manifest.empty() ? (fs::path(dir) / "SHA256SUMS").string() : options.manifest);
  }
  const fs::path d(dir);
  if (!path_exists((d / "config.json").string())) throw ModelLoadError(printable(dir) + ": config.json is missing");
  r.config = parse_model_config(read_json_file((d / "config.json").string(), "config.json"));
  open_head(r, d, dir);
  read_image_settings(r, d);
  r.tokenizer = read_tokenizer_summary(dir, r.config);
  read_name(r, d, dir);
  r.weights = std::make_unique<WeightStore>(WeightStore::open_model_dir(dir));
  r.model = qwen35::bind_model_weights(*r.weights, r.config);
  r.head_weights = std::make_unique<WeightStore>(
      WeightStore::open_file((d / "joint_head.safetensors").string(), "joint_head.safetensors"));
  r.head = bind_joint_head_weights(*r.head_weights, r.head_config);
  return r;
}

}  // namespace clef

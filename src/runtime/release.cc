#include "runtime/release.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/sha256.h"

namespace fs = std::filesystem;

namespace clef {
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
                        "tokenizer_config.json", "preprocessor_config.json", "model.safetensors",
                        "model.safetensors.index.json", "random_weights.json"}) {
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

}  // namespace

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

ReleaseFolder open_release(const std::string& dir, const OpenReleaseOptions& options) {
  std::error_code ec;
  if (dir.empty()) throw InvalidArgument("empty model folder path");
  if (!fs::is_directory(dir, ec)) throw ModelLoadError(printable(dir) + ": not a directory");
  ReleaseFolder r;
  r.dir = dir;
  if (options.verify) {
    r.verified_files = verify_manifest(dir, options.manifest.empty() ? (fs::path(dir) / "SHA256SUMS").string()
                                                                      : options.manifest);
  }
  const fs::path d(dir);
  if (!path_exists((d / "config.json").string())) throw ModelLoadError(printable(dir) + ": config.json is missing");
  r.config = parse_model_config(read_json_file((d / "config.json").string(), "config.json"));
  const bool has_head = path_exists((d / "joint_head.safetensors").string());
  const bool has_head_cfg = path_exists((d / "joint_head_config.json").string());
  if (!has_head || !has_head_cfg) {
    throw ModelLoadError(dir + ": " + (has_head ? "joint_head_config.json" : has_head_cfg ? "joint_head.safetensors"
                                                                                          : "joint_head.safetensors and joint_head_config.json") +
                         " missing: this is a bare Qwen3.5 backbone, not a Clef release (a Clef release ships the "
                         "joint schema head next to the backbone)");
  }
  r.head_config = parse_joint_head_config(read_json_file((d / "joint_head_config.json").string(), "joint_head_config.json"));
  if (r.head_config.hidden_size != r.config.text.hidden_size) {
    throw ModelLoadError("joint_head_config.json: hidden_size: " + std::to_string(r.head_config.hidden_size) +
                         " does not match the backbone's hidden_size " + std::to_string(r.config.text.hidden_size));
  }
  if (path_exists((d / "preprocessor_config.json").string())) {
    r.preprocessor = parse_preprocessor_config(
        read_json_file((d / "preprocessor_config.json").string(), "preprocessor_config.json"));
    if (r.config.vision) {
      const auto& v = *r.config.vision;
      if (r.preprocessor->patch_size != v.patch_size || r.preprocessor->merge_size != v.spatial_merge_size ||
          r.preprocessor->temporal_patch_size != v.temporal_patch_size) {
        throw ModelLoadError("preprocessor_config.json: patch_size/merge_size/temporal_patch_size (" +
                             std::to_string(r.preprocessor->patch_size) + "/" + std::to_string(r.preprocessor->merge_size) +
                             "/" + std::to_string(r.preprocessor->temporal_patch_size) +
                             ") disagree with config.json vision_config");
      }
    }
  }
  r.tokenizer = read_tokenizer_summary(dir, r.config);
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
  } else {
    // The folder's own name ("." and trailing slashes resolved), made printable.
    const fs::path canon = fs::weakly_canonical(fs::path(dir), ec);
    r.model_name = printable((ec ? fs::path(dir).lexically_normal() : canon).filename().string());
    if (r.model_name.empty()) r.model_name = "model";
  }
  r.weights = std::make_unique<WeightStore>(WeightStore::open_model_dir(dir));
  r.model = qwen35::bind_model_weights(*r.weights, r.config);
  r.head_weights = std::make_unique<WeightStore>(
      WeightStore::open_file((d / "joint_head.safetensors").string(), "joint_head.safetensors"));
  r.head = bind_joint_head_weights(*r.head_weights, r.head_config);
  return r;
}

}  // namespace clef

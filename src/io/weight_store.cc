// SPDX-License-Identifier: MIT
#include "io/weight_store.h"

#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/mapped_file.h"
#include "core/paths.h"
#include "core/quant_blocks.h"

namespace fs = std::filesystem;

namespace clef {

namespace {

/// Throws ModelLoadError naming the file, the tensor and the element (or block field) when the
/// tensor holds a NaN or an infinity (core/quant_blocks.h find_non_finite): a damaged file must
/// fail at load, not answer every decision with a non-finite logit.
void require_finite(const std::string& file, const std::string& name, DType t, std::span<const std::byte> data) {
  const std::optional<NonFiniteValue> bad = find_non_finite(t, data);
  if (!bad) {
    // The pass faulted every page of the tensor in; give back the ones of a mapped file, so that
    // resident memory after load is what the engine itself touches (a later read faults them back
    // from the page cache). Heap tensors (add_owned_f32) are left alone.
    (void)MappedFile::drop_pages(data.data(), data.size());
    return;
  }
  const std::string what = bad->nan ? "NaN" : "infinite";
  if (*bad->field != '\0') {
    throw ModelLoadError(file + ": tensor " + printable(name) + ": the " + std::string(dtype_name(t)) +
                         " block at element " + std::to_string(bad->element) + " has a non-finite scale " + bad->field +
                         " (" + what + "); every weight must be finite (a damaged file?)");
  }
  throw ModelLoadError(file + ": tensor " + printable(name) + ": element " + std::to_string(bad->element) + " is " +
                       what + "; every weight must be finite (a damaged file?)");
}

}  // namespace

std::vector<float> WeightView::to_f32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  convert_to_f32(dtype(), bytes.data(), out.size(), out.data());
  return out;
}

void WeightStore::add_file(std::unique_ptr<SafetensorsFile> f) {
  for (const auto& t : f->header().tensors) {
    auto [it, inserted] = entries_.emplace(t.name, Entry{&f->label(), &t, f->data(t), Use::kUnused});
    if (!inserted) {
      throw ModelLoadError(f->label() + ": tensor \"" + printable(t.name) + "\" is also stored in " + *it->second.file);
    }
    order_.push_back(t.name);
  }
  files_.push_back(std::move(f));
}

WeightStore WeightStore::open_file(const std::string& path, const std::string& label) {
  require_regular_file(path, label);
  WeightStore s;
  s.label_ = label;
  s.add_file(std::make_unique<SafetensorsFile>(path, label));
  return s;
}

WeightStore WeightStore::open_gguf(const std::string& path, const std::string& label) {
  require_regular_file(path, label);
  WeightStore s;
  s.label_ = label;
  s.gguf_ = std::make_unique<GgufFile>(path, label);
  const GgufFile& g = *s.gguf_;
  for (const GgufTensorInfo& t : g.header().tensors) {
    DType dt;
    switch (static_cast<GgmlType>(t.type)) {
      case GgmlType::kF32: dt = DType::kF32; break;
      case GgmlType::kF16: dt = DType::kF16; break;
      case GgmlType::kBF16: dt = DType::kBF16; break;
      case GgmlType::kQ8_0: dt = DType::kQ8_0; break;
      case GgmlType::kQ4_0: dt = DType::kQ4_0; break;
      case GgmlType::kQ4_1: dt = DType::kQ4_1; break;
      case GgmlType::kQ5_0: dt = DType::kQ5_0; break;
      case GgmlType::kQ5_1: dt = DType::kQ5_1; break;
      case GgmlType::kQ2_K: dt = DType::kQ2_K; break;
      case GgmlType::kQ3_K: dt = DType::kQ3_K; break;
      case GgmlType::kQ4_K: dt = DType::kQ4_K; break;
      case GgmlType::kQ5_K: dt = DType::kQ5_K; break;
      case GgmlType::kQ6_K: dt = DType::kQ6_K; break;
      default:
        throw Unsupported(label + ": tensor " + printable(t.name) + " has ggml type " + ggml_type_name(t.type) +
                          "; clef reads GGUF tensors in F32, F16 and BF16 anywhere; Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                          "Q4_K, Q5_K and Q6_K in the backbone's 2-D weights (linear layers, token_embd, output), "
                          "the joint head and a projector; Q2_K and Q3_K only where a tensor is dequantized at load "
                          "(the joint head, token_embd, output, a projector), not in backbone linear layers");
    }
    TensorInfo& info = s.gguf_infos_.emplace_back();
    info.name = t.name;
    info.dtype = dt;
    info.shape = t.torch_shape();
    info.begin = t.offset;
    info.end = t.offset + t.nbytes;
    // The reader guarantees unique names.
    s.entries_.emplace(t.name, Entry{&g.label(), &info, g.data(t), Use::kUnused});
    s.order_.push_back(t.name);
  }
  return s;
}

WeightStore WeightStore::open_model_dir(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const bool has_index = path_exists(index.string()), has_single = path_exists(single.string());
  if (has_index && has_single) {
    throw ModelLoadError(printable(dir) +
                         ": both model.safetensors and model.safetensors.index.json exist; it is "
                         "ambiguous which weights to load (remove one)");
  }
  if (has_index) {
    const std::string label = "model.safetensors.index.json";
    nlohmann::json j = read_json_file(index.string(), label);
    JsonObjectReader r(j, label, "");
    auto wm = r.get_object("weight_map");
    if (!wm) r.fail("weight_map", "required field is missing");
    const nlohmann::json& map = *r.raw("weight_map");
    std::map<std::string, std::vector<std::string>> by_file;  // shard -> tensor names
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->is_string()) wm->fail(it.key(), "expected a shard file name, got " + describe_json(*it));
      const std::string shard = it->get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
          shard == "." || shard == "..") {
        wm->fail(it.key(), "shard name \"" + printable(shard) + "\" must be a plain file name inside the folder");
      }
      by_file[shard].push_back(it.key());
    }
    if (by_file.empty()) r.fail("weight_map", "names no tensors");
    for (const auto& [shard, names] : by_file) {  // every shard present before any is opened
      if (!path_exists((fs::path(dir) / shard).string())) {
        throw ModelLoadError(label + ": shard " + printable(shard) + " (named for " + std::to_string(names.size()) +
                             " tensors, e.g. " + printable(names.front()) + ") is missing from " + printable(dir));
      }
    }
    WeightStore s;
    s.label_ = label;
    for (const auto& [shard, names] : by_file) {
      const fs::path p = fs::path(dir) / shard;
      require_regular_file(p.string(), shard);
      s.add_file(std::make_unique<SafetensorsFile>(p.string(), shard));
      const SafetensorsFile& f = *s.files_.back();
      std::set<std::string> listed(names.begin(), names.end());
      for (const auto& n : names) {
        if (f.find(n) == nullptr) {
          throw ModelLoadError(label + ": tensor \"" + printable(n) + "\" is mapped to " + printable(shard) +
                               ", which does not contain it");
        }
      }
      for (const auto& t : f.header().tensors) {
        if (listed.count(t.name) == 0) {
          throw ModelLoadError(shard + ": tensor \"" + printable(t.name) + "\" is not listed in " + label);
        }
      }
    }
    return s;
  }
  if (has_single) return open_file(single.string(), "model.safetensors");
  throw ModelLoadError(printable(dir) + ": no model.safetensors or model.safetensors.index.json");
}

const TensorInfo* WeightStore::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second.info;
}

WeightStore::Entry& WeightStore::shaped_entry(const std::string& name,
                                              const std::vector<std::int64_t>& expected_shape) {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    throw ModelLoadError(label_ + ": missing tensor " + name + " (expected shape " + shape_to_string(expected_shape) +
                         ")");
  }
  Entry& e = it->second;
  if (e.info->shape != expected_shape) {
    throw ModelLoadError(*e.file + ": tensor " + name + " has shape " + shape_to_string(e.info->shape) + ", expected " +
                         shape_to_string(expected_shape));
  }
  return e;
}

WeightView WeightStore::take(const std::string& name, const std::vector<std::int64_t>& expected_shape) {
  Entry& e = shaped_entry(name, expected_shape);
  if (is_block_quantized(e.info->dtype)) {
    if (expected_shape.size() != 2) {
      const std::string dt(dtype_name(e.info->dtype));
      throw ModelLoadError(*e.file + ": tensor " + name + " has dtype " + dt +
                           "; only 2-D weights (linear layers, "
                           "the embedding table) may be " +
                           dt + ", this one must be F32, BF16 or F16");
    }
  } else if (!is_weight_float(e.info->dtype)) {
    throw ModelLoadError(*e.file + ": tensor " + name + " has dtype " + std::string(dtype_name(e.info->dtype)) +
                         "; weights must be F32, BF16 or F16");
  }
  require_finite(*e.file, name, e.info->dtype, e.data);
  e.use = Use::kTaken;
  return WeightView{e.info, e.data, e.file};
}

void WeightStore::add_owned_f32(const std::string& name, std::vector<std::int64_t> shape, std::vector<float> data,
                                const std::string& file) {
  if (entries_.count(name) != 0) throw ModelLoadError(file + ": tensor " + printable(name) + " added twice");
  TensorInfo& info = gguf_infos_.emplace_back();
  info.name = name;
  info.dtype = DType::kF32;
  info.shape = std::move(shape);
  if (info.numel() != data.size()) {
    throw ModelLoadError(file + ": tensor " + printable(name) + " has " + std::to_string(data.size()) +
                         " values for shape " + shape_to_string(info.shape));
  }
  info.begin = 0;
  info.end = data.size() * sizeof(float);
  const std::vector<float>& d = owned_.emplace_back(std::move(data));
  const std::string& label = owned_labels_.emplace_back(file);
  entries_.emplace(name, Entry{&label, &info, std::as_bytes(std::span<const float>(d)), Use::kUnused});
  order_.push_back(name);
}

WeightView WeightStore::take_dequantizable(const std::string& name, const std::vector<std::int64_t>& expected_shape) {
  Entry& e = shaped_entry(name, expected_shape);
  if (!is_weight_float(e.info->dtype) && !is_block_quantized(e.info->dtype)) {
    throw ModelLoadError(*e.file + ": tensor " + name + " has dtype " + std::string(dtype_name(e.info->dtype)) +
                         "; expected a float or ggml block type");
  }
  require_finite(*e.file, name, e.info->dtype, e.data);
  e.use = Use::kTaken;
  return WeightView{e.info, e.data, e.file};
}

std::size_t WeightStore::ignore_prefix(const std::string& prefix) {
  std::size_t n = 0;
  for (auto& [name, e] : entries_) {
    if (name.rfind(prefix, 0) == 0 && e.use == Use::kUnused) {
      e.use = Use::kIgnored;
      ++n;
    }
  }
  return n;
}

std::size_t WeightStore::ignored_count() const noexcept {
  std::size_t n = 0;
  for (const auto& [name, e] : entries_) n += e.use == Use::kIgnored;
  return n;
}

void WeightStore::require_all_consumed(const std::string& loader_name) const {
  std::size_t count = 0;
  const std::string* first = nullptr;
  for (const auto& name : order_) {
    if (entries_.at(name).use == Use::kUnused) {
      if (first == nullptr) first = &name;
      ++count;
    }
  }
  if (first != nullptr) {
    const Entry& e = entries_.at(*first);
    throw ModelLoadError(*e.file + ": unexpected tensor " + printable(*first) + " " + shape_to_string(e.info->shape) +
                         " is not used by the " + loader_name + " loader" +
                         (count > 1 ? " (and " + std::to_string(count - 1) + " more)" : ""));
  }
}

std::vector<std::pair<std::string, std::uint64_t>> WeightStore::files() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (const auto& f : files_) out.emplace_back(f->label(), f->file_bytes());
  if (gguf_) out.emplace_back(gguf_->label(), gguf_->file_bytes());
  return out;
}

std::map<std::string, std::uint64_t> WeightStore::bytes_by_dtype() const {
  std::map<std::string, std::uint64_t> out;
  for (const auto& [name, e] : entries_) out[std::string(dtype_name(e.info->dtype))] += e.info->nbytes();
  return out;
}

}  // namespace clef

// SPDX-License-Identifier: MIT
// Name -> tensor lookup over one or more memory-mapped safetensors files, with the strict
// "every tensor is consumed or explicitly ignored" bookkeeping of the model loaders.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/gguf.h"
#include "io/safetensors.h"

namespace clef {

/// How a small tensor's numbers are stored relative to the checkpoint parameter the model is
/// defined with (docs/MODEL.md). The release folder stores every tensor as the parameter
/// itself (kParameter); llama.cpp's GGUF converter stores some as a function of it, and clef reads
/// the stored form rather than inverting it (the inverse is not exact in floating point).
enum class StoredAs : std::uint8_t {
  kParameter,  ///< the parameter itself
  kOnePlus,    ///< offset RMSNorm weight stored as fp32(1 + w) (GGUF attn_norm, output_norm, q/k norms)
  kNegExp,     ///< GDN decay stored as A = fp32(-exp(A_log)) (GGUF ssm_a)
};

/// A zero-copy view of one checkpoint tensor. Valid as long as its WeightStore lives.
struct WeightView {
  const TensorInfo* info = nullptr;
  std::span<const std::byte> bytes;   ///< little-endian elements (Q8_0: ggml blocks), any alignment
  const std::string* file = nullptr;  ///< label of the file holding it
  StoredAs stored = StoredAs::kParameter;
  bool valid() const noexcept { return info != nullptr; }
  DType dtype() const noexcept { return info->dtype; }
  const std::vector<std::int64_t>& shape() const noexcept { return info->shape; }
  std::uint64_t numel() const noexcept { return info->numel(); }
  /// Copies the elements to float (exact for F32/BF16/F16; block types: core/quant_blocks.h).
  /// Throws Unsupported otherwise.
  std::vector<float> to_f32() const;
};

/// The tensors of a set of safetensors files. Binding code calls take() for every tensor it
/// uses and ignore_prefix() for what it deliberately skips; require_all_consumed() then names
/// any tensor nobody claimed.
class WeightStore {
 public:
  WeightStore() = default;
  WeightStore(WeightStore&&) noexcept = default;
  WeightStore& operator=(WeightStore&&) noexcept = default;

  /// Opens DIR/model.safetensors, or DIR/model.safetensors.index.json and every shard it names.
  /// Index checks: well-formed JSON with a weight_map of name -> plain file name; every shard
  /// present; every listed tensor inside its shard; no tensor in a shard that the index does not
  /// list; no tensor in two shards. Throws ModelLoadError / IoError naming the file.
  static WeightStore open_model_dir(const std::string& dir);
  /// Opens one safetensors file.
  static WeightStore open_file(const std::string& path, const std::string& label);
  /// Opens one GGUF file (llama.cpp's format, io/gguf.h): its tensors under their GGUF names with
  /// PyTorch-order shapes (ggml ne reversed), zero-copy over the mapping. Tensors must be F32,
  /// F16, BF16 or one of the block types of core/quant_blocks.h (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
  /// Q2_K .. Q6_K); any other ggml type is refused naming the tensor and type and saying which
  /// types are read where (Unsupported; Q2_K / Q3_K are accepted here, but nn::linear_weight refuses
  /// them in a backbone linear layer).
  /// The metadata stays readable through gguf().
  static WeightStore open_gguf(const std::string& path, const std::string& label);

  /// Adds an fp32 tensor held in memory under `name` (PyTorch-order `shape`, data.size() = its
  /// element count): a GGUF head tensor after dequantization or re-assembly (models/joint_head/gguf.h).
  /// take() then finds it like a mapped tensor; `file` names it in errors. Throws ModelLoadError for
  /// a duplicate name or a size mismatch.
  void add_owned_f32(const std::string& name, std::vector<std::int64_t> shape, std::vector<float> data,
                     const std::string& file);

  /// nullptr when absent. Does not mark the tensor consumed.
  const TensorInfo* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }

  /// Returns the tensor and marks it consumed. Throws ModelLoadError when it is missing
  /// ("missing tensor NAME (expected shape [..])"), when its shape differs ("tensor NAME in FILE
  /// has shape [..], expected [..]") or when its dtype is not F32, BF16 or F16 (Q8_0 is accepted
  /// for 2-D tensors only: linear weights and the embedding table). Another block type (Q4_K, ...)
  /// throws Unsupported naming the tensor and the type: no kernel multiplies it. A tensor holding a
  /// NaN or an infinity (a block type: a non-finite fp16 scale) throws ModelLoadError naming the
  /// file, the tensor and the element (core/quant_blocks.h find_non_finite; one pass over its bytes).
  WeightView take(const std::string& name, const std::vector<std::int64_t>& expected_shape);
  /// As take(), but any float or block dtype is accepted: for tensors read once through
  /// WeightView::to_f32 / convert_to_f32 (a GGUF's head tensors, the output table's rows). The same
  /// finite-values check as take().
  WeightView take_dequantizable(const std::string& name, const std::vector<std::int64_t>& expected_shape);
  /// Marks every tensor whose name starts with `prefix` as deliberately ignored; returns how many.
  std::size_t ignore_prefix(const std::string& prefix);
  /// Throws ModelLoadError naming the first tensor neither taken nor ignored, and how many more.
  void require_all_consumed(const std::string& loader_name) const;

  std::size_t tensor_count() const noexcept { return entries_.size(); }
  const std::string& label() const noexcept { return label_; }
  std::size_t ignored_count() const noexcept;
  /// (label, file bytes) of every file in the store.
  std::vector<std::pair<std::string, std::uint64_t>> files() const;
  /// Total tensor bytes per dtype name.
  std::map<std::string, std::uint64_t> bytes_by_dtype() const;
  /// The GGUF file behind a store made by open_gguf(); nullptr for safetensors stores.
  const GgufFile* gguf() const noexcept { return gguf_.get(); }

 private:
  enum class Use : std::uint8_t { kUnused, kTaken, kIgnored };
  struct Entry {
    const std::string* file = nullptr;  ///< label of the file holding it
    const TensorInfo* info = nullptr;
    std::span<const std::byte> data;
    Use use = Use::kUnused;
  };
  void add_file(std::unique_ptr<SafetensorsFile> f);
  /// The entry of `name` when it has `expected_shape`; throws ModelLoadError for a missing tensor
  /// (naming the store and the shape) or another shape (naming the file and both shapes).
  Entry& shaped_entry(const std::string& name, const std::vector<std::int64_t>& expected_shape);
  std::string label_;  ///< names the store in "missing tensor" errors (the file or the index)
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufFile> gguf_;
  std::deque<TensorInfo> gguf_infos_;     ///< TensorInfo of each GGUF or owned tensor (stable addresses)
  std::deque<std::vector<float>> owned_;  ///< add_owned_f32 data (stable addresses)
  std::deque<std::string> owned_labels_;  ///< add_owned_f32 file labels
  std::vector<std::string> order_;        ///< names in file order, for deterministic reports
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace clef

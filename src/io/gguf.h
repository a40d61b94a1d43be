// SPDX-License-Identifier: MIT
// The GGUF container (llama.cpp's model file, read for `--model FILE.gguf`), version 2 and 3,
// little-endian:
//   magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 value type, value),
//   tensor_count x (string name, u32 n_dims, n_dims x u64 ne, u32 ggml type, u64 offset),
//   padding to `general.alignment` (default 32), then the data section; every tensor's offset
//   is relative to the data section and a multiple of the alignment.
// Strings are u64 length + bytes (no terminator). Shapes are in ggml order: ne[0] is the
// fastest-varying (contiguous) dimension, so a PyTorch Linear weight [out, in] is ne = [in, out].
// Reading is zero-copy over an mmap; the header is validated strictly before any tensor is used.
// Facts of the format from ggml's gguf.h / docs/gguf.md (read, not copied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/mapped_file.h"

namespace clef {

/// The ggml tensor types clef computes with or dequantizes (ggml.h's enum values); the reader parses
/// files holding any other type ggml defines (ggml_block_layout) and names it in errors.
enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};

/// Elements per block and bytes per block of `t` (F32: 1 and 4; Q8_0: 32 and 34 = fp16 scale +
/// 32 int8; Q4_K: 256 and 144; Q6_K: 256 and 210). False for a type value this reader does not
/// know.
bool ggml_block_layout(std::uint32_t type, std::int64_t& block_elems, std::int64_t& block_bytes) noexcept;

/// "F32", "Q8_0", ... or "type N" for an unknown value.
std::string ggml_type_name(std::uint32_t type);

/// GGUF metadata value types (gguf.h).
enum class GgufValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

/// One metadata value. Integers of every width are kept in int64/uint64 with their declared
/// type; arrays hold their elements (arrays of arrays are refused: ggml writes none).
struct GgufValue {
  GgufValueType type = GgufValueType::kU32;
  std::variant<std::uint64_t, std::int64_t, double, bool, std::string> scalar;
  GgufValueType element_type = GgufValueType::kU32;  ///< arrays only
  std::vector<GgufValue> elements;                   ///< arrays only
};

/// One tensor of a GGUF file.
struct GgufTensorInfo {
  std::string name;
  std::vector<std::int64_t> ne;  ///< ggml order: ne[0] contiguous; 1 to 4 dims, each >= 1
  std::uint32_t type = 0;        ///< GgmlType value (always one ggml_block_layout knows)
  std::uint64_t offset = 0;      ///< inside the data section
  std::uint64_t nbytes = 0;      ///< numel / block_elems x block_bytes
  std::uint64_t numel() const noexcept;
  /// The PyTorch-order shape (ne reversed), e.g. [out, in] for a Linear weight.
  std::vector<std::int64_t> torch_shape() const;
};

/// The validated header of one GGUF file.
struct GgufHeader {
  std::uint32_t version = 0;
  std::uint64_t alignment = 32;
  std::uint64_t data_offset = 0;  ///< where the data section starts in the file
  std::uint64_t data_bytes = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;  ///< in file order
};

/// Parses and validates the header of a GGUF file whose complete content is `file`.
/// Checks: magic; version 2 or 3 (1 and newer ones refused by number); counts bounded by the
/// bytes left (no allocation a short file could not back); every string inside the file, keys
/// and tensor names unique and non-empty; value types known; arrays flat; `general.alignment`
/// (if present) a u32 power of two; each tensor 1..4 dims, each >= 1, a known type whose block
/// size divides ne[0], offset a multiple of the alignment, offset + nbytes inside the data
/// section (overflow-checked), and no two tensors overlapping.
/// Throws ModelLoadError "<label>: <problem> (at byte N)" on the first violation, naming the key
/// or tensor. Never reads out of bounds.
GgufHeader parse_gguf_header(std::span<const std::byte> file, const std::string& label);

/// A read-only, memory-mapped GGUF file with lookup by tensor name and typed metadata access.
class GgufFile {
 public:
  /// Maps and validates `path`. Throws IoError or ModelLoadError (message starts with `label`).
  GgufFile(const std::string& path, const std::string& label);

  const GgufHeader& header() const noexcept { return header_; }
  const std::string& label() const noexcept { return label_; }
  std::uint64_t file_bytes() const noexcept { return map_.size(); }
  /// nullptr when the file has no tensor of that name.
  const GgufTensorInfo* find(const std::string& name) const;
  /// The tensor `name` with `dims` dimensions. Throws ModelLoadError "LABEL: missing tensor NAME
  /// (WHY)" when absent and "LABEL: tensor NAME has N dims, expected DIMS" when it has another rank.
  const GgufTensorInfo& need_tensor(const std::string& name, std::size_t dims, const std::string& why) const;
  /// The tensor's bytes inside the mapping (zero-copy; aligned to the file's alignment relative
  /// to the mapping's start).
  std::span<const std::byte> data(const GgufTensorInfo& t) const noexcept;

  /// nullptr when absent.
  const GgufValue* find_value(const std::string& key) const;
  /// The value of an integer key of any width, as int64. Throws ModelLoadError naming the key
  /// when it is missing, not an integer, or does not fit.
  std::int64_t get_int(const std::string& key) const;
  /// get_int of a key that must be >= 1. Throws ModelLoadError as get_int, and naming the value
  /// otherwise.
  std::int64_t get_positive_int(const std::string& key) const;
  /// Throws ModelLoadError "<file>: metadata \"<key>\": <msg>".
  [[noreturn]] void metadata_error(const std::string& key, const std::string& msg) const;
  /// A float key (F32/F64), or an integer one converted. Throws ModelLoadError as get_int.
  double get_float(const std::string& key) const;
  /// A string key. Throws ModelLoadError when missing or not a string.
  const std::string& get_string(const std::string& key) const;
  /// An array key's elements (any element type). Throws ModelLoadError when missing or not an array.
  const std::vector<GgufValue>& get_array(const std::string& key) const;

 private:
  MappedFile map_;
  std::string label_;
  GgufHeader header_;
  std::unordered_map<std::string, std::size_t> index_;
};

}  // namespace clef

// SPDX-License-Identifier: MIT
// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the
// raw little-endian tensor data. Reading is zero-copy over an mmap; the header is validated
// strictly (the same rules as the reference `safetensors` library, plus clear messages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"

namespace clef {

/// Largest accepted JSON header, in bytes (the reference library uses the same bound).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

/// One tensor entry of a safetensors header.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;  ///< PyTorch order, e.g. Linear weight [out, in]
  std::uint64_t begin = 0;          ///< byte offset of the first element inside the data section
  std::uint64_t end = 0;            ///< one past the last byte inside the data section
  std::uint64_t numel() const noexcept;
  std::uint64_t nbytes() const noexcept { return end - begin; }
};

/// The validated header of one safetensors file.
struct SafetensorsHeader {
  std::uint64_t json_bytes = 0;     ///< N
  std::uint64_t data_offset = 0;    ///< 8 + N: where the data section starts in the file
  std::uint64_t data_bytes = 0;     ///< size of the data section
  std::vector<TensorInfo> tensors;  ///< sorted by `begin`
  std::map<std::string, std::string> metadata;
};

/// Parses and validates the header of a safetensors file whose complete content is `file`.
/// Checks: the 8-byte length is present; N <= kMaxSafetensorsHeaderBytes and 8 + N <= file size;
/// the JSON is well-formed UTF-8, an object, without duplicate names; each entry has exactly
/// dtype (known), shape (non-negative integers) and data_offsets ([begin <= end]); dtype size x
/// shape == end - begin (overflow-checked); offsets lie inside the data section; tensors
/// neither overlap nor leave gaps, and they cover the whole data section.
/// Throws ModelLoadError "<label>: <problem>" on the first violation. Never reads out of bounds.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& label);

/// A read-only, memory-mapped safetensors file with O(1) lookup by tensor name.
class SafetensorsFile {
 public:
  /// Maps and validates `path`. Throws IoError or ModelLoadError (message starts with `label`).
  SafetensorsFile(const std::string& path, const std::string& label);

  const SafetensorsHeader& header() const noexcept { return header_; }
  const std::string& label() const noexcept { return label_; }
  std::uint64_t file_bytes() const noexcept { return map_.size(); }
  /// nullptr when the file has no tensor of that name.
  const TensorInfo* find(const std::string& name) const;
  /// The tensor's bytes inside the mapping (zero-copy; any alignment).
  std::span<const std::byte> data(const TensorInfo& t) const noexcept;

 private:
  MappedFile map_;
  std::string label_;
  SafetensorsHeader header_;
  std::unordered_map<std::string, std::size_t> index_;
};

/// A tensor to write: `bytes` must hold exactly numel(shape) x dtype_size(dtype) bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

/// Writes a safetensors file (header padded with spaces to a multiple of 8 bytes, tensors in
/// the given order). Writes `path + ".tmp"` and renames it, so a failure never leaves a
/// half-written file under `path`. Throws InvalidArgument (bad sizes, duplicate names) or IoError.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// "[a, b, c]".
std::string shape_to_string(const std::vector<std::int64_t>& shape);

}  // namespace clef

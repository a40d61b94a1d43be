// SPDX-License-Identifier: MIT
// NumPy .npy files (format version 1.0/2.0, C order, little-endian): read and write float32 and
// int64 arrays. Used for hidden-state dumps and to exchange tensors with the Python reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace clef {

/// An array read from a .npy file. Exactly one of `f32` / `i64` is filled.
struct NpyArray {
  std::vector<std::int64_t> shape;
  std::vector<float> f32;         ///< dtype '<f4'
  std::vector<std::int64_t> i64;  ///< dtype '<i8' (also '<i4', widened)
  bool is_float() const noexcept { return !f32.empty() || i64.empty(); }
};

/// Reads a .npy file. Throws IoError (unreadable) or InvalidArgument (not a supported .npy:
/// wrong magic, Fortran order, big-endian, dtype other than <f4/<i8/<i4, size mismatch).
NpyArray read_npy(const std::string& path);

/// Writes a float32 array (row-major) to `path`. Throws IoError.
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* data);

}  // namespace clef

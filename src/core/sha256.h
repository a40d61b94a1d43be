// SPDX-License-Identifier: MIT
// SHA-256 of files and buffers (OpenSSL's libcrypto does the hashing).
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace clef {

/// Lower-case hex SHA-256 of a byte buffer.
std::string sha256_hex(std::span<const std::byte> data);
/// Lower-case hex SHA-256 of a file, streamed in 4 MiB blocks. Throws IoError.
std::string sha256_file_hex(const std::string& path);

}  // namespace clef

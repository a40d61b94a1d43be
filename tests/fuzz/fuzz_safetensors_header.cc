// SPDX-License-Identifier: MIT
// libFuzzer target: parse_safetensors_header must accept or reject any byte string with a
// ModelLoadError, never crash, hang or read out of bounds (ASan/UBSan watch the reads).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const clef::SafetensorsHeader h = clef::parse_safetensors_header(bytes, "fuzz");
    // Everything accepted must describe bytes inside the buffer.
    for (const auto& t : h.tensors) {
      if (h.data_offset + t.end > size || t.begin > t.end) __builtin_trap();
    }
  } catch (const clef::ModelLoadError&) {
  }
  return 0;
}
